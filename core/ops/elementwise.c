/* elementwise.c: NumPy-broadcasting elementwise ops (arithmetic, comparisons,
 * unary math, clip, where) and the copy/astype op, on any strides and dtypes.
 * One kernel family per op, instantiated per dtype by macros; then their
 * backward rules, written with these ops. The copy itself is the runtime's
 * (core/copy.c), as are the strided row reads and writes (lu_gather,
 * lu_scatter) under the converting driver here. */
#include "steps.h"
#include <math.h>

#define CHUNK LU_ROW_CHUNK /* elements per stack buffer on the converting path */
/* Threads from 2 * grain elements. Waking the pool costs ~10 us, so loops
 * bound by memory wait for 256K elements, loops calling libm for 32K. */
#define GRAIN_CHEAP (1 << 17)
#define GRAIN_MATH (1 << 14)
#define PAR_BLOCK 1024     /* flat parallel pieces start on multiples of this */

/* ---- per-dtype loops ------------------------------------------------------- */

/* X(op, suffix, C type, unsigned twin): integer math wraps through the twin
 * instead of overflowing (the narrow types' twin is uint32_t: a uint16_t
 * would be promoted to int, whose product can overflow); bool computes in
 * bytes and stores 0 or 1. */
#define FLOAT_TYPES(X, op) X(op, f32, float, float) X(op, f64, double, double)
#define INT_TYPES(X, op)                                                       \
  X(op, i32, int32_t, uint32_t) X(op, i64, int64_t, uint64_t)                 \
  X(op, u8, uint8_t, uint8_t) X(op, b8, uint8_t, uint8_t)                    \
  X(op, i8, int8_t, uint32_t) X(op, i16, int16_t, uint32_t)                  \
  X(op, u16, uint16_t, uint32_t)
#define ALL_TYPES(X, op) FLOAT_TYPES(X, op) INT_TYPES(X, op)
#define DT_f32 LUON_DTYPE_F32
#define DT_f64 LUON_DTYPE_F64
#define DT_i32 LUON_DTYPE_I32
#define DT_i64 LUON_DTYPE_I64
#define DT_u8 LUON_DTYPE_U8
#define DT_b8 LUON_DTYPE_BOOL
#define DT_i8 LUON_DTYPE_I8
#define DT_i16 LUON_DTYPE_I16
#define DT_u16 LUON_DTYPE_U16
#define FIX_f32(v) (v)
#define FIX_f64(v) (v)
#define FIX_i32(v) (v)
#define FIX_i64(v) (v)
#define FIX_u8(v) (v)
#define FIX_b8(v) ((v) != 0)
#define FIX_i8(v) (v)
#define FIX_i16(v) (v)
#define FIX_u16(v) (v)

static inline bool nan_f(float x) { return isnan(x); }
static inline bool nan_d(double x) { return isnan(x); }
static inline bool nan_i(int64_t x) { (void)x; return false; }
#define ISNAN(x) _Generic((x), float: nan_f, double: nan_d, default: nan_i)(x)

/* Integer power by squaring, wrapping; negative exponents as 1/x^-y truncated. */
static inline int64_t ipow(int64_t x, int64_t y) {
  if (y < 0) return x == 1 ? 1 : x == -1 ? (y & 1 ? -1 : 1) : 0;
  uint64_t r = 1, b = (uint64_t)x;
  for (uint64_t e = (uint64_t)y; e; e >>= 1, b *= b)
    if (e & 1) r *= b;
  return (int64_t)r;
}
#define POW(x, y) _Generic((x), float: powf, double: pow, default: ipow)(x, y)
#define EXP(x) _Generic((x), float: expf, default: exp)(x)
#define LOG(x) _Generic((x), float: logf, default: log)(x)
#define LOG2(x) _Generic((x), float: log2f, default: log2)(x)
#define SQRT(x) _Generic((x), float: sqrtf, default: sqrt)(x)
#define TANH(x) _Generic((x), float: tanhf, default: tanh)(x)

static inline int32_t iabs32(int32_t x) { return x < 0 ? (int32_t)(0u - (uint32_t)x) : x; }
static inline int64_t iabs64(int64_t x) { return x < 0 ? (int64_t)(0u - (uint64_t)x) : x; }
static inline int8_t iabs8(int8_t x) { return x < 0 ? (int8_t)(0u - (uint32_t)x) : x; }
static inline int16_t iabs16(int16_t x) { return x < 0 ? (int16_t)(0u - (uint32_t)x) : x; }
static inline uint16_t uabs(uint16_t x) { return x; } /* uint8_t and uint16_t */
#define ABS(x)                                                                 \
  _Generic((x), float: fabsf, double: fabs, int32_t: iabs32, int64_t: iabs64, \
           int8_t: iabs8, int16_t: iabs16, default: uabs)(x)

/* libm's fn: fnf on float, fn on double (the math of np's elementwise
 * functions; their integer inputs compute in float32). */
#define LIBM(fn, x) _Generic((x), float: fn##f, default: fn)(x)
#define LIBM2(fn, x, y) _Generic((x), float: fn##f, default: fn)(x, y)

static inline bool inf_f(float x) { return isinf(x); }
static inline bool inf_d(double x) { return isinf(x); }
static inline bool inf_i(int64_t x) { (void)x; return false; }
#define ISINF(x) _Generic((x), float: inf_f, double: inf_d, default: inf_i)(x)

/* Rounding of integers: unchanged (they are read as int64, which holds each). */
static inline int64_t keep_i(int64_t x) { return x; }
#define INTEGRAL(fn, x) _Generic((x), float: fn##f, double: fn, default: keep_i)(x)
/* MXNet's rint: the nearer of floor and ceil, floor on a tie (halves go down) */
static inline float mxrint_f(float x) { float a = floorf(x), b = ceilf(x); return x - a <= b - x ? a : b; }
static inline double mxrint_d(double x) { double a = floor(x), b = ceil(x); return x - a <= b - x ? a : b; }
#define MXRINT(x) _Generic((x), float: mxrint_f, double: mxrint_d, default: keep_i)(x)
/* round to p[0] decimals, halves to even (NumPy's): x scaled by p[1] =
 * 10^|decimals|, rounded, scaled back; x itself when the scaled value
 * overflows (no digit to drop), a signed 0 when it rounds to 0 (for a scale
 * past the dtype's range too); integers exactly */
static inline float round_f(float x, const double *p) {
  float k = (float)p[1], y = p[0] > 0 ? x * k : x / k, r = rintf(y);
  return p[0] == 0 ? rintf(x) : p[0] > 0 ? (isfinite(y) ? r / k : x) : (r == 0 ? r : r * k);
}
static inline double round_d(double x, const double *p) {
  double k = p[1], y = p[0] > 0 ? x * k : x / k, r = rint(y);
  return p[0] == 0 ? rint(x) : p[0] > 0 ? (isfinite(y) ? r / k : x) : (r == 0 ? r : r * k);
}
static inline int64_t round_i(int64_t x, const double *p) {
  if (p[0] >= 0) return x;
  if (p[0] < -18) return 0; /* 10^19 is past every int64 */
  int64_t k = (int64_t)p[1], q = x / k, r = x % k;
  uint64_t twice = 2 * (uint64_t)(r < 0 ? -r : r);
  if (twice > (uint64_t)k || (twice == (uint64_t)k && (q & 1))) q += x < 0 ? -1 : 1;
  return (int64_t)((uint64_t)q * (uint64_t)k);
}
#define ROUND(x, p) _Generic((x), float: round_f, double: round_d, default: round_i)(x, p)

/* Integer remainders (int64 holds every integer dtype): x mod 0 is 0, as
 * NumPy and MXNet; irem has x's sign (C's %, fmod), imod y's (floor). */
static inline int64_t irem(int64_t x, int64_t y) { return y == 0 || y == -1 ? 0 : x % y; }
static inline int64_t imod(int64_t x, int64_t y) {
  int64_t r = irem(x, y);
  return r != 0 && (r < 0) != (y < 0) ? r + y : r;
}
/* Floats: mod has y's sign, x mod 0 is 0 (MXNet's; NumPy's is NaN). */
static inline float mod_f(float x, float y) {
  float r = fmodf(x, y);
  return y == 0 ? 0 : r != 0 && (r < 0) != (y < 0) ? r + y : r;
}
static inline double mod_d(double x, double y) {
  double r = fmod(x, y);
  return y == 0 ? 0 : r != 0 && (r < 0) != (y < 0) ? r + y : r;
}
#define FMOD(x, y) _Generic((x), float: fmodf, double: fmod, default: irem)(x, y)
#define MOD(x, y) _Generic((x), float: mod_f, double: mod_d, default: imod)(x, y)
/* The lowest value of integer type T (0 for unsigned): 1/0 of integers. */
#define INT_LOWEST(T) ((T)-1 < 0 ? (T)(INT64_MIN >> (64 - 8 * (int)sizeof(T))) : (T)0)
#define IS_FLOAT_T(T) ((T)0.5 != 0)

