// The legacy cuBLAS API (cublas_v2.h, linked with -lcublas), against float64 loops on the host:
//   - cublasSgemm / Dgemm / Hgemm for every transpose pair and odd sizes with lda > rows;
//     cublasGemmEx and cublasSgemmEx with fp32, bf16 and fp16 inputs (fp32 or same-type
//     outputs, fp32 compute);
//     strided-batched and pointer-array batched forms; alpha and beta in device memory;
//   - the handle: stream, pointer and math modes, workspace, version, status names; a gemm
//     captured into a CUDA graph replays;
//   - Level 1 (axpy, scal, dot, nrm2, asum, amax, amin, copy, swap), gemv, geam, and the
//     Set/Get Vector/Matrix helpers with strides and leading dimensions;
//   - errors as cuBLAS documents them: a bad handle, negative sizes, small leading dimensions,
//     a bad transpose or algorithm, unsupported types, and quick returns for empty problems.
// Tolerances: |got - want| <= k * 2^-22 * sum_k |a_ik b_kj| (fp32 accumulation) plus, for 16-bit
// outputs, one rounding to the output type (2^-8 relative for bf16, 2^-11 for fp16); fp64:
// k * 2^-50 * the same sum.
// The second run uses, on the CPU runtime, the fallback BLAS (Debian's OpenBLAS,
// dev/cpu/cublaslt/blas.cpp) instead of the current one; a GPU ignores CUCC_BLAS.
//! cucc: -lcublas -lcublasLt
//! run: ./prog => pass /all cuBLAS checks passed/
//! run: CUCC_BLAS=system ./prog => pass /all cuBLAS checks passed/
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include "cublaslt_test_util.h"

// Deterministic inputs in [-1, 1), exact in every type used.
static double input(int i, int seed) { return ((i * 37 + seed * 101) % 255 - 127) / 128.0; }

template <class T>
T to(double x);
template <>
float to<float>(double x) {
    return (float)x;
}
template <>
double to<double>(double x) {
    return x;
}
template <>
__nv_bfloat16 to<__nv_bfloat16>(double x) {
    return __float2bfloat16((float)x);
}
template <>
__half to<__half>(double x) {
    return __float2half((float)x);
}
static double from(float x) { return x; }
static double from(double x) { return x; }
static double from(__nv_bfloat16 x) { return __bfloat162float(x); }
static double from(__half x) { return __half2float(x); }

