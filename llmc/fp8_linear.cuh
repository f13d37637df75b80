// llmc/fp8_linear.cuh: the linear layers' three matrix products in FP8 (--fp8), each recipe's
// quantization (llmc/fp8.cuh) feeding cuBLASLt's FP8 matmul (matmul_fp8, llmc/matmul.cuh).
//
// A linear layer: X (N, IC) its input, W (OC, IC) its weight (row-major, as PyTorch), G = dY
// (N, OC) its output gradient. cuBLASLt's FP8 kernels take only the TN form (both operands with
// the reduction dimension contiguous), so each product reads its own quantized copies:
//   forward  Y  = X W^T + b    W (OC rows along IC) and X (N rows along IC)
//   dX       dX = G W          W^T (IC rows along OC) and G (N rows along OC)
//   dW       dW += G^T X       X^T (IC rows along N) and G^T (OC rows along N)
// X, W and their transposes are E4M3, G and G^T the gradient format (--fp8-grad). The products
// accumulate in fp32 and are rounded once to bf16 (dW: the old dW added in fp32 first); the bias
// is cuBLASLt's epilogue; the bias gradient stays the column sums of the bf16 G.
//
// Recipes (the groups that share a scale; llmc/fp8.cuh has the scale rule of each):
//   tensor   one scale per tensor (current scaling: each micro-batch's own amax); X and X^T, W
//            and W^T, G and G^T share it.
//   delayed  one scale per tensor from an amax history (Fp8DelayedScaling): every step uses the
//            scales set at the end of the step before, from the running maxima of the step's
//            micro-batches, reduced over all ranks (fp8_end_step), so every rank and every way
//            of splitting the global batch into micro-batches and ranks keeps the same scales.
//   rowwise  one scale per row of each operand as the product reads it (torchao's rowwise).
//   block    DeepSeek-V3: X, G, X^T, G^T in 1x128 tiles along the reduction dimension, W and
//            W^T in 128x128 blocks (the same blocks for both).
//   mx       OCP MX: 32-element blocks along the reduction dimension, E8M0 scales, for all six.
// Weights are quantized once per parameter version (FP8 weights cached: Fp8State's
// params_version, bumped by every change of the parameters) and kept with their transposes.
// Under ZeRO-3 with --fp8-allgather (llmc/zero_fp8.cuh) a block's weights arrive quantized:
// each rank quantizes its shard, the gather fills the cache (layers marked `gathered`).
// The backward pass quantizes X^T from the bf16 X the forward pass kept (tensor, delayed: X's
// scale again), rather than keeping FP8 copies of every layer's input.
//
// Tensor parallelism: a rank holds part of a cut tensor (Fp8Cut). Where a group of elements that
// shares a scale is cut over the tensor-parallel group (a row-parallel layer's X and W along IC,
// a column-parallel layer's W^T and G along OC; any cut tensor under the per-tensor recipes), its
// amax is reduced (max) over the group first, so each rank quantizes exactly as one process
// holding the whole tensor would. The block and MX recipes need each cut at a tile boundary
// (fp8_tp_error) and then never straddle ranks.
//
// Entry points: Fp8Recipe / Fp8Config (the flags), fp8_layer_error / fp8_device_error (what a
// recipe needs of the shapes and the device), Fp8State (fp8_init, fp8_add_layer,
// fp8_take_buffers, fp8_free), Fp8Use, fp8_linear_forward / fp8_linear_backward, fp8_end_step.
#pragma once

#include "comm.cuh"
#include "fp8.cuh"
#include "matmul.cuh"
#include "memplan.h"

enum Fp8Recipe {
    FP8_OFF,
    FP8_TENSOR,
    FP8_DELAYED,
    FP8_ROWWISE,
    FP8_BLOCK,
    FP8_MX,
    NUM_FP8_RECIPES
};
static const char* const FP8_RECIPE_NAMES[NUM_FP8_RECIPES] = {"off",     "tensor", "delayed",
                                                              "rowwise", "block",  "mx"};

