// The CUDA sampling kernels' split rows: in a small batch, where one block a row would leave
// most SMs idle (a batch of one reads its row with one SM), each row is read by a cluster of
// blocks, each block a slice of it (sampling.cu picks how many blocks). What reads the whole row
// is split:
// - the top-k filter's candidates (sampling_rows.cuh, gather_top_candidates, over ClusterGroup):
//   every block gathers its tokens at or above a guessed key (each block samples the whole row
//   and guesses alike), or counts its slice for the histogram, block 0 summing the counts and
//   picking the bin, into block 0's candidates, where the row then finishes as in
//   sampling_rows.cuh;
// - top_k_mask_logits' write: every block writes its slice in its gathering read, block 0 then
//   masking the candidates its cutoff drops; where they do not fit, through block 0's cutoff;
// - a row that no top-k filters: every block reads its slice's masses (probabilities from the
//   input; logits' masses computed into the workspace), the exponent bins, totals and largest
//   mass meet in block 0, top-p's cut is searched by the cluster (ClusterGroup: each pass's bins
//   summed in block 0), min-p and the renormalisation go by slices, and the block whose slice
//   holds the crossing of the cumulative sum draws from it.
// A row whose top-k filter keeps more than kCandidateCapacity tokens, or sampled greedily, runs
// in block 0 alone.
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

__device__ __forceinline__ RowSlice slice_of_row(int64_t n, unsigned rank, unsigned blocks) {
  const int64_t per_block = ((n + blocks - 1) / blocks + 7) / 8 * 8;
  const int64_t begin = int64_t(rank) * per_block < n ? int64_t(rank) * per_block : n;
  return {begin, begin + per_block < n ? begin + per_block : n};
}

// Adds `value` to a 64-bit sum in (another block's) shared memory: two 32-bit atomics, the
// carry of the low word going into the high one, exact once every add is done.
__device__ __forceinline__ void add_to_shared_sum64(unsigned long long* sum,
                                                    unsigned long long value) {
  uint32_t* words = reinterpret_cast<uint32_t*>(sum);  // little-endian: the low word first
  const uint32_t low = uint32_t(value);
  const uint32_t before = atomicAdd(&words[0], low);
  const uint32_t high = uint32_t(value >> 32) + (before + low < before ? 1u : 0u);
  if (high != 0u) atomicAdd(&words[1], high);
}

// The exact sum of every slice before this block's, and of the row.
struct SliceSums {
  ExactSum before, total;
};