template <class T>
static T* device_copy(const std::vector<T>& h) {
    T* d;
    CUDA_CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
    CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <class T>
static std::vector<T> host_copy(const T* d, size_t n) {
    std::vector<T> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

// One column-major gemm problem, its inputs and its float64 reference.
struct Gemm {
    cublasOperation_t ta, tb;
    int m, n, k, lda, ldb, ldc, batch;
    double alpha, beta;
    long long sa, sb, sc;
};

template <class TA, class TC>
struct Data {
    std::vector<TA> a, b;
    std::vector<TC> c;
    std::vector<double> want, bound;
};

// Fills inputs and computes the reference and the error bound of each element of C.
template <class TA, class TC>
static Data<TA, TC> make(const Gemm& g, double accumulate_eps, double output_eps) {
    Data<TA, TC> d;
    int acols = g.ta == CUBLAS_OP_N ? g.k : g.m, bcols = g.tb == CUBLAS_OP_N ? g.n : g.k;
    d.a.resize(g.sa * (g.batch - 1) + (size_t)g.lda * acols);
    d.b.resize(g.sb * (g.batch - 1) + (size_t)g.ldb * bcols);
    d.c.resize(g.sc * (g.batch - 1) + (size_t)g.ldc * g.n);
    for (size_t i = 0; i < d.a.size(); i++) d.a[i] = to<TA>(input((int)i, 1));
    for (size_t i = 0; i < d.b.size(); i++) d.b[i] = to<TA>(input((int)i, 2));
    for (size_t i = 0; i < d.c.size(); i++) d.c[i] = to<TC>(input((int)i, 3));
    // Elements outside the matrices (padding) must come back unchanged.
    d.want.resize(d.c.size());
    for (size_t i = 0; i < d.c.size(); i++) d.want[i] = from(d.c[i]);
    d.bound.assign(d.c.size(), 0);
    for (int b = 0; b < g.batch; b++)
        for (int j = 0; j < g.n; j++)
            for (int i = 0; i < g.m; i++) {
                double sum = 0, mag = 0;
                for (int p = 0; p < g.k; p++) {
                    double x = from(d.a[b * g.sa + (g.ta == CUBLAS_OP_N ? i + (size_t)p * g.lda
                                                                        : p + (size_t)i * g.lda)]);
                    double y = from(d.b[b * g.sb + (g.tb == CUBLAS_OP_N ? p + (size_t)j * g.ldb
                                                                        : j + (size_t)p * g.ldb)]);
                    sum += x * y;
                    mag += std::fabs(x * y);
                }
                size_t at = b * g.sc + i + (size_t)j * g.ldc;
                double c = from(d.c[at]);
                d.want[at] = g.alpha * sum + g.beta * c;
                d.bound[at] = (g.k + 2) * accumulate_eps *
                                  (std::fabs(g.alpha) * mag + std::fabs(g.beta * c)) +
                              output_eps * std::fabs(d.want[at]);
            }
    return d;
}

template <class TA, class TC>
static int count_wrong(const Gemm& g, const Data<TA, TC>& d, const std::vector<TC>& got) {
    int wrong = 0;
    for (size_t i = 0; i < got.size(); i++)
        if (!(std::fabs(from(got[i]) - d.want[i]) <= d.bound[i])) wrong++;
    (void)g;
    return wrong;
}

const char* op_name(cublasOperation_t op) { return op == CUBLAS_OP_N ? "N" : "T"; }

// Every transpose pair of S, D and H gemm and GemmEx (or SgemmEx: sgemm_ex) on bf16 / fp16 /
// fp32 data.
template <class TA, class TC>
static void gemm_case(cublasHandle_t h, const char* what, cudaDataType_t at, cudaDataType_t ct,
                      cublasComputeType_t compute, double accumulate_eps, double output_eps,
                      bool sgemm_ex = false) {
    cublasOperation_t ops[] = {CUBLAS_OP_N, CUBLAS_OP_T};
    int wrong = 0, cases = 0;
    for (cublasOperation_t ta : ops)
        for (cublasOperation_t tb : ops) {
            Gemm g{ta, tb, 37, 19, 53, 0, 0, 41, 1, 0.75, -0.5, 0, 0, 0};
            g.lda = (ta == CUBLAS_OP_N ? g.m : g.k) + 3;
            g.ldb = (tb == CUBLAS_OP_N ? g.k : g.n) + 1;
            auto d = make<TA, TC>(g, accumulate_eps, output_eps);
            TA *A = device_copy(d.a), *B = device_copy(d.b);
            TC* C = device_copy(d.c);
            cublasStatus_t s;
            if (sgemm_ex) {
                float alpha = (float)g.alpha, beta = (float)g.beta;
                s = cublasSgemmEx(h, ta, tb, g.m, g.n, g.k, &alpha, A, at, g.lda, B, at, g.ldb,
                                  &beta, C, ct, g.ldc);
            } else if (at == CUDA_R_32F && ct == CUDA_R_32F && compute == CUBLAS_COMPUTE_32F) {
                float alpha = (float)g.alpha, beta = (float)g.beta;
                s = cublasSgemm(h, ta, tb, g.m, g.n, g.k, &alpha, (const float*)A, g.lda,
                                (const float*)B, g.ldb, &beta, (float*)C, g.ldc);
            } else if (at == CUDA_R_64F) {
                s = cublasDgemm(h, ta, tb, g.m, g.n, g.k, &g.alpha, (const double*)A, g.lda,
                                (const double*)B, g.ldb, &g.beta, (double*)C, g.ldc);
            } else if (compute == CUBLAS_COMPUTE_16F) {
                __half alpha = __float2half((float)g.alpha), beta = __float2half((float)g.beta);
                s = cublasHgemm(h, ta, tb, g.m, g.n, g.k, &alpha, (const __half*)A, g.lda,
                                (const __half*)B, g.ldb, &beta, (__half*)C, g.ldc);
            } else {
                float alpha = (float)g.alpha, beta = (float)g.beta;
                s = cublasGemmEx(h, ta, tb, g.m, g.n, g.k, &alpha, A, at, g.lda, B, at, g.ldb,
                                 &beta, C, ct, g.ldc, compute, CUBLAS_GEMM_DEFAULT);
            }
            CUBLAS_CHECK(s);
            wrong += count_wrong(g, d, host_copy(C, d.c.size()));
            cases++;
            CUDA_CHECK(cudaFree(A));
            CUDA_CHECK(cudaFree(B));
            CUDA_CHECK(cudaFree(C));
        }
    expect(wrong == 0, what,
           std::to_string(cases) + " transpose pairs, " + std::to_string(wrong) +
               " elements outside the bound");
}

static void batched(cublasHandle_t h) {
    Gemm g{CUBLAS_OP_T, CUBLAS_OP_N, 16, 12, 20, 20, 20, 16, 5, 1.0, 0.0, 0, 0, 0};
    g.sa = 20 * 16 + 7;
    g.sb = 20 * 12 + 3;
    g.sc = 16 * 12 + 5;
    auto d = make<float, float>(g, 0x1p-22, 0);
    float *A = device_copy(d.a), *B = device_copy(d.b), *C = device_copy(d.c);
    float alpha = 1, beta = 0;
    CUBLAS_CHECK(cublasSgemmStridedBatched(h, g.ta, g.tb, g.m, g.n, g.k, &alpha, A, g.lda, g.sa, B,
                                           g.ldb, g.sb, &beta, C, g.ldc, g.sc, g.batch));
    int wrong = count_wrong(g, d, host_copy(C, d.c.size()));
    expect(wrong == 0, "cublasSgemmStridedBatched, 5 matrices with padded strides",
           std::to_string(wrong) + " wrong");

    // Pointer arrays in device memory, and bf16 strided batches through GemmStridedBatchedEx.
    CUDA_CHECK(cudaMemcpy(C, d.c.data(), d.c.size() * sizeof(float), cudaMemcpyHostToDevice));
    std::vector<const float*> pa, pb;
    std::vector<float*> pc;
    for (int b = 0; b < g.batch; b++) {
        pa.push_back(A + b * g.sa);
        pb.push_back(B + b * g.sb);
        pc.push_back(C + b * g.sc);
    }
    const float** dA = device_copy(pa);
    const float** dB = device_copy(pb);
    float** dC = device_copy(pc);
    CUBLAS_CHECK(cublasSgemmBatched(h, g.ta, g.tb, g.m, g.n, g.k, &alpha, dA, g.lda, dB, g.ldb,
                                    &beta, dC, g.ldc, g.batch));
    wrong = count_wrong(g, d, host_copy(C, d.c.size()));
    CUDA_CHECK(cudaMemcpy(C, d.c.data(), d.c.size() * sizeof(float), cudaMemcpyHostToDevice));
    CUBLAS_CHECK(cublasGemmBatchedEx(h, g.ta, g.tb, g.m, g.n, g.k, &alpha, (const void**)dA,
                                     CUDA_R_32F, g.lda, (const void**)dB, CUDA_R_32F, g.ldb, &beta,
                                     (void**)dC, CUDA_R_32F, g.ldc, g.batch, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT_TENSOR_OP));
    wrong += count_wrong(g, d, host_copy(C, d.c.size()));
    expect(wrong == 0, "cublasSgemmBatched and cublasGemmBatchedEx with device pointer arrays",
           std::to_string(wrong) + " wrong");

    auto e = make<__nv_bfloat16, __nv_bfloat16>(g, 0x1p-22, 0x1p-8);
    __nv_bfloat16 *eA = device_copy(e.a), *eB = device_copy(e.b), *eC = device_copy(e.c);
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, g.ta, g.tb, g.m, g.n, g.k, &alpha, eA, CUDA_R_16BF,
                                            g.lda, g.sa, eB, CUDA_R_16BF, g.ldb, g.sb, &beta, eC,
                                            CUDA_R_16BF, g.ldc, g.sc, g.batch, CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT));
    wrong = count_wrong(g, e, host_copy(eC, e.c.size()));
    expect(wrong == 0, "cublasGemmStridedBatchedEx on bf16", std::to_string(wrong) + " wrong");
    for (void* p : {(void*)A, (void*)B, (void*)C, (void*)dA, (void*)dB, (void*)dC, (void*)eA,
                    (void*)eB, (void*)eC})
        CUDA_CHECK(cudaFree(p));
}