struct Fp8Config {
    int recipe;        // Fp8Recipe (--fp8)
    int grad_e5m2;     // 1: gradients in E5M2, 0: E4M3 (--fp8-grad)
    int lm_head;       // 1: the lm head too (--fp8-lm-head)
    int amax_history;  // delayed: the history's length (--fp8-amax-history)
    int margin;        // delayed: scales divided by 2^margin (--fp8-margin)
    int allgather;     // ZeRO-3 gathers the blocks' FP8 weights in FP8 (--fp8-allgather)
};

// The gradient format each recipe's authors use: E5M2 for the per-tensor recipes (its range
// takes the gradients' spread under one scale), E4M3 for the fine-grained ones.
inline int fp8_default_grad_e5m2(int recipe) {
    return recipe == FP8_TENSOR || recipe == FP8_DELAYED;
}

inline int fp8_recipe_of(const char* name) {
    for (int r = 0; r < NUM_FP8_RECIPES; r++)
        if (strcmp(name, FP8_RECIPE_NAMES[r]) == 0) return r;
    return -1;
}

inline bool fp8_per_tensor(int recipe) { return recipe == FP8_TENSOR || recipe == FP8_DELAYED; }

// The alignment a recipe needs of every dimension a product reduces over or that is cut over
// ranks: cuBLASLt's FP8 kernels want 16-byte multiples; MX blocks are 32 elements; block
// scaling's tiles must not straddle two ranks.
inline int fp8_dimension_multiple(int recipe) { return recipe == FP8_MX ? 32 : 16; }
inline int fp8_cut_multiple(int recipe) {
    return recipe == FP8_BLOCK ? 128 : fp8_dimension_multiple(recipe);
}

// A layer's dimensions (this rank's part) against the recipe: nullptr, or what is wrong. rows:
// the tokens N of a micro-batch; cut_in / cut_out: IC / OC is this rank's part of a cut
// dimension (its pieces: a column-parallel qkv's OC is three parts).
inline const char* fp8_layer_error(int recipe, const char* name, int rows, int in, int out,
                                   bool cut_in, int out_parts, bool cut_out, char* msg,
                                   size_t len) {
    const int m = fp8_dimension_multiple(recipe), cut = fp8_cut_multiple(recipe);
    const char* recipe_name = FP8_RECIPE_NAMES[recipe];
    if (rows % m != 0)
        snprintf(msg, len, "--fp8 %s needs --batch x --seq (%d) to be a multiple of %d",
                 recipe_name, rows, m);
    else if (in % m != 0 || out % m != 0)
        snprintf(msg, len, "--fp8 %s needs %s's dimensions (%d in, %d out) to be multiples of %d",
                 recipe_name, name, in, out, m);
    else if (cut_in && in % cut != 0)
        snprintf(msg, len,
                 "--fp8 %s under tensor parallelism needs each rank's part of %s's inputs (%d) to "
                 "be a multiple of %d",
                 recipe_name, name, in, cut);
    else if (cut_out && (out / out_parts) % cut != 0)
        snprintf(msg, len,
                 "--fp8 %s under tensor parallelism needs each rank's part of %s's outputs (%d) to "
                 "be a multiple of %d",
                 recipe_name, name, out / out_parts, cut);
    else return nullptr;
    return msg;
}

