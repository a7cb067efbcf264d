/*
 * metaltopk: top-k selection over tensors in device memory, behind a stable C ABI.
 *
 * Semantics (identical on every backend): values ranked by value; NaN (any sign or payload)
 * ranks above +inf and all NaNs are equal; -0.0 == +0.0; ties go to the lower index, both in
 * which elements are selected and in output order. A sorted result equals the first k entries of
 * a stable sort along `dim` (descending when `largest`, ascending otherwise). `sorted = 0`
 * selects the same indices in an unspecified but deterministic order. Values are bit-exact copies.
 *
 * Ownership: the library never takes ownership of caller memory. Memory it allocates for the
 * caller (mtk_malloc, mtk_topk_alloc) is released with mtk_free / mtk_tensor_free on the same
 * context. On any failure a call writes nothing to its outputs and frees all it allocated.
 *
 * Errors: every function returns an mtk_status. On failure, mtk_last_error_message() returns a
 * thread-local message naming the bad argument and its value, valid until the thread's next call.
 *
 * Threads: a context may be used from many threads at once; its caches are internally locked.
 * Distinct contexts share nothing. mtk_context_destroy and mtk_context_set_num_threads must not
 * race with other calls on the same context.
 *
 * Parameter structs grow by version. Every parameter struct (mtk_router_params, and those
 * that come later) begins with `size_t struct_size`, which the caller sets to the sizeof of the
 * struct its header declares: initialise it with the struct's MTK_..._INIT macro, which sets
 * struct_size and every member's default, then assign the members you need. New members are
 * only ever appended, so the library reads each struct as follows:
 *  - struct_size smaller than this library's struct (a caller built against an older header):
 *    accepted; every member past struct_size takes the default its struct documents.
 *  - struct_size larger (a newer header): accepted when every byte past the struct this library
 *    knows is zero, since a member added later means, when zero, what libraries without it do;
 *    rejected with MTK_ERROR_INVALID_ARGUMENT otherwise.
 *  - rejected with MTK_ERROR_INVALID_ARGUMENT before any other member is read: struct_size 0
 *    (a caller that never set it), too small to hold the members without a default (each
 *    struct names them), not a multiple of the struct's alignment (8 on 64-bit platforms, so
 *    that no member is cut), or above 1024.
 * The error messages name the struct, the size given and the size this library knows.
 *
 * Streams: GPU calls are stream-ordered and asynchronous. `stream` is the backend's queue
 * handle: a cudaStream_t for CUDA (NULL = the legacy default stream); for Metal and MPSGraph an
 * id<MTLCommandBuffer> to encode into (the caller commits it), or NULL to use the context's own
 * queue (committed, not waited for). CPU calls ignore `stream` and complete before returning.
 * Call mtk_synchronize before reading results on the host.
 */
#ifndef METALTOPK_H
#define METALTOPK_H

#include <stddef.h>
#include <stdint.h>

#define MTK_VERSION_MAJOR 0
#define MTK_VERSION_MINOR 3
#define MTK_VERSION_PATCH 0
#define MTK_VERSION (MTK_VERSION_MAJOR * 10000 + MTK_VERSION_MINOR * 100 + MTK_VERSION_PATCH)

/* The largest tensor rank a descriptor can carry. */
#define MTK_MAX_NDIM 8

#if defined(_WIN32)
#define MTK_API __declspec(dllexport)
#else
#define MTK_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mtk_status {
  MTK_SUCCESS = 0,
  MTK_ERROR_INVALID_ARGUMENT = 1, /* k out of range, malformed descriptor, bad output (ValueError) */
  MTK_ERROR_INVALID_DIM = 2,      /* dim outside [-ndim, ndim-1] (IndexError) */
  MTK_ERROR_UNSUPPORTED_DTYPE = 3, /* dtype unknown or not supported by the backend (TypeError) */
  MTK_ERROR_OUT_OF_MEMORY = 4,    /* host or device allocation failed (MemoryError) */
  MTK_ERROR_BACKEND_UNAVAILABLE = 5, /* backend not compiled in, or no device (RuntimeError) */
  MTK_ERROR_DEVICE = 6,           /* device or driver failure (RuntimeError) */
  MTK_ERROR_INVALID_CONTEXT = 7,  /* NULL, destroyed or foreign context handle (ValueError) */
  MTK_ERROR_INTERNAL = 8          /* a bug in metaltopk; please report it (RuntimeError) */
} mtk_status;

