// A SubmitRequest's arguments turned into the engine's TaskArgs, against one
// daemon tensor (id 1, "t", 1024 float32): counts, tags, offsets, shapes and
// dtypes from the wire must never make a view that leaves the tensor.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "submit_args.h"

namespace {
alignas(64) uint8_t g_buffer[4096];
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pto::v1::SubmitRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  ptod::TensorEntry t;
  t.id = 1;
  t.name = "t";
  t.tensor = pto::make_tensor(g_buffer, {1024}, PTO_FLOAT32);
  t.bytes = sizeof g_buffer;
  const auto resolve = [&](const pto::v1::TensorRef& ref, pto::ContinuousTensor* out, ptod::TensorEntry* e) {
    if (ref.tensor().id() != 1 && ref.tensor().name() != "t")
      return pto::Status::Error(pto::kWorkerNotRegistered, "no such tensor");
    *e = t;
    return ptod::TensorStore::view_of(t, ref.offset_bytes(),
                                      std::vector<uint32_t>(ref.shape().begin(), ref.shape().end()), ref.dtype(),
                                      ref.has_dtype(), out);
  };
  ptod::JobArgs job;
  if (ptod::job_args_from_proto(req.args(), resolve, &job).ok()) {
    for (int32_t i = 0; i < job.args.tensor_count(); ++i) {
      const pto::ContinuousTensor& x = job.args.tensor(i);
      const uint64_t lo = x.data, hi = lo + pto::tensor_bytes(x);
      if (lo < reinterpret_cast<uint64_t>(g_buffer) || hi > reinterpret_cast<uint64_t>(g_buffer) + sizeof g_buffer)
        __builtin_trap();
    }
  }
  return 0;
}
