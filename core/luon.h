/* luon.h: the public C API of the luon runtime (tensors, devices, memory, ops).
 * Plain C99. The block between the LUON_CDEF markers is also, verbatim, the
 * LuaJIT ffi.cdef that bindings/ generates at build time: keep it parseable
 * by LuaJIT (no #define, no #ifdef, enums with explicit values). */
#ifndef LUON_H
#define LUON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* LUON_CDEF_BEGIN */

/* Every call returns a status (or NULL) and leaves a message for
 * luon_last_error() on failure. Nothing here aborts, exits or prints. A
 * NULL where a pointer is needed is LUON_EINVAL naming the function and
 * the argument ("view: out is NULL"). */
typedef enum luon_status {
  LUON_OK = 0,
  LUON_EINVAL = 1,        /* a bad argument (named in the message) */
  LUON_ESHAPE = 2,        /* shapes that do not fit together */
  LUON_EDTYPE = 3,        /* a dtype the op does not take */
  LUON_EDEVICE = 4,       /* inputs on different devices, or no such device */
  LUON_ENOMEM = 5,        /* allocation failed: bytes asked and free in the message */
  LUON_EIO = 6,           /* a file could not be read or written */
  LUON_EFORMAT = 7,       /* a file's contents are corrupt or of the wrong kind */
  LUON_EUNSUPPORTED = 8,  /* a valid request this build or backend cannot do */
  LUON_EDEVICE_LOST = 9,  /* a sticky device fault: restart the process */
  LUON_EGRAD = 10,        /* autograd misuse */
  LUON_EINTERNAL = 11,    /* a bug in luon */
  LUON_ESCRIPT = 12,      /* a Lua error in an embedded runtime (bindings/luon_embed.h) */
  LUON_EINTERRUPTED = 13  /* stopped by luon_interrupt (Ctrl-C) or luon_rt_interrupt/a time
                             limit; the result was not made and the runtime stays usable */
} luon_status;

/* The message of the last failed call on this thread ("" if none). */
const char *luon_last_error(void);
/* Set the message (used by bindings that detect errors themselves). */
void luon_set_error(const char *msg);

typedef enum luon_dtype {
  LUON_DTYPE_F32 = 1,
  LUON_DTYPE_F64 = 2,
  LUON_DTYPE_F16 = 3,     /* 16-bit storage: the ops that take it compute in float32 */
  LUON_DTYPE_BF16 = 4,    /* likewise (which ops: README, "dtypes") */
  LUON_DTYPE_I32 = 5,
  LUON_DTYPE_I64 = 6,
  LUON_DTYPE_U8 = 7,
  LUON_DTYPE_BOOL = 8,    /* one byte, 0 or 1 */
  LUON_DTYPE_I8 = 9,
  LUON_DTYPE_I16 = 10,
  LUON_DTYPE_U16 = 11,
  LUON_DTYPE_COUNT = 12
} luon_dtype;

/* Name ("float32") and element size of a dtype; NULL/0 when invalid. */
const char *luon_dtype_name(int32_t dtype);
int32_t luon_dtype_size(int32_t dtype);

typedef enum luon_device_type {
  LUON_CPU = 1,
  LUON_GPU = 2,
  LUON_CPU_PINNED = 3     /* not a device: pinned host pool `id` in luon_memory_* (its
                             tensors are on cpu(0); see luon_tensor_empty_pinned) */
} luon_device_type;

typedef enum luon_limits {
  LUON_MAX_DIMS = 8,
  LUON_MAX_ATTR_INTS = 32,
  LUON_MAX_ATTR_FLOATS = 8,
  LUON_MAX_OP_INPUTS = 8
} luon_limits;

/* A tensor: a reference-counted view (shape, strides, offset) of a
 * reference-counted storage on one device. Strides and offset count
 * elements, not bytes. Opaque; read it with luon_tensor_info. */
typedef struct luon_tensor luon_tensor;

typedef struct luon_tensor_info {
  int32_t dtype;
  int32_t ndim;
  int32_t dev_type;
  int32_t dev_id;
  int64_t size;                        /* number of elements */
  int64_t offset;                      /* in elements, into the storage */
  int64_t shape[8];                    /* LUON_MAX_DIMS */
  int64_t strides[8];                  /* in elements */
  void *data;                          /* address of element 0 (device memory on GPUs); after
                                          writing through it, call luon_tensor_touch */
  int32_t contiguous;                  /* row-major and dense */
  int32_t requires_grad;               /* has a gradient buffer attached (autograd) */
  int32_t recorded;                    /* the output of a recorded op (its gradient flows back) */
} luon_tensor_info;

/* Fill *info. Cheap: no synchronisation. */
luon_status luon_tensor_info_get(const luon_tensor *t, luon_tensor_info *info);
/* Say that t's memory was written through a pointer (luon_tensor_info's
 * data), not through luon's functions, which say so themselves: what luon
 * keeps derived from its values (a convolution's weights reordered for
 * oneDNN) is made again at the next use. Memory given to luon_tensor_wrap
 * needs no call: luon never keeps anything derived from it. */
luon_status luon_tensor_touch(luon_tensor *t);
/* Reference counting. retain returns t; release frees at zero (NULL is fine). */
luon_tensor *luon_tensor_retain(luon_tensor *t);
void luon_tensor_release(luon_tensor *t);

/* A new uninitialised tensor (+1 in *out). shape may be NULL when ndim is 0. */
luon_status luon_tensor_empty(int32_t dtype, int32_t ndim, const int64_t *shape,
                              int32_t dev_type, int32_t dev_id, luon_tensor **out);
/* A new tensor holding a copy of host memory `src` (row-major, of `dtype`;
 * NULL only when the shape has no elements). */
luon_status luon_tensor_from_host(const void *src, int32_t dtype, int32_t ndim,
                                  const int64_t *shape, int32_t dev_type, int32_t dev_id,
                                  luon_tensor **out);
/* Copy a tensor's elements, row-major, into host memory `dst` of `bytes`
 * bytes (converting to `dtype`). Waits for the work that writes t. */
