// llmc/context_parallel.cuh: context parallelism (--cp C), ring attention with the causal load
// balance. A cp group of C ranks shares every sequence of a micro-batch: each rank holds T/C of
// its positions, and everything outside attention (embeddings, LayerNorms, the matmuls, the MLP,
// the loss) is token-local, so it runs on the rank's rows unchanged. Attention is the one layer
// where a query needs other ranks' keys: the ranks pass their keys and values around the ring.
//
// Layout (load balance). The sequence is cut into 2C chunks of n = T/(2C) positions; rank i holds
// chunks i and 2C-1-i, in that order, as its T/C rows (cp_position). Under the causal mask a
// query of chunk c sees the keys of chunks 0..c, so chunk i is the rank's cheapest and 2C-1-i its
// dearest: every rank has the same attention work. At ring step s rank i holds the keys and
// values of rank j = i - s (mod C); of the four (query chunk, key chunk) blocks:
//   s = 0:  its two diagonal blocks (causal) and chunk 2C-1-i against chunk i (full);
//   j < i:  both its query chunks against key chunk j (full); key chunk 2C-1-j comes later
//           than both: skipped;
//   j > i:  query chunk 2C-1-i against both key chunks (full); chunk i sees neither.
// So every rank computes 2C n^2 + n key/query pairs per (sequence, head) (the whole sequence's
// T(T+1)/2 over C), the same on every rank (ContextParallel.pairs counts them, --comm-stats
// reports them).
// T must be a multiple of 2C: other lengths are refused (cp_check), not padded.
//
// Forward (cp_attention_forward). The K/V of the rank's rows are packed into a ring buffer
// (B, T/C, 2 kv_att: the width of the kv heads' keys and values, att under GPT-2) and sent to rank
// i+1 while rank i-1's arrive (ncclSend/ncclRecv through llmc/comm.cuh's comm_exchange, on the
// ring's own stream, watched by the --comm-timeout deadline under the name "the ring attention's
// K/V exchange"); two buffers, so the attention of the block already here overlaps the transfer of
// the next. Each block's output is merged into the running one with the log-sum-exp merge (the
// kernels' AttBlock.merge: out and lse of the blocks so far, and the new block's, weighted by
// exp(lse - lse_total)): the result is the attention over the whole sequence, up to rounding.
//
// Backward (cp_attention_backward): the K/V pass around the ring again (recomputed from the
// saved qkv, prefetched like the forward pass), and with them an accumulator of their gradients:
// at each step a rank computes its queries' contributions to dK/dV of the keys it holds (and to
// its own dQ) into a buffer of its own while the accumulator of those keys arrives from rank
// i-1, adds the two and sends the sum on to rank i+1, which receives it during its next step's
// attention. After C steps each accumulator has visited every rank and one more hop brings it
// home. So every transfer overlaps attention except the last hop home.
// Why a ring and not an all-gather of K/V: the all-gather holds the whole sequence's K/V on every
// rank (C blocks of S below, where the ring holds two), and the gradients then need a
// reduce-scatter of the same size; the bytes sent are nearly the same: per layer and rank, with
// S = B (T/C) 2 kv_att elements of K/V:
//   ring:        forward (C-1) S; backward (C-1) S of K/V + C S of dK/dV  (3C-2) S in all;
//   all-gather:  forward (C-1) S; backward (C-1) S again (or kept: C S more memory) + (C-1) S
//                of reduce-scatter                                       (3C-3) S in all.
// The ring costs one hop more of S per layer and keeps the memory at 5 blocks of S (two K/V,
// two dK/dV being computed and sent, one arriving), whatever C is: the reason context
// parallelism exists.
//
// The parameter gradients of the group's ranks are summed by the data-parallel reduction: ZeRO's
// shard group is dp x cp (llmc/parallel.h), which averages over the C ranks that each averaged
// over T/C of the positions: the mean over every position. Tensor parallelism composes (a cp
// rank is a tp group: the heads are cut inside, the ring runs between the groups' same ranks).
//
// Text samples are generated through the ring (train_run.cuh's gpt_generate): the context padded
// to T, laid out as a batch, each rank's forward pass on its rows, and the rank holding the last
// position (cp_rank_of) broadcasting its logits to the group.
//
// Entry points: cp_check (T and the grid), cp_position (a row's place in the sequence),
// cp_rank_of (the rank and row holding a position), cp_local_tokens (a rank's rows of a batch),
// cp_build / cp_free, cp_attention_forward, cp_attention_backward.
#pragma once

