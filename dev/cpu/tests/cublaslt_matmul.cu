// cublaslt_matmul.cu: cublasLtMatmul against a float64 matmul computed here on the host.
//
// Part "layouts": fp32, bf16 and fp16 inputs with every output type cuBLASLt pairs them with, all
// four transpose pairs, sizes 1x1x1, 7x13x5, 129x65x33 (M x N x K), leading dimensions larger than
// the rows, ROW order, strided batches (one with A repeated through stride 0), alpha/beta with C
// distinct from D (C with its own ld), in place (C == D), scalars in device memory, and problems
// large enough (> 2^24 flops) for the library to split them between threads.
// Part "epilogues": every epilogue the trainer may use, with bias, aux and their batch strides.
// Part "stream": work is ordered on its stream, and device scalars are read when the work runs.
// "layouts" runs again with CUCC_BLAS=system: on the CPU runtime, the fallback BLAS (Debian's
// OpenBLAS, dev/cpu/cublaslt/blas.cpp) instead of the current one; a GPU ignores the variable.
//
// Inputs hold values exactly representable in their type, so the float64 reference sees what the
// library sees. Every byte outside the matrices (ld padding, batch gaps, bias tails) is poisoned
// with NaN: reading it makes a NaN result, writing it is detected afterwards.
//
// Tolerance for each element, from the operand types (u32 = 2^-24, the fp32 unit roundoff):
//   pre  = (K + 8) * 2 u32 * S,  S = |alpha| sum_k |a_ik b_kj| + |beta c_ij| + |bias_i|
//          (fp32 accumulation of K products, then the scalings and additions)
//   tol  = L * pre + 16 u32 * |ref| + u_out * |ref|
//          L: the activation's Lipschitz bound (1; 1.13 for GELU; for the GELU gradient, the
//          bound of gelu' times the error of the fp32 gelu'), u_out: half an ulp of the output
//          type relative to the value (2^-24 fp32, 2^-8 bf16, 2^-11 fp16).
// Bias gradients add the fp32 summation bound over their reduced dimension in the same way.
//! cucc: -lcublasLt
//! run: ./prog --part layouts => pass /layouts: \d+ cases passed/
//! run: ./prog --part epilogues => pass /epilogues: \d+ cases passed/
//! run: ./prog --part stream => pass /stream: \d+ cases passed/
//! run: CUCC_BLAS=system ./prog --part layouts => pass /layouts: \d+ cases passed/
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include "cublaslt_test_util.h"

static bool is_poison(cudaDataType t, const std::vector<unsigned char>& mem, int64_t i) {
    return std::isnan(get(t, mem, i));
}

// ---------------------------------------------------------------------------------------------
// A matrix (or a batch of them) in host memory and on the device, with its cuBLASLt layout.
struct Matrix {
    cudaDataType type;
    int rows, cols;
    int64_t ld;
    cublasLtOrder_t order;
    int batch;
    int64_t stride;  // batch stride in elements
    std::vector<unsigned char> host;
    void* dev = nullptr;

    int64_t index(int b, int i, int j) const {
        return b * stride + (order == CUBLASLT_ORDER_COL ? i + j * ld : i * ld + j);
    }
    double at(int b, int i, int j) const { return get(type, host, index(b, i, j)); }
    int64_t elements() const {
        int64_t last = rows && cols ? index(batch - 1, rows - 1, cols - 1) + 1 : 0;
        return last + 3;  // a poisoned tail after the last element
    }
};

// Poisons everything, then fills the matrix elements with random values of the type (unless
// fill is false: outputs stay poisoned until written).
static Matrix make_matrix(cudaDataType type, int rows, int cols, int64_t ld, cublasLtOrder_t order,
                          int batch, int64_t stride, bool fill) {
    Matrix m{type, rows, cols, ld, order, batch, stride, {}, nullptr};
    m.host.resize(m.elements() * type_size(type));
    for (int64_t i = 0; i < m.elements(); i++) put(type, m.host, i, NAN);
    if (fill)
        for (int b = 0; b < batch; b++)
            for (int i = 0; i < rows; i++)
                for (int j = 0; j < cols; j++) put(type, m.host, m.index(b, i, j), uniform(-1, 1));
    CUDA_CHECK(cudaMalloc(&m.dev, m.host.size()));
    CUDA_CHECK(cudaMemcpy(m.dev, m.host.data(), m.host.size(), cudaMemcpyHostToDevice));
    return m;
}

