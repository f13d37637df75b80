// cublas.cpp: the legacy cuBLAS API (cublas_v2.h) on the CPU, as far as kernel harnesses,
// trainers and CUDA samples use it: the handle and its settings, the host/device copy helpers,
// Level-1 (axpy, scal, dot, nrm2, asum, amax, amin, copy, swap) and Level-2 (gemv) routines in
// single and double precision, geam, and every gemm: S/D/H gemm, their strided and
// pointer-array batched forms, cublasSgemmEx, cublasGemmEx, cublasGemmStridedBatchedEx and
// cublasGemmBatchedEx.
//
// Matrices are column-major, as in BLAS. Each call first checks its arguments with the errors
// cuBLAS documents (CUBLAS_STATUS_NOT_INITIALIZED for a bad handle; CUBLAS_STATUS_INVALID_VALUE
// for negative sizes, bad transposes, lda < max(1, rows of op-less A) and the like; sizes of 0
// return at once), then a gemm becomes the cuBLASLt descriptors of the same product and runs
// through cuBLASLt's own checks and arithmetic (matmul.cpp): one implementation for both APIs,
// fp32 accumulation for fp16/bf16 data, fp64 for double. Type combinations cuBLASLt does not run
// here (integer, complex, FP8) give CUBLAS_STATUS_NOT_SUPPORTED.
// All work is queued on the handle's stream, in order with kernels and copies. Scalars (alpha,
// beta) and results (dot, nrm2, ...) follow the handle's pointer mode: host scalars are read at
// the call and a host result is written before the call returns (it waits for the stream, as
// cuBLAS does); device ones are read and written when the work runs. Operands that are not
// device memory end the process with a message, as they would fault on a GPU.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "blas.h"
#include "cublaslt_internal.h"
#include "cucc/streams.h"

using namespace cublaslt_cpu;

constexpr uint64_t kLegacyMagic = 0x63756c6567616379ull;  // "culegacy"

struct cublasContext {
    uint64_t magic;
    cudaStream_t stream;
    cublasPointerMode_t pointer_mode;
    cublasMath_t math_mode;
    cublasAtomicsMode_t atomics;
    void* workspace;
    size_t workspace_bytes;
};

