/* Element types and tensor ranks: one definition for every level. The chip
 * runtime's orchestration API names the types PTO2_* (pto2/orchestration_api.h),
 * the engine's native ABI PTO_* (pto/native_abi.h); both are these values,
 * and so are the wire's pto.v1.DataType (pinned by a test) and the dtype of
 * a kernel config. Plain C: kernels, orchestrations and native callables in
 * any language with a C FFI include it. */
#ifndef PTO_DTYPE_H
#define PTO_DTYPE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  PTO_FLOAT32 = 0,
  PTO_FLOAT16 = 1,
  PTO_BFLOAT16 = 2,
  PTO_INT32 = 3,
  PTO_INT64 = 4,
  PTO_INT16 = 5,
  PTO_INT8 = 6,
  PTO_UINT8 = 7,
  PTO_FLOAT64 = 8
};
#define PTO_DTYPE_COUNT 9

/* Bytes per element; 0 for a value that is not a dtype. */
static inline uint32_t pto_dtype_size(int32_t dtype) {
  switch (dtype) {
    case PTO_FLOAT32: case PTO_INT32: return 4;
    case PTO_FLOAT16: case PTO_BFLOAT16: case PTO_INT16: return 2;
    case PTO_INT64: case PTO_FLOAT64: return 8;
    case PTO_INT8: case PTO_UINT8: return 1;
    default: return 0;
  }
}

/* "float32", ... (the names a kernel config uses); "dtype?" for others. */
static inline const char* pto_dtype_name(int32_t dtype) {
  switch (dtype) {
    case PTO_FLOAT32: return "float32";
    case PTO_FLOAT16: return "float16";
    case PTO_BFLOAT16: return "bfloat16";
    case PTO_INT32: return "int32";
    case PTO_INT64: return "int64";
    case PTO_INT16: return "int16";
    case PTO_INT8: return "int8";
    case PTO_UINT8: return "uint8";
    case PTO_FLOAT64: return "float64";
    default: return "dtype?";
  }
}

/* Ranks. A tensor descriptor of the engine (PtoTensor: data, shape, dtype)
 * has at most PTO_TENSOR_MAX_DIMS dimensions. A view of the chip runtime
 * (Tensor: raw shape, offsets, shapes) has at most PTO2_MAX_DIMS: sixteen of
 * them sit in every task descriptor and one in every TensorMap entry, where
 * two more dimensions would cost a cache line on the submit path; so a chip
 * callable's tensors have at most PTO2_MAX_DIMS dimensions (a kernel config
 * says so), and only sub callables see more. */
#define PTO_TENSOR_MAX_DIMS 6
#define PTO2_MAX_DIMS 4

#ifdef __cplusplus
}
#endif

#endif /* PTO_DTYPE_H */
