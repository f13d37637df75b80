// llmc/fp8.cuh: quantization of floatX tensors to FP8 (E4M3 or E5M2, cuda_fp8.h's encodings)
// with the scales of each FP8 matmul recipe, ready for cuBLASLt's A/B scale pointers.
//
// Every element is quantized as q = sat(x * scale): x in fp32, one fp32 product, then cuda_fp8.h's
// __NV_SATFINITE conversion (round to nearest even; a finite value beyond the largest finite FP8
// value, 448 for E4M3 and 57344 for E5M2, and +-Inf, become that value with their sign; NaN stays
// NaN). The scale stored with q is the dequantization scale 1 / scale (fp32), what cuBLASLt
// multiplies the decoded FP8 values by.
//
// The scale of a group of elements comes from its amax = max |x| over the group, NaN elements
// ignored, Inf counted: scale = fp8_max / max(amax, 1e-12), or 1 when amax is 0 or Inf (torchao's
// amax_to_scale with its 1e-12 floor; an Inf group keeps scale 1 as Transformer Engine keeps its
// scale for a non-finite amax).
//
// Recipes (x is rows x cols, row-major, cols the reduction dimension; q, q^T row-major bytes):
//   per tensor (current)  fp8_quantize_tensor: one amax over the tensor (a deterministic two-pass
//                         reduction: per-block maxima, then one block over them), Fp8TensorScale
//                         {amax, scale, scale_inv}; q and/or q^T in one pass with that scale.
//   delayed               fp8_quantize_delayed (state in Fp8DelayedScaling, many tensors): every
//                         tensor quantized with the scale of the step, its amax kept as the
//                         step's running max; fp8_delayed_end_step pushes the step's max into
//                         the tensor's amax history (a ring of length H on the device) and sets
//                         the next step's scale from the history's max as Transformer Engine
//                         defines it, scale = fp8_max / max_amax / 2^margin (kept when that max
//                         is 0 or Inf).
//   row-wise              fp8_quantize_rowwise: one scale per row (torchao's rowwise recipe),
//                         scale_inv[rows]; fp8_quantize_rowwise_transposed: q^T with one scale per
//                         row of q^T (per column of x), scale_inv_t[cols].
//   1x128 tiles           fp8_quantize_1x128 (DeepSeek-V3's activations and gradients): one scale
//                         per row per 128 columns, cuBLASLt's VEC128_32F layout (K tiles outer):
//                         scale_inv[(c / 128) * rows + r]. fp8_quantize_1x128_transposed: q^T's
//                         tiles run along q^T's rows, i.e. 128 rows by 1 column of x; scale of x's
//                         (r, c) at scale_inv_t[(r / 128) * cols + c] (the same VEC128_32F layout
//                         for the cols x rows operand q^T).
//   128x128 blocks        fp8_quantize_128x128 (DeepSeek-V3's weights): one scale per 128 x 128
//                         block, cuBLASLt's BLK128x128_32F layout: ceil(rows/128) rows of
//                         ceil(cols/128) scales padded to a multiple of 4; q and q^T in one pass
//                         (q^T's blocks are x's blocks transposed, the same scales, laid out for
//                         the cols x rows q^T). Padding entries are not written.
//   MXFP8                 fp8_quantize_mx (OCP Microscaling v1.0): 32-element blocks along a row,
//                         a power-of-two scale X = 2^(floor(log2 amax) - emax_elem), emax_elem 8
//                         for E4M3 and 15 for E5M2, the exponent clamped to E8M0's [-127, 127] (an
//                         all-zero block gets 2^-127); E8M0 byte = exponent + 127, in cuBLASLt's
//                         VEC32_UE8M0 tiled layout (mx_scale_index, mx_scale_bytes; padding 0);
//                         q = sat(x / X). A block holding NaN or Inf gets the NaN scale 0xFF and
//                         NaN elements. cols must be a multiple of 32.
// Transposed copies: the weight gradient dW = dout^T x needs x^T and dout^T under cuBLASLt's
// TN-only FP8. Per tensor and 128x128 write q and q^T from one read of x (same scales). Row-wise
// and 1x128 group q^T's elements along the other dimension, so q^T has its own scales and its own
// kernel pass (q^T only).
// The VEC128_32F and BLK128x128_32F layouts are those of dev/cpu/cublaslt/fp8.cpp's
// scale_index (for x as an operand stored K x outer with K = cols, q^T with K = rows), where which
// dimension is contiguous is [expected].
//
// A tensor cut over a group of ranks (tensor parallelism) is quantized with the scales of the
// whole tensor: per tensor and row-wise take an Fp8AmaxReduce, which reduces the amaxes (max)
// over the group between the amax pass and the quantization.
//
// Entry points: fp8_quantize_tensor, fp8_quantize_delayed / fp8_delayed_start /
// fp8_delayed_end_step / fp8_delayed_advance / fp8_delayed_discard_step (state in
// Fp8DelayedScaling),
// fp8_quantize_rowwise / fp8_quantize_rowwise_transposed, fp8_quantize_1x128 /
// fp8_quantize_1x128_transposed, fp8_quantize_128x128, fp8_quantize_mx; Fp8TensorScale,
// fp8_block_scale_stride, FP8_AMAX_BLOCKS (the length of the partial-maxima buffer the per-tensor
// and delayed recipes take).
#pragma once

