/* autograd.c: the tape. While recording, each op whose inputs need a
 * gradient leaves a node (op, attrs, inputs, outputs); backward visits the
 * nodes behind the heads in reverse topological order and calls each op's
 * backward rule (lu_grad_<op>, written with other ops), accumulating into
 * the nodes upstream and into the .grad of leaves (attach_grad). */
#include "internal.h"
#include <stdlib.h>

typedef struct lu_node {
  int32_t refcount;
  int32_t op;
  luon_attrs attrs;
  int32_t nin, nout;
  bool freed;                              /* saved tensors dropped by a backward */
  luon_tensor *in[LUON_MAX_OP_INPUTS];     /* +1 */
  luon_tensor *out[LUON_MAX_OP_INPUTS];    /* +1 views of the outputs, no node link */
  luon_tensor *dout[LUON_MAX_OP_INPUTS];   /* backward scratch */
  int64_t mark;                            /* backward scratch: pass number */
} lu_node;

_Thread_local int32_t lu_recording;
static _Thread_local int32_t training;
static int64_t pass_counter;

int32_t luon_autograd_set_recording(int32_t on) {
  int32_t old = lu_recording;
  lu_recording = on != 0;
  return old;
}
int32_t luon_autograd_set_training(int32_t on) {
  int32_t old = training;
  training = on != 0;
  return old;
}
int32_t luon_autograd_is_recording(void) { return lu_recording; }
int32_t luon_autograd_is_training(void) { return training; }

static void drop_saved(lu_node *n) {
  for (int i = 0; i < n->nin; i++) {
    luon_tensor_release(n->in[i]);
    n->in[i] = NULL;
  }
  for (int k = 0; k < n->nout; k++) {
    luon_tensor_release(n->out[k]);
    n->out[k] = NULL;
  }
  n->freed = true;
}

