// Tensors whose bytes overlap are ordered whatever their base addresses:
// externals over the same memory at different bases, an external and a view,
// views of different externals. The first kernel of each pair is slow, so a
// missing edge shows as a wrong value whenever kernels run on executor threads.
#include <catch2/catch.hpp>

#include <vector>

#include "test_support.h"

using namespace pto2;
using namespace pto2::test;

namespace {

#ifdef PTO_UNDER_TSAN
constexpr int kReps = 100;
#else
constexpr int kReps = 1000;
#endif
constexpr uint64_t kSlowUs = 50;

Tensor ext(int64_t* p, uint32_t n) {
  const uint32_t shape[1] = {n};
  return make_tensor_external(p, shape, 1, PTO2_INT64);
}

int64_t slow_copy(PTO2Runtime* rt, Tensor& in, Tensor& out, uint64_t us) {
  PTOParam p[] = {make_input_param(in), make_output_param(out), make_scalar_param(us)};
  return pto2_rt_submit_task(rt, kSlowCopy, PTO2_WORKER_VECTOR, p, 3);
}

int64_t fill(PTO2Runtime* rt, Tensor& out, int64_t value) {
  PTOParam p[] = {make_output_param(out), make_scalar_param(uint64_t(value))};
  return pto2_rt_submit_task(rt, kFill, PTO2_WORKER_VECTOR, p, 2);
}

}  // namespace

TEST_CASE("a reader through another base waits for the writer (read after write)", "[alias]") {
  const int exec = GENERATE(1, 2, 4);
  Chip chip(small_config(2), exec);
  REQUIRE(chip.runtime);
  std::vector<int64_t> src(16), buf(16), dst(8);
  for (int rep = 0; rep < kReps; ++rep) {
    for (int i = 0; i < 16; ++i) src[i] = rep * 100 + i;
    std::fill(buf.begin(), buf.end(), -1);
    std::fill(dst.begin(), dst.end(), -2);
    RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
      Tensor s = ext(src.data(), 16), whole = ext(buf.data(), 16), upper = ext(buf.data() + 8, 8),
             d = ext(dst.data(), 8);
      slow_copy(rt, s, whole, kSlowUs);  // writes buf[0..16)
      slow_copy(rt, upper, d, 0);        // reads buf[8..16) through base buf + 8
      return 0;
    });
    REQUIRE(r.ok());
    INFO("exec=" << exec << " rep=" << rep);
    for (int i = 0; i < 8; ++i) REQUIRE(dst[i] == rep * 100 + 8 + i);
  }
}

TEST_CASE("a writer through another base waits for the reader (write after read)", "[alias]") {
  const int exec = GENERATE(1, 2, 4);
  Chip chip(small_config(2), exec);
  REQUIRE(chip.runtime);
  std::vector<int64_t> buf(16), dst(8);
  for (int rep = 0; rep < kReps / 4; ++rep) {
    for (int i = 0; i < 16; ++i) buf[i] = rep + i;
    RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
      Tensor upper = ext(buf.data() + 8, 8), whole = ext(buf.data(), 16), d = ext(dst.data(), 8);
      slow_copy(rt, upper, d, kSlowUs);  // reads buf[8..16) slowly
      fill(rt, whole, -7);               // overwrites all of buf
      return 0;
    });
    REQUIRE(r.ok());
    for (int i = 0; i < 8; ++i) REQUIRE(dst[i] == rep + 8 + i);
    for (int i = 0; i < 16; ++i) REQUIRE(buf[i] == -7);
  }
}

TEST_CASE("two writers through different bases keep program order (write after write)", "[alias]") {
  const int exec = GENERATE(1, 2, 4);
  Chip chip(small_config(2), exec);
  REQUIRE(chip.runtime);
  std::vector<int64_t> src(16, 1), buf(16);
  for (int rep = 0; rep < kReps / 4; ++rep) {
    std::fill(buf.begin(), buf.end(), 0);
    RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
      Tensor s = ext(src.data(), 16), whole = ext(buf.data(), 16), mid = ext(buf.data() + 4, 4);
      slow_copy(rt, s, whole, kSlowUs);  // buf[0..16) = 1, slowly
      fill(rt, mid, 2);                  // then buf[4..8) = 2
      return 0;
    });
    REQUIRE(r.ok());
    for (int i = 0; i < 16; ++i) REQUIRE(buf[i] == (i >= 4 && i < 8 ? 2 : 1));
  }
}

TEST_CASE("views of different externals over the same rows are ordered", "[alias]") {
  const int exec = GENERATE(1, 2, 4);
  Chip chip(small_config(2), exec);
  REQUIRE(chip.runtime);
  // buf is 8 rows x 4; A = rows 0..8 at buf, B = rows 3..8 at buf + 12.
  std::vector<int64_t> src(8, 5), buf(32), dst(4);
  for (int rep = 0; rep < kReps / 4; ++rep) {
    std::fill(buf.begin(), buf.end(), 0);
    std::fill(dst.begin(), dst.end(), 0);
    RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
      const uint32_t a_shape[2] = {8, 4}, b_shape[2] = {5, 4}, two_rows[2] = {2, 4}, one_row[2] = {1, 4};
      Tensor A = make_tensor_external(buf.data(), a_shape, 2, PTO2_INT64);
      Tensor B = make_tensor_external(buf.data() + 12, b_shape, 2, PTO2_INT64);
      const uint32_t a_off[2] = {4, 0}, b_off[2] = {2, 0};  // A rows 4..6; B row 2 = buf row 5
      Tensor a_rows = tensor_view(A, a_off, two_rows), b_row = tensor_view(B, b_off, one_row);
      Tensor s = ext(src.data(), 8), d = ext(dst.data(), 4);
      slow_copy(rt, s, a_rows, kSlowUs);  // buf rows 4..6 = 5
      slow_copy(rt, b_row, d, 0);         // reads buf row 5
      return 0;
    });
    REQUIRE(r.ok());
    for (int i = 0; i < 4; ++i) REQUIRE(dst[i] == 5);
  }
}

TEST_CASE("adjacent externals that do not overlap are not aliases", "[alias]") {
  Chip chip(small_config(1), 0);
  REQUIRE(chip.runtime);
  std::vector<int64_t> buf(32, 0);
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    Tensor lo = ext(buf.data(), 16), hi = ext(buf.data() + 16, 16);
    fill(rt, lo, 1);
    fill(rt, hi, 2);
    return 0;
  });
  REQUIRE(r.ok());
  for (int i = 0; i < 32; ++i) REQUIRE(buf[i] == (i < 16 ? 1 : 2));
}

TEST_CASE("an external tensor inside the runtime's heap is refused", "[alias]") {
  Chip chip(small_config(1), 0);
  REQUIRE(chip.runtime);
  RunResult r = chip.runtime->run([&](PTO2Runtime* rt) {
    const uint32_t shape[1] = {16};
    Tensor t = make_tensor(shape, 1, PTO2_INT64);
    fill(rt, t, 3);  // allocates t from the heap ring
    Tensor inside = ext(reinterpret_cast<int64_t*>(t.addr) + 4, 4);
    return fill(rt, inside, 4) < 0 ? 0 : 1;
  });
  REQUIRE(r.status.code == kInvalidArgument);
  CHECK_THAT(r.status.message, Catch::Contains("inside the runtime's heap rings"));
}