namespace {

bool valid(cublasHandle_t h) { return h != nullptr && h->magic == kLegacyMagic; }

bool is_op(cublasOperation_t op) {
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

int max1(int x) { return x > 1 ? x : 1; }

// Ends the process when a vector of n elements `inc` apart is not device memory (a GPU faults).
void require_device(const char* api, const void* p, int n, int inc, size_t elem) {
    if (n <= 0 || p == nullptr) return;
    size_t last = (size_t)(n - 1) * (size_t)(inc < 0 ? -inc : inc) * elem;
    if (!cucc::is_device_pointer(p) || !cucc::is_device_pointer((const char*)p + last)) {
        fprintf(stderr,
                "%s: %p is not device memory of %d elements (cudaMalloc); a GPU would "
                "fault\n",
                api, p, n);
        abort();
    }
}

cublasStatus_t queued(cudaError_t err) {
    return err == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

// Queues work on the handle's stream; a host result is ready when this returns.
cublasStatus_t submit(cublasHandle_t h, const char* api, std::function<void()> work,
                      bool host_result) {
    cudaError_t err = cucc::stream_enqueue(h->stream, cucc::StreamOp(api, nullptr, work));
    if (err == cudaSuccess && host_result) err = cudaStreamSynchronize(h->stream);
    return queued(err);
}

// A scalar argument: read now in host pointer mode, when the work runs in device mode.
template <class T>
struct Scalar {
    const T* ptr;
    T value;
    bool device;
    T get() const { return device ? *ptr : value; }
};
template <class T>
Scalar<T> scalar(cublasHandle_t h, const T* p) {
    bool device = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
    return Scalar<T>{p, device ? T() : *p, device};
}

// ---------------------------------------------------------------------------------------------
// Level 1 and 2 through the BLAS (blas.cpp), single and double precision.
void blas_axpy(int n, float a, const float* x, int incx, float* y, int incy) {
    blas().saxpy(n, a, x, incx, y, incy);
}
void blas_axpy(int n, double a, const double* x, int incx, double* y, int incy) {
    blas().daxpy(n, a, x, incx, y, incy);
}
void blas_scal(int n, float a, float* x, int incx) { blas().sscal(n, a, x, incx); }
void blas_scal(int n, double a, double* x, int incx) { blas().dscal(n, a, x, incx); }
float blas_dot(int n, const float* x, int incx, const float* y, int incy) {
    return blas().sdot(n, x, incx, y, incy);
}
double blas_dot(int n, const double* x, int incx, const double* y, int incy) {
    return blas().ddot(n, x, incx, y, incy);
}
float blas_nrm2(int n, const float* x, int incx) { return blas().snrm2(n, x, incx); }
double blas_nrm2(int n, const double* x, int incx) { return blas().dnrm2(n, x, incx); }
float blas_asum(int n, const float* x, int incx) { return blas().sasum(n, x, incx); }
double blas_asum(int n, const double* x, int incx) { return blas().dasum(n, x, incx); }
void blas_copy(int n, const float* x, int incx, float* y, int incy) {
    blas().scopy(n, x, incx, y, incy);
}
void blas_copy(int n, const double* x, int incx, double* y, int incy) {
    blas().dcopy(n, x, incx, y, incy);
}
void blas_swap(int n, float* x, int incx, float* y, int incy) { blas().sswap(n, x, incx, y, incy); }
void blas_swap(int n, double* x, int incx, double* y, int incy) {
    blas().dswap(n, x, incx, y, incy);
}
void blas_gemv(bool trans, int m, int n, float a, const float* A, int lda, const float* x, int incx,
               float b, float* y, int incy) {
    blas().sgemv(kBlasColMajor, trans ? kBlasTrans : kBlasNoTrans, m, n, a, A, lda, x, incx, b, y,
                 incy);
}
void blas_gemv(bool trans, int m, int n, double a, const double* A, int lda, const double* x,
               int incx, double b, double* y, int incy) {
    blas().dgemv(kBlasColMajor, trans ? kBlasTrans : kBlasNoTrans, m, n, a, A, lda, x, incx, b, y,
                 incy);
}

// The 1-based index of the first element of largest (or smallest) magnitude, 0 for no elements.
template <class T>
int extreme_index(int n, const T* x, int incx, bool largest) {
    if (n <= 0 || incx <= 0) return 0;
    int best = 0;
    for (int i = 1; i < n; i++) {
        T a = std::fabs(x[(size_t)i * incx]), b = std::fabs(x[(size_t)best * incx]);
        if (largest ? a > b : a < b) best = i;
    }
    return best + 1;
}

template <class T>
cublasStatus_t axpy(const char* api, cublasHandle_t h, int n, const T* alpha, const T* x, int incx,
                    T* y, int incy) {
    if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (n <= 0) return CUBLAS_STATUS_SUCCESS;
    if (!alpha || !x || !y) return CUBLAS_STATUS_INVALID_VALUE;
    require_device(api, x, n, incx, sizeof(T));
    require_device(api, y, n, incy, sizeof(T));
    Scalar<T> a = scalar(h, alpha);
    return submit(
        h, api, [=] { blas_axpy(n, a.get(), x, incx, y, incy); }, false);
}

template <class T>
cublasStatus_t scal(const char* api, cublasHandle_t h, int n, const T* alpha, T* x, int incx) {
    if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (n <= 0 || incx <= 0) return CUBLAS_STATUS_SUCCESS;
    if (!alpha || !x) return CUBLAS_STATUS_INVALID_VALUE;
    require_device(api, x, n, incx, sizeof(T));
    Scalar<T> a = scalar(h, alpha);
    return submit(
        h, api, [=] { blas_scal(n, a.get(), x, incx); }, false);
}

// A reduction whose result goes to host or device memory by the pointer mode.
template <class R, class F>
cublasStatus_t reduction(const char* api, cublasHandle_t h, R* result, F compute) {
    if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!result) return CUBLAS_STATUS_INVALID_VALUE;
    bool device = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
    if (device) require_device(api, result, 1, 1, sizeof(R));
    return submit(
        h, api, [=] { *result = compute(); }, !device);
}

template <class T>
cublasStatus_t dot(const char* api, cublasHandle_t h, int n, const T* x, int incx, const T* y,
                   int incy, T* result) {
    if (n > 0 && (!x || !y))
        return valid(h) ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_NOT_INITIALIZED;
    require_device(api, x, n, incx, sizeof(T));
    require_device(api, y, n, incy, sizeof(T));
    return reduction(api, h, result, [=] { return n > 0 ? blas_dot(n, x, incx, y, incy) : T(0); });
}

// nrm2, asum: 0 for n <= 0 or incx <= 0, as BLAS.
template <class T, class F>
cublasStatus_t vector_norm(const char* api, cublasHandle_t h, int n, const T* x, int incx,
                           T* result, F norm) {
    bool empty = n <= 0 || incx <= 0;
    if (!empty && !x) return valid(h) ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_NOT_INITIALIZED;
    if (!empty) require_device(api, x, n, incx, sizeof(T));
    return reduction(api, h, result, [=] { return empty ? T(0) : norm(n, x, incx); });
}

template <class T>
cublasStatus_t extreme(const char* api, cublasHandle_t h, int n, const T* x, int incx, int* result,
                       bool largest) {
    bool empty = n <= 0 || incx <= 0;
    if (!empty && !x) return valid(h) ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_NOT_INITIALIZED;
    if (!empty) require_device(api, x, n, incx, sizeof(T));
    return reduction(api, h, result, [=] { return extreme_index(n, x, incx, largest); });
}

template <class T>
cublasStatus_t copy_or_swap(const char* api, cublasHandle_t h, int n, T* x, int incx, T* y,
                            int incy, bool swap) {
    if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (n <= 0) return CUBLAS_STATUS_SUCCESS;
    if (!x || !y) return CUBLAS_STATUS_INVALID_VALUE;
    require_device(api, x, n, incx, sizeof(T));
    require_device(api, y, n, incy, sizeof(T));
    return submit(
        h, api,
        [=] {
            if (swap) blas_swap(n, x, incx, y, incy);
            else blas_copy(n, x, incx, y, incy);
        },
        false);
}

template <class T>
cublasStatus_t gemv(const char* api, cublasHandle_t h, cublasOperation_t trans, int m, int n,
                    const T* alpha, const T* A, int lda, const T* x, int incx, const T* beta, T* y,
                    int incy) {
    if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!is_op(trans) || m < 0 || n < 0 || lda < max1(m) || incx == 0 || incy == 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    if (!alpha || !beta || !A || !x || !y) return CUBLAS_STATUS_INVALID_VALUE;
    bool t = trans != CUBLAS_OP_N;
    require_device(api, A, n, lda, sizeof(T));
    require_device(api, x, t ? m : n, incx, sizeof(T));
    require_device(api, y, t ? n : m, incy, sizeof(T));
    Scalar<T> a = scalar(h, alpha), b = scalar(h, beta);
    return submit(
        h, api, [=] { blas_gemv(t, m, n, a.get(), A, lda, x, incx, b.get(), y, incy); }, false);
}

// C = alpha op(A) + beta op(B), all m x n after the operations. In place is allowed when C is A
// (or B) untransposed with the same ld, as cuBLAS documents.
template <class T>
cublasStatus_t geam(const char* api, cublasHandle_t h, cublasOperation_t transa,
                    cublasOperation_t transb, int m, int n, const T* alpha, const T* A, int lda,
                    const T* beta, const T* B, int ldb, T* C, int ldc) {
    if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
    if (!is_op(transa) || !is_op(transb) || m < 0 || n < 0 || lda < max1(ta ? n : m) ||
        ldb < max1(tb ? n : m) || ldc < max1(m))
        return CUBLAS_STATUS_INVALID_VALUE;
    if ((C == A && (ta || lda != ldc)) || (C == B && (tb || ldb != ldc)))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    if (!alpha || !beta || !C) return CUBLAS_STATUS_INVALID_VALUE;
    require_device(api, A, ta ? m : n, lda, sizeof(T));
    require_device(api, B, tb ? m : n, ldb, sizeof(T));
    require_device(api, C, n, ldc, sizeof(T));
    Scalar<T> sa = scalar(h, alpha), sb = scalar(h, beta);
    return submit(
        h, api,
        [=] {
            T a = sa.get(), b = sb.get();
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) {
                    // A term with a zero scale is not read (it may hold NaN or not exist).
                    T x = a == T(0) ? T(0)
                                    : a * (ta ? A[j + (size_t)i * lda] : A[i + (size_t)j * lda]);
                    T y = b == T(0) ? T(0)
                                    : b * (tb ? B[j + (size_t)i * ldb] : B[i + (size_t)j * ldb]);
                    C[i + (size_t)j * ldc] = x + y;
                }
        },
        false);
}

// ---------------------------------------------------------------------------------------------
// gemm: the legacy arguments become cuBLASLt descriptors on the stack.

// The scalar type cuBLAS uses with a compute type, or -1 when this implementation has none.
int scale_type_of(cublasComputeType_t compute) {
    switch (compute) {
        case CUBLAS_COMPUTE_16F:
        case CUBLAS_COMPUTE_16F_PEDANTIC:
            return CUDA_R_16F;
        case CUBLAS_COMPUTE_32F:
        case CUBLAS_COMPUTE_32F_PEDANTIC:
        case CUBLAS_COMPUTE_32F_FAST_16F:
        case CUBLAS_COMPUTE_32F_FAST_16BF:
        case CUBLAS_COMPUTE_32F_FAST_TF32:
            return CUDA_R_32F;
        case CUBLAS_COMPUTE_64F:
        case CUBLAS_COMPUTE_64F_PEDANTIC:
            return CUDA_R_64F;
        default:
            return -1;
    }
}

bool valid_algo(int algo) {
    return (algo >= CUBLAS_GEMM_DEFAULT && algo <= CUBLAS_GEMM_ALGO23) ||
           (algo >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP) ||
           algo == CUBLAS_GEMM_AUTOTUNE;
}

struct GemmCall {
    cublasOperation_t transa, transb;
    int m, n, k;
    const void* alpha;
    const void* A;
    cudaDataType_t a_type;
    int lda;
    long long stride_a;
    const void* B;
    cudaDataType_t b_type;
    int ldb;
    long long stride_b;
    const void* beta;
    void* C;
    cudaDataType_t c_type;
    int ldc;
    long long stride_c;
    int batch;
    cublasComputeType_t compute;
    int algo;
    const void* const* a_array;  // pointer-array batches: the device arrays (else null)
    const void* const* b_array;
    void* const* c_array;
};

cublasStatus_t set_layout(cublasLtMatrixLayoutOpaque_t* storage, cudaDataType_t type, int rows,
                          int cols, int ld, int batch, long long stride) {
    auto l = reinterpret_cast<cublasLtMatrixLayout_t>(storage);
    cublasStatus_t s = cublasLtMatrixLayoutInit(l, type, rows, cols, ld);
    int32_t count = batch;
    int64_t offset = stride;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                             sizeof count);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                             &offset, sizeof offset);
    return s;
}