luon_status luon_tensor_to_host(const luon_tensor *t, void *dst, int32_t dtype, size_t bytes);
/* A tensor over memory the caller owns (+1), without copying: luon never
 * frees ptr, and the caller keeps it valid while the tensor or any view of
 * it lives. strides in elements, NULL = row-major; dev_type/dev_id say
 * where ptr lives (device memory for LUON_GPU). LUON_EINVAL for a NULL ptr
 * with elements; LUON_ESHAPE, LUON_EDTYPE, LUON_EDEVICE as for empty. */
luon_status luon_tensor_wrap(void *ptr, int32_t dtype, int32_t ndim, const int64_t *shape,
                             const int64_t *strides, int32_t dev_type, int32_t dev_id,
                             luon_tensor **out);
/* A view of t with another shape/strides/offset over the same storage (+1);
 * shape and strides may be NULL only when ndim is 0. */
luon_status luon_tensor_view(luon_tensor *t, int32_t ndim, const int64_t *shape,
                             const int64_t *strides, int64_t offset, luon_tensor **out);
/* Copy src into dst (same shape; dtype converted; devices may differ).
 * LUON_EINVAL when dst is a broadcast view (stride 0 along an axis longer
 * than 1): its elements share memory. */
luon_status luon_tensor_copy(luon_tensor *dst, const luon_tensor *src);
/* Wait until all work writing t is done. */
luon_status luon_tensor_wait(const luon_tensor *t);

/* Devices. cpu(i) for any i >= 0 are logical devices over host memory;
 * gpu(i) exist when the CUDA backend loaded and found cards. */
int32_t luon_gpu_count(void);
/* Free and total bytes of gpu(id) (either pointer may be NULL);
 * LUON_EUNSUPPORTED without CUDA. */
luon_status luon_gpu_memory_info(int32_t id, int64_t *free_bytes, int64_t *total_bytes);
/* Why the CUDA backend did not load ("" if it did). */
const char *luon_cuda_status(void);
/* Name of a device, "cpu(0)"; valid until the next call on this thread. */
const char *luon_device_name(int32_t dev_type, int32_t dev_id);
/* Check that a device exists (LUON_EDEVICE with a message if not). */
luon_status luon_device_check(int32_t dev_type, int32_t dev_id);
/* Wait for all work on a device. */
luon_status luon_device_sync(int32_t dev_type, int32_t dev_id);

/* Memory statistics of one device's caching allocator, or (dev_type
 * LUON_CPU_PINNED, id 0..15) of pinned host pool id. */
typedef struct luon_memory_stats {
  int64_t in_use;        /* bytes handed out and not yet returned */
  int64_t cached;        /* bytes held in the cache for reuse */
  int64_t peak;          /* highest in_use since start or reset */
  int64_t allocs;        /* allocations served */
  int64_t cache_hits;    /* of which from the cache */
  int64_t requested;     /* bytes asked for by the blocks in use (in_use counts their
                            size classes): what PyTorch's memory_allocated counts */
  int64_t peak_requested; /* highest requested since start or reset */
} luon_memory_stats;
luon_status luon_memory_stats_get(int32_t dev_type, int32_t dev_id, luon_memory_stats *out);
/* Return one device's cached blocks to the system (a pinned pool first
 * waits for the copies still reading its cached blocks). */
luon_status luon_memory_empty_cache(int32_t dev_type, int32_t dev_id);
luon_status luon_memory_reset_peak(int32_t dev_type, int32_t dev_id);
/* An optional cap on the bytes one device's allocator (or pinned pool)
 * holds, in use plus cached: 0 for none. An allocation past it first gives
 * the device's cache back to the system, then fails with LUON_ENOMEM naming
 * the bytes asked, in use and allowed, where the system might instead kill
 * the process. Every device starts with $LUON_MEMORY_LIMIT (bytes, or with a
 * K, M, G or T suffix: powers of 1024), or none; while that is not a size,
 * allocations and luon_memory_limit_get on a device whose limit was never
 * set fail with LUON_EINVAL naming it. LUON_EINVAL for bytes < 0. */
luon_status luon_memory_limit_set(int32_t dev_type, int32_t dev_id, int64_t bytes);
luon_status luon_memory_limit_get(int32_t dev_type, int32_t dev_id, int64_t *bytes);

/* Pinned (page-locked) host memory, what the data loader's batches are made
 * in when a GPU is present: a copy from it to gpu(i) is queued and returns
 * at once, and its block is reused only after that copy has completed
 * (events, queried, never waited for). One pool per pin_id (0..15, MXNet's
 * cpu_pinned(pin_id)). With no GPU there is no pinned memory and these are
 * plain cpu(0) tensors. Writing into a pinned tensor while a copy from it
 * is queued races with that copy (wait_to_read the copy first). */
/* A new uninitialised cpu(0) tensor in pinned pool pin_id (+1). */
luon_status luon_tensor_empty_pinned(int32_t dtype, int32_t ndim, const int64_t *shape,
                                     int32_t pin_id, luon_tensor **out);
/* 1 when t's memory is pinned (0 also for NULL and without a GPU). */
int32_t luon_tensor_is_pinned(const luon_tensor *t);

/* Process-wide counters the Lua layer reads through a pointer, without a
 * call, to pace its garbage collector (LuaJIT cannot see native memory).
 * tensors_live and bytes_in_use are exact; bytes_since_gc is updated
 * without locks (a heuristic: approximate when threads allocate). */
typedef struct luon_counters {
  int64_t bytes_since_gc;   /* bytes handed out (blocks, cached or fresh, and
                               tensor headers; not the kernels' own scratch, freed
                               before they return) since the binding last reset it */
  int64_t tensors_live;
  int64_t bytes_in_use;     /* blocks handed out and not yet returned, all devices */
} luon_counters;
luon_counters *luon_counters_get(void);

/* Ops. Every op is reached by name through the registry (core/luon_ops.def).
 * Attributes are op-specific and documented beside each registry line. */