/* Binary ops: result type R_op(T) and value E_op(suffix, T, U, x, y). */
#define R_ARITH(T) T
#define R_CMP(T) uint8_t
#define E_add(s, T, U, x, y) FIX_##s((T)((U)(x) + (U)(y)))
#define E_subtract(s, T, U, x, y) FIX_##s((T)((U)(x) - (U)(y)))
#define E_multiply(s, T, U, x, y) FIX_##s((T)((U)(x) * (U)(y)))
#define E_divide(s, T, U, x, y) ((x) / (y))
#define E_power(s, T, U, x, y) FIX_##s((T)POW(x, y))
#define E_maximum(s, T, U, x, y) ((x) > (y) || ISNAN(x) ? (x) : (y)) /* NaN wins */
#define E_minimum(s, T, U, x, y) ((x) < (y) || ISNAN(x) ? (x) : (y))
#define E_equal(s, T, U, x, y) ((x) == (y))
#define E_not_equal(s, T, U, x, y) ((x) != (y))
#define E_greater(s, T, U, x, y) ((x) > (y))
#define E_greater_equal(s, T, U, x, y) ((x) >= (y))
#define E_less(s, T, U, x, y) ((x) < (y))
#define E_less_equal(s, T, U, x, y) ((x) <= (y))
#define E_arctan2(s, T, U, x, y) LIBM2(atan2, x, y)
#define E_hypot(s, T, U, x, y) LIBM2(hypot, x, y)
#define E_fmod(s, T, U, x, y) ((T)FMOD(x, y))
#define E_mod(s, T, U, x, y) ((T)MOD(x, y))
/* copysign: MXNet's, by comparisons (-0 counts as positive, a NaN flips x) */
#define E_copysign(s, T, U, x, y)                                              \
  (((x) >= 0 && (y) >= 0) || ((x) < 0 && (y) < 0) ? (x) : (T)(-(U)(x)))
#define E_logical_and(s, T, U, x, y) ((x) != 0 && (y) != 0)
#define E_logical_or(s, T, U, x, y) ((x) != 0 || (y) != 0)
#define E_logical_xor(s, T, U, x, y) (((x) != 0) != ((y) != 0))
#define E_bitwise_and(s, T, U, x, y) ((T)((U)(x) & (U)(y)))
#define E_bitwise_or(s, T, U, x, y) ((T)((U)(x) | (U)(y)))
#define E_bitwise_xor(s, T, U, x, y) ((T)((U)(x) ^ (U)(y)))
/* gcd and lcm of the magnitudes in uint64 (NumPy's results, wrapped to T) */
static inline uint64_t imag(int64_t x) { return x < 0 ? -(uint64_t)x : (uint64_t)x; }
static inline uint64_t ugcd(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t t = a % b;
    a = b, b = t;
  }
  return a;
}
static inline uint64_t ulcm(uint64_t a, uint64_t b) { return a == 0 || b == 0 ? 0 : a / ugcd(a, b) * b; }
#define E_gcd(s, T, U, x, y) ((T)ugcd(imag((int64_t)(x)), imag((int64_t)(y))))
#define E_lcm(s, T, U, x, y) ((T)ulcm(imag((int64_t)(x)), imag((int64_t)(y))))
/* shifts by [0, bits) as C's (through the unsigned twin to the left);
 * others give 0, or -1 for a negative x shifted right (NumPy's) */
#define SHIFT_OK(T, y) ((y) >= 0 && (int64_t)(y) < (int64_t)(8 * sizeof(T)))
#define E_left_shift(s, T, U, x, y) (SHIFT_OK(T, y) ? (T)((U)(x) << (y)) : (T)0)
#define E_right_shift(s, T, U, x, y) (SHIFT_OK(T, y) ? (T)((x) >> (y)) : (T)((x) < 0 ? -1 : 0))

/* o[i] = x OP y over n elements: vv two arrays, vs y one value, sv x one value. */
typedef void (*bin_fn)(int64_t n, const void *a, const void *b, void *o);
typedef struct bin_k { bin_fn vv, vs, sv; } bin_k;

#define DEF_BIN(op, s, T, U, R)                                                \
  TC static void op##_##s##_vv(int64_t n, const void *pa, const void *pb, void *po) { \
    const T *restrict a = pa, *restrict b = pb;                                \
    R(T) *restrict o = po;                                                     \
    for (int64_t i = 0; i < n; i++) o[i] = E_##op(s, T, U, a[i], b[i]);        \
  }                                                                            \
  TC static void op##_##s##_vs(int64_t n, const void *pa, const void *pb, void *po) { \
    const T *restrict a = pa;                                                  \
    const T y = *(const T *)pb;                                                \
    R(T) *restrict o = po;                                                     \
    for (int64_t i = 0; i < n; i++) o[i] = E_##op(s, T, U, a[i], y);           \
  }                                                                            \
  TC static void op##_##s##_sv(int64_t n, const void *pa, const void *pb, void *po) { \
    const T x = *(const T *)pa, *restrict b = pb;                              \
    R(T) *restrict o = po;                                                     \
    for (int64_t i = 0; i < n; i++) o[i] = E_##op(s, T, U, x, b[i]);           \
  }
#define DEF_ARITH(op, s, T, U) DEF_BIN(op, s, T, U, R_ARITH)
#define DEF_CMP(op, s, T, U) DEF_BIN(op, s, T, U, R_CMP)
#define BIN_ENTRY(op, s, T, U) [DT_##s] = {op##_##s##_vv, op##_##s##_vs, op##_##s##_sv},
#define BIN_KERNELS(op, DEF, TYPES)                                            \
  TYPES(DEF, op)                                                               \
  static const bin_k K_##op[LUON_DTYPE_COUNT] = {TYPES(BIN_ENTRY, op)};

/* Comparisons with unsigned operands are meant to fold away. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtype-limits"
BIN_KERNELS(add, DEF_ARITH, ALL_TYPES)
BIN_KERNELS(subtract, DEF_ARITH, ALL_TYPES)
BIN_KERNELS(multiply, DEF_ARITH, ALL_TYPES)
BIN_KERNELS(divide, DEF_ARITH, FLOAT_TYPES) /* integers divide in float32 */
BIN_KERNELS(power, DEF_ARITH, ALL_TYPES)
BIN_KERNELS(maximum, DEF_ARITH, ALL_TYPES)
BIN_KERNELS(minimum, DEF_ARITH, ALL_TYPES)
BIN_KERNELS(equal, DEF_CMP, ALL_TYPES)
BIN_KERNELS(not_equal, DEF_CMP, ALL_TYPES)
BIN_KERNELS(greater, DEF_CMP, ALL_TYPES)
BIN_KERNELS(greater_equal, DEF_CMP, ALL_TYPES)
BIN_KERNELS(less, DEF_CMP, ALL_TYPES)
BIN_KERNELS(less_equal, DEF_CMP, ALL_TYPES)
BIN_KERNELS(arctan2, DEF_ARITH, FLOAT_TYPES) /* integers compute in float32 */
BIN_KERNELS(hypot, DEF_ARITH, FLOAT_TYPES)
BIN_KERNELS(fmod, DEF_ARITH, ALL_TYPES)    /* bool refused by the shape check */
BIN_KERNELS(mod, DEF_ARITH, ALL_TYPES)
BIN_KERNELS(copysign, DEF_ARITH, ALL_TYPES)
BIN_KERNELS(logical_and, DEF_CMP, ALL_TYPES)
BIN_KERNELS(logical_or, DEF_CMP, ALL_TYPES)
BIN_KERNELS(logical_xor, DEF_CMP, ALL_TYPES)
BIN_KERNELS(bitwise_and, DEF_ARITH, INT_TYPES)
BIN_KERNELS(bitwise_or, DEF_ARITH, INT_TYPES)
BIN_KERNELS(bitwise_xor, DEF_ARITH, INT_TYPES)
BIN_KERNELS(gcd, DEF_ARITH, INT_TYPES) /* bool refused by the shape check */
BIN_KERNELS(lcm, DEF_ARITH, INT_TYPES)
BIN_KERNELS(left_shift, DEF_ARITH, INT_TYPES)
BIN_KERNELS(right_shift, DEF_ARITH, INT_TYPES)

