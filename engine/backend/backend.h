/* The compute backend: a small vtable, in the manner of ggml's backends.
 *
 * A backend owns memory (device memory and pinned host memory), copies, the
 * streams and events that order them, strided-batched GEMM, a counter-based
 * RNG, and the element-wise kernels the engine itself needs (casts, scale,
 * axpy, norms, optimizer updates). The kernels the models need (embedding,
 * layer norm, softmax, ...) sit in a second table, `ds_nn_ops`
 * (engine/backend/nn.h), reached through `be->nn`.
 *
 * Two implementations:
 *   cpu  (engine/backend/cpu/)  OpenBLAS sgemm + OpenMP loops; "device" memory
 *                               is host RAM; streams are synchronous.
 *   cuda (engine/backend/cuda/) cuBLAS + CUDA kernels; pinned host memory via
 *                               cudaHostAlloc.
 * Element-wise arithmetic is written once as DS_HD static inline functions
 * (engine/backend/math.h) that both the cpu loops and the CUDA kernels call,
 * so the cpu tests check the arithmetic the GPU runs.
 *
 * Conventions for every slot:
 *   - matrices are ROW-MAJOR; a leading dimension is the distance in elements
 *     between consecutive rows;
 *   - pointers are device pointers unless the slot says host;
 *   - kernels are ordered on the backend's default stream; results are visible
 *     to later kernels without a sync, to the host only after ds_backend_sync;
 *   - a slot returns DS_OK or a status with a message (cuBLAS/CUDA code and the
 *     operation). Slots marked OPTIONAL may be NULL; callers check.
 *
 * All memory goes through ds_backend_alloc(), which records it in the memory
 * accountant under a purpose. */
#ifndef DS_BACKEND_BACKEND_H
#define DS_BACKEND_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/backend/math.h"
#include "engine/core/dtype.h"
#include "engine/core/mem.h"
#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_backend ds_backend;
typedef struct ds_stream ds_stream; /* opaque; NULL means the default stream */
typedef struct ds_event ds_event;   /* opaque */
typedef struct ds_nn_ops ds_nn_ops; /* engine/backend/nn.h */
struct ds_onebit_pass;              /* engine/backend/onebit_math.h */
struct ds_rows_view;                /* engine/backend/rows_math.h */
struct ds_rows_sum;

typedef enum ds_backend_kind { DS_BACKEND_CPU = 0, DS_BACKEND_CUDA = 1 } ds_backend_kind;

typedef enum ds_copy_kind {
    DS_COPY_H2D = 0, /* host (pinned or pageable) -> device */
    DS_COPY_D2H,
    DS_COPY_D2D,
    DS_COPY_H2H,
    DS_COPY_DEFAULT, /* either side anywhere: the address tells (cuda: unified addressing) */
} ds_copy_kind;

/* Adam / AdamW hyper-parameters for one update. `step` is the 1-based step
 * count used for bias correction. adam_w_mode: decoupled weight decay
 * (AdamW, DeepSpeed's default for "Adam"); otherwise L2 added to the grad. */
typedef struct ds_adam_hparams {
    float lr, beta1, beta2, eps, weight_decay;
    int64_t step;
    bool adam_w_mode;
    bool bias_correction;
} ds_adam_hparams;

/* SGD with momentum (PyTorch semantics: buf = momentum*buf + (1-dampening)*g;
 * nesterov uses g + momentum*buf). */
typedef struct ds_sgd_hparams {
    float lr, momentum, dampening, weight_decay;
    bool nesterov;
    bool first_step; /* buf = g on the first step, as PyTorch does */
} ds_sgd_hparams;

