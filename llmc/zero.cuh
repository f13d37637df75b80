// llmc/zero.cuh: data parallelism and ZeRO. Every rank of the data-parallel group computes the
// gradients of its part of the batch; they are reduced over the group, in buckets, on a
// communication stream of their own while the backward pass goes on; then the optimizer state
// is either held by every rank (stage 0) or sharded over the group (ZeRO):
//   stage 0  every rank holds everything; each bucket is all-reduced; every rank takes the
//            whole step (4 + 12 bytes per parameter in the bf16 build: 16 Psi);
//   stage 1  the optimizer state and the fp32 master weights are sharded: each rank receives
//            the reduced gradient of the part it owns (reduce-scatter, in place, then copied
//            back into the gradient buffer where the part lives), updates that part, and the
//            updated parameters are all-gathered (4 Psi + 12 Psi / N);
//   stage 2  the gradients too: the backward pass writes each bucket into a buffer of its own,
//            reduce-scattered (every micro-batch, accumulated into the owned gradient shard)
//            and reused, so no rank holds a whole gradient (2 Psi + 14 Psi / N, plus the
//            in-flight buckets);
//   stage 3  the parameters too (16 Psi / N, plus the gather buffers): each rank keeps its part
//            of the bf16 parameters, in the order of its master weights, and every layer's
//            parameters are all-gathered into a gather buffer before the layer runs, forward and
//            backward (see "ZeRO-3" below).
//
// Gradient groups and buckets. The backward pass finishes the gradients of the model in a fixed
// order of groups: the last block (with the final LayerNorm, whose gradient is done just before
// it), then each block down to the first, then the embeddings (wte, which the lm head also
// writes at the very start, and wpe). Every group is one contiguous range of the parameter
// layout, and consecutive groups are adjacent ranges, so a bucket, a run of consecutive groups of
// at least --bucket-mb MiB (the last one takes what is left), is one contiguous range too. When
// the backward pass has finished the last group of a bucket (dp_group_done, called by the model
// after each group), the compute stream records an event, the communication stream waits for it
// and reduces the bucket; before the optimizer reads any gradient the compute stream waits for
// the last bucket's event (dp_finish): the buckets are reduced in order on one stream, so that
// event follows them all. With several micro-batches per step, stages 0 and 1 sum the
// gradients locally and reduce during the last backward pass only; stage 2 has nowhere to keep
// a whole gradient, so it reduces every micro-batch (the traffic says so).
//
// The shard plan (llmc/shard_plan.h) says which rank owns what: element-wise tensors (AdamW,
// Lion) are cut into equal slices per bucket, matrices (Muon) are owned whole. The optimizer
// state of rank r is its slices bucket after bucket, then its matrices; at stage 0 every rank
// holds the state of all ranks, the same way, so one update routine serves every stage.
//
// The gradient norm (clipping) is a sum over the plan: per rank, its slices and its matrices in
// state order, each a fixed two-pass sum of squares; the ranks' sums are added in rank order.
// At stage 0 one rank computes all of them, at stages 1 and 2 each rank its own: the same
// arithmetic, so stages 0, 1 and 2 (at one micro-batch per step) give the same bits (the CPU
// NCCL reduces every collective in rank order; a GPU's NCCL picks its algorithms itself).
// Stage 3 has a bucket per group; it gives stage 2's bits when stage 2's buckets are single
// groups too (the norm then sums the same slices).
//
// The words for ranges of the parameter layout, here and in llmc/shard_plan.h, from the
// smallest:
//   tensor       a parameter tensor's elements (ShardTensor; the parameter table's entry);
//   run          consecutive elements of one tensor (CopyRun: a run copied from one buffer to
//                another; plan_runs: the runs of a rank's slices);
//   piece        an element-wise tensor's elements within a bucket's packed sequence
//                (ShardPiece: the tensor whole, without its alignment gap);
//   matrix       one matrix of a tensor whose optimizer needs whole matrices (ShardMatrix;
//                attn.qkv.w is three under Muon: Q, K and V), owned whole by one rank;
//   group        the gradients of one block, or of the embeddings, that the backward pass
//                finishes together (dp_group_begin/dp_group_done);
//   bucket       consecutive groups reduced together (GradBucket; ShardBucket: its plan);
//   slice        rank r's equal share of a bucket's packed pieces;
//   shard        what a rank owns of the state: its slices bucket after bucket (the
//                element-wise shard), then its matrices (the matrix shard);
//   owned range  one run of a slice, or one matrix, with where its state lies (OwnedRange):
//                what the optimizer updates and the checkpoint's "owned" section lists.
// (A gather slot is one of stage 3's gather buffers, not a range.)
//
// Entry points: dp_init / dp_free; in the backward pass dp_backward_begin, dp_group_begin and
// dp_group_done around each group, dp_grad (where a gradient goes); before the update dp_finish,
// dp_grad_sum_squares (the norm), dp_owned_grad; after it dp_gather_params; ZeRO-3's hooks
// dp_params_begin / dp_params_ready and dp_weights (where the passes read a tensor),
// dp_params_whole (every tensor in bf16, for downloads), dp_fp8_gather_init (--fp8-allgather);
// dp_sync; under pipeline parallelism dp_pipeline_begin, dp_pipeline_action_begin and
// dp_pipeline_finish.
#pragma once

#include <algorithm>
#include <vector>

#include "comm.cuh"
#include "memplan.h"
#include "norm.cuh"
#include "shard_plan.h"  // plan_build, plan_owned: who owns which ranges
#include "zero_fp8.cuh"  // --fp8-allgather: ZeRO-3's gathers of the FP8 weights in FP8

// The tests of the streams' structure (scripts/test_dp.py, test_zero3.py) run a build with
// -DTEST_DROP_WAITS and name in LLMC_TEST_DROP_WAIT one wait between the streams to leave out,
// to see the race it prevents: "dp-backward" (a bucket's reduction waits for its gradients),
// "zero3-gather" (a gather waits for the kernels still reading its buffer), "zero3-compute"
// (the kernels wait for the gather of their parameters). Every other build keeps every wait.
#ifdef TEST_DROP_WAITS
inline bool test_drops_wait(const char* wait) {
    const char* name = getenv("LLMC_TEST_DROP_WAIT");
    return name && strcmp(name, wait) == 0;
}
#else
constexpr bool test_drops_wait(const char*) { return false; }
#endif

// =============================================================================================
// Data parallelism.

