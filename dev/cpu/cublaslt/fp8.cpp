// fp8.cpp: FP8 matmuls of the CPU cuBLASLt: which problems cublasLtMatmul accepts with
// CUDA_R_8F_E4M3 / CUDA_R_8F_E5M2 operands on the simulated device (compute capability 9.0,
// Hopper: dev/cpu/runtime/device.cpp), the decoding of FP8 operands with their scale factors, and
// the saturating FP8 output.
//
// Sources: the cuBLAS documentation (docs.nvidia.com/cuda/cublas), sections "cublasLtMatmul()"
// (the FP8 requirements and the table of FP8 type combinations), "Tensor Core Usage" (the 16-byte
// alignment FP8 kernels require), "cublasLtMatmulDescAttributes_t" and
// "cublasLtMatmulMatrixScale_t"; cublasLt.h's comments on those enums; cuda_fp8.h for the FP8
// encodings (decoding and saturating encoding use its conversion functions, so the bits mean what
// they mean in CUDA).
//
// What the documentation did not let us confirm is marked [expected]; scripts/gpu_check.sh lists
// those points for the comparison with the native library.
//
// The arithmetic (matmul.cpp's run_batch): an FP8 operand is decoded to fp32, exactly, and
// multiplied by its scale factor where the scale varies inside the matrix (OUTER_VEC_32F,
// VEC128_32F, BLK128x128_32F: one fp32 rounding per element); per-tensor scales (SCALAR_32F) fold
// into alpha, the C scale into beta. The product is then the fp32 sgemm of every other type.
// CUBLASLT_MATMUL_DESC_FAST_ACCUM (cublasLt.h): fast accumulation may be faster but less accurate,
// because intermediate results are not periodically promoted to higher precision; here every
// accumulation is fp32, with or without it, so the flag changes nothing.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <vector>

#include "cublaslt_internal.h"

namespace cublaslt_cpu {

namespace {

// Compute capability of the simulated device (dev/cpu/runtime/device.cpp reports 9.0).
constexpr int kDeviceMajor = 9;

__nv_fp8_interpretation_t interpretation(uint32_t type) {
    return type == CUDA_R_8F_E4M3 ? __NV_E4M3 : __NV_E5M2;
}

bool is_16bit(uint32_t type) { return type == CUDA_R_16BF || type == CUDA_R_16F; }

// The FP8 type combinations of the cublasLtMatmul() FP8 table (compute CUBLAS_COMPUTE_32F, scale
// type CUDA_R_32F): A/B E4M3 x E4M3, E4M3 x E5M2 or E5M2 x E4M3 (E5M2 x E5M2 is not in the table);
// C bf16 or fp16 with D of C's type or FP8 (E5M2 D only when one input is E5M2), or C and D fp32.
bool fp8_types_supported(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    if (!is_fp8(a) || !is_fp8(b) || (a == CUDA_R_8F_E5M2 && b == CUDA_R_8F_E5M2)) return false;
    if (c == CUDA_R_32F) return d == CUDA_R_32F;
    if (!is_16bit(c)) return false;
    if (d == c || d == CUDA_R_8F_E4M3) return true;
    return d == CUDA_R_8F_E5M2 && (a == CUDA_R_8F_E5M2 || b == CUDA_R_8F_E5M2);
}

// The table's bias type: bf16 for fp32 C ([expected]), else C's type. It is also the default when
// CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE is unset (cublasLt.h: FP8 kernels with fp32 or FP8 output
// are the exceptions to "bias has D's type").
uint32_t fp8_bias_type(uint32_t c) { return c == CUDA_R_32F ? uint32_t{CUDA_R_16BF} : c; }

bool is_block_mode(int32_t mode) {
    return mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ||
           mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
}

// The scale modes of A and B together. cublasLt.h's cublasLtMatmulMatrixScale_t:
//   SCALAR_32F     one fp32 for the whole matrix;
//   OUTER_VEC_32F  A and B only: M fp32 for A, N for B; element (i, j) of the product is
//                  multiplied by A's scale i and B's scale j;
//   VEC128_32F     one fp32 per 128 elements along the innermost dimension (K, in the TN layout
//                  FP8 requires): "1D block scaling";
//   BLK128x128_32F one fp32 per 128 x 128 block: "2D block scaling";
//   VEC32_UE8M0    (MXFP8) one E8M0 per 32 elements along K: Blackwell (compute capability 10.0)
//                  and later, so refused here;
//   VEC16_UE4M3    (NVFP4) for FP4 data, not FP8: refused.
cublasStatus_t check_ab_modes(int32_t a_mode, int32_t b_mode) {
    for (int32_t mode : {a_mode, b_mode})
        if (mode < 0 || mode >= CUBLASLT_MATMUL_MATRIX_SCALE_END)
            return CUBLAS_STATUS_INVALID_VALUE;
    for (int32_t mode : {a_mode, b_mode}) {
        if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 && kDeviceMajor < 10)
            return CUBLAS_STATUS_NOT_SUPPORTED;  // [expected] the status of this refusal
        if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3)
            return CUBLAS_STATUS_NOT_SUPPORTED;  // [expected] the status of this refusal
    }
    if (a_mode == b_mode && a_mode != CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F)
        return CUBLAS_STATUS_SUCCESS;
    // [expected] Block scaling pairs VEC128 with VEC128 or with BLK128x128 (either operand, as
    // DeepSeek-V3 scales activations per 1x128 tile and weights per 128x128 block); two 128x128
    // operands, and scalar or outer-vector scales mixed with another mode, are refused.
    if (is_block_mode(a_mode) && is_block_mode(b_mode) && a_mode != b_mode)
        return CUBLAS_STATUS_SUCCESS;
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

bool aligned16(uint64_t elements, uint32_t type) {
    return elements * (is_fp8(type) ? 1 : type == CUDA_R_32F ? 4 : 2) % 16 == 0;
}

}  // namespace

