# Host code shared by every trainer: each host/*.cpp becomes one object in HOST_OBJS.
# HOST_LIBS: nothing beyond libc and libstdc++ so far.
HOST_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(wildcard host/*.cpp))
HOST_LIBS :=

# Host tests: one C++ program per module family, plus the trainer's end-to-end scripts.
HOST_TEST_PROGRAMS := test_model_files test_dataloader test_flags test_schedule test_checkpoint
TESTS += $(patsubst %,$(BUILD)/test/host/%,$(HOST_TEST_PROGRAMS))
$(BUILD)/test/host/%: $(BUILD)/test/host/%.o $(HOST_OBJS) $(TEST_MAIN)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(HOST_LIBS)

