// A job's arguments as they arrive (pto.v1.TaskArgs) turned into the engine's
// TaskArgs: counts and tags checked, each TensorRef resolved to a view of a
// daemon tensor (offset, shape and dtype checked against it, the tensor
// pinned). A pure function of the message and the resolver, so a fuzzer can
// drive it; every refusal is INVALID_ARGUMENT-class and names the argument.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pto/package/chip_package.h"
#include "pto/task_args.h"
#include "pto/v1/ptod.pb.h"
#include "tensor_store.h"

namespace ptod {

inline constexpr int kMaxJobTensors = 1024;
inline constexpr int kMaxJobScalars = 4096;

// Resolves a TensorRef to a view of a daemon tensor and pins it (the store's
// view_and_pin); the entry is the whole tensor.
using ResolveTensor = std::function<Status(const pto::v1::TensorRef&, pto::ContinuousTensor*, TensorEntry*)>;

struct JobArgs {
  pto::TaskArgs args;
  std::vector<TensorEntry> outputs;  // daemon tensors the job writes
  std::vector<uint64_t> pinned;      // tensor ids pinned by resolve (also on failure: the caller unpins)
};

Status job_args_from_proto(const pto::v1::TaskArgs& a, const ResolveTensor& resolve, JobArgs* out);

// A chip callable's arguments against the signature its kernel config
// declares: the tensor count, each tensor's dtype and shape, and the scalar
// count (0 = the config's values). INVALID_ARGUMENT naming the argument by
// position and name, in dtype names and shapes: "argument 2 ('f') of 'vector'
// must be float32 [16384]; the job gives int32 [4096]". `callable` is how
// the client named it.
Status check_chip_signature(const std::string& callable, const std::vector<pto::package::ArgSpec>& signature,
                            const pto::TaskArgs& args);

}  // namespace ptod
