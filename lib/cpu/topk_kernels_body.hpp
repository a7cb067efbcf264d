// The CPU top-k kernels, not a normal header: compiled once per instruction set, inside namespace
// mtk::cpu::MTK_CPU_ISA, by topk_kernels_<isa>.cpp (which includes the headers it needs first):
// the scans are plain loops the compiler vectorises for whatever the including file targets.
//
// Every row becomes "the k largest unsigned keys, ties to the lower index" (ordered_key.hpp).
// A candidate is one word packing (key, index) so that a larger word is a better candidate: the
// key in the high bits and (mask - index) in the low bits. Selecting, pruning and sorting are
// then plain unsigned comparisons of words.

namespace mtk::cpu::MTK_CPU_ISA {
namespace {

template <class T>
using KeyOf = typename KeyTraits<T>::Key;

template <class Key, class Word>
struct Packing {
  static constexpr int kIndexBits = sizeof(Word) == 8 ? 32 : 64;
  static constexpr Word kIndexMask = (Word(1) << kIndexBits) - 1;
  static Word make(Key key, int64_t index) {
    return (Word(key) << kIndexBits) | (kIndexMask - Word(static_cast<uint64_t>(index)));
  }
  static Key key(Word word) { return static_cast<Key>(word >> kIndexBits); }
  static int64_t index(Word word) {
    return static_cast<int64_t>(static_cast<uint64_t>(kIndexMask - (word & kIndexMask)));
  }
};

// `flip` is all ones to select the smallest values (the complemented key), else zero.
template <class T>
inline KeyOf<T> key_of(T value, KeyOf<T> flip) {
  return static_cast<KeyOf<T>>(KeyTraits<T>::key(value) ^ flip);
}

// Bit j set where element j of the block beats the threshold. Built from a plain loop the
// compiler turns into vector compares; the caller then visits only the set bits, so a block
// costs about the same whether none or a few of its elements get through.
template <class T>
inline uint32_t block_mask(const T* x, KeyOf<T> flip, KeyOf<T> threshold) {
  static_assert(kScanBlock == 32, "one bit per element of a block");
  uint32_t mask = 0;
  for (int64_t j = 0; j < kScanBlock; ++j)
    mask |= static_cast<uint32_t>(key_of(x[j], flip) > threshold) << j;
  return mask;
}

// Which of `count` distinct words (count <= 4 * kInsertionMaxK) are the best k, placed sorted
// at out[0, k): each word's rank is the number of words better than it, counted without
// branches (a few dozen words, so the quadratic count beats a sort's mispredicted branches).
// `out` may not overlap `words`; when count > k it has room for k + 1 words (slot k takes the
// losers).
template <class Word>
void place_best_by_rank(const Word* words, int64_t count, int64_t k, Word* out) {
  for (int64_t i = 0; i < count; ++i) {
    int64_t rank = 0;
    for (int64_t j = 0; j < count; ++j) rank += words[j] > words[i];
    out[rank < k ? rank : k] = words[i];
  }
}

// Short rows with small k (MoE routing: 8 of 128..512). Keys are computed once into `keys`,
// keeping the maximum of each of `Lanes` interleaved lanes (element i in lane i mod Lanes) in
// registers. The k-th largest lane maximum is a key that at least k distinct elements reach,
// and on typical data only a few more; only elements reaching it become candidate words.
// `keys` holds n keys and `words` n words. Returns k, with the best k words at words[0, k),
// sorted best first.
template <int Lanes, class T, class Word>
int64_t select_short_row(const T* x, int64_t n, int64_t k, KeyOf<T> flip, KeyOf<T>* keys,
                         Word* words) {
  using Key = KeyOf<T>;
  using P = Packing<Key, Word>;
  Key lane[Lanes] = {};
  int64_t i = 0;
  for (; i + Lanes <= n; i += Lanes) {
    for (int g = 0; g < Lanes; ++g) {
      const Key key = key_of(x[i + g], flip);
      keys[i + g] = key;
      lane[g] = std::max(lane[g], key);
    }
  }
  for (; i < n; ++i) keys[i] = key_of(x[i], flip);
  // The k-th largest lane maximum. Lanes that saw no element hold 0, still a valid floor.
  Key floor;
  if (k == Lanes) {
    floor = lane[0];
    for (int g = 1; g < Lanes; ++g) floor = std::min(floor, lane[g]);
  } else {
    std::sort(lane, lane + Lanes, std::greater<Key>());
    floor = lane[k - 1];
  }

  int64_t count = 0;
  for (i = 0; i + kScanBlock <= n; i += kScanBlock) {
    uint32_t mask = 0;
    for (int64_t j = 0; j < kScanBlock; ++j)
      mask |= static_cast<uint32_t>(keys[i + j] >= floor) << j;
    for (; mask != 0; mask &= mask - 1) {
      const int64_t j = i + __builtin_ctz(mask);
      words[count++] = P::make(keys[j], j);
    }
  }
  for (; i < n; ++i) {
    words[count] = P::make(keys[i], i);
    count += keys[i] >= floor;
  }
  if (count > 4 * k) {  // heavy ties at the floor: cut down in linear time first
    std::nth_element(words, words + k - 1, words + count, std::greater<Word>());
    count = k;
  }
  Word candidates[4 * kInsertionMaxK];
  std::copy(words, words + count, candidates);
  place_best_by_rank(candidates, count, k, words);
  return k;
}

// Keeps the k best words seen so far sorted in `top`, so the threshold (the k-th best key) is
// always exact. Elements arrive in increasing index order, so one whose key only equals the
// threshold loses to all k held ones and is skipped. State lives in locals while scanning: the
// words and the counters could alias as far as the compiler knows.
template <class T, class Word>
class InsertionSelector {
  using Key = KeyOf<T>;
  using P = Packing<Key, Word>;

