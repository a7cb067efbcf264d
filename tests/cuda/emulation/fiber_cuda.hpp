// Host emulation of the CUDA subset the warp top-k kernels (lib/cuda/topk_warp_kernels.cuh), the
// block kernels (lib/cuda/topk_kernels.cuh), the cluster kernel's work
// (lib/cuda/topk_cluster_kernel.cuh) and the router's per-token routines
// (lib/cuda/moe_route_warp.cuh, through tests/router/warp_emulation.cpp) use: one block at a time
// (run_block), or the blocks of one cluster together (run_cluster), each thread a ucontext
// fiber, warp collectives, __syncthreads and the cluster barrier as cooperative rendezvous.
// Divergent collectives (lanes of one warp in different ops), partial warp masks and deadlocks
// abort. Results only: no timing, no memory model (racecheck on the GPU
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
// Inlined as on the GPU: __activemask tells call sites apart by their return address.
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))

namespace emu {

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "EMU FAILURE: %s\n", what);
  std::abort();
}

using Word = unsigned __int128;

// How a warp collective turns its members' inputs into their outputs.
using Combine = void (*)(const Word* in, Word* out, unsigned members, int param);

constexpr int kRunning = -1;  // Fiber::wait: not waiting
constexpr int kBarrier = -2;  // waiting in __syncthreads
constexpr int kClusterBarrier = -3;  // waiting in cluster_wait (run_cluster)
constexpr int kActiveMask = 0;  // the op of __activemask(), resolved last (see resolve_block)

struct Fiber {
  ucontext_t context;
  EmuDim3 thread_idx;
  int lane = 0, warp = 0;
  bool done = false;
  // The collective this thread waits in: op (or kRunning / kBarrier), its parameter and the
  // warp mask it named, its input, and its output once released.
  int wait = kRunning;
  int param = 0;
  unsigned mask = 0;
  Combine combine = nullptr;
  Word in = 0, out = 0;
  bool released = false;
  // Phases of the cluster barrier this thread has arrived at and waited for (run_cluster).
  unsigned cluster_arrivals = 0, cluster_waits = 0;
};

struct Block {
  std::vector<Fiber> fibers;
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
  swapcontext(&me().context, &block->scheduler);
}

// Called when every live thread of the block waits. Releases, in this order of preference:
// each warp collective whose named mask is exactly the lanes waiting in it with the same op and
// parameter; else each warp's __activemask() callers (the lanes that reached that point
// together while the warp's others wait elsewhere or have exited: how divergent code sees its
// active lanes); else the barrier, once every live thread is in it. False: a deadlock.
inline bool resolve_block(Block& b) {
  const int warps = int(b.fibers.size() / 32);
  auto release_groups = [&](bool active_mask_ops) {
    bool released = false;
    for (int w = 0; w < warps; ++w) {
      Fiber* lanes = &b.fibers[size_t(w) * 32];
      for (int l = 0; l < 32; ++l) {
        const Fiber& f = lanes[l];
        if (f.done || f.wait < 0 || f.released || (f.wait == kActiveMask) != active_mask_ops) {
          continue;
        }
        unsigned members = 0;
        for (int m = 0; m < 32; ++m) {
          const Fiber& g = lanes[m];
          if (!g.done && !g.released && g.wait == f.wait && g.param == f.param &&
              (active_mask_ops || g.mask == f.mask)) {
            members |= 1u << m;
          }
        }
        if (!active_mask_ops && members != f.mask) continue;  // the mask's other lanes not here
        Word in[32] = {}, out[32] = {};
        for (int m = 0; m < 32; ++m) {
          if (members >> m & 1) in[m] = lanes[m].in;
        }
        f.combine(in, out, members, f.param);
        for (int m = 0; m < 32; ++m) {
          if (members >> m & 1) {
            lanes[m].out = out[m];
            lanes[m].released = true;
          }
        }
        released = true;
      }
    }
    return released;
  };
  if (release_groups(false) || release_groups(true)) return true;
  for (const Fiber& f : b.fibers) {
    if (!f.done && f.wait != kBarrier) return false;
  }
  for (Fiber& f : b.fibers) f.released = !f.done;
  return true;
}

