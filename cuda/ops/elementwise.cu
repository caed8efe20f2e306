/* elementwise.cu: the one generic strided, broadcasting elementwise kernel
 * family (a functor per op, inputs converted to the compute dtype on load,
 * any strides, up to 8 dims) and the ops built on it: arithmetic,
 * comparisons, unary math, clip, where, copy/astype (float16/bfloat16
 * included), the activations of nn.c and their gradients. Results match
 * core/ops/elementwise.c and nn.c; shape and dtype checks stay in the core.
 * Operands that are all dense and of one dtype take k_map_dense instead:
 * typed 16-byte loads, no per-element dtype switch or index division. */
#include "kernels.cuh"
#include <math.h>
#include <type_traits>

/* ---- dtypes without libluon ----------------------------------------------------- */

/* luon_dtype_size is called by lu_data (internal.h); this hidden copy keeps
 * libluon_cuda.so free of references into libluon.so. ORDER luon_dtype */
extern "C" int32_t luon_dtype_size(int32_t dt) {
  static const int32_t sizes[LUON_DTYPE_COUNT] = {0, 4, 8, 2, 2, 4, 8, 1, 1, 1, 2, 2};
  return dt > 0 && dt < LUON_DTYPE_COUNT ? sizes[dt] : 0;
}

/* The type a kernel computes in for results of dtype dt: float32 for the
 * 16-bit floats (lu_ld and lu_st convert on load and store), else dt. */
static int32_t compute_dtype(int32_t dt) {
  return dt == LUON_DTYPE_F16 || dt == LUON_DTYPE_BF16 ? LUON_DTYPE_F32 : dt;
}

/* ---- index spaces ------------------------------------------------------------------ */

bool lu_cuda_contiguous(const luon_tensor *t) {
  int64_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->strides[i] != s) return false;
    s *= t->shape[i];
  }
  return true;
}

void lu_space_init(lu_space *s, int nd, const int64_t *shape) {
  memset(s, 0, sizeof *s);
  s->nd = nd;
  s->n = 1;
  for (int d = 0; d < nd; d++) {
    s->shape[d] = shape[d];
    s->n *= shape[d];
  }
}

void lu_space_add_raw(lu_space *s, void *p, int32_t dt, const int64_t *st) {
  int k = s->nops++;
  s->p[k] = p;
  s->dt[k] = dt;
  for (int d = 0; d < s->nd; d++) s->st[k][d] = s->shape[d] == 1 ? 0 : st[d];
}

void lu_space_add(lu_space *s, const luon_tensor *t) {
  int64_t st[LU_MAXD];
  int lead = s->nd - t->ndim;
  for (int d = 0; d < s->nd; d++) {
    int j = d - lead;
    st[d] = (j < 0 || t->shape[j] == 1) ? 0 : t->strides[j];
  }
  lu_space_add_raw(s, lu_data(t), t->dtype, st);
}

void lu_space_done(lu_space *s) {
  /* drop size-1 axes, then merge neighbours that step evenly for every operand */
  int nd = 0;
  for (int d = 0; d < s->nd; d++) {
    if (s->shape[d] == 1) continue;
    s->shape[nd] = s->shape[d];
    for (int k = 0; k < s->nops; k++) s->st[k][nd] = s->st[k][d];
    nd++;
  }
  int m = 0;
  for (int d = 0; d < nd; d++) {
    if (m > 0) {
      bool ok = true;
      for (int k = 0; k < s->nops && ok; k++) ok = s->st[k][m - 1] == s->st[k][d] * s->shape[d];
      if (ok) {
        s->shape[m - 1] *= s->shape[d];
        for (int k = 0; k < s->nops; k++) s->st[k][m - 1] = s->st[k][d];
        continue;
      }
    }
    s->shape[m] = s->shape[d];
    for (int k = 0; k < s->nops; k++) s->st[k][m] = s->st[k][d];
    m++;
  }
  s->nd = m;
  s->flat = m <= 1;
  for (int k = 0; k < s->nops; k++) {
    s->scalar[k] = m == 0 || s->st[k][0] == 0;
    if (m == 1 && s->st[k][0] != 0 && s->st[k][0] != 1) s->flat = false;
  }
}

/* ---- functors ------------------------------------------------------------------------- */

/* integer arithmetic wraps through the unsigned twin (uint32_t for the
 * narrow types: uint16_t would be promoted to int, whose product overflows) */
template <class T> struct twin { typedef T U; };
template <> struct twin<int32_t> { typedef uint32_t U; };
template <> struct twin<int64_t> { typedef uint64_t U; };
template <> struct twin<int8_t> { typedef uint32_t U; };
template <> struct twin<int16_t> { typedef uint32_t U; };
template <> struct twin<uint16_t> { typedef uint32_t U; };