// Where a range of the layout (a tensor, or one matrix of it) lies in its bucket's gather buffer.
struct GatherPlace {
    size_t offset, n, at;
};

struct GradBucket {
    size_t begin, end;  // element range of the parameter layout
    int first_group, last_group;
    cudaEvent_t done;  // recorded on the communication stream after its collectives
};

// A copy of n elements from src[from] to dst[to] (packing and unpacking buckets).
struct CopyRun {
    size_t to, from, n;
};

// A run of gradients the norm sums, of rank `rank`, in its tensor's norm entry (ShardTensor).
struct NormItem {
    const floatX* grads;
    size_t n;
    int rank, blocks, entry;
};

struct DataParallel {
    // the grid's shard group (dp x cp ranks, llmc/parallel.h): the gradients are reduced over
    // it and the model state sharded
    const CommGroup* group;
    int stage;            // 0 to 3 (see the top)
    int me;               // this rank in the group
    cudaStream_t stream;  // the communication stream
    floatX* grads;        // the gradient buffer (stages 0 and 1), in the parameter layout
    int count;            // buckets, in the order the backward pass completes them
    GradBucket* buckets;
    int* bucket_of;        // per group: its bucket
    cudaEvent_t computed;  // recorded on the compute stream when a bucket's gradients are done
    bool reduce;           // reduce during this backward pass
    bool hold_last;        // pipeline parallelism, stages 2, 3: the last bucket waits for the end
                           // of the step (dp_pipeline_begin)
    cudaEvent_t drained;   // pipeline parallelism, stages 2, 3: recorded on the communication
                           // stream before an action reuses the buckets' buffers
    bool first_micro;      // stages 2, 3: the step's first micro-batch (reduce into, not onto)
    ShardPlan plan;
    // what this rank updates and keeps the state of (stage 0: everything), in state order
    OwnedRange* owned;
    int owned_count;
    size_t elem_state, matrix_state;  // elements of the element-wise and the matrix state
    // stages 1 to 3
    floatX* grad_shard;    // stages 2, 3: reduced gradients of the owned state (elem_state +
                           // matrix_state); stages 0 and 1 keep them in the gradient buffer
    floatX* staging;       // one packed bucket (ranks x slice), then the next
    floatX* accumulate;  // stages 2, 3: a slice or matrix reduced before it is added to grad_shard
    CopyRun* runs;         // device: per bucket, packing runs then this rank's parameter runs
    CopyRun* unpack_runs;  // device: at each run's index, the way back: packed -> layout (stage 3:
                           // -> the bucket's gather buffer), and this rank's slice -> its
                           // parameters' places (stage 1: where its reduced gradient goes)
    int* pack_first;       // per bucket: first packing run (count + 1 entries)
    int* param_first;      // per bucket: first parameter run of this rank (count + 1 entries)
    int* pack_blocks;      // per bucket: copy_runs' blocks a run for its packing runs
    int* param_blocks;     // and for this rank's parameter runs
    // stages 2 and 3: the buffers the backward pass writes gradients into
    floatX* slots[2];   // buckets 0 .. count-2 alternate between two
    floatX* last_slot;  // the last bucket (with wte, written from the start) has its own
    bool* prepared;     // per bucket: zeroed for this micro-batch
    // stage 3: the buffers the passes read parameters from, the same way: buckets 0 .. count-2
    // alternate between gather[0] and gather[1], the last (the embeddings) has gather[2]
    floatX* gather[3];
    int gather_held[3];         // the bucket whose current parameters each holds (-1: none)
    // --fp8-allgather: a bucket with FP8-gathered tensors keeps only its other tensors in its
    // gather buffer, each at gather_places' `at` (place_first: per bucket, count + 1 entries;
    // none for the other buckets, whose tensors sit at their offset from the bucket's begin)
    GatherPlace* gather_places;
    int* place_first;
    ZeroFp8 fp8;                // the FP8 gathers (llmc/zero_fp8.cuh); fp8.buckets nullptr: none
    cudaEvent_t gathered[3];    // recorded on the communication stream after each gather
    cudaEvent_t compute_point;  // the compute stream's work so far, before a gather
    // the gradient norm
    NormItem* norm_items;  // device
    int norm_item_count, norm_max_blocks;
    float* norm_partials;   // (items, norm_max_blocks)
    int norm_entries;       // the tensors' norm entries (ShardTensor::norm_entry): 1 + the largest
    float* norm_rank_sums;  // (ranks, 1 + norm_entries) device: each rank's sum, then its entries'
};

// ---------------------------------------------------------------------------------------------
// Kernels: copying runs (packing a bucket, unpacking it) and adding a reduced part onto the
// accumulated one. The blocks of a run (blockIdx.y) take its chunks (block_chunk).

static __global__ void copy_runs_kernel(floatX* dst, const floatX* src, const CopyRun* runs) {
    const CopyRun r = runs[blockIdx.y];
    size_t begin, end;
    block_chunk(r.n, blockIdx.x, gridDim.x, &begin, &end);
    for (size_t i = begin + threadIdx.x; i < end; i += CHUNK_THREADS)
        dst[r.to + i] = src[r.from + i];
}

// The blocks a run for runs[first, last): one per 1024 elements of the longest, at most 64. A
// tiny model's vectors, runs of 64 elements, take one block, not 64 with nothing to do (which
// the CPU runtime still has to run).
inline int copy_runs_blocks(const std::vector<CopyRun>& runs, int first, int last) {
    size_t longest = 1;
    for (int i = first; i < last; i++) longest = std::max(longest, runs[i].n);
    return (int)std::min<size_t>(64, ceil_div(longest, 1024));
}

inline void copy_runs(floatX* dst, const floatX* src, const CopyRun* runs, int count, int blocks,
                      cudaStream_t stream) {
    if (count == 0) return;
    copy_runs_kernel<<<dim3(blocks, count), CHUNK_THREADS, 0, stream>>>(dst, src, runs);
    CUDA_CHECK_LAUNCH();
}

static __global__ void add_into_kernel(floatX* dst, const floatX* add, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = (floatX)((float)dst[i] + (float)add[i]);
}

inline void add_into(floatX* dst, const floatX* add, size_t n, cudaStream_t stream) {
    add_into_kernel<<<grid_for(n, 256), 256, 0, stream>>>(dst, add, n);
    CUDA_CHECK_LAUNCH();
}

