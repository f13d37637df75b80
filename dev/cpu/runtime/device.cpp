// device.cpp: the simulated devices: their properties and attributes, device selection and
// flags, limits, PCI ids, peer access, versions, cudaDeviceSynchronize and cudaDeviceReset.
//
// Every device describes an H100 SXM-class GPU (compute capability 9.0, 132 SMs), so that code
// which sizes its launches from cudaGetDeviceProperties or cudaDeviceGetAttribute makes the same
// choices as on the real one. CUCC_COMPUTE_CAPABILITY (config.cpp) sets another compute
// capability, e.g. 10.0 to run what needs Blackwell (the CPU cuBLASLt's MXFP8 scale mode reads
// it); only major, minor and the name change then, every size and limit stays the H100's.
// cudaDeviceGetAttribute answers every cudaDeviceAttr of the CUDA 13 headers: from the
// cudaDeviceProp field of the same meaning where there is one (one source, so the two never
// disagree), else with the H100's value (clock rates, compute mode, texture and surface limits,
// ...). The "Reserved" attributes answer 0; a value that is not a cudaDeviceAttr gives
// cudaErrorInvalidValue.
// State set through the API (device flags, limits, cache config, enabled peers) is per device
// and process-wide, as a GPU's primary context is; cudaDeviceReset restores the defaults.
#include <cuda_profiler_api.h>

#include <cstdio>
#include <cstring>
#include <chrono>
#include <ctime>
#include <vector>

#include "internal.h"

