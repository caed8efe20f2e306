/* test_graph.c: hybridize's graphs through the public API with no Lua: a
 * captured y = relu(x * w + b) replays to the eager values on new inputs,
 * with static_alloc too; a parameter updated in place shows in the replay;
 * another shape or dtype is refused; a value read fails the capture; the
 * NULL and state errors. */
#include "luon.h"
#include "testutil.h"
#include <string.h>

static luon_tensor *from(const float *v, int ndim, const int64_t *shape) {
  luon_tensor *t = NULL;
  CHECK_OK(luon_tensor_from_host(v, LUON_DTYPE_F32, ndim, shape, LUON_CPU, 0, &t));
  return t;
}

static luon_tensor *call2(int32_t op, luon_tensor *a, luon_tensor *b) {
  luon_tensor *in[2] = {a, b}, *out = NULL;
  int32_t nout = 1;
  CHECK_OK(luon_op_call(op, b ? 2 : 1, in, NULL, &nout, &out));
  return out;
}

/* relu(x * w + b), eagerly (its ops become nodes while capturing) */
static luon_tensor *forward(luon_tensor *x, luon_tensor *w, luon_tensor *b) {
  luon_tensor *m = call2(luon_op_find("multiply"), x, w);
  luon_tensor *s = call2(luon_op_find("add"), m, b);
  luon_tensor *y = call2(luon_op_find("relu"), s, NULL);
  luon_tensor_release(m);
  luon_tensor_release(s);
  return y;
}

static void read4(luon_tensor *t, float *v) { CHECK_OK(luon_tensor_to_host(t, v, LUON_DTYPE_F32, 16)); }