typedef struct luon_attrs {
  int32_t dtype;                 /* result dtype where the op takes one, 0 = default */
  int32_t dev_type;              /* device of ops without inputs (creation, random) */
  int32_t dev_id;
  int32_t ni;                    /* number of ints used in i[] */
  int64_t i[32];                 /* LUON_MAX_ATTR_INTS: axes, shapes, flags */
  double f[8];                   /* LUON_MAX_ATTR_FLOATS: scalars */
} luon_attrs;

/* The id of an op by name, or -1 (with a message) when there is none. */
int32_t luon_op_find(const char *name);
int32_t luon_op_count(void);
/* Name, inputs (-1: variadic) and outputs (-1: given by attrs) of op id. */
const char *luon_op_name(int32_t op);
int32_t luon_op_num_inputs(int32_t op);
int32_t luon_op_num_outputs(int32_t op);
/* 1 when op has a backward rule, 0 when it has none (or is not an op). */
int32_t luon_op_has_grad(int32_t op);
/* The op profiler (luon.profiler). While on, each op called from outside
 * any op adds 1 and its wall time to its totals (the ops it calls are
 * inside that time); LUON_PROFILE_SYNC waits for a GPU op's device after it,
 * so the time is its kernels'. Setting a mode keeps the totals; reset zeroes
 * them. luon_profile_get: op's calls and nanoseconds since the last reset. */
typedef enum luon_profile_kind { LUON_PROFILE_OFF = 0, LUON_PROFILE_ON = 1, LUON_PROFILE_SYNC = 2 } luon_profile_kind;
luon_status luon_profile_set(int32_t mode);
int32_t luon_profile_mode(void);
void luon_profile_reset(void);
luon_status luon_profile_get(int32_t op, int64_t *calls, int64_t *nanoseconds);
/* The registry's facts about an op (core/luon_ops.def), which the Lua layer,
 * the tests and the parity check read instead of keeping lists of names. */
enum {
  LUON_BACKEND_CPU = 2,          /* 1 << LUON_CPU */
  LUON_BACKEND_CUDA = 4          /* 1 << LUON_GPU */
};
typedef struct luon_op_info {
  const char *name;
  int32_t num_inputs;            /* -1: variadic */
  int32_t num_outputs;           /* -1: given by the attributes */
  int32_t kind;                  /* 0 new outputs, 1 views of the input, 2 in place */
  int32_t has_grad;              /* a backward rule */
  int32_t backends;              /* LUON_BACKEND_* bits: the devices it runs on */
  int32_t half;                  /* takes float16 and bfloat16 (computed in float32) */
  int32_t fused;                 /* other ops in one pass (equal to them) */
  int32_t random;                /* draws from the device's generator */
  int32_t np_map;                /* np.<name>: the elementwise wrapper */
  int32_t np_reduce;             /* np.<name>: the reduction wrapper */
  int32_t method;                /* x:<name>() is np.<name>(x) */
} luon_op_info;
/* LUON_EINVAL when op is not an op or out is NULL. */
luon_status luon_op_info_get(int32_t op, luon_op_info *out);
/* The named attribute slots (LUON_SLOTS lines), k = 0.. : its name (as
 * CONV2D_RELU), whether it is a float slot (attrs.f) or an int slot
 * (attrs.i), and its index there. NULL past the last one. */
const char *luon_attr_slot(int32_t k, int32_t *is_float, int32_t *index);

/* Run op `op` on nin inputs. *nout is the capacity of out[] on entry and the
 * number of outputs on return. An out[k] that is non-NULL on entry is written
 * in place (shape must match; dtype is converted); otherwise a new tensor is
 * returned in out[k] (+1). attrs may be NULL. */
luon_status luon_op_call(int32_t op, int32_t nin, luon_tensor *const *in,
                         const luon_attrs *attrs, int32_t *nout, luon_tensor **out);

/* Graphs (hybridize, core/graph.c). While this thread captures, every
 * luon_op_call made from outside an op becomes a node of the graph: its op,
 * a copy of its attrs, its inputs (the graph's inputs, earlier nodes'
 * outputs, or constants: any other array, held by reference, so that in-place
 * updates such as the trainer's show in later runs) and its outputs. The ops
 * still run, so the capturing code gets its real results. What a graph
 * cannot hold fails the call that does it and the capture (LUON_EUNSUPPORTED,
 * "forward read a value of an array during hybridize ..."): reading values
 * (luon_tensor_to_host), writing into arrays (luon_tensor_copy, out=, ops
 * that update their inputs in place) and luon_tensor_view. Opaque. */
typedef struct luon_graph luon_graph;
/* Start capturing on this thread, with nin inputs (borrowed; distinct).
 * LUON_EINVAL when this thread is already capturing. */
luon_status luon_graph_capture_begin(int32_t nin, luon_tensor *const *inputs);
/* Stop capturing: the graph whose outputs are outputs[0..nout) (+1 in *out,
 * free with luon_graph_free), or the first refusal's status and message
 * (then nothing is kept). */
luon_status luon_graph_capture_end(int32_t nout, luon_tensor *const *outputs, luon_graph **out);
/* Stop capturing and drop the graph (after an error in the captured code). */
void luon_graph_capture_abort(void);
/* 1 while this thread captures (and has not paused). */
int32_t luon_graph_capturing(void);
/* Pause (1) or resume (0) this thread's capture; returns the previous
 * value. While paused, calls run as if nothing were captured (the deferred
 * initialization of parameters at a first call is not part of a graph). */
int32_t luon_graph_capture_pause(int32_t paused);
/* Run the graph's nodes in order through luon_op_call (so while recording
 * the tape records them as it does eager calls) on inputs of the dtypes,
 * shapes and devices it was captured for (else LUON_EDTYPE, LUON_ESHAPE,
 * LUON_EDEVICE: a graph never runs with stale shapes); out[0..nout) get new
 * references (+1). An intermediate array goes back to the allocator after
 * its last reader. */