/* Unary ops: o[i] = E_op(suffix, T, U, x); p = op parameters (clip bounds as T). */
typedef void (*un_fn)(int64_t n, const void *a, void *o, const void *p);
#define E_negative(s, T, U, x) ((T)(-(U)(x)))
#define E_abs(s, T, U, x) ((T)ABS(x))
#define E_sign(s, T, U, x) ((T)((x) > 0 ? (T)1 : (x) < 0 ? (T)-1 : (x)))
#define E_exp(s, T, U, x) EXP(x)
#define E_log(s, T, U, x) LOG(x)
#define E_log2(s, T, U, x) LOG2(x)
#define E_sqrt(s, T, U, x) SQRT(x)
#define E_square(s, T, U, x) FIX_##s((T)((U)(x) * (U)(x)))
#define E_tanh(s, T, U, x) TANH(x)
#define E_sigmoid(s, T, U, x) ((T)1 / ((T)1 + EXP(-(x)))) /* exp overflow gives 0, not NaN */
#define E_relu(s, T, U, x) ((x) < 0 ? (T)0 : (x))          /* keeps NaN */
/* NumPy's minimum(maximum(x, lo), hi): hi wherever lo > hi; NaN stays NaN */
#define E_clip(s, T, U, x) ((x) < lo ? (lo > hi ? hi : lo) : (x) > hi ? hi : (x))
#define E_sin(s, T, U, x) LIBM(sin, x)
#define E_cos(s, T, U, x) LIBM(cos, x)
#define E_tan(s, T, U, x) LIBM(tan, x)
#define E_arcsin(s, T, U, x) LIBM(asin, x)
#define E_arccos(s, T, U, x) LIBM(acos, x)
#define E_arctan(s, T, U, x) LIBM(atan, x)
#define E_sinh(s, T, U, x) LIBM(sinh, x)
#define E_cosh(s, T, U, x) LIBM(cosh, x)
#define E_arcsinh(s, T, U, x) LIBM(asinh, x)
#define E_arccosh(s, T, U, x) LIBM(acosh, x)
#define E_arctanh(s, T, U, x) LIBM(atanh, x)
#define E_log10(s, T, U, x) LIBM(log10, x)
#define E_log1p(s, T, U, x) LIBM(log1p, x)
#define E_expm1(s, T, U, x) LIBM(expm1, x)
#define E_cbrt(s, T, U, x) LIBM(cbrt, x)
#define E_deg2rad(s, T, U, x) ((x) * (T)(M_PI / 180))
#define E_rad2deg(s, T, U, x) ((x) * (T)(180 / M_PI))
/* integers: 1/x truncated (1 and -1 give themselves, the rest 0), 1/0 the lowest */
#define E_reciprocal(s, T, U, x) (IS_FLOAT_T(T) || (x) != 0 ? (T)((T)1 / (x)) : INT_LOWEST(T))
#define E_floor(s, T, U, x) ((T)INTEGRAL(floor, x))
#define E_ceil(s, T, U, x) ((T)INTEGRAL(ceil, x))
#define E_trunc(s, T, U, x) ((T)INTEGRAL(trunc, x))
#define E_rint(s, T, U, x) ((T)MXRINT(x))
#define E_round(s, T, U, x) ((T)ROUND(x, (const double *)p))
#define E_isnan(s, T, U, x) ISNAN(x)
#define E_isinf(s, T, U, x) ISINF(x)
#define E_isfinite(s, T, U, x) (!ISNAN(x) && !ISINF(x))
#define E_isposinf(s, T, U, x) (ISINF(x) && (x) > 0)
#define E_isneginf(s, T, U, x) (ISINF(x) && (x) < 0)
#define E_logical_not(s, T, U, x) ((x) == 0)
#define E_bitwise_not(s, T, U, x) ((T)(DT_##s == LUON_DTYPE_BOOL ? !(x) : ~(U)(x)))
#define DEF_UN_R(op, s, T, U, R)                                               \
  TC static void op##_##s(int64_t n, const void *pa, void *po, const void *p) { \
    const T *restrict a = pa;                                                  \
    R(T) *restrict o = po;                                                     \
    const T lo = p ? ((const T *)p)[0] : 0, hi = p ? ((const T *)p)[1] : 0;    \
    (void)lo, (void)hi;                                                        \
    for (int64_t i = 0; i < n; i++) o[i] = E_##op(s, T, U, a[i]);              \
  }
#define DEF_UN(op, s, T, U) DEF_UN_R(op, s, T, U, R_ARITH)
#define DEF_PRED(op, s, T, U) DEF_UN_R(op, s, T, U, R_CMP) /* bool results */
#define UN_ENTRY(op, s, T, U) [DT_##s] = op##_##s,
#define UN_KERNELS_OF(op, DEF, TYPES)                                          \
  TYPES(DEF, op)                                                               \
  static const un_fn K_##op[LUON_DTYPE_COUNT] = {TYPES(UN_ENTRY, op)};
#define UN_KERNELS(op, TYPES) UN_KERNELS_OF(op, DEF_UN, TYPES)
#define PRED_KERNELS(op, TYPES) UN_KERNELS_OF(op, DEF_PRED, TYPES)

UN_KERNELS(negative, ALL_TYPES)
UN_KERNELS(abs, ALL_TYPES)
UN_KERNELS(sign, ALL_TYPES)
UN_KERNELS(exp, FLOAT_TYPES) /* exp..sigmoid: integers compute in float32 */
UN_KERNELS(log, FLOAT_TYPES)
UN_KERNELS(log2, FLOAT_TYPES)
UN_KERNELS(sqrt, FLOAT_TYPES)
UN_KERNELS(square, ALL_TYPES)
UN_KERNELS(tanh, FLOAT_TYPES)
UN_KERNELS(sigmoid, FLOAT_TYPES)
UN_KERNELS(relu, ALL_TYPES)
UN_KERNELS(clip, ALL_TYPES)
UN_KERNELS(sin, FLOAT_TYPES) /* sin..rad2deg: integers compute in float32 */
UN_KERNELS(cos, FLOAT_TYPES)
UN_KERNELS(tan, FLOAT_TYPES)
UN_KERNELS(arcsin, FLOAT_TYPES)
UN_KERNELS(arccos, FLOAT_TYPES)
UN_KERNELS(arctan, FLOAT_TYPES)
UN_KERNELS(sinh, FLOAT_TYPES)
UN_KERNELS(cosh, FLOAT_TYPES)
UN_KERNELS(arcsinh, FLOAT_TYPES)
UN_KERNELS(arccosh, FLOAT_TYPES)
UN_KERNELS(arctanh, FLOAT_TYPES)
UN_KERNELS(log10, FLOAT_TYPES)
UN_KERNELS(log1p, FLOAT_TYPES)
UN_KERNELS(expm1, FLOAT_TYPES)
UN_KERNELS(cbrt, FLOAT_TYPES)
UN_KERNELS(deg2rad, FLOAT_TYPES)
UN_KERNELS(rad2deg, FLOAT_TYPES)
UN_KERNELS(reciprocal, ALL_TYPES) /* reciprocal..round: bool refused by the shape check */
UN_KERNELS(floor, ALL_TYPES)
UN_KERNELS(ceil, ALL_TYPES)
UN_KERNELS(trunc, ALL_TYPES)
UN_KERNELS(rint, ALL_TYPES)
UN_KERNELS(round, ALL_TYPES)
PRED_KERNELS(isnan, ALL_TYPES)
PRED_KERNELS(isinf, ALL_TYPES)
PRED_KERNELS(isfinite, ALL_TYPES)
PRED_KERNELS(isposinf, ALL_TYPES)
PRED_KERNELS(isneginf, ALL_TYPES)
PRED_KERNELS(logical_not, ALL_TYPES)
UN_KERNELS(bitwise_not, INT_TYPES)
#pragma GCC diagnostic pop

/* where: o[i] = c[i] ? x[i] : y[i], c bytes (0 false). */
typedef void (*where_fn)(int64_t n, const uint8_t *c, const void *x, const void *y, void *o);
#define DEF_WHERE(op, s, T, U)                                                 \
  TC static void where_##s(int64_t n, const uint8_t *restrict c, const void *px, \
                           const void *py, void *po) {                         \
    const T *restrict x = px, *restrict y = py;                                \
    T *restrict o = po;                                                        \
    for (int64_t i = 0; i < n; i++) o[i] = c[i] ? x[i] : y[i];                 \
  }
#define WHERE_ENTRY(op, s, T, U) [DT_##s] = where_##s,
ALL_TYPES(DEF_WHERE, _)
static const where_fn K_where[LUON_DTYPE_COUNT] = {ALL_TYPES(WHERE_ENTRY, _)};

/* ---- the strided, converting driver ---------------------------------------- */

enum ew_kind { EW_BIN, EW_UN, EW_WHERE };

/* One elementwise call: operand 0 is the output, 1..nin the inputs. Inputs
 * are read as `want[j]` (converted on the fly when their dtype differs). */
typedef struct ew {
  int kind, nin;
  int32_t odt, osz;
  int32_t idt[3], isz[3], want[3], wsz[3];
  const bin_k *bk;
  un_fn uf;
  where_fn wf;
  const void *param;
  double pbuf[2];
  int64_t grain;
} ew;

/* The general row: CHUNK elements at a time through stack buffers,
 * converting and gathering inputs, scattering the output. */