// What --fp8-allgather (ZeRO-3's gathers of the FP8 weights in FP8, llmc/zero_fp8.cuh) needs of
// the run: nullptr, or the refusal. Like torchao's FP8 all-gather it takes the per-tensor recipes
// only: W^T (the backward pass's dX = G W) must be W's gathered bytes transposed, which holds
// when W and W^T share their scales.
inline const char* fp8_allgather_error(int recipe, int zero, int tp, char* msg, size_t len) {
    const char* name = FP8_RECIPE_NAMES[recipe];
    if (zero != 3)
        snprintf(msg, len,
                 "--fp8-allgather needs --zero 3: it replaces ZeRO-3's bf16 all-gather of the "
                 "block weights (below stage 3 every rank keeps its whole weights)");
    else if (recipe == FP8_OFF)
        snprintf(msg, len,
                 "--fp8-allgather needs --fp8 tensor or delayed: it gathers the weights of the "
                 "FP8 matmuls in FP8");
    else if (recipe == FP8_ROWWISE || recipe == FP8_MX)
        snprintf(msg, len,
                 "--fp8-allgather takes the per-tensor recipes only (--fp8 tensor or delayed, as "
                 "torchao's FP8 all-gather): --fp8 %s scales W by %s along its inputs and W^T, "
                 "which the backward pass reads, along its outputs, so W^T's bytes cannot come "
                 "from the gathered W's; a second FP8 gather for them would send as many bytes as "
                 "the bf16 one",
                 name, recipe == FP8_MX ? "32-element blocks" : "rows");
    else if (recipe == FP8_BLOCK)
        snprintf(msg, len,
                 "--fp8-allgather takes the per-tensor recipes only (--fp8 tensor or delayed, as "
                 "torchao's FP8 all-gather): --fp8 block's 128x128 weight blocks are cut by "
                 "ZeRO-3's slices at any element, so each block's scale would need its amax "
                 "reduced over the ranks that hold parts of it, which is not implemented");
    else if (recipe == FP8_TENSOR && tp > 1)
        snprintf(
            msg, len,
            "--fp8-allgather with --fp8 tensor under --tp %d is not implemented: a cut "
            "weight's current amax would need a max over the tensor-parallel group issued on "
            "ZeRO's communication stream beside the tensor-parallel collectives of the compute "
            "stream; --fp8 delayed reduces its amaxes at the end of the step instead",
            tp);
    else return nullptr;
    return msg;
}

// The devices cuBLASLt runs each recipe on (the cuBLAS documentation's cublasLtMatmul() FP8
// tables): per-tensor scales from Ada (8.9) on, row-wise and block scales on Hopper (9.0) only,
// MXFP8 from Blackwell (10.0) on. nullptr, or the refusal naming the device's architecture.
inline const char* fp8_device_error(int recipe, int major, int minor, char* msg, size_t len) {
    const int cc = 10 * major + minor;
    const char* needs = nullptr;
    if (fp8_per_tensor(recipe) && cc < 89)
        needs = "FP8 tensor cores (compute capability 8.9 or later)";
    else if ((recipe == FP8_ROWWISE || recipe == FP8_BLOCK) && cc != 90)
        needs =
            "cuBLASLt's row-wise and block scales, which it offers on Hopper (compute capability "
            "9.0) only";
    else if (recipe == FP8_MX && cc < 100)
        needs = "MXFP8 tensor cores (compute capability 10.0 or later, Blackwell)";
    if (needs == nullptr) return nullptr;
    snprintf(msg, len,
             "--fp8 %s needs %s; this device is sm_%d%d (the CPU runtime simulates another with "
             "CUCC_COMPUTE_CAPABILITY, e.g. 10.0)",
             FP8_RECIPE_NAMES[recipe], needs, major, minor);
    return msg;
}

// How a layer's matrices are cut over the tensor-parallel group: a column-parallel layer's
// outputs (W's rows, G's columns), a row-parallel layer's inputs (W's and X's columns).
struct Fp8Cut {
    bool in, out;
};

// A cached FP8 weight: W and W^T with their scales, of the layer that last used the cache, sized
// for the largest of the layers that share it.
struct Fp8Weight {
    uint8_t *q, *qt;
    void *scale, *scale_t;   // the recipe's scale arrays (tensor: the Fp8TensorScale below)
    Fp8TensorScale* tensor;  // tensor recipe: W's scale
    int layer;               // whose weight it holds
    uint64_t version;        // the parameter version it was quantized from (0: none yet)
};

struct Fp8Layer {
    int in, out;  // IC, OC of this rank's part
    Fp8Cut cut;
    int index;  // its place in Fp8State::layers (fp8_delayed_index numbers its tensors from it)
    int cache;  // its weight's cache in Fp8State::caches
    bool gathered;  // ZeRO-3's FP8 all-gather fills its cache (llmc/zero_fp8.cuh), W and W^T
};

// One operand's buffers: bytes and scales sized for the largest use.
struct Fp8Buffer {
    uint8_t* q;
    void* scale;
};