// The cluster of a row as the group that searches it (sampling_block.cuh's OneBlock), and the
// other steps that combine the blocks' slices. The split_* fields carry what the blocks
// exchange; each has a single writer per row step, and a cluster barrier between a block's last
// read of one and its next write. No block writes another's shared memory before a cluster
// barrier (that block may not have started).
template <class Cluster>
struct ClusterGroup {
  const Cluster& cluster;
  __device__ bool lead() const { return cluster.block_rank() == 0u; }
  __device__ SharedState* lead_state(SharedState& s) const {
    return cluster.map_shared_rank(&s, 0u);
  }
  __device__ unsigned blocks() const { return cluster.num_blocks(); }
  __device__ void sync() const { cluster.sync(); }
  // A barrier in two halves: what a block wrote before arrive() every block sees after wait().
  __device__ void arrive() const { cluster.barrier_arrive(); }
  __device__ void wait() const { cluster.barrier_wait(); }
  // Block 0's bins take the others' once all have cleared theirs.
  __device__ void bins_cleared() const { cluster.barrier_arrive(); }
  __device__ void sum_wide_counts(SharedState& s, bool after_bins_cleared) const {
    __syncthreads();
    if (after_bins_cleared) cluster.barrier_wait();
    if (!lead()) {
      SharedState* const l = lead_state(s);
      for (int b = threadIdx.x; b < kWideBins; b += kThreads) {
        if (s.wide_counts[b] != 0u) atomicAdd(&l->wide_counts[b], s.wide_counts[b]);
      }
    }
    cluster.sync();  // block 0 holds the row's counts
  }
  __device__ void sum_bins(SharedState& s, bool sums) const {
    __syncthreads();
    cluster.barrier_wait();
    if (!lead()) {
      SharedState* const l = lead_state(s);
      for (int b = threadIdx.x; b < kBins; b += kThreads) {
        if (s.counts[b] != 0u) atomicAdd(&l->counts[b], s.counts[b]);
        if (sums && s.sums[b] != 0u) add_to_shared_sum64(&l->sums[b], s.sums[b]);
      }
    }
    cluster.sync();  // block 0's bins are the row's
  }
  // compute() in every thread of block 0, its result in every thread of the cluster.
  template <class Compute>
  __device__ auto broadcast(SharedState& s, Compute compute) const {
    using Value = decltype(compute());
    static_assert(sizeof(Value) <= sizeof(s.split_choice), "split_choice holds the value");
    if (lead()) {
      const Value v = compute();
      if (threadIdx.x == 0) memcpy(s.split_choice, &v, sizeof(Value));
    }
    cluster.sync();
    Value v;
    memcpy(&v, lead_state(s)->split_choice, sizeof(Value));
    return v;
  }
  template <class Scan, class Read>
  __device__ auto decide(SharedState& s, Scan scan, Read read) const {
    return broadcast(s, [&] {
      if (threadIdx.x < 32) scan();
      __syncthreads();
      return read(s);
    });
  }
  // The largest of the blocks' `word`s (one per block), in every block; `slot` picks one of
  // each block's two words. Each block writes its own and reads the others' after the barrier:
  // another block's shared memory may be written only once it is known to have started.
  __device__ unsigned long long largest(SharedState& s, int slot, unsigned long long word) const {
    if (threadIdx.x == 0) s.split_words[slot] = word;
    cluster.sync();
    unsigned long long most = 0u;
    for (unsigned b = 0; b < cluster.num_blocks(); ++b) {
      const unsigned long long other = cluster.map_shared_rank(&s, b)->split_words[slot];
      most = other > most ? other : most;
    }
    return most;
  }
  // The blocks' exact sums `mine` combined; `slot` as for largest().
  __device__ SliceSums sum_slices(SharedState& s, int slot, ExactSum mine) const {
    if (threadIdx.x == 0) s.split_sums[slot] = mine;
    cluster.sync();
    SliceSums sums{exact_zero(), exact_zero()};
    for (unsigned b = 0; b < cluster.num_blocks(); ++b) {
      if (b == cluster.block_rank()) sums.before = sums.total;
      sums.total = exact_add(sums.total, cluster.map_shared_rank(&s, b)->split_sums[slot]);
    }
    return sums;
  }
  // After finish_mass_totals in every block: the row's totals in every block, and block 0's
  // exponent bins the row's (for top-p's cut).
  __device__ MassTotals sum_mass_totals(SharedState& s, MassTotals mine) const {
    const MassTotals row{sum_slices(s, 0, mine.total).total, uint32_t(largest(s, 1, mine.most))};
    if (!lead()) {
      SharedState* const l = lead_state(s);
      for (int e = threadIdx.x; e < kExponentBins; e += kThreads) {
        const unsigned long long sum = s.exponent_sums[0][e];
        if (sum != 0u) add_to_shared_sum64(&l->exponent_sums[0][e], sum);
      }
    }
    cluster.sync();  // block 0's exponent bins are the row's
    return row;
  }
};

// mask_logits over the cluster: where the candidates were gathered, every block has written its
// slice as it read, and block 0 masks the candidates the cutoff drops. Else (k or the tokens tied
// with the k-th past the candidates' capacity) block 0 finds the cutoff alone over the whole row
// and every block writes its slice through it.
template <class Format, class Cluster>
__device__ void mask_logits_in_cluster(const ClusterGroup<Cluster>& g, SharedState& s,
                                       const SamplingArgs& a, int64_t r,
                                       const InputRow<Format>& row, RowSlice slice) {
  using Raw = typename Format::Raw;
  Raw* const out = static_cast<Raw*>(a.output) + r * a.output_row_stride;
  const int64_t k = a.top_k.at(r);
  TopkCutoff cut = keep_all();
  if (top_k_filters(k, a.n)) {
    MaskSlice<Format> mask{out + slice.begin * a.output_stride, a.output_stride, false};
    if (k <= kCandidateCapacity &&
        gather_top_candidates(g, s, row, slice, a.n, uint32_t(k), true, mask)) {
      // The gather's last cluster barrier ordered every block's writes before block 0's, and no
      // block reads another's shared memory after it.
      if (g.lead()) {
        mask_dropped_candidates<Format>(
            s,
            cutoff_of_candidates<CutoffSearch::kSharedBitsFirst>(s, a.n, uint32_t(k), true, false),
            out, a.output_stride);
      }
      return;
    }
    cut = g.broadcast(s, [&] {
      return top_k_of_row<CutoffSearch::kSharedBitsFirst>(s, row, a.n, uint32_t(k), true, false);
    });
  }
  g.cluster.barrier_arrive();  // this block has read block 0's cutoff
  write_mask(slice_input(row, slice), slice.size(), slice.begin,
             out + slice.begin * a.output_stride, a.output_stride, cut);
  g.cluster.barrier_wait();  // no block leaves while another may still read its shared memory
}