/* The implementation table. Every slot receives the backend first. */
typedef struct ds_backend_ops {
    const char *name; /* "cpu", "cuda" */

    /* ---- memory ---- */
    /* Raw allocation at `place` (DS_PLACE_DEVICE, or DS_PLACE_HOST = pinned
     * host memory on cuda, page-aligned RAM on cpu). Memory is zeroed. Use
     * ds_backend_alloc(), which also records the bytes, not this slot. */
    ds_status (*alloc)(ds_backend *be, size_t bytes, ds_mem_place place, void **out);
    void (*free)(ds_backend *be, void *ptr, ds_mem_place place);
    ds_status (*memcpy)(ds_backend *be, void *dst, const void *src, size_t bytes,
                        ds_copy_kind kind, ds_stream *stream);
    ds_status (*memset)(ds_backend *be, void *dst, int value, size_t bytes, ds_stream *stream);

    /* ---- ordering ---- */
    ds_status (*sync)(ds_backend *be);                         /* all streams */
    /* OPTIONAL (NULL on cpu: everything there is synchronous). */
    ds_status (*stream_create)(ds_backend *be, ds_stream **out);
    void (*stream_destroy)(ds_backend *be, ds_stream *s);
    ds_status (*stream_sync)(ds_backend *be, ds_stream *s);
    ds_status (*event_create)(ds_backend *be, ds_event **out);
    void (*event_destroy)(ds_backend *be, ds_event *e);
    ds_status (*event_record)(ds_backend *be, ds_event *e, ds_stream *s);
    ds_status (*stream_wait_event)(ds_backend *be, ds_stream *s, ds_event *e);

    /* ---- dense math (fp32 in and out) ----
     * For b in [0, batch): C_b = alpha * op(A_b) * op(B_b) + beta * C_b with
     * op(A_b) [m x k], op(B_b) [k x n], C_b [m x n], X_b = X + b * strideX.
     * transa/transb: use the transpose of the stored row-major matrix.
     * The C_b of a batch must not overlap (the batches run in parallel:
     * strideC 0 with batch > 1 is refused). To sum products over a batch,
     * write them to separate blocks and add those (nn->bcast_add_bwd sums
     * rows), or fold the batch into k.
     * Input precision: with be->gemm_inputs == DS_BF16 (ds_backend_set_gemm_
     * inputs) every element of A and B is first rounded to bf16 (round to
     * nearest even, ds_f32_to_bf16) and the products are summed in fp32:
     * bf16 tensor cores on cuda; on cpu the rounded values go through the
     * same fp32 kernels (a product of two bf16 values is exact in fp32, so
     * only the order of the sums differs), or on a CPU with AVX512-BF16
     * through its bf16 dot-product instruction (cpu_gemm_dot.c: the same
     * products in another order, inputs below 2^-126 counted as zero). A, B and C stay fp32 arrays
     * either way, and alpha, beta and C are never rounded. */
    ds_status (*gemm)(ds_backend *be, bool transa, bool transb, int m, int n, int k, float alpha,
                      const float *A, int lda, int64_t strideA, const float *B, int ldb,
                      int64_t strideB, float beta, float *C, int ldc, int64_t strideC,
                      int batch);
    /* A linear layer's forward: C [m x n, contiguous] = op(A) op(B) + bias,
     * the vector bias [n] added to every row; alpha 1, one product, bf16
     * rounding of A and B as gemm's. The same bits as writing bias into
     * C's rows and gemm with beta 1 (the bias joins the sum of the first
     * block of k), without the pass over C first where the kernel can start
     * its sums from the bias (cpu's bf16 dot product); C's old contents are
     * never read. Arguments gemm would refuse are refused before anything
     * is written, with the slot's name in the message. */
    ds_status (*gemm_bias)(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                           const float *A, int lda, const float *B, int ldb, const float *bias,
                           float *C);

    /* ---- random numbers (counter-based Philox: same values on every backend
     * and independent of how the tensor is sharded: element i of a stream
     * (seed, offset) is a pure function of (seed, offset + i)) ---- */
    ds_status (*rng_normal)(ds_backend *be, float *dst, size_t n, float mean, float std,
                            uint64_t seed, uint64_t offset);
    ds_status (*rng_uniform)(ds_backend *be, float *dst, size_t n, float lo, float hi,
                             uint64_t seed, uint64_t offset);

    /* ---- element-wise engine kernels ---- */
    /* dst[i] = (dst_t) src[i]; F32/F16/BF16 in any combination. */
    ds_status (*cast)(ds_backend *be, void *dst, ds_dtype dst_t, const void *src, ds_dtype src_t,
                      size_t n);
    ds_status (*fill)(ds_backend *be, float *x, size_t n, float value);
    ds_status (*scale)(ds_backend *be, void *x, ds_dtype t, size_t n, float alpha);
    /* y[i] += alpha * x[i]; y and x may have different types (F32/F16/BF16),
     * accumulation in fp32. */
    ds_status (*axpy)(ds_backend *be, void *y, ds_dtype yt, float alpha, const void *x,
                      ds_dtype xt, size_t n);
    /* *out_sumsq (host) = sum x[i]^2 accumulated in double; *out_nonfinite
     * (host) = 1 if any element is inf or NaN. Synchronises. */
    ds_status (*sumsq)(ds_backend *be, const void *x, ds_dtype t, size_t n, double *out_sumsq,
                       int *out_nonfinite);
    /* One Adam/AdamW update of n fp32 master weights with moments m, v (fp32),
     * from gradients `grad` of type grad_t multiplied by grad_mult first (loss
     * scale and clipping folded in). If param_lp != NULL, the updated weights
     * are also written there in lp_t (the working copy of mixed precision). */
    ds_status (*adam)(ds_backend *be, float *param, const void *grad, ds_dtype grad_t,
                      float grad_mult, float *m, float *v, size_t n, const ds_adam_hparams *hp,
                      void *param_lp, ds_dtype lp_t);
    ds_status (*sgd)(ds_backend *be, float *param, const void *grad, ds_dtype grad_t,
                     float grad_mult, float *momentum_buf, size_t n, const ds_sgd_hparams *hp,
                     void *param_lp, ds_dtype lp_t);

    /* ---- blockwise int8 quantization (ZeRO++ qwZ, engine/backend/math.h 2b) ----
     * x (n elements of F32/F16/BF16) cut into blocks of `block` elements (the
     * last may be shorter): scales[b] = max|block b| / 127 (fp32),
     * q[i] = round(x[i] * 127 / max) in [-127, 127]. Then
     * |x - dequantized| <= scales[b] / 2 + max * 2^-21; a block holding inf or
     * NaN dequantizes to NaN. Same bits on every backend. */
    ds_status (*quantize_i8)(ds_backend *be, int8_t *q, float *scales, const void *x, ds_dtype t,
                             size_t n, size_t block);
    /* y[i] = q[i] * scales[i / block] (fp32), for i < n. */
    ds_status (*dequantize_i8)(ds_backend *be, float *y, const int8_t *q, const float *scales,
                               size_t n, size_t block);

    /* ---- blockwise int4 quantization (DeepSpeed's qgZ, engine/backend/math.h 2c) ----
     * x (n elements of F32/F16/BF16) cut into blocks of `block` elements
     * (even; the last may be shorter): scales[b] = 1 / (2^4 / (2 max|block|))
     * (fp32), q[i] = clamp(round(x[i] * 8 / max), -8, 7) packed two to a
     * byte, element 2i in the high nibble (q: (n + 1) / 2 bytes). Then
     * |x - dequantized| <= max / 8 + max * 2^-21; a block holding inf or
     * NaN dequantizes to NaN. Same bits on every backend. */
    ds_status (*quantize_i4)(ds_backend *be, uint8_t *q, float *scales, const void *x, ds_dtype t,
                             size_t n, size_t block);
    /* y[i] = nibble i of q * scales[i / block] (fp32), for i < n. */
    ds_status (*dequantize_i4)(ds_backend *be, float *y, const uint8_t *q, const float *scales,
                               size_t n, size_t block);

    /* ---- 1-bit compression and 1-bit / 0/1 Adam (engine/backend/onebit_math.h) ----
     * onebit_encode: x (n fp32 elements) into nblocks records of n / nblocks
     * elements (a multiple of 8), record b at wire + b * stride bytes (any
     * byte offset), each with the scale of the whole vector. With err (n
     * elements) non-NULL, error feedback: c = x + err is encoded and err
     * becomes c - decode(code(c)); x is not written. The sum of squares is
     * in double on both backends but in different orders, so a scale could
     * differ in its last bit where that double lies within 2^-29 of a float
     * rounding boundary; the signs and the rest are the same bits. */
    ds_status (*onebit_encode)(ds_backend *be, const float *x, float *err, size_t n, int nblocks,
                               void *wire, size_t stride);
    /* out[i] = alpha * decoded[i] for one record of n elements; with
     * accumulate, out[i] += that instead. */
    ds_status (*onebit_decode)(ds_backend *be, const void *wire, size_t n, float alpha,
                               bool accumulate, float *out);
    /* One pass of the optimizers: ds_onebit_elem for each of p->n elements. */
    ds_status (*onebit_pass)(ds_backend *be, const struct ds_onebit_pass *p);

    /* ---- row-sparse gradients (zero/grad_sparse.h, engine/backend/rows_math.h) ----
     * rows_nonzero: flags[r - r0] = 1 where row r's slice in v holds any set
     * bit, else 0, for r in [r0, r1) (flags: the backend's memory). */
    ds_status (*rows_nonzero)(ds_backend *be, const struct ds_rows_view *v, int64_t r0,
                              int64_t r1, uint8_t *flags);
    /* rows_gather: row k of dst (v->cols elements of v->t) = row idx[k] of v,
     * +0.0 outside its slice, for k < n; idx: n int32 at any byte offset
     * (the backend's memory, as dst). */
    ds_status (*rows_gather)(ds_backend *be, const struct ds_rows_view *v, const void *idx,
                             int64_t n, void *dst);
    /* rows_scatter: the inverse, row k of src into row idx[k]'s slice of v
     * (the view's elements outside the slices are left as they are); idx
     * and src as in rows_gather. A row named twice: either copy may land. (The
     * stage-1/2 word table by rows, zero/param_rows.h, unpacks the rows
     * other ranks hold with it.) */
    ds_status (*rows_scatter)(ds_backend *be, const struct ds_rows_view *v, const void *idx,
                              int64_t n, const void *src);
    /* rows_sum: each output of the plan into its slice of s->dst (its
     * arrays and recs: the backend's memory). */
    ds_status (*rows_sum)(ds_backend *be, const struct ds_rows_sum *s);

    /* ---- lifetime ---- */
    void (*destroy)(ds_backend *be);

    /* ---- device memory ----
     * OPTIONAL (NULL on cpu, whose device memory is the host's RAM, which
     * the start-up check reads from MemAvailable): the device's free and
     * total bytes now, for the check that a configuration fits
     * (ds_engine_check_fit) before the strategy allocates. */
    ds_status (*mem_info)(ds_backend *be, size_t *free_bytes, size_t *total_bytes);
} ds_backend_ops;

