#include "pto/base/sha256.h"

// The low-level SHA-256 functions, not EVP: EVP's first use initialises
// OpenSSL under library locks, and a process that forks while another thread
// holds one (the Worker forks replacement children while its caller hashes a
// library) leaves a child that hangs on its first hash. SHA256_Init/Update/
// Final take no lock and fetch no provider; the one-shot SHA256() does both.
// OpenSSL 3 marks them deprecated in favour of EVP, for reasons (providers,
// FIPS) that do not apply to naming content.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>

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
  // Not the one-shot SHA256(): OpenSSL 3 implements it with an EVP fetch.
  Digest d{};
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, data, bytes);
  SHA256_Final(d.data(), &ctx);
  return d;
}

Status file_sha256(const std::string& path, Digest* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::Error(kInvalidArgument, "cannot read '" + path + "': " + errno_text(errno));
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  std::vector<char> buf(1 << 16);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (f.gcount() > 0) SHA256_Update(&ctx, buf.data(), static_cast<size_t>(f.gcount()));
  }
  const bool bad = f.bad();
  SHA256_Final(out->data(), &ctx);
  if (bad) return Status::Error(kInvalidArgument, "error reading '" + path + "'");
  return Status::Ok();
}

}  // namespace pto