static void download(Matrix& m) {
    CUDA_CHECK(cudaMemcpy(m.host.data(), m.dev, m.host.size(), cudaMemcpyDeviceToHost));
}

static cublasLtMatrixLayout_t make_layout(const Matrix& m) {
    cublasLtMatrixLayout_t l;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, m.type, m.rows, m.cols, m.ld));
    int32_t order = m.order, batch = m.batch;
    CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof(order)));
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                  sizeof(batch)));
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                  &m.stride, sizeof(m.stride)));
    return l;
}

// The smallest ld for the order, plus padding.
static int64_t ld_for(int rows, int cols, cublasLtOrder_t order, int pad) {
    return (order == CUBLASLT_ORDER_COL ? rows : cols) + pad;
}

// ---------------------------------------------------------------------------------------------
// One matmul configuration.
struct Case {
    cudaDataType ab, cd;  // A/B type, C/D type
    int m, n, k;
    bool ta, tb;
    int pad;  // extra elements of ld for A, B and D (C gets pad + 3)
    cublasLtOrder_t order;
    int batch;
    bool broadcast_a;  // A's batch stride 0: every batch uses the same A
    float alpha, beta;
    bool in_place;        // C == D
    bool device_scalars;  // CUBLASLT_POINTER_MODE_DEVICE
    uint32_t epilogue;
};

static double gelu64(double x) {
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
static double gelu_grad64(double x) {
    double th = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + th) +
           0.5 * x * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}

