// llmc/matmul.cuh: every matrix multiply of the model goes through matmul() below, one call of
// cuBLASLt with fp32 accumulation (no TF32), an optional bias epilogue and optional accumulation
// into the output.
//
// cuBLASLt is column-major. A row-major (R, K) matrix is the same memory as a column-major
// (K, R) matrix, its transpose; the row-major callers in train_gpt.cu pick the transpose flags
// with that in mind (each caller says which product it forms).
#pragma once

#include <cublasLt.h>

#include "common.cuh"

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

// One handle and workspace per process, passed to every matmul.
struct MatmulContext {
    cublasLtHandle_t handle;
    void* workspace;
    size_t workspace_size;
    cudaStream_t stream;
};

inline void matmul_init(MatmulContext* ctx, cudaStream_t stream) {
    CUBLAS_CHECK(cublasLtCreate(&ctx->handle));
    ctx->workspace_size = 32u << 20;  // cuBLASLt recommends 32 MiB on Hopper
    CUDA_CHECK(cudaMalloc(&ctx->workspace, ctx->workspace_size));
    ctx->stream = stream;
}

inline void matmul_free(MatmulContext* ctx) {
    CUDA_CHECK(cudaFree(ctx->workspace));
    CUBLAS_CHECK(cublasLtDestroy(ctx->handle));
}

// Column-major D (m, n) = op(A) op(B) [+ bias broadcast along n] [+ D if accumulate].
// op(A) is (m, k): A is stored (k, m) if trans_a, else (m, k). op(B) is (k, n): B is stored
// (n, k) if trans_b, else (k, n). Leading dimensions are the stored row counts (packed).
// bias has m elements (one per row of D) or is nullptr. All pointers 16-byte aligned.
inline void matmul(MatmulContext* ctx, floatX* d, const floatX* a, const floatX* b,
                   const floatX* bias, int m, int n, int k, bool trans_a, bool trans_b,
                   bool accumulate) {
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    cublasLtEpilogue_t epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (bias) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }

    cublasLtMatrixLayout_t layout_a, layout_b, layout_d;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_a, CUBLAS_FLOATX, trans_a ? k : m, trans_a ? m : k, trans_a ? k : m));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_b, CUBLAS_FLOATX, trans_b ? n : k, trans_b ? k : n, trans_b ? n : k));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_d, CUBLAS_FLOATX, m, n, m));

    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &ctx->workspace_size, sizeof(ctx->workspace_size)));
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(ctx->handle, desc, layout_a, layout_b, layout_d,
                                                layout_d, pref, 1, &heuristic, &found));
    if (found == 0) {
        fprintf(stderr, "cuBLASLt found no algorithm for m=%d n=%d k=%d trans_a=%d trans_b=%d bias=%d\n",
                m, n, k, (int)trans_a, (int)trans_b, bias != nullptr);
        exit(EXIT_FAILURE);
    }

    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(ctx->handle, desc, &alpha, a, layout_a, b, layout_b, &beta, d,
                                layout_d, d, layout_d, &heuristic.algo, ctx->workspace,
                                ctx->workspace_size, ctx->stream));

    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(layout_a));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(layout_b));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(layout_d));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
}
