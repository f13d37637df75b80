// cublaslt_limits.cu: what the CPU cuBLASLt refuses although a GPU's would run it, and the memory
// mistakes it turns into errors where a GPU would fault.
//
// Default run: valid cuBLASLt features this implementation lacks are refused with
// CUBLAS_STATUS_NOT_SUPPORTED (so a program sees it cannot use them here, instead of a wrong
// result): ReLU with a bit-mask aux, per-row alpha vectors, COL32 order, pointer-array batches.
// --host-operand: A in host memory (not cudaMalloc) ends the process with a message.
// --device-alpha: alpha in device memory with the HOST pointer mode ends the process.
// --misaligned: A 4 bytes past a 256-byte boundary, with an algorithm from a heuristic whose
// preferences promised the default 256-byte alignment, ends the process (on a GPU the kernel,
// which loads 16 bytes at a time, faults on the misaligned address). The default run checks that
// the same A runs when the preferences promise only 4 bytes.
//! cpu-only
//! cucc: -lcublasLt
//! run: ./prog => pass /all cuBLASLt limit checks passed/
//! run: ./prog --host-operand => fail /A \(0x[0-9a-f]+\) is not device memory/
//! run: ./prog --device-alpha => fail /alpha or beta is device memory but the pointer mode is HOST/
//! run: ./prog --misaligned => fail /A \(0x[0-9a-f]+\) is not aligned to 16 bytes/
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>
#include "cublaslt_test_util.h"

const int M = 32, N = 16, K = 8;
static cublasLtHandle_t handle;
static float *dev_a, *dev_b, *dev_d, *dev_aux;

struct Problem {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    const void* A = dev_a;
    const void* alpha;
    uint32_t promised_alignment = 0;  // non-zero: use a heuristic's algorithm with this preference
};

// Runs an fp32 D = A B after `change`, and returns cublasLtMatmul's status.
static cublasStatus_t matmul(const std::function<void(Problem&)>& change) {
    static const float one = 1.0f, zero = 0.0f;
    Problem p;
    p.alpha = &one;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_32F, M, K, M));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_32F, K, N, K));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, M, N, M));
    change(p);
    cublasLtMatmulHeuristicResult_t heuristic;
    if (p.promised_alignment != 0) {
        cublasLtMatmulPreference_t pref;
        CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &p.promised_alignment,
            sizeof(p.promised_alignment)));
        int found = 0;
        CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.d, p.d, pref, 1,
                                                    &heuristic, &found));
        CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    }
    cublasStatus_t st =
        cublasLtMatmul(handle, p.desc, p.alpha, p.A, p.a, dev_b, p.b, &zero, dev_d, p.d, dev_d, p.d,
                       p.promised_alignment ? &heuristic.algo : nullptr, nullptr, 0, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    for (cublasLtMatrixLayout_t l : {p.a, p.b, p.d}) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(l));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(p.desc));
    return st;
}

static void set_epilogue(Problem& p, uint32_t e) {
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)));
    int64_t ld = M;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                &dev_aux, sizeof(dev_aux)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                                sizeof(ld)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dev_aux,
                                                sizeof(dev_aux)));
}

int main(int argc, char** argv) {
    const char* mode = argc > 1 ? argv[1] : "";
    CUBLAS_CHECK(cublasLtCreate(&handle));
    for (float** p : {&dev_a, &dev_b, &dev_d, &dev_aux}) {
        CUDA_CHECK(cudaMalloc(p, sizeof(float) * M * N * K));
        CUDA_CHECK(cudaMemset(*p, 0, sizeof(float) * M * N * K));
    }
    if (strcmp(mode, "--host-operand") == 0) {
        static std::vector<float> host_a(M * K, 1.0f);
        cublasStatus_t st = matmul([](Problem& p) { p.A = host_a.data(); });
        printf("cublasLtMatmul with A in host memory returned %s\n", cublasLtGetStatusName(st));
        return EXIT_SUCCESS;  // not reached: the library ends the process
    }
    if (strcmp(mode, "--device-alpha") == 0) {
        cublasStatus_t st = matmul([](Problem& p) { p.alpha = dev_d; });
        printf("cublasLtMatmul with a device alpha returned %s\n", cublasLtGetStatusName(st));
        return EXIT_SUCCESS;  // not reached
    }
    if (strcmp(mode, "--misaligned") == 0) {
        cublasStatus_t st = matmul([](Problem& p) {
            p.A = dev_a + 1;
            p.promised_alignment = 256;
        });
        printf("cublasLtMatmul with a misaligned A returned %s\n", cublasLtGetStatusName(st));
        return EXIT_SUCCESS;  // not reached
    }
    if (mode[0] != '\0') {
        fprintf(stderr, "usage: %s [--host-operand | --device-alpha | --misaligned]\n", argv[0]);
        return EXIT_FAILURE;
    }

    struct Check {
        const char* what;
        cublasStatus_t status;
    };
    std::vector<Check> checks = {
        {"the valid problem", matmul([](Problem&) {})},
        {"A 4 bytes off, 4 bytes promised", matmul([](Problem& p) {
             p.A = dev_a + 1;
             p.promised_alignment = 4;
         })},
        {"RELU_AUX", matmul([](Problem& p) { set_epilogue(p, CUBLASLT_EPILOGUE_RELU_AUX); })},
        {"RELU_AUX_BIAS",
         matmul([](Problem& p) { set_epilogue(p, CUBLASLT_EPILOGUE_RELU_AUX_BIAS); })},
        {"DRELU", matmul([](Problem& p) { set_epilogue(p, CUBLASLT_EPILOGUE_DRELU); })},
        {"DRELU_BGRAD", matmul([](Problem& p) { set_epilogue(p, CUBLASLT_EPILOGUE_DRELU_BGRAD); })},
        {"pointer mode DEVICE_VECTOR", matmul([](Problem& p) {
             int32_t mode = CUBLASLT_POINTER_MODE_DEVICE_VECTOR;
             CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_POINTER_MODE,
                                                         &mode, sizeof(mode)));
         })},
        {"order COL32", matmul([](Problem& p) {
             int32_t order = CUBLASLT_ORDER_COL32;
             CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(p.a, CUBLASLT_MATRIX_LAYOUT_ORDER,
                                                           &order, sizeof(order)));
         })},
        {"pointer-array batch", matmul([](Problem& p) {
             uint32_t mode = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
             for (cublasLtMatrixLayout_t l : {p.a, p.b, p.d})
                 CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE,
                                                               &mode, sizeof(mode)));
         })},
    };
    for (size_t i = 0; i < checks.size(); i++) {
        cublasStatus_t want = i < 2 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
        expect_status(checks[i].status, want, checks[i].what);
    }
    for (float* p : {dev_a, dev_b, dev_d, dev_aux}) CUDA_CHECK(cudaFree(p));
    CUBLAS_CHECK(cublasLtDestroy(handle));
    return test_report("cuBLASLt limit");
}
