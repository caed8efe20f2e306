/* conv.cu: 2-d and 3-d convolution (cross-correlation) in NCHW / NCDHW and
 * their input and weight gradients through cuDNN 9's convolution API (N-d
 * descriptors): stride, padding, dilation, groups; algorithms from cuDNN's
 * measurements (cudnnFind*, MXNet's default) or, under
 * LUON_CUDNN_AUTOTUNE=0, cuDNN's heuristics (the _v7 queries),
 * chosen once per problem and kept with its descriptors in a bounded
 * per-GPU cache (keycache.h); workspace from the core's caching allocator;
 * where cuDNN has no algorithm (float64 with some dilations or groups), a
 * direct kernel per direction (slow, sums in double);
 * FMA math (no TF32) unless LUON_CUDA_TF32=1; float16 and bfloat16 data with
 * float32 compute (tensor cores allowed). Operands are made dense first when
 * they are not. The forward's bias and conv2d's fused relu (i[7] = 1) are
 * one small kernel after it. The CPU kernels are core/ops/conv.c's and
 * conv3d.c's. */
#include "kernels.cuh"
#include "keycache.h"
#include "cudnn_handle.h"
#include <pthread.h>


enum { C_FWD, C_DATA, C_FILTER };

/* y (N,O,P) dense, in place: y + b[o] (when b), then max(that, 0) with NaN
 * kept (when relu), as core/ops/conv.c; computed as T, b of y's dtype dt. */
template <class T>
__global__ void k_bias_relu(void *y, int32_t dt, const void *b, int64_t n, int64_t O, int64_t P,
                            bool relu) {
  LU_GRID_LOOP(i, n) {
    T v = lu_ld<T>(y, dt, i);
    if (b) v += lu_ld<T>(b, dt, i / P % O);
    if (relu && v < (T)0) v = (T)0;
    lu_st(y, dt, i, v);
  }
}

/* y (N,O,P) of dtype dt, in place: + bias b (dense, dt; may be NULL) then relu
 * (also linear's, cuda/ops/matmul.cu, with P = 1). */
void lu_cuda_bias_relu(void *y, int32_t dt, const void *b, const luon_tensor *yt, bool relu, cudaStream_t st) {
  int64_t n = yt->size, O = yt->shape[1], P = 1;
  for (int d = 2; d < yt->ndim; d++) P *= yt->shape[d];
  if (n == 0 || (!b && !relu)) return;
  if (dt == LUON_DTYPE_F64)
    k_bias_relu<double><<<lu_blocks(n), LU_THREADS, 0, st>>>(y, dt, b, n, O, P, relu);
  else
    k_bias_relu<float><<<lu_blocks(n), LU_THREADS, 0, st>>>(y, dt, b, n, O, P, relu);
}

/* ---- plans: descriptors and the chosen algorithm, cached ------------------------ */

/* Everything the choice of algorithm depends on; zeroed, so its bytes are the key. */
typedef struct conv_key {
  int32_t kind, dt, nd, groups, tf32, dev;
  int32_t x[5], w[5], y[5], pad[3], stride[3], dil[3];
} conv_key;

/* The descriptors of one problem and, once one has run, its algorithm
 * (cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t), math type (set on cd)
 * and workspace. Shared read-only once cached. */
typedef struct plan {
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  int algo;
  size_t wsbytes;
} plan;

enum { PLAN_CACHE = 1024 }; /* plans per GPU; the least recently used go first */
enum { DIRECT = -1 };       /* a plan's algo: the direct kernels, cuDNN having none */

static void plan_free(void *v) {
  plan *p = (plan *)v;
  if (!p) return;
  if (p->xd) cudnnDestroyTensorDescriptor(p->xd);
  if (p->yd) cudnnDestroyTensorDescriptor(p->yd);
  if (p->wd) cudnnDestroyFilterDescriptor(p->wd);
  if (p->cd) cudnnDestroyConvolutionDescriptor(p->cd);
  free(p);
}

