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

#include <algorithm>
#include <vector>

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

// =============================================================================================
// The shard plan: which rank of the data-parallel group owns which parameters under ZeRO, built
// once from the parameter table and the buckets above.
//
// Element-wise tensors (AdamW) may be cut anywhere. In each bucket their elements are packed
// in layout order (pieces: runs of whole tensors, without the alignment gaps) and the packed
// sequence is cut into `ranks` equal slices (the last ones padded with zeros), slice r owned by
// rank r: a reduce-scatter over the packed bucket hands each rank the reduced gradient of its
// slice, and an all-gather of the slices rebuilds the updated parameters everywhere. A rank's
// slices, bucket after bucket, are its element-wise shard: the optimizer state and master
// weights it holds. The cut of a slice into runs of one tensor each is its list of segments.
//
// Matrix units (Muon: Newton-Schulz needs a whole matrix) are never cut: each is owned whole by
// one rank, chosen largest first for the least loaded rank by Newton-Schulz cost (m^2 n for an
// (m, n) unit with m <= n), ties to the lowest rank, so the work is balanced and the choice
// depends on the table and the group size only. A unit's gradient is reduced to its owner
// (ncclReduce), the owner updates it, and broadcasts the new parameters (ncclBroadcast).
//
// Every rank builds the same plan for every rank; plan_segments(plan, r) is rank r's part.

struct ShardTensor {  // a tensor as the plan sees it
    size_t offset, numel;
    int units;       // 0: element-wise; > 0: that many matrix units of numel / units each
    int rows, cols;  // the shape (rows split into units), for the cost of a unit
};

struct ShardPiece {  // a run of element-wise elements of one tensor, in packed order
    int tensor;
    size_t offset;  // in the layout
    size_t packed;  // in the bucket's packed sequence
    size_t n;
};

struct ShardSegment {  // the part of a piece one rank owns
    int tensor;
    size_t offset;  // in the layout
    size_t shard;   // in the owner's element-wise shard
    size_t n;
};

struct ShardUnit {  // a matrix unit, owned whole
    int tensor, unit;
    size_t offset, n;  // in the layout
    int owner;
    size_t shard;  // in the owner's unit shard
};

struct ShardBucket {
    size_t packed;  // element-wise elements in the bucket
    size_t slice;   // elements per rank of the packed sequence (padded)
    size_t shard;   // where each rank's slice of this bucket starts in its shard
    int piece_first, piece_count;
    int unit_first, unit_count;
};

struct ShardPlan {
    int ranks;
    int bucket_count;
    ShardBucket* buckets;
    ShardPiece* pieces;
    int piece_count;
    ShardUnit* units;
    int unit_count;
    size_t elem_shard;   // elements of every rank's element-wise shard (the same for each)
    size_t* unit_shard;  // per rank: elements of the units it owns
};

// Slices are cut on multiples of this many elements (16-byte accesses, and NCCL's fast path).
constexpr size_t SHARD_ALIGN = 64;

// Builds the plan of tensors[0..n) (layout order) over the buckets of dp for `ranks` ranks.
inline void plan_build(ShardPlan* plan, const DataParallel* dp, const ShardTensor* tensors, int n,
                       int ranks) {
    memset(plan, 0, sizeof(*plan));
    plan->ranks = ranks;
    plan->bucket_count = dp->count;
    plan->buckets = (ShardBucket*)MALLOC_CHECK(dp->count * sizeof(ShardBucket));
    plan->pieces = (ShardPiece*)MALLOC_CHECK(n * sizeof(ShardPiece));
    int total_units = 0;
    for (int i = 0; i < n; i++) total_units += tensors[i].units;
    plan->units = (ShardUnit*)MALLOC_CHECK((total_units + 1) * sizeof(ShardUnit));
    plan->unit_shard = (size_t*)MALLOC_CHECK(ranks * sizeof(size_t));
    std::vector<double> load(ranks, 0.0);
    for (int r = 0; r < ranks; r++) plan->unit_shard[r] = 0;
    for (int b = 0; b < dp->count; b++) {
        const GradBucket* g = &dp->buckets[b];
        ShardBucket* sb = &plan->buckets[b];
        memset(sb, 0, sizeof(*sb));
        sb->piece_first = plan->piece_count;
        sb->unit_first = plan->unit_count;
        for (int i = 0; i < n; i++) {
            const ShardTensor* t = &tensors[i];
            if (t->offset < g->begin || t->offset >= g->end) continue;
            if (t->units == 0) {
                plan->pieces[plan->piece_count++] = ShardPiece{i, t->offset, sb->packed, t->numel};
                sb->packed += t->numel;
                continue;
            }
            for (int u = 0; u < t->units; u++) {
                const size_t un = t->numel / t->units;
                plan->units[plan->unit_count++] = ShardUnit{i, u, t->offset + u * un, un, -1, 0};
            }
        }
        sb->piece_count = plan->piece_count - sb->piece_first;
        sb->unit_count = plan->unit_count - sb->unit_first;
        sb->slice = round_up(ceil_div(sb->packed, ranks), SHARD_ALIGN);
        sb->shard = plan->elem_shard;
        plan->elem_shard += sb->slice;
    }
    // Units: largest cost first (stable, so ties keep layout order), each to the least loaded
    // rank; a rank's units sit in its unit shard in layout order.
    std::vector<int> order(plan->unit_count);
    for (int i = 0; i < plan->unit_count; i++) order[i] = i;
    auto cost = [&](int i) {
        const ShardTensor* t = &tensors[plan->units[i].tensor];
        const double m = std::min(t->rows / t->units, t->cols),
                     k = std::max(t->rows / t->units, t->cols);
        return m * m * k;
    };
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return cost(a) > cost(b); });
    for (int i : order) {
        int best = 0;
        for (int r = 1; r < ranks; r++)
            if (load[r] < load[best]) best = r;
        plan->units[i].owner = best;
        load[best] += cost(i);
    }
    for (int i = 0; i < plan->unit_count; i++) {
        ShardUnit* u = &plan->units[i];
        u->shard = plan->unit_shard[u->owner];
        plan->unit_shard[u->owner] += round_up(u->n, SHARD_ALIGN);
    }
}

inline void plan_free(ShardPlan* plan) {
    free(plan->buckets);
    free(plan->pieces);
    free(plan->units);
    free(plan->unit_shard);
}

// Rank r's element-wise segments, bucket after bucket (the order of its shard).
inline std::vector<ShardSegment> plan_segments(const ShardPlan* plan, int r) {
    std::vector<ShardSegment> segs;
    for (int b = 0; b < plan->bucket_count; b++) {
        const ShardBucket* sb = &plan->buckets[b];
        const size_t lo = r * sb->slice, hi = std::min((r + 1) * sb->slice, sb->packed);
        for (int p = sb->piece_first; p < sb->piece_first + sb->piece_count; p++) {
            const ShardPiece* piece = &plan->pieces[p];
            const size_t a = std::max(lo, piece->packed),
                         z = std::min(hi, piece->packed + piece->n);
            if (a >= z) continue;
            segs.push_back(ShardSegment{piece->tensor, piece->offset + (a - piece->packed),
                                        sb->shard + (a - lo), z - a});
        }
    }
    return segs;
}
