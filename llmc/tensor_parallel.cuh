// llmc/tensor_parallel.cuh: tensor parallelism (Megatron-LM) and sequence parallelism. A group of
// t ranks (consecutive ranks of one node, llmc/parallel.h) works on the same tokens and splits
// every matrix of the model between them:
//   - attention by heads: each rank holds NH/t heads, i.e. its rows of the Q, K and V parts of
//     attn.qkv.w and attn.qkv.b (column-parallel: a slice of the outputs) and the matching
//     columns of attn.proj.w (row-parallel: a slice of the inputs); Llama's grouped-query
//     attention cuts its KVH kv heads the same way when t divides KVH, and when KVH divides t
//     gives each rank the one kv head its NH/t query heads use, held by t/KVH ranks whose
//     gradients of it are summed (Megatron's replicated kv heads: train_gpt.cu's
//     ModelShapes::kv_replicas, tp_sum_kv_grads);
//   - the MLP by its 4C hidden units: rows of mlp.fc.w / mlp.fc.b (column-parallel), columns of
//     mlp.proj.w (row-parallel);
//   - the vocabulary: rows of wte, both as the embedding table and as the lm head (each rank
//     computes the logits of its Vp/t tokens; the cross-entropy combines the ranks' softmax
//     statistics, so no rank ever holds a row of all Vp logits).
// Everything else (the LayerNorms, the row-parallel layers' biases, wpe, QK-norm's scales) is
// replicated: every rank of the group holds it whole and updates it the same way.
//
// Entry points: tp_of (a TensorParallel of a group), column_parallel_forward /
// column_parallel_backward, row_parallel_forward / row_parallel_backward, tp_leave, tp_shard_rows,
// tp_sum_partial_grad, vocab_parallel_combine (SoftmaxStats), linear_forward / linear_backward.
//
// The two collectives of a column-parallel + row-parallel pair, Megatron's f and g:
//   f  "enter the parallel region", before a column-parallel layer: forward the identity (every
//      rank needs the whole input), backward an all-reduce (each rank's input gradient covers
//      only its outputs: the sum over ranks is the whole gradient);
//   g  "leave the parallel region", after a row-parallel layer: forward an all-reduce (each
//      rank's product is a partial sum over its slice of the inputs), backward the identity.
// So a block costs 2 all-reduces of (N, C) forward (after attn.proj and mlp.proj) and 2 backward
// (the inputs of attn.qkv and mlp.fc), N = B*T tokens. A row-parallel bias is added once, to the
// reduced sum, never to each rank's partial product.
//
// Sequence parallelism (--sequence-parallel): between the parallel regions (the embedding
// output, the residual stream, the LayerNorms' inputs and outputs) each rank keeps N/t of the
// token rows (rows [r N/t, (r+1) N/t) of the flattened (B,T) batch), where the replicated
// computation was duplicated before. f becomes an all-gather of the rows (forward) and a
// reduce-scatter (backward); g a reduce-scatter (forward) and an all-gather (backward): the
// same bytes as the all-reduce it replaces (an all-reduce is a reduce-scatter plus an
// all-gather). Per block:
//   forward   all-gather ln1 -> qkv ... attn.proj -> reduce-scatter; all-gather ln2 -> fc ...
//             mlp.proj -> reduce-scatter: 2 all-gathers, 2 reduce-scatters;
//   backward  all-gather the residual gradient -> mlp.proj backward ... mlp.fc backward ->
//             reduce-scatter its input gradient; the same for attention; and, because the
//             weight gradients of attn.qkv and mlp.fc need the whole LayerNorm outputs that
//             only their shards were kept of, 2 more all-gathers of ln1 and ln2: 4 all-gathers,
//             2 reduce-scatters.
// The embedding is vocabulary-parallel too: each rank looks up its own tokens (zeros for the
// others) and g sums the lookups; the lm head is a column-parallel layer over the vocabulary.
// The LayerNorm parameter gradients become partial sums over each rank's rows: they are
// all-reduced over the group (as QK-norm's scales always are: each rank sees only its heads).
//
// The parallel layers are made of the model's linear layers (linear_forward, linear_backward,
// declared below, defined in train_gpt.cu); the collectives are llmc/comm.cuh's, on the compute
// stream (they are on the critical path: the next layer needs their result).
#pragma once