// The norm: partials[item * max_blocks + block] = the sum of squares of the chunk of item
// `item` that block `block` of its `blocks` owns (block_sum_of_squares); then rank_sums[r * width]
// = the partials of rank r's items, added in item and block order by one thread, and rank_sums[r *
// width + 1 + e] those of its items in norm entry e (width = 1 + entries).
static __global__ void norm_items_kernel(float* partials, const NormItem* items, int max_blocks) {
    const NormItem it = items[blockIdx.y];
    if ((int)blockIdx.x >= it.blocks) return;  // whole blocks leave: no barrier is skipped
    const float total = block_sum_of_squares(it.grads, it.n, blockIdx.x, it.blocks);
    if (threadIdx.x == 0) partials[(size_t)blockIdx.y * max_blocks + blockIdx.x] = total;
}

static __global__ void norm_rank_sums_kernel(float* rank_sums, const float* partials,
                                             const NormItem* items, int count, int max_blocks,
                                             int ranks, int width) {
    for (int k = 0; k < ranks * width; k++) rank_sums[k] = 0.0f;
    for (int i = 0; i < count; i++)
        for (int b = 0; b < items[i].blocks; b++) {
            const float p = partials[(size_t)i * max_blocks + b];
            rank_sums[items[i].rank * width] += p;
            rank_sums[items[i].rank * width + 1 + items[i].entry] += p;
        }
}

// ---------------------------------------------------------------------------------------------
// Set-up.

// Stage 3: the places of the bf16 tensors of every bucket that holds FP8-gathered ones
// (--fp8-allgather), packed in layout order at multiples of 128 elements (as the layout aligns
// its tensors); returns the elements of the largest block bucket's gather buffer (largest_bucket
// when no bucket is compacted).
inline size_t dp_gather_places(DataParallel* dp, const ShardTensor* tensors,
                               size_t largest_bucket) {
    std::vector<GatherPlace> places;
    dp->place_first = (int*)MALLOC_CHECK((dp->count + 1) * sizeof(int));
    size_t largest = 0;
    bool compacted = false;
    for (int b = 0; b < dp->count; b++) {
        dp->place_first[b] = (int)places.size();
        const ShardBucket* sb = &dp->plan.buckets[b];
        std::vector<GatherPlace> ranges;  // the bucket's tensors and matrices, in layout order
        bool fp8 = false;
        for (int p = sb->piece_first; p < sb->piece_first + sb->piece_count; p++) {
            const ShardPiece* piece = &dp->plan.pieces[p];
            if (tensors[piece->tensor].fp8_gathered) fp8 = true;
            else ranges.push_back(GatherPlace{piece->offset, piece->n, 0});
        }
        for (int i = sb->matrix_first; i < sb->matrix_first + sb->matrix_count; i++) {
            const ShardMatrix* u = &dp->plan.matrices[i];
            if (tensors[u->tensor].fp8_gathered) fp8 = true;
            else ranges.push_back(GatherPlace{u->offset, u->n, 0});
        }
        const size_t span = dp->buckets[b].end - dp->buckets[b].begin;
        if (!fp8) {
            if (b + 1 < dp->count) largest = std::max(largest, span);
            continue;
        }
        compacted = true;
        std::sort(ranges.begin(), ranges.end(),
                  [](const GatherPlace& x, const GatherPlace& y) { return x.offset < y.offset; });
        size_t at = 0;
        for (GatherPlace& r : ranges) {
            r.at = at;
            at = round_up(at + r.n, (size_t)128);
            places.push_back(r);
        }
        if (b + 1 < dp->count) largest = std::max(largest, at);
    }
    dp->place_first[dp->count] = (int)places.size();
    dp->gather_places = (GatherPlace*)MALLOC_CHECK((places.size() + 1) * sizeof(GatherPlace));
    std::copy(places.begin(), places.end(), dp->gather_places);
    return compacted ? largest : largest_bucket;
}