cublasStatus_t gemm(const char* api, cublasHandle_t h, const GemmCall& g) {
    if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    bool ta = g.transa != CUBLAS_OP_N, tb = g.transb != CUBLAS_OP_N;
    if (!is_op(g.transa) || !is_op(g.transb) || g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 0 ||
        g.lda < max1(ta ? g.k : g.m) || g.ldb < max1(tb ? g.n : g.k) || g.ldc < max1(g.m) ||
        !valid_algo(g.algo))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (g.m == 0 || g.n == 0 || g.batch == 0) return CUBLAS_STATUS_SUCCESS;
    int scale = scale_type_of(g.compute);
    if (scale < 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    // FP8 is cuBLASLt's alone (its scales have no place in these calls).
    if (is_fp8(g.a_type) || is_fp8(g.b_type) || is_fp8(g.c_type))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!g.alpha || !g.beta) return CUBLAS_STATUS_INVALID_VALUE;

    cublasLtMatmulDescOpaque_t desc_storage;
    cublasLtMatrixLayoutOpaque_t a, b, c;
    auto desc = reinterpret_cast<cublasLtMatmulDesc_t>(&desc_storage);
    cublasStatus_t s = cublasLtMatmulDescInit(desc, g.compute, (cudaDataType_t)scale);
    int32_t transa = g.transa, transb = g.transb, pointer_mode = h->pointer_mode;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa,
                                           sizeof transa);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb,
                                           sizeof transb);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pointer_mode,
                                           sizeof pointer_mode);
    int per_call = g.a_array ? 1 : g.batch;  // pointer arrays: one matrix per Lt problem
    if (s == CUBLAS_STATUS_SUCCESS)
        s = set_layout(&a, g.a_type, ta ? g.k : g.m, ta ? g.m : g.k, g.lda, per_call, g.stride_a);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = set_layout(&b, g.b_type, tb ? g.n : g.k, tb ? g.k : g.n, g.ldb, per_call, g.stride_b);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = set_layout(&c, g.c_type, g.m, g.n, g.ldc, per_call, g.stride_c);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    auto al = reinterpret_cast<cublasLtMatrixLayout_t>(&a);
    auto bl = reinterpret_cast<cublasLtMatrixLayout_t>(&b);
    auto cl = reinterpret_cast<cublasLtMatrixLayout_t>(&c);
    if (g.a_array) {
        if (!g.b_array || !g.c_array) return CUBLAS_STATUS_INVALID_VALUE;
        return matmul_arrays(api, desc, g.alpha, g.a_array, al, g.b_array, bl, g.beta, g.c_array,
                             cl, g.batch, h->stream);
    }
    return matmul(api, desc, g.alpha, g.A, al, g.B, bl, g.beta, g.C, cl, g.C, cl, nullptr,
                  h->stream);
}