static void row_slow(const ew *e, int64_t n, char *const *ptr, const int64_t *st) {
  _Alignas(64) char buf[4][CHUNK * 8];
  bool odirect = st[0] == e->osz;
  for (int64_t off = 0; off < n; off += CHUNK) {
    int64_t m = n - off < CHUNK ? n - off : CHUNK;
    char *o = odirect ? ptr[0] + off * st[0] : buf[0];
    const void *in[3];
    bool one[3] = {false, false, false};
    for (int j = 0; j < e->nin; j++) {
      const char *p = ptr[j + 1] + off * st[j + 1];
      char *b = buf[j + 1];
      if (st[j + 1] == 0 && e->kind == EW_BIN && !(j == 1 && one[0])) {
        lu_convert(b, e->want[j], p, e->idt[j], 1);
        one[j] = true;
        in[j] = b;
      } else if (e->idt[j] == e->want[j] && st[j + 1] == e->wsz[j]) {
        in[j] = p;
      } else {
        lu_gather(b, e->want[j], p, e->idt[j], st[j + 1], m);
        in[j] = b;
      }
    }
    switch (e->kind) {
    case EW_BIN:
      if (one[1]) e->bk->vs(m, in[0], in[1], o);
      else if (one[0]) e->bk->sv(m, in[0], in[1], o);
      else e->bk->vv(m, in[0], in[1], o);
      break;
    case EW_UN: e->uf(m, in[0], o, e->param); break;
    case EW_WHERE: e->wf(m, in[0], in[1], in[2], o); break;
    }
    if (!odirect) lu_scatter(ptr[0] + off * st[0], st[0], buf[0], e->osz, m);
  }
}

/* One row for lu_foreach_row: the flat kernel when every operand is dense
 * (or a broadcast value) and of the dtype the kernel reads, else row_slow. */
static void row(void *ctx, int64_t n, char *const *ptr, const int64_t *st) {
  const ew *e = ctx;
  if (st[0] != e->osz) {
    row_slow(e, n, ptr, st);
    return;
  }
  switch (e->kind) {
  case EW_BIN:
    if (e->idt[0] != e->want[0] || e->idt[1] != e->want[1]) break;
    if (st[1] == e->wsz[0] && st[2] == e->wsz[1]) {
      e->bk->vv(n, ptr[1], ptr[2], ptr[0]);
      return;
    }
    if (st[1] == e->wsz[0] && st[2] == 0) {
      e->bk->vs(n, ptr[1], ptr[2], ptr[0]);
      return;
    }
    if (st[1] == 0 && st[2] == e->wsz[1]) {
      e->bk->sv(n, ptr[1], ptr[2], ptr[0]);
      return;
    }
    break;
  case EW_UN:
    if (e->idt[0] == e->want[0] && st[1] == e->wsz[0]) {
      e->uf(n, ptr[1], ptr[0], e->param);
      return;
    }
    break;
  case EW_WHERE:
    if (e->isz[0] == 1 && st[1] == 1 && e->idt[1] == e->want[1] && st[2] == e->wsz[1] &&
        e->idt[2] == e->want[2] && st[3] == e->wsz[2]) {
      e->wf(n, (const uint8_t *)ptr[1], ptr[2], ptr[3], ptr[0]);
      return;
    }
    break;
  }
  row_slow(e, n, ptr, st);
}

typedef struct flat {
  const ew *e;
  int nops;
  int64_t n;
  char *base[4];
  int64_t st[4];
} flat;

static void flat_range(void *ctx, int64_t b, int64_t end) {
  const flat *f = ctx;
  int64_t lo = b * PAR_BLOCK, hi = end * PAR_BLOCK < f->n ? end * PAR_BLOCK : f->n;
  char *p[4];
  for (int k = 0; k < f->nops; k++) p[k] = f->base[k] + lo * f->st[k];
  for (int64_t n; lo < hi && !lu_interrupted(); lo += n) { /* see LU_STOP_ELEMS */
    n = hi - lo < LU_STOP_ELEMS ? hi - lo : LU_STOP_ELEMS;
    row((void *)f->e, n, p, f->st);
    for (int k = 0; k < f->nops; k++) p[k] += n * f->st[k];
  }
}

/* lu_is_contiguous, inline: this runs several times per op. */
static inline bool dense(const luon_tensor *t) {
  int64_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->strides[i] != s) return false;
    s *= t->shape[i];
  }
  return true;
}

static inline char *data(const luon_tensor *t, int64_t es) {
  return (char *)t->storage->ptr + t->offset * es;
}

/* Run e over c->out[0] (any strides) and c->in (broadcast to it). */
static luon_status run(lu_call *c, ew *e) {
  luon_tensor *out = c->out[0];
  int64_t n = out->size;
  if (n == 0) return LUON_OK;
  e->osz = luon_dtype_size(e->odt);
  flat f;
  f.e = e;
  f.nops = e->nin + 1;
  f.n = n;
  f.base[0] = data(out, e->osz);
  f.st[0] = e->osz;
  bool flat_ok = dense(out);
  for (int j = 0; j < e->nin; j++) {
    const luon_tensor *t = c->in[j];
    e->idt[j] = t->dtype;
    e->isz[j] = t->dtype == e->odt ? e->osz : luon_dtype_size(t->dtype);
    e->wsz[j] = e->want[j] == t->dtype ? e->isz[j] : luon_dtype_size(e->want[j]);
    f.base[j + 1] = data(t, e->isz[j]);
    /* equal sizes under broadcasting mean equal shapes up to leading ones */
    if (t->size == n && dense(t)) f.st[j + 1] = e->isz[j];
    else if (t->size == 1) f.st[j + 1] = 0;
    else flat_ok = false;
  }
  if (flat_ok) {
    if (n < 2 * e->grain) row(e, n, f.base, f.st);
    else lu_parallel_for((n + PAR_BLOCK - 1) / PAR_BLOCK, e->grain / PAR_BLOCK, flat_range, &f);
    return LUON_OK;
  }
  int64_t st[LU_ITER_MAX_OPS][LU_MAXD];
  for (int i = 0; i < out->ndim; i++) st[0][i] = out->strides[i] * e->osz;
  for (int j = 0; j < e->nin; j++) lu_byte_strides(c->in[j], out->ndim, out->shape, st[j + 1]);
  lu_foreach_row(out->ndim, out->shape, f.nops, f.base, (const int64_t(*)[LU_MAXD])st, e->grain,
                 true, row, e);
  return LUON_OK;
}

static luon_status check_out(lu_call *c, const char *name, int32_t dt) {
  if (c->out[0]->dtype != dt)
    return lu_error(LUON_EINTERNAL, "%s: output is %s, expected %s", name,
                    luon_dtype_name(c->out[0]->dtype), luon_dtype_name(dt));
  return LUON_OK;
}

/* ---- binary ops ------------------------------------------------------------- */

/* B_FLOAT: integers are read as float32; B_CMP: bool results; B_SUB, B_NUM:
 * bool refused */
enum { B_ARITH, B_FLOAT, B_CMP, B_SUB, B_NUM };
typedef struct binop {
  const char *name;
  int kind;
  int64_t grain;
  const bin_k *k;
} binop;

/* The dtype both inputs are read as. */
static int32_t bin_dtype(const binop *b, int32_t da, int32_t db) {
  int32_t t = da == db ? da : lu_dtype_promote(da, db);
  return b->kind == B_FLOAT && !lu_dtype_is_float(t) ? LUON_DTYPE_F32 : t;
}

/* (..a) op (..b) -> broadcast shape */
static luon_status bin_shape(lu_call *c, const binop *b) {
  const luon_tensor *x = c->in[0], *y = c->in[1];
  LU_TRY(lu_broadcast_shapes(b->name, x->ndim, x->shape, y->ndim, y->shape, &c->out_ndim[0],
                             c->out_shape[0]));
  int32_t t = bin_dtype(b, x->dtype, y->dtype);
  if (b->kind == B_SUB && t == LUON_DTYPE_BOOL)
    return lu_error(LUON_EDTYPE, "subtract: boolean subtract is not supported, use logical_xor "
                    "or not_equal instead (inputs bool %s and bool %s)",
                    lu_shape_str(x->ndim, x->shape), lu_shape_str(y->ndim, y->shape));
  if (b->kind == B_NUM && t == LUON_DTYPE_BOOL)
    return lu_error(LUON_EDTYPE, "%s: not supported for bool (inputs bool %s and bool %s); "
                    "convert them to a number dtype first (astype)", b->name,
                    lu_shape_str(x->ndim, x->shape), lu_shape_str(y->ndim, y->shape));
  if (!lu_dtype_valid(t) || !b->k[t].vv)
    return lu_error(LUON_EDTYPE, "%s: not supported for %s and %s", b->name,
                    luon_dtype_name(x->dtype), luon_dtype_name(y->dtype));
  c->out_dtype[0] = b->kind == B_CMP ? LUON_DTYPE_BOOL : t;
  return LUON_OK;
}