#include <cuda_fp8.h>

#include <algorithm>

#include "common.cuh"

// The largest finite value of an FP8 format, and the exponent of its largest power of two
// (emax_elem of the MX specification).
__host__ __device__ inline float fp8_max_finite(__nv_fp8_interpretation_t format) {
    return format == __NV_E4M3 ? 448.0f : 57344.0f;
}
__host__ __device__ inline int fp8_emax(__nv_fp8_interpretation_t format) {
    return format == __NV_E4M3 ? 8 : 15;
}

__host__ __device__ inline uint8_t fp8_encode(float v, __nv_fp8_interpretation_t format) {
    return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, format);
}

// scale = fp8_max / max(amax, 1e-12) * 2^-margin, or `fallback` when amax is 0 or Inf.
__host__ __device__ inline float fp8_scale_from_amax(float amax, float fp8_max, int margin,
                                                     float fallback) {
    if (!(amax > 0.0f) || isinf(amax)) return fallback;
    return ldexpf(fp8_max / fmaxf(amax, 1e-12f), -margin);
}

// |v| for an amax: NaN counts as 0, so that fmaxf's choice never depends on order.
__device__ inline float fp8_abs_for_amax(float v) { return isnan(v) ? 0.0f : fabsf(v); }

// Reduces n device floats in place to their max over a group of ranks: the amaxes of a tensor
// cut over the group (tensor parallelism), so that every rank quantizes with the scales of the
// whole tensor. fn == nullptr: the tensor is whole on this rank, nothing to reduce.
struct Fp8AmaxReduce {
    void (*fn)(const void* group, float* amax, size_t n, cudaStream_t stream);
    const void* group;
};

struct Fp8TensorScale {
    float amax;       // of the last tensor quantized with this scale (delayed: pushed to history)
    float scale;      // q = sat(x * scale)
    float scale_inv;  // 1 / scale: cuBLASLt's SCALAR_32F A/B scale
};

constexpr int FP8_AMAX_BLOCKS = 256;  // the first pass's blocks (the partial maxima's length)
constexpr int FP8_BLOCK_SIZE = 256;

// ---------------------------------------------------------------------------------------------
// Per-tensor amax, current scaling

// Pass 1 (CHUNK_THREADS threads a block): block b writes the amax of its chunk of x
// (block_chunk) to partial[b].
static __global__ void fp8_amax_partial_kernel(float* partial, const floatX* x, size_t n) {
    size_t begin, end;
    block_chunk(n, blockIdx.x, gridDim.x, &begin, &end);
    float m = 0.0f;
    for (size_t i = begin + threadIdx.x; i < end; i += CHUNK_THREADS)
        m = fmaxf(m, fp8_abs_for_amax((float)x[i]));
    m = block_max(m);
    if (threadIdx.x == 0) partial[blockIdx.x] = m;
}

// Pass 2, one block (its threads stride over the n_partial maxima, thread 0 writes): the amax
// into s->amax (with accumulate, the max of it and s->amax: a running max over a step); with
// set_scale, s->scale and s->scale_inv from it (current scaling).
static __global__ void fp8_amax_finish_kernel(Fp8TensorScale* s, const float* partial,
                                              int n_partial, float fp8_max, bool accumulate,
                                              bool set_scale) {
    float m = 0.0f;
    for (int i = threadIdx.x; i < n_partial; i += CHUNK_THREADS) m = fmaxf(m, partial[i]);
    m = block_max(m);
    if (threadIdx.x != 0) return;
    s->amax = accumulate ? fmaxf(s->amax, m) : m;
    if (set_scale) {
        s->scale = fp8_scale_from_amax(m, fp8_max, 0, 1.0f);
        s->scale_inv = 1.0f / s->scale;
    }
}

// One thread: s's scale from s->amax (after the amax was reduced over a group of ranks).
static __global__ void fp8_scale_from_amax_kernel(Fp8TensorScale* s, float fp8_max) {
    s->scale = fp8_scale_from_amax(s->amax, fp8_max, 0, 1.0f);
    s->scale_inv = 1.0f / s->scale;
}

