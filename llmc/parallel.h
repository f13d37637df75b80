// llmc/parallel.h: the process grid. A run of `world` ranks is a grid of dp x pp x cp x tp ranks
// (ParallelDims), numbered with tp innermost: rank = ((dp_rank * pp + pp_rank) * cp + cp_rank)
// * tp + tp_rank.
//   - tensor parallelism (tp) cuts every layer's matrices over a group of tp ranks that work
//     on the same tokens; their activations cross the group several times per layer, so a
//     group is tp consecutive ranks, which launchers place on one node (NVLink);
//   - pipeline parallelism (pp) cuts the blocks into stages, run by the pp ranks of a pipeline
//     group one after the other on the micro-batches of a step (llmc/pipeline.h: the schedules;
//     train_gpt.cu: the executor);
//   - context parallelism (cp) cuts every sequence of a micro-batch over a group of cp ranks
//     (outside tp: each holds a tp group's place), which pass keys and values around a ring in
//     attention (llmc/context_parallel.cuh: the layout, the ring);
//   - data parallelism (dp) runs world / (pp cp tp) replicas on different parts of the batch;
//     a data-parallel group is the ranks with the same place in the other three dimensions;
//   - the ZeRO stage says how much of the model state the dp x cp ranks (the shard group)
//     shard between them (llmc/zero.cuh).
// Everything about the grid that can be wrong is checked here, in one function
// (parallel_dims_check), before any buffer is allocated; llmc/comm.cuh splits the groups
// (comm_grid_groups). It also says where each element of a tensor lives when tensor
// parallelism cuts it (TpShape); the parallel layers are llmc/tensor_parallel.cuh.
// Entry points: parallel_dims, parallel_dims_check, grid_coords / grid_rank, tp_local_runs,
// tp_first_copy.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>

struct CommGroup;  // llmc/comm.cuh

// The highest ZeRO stage this build trains with (llmc/zero.cuh).
constexpr int ZERO_MAX_STAGE = 3;

// A run's grid and this rank's groups in it.
struct ParallelDims {
    int world;           // ranks in the job
    int dp, pp, cp, tp;  // the degrees: world = dp * pp * cp * tp (dp 0: they do not divide)
    int zero;            // ZeRO stage over the shard group, 0..ZERO_MAX_STAGE
    // pipeline parallelism (pp > 1, llmc/pipeline.h's PipeConfig): the schedule
    // (PipeScheduleId), the model chunks per rank and the micro-batches of a step
    int pp_schedule, pp_virtual, pp_micro_batches;
    bool sequence_parallel;
    double bucket_mb;  // the gradient buckets' size (llmc/zero.cuh)
    // This rank's groups (llmc/comm.cuh's comm_grid_groups): the ranks that differ from it only
    // in that dimension; shard_group: those that differ in dp or cp, which ZeRO shards over.
    const CommGroup *tp_group, *cp_group, *pp_group, *dp_group, *shard_group;
};

// A rank's place in the grid: its rank in each dimension's group.
struct GridCoords {
    int dp_rank, pp_rank, cp_rank, tp_rank;
};

inline GridCoords grid_coords(const ParallelDims* d, int rank) {
    GridCoords c;
    c.tp_rank = rank % d->tp;
    c.cp_rank = rank / d->tp % d->cp;
    c.pp_rank = rank / (d->tp * d->cp) % d->pp;
    c.dp_rank = rank / (d->tp * d->cp * d->pp);
    return c;
}

inline int grid_rank(const ParallelDims* d, GridCoords c) {
    return ((c.dp_rank * d->pp + c.pp_rank) * d->cp + c.cp_rank) * d->tp + c.tp_rank;
}

// The grid of `world` ranks with tensor-parallel groups of `tp`, pipeline groups of `pp` and
// context-parallel groups of `cp`, its groups not yet made; dp is left at 0 when the other
// degrees do not divide world (parallel_dims_check says so).
inline ParallelDims parallel_dims(int world, int tp, int zero, bool sequence_parallel,
                                  double bucket_mb, int pp = 1, int cp = 1) {
    ParallelDims d = {};
    d.world = world;
    d.pp = pp;
    d.cp = cp;
    d.tp = tp;
    d.pp_virtual = d.pp_micro_batches = 1;
    d.zero = zero;
    d.sequence_parallel = sequence_parallel;
    d.bucket_mb = bucket_mb;
    const int inner = d.pp * d.cp * d.tp;
    if (inner > 0 && world % inner == 0) d.dp = world / inner;
    return d;
}

// The shapes the tensor-parallel cut must divide.
struct ParallelShapes {
    int heads;         // attention heads: whole heads go to each tensor-parallel rank
    int channels;      // the model width (the MLP's 4C divides whenever C does)
    int padded_vocab;  // rows of the embedding and classifier
    long long rows;    // B*T tokens of a micro-batch: sequence parallelism cuts them into tp parts
};

