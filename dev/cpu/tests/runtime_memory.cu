// runtime_memory.cu: the CPU runtime's devices and memory: properties of the simulated H100,
// device selection, cudaMalloc and the per-device limit, copies of every kind (with their
// argument checks), memsets, and the host-side behaviour of asynchronous copies to and from
// pageable memory. Every check compares with values computed here.
//! cpu-only
//! run: ./prog => pass /all memory checks passed/
//! run: CUCC_MEM_LIMIT=1M ./prog limit => pass /all memory checks passed/
//! run: CUCC_DEVICES=2 ./prog devices => pass /all memory checks passed/
//! run: CUCC_MEM_LIMIT=12X ./prog => fail /CUCC_MEM_LIMIT=12X: expected a byte count/
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "test_util.h"

static void properties() {
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    expect(!strcmp(p.name, "cucc CPU (H100-like)"), "device name");
    expect(p.multiProcessorCount == 132 && p.warpSize == 32 && p.major == 9 && p.minor == 0,
           "132 SMs, warp size 32, compute capability 9.0");
    expect(p.maxThreadsPerBlock == 1024 && p.maxThreadsDim[0] == 1024 &&
               p.maxThreadsDim[1] == 1024 && p.maxThreadsDim[2] == 64,
           "1024 threads per block, block dims {1024,1024,64}");
    expect(p.maxGridSize[0] == 2147483647 && p.maxGridSize[1] == 65535 && p.maxGridSize[2] == 65535,
           "grid dims {2^31-1,65535,65535}");
    expect(p.sharedMemPerBlock == 48 * 1024 && p.sharedMemPerBlockOptin == 227 * 1024 &&
               p.sharedMemPerMultiprocessor == 228 * 1024,
           "shared memory 48 KiB per block, 227 KiB opt-in, 228 KiB per SM");
    size_t free_bytes, total_bytes;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    expect(p.totalGlobalMem == total_bytes && p.regsPerBlock == 65536,
           "totalGlobalMem is cudaMemGetInfo's total; 65536 registers per block");
    int v;
    CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0));
    bool attrs = v == 132;
    CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    attrs &= v == 227 * 1024;
    CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, 0));
    attrs &= v > 1000000;
    CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, 0));
    attrs &= v == 9;
    expect(attrs, "cudaDeviceGetAttribute agrees with the properties");
    int count;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    expect(count == 8, "8 devices by default");
    expect_error(cudaSetDevice(8), cudaErrorInvalidDevice, "cudaSetDevice(8)");
    expect_error(cudaSetDevice(-1), cudaErrorInvalidDevice, "cudaSetDevice(-1)");
    expect_error(cudaGetDeviceProperties(&p, 8), cudaErrorInvalidDevice, "properties of device 8");
}