static void handle_settings(cublasHandle_t h) {
    cudaStream_t s, got;
    CUDA_CHECK(cudaStreamCreate(&s));
    CUBLAS_CHECK(cublasSetStream(h, s));
    CUBLAS_CHECK(cublasGetStream(h, &got));
    cublasMath_t math;
    CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
    CUBLAS_CHECK(cublasGetMathMode(h, &math));
    int version = 0;
    CUBLAS_CHECK(cublasGetVersion(h, &version));
    void* workspace;
    CUDA_CHECK(cudaMalloc(&workspace, 1 << 20));
    CUBLAS_CHECK(cublasSetWorkspace(h, workspace, 1 << 20));
    expect(got == s && math == CUBLAS_TF32_TENSOR_OP_MATH && version == CUBLAS_VERSION,
           "stream, math mode, workspace and version of a handle");
    expect_status(cublasSetMathMode(h, (cublasMath_t)7), CUBLAS_STATUS_INVALID_VALUE,
                  "math mode 7");
    expect(!strcmp(cublasGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED"),
           "cublasGetStatusName", cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED));

    // alpha and beta in device memory; the result read after the stream finishes.
    Gemm g{CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, 8, 8, 8, 1, 2.0, 1.0, 0, 0, 0};
    auto d = make<float, float>(g, 0x1p-22, 0);
    float *A = device_copy(d.a), *B = device_copy(d.b), *C = device_copy(d.c);
    float* scalars = device_copy(std::vector<float>{2.0f, 1.0f});
    CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    CUBLAS_CHECK(cublasSgemm(h, g.ta, g.tb, g.m, g.n, g.k, scalars, A, 8, B, 8, scalars + 1, C, 8));
    CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    CUDA_CHECK(cudaStreamSynchronize(s));
    int wrong = count_wrong(g, d, host_copy(C, d.c.size()));
    expect(wrong == 0, "alpha and beta in device memory (CUBLAS_POINTER_MODE_DEVICE)",
           std::to_string(wrong) + " wrong");

    // A gemm captured into a graph runs at each launch, not at capture.
    CUDA_CHECK(cudaMemcpy(C, d.c.data(), d.c.size() * sizeof(float), cudaMemcpyHostToDevice));
    float alpha = 2, beta = 1;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CUBLAS_CHECK(cublasSgemm(h, g.ta, g.tb, g.m, g.n, g.k, &alpha, A, 8, B, 8, &beta, C, 8));
    CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    std::vector<float> before = host_copy(C, d.c.size());
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphLaunch(exec, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    wrong = count_wrong(g, d, host_copy(C, d.c.size()));
    expect(before == d.c && wrong == 0, "a gemm captured into a graph runs at its launch",
           std::to_string(wrong) + " wrong");
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUBLAS_CHECK(cublasSetStream(h, 0));
    for (void* p : {(void*)A, (void*)B, (void*)C, (void*)scalars, workspace})
        CUDA_CHECK(cudaFree(p));
    CUDA_CHECK(cudaStreamDestroy(s));
}

static void level1_and_2(cublasHandle_t h) {
    const int n = 100;
    std::vector<float> x(2 * n), y(3 * n);
    for (int i = 0; i < 2 * n; i++) x[i] = (float)input(i, 4);
    for (int i = 0; i < 3 * n; i++) y[i] = (float)input(i, 5);
    x[2 * 57] = 3.5f;  // the largest |x| at stride 2: element 57 (1-based 58)
    x[2 * 11] = 0.0f;  // a smallest one
    float *dx = device_copy(x), *dy = device_copy(y);
    float dot = 0, nrm = 0, asum = 0;
    int amax = 0, amin = 0;
    CUBLAS_CHECK(cublasSdot(h, n, dx, 2, dy, 3, &dot));
    CUBLAS_CHECK(cublasSnrm2(h, n, dx, 2, &nrm));
    CUBLAS_CHECK(cublasSasum(h, n, dx, 2, &asum));
    CUBLAS_CHECK(cublasIsamax(h, n, dx, 2, &amax));
    CUBLAS_CHECK(cublasIsamin(h, n, dx, 2, &amin));
    double wdot = 0, wnrm = 0, wasum = 0;
    for (int i = 0; i < n; i++) {
        wdot += (double)x[2 * i] * y[3 * i];
        wnrm += (double)x[2 * i] * x[2 * i];
        wasum += std::fabs(x[2 * i]);
    }
    wnrm = std::sqrt(wnrm);
    expect(std::fabs(dot - wdot) < 1e-4 && std::fabs(nrm - wnrm) < 1e-4 &&
               std::fabs(asum - wasum) < 1e-4 && amax == 58 && amin == 12,
           "dot, nrm2, asum, amax and amin (1-based) with strides 2 and 3");

    float alpha = -1.5f;
    CUBLAS_CHECK(cublasSaxpy(h, n, &alpha, dx, 2, dy, 3));
    CUBLAS_CHECK(cublasSscal(h, n, &alpha, dx, 2));
    std::vector<float> gx = host_copy(dx, x.size()), gy = host_copy(dy, y.size());
    int wrong = 0;
    for (int i = 0; i < n; i++) {
        wrong += gy[3 * i] != y[3 * i] + alpha * x[2 * i];
        wrong += gx[2 * i] != alpha * x[2 * i];
        wrong += gx[2 * i + 1] != x[2 * i + 1];
    }
    float* dz;
    CUDA_CHECK(cudaMalloc(&dz, n * sizeof(float)));
    CUBLAS_CHECK(cublasScopy(h, n, dx, 2, dz, 1));
    CUBLAS_CHECK(cublasSswap(h, n, dz, 1, dy, 3));
    std::vector<float> gz = host_copy(dz, n), gy2 = host_copy(dy, y.size());
    for (int i = 0; i < n; i++) wrong += gz[i] != gy[3 * i] || gy2[3 * i] != gx[2 * i];
    expect(wrong == 0, "axpy, scal, copy, swap with strides", std::to_string(wrong) + " wrong");

    // A device result in device pointer mode.
    float* dres;
    CUDA_CHECK(cudaMalloc(&dres, sizeof(float)));
    CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    CUBLAS_CHECK(cublasSasum(h, n, dz, 1, dres));
    CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    float got_res = 0, want_res = 0;
    CUDA_CHECK(cudaMemcpy(&got_res, dres, sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) want_res += std::fabs(gz[i]);
    expect(std::fabs(got_res - want_res) < 1e-3, "asum into device memory");

    // gemv both ways on a 30 x 20 matrix with lda 33.
    const int m = 30, k = 20, lda = 33;
    std::vector<double> A(lda * k), v(30), w(30);
    std::vector<double> A64(lda * k);
    for (int i = 0; i < lda * k; i++) A64[i] = input(i, 6);
    for (int i = 0; i < 30; i++) v[i] = input(i, 7), w[i] = input(i, 8);
    double *dA = device_copy(A64), *dv = device_copy(v), *dw = device_copy(w);
    double a = 0.5, b = 2.0;
    CUBLAS_CHECK(cublasDgemv(h, CUBLAS_OP_N, m, k, &a, dA, lda, dv, 1, &b, dw, 1));
    std::vector<double> got = host_copy(dw, 30);
    double err = 0;
    for (int i = 0; i < m; i++) {
        double s = 0;
        for (int j = 0; j < k; j++) s += A64[i + j * lda] * v[j];
        err = std::fmax(err, std::fabs(got[i] - (a * s + b * w[i])));
    }
    CUDA_CHECK(cudaMemcpy(dw, w.data(), 30 * sizeof(double), cudaMemcpyHostToDevice));
    CUBLAS_CHECK(cublasDgemv(h, CUBLAS_OP_T, m, k, &a, dA, lda, dv, 1, &b, dw, 1));
    got = host_copy(dw, 30);
    for (int j = 0; j < k; j++) {
        double s = 0;
        for (int i = 0; i < m; i++) s += A64[i + j * lda] * v[i];
        err = std::fmax(err, std::fabs(got[j] - (a * s + b * w[j])));
    }
    expect(err < 1e-12, "cublasDgemv, both ways", std::to_string(err));

    // geam as a transpose: C (20 x 30) = A^T.
    double one = 1, zero = 0;
    double* dC;
    CUDA_CHECK(cudaMalloc(&dC, k * m * sizeof(double)));
    CUBLAS_CHECK(
        cublasDgeam(h, CUBLAS_OP_T, CUBLAS_OP_N, k, m, &one, dA, lda, &zero, dC, k, dC, k));
    std::vector<double> C = host_copy(dC, k * m);
    wrong = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < k; j++) wrong += C[j + i * k] != A64[i + j * lda];
    expect(wrong == 0, "cublasDgeam transposes", std::to_string(wrong) + " wrong");

    // Set/GetMatrix with leading dimensions, Set/GetVector with strides.
    std::vector<float> hm(7 * 5), back(9 * 5, -1);
    for (int i = 0; i < 7 * 5; i++) hm[i] = (float)i;
    float* dm;
    CUDA_CHECK(cudaMalloc(&dm, 8 * 5 * sizeof(float)));
    CUBLAS_CHECK(cublasSetMatrix(6, 5, sizeof(float), hm.data(), 7, dm, 8));
    CUBLAS_CHECK(cublasGetMatrix(6, 5, sizeof(float), dm, 8, back.data(), 9));
    wrong = 0;
    for (int j = 0; j < 5; j++)
        for (int i = 0; i < 6; i++) wrong += back[i + j * 9] != hm[i + j * 7];
    std::vector<float> vec(10, 0);
    CUBLAS_CHECK(cublasSetVector(5, sizeof(float), hm.data(), 7, dm, 2));
    CUBLAS_CHECK(cublasGetVector(5, sizeof(float), dm, 2, vec.data(), 2));
    for (int i = 0; i < 5; i++) wrong += vec[2 * i] != hm[7 * i];
    expect(wrong == 0, "Set/GetMatrix and Set/GetVector with leading dimensions and strides",
           std::to_string(wrong) + " wrong");
    expect_status(cublasSetMatrix(6, 5, 4, hm.data(), 5, dm, 8), CUBLAS_STATUS_INVALID_VALUE,
                  "cublasSetMatrix with lda < rows");
    expect_status(cublasSetVector(5, 4, hm.data(), 0, dm, 1), CUBLAS_STATUS_INVALID_VALUE,
                  "cublasSetVector with incx 0");
    std::vector<float> not_device(40);
    expect_status(cublasSetMatrix(6, 5, 4, hm.data(), 7, not_device.data(), 8),
                  CUBLAS_STATUS_MAPPING_ERROR, "cublasSetMatrix into host memory");
    for (void* p : {(void*)dx, (void*)dy, (void*)dz, (void*)dres, (void*)dA, (void*)dv, (void*)dw,
                    (void*)dC, (void*)dm})
        CUDA_CHECK(cudaFree(p));
}

static void errors(cublasHandle_t h) {
    float *A, alpha = 1, beta = 0;
    CUDA_CHECK(cudaMalloc(&A, 64 * 64 * sizeof(float)));
    expect_status(
        cublasSgemm(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &alpha, A, 4, A, 4, &beta, A, 4),
        CUBLAS_STATUS_NOT_INITIALIZED, "a null handle");
    expect_status(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 4, 4, &alpha, A, 4, A, 4, &beta, A, 4),
        CUBLAS_STATUS_INVALID_VALUE, "m < 0");
    expect_status(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 4, 4, &alpha, A, 4, A, 4, &beta, A, 8),
        CUBLAS_STATUS_INVALID_VALUE, "lda < m with op N");
    expect_status(
        cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, 8, 4, 6, &alpha, A, 5, A, 6, &beta, A, 8),
        CUBLAS_STATUS_INVALID_VALUE, "lda < k with op T");
    expect_status(
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &alpha, A, 4, A, 4, &beta, A, 3),
        CUBLAS_STATUS_INVALID_VALUE, "ldc < m");
    expect_status(
        cublasSgemm(h, (cublasOperation_t)5, CUBLAS_OP_N, 4, 4, 4, &alpha, A, 4, A, 4, &beta, A, 4),
        CUBLAS_STATUS_INVALID_VALUE, "transpose 5");
    expect_status(
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &alpha, A, CUDA_R_32F, 4, A, CUDA_R_32F,
                     4, &beta, A, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, (cublasGemmAlgo_t)57),
        CUBLAS_STATUS_INVALID_VALUE, "algorithm 57");
    expect_status(
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &alpha, A, CUDA_R_16F, 4, A, CUDA_R_16BF,
                     4, &beta, A, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        CUBLAS_STATUS_NOT_SUPPORTED, "fp16 A with bf16 B");
    expect_status(
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &alpha, A, CUDA_R_8I, 4, A, CUDA_R_8I, 4,
                     &beta, A, CUDA_R_32I, 4, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT),
        CUBLAS_STATUS_NOT_SUPPORTED, "int8 inputs with int32 compute");
    expect_status(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 16, 16, 16, &alpha, A, CUDA_R_8F_E4M3,
                               16, A, CUDA_R_8F_E4M3, 16, &beta, A, CUDA_R_16BF, 16,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  CUBLAS_STATUS_NOT_SUPPORTED, "FP8 inputs (cuBLASLt only) [expected]");
    expect_status(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &alpha, A, 4, 16,
                                            A, 4, 16, &beta, A, 4, 16, -1),
                  CUBLAS_STATUS_INVALID_VALUE, "batchCount < 0");
    // Empty problems return at once, whatever the pointers.
    expect_status(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 0, 4, 4, &alpha, nullptr, 1, nullptr, 4,
                              &beta, nullptr, 1),
                  CUBLAS_STATUS_SUCCESS, "m == 0");
    expect_status(cublasSdot(h, 0, nullptr, 1, nullptr, 1, &alpha), CUBLAS_STATUS_SUCCESS,
                  "a dot product of 0 elements");
    cublasHandle_t gone;
    CUBLAS_CHECK(cublasCreate(&gone));
    CUBLAS_CHECK(cublasDestroy(gone));
    expect_status(cublasDestroy(nullptr), CUBLAS_STATUS_NOT_INITIALIZED, "destroying null");
    CUDA_CHECK(cudaFree(A));
}

