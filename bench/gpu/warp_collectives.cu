// What the router's selection steps cost on one warp, in SM cycles: the choice between
// select_sorted and select_merged (lib/cuda/moe_route_select.cuh) is made from these numbers.
// Each figure is a dependent chain of 64 calls of the library's own routine on GroupLanes, timed
// by clock64 and divided by 64; the median of 5 launches is printed:
//   group_max_<rank>_lanes<L>              one group maximum (redux.sync for a whole warp, a
//                                          shuffle butterfly for narrower groups);
//   select<k>_sorted|merged_<rank>_lanes<L>  k selections from sorted 8-rank lists.
// <rank> is u32 (16-bit logits on the plain path) or u64 (everything else).
// Prints one JSON line. Exits 2 when no CUDA device is available.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/moe_route_warp.cuh"

namespace {

using namespace mtk::cuda_router;

constexpr int kItems = 8, kChain = 64, kLaunches = 5;

__device__ __forceinline__ uint32_t mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  return x;
}

// Distinct ranks (each carries its expert), sorted descending per lane as the router holds them.
template <class Rank, int kLanes>
__device__ void fill_ranks(uint32_t seed, Rank (&rank)[kItems]) {
  GroupLanes<kLanes> lanes;
  for (int i = 0; i < kItems; ++i) {
    const int expert = lanes.lane() * kItems + i;
    rank[i] = make_rank<Rank>(mix(seed + expert) | 1u, expert);
  }
  sort_descending(rank);
}

// `offset` is 0 at run time, which the compiler cannot know: each call waits for the last.
template <class Rank, int kLanes>
__global__ void time_group_max(uint32_t seed, long long* cycles, uint32_t* sink) {
  GroupLanes<kLanes> lanes;
  Rank value = make_rank<Rank>(mix(seed + threadIdx.x) | 1u, threadIdx.x);
  Rank total = 0;
  const long long start = clock64();
  for (int i = 0; i < kChain; ++i) {
    const Rank best = group_max(lanes, Rank(value + (total >> (sizeof(Rank) * 8 - 1))));
    total += best & 1u;
  }
  const long long end = clock64();
  if (threadIdx.x == 0) *cycles = (end - start) / kChain;
  sink[threadIdx.x] = uint32_t(total);
}

template <class Rank, int kLanes, bool kMerged>
__global__ void time_selection(int k, uint32_t seed, long long* cycles, uint32_t* sink) {
  GroupLanes<kLanes> lanes;
  Rank rank[kItems];
  fill_ranks<Rank, kLanes>(seed, rank);
  uint32_t total = 0;
  const long long start = clock64();
  for (int i = 0; i < kChain; ++i) {
    Rank work[kItems];
    for (int j = 0; j < kItems; ++j) work[j] = rank[j] + (total >> 31);
    uint32_t kept = 0;
    const auto keep = [&](int slot, int owner, Rank winner) {
      if (lanes.lane() == owner) kept += uint32_t(rank_index(winner)) + uint32_t(slot);
    };
    if constexpr (kMerged) {
      select_merged(lanes, k, work, keep);
    } else {
      select_sorted(lanes, k, work, keep);
    }
    total += kept;
  }
  const long long end = clock64();
  if (threadIdx.x == 0) *cycles = (end - start) / kChain;
  sink[threadIdx.x] = total;
}

bool check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return true;
  std::fprintf(stderr, "warp_collectives: %s: %s\n", what, cudaGetErrorString(status));
  return false;
}

// Median over kLaunches launches of one warp.
template <class Launch>
long long median_cycles(long long* cycles, Launch launch) {
  std::vector<long long> runs;
  for (int r = 0; r < kLaunches; ++r) {
    launch(uint32_t(r * 7919));
    long long value = -1;
    if (!check(cudaGetLastError(), "launch") ||
        !check(cudaMemcpy(&value, cycles, sizeof value, cudaMemcpyDeviceToHost), "copy")) {
      std::exit(1);
    }
    runs.push_back(value);
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "warp_collectives: no CUDA device\n");
    return 2;
  }
  long long* cycles = nullptr;
  uint32_t* sink = nullptr;
  if (!check(cudaMalloc(&cycles, sizeof *cycles), "cudaMalloc") ||
      !check(cudaMalloc(&sink, 32 * sizeof *sink), "cudaMalloc")) {
    return 1;
  }
  std::string json = "{\"warp_collectives\": true";
  auto add = [&](const std::string& name, long long value) {
    json += ", \"" + name + "\": " + std::to_string(value);
  };
  auto each_width = [&](auto rank, const char* rank_name) {
    using Rank = decltype(rank);
    auto widths = [&](auto lanes_constant) {
      constexpr int kLanes = decltype(lanes_constant)::value;
      const std::string suffix = std::string("_") + rank_name + "_lanes" + std::to_string(kLanes);
      add("group_max" + suffix, median_cycles(cycles, [&](uint32_t seed) {
            time_group_max<Rank, kLanes><<<1, 32>>>(seed, cycles, sink);
          }));
      for (int k : {2, 4, 6, 8}) {
        add("select" + std::to_string(k) + "_sorted" + suffix,
            median_cycles(cycles, [&](uint32_t seed) {
              time_selection<Rank, kLanes, false><<<1, 32>>>(k, seed, cycles, sink);
            }));
        add("select" + std::to_string(k) + "_merged" + suffix,
            median_cycles(cycles, [&](uint32_t seed) {
              time_selection<Rank, kLanes, true><<<1, 32>>>(k, seed, cycles, sink);
            }));
      }
    };
    widths(Index<8>{});
    widths(Index<16>{});
    widths(Index<32>{});
  };
  each_width(uint32_t{}, "u32");
  each_width(uint64_t{}, "u64");
  std::printf("%s}\n", json.c_str());
  cudaFree(cycles);
  cudaFree(sink);
  return 0;
}
