/* graph.h: the graph's layout, shared by core/graph.c (capture, replay) and
 * core/graph_file.c (export, import, luon_model_*). Private to the core. */
#ifndef LUON_GRAPH_H
#define LUON_GRAPH_H
#include "internal.h"

enum { SLOT_INPUT = 0, SLOT_CONST = 1, SLOT_NODE = 2 };
enum { OP_DETACH = -1 }; /* luon_tensor_detach, which is not a registry op */

typedef struct gnode {
  int32_t op;            /* registry id, or OP_DETACH */
  int32_t nin, nout;
  int32_t in[LUON_MAX_OP_INPUTS], out[LUON_MAX_OP_INPUTS]; /* slots */
  luon_attrs attrs;
} gnode;

typedef struct sig {
  int32_t dtype, ndim;
  lu_device dev;
  int64_t shape[LU_MAXD];
} sig;

struct luon_graph {
  int32_t nin, nout, nslots, nnodes;
  gnode *nodes;
  int32_t *outputs;       /* slots of the graph's outputs */
  int8_t *kind;           /* per slot: SLOT_* */
  luon_tensor **consts;   /* per slot: the constant held (+1), else NULL */
  int32_t *last_use;      /* per slot: the last node that reads it (-1: none) */
  bool *is_output;        /* per slot */
  sig *in_sig;            /* the inputs it was captured for */
  sig *out_sig;           /* its outputs as captured */
  /* a loaded graph's names (graph_file.c; NULL for a captured one) */
  char **in_names, **const_names;
  uint8_t *const_nograd;  /* per constant: saved as taking no gradient */
  int32_t nconst_names;
  luon_tensor **vals;     /* per slot, during a run (busy) */
  bool busy;
  /* static_alloc: buffers planned at the first run that does not record
   * and reused by later ones. root: the slot whose storage a slot's view
   * (or detached copy) shares; root_end: the last node that reads any
   * slot of that root, -2 when a graph output shares it (never planned). */
  /* elementwise chains (lu_ew_chainable ops, each result read only by the
   * next node): per node, the last node of the chain it starts, else -1 */
  int32_t *chain_end;
  bool static_alloc, planned;
  int32_t *root, *root_end, *plan;  /* plan: per slot, its buffer, -1 none */
  luon_tensor **bufs;
  bool *buf_busy;
  int32_t nbufs;
  /* its CUDA graph (graph.c, "CUDA graphs"): cg_state 0 not tried, 1
   * captured (cg_exec), -1 not capturable; the staging inputs, the arrays
   * its outputs are read from, per slot the constants captured (+1) and
   * their data addresses, and the GPU blocks freed while capturing */
  int8_t cg_state;
  void *cg_exec;
  luon_tensor **cg_in, **cg_out, **cg_const;
  void **cg_addr;
  lu_block *cg_keep;
};

/* After the nodes and outputs are set: the run's bookkeeping (last uses,
 * outputs, slots) and static_alloc's roots. */
luon_status lu_graph_finish(luon_graph *g);

#endif
