// llmc/parallel.h: the process grid. A run of `world` ranks is a grid of tp x dp ranks:
//   - tensor parallelism (tp) cuts every layer's matrices over a group of tp ranks that work
//     on the same tokens; their activations cross the group several times per layer, so a
//     group is tp consecutive ranks, which launchers place on one node (NVLink);
//   - data parallelism (dp) runs world / tp such groups on different parts of the batch; rank
//     r is in data-parallel group r % tp, with the ranks r % tp, r % tp + tp, ... across nodes;
//   - the ZeRO stage says how much of the model state the data-parallel ranks shard between
//     them (llmc/zero.cuh).
// Everything about the grid that can be wrong is checked here, in one function, before any
// buffer is allocated. Tensor parallelism itself is not built yet: the grid is laid out for
// it, and --tp accepts 1.
#pragma once

#include <cstddef>
#include <cstdio>

// The highest ZeRO stage this build trains with (llmc/zero.cuh).
constexpr int ZERO_MAX_STAGE = 3;
// The largest tensor-parallel group this build trains with.
constexpr int TP_MAX = 1;

struct ParallelConfig {
    int world;  // ranks in the job
    int dp;     // data-parallel ranks: world / tp
    int tp;     // tensor-parallel ranks per group
    int zero;   // ZeRO stage, 0..ZERO_MAX_STAGE
};

// The shapes the tensor-parallel cut must divide.
struct ParallelShapes {
    int heads;         // attention heads: whole heads go to each tensor-parallel rank
    int channels;      // the model width (the MLP's 4C divides whenever C does)
    int padded_vocab;  // rows of the embedding and classifier
};

// The grid of `world` ranks with tensor-parallel groups of `tp`: dp is left at 0 when tp does
// not divide world (parallel_config_check says so).
inline ParallelConfig parallel_config(int world, int tp, int zero) {
    ParallelConfig p = {world, 0, tp, zero};
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
    else if (p->tp > TP_MAX)
        snprintf(msg, len,
                 "tensor parallelism (--tp %d) is not built yet: this build trains with --tp 1",
                 p->tp);
    else if (p->zero < 0 || p->zero > ZERO_MAX_STAGE)
        snprintf(msg, len, "--zero %d: the ZeRO stages are 0 to %d", p->zero, ZERO_MAX_STAGE);
    else return nullptr;
    return msg;
}