static kc_cache plans[LU_MAX_GPU_DEVICES];
static pthread_once_t plans_once = PTHREAD_ONCE_INIT;
static void plans_init(void) {
  for (int i = 0; i < LU_MAX_GPU_DEVICES; i++) kc_init(&plans[i], sizeof(conv_key), PLAN_CACHE, plan_free);
}

/* The descriptors for key (dense row-major tensors); math type as asked:
 * tensor cores change float32's precision (TF32) but not the 16-bit types'. */
static cudnnStatus_t plan_new(const conv_key *key, plan **out) {
  *out = NULL;
  plan *p = (plan *)calloc(1, sizeof(plan));
  if (!p) return CUDNN_STATUS_ALLOC_FAILED;
  int nd = key->nd, xstr[5], ystr[5];
  xstr[nd - 1] = ystr[nd - 1] = 1;
  for (int i = nd - 2; i >= 0; i--) xstr[i] = xstr[i + 1] * key->x[i + 1], ystr[i] = ystr[i + 1] * key->y[i + 1];
  int32_t dt = key->dt;
  bool half = dt == LUON_DTYPE_F16 || dt == LUON_DTYPE_BF16;
  cudnnDataType_t ddt = dt == LUON_DTYPE_F64   ? CUDNN_DATA_DOUBLE
                        : dt == LUON_DTYPE_F16 ? CUDNN_DATA_HALF
                        : dt == LUON_DTYPE_BF16 ? CUDNN_DATA_BFLOAT16
                                               : CUDNN_DATA_FLOAT;
  cudnnDataType_t cdt = dt == LUON_DTYPE_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT; /* compute */
  cudnnStatus_t r = cudnnCreateTensorDescriptor(&p->xd);
  if (r == CUDNN_STATUS_SUCCESS) r = cudnnCreateTensorDescriptor(&p->yd);
  if (r == CUDNN_STATUS_SUCCESS) r = cudnnCreateFilterDescriptor(&p->wd);
  if (r == CUDNN_STATUS_SUCCESS) r = cudnnCreateConvolutionDescriptor(&p->cd);
  if (r == CUDNN_STATUS_SUCCESS) r = cudnnSetTensorNdDescriptor(p->xd, ddt, nd, key->x, xstr);
  if (r == CUDNN_STATUS_SUCCESS) r = cudnnSetTensorNdDescriptor(p->yd, ddt, nd, key->y, ystr);
  if (r == CUDNN_STATUS_SUCCESS) r = cudnnSetFilterNdDescriptor(p->wd, ddt, CUDNN_TENSOR_NCHW, nd, key->w);
  if (r == CUDNN_STATUS_SUCCESS)
    r = cudnnSetConvolutionNdDescriptor(p->cd, nd - 2, key->pad, key->stride, key->dil, CUDNN_CROSS_CORRELATION, cdt);
  if (r == CUDNN_STATUS_SUCCESS) r = cudnnSetConvolutionGroupCount(p->cd, key->groups);
  if (r == CUDNN_STATUS_SUCCESS)
    r = cudnnSetConvolutionMathType(p->cd, half || key->tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH);
  if (r != CUDNN_STATUS_SUCCESS) plan_free(p);
  else *out = p;
  return r;
}

/* One convolution's operands: in0, in1 and out as conv() names them. */
typedef struct operands {
  int kind;
  int32_t id, dt;
  bool tf32;
  cudnnHandle_t h;
  const void *one, *zero, *in0, *in1;
  void *out;
  const char *op;
} operands;

static const char *const run_name[] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                                       "cudnnConvolutionBackwardFilter"};