// nullptr if the grid can train the model, else a message in msg. ranks_per_node: the ranks
// the launcher put on this rank's node, 0 when it does not say.
inline const char* parallel_dims_check(const ParallelDims* d, const ParallelShapes* s,
                                       int ranks_per_node, char* msg, size_t len) {
    if ((d->tp < 1 || d->dp < 1 || d->world != d->dp * d->pp * d->cp * d->tp) && d->pp == 1 &&
        d->cp == 1)
        snprintf(msg, len, "%d ranks cannot be cut into tensor-parallel groups of --tp %d",
                 d->world, d->tp);
    else if ((d->cp < 1 || d->dp < 1 || d->world != d->dp * d->pp * d->cp * d->tp) && d->pp == 1)
        snprintf(msg, len,
                 "%d ranks cannot be cut into replicas of --cp %d context-parallel x --tp %d "
                 "tensor-parallel ranks",
                 d->world, d->cp, d->tp);
    else if (d->tp < 1 || d->pp < 1 || d->dp < 1 || d->world != d->dp * d->pp * d->cp * d->tp)
        snprintf(msg, len,
                 "%d ranks cannot be cut into replicas of --pp %d pipeline stages x --tp %d "
                 "tensor-parallel ranks",
                 d->world, d->pp, d->tp);
    else if (ranks_per_node > 0 && ranks_per_node % d->tp != 0)
        snprintf(msg, len,
                 "a tensor-parallel group must lie within a node, but --tp %d does not divide "
                 "the %d ranks on this node",
                 d->tp, ranks_per_node);
    else if (s->heads % d->tp != 0)
        snprintf(msg, len, "--tp %d does not divide the %d attention heads", d->tp, s->heads);
    else if (s->channels % d->tp != 0)
        snprintf(msg, len, "--tp %d does not divide the model width %d", d->tp, s->channels);
    else if (s->padded_vocab % d->tp != 0)
        snprintf(msg, len, "--tp %d does not divide the padded vocabulary of %d rows", d->tp,
                 s->padded_vocab);
    else if (s->padded_vocab / d->tp % 8 != 0)
        snprintf(msg, len,
                 "--tp %d leaves each rank %d rows of the padded vocabulary, not a multiple of 8 "
                 "(the classifier reads a row in 16-byte packs)",
                 d->tp, s->padded_vocab / d->tp);
    else if (d->sequence_parallel && d->tp > 1 && s->rows % d->tp != 0)
        snprintf(msg, len,
                 "--sequence-parallel cuts the %lld tokens of a micro-batch (--batch x --seq) "
                 "into --tp %d parts: they do not divide",
                 s->rows, d->tp);
    else if (d->zero < 0 || d->zero > ZERO_MAX_STAGE)
        snprintf(msg, len, "--zero %d: the ZeRO stages are 0 to %d", d->zero, ZERO_MAX_STAGE);
    else return nullptr;
    return msg;
}

// ---------------------------------------------------------------------------------------------
// Where the elements of a tensor-parallel tensor live. A tensor's logical shape is (rows, cols)
// (cols 0: a vector of rows elements), its rows made of `parts` equal parts (attn.qkv: Q, K and
// V). Rank r of a group of t holds its share of every part, parts one after the other:
//   TP_ROWS  (parts x rows/parts/t, cols): rows [r R/t, (r+1) R/t) of each part of R rows;
//   TP_COLS  (rows, cols/t): columns [r cols/t, (r+1) cols/t) of every row.
// A TP_ROWS tensor may be cut into fewer shares than ranks: with `replicas` > 1 it is cut into
// t / replicas shares and ranks r with the same r / replicas hold the same one (Llama's k and v
// when the group has more ranks than kv heads: each rank holds the kv head its query heads use).
enum TpSplit { TP_REPLICATED, TP_ROWS, TP_COLS };

struct TpShape {
    int split;  // TpSplit
    int parts;
    int rows, cols;    // logical
    int replicas = 1;  // TP_ROWS: consecutive ranks that hold the same share
};

// Whether `rank` is the first of the ranks that hold the same elements of a tensor (the one whose
// copy a checkpoint, the gradient norm or a monitor counts): rank 0 of a replicated tensor, the
// first of each share's replicas, every rank of a tensor it cuts.
inline bool tp_first_copy(const TpShape* s, int rank) {
    return s->split == TP_REPLICATED ? rank == 0 : rank % s->replicas == 0;
}

// Visits rank r's local elements [lo, lo + n) as runs contiguous both locally and in the logical
// tensor, f(logical, local, count), in local order: checkpoints hold logical tensors (any grid
// reads them), initialization draws the logical tensor (every grid starts from the same
// parameters), and Muon assembles the whole matrix from the ranks' parts.
template <class F>
void tp_local_runs(const TpShape* s, int rank, int size, size_t lo, size_t n, F f) {
    const size_t cols = s->cols > 0 ? (size_t)s->cols : 1;
    if (s->split == TP_ROWS) rank /= s->replicas, size /= s->replicas;  // the shares
    if (s->split == TP_REPLICATED || size == 1) return f(lo, lo, n);
    for (size_t k = lo; k < lo + n;) {
        size_t logical, run;
        if (s->split == TP_ROWS) {
            const size_t part_rows = (size_t)s->rows / s->parts, local_rows = part_rows / size;
            const size_t row = k / cols, part = row / local_rows, in_part = row % local_rows;
            logical = (part * part_rows + rank * local_rows + in_part) * cols + k % cols;
            run = (local_rows - in_part) * cols - k % cols;  // to the end of this part's block
        } else {
            const size_t local_cols = cols / size, row = k / local_cols, col = k % local_cols;
            logical = row * cols + rank * local_cols + col;
            run = local_cols - col;  // to the end of this row's slice
        }
        run = std::min(run, lo + n - k);
        f(logical, k, run);
        k += run;
    }
}
