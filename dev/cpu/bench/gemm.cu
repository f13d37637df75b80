// gemm.cu: times the CPU cuBLASLt's matmuls on given shapes, for scripts/bench_gemm.py (which
// builds it with dev/cpu/cucc, runs it on one core and sets the numbers beside NumPy's and
// PyTorch's). Not a test: it prints times and checks nothing.
//
//   gemm REPEATS M,N,K,OPA,OPB [...]     (OPA, OPB: N or T, as cuBLASLt's transa and transb)
//
// Prints the BLAS under the CPU cuBLASLt, then one line per shape with the best of REPEATS runs
// (after one warm-up) of three ways to compute the column-major D = op(A) op(B), each on the same
// values (random, exact in bf16). Times are CPU time of the process (every thread: the stream's
// work may run on another), which other processes on a shared machine do not inflate:
//   blas  the BLAS's sgemm called directly (cucc_blas_sgemm), fp32;
//   fp32  cublasLtMatmul, fp32 operands and output;
//   bf16  cublasLtMatmul, bf16 operands and output, fp32 compute.
//   shape M N K OPA OPB blas SECONDS fp32 SECONDS bf16 SECONDS
#include <cublasLt.h>
#include <cucc/blas.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <vector>

static void check(bool ok, const char* what) {
    if (!ok) {
        fprintf(stderr, "gemm: %s failed\n", what);
        exit(1);
    }
}
#define CHECK_CUDA(call) check((call) == cudaSuccess, #call)
#define CHECK_CUBLAS(call) check((call) == CUBLAS_STATUS_SUCCESS, #call)

static uint64_t rng_state = 1;
static float uniform() {  // splitmix64, in [-1, 1)
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<float>((z >> 40) * (2.0 / (1ull << 24)) - 1.0);
}

// An operand of `count` elements on the device, in fp32 (out[0]) and bf16 (out[1]), equal values.
static void make_operand(size_t count, void* out[2]) {
    std::vector<float> f(count);
    std::vector<__nv_bfloat16> h(count);
    for (size_t i = 0; i < count; i++) {
        h[i] = __float2bfloat16_rn(uniform());
        f[i] = __bfloat162float(h[i]);
    }
    CHECK_CUDA(cudaMalloc(&out[0], count * 4));
    CHECK_CUDA(cudaMalloc(&out[1], count * 2));
    CHECK_CUDA(cudaMemcpy(out[0], f.data(), count * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(out[1], h.data(), count * 2, cudaMemcpyHostToDevice));
}

static double cpu_seconds() {
    timespec t;
    check(clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) == 0, "clock_gettime");
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double best_seconds(int repeats, const std::function<void()>& f) {
    f();  // warm-up
    double best = INFINITY;
    for (int r = 0; r < repeats; r++) {
        const double t0 = cpu_seconds();
        f();
        best = std::min(best, cpu_seconds() - t0);
    }
    return best;
}

int main(int argc, char** argv) {
    int repeats = argc > 2 ? atoi(argv[1]) : 0;
    if (repeats < 1) {
        fprintf(stderr, "usage: %s REPEATS M,N,K,OPA,OPB [...]\n", argv[0]);
        return 2;
    }
    printf("blas %s\n", cucc_blas_description());
    cublasLtHandle_t handle;
    CHECK_CUBLAS(cublasLtCreate(&handle));
    for (int arg = 2; arg < argc; arg++) {
        int m, n, k;
        char opa, opb;
        if (sscanf(argv[arg], "%d,%d,%d,%c,%c", &m, &n, &k, &opa, &opb) != 5 || m < 1 || n < 1 ||
            k < 1 || (opa != 'N' && opa != 'T') || (opb != 'N' && opb != 'T')) {
            fprintf(stderr, "gemm: bad shape %s (want M,N,K,OPA,OPB)\n", argv[arg]);
            return 2;
        }
        const bool ta = opa == 'T', tb = opb == 'T';
        const int a_rows = ta ? k : m, a_cols = ta ? m : k;
        const int b_rows = tb ? n : k, b_cols = tb ? k : n;
        void *a[2], *b[2], *d[2];
        make_operand(size_t(a_rows) * a_cols, a);
        make_operand(size_t(b_rows) * b_cols, b);
        CHECK_CUDA(cudaMalloc(&d[0], size_t(m) * n * 4));
        CHECK_CUDA(cudaMalloc(&d[1], size_t(m) * n * 2));
        cublasLtMatmulDesc_t desc;
        CHECK_CUBLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        const int32_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        CHECK_CUBLAS(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
        CHECK_CUBLAS(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
        cublasLtMatrixLayout_t la[2], lb[2], ld[2];
        for (int t = 0; t < 2; t++) {
            const cudaDataType type = t ? CUDA_R_16BF : CUDA_R_32F;
            CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&la[t], type, a_rows, a_cols, a_rows));
            CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&lb[t], type, b_rows, b_cols, b_rows));
            CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&ld[t], type, m, n, m));
        }
        const float alpha = 1.0f, beta = 0.0f;
        const auto matmul = [&](int t) {
            CHECK_CUBLAS(cublasLtMatmul(handle, desc, &alpha, a[t], la[t], b[t], lb[t], &beta, d[t],
                                        ld[t], d[t], ld[t], nullptr, nullptr, 0, 0));
            CHECK_CUDA(cudaDeviceSynchronize());
        };
        const double blas = best_seconds(repeats, [&] {
            cucc_blas_sgemm(ta, tb, m, n, k, 1.0f, static_cast<const float*>(a[0]), a_rows,
                            static_cast<const float*>(b[0]), b_rows, 0.0f,
                            static_cast<float*>(d[0]), m);
        });
        const double fp32 = best_seconds(repeats, [&] { matmul(0); });
        const double bf16 = best_seconds(repeats, [&] { matmul(1); });
        printf("shape %d %d %d %c %c blas %.6f fp32 %.6f bf16 %.6f\n", m, n, k, opa, opb, blas,
               fp32, bf16);
        fflush(stdout);
        for (int t = 0; t < 2; t++) {
            for (cublasLtMatrixLayout_t l : {la[t], lb[t], ld[t]})
                CHECK_CUBLAS(cublasLtMatrixLayoutDestroy(l));
            for (void* p : {a[t], b[t], d[t]}) CHECK_CUDA(cudaFree(p));
        }
        CHECK_CUBLAS(cublasLtMatmulDescDestroy(desc));
    }
    CHECK_CUBLAS(cublasLtDestroy(handle));
    return 0;
}
