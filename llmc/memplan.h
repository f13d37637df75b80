// llmc/memplan.h: the device memory of a run, counted where it is taken. Every buffer the model
// and its data-parallel machinery hold is taken through device_take, with the kind of memory it
// is; the ledger adds its bytes to that kind (and what the allocator rounds them up by to its
// own count) and, unless it only plans, allocates them, zeroed. A plan is the model built with a
// planning ledger: the code that would allocate says what it would allocate, so the plan is the
// run's allocation, not an estimate; the seeds' formulas (below) are printed beside it, and the
// difference is explained there.
//
// Entry points: DeviceLedger, device_take / device_take_n / device_take_copy, ledger_total,
// seed_model_state_bytes / seed_layer_activation_bytes.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common.cuh"

enum MemKind {
    MEM_PARAMS,       // bf16 (floatX) parameters: all of them, or the owned part (ZeRO-3)
    MEM_GRADS,        // gradients kept between steps: the buffer, or the reduced shard (ZeRO)
    MEM_MASTER,       // fp32 master weights (bf16 build), all or the owned part
    MEM_OPTIMIZER,    // optimizer state (AdamW's moments, Muon's momentum)
    MEM_ACTIVATIONS,  // what the forward pass keeps, and the backward pass's scratch
    MEM_BUCKETS,      // data parallel: gradient buckets in flight, staging
    MEM_GATHER,       // ZeRO-3: the gather buffers
    MEM_WORKSPACE,    // cuBLASLt's workspace, Newton-Schulz scratch
    MEM_FP8,          // --fp8: the cached FP8 weights, the quantized operands' scratch, scales
    MEM_MONITORS,     // --log-update-ratio: the weights of record before the update, its sums
    MEM_OTHER,        // token ids, the plan's run lists, norm partial sums, the monitors' vector
    NUM_MEM_KINDS
};
static const char* const MEM_KIND_NAMES[NUM_MEM_KINDS] = {
    "params",         "grads",      "master", "optimizer", "activations", "buckets",
    "gather_buffers", "workspaces", "fp8",    "monitors",  "other"};

struct DeviceLedger {
    bool plan_only;  // count, allocate nothing (every pointer taken is nullptr)
    size_t bytes[NUM_MEM_KINDS];
    size_t rounding;  // what the allocations' rounding adds
    int allocations;
};

// cudaMalloc returns memory aligned to at least 256 bytes, and the CPU runtime rounds each
// allocation up to that; a GPU's allocator may reserve more (its pages): the run prints the
// difference it measures.
constexpr size_t DEVICE_ALLOC_ROUNDING = 256;

inline size_t ledger_total(const DeviceLedger* ledger) {
    size_t total = ledger->rounding;
    for (int k = 0; k < NUM_MEM_KINDS; k++) total += ledger->bytes[k];
    return total;
}

// `bytes` of device memory of kind `kind`, zeroed (nullptr for 0 bytes, and when planning).
// Running out of device memory ends the program with what was being taken and what the
// ledger holds so far, never with a crash later.
inline void* device_take(DeviceLedger* ledger, MemKind kind, size_t bytes) {
    if (bytes == 0) return nullptr;
    const size_t before = ledger_total(ledger);
    ledger->bytes[kind] += bytes;
    ledger->rounding += round_up(bytes, DEVICE_ALLOC_ROUNDING) - bytes;
    ledger->allocations++;
    if (ledger->plan_only) return nullptr;
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        size_t free_bytes = 0, total_bytes = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        fprintf(stderr,
                "error: out of device memory taking %zu bytes for %s (%zu bytes taken before "
                "it; the device has %zu of %zu bytes free): see --plan, and use a smaller "
                "--batch, --recompute or a higher --zero\n",
                bytes, MEM_KIND_NAMES[kind], before, free_bytes, total_bytes);
        exit(EXIT_FAILURE);
    }
    CUDA_CHECK(err);
    CUDA_CHECK(cudaMemset(p, 0, bytes));
    return p;
}

template <class T>
T* device_take_n(DeviceLedger* ledger, MemKind kind, size_t elems) {
    return (T*)device_take(ledger, kind, elems * sizeof(T));
}

// A device copy of a host array (nullptr when it is empty, and when planning).
template <class T>
T* device_take_copy(DeviceLedger* ledger, MemKind kind, const std::vector<T>& host) {
    T* dev = device_take_n<T>(ledger, kind, host.size());
    if (dev)
        CUDA_CHECK(cudaMemcpy(dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return dev;
}

// ---------------------------------------------------------------------------------------------
// The seeds' formulas, for the report beside the plan (bytes).

// Model state of mixed-precision AdamW per GPU (bf16 parameters and gradients, fp32 master
// weights and two moments: 16 bytes per parameter) over N data-parallel ranks at ZeRO stage
// `stage`: 16 Psi; 4 Psi + 12 Psi / N; 2 Psi + 14 Psi / N; 16 Psi / N.
inline double seed_model_state_bytes(double psi, double N, int stage) {
    const double by_stage[4] = {16 * psi, 4 * psi + 12 * psi / N, 2 * psi + 14 * psi / N,
                                16 * psi / N};
    return by_stage[stage];
}

// Activations of one transformer layer in 16-bit (Korthikanti et al.'s count: sequence s,
// micro-batch b, width h, heads a): 34 s b h + 5 a s^2 b without recompute (the s^2 term is
// the attention scores and softmax, which fused attention never stores), 2 s b h when only
// the layer's input is kept (full recompute).
inline double seed_layer_activation_bytes(double s, double b, double h, double a, bool fused,
                                          bool full_recompute) {
    if (full_recompute) return 2 * s * b * h;
    return 34 * s * b * h + (fused ? 0.0 : 5 * a * s * s * b);
}
