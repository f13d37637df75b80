// matmul.cpp: cublasLtMatmul and cublasLtMatmulAlgoGetHeuristic on the CPU.
//
// D = epilogue(alpha * op(A) op(B) + beta * C [+ bias]) for each matrix of a batch, computed as
// cuBLASLt computes it with CUBLAS_COMPUTE_32F: fp32 products and sums, the epilogue in fp32, one
// rounding (to nearest even) to the output type at the end. For each batch:
//   1. op(A) and op(B) become fp32 column-major panels. An fp32 operand is used in place (a matrix
//      in ROW order is the transpose of the COL-order matrix with the same ld, so ROW order only
//      flips the transpose flag); bf16 and fp16 operands are widened to fp32, which is exact.
//   2. T = alpha * op(A) op(B) by sgemm (OpenBLAS, chosen and checked by blas.cpp), in fp32:
//      into D itself when D is fp32 (with beta * C too), else into a scratch matrix.
//   3. One pass over T adds beta * C and the bias, applies the activation (or its gradient),
//      writes the aux matrix and the bias-gradient sums, and rounds each element into D. A plain
//      fp32 matmul needs no such pass.
// Steps 2 and 3 run on CUCC_THREADS threads over fixed chunks of columns (OpenBLAS's own threads
// stay off), so every result is bit-identical for any thread count; a chunk's step 3 follows its
// step 2 on the same thread, while the chunk is in that core's caches (unless D is in ROW order).
// Everything runs on the stream, in order with kernels and copies (cucc::stream_enqueue); the
// descriptors and host scalars are read at call time, device scalars when the work runs.
// Two more type families: CUBLAS_COMPUTE_16F on fp16 data (fp16 scalars) runs the same fp32
// path, which cuBLAS allows ("compute and intermediate storage precisions with at least 16-bit
// half precision"), and CUBLAS_COMPUTE_64F on fp64 data runs OpenBLAS dgemm, for column-major
// matrices without an epilogue. The legacy cuBLAS API (cublas.cpp) builds these same
// descriptors and calls matmul() / matmul_arrays() below: one implementation serves both.
// FP8 operands (E4M3, E5M2) are decoded to fp32 with their scale factors and then take the same
// fp32 path; fp8.cpp holds their rules, decoding and saturating output.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "blas.h"
#include "cublaslt_internal.h"
#include "cucc/streams.h"

using namespace cublaslt_cpu;