template <class T> __device__ __forceinline__ bool isnan_(T x) {
  if constexpr (std::is_floating_point<T>::value) return x != x;
  else return false;
}
template <class T> __device__ __forceinline__ T exp_(T x) {
  if constexpr (std::is_same<T, float>::value) return expf(x);
  else return (T)exp((double)x);
}
template <class T> __device__ __forceinline__ T log1p_(T x) {
  if constexpr (std::is_same<T, float>::value) return log1pf(x);
  else return (T)log1p((double)x);
}
template <class T> __device__ __forceinline__ T erf_(T x) {
  if constexpr (std::is_same<T, float>::value) return erff(x);
  else return (T)erf((double)x);
}
/* selu's constants and gelu's, as core/ops/nn.c's */
#define SELU_LAMBDA 1.0507009873554804934193349852946
#define SELU_ALPHA 1.6732632423543772848170429916717
#define SQRT1_2 0.70710678118654752440084436210485
#define RSQRT_2PI 0.39894228040143267793994605993438
/* libm's fN for float, f for double: fn_(x) */
#define LIBM(fn)                                                                       \
  template <class T> __device__ __forceinline__ T fn##_(T x) {                         \
    if constexpr (std::is_same<T, float>::value) return fn##f(x);                      \
    else return (T)fn((double)x);                                                      \
  }
#define LIBM2(fn)                                                                      \
  template <class T> __device__ __forceinline__ T fn##_(T x, T y) {                    \
    if constexpr (std::is_same<T, float>::value) return fn##f(x, y);                   \
    else return (T)fn((double)x, (double)y);                                           \
  }
LIBM(sin) LIBM(cos) LIBM(tan) LIBM(asin) LIBM(acos) LIBM(atan) LIBM(sinh) LIBM(cosh)
LIBM(asinh) LIBM(acosh) LIBM(atanh) LIBM(log10) LIBM(expm1) LIBM(cbrt) LIBM(rint)
LIBM2(atan2) LIBM2(hypot)
/* rounding: floats through libm (fN), integers unchanged */
#define ROUNDING(fn)                                                                   \
  template <class T> __device__ __forceinline__ T fn##_(T x) {                         \
    if constexpr (std::is_same<T, float>::value) return fn##f(x);                      \
    else if constexpr (std::is_same<T, double>::value) return fn(x);                   \
    else return x;                                                                     \
  }
ROUNDING(floor) ROUNDING(ceil) ROUNDING(trunc)
/* MXNet's rint: the nearer of floor and ceil, floor on a tie */
template <class T> __device__ __forceinline__ T mxrint_(T x) {
  if constexpr (std::is_floating_point<T>::value) {
    T a = floor_(x), b = ceil_(x);
    return x - a <= b - x ? a : b;
  } else {
    return x;
  }
}
template <class T> __device__ __forceinline__ bool isinf_(T x) {
  if constexpr (std::is_floating_point<T>::value) return isinf(x);
  else return false;
}
/* x mod 0 is 0; rem has x's sign (C's %, fmod), mod y's (floor): core's irem, imod */
template <class T> __device__ __forceinline__ T rem_(T x, T y) {
  if constexpr (std::is_same<T, float>::value) return fmodf(x, y);
  else if constexpr (std::is_same<T, double>::value) return fmod(x, y);
  else return y == 0 || (std::is_signed<T>::value && y == (T)-1) ? (T)0 : (T)(x % y);
}
template <class T> __device__ __forceinline__ T mod_(T x, T y) {
  if (y == 0) return (T)0;
  T r = rem_(x, y);
  return r != 0 && (r < 0) != (y < 0) ? (T)(r + y) : r;
}
/* MXNet's copysign, by comparisons (-0 counts as positive, a NaN flips x) */
template <class T> __device__ __forceinline__ T copysign_(T x, T y) {
  return (x >= 0 && y >= 0) || (x < 0 && y < 0) ? x : (T)((typename twin<T>::U)0 - (typename twin<T>::U)x);
}
/* integers: 1/x truncated, 1/0 the lowest value (0 for unsigned) */
template <class T> __device__ __forceinline__ T recip_(T x) {
  if constexpr (std::is_floating_point<T>::value) return (T)1 / x;
  else if (x != 0) return (T)((T)1 / x);
  else return std::is_signed<T>::value ? (T)(INT64_MIN >> (64 - 8 * (int)sizeof(T))) : (T)0;
}

/* bitwise ops of integers and bool (the core refuses floats, whose
 * instances only compile) */
#define BITOP(fn, EXPR)                                                                \
  template <class T> __device__ __forceinline__ T fn(T x, T y) {                       \
    if constexpr (std::is_integral<T>::value) {                                        \
      typedef typename twin<T>::U U;                                                   \
      return (T)(EXPR);                                                                \
    } else {                                                                           \
      return x;                                                                        \
    }                                                                                  \
  }
BITOP(band_, (U)x & (U)y)
BITOP(bor_, (U)x | (U)y)
BITOP(bxor_, (U)x ^ (U)y)
/* gcd and lcm of the magnitudes in uint64, wrapped to T; shifts by [0, bits)
 * as C's, others 0 (-1 for a negative x shifted right): core's E_gcd ... */
__device__ __forceinline__ unsigned long long umag_(long long x) {
  return x < 0 ? 0ull - (unsigned long long)x : (unsigned long long)x;
}
__device__ __forceinline__ unsigned long long ugcd_(unsigned long long a, unsigned long long b) {
  while (b) {
    unsigned long long t = a % b;
    a = b, b = t;
  }
  return a;
}
BITOP(gcd_, ugcd_(umag_((long long)x), umag_((long long)y)))
BITOP(lcm_, umag_((long long)x) == 0 || umag_((long long)y) == 0
                ? 0ull
                : umag_((long long)x) / ugcd_(umag_((long long)x), umag_((long long)y)) * umag_((long long)y))