// Block (bx, by) owns the 32 x 32 tile of x at rows 32 by, columns 32 bx; its 32 x 8 threads
// quantize the tile row by row (thread (tx, ty) rows ty, ty + 8, ..., column tx), writing q, and
// stage the bytes in shared memory so that q^T's rows too are written by consecutive threads.
// Without qt the block still meets at the barrier before it leaves: a GPU pays one barrier, and
// the kernel's only synchronization is then a barrier at the top level of its body, which cucc
// runs as thread loops (a return before it would keep a fiber per thread).
constexpr int FP8_TRANSPOSE_TILE = 32, FP8_TRANSPOSE_ROWS = 8;
static __global__ void fp8_quantize_tensor_kernel(uint8_t* q, uint8_t* qt, const floatX* x,
                                                  int rows, int cols, const Fp8TensorScale* s,
                                                  __nv_fp8_interpretation_t format) {
    __shared__ uint8_t tile[FP8_TRANSPOSE_TILE][FP8_TRANSPOSE_TILE + 1];  // +1: no bank conflicts
    const float scale = s->scale;
    const int row0 = blockIdx.y * FP8_TRANSPOSE_TILE, col0 = blockIdx.x * FP8_TRANSPOSE_TILE;
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (int i = ty; i < FP8_TRANSPOSE_TILE; i += FP8_TRANSPOSE_ROWS) {
        const int r = row0 + i, c = col0 + tx;
        if (r >= rows || c >= cols) continue;
        const uint8_t v = fp8_encode((float)x[(size_t)r * cols + c] * scale, format);
        if (q) q[(size_t)r * cols + c] = v;
        tile[i][tx] = v;
    }
    __syncthreads();  // the tile is staged
    if (!qt) return;  // the whole block leaves
    for (int i = ty; i < FP8_TRANSPOSE_TILE; i += FP8_TRANSPOSE_ROWS) {
        const int c = col0 + i, r = row0 + tx;
        if (r < rows && c < cols) qt[(size_t)c * rows + r] = tile[tx][i];
    }
}

// The amax of x into s, two passes over `partial` (up to FP8_AMAX_BLOCKS floats: no more blocks
// than the elements fill, since a max is the same whatever the split); accumulate and set_scale
// as fp8_amax_finish_kernel's.
static void fp8_amax(Fp8TensorScale* s, float* partial, const floatX* x, size_t n,
                     __nv_fp8_interpretation_t format, bool accumulate, bool set_scale,
                     cudaStream_t stream) {
    const int blocks = (int)std::min<size_t>(
        FP8_AMAX_BLOCKS, std::max<size_t>(1, (n + FP8_BLOCK_SIZE - 1) / FP8_BLOCK_SIZE));
    fp8_amax_partial_kernel<<<blocks, CHUNK_THREADS, 0, stream>>>(partial, x, n);
    CUDA_CHECK_LAUNCH();
    fp8_amax_finish_kernel<<<1, CHUNK_THREADS, 0, stream>>>(
        s, partial, blocks, fp8_max_finite(format), accumulate, set_scale);
    CUDA_CHECK_LAUNCH();
}

static void fp8_quantize_with_tensor_scale(uint8_t* q, uint8_t* qt, const floatX* x, int rows,
                                           int cols, const Fp8TensorScale* s,
                                           __nv_fp8_interpretation_t format, cudaStream_t stream) {
    if (ceil_div(rows, FP8_TRANSPOSE_TILE) > 65535)
        fatal("fp8_quantize: %d rows, more than 65535 tiles of %d", rows, FP8_TRANSPOSE_TILE);
    const dim3 grid((unsigned)ceil_div(cols, FP8_TRANSPOSE_TILE),
                    (unsigned)ceil_div(rows, FP8_TRANSPOSE_TILE));
    fp8_quantize_tensor_kernel<<<grid, dim3(FP8_TRANSPOSE_TILE, FP8_TRANSPOSE_ROWS), 0, stream>>>(
        q, qt, x, rows, cols, s, format);
    CUDA_CHECK_LAUNCH();
}

// Per-tensor current scaling: s from x's amax (reduced over the group of `reduce`, when x is a
// part of a tensor cut over it), then q and/or q^T (either may be nullptr).
static void fp8_quantize_tensor(uint8_t* q, uint8_t* qt, Fp8TensorScale* s, float* partial,
                                const floatX* x, int rows, int cols,
                                __nv_fp8_interpretation_t format, Fp8AmaxReduce reduce,
                                cudaStream_t stream) {
    fp8_amax(s, partial, x, (size_t)rows * cols, format, false, reduce.fn == nullptr, stream);
    if (reduce.fn) {
        reduce.fn(reduce.group, &s->amax, 1, stream);
        fp8_scale_from_amax_kernel<<<1, 1, 0, stream>>>(s, fp8_max_finite(format));
        CUDA_CHECK_LAUNCH();
    }
    fp8_quantize_with_tensor_scale(q, qt, x, rows, cols, s, format, stream);
}

// ---------------------------------------------------------------------------------------------
// Delayed scaling

// The delayed scales of `count` tensors, updated once per optimizer step (Transformer Engine's
// recipe with its amax history): during a step every tensor is quantized with scales[i].scale,
// and scales[i].amax keeps the running max of the tensor's amaxes over the step (its
// micro-batches; the caller reduces it over the ranks that must agree). At the end of the step
// fp8_delayed_end_step pushes that max into the tensor's history (a ring of `length` amaxes,
// history[i * length + position]) and sets the next step's scale from the history's max m:
// scale = fp8_max / m / 2^margin, kept from before when m is 0 or Inf. The caller allocates the
// arrays and starts them as history all zeros, scales {0, 1, 1}, position 0 (fp8_delayed_start).
struct Fp8DelayedScaling {
    float* history;          // device, count * length
    Fp8TensorScale* scales;  // device, count
    int count, length;
    int position;  // the slot this step's amaxes go to (the steps are counted on the host)
    int margin;
};