typedef enum mtk_dtype {
  MTK_FLOAT32 = 0,
  MTK_FLOAT16 = 1,
  MTK_BFLOAT16 = 2,
  MTK_FLOAT64 = 3, /* not on Metal or MPSGraph: rejected with MTK_ERROR_UNSUPPORTED_DTYPE */
  MTK_INT8 = 4,
  MTK_UINT8 = 5,
  MTK_INT16 = 6,
  MTK_INT32 = 7,
  MTK_INT64 = 8
} mtk_dtype;

typedef enum mtk_backend {
  MTK_BACKEND_DEFAULT = 0, /* the best available: CUDA, then Metal, then CPU */
  MTK_BACKEND_CPU = 1,
  MTK_BACKEND_CUDA = 2,
  MTK_BACKEND_METAL = 3,
  MTK_BACKEND_MPSGRAPH = 4
} mtk_backend;

/*
 * A strided view of memory the caller owns. `data` is a device pointer of the context's backend
 * (a host pointer for CPU; a shared MTLBuffer's contents address, or an address inside it, for
 * Metal). Strides count elements, not bytes; inputs may have negative or zero strides. Sizes and
 * strides past `ndim` are ignored. A 0-d tensor has ndim 0 and one element.
 */
typedef struct mtk_tensor {
  void* data;
  mtk_dtype dtype;
  int32_t ndim;
  int64_t sizes[MTK_MAX_NDIM];
  int64_t strides[MTK_MAX_NDIM];
} mtk_tensor;

/* An opaque per-backend, per-device context: plan/pipeline cache, scratch memory, device state. */
typedef struct mtk_context_s* mtk_context;

typedef struct mtk_cache_stats {
  uint64_t hits;          /* lookups served from the plan/pipeline cache */
  uint64_t misses;        /* lookups that built a new entry */
  uint64_t entries;       /* entries held now */
  uint64_t scratch_bytes; /* scratch memory held by the context now */
} mtk_cache_stats;

/* ---- Library ---------------------------------------------------------------------------- */

/* The runtime version, MTK_VERSION's encoding; compare with MTK_VERSION to detect a mismatch. */
MTK_API int mtk_version(void);
/* A static description of a status code; never NULL. */
MTK_API const char* mtk_status_string(mtk_status status);
/* The message of this thread's last failed call ("" if none); owned by the library. */
MTK_API const char* mtk_last_error_message(void);

/* Whether `backend` is compiled into this library, and whether it can run now (a device and
 * driver are present). Either output pointer may be NULL. */
MTK_API mtk_status mtk_backend_query(mtk_backend backend, int* compiled, int* available);
/* A short name ("cpu", "cuda", "metal", "mpsgraph", "default"); NULL for unknown values. */
MTK_API const char* mtk_backend_name(mtk_backend backend);

/* ---- Contexts --------------------------------------------------------------------------- */

/* Creates a context for `backend` on device `device_index` (0 for CPU). MTK_BACKEND_DEFAULT
 * resolves to the best available backend; mtk_context_backend tells which. */
MTK_API mtk_status mtk_context_create(mtk_backend backend, int device_index, mtk_context* out);
/* Destroys the context and everything it owns. NULL is accepted and ignored. */
MTK_API mtk_status mtk_context_destroy(mtk_context ctx);
MTK_API mtk_status mtk_context_backend(mtk_context ctx, mtk_backend* out);
MTK_API mtk_status mtk_context_cache_stats(mtk_context ctx, mtk_cache_stats* out);
/* CPU only: worker threads for later calls (0 = one per hardware thread, the default). A CPU
 * workspace size depends on it: query mtk_topk_workspace_size again after changing it. */
MTK_API mtk_status mtk_context_set_num_threads(mtk_context ctx, int num_threads);

/* ---- Device memory ---------------------------------------------------------------------- */

typedef enum mtk_copy_kind {
  MTK_COPY_HOST_TO_DEVICE = 0,
  MTK_COPY_DEVICE_TO_HOST = 1,
  MTK_COPY_DEVICE_TO_DEVICE = 2
} mtk_copy_kind;