namespace {

// ---------------------------------------------------------------------------------------------
// Epilogues: what each supported one does, in the order the element pass applies it.
enum class Activation { kNone, kRelu, kGelu, kGeluGrad };
enum class BiasGrad {
    kNone,
    kRowsOfD,  // DGELU_BGRAD: bias[i] = sum over columns j of D[i, j] (after the GELU gradient)
    kRowsOfA,  // BGRADA: bias[i] = sum over k of op(A)[i, k]
    kColsOfB,  // BGRADB: bias[j] = sum over k of op(B)[k, j]
};
struct Epilogue {
    uint32_t id;
    bool adds_bias;  // bias[i] (length m) added to every column before the activation
    Activation activation;
    bool writes_aux;  // GELU_AUX*: aux = the GELU input
    bool reads_aux;   // DGELU*: D = (alpha op(A) op(B) + beta C) * gelu'(aux)
    BiasGrad bias_grad;
};
const Epilogue kEpilogues[] = {
    {CUBLASLT_EPILOGUE_DEFAULT, false, Activation::kNone, false, false, BiasGrad::kNone},
    {CUBLASLT_EPILOGUE_RELU, false, Activation::kRelu, false, false, BiasGrad::kNone},
    {CUBLASLT_EPILOGUE_BIAS, true, Activation::kNone, false, false, BiasGrad::kNone},
    {CUBLASLT_EPILOGUE_RELU_BIAS, true, Activation::kRelu, false, false, BiasGrad::kNone},
    {CUBLASLT_EPILOGUE_GELU, false, Activation::kGelu, false, false, BiasGrad::kNone},
    {CUBLASLT_EPILOGUE_GELU_AUX, false, Activation::kGelu, true, false, BiasGrad::kNone},
    {CUBLASLT_EPILOGUE_GELU_BIAS, true, Activation::kGelu, false, false, BiasGrad::kNone},
    {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, true, Activation::kGelu, true, false, BiasGrad::kNone},
    {CUBLASLT_EPILOGUE_DGELU, false, Activation::kGeluGrad, false, true, BiasGrad::kNone},
    {CUBLASLT_EPILOGUE_DGELU_BGRAD, false, Activation::kGeluGrad, false, true, BiasGrad::kRowsOfD},
    {CUBLASLT_EPILOGUE_BGRADA, false, Activation::kNone, false, false, BiasGrad::kRowsOfA},
    {CUBLASLT_EPILOGUE_BGRADB, false, Activation::kNone, false, false, BiasGrad::kColsOfB},
};
// Valid cuBLASLt epilogues this implementation does not run (ReLU with a bit-mask aux).
const uint32_t kUnsupportedEpilogues[] = {CUBLASLT_EPILOGUE_RELU_AUX,
                                          CUBLASLT_EPILOGUE_RELU_AUX_BIAS, CUBLASLT_EPILOGUE_DRELU,
                                          CUBLASLT_EPILOGUE_DRELU_BGRAD};

// GELU with the tanh approximation, which cuBLASLt's GELU epilogues use:
// gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
float gelu(float x) {
    float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}
// d gelu / dx = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
float gelu_grad(float x) {
    float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
    float th = tanhf(u);
    float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

// ---------------------------------------------------------------------------------------------
// Element types: the three storage types of the supported combinations, read and written as fp32.
size_t type_size(uint32_t type) {
    return type == CUDA_R_64F ? 8 : type == CUDA_R_32F ? 4 : is_fp8(type) ? 1 : 2;
}

float load(uint32_t type, const void* base, int64_t i) {
    switch (type) {
        case CUDA_R_16BF:
            return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
        case CUDA_R_16F:
            return __half2float(static_cast<const __half*>(base)[i]);
        default:
            return static_cast<const float*>(base)[i];
    }
}

// Rounds to nearest even when the type is narrower than fp32.
void store(uint32_t type, void* base, int64_t i, float v) {
    switch (type) {
        case CUDA_R_16BF:
            static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v);
            break;
        case CUDA_R_16F:
            static_cast<__half*>(base)[i] = __float2half_rn(v);
            break;
        default:
            static_cast<float*>(base)[i] = v;
            break;
    }
}

// The bits of __float2bfloat16_rn(x) without its branches, which mispredict on the random low
// halves of the products: round to nearest even by adding 0x7fff plus the kept part's lowest bit
// (the carry also takes a finite maximum to infinity, as the rounding does), and a NaN becomes
// 0x7fff. The results are the same for every float.
inline uint16_t bf16_bits_rn(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    return (bits & 0x7fffffffu) > 0x7f800000u ? 0x7fffu : static_cast<uint16_t>(rounded);
}

// out[i * step] = convert(x[i]) for rows elements, the contiguous case in a loop of its own, which
// the compiler vectorizes.
template <class T, class F>
void convert_into(T* out, int64_t step, const float* x, int64_t rows, F convert) {
    if (step == 1)
        for (int64_t i = 0; i < rows; i++) out[i] = convert(x[i]);
    else
        for (int64_t i = 0; i < rows; i++) out[i * step] = convert(x[i]);
}

// Rounds column j of an fp32 matrix (x, contiguous) into column j of matrix l at base. The type
// switch sits outside the loop: this runs for every output element.
void store_column(const Layout& l, void* base, int64_t j, const float* x) {
    const int64_t rows = static_cast<int64_t>(l.rows);
    const int64_t step = l.order == CUBLASLT_ORDER_COL ? 1 : l.ld;
    const int64_t first = l.order == CUBLASLT_ORDER_COL ? j * l.ld : j;
    switch (l.type) {
        case CUDA_R_16BF:  // (bf16 bits)
            convert_into(static_cast<uint16_t*>(base) + first, step, x, rows, bf16_bits_rn);
            break;
        case CUDA_R_16F:
            convert_into(static_cast<__half*>(base) + first, step, x, rows,
                         [](float v) { return __float2half_rn(v); });
            break;
        case CUDA_R_8F_E4M3:  // saturated (fp8.cpp)
        case CUDA_R_8F_E5M2:
            convert_into(static_cast<uint8_t*>(base) + first, step, x, rows,
                         [&](float v) { return fp8_saturated(l.type, v); });
            break;
        default:
            convert_into(static_cast<float*>(base) + first, step, x, rows,
                         [](float v) { return v; });
            break;
    }
}

const void* offset(const void* base, uint32_t type, int64_t elements) {
    return static_cast<const char*>(base) + elements * static_cast<int64_t>(type_size(type));
}
void* offset(void* base, uint32_t type, int64_t elements) {
    return static_cast<char*>(base) + elements * static_cast<int64_t>(type_size(type));
}

// Element (i, j) of a matrix, in elements from its start.
int64_t element(const Layout& l, int64_t i, int64_t j) {
    return l.order == CUBLASLT_ORDER_COL ? i + j * l.ld : i * l.ld + j;
}

// Elements from a matrix's first to one past its last element.
int64_t span(const Layout& l) {
    if (l.rows == 0 || l.cols == 0) return 0;
    return element(l, l.rows - 1, l.cols - 1) + 1;
}

// ---------------------------------------------------------------------------------------------
// Validation, shared by cublasLtMatmul and cublasLtMatmulAlgoGetHeuristic: turns descriptors into
// a Problem, or says why cuBLASLt would refuse them. Pointers (the bias and aux ones included,
// which a program may set after choosing its algorithm) are cublasLtMatmul's to check.
struct Problem {
    MatmulDesc desc;  // copies: the caller may change or destroy its descriptors after the call
    Layout a, b, c, d;
    Epilogue epilogue;
    int64_t m, n, k;  // op(A) is m x k, op(B) is k x n, C and D are m x n
    int batch;
    bool trans_a, trans_b;
    uint32_t bias_type, aux_type;
    int64_t bias_length;
    bool uses_bias;  // reads or writes CUBLASLT_MATMUL_DESC_BIAS_POINTER
    bool fp8;        // FP8 A and B (fp8.cpp)
};

bool is_transpose(int32_t op) { return op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

bool supported_types(const MatmulDesc& desc, uint32_t ab, uint32_t cd) {
    switch (desc.compute_type) {
        case CUBLAS_COMPUTE_16F:
        case CUBLAS_COMPUTE_16F_PEDANTIC:
            return desc.scale_type == CUDA_R_16F && ab == CUDA_R_16F && cd == CUDA_R_16F;
        case CUBLAS_COMPUTE_64F:
        case CUBLAS_COMPUTE_64F_PEDANTIC:
            return desc.scale_type == CUDA_R_64F && ab == CUDA_R_64F && cd == CUDA_R_64F;
        default:
            break;
    }
    if (desc.scale_type != CUDA_R_32F) return false;
    switch (desc.compute_type) {
        case CUBLAS_COMPUTE_32F:
        case CUBLAS_COMPUTE_32F_PEDANTIC:
            return (ab == CUDA_R_32F && cd == CUDA_R_32F) ||
                   (ab == CUDA_R_16BF && (cd == CUDA_R_16BF || cd == CUDA_R_32F)) ||
                   (ab == CUDA_R_16F && (cd == CUDA_R_16F || cd == CUDA_R_32F));
        case CUBLAS_COMPUTE_32F_FAST_TF32:  // fp32 inputs only; computed in full fp32 here
        case CUBLAS_COMPUTE_32F_FAST_16BF:
        case CUBLAS_COMPUTE_32F_FAST_16F:
            return ab == CUDA_R_32F && cd == CUDA_R_32F;
        default:
            return false;
    }
}

cublasStatus_t check_layout(const Layout& l) {
    if (l.order != CUBLASLT_ORDER_COL && l.order != CUBLASLT_ORDER_ROW)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (l.batch_mode != CUBLASLT_BATCH_MODE_STRIDED || l.plane_offset != 0)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    // sgemm takes int dimensions.
    if (l.rows > INT32_MAX || l.cols > INT32_MAX || l.ld > INT32_MAX)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    uint64_t min_ld = l.order == CUBLASLT_ORDER_COL ? l.rows : l.cols;
    if (l.ld < 1 || static_cast<uint64_t>(l.ld) < min_ld) return CUBLAS_STATUS_INVALID_VALUE;
    if (l.batch_count < 1 || l.batch_stride < 0) return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t check_problem(cublasLtMatmulDesc_t desc_handle, cublasLtMatrixLayout_t A,
                             cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C,
                             cublasLtMatrixLayout_t D, Problem* p) {
    if (desc_handle == nullptr || A == nullptr || B == nullptr || C == nullptr || D == nullptr)
        return CUBLAS_STATUS_INVALID_VALUE;
    p->desc = *desc_of(desc_handle);
    p->a = *layout_of(A);
    p->b = *layout_of(B);
    p->c = *layout_of(C);
    p->d = *layout_of(D);
    const MatmulDesc& desc = p->desc;

    // Types and modes this implementation runs; FP8 has rules of its own (fp8.cpp).
    p->fp8 = is_fp8(p->a.type) || is_fp8(p->b.type);
    if (p->fp8) {
        cublasStatus_t status = check_fp8_types(desc, p->a, p->b, p->c, p->d);
        if (status != CUBLAS_STATUS_SUCCESS) return status;
    } else if (p->a.type != p->b.type || p->c.type != p->d.type ||
               !supported_types(desc, p->a.type, p->d.type)) {
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (desc.pointer_mode != CUBLASLT_POINTER_MODE_HOST &&
        desc.pointer_mode != CUBLASLT_POINTER_MODE_DEVICE)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (desc.transc != CUBLAS_OP_N || desc.fill_mode != CUBLAS_FILL_MODE_FULL)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    for (int32_t op : {desc.transa, desc.transb})
        if (op != CUBLAS_OP_N && !is_transpose(op)) return CUBLAS_STATUS_INVALID_VALUE;
    // cublasLt.h: scaling attributes set for a type combination without scaling are invalid.
    if (!p->fp8 && (desc.a_scale || desc.b_scale || desc.c_scale || desc.d_scale || desc.amax_d ||
                    desc.aux_scale || desc.aux_amax || desc.d_out_scale || desc.a_scale_mode ||
                    desc.b_scale_mode || desc.c_scale_mode || desc.d_scale_mode ||
                    desc.aux_scale_mode || desc.d_out_scale_mode))
        return CUBLAS_STATUS_INVALID_VALUE;

    // Layouts and shapes.
    for (const Layout* l : {&p->a, &p->b, &p->c, &p->d}) {
        cublasStatus_t status = check_layout(*l);
        if (status != CUBLAS_STATUS_SUCCESS) return status;
    }
    p->trans_a = is_transpose(desc.transa);
    p->trans_b = is_transpose(desc.transb);
    p->m = static_cast<int64_t>(p->trans_a ? p->a.cols : p->a.rows);
    p->k = static_cast<int64_t>(p->trans_a ? p->a.rows : p->a.cols);
    int64_t k_of_b = static_cast<int64_t>(p->trans_b ? p->b.cols : p->b.rows);
    p->n = static_cast<int64_t>(p->trans_b ? p->b.rows : p->b.cols);
    if (k_of_b != p->k) return CUBLAS_STATUS_INVALID_VALUE;
    for (const Layout* l : {&p->c, &p->d})
        if (static_cast<int64_t>(l->rows) != p->m || static_cast<int64_t>(l->cols) != p->n)
            return CUBLAS_STATUS_INVALID_VALUE;
    p->batch = p->d.batch_count;
    for (const Layout* l : {&p->a, &p->b, &p->c})
        if (l->batch_count != p->batch) return CUBLAS_STATUS_INVALID_VALUE;
    // Inputs may repeat a matrix across the batch (stride 0); outputs must not overlap.
    if (p->batch > 1 && p->d.batch_stride < span(p->d)) return CUBLAS_STATUS_INVALID_VALUE;

    // The epilogue and its bias and aux arguments.
    const Epilogue* e = nullptr;
    for (const Epilogue& candidate : kEpilogues)
        if (candidate.id == desc.epilogue) e = &candidate;
    if (e == nullptr) {
        for (uint32_t id : kUnsupportedEpilogues)
            if (id == desc.epilogue) return CUBLAS_STATUS_NOT_SUPPORTED;
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    p->epilogue = *e;
    // fp64: column-major matrices, no epilogue.
    if (p->d.type == CUDA_R_64F) {
        for (const Layout* l : {&p->a, &p->b, &p->c, &p->d})
            if (l->order != CUBLASLT_ORDER_COL) return CUBLAS_STATUS_NOT_SUPPORTED;
        if (desc.epilogue != CUBLASLT_EPILOGUE_DEFAULT) return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    p->bias_type = desc.bias_data_type == -1 ? p->d.type : desc.bias_data_type;
    if (p->fp8) {
        cublasStatus_t status = check_fp8_problem(desc, p->a, p->b, p->c, p->d, p->m, p->k,
                                                  p->batch, desc.epilogue, &p->bias_type);
        if (status != CUBLAS_STATUS_SUCCESS) return status;
    }
    p->aux_type = desc.aux_data_type == -1 ? p->d.type : desc.aux_data_type;
    p->bias_length = e->bias_grad == BiasGrad::kColsOfB ? p->n : p->m;
    p->uses_bias = e->adds_bias || e->bias_grad != BiasGrad::kNone;
    if (p->uses_bias) {
        if (desc.bias_batch_stride < 0) return CUBLAS_STATUS_INVALID_VALUE;
        // The bias (gradient) has D's type (FP8: the type check_fp8_problem chose).
        if (!p->fp8 && p->bias_type != p->d.type) return CUBLAS_STATUS_NOT_SUPPORTED;
        bool writes_bias = e->bias_grad != BiasGrad::kNone;
        if (writes_bias && p->batch > 1 && desc.bias_batch_stride < p->bias_length)
            return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (e->writes_aux || e->reads_aux) {
        // cublasLt.h: the GELU aux ld is a multiple of 8, at least the rows of D; the batch stride
        // a multiple of 8. The aux matrix is column-major and has D's type.
        if (desc.aux_ld < p->m || desc.aux_ld % 8 != 0 || desc.aux_batch_stride < 0 ||
            desc.aux_batch_stride % 8 != 0)
            return CUBLAS_STATUS_INVALID_VALUE;
        if (p->aux_type != p->d.type) return CUBLAS_STATUS_INVALID_VALUE;
        if (e->writes_aux && p->batch > 1 && p->n > 0 &&
            desc.aux_batch_stride < desc.aux_ld * (p->n - 1) + p->m)
            return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Arithmetic, run on the stream.

// op(X) as sgemm (dgemm) wants it: column-major fp32 (fp64) data with its ld and a transpose
// flag.
template <class T>
struct PanelOf {
    const T* data;
    int ld;
    bool trans;
};
using Panel = PanelOf<float>;

// The stored matrix viewed as column-major: a ROW-order rows x cols matrix is the COL-order
// cols x rows matrix with the same ld, so ROW order flips the transpose. 16-bit data is widened
// into `scratch` (packed, ld = stored rows).
Panel as_fp32(const Layout& l, const void* data, bool trans, std::vector<float>& scratch) {
    bool row = l.order == CUBLASLT_ORDER_ROW;
    int64_t rows = static_cast<int64_t>(row ? l.cols : l.rows);
    int64_t cols = static_cast<int64_t>(row ? l.rows : l.cols);
    if (l.type == CUDA_R_32F)
        return {static_cast<const float*>(data), static_cast<int>(l.ld), trans != row};
    scratch.resize(static_cast<size_t>(rows * cols));
    for (int64_t j = 0; j < cols; j++) {
        float* out = scratch.data() + j * rows;
        if (l.type == CUDA_R_16BF) {  // a bf16 is the upper half of the float it widens to
            const uint16_t* in = static_cast<const uint16_t*>(data) + j * l.ld;
            for (int64_t i = 0; i < rows; i++) {
                const uint32_t bits = static_cast<uint32_t>(in[i]) << 16;
                memcpy(&out[i], &bits, sizeof bits);
            }
        } else {
            const __half* in = static_cast<const __half*>(data) + j * l.ld;
            for (int64_t i = 0; i < rows; i++) out[i] = __half2float(in[i]);
        }
    }
    return {scratch.data(), static_cast<int>(std::max<int64_t>(rows, 1)), trans != row};
}

float panel_at(const Panel& p, int64_t i, int64_t j) {
    return p.trans ? p.data[j + i * p.ld] : p.data[i + j * p.ld];
}

// Work is cut into chunks of output columns whatever the thread count, and each chunk is
// computed the same way by whichever thread takes it, so results never depend on the number of
// threads. The chunk width depends on the number of columns only: 512, or 256 where 512 would
// leave fewer than 4 chunks to share out. Each chunk is one sgemm, which packs all of op(A)
// again: m k copies per 2 m k width flops, about 10% of the time at 256 columns on an AVX2 core
// and half that at 512 (and twice those shares on a core with an AVX-512 sgemm, which is faster
// than its copies). Below kParallelFlops a matmul runs on the calling thread alone (starting
// threads costs more than it saves).
constexpr double kParallelFlops = 1 << 24;

struct Chunks {
    int64_t width, count;
    int64_t end(int64_t c, int64_t columns) const { return std::min(columns, (c + 1) * width); }
};
Chunks chunks_of(int64_t columns) {
    const int64_t width = columns >= 4 * 512 ? 512 : 256;
    return {width, (columns + width - 1) / width};
}

// Runs body(c) for every chunk c in [0, count), on up to `threads` threads (the caller's included).
void for_each_chunk(int64_t count, int threads, const std::function<void(int64_t)>& body) {
    std::atomic<int64_t> next{0};
    auto worker = [&] {
        for (int64_t c = next++; c < count; c = next++) body(c);
    };
    std::vector<std::thread> helpers;
    for (int64_t i = 1; i < std::min<int64_t>(threads, count); i++) helpers.emplace_back(worker);
    worker();
    for (std::thread& t : helpers) t.join();
}

struct Operands {
    const void* A;
    const void* B;
    const void* C;
    void* D;
};

// The BLAS gemm of an element type (the argument only names the type).
GemmFn<float> blas_gemm(float) { return blas().sgemm; }
GemmFn<double> blas_gemm(double) { return blas().dgemm; }

// T = alpha op(A) op(B) + beta T, T of fp32 or fp64 with layout t (COL or ROW order). beta == 0
// ignores what T held (NaN included), as BLAS does; so does alpha == 0 for op(A) op(B). The work
// is cut into chunks of T's stored columns (chunks_of); `after`, when given, runs for each chunk
// on the thread that computed it, right after it, while the chunk is still in that core's caches
// (run_batch's element pass).
template <class E>
void gemm(const PanelOf<E>& pa, const PanelOf<E>& pb, int64_t m, int64_t n, int64_t k, E alpha,
          E beta, E* T, const Layout& t, int threads,
          const std::function<void(int64_t)>& after = nullptr) {
    if (m == 0 || n == 0) return;
    // The BLAS call computes X = op(P) op(Q), column-major. In COL order X is T; a ROW-order T
    // is stored as its transpose, X = T^T = op(B)^T op(A)^T, and op(Y)^T is Y with the flag
    // flipped.
    const bool row = t.order == CUBLASLT_ORDER_ROW;
    const PanelOf<E> P = row ? PanelOf<E>{pb.data, pb.ld, !pb.trans} : pa;
    const PanelOf<E> Q = row ? PanelOf<E>{pa.data, pa.ld, !pa.trans} : pb;
    const int64_t rows = row ? n : m, cols = row ? m : n;
    const auto op = [](bool trans) { return trans ? kBlasTrans : kBlasNoTrans; };
    const GemmFn<E> blas_gemm_e = blas_gemm(E());
    const Chunks chunks = chunks_of(cols);
    for_each_chunk(chunks.count, threads, [&](int64_t c) {
        const int64_t j0 = c * chunks.width, j1 = chunks.end(c, cols);
        if (k == 0 || alpha == 0) {
            for (int64_t j = j0; j < j1; j++)
                for (int64_t i = 0; i < rows; i++) {
                    E& x = T[i + j * t.ld];
                    x = beta == 0 ? E(0) : beta * x;
                }
        } else {
            const E* q = Q.trans ? Q.data + j0 : Q.data + j0 * Q.ld;  // op(Q)[:, j0]
            blas_gemm_e(kBlasColMajor, op(P.trans), op(Q.trans), static_cast<int>(rows),
                        static_cast<int>(j1 - j0), static_cast<int>(k), alpha, P.data, P.ld, q,
                        Q.ld, beta, T + j0 * t.ld, static_cast<int>(t.ld));
        }
        if (after) after(c);
    });
}

// An fp64 matmul (column-major, no epilogue): D = alpha op(A) op(B) + beta C, in D.
void run_batch_f64(const Problem& p, const Operands& ops, int b, double alpha, double beta) {
    const double* A = static_cast<const double*>(ops.A) + b * p.a.batch_stride;
    const double* B = static_cast<const double*>(ops.B) + b * p.b.batch_stride;
    const double* C = ops.C ? static_cast<const double*>(ops.C) + b * p.c.batch_stride : nullptr;
    double* D = static_cast<double*>(ops.D) + b * p.d.batch_stride;
    if (beta != 0 && C != D)
        for (int64_t j = 0; j < p.n; j++)
            for (int64_t i = 0; i < p.m; i++) D[i + j * p.d.ld] = C[i + j * p.c.ld];
    int threads = 2.0 * p.m * p.n * p.k < kParallelFlops ? 1 : cucc::thread_count();
    gemm(PanelOf<double>{A, static_cast<int>(p.a.ld), p.trans_a},
         PanelOf<double>{B, static_cast<int>(p.b.ld), p.trans_b}, p.m, p.n, p.k, alpha, beta, D,
         p.d, threads);
}

void run_batch(const Problem& p, const Operands& ops, int b, float alpha, float beta) {
    thread_local std::vector<float> scratch_a, scratch_b, product, sums, partial_sums, partial_amax;
    const MatmulDesc& desc = p.desc;
    const Epilogue& e = p.epilogue;
    const int64_t m = p.m, n = p.n, k = p.k;
    const int threads = 2.0 * m * n * k < kParallelFlops ? 1 : cucc::thread_count();
    const void* A = offset(ops.A, p.a.type, b * p.a.batch_stride);
    const void* B = offset(ops.B, p.b.type, b * p.b.batch_stride);
    const void* C = ops.C ? offset(ops.C, p.c.type, b * p.c.batch_stride) : nullptr;
    void* D = offset(ops.D, p.d.type, b * p.d.batch_stride);
    void* bias = desc.bias
                     ? offset(const_cast<void*>(desc.bias), p.bias_type, b * desc.bias_batch_stride)
                     : nullptr;
    void* aux = desc.aux ? offset(desc.aux, p.aux_type, b * desc.aux_batch_stride) : nullptr;
    Panel pa, pb;
    // FP8 (column-major): A and B decoded into K x M and K x N panels with the scales that vary
    // inside them; per-tensor scales of A and B join alpha, C's joins beta (fp8.cpp).
    float d_scale = 1.0f;
    if (p.fp8) {
        dequantize_fp8(p.a, p.trans_a, A, desc.a_scale_mode, desc.a_scale, scratch_a);
        dequantize_fp8(p.b, !p.trans_b, B, desc.b_scale_mode, desc.b_scale, scratch_b);
        pa = {scratch_a.data(), static_cast<int>(std::max<int64_t>(k, 1)), true};
        pb = {scratch_b.data(), static_cast<int>(std::max<int64_t>(k, 1)), false};
        if (desc.a_scale_mode == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)
            alpha *= scale_or_one(desc.a_scale);
        if (desc.b_scale_mode == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)
            alpha *= scale_or_one(desc.b_scale);
        beta *= scale_or_one(desc.c_scale);
        d_scale = scale_or_one(desc.d_scale);
    } else {
        pa = as_fp32(p.a, A, p.trans_a, scratch_a);
        pb = as_fp32(p.b, B, p.trans_b, scratch_b);
    }

    // T, the fp32 result of sgemm: D itself when D is fp32 (then beta C goes through sgemm, C
    // copied into D first unless it is D), else a column-major m x n scratch.
    const bool t_is_d = p.d.type == CUDA_R_32F;
    Layout t = p.d;
    float* T = static_cast<float*>(D);
    if (!t_is_d) {
        t = Layout{CUDA_R_32F,
                   CUBLASLT_ORDER_COL,
                   static_cast<uint64_t>(m),
                   static_cast<uint64_t>(n),
                   std::max<int64_t>(m, 1),
                   1,
                   0,
                   0,
                   0};
        product.resize(static_cast<size_t>(m * n));
        T = product.data();
    }
    const bool c_in_t = t_is_d && beta != 0.0f;
    if (c_in_t && C != D)
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < m; i++)
                T[element(t, i, j)] = load(p.c.type, C, element(p.c, i, j));

    // Bias gradients of the operands, fp32 sums in a fixed order.
    sums.assign(static_cast<size_t>(p.bias_length), 0.0f);
    if (e.bias_grad == BiasGrad::kRowsOfA)
        for (int64_t kk = 0; kk < k; kk++)
            for (int64_t i = 0; i < m; i++) sums[i] += panel_at(pa, i, kk);
    if (e.bias_grad == BiasGrad::kColsOfB)
        for (int64_t j = 0; j < n; j++)
            for (int64_t kk = 0; kk < k; kk++) sums[j] += panel_at(pb, kk, j);

    // The element pass over chunks of D's columns: the epilogue in fp32 on each column of T, then
    // the column rounded into D (unless T is D). C is read only when beta != 0 (it may hold NaN or
    // be null otherwise). DGELU_BGRAD's row sums are summed per chunk, then over chunks in order.
    // With T in COL order gemm's chunks are these, and each runs right after its sgemm; a
    // ROW-order D (T) is chunked along its rows there, so its pass runs after the whole product.
    // FP8: the amax (CUBLASLT_MATMUL_DESC_AMAX_D_POINTER) is the largest |x| of the epilogue's
    // results before the D scale multiplies them, per chunk, then over chunks ([expected]: NaN
    // elements do not count). An FP8 D is scaled here and saturated by store_column.
    const bool read_c = beta != 0.0f && !c_in_t;
    const bool amax = desc.amax_d != nullptr, scale_d = is_fp8(p.d.type);
    const bool epilogue = read_c || e.adds_bias || e.activation != Activation::kNone ||
                          e.bias_grad == BiasGrad::kRowsOfD || amax || scale_d;
    const Chunks chunks = chunks_of(n);
    if (e.bias_grad == BiasGrad::kRowsOfD)
        partial_sums.assign(static_cast<size_t>(chunks.count * m), 0.0f);
    if (amax) partial_amax.assign(static_cast<size_t>(chunks.count), 0.0f);
    float* partial = partial_sums.data();  // (the helper threads have their own thread_locals)
    float* chunk_amax = partial_amax.data();
    const int64_t t_step = t.order == CUBLASLT_ORDER_COL ? 1 : t.ld;  // between rows of a column
    // The common epilogue (an fp32 bias added or none, its row sums or none, nothing else) as
    // plain loops over a contiguous column, which the compiler vectorizes: the same operations
    // on each element as the general loop.
    const bool plain = !read_c && e.activation == Activation::kNone && !amax && !scale_d &&
                       t_step == 1 && (!e.adds_bias || p.bias_type == CUDA_R_32F);
    const float* bias32 = plain && e.adds_bias ? static_cast<const float*>(bias) : nullptr;
    const auto element_pass = [&](int64_t c) {
        float* row_sums = e.bias_grad == BiasGrad::kRowsOfD ? partial + c * m : nullptr;
        for (int64_t j = c * chunks.width; j < chunks.end(c, n); j++) {
            float* column = T + element(t, 0, j);
            if (plain) {
                if (bias32)
                    for (int64_t i = 0; i < m; i++) column[i] += bias32[i];
                if (row_sums)
                    for (int64_t i = 0; i < m; i++) row_sums[i] += column[i];
            }
            for (int64_t i = 0; epilogue && !plain && i < m; i++) {
                float x = column[i * t_step];
                if (read_c) x += beta * load(p.c.type, C, element(p.c, i, j));
                if (e.adds_bias) x += load(p.bias_type, bias, i);
                float out = x;
                switch (e.activation) {
                    case Activation::kNone:
                        break;
                    case Activation::kRelu:
                        out = fmaxf(x, 0.0f);
                        break;
                    case Activation::kGelu:
                        if (e.writes_aux) store(p.aux_type, aux, i + j * desc.aux_ld, x);
                        out = gelu(x);
                        break;
                    case Activation::kGeluGrad:
                        out = x * gelu_grad(load(p.aux_type, aux, i + j * desc.aux_ld));
                        break;
                }
                if (row_sums) row_sums[i] += out;
                if (amax && fabsf(out) > chunk_amax[c]) chunk_amax[c] = fabsf(out);
                column[i * t_step] = scale_d ? out * d_scale : out;
            }
            if (!t_is_d) store_column(p.d, D, j, column);
        }
    };
    const bool pass = epilogue || !t_is_d, fused = pass && t.order == CUBLASLT_ORDER_COL;
    gemm(pa, pb, m, n, k, alpha, c_in_t ? beta : 0.0f, T, t, threads,
         fused ? std::function<void(int64_t)>(element_pass) : nullptr);
    if (pass && !fused) for_each_chunk(chunks.count, threads, element_pass);
    if (e.bias_grad == BiasGrad::kRowsOfD)
        for (int64_t c = 0; c < chunks.count; c++)
            for (int64_t i = 0; i < m; i++) sums[i] += partial_sums[c * m + i];
    if (e.bias_grad != BiasGrad::kNone)
        for (int64_t i = 0; i < p.bias_length; i++) store(p.bias_type, bias, i, sums[i]);
    if (amax) {
        float largest = 0.0f;
        for (int64_t c = 0; c < chunks.count; c++) largest = std::max(largest, partial_amax[c]);
        *static_cast<float*>(desc.amax_d) = largest;
    }
}

bool same_layout(const Layout& x, const Layout& y) {
    return x.type == y.type && x.order == y.order && x.rows == y.rows && x.cols == y.cols &&
           x.ld == y.ld && x.batch_count == y.batch_count && x.batch_stride == y.batch_stride;
}

// On a GPU, cuBLASLt's kernels dereference these pointers: memory that is not device memory is an
// illegal access there, and a pointer less aligned than the kernel assumes a misaligned access.
// Both are device faults, so both end the process here rather than happen to work.
// `alignment`: the element size, or more when the algorithm came from a heuristic whose
// preferences promised it (see cublasLtMatmulAlgoGetHeuristic).
void require_operand(const char* api, const void* ptr, const char* what, uint64_t alignment) {
    if (ptr == nullptr) return;
    if (!cucc::is_device_pointer(ptr)) {
        fprintf(stderr, "%s: %s (%p) is not device memory (cudaMalloc); a GPU would fault\n", api,
                what, ptr);
        abort();
    }
    if (reinterpret_cast<uintptr_t>(ptr) % alignment != 0) {
        fprintf(stderr,
                "%s: %s (%p) is not aligned to %llu bytes, as its element type or the "
                "algorithm's CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES requires; a GPU would "
                "fault on a misaligned address\n",
                api, what, ptr, static_cast<unsigned long long>(alignment));
        abort();
    }
}

// alpha and beta: read at call time from the host, or when the work runs from device memory.
struct Scalars {
    bool device;
    uint32_t type;  // the scale type: fp32, fp16 or fp64
    double alpha, beta;
    const void* alpha_ptr;
    const void* beta_ptr;
};

double read_scalar(uint32_t type, const void* p) {
    switch (type) {
        case CUDA_R_16F:
            return __half2float(*static_cast<const __half*>(p));
        case CUDA_R_64F:
            return *static_cast<const double*>(p);
        default:
            return *static_cast<const float*>(p);
    }
}

size_t scalar_size(uint32_t type) { return type == CUDA_R_64F ? 8 : type == CUDA_R_16F ? 2 : 4; }

// Checks a call as cublasLtMatmul does after its handle (the legacy API checks its own arguments
// first): the problem, the pointers, the scalars. With operands_known the operands must be
// device memory (else the process aborts, as a GPU would fault); pointer arrays are checked per
// matrix when they are read.
cublasStatus_t check_call(const char* api, cublasLtMatmulDesc_t desc, const void* alpha,
                          const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                          cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                          cublasLtMatrixLayout_t Cdesc, const void* D, cublasLtMatrixLayout_t Ddesc,
                          const cublasLtMatmulAlgo_t* algo, bool operands_known, Problem* p,
                          Scalars* sc) {
    cublasStatus_t status = check_problem(desc, Adesc, Bdesc, Cdesc, Ddesc, p);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    if (alpha == nullptr || beta == nullptr || A == nullptr || B == nullptr || D == nullptr)
        return CUBLAS_STATUS_INVALID_VALUE;
    if ((p->uses_bias && p->desc.bias == nullptr) ||
        ((p->epilogue.writes_aux || p->epilogue.reads_aux) && p->desc.aux == nullptr))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (algo != nullptr && algo->data[0] != kAlgoId) return CUBLAS_STATUS_INVALID_VALUE;
    // In place (C == D) needs C laid out as D.
    if (C != nullptr && C == D && !same_layout(p->c, p->d)) return CUBLAS_STATUS_INVALID_VALUE;
    sc->device = p->desc.pointer_mode == CUBLASLT_POINTER_MODE_DEVICE;
    sc->type = static_cast<uint32_t>(p->desc.scale_type);
    sc->alpha_ptr = alpha;
    sc->beta_ptr = beta;
    if (sc->device) {
        require_operand(api, alpha, "alpha (pointer mode DEVICE)", scalar_size(sc->type));
        require_operand(api, beta, "beta (pointer mode DEVICE)", scalar_size(sc->type));
        sc->alpha = sc->beta = 0;
    } else {
        if (cucc::is_device_pointer(alpha) || cucc::is_device_pointer(beta)) {
            fprintf(stderr,
                    "%s: alpha or beta is device memory but the pointer mode is HOST; a GPU would "
                    "crash reading it from the host\n",
                    api);
            abort();
        }
        sc->alpha = read_scalar(sc->type, alpha);
        sc->beta = read_scalar(sc->type, beta);
        if (C == nullptr && sc->beta != 0) return CUBLAS_STATUS_INVALID_VALUE;
    }
    // FP8 kernels need 16-byte aligned matrices ("Tensor Core Usage") and tiled scale tensors;
    // [expected] NOT_SUPPORTED.
    if (operands_known && p->fp8 && !fp8_pointers_aligned(p->desc, A, B, C, D))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (operands_known) {
        const auto alignment = [&](const Layout& l, int i) {
            return std::max<uint64_t>(type_size(l.type), algo ? algo->data[1 + i] : 1);
        };
        require_operand(api, A, "A", alignment(p->a, 0));
        require_operand(api, B, "B", alignment(p->b, 1));
        require_operand(api, C, "C", alignment(p->c, 2));
        require_operand(api, D, "D", alignment(p->d, 3));
    }
    require_operand(api, p->desc.bias, "the bias (CUBLASLT_MATMUL_DESC_BIAS_POINTER)",
                    type_size(p->bias_type));
    require_operand(api, p->desc.aux, "the aux matrix (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER)",
                    type_size(p->aux_type));
    // E8M0 scales (VEC32_UE8M0) are bytes, the others fp32.
    const auto scale_size = [](int32_t mode) {
        return mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 ? 1 : 4;
    };
    require_operand(api, p->desc.a_scale, "the A scale (CUBLASLT_MATMUL_DESC_A_SCALE_POINTER)",
                    scale_size(p->desc.a_scale_mode));
    require_operand(api, p->desc.b_scale, "the B scale (CUBLASLT_MATMUL_DESC_B_SCALE_POINTER)",
                    scale_size(p->desc.b_scale_mode));
    require_operand(api, p->desc.c_scale, "the C scale (CUBLASLT_MATMUL_DESC_C_SCALE_POINTER)", 4);
    require_operand(api, p->desc.d_scale, "the D scale (CUBLASLT_MATMUL_DESC_D_SCALE_POINTER)", 4);
    require_operand(api, p->desc.amax_d, "the amax (CUBLASLT_MATMUL_DESC_AMAX_D_POINTER)", 4);
    return CUBLAS_STATUS_SUCCESS;
}

// Runs every matrix of the batch, on the stream (device scalars are read now).
void run_problem(const char* api, const Problem& p, const Operands& ops, const Scalars& sc) {
    double a = sc.device ? read_scalar(sc.type, sc.alpha_ptr) : sc.alpha;
    double b = sc.device ? read_scalar(sc.type, sc.beta_ptr) : sc.beta;
    if (ops.C == nullptr && b != 0) {
        fprintf(stderr, "%s: beta != 0 read from device memory but C is null\n", api);
        abort();
    }
    for (int i = 0; i < p.batch; i++) {
        if (p.d.type == CUDA_R_64F) run_batch_f64(p, ops, i, a, b);
        else run_batch(p, ops, i, static_cast<float>(a), static_cast<float>(b));
    }
}

cublasStatus_t enqueued(cudaError_t queued) {
    // An invalid stream: on a GPU the kernel launch fails.
    return queued == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
    if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (preference == nullptr || requested <= 0 || results == nullptr || returned == nullptr)
        return CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    Problem p;
    cublasStatus_t status = check_problem(desc, Adesc, Bdesc, Cdesc, Ddesc, &p);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    // One algorithm; it needs no workspace, so it fits any
    // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES. GPU kernels load 16 bytes at a time where the
    // preferences allow it (by default they promise 256-byte aligned A, B, C and D); the algorithm
    // remembers the alignment it may assume.
    results[0] = cublasLtMatmulHeuristicResult_t{};
    results[0].algo.data[0] = kAlgoId;
    const Preference& pref = *pref_of(preference);
    const uint32_t promised[4] = {pref.min_alignment_a, pref.min_alignment_b, pref.min_alignment_c,
                                  pref.min_alignment_d};
    for (int i = 0; i < 4; i++) results[0].algo.data[1 + i] = std::min<uint32_t>(promised[i], 16);
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                              cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                              cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
    if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (workspace == nullptr && workspace_bytes > 0) {
        // Checked after the problem, as cuBLASLt orders its checks.
        Problem p;
        cublasStatus_t status = check_problem(desc, Adesc, Bdesc, Cdesc, Ddesc, &p);
        return status != CUBLAS_STATUS_SUCCESS ? status : CUBLAS_STATUS_INVALID_VALUE;
    }
    return matmul("cublasLtMatmul", desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,
                  stream);
}

}  // extern "C"

namespace cublaslt_cpu {

cublasStatus_t matmul(const char* api, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                      cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                      const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                      cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                      cudaStream_t stream) {
    Problem p;
    Scalars sc;
    cublasStatus_t status = check_call(api, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D,
                                       Ddesc, algo, true, &p, &sc);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    Operands ops{A, B, C, D};
    return enqueued(
        cucc::stream_enqueue(stream, {api, nullptr, [=] { run_problem(api, p, ops, sc); }}));
}

cublasStatus_t matmul_arrays(const char* api, cublasLtMatmulDesc_t desc, const void* alpha,
                             const void* const* A, cublasLtMatrixLayout_t Adesc,
                             const void* const* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                             void* const* C, cublasLtMatrixLayout_t Cdesc, int batch,
                             cudaStream_t stream) {
    Problem p;
    Scalars sc;
    cublasStatus_t status = check_call(api, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, C,
                                       Cdesc, nullptr, false, &p, &sc);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    // The arrays are device memory that a GPU kernel reads: read when the work runs.
    for (const void* array : {(const void*)A, (const void*)B, (const void*)C})
        require_operand(api, array, "a pointer array", sizeof(void*));
    return enqueued(cucc::stream_enqueue(
        stream, {api, nullptr, [=] {
                     for (int i = 0; i < batch; i++) {
                         Operands ops{A[i], B[i], C[i], C[i]};
                         require_operand(api, ops.A, "a matrix of Aarray", type_size(p.a.type));
                         require_operand(api, ops.B, "a matrix of Barray", type_size(p.b.type));
                         require_operand(api, ops.D, "a matrix of Carray", type_size(p.d.type));
                         run_problem(api, p, ops, sc);
                     }
                 }}));
}

}  // namespace cublaslt_cpu
