// llmc/shard_plan.h: which rank owns which part of the model's state under data parallelism
// (ZeRO), built once from the parameter table and the group size. Pure host code: llmc/zero.cuh
// builds its buffers, collectives and optimizer ranges from it, the gradient norm and the
// checkpoint shards follow it, and dev/cpu/tests/shard_plan.cu checks it on its own.
// Entry points: plan_build, plan_owned (a rank's ranges in its state order), plan_runs,
// plan_matrices_of, plan_free. The words for the ranges (tensor, run, piece, group, bucket,
// slice, matrix, shard, owned range) are llmc/zero.cuh's, defined at its top.
//
// Element-wise tensors may be cut anywhere. In each bucket their elements are packed in layout
// order (pieces: whole tensors, without the alignment gaps) and the packed sequence is cut into
// `ranks` equal slices (the last ones padded with zeros), slice r owned by rank r: a
// reduce-scatter over the packed bucket hands each rank the reduced gradient of its slice, and
// an all-gather of the slices rebuilds the updated parameters everywhere. A slice is owned as
// runs of one tensor each (plan_runs).
//
// Matrices (the pieces of a tensor whose optimizer's row in train_gpt.cu's table needs whole
// matrices; Muon: Newton-Schulz needs a whole matrix) are never cut: each is owned whole by
// one rank, chosen largest first for the least loaded rank by Newton-Schulz cost (m^2 n for an
// (m, n) matrix with m <= n), ties to the lowest rank, so the work is balanced and the choice
// depends on the table and the group size only. A matrix's gradient is reduced to its owner
// (ncclReduce), the owner updates it, and broadcasts the new parameters (ncclBroadcast): S
// bytes each way where a slice costs (N-1)/N S, the price of whole matrices.
//
// Every rank builds the same plan for every rank.
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "common.cuh"  // ceil_div, round_up
#include "fileio.h"    // MALLOC_CHECK

struct ShardTensor {  // a tensor as the plan sees it
    size_t offset, numel;
    int matrices;    // 0: element-wise; > 0: that many matrices of numel / matrices each (as
                     // the tensor's optimizer's row says: whole matrices or not)
    int rows, cols;  // the shape (rows split into the matrices), for the cost of a matrix
    bool in_norm;    // counted in the gradient norm (a replicated tensor of a tensor-parallel
                     // group is counted on one rank of it)
    bool fp8_gathered;  // ZeRO-3 gathers it in FP8 into its FP8 cache (--fp8-allgather,
                        // llmc/zero_fp8.cuh), not into its bucket's bf16 gather buffer
    int norm_entry;     // the entry of the per-layer gradient norms (--log-layer-norms) it is in
};

struct ShardPiece {  // a run of element-wise elements of one tensor, in packed order
    int tensor;
    size_t offset;  // in the layout
    size_t packed;  // in the bucket's packed sequence
    size_t n;
};

struct ShardMatrix {    // a matrix, owned whole
    int tensor, index;  // the tensor and which of its matrices
    size_t offset, n;  // in the layout
    int owner;
    size_t shard;  // in the owner's matrix shard
};

struct ShardBucket {
    size_t packed;  // element-wise elements in the bucket
    size_t slice;   // elements per rank of the packed sequence (padded)
    size_t shard;   // where each rank's slice of this bucket starts in its element-wise shard
    int piece_first, piece_count;
    int matrix_first, matrix_count;
};

struct ShardPlan {
    int ranks;
    int bucket_count;
    ShardBucket* buckets;
    ShardPiece* pieces;
    int piece_count;
    ShardMatrix* matrices;
    int matrix_count;
    size_t elem_shard;   // elements of every rank's element-wise shard (the same for each)
    size_t* matrix_shard;  // per rank: elements of the matrices it owns
};

// Slices and matrices start on multiples of this many elements (16-byte accesses, NCCL's fast
// path).
constexpr size_t SHARD_ALIGN = 64;

// What the plan gives one rank: a run of the layout it owns and where its state is.
struct OwnedRange {
    int tensor;
    size_t offset;  // in the layout
    size_t state;   // in the element-wise state or (matrix) the matrix state
    size_t n;
    bool matrix;  // a whole matrix (its optimizer needs it whole)
};

// The matrices rank `owner` owns, in the order of its matrix shard.
inline std::vector<ShardMatrix*> plan_matrices_of(const ShardPlan* plan, int owner) {
    std::vector<ShardMatrix*> out;
    for (int i = 0; i < plan->matrix_count; i++)
        if (plan->matrices[i].owner == owner) out.push_back(&plan->matrices[i]);
    std::sort(out.begin(), out.end(),
              [](const ShardMatrix* a, const ShardMatrix* b) { return a->shard < b->shard; });
    return out;
}

