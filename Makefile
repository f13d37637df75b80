# Makefile: builds the trainer for the GPU (nvcc) or the CPU runtime (dev/cpu/cucc), and runs
# the tests.
#   make            GPU binaries ./train_gpt ./test_gpt (BF16) ./train_gpt_fp32 ./test_gpt_fp32
#   make cpu        the same four under build/cpu/, built with dev/cpu/cucc (no GPU needed)
#   make test       the whole suite: natively when a GPU is visible, else on the CPU runtime
#   make train      setup, data, build and the default training run (scripts/train_austen.sh)
#   make dev-cuda   the kernel harnesses in dev/cuda; make bench runs their GPU benchmarks
#   make fuzz       the libFuzzer harnesses of the file parsers (fuzz/), FUZZ_SECONDS each
# Variables: GPU_ARCH (nvcc -gencode flags), NO_MULTI_GPU=1 (build without NCCL/MPI),
#            CUDA_HOME (default /usr/local/cuda), FUZZ_SECONDS (default 60), FUZZ_CXX (clang++).
# Builds run on every core unless the command line says how many (-j N).
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
GPU_ARCH  ?= -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_80,code=sm_80
NVCC_FLAGS = -O3 -std=c++17 $(GPU_ARCH)
NVCC_LIBS  = -lcublasLt -lcublas
CUCC       = dev/cpu/cucc
CUCC_FLAGS = -O2 -std=c++17
CUCC_LIBS  = -lcublasLt

# Multi-GPU support (NCCL + MPI) when their headers are present, unless NO_MULTI_GPU=1.
MPI_COMPILE := $(shell mpicxx --showme:compile 2>/dev/null)
MPI_LINK    := $(shell mpicxx --showme:link 2>/dev/null)
HAVE_NCCL   := $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h)
ifeq ($(NO_MULTI_GPU),)
ifneq ($(and $(MPI_COMPILE),$(HAVE_NCCL)),)
NVCC_FLAGS += -DMULTI_GPU $(filter -I% -D%,$(MPI_COMPILE))
NVCC_LIBS  += -lnccl $(filter -L% -l%,$(MPI_LINK))
CUCC_FLAGS += -DMULTI_GPU --mpi
CUCC_LIBS  += -lnccl
endif
endif

