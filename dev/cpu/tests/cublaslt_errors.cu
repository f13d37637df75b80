// cublaslt_errors.cu: the cuBLASLt API around the matmul: version and status names, descriptor
// attributes (sizes, defaults, round trips, size queries) and the status codes with which
// cublasLtMatmul and cublasLtMatmulAlgoGetHeuristic refuse a problem.
//
// Each refusal starts from a valid fp32 problem (checked to run), changes one thing, and expects
// one status. Codes that cublasLt.h documents are marked [doc]; the others are what cuBLASLt is
// expected to return and are marked [expected]: a native run of this test on a GPU confirms them.
// Refusals that only the CPU implementation makes (features it lacks) are in cublaslt_limits.cu.
//! cucc: -lcublasLt
//! run: ./prog => pass /all cuBLASLt API checks passed/
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include "cublaslt_test_util.h"

static cublasLtHandle_t handle;

// ---------------------------------------------------------------------------------------------
static void version_and_names() {
    expect(cublasLtGetVersion() / 10000 == CUBLAS_VER_MAJOR,
           "[doc] cublasLtGetVersion() has the header's major version");
    int major = -1;
    CUBLAS_CHECK(cublasLtGetProperty(MAJOR_VERSION, &major));
    expect(major == CUBLAS_VER_MAJOR, "[doc] cublasLtGetProperty(MAJOR_VERSION)");
    expect(strcmp(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED),
                  "CUBLAS_STATUS_NOT_SUPPORTED") == 0,
           "[doc] cublasLtGetStatusName names the enumerator");
    expect(strcmp(cublasLtGetStatusName(CUBLAS_STATUS_INVALID_VALUE),
                  "CUBLAS_STATUS_INVALID_VALUE") == 0,
           "[doc] cublasLtGetStatusName(CUBLAS_STATUS_INVALID_VALUE)");
    const char* text = cublasLtGetStatusString(CUBLAS_STATUS_SUCCESS);
    expect(text != nullptr && text[0] != '\0', "[doc] cublasLtGetStatusString is a sentence");
}

// ---------------------------------------------------------------------------------------------
// Attributes: documented sizes and defaults, round trips, and the size checks.
template <class T>
static void expect_attr(cublasStatus_t (*get)(void*, int, void*, size_t, size_t*), void* object,
                        int attr, T want, const char* what) {
    size_t needed = 0;
    cublasStatus_t st = get(object, attr, nullptr, 0, &needed);
    T value{};
    size_t written = 0;
    if (st == CUBLAS_STATUS_SUCCESS && needed == sizeof(T))
        st = get(object, attr, &value, sizeof(T), &written);
    char line[160];
    snprintf(line, sizeof line, "[doc] %s: %zu bytes, value as documented", what, sizeof(T));
    expect(st == CUBLAS_STATUS_SUCCESS && needed == sizeof(T) && written == sizeof(T) &&
               memcmp(&value, &want, sizeof(T)) == 0,
           line);
}
static cublasStatus_t get_desc(void* o, int a, void* b, size_t s, size_t* w) {
    return cublasLtMatmulDescGetAttribute(static_cast<cublasLtMatmulDesc_t>(o),
                                          static_cast<cublasLtMatmulDescAttributes_t>(a), b, s, w);
}
static cublasStatus_t get_layout(void* o, int a, void* b, size_t s, size_t* w) {
    return cublasLtMatrixLayoutGetAttribute(static_cast<cublasLtMatrixLayout_t>(o),
                                            static_cast<cublasLtMatrixLayoutAttribute_t>(a), b, s,
                                            w);
}
static cublasStatus_t get_pref(void* o, int a, void* b, size_t s, size_t* w) {
    return cublasLtMatmulPreferenceGetAttribute(
        static_cast<cublasLtMatmulPreference_t>(o),
        static_cast<cublasLtMatmulPreferenceAttributes_t>(a), b, s, w);
}

