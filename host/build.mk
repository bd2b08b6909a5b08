# Host code shared by every trainer: each host/*.cpp becomes one object in HOST_OBJS.
# HOST_LIBS: nothing beyond libc and libstdc++ so far.
HOST_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(wildcard host/*.cpp))
# From parallel/, the host-only parts the loop and the trainers share: the mesh of ranks, and the
# parameter buckets and their ZeRO shards.
HOST_OBJS += $(BUILD)/parallel/mesh.o $(BUILD)/parallel/param_buckets.o $(BUILD)/parallel/pipeline_schedule.o
HOST_LIBS :=

# Host tests: one C++ program per module family.
HOST_TESTS := $(patsubst %,$(BUILD)/test/host/%,test_model_files test_dataloader test_flags \
                test_schedule test_checkpoint test_run_safety \
                test_hellaswag test_gpu_telemetry)
TESTS += $(HOST_TESTS)
$(HOST_TESTS): $(BUILD)/test/host/%: $(BUILD)/test/host/%.o $(HOST_OBJS) $(TEST_MAIN)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(HOST_LIBS)


# The pipeline's schedules and layer split (parallel/pipeline_schedule.h), host code only.
TESTS += $(BUILD)/test/parallel/test_pipeline_schedule
$(BUILD)/test/parallel/test_pipeline_schedule: $(BUILD)/test/parallel/test_pipeline_schedule.o $(HOST_OBJS) \
                                               $(TEST_MAIN)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(HOST_LIBS)

# The trainer's end-to-end test runs $(BIN)/train_gpt_cpu (overfit, resume, bad input); it needs only
# the test harness, and the trainer built first.
TESTS += $(BUILD)/test/host/test_train_cpu
$(BUILD)/test/host/test_train_cpu: $(BUILD)/test/host/test_train_cpu.o $(HOST_OBJS) $(TEST_MAIN) \
                                   | $(BIN)/train_gpt_cpu
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $(filter %.o,$^) -o $@ $(HOST_LIBS)
TESTS += test/host/test_plot_metrics.sh
# SIGTERM to one rank of two: all stop at the same step (the emulated trainer under mpirun; the
# script skips where either is missing). Plain build only, like the other multi-rank runs (time).
ifneq ($(SAN),1)
  TESTS += test/trainer/test_signal_one_rank.sh
endif
