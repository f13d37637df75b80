// cublaslt_speed.cu: the CPU cuBLASLt runs the trainer's matmuls at the speed of the BLAS under
// it, bf16 ones nearly as fast as fp32 ones, and its results do not depend on the number of
// threads.
//
// The shapes are the GPT-2 small MLP matmuls with B*T = 2048 tokens, as the trainer calls them
// (column-major, M x N x K, op flags of A and B):
//   forward   out  = W^T x      M=3072 N=2048 K=768   TN
//   backward  dx   = W dout     M=768  N=2048 K=3072  NN
//   backward  dW   = x dout^T   M=768  N=3072 K=2048  NT
// No bound is a time or a throughput: machines differ several times over (these matmuls ran 8x
// slower on a processor whose kernels the BLAS of the time did not know). Each bound is a ratio of
// two times taken in the same run, on the same core, with the same operands:
//   blas  the BLAS under the CPU cuBLASLt called directly (cucc_blas_sgemm), fp32, one call;
//   fp32  cublasLtMatmul on the same fp32 operands;
//   bf16  cublasLtMatmul on the same values in bf16, bf16 output.
// fp32 / blas <= kFp32OverBlas (1.25). On fp32 data the CPU cuBLASLt adds one cost to the BLAS's:
//   its fixed chunks of output columns (512 here; one sgemm each, so that results do not depend
//   on the thread count), each of which packs all of op(A) again: m k copies per 1024 m k flops.
//   Copies and flops both scale with the machine, so the share moves little between a slow and a
//   fast one: 3% to 7% of the time on this AVX2 core, at most twice that where an AVX-512 sgemm
//   outpaces its copies.
//   Seen here: 0.90 to 1.10 (2 cores shared with builds).
// bf16 / fp32 <= kBf16OverFp32 (1.5). bf16 adds the widening of A and B and the rounding of D:
//   m k + k n + m n element operations against 2 m n k flops, at most 1/512 as many for m, n,
//   k >= 768, in vectorized loops, D's rounding on each chunk right after its sgemm (while the
//   chunk is in the cache). A core with twice the flops does them faster too, though maybe not
//   twice as fast: their share at most doubles there. Seen here: 0.95 to 1.05 (1.00 to 1.15, and
//   1.32 once under load, before those loops were vectorized and moved into the chunks).
// Times are the CPU time of the process, which other processes on the core do not count in (as
// they do in wall time), and the best of several runs counts, as the rest of a busy machine (its
// caches, the other hyperthread) only slows a run down: rounds of the three (interleaved, so
// that a busy stretch hits all three) repeat, at least kMinRounds and at most kMaxRounds, until
// every ratio of the best times is within its bound. Run it on one core:
// `taskset -c 0 env CUCC_THREADS=1 ./prog`. It also checks 64 sampled elements of each result
// against a float64 dot product (fp32 accumulation bound, see cublaslt_matmul.cu, plus the
// output's half ulp).
// --checksum: prints a hash of every result's bytes, to compare thread counts.
//! cpu-only
//! exclusive
//! cucc: -lcublasLt
//! run: taskset -c 0 env CUCC_THREADS=1 ./prog => pass /all speed ratios within their bounds/
//! run: a=$(CUCC_THREADS=1 ./prog --checksum) && b=$(CUCC_THREADS=2 ./prog --checksum) && echo "$a" && test "$a" = "$b" => pass /checksum/
#include <cucc/blas.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <vector>
#include "cublaslt_test_util.h"

constexpr double kFp32OverBlas = 1.25;
constexpr double kBf16OverFp32 = 1.5;
constexpr int kMinRounds = 3, kMaxRounds = 12;

struct Shape {
    const char* name;
    int m, n, k;
    bool ta, tb;
};
static const Shape kShapes[] = {{"forward  W^T x", 3072, 2048, 768, true, false},
                                {"backward W dout", 768, 2048, 3072, false, false},
                                {"backward x dout^T", 768, 3072, 2048, false, true}};

