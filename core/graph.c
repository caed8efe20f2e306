/* graph.c: hybridize's graphs. While a thread captures, every top-level
 * luon_op_call (not the ones ops make inside themselves) becomes a node;
 * luon_graph_run replays the nodes through the dispatcher in one C call.
 * Not a compiler: no fusion, no reordering; the same kernels in the same
 * order as the eager forward, so the results are the same bits. */
#include "graph.h"
#include <stdio.h>
#include <stdlib.h>

_Thread_local lu_capture *lu_capturing;
_Thread_local int32_t lu_op_depth;
_Thread_local int32_t lu_capture_paused;

struct lu_capture {
  luon_graph *g;
  int32_t cap_nodes, cap_slots;
  luon_tensor **keys;     /* open addressing: tensor -> slot; every key held (+1) */
  int32_t *key_slot;
  int32_t hcap, hcount;
  luon_status failed;     /* a refused action: the capture cannot end well */
  char why[512];
};

/* ---- the capture's tensor -> slot map ------------------------------------ */

static uint32_t hash_ptr(const void *p, int32_t cap) {
  uintptr_t v = (uintptr_t)p;
  v ^= v >> 17;
  v *= (uintptr_t)0x9E3779B97F4A7C15ull;
  return (uint32_t)(v >> 7) & (uint32_t)(cap - 1);
}

static int32_t find_slot(const lu_capture *c, const luon_tensor *t) {
  if (!c->hcap) return -1;
  for (uint32_t h = hash_ptr(t, c->hcap);; h = (h + 1) & (uint32_t)(c->hcap - 1)) {
    if (!c->keys[h]) return -1;
    if (c->keys[h] == t) return c->key_slot[h];
  }
}

static luon_status grow_map(lu_capture *c) {
  int32_t cap = c->hcap ? c->hcap * 2 : 64;
  luon_tensor **keys = calloc((size_t)cap, sizeof *keys);
  int32_t *slot = calloc((size_t)cap, sizeof *slot);
  if (!keys || !slot) {
    free(keys);
    free(slot);
    return lu_error(LUON_ENOMEM, "hybridize: out of host memory for the graph");
  }
  for (int32_t i = 0; i < c->hcap; i++) {
    if (!c->keys[i]) continue;
    uint32_t h = hash_ptr(c->keys[i], cap);
    while (keys[h]) h = (h + 1) & (uint32_t)(cap - 1);
    keys[h] = c->keys[i];
    slot[h] = c->key_slot[i];
  }
  free(c->keys);
  free(c->key_slot);
  c->keys = keys;
  c->key_slot = slot;
  c->hcap = cap;
  return LUON_OK;
}

/* A new slot of `kind` for t (held by the map; a constant also by the graph). */
static luon_status add_slot(lu_capture *c, luon_tensor *t, int kind, int32_t *slot) {
  luon_graph *g = c->g;
  if (2 * (c->hcount + 1) > c->hcap) LU_TRY(grow_map(c));
  if (g->nslots == c->cap_slots) {
    int32_t cap = c->cap_slots ? c->cap_slots * 2 : 64;
    int8_t *kd = realloc(g->kind, (size_t)cap);
    if (kd) g->kind = kd;
    luon_tensor **cs = kd ? realloc(g->consts, sizeof *cs * (size_t)cap) : NULL;
    if (cs) g->consts = cs;
    if (!kd || !cs) return lu_error(LUON_ENOMEM, "hybridize: out of host memory for the graph");
    c->cap_slots = cap;
  }
  int32_t s = g->nslots++;
  g->kind[s] = (int8_t)kind;
  g->consts[s] = kind == SLOT_CONST ? luon_tensor_retain(t) : NULL;
  uint32_t h = hash_ptr(t, c->hcap);
  while (c->keys[h]) h = (h + 1) & (uint32_t)(c->hcap - 1);
  c->keys[h] = luon_tensor_retain(t);
  c->key_slot[h] = s;
  c->hcount++;
  *slot = s;
  return LUON_OK;
}

/* t's slot; a tensor the graph has not seen is a constant (a parameter, an
 * array made before the forward or from Lua numbers), held by reference so
 * that in-place updates (the trainer's) show in later runs. */
static luon_status slot_of(lu_capture *c, luon_tensor *t, int32_t *slot) {
  *slot = find_slot(c, t);
  return *slot >= 0 ? LUON_OK : add_slot(c, t, SLOT_CONST, slot);
}

static luon_status add_node(lu_capture *c, int32_t op, int32_t nin, luon_tensor *const *in,
                            const luon_attrs *attrs, int32_t nout, luon_tensor *const *out) {
  luon_graph *g = c->g;
  if (g->nnodes == c->cap_nodes) {
    int32_t cap = c->cap_nodes ? c->cap_nodes * 2 : 32;
    gnode *v = realloc(g->nodes, sizeof *v * (size_t)cap);
    if (!v) return lu_error(LUON_ENOMEM, "hybridize: out of host memory for the graph");
    g->nodes = v;
    c->cap_nodes = cap;
  }
  gnode *n = &g->nodes[g->nnodes];
  memset(n, 0, sizeof *n);
  n->op = op;
  n->nin = nin;
  n->nout = nout;
  if (attrs) n->attrs = *attrs;
  for (int i = 0; i < nin; i++) LU_TRY(slot_of(c, in[i], &n->in[i]));
  for (int k = 0; k < nout; k++) {
    int32_t s = find_slot(c, out[k]);
    if (s >= 0) /* an op that handed back one of its inputs, or the same array twice */
      return lu_error(LUON_EUNSUPPORTED, "hybridize: %s returned an array the graph already holds",
                      op >= 0 ? luon_op_name(op) : "detach");
    LU_TRY(add_slot(c, out[k], SLOT_NODE, &n->out[k]));
  }
  g->nnodes++;
  return LUON_OK;
}

/* ---- static_alloc's liveness ---------------------------------------------- */