static bool epilogue_adds_bias(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS ||
           e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
static bool epilogue_is_gelu(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_AUX ||
           e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
static bool epilogue_writes_aux(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
static bool epilogue_reads_aux(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
static bool epilogue_writes_bias(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADA ||
           e == CUBLASLT_EPILOGUE_BGRADB;
}
static const char* epilogue_name(uint32_t e) {
    switch (e) {
        case CUBLASLT_EPILOGUE_DEFAULT:
            return "DEFAULT";
        case CUBLASLT_EPILOGUE_RELU:
            return "RELU";
        case CUBLASLT_EPILOGUE_BIAS:
            return "BIAS";
        case CUBLASLT_EPILOGUE_RELU_BIAS:
            return "RELU_BIAS";
        case CUBLASLT_EPILOGUE_GELU:
            return "GELU";
        case CUBLASLT_EPILOGUE_GELU_AUX:
            return "GELU_AUX";
        case CUBLASLT_EPILOGUE_GELU_BIAS:
            return "GELU_BIAS";
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
            return "GELU_AUX_BIAS";
        case CUBLASLT_EPILOGUE_DGELU:
            return "DGELU";
        case CUBLASLT_EPILOGUE_DGELU_BGRAD:
            return "DGELU_BGRAD";
        case CUBLASLT_EPILOGUE_BGRADA:
            return "BGRADA";
        case CUBLASLT_EPILOGUE_BGRADB:
            return "BGRADB";
    }
    return "?";
}

// Tracks the worst error/tolerance ratio of a case; any element over its bound (or NaN) fails it.
struct Verdict {
    double worst_ratio = 0, worst_err = 0, worst_tol = 0;
    bool failed = false;
    std::string first_failure;
    void check(double got, double ref, double tol, const char* what, int b, int i, int j) {
        double err = fabs(got - ref);
        bool bad = !(err <= tol);  // NaN fails
        double ratio = tol > 0 ? err / tol : (err > 0 ? INFINITY : 0);
        if (bad && !failed) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s[b=%d,i=%d,j=%d] = %.9g, want %.9g (err %.3g > tol %.3g)",
                     what, b, i, j, got, ref, err, tol);
            first_failure = buf;
        }
        failed |= bad;
        if (ratio > worst_ratio || std::isnan(ratio)) {
            worst_ratio = ratio;
            worst_err = err;
            worst_tol = tol;
        }
    }
    void require_poison(bool poisoned, const char* what) {
        if (!poisoned && !failed) first_failure = std::string(what) + " written outside its matrix";
        failed |= !poisoned;
    }
};

static cublasLtHandle_t handle;

// Runs one case on `stream` and compares everything it writes with the float64 reference.
// Returns true when it passes; prints one line either way.
static bool run_case(const Case& c, cudaStream_t stream) {
    const int m = c.m, n = c.n, k = c.k, B = c.batch;
    const int a_rows = c.ta ? k : m, a_cols = c.ta ? m : k;
    const int b_rows = c.tb ? n : k, b_cols = c.tb ? k : n;
    const cublasLtOrder_t ord = c.order;

    // Batch strides leave gaps between the matrices (A's is 0 when one A serves every batch).
    int64_t a_ld = ld_for(a_rows, a_cols, ord, c.pad);
    int64_t a_stride =
        c.broadcast_a ? 0 : (ord == CUBLASLT_ORDER_COL ? a_ld * a_cols : a_ld * a_rows) + 5;
    Matrix A = make_matrix(c.ab, a_rows, a_cols, a_ld, ord, B, a_stride, true);
    int64_t b_ld = ld_for(b_rows, b_cols, ord, c.pad);
    Matrix Bm = make_matrix(c.ab, b_rows, b_cols, b_ld, ord, B,
                            (ord == CUBLASLT_ORDER_COL ? b_ld * b_cols : b_ld * b_rows) + 2, true);
    int64_t d_ld = ld_for(m, n, ord, c.pad);
    int64_t d_stride = (ord == CUBLASLT_ORDER_COL ? d_ld * n : d_ld * m) + 7;
    Matrix D = make_matrix(c.cd, m, n, d_ld, ord, B, d_stride, c.in_place);
    Matrix C = D;  // in place: C is D (same memory, same layout)
    if (!c.in_place) {
        int64_t c_ld = ld_for(m, n, ord, c.pad + 3);
        C = make_matrix(c.cd, m, n, c_ld, ord, B, (ord == CUBLASLT_ORDER_COL ? c_ld * n : c_ld * m),
                        true);
    }
    Matrix C_in = C;  // host copy of C before the call (in place, D overwrites it)

    // Epilogue inputs and outputs: bias (or bias gradient) and the aux matrix, column-major.
    const uint32_t e = c.epilogue;
    const int bias_len = e == CUBLASLT_EPILOGUE_BGRADB ? n : m;
    const int64_t bias_stride = B > 1 ? bias_len + 3 : 0;
    Matrix bias = make_matrix(c.cd, bias_len, 1, bias_len, CUBLASLT_ORDER_COL, B, bias_stride,
                              !epilogue_writes_bias(e));
    const int64_t aux_ld = (m + 7) / 8 * 8 + 8;
    const int64_t aux_stride = aux_ld * n + 16;
    Matrix aux =
        make_matrix(c.cd, m, n, aux_ld, CUBLASLT_ORDER_COL, B, aux_stride, epilogue_reads_aux(e));
    if (epilogue_reads_aux(e)) {  // GELU inputs spread over the interesting range
        for (int b = 0; b < B; b++)
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) put(c.cd, aux.host, aux.index(b, i, j), uniform(-4, 4));
        CUDA_CHECK(cudaMemcpy(aux.dev, aux.host.data(), aux.host.size(), cudaMemcpyHostToDevice));
    }

    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t ta = c.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = c.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)));
    if (epilogue_adds_bias(e) || epilogue_writes_bias(e)) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &bias.dev, sizeof(bias.dev)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
                                                    &bias_stride, sizeof(bias_stride)));
    }
    if (epilogue_writes_aux(e) || epilogue_reads_aux(e)) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                    &aux.dev, sizeof(aux.dev)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                    &aux_ld, sizeof(aux_ld)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &aux_stride, sizeof(aux_stride)));
    }
    const void* alpha = &c.alpha;
    const void* beta = &c.beta;
    float* dev_scalars = nullptr;
    if (c.device_scalars) {
        int32_t mode = CUBLASLT_POINTER_MODE_DEVICE;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode,
                                                    sizeof(mode)));
        float scalars[2] = {c.alpha, c.beta};
        CUDA_CHECK(cudaMalloc(&dev_scalars, sizeof(scalars)));
        CUDA_CHECK(cudaMemcpy(dev_scalars, scalars, sizeof(scalars), cudaMemcpyHostToDevice));
        alpha = dev_scalars;
        beta = dev_scalars + 1;
    }

    cublasLtMatrixLayout_t la = make_layout(A), lb = make_layout(Bm), lc = make_layout(C),
                           ld = make_layout(D);
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t max_ws = 32 << 20;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof(max_ws)));
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    CUBLAS_CHECK(
        cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, lc, ld, pref, 1, &heuristic, &found));
    void* workspace = nullptr;
    if (found != 1 || heuristic.workspaceSize > max_ws) {
        fprintf(stderr, "heuristic: %d results, workspace %zu\n", found, heuristic.workspaceSize);
        exit(EXIT_FAILURE);
    }
    CUDA_CHECK(cudaMalloc(&workspace, max_ws));
    CUBLAS_CHECK(cublasLtMatmul(handle, desc, alpha, A.dev, la, Bm.dev, lb, beta, C.dev, lc, D.dev,
                                ld, &heuristic.algo, workspace, max_ws, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    download(D);
    download(bias);
    download(aux);

    // The float64 reference, element by element.
    Verdict v;
    const double L_act = epilogue_is_gelu(e) ? 1.13 : 1.0;
    const double u_out = unit_roundoff(c.cd);
    for (int b = 0; b < B; b++) {
        std::vector<double> bgrad_ref(bias_len, 0.0), bgrad_tol(bias_len, 0.0);
        for (int j = 0; j < n; j++) {
            for (int i = 0; i < m; i++) {
                double acc = 0, S = 0;
                for (int kk = 0; kk < k; kk++) {
                    double a = c.ta ? A.at(b, kk, i) : A.at(b, i, kk);
                    double bb = c.tb ? Bm.at(b, j, kk) : Bm.at(b, kk, j);
                    acc += a * bb;
                    S += fabs(a * bb);
                }
                double t = c.alpha * acc;
                S *= fabs(c.alpha);
                if (c.beta != 0) {
                    t += c.beta * C_in.at(b, i, j);
                    S += fabs(c.beta * C_in.at(b, i, j));
                }
                if (epilogue_adds_bias(e)) {
                    t += bias.at(b, i, 0);
                    S += fabs(bias.at(b, i, 0));
                }
                double pre = (k + 8) * 2 * kU32 * S;
                double ref = t, L = L_act;
                if (e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_RELU_BIAS)
                    ref = t > 0 ? t : 0;
                if (epilogue_is_gelu(e)) ref = gelu64(t);
                if (epilogue_reads_aux(e)) {
                    double x = aux.at(b, i, j), g = gelu_grad64(x);
                    ref = t * g;
                    // |gelu'| <= 1.13; the fp32 gelu' is off by a few ulps of its terms.
                    L = 1.13;
                    pre += fabs(t) * 64 * kU32 * (1 + fabs(x) + x * x * fabs(x));
                }
                double tol = L * pre + 16 * kU32 * fabs(ref) + u_out * fabs(ref) + 1e-30;
                if (epilogue_writes_aux(e)) {
                    double aux_tol = pre + 16 * kU32 * fabs(t) + u_out * fabs(t) + 1e-30;
                    v.check(aux.at(b, i, j), t, aux_tol, "aux", b, i, j);
                }
                v.check(D.at(b, i, j), ref, tol, "D", b, i, j);
                if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
                    bgrad_ref[i] += ref;
                    bgrad_tol[i] += tol + (n + 2) * 2 * kU32 * fabs(ref);
                }
            }
        }
        if (e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB) {
            for (int x = 0; x < bias_len; x++)
                for (int kk = 0; kk < k; kk++) {
                    double val = e == CUBLASLT_EPILOGUE_BGRADA
                                     ? (c.ta ? A.at(b, kk, x) : A.at(b, x, kk))
                                     : (c.tb ? Bm.at(b, x, kk) : Bm.at(b, kk, x));
                    bgrad_ref[x] += val;
                    bgrad_tol[x] += (k + 2) * 2 * kU32 * fabs(val);
                }
        }
        if (epilogue_writes_bias(e))
            for (int x = 0; x < bias_len; x++)
                v.check(bias.at(b, x, 0), bgrad_ref[x],
                        bgrad_tol[x] + u_out * fabs(bgrad_ref[x]) + 1e-30, "bias", b, x, 0);
    }
    // Nothing written outside D, the bias and the aux matrix.
    auto outside_untouched = [&](const Matrix& x, bool written, const char* what) {
        if (!written) return;
        std::vector<bool> inside(x.elements(), false);
        for (int b = 0; b < x.batch; b++)
            for (int i = 0; i < x.rows; i++)
                for (int j = 0; j < x.cols; j++) inside[x.index(b, i, j)] = true;
        for (int64_t t = 0; t < x.elements(); t++)
            if (!inside[t]) v.require_poison(is_poison(x.type, x.host, t), what);
    };
    outside_untouched(D, true, "D");
    outside_untouched(bias, epilogue_writes_bias(e), "bias");
    outside_untouched(aux, epilogue_writes_aux(e), "aux");

    printf(
        "%-4s %-13s %s%s %-4s->%-4s %3dx%3dx%3d pad %d batch %d%s alpha %g beta %g%s%s: "
        "max err/tol %.3f (err %.3g, tol %.3g)%s\n",
        v.failed ? "FAIL" : "ok", epilogue_name(e), c.ta ? "T" : "N", c.tb ? "T" : "N",
        type_name(c.ab), type_name(c.cd), m, n, k, c.pad, B, c.broadcast_a ? " (A shared)" : "",
        c.alpha, c.beta, ord == CUBLASLT_ORDER_ROW ? " row-major" : "",
        c.in_place         ? " in-place"
        : c.device_scalars ? " device-scalars"
                           : "",
        v.worst_ratio, v.worst_err, v.worst_tol,
        v.failed ? ("  <- " + v.first_failure).c_str() : "");

    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    for (cublasLtMatrixLayout_t l : {la, lb, lc, ld}) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(l));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    for (void* p : {A.dev, Bm.dev, D.dev, bias.dev, aux.dev, workspace}) CUDA_CHECK(cudaFree(p));
    if (!c.in_place) CUDA_CHECK(cudaFree(C.dev));
    if (dev_scalars) CUDA_CHECK(cudaFree(dev_scalars));
    return !v.failed;
}