// One operand on the device in fp32 and in bf16, and the bf16 values on the host (the fp32
// operand holds the same values, so the direct sgemm, the fp32 and the bf16 matmul multiply the
// same matrices).
struct Operand {
    std::vector<float> values;
    void* fp32;
    void* bf16;
};
static Operand make_operand(size_t count) {
    Operand o;
    std::vector<__nv_bfloat16> bf16(count);
    o.values.resize(count);
    for (size_t i = 0; i < count; i++) {
        bf16[i] = __float2bfloat16_rn(uniform(-1.0f, 1.0f));
        o.values[i] = __bfloat162float(bf16[i]);
    }
    CUDA_CHECK(cudaMalloc(&o.fp32, count * 4));
    CUDA_CHECK(cudaMalloc(&o.bf16, count * 2));
    CUDA_CHECK(cudaMemcpy(o.fp32, o.values.data(), count * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(o.bf16, bf16.data(), count * 2, cudaMemcpyHostToDevice));
    return o;
}
static void free_operand(Operand& o) {
    CUDA_CHECK(cudaFree(o.fp32));
    CUDA_CHECK(cudaFree(o.bf16));
}

// A shape's operands, outputs and cuBLASLt descriptors.
struct Problem {
    Shape s;
    Operand a, b;
    void* d32;
    void* d16;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la[2], lb[2], ld[2];  // [0] fp32, [1] bf16
};

static Problem make_problem(const Shape& s) {
    Problem p;
    p.s = s;
    const int a_rows = s.ta ? s.k : s.m, a_cols = s.ta ? s.m : s.k;
    const int b_rows = s.tb ? s.n : s.k, b_cols = s.tb ? s.k : s.n;
    p.a = make_operand(size_t(a_rows) * a_cols);
    p.b = make_operand(size_t(b_rows) * b_cols);
    CUDA_CHECK(cudaMalloc(&p.d32, size_t(s.m) * s.n * 4));
    CUDA_CHECK(cudaMalloc(&p.d16, size_t(s.m) * s.n * 2));
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t ta = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    for (int t = 0; t < 2; t++) {
        const cudaDataType type = t ? CUDA_R_16BF : CUDA_R_32F;
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.la[t], type, a_rows, a_cols, a_rows));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.lb[t], type, b_rows, b_cols, b_rows));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.ld[t], type, s.m, s.n, s.m));
    }
    return p;
}

static void free_problem(Problem& p) {
    for (int t = 0; t < 2; t++)
        for (cublasLtMatrixLayout_t l : {p.la[t], p.lb[t], p.ld[t]})
            CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(l));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(p.desc));
    free_operand(p.a);
    free_operand(p.b);
    CUDA_CHECK(cudaFree(p.d32));
    CUDA_CHECK(cudaFree(p.d16));
}

// D = op(A) op(B) by cublasLtMatmul, fp32 (bf16 = false) or bf16 operands and output.
static void run_matmul(cublasLtHandle_t handle, const Problem& p, bool bf16) {
    const float alpha = 1.0f, beta = 0.0f;
    const int t = bf16;
    void* d = bf16 ? p.d16 : p.d32;
    CUBLAS_CHECK(cublasLtMatmul(handle, p.desc, &alpha, bf16 ? p.a.bf16 : p.a.fp32, p.la[t],
                                bf16 ? p.b.bf16 : p.b.fp32, p.lb[t], &beta, d, p.ld[t], d, p.ld[t],
                                nullptr, nullptr, 0, 0));
    CUDA_CHECK(cudaDeviceSynchronize());
}

// The same product in fp32 by the BLAS called directly (into the fp32 output).
static void run_blas(const Problem& p) {
    const Shape& s = p.s;
    cucc_blas_sgemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, static_cast<const float*>(p.a.fp32),
                    s.ta ? s.k : s.m, static_cast<const float*>(p.b.fp32), s.tb ? s.n : s.k, 0.0f,
                    static_cast<float*>(p.d32), s.m);
}

// CPU time of the whole process (every thread: the stream's work may run on another one) that
// f takes. Other processes on the core do not count in it, as they do in wall time.
static double seconds_of(const std::function<void()>& f) {
    const auto now = [] {
        timespec t;
        if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) != 0) {
            perror("clock_gettime");
            exit(1);
        }
        return t.tv_sec + t.tv_nsec * 1e-9;
    };
    const double t0 = now();
    f();
    return now() - t0;
}

// Checks 64 sampled elements of D (fp32 or bf16) against a float64 dot product; prints the
// differences out of bounds.
static bool result_correct(const Problem& p, bool bf16) {
    const Shape& s = p.s;
    const int a_rows = s.ta ? s.k : s.m, b_rows = s.tb ? s.n : s.k;
    const size_t elem = bf16 ? 2 : 4;
    std::vector<unsigned char> d(size_t(s.m) * s.n * elem);
    CUDA_CHECK(cudaMemcpy(d.data(), bf16 ? p.d16 : p.d32, d.size(), cudaMemcpyDeviceToHost));
    bool ok = true;
    for (int sample = 0; sample < 64; sample++) {
        int i = static_cast<int>((uniform(-1.0f, 1.0f) + 1) * 0.5 * s.m) % s.m;
        int j = static_cast<int>((uniform(-1.0f, 1.0f) + 1) * 0.5 * s.n) % s.n;
        double ref = 0, abs_sum = 0;
        for (int kk = 0; kk < s.k; kk++) {
            double x =
                s.ta ? p.a.values[kk + size_t(i) * a_rows] : p.a.values[i + size_t(kk) * a_rows];
            double y =
                s.tb ? p.b.values[j + size_t(kk) * b_rows] : p.b.values[kk + size_t(j) * b_rows];
            ref += x * y;
            abs_sum += fabs(x * y);
        }
        double got;
        if (bf16) {
            __nv_bfloat16 h;
            memcpy(&h, &d[(i + size_t(j) * s.m) * 2], 2);
            got = __bfloat162float(h);
        } else {
            float f;
            memcpy(&f, &d[(i + size_t(j) * s.m) * 4], 4);
            got = f;
        }
        double u_out = bf16 ? 1.0 / 256 : 1.0 / (1 << 24);
        double tol = (s.k + 8) * 2.0 / (1 << 24) * abs_sum + (u_out + 16.0 / (1 << 24)) * fabs(ref);
        if (!(fabs(got - ref) <= tol)) {
            fprintf(stderr, "%s %s: D[%d,%d] = %.9g, want %.9g (tol %.3g)\n", s.name,
                    bf16 ? "bf16" : "fp32", i, j, got, ref, tol);
            ok = false;
        }
    }
    return ok;
}