void lu_autograd_release_node(lu_node *n) {
  if (!n || __atomic_sub_fetch(&n->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
  drop_saved(n);
  for (int k = 0; k < n->nout; k++) luon_tensor_release(n->dout[k]);
  free(n);
}

static bool needs_grad(const luon_tensor *t) { return t->node || t->grad_req != LUON_GRAD_NULL; }

luon_status lu_autograd_record(const lu_call *c, luon_tensor *const *outs) {
  bool need = false;
  for (int i = 0; i < c->nin; i++) need = need || needs_grad(c->in[i]);
  if (!need) return LUON_OK;
  lu_node *n = calloc(1, sizeof *n);
  if (!n) return lu_error(LUON_ENOMEM, "%s: out of host memory for the autograd tape", lu_ops[c->op].name);
  n->op = c->op;
  n->attrs = *c->attrs;
  n->nin = c->nin;
  n->nout = c->nout;
  for (int i = 0; i < c->nin; i++) n->in[i] = luon_tensor_retain(c->in[i]);
  for (int k = 0; k < c->nout; k++) {
    luon_tensor *o = outs[k];
    luon_status s = lu_tensor_view(o, o->ndim, o->shape, o->strides, o->offset, &n->out[k]);
    if (s != LUON_OK) {
      n->refcount = 1;
      lu_autograd_release_node(n);
      return s;
    }
  }
  for (int k = 0; k < c->nout; k++) {
    luon_tensor *o = outs[k];
    if (o->node) lu_autograd_release_node(o->node);
    o->node = n;
    o->out_index = k;
    n->refcount++;
  }
  if (n->refcount == 0) { /* no outputs: nothing can reach the node */
    n->refcount = 1;
    lu_autograd_release_node(n);
  }
  return LUON_OK;
}

luon_status luon_tensor_attach_grad(luon_tensor *t, int32_t req) {
  if (!t) return lu_error(LUON_EINVAL, "attach_grad: NULL array");
  if (req < LUON_GRAD_NULL || req > LUON_GRAD_ADD)
    return lu_error(LUON_EINVAL, "attach_grad: grad_req must be 'write', 'add' or 'null', got %d", req);
  if (req != LUON_GRAD_NULL && !lu_dtype_has_grad(t->dtype))
    return lu_error(LUON_EDTYPE, "attach_grad: gradients need a float array (float16, bfloat16, "
                    "float32 or float64), this one is %s",
                    luon_dtype_name(t->dtype));
  luon_tensor *g = NULL;
  if (req != LUON_GRAD_NULL) {
    luon_attrs a;
    memset(&a, 0, sizeof a);
    a.dtype = t->dtype;
    a.dev_type = t->dev.type;
    a.dev_id = t->dev.id;
    a.ni = LU_FULL_SHAPE + t->ndim;
    for (int i = 0; i < t->ndim; i++) a.i[LU_FULL_SHAPE + i] = t->shape[i];
    int32_t nout = 1;
    int32_t was = luon_autograd_set_recording(0);
    luon_status s = luon_op_call(LU_OP_full, 0, NULL, &a, &nout, &g);
    luon_autograd_set_recording(was);
    LU_TRY(s);
  }
  luon_tensor_release(t->grad);
  t->grad = g;
  t->grad_req = req;
  t->grad_fresh = 0;
  if (t->node) { /* the array becomes a leaf, as in MXNet */
    lu_autograd_release_node(t->node);
    t->node = NULL;
  }
  return LUON_OK;
}

luon_status luon_tensor_grad(luon_tensor *t, luon_tensor **out) {
  if (!t) return lu_error(LUON_EINVAL, "grad: NULL array");
  if (!out) return lu_error(LUON_EINVAL, "grad: out is NULL");
  *out = luon_tensor_retain(t->grad);
  return LUON_OK;
}

int32_t luon_tensor_grad_req(const luon_tensor *t) { return t ? t->grad_req : 0; }
int32_t luon_tensor_grad_fresh(const luon_tensor *t) { return t ? t->grad_fresh : 0; }
int32_t luon_tensor_set_grad_fresh(luon_tensor *t, int32_t fresh) {
  if (!t) return 0;
  int32_t old = t->grad_fresh;
  t->grad_fresh = fresh != 0;
  return old;
}

luon_status luon_tensor_detach(luon_tensor *t, luon_tensor **out) {
  if (!t) return lu_error(LUON_EINVAL, "detach: NULL array");
  if (!out) return lu_error(LUON_EINVAL, "detach: out is NULL");
  LU_TRY(lu_tensor_view(t, t->ndim, t->shape, t->strides, t->offset, out));
  if (!lu_capture_top()) return LUON_OK;
  luon_status s = lu_graph_record_detach(t, *out);
  if (s != LUON_OK) {
    luon_tensor_release(*out);
    *out = NULL;
  }
  return s;
}

/* ---- backward ------------------------------------------------------------ */

typedef struct order {
  lu_node **v;
  int n, cap;
} order;

static luon_status push(order *o, lu_node *n) {
  if (o->n == o->cap) {
    int cap = o->cap ? o->cap * 2 : 64;
    lu_node **v = realloc(o->v, sizeof *v * (size_t)cap);
    if (!v) return lu_error(LUON_ENOMEM, "backward: out of host memory");
    o->v = v;
    o->cap = cap;
  }
  o->v[o->n++] = n;
  return LUON_OK;
}

/* Post-order DFS from the heads' nodes, iteratively: topo holds every node
 * after all nodes it depends on. */
static luon_status topo_sort(int nheads, luon_tensor *const *heads, int64_t mark, order *topo) {
  order stack = {0}, state = {0}; /* state: next input index per stack entry, as pointers */
  luon_status s = LUON_OK;
  for (int h = 0; h < nheads && s == LUON_OK; h++) {
    lu_node *root = heads[h]->node;
    if (!root || root->mark == mark) continue;
    root->mark = mark;
    if ((s = push(&stack, root)) || (s = push(&state, (lu_node *)(intptr_t)0))) break;
    while (stack.n > 0 && s == LUON_OK) {
      lu_node *n = stack.v[stack.n - 1];
      intptr_t next = (intptr_t)state.v[state.n - 1];
      if (n->freed) {
        s = lu_error(LUON_EGRAD, "backward: the graph behind this array was freed by an earlier "
                     "backward; pass retain_graph = true to the first backward to call it again");
        break;
      }
      if (next < n->nin) {
        state.v[state.n - 1] = (lu_node *)(next + 1);
        lu_node *m = n->in[next]->node;
        if (m && m->mark != mark) {
          m->mark = mark;
          if ((s = push(&stack, m)) || (s = push(&state, (lu_node *)(intptr_t)0))) break;
        }
      } else {
        stack.n--;
        state.n--;
        s = push(topo, n);
      }
    }
  }
  free(stack.v);
  free(state.v);
  return s;
}

/* acc += g (acc may be NULL: it takes a reference to g). */
static luon_status accumulate(luon_tensor **acc, luon_tensor *g) {
  if (!*acc) {
    *acc = luon_tensor_retain(g);
    return LUON_OK;
  }
  luon_tensor *sum;
  LU_TRY(lu_run(LU_OP_add, NULL, &sum, 2, *acc, g));
  luon_tensor_release(*acc);
  *acc = sum;
  return LUON_OK;
}

/* A gradient reaching leaf t during pass `pass`: grad_req write overwrites
 * on the first arrival of the pass and adds after; add always adds. */
static luon_status to_leaf(luon_tensor *t, luon_tensor *g, int64_t pass) {
  if (t->grad_req == LUON_GRAD_NULL || !t->grad) return LUON_OK;
  if (g->ndim != t->ndim || memcmp(g->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim))
    return lu_error(LUON_EINTERNAL, "backward: gradient of shape %s for an array of shape %s",
                    lu_shape_str(g->ndim, g->shape), lu_shape_str(t->ndim, t->shape));
  t->grad_fresh = 1;
  if (t->grad_req == LUON_GRAD_WRITE && t->grad_gen != pass) {
    t->grad_gen = pass;
    if (lu_tensor_take_data(t->grad, g)) return LUON_OK; /* a fresh gradient nobody else holds */
    return luon_tensor_copy(t->grad, g);
  }
  t->grad_gen = pass;
  luon_tensor *sum;
  LU_TRY(lu_run(LU_OP_add, NULL, &sum, 2, t->grad, g));
  luon_status s = luon_tensor_copy(t->grad, sum);
  luon_tensor_release(sum);
  return s;
}

static luon_status ones_like(luon_tensor *t, luon_tensor **out) {
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.dtype = t->dtype;
  a.dev_type = t->dev.type;
  a.dev_id = t->dev.id;
  a.ni = LU_FULL_SHAPE + t->ndim;
  for (int i = 0; i < t->ndim; i++) a.i[LU_FULL_SHAPE + i] = t->shape[i];
  a.f[LU_FULL_VALUE] = 1;
  int32_t nout = 1;
  *out = NULL;
  return luon_op_call(LU_OP_full, 0, NULL, &a, &nout, out);
}

static luon_status run_backward(int nheads, luon_tensor *const *heads, luon_tensor *const *head_grads,
                                int64_t pass, order *topo) {
  for (int h = 0; h < nheads; h++) {
    luon_tensor *y = heads[h];
    if (!y) return lu_error(LUON_EINVAL, "backward: head %d is NULL", h + 1);
    if (!y->node && y->grad_req == LUON_GRAD_NULL)
      return lu_error(LUON_EGRAD, "backward: this array is not part of a recorded graph: compute it "
                      "inside autograd.record() from arrays that called attach_grad()");
    luon_tensor *g = head_grads ? head_grads[h] : NULL, *own = NULL;
    if (g && (g->ndim != y->ndim || memcmp(g->shape, y->shape, sizeof(int64_t) * (size_t)y->ndim)))
      return lu_error(LUON_ESHAPE, "backward: head gradient has shape %s but the array has shape %s",
                      lu_shape_str(g->ndim, g->shape), lu_shape_str(y->ndim, y->shape));
    if (!g) {
      LU_TRY(ones_like(y, &own));
      g = own;
    }
    luon_status s = y->node ? accumulate(&y->node->dout[y->out_index], g) : to_leaf(y, g, pass);
    luon_tensor_release(own);
    LU_TRY(s);
  }
  LU_TRY(topo_sort(nheads, heads, pass, topo));
  for (int k = topo->n - 1; k >= 0; k--) {
    lu_node *n = topo->v[k];
    bool any = false;
    for (int j = 0; j < n->nout; j++) any = any || n->dout[j];
    if (!any) continue;
    const lu_op_desc *d = &lu_ops[n->op];
    if (!d->grad)
      return lu_error(LUON_EGRAD, "backward: the op '%s' on the path to the heads has no gradient; "
                      "compute it under autograd.pause() or detach its input", d->name);
    bool need[LUON_MAX_OP_INPUTS];
    luon_tensor *din[LUON_MAX_OP_INPUTS] = {NULL};
    for (int i = 0; i < n->nin; i++) need[i] = needs_grad(n->in[i]);
    lu_grad_call g = {n->op, &n->attrs, n->nin, n->nout, n->in, n->out, n->dout, need, din};
    luon_status s = d->grad(&g);
    for (int i = 0; i < n->nin && s == LUON_OK; i++) {
      if (!din[i] || !need[i]) continue;
      luon_tensor *t = n->in[i];
      s = t->node ? accumulate(&t->node->dout[t->out_index], din[i]) : to_leaf(t, din[i], pass);
    }
    for (int i = 0; i < n->nin; i++) luon_tensor_release(din[i]);
    for (int j = 0; j < n->nout; j++) {
      luon_tensor_release(n->dout[j]);
      n->dout[j] = NULL;
    }
    LU_TRY(s);
  }
  return LUON_OK;
}

luon_status luon_autograd_backward(int32_t nheads, luon_tensor *const *heads,
                                   luon_tensor *const *head_grads, int32_t retain_graph) {
  if (nheads < 1) return lu_error(LUON_EINVAL, "backward: no arrays given");
  if (!heads) return lu_error(LUON_EINVAL, "backward: heads is NULL (n is %d)", nheads);
  int32_t was = luon_autograd_set_recording(0);
  int64_t pass = __atomic_add_fetch(&pass_counter, 1, __ATOMIC_RELAXED);
  order topo = {0};
  luon_status s = run_backward(nheads, heads, head_grads, pass, &topo);
  /* clear scratch (after an error too) and free the tape unless retained */
  for (int k = 0; k < topo.n; k++) {
    lu_node *n = topo.v[k];
    for (int j = 0; j < n->nout; j++) {
      luon_tensor_release(n->dout[j]);
      n->dout[j] = NULL;
    }
  }
  if (!retain_graph && s == LUON_OK) {
    for (int k = 0; k < topo.n; k++) topo.v[k]->refcount++; /* hold while dropping */
    for (int k = 0; k < topo.n; k++) drop_saved(topo.v[k]);
    for (int k = 0; k < topo.n; k++) lu_autograd_release_node(topo.v[k]);
  }
  for (int h = 0; h < nheads && s != LUON_OK; h++) /* heads' pending grads */
    if (heads[h] && heads[h]->node) {
      luon_tensor_release(heads[h]->node->dout[heads[h]->out_index]);
      heads[h]->node->dout[heads[h]->out_index] = NULL;
    }
  free(topo.v);
  luon_autograd_set_recording(was);
  return s;
}
