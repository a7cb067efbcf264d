# Portable core headers tested on their own (no library, no GPU): the raw-value threshold test
# that the CUDA sampled pass uses in place of per-element keys (lib/core/key_threshold.hpp), and
# the inverse of the key order that the CUDA finish writes winners' values from
# (lib/core/ordered_key.hpp).
KEY_THRESHOLD_TEST := $(BUILD)/tests/core/test_key_threshold
ORDERED_KEY_TEST := $(BUILD)/tests/core/test_ordered_key

$(KEY_THRESHOLD_TEST): tests/core/test_key_threshold.cpp lib/core/key_threshold.hpp \
    lib/core/ordered_key.hpp
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror -Ilib $< -o $@

$(ORDERED_KEY_TEST): tests/core/test_ordered_key.cpp lib/core/ordered_key.hpp
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror -Ilib $< -o $@

.PHONY: test-core
test-core: $(KEY_THRESHOLD_TEST) $(ORDERED_KEY_TEST)
	$(KEY_THRESHOLD_TEST)
	$(ORDERED_KEY_TEST)

TEST_TARGETS += test-core