// ---------------------------------------------------------------------------------------------
struct TypePair {
    cudaDataType ab, cd;
};
static const TypePair kTypes[] = {{CUDA_R_32F, CUDA_R_32F},
                                  {CUDA_R_16BF, CUDA_R_16BF},
                                  {CUDA_R_16BF, CUDA_R_32F},
                                  {CUDA_R_16F, CUDA_R_16F},
                                  {CUDA_R_16F, CUDA_R_32F}};
struct Shape {
    int m, n, k;
};
static const Shape kShapes[] = {{1, 1, 1}, {7, 13, 5}, {129, 65, 33}};

static int layouts_part(cudaStream_t stream, int* passed) {
    int failed = 0;
    auto run = [&](const Case& c) { run_case(c, stream) ? ++*passed : ++failed; };
    for (const TypePair& t : kTypes)
        for (const Shape& s : kShapes)
            for (int trans = 0; trans < 4; trans++) {
                bool ta = trans & 1, tb = trans & 2;
                Case c{t.ab,
                       t.cd,
                       s.m,
                       s.n,
                       s.k,
                       ta,
                       tb,
                       0,
                       CUBLASLT_ORDER_COL,
                       1,
                       false,
                       1.0f,
                       0.0f,
                       false,
                       false,
                       CUBLASLT_EPILOGUE_DEFAULT};
                run(c);
                c.pad = 3;  // padded leading dimensions, alpha/beta, C distinct from D
                c.alpha = -0.75f;
                c.beta = 0.5f;
                run(c);
            }
    for (const TypePair& t : kTypes) {
        for (int trans = 0; trans < 4; trans++) {
            bool ta = trans & 1, tb = trans & 2;
            Case row{t.ab,
                     t.cd,
                     33,
                     17,
                     9,
                     ta,
                     tb,
                     2,
                     CUBLASLT_ORDER_ROW,
                     1,
                     false,
                     1.5f,
                     -1.0f,
                     false,
                     false,
                     CUBLASLT_EPILOGUE_DEFAULT};
            run(row);
            Case batched{t.ab,
                         t.cd,
                         19,
                         11,
                         21,
                         ta,
                         tb,
                         1,
                         CUBLASLT_ORDER_COL,
                         3,
                         false,
                         1.0f,
                         1.0f,
                         false,
                         false,
                         CUBLASLT_EPILOGUE_DEFAULT};
            run(batched);
            batched.broadcast_a = true;
            run(batched);
        }
        run({t.ab, t.cd, 40, 24, 16, false, true, 0, CUBLASLT_ORDER_COL, 2, false, 2.0f, 1.0f, true,
             false, CUBLASLT_EPILOGUE_DEFAULT});
        run({t.ab, t.cd, 40, 24, 16, true, false, 1, CUBLASLT_ORDER_COL, 1, false, 0.5f, 0.25f,
             false, true, CUBLASLT_EPILOGUE_DEFAULT});
    }
    // Large enough (> 2^24 flops) for the library to split the work between threads.
    for (const TypePair& t : {kTypes[0], kTypes[1]})
        for (cublasLtOrder_t order : {CUBLASLT_ORDER_COL, CUBLASLT_ORDER_ROW})
            run({t.ab, t.cd, 520, 264, 64, true, false, 1, order, 1, false, 1.0f, 0.5f, false,
                 false, CUBLASLT_EPILOGUE_DEFAULT});
    return failed;
}