// Each fiber's stack; a test whose kernels keep more on a thread's stack raises it before a run.
inline size_t fiber_stack_bytes = 64 * 1024;

// Makes b's `threads` fibers, running b.body on the stacks from `first_stack` on.
inline void start_fibers(Block& b, unsigned threads, size_t first_stack) {
  static std::vector<std::vector<char>> stacks;
  if (threads % 32 != 0) fail("blocks of whole warps only");
  b.fibers.resize(threads);
  for (unsigned t = 0; t < threads; ++t) {
    Fiber& f = b.fibers[t];
    f.thread_idx.x = t;
    f.lane = int(t % 32);
    f.warp = int(t / 32);
    while (stacks.size() <= first_stack + t) stacks.emplace_back(fiber_stack_bytes);
    if (stacks[first_stack + t].size() < fiber_stack_bytes) stacks[first_stack + t].resize(fiber_stack_bytes);
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = stacks[first_stack + t].data();
    f.context.uc_stack.ss_size = stacks[first_stack + t].size();
    f.context.uc_link = nullptr;
    makecontext(&f.context, trampoline, 0);
  }
}

// Runs every fiber of b that can move until it waits or exits; false when none could.
inline bool run_fibers(Block& b) {
  bool moved = false;
  for (size_t t = 0; t < b.fibers.size(); ++t) {
    Fiber& f = b.fibers[t];
    if (f.done || (f.wait != kRunning && !f.released)) continue;
    b.current = int(t);
    swapcontext(&b.scheduler, &f.context);
    moved = true;
  }
  return moved;
}

inline bool all_done(const Block& b) {
  return std::all_of(b.fibers.begin(), b.fibers.end(), [](const Fiber& f) { return f.done; });
}

// The block of run_cluster's cluster that runs now (its rank), and the cluster's size.
inline unsigned cluster_rank = 0, cluster_blocks = 1;

// Runs `body` for every thread of `blocks` blocks of `threads` that run together, as a thread
// block cluster's do (blockIdx.x from first_block on): each block has its own warps and
// barrier, and a thread in cluster_wait goes on once every live thread of every block has
// arrived at its phase.
inline void run_cluster(unsigned blocks, unsigned threads, unsigned first_block,
                        const std::function<void()>& body) {
  std::vector<Block> cluster(blocks);
  block_dim.x = threads;
  cluster_blocks = blocks;
  for (unsigned r = 0; r < blocks; ++r) {
    cluster[r].body = body;
    start_fibers(cluster[r], threads, size_t(r) * threads);
  }
  auto enter = [&](unsigned r) {
    block = &cluster[r];
    block_idx.x = first_block + r;
    cluster_rank = r;
  };
  // Each pass runs every thread that can move until it waits or exits; a pass in which all of
  // them wait resolves what it can: warp collectives and block barriers first, then the
  // cluster barrier.
  for (;;) {
    bool moved = false, done = true;
    for (unsigned r = 0; r < blocks; ++r) {
      enter(r);
      moved |= run_fibers(cluster[r]);
      done = done && all_done(cluster[r]);
    }
    if (done) break;
    if (moved) continue;
    bool resolved = false;
    for (unsigned r = 0; r < blocks; ++r) {
      enter(r);
      if (!all_done(cluster[r])) resolved |= resolve_block(cluster[r]);
    }
    if (resolved) continue;
    // A thread waiting for phase p goes on once every live thread of the cluster has arrived
    // at p (an exited thread has left the barrier).
    unsigned arrived = ~0u;
    for (const Block& b : cluster) {
      for (const Fiber& f : b.fibers) {
        if (!f.done) arrived = std::min(arrived, f.cluster_arrivals);
      }
    }
    bool released = false;
    for (Block& b : cluster) {
      for (Fiber& f : b.fibers) {
        if (!f.done && f.wait == kClusterBarrier && !f.released && f.cluster_waits <= arrived) {
          f.released = released = true;
        }
      }
    }
    if (!released) fail("deadlock: no collective or barrier can complete");
  }
  block = nullptr;
}