GemmCall strided(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* alpha,
                 const void* A, cudaDataType_t at, int lda, long long sa, const void* B,
                 cudaDataType_t bt, int ldb, long long sb, const void* beta, void* C,
                 cudaDataType_t ct, int ldc, long long sc, int batch, cublasComputeType_t compute,
                 int algo) {
    return GemmCall{ta, tb,    m,       n,    k,       alpha,   A,      at, lda,
                    sa, B,     bt,      ldb,  sb,      beta,    C,      ct, ldc,
                    sc, batch, compute, algo, nullptr, nullptr, nullptr};
}

GemmCall arrays(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* alpha,
                const void* const* A, cudaDataType_t at, int lda, const void* const* B,
                cudaDataType_t bt, int ldb, const void* beta, void* const* C, cudaDataType_t ct,
                int ldc, int batch, cublasComputeType_t compute, int algo) {
    GemmCall g = strided(ta, tb, m, n, k, alpha, nullptr, at, lda, 0, nullptr, bt, ldb, 0, beta,
                         nullptr, ct, ldc, 0, batch, compute, algo);
    g.a_array = A;
    g.b_array = B;
    g.c_array = C;
    return g;
}

// The compute type of cublas<t>gemm: fp32 data honour CUBLAS_PEDANTIC_MATH, as cuBLAS does.
cublasComputeType_t compute_of(cublasHandle_t h, cudaDataType_t type) {
    bool pedantic = valid(h) && (h->math_mode & 0xf) == CUBLAS_PEDANTIC_MATH;
    switch (type) {
        case CUDA_R_16F:
            return pedantic ? CUBLAS_COMPUTE_16F_PEDANTIC : CUBLAS_COMPUTE_16F;
        case CUDA_R_64F:
            return pedantic ? CUBLAS_COMPUTE_64F_PEDANTIC : CUBLAS_COMPUTE_64F;
        default:
            return pedantic ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
    }
}

