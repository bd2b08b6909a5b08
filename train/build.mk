# The training loop and what surrounds it (flags, data loading, schedule, checkpoints and run
# folders, metrics, sampling, evaluation, Hugging Face files): each train/*.cpp becomes one object in
# TRAIN_OBJS. HOST_OBJS is the host code every trainer links: train/, base/ and parallel/plan/.
# HOST_LIBS: nothing beyond libc and libstdc++ so far.
TRAIN_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(wildcard train/*.cpp))
HOST_OBJS := $(TRAIN_OBJS) $(BASE_OBJS) $(PLAN_OBJS)
HOST_LIBS :=

# The host tests (test/train/): one C++ program per module family.
HOST_TESTS := $(patsubst %,$(BUILD)/test/train/%,test_dataloader test_flags \
                test_schedule test_checkpoint test_resharding test_run_safety test_algorithm_table \
                test_hellaswag test_profiling)
TESTS += $(HOST_TESTS)
$(HOST_TESTS): $(BUILD)/test/train/%: $(BUILD)/test/train/%.o $(HOST_OBJS) $(TEST_MAIN)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(HOST_LIBS)
# base/'s test of the GPU telemetry (base/build.mk) checks its place in train/metrics_log's line too.
$(BUILD)/test/base/test_gpu_telemetry: $(HOST_OBJS)

# The trainer's end-to-end test runs $(BIN)/train_gpt_cpu (overfit, resume, bad input); it needs only
# the test harness, and the trainer built first.
TESTS += $(BUILD)/test/train/test_train_cpu
$(BUILD)/test/train/test_train_cpu: $(BUILD)/test/train/test_train_cpu.o $(HOST_OBJS) $(TEST_MAIN) \
                                   | $(BIN)/train_gpt_cpu
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $(filter %.o,$^) -o $@ $(HOST_LIBS)
# What a run owns and waits on, through train_gpt_cpu: the output folder's lock, snapshots beside
# foreign files, inputs that are not regular files, flags given twice, stops within a bounded time.
TESTS += $(BUILD)/test/train/test_run_ownership
$(BUILD)/test/train/test_run_ownership: $(BUILD)/test/train/test_run_ownership.o $(HOST_OBJS) $(TEST_MAIN) \
                                       | $(BIN)/train_gpt_cpu
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $(filter %.o,$^) -o $@ $(HOST_LIBS)
# Checkpoints that fail to write (a full disk) or are damaged (a file deleted), through train_gpt_cpu.
TESTS += $(BUILD)/test/train/test_checkpoint_damage
$(BUILD)/test/train/test_checkpoint_damage: $(BUILD)/test/train/test_checkpoint_damage.o $(HOST_OBJS) $(TEST_MAIN) \
                                           | $(BIN)/train_gpt_cpu
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $(filter %.o,$^) -o $@ $(HOST_LIBS)
# LAMB, LARS and the learning-rate scaling through train_gpt_cpu: first steps against a reference in
# the test, resumes, bad values; and the CUDA trainer's refusal (train_gpt_emu, where built).
TESTS += $(BUILD)/test/train/test_train_optimizers
$(BUILD)/test/train/test_train_optimizers: $(BUILD)/test/train/test_train_optimizers.o $(HOST_OBJS) $(TEST_MAIN) \
                                          | $(BIN)/train_gpt_cpu
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $(filter %.o,$^) -o $@ $(HOST_LIBS)
# Muon through train_gpt_cpu: the first step against a reference in the test, the loss, a resume, bad
# values, the dry run's state; and the CUDA trainer's refusal (train_gpt_emu, where built).
TESTS += $(BUILD)/test/train/test_train_muon
$(BUILD)/test/train/test_train_muon: $(BUILD)/test/train/test_train_muon.o $(HOST_OBJS) $(TEST_MAIN) \
                                    | $(BIN)/train_gpt_cpu
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $(filter %.o,$^) -o $@ $(HOST_LIBS)
TESTS += test/train/test_plot_metrics.sh
# The phase timers and the timeline through the trainers: the same bits, the trace's shape, bad values.
TESTS += test/train/test_timers.sh
# SIGTERM to one rank of two: all stop at the same step (the emulated trainer under mpirun; the
# script skips where either is missing). Plain build only, like the other multi-rank runs (time).
ifneq ($(SAN),1)
  TESTS += test/trainer/test_signal_one_rank.sh
  # Checkpoints written in the background: the synchronous writer's bits (their time: the benchmark
  # dev/checkpoint_overhead.sh).
  TESTS += test/train/test_async_checkpoints.sh
  # The cuBLASLt algorithms shared from rank 0, saved and loaded (2 ranks whose stand-ins time
  # different candidates fastest).
  TESTS += test/trainer/test_matmul_algorithms.sh
endif
