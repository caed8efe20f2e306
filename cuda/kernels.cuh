/* kernels.cuh: device helpers the kernels of cuda/ops share: loading and
 * storing any dtype with the CPU's conversion rules (core/dtype.c), strided
 * N-d index spaces over several operands, launch sizes and dtype dispatch.
 * Header-only; nothing here launches. */
#ifndef LUON_KERNELS_CUH
#define LUON_KERNELS_CUH

#include "internal_cuda.h"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define LU_THREADS 256
#define LU_MAX_OPS 5 /* as LU_ITER_MAX_OPS (core/internal.h) */

/* ---- dtype conversion (as core/dtype.c: via double, ints saturate from floats) ---- */

__device__ __forceinline__ int64_t lu_to_i64(double v) {
  if (v != v) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return (int64_t)v;
}

template <class T> struct lu_is_int { static const bool v = true; };
template <> struct lu_is_int<float> { static const bool v = false; };
template <> struct lu_is_int<double> { static const bool v = false; };

/* A float value as T (integers saturate through int64, then wrap). */
template <class T> __device__ __forceinline__ T lu_from_f(double v) {
  if (lu_is_int<T>::v) return (T)lu_to_i64(v);
  return (T)v;
}
/* An integer value as T (floats through double, as the CPU does). */
template <class T> __device__ __forceinline__ T lu_from_i(int64_t v) {
  if (lu_is_int<T>::v) return (T)v;
  return (T)(double)v;
}

/* Element i of buffer p (element 0 at p) of dtype dt, read as T. */
template <class T> __device__ __forceinline__ T lu_ld(const void *p, int32_t dt, int64_t i) {
  switch (dt) {
  case LUON_DTYPE_F32: {
    float v = ((const float *)p)[i];
    return lu_is_int<T>::v ? lu_from_f<T>(v) : (T)v;
  }
  case LUON_DTYPE_F64: return lu_from_f<T>(((const double *)p)[i]);
  case LUON_DTYPE_F16: return lu_from_f<T>(__half2float(((const __half *)p)[i]));
  case LUON_DTYPE_BF16: return lu_from_f<T>(__bfloat162float(((const __nv_bfloat16 *)p)[i]));
  case LUON_DTYPE_I32: return lu_from_i<T>(((const int32_t *)p)[i]);
  case LUON_DTYPE_I64: return lu_from_i<T>(((const int64_t *)p)[i]);
  case LUON_DTYPE_U8: return lu_from_i<T>(((const uint8_t *)p)[i]);
  case LUON_DTYPE_I8: return lu_from_i<T>(((const int8_t *)p)[i]);
  case LUON_DTYPE_I16: return lu_from_i<T>(((const int16_t *)p)[i]);
  case LUON_DTYPE_U16: return lu_from_i<T>(((const uint16_t *)p)[i]);
  default: return (T)(((const uint8_t *)p)[i] != 0);
  }
}

/* Element i as a truth value (nonzero; NaN is true), as a bool conversion. */
__device__ __forceinline__ bool lu_ld_truth(const void *p, int32_t dt, int64_t i) {
  switch (dt) {
  case LUON_DTYPE_F32: return ((const float *)p)[i] != 0;
  case LUON_DTYPE_F64: return ((const double *)p)[i] != 0;
  case LUON_DTYPE_F16: return __half2float(((const __half *)p)[i]) != 0;
  case LUON_DTYPE_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]) != 0;
  case LUON_DTYPE_I32: return ((const int32_t *)p)[i] != 0;
  case LUON_DTYPE_I64: return ((const int64_t *)p)[i] != 0;
  case LUON_DTYPE_I16:
  case LUON_DTYPE_U16: return ((const uint16_t *)p)[i] != 0;
  default: return ((const uint8_t *)p)[i] != 0;
  }
}

/* Store v (of type V) as element i of dtype dt. */
template <class V> __device__ __forceinline__ void lu_st(void *p, int32_t dt, int64_t i, V v) {
  const bool vi = lu_is_int<V>::v;
  switch (dt) {
  case LUON_DTYPE_F32: ((float *)p)[i] = vi ? (float)(double)v : (float)v; break;
  case LUON_DTYPE_F64: ((double *)p)[i] = (double)v; break;
  case LUON_DTYPE_F16: ((__half *)p)[i] = __float2half_rn((float)v); break;
  case LUON_DTYPE_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); break;
  case LUON_DTYPE_I32: ((int32_t *)p)[i] = vi ? (int32_t)(int64_t)v : (int32_t)lu_to_i64((double)v); break;
  case LUON_DTYPE_I64: ((int64_t *)p)[i] = vi ? (int64_t)v : lu_to_i64((double)v); break;
  case LUON_DTYPE_U8: ((uint8_t *)p)[i] = vi ? (uint8_t)(int64_t)v : (uint8_t)lu_to_i64((double)v); break;
  case LUON_DTYPE_I8: ((int8_t *)p)[i] = vi ? (int8_t)(int64_t)v : (int8_t)lu_to_i64((double)v); break;
  case LUON_DTYPE_I16: ((int16_t *)p)[i] = vi ? (int16_t)(int64_t)v : (int16_t)lu_to_i64((double)v); break;
  case LUON_DTYPE_U16: ((uint16_t *)p)[i] = vi ? (uint16_t)(int64_t)v : (uint16_t)lu_to_i64((double)v); break;
  default: ((uint8_t *)p)[i] = v != (V)0; break;
  }
}

