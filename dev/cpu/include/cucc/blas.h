// cucc/blas.h: which BLAS the CPU cuBLASLt (dev/cpu/cublaslt, linked by -lcublasLt or -lcublas)
// runs on, for programs built by dev/cpu/cucc that want to say so or measure against it.
// dev/cpu/cublaslt/blas.cpp chooses and checks the library when the program starts.
#pragma once

extern "C" {

// One line naming the library, its version, file and core (the kernels chosen for this
// processor), how the core was chosen, and the candidates passed over with the reason, e.g.
//   OpenBLAS 0.3.34.481.3 (scipy-openblas32, /.../libscipy_openblas.so), core Haswell by its own
//   detection, 1 thread
// When no library is usable it says why (and the first BLAS call ends the process).
const char* cucc_blas_description(void);

// cblas_sgemm of that library, column-major, on the calling thread (host memory; under the CPU
// runtime device memory is host memory too): C = alpha op(A) op(B) + beta C with op(X) = X^T when
// trans_x != 0. For benchmarks and tests that compare the CPU cuBLASLt with the BLAS under it.
void cucc_blas_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                     int lda, const float* b, int ldb, float beta, float* c, int ldc);
}
