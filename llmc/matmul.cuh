// llmc/matmul.cuh: every matrix multiply of the program goes through matmul_general() below,
// one call of cuBLASLt with fp32 accumulation (no TF32): D = alpha op(A) op(B) + beta C with an
// optional bias epilogue. The model's layers call it as matmul() (alpha 1, optional accumulation
// into the output); Muon's Newton-Schulz iteration (llmc/muon.cuh) uses alpha, beta and C.
//
// Entry points: matmul_init / matmul_free (a MatmulContext), matmul() for the model's layers,
// matmul_general() for Muon, matmul_fp8() for the FP8 recipes (llmc/fp8_linear.cuh).
//
// cuBLASLt is column-major. A row-major (R, K) matrix is the same memory as a column-major
// (K, R) matrix, its transpose; the row-major callers in train_gpt.cu pick the transpose flags
// with that in mind (each caller says which product it forms).
//
// Two choices keep the results accurate and the calls cheap:
// - Split-K algorithms may only add their partial products in fp32 (the compute type) or not
//   split at all; the default would also allow adding them in the output type, bf16.
// - The algorithm the heuristic picks for a problem is kept in a small table in the context, so
//   the heuristic runs once per distinct problem instead of once per call. The heuristic is
//   deterministic, so a cached and a fresh query pick the same algorithm.
#pragma once

#include <cassert>
#include <cublasLt.h>

#include "common.cuh"
#include "memplan.h"

inline void cublas_check(cublasStatus_t status, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cuBLAS error at %s:%d: %s (%d)\n", file, line,
                cublasLtGetStatusString(status), (int)status);
        exit(EXIT_FAILURE);
    }
}
#define CUBLAS_CHECK(call) cublas_check((call), __FILE__, __LINE__)

// The data type cuBLASLt sees for floatX.
#if defined(ENABLE_FP32)
constexpr cudaDataType_t CUBLAS_FLOATX = CUDA_R_32F;
#else
constexpr cudaDataType_t CUBLAS_FLOATX = CUDA_R_16BF;
#endif

// cuBLASLt's heuristic assumes, unless told otherwise (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES,
// default 256), that A, B, C and D start on 256-byte boundaries, and may pick kernels that rely
// on it. Every tensor of the parameter and activation layouts starts on a multiple of
// TENSOR_ALIGN elements, 256 bytes or more; matmul() asserts it.
constexpr size_t MATMUL_ALIGN_BYTES = 256;

// One problem the heuristic was asked about, and its answer: the shape, the transposes, the
// epilogue and the operands' types and scale modes (FP8; floatX operands have mode -1).
struct MatmulAlgoEntry {
    int m, n, k;
    bool trans_a, trans_b;
    cublasLtEpilogue_t epilogue;
    cudaDataType_t type_a, type_b;
    int32_t scale_mode_a, scale_mode_b;
    cublasLtMatmulAlgo_t algo;
};
// Training uses about a dozen problems; generation adds one per context length, so when the
// table is full the oldest entry is replaced (round robin).
constexpr int MATMUL_ALGO_CACHE = 64;

// One handle and workspace per process, passed to every matmul.
struct MatmulContext {
    cublasLtHandle_t handle;
    void* workspace;
    size_t workspace_size;
    cudaStream_t stream;
    MatmulAlgoEntry algos[MATMUL_ALGO_CACHE];
    int algos_used;  // entries filled so far, then stays at MATMUL_ALGO_CACHE
    int algos_next;  // the entry the next new problem replaces once the table is full
};

// The workspace is taken from `ledger` (llmc/memplan.h).
inline void matmul_init(MatmulContext* ctx, cudaStream_t stream, DeviceLedger* ledger) {
    CUBLAS_CHECK(cublasLtCreate(&ctx->handle));
    ctx->workspace_size = 32u << 20;  // cuBLASLt recommends 32 MiB on Hopper
    ctx->workspace = device_take(ledger, MEM_WORKSPACE, ctx->workspace_size);
    ctx->stream = stream;
    ctx->algos_used = 0;
    ctx->algos_next = 0;
}

inline void matmul_free(MatmulContext* ctx) {
    CUDA_CHECK(cudaFree(ctx->workspace));
    CUBLAS_CHECK(cublasLtDestroy(ctx->handle));
}