static void attributes() {
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    expect_attr(get_desc, desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, int32_t(CUBLAS_COMPUTE_32F),
                "MATMUL_DESC_COMPUTE_TYPE");
    expect_attr(get_desc, desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, int32_t(CUDA_R_32F),
                "MATMUL_DESC_SCALE_TYPE");
    expect_attr(get_desc, desc, CUBLASLT_MATMUL_DESC_POINTER_MODE,
                int32_t(CUBLASLT_POINTER_MODE_HOST), "MATMUL_DESC_POINTER_MODE default HOST");
    expect_attr(get_desc, desc, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(CUBLAS_OP_N),
                "MATMUL_DESC_TRANSA default N");
    expect_attr(get_desc, desc, CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_DEFAULT),
                "MATMUL_DESC_EPILOGUE default DEFAULT");
    expect_attr(get_desc, desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, (const void*)nullptr,
                "MATMUL_DESC_BIAS_POINTER default NULL");
    expect_attr(get_desc, desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(0),
                "MATMUL_DESC_EPILOGUE_AUX_LD default 0");
    expect_attr(get_desc, desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, int8_t(0),
                "MATMUL_DESC_FAST_ACCUM default 0");
    expect_attr(get_desc, desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, int32_t(0),
                "MATMUL_DESC_A_SCALE_MODE default SCALAR_32F");

    int32_t trans = CUBLAS_OP_T;
    expect_status(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)),
        CUBLAS_STATUS_SUCCESS, "[doc] set TRANSA");
    expect_attr(get_desc, desc, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(CUBLAS_OP_T),
                "MATMUL_DESC_TRANSA round trip");
    int64_t aux_ld = 4096;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                sizeof(aux_ld)));
    expect_attr(get_desc, desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(4096),
                "MATMUL_DESC_EPILOGUE_AUX_LD round trip");
    int64_t wide = CUBLAS_OP_T;
    expect_status(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof(wide)),
        CUBLAS_STATUS_INVALID_VALUE, "[doc] set TRANSA with 8 bytes");
    expect_status(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 4),
                  CUBLAS_STATUS_INVALID_VALUE, "[doc] set TRANSA from NULL");
    int32_t small = 0;
    expect_status(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &small,
                                                 sizeof(small), nullptr),
                  CUBLAS_STATUS_INVALID_VALUE, "[doc] get AUX_LD into 4 bytes");
    expect_status(
        cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 0, nullptr),
        CUBLAS_STATUS_INVALID_VALUE, "[doc] size query without sizeWritten");
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));

    cublasLtMatrixLayout_t layout;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, CUDA_R_16BF, 96, 40, 100));
    expect_attr(get_layout, layout, CUBLASLT_MATRIX_LAYOUT_TYPE, uint32_t(CUDA_R_16BF),
                "MATRIX_LAYOUT_TYPE");
    expect_attr(get_layout, layout, CUBLASLT_MATRIX_LAYOUT_ORDER, int32_t(CUBLASLT_ORDER_COL),
                "MATRIX_LAYOUT_ORDER default COL");
    expect_attr(get_layout, layout, CUBLASLT_MATRIX_LAYOUT_ROWS, uint64_t(96),
                "MATRIX_LAYOUT_ROWS");
    expect_attr(get_layout, layout, CUBLASLT_MATRIX_LAYOUT_COLS, uint64_t(40),
                "MATRIX_LAYOUT_COLS");
    expect_attr(get_layout, layout, CUBLASLT_MATRIX_LAYOUT_LD, int64_t(100), "MATRIX_LAYOUT_LD");
    expect_attr(get_layout, layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32_t(1),
                "MATRIX_LAYOUT_BATCH_COUNT default 1");
    expect_attr(get_layout, layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, int64_t(0),
                "MATRIX_LAYOUT_STRIDED_BATCH_OFFSET default 0");
    int64_t stride = 4000;
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
    expect_attr(get_layout, layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, int64_t(4000),
                "MATRIX_LAYOUT_STRIDED_BATCH_OFFSET round trip");
    int32_t rows32 = 5;
    expect_status(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows32,
                                                   sizeof(rows32)),
                  CUBLAS_STATUS_INVALID_VALUE, "[doc] set ROWS (uint64_t) with 4 bytes");
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(layout));

    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    expect_attr(get_pref, pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(0),
                "MATMUL_PREF_MAX_WORKSPACE_BYTES default 0");
    expect_attr(get_pref, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32_t(256),
                "MATMUL_PREF_MIN_ALIGNMENT_A_BYTES default 256");
    uint64_t ws = 1 << 20;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    expect_attr(get_pref, pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(1 << 20),
                "MATMUL_PREF_MAX_WORKSPACE_BYTES round trip");
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));

    // Descriptors placed in caller memory (cublasLt*Init).
    cublasLtMatmulDescOpaque_t desc_storage;
    CUBLAS_CHECK(cublasLtMatmulDescInit(&desc_storage, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    expect_attr(get_desc, &desc_storage, CUBLASLT_MATMUL_DESC_TRANSB, int32_t(CUBLAS_OP_N),
                "cublasLtMatmulDescInit: TRANSB default N");
    cublasLtMatrixLayoutOpaque_t layout_storage;
    CUBLAS_CHECK(cublasLtMatrixLayoutInit(&layout_storage, CUDA_R_32F, 7, 3, 9));
    expect_attr(get_layout, &layout_storage, CUBLASLT_MATRIX_LAYOUT_LD, int64_t(9),
                "cublasLtMatrixLayoutInit: LD");
}

// ---------------------------------------------------------------------------------------------
// Refusals. A valid problem: D (M x N) = A (M x K) B (K x N), fp32, column-major.
const int M = 16, N = 8, K = 4;
struct Problem {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c, d;
    float alpha = 1.0f, beta = 0.0f;
    const void* A;
    const void* B;
    const void* C;
    void* D;
    cublasStatus_t set_status = CUBLAS_STATUS_SUCCESS;  // the first refused attribute, if any
};
static float *dev_a, *dev_b, *dev_c, *dev_d, *dev_bias, *dev_aux;

// A library may refuse a bad value when it is set rather than when it is used; either way the
// refusal's status is what the checks below compare.
static void set_desc(Problem& p, cublasLtMatmulDescAttributes_t attr, const void* v, size_t n) {
    cublasStatus_t st = cublasLtMatmulDescSetAttribute(p.desc, attr, v, n);
    if (p.set_status == CUBLAS_STATUS_SUCCESS) p.set_status = st;
}
static void set_layout(Problem& p, cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                       const void* v, size_t n) {
    cublasStatus_t st = cublasLtMatrixLayoutSetAttribute(l, attr, v, n);
    if (p.set_status == CUBLAS_STATUS_SUCCESS) p.set_status = st;
}

// Builds the valid problem, lets `change` spoil it, then checks cublasLtMatmul's status and, for
// refusals that do not depend on pointers (heuristic == true), cublasLtMatmulAlgoGetHeuristic's.
static void refuse(const char* what, cublasStatus_t want, bool heuristic,
                   const std::function<void(Problem&)>& change, cudaDataType ab = CUDA_R_32F,
                   cudaDataType cd = CUDA_R_32F) {
    Problem p;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, ab, M, K, M));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, ab, K, N, K));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, cd, M, N, M));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, cd, M, N, M));
    p.A = dev_a;
    p.B = dev_b;
    p.C = dev_c;
    p.D = dev_d;
    change(p);
    char line[200];
    if (p.set_status != CUBLAS_STATUS_SUCCESS) {
        snprintf(line, sizeof line, "set attribute: %s", what);
        expect_status(p.set_status, want, line);
    } else {
        cublasStatus_t st = cublasLtMatmul(handle, p.desc, &p.alpha, p.A, p.a, p.B, p.b, &p.beta,
                                           p.C, p.c, p.D, p.d, nullptr, nullptr, 0, 0);
        snprintf(line, sizeof line, "cublasLtMatmul: %s", what);
        expect_status(st, want, line);
    }
    if (heuristic && p.set_status == CUBLAS_STATUS_SUCCESS) {
        cublasLtMatmulPreference_t pref;
        CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        cublasLtMatmulHeuristicResult_t result;
        int found = -1;
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.c, p.d, pref,
                                                           1, &result, &found);
        snprintf(line, sizeof line, "heuristic: %s", what);
        // A refused problem has no algorithm: a status or zero results.
        expect(want == CUBLAS_STATUS_SUCCESS ? (st == CUBLAS_STATUS_SUCCESS && found == 1)
                                             : (st != CUBLAS_STATUS_SUCCESS || found == 0),
               line);
        CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    for (cublasLtMatrixLayout_t l : {p.a, p.b, p.c, p.d})
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(l));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(p.desc));
}