/* One call of the gemm slot as a tap sees it (ds_backend_tap_gemm): the
 * slot's arguments without the pointers, as given (batch 0: nothing is
 * computed). */
typedef struct ds_gemm_call {
    bool transa, transb;
    int m, n, k, lda, ldb, ldc, batch;
    int64_t strideA, strideB, strideC;
    float alpha, beta;
} ds_gemm_call;

/* Shown each call of the gemm slot before it runs, and of gemm_bias as the
 * gemm with beta 1 it equals (ldc n, batch 1). */
typedef void (*ds_gemm_tap_fn)(void *ctx, const ds_gemm_call *call);

struct ds_backend {
    const ds_backend_ops *ops;
    const ds_nn_ops *nn; /* model kernels, engine/backend/nn.h */
    ds_backend_kind kind;
    int device;      /* CUDA device ordinal; 0 on cpu */
    int num_threads; /* OpenMP threads on cpu */
    /* The working set a model should cut a row-wise sequence of passes into
     * (scores, softmax, context of attention) so that one chunk stays in a
     * core's cache; 0: pass the whole batch at once (a GPU, where more and
     * smaller launches only cost). Set by the backend. */
    size_t chunk_bytes;
    /* The precision the gemm slot rounds its A and B inputs to: DS_F32 (the
     * default: none) or DS_BF16 (mixed precision's tensor-core GEMMs, see the
     * gemm slot). One setting for every call, so a module, a user's own
     * included, gets it without asking: the engine sets it at ds_initialize
     * from zero_engine.gemm_input_dtype (on by default under bf16.enabled).
     * Change it with ds_backend_set_gemm_inputs, between calls only. */
    ds_dtype gemm_inputs;
    /* true: the cpu's bf16 dot product computes weight gradients uncut (the
     * k cut, cpu_gemm_dot.c); other bits. Only for bench_train --cut ab,
     * which times steps with and without the cut in one process. */
    bool gemm_no_cut;
    ds_mem *mem;     /* accountant (borrowed; owned by the engine or the caller) */
    void *impl;      /* implementation state */
    /* The GEMM workspace (below): gemm_ws_bytes at gemm_ws, recorded in mem
     * as DS_MEM_WORKSPACE on the device; gemm_ws_need is the most one call
     * has asked for; gemm_ws_planned: reserved by a plan, so growing it
     * later is worth a warning. Backend-owned: read, do not write. */
    void *gemm_ws;
    size_t gemm_ws_bytes, gemm_ws_need;
    bool gemm_ws_planned, gemm_ws_warned;
    /* ds_backend_tap_gemm: the table in force before the tap (NULL: no tap),
     * the copy of it whose gemm shows each call to tap(tap_ctx, ...). */
    const ds_backend_ops *untapped;
    ds_backend_ops tapped;
    ds_gemm_tap_fn tap;
    void *tap_ctx;
};