SOURCES      = train_gpt.cu train_run.cuh train_checkpoint.cuh $(wildcard llmc/*.cuh llmc/*.h)
TEST_SOURCES = test_gpt.cu $(SOURCES)
# what a CPU build also depends on: cucc, its headers and the runtime libraries' sources (cucc
# rebuilds the libraries before it links; a change there must relink the trainers)
CUCC_DEPS    = $(CUCC) $(wildcard dev/cpu/cucc_ptx.py dev/cpu/include/cucc/*.h dev/cpu/*/*.cpp dev/cpu/*/*.h)
GPU_BINARIES = train_gpt test_gpt train_gpt_fp32 test_gpt_fp32
CPU_BINARIES = $(addprefix build/cpu/,$(GPU_BINARIES))

.PHONY: all cpu test train dev-cuda bench fuzz check-gpu-deps check-cpu-deps check-python-deps \
        check-fuzz-deps clean clean-gpu
all: check-gpu-deps $(GPU_BINARIES)

train_gpt: $(SOURCES)
	$(NVCC) $(NVCC_FLAGS) $< -o $@ $(NVCC_LIBS)
train_gpt_fp32: $(SOURCES)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP32 $< -o $@ $(NVCC_LIBS)
test_gpt: $(TEST_SOURCES)
	$(NVCC) $(NVCC_FLAGS) $< -o $@ $(NVCC_LIBS)
test_gpt_fp32: $(TEST_SOURCES)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP32 $< -o $@ $(NVCC_LIBS)

cpu: check-cpu-deps $(CPU_BINARIES)
# the trainer in which a test can leave out one wait between the streams (llmc/zero.cuh)
build/cpu/train_gpt_drop_waits: $(SOURCES) $(CUCC_DEPS)
	@mkdir -p $(@D)
	$(CUCC) $(CUCC_FLAGS) -DTEST_DROP_WAITS $< -o $@ $(CUCC_LIBS)
build/cpu/train_gpt: $(SOURCES) $(CUCC_DEPS)
	@mkdir -p $(@D)
	$(CUCC) $(CUCC_FLAGS) $< -o $@ $(CUCC_LIBS)
build/cpu/train_gpt_fp32: $(SOURCES) $(CUCC_DEPS)
	@mkdir -p $(@D)
	$(CUCC) $(CUCC_FLAGS) -DENABLE_FP32 $< -o $@ $(CUCC_LIBS)
build/cpu/test_gpt: $(TEST_SOURCES) $(CUCC_DEPS)
	@mkdir -p $(@D)
	$(CUCC) $(CUCC_FLAGS) $< -o $@ $(CUCC_LIBS)
build/cpu/test_gpt_fp32: $(TEST_SOURCES) $(CUCC_DEPS)
	@mkdir -p $(@D)
	$(CUCC) $(CUCC_FLAGS) -DENABLE_FP32 $< -o $@ $(CUCC_LIBS)

# The default run: installs what is missing, prepares Jane Austen's novels, builds, trains and
# leaves checkpoints, log.jsonl and loss.png in out/austen_cpu (out/austen_gpu on a GPU).
train:
	scripts/setup.sh
	scripts/train_austen.sh

# Kernel harnesses (dev/cuda): variants, CPU-reference checks and GPU benchmarks.
dev-cuda:
	$(MAKE) -C dev/cuda GPU_ARCH="$(GPU_ARCH)"
bench:
	$(MAKE) -C dev/cuda bench GPU_ARCH="$(GPU_ARCH)"

# Fuzzing: each fuzz/NAME.cc is a libFuzzer harness of one parser of llmc/, built host-only
# with clang under AddressSanitizer and UndefinedBehaviorSanitizer into build/fuzz/NAME.
# fuzz/run.py makes the seed corpora with the project's own tools and runs every harness for
# FUZZ_SECONDS (the suite runs each for a few seconds).
FUZZ_CXX     ?= $(firstword $(shell command -v clang++-14 clang++ 2>/dev/null) clang++)
FUZZ_FLAGS    = -std=c++17 -O1 -g -Wall -Wextra -fsanitize=fuzzer,address,undefined \
                -fno-sanitize-recover=all
FUZZ_SECONDS ?= 60
build/fuzz/%: fuzz/%.cc $(wildcard fuzz/*.h) $(wildcard llmc/*.h)
	@mkdir -p $(@D)
	$(FUZZ_CXX) $(FUZZ_FLAGS) $< -o $@
fuzz: check-fuzz-deps
	python3 fuzz/run.py --seconds $(FUZZ_SECONDS)

# The suite runs natively when nvidia-smi lists a GPU, otherwise through the CPU runtime.
HAVE_GPU := $(shell nvidia-smi -L 2>/dev/null | grep -q GPU && echo 1)
CORES    := $(shell nproc 2>/dev/null || echo 2)
ifeq ($(HAVE_GPU),1)
test: all
	python3 scripts/run_tests.py --native --gpt
else
# the five CPU trainers build one per core (about 30 s each on one core)
test: check-cpu-deps check-python-deps
	$(MAKE) -j$(CORES) $(CPU_BINARIES) build/cpu/train_gpt_drop_waits
	python3 scripts/run_tests.py --gpt
endif

# A missing dependency is named together with the command that installs it.
define require
	@$(1) >/dev/null 2>&1 || { echo "missing dependency: $(2); install it with: $(3)" >&2; exit 1; }
endef
check-gpu-deps:
	$(call require,test -x $(NVCC),the CUDA toolkit (nvcc),see https://developer.nvidia.com/cuda-downloads or set CUDA_HOME)
	$(call require,test -f $(CUDA_HOME)/include/cublasLt.h,cuBLASLt (cublasLt.h),install the CUDA toolkit's libcublas development package)
check-cpu-deps:
	$(call require,test -f $(CUDA_HOME)/include/cuda_runtime_api.h,the CUDA toolkit headers,install the CUDA toolkit (headers are enough) or set CUDA_HOME)
	$(call require,test -f /usr/include/boost/context/fiber.hpp,boost.context,apt-get install libboost-context-dev)
	$(call require,python3 -c 'import scipy_openblas32' || /sbin/ldconfig -p | grep -q libopenblas.so.0,OpenBLAS,scripts/setup.sh (PyPI's scipy-openblas32) or apt-get install libopenblas0)
	$(call require,which mpicxx,Open MPI,apt-get install openmpi-bin libopenmpi-dev)
check-fuzz-deps:
	$(call require,command -v $(FUZZ_CXX),clang (libFuzzer),apt-get install clang-14 libclang-rt-14-dev (or scripts/setup.sh --test))
	$(call require,echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, long) { return 0; }' | $(FUZZ_CXX) -fsanitize=fuzzer -x c++ - -o /dev/null,libFuzzer's runtime (libclang_rt.fuzzer),apt-get install libclang-rt-14-dev (or scripts/setup.sh --test))
check-python-deps:
	$(call require,python3 -c 'import torch',PyTorch,pip install torch numpy)

clean: clean-gpu
	rm -rf build
clean-gpu:
	rm -f $(GPU_BINARIES)