// Builds the buckets from the groups' ranges in the order the backward pass finishes them
// (group_begin/group_end: n_groups element ranges, each adjacent to the next one's), the plan of
// tensors[0..n_tensors) and this rank's part. grads: the full gradient buffer (stages 0 and
// 1), nullptr at stages 2 and 3. Its buffers are taken from `ledger`: the reduced gradient
// shard of stages 2 and 3 (kept between steps) as grads, the buffers of buckets in flight as
// buckets, stage 3's
// gather buffers, the run lists as other. At stage 3 the caller's parameter buffer is the
// shard, dp_param_elems elements.
inline void dp_init(DataParallel* dp, const CommGroup* group, int stage, floatX* grads,
                    const size_t* group_begin, const size_t* group_end, int n_groups,
                    const ShardTensor* tensors, int n_tensors, double bucket_mb,
                    DeviceLedger* ledger) {
    memset(dp, 0, sizeof(*dp));
    dp->group = group;
    dp->stage = group->size == 1 ? 0 : stage;  // one rank: nothing to shard
    dp->me = group->rank;
    dp->grads = grads;
    dp->buckets = (GradBucket*)MALLOC_CHECK(n_groups * sizeof(GradBucket));
    dp->bucket_of = (int*)MALLOC_CHECK(n_groups * sizeof(int));
    // stage 3 gathers, reduces and frees the parameters a group at a time: a bucket per group
    const size_t bucket_elems =
        dp->stage == 3 ? 0 : (size_t)(bucket_mb * 1048576.0 / sizeof(floatX));
    size_t lo = group_begin[0], hi = group_end[0];
    int first = 0;
    for (int u = 0; u < n_groups; u++) {
        lo = std::min(lo, group_begin[u]);
        hi = std::max(hi, group_end[u]);
        dp->bucket_of[u] = dp->count;
        if (hi - lo >= bucket_elems || u == n_groups - 1) {
            dp->buckets[dp->count++] = GradBucket{lo, hi, first, u, nullptr};
            if (u + 1 < n_groups) lo = group_begin[u + 1], hi = group_end[u + 1], first = u + 1;
        }
    }
    // The plan is over the whole group at every stage (the norm follows it); stage 0 owns
    // every rank's part, one after the other.
    const int ranks = group->size;
    std::vector<size_t> begins(dp->count), ends(dp->count);
    for (int b = 0; b < dp->count; b++)
        begins[b] = dp->buckets[b].begin, ends[b] = dp->buckets[b].end;
    plan_build(&dp->plan, begins.data(), ends.data(), dp->count, tensors, n_tensors, ranks);
    std::vector<OwnedRange> owned;
    for (int r = 0; r < ranks; r++) {
        if (dp->stage > 0 && r != dp->me) continue;
        for (OwnedRange o : plan_owned(&dp->plan, r)) {
            o.state += o.matrix ? dp->matrix_state : dp->elem_state;
            owned.push_back(o);
        }
        dp->elem_state += dp->plan.elem_shard;
        dp->matrix_state += dp->plan.matrix_shard[r];
    }
    dp->owned_count = (int)owned.size();
    dp->owned = (OwnedRange*)MALLOC_CHECK((owned.size() + 1) * sizeof(OwnedRange));
    std::copy(owned.begin(), owned.end(), dp->owned);
    if (dp->stage > 0) {
        if (dp->stage >= 2)
            dp->grad_shard =
                device_take_n<floatX>(ledger, MEM_GRADS, dp->elem_state + dp->matrix_state);
        size_t staging = 0, largest_matrix = 0, largest_bucket = 0;
        for (int b = 0; b < dp->count; b++) {
            staging = std::max(staging, dp->plan.buckets[b].slice * ranks);
            if (b + 1 < dp->count)
                largest_bucket =
                    std::max(largest_bucket, dp->buckets[b].end - dp->buckets[b].begin);
        }
        for (int i = 0; i < dp->plan.matrix_count; i++)
            largest_matrix = std::max(largest_matrix, dp->plan.matrices[i].n);
        dp->staging = device_take_n<floatX>(ledger, MEM_BUCKETS, staging);
        if (dp->stage >= 2) {
            size_t slice = 0;
            for (int b = 0; b < dp->count; b++) slice = std::max(slice, dp->plan.buckets[b].slice);
            dp->accumulate =
                device_take_n<floatX>(ledger, MEM_BUCKETS, std::max(slice, largest_matrix));
            for (int s = 0; s < 2 && dp->count > 1; s++)
                dp->slots[s] = device_take_n<floatX>(ledger, MEM_BUCKETS, largest_bucket);
            const GradBucket* last = &dp->buckets[dp->count - 1];
            dp->last_slot = device_take_n<floatX>(ledger, MEM_BUCKETS, last->end - last->begin);
            dp->prepared = (bool*)calloc(dp->count, sizeof(bool));
        }
        if (dp->stage == 3) {  // gather buffers shaped as the gradient slots, or compacted
            const size_t largest_gathered = dp_gather_places(dp, tensors, largest_bucket);
            for (int k = 0; k < 3; k++) {
                const size_t n =
                    k < 2 ? (dp->count > 1 ? largest_gathered : 0)
                          : dp->buckets[dp->count - 1].end - dp->buckets[dp->count - 1].begin;
                dp->gather[k] = device_take_n<floatX>(ledger, MEM_GATHER, n);
                dp->gather_held[k] = -1;
            }
        }
        // per bucket: the packing runs (layout -> packed), then this rank's parameter runs
        // (layout -> its slice of the packed bucket)
        std::vector<CopyRun> runs, unpack;
        dp->pack_first = (int*)MALLOC_CHECK((dp->count + 1) * sizeof(int));
        dp->param_first = (int*)MALLOC_CHECK((dp->count + 1) * sizeof(int));
        for (int b = 0; b < dp->count; b++) {
            const ShardBucket* sb = &dp->plan.buckets[b];
            dp->pack_first[b] = (int)runs.size();
            unpack.resize(runs.size());  // unpack runs sit at the packing runs' indices
            // gradients come from the bucket's slot at stages 2 and 3, parameters go to its
            // gather buffer at stage 3 (offsets from the bucket's begin), else layout offsets
            const size_t grad_base = dp->stage >= 2 ? dp->buckets[b].begin : 0;
            const size_t param_base = dp->stage == 3 ? dp->buckets[b].begin : 0;
            for (int p = sb->piece_first; p < sb->piece_first + sb->piece_count; p++) {
                const ShardPiece* piece = &dp->plan.pieces[p];
                runs.push_back(CopyRun{piece->packed, piece->offset - grad_base, piece->n});
                unpack.push_back(CopyRun{piece->offset - param_base, piece->packed, piece->n});
            }
            // this rank's updated parameters, from the layout (or, stage 3, from its shard)
            dp->param_first[b] = (int)runs.size();
            for (const OwnedRange& o : owned)
                if (!o.matrix && o.state >= sb->shard && o.state < sb->shard + sb->slice) {
                    const CopyRun run{dp->me * sb->slice + (o.state - sb->shard),
                                      dp->stage == 3 ? o.state : o.offset, o.n};
                    runs.push_back(run);
                    unpack.push_back(CopyRun{run.from, run.to, run.n});
                }
        }
        dp->pack_first[dp->count] = dp->param_first[dp->count] = (int)runs.size();
        dp->pack_blocks = (int*)MALLOC_CHECK(dp->count * sizeof(int));
        dp->param_blocks = (int*)MALLOC_CHECK(dp->count * sizeof(int));
        for (int b = 0; b < dp->count; b++) {
            dp->pack_blocks[b] = copy_runs_blocks(runs, dp->pack_first[b], dp->param_first[b]);
            dp->param_blocks[b] = copy_runs_blocks(runs, dp->param_first[b], dp->pack_first[b + 1]);
        }
        dp->runs = device_take_copy(ledger, MEM_OTHER, runs);
        dp->unpack_runs = device_take_copy(ledger, MEM_OTHER, unpack);
    }
    // the norm's items: every rank's owned runs in state order (stage 0), or this rank's
    std::vector<NormItem> items;
    for (int r = 0; r < ranks; r++) {
        if (dp->stage > 0 && r != dp->me) continue;
        for (const OwnedRange& o : plan_owned(&dp->plan, r)) {
            if (!tensors[o.tensor].in_norm) continue;
            const floatX* g = dp->stage <= 1
                                  ? grads + o.offset
                                  : dp->grad_shard + (o.matrix ? dp->elem_state : 0) + o.state;
            const int blocks = norm_blocks_for(o.n);
            items.push_back(NormItem{g, o.n, r, blocks, tensors[o.tensor].norm_entry});
            dp->norm_max_blocks = std::max(dp->norm_max_blocks, blocks);
        }
    }
    dp->norm_item_count = (int)items.size();
    dp->norm_items = device_take_copy(ledger, MEM_OTHER, items);
    dp->norm_partials =
        device_take_n<float>(ledger, MEM_OTHER, items.size() * dp->norm_max_blocks + 1);
    for (int i = 0; i < n_tensors; i++)
        dp->norm_entries = std::max(dp->norm_entries, tensors[i].norm_entry + 1);
    dp->norm_rank_sums =
        device_take_n<float>(ledger, MEM_OTHER, (size_t)ranks * (1 + dp->norm_entries));
    if (group->size == 1) return;  // nothing to reduce: no streams or events
    CUDA_CHECK(cudaStreamCreateWithFlags(&dp->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&dp->computed, cudaEventDisableTiming));
    for (int b = 0; b < dp->count; b++)
        CUDA_CHECK(cudaEventCreateWithFlags(&dp->buckets[b].done, cudaEventDisableTiming));
    if (dp->stage >= 2) CUDA_CHECK(cudaEventCreateWithFlags(&dp->drained, cudaEventDisableTiming));
    if (dp->stage == 3) {
        CUDA_CHECK(cudaEventCreateWithFlags(&dp->compute_point, cudaEventDisableTiming));
        for (int k = 0; k < 3; k++)
            CUDA_CHECK(cudaEventCreateWithFlags(&dp->gathered[k], cudaEventDisableTiming));
    }
}

