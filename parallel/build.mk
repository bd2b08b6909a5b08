# parallel/plan/: the host-only planning of the ranks (the mesh, the parameter buckets and their ZeRO
# shards, the pipeline's schedules and layer split), one object each in PLAN_OBJS.
PLAN_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(wildcard parallel/plan/*.cpp))

# parallel/comm/: what the CUDA trainer's ranks exchange. Its .cpp files (the ranks over MPI, the
# mesh's NCCL communicators) build against MPI and NCCL (the real ones under nvcc, the stand-in over
# MPI in the emulated build; their flags are set in the Makefile, once emu/stand_ins.mk has found
# them); its headers hold the NCCL collectives the GPU model calls.
PARALLEL_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(wildcard parallel/comm/*.cpp))

# The pipeline's schedules and layer split (parallel/plan/pipeline_schedule.h), host code only.
TESTS += $(BUILD)/test/parallel/test_pipeline_schedule
$(BUILD)/test/parallel/test_pipeline_schedule: $(BUILD)/test/parallel/test_pipeline_schedule.o $(PLAN_OBJS) \
                                               $(BASE_OBJS) $(TEST_MAIN)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@

# The families' parameter tables and each rank's device layout built from them
# (parallel/plan/param_table.h, param_buckets.h), host code only.
TESTS += $(BUILD)/test/parallel/test_param_buckets
$(BUILD)/test/parallel/test_param_buckets: $(BUILD)/test/parallel/test_param_buckets.o $(PLAN_OBJS) \
                                           $(BASE_OBJS) $(TEST_MAIN)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@

# The bytes a data rank sends under each gradient compression method (parallel/plan/compression_cost.h,
# header only).
TESTS += $(BUILD)/test/parallel/test_compression_cost
$(BUILD)/test/parallel/test_compression_cost: $(BUILD)/test/parallel/test_compression_cost.o $(TEST_MAIN)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@

# The modelled step time of data-parallel training under each gradient compression method
# (dev/compression_step_model.cpp: compute, compression kernels and each bucket's collectives, from
# parallel/plan/compression_cost.h's bytes); run by hand, its figures in docs/grad_compression.md.
BENCHES += $(BIN)/dev/bin/compression_step_model
$(BIN)/dev/bin/compression_step_model: $(BUILD)/dev/compression_step_model.o $(BASE_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@