#include <cstdio>

#include "comm.cuh"

// A rank's part of context parallelism: its ring, the ring's buffers and its counters.
struct ContextParallel {
    const CommGroup* group;  // the cp group: the ring, rank i sends to i+1
    int size, rank;          // C and i; size 1: no context parallelism
    int rows;                // T/C rows per sequence held here: chunks i and 2C-1-i
    int chunk;               // n = T/(2C) positions per chunk
    // Two K/V blocks (B, rows, 2 kv_att) of whichever rank: the one attended, the one arriving; two
    // of their gradients (backward): this step's, the last step's being sent; and the
    // accumulator arriving. nullptr at size 1.
    floatX *kv[2], *dkv[2], *dkv_in;
    cudaStream_t stream;             // the ring's transfers
    cudaEvent_t computed, received;  // the compute stream done with a buffer; a transfer done
    double pairs;                    // key/query pairs the forward kernels computed (counted)
};

// nullptr if a sequence of T positions can be cut for a ring of C, else the message.
inline const char* cp_check(int cp, int T, char* msg, size_t len) {
    if (cp > 1 && T % (2 * cp) != 0) {
        snprintf(msg, len,
                 "--cp %d cuts each sequence into 2 x %d chunks (the causal load balance): --seq "
                 "%d is not a multiple of %d",
                 cp, cp, T, 2 * cp);
        return msg;
    }
    return nullptr;
}

// The position in the sequence of row t of the rows a rank holds (rows = T/C, chunk = rows / 2):
// chunk `rank` first, then chunk 2C-1-rank. Size 1: t.
__host__ __device__ inline int cp_position(int t, int rows, int size, int rank) {
    const int chunk = rows / 2;
    if (size == 1) return t;
    return t < chunk ? rank * chunk + t : (2 * size - 1 - rank) * chunk + (t - chunk);
}

// The cp rank holding position p of a sequence (the inverse of cp_position), and the row it
// holds it in (*row). Size 1: rank 0, row p.
inline int cp_rank_of(const ContextParallel* cp, int p, int* row) {
    if (cp->size == 1) {
        *row = p;
        return 0;
    }
    const int chunk = p / cp->chunk, offset = p % cp->chunk;
    if (chunk < cp->size) {
        *row = offset;
        return chunk;
    }
    *row = cp->chunk + offset;
    return 2 * cp->size - 1 - chunk;
}

// This rank's rows of a host batch (B, T) of tokens: local (B, T/C).
inline void cp_local_tokens(const ContextParallel* cp, const int* whole, int* local, int B, int T) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < cp->rows; t++)
            local[(size_t)b * cp->rows + t] =
                whole[(size_t)b * T + cp_position(t, cp->rows, cp->size, cp->rank)];
}

// The ring's buffers for micro-batches of B sequences, T/C rows each, of key (and value) width
// kv_att (this rank's kv heads), taken from the ledger (counted by the memory plan).
inline void cp_build(ContextParallel* cp, const CommGroup* group, int B, int rows, int kv_att,
                     DeviceLedger* ledger) {
    memset(cp, 0, sizeof(*cp));
    cp->group = group;
    cp->size = group->size;
    cp->rank = group->rank;
    cp->rows = rows;
    cp->chunk = rows / 2;
    if (cp->size == 1) return;
    const size_t block = (size_t)B * rows * 2 * kv_att;
    for (int k = 0; k < 2; k++) {
        cp->kv[k] = device_take_n<floatX>(ledger, MEM_ACTIVATIONS, block);
        cp->dkv[k] = device_take_n<floatX>(ledger, MEM_ACTIVATIONS, block);
    }
    cp->dkv_in = device_take_n<floatX>(ledger, MEM_ACTIVATIONS, block);
    if (ledger->plan_only) return;
    CUDA_CHECK(cudaStreamCreateWithFlags(&cp->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&cp->computed, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&cp->received, cudaEventDisableTiming));
}

