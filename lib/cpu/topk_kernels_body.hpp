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

template <class T>
inline KeyOf<T> block_max_key(const T* x, KeyOf<T> flip) {
  KeyOf<T> best = 0;
  for (int64_t j = 0; j < kScanBlock; ++j) {
    const KeyOf<T> key = key_of(x[j], flip);
    best = key > best ? key : best;
  }
  return best;
}

// Short rows with small k (MoE routing: 8 of 128..512). Keys are computed once into `keys`.
// Element i belongs to group i mod k; the smallest of the k group maxima is a key that at least
// k distinct elements reach (the maxima), and on typical data only a few more. Only elements
// reaching it are packed into `words`, and the best k of those are kept by insertion.
// `keys` holds n keys and `words` n words. Returns k, with the best k words at words[0, k),
// sorted best first.
template <class T, class Word>
int64_t select_short_row(const T* x, int64_t n, int64_t k, KeyOf<T> flip, KeyOf<T>* keys,
                         Word* words) {
  using Key = KeyOf<T>;
  using P = Packing<Key, Word>;
  Key maxima[kInsertionMaxK] = {};
  const int64_t whole = n / k * k;
  for (int64_t at = 0; at < whole; at += k) {
    for (int64_t g = 0; g < k; ++g) {
      const Key key = key_of(x[at + g], flip);
      keys[at + g] = key;
      maxima[g] = std::max(maxima[g], key);
    }
  }
  for (int64_t i = whole; i < n; ++i) keys[i] = key_of(x[i], flip);
  Key floor = maxima[0];
  for (int64_t g = 1; g < k; ++g) floor = std::min(floor, maxima[g]);

  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    words[count] = P::make(keys[i], i);
    count += keys[i] >= floor;
  }
  if (count > 4 * k) {  // heavy ties at the floor: cut down in linear time first
    std::nth_element(words, words + k - 1, words + count, std::greater<Word>());
    count = k;
  }
  // Insertion of each candidate into the sorted best k at words[0, k). Candidate i is read before
  // any shift can reach it: while fewer than k are held, the held ones are exactly words[0, i).
  int64_t held = 0;
  for (int64_t i = 0; i < count; ++i) {
    const Word word = words[i];
    int64_t j;
    if (held < k) {
      j = held++;
    } else if (word > words[k - 1]) {
      j = k - 1;
    } else {
      continue;
    }
    for (; j > 0 && words[j - 1] < word; --j) words[j] = words[j - 1];
    words[j] = word;
  }
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
      if (block_max_key(x + i, flip) <= threshold) continue;
      for (int64_t j = 0; j < kScanBlock; ++j) {
        const Key key = key_of(x[i + j], flip);
        if (key > threshold) place(key, base + i + j);
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
  BufferedSelector(Word* buffer, int64_t k, int64_t capacity, Key flip)
      : buffer_(buffer), k_(k), capacity_(capacity), flip_(flip) {}

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
      if (block_max_key(x + i, flip) <= threshold) continue;
      for (int64_t j = 0; j < kScanBlock; ++j) {
        const Key key = key_of(x[i + j], flip);
        buffer[size] = P::make(key, base + i + j);
        size += key > threshold;
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
          const int64_t count = search(x, 0, g_.n, scratch.worker[worker]);
          write_row(at, x, reinterpret_cast<const Word*>(scratch.worker[worker]), count);
        }
      });
    }
  }

 private:
  // The best min(k, n) words of a whole contiguous row, sorted best first, at the start of the
  // worker's scratch; returns their count.
  int64_t select_row(const T* x, std::byte* worker_scratch) {
    Word* words = reinterpret_cast<Word*>(worker_scratch);
    switch (plan_.selector) {
      case RowSelector::ShortRow: {
        Key* keys = reinterpret_cast<Key*>(worker_scratch + g_.n * int64_t{sizeof(Word)});
        return select_short_row(x, g_.n, g_.k, flip_, keys, words);
      }
      case RowSelector::Insertion: {
        InsertionSelector<T, Word> selector(words, g_.k, flip_);
        selector.feed(x, g_.n, 0);
        return selector.finish();
      }
      case RowSelector::Buffered: break;
    }
    BufferedSelector<T, Word> selector(words, g_.k, plan_.candidate_capacity, flip_);
    selector.feed(x, g_.n, 0);
    return selector.finish();
  }

  // The best min(k, end - begin) words of elements [begin, end) of the row at `x` (any
  // stride), sorted best first, at the start of the worker's scratch; returns their count.
  int64_t search(const T* x, int64_t begin, int64_t end, std::byte* worker_scratch) {
    T* gathered = reinterpret_cast<T*>(worker_scratch + plan_.selector_bytes);
    if (g_.input_stride == 1 && begin == 0 && end == g_.n) return select_row(x, worker_scratch);
    Word* words = reinterpret_cast<Word*>(worker_scratch);
    switch (plan_.selector) {
      case RowSelector::ShortRow: {  // a short row is gathered whole (never split)
        for (int64_t i = 0; i < g_.n; ++i) gathered[i] = x[i * g_.input_stride];
        return select_row(gathered, worker_scratch);
      }
      case RowSelector::Insertion: {
        InsertionSelector<T, Word> selector(words, g_.k, flip_);
        feed(selector, x, begin, end, gathered);
        return selector.finish();
      }
      case RowSelector::Buffered: break;
    }
    BufferedSelector<T, Word> selector(words, g_.k, plan_.candidate_capacity, flip_);
    feed(selector, x, begin, end, gathered);
    return selector.finish();
  }

  template <class Selector>
  void feed(Selector& selector, const T* x, int64_t begin, int64_t end, T* gathered) {
    const int64_t stride = g_.input_stride;
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
        const int64_t rows = std::min(plan_.tile_rows, inner - t % tiles_per_run * plan_.tile_rows);
        const T* x = input_ + row_offsets(g_, first).input;
        transpose_tile(x, rows, tile);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t count = select_row(tile + r * g_.n, worker_scratch);
          const RowOffsets at = row_offsets(g_, first + r);
          write_row(at, input_ + at.input, storage, count);
        }
      }
    });
  }

  void transpose_tile(const T* x, int64_t rows, T* tile) const {
    const int64_t n = g_.n, stride = g_.input_stride;
    if (rows == plan_.tile_rows) {  // the common full tile: a fixed trip count unrolls
      const int64_t full = plan_.tile_rows;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t r = 0; r < full; ++r) tile[r * n + i] = x[i * stride + r];
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t r = 0; r < rows; ++r) tile[r * n + i] = x[i * stride + r];
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
        const int64_t count = search(x, first, last, scratch.worker[worker]);
        const Word* words = reinterpret_cast<const Word*>(scratch.worker[worker]);
        Word* slot = slots + task * k;
        std::copy(words, words + count, slot);
        // A short last segment pads with zero words. They rank below every real candidate (a
        // real word's index field is zero only at index kIndexMask, which rows never reach),
        // and every row has at least k real ones.
        std::fill(slot + count, slot + k, Word(0));
      }
    });
    pool.parallel_for(g_.rows, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        Word* words = slots + row * chunks * k;
        std::nth_element(words, words + k - 1, words + chunks * k, std::greater<Word>());
        std::sort(words, words + k, std::greater<Word>());
        const RowOffsets at = row_offsets(g_, row);
        write_row(at, input_ + at.input, words, k);
      }
    });
  }

  // Values are copied as raw bytes, so NaN payloads and signed zeros survive bit for bit.
  void write_row(const RowOffsets& at, const T* x, const Word* words, int64_t count) const {
    auto* values = static_cast<unsigned char*>(problem_.values);
    const int64_t input_stride = g_.input_stride;
    for (int64_t i = 0; i < count; ++i) {
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
