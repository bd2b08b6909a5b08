# The fp32 CPU reference model (CPU_OBJS, CPU_LIBS), its tests and the dev/ step benchmark.
# BLAS choice, in order (override with CPU_BLAS=openmp|system|none):
#   openmp  Debian's OpenBLAS built on OpenMP (libopenblas-openmp-dev): its GEMM threads are our
#           OpenMP threads, so GEMMs and our own parallel loops never compete for the 2 cores.
#   system  whatever cblas.h / libopenblas the system links by default (often the pthread build).
#   none    the plain-loop fallback in cpu/gemm.h.
MULTIARCH         := $(shell $(CXX) -print-multiarch 2>/dev/null)
OPENBLAS_OMP_INC  := /usr/include/$(MULTIARCH)/openblas-openmp
OPENBLAS_OMP_LIB  := /usr/lib/$(MULTIARCH)/openblas-openmp
ifeq ($(origin CPU_BLAS),undefined)
  ifneq ($(wildcard $(OPENBLAS_OMP_INC)/cblas.h),)
    CPU_BLAS := openmp
  else ifneq ($(wildcard /usr/include/cblas.h /usr/include/$(MULTIARCH)/cblas.h),)
    CPU_BLAS := system
  else
    CPU_BLAS := none
  endif
endif
# OpenBLAS is dlopen'ed at run time, not linked (see cpu/gemm.cpp for why); only its header is
# needed at build time and OPENBLAS_LIBRARY names the shared library to load.
ifeq ($(CPU_BLAS),openmp)
  CPU_BLAS_FLAGS := -DHAVE_CBLAS -I$(OPENBLAS_OMP_INC) -DOPENBLAS_LIBRARY='"$(OPENBLAS_OMP_LIB)/libopenblas.so.0"'
  CPU_LIBS       := -ldl
else ifeq ($(CPU_BLAS),system)
  CPU_BLAS_FLAGS := -DHAVE_CBLAS -DOPENBLAS_LIBRARY='"libopenblas.so.0"'
  CPU_LIBS       := -ldl
else
  CPU_BLAS_FLAGS :=
  CPU_LIBS       :=
endif

CPU_OBJS := $(BUILD)/cpu/gemm.o $(BUILD)/cpu/gpt_cpu.o $(BUILD)/cpu/gpt_decode.o
# The Llama 3 CPU model and its key/value-cache decoder, beside GPT-2's; linked only where used.
LLAMA_CPU_OBJS := $(BUILD)/cpu/llama_cpu.o $(BUILD)/cpu/llama_decode.o
# errno is never read; without it set by sqrt, the AdamW loop vectorises. The key/value-cache
# decoder is built the same way, so that its ops compile to the same code as the model's.
$(BUILD)/cpu/gpt_cpu.o $(BUILD)/cpu/gpt_decode.o $(LLAMA_CPU_OBJS): CXXFLAGS += -fno-math-errno
# Only gemm.cpp sees cblas.h. Its object is rebuilt when the choice changes.
$(BUILD)/cpu/gemm.o: CXXFLAGS += $(CPU_BLAS_FLAGS)
$(BUILD)/cpu/gemm.o: $(BUILD)/cpu/blas_choice.$(CPU_BLAS)
$(BUILD)/cpu/blas_choice.$(CPU_BLAS):
	@mkdir -p $(dir $@) && rm -f $(BUILD)/cpu/blas_choice.* && touch $@

CPU_TESTS := $(BUILD)/test/cpu/test_cpu_ops $(BUILD)/test/cpu/test_cpu_model \
             $(BUILD)/test/cpu/test_gpt_decode $(BUILD)/test/cpu/test_lamb_lars \
             $(BUILD)/test/cpu/test_muon \
             $(BUILD)/test/cpu/test_llama_ops $(BUILD)/test/cpu/test_llama_model \
             $(BUILD)/test/cpu/test_llama_decode
TESTS += $(CPU_TESTS)
$(CPU_TESTS): $(BUILD)/test/cpu/%: $(BUILD)/test/cpu/%.o $(CPU_OBJS) $(TEST_MAIN)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(CPU_LIBS)
$(BUILD)/test/cpu/test_llama_model $(BUILD)/test/cpu/test_llama_decode $(BUILD)/test/cpu/test_muon: $(LLAMA_CPU_OBJS)

BENCHES += $(BIN)/dev/bin/bench_cpu_step
$(BIN)/dev/bin/bench_cpu_step: $(BUILD)/dev/bench_cpu_step.o $(CPU_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(CPU_LIBS)