// Every tensor's running amax to 0; with restart, its scale back to 1 too.
static __global__ void fp8_delayed_reset_kernel(Fp8TensorScale* scales, int count, bool restart) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
        scales[i].amax = 0.0f;
        if (restart) scales[i].scale = scales[i].scale_inv = 1.0f;
    }
}

static void fp8_delayed_reset(const Fp8DelayedScaling* d, bool restart, cudaStream_t stream) {
    fp8_delayed_reset_kernel<<<grid_for(d->count, FP8_BLOCK_SIZE), FP8_BLOCK_SIZE, 0, stream>>>(
        d->scales, d->count, restart);
    CUDA_CHECK_LAUNCH();
}

static void fp8_delayed_start(Fp8DelayedScaling* d, cudaStream_t stream) {
    CUDA_CHECK(cudaMemsetAsync(d->history, 0, sizeof(float) * d->count * d->length, stream));
    fp8_delayed_reset(d, true, stream);
    d->position = 0;
}

// Tensor i of the step: q and/or q^T with its scale, its amax into its running max.
static void fp8_quantize_delayed(uint8_t* q, uint8_t* qt, const Fp8DelayedScaling* d, int i,
                                 float* partial, const floatX* x, int rows, int cols,
                                 __nv_fp8_interpretation_t format, cudaStream_t stream) {
    fp8_quantize_with_tensor_scale(q, qt, x, rows, cols, &d->scales[i], format, stream);
    fp8_amax(&d->scales[i], partial, x, (size_t)rows * cols, format, true, false, stream);
}

// Block i - first owns tensor i (its threads stride over the history, thread 0 writes).
static __global__ void fp8_delayed_end_step_kernel(Fp8TensorScale* scales, float* history,
                                                   int first, int length, int position,
                                                   float fp8_max, int margin) {
    const int i = first + blockIdx.x;
    float* h = history + (size_t)i * length;
    const float step_amax = scales[i].amax;
    float m = step_amax;
    for (int j = threadIdx.x; j < length; j += CHUNK_THREADS)
        if (j != position) m = fmaxf(m, h[j]);
    m = block_max(m);
    if (threadIdx.x != 0) return;
    h[position] = step_amax;
    Fp8TensorScale* s = &scales[i];
    s->amax = 0.0f;
    s->scale = fp8_scale_from_amax(m, fp8_max, margin, s->scale);
    s->scale_inv = 1.0f / s->scale;
}

// The end of a step for tensors [first, first + n), all in `format`; fp8_delayed_advance after
// every range of the step is done.
static void fp8_delayed_end_step(const Fp8DelayedScaling* d, int first, int n,
                                 __nv_fp8_interpretation_t format, cudaStream_t stream) {
    if (n == 0) return;
    fp8_delayed_end_step_kernel<<<n, CHUNK_THREADS, 0, stream>>>(
        d->scales, d->history, first, d->length, d->position, fp8_max_finite(format), d->margin);
    CUDA_CHECK_LAUNCH();
}

static void fp8_delayed_advance(Fp8DelayedScaling* d) {
    d->position = (d->position + 1) % d->length;
}

// A step that is not taken (its update skipped): its running amaxes are dropped, the histories
// and scales stay.
static void fp8_delayed_discard_step(const Fp8DelayedScaling* d, cudaStream_t stream) {
    fp8_delayed_reset(d, false, stream);
}

// ---------------------------------------------------------------------------------------------
// Tiled scales: row-wise, 1x128, 128x128

// Where each tile's scale goes: tile (tr, tc) (tile row and column in x) at
// tr * stride_tile_row + tc * stride_tile_col.
struct Fp8ScaleLayout {
    float* scale_inv;
    size_t stride_tile_row, stride_tile_col;
};

// What a launch of fp8_quantize_tiles_kernel does with the tiles' amaxes: compute and use them
// (one pass over the tiles), only compute them into tile_amax, or use those in tile_amax (after
// the caller reduced them over a group of ranks).
enum Fp8TilePass { FP8_TILES_ONE_PASS, FP8_TILES_AMAX_ONLY, FP8_TILES_GIVEN_AMAX };

// The threads of a block of fp8_quantize_tiles_kernel: 128 on a GPU; under the CPU runtime
// CHUNK_THREADS (one), so that a tile's amax is block_max's value itself, its only barrier is
// the one at the top level of the body, and cucc runs it as thread loops at that barrier (a
// block of 128 fibers switched at four warp calls and barriers took 25-30% of an FP8 run's CPU).
constexpr int FP8_TILE_THREADS = CHUNK_THREADS < 128 ? CHUNK_THREADS : 128;

