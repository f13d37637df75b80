// The simulated device as programs query it:
//   - cudaDeviceGetAttribute answers every cudaDeviceAttr of the CUDA 13 headers (the list
//     below is the enum, copied from driver_types.h), agrees with cudaGetDeviceProperties where
//     a property exists, gives the H100's values for the others, and refuses values between
//     the enumerators and past cudaDevAttrMax;
//   - cudaSetDeviceFlags / cudaGetDeviceFlags, cudaDeviceSetLimit / GetLimit (H100 defaults),
//     cache and shared memory configuration, cudaDeviceGetPCIBusId and its inverse, peer access
//     and its errors, P2P attributes, cudaChooseDevice, cudaInitDevice, the profiler calls, and
//     cudaDeviceReset restoring the defaults;
//   - clock64() in a kernel counts cycles of the reported cudaDevAttrClockRate: the count
//     across a 100 ms host sleep, divided by the rate, lies between 100 ms and the host's
//     own measure of the interval.
//! cpu-only
//! run: ./prog => pass /all device checks passed/
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <set>
#include <vector>
#include <cuda_profiler_api.h>
#include "test_util.h"

const cudaDeviceAttr kAttributes[] = {
    cudaDevAttrMaxThreadsPerBlock,
    cudaDevAttrMaxBlockDimX,
    cudaDevAttrMaxBlockDimY,
    cudaDevAttrMaxBlockDimZ,
    cudaDevAttrMaxGridDimX,
    cudaDevAttrMaxGridDimY,
    cudaDevAttrMaxGridDimZ,
    cudaDevAttrMaxSharedMemoryPerBlock,
    cudaDevAttrTotalConstantMemory,
    cudaDevAttrWarpSize,
    cudaDevAttrMaxPitch,
    cudaDevAttrMaxRegistersPerBlock,
    cudaDevAttrClockRate,
    cudaDevAttrTextureAlignment,
    cudaDevAttrGpuOverlap,
    cudaDevAttrMultiProcessorCount,
    cudaDevAttrKernelExecTimeout,
    cudaDevAttrIntegrated,
    cudaDevAttrCanMapHostMemory,
    cudaDevAttrComputeMode,
    cudaDevAttrMaxTexture1DWidth,
    cudaDevAttrMaxTexture2DWidth,
    cudaDevAttrMaxTexture2DHeight,
    cudaDevAttrMaxTexture3DWidth,
    cudaDevAttrMaxTexture3DHeight,
    cudaDevAttrMaxTexture3DDepth,
    cudaDevAttrMaxTexture2DLayeredWidth,
    cudaDevAttrMaxTexture2DLayeredHeight,
    cudaDevAttrMaxTexture2DLayeredLayers,
    cudaDevAttrSurfaceAlignment,
    cudaDevAttrConcurrentKernels,
    cudaDevAttrEccEnabled,
    cudaDevAttrPciBusId,
    cudaDevAttrPciDeviceId,
    cudaDevAttrTccDriver,
    cudaDevAttrMemoryClockRate,
    cudaDevAttrGlobalMemoryBusWidth,
    cudaDevAttrL2CacheSize,
    cudaDevAttrMaxThreadsPerMultiProcessor,
    cudaDevAttrAsyncEngineCount,
    cudaDevAttrUnifiedAddressing,
    cudaDevAttrMaxTexture1DLayeredWidth,
    cudaDevAttrMaxTexture1DLayeredLayers,
    cudaDevAttrMaxTexture2DGatherWidth,
    cudaDevAttrMaxTexture2DGatherHeight,
    cudaDevAttrMaxTexture3DWidthAlt,
    cudaDevAttrMaxTexture3DHeightAlt,
    cudaDevAttrMaxTexture3DDepthAlt,
    cudaDevAttrPciDomainId,
    cudaDevAttrTexturePitchAlignment,
    cudaDevAttrMaxTextureCubemapWidth,
    cudaDevAttrMaxTextureCubemapLayeredWidth,
    cudaDevAttrMaxTextureCubemapLayeredLayers,
    cudaDevAttrMaxSurface1DWidth,
    cudaDevAttrMaxSurface2DWidth,
    cudaDevAttrMaxSurface2DHeight,
    cudaDevAttrMaxSurface3DWidth,
    cudaDevAttrMaxSurface3DHeight,
    cudaDevAttrMaxSurface3DDepth,
    cudaDevAttrMaxSurface1DLayeredWidth,
    cudaDevAttrMaxSurface1DLayeredLayers,
    cudaDevAttrMaxSurface2DLayeredWidth,
    cudaDevAttrMaxSurface2DLayeredHeight,
    cudaDevAttrMaxSurface2DLayeredLayers,
    cudaDevAttrMaxSurfaceCubemapWidth,
    cudaDevAttrMaxSurfaceCubemapLayeredWidth,
    cudaDevAttrMaxSurfaceCubemapLayeredLayers,
    cudaDevAttrMaxTexture1DLinearWidth,
    cudaDevAttrMaxTexture2DLinearWidth,
    cudaDevAttrMaxTexture2DLinearHeight,
    cudaDevAttrMaxTexture2DLinearPitch,
    cudaDevAttrMaxTexture2DMipmappedWidth,
    cudaDevAttrMaxTexture2DMipmappedHeight,
    cudaDevAttrComputeCapabilityMajor,
    cudaDevAttrComputeCapabilityMinor,
    cudaDevAttrMaxTexture1DMipmappedWidth,
    cudaDevAttrStreamPrioritiesSupported,
    cudaDevAttrGlobalL1CacheSupported,
    cudaDevAttrLocalL1CacheSupported,
    cudaDevAttrMaxSharedMemoryPerMultiprocessor,
    cudaDevAttrMaxRegistersPerMultiprocessor,
    cudaDevAttrManagedMemory,
    cudaDevAttrIsMultiGpuBoard,
    cudaDevAttrMultiGpuBoardGroupID,
    cudaDevAttrHostNativeAtomicSupported,
    cudaDevAttrSingleToDoublePrecisionPerfRatio,
    cudaDevAttrPageableMemoryAccess,
    cudaDevAttrConcurrentManagedAccess,
    cudaDevAttrComputePreemptionSupported,
    cudaDevAttrCanUseHostPointerForRegisteredMem,
    cudaDevAttrReserved92,
    cudaDevAttrReserved93,
    cudaDevAttrReserved94,
    cudaDevAttrCooperativeLaunch,
    cudaDevAttrReserved96,
    cudaDevAttrMaxSharedMemoryPerBlockOptin,
    cudaDevAttrCanFlushRemoteWrites,
    cudaDevAttrHostRegisterSupported,
    cudaDevAttrPageableMemoryAccessUsesHostPageTables,
    cudaDevAttrDirectManagedMemAccessFromHost,
    cudaDevAttrMaxBlocksPerMultiprocessor,
    cudaDevAttrMaxPersistingL2CacheSize,
    cudaDevAttrMaxAccessPolicyWindowSize,
    cudaDevAttrReservedSharedMemoryPerBlock,
    cudaDevAttrSparseCudaArraySupported,
    cudaDevAttrHostRegisterReadOnlySupported,
    cudaDevAttrTimelineSemaphoreInteropSupported,
    cudaDevAttrMemoryPoolsSupported,
    cudaDevAttrGPUDirectRDMASupported,
    cudaDevAttrGPUDirectRDMAFlushWritesOptions,
    cudaDevAttrGPUDirectRDMAWritesOrdering,
    cudaDevAttrMemoryPoolSupportedHandleTypes,
    cudaDevAttrClusterLaunch,
    cudaDevAttrDeferredMappingCudaArraySupported,
    cudaDevAttrReserved122,
    cudaDevAttrReserved123,
    cudaDevAttrReserved124,
    cudaDevAttrIpcEventSupport,
    cudaDevAttrMemSyncDomainCount,
    cudaDevAttrReserved127,
    cudaDevAttrReserved128,
    cudaDevAttrReserved129,
    cudaDevAttrNumaConfig,
    cudaDevAttrNumaId,
    cudaDevAttrReserved132,
    cudaDevAttrMpsEnabled,
    cudaDevAttrHostNumaId,
    cudaDevAttrD3D12CigSupported,
    cudaDevAttrVulkanCigSupported,
    cudaDevAttrGpuPciDeviceId,
    cudaDevAttrGpuPciSubsystemId,
    cudaDevAttrReserved141,
    cudaDevAttrHostNumaMemoryPoolsSupported,
    cudaDevAttrHostNumaMultinodeIpcSupported,
    cudaDevAttrHostMemoryPoolsSupported,
    cudaDevAttrReserved145,
    cudaDevAttrOnlyPartialHostNativeAtomicSupported,
};