int main() {
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    gemm_case<float, float>(h, "cublasSgemm", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 0x1p-22,
                            0);
    gemm_case<double, double>(h, "cublasDgemm", CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F, 0x1p-50,
                              0);
    gemm_case<__half, __half>(h, "cublasHgemm (fp32 accumulation, fp16 output)", CUDA_R_16F,
                              CUDA_R_16F, CUBLAS_COMPUTE_16F, 0x1p-22, 0x1p-11);
    gemm_case<__nv_bfloat16, __nv_bfloat16>(h, "cublasGemmEx bf16 -> bf16", CUDA_R_16BF,
                                            CUDA_R_16BF, CUBLAS_COMPUTE_32F, 0x1p-22, 0x1p-8);
    gemm_case<__nv_bfloat16, float>(h, "cublasGemmEx bf16 -> fp32", CUDA_R_16BF, CUDA_R_32F,
                                    CUBLAS_COMPUTE_32F, 0x1p-22, 0);
    gemm_case<__half, float>(h, "cublasGemmEx fp16 -> fp32", CUDA_R_16F, CUDA_R_32F,
                             CUBLAS_COMPUTE_32F, 0x1p-22, 0);
    gemm_case<float, float>(h, "cublasGemmEx fp32 with CUBLAS_COMPUTE_32F_FAST_TF32", CUDA_R_32F,
                            CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 0x1p-22, 0);
    gemm_case<__half, float>(h, "cublasSgemmEx fp16 -> fp32", CUDA_R_16F, CUDA_R_32F,
                             CUBLAS_COMPUTE_32F, 0x1p-22, 0, true);
    gemm_case<__nv_bfloat16, __nv_bfloat16>(h, "cublasSgemmEx bf16 -> bf16", CUDA_R_16BF,
                                            CUDA_R_16BF, CUBLAS_COMPUTE_32F, 0x1p-22, 0x1p-8, true);
    batched(h);
    handle_settings(h);
    level1_and_2(h);
    errors(h);
    CUBLAS_CHECK(cublasDestroy(h));
    return test_report("cuBLAS");
}
