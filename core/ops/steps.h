/* steps.h: backward rules written with ops (steps.c), for the files of
 * core/ops that define them: a formula as a chain of op calls with one
 * status check at the end, the sum of a gradient back to an input's shape,
 * and the short names the formulas are written in. Local to core/ops. */
#ifndef LUON_STEPS_H
#define LUON_STEPS_H

#include "internal.h"

/* Sum a gradient back to an input's shape (undoing broadcasting) and
 * convert it to the input's dtype, 0: dy's (+1 in *out). */
luon_status lu_reduce_sum_to(luon_tensor *dy, int ndim, const int64_t *shape, int32_t dtype,
                             luon_tensor **out);

/* A backward formula as a chain of op calls with one status check at the
 * end: each step's result is held until lu_steps_end releases them all, and
 * a failed step turns the later ones into no-ops (they return NULL). */
typedef struct lu_steps {
  luon_status s;
  int n;
  luon_tensor *t[24];
} lu_steps;
/* op on 0 to 3 inputs (the unused ones NULL) with attrs a (NULL: none). */
luon_tensor *lu_steps_run(lu_steps *e, int32_t op, const luon_attrs *a, luon_tensor *x,
                          luon_tensor *y, luon_tensor *z);
/* A 0-d array holding v, of dtype dt on t's device. */
luon_tensor *lu_steps_scalar(lu_steps *e, double v, int32_t dt, const luon_tensor *t);
/* t seen with shape (n, s): a view. */
luon_tensor *lu_steps_reshape(lu_steps *e, luon_tensor *t, int n, const int64_t *s);
/* din = r summed to x's shape and dtype (+1). */
void lu_steps_give(lu_steps *e, luon_tensor *r, const luon_tensor *x, luon_tensor **din);
luon_status lu_steps_end(lu_steps *e);

/* The formulas' short names, over the lu_steps `e` of the rule:
 * R1(op, x), R2(op, x, y), R3(op, c, x, y) the op on its inputs;
 * RA(op, a, x) with attributes a; K(v, like) a 0-d constant of like's
 * dtype on like's device. */
#define R1(op, x) lu_steps_run(&e, LU_OP_##op, NULL, x, NULL, NULL)
#define R2(op, x, y) lu_steps_run(&e, LU_OP_##op, NULL, x, y, NULL)
#define R3(op, c, x, y) lu_steps_run(&e, LU_OP_##op, NULL, c, x, y)
#define RA(op, a, x) lu_steps_run(&e, LU_OP_##op, a, x, NULL, NULL)
#define K(v, like) lu_steps_scalar(&e, v, (like)->dtype, like)

#endif