 public:
  InsertionSelector(Word* top, int64_t k, Key flip) : top_(top), k_(k), flip_(flip) {}

  void feed(const T* x, int64_t len, int64_t base) {
    Word* const top = top_;
    const int64_t k = k_;
    const Key flip = flip_;
    int64_t i = 0;
    for (; size_ < k && i < len; ++i) {
      int64_t j = size_++;
      const Word word = P::make(key_of(x[i], flip), base + i);
      for (; j > 0 && top[j - 1] < word; --j) top[j] = top[j - 1];
      top[j] = word;
    }
    if (i == len) return;
    Key threshold = P::key(top[k - 1]);
    // Inserts a word known to beat the k-th, dropping the k-th.
    auto place = [&](Key key, int64_t index) {
      const Word word = P::make(key, index);
      int64_t j = k - 1;
      for (; j > 0 && top[j - 1] < word; --j) top[j] = top[j - 1];
      top[j] = word;
      threshold = P::key(top[k - 1]);
    };
    for (; i + kScanBlock <= len; i += kScanBlock) {
      for (uint32_t mask = block_mask(x + i, flip, threshold); mask != 0; mask &= mask - 1) {
        const int64_t j = __builtin_ctz(mask);
        const Key key = key_of(x[i + j], flip);
        if (key > threshold) place(key, base + i + j);  // the threshold may have risen since
      }
    }
    for (; i < len; ++i) {
      const Key key = key_of(x[i], flip);
      if (key > threshold) place(key, base + i);
    }
  }

  // The best min(k, seen) words, sorted best first, at top[0, count).
  int64_t finish() { return size_; }

 private:
  Word* top_;
  int64_t k_, size_ = 0;
  Key flip_;
};

// Appends every element that beats a running threshold to a buffer of `capacity` words; when the
// buffer fills, prunes it to the k best and raises the threshold to the k-th best key. The
// threshold lags the exact one, but only ever admits extra candidates, never loses a winner.
template <class T, class Word>
class BufferedSelector {
  using Key = KeyOf<T>;
  using P = Packing<Key, Word>;

 public:
  // `buffer` holds capacity + kScanBlock words: a block is appended without bounds checks.
  // A nonzero `floor` admits only keys >= floor until the first prune; the caller must check
  // that at least k elements reached it (finish() returns k).
  BufferedSelector(Word* buffer, int64_t k, int64_t capacity, Key flip, Key floor = 0)
      : buffer_(buffer), k_(k), capacity_(capacity), flip_(flip) {
    if (floor != 0) {
      threshold_ = static_cast<Key>(floor - 1);
      pruned_ = true;
    }
  }

  void feed(const T* x, int64_t len, int64_t base) {
    Word* const buffer = buffer_;
    const Key flip = flip_;
    int64_t i = 0;
    if (!pruned_) {  // no threshold yet: take everything until the buffer is full
      const int64_t take = std::min(len, capacity_ - size_);
      for (; i < take; ++i) buffer[size_ + i] = P::make(key_of(x[i], flip), base + i);
      size_ += take;
      if (size_ < capacity_) return;
      prune();
    }
    int64_t size = size_;
    Key threshold = threshold_;
    for (; i + kScanBlock <= len; i += kScanBlock) {
      for (uint32_t mask = block_mask(x + i, flip, threshold); mask != 0; mask &= mask - 1) {
        const int64_t j = __builtin_ctz(mask);
        buffer[size++] = P::make(key_of(x[i + j], flip), base + i + j);
      }
      if (size >= capacity_) {
        size_ = size;
        prune();
        size = size_;
        threshold = threshold_;
      }
    }
    for (; i < len; ++i) {
      const Key key = key_of(x[i], flip);
      if (key > threshold) {
        buffer[size++] = P::make(key, base + i);
        if (size >= capacity_) {
          size_ = size;
          prune();
          size = size_;
          threshold = threshold_;
        }
      }
    }
    size_ = size;
  }

