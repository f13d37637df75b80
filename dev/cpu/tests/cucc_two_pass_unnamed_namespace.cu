// Kernels in an unnamed namespace in a file that mentions __CUDA_ARCH__ (compiled by cucc in two
// passes, see "Two passes" in dev/cpu/cucc), as nccl-tests' verifiable/verifiable.cu writes them:
// kernel templates of several instantiations and a plain kernel. The host pass declares them
// only and its launches reach the device pass's definitions, so g++ warned, for each
// instantiation, that the kernel was "used but never defined" (214 warnings for
// verifiable.cu, where nvcc prints none); those warnings are dropped, and a function that really
// is never defined is still reported (the second case, compiled with -DUNDEFINED_HELPER).
//! cpu-only
//! run: ./prog => pass /unnamed namespace: scaled 2 and 3, added 1: ok/
//! run: out=$(dev/cpu/cucc -c dev/cpu/tests/cucc_two_pass_unnamed_namespace.cu -o build/cpu/tests/unnamed_ns.o 2>&1); echo "$out"; ! echo "$out" | grep -q "never defined" && echo "no warning about the kernels" => pass /no warning about the kernels/
//! run: dev/cpu/cucc -DUNDEFINED_HELPER -c dev/cpu/tests/cucc_two_pass_unnamed_namespace.cu -o build/cpu/tests/unnamed_ns_helper.o 2>&1 => pass /helper\(int\).* used but never defined/
#include <cstdio>

namespace {
// 1 in device code, 0 in host code: a kernel the host pass compiled would scale by 0.
__host__ __device__ int device_side() {
#ifdef __CUDA_ARCH__
    return 1;
#else
    return 0;
#endif
}

template <typename T>
__global__ void scale_kernel(T* p, T s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = p[i] * s * T(device_side());
}

__global__ void add_one_kernel(int* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += device_side();
}

#ifdef UNDEFINED_HELPER
int helper(int);  // declared, used, never defined: the warning stays
__attribute__((used)) int use_helper() { return helper(1); }
#endif
}  // namespace

int main() {
    const int n = 256;
    float* f = nullptr;
    int* d = nullptr;
    cudaMalloc(&f, n * sizeof(float));
    cudaMalloc(&d, n * sizeof(int));
    float hf[n];
    int hd[n];
    for (int i = 0; i < n; i++) {
        hf[i] = 1.0f;
        hd[i] = 1;
    }
    cudaMemcpy(f, hf, sizeof(hf), cudaMemcpyHostToDevice);
    cudaMemcpy(d, hd, sizeof(hd), cudaMemcpyHostToDevice);
    scale_kernel<<<n / 64, 64>>>(f, 2.0f, n);
    scale_kernel<<<n / 64, 64>>>(d, 3, n);
    add_one_kernel<<<n / 64, 64>>>(d, n);
    cudaMemcpy(hf, f, sizeof(hf), cudaMemcpyDeviceToHost);
    cudaMemcpy(hd, d, sizeof(hd), cudaMemcpyDeviceToHost);
    bool ok = cudaGetLastError() == cudaSuccess;
    for (int i = 0; i < n; i++) ok = ok && hf[i] == 2.0f && hd[i] == 4;
    printf("unnamed namespace: scaled 2 and 3, added 1: %s\n", ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
}
