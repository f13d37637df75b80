// cucc_cuda_arch.cu: code that branches on __CUDA_ARCH__ gets nvcc's two passes (see "Two
// passes" in dev/cpu/cucc): kernels and device functions see __CUDA_ARCH__ (900 for the default
// simulated device, or what -arch/-gencode choose), host code does not.
//   - a warp reduction that takes __reduce_add_sync under `#if __CUDA_ARCH__ >= 800` and a
//     shuffle loop otherwise: the sum is right either way and the path taken is the one for the
//     compiled architecture;
//   - __host__ __device__ functions (one external, one inline) return __CUDA_ARCH__ in device
//     code and -1 on the host, each side calling its own version; a `#ifndef __CUDA_ARCH__`
//     branch counts the host calls only;
//   - __device__, __constant__ and __managed__ variables, static ones too, are one object for
//     both passes: a kernel writes what cudaMemcpyFromSymbol (or the host, for __managed__)
//     reads, and reads what cudaMemcpyToSymbol wrote; an initialized one starts at its value;
//   - a template kernel launched with <<<>>> and through cudaLaunchKernel, a static kernel, and
//     cudaFuncGetAttributes reach the device pass's kernels;
//   - the file's static initializers run once (a constructor counting itself);
//   - cucc -v says which files take two passes and which one; with CUCC_COMPUTE_CAPABILITY below
//     the compiled architecture the first launch warns;
//   - a minimal file (no variables, no static kernel: nothing of the device pass to weaken or
//     globalize) builds and runs.
// The expected architecture is the argument (default 900).
//! cpu-only
//! run: ./prog => pass /all __CUDA_ARCH__ checks passed/
//! run: CUCC_COMPUTE_CAPABILITY=8.0 ./prog => pass /cucc: warning: .*cucc_cuda_arch.cu was compiled with __CUDA_ARCH__ 900, newer than the simulated device's compute capability 8.0/
//! run: d=$(mktemp -d) && dev/cpu/cucc -v -gencode arch=compute_75,code=sm_75 dev/cpu/tests/cucc_cuda_arch.cu -o $d/p 2>&1 | grep "^cucc: dev/cpu" && $d/p 750; r=$?; rm -rf $d; exit $r => pass /two passes \(dev/cpu/tests/cucc_cuda_arch.cu mentions __CUDA_ARCH__\).*__CUDA_ARCH__=750[\s\S]*shuffle loop[\s\S]*all __CUDA_ARCH__ checks passed/
//! run: d=$(mktemp -d) && printf '#include <cstdio>\n__host__ __device__ int arch() {\n#ifdef __CUDA_ARCH__\n  return __CUDA_ARCH__;\n#else\n  return -1;\n#endif\n}\n__global__ void k(int* o) { *o = arch(); }\nint main() { int* o; cudaMallocManaged(&o, 4); k<<<1, 1>>>(o); cudaDeviceSynchronize(); printf("minimal: device %%d host %%d\\n", *o, arch()); return *o == 900 ? 0 : 1; }\n' > $d/m.cu && dev/cpu/cucc $d/m.cu -o $d/m && $d/m; r=$?; rm -rf $d; exit $r => pass /minimal: device 900 host -1/
//! run: d=$(mktemp -d) && dev/cpu/cucc -v -c dev/cpu/tests/cucc_version.cu -o $d/v.o 2>&1 | grep "^cucc: dev/cpu"; r=$?; rm -rf $d; exit $r => pass /cucc_version.cu: one pass/
#include <cstdio>
#include <cstdlib>
#include <string>
#include "test_util.h"

__host__ __device__ int pass_arch() {
#ifdef __CUDA_ARCH__
    return __CUDA_ARCH__;
#else
    return -1;
#endif
}

inline __host__ __device__ int inline_pass_arch() {
#if defined(__CUDA_ARCH__)
    return __CUDA_ARCH__ + 1;
#else
    return -2;
#endif
}

int host_calls = 0;

__host__ __device__ int count_host_call() {
#ifndef __CUDA_ARCH__
    host_calls++;
    return 1;
#else
    return 0;
#endif
}

__device__ int arch_seen;
__constant__ int scale;
static __device__ int static_seen;
static __constant__ int static_scale = 4;

static __device__ int times_static_scale(int x) { return x * static_scale; }
__device__ int device_counter = 5;
__managed__ int managed_value;

int constructions = 0;
struct CountsItself {
    CountsItself() { constructions++; }
};
CountsItself counted;

// out[0] += scale * (sum of in), one atomicAdd per warp; path[0]: 800 for __reduce_add_sync, 1
// for the shuffle loop.
__global__ void reduce_kernel(const int* in, int* out, int* path) {
    int v = in[blockIdx.x * blockDim.x + threadIdx.x];
#if __CUDA_ARCH__ >= 800
    int sum = __reduce_add_sync(0xffffffff, v);
    if (threadIdx.x == 0) path[0] = 800;
#else
    int sum = v;
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffff, sum, offset);
    if (threadIdx.x == 0) path[0] = 1;
