#include "pto/package/example_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "pto/base/shared_library.h"

namespace pto::package {
namespace {

// An element of type T at p (unaligned), and back.
template <class T>
double load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return double(v);
}
template <class T>
void store(uint8_t* p, double x) {
  const T v = T(x);
  std::memcpy(p, &v, sizeof v);
}

double element_as_double(const uint8_t* p, int32_t dtype) {
  switch (dtype) {
    case PTO2_FLOAT32: return load<float>(p);
    case PTO2_FLOAT64: return load<double>(p);
    case PTO2_INT32: return load<int32_t>(p);
    case PTO2_INT64: return load<int64_t>(p);
    case PTO2_INT16: return load<int16_t>(p);
    case PTO2_INT8: return load<int8_t>(p);
    case PTO2_UINT8: return load<uint8_t>(p);
    default: return std::nan("");
  }
}

// Saturates x into [lo, hi] (NaN to 0): a float outside an integer type's
// range would convert with undefined behaviour.
double clamp_to(double x, double lo, double hi) { return std::isnan(x) ? 0.0 : std::min(std::max(x, lo), hi); }

void store_double(uint8_t* p, int32_t dtype, double x) {
  switch (dtype) {
    case PTO2_INT32: x = clamp_to(x, -2147483648.0, 2147483647.0); break;
    case PTO2_INT64: x = clamp_to(x, -9223372036854775808.0, 9223372036854774784.0); break;
    case PTO2_INT16: x = clamp_to(x, -32768.0, 32767.0); break;
    case PTO2_INT8: x = clamp_to(x, -128.0, 127.0); break;
    case PTO2_UINT8: x = clamp_to(x, 0.0, 255.0); break;
    default: break;
  }
  switch (dtype) {
    case PTO2_FLOAT32: store<float>(p, x); break;
    case PTO2_FLOAT64: store<double>(p, x); break;
    case PTO2_INT32: store<int32_t>(p, x); break;
    case PTO2_INT64: store<int64_t>(p, x); break;
    case PTO2_INT16: store<int16_t>(p, x); break;
    case PTO2_INT8: store<int8_t>(p, x); break;
    case PTO2_UINT8: store<uint8_t>(p, x); break;
    default: break;
  }
}

using ReferenceFn = int (*)(uint64_t* args, int arg_count);

}  // namespace

void generate_input(const ArgSpec& a, std::mt19937_64& rng, std::vector<uint8_t>& buf) {
  const uint32_t esz = pto2_dtype_size(a.dtype);
  const bool integer = a.dtype != PTO2_FLOAT32 && a.dtype != PTO2_FLOAT64;
  std::uniform_real_distribution<double> real(a.low, a.high);
  buf.assign(a.bytes(), 0);
  for (uint64_t i = 0; i < a.elements(); ++i) {
    double x = 0;
    if (a.generate == "random")
      x = integer ? std::floor(real(rng)) : real(rng);
    else if (a.generate == "constant")
      x = a.value;
    else if (a.generate == "arange")
      x = a.low + double(i);
    store_double(buf.data() + i * esz, a.dtype, x);
  }
}

void fill_unwritten(const ArgSpec& a, std::vector<uint8_t>& buf) {
  buf.assign(a.bytes(), 0xA5);
  if (a.dtype != PTO2_FLOAT32 && a.dtype != PTO2_FLOAT64) return;
  const uint32_t esz = pto2_dtype_size(a.dtype);
  for (uint64_t i = 0; i < a.elements(); ++i) store_double(buf.data() + i * esz, a.dtype, std::nan(""));
}

Status run_reference(const ChipConfig& cfg, std::vector<uint64_t>& host_args) {
  if (cfg.reference.empty())
    return Status::Error(kInvalidArgument, fmt::format("{} has no [golden] library", cfg.path));
  Status ls;
  auto lib = SharedLibrary::open(cfg.reference, &ls);
  auto ref = lib ? reinterpret_cast<ReferenceFn>(lib->symbol("pto2_reference", &ls)) : nullptr;
  if (!ref) return ls;
  if (int rc = ref(host_args.data(), static_cast<int>(host_args.size())); rc != 0)
    return Status::Error(kInvalidArgument, fmt::format("{} returned {}", cfg.reference, rc));
  return Status::Ok();
}

Comparison compare_output(const ArgSpec& a, const uint8_t* got, const uint8_t* want) {
  Comparison c;
  c.elements = a.elements();
  const uint32_t esz = pto2_dtype_size(a.dtype);
  for (uint64_t e = 0; e < c.elements; ++e) {
    const double x = element_as_double(got + e * esz, a.dtype);
    const double y = element_as_double(want + e * esz, a.dtype);
    if (std::fabs(x - y) <= a.atol + a.rtol * std::fabs(y)) {
      ++c.matched;
    } else if (c.first_bad == ~0ull) {
      c.first_bad = e;
      c.got = x;
      c.want = y;
    }
  }
  return c;
}

std::string Comparison::describe(const ArgSpec& a) const {
  std::string s = fmt::format("{}: {} ({}/{} elements matched)", a.name, pass() ? "PASS" : "FAIL", matched, elements);
  if (!pass())
    s += fmt::format("\n  first mismatch at element {}: got {:.9g}, expected {:.9g} (rtol {}, atol {})", first_bad, got,
                     want, a.rtol, a.atol);
  return s;
}

}  // namespace pto::package