// cudaMemcpy2D between a host and a device matrix, as cublasSet/GetMatrix(Async) and
// cublasSet/GetVector(Async) do (a vector is a matrix of one row of `n` columns `inc` apart).
cublasStatus_t copy_matrix(int rows, int cols, int elem, const void* src, int ld_src, void* dst,
                           int ld_dst, cudaMemcpyKind kind, cudaStream_t stream, bool async) {
    if (rows < 0 || cols < 0 || elem <= 0 || ld_src < max1(rows) || ld_dst < max1(rows))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (rows == 0 || cols == 0) return CUBLAS_STATUS_SUCCESS;
    size_t width = (size_t)rows * elem;
    cudaError_t err = async ? cudaMemcpy2DAsync(dst, (size_t)ld_dst * elem, src,
                                                (size_t)ld_src * elem, width, cols, kind, stream)
                            : cudaMemcpy2D(dst, (size_t)ld_dst * elem, src, (size_t)ld_src * elem,
                                           width, cols, kind);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return CUBLAS_STATUS_MAPPING_ERROR;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t copy_vector(int n, int elem, const void* src, int inc_src, void* dst, int inc_dst,
                           cudaMemcpyKind kind, cudaStream_t stream, bool async) {
    if (n < 0 || elem <= 0 || inc_src <= 0 || inc_dst <= 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (n == 0) return CUBLAS_STATUS_SUCCESS;
    return copy_matrix(1, n, elem, src, inc_src, dst, inc_dst, kind, stream, async);
}

}  // namespace

extern "C" {

// ---------------------------------------------------------------------------------------------
// The handle.
cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    *handle = new (std::nothrow) cublasContext{kLegacyMagic,
                                               nullptr,
                                               CUBLAS_POINTER_MODE_HOST,
                                               CUBLAS_DEFAULT_MATH,
                                               CUBLAS_ATOMICS_NOT_ALLOWED,
                                               nullptr,
                                               0};
    return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
    if (!valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    // Work already queued still runs: it holds everything it needs.
    handle->magic = 0;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int* version) {
    if (!valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!version) return CUBLAS_STATUS_INVALID_VALUE;
    *version = CUBLAS_VERSION;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value) {
    return cublasLtGetProperty(type, value);
}

size_t cublasGetCudartVersion(void) { return CUDART_VERSION; }

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
    if (!valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    // A user workspace belongs to its stream; cuBLAS falls back to its own on a stream change.
    handle->workspace = nullptr;
    handle->workspace_bytes = 0;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
    if (!valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!stream) return CUBLAS_STATUS_INVALID_VALUE;
    *stream = handle->stream;
    return CUBLAS_STATUS_SUCCESS;
}

// The product needs no workspace here; a given one is checked (256-byte alignment) and kept.
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
    if (!valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if ((bytes > 0 && !workspace) || (uintptr_t)workspace % 256 != 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->workspace = workspace;
    handle->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t* mode) {
    if (!valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->pointer_mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
    if (!valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t* mode) {
    if (!valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->atomics;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode) {
    if (!valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_ATOMICS_NOT_ALLOWED && mode != CUBLAS_ATOMICS_ALLOWED)
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->atomics = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
    if (!valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->math_mode;
    return CUBLAS_STATUS_SUCCESS;
}

// The modes only permit faster arithmetic (TF32, reduced-precision reductions); the CPU computes
// in full fp32 whatever they say.
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    if (!valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    unsigned base = mode & 0xf, flags = mode & ~0xfu;
    if ((base != CUBLAS_DEFAULT_MATH && base != CUBLAS_TENSOR_OP_MATH &&
         base != CUBLAS_PEDANTIC_MATH && base != CUBLAS_TF32_TENSOR_OP_MATH &&
         base != CUBLAS_FP32_EMULATED_BF16X9_MATH &&
         base != CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH) ||
        (flags & ~(unsigned)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION))
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->math_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) { return status_name(status); }

const char* cublasGetStatusString(cublasStatus_t status) { return status_text(status); }

// ---------------------------------------------------------------------------------------------
// Host <-> device copies.
cublasStatus_t cublasSetVector(int n, int elem, const void* x, int incx, void* y, int incy) {
    return copy_vector(n, elem, x, incx, y, incy, cudaMemcpyHostToDevice, nullptr, false);
}
cublasStatus_t cublasGetVector(int n, int elem, const void* x, int incx, void* y, int incy) {
    return copy_vector(n, elem, x, incx, y, incy, cudaMemcpyDeviceToHost, nullptr, false);
}
cublasStatus_t cublasSetVectorAsync(int n, int elem, const void* x, int incx, void* y, int incy,
                                    cudaStream_t stream) {
    return copy_vector(n, elem, x, incx, y, incy, cudaMemcpyHostToDevice, stream, true);
}
cublasStatus_t cublasGetVectorAsync(int n, int elem, const void* x, int incx, void* y, int incy,
                                    cudaStream_t stream) {
    return copy_vector(n, elem, x, incx, y, incy, cudaMemcpyDeviceToHost, stream, true);
}
cublasStatus_t cublasSetMatrix(int rows, int cols, int elem, const void* A, int lda, void* B,
                               int ldb) {
    return copy_matrix(rows, cols, elem, A, lda, B, ldb, cudaMemcpyHostToDevice, nullptr, false);
}
cublasStatus_t cublasGetMatrix(int rows, int cols, int elem, const void* A, int lda, void* B,
                               int ldb) {
    return copy_matrix(rows, cols, elem, A, lda, B, ldb, cudaMemcpyDeviceToHost, nullptr, false);
}
cublasStatus_t cublasSetMatrixAsync(int rows, int cols, int elem, const void* A, int lda, void* B,
                                    int ldb, cudaStream_t stream) {
    return copy_matrix(rows, cols, elem, A, lda, B, ldb, cudaMemcpyHostToDevice, stream, true);
}
cublasStatus_t cublasGetMatrixAsync(int rows, int cols, int elem, const void* A, int lda, void* B,
                                    int ldb, cudaStream_t stream) {
    return copy_matrix(rows, cols, elem, A, lda, B, ldb, cudaMemcpyDeviceToHost, stream, true);
}

// ---------------------------------------------------------------------------------------------
// Level 1.
cublasStatus_t cublasSaxpy_v2(cublasHandle_t h, int n, const float* alpha, const float* x, int incx,
                              float* y, int incy) {
    return axpy("cublasSaxpy", h, n, alpha, x, incx, y, incy);
}
cublasStatus_t cublasDaxpy_v2(cublasHandle_t h, int n, const double* alpha, const double* x,
                              int incx, double* y, int incy) {
    return axpy("cublasDaxpy", h, n, alpha, x, incx, y, incy);
}
cublasStatus_t cublasSscal_v2(cublasHandle_t h, int n, const float* alpha, float* x, int incx) {
    return scal("cublasSscal", h, n, alpha, x, incx);
}
cublasStatus_t cublasDscal_v2(cublasHandle_t h, int n, const double* alpha, double* x, int incx) {
    return scal("cublasDscal", h, n, alpha, x, incx);
}
cublasStatus_t cublasSdot_v2(cublasHandle_t h, int n, const float* x, int incx, const float* y,
                             int incy, float* result) {
    return dot("cublasSdot", h, n, x, incx, y, incy, result);
}
cublasStatus_t cublasDdot_v2(cublasHandle_t h, int n, const double* x, int incx, const double* y,
                             int incy, double* result) {
    return dot("cublasDdot", h, n, x, incx, y, incy, result);
}
cublasStatus_t cublasSnrm2_v2(cublasHandle_t h, int n, const float* x, int incx, float* result) {
    return vector_norm("cublasSnrm2", h, n, x, incx, result,
                       [](int n, const float* x, int incx) { return blas_nrm2(n, x, incx); });
}
cublasStatus_t cublasDnrm2_v2(cublasHandle_t h, int n, const double* x, int incx, double* result) {
    return vector_norm("cublasDnrm2", h, n, x, incx, result,
                       [](int n, const double* x, int incx) { return blas_nrm2(n, x, incx); });
}
cublasStatus_t cublasSasum_v2(cublasHandle_t h, int n, const float* x, int incx, float* result) {
    return vector_norm("cublasSasum", h, n, x, incx, result,
                       [](int n, const float* x, int incx) { return blas_asum(n, x, incx); });
}
cublasStatus_t cublasDasum_v2(cublasHandle_t h, int n, const double* x, int incx, double* result) {
    return vector_norm("cublasDasum", h, n, x, incx, result,
                       [](int n, const double* x, int incx) { return blas_asum(n, x, incx); });
}
cublasStatus_t cublasIsamax_v2(cublasHandle_t h, int n, const float* x, int incx, int* result) {
    return extreme("cublasIsamax", h, n, x, incx, result, true);
}
cublasStatus_t cublasIdamax_v2(cublasHandle_t h, int n, const double* x, int incx, int* result) {
    return extreme("cublasIdamax", h, n, x, incx, result, true);
}
cublasStatus_t cublasIsamin_v2(cublasHandle_t h, int n, const float* x, int incx, int* result) {
    return extreme("cublasIsamin", h, n, x, incx, result, false);
}
cublasStatus_t cublasIdamin_v2(cublasHandle_t h, int n, const double* x, int incx, int* result) {
    return extreme("cublasIdamin", h, n, x, incx, result, false);
}
cublasStatus_t cublasScopy_v2(cublasHandle_t h, int n, const float* x, int incx, float* y,
                              int incy) {
    return copy_or_swap("cublasScopy", h, n, const_cast<float*>(x), incx, y, incy, false);
}
cublasStatus_t cublasDcopy_v2(cublasHandle_t h, int n, const double* x, int incx, double* y,
                              int incy) {
    return copy_or_swap("cublasDcopy", h, n, const_cast<double*>(x), incx, y, incy, false);
}
cublasStatus_t cublasSswap_v2(cublasHandle_t h, int n, float* x, int incx, float* y, int incy) {
    return copy_or_swap("cublasSswap", h, n, x, incx, y, incy, true);
}
cublasStatus_t cublasDswap_v2(cublasHandle_t h, int n, double* x, int incx, double* y, int incy) {
    return copy_or_swap("cublasDswap", h, n, x, incx, y, incy, true);
}

// ---------------------------------------------------------------------------------------------
// Level 2 and geam.
cublasStatus_t cublasSgemv_v2(cublasHandle_t h, cublasOperation_t trans, int m, int n,
                              const float* alpha, const float* A, int lda, const float* x, int incx,
                              const float* beta, float* y, int incy) {
    return gemv("cublasSgemv", h, trans, m, n, alpha, A, lda, x, incx, beta, y, incy);
}
cublasStatus_t cublasDgemv_v2(cublasHandle_t h, cublasOperation_t trans, int m, int n,
                              const double* alpha, const double* A, int lda, const double* x,
                              int incx, const double* beta, double* y, int incy) {
    return gemv("cublasDgemv", h, trans, m, n, alpha, A, lda, x, incx, beta, y, incy);
}
cublasStatus_t cublasSgeam(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb,
                           int m, int n, const float* alpha, const float* A, int lda,
                           const float* beta, const float* B, int ldb, float* C, int ldc) {
    return geam("cublasSgeam", h, transa, transb, m, n, alpha, A, lda, beta, B, ldb, C, ldc);
}
cublasStatus_t cublasDgeam(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb,
                           int m, int n, const double* alpha, const double* A, int lda,
                           const double* beta, const double* B, int ldb, double* C, int ldc) {
    return geam("cublasDgeam", h, transa, transb, m, n, alpha, A, lda, beta, B, ldb, C, ldc);
}

// ---------------------------------------------------------------------------------------------
// gemm.
cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                              int n, int k, const float* alpha, const float* A, int lda,
                              const float* B, int ldb, const float* beta, float* C, int ldc) {
    return gemm("cublasSgemm", h,
                strided(ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, 0, B, CUDA_R_32F, ldb, 0, beta,
                        C, CUDA_R_32F, ldc, 0, 1, compute_of(h, CUDA_R_32F), CUBLAS_GEMM_DEFAULT));
}
cublasStatus_t cublasDgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                              int n, int k, const double* alpha, const double* A, int lda,
                              const double* B, int ldb, const double* beta, double* C, int ldc) {
    return gemm("cublasDgemm", h,
                strided(ta, tb, m, n, k, alpha, A, CUDA_R_64F, lda, 0, B, CUDA_R_64F, ldb, 0, beta,
                        C, CUDA_R_64F, ldc, 0, 1, compute_of(h, CUDA_R_64F), CUBLAS_GEMM_DEFAULT));
}
cublasStatus_t cublasHgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const __half* alpha, const __half* A, int lda,
                           const __half* B, int ldb, const __half* beta, __half* C, int ldc) {
    return gemm("cublasHgemm", h,
                strided(ta, tb, m, n, k, alpha, A, CUDA_R_16F, lda, 0, B, CUDA_R_16F, ldb, 0, beta,
                        C, CUDA_R_16F, ldc, 0, 1, compute_of(h, CUDA_R_16F), CUBLAS_GEMM_DEFAULT));
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float* alpha, const float* A, int lda, long long sa,
                                         const float* B, int ldb, long long sb, const float* beta,
                                         float* C, int ldc, long long sc, int batch) {
    return gemm(
        "cublasSgemmStridedBatched", h,
        strided(ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, sa, B, CUDA_R_32F, ldb, sb, beta, C,
                CUDA_R_32F, ldc, sc, batch, compute_of(h, CUDA_R_32F), CUBLAS_GEMM_DEFAULT));
}
cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const double* alpha, const double* A, int lda,
                                         long long sa, const double* B, int ldb, long long sb,
                                         const double* beta, double* C, int ldc, long long sc,
                                         int batch) {
    return gemm(
        "cublasDgemmStridedBatched", h,
        strided(ta, tb, m, n, k, alpha, A, CUDA_R_64F, lda, sa, B, CUDA_R_64F, ldb, sb, beta, C,
                CUDA_R_64F, ldc, sc, batch, compute_of(h, CUDA_R_64F), CUBLAS_GEMM_DEFAULT));
}
cublasStatus_t cublasHgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const __half* alpha, const __half* A, int lda,
                                         long long sa, const __half* B, int ldb, long long sb,
                                         const __half* beta, __half* C, int ldc, long long sc,
                                         int batch) {
    return gemm(
        "cublasHgemmStridedBatched", h,
        strided(ta, tb, m, n, k, alpha, A, CUDA_R_16F, lda, sa, B, CUDA_R_16F, ldb, sb, beta, C,
                CUDA_R_16F, ldc, sc, batch, compute_of(h, CUDA_R_16F), CUBLAS_GEMM_DEFAULT));
}
cublasStatus_t cublasSgemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                  int m, int n, int k, const float* alpha, const float* const A[],
                                  int lda, const float* const B[], int ldb, const float* beta,
                                  float* const C[], int ldc, int batch) {
    return gemm("cublasSgemmBatched", h,
                arrays(ta, tb, m, n, k, alpha, (const void* const*)A, CUDA_R_32F, lda,
                       (const void* const*)B, CUDA_R_32F, ldb, beta, (void* const*)C, CUDA_R_32F,
                       ldc, batch, compute_of(h, CUDA_R_32F), CUBLAS_GEMM_DEFAULT));
}
cublasStatus_t cublasDgemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                  int m, int n, int k, const double* alpha, const double* const A[],
                                  int lda, const double* const B[], int ldb, const double* beta,
                                  double* const C[], int ldc, int batch) {
    return gemm("cublasDgemmBatched", h,
                arrays(ta, tb, m, n, k, alpha, (const void* const*)A, CUDA_R_64F, lda,
                       (const void* const*)B, CUDA_R_64F, ldb, beta, (void* const*)C, CUDA_R_64F,
                       ldc, batch, compute_of(h, CUDA_R_64F), CUBLAS_GEMM_DEFAULT));
}
cublasStatus_t cublasHgemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                  int m, int n, int k, const __half* alpha, const __half* const A[],
                                  int lda, const __half* const B[], int ldb, const __half* beta,
                                  __half* const C[], int ldc, int batch) {
    return gemm("cublasHgemmBatched", h,
                arrays(ta, tb, m, n, k, alpha, (const void* const*)A, CUDA_R_16F, lda,
                       (const void* const*)B, CUDA_R_16F, ldb, beta, (void* const*)C, CUDA_R_16F,
                       ldc, batch, compute_of(h, CUDA_R_16F), CUBLAS_GEMM_DEFAULT));
}
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void* alpha, const void* A, cudaDataType at,
                            int lda, const void* B, cudaDataType bt, int ldb, const void* beta,
                            void* C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) {
    return gemm("cublasGemmEx", h,
                strided(ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0,
                        1, compute, algo));
}
// cublasSgemm with lower-precision matrices: float scalars and float computation, which is
// cublasGemmEx with CUBLAS_COMPUTE_32F (and the same type combinations).
cublasStatus_t cublasSgemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                             int n, int k, const float* alpha, const void* A, cudaDataType at,
                             int lda, const void* B, cudaDataType bt, int ldb, const float* beta,
                             void* C, cudaDataType ct, int ldc) {
    return gemm("cublasSgemmEx", h,
                strided(ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0,
                        1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType at,
                                          int lda, long long sa, const void* B, cudaDataType bt,
                                          int ldb, long long sb, const void* beta, void* C,
                                          cudaDataType ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    return gemm("cublasGemmStridedBatchedEx", h,
                strided(ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc,
                        sc, batch, compute, algo));
}
cublasStatus_t cublasGemmBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                   int m, int n, int k, const void* alpha, const void* const A[],
                                   cudaDataType at, int lda, const void* const B[], cudaDataType bt,
                                   int ldb, const void* beta, void* const C[], cudaDataType ct,
                                   int ldc, int batch, cublasComputeType_t compute,
                                   cublasGemmAlgo_t algo) {
    return gemm("cublasGemmBatchedEx", h,
                arrays(ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, batch,
                       compute, algo));
}

}  // extern "C"