static bool aliases(int32_t op) { return op == OP_DETACH || lu_ops[op].kind != LU_NEW; }

/* Each slot's root (the slot whose storage it may share: views, detach, and
 * in-place ops alias their first input) and each root's end, the last node
 * reading any of its slots (the node making it when none reads it). Without
 * memory for it static_alloc just does not plan. */
static void plan_roots(luon_graph *g) {
  int32_t n = g->nslots > 0 ? g->nslots : 1;
  g->root = malloc(sizeof(int32_t) * (size_t)n);
  g->root_end = malloc(sizeof(int32_t) * (size_t)n);
  g->plan = malloc(sizeof(int32_t) * (size_t)n);
  if (!g->root || !g->root_end || !g->plan) {
    free(g->root);
    free(g->root_end);
    free(g->plan);
    g->root = g->root_end = g->plan = NULL;
    return;
  }
  for (int32_t s = 0; s < g->nslots; s++) {
    g->root[s] = s;
    g->root_end[s] = -1;
    g->plan[s] = -1;
  }
  for (int32_t j = 0; j < g->nnodes; j++) {
    const gnode *d = &g->nodes[j];
    for (int k = 0; k < d->nout; k++) {
      int32_t s = d->out[k];
      g->root[s] = aliases(d->op) && d->nin > 0 ? g->root[d->in[0]] : s;
      int32_t r = g->root[s];
      if (g->root_end[r] < j) g->root_end[r] = j;
    }
    for (int i = 0; i < d->nin; i++) {
      int32_t r = g->root[d->in[i]];
      if (g->root_end[r] != -2 && g->root_end[r] < j) g->root_end[r] = j;
    }
  }
  for (int32_t k = 0; k < g->nout; k++) g->root_end[g->root[g->outputs[k]]] = -2;
}

/* Whether slot s (an output of a NEW node) gets a planned buffer. */
static bool plannable(const luon_graph *g, int32_t s) {
  return g->kind[s] == SLOT_NODE && g->root[s] == s && g->root_end[s] >= 0;
}

/* ---- elementwise chains --------------------------------------------------- */

/* Chains: runs of lu_ew_chainable nodes (one output each), each reading the
 * one before's result, which nothing else reads and which is not a graph
 * output, at most LU_CHAIN_MAX long. A chain's nodes need not be next to
 * each other as captured (a constant's node comes between, say): each is
 * moved to just before the next, which reads its result and is the only
 * node that does, so the graph computes the same and a chain is a run of
 * consecutive nodes; chain_end[j] is the last node of the chain node j
 * starts. Without memory for it a graph just runs its nodes one by one. */
static void find_chains(luon_graph *g) {
  int32_t nn = g->nnodes, n1 = nn > 0 ? nn : 1, ns = g->nslots > 0 ? g->nslots : 1;
  int32_t *readers = calloc((size_t)ns, sizeof(int32_t)), *reader = malloc(sizeof(int32_t) * (size_t)ns);
  int32_t *next = malloc(sizeof(int32_t) * (size_t)n1), *head = malloc(sizeof(int32_t) * (size_t)n1);
  int32_t *last = malloc(sizeof(int32_t) * (size_t)n1);
  gnode *order = malloc(sizeof(gnode) * (size_t)n1);
  g->chain_end = malloc(sizeof(int32_t) * (size_t)n1);
  if (!readers || !reader || !next || !head || !last || !order || !g->chain_end) {
    free(g->chain_end);
    g->chain_end = NULL;
    goto done;
  }
  for (int32_t j = 0; j < nn; j++) /* each slot's readers (a node reading it twice counts once) */
    for (int i = 0; i < g->nodes[j].nin; i++) {
      int32_t sl = g->nodes[j].in[i];
      if (readers[sl] == 0 || reader[sl] != j) readers[sl]++;
      reader[sl] = j;
    }
  for (int32_t j = 0; j < nn; j++) { /* next[j]: the node a chain may go on to from j */
    const gnode *a = &g->nodes[j];
    next[j] = head[j] = last[j] = g->chain_end[j] = -1;
    if (a->op < 0 || a->nout != 1 || !lu_ew_chainable(a->op)) continue;
    int32_t sl = a->out[0], r = reader[sl];
    if (g->kind[sl] == SLOT_NODE && !g->is_output[sl] && readers[sl] == 1 && g->nodes[r].op >= 0 &&
        g->nodes[r].nout == 1 && lu_ew_chainable(g->nodes[r].op))
      next[j] = r;
  }
  /* a node that two chainable nodes feed (add(relu(a), clip(a))) goes on
   * with the later of them only, which the moves below leave just before
   * it: taken first-first, a graph loaded again would choose the other and
   * move it, so a save of the loaded graph would not be the file read */
  for (int32_t j = 0; j < nn; j++)
    if (next[j] >= 0) head[next[j]] = j;
  for (int32_t j = 0; j < nn; j++)
    if (next[j] >= 0 && head[next[j]] != j) next[j] = -1;
  for (int32_t j = 0; j < nn; j++) head[j] = -1;
  for (int32_t j = 0; j < nn; j++) { /* greedy, first nodes first; head: a member's first node */
    if (head[j] >= 0 || next[j] < 0 || head[next[j]] >= 0) continue;
    int32_t e = j;
    head[j] = j;
    for (int len = 1; next[e] >= 0 && head[next[e]] < 0 && len < LU_CHAIN_MAX; len++) e = next[e], head[e] = j;
    last[j] = e;
  }
  int32_t at = 0;
  for (int32_t p = 0; p < nn; p++) {
    if (head[p] < 0) {
      order[at++] = g->nodes[p];
    } else if (last[head[p]] == p) { /* a chain's last node: the chain, here */
      int32_t first = at;
      for (int32_t q = head[p];; q = next[q]) {
        order[at++] = g->nodes[q];
        if (q == p) break;
      }
      g->chain_end[first] = at - 1;
    }
  }
  if (nn > 0) memcpy(g->nodes, order, sizeof(gnode) * (size_t)nn);
done:
  free(readers);
  free(reader);
  free(next);
  free(head);
  free(last);
  free(order);
}