namespace cucc {
namespace {

constexpr int kPciBusBase = 0x18;  // device d sits on PCI bus 0x18 + d, domain 0, slot 0

// The H100's PCI ids: device 0x2330 (H100 SXM5 80GB) and subsystem 0x16c1, vendor 0x10de.
constexpr unsigned kPciDeviceVendor = 0x233010de, kPciSubsystemVendor = 0x16c110de;

struct DeviceState {
    unsigned flags = 0;  // cudaSetDeviceFlags (schedule, map-host, ...)
    size_t limits[cudaLimitPersistingL2CacheSize + 1];
    cudaFuncCache cache_config = cudaFuncCachePreferNone;
    std::vector<bool> peers;  // peer access enabled from this device to device i
};

// The defaults of cudaDeviceGetLimit on an H100: 1 KiB stack per thread, 1 MiB printf buffer,
// 8 MiB device heap, sync depth 2, 2048 pending device launches, 32-byte L2 fetches, no
// persisting L2 lines.
const size_t kDefaultLimits[] = {1024, 1 << 20, 8 << 20, 2, 2048, 32, 0};

std::vector<DeviceState>& devices() {
    static auto* d = [] {
        auto* created = new std::vector<DeviceState>(config().devices);
        for (DeviceState& s : *created) {
            memcpy(s.limits, kDefaultLimits, sizeof s.limits);
            s.peers.assign(config().devices, false);
        }
        return created;
    }();
    return *d;
}

bool valid_device(int device) { return device >= 0 && device < config().devices; }

void fill_properties(cudaDeviceProp* p, int device) {
    memset(p, 0, sizeof *p);
    const Config& c = config();
    if (c.cc_major == 9 && c.cc_minor == 0)
        snprintf(p->name, sizeof p->name, "cucc CPU (H100-like)");
    else
        snprintf(p->name, sizeof p->name, "cucc CPU (H100-like, compute capability %d.%d)",
                 c.cc_major, c.cc_minor);
    for (int i = 0; i < 16; i++) p->uuid.bytes[i] = (char)(0xc0 + (i == 15 ? device : i));
    p->totalGlobalMem = config().mem_limit;
    p->sharedMemPerBlock = kDefaultSmemPerBlock;
    p->regsPerBlock = 65536;
    p->warpSize = warpSize;
    p->memPitch = 2147483647;
    p->maxThreadsPerBlock = kMaxThreadsPerBlock;
    for (int i = 0; i < 3; i++) {
        p->maxThreadsDim[i] = (int)kMaxBlockDim[i];
        p->maxGridSize[i] = (int)kMaxGridDim[i];
    }
    p->totalConstMem = 65536;
    p->major = c.cc_major;
    p->minor = c.cc_minor;
    p->textureAlignment = 512;
    p->texturePitchAlignment = 32;
    p->multiProcessorCount = kMultiprocessors;
    p->canMapHostMemory = 1;
    // Texture and surface limits of compute capability 9.0 (CUDA programming guide).
    p->maxTexture1D = 131072;
    p->maxTexture1DMipmap = 32768;
    p->maxTexture2D[0] = 131072;
    p->maxTexture2D[1] = 65536;
    p->maxTexture2DMipmap[0] = p->maxTexture2DMipmap[1] = 32768;
    p->maxTexture2DLinear[0] = 131072;
    p->maxTexture2DLinear[1] = 65000;
    p->maxTexture2DLinear[2] = 2097120;
    p->maxTexture2DGather[0] = p->maxTexture2DGather[1] = 32768;
    p->maxTexture3D[0] = p->maxTexture3D[1] = p->maxTexture3D[2] = 16384;
    p->maxTexture3DAlt[0] = p->maxTexture3DAlt[1] = 8192;
    p->maxTexture3DAlt[2] = 32768;
    p->maxTextureCubemap = 32768;
    p->maxTexture1DLayered[0] = 32768;
    p->maxTexture1DLayered[1] = 2048;
    p->maxTexture2DLayered[0] = p->maxTexture2DLayered[1] = 32768;
    p->maxTexture2DLayered[2] = 2048;
    p->maxTextureCubemapLayered[0] = 32768;
    p->maxTextureCubemapLayered[1] = 2046;
    p->maxSurface1D = 32768;
    p->maxSurface2D[0] = 131072;
    p->maxSurface2D[1] = 65536;
    p->maxSurface3D[0] = p->maxSurface3D[1] = p->maxSurface3D[2] = 16384;
    p->maxSurface1DLayered[0] = 32768;
    p->maxSurface1DLayered[1] = 2048;
    p->maxSurface2DLayered[0] = p->maxSurface2DLayered[1] = 32768;
    p->maxSurface2DLayered[2] = 2048;
    p->maxSurfaceCubemap = 32768;
    p->maxSurfaceCubemapLayered[0] = 32768;
    p->maxSurfaceCubemapLayered[1] = 2046;
    p->surfaceAlignment = 512;
    p->concurrentKernels = 1;
    p->ECCEnabled = 1;
    p->pciBusID = kPciBusBase + device;
    p->asyncEngineCount = 3;
    p->unifiedAddressing = 1;
    p->memoryBusWidth = 5120;
    p->l2CacheSize = 50 * 1024 * 1024;
    p->persistingL2CacheMaxSize = 30 * 1024 * 1024;
    p->maxThreadsPerMultiProcessor = kMaxThreadsPerMultiprocessor;
    p->streamPrioritiesSupported = 1;
    p->globalL1CacheSupported = 1;
    p->localL1CacheSupported = 1;
    p->sharedMemPerMultiprocessor = kSmemPerMultiprocessor;
    p->regsPerMultiprocessor = 65536;
    p->managedMemory = 1;
    p->multiGpuBoardGroupID = device;
    p->concurrentManagedAccess = 1;
    p->computePreemptionSupported = 1;
    p->canUseHostPointerForRegisteredMem = 1;
    p->cooperativeLaunch = 1;
    p->sharedMemPerBlockOptin = kMaxSmemPerBlockOptin;
    p->maxBlocksPerMultiProcessor = kMaxBlocksPerMultiprocessor;
    p->accessPolicyMaxWindowSize = kAccessPolicyMaxWindowSize;
    p->reservedSharedMemPerBlock = kReservedSmemPerBlock;
    p->hostRegisterSupported = 1;
    p->sparseCudaArraySupported = 1;
    p->hostRegisterReadOnlySupported = 1;
    p->timelineSemaphoreInteropSupported = 1;
    p->memoryPoolsSupported = 1;
    p->gpuDirectRDMASupported = 1;
    p->gpuDirectRDMAFlushWritesOptions = cudaFlushGPUDirectRDMAWritesOptionHost;
    p->gpuDirectRDMAWritesOrdering = cudaGPUDirectRDMAWritesOrderingOwner;
    p->memoryPoolSupportedHandleTypes = cudaMemHandleTypePosixFileDescriptor;
    p->deferredMappingCudaArraySupported = 1;
    p->ipcEventSupported = 1;
    p->clusterLaunch = 1;
    p->deviceNumaConfig = cudaDeviceNumaConfigNone;
    p->deviceNumaId = -1;
    p->hostNumaId = -1;
    p->gpuPciDeviceID = kPciDeviceVendor;
    p->gpuPciSubsystemID = kPciSubsystemVendor;
}

// The value of attribute a, or false if a is not a cudaDeviceAttr.
bool attribute_value(const cudaDeviceProp& p, int a, int* v) {
    switch (a) {
        // clang-format off
        case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
        case cudaDevAttrMaxBlockDimX: *v = p.maxThreadsDim[0]; break;
        case cudaDevAttrMaxBlockDimY: *v = p.maxThreadsDim[1]; break;
        case cudaDevAttrMaxBlockDimZ: *v = p.maxThreadsDim[2]; break;
        case cudaDevAttrMaxGridDimX: *v = p.maxGridSize[0]; break;
        case cudaDevAttrMaxGridDimY: *v = p.maxGridSize[1]; break;
        case cudaDevAttrMaxGridDimZ: *v = p.maxGridSize[2]; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)p.sharedMemPerBlock; break;
        case cudaDevAttrTotalConstantMemory: *v = (int)p.totalConstMem; break;
        case cudaDevAttrWarpSize: *v = p.warpSize; break;
        case cudaDevAttrMaxPitch: *v = (int)p.memPitch; break;
        case cudaDevAttrMaxRegistersPerBlock: *v = p.regsPerBlock; break;
        case cudaDevAttrClockRate: *v = kClockRateKHz; break;
        case cudaDevAttrTextureAlignment: *v = (int)p.textureAlignment; break;
        case cudaDevAttrGpuOverlap: *v = p.asyncEngineCount > 0; break;
        case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
        case cudaDevAttrKernelExecTimeout: *v = 0; break;
        case cudaDevAttrIntegrated: *v = p.integrated; break;
        case cudaDevAttrCanMapHostMemory: *v = p.canMapHostMemory; break;
        case cudaDevAttrComputeMode: *v = cudaComputeModeDefault; break;
        case cudaDevAttrMaxTexture1DWidth: *v = p.maxTexture1D; break;
        case cudaDevAttrMaxTexture2DWidth: *v = p.maxTexture2D[0]; break;
        case cudaDevAttrMaxTexture2DHeight: *v = p.maxTexture2D[1]; break;
        case cudaDevAttrMaxTexture3DWidth: *v = p.maxTexture3D[0]; break;
        case cudaDevAttrMaxTexture3DHeight: *v = p.maxTexture3D[1]; break;
        case cudaDevAttrMaxTexture3DDepth: *v = p.maxTexture3D[2]; break;
        case cudaDevAttrMaxTexture2DLayeredWidth: *v = p.maxTexture2DLayered[0]; break;
        case cudaDevAttrMaxTexture2DLayeredHeight: *v = p.maxTexture2DLayered[1]; break;
        case cudaDevAttrMaxTexture2DLayeredLayers: *v = p.maxTexture2DLayered[2]; break;
        case cudaDevAttrSurfaceAlignment: *v = (int)p.surfaceAlignment; break;
        case cudaDevAttrConcurrentKernels: *v = p.concurrentKernels; break;
        case cudaDevAttrEccEnabled: *v = p.ECCEnabled; break;
        case cudaDevAttrPciBusId: *v = p.pciBusID; break;
        case cudaDevAttrPciDeviceId: *v = p.pciDeviceID; break;
        case cudaDevAttrTccDriver: *v = p.tccDriver; break;
        case cudaDevAttrMemoryClockRate: *v = 2619000; break;  // kHz (HBM3)
        case cudaDevAttrGlobalMemoryBusWidth: *v = p.memoryBusWidth; break;
        case cudaDevAttrL2CacheSize: *v = p.l2CacheSize; break;
        case cudaDevAttrMaxThreadsPerMultiProcessor: *v = p.maxThreadsPerMultiProcessor; break;
        case cudaDevAttrAsyncEngineCount: *v = p.asyncEngineCount; break;
        case cudaDevAttrUnifiedAddressing: *v = p.unifiedAddressing; break;
        case cudaDevAttrMaxTexture1DLayeredWidth: *v = p.maxTexture1DLayered[0]; break;
        case cudaDevAttrMaxTexture1DLayeredLayers: *v = p.maxTexture1DLayered[1]; break;
        case cudaDevAttrMaxTexture2DGatherWidth: *v = p.maxTexture2DGather[0]; break;
        case cudaDevAttrMaxTexture2DGatherHeight: *v = p.maxTexture2DGather[1]; break;
        case cudaDevAttrMaxTexture3DWidthAlt: *v = p.maxTexture3DAlt[0]; break;
        case cudaDevAttrMaxTexture3DHeightAlt: *v = p.maxTexture3DAlt[1]; break;
        case cudaDevAttrMaxTexture3DDepthAlt: *v = p.maxTexture3DAlt[2]; break;
        case cudaDevAttrPciDomainId: *v = p.pciDomainID; break;
        case cudaDevAttrTexturePitchAlignment: *v = (int)p.texturePitchAlignment; break;
        case cudaDevAttrMaxTextureCubemapWidth: *v = p.maxTextureCubemap; break;
        case cudaDevAttrMaxTextureCubemapLayeredWidth: *v = p.maxTextureCubemapLayered[0]; break;
        case cudaDevAttrMaxTextureCubemapLayeredLayers: *v = p.maxTextureCubemapLayered[1]; break;
        case cudaDevAttrMaxSurface1DWidth: *v = p.maxSurface1D; break;
        case cudaDevAttrMaxSurface2DWidth: *v = p.maxSurface2D[0]; break;
        case cudaDevAttrMaxSurface2DHeight: *v = p.maxSurface2D[1]; break;
        case cudaDevAttrMaxSurface3DWidth: *v = p.maxSurface3D[0]; break;
        case cudaDevAttrMaxSurface3DHeight: *v = p.maxSurface3D[1]; break;
        case cudaDevAttrMaxSurface3DDepth: *v = p.maxSurface3D[2]; break;
        case cudaDevAttrMaxSurface1DLayeredWidth: *v = p.maxSurface1DLayered[0]; break;
        case cudaDevAttrMaxSurface1DLayeredLayers: *v = p.maxSurface1DLayered[1]; break;
        case cudaDevAttrMaxSurface2DLayeredWidth: *v = p.maxSurface2DLayered[0]; break;
        case cudaDevAttrMaxSurface2DLayeredHeight: *v = p.maxSurface2DLayered[1]; break;
        case cudaDevAttrMaxSurface2DLayeredLayers: *v = p.maxSurface2DLayered[2]; break;
        case cudaDevAttrMaxSurfaceCubemapWidth: *v = p.maxSurfaceCubemap; break;
        case cudaDevAttrMaxSurfaceCubemapLayeredWidth: *v = p.maxSurfaceCubemapLayered[0]; break;
        case cudaDevAttrMaxSurfaceCubemapLayeredLayers: *v = p.maxSurfaceCubemapLayered[1]; break;
        case cudaDevAttrMaxTexture1DLinearWidth: *v = 1 << 28; break;
        case cudaDevAttrMaxTexture2DLinearWidth: *v = p.maxTexture2DLinear[0]; break;
        case cudaDevAttrMaxTexture2DLinearHeight: *v = p.maxTexture2DLinear[1]; break;
        case cudaDevAttrMaxTexture2DLinearPitch: *v = p.maxTexture2DLinear[2]; break;
        case cudaDevAttrMaxTexture2DMipmappedWidth: *v = p.maxTexture2DMipmap[0]; break;
        case cudaDevAttrMaxTexture2DMipmappedHeight: *v = p.maxTexture2DMipmap[1]; break;
        case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
        case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
        case cudaDevAttrMaxTexture1DMipmappedWidth: *v = p.maxTexture1DMipmap; break;
        case cudaDevAttrStreamPrioritiesSupported: *v = p.streamPrioritiesSupported; break;
        case cudaDevAttrGlobalL1CacheSupported: *v = p.globalL1CacheSupported; break;
        case cudaDevAttrLocalL1CacheSupported: *v = p.localL1CacheSupported; break;
        case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = (int)p.sharedMemPerMultiprocessor; break;
        case cudaDevAttrMaxRegistersPerMultiprocessor: *v = p.regsPerMultiprocessor; break;
        case cudaDevAttrManagedMemory: *v = p.managedMemory; break;
        case cudaDevAttrIsMultiGpuBoard: *v = p.isMultiGpuBoard; break;
        case cudaDevAttrMultiGpuBoardGroupID: *v = p.multiGpuBoardGroupID; break;
        case cudaDevAttrHostNativeAtomicSupported: *v = p.hostNativeAtomicSupported; break;
        case cudaDevAttrSingleToDoublePrecisionPerfRatio: *v = 2; break;
        case cudaDevAttrPageableMemoryAccess: *v = p.pageableMemoryAccess; break;
        case cudaDevAttrConcurrentManagedAccess: *v = p.concurrentManagedAccess; break;
        case cudaDevAttrComputePreemptionSupported: *v = p.computePreemptionSupported; break;
        case cudaDevAttrCanUseHostPointerForRegisteredMem: *v = p.canUseHostPointerForRegisteredMem; break;
        case cudaDevAttrCooperativeLaunch: *v = p.cooperativeLaunch; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)p.sharedMemPerBlockOptin; break;
        case cudaDevAttrCanFlushRemoteWrites: *v = 0; break;
        case cudaDevAttrHostRegisterSupported: *v = p.hostRegisterSupported; break;
        case cudaDevAttrPageableMemoryAccessUsesHostPageTables: *v = p.pageableMemoryAccessUsesHostPageTables; break;
        case cudaDevAttrDirectManagedMemAccessFromHost: *v = p.directManagedMemAccessFromHost; break;
        case cudaDevAttrMaxBlocksPerMultiprocessor: *v = p.maxBlocksPerMultiProcessor; break;
        case cudaDevAttrMaxPersistingL2CacheSize: *v = p.persistingL2CacheMaxSize; break;
        case cudaDevAttrMaxAccessPolicyWindowSize: *v = p.accessPolicyMaxWindowSize; break;
        case cudaDevAttrReservedSharedMemoryPerBlock: *v = (int)p.reservedSharedMemPerBlock; break;
        case cudaDevAttrSparseCudaArraySupported: *v = p.sparseCudaArraySupported; break;
        case cudaDevAttrHostRegisterReadOnlySupported: *v = p.hostRegisterReadOnlySupported; break;
        case cudaDevAttrTimelineSemaphoreInteropSupported: *v = p.timelineSemaphoreInteropSupported; break;
        case cudaDevAttrMemoryPoolsSupported: *v = p.memoryPoolsSupported; break;
        case cudaDevAttrGPUDirectRDMASupported: *v = p.gpuDirectRDMASupported; break;
        case cudaDevAttrGPUDirectRDMAFlushWritesOptions: *v = (int)p.gpuDirectRDMAFlushWritesOptions; break;
        case cudaDevAttrGPUDirectRDMAWritesOrdering: *v = p.gpuDirectRDMAWritesOrdering; break;
        case cudaDevAttrMemoryPoolSupportedHandleTypes: *v = (int)p.memoryPoolSupportedHandleTypes; break;
        case cudaDevAttrClusterLaunch: *v = p.clusterLaunch; break;
        case cudaDevAttrDeferredMappingCudaArraySupported: *v = p.deferredMappingCudaArraySupported; break;
        case cudaDevAttrIpcEventSupport: *v = p.ipcEventSupported; break;
        case cudaDevAttrMemSyncDomainCount: *v = 4; break;
        case cudaDevAttrNumaConfig: *v = p.deviceNumaConfig; break;
        case cudaDevAttrNumaId: *v = p.deviceNumaId; break;
        case cudaDevAttrMpsEnabled: *v = p.mpsEnabled; break;
        case cudaDevAttrHostNumaId: *v = p.hostNumaId; break;
        case cudaDevAttrD3D12CigSupported: *v = 0; break;
        case cudaDevAttrVulkanCigSupported: *v = 0; break;
        case cudaDevAttrGpuPciDeviceId: *v = (int)p.gpuPciDeviceID; break;
        case cudaDevAttrGpuPciSubsystemId: *v = (int)p.gpuPciSubsystemID; break;
        case cudaDevAttrHostNumaMemoryPoolsSupported: *v = 0; break;
        case cudaDevAttrHostNumaMultinodeIpcSupported: *v = p.hostNumaMultinodeIpcSupported; break;
        case cudaDevAttrHostMemoryPoolsSupported: *v = 0; break;
        case cudaDevAttrOnlyPartialHostNativeAtomicSupported: *v = 0; break;
        case cudaDevAttrReserved92: case cudaDevAttrReserved93: case cudaDevAttrReserved94:
        case cudaDevAttrReserved96: case cudaDevAttrReserved122: case cudaDevAttrReserved123:
        case cudaDevAttrReserved124: case cudaDevAttrReserved127: case cudaDevAttrReserved128:
        case cudaDevAttrReserved129: case cudaDevAttrReserved132: case cudaDevAttrReserved141:
        case cudaDevAttrReserved145:
            *v = 0;
            break;
        // clang-format on
        default:
            return false;
    }
    return true;
}