static int attribute(cudaDeviceAttr a) {
    int v = -12345;
    CUDA_CHECK(cudaDeviceGetAttribute(&v, a, 0));
    return v;
}

static void attributes() {
    std::set<int> known;
    int answered = 0;
    for (cudaDeviceAttr a : kAttributes) {
        int v;
        answered += cudaDeviceGetAttribute(&v, a, 0) == cudaSuccess;
        known.insert((int)a);
    }
    int n = (int)(sizeof kAttributes / sizeof *kAttributes);
    expect(answered == n, "every cudaDeviceAttr of the headers answers",
           std::to_string(answered) + " of " + std::to_string(n));
    int refused = 0, holes = 0;
    for (int a = 0; a <= (int)cudaDevAttrMax + 3; a++) {
        if (known.count(a)) continue;
        holes++;
        int v;
        refused += cudaDeviceGetAttribute(&v, (cudaDeviceAttr)a, 0) == cudaErrorInvalidValue;
        cudaGetLastError();
    }
    expect(refused == holes, "values that are not attributes give cudaErrorInvalidValue",
           std::to_string(refused) + " of " + std::to_string(holes));
    int v;
    expect_error(cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, 8), cudaErrorInvalidDevice,
                 "an attribute of device 8");
    expect_error(cudaDeviceGetAttribute(nullptr, cudaDevAttrWarpSize, 0), cudaErrorInvalidValue,
                 "a null value pointer");

    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    struct Pair {
        cudaDeviceAttr attr;
        long long prop;
    } pairs[] = {
        {cudaDevAttrMaxThreadsPerBlock, p.maxThreadsPerBlock},
        {cudaDevAttrMaxBlockDimZ, p.maxThreadsDim[2]},
        {cudaDevAttrMaxGridDimX, p.maxGridSize[0]},
        {cudaDevAttrMaxSharedMemoryPerBlock, (long long)p.sharedMemPerBlock},
        {cudaDevAttrTotalConstantMemory, (long long)p.totalConstMem},
        {cudaDevAttrWarpSize, p.warpSize},
        {cudaDevAttrMaxRegistersPerBlock, p.regsPerBlock},
        {cudaDevAttrMultiProcessorCount, p.multiProcessorCount},
        {cudaDevAttrComputeCapabilityMajor, p.major},
        {cudaDevAttrComputeCapabilityMinor, p.minor},
        {cudaDevAttrL2CacheSize, p.l2CacheSize},
        {cudaDevAttrMaxThreadsPerMultiProcessor, p.maxThreadsPerMultiProcessor},
        {cudaDevAttrMaxSharedMemoryPerMultiprocessor, (long long)p.sharedMemPerMultiprocessor},
        {cudaDevAttrMaxSharedMemoryPerBlockOptin, (long long)p.sharedMemPerBlockOptin},
        {cudaDevAttrMaxBlocksPerMultiprocessor, p.maxBlocksPerMultiProcessor},
        {cudaDevAttrReservedSharedMemoryPerBlock, (long long)p.reservedSharedMemPerBlock},
        {cudaDevAttrPciBusId, p.pciBusID},
        {cudaDevAttrGlobalMemoryBusWidth, p.memoryBusWidth},
        {cudaDevAttrMaxTexture2DWidth, p.maxTexture2D[0]},
        {cudaDevAttrMaxSurface3DDepth, p.maxSurface3D[2]},
        {cudaDevAttrManagedMemory, p.managedMemory},
        {cudaDevAttrConcurrentManagedAccess, p.concurrentManagedAccess},
        {cudaDevAttrCooperativeLaunch, p.cooperativeLaunch},
        {cudaDevAttrUnifiedAddressing, p.unifiedAddressing},
        {cudaDevAttrMemoryPoolsSupported, p.memoryPoolsSupported},
        {cudaDevAttrClusterLaunch, p.clusterLaunch},
        {cudaDevAttrHostNumaId, p.hostNumaId},
        {cudaDevAttrGpuPciDeviceId, (int)p.gpuPciDeviceID},
    };
    int agree = 0;
    for (const Pair& q : pairs) agree += attribute(q.attr) == q.prop;
    int npairs = (int)(sizeof pairs / sizeof *pairs);
    expect(agree == npairs, "attributes agree with cudaGetDeviceProperties",
           std::to_string(agree) + " of " + std::to_string(npairs));
    expect(p.major == 9 && p.minor == 0 && p.multiProcessorCount == 132 &&
               p.maxThreadsPerMultiProcessor == 2048 && p.sharedMemPerMultiprocessor == 228 * 1024,
           "an H100: compute capability 9.0, 132 SMs, 2048 threads and 228 KiB per SM");
    expect(
        attribute(cudaDevAttrComputeMode) == cudaComputeModeDefault &&
            attribute(cudaDevAttrClockRate) == 1980000 &&
            attribute(cudaDevAttrMemoryClockRate) == 2619000 &&
            attribute(cudaDevAttrKernelExecTimeout) == 0 && attribute(cudaDevAttrGpuOverlap) == 1 &&
            attribute(cudaDevAttrMemSyncDomainCount) == 4 && attribute(cudaDevAttrReserved92) == 0,
        "attributes without a property: compute mode default, 1980 MHz, 2619 MHz memory, no "
        "kernel timeout, copy overlap, 4 sync domains; reserved ones 0");
}

