// fp8.cpp: FP8 matmuls of the CPU cuBLASLt: which problems cublasLtMatmul accepts with
// CUDA_R_8F_E4M3 / CUDA_R_8F_E5M2 operands on the current device, whose compute capability it
// reads (9.0, Hopper, unless CUCC_COMPUTE_CAPABILITY says otherwise: dev/cpu/runtime/device.cpp),
// the decoding of FP8 operands with their scale factors, and the saturating FP8 output.
//
// Sources: the cuBLAS documentation (docs.nvidia.com/cuda/cublas), sections "cublasLtMatmul()"
// (the FP8 requirements and the table of FP8 type combinations), "Tensor Core Usage" (the 16-byte
// alignment FP8 kernels require), 3.1.4 "Narrow Precision Data Types Usage" (the "Scaling Mode
// Support Overview" table: which compute capabilities have which scale mode; 3.1.4.4.2 "1D Block
// Scaling Factors Layout": MXFP8's tiled E8M0 scales; 3.1.4.5.1 "Scaling factors layouts"),
// "cublasLtMatmulDescAttributes_t" and "cublasLtMatmulMatrixScale_t"; cublasLt.h's comments on
// those enums; cuda_fp8.h for the FP8 and E8M0 encodings (decoding and saturating encoding use its
// conversion functions, so the bits mean what they mean in CUDA).
//
// What the documentation did not let us confirm is marked [expected]; scripts/gpu_check.sh lists
// those points for the comparison with the native library.
//
// The arithmetic (matmul.cpp's run_batch): an FP8 operand is decoded to fp32, exactly, and
// multiplied by its scale factor where the scale varies inside the matrix (OUTER_VEC_32F,
// VEC128_32F, BLK128x128_32F: one fp32 rounding per element; VEC32_UE8M0: a power of two, so
// exact); per-tensor scales (SCALAR_32F) fold into alpha, the C scale into beta. The product is
// then the fp32 sgemm of every other type.
// CUBLASLT_MATMUL_DESC_FAST_ACCUM (cublasLt.h): fast accumulation may be faster but less accurate,
// because intermediate results are not periodically promoted to higher precision; here every
// accumulation is fp32, with or without it, so the flag changes nothing.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "cublaslt_internal.h"