// "domain:bus:device.function" in hex, as cudaDeviceGetPCIBusId writes it.
void pci_bus_id(int device, char* out, size_t len) {
    snprintf(out, len, "%04x:%02x:%02x.0", 0, kPciBusBase + device, 0);
}

}  // namespace

void reset_device_state(int device) {
    ApiLock lock;
    DeviceState& s = devices()[device];
    s = DeviceState{};
    memcpy(s.limits, kDefaultLimits, sizeof s.limits);
    s.peers.assign(config().devices, false);
}

}  // namespace cucc

using namespace cucc;

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
    if (!count) return api_return(cudaErrorInvalidValue);
    *count = config().devices;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    if (!valid_device(device)) return api_return(cudaErrorInvalidDevice);
    set_current_device(device);
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
    if (!device) return api_return(cudaErrorInvalidValue);
    *device = current_device();
    return cudaSuccess;
}

cudaError_t cudaInitDevice(int device, unsigned int device_flags, unsigned int flags) {
    if (!valid_device(device)) return api_return(cudaErrorInvalidDevice);
    if (flags & ~(unsigned)cudaInitDeviceFlagsAreValid) return api_return(cudaErrorInvalidValue);
    if (!(flags & cudaInitDeviceFlagsAreValid)) return cudaSuccess;
    int saved = current_device();
    set_current_device(device);
    cudaError_t err = cudaSetDeviceFlags(device_flags);
    set_current_device(saved);
    return err;
}