BITOP(shl_, y >= 0 && (long long)y < (long long)(8 * sizeof(T)) ? (U)((U)x << y) : (U)0)
BITOP(shr_, y >= 0 && (long long)y < (long long)(8 * sizeof(T)) ? (T)(x >> y) : (T)(x < 0 ? -1 : 0))
template <class T> __device__ __forceinline__ T bnot_(T x, bool is_bool) {
  if constexpr (std::is_integral<T>::value) return is_bool ? (T)(x == 0) : (T)~(typename twin<T>::U)x;
  else return x;
}

/* integer power by squaring, wrapping; negative exponents as 1/x^-y truncated */
__device__ __forceinline__ int64_t ipow(int64_t x, int64_t y) {
  if (y < 0) return x == 1 ? 1 : x == -1 ? (y & 1 ? -1 : 1) : 0;
  uint64_t r = 1, b = (uint64_t)x;
  for (uint64_t e = (uint64_t)y; e; e >>= 1, b *= b)
    if (e & 1) r *= b;
  return (int64_t)r;
}

#define BIN(NAME, EXPR)                                                                \
  struct NAME {                                                                        \
    static const int arity = 2;                                                        \
    double s;                                                                          \
    template <class T> __device__ __forceinline__ auto operator()(T x, T y) const {    \
      typedef typename twin<T>::U U;                                                   \
      (void)sizeof(U);                                                                 \
      return EXPR;                                                                     \
    }                                                                                  \
  };
#define UN(NAME, EXPR)                                                                 \
  struct NAME {                                                                        \
    static const int arity = 1;                                                        \
    double s;                                                                          \
    template <class T> __device__ __forceinline__ T operator()(T x) const {            \
      typedef typename twin<T>::U U;                                                   \
      (void)sizeof(U);                                                                 \
      return EXPR;                                                                     \
    }                                                                                  \
  };

BIN(Add, (T)((U)x + (U)y))
BIN(Sub, (T)((U)x - (U)y))
BIN(Mul, (T)((U)x * (U)y))
BIN(Div, (T)(x / y))
BIN(Max, (T)((x > y || isnan_(x)) ? x : y))
BIN(Min, (T)((x < y || isnan_(x)) ? x : y))
BIN(Eq, (bool)(x == y))
BIN(Ne, (bool)(x != y))
BIN(Gt, (bool)(x > y))
BIN(Ge, (bool)(x >= y))
BIN(Lt, (bool)(x < y))
BIN(Le, (bool)(x <= y))
struct Pow {
  static const int arity = 2;
  double s;
  template <class T> __device__ __forceinline__ T operator()(T x, T y) const {
    if constexpr (std::is_same<T, float>::value) return powf(x, y);
    else if constexpr (std::is_same<T, double>::value) return pow(x, y);
    else return (T)ipow((int64_t)x, (int64_t)y);
  }
};

UN(Neg, (T)(-(U)x))
UN(Sign, (T)(x > 0 ? (T)1 : x < 0 ? (T)-1 : x))
UN(Square, (T)((U)x * (U)x))
UN(Relu, (T)(x < 0 ? (T)0 : x))
UN(Sigmoid, (T)((T)1 / ((T)1 + exp_(-x))))
UN(Exp, exp_(x))
UN(SoftRelu, (T)(x > 0 ? x + log1p_(exp_(-x)) : log1p_(exp_(x))))
UN(Leaky, (T)(x > 0 ? x : (T)s * x))
UN(Elu, (T)(x > 0 ? x : (T)s * (exp_(x) - (T)1)))
UN(Selu, (T)((T)SELU_LAMBDA * (x > 0 ? x : (T)SELU_ALPHA * (exp_(x) - (T)1))))
UN(Gelu, (T)((T)0.5 * x * ((T)1 + erf_(x * (T)SQRT1_2))))
UN(Ident, x)
UN(Sin, sin_(x))
UN(Cos, cos_(x))
UN(Tan, tan_(x))
UN(Arcsin, asin_(x))
UN(Arccos, acos_(x))
UN(Arctan, atan_(x))
UN(Sinh, sinh_(x))
UN(Cosh, cosh_(x))
UN(Arcsinh, asinh_(x))
UN(Arccosh, acosh_(x))
UN(Arctanh, atanh_(x))
UN(Log10, log10_(x))
UN(Log1p, log1p_(x))
UN(Expm1, expm1_(x))
UN(Cbrt, cbrt_(x))
UN(Deg2rad, (T)(x * (T)(M_PI / 180)))
UN(Rad2deg, (T)(x * (T)(180 / M_PI)))
UN(Reciprocal, recip_(x))
UN(Floor, floor_(x))
UN(Ceil, ceil_(x))
UN(Trunc, trunc_(x))
UN(Rint, mxrint_(x))
UN(BitNot, bnot_(x, s != 0)) /* s = 1: bool, whose ~ is not */
BIN(Arctan2, atan2_(x, y))
BIN(Hypot, hypot_(x, y))
BIN(Fmod, rem_(x, y))
BIN(Mod, mod_(x, y))
BIN(Copysign, copysign_(x, y))
BIN(And, (bool)(x != 0 && y != 0))
BIN(Or, (bool)(x != 0 || y != 0))
BIN(Xor, (bool)((x != 0) != (y != 0)))
BIN(BitAnd, band_(x, y))
BIN(BitOr, bor_(x, y))
BIN(BitXor, bxor_(x, y))
BIN(Gcd, gcd_(x, y))
BIN(Lcm, lcm_(x, y))
BIN(Shl, shl_(x, y))
BIN(Shr, shr_(x, y))
/* predicates: a truth value of x */
#define PRED(NAME, EXPR)                                                               \
  struct NAME {                                                                        \
    static const int arity = 1;                                                        \
    double s;                                                                          \
    template <class T> __device__ __forceinline__ bool operator()(T x) const { return EXPR; } \
  };
