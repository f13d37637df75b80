// cublaslt_speed.cu: the CPU cuBLASLt is fast enough to train on, and its results do not depend on
// the number of threads.
//
// The shapes are the GPT-2 small MLP matmuls with B*T = 4096 tokens, as the trainer calls them
// (column-major, M x N x K, op flags of A and B):
//   forward   out  = W^T x      M=3072 N=4096 K=768   TN
//   backward  dx   = W dout     M=768  N=4096 K=3072  NN
//   backward  dW   = x dout^T   M=768  N=3072 K=4096  NT
// each in fp32 and with bf16 inputs and output. Default mode: times each after a warm-up, prints
// GFLOP/s (2*M*N*K flops) and fails below 50 GFLOP/s (fp32) or 30 GFLOP/s (bf16). Other
// processes on the core only slow a run down, so the best run counts: runs repeat (up to 10)
// until one reaches the floor. Run it on one core: `taskset -c 0 env CUCC_THREADS=1 ./prog`. It
// also checks 64 sampled elements of each result against a float64 dot product (fp32 accumulation
// bound, see cublaslt_matmul.cu, plus the output's half ulp).
// --checksum: prints a hash of every result's bytes, to compare thread counts.
//! cpu-only
//! cucc: -lcublasLt
//! run: taskset -c 0 env CUCC_THREADS=1 ./prog => pass /all shapes fast enough/
//! run: a=$(CUCC_THREADS=1 ./prog --checksum) && b=$(CUCC_THREADS=2 ./prog --checksum) && echo "$a" && test "$a" = "$b" => pass /checksum/
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "cublaslt_test_util.h"

struct Shape {
    const char* name;
    int m, n, k;
    bool ta, tb;
};
static const Shape kShapes[] = {{"forward  W^T x ", 3072, 4096, 768, true, false},
                                {"backward W dout", 768, 4096, 3072, false, false},
                                {"backward x dout^T", 768, 3072, 4096, false, true}};

static uint64_t rng_state = 12345;
static float uniform() {  // splitmix64, in [-1, 1)
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<float>((z >> 40) * (2.0 / (1ull << 24)) - 1.0);
}

// Host copy of an operand as the device holds it (fp32 or bf16 bits) and its values.
struct Operand {
    std::vector<unsigned char> bytes;
    std::vector<float> values;
};
static Operand make_operand(size_t count, bool bf16) {
    Operand o;
    o.values.resize(count);
    o.bytes.resize(count * (bf16 ? 2 : 4));
    for (size_t i = 0; i < count; i++) {
        float v = uniform();
        if (bf16) {
            __nv_bfloat16 h = __float2bfloat16_rn(v);
            memcpy(&o.bytes[i * 2], &h, 2);
            v = __bfloat162float(h);
        } else {
            memcpy(&o.bytes[i * 4], &v, 4);
        }
        o.values[i] = v;
    }
    return o;
}

struct Result {
    double best_seconds;
    bool correct;
    uint64_t hash;
    int runs;  // timed runs made
};