static luon_status bin_run(lu_call *c, const binop *b) {
  ew e;
  e.kind = EW_BIN;
  e.nin = 2;
  int32_t t = bin_dtype(b, c->in[0]->dtype, c->in[1]->dtype);
  e.want[0] = e.want[1] = t;
  e.odt = b->kind == B_CMP ? LUON_DTYPE_BOOL : t;
  e.bk = &b->k[t];
  e.grain = b->grain;
  LU_TRY(check_out(c, b->name, e.odt));
  return run(c, &e);
}

#define BINOP(op, kind, grain)                                                 \
  static const binop B_##op = {#op, kind, grain, K_##op};                             \
  luon_status lu_shape_##op(lu_call *c) { return bin_shape(c, &B_##op); }      \
  luon_status lu_cpu_##op(lu_call *c) { return bin_run(c, &B_##op); }
#define EW_BINOPS(X) \
  X(add, B_ARITH, GRAIN_CHEAP) \
  X(subtract, B_SUB, GRAIN_CHEAP) \
  X(multiply, B_ARITH, GRAIN_CHEAP) \
  X(divide, B_FLOAT, GRAIN_CHEAP) \
  X(power, B_ARITH, GRAIN_MATH) \
  X(maximum, B_ARITH, GRAIN_CHEAP) \
  X(minimum, B_ARITH, GRAIN_CHEAP) \
  X(equal, B_CMP, GRAIN_CHEAP) \
  X(not_equal, B_CMP, GRAIN_CHEAP) \
  X(greater, B_CMP, GRAIN_CHEAP) \
  X(greater_equal, B_CMP, GRAIN_CHEAP) \
  X(less, B_CMP, GRAIN_CHEAP) \
  X(less_equal, B_CMP, GRAIN_CHEAP) \
  X(arctan2, B_FLOAT, GRAIN_MATH) \
  X(hypot, B_FLOAT, GRAIN_MATH) \
  X(fmod, B_NUM, GRAIN_MATH) \
  X(mod, B_NUM, GRAIN_MATH) \
  X(copysign, B_NUM, GRAIN_CHEAP) \
  X(logical_and, B_CMP, GRAIN_CHEAP) \
  X(logical_or, B_CMP, GRAIN_CHEAP) \
  X(logical_xor, B_CMP, GRAIN_CHEAP) \
  X(bitwise_and, B_ARITH, GRAIN_CHEAP) \
  X(bitwise_or, B_ARITH, GRAIN_CHEAP) \
  X(bitwise_xor, B_ARITH, GRAIN_CHEAP) \
  X(gcd, B_NUM, GRAIN_MATH) \
  X(lcm, B_NUM, GRAIN_MATH) \
  X(left_shift, B_NUM, GRAIN_CHEAP) \
  X(right_shift, B_NUM, GRAIN_CHEAP)
EW_BINOPS(BINOP)
#define BIN_OF(op, kind, grain) [LU_OP_##op] = &B_##op,
static const binop *const BIN_OF_OP[LU_OP_COUNT] = {EW_BINOPS(BIN_OF)};
#undef BIN_OF

/* ---- unary ops -------------------------------------------------------------- */

/* U_KEEP: the input's dtype; U_FLOAT: integers and bool give float32; U_NEG,
 * U_NUM: bool refused; U_PRED: bool results; U_CLIP, U_ROUND: with their
 * attributes (U_ROUND: bool refused) */
enum { U_KEEP, U_FLOAT, U_NEG, U_CLIP, U_NUM, U_PRED, U_ROUND };
typedef struct unop {
  const char *name;
  int kind;
  int64_t grain;
  const un_fn *k;
} unop;

static int32_t un_dtype(const unop *u, int32_t dt) {
  return u->kind == U_FLOAT && !lu_dtype_is_float(dt) ? LUON_DTYPE_F32 : dt;
}

/* (..x) -> (..x) */
static luon_status un_shape(lu_call *c, const unop *u) {
  const luon_tensor *x = c->in[0];
  int32_t t = un_dtype(u, x->dtype);
  if (u->kind == U_NEG && t == LUON_DTYPE_BOOL)
    return lu_error(LUON_EDTYPE, "negative: not supported for bool (input bool %s); use "
                    "logical_not instead", lu_shape_str(x->ndim, x->shape));
  if ((u->kind == U_NUM || u->kind == U_ROUND) && t == LUON_DTYPE_BOOL)
    return lu_error(LUON_EDTYPE, "%s: not supported for bool (input bool %s); convert it to a "
                    "number dtype first (astype)", u->name, lu_shape_str(x->ndim, x->shape));
  if (!lu_dtype_valid(t) || !u->k[t])
    return lu_error(LUON_EDTYPE, "%s: not supported for %s", u->name, luon_dtype_name(x->dtype));
  c->out_ndim[0] = x->ndim;
  memcpy(c->out_shape[0], x->shape, sizeof(int64_t) * (size_t)x->ndim);
  c->out_dtype[0] = u->kind == U_PRED ? LUON_DTYPE_BOOL : t;
  return LUON_OK;
}

/* round's decimals (attrs i[ROUND_DECIMALS], left out: 0) and 10^|decimals|
 * in e->pbuf, as doubles. */
static void round_param(ew *e, const luon_attrs *a) {
  double d = a->ni > LU_ROUND_DECIMALS ? (double)a->i[LU_ROUND_DECIMALS] : 0;
  e->pbuf[0] = d;
  e->pbuf[1] = pow(10, fabs(d));
  e->param = e->pbuf;
}

/* attrs f[0], f[1] as two values of dtype dt in e->pbuf. */
static void clip_bounds(ew *e, int32_t dt, const double *f) {
  void *p = e->pbuf;
  double lo = f[LU_CLIP_MIN], hi = f[LU_CLIP_MAX];
  switch (dt) {
  case LUON_DTYPE_F32:
    ((float *)p)[0] = isnan(lo) ? -INFINITY : (float)lo;
    ((float *)p)[1] = isnan(hi) ? INFINITY : (float)hi;
    break;
  case LUON_DTYPE_F64:
    ((double *)p)[0] = isnan(lo) ? -INFINITY : lo;
    ((double *)p)[1] = isnan(hi) ? INFINITY : hi;
    break;
  default: { /* the integers and bool, as their own type */
    int64_t mn = 0, mx = 0;
    lu_dtype_int_range(dt, &mn, &mx);
    lu_store_int(p, dt, 0, lu_clip_int_bound(lo, true, mn, mx));
    lu_store_int(p, dt, 1, lu_clip_int_bound(hi, false, mn, mx));
    break;
  }
  }
  e->param = p;
}

static luon_status un_run(lu_call *c, const unop *u) {
  ew e;
  e.kind = EW_UN;
  e.nin = 1;
  int32_t t = un_dtype(u, c->in[0]->dtype);
  e.want[0] = t;
  e.odt = u->kind == U_PRED ? LUON_DTYPE_BOOL : t;
  e.uf = u->k[t];
  e.grain = u->grain;
  e.param = NULL;
  if (u->kind == U_CLIP) clip_bounds(&e, t, c->attrs->f);
  if (u->kind == U_ROUND) round_param(&e, c->attrs);
  LU_TRY(check_out(c, u->name, e.odt));
  return run(c, &e);
}

#define UNOP(op, kind, grain)                                                  \
  static const unop U_##op = {#op, kind, grain, K_##op};                              \
  luon_status lu_shape_##op(lu_call *c) { return un_shape(c, &U_##op); }       \
  luon_status lu_cpu_##op(lu_call *c) { return un_run(c, &U_##op); }
