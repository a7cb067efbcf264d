// Host emulation of the CUDA subset the warp top-k kernels (lib/cuda/topk_warp_kernels.cuh) and
// the block kernel (block_select_kernel in lib/cuda/topk_kernels.cuh) use:
// one block at a time, each thread a ucontext fiber, warp collectives and __syncthreads as
// cooperative rendezvous. Divergent collectives (lanes of one warp in different ops), partial
// warp masks and deadlocks abort. Results only: no timing, no memory model (racecheck on the GPU
// covers that). `__shared__` expands to nothing, so only dynamic shared memory (an `extern`
// array the test defines at namespace scope) is shared between the fibers: enough for the warp
// kernels, which keep no static shared arrays; the block kernel's test redefines it as `static`.
#pragma once
#include <ucontext.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <functional>
#include <vector>

struct uint2 { uint32_t x, y; } __attribute__((aligned(8)));
struct uint4 { uint32_t x, y, z, w; } __attribute__((aligned(16)));
struct EmuDim3 { unsigned x = 0, y = 0, z = 0; };

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))

namespace emu {

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "EMU FAILURE: %s\n", what);
  std::abort();
}

using Word = unsigned __int128;

struct Fiber {
  ucontext_t context;
  EmuDim3 thread_idx;
  int lane = 0, warp = 0;
  bool done = false;
};

struct WarpRendezvous {
  int arrived = 0;
  uint64_t generation = 0;
  int op = -1;
  Word in[32];
  Word out[32];
};

struct Block {
  std::vector<Fiber> fibers;
  std::vector<WarpRendezvous> warps;
  int block_arrived = 0;
  uint64_t block_generation = 0;
  uint64_t progress = 0;
  int current = 0;
  ucontext_t scheduler;
  std::function<void()> body;
};

inline Block* block = nullptr;
inline EmuDim3 block_idx, block_dim, grid_dim{1, 1, 1};

inline Fiber& me() { return block->fibers[block->current]; }
inline void yield() { swapcontext(&me().context, &block->scheduler); }

inline void trampoline() {
  block->body();
  me().done = true;
  ++block->progress;
  swapcontext(&me().context, &block->scheduler);
}

// Runs `body` for every thread of one block.
inline void run_block(unsigned threads, const std::function<void()>& body) {
  Block b;
  b.body = body;
  b.fibers.resize(threads);
  b.warps.resize((threads + 31) / 32);
  if (threads % 32 != 0) fail("blocks of whole warps only");
  block = &b;
  block_dim.x = threads;
  for (unsigned t = 0; t < threads; ++t) {
    Fiber& f = b.fibers[t];
    f.thread_idx.x = t;
    f.lane = int(t % 32);
    f.warp = int(t / 32);
    static std::vector<std::vector<char>> stacks;
    if (stacks.size() <= t) stacks.emplace_back(64 * 1024);
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = stacks[t].data();
    f.context.uc_stack.ss_size = stacks[t].size();
    f.context.uc_link = nullptr;
    makecontext(&f.context, trampoline, 0);
  }
  for (;;) {
    bool all_done = true;
    const uint64_t before = b.progress;
    for (unsigned t = 0; t < threads; ++t) {
      if (b.fibers[t].done) continue;
      all_done = false;
      b.current = int(t);
      swapcontext(&b.scheduler, &b.fibers[t].context);
    }
    if (all_done) break;
    if (b.progress == before) fail("deadlock: every live thread waits on a collective");
  }
  block = nullptr;
}

template <class V, class Combine>
V warp_collective(int op, V value, Combine combine) {
  Fiber& f = me();
  WarpRendezvous& w = block->warps[f.warp];
  if (w.arrived == 0) {
    w.op = op;
  } else if (w.op != op) {
    fail("lanes of one warp in different collectives");
  }
  Word bits = 0;
  std::memcpy(&bits, &value, sizeof(V));
  w.in[f.lane] = bits;
  const uint64_t generation = w.generation;
  if (++w.arrived == 32) {
    combine(w);
    w.arrived = 0;
    ++w.generation;
    ++block->progress;
  } else {
    while (w.generation == generation) yield();
  }
  V result;
  std::memcpy(&result, &w.out[f.lane], sizeof(V));
  return result;
}

}  // namespace emu

#define threadIdx (emu::me().thread_idx)
#define blockIdx (emu::block_idx)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)