luon_status luon_graph_run(luon_graph *g, int32_t nin, luon_tensor *const *inputs, int32_t nout,
                           luon_tensor **out);
void luon_graph_free(luon_graph *g);
/* 1 when inputs[0..nin) are of the dtypes, shapes and devices g runs on
 * (what luon_graph_run checks), else 0; sets no error (a caller's test). */
int32_t luon_graph_matches(const luon_graph *g, int32_t nin, luon_tensor *const *inputs);
/* static_alloc (hybridize's): a run that does not record plans the
 * graph's intermediate buffers once (a buffer is reused after the last
 * reader of what it held) and later such runs write into the same buffers,
 * allocating only the outputs handed out. Off by default. */
luon_status luon_graph_set_static_alloc(luon_graph *g, int32_t on);
int32_t luon_graph_num_nodes(const luon_graph *g);
/* Its CUDA graph (on a GPU under static_alloc, the run after the planning
 * one captures the whole replay, later runs launch it; LUON_CUDA_GRAPHS=0
 * turns it off): 1 captured, -1 replayed op by op (random ops, two
 * devices, a capture CUDA refused, not a GPU), 0 not decided (no run
 * after the planning one yet). */
int32_t luon_graph_cuda_state(const luon_graph *g);
/* The constants, in the order the graph met them: the k-th (borrowed, NULL
 * past the last), and replacing it by an array of the same dtype, shape and
 * device (a parameter whose array was replaced). */
int32_t luon_graph_num_consts(const luon_graph *g);
luon_tensor *luon_graph_const(const luon_graph *g, int32_t k);
luon_status luon_graph_set_const(luon_graph *g, int32_t k, luon_tensor *t);
/* Graphs as files (core/graph_file.c; net:export, SymbolBlock.imports). Save
 * writes the graph as readable JSON to symbol_path and its constants as
 * safetensors to params_path, each file replaced whole; input_names and
 * const_names may be NULL or hold NULLs (then "data"/"data<k>" and the
 * names the graph was loaded with, else "_const<k>"); const_nograd[k] 1 marks
 * a constant that takes no gradient (a running statistic; NULL: none, or
 * as loaded), kept in the file for SymbolBlock's grad_req. A graph whose inputs,
 * constants or creation nodes sit on two devices is refused. Load reads
 * them onto device (dev_type, dev_id), checking the whole file first
 * (LUON_EFORMAT naming the file and the fault, LUON_EIO when unreadable);
 * params_path may be NULL for a graph without constants. */
luon_status luon_graph_save(const luon_graph *g, const char *symbol_path, const char *params_path,
                            const char *const *input_names, const char *const *const_names,
                            const uint8_t *const_nograd);
/* The graph as an ONNX model (opset 13) in one file, replaced whole
 * (core/onnx.c; luon.onnx.export_model): its constants are initializers
 * named as in luon_graph_save, its inputs and outputs keep the captured
 * shapes. An op ONNX cannot express as luon computes it is refused
 * (LUON_EUNSUPPORTED naming the node and op), and so is every save of a
 * luon built without protobuf-c. */
luon_status luon_graph_save_onnx(const luon_graph *g, const char *path, const char *const *input_names,
                                 const char *const *const_names);
luon_status luon_graph_load(const char *symbol_path, const char *params_path, int32_t dev_type,
                            int32_t dev_id, luon_graph **out);
int32_t luon_graph_num_inputs(const luon_graph *g);
int32_t luon_graph_num_outputs(const luon_graph *g);
/* Input k's (output 0) or output k's (output 1) dtype, ndim and shape (room
 * for 8; any pointer may be NULL). */
luon_status luon_graph_io(const luon_graph *g, int32_t output, int32_t k, int32_t *dtype, int32_t *ndim,
                          int64_t *shape);
/* A loaded graph's names of input k and of constant k (NULL otherwise). */
const char *luon_graph_input_name(const luon_graph *g, int32_t k);
const char *luon_graph_const_name(const luon_graph *g, int32_t k);
/* 1 when a loaded graph's constant k was saved as taking no gradient, else 0. */
int32_t luon_graph_const_nograd(const luon_graph *g, int32_t k);
/* A graph or model runs on one thread at a time (its buffers are its own);
 * load one per thread to run in parallel. */
/* A model: a graph loaded for a C host, run on host buffers with no Lua
 * (a robot controller links libluon and two files). run reads each input
 * from a host buffer of the input's dtype and shape (row-major) and writes
 * each output into a host buffer of its dtype and shape (luon_graph_io
 * through luon_model_graph says which); static_alloc is on, so a run
 * allocates only its outputs (and, on a GPU, its inputs' copies). */
typedef struct luon_model luon_model;
luon_status luon_model_load(const char *symbol_path, const char *params_path, int32_t dev_type,
                            int32_t dev_id, luon_model **out);
luon_status luon_model_run(luon_model *m, const void *const *inputs, void *const *outputs);
luon_graph *luon_model_graph(luon_model *m); /* borrowed */
void luon_model_free(luon_model *m);

/* Autograd. While recording is on (per thread), every op whose inputs need
 * a gradient is put on the tape; backward walks it in reverse. */
typedef enum luon_grad_req {
  LUON_GRAD_NULL = 0,     /* no gradient */
  LUON_GRAD_WRITE = 1,    /* backward overwrites .grad */
  LUON_GRAD_ADD = 2       /* backward adds into .grad */
} luon_grad_req;
/* Switch recording / training mode on or off; return the previous value. */
int32_t luon_autograd_set_recording(int32_t on);
int32_t luon_autograd_set_training(int32_t on);
int32_t luon_autograd_is_recording(void);
int32_t luon_autograd_is_training(void);
/* Give t a gradient buffer (zeros, same shape, dtype and device). */
luon_status luon_tensor_attach_grad(luon_tensor *t, int32_t grad_req);
/* t's gradient buffer (+1), or NULL with LUON_OK when it has none. */
luon_status luon_tensor_grad(luon_tensor *t, luon_tensor **out);
int32_t luon_tensor_grad_req(const luon_tensor *t);
/* Whether a backward wrote t's gradient since the flag was last cleared
 * (MXNet's _fresh_grad: the Trainer's stale-gradient check reads it and
 * clears it after each update). attach_grad clears it. set returns the
 * previous value. */