// Runs the shape once to warm up, then timed until a run reaches `floor_gflops` or `max_runs`
// timed runs are done (max_runs 0: only the warm-up, for --checksum).
static Result run_shape(cublasLtHandle_t handle, const Shape& s, bool bf16, double floor_gflops,
                        int max_runs) {
    const cudaDataType type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const size_t elem = bf16 ? 2 : 4;
    const int a_rows = s.ta ? s.k : s.m, a_cols = s.ta ? s.m : s.k;
    const int b_rows = s.tb ? s.n : s.k, b_cols = s.tb ? s.k : s.n;
    Operand a = make_operand(size_t(a_rows) * a_cols, bf16);
    Operand b = make_operand(size_t(b_rows) * b_cols, bf16);
    const size_t d_count = size_t(s.m) * s.n;
    void *da, *db, *dd;
    CUDA_CHECK(cudaMalloc(&da, a.bytes.size()));
    CUDA_CHECK(cudaMalloc(&db, b.bytes.size()));
    CUDA_CHECK(cudaMalloc(&dd, d_count * elem));
    CUDA_CHECK(cudaMemcpy(da, a.bytes.data(), a.bytes.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(db, b.bytes.data(), b.bytes.size(), cudaMemcpyHostToDevice));

    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t ta = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasLtMatrixLayout_t la, lb, ld;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, type, a_rows, a_cols, a_rows));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, type, b_rows, b_cols, b_rows));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, type, s.m, s.n, s.m));
    const float alpha = 1.0f, beta = 0.0f;

    Result r{INFINITY, true, 0, 0};
    const double flops = 2.0 * s.m * s.n * s.k;
    for (int run = 0; run <= max_runs && flops / r.best_seconds / 1e9 < floor_gflops; run++) {
        auto t0 = std::chrono::steady_clock::now();
        CUBLAS_CHECK(cublasLtMatmul(handle, desc, &alpha, da, la, db, lb, &beta, dd, ld, dd, ld,
                                    nullptr, nullptr, 0, 0));
        CUDA_CHECK(cudaDeviceSynchronize());
        double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (run > 0) {  // run 0 warms up
            r.best_seconds = std::min(r.best_seconds, seconds);
            r.runs = run;
        }
    }

    std::vector<unsigned char> d(d_count * elem);
    CUDA_CHECK(cudaMemcpy(d.data(), dd, d.size(), cudaMemcpyDeviceToHost));
    r.hash = 1469598103934665603ull;  // FNV-1a over the result's bytes
    for (unsigned char byte : d) r.hash = (r.hash ^ byte) * 1099511628211ull;
    for (int sample = 0; sample < 64; sample++) {
        int i = static_cast<int>((uniform() + 1) * 0.5 * s.m) % s.m;
        int j = static_cast<int>((uniform() + 1) * 0.5 * s.n) % s.n;
        double ref = 0, abs_sum = 0;
        for (int kk = 0; kk < s.k; kk++) {
            double x = s.ta ? a.values[kk + size_t(i) * a_rows] : a.values[i + size_t(kk) * a_rows];
            double y = s.tb ? b.values[j + size_t(kk) * b_rows] : b.values[kk + size_t(j) * b_rows];
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
            fprintf(stderr, "%s: D[%d,%d] = %.9g, want %.9g (tol %.3g)\n", s.name, i, j, got, ref,
                    tol);
            r.correct = false;
        }
    }
    for (cublasLtMatrixLayout_t l : {la, lb, ld}) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(l));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    for (void* p : {da, db, dd}) CUDA_CHECK(cudaFree(p));
    return r;
}

int main(int argc, char** argv) {
    bool checksum = argc == 2 && strcmp(argv[1], "--checksum") == 0;
    if (argc > 2 || (argc == 2 && !checksum)) {
        fprintf(stderr, "usage: %s [--checksum]\n", argv[0]);
        return EXIT_FAILURE;
    }
    cublasLtHandle_t handle;
    CUBLAS_CHECK(cublasLtCreate(&handle));
    bool ok = true;
    for (bool bf16 : {false, true}) {
        for (const Shape& s : kShapes) {
            const double floor = bf16 ? 30 : 50;
            Result r = run_shape(handle, s, bf16, floor, checksum ? 0 : 10);
            ok &= r.correct;
            const char* type = bf16 ? "bf16" : "fp32";
            if (checksum) {
                printf("checksum %s %s %dx%dx%d: %016llx\n", type, s.name, s.m, s.n, s.k,
                       static_cast<unsigned long long>(r.hash));
                continue;
            }
            double gflops = 2.0 * s.m * s.n * s.k / r.best_seconds / 1e9;
            bool fast = gflops >= floor;
            ok &= fast;
            printf(
                "%-4s %s %-18s M=%d N=%d K=%d %s%s: %.3f s, %.1f GFLOP/s (floor %.0f, best of "
                "%d)%s\n",
                fast && r.correct ? "ok" : "FAIL", type, s.name, s.m, s.n, s.k, s.ta ? "T" : "N",
                s.tb ? "T" : "N", r.best_seconds, gflops, floor, r.runs,
                r.correct ? "" : ", WRONG RESULT");
        }
    }
    CUBLAS_CHECK(cublasLtDestroy(handle));
    if (!ok) return EXIT_FAILURE;
    if (!checksum) printf("all shapes fast enough and correct\n");
    return EXIT_SUCCESS;
}