#endif
    if (threadIdx.x % 32 == 0) atomicAdd(out, sum * scale);
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        arch_seen = pass_arch();
        device_counter += count_host_call() + 1;
        managed_value = inline_pass_arch();
        static_seen = times_static_scale(pass_arch());
    }
}

template <class T, int N>
__global__ void fill_kernel(T* out) {
#ifdef __CUDA_ARCH__
    out[threadIdx.x] = (T)(N * pass_arch());
#else
    out[threadIdx.x] = (T)-1;  // never runs: kernels come from the device pass
#endif
}

static __global__ void static_kernel(int* out) { out[threadIdx.x] = inline_pass_arch(); }

int main(int argc, char** argv) {
    const int arch = argc > 1 ? atoi(argv[1]) : 900;
    char line[200];
    snprintf(line, sizeof line, "host side: pass_arch %d, inline_pass_arch %d (want -1, -2)",
             pass_arch(), inline_pass_arch());
    expect(pass_arch() == -1 && inline_pass_arch() == -2, line);
    count_host_call();
    expect(constructions == 1, "static initializer ran once", std::to_string(constructions));

    const int n = 256, scale_value = 3;
    int *in, *out, *path;
    CUDA_CHECK(cudaMallocManaged(&in, n * sizeof(int)));
    CUDA_CHECK(cudaMallocManaged(&out, n * sizeof(int)));
    CUDA_CHECK(cudaMallocManaged(&path, sizeof(int)));
    long long want = 0;
    for (int i = 0; i < n; i++) {
        in[i] = i * 7 % 101 - 50;
        want += in[i];
    }
    out[0] = 0;
    CUDA_CHECK(cudaMemcpyToSymbol(scale, &scale_value, sizeof(int)));
    reduce_kernel<<<n / 64, 64>>>(in, out, path);
    CUDA_CHECK(cudaDeviceSynchronize());
    int seen = 0, counter = 0;
    CUDA_CHECK(cudaMemcpyFromSymbol(&seen, arch_seen, sizeof(int)));
    CUDA_CHECK(cudaMemcpyFromSymbol(&counter, device_counter, sizeof(int)));
    snprintf(line, sizeof line, "warp reduction: %d (want %lld), by the %s", out[0],
             want * scale_value, path[0] == 800 ? "__reduce_add_sync path" : "shuffle loop");
    expect(out[0] == want * scale_value && path[0] == (arch >= 800 ? 800 : 1), line);
    snprintf(line, sizeof line, "device side: pass_arch %d, inline_pass_arch %d (want %d, %d)",
             seen, managed_value, arch, arch + 1);
    expect(seen == arch && managed_value == arch + 1, line);
    int static_value = 0;
    CUDA_CHECK(cudaMemcpyFromSymbol(&static_value, static_seen, sizeof(int)));
    snprintf(line, sizeof line, "static __device__ variable %d (want %d)", static_value, arch * 4);
    expect(static_value == arch * 4, line);
    snprintf(line, sizeof line, "__device__ counter %d (want 6), host calls %d (want 1)", counter,
             host_calls);
    expect(counter == 6 && host_calls == 1, line);

    fill_kernel<float, 2><<<1, 4>>>((float*)out);
    CUDA_CHECK(cudaDeviceSynchronize());
    snprintf(line, sizeof line, "template kernel by <<<>>>: %g (want %d)", ((float*)out)[3],
             2 * arch);
    expect(((float*)out)[3] == 2.0f * arch, line);
    void* args[] = {&out};
    CUDA_CHECK(cudaLaunchKernel((const void*)fill_kernel<int, 3>, dim3(1), dim3(4), args, 0, 0));
    CUDA_CHECK(cudaDeviceSynchronize());
    snprintf(line, sizeof line, "template kernel by cudaLaunchKernel: %d (want %d)", out[3],
             3 * arch);
    expect(out[3] == 3 * arch, line);
    static_kernel<<<1, 2>>>(out);
    CUDA_CHECK(cudaDeviceSynchronize());
    snprintf(line, sizeof line, "static kernel: %d (want %d)", out[1], arch + 1);
    expect(out[1] == arch + 1, line);
    cudaFuncAttributes attr;
    CUDA_CHECK(cudaFuncGetAttributes(&attr, reduce_kernel));
    snprintf(line, sizeof line, "cudaFuncGetAttributes: maxThreadsPerBlock %d (want 1024)",
             attr.maxThreadsPerBlock);
    expect(attr.maxThreadsPerBlock == 1024, line);
    CUDA_CHECK(cudaFree(in));
    CUDA_CHECK(cudaFree(out));
    CUDA_CHECK(cudaFree(path));
    return test_report("__CUDA_ARCH__");
}