// The renormalised slice, or the draw: `sums` are the row's kept masses and those of the slices
// before this block's, `slice_sum` this slice's; `ranges_summed` where sum_warp_ranges found
// it (and its warps' sums are still in shared memory).
template <mtk_sampling_op kOp, class Format, class Cluster, class View>
__device__ void renormalise_or_draw_in_cluster(const ClusterGroup<Cluster>& g, SharedState& s,
                                               const SamplingArgs& a, int64_t r,
                                               const InputRow<Format>& row, const View& view,
                                               SliceSums sums, ExactSum slice_sum,
                                               bool ranges_summed) {
  g.cluster.barrier_arrive();  // this block has read block 0's
  if constexpr (kOp == MTK_SAMPLING_RENORM_PROBS) {
    write_renormalised(view, sums.total, renormalised_row(a, r), a.output_stride);
  } else if (exact_is_zero(sums.total)) {  // no mass: the first token in the contract's order
    if (g.lead()) {
      write_token(a, r, kOp == MTK_SAMPLING_SAMPLE_FROM_LOGITS ? top1_logit(s, row, a.n) : 0u);
    }
  } else {
    // draw's threshold for the whole row; the one slice where the cumulative sum crosses it
    // finds the token there, against the threshold less the slices before it.
    const ExactSum threshold = exact_scaled(sums.total, clamped_uniform(a.uniforms.at(r))).floor;
    if (exact_compare(sums.before, threshold) <= 0 &&
        exact_compare(exact_add(sums.before, slice_sum), threshold) > 0) {
      const ExactSum within = exact_subtract(threshold, sums.before);
      write_token(a, r, ranges_summed
                            ? first_exceeding_in_ranges(s, view, WarpRanges(view.count()), within)
                            : first_exceeding(s, view, [&](ExactSum) { return within; }));
    }
  }
  g.cluster.barrier_wait();  // no block leaves while another may still read its shared memory
}

// end_row over slices: min-p, then the renormalised slice or the draw. `view` holds the block's
// slice, `totals` are the row's; `slice_sum` is the slice's where `slice_sum_known`.
template <mtk_sampling_op kOp, class Format, class Cluster, class View>
__device__ void end_row_in_cluster(const ClusterGroup<Cluster>& g, SharedState& s,
                                   const SamplingArgs& a, int64_t r, const InputRow<Format>& row,
                                   View& view, MassTotals totals, ExactSum slice_sum,
                                   bool slice_sum_known) {
  SliceSums sums{exact_zero(), totals.total};
  bool ranges_summed = false;
  const float min_p = a.min_p.at(r);
  if (min_p_filters(min_p)) {
    slice_sum = keep_min_p(s, view, totals.most, min_p_fraction(min_p));
    sums = g.sum_slices(s, 1, slice_sum);
  } else if (kOp != MTK_SAMPLING_RENORM_PROBS) {
    if (!slice_sum_known) {
      slice_sum = sum_warp_ranges(s, view);
      ranges_summed = true;
    }
    sums = g.sum_slices(s, 1, slice_sum);
  }
  renormalise_or_draw_in_cluster<kOp>(g, s, a, r, row, view, sums, slice_sum, ranges_summed);
}

// finish_row over slices: top-p's cut searched by the cluster, then end_row_in_cluster. `view`
// holds the block's slice, `totals` are the row's and `slice_total` the slice's.
template <mtk_sampling_op kOp, class Format, class Cluster, class View>
__device__ void finish_row_in_cluster(const ClusterGroup<Cluster>& g, SharedState& s,
                                      const SamplingArgs& a, int64_t r,
                                      const InputRow<Format>& row, View& view, MassTotals totals,
                                      ExactSum slice_total) {
  const float top_p = a.top_p.at(r);
  if (top_p_filters(top_p) && !exact_is_zero(totals.total)) {
    const ExactSum target = exact_ceil_scaled(totals.total, top_p_fraction(top_p));
    CutMasses<View> kept{&view, top_p_cut(s, view, target, a.n, g)};
    totals.total = kept.cut.kept;
    end_row_in_cluster<kOp>(g, s, a, r, row, kept, totals, exact_zero(), false);
    return;
  }
  end_row_in_cluster<kOp>(g, s, a, r, row, view, totals, slice_total, true);
}

// min_p_row over the cluster: the row's largest mass from the slices', then each slice's masses
// that min-p keeps (read back as min_p_row does), their sums combined, and the renormalised
// slices or the draw.
template <mtk_sampling_op kOp, class Format, class Cluster>
__device__ void min_p_slice_in_cluster(const ClusterGroup<Cluster>& g, SharedState& s,
                                       const SamplingArgs& a, int64_t r,
                                       const InputRow<Format>& row, RowSlice slice) {
  const InputRow<Format> part = slice_input(row, slice);
  const uint32_t slice_most =
      largest_mass_by_warp_ranges(s, input_masses(part, slice.size(), slice.begin));
  const uint32_t most = uint32_t(g.largest(s, 0, slice_most));
  const InputMasses<Format> view =
      min_p_masses(part, slice.size(), slice.begin, most, a.min_p.at(r));
  const ExactSum slice_sum = sum_warp_ranges<ReadOrder::kBackward>(s, view);
  renormalise_or_draw_in_cluster<kOp>(g, s, a, r, row, view, g.sum_slices(s, 1, slice_sum),
                                      slice_sum, true);
}