namespace cublaslt_cpu {

namespace {

// The current device's compute capability as 10 * major + minor (90 for 9.0), read at each call
// as cuBLASLt picks kernels for the device it runs on.
int device_compute_capability() {
    int device = 0, major = 0, minor = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    return 10 * major + minor;
}

// cublasLtMatmul(): FP8 needs TN ("A must be transposed and B non-transposed") "on Ada (compute
// capability 8.9), Hopper (compute capability 9.0), and Blackwell GeForce (compute capability
// 12.x)"; Blackwell data-center parts (10.x; 11.x is not named either) take every op pair.
bool tn_only(int cc) { return cc == 89 || cc == 90 || cc / 10 == 12; }

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

bool is_mx(int32_t mode) { return mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0; }

// The scale modes of A and B together on a device of compute capability cc. cublasLt.h's
// cublasLtMatmulMatrixScale_t and the documentation's "Scaling Mode Support Overview":
//   SCALAR_32F     one fp32 for the whole matrix (8.9 and later);
//   OUTER_VEC_32F  A and B only: M fp32 for A, N for B; element (i, j) of the product is
//                  multiplied by A's scale i and B's scale j (9.0 only);
//   VEC128_32F     one fp32 per 128 elements along K: "1D block scaling" (9.0 only);
//   BLK128x128_32F one fp32 per 128 x 128 block: "2D block scaling" (9.0 only);
//   VEC32_UE8M0    (MXFP8) one E8M0 per 32 elements along K (10.0 and later), set "for all
//                  FP8-precision tensors": both A and B;
//   VEC16_UE4M3    (NVFP4) for FP4 data, not FP8: refused.
// [expected] NOT_SUPPORTED as the status of every refusal here but the unknown mode's.
cublasStatus_t check_ab_modes(int32_t a_mode, int32_t b_mode, int cc) {
    for (int32_t mode : {a_mode, b_mode})
        if (mode < 0 || mode >= CUBLASLT_MATMUL_MATRIX_SCALE_END)
            return CUBLAS_STATUS_INVALID_VALUE;
    for (int32_t mode : {a_mode, b_mode}) {
        if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3) return CUBLAS_STATUS_NOT_SUPPORTED;
        if (is_mx(mode) && cc < 100) return CUBLAS_STATUS_NOT_SUPPORTED;
        if ((mode == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F || is_block_mode(mode)) && cc != 90)
            return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (is_mx(a_mode) != is_mx(b_mode)) return CUBLAS_STATUS_NOT_SUPPORTED;
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
    // FP8 came with compute capability 8.9 ("Narrow Precision Data Types Usage"); [expected]
    // NOT_SUPPORTED before it.
    const int cc = device_compute_capability();
    if (cc < 89) return CUBLAS_STATUS_NOT_SUPPORTED;
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
    // MXFP8 asks for VEC32_UE8M0 scales on every FP8 tensor, so an FP8 D comes with the block
    // scales the matmul writes (CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER), which this
    // implementation does not produce: an FP8 D is refused under MXFP8 ([expected] NOT_SUPPORTED;
    // a Blackwell GPU may run it with D_OUT scales).
    if (is_mx(desc.a_scale_mode) && is_fp8(d.type)) return CUBLAS_STATUS_NOT_SUPPORTED;
    return check_ab_modes(desc.a_scale_mode, desc.b_scale_mode, cc);
}

cublasStatus_t check_fp8_problem(const MatmulDesc& desc, const Layout& a, const Layout& b,
                                 const Layout& c, const Layout& d, int64_t m, int64_t k, int batch,
                                 uint32_t epilogue, uint32_t* bias_type) {
    // cublasLtMatmul(): TN on the devices tn_only() names; [expected] column-major (COL order)
    // matrices only, and NOT_SUPPORTED as the status of both refusals.
    if (tn_only(device_compute_capability()) &&
        (desc.transa != CUBLAS_OP_T || desc.transb != CUBLAS_OP_N))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    for (const Layout* l : {&a, &b, &c, &d})
        if (l->order != CUBLASLT_ORDER_COL) return CUBLAS_STATUS_NOT_SUPPORTED;
    // cublasLtMatmul(): FP8 dimensions meet "Tensor Core Usage": 16-byte multiples for the
    // leading dimensions and for the contiguous dimension of each matrix (its rows: K of A and B
    // in TN, M of C and D). [expected] NOT_SUPPORTED when they do not.
    for (const Layout* l : {&a, &b, &c, &d})
        if (!aligned16(l->rows, l->type) || !aligned16(static_cast<uint64_t>(l->ld), l->type))
            return CUBLAS_STATUS_NOT_SUPPORTED;
    // [expected] MXFP8: K a whole number of 32-element blocks (the documentation defines the
    // product for that case only), else NOT_SUPPORTED.
    if (is_mx(desc.a_scale_mode) && k % 32 != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    // 3.1.4.5.1: under VEC128_32F and BLK128x128_32F "M and N must be multiples of 4";
    // [expected] NOT_SUPPORTED.
    if ((is_block_mode(desc.a_scale_mode) || is_block_mode(desc.b_scale_mode)) &&
        (m % 4 != 0 || d.cols % 4 != 0))
        return CUBLAS_STATUS_NOT_SUPPORTED;
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

bool fp8_pointers_aligned(const MatmulDesc& desc, const void* A, const void* B, const void* C,
                          const void* D) {
    for (const void* p : {A, B, C, D})
        if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
    // "Starting addresses of scaling factors must be 16B aligned" (3.1.4.4.2 for VEC32_UE8M0,
    // 3.1.4.5.1 for VEC128_32F and BLK128x128_32F).
    const auto tiled = [](int32_t mode) { return is_mx(mode) || is_block_mode(mode); };
    if (tiled(desc.a_scale_mode) && reinterpret_cast<uintptr_t>(desc.a_scale) % 16 != 0)
        return false;
    return !tiled(desc.b_scale_mode) || reinterpret_cast<uintptr_t>(desc.b_scale) % 16 == 0;
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

// Scale-tensor layouts, in elements (fp32, E8M0 bytes for VEC32_UE8M0), for an operand of K x
// outer elements, however it is stored; `outer` is M for A, N for B.
//   OUTER_VEC_32F: outer values, one per row of op(A) / column of op(B) (cublasLt.h).
//   VEC128_32F:    section 3.1.4.5.1, "Scaling factors layouts": outer x ceil(K/128), "M-major
//                  for A" ("N-major for B"), outer contiguous: the scale of element (kk, o) at
//                  o + (kk / 128) * outer.
//   BLK128x128_32F: section 3.1.4.5.1: "K-major", round_up(ceil(K/128), 4) x ceil(outer/128) (the
//                  stride between columns a multiple of 4): the scale of (kk, o) at
//                  (kk / 128) + (o / 128) * round_up(ceil(K/128), 4).
// (The sizes also agree with NVIDIA's cuBLASLt samples: CUDALibrarySamples,
// cuBLASLt/Common/helpers.h, getScaleTensorSize.)
//   VEC32_UE8M0:   section 3.1.4.4.2, "1D Block Scaling Factors Layout": the outer x ceil(K/32)
//                  scales in tiles of 128 (outer) x 4 (K blocks), zero-padded to whole tiles, the
//                  tiles row-major (each tile row holds round_up(ceil(K/32), 4) / 4 tiles), 512
//                  bytes each; inside a tile (outer % 128, K block % 4) sits at
//                  (outer % 32) * 16 + (outer % 128 / 32) * 4 + K block % 4. The layout is the
//                  same whatever the operand's transposition.
int64_t scale_index(int32_t mode, int64_t kk, int64_t o, int64_t k, int64_t outer) {
    switch (mode) {
        case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F:
            return o;
        case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F:
            return o + (kk / 128) * outer;
        case CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0: {
            const int64_t block = kk / 32, tiles_per_row = ((k + 31) / 32 + 3) / 4;
            const int64_t tile = (o / 128) * tiles_per_row + block / 4;
            return tile * 512 + (o % 32) * 16 + (o % 128 / 32) * 4 + block % 4;
        }
        default: {  // BLK128x128_32F
            const int64_t k_blocks = (k + 127) / 128;
            return kk / 128 + (o / 128) * ((k_blocks + 3) / 4 * 4);
        }
    }
}

// An E8M0 scale (cuda_fp8.h's __nv_fp8_e8m0): 2^(bits - 127), 0xFF NaN.
float e8m0_to_float(uint8_t bits) {
    return __bfloat162float(__nv_bfloat16(__nv_cvt_e8m0_to_bf16raw(bits)));
}

void dequantize_fp8(const Layout& l, bool k_is_rows, const void* data, int32_t mode,
                    const void* scale, std::vector<float>& panel) {
    const int64_t k = static_cast<int64_t>(k_is_rows ? l.rows : l.cols);
    const int64_t outer = static_cast<int64_t>(k_is_rows ? l.cols : l.rows);
    float decoded[256];
    for (int bits = 0; bits < 256; bits++) decoded[bits] = fp8_to_float(l.type, uint8_t(bits));
    const float* scales = static_cast<const float*>(scale);
    const uint8_t* e8m0 = static_cast<const uint8_t*>(scale);
    const auto scale_of = [&](int64_t kk, int64_t o) {
        const int64_t i = scale_index(mode, kk, o, k, outer);
        return is_mx(mode) ? e8m0_to_float(e8m0[i]) : scales[i];
    };
    const bool scaled = mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    const uint8_t* in = static_cast<const uint8_t*>(data);
    // element (kk, o) of the operand: at kk + o * ld when K runs down the stored columns
    const int64_t k_step = k_is_rows ? 1 : l.ld, o_step = k_is_rows ? l.ld : 1;
    panel.resize(static_cast<size_t>(k * outer));
    for (int64_t o = 0; o < outer; o++) {
        float* out = panel.data() + o * k;
        for (int64_t kk = 0; kk < k; kk++) {
            const float v = decoded[in[kk * k_step + o * o_step]];
            out[kk] = scaled ? v * scale_of(kk, o) : v;
        }
    }
}

}  // namespace cublaslt_cpu
