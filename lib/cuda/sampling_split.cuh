// The CUDA sampling kernels' split rows: in a small batch, where one block a row would leave
// most SMs idle (a batch of one reads its row with one SM), each row is read by a cluster of
// blocks, each block a slice of it (sampling.cu picks how many blocks). What reads the whole row
// is split:
// - the top-k filter's histogram and gather: every block counts its slice, block 0 sums the
//   counts and picks the bin, and every block gathers its tokens of that bin and above into
//   block 0's candidates, where the row then finishes as in sampling_rows.cuh;
// - top_k_mask_logits' write: every block writes its slice through block 0's cutoff;
// - a row of probabilities that min-p alone filters: the largest mass and the exact sum of each
//   slice meet in block 0, and the block whose slice holds the crossing of the cumulative sum
//   draws from it.
// A row on the workspace path (top-p without top-k, or a top-k that keeps more than
// kCandidateCapacity) or sampled greedily runs in block 0 alone.
//
// Counts and exact sums combine across blocks as they do across threads, and the candidates'
// order never shows in a result, so every result is the one-block kernel's, bit for bit.
//
// `Cluster` gives what cooperative_groups' cluster_group gives on the GPU: block_rank(),
// num_blocks(), sync(), barrier_arrive(), barrier_wait() and map_shared_rank(); the host
// emulation (tests/cuda/emulation) gives its own.
#pragma once

#include <cstdint>

#include "cuda/sampling_rows.cuh"