  // The best min(k, seen) words, sorted best first, at buffer[0, count).
  int64_t finish() {
    if (size_ > k_) {
      std::nth_element(buffer_, buffer_ + k_ - 1, buffer_ + size_, std::greater<Word>());
      size_ = k_;
    }
    std::sort(buffer_, buffer_ + size_, std::greater<Word>());
    return size_;
  }

 private:
  void prune() {
    std::nth_element(buffer_, buffer_ + k_ - 1, buffer_ + size_, std::greater<Word>());
    size_ = k_;
    threshold_ = P::key(buffer_[k_ - 1]);
    pruned_ = true;
  }

  Word* buffer_;
  int64_t k_, capacity_, size_ = 0;
  Key flip_;
  Key threshold_ = 0;
  bool pruned_ = false;
};

template <class T, class Word>
class RowKernel {
  using Key = KeyOf<T>;
  using P = Packing<Key, Word>;

 public:
  RowKernel(const TopkProblem& problem, const TopkPlan& plan)
      : problem_(problem),
        g_(problem.geometry),
        plan_(plan),
        input_(static_cast<const T*>(problem.input)),
        flip_(problem.largest ? Key(0) : static_cast<Key>(~Key(0))) {}

  void run(ThreadPool& pool, const ScratchView& scratch) {
    if (plan_.chunks > 1) {
      run_split(pool, scratch);
    } else if (plan_.layout == RowLayout::Tiled) {
      run_tiled(pool, scratch);
    } else {
      pool.parallel_for_worker(g_.rows, [&](int worker, int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
          const RowOffsets at = row_offsets(g_, row);
          const T* x = input_ + at.input;
          const int64_t count = search(x, g_.input_stride, 0, g_.n, scratch.worker[worker]);
          write_row(at, x, reinterpret_cast<const Word*>(scratch.worker[worker]), count);
        }
      });
    }
  }

 private:
  // The best min(k, end - begin) words of elements [begin, end) of the row at `x`, whose
  // elements lie `stride` apart, sorted best first, at the start of the worker's scratch.
  // Returns their count.
  int64_t search(const T* x, int64_t stride, int64_t begin, int64_t end,
                 std::byte* worker_scratch) {
    Word* words = reinterpret_cast<Word*>(worker_scratch);
    T* gathered = reinterpret_cast<T*>(worker_scratch + plan_.selector_bytes);
    switch (plan_.selector) {
      case RowSelector::ShortRow: {  // whole rows only: short rows are never split
        if (stride != 1) {
          for (int64_t i = 0; i < g_.n; ++i) gathered[i] = x[i * stride];
          x = gathered;
        }
        Key* keys = reinterpret_cast<Key*>(worker_scratch + g_.n * int64_t{sizeof(Word)});
        return g_.k <= 8 ? select_short_row<8>(x, g_.n, g_.k, flip_, keys, words)
                         : select_short_row<16>(x, g_.n, g_.k, flip_, keys, words);
      }
      case RowSelector::Insertion: {
        InsertionSelector<T, Word> selector(words, g_.k, flip_);
        feed(selector, x, stride, begin, end, gathered);
        return selector.finish();
      }
      case RowSelector::Buffered:
        break;
    }
    const Key floor = sampled_floor(x, stride, begin, end, reinterpret_cast<Key*>(words));
    if (floor != 0) {
      BufferedSelector<T, Word> selector(words, g_.k, plan_.candidate_capacity, flip_, floor);
      feed(selector, x, stride, begin, end, gathered);
      const int64_t count = selector.finish();
      if (count == std::min(g_.k, end - begin)) return count;
      // The sample misled: fewer than k elements reach the floor. Scan again without one.
    }
    BufferedSelector<T, Word> selector(words, g_.k, plan_.candidate_capacity, flip_);
    feed(selector, x, stride, begin, end, gathered);
    return selector.finish();
  }

