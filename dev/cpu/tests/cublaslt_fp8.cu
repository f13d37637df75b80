// cublaslt_fp8.cu: cublasLtMatmul with FP8 (E4M3, E5M2) operands against a float64 product of
// the dequantized inputs (each FP8 value decoded from its bits by cuda_fp8.h's __nv_fp8_e4m3 /
// __nv_fp8_e5m2, times its scale), computed here on the host.
//
// Part "modes": every scale mode of A and B the simulated Hopper device runs: per tensor
// (SCALAR_32F), row-wise (OUTER_VEC_32F), 1x128 tiles (VEC128_32F) with 1x128 tiles or 128x128
// blocks (BLK128x128_32F) on the other operand, on sizes that leave partial tiles and blocks;
// every type combination of the FP8 table with a bf16, fp16, fp32 or FP8 D; C with its scale and
// beta; the bias, GELU (with aux) and ReLU epilogues; fast accumulation; an FP8 D with its D scale,
// and the amax output. Part "special": FP8 D saturating at the format's largest finite value (448
// E4M3, 57344 E5M2), subnormal FP8 inputs, NaN inputs propagating to their row or column. Part
// "refused": what cuBLASLt refuses for FP8 on Hopper, with its status, from both cublasLtMatmul and
// cublasLtMatmulAlgoGetHeuristic: every layout but TN, ROW order, E5M2 x E5M2, types outside the
// FP8 table, NVFP4 scale modes, unsupported mode pairs, dimensions and pointers (matrices, block
// scales) not 16-byte aligned, block scales with N not a multiple of 4, gradient epilogues, a D
// scale on a non-FP8 D. Several of these statuses are [expected]
// (dev/cpu/cublaslt/fp8.cpp; scripts/gpu_check.sh lists them). Those three parts describe compute
// capability 9.0 (the CPU runtime's default device; the H200 scripts/gpu_check.sh runs them on).
// Part "mx": MXFP8 (VEC32_UE8M0 scales, E8M0 bytes in the tiled layout of the cuBLAS
// documentation's section "1D Block Scaling Factors Layout", written here from that section) on
// the device the test runs on: below compute capability 10.0 it is refused; from 10.0 on (the CPU
// runtime under CUCC_COMPUTE_CAPABILITY=10.0 or 12.0) products with partial scale tiles, every op
// pair (TN is required on 12.x only, refused there), extreme and NaN scales against the float64
// reference, and the refusals of Blackwell (mixed modes, Hopper's scale modes, K not a multiple of
// 32, an FP8 D, a scale pointer not 16-byte aligned). The line it ends with names the compute
// capability and whether the CPU runtime or a GPU ran it.
//
// Tolerance for each element (u32 = 2^-24): the reference r is exact in float64;
//   pre = (K + 16) * 2 u32 * S,  S = |alpha| sum_k |a_ik b_kj| (dequantized) + |beta c_ij| +
//   |bias_i| (the fp32 product of each value with its scale, the fp32 accumulation, scalings,
//   additions); tol = L * pre * |d scale| + u_out * |r'| + tiny_out, r' the reference after the
//   activation and the D scale (clamped to the FP8 range for an FP8 D); L = 1.13 with GELU; u_out
//   the output's unit roundoff (2^-24 fp32, 2^-8 bf16, 2^-11 fp16, 2^-4 E4M3, 2^-3 E5M2); tiny_out
//   half its smallest subnormal (FP8) or 0.
//! cucc: -lcublasLt
//! run: ./prog --part modes => pass /modes: \d+ cases passed/
//! run: ./prog --part special => pass /special: \d+ cases passed/
//! run: ./prog --part refused => pass /refused: \d+ cases passed/
//! run: ./prog --part mx => pass /mx \(compute capability (9\.0, CPU runtime|\d+\.\d, native)\): \d+ cases passed/
//! run: CUCC_COMPUTE_CAPABILITY=10.0 ./prog --part mx => pass /mx \(compute capability (10\.0, CPU runtime|\d+\.\d, native)\): \d+ cases passed/
//! run: CUCC_COMPUTE_CAPABILITY=12.0 ./prog --part mx => pass /mx \(compute capability (12\.0, CPU runtime|\d+\.\d, native)\): \d+ cases passed/
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cublaslt_test_util.h"

static void* upload(const void* host, size_t bytes) {
    void* dev;
    CUDA_CHECK(cudaMalloc(&dev, bytes + 16));
    CUDA_CHECK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
    return dev;
}

// ---------------------------------------------------------------------------------------------
// One FP8 matmul: D (m x n) = epilogue(alpha op(A) op(B) + beta C + bias), column-major; A stored
// k x m (op T), B stored k x n (op N) unless the case sets other ops.
struct Case {
    std::string name;
    cudaDataType a_type = CUDA_R_8F_E4M3, b_type = CUDA_R_8F_E4M3;
    cudaDataType c_type = CUDA_R_16BF, d_type = CUDA_R_16BF;
    int m = 32, n = 16, k = 64;
    int64_t lda = 0, ldb = 0, ldd = 0;  // 0: the smallest
    cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
    cublasLtOrder_t order = CUBLASLT_ORDER_COL;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    cudaDataType scale_type = CUDA_R_32F;
    int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    bool scale_pointers = true;  // set A/B scale pointers (a null scalar scale means 1)
    float c_scale = 1.0f, d_scale = 1.0f;
    bool set_c_scale = false, set_d_scale = false, amax = false;
    float alpha = 1.0f, beta = 0.0f;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    size_t misalign_a = 0;        // bytes added to A's pointer
    size_t misalign_scale = 0;    // bytes added to A's scale pointer
    int e8m0_spread = 10;         // VEC32_UE8M0: random scales 2^-spread .. 2^spread
    int32_t bias_data_type = -1;  // CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, -1: unset
    int8_t fast_accum = 0;  // CUBLASLT_MATMUL_DESC_FAST_ACCUM (fp32 accumulation either way here)
    int batch = 1;          // refusal cases only: the layouts say `batch`, the memory holds one
    // Inputs: FP8 bits of A and B as stored; the scale arrays (fp32, or E8M0 bytes for
    // VEC32_UE8M0); C; the bias.
    std::vector<unsigned char> a, b, c;
    std::vector<float> a_scales, b_scales, bias;
    std::vector<unsigned char> a_e8m0, b_e8m0;
};

