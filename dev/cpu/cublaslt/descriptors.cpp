// descriptors.cpp: the bookkeeping half of cuBLASLt on the CPU: handles, version queries, status
// names, and the matrix layout, matmul and preference descriptors with their attributes.
//
// Attributes are table-driven: each descriptor kind has one table of (attribute, offset, size)
// rows, and one pair of functions gets and sets any attribute of any kind with cuBLASLt's rules:
// the buffer size must equal the attribute's size (CUBLAS_STATUS_INVALID_VALUE otherwise), and a
// get with sizeInBytes == 0 reports the size needed through sizeWritten. Values are stored as
// given; matmul.cpp decides whether they make a problem it can run.
#include <cstring>

#include <cuda_runtime_api.h>  // CUDART_VERSION

#include "cublaslt_internal.h"

using namespace cublaslt_cpu;

namespace {

struct AttrField {
    int attr;
    size_t offset;
    size_t size;
};
#define FIELD(attr, type, member) \
    { attr, offsetof(type, member), sizeof(type::member) }

const AttrField kLayoutFields[] = {
    FIELD(CUBLASLT_MATRIX_LAYOUT_TYPE, Layout, type),
    FIELD(CUBLASLT_MATRIX_LAYOUT_ORDER, Layout, order),
    FIELD(CUBLASLT_MATRIX_LAYOUT_ROWS, Layout, rows),
    FIELD(CUBLASLT_MATRIX_LAYOUT_COLS, Layout, cols),
    FIELD(CUBLASLT_MATRIX_LAYOUT_LD, Layout, ld),
    FIELD(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, Layout, batch_count),
    FIELD(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, Layout, batch_stride),
    FIELD(CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, Layout, plane_offset),
    FIELD(CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, Layout, batch_mode),
};

const AttrField kMatmulDescFields[] = {
    FIELD(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, MatmulDesc, compute_type),
    FIELD(CUBLASLT_MATMUL_DESC_SCALE_TYPE, MatmulDesc, scale_type),
    FIELD(CUBLASLT_MATMUL_DESC_POINTER_MODE, MatmulDesc, pointer_mode),
    FIELD(CUBLASLT_MATMUL_DESC_TRANSA, MatmulDesc, transa),
    FIELD(CUBLASLT_MATMUL_DESC_TRANSB, MatmulDesc, transb),
    FIELD(CUBLASLT_MATMUL_DESC_TRANSC, MatmulDesc, transc),
    FIELD(CUBLASLT_MATMUL_DESC_FILL_MODE, MatmulDesc, fill_mode),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE, MatmulDesc, epilogue),
    FIELD(CUBLASLT_MATMUL_DESC_BIAS_POINTER, MatmulDesc, bias),
    FIELD(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, MatmulDesc, bias_batch_stride),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, MatmulDesc, aux),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, MatmulDesc, aux_ld),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, MatmulDesc, aux_batch_stride),
    FIELD(CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, MatmulDesc, alpha_vector_batch_stride),
    FIELD(CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, MatmulDesc, sm_count_target),
    FIELD(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, MatmulDesc, a_scale),
    FIELD(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, MatmulDesc, b_scale),
    FIELD(CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, MatmulDesc, c_scale),
    FIELD(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, MatmulDesc, d_scale),
    FIELD(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, MatmulDesc, amax_d),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, MatmulDesc, aux_data_type),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER, MatmulDesc, aux_scale),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER, MatmulDesc, aux_amax),
    FIELD(CUBLASLT_MATMUL_DESC_FAST_ACCUM, MatmulDesc, fast_accum),
    FIELD(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, MatmulDesc, bias_data_type),
    FIELD(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, MatmulDesc, a_scale_mode),
    FIELD(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, MatmulDesc, b_scale_mode),
    FIELD(CUBLASLT_MATMUL_DESC_C_SCALE_MODE, MatmulDesc, c_scale_mode),
    FIELD(CUBLASLT_MATMUL_DESC_D_SCALE_MODE, MatmulDesc, d_scale_mode),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE, MatmulDesc, aux_scale_mode),
    FIELD(CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER, MatmulDesc, d_out_scale),
    FIELD(CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE, MatmulDesc, d_out_scale_mode),
    FIELD(CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR, MatmulDesc, emulation),
};

