/* iter.c: the strided row iterator under elementwise kernels: merge axes that
 * are contiguous for every operand, walk the rows in C order, split the work
 * across threads. Knows nothing of dtypes or ops. */
#include "internal.h"

/* The index space after merging: outer axes (C order) and one inner row. */
typedef struct walk {
  int nd, nops;
  int64_t shape[LU_MAXD];                   /* outer axes, innermost excluded */
  int64_t st[LU_ITER_MAX_OPS][LU_MAXD];     /* bytes */
  char *base[LU_ITER_MAX_OPS];
  int64_t n;                                /* elements per row */
  int64_t inner[LU_ITER_MAX_OPS];           /* bytes between a row's elements */
  int64_t split, piece;                     /* a row is `split` pieces of `piece` elements */
  bool stoppable;                           /* end early after luon_interrupt */
  lu_row_fn fn;
  void *ctx;
} walk;

/* Operand pointers at the start of row r, and its outer index. */
static void row_start(const walk *w, int64_t r, char **p, int64_t *idx) {
  for (int k = 0; k < w->nops; k++) p[k] = w->base[k];
  for (int d = w->nd - 1; d >= 0; d--) {
    idx[d] = r % w->shape[d];
    r /= w->shape[d];
    for (int k = 0; k < w->nops; k++) p[k] += idx[d] * w->st[k][d];
  }
}

static void row_next(const walk *w, char **p, int64_t *idx) {
  for (int d = w->nd - 1; d >= 0; d--) {
    for (int k = 0; k < w->nops; k++) p[k] += w->st[k][d];
    if (++idx[d] < w->shape[d]) return;
    idx[d] = 0;
    for (int k = 0; k < w->nops; k++) p[k] -= w->st[k][d] * w->shape[d];
  }
}

/* Pieces [b, e) of the index space; piece q is part q % split of row q / split. */
static void run_pieces(void *ctx, int64_t b, int64_t e) {
  const walk *w = ctx;
  char *p[LU_ITER_MAX_OPS], *q[LU_ITER_MAX_OPS];
  int64_t idx[LU_MAXD];
  int64_t r = b / w->split, done = 0; /* elements since the flag was last looked at */
  row_start(w, r, p, idx);
  while (b < e) {
    if (w->stoppable && done >= LU_STOP_ELEMS) {
      if (lu_interrupted()) return;
      done = 0;
    }
    int64_t row_end = (r + 1) * w->split, stop = e < row_end ? e : row_end;
    if (w->stoppable) stop = b + 1; /* a piece at a time (at most LU_STOP_ELEMS) */
    int64_t lo = (b - r * w->split) * w->piece, hi = (stop - r * w->split) * w->piece;
    if (hi > w->n) hi = w->n;
    for (int k = 0; k < w->nops; k++) q[k] = p[k] + lo * w->inner[k];
    if (hi > lo) w->fn(w->ctx, hi - lo, q, w->inner);
    done += hi - lo + 1;
    b = stop;
    if (b == row_end) {
      r++;
      if (b < e) row_next(w, p, idx);
    }
  }
}