struct Result {
    cublasStatus_t heuristic, matmul;
    std::vector<unsigned char> d, aux;
    float amax = -1.0f;
};

static bool trans_a(const Case& s) { return s.transa != CUBLAS_OP_N; }
static bool trans_b(const Case& s) { return s.transb != CUBLAS_OP_N; }
// The stored A is k x m (op T) or m x k, B k x n or n x k (op T); ld 0 means its rows.
static int64_t ld_a(const Case& s) { return s.lda ? s.lda : trans_a(s) ? s.k : s.m; }
static int64_t ld_b(const Case& s) { return s.ldb ? s.ldb : trans_b(s) ? s.n : s.k; }
// The FP8 bits of op(A)(i, kk) and op(B)(kk, j).
static uint8_t a_bits(const Case& s, int i, int kk) {
    return s.a[trans_a(s) ? kk + i * ld_a(s) : i + kk * ld_a(s)];
}
static uint8_t b_bits(const Case& s, int kk, int j) {
    return s.b[trans_b(s) ? j + kk * ld_b(s) : kk + j * ld_b(s)];
}
static int64_t ld_d(const Case& s) { return s.ldd ? s.ldd : s.m; }
static bool has_relu(const Case& s) { return s.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS; }
static bool has_bias(const Case& s) {
    return has_relu(s) || s.epilogue == CUBLASLT_EPILOGUE_BIAS ||
           s.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS ||
           s.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
static bool has_aux(const Case& s) {
    return s.epilogue == CUBLASLT_EPILOGUE_GELU_AUX ||
           s.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
static bool has_gelu(const Case& s) {
    return has_aux(s) || s.epilogue == CUBLASLT_EPILOGUE_GELU ||
           s.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS;
}
// The bias type of the FP8 table: bf16 for an fp32 C, else C's type.
static cudaDataType bias_type(const Case& s) {
    return s.c_type == CUDA_R_32F ? CUDA_R_16BF : s.c_type;
}

// MXFP8's scales (section "1D Block Scaling Factors Layout"): the outer x ceil(k/32) E8M0 values
// cut into 128 x 4 tiles, padded to whole tiles, tiles in row-major order of 512 bytes each; scale
// (r, c) of a tile at (r % 32) * 16 + (r / 32) * 4 + c ("Indices -> offset").
static int mx_row_tiles(int outer) { return (outer + 127) / 128; }
static int mx_col_tiles(int k) { return ((k + 31) / 32 + 3) / 4; }
static size_t mx_offset(int kk, int o, int k) {
    const int r = o % 128, c = kk / 32 % 4;
    const size_t tile = static_cast<size_t>(o / 128) * mx_col_tiles(k) + kk / 128;
    return tile * 512 + (r % 32) * 16 + (r / 32) * 4 + c;
}
// An E8M0 byte's value: 2^(bits - 127), 0xFF NaN (OCP Microscaling Formats v1.0, E8M0).
static double e8m0_value(uint8_t bits) { return bits == 0xFF ? NAN : std::ldexp(1.0, bits - 127); }

// The number of scale values of an operand of k x outer elements, in the layouts fp8.cpp
// documents.
static size_t scale_count(int32_t mode, int k, int outer) {
    const int k_blocks = (k + 127) / 128;
    switch (mode) {
        case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F:
            return outer;
        case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F:
            return static_cast<size_t>(k_blocks) * outer;
        case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F:
            return static_cast<size_t>((k_blocks + 3) / 4 * 4) * ((outer + 127) / 128);
        case CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0:
            return static_cast<size_t>(mx_row_tiles(outer)) * mx_col_tiles(k) * 512;
        default:
            return 1;
    }
}
static double scale_at(int32_t mode, const std::vector<float>& s, const std::vector<uint8_t>& e8m0,
                       int kk, int o, int k, int outer) {
    const int k_blocks = (k + 127) / 128;
    switch (mode) {
        case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F:
            return s[o];
        case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F:
            return s[o + (kk / 128) * outer];
        case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F:
            return s[kk / 128 + (o / 128) * ((k_blocks + 3) / 4 * 4)];
        case CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0:
            return e8m0_value(e8m0[mx_offset(kk, o, k)]);
        default:
            return s.empty() ? 1.0 : s[0];
    }
}

// Random E8M0 scales 2^-spread .. 2^spread for an operand of k x outer elements; the padding
// entries 0, as the documentation asks.
static std::vector<uint8_t> random_e8m0(int k, int outer, int spread) {
    std::vector<uint8_t> e8m0(scale_count(CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0, k, outer), 0);
    for (int o = 0; o < outer; o++)
        for (int kk = 0; kk < k; kk += 32)
            e8m0[mx_offset(kk, o, k)] =
                static_cast<uint8_t>(127 + std::lround(uniform(-spread, spread)));
    return e8m0;
}

// Random FP8 inputs in [-range, range], random scales in [0.25, 4], C and the bias.
static void fill(Case& s, float range = 8.0f) {
    s.a.assign(static_cast<size_t>(ld_a(s) * (trans_a(s) ? s.m : s.k)), 0);
    s.b.assign(static_cast<size_t>(ld_b(s) * (trans_b(s) ? s.k : s.n)), 0);
    for (size_t i = 0; i < s.a.size(); i++) s.a[i] = encode_fp8(s.a_type, uniform(-range, range));
    for (size_t i = 0; i < s.b.size(); i++) s.b[i] = encode_fp8(s.b_type, uniform(-range, range));
    s.a_scales.resize(scale_count(s.a_mode, s.k, s.m));
    s.b_scales.resize(scale_count(s.b_mode, s.k, s.n));
    for (float& x : s.a_scales) x = uniform(0.25f, 4.0f);
    for (float& x : s.b_scales) x = uniform(0.25f, 4.0f);
    if (s.a_mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0)
        s.a_e8m0 = random_e8m0(s.k, s.m, s.e8m0_spread);
    if (s.b_mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0)
        s.b_e8m0 = random_e8m0(s.k, s.n, s.e8m0_spread);
    s.c.assign(static_cast<size_t>(ld_d(s) * s.n) * type_size(s.c_type), 0);
    for (int64_t i = 0; i < ld_d(s) * s.n; i++) put(s.c_type, s.c, i, uniform(-4, 4));
    s.bias.resize(s.m);
    for (float& x : s.bias) x = uniform(-2, 2);
}

static void set_attr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                     const void* value, size_t size) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, value, size));
}