/* Allocates `bytes` of device memory (bytes == 0 gives NULL and succeeds). */
MTK_API mtk_status mtk_malloc(mtk_context ctx, size_t bytes, void** out);
/* Frees memory from mtk_malloc or mtk_topk_alloc of the same context. NULL is ignored. */
MTK_API mtk_status mtk_free(mtk_context ctx, void* ptr);
/* Copies in stream order; host-side buffers must stay valid until the stream is synchronized. */
MTK_API mtk_status mtk_memcpy(mtk_context ctx, void* dst, const void* src, size_t bytes,
                              mtk_copy_kind kind, void* stream);
/* Waits until all work queued on `stream` (NULL: the context's default queue) has finished. */
MTK_API mtk_status mtk_synchronize(mtk_context ctx, void* stream);

/*
 * Memory another runtime allocated (Metal and MPSGraph; the other backends use any device
 * pointer as it is and refuse with MTK_ERROR_BACKEND_UNAVAILABLE). `buffer` is an id<MTLBuffer>
 * on the context's device with shared storage (MTLStorageModeShared), such as a tensor of
 * ExecuTorch's Metal runtime. From this call until mtk_unregister_buffer, every address in
 * [contents, contents + length) is a device pointer of the context, as if mtk_malloc had made
 * it; the context retains the buffer meanwhile. *data_out receives the contents address.
 * Registering the same buffer again nests (each registration is ended by one unregister); a
 * buffer that overlaps other memory the context knows is refused.
 */
MTK_API mtk_status mtk_register_buffer(mtk_context ctx, void* buffer, void** data_out);
/* Ends one registration of the buffer whose contents address is `data`. Work already encoded
 * keeps using the buffer (command buffers retain what they use). */
MTK_API mtk_status mtk_unregister_buffer(mtk_context ctx, void* data);

/* ---- Top-k ------------------------------------------------------------------------------ */

/*
 * Writes the top `k` of `input` along `dim` (negative counts from the end) into caller-provided
 * `values` (input's dtype) and `indices` (MTK_INT64, or MTK_INT32 for rows shorter than 2^31).
 * Both outputs have the input's shape with size k at `dim`, any strides, and must not overlap
 * the input or each other. `largest` = 0 selects the smallest; `sorted` = 0 allows any order.
 * `values` may be NULL: indices only (on the CPU backend for now; the others refuse with
 * MTK_ERROR_BACKEND_UNAVAILABLE). Scratch memory comes from the context.
 */
MTK_API mtk_status mtk_topk(mtk_context ctx, const mtk_tensor* input, int64_t k, int64_t dim,
                            int largest, int sorted, const mtk_tensor* values,
                            const mtk_tensor* indices, void* stream);

/* Scratch bytes mtk_topk_with_workspace needs for this problem (0 if none). */
MTK_API mtk_status mtk_topk_workspace_size(mtk_context ctx, const mtk_tensor* input, int64_t k,
                                           int64_t dim, int largest, int sorted,
                                           mtk_dtype index_dtype, size_t* bytes);
/* mtk_topk with caller-provided device scratch of at least mtk_topk_workspace_size bytes, which
 * must stay untouched until the stream has run the call: never allocates. */
MTK_API mtk_status mtk_topk_with_workspace(mtk_context ctx, const mtk_tensor* input, int64_t k,
                                           int64_t dim, int largest, int sorted,
                                           const mtk_tensor* values, const mtk_tensor* indices,
                                           void* workspace, size_t workspace_bytes, void* stream);

/*
 * mtk_topk into freshly allocated contiguous outputs, as a runtime shim that must return new
 * tensors does. On success the caller owns values_out->data and indices_out->data and releases
 * them with mtk_tensor_free. On failure both outputs' data are NULL and nothing leaks.
 */
MTK_API mtk_status mtk_topk_alloc(mtk_context ctx, const mtk_tensor* input, int64_t k,
                                  int64_t dim, int largest, int sorted, mtk_dtype index_dtype,
                                  mtk_tensor* values_out, mtk_tensor* indices_out, void* stream);
/* Frees a tensor's data allocated by this context and sets it to NULL. NULL data is ignored. */
MTK_API mtk_status mtk_tensor_free(mtk_context ctx, mtk_tensor* tensor);

/* ---- Ragged top-k (sparse attention) ---------------------------------------------------- */