/* Options for ds_backend_create. Zero-initialise, then set what you need. */
typedef struct ds_backend_desc {
    ds_backend_kind kind;
    int device;      /* cuda: device ordinal (usually the local rank) */
    int num_threads; /* cpu: OpenMP threads; 0 = OMP_NUM_THREADS or the core count */
    ds_mem *mem;     /* accountant to record into; may be NULL (nothing recorded) */
    bool share_devices; /* cuda: device modulo the GPUs visible, so that more ranks than
                           GPUs share them (only the staged MPI data path can then
                           communicate: NCCL refuses two ranks on one GPU) */
} ds_backend_desc;

/* Create a backend. cuda is opened at run time from libzero-engine-cuda.so
 * (engine/backend/cuda_plugin.h): DS_ERR_UNSUPPORTED when there is none
 * (a CPU-only build or install), DS_ERR_BACKEND naming the CUDA error. */
ds_status ds_backend_create(const ds_backend_desc *desc, ds_backend **out);
void ds_backend_destroy(ds_backend *be);

/* From here to ds_backend_untap_gemm every call of be->ops->gemm, a user's
 * module's included, runs as before and, when it worked, is shown to
 * tap(ctx, call) (a refused call computed nothing, so counts nowhere):
 * how the flops profiler counts a step's FLOPs and bench_train records a
 * step's GEMMs (bench/gemm_replay.h). One tap at a time:
 * DS_ERR_INVALID_ARG when one is set already. Between calls only. */
