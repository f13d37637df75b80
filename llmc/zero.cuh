// llmc/zero.cuh: data parallelism: the gradients of every rank's part of the batch are reduced
// over the data-parallel group, in buckets, on a communication stream of their own, while the
// backward pass goes on computing the gradients of earlier layers.
//
// Gradient units and buckets. The backward pass finishes the gradients of the model in a fixed
// order of units: the last block (with the final LayerNorm, whose gradient is done just before
// it), then each block down to the first, then the embeddings (wte, which the lm head also
// writes at the very start, and wpe). Every unit is one contiguous range of the parameter
// layout, and consecutive units are adjacent ranges, so a bucket, a run of consecutive units of
// at least --bucket-mb megabytes (the last one takes what is left), is one contiguous range too.
// When the backward pass has finished the last unit of a bucket (dp_unit_done, called by the
// model after each unit), the compute stream records an event, the communication stream waits
// for it and reduces the bucket; before the optimizer reads any gradient the compute stream
// waits for the last bucket's event (dp_finish): the buckets are reduced in order on one
// stream, so that event follows them all.
//
// Gradient accumulation: with several micro-batches per step, the gradients are summed locally
// and only the last micro-batch's backward pass reduces them (dp->reduce is set for it).
//
// Determinism: each element is reduced by the same collective whatever the bucket it is in
// (NCCL reduces element-wise; the CPU NCCL in rank order), so buckets change when the bytes
// travel, not the bits.
#pragma once

#include "comm.cuh"

struct GradBucket {
    size_t begin, end;  // element range of the parameter layout
    int last_unit;      // the backward pass's unit whose completion closes it
    cudaEvent_t done;   // recorded on the communication stream after its collective
};

struct DataParallel {
    const CommGroup* group;
    cudaStream_t stream;  // the communication stream
    floatX* grads;        // the gradient buffer, in the parameter layout
    int count;            // buckets, in the order the backward pass completes them
    GradBucket* buckets;
    int* closing;          // per unit: the bucket it closes, or -1
    cudaEvent_t computed;  // recorded on the compute stream when a bucket's gradients are done
    bool reduce;           // reduce during this backward pass (the step's last micro-batch)
};

// Builds the buckets from the units' ranges in the order the backward pass finishes them
// (unit_begin/unit_end: n_units element ranges; each unit's range adjacent to the next one's).
inline void dp_init(DataParallel* dp, const CommGroup* group, floatX* grads,
                    const size_t* unit_begin, const size_t* unit_end, int n_units,
                    double bucket_mb) {
    memset(dp, 0, sizeof(*dp));
    dp->group = group;
    dp->grads = grads;
    dp->buckets = (GradBucket*)MALLOC_CHECK(n_units * sizeof(GradBucket));
    dp->closing = (int*)MALLOC_CHECK(n_units * sizeof(int));
    const size_t bucket_elems = (size_t)(bucket_mb * 1048576.0 / sizeof(floatX));
    size_t lo = unit_begin[0], hi = unit_end[0];
    for (int u = 0; u < n_units; u++) {
        lo = std::min(lo, unit_begin[u]);
        hi = std::max(hi, unit_end[u]);
        dp->closing[u] = -1;
        if (hi - lo >= bucket_elems || u == n_units - 1) {
            dp->closing[u] = dp->count;
            dp->buckets[dp->count++] = GradBucket{lo, hi, u, nullptr};
            if (u + 1 < n_units) lo = unit_begin[u + 1], hi = unit_end[u + 1];
        }
    }
    if (group->size == 1) return;  // nothing to reduce: no streams or events
    CUDA_CHECK(cudaStreamCreateWithFlags(&dp->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&dp->computed, cudaEventDisableTiming));
    for (int b = 0; b < dp->count; b++)
        CUDA_CHECK(cudaEventCreateWithFlags(&dp->buckets[b].done, cudaEventDisableTiming));
}

inline void dp_free(DataParallel* dp) {
    if (dp->group->size > 1) {
        for (int b = 0; b < dp->count; b++) CUDA_CHECK(cudaEventDestroy(dp->buckets[b].done));
        CUDA_CHECK(cudaEventDestroy(dp->computed));
        CUDA_CHECK(cudaStreamDestroy(dp->stream));
    }
    free(dp->buckets);
    free(dp->closing);
}

// The backward pass has queued the last kernel writing unit `unit`'s gradients on `compute`:
// when that closes a bucket, its reduction starts on the communication stream once the
// gradients are written. Called by the model after every unit, on every micro-batch.
inline void dp_unit_done(DataParallel* dp, int unit, cudaStream_t compute) {
    if (dp == nullptr || !dp->reduce || dp->group->size == 1 || dp->closing[unit] < 0) return;
    GradBucket* b = &dp->buckets[dp->closing[unit]];
    CUDA_CHECK(cudaEventRecord(dp->computed, compute));
#ifndef DP_TEST_DROP_WAIT  // the test of the stream structure builds without this wait
    CUDA_CHECK(cudaStreamWaitEvent(dp->stream, dp->computed, 0));
#endif
    comm_allreduce_avg(dp->group, dp->grads + b->begin, b->end - b->begin, dp->stream);
    CUDA_CHECK(cudaEventRecord(b->done, dp->stream));
}

// Makes `compute` wait for every bucket's reduction, and the host for the collectives (with the
// group's deadline). Called after the last micro-batch's backward pass, before the gradients
// are read.
inline void dp_finish(DataParallel* dp, cudaStream_t compute) {
    if (dp == nullptr || dp->group->size == 1) return;
    CUDA_CHECK(cudaStreamWaitEvent(compute, dp->buckets[dp->count - 1].done, 0));
    comm_sync(dp->group, dp->stream, "the all-reduce of the gradients (NCCL)");
}