// Runs `body` for every thread of one block (blockIdx.x as set): a cluster of one.
inline void run_block(unsigned threads, const std::function<void()>& body) {
  run_cluster(1, threads, block_idx.x, body);
}

// Waits in a collective: `op` and `param` identify it, `mask` is the warp mask the call named
// (ignored for kActiveMask). Returns this lane's output.
template <class V>
V wait_in(int op, int param, unsigned mask, V value, Combine combine) {
  Fiber& f = me();
  Word bits = 0;
  std::memcpy(&bits, &value, sizeof(V));
  f.wait = op;
  f.param = param;
  f.mask = mask;
  f.combine = combine;
  f.in = bits;
  f.released = false;
  yield();
  f.wait = kRunning;
  f.released = false;
  V result;
  std::memcpy(&result, &f.out, sizeof(V));
  return result;
}

}  // namespace emu

#define threadIdx (emu::me().thread_idx)
#define blockIdx (emu::block_idx)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)

inline uint32_t __reduce_max_sync(unsigned mask, uint32_t v) {
  return emu::wait_in(1, 0, mask, v, [](const emu::Word* in, emu::Word* out, unsigned m, int) {
    uint32_t r = 0;
    for (int l = 0; l < 32; ++l) if (m >> l & 1) r = std::max(r, uint32_t(in[l]));
    for (int l = 0; l < 32; ++l) out[l] = r;
  });
}

inline uint32_t __reduce_or_sync(unsigned mask, uint32_t v) {
  return emu::wait_in(2, 0, mask, v, [](const emu::Word* in, emu::Word* out, unsigned m, int) {
    uint32_t r = 0;
    for (int l = 0; l < 32; ++l) if (m >> l & 1) r |= uint32_t(in[l]);
    for (int l = 0; l < 32; ++l) out[l] = r;
  });
}

inline uint32_t __reduce_and_sync(unsigned mask, uint32_t v) {
  return emu::wait_in(3, 0, mask, v, [](const emu::Word* in, emu::Word* out, unsigned m, int) {
    uint32_t r = ~0u;
    for (int l = 0; l < 32; ++l) if (m >> l & 1) r &= uint32_t(in[l]);
    for (int l = 0; l < 32; ++l) out[l] = r;
  });
}

inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return emu::wait_in(4, 0, mask, predicate != 0 ? 1u : 0u,
                      [](const emu::Word* in, emu::Word* out, unsigned m, int) {
                        unsigned bits = 0;
                        for (int l = 0; l < 32; ++l) if (m >> l & 1) bits |= unsigned(in[l]) << l;
                        for (int l = 0; l < 32; ++l) out[l] = bits;
                      });
}

inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }

inline void __syncwarp(unsigned mask = 0xffffffffu) {
  emu::wait_in(5, 0, mask, 0, [](const emu::Word*, emu::Word* out, unsigned, int) {
    for (int l = 0; l < 32; ++l) out[l] = 0;
  });
}

// Lanes that call it at different places are not converged, so they never share its mask: the
// call site (its return address) is the op's parameter. A window's tail elements visited one by
// one while other lanes of the warp take vectors met in one mask otherwise.
__attribute__((noinline)) inline unsigned __activemask() {
  const auto caller = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  const int call_site = int(caller & 0x7fffffff);
  return emu::wait_in(emu::kActiveMask, call_site, 0u, 0u,
                      [](const emu::Word*, emu::Word* out, unsigned m, int) {
                        for (int l = 0; l < 32; ++l) out[l] = m;
                      });
}

// Shuffles read the source lane's input; a source outside the members is an error on a GPU
// (undefined value), so it fails here.
inline emu::Word shuffle_source(const emu::Word* in, unsigned members, int source) {
  if (source < 0 || source > 31 || !(members >> source & 1)) emu::fail("shuffle from a lane outside the mask");
  return in[source];
}

inline uint64_t __shfl_xor_sync(unsigned mask, uint64_t v, int lane_mask) {
  return emu::wait_in(6, lane_mask, mask, v, [](const emu::Word* in, emu::Word* out, unsigned m,
                                                int x) {
    for (int l = 0; l < 32; ++l) if (m >> l & 1) out[l] = shuffle_source(in, m, l ^ x);
  });
}