int32_t luon_tensor_grad_fresh(const luon_tensor *t);
int32_t luon_tensor_set_grad_fresh(luon_tensor *t, int32_t fresh);
/* Drop t's link to the tape (t becomes a constant, as MXNet's detach). */
luon_status luon_tensor_detach(luon_tensor *t, luon_tensor **out);
/* Backward from n heads; head_grads may be NULL (ones) or hold NULLs.
 * Without retain_graph the tape behind the heads is freed. */
luon_status luon_autograd_backward(int32_t n, luon_tensor *const *heads,
                                   luon_tensor *const *head_grads, int32_t retain_graph);

/* A backward pass run step by step, for autograd.grad and for custom
 * functions (autograd.Function), whose backward is the caller's code: C
 * never calls back into Lua, so the pass stops at a custom function's node,
 * hands its output gradients out, and takes its input gradients back.
 *   begin: as luon_autograd_backward, flags LUON_BACKWARD_*; with nvars > 0
 *     the gradients of the heads with respect to vars (arrays that called
 *     attach_grad, or computed by recorded ops) are collected for end
 *     instead of written to .grad (autograd.grad). CREATE_GRAPH records
 *     the pass itself (for higher-order gradients; needs vars). When *b
 *     is set (even on failure), end must be called with it.
 *   next: runs the pass until a custom function's node needs its backward
 *     (step->id > 0) or the pass is done (step->id = 0).
 *   give: that node's nin input gradients (borrowed; NULL: none), each of
 *     its input's shape, dtype and device; then next again.
 *   end: frees the pass (and the tape behind the heads unless
 *     RETAIN_GRAPH, when the pass completed); failed != 0 (the caller's
 *     step failed) frees nothing of the tape. When grads is not NULL and
 *     the pass completed: the vars' gradients (+1), else NULLs; a var no
 *     gradient reached is an error (LUON_EGRAD, as MXNet's).
 * One pass at a time per thread. */
typedef struct luon_backward luon_backward;
typedef enum luon_backward_flag {
  LUON_BACKWARD_RETAIN_GRAPH = 1,
  LUON_BACKWARD_CREATE_GRAPH = 2
} luon_backward_flag;
typedef struct luon_function_step {
  int64_t id;                                /* the custom function; 0: done */
  int32_t nin, nout;
  luon_tensor *dout[LUON_MAX_OP_INPUTS];     /* borrowed output gradients (zeros
                                                where none reached) */
  int32_t need[LUON_MAX_OP_INPUTS];          /* input i wants a gradient */
} luon_function_step;
luon_status luon_autograd_backward_begin(int32_t nheads, luon_tensor *const *heads,
                                         luon_tensor *const *head_grads, int32_t nvars,
                                         luon_tensor *const *vars, int32_t flags,
                                         luon_backward **b);
luon_status luon_autograd_backward_next(luon_backward *b, luon_function_step *step);
luon_status luon_autograd_backward_give(luon_backward *b, int32_t nin, luon_tensor *const *din);
luon_status luon_autograd_backward_end(luon_backward *b, int32_t failed, luon_tensor **grads);
/* Put a custom function's call on the tape: its outputs (made unrecorded,
 * none of them an input) get one node whose backward is function `id`
 * (> 0, the caller's) when recording is on and an input needs a gradient;
 * *recorded says whether it was. When the node is freed its id is queued,
 * on the thread that frees it, for luon_autograd_released_functions. */
luon_status luon_autograd_record_function(int32_t nin, luon_tensor *const *in, int32_t nout,
                                          luon_tensor *const *out, int64_t id, int32_t *recorded);
/* Take up to max ids of custom-function nodes freed on this thread;
 * returns how many. */
int32_t luon_autograd_released_functions(int64_t *ids, int32_t max);

/* Replicas of one array on several devices (data parallelism): afterwards
 * every replica holds the sum (LUON_REDUCE_SUM) or the mean of all of them,
 * bit-identical. Same shape and dtype on all; at most 64 replicas. CPU
 * devices add in one threaded pass; other devices go through copies to the
 * first replica's device. */
typedef enum luon_reduce_op {
  LUON_REDUCE_SUM = 0,
  LUON_REDUCE_MEAN = 1
} luon_reduce_op;
luon_status luon_allreduce(int32_t n, luon_tensor *const *replicas, int32_t op);

/* Collectives across processes (core/dist/dist.c): Open MPI, loaded with dlopen
 * by luon_dist_init, for processes started by mpirun; a process not started
 * by a launcher is rank 0 of 1 and never loads MPI. Arrays are reduced in
 * place; CPU arrays of float32/float64/int32/int64/uint8 directly, other
 * CPU arrays (strided, 16-bit float) through a host copy; GPU arrays through
 * NCCL (a communicator per process made at the first GPU collective, its id
 * broadcast over MPI), or through host memory when ranks share a card or
 * LUON_DIST_NCCL=0 (luon_dist_backend says which). Every rank must make the
 * same calls in the same order with arrays of the same shape, dtype and
 * kind of device. LUON_DIST_TIMEOUT (seconds, default 300, 0 = none) bounds
 * each wait, MPI's and NCCL's: past it the call fails with LUON_EIO and the
 * communicators are unusable. Failures are LUON_EIO with MPI's message, or
 * NCCL's (LUON_EDEVICE). */
typedef enum luon_dist_op {
  LUON_DIST_SUM = 0,
  LUON_DIST_MEAN = 1,
  LUON_DIST_MAX = 2,
  LUON_DIST_MIN = 3
} luon_dist_op;
/* Idempotent. Any of the out pointers may be NULL. */
luon_status luon_dist_init(int32_t *rank, int32_t *size, int32_t *local_rank);
/* "Open MPI v4.1.4" or "single process ..." (after init). */
const char *luon_dist_backend(void);
luon_status luon_dist_barrier(void);
luon_status luon_dist_allreduce(luon_tensor *t, int32_t op);
luon_status luon_dist_broadcast(luon_tensor *t, int32_t root);
/* Destroys the NCCL communicator, then MPI_Finalize (a collective: every
 * rank calls it); init cannot follow. */
