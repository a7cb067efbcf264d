/*
 * metaltopk's AOTInductor C shim: the functions that AOTInductor-compiled code calls for the
 * metaltopk::mtk_topk and metaltopk::mtk_moe_route torch ops, the ragged ops
 * metaltopk::mtk_topk_ragged, mtk_topk_ragged_transform and mtk_topk_page_table_transform, the
 * sampling ops metaltopk::mtk_top_k_mask_logits, mtk_renorm_probs, mtk_sample and
 * mtk_sample_from_logits (and, on macOS, the origin's aoti_torch_mps_topk), over
 * AtenTensorHandle.
 *
 * The library is written against torch's stable C shim API only, and of that only against
 * functions that ExecuTorch's AOTI backends implement as well, so it links into a libtorch
 * process or an ExecuTorch runtime alike:
 *   aoti_torch_empty_strided, aoti_torch_delete_tensor_object, aoti_torch_get_data_ptr,
 *   aoti_torch_get_dim, aoti_torch_get_sizes, aoti_torch_get_strides, aoti_torch_get_dtype,
 *   aoti_torch_get_device_type, aoti_torch_get_device_index, aoti_torch_device_type_cpu,
 *   aoti_torch_device_type_cuda, aoti_torch_dtype_{float32, bfloat16, int8, int16, int32,
 *   int64}, and for CUDA aoti_torch_get_current_cuda_stream.
 * aoti_torch_dtype_{float16, uint8, float64} are looked up at first use and used where the
 * runtime has them: ExecuTorch has no float64, its 1.2.0 no float16 or uint8, its 1.3 no
 * float16. A dtype without its getter is rejected as unsupported in that runtime.
 *
 * Every function allocates its outputs (callee-allocated, as AOTInductor expects): on success
 * *ret0 (and *ret1 where the op has two outputs) are new tensor handles the caller owns; on
 * failure they are left untouched, every tensor the call created is deleted, the message is
 * printed to stderr as torch's own shims do, and metaltopk_aoti_last_error() returns it.
 */
#ifndef METALTOPK_AOTI_H
#define METALTOPK_AOTI_H