// Block (tc, tr) owns the tile_rows x tile_cols tile of x at (tr * tile_rows, tc * tile_cols);
// thread t owns its elements t, t + blockDim, ... (row-major within the tile). Pass 1: the tile's
// amax (block max); pass 2: q and/or qt, with the tile's scale into q_scales / qt_scales.
// tile_amax[tr * gridDim.x + tc] holds the amax between FP8_TILES_AMAX_ONLY and GIVEN_AMAX.
// With qt the tile's bytes go through dynamic shared memory (tile_rows x (tile_cols + 1) bytes)
// and out as q^T's rows, consecutive threads writing consecutive bytes.
static __global__ void fp8_quantize_tiles_kernel(uint8_t* q, uint8_t* qt, Fp8ScaleLayout q_scales,
                                                 Fp8ScaleLayout qt_scales, float* tile_amax,
                                                 Fp8TilePass pass, const floatX* x, int rows,
                                                 int cols, int tile_rows, int tile_cols,
                                                 __nv_fp8_interpretation_t format) {
    extern __shared__ uint8_t staged[];  // [row in tile][column in tile], rows of tile_cols + 1
    const int row0 = blockIdx.y * tile_rows, col0 = blockIdx.x * tile_cols;
    const int h = min(tile_rows, rows - row0), w = min(tile_cols, cols - col0);
    const int count = h * w;
    const size_t tile = (size_t)blockIdx.y * gridDim.x + blockIdx.x;
    float amax;
    if (pass == FP8_TILES_GIVEN_AMAX) {
        amax = tile_amax[tile];
    } else {
        float m = 0.0f;
        for (int e = threadIdx.x; e < count; e += blockDim.x)
            m = fmaxf(m, fp8_abs_for_amax((float)x[(size_t)(row0 + e / w) * cols + col0 + e % w]));
        amax = block_max(m);
    }
    const bool quantize = pass != FP8_TILES_AMAX_ONLY;
    if (!quantize) {
        if (threadIdx.x == 0) tile_amax[tile] = amax;
    } else {
        const float scale = fp8_scale_from_amax(amax, fp8_max_finite(format), 0, 1.0f);
        if (threadIdx.x == 0) {
            if (q_scales.scale_inv)
                q_scales.scale_inv[blockIdx.y * q_scales.stride_tile_row +
                                   blockIdx.x * q_scales.stride_tile_col] = 1.0f / scale;
            if (qt_scales.scale_inv)
                qt_scales.scale_inv[blockIdx.y * qt_scales.stride_tile_row +
                                    blockIdx.x * qt_scales.stride_tile_col] = 1.0f / scale;
        }
        for (int e = threadIdx.x; e < count; e += blockDim.x) {
            const size_t r = row0 + e / w, c = col0 + e % w;
            const uint8_t v = fp8_encode((float)x[r * cols + c] * scale, format);
            if (q) q[r * cols + c] = v;
            if (qt) staged[(e / w) * (tile_cols + 1) + e % w] = v;
        }
    }
    // The whole block meets here, staged or not (one barrier, at the top level of the body).
    __syncthreads();  // the tile is staged
    if (!quantize || !qt) return;
    for (int e = threadIdx.x; e < count; e += blockDim.x) {  // q^T's row col0 + e / h
        const int i = e % h, j = e / h;
        qt[(size_t)(col0 + j) * rows + row0 + i] = staged[i * (tile_cols + 1) + j];
    }
}

// The tiles of x quantized into q and/or qt. With reduce.fn (x a part of a tensor cut over a
// group along the tiles' extent: each rank holds a piece of every tile), the tiles' amaxes are
// computed into tile_amax (one float per tile), reduced over the group, then used.
static void fp8_quantize_tiles(uint8_t* q, uint8_t* qt, Fp8ScaleLayout q_scales,
                               Fp8ScaleLayout qt_scales, const floatX* x, int rows, int cols,
                               int tile_rows, int tile_cols, __nv_fp8_interpretation_t format,
                               Fp8AmaxReduce reduce, float* tile_amax, cudaStream_t stream) {
    const dim3 grid((unsigned)ceil_div(cols, tile_cols), (unsigned)ceil_div(rows, tile_rows));
    const size_t staged = qt ? (size_t)tile_rows * (tile_cols + 1) : 0;  // 128 x 128 at most
    if (reduce.fn) {
        fp8_quantize_tiles_kernel<<<grid, FP8_TILE_THREADS, 0, stream>>>(
            q, qt, q_scales, qt_scales, tile_amax, FP8_TILES_AMAX_ONLY, x, rows, cols, tile_rows,
            tile_cols, format);
        CUDA_CHECK_LAUNCH();
        reduce.fn(reduce.group, tile_amax, (size_t)grid.x * grid.y, stream);
    }
    fp8_quantize_tiles_kernel<<<grid, FP8_TILE_THREADS, staged, stream>>>(
        q, qt, q_scales, qt_scales, tile_amax,
        reduce.fn ? FP8_TILES_GIVEN_AMAX : FP8_TILES_ONE_PASS, x, rows, cols, tile_rows, tile_cols,
        format);
    CUDA_CHECK_LAUNCH();
}

static const Fp8AmaxReduce FP8_WHOLE = {nullptr, nullptr};