namespace mtk {
namespace cuda {
namespace sampling {

// The part of a row one block of its cluster reads: a whole number of 8-token pieces (at least
// 16 bytes), so that the slices of an aligned row start aligned for 16-byte loads.
struct RowSlice {
  int64_t begin, end;
  __device__ int64_t size() const { return end - begin; }
};

__device__ __forceinline__ RowSlice slice_of_row(int64_t n, unsigned rank, unsigned blocks) {
  const int64_t per_block = ((n + blocks - 1) / blocks + 7) / 8 * 8;
  const int64_t begin = int64_t(rank) * per_block < n ? int64_t(rank) * per_block : n;
  return {begin, begin + per_block < n ? begin + per_block : n};
}

template <class Format>
__device__ __forceinline__ InputRow<Format> slice_input(const InputRow<Format>& row,
                                                        RowSlice slice) {
  return {row.data + slice.begin * row.stride, row.stride};
}

// gather_top_bins over the cluster, each block reading its slice (`part`): true in every block
// once block 0's candidates hold every token of the k-th key's bin and above; false in every
// block, nothing gathered, where they would not fit.
template <class Format, class Cluster>
__device__ bool gather_top_bins_in_cluster(const Cluster& cluster, SharedState& s,
                                           const InputRow<Format>& part, RowSlice slice,
                                           uint32_t k, bool logits) {
  using Raw = typename Format::Raw;
  constexpr int kShift = 32 - kWideBits;
  const bool lead = cluster.block_rank() == 0u;
  SharedState* const lead_state = cluster.map_shared_rank(&s, 0u);
  for (int b = threadIdx.x; b < kWideBins; b += kThreads) s.wide_counts[b] = 0u;
  if (threadIdx.x == 0) s.candidate_count = 0u;
  __syncthreads();
  cluster.barrier_arrive();  // block 0's counts may take the others' once all have arrived
  for_each_element(part, slice.size(), [&](int64_t, Raw raw) {
    atomicAdd(&s.wide_counts[rank_key(value_of<Format>(raw), logits) >> kShift], 1u);
  });
  __syncthreads();
  cluster.barrier_wait();
  if (!lead) {
    for (int b = threadIdx.x; b < kWideBins; b += kThreads) {
      if (s.wide_counts[b] != 0u) atomicAdd(&lead_state->wide_counts[b], s.wide_counts[b]);
    }
  }
  cluster.sync();  // block 0 holds the row's counts
  if (lead) {
    if (threadIdx.x < 32) {
      scan_bins<kWideBins>(s, true, 0u, [&](int bin) { return s.wide_counts[bin]; },
                           [&](uint32_t total) { return total >= k; });
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      s.split_bin = s.selected_bin;
      s.split_gathered = s.selected_count_before + s.wide_counts[s.selected_bin];
    }
  }
  cluster.sync();  // block 0's bin is chosen
  const uint32_t bin = lead_state->split_bin;
  if (lead_state->split_gathered > uint32_t(kCandidateCapacity)) {
    cluster.sync();  // every block has read block 0's choice before block 0 goes on
    return false;
  }
  for_each_element(part, slice.size(), [&](int64_t i, Raw raw) {
    const float value = value_of<Format>(raw);
    if ((rank_key(value, logits) >> kShift) >= bin) {
      const uint32_t slot = atomicAdd(&lead_state->candidate_count, 1u);
      lead_state->candidate_index[slot] = uint32_t(slice.begin + i);
      lead_state->candidate_mass[slot] = value;
    }
  });
  cluster.sync();  // every candidate is in block 0
  return true;
}

// mask_logits over the cluster: block 0 finds the cutoff (from the cluster's candidates, or
// alone over the whole row where they do not fit or k exceeds them), every block writes its
// slice.
template <class Format, class Cluster>
__device__ void mask_logits_in_cluster(const Cluster& cluster, SharedState& s,
                                       const SamplingArgs& a, int64_t r,
                                       const InputRow<Format>& row, RowSlice slice) {
  using Raw = typename Format::Raw;
  const bool lead = cluster.block_rank() == 0u;
  const InputRow<Format> part = slice_input(row, slice);
  const int64_t k = a.top_k.at(r);
  TopkCutoff cut = keep_all();
  if (top_k_filters(k, a.n)) {
    const bool gathered =
        k <= kCandidateCapacity &&
        gather_top_bins_in_cluster(cluster, s, part, slice, uint32_t(k), true);
    if (lead) {
      const TopkCutoff found = gathered
                                   ? cutoff_of_candidates(s, a.n, uint32_t(k), true, false)
                                   : top_k_of_row(s, row, a.n, uint32_t(k), true, false);
      if (threadIdx.x == 0) {
        s.split_cut_key = found.key;
        s.split_cut_last_index = found.last_index;
      }
    }
    cluster.sync();  // block 0's cutoff is found
    const SharedState* const lead_state = cluster.map_shared_rank(&s, 0u);
    cut = {lead_state->split_cut_key, lead_state->split_cut_last_index};
  }
  cluster.barrier_arrive();  // this block has read block 0's cutoff
  Raw* const out = static_cast<Raw*>(a.output) + r * a.output_row_stride;
  map_row(part, slice.size(), out + slice.begin * a.output_stride, a.output_stride,
          [&](int64_t i, Raw raw) {
            return cut.keeps(key_from_f32_bits(Format::widen(raw)), slice.begin + i)
                       ? raw
                       : Raw(Format::kNegativeInfinity);
          });
  cluster.barrier_wait();  // no block leaves while another may still read its shared memory
}

// min_p_row over the cluster.
template <mtk_sampling_op kOp, class Format, class Cluster>
__device__ void min_p_row_in_cluster(const Cluster& cluster, SharedState& s,
                                     const SamplingArgs& a, int64_t r,
                                     const InputRow<Format>& row, RowSlice slice) {
  const unsigned rank = cluster.block_rank(), blocks = cluster.num_blocks();
  SharedState* const lead_state = cluster.map_shared_rank(&s, 0u);
  const InputRow<Format> part = slice_input(row, slice);
  const uint32_t slice_most = largest_mass(s, part, slice.size());
  if (threadIdx.x == 0) lead_state->split_most[rank] = slice_most;
  cluster.sync();  // every slice's largest mass is in block 0
  uint32_t most = 0u;
  for (unsigned b = 0; b < blocks; ++b) {
    most = lead_state->split_most[b] > most ? lead_state->split_most[b] : most;
  }
  const InputMasses<Format> view{part, slice.size(), min_p_least(most, a.min_p.at(r)),
                                 slice.begin};
  const ExactSum mine = view_total(s, view);
  if (threadIdx.x == 0) lead_state->split_sums[rank] = mine;
  cluster.sync();  // every slice's sum is in block 0
  ExactSum before = exact_zero(), total = exact_zero();
  for (unsigned b = 0; b < blocks; ++b) {
    if (b == rank) before = total;
    total = exact_add(total, lead_state->split_sums[b]);
  }
  cluster.barrier_arrive();  // this block has read block 0's
  if constexpr (kOp == MTK_SAMPLING_RENORM_PROBS) {
    write_renormalised(view, total, renormalised_row(a, r), a.output_stride);
  } else if (exact_is_zero(total)) {
    if (rank == 0u) write_token(a, r, 0u);  // no mass: token 0, the contract's
  } else {
    // draw's threshold for the whole row; the one slice where the cumulative sum crosses it
    // finds the token there, against the threshold less the slices before it.
    const ExactSum threshold = exact_scaled(total, clamped_uniform(a.uniforms.at(r))).floor;
    if (exact_compare(before, threshold) <= 0 &&
        exact_compare(exact_add(before, mine), threshold) > 0) {
      const ExactSum within = exact_subtract(threshold, before);
      write_token(a, r, first_exceeding(s, view, [&](ExactSum) { return within; }));
    }
  }
  cluster.barrier_wait();  // no block leaves while another may still read its shared memory
}

// One row of the sampling operation kOp over the cluster; every thread of every block of the
// cluster calls it.
template <mtk_sampling_op kOp, class Format, class Cluster>
__device__ void sampling_row_in_cluster(const Cluster& cluster, SharedState& s,
                                        const SamplingArgs& a, int64_t r) {
  const bool lead = cluster.block_rank() == 0u;
  const InputRow<Format> row = input_row<Format>(a, r);
  const RowSlice slice = slice_of_row(a.n, cluster.block_rank(), cluster.num_blocks());
  if constexpr (kOp == MTK_SAMPLING_TOP_K_MASK_LOGITS) {
    mask_logits_in_cluster(cluster, s, a, r, row, slice);
  } else {
    const RowSteps steps = steps_of_row<kOp>(a, r);
    if (steps.min_p_alone) {
      min_p_row_in_cluster<kOp>(cluster, s, a, r, row, slice);
      return;
    }
    if (!steps.greedy && steps.candidates) {
      // The zeros go first: the cluster's barriers order them before block 0's kept masses.
      if (kOp == MTK_SAMPLING_RENORM_PROBS) {
        fill_zeros(renormalised_row(a, r) + slice.begin * a.output_stride, slice.size(),
                   a.output_stride);
      }
      constexpr bool logits = kOp == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
      if (gather_top_bins_in_cluster(cluster, s, slice_input(row, slice), slice,
                                     uint32_t(steps.k), logits)) {
        if (lead) {
          cutoff_of_candidates(s, a.n, uint32_t(steps.k), logits, true);
          finish_on_candidates<kOp>(s, a, r, row, steps.reciprocal);
        }
        return;
      }
    }
    if (lead) sampling_row<kOp, Format>(s, a, r);
  }
}

}  // namespace sampling
}  // namespace cuda
}  // namespace mtk