/* What mtk_topk_ragged writes as an index, given a winner at `index` of its row's window. */
typedef enum mtk_index_transform {
  MTK_INDEX_TRANSFORM_NONE = 0,      /* index itself (relative to the window start) */
  MTK_INDEX_TRANSFORM_RAGGED = 1,    /* offsets[r] + index */
  MTK_INDEX_TRANSFORM_PAGE_TABLE = 2 /* page_table[b, index / page_size] * page_size
                                        + index % page_size, b = row_to_batch[r] (or r) */
} mtk_index_transform;

/*
 * Versioned (see the opening comment); `lengths` is mandatory: a struct_size that ends before it
 * is rejected. Every tensor here is read on the device (host memory for CPU), never copied to
 * the host, so its contents may change between replays of a captured call. Integer tensors are
 * int32 or int64, any strides; [rows] means one entry per row of the input.
 */
typedef struct mtk_ragged_params {
  size_t struct_size;              /* sizeof(mtk_ragged_params) as the caller compiled it */
  const mtk_tensor* lengths;       /* [rows]: candidates of each row (below 0: none; past the
                                      row's end: the rest of the row) */
  const mtk_tensor* starts;        /* NULL (the default: every window starts at 0), or [rows]:
                                      each window's first position (below 0: 0; past n: n) */
  mtk_index_transform transform;   /* default MTK_INDEX_TRANSFORM_NONE */
  const mtk_tensor* offsets;       /* RAGGED only (else NULL): [rows] */
  const mtk_tensor* page_table;    /* PAGE_TABLE only (else NULL): [batch, pages], with
                                      pages * page_size >= n */
  int64_t page_size;               /* PAGE_TABLE only: >= 1 (default 1) */
  const mtk_tensor* row_to_batch;  /* PAGE_TABLE only: NULL (the default: b = r, batch >= rows)
                                      or [rows]; a row whose entry is outside [0, batch) has no
                                      candidates */
} mtk_ragged_params;

/* The size and every default, member by member; set lengths before the call:
 *   mtk_ragged_params params = MTK_RAGGED_PARAMS_INIT;  params.lengths = &lengths; */
#define MTK_RAGGED_PARAMS_INIT {sizeof(mtk_ragged_params), 0, 0, MTK_INDEX_TRANSFORM_NONE, 0, 0, 1, 0}

/*
 * Top-k over rows of per-row length (the sparse-attention indexer's selection). `input` is
 * [rows, n], any strides (any of mtk_topk's dtypes); row r selects among the positions
 * [start, start + length) of its row, start = starts[r] and length = lengths[r] clipped to the
 * row as params describes, by mtk_topk's rules (NaN above +inf, ties to the lower index,
 * bit-exact values, `sorted` = 0 the same set). Any k >= 0 is accepted, also k > n.
 * `indices` [rows, k] (MTK_INT32 or MTK_INT64, n < 2^31 for int32) receives the transformed
 * window-relative index of each winner, computed in 64-bit two's complement and stored in the
 * indices' dtype (int32 keeps the low 32 bits). A row with fewer than k candidates writes its
 * winners first (also when `sorted` = 0), then index -1 at the remaining positions, whose values
 * are all-zero bits. `values` [rows, k] (input's dtype) may be NULL: indices only. Outputs may be
 * strided and must not overlap the input, each other or any tensor of params.
 * Ragged rows run on the CPU, CUDA and Metal backends; MPSGraph refuses with
 * MTK_ERROR_BACKEND_UNAVAILABLE and a message naming it.
 */
MTK_API mtk_status mtk_topk_ragged(mtk_context ctx, const mtk_tensor* input, int64_t k,
                                   int largest, int sorted, const mtk_ragged_params* params,
                                   const mtk_tensor* values, const mtk_tensor* indices,
                                   void* stream);

/* Scratch bytes mtk_topk_ragged_with_workspace needs (0 if none), whatever the lengths and
 * starts hold when it runs: the tensors of params are checked but their contents not read. */
MTK_API mtk_status mtk_topk_ragged_workspace_size(mtk_context ctx, const mtk_tensor* input,
                                                  int64_t k, int largest, int sorted,
                                                  const mtk_ragged_params* params,
                                                  mtk_dtype index_dtype, size_t* bytes);

/* mtk_topk_ragged with caller-provided device scratch of at least
 * mtk_topk_ragged_workspace_size bytes, untouched until the stream has run the call: never
 * allocates. */