struct Fp8State {
    Fp8Config config;
    __nv_fp8_interpretation_t grad_format;
    Fp8Layer* layers;  // host array of `capacity`, `count` added
    int count, capacity;
    Fp8Weight* caches;  // host array of `capacity`, `cache_count` used
    int cache_count;
    Fp8DelayedScaling delayed;  // delayed: X of layer i at i, W at L + i, G at 2L + i (L layers)
    // scratch shared by every layer: X, X^T, G, G^T and their scales
    Fp8Buffer x, xt, g, gt;
    Fp8TensorScale* act_scales;  // tensor recipe: X's and G's scales
    float* partial;              // the per-tensor amax's partial maxima (FP8_AMAX_BLOCKS)
    float* tile_amax;            // rowwise under tensor parallelism: one amax per row
    Fp8AmaxReduce tp;            // max over the tensor-parallel group (FP8_WHOLE without it)
    uint64_t params_version;     // bumped by the model whenever its parameters change
    bool training;               // this forward pass's amaxes count for delayed scaling
    size_t weight_bytes, scratch_bytes;  // what the FP8 copies and scales take (the report)
};

// ---------------------------------------------------------------------------------------------
// Scale modes and the sizes of the scale arrays

inline int32_t fp8_scale_mode(int recipe, bool is_weight) {
    switch (recipe) {
        case FP8_ROWWISE:
            return CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        case FP8_BLOCK:
            return is_weight ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                             : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        case FP8_MX:
            return CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
        default:
            return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    }
}

// Bytes of the scales of an operand of `rows` rows along k (per-tensor recipes: none here, the
// scale is an Fp8TensorScale of its own).
inline size_t fp8_scale_bytes(int recipe, bool is_weight, size_t rows, size_t k) {
    switch (recipe) {
        case FP8_ROWWISE:
            return rows * sizeof(float);
        case FP8_BLOCK:
            return is_weight ? ceil_div(rows, (size_t)128) * fp8_block_scale_stride((int)k) *
                                   sizeof(float)
                             : ceil_div(k, (size_t)128) * rows * sizeof(float);
        case FP8_MX:
            return mx_scale_bytes((int)rows, (int)k);
        default:
            return 0;
    }
}

// ---------------------------------------------------------------------------------------------
// Building the state

inline void fp8_tp_max(const void* group, float* amax, size_t n, cudaStream_t stream) {
    comm_allreduce_max((const CommGroup*)group, amax, n, stream);
}

// The state for `config` (recipe not FP8_OFF) and up to `capacity` layers; tp: the
// tensor-parallel group. Layers are added with fp8_add_layer, then fp8_take_buffers takes every
// buffer from the ledger.
inline void fp8_init(Fp8State* f, const Fp8Config* config, const CommGroup* tp, int capacity) {
    memset(f, 0, sizeof(*f));
    f->config = *config;
    f->grad_format = config->grad_e5m2 ? __NV_E5M2 : __NV_E4M3;
    f->layers = (Fp8Layer*)MALLOC_CHECK(capacity * sizeof(Fp8Layer));
    f->caches = (Fp8Weight*)MALLOC_CHECK(capacity * sizeof(Fp8Weight));
    f->capacity = capacity;
    f->tp = tp->size > 1 ? Fp8AmaxReduce{fp8_tp_max, tp} : FP8_WHOLE;
    f->params_version = 1;  // the weights' caches start at version 0: quantized at first use
}

// Adds a layer of this rank's dimensions whose FP8 weight lives in cache `cache` (each layer
// its own, or, where a few caches take turns, as under ZeRO-3, one several layers share: a layer
// then quantizes its weight again when the cache holds another's); returns its index for
// fp8_linear_forward/backward.
inline int fp8_add_layer(Fp8State* f, int in, int out, Fp8Cut cut, int cache) {
    if (f->count == f->capacity || cache < 0 || cache >= f->capacity)
        fatal("fp8_add_layer: layer %d, cache %d of %d", f->count, cache, f->capacity);
    Fp8Layer* l = &f->layers[f->count];
    memset(l, 0, sizeof(*l));
    l->in = in;
    l->out = out;
    l->cut = cut;
    l->index = f->count;
    l->cache = cache;
    f->cache_count = std::max(f->cache_count, cache + 1);
    return f->count++;
}

