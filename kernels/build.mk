# CUDA builds of .cu files with nvcc (only where nvcc exists). The kernel suite of the emulator
# (test/emu/kernel_suite.cu) is built here too, for the GPU: `make` compiles and links it for
# $(GPU_ARCH) (sm_90a by default); test/emu/gpu_vs_emu.sh runs it when a CUDA device is present.

ifneq ($(NVCC),)
# Any .cu compiled by nvcc; X.cuda.o beside the emulator's X.emu.o.
$(BUILD)/%.cuda.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
$(BUILD)/%.cuda.o: %.cpp
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -x cu -c $< -o $@

# Only in the plain build: the sanitizer build cannot instrument device code.
ifneq ($(SAN),1)
PROGRAMS += $(BUILD)/test/emu_kernel_suite_cuda
$(BUILD)/test/emu_kernel_suite_cuda: $(BUILD)/test/emu/kernel_suite.cuda.o $(BUILD)/test/test_main.cuda.o
	$(NVCC) $(NVCCFLAGS) $^ -o $@
endif
endif