inline uint32_t __shfl_up_sync(unsigned mask, uint32_t v, int delta) {
  return emu::wait_in(7, delta, mask, v, [](const emu::Word* in, emu::Word* out, unsigned m,
                                            int d) {
    for (int l = 0; l < 32; ++l) if (m >> l & 1) out[l] = l >= d ? shuffle_source(in, m, l - d) : in[l];
  });
}

// Each lane names its own source (the router's groups of one warp read different lanes), so the
// source travels with the value, above it, rather than as the collective's parameter.
inline uint32_t __shfl_sync(unsigned mask, uint32_t v, int source) {
  const emu::Word sent = emu::Word(v) | emu::Word(uint32_t(source)) << 64;
  const emu::Word got = emu::wait_in(8, 0, mask, sent, [](const emu::Word* in, emu::Word* out,
                                                          unsigned m, int) {
    for (int l = 0; l < 32; ++l) {
      if (m >> l & 1) out[l] = shuffle_source(in, m, int(uint32_t(in[l] >> 64)));
    }
  });
  return uint32_t(got);
}

inline void __syncthreads() {
  emu::wait_in(emu::kBarrier, 0, 0u, 0, nullptr);
}

namespace emu {
// barrier.cluster.arrive and barrier.cluster.wait of run_cluster's blocks: a thread arrives
// without waiting, and waits for the phase it arrived at last, as the hardware requires.
inline void cluster_arrive() {
  Fiber& f = me();
  if (f.cluster_arrivals != f.cluster_waits) fail("barrier.cluster.arrive twice without a wait");
  ++f.cluster_arrivals;
}
inline void cluster_wait() {
  Fiber& f = me();
  if (f.cluster_waits + 1 != f.cluster_arrivals) fail("barrier.cluster.wait without an arrive");
  ++f.cluster_waits;
  wait_in(kClusterBarrier, 0, 0u, 0, nullptr);
}
inline void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}

// What the cluster kernels need of cooperative_groups' cluster_group, over run_cluster's
// blocks: each block's shared memory is its element of `shared`, and another block's copy of an
// address is found at the same offset in that block's element.
template <class Shared>
struct Cluster {
  Shared* shared;
  unsigned block_rank() const { return cluster_rank; }
  unsigned num_blocks() const { return cluster_blocks; }
  void sync() const { cluster_sync(); }
  void barrier_arrive() const { cluster_arrive(); }
  void barrier_wait() const { cluster_wait(); }
  template <class X>
  X* map_shared_rank(X* address, unsigned rank) const {
    const auto* own = reinterpret_cast<const char*>(&shared[cluster_rank]);
    const std::ptrdiff_t offset = reinterpret_cast<const char*>(address) - own;
    if (offset < 0 || offset + std::ptrdiff_t(sizeof(X)) > std::ptrdiff_t(sizeof(Shared)) ||
        rank >= cluster_blocks) {
      fail("map_shared_rank outside the block's shared memory or the cluster");
    }
    return reinterpret_cast<X*>(reinterpret_cast<char*>(&shared[rank]) + offset);
  }
};
}  // namespace emu

inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __ffs(unsigned v) { return __builtin_ffs(int(v)); }
inline int __clzll(long long v) { return v == 0 ? 64 : __builtin_clzll((unsigned long long)v); }

// Threads switch only inside collectives and barriers, so a read-modify-write is atomic here,
// and memory needs no fences or cache hints.
inline uint32_t atomicAdd(uint32_t* address, uint32_t value) {
  const uint32_t old = *address;
  *address = old + value;
  return old;
}
inline uint32_t atomicMax(uint32_t* address, uint32_t value) {
  const uint32_t old = *address;
  *address = std::max(old, value);
  return old;
}
inline void __threadfence() {}
template <class T>
T __ldg(const T* address) { return *address; }
template <class T>
T __ldcg(const T* address) { return *address; }

using std::max;
using std::min;