luon_status luon_dist_finalize(void);

/* Random numbers: one seeded generator per device (counter-based). */
luon_status luon_random_seed(int64_t seed);

/* Image transforms (core/data/transform*.c, resizing in resample.c): Gluon's vision transforms as a
 * pipeline of steps applied in order to one HWC image (uint8 or float32;
 * other dtypes are read as float32), with MXNet's semantics. After
 * TO_TENSOR the image is a CHW float32 tensor. A pipeline whose first step
 * is NORMALIZE reads its input as (C,H,W). Random steps draw from Philox
 * keyed by (seed, sample_index, step number): a given (seed, sample) gives
 * the same augmentation on any thread. Sizes are (width, height). */
typedef enum luon_transform_kind {
  LUON_TF_CAST = 1,                /* dtype */
  LUON_TF_TO_TENSOR = 2,           /* HWC -> CHW float32, x / 255 */
  LUON_TF_NORMALIZE = 3,           /* (x - mean[c]) / std[c]; nmean, nstd 1 or C */
  LUON_TF_RESIZE = 4,              /* width, height, keep_ratio (short side = width), interp */
  LUON_TF_CENTER_CROP = 5,         /* width, height, interp (legacy rule for small images) */
  LUON_TF_RANDOM_CROP = 6,         /* width, height, pad (zeros), interp */
  LUON_TF_RANDOM_RESIZED_CROP = 7, /* width, height, scale[2], ratio[2], interp */
  LUON_TF_FLIP_LR = 8,             /* p */
  LUON_TF_FLIP_TB = 9,             /* p */
  LUON_TF_BRIGHTNESS = 10,         /* brightness */
  LUON_TF_CONTRAST = 11,           /* contrast */
  LUON_TF_SATURATION = 12,         /* saturation */
  LUON_TF_HUE = 13,                /* hue */
  LUON_TF_COLOR_JITTER = 14,       /* brightness, contrast, saturation, hue (random order) */
  LUON_TF_LIGHTING = 15            /* alpha (std of the AlexNet PCA noise) */
} luon_transform_kind;

/* One step; zero what a kind does not use. use_fixed (tests): the random
 * draws come from fixed[]: flips flip iff fixed[0] != 0; brightness,
 * contrast, saturation, hue: alpha = fixed[0]; jitter: order b,c,s,h with
 * alphas fixed[0..3] (hue's a shift in turns); lighting: PCA alphas
 * fixed[0..2]; RandomCrop: offset (fixed[0], fixed[1]); RandomResizedCrop:
 * the crop (x0, y0, w, h) = fixed[0..3]. */
typedef struct luon_transform_step {
  int32_t kind;
  int32_t width, height;
  int32_t keep_ratio;
  int32_t interp;          /* 0 nearest, 1 bilinear, 2 bicubic, 3 area */
  int32_t pad;
  int32_t dtype;
  int32_t nmean, nstd;
  int32_t use_fixed;
  float p;
  float brightness, contrast, saturation, hue;
  float alpha;
  float scale[2];
  float ratio[2];
  float mean[4];
  float std[4];
  float fixed[4];
} luon_transform_step;

/* Apply the steps to img ((H,W,C), or (N,H,W,C): sample i uses
 * sample_index + i); a new tensor on cpu(0) in *out (+1). Errors name the
 * transform and the bad value; nothing is written on failure. */
luon_status luon_transform_apply(const luon_transform_step *steps, int32_t nsteps,
                                 const luon_tensor *img, uint64_t seed, uint64_t sample_index,
                                 luon_tensor **out);
/* The same, one step at a time with no fusion (tests compare the two). */
luon_status luon_transform_apply_reference(const luon_transform_step *steps, int32_t nsteps,
                                           const luon_tensor *img, uint64_t seed,
                                           uint64_t sample_index, luon_tensor **out);
/* Write the result contiguously into dst (dst_bytes must be its exact
 * size: one slot of a batch). For the data loader. */
luon_status luon_transform_apply_into(const luon_transform_step *steps, int32_t nsteps,
                                      const luon_tensor *img, uint64_t seed,
                                      uint64_t sample_index, void *dst, int64_t dst_bytes);
/* The same from raw HWC pixels (uint8 or float32; row_stride in elements,
 * 0 = w*c), e.g. a decoder's buffer. */
luon_status luon_transform_apply_raw(const luon_transform_step *steps, int32_t nsteps,
                                     const void *pixels, int32_t dtype, int32_t h, int32_t w,
                                     int32_t c, int64_t row_stride, uint64_t seed,
                                     uint64_t sample_index, void *dst, int64_t dst_bytes);
/* Shape (3 entries) and dtype of the result for an image of in_shape
 * (H,W,C) and in_dtype, validating the steps. */
luon_status luon_transform_out_shape(const luon_transform_step *steps, int32_t nsteps,
                                     int32_t ndim, const int64_t *in_shape, int32_t in_dtype,
                                     int64_t *out_shape, int32_t *out_dtype);
/* 1 when any step is random; 0 (with a message) when steps is NULL. */
int32_t luon_transform_is_random(const luon_transform_step *steps, int32_t nsteps);
/* A seed drawn from cpu(0)'s stream (reproducible after luon_random_seed). */
luon_status luon_transform_next_seed(uint64_t *out);
/* Resize an (H,W,C) uint8/float32 image to (h, w) with OpenCV's conventions
 * (pixel centers; uint8 bilinear/bicubic with 11-bit fixed-point weights);
 * interp 0 nearest, 1 bilinear, 2 bicubic, 3 area. New tensor (+1). */
