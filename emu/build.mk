# The CUDA emulator (emu/): the host runtime, the g++ build of .cu files, and its tests and benchmark.
# Exports for other fragments: CUDA_INCLUDE, EMU_CXXFLAGS, EMU_OBJS, EMU_LIBS and the pattern rule
# $(BUILD)/X.emu.o <- X.cu (see emu/README.md).

# CUDA's headers: beside nvcc, or the default install. Empty when there are none.
CUDA_INCLUDE ?= $(patsubst %/cuda_runtime.h,%,$(firstword $(wildcard \
                  $(dir $(NVCC))../include/cuda_runtime.h /usr/local/cuda/include/cuda_runtime.h)))
# -Wno-unknown-pragmas: "#pragma unroll" is for nvcc; g++ ignores it.
EMU_CXXFLAGS := -x c++ -isystem $(CUDA_INCLUDE) -include emu/cuda_emu.h -Wno-unknown-pragmas
EMU_OBJS     := $(addprefix $(BUILD)/emu/, fiber.o block_runner.o warp_ops.o grid_launch.o \
                  cuda_runtime_host.o stream_capture.o stream_queue.o)
EMU_LIBS     :=

ifneq ($(CUDA_INCLUDE),)

$(EMU_OBJS): CXXFLAGS += -isystem $(CUDA_INCLUDE)

# Any .cu compiled as C++ against the emulator.
$(BUILD)/%.emu.o: %.cu
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(EMU_CXXFLAGS) -c $< -o $@

# Tests: the kernel suite (also built with nvcc by kernels/build.mk), error detection, the runtime
# stand-ins, the queued streams (EMU_STREAMS), and the helper the detection test runs to see ASan catch an out-of-bounds write.
EMU_TESTS := emu_kernel_suite emu_detect emu_runtime emu_streams
TESTS += $(addprefix $(BUILD)/test/, $(EMU_TESTS)) test/emu/gpu_vs_emu.sh
# The emulated trainer on the Hopper attention kernels against train_gpt_cpu (plain build only).
ifneq ($(SAN),1)
  TESTS += test/emu/test_hopper_trainer.sh
endif
$(BUILD)/test/emu_kernel_suite: $(BUILD)/test/emu/kernel_suite.emu.o
$(BUILD)/test/emu_detect: $(BUILD)/test/emu/detect_test.emu.o | $(BUILD)/test/emu_oob_kernel
$(BUILD)/test/emu_runtime: $(BUILD)/test/emu/runtime_test.emu.o
$(BUILD)/test/emu_streams: $(BUILD)/test/emu/stream_queue_test.emu.o
$(addprefix $(BUILD)/test/, $(EMU_TESTS)): $(TEST_MAIN) $(EMU_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $(filter %.o,$^) -o $@ $(EMU_LIBS)
$(BUILD)/test/emu_oob_kernel: $(BUILD)/test/emu/oob_kernel.emu.o $(EMU_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(EMU_LIBS)

# Benchmark: fiber switch cost and emulated-kernel throughput.
BENCHES += $(BIN)/dev/bin/bench_emu
$(BIN)/dev/bin/bench_emu: $(BUILD)/dev/bench_emu.emu.o $(EMU_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(EMU_LIBS)

else
$(warning emu/build.mk: no CUDA headers found (cuda_runtime.h); emulated builds are skipped)
TESTS += test/emu/no_cuda_headers.sh
endif
