/* conv.cu: 2-d and 3-d convolution (cross-correlation) in NCHW / NCDHW and
 * their input and weight gradients through cuDNN 9's convolution API (N-d
 * descriptors): stride, padding, dilation, groups; algorithms from cuDNN's
 * heuristics (the _v7 queries), workspace from the core's caching allocator;
 * FMA math (no TF32) unless LUON_CUDA_TF32=1; float16 and bfloat16 data with
 * float32 compute (tensor cores allowed). Operands are made dense first when
 * they are not. The forward's bias and conv2d's fused relu (i[7] = 1) are
 * one small kernel after it. The CPU kernels are core/ops/conv.c's and
 * conv3d.c's. */
#include "kernels.cuh"
#include <cudnn.h>
#include <pthread.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static cudnnHandle_t handles[LU_MAX_GPU_DEVICES];

static luon_status dnn_fail(cudnnStatus_t r, const char *op, const char *what) {
  luon_status s = r == CUDNN_STATUS_ALLOC_FAILED ? LUON_ENOMEM
                  : r == CUDNN_STATUS_NOT_SUPPORTED ? LUON_EUNSUPPORTED : LUON_EDEVICE;
  return lu_cuda_seterr(s, "%s: %s: %s (cuDNN %d)", op, what, cudnnGetErrorString(r), (int)r);
}

