// llmc/zero_fp8.cuh: ZeRO-3's FP8 all-gather (--fp8-allgather): the block weights whose products
// run in FP8 (--fp8 tensor or delayed, llmc/fp8_linear.cuh) travel as FP8 bytes, one byte an
// element where ZeRO-3 (llmc/zero.cuh) gathers two, and land in their FP8 weight caches directly.
//
// The shard plan (llmc/shard_plan.h) stays as it is: rank r owns slice r of each bucket's packed
// elements, which cuts a weight at any element (a row too), or, under Muon, whole matrices. Each
// rank quantizes what it owns of every FP8 weight with the weight's one per-tensor scale:
//   tensor   current scaling: each rank's amax over its part of the weight, reduced (max) over
//            the group (one all-reduce of a float per weight of the bucket), the scale from it
//            (fp8_scale_from_amax, as fp8_quantize_tensor sets it). The max of the parts' amaxes
//            is the whole weight's amax, so every rank quantizes with the scale of the whole
//            weight: the gathered bytes are those of quantizing the whole gathered bf16 weight,
//            bit for bit.
//   delayed  the step's scale from the amax history (known before the gather, the same on
//            every rank); each rank's amax of its part goes into the weight's running max, which
//            fp8_end_step reduces over the ranks, so the history records the whole weight's amax.
// W^T, which the backward pass's dX = G W reads, has the same per-tensor scale, so it is W's
// bytes transposed (zero_fp8_transpose): nothing more is gathered for the backward pass. The
// recipes with scales per row or block are refused with --fp8-allgather (fp8_allgather_error in
// llmc/fp8_linear.cuh says why). The scales themselves are not gathered: the amax all-reduce
// (tensor) or the history (delayed) gives every rank the same scale before it quantizes.
//
// A bucket with FP8 weights is one all-gather of bytes: rank r's contribution is its bf16
// elements of the other tensors (LayerNorms, biases) followed by its FP8 bytes, padded to the
// largest contribution of any rank (contribution bytes, a multiple of 128). Unpacking puts the
// bf16 runs into the bucket's gather buffer, where ZeRO-3's bf16 gather puts them, and the FP8
// runs into the weights' caches; a matrix (Muon) is quantized by its owner into the cache and
// broadcast as bytes. A bucket without FP8 weights (the embeddings) is gathered by zero.cuh as
// before. Every collective goes through llmc/comm.cuh on ZeRO's communication stream: counted
// in --comm-stats (all_gather, broadcast, all_reduce) and under the watchdog's deadline.
//
// Entry points: ZeroFp8Target (what the model gives per FP8 weight), zero_fp8_build (the runs, from
// the plan), zero_fp8_has (whether a bucket gathers FP8), zero_fp8_gather_bucket, zero_fp8_free.
#pragma once

#include <vector>

#include "comm.cuh"
#include "fp8.cuh"
#include "memplan.h"
#include "shard_plan.h"

// An FP8 weight the gather fills: its cache (W rows x cols and W^T, llmc/fp8_linear.cuh's
// Fp8Weight) and its per-tensor scale (tensor: the cache's; delayed: the history's); offset:
// where the weight starts in the parameter layout; weight: the model's number of the FP8 weight.
// The model gives one per tensor of its table, rows 0 for a tensor gathered in bf16; tensors
// adjacent in the layout may be one weight (the same target, the same number: Llama's q, k and
// v are one [q | k | v] matrix, its gate and up one [gate | up]), whose amax, scale and
// transpose are then the whole matrix's. Such a weight's tensors must lie in one bucket (ZeRO-3:
// a bucket per block).
struct ZeroFp8Target {
    uint8_t *q, *qt;
    int rows, cols;
    Fp8TensorScale* scale;
    size_t offset;
    int weight;
};

// n elements of this rank's parameters quantized into dst with target `target`'s scale.
struct ZeroFp8QuantRun {
    const floatX* src;
    uint8_t* dst;
    size_t n;
    int target;
};

// n bytes copied (a run of bf16 elements as their bytes).
struct ByteRun {
    const uint8_t* src;
    uint8_t* dst;
    size_t n;
};

// A matrix (Muon) sent whole from its owner: FP8 bytes (in place in the cache) or bf16 elements.
struct ZeroFp8Broadcast {
    const void* send;
    void* recv;
    size_t n;
    int owner;
    bool fp8;
};