inline Fp8Weight* fp8_weight(const Fp8State* f, const Fp8Layer* l) { return &f->caches[l->cache]; }

inline void fp8_free(Fp8State* f) {
    for (int i = 0; i < f->cache_count; i++) {
        const Fp8Weight* w = &f->caches[i];
        for (void* p : {(void*)w->q, (void*)w->qt, w->scale, w->scale_t, (void*)w->tensor})
            CUDA_CHECK(cudaFree(p));
    }
    for (const Fp8Buffer* b : {&f->x, &f->xt, &f->g, &f->gt}) {
        CUDA_CHECK(cudaFree(b->q));
        CUDA_CHECK(cudaFree(b->scale));
    }
    for (void* p : {(void*)f->act_scales, (void*)f->partial, (void*)f->tile_amax,
                    (void*)f->delayed.history, (void*)f->delayed.scales})
        CUDA_CHECK(cudaFree(p));
    free(f->layers);
    free(f->caches);
    f->layers = nullptr;
    f->caches = nullptr;
}

// Which FP8 layer a linear layer is (state nullptr: it runs in floatX).
struct Fp8Use {
    Fp8State* state;
    int layer;
};
static const Fp8Use FP8_NONE = {nullptr, -1};

inline Fp8Buffer fp8_take_buffer(DeviceLedger* ledger, size_t bytes, size_t scale_bytes) {
    return Fp8Buffer{device_take_n<uint8_t>(ledger, MEM_FP8, bytes),
                     device_take(ledger, MEM_FP8, scale_bytes)};
}

// Every buffer, for micro-batches of N tokens: the weights' caches (each sized for the largest
// layer that uses it), the shared scratch (for the largest layer), the delayed scaling state.
inline void fp8_take_buffers(Fp8State* f, int N, DeviceLedger* ledger) {
    const int recipe = f->config.recipe;
    const size_t before = ledger->bytes[MEM_FP8];
    size_t max_in = 0, max_out = 0;
    for (int c = 0; c < f->cache_count; c++) {
        size_t n = 0, scale = 0, scale_t = 0;
        for (int i = 0; i < f->count; i++) {
            const Fp8Layer* l = &f->layers[i];
            if (l->cache != c) continue;
            n = std::max(n, (size_t)l->in * l->out);
            scale = std::max(scale, fp8_scale_bytes(recipe, true, l->out, l->in));
            scale_t = std::max(scale_t, fp8_scale_bytes(recipe, true, l->in, l->out));
        }
        Fp8Weight* w = &f->caches[c];
        memset(w, 0, sizeof(*w));
        w->layer = -1;
        w->q = device_take_n<uint8_t>(ledger, MEM_FP8, n);
        w->qt = device_take_n<uint8_t>(ledger, MEM_FP8, n);
        w->scale = device_take(ledger, MEM_FP8, scale);
        w->scale_t = device_take(ledger, MEM_FP8, scale_t);
        if (recipe == FP8_TENSOR) w->tensor = device_take_n<Fp8TensorScale>(ledger, MEM_FP8, 1);
    }
    for (int i = 0; i < f->count; i++) {
        max_in = std::max(max_in, (size_t)f->layers[i].in);
        max_out = std::max(max_out, (size_t)f->layers[i].out);
    }
    f->weight_bytes = ledger->bytes[MEM_FP8] - before;
    f->x = fp8_take_buffer(ledger, N * max_in, fp8_scale_bytes(recipe, false, N, max_in));
    f->xt = fp8_take_buffer(ledger, N * max_in, fp8_scale_bytes(recipe, false, max_in, N));
    f->g = fp8_take_buffer(ledger, N * max_out, fp8_scale_bytes(recipe, false, N, max_out));
    f->gt = fp8_take_buffer(ledger, N * max_out, fp8_scale_bytes(recipe, false, max_out, N));
    f->act_scales = device_take_n<Fp8TensorScale>(ledger, MEM_FP8, 2);
    f->partial = device_take_n<float>(ledger, MEM_FP8, FP8_AMAX_BLOCKS);
    if (f->tp.fn && recipe == FP8_ROWWISE)
        f->tile_amax =
            device_take_n<float>(ledger, MEM_FP8, std::max({(size_t)N, max_in, max_out}));
    if (recipe == FP8_DELAYED) {
        Fp8DelayedScaling* d = &f->delayed;
        d->count = 3 * f->count;
        d->length = f->config.amax_history;
        d->margin = f->config.margin;
        d->history = device_take_n<float>(ledger, MEM_FP8, (size_t)d->count * d->length);
        d->scales = device_take_n<Fp8TensorScale>(ledger, MEM_FP8, d->count);
        if (!ledger->plan_only) fp8_delayed_start(d, 0);
    }
    f->scratch_bytes = ledger->bytes[MEM_FP8] - before - f->weight_bytes;
}