PRED(IsNan, isnan_(x))
PRED(IsInf, isinf_(x))
PRED(IsFinite, !isnan_(x) && !isinf_(x))
PRED(IsPosInf, isinf_(x) && x > 0)
PRED(IsNegInf, isinf_(x) && x < 0)
PRED(LogicalNot, x == 0)
/* round to d decimals, halves to even: x scaled by k = 10^|d| (core's round_f, round_d, round_i) */
struct Round {
  static const int arity = 1;
  double d, k;
  template <class T> __device__ __forceinline__ T operator()(T x) const {
    if constexpr (std::is_floating_point<T>::value) {
      T kt = (T)k, y = d > 0 ? x * kt : x / kt, r = rint_(y);
      return d == 0 ? rint_(x) : d > 0 ? (isfinite(y) ? r / kt : x) : (r == 0 ? r : r * kt);
    } else {
      if (d >= 0) return x;
      if (d < -18) return (T)0;
      int64_t v = (int64_t)x, kk = (int64_t)k, q = v / kk, r = v % kk;
      uint64_t twice = 2 * (uint64_t)(r < 0 ? -r : r);
      if (twice > (uint64_t)kk || (twice == (uint64_t)kk && (q & 1))) q += v < 0 ? -1 : 1;
      return (T)(int64_t)((uint64_t)q * (uint64_t)kk);
    }
  }
};
struct Abs {
  static const int arity = 1;
  double s;
  template <class T> __device__ __forceinline__ T operator()(T x) const {
    if constexpr (std::is_floating_point<T>::value) return x < 0 ? -x : (x == 0 ? (T)0 : x);
    else if constexpr (std::is_unsigned<T>::value) return x;
    else return x < 0 ? (T)((typename twin<T>::U)0 - (typename twin<T>::U)x) : x;
  }
};
struct Log {
  static const int arity = 1;
  double s;
  template <class T> __device__ __forceinline__ T operator()(T x) const {
    if constexpr (std::is_same<T, float>::value) return logf(x);
    else return (T)log((double)x);
  }
};
struct Log2 {
  static const int arity = 1;
  double s;
  template <class T> __device__ __forceinline__ T operator()(T x) const {
    if constexpr (std::is_same<T, float>::value) return log2f(x);
    else return (T)log2((double)x);
  }
};
struct Sqrt {
  static const int arity = 1;
  double s;
  template <class T> __device__ __forceinline__ T operator()(T x) const {
    if constexpr (std::is_same<T, float>::value) return sqrtf(x);
    else return (T)sqrt((double)x);
  }
};
struct Tanh {
  static const int arity = 1;
  double s;
  template <class T> __device__ __forceinline__ T operator()(T x) const {
    if constexpr (std::is_same<T, float>::value) return tanhf(x);
    else return (T)tanh((double)x);
  }
};
/* clip: bounds fixed per dtype on the host (floats: lo/hi, integers: ilo/ihi) */
struct Clip {
  static const int arity = 1;
  double lo, hi;
  int64_t ilo, ihi;
  template <class T> __device__ __forceinline__ T operator()(T x) const {
    T l, h;
    if constexpr (std::is_floating_point<T>::value) l = (T)lo, h = (T)hi;
    else l = (T)ilo, h = (T)ihi;
    return x < l ? (l > h ? h : l) : x > h ? h : x; /* NumPy's minimum(maximum(x, lo), hi) */
  }
};
/* activation gradients: (v, d) = (x or y, dy) */
BIN(GRelu, (T)(x > 0 ? y : (T)0))
BIN(GSigmoid, (T)(y * x * ((T)1 - x)))
BIN(GTanh, (T)(y * ((T)1 - x * x)))
BIN(GSoftRelu, (T)(y / ((T)1 + exp_(-x))))
BIN(GLeaky, (T)(x > 0 ? y : (T)s * y))
BIN(GElu, (T)(x > 0 ? y : (T)s * exp_(x) * y))
BIN(GSelu, (T)((T)SELU_LAMBDA * (x > 0 ? y : (T)SELU_ALPHA * exp_(x) * y)))
BIN(GGelu, (T)(y * ((T)0.5 * ((T)1 + erf_(x * (T)SQRT1_2)) + x * (T)RSQRT_2PI * exp_((T)-0.5 * x * x))))

