// llmc/parallel.h: the process grid. A run of `world` ranks is a grid of tp x dp ranks:
//   - tensor parallelism (tp) cuts every layer's matrices over a group of tp ranks that work
//     on the same tokens; their activations cross the group several times per layer, so a
//     group is tp consecutive ranks, which launchers place on one node (NVLink);
//   - data parallelism (dp) runs world / tp such groups on different parts of the batch; rank
//     r is in data-parallel group r % tp, with the ranks r % tp, r % tp + tp, ... across nodes;
//   - the ZeRO stage says how much of the model state the data-parallel ranks shard between
//     them (llmc/zero.cuh).
// Everything about the grid that can be wrong is checked here, in one function, before any
// buffer is allocated. It also says where each element of a tensor lives when tensor
// parallelism cuts it (TpShape); the parallel layers are llmc/tensor_parallel.cuh.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>

// The highest ZeRO stage this build trains with (llmc/zero.cuh).
constexpr int ZERO_MAX_STAGE = 3;

struct ParallelConfig {
    int world;  // ranks in the job
    int dp;     // data-parallel ranks: world / tp
    int tp;     // tensor-parallel ranks per group
    int zero;   // ZeRO stage, 0..ZERO_MAX_STAGE
    bool sequence_parallel;
};

// The shapes the tensor-parallel cut must divide.
struct ParallelShapes {
    int heads;         // attention heads: whole heads go to each tensor-parallel rank
    int channels;      // the model width (the MLP's 4C divides whenever C does)
    int padded_vocab;  // rows of the embedding and classifier
    long long rows;    // B*T tokens of a micro-batch: sequence parallelism cuts them into tp parts
};

// The grid of `world` ranks with tensor-parallel groups of `tp`: dp is left at 0 when tp does
// not divide world (parallel_config_check says so).
inline ParallelConfig parallel_config(int world, int tp, int zero, bool sequence_parallel) {
    ParallelConfig p = {world, 0, tp, zero, sequence_parallel};
    if (tp > 0 && world % tp == 0) p.dp = world / tp;
    return p;
}

// Where rank `rank` sits in the grid.
inline int grid_tp_rank(const ParallelConfig* p, int rank) { return rank % p->tp; }
inline int grid_dp_rank(const ParallelConfig* p, int rank) { return rank / p->tp; }

// nullptr if the grid can train the model, else a message in msg. ranks_per_node: the ranks
// the launcher put on this rank's node, 0 when it does not say.
inline const char* parallel_config_check(const ParallelConfig* p, const ParallelShapes* s,
                                         int ranks_per_node, char* msg, size_t len) {
    if (p->tp < 1 || p->world % p->tp != 0)
        snprintf(msg, len, "%d ranks cannot be cut into tensor-parallel groups of --tp %d",
                 p->world, p->tp);
    else if (ranks_per_node > 0 && ranks_per_node % p->tp != 0)
        snprintf(msg, len,
                 "a tensor-parallel group must lie within a node, but --tp %d does not divide "
                 "the %d ranks on this node",
                 p->tp, ranks_per_node);
    else if (s->heads % p->tp != 0)
        snprintf(msg, len, "--tp %d does not divide the %d attention heads", p->tp, s->heads);
    else if (s->channels % p->tp != 0)
        snprintf(msg, len, "--tp %d does not divide the model width %d", p->tp, s->channels);
    else if (s->padded_vocab % p->tp != 0)
        snprintf(msg, len, "--tp %d does not divide the padded vocabulary of %d rows", p->tp,
                 s->padded_vocab);
    else if (s->padded_vocab / p->tp % 8 != 0)
        snprintf(msg, len,
                 "--tp %d leaves each rank %d rows of the padded vocabulary, not a multiple of 8 "
                 "(the classifier reads a row in 16-byte packs)",
                 p->tp, s->padded_vocab / p->tp);
    else if (p->sequence_parallel && p->tp > 1 && s->rows % p->tp != 0)
        snprintf(msg, len,
                 "--sequence-parallel cuts the %lld tokens of a micro-batch (--batch x --seq) "
                 "into --tp %d parts: they do not divide",
                 s->rows, p->tp);
    else if (p->zero < 0 || p->zero > ZERO_MAX_STAGE)
        snprintf(msg, len, "--zero %d: the ZeRO stages are 0 to %d", p->zero, ZERO_MAX_STAGE);
    else return nullptr;
    return msg;
}

// ---------------------------------------------------------------------------------------------
// Where the elements of a tensor-parallel tensor live. A tensor's logical shape is (rows, cols)
// (cols 0: a vector of rows elements), its rows made of `parts` equal parts (attn.qkv: Q, K and
// V). Rank r of a group of t holds its share of every part, parts one after the other:
//   TP_ROWS  (parts x rows/parts/t, cols): rows [r R/t, (r+1) R/t) of each part of R rows;
//   TP_COLS  (rows, cols/t): columns [r cols/t, (r+1) cols/t) of every row.
enum TpSplit { TP_REPLICATED, TP_ROWS, TP_COLS };

struct TpShape {
    int split;  // TpSplit
    int parts;
    int rows, cols;  // logical
};

// Visits rank r's local elements [lo, lo + n) as runs contiguous both locally and in the logical
// tensor, f(logical, local, count), in local order: checkpoints hold logical tensors (any grid
// reads them), initialization draws the logical tensor (every grid starts from the same
// parameters), and Muon assembles the whole matrix from the ranks' parts.
template <class F>
void tp_local_runs(const TpShape* s, int rank, int size, size_t lo, size_t n, F f) {
    const size_t cols = s->cols > 0 ? (size_t)s->cols : 1;
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