// ---------------------------------------------------------------------------------------------
// Quantizing the operands

// The delayed-scaling tensors of layer i: its input, weight and output gradient.
enum Fp8TensorKind { FP8_X, FP8_W, FP8_G };
inline int fp8_delayed_index(const Fp8State* f, int layer, Fp8TensorKind kind) {
    return kind * f->count + layer;
}

// x (rows, cols), row-major, into q (rows along cols) and/or qt (cols rows along rows), each
// with its scales, for an activation or gradient (kind FP8_X or FP8_G of `layer`).
// cols_cut: x's columns are this rank's part of a tensor cut over the tensor-parallel group
// (its rows are always whole). tensor: the per-tensor recipe's scale for it. record: delayed
// scaling counts x's amax in the step's running max.
inline void fp8_quantize_activation(Fp8State* f, Fp8Buffer* q, Fp8Buffer* qt, const floatX* x,
                                    int rows, int cols, __nv_fp8_interpretation_t format,
                                    bool cols_cut, int layer, Fp8TensorKind kind,
                                    Fp8TensorScale* tensor, bool record, cudaStream_t stream) {
    uint8_t* q_bytes = q ? q->q : nullptr;
    uint8_t* qt_bytes = qt ? qt->q : nullptr;
    const Fp8AmaxReduce cut = cols_cut ? f->tp : FP8_WHOLE;
    switch (f->config.recipe) {
        case FP8_TENSOR:
            fp8_quantize_tensor(q_bytes, qt_bytes, tensor, f->partial, x, rows, cols, format, cut,
                                stream);
            break;
        case FP8_DELAYED: {
            const int i = fp8_delayed_index(f, layer, kind);
            if (record)
                fp8_quantize_delayed(q_bytes, qt_bytes, &f->delayed, i, f->partial, x, rows, cols,
                                     format, stream);
            else
                fp8_quantize_with_tensor_scale(q_bytes, qt_bytes, x, rows, cols,
                                               &f->delayed.scales[i], format, stream);
            break;
        }
        case FP8_ROWWISE:
            if (q)
                fp8_quantize_rowwise(q->q, (float*)q->scale, x, rows, cols, format, cut,
                                     f->tile_amax, stream);
            if (qt)
                fp8_quantize_rowwise_transposed(qt->q, (float*)qt->scale, x, rows, cols, format,
                                                FP8_WHOLE, f->tile_amax, stream);
            break;
        case FP8_BLOCK:
            if (q) fp8_quantize_1x128(q->q, (float*)q->scale, x, rows, cols, format, stream);
            if (qt)
                fp8_quantize_1x128_transposed(qt->q, (float*)qt->scale, x, rows, cols, format,
                                              stream);
            break;
        case FP8_MX:
            if (q) fp8_quantize_mx(q->q, (uint8_t*)q->scale, x, rows, cols, format, stream);
            if (qt)
                fp8_quantize_mx_transposed(qt->q, (uint8_t*)qt->scale, x, rows, cols, format,
                                           stream);
            break;
    }
}