// The algorithm for one problem: from the table, or from the heuristic (then remembered).
inline const cublasLtMatmulAlgo_t* matmul_algo(MatmulContext* ctx, cublasLtMatmulDesc_t desc,
                                               cublasLtMatrixLayout_t layout_a,
                                               cublasLtMatrixLayout_t layout_b,
                                               cublasLtMatrixLayout_t layout_d,
                                               const MatmulAlgoEntry* key) {
    for (int i = 0; i < ctx->algos_used; i++) {
        const MatmulAlgoEntry* e = &ctx->algos[i];
        if (e->m == key->m && e->n == key->n && e->k == key->k && e->trans_a == key->trans_a &&
            e->trans_b == key->trans_b && e->epilogue == key->epilogue &&
            e->type_a == key->type_a && e->type_b == key->type_b &&
            e->scale_mode_a == key->scale_mode_a && e->scale_mode_b == key->scale_mode_b)
            return &e->algo;
    }
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &ctx->workspace_size, sizeof(ctx->workspace_size)));
    // NONE is 0, no bit of the mask: algorithms that do not split K always pass the filter. Of
    // the split-K ones only COMPUTE_TYPE (partial sums in fp32 in the workspace) is allowed, not
    // INPLACE or OUTPUT_TYPE (partial sums in the output type).
    const uint32_t reduction =
        CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction, sizeof(reduction)));
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(ctx->handle, desc, layout_a, layout_b, layout_d,
                                                layout_d, pref, 1, &heuristic, &found));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (found == 0) {
        fprintf(stderr,
                "cuBLASLt found no algorithm for m=%d n=%d k=%d trans_a=%d trans_b=%d epilogue=%d "
                "types %d x %d, scale modes %d x %d\n",
                key->m, key->n, key->k, (int)key->trans_a, (int)key->trans_b, (int)key->epilogue,
                (int)key->type_a, (int)key->type_b, key->scale_mode_a, key->scale_mode_b);
        exit(EXIT_FAILURE);
    }
    int slot;
    if (ctx->algos_used < MATMUL_ALGO_CACHE) {
        slot = ctx->algos_used++;
    } else {
        slot = ctx->algos_next;
        ctx->algos_next = (ctx->algos_next + 1) % MATMUL_ALGO_CACHE;
    }
    ctx->algos[slot] = *key;
    ctx->algos[slot].algo = heuristic.algo;
    return &ctx->algos[slot].algo;
}

// Column-major D (m, n) = alpha op(A) op(B) [+ bias broadcast along n] + beta C, the general
// form every product below is. op(A) is (m, k): A is stored (k, m) if trans_a, else (m, k).
// op(B) is (k, n): B is stored (n, k) if trans_b, else (k, n). C (nullptr when beta is 0) has
// D's shape and may be D itself. Leading dimensions are the stored row counts (packed). bias has
// m elements (one per row of D) or is nullptr. The sum is formed in fp32 and rounded to floatX
// once. a, b, c and d MATMUL_ALIGN_BYTES aligned.
inline void matmul_general(MatmulContext* ctx, floatX* d, const floatX* a, const floatX* b,
                           const floatX* c, const floatX* bias, float alpha, float beta, int m,
                           int n, int k, bool trans_a, bool trans_b) {
    assert((uintptr_t)a % MATMUL_ALIGN_BYTES == 0 && (uintptr_t)b % MATMUL_ALIGN_BYTES == 0 &&
           (uintptr_t)c % MATMUL_ALIGN_BYTES == 0 && (uintptr_t)d % MATMUL_ALIGN_BYTES == 0);
    assert(c != nullptr || beta == 0.0f);
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    cublasLtEpilogue_t epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                sizeof(epilogue)));
    if (bias) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                    sizeof(bias)));
    }

    // C, when given, is laid out as D (cuBLASLt's rule for C == D, kept for every C)
    cublasLtMatrixLayout_t layout_a, layout_b, layout_d;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_a, CUBLAS_FLOATX, trans_a ? k : m,
                                            trans_a ? m : k, trans_a ? k : m));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_b, CUBLAS_FLOATX, trans_b ? n : k,
                                            trans_b ? k : n, trans_b ? n : k));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_d, CUBLAS_FLOATX, m, n, m));

    const MatmulAlgoEntry key = {m, n, k, trans_a, trans_b, epilogue, CUBLAS_FLOATX, CUBLAS_FLOATX,
                                 -1, -1, {}};
    const cublasLtMatmulAlgo_t* algo = matmul_algo(ctx, desc, layout_a, layout_b, layout_d, &key);

    CUBLAS_CHECK(cublasLtMatmul(ctx->handle, desc, &alpha, a, layout_a, b, layout_b, &beta,
                                c ? c : d, layout_d, d, layout_d, algo, ctx->workspace,
                                ctx->workspace_size, ctx->stream));

    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(layout_a));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(layout_b));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(layout_d));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
}