static int epilogues_part(cudaStream_t stream, int* passed) {
    static const uint32_t kEpilogues[] = {
        CUBLASLT_EPILOGUE_DEFAULT,     CUBLASLT_EPILOGUE_RELU,          CUBLASLT_EPILOGUE_BIAS,
        CUBLASLT_EPILOGUE_RELU_BIAS,   CUBLASLT_EPILOGUE_GELU,          CUBLASLT_EPILOGUE_GELU_AUX,
        CUBLASLT_EPILOGUE_GELU_BIAS,   CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU,
        CUBLASLT_EPILOGUE_DGELU_BGRAD, CUBLASLT_EPILOGUE_BGRADA,        CUBLASLT_EPILOGUE_BGRADB};
    int failed = 0;
    for (uint32_t e : kEpilogues)
        for (const TypePair& t : kTypes)
            for (const Shape& s : kShapes)
                for (int trans = 0; trans < 4; trans++) {
                    Case c{t.ab,
                           t.cd,
                           s.m,
                           s.n,
                           s.k,
                           bool(trans & 1),
                           bool(trans & 2),
                           1,
                           CUBLASLT_ORDER_COL,
                           1,
                           false,
                           1.0f,
                           0.0f,
                           false,
                           false,
                           e};
                    run_case(c, stream) ? ++*passed : ++failed;
                }
    // Batched, with alpha/beta and per-batch bias and aux (batch strides set).
    for (uint32_t e : kEpilogues)
        for (const TypePair& t : {kTypes[0], kTypes[1]}) {
            Case c{t.ab, t.cd,  24,   10,   12,    true,  false, 2, CUBLASLT_ORDER_COL,
                   2,    false, 0.5f, 1.0f, false, false, e};
            run_case(c, stream) ? ++*passed : ++failed;
        }
    // Large enough (> 2^24 flops) for the library to split the work between threads.
    for (uint32_t e :
         {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU_BGRAD, CUBLASLT_EPILOGUE_BGRADB})
        for (const TypePair& t : {kTypes[0], kTypes[1]}) {
            Case c{t.ab, t.cd,  264,  520,  64,    true,  false, 0, CUBLASLT_ORDER_COL,
                   1,    false, 1.0f, 0.0f, false, false, e};
            run_case(c, stream) ? ++*passed : ++failed;
        }
    return failed;
}

