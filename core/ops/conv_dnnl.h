/* conv_dnnl.h: the convolutions conv.c hands to oneDNN (conv_dnnl.c).
 * Local to core/ops. */
#ifndef LUON_CONV_DNNL_H
#define LUON_CONV_DNNL_H
#include "conv_internal.h"

/* Whether oneDNN takes g's forward: float32, ungrouped, no fused relu,
 * oneDNN loaded (not with LUON_CONV_DNNL=0 or the reference kernels). */
bool lu_dnnl_conv_ok(const geom *g, int32_t dt);

/* y = conv2d(x, w) [+ b] over dense NCHW / OIHW arrays; wst: the storage w
 * lies in, whose version says when its reordered copy is stale (NULL: w is
 * a packed temporary, never kept); bn (NULL: none): a, d per output channel
 * of a batch norm in predict mode (relu'd with bn_relu) that each part
 * applies to its output (lu_bn_apply); *done false when oneDNN does not
 * take it (conv.c's kernels then run). */
luon_status lu_dnnl_conv2d(const geom *g, int32_t dt, const float *x, const float *w, const float *b, float *y,
                           const lu_storage *wst, const double *bn, bool bn_relu, bool *done);

/* The gradients, as conv2d_grad_input (dx from dy and w) and
 * conv2d_grad_weight (dw from x and dy) over dense arrays; *done as above. */
luon_status lu_dnnl_conv2d_grad_input(const geom *g, int32_t dt, const float *dy, const float *w, float *dx,
                                      bool *done);
luon_status lu_dnnl_conv2d_grad_weight(const geom *g, int32_t dt, const float *x, const float *dy, float *dw,
                                       bool *done);
#endif
