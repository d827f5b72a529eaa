#include "submit_args.h"
#include "wire_enums.h"

#include <fmt/format.h>

namespace ptod {

Status job_args_from_proto(const pto::v1::TaskArgs& a, const ResolveTensor& resolve, JobArgs* out) {
  auto bad = [](std::string m) { return Status::Error(pto::kWorkerInvalidArgument, std::move(m)); };
  // Bounds on what a queued job may hold (the engine's mailbox takes at most
  // 793 tensors anyway).
  if (a.tensors_size() > kMaxJobTensors || a.scalars_size() > kMaxJobScalars)
    return bad(fmt::format("a job holds at most {} tensors and {} scalars (got {}, {})", kMaxJobTensors, kMaxJobScalars,
                           a.tensors_size(), a.scalars_size()));
  if (a.tags_size() > a.tensors_size())
    return bad(fmt::format("{} tags for {} tensors", a.tags_size(), a.tensors_size()));
  for (int i = 0; i < a.tensors_size(); ++i) {
    const int tag = i < a.tags_size() ? a.tags(i) : pto::v1::INPUT;
    if (tag < 0 || tag > pto::v1::NO_DEP) return bad(fmt::format("tensor {}: unknown tag {}", i, tag));
    pto::ContinuousTensor t;
    TensorEntry e;
    if (Status s = resolve(a.tensors(i), &t, &e); !s.ok())
      return Status::Error(s.code, fmt::format("tensor {}: {}", i, s.message));
    out->pinned.push_back(e.id);
    const auto tt = from_wire(static_cast<pto::v1::TensorTag>(tag));
    // A daemon tensor has an address, so the engine treats OUTPUT as "write it".
    out->args.add_tensor(t, tt);
    if (tt == pto::TensorArgType::OUTPUT || tt == pto::TensorArgType::INOUT ||
        tt == pto::TensorArgType::OUTPUT_EXISTING)
      out->outputs.push_back(e);
  }
  for (uint64_t v : a.scalars()) out->args.add_scalar(v);
  return Status::Ok();
}

}  // namespace ptod