int main(void) {
  int64_t sh[1] = {4};
  float xv[4] = {1, -2, 3, -4}, wv[4] = {2, 2, -1, -1}, bv[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  luon_tensor *x = from(xv, 1, sh), *w = from(wv, 1, sh), *b = from(bv, 1, sh);

  CHECK_OK(luon_graph_capture_begin(1, &x));
  CHECK(luon_graph_capturing() == 1, "not capturing");
  luon_tensor *y = forward(x, w, b);
  luon_graph *g = NULL;
  CHECK_OK(luon_graph_capture_end(1, &y, &g));
  CHECK(luon_graph_capturing() == 0, "still capturing");
  CHECK(luon_graph_num_nodes(g) == 3, "%d nodes", luon_graph_num_nodes(g));
  CHECK(luon_graph_num_consts(g) == 2, "%d constants", luon_graph_num_consts(g));
  CHECK(luon_graph_const(g, 0) == w && luon_graph_const(g, 2) == NULL, "constants");

  for (int static_alloc = 0; static_alloc < 2; static_alloc++) {
    CHECK_OK(luon_graph_set_static_alloc(g, static_alloc));
    for (int rep = 0; rep < 3; rep++) {
      float nv[4] = {(float)rep, 1, 2, -3}, got[4], want[4];
      luon_tensor *x2 = from(nv, 1, sh), *r = NULL;
      CHECK_OK(luon_graph_run(g, 1, &x2, 1, &r));
      luon_tensor *e = forward(x2, w, b);
      read4(r, got);
      read4(e, want);
      CHECK(memcmp(got, want, sizeof got) == 0, "replay %d (static %d): %g %g %g %g", rep, static_alloc,
            got[0], got[1], got[2], got[3]);
      luon_tensor_release(x2);
      luon_tensor_release(r);
      luon_tensor_release(e);
    }
  }

  /* a constant updated in place (a trainer's step) shows in the next run */
  float w2[4] = {1, 1, 1, 1}, got[4];
  luon_tensor *wn = from(w2, 1, sh);
  CHECK_OK(luon_tensor_copy(w, wn));
  luon_tensor *r = NULL;
  CHECK_OK(luon_graph_run(g, 1, &x, 1, &r));
  read4(r, got);
  CHECK(got[0] == 1.5f && got[1] == 0 && got[2] == 3.5f && got[3] == 0, "after the update: %g %g %g %g",
        got[0], got[1], got[2], got[3]);
  luon_tensor_release(r);
  /* rebinding a constant: same dtype and shape only */
  CHECK_OK(luon_graph_set_const(g, 0, wn));
  CHECK(luon_graph_set_const(g, 0, NULL) == LUON_EINVAL, "NULL constant");
  CHECK(luon_graph_set_const(g, 5, wn) == LUON_EINVAL, "no constant 6");

  /* another shape, another dtype: refused, never run stale */
  int64_t sh5[1] = {5};
  float v5[5] = {0};
  luon_tensor *x5 = from(v5, 1, sh5);
  r = NULL;
  CHECK(luon_graph_run(g, 1, &x5, 1, &r) == LUON_ESHAPE && r == NULL, "shape (5,): %s", luon_last_error());
  CHECK(strstr(luon_last_error(), "captured for (4,)") != NULL, "message: %s", luon_last_error());
  luon_tensor *xd = NULL;
  CHECK_OK(luon_tensor_empty(LUON_DTYPE_F64, 1, sh, LUON_CPU, 0, &xd));
  CHECK(luon_graph_run(g, 1, &xd, 1, &r) == LUON_EDTYPE, "float64: %s", luon_last_error());
  CHECK(luon_graph_run(g, 2, &x, 1, &r) == LUON_EINVAL, "two inputs");
  CHECK(luon_graph_run(NULL, 1, &x, 1, &r) == LUON_EINVAL, "NULL graph");
  CHECK(luon_graph_run(g, 1, &x, 1, NULL) == LUON_EINVAL, "NULL out");

  /* a value read fails the capture, even when the caller goes on */
  CHECK_OK(luon_graph_capture_begin(1, &x));
  float tmp[4];
  CHECK(luon_tensor_to_host(x, tmp, LUON_DTYPE_F32, sizeof tmp) == LUON_EUNSUPPORTED, "to_host while capturing");
  CHECK(strstr(luon_last_error(), "forward read a value of an array during hybridize") != NULL, "message: %s",
        luon_last_error());
  luon_tensor *y2 = forward(x, w, b);
  luon_graph *g2 = NULL;
  CHECK(luon_graph_capture_end(1, &y2, &g2) == LUON_EUNSUPPORTED && g2 == NULL, "capture should fail");
  CHECK(luon_graph_capturing() == 0, "still capturing after a failed end");
  CHECK_OK(luon_tensor_to_host(x, tmp, LUON_DTYPE_F32, sizeof tmp)); /* usable again */

  /* state errors */
  CHECK(luon_graph_capture_end(1, &y2, &g2) == LUON_EINVAL, "end without begin");
  CHECK(luon_graph_capture_begin(1, NULL) == LUON_EINVAL, "NULL inputs");
  CHECK(luon_graph_capture_begin(-1, NULL) == LUON_EINVAL, "negative count");
  luon_tensor *twice[2] = {x, x};
  CHECK(luon_graph_capture_begin(2, twice) == LUON_EINVAL, "the same input twice");
  CHECK(luon_graph_capturing() == 0, "a failed begin left a capture");
  CHECK_OK(luon_graph_capture_begin(1, &x));
  CHECK(luon_graph_capture_begin(1, &x) == LUON_EINVAL, "nested begin");
  luon_graph_capture_abort();
  luon_graph_capture_abort(); /* nothing to abort: fine */
  CHECK(luon_graph_set_static_alloc(NULL, 1) == LUON_EINVAL, "NULL graph");

  luon_graph_free(g);
  luon_graph_free(NULL);
  luon_tensor_release(y);
  luon_tensor_release(y2);
  luon_tensor_release(x);
  luon_tensor_release(w);
  luon_tensor_release(b);
  luon_tensor_release(wn);
  luon_tensor_release(x5);
  luon_tensor_release(xd);
  return TEST_RESULT;
}