inline void cp_free(ContextParallel* cp) {
    if (cp->size == 1 || cp->kv[0] == nullptr) return;
    for (int k = 0; k < 2; k++) {
        CUDA_CHECK(cudaFree(cp->kv[k]));
        CUDA_CHECK(cudaFree(cp->dkv[k]));
    }
    CUDA_CHECK(cudaFree(cp->dkv_in));
    CUDA_CHECK(cudaStreamDestroy(cp->stream));
    CUDA_CHECK(cudaEventDestroy(cp->computed));
    CUDA_CHECK(cudaEventDestroy(cp->received));
}

// The ring's exchange: `send` to rank i+1, `recv` from rank i-1, queued on the ring's stream
// after the compute stream's work so far (which wrote send and last read recv); the compute
// stream waits for it at cp_ring_wait.
inline void cp_ring_exchange(ContextParallel* cp, floatX* send, floatX* recv, size_t n,
                             cudaStream_t compute, const char* what) {
    CUDA_CHECK(cudaEventRecord(cp->computed, compute));
    CUDA_CHECK(cudaStreamWaitEvent(cp->stream, cp->computed, 0));
    const CommP2p<floatX> ops[2] = {{send, n, (cp->rank + 1) % cp->size, true},
                                    {recv, n, (cp->rank + cp->size - 1) % cp->size, false}};
    comm_exchange(cp->group, ops, 2, cp->stream, what);
    CUDA_CHECK(cudaEventRecord(cp->received, cp->stream));
}

inline void cp_ring_wait(ContextParallel* cp, cudaStream_t compute) {
    CUDA_CHECK(cudaStreamWaitEvent(compute, cp->received, 0));
}

// The (query chunk a, key chunk b) block of ring step s, if it is computed: the global chunks of
// a (this rank's) and b (those of rank j = rank - s): b after a skipped, b == a causal.
inline bool cp_block(const ContextParallel* cp, int s, int a, int b, AttBlock* blk) {
    const int C = cp->size, j = (cp->rank - s + C) % C;
    const int query_chunk = a == 0 ? cp->rank : 2 * C - 1 - cp->rank;
    const int key_chunk = b == 0 ? j : 2 * C - 1 - j;
    if (key_chunk > query_chunk) return false;
    blk->n = cp->chunk;
    blk->q0 = a * cp->chunk;
    blk->k0 = b * cp->chunk;
    blk->causal = key_chunk == query_chunk;
    return true;
}

// Key/query pairs of a block, over B sequences and NH heads.
inline double cp_block_pairs(const AttBlock* blk, int B, int NH) {
    const double n = blk->n;
    return (double)B * NH * (blk->causal ? n * (n + 1) / 2 : n * n);
}

// Packs the K/V of this rank's rows of qkv (B, rows, att + 2 kv_att) into kv (B, rows, 2 kv_att).
inline void cp_pack_kv(floatX* kv, const floatX* qkv, int B, int rows, int att, int kv_att,
                       cudaStream_t stream) {
    CUDA_CHECK(cudaMemcpy2DAsync(kv, 2 * kv_att * sizeof(floatX), qkv + att,
                                 (att + 2 * kv_att) * sizeof(floatX), 2 * kv_att * sizeof(floatX),
                                 (size_t)B * rows, cudaMemcpyDeviceToDevice, stream));
}

// out (B,T,att) and lse (B,NH,T) of this rank's queries in qkv (B,T,att + 2 kv_att; KVH kv
// heads) over the whole sequence's keys, around the ring (see the top of the file); T: the rows
// held. logit_max as attention_forward's. Size 1: attention_forward (T: any length).
inline void cp_attention_forward(ContextParallel* cp, floatX* out, float* lse, const floatX* qkv,
                                 int B, int T, int NH, int KVH, int HS, cudaStream_t stream,
                                 unsigned* logit_max) {
    const int att = NH * HS, kv_att = KVH * HS, rows = cp->rows;
    if (cp->size == 1)
        return attention_forward(out, lse, qkv, B, T, NH, KVH, HS, stream, ATTENTION_PATH,
                                 logit_max);
    if (T != rows) fatal("context parallelism: attention over %d rows, not the %d held", T, rows);
    const size_t elems = (size_t)B * rows * 2 * kv_att;
    cp_pack_kv(cp->kv[0], qkv, B, rows, att, kv_att, stream);
    bool written[2] = {false, false};  // whether query chunk a holds a block's result yet
    for (int s = 0; s < cp->size; s++) {
        floatX* here = cp->kv[s & 1];
        if (s + 1 < cp->size)
            cp_ring_exchange(cp, here, cp->kv[(s + 1) & 1], elems, stream,
                             "the ring attention's K/V exchange (context parallelism, forward)");
        for (int a = 0; a < 2; a++)
            for (int b = 1; b >= 0; b--) {  // a diagonal block first: it leaves every row a key
                AttBlock blk = {rows, 0, 0, 0, 2 * (size_t)kv_att, false, written[a]};
                if (!cp_block(cp, s, a, b, &blk)) continue;
                attention_block_forward(out, lse, qkv, here, blk, B, NH, KVH, HS, stream,
                                        ATTENTION_PATH, logit_max);
                cp->pairs += cp_block_pairs(&blk, B, NH);
                written[a] = true;
            }
        if (s + 1 < cp->size) cp_ring_wait(cp, stream);
    }
}