/* ---- kernels ------------------------------------------------------------------------ */

/* operand 0 the output (stored as its dtype), 1..arity the inputs read as T */
template <class T, class F> __global__ void k_map(lu_space s, F f) {
  LU_GRID_LOOP(i, s.n) {
    int64_t o[LU_MAX_OPS];
    lu_offsets(s, i, o);
    T a = lu_ld<T>(s.p[1], s.dt[1], o[1]);
    if constexpr (F::arity == 1) {
      lu_st(s.p[0], s.dt[0], o[0], f(a));
    } else {
      T b = lu_ld<T>(s.p[2], s.dt[2], o[2]);
      lu_st(s.p[0], s.dt[0], o[0], f(a, b));
    }
  }
}

/* where: operand 1 the condition (nonzero = true), 2 and 3 x and y */
template <class T> __global__ void k_where(lu_space s) {
  LU_GRID_LOOP(i, s.n) {
    int64_t o[LU_MAX_OPS];
    lu_offsets(s, i, o);
    T v = lu_ld_truth(s.p[1], s.dt[1], o[1]) ? lu_ld<T>(s.p[2], s.dt[2], o[2])
                                             : lu_ld<T>(s.p[3], s.dt[3], o[3]);
    lu_st(s.p[0], s.dt[0], o[0], v);
  }
}

/* copy to a bool output: a truth value, as the CPU's conversion to bool */
__global__ void k_copy_truth(lu_space s) {
  LU_GRID_LOOP(i, s.n) {
    int64_t o[LU_MAX_OPS];
    lu_offsets(s, i, o);
    ((uint8_t *)s.p[0])[o[0]] = lu_ld_truth(s.p[1], s.dt[1], o[1]);
  }
}

/* ---- the dense fast path ----------------------------------------------------------- */

/* A stored S read as the compute type T and back: lu_ld's and lu_st's
 * conversions for one dtype (identity but for the 16-bit floats). */
template <class T, class S> __device__ __forceinline__ T lu_in(S v) { return (T)v; }
template <> __device__ __forceinline__ float lu_in<float, __half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float lu_in<float, __nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <class S, class T> __device__ __forceinline__ S lu_out(T v) { return (S)v; }
template <> __device__ __forceinline__ __half lu_out<__half, float>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 lu_out<__nv_bfloat16, float>(float v) {
  return __float2bfloat16_rn(v);
}

/* V elements of S in one aligned load or store (16 bytes for the V chosen) */
template <class S, int V> struct alignas(sizeof(S) * V) lu_vec { S v[V]; };

/* k_map where every operand is dense and of the one dtype S (an input may be
 * a single broadcast value, sa/sb): typed loads and no index arithmetic,
 * V elements a thread through one 16-byte load per operand (the caller has
 * checked the alignment), the last n % V one at a time. */
template <class S, class T, int V, class F>
__global__ void k_map_dense(int64_t n, S *y, const S *a, const S *b, bool sa, bool sb, F f) {
  const int64_t nv = n / V;
  LU_GRID_LOOP(i, nv) {
    lu_vec<S, V> va, vb, vy;
    if (!sa) va = ((const lu_vec<S, V> *)a)[i];
    if constexpr (F::arity == 2) {
      if (!sb) vb = ((const lu_vec<S, V> *)b)[i];
    }
#pragma unroll
    for (int k = 0; k < V; k++) {
      T x = lu_in<T>(sa ? a[0] : va.v[k]);
      if constexpr (F::arity == 1) vy.v[k] = lu_out<S>((T)f(x));
      else vy.v[k] = lu_out<S>((T)f(x, lu_in<T>(sb ? b[0] : vb.v[k])));
    }
    ((lu_vec<S, V> *)y)[i] = vy;
  }
  LU_GRID_LOOP(j, n - nv * V) {
    int64_t i = nv * V + j;
    T x = lu_in<T>(a[sa ? 0 : i]);
    if constexpr (F::arity == 1) y[i] = lu_out<S>((T)f(x));
    else y[i] = lu_out<S>((T)f(x, lu_in<T>(b[sb ? 0 : i])));
  }
}

/* Launch k_map_dense when the space is flat, the output dense and every
 * operand of the output's dtype, computed as ct (float32, float64 and their
 * 16-bit storage, int32, int64); false: the caller runs the general k_map. */
