// cublaslt_blas.cu: which BLAS the CPU cuBLASLt runs on, and that loading and choosing it is safe
// (dev/cpu/cublaslt/blas.cpp, cucc/blas.h).
//
//   ./prog --want NAME [--passed-over TEXT]
// checks that
//   - cucc_blas_description() names an OpenBLAS and the candidate NAME (scipy-openblas32 or
//     system), and with --passed-over that a candidate was passed over for a reason holding TEXT;
//   - the environment is the one the process started with: OPENBLAS_CORETYPE,
//     OPENBLAS_NUM_THREADS and OPENBLAS_L2_SIZE, read through getenv, are as /proc/self/environ
//     (the environment at exec) has them, though loading changed two of them for a while;
//   - loading started no thread (OpenBLAS's pool stays off while it loads): main has one thread;
//   - an inherited OPENBLAS_CORETYPE is hidden from scipy-openblas32 and applied to the others,
//     as the description says (whichever case the environment gives: tests never set it);
//   - the library computes: cucc_blas_sgemm and cublasLtMatmul (fp32 and bf16) on small
//     integers, exact in any order, against a plain loop.
// The first run asks Python which candidate to want; the fake libraries of the later runs are
// built from cublaslt_blas_fake.c: one computes a wrong dgemm, one crashes in it, and the
// self-check must pass over both for the system OpenBLAS. A list without a usable library ends
// the process at the first BLAS call.
//! cpu-only
//! cucc: -lcublasLt
//! run: ./prog --want $(python3 -c 'import scipy_openblas32' 2>/dev/null && echo scipy-openblas32 || echo system) => pass /all BLAS checks passed/
//! run: CUCC_BLAS=system ./prog --want system => pass /all BLAS checks passed/
//! run: d=$(mktemp -d) && gcc -shared -fPIC -o $d/libwrong.so dev/cpu/tests/cublaslt_blas_fake.c && CUCC_BLAS=$d/libwrong.so:system ./prog --want system --passed-over 'self-check failed: dgemm NN 37x29x53 beta 0: C[0,0] = nan'; s=$?; rm -rf $d; exit $s => pass /cucc: warning: BLAS .*libwrong.so \(.*core Fake\) self-check failed/
//! run: d=$(mktemp -d) && gcc -shared -fPIC -DCRASH -o $d/libcrash.so dev/cpu/tests/cublaslt_blas_fake.c && CUCC_BLAS=$d/libcrash.so:system ./prog --want system --passed-over 'crashed in its self-check (Aborted)'; s=$?; rm -rf $d; exit $s => pass /all BLAS checks passed/
//! run: CUCC_BLAS=/nonexistent/libopenblas.so ./prog --want system => fail /the CPU cuBLAS\(Lt\) has no BLAS to run on: no usable BLAS \(CUCC_BLAS=\/nonexistent\/libopenblas.so\)/
#include <cucc/blas.h>
#include <cuda_bf16.h>
#include <dirent.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>
#include "cublaslt_test_util.h"