// Layer l's weight w (out, in) into its cache, W and W^T, unless the cache holds this layer's
// weight of this parameter version.
inline void fp8_quantize_weight(Fp8State* f, Fp8Layer* l, const floatX* w, cudaStream_t stream) {
    if (l->gathered) return;  // the gather before the layer's pass put it there
    Fp8Weight* c = fp8_weight(f, l);
    if (c->layer == l->index && c->version == f->params_version) return;
    c->layer = l->index;
    c->version = f->params_version;
    const int rows = l->out, cols = l->in;
    const bool cut = l->cut.in || l->cut.out;
    switch (f->config.recipe) {
        case FP8_TENSOR:
            fp8_quantize_tensor(c->q, c->qt, c->tensor, f->partial, w, rows, cols, __NV_E4M3,
                                cut ? f->tp : FP8_WHOLE, stream);
            break;
        case FP8_DELAYED:
            fp8_quantize_delayed(c->q, c->qt, &f->delayed, fp8_delayed_index(f, l->index, FP8_W),
                                 f->partial, w, rows, cols, __NV_E4M3, stream);
            break;
        case FP8_ROWWISE:
            fp8_quantize_rowwise(c->q, (float*)c->scale, w, rows, cols, __NV_E4M3,
                                 l->cut.in ? f->tp : FP8_WHOLE, f->tile_amax, stream);
            fp8_quantize_rowwise_transposed(c->qt, (float*)c->scale_t, w, rows, cols, __NV_E4M3,
                                            l->cut.out ? f->tp : FP8_WHOLE, f->tile_amax, stream);
            break;
        case FP8_BLOCK:
            fp8_quantize_128x128(c->q, c->qt, (float*)c->scale, (float*)c->scale_t, w, rows, cols,
                                 __NV_E4M3, stream);
            break;
        case FP8_MX:
            fp8_quantize_mx(c->q, (uint8_t*)c->scale, w, rows, cols, __NV_E4M3, stream);
            fp8_quantize_mx_transposed(c->qt, (uint8_t*)c->scale_t, w, rows, cols, __NV_E4M3,
                                       stream);
            break;
    }
}

// The cuBLASLt operand of quantized bytes: its scales are `scale`, or the per-tensor scale's
// scale_inv.
inline MatmulFp8Operand fp8_operand(const Fp8State* f, const uint8_t* q, const void* scale,
                                    const Fp8TensorScale* tensor, __nv_fp8_interpretation_t format,
                                    bool is_weight) {
    const int recipe = f->config.recipe;
    return MatmulFp8Operand{q, format == __NV_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2,
                            fp8_scale_mode(recipe, is_weight),
                            fp8_per_tensor(recipe) ? (const void*)&tensor->scale_inv : scale};
}

// The per-tensor scale of layer l's tensor `kind` (nullptr for the other recipes).
inline Fp8TensorScale* fp8_tensor_scale(Fp8State* f, const Fp8Layer* l, Fp8TensorKind kind) {
    switch (f->config.recipe) {
        case FP8_TENSOR:
            return kind == FP8_W ? fp8_weight(f, l)->tensor : &f->act_scales[kind == FP8_X ? 0 : 1];
        case FP8_DELAYED:
            return &f->delayed.scales[fp8_delayed_index(f, l->index, kind)];
        default:
            return nullptr;
    }
}

// ---------------------------------------------------------------------------------------------
// The layer's products

// out (N, OC) = inp (N, IC) @ weight^T + bias, in FP8 (layer `layer` of f).
inline void fp8_linear_forward(Fp8State* f, int layer, MatmulContext* mm, floatX* out,
                               const floatX* inp, const floatX* weight, const floatX* bias, int N) {
    Fp8Layer* l = &f->layers[layer];
    cudaStream_t st = mm->stream;
    fp8_quantize_weight(f, l, weight, st);
    Fp8TensorScale* x_scale = fp8_tensor_scale(f, l, FP8_X);
    fp8_quantize_activation(f, &f->x, nullptr, inp, N, l->in, __NV_E4M3, l->cut.in, l->index, FP8_X,
                            x_scale, f->training, st);
    const Fp8Weight* cached = fp8_weight(f, l);
    const MatmulFp8Operand w =
        fp8_operand(f, cached->q, cached->scale, fp8_tensor_scale(f, l, FP8_W), __NV_E4M3, true);
    const MatmulFp8Operand x = fp8_operand(f, f->x.q, f->x.scale, x_scale, __NV_E4M3, false);
    // out^T (OC, N) = W (OC rows of IC) x X (N rows of IC)
    matmul_fp8(mm, out, &w, &x, bias, l->out, N, l->in, false);
}