// The model's products: D = op(A) op(B) [+ bias] [+ D if accumulate].
inline void matmul(MatmulContext* ctx, floatX* d, const floatX* a, const floatX* b,
                   const floatX* bias, int m, int n, int k, bool trans_a, bool trans_b,
                   bool accumulate) {
    matmul_general(ctx, d, a, b, accumulate ? d : nullptr, bias, 1.0f, accumulate ? 1.0f : 0.0f, m,
                   n, k, trans_a, trans_b);
}

// One FP8 operand of a TN product as matmul_fp8 takes it: `rows` x k bytes, row-major (k
// contiguous: cuBLASLt's column-major k x rows, the stored form of a transposed A and of a plain
// B), with its scale factors in the layout its scale mode defines (llmc/fp8.cuh writes them).
struct MatmulFp8Operand {
    const uint8_t* data;
    cudaDataType_t type;  // CUDA_R_8F_E4M3 or CUDA_R_8F_E5M2
    int32_t scale_mode;   // cublasLtMatmulMatrixScale_t
    const void* scale;    // device: the dequantization scale(s), cuBLASLt's A/B scale pointer
};

// Column-major D (m, n) = dequant(A)^T dequant(B) [+ bias] [+ D if accumulate], A (m rows of
// k), B (n rows of k): the TN form, the only one cuBLASLt's FP8 kernels take on Hopper. The
// products of the decoded, scaled FP8 values are summed in fp32 and rounded to floatX once
// (with accumulate, D's old value is added in fp32 first: beta = 1, C = D). bias: m floatX.
inline void matmul_fp8(MatmulContext* ctx, floatX* d, const MatmulFp8Operand* a,
                       const MatmulFp8Operand* b, const floatX* bias, int m, int n, int k,
                       bool accumulate) {
    assert((uintptr_t)a->data % MATMUL_ALIGN_BYTES == 0 &&
           (uintptr_t)b->data % MATMUL_ALIGN_BYTES == 0 && (uintptr_t)d % MATMUL_ALIGN_BYTES == 0);
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_a = CUBLAS_OP_T, op_b = CUBLAS_OP_N;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                                &a->scale_mode, sizeof(a->scale_mode)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                                                &b->scale_mode, sizeof(b->scale_mode)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                &a->scale, sizeof(a->scale)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                &b->scale, sizeof(b->scale)));
    cublasLtEpilogue_t epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                sizeof(epilogue)));
    if (bias) {  // bf16, D's type: the type cuBLASLt's FP8 table gives a bias with bf16 C
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                    sizeof(bias)));
    }
    cublasLtMatrixLayout_t layout_a, layout_b, layout_d;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_a, a->type, k, m, k));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_b, b->type, k, n, k));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_d, CUBLAS_FLOATX, m, n, m));
    const MatmulAlgoEntry key = {m,       n,       k,       true,           false,          epilogue,
                                 a->type, b->type, a->scale_mode, b->scale_mode, {}};
    const cublasLtMatmulAlgo_t* algo = matmul_algo(ctx, desc, layout_a, layout_b, layout_d, &key);
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(ctx->handle, desc, &alpha, a->data, layout_a, b->data, layout_b,
                                &beta, d, layout_d, d, layout_d, algo, ctx->workspace,
                                ctx->workspace_size, ctx->stream));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(layout_a));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(layout_b));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(layout_d));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
}