static void refusals() {
    const auto none = [](Problem&) {};
    refuse("[doc] the valid problem runs", CUBLAS_STATUS_SUCCESS, true, none);
    refuse("[doc] the valid problem in bf16 runs", CUBLAS_STATUS_SUCCESS, true, none, CUDA_R_16BF,
           CUDA_R_16BF);
    expect_status(
        cublasLtMatmul(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                       nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0),
        CUBLAS_STATUS_NOT_INITIALIZED, "[doc] cublasLtMatmul with a null handle");
    int found = -1;
    cublasLtMatmulHeuristicResult_t result;
    expect_status(cublasLtMatmulAlgoGetHeuristic(nullptr, nullptr, nullptr, nullptr, nullptr,
                                                 nullptr, nullptr, 1, &result, &found),
                  CUBLAS_STATUS_NOT_INITIALIZED, "[doc] heuristic with a null handle");
    expect_status(cublasLtCreate(nullptr), CUBLAS_STATUS_INVALID_VALUE,
                  "[expected] cublasLtCreate(NULL)");

    // Types.
    refuse("[expected] A fp32, B bf16", CUBLAS_STATUS_NOT_SUPPORTED, true, [](Problem& p) {
        uint32_t t = CUDA_R_16BF;
        set_layout(p, p.b, CUBLASLT_MATRIX_LAYOUT_TYPE, &t, sizeof(t));
    });
    refuse("[expected] bf16 inputs, fp16 output", CUBLAS_STATUS_NOT_SUPPORTED, true, none,
           CUDA_R_16BF, CUDA_R_16F);
    refuse("[expected] fp32 inputs, bf16 output", CUBLAS_STATUS_NOT_SUPPORTED, true, none,
           CUDA_R_32F, CUDA_R_16BF);
    refuse(
        "[expected] C bf16, D fp32", CUBLAS_STATUS_NOT_SUPPORTED, true,
        [](Problem& p) {
            uint32_t t = CUDA_R_16BF;
            set_layout(p, p.c, CUBLASLT_MATRIX_LAYOUT_TYPE, &t, sizeof(t));
        },
        CUDA_R_16BF, CUDA_R_32F);
    refuse(
        "[expected] COMPUTE_32F_FAST_TF32 with bf16 inputs", CUBLAS_STATUS_NOT_SUPPORTED, true,
        [](Problem& p) {
            int32_t c = CUBLAS_COMPUTE_32F_FAST_TF32;
            set_desc(p, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &c, sizeof(c));
        },
        CUDA_R_16BF, CUDA_R_16BF);
    refuse("[doc] COMPUTE_32F_FAST_TF32 with fp32 runs", CUBLAS_STATUS_SUCCESS, true,
           [](Problem& p) {
               int32_t c = CUBLAS_COMPUTE_32F_FAST_TF32;
               set_desc(p, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &c, sizeof(c));
           });

    // Shapes and layouts.
    refuse("[expected] ld of A < rows", CUBLAS_STATUS_INVALID_VALUE, true, [](Problem& p) {
        int64_t ld = M - 1;
        set_layout(p, p.a, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof(ld));
    });
    refuse("[expected] ROW order, ld of D < cols", CUBLAS_STATUS_INVALID_VALUE, true,
           [](Problem& p) {
               int32_t row = CUBLASLT_ORDER_ROW;
               int64_t ld = N - 1;
               set_layout(p, p.d, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof(row));
               set_layout(p, p.d, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof(ld));
           });
    refuse("[expected] inner dimensions differ (B has K+1 rows)", CUBLAS_STATUS_INVALID_VALUE, true,
           [](Problem& p) {
               uint64_t rows = K + 1;
               int64_t ld = K + 1;
               set_layout(p, p.b, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof(rows));
               set_layout(p, p.b, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof(ld));
           });
    refuse("[expected] TRANSA=T with A not transposed in its layout", CUBLAS_STATUS_INVALID_VALUE,
           true, [](Problem& p) {
               int32_t t = CUBLAS_OP_T;
               set_desc(p, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t));
           });
    refuse("[expected] D with a different column count than C", CUBLAS_STATUS_INVALID_VALUE, true,
           [](Problem& p) {
               uint64_t cols = N - 1;
               set_layout(p, p.d, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols));
           });
    refuse("[expected] batch counts differ", CUBLAS_STATUS_INVALID_VALUE, true, [](Problem& p) {
        int32_t two = 2;
        int64_t stride = M * N;
        set_layout(p, p.c, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two, sizeof(two));
        set_layout(p, p.d, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two, sizeof(two));
        set_layout(p, p.c, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride));
        set_layout(p, p.d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride));
    });
    refuse("[expected] D batch stride < one matrix (outputs overlap)", CUBLAS_STATUS_INVALID_VALUE,
           true, [](Problem& p) {
               int32_t two = 2;
               int64_t in_stride = 0, out_stride = M * N - 1;
               for (cublasLtMatrixLayout_t l : {p.a, p.b, p.c, p.d}) {
                   set_layout(p, l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two, sizeof(two));
                   int64_t* stride = l == p.d ? &out_stride : &in_stride;
                   set_layout(p, l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride,
                              sizeof(*stride));
               }
           });
    refuse("[expected] TRANSC=T", CUBLAS_STATUS_NOT_SUPPORTED, true, [](Problem& p) {
        int32_t t = CUBLAS_OP_T;
        set_desc(p, CUBLASLT_MATMUL_DESC_TRANSC, &t, sizeof(t));
    });
    refuse("[expected] TRANSA=7 (not an operation)", CUBLAS_STATUS_INVALID_VALUE, true,
           [](Problem& p) {
               int32_t t = 7;
               set_desc(p, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t));
           });
    refuse("[doc] A scale pointer with fp32 data", CUBLAS_STATUS_INVALID_VALUE, true,
           [](Problem& p) {
               const void* scale = dev_bias;
               set_desc(p, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale, sizeof(scale));
           });

    // Epilogues.
    refuse("[expected] BIAS without a bias pointer", CUBLAS_STATUS_INVALID_VALUE, false,
           [](Problem& p) {
               uint32_t e = CUBLASLT_EPILOGUE_BIAS;
               set_desc(p, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e));
           });
    refuse("[doc] BIAS with a bias pointer runs", CUBLAS_STATUS_SUCCESS, true, [](Problem& p) {
        uint32_t e = CUBLASLT_EPILOGUE_BIAS;
        set_desc(p, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e));
        set_desc(p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dev_bias, sizeof(dev_bias));
    });
    auto gelu_aux = [](Problem& p, int64_t ld) {
        uint32_t e = CUBLASLT_EPILOGUE_GELU_AUX;
        set_desc(p, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e));
        set_desc(p, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &dev_aux, sizeof(dev_aux));
        set_desc(p, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld));
    };
    refuse("[doc] GELU_AUX with aux ld = rows of D runs", CUBLAS_STATUS_SUCCESS, true,
           [&](Problem& p) { gelu_aux(p, M); });
    refuse("[expected] GELU_AUX with aux ld not a multiple of 8", CUBLAS_STATUS_INVALID_VALUE, true,
           [&](Problem& p) { gelu_aux(p, M + 4); });
    refuse("[expected] GELU_AUX with aux ld < rows of D", CUBLAS_STATUS_INVALID_VALUE, true,
           [&](Problem& p) { gelu_aux(p, M - 8); });
    refuse("[expected] DGELU without an aux pointer", CUBLAS_STATUS_INVALID_VALUE, false,
           [](Problem& p) {
               uint32_t e = CUBLASLT_EPILOGUE_DGELU;
               int64_t ld = M;
               set_desc(p, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e));
               set_desc(p, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld));
           });
    refuse("[expected] epilogue 3 (not an epilogue)", CUBLAS_STATUS_INVALID_VALUE, true,
           [](Problem& p) {
               uint32_t e = 3;
               set_desc(p, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e));
           });

    // Pointers and scalars.
    refuse("[expected] beta != 0 with C = NULL", CUBLAS_STATUS_INVALID_VALUE, false,
           [](Problem& p) {
               p.beta = 1.0f;
               p.C = nullptr;
           });
    refuse("[expected] D = NULL", CUBLAS_STATUS_INVALID_VALUE, false,
           [](Problem& p) { p.D = nullptr; });
    refuse("[expected] in place (C == D) with C's ld != D's", CUBLAS_STATUS_INVALID_VALUE, false,
           [](Problem& p) {
               int64_t ld = M + 1;
               set_layout(p, p.c, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof(ld));
               p.C = p.D;
           });

    // The heuristic's own arguments.
    Problem p;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_32F, M, K, M));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_32F, K, N, K));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, M, N, M));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    expect_status(cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.d, p.d, pref, 0,
                                                 &result, &found),
                  CUBLAS_STATUS_INVALID_VALUE, "[doc] heuristic with requestedAlgoCount 0");
    cublasLtMatmulHeuristicResult_t results[4];
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.d, p.d, pref, 4,
                                                       results, &found);
    bool fits = st == CUBLAS_STATUS_SUCCESS && found >= 1 && found <= 4;
    for (int i = 0; fits && i < found; i++)
        fits = results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize == 0;
    expect(fits, "[doc] heuristic with no workspace allowed: 1..4 results needing none");
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    for (cublasLtMatrixLayout_t l : {p.a, p.b, p.d}) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(l));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(p.desc));
}

int main() {
    CUBLAS_CHECK(cublasLtCreate(&handle));
    for (float** p : {&dev_a, &dev_b, &dev_c, &dev_d, &dev_bias, &dev_aux}) {
        CUDA_CHECK(cudaMalloc(p, 4 * M * N * K));
        CUDA_CHECK(cudaMemset(*p, 0, 4 * M * N * K));
    }
    version_and_names();
    attributes();
    refusals();
    for (float* p : {dev_a, dev_b, dev_c, dev_d, dev_bias, dev_aux}) CUDA_CHECK(cudaFree(p));
    expect_status(cublasLtDestroy(handle), CUBLAS_STATUS_SUCCESS, "[doc] cublasLtDestroy");
    return test_report("cuBLASLt API");
}
