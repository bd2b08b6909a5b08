# Host stand-ins for cuBLASLt (on cpu/gemm.h) and NCCL (on MPI), for the emulated builds.
# They are plain .cpp files implementing the functions of NVIDIA's own cublasLt.h and nccl.h.
# Exposes, for the emulated trainer and tests:
#   EMU_CUBLASLT_OBJS, EMU_CUBLASLT_LIBS   the cuBLASLt stand-in and what it links (cpu/gemm)
#   EMU_NCCL_OBJS, MPI_CXXFLAGS, MPI_LIBS  the NCCL stand-in, and MPI's compile and link flags
#   EMU_STAND_IN_OBJS, EMU_STAND_IN_LIBS   all of the above together
#   STAND_INS_CXXFLAGS                     flags to compile a .cpp that includes cublasLt.h / nccl.h
# Each stand-in is left out (its tests print SKIPPED) where its headers or MPI are missing.

# CUDA headers: emu/build.mk's CUDA_INCLUDE when it found them, else the default install.
STAND_INS_CUDA_INCLUDE := $(or $(CUDA_INCLUDE),$(patsubst %/cublasLt.h,%,$(wildcard /usr/local/cuda/include/cublasLt.h)))
HAVE_CUBLASLT_H := $(wildcard $(STAND_INS_CUDA_INCLUDE)/cublasLt.h)
HAVE_NCCL_H     := $(wildcard $(STAND_INS_CUDA_INCLUDE)/nccl.h)
MPICXX          ?= mpicxx
# MPI's include dirs as system dirs: OpenMPI's C++ binding headers warn under -Wextra.
MPI_CXXFLAGS    := $(patsubst -I%,-isystem %,$(shell $(MPICXX) --showme:compile 2>/dev/null))
MPI_LIBS        := $(shell $(MPICXX) --showme:link 2>/dev/null)
STAND_INS_CXXFLAGS := -isystem $(STAND_INS_CUDA_INCLUDE)

EMU_CUBLASLT_OBJS :=
EMU_CUBLASLT_LIBS :=
EMU_NCCL_OBJS     :=
EMU_MPI_HOST_OBJS :=

ifneq ($(HAVE_CUBLASLT_H),)
  # The product runs on the CPU reference's gemm() (cpu/gemm.cpp picks OpenBLAS's kernels for this CPU).
  EMU_CUBLASLT_OBJS := $(BUILD)/emu/cublaslt_host.o $(BUILD)/cpu/gemm.o
  EMU_CUBLASLT_LIBS := $(CPU_LIBS)
  $(BUILD)/emu/cublaslt_host.o $(BUILD)/test/emu/test_cublaslt.o $(BUILD)/test/emu/test_cublaslt_fp8.o: \
    CXXFLAGS += $(STAND_INS_CXXFLAGS)

  # test_cublaslt_fp8: the stand-in's FP8 products and refusals.
  TESTS += $(BUILD)/test/test_cublaslt $(BUILD)/test/test_cublaslt_fp8
  BENCHES += $(BIN)/dev/bin/bench_cublaslt
  $(BUILD)/dev/bench_cublaslt.o: CXXFLAGS += $(STAND_INS_CXXFLAGS)
  $(BIN)/dev/bin/bench_cublaslt: $(BUILD)/dev/bench_cublaslt.o $(EMU_CUBLASLT_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(EMU_CUBLASLT_LIBS)
  $(BUILD)/test/test_cublaslt $(BUILD)/test/test_cublaslt_fp8: $(BUILD)/test/%: $(BUILD)/test/emu/%.o \
    $(EMU_CUBLASLT_OBJS) $(TEST_MAIN)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(EMU_CUBLASLT_LIBS)
else
  TESTS += test/emu/test_cublaslt_skipped.sh
endif

ifneq ($(and $(HAVE_NCCL_H),$(MPI_LIBS)),)
  EMU_NCCL_OBJS := $(BUILD)/emu/nccl_host.o
  # With the emulator: the host's own MPI calls first run the queued streams' work (mpi_host_calls.cpp).
  EMU_MPI_HOST_OBJS := $(BUILD)/emu/mpi_host_calls.o
  $(BUILD)/emu/nccl_host.o $(BUILD)/emu/mpi_host_calls.o $(BUILD)/test/emu/test_nccl.o: \
    CXXFLAGS += $(STAND_INS_CXXFLAGS) $(MPI_CXXFLAGS)

  # test_nccl.sh runs this program under mpirun -np 2 and -np 4; the rule below builds it first.
  $(BUILD)/test/test_nccl: $(BUILD)/test/emu/test_nccl.o $(EMU_NCCL_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(MPI_LIBS)
  test/emu/test_nccl.sh: $(BUILD)/test/test_nccl
endif
TESTS += test/emu/test_nccl.sh

EMU_STAND_IN_OBJS := $(EMU_CUBLASLT_OBJS) $(EMU_NCCL_OBJS) $(EMU_MPI_HOST_OBJS)
EMU_STAND_IN_LIBS := $(EMU_CUBLASLT_LIBS) $(MPI_LIBS)