#include "comm.cuh"
#include "fp8_linear.cuh"  // Fp8Use: which of a model's FP8 layers a linear layer is
#include "matmul.cuh"
#include "parallel.h"  // TpSplit: how each parameter tensor is cut over the group

// train_gpt.cu's linear layers: out (N, OC) = inp (N, IC) @ weight (OC, IC)^T + bias, and its
// backward pass (dinp =, dweight +=, dbias +=), in floatX or FP8 (fp8.state set).
inline void linear_forward(MatmulContext* mm, Fp8Use fp8, floatX* out, const floatX* inp,
                           const floatX* weight, const floatX* bias, int N, int IC, int OC);
inline void linear_backward(MatmulContext* mm, Fp8Use fp8, floatX* dinp, floatX* dweight,
                            floatX* dbias, float* partials, const floatX* dout, const floatX* inp,
                            const floatX* weight, int N, int IC, int OC);

struct TensorParallel {
    const CommGroup* group;  // the ranks of this rank's group (a group of one without TP)
    int rank, size;
    bool sequence;  // sequence parallelism
};

inline TensorParallel tp_of(const CommGroup* group, bool sequence) {
    return TensorParallel{group, group->rank, group->size, sequence && group->size > 1};
}

// ---------------------------------------------------------------------------------------------
// The conjugate collectives. `rows` is N, the token rows of the whole micro-batch; under
// sequence parallelism a rank's share is rows / t, at row offset rank * rows / t of a whole
// buffer. Buffers are (rows, width), row-major.

inline int tp_shard_rows(const TensorParallel* tp, int rows) {
    return tp->sequence ? rows / tp->size : rows;
}

// f forward: the whole input of a column-parallel layer. Without sequence parallelism it is
// already whole (returned as it is); with it, the shards are all-gathered into `whole`.
inline const floatX* tp_enter(const TensorParallel* tp, const floatX* shard, floatX* whole,
                              int rows, int width, cudaStream_t stream) {
    if (!tp->sequence) return shard;
    comm_allgather(tp->group, shard, whole, (size_t)tp_shard_rows(tp, rows) * width, stream);
    return whole;
}

// f backward: the input gradient of a column-parallel layer, a partial sum on each rank
// (rows, width), summed over the group: all-reduced in place, or reduce-scattered in place into
// this rank's rows (returned).
inline floatX* tp_enter_backward(const TensorParallel* tp, floatX* partial, int rows, int width,
                                 cudaStream_t stream) {
    if (tp->size == 1) return partial;
    if (!tp->sequence) {
        comm_allreduce_sum(tp->group, partial, (size_t)rows * width, stream);
        return partial;
    }
    const size_t count = (size_t)tp_shard_rows(tp, rows) * width;
    floatX* mine = partial + tp->rank * count;
    comm_reduce_scatter(tp->group, partial, mine, count, false, stream);
    return mine;
}

// g forward: the sum over the group of each rank's partial (rows, width), a row-parallel
// product: all-reduced in place (returns partial), or under sequence parallelism
// reduce-scattered into this rank's rows, `shard` (rows/t of them; it may be partial's own rows
// of this rank, in place), which it returns.
inline floatX* tp_leave(const TensorParallel* tp, floatX* partial, floatX* shard, int rows,
                        int width, cudaStream_t stream) {
    if (tp->size == 1) return partial;
    if (!tp->sequence) {
        comm_allreduce_sum(tp->group, partial, (size_t)rows * width, stream);
        return partial;
    }
    comm_reduce_scatter(tp->group, partial, shard, (size_t)tp_shard_rows(tp, rows) * width, false,
                        stream);
    return shard;
}