// Elements of the parameter buffer: the whole layout (`total`), or at stage 3 the owned part.
inline size_t dp_param_elems(const DataParallel* dp, size_t total) {
    return dp->stage == 3 ? dp->elem_state + dp->matrix_state : total;
}

inline void dp_free(DataParallel* dp) {
    if (dp->group->size > 1) {
        for (int b = 0; b < dp->count; b++) CUDA_CHECK(cudaEventDestroy(dp->buckets[b].done));
        CUDA_CHECK(cudaEventDestroy(dp->computed));
        CUDA_CHECK(cudaStreamDestroy(dp->stream));
        if (dp->stage >= 2) CUDA_CHECK(cudaEventDestroy(dp->drained));
        if (dp->stage == 3) {
            CUDA_CHECK(cudaEventDestroy(dp->compute_point));
            for (int k = 0; k < 3; k++) CUDA_CHECK(cudaEventDestroy(dp->gathered[k]));
        }
    }
    void* device[] = {dp->grad_shard,  dp->staging,       dp->accumulate,     dp->runs,
                      dp->unpack_runs, dp->slots[0],      dp->slots[1],       dp->last_slot,
                      dp->norm_items,  dp->norm_partials, dp->norm_rank_sums, dp->gather[0],
                      dp->gather[1],   dp->gather[2]};
    for (void* p : device)
        if (p) CUDA_CHECK(cudaFree(p));
    zero_fp8_free(&dp->fp8);
    free(dp->gather_places);
    free(dp->place_first);
    free(dp->buckets);
    free(dp->bucket_of);
    free(dp->pack_first);
    free(dp->param_first);
    free(dp->pack_blocks);
    free(dp->param_blocks);
    free(dp->prepared);
    plan_free(&dp->plan);
    free(dp->owned);
}

// ---------------------------------------------------------------------------------------------
// The backward pass's side.

// The buffer the gradients of bucket b are written into, addressed by layout offset - begin
// (stages 2 and 3), and the buffer layout offsets address directly otherwise.
inline floatX* dp_bucket_buffer(const DataParallel* dp, int b) {
    return b == dp->count - 1 ? dp->last_slot : dp->slots[b % 2];
}

// Where the backward pass writes the gradient of the tensor at layout offset `offset`, which
// belongs to group `group`.
inline floatX* dp_grad(const DataParallel* dp, floatX* grads, int group, size_t offset) {
    if (dp->stage < 2) return grads + offset;
    const int b = dp->bucket_of[group];
    return dp_bucket_buffer(dp, b) + (offset - dp->buckets[b].begin);
}

// Stages 2, 3: before the backward pass writes into bucket b's buffer, the buffer must be free
// (the reduce-scatter of the bucket that used it before is done) and zero.
inline void dp_prepare_bucket(DataParallel* dp, int b, cudaStream_t compute) {
    if (dp->prepared[b]) return;
    if (b != dp->count - 1 && b >= 2)
        CUDA_CHECK(cudaStreamWaitEvent(compute, dp->buckets[b - 2].done, 0));
    const GradBucket* g = &dp->buckets[b];
    CUDA_CHECK(
        cudaMemsetAsync(dp_bucket_buffer(dp, b), 0, (g->end - g->begin) * sizeof(floatX), compute));
    dp->prepared[b] = true;
}

// Called before the backward pass of every micro-batch writes its first gradient (the lm head's
// into wte, in the last bucket, and the final LayerNorm's, in the first).
inline void dp_backward_begin(DataParallel* dp, bool last_micro, bool first_micro,
                              cudaStream_t compute) {
    dp->reduce = dp->stage >= 2 || last_micro;
    dp->first_micro = first_micro;
    if (dp->stage < 2) return;
    // the previous micro-batch's reductions read the buffers about to be zeroed: the last one
    // done (on the communication stream, in order) means all are
    CUDA_CHECK(cudaStreamWaitEvent(compute, dp->buckets[dp->count - 1].done, 0));
    for (int b = 0; b < dp->count; b++) dp->prepared[b] = false;
    dp_prepare_bucket(dp, dp->count - 1, compute);
    dp_prepare_bucket(dp, 0, compute);
}

// Called before the backward pass of group `group` writes its gradients.
inline void dp_group_begin(DataParallel* dp, int group, cudaStream_t compute) {
    if (dp->stage < 2) return;
    dp_prepare_bucket(dp, dp->bucket_of[group], compute);
}