struct ZeroFp8Bucket {
    size_t contribution;  // bytes each rank sends (0: the bucket has no FP8 weight)
    int target_first, target_count;
    int quant_first, quant_count;    // this rank's quantized runs (its slice, then its matrices)
    int pack_first, pack_count;      // this rank's bf16 runs into its contribution
    int unpack_first, unpack_count;  // every rank's runs out of the gathered bytes
    int broadcast_first, broadcast_count;
};

struct ZeroFp8 {
    bool current;  // per-tensor current scaling (else delayed)
    int me;
    uint8_t* staging;        // the gathered contributions (zero.cuh's staging buffer, as bytes)
    ZeroFp8Bucket* buckets;  // host, one per bucket
    ZeroFp8Target* targets;  // device; host_targets the same on the host
    ZeroFp8Target* host_targets;
    ZeroFp8QuantRun* quant;        // device
    ByteRun *pack, *unpack;        // device
    ZeroFp8Broadcast* broadcasts;  // host
    float* partial;                // device: ZERO_FP8_AMAX_BLOCKS per quantized run of a bucket
    float* amax;                   // device: one per target of a bucket
};

constexpr int ZERO_FP8_AMAX_BLOCKS = 32;
constexpr size_t ZERO_FP8_ALIGN = 128;  // bytes: a contribution's size is a multiple of it

// ---------------------------------------------------------------------------------------------
// Kernels. The blocks of a run (blockIdx.y) take its chunks (block_chunk).

static __global__ void zero_fp8_amax_partial_kernel(float* partial, const ZeroFp8QuantRun* runs) {
    const ZeroFp8QuantRun r = runs[blockIdx.y];
    size_t begin, end;
    block_chunk(r.n, blockIdx.x, gridDim.x, &begin, &end);
    float m = 0.0f;
    for (size_t i = begin + threadIdx.x; i < end; i += CHUNK_THREADS)
        m = fmaxf(m, fp8_abs_for_amax((float)r.src[i]));
    m = block_max(m);
    if (threadIdx.x == 0) partial[blockIdx.y * gridDim.x + blockIdx.x] = m;
}

// Block t: amax[t] = the max of the partial maxima of the runs of target first + t (0 when this
// rank owns none of it).
static __global__ void zero_fp8_amax_finish_kernel(float* amax, const float* partial,
                                                   const ZeroFp8QuantRun* runs, int run_count,
                                                   int target_first) {
    float m = 0.0f;
    for (int i = threadIdx.x; i < run_count * ZERO_FP8_AMAX_BLOCKS; i += CHUNK_THREADS)
        if (runs[i / ZERO_FP8_AMAX_BLOCKS].target == target_first + (int)blockIdx.x)
            m = fmaxf(m, partial[i]);
    m = block_max(m);
    if (threadIdx.x == 0) amax[blockIdx.x] = m;
}

// Thread t: target first + t's scale from amax[t] (current: the E4M3 scale of the whole weight,
// as fp8_amax_finish_kernel sets it; delayed: amax[t] into the step's running max).
static __global__ void zero_fp8_scales_kernel(ZeroFp8Target* targets, int first, int count,
                                              const float* amax, bool current) {
    const int t = threadIdx.x;
    if (t >= count) return;
    Fp8TensorScale* s = targets[first + t].scale;
    if (current) {
        s->amax = amax[t];
        s->scale = fp8_scale_from_amax(amax[t], fp8_max_finite(__NV_E4M3), 0, 1.0f);
        s->scale_inv = 1.0f / s->scale;
    } else {
        s->amax = fmaxf(s->amax, amax[t]);
    }
}

static __global__ void zero_fp8_quantize_kernel(const ZeroFp8QuantRun* runs,
                                                const ZeroFp8Target* targets) {
    const ZeroFp8QuantRun r = runs[blockIdx.y];
    const float scale = targets[r.target].scale->scale;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < r.n;
         i += (size_t)gridDim.x * blockDim.x)
        r.dst[i] = fp8_encode((float)r.src[i] * scale, __NV_E4M3);
}

static __global__ void copy_byte_runs_kernel(const ByteRun* runs) {
    const ByteRun r = runs[blockIdx.y];
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < r.n;
         i += (size_t)gridDim.x * blockDim.x)
        r.dst[i] = r.src[i];
}

inline void copy_byte_runs(const ByteRun* runs, int count, cudaStream_t stream) {
    if (count == 0) return;
    copy_byte_runs_kernel<<<dim3(64, count), 256, 0, stream>>>(runs);
    CUDA_CHECK_LAUNCH();
}