static Result run(const Case& s) {
    Result r{};
    cublasLtHandle_t handle;
    CUBLAS_CHECK(cublasLtCreate(&handle));
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, s.compute, s.scale_type));
    set_attr(desc, CUBLASLT_MATMUL_DESC_TRANSA, &s.transa, sizeof s.transa);
    set_attr(desc, CUBLASLT_MATMUL_DESC_TRANSB, &s.transb, sizeof s.transb);
    set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &s.epilogue, sizeof s.epilogue);
    set_attr(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &s.a_mode, sizeof s.a_mode);
    set_attr(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &s.b_mode, sizeof s.b_mode);
    set_attr(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &s.fast_accum, sizeof s.fast_accum);
    std::vector<void*> allocations;
    const auto device = [&](const void* host, size_t bytes) {
        allocations.push_back(upload(host, bytes));
        return allocations.back();
    };
    if (s.scale_pointers) {
        const bool mx_a = s.a_mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
        const bool mx_b = s.b_mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
        const void* a_scale =
            static_cast<char*>(mx_a ? device(s.a_e8m0.data(), s.a_e8m0.size())
                                    : device(s.a_scales.data(), s.a_scales.size() * 4)) +
            s.misalign_scale;
        const void* b_scale = mx_b ? device(s.b_e8m0.data(), s.b_e8m0.size())
                                   : device(s.b_scales.data(), s.b_scales.size() * 4);
        set_attr(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale);
        set_attr(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale);
    }
    if (s.set_c_scale) {
        const void* p = device(&s.c_scale, 4);
        set_attr(desc, CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, &p, sizeof p);
    }
    if (s.set_d_scale) {
        const void* p = device(&s.d_scale, 4);
        set_attr(desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &p, sizeof p);
    }
    float* amax = nullptr;
    if (s.amax) {
        amax = static_cast<float*>(device(&r.amax, 4));
        set_attr(desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &amax, sizeof amax);
    }
    if (has_bias(s)) {
        std::vector<unsigned char> bias(s.bias.size() * type_size(bias_type(s)));
        for (size_t i = 0; i < s.bias.size(); i++) put(bias_type(s), bias, i, s.bias[i]);
        const void* p = device(bias.data(), bias.size());
        set_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof p);
        if (s.bias_data_type != -1)
            set_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &s.bias_data_type,
                     sizeof s.bias_data_type);
    }
    void* aux = nullptr;
    const int64_t aux_ld = (s.m + 7) / 8 * 8;
    if (has_aux(s)) {
        r.aux.assign(static_cast<size_t>(aux_ld * s.n) * type_size(s.d_type), 0);
        aux = device(r.aux.data(), r.aux.size());
        set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
        set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
    }

    const bool ta = trans_a(s), tb = trans_b(s);
    cublasLtMatrixLayout_t la, lb, lc, ld;
    CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&la, s.a_type, ta ? s.k : s.m, ta ? s.m : s.k, ld_a(s)));
    CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&lb, s.b_type, tb ? s.n : s.k, tb ? s.k : s.n, ld_b(s)));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, s.c_type, s.m, s.n, ld_d(s)));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, s.d_type, s.m, s.n, ld_d(s)));
    const int64_t batch_stride = 1 << 20;
    for (cublasLtMatrixLayout_t l : {la, lb, lc, ld}) {
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &s.order,
                                                      sizeof s.order));
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                      &s.batch, sizeof s.batch));
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
            l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride, sizeof batch_stride));
    }

    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    cublasLtMatmulHeuristicResult_t heuristic;
    int returned = 0;
    r.heuristic = cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, lc, ld, pref, 1, &heuristic,
                                                 &returned);

    const void* A = static_cast<char*>(device(s.a.data(), s.a.size())) + s.misalign_a;
    const void* B = device(s.b.data(), s.b.size());
    const void* C = device(s.c.data(), s.c.size());
    r.d.assign(static_cast<size_t>(ld_d(s) * s.n) * type_size(s.d_type), 0);
    void* D = device(r.d.data(), r.d.size());
    r.matmul = cublasLtMatmul(handle, desc, &s.alpha, A, la, B, lb, &s.beta, C, lc, D, ld, nullptr,
                              nullptr, 0, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (r.matmul == CUBLAS_STATUS_SUCCESS) {
        CUDA_CHECK(cudaMemcpy(r.d.data(), D, r.d.size(), cudaMemcpyDeviceToHost));
        if (aux) CUDA_CHECK(cudaMemcpy(r.aux.data(), aux, r.aux.size(), cudaMemcpyDeviceToHost));
        if (amax) CUDA_CHECK(cudaMemcpy(&r.amax, amax, 4, cudaMemcpyDeviceToHost));
    }
    for (void* p : allocations) CUDA_CHECK(cudaFree(p));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    for (cublasLtMatrixLayout_t l : {la, lb, lc, ld}) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(l));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    CUBLAS_CHECK(cublasLtDestroy(handle));
    return r;
}