// q^T's rows in tiles along x's columns: x's column c in segments of tile_rows rows (all rows:
// row-wise q^T; 128: 1x128 tiles of q^T), the segment s scale at scale_inv_t[s * cols + c]
// (tile_amax likewise). Block (bx, by) owns columns [32 bx, 32 bx + 32) of segment by; thread
// (tx, ty) of its 32 x 8 reads column 32 bx + tx, so each row of 32 is one coalesced read.
// Pass 1: each thread's max over rows ty, ty + 8, ... of its column, the 8 maxima of a column
// combined in shared memory. Pass 2: 32 x 32 chunks quantized into a shared tile, then written
// as q^T's rows, consecutive threads writing consecutive bytes.
constexpr int FP8_STRIP = 32, FP8_STRIP_ROWS = 8;
static __global__ void fp8_quantize_columns_kernel(uint8_t* qt, float* scale_inv_t,
                                                   float* tile_amax, Fp8TilePass pass,
                                                   const floatX* x, int rows, int cols,
                                                   int tile_rows,
                                                   __nv_fp8_interpretation_t format) {
    __shared__ float partial[FP8_STRIP_ROWS][FP8_STRIP];
    __shared__ uint8_t tile[FP8_STRIP][FP8_STRIP + 1];  // [column][row]; +1: no bank conflicts
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c0 = blockIdx.x * FP8_STRIP, c = c0 + tx;
    const int r_begin = blockIdx.y * tile_rows, r_end = min(rows, r_begin + tile_rows);
    const size_t at = (size_t)blockIdx.y * cols + c;  // this column's segment: scale, tile_amax
    float amax = 0.0f;
    if (pass == FP8_TILES_GIVEN_AMAX) {
        if (c < cols) amax = tile_amax[at];
    } else {
        float m = 0.0f;
        if (c < cols)
            for (int r = r_begin + ty; r < r_end; r += FP8_STRIP_ROWS)
                m = fmaxf(m, fp8_abs_for_amax((float)x[(size_t)r * cols + c]));
        partial[ty][tx] = m;
        __syncthreads();  // every thread's maximum is in shared memory
        for (int i = 0; i < FP8_STRIP_ROWS; i++) amax = fmaxf(amax, partial[i][tx]);
        if (pass == FP8_TILES_AMAX_ONLY) {
            if (ty == 0 && c < cols) tile_amax[at] = amax;
            return;  // the whole block
        }
    }
    const float scale = fp8_scale_from_amax(amax, fp8_max_finite(format), 0, 1.0f);
    if (ty == 0 && c < cols) scale_inv_t[at] = 1.0f / scale;
    for (int r0 = r_begin; r0 < r_end; r0 += FP8_STRIP) {
        for (int i = ty; i < FP8_STRIP; i += FP8_STRIP_ROWS) {  // row r0 + i, column c
            const int r = r0 + i;
            if (r < r_end && c < cols)
                tile[tx][i] = fp8_encode((float)x[(size_t)r * cols + c] * scale, format);
        }
        __syncthreads();                                        // the chunk is quantized
        for (int j = ty; j < FP8_STRIP; j += FP8_STRIP_ROWS) {  // q^T's row c0 + j, byte r0 + tx
            const int r = r0 + tx;
            if (c0 + j < cols && r < r_end) qt[(size_t)(c0 + j) * rows + r] = tile[j][tx];
        }
        __syncthreads();  // written out before the next chunk overwrites the tile
    }
}

static void fp8_quantize_columns(uint8_t* qt, float* scale_inv_t, const floatX* x, int rows,
                                 int cols, int tile_rows, __nv_fp8_interpretation_t format,
                                 Fp8AmaxReduce reduce, float* tile_amax, cudaStream_t stream) {
    const dim3 grid((unsigned)ceil_div(cols, FP8_STRIP), (unsigned)ceil_div(rows, tile_rows));
    const dim3 block(FP8_STRIP, FP8_STRIP_ROWS);
    if (reduce.fn) {
        fp8_quantize_columns_kernel<<<grid, block, 0, stream>>>(
            qt, scale_inv_t, tile_amax, FP8_TILES_AMAX_ONLY, x, rows, cols, tile_rows, format);
        CUDA_CHECK_LAUNCH();
        reduce.fn(reduce.group, tile_amax, (size_t)grid.y * cols, stream);
    }
    fp8_quantize_columns_kernel<<<grid, block, 0, stream>>>(
        qt, scale_inv_t, tile_amax, reduce.fn ? FP8_TILES_GIVEN_AMAX : FP8_TILES_ONE_PASS, x, rows,
        cols, tile_rows, format);
    CUDA_CHECK_LAUNCH();
}
static const Fp8ScaleLayout FP8_NO_SCALES = {nullptr, 0, 0};

// Row-wise: scale_inv[r] for row r. x's rows may be cut over the group of `reduce` (tile_amax:
// rows floats of scratch).
static void fp8_quantize_rowwise(uint8_t* q, float* scale_inv, const floatX* x, int rows, int cols,
                                 __nv_fp8_interpretation_t format, Fp8AmaxReduce reduce,
                                 float* tile_amax, cudaStream_t stream) {
    fp8_quantize_tiles(q, nullptr, {scale_inv, 1, 0}, FP8_NO_SCALES, x, rows, cols, 1, cols, format,
                       reduce, tile_amax, stream);
}