#define DNN(call)                                                                      \
  do {                                                                                 \
    cudnnStatus_t r_ = (call);                                                         \
    if (r_ != CUDNN_STATUS_SUCCESS) {                                                  \
      s = dnn_fail(r_, k.op, #call);                                                   \
      goto done;                                                                       \
    }                                                                                  \
  } while (0)

static luon_status handle(int32_t id, cudaStream_t st, const char *op, cudnnHandle_t *out) {
  pthread_mutex_lock(&lock);
  cudnnStatus_t r = CUDNN_STATUS_SUCCESS;
  if (!handles[id]) {
    r = cudnnCreate(&handles[id]);
    if (r != CUDNN_STATUS_SUCCESS) handles[id] = NULL;
  }
  *out = handles[id];
  pthread_mutex_unlock(&lock);
  if (r != CUDNN_STATUS_SUCCESS) return dnn_fail(r, op, "cudnnCreate");
  r = cudnnSetStream(*out, st);
  return r == CUDNN_STATUS_SUCCESS ? LUON_OK : dnn_fail(r, op, "cudnnSetStream");
}

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

/* y (N,O,P) of dtype dt, in place: + bias b (dense, dt; may be NULL) then relu. */
static void bias_relu(void *y, int32_t dt, const void *b, const luon_tensor *yt, bool relu, cudaStream_t st) {
  int64_t n = yt->size, O = yt->shape[1], P = 1;
  for (int d = 2; d < yt->ndim; d++) P *= yt->shape[d];
  if (n == 0 || (!b && !relu)) return;
  if (dt == LUON_DTYPE_F64)
    k_bias_relu<double><<<lu_blocks(n), LU_THREADS, 0, st>>>(y, dt, b, n, O, P, relu);
  else
    k_bias_relu<float><<<lu_blocks(n), LU_THREADS, 0, st>>>(y, dt, b, n, O, P, relu);
}

/* The heuristics' algorithms in their order: the first that cuDNN runs for
 * this problem with a workspace that can be had. One cuDNN reports as
 * SUCCESS in the query may still be NOT_SUPPORTED when run, and a fast one
 * may want more workspace than is free: both go on to the next (as
 * PyTorch does). WSIZE and RUN see the candidate as `algo`. */
#define RUN_ALGOS(PERF_T, NAME, GET, WSIZE, RUN)                                        \
  do {                                                                                 \
    PERF_T perf[8];                                                                    \
    int got = 0;                                                                       \
    DNN(GET);                                                                          \
    s = lu_cuda_seterr(LUON_EUNSUPPORTED, "%s: cuDNN has no algorithm for this convolution", k.op); \
    for (int i_ = 0; i_ < got && i_ < 8; i_++) {                                       \
      if (perf[i_].status != CUDNN_STATUS_SUCCESS) continue;                           \
      const auto algo = perf[i_].algo;                                                 \
      wsbytes = 0;                                                                     \
      cudnnStatus_t r_ = (WSIZE);                                                      \
      if (r_ != CUDNN_STATUS_SUCCESS) {                                                \
        s = dnn_fail(r_, k.op, NAME " workspace size");                                \
        if (r_ == CUDNN_STATUS_NOT_SUPPORTED) continue;                                \
        goto done;                                                                     \
      }                                                                                \
      lu_cuda_scratch_free(wsb);                                                       \
      wsb = NULL;                                                                      \
      if (wsbytes) {                                                                   \
        luon_status a_ = lu_cuda_scratch(k.id, wsbytes, &wsb);                         \
        if (a_ != LUON_OK) {                                                           \
          s = a_;                                                                      \
          if (a_ == LUON_ENOMEM) continue; /* a later one may need less */             \
          goto done;                                                                   \
        }                                                                              \
      }                                                                                \
      ws = wsb ? wsb->ptr : NULL;                                                      \
      r_ = (RUN);                                                                      \
      if (r_ == CUDNN_STATUS_SUCCESS) {                                                \
        s = LUON_OK;                                                                   \
        break;                                                                         \
      }                                                                                \
      s = dnn_fail(r_, k.op, NAME);                                                    \
      if (r_ != CUDNN_STATUS_NOT_SUPPORTED) goto done;                                 \
    }                                                                                  \
  } while (0)

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
  bool half = dt == LUON_DTYPE_F16 || dt == LUON_DTYPE_BF16;
  bool relu = kind == C_FWD && ns == 2 && c->attrs->ni > LU_CONV2D_RELU && c->attrs->i[LU_CONV2D_RELU] == 1;
  cudnnDataType_t ddt = dt == LUON_DTYPE_F64   ? CUDNN_DATA_DOUBLE
                        : dt == LUON_DTYPE_F16 ? CUDNN_DATA_HALF
                        : dt == LUON_DTYPE_BF16 ? CUDNN_DATA_BFLOAT16
                                               : CUDNN_DATA_FLOAT;
  cudnnDataType_t cdt = dt == LUON_DTYPE_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT; /* compute */
  int xdim[5], wdim[5], ydim[5], xstr[5], ystr[5];
  for (int i = 0; i < nd; i++) {
    if (xt->shape[i] > INT32_MAX || wt->shape[i] > INT32_MAX || yt->shape[i] > INT32_MAX)
      return lu_cuda_seterr(LUON_EUNSUPPORTED, "%s: dimensions beyond 2^31 on the GPU", ns == 2 ? "conv2d" : "conv3d");
    xdim[i] = (int)xt->shape[i], wdim[i] = (int)wt->shape[i], ydim[i] = (int)yt->shape[i];
  }
  xstr[nd - 1] = ystr[nd - 1] = 1; /* dense, row-major */
  for (int i = nd - 2; i >= 0; i--) xstr[i] = xstr[i + 1] * xdim[i + 1], ystr[i] = ystr[i + 1] * ydim[i + 1];
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_status s = LUON_OK;
  cudnnHandle_t h = NULL;
  cudnnTensorDescriptor_t xd = NULL, yd = NULL;
  cudnnFilterDescriptor_t wd = NULL;
  cudnnConvolutionDescriptor_t cd = NULL;
  void *in0 = NULL, *in1 = NULL, *bias = NULL, *ws = NULL;
  lu_block *b0 = NULL, *b1 = NULL, *b2 = NULL, *wsb = NULL;
  size_t wsbytes = 0;
  float f1 = 1, f0 = 0;
  double d1 = 1, d0 = 0;
  const void *one = dt == LUON_DTYPE_F64 ? (const void *)&d1 : (const void *)&f1;
  const void *zero = dt == LUON_DTYPE_F64 ? (const void *)&d0 : (const void *)&f0;
  if (c->out[0]->size == 0) goto done;
  if (xt->size == 0 || wt->size == 0 || yt->size == 0) {
    /* an empty sum: zeros; the forward still adds its bias (and relu), as
     * the CPU does when C/groups is 0 */
    s = lu_cuda_zero(lu_data(c->out[0]), (size_t)c->out[0]->size * luon_dtype_size(dt), k.s);
    if (s == LUON_OK && kind == C_FWD && c->nin > 2) s = lu_cuda_dense(c->in[2], dt, k.s, &bias, &b2);
    if (s == LUON_OK && kind == C_FWD) bias_relu(lu_data(c->out[0]), dt, bias, yt, relu, k.s);
    goto done;
  }
  s = lu_cuda_dense(c->in[0], dt, k.s, &in0, &b0);
  if (s == LUON_OK) s = lu_cuda_dense(c->in[1], dt, k.s, &in1, &b1);
  if (s == LUON_OK && kind == C_FWD && c->nin > 2) s = lu_cuda_dense(c->in[2], dt, k.s, &bias, &b2);
  if (s == LUON_OK) s = handle(k.id, k.s, k.op, &h);
  if (s != LUON_OK) goto done;
  DNN(cudnnCreateTensorDescriptor(&xd));
  DNN(cudnnCreateTensorDescriptor(&yd));
  DNN(cudnnCreateFilterDescriptor(&wd));
  DNN(cudnnCreateConvolutionDescriptor(&cd));
  DNN(cudnnSetTensorNdDescriptor(xd, ddt, nd, xdim, xstr));
  DNN(cudnnSetTensorNdDescriptor(yd, ddt, nd, ydim, ystr));
  DNN(cudnnSetFilterNdDescriptor(wd, ddt, CUDNN_TENSOR_NCHW, nd, wdim));
  DNN(cudnnSetConvolutionNdDescriptor(cd, ns, pad, stride, dil, CUDNN_CROSS_CORRELATION, cdt));
  DNN(cudnnSetConvolutionGroupCount(cd, groups));
  /* tensor cores change float32's precision (TF32) but not the 16-bit types' */
  DNN(cudnnSetConvolutionMathType(cd, half || lu_cuda_flag("LUON_CUDA_TF32") ? CUDNN_TENSOR_OP_MATH
                                                                             : CUDNN_FMA_MATH));
  if (kind == C_FWD) {
    RUN_ALGOS(cudnnConvolutionFwdAlgoPerf_t, "cudnnConvolutionForward",
              cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, 8, &got, perf),
              cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, algo, &wsbytes),
              cudnnConvolutionForward(h, one, xd, in0, wd, in1, cd, algo, ws, wsbytes, zero, yd,
                                      lu_data(c->out[0])));
    if (s == LUON_OK) bias_relu(lu_data(c->out[0]), dt, bias, yt, relu, k.s);
  } else if (kind == C_DATA) {
    RUN_ALGOS(cudnnConvolutionBwdDataAlgoPerf_t, "cudnnConvolutionBackwardData",
              cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd, yd, cd, xd, 8, &got, perf),
              cudnnGetConvolutionBackwardDataWorkspaceSize(h, wd, yd, cd, xd, algo, &wsbytes),
              cudnnConvolutionBackwardData(h, one, wd, in1, yd, in0, cd, algo, ws, wsbytes, zero, xd,
                                           lu_data(c->out[0])));
  } else {
    RUN_ALGOS(cudnnConvolutionBwdFilterAlgoPerf_t, "cudnnConvolutionBackwardFilter",
              cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd, yd, cd, wd, 8, &got, perf),
              cudnnGetConvolutionBackwardFilterWorkspaceSize(h, xd, yd, cd, wd, algo, &wsbytes),
              cudnnConvolutionBackwardFilter(h, one, xd, in0, yd, in1, cd, algo, ws, wsbytes, zero, wd,
                                             lu_data(c->out[0])));
  }
done:
  if (xd) cudnnDestroyTensorDescriptor(xd);
  if (yd) cudnnDestroyTensorDescriptor(yd);
  if (wd) cudnnDestroyFilterDescriptor(wd);
  if (cd) cudnnDestroyConvolutionDescriptor(cd);
  lu_cuda_scratch_free(b0);
  lu_cuda_scratch_free(b1);
  lu_cuda_scratch_free(b2);
  lu_cuda_scratch_free(wsb);
  return lu_cuda_end(&k, s);
}

luon_status lu_cuda_conv2d(lu_call *c) { return conv(c, C_FWD); }
luon_status lu_cuda_conv2d_grad_input(lu_call *c) { return conv(c, C_DATA); }
luon_status lu_cuda_conv2d_grad_weight(lu_call *c) { return conv(c, C_FILTER); }
luon_status lu_cuda_conv3d(lu_call *c) { return conv(c, C_FWD); }
luon_status lu_cuda_conv3d_grad_input(lu_call *c) { return conv(c, C_DATA); }
luon_status lu_cuda_conv3d_grad_weight(lu_call *c) { return conv(c, C_FILTER); }