static void flags_and_limits() {
    unsigned flags = 0;
    CUDA_CHECK(cudaGetDeviceFlags(&flags));
    bool defaults = flags == cudaDeviceMapHost;
    CUDA_CHECK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
    CUDA_CHECK(cudaGetDeviceFlags(&flags));
    expect(defaults && flags == (cudaDeviceScheduleBlockingSync | cudaDeviceMapHost),
           "cudaSetDeviceFlags(blocking sync), cudaGetDeviceFlags adds cudaDeviceMapHost");
    expect_error(cudaSetDeviceFlags(cudaDeviceScheduleSpin | cudaDeviceScheduleYield),
                 cudaErrorInvalidValue, "two scheduling flags");
    expect_error(cudaSetDeviceFlags(0x100), cudaErrorInvalidValue, "an unknown device flag");

    size_t v = 0;
    size_t want[] = {1024, 1 << 20, 8 << 20, 2, 2048, 32, 0};
    int right = 0;
    for (int l = 0; l <= cudaLimitPersistingL2CacheSize; l++) {
        CUDA_CHECK(cudaDeviceGetLimit(&v, (cudaLimit)l));
        right += v == want[l];
    }
    expect(right == 7, "cudaDeviceGetLimit defaults (stack 1 KiB, printf 1 MiB, heap 8 MiB, ...)");
    CUDA_CHECK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 64 << 20));
    CUDA_CHECK(cudaDeviceGetLimit(&v, cudaLimitMallocHeapSize));
    expect(v == 64 << 20, "cudaDeviceSetLimit(cudaLimitMallocHeapSize, 64 MiB)");
    expect_error(cudaDeviceSetLimit((cudaLimit)9, 1), cudaErrorUnsupportedLimit, "limit 9");
    expect_error(cudaDeviceSetLimit(cudaLimitMaxL2FetchGranularity, 256), cudaErrorInvalidValue,
                 "an L2 fetch granularity of 256 bytes");

    CUDA_CHECK(cudaDeviceSetCacheConfig(cudaFuncCachePreferShared));
    cudaFuncCache cache;
    CUDA_CHECK(cudaDeviceGetCacheConfig(&cache));
    cudaSharedMemConfig bank;
    CUDA_CHECK(cudaDeviceGetSharedMemConfig(&bank));
    expect(cache == cudaFuncCachePreferShared && bank == cudaSharedMemBankSizeFourByte,
           "cache configuration kept; 4-byte shared memory banks");

    CUDA_CHECK(cudaDeviceReset());
    CUDA_CHECK(cudaGetDeviceFlags(&flags));
    CUDA_CHECK(cudaDeviceGetLimit(&v, cudaLimitMallocHeapSize));
    CUDA_CHECK(cudaDeviceGetCacheConfig(&cache));
    expect(flags == cudaDeviceMapHost && v == 8 << 20 && cache == cudaFuncCachePreferNone,
           "cudaDeviceReset restores flags, limits and cache configuration");
}