// Reduces bucket b on the communication stream: stage 0 all-reduces its range in place; the
// other stages pack its element-wise pieces (then zeros) into the staging buffer and
// reduce-scatter it, and reduce each matrix to its owner. Stage 1 does both in place (the
// reduced slice is copied back to its places in the gradient buffer, a matrix stays where it
// is); stages 2 and 3 land each rank's slice and matrices in (or, after the step's first
// micro-batch, add them onto) its gradient shard.
inline void dp_reduce_bucket(DataParallel* dp, int b) {
    const GradBucket* g = &dp->buckets[b];
    const ShardBucket* sb = &dp->plan.buckets[b];
    cudaStream_t s = dp->stream;
    if (dp->stage == 0) {
        comm_allreduce_avg(dp->group, dp->grads + g->begin, g->end - g->begin, s);
        return;
    }
    // the runs' sources are layout offsets (stage 1) or offsets in the bucket's buffer
    const floatX* src = dp->stage >= 2 ? dp_bucket_buffer(dp, b) : dp->grads;
    const size_t src_base = dp->stage >= 2 ? g->begin : 0;
    copy_runs(dp->staging, src, dp->runs + dp->pack_first[b],
              dp->param_first[b] - dp->pack_first[b], dp->pack_blocks[b], s);
    const size_t padded = sb->slice * dp->group->size;
    if (padded > sb->packed)
        CUDA_CHECK(cudaMemsetAsync(dp->staging + sb->packed, 0,
                                   (padded - sb->packed) * sizeof(floatX), s));
    if (dp->stage == 1) {
        floatX* mine = dp->staging + dp->me * sb->slice;  // NCCL's in-place reduce-scatter
        comm_reduce_scatter(dp->group, dp->staging, mine, sb->slice, true, s);
        copy_runs(dp->grads, dp->staging, dp->unpack_runs + dp->param_first[b],
                  dp->pack_first[b + 1] - dp->param_first[b], dp->param_blocks[b], s);
    } else {
        const bool onto = !dp->first_micro;
        floatX* mine = dp->grad_shard + sb->shard;
        comm_reduce_scatter(dp->group, dp->staging, onto ? dp->accumulate : mine, sb->slice, true,
                            s);
        if (onto) add_into(mine, dp->accumulate, sb->slice, s);
    }
    const bool onto = dp->stage >= 2 && !dp->first_micro;
    for (int i = sb->matrix_first; i < sb->matrix_first + sb->matrix_count; i++) {
        const ShardMatrix* u = &dp->plan.matrices[i];
        const floatX* send = src + (u->offset - src_base);
        // the receive buffer matters on the owner only; stage 1 reduces in place
        floatX* owned = dp->stage == 1 ? (floatX*)send : dp->grad_shard + dp->elem_state + u->shard;
        floatX* recv = u->owner != dp->me ? (floatX*)send : onto ? dp->accumulate : owned;
        comm_reduce(dp->group, send, recv, u->n, u->owner, true, s);
        if (u->owner == dp->me && onto) add_into(owned, dp->accumulate, u->n, s);
    }
}

// The backward pass has queued the last kernel writing group `group`'s gradients on `compute`:
// when that closes a bucket, its reduction starts on the communication stream once the
// gradients are written. Called by the model after every group, on every micro-batch.
inline void dp_group_done(DataParallel* dp, int group, cudaStream_t compute) {
    if (!dp->reduce || dp->group->size == 1) return;
    const int b = dp->bucket_of[group];
    if (dp->buckets[b].last_group != group || (dp->hold_last && b == dp->count - 1)) return;
    CUDA_CHECK(cudaEventRecord(dp->computed, compute));
    if (!test_drops_wait("dp-backward"))
        CUDA_CHECK(cudaStreamWaitEvent(dp->stream, dp->computed, 0));
    dp_reduce_bucket(dp, b);
    CUDA_CHECK(cudaEventRecord(dp->buckets[b].done, dp->stream));
}

// Makes `compute` wait for every bucket's reduction, and the host for the collectives (with the
// group's deadline). Called after the last micro-batch's backward pass, before the gradients
// are read.
inline void dp_finish(DataParallel* dp, cudaStream_t compute) {
    if (dp->group->size == 1) return;
    CUDA_CHECK(cudaStreamWaitEvent(compute, dp->buckets[dp->count - 1].done, 0));
    comm_sync(dp->group, dp->stream, "the reduction of the gradients (NCCL)");
}

// ---------------------------------------------------------------------------------------------
// Pipeline parallelism (train_gpt.cu's executor). A pipeline stage runs the backward passes of
// its micro-batches between the forward passes of others, and on the last stage the lm head
// writes wte's gradient in the forward passes. Stages 0 and 1 accumulate the step's gradients in
// the gradient buffer and reduce them after the pipeline's flush. Stages 2 and 3 keep no whole
// gradient, so they reduce-scatter every micro-batch, as without a pipeline:
//   - every gradient group is a bucket of its own (the caller builds with bucket_mb 0), so an
//     action's groups are whole buckets, each reduce-scattered as the action finishes it and
//     added onto the gradient shard, which dp_pipeline_begin zeroes at the start of the step
//     (whatever order the micro-batches' reductions come in, every one is added);
//   - before an action writes gradients, dp_pipeline_action_begin makes the compute stream wait
//     for every reduction queued so far (they read the buffers the action zeroes and reuses);
//   - the embeddings' bucket (the last, in a buffer of its own) is held: it accumulates the
//     step's wte and wpe gradients over every action and is reduced once, by
//     dp_pipeline_finish, after the executor has summed the tied wte's two parts between the
//     first and the last stage.

// Before a pipelined step's first action.
inline void dp_pipeline_begin(DataParallel* dp, cudaStream_t compute) {
    dp_backward_begin(dp, false, false, compute);  // stages 0, 1: no reduction until the flush
    if (dp->stage < 2) return;
    dp->hold_last = true;
    CUDA_CHECK(cudaMemsetAsync(dp->grad_shard, 0,
                               (dp->elem_state + dp->matrix_state) * sizeof(floatX), compute));
}

// Before each backward action (stages 2, 3; see above).
inline void dp_pipeline_action_begin(DataParallel* dp, cudaStream_t compute) {
    if (dp->stage < 2) return;
    CUDA_CHECK(cudaEventRecord(dp->drained, dp->stream));
    CUDA_CHECK(cudaStreamWaitEvent(compute, dp->drained, 0));
    for (int b = 0; b + 1 < dp->count; b++) dp->prepared[b] = false;
}

// After the flush (stages 0, 1: once the caller has run dp_group_begin/dp_group_done over every
// group with dp_backward_begin(dp, true, ...)): stages 2 and 3 reduce the held embeddings'
// bucket; then as dp_finish.
inline void dp_pipeline_finish(DataParallel* dp, cudaStream_t compute) {
    if (dp->stage >= 2) {
        dp->hold_last = false;
        const GradBucket* last = &dp->buckets[dp->count - 1];
        // (a stage between the first and the last holds no embeddings: only the event that
        // dp_finish waits for, after the stage's reductions)
        if (last->end > last->begin) dp_group_done(dp, last->last_group, compute);
        else CUDA_CHECK(cudaEventRecord(last->done, dp->stream));
    }
    dp_finish(dp, compute);
}

// ---------------------------------------------------------------------------------------------
// The optimizer's side.

