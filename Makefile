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
CXXFLAGS := -std=c++17 -g -Wall -Wextra -fopenmp -I. $(OPT) -MMD -MP
LDFLAGS  := -fopenmp
ifeq ($(SAN),1)
  # Sanitized build: objects and programs go elsewhere so the fast build is untouched.
  BUILD    := build-san
  BIN      := build-san/bin
  OPT      := -O1 -march=native
  SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
  CXXFLAGS += $(SANFLAGS)
  LDFLAGS  += $(SANFLAGS)
endif

# CUDA: nvcc from PATH or the default install; GPU arch from the card if there is one.
NVCC     ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
# With no card (and no GPU_ARCH=...), build for both Hopper (sm_90a) and Ampere (sm_80).
GPU_ARCH ?= $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d .)
ifeq ($(GPU_ARCH),)
  GPU_ARCH := 90a 80
endif
ifeq ($(GPU_ARCH),90)
  GPU_ARCH := 90a
endif
NVCCFLAGS := -O3 -std=c++17 -I. $(foreach a,$(GPU_ARCH),-gencode=arch=compute_$(a),code=sm_$(a))

PROGRAMS :=
TESTS    :=
BENCHES  :=

.PHONY: all test test-san bench clean
all:

# Generic rule: every .cpp compiles to $(BUILD)/<same path>.o
$(BUILD)/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@

# The test harness main(), linked into every C++ test program.
TEST_MAIN := $(BUILD)/test/test_main.o

# Order matters: later fragments use the object lists earlier ones define
# (HOST_OBJS/HOST_LIBS from host/, CPU_OBJS/CPU_LIBS from cpu/, EMU_* from emu/).
include $(wildcard host/build.mk data/build.mk cpu/build.mk emu/build.mk emu/stand_ins.mk \
                   kernels/build.mk test/build.mk)

# The CPU reference trainer: shared host code + the fp32 CPU model.
PROGRAMS += $(BIN)/train_gpt_cpu
$(BIN)/train_gpt_cpu: $(BUILD)/train_gpt_cpu.o $(BUILD)/cpu/cpu_train_model.o $(CPU_OBJS) $(HOST_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(CPU_LIBS) $(HOST_LIBS)

all: $(PROGRAMS) $(BENCHES)

test: $(PROGRAMS) $(TESTS)
	@BIN=$(BIN) BUILD=$(BUILD) bash test/run_tests.sh $(TESTS)

test-san:
	$(MAKE) SAN=1 test

bench: $(BENCHES)

clean:
	rm -rf build build-san $(filter-out $(BIN)/%,$(PROGRAMS)) $(PROGRAMS) $(BENCHES)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
