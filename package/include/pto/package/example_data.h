// An example's data, shared by pto2-run and `ptoctl run-example`: inputs
// generated from the kernel config's [[args]], the reference ("golden")
// library run on host copies, and outputs compared within the configured
// tolerances.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "pto2/errors.h"
#include "pto/package/chip_package.h"

namespace pto::package {

// Fills buf (a.bytes() long) as a.generate says: random in [low, high)
// (integers floored), constant value, arange from low, or zeros.
void generate_input(const ArgSpec& a, std::mt19937_64& rng, std::vector<uint8_t>& buf);

// An output's starting content (buf, a.bytes() long): NaN for floating-point
// dtypes, the byte 0xA5 repeated for integers, so an element no task wrote
// cannot match a golden.
void fill_unwritten(const ArgSpec& a, std::vector<uint8_t>& buf);

// The reference library of an example exports
//   extern "C" int pto2_reference(uint64_t* args, int arg_count);
// receiving the orchestration's argument array with host pointers.
Status run_reference(const ChipConfig& cfg, std::vector<uint64_t>& host_args);

struct Comparison {
  uint64_t elements = 0, matched = 0, first_bad = ~0ull;
  double got = 0, want = 0;  // at first_bad
  bool pass() const { return matched == elements; }
  // "f: PASS (16384/16384 elements matched)", plus the first mismatch.
  std::string describe(const ArgSpec& a) const;
};
Comparison compare_output(const ArgSpec& a, const uint8_t* got, const uint8_t* want);

}  // namespace pto::package