// Builds the plan of tensors[0..n) (layout order) for `ranks` ranks over the buckets: bucket b
// is the layout range [bucket_begin[b], bucket_end[b]), and holds the tensors that start in it.
inline void plan_build(ShardPlan* plan, const size_t* bucket_begin, const size_t* bucket_end,
                       int bucket_count, const ShardTensor* tensors, int n, int ranks) {
    memset(plan, 0, sizeof(*plan));
    plan->ranks = ranks;
    plan->bucket_count = bucket_count;
    plan->buckets = (ShardBucket*)MALLOC_CHECK(bucket_count * sizeof(ShardBucket));
    plan->pieces = (ShardPiece*)MALLOC_CHECK((n + 1) * sizeof(ShardPiece));
    int total_matrices = 0;
    for (int i = 0; i < n; i++) total_matrices += tensors[i].matrices;
    plan->matrices = (ShardMatrix*)MALLOC_CHECK((total_matrices + 1) * sizeof(ShardMatrix));
    plan->matrix_shard = (size_t*)MALLOC_CHECK(ranks * sizeof(size_t));
    for (int r = 0; r < ranks; r++) plan->matrix_shard[r] = 0;
    for (int b = 0; b < bucket_count; b++) {
        ShardBucket* sb = &plan->buckets[b];
        memset(sb, 0, sizeof(*sb));
        sb->piece_first = plan->piece_count;
        sb->matrix_first = plan->matrix_count;
        for (int i = 0; i < n; i++) {
            const ShardTensor* t = &tensors[i];
            if (t->offset < bucket_begin[b] || t->offset >= bucket_end[b]) continue;
            if (t->matrices == 0) {
                plan->pieces[plan->piece_count++] = ShardPiece{i, t->offset, sb->packed, t->numel};
                sb->packed += t->numel;
                continue;
            }
            const size_t un = t->numel / t->matrices;
            for (int u = 0; u < t->matrices; u++)
                plan->matrices[plan->matrix_count++] =
                    ShardMatrix{i, u, t->offset + u * un, un, -1, 0};
        }
        sb->piece_count = plan->piece_count - sb->piece_first;
        sb->matrix_count = plan->matrix_count - sb->matrix_first;
        sb->slice = round_up(ceil_div(sb->packed, ranks), SHARD_ALIGN);
        sb->shard = plan->elem_shard;
        plan->elem_shard += sb->slice;
    }
    // Matrices: largest cost first (stable, so ties keep layout order), each to the least loaded
    // rank; a rank's matrices sit in its matrix shard in layout order.
    std::vector<int> order(plan->matrix_count);
    for (int i = 0; i < plan->matrix_count; i++) order[i] = i;
    auto cost = [&](int i) {
        const ShardTensor* t = &tensors[plan->matrices[i].tensor];
        const double rows = t->rows / t->matrices, m = std::min<double>(rows, t->cols),
                     k = std::max<double>(rows, t->cols);
        return m * m * k;
    };
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return cost(a) > cost(b); });
    std::vector<double> load(ranks, 0.0);
    for (int i : order) {
        int best = 0;
        for (int r = 1; r < ranks; r++)
            if (load[r] < load[best]) best = r;
        plan->matrices[i].owner = best;
        load[best] += cost(i);
    }
    for (int i = 0; i < plan->matrix_count; i++) {
        ShardMatrix* u = &plan->matrices[i];
        u->shard = plan->matrix_shard[u->owner];
        plan->matrix_shard[u->owner] += round_up(u->n, SHARD_ALIGN);
    }
}

inline void plan_free(ShardPlan* plan) {
    free(plan->buckets);
    free(plan->pieces);
    free(plan->matrices);
    free(plan->matrix_shard);
}

// Rank r's element-wise part: runs of one tensor each, bucket after bucket (the order of its
// shard); state = the run's place in the rank's element-wise shard.
inline std::vector<OwnedRange> plan_runs(const ShardPlan* plan, int r) {
    std::vector<OwnedRange> runs;
    for (int b = 0; b < plan->bucket_count; b++) {
        const ShardBucket* sb = &plan->buckets[b];
        const size_t lo = r * sb->slice, hi = std::min((r + 1) * sb->slice, sb->packed);
        for (int p = sb->piece_first; p < sb->piece_first + sb->piece_count; p++) {
            const ShardPiece* piece = &plan->pieces[p];
            const size_t a = std::max(lo, piece->packed),
                         z = std::min(hi, piece->packed + piece->n);
            if (a >= z) continue;
            runs.push_back(OwnedRange{piece->tensor, piece->offset + (a - piece->packed),
                                      sb->shard + (a - lo), z - a, false});
        }
    }
    return runs;
}

// Everything rank r owns, in its state order: its element-wise runs, then its matrices.
inline std::vector<OwnedRange> plan_owned(const ShardPlan* plan, int r) {
    std::vector<OwnedRange> owned = plan_runs(plan, r);
    for (const ShardMatrix* u : plan_matrices_of(plan, r))
        owned.push_back(OwnedRange{u->tensor, u->offset, u->shard, u->n, true});
    return owned;
}
