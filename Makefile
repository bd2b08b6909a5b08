# Top-level build.
#   make            build every program this machine can build (CUDA ones only where nvcc exists)
#   make test       run the whole test suite; ends with "N passed, N failed, N skipped"
#   make test-san   the same suite built with AddressSanitizer + UndefinedBehaviorSanitizer
#   make bench      build the dev/ benchmarks (they print figures; run them by hand)
# Each folder adds its own rules in <folder>/build.mk, appending to PROGRAMS, TESTS and BENCHES.

CXX      ?= g++
SAN      ?= 0
BUILD    := build
BIN      := .
OPT      := -O3 -march=native
# Debug information: none in the fast build (make DEBUG_INFO=-g for a debugger); line tables only
# (-g1) in the sanitized one, which is what its reports need. Full -g made objects take 1.5 to 1.7
# times as long to compile, and twice as long under the sanitizers.
DEBUG_INFO ?=
CXXFLAGS = -std=c++17 $(DEBUG_INFO) -Wall -Wextra -fopenmp -I. $(OPT) -MMD -MP
LDFLAGS  := -fopenmp
ifeq ($(SAN),1)
  # Sanitized build: objects and programs go elsewhere so the fast build is untouched.
  BUILD    := build-san
  BIN      := build-san/bin
  DEBUG_INFO := -g1
  SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
  CXXFLAGS += $(SANFLAGS)
  LDFLAGS  += $(SANFLAGS)
endif
# The emulated programs come in bf16 (what a GPU runs) and fp32 (a build for tight checks against the
# CPU reference, never for training). The sanitized build makes the bf16 ones only: their fp32 twins
# are the same host code, and the same kernels with another element type, which the plain build checks.
FP32_EMU_PROGRAMS := $(if $(filter 1,$(SAN)),,yes)

# CUDA: nvcc from PATH or the default install; GPU arch from the card if there is one.
NVCC     ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
# With no card (and no GPU_ARCH=...): machine code for Hopper (sm_90a) and PTX for Ampere (compute_80,
# compiled by the driver on first use), which checks that every kernel compiles for both at two thirds
# of the cost. GPU_PTX_ARCH adds PTX-only targets; GPU_ARCH="90a 80" builds machine code for both.
GPU_ARCH ?= $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d .)
ifeq ($(GPU_ARCH),)
  GPU_ARCH := 90a
  GPU_PTX_ARCH ?= 80
endif
ifeq ($(GPU_ARCH),90)
  GPU_ARCH := 90a
endif
NVCCFLAGS := -O3 -std=c++17 -I. $(foreach a,$(GPU_ARCH),-gencode=arch=compute_$(a),code=sm_$(a)) \
             $(foreach a,$(GPU_PTX_ARCH),-gencode=arch=compute_$(a),code=compute_$(a))

PROGRAMS :=
TESTS    :=
BENCHES  :=

.PHONY: all test test-san tests bench clean
all:

# Generic rule: every .cpp compiles to $(BUILD)/<same path>.o
$(BUILD)/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@

# The test harness main(), linked into every C++ test program.
TEST_MAIN := $(BUILD)/test/test_main.o

# Order matters: later fragments use the object lists earlier ones define (BASE_OBJS from base/,
# PLAN_OBJS and PARALLEL_OBJS from parallel/, HOST_OBJS/HOST_LIBS from train/, CPU_OBJS/CPU_LIBS
# from cpu/, EMU_* from emu/).
include $(wildcard base/build.mk parallel/build.mk train/build.mk data/build.mk cpu/build.mk \
                   emu/build.mk emu/stand_ins.mk kernels/build.mk test/build.mk)

# The CPU reference trainer: shared host code + the fp32 CPU models (GPT-2 and Llama 3).
CPU_TRAINER_OBJS := $(BUILD)/cpu/cpu_train_model.o $(BUILD)/cpu/llama_train_model.o $(BUILD)/cpu/fp32_train_model.o \
                    $(CPU_OBJS) $(LLAMA_CPU_OBJS)
