# Ragged top-k (mtk_topk_ragged): hand-computed cases through the C ABI (test_ragged.c), and the
# refusal of backends without ragged kernels, checked below the ABI with a stand-in backend
# (test_ragged_refusal.cpp), since this machine may have no GPU to refuse. The Python
# conformance against tests/ragged_reference.py runs with test-python.

RAGGED_C_TEST := $(BUILD)/tests/ragged/test_ragged
RAGGED_REFUSAL_TEST := $(BUILD)/tests/ragged/test_ragged_refusal

$(RAGGED_C_TEST): tests/ragged/test_ragged.c tests/c/abi_test_support.h include/metaltopk.h \
    $(LIBRARY)
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -Iinclude $< -o $@ -lm -L$(BUILD) -lmetaltopk \
	  -Wl,-rpath,$(abspath $(BUILD))

$(RAGGED_REFUSAL_TEST): tests/ragged/test_ragged_refusal.cpp tests/core/stand_in_backends.hpp \
    $(HOST_OBJ)
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) $< $(HOST_OBJ) -o $@ $(LDFLAGS)

.PHONY: test-ragged
test-ragged: $(RAGGED_C_TEST) $(RAGGED_REFUSAL_TEST)
	$(RAGGED_C_TEST)
	$(RAGGED_REFUSAL_TEST)

TEST_TARGETS += test-ragged