// Every device is identical, so any of them matches best; CUDA returns the current one then.
cudaError_t cudaChooseDevice(int* device, const cudaDeviceProp* prop) {
    if (!device || !prop) return api_return(cudaErrorInvalidValue);
    *device = current_device();
    return cudaSuccess;
}

cudaError_t cudaSetValidDevices(int* device_list, int len) {
    if (len < 0 || (len > 0 && !device_list)) return api_return(cudaErrorInvalidValue);
    for (int i = 0; i < len; i++)
        if (!valid_device(device_list[i])) return api_return(cudaErrorInvalidDevice);
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (!prop) return api_return(cudaErrorInvalidValue);
    if (!valid_device(device)) return api_return(cudaErrorInvalidDevice);
    fill_properties(prop, device);
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (!value) return api_return(cudaErrorInvalidValue);
    if (!valid_device(device)) return api_return(cudaErrorInvalidDevice);
    cudaDeviceProp p;
    fill_properties(&p, device);
    return attribute_value(p, attr, value) ? cudaSuccess : api_return(cudaErrorInvalidValue);
}

// Exactly one scheduling mode (or none: auto) plus the other documented flags. The flags only
// steer how a GPU's host thread waits; the CPU runtime records them for cudaGetDeviceFlags.
cudaError_t cudaSetDeviceFlags(unsigned int flags) {
    unsigned schedule = flags & cudaDeviceScheduleMask;
    if ((flags & ~(unsigned)cudaDeviceMask) ||
        (schedule != cudaDeviceScheduleAuto && schedule != cudaDeviceScheduleSpin &&
         schedule != cudaDeviceScheduleYield && schedule != cudaDeviceScheduleBlockingSync))
        return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    devices()[current_device()].flags = flags;
    return cudaSuccess;
}