/* Nodes j..e as one chain into `into` (or new); *done false when its
 * operands are not ones a chain takes (the nodes then run one by one). */
static luon_status run_chain(const luon_graph *g, int32_t j, int32_t e, luon_tensor **vals, luon_tensor *into,
                             bool *done) {
  lu_ew_link l[LU_CHAIN_MAX];
  for (int32_t i = j; i <= e; i++) {
    const gnode *n = &g->nodes[i];
    lu_ew_link *k = &l[i - j];
    k->op = n->op, k->attrs = &n->attrs, k->nin = n->nin;
    for (int a = 0; a < n->nin && a < 2; a++)
      k->in[a] = i > j && n->in[a] == g->nodes[i - 1].out[0] ? NULL : vals[n->in[a]];
  }
  luon_tensor *out = NULL;
  int64_t t0 = lu_profile_start();
  LU_TRY(lu_ew_chain_run(e - j + 1, l, into, &out));
  *done = out != NULL;
  lu_touch(out);
  if (out) { /* the profiler counts a chain as one call of its last op */
    lu_profile_stop(g->nodes[e].op, out, t0);
    vals[g->nodes[e].out[0]] = out;
  }
  return LUON_OK;
}

/* ---- capturing ------------------------------------------------------------ */

static void set_sig(sig *w, const luon_tensor *t) {
  w->dtype = t->dtype;
  w->ndim = t->ndim;
  w->dev = t->dev;
  memcpy(w->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
}


static void free_map(lu_capture *c) {
  for (int32_t i = 0; i < c->hcap; i++) luon_tensor_release(c->keys[i]);
  free(c->keys);
  free(c->key_slot);
  c->keys = NULL;
  c->key_slot = NULL;
  c->hcap = c->hcount = 0;
}

static void cg_drop(luon_graph *g);

void luon_graph_free(luon_graph *g) {
  if (!g) return;
  cg_drop(g);
  for (int32_t i = 0; g->cg_in && i < g->nin; i++) luon_tensor_release(g->cg_in[i]);
  free(g->cg_in);
  free(g->cg_out);
  free(g->cg_const);
  free(g->cg_addr);
  for (int32_t s = 0; g->consts && s < g->nslots; s++) luon_tensor_release(g->consts[s]);
  free(g->nodes);
  free(g->outputs);
  free(g->kind);
  free(g->consts);
  free(g->last_use);
  free(g->is_output);
  free(g->in_sig);
  free(g->out_sig);
  for (int32_t i = 0; g->in_names && i < g->nin; i++) free(g->in_names[i]);
  for (int32_t k = 0; k < g->nconst_names; k++) free(g->const_names[k]);
  free(g->in_names);
  free(g->const_names);
  free(g->const_nograd);
  free(g->vals);
  for (int32_t b = 0; b < g->nbufs; b++) luon_tensor_release(g->bufs[b]);
  free(g->root);
  free(g->root_end);
  free(g->plan);
  free(g->chain_end);
  free(g->bufs);
  free(g->buf_busy);
  free(g);
}

int32_t luon_graph_capturing(void) { return lu_capturing != NULL && !lu_capture_paused; }

int32_t luon_graph_capture_pause(int32_t paused) {
  int32_t old = lu_capture_paused;
  lu_capture_paused = paused != 0;
  return old;
}

luon_status luon_graph_capture_begin(int32_t nin, luon_tensor *const *inputs) {
  if (lu_capturing) return lu_error(LUON_EINVAL, "graph_capture_begin: this thread is already capturing a graph");
  if (nin < 0) return lu_error(LUON_EINVAL, "graph_capture_begin: nin is %d (expected 0 or more)", nin);
  if (nin > 0 && !inputs) return lu_error(LUON_EINVAL, "graph_capture_begin: inputs is NULL but nin is %d", nin);
  for (int32_t i = 0; i < nin; i++)
    if (!inputs[i]) return lu_error(LUON_EINVAL, "graph_capture_begin: input %d is NULL", i + 1);
  lu_capture *c = calloc(1, sizeof *c);
  luon_graph *g = c ? calloc(1, sizeof *g) : NULL;
  sig *in_sig = g ? calloc((size_t)(nin > 0 ? nin : 1), sizeof *in_sig) : NULL;
  if (!in_sig) {
    free(c);
    free(g);
    return lu_error(LUON_ENOMEM, "graph_capture_begin: out of host memory");
  }
  c->g = g;
  g->in_sig = in_sig;
  g->nin = nin;
  luon_status s = LUON_OK;
  for (int32_t i = 0; i < nin && s == LUON_OK; i++) {
    const luon_tensor *t = inputs[i];
    set_sig(&in_sig[i], t);
    int32_t slot;
    if (find_slot(c, t) >= 0) s = lu_error(LUON_EINVAL, "graph_capture_begin: input %d is input %d again", i + 1, find_slot(c, t) + 1);
    if (s == LUON_OK) s = add_slot(c, inputs[i], SLOT_INPUT, &slot);
  }
  if (s != LUON_OK) {
    free_map(c);
    luon_graph_free(g);
    free(c);
    return s;
  }
  lu_capturing = c;
  lu_capture_paused = 0;
  return LUON_OK;
}

void luon_graph_capture_abort(void) {
  lu_capture *c = lu_capturing;
  if (!c) return;
  lu_capturing = NULL;
  free_map(c);
  luon_graph_free(c->g);
  free(c);
}

luon_status lu_graph_finish(luon_graph *g) {
  int32_t n = g->nslots > 0 ? g->nslots : 1;
  g->last_use = malloc(sizeof(int32_t) * (size_t)n);
  g->is_output = calloc((size_t)n, sizeof(bool));
  g->vals = calloc((size_t)n, sizeof(luon_tensor *));
  if (!g->last_use || !g->is_output || !g->vals) return lu_error(LUON_ENOMEM, "graph: out of host memory");
  for (int32_t k = 0; k < g->nout; k++) g->is_output[g->outputs[k]] = true;
  find_chains(g); /* may reorder the nodes: the rest follows the order it leaves */
  for (int32_t i = 0; i < g->nslots; i++) g->last_use[i] = -1;
  for (int32_t j = 0; j < g->nnodes; j++)
    for (int i = 0; i < g->nodes[j].nin; i++) g->last_use[g->nodes[j].in[i]] = j;
  plan_roots(g);
  return LUON_OK;
}

luon_status luon_graph_capture_end(int32_t nout, luon_tensor *const *outputs, luon_graph **out) {
  lu_capture *c = lu_capturing;
  if (!c) return lu_error(LUON_EINVAL, "graph_capture_end: this thread is not capturing a graph");
  if (!out) {
    luon_graph_capture_abort();
    return lu_error(LUON_EINVAL, "graph_capture_end: out is NULL");
  }
  *out = NULL;
  luon_status s = c->failed ? lu_error(c->failed, "%s", c->why) : LUON_OK;
  if (s == LUON_OK && (nout < 0 || (nout > 0 && !outputs)))
    s = lu_error(LUON_EINVAL, "graph_capture_end: %d outputs at %p", nout, (const void *)outputs);
  luon_graph *g = c->g;
  if (s == LUON_OK && (!(g->outputs = calloc((size_t)(nout > 0 ? nout : 1), sizeof(int32_t))) ||
                        !(g->out_sig = calloc((size_t)(nout > 0 ? nout : 1), sizeof(sig)))))
    s = lu_error(LUON_ENOMEM, "graph_capture_end: out of host memory");
  for (int32_t k = 0; k < nout && s == LUON_OK; k++) {
    if (!outputs[k]) s = lu_error(LUON_EINVAL, "graph_capture_end: output %d is NULL", k + 1);
    else s = slot_of(c, outputs[k], &g->outputs[k]);
    if (s == LUON_OK) set_sig(&g->out_sig[k], outputs[k]);
  }
  g->nout = nout;
  if (s == LUON_OK) s = lu_graph_finish(g);
  if (s != LUON_OK) {
    luon_graph_capture_abort();
    return s;
  }
  lu_capturing = NULL;
  free_map(c);
  free(c);
  *out = g;
  return LUON_OK;
}

/* What the forward did that a graph cannot hold: the capture fails (even if
 * the caller catches this error) and the call that did it gets the error. */
luon_status lu_graph_refuse(luon_status status, const char *what) {
  lu_capture *c = lu_capturing;
  luon_status s = lu_error(status, "%s", what);
  if (c && !c->failed) {
    c->failed = status;
    strncpy(c->why, luon_last_error(), sizeof c->why - 1);
  }
  return s;
}

luon_status lu_graph_check_call(int32_t op, int32_t nout, luon_tensor *const *out) {
  const char *name = luon_op_name(op);
  luon_op_info info;
  if (luon_op_info_get(op, &info) != LUON_OK) return LUON_OK; /* the dispatcher names it */
  if (info.kind == 2) {
    char m[400];
    snprintf(m, sizeof m, "hybridize: forward updated an array in place (%s) while the graph was "
             "captured; a hybridized forward makes new arrays only: write it without the in-place "
             "update, or call hybridize(false)", name);
    return lu_graph_refuse(LUON_EUNSUPPORTED, m);
  }
  for (int32_t k = 0; out && k < nout; k++) {
    if (!out[k]) continue;
    char m[400];
    snprintf(m, sizeof m, "hybridize: forward wrote into an existing array (%s with out=) while the "
             "graph was captured; a hybridized forward makes new arrays only: drop out=, or call "
             "hybridize(false)", name);
    return lu_graph_refuse(LUON_EUNSUPPORTED, m);
  }
  return LUON_OK;
}

luon_status lu_graph_record(int32_t op, int32_t nin, luon_tensor *const *in, const luon_attrs *attrs,
                            int32_t nout, luon_tensor *const *out) {
  lu_capture *c = lu_capturing;
  luon_status s = add_node(c, op, nin, in, attrs, nout, out);
  if (s != LUON_OK && !c->failed) {
    c->failed = s;
    strncpy(c->why, luon_last_error(), sizeof c->why - 1);
  }
  return s;
}

/* ---- replaying ------------------------------------------------------------ */

int32_t luon_graph_matches(const luon_graph *g, int32_t nin, luon_tensor *const *in) {
  if (!g || nin != g->nin || (nin > 0 && !in)) return 0;
  for (int32_t i = 0; i < nin; i++) {
    const luon_tensor *t = in[i];
    const sig *w = &g->in_sig[i];
    if (!t || t->dtype != w->dtype || t->ndim != w->ndim || !lu_device_eq(t->dev, w->dev) ||
        memcmp(t->shape, w->shape, sizeof(int64_t) * (size_t)t->ndim) != 0)
      return 0;
  }
  return 1;
}

static luon_status check_inputs(const luon_graph *g, int32_t nin, luon_tensor *const *in) {
  if (nin != g->nin)
    return lu_error(LUON_EINVAL, "graph_run: the graph takes %d inputs, got %d", g->nin, nin);
  if (nin > 0 && !in) return lu_error(LUON_EINVAL, "graph_run: inputs is NULL but nin is %d", nin);
  for (int32_t i = 0; i < nin; i++) {
    const luon_tensor *t = in[i];
    const sig *w = &g->in_sig[i];
    if (!t) return lu_error(LUON_EINVAL, "graph_run: input %d is NULL", i + 1);
    if (t->dtype != w->dtype)
      return lu_error(LUON_EDTYPE, "graph_run: input %d is %s but the graph was captured for %s", i + 1,
                      luon_dtype_name(t->dtype), luon_dtype_name(w->dtype));
    if (t->ndim != w->ndim || memcmp(t->shape, w->shape, sizeof(int64_t) * (size_t)t->ndim) != 0)
      return lu_error(LUON_ESHAPE, "graph_run: input %d has shape %s but the graph was captured for %s",
                      i + 1, lu_shape_str(t->ndim, t->shape), lu_shape_str(w->ndim, w->shape));
    if (!lu_device_eq(t->dev, w->dev)) {
      char was[64];
      snprintf(was, sizeof was, "%s", lu_device_str(w->dev));
      return lu_error(LUON_EDEVICE, "graph_run: input %d is on %s but the graph was captured for %s",
                      i + 1, lu_device_str(t->dev), was);
    }
  }
  return LUON_OK;
}

/* A batch norm fused into a convolution (conv2d_maxpool with BN 1,
 * conv2d_bn) has no gradient: replayed while autograd records (an
 * inference graph trained, as SymbolBlock allows), it runs as its ops
 * apart, the same values, through which the gradients flow. out: the
 * node's outputs (into[k] where planned); conv2d_maxpool's indices stay on
 * the tape, its second output is empty as INFER's. */
static bool fused_bn(const gnode *n) {
  return n->op == LU_OP_conv2d_bn ||
         (n->op == LU_OP_conv2d_maxpool && n->attrs.ni > LU_CMP_BN && n->attrs.i[LU_CMP_BN]);
}

static luon_status run_unfused(const gnode *n, luon_tensor **in, luon_tensor **out) {
  int32_t nconv = n->nin - 4, nmid = n->op == LU_OP_conv2d_bn ? 1 : 2;
  luon_attrs a = n->attrs, b;
  luon_tensor *mid[2] = {NULL, NULL};
  memset(&b, 0, sizeof b);
  if (n->op == LU_OP_conv2d_bn) {
    a.ni = LU_NI_conv2d;
    b.i[LU_BN_RELU] = n->attrs.i[LU_CBN_RELU];
    b.f[LU_BN_EPS] = n->attrs.f[LU_CBN_EPS];
  } else {
    a.i[LU_CMP_INFER] = a.i[LU_CMP_BN] = 0;
    b.f[LU_BN_EPS] = n->attrs.f[LU_CMP_BN_EPS];
  }
  LU_TRY(luon_op_call(nmid == 1 ? LU_OP_conv2d : LU_OP_conv2d_maxpool, nconv, in, &a, &nmid, mid));
  b.i[LU_BN_AXIS] = 1, b.i[LU_BN_GLOBAL_STATS] = 1, b.ni = LU_BN_RELU + 1; /* predict mode */
  b.f[LU_BN_MOMENTUM] = 0.9;
  luon_tensor *bin[5] = {mid[0], in[nconv], in[nconv + 1], in[nconv + 2], in[nconv + 3]};
  luon_tensor *bout[3] = {out[0], NULL, NULL};
  int32_t nb = 3;
  luon_status s = luon_op_call(LU_OP_batch_norm, 5, bin, &b, &nb, bout);
  luon_tensor_release(mid[0]);
  luon_tensor_release(mid[1]);
  if (s != LUON_OK) return s;
  out[0] = bout[0];
  luon_tensor_release(bout[1]);
  luon_tensor_release(bout[2]);
  if (n->nout == 2 && !out[1]) {
    int64_t zero = 0;
    s = lu_tensor_new(LUON_DTYPE_U8, 1, &zero, in[0]->dev, &out[1]);
  } else if (n->nout == 2) {
    luon_tensor_retain(out[1]);
  }
  return s;
}

static luon_status run_node(const gnode *n, luon_tensor **vals, luon_tensor *const *into) {
  luon_tensor *in[LUON_MAX_OP_INPUTS];
  luon_tensor *out[LUON_MAX_OP_INPUTS] = {NULL};
  for (int i = 0; i < n->nin; i++) in[i] = vals[n->in[i]];
  for (int k = 0; into && k < n->nout; k++) out[k] = into[k];
  if (n->op == OP_DETACH) {
    LU_TRY(luon_tensor_detach(in[0], &out[0]));
  } else if (fused_bn(n) && luon_autograd_is_recording()) {
    LU_TRY(run_unfused(n, in, out));
  } else {
    int32_t nout = n->nout;
    LU_TRY(luon_op_call(n->op, n->nin, in, &n->attrs, &nout, out));
    if (nout != n->nout) {
      for (int k = 0; k < nout; k++) luon_tensor_release(out[k]);
      return lu_error(LUON_EINTERNAL, "graph_run: %s made %d outputs, %d when captured",
                      luon_op_name(n->op), nout, n->nout);
    }
  }
  for (int k = 0; k < n->nout; k++) vals[n->out[k]] = out[k];
  return LUON_OK;
}

/* The first planned run: a planned slot takes a free buffer of its exact
 * dtype, shape and device, or its new output becomes one. */
static luon_status plan_outputs(luon_graph *g, const gnode *n, luon_tensor **vals) {
  if (aliases(n->op)) return LUON_OK;
  for (int k = 0; k < n->nout; k++) {
    int32_t s = n->out[k];
    const luon_tensor *t = vals[s];
    if (!plannable(g, s) || !lu_is_contiguous(t)) continue;
    int32_t found = -1;
    for (int32_t b = 0; b < g->nbufs && found < 0; b++) {
      const luon_tensor *u = g->bufs[b];
      if (!g->buf_busy[b] && u->dtype == t->dtype && u->ndim == t->ndim && lu_device_eq(u->dev, t->dev) &&
          memcmp(u->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim) == 0)
        found = b;
    }
    if (found < 0) {
      luon_tensor **bufs = realloc(g->bufs, sizeof *bufs * (size_t)(g->nbufs + 1));
      if (bufs) g->bufs = bufs;
      bool *busy = bufs ? realloc(g->buf_busy, sizeof *busy * (size_t)(g->nbufs + 1)) : NULL;
      if (busy) g->buf_busy = busy;
      if (!bufs || !busy) return lu_error(LUON_ENOMEM, "graph_run: out of host memory");
      found = g->nbufs++;
      g->bufs[found] = luon_tensor_retain(vals[s]);
    } else { /* this run's result moves into the buffer later runs write */
      LU_TRY(luon_tensor_copy(g->bufs[found], t));
      luon_tensor_release(vals[s]);
      vals[s] = luon_tensor_retain(g->bufs[found]);
    }
    g->buf_busy[found] = true;
    g->plan[s] = found;
  }
  return LUON_OK;
}

/* Slot s's buffer is free once node j, its root's last reader, has run. */
static void free_after(luon_graph *g, int32_t s, int32_t j) {
  int32_t r = g->root[s];
  if (g->root_end[r] == j && g->plan[r] >= 0) g->buf_busy[g->plan[r]] = false;
}

/* The planned buffers node n writes (NULL: none); planning forgets the
 * plan of an earlier try. */
static void node_into(luon_graph *g, const gnode *n, bool plan, bool planning, luon_tensor **into) {
  for (int k = 0; k < n->nout; k++) {
    into[k] = NULL;
    int32_t s = n->out[k];
    if (!plan || aliases(n->op) || !plannable(g, s)) continue;
    if (planning) g->plan[s] = -1;
    if (g->plan[s] >= 0) into[k] = g->bufs[g->plan[s]];
  }
}

/* After node j ran (alone or in a chain): the buffers and values it was the
 * last to read. */
static void after_node(luon_graph *g, int32_t j, luon_tensor **vals, bool plan) {
  const gnode *n = &g->nodes[j];
  if (plan) /* buffers whose every reader has run are free for the next nodes */
    for (int k = 0; k < n->nout; k++) free_after(g, n->out[k], j);
  for (int i = 0; plan && i < n->nin; i++) free_after(g, n->in[i], j);
  /* slots read for the last time go back to the allocator now */
  for (int i = 0; i < n->nin; i++) {
    int32_t s = n->in[i];
    if (g->kind[s] == SLOT_NODE && g->last_use[s] == j && !g->is_output[s] && vals[s]) {
      luon_tensor_release(vals[s]);
      vals[s] = NULL;
    }
  }
}

/* The nodes in order on vals (inputs and constants set), then the outputs
 * checked against what the graph declares (a loaded graph's file declares
 * them). */
static luon_status run_nodes(luon_graph *g, luon_tensor **vals, bool plan, bool planning) {
  luon_status st = LUON_OK;
  for (int32_t b = 0; b < g->nbufs; b++) g->buf_busy[b] = false;
  /* chains, where nothing records the nodes apart (autograd, a capture) */
  bool chains = g->chain_end && !lu_recording && !lu_capturing;
  for (int32_t j = 0; j < g->nnodes && st == LUON_OK; j++) {
    int32_t e = chains ? g->chain_end[j] : -1; /* the nodes this step runs: j..e */
    luon_tensor *into[LUON_MAX_OP_INPUTS] = {NULL};
    bool done = false;
    if (e > j) {
      for (int32_t i = j; planning && i < e; i++) node_into(g, &g->nodes[i], true, true, into);
      node_into(g, &g->nodes[e], plan, planning, into);
      st = run_chain(g, j, e, vals, into[0], &done);
    }
    if (!done) e = j;
    const gnode *n = &g->nodes[e];
    if (!done && st == LUON_OK) {
      node_into(g, n, plan, planning, into);
      st = run_node(n, vals, plan ? into : NULL);
    }
    if (st == LUON_OK && planning) st = plan_outputs(g, n, vals);
    for (int32_t i = j; i <= e && st == LUON_OK; i++) after_node(g, i, vals, plan);
    j = e;
  }
  for (int32_t k = 0; k < g->nout && st == LUON_OK; k++) {
    const luon_tensor *t = vals[g->outputs[k]];
    const sig *w = &g->out_sig[k];
    if (t->dtype != w->dtype || t->ndim != w->ndim || memcmp(t->shape, w->shape, sizeof(int64_t) * (size_t)t->ndim))
      st = lu_error(LUON_EFORMAT, "graph_run: output %d is %s %s, but the graph declares %s %s", k + 1,
                    luon_dtype_name(t->dtype), lu_shape_str(t->ndim, t->shape), luon_dtype_name(w->dtype),
                    lu_shape_str(w->ndim, w->shape));
  }
  return st;
}

/* A run's slots: constants and inputs set; afterwards, the values made let go. */
static void vals_begin(const luon_graph *g, luon_tensor **vals, luon_tensor *const *in) {
  for (int32_t s = 0; s < g->nslots; s++)
    vals[s] = g->kind[s] == SLOT_CONST ? g->consts[s] : NULL;
  for (int32_t i = 0; i < g->nin; i++) vals[i] = in[i];
}

static void vals_end(const luon_graph *g, luon_tensor **vals) {
  for (int32_t s = 0; s < g->nslots; s++) {
    if (g->kind[s] == SLOT_NODE) luon_tensor_release(vals[s]);
    vals[s] = NULL;
  }
}

/* ---- CUDA graphs ------------------------------------------------------------ */

/* On a GPU under static_alloc, the run after the planning one is captured
 * as a CUDA graph (the backend's graph_begin, graph_end) and later runs
 * launch it: the whole forward in one launch, no host work per op. Its
 * addresses are fixed, so: the inputs are copied into staging arrays of
 * its own (cg_in) and its outputs out of the arrays it writes (cg_out) into
 * new ones; the planned buffers are its own; every GPU block freed while
 * it is captured (intermediates, kernels' scratch) stays its own
 * (lu_alloc_keep) rather than going to other work; a constant whose data
 * moved (a parameter replaced) is seen at the next run, and the graph is
 * captured again. Not captured, and replayed op by op as before: a graph
 * with random ops (a launch would draw the same numbers again), one with
 * inputs or constants on another device, one CUDA refuses (a host
 * synchronisation inside: tried once), and every graph under
 * LUON_CUDA_GRAPHS=0. The capture is of the GPU's one compute stream, so
 * work another thread queues on the same GPU meanwhile would be captured
 * with it: a GPU's ops come from one thread at a time (README). */

static int cuda_graphs_env = -1;

static bool cg_allowed(void) {
  int v = __atomic_load_n(&cuda_graphs_env, __ATOMIC_RELAXED);
  if (v < 0) {
    const char *e = getenv("LUON_CUDA_GRAPHS");
    v = !(e && strcmp(e, "0") == 0);
    __atomic_store_n(&cuda_graphs_env, v, __ATOMIC_RELAXED);
  }
  return v && lu_cuda.graph_begin && lu_cuda.graph_end && lu_cuda.graph_launch && lu_cuda.graph_free;
}

/* Whether g may become a CUDA graph on device d (its first input's). */
static bool cg_capturable(const luon_graph *g, lu_device d) {
  if (d.type != LUON_GPU) return false;
  for (int32_t i = 0; i < g->nin; i++)
    if (!lu_device_eq(g->in_sig[i].dev, d)) return false;
  for (int32_t s = 0; s < g->nslots; s++)
    if (g->kind[s] == SLOT_CONST && !lu_device_eq(g->consts[s]->dev, d)) return false;
  for (int32_t j = 0; j < g->nnodes; j++)
    if (g->nodes[j].op >= 0 && (lu_ops[g->nodes[j].op].flags & LU_RANDOM)) return false;
  return true;
}

/* The captured graph and what it holds let go (the staging inputs stay). */
static void cg_drop(luon_graph *g) {
  if (g->cg_exec) lu_cuda.graph_free(g->cg_exec);
  g->cg_exec = NULL;
  for (lu_block *b = g->cg_keep, *next; b; b = next) {
    next = b->next;
    lu_free(b);
  }
  g->cg_keep = NULL;
  for (int32_t k = 0; g->cg_out && k < g->nout; k++) {
    luon_tensor_release(g->cg_out[k]);
    g->cg_out[k] = NULL;
  }
  for (int32_t s = 0; g->cg_const && s < g->nslots; s++) {
    luon_tensor_release(g->cg_const[s]);
    g->cg_const[s] = NULL;
  }
  if (g->cg_state > 0) g->cg_state = 0;
}

/* Whether every constant is the array, at the address, it was captured with. */
static bool cg_consts_same(const luon_graph *g) {
  for (int32_t s = 0; s < g->nslots; s++)
    if (g->kind[s] == SLOT_CONST && (g->consts[s] != g->cg_const[s] || lu_data(g->consts[s]) != g->cg_addr[s]))
      return false;
  return true;
}

/* Capture the nodes on the staging inputs (nothing runs: CUDA records).
 * A graph CUDA refuses (graph_end's LUON_EUNSUPPORTED) is marked never to
 * be tried again: the caller replays op by op. Any other failure (out of
 * memory, an interrupt) is the run's, and the next run tries again. */
static luon_status cg_capture(luon_graph *g, int32_t id) {
  if (!g->cg_out) g->cg_out = calloc((size_t)g->nout + 1, sizeof *g->cg_out);
  if (!g->cg_const) g->cg_const = calloc((size_t)g->nslots + 1, sizeof *g->cg_const);
  if (!g->cg_addr) g->cg_addr = calloc((size_t)g->nslots + 1, sizeof *g->cg_addr);
  if (!g->cg_out || !g->cg_const || !g->cg_addr) return lu_error(LUON_ENOMEM, "graph_run: out of host memory");
  luon_tensor **vals = g->vals;
  lu_block **outer = lu_alloc_keep; /* a graph captured inside another's capture */
  lu_alloc_keep = &g->cg_keep;
  luon_status st = lu_cuda.graph_begin(id);
  if (st == LUON_OK) {
    vals_begin(g, vals, g->cg_in);
    luon_status ran = run_nodes(g, vals, true, false);
    void *exec = NULL;
    st = lu_cuda.graph_end(id, &exec);
    if (st == LUON_OK) st = ran; /* a refused capture fails the op that saw it: the refusal is the cause */
    if (st == LUON_OK) {
      g->cg_exec = exec;
      for (int32_t k = 0; k < g->nout; k++) g->cg_out[k] = luon_tensor_retain(vals[g->outputs[k]]);
    } else if (exec) {
      lu_cuda.graph_free(exec);
    }
    vals_end(g, vals);
  }
  lu_alloc_keep = outer;
  if (st != LUON_OK) { /* refused: op by op from now on; else (memory, an interrupt) tried again next run */
    cg_drop(g);
    if (st != LUON_EUNSUPPORTED) return st;
    g->cg_state = -1;
    return LUON_OK;
  }
  for (int32_t s = 0; s < g->nslots; s++)
    if (g->kind[s] == SLOT_CONST) {
      g->cg_const[s] = luon_tensor_retain(g->consts[s]);
      g->cg_addr[s] = lu_data(g->consts[s]);
    }
  g->cg_state = 1;
  return LUON_OK;
}

/* A run through the CUDA graph: the inputs in, a launch, the outputs out
 * into new arrays. *ran false when the graph could not be captured (the
 * caller then replays op by op). */
static luon_status cg_run(luon_graph *g, luon_tensor *const *in, luon_tensor **out, bool *ran) {
  *ran = false;
  int32_t id = in[0]->dev.id;
  if (g->cg_state > 0 && !cg_consts_same(g)) cg_drop(g);
  if (!g->cg_in) {
    luon_tensor **t = calloc((size_t)g->nin, sizeof *t);
    if (!t) return lu_error(LUON_ENOMEM, "graph_run: out of host memory");
    luon_status s = LUON_OK;
    for (int32_t i = 0; i < g->nin && s == LUON_OK; i++)
      s = lu_tensor_new(in[i]->dtype, in[i]->ndim, in[i]->shape, in[i]->dev, &t[i]);
    if (s != LUON_OK) {
      for (int32_t i = 0; i < g->nin; i++) luon_tensor_release(t[i]);
      free(t);
      return s;
    }
    g->cg_in = t;
  }
  for (int32_t i = 0; i < g->nin; i++) LU_TRY(luon_tensor_copy(g->cg_in[i], in[i]));
  if (g->cg_state == 0) LU_TRY(cg_capture(g, id));
  if (g->cg_state < 0) return LUON_OK;
  LU_TRY(lu_cuda.graph_launch(id, g->cg_exec));
  luon_status st = LUON_OK;
  for (int32_t k = 0; k < g->nout; k++) {
    const luon_tensor *t = g->cg_out[k];
    out[k] = NULL;
    if (st == LUON_OK) st = lu_tensor_new(t->dtype, t->ndim, t->shape, t->dev, &out[k]);
    if (st == LUON_OK) st = luon_tensor_copy(out[k], t);
  }
  if (st != LUON_OK)
    for (int32_t k = 0; k < g->nout; k++) {
      luon_tensor_release(out[k]);
      out[k] = NULL;
    }
  *ran = st == LUON_OK;
  return st;
}

int32_t luon_graph_cuda_state(const luon_graph *g) { return g ? g->cg_state : 0; }

luon_status luon_graph_run(luon_graph *g, int32_t nin, luon_tensor *const *in, int32_t nout,
                           luon_tensor **out) {
  if (!g) return lu_error(LUON_EINVAL, "graph_run: graph is NULL");
  if (nout != g->nout)
    return lu_error(LUON_EINVAL, "graph_run: the graph makes %d outputs, room was given for %d", g->nout, nout);
  if (nout > 0 && !out) return lu_error(LUON_EINVAL, "graph_run: out is NULL");
  LU_TRY(check_inputs(g, nin, in));
  /* a run inside a run (a host calling back): its own slots */
  luon_tensor **vals = g->busy ? calloc((size_t)g->nslots + 1, sizeof *vals) : g->vals;
  if (!vals) return lu_error(LUON_ENOMEM, "graph_run: out of host memory");
  bool own = vals != g->vals;
  g->busy = true;
  /* static_alloc (not while recording: the tape keeps what it saw) */
  bool plan = g->static_alloc && g->plan && !own && !lu_recording && !lu_capturing;
  bool planning = plan && !g->planned;
  luon_status st = LUON_OK;
  bool ran = false;
  if (plan && !planning && g->cg_state == 0 && (nin == 0 || !cg_allowed() || !cg_capturable(g, in[0]->dev)))
    g->cg_state = -1;
  if (plan && !planning && g->cg_state >= 0) st = cg_run(g, in, out, &ran);
  if (st == LUON_OK && !ran) {
    vals_begin(g, vals, in);
    st = run_nodes(g, vals, plan, planning);
    for (int32_t k = 0; k < nout; k++) out[k] = st == LUON_OK ? luon_tensor_retain(vals[g->outputs[k]]) : NULL;
    vals_end(g, vals);
  }
  if (own) free(vals);
  else g->busy = false;
  if (planning && st == LUON_OK) g->planned = true;
  return st;
}

luon_status luon_graph_set_static_alloc(luon_graph *g, int32_t on) {
  if (!g) return lu_error(LUON_EINVAL, "graph_set_static_alloc: graph is NULL");
  g->static_alloc = on != 0;
  return LUON_OK;
}

int32_t luon_graph_num_nodes(const luon_graph *g) { return g ? g->nnodes : 0; }
int32_t luon_graph_num_consts(const luon_graph *g) {
  int32_t n = 0;
  for (int32_t s = 0; g && s < g->nslots; s++) n += g->kind[s] == SLOT_CONST;
  return n;
}

/* The k-th constant (0-based, in slot order), borrowed; NULL past the last. */
luon_tensor *luon_graph_const(const luon_graph *g, int32_t k) {
  for (int32_t s = 0; g && s < g->nslots; s++)
    if (g->kind[s] == SLOT_CONST && k-- == 0) return g->consts[s];
  return NULL;
}

luon_status luon_graph_set_const(luon_graph *g, int32_t k, luon_tensor *t) {
  if (!g) return lu_error(LUON_EINVAL, "graph_set_const: graph is NULL");
  if (!t) return lu_error(LUON_EINVAL, "graph_set_const: tensor is NULL");
  for (int32_t s = 0, left = k; s < g->nslots; s++) {
    if (g->kind[s] != SLOT_CONST || left-- != 0) continue;
    const luon_tensor *o = g->consts[s];
    if (o->dtype != t->dtype || o->ndim != t->ndim || !lu_device_eq(o->dev, t->dev) ||
        memcmp(o->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim) != 0)
      return lu_error(LUON_ESHAPE, "graph_set_const: constant %d is %s %s, got %s %s", k + 1,
                      luon_dtype_name(o->dtype), lu_shape_str(o->ndim, o->shape), luon_dtype_name(t->dtype),
                      lu_shape_str(t->ndim, t->shape));
    luon_tensor_retain(t);
    luon_tensor_release(g->consts[s]);
    g->consts[s] = t;
    return LUON_OK;
  }
  return lu_error(LUON_EINVAL, "graph_set_const: the graph has no constant %d", k + 1);
}

/* luon_tensor_detach during a capture: a node, so that the replay detaches too. */
luon_status lu_graph_record_detach(luon_tensor *in, luon_tensor *out) {
  return lu_graph_record(OP_DETACH, 1, &in, NULL, 1, &out);
}
