/*
llmc/muon.cuh: Muon's step on one tensor: momentum, Newton-Schulz orthogonalization and the
update, as torch.optim.Muon (PyTorch >= 2.9) defines them. train_gpt.cu's parameter table
decides which tensors it updates (the hidden matrices: attn.qkv.w, attn.proj.w, mlp.fc.w,
mlp.proj.w) and in how many matrices (attn.qkv.w is three: Q, K and V are orthogonalized as
separate C x C matrices). Entry points: muon_update (one matrix), newton_schulz, muon_lr_scale
(the lr's shape adjustment), muon_workspace_init / muon_workspace_free.

The step, for one matrix G of shape (A, B) (A = rows = output features), with the gradient
g = grad * grad_scale (clipping), momentum mu, learning rate lr (the schedule's, unadjusted) and
weight decay wd:
    buf = lerp(buf, g, 1 - mu)                        buf + (1-mu)(g - buf): an average, not a sum
    u   = nesterov ? lerp(g, buf, mu) : buf          g + mu (buf - g)
    O   = NS(u)
    p   = p (1 - lr wd) - lr * adjust(A, B) * O       decoupled decay with the unadjusted lr
    adjust: original sqrt(max(1, A/B)); match_rms_adamw 0.2 sqrt(max(A, B)) (so AdamW's lr and
    weight decay carry over)
lerp is PyTorch's: start + w (end - start) for |w| < 0.5, else end - (end - start)(1 - w), each
with one fused multiply-add as its vectorized CPU kernel computes it.
NS(u): X = u as floatX, transposed to (B, A) when A > B (so X is never taller than wide);
X /= max(||X||_F, 1e-7) (the norm rounded to floatX, as torch's bf16 tensor holds it); then
ns_steps times, with (a, b, c) = (3.4445, -4.7750, 2.0315):
    gram = X X^T;  poly = b gram + c gram gram;  X = a X + poly X
and the result transposed back. Every product goes through matmul_general() (llmc/matmul.cuh,
cuBLASLt): floatX operands and result, fp32 accumulation, alpha/beta applied before the one
rounding. So the bf16 build runs Newton-Schulz in bf16 with fp32 accumulation, as torch does
(its _zeropower_via_newtonschulz casts to bfloat16), and the fp32 build in fp32. The momentum
buffer is fp32 in both builds; in the bf16 build p is the fp32 master weight and the bf16 copy is
written from it with stochastic rounding keyed by the element's global offset.

Memory: the model state of a Muon tensor is 12 bytes per parameter in the bf16 build (bf16 weight
2, bf16 gradient 2, fp32 master 4, fp32 momentum 4) against AdamW's 16; Newton-Schulz adds a
workspace sized for the largest matrix (MuonWorkspace), not per parameter.

Determinism: elementwise kernels, the two-pass norm of llmc/norm.cuh and cuBLASLt products with
fixed algorithms: no atomics, the same bits on any device run and any CPU thread count.

Design note: how ZeRO shards this table (llmc/shard_plan.h's plan_build, over the
data-parallel gradient buckets). The parameter table in train_gpt.cu (ParamTensor) holds, per
tensor, what the plan is built from: its offset in the parameter/gradient/master buffers, its
numel and shape, its optimizer and, for Muon, its matrices (`matrices` row blocks of
rows/matrices x cols each; a matrix is the contiguous element range offset + k *
numel/matrices, a whole number of TENSOR_ALIGN blocks since C is a multiple of 32). Each entry
becomes a ShardTensor {offset, numel, matrices, rows, cols} with matrices 0 for a tensor of an
element-wise optimizer (AdamW, Lion) and ParamTensor::matrices for a Muon one.
- Element-wise tensors: the plan cuts them anywhere: per gradient bucket their elements are
  packed and split into equal slices, one per rank of the data-parallel group; a rank holds the
  optimizer's state and the master weights of its slices only, the gradients are
  reduce-scattered by slice and the updated parameters all-gathered.
- Muon tensors: Newton-Schulz needs a whole matrix, so a matrix is never split. Each is owned
  whole by one rank (owner computes), assigned by its Newton-Schulz cost (m^2 n for an (m, n)
  matrix, m <= n; 2 products of that size and one of m^3 per step), largest first to the least
  loaded rank, so qkv's three matrices may land on three ranks. The owner holds the matrix's
  momentum (Muon state is sharded by whole matrices), receives its reduced gradient (a reduce
  to the owner), updates the momentum, runs Newton-Schulz and applies the update to its master
  weights; the other ranks receive the new parameters by broadcast from the owner. Each matrix
  is orthogonalized once per step, on one rank, instead of on every rank after a gather of its
  momentum. muon_update below works matrix by matrix on element ranges, so the owner calls it
  on its own matrices with the shard's pointers.
*/
#pragma once