MTK_API mtk_status mtk_topk_ragged_with_workspace(mtk_context ctx, const mtk_tensor* input,
                                                  int64_t k, int largest, int sorted,
                                                  const mtk_ragged_params* params,
                                                  const mtk_tensor* values,
                                                  const mtk_tensor* indices, void* workspace,
                                                  size_t workspace_bytes, void* stream);

/* ---- Sampling filters and sampling (LLM decoding) ----------------------------------------- */

/*
 * The filters and the sampler of an LLM decoder, exact and batch-invariant: for the same row the
 * result is bit for bit the same on every backend, for any batch size and any position of the
 * row in the batch. The semantics, and why they are exact, are in docs/CONTRACT.md ("Sampling
 * filters"). In short: `logits` and `probs` are [rows, n] with n < 2^31, any strides; a row's
 * probabilities are read as non-negative masses (NaN and values <= 0 count as 0); every sum is
 * exact (a fixed-point accumulator), and the filters apply in the order top-k, top-p, min-p.
 *
 * Versioned (see the opening comment); no member is mandatory, and params may be NULL (no
 * filter, temperature 1). Each per-row value is a scalar, or a [rows] tensor that overrides it
 * and is read on the device (never copied to the host, so a captured call may replay with new
 * contents). A disabled filter keeps the whole row (vLLM's conventions): top_k <= 0 or >= n,
 * top_p >= 1 or NaN, min_p <= 0 or NaN.
 */
typedef struct mtk_sampling_params {
  size_t struct_size;           /* sizeof(mtk_sampling_params) as the caller compiled it */
  const mtk_tensor* top_k;      /* NULL (the default: top_k_value), or [rows] int32 or int64 */
  int64_t top_k_value;          /* tokens kept by the top-k filter (default 0: no filter) */
  const mtk_tensor* top_p;      /* NULL (the default), or [rows] float32 */
  float top_p_value;            /* top-p filter (default 1: no filter) */
  const mtk_tensor* min_p;      /* NULL (the default), or [rows] float32 */
  float min_p_value;            /* min-p filter (default 0: no filter) */
  const mtk_tensor* temperature; /* NULL (the default), or [rows] float32; logits only */
  float temperature_value;      /* logits are multiplied by 1 / temperature (default 1);
                                   <= 0 or NaN: greedy, the row's top-1 */
} mtk_sampling_params;

/* The size and every default, member by member:
 *   mtk_sampling_params params = MTK_SAMPLING_PARAMS_INIT;  params.top_p_value = 0.9f; */
#define MTK_SAMPLING_PARAMS_INIT {sizeof(mtk_sampling_params), 0, 0, 0, 1.0f, 0, 0.0f, 0, 1.0f}

/* The operations, for mtk_sampling_workspace_size and mtk_sampling_with_workspace. */
typedef enum mtk_sampling_op {
  MTK_SAMPLING_TOP_K_MASK_LOGITS = 0,  /* mtk_top_k_mask_logits */
  MTK_SAMPLING_RENORM_PROBS = 1,       /* mtk_renorm_probs */
  MTK_SAMPLING_SAMPLE = 2,             /* mtk_sample */
  MTK_SAMPLING_SAMPLE_FROM_LOGITS = 3  /* mtk_sample_from_logits */
} mtk_sampling_op;

/* `out` [rows, n] (logits' dtype: float32, float16 or bfloat16) receives the logits of each
 * row's top-k tokens bit for bit (mtk_topk's order: NaN above +inf, ties to the lower index,
 * exactly k kept) and -inf elsewhere. Only params' top_k is read; setting another filter or a
 * temperature is an error. */
MTK_API mtk_status mtk_top_k_mask_logits(mtk_context ctx, const mtk_tensor* logits,
                                         const mtk_sampling_params* params, const mtk_tensor* out,
                                         void* stream);

/* `out` [rows, n] float32 receives each row's float32 probabilities filtered by params' top_k,
 * top_p and min_p (in that order): the kept masses divided by their sum, 0 elsewhere (a row
 * without mass: all 0). A temperature is an error. */
MTK_API mtk_status mtk_renorm_probs(mtk_context ctx, const mtk_tensor* probs,
                                    const mtk_sampling_params* params, const mtk_tensor* out,
                                    void* stream);