luon_status luon_image_resize(const luon_tensor *src, int32_t w, int32_t h, int32_t interp,
                              luon_tensor **out);

/* Files: safetensors (core/safetensors.c) and IDX (core/data/idx.c). Safetensors: an 8-byte little-endian header length, a
 * JSON header {"name": {"dtype": "F32", "shape": [..], "data_offsets":
 * [begin, end]}, "__metadata__": {..}}, then the raw row-major data. Dtype
 * names F32 F64 F16 BF16 I32 I64 U8 BOOL. Messages start "safetensors: <path>: ". */
/* Write n named tensors (any device, any strides) to path atomically: into
 * "<path>.tmp.<pid>", fsync, rename. On failure the old file is untouched.
 * A symbolic link is written through (its target replaced, the link kept);
 * a directory or device at path is refused and left as it is.
 * LUON_EIO (cannot create/write/rename), LUON_EINVAL (empty or duplicate names). */
luon_status luon_safetensors_save(const char *path, int32_t n, const char *const *names,
                                  luon_tensor *const *tensors);
/* An open safetensors file whose header has been validated. Opaque. */
typedef struct luon_safetensors luon_safetensors;
/* Open and check everything (lengths, JSON, dtypes, sizes, offsets, names):
 * LUON_EFORMAT naming the file and the fault, LUON_EIO when unreadable. */
luon_status luon_safetensors_open(const char *path, luon_safetensors **out);
/* Number of tensors; the name of tensor i (in header order), NULL if out of range. */
int32_t luon_safetensors_count(const luon_safetensors *h);
const char *luon_safetensors_name(const luon_safetensors *h, int32_t i);
/* dtype, ndim and shape (shape: room for 8) of tensor i, without reading it. */
luon_status luon_safetensors_shape(const luon_safetensors *h, int32_t i, int32_t *dtype,
                                   int32_t *ndim, int64_t *shape);
/* Read tensor i into a new tensor on the device (+1 in *out). */
luon_status luon_safetensors_get(luon_safetensors *h, int32_t i, int32_t dev_type, int32_t dev_id,
                                 luon_tensor **out);
void luon_safetensors_close(luon_safetensors *h);
/* NumPy's .npy (one array) and .npz (a zip of .npy files, one per name)
 * (core/npy.c). Saving writes a new file and renames it into place, as
 * safetensors; dtypes float16/32/64, int8/16/32/64, uint8/16, bool (bfloat16 has no
 * NumPy dtype: LUON_EDTYPE). Loading reads .npy versions 1.0 to 3.0, either
 * byte order, C or Fortran order, into a new row-major tensor (+1);
 * LUON_EFORMAT naming the file (and entry) and the fault, LUON_EIO when
 * unreadable. Messages start "npy: <path>: " or "npz: <path>: ". */
luon_status luon_npy_save(const char *path, const luon_tensor *t);
luon_status luon_npy_load(const char *path, int32_t dev_type, int32_t dev_id, luon_tensor **out);
/* n named arrays into one .npz (entries "<name>.npy"; compress 1: deflated,
 * as numpy.savez_compressed; 0 stored, as numpy.savez). */
luon_status luon_npz_save(const char *path, int32_t n, const char *const *names, luon_tensor *const *tensors,
                          int32_t compress);
typedef struct luon_npz luon_npz;
/* Open a .npz: its entries must all be .npy files (checked); each is read
 * and checked by luon_npz_get. */
luon_status luon_npz_open(const char *path, luon_npz **out);
int32_t luon_npz_count(const luon_npz *h);
const char *luon_npz_name(const luon_npz *h, int32_t i); /* without ".npy"; NULL out of range */
luon_status luon_npz_get(luon_npz *h, int32_t i, int32_t dev_type, int32_t dev_id, luon_tensor **out);
void luon_npz_close(luon_npz *h);
/* Read an IDX file (MNIST's format), gzip-compressed or plain, into a new
 * tensor of its shape (+1): element type 0x08 -> uint8, 0x0C -> int32,
 * 0x0D -> float32, 0x0E -> float64 (gzip through zlib).
 * LUON_EFORMAT (bad magic, sizes, gzip data) naming the file; LUON_EIO. */
luon_status luon_idx_read(const char *path, int32_t dev_type, int32_t dev_id, luon_tensor **out);

/* sizeof of a struct of this header as the C compiler lays it out, by name
 * ("luon_tensor_info"), or -1 (with a message): the bindings check the FFI agrees. */
int64_t luon_abi_sizeof(const char *struct_name);

/* The BLAS in use and its kernel family ("SkylakeX"), or why none loaded. */
const char *luon_blas_info(void);

/* Interrupting long ops. luon_interrupt() raises a process-wide flag; CPU
 * ops that run longer than a few milliseconds (matmul, conv2d and its
 * gradients, pooling) look at it between blocks of their work, and every op
 * looks at it before it starts, so the op running when it is raised (on any
 * thread) stops within ~50 ms with LUON_EINTERRUPTED ("matmul:
 * interrupted"); its new result is released, never handed out (an out=
 * array is left part written). The flag stays raised, failing every op
 * that starts, until luon_interrupt_clear(): the luon REPL clears it before
 * each chunk, luon_rt_call and friends before and after each call. Ops that
 * update their inputs in place (optimizer steps) finish once started. CUDA
 * kernels already queued are not stopped. luon_interrupt is async-signal-
 * safe (one atomic store): call it from a SIGINT handler or another thread. */
void luon_interrupt(void);
void luon_interrupt_clear(void);
/* 1 while the flag is raised (or this thread's, below), else 0. */
int32_t luon_interrupted(void);
/* A flag of the calling thread's own: ops this thread runs (and the work
 * they hand to luon's pool threads) also stop while *flag is nonzero, as
 * for luon_interrupt, and ops on other threads do not. NULL: none (the
 * default). Returns the previous one, to put back. luon_rt_call uses it,
 * so that luon_rt_interrupt stops its runtime's call and no other. */
int32_t *luon_interrupt_scope(int32_t *flag);

