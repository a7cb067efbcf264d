# Reliability: fault injection, malformed calls, sanitizers and fuzzing (tests/reliability/).
#
#   make test-faults     the fault-injection sweep against the library just built (every backend
#                        available) and against an ASan+UBSan build (LeakSanitizer on), plus the
#                        malformed-call test against the library just built
#   make test-sanitize   ASan+UBSan: malformed-call test; libFuzzer over the C ABI for
#                        FUZZ_SECONDS; TSan: the threading stress test
#   make fuzz FUZZ_SECONDS=1200   a longer fuzzing run (results go in FUZZ_RESULTS.md by hand)
#
# Sanitizer builds are CPU-only (NVCC pointed at nothing): ASan and TSan do not cover device
# code, which compute-sanitizer checks instead (tests/gpu/run_all.sh). Each lives in its own BUILD dir.
# ASan, UBSan and TSan run with clang and with GCC; libFuzzer is clang's, so with GCC
# test-sanitize skips the fuzzer (a clang pass, like .ci/run's first, runs it).

REL_DIR := tests/reliability
REL_OUT := $(BUILD)/tests/reliability
REL_CC_FLAGS := -std=c11 -O1 -g -Wall -Wextra -Werror -Iinclude
REL_CXX_FLAGS := -std=c++17 -O1 -g -Wall -Wextra -Werror -Iinclude -Ilib -pthread

REL_ASAN_BUILD ?= build-asan
REL_TSAN_BUILD ?= build-tsan
REL_FUZZ_BUILD ?= build-fuzz
REL_ASAN := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
REL_TSAN := -fsanitize=thread -fno-omit-frame-pointer
REL_FUZZ := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
REL_ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
REL_TSAN_ENV := TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
FUZZ_SECONDS ?= 60

# The library again with sanitizer flags, by the top-level rules, in its own build dir. Always
# re-run: the sub-make decides what is stale.
REL_SUBMAKE = $(MAKE) --no-print-directory -f Makefile NVCC=/nonexistent BUILD=$(1) \
  CXXFLAGS="-std=c++17 -O1 -g -fPIC -fvisibility=hidden -Wall -Wextra -pthread $(2)" \
  LDFLAGS="-pthread $(2)"

.PHONY: test-faults test-sanitize fuzz rel-asan-library rel-tsan-library rel-fuzz-objects

TEST_TARGETS += test-faults test-sanitize

rel-asan-library:
	@$(call REL_SUBMAKE,$(REL_ASAN_BUILD),$(REL_ASAN)) $(REL_ASAN_BUILD)/libmetaltopk.$(LIB_EXT)

rel-tsan-library:
	@$(call REL_SUBMAKE,$(REL_TSAN_BUILD),$(REL_TSAN)) $(REL_TSAN_BUILD)/libmetaltopk.$(LIB_EXT)

# The fuzzer links the library's objects directly so libFuzzer sees coverage inside them.
REL_FUZZ_OBJ = $(patsubst %.cpp,$(REL_FUZZ_BUILD)/%.o,$(CORE_SRC) $(CPU_SRC))
rel-fuzz-objects:
	@$(call REL_SUBMAKE,$(REL_FUZZ_BUILD),$(REL_FUZZ)) $(REL_FUZZ_OBJ)

# ---- programs ---------------------------------------------------------------------------------

$(REL_OUT)/bad_input: $(REL_DIR)/bad_input.c include/metaltopk.h include/metaltopk_testing.h \
    $(LIBRARY)
	@mkdir -p $(dir $@)
	$(CC) $(REL_CC_FLAGS) $< -o $@ -L$(BUILD) -lmetaltopk -Wl,-rpath,$(abspath $(BUILD))

$(REL_OUT)/fault_sweep: $(REL_DIR)/fault_sweep.cpp $(REL_DIR)/ragged_model.hpp include/metaltopk.h \
    include/metaltopk_testing.h $(LIBRARY)
	@mkdir -p $(dir $@)
	$(CXX) $(REL_CXX_FLAGS) $< -o $@ -L$(BUILD) -lmetaltopk -Wl,-rpath,$(abspath $(BUILD))

# Sanitized programs are relinked every time: their library may have changed under them.
REL_ASAN_OUT := $(REL_ASAN_BUILD)/tests/reliability
REL_TSAN_OUT := $(REL_TSAN_BUILD)/tests/reliability

