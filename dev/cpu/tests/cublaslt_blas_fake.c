// cublaslt_blas_fake.c: a stand-in OpenBLAS that the CPU cuBLASLt's BLAS self-check must reject
// (dev/cpu/cublaslt/blas.cpp). cublaslt_blas.cu builds it as a shared library and names it first
// in CUCC_BLAS. It has every symbol the CPU cuBLASLt loads. Its dgemm, the first function the
// check calls, leaves C as it was: a wrong result. Built with -DCRASH, dgemm aborts instead.
#include <stdlib.h>

void openblas_set_num_threads(int threads) { (void)threads; }
char* openblas_get_config(void) { return "OpenBLAS 0.0.0 (fake)"; }
char* openblas_get_corename(void) { return "Fake"; }

void cblas_dgemm(int order, int trans_a, int trans_b, int m, int n, int k, double alpha,
                 const double* a, int lda, const double* b, int ldb, double beta, double* c,
                 int ldc) {
    (void)order, (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)alpha, (void)a;
    (void)lda, (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
#ifdef CRASH
    abort();
#endif
}

// Never called: the check stops at dgemm's first difference, and a library that fails it is not
// used. Defined so that the library loads and reaches the check.
void cblas_sgemm(void) {}
void cblas_sgemv(void) {}
void cblas_dgemv(void) {}
void cblas_saxpy(void) {}
void cblas_daxpy(void) {}
void cblas_sscal(void) {}
void cblas_dscal(void) {}
void cblas_sdot(void) {}
void cblas_ddot(void) {}
void cblas_snrm2(void) {}
void cblas_sasum(void) {}
void cblas_dnrm2(void) {}
void cblas_dasum(void) {}
void cblas_scopy(void) {}
void cblas_dcopy(void) {}
void cblas_sswap(void) {}
void cblas_dswap(void) {}