static double gelu(double x) {
    return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

// Runs a case and checks D (and the aux and amax outputs) against the float64 reference.
// Returns whether every check passed.
static bool check(const Case& s) {
    const Result r = run(s);
    if (r.heuristic != CUBLAS_STATUS_SUCCESS || r.matmul != CUBLAS_STATUS_SUCCESS) {
        expect(false, s.name.c_str(),
               std::string("heuristic ") + cublasLtGetStatusName(r.heuristic) + ", matmul " +
                   cublasLtGetStatusName(r.matmul));
        return false;
    }
    const bool scalar_a = s.a_mode == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    const bool scalar_b = s.b_mode == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    double alpha = s.alpha;
    if (scalar_a && s.scale_pointers) alpha *= s.a_scales[0];
    if (scalar_b && s.scale_pointers) alpha *= s.b_scales[0];
    const double beta = s.beta * (s.set_c_scale ? s.c_scale : 1.0);
    const double d_scale = s.set_d_scale ? s.d_scale : 1.0;
    const double lipschitz = has_gelu(s) ? 1.13 : 1.0;
    const double tiny = is_fp8(s.d_type) ? fp8_tiny(s.d_type) : 0.0;
    // op(A)'s rows and op(B)'s columns as the product multiplies them, decoded and scaled once
    std::vector<double> a_rows((size_t)s.m * s.k), b_cols((size_t)s.n * s.k);
    for (int i = 0; i < s.m; i++)
        for (int kk = 0; kk < s.k; kk++) {
            double a = decode_fp8(s.a_type, a_bits(s, i, kk));
            if (!scalar_a) a *= scale_at(s.a_mode, s.a_scales, s.a_e8m0, kk, i, s.k, s.m);
            a_rows[(size_t)i * s.k + kk] = a;
        }
    for (int j = 0; j < s.n; j++)
        for (int kk = 0; kk < s.k; kk++) {
            double b = decode_fp8(s.b_type, b_bits(s, kk, j));
            if (!scalar_b) b *= scale_at(s.b_mode, s.b_scales, s.b_e8m0, kk, j, s.k, s.n);
            b_cols[(size_t)j * s.k + kk] = b;
        }
    double amax = 0, worst = 0;
    int bad = 0;
    std::string first;
    for (int j = 0; j < s.n; j++)
        for (int i = 0; i < s.m; i++) {
            double sum = 0, magnitude = 0;
            for (int kk = 0; kk < s.k; kk++) {
                const double a = a_rows[(size_t)i * s.k + kk], b = b_cols[(size_t)j * s.k + kk];
                sum += a * b;
                magnitude += std::fabs(a * b);
            }
            double x = alpha * sum, size = std::fabs(alpha) * magnitude;
            if (s.beta != 0) {
                const double c = get(s.c_type, s.c, i + j * ld_d(s));
                x += beta * c;
                size += std::fabs(beta * c);
            }
            if (has_bias(s)) {
                std::vector<unsigned char> one(type_size(bias_type(s)));
                put(bias_type(s), one, 0, s.bias[i]);
                const double bias = get(bias_type(s), one, 0);
                x += bias;
                size += std::fabs(bias);
            }
            const double pre = (s.k + 16) * 2 * kU32 * size;
            if (has_aux(s)) {
                const double got = get(s.d_type, r.aux, i + j * ((s.m + 7) / 8 * 8));
                if (!(std::fabs(got - x) <= pre + unit_roundoff(s.d_type) * std::fabs(x))) {
                    if (!bad++) first = "aux (" + std::to_string(i) + "," + std::to_string(j) + ")";
                }
            }
            const double out = has_gelu(s) ? gelu(x) : has_relu(s) ? std::max(x, 0.0) : x;
            amax = std::max(amax, std::fabs(out));
            double want = out * d_scale;
            if (is_fp8(s.d_type)) want = std::clamp(want, -fp8_max(s.d_type), fp8_max(s.d_type));
            const double got = get(s.d_type, r.d, i + j * ld_d(s));
            const double tol = lipschitz * pre * std::fabs(d_scale) +
                               unit_roundoff(s.d_type) * std::fabs(want) + tiny;
            const double err = std::fabs(got - want);
            if (!(err <= tol)) {
                if (!bad++) {
                    char line[160];
                    snprintf(line, sizeof line, "D(%d,%d) = %.9g, want %.9g (tol %.3g)", i, j, got,
                             want, tol);
                    first = line;
                }
            }
            if (tol > 0) worst = std::max(worst, err / tol);
        }
    if (s.amax) {
        // The amax is the largest |fp32 result| before the D scale.
        const double tol = lipschitz * (s.k + 16) * 4 * kU32 * amax + 1e-30;
        if (!(std::fabs(r.amax - amax) <= tol + 2 * kU32 * amax) && !bad++)
            first = "amax " + std::to_string(r.amax) + ", want " + std::to_string(amax);
    }
    char detail[96];
    snprintf(detail, sizeof detail, "worst error / tolerance %.3f", worst);
    expect(bad == 0, s.name.c_str(), bad ? first + " (" + std::to_string(bad) + " bad)" : detail);
    return bad == 0;
}

// ---------------------------------------------------------------------------------------------
static int part_modes() {
    int passed = 0, cases = 0;
    const auto add = [&](Case s) {
        fill(s);
        cases++;
        passed += check(s);
    };
    const cudaDataType e4 = CUDA_R_8F_E4M3, e5 = CUDA_R_8F_E5M2;
    // The FP8 table: A x B -> C / D.
    struct Types {
        cudaDataType a, b, c, d;
    };
    const Types table[] = {
        {e4, e4, CUDA_R_16BF, CUDA_R_16BF}, {e4, e4, CUDA_R_16BF, e4},
        {e4, e4, CUDA_R_16F, CUDA_R_16F},   {e4, e4, CUDA_R_16F, e4},
        {e4, e4, CUDA_R_32F, CUDA_R_32F},   {e4, e5, CUDA_R_16BF, CUDA_R_16BF},
        {e4, e5, CUDA_R_16BF, e5},          {e5, e4, CUDA_R_16F, e4},
        {e5, e4, CUDA_R_16F, e5},           {e5, e4, CUDA_R_32F, CUDA_R_32F},
    };
    for (const Types& t : table) {
        Case s;
        s.a_type = t.a, s.b_type = t.b, s.c_type = t.c, s.d_type = t.d;
        s.name = std::string("per tensor ") + type_name(t.a) + " x " + type_name(t.b) + " -> " +
                 type_name(t.c) + " / " + type_name(t.d);
        s.m = 48, s.n = 24, s.k = 80;
        s.amax = true;
        s.set_d_scale = is_fp8(t.d);
        s.d_scale = 0.125f;
        add(s);
        s.name += ", beta 0.5 with a C scale, alpha 0.75, bias";
        s.alpha = 0.75f, s.beta = 0.5f, s.set_c_scale = true, s.c_scale = 1.5f;
        s.epilogue = CUBLASLT_EPILOGUE_BIAS;
        add(s);
    }
    {
        Case s;
        s.name = "fp32 D with its bf16 bias type set explicitly";
        s.c_type = s.d_type = CUDA_R_32F, s.epilogue = CUBLASLT_EPILOGUE_BIAS;
        s.bias_data_type = CUDA_R_16BF;
        add(s);
    }
    {
        Case s;
        s.name = "per tensor without scale pointers (scales 1), padded lds";
        s.scale_pointers = false;
        s.m = 40, s.n = 8, s.k = 48, s.lda = 64, s.ldb = 80, s.ldd = 48;
        add(s);
    }
    for (cublasLtEpilogue_t ep :
         {CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX,
          CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_RELU_BIAS}) {
        for (cudaDataType d : {CUDA_R_16BF, CUDA_R_32F, e4}) {
            if (d == e4 &&
                (ep == CUBLASLT_EPILOGUE_GELU_AUX || ep == CUBLASLT_EPILOGUE_GELU_AUX_BIAS))
                continue;  // refused: the aux would be FP8
            Case s;
            s.name = std::string("epilogue ") + std::to_string(ep) + " -> " + type_name(d);
            s.d_type = d, s.c_type = d == e4 ? CUDA_R_16BF : d;
            s.m = 64, s.n = 16, s.k = 32, s.epilogue = ep, s.amax = true;
            if (d == e4) s.set_d_scale = true, s.d_scale = 2.0f;
            add(s);
        }
    }
    // Row-wise, 1x128 and 128x128 block scaling; sizes with partial tiles and blocks.
    struct Modes {
        int32_t a, b;
        const char* name;
    };
    const Modes modes[] = {
        {CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F,
         "row-wise"},
        {CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
         "1x128 x 1x128"},
        {CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
         "1x128 x 128x128"},
        {CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
         "128x128 x 1x128"},
    };
    for (const Modes& mode : modes)
        for (cudaDataType d : {CUDA_R_16BF, CUDA_R_32F, e4}) {
            Case s;
            s.name = std::string(mode.name) + " -> " + type_name(d) + ", 272 x 136 x 400, bias";
            s.a_mode = mode.a, s.b_mode = mode.b;
            s.d_type = d, s.c_type = d == e4 ? CUDA_R_16BF : d;
            s.m = 272, s.n = 136, s.k = 400, s.amax = true;
            s.epilogue = CUBLASLT_EPILOGUE_BIAS;
            if (d == e4) s.set_d_scale = true, s.d_scale = 0.01f;
            add(s);
            if (d == CUDA_R_16BF) {
                s.name = std::string(mode.name) +
                         " -> bf16, FAST_ACCUM within the fp32 bound [expected]";
                s.fast_accum = 1;
                add(s);
                s.fast_accum = 0;
            }
            if (d == CUDA_R_32F) {
                s.name = std::string(mode.name) + " -> f32, E5M2 B, beta 1, 128 x 256 x 256";
                s.b_type = e5, s.m = 128, s.n = 256, s.k = 256, s.beta = 1.0f;
                s.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
                add(s);
            }
        }
    printf("modes: %d cases passed\n", passed);
    return passed == cases ? 0 : 1;
}

// Checks exact float64 values (no rounding anywhere) of D elements.
static int part_special() {
    int passed = 0, cases = 0;
    const auto count = [&](bool ok) {
        cases++;
        passed += ok;
    };
    const cudaDataType e4 = CUDA_R_8F_E4M3, e5 = CUDA_R_8F_E5M2;
    // Saturation: products far beyond the FP8 range become the largest finite value, by sign; the
    // amax is the unsaturated result.
    for (cudaDataType d : {e4, e5}) {
        Case s;
        s.name = std::string("saturation to ") + type_name(d);
        s.b_type = d == e5 ? e5 : e4;
        s.d_type = d, s.m = 16, s.n = 16, s.k = 16, s.amax = true;
        s.set_d_scale = true, s.d_scale = 1.0f;
        fill(s);
        for (int i = 0; i < s.m; i++)
            for (int kk = 0; kk < s.k; kk++) s.a[kk + i * s.k] = encode_fp8(e4, i % 2 ? 448 : -448);
        for (size_t i = 0; i < s.b.size(); i++) s.b[i] = encode_fp8(s.b_type, 256.0f);
        s.a_scales = {1.0f}, s.b_scales = {1.0f};
        const Result r = run(s);
        bool ok = r.matmul == CUBLAS_STATUS_SUCCESS;
        for (int j = 0; ok && j < s.n; j++)
            for (int i = 0; i < s.m; i++)
                ok &= get(d, r.d, i + j * s.m) == (i % 2 ? fp8_max(d) : -fp8_max(d));
        ok &= r.amax == 16.0f * 448 * 256;
        expect(ok, s.name.c_str());
        count(ok);
        s.name += ", through the random-data check";
        count(check(s));
    }
    // Subnormal inputs: the smallest subnormals and others, exact in fp32.
    for (cudaDataType t : {e4, e5}) {
        Case s;
        s.name = std::string("subnormal ") + type_name(t) + " inputs";
        s.a_type = t, s.b_type = e4, s.c_type = s.d_type = CUDA_R_32F;
        s.m = 16, s.n = 16, s.k = 32;
        fill(s);
        for (size_t i = 0; i < s.a.size(); i++)
            s.a[i] = static_cast<uint8_t>(1 + i % 3);  // subnormal
        for (size_t i = 0; i < s.b.size(); i++) s.b[i] = encode_fp8(e4, (i % 5) - 2.0f);
        s.a_scales = {1.0f}, s.b_scales = {1.0f};
        const Result r = run(s);
        bool ok = r.matmul == CUBLAS_STATUS_SUCCESS;
        for (int j = 0; ok && j < s.n; j++)
            for (int i = 0; i < s.m; i++) {
                double want = 0;
                for (int kk = 0; kk < s.k; kk++)
                    want += decode_fp8(t, s.a[kk + i * s.k]) * decode_fp8(e4, s.b[kk + j * s.k]);
                ok &= get(CUDA_R_32F, r.d, i + j * s.m) == want && want != 0;
            }
        expect(ok, s.name.c_str(), "exact in fp32");
        count(ok);
        // Subnormal outputs: a tiny D scale makes E4M3 subnormals of the result.
        s.name = std::string("subnormal ") + type_name(t) + " inputs, E4M3 D with subnormals";
        s.c_type = CUDA_R_16BF, s.d_type = e4, s.set_d_scale = true, s.d_scale = 0x1p12f;
        count(check(s));
    }
    // NaN inputs: the rows of D using a NaN of A and the columns using a NaN of B are NaN; the
    // others are finite.
    for (cudaDataType t : {e4, e5}) {
        Case s;
        s.name = std::string("NaN ") + type_name(t) + " inputs propagate";
        s.a_type = t, s.b_type = e4, s.d_type = s.c_type = CUDA_R_16BF;
        s.m = 16, s.n = 16, s.k = 32;
        fill(s);
        const uint8_t nan_bits = t == e4 ? 0x7f : 0x7e;
        s.a[5 + 3 * s.k] = nan_bits;  // A(5, row 3): row 3 of D
        s.b[7 + 9 * s.k] = 0xff;      // E4M3 NaN (negative) in column 9 of op(B)
        const Result r = run(s);
        bool ok = r.matmul == CUBLAS_STATUS_SUCCESS && std::isnan(decode_fp8(t, nan_bits));
        for (int j = 0; ok && j < s.n; j++)
            for (int i = 0; i < s.m; i++)
                ok &= std::isnan(get(s.d_type, r.d, i + j * s.m)) == (i == 3 || j == 9);
        expect(ok, s.name.c_str());
        count(ok);
    }
    printf("special: %d cases passed\n", passed);
    return passed == cases ? 0 : 1;
}

// Runs a case that must be refused with `want` by cublasLtMatmul and, unless only a pointer is
// wrong (the heuristic does not see pointers), by cublasLtMatmulAlgoGetHeuristic. Every such
// status is [expected]: the documentation says what is unsupported, not with which status
// (scripts/gpu_check.sh lists them for the native run). Returns whether both were as wanted.
static bool refused_case(Case s, cublasStatus_t want) {
    s.name += " [expected]";
    fill(s);
    const Result r = run(s);
    const cublasStatus_t heuristic =
        s.misalign_a || s.misalign_scale ? CUBLAS_STATUS_SUCCESS : want;
    std::string what = s.name + ": heuristic";
    expect_status(r.heuristic, heuristic, what.c_str());
    what = s.name + ": matmul";
    expect_status(r.matmul, want, what.c_str());
    return r.matmul == want && r.heuristic == heuristic;
}

static int part_refused() {
    int passed = 0, cases = 0;
    const auto refused = [&](const Case& s, cublasStatus_t want) {
        cases++;
        passed += refused_case(s, want);
    };
    const cudaDataType e4 = CUDA_R_8F_E4M3, e5 = CUDA_R_8F_E5M2;
    const cublasStatus_t unsupported = CUBLAS_STATUS_NOT_SUPPORTED;
    const cublasStatus_t invalid = CUBLAS_STATUS_INVALID_VALUE;
    const cublasOperation_t N = CUBLAS_OP_N, T = CUBLAS_OP_T;
    const cublasOperation_t pairs[][2] = {{N, N}, {N, T}, {T, T}};
    for (const auto& pair : pairs) {
        Case s;
        s.transa = pair[0], s.transb = pair[1];
        s.name = std::string("op pair ") + (pair[0] == T ? "T" : "N") + (pair[1] == T ? "T" : "N");
        s.m = s.n = s.k = 32;
        refused(s, unsupported);
    }
    {
        Case s;
        s.name = "ROW order", s.order = CUBLASLT_ORDER_ROW, s.m = s.n = s.k = 32;
        refused(s, unsupported);
    }
    const auto types = [&](const char* name, cudaDataType a, cudaDataType b, cudaDataType c,
                           cudaDataType d) {
        Case s;
        s.name = name, s.a_type = a, s.b_type = b, s.c_type = c, s.d_type = d;
        refused(s, unsupported);
    };
    types("E5M2 x E5M2", e5, e5, CUDA_R_16BF, CUDA_R_16BF);
    types("E4M3 x E4M3 -> E5M2 D", e4, e4, CUDA_R_16BF, e5);
    types("fp32 C with a bf16 D", e4, e4, CUDA_R_32F, CUDA_R_16BF);
    types("FP8 C", e4, e4, e4, e4);
    types("E4M3 x bf16", e4, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF);
    {
        Case s;
        s.name = "compute 32F_FAST_TF32", s.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
        refused(s, unsupported);
        s.name = "compute 32F_PEDANTIC", s.compute = CUBLAS_COMPUTE_32F_PEDANTIC;
        refused(s, unsupported);
    }
    const auto modes = [&](const char* name, int32_t a, int32_t b, cublasStatus_t want) {
        Case s;
        s.name = name, s.a_mode = a, s.b_mode = b, s.m = s.n = 128, s.k = 128;
        refused(s, want);
    };
    modes("NVFP4 scales (VEC16_UE4M3)", CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3,
          CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3, unsupported);
    modes("128x128 x 128x128", CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
          CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, unsupported);
    modes("row-wise x per tensor", CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F,
          CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, unsupported);
    modes("an unknown scale mode", 99, 99, invalid);
    {
        Case s;
        s.name = "1x128 scales with N = 30, not a multiple of 4";
        s.a_mode = s.b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, s.n = 30;
        refused(s, unsupported);
    }
    {
        Case s;
        s.name = "1x128 A scale not 16-byte aligned (the heuristic does not see it)";
        s.a_mode = s.b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, s.misalign_scale = 4;
        refused(s, unsupported);
    }
    {
        Case s;
        s.name = "1x128 scales without a scale pointer";
        s.a_mode = s.b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, s.scale_pointers = false;
        refused(s, invalid);
    }
    {
        Case s;
        s.name = "D scale with a bf16 D", s.set_d_scale = true;
        refused(s, invalid);
    }
    {
        Case s;
        s.name = "an fp32 bias (the table's is bf16)", s.epilogue = CUBLASLT_EPILOGUE_BIAS;
        s.c_type = s.d_type = CUDA_R_32F, s.bias_data_type = CUDA_R_32F;
        refused(s, unsupported);
    }
    {
        Case s;
        s.name = "a batch of 2 with 1x128 scales", s.batch = 2;
        s.a_mode = s.b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        refused(s, unsupported);
    }
    {
        Case s;
        s.name = "lda not a multiple of 16", s.lda = 72;
        refused(s, unsupported);
        s.name = "K not a multiple of 16", s.lda = 0, s.k = 40;
        refused(s, unsupported);
        s.name = "M of a bf16 D not a multiple of 8", s.k = 64, s.m = 20;
        refused(s, unsupported);
        s.name = "A not 16-byte aligned (the heuristic does not see it)", s.m = 32,
        s.misalign_a = 8;
        refused(s, unsupported);
    }
    for (cublasLtEpilogue_t ep : {CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_DGELU_BGRAD,
                                  CUBLASLT_EPILOGUE_BGRADA, CUBLASLT_EPILOGUE_BGRADB}) {
        Case s;
        s.name = "gradient epilogue " + std::to_string(ep), s.epilogue = ep;
        refused(s, unsupported);
    }
    {
        Case s;
        s.name = "GELU aux with an FP8 D", s.d_type = e4, s.epilogue = CUBLASLT_EPILOGUE_GELU_AUX;
        refused(s, unsupported);
    }
    printf("refused: %d cases passed\n", passed);
    return passed == cases ? 0 : 1;
}

// MXFP8 on the device the test runs on (see the file's first comment).
static int part_mx() {
    int device = 0, major = 0, minor = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
#ifdef __CUCC__
    const char* where = "CPU runtime";
#else
    const char* where = "native";
#endif
    int passed = 0, cases = 0;
    const auto count = [&](bool ok) {
        cases++;
        passed += ok;
    };
    const int32_t mx = CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
    const cudaDataType e4 = CUDA_R_8F_E4M3, e5 = CUDA_R_8F_E5M2;
    const cublasStatus_t unsupported = CUBLAS_STATUS_NOT_SUPPORTED;
    char name[128];
    if (major < 10) {
        Case s;
        snprintf(name, sizeof name, "MXFP8 (VEC32_UE8M0) on compute capability %d.%d", major,
                 minor);
        s.name = name, s.a_mode = s.b_mode = mx, s.m = s.n = s.k = 128;
        count(refused_case(s, unsupported));
    } else {
        const auto add = [&](Case s) {
            fill(s);
            count(check(s));
        };
        Case s;
        s.a_mode = s.b_mode = mx;
        s.name = "MXFP8 e4m3 x e4m3 -> bf16, 200 x 136 x 320 (partial scale tiles), bias";
        s.m = 200, s.n = 136, s.k = 320, s.epilogue = CUBLASLT_EPILOGUE_BIAS;
        add(s);
        s.name = "MXFP8 e4m3 x e5m2 -> f32, beta 1, 256 x 128 x 512";
        s.b_type = e5, s.c_type = s.d_type = CUDA_R_32F, s.beta = 1.0f;
        s.m = 256, s.n = 128, s.k = 512, s.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        add(s);
        // f16's range: elements within +-2, scales 2^-2 .. 2^2, so |D| < 96 * 64
        s.name = "MXFP8 e5m2 x e4m3 -> f16, GELU with bias, 64 x 32 x 96";
        s.a_type = e5, s.b_type = e4, s.c_type = s.d_type = CUDA_R_16F, s.beta = 0.0f;
        s.m = 64, s.n = 32, s.k = 96, s.epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
        s.e8m0_spread = 2;
        fill(s, 2.0f);
        count(check(s));
        // 10.x and 11.x take every op pair (the scales keep their layout whatever the
        // transposition); 12.x, Blackwell GeForce, only TN.
        const bool tn_only = major == 12;
        const cublasOperation_t N = CUBLAS_OP_N, T = CUBLAS_OP_T;
        const cublasOperation_t pairs[][2] = {{N, N}, {N, T}, {T, T}};
        for (const auto& pair : pairs) {
            s = Case();
            s.transa = pair[0], s.transb = pair[1];
            s.c_type = s.d_type = CUDA_R_32F, s.m = 144, s.n = 48, s.k = 160;
            snprintf(name, sizeof name, "op pair %s%s -> f32, 144 x 48 x 160",
                     pair[0] == T ? "T" : "N", pair[1] == T ? "T" : "N");
            s.name = std::string(name) + ", per-tensor scales";
            if (tn_only) count(refused_case(s, unsupported));
            else add(s);
            s.name = std::string("MXFP8 ") + name;
            s.a_mode = s.b_mode = mx;
            if (tn_only) count(refused_case(s, unsupported));
            else add(s);
        }
        // E8M0's ends: 2^-127 (byte 0) on one block of A, 2^100 on one K block of B.
        s = Case();
        s.name = "MXFP8 scales 2^-127 and 2^100 -> f32";
        s.a_mode = s.b_mode = mx, s.c_type = s.d_type = CUDA_R_32F;
        s.m = 64, s.n = 16, s.k = 128;
        fill(s);
        s.a_e8m0[mx_offset(32, 5, s.k)] = 0;
        for (int j = 0; j < s.n; j++) s.b_e8m0[mx_offset(64, j, s.k)] = 127 + 100;
        count(check(s));
        // A NaN scale (0xFF) of A's row 3: row 3 of D is NaN, every other element finite.
        s.name = "MXFP8 NaN scale (0xFF) in row 3 of A";
        s.a_e8m0[mx_offset(96, 3, s.k)] = 0xFF;
        const Result r = run(s);
        bool ok = r.matmul == CUBLAS_STATUS_SUCCESS;
        for (int j = 0; ok && j < s.n; j++)
            for (int i = 0; i < s.m; i++)
                ok &= std::isnan(get(s.d_type, r.d, i + j * s.m)) == (i == 3);
        expect(ok, s.name.c_str());
        count(ok);
        // Refused on 10.x.
        s = Case();
        s.m = s.n = s.k = 128;
        s.name = "MXFP8 A with a per-tensor B", s.a_mode = mx;
        count(refused_case(s, unsupported));
        s.name = "VEC128_32F on compute capability 10.x (Hopper's)";
        s.a_mode = s.b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        count(refused_case(s, unsupported));
        s.name = "OUTER_VEC_32F on compute capability 10.x (Hopper's)";
        s.a_mode = s.b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        count(refused_case(s, unsupported));
        s.name = "MXFP8 with an FP8 D (its block scales are not written here)";
        s.a_mode = s.b_mode = mx, s.d_type = e4;
        count(refused_case(s, unsupported));
        s.name = "MXFP8 A scale not 16-byte aligned (the heuristic does not see it)";
        s.d_type = CUDA_R_16BF, s.misalign_scale = 8;
        count(refused_case(s, unsupported));
        s.name = "MXFP8 with K = 48, not a multiple of 32", s.misalign_scale = 0, s.k = 48;
        count(refused_case(s, unsupported));
    }
    printf("mx (compute capability %d.%d, %s): %d cases passed\n", major, minor, where, passed);
    return passed == cases ? 0 : 1;
}

int main(int argc, char** argv) {
    if (argc != 3 || strcmp(argv[1], "--part") != 0) {
        fprintf(stderr, "usage: %s --part modes|special|refused|mx\n", argv[0]);
        return 2;
    }
    const std::string part = argv[2];
    int status = part == "modes"     ? part_modes()
                 : part == "special" ? part_special()
                 : part == "refused" ? part_refused()
                 : part == "mx"      ? part_mx()
                                     : 2;
    if (status == 2) fprintf(stderr, "unknown part %s\n", argv[2]);
    return status;
}