// qt (cols x rows) = q (rows x cols) transposed, a 32 x 32 tile per block through shared memory
// (32 x 8 threads, as fp8_quantize_tensor_kernel's).
static __global__ void zero_fp8_transpose_kernel(uint8_t* qt, const uint8_t* q, int rows,
                                                 int cols) {
    __shared__ uint8_t tile[FP8_TRANSPOSE_TILE][FP8_TRANSPOSE_TILE + 1];
    const int row0 = blockIdx.y * FP8_TRANSPOSE_TILE, col0 = blockIdx.x * FP8_TRANSPOSE_TILE;
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (int i = ty; i < FP8_TRANSPOSE_TILE; i += FP8_TRANSPOSE_ROWS)
        if (row0 + i < rows && col0 + tx < cols)
            tile[i][tx] = q[(size_t)(row0 + i) * cols + col0 + tx];
    __syncthreads();
    for (int i = ty; i < FP8_TRANSPOSE_TILE; i += FP8_TRANSPOSE_ROWS)
        if (col0 + i < cols && row0 + tx < rows)
            qt[(size_t)(col0 + i) * rows + row0 + tx] = tile[tx][i];
}

inline void zero_fp8_transpose(const ZeroFp8Target* t, cudaStream_t stream) {
    if (ceil_div(t->rows, FP8_TRANSPOSE_TILE) > 65535)
        fatal("zero_fp8_transpose: %d rows, more than 65535 tiles of %d", t->rows,
              FP8_TRANSPOSE_TILE);
    const dim3 grid((unsigned)ceil_div(t->cols, FP8_TRANSPOSE_TILE),
                    (unsigned)ceil_div(t->rows, FP8_TRANSPOSE_TILE));
    zero_fp8_transpose_kernel<<<grid, dim3(FP8_TRANSPOSE_TILE, FP8_TRANSPOSE_ROWS), 0, stream>>>(
        t->qt, t->q, t->rows, t->cols);
    CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// Building the runs

// base + offset, or nullptr when the ledger only plans (its buffers are all nullptr).
template <class T>
inline T* at_offset(T* base, size_t offset) {
    return base ? base + offset : nullptr;
}

// The runs of every bucket that holds an FP8 weight (targets[i].rows > 0 for tensor i of the
// plan's table), for this rank `me` of the plan's group: its parameters are `params` (ZeRO-3's
// shard: the element-wise part at each run's state, the matrices at matrix_base + their shard);
// bf16_place(b, offset) says where bucket b's bf16 element at layout offset `offset` goes (its
// gather buffer). staging: ZeRO's staging buffer, at least 2 x slice x ranks bytes of every
// bucket. current: per-tensor current scaling (else delayed).
template <class Place>
inline void zero_fp8_build(ZeroFp8* z, const ShardPlan* plan, int me, const floatX* params,
                           size_t matrix_base, void* staging, const ZeroFp8Target* targets,
                           bool current, DeviceLedger* ledger, Place bf16_place) {
    memset(z, 0, sizeof(*z));
    z->current = current;
    z->me = me;
    z->staging = (uint8_t*)staging;
    const int ranks = plan->ranks;
    z->buckets = (ZeroFp8Bucket*)calloc(plan->bucket_count, sizeof(ZeroFp8Bucket));
    if (z->buckets == nullptr) fatal("zero_fp8_build: out of host memory");
    std::vector<ZeroFp8Target> bucket_targets;
    std::vector<ZeroFp8QuantRun> quant;
    std::vector<ByteRun> pack, unpack;
    std::vector<ZeroFp8Broadcast> broadcasts;
    std::vector<std::vector<OwnedRange>> runs_of(ranks);
    for (int r = 0; r < ranks; r++) runs_of[r] = plan_runs(plan, r);
    size_t max_quant = 0;
    int max_targets = 0;
    for (int b = 0; b < plan->bucket_count; b++) {
        const ShardBucket* sb = &plan->buckets[b];
        ZeroFp8Bucket* zb = &z->buckets[b];
        // the bucket's FP8 weights: its pieces' and matrices' tensors with a target
        auto target_of_tensor = [&](int tensor) {
            if (targets[tensor].rows == 0) return -1;
            for (int t = zb->target_first; t < (int)bucket_targets.size(); t++)
                if (bucket_targets[t].weight == targets[tensor].weight) return t;
            return -1;
        };
        zb->target_first = (int)bucket_targets.size();
        auto add_target = [&](int tensor) {
            if (targets[tensor].rows == 0 || target_of_tensor(tensor) >= 0) return;
            for (const ZeroFp8Target& earlier : bucket_targets)
                if (earlier.weight == targets[tensor].weight)
                    fatal(
                        "zero_fp8_build: FP8 weight %d lies in two buckets (its amax and "
                        "scale need it whole in one)",
                        earlier.weight);
            bucket_targets.push_back(targets[tensor]);
        };
        for (int p = sb->piece_first; p < sb->piece_first + sb->piece_count; p++)
            add_target(plan->pieces[p].tensor);
        for (int i = sb->matrix_first; i < sb->matrix_first + sb->matrix_count; i++)
            add_target(plan->matrices[i].tensor);
        zb->target_count = (int)bucket_targets.size() - zb->target_first;
        if (zb->target_count == 0) continue;
        max_targets = std::max(max_targets, zb->target_count);
        // each rank's runs of this bucket: bf16 elements first, then FP8 bytes
        std::vector<size_t> bf16_elems(ranks, 0), fp8_bytes(ranks, 0);
        auto in_bucket = [&](const OwnedRange& o) {
            return o.state >= sb->shard && o.state < sb->shard + sb->slice;
        };
        for (int r = 0; r < ranks; r++)
            for (const OwnedRange& o : runs_of[r])
                if (in_bucket(o))
                    (target_of_tensor(o.tensor) >= 0 ? fp8_bytes : bf16_elems)[r] += o.n;
        size_t contribution = 0;
        for (int r = 0; r < ranks; r++)
            contribution = std::max(contribution, 2 * bf16_elems[r] + fp8_bytes[r]);
        zb->contribution = round_up(std::max(contribution, (size_t)1), ZERO_FP8_ALIGN);
        if (zb->contribution > 2 * sb->slice)
            fatal("zero_fp8_build: bucket %d's contribution (%zu bytes) exceeds the staging", b,
                  zb->contribution);
        zb->quant_first = (int)quant.size();
        zb->pack_first = (int)pack.size();
        zb->unpack_first = (int)unpack.size();
        for (int r = 0; r < ranks; r++) {
            uint8_t* mine = at_offset(z->staging, r * zb->contribution);
            size_t bf16_at = 0, fp8_at = 2 * bf16_elems[r];
            for (const OwnedRange& o : runs_of[r]) {
                if (!in_bucket(o)) continue;
                const int t = target_of_tensor(o.tensor);
                if (t >= 0) {
                    uint8_t* at = at_offset(mine, fp8_at);
                    uint8_t* dst =
                        at_offset(bucket_targets[t].q, o.offset - bucket_targets[t].offset);
                    if (r == me)
                        quant.push_back(ZeroFp8QuantRun{at_offset(params, o.state), at, o.n, t});
                    unpack.push_back(ByteRun{at, dst, o.n});
                    fp8_at += o.n;
                } else {
                    uint8_t* at = at_offset(mine, 2 * bf16_at);
                    uint8_t* dst = (uint8_t*)bf16_place(b, o.offset);
                    if (r == me)
                        pack.push_back(
                            ByteRun{(const uint8_t*)at_offset(params, o.state), at, 2 * o.n});
                    unpack.push_back(ByteRun{at, dst, 2 * o.n});
                    bf16_at += o.n;
                }
            }
        }
        zb->broadcast_first = (int)broadcasts.size();
        for (int i = sb->matrix_first; i < sb->matrix_first + sb->matrix_count; i++) {
            const ShardMatrix* u = &plan->matrices[i];
            const int t = target_of_tensor(u->tensor);
            const floatX* owned = at_offset(params, matrix_base + u->shard);
            if (t >= 0) {
                uint8_t* at = at_offset(bucket_targets[t].q, u->offset - bucket_targets[t].offset);
                if (u->owner == me) quant.push_back(ZeroFp8QuantRun{owned, at, u->n, t});
                broadcasts.push_back(ZeroFp8Broadcast{at, at, u->n, u->owner, true});
            } else {
                broadcasts.push_back(
                    ZeroFp8Broadcast{owned, bf16_place(b, u->offset), u->n, u->owner, false});
            }
        }
        zb->quant_count = (int)quant.size() - zb->quant_first;
        zb->pack_count = (int)pack.size() - zb->pack_first;
        zb->unpack_count = (int)unpack.size() - zb->unpack_first;
        zb->broadcast_count = (int)broadcasts.size() - zb->broadcast_first;
        max_quant = std::max(max_quant, (size_t)zb->quant_count);
    }
    z->targets = device_take_copy(ledger, MEM_OTHER, bucket_targets);
    z->host_targets =
        (ZeroFp8Target*)MALLOC_CHECK((bucket_targets.size() + 1) * sizeof(ZeroFp8Target));
    std::copy(bucket_targets.begin(), bucket_targets.end(), z->host_targets);
    z->quant = device_take_copy(ledger, MEM_OTHER, quant);
    z->pack = device_take_copy(ledger, MEM_OTHER, pack);
    z->unpack = device_take_copy(ledger, MEM_OTHER, unpack);
    z->broadcasts =
        (ZeroFp8Broadcast*)MALLOC_CHECK((broadcasts.size() + 1) * sizeof(ZeroFp8Broadcast));
    std::copy(broadcasts.begin(), broadcasts.end(), z->broadcasts);
    z->partial = device_take_n<float>(ledger, MEM_FP8, max_quant * ZERO_FP8_AMAX_BLOCKS);
    z->amax = device_take_n<float>(ledger, MEM_FP8, max_targets);
}

inline bool zero_fp8_has(const ZeroFp8* z, int b) {
    return z->buckets != nullptr && z->buckets[b].contribution > 0;
}

// Bucket b's parameters gathered on `stream` over `group` (see the top): its FP8 weights into
// their caches (W and W^T, with their scales), its other tensors into its gather buffer.
inline void zero_fp8_gather_bucket(ZeroFp8* z, int b, const CommGroup* group, cudaStream_t stream) {
    const ZeroFp8Bucket* zb = &z->buckets[b];
    const ZeroFp8QuantRun* quant = z->quant + zb->quant_first;
    if (zb->quant_count > 0) {
        zero_fp8_amax_partial_kernel<<<dim3(ZERO_FP8_AMAX_BLOCKS, zb->quant_count), CHUNK_THREADS,
                                       0, stream>>>(z->partial, quant);
        CUDA_CHECK_LAUNCH();
    }
    zero_fp8_amax_finish_kernel<<<zb->target_count, CHUNK_THREADS, 0, stream>>>(
        z->amax, z->partial, quant, zb->quant_count, zb->target_first);
    CUDA_CHECK_LAUNCH();
    if (z->current) comm_allreduce_max(group, z->amax, zb->target_count, stream);
    zero_fp8_scales_kernel<<<1, 32 * (int)ceil_div(zb->target_count, 32), 0, stream>>>(
        z->targets, zb->target_first, zb->target_count, z->amax, z->current);
    CUDA_CHECK_LAUNCH();
    if (zb->quant_count > 0) {
        zero_fp8_quantize_kernel<<<dim3(64, zb->quant_count), 256, 0, stream>>>(quant, z->targets);
        CUDA_CHECK_LAUNCH();
    }
    copy_byte_runs(z->pack + zb->pack_first, zb->pack_count, stream);
    comm_allgather(group, z->staging + z->me * zb->contribution, z->staging, zb->contribution,
                   stream);
    copy_byte_runs(z->unpack + zb->unpack_first, zb->unpack_count, stream);
    for (int i = zb->broadcast_first; i < zb->broadcast_first + zb->broadcast_count; i++) {
        const ZeroFp8Broadcast* c = &z->broadcasts[i];
        if (c->fp8)
            comm_broadcast_device(group, (const uint8_t*)c->send, (uint8_t*)c->recv, c->n, c->owner,
                                  stream);
        else
            comm_broadcast_device(group, (const floatX*)c->send, (floatX*)c->recv, c->n, c->owner,
                                  stream);
    }
    for (int t = zb->target_first; t < zb->target_first + zb->target_count; t++)
        zero_fp8_transpose(&z->host_targets[t], stream);
}

inline void zero_fp8_free(ZeroFp8* z) {
    if (z->buckets == nullptr) return;
    for (void* p : {(void*)z->targets, (void*)z->quant, (void*)z->pack, (void*)z->unpack,
                    (void*)z->partial, (void*)z->amax})
        if (p) CUDA_CHECK(cudaFree(p));
    free(z->buckets);
    free(z->host_targets);
    free(z->broadcasts);
    memset(z, 0, sizeof(*z));
}
