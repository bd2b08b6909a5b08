# The test harness main() (test/test_main.cpp) is compiled by the generic rule; each folder's
# build.mk links its own test programs against $(TEST_MAIN) and adds them to TESTS.

# The parsers' fuzzers, a few seconds each (test/fuzz/test_fuzz.sh, built by clang with its own
# sanitizers into build-fuzz/): in the plain build only, so they run once per suite.
ifneq ($(SAN),1)
  TESTS += test/fuzz/test_fuzz.sh
endif

# The repository's floor plan (test/layout/): which folder may include which, no cycles, no CUDA in
# the host folders, no over-long functions, a test folder for every source folder. It reads the
# sources as text, so it links nothing of the project's beyond its own objects and the harness.
LAYOUT_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(wildcard test/layout/*.cpp))
TESTS += $(BUILD)/test/layout/test_layout
$(BUILD)/test/layout/test_layout: $(LAYOUT_OBJS) $(TEST_MAIN)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@