#define EW_UNOPS(X) \
  X(negative, U_NEG, GRAIN_CHEAP) \
  X(abs, U_KEEP, GRAIN_CHEAP) \
  X(sign, U_KEEP, GRAIN_CHEAP) \
  X(exp, U_FLOAT, GRAIN_MATH) \
  X(log, U_FLOAT, GRAIN_MATH) \
  X(log2, U_FLOAT, GRAIN_MATH) \
  X(sqrt, U_FLOAT, GRAIN_CHEAP) \
  X(square, U_KEEP, GRAIN_CHEAP) \
  X(tanh, U_FLOAT, GRAIN_MATH) \
  X(sigmoid, U_FLOAT, GRAIN_MATH) \
  X(relu, U_KEEP, GRAIN_CHEAP) \
  X(clip, U_CLIP, GRAIN_CHEAP) \
  X(sin, U_FLOAT, GRAIN_MATH) \
  X(cos, U_FLOAT, GRAIN_MATH) \
  X(tan, U_FLOAT, GRAIN_MATH) \
  X(arcsin, U_FLOAT, GRAIN_MATH) \
  X(arccos, U_FLOAT, GRAIN_MATH) \
  X(arctan, U_FLOAT, GRAIN_MATH) \
  X(sinh, U_FLOAT, GRAIN_MATH) \
  X(cosh, U_FLOAT, GRAIN_MATH) \
  X(arcsinh, U_FLOAT, GRAIN_MATH) \
  X(arccosh, U_FLOAT, GRAIN_MATH) \
  X(arctanh, U_FLOAT, GRAIN_MATH) \
  X(log10, U_FLOAT, GRAIN_MATH) \
  X(log1p, U_FLOAT, GRAIN_MATH) \
  X(expm1, U_FLOAT, GRAIN_MATH) \
  X(cbrt, U_FLOAT, GRAIN_MATH) \
  X(deg2rad, U_FLOAT, GRAIN_CHEAP) \
  X(rad2deg, U_FLOAT, GRAIN_CHEAP) \
  X(reciprocal, U_NUM, GRAIN_CHEAP) \
  X(floor, U_NUM, GRAIN_CHEAP) \
  X(ceil, U_NUM, GRAIN_CHEAP) \
  X(trunc, U_NUM, GRAIN_CHEAP) \
  X(rint, U_NUM, GRAIN_CHEAP) \
  X(round, U_ROUND, GRAIN_MATH) \
  X(isnan, U_PRED, GRAIN_CHEAP) \
  X(isinf, U_PRED, GRAIN_CHEAP) \
  X(isfinite, U_PRED, GRAIN_CHEAP) \
  X(isposinf, U_PRED, GRAIN_CHEAP) \
  X(isneginf, U_PRED, GRAIN_CHEAP) \
  X(logical_not, U_PRED, GRAIN_CHEAP) \
  X(bitwise_not, U_KEEP, GRAIN_CHEAP)
EW_UNOPS(UNOP)
#define UN_OF(op, kind, grain) [LU_OP_##op] = &U_##op,
static const unop *const UN_OF_OP[LU_OP_COUNT] = {EW_UNOPS(UN_OF)};
#undef UN_OF

/* ---- chains: several ops in one pass (a replayed graph's fusion) ----------- */

/* The float32 kernel of op in e, as bin_run or un_run would choose it for
 * float32 inputs; false when op is not one a chain holds (not of this file,
 * a float32 result not guaranteed, or no float32 kernel). */
static bool chain_step(int32_t op, const luon_attrs *a, ew *e) {
  if (op < 0 || op >= LU_OP_COUNT) return false;
  const binop *b = BIN_OF_OP[op];
  const unop *u = UN_OF_OP[op];
  const int32_t t = LUON_DTYPE_F32;
  memset(e, 0, sizeof *e);
  e->odt = e->want[0] = e->want[1] = t;
  if (b && b->kind != B_CMP && b->k[t].vv) {
    e->kind = EW_BIN, e->nin = 2, e->bk = &b->k[t], e->grain = b->grain;
    return true;
  }
  if (u && u->kind != U_PRED && u->k[t]) {
    e->kind = EW_UN, e->nin = 1, e->uf = u->k[t], e->grain = u->grain;
    if (a && u->kind == U_CLIP) clip_bounds(e, t, a->f);
    if (a && u->kind == U_ROUND) round_param(e, a);
    return true;
  }
  return false;
}

bool lu_ew_chainable(int32_t op) {
  ew e;
  return chain_step(op, NULL, &e);
}

enum { CHAIN_BLK = 512 }; /* floats per block: each link's result stays in L1 */

typedef struct chain_job {
  int n;
  ew e[LU_CHAIN_MAX];
  const float *p[LU_CHAIN_MAX][2]; /* an operand's data; NULL: the link before's result */
  bool one[LU_CHAIN_MAX][2];       /* a single value, broadcast */
  float *out;
  int64_t size;
} chain_job;

static void chain_blocks(void *ctx, int64_t b0, int64_t b1) {
  const chain_job *c = ctx;
  _Alignas(64) float buf[2][CHAIN_BLK];
  for (int64_t b = b0; b < b1 && !lu_interrupted(); b++) {
    int64_t lo = b * CHAIN_BLK, m = c->size - lo < CHAIN_BLK ? c->size - lo : CHAIN_BLK;
    const float *prev = NULL;
    for (int i = 0; i < c->n; i++) {
      const ew *e = &c->e[i];
      float *o = i == c->n - 1 ? c->out + lo : buf[i & 1];
      const float *in[2];
      bool one[2];
      for (int k = 0; k < e->nin; k++) {
        one[k] = c->one[i][k] && m > 1;
        in[k] = !c->p[i][k] ? prev : c->one[i][k] ? c->p[i][k] : c->p[i][k] + lo;
      }
      if (e->kind == EW_UN) e->uf(m, in[0], o, e->param);
      else if (one[1]) e->bk->vs(m, in[0], in[1], o);
      else if (one[0]) e->bk->sv(m, in[0], in[1], o);
      else e->bk->vv(m, in[0], in[1], o);
      prev = o;
    }
  }
}

/* The chain's operands as one shape: each is float32 on dev, and either
 * dense of the shape of the one with the most dimensions, or a single value
 * with no more dimensions than that. */
static bool chain_shape(int n, const lu_ew_link *links, lu_device *dev, int *nd, int64_t *shape) {
  const luon_tensor *big = NULL;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < links[i].nin; k++) {
      const luon_tensor *t = links[i].in[k];
      if (t && (!big || t->ndim > big->ndim)) big = t;
    }
  if (!big || big->dev.type != LUON_CPU) return false;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < links[i].nin; k++) {
      const luon_tensor *t = links[i].in[k];
      if (!t) continue;
      if (t->dtype != LUON_DTYPE_F32 || !lu_device_eq(t->dev, big->dev)) return false;
      bool same = t->ndim == big->ndim && memcmp(t->shape, big->shape, sizeof(int64_t) * (size_t)t->ndim) == 0;
      if (!(same && dense(t)) && t->size != 1) return false;
    }
  /* the first link makes a result of the whole shape: one operand of it */
  bool whole = big->size == 1;
  for (int k = 0; k < links[0].nin; k++) whole = whole || (links[0].in[k] && links[0].in[k]->size == big->size);
  if (!whole) return false;
  *dev = big->dev;
  *nd = big->ndim;
  memcpy(shape, big->shape, sizeof(int64_t) * (size_t)big->ndim);
  return true;
}

luon_status lu_ew_chain_run(int n, const lu_ew_link *links, luon_tensor *into, luon_tensor **out) {
  *out = NULL;
  if (n < 1 || n > LU_CHAIN_MAX || links[0].in[0] == NULL) return LUON_OK;
  chain_job c;
  c.n = n;
  int64_t grain = GRAIN_CHEAP;
  for (int i = 0; i < n; i++) {
    if (!chain_step(links[i].op, links[i].attrs, &c.e[i]) || c.e[i].nin != links[i].nin) return LUON_OK;
    if (c.e[i].grain < grain) grain = c.e[i].grain;
    for (int k = 0; k < links[i].nin; k++) {
      const luon_tensor *t = links[i].in[k];
      if (!t && i == 0) return LUON_OK;
      c.p[i][k] = t ? lu_data(t) : NULL;
      c.one[i][k] = t && t->size == 1;
    }
  }
  lu_device dev;
  int nd;
  int64_t shape[LU_MAXD];
  if (!chain_shape(n, links, &dev, &nd, shape)) return LUON_OK;
  luon_tensor *o = NULL;
  if (into && into->dtype == LUON_DTYPE_F32 && into->ndim == nd && lu_device_eq(into->dev, dev) && dense(into) &&
      memcmp(into->shape, shape, sizeof(int64_t) * (size_t)nd) == 0)
    o = luon_tensor_retain(into);
  else
    LU_TRY(lu_tensor_new(LUON_DTYPE_F32, nd, shape, dev, &o));
  c.out = lu_data(o);
  c.size = o->size;
  int64_t blocks = (c.size + CHAIN_BLK - 1) / CHAIN_BLK;
  unsigned mark = lu_stop_mark(); /* a pass cut short by luon_interrupt fails, as an op's does */
  if (c.size < 2 * grain) chain_blocks(&c, 0, blocks);
  else lu_parallel_for(blocks, grain / CHAIN_BLK, chain_blocks, &c);
  if (lu_stopped_since(mark)) {
    luon_tensor_release(o);
    return lu_error(LUON_EINTERRUPTED, "%s: interrupted", luon_op_name(links[0].op));
  }
  *out = o;
  return LUON_OK;
}

/* ---- where ------------------------------------------------------------------ */