#include <algorithm>

#include "comm.cuh"
#include "common.cuh"
#include "matmul.cuh"
#include "norm.cuh"
#include "parallel.h"  // TpSplit: how tensor parallelism cuts a matrix

// torch.optim.Muon's defaults: the quintic Newton-Schulz coefficients, the norm's floor.
constexpr float NS_A = 3.4445f, NS_B = -4.7750f, NS_C = 2.0315f;
constexpr float MUON_EPS = 1e-7f;

enum MuonAdjust { MUON_ADJUST_ORIGINAL = 0, MUON_ADJUST_MATCH_RMS_ADAMW = 1 };
static const char* const MUON_ADJUST_NAMES[] = {"original", "match_rms_adamw"};

// The lr multiplier of a matrix of shape (A, B), A = output features (torch's _adjust_lr).
inline double muon_lr_scale(int adjust, int A, int B) {
    if (adjust == MUON_ADJUST_ORIGINAL) return sqrt(std::max(1.0, (double)A / B));
    return 0.2 * sqrt((double)std::max(A, B));
}

struct MuonHyper {
    double lr;        // the scheduled Muon lr, before the shape adjustment (weight decay uses it)
    double momentum;  // mu
    bool nesterov;
    int ns_steps;
    double grad_scale;  // multiplies every gradient (gradient clipping)
    uint32_t seed;      // stochastic rounding seed of this step
};

// Newton-Schulz scratch, sized for the largest matrix; one per process.
struct MuonWorkspace {
    floatX* x;            // (m, n), m <= n: the iterate
    floatX* x_next;       // (m, n): the next iterate
    floatX* gram;         // (m, m): X X^T
    floatX* poly;         // (m, m): b gram + c gram gram
    float* norm;          // ||X||, then NORM_BLOCKS partial sums
    size_t matrix_elems;  // capacity of x and x_next
    size_t gram_elems;    // capacity of gram and poly
};

// Takes the workspace from `ledger` (llmc/memplan.h; nothing when matrix_elems is 0).
inline void muon_workspace_init(MuonWorkspace* ws, size_t matrix_elems, size_t gram_elems,
                                DeviceLedger* ledger) {
    memset(ws, 0, sizeof(*ws));
    if (matrix_elems == 0) return;
    ws->matrix_elems = matrix_elems;
    ws->gram_elems = gram_elems;
    ws->x = device_take_n<floatX>(ledger, MEM_WORKSPACE, matrix_elems);
    ws->x_next = device_take_n<floatX>(ledger, MEM_WORKSPACE, matrix_elems);
    ws->gram = device_take_n<floatX>(ledger, MEM_WORKSPACE, gram_elems);
    ws->poly = device_take_n<floatX>(ledger, MEM_WORKSPACE, gram_elems);
    ws->norm = device_take_n<float>(ledger, MEM_WORKSPACE, 1 + NORM_BLOCKS);
}

inline void muon_workspace_free(MuonWorkspace* ws) {
    if (ws->matrix_elems == 0) return;
    CUDA_CHECK(cudaFree(ws->x));
    CUDA_CHECK(cudaFree(ws->x_next));
    CUDA_CHECK(cudaFree(ws->gram));
    CUDA_CHECK(cudaFree(ws->poly));
    CUDA_CHECK(cudaFree(ws->norm));
}

// PyTorch's lerp (ATen's vectorized CPU kernel): one fused multiply-add from the nearer end.
__device__ inline float torch_lerp(float start, float end, float weight) {
    const float diff = end - start;
    return fabsf(weight) < 0.5f ? fmaf(weight, diff, start) : fmaf(weight - 1.0f, diff, end);
}

// Where a (rows, cols) part of a matrix sits in the Newton-Schulz iterate: at (row0, col0)
// of the whole (whole_rows, whole_cols) matrix, which is stored transposed, (whole_cols,
// whole_rows), when transpose is set. Without tensor parallelism the part is the whole matrix.
struct MuonPart {
    int rows, cols, row0, col0, whole_rows, whole_cols;
    bool transpose;
};

// The iterate's index of element i = r * cols + c of the part.
__device__ inline size_t muon_part_index(const MuonPart& p, size_t i) {
    const size_t r = i / p.cols + p.row0, c = i % p.cols + p.col0;
    return p.transpose ? c * p.whole_rows + r : r * p.whole_cols + c;
}