inline void check_full(unsigned mask) {
  if (mask != 0xffffffffu) emu::fail("partial warp mask");
}

inline uint32_t __reduce_max_sync(unsigned mask, uint32_t v) {
  check_full(mask);
  return emu::warp_collective(1, v, [](emu::WarpRendezvous& w) {
    uint32_t m = 0;
    for (int l = 0; l < 32; ++l) m = std::max(m, uint32_t(w.in[l]));
    for (int l = 0; l < 32; ++l) w.out[l] = m;
  });
}

inline uint32_t __reduce_or_sync(unsigned mask, uint32_t v) {
  check_full(mask);
  return emu::warp_collective(5, v, [](emu::WarpRendezvous& w) {
    uint32_t m = 0;
    for (int l = 0; l < 32; ++l) m |= uint32_t(w.in[l]);
    for (int l = 0; l < 32; ++l) w.out[l] = m;
  });
}

inline uint32_t __reduce_and_sync(unsigned mask, uint32_t v) {
  check_full(mask);
  return emu::warp_collective(6, v, [](emu::WarpRendezvous& w) {
    uint32_t m = ~0u;
    for (int l = 0; l < 32; ++l) m &= uint32_t(w.in[l]);
    for (int l = 0; l < 32; ++l) w.out[l] = m;
  });
}

inline int __any_sync(unsigned mask, int predicate) {
  check_full(mask);
  return emu::warp_collective(2, predicate != 0 ? 1 : 0, [](emu::WarpRendezvous& w) {
    int any = 0;
    for (int l = 0; l < 32; ++l) any |= int(w.in[l]);
    for (int l = 0; l < 32; ++l) w.out[l] = any;
  });
}

inline uint64_t __shfl_xor_sync(unsigned mask, uint64_t v, int lane_mask) {
  check_full(mask);
  static int offset;
  offset = lane_mask;
  return emu::warp_collective(3 + 100 * lane_mask, v, [](emu::WarpRendezvous& w) {
    for (int l = 0; l < 32; ++l) w.out[l] = w.in[l ^ offset];
  });
}

inline void __syncwarp(unsigned mask = 0xffffffffu) {
  check_full(mask);
  emu::warp_collective(4, 0, [](emu::WarpRendezvous& w) {
    for (int l = 0; l < 32; ++l) w.out[l] = 0;
  });
}

inline void __syncthreads() {
  emu::Block* b = emu::block;
  int live = 0;
  for (auto& f : b->fibers) live += f.done ? 0 : 1;
  const uint64_t generation = b->block_generation;
  if (++b->block_arrived == live) {
    b->block_arrived = 0;
    ++b->block_generation;
    ++b->progress;
  } else {
    while (b->block_generation == generation) emu::yield();
  }
}

inline uint32_t __shfl_up_sync(unsigned mask, uint32_t v, int delta) {
  check_full(mask);
  static int offset;
  offset = delta;
  return emu::warp_collective(7 + 100 * delta, v, [](emu::WarpRendezvous& w) {
    for (int l = 0; l < 32; ++l) w.out[l] = w.in[l >= offset ? l - offset : l];
  });
}

inline unsigned __ballot_sync(unsigned mask, int predicate) {
  check_full(mask);
  return emu::warp_collective(8, predicate != 0 ? 1u : 0u, [](emu::WarpRendezvous& w) {
    unsigned bits = 0;
    for (int l = 0; l < 32; ++l) bits |= unsigned(w.in[l]) << l;
    for (int l = 0; l < 32; ++l) w.out[l] = bits;
  });
}

inline int __popc(unsigned v) { return __builtin_popcount(v); }

// Fibers switch only inside collectives and barriers, so a read-modify-write is atomic here.
inline uint32_t atomicAdd(uint32_t* address, uint32_t value) {
  const uint32_t old = *address;
  *address = old + value;
  return old;
}

using std::max;
using std::min;

// Declared for the kernels' other paths (multi-block passes, warp appends in divergent code);
// the emulated kernels never call them.
inline uint32_t __shfl_sync(unsigned, uint32_t, int) { emu::fail("__shfl_sync"); }
inline unsigned __activemask() { emu::fail("__activemask"); }
inline int __ffs(unsigned) { emu::fail("__ffs"); }
inline void __threadfence() { emu::fail("__threadfence"); }
inline uint4 __ldg(const uint4*) { emu::fail("__ldg"); }