// dinp (N, IC) = dout @ weight and dweight (OC, IC) += dout^T @ inp, in FP8 (the bias gradient
// is the caller's).
inline void fp8_linear_backward(Fp8State* f, int layer, MatmulContext* mm, floatX* dinp,
                                floatX* dweight, const floatX* dout, const floatX* inp,
                                const floatX* weight, int N) {
    Fp8Layer* l = &f->layers[layer];
    cudaStream_t st = mm->stream;
    fp8_quantize_weight(f, l, weight, st);
    Fp8TensorScale* g_scale = fp8_tensor_scale(f, l, FP8_G);
    Fp8TensorScale* x_scale = fp8_tensor_scale(f, l, FP8_X);
    if (fp8_per_tensor(f->config.recipe)) {
        // G and G^T in one pass (one scale); X^T with X's scale: its amax again (tensor), or the
        // step's scale, the amax counted in the forward pass already (delayed)
        fp8_quantize_activation(f, &f->g, &f->gt, dout, N, l->out, f->grad_format, l->cut.out,
                                l->index, FP8_G, g_scale, true, st);
        fp8_quantize_activation(f, nullptr, &f->xt, inp, N, l->in, __NV_E4M3, l->cut.in, l->index,
                                FP8_X, x_scale, false, st);
    } else {  // G^T and X^T group their elements along N, which no rank cuts
        fp8_quantize_activation(f, &f->g, nullptr, dout, N, l->out, f->grad_format, l->cut.out,
                                l->index, FP8_G, g_scale, true, st);
        fp8_quantize_activation(f, nullptr, &f->gt, dout, N, l->out, f->grad_format, false,
                                l->index, FP8_G, g_scale, true, st);
        fp8_quantize_activation(f, nullptr, &f->xt, inp, N, l->in, __NV_E4M3, false, l->index,
                                FP8_X, x_scale, false, st);
    }
    const Fp8Weight* cached = fp8_weight(f, l);
    const MatmulFp8Operand wt =
        fp8_operand(f, cached->qt, cached->scale_t, fp8_tensor_scale(f, l, FP8_W), __NV_E4M3, true);
    const MatmulFp8Operand g = fp8_operand(f, f->g.q, f->g.scale, g_scale, f->grad_format, false);
    const MatmulFp8Operand gt =
        fp8_operand(f, f->gt.q, f->gt.scale, g_scale, f->grad_format, false);
    const MatmulFp8Operand xt = fp8_operand(f, f->xt.q, f->xt.scale, x_scale, __NV_E4M3, false);
    // dinp^T (IC, N) = W^T (IC rows of OC) x G (N rows of OC)
    matmul_fp8(mm, dinp, &wt, &g, nullptr, l->in, N, l->out, false);
    // dweight^T (IC, OC) += X^T (IC rows of N) x G^T (OC rows of N)
    matmul_fp8(mm, dweight, &xt, &gt, nullptr, l->in, l->out, N, true);
}

// The end of an optimizer step (delayed scaling): the step's running amaxes reduced (max) over
// every rank of `groups` (the data-parallel and the tensor-parallel group: every rank then holds
// the maxima over the whole global batch and over the whole of each cut tensor), pushed into the
// histories, the next step's scales set. The max also runs over the scales themselves, which are
// equal on every rank (they are computed from equal histories), so it leaves them as they are.
inline void fp8_end_step(Fp8State* f, const CommGroup* const* groups, int count,
                         cudaStream_t stream) {
    if (f->config.recipe != FP8_DELAYED) return;
    Fp8DelayedScaling* d = &f->delayed;
    static_assert(sizeof(Fp8TensorScale) == 3 * sizeof(float), "Fp8TensorScale is 3 floats");
    for (int i = 0; i < count; i++)
        comm_allreduce_max(groups[i], (float*)d->scales, 3 * (size_t)d->count, stream);
    const int layers = f->count;
    fp8_delayed_end_step(d, 0, 2 * layers, __NV_E4M3, stream);  // X and W
    fp8_delayed_end_step(d, 2 * layers, layers, f->grad_format, stream);
    fp8_delayed_advance(d);
}