// As on CUDA 12+, mapped pinned memory is always on: cudaDeviceMapHost is always reported.
cudaError_t cudaGetDeviceFlags(unsigned int* flags) {
    if (!flags) return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    *flags = devices()[current_device()].flags | cudaDeviceMapHost;
    return cudaSuccess;
}

cudaError_t cudaDeviceSetLimit(cudaLimit limit, size_t value) {
    if ((int)limit < 0 || limit > cudaLimitPersistingL2CacheSize)
        return api_return(cudaErrorUnsupportedLimit);
    if (limit == cudaLimitMaxL2FetchGranularity && value > 128)
        return api_return(cudaErrorInvalidValue);
    cudaDeviceProp p;
    fill_properties(&p, current_device());
    if (limit == cudaLimitPersistingL2CacheSize && value > (size_t)p.persistingL2CacheMaxSize)
        return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    devices()[current_device()].limits[limit] = value;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetLimit(size_t* value, cudaLimit limit) {
    if (!value) return api_return(cudaErrorInvalidValue);
    if ((int)limit < 0 || limit > cudaLimitPersistingL2CacheSize)
        return api_return(cudaErrorUnsupportedLimit);
    ApiLock lock;
    *value = devices()[current_device()].limits[limit];
    return cudaSuccess;
}

cudaError_t cudaDeviceSetCacheConfig(cudaFuncCache cache_config) {
    if (cache_config < cudaFuncCachePreferNone || cache_config > cudaFuncCachePreferEqual)
        return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    devices()[current_device()].cache_config = cache_config;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetCacheConfig(cudaFuncCache* cache_config) {
    if (!cache_config) return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    *cache_config = devices()[current_device()].cache_config;
    return cudaSuccess;
}

// Hopper has 4-byte shared memory banks only: the 4-byte configuration is the one there is.
cudaError_t cudaDeviceGetSharedMemConfig(cudaSharedMemConfig* config) {
    if (!config) return api_return(cudaErrorInvalidValue);
    *config = cudaSharedMemBankSizeFourByte;
    return cudaSuccess;
}

cudaError_t cudaDeviceSetSharedMemConfig(cudaSharedMemConfig config) {
    if (config < cudaSharedMemBankSizeDefault || config > cudaSharedMemBankSizeEightByte)
        return api_return(cudaErrorInvalidValue);
    return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* pci_bus_id_out, int len, int device) {
    if (!pci_bus_id_out || len <= 0) return api_return(cudaErrorInvalidValue);
    if (!valid_device(device)) return api_return(cudaErrorInvalidDevice);
    pci_bus_id(device, pci_bus_id_out, (size_t)len);
    return cudaSuccess;
}

// Accepts the forms CUDA documents: [domain]:[bus]:[device].[function], [domain]:[bus]:[device]
// and [bus]:[device].[function], all in hex.
cudaError_t cudaDeviceGetByPCIBusId(int* device, const char* pci_bus_id_in) {
    if (!device || !pci_bus_id_in) return api_return(cudaErrorInvalidValue);
    unsigned domain = 0, bus = 0, slot = 0, function = 0;
    char end = 0;
    bool parsed =
        sscanf(pci_bus_id_in, "%x:%x:%x.%x%c", &domain, &bus, &slot, &function, &end) == 4 ||
        sscanf(pci_bus_id_in, "%x:%x:%x%c", &domain, &bus, &slot, &end) == 3 ||
        (domain = 0, sscanf(pci_bus_id_in, "%x:%x.%x%c", &bus, &slot, &function, &end) == 3);
    if (!parsed) return api_return(cudaErrorInvalidValue);
    for (int d = 0; d < config().devices; d++) {
        if (domain == 0 && bus == (unsigned)(kPciBusBase + d) && slot == 0 && function == 0) {
            *device = d;
            return cudaSuccess;
        }
    }
    return api_return(cudaErrorInvalidDevice);
}

cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer_device) {
    if (!can_access) return api_return(cudaErrorInvalidValue);
    if (!valid_device(device) || !valid_device(peer_device))
        return api_return(cudaErrorInvalidDevice);
    *can_access = device != peer_device;
    return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer_device, unsigned int flags) {
    if (!valid_device(peer_device) || peer_device == current_device())
        return api_return(cudaErrorInvalidDevice);
    if (flags != 0) return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    std::vector<bool>& peers = devices()[current_device()].peers;
    if (peers[peer_device]) return api_return(cudaErrorPeerAccessAlreadyEnabled);
    peers[peer_device] = true;
    return cudaSuccess;
}

cudaError_t cudaDeviceDisablePeerAccess(int peer_device) {
    if (!valid_device(peer_device) || peer_device == current_device())
        return api_return(cudaErrorInvalidDevice);
    ApiLock lock;
    std::vector<bool>& peers = devices()[current_device()].peers;
    if (!peers[peer_device]) return api_return(cudaErrorPeerAccessNotEnabled);
    peers[peer_device] = false;
    return cudaSuccess;
}

// The devices share one memory: every pair has full-speed access and native atomics.
cudaError_t cudaDeviceGetP2PAttribute(int* value, cudaDeviceP2PAttr attr, int src_device,
                                      int dst_device) {
    if (!value) return api_return(cudaErrorInvalidValue);
    if (!valid_device(src_device) || !valid_device(dst_device) || src_device == dst_device)
        return api_return(cudaErrorInvalidDevice);
    switch (attr) {
        case cudaDevP2PAttrPerformanceRank:
            *value = 0;
            return cudaSuccess;
        case cudaDevP2PAttrAccessSupported:
        case cudaDevP2PAttrNativeAtomicSupported:
        case cudaDevP2PAttrCudaArrayAccessSupported:
            *value = 1;
            return cudaSuccess;
        case cudaDevP2PAttrOnlyPartialNativeAtomicSupported:
            *value = 0;
            return cudaSuccess;
        default:
            return api_return(cudaErrorInvalidValue);
    }
}

cudaError_t cudaDriverGetVersion(int* version) {
    if (!version) return api_return(cudaErrorInvalidValue);
    *version = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
    if (!version) return api_return(cudaErrorInvalidValue);
    *version = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return api_return(synchronize_device(current_device())); }

// Finishes the device's queued work (so kernel printf output appears, as CUDA flushes it at
// reset), then frees its memory and streams and forgets function attributes, device flags,
// limits, peers and errors.
cudaError_t cudaDeviceReset(void) {
    int device = current_device();
    synchronize_device(device);
    ApiLock lock;
    destroy_device_streams(device);
    free_all_device_memory(device);
    reset_function_attributes();
    reset_device_state(device);
    clear_sticky_error(device);
    clear_last_error();
    return cudaSuccess;
}

// A profiler (Nsight) collects nothing here; the calls succeed, as they do without one.
cudaError_t cudaProfilerStart(void) { return cudaSuccess; }

cudaError_t cudaProfilerStop(void) { return cudaSuccess; }

}  // extern "C"

namespace cucc {

long long clock_cycles() {
    long long ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now().time_since_epoch())
                       .count();
    const long long mhz = kClockRateKHz / 1000;
    return ns / 1000 * mhz + ns % 1000 * mhz / 1000;
}

}  // namespace cucc

extern "C" {

// Replaces glibc's clock(), as block.cpp replaces __assert_fail, because device code calls the
// same function as host code: in a kernel it is CUDA's clock(), the SM's 32-bit cycle counter
// (PTX %clock) at the rate cudaDevAttrClockRate reports, so that a kernel that spins for
// clockRate * ms cycles spins for ms milliseconds (cuda-samples' simpleHyperQ and
// concurrentKernels; glibc's microseconds of CPU time made each 10 ms kernel spin for 20 s);
// on the host it is the C library's: the process's CPU time in CLOCKS_PER_SEC units, computed as
// glibc computes it.
clock_t clock(void) noexcept {
    if (cucc::in_kernel()) return (clock_t)(unsigned)cucc::clock_cycles();
    timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return (clock_t)-1;
    return (clock_t)ts.tv_sec * CLOCKS_PER_SEC + ts.tv_nsec / (1000000000 / CLOCKS_PER_SEC);
}

}  // extern "C"