const AttrField kPreferenceFields[] = {
    FIELD(CUBLASLT_MATMUL_PREF_SEARCH_MODE, Preference, search_mode),
    FIELD(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, Preference, max_workspace_bytes),
    FIELD(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, Preference, reduction_scheme_mask),
    FIELD(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, Preference, min_alignment_a),
    FIELD(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, Preference, min_alignment_b),
    FIELD(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, Preference, min_alignment_c),
    FIELD(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, Preference, min_alignment_d),
    FIELD(CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, Preference, max_waves_count),
    FIELD(CUBLASLT_MATMUL_PREF_IMPL_MASK, Preference, impl_mask),
};
#undef FIELD

template <size_t N>
const AttrField* find_field(const AttrField (&table)[N], int attr) {
    for (const AttrField& f : table)
        if (f.attr == attr) return &f;
    return nullptr;
}

template <size_t N>
cublasStatus_t set_attribute(const AttrField (&table)[N], void* object, int attr, const void* buf,
                             size_t size) {
    const AttrField* f = find_field(table, attr);
    if (object == nullptr || f == nullptr || buf == nullptr || size != f->size)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(static_cast<char*>(object) + f->offset, buf, f->size);
    return CUBLAS_STATUS_SUCCESS;
}

template <size_t N>
cublasStatus_t get_attribute(const AttrField (&table)[N], const void* object, int attr, void* buf,
                             size_t size, size_t* written) {
    const AttrField* f = find_field(table, attr);
    if (object == nullptr || f == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    if (size == 0) {  // a query of the size needed
        if (written == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
        *written = f->size;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (buf == nullptr || size != f->size) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(buf, static_cast<const char*>(object) + f->offset, f->size);
    if (written != nullptr) *written = f->size;
    return CUBLAS_STATUS_SUCCESS;
}

// Defaults as cublasLt.h documents them.
void init_layout(cublasLtMatrixLayout_t p, cudaDataType type, uint64_t rows, uint64_t cols,
                 int64_t ld) {
    Layout* l = new (p) Layout{};
    l->type = static_cast<uint32_t>(type);
    l->order = CUBLASLT_ORDER_COL;
    l->rows = rows;
    l->cols = cols;
    l->ld = ld;
    l->batch_count = 1;
    l->batch_mode = CUBLASLT_BATCH_MODE_STRIDED;
}

void init_desc(cublasLtMatmulDesc_t p, cublasComputeType_t compute, cudaDataType_t scale) {
    MatmulDesc* d = new (p) MatmulDesc{};
    d->compute_type = compute;
    d->scale_type = scale;
    d->pointer_mode = CUBLASLT_POINTER_MODE_HOST;
    d->transa = d->transb = d->transc = CUBLAS_OP_N;
    d->fill_mode = CUBLAS_FILL_MODE_FULL;
    d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    d->aux_data_type = -1;
    d->bias_data_type = -1;
}

void init_pref(cublasLtMatmulPreference_t p) {
    Preference* pr = new (p) Preference{};
    pr->search_mode = CUBLASLT_SEARCH_BEST_FIT;
    pr->reduction_scheme_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
    pr->min_alignment_a = pr->min_alignment_b = pr->min_alignment_c = pr->min_alignment_d = 256;
    pr->impl_mask = ~uint64_t(0);
}

struct StatusText {
    cublasStatus_t status;
    const char* name;
    const char* text;
};
const StatusText kStatusTexts[] = {
    {CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS", "the operation completed successfully"},
    {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED",
     "the library was not initialized (invalid or null handle)"},
    {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED", "resource allocation failed"},
    {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE",
     "an invalid value or parameter was passed to the function"},
    {CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH",
     "the operation is not supported by the device's architecture"},
    {CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR", "access to memory space failed"},
    {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED",
     "the program failed to execute"},
    {CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR", "an internal operation failed"},
    {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED",
     "the functionality requested is not supported"},
    {CUBLAS_STATUS_LICENSE_ERROR, "CUBLAS_STATUS_LICENSE_ERROR", "license check failed"},
};

const StatusText* find_status(cublasStatus_t status) {
    for (const StatusText& s : kStatusTexts)
        if (s.status == status) return &s;
    return nullptr;
}

}  // namespace

const char* cublaslt_cpu::status_name(cublasStatus_t status) {
    const StatusText* s = find_status(status);
    return s ? s->name : "CUBLAS_STATUS_UNKNOWN";
}

const char* cublaslt_cpu::status_text(cublasStatus_t status) {
    const StatusText* s = find_status(status);
    return s ? s->text : "unknown cuBLAS status";
}

// ---------------------------------------------------------------------------------------------
// Create and Init_internal of the three descriptor kinds (layout, matmul, preference) differ only
// in the opaque type and its init function: these two serve all three.
template <class Opaque, class Init>
static cublasStatus_t create_descriptor(Opaque** out, Init init) {
    if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    Opaque* p = new (std::nothrow) Opaque;
    if (p == nullptr) return CUBLAS_STATUS_ALLOC_FAILED;
    init(p);
    *out = p;
    return CUBLAS_STATUS_SUCCESS;
}

// Initializes caller-provided storage of `size` bytes.
template <class Opaque, class Init>
static cublasStatus_t init_descriptor(Opaque* p, size_t size, Init init) {
    if (p == nullptr || size < sizeof(Opaque)) return CUBLAS_STATUS_ALLOC_FAILED;
    init(p);
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" {

// ---------------------------------------------------------------------------------------------
// Handle, version, status.
cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
    if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtHandle_t h = new (std::nothrow) cublasLtContext{kHandleMagic};
    if (h == nullptr) return CUBLAS_STATUS_ALLOC_FAILED;
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->magic = 0;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t status) { return status_name(status); }

const char* cublasLtGetStatusString(cublasStatus_t status) { return status_text(status); }

size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }

size_t cublasLtGetCudartVersion(void) { return CUDART_VERSION; }

cublasStatus_t cublasLtGetProperty(libraryPropertyType type, int* value) {
    if (value == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    switch (type) {
        case MAJOR_VERSION:
            *value = CUBLAS_VER_MAJOR;
            return CUBLAS_STATUS_SUCCESS;
        case MINOR_VERSION:
            *value = CUBLAS_VER_MINOR;
            return CUBLAS_STATUS_SUCCESS;
        case PATCH_LEVEL:
            *value = CUBLAS_VER_PATCH;
            return CUBLAS_STATUS_SUCCESS;
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}

// ---------------------------------------------------------------------------------------------
// Matrix layouts.
cublasStatus_t cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t layout, size_t size,
                                                 cudaDataType type, uint64_t rows, uint64_t cols,
                                                 int64_t ld) {
    return init_descriptor(layout, size,
                           [&](cublasLtMatrixLayout_t p) { init_layout(p, type, rows, cols, ld); });
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
    return create_descriptor(
        layout, [&](cublasLtMatrixLayout_t p) { init_layout(p, type, rows, cols, ld); });
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    delete layout;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
    return set_attribute(kLayoutFields, layout ? layout_of(layout) : nullptr, attr, buf, size);
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attr, void* buf,
                                                size_t size, size_t* written) {
    return get_attribute(kLayoutFields, layout ? layout_of(layout) : nullptr, attr, buf, size,
                         written);
}

// ---------------------------------------------------------------------------------------------
// Matmul descriptors.
cublasStatus_t cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t desc, size_t size,
                                               cublasComputeType_t compute, cudaDataType_t scale) {
    return init_descriptor(desc, size,
                           [&](cublasLtMatmulDesc_t p) { init_desc(p, compute, scale); });
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
    return create_descriptor(desc, [&](cublasLtMatmulDesc_t p) { init_desc(p, compute, scale); });
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    delete desc;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size) {
    return set_attribute(kMatmulDescFields, desc ? desc_of(desc) : nullptr, attr, buf, size);
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, void* buf,
                                              size_t size, size_t* written) {
    return get_attribute(kMatmulDescFields, desc ? desc_of(desc) : nullptr, attr, buf, size,
                         written);
}

// ---------------------------------------------------------------------------------------------
// Heuristic search preferences.
cublasStatus_t cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t pref, size_t size) {
    return init_descriptor(pref, size, init_pref);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
    return create_descriptor(pref, init_pref);
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
    return set_attribute(kPreferenceFields, pref ? pref_of(pref) : nullptr, attr, buf, size);
}

cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    void* buf, size_t size, size_t* written) {
    return get_attribute(kPreferenceFields, pref ? pref_of(pref) : nullptr, attr, buf, size,
                         written);
}

}  // extern "C"