// g backward: the whole output gradient of a row-parallel layer: as it is, or all-gathered
// from the shards into `whole`.
inline const floatX* tp_leave_backward(const TensorParallel* tp, const floatX* shard, floatX* whole,
                                       int rows, int width, cudaStream_t stream) {
    return tp_enter(tp, shard, whole, rows, width, stream);
}

// Adds bias (width) to every row of x (rows, width): a row-parallel layer's bias, added to the
// reduced output. One thread per 16-byte pack (width is a multiple of the pack).
static __global__ void add_bias_kernel(floatX* x, const floatX* bias, size_t rows, int width) {
    const size_t packs = rows * width / x128::size;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < packs;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t at = i * x128::size;
        x128 v = load128(x + at);
        const x128 b = load128(bias + at % width);
        for (int k = 0; k < x128::size; k++) v[k] = (floatX)((float)v[k] + (float)b[k]);
        store128(x + at, v);
    }
}

// ---------------------------------------------------------------------------------------------
// The parallel linear layers. Shapes as linear_forward's: inp (N, IC), weight (OC, IC) as in
// PyTorch, out (N, OC), with this rank's part of the weight.

// Column-parallel: weight (OC/t, IC), bias (OC/t); inp is the whole input (after tp_enter), out
// (N, OC/t) this rank's output columns. Nothing to communicate.
inline void column_parallel_forward(MatmulContext* mm, Fp8Use fp8, floatX* out, const floatX* inp,
                                    const floatX* weight, const floatX* bias, int N, int IC,
                                    int OC_local) {
    linear_forward(mm, fp8, out, inp, weight, bias, N, IC, OC_local);
}

// Its backward: dweight, dbias of this rank's part; dinp (N, IC) the whole input gradient after
// f's all-reduce, or this rank's rows of it after the reduce-scatter (returned).
inline floatX* column_parallel_backward(MatmulContext* mm, Fp8Use fp8, const TensorParallel* tp,
                                        floatX* dinp, floatX* dweight, floatX* dbias,
                                        float* partials, const floatX* dout, const floatX* inp,
                                        const floatX* weight, int N, int IC, int OC_local) {
    linear_backward(mm, fp8, dinp, dweight, dbias, partials, dout, inp, weight, N, IC, OC_local);
    return tp_enter_backward(tp, dinp, N, IC, mm->stream);
}

// Row-parallel: weight (OC, IC/t), inp (N, IC/t) this rank's input columns; the partial products
// are summed over the group (g: all-reduce into out (N, OC), or reduce-scatter into this rank's
// rows of it) and the bias (OC, replicated) is added once, to the sum. Returns the output rows
// this rank holds: out, or its shard inside out.
inline floatX* row_parallel_forward(MatmulContext* mm, Fp8Use fp8, const TensorParallel* tp,
                                    floatX* out, const floatX* inp, const floatX* weight,
                                    const floatX* bias, int N, int IC_local, int OC) {
    if (tp->size == 1) {  // one rank: the bias in the matmul's epilogue, as a plain linear layer
        linear_forward(mm, fp8, out, inp, weight, bias, N, IC_local, OC);
        return out;
    }
    linear_forward(mm, fp8, out, inp, weight, nullptr, N, IC_local, OC);
    const size_t rows = (size_t)tp_shard_rows(tp, N);
    floatX* mine = tp_leave(tp, out, out + tp->rank * rows * OC, N, OC, mm->stream);
    if (bias) {
        const int block = 256;
        add_bias_kernel<<<grid_for(rows * OC / x128::size, block), block, 0, mm->stream>>>(
            mine, bias, rows, OC);
        CUDA_CHECK_LAUNCH();
    }
    return mine;
}

// Its backward, from the whole output gradient dout (N, OC) (after tp_leave_backward): dinp
// (N, IC/t) for this rank's input columns, dweight of its part, dbias whole (every rank sums
// the same whole dout, so the replicated bias gets the same gradient everywhere).
inline void row_parallel_backward(MatmulContext* mm, Fp8Use fp8, floatX* dinp, floatX* dweight,
                                  floatX* dbias, float* partials, const floatX* dout,
                                  const floatX* inp, const floatX* weight, int N, int IC_local,
                                  int OC) {
    linear_backward(mm, fp8, dinp, dweight, dbias, partials, dout, inp, weight, N, IC_local, OC);
}