bool is_fp8(uint32_t type) { return type == CUDA_R_8F_E4M3 || type == CUDA_R_8F_E5M2; }

cublasStatus_t check_fp8_types(const MatmulDesc& desc, const Layout& a, const Layout& b,
                               const Layout& c, const Layout& d) {
    // cublasLtMatmul(): FP8 needs compute type CUBLAS_COMPUTE_32F and scale type CUDA_R_32F.
    if (desc.compute_type != CUBLAS_COMPUTE_32F || desc.scale_type != CUDA_R_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!fp8_types_supported(a.type, b.type, c.type, d.type)) return CUBLAS_STATUS_NOT_SUPPORTED;
    // cublasLt.h: scaling attributes set for a combination without them are invalid. C and D take
    // per-tensor scales only (OUTER_VEC_32F: "only applicable to matrices A and B"); the D scale
    // applies to an FP8 D ([expected]: refused for a 16-bit or fp32 D). The aux matrix's FP8
    // scaling and the D output scales (for block-scaled outputs, Blackwell) are not supported.
    if (desc.c_scale_mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F ||
        desc.d_scale_mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (desc.d_scale != nullptr && !is_fp8(d.type)) return CUBLAS_STATUS_INVALID_VALUE;
    if (desc.aux_scale || desc.aux_amax || desc.aux_scale_mode || desc.d_out_scale ||
        desc.d_out_scale_mode)
        return CUBLAS_STATUS_INVALID_VALUE;
    return check_ab_modes(desc.a_scale_mode, desc.b_scale_mode);
}

cublasStatus_t check_fp8_problem(const MatmulDesc& desc, const Layout& a, const Layout& b,
                                 const Layout& c, const Layout& d, int64_t m, int64_t k, int batch,
                                 uint32_t epilogue, uint32_t* bias_type) {
    // cublasLtMatmul(): on Ada and Hopper A must be transposed and B not ("TN"); [expected]
    // column-major (COL order) matrices only, and NOT_SUPPORTED as the status of both refusals.
    if (desc.transa != CUBLAS_OP_T || desc.transb != CUBLAS_OP_N)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    for (const Layout* l : {&a, &b, &c, &d})
        if (l->order != CUBLASLT_ORDER_COL) return CUBLAS_STATUS_NOT_SUPPORTED;
    // cublasLtMatmul(): FP8 dimensions meet "Tensor Core Usage": 16-byte multiples for the
    // leading dimensions and for the contiguous dimension of each matrix (K of A and B in TN, M of
    // C and D). [expected] NOT_SUPPORTED when they do not.
    if (!aligned16(static_cast<uint64_t>(k), a.type) ||
        !aligned16(static_cast<uint64_t>(m), c.type) ||
        !aligned16(static_cast<uint64_t>(m), d.type))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    for (const Layout* l : {&a, &b, &c, &d})
        if (!aligned16(static_cast<uint64_t>(l->ld), l->type)) return CUBLAS_STATUS_NOT_SUPPORTED;
    // [expected] Scale tensors other than per-tensor ones are not defined across a batch.
    if (batch > 1 && (desc.a_scale_mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F ||
                      desc.b_scale_mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    // [expected] A scale tensor (not a scalar) must be given: a null one is invalid.
    if ((desc.a_scale_mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F && desc.a_scale == nullptr) ||
        (desc.b_scale_mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F && desc.b_scale == nullptr))
        return CUBLAS_STATUS_INVALID_VALUE;
    // Epilogues: [expected] the forward ones (bias, ReLU, GELU, GELU with its aux input, which has
    // D's type and so needs a 16-bit or fp32 D here); the gradient epilogues (DGELU, BGRAD*) are
    // refused with FP8 inputs.
    switch (epilogue) {
        case CUBLASLT_EPILOGUE_DEFAULT:
        case CUBLASLT_EPILOGUE_RELU:
        case CUBLASLT_EPILOGUE_BIAS:
        case CUBLASLT_EPILOGUE_RELU_BIAS:
        case CUBLASLT_EPILOGUE_GELU:
        case CUBLASLT_EPILOGUE_GELU_BIAS:
            break;
        case CUBLASLT_EPILOGUE_GELU_AUX:
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
            if (is_fp8(d.type)) return CUBLAS_STATUS_NOT_SUPPORTED;
            break;
        default:
            return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    // A bias type other than the table's is refused when an epilogue reads the bias (every
    // epilogue with a bias has CUBLASLT_EPILOGUE_BIAS's bit).
    const uint32_t table_bias = fp8_bias_type(c.type);
    if ((epilogue & CUBLASLT_EPILOGUE_BIAS) && desc.bias_data_type != -1 &&
        static_cast<uint32_t>(desc.bias_data_type) != table_bias)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    *bias_type = table_bias;
    return CUBLAS_STATUS_SUCCESS;
}

bool fp8_pointers_aligned(const void* A, const void* B, const void* C, const void* D) {
    for (const void* p : {A, B, C, D})
        if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
    return true;
}

float fp8_to_float(uint32_t type, uint8_t bits) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(bits, interpretation(type))));
}

// cuda_fp8.h's __NV_SATFINITE: a finite value beyond the largest finite FP8 value becomes that
// value (448 for E4M3, 57344 for E5M2) with its sign; NaN stays NaN. [expected] cuBLASLt writes an
// FP8 D this way.
uint8_t fp8_saturated(uint32_t type, float v) {
    return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, interpretation(type));
}

