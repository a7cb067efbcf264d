// The CUDA top-k kernels, one file per role. Every kernel ranks elements by their composite (see
// topk_config.hpp) and selects the k largest, so dtype, direction and ties never appear below
// the load.
//
// Shape classes (the host-side plan in topk_plan.hpp picks one):
//  - warp_topk_kernel (topk_warp_kernels.cuh): a warp per short row, the MoE routing shapes.
//  - block_select_kernel (topk_block_select.cuh): a block per row, for many medium rows. Radix
//    select over 8-bit digits of the composite on the row itself, winners gathered and sorted
//    in shared memory.
//  - cluster_select_kernel (topk_cluster_kernel.cuh): a thread-block cluster per row, for a few
//    rows of up to 256k elements: the block kernel's radix select with the row's slices held in
//    the cluster's registers and each digit's histograms summed over distributed shared memory,
//    in one launch.
//  - the multi-block pipeline, for long rows and few of them: several blocks per row build an
//    11-bit histogram of the top digit (multi_histogram_kernel, topk_multi_pass.cuh), then
//    filter the row (multi_filter_kernel, topk_multi_filter.cuh): elements above the chosen
//    bucket are winners, those inside it become candidates in scratch while their next digit is
//    histogrammed; a second filter pass narrows the candidates again, and one block per row
//    resolves the last bits (finish_kernel, topk_multi_finish.cuh) and sorts (or, from a
//    sampled threshold's key-prefix bins, ranks each winner within its bin). Past the finish's
//    sort, keys up to 32 bits and k up to 4096 are ranked within those bins in dynamic shared
//    memory where the plan has them (finish_placing_kernel, topk_sort_rows.cuh), and a block
//    per row radix-sorts the bits the other rows' winners differ in (radix_sort_rows_kernel);
//    wider keys or larger k are sorted in dynamic shared memory (sort_rows_kernel), and past
//    that by CUB's segmented sort.
//    When a bucket overflows the candidate buffer (heavy ties), the next pass re-reads the
//    input instead, so scratch stays bounded and any input is handled.
//    Large inputs with k small next to the row replace the first histogram by a sampled
//    threshold (multi_sample_kernel, topk_multi_sample.cuh, split over blocks when the rows are
//    few, and multi_threshold_kernel, topk_multi_threshold.cuh): the input is read once, the
//    passes above continue on the candidates alone (or the finish takes them all at once, up to
//    16k; past that, where the key-prefix bins (topk_key_bins.cuh) leave the k-th's bucket
//    within a block, the first filter launch places the winners in their bins' ranges for the
//    finish), and a missed threshold falls back to a histogram pass (in the first filter
//    launch) and one filter pass over the input.
#pragma once

#include "cuda/topk_block_select.cuh"
#include "cuda/topk_cluster_kernel.cuh"
#include "cuda/topk_multi_filter.cuh"
#include "cuda/topk_multi_finish.cuh"
#include "cuda/topk_multi_pass.cuh"
#include "cuda/topk_multi_sample.cuh"
#include "cuda/topk_multi_threshold.cuh"
#include "cuda/topk_warp_kernels.cuh"