// Row-wise q^T (cols x rows): scale_inv_t[c] for q^T's row c (x's column c); x's columns may be
// cut over the group of `reduce` (tile_amax: cols floats).
static void fp8_quantize_rowwise_transposed(uint8_t* qt, float* scale_inv_t, const floatX* x,
                                            int rows, int cols, __nv_fp8_interpretation_t format,
                                            Fp8AmaxReduce reduce, float* tile_amax,
                                            cudaStream_t stream) {
    fp8_quantize_columns(qt, scale_inv_t, x, rows, cols, rows, format, reduce, tile_amax, stream);
}

// 1x128 tiles: scale_inv[(c / 128) * rows + r], ceil(cols / 128) * rows values.
static void fp8_quantize_1x128(uint8_t* q, float* scale_inv, const floatX* x, int rows, int cols,
                               __nv_fp8_interpretation_t format, cudaStream_t stream) {
    fp8_quantize_tiles(q, nullptr, {scale_inv, 1, (size_t)rows}, FP8_NO_SCALES, x, rows, cols, 1,
                       128, format, FP8_WHOLE, nullptr, stream);
}

// 1x128 tiles of q^T (cols x rows): x's (r, c) scaled by scale_inv_t[(r / 128) * cols + c],
// ceil(rows / 128) * cols values.
static void fp8_quantize_1x128_transposed(uint8_t* qt, float* scale_inv_t, const floatX* x,
                                          int rows, int cols, __nv_fp8_interpretation_t format,
                                          cudaStream_t stream) {
    fp8_quantize_columns(qt, scale_inv_t, x, rows, cols, 128, format, FP8_WHOLE, nullptr, stream);
}

// The row stride of a BLK128x128_32F scale array of an operand whose reduction dimension is k.
inline size_t fp8_block_scale_stride(int k) {
    return round_up((size_t)ceil_div(k, 128), (size_t)4);
}

// 128x128 blocks: block (i, j) of x at scale_inv[i * fp8_block_scale_stride(cols) + j]; of q^T
// (block (j, i) of q^T) at scale_inv_t[j * fp8_block_scale_stride(rows) + i]. q, qt and their
// scales may each be nullptr.
static void fp8_quantize_128x128(uint8_t* q, uint8_t* qt, float* scale_inv, float* scale_inv_t,
                                 const floatX* x, int rows, int cols,
                                 __nv_fp8_interpretation_t format, cudaStream_t stream) {
    fp8_quantize_tiles(q, qt, {scale_inv, fp8_block_scale_stride(cols), 1},
                       {scale_inv_t, 1, fp8_block_scale_stride(rows)}, x, rows, cols, 128, 128,
                       format, FP8_WHOLE, nullptr, stream);
}

// ---------------------------------------------------------------------------------------------
// MXFP8

constexpr int MX_BLOCK = 32;

// The E8M0 exponent of a block of amax `amax` (finite): floor(log2 amax) - emax_elem, within
// [-127, 127]; -127 for amax 0.
__host__ __device__ inline int mx_scale_exponent(float amax, __nv_fp8_interpretation_t format) {
    if (amax == 0.0f) return -127;
    int e;
    frexpf(amax, &e);  // amax = m 2^e, m in [0.5, 1): floor(log2 amax) = e - 1
    return max(-127, min(127, e - 1 - fp8_emax(format)));
}

// cuBLASLt's VEC32_UE8M0 scale tensor for an operand of `rows` outer rows (M of A, N of B) and
// K = cols (a multiple of 32), as the cuBLAS documentation's section 3.1.4.4.2 "1D Block Scaling
// Factors Layout" gives it: the rows x cols/32 E8M0 scales cut into tiles of 128 rows by 4 K
// blocks (a tile covers 128 x 128 elements), the tiles row-major (ceil(cols/128) per tile row),
// 512 bytes each, and inside a tile its row r (0..127) and K block c (0..3) at
// (r % 32) * 16 + (r / 32) * 4 + c. The tensor holds whole tiles, mx_scale_bytes(rows, cols)
// bytes; the padding entries (rows past `rows`, K blocks past cols/32) are 0, the zero fill the
// documentation asks for (fp8_quantize_mx writes them). The layout does not depend on how the
// operand itself is stored (transposed or not).
__host__ __device__ inline size_t mx_scale_index(int row, int k_block, int cols) {
    const int tiles_per_row = (cols / MX_BLOCK + 3) / 4;
    const size_t tile = (size_t)(row / 128) * tiles_per_row + k_block / 4;
    return tile * 512 + (row % 32) * 16 + (row % 128 / 32) * 4 + k_block % 4;
}
__host__ __device__ inline size_t mx_scale_bytes(int rows, int cols) {
    return (size_t)(rows + 127) / 128 * 128 * ((cols / MX_BLOCK + 3) / 4 * 4);
}