ds_status ds_backend_tap_gemm(ds_backend *be, ds_gemm_tap_fn tap, void *ctx);
/* Removes the tap (nothing when there is none). */
void ds_backend_untap_gemm(ds_backend *be);

/* Set be->gemm_inputs: DS_F32 or DS_BF16, anything else is
 * DS_ERR_INVALID_ARG. With DS_BF16 the gemm slot rounds A and B into the
 * GEMM workspace (below). */
ds_status ds_backend_set_gemm_inputs(ds_backend *be, ds_dtype t);

/* ---- the GEMM workspace ----
 * With gemm_inputs DS_BF16 the gemm slot writes the rounded copies of A and
 * B into one device buffer of the backend, the workspace (cpu: packed fp32
 * copies for the fp32 kernels; cuda: packed bf16 copies for the tensor
 * cores; ds_gemm_workspace_of says how many bytes a call needs). Its size
 * is planned, not found by the first step: every module declares the GEMMs
 * it makes at B x T (ds_module_ops.plan_gemms, engine/core/module.h), the
 * engine sums them into a ds_gemm_plan (the largest need) at ds_initialize
 * and reserves that (ds_backend_reserve_gemm_workspace), recorded in be->mem
 * as DS_MEM_WORKSPACE on the device, where the memory report and the
 * estimator (zero/estimate.h) show it. A step then allocates nothing.
 *
 * A call larger than the workspace (a module that declares no GEMMs, a
 * backend used without the engine) grows it: freed and allocated again at
 * the new size, still recorded, and, when a plan had reserved it, with one
 * warning on stderr saying by how much and why. The plan counts every
 * declared GEMM; the cpu backend's own small-product kernel rounds as it
 * copies and needs none (cpu_gemm_bf16.c; on a CPU with the bf16 dot
 * product those calls take the dot product's few packs instead), so there
 * the plan can exceed
 * what the calls ask for: when such a call is the largest, as attention's
 * per-head products are once the sequence is longer than about the
 * feed-forward width plus the hidden size (T > I + H - head width; not at
 * BERT-mini's or GPT-2's shapes, where a layer's linear products are the
 * largest and the plan is exact). Freed with the backend. One thread at a
 * time (the one that runs the model). */

