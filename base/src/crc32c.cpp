#include "pto/base/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace pto {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

uint32_t by_table(uint32_t c, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) c = kTable[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t one_stream(uint32_t c, const uint8_t* p, size_t n) {
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
  }
  auto c32 = static_cast<uint32_t>(c64);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return c32;
}

// The instruction takes 3 cycles and starts one per cycle: one dependent
// chain uses a third of it. Three chains over three consecutive blocks run
// at once, then join: the register after block A and then B is the
// register after A moved over |B| zero bytes, XOR B's own register from 0
// (the CRC is linear). Moving over kBlock zeros is a linear map of the
// 32-bit register, tabulated per byte.
constexpr size_t kBlock = 4096;

struct Shift {
  uint32_t t[4][256];
  uint32_t operator()(uint32_t c) const {
    return t[0][c & 0xFF] ^ t[1][(c >> 8) & 0xFF] ^ t[2][(c >> 16) & 0xFF] ^ t[3][c >> 24];
  }
};

const Shift& shift_by_block() {
  static const Shift s = [] {
    static const uint8_t zeros[kBlock] = {};
    Shift out{};
    uint32_t basis[32];
    for (int bit = 0; bit < 32; ++bit) basis[bit] = one_stream(1u << bit, zeros, kBlock);
    for (int k = 0; k < 4; ++k)
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int bit = 0; bit < 8; ++bit)
          if (b & (1u << bit)) v ^= basis[8 * k + bit];
        out.t[k][b] = v;
      }
    return out;
  }();
  return s;
}

__attribute__((target("sse4.2"))) uint32_t by_instruction(uint32_t c, const uint8_t* p, size_t n) {
  if (n >= 3 * kBlock) {
    const Shift& shift = shift_by_block();
    for (; n >= 3 * kBlock; n -= 3 * kBlock, p += 3 * kBlock) {
      uint64_t a = c, b = 0, d = 0;
      for (size_t i = 0; i < kBlock; i += 8) {
        uint64_t va, vb, vd;
        std::memcpy(&va, p + i, 8);
        std::memcpy(&vb, p + kBlock + i, 8);
        std::memcpy(&vd, p + 2 * kBlock + i, 8);
        a = _mm_crc32_u64(a, va);
        b = _mm_crc32_u64(b, vb);
        d = _mm_crc32_u64(d, vd);
      }
      c = shift(shift(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b)) ^ static_cast<uint32_t>(d);
    }
  }
  return one_stream(c, p, n);
}
bool have_instruction() {
  static const bool yes = [] {
    __builtin_cpu_init();  // may run before libgcc's own initialisation
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return yes;
}
#endif

}  // namespace

uint32_t crc32c(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  if (have_instruction()) return ~by_instruction(c, p, n);
#endif
  return ~by_table(c, p, n);
}

}  // namespace pto