// dqkv (B,T,att + 2 kv_att) = the gradient of this rank's attention output dout, around the
// ring (see the top of the file); delta (B,NH,T) scratch. Size 1: attention_backward.
inline void cp_attention_backward(ContextParallel* cp, floatX* dqkv, float* delta,
                                  const floatX* dout, const floatX* out, const floatX* qkv,
                                  const float* lse, int B, int T, int NH, int KVH, int HS,
                                  cudaStream_t stream) {
    const int att = NH * HS, kv_att = KVH * HS, rows = cp->rows;
    if (cp->size == 1)
        return attention_backward(dqkv, delta, dout, out, qkv, lse, B, T, NH, KVH, HS, stream);
    const size_t elems = (size_t)B * rows * 2 * kv_att;
    cp_pack_kv(cp->kv[0], qkv, B, rows, att, kv_att, stream);
    bool dq_written[2] = {false, false};
    for (int s = 0; s < cp->size; s++) {
        floatX *here = cp->kv[s & 1], *grads = cp->dkv[s & 1];
        if (s + 1 < cp->size)
            cp_ring_exchange(cp, here, cp->kv[(s + 1) & 1], elems, stream,
                             "the ring attention's K/V exchange (context parallelism, backward)");
        // grads: this step's contributions to the held keys' gradients. At step 0 a key chunk's
        // first block (its diagonal one, which comes first, as for the queries) overwrites it;
        // later steps add to zeros (a key chunk may get no block: j < i skips chunk 2C-1-j)
        if (s > 0) CUDA_CHECK(cudaMemsetAsync(grads, 0, elems * sizeof(floatX), stream));
        bool dkv_written[2] = {s > 0, s > 0};
        for (int a = 0; a < 2; a++)
            for (int b = 1; b >= 0; b--) {
                AttBlock blk = {rows, 0, 0, 0, 2 * (size_t)kv_att, false, dq_written[a]};
                if (!cp_block(cp, s, a, b, &blk)) continue;
                // one flag merges both the queries' and the keys' gradients: they agree
                if (dq_written[a] != dkv_written[b])
                    fatal(
                        "context parallelism: ring step %d block (%d, %d) would merge dQ %d dKV %d",
                        s, a, b, dq_written[a], dkv_written[b]);
                attention_block_backward(dqkv, grads, delta, dout, out, qkv, here, lse, blk, B, NH,
                                         KVH, HS, stream);
                dq_written[a] = dkv_written[b] = true;
            }
        // the next K/V, and the accumulator of the held keys (sent by rank i-1 after its step
        // s-1, while this step's attention ran), are here
        if (s + 1 < cp->size || s > 0) cp_ring_wait(cp, stream);
        if (s > 0) residual_forward(grads, grads, cp->dkv_in, elems, stream);
        // the sum moves on, received during the next step's attention; after the last step it
        // goes home (rank - (C-1) = rank + 1), and this rank's own arrives
        cp_ring_exchange(cp, grads, cp->dkv_in, elems, stream,
                         "the ring attention's dK/dV exchange (context parallelism, backward)");
    }
    cp_ring_wait(cp, stream);
    // this rank's keys' and values' gradients, into dqkv's k and v
    CUDA_CHECK(cudaMemcpy2DAsync(dqkv + att, (att + 2 * kv_att) * sizeof(floatX), cp->dkv_in,
                                 2 * kv_att * sizeof(floatX), 2 * kv_att * sizeof(floatX),
                                 (size_t)B * rows, cudaMemcpyDeviceToDevice, stream));
}