template <class F> static bool map_dense(const lu_space &s, int32_t ct, bool floats_only, cudaStream_t st, F f) {
  if (!s.flat || s.scalar[0]) return false;
  const int32_t dt = s.dt[0];
  for (int k = 1; k <= F::arity; k++)
    if (s.dt[k] != dt) return false;
  if (compute_dtype(dt) != ct || (floats_only && ct != LUON_DTYPE_F32 && ct != LUON_DTYPE_F64)) return false;
  const bool sa = s.scalar[1], sb = F::arity == 2 && s.scalar[2];
  const void *b = F::arity == 2 ? s.p[2] : s.p[1];
  const uintptr_t bits = (uintptr_t)s.p[0] | (sa ? 0 : (uintptr_t)s.p[1]) | (F::arity == 2 && !sb ? (uintptr_t)b : 0);
  const bool aligned = bits % 16 == 0;
#define LU_DENSE(S, T, V)                                                                                   \
  if (aligned)                                                                                              \
    k_map_dense<S, T, V, F><<<lu_blocks(s.n / V), LU_THREADS, 0, st>>>(s.n, (S *)s.p[0], (const S *)s.p[1], \
                                                                      (const S *)b, sa, sb, f);             \
  else                                                                                                      \
    k_map_dense<S, T, 1, F><<<lu_blocks(s.n), LU_THREADS, 0, st>>>(s.n, (S *)s.p[0], (const S *)s.p[1],     \
                                                                  (const S *)b, sa, sb, f);                 \
  return true;
  switch (dt) {
  case LUON_DTYPE_F32: LU_DENSE(float, float, 4)
  case LUON_DTYPE_F64: LU_DENSE(double, double, 2)
  case LUON_DTYPE_F16: LU_DENSE(__half, float, 8)
  case LUON_DTYPE_BF16: LU_DENSE(__nv_bfloat16, float, 8)
  case LUON_DTYPE_I32: LU_DENSE(int32_t, int32_t, 4)
  case LUON_DTYPE_I64: LU_DENSE(int64_t, int64_t, 2)
  default: return false;
  }
#undef LU_DENSE
}

/* ---- launching ---------------------------------------------------------------------- */