/* `samples` [rows] (int32 or int64) receives one token per row of `probs` (float32): the first
 * index, in vocabulary order, whose cumulative filtered mass exceeds uniforms[r] times the row's
 * filtered total. `uniforms` [rows] float32 is drawn by the caller (below 0 or NaN counts as 0,
 * 1 and above as the largest float below 1). A temperature is an error. */
MTK_API mtk_status mtk_sample(mtk_context ctx, const mtk_tensor* probs,
                              const mtk_sampling_params* params, const mtk_tensor* uniforms,
                              const mtk_tensor* samples, void* stream);

/* mtk_sample on the softmax of `logits` (float32, float16 or bfloat16) at params' temperature;
 * the top-k filter keeps mtk_top_k_mask_logits's tokens. */
MTK_API mtk_status mtk_sample_from_logits(mtk_context ctx, const mtk_tensor* logits,
                                          const mtk_sampling_params* params,
                                          const mtk_tensor* uniforms, const mtk_tensor* samples,
                                          void* stream);

/* Scratch bytes mtk_sampling_with_workspace needs for `op` on `input` (0 if none), whatever the
 * params' tensors hold when it runs; `output_dtype` is the output's (samples: int32 or int64). */
MTK_API mtk_status mtk_sampling_workspace_size(mtk_context ctx, mtk_sampling_op op,
                                               const mtk_tensor* input,
                                               const mtk_sampling_params* params,
                                               mtk_dtype output_dtype, size_t* bytes);

/* One of the four operations with caller-provided device scratch of at least
 * mtk_sampling_workspace_size bytes, untouched until the stream has run the call: never
 * allocates. `uniforms` is NULL for the two filters; `output` is their `out` or the samples. */
MTK_API mtk_status mtk_sampling_with_workspace(mtk_context ctx, mtk_sampling_op op,
                                               const mtk_tensor* input,
                                               const mtk_sampling_params* params,
                                               const mtk_tensor* uniforms,
                                               const mtk_tensor* output, void* workspace,
                                               size_t workspace_bytes, void* stream);

/* ---- Fused MoE router ------------------------------------------------------------------- */

typedef enum mtk_scoring {
  MTK_SCORING_SOFTMAX = 0, /* softmax over the E experts of a token, in float32 */
  MTK_SCORING_SIGMOID = 1, /* sigmoid of each logit */
  MTK_SCORING_NONE = 2     /* the logits themselves */
} mtk_scoring;

/* Versioned (see the opening comment). k is mandatory: a struct_size below 16 bytes, the end
 * of k, is rejected. The other members default to their MTK_ROUTER_PARAMS_INIT values. */
typedef struct mtk_router_params {
  size_t struct_size;          /* sizeof(mtk_router_params) as the caller compiled it */
  int64_t k;                   /* experts per token, 1 <= k <= E */
  mtk_scoring scoring;         /* default MTK_SCORING_SOFTMAX */
  const mtk_tensor* bias;      /* NULL (the default), or [E] float32 added for selection only */
  int64_t n_group;             /* 0 (the default) or 1: no grouping; else E % n_group == 0 */
  int64_t topk_group;          /* groups kept (by the sum of their top-2 scores) when grouped */
  int renormalize;             /* divide the k weights by their sum (default 0: no) */
  float scale;                 /* multiplies the final weights (default 1) */
} mtk_router_params;

/* The size and every default, member by member; set k before the call:
 *   mtk_router_params params = MTK_ROUTER_PARAMS_INIT;  params.k = 8; */
#define MTK_ROUTER_PARAMS_INIT {sizeof(mtk_router_params), 0, MTK_SCORING_SOFTMAX, 0, 0, 0, 0, 1}

/*
 * Routes each of T tokens of `logits` [T, E] (float32, float16 or bfloat16; rows may be
 * strided) to its top-k experts: `weights` [T, k] float32 and `ids` [T, k] int32 or int64, in
 * descending score order with ties to the lower expert id. Weights are the selected scores
 * (without the bias), renormalised and scaled as asked.
 */
MTK_API mtk_status mtk_moe_route(mtk_context ctx, const mtk_tensor* logits,
                                 const mtk_router_params* params, const mtk_tensor* weights,
                                 const mtk_tensor* ids, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* METALTOPK_H */