// A row of probabilities that neither top-k nor top-p filters, over the cluster, in a kernel of
// its own (sampling.cu's min_p_split_rows_kernel: the registers, spills and instruction fetches
// of the other steps stay out of its reads).
template <mtk_sampling_op kOp, class Cluster>
__device__ void min_p_row_in_cluster(const Cluster& cluster, SharedState& s,
                                     const SamplingArgs& a, int64_t r) {
  min_p_slice_in_cluster<kOp>(ClusterGroup<Cluster>{cluster}, s, a, r,
                              input_row<Float32Input>(a, r),
                              slice_of_row(a.n, cluster.block_rank(), cluster.num_blocks()));
}

// A row that no top-k filters, over the cluster. Probabilities read their masses from the input
// (min_p_row where top-p does not filter either); logits compute theirs into their slices of the
// workspace row.
template <mtk_sampling_op kOp, class Format, class Cluster>
__device__ void unfiltered_row_in_cluster(const ClusterGroup<Cluster>& g, SharedState& s,
                                          const SamplingArgs& a, int64_t r,
                                          const InputRow<Format>& row, RowSlice slice,
                                          const RowSteps& steps) {
  constexpr bool logits = kOp == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
  const InputRow<Format> part = slice_input(row, slice);
  if (steps.min_p_alone) {
    min_p_slice_in_cluster<kOp>(g, s, a, r, row, slice);
    return;
  }
  if constexpr (logits) {
    RowMasses view{a.masses + r * a.masses_row_stride + slice.begin, slice.size(), slice.begin};
    const unsigned long long most = g.largest(s, 0, largest_scaled_logit(s, part, slice.size(),
                                                                         slice.begin, keep_all(),
                                                                         steps.reciprocal));
    const MassTotals mine = row_masses(s, part, slice.size(), slice.begin, keep_all(), true,
                                       steps.reciprocal, most, view.masses);
    finish_row_in_cluster<kOp>(g, s, a, r, row, view, g.sum_mass_totals(s, mine), mine.total);
  } else {
    InputMasses<Format> view = input_masses(part, slice.size(), slice.begin);
    const MassTotals mine = view_mass_totals(s, view);
    const MassTotals totals = g.sum_mass_totals(s, mine);
    view.most = totals.most;
    finish_row_in_cluster<kOp>(g, s, a, r, row, view, totals, mine.total);
  }
}

// One row of the sampling operation kOp over the cluster; every thread of every block of the
// cluster calls it.
template <mtk_sampling_op kOp, class Format, class Cluster>
__device__ void sampling_row_in_cluster(const Cluster& cluster, SharedState& s,
                                        const SamplingArgs& a, int64_t r) {
  const ClusterGroup<Cluster> g{cluster};
  const InputRow<Format> row = input_row<Format>(a, r);
  const RowSlice slice = slice_of_row(a.n, cluster.block_rank(), cluster.num_blocks());
  if constexpr (kOp == MTK_SAMPLING_TOP_K_MASK_LOGITS) {
    mask_logits_in_cluster(g, s, a, r, row, slice);
  } else {
    const RowSteps steps = steps_of_row<kOp>(a, r);
    if (!steps.greedy && !steps.top_k) {
      unfiltered_row_in_cluster<kOp>(g, s, a, r, row, slice, steps);
      return;
    }
    if (!steps.greedy && steps.candidates) {
      // The zeros go first: the cluster's barriers order them before block 0's kept masses.
      if (kOp == MTK_SAMPLING_RENORM_PROBS) {
        fill_zeros(renormalised_row(a, r) + slice.begin * a.output_stride, slice.size(),
                   a.output_stride);
      }
      constexpr bool logits = kOp == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
      if (gather_top_candidates(g, s, row, slice, a.n, uint32_t(steps.k), logits)) {
        if (g.lead()) {
          cutoff_of_candidates(s, a.n, uint32_t(steps.k), logits, true);
          finish_on_candidates<kOp>(s, a, r, row, steps.reciprocal);
        }
        return;
      }
    }
    if (g.lead()) sampling_row<kOp, Format>(s, a, r);
  }
}

}  // namespace sampling
}  // namespace cuda
}  // namespace mtk