/* What one call of gemm(transa, transb, m, n, k, ..., strideA, ..., strideB,
 * ..., batch) with bf16 inputs needs on a backend of kind `kind`: the layout
 * of its two packed copies (engine/backend/math.h, ds_gemm_ws_of). */
ds_gemm_ws ds_gemm_workspace_of(ds_backend_kind kind, bool transa, bool transb, int m, int n,
                                int k, int64_t strideA, int64_t strideB, int batch);

/* The largest workspace of a list of GEMMs: start with {.kind = the
 * backend's kind}, add every GEMM (ds_gemm_plan_add), read bytes. */
typedef struct ds_gemm_plan {
    ds_backend_kind kind;
    size_t bytes; /* the largest ds_gemm_workspace_of(...).bytes added */
    int gemms;    /* how many were added */
} ds_gemm_plan;

/* Add one GEMM, with the arguments of the gemm slot that decide its
 * workspace (the pointers, leading dimensions, alpha, beta and C do not). */
void ds_gemm_plan_add(ds_gemm_plan *p, bool transa, bool transb, int m, int n, int k,
                      int64_t strideA, int64_t strideB, int batch);

/* Make the workspace at least `bytes` (recorded as DS_MEM_WORKSPACE on the
 * device). `complete`: the plan covers every GEMM (every module declared
 * its own), so growing it later is worth a warning; a plan with a module
 * that declares none (plan_gemms is optional) grows quietly. Never shrinks
 * it. Errors: DS_ERR_OOM or the backend's allocation error. */
ds_status ds_backend_reserve_gemm_workspace(ds_backend *be, size_t bytes, bool complete);

/* For the implementations' gemm slots: *out = the workspace, grown first
 * when it is smaller than w->bytes (see above). Valid until the next call. */
ds_status ds_backend_gemm_workspace(ds_backend *be, const ds_gemm_ws *w, void **out);

/* From now on, the calling thread's calls into a cpu backend run their
 * loops (and OpenBLAS) on one thread instead of be->num_threads. For a
 * thread that works beside the model's, such as the communication worker
 * (engine/comm/comm_worker.c): a second OpenMP team there would put more
 * threads than cores on the machine, and libgomp then lets its waiting
 * threads sleep at every barrier instead of spinning (measured: stage 2 with
 * overlap_comm at 1 rank x 2 threads, 30% slower, 14x the context switches).
 * The results are the same: every kernel such a thread calls gives the same
 * bits for any thread count. Does nothing to the cuda backend. */
void ds_backend_thread_serial(bool on);
/* Whether ds_backend_thread_serial(true) holds on the calling thread. */
bool ds_backend_thread_is_serial(void);

/* Allocate `bytes` at `place` and record them as `purpose` in be->mem. */
ds_status ds_backend_alloc(ds_backend *be, ds_mem_purpose purpose, ds_mem_place place,
                           size_t bytes, void **out);
void ds_backend_free(ds_backend *be, ds_mem_purpose purpose, ds_mem_place place, void *ptr,
                     size_t bytes);

/* Implementation entry points (used by ds_backend_create). */
ds_status ds_backend_cpu_init(ds_backend *be, const ds_backend_desc *desc);
ds_status ds_backend_cuda_init(ds_backend *be, const ds_backend_desc *desc); /* CUDA module */

#ifdef __cplusplus
}
#endif
#endif /* DS_BACKEND_BACKEND_H */
