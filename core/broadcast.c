/* broadcast.c: the shape helpers every op's shape function shares: NumPy
 * broadcasting of two shapes, the strides of an array seen broadcast, and
 * normalising a possibly negative axis. Errors name the op and the values. */
#include "internal.h"

luon_status lu_axis(const char *op, int64_t axis, int ndim, int *out) {
  if (axis < -ndim || axis >= ndim)
    return lu_error(LUON_ESHAPE, "%s: axis %lld is out of bounds for an array of dimension %d", op,
                    (long long)axis, ndim);
  *out = (int)(axis < 0 ? axis + ndim : axis);
  return LUON_OK;
}

luon_status lu_broadcast_shapes(const char *op, int na, const int64_t *sa, int nb,
                                const int64_t *sb, int *ond, int64_t *oshape) {
  int n = na > nb ? na : nb;
  for (int i = 0; i < n; i++) {
    int64_t a = i < n - na ? 1 : sa[i - (n - na)];
    int64_t b = i < n - nb ? 1 : sb[i - (n - nb)];
    if (a != b && a != 1 && b != 1)
      return lu_error(LUON_ESHAPE, "%s: shapes %s and %s cannot be broadcast together", op,
                      lu_shape_str(na, sa), lu_shape_str(nb, sb));
    oshape[i] = a == 1 ? b : a;
  }
  *ond = n;
  return LUON_OK;
}

void lu_broadcast_strides(const luon_tensor *t, int ndim, const int64_t *shape, int64_t *strides) {
  int lead = ndim - t->ndim;
  for (int i = 0; i < ndim; i++) {
    int j = i - lead;
    strides[i] = (j < 0 || (t->shape[j] == 1 && shape[i] != 1)) ? 0 : t->strides[j];
  }
}