#include <stdint.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#ifdef __cplusplus
extern "C" {
#endif

/* metaltopk::mtk_topk: torch.topk's arguments; values have self's dtype, indices are int64. */
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cpu_mtk_topk(AtenTensorHandle self, int64_t k,
                                                         int64_t dim, int32_t largest,
                                                         int32_t sorted, AtenTensorHandle* ret0,
                                                         AtenTensorHandle* ret1);

/* metaltopk::mtk_moe_route: logits [T, E] (float32, float16 or bfloat16); scoring "softmax",
 * "sigmoid" or "none"; bias NULL or a [E] float32 tensor; index_dtype a torch dtype code
 * (int32 or int64). ret0: weights [T, k] float32; ret1: ids [T, k]. */
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cpu_mtk_moe_route(
    AtenTensorHandle logits, int64_t k, const char* scoring, AtenTensorHandle* bias,
    int64_t n_group, int64_t topk_group, int32_t renormalize, double scale, int32_t index_dtype,
    AtenTensorHandle* ret0, AtenTensorHandle* ret1);

/* metaltopk::mtk_topk_ragged (docs/CONTRACT.md, "Ragged rows"): self [rows, n]; lengths and
 * starts (NULL: none) int32 or int64 [rows] on self's device. ret0: values [rows, k] of self's
 * dtype, or an empty [0] tensor when return_values is 0; ret1: indices [rows, k] int64, -1
 * padded (both [k, rows] for dim 0). */
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cpu_mtk_topk_ragged(
    AtenTensorHandle self, int64_t k, AtenTensorHandle lengths, AtenTensorHandle* starts,
    int64_t dim, int32_t largest, int32_t sorted, int32_t return_values, AtenTensorHandle* ret0,
    AtenTensorHandle* ret1);

/* metaltopk::mtk_topk_ragged_transform (FlashInfer's top_k_ragged_transform): ret0 int32
 * [rows, k], offsets[r] + index, -1 padded. */
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cpu_mtk_topk_ragged_transform(
    AtenTensorHandle scores, AtenTensorHandle offsets, AtenTensorHandle lengths, int64_t k,
    AtenTensorHandle* ret0);

/* metaltopk::mtk_topk_page_table_transform (FlashInfer's top_k_page_table_transform):
 * row_to_batch NULL or int32/int64 [rows]; ret0 int32 [rows, k], each index mapped through
 * src_page_table [batch, pages], -1 padded. */
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cpu_mtk_topk_page_table_transform(
    AtenTensorHandle scores, AtenTensorHandle src_page_table, AtenTensorHandle lengths, int64_t k,
    AtenTensorHandle* row_to_batch, int64_t page_size, AtenTensorHandle* ret0);

/* The sampling ops (docs/CONTRACT.md, "Sampling filters"; the schemas are in
 * python/metaltopk/torch/_sampling.py). Each per-row argument is a [rows] tensor on the input's
 * device (NULL: none; top_k int32 or int64, the others float32) and the scalar every row takes
 * where it is NULL. mtk_top_k_mask_logits: ret0 [rows, n] of the logits' dtype.
 * mtk_renorm_probs: probs [rows, n] float32, ret0 the same. mtk_sample and
 * mtk_sample_from_logits: uniforms [rows] float32; ret0 the [rows] tokens of index_dtype (a
 * runtime dtype code, int32 or int64). */
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cpu_mtk_top_k_mask_logits(
    AtenTensorHandle logits, AtenTensorHandle* top_k, int64_t top_k_value, AtenTensorHandle* ret0);
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cpu_mtk_renorm_probs(
    AtenTensorHandle probs, AtenTensorHandle* top_k, int64_t top_k_value, AtenTensorHandle* top_p,
    double top_p_value, AtenTensorHandle* min_p, double min_p_value, AtenTensorHandle* ret0);
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cpu_mtk_sample(
    AtenTensorHandle probs, AtenTensorHandle uniforms, AtenTensorHandle* top_k,
    int64_t top_k_value, AtenTensorHandle* top_p, double top_p_value, AtenTensorHandle* min_p,
    double min_p_value, int32_t index_dtype, AtenTensorHandle* ret0);
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cpu_mtk_sample_from_logits(
    AtenTensorHandle logits, AtenTensorHandle uniforms, AtenTensorHandle* top_k,
    int64_t top_k_value, AtenTensorHandle* top_p, double top_p_value, AtenTensorHandle* min_p,
    double min_p_value, AtenTensorHandle* temperature, double temperature_value,
    int32_t index_dtype, AtenTensorHandle* ret0);

#ifdef METALTOPK_AOTI_CUDA
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cuda_mtk_topk(AtenTensorHandle self, int64_t k,
                                                          int64_t dim, int32_t largest,
                                                          int32_t sorted, AtenTensorHandle* ret0,
                                                          AtenTensorHandle* ret1);
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cuda_mtk_moe_route(
    AtenTensorHandle logits, int64_t k, const char* scoring, AtenTensorHandle* bias,
    int64_t n_group, int64_t topk_group, int32_t renormalize, double scale, int32_t index_dtype,
    AtenTensorHandle* ret0, AtenTensorHandle* ret1);
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cuda_mtk_topk_ragged(
    AtenTensorHandle self, int64_t k, AtenTensorHandle lengths, AtenTensorHandle* starts,
    int64_t dim, int32_t largest, int32_t sorted, int32_t return_values, AtenTensorHandle* ret0,
    AtenTensorHandle* ret1);
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cuda_mtk_topk_ragged_transform(
    AtenTensorHandle scores, AtenTensorHandle offsets, AtenTensorHandle lengths, int64_t k,
    AtenTensorHandle* ret0);
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cuda_mtk_topk_page_table_transform(
    AtenTensorHandle scores, AtenTensorHandle src_page_table, AtenTensorHandle lengths, int64_t k,
    AtenTensorHandle* row_to_batch, int64_t page_size, AtenTensorHandle* ret0);
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cuda_mtk_top_k_mask_logits(
    AtenTensorHandle logits, AtenTensorHandle* top_k, int64_t top_k_value, AtenTensorHandle* ret0);
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cuda_mtk_renorm_probs(
    AtenTensorHandle probs, AtenTensorHandle* top_k, int64_t top_k_value, AtenTensorHandle* top_p,
    double top_p_value, AtenTensorHandle* min_p, double min_p_value, AtenTensorHandle* ret0);
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cuda_mtk_sample(
    AtenTensorHandle probs, AtenTensorHandle uniforms, AtenTensorHandle* top_k,
    int64_t top_k_value, AtenTensorHandle* top_p, double top_p_value, AtenTensorHandle* min_p,
    double min_p_value, int32_t index_dtype, AtenTensorHandle* ret0);
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cuda_mtk_sample_from_logits(
    AtenTensorHandle logits, AtenTensorHandle uniforms, AtenTensorHandle* top_k,
    int64_t top_k_value, AtenTensorHandle* top_p, double top_p_value, AtenTensorHandle* min_p,
    double min_p_value, AtenTensorHandle* temperature, double temperature_value,
    int32_t index_dtype, AtenTensorHandle* ret0);

#ifdef METALTOPK_AOTI_ATEN_TOPK
/* torch.topk's own C function (AOTInductor's fallback for aten.topk), for runtimes that have
 * none, ExecuTorch's CUDA backend among them: the same call as aoti_torch_cuda_mtk_topk. Only in
 * a library built without libtorch (`make aoti AOTI_RUNTIME_LIBS=`), whose own it would shadow. */
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cuda_topk(AtenTensorHandle self, int64_t k,
                                                      int64_t dim, int32_t largest,
                                                      int32_t sorted, AtenTensorHandle* ret0,
                                                      AtenTensorHandle* ret1);
#endif
#endif

#ifdef METALTOPK_AOTI_MPS
/* The origin's entry point, with its exact signature, on the Metal backend: self's data
 * pointer is the contents address of a shared MTLBuffer, as ExecuTorch's Metal backend gives
 * it. */
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_mps_topk(AtenTensorHandle self, int64_t k,
                                                     int64_t dim, int32_t largest,
                                                     int32_t sorted, AtenTensorHandle* ret0,
                                                     AtenTensorHandle* ret1);
#endif

/* This thread's last failure message of the functions above ("" if none). */
AOTI_TORCH_EXPORT const char* metaltopk_aoti_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* METALTOPK_AOTI_H */
