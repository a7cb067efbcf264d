# Portable core headers tested on their own (no library, no GPU): the shared float helpers
# (lib/core/float_formats.hpp) against independent references, the raw-value threshold test
# that the CUDA sampled pass uses in place of per-element keys (lib/core/key_threshold.hpp), and
# the inverse of the key order that the CUDA finish writes winners' values from
# (lib/core/ordered_key.hpp).
KEY_THRESHOLD_TEST := $(BUILD)/tests/core/test_key_threshold
ORDERED_KEY_TEST := $(BUILD)/tests/core/test_ordered_key
FLOAT_FORMATS_TEST := $(BUILD)/tests/core/test_float_formats

$(KEY_THRESHOLD_TEST): tests/core/test_key_threshold.cpp lib/core/key_threshold.hpp \
    lib/core/ordered_key.hpp lib/core/float_formats.hpp
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror -Ilib $< -o $@

$(ORDERED_KEY_TEST): tests/core/test_ordered_key.cpp lib/core/ordered_key.hpp \
    lib/core/float_formats.hpp
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror -Ilib $< -o $@

$(FLOAT_FORMATS_TEST): tests/core/test_float_formats.cpp lib/core/float_formats.hpp
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror -Ilib $< -o $@

.PHONY: test-core
test-core: $(KEY_THRESHOLD_TEST) $(ORDERED_KEY_TEST) $(FLOAT_FORMATS_TEST)
	$(KEY_THRESHOLD_TEST)
	$(ORDERED_KEY_TEST)
	$(FLOAT_FORMATS_TEST)

TEST_TARGETS += test-core