static luon_status no_dtype(const char *op, int32_t dt) {
  static const char *const names[LUON_DTYPE_COUNT] = {/* ORDER luon_dtype */
      "?", "float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "bool", "int8", "int16", "uint16"};
  return lu_cuda_seterr(LUON_EDTYPE, "%s: no CUDA kernel for %s", op,
                        names[dt > 0 && dt < LUON_DTYPE_COUNT ? dt : 0]);
}

/* out = f(in...) over the output's shape, inputs broadcast, computed as dtype ct
 * (float32 for the 16-bit floats). */
template <class F> static luon_status map_op(lu_call *c, int32_t ct, F f, bool floats_only) {
  ct = compute_dtype(ct);
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_tensor *y = c->out[0];
  luon_status st = LUON_OK;
  if (y->size > 0) {
    lu_space s;
    lu_space_init(&s, y->ndim, y->shape);
    lu_space_add(&s, y);
    for (int j = 0; j < F::arity; j++) lu_space_add(&s, c->in[j]);
    lu_space_done(&s);
    unsigned g = lu_blocks(s.n);
    if (map_dense(s, ct, floats_only, k.s, f)) {
      /* launched */
    } else if (floats_only) {
      LU_DISPATCH_FLOAT(ct, T, (k_map<T, F><<<g, LU_THREADS, 0, k.s>>>(s, f)),
                        st = no_dtype(k.op, ct))
    } else {
      LU_DISPATCH_ALL(ct, T, (k_map<T, F><<<g, LU_THREADS, 0, k.s>>>(s, f)),
                      st = no_dtype(k.op, ct))
    }
  }
  return lu_cuda_end(&k, st);
}

/* The dtype binary inputs are read as: the output's, or their promotion
 * for comparisons (whose output is bool). */
static int32_t bin_ct(const lu_call *c) {
  return lu_dtype_promote(c->in[0]->dtype, c->in[1]->dtype);
}

#define BINARY(op, F, FLOATS)                                                         \
  luon_status lu_cuda_##op(lu_call *c) { return map_op(c, c->out[0]->dtype, F{0}, FLOATS); }
#define COMPARE(op, F)                                                                \
  luon_status lu_cuda_##op(lu_call *c) { return map_op(c, bin_ct(c), F{0}, false); }
#define UNARY(op, F, FLOATS)                                                          \
  luon_status lu_cuda_##op(lu_call *c) { return map_op(c, c->out[0]->dtype, F{0}, FLOATS); }
/* unary predicates read x as its own dtype (their output is bool) */
#define PREDICATE(op, F)                                                              \
  luon_status lu_cuda_##op(lu_call *c) { return map_op(c, c->in[0]->dtype, F{0}, false); }

BINARY(add, Add, false)
BINARY(subtract, Sub, false)
BINARY(multiply, Mul, false)
BINARY(divide, Div, true)
BINARY(power, Pow, false)
BINARY(maximum, Max, false)
BINARY(minimum, Min, false)
COMPARE(equal, Eq)
COMPARE(not_equal, Ne)
COMPARE(greater, Gt)
COMPARE(greater_equal, Ge)
COMPARE(less, Lt)
COMPARE(less_equal, Le)
UNARY(negative, Neg, false)
UNARY(abs, Abs, false)
UNARY(sign, Sign, false)
UNARY(exp, Exp, true)
UNARY(log, Log, true)
UNARY(log2, Log2, true)
UNARY(sqrt, Sqrt, true)
UNARY(square, Square, false)
UNARY(tanh, Tanh, true)
UNARY(sigmoid, Sigmoid, true)
UNARY(relu, Relu, false)
UNARY(softrelu, SoftRelu, true)
UNARY(sin, Sin, true)
UNARY(cos, Cos, true)
UNARY(tan, Tan, true)
UNARY(arcsin, Arcsin, true)
UNARY(arccos, Arccos, true)
UNARY(arctan, Arctan, true)
UNARY(sinh, Sinh, true)
UNARY(cosh, Cosh, true)
UNARY(arcsinh, Arcsinh, true)
UNARY(arccosh, Arccosh, true)
UNARY(arctanh, Arctanh, true)
UNARY(log10, Log10, true)
UNARY(log1p, Log1p, true)
UNARY(expm1, Expm1, true)
UNARY(cbrt, Cbrt, true)
UNARY(deg2rad, Deg2rad, true)
UNARY(rad2deg, Rad2deg, true)
UNARY(reciprocal, Reciprocal, false)
UNARY(floor, Floor, false)
UNARY(ceil, Ceil, false)
UNARY(trunc, Trunc, false)
UNARY(rint, Rint, false)
PREDICATE(isnan, IsNan)
PREDICATE(isinf, IsInf)
PREDICATE(isfinite, IsFinite)
PREDICATE(isposinf, IsPosInf)
PREDICATE(isneginf, IsNegInf)
PREDICATE(logical_not, LogicalNot)
BINARY(arctan2, Arctan2, true)
BINARY(hypot, Hypot, true)
BINARY(fmod, Fmod, false)
BINARY(mod, Mod, false)
BINARY(copysign, Copysign, false)
COMPARE(logical_and, And)
COMPARE(logical_or, Or)
COMPARE(logical_xor, Xor)
BINARY(bitwise_and, BitAnd, false)
BINARY(bitwise_or, BitOr, false)
BINARY(bitwise_xor, BitXor, false)
BINARY(gcd, Gcd, false)
BINARY(lcm, Lcm, false)
BINARY(left_shift, Shl, false)
BINARY(right_shift, Shr, false)
BINARY(relu_grad, GRelu, true)
BINARY(sigmoid_grad, GSigmoid, true)
BINARY(tanh_grad, GTanh, true)
BINARY(softrelu_grad, GSoftRelu, true)
UNARY(selu, Selu, true)
UNARY(gelu, Gelu, true)
BINARY(selu_grad, GSelu, true)
BINARY(gelu_grad, GGelu, true)

luon_status lu_cuda_leaky_relu(lu_call *c) {
  return map_op(c, c->out[0]->dtype, Leaky{c->attrs->f[LU_LEAKY_SLOPE]}, true);
}
luon_status lu_cuda_leaky_relu_grad(lu_call *c) {
  return map_op(c, c->out[0]->dtype, GLeaky{c->attrs->f[LU_LEAKY_SLOPE]}, true);
}
luon_status lu_cuda_elu(lu_call *c) {
  return map_op(c, c->out[0]->dtype, Elu{c->attrs->f[LU_LEAKY_SLOPE]}, true);
}
luon_status lu_cuda_elu_grad(lu_call *c) {
  return map_op(c, c->out[0]->dtype, GElu{c->attrs->f[LU_LEAKY_SLOPE]}, true);
}

luon_status lu_cuda_clip(lu_call *c) {
  int32_t dt = c->out[0]->dtype;
  const double *f = c->attrs->f;
  Clip k;
  k.lo = isnan(f[LU_CLIP_MIN]) ? -INFINITY : f[LU_CLIP_MIN];
  k.hi = isnan(f[LU_CLIP_MAX]) ? INFINITY : f[LU_CLIP_MAX];
  if (dt == LUON_DTYPE_F32) k.lo = (float)k.lo, k.hi = (float)k.hi;
  int64_t mn = INT64_MIN, mx = INT64_MAX;
  lu_dtype_int_range(dt, &mn, &mx);
  k.ilo = lu_clip_int_bound(f[0], true, mn, mx);
  k.ihi = lu_clip_int_bound(f[1], false, mn, mx);
  return map_op(c, dt, k, false);
}

luon_status lu_cuda_bitwise_not(lu_call *c) {
  int32_t dt = c->out[0]->dtype;
  return map_op(c, dt, BitNot{dt == LUON_DTYPE_BOOL ? 1.0 : 0.0}, false);
}

luon_status lu_cuda_round(lu_call *c) {
  const luon_attrs *a = c->attrs;
  double d = a->ni > LU_ROUND_DECIMALS ? (double)a->i[LU_ROUND_DECIMALS] : 0;
  return map_op(c, c->out[0]->dtype, Round{d, pow(10, fabs(d))}, false);
}

luon_status lu_cuda_where(lu_call *c) {
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_tensor *y = c->out[0];
  luon_status st = LUON_OK;
  if (y->size > 0) {
    lu_space s;
    lu_space_init(&s, y->ndim, y->shape);
    lu_space_add(&s, y);
    for (int j = 0; j < 3; j++) lu_space_add(&s, c->in[j]);
    lu_space_done(&s);
    LU_DISPATCH_ALL(compute_dtype(y->dtype), T, (k_where<T><<<lu_blocks(s.n), LU_THREADS, 0, k.s>>>(s)),
                    st = no_dtype("where", y->dtype))
  }
  return lu_cuda_end(&k, st);
}

/* ---- copy / astype --------------------------------------------------------------- */

/* operand 0 <- operand 1 converted; the compute type is the output's
 * (float for the 16-bit storage types, a truth value for bool). */
luon_status lu_cuda_copy_space(lu_space *sp, cudaStream_t s) {
  if (sp->n == 0) return LUON_OK;
  int32_t odt = sp->dt[0];
  unsigned g = lu_blocks(sp->n);
  switch (odt) {
  case LUON_DTYPE_BOOL: k_copy_truth<<<g, LU_THREADS, 0, s>>>(*sp); break;
  case LUON_DTYPE_F16:
  case LUON_DTYPE_BF16: k_map<float, Ident><<<g, LU_THREADS, 0, s>>>(*sp, Ident{0}); break;
  case LUON_DTYPE_F32: k_map<float, Ident><<<g, LU_THREADS, 0, s>>>(*sp, Ident{0}); break;
  case LUON_DTYPE_F64: k_map<double, Ident><<<g, LU_THREADS, 0, s>>>(*sp, Ident{0}); break;
  case LUON_DTYPE_I32: k_map<int32_t, Ident><<<g, LU_THREADS, 0, s>>>(*sp, Ident{0}); break;
  case LUON_DTYPE_I64: k_map<int64_t, Ident><<<g, LU_THREADS, 0, s>>>(*sp, Ident{0}); break;
  case LUON_DTYPE_U8: k_map<uint8_t, Ident><<<g, LU_THREADS, 0, s>>>(*sp, Ident{0}); break;
  case LUON_DTYPE_I8: k_map<int8_t, Ident><<<g, LU_THREADS, 0, s>>>(*sp, Ident{0}); break;
  case LUON_DTYPE_I16: k_map<int16_t, Ident><<<g, LU_THREADS, 0, s>>>(*sp, Ident{0}); break;
  case LUON_DTYPE_U16: k_map<uint16_t, Ident><<<g, LU_THREADS, 0, s>>>(*sp, Ident{0}); break;
  default: return no_dtype("copy", odt);
  }
  return LUON_OK;
}

/* Also reached from luon_tensor_copy with out[0] any strided view of x's shape. */
luon_status lu_cuda_copy(lu_call *c) {
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_tensor *y = c->out[0], *x = c->in[0];
  luon_status st = LUON_OK;
  if (y->ndim != x->ndim || memcmp(y->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim) != 0) {
    st = lu_cuda_seterr(LUON_ESHAPE, "copy: shapes differ");
  } else if (y->size > 0) {
    lu_space s;
    lu_space_init(&s, y->ndim, y->shape);
    lu_space_add(&s, y);
    lu_space_add(&s, x);
    lu_space_done(&s);
    if (s.flat && !s.scalar[0] && !s.scalar[1] && y->dtype == x->dtype) {
      cudaError_t e = cudaMemcpyAsync(s.p[0], s.p[1], (size_t)s.n * luon_dtype_size(x->dtype),
                                      cudaMemcpyDeviceToDevice, k.s);
      if (e != cudaSuccess) st = lu_cuda_fail(e, "copy: cudaMemcpyAsync");
    } else {
      st = lu_cuda_copy_space(&s, k.s);
    }
  }
  return lu_cuda_end(&k, st);
}

/* The vtable's copy (luon_tensor_copy): dst <- src on dst's GPU, any strides. */
luon_status lu_cuda_copy_to(luon_tensor *dst, const luon_tensor *src) {
  luon_tensor *x = (luon_tensor *)src;
  lu_call c;
  memset(&c, 0, sizeof c);
  c.op = LU_OP_copy;
  c.nin = 1;
  c.nout = 1;
  c.in = &x;
  c.dev = dst->dev;
  c.out[0] = dst;
  return lu_cuda_copy(&c);
}

luon_status lu_cuda_dense(const luon_tensor *t, int32_t dt, cudaStream_t s, void **ptr,
                          lu_block **blk) {
  *blk = NULL;
  if (t->dtype == dt && lu_cuda_contiguous(t)) {
    *ptr = lu_data(t);
    return LUON_OK;
  }
  LU_TRY(lu_cuda_scratch(t->dev.id, (size_t)t->size * luon_dtype_size(dt), blk));
  *ptr = (*blk)->ptr;
  int64_t st[LU_MAXD], acc = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    st[d] = acc;
    acc *= t->shape[d];
  }
  lu_space sp;
  lu_space_init(&sp, t->ndim, t->shape);
  lu_space_add_raw(&sp, *ptr, dt, st);
  lu_space_add(&sp, t);
  lu_space_done(&sp);
  luon_status r = lu_cuda_copy_space(&sp, s);
  if (r != LUON_OK) {
    lu_cuda_scratch_free(*blk);
    *blk = NULL;
  }
  return r;
}

luon_status lu_cuda_zero(void *p, size_t bytes, cudaStream_t s) {
  if (bytes == 0) return LUON_OK;
  LU_CUDA_TRY(cudaMemsetAsync(p, 0, bytes, s));
  return LUON_OK;
}