// The reduced gradient of an owned range: in the full buffer (stages 0 and 1) or the shard.
inline const floatX* dp_owned_grad(const DataParallel* dp, const OwnedRange* o) {
    if (dp->stage <= 1) return dp->grads + o->offset;
    return dp->grad_shard + (o->matrix ? dp->elem_state : 0) + o->state;
}

// ||gradient||^2 over the plan (see the top), the same bits on every rank; entry_sums (nullptr:
// not wanted) gets the same sum over each norm entry's tensors (norm_entries values), through
// the same copy and gather.
inline float dp_grad_sum_squares(DataParallel* dp, cudaStream_t compute,
                                 float* entry_sums = nullptr) {
    const int ranks = dp->group->size, width = 1 + dp->norm_entries;
    const int wanted = entry_sums ? width : 1;  // of each rank's row
    if (dp->norm_item_count > 0) {
        norm_items_kernel<<<dim3(dp->norm_max_blocks, dp->norm_item_count), CHUNK_THREADS, 0,
                            compute>>>(dp->norm_partials, dp->norm_items, dp->norm_max_blocks);
        CUDA_CHECK_LAUNCH();
    }
    norm_rank_sums_kernel<<<1, 1, 0, compute>>>(dp->norm_rank_sums, dp->norm_partials,
                                                dp->norm_items, dp->norm_item_count,
                                                dp->norm_max_blocks, ranks, width);
    CUDA_CHECK_LAUNCH();
    std::vector<float> rows((size_t)ranks * width), sums((size_t)ranks * wanted);
    CUDA_CHECK(cudaMemcpyAsync(rows.data(), dp->norm_rank_sums, rows.size() * sizeof(float),
                               cudaMemcpyDeviceToHost, compute));
    CUDA_CHECK(cudaStreamSynchronize(compute));
    for (int r = 0; r < ranks; r++)
        for (int k = 0; k < wanted; k++) sums[(size_t)r * wanted + k] = rows[(size_t)r * width + k];
    if (dp->stage > 0) {  // each rank has its own sums: gather them
        const std::vector<float> mine(sums.begin() + (size_t)dp->me * wanted,
                                      sums.begin() + (size_t)(dp->me + 1) * wanted);
        comm_allgather_host(dp->group, mine.data(), wanted * sizeof(float), sums.data(),
                            "the gradient norm's partial sums");
    }
    float total = 0.0f;
    for (int r = 0; r < ranks; r++) total += sums[(size_t)r * wanted];
    for (int e = 0; entry_sums && e < dp->norm_entries; e++) {
        entry_sums[e] = 0.0f;
        for (int r = 0; r < ranks; r++) entry_sums[e] += sums[(size_t)r * wanted + 1 + e];
    }
    return total;
}

// The parameters of bucket b from their owners into `dst` on `stream`: this rank's slice
// packed into the staging buffer from `params` (the layout at stages 1 and 2, the shard at
// stage 3), an in-place all-gather, the whole bucket unpacked into dst (the layout, or the
// bucket's gather buffer at stage 3); each matrix broadcast from its owner.
inline void dp_gather_bucket(DataParallel* dp, int b, const floatX* params, floatX* dst,
                             cudaStream_t stream) {
    const ShardBucket* sb = &dp->plan.buckets[b];
    const size_t base = dp->stage == 3 ? dp->buckets[b].begin : 0;
    copy_runs(dp->staging, params, dp->runs + dp->param_first[b],
              dp->pack_first[b + 1] - dp->param_first[b], dp->param_blocks[b], stream);
    comm_allgather(dp->group, dp->staging + dp->me * sb->slice, dp->staging, sb->slice, stream);
    copy_runs(dst, dp->staging, dp->unpack_runs + dp->pack_first[b],
              dp->param_first[b] - dp->pack_first[b], dp->pack_blocks[b], stream);
    for (int i = sb->matrix_first; i < sb->matrix_first + sb->matrix_count; i++) {
        const ShardMatrix* u = &dp->plan.matrices[i];
        const floatX* send =
            dp->stage == 3 ? params + dp->elem_state + u->shard : params + u->offset;
        comm_broadcast_device(dp->group, send, dst + (u->offset - base), u->n, u->owner, stream);
    }
}

// Stage 3: the parameters have changed, so no gather buffer holds current ones.
inline void dp_params_stale(DataParallel* dp) {
    for (int k = 0; k < 3; k++) dp->gather_held[k] = -1;
}

// Waits for the work queued on `compute`; at stage 3, where it waits for gathers, with the
// group's deadline (`what`: the collectives, for the message).
inline void dp_sync(const DataParallel* dp, cudaStream_t compute, const char* what) {
    if (dp->stage == 3) comm_sync(dp->group, compute, what);
    else CUDA_CHECK(cudaStreamSynchronize(compute));
}

// After the update: stages 1 and 2 bring every rank's updated slices and matrices to every rank,
// bucket after bucket, on `compute`; at stage 3 the gather buffers no longer hold the current
// parameters (the next pass gathers them).
inline void dp_gather_params(DataParallel* dp, floatX* params, cudaStream_t compute) {
    dp_params_stale(dp);
    if (dp->stage != 1 && dp->stage != 2) return;
    for (int b = 0; b < dp->count; b++) dp_gather_bucket(dp, b, params, params, compute);
    comm_sync(dp->group, compute, "the all-gather of the updated parameters (NCCL)");
}

// =============================================================================================
// ZeRO-3: the passes' parameters, gathered a group (a bucket) at a time.
//
// Bucket b's parameters live in gather buffer dp_gather_slot(b): the embeddings (the last
// bucket: wte is read by the first kernel of the forward pass and by the lm head at both ends
// of the step) in a buffer of their own, gathered once per step and kept; the blocks'
// buckets alternate between two buffers, so the bucket a pass runs and the next one it will
// run are in different buffers: while the compute stream runs one, the communication stream
// gathers the next (the prefetch). Before a group's kernels the model calls dp_params_begin
// (wait for this group's gather, issue the next one's); a kernel that reads another group's
// parameters (the fused residual add + layernorm at the end of a block reads the next block's
// ln1) calls dp_params_ready for that group first, so the dependency is explicit.
//
// Ordering. A gather overwrites a buffer the compute stream read before: it is issued on the
// communication stream after an event on the compute stream (compute_point) that follows the
// last kernel queued so far, which includes every reader of the buffer's previous bucket (the
// passes issue the prefetch of bucket b only after queuing the kernels of the bucket that
// used b's buffer before). Its completion is the buffer's event `gathered`, which the compute
// stream waits for before the first kernel that reads it. A buffer remembers the bucket it
// holds, so a bucket still there (the last two blocks of the forward pass are the first two of
// the backward pass) is not gathered again; the update marks every buffer stale.
//
// The gathers and the gradients' reduce-scatters share the one communication stream, so every
// rank issues the same collectives in the same order.
//
// --fp8-allgather (llmc/zero_fp8.cuh): a bucket with FP8-gathered weights (ShardTensor's
// fp8_gathered) is gathered by zero_fp8_gather_bucket: the weights as FP8 bytes into their FP8
// caches, the other tensors in bf16 into the bucket's gather buffer, which then holds only
// those, packed (dp_gather_places; dp_weights gives nullptr for an FP8-gathered weight).
// dp_gather_whole gathers such a bucket whole in bf16 into a buffer of the caller's, for what
// reads the parameters outside the passes.

