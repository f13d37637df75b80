// cublaslt_internal.h: what the CPU cuBLASLt's two files share: the contents of each descriptor
// and the table-driven attribute get/set.
//
// Every descriptor of the public API is an opaque block of uint64_t (cublasLt.h fixes the sizes, so
// that cublasLt*Init can place a descriptor in memory the caller owns). We keep our plain structs
// inside those blocks. Setting an attribute only stores it, after checking its size against the
// table below; whether the stored values make a runnable problem is decided in one place,
// check_problem() in matmul.cpp, which cublasLtMatmul and cublasLtMatmulAlgoGetHeuristic share.
// To support a new attribute, add a member and a table row; to support a new type or scale mode,
// extend check_problem() and the arithmetic.
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace cublaslt_cpu {

// cublasLtMatrixLayout_t. Member types are the attribute types documented in cublasLt.h.
struct Layout {
    uint32_t type;  // cudaDataType
    int32_t order;  // cublasLtOrder_t
    uint64_t rows, cols;
    int64_t ld;  // elements between columns (COL order) or rows (ROW order)
    int32_t batch_count;
    int64_t batch_stride;  // elements between consecutive matrices of a batch
    int64_t plane_offset;  // planar complex only
    uint32_t batch_mode;   // cublasLtBatchMode_t
};

// cublasLtMatmulDesc_t.
struct MatmulDesc {
    int32_t compute_type;            // cublasComputeType_t
    int32_t scale_type;              // cudaDataType of alpha and beta
    int32_t pointer_mode;            // cublasLtPointerMode_t
    int32_t transa, transb, transc;  // cublasOperation_t
    int32_t fill_mode;               // cublasFillMode_t
    uint32_t epilogue;               // cublasLtEpilogue_t
    const void* bias;                // bias (input) or bias gradient (output), see the epilogues
    int64_t bias_batch_stride;
    void* aux;  // GELU input: written by GELU_AUX*, read by DGELU*
    int64_t aux_ld, aux_batch_stride;
    int64_t alpha_vector_batch_stride;
    int32_t sm_count_target;
    const void* a_scale;  // FP8 scaling (fp8.cpp)
    const void* b_scale;
    const void* c_scale;
    const void* d_scale;
    void* amax_d;
    int32_t aux_data_type;  // cudaDataType, -1: the type of D
    void* aux_scale;
    void* aux_amax;
    int8_t fast_accum;
    int32_t bias_data_type;  // cudaDataType, -1: the type of D
    int32_t a_scale_mode, b_scale_mode, c_scale_mode, d_scale_mode, aux_scale_mode;
    void* d_out_scale;
    int32_t d_out_scale_mode;
    cublasLtEmulationDesc_t emulation;
};

// cublasLtMatmulPreference_t.
struct Preference {
    uint32_t search_mode;
    uint64_t max_workspace_bytes;
    uint32_t reduction_scheme_mask;
    uint32_t min_alignment_a, min_alignment_b, min_alignment_c, min_alignment_d;
    float max_waves_count;
    uint64_t impl_mask;
};

static_assert(sizeof(Layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "Layout too large");
static_assert(sizeof(MatmulDesc) <= sizeof(cublasLtMatmulDescOpaque_t), "MatmulDesc too large");
static_assert(sizeof(Preference) <= sizeof(cublasLtMatmulPreferenceOpaque_t),
              "Preference too large");

// The struct living in an opaque block (placed there by the create/init functions).
inline Layout* layout_of(cublasLtMatrixLayout_t p) {
    return std::launder(reinterpret_cast<Layout*>(p));
}
inline MatmulDesc* desc_of(cublasLtMatmulDesc_t p) {
    return std::launder(reinterpret_cast<MatmulDesc*>(p));
}
inline Preference* pref_of(cublasLtMatmulPreference_t p) {
    return std::launder(reinterpret_cast<Preference*>(p));
}

// A handle points to a cublasLtContext (defined below); its magic number tells a live handle from
// a null or destroyed one.
constexpr uint64_t kHandleMagic = 0x63707542'4c41534cull;

// The algorithm that cublasLtMatmulAlgoGetHeuristic returns (there is one: the BLAS's sgemm plus a
// scalar epilogue); data[0] holds this id so cublasLtMatmul can tell it from an uninitialized one.
constexpr uint64_t kAlgoId = 0x43505553'47454d4dull;

}  // namespace cublaslt_cpu

// The handle's target, opaque in cublasLt.h.
struct cublasLtContext {
    uint64_t magic;
};

namespace cublaslt_cpu {
inline bool handle_ok(cublasLtHandle_t h) { return h != nullptr && h->magic == kHandleMagic; }

// cublasLtMatmul after its handle and workspace checks, for the legacy cuBLAS API too (matmul.cpp).
// `api` names the caller in messages.
cublasStatus_t matmul(const char* api, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                      cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                      const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                      cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                      cudaStream_t stream);
// The same matmul (layouts of one matrix) for each of `batch` matrices of device arrays of
// pointers, read when the work runs; D is C.
cublasStatus_t matmul_arrays(const char* api, cublasLtMatmulDesc_t desc, const void* alpha,
                             const void* const* A, cublasLtMatrixLayout_t Adesc,
                             const void* const* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                             void* const* C, cublasLtMatrixLayout_t Cdesc, int batch,
                             cudaStream_t stream);
// FP8 (fp8.cpp): the checks check_problem() and check_call() make for FP8 operands, and the
// conversions. check_fp8_types runs before the shapes are known, check_fp8_problem after (it also
// sets the bias type); fp8_pointers_aligned: A, B, C, D and the tiled scale tensors 16-byte
// aligned.
bool is_fp8(uint32_t type);
cublasStatus_t check_fp8_types(const MatmulDesc& desc, const Layout& a, const Layout& b,
                               const Layout& c, const Layout& d);
cublasStatus_t check_fp8_problem(const MatmulDesc& desc, const Layout& a, const Layout& b,
                                 const Layout& c, const Layout& d, int64_t m, int64_t k, int batch,
                                 uint32_t epilogue, uint32_t* bias_type);
bool fp8_pointers_aligned(const MatmulDesc& desc, const void* A, const void* B, const void* C,
                          const void* D);
float fp8_to_float(uint32_t type, uint8_t bits);
uint8_t fp8_saturated(uint32_t type, float v);
// A scale pointer's fp32 value, 1 when null (per-tensor scales).
float scale_or_one(const void* scale);
// An FP8 operand of K x outer elements (outer: M for A, N for B), stored K x outer when
// k_is_rows (A transposed, B not: TN), else outer x K, decoded into a packed K x outer fp32 panel,
// each element times its scale under `mode` (not SCALAR_32F's).
void dequantize_fp8(const Layout& l, bool k_is_rows, const void* data, int32_t mode,
                    const void* scale, std::vector<float>& panel);
// Status names and texts, for cublasLtGetStatus* and cublasGetStatus* (descriptors.cpp).
const char* status_name(cublasStatus_t status);
const char* status_text(cublasStatus_t status);
}  // namespace cublaslt_cpu
