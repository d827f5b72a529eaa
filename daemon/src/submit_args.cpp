#include "submit_args.h"
#include "wire_enums.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

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

namespace {
std::string shape_text(const std::vector<uint64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }
}  // namespace

Status check_chip_signature(const std::string& callable, const std::vector<pto::package::ArgSpec>& signature,
                            const pto::TaskArgs& args) {
  auto bad = [](std::string m) { return Status::Error(pto::kWorkerInvalidArgument, std::move(m)); };
  std::vector<const pto::package::ArgSpec*> tensors;
  int scalars = 0;
  for (const auto& a : signature) {
    if (a.is_tensor())
      tensors.push_back(&a);
    else
      ++scalars;
  }
  if (args.tensor_count() != static_cast<int>(tensors.size())) {
    std::vector<std::string> names;
    for (const auto* a : tensors) names.push_back(a->name);
    return bad(fmt::format("'{}' takes {} tensor argument{} ({}); the job gives {}", callable, tensors.size(),
                           tensors.size() == 1 ? "" : "s", fmt::join(names, ", "), args.tensor_count()));
  }
  for (int i = 0; i < args.tensor_count(); ++i) {
    const pto::package::ArgSpec& want = *tensors[i];
    const pto::ContinuousTensor& t = args.tensor(i);
    std::vector<uint64_t> got(t.shape, t.shape + std::max(0, std::min(t.ndims, PTO_TENSOR_MAX_DIMS)));
    if (t.dtype != want.dtype || got != want.shape)
      return bad(fmt::format("argument {} ('{}') of '{}' must be {} {}; the job gives {} {}", i, want.name, callable,
                             pto_dtype_name(want.dtype), shape_text(want.shape), pto_dtype_name(t.dtype),
                             shape_text(got)));
  }
  if (args.scalar_count() != 0 && args.scalar_count() != scalars)
    return bad(fmt::format("'{}' takes {} scalar{} (or none, for its config's values); the job gives {}", callable,
                           scalars, scalars == 1 ? "" : "s", args.scalar_count()));
  return Status::Ok();
}

}  // namespace ptod