// The operand is rows x cols (K = cols), row-major in q; its element (r, k) is x[r * row_stride +
// k * k_stride] (x itself: cols, 1; x^T as the operand: 1, x's column count).
// Each ROW_LANES threads of the grid (a warp on a GPU, one thread under the CPU runtime: see
// ROW_LANES) own a scale slot, group w slot w of the padded rows x K blocks (row-major over
// round_up(rows, 128) x round_up(cols / 32, 4)): a padding slot's lane 0 writes 0; a real one's
// lane l quantizes elements l, l + ROW_LANES, ... of the 32-element block (on a GPU element l),
// lane 0 writes its scale.
static __global__ void fp8_quantize_mx_kernel(uint8_t* q, uint8_t* scale_e8m0, const floatX* x,
                                              int rows, int cols, size_t row_stride,
                                              size_t k_stride, __nv_fp8_interpretation_t format) {
    constexpr int per_lane = MX_BLOCK / ROW_LANES;
    const int k_blocks = cols / MX_BLOCK, padded_k_blocks = (k_blocks + 3) / 4 * 4;
    const size_t group = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / ROW_LANES;
    const int row = (int)(group / padded_k_blocks), k_block = (int)(group % padded_k_blocks);
    const int lane = threadIdx.x % ROW_LANES;
    if (row >= (rows + 127) / 128 * 128) return;  // whole groups leave together
    const size_t slot = mx_scale_index(row, k_block, cols);
    if (row >= rows || k_block >= k_blocks) {
        if (lane == 0) scale_e8m0[slot] = 0;
        return;
    }
    float v[per_lane], nonfinite = 0.0f, amax = 0.0f;
    for (int j = 0; j < per_lane; j++) {
        const size_t k = (size_t)k_block * MX_BLOCK + lane + j * ROW_LANES;
        v[j] = (float)x[row * row_stride + k * k_stride];
        if (!isfinite(v[j])) nonfinite = 1.0f;
        amax = fmaxf(amax, fabsf(v[j]));
    }
    const size_t first = (size_t)row * cols + (size_t)k_block * MX_BLOCK + lane;  // q's element
    if (row_max(nonfinite) > 0.0f) {  // the whole group takes this branch
        for (int j = 0; j < per_lane; j++) q[first + j * ROW_LANES] = fp8_encode(NAN, format);
        if (lane == 0) scale_e8m0[slot] = 0xFF;
        return;
    }
    const int exponent = mx_scale_exponent(row_max(amax), format);
    for (int j = 0; j < per_lane; j++)
        q[first + j * ROW_LANES] = fp8_encode(ldexpf(v[j], -exponent), format);
    if (lane == 0) scale_e8m0[slot] = (uint8_t)(exponent + 127);
}

// MXFP8: q (rows x cols, row-major) and scale_e8m0 (mx_scale_bytes(rows, cols) bytes: x's (r, c)
// scaled by scale_e8m0[mx_scale_index(r, c / 32, cols)], padding 0), ready as cuBLASLt's
// VEC32_UE8M0 operand of `rows` outer rows and K = cols; cols a multiple of 32.
static void fp8_quantize_mx_operand(uint8_t* q, uint8_t* scale_e8m0, const floatX* x, int rows,
                                    int cols, size_t row_stride, size_t k_stride,
                                    __nv_fp8_interpretation_t format, cudaStream_t stream) {
    if (cols % MX_BLOCK != 0) fatal("fp8_quantize_mx: K = %d, not a multiple of 32", cols);
    const size_t slots = mx_scale_bytes(rows, cols);
    fp8_quantize_mx_kernel<<<(unsigned)ceil_div(slots * ROW_LANES, (size_t)FP8_BLOCK_SIZE),
                             FP8_BLOCK_SIZE, 0, stream>>>(q, scale_e8m0, x, rows, cols, row_stride,
                                                          k_stride, format);
    CUDA_CHECK_LAUNCH();
}
static void fp8_quantize_mx(uint8_t* q, uint8_t* scale_e8m0, const floatX* x, int rows, int cols,
                            __nv_fp8_interpretation_t format, cudaStream_t stream) {
    fp8_quantize_mx_operand(q, scale_e8m0, x, rows, cols, (size_t)cols, 1, format, stream);
}

// MXFP8 of x^T (the weight gradient's operands): qt (cols x rows, row-major) in 32-element blocks
// along x's columns, scale_e8m0_t (mx_scale_bytes(cols, rows) bytes) as cuBLASLt's VEC32_UE8M0
// operand of `cols` outer rows and K = rows; rows a multiple of 32. A lane reads x with a
// stride of cols (x^T is not materialized in bf16).
static void fp8_quantize_mx_transposed(uint8_t* qt, uint8_t* scale_e8m0_t, const floatX* x,
                                       int rows, int cols, __nv_fp8_interpretation_t format,
                                       cudaStream_t stream) {
    fp8_quantize_mx_operand(qt, scale_e8m0_t, x, cols, rows, 1, (size_t)cols, format, stream);
}