  // For a large k and a segment much longer than the candidate buffer: a key that, judging from
  // an evenly strided sample, about 2k elements (plus a margin for sampling noise) reach, so the
  // scan starts at a high threshold instead of growing one through many prunes; 0 when not worth
  // it (for small k the prunes are cheaper than the sample's cache misses). `samples` has room
  // for kFloorSamples keys.
  Key sampled_floor(const T* x, int64_t stride, int64_t begin, int64_t end, Key* samples) const {
    const int64_t m = end - begin;
    if (g_.k < kFloorMinK || m < 4 * plan_.candidate_capacity) return 0;
    const int64_t step = m / kFloorSamples;
    for (int64_t i = 0; i < kFloorSamples; ++i)
      samples[i] = key_of(x[(begin + i * step) * stride], flip_);
    // The sample of rank r stands for about r * m / kFloorSamples elements.
    const int64_t rank = 2 * g_.k * kFloorSamples / m + 16;
    if (rank > kFloorSamples / 4) return 0;
    std::nth_element(samples, samples + rank - 1, samples + kFloorSamples, std::greater<Key>());
    return samples[rank - 1];
  }

  template <class Selector>
  void feed(Selector& selector, const T* x, int64_t stride, int64_t begin, int64_t end,
            T* gathered) {
    if (stride == 1) {
      selector.feed(x + begin, end - begin, begin);
      return;
    }
    for (int64_t at = begin; at < end; at += kGatherPiece) {
      const int64_t len = std::min(kGatherPiece, end - at);
      const T* source = x + at * stride;
      for (int64_t i = 0; i < len; ++i) gathered[i] = source[i * stride];
      selector.feed(gathered, len, at);
    }
  }

  // Rows whose innermost batch dim has input stride 1: a tile of adjacent rows is transposed
  // into scratch reading tile_rows consecutive elements at each position, then each tile row is
  // scanned contiguously.
  void run_tiled(ThreadPool& pool, const ScratchView& scratch) {
    const int64_t inner = g_.batch_sizes[g_.batch_ndim - 1];
    const int64_t tiles_per_run = (inner + plan_.tile_rows - 1) / plan_.tile_rows;
    const int64_t tiles = g_.rows / inner * tiles_per_run;
    pool.parallel_for_worker(tiles, [&](int worker, int64_t begin, int64_t end) {
      std::byte* worker_scratch = scratch.worker[worker];
      T* tile = reinterpret_cast<T*>(worker_scratch + plan_.selector_bytes);
      Word* storage = reinterpret_cast<Word*>(worker_scratch);
      for (int64_t t = begin; t < end; ++t) {
        const int64_t first = t / tiles_per_run * inner + t % tiles_per_run * plan_.tile_rows;
        const int64_t rows =
            std::min(plan_.tile_rows, inner - t % tiles_per_run * plan_.tile_rows);
        const T* x = input_ + row_offsets(g_, first).input;
        transpose_tile(x, rows, tile);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t count = search(tile + r * g_.n, 1, 0, g_.n, worker_scratch);
          const RowOffsets at = row_offsets(g_, first + r);
          write_row(at, input_ + at.input, storage, count);
        }
      }
    });
  }

  // Positions along the row are far apart in memory (a page or more), where the hardware
  // prefetchers give up, so the lines of upcoming positions are requested explicitly.
  void transpose_tile(const T* x, int64_t rows, T* tile) const {
    const int64_t n = g_.n, stride = g_.input_stride;
    const int64_t bytes = rows * int64_t{sizeof(T)};
    for (int64_t i = 0; i < n; ++i) {
      if (i + kTilePrefetchAhead < n) {
        const char* ahead = reinterpret_cast<const char*>(x + (i + kTilePrefetchAhead) * stride);
        for (int64_t b = 0; b < bytes + 63; b += 64) __builtin_prefetch(ahead + b);
      }
      for (int64_t r = 0; r < rows; ++r) tile[r * n + i] = x[i * stride + r];
    }
  }