/* ---- strided index spaces ------------------------------------------------------ */

/* An N-d index space and up to LU_MAX_OPS operands over it: base pointers
 * (element 0 of each view), dtypes and element strides (0 on broadcast
 * axes). Passed to kernels by value. */
typedef struct lu_space {
  int nd, nops;
  int64_t n;                      /* elements of the space */
  int64_t shape[LU_MAXD];
  int64_t st[LU_MAX_OPS][LU_MAXD];
  void *p[LU_MAX_OPS];
  int32_t dt[LU_MAX_OPS];
  bool flat;                      /* every operand dense (offset i) or scalar (offset 0) */
  bool scalar[LU_MAX_OPS];
} lu_space;

/* Element offsets of index i for every operand. */
__device__ __forceinline__ void lu_offsets(const lu_space &s, int64_t i, int64_t *off) {
  if (s.flat) {
#pragma unroll
    for (int k = 0; k < LU_MAX_OPS; k++) off[k] = s.scalar[k] ? 0 : i;
    return;
  }
#pragma unroll
  for (int k = 0; k < LU_MAX_OPS; k++) off[k] = 0;
  for (int d = s.nd - 1; d >= 0 && i; d--) {
    int64_t q = i / s.shape[d], r = i - q * s.shape[d];
    i = q;
#pragma unroll
    for (int k = 0; k < LU_MAX_OPS; k++) off[k] += r * s.st[k][d];
  }
}

/* Host: start a space of shape (nd, shape). */
void lu_space_init(lu_space *s, int nd, const int64_t *shape);
/* Host: add tensor t as the next operand, broadcast to the space's shape. */
void lu_space_add(lu_space *s, const luon_tensor *t);
/* Host: add a raw operand with explicit element strides (nd of them). */
void lu_space_add_raw(lu_space *s, void *p, int32_t dt, const int64_t *st);
/* Host: merge axes and decide `flat`; call after the last add. */
void lu_space_done(lu_space *s);

/* Grid size for n elements with a grid-stride loop. */
static inline unsigned lu_blocks(int64_t n) {
  int64_t b = (n + LU_THREADS - 1) / LU_THREADS;
  if (b < 1) b = 1;
  return (unsigned)(b > 65536 ? 65536 : b);
}

#define LU_GRID_LOOP(i, n)                                                          \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);         \
       i += (int64_t)blockDim.x * gridDim.x)

/* Run STMT with T bound to the compute type of dtype DT (bool computes in
 * uint8 and is stored as 0/1); DEFAULT otherwise. */
#define LU_DISPATCH_ALL(DT, T, STMT, DEFAULT)                                       \
  switch (DT) {                                                                     \
  case LUON_DTYPE_F32: { typedef float T; STMT; } break;                            \
  case LUON_DTYPE_F64: { typedef double T; STMT; } break;                           \
  case LUON_DTYPE_I32: { typedef int32_t T; STMT; } break;                          \
  case LUON_DTYPE_I64: { typedef int64_t T; STMT; } break;                          \
  case LUON_DTYPE_U8:                                                               \
  case LUON_DTYPE_BOOL: { typedef uint8_t T; STMT; } break;                         \
  case LUON_DTYPE_I8: { typedef int8_t T; STMT; } break;                            \
  case LUON_DTYPE_I16: { typedef int16_t T; STMT; } break;                          \
  case LUON_DTYPE_U16: { typedef uint16_t T; STMT; } break;                         \
  default: DEFAULT;                                                                 \
  }
#define LU_DISPATCH_FLOAT(DT, T, STMT, DEFAULT)                                     \
  switch (DT) {                                                                     \
  case LUON_DTYPE_F32: { typedef float T; STMT; } break;                            \
  case LUON_DTYPE_F64: { typedef double T; STMT; } break;                           \
  default: DEFAULT;                                                                 \
  }

/* Host helpers over tensors (no libluon: these mirror core/tensor.c). */
bool lu_cuda_contiguous(const luon_tensor *t);
static inline void *lu_cuda_data(const luon_tensor *t) { return lu_data(t); }

/* A dense copy of t in dtype dt on t's device: t's own memory when it is
 * already dense and of dt (*blk NULL), else scratch filled on stream s
 * (free *blk with lu_cuda_scratch_free after queuing its readers). */
luon_status lu_cuda_dense(const luon_tensor *t, int32_t dt, cudaStream_t s, void **ptr,
                          lu_block **blk);
/* Strided, converting copy of space operand 1 into operand 0 (both added). */
luon_status lu_cuda_copy_space(lu_space *sp, cudaStream_t s);
/* Fill n bytes at p with zeros on stream s. */
luon_status lu_cuda_zero(void *p, size_t bytes, cudaStream_t s);

#endif