inline int dp_gather_slot(const DataParallel* dp, int b) { return b == dp->count - 1 ? 2 : b % 2; }

// Whether bucket b's gather buffer holds only its bf16 tensors (--fp8-allgather), and the
// elements of the largest bucket.
inline bool dp_compacted(const DataParallel* dp, int b) {
    return dp->place_first[b] != dp->place_first[b + 1];
}
inline size_t dp_largest_bucket(const DataParallel* dp) {
    size_t n = 0;
    for (int b = 0; b < dp->count; b++) n = std::max(n, dp->buckets[b].end - dp->buckets[b].begin);
    return n;
}

// Where layout offset `offset` of bucket b lies in its gather buffer: at its distance from the
// bucket's begin, or in a compacted bucket at its tensor's place (nullptr: an FP8-gathered
// tensor, not in the buffer). A pointer computed, not read, so also where the ledger only plans.
inline floatX* dp_gather_place(const DataParallel* dp, int b, size_t offset) {
    floatX* buffer = dp->gather[dp_gather_slot(dp, b)];
    const int first = dp->place_first[b], end = dp->place_first[b + 1];
    if (first == end) return at_offset(buffer, offset - dp->buckets[b].begin);
    for (int i = first; i < end; i++) {
        const GatherPlace* p = &dp->gather_places[i];
        if (offset >= p->offset && offset < p->offset + p->n)
            return at_offset(buffer, p->at + (offset - p->offset));
    }
    return nullptr;
}

// Issues the gather of group `group`'s bucket into its buffer unless that holds it already
// (--fp8-allgather: its FP8 weights in FP8 into their caches, llmc/zero_fp8.cuh).
inline void dp_params_prefetch(DataParallel* dp, int group, const floatX* params,
                               cudaStream_t compute) {
    if (dp->stage != 3) return;
    const int b = dp->bucket_of[group], k = dp_gather_slot(dp, b);
    // (a pipeline stage's buckets of the blocks it does not hold are empty: nothing to gather)
    if (dp->gather_held[k] == b || dp->buckets[b].end == dp->buckets[b].begin) return;
    CUDA_CHECK(cudaEventRecord(dp->compute_point, compute));
    if (!test_drops_wait("zero3-gather"))
        CUDA_CHECK(cudaStreamWaitEvent(dp->stream, dp->compute_point, 0));
    if (zero_fp8_has(&dp->fp8, b)) zero_fp8_gather_bucket(&dp->fp8, b, dp->group, dp->stream);
    else dp_gather_bucket(dp, b, params, dp->gather[k], dp->stream);
    CUDA_CHECK(cudaEventRecord(dp->gathered[k], dp->stream));
    dp->gather_held[k] = b;
}

// Makes `compute` wait until group `group`'s parameters are in their gather buffer (gathering
// them now if no prefetch did).
inline void dp_params_ready(DataParallel* dp, int group, const floatX* params,
                            cudaStream_t compute) {
    if (dp->stage != 3) return;
    dp_params_prefetch(dp, group, params, compute);
    if (!test_drops_wait("zero3-compute"))
        CUDA_CHECK(cudaStreamWaitEvent(compute,
                                       dp->gathered[dp_gather_slot(dp, dp->bucket_of[group])], 0));
}

// Stage 3: every parameter of bucket b in bf16 into dst (the bucket's elements, addressed by
// layout offset - begin), the FP8-gathered weights too, ordered after the work queued on
// `compute` and before what is queued on it next: what reads the parameters outside the passes
// (downloads). The gather buffers are left as they are.
inline void dp_gather_whole(DataParallel* dp, int b, const floatX* params, floatX* dst,
                            cudaStream_t compute) {
    CUDA_CHECK(cudaEventRecord(dp->compute_point, compute));
    CUDA_CHECK(cudaStreamWaitEvent(dp->stream, dp->compute_point, 0));
    dp_gather_bucket(dp, b, params, dst, dp->stream);
    CUDA_CHECK(cudaEventRecord(dp->computed, dp->stream));
    CUDA_CHECK(cudaStreamWaitEvent(compute, dp->computed, 0));
}

// --fp8-allgather at stage 3: the FP8 weights (targets[i].rows > 0 for tensor i of the table) are
// gathered in FP8 from now on (llmc/zero_fp8.cuh; current: per-tensor current scaling, else
// delayed). params: this rank's parameter shard.
inline void dp_fp8_gather_init(DataParallel* dp, const ZeroFp8Target* targets, const floatX* params,
                               bool current, DeviceLedger* ledger) {
    if (dp->stage != 3) return;
    zero_fp8_build(&dp->fp8, &dp->plan, dp->me, params, dp->elem_state, dp->staging, targets,
                   current, ledger,
                   [&](int b, size_t offset) { return (floatX*)dp_gather_place(dp, b, offset); });
}

// The hook before group `group`'s kernels: its parameters ready, the gather of group `next` (the
// one the pass runs after it; -1: none) under way.
inline void dp_params_begin(DataParallel* dp, int group, int next, const floatX* params,
                            cudaStream_t compute) {
    dp_params_ready(dp, group, params, compute);
    if (next >= 0) dp_params_prefetch(dp, next, params, compute);
}

// Where the passes read the tensor at layout offset `offset` of group `group`: the parameter
// buffer, or at stage 3 the gather buffer of its bucket (nullptr for an FP8-gathered weight,
// which the passes read from its FP8 cache).
inline const floatX* dp_weights(const DataParallel* dp, const floatX* params, int group,
                                size_t offset) {
    if (dp->stage != 3) return params + offset;
    return dp_gather_place(dp, dp->bucket_of[group], offset);
}