void lu_foreach_row(int ndim, const int64_t *shape, int nops, char *const *base,
                    const int64_t (*strides)[LU_MAXD], int64_t grain, bool stoppable, lu_row_fn fn,
                    void *ctx) {
  walk w;
  w.nops = nops;
  w.fn = fn;
  w.ctx = ctx;
  w.stoppable = stoppable;
  for (int k = 0; k < nops; k++) w.base[k] = base[k];
  for (int i = 0; i < ndim; i++)
    if (shape[i] == 0) return;
  /* merged axes, innermost first: size-1 axes drop out, an axis joins the
   * one inside it when every operand steps over that one exactly */
  int m = 0;
  int64_t ms[LU_MAXD], mst[LU_ITER_MAX_OPS][LU_MAXD];
  for (int i = ndim - 1; i >= 0; i--) {
    if (shape[i] == 1) continue;
    bool join = m > 0;
    for (int k = 0; k < nops && join; k++)
      join = strides[k][i] == mst[k][m - 1] * ms[m - 1];
    if (join) {
      ms[m - 1] *= shape[i];
      continue;
    }
    ms[m] = shape[i];
    for (int k = 0; k < nops; k++) mst[k][m] = strides[k][i];
    m++;
  }
  if (m == 0) { /* 0-d or all ones: one row of one element */
    w.nd = 0;
    w.n = 1;
    for (int k = 0; k < nops; k++) w.inner[k] = 0;
  } else {
    w.n = ms[0];
    for (int k = 0; k < nops; k++) w.inner[k] = mst[k][0];
    w.nd = m - 1;
    for (int d = 0; d < w.nd; d++) { /* back to C order */
      w.shape[d] = ms[m - 1 - d];
      for (int k = 0; k < nops; k++) w.st[k][d] = mst[k][m - 1 - d];
    }
  }
  int64_t rows = 1;
  for (int d = 0; d < w.nd; d++) rows *= w.shape[d];
  int nt = grain > 0 && rows * w.n >= 2 * grain ? lu_num_threads() : 1;
  w.piece = w.n;
  /* few long rows: cut each into pieces so that every thread gets several */
  if (nt > 1 && rows < 4 * (int64_t)nt) {
    int64_t want = (4 * (int64_t)nt + rows - 1) / rows;
    w.piece = (w.n + want - 1) / want;
    if (w.piece < w.n) w.piece = (w.piece + 63) & ~(int64_t)63;
  }
  /* a stoppable walk looks at the flag at least every LU_STOP_ELEMS elements */
  if (stoppable && w.piece > LU_STOP_ELEMS) w.piece = LU_STOP_ELEMS;
  w.split = (w.n + w.piece - 1) / w.piece;
  if (nt < 2) {
    run_pieces(&w, 0, rows * w.split);
    return;
  }
  int64_t g = grain / w.piece;
  lu_parallel_for(rows * w.split, g > 0 ? g : 1, run_pieces, &w);
}

void lu_byte_strides(const luon_tensor *t, int ndim, const int64_t *shape, int64_t *out) {
  lu_broadcast_strides(t, ndim, shape, out);
  int64_t es = luon_dtype_size(t->dtype);
  for (int i = 0; i < ndim; i++) out[i] *= es;
}

/* Walk t's elements in row-major order, moving whole rows: t -> buf when
 * to_buf, else buf -> t. Rows are memcpy'd when the last axis is dense. */
static void move(luon_tensor *t, char *buf, bool to_buf) {
  int nd = t->ndim;
  int64_t es = luon_dtype_size(t->dtype);
  int64_t n = nd ? t->shape[nd - 1] : 1, st = nd ? t->strides[nd - 1] : 1;
  int64_t rows = n ? t->size / n : 0, idx[LU_MAXD] = {0}, off = 0;
  char *p = lu_data(t);
  for (int64_t r = 0; r < rows; r++, buf += n * es) {
    if (st == 1) {
      if (to_buf) memcpy(buf, p + off * es, (size_t)(n * es));
      else memcpy(p + off * es, buf, (size_t)(n * es));
    } else {
      for (int64_t k = 0; k < n; k++) {
        if (to_buf) memcpy(buf + k * es, p + (off + k * st) * es, (size_t)es);
        else memcpy(p + (off + k * st) * es, buf + k * es, (size_t)es);
      }
    }
    for (int d = nd - 2; d >= 0; d--) {
      off += t->strides[d];
      if (++idx[d] < t->shape[d]) break;
      off -= t->strides[d] * t->shape[d];
      idx[d] = 0;
    }
  }
}

void lu_pack(const luon_tensor *t, void *buf) { move((luon_tensor *)t, buf, true); }
void lu_unpack(luon_tensor *t, const void *buf) { move(t, (char *)buf, false); }