// FNV-1a over the bytes of D.
static uint64_t result_hash(const Problem& p, bool bf16) {
    std::vector<unsigned char> d(size_t(p.s.m) * p.s.n * (bf16 ? 2 : 4));
    CUDA_CHECK(cudaMemcpy(d.data(), bf16 ? p.d16 : p.d32, d.size(), cudaMemcpyDeviceToHost));
    uint64_t hash = 1469598103934665603ull;
    for (unsigned char byte : d) hash = (hash ^ byte) * 1099511628211ull;
    return hash;
}

int main(int argc, char** argv) {
    bool checksum = argc == 2 && strcmp(argv[1], "--checksum") == 0;
    if (argc > 2 || (argc == 2 && !checksum)) {
        fprintf(stderr, "usage: %s [--checksum]\n", argv[0]);
        return EXIT_FAILURE;
    }
    cublasLtHandle_t handle;
    CUBLAS_CHECK(cublasLtCreate(&handle));
    if (!checksum) printf("BLAS: %s\n", cucc_blas_description());
    bool ok = true;
    for (const Shape& s : kShapes) {
        Problem p = make_problem(s);
        if (checksum) {
            for (bool bf16 : {false, true}) {
                run_matmul(handle, p, bf16);
                printf("checksum %s %s %dx%dx%d: %016llx\n", bf16 ? "bf16" : "fp32", s.name, s.m,
                       s.n, s.k, static_cast<unsigned long long>(result_hash(p, bf16)));
            }
            free_problem(p);
            continue;
        }
        // Warm-up (first touches of the outputs and of OpenBLAS's buffers), and the results.
        run_blas(p);
        run_matmul(handle, p, false);
        const bool correct32 = result_correct(p, false);
        run_matmul(handle, p, true);
        const bool correct16 = result_correct(p, true);
        double blas = INFINITY, fp32 = INFINITY, bf16 = INFINITY;
        int rounds = 0;
        while (rounds < kMaxRounds && (rounds < kMinRounds || fp32 > kFp32OverBlas * blas ||
                                       bf16 > kBf16OverFp32 * fp32)) {
            blas = std::min(blas, seconds_of([&] { run_blas(p); }));
            fp32 = std::min(fp32, seconds_of([&] { run_matmul(handle, p, false); }));
            bf16 = std::min(bf16, seconds_of([&] { run_matmul(handle, p, true); }));
            rounds++;
        }
        const bool fast = fp32 <= kFp32OverBlas * blas && bf16 <= kBf16OverFp32 * fp32;
        ok &= fast && correct32 && correct16;
        const double gflop = 2.0 * s.m * s.n * s.k / 1e9;
        printf(
            "%-4s %-17s M=%d N=%d K=%d %s%s: fp32/blas %.3f (bound %.2f), bf16/fp32 %.3f (bound "
            "%.2f); blas %.1f, fp32 %.1f, bf16 %.1f GFLOP/s (best of %d)%s%s\n",
            fast && correct32 && correct16 ? "ok" : "FAIL", s.name, s.m, s.n, s.k, s.ta ? "T" : "N",
            s.tb ? "T" : "N", fp32 / blas, kFp32OverBlas, bf16 / fp32, kBf16OverFp32, gflop / blas,
            gflop / fp32, gflop / bf16, rounds, correct32 ? "" : ", WRONG fp32 RESULT",
            correct16 ? "" : ", WRONG bf16 RESULT");
        free_problem(p);
    }
    CUBLAS_CHECK(cublasLtDestroy(handle));
    if (!ok) return EXIT_FAILURE;
    if (!checksum) printf("all speed ratios within their bounds, results correct\n");
    return EXIT_SUCCESS;
}