/* Threads used by CPU kernels (default: the number of cores). */
void luon_set_num_threads(int32_t n);
int32_t luon_get_num_threads(void);

/* Images (core/data/image.c): JPEG and PNG to HWC uint8 tensors on cpu(0), as
 * MXNet's imread/imdecode. flag 1: (H,W,3) RGB; flag 0: (H,W,1) gray.
 * Alpha is dropped (not composited); CMYK JPEGs are converted to RGB;
 * 16-bit PNGs keep their high byte. Errors (LUON_EFORMAT) name `name` (or
 * the path) and the reason: empty, truncated or corrupt data, not JPEG/PNG,
 * 12-bit JPEG, more than 65535 pixels a side or 2^30 bytes.
 * min_w/min_h > 0 let a JPEG decode at the smallest DCT scale of 1/8,
 * 1/4, 1/2 whose output is still at least min_w x min_h, else 1/1 (for a
 * resize to that size after); 0: no bound. PNGs decode at full size. */
luon_status luon_image_decode(const void *bytes, size_t n, int32_t flag, int32_t min_w,
                              int32_t min_h, const char *name, luon_tensor **out);
/* Read and decode the file at path (LUON_EIO when it cannot be read). */
luon_status luon_image_read(const char *path, int32_t flag, int32_t min_w, int32_t min_h,
                            luon_tensor **out);
/* Encode an (H,W,C) uint8 tensor, C 1 or 3, on any device, into a new
 * buffer (*buf, *len bytes; release it with luon_free). quality 1..100,
 * 0: 95. JPEGs are 4:2:0 (color) or gray, baseline. */
luon_status luon_image_encode_jpeg(const luon_tensor *t, int32_t quality, void **buf, size_t *len);
luon_status luon_image_encode_png(const luon_tensor *t, void **buf, size_t *len);
/* Encode by path's extension (.jpg/.jpeg/.png, any case) and write through
 * a temporary file renamed over path. quality as in encode_jpeg. */
luon_status luon_image_write(const char *path, const luon_tensor *t, int32_t quality);
/* Release a buffer returned by luon (encoders). NULL is fine. */
void luon_free(void *p);

/* The data loader (core/data/pipeline.c): worker threads that read and decode
 * images (or take them from an in-memory uint8 array), run the transform
 * steps and write each sample straight into its slot of one contiguous
 * batch tensor on cpu(0), batches prefetched and returned in order. No Lua
 * runs in the workers; the sampler stays with the caller, which passes each
 * epoch's order. Random steps are seeded per sample with
 * (luon_loader_epoch_seed(seed, epoch), dataset index), so the batches do
 * not depend on the number of workers. A pipeline whose first step is a
 * Resize decodes JPEGs at the smallest DCT scale that still covers the
 * resize (its output size is taken from the full image's header). Opaque. */
typedef struct luon_loader luon_loader;
/* A loader over n samples: file paths (JPEG/PNG, decoded with flag 1 RGB or
 * 0 gray) or images, a contiguous (n,H,W,C) uint8 array on the CPU
 * (retained), exactly one of the two; labels[n] are copied, as are the
 * steps. num_workers 0: luon_loader_next makes each batch on the calling
 * thread. prefetch: batches in flight (<= 0: 2 * num_workers). on_error 0:
 * a sample that fails to load ends the epoch with an error naming its file;
 * 1: it is left out of its batch and counted (luon_loader_skipped). */
luon_status luon_loader_new(int64_t n, const char *const *paths, const luon_tensor *images,
                            const int64_t *labels, int32_t flag, const luon_transform_step *steps,
                            int32_t nsteps, int32_t num_workers, int32_t prefetch, int32_t on_error,
                            uint64_t seed, luon_loader **out);
/* Start an epoch (abandoning the current one): batch b holds the samples
 * order[bounds[b]] .. order[bounds[b+1]-1] (dataset indices); bounds[0] = 0. */
luon_status luon_loader_start(luon_loader *l, const int64_t *order, const int64_t *bounds,
                              int64_t nbatch, int64_t epoch);
/* The next batch, blocking until it is ready: data (B,...) and labels (B,)
 * (int64 unless set_label_dtype), +1 each; both NULL with LUON_OK at the
 * end of the epoch. A failure returns its status and message and ends the
 * epoch. */
luon_status luon_loader_next(luon_loader *l, luon_tensor **data, luon_tensor **label);
/* Later batches (data and labels) come from pinned pool pin_id (0..15, a
 * GPU's id when there are GPUs), or from plain cpu(0) memory with pin_id
 * -1 (the default). Without a GPU it changes nothing. */
luon_status luon_loader_set_pin_memory(luon_loader *l, int32_t pin_id);
/* Later label batches as LUON_DTYPE_I32 or LUON_DTYPE_I64 (the default):
 * int32 for MNIST / FashionMNIST, as MXNet's. Others: LUON_EINVAL. */
luon_status luon_loader_set_label_dtype(luon_loader *l, int32_t dtype);
/* Samples skipped so far (on_error 1); the first one's message into first_msg. */
int64_t luon_loader_skipped(luon_loader *l, char *first_msg, int64_t msg_bytes);
/* Stop and join the workers, free everything (mid-epoch is fine; NULL too). */
void luon_loader_free(luon_loader *l);
/* The seed of an epoch's random steps. */
uint64_t luon_loader_epoch_seed(uint64_t seed, int64_t epoch);
/* One sample exactly as the workers make it: read, decode, transform (+1). */
luon_status luon_loader_load_image(const char *path, int32_t flag, const luon_transform_step *steps,
                                   int32_t nsteps, uint64_t seed, uint64_t sample_index,
                                   luon_tensor **out);
/* The entries of a directory, unsorted, as one buffer of *len bytes: per
 * entry a kind byte ('d' directory, 'f' regular file, 'o' other, symlinks
 * followed) then the NUL-terminated name. Release with luon_free. */
luon_status luon_dir_list(const char *path, char **buf, int64_t *len);

/* LUON_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif
