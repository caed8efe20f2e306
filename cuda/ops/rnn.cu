/* rnn.cu: MXNet's fused recurrent layers (the rnn op) through cuDNN 9's RNN
 * API (cudnnRNNForward, cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8),
 * float32 and float64. luon's flat parameters (MXNet's order, see
 * core/ops/rnn.c) are copied into cuDNN's weight space gate by gate
 * (cudnnGetRNNWeightParams: cuDNN's gate order is MXNet's: LSTM i, f, g, o;
 * GRU r, z, n with the same n), and the weight gradient back out. The
 * forward leaves the CPU-layout reserve zero; rnn_grad runs cuDNN's
 * training forward again for its own reserve space, then the backward.
 * FMA math (no TF32) unless LUON_CUDA_TF32=1. Not here: dropout (the
 * layers call the op a layer at a time for it). */
#include "kernels.cuh"
#include "cudnn_handle.h"

enum { M_RELU, M_TANH, M_LSTM, M_GRU };


#define DNN(call)                                                                      \
  do {                                                                                 \
    cudnnStatus_t r_ = (call);                                                         \
    if (r_ != CUDNN_STATUS_SUCCESS) {                                                  \
      s = lu_cudnn_fail(r_, k.op, #call);                                              \
      goto done;                                                                       \
    }                                                                                  \
  } while (0)
#define TRY(expr)                                                                      \
  do {                                                                                 \
    s = (expr);                                                                        \
    if (s != LUON_OK) goto done;                                                       \
  } while (0)
#define CU(call)                                                                       \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      s = lu_cuda_fail(e_, #call);                                                     \
      goto done;                                                                       \
    }                                                                                  \
  } while (0)

__global__ void k_fill_i32(int32_t *p, int64_t n, int32_t v) {
  LU_GRID_LOOP(i, n) p[i] = v;
}

/* The sizes, as core/ops/rnn.c's geo. */
typedef struct geo {
  int mode, L, D, G;
  int64_t T, N, In, H;
  int32_t dt;
  size_t es;
} geo;

static int64_t in_of(const geo *g, int l) { return l ? g->D * g->H : g->In; }
static int64_t w_off(const geo *g, int l, int d) {
  int64_t n = 0;
  for (int k = 0; k < l; k++) n += g->D * g->G * g->H * (in_of(g, k) + g->H);
  return n + d * g->G * g->H * (in_of(g, l) + g->H);
}
static int64_t b_off(const geo *g, int l, int d) {
  return w_off(g, g->L, 0) + (int64_t)(l * g->D + d) * 2 * g->G * g->H;
}

/* Everything one cuDNN call sequence needs; made by setup, ended by teardown. */
typedef struct rnn_ctx {
  geo g;
  cudnnHandle_t h;
  cudnnRNNDescriptor_t rd;
  cudnnDropoutDescriptor_t dd;
  cudnnRNNDataDescriptor_t xd, yd;
  cudnnTensorDescriptor_t hd, md, bd;
  lu_block *wsb, *seqb;
  void *wspace;
  int32_t *seq;
  size_t wbytes;
} rnn_ctx;

static void teardown(rnn_ctx *r) {
  if (r->rd) cudnnDestroyRNNDescriptor(r->rd);
  if (r->dd) cudnnDestroyDropoutDescriptor(r->dd);
  if (r->xd) cudnnDestroyRNNDataDescriptor(r->xd);
  if (r->yd) cudnnDestroyRNNDataDescriptor(r->yd);
  if (r->hd) cudnnDestroyTensorDescriptor(r->hd);
  if (r->md) cudnnDestroyTensorDescriptor(r->md);
  if (r->bd) cudnnDestroyTensorDescriptor(r->bd);
  lu_cuda_scratch_free(r->wsb);
  lu_cuda_scratch_free(r->seqb);
}

/* The descriptors of x (T, N, I), y (T, N, D*H), the states (L*D, N, H),
 * the weight space (allocated) and the sequence lengths (all T, on the GPU). */
static luon_status setup(lu_cuda_ctx &k, const lu_call *c, rnn_ctx *r) {
  luon_status s = LUON_OK;
  geo *g = &r->g;
  const luon_attrs *a = c->attrs;
  const luon_tensor *x = c->in[0], *h0 = c->in[2];
  g->mode = (int)a->i[LU_RNN_MODE], g->L = (int)a->i[LU_RNN_LAYERS], g->D = a->i[LU_RNN_BIDIR] ? 2 : 1;
  g->G = g->mode == M_LSTM ? 4 : g->mode == M_GRU ? 3 : 1;
  g->T = x->shape[0], g->N = x->shape[1], g->In = x->shape[2], g->H = h0->shape[2];
  g->dt = x->dtype, g->es = luon_dtype_size(x->dtype);
  cudnnDataType_t ddt = g->dt == LUON_DTYPE_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  cudnnRNNMode_t cell = g->mode == M_LSTM ? CUDNN_LSTM : g->mode == M_GRU ? CUDNN_GRU
                        : g->mode == M_TANH ? CUDNN_RNN_TANH : CUDNN_RNN_RELU;
  if (g->T > INT32_MAX || g->N > INT32_MAX || g->In > INT32_MAX || g->H > INT32_MAX)
    return lu_cuda_seterr(LUON_EUNSUPPORTED, "%s: dimensions beyond 2^31 on the GPU", k.op);
  int dims[3] = {g->L * g->D, (int)g->N, (int)g->H}, strides[3] = {(int)(g->N * g->H), (int)g->H, 1};
  /* FMA math (no TF32) unless LUON_CUDA_TF32=1, as conv.cu */
  cudnnMathType_t math = lu_cuda_flag("LUON_CUDA_TF32") ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
  int *lens = NULL;
  TRY(lu_cudnn_handle(k.id, k.s, k.op, &r->h));
  DNN(cudnnCreateDropoutDescriptor(&r->dd));
  DNN(cudnnSetDropoutDescriptor(r->dd, r->h, 0.0f, NULL, 0, 0)); /* p = 0: no states needed */
  DNN(cudnnCreateRNNDescriptor(&r->rd));
  DNN(cudnnSetRNNDescriptor_v8(r->rd, CUDNN_RNN_ALGO_STANDARD, cell, CUDNN_RNN_DOUBLE_BIAS,
                               g->D == 2 ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, ddt,
                               ddt, math, (int32_t)g->In, (int32_t)g->H, (int32_t)g->H, g->L,
                               r->dd, CUDNN_RNN_PADDED_IO_DISABLED));
  lens = (int *)malloc(sizeof(int) * (size_t)(g->N > 0 ? g->N : 1));
  if (!lens) return lu_cuda_seterr(LUON_ENOMEM, "%s: out of host memory", k.op);
  for (int64_t n = 0; n < g->N; n++) lens[n] = (int)g->T;
  DNN(cudnnCreateRNNDataDescriptor(&r->xd));
  DNN(cudnnSetRNNDataDescriptor(r->xd, ddt, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, (int)g->T, (int)g->N,
                                (int)g->In, lens, NULL));
  DNN(cudnnCreateRNNDataDescriptor(&r->yd));
  DNN(cudnnSetRNNDataDescriptor(r->yd, ddt, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, (int)g->T, (int)g->N,
                                (int)(g->D * g->H), lens, NULL));
  DNN(cudnnCreateTensorDescriptor(&r->hd));
  DNN(cudnnSetTensorNdDescriptor(r->hd, ddt, 3, dims, strides));
  DNN(cudnnCreateTensorDescriptor(&r->md));
  DNN(cudnnCreateTensorDescriptor(&r->bd));
  DNN(cudnnGetRNNWeightSpaceSize(r->h, r->rd, &r->wbytes));
  TRY(lu_cuda_scratch(k.id, r->wbytes + 1, &r->wsb));
  r->wspace = r->wsb->ptr;
  TRY(lu_cuda_scratch(k.id, sizeof(int32_t) * (size_t)(g->N > 0 ? g->N : 1), &r->seqb));
  r->seq = (int32_t *)r->seqb->ptr;
  if (g->N > 0) k_fill_i32<<<lu_blocks(g->N), LU_THREADS, 0, k.s>>>(r->seq, g->N, (int32_t)g->T);
done:
  free(lens);
  return s;
}

/* luon's flat params P <-> cuDNN's weight space W (to_space: P into W),
 * gate by gate: linear layers 0..G-1 are i2h, G..2G-1 h2h. */
static luon_status move_params(lu_cuda_ctx &k, rnn_ctx *r, void *P, void *W, bool to_space) {
  luon_status s = LUON_OK;
  const geo *g = &r->g;
  size_t es = g->es;
  for (int l = 0; l < g->L; l++)
    for (int d = 0; d < g->D; d++) {
      int64_t in = in_of(g, l), GH = g->G * g->H;
      char *wi = (char *)P + (size_t)w_off(g, l, d) * es, *wh = wi + (size_t)(GH * in) * es;
      char *bi = (char *)P + (size_t)b_off(g, l, d) * es, *bh = bi + (size_t)GH * es;
      for (int lin = 0; lin < 2 * g->G; lin++) {
        void *m = NULL, *b = NULL;
        DNN(cudnnGetRNNWeightParams(r->h, r->rd, l * g->D + d, r->wbytes, W, lin, r->md, &m, r->bd, &b));
        int gate = lin % g->G;
        bool rec = lin >= g->G;
        int64_t cols = rec ? g->H : in;
        char *pm = (rec ? wh : wi) + (size_t)(gate * g->H * cols) * es;
        char *pb = (rec ? bh : bi) + (size_t)(gate * g->H) * es;
        size_t mb = (size_t)(g->H * cols) * es, bb = (size_t)g->H * es;
        CU(cudaMemcpyAsync(to_space ? m : pm, to_space ? pm : m, mb, cudaMemcpyDeviceToDevice, k.s));
        CU(cudaMemcpyAsync(to_space ? b : pb, to_space ? pb : b, bb, cudaMemcpyDeviceToDevice, k.s));
      }
    }
done:
  return s;
}

/* x (T, N, I), params, h0[, c0] -> y, hy[, cy], reserve (zeros: cuDNN keeps its own) */
luon_status lu_cuda_rnn(lu_call *c) {
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  rnn_ctx r;
  memset(&r, 0, sizeof r);
  luon_status s = LUON_OK;
  bool lstm = c->attrs->i[LU_RNN_MODE] == M_LSTM;
  void *in[4] = {NULL, NULL, NULL, NULL};
  lu_block *ib[4] = {NULL, NULL, NULL, NULL}, *work = NULL;
  size_t wsz = 0, rsz = 0;
  int32_t dt = c->in[0]->dtype;
  for (int j = 0; j < 4; j++)
    if (c->out[j]->size) TRY(lu_cuda_zero(lu_data(c->out[j]), (size_t)c->out[j]->size * luon_dtype_size(dt), k.s));
  if (c->in[0]->shape[0] == 0 || c->in[0]->shape[1] == 0) { /* no steps: the states pass through */
    TRY(lu_cuda_copy_to(c->out[1], c->in[2]));
    if (lstm) TRY(lu_cuda_copy_to(c->out[2], c->in[3]));
    goto done;
  }
  for (int j = 0; j < c->nin; j++) TRY(lu_cuda_dense(c->in[j], dt, k.s, &in[j], &ib[j]));
  TRY(setup(k, c, &r));
  TRY(move_params(k, &r, in[1], r.wspace, true));
  DNN(cudnnGetRNNTempSpaceSizes(r.h, r.rd, CUDNN_FWD_MODE_INFERENCE, r.xd, &wsz, &rsz));
  TRY(lu_cuda_scratch(k.id, wsz + 1, &work));
  DNN(cudnnRNNForward(r.h, r.rd, CUDNN_FWD_MODE_INFERENCE, r.seq, r.xd, in[0], r.yd, lu_data(c->out[0]), r.hd,
                      in[2], lu_data(c->out[1]), r.hd, lstm ? in[3] : NULL, lstm ? lu_data(c->out[2]) : NULL,
                      r.wbytes, r.wspace, wsz, work->ptr, 0, NULL));
done:
  teardown(&r);
  for (int j = 0; j < 4; j++) lu_cuda_scratch_free(ib[j]);
  lu_cuda_scratch_free(work);
  return lu_cuda_end(&k, s);
}

/* x, params, h0[, c0], reserve, dy, dhy[, dcy] -> dx, dparams, dh0[, dc0]:
 * cuDNN's training forward (its reserve), backward data, backward weights. */
luon_status lu_cuda_rnn_grad(lu_call *c) {
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  rnn_ctx r;
  memset(&r, 0, sizeof r);
  luon_status s = LUON_OK;
  bool lstm = c->attrs->i[LU_RNN_MODE] == M_LSTM;
  int32_t dt = c->in[0]->dtype;
  size_t es = luon_dtype_size(dt);
  /* dense inputs: x, P, h0, c0, dy, dhy, dcy (the reserve is the CPU's layout: unused) */
  int src[7] = {0, 1, 2, lstm ? 3 : -1, 4 + lstm, 5 + lstm, lstm ? 7 : -1};
  void *in[7] = {NULL};
  lu_block *ib[7] = {NULL}, *work = NULL, *resv = NULL, *yb = NULL, *hb = NULL, *dwb = NULL;
  size_t wsz = 0, rsz = 0;
  int64_t ysize = c->in[0]->shape[0] * c->in[0]->shape[1] * c->in[2]->shape[2] * (c->attrs->i[LU_RNN_BIDIR] ? 2 : 1);
  for (int j = 0; j < c->nout; j++)
    if (c->out[j]->size) TRY(lu_cuda_zero(lu_data(c->out[j]), (size_t)c->out[j]->size * es, k.s));
  if (c->in[0]->shape[0] == 0 || c->in[0]->shape[1] == 0) { /* no steps: the states' gradients pass through */
    TRY(lu_cuda_copy_to(c->out[2], c->in[5 + lstm]));
    if (lstm) TRY(lu_cuda_copy_to(c->out[3], c->in[7]));
    goto done;
  }
  for (int j = 0; j < 7; j++)
    if (src[j] >= 0) TRY(lu_cuda_dense(c->in[src[j]], dt, k.s, &in[j], &ib[j]));
  TRY(setup(k, c, &r));
  TRY(move_params(k, &r, in[1], r.wspace, true));
  DNN(cudnnGetRNNTempSpaceSizes(r.h, r.rd, CUDNN_FWD_MODE_TRAINING, r.xd, &wsz, &rsz));
  TRY(lu_cuda_scratch(k.id, wsz + 1, &work));
  TRY(lu_cuda_scratch(k.id, rsz + 1, &resv));
  TRY(lu_cuda_scratch(k.id, (size_t)ysize * es + 1, &yb));
  TRY(lu_cuda_scratch(k.id, (size_t)(2 * c->in[2]->size) * es + 1, &hb)); /* hy, cy: not needed */
  TRY(lu_cuda_scratch(k.id, r.wbytes + 1, &dwb));
  {
    char *hy = (char *)hb->ptr, *cy = hy + (size_t)c->in[2]->size * es;
    DNN(cudnnRNNForward(r.h, r.rd, CUDNN_FWD_MODE_TRAINING, r.seq, r.xd, in[0], r.yd, yb->ptr, r.hd, in[2], hy,
                        r.hd, in[3], lstm ? cy : NULL, r.wbytes, r.wspace, wsz, work->ptr, rsz, resv->ptr));
  }
  DNN(cudnnRNNBackwardData_v8(r.h, r.rd, r.seq, r.yd, yb->ptr, in[4], r.xd, lu_data(c->out[0]), r.hd, in[2],
                              in[5], lu_data(c->out[2]), r.hd, in[3], in[6], lstm ? lu_data(c->out[3]) : NULL,
                              r.wbytes, r.wspace, wsz, work->ptr, rsz, resv->ptr));
  TRY(lu_cuda_zero(dwb->ptr, r.wbytes, k.s)); /* the weight gradient is added into */
  DNN(cudnnRNNBackwardWeights_v8(r.h, r.rd, CUDNN_WGRAD_MODE_ADD, r.seq, r.xd, in[0], r.hd, in[2], r.yd, yb->ptr,
                                 r.wbytes, dwb->ptr, wsz, work->ptr, rsz, resv->ptr));
  TRY(move_params(k, &r, lu_data(c->out[1]), dwb->ptr, false));
done:
  teardown(&r);
  for (int j = 0; j < 7; j++) lu_cuda_scratch_free(ib[j]);
  lu_cuda_scratch_free(work);
  lu_cuda_scratch_free(resv);
  lu_cuda_scratch_free(yb);
  lu_cuda_scratch_free(hb);
  lu_cuda_scratch_free(dwb);
  return lu_cuda_end(&k, s);
}