static cudnnStatus_t ws_size(const operands *o, const plan *p, int algo, size_t *bytes) {
  if (o->kind == C_FWD)
    return cudnnGetConvolutionForwardWorkspaceSize(o->h, p->xd, p->wd, p->cd, p->yd,
                                                   (cudnnConvolutionFwdAlgo_t)algo, bytes);
  if (o->kind == C_DATA)
    return cudnnGetConvolutionBackwardDataWorkspaceSize(o->h, p->wd, p->yd, p->cd, p->xd,
                                                        (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
  return cudnnGetConvolutionBackwardFilterWorkspaceSize(o->h, p->xd, p->yd, p->cd, p->wd,
                                                        (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
}

static cudnnStatus_t run(const operands *o, const plan *p, int algo, void *ws, size_t bytes) {
  if (o->kind == C_FWD)
    return cudnnConvolutionForward(o->h, o->one, p->xd, o->in0, p->wd, o->in1, p->cd,
                                   (cudnnConvolutionFwdAlgo_t)algo, ws, bytes, o->zero, p->yd, o->out);
  if (o->kind == C_DATA)
    return cudnnConvolutionBackwardData(o->h, o->one, p->wd, o->in1, p->yd, o->in0, p->cd,
                                        (cudnnConvolutionBwdDataAlgo_t)algo, ws, bytes, o->zero, p->xd, o->out);
  return cudnnConvolutionBackwardFilter(o->h, o->one, p->xd, o->in0, p->yd, o->in1, p->cd,
                                        (cudnnConvolutionBwdFilterAlgo_t)algo, ws, bytes, o->zero, p->wd, o->out);
}

typedef struct cand {
  int algo;
  cudnnMathType_t math;
} cand;

/* The candidates in cuDNN's order: measured (fastest first), as MXNet's
 * default (MXNET_CUDNN_AUTOTUNE_DEFAULT=1), falling back to the heuristics
 * when measuring fails; with LUON_CUDNN_AUTOTUNE=0 the heuristics (_v7)
 * only. Strict float32 (no LUON_CUDA_TF32) puts the FMA candidates first:
 * a tensor-op one was measured with TF32 but would run without it. */
#define CANDIDATES(PERF_T, FIND, GET)                                                   \
  do {                                                                                 \
    PERF_T perf[8];                                                                    \
    int got = 0;                                                                       \
    cudnnStatus_t r = CUDNN_STATUS_NOT_SUPPORTED;                                      \
    if (tune) r = (FIND);                                                              \
    if (r != CUDNN_STATUS_SUCCESS || got == 0) r = (GET);                              \
    if (r != CUDNN_STATUS_SUCCESS) return r;                                           \
    for (int pass = 0; pass < 2; pass++) /* strict: FMA ones, then the rest */       \
      for (int i = 0; i < got && i < 8; i++)                                           \
        if (perf[i].status == CUDNN_STATUS_SUCCESS && (pass == 1) == (strict && !fma_like(perf[i].mathType))) \
          out[(*n)++] = cand{(int)perf[i].algo, perf[i].mathType};                     \
    return CUDNN_STATUS_SUCCESS;                                                       \
  } while (0)

static bool fma_like(cudnnMathType_t m) { return m == CUDNN_DEFAULT_MATH || m == CUDNN_FMA_MATH; }

static cudnnStatus_t candidates(const operands *o, const plan *p, cand *out, int *n) {
  const char *at = getenv("LUON_CUDNN_AUTOTUNE");
  bool tune = !(at && strcmp(at, "0") == 0);
  cudaStream_t st = NULL; /* timing candidates would wait for the stream, which a CUDA graph's capture refuses */
  if (tune && cudnnGetStream(o->h, &st) == CUDNN_STATUS_SUCCESS && lu_cuda_capturing(st)) tune = false;
  bool strict = o->dt == LUON_DTYPE_F32 && !o->tf32;
  cudnnHandle_t h = o->h;
  *n = 0;
  if (o->kind == C_FWD)
    CANDIDATES(cudnnConvolutionFwdAlgoPerf_t,
               cudnnFindConvolutionForwardAlgorithm(h, p->xd, p->wd, p->cd, p->yd, 8, &got, perf),
               cudnnGetConvolutionForwardAlgorithm_v7(h, p->xd, p->wd, p->cd, p->yd, 8, &got, perf));
  if (o->kind == C_DATA)
    CANDIDATES(cudnnConvolutionBwdDataAlgoPerf_t,
               cudnnFindConvolutionBackwardDataAlgorithm(h, p->wd, p->yd, p->cd, p->xd, 8, &got, perf),
               cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->wd, p->yd, p->cd, p->xd, 8, &got, perf));
  CANDIDATES(cudnnConvolutionBwdFilterAlgoPerf_t,
             cudnnFindConvolutionBackwardFilterAlgorithm(h, p->xd, p->yd, p->cd, p->wd, 8, &got, perf),
             cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->xd, p->yd, p->cd, p->wd, 8, &got, perf));
}

/* The math type to run a candidate with: its own, except that float32 never
 * gets TF32 unless LUON_CUDA_TF32=1, nor a conversion to half. */
static cudnnMathType_t math_for(const operands *o, cudnnMathType_t m) {
  if (o->dt != LUON_DTYPE_F32) return m;
  if (!o->tf32) return CUDNN_FMA_MATH;
  return m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ? CUDNN_TENSOR_OP_MATH : m;
}

/* Run algo on p with a workspace of `bytes` from the caching allocator.
 * *next says whether another algorithm may still do (cuDNN's NOT_SUPPORTED,
 * or a workspace that cannot be had). */
static luon_status attempt(const operands *o, const plan *p, int algo, size_t bytes, bool *next) {
  lu_block *wsb = NULL;
  *next = false;
  if (bytes) {
    luon_status a = lu_cuda_scratch(o->id, bytes, &wsb);
    if (a != LUON_OK) {
      *next = a == LUON_ENOMEM;
      return a;
    }
  }
  cudnnStatus_t r = run(o, p, algo, wsb ? wsb->ptr : NULL, bytes);
  lu_cuda_scratch_free(wsb);
  if (r == CUDNN_STATUS_SUCCESS) return LUON_OK;
  *next = r == CUDNN_STATUS_NOT_SUPPORTED;
  return lu_cudnn_fail(r, o->op, run_name[o->kind]);
}

/* A fresh plan for key, trying the candidates in order until one runs (one
 * cuDNN reports as SUCCESS in the query may still be NOT_SUPPORTED when run,
 * and a fast one may want more workspace than is free: both go on to the
 * next, as PyTorch does). On success *out is the plan, its algorithm kept. */
static luon_status search(const operands *o, const conv_key *key, plan **out) {
  plan *p = NULL;
  *out = NULL;
  cudnnStatus_t r = plan_new(key, &p);
  if (r != CUDNN_STATUS_SUCCESS) return lu_cudnn_fail(r, o->op, "making the descriptors");
  cand cs[8];
  int n = 0;
  r = candidates(o, p, cs, &n);
  if (r != CUDNN_STATUS_SUCCESS) {
    plan_free(p);
    return lu_cudnn_fail(r, o->op, "choosing an algorithm");
  }
  luon_status s = lu_cuda_seterr(LUON_EUNSUPPORTED, "%s: cuDNN has no algorithm for this convolution", o->op);
  for (int i = 0; i < n; i++) {
    bool next = false;
    size_t bytes = 0;
    r = cudnnSetConvolutionMathType(p->cd, math_for(o, cs[i].math));
    if (r == CUDNN_STATUS_SUCCESS) r = ws_size(o, p, cs[i].algo, &bytes);
    if (r != CUDNN_STATUS_SUCCESS) {
      s = lu_cudnn_fail(r, o->op, "workspace size");
      if (r == CUDNN_STATUS_NOT_SUPPORTED) continue;
      break;
    }
    s = attempt(o, p, cs[i].algo, bytes, &next);
    if (s == LUON_OK) {
      p->algo = cs[i].algo, p->wsbytes = bytes;
      *out = p;
      return LUON_OK;
    }
    if (!next) break;
  }
  plan_free(p);
  return s;
}

/* ---- direct kernels: where cuDNN has no algorithm ------------------------------------ */

/* The problem as 3-d (a 2-d one has depth 1): sizes and per-axis geometry
 * (depth, height, width). */
typedef struct geo {
  int64_t N, C, O, G;
  int64_t in[3], k[3], out[3], st[3], pad[3], dil[3];
} geo;

static geo geo_of(const conv_key *key) {
  geo g;
  int ns = key->nd - 2, off = 3 - ns;
  g.N = key->x[0], g.C = key->x[1], g.O = key->w[0], g.G = key->groups;
  for (int d = 0; d < 3; d++) g.in[d] = g.k[d] = g.out[d] = g.st[d] = g.dil[d] = 1, g.pad[d] = 0;
  for (int d = 0; d < ns; d++) {
    g.in[off + d] = key->x[2 + d], g.k[off + d] = key->w[2 + d], g.out[off + d] = key->y[2 + d];
    g.st[off + d] = key->stride[d], g.pad[off + d] = key->pad[d], g.dil[off + d] = key->dil[d];
  }
  return g;
}

/* y (N,O,OD,OH,OW) = x (N,C,D,H,W) * w (O,C/G,KD,KH,KW): a thread per output,
 * the sum in double; any float dtype dt. */
__global__ void k_direct_fwd(geo g, const void *x, const void *w, void *y, int32_t dt) {
  int64_t P = g.out[0] * g.out[1] * g.out[2], Cg = g.C / g.G, Og = g.O / g.G;
  LU_GRID_LOOP(i, g.N * g.O * P) {
    int64_t ow = i % g.out[2], oh = i / g.out[2] % g.out[1], od = i / (g.out[2] * g.out[1]) % g.out[0];
    int64_t o = i / P % g.O, n = i / P / g.O, c0 = o / Og * Cg;
    double acc = 0;
    for (int64_t c = 0; c < Cg; c++)
      for (int64_t kd = 0; kd < g.k[0]; kd++) {
        int64_t id = od * g.st[0] - g.pad[0] + kd * g.dil[0];
        if (id < 0 || id >= g.in[0]) continue;
        for (int64_t kh = 0; kh < g.k[1]; kh++) {
          int64_t ih = oh * g.st[1] - g.pad[1] + kh * g.dil[1];
          if (ih < 0 || ih >= g.in[1]) continue;
          for (int64_t kw = 0; kw < g.k[2]; kw++) {
            int64_t iw = ow * g.st[2] - g.pad[2] + kw * g.dil[2];
            if (iw < 0 || iw >= g.in[2]) continue;
            acc += lu_ld<double>(x, dt, (((n * g.C + c0 + c) * g.in[0] + id) * g.in[1] + ih) * g.in[2] + iw) *
                   lu_ld<double>(w, dt, (((o * Cg + c) * g.k[0] + kd) * g.k[1] + kh) * g.k[2] + kw);
          }
        }
      }
    lu_st(y, dt, i, acc);
  }
}

/* dx (N,C,D,H,W) from dy (N,O,OD,OH,OW) and w: a thread per input element,
 * over the outputs it fed (i + pad - k*dil = out*stride). */
__global__ void k_direct_data(geo g, const void *dy, const void *w, void *dx, int32_t dt) {
  int64_t P = g.in[0] * g.in[1] * g.in[2], Cg = g.C / g.G, Og = g.O / g.G;
  LU_GRID_LOOP(i, g.N * g.C * P) {
    int64_t iw = i % g.in[2], ih = i / g.in[2] % g.in[1], id = i / (g.in[2] * g.in[1]) % g.in[0];
    int64_t ci = i / P % g.C, n = i / P / g.C, c = ci % Cg, o0 = ci / Cg * Og;
    double acc = 0;
    for (int64_t o = o0; o < o0 + Og; o++)
      for (int64_t kd = 0; kd < g.k[0]; kd++) {
        int64_t td = id + g.pad[0] - kd * g.dil[0], od = td / g.st[0];
        if (td < 0 || td % g.st[0] || od >= g.out[0]) continue;
        for (int64_t kh = 0; kh < g.k[1]; kh++) {
          int64_t th = ih + g.pad[1] - kh * g.dil[1], oh = th / g.st[1];
          if (th < 0 || th % g.st[1] || oh >= g.out[1]) continue;
          for (int64_t kw = 0; kw < g.k[2]; kw++) {
            int64_t tw = iw + g.pad[2] - kw * g.dil[2], ow = tw / g.st[2];
            if (tw < 0 || tw % g.st[2] || ow >= g.out[2]) continue;
            acc += lu_ld<double>(dy, dt, (((n * g.O + o) * g.out[0] + od) * g.out[1] + oh) * g.out[2] + ow) *
                   lu_ld<double>(w, dt, (((o * Cg + c) * g.k[0] + kd) * g.k[1] + kh) * g.k[2] + kw);
          }
        }
      }
    lu_st(dx, dt, i, acc);
  }
}

/* dw (O,C/G,KD,KH,KW) from x and dy: a thread per weight, over the batch
 * and every output position. */
__global__ void k_direct_filter(geo g, const void *x, const void *dy, void *dw, int32_t dt) {
  int64_t K = g.k[0] * g.k[1] * g.k[2], Cg = g.C / g.G, Og = g.O / g.G;
  LU_GRID_LOOP(i, g.O * Cg * K) {
    int64_t kw = i % g.k[2], kh = i / g.k[2] % g.k[1], kd = i / (g.k[2] * g.k[1]) % g.k[0];
    int64_t c = i / K % Cg, o = i / K / Cg, ci = o / Og * Cg + c;
    double acc = 0;
    for (int64_t n = 0; n < g.N; n++)
      for (int64_t od = 0; od < g.out[0]; od++) {
        int64_t id = od * g.st[0] - g.pad[0] + kd * g.dil[0];
        if (id < 0 || id >= g.in[0]) continue;
        for (int64_t oh = 0; oh < g.out[1]; oh++) {
          int64_t ih = oh * g.st[1] - g.pad[1] + kh * g.dil[1];
          if (ih < 0 || ih >= g.in[1]) continue;
          for (int64_t ow = 0; ow < g.out[2]; ow++) {
            int64_t iw = ow * g.st[2] - g.pad[2] + kw * g.dil[2];
            if (iw < 0 || iw >= g.in[2]) continue;
            acc += lu_ld<double>(dy, dt, (((n * g.O + o) * g.out[0] + od) * g.out[1] + oh) * g.out[2] + ow) *
                   lu_ld<double>(x, dt, (((n * g.C + ci) * g.in[0] + id) * g.in[1] + ih) * g.in[2] + iw);
          }
        }
      }
    lu_st(dw, dt, i, acc);
  }
}

/* The convolution by the direct kernels (the plan's algo DIRECT): slow but
 * any dtype, dilation and groups; the operands are dense. */
static luon_status direct(const operands *o, const conv_key *key, cudaStream_t st) {
  geo g = geo_of(key);
  int64_t n = 1;
  const int32_t *shape = o->kind == C_FWD ? key->y : o->kind == C_DATA ? key->x : key->w;
  for (int i = 0; i < key->nd; i++) n *= shape[i];
  if (o->kind == C_FWD) k_direct_fwd<<<lu_blocks(n), LU_THREADS, 0, st>>>(g, o->in0, o->in1, o->out, o->dt);
  else if (o->kind == C_DATA) k_direct_data<<<lu_blocks(n), LU_THREADS, 0, st>>>(g, o->in0, o->in1, o->out, o->dt);
  else k_direct_filter<<<lu_blocks(n), LU_THREADS, 0, st>>>(g, o->in0, o->in1, o->out, o->dt);
  return LUON_OK; /* lu_cuda_end checks the launch */
}

/* Run the convolution through key's cached plan, or a fresh one (then
 * cached); a cached plan that no longer runs (its workspace cannot be had,
 * say) is dropped and chosen afresh. Where cuDNN has no algorithm (float64
 * with some dilations and groups) the direct kernels run, and the plan
 * remembers that. */
static luon_status convolve(const operands *o, const conv_key *key, cudaStream_t st) {
  pthread_once(&plans_once, plans_init);
  kc_cache *cache = &plans[o->id];
  kc_entry *e = kc_get(cache, key);
  if (e) {
    const plan *p = (const plan *)e->val;
    bool next = false;
    luon_status s = p->algo == DIRECT ? direct(o, key, st) : attempt(o, p, p->algo, p->wsbytes, &next);
    kc_release(cache, e, s != LUON_OK);
    if (s == LUON_OK || !next) return s;
  }
  plan *p = NULL;
  luon_status s = search(o, key, &p);
  if (s == LUON_EUNSUPPORTED) {
    p = (plan *)calloc(1, sizeof(plan)); /* no descriptors: none are needed */
    if (p) p->algo = DIRECT;
    s = direct(o, key, st);
  }
  if (s != LUON_OK || !p) {
    plan_free(p);
    return s;
  }
  e = kc_put(cache, key, p);
  if (e) kc_release(cache, e, 0);
  else plan_free(p); /* out of memory for the entry: the work is done anyway */
  return LUON_OK;
}

/* x (N,C,[D,]H,W), w (O,C/G,[KD,]KH,KW), y (N,O,[OD,]OH,OW): the three
 * shapes, whichever of them is the result; conv2d's or conv3d's slots:
 * stride, pad, dilation per spatial axis, groups. */
static luon_status conv(lu_call *c, int kind) {
  const luon_tensor *xt, *wt, *yt; /* the tensors standing for x, w, y */
  if (kind == C_FWD) xt = c->in[0], wt = c->in[1], yt = c->out[0];
  else if (kind == C_DATA) yt = c->in[0], wt = c->in[1], xt = c->out[0];
  else xt = c->in[0], yt = c->in[1], wt = c->out[0];
  int nd = xt->ndim, ns = nd - 2; /* 4 or 5 dimensions, 2 or 3 spatial */
  int pad[3], stride[3], dil[3], groups;
  if (ns == 2) {
    int64_t v[LU_CONV2D_GROUPS + 1] = {1, 1, 0, 0, 1, 1, 1}; /* conv.c's defaults */
    static_assert(LU_CONV2D_GROUPS == 6, "conv2d's slots as the defaults above");
    for (int i = 0; i <= LU_CONV2D_GROUPS && i < c->attrs->ni; i++) v[i] = c->attrs->i[i];
    for (int d = 0; d < 2; d++)
      stride[d] = (int)v[LU_CONV2D_STRIDE_H + d], pad[d] = (int)v[LU_CONV2D_PAD_H + d],
      dil[d] = (int)v[LU_CONV2D_DILATE_H + d];
    groups = (int)v[LU_CONV2D_GROUPS];
  } else {
    int64_t v[LU_CONV3D_GROUPS + 1] = {1, 1, 1, 0, 0, 0, 1, 1, 1, 1}; /* conv3d.c's defaults */
    static_assert(LU_CONV3D_GROUPS == 9, "conv3d's slots as the defaults above");
    for (int i = 0; i <= LU_CONV3D_GROUPS && i < c->attrs->ni; i++) v[i] = c->attrs->i[i];
    for (int d = 0; d < 3; d++)
      stride[d] = (int)v[LU_CONV3D_STRIDE_D + d], pad[d] = (int)v[LU_CONV3D_PAD_D + d],
      dil[d] = (int)v[LU_CONV3D_DILATE_D + d];
    groups = (int)v[LU_CONV3D_GROUPS];
  }
  int32_t dt = c->out[0]->dtype;
  bool relu = kind == C_FWD && ns == 2 && c->attrs->ni > LU_CONV2D_RELU && c->attrs->i[LU_CONV2D_RELU] == 1;
  conv_key key;
  memset(&key, 0, sizeof key);
  key.kind = kind, key.dt = dt, key.nd = nd, key.groups = groups;
  key.tf32 = lu_cuda_flag("LUON_CUDA_TF32"), key.dev = c->dev.id;
  for (int i = 0; i < nd; i++) {
    if (xt->shape[i] > INT32_MAX || wt->shape[i] > INT32_MAX || yt->shape[i] > INT32_MAX)
      return lu_cuda_seterr(LUON_EUNSUPPORTED, "%s: dimensions beyond 2^31 on the GPU", ns == 2 ? "conv2d" : "conv3d");
    key.x[i] = (int)xt->shape[i], key.w[i] = (int)wt->shape[i], key.y[i] = (int)yt->shape[i];
  }
  for (int d = 0; d < ns; d++) key.pad[d] = pad[d], key.stride[d] = stride[d], key.dil[d] = dil[d];
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_status s = LUON_OK;
  void *in0 = NULL, *in1 = NULL, *bias = NULL;
  lu_block *b0 = NULL, *b1 = NULL, *b2 = NULL;
  float f1 = 1, f0 = 0;
  double d1 = 1, d0 = 0;
  operands o;
  o.kind = kind, o.id = k.id, o.dt = dt, o.tf32 = key.tf32, o.op = k.op, o.h = NULL;
  o.one = dt == LUON_DTYPE_F64 ? (const void *)&d1 : (const void *)&f1;
  o.zero = dt == LUON_DTYPE_F64 ? (const void *)&d0 : (const void *)&f0;
  o.out = lu_data(c->out[0]);
  if (c->out[0]->size == 0) goto done;
  if (xt->size == 0 || wt->size == 0 || yt->size == 0) {
    /* an empty sum: zeros; the forward still adds its bias (and relu), as
     * the CPU does when C/groups is 0 */
    s = lu_cuda_zero(lu_data(c->out[0]), (size_t)c->out[0]->size * luon_dtype_size(dt), k.s);
    if (s == LUON_OK && kind == C_FWD && c->nin > 2) s = lu_cuda_dense(c->in[2], dt, k.s, &bias, &b2);
    if (s == LUON_OK && kind == C_FWD) lu_cuda_bias_relu(lu_data(c->out[0]), dt, bias, yt, relu, k.s);
    goto done;
  }
  s = lu_cuda_dense(c->in[0], dt, k.s, &in0, &b0);
  if (s == LUON_OK) s = lu_cuda_dense(c->in[1], dt, k.s, &in1, &b1);
  if (s == LUON_OK && kind == C_FWD && c->nin > 2) s = lu_cuda_dense(c->in[2], dt, k.s, &bias, &b2);
  if (s == LUON_OK) s = lu_cudnn_handle(k.id, k.s, k.op, &o.h);
  if (s != LUON_OK) goto done;
  o.in0 = in0, o.in1 = in1;
  s = convolve(&o, &key, k.s);
  if (s == LUON_OK && kind == C_FWD) lu_cuda_bias_relu(lu_data(c->out[0]), dt, bias, yt, relu, k.s);
done:
  lu_cuda_scratch_free(b0);
  lu_cuda_scratch_free(b1);
  lu_cuda_scratch_free(b2);
  return lu_cuda_end(&k, s);
}

luon_status lu_cuda_conv2d(lu_call *c) { return conv(c, C_FWD); }
luon_status lu_cuda_conv2d_grad_input(lu_call *c) { return conv(c, C_DATA); }
luon_status lu_cuda_conv2d_grad_weight(lu_call *c) { return conv(c, C_FILTER); }
luon_status lu_cuda_conv3d(lu_call *c) { return conv(c, C_FWD); }
luon_status lu_cuda_conv3d_grad_input(lu_call *c) { return conv(c, C_DATA); }
luon_status lu_cuda_conv3d_grad_weight(lu_call *c) { return conv(c, C_FILTER); }