# bad_input.c is linked by the C++ driver: the library's UBSan checks need the C++ runtime part.
rel-asan-programs: rel-asan-library
	@mkdir -p $(REL_ASAN_OUT)
	$(CC) $(REL_CC_FLAGS) $(REL_ASAN) -c $(REL_DIR)/bad_input.c -o $(REL_ASAN_OUT)/bad_input.o
	$(CXX) $(REL_ASAN) $(REL_ASAN_OUT)/bad_input.o -o $(REL_ASAN_OUT)/bad_input \
	  -L$(REL_ASAN_BUILD) -lmetaltopk -Wl,-rpath,$(abspath $(REL_ASAN_BUILD))
	$(CXX) $(REL_CXX_FLAGS) $(REL_ASAN) $(REL_DIR)/fault_sweep.cpp -o $(REL_ASAN_OUT)/fault_sweep \
	  -L$(REL_ASAN_BUILD) -lmetaltopk -Wl,-rpath,$(abspath $(REL_ASAN_BUILD))

rel-tsan-programs: rel-tsan-library
	@mkdir -p $(REL_TSAN_OUT)
	$(CXX) $(REL_CXX_FLAGS) $(REL_TSAN) $(REL_DIR)/thread_stress.cpp -o $(REL_TSAN_OUT)/thread_stress \
	  -L$(REL_TSAN_BUILD) -lmetaltopk -Wl,-rpath,$(abspath $(REL_TSAN_BUILD))

REL_FUZZER := $(REL_FUZZ_BUILD)/tests/reliability/fuzz_abi
rel-fuzzer: rel-fuzz-objects
	@mkdir -p $(dir $(REL_FUZZER))
	$(CC) $(REL_CC_FLAGS) $(REL_FUZZ) -c $(REL_DIR)/fuzz_raw_enums.c -o $(REL_FUZZER)_raw_enums.o
	$(CXX) $(REL_CXX_FLAGS) -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	  $(REL_DIR)/fuzz_abi.cpp $(REL_FUZZER)_raw_enums.o $(REL_FUZZ_OBJ) -o $(REL_FUZZER)

.PHONY: rel-asan-programs rel-tsan-programs rel-fuzzer

# ---- test targets -------------------------------------------------------------------------------

test-faults: $(REL_OUT)/fault_sweep $(REL_OUT)/bad_input rel-asan-programs
	$(REL_OUT)/bad_input
	$(REL_OUT)/fault_sweep
	$(REL_ASAN_ENV) $(REL_ASAN_OUT)/fault_sweep

# The fuzzer keeps what it finds in a corpus outside git, and replays the checked-in inputs of
# past failures (fuzz_regressions/) first.
REL_CORPUS := $(REL_FUZZ_BUILD)/corpus

REL_HAVE_FUZZER := $(and $(CXX_IS_CLANG),$(CC_IS_CLANG))

ifneq ($(REL_HAVE_FUZZER),)
test-sanitize: rel-asan-programs rel-tsan-programs rel-fuzzer
	$(REL_ASAN_ENV) $(REL_ASAN_OUT)/bad_input
	$(REL_TSAN_ENV) $(REL_TSAN_OUT)/thread_stress
	@mkdir -p $(REL_CORPUS)
	$(REL_ASAN_ENV) $(REL_FUZZER) -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	  -print_final_stats=1 -artifact_prefix=$(REL_FUZZ_BUILD)/ $(REL_CORPUS) $(REL_DIR)/fuzz_regressions
else
test-sanitize: rel-asan-programs rel-tsan-programs
	$(REL_ASAN_ENV) $(REL_ASAN_OUT)/bad_input
	$(REL_TSAN_ENV) $(REL_TSAN_OUT)/thread_stress
	@echo "test-sanitize: fuzzer skipped: libFuzzer needs clang (CXX = $(CXX), CC = $(CC))"
endif

fuzz: rel-fuzzer
	@$(if $(REL_HAVE_FUZZER),true,echo "fuzz: libFuzzer needs clang (CXX = $(CXX), CC = $(CC))"; exit 1)
	@mkdir -p $(REL_CORPUS)
	$(REL_ASAN_ENV) $(REL_FUZZER) -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	  -print_final_stats=1 -artifact_prefix=$(REL_FUZZ_BUILD)/ $(REL_CORPUS) $(REL_DIR)/fuzz_regressions