// NAME's value in the environment the process was started with, or nullptr.
static const char* exec_environment(const char* name) {
    static std::string environ_text;
    if (environ_text.empty()) {
        std::ifstream in("/proc/self/environ", std::ios::binary);
        environ_text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const std::string prefix = std::string(name) + "=";
    for (size_t at = 0; at < environ_text.size();) {  // entries end with a NUL
        const size_t end = std::min(environ_text.find('\0', at), environ_text.size());
        if (environ_text.compare(at, prefix.size(), prefix) == 0)
            return environ_text.c_str() + at + prefix.size();
        at = end + 1;
    }
    return nullptr;
}

static int process_threads() {
    DIR* dir = opendir("/proc/self/task");
    if (dir == nullptr) return -1;
    int count = 0;
    for (dirent* e; (e = readdir(dir)) != nullptr;)
        if (e->d_name[0] != '.') count++;
    closedir(dir);
    return count;
}

static bool contains(const char* text, const std::string& part) {
    return strstr(text, part.c_str()) != nullptr;
}

// Small integers, so that every product and sum below is exact in fp32 and bf16 inputs.
static float small_int(int i, int seed) { return float((i * 7 + seed * 3) % 9 - 4); }

// D = op(A) op(B) for m x k op(A), k x n op(B) (A stored transposed when ta): cucc_blas_sgemm and
// cublasLtMatmul in fp32 and bf16, each against the plain loop.
static void check_products(int m, int n, int k, bool ta) {
    const int lda = ta ? k : m;
    std::vector<float> a(size_t(m) * k), b(size_t(k) * n), want(size_t(m) * n, 0.0f);
    for (size_t i = 0; i < a.size(); i++) a[i] = small_int(int(i), 1);
    for (size_t i = 0; i < b.size(); i++) b[i] = small_int(int(i), 2);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++)
            for (int kk = 0; kk < k; kk++)
                want[i + j * m] += (ta ? a[kk + i * lda] : a[i + kk * lda]) * b[kk + j * k];

    std::vector<float> c(want.size(), NAN);
    cucc_blas_sgemm(ta, 0, m, n, k, 1.0f, a.data(), lda, b.data(), k, 0.0f, c.data(), m);
    char what[128];
    snprintf(what, sizeof what, "cucc_blas_sgemm %dx%dx%d %cN", m, n, k, ta ? 'T' : 'N');
    expect(c == want, what);

    cublasLtHandle_t handle;
    CUBLAS_CHECK(cublasLtCreate(&handle));
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    for (bool bf16 : {false, true}) {
        const cudaDataType type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
        const size_t elem = bf16 ? 2 : 4;
        std::vector<unsigned char> ha(a.size() * elem), hb(b.size() * elem), hd(want.size() * elem);
        for (int which = 0; which < 2; which++) {
            const std::vector<float>& from = which ? b : a;
            unsigned char* to = which ? hb.data() : ha.data();
            for (size_t i = 0; i < from.size(); i++) {
                __nv_bfloat16 h = __float2bfloat16_rn(from[i]);
                memcpy(to + i * elem, bf16 ? static_cast<const void*>(&h) : &from[i], elem);
            }
        }
        void *da, *db, *dd;
        CUDA_CHECK(cudaMalloc(&da, ha.size()));
        CUDA_CHECK(cudaMalloc(&db, hb.size()));
        CUDA_CHECK(cudaMalloc(&dd, hd.size()));
        CUDA_CHECK(cudaMemcpy(da, ha.data(), ha.size(), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(db, hb.data(), hb.size(), cudaMemcpyHostToDevice));
        cublasLtMatrixLayout_t la, lb, ld;
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, type, ta ? k : m, ta ? m : k, lda));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, type, k, n, k));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, type, m, n, m));
        const float alpha = 1.0f, beta = 0.0f;
        CUBLAS_CHECK(cublasLtMatmul(handle, desc, &alpha, da, la, db, lb, &beta, dd, ld, dd, ld,
                                    nullptr, nullptr, 0, 0));
        CUDA_CHECK(cudaMemcpy(hd.data(), dd, hd.size(), cudaMemcpyDeviceToHost));
        bool equal = true;
        for (size_t i = 0; i < want.size(); i++) {
            float got;
            if (bf16) {
                __nv_bfloat16 h;
                memcpy(&h, &hd[i * 2], 2);
                got = __bfloat162float(h);
            } else {
                memcpy(&got, &hd[i * 4], 4);
            }
            // (the exact sum, rounded once to bf16 when the output is bf16)
            equal &= got == (bf16 ? __bfloat162float(__float2bfloat16_rn(want[i])) : want[i]);
        }
        snprintf(what, sizeof what, "cublasLtMatmul %s %dx%dx%d %cN", bf16 ? "bf16" : "fp32", m, n,
                 k, ta ? 'T' : 'N');
        expect(equal, what);
        for (cublasLtMatrixLayout_t l : {la, lb, ld}) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(l));
        for (void* p : {da, db, dd}) CUDA_CHECK(cudaFree(p));
    }
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    CUBLAS_CHECK(cublasLtDestroy(handle));
}

int main(int argc, char** argv) {
    const int threads_at_main = process_threads();  // before the runtime starts any
    std::string want, passed_over;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--want") == 0) want = argv[i + 1];
        else if (strcmp(argv[i], "--passed-over") == 0) passed_over = argv[i + 1];
    }
    if (want.empty() || argc % 2 != 1) {
        fprintf(stderr, "usage: %s --want NAME [--passed-over TEXT]\n", argv[0]);
        return 2;
    }
    const char* description = cucc_blas_description();
    printf("BLAS: %s\n", description);

    expect(strncmp(description, "OpenBLAS ", 9) == 0 && contains(description, "(" + want + ", "),
           "the description names an OpenBLAS and the wanted candidate", want);
    if (!passed_over.empty())
        expect(contains(description, "; passed over ") && contains(description, passed_over),
               "the description says which candidate was passed over, and why", passed_over);
    for (const char* name : {"OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OPENBLAS_L2_SIZE"}) {
        const char* now = getenv(name);
        const char* at_exec = exec_environment(name);
        const bool same = now && at_exec ? strcmp(now, at_exec) == 0 : now == at_exec;
        std::string what = std::string(name) + " is as the process got it";
        expect(same, what.c_str(), at_exec ? at_exec : "(unset)");
    }
    expect(threads_at_main == 1, "loading the BLAS started no thread",
           std::to_string(threads_at_main) + " thread(s) at main");

    const char* coretype = getenv("OPENBLAS_CORETYPE");
    std::string core_rule;
    if (coretype && want == "scipy-openblas32")
        core_rule = std::string("by its own detection (OPENBLAS_CORETYPE=") + coretype +
                    ", meant for older builds, hidden from it)";
    else if (coretype) core_rule = std::string("from OPENBLAS_CORETYPE=") + coretype;
    else core_rule = "by its own detection, ";
    expect(contains(description, core_rule), "the core is chosen as the environment says",
           core_rule);

    check_products(5, 3, 4, false);
    check_products(37, 29, 53, true);
    return test_report("BLAS");
}