static void copies() {
    const int n = 1000;
    std::vector<int> h(n), back(n, -1);
    for (int i = 0; i < n; i++) h[i] = i * 31 - 7;
    size_t free0, total;
    CUDA_CHECK(cudaMemGetInfo(&free0, &total));
    int *a, *b;
    CUDA_CHECK(cudaMalloc(&a, n * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&b, n * sizeof(int)));
    size_t free1;
    CUDA_CHECK(cudaMemGetInfo(&free1, &total));
    expect(free0 - free1 >= 2 * n * sizeof(int) && free0 - free1 <= 2 * n * sizeof(int) + 512,
           "cudaMemGetInfo counts the two allocations");
    expect(((size_t)a % 256) == 0 && ((size_t)b % 256) == 0, "allocations are 256-byte aligned");
    expect(cucc::is_device_pointer(a + 5) && !cucc::is_device_pointer(h.data()) &&
               !cucc::is_device_pointer(a + n),
           "is_device_pointer: inside yes, host no, one past the end no");

    CUDA_CHECK(cudaMemcpy(a, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(b, a, n * sizeof(int), cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaMemcpy(back.data(), b, n * sizeof(int), cudaMemcpyDeviceToHost));
    expect(back == h, "host -> device -> device -> host round trip");
    std::fill(back.begin(), back.end(), -1);
    CUDA_CHECK(cudaMemcpy(b + 10, h.data(), 100 * sizeof(int), cudaMemcpyDefault));
    CUDA_CHECK(cudaMemcpy(back.data(), b + 10, 100 * sizeof(int), cudaMemcpyDefault));
    expect(std::equal(back.begin(), back.begin() + 100, h.begin()), "cudaMemcpyDefault both ways");
    std::vector<int> hh(n);
    CUDA_CHECK(cudaMemcpy(hh.data(), h.data(), n * sizeof(int), cudaMemcpyHostToHost));
    expect(hh == h, "cudaMemcpyHostToHost");

    expect_error(cudaMemcpy(back.data(), h.data(), 4, (cudaMemcpyKind)7),
                 cudaErrorInvalidMemcpyDirection, "copy kind 7");
    expect_error(cudaMemcpy(back.data(), h.data(), 4, cudaMemcpyHostToDevice),
                 cudaErrorInvalidValue, "host-to-device copy into host memory");
    expect_error(cudaMemcpy(back.data(), h.data(), 4, cudaMemcpyDeviceToHost),
                 cudaErrorInvalidValue, "device-to-host copy from host memory");
    expect_error(cudaMemcpy(a + n - 2, h.data(), 3 * sizeof(int), cudaMemcpyHostToDevice),
                 cudaErrorInvalidValue, "copy running past the end of an allocation");
    expect_error(cudaMemcpy(back.data(), a + n - 2, 3 * sizeof(int), cudaMemcpyDefault),
                 cudaErrorInvalidValue, "cudaMemcpyDefault running past the end of an allocation");

    CUDA_CHECK(cudaMemset(a, 0x5a, n * sizeof(int)));
    CUDA_CHECK(cudaMemsetAsync(a + 1, 0, 2 * sizeof(int), 0));
    CUDA_CHECK(cudaMemcpy(back.data(), a, n * sizeof(int), cudaMemcpyDeviceToHost));
    expect(back[0] == 0x5a5a5a5a && back[1] == 0 && back[2] == 0 && back[3] == 0x5a5a5a5a &&
               back[n - 1] == 0x5a5a5a5a,
           "cudaMemset and cudaMemsetAsync");
    expect_error(cudaMemset(back.data(), 0, 4), cudaErrorInvalidValue, "cudaMemset of host memory");

    // Asynchronous copies with pageable host memory behave as CUDA documents: the source of a
    // host-to-device copy may be reused once the call returns; a device-to-host copy into
    // pageable memory is complete when the call returns.
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    std::vector<int> src(h);
    CUDA_CHECK(cudaMemcpyAsync(b, src.data(), n * sizeof(int), cudaMemcpyHostToDevice, s));
    std::fill(src.begin(), src.end(), 0);
    std::fill(back.begin(), back.end(), -1);
    CUDA_CHECK(cudaMemcpyAsync(back.data(), b, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    expect(back == h, "async copies with pageable memory: source snapshot, destination complete");
    int* pinned;
    CUDA_CHECK(cudaMallocHost(&pinned, n * sizeof(int)));
    CUDA_CHECK(cudaMemcpyAsync(pinned, a, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    expect(pinned[5] == 0x5a5a5a5a, "async copy into pinned memory, after cudaStreamSynchronize");
    CUDA_CHECK(cudaFreeHost(pinned));
    CUDA_CHECK(cudaStreamDestroy(s));

    expect_error(cudaFree(a + 1), cudaErrorInvalidValue, "cudaFree of an interior pointer");
    expect_error(cudaFree(h.data()), cudaErrorInvalidValue, "cudaFree of host memory");
    expect_error(cudaFreeHost(a), cudaErrorInvalidValue, "cudaFreeHost of device memory");
    CUDA_CHECK(cudaFree(nullptr));
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    size_t free2;
    CUDA_CHECK(cudaMemGetInfo(&free2, &total));
    expect(free2 == free0, "cudaFree returns the memory");

    // Each device has its own limit and pool; allocations carry over device switches.
    CUDA_CHECK(cudaSetDevice(3));
    int* d3;
    CUDA_CHECK(cudaMalloc(&d3, 4096));
    CUDA_CHECK(cudaMemGetInfo(&free1, &total));
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaMemGetInfo(&free2, &total));
    expect(free1 == free0 - 4096 && free2 == free0, "memory is counted per device");
    CUDA_CHECK(cudaMemcpy(d3, h.data(), 16, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaFree(d3));
}

static void limit() {
    size_t free_bytes, total;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    expect(total == 1 << 20 && free_bytes == 1 << 20 && p.totalGlobalMem == 1 << 20,
           "CUCC_MEM_LIMIT=1M: total memory 1 MiB");
    void *x, *y;
    CUDA_CHECK(cudaMalloc(&x, 512 * 1024));
    expect_error(cudaMalloc(&y, 600 * 1024), cudaErrorMemoryAllocation,
                 "allocating past the limit");
    expect(cudaGetLastError() == cudaSuccess, "the allocation error is not sticky");
    CUDA_CHECK(cudaMalloc(&y, 512 * 1024));
    CUDA_CHECK(cudaFree(x));
    CUDA_CHECK(cudaFree(y));
    CUDA_CHECK(cudaMalloc(&x, 1 << 20));
    CUDA_CHECK(cudaFree(x));
}

static void devices() {
    int count;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    expect(count == 2, "CUCC_DEVICES=2: two devices");
    expect_error(cudaSetDevice(2), cudaErrorInvalidDevice, "cudaSetDevice(2)");
    CUDA_CHECK(cudaSetDevice(1));
    int d;
    CUDA_CHECK(cudaGetDevice(&d));
    expect(d == 1, "cudaGetDevice after cudaSetDevice(1)");
}

int main(int argc, char** argv) {
    const char* mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "limit")) limit();
    else if (!strcmp(mode, "devices")) devices();
    else {
        properties();
        copies();
    }
    return test_report("memory");
}