// The gradient of a replicated tensor that each rank computed from its part of the work only
// (its heads, or under sequence parallelism its rows): summed over the group, in place.
inline void tp_sum_partial_grad(const TensorParallel* tp, floatX* grad, size_t n,
                                cudaStream_t stream) {
    if (tp->size > 1) comm_allreduce_sum(tp->group, grad, n, stream);
}

// ---------------------------------------------------------------------------------------------
// Vocabulary-parallel cross-entropy. Rank r holds the logits of tokens [v0, v0 + Vl), v0 = r Vl,
// of every row. Each rank reduces its columns of a row to softmax statistics, the running max m
// and the sum s of exp(logit - m) over its real (< V) tokens, plus the target's logit if the
// target is one of its tokens (else 0); the statistics of all ranks are all-gathered (3 floats a
// row from each: 12 t bytes per token instead of Vp logits), and every rank combines them in rank
// order, the same bits everywhere:
//   M = max_r m_r,  S = sum_r s_r exp(m_r - M),  log Z = M + log S,
//   loss = log Z - logit[target],  z-loss = z_coef (log Z)^2.
// dlogits then follows on each rank for its own columns from (M, S), as on one rank.
// (Megatron all-reduces the max, then the sum and the target logit: three collectives where
// this is one.)

struct SoftmaxStats {
    float max, sum, target;  // m_r, s_r, the target's logit (0 when not this rank's)
};

// stats: (t, N) SoftmaxStats after the all-gather, rank-major; combined (N) per row: its max
// and sum over all ranks. losses, z_losses, log_zs (N; log_zs nullptr: not wanted).
static __global__ void softmax_stats_combine_kernel(SoftmaxStats* combined, float* losses,
                                                    float* z_losses, float* log_zs,
                                                    const SoftmaxStats* stats, int N, int ranks,
                                                    float z_coef) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    float m = -INFINITY, target = 0.0f;
    for (int r = 0; r < ranks; r++) m = fmaxf(m, stats[(size_t)r * N + row].max);
    float s = 0.0f;
    for (int r = 0; r < ranks; r++) {
        const SoftmaxStats st = stats[(size_t)r * N + row];
        if (st.sum > 0.0f) s += st.sum * expf(st.max - m);
        target += st.target;
    }
    const float log_z = logf(s) + m;
    combined[row] = SoftmaxStats{m, s, log_z};
    losses[row] = log_z - target;
    z_losses[row] = z_coef * log_z * log_z;
    if (log_zs) log_zs[row] = log_z;
}

// Combines this rank's statistics `mine` (N) into `combined` (N, its max and sum over all ranks)
// and the rows' losses and log Z (log_z nullptr: not wanted); all_stats: (t, N) scratch.
inline void vocab_parallel_combine(const TensorParallel* tp, SoftmaxStats* combined, float* losses,
                                   float* z_losses, float* log_z, const SoftmaxStats* mine,
                                   SoftmaxStats* all_stats, int N, float z_coef,
                                   cudaStream_t stream) {
    const size_t floats = (size_t)N * sizeof(SoftmaxStats) / sizeof(float);
    comm_allgather(tp->group, (const float*)mine, (float*)all_stats, floats, stream);
    const int block = 256;
    softmax_stats_combine_kernel<<<(int)ceil_div(N, block), block, 0, stream>>>(
        combined, losses, z_losses, log_z, all_stats, N, tp->size, z_coef);
    CUDA_CHECK_LAUNCH();
}

// No tensor parallelism: a group of one (tests, sampling, kernels' benchmarks).
inline const TensorParallel* tp_single() {
    static const TensorParallel none = tp_of(comm_group_of_one(), false);
    return &none;
}
