#include "pto/base/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

namespace pto {

std::string to_hex(const Digest& d) {
  static const char* k = "0123456789abcdef";
  std::string s(64, '0');
  for (size_t i = 0; i < d.size(); ++i) {
    s[2 * i] = k[d[i] >> 4];
    s[2 * i + 1] = k[d[i] & 15];
  }
  return s;
}

Digest sha256(const void* data, size_t bytes) {
  Digest d{};
  unsigned int len = 0;
  EVP_Digest(data, bytes, d.data(), &len, EVP_sha256(), nullptr);
  return d;
}

Status file_sha256(const std::string& path, Digest* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::Error(kInvalidArgument, "cannot read '" + path + "': " + errno_text(errno));
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 16);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (f.gcount() > 0) EVP_DigestUpdate(ctx, buf.data(), static_cast<size_t>(f.gcount()));
  }
  const bool bad = f.bad();
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, out->data(), &len);
  EVP_MD_CTX_free(ctx);
  if (bad) return Status::Error(kInvalidArgument, "error reading '" + path + "'");
  return Status::Ok();
}

}  // namespace pto