PROGRAMS += $(BIN)/train_gpt_cpu
$(BIN)/train_gpt_cpu: $(BUILD)/train_gpt_cpu.o $(CPU_TRAINER_OBJS) $(HOST_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(CPU_LIBS) $(HOST_LIBS)

# generate: text from a model file or a run's checkpoint, and eval-only val loss (generate.cpp); it
# links the tokenizer for its prompts. Where nvcc exists, ./generate is generate.cpp built by nvcc
# (cuBLASLt linked): on the GPU when it finds a device (gpu/gpu_generate.h), else on the CPU model; the
# sanitized build and a build without nvcc (make NVCC=) build it by g++, CPU only. build/generate_emu
# (bf16) and build/generate_emu_fp32 are generate.cpp through the emulator, so that the tests run
# --device gpu on the CPU. Its test trains a model with train_gpt_cpu.
# A Llama 3 model file takes generate_llama.cpp's path (built once, by g++), with the same choice of
# device: the GPU path it needs (gpu/llama_gpu_generate.h) comes from the generate.cpp it is linked with.
GENERATE_OBJS := $(sort $(CPU_OBJS) $(LLAMA_CPU_OBJS) $(HOST_OBJS) $(TOKENIZER_OBJS) $(BUILD)/generate_llama.o)
PROGRAMS += $(BIN)/generate
ifneq ($(NVCC),)
  ifneq ($(SAN),1)
    GENERATE_BY_NVCC := 1
  endif
endif
ifeq ($(GENERATE_BY_NVCC),1)
  $(BIN)/generate: $(BUILD)/generate.cuda.o $(GENERATE_OBJS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $^ -o $@ $(CUDA_LIBS) $(HOST_LIBS) $(TOKENIZER_LIBS)
else
  $(BIN)/generate: $(BUILD)/generate.o $(GENERATE_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(CPU_LIBS) $(HOST_LIBS) $(TOKENIZER_LIBS)
endif
GENERATE_EMU :=
ifneq ($(CUDA_INCLUDE),)
  GENERATE_EMU := $(BUILD)/generate_emu $(if $(FP32_EMU_PROGRAMS),$(BUILD)/generate_emu_fp32)
  PROGRAMS += $(GENERATE_EMU)
  $(BUILD)/generate.emu.o: generate.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(EMU_CXXFLAGS) $(STAND_INS_CXXFLAGS) -c $< -o $@
  $(BUILD)/generate.fp32.emu.o: generate.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(EMU_CXXFLAGS) $(STAND_INS_CXXFLAGS) -DENABLE_FP32 -c $< -o $@
  $(BUILD)/generate_emu: $(BUILD)/generate.emu.o
  $(BUILD)/generate_emu_fp32: $(BUILD)/generate.fp32.emu.o
  $(GENERATE_EMU): $(EMU_OBJS) $(sort $(EMU_CUBLASLT_OBJS) $(GENERATE_OBJS))
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(EMU_LIBS) $(EMU_CUBLASLT_LIBS) $(CPU_LIBS) $(HOST_LIBS) $(TOKENIZER_LIBS)
endif
# The test links the CPU decoder to judge the bf16 GPU path's tokens.
TESTS += $(BUILD)/test/train/test_generate
$(BUILD)/test/train/test_generate: $(BUILD)/test/train/test_generate.o $(CPU_OBJS) $(HOST_OBJS) $(TEST_MAIN) \
                                  | $(BIN)/generate $(BIN)/train_gpt_cpu $(GENERATE_EMU)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $(filter %.o,$^) -o $@ $(CPU_LIBS) $(HOST_LIBS)
# Llama 3 model files: the test writes them, and draws the expected tokens and losses itself with
# the CPU Llama model (and Llama 3's tokenizer, for text prompts); it judges the emulated GPU's tokens
# with the CPU Llama decoder.
TESTS += $(BUILD)/test/train/test_generate_llama
$(BUILD)/test/train/test_generate_llama: $(BUILD)/test/train/test_generate_llama.o \
                                        $(sort $(LLAMA_CPU_OBJS) $(CPU_OBJS) $(HOST_OBJS) $(TOKENIZER_OBJS)) \
                                        $(TEST_MAIN) | $(BIN)/generate $(GENERATE_EMU)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $(filter %.o,$^) -o $@ $(CPU_LIBS) $(HOST_LIBS) $(TOKENIZER_LIBS)

# convert: llm.c model files to and from Hugging Face transformers folders, fp32 <-> bf16 (convert.cpp);
# the tokenizer objects check GPT-2's vocabulary files before they are copied. Its tests: an
# independent safetensors reader and double-precision GPT-2 forward over the exported folder, the
# import of transformers' layouts, and every malformed input (test/convert/).
PROGRAMS += $(BIN)/convert
$(BIN)/convert: $(BUILD)/convert.o $(sort $(HOST_OBJS) $(TOKENIZER_OBJS))
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(HOST_LIBS) $(TOKENIZER_LIBS)
TESTS += $(BUILD)/test/convert/test_convert
$(BUILD)/test/convert/test_convert: $(BUILD)/test/convert/test_convert.o $(CPU_OBJS) $(HOST_OBJS) \
                                    $(TEST_MAIN) | $(BIN)/convert $(BIN)/generate $(BIN)/train_gpt_cpu
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $(filter %.o,$^) -o $@ $(CPU_LIBS) $(HOST_LIBS)

# Llama 3 (train/hf_llama.h): round trips, tied embeddings, bad folders, and a Python reader's loss
# (test/convert/llama_reader.py, standard library only; SKIPPED without python3) against the CPU Llama.
TESTS += $(BUILD)/test/convert/test_convert_llama
$(BUILD)/test/convert/test_convert_llama: $(BUILD)/test/convert/test_convert_llama.o $(LLAMA_CPU_OBJS) \
                                          $(CPU_OBJS) $(HOST_OBJS) $(TEST_MAIN) | $(BIN)/convert
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $(filter %.o,$^) -o $@ $(CPU_LIBS) $(HOST_LIBS)

# The CPU trainer training Llama 3 (test/train/test_train_llama.cpp): against a loop written in the test
# over the CPU Llama model, bitwise resumes, samples, bad input; and the CUDA trainer's refusal.
TESTS += $(BUILD)/test/train/test_train_llama
$(BUILD)/test/train/test_train_llama: $(BUILD)/test/train/test_train_llama.o $(LLAMA_CPU_OBJS) $(CPU_OBJS) \
                                      $(HOST_OBJS) $(TEST_MAIN) | $(BIN)/train_gpt_cpu
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $(filter %.o,$^) -o $@ $(CPU_LIBS) $(HOST_LIBS)

# A reader in Python's standard library runs the export (fp32, bf16, fp16) against ./generate's loss
# and greedy tokens; transformers itself loads it, where a python3 has torch and transformers (else
# SKIPPED). Plain build only: their subject is the folder.
ifneq ($(SAN),1)
  TESTS += test/convert/test_export_python.sh test/convert/test_hf_transformers.sh
endif

# The key/value cache's speed-up in ./generate: ms per token with and without it at 256 and 1024.
BENCHES += $(BIN)/dev/bin/bench_generate
$(BIN)/dev/bin/bench_generate: $(BUILD)/dev/bench_generate.o $(CPU_OBJS) $(HOST_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(CPU_LIBS) $(HOST_LIBS)

# The CUDA trainer. ./train_gpt is train_gpt.cu built by nvcc where nvcc exists; elsewhere it is the
# CPU trainer under that name, saying in one line that it was built without CUDA. ./train_gpt_emu (and
# train_gpt_emu_fp32) is train_gpt.cu built through the emulator (emu/): the real kernels on the CPU,
# for the tests. Both link the CPU model too: train_gpt falls back to it when there is no device.
# Every parallelism (parallel/comm/, PARALLEL_OBJS): ranks over MPI, and NCCL (the real one under
# nvcc, the stand-in over MPI in the emulated build).
TRAINER_HOST_OBJS := $(CPU_TRAINER_OBJS) $(HOST_OBJS)
$(PARALLEL_OBJS): CXXFLAGS += $(MPI_CXXFLAGS) $(STAND_INS_CXXFLAGS)
# The GPU model (gpu/*.cu), built three ways: by nvcc (GPU_MODEL_CUDA_OBJS), and through the emulator
# in bf16 and fp32 (GPU_MODEL_EMU_OBJS, GPU_MODEL_EMU_FP32_OBJS); the trainer, its tests and the
# benchmarks link it.
GPU_MODEL_SRCS := $(wildcard gpu/*.cu)
GPU_MODEL_CUDA_OBJS := $(patsubst %.cu,$(BUILD)/%.cuda.o,$(GPU_MODEL_SRCS))
GPU_MODEL_EMU_OBJS := $(patsubst %.cu,$(BUILD)/%.emu.o,$(GPU_MODEL_SRCS))
GPU_MODEL_EMU_FP32_OBJS := $(patsubst %.cu,$(BUILD)/%.fp32.emu.o,$(GPU_MODEL_SRCS))
$(GPU_MODEL_EMU_OBJS) $(GPU_MODEL_EMU_FP32_OBJS): CXXFLAGS += $(STAND_INS_CXXFLAGS)
ifneq ($(NVCC),)
  ifneq ($(SAN),1)
    PROGRAMS += $(BIN)/train_gpt
    $(BIN)/train_gpt: $(BUILD)/train_gpt.cuda.o $(GPU_MODEL_CUDA_OBJS) $(TRAINER_HOST_OBJS) $(PARALLEL_OBJS)
	$(NVCC) $(NVCCFLAGS) $^ -o $@ $(CUDA_LIBS) -lnccl $(MPI_LIBS) $(HOST_LIBS)
  endif
else
  PROGRAMS += $(BIN)/train_gpt
  $(BUILD)/train_gpt_nocuda.o: train_gpt_cpu.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -DTRAIN_GPT_WITHOUT_CUDA -c $< -o $@
  $(BIN)/train_gpt: $(BUILD)/train_gpt_nocuda.o $(TRAINER_HOST_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(CPU_LIBS) $(HOST_LIBS)
endif
ifneq ($(CUDA_INCLUDE),)
  TRAINER_EMU_OBJS := $(EMU_OBJS) $(sort $(EMU_STAND_IN_OBJS) $(TRAINER_HOST_OBJS)) $(PARALLEL_OBJS)
  PROGRAMS += $(BIN)/train_gpt_emu $(if $(FP32_EMU_PROGRAMS),$(BIN)/train_gpt_emu_fp32)
  $(BUILD)/train_gpt.emu.o $(BUILD)/train_gpt.fp32.emu.o: CXXFLAGS += $(STAND_INS_CXXFLAGS)
  $(BIN)/train_gpt_emu: $(BUILD)/train_gpt.emu.o $(GPU_MODEL_EMU_OBJS) $(TRAINER_EMU_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(EMU_LIBS) $(EMU_STAND_IN_LIBS) $(CPU_LIBS) $(HOST_LIBS)
  $(BIN)/train_gpt_emu_fp32: $(BUILD)/train_gpt.fp32.emu.o $(GPU_MODEL_EMU_FP32_OBJS) $(TRAINER_EMU_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(EMU_LIBS) $(EMU_STAND_IN_LIBS) $(CPU_LIBS) $(HOST_LIBS)
endif

# The GPU model against the CPU reference (test/gpu/test_gpu_model.cu), bf16 and fp32, emulated.
ifneq ($(CUDA_INCLUDE),)
  GPU_MODEL_TESTS := $(BUILD)/test/gpu/test_gpu_model $(if $(FP32_EMU_PROGRAMS),$(BUILD)/test/gpu/fp32/test_gpu_model) \
                     $(BUILD)/test/gpu/test_gpu_llama $(if $(FP32_EMU_PROGRAMS),$(BUILD)/test/gpu/fp32/test_gpu_llama)
  TESTS += $(GPU_MODEL_TESTS) test/trainer/test_train_gpt_emu.sh
  # Llama 3 on the emulated trainer against train_gpt_cpu, and over two ranks with ZeRO: a whole-run,
  # multi-rank test, so the plain build only (as the other multi-rank tests below).
  ifneq ($(SAN),1)
    TESTS += test/trainer/test_train_llama_emu.sh test/trainer/test_dry_run_without_gpu.sh
  endif
  # Data parallelism: the emulated trainer as several MPI ranks (test/parallel/). The slowest whole-run
  # tests (multi-rank equivalence, failing ranks, restarts after SIGKILL) run in the plain build only:
  # they exercise processes and files more than memory safety, and the sanitized build would take
  # minutes more.
  ifneq ($(SAN),1)
    TESTS += test/trainer/test_restart_after_kill.sh
  endif
  ifneq ($(MPI_LIBS),)
    MULTI_RANK_TESTS := $(patsubst %,$(BUILD)/test/parallel/%,test_data_parallel test_tensor_parallel \
                          test_pipeline_parallel test_layer_adaptation test_grad_compression)
    ifneq ($(SAN),1)
      TESTS += $(MULTI_RANK_TESTS) test/parallel/test_rank_failures.sh
      # A rank throttled (SIGSTOP/SIGCONT) among three: the phase timers and the straggler line name it;
      # the pipeline's bubble and the tensor group's waits timed on two ranks.
      TESTS += test/parallel/test_straggler.sh test/parallel/test_phase_waits.sh
      # Elastic training under scripts/supervise.sh --ranks 2:4: three lost ranks, snapshots in memory,
      # the losses of the uninterrupted run.
      TESTS += test/parallel/test_elastic.sh
      # The multi-rank suites run with the emulator's streams queued (EMU_STREAMS, emu/README.md), so that
      # a missing stream wait fails them; the trainer gives the same bits either way (test_stream_order).
      QUEUED_STREAMS_TESTS += $(MULTI_RANK_TESTS) test/parallel/test_rank_failures.sh \
                              test/trainer/test_signal_one_rank.sh
    endif
    $(MULTI_RANK_TESTS): $(BUILD)/test/parallel/%: $(BUILD)/test/parallel/%.o $(HOST_OBJS) \
                                           $(TEST_MAIN) | $(BIN)/train_gpt_emu_fp32 $(BIN)/train_gpt_emu $(BIN)/train_gpt_cpu
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $(filter %.o,$^) -o $@ $(HOST_LIBS)
    # Deliberately broken variants of the trainer for the tests that must catch them (-DTEST_BROKEN_VARIANTS,
    # each chosen at run time by an environment variable): passes.cu and parameter_scope.cu leave out
    # the cross-stream wait TEST_DROP_WAIT names (parallel/comm/stream_wait.h: test_stream_order.cpp),
    # gpt2_layers.cu with TEST_UNDECLARED_BUCKET=1 leaves the next layer's norm out of a layer's declared
    # reads (gpu/parameter_scope.h: test_stream_order.cpp), optimizer.cu with
    # TEST_LOCAL_TRUST_RATIO=1 takes LAMB's and LARS's norms over each rank's pieces
    # (test_layer_adaptation.cpp).
    BROKEN_TRAINER := $(BUILD)/test/parallel/train_gpt_emu_fp32_broken
    BROKEN_SOURCES := passes parameter_scope gpt2_layers optimizer
    ifneq ($(SAN),1)
      TESTS += $(BUILD)/test/parallel/test_stream_order
    endif
    $(BUILD)/test/parallel/%.broken.fp32.emu.o: gpu/%.cu
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(STAND_INS_CXXFLAGS) $(EMU_CXXFLAGS) -DENABLE_FP32 -DTEST_BROKEN_VARIANTS \
	  -c $< -o $@
    $(BROKEN_TRAINER): $(BUILD)/train_gpt.fp32.emu.o \
                       $(filter-out $(patsubst %,\%/%.fp32.emu.o,$(BROKEN_SOURCES)),$(GPU_MODEL_EMU_FP32_OBJS)) \
                       $(patsubst %,$(BUILD)/test/parallel/%.broken.fp32.emu.o,$(BROKEN_SOURCES)) $(TRAINER_EMU_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(EMU_LIBS) $(EMU_STAND_IN_LIBS) $(CPU_LIBS) $(HOST_LIBS)
    $(BUILD)/test/parallel/test_layer_adaptation: | $(BROKEN_TRAINER)
    $(BUILD)/test/parallel/test_stream_order: $(BUILD)/test/parallel/test_stream_order.o $(HOST_OBJS) \
                                              $(TEST_MAIN) | $(BIN)/train_gpt_emu_fp32 $(BROKEN_TRAINER)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $(filter %.o,$^) -o $@ $(HOST_LIBS)
  endif
  $(BUILD)/test/gpu/test_gpu_model.emu.o $(BUILD)/test/gpu/test_gpu_model.fp32.emu.o: \
    CXXFLAGS += $(STAND_INS_CXXFLAGS)
  $(BUILD)/test/gpu/test_gpu_model: $(BUILD)/test/gpu/test_gpu_model.emu.o $(GPU_MODEL_EMU_OBJS)
  $(BUILD)/test/gpu/fp32/test_gpu_model: $(BUILD)/test/gpu/test_gpu_model.fp32.emu.o \
      $(GPU_MODEL_EMU_FP32_OBJS)
  # Llama 3 on the GPU model (test/gpu/test_gpu_llama.cu) against cpu/llama_cpu, the same way.
  $(BUILD)/test/gpu/test_gpu_llama.emu.o $(BUILD)/test/gpu/test_gpu_llama.fp32.emu.o: \
    CXXFLAGS += $(STAND_INS_CXXFLAGS)
  $(BUILD)/test/gpu/test_gpu_llama: $(BUILD)/test/gpu/test_gpu_llama.emu.o $(GPU_MODEL_EMU_OBJS)
  $(BUILD)/test/gpu/fp32/test_gpu_llama: $(BUILD)/test/gpu/test_gpu_llama.fp32.emu.o \
      $(GPU_MODEL_EMU_FP32_OBJS)
  # The same tests built by nvcc, run on a GPU by test/kernels/gpu_kernel_tests.sh.
  ifneq ($(NVCC),)
    ifneq ($(SAN),1)
      PROGRAMS += $(BUILD)/test/gpu/cuda/test_gpu_model $(BUILD)/test/gpu/cuda/test_gpu_llama
      $(BUILD)/test/gpu/cuda/test_gpu_model: $(BUILD)/test/gpu/test_gpu_model.cuda.o \
          $(BUILD)/test/test_main.cuda.o $(GPU_MODEL_CUDA_OBJS) $(TRAINER_HOST_OBJS) $(PARALLEL_OBJS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $^ -o $@ $(CUDA_LIBS) -lnccl $(MPI_LIBS) $(HOST_LIBS)
      $(BUILD)/test/gpu/cuda/test_gpu_llama: $(BUILD)/test/gpu/test_gpu_llama.cuda.o \
          $(BUILD)/test/test_main.cuda.o $(GPU_MODEL_CUDA_OBJS) $(TRAINER_HOST_OBJS) $(PARALLEL_OBJS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $^ -o $@ $(CUDA_LIBS) -lnccl $(MPI_LIBS) $(HOST_LIBS)
    endif
  endif
  $(GPU_MODEL_TESTS): $(TEST_MAIN) $(TRAINER_EMU_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $(filter %.o,$^) -o $@ $(EMU_LIBS) $(EMU_STAND_IN_LIBS) $(CPU_LIBS) $(HOST_LIBS)
endif

# The GPU key/value-cache decoders of the CUDA trainer's samples and ./generate (gpu/gpt_decode.h and
# gpu/llama_decode.h, their attention in kernels/decode_attention.h) against the CPU decoders and
# GPUModel's forward pass (test/gpu/test_gpu_decode.cu for GPT-2, test_gpu_llama_decode.cu for
# Llama 3; the kernel's own test is test/kernels/test_decode_attention.cu): bf16 and fp32 through the
# emulator; built by nvcc too, run on a GPU by test/kernels/gpu_kernel_tests.sh; and GPT-2's
# benchmark, for a GPU.
ifneq ($(CUDA_INCLUDE),)
  GPU_DECODE_TESTS := $(BUILD)/test/gpu/test_gpu_decode $(if $(FP32_EMU_PROGRAMS),$(BUILD)/test/gpu/fp32/test_gpu_decode) \
                      $(BUILD)/test/gpu/test_gpu_llama_decode \
                      $(if $(FP32_EMU_PROGRAMS),$(BUILD)/test/gpu/fp32/test_gpu_llama_decode)
  TESTS += $(GPU_DECODE_TESTS)
  $(BUILD)/test/gpu/test_gpu_decode.emu.o $(BUILD)/test/gpu/test_gpu_decode.fp32.emu.o \
  $(BUILD)/test/gpu/test_gpu_llama_decode.emu.o $(BUILD)/test/gpu/test_gpu_llama_decode.fp32.emu.o: \
    CXXFLAGS += $(STAND_INS_CXXFLAGS)
  $(BUILD)/test/gpu/test_gpu_decode: $(BUILD)/test/gpu/test_gpu_decode.emu.o $(GPU_MODEL_EMU_OBJS)
  $(BUILD)/test/gpu/fp32/test_gpu_decode: $(BUILD)/test/gpu/test_gpu_decode.fp32.emu.o \
      $(GPU_MODEL_EMU_FP32_OBJS)
  $(BUILD)/test/gpu/test_gpu_llama_decode: $(BUILD)/test/gpu/test_gpu_llama_decode.emu.o $(GPU_MODEL_EMU_OBJS)
  $(BUILD)/test/gpu/fp32/test_gpu_llama_decode: $(BUILD)/test/gpu/test_gpu_llama_decode.fp32.emu.o \
      $(GPU_MODEL_EMU_FP32_OBJS)
  $(GPU_DECODE_TESTS): $(TEST_MAIN) $(TRAINER_EMU_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $(filter %.o,$^) -o $@ $(EMU_LIBS) $(EMU_STAND_IN_LIBS) $(CPU_LIBS) $(HOST_LIBS)
  ifneq ($(NVCC),)
    ifneq ($(SAN),1)
      PROGRAMS += $(BUILD)/test/gpu/cuda/test_gpu_decode $(BUILD)/test/gpu/cuda/test_gpu_llama_decode
      $(BUILD)/test/gpu/cuda/test_gpu_llama_decode: $(BUILD)/test/gpu/test_gpu_llama_decode.cuda.o \
          $(BUILD)/test/test_main.cuda.o $(GPU_MODEL_CUDA_OBJS) $(TRAINER_HOST_OBJS) $(PARALLEL_OBJS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $^ -o $@ $(CUDA_LIBS) -lnccl $(MPI_LIBS) $(HOST_LIBS)
      $(BUILD)/test/gpu/cuda/test_gpu_decode: $(BUILD)/test/gpu/test_gpu_decode.cuda.o \
          $(BUILD)/test/test_main.cuda.o $(GPU_MODEL_CUDA_OBJS) $(TRAINER_HOST_OBJS) $(PARALLEL_OBJS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $^ -o $@ $(CUDA_LIBS) -lnccl $(MPI_LIBS) $(HOST_LIBS)
      # ms per generated token on the GPU, through the cache and by recomputation (dev/bench_generate_gpu.cu).
      BENCHES += $(BIN)/dev/bin/bench_generate_gpu
      $(BIN)/dev/bin/bench_generate_gpu: $(BUILD)/dev/bench_generate_gpu.cuda.o $(GPU_MODEL_CUDA_OBJS) \
          $(TRAINER_HOST_OBJS) $(PARALLEL_OBJS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $^ -o $@ $(CUDA_LIBS) -lnccl $(MPI_LIBS) $(HOST_LIBS)
    endif
  endif
endif

# The PyTorch reference (dev/gpt2_torch.py) against train_gpt_cpu, where a python3 has torch (else
# SKIPPED); plain build only (its subject is the script).
ifneq ($(SAN),1)
  TESTS += test/trainer/test_gpt2_torch.sh
endif

# The training-step benchmark (dev/bench_step.cu: GPUModel's whole step, then each op class alone):
# built by nvcc it is the benchmark dev/bin/bench_step (run on a GPU by scripts/gpu_check.sh); built
# through the emulator, a smoke test on a tiny model (test/trainer/test_bench_step_emu.sh; plain build
# only, as the other benchmarks' emulated checks).
ifneq ($(CUDA_INCLUDE),)
ifneq ($(SAN),1)
  PROGRAMS += $(BUILD)/dev/bench_step_emu
  TESTS += test/trainer/test_bench_step_emu.sh
endif
  $(BUILD)/dev/bench_step.emu.o: CXXFLAGS += $(STAND_INS_CXXFLAGS)
  $(BUILD)/dev/bench_step_emu: $(BUILD)/dev/bench_step.emu.o $(GPU_MODEL_EMU_OBJS) $(TRAINER_EMU_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(EMU_LIBS) $(EMU_STAND_IN_LIBS) $(CPU_LIBS) $(HOST_LIBS)
endif
ifneq ($(NVCC),)
  ifneq ($(SAN),1)
    BENCHES += $(BIN)/dev/bin/bench_step
    $(BIN)/dev/bin/bench_step: $(BUILD)/dev/bench_step.cuda.o $(GPU_MODEL_CUDA_OBJS) $(TRAINER_HOST_OBJS) \
        $(PARALLEL_OBJS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $^ -o $@ $(CUDA_LIBS) -lnccl $(MPI_LIBS) $(HOST_LIBS)
  endif
endif

all: $(PROGRAMS) $(BENCHES)

test: $(PROGRAMS) $(TESTS)
	@BIN=$(BIN) BUILD=$(BUILD) QUEUED_STREAMS_TESTS="$(QUEUED_STREAMS_TESTS)" bash test/run_tests.sh $(TESTS)

test-san:
	$(MAKE) SAN=1 test

# builds everything `make test` runs, without running it
tests: $(PROGRAMS) $(TESTS)

bench: $(BENCHES)

clean:
	rm -rf build build-san build-fuzz build-fuzz.log $(filter-out $(BIN)/%,$(PROGRAMS)) $(PROGRAMS) $(BENCHES)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