static void ids_and_peers() {
    char id[32];
    CUDA_CHECK(cudaDeviceGetPCIBusId(id, sizeof id, 3));
    int back = -1, back_short = -1;
    CUDA_CHECK(cudaDeviceGetByPCIBusId(&back, id));
    CUDA_CHECK(cudaDeviceGetByPCIBusId(&back_short, "1b:00.0"));
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 3));
    char want[32];
    snprintf(want, sizeof want, "%04x:%02x:%02x.0", p.pciDomainID, p.pciBusID, p.pciDeviceID);
    expect(!strcmp(id, want) && back == 3 && back_short == 3,
           "cudaDeviceGetPCIBusId(3) and back, in the long and the short form", id);
    expect_error(cudaDeviceGetByPCIBusId(&back, "0000:99:00.0"), cudaErrorInvalidDevice,
                 "a bus id no device has");
    expect_error(cudaDeviceGetByPCIBusId(&back, "bus 3"), cudaErrorInvalidValue,
                 "a malformed bus id");
    expect_error(cudaDeviceGetPCIBusId(id, sizeof id, 8), cudaErrorInvalidDevice,
                 "the bus id of device 8");

    int can = -1;
    CUDA_CHECK(cudaDeviceCanAccessPeer(&can, 0, 1));
    CUDA_CHECK(cudaDeviceEnablePeerAccess(1, 0));
    expect(can == 1, "device 0 can access device 1; peer access enabled");
    expect_error(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled,
                 "enabling peer access twice");
    expect_error(cudaDeviceEnablePeerAccess(0, 0), cudaErrorInvalidDevice,
                 "peer access to the device itself");
    CUDA_CHECK(cudaDeviceDisablePeerAccess(1));
    expect_error(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled,
                 "disabling peer access that is off");
    int atomics = 0;
    CUDA_CHECK(cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, 0, 1));
    expect(atomics == 1, "P2P native atomics between devices 0 and 1");

    cudaDeviceProp wanted = {};
    wanted.major = 9;
    int chosen = -1;
    CUDA_CHECK(cudaSetDevice(2));
    CUDA_CHECK(cudaChooseDevice(&chosen, &wanted));
    CUDA_CHECK(cudaInitDevice(5, cudaDeviceScheduleSpin, cudaInitDeviceFlagsAreValid));
    CUDA_CHECK(cudaSetDevice(5));
    unsigned flags;
    CUDA_CHECK(cudaGetDeviceFlags(&flags));
    CUDA_CHECK(cudaSetDevice(0));
    expect(chosen == 2 && flags == (cudaDeviceScheduleSpin | cudaDeviceMapHost),
           "cudaChooseDevice picks the current device; cudaInitDevice sets flags");
    CUDA_CHECK(cudaProfilerStart());
    CUDA_CHECK(cudaProfilerStop());
    int driver = 0, runtime = 0;
    CUDA_CHECK(cudaDriverGetVersion(&driver));
    CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    expect(runtime == CUDART_VERSION && driver >= runtime,
           "cudaProfilerStart/Stop; driver and runtime versions");
}

__global__ void read_clock(long long* out) { *out = clock64(); }

static void clock_rate() {
    int khz;
    CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    long long* d;
    CUDA_CHECK(cudaMalloc(&d, 2 * sizeof(long long)));
    auto t0 = std::chrono::steady_clock::now();
    read_clock<<<1, 1>>>(d);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    read_clock<<<1, 1>>>(d + 1);
    CUDA_CHECK(cudaDeviceSynchronize());
    double host_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    long long c[2];
    CUDA_CHECK(cudaMemcpy(c, d, sizeof c, cudaMemcpyDeviceToHost));
    double clock_ms = (double)(c[1] - c[0]) / khz;
    char detail[128];
    snprintf(detail, sizeof detail, "%.1f ms by clock64 at %d kHz, %.1f ms by the host", clock_ms,
             khz, host_ms);
    expect(clock_ms >= 100.0 && clock_ms <= host_ms, "clock64 counts at cudaDevAttrClockRate",
           detail);
    CUDA_CHECK(cudaFree(d));
}

int main() {
    attributes();
    clock_rate();
    flags_and_limits();
    ids_and_peers();
    return test_report("device");
}