// One thread per element of a (rows, cols) matrix or part (grid-stride; i = r * cols + c):
// the momentum update and the Newton-Schulz input u, written to x as floatX where `part` places
// it. one_minus_mu is 1 - mu formed in double, as torch forms its lerp weight from the Python
// float.
static __global__ void muon_momentum_kernel(floatX* x, float* buf, const floatX* grads,
                                            MuonPart part, float mu, float one_minus_mu,
                                            bool nesterov, float grad_scale) {
    const size_t n = (size_t)part.rows * part.cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float g = (float)grads[i] * grad_scale;
        const float b = torch_lerp(buf[i], g, one_minus_mu);
        buf[i] = b;
        const float u = nesterov ? torch_lerp(g, b, mu) : b;
        x[muon_part_index(part, i)] = (floatX)u;
    }
}

// Tensor parallelism: the ranks' parts of a matrix, gathered rank after rank in `parts` (each
// rows x cols, in its own layout), placed into the iterate x: `shares` distinct parts, share k
// from rank k * replicas (the ranks between hold copies of it). One thread per element.
static __global__ void muon_assemble_kernel(floatX* x, const floatX* parts, MuonPart part,
                                            int shares, int replicas, bool split_rows) {
    const size_t n = (size_t)part.rows * part.cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n * shares;
         i += (size_t)gridDim.x * blockDim.x) {
        MuonPart p = part;
        const int share = (int)(i / n);
        if (split_rows) p.row0 = share * p.rows;
        else p.col0 = share * p.cols;
        x[muon_part_index(p, i % n)] = parts[(size_t)share * replicas * n + i % n];
    }
}

// x /= max(||x||, MUON_EPS), the norm and its clamp held as floatX (torch's bf16 scalars).
static __global__ void muon_normalize_kernel(floatX* x, size_t n, const float* norm) {
    const float s = (float)(floatX)fmaxf((float)(floatX)*norm, MUON_EPS);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = (floatX)((float)x[i] / s);
}

// One thread per element of a (rows, cols) matrix or part: decoupled weight decay, then
// the step along the orthogonalized update o (read where `part` places the element).
// params/master point at the matrix; offset is its global offset (the rounding noise index).
static __global__ void muon_apply_kernel(floatX* params, float* master, const floatX* o,
                                         MuonPart part, float decay_factor, float step,
                                         uint32_t seed, size_t offset) {
    const size_t n = (size_t)part.rows * part.cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float u = (float)o[muon_part_index(part, i)];
        float p = master ? master[i] : (float)params[i];
        p *= decay_factor;      // param.mul_(1 - lr * wd)
        p = fmaf(-step, u, p);  // param.add_(update, alpha=-adjusted_lr)
        if (master) master[i] = p;
        stochastic_round_store(&params[i], p, seed, offset + i);
    }
}

// Orthogonalizes the (m, n) matrix in ws->x (m <= n), as torch's _zeropower_via_newtonschulz
// does after its transpose: normalization by the Frobenius norm, then `steps` quintic
// iterations. Returns the buffer holding the result (ws->x or ws->x_next).
//
// cuBLASLt is column-major: the memory of a row-major (R, K) matrix is the column-major (K, R)
// matrix, its transpose. With Xc = X^T (the memory of X), gram^T = gram's memory and so on:
//   gram = X X^T            ->  gram^T   = Xc^T Xc                  (m, m), k = n
//   poly = b gram + c gram^2 ->  poly^T  = c gram^T gram^T + b gram^T (m, m), k = m
//   X'   = a X + poly X      ->  X'^T    = Xc poly^T + a Xc          (n, m), k = m
inline const floatX* newton_schulz(MuonWorkspace* ws, MatmulContext* mm, int m, int n, int steps,
                                   cudaStream_t stream) {
    const size_t numel = (size_t)m * n;
    l2_norm(ws->norm, ws->norm + 1, ws->x, numel, norm_blocks_for(numel), stream);
    const int block = 256;
    muon_normalize_kernel<<<grid_for(numel, block), block, 0, stream>>>(ws->x, numel, ws->norm);
    CUDA_CHECK_LAUNCH();
    floatX* x = ws->x;
    floatX* next = ws->x_next;
    for (int s = 0; s < steps; s++) {
        matmul_general(mm, ws->gram, x, x, nullptr, nullptr, 1.0f, 0.0f, m, m, n, true, false);
        matmul_general(mm, ws->poly, ws->gram, ws->gram, ws->gram, nullptr, NS_C, NS_B, m, m, m,
                       false, false);
        matmul_general(mm, next, x, ws->poly, x, nullptr, 1.0f, NS_A, n, m, m, false, false);
        std::swap(x, next);
    }
    return x;
}