/* (..cond), (..x), (..y) -> the three broadcast together; dtype promote(x, y) */
luon_status lu_shape_where(lu_call *c) {
  const luon_tensor *k = c->in[0], *x = c->in[1], *y = c->in[2];
  int nd;
  int64_t s[LU_MAXD];
  if (lu_broadcast_shapes("where", k->ndim, k->shape, x->ndim, x->shape, &nd, s) != LUON_OK ||
      lu_broadcast_shapes("where", nd, s, y->ndim, y->shape, &c->out_ndim[0], c->out_shape[0]) !=
          LUON_OK)
    return lu_error(LUON_ESHAPE, "where: shapes %s (condition), %s (x) and %s (y) cannot be "
                    "broadcast together", lu_shape_str(k->ndim, k->shape),
                    lu_shape_str(x->ndim, x->shape), lu_shape_str(y->ndim, y->shape));
  int32_t t = lu_dtype_promote(x->dtype, y->dtype);
  if (!lu_dtype_valid(t) || !K_where[t])
    return lu_error(LUON_EDTYPE, "where: not supported for %s and %s", luon_dtype_name(x->dtype),
                    luon_dtype_name(y->dtype));
  c->out_dtype[0] = t;
  return LUON_OK;
}

luon_status lu_cpu_where(lu_call *c) {
  ew e;
  e.kind = EW_WHERE;
  e.nin = 3;
  int32_t t = lu_dtype_promote(c->in[1]->dtype, c->in[2]->dtype);
  e.want[0] = c->in[0]->dtype == LUON_DTYPE_U8 ? LUON_DTYPE_U8 : LUON_DTYPE_BOOL;
  e.want[1] = e.want[2] = e.odt = t;
  e.wf = K_where[t];
  e.grain = GRAIN_CHEAP;
  LU_TRY(check_out(c, "where", t));
  return run(c, &e);
}

/* ---- copy ------------------------------------------------------------------- */

/* (..x) -> (..x), dense, of dtype attrs->dtype (0: x's) */
luon_status lu_shape_copy(lu_call *c) {
  const luon_tensor *x = c->in[0];
  c->out_ndim[0] = x->ndim;
  memcpy(c->out_shape[0], x->shape, sizeof(int64_t) * (size_t)x->ndim);
  c->out_dtype[0] = c->attrs->dtype ? c->attrs->dtype : x->dtype;
  return LUON_OK;
}

/* The runtime's strided, converting copy (core/copy.c). */
luon_status lu_cpu_copy(lu_call *c) {
  if (c->out[0]->ndim != c->in[0]->ndim ||
      memcmp(c->out[0]->shape, c->in[0]->shape, sizeof(int64_t) * (size_t)c->in[0]->ndim) != 0)
    return lu_error(LUON_ESHAPE, "copy: cannot copy an array of shape %s into one of shape %s",
                    lu_shape_str(c->in[0]->ndim, c->in[0]->shape),
                    lu_shape_str(c->out[0]->ndim, c->out[0]->shape));
  lu_copy_cpu(c->out[0], c->in[0], true); /* a new output: the dispatcher throws it away */
  return LUON_OK;
}

/* ---- copyto ----------------------------------------------------------------- */

/* (..x) on one device -> (..x) dense on attrs' device (dev_type, dev_id) */
luon_status lu_shape_copyto(lu_call *c) {
  const luon_tensor *x = c->in[0];
  lu_device to = {c->attrs->dev_type ? c->attrs->dev_type : LUON_CPU, c->attrs->dev_id};
  LU_TRY(lu_device_check(to));
  c->out_ndim[0] = x->ndim;
  memcpy(c->out_shape[0], x->shape, sizeof(int64_t) * (size_t)x->ndim);
  c->out_dtype[0] = x->dtype;
  return LUON_OK;
}

/* Any device to any device: the runtime's copy (a GPU's waits for its
 * events), into an array this function makes on the target device. */
luon_status lu_cpu_copyto(lu_call *c) {
  lu_device to = {c->attrs->dev_type ? c->attrs->dev_type : LUON_CPU, c->attrs->dev_id};
  LU_TRY(lu_tensor_new(c->out_dtype[0], c->out_ndim[0], c->out_shape[0], to, &c->out[0]));
  luon_status s = luon_tensor_copy(c->out[0], c->in[0]);
  if (s != LUON_OK) {
    luon_tensor_release(c->out[0]);
    c->out[0] = NULL;
  }
  return s;
}

/* ---- backward rules --------------------------------------------------------- */

/* Input i wants a gradient: it asked for one and is a float array (integer
 * and bool inputs get none). */
static bool wants(const lu_grad_call *g, int i) {
  return g->need[i] && lu_dtype_has_grad(g->in[i]->dtype);
}

/* Every rule starts from dy = the output's gradient in the output's dtype. */
#define BEGIN                                                                  \
  lu_steps e = {LUON_OK, 0, {NULL}};                                           \
  luon_tensor *x = g->in[0], *y = g->nin > 1 ? g->in[1] : NULL, *out = g->out[0]; \
  luon_tensor *dy = g->dout[0];                                                \
  (void)x, (void)y, (void)out;                                                 \
  if (!dy) return LUON_OK;                                                     \
  if (dy->dtype != out->dtype) {                                               \
    luon_attrs cv_;                                                            \
    memset(&cv_, 0, sizeof cv_);                                               \
    cv_.dtype = out->dtype;                                                    \
    dy = lu_steps_run(&e, LU_OP_copy, &cv_, dy, NULL, NULL);                   \
  }
/* din[i] = t summed back to input i's shape, in its dtype */
#define GIVE(i, t) lu_steps_give(&e, t, g->in[i], &g->din[i])
#define END return lu_steps_end(&e)

/* add: dx = dy, dy_y = dy (each summed over the axes it was broadcast along) */
luon_status lu_grad_add(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, dy);
  if (wants(g, 1)) GIVE(1, dy);
  END;
}

/* subtract: dx = dy, d(y) = -dy */
luon_status lu_grad_subtract(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, dy);
  if (wants(g, 1)) GIVE(1, R1(negative, dy));
  END;
}

/* multiply: dx = dy * y, d(y) = dy * x */
luon_status lu_grad_multiply(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(multiply, dy, y));
  if (wants(g, 1)) GIVE(1, R2(multiply, dy, x));
  END;
}

/* divide, out = x / y: dx = dy / y, d(y) = -dy * x / y^2 = -(dy / y) * out */
luon_status lu_grad_divide(lu_grad_call *g) {
  BEGIN;
  luon_tensor *dx = R2(divide, dy, y);
  if (wants(g, 0)) GIVE(0, dx);
  if (wants(g, 1)) GIVE(1, R1(negative, R2(multiply, dx, out)));
  END;
}

/* power, out = x^y: dx = dy * y * x^(y-1) (not out / x, which fails at
 * x = 0); d(y) = dy * out * log(x), taken as 0 where out is 0 (the limit
 * for x = 0, y > 0); NaN for negative x, as the real log is. */
luon_status lu_grad_power(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0))
    GIVE(0, R2(multiply, dy, R2(multiply, y, R2(power, x, R2(subtract, y, K(1, dy))))));
  if (wants(g, 1))
    GIVE(1, R2(multiply, dy, R3(where, R2(equal, out, K(0, dy)), K(0, dy), R2(multiply, out, R1(log, x)))));
  END;
}

/* maximum: dy goes to the larger input; on ties to the first (x), as
 * maximum returns x then. minimum likewise with the smaller. */
static luon_status grad_select(lu_grad_call *g, int32_t cmp) {
  BEGIN;
  luon_tensor *first = lu_steps_run(&e, cmp, NULL, x, y, NULL); /* x >= y (x <= y) */
  if (wants(g, 0)) GIVE(0, R3(where, first, dy, K(0, dy)));
  if (wants(g, 1)) GIVE(1, R3(where, first, K(0, dy), dy));
  END;
}
luon_status lu_grad_maximum(lu_grad_call *g) { return grad_select(g, LU_OP_greater_equal); }
luon_status lu_grad_minimum(lu_grad_call *g) { return grad_select(g, LU_OP_less_equal); }

/* negative: dx = -dy */
luon_status lu_grad_negative(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R1(negative, dy));
  END;
}

/* abs: dx = dy * sign(x) (0 at x = 0) */
luon_status lu_grad_abs(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(multiply, dy, R1(sign, x)));
  END;
}

/* Zeros of t's shape, dtype and device: the gradient of a piecewise constant. */
static luon_tensor *zeros_like(lu_steps *e, const luon_tensor *t) {
  luon_attrs z;
  memset(&z, 0, sizeof z);
  z.dtype = t->dtype;
  z.dev_type = t->dev.type;
  z.dev_id = t->dev.id;
  z.ni = LU_FULL_SHAPE + t->ndim;
  memcpy(z.i + LU_FULL_SHAPE, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  return lu_steps_run(e, LU_OP_full, &z, NULL, NULL, NULL);
}

/* sign, and the rounding ops floor..round: piecewise constant, dx = 0 (MXNet's) */
static luon_status grad_zero(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, zeros_like(&e, x));
  END;
}
luon_status lu_grad_sign(lu_grad_call *g) { return grad_zero(g); }
luon_status lu_grad_floor(lu_grad_call *g) { return grad_zero(g); }
luon_status lu_grad_ceil(lu_grad_call *g) { return grad_zero(g); }
luon_status lu_grad_trunc(lu_grad_call *g) { return grad_zero(g); }
luon_status lu_grad_rint(lu_grad_call *g) { return grad_zero(g); }
luon_status lu_grad_round(lu_grad_call *g) { return grad_zero(g); }