// Stream order: the inputs are copied, the matmul runs and D is copied back, all queued on one
// stream without synchronizing in between; the device alpha is overwritten on the stream after
// the matmul was queued, so a library reading it too late (or too early) gets the wrong scale.
static int stream_part(cudaStream_t stream, int* passed) {
    const int m = 48, n = 40, k = 32;
    std::vector<float> a(m * k), b(k * n), d(m * n, NAN);
    for (float& x : a) x = uniform(-1, 1);
    for (float& x : b) x = uniform(-1, 1);
    float *da, *db, *dd, *dscalars;
    CUDA_CHECK(cudaMalloc(&da, a.size() * 4));
    CUDA_CHECK(cudaMalloc(&db, b.size() * 4));
    CUDA_CHECK(cudaMalloc(&dd, d.size() * 4));
    CUDA_CHECK(cudaMalloc(&dscalars, 2 * 4));
    const float first[2] = {2.0f, 0.0f}, second[2] = {-7.0f, 0.0f};
    CUDA_CHECK(cudaMemcpyAsync(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(dscalars, first, sizeof(first), cudaMemcpyHostToDevice, stream));

    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t mode = CUBLASLT_POINTER_MODE_DEVICE;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode,
                                                sizeof(mode)));
    cublasLtMatrixLayout_t la, lb, ld;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m));
    CUBLAS_CHECK(cublasLtMatmul(handle, desc, dscalars, da, la, db, lb, dscalars + 1, dd, ld, dd,
                                ld, nullptr, nullptr, 0, stream));
    CUDA_CHECK(cudaMemcpyAsync(dscalars, second, sizeof(second), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));

    double worst = 0;
    bool ok = true;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double acc = 0, S = 0;
            for (int kk = 0; kk < k; kk++) {
                acc += double(a[i + kk * m]) * b[kk + j * k];
                S += fabs(double(a[i + kk * m]) * b[kk + j * k]);
            }
            double ref = 2.0 * acc, tol = (k + 8) * 2 * kU32 * 2.0 * S + 17 * kU32 * fabs(ref);
            double err = fabs(d[i + j * m] - ref);
            ok &= err <= tol;
            if (err / tol > worst || std::isnan(err)) worst = err / tol;
        }
    printf("%-4s stream-ordered copies + device alpha read when run: max err/tol %.3f\n",
           ok ? "ok" : "FAIL", worst);
    for (cublasLtMatrixLayout_t l : {la, lb, ld}) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(l));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    for (float* p : {da, db, dd, dscalars}) CUDA_CHECK(cudaFree(p));
    ok ? ++*passed : 0;
    return ok ? 0 : 1;
}

int main(int argc, char** argv) {
    if (argc != 3 || strcmp(argv[1], "--part") != 0) {
        fprintf(stderr, "usage: %s --part layouts|epilogues|stream\n", argv[0]);
        return EXIT_FAILURE;
    }
    std::string part = argv[2];
    CUBLAS_CHECK(cublasLtCreate(&handle));
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    int passed = 0, failed = 0;
    if (part == "layouts") failed = layouts_part(stream, &passed);
    else if (part == "epilogues") failed = epilogues_part(stream, &passed);
    else if (part == "stream") failed = stream_part(stream, &passed);
    else {
        fprintf(stderr, "unknown part '%s' (layouts, epilogues or stream)\n", part.c_str());
        return EXIT_FAILURE;
    }
    CUDA_CHECK(cudaStreamDestroy(stream));
    CUBLAS_CHECK(cublasLtDestroy(handle));
    if (failed) {
        printf("%s: %d cases failed, %d passed\n", part.c_str(), failed, passed);
        return EXIT_FAILURE;
    }
    printf("%s: %d cases passed\n", part.c_str(), passed);
    return EXIT_SUCCESS;
}
