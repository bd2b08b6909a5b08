# CUDA kernels (kernels/), their tests (test/kernels/test_*.cu) and benchmarks (dev/cuda/*.cu).
# A new test or benchmark file is picked up by name; no rule needs editing:
#   test/kernels/test_X.cu  -> $(BUILD)/test/kernels/test_X        emulated, bf16   (in `make test`)
#                           -> $(BUILD)/test/kernels/fp32/test_X   emulated, fp32   (in `make test`;
#                                                                 not the sanitized build)
#                           -> $(BUILD)/test/kernels/cuda/test_X   nvcc, bf16, run on a GPU by
#                                                                 test/kernels/gpu_kernel_tests.sh
#   dev/cuda/X.cu           -> $(BIN)/dev/bin/cuda_X               nvcc benchmark (`make`, `make bench`)
#                           -> $(BUILD)/dev/cuda/X_emu             emulated correctness check (in `make test`;
#                                                                 not the sanitized build: benchmark code)
# The kernel suite of the emulator (test/emu/kernel_suite.cu) is built with nvcc here too;
# test/emu/gpu_vs_emu.sh runs it when a CUDA device is present.

# Keep the objects between builds (they are intermediates of chained pattern rules).
.PRECIOUS: $(BUILD)/%.emu.o $(BUILD)/%.fp32.emu.o $(BUILD)/%.cuda.o

KERNEL_TEST_NAMES := $(basename $(notdir $(wildcard test/kernels/test_*.cu)))
DEV_CUDA_NAMES    := $(basename $(notdir $(wildcard dev/cuda/*.cu)))

# ---- emulated builds (g++), wherever CUDA's headers are
ifneq ($(CUDA_INCLUDE),)
$(BUILD)/%.fp32.emu.o: %.cu
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(EMU_CXXFLAGS) -DENABLE_FP32 -c $< -o $@

KERNEL_EMU_OBJS := $(EMU_OBJS) $(sort $(EMU_STAND_IN_OBJS) $(BUILD)/cpu/gemm.o)
KERNEL_EMU_LIBS := $(EMU_LIBS) $(EMU_STAND_IN_LIBS) $(CPU_LIBS)
$(BUILD)/test/kernels/%.emu.o $(BUILD)/test/kernels/%.fp32.emu.o $(BUILD)/dev/cuda/%.emu.o: \
  CXXFLAGS += $(STAND_INS_CXXFLAGS)

KERNEL_EMU_TESTS := $(foreach t,$(KERNEL_TEST_NAMES),$(BUILD)/test/kernels/$(t) \
                      $(if $(FP32_EMU_PROGRAMS),$(BUILD)/test/kernels/fp32/$(t)))
DEV_CUDA_EMU     := $(if $(filter 1,$(SAN)),,$(foreach d,$(DEV_CUDA_NAMES),$(BUILD)/dev/cuda/$(d)_emu))
TESTS += $(KERNEL_EMU_TESTS) $(DEV_CUDA_EMU)

$(BUILD)/test/kernels/fp32/%: $(BUILD)/test/kernels/%.fp32.emu.o $(TEST_MAIN) $(KERNEL_EMU_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(KERNEL_EMU_LIBS)
$(BUILD)/test/kernels/test_%: $(BUILD)/test/kernels/test_%.emu.o $(TEST_MAIN) $(KERNEL_EMU_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(KERNEL_EMU_LIBS)
$(BUILD)/dev/cuda/%_emu: $(BUILD)/dev/cuda/%.emu.o $(KERNEL_EMU_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(KERNEL_EMU_LIBS)
endif

# ---- nvcc builds, only where nvcc exists, and only in the plain build (the sanitizer build cannot
# instrument device code). Host code in them may use OpenMP (the CPU reference ops do).
ifneq ($(NVCC),)
NVCC_HOST_FLAGS := -Xcompiler -fopenmp
$(BUILD)/%.cuda.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(NVCC_HOST_FLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@
$(BUILD)/%.cuda.o: %.cpp
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(NVCC_HOST_FLAGS) -MMD -MP -MF $(@:.o=.d) -x cu -c $< -o $@

ifneq ($(SAN),1)
# The CPU reference's gemm() for nvcc programs: the same source, built without -march=native so the
# binaries also run on a GPU machine's (different) CPU.
$(BUILD)/cuda_host/cpu/gemm.o: cpu/gemm.cpp
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O3 -fopenmp -I. $(CPU_BLAS_FLAGS) -c $< -o $@
CUDA_HOST_OBJS := $(BUILD)/cuda_host/cpu/gemm.o
CUDA_LIBS      := -lcublasLt -lcublas -Xcompiler -fopenmp $(CPU_LIBS)

PROGRAMS += $(BUILD)/test/emu_kernel_suite_cuda
$(BUILD)/test/emu_kernel_suite_cuda: $(BUILD)/test/emu/kernel_suite.cuda.o $(BUILD)/test/test_main.cuda.o
	$(NVCC) $(NVCCFLAGS) $^ -o $@

KERNEL_CUDA_TESTS := $(foreach t,$(KERNEL_TEST_NAMES),$(BUILD)/test/kernels/cuda/$(t))
PROGRAMS += $(KERNEL_CUDA_TESTS)
TESTS += test/kernels/gpu_kernel_tests.sh
$(BUILD)/test/kernels/cuda/%: $(BUILD)/test/kernels/%.cuda.o $(BUILD)/test/test_main.cuda.o $(CUDA_HOST_OBJS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $^ -o $@ $(CUDA_LIBS)

DEV_CUDA_BENCHES := $(foreach d,$(DEV_CUDA_NAMES),$(BIN)/dev/bin/cuda_$(d))
BENCHES += $(DEV_CUDA_BENCHES)
$(BIN)/dev/bin/cuda_%: $(BUILD)/dev/cuda/%.cuda.o $(CUDA_HOST_OBJS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $^ -o $@ $(CUDA_LIBS)
endif
endif
