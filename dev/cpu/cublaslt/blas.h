// blas.h: the BLAS functions the CPU cuBLASLt and cuBLAS run on, as one table of function
// pointers filled when the program starts (blas.cpp says which library, how it is loaded and how
// it is checked). Calls take the CBLAS arguments; the enumerations are passed as the int values
// every cblas.h gives them, so no BLAS header is needed to build the CPU runtime.
#pragma once

namespace cublaslt_cpu {

// CBLAS_ORDER and CBLAS_TRANSPOSE values.
constexpr int kBlasColMajor = 102;
constexpr int kBlasNoTrans = 111;
constexpr int kBlasTrans = 112;

template <class T>
using GemmFn = void (*)(int order, int trans_a, int trans_b, int m, int n, int k, T alpha,
                        const T* a, int lda, const T* b, int ldb, T beta, T* c, int ldc);
template <class T>
using GemvFn = void (*)(int order, int trans, int m, int n, T alpha, const T* a, int lda,
                        const T* x, int incx, T beta, T* y, int incy);
template <class T>
using AxpyFn = void (*)(int n, T alpha, const T* x, int incx, T* y, int incy);
template <class T>
using ScalFn = void (*)(int n, T alpha, T* x, int incx);
template <class T>
using DotFn = T (*)(int n, const T* x, int incx, const T* y, int incy);
template <class T>
using NormFn = T (*)(int n, const T* x, int incx);
template <class T>
using CopyFn = void (*)(int n, const T* x, int incx, T* y, int incy);
template <class T>
using SwapFn = void (*)(int n, T* x, int incx, T* y, int incy);

struct Blas {
    GemmFn<float> sgemm;
    GemmFn<double> dgemm;
    GemvFn<float> sgemv;
    GemvFn<double> dgemv;
    AxpyFn<float> saxpy;
    AxpyFn<double> daxpy;
    ScalFn<float> sscal;
    ScalFn<double> dscal;
    DotFn<float> sdot;
    DotFn<double> ddot;
    NormFn<float> snrm2, sasum;
    NormFn<double> dnrm2, dasum;
    CopyFn<float> scopy;
    CopyFn<double> dcopy;
    SwapFn<float> sswap;
    SwapFn<double> dswap;
};

// The table, its library single-threaded and checked. Ends the process with the reason when no
// library could be loaded or none passed its check.
const Blas& blas();

}  // namespace cublaslt_cpu
