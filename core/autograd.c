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
  int64_t function;                        /* > 0: a custom function's node (op unused), its
                                              Lua id; its backward runs in Lua */
  int32_t grad_of;                         /* 1 + the op whose backward rule recorded this
                                              node under create_graph; 0: none */
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

static void note_released(int64_t id);
static _Thread_local int32_t grad_of; /* 1 + the op whose rule runs under create_graph */

void lu_autograd_release_node(lu_node *n) {
  if (!n || __atomic_sub_fetch(&n->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
  if (n->function) note_released(n->function);
  drop_saved(n);
  for (int k = 0; k < n->nout; k++) luon_tensor_release(n->dout[k]);
  free(n);
}

static bool needs_grad(const luon_tensor *t) { return t->node || t->grad_req != LUON_GRAD_NULL; }

/* A node for op (or custom function `function`) behind outs. */
static luon_status record(int32_t op, const luon_attrs *attrs, int32_t nin, luon_tensor *const *in,
                          int32_t nout, luon_tensor *const *outs, int64_t function) {
  bool need = false;
  for (int i = 0; i < nin; i++) need = need || needs_grad(in[i]);
  if (!need) return LUON_OK;
  lu_node *n = calloc(1, sizeof *n);
  if (!n)
    return lu_error(LUON_ENOMEM, "%s: out of host memory for the autograd tape",
                    function ? "autograd.Function" : lu_ops[op].name);
  n->op = op;
  n->attrs = *attrs;
  n->nin = nin;
  n->nout = nout;
  n->function = function;
  n->grad_of = grad_of;
  for (int i = 0; i < nin; i++) n->in[i] = luon_tensor_retain(in[i]);
  for (int k = 0; k < nout; k++) {
    luon_tensor *o = outs[k];
    luon_status s = lu_tensor_view(o, o->ndim, o->shape, o->strides, o->offset, &n->out[k]);
    if (s != LUON_OK) {
      n->refcount = 1;
      lu_autograd_release_node(n);
      return s;
    }
  }
  for (int k = 0; k < nout; k++) {
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

luon_status lu_autograd_record(const lu_call *c, luon_tensor *const *outs) {
  return record(c->op, c->attrs, c->nin, c->in, c->nout, outs, 0);
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

/* An array of t's shape, dtype and device filled with v (not recorded). */
static luon_status filled_like(const luon_tensor *t, double v, luon_tensor **out) {
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.dtype = t->dtype;
  a.dev_type = t->dev.type;
  a.dev_id = t->dev.id;
  a.ni = LU_FULL_SHAPE + t->ndim;
  for (int i = 0; i < t->ndim; i++) a.i[LU_FULL_SHAPE + i] = t->shape[i];
  a.f[LU_FULL_VALUE] = v;
  int32_t nout = 1;
  *out = NULL;
  int32_t was = luon_autograd_set_recording(0);
  luon_status s = luon_op_call(LU_OP_full, 0, NULL, &a, &nout, out);
  luon_autograd_set_recording(was);
  return s;
}

static bool same_shape(const luon_tensor *a, const luon_tensor *b) {
  return a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim);
}

/* One backward pass, run a node at a time by luon_autograd_backward_next
 * so that a custom function's node can hand its output gradients to the
 * caller (Lua) and take its input gradients back, without C calling into
 * Lua. topo holds a reference to each node until the pass ends. */
struct luon_backward {
  int64_t pass;
  order topo;
  int k;                  /* nodes topo.v[0..k) are still to visit, from the end */
  lu_node *waiting;       /* the custom node whose input gradients are due */
  bool failed, retain, create;
  int32_t nvars;
  luon_tensor **vars;     /* +1: autograd.grad's variables (none: write .grad) */
  luon_tensor **vgrad;    /* their gradients so far (+1) */
};

static _Thread_local int32_t in_pass;   /* a pass runs on this thread */

/* The freed custom nodes' ids, until the Lua side collects them: per
 * thread, as a Lua state's nodes are freed on its thread (a state's ids are
 * its own; another state on another thread never takes them). */
static _Thread_local int64_t *released;
static _Thread_local int32_t nreleased, released_cap;

static void note_released(int64_t id) {
  if (nreleased == released_cap) {
    int32_t cap = released_cap ? released_cap * 2 : 64;
    int64_t *v = realloc(released, sizeof *v * (size_t)cap);
    if (!v) return; /* the Lua entry stays until the state ends: a leak, never a wrong drop */
    released = v;
    released_cap = cap;
  }
  released[nreleased++] = id;
}

int32_t luon_autograd_released_functions(int64_t *ids, int32_t max) {
  int32_t n = 0;
  while (ids && n < max && nreleased > 0) ids[n++] = released[--nreleased];
  if (nreleased == 0) {
    free(released);
    released = NULL;
    released_cap = 0;
  }
  return n;
}

/* A gradient g arriving at t: into its node's output gradient, else into
 * the leaf's .grad (backward) or the variable's result (grad). */
static luon_status deliver(luon_backward *b, luon_tensor *t, luon_tensor *g) {
  if (!same_shape(g, t))
    return lu_error(LUON_EINTERNAL, "backward: gradient of shape %s for an array of shape %s",
                    lu_shape_str(g->ndim, g->shape), lu_shape_str(t->ndim, t->shape));
  if (t->node) return accumulate(&t->node->dout[t->out_index], g);
  if (b->nvars == 0) return to_leaf(t, g, b->pass);
  for (int i = 0; i < b->nvars; i++)
    if (b->vars[i] == t) return accumulate(&b->vgrad[i], g);
  return LUON_OK;
}

/* Node n's backward rule, its input gradients delivered upstream. */
static luon_status run_rule(luon_backward *b, lu_node *n) {
  const lu_op_desc *d = &lu_ops[n->op];
  if (!d->grad && n->grad_of)
    return lu_error(LUON_EGRAD, "backward: '%s' is not twice differentiable in luon: its gradient "
                    "uses the op '%s', which has no gradient of its own",
                    lu_ops[n->grad_of - 1].name, d->name);
  if (!d->grad)
    return lu_error(LUON_EGRAD, "backward: the op '%s' on the path to the heads has no gradient; "
                    "compute it under autograd.pause() or detach its input", d->name);
  bool need[LUON_MAX_OP_INPUTS];
  luon_tensor *din[LUON_MAX_OP_INPUTS] = {NULL};
  for (int i = 0; i < n->nin; i++) need[i] = needs_grad(n->in[i]);
  /* Under create_graph a rule that reads the outputs (exp's dx = dy * out)
   * must see them as n's outputs, so that its own ops record the link:
   * views that hold n, for the rule's time (n->out holds no node, which
   * would be a cycle). */
  luon_tensor *outs[LUON_MAX_OP_INPUTS] = {NULL};
  luon_status s = LUON_OK;
  for (int k = 0; k < n->nout && s == LUON_OK; k++) {
    luon_tensor *o = n->out[k];
    if (!b->create) {
      outs[k] = luon_tensor_retain(o);
    } else if ((s = lu_tensor_view(o, o->ndim, o->shape, o->strides, o->offset, &outs[k])) == LUON_OK) {
      __atomic_add_fetch(&n->refcount, 1, __ATOMIC_ACQ_REL);
      outs[k]->node = n;
      outs[k]->out_index = k;
    }
  }
  lu_grad_call g = {n->op, &n->attrs, n->nin, n->nout, n->in, outs, n->dout, need, din};
  int32_t outer = grad_of;
  grad_of = b->create ? n->op + 1 : 0;
  if (s == LUON_OK) s = d->grad(&g);
  grad_of = outer;
  for (int k = 0; k < n->nout; k++) luon_tensor_release(outs[k]);
  for (int i = 0; i < n->nin && s == LUON_OK; i++)
    if (din[i] && need[i]) s = deliver(b, n->in[i], din[i]);
  for (int i = 0; i < n->nin; i++) luon_tensor_release(din[i]);
  return s;
}

static void drop_douts(lu_node *n) {
  for (int j = 0; j < n->nout; j++) {
    luon_tensor_release(n->dout[j]);
    n->dout[j] = NULL;
  }
}

luon_status luon_autograd_backward_begin(int32_t nheads, luon_tensor *const *heads,
                                         luon_tensor *const *head_grads, int32_t nvars,
                                         luon_tensor *const *vars, int32_t flags,
                                         luon_backward **out) {
  if (!out) return lu_error(LUON_EINVAL, "backward: out is NULL");
  *out = NULL;
  if (nheads < 1) return lu_error(LUON_EINVAL, "backward: no arrays given");
  if (!heads) return lu_error(LUON_EINVAL, "backward: heads is NULL (n is %d)", nheads);
  if (nvars < 0 || (nvars > 0 && !vars))
    return lu_error(LUON_EINVAL, "grad: %d variables at %p", nvars, (const void *)vars);
  if ((flags & LUON_BACKWARD_CREATE_GRAPH) && nvars == 0)
    return lu_error(LUON_EINVAL, "backward: create_graph needs variables (autograd.grad): "
                    "gradients written to .grad are not recorded");
  if (in_pass)
    return lu_error(LUON_EGRAD, "backward: called while another backward runs on this thread "
                    "(inside a custom function's backward?); compute gradients there with ops");
  for (int h = 0; h < nheads; h++) {
    luon_tensor *y = heads[h], *g = head_grads ? head_grads[h] : NULL;
    if (!y) return lu_error(LUON_EINVAL, "backward: head %d is NULL", h + 1);
    if (!y->node && y->grad_req == LUON_GRAD_NULL)
      return lu_error(LUON_EGRAD, "backward: this array is not part of a recorded graph: compute it "
                      "inside autograd.record() from arrays that called attach_grad()");
    if (g && !same_shape(g, y))
      return lu_error(LUON_ESHAPE, "backward: head gradient has shape %s but the array has shape %s",
                      lu_shape_str(g->ndim, g->shape), lu_shape_str(y->ndim, y->shape));
  }
  for (int i = 0; i < nvars; i++) {
    if (!vars[i]) return lu_error(LUON_EINVAL, "grad: variable %d is NULL", i + 1);
    if (!needs_grad(vars[i]))
      return lu_error(LUON_EGRAD, "grad: variable %d does not require a gradient: call attach_grad() "
                      "on it before recording", i + 1);
  }
  luon_backward *b = calloc(1, sizeof *b);
  if (!b) return lu_error(LUON_ENOMEM, "backward: out of host memory");
  b->pass = __atomic_add_fetch(&pass_counter, 1, __ATOMIC_RELAXED);
  b->retain = flags & LUON_BACKWARD_RETAIN_GRAPH;
  b->create = flags & LUON_BACKWARD_CREATE_GRAPH;
  b->nvars = nvars;
  if (nvars > 0) {
    b->vars = calloc((size_t)nvars, sizeof *b->vars);
    b->vgrad = calloc((size_t)nvars, sizeof *b->vgrad);
    if (!b->vars || !b->vgrad) {
      free(b->vars);
      free(b->vgrad);
      free(b);
      return lu_error(LUON_ENOMEM, "grad: out of host memory");
    }
    for (int i = 0; i < nvars; i++) b->vars[i] = luon_tensor_retain(vars[i]);
  }
  *out = b;
  in_pass = 1;
  luon_status s = topo_sort(nheads, heads, b->pass, &b->topo);
  if (s != LUON_OK) b->topo.n = 0; /* (holds none yet) */
  for (int k = 0; k < b->topo.n; k++) b->topo.v[k]->refcount++;
  b->k = b->topo.n;
  int32_t was = luon_autograd_set_recording(b->create);
  for (int h = 0; h < nheads && s == LUON_OK; h++) {
    luon_tensor *g = head_grads ? head_grads[h] : NULL, *own = NULL;
    if (!g && (s = filled_like(heads[h], 1, &own)) != LUON_OK) break;
    s = deliver(b, heads[h], g ? g : own);
    luon_tensor_release(own);
  }
  luon_autograd_set_recording(was);
  if (s != LUON_OK) b->failed = true;
  return s;
}

luon_status luon_autograd_backward_next(luon_backward *b, luon_function_step *step) {
  if (!b || !step) return lu_error(LUON_EINVAL, "backward: NULL pass or step");
  memset(step, 0, sizeof *step);
  if (b->failed) return lu_error(LUON_EGRAD, "backward: this pass already failed");
  if (b->waiting)
    return lu_error(LUON_EGRAD, "backward: the custom function's input gradients are still due "
                    "(luon_autograd_backward_give)");
  int32_t was = luon_autograd_set_recording(b->create);
  luon_status s = LUON_OK;
  while (b->k > 0 && s == LUON_OK) {
    lu_node *n = b->topo.v[--b->k];
    bool any = false;
    for (int j = 0; j < n->nout; j++) any = any || n->dout[j];
    if (!any) continue;
    for (int i = 0; i < b->nvars && s == LUON_OK; i++) /* a variable computed by n */
      if (b->vars[i]->node == n && n->dout[b->vars[i]->out_index])
        s = accumulate(&b->vgrad[i], n->dout[b->vars[i]->out_index]);
    if (s != LUON_OK) break;
    if (!n->function) {
      s = run_rule(b, n);
      drop_douts(n);
      continue;
    }
    for (int j = 0; j < n->nout && s == LUON_OK; j++) /* outputs no gradient reached: zeros */
      if (!n->dout[j]) s = filled_like(n->out[j], 0, &n->dout[j]);
    if (s != LUON_OK) break;
    step->id = n->function;
    step->nin = n->nin;
    step->nout = n->nout;
    for (int j = 0; j < n->nout; j++) step->dout[j] = n->dout[j];
    for (int i = 0; i < n->nin; i++) step->need[i] = needs_grad(n->in[i]);
    b->waiting = n;
    break;
  }
  luon_autograd_set_recording(was);
  if (s != LUON_OK) b->failed = true;
  return s;
}

luon_status luon_autograd_backward_give(luon_backward *b, int32_t nin, luon_tensor *const *din) {
  if (!b) return lu_error(LUON_EINVAL, "backward: NULL pass");
  lu_node *n = b->waiting;
  if (!n || b->failed) return lu_error(LUON_EGRAD, "backward: no custom function waits for its gradients");
  if (nin != n->nin || (nin > 0 && !din)) {
    b->failed = true;
    return lu_error(LUON_EINVAL, "backward: the custom function has %d inputs, %d gradients given",
                    n->nin, nin);
  }
  luon_status s = LUON_OK;
  for (int i = 0; i < nin && s == LUON_OK; i++) {
    luon_tensor *g = din[i], *t = n->in[i];
    if (!g || !needs_grad(t)) continue;
    if (!same_shape(g, t) || g->dtype != t->dtype || g->dev.type != t->dev.type || g->dev.id != t->dev.id)
      s = lu_error(LUON_ESHAPE, "backward: the custom function's gradient %d is %s %s on %s:%d but its "
                   "input is %s %s on %s:%d", i + 1, luon_dtype_name(g->dtype),
                   lu_shape_str(g->ndim, g->shape), g->dev.type == LUON_GPU ? "gpu" : "cpu", g->dev.id,
                   luon_dtype_name(t->dtype), lu_shape_str(t->ndim, t->shape),
                   t->dev.type == LUON_GPU ? "gpu" : "cpu", t->dev.id);
  }
  int32_t was = luon_autograd_set_recording(b->create);
  for (int i = 0; i < nin && s == LUON_OK; i++)
    if (din[i] && needs_grad(n->in[i])) s = deliver(b, n->in[i], din[i]);
  luon_autograd_set_recording(was);
  drop_douts(n);
  b->waiting = NULL;
  if (s != LUON_OK) b->failed = true;
  return s;
}

luon_status luon_autograd_backward_end(luon_backward *b, int32_t failed, luon_tensor **grads) {
  if (!b) return LUON_OK;
  luon_status s = LUON_OK;
  bool ok = !failed && !b->failed && !b->waiting && b->k == 0;
  for (int k = 0; k < b->topo.n; k++) drop_douts(b->topo.v[k]);
  if (ok && !b->retain)
    for (int k = 0; k < b->topo.n; k++) drop_saved(b->topo.v[k]);
  for (int k = 0; k < b->topo.n; k++) lu_autograd_release_node(b->topo.v[k]);
  free(b->topo.v);
  for (int i = 0; i < b->nvars && ok && grads; i++)
    if (!b->vgrad[i]) {
      s = lu_error(LUON_EGRAD, "grad: cannot differentiate with respect to variable %d: it is "
                   "unreachable from the heads (they do not depend on it)", i + 1);
      break;
    }
  for (int i = 0; i < b->nvars; i++) {
    if (grads) grads[i] = s == LUON_OK && ok ? luon_tensor_retain(b->vgrad[i]) : NULL;
    luon_tensor_release(b->vgrad[i]);
    luon_tensor_release(b->vars[i]);
  }
  free(b->vars);
  free(b->vgrad);
  free(b);
  in_pass = 0;
  return s;
}

luon_status luon_autograd_backward(int32_t nheads, luon_tensor *const *heads,
                                   luon_tensor *const *head_grads, int32_t retain_graph) {
  luon_backward *b;
  luon_status s = luon_autograd_backward_begin(nheads, heads, head_grads, 0, NULL,
                                               retain_graph ? LUON_BACKWARD_RETAIN_GRAPH : 0, &b);
  luon_function_step step;
  if (s == LUON_OK) s = luon_autograd_backward_next(b, &step);
  if (s == LUON_OK && step.id)
    s = lu_error(LUON_EGRAD, "backward: a custom function (autograd.Function) is on the path; its "
                 "backward runs in Lua: drive the pass with luon_autograd_backward_next");
  luon_status e = luon_autograd_backward_end(b, s != LUON_OK, NULL);
  return s != LUON_OK ? s : e;
}

luon_status luon_autograd_record_function(int32_t nin, luon_tensor *const *in, int32_t nout,
                                          luon_tensor *const *out, int64_t id, int32_t *recorded) {
  if (!recorded) return lu_error(LUON_EINVAL, "autograd.Function: recorded is NULL");
  *recorded = 0;
  /* a replay would run the Function's forward ops but never its backward:
   * refused while recording (as MXNet cannot hybridize a Function); in
   * predict mode its captured forward ops are all there is to replay */
  if (lu_capture_top() && lu_recording)
    return lu_graph_refuse(LUON_EUNSUPPORTED, "hybridize: forward called an autograd.Function while autograd "
                                              "recorded; its Lua backward cannot be replayed from the graph (MXNet "
                                              "cannot hybridize one either): call hybridize(false) on this block");
  if (nin < 0 || nin > LUON_MAX_OP_INPUTS || nout < 1 || nout > LUON_MAX_OP_INPUTS)
    return lu_error(LUON_EINVAL, "autograd.Function: %d inputs and %d outputs (at most %d each, "
                    "at least one output)", nin, nout, LUON_MAX_OP_INPUTS);
  if (id <= 0) return lu_error(LUON_EINVAL, "autograd.Function: id %lld, expected > 0", (long long)id);
  if ((nin > 0 && !in) || !out) return lu_error(LUON_EINVAL, "autograd.Function: NULL arrays");
  bool need = false;
  for (int i = 0; i < nin; i++) {
    if (!in[i]) return lu_error(LUON_EINVAL, "autograd.Function: input %d is NULL", i + 1);
    need = need || needs_grad(in[i]);
  }
  for (int k = 0; k < nout; k++) {
    if (!out[k]) return lu_error(LUON_EINVAL, "autograd.Function: output %d is NULL", k + 1);
    for (int i = 0; i < nin; i++)
      if (out[k] == in[i])
        return lu_error(LUON_EINVAL, "autograd.Function: output %d is input %d itself", k + 1, i + 1);
  }
  if (!lu_recording || !need) return LUON_OK;
  luon_attrs none;
  memset(&none, 0, sizeof none);
  LU_TRY(record(-1, &none, nin, in, nout, out, id));
  *recorded = 1;
  return LUON_OK;
}
