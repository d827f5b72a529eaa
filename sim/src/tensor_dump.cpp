#include "pto2/sim/tensor_dump.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "pto/package/npy.h"

namespace pto2::sim {

std::vector<uint8_t> dense_copy(const Tensor& t) {
  const uint64_t esz = pto_dtype_size(t.dtype);
  const int32_t nd = t.ndim;
  std::vector<uint8_t> out(pto2_tensor_numel(&t) * esz);
  if (out.empty() || nd < 1) return out;
  const uint64_t row = t.shapes[nd - 1] * esz;
  const uint64_t rows = out.size() / row;
  uint32_t idx[PTO2_MAX_DIMS] = {};
  for (uint64_t r = 0; r < rows; ++r) {
    uint64_t elem = 0;
    for (int32_t d = 0; d < nd; ++d) elem += (t.offsets[d] + (d < nd - 1 ? idx[d] : 0)) * pto2_tensor_stride(&t, d);
    std::memcpy(out.data() + r * row, reinterpret_cast<const uint8_t*>(t.addr) + elem * esz, row);
    for (int32_t d = nd - 2; d >= 0; --d) {
      if (++idx[d] < t.shapes[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

TensorDump::TensorDump(std::string dir, KernelName name_of) : dir_(std::move(dir)), name_of_(std::move(name_of)) {}

Status TensorDump::prepare() const {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return Status::Error(kInvalidArgument, fmt::format("tensor dump: cannot create {}: {}", dir_, ec.message()));
  return Status::Ok();
}

void TensorDump::task_finished(uint64_t task_id, int32_t kernel_id, int32_t worker_type, const Tensor* const* tensors,
                               int32_t num_params) {
  const std::string kernel = name_of_ ? name_of_(kernel_id, worker_type) : fmt::format("func{}", kernel_id);
  for (int32_t i = 0; i < num_params; ++i) {
    const Tensor* t = tensors[i];
    if (t == nullptr) continue;
    std::vector<uint64_t> shape(t->shapes, t->shapes + t->ndim);
    const std::vector<uint8_t> bytes = dense_copy(*t);
    const std::string path = fmt::format("{}/task-{}-{}-arg{}.npy", dir_, task_id, kernel, i);
    // numpy has no bfloat16: such tensors are written as their 16-bit patterns.
    const std::string descr = t->dtype == PTO_BFLOAT16 ? "<u2" : pto::package::npy_descr(t->dtype);
    Status st = pto::package::write_npy(path, descr, shape, bytes.data(), bytes.size());
    std::lock_guard<std::mutex> g(mu_);
    if (st.ok())
      ++files_;
    else if (first_error_.ok())
      first_error_ = st;
  }
}

Status TensorDump::status() const {
  std::lock_guard<std::mutex> g(mu_);
  return first_error_;
}

uint64_t TensorDump::files() const {
  std::lock_guard<std::mutex> g(mu_);
  return files_;
}

}  // namespace pto2::sim