// Updates one Muon tensor of shape (rows, cols), made of `matrices` matrices of
// (rows / matrices, cols) each, orthogonalized one by one. params/master/grads/momentum point at
// the tensor (master nullptr in the fp32 build); offset is its offset in the parameter buffer;
// lr_scale its shape adjustment (muon_lr_scale of one whole matrix).
//
// Tensor parallelism: when the tensor is this rank's part of a matrix cut over the group tp
// (split TP_ROWS or TP_COLS, llmc/parallel.h; every rank of tp calls this for its part), each
// matrix is orthogonalized whole, never by parts: each rank writes the momentum-updated u of its
// part into its slot of x_next, the slots are all-gathered (in place) and placed into the
// iterate, every rank runs Newton-Schulz on the same whole matrix (the same bits everywhere),
// and applies the update to its own part. replicas > 1 (TP_ROWS): consecutive ranks hold the
// same part (llmc/parallel.h's TpShape), the whole matrix is tp->size / replicas parts.
inline void muon_update(floatX* params, float* master, const floatX* grads, float* momentum,
                        int rows, int cols, int matrices, size_t offset, double lr_scale,
                        double weight_decay, const MuonHyper* h, MuonWorkspace* ws,
                        MatmulContext* mm, const CommGroup* tp, int split, int replicas,
                        cudaStream_t stream) {
    const int matrix_rows = rows / matrices, ranks = split == TP_REPLICATED ? 1 : tp->size;
    const int shares = ranks / replicas;  // the distinct parts of the whole matrix
    MuonPart part = {matrix_rows, cols, 0, 0, matrix_rows, cols, false};
    if (split == TP_ROWS) part.whole_rows *= shares, part.row0 = tp->rank / replicas * matrix_rows;
    if (split == TP_COLS) part.whole_cols *= ranks, part.col0 = tp->rank * cols;
    part.transpose = part.whole_rows > part.whole_cols;  // the iterate is (m, n) with m <= n
    const int m = std::min(part.whole_rows, part.whole_cols);
    const int n = std::max(part.whole_rows, part.whole_cols);
    const size_t matrix_n = (size_t)matrix_rows * cols;
    const size_t gathered = shares == 1 ? matrix_n : matrix_n * ranks;  // x_next's use
    if (gathered > ws->matrix_elems || (size_t)m * n > ws->matrix_elems ||
        (size_t)m * m > ws->gram_elems) {
        fprintf(stderr, "muon_update: a (%d, %d) matrix does not fit the workspace\n",
                part.whole_rows, part.whole_cols);
        exit(EXIT_FAILURE);
    }
    const float decay_factor = (float)(1.0 - h->lr * weight_decay);
    const float step = (float)(h->lr * lr_scale);
    const int block = 256;
    const int grid = grid_for(matrix_n, block);
    for (int u = 0; u < matrices; u++) {
        const size_t at = u * matrix_n;
        const float mu = (float)h->momentum, one_minus_mu = (float)(1.0 - h->momentum);
        const float scale = (float)h->grad_scale;
        if (shares == 1) {
            muon_momentum_kernel<<<grid, block, 0, stream>>>(ws->x, momentum + at, grads + at, part,
                                                             mu, one_minus_mu, h->nesterov, scale);
            CUDA_CHECK_LAUNCH();
        } else {
            const MuonPart own = {matrix_rows, cols, 0, 0, matrix_rows, cols, false};
            floatX* slot = ws->x_next + tp->rank * matrix_n;
            muon_momentum_kernel<<<grid, block, 0, stream>>>(slot, momentum + at, grads + at, own,
                                                             mu, one_minus_mu, h->nesterov, scale);
            CUDA_CHECK_LAUNCH();
            comm_allgather(tp, slot, ws->x_next, matrix_n, stream);
            muon_assemble_kernel<<<grid_for(matrix_n * shares, block), block, 0, stream>>>(
                ws->x, ws->x_next, part, shares, replicas, split == TP_ROWS);
            CUDA_CHECK_LAUNCH();
        }
        const floatX* o = newton_schulz(ws, mm, m, n, h->ns_steps, stream);
        muon_apply_kernel<<<grid, block, 0, stream>>>(params + at, master ? master + at : nullptr,
                                                      o, part, decay_factor, step, h->seed,
                                                      offset + at);
        CUDA_CHECK_LAUNCH();
    }
}