float scale_or_one(const void* scale) { return scale ? *static_cast<const float*>(scale) : 1.0f; }

// Scale-tensor layouts, in fp32 elements, for an operand stored K x outer (column-major, K
// contiguous, as TN stores both A and B); `outer` is M for A, N for B.
//   OUTER_VEC_32F: outer values, one per row of op(A) / column of op(B) (cublasLt.h).
//   VEC128_32F:    [expected] a ceil(K/128) x outer array with outer contiguous: the scale of
//                  element (kk, o) at o + (kk / 128) * outer.
//   BLK128x128_32F: [expected] a ceil(outer/128) x ceil(K/128) array with the K blocks contiguous,
//                  each row padded to a multiple of 4 values (16 bytes): the scale of (kk, o) at
//                  (kk / 128) + (o / 128) * round_up(ceil(K/128), 4).
// The sizes agree with NVIDIA's cuBLASLt samples (CUDALibrarySamples, cuBLASLt/Common/helpers.h,
// getScaleTensorSize: ceil(K/128) * outer and round_up(ceil(K/128), 4) * ceil(outer/128)); which
// dimension is contiguous is what stays [expected].
int64_t scale_index(int32_t mode, int64_t kk, int64_t o, int64_t k, int64_t outer) {
    switch (mode) {
        case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F:
            return o;
        case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F:
            return o + (kk / 128) * outer;
        default: {  // BLK128x128_32F
            const int64_t k_blocks = (k + 127) / 128;
            return kk / 128 + (o / 128) * ((k_blocks + 3) / 4 * 4);
        }
    }
}

void dequantize_fp8(const Layout& l, const void* data, int32_t mode, const void* scale,
                    std::vector<float>& panel) {
    const int64_t k = static_cast<int64_t>(l.rows), outer = static_cast<int64_t>(l.cols);
    float decoded[256];
    for (int bits = 0; bits < 256; bits++) decoded[bits] = fp8_to_float(l.type, uint8_t(bits));
    const float* scales = static_cast<const float*>(scale);
    const bool scaled = mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    panel.resize(static_cast<size_t>(k * outer));
    for (int64_t o = 0; o < outer; o++) {
        const uint8_t* in = static_cast<const uint8_t*>(data) + o * l.ld;
        float* out = panel.data() + o * k;
        for (int64_t kk = 0; kk < k; kk++)
            out[kk] = scaled ? decoded[in[kk]] * scales[scale_index(mode, kk, o, k, outer)]
                             : decoded[in[kk]];
    }
}

}  // namespace cublaslt_cpu