  // Few rows: each row is cut into plan_.chunks segments searched as separate tasks; each
  // segment's best k words go to the shared scratch, and a second pass merges them per row.
  void run_split(ThreadPool& pool, const ScratchView& scratch) {
    const int64_t chunks = plan_.chunks, k = g_.k;
    Word* slots = reinterpret_cast<Word*>(scratch.shared);
    pool.parallel_for_worker(g_.rows * chunks, [&](int worker, int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t row = task / chunks, chunk = task % chunks;
        const int64_t first = chunk * plan_.chunk_len;
        const int64_t last = std::min(g_.n, first + plan_.chunk_len);
        const T* x = input_ + row_offsets(g_, row).input;
        const int64_t count = search(x, g_.input_stride, first, last, scratch.worker[worker]);
        // The plan makes every segment much longer than k, so each one yields k words.
        if (count != k) fail(MTK_ERROR_INTERNAL, "cpu topk: a segment yielded ", count, " of ", k);
        const Word* words = reinterpret_cast<const Word*>(scratch.worker[worker]);
        std::copy(words, words + k, slots + task * k);
      }
    });
    // Each segment's list is sorted best first, so the row's best k are the first k of their
    // merge: a heap of the lists' heads, k pops.
    pool.parallel_for_worker(g_.rows, [&](int worker, int64_t begin, int64_t end) {
      struct Head {
        Word word;
        int64_t chunk;
        bool operator<(const Head& other) const { return word < other.word; }
      };
      Head heap[kMaxChunks];
      int64_t taken[kMaxChunks];
      Word* merged = reinterpret_cast<Word*>(scratch.worker[worker]);
      for (int64_t row = begin; row < end; ++row) {
        const Word* lists = slots + row * chunks * k;
        for (int64_t c = 0; c < chunks; ++c) {
          heap[c] = Head{lists[c * k], c};
          taken[c] = 0;
        }
        int64_t size = chunks;
        std::make_heap(heap, heap + size);
        for (int64_t i = 0; i < k; ++i) {
          std::pop_heap(heap, heap + size);
          const Head best = heap[size - 1];
          merged[i] = best.word;
          if (++taken[best.chunk] < k) {
            heap[size - 1] = Head{lists[best.chunk * k + taken[best.chunk]], best.chunk};
            std::push_heap(heap, heap + size);
          } else {
            --size;
          }
        }
        const RowOffsets at = row_offsets(g_, row);
        write_row(at, input_ + at.input, merged, k);
      }
    });
  }

  // Values are copied as raw bytes, so NaN payloads and signed zeros survive bit for bit. A
  // problem without values (indices only) writes indices alone.
  void write_row(const RowOffsets& at, const T* x, const Word* words, int64_t count) const {
    auto* values = static_cast<unsigned char*>(problem_.values);
    const int64_t input_stride = g_.input_stride;
    for (int64_t i = 0; values != nullptr && i < count; ++i) {
      const int64_t index = P::index(words[i]);
      std::memcpy(values + (at.values + i * g_.values_stride) * int64_t{sizeof(T)},
                  x + index * input_stride, sizeof(T));
    }
    if (problem_.index_dtype == MTK_INT64) {
      auto* indices = static_cast<int64_t*>(problem_.indices) + at.indices;
      for (int64_t i = 0; i < count; ++i) indices[i * g_.indices_stride] = P::index(words[i]);
    } else {
      auto* indices = static_cast<int32_t*>(problem_.indices) + at.indices;
      for (int64_t i = 0; i < count; ++i)
        indices[i * g_.indices_stride] = static_cast<int32_t>(P::index(words[i]));
    }
  }

  const TopkProblem& problem_;
  const RowGeometry& g_;
  const TopkPlan& plan_;
  const T* input_;
  Key flip_;
};

template <class T>
void run_dtype(const TopkProblem& problem, const TopkPlan& plan, ThreadPool& pool,
               const ScratchView& scratch) {
  if (plan.wide_words) {
    RowKernel<T, unsigned __int128>(problem, plan).run(pool, scratch);
  } else if constexpr (sizeof(KeyOf<T>) <= 4) {
    RowKernel<T, uint64_t>(problem, plan).run(pool, scratch);
  }
}

}  // namespace

void run_topk(const TopkProblem& problem, const TopkPlan& plan, ThreadPool& pool,
              const ScratchView& scratch) {
  switch (problem.dtype) {
    case MTK_FLOAT32: return run_dtype<float>(problem, plan, pool, scratch);
    case MTK_FLOAT16: return run_dtype<f16_bits>(problem, plan, pool, scratch);
    case MTK_BFLOAT16: return run_dtype<bf16_bits>(problem, plan, pool, scratch);
    case MTK_FLOAT64: return run_dtype<double>(problem, plan, pool, scratch);
    case MTK_INT8: return run_dtype<int8_t>(problem, plan, pool, scratch);
    case MTK_UINT8: return run_dtype<uint8_t>(problem, plan, pool, scratch);
    case MTK_INT16: return run_dtype<int16_t>(problem, plan, pool, scratch);
    case MTK_INT32: return run_dtype<int32_t>(problem, plan, pool, scratch);
    case MTK_INT64: return run_dtype<int64_t>(problem, plan, pool, scratch);
  }
  fail(MTK_ERROR_UNSUPPORTED_DTYPE, "dtype = ", static_cast<int>(problem.dtype),
       " reached the CPU kernels");
}

}  // namespace mtk::cpu::MTK_CPU_ISA
