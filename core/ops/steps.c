/* steps.c: the machinery of backward rules written with ops (steps.h):
 * a formula as a chain of op calls (lu_steps_*) with one status check at
 * the end, and the sum of a gradient back to a broadcast input's shape
 * (lu_reduce_sum_to), with which every rule of a broadcasting op ends.
 * The rules themselves stay beside their forward ops. */
#include "steps.h"

/* The gradient of an input broadcast from (ndim, shape) to dy's shape: dy
 * summed over the new leading axes and over the axes where shape has 1 and
 * dy does not, seen with `shape`, as `dtype` (0: dy's). +1 in *out; dy
 * itself when nothing changes. Every backward rule of a broadcasting op
 * ends with this. */
luon_status lu_reduce_sum_to(luon_tensor *dy, int ndim, const int64_t *shape, int32_t dtype,
                             luon_tensor **out) {
  int lead = dy->ndim - ndim;
  if (lead < 0)
    return lu_error(LUON_EINTERNAL, "backward: gradient of shape %s for an input of shape %s",
                    lu_shape_str(dy->ndim, dy->shape), lu_shape_str(ndim, shape));
  if (!dtype) dtype = dy->dtype;
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.ni = LU_REDUCE_AXES; /* keepdims 0, then the axes */
  a.dtype = dtype;
  for (int d = 0; d < dy->ndim; d++)
    if (d < lead || (shape[d - lead] == 1 && dy->shape[d] != 1)) a.i[a.ni++] = d;
  if (a.ni == LU_REDUCE_AXES) {
    if (dtype == dy->dtype) {
      *out = luon_tensor_retain(dy);
      return LUON_OK;
    }
    return lu_run(LU_OP_copy, &a, out, 1, dy);
  }
  luon_tensor *s;
  LU_TRY(lu_run(LU_OP_sum, &a, &s, 1, dy));
  memset(&a, 0, sizeof a);
  a.ni = ndim;
  memcpy(a.i, shape, sizeof(int64_t) * (size_t)ndim);
  luon_status st = lu_run(LU_OP_reshape, &a, out, 1, s);
  luon_tensor_release(s);
  return st;
}

/* A backward formula written with ops: lu_steps_run keeps each step's
 * result until lu_steps_end releases them all, and the first failed step
 * makes the later ones no-ops (they return NULL), so a formula reads as a
 * list of calls with one status check at the end. */

static luon_tensor *keep(lu_steps *e, luon_status s, luon_tensor *t) {
  if (s != LUON_OK) {
    e->s = s;
    return NULL;
  }
  if (e->n == (int)(sizeof e->t / sizeof e->t[0])) {
    luon_tensor_release(t);
    e->s = lu_error(LUON_EINTERNAL, "backward: a formula has more than %d steps", e->n);
    return NULL;
  }
  e->t[e->n++] = t;
  return t;
}

/* op on 0 to 3 inputs (the unused ones NULL); NULL after a failure. */
luon_tensor *lu_steps_run(lu_steps *e, int32_t op, const luon_attrs *a, luon_tensor *x,
                          luon_tensor *y, luon_tensor *z) {
  if (e->s != LUON_OK) return NULL;
  luon_tensor *r = NULL;
  luon_status s = lu_run(op, a, &r, z ? 3 : y ? 2 : x ? 1 : 0, x, y, z);
  return keep(e, s, r);
}

/* A 0-d array holding v, of dtype dt on t's device. */
luon_tensor *lu_steps_scalar(lu_steps *e, double v, int32_t dt, const luon_tensor *t) {
  if (e->s != LUON_OK) return NULL;
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.dtype = dt;
  a.dev_type = t->dev.type;
  a.dev_id = t->dev.id;
  a.f[LU_FULL_VALUE] = v;
  luon_tensor *r = NULL;
  luon_status s = lu_run(LU_OP_full, &a, &r, 0);
  return keep(e, s, r);
}

/* *din = r summed back to x's shape (the axes x was broadcast along) and
 * converted to x's dtype, unless a step failed. */
void lu_steps_give(lu_steps *e, luon_tensor *r, const luon_tensor *x, luon_tensor **din) {
  if (e->s == LUON_OK) e->s = lu_reduce_sum_to(r, x->ndim, x->shape, x->dtype, din);
}

/* Release the steps' results; the formula's status. */
luon_status lu_steps_end(lu_steps *e) {
  for (int k = 0; k < e->n; k++) luon_tensor_release(e->t[k]);
  e->n = 0;
  return e->s;
}

/* t seen with shape (n, s): a view. */
luon_tensor *lu_steps_reshape(lu_steps *e, luon_tensor *t, int n, const int64_t *s) {
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.ni = n;
  memcpy(a.i, s, sizeof(int64_t) * (size_t)n);
  return lu_steps_run(e, LU_OP_reshape, &a, t, NULL, NULL);
}