/* exp: dx = dy * out */
luon_status lu_grad_exp(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(multiply, dy, out));
  END;
}

/* log: dx = dy / x */
luon_status lu_grad_log(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(divide, dy, x));
  END;
}

/* log2: dx = dy / (x ln 2) = (dy / x) * log2(e) */
luon_status lu_grad_log2(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(multiply, R2(divide, dy, x), K(M_LOG2E, dy)));
  END;
}

/* sqrt: dx = dy / (2 out) = (dy / out) * 0.5 */
luon_status lu_grad_sqrt(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(multiply, R2(divide, dy, out), K(0.5, dy)));
  END;
}

/* square: dx = dy * 2x */
luon_status lu_grad_square(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(multiply, dy, R2(multiply, x, K(2, dy))));
  END;
}

/* tanh: dx = dy * (1 - out^2), fused in tanh_grad(out, dy) */
luon_status lu_grad_tanh(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(tanh_grad, out, dy));
  END;
}

/* sigmoid: dx = dy * out * (1 - out), fused in sigmoid_grad(out, dy) */
luon_status lu_grad_sigmoid(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(sigmoid_grad, out, dy));
  END;
}

/* relu: dx = dy where x > 0, else 0 (also at x = 0), fused in relu_grad(x, dy) */
luon_status lu_grad_relu(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(relu_grad, x, dy));
  END;
}

/* clip to [lo, hi]: dx = dy where lo < x < hi, 0 where x was clipped or sits
 * on a bound (MXNet's rule); a NaN bound is no bound. */
luon_status lu_grad_clip(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) {
    double lo = g->attrs->f[LU_CLIP_MIN], hi = g->attrs->f[LU_CLIP_MAX];
    luon_tensor *dx = dy;
    if (!isnan(lo)) dx = R3(where, R2(greater, x, K(lo, x)), dx, K(0, dy));
    if (!isnan(hi)) dx = R3(where, R2(less, x, K(hi, x)), dx, K(0, dy));
    GIVE(0, dx);
  }
  END;
}

/* sin: dx = dy cos(x) */
luon_status lu_grad_sin(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(multiply, dy, R1(cos, x)));
  END;
}

/* cos: dx = -dy sin(x) */
luon_status lu_grad_cos(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R1(negative, R2(multiply, dy, R1(sin, x))));
  END;
}

/* tan: dx = dy (1 + out^2) */
luon_status lu_grad_tan(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(multiply, dy, R2(add, R1(square, out), K(1, dy))));
  END;
}

/* arcsin: dx = dy / sqrt(1 - x^2); arccos the same, negated */
luon_status lu_grad_arcsin(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(divide, dy, R1(sqrt, R2(subtract, K(1, dy), R1(square, x)))));
  END;
}
luon_status lu_grad_arccos(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0))
    GIVE(0, R1(negative, R2(divide, dy, R1(sqrt, R2(subtract, K(1, dy), R1(square, x))))));
  END;
}

/* arctan: dx = dy / (1 + x^2) */
luon_status lu_grad_arctan(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(divide, dy, R2(add, R1(square, x), K(1, dy))));
  END;
}

/* sinh: dx = dy cosh(x); cosh: dx = dy sinh(x) */
luon_status lu_grad_sinh(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(multiply, dy, R1(cosh, x)));
  END;
}
luon_status lu_grad_cosh(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(multiply, dy, R1(sinh, x)));
  END;
}

/* arcsinh: dx = dy / sqrt(x^2 + 1); arccosh: dx = dy / sqrt(x^2 - 1) */
luon_status lu_grad_arcsinh(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(divide, dy, R1(sqrt, R2(add, R1(square, x), K(1, dy)))));
  END;
}
luon_status lu_grad_arccosh(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(divide, dy, R1(sqrt, R2(subtract, R1(square, x), K(1, dy)))));
  END;
}

/* arctanh: dx = dy / (1 - x^2) */
luon_status lu_grad_arctanh(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(divide, dy, R2(subtract, K(1, dy), R1(square, x))));
  END;
}

/* log10: dx = dy / (x ln 10) = (dy / x) log10(e) */
luon_status lu_grad_log10(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(multiply, R2(divide, dy, x), K(M_LOG10E, dy)));
  END;
}

/* log1p: dx = dy / (1 + x) */
luon_status lu_grad_log1p(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(divide, dy, R2(add, x, K(1, dy))));
  END;
}

/* expm1: dx = dy exp(x) (not out + 1, which loses the small values) */
luon_status lu_grad_expm1(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(multiply, dy, R1(exp, x)));
  END;
}

/* cbrt: dx = dy / (3 out^2) */
luon_status lu_grad_cbrt(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(divide, dy, R2(multiply, R1(square, out), K(3, dy))));
  END;
}

/* deg2rad: dx = dy pi/180; rad2deg: dx = dy 180/pi */
luon_status lu_grad_deg2rad(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(multiply, dy, K(M_PI / 180, dy)));
  END;
}
luon_status lu_grad_rad2deg(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R2(multiply, dy, K(180 / M_PI, dy)));
  END;
}

/* reciprocal: dx = -dy out^2 */
luon_status lu_grad_reciprocal(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, R1(negative, R2(multiply, dy, R1(square, out))));
  END;
}

/* arctan2(x, y): dx = dy y / (x^2 + y^2), d(y) = -dy x / (x^2 + y^2) */
luon_status lu_grad_arctan2(lu_grad_call *g) {
  BEGIN;
  luon_tensor *q = R2(divide, dy, R2(add, R1(square, x), R1(square, y)));
  if (wants(g, 0)) GIVE(0, R2(multiply, q, y));
  if (wants(g, 1)) GIVE(1, R1(negative, R2(multiply, q, x)));
  END;
}

/* hypot: dx = dy x / out, d(y) = dy y / out */
luon_status lu_grad_hypot(lu_grad_call *g) {
  BEGIN;
  luon_tensor *q = R2(divide, dy, out);
  if (wants(g, 0)) GIVE(0, R2(multiply, q, x));
  if (wants(g, 1)) GIVE(1, R2(multiply, q, y));
  END;
}

/* fmod = x - trunc(x / y) y: dx = dy, d(y) = -dy trunc(x / y); mod the
 * same with floor (MXNet's rules) */
static luon_status grad_rem(lu_grad_call *g, int32_t rounding) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, dy);
  if (wants(g, 1))
    GIVE(1, R1(negative, R2(multiply, dy, lu_steps_run(&e, rounding, NULL, R2(divide, x, y), NULL, NULL))));
  END;
}
luon_status lu_grad_fmod(lu_grad_call *g) { return grad_rem(g, LU_OP_trunc); }
luon_status lu_grad_mod(lu_grad_call *g) { return grad_rem(g, LU_OP_floor); }

/* copysign: dx = dy where x and y have the same sign (x >= 0 as y >= 0),
 * -dy where not; d(y) = 0 (MXNet's rule) */
luon_status lu_grad_copysign(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) {
    luon_tensor *same = R2(equal, R2(greater_equal, x, K(0, x)), R2(greater_equal, y, K(0, y)));
    GIVE(0, R3(where, same, dy, R1(negative, dy)));
  }
  if (wants(g, 1)) GIVE(1, zeros_like(&e, y));
  END;
}

/* where(cond, x, y): cond gets none; dx = dy where cond, d(y) = dy elsewhere */
luon_status lu_grad_where(lu_grad_call *g) {
  BEGIN;
  luon_tensor *cond = g->in[0];
  if (wants(g, 1)) GIVE(1, R3(where, cond, dy, K(0, dy)));
  if (wants(g, 2)) GIVE(2, R3(where, cond, K(0, dy), dy));
  END;
}

/* copyto: dx = dy copied back to x's device */
luon_status lu_grad_copyto(lu_grad_call *g) {
  if (!g->need[0]) return LUON_OK;
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.dev_type = g->in[0]->dev.type;
  a.dev_id = g->in[0]->dev.id;
  luon_tensor *dy = g->dout[0];
  int32_t nout = 1;
  return luon_op_call(LU_OP_copyto, 1, &dy, &a, &nout, &g->din[0]);
}

/* copy / astype: dx = dy converted back to x's dtype */
luon_status lu_grad_copy(lu_grad_call *g) {
  BEGIN;
  if (wants(g, 0)) GIVE(0, g->dout[0]);
  END;
}
