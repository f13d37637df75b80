// config.cpp: settings from the environment, the simulated devices and their properties, the
// current device, error names and the last-error / sticky-error bookkeeping.
//
// The devices describe an H100-class GPU so that code which sizes its launches from
// cudaGetDeviceProperties / cudaDeviceGetAttribute makes the same choices as on the real one.
// Errors follow CUDA's model: every failing call records its error as the host thread's last
// error (cudaGetLastError returns and clears it, cudaPeekAtLastError only returns it); a fault
// inside queued work is sticky for its device until cudaDeviceReset.
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "internal.h"

namespace cucc {
namespace {

thread_local cudaError_t tls_last_error = cudaSuccess;
thread_local int tls_device = 0;

long long parse_env_int(const char* name, long long fallback, long long min, long long max) {
    const char* s = getenv(name);
    if (!s || !*s) return fallback;
    char* end;
    long long v = strtoll(s, &end, 10);
    if (*end != '\0' || v < min || v > max)
        fatal("%s=%s: expected an integer in [%lld, %lld]", name, s, min, max);
    return v;
}

// Bytes with an optional K/M/G/T suffix (powers of 1024).
size_t parse_env_bytes(const char* name, size_t fallback) {
    const char* s = getenv(name);
    if (!s || !*s) return fallback;
    char* end;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = 0;
    switch (*end) {
        case 'K':
        case 'k':
            shift = 10;
            end++;
            break;
        case 'M':
        case 'm':
            shift = 20;
            end++;
            break;
        case 'G':
        case 'g':
            shift = 30;
            end++;
            break;
        case 'T':
        case 't':
            shift = 40;
            end++;
            break;
        default:
            break;
    }
    if (end == s || *end != '\0' || (v << shift) >> shift != v)
        fatal("%s=%s: expected a byte count such as 1048576, 512M or 80G", name, s);
    return (size_t)(v << shift);
}

Config read_config() {
    Config c;
    int cores = (int)std::thread::hardware_concurrency();
    c.threads = (int)parse_env_int("CUCC_THREADS", cores > 0 ? cores : 1, 1, 1024);
    c.stack_bytes = (size_t)parse_env_int("CUCC_STACK_KB", 64, 16, 1 << 20) * 1024;
    c.mem_limit = parse_env_bytes("CUCC_MEM_LIMIT", (size_t)80 << 30);
    c.devices = (int)parse_env_int("CUCC_DEVICES", 8, 1, 1024);
    const char* sched = getenv("CUCC_SCHEDULE");
    if (!sched || !*sched || strcmp(sched, "sequential") == 0) c.random = false;
    else if (strcmp(sched, "random") == 0) c.random = true;
    else fatal("CUCC_SCHEDULE=%s: expected sequential or random", sched);
    c.seed = (uint64_t)parse_env_int("CUCC_SEED", 1, 0, INT64_MAX);
    return c;
}

std::vector<cudaError_t>& sticky_errors() {
    static auto* errors = new std::vector<cudaError_t>(config().devices, cudaSuccess);
    return *errors;
}

struct ErrorText {
    cudaError_t code;
    const char* name;
    const char* text;
};
#define CUCC_ERROR(code, text) \
    { code, #code, text }
const ErrorText kErrors[] = {
    CUCC_ERROR(cudaSuccess, "no error"),
    CUCC_ERROR(cudaErrorInvalidValue, "invalid argument"),
    CUCC_ERROR(cudaErrorMemoryAllocation, "out of memory"),
    CUCC_ERROR(cudaErrorInitializationError, "initialization error"),
    CUCC_ERROR(cudaErrorCudartUnloading, "driver shutting down"),
    CUCC_ERROR(cudaErrorInvalidConfiguration, "invalid configuration argument"),
    CUCC_ERROR(cudaErrorInvalidPitchValue, "invalid pitch argument"),
    CUCC_ERROR(cudaErrorInvalidSymbol, "invalid device symbol"),
    CUCC_ERROR(cudaErrorInvalidDevicePointer, "invalid device pointer"),
    CUCC_ERROR(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"),
    CUCC_ERROR(cudaErrorInvalidDeviceFunction, "invalid device function"),
    CUCC_ERROR(cudaErrorNoDevice, "no CUDA-capable device is detected"),
    CUCC_ERROR(cudaErrorInvalidDevice, "invalid device ordinal"),
    CUCC_ERROR(cudaErrorInvalidKernelImage, "device kernel image is invalid"),
    CUCC_ERROR(cudaErrorNoKernelImageForDevice,
               "no kernel image is available for execution on the device"),
    CUCC_ERROR(cudaErrorInvalidResourceHandle, "invalid resource handle"),
    CUCC_ERROR(cudaErrorIllegalState, "the operation cannot be performed in the present state"),
    CUCC_ERROR(cudaErrorNotReady, "device not ready"),
    CUCC_ERROR(cudaErrorIllegalAddress, "an illegal memory access was encountered"),
    CUCC_ERROR(cudaErrorLaunchOutOfResources, "too many resources requested for launch"),
    CUCC_ERROR(cudaErrorLaunchTimeout, "the launch timed out and was terminated"),
    CUCC_ERROR(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled"),
    CUCC_ERROR(cudaErrorPeerAccessNotEnabled, "peer access has not been enabled"),
    CUCC_ERROR(cudaErrorSetOnActiveProcess, "cannot set while device is active in this process"),
    CUCC_ERROR(cudaErrorContextIsDestroyed, "context is destroyed"),
    CUCC_ERROR(cudaErrorAssert, "device-side assert triggered"),
    CUCC_ERROR(cudaErrorHostMemoryAlreadyRegistered,
               "part or all of the requested memory range is already mapped"),
    CUCC_ERROR(cudaErrorHostMemoryNotRegistered,
               "pointer does not correspond to a registered memory region"),
    CUCC_ERROR(cudaErrorIllegalInstruction, "an illegal instruction was encountered"),
    CUCC_ERROR(cudaErrorMisalignedAddress, "misaligned address"),
    CUCC_ERROR(cudaErrorLaunchFailure, "unspecified launch failure"),
    CUCC_ERROR(cudaErrorNotPermitted, "operation not permitted"),
    CUCC_ERROR(cudaErrorNotSupported, "operation not supported"),
    CUCC_ERROR(cudaErrorStreamCaptureUnsupported,
               "operation not permitted when stream is capturing"),
    CUCC_ERROR(cudaErrorUnknown, "unknown error"),
};
#undef CUCC_ERROR

const ErrorText* find_error(cudaError_t err) {
    for (const ErrorText& e : kErrors)
        if (e.code == err) return &e;
    return nullptr;
}

void fill_properties(cudaDeviceProp* p, int device) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cucc CPU (H100-like)");
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
    p->major = 9;
    p->minor = 0;
    p->textureAlignment = 512;
    p->texturePitchAlignment = 32;
    p->multiProcessorCount = 132;
    p->canMapHostMemory = 1;
    p->surfaceAlignment = 512;
    p->concurrentKernels = 1;
    p->ECCEnabled = 1;
    p->pciBusID = 0x18 + device;
    p->asyncEngineCount = 3;
    p->unifiedAddressing = 1;
    p->memoryBusWidth = 5120;
    p->l2CacheSize = 50 * 1024 * 1024;
    p->persistingL2CacheMaxSize = 30 * 1024 * 1024;
    p->maxThreadsPerMultiProcessor = 2048;
    p->streamPrioritiesSupported = 1;
    p->globalL1CacheSupported = 1;
    p->localL1CacheSupported = 1;
    p->sharedMemPerMultiprocessor = 228 * 1024;
    p->regsPerMultiprocessor = 65536;
    p->managedMemory = 1;
    p->computePreemptionSupported = 1;
    p->cooperativeLaunch = 1;
    p->sharedMemPerBlockOptin = kMaxSmemPerBlockOptin;
    p->maxBlocksPerMultiProcessor = 32;
    p->accessPolicyMaxWindowSize = 134213632;
    p->reservedSharedMemPerBlock = 1024;
    p->hostRegisterSupported = 1;
    p->memoryPoolsSupported = 1;
    p->clusterLaunch = 1;
    p->hostNumaId = -1;
    p->deviceNumaId = -1;
}

}  // namespace

const Config& config() {
    static const Config c = read_config();
    return c;
}

int thread_count() { return config().threads; }

std::recursive_mutex& api_mutex() {
    // Never destroyed: other threads and atexit handlers may still take it during exit.
    static auto* m = new std::recursive_mutex;
    return *m;
}

namespace {
thread_local int tls_lock_depth = 0;
}

ApiLock::ApiLock() {
    api_mutex().lock();
    tls_lock_depth++;
}

ApiLock::~ApiLock() {
    tls_lock_depth--;
    api_mutex().unlock();
}

int api_lock_depth() { return tls_lock_depth; }

void fatal(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char buf[4096];
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "cucc: %s\n", buf);
    fflush(stderr);
    _exit(1);
}

cudaError_t api_return(cudaError_t err) {
    if (err != cudaSuccess) tls_last_error = err;
    return err;
}

void set_sticky_error(int device, cudaError_t err) {
    ApiLock lock;
    if (sticky_errors()[device] == cudaSuccess) sticky_errors()[device] = err;
}

cudaError_t sticky_error(int device) {
    ApiLock lock;
    return sticky_errors()[device];
}

void clear_sticky_error(int device) {
    ApiLock lock;
    sticky_errors()[device] = cudaSuccess;
}

int current_device() { return tls_device; }

}  // namespace cucc

using namespace cucc;

extern "C" {

cudaError_t cudaGetLastError(void) {
    cudaError_t sticky = sticky_error(tls_device);
    if (sticky != cudaSuccess) return sticky;
    cudaError_t err = tls_last_error;
    tls_last_error = cudaSuccess;
    return err;
}

cudaError_t cudaPeekAtLastError(void) {
    cudaError_t sticky = sticky_error(tls_device);
    return sticky != cudaSuccess ? sticky : tls_last_error;
}

const char* cudaGetErrorName(cudaError_t error) {
    const ErrorText* e = find_error(error);
    return e ? e->name : "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
    const ErrorText* e = find_error(error);
    return e ? e->text : "unrecognized error code";
}

cudaError_t cudaGetDeviceCount(int* count) {
    if (!count) return api_return(cudaErrorInvalidValue);
    *count = config().devices;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= config().devices) return api_return(cudaErrorInvalidDevice);
    tls_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
    if (!device) return api_return(cudaErrorInvalidValue);
    *device = tls_device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (!prop) return api_return(cudaErrorInvalidValue);
    if (device < 0 || device >= config().devices) return api_return(cudaErrorInvalidDevice);
    fill_properties(prop, device);
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (!value) return api_return(cudaErrorInvalidValue);
    if (device < 0 || device >= config().devices) return api_return(cudaErrorInvalidDevice);
    cudaDeviceProp p;
    fill_properties(&p, device);
    switch (attr) {
        case cudaDevAttrMaxThreadsPerBlock:
            *value = p.maxThreadsPerBlock;
            break;
        case cudaDevAttrMaxBlockDimX:
            *value = p.maxThreadsDim[0];
            break;
        case cudaDevAttrMaxBlockDimY:
            *value = p.maxThreadsDim[1];
            break;
        case cudaDevAttrMaxBlockDimZ:
            *value = p.maxThreadsDim[2];
            break;
        case cudaDevAttrMaxGridDimX:
            *value = p.maxGridSize[0];
            break;
        case cudaDevAttrMaxGridDimY:
            *value = p.maxGridSize[1];
            break;
        case cudaDevAttrMaxGridDimZ:
            *value = p.maxGridSize[2];
            break;
        case cudaDevAttrMaxSharedMemoryPerBlock:
            *value = (int)p.sharedMemPerBlock;
            break;
        case cudaDevAttrTotalConstantMemory:
            *value = (int)p.totalConstMem;
            break;
        case cudaDevAttrWarpSize:
            *value = p.warpSize;
            break;
        case cudaDevAttrMaxPitch:
            *value = (int)p.memPitch;
            break;
        case cudaDevAttrMaxRegistersPerBlock:
            *value = p.regsPerBlock;
            break;
        case cudaDevAttrClockRate:
            *value = 1980000;
            break;  // kHz
        case cudaDevAttrMemoryClockRate:
            *value = 2619000;
            break;  // kHz
        case cudaDevAttrGlobalMemoryBusWidth:
            *value = p.memoryBusWidth;
            break;
        case cudaDevAttrMultiProcessorCount:
            *value = p.multiProcessorCount;
            break;
        case cudaDevAttrIntegrated:
            *value = p.integrated;
            break;
        case cudaDevAttrCanMapHostMemory:
            *value = p.canMapHostMemory;
            break;
        case cudaDevAttrConcurrentKernels:
            *value = p.concurrentKernels;
            break;
        case cudaDevAttrEccEnabled:
            *value = p.ECCEnabled;
            break;
        case cudaDevAttrPciBusId:
            *value = p.pciBusID;
            break;
        case cudaDevAttrPciDeviceId:
            *value = p.pciDeviceID;
            break;
        case cudaDevAttrPciDomainId:
            *value = p.pciDomainID;
            break;
        case cudaDevAttrAsyncEngineCount:
            *value = p.asyncEngineCount;
            break;
        case cudaDevAttrUnifiedAddressing:
            *value = p.unifiedAddressing;
            break;
        case cudaDevAttrL2CacheSize:
            *value = p.l2CacheSize;
            break;
        case cudaDevAttrMaxThreadsPerMultiProcessor:
            *value = p.maxThreadsPerMultiProcessor;
            break;
        case cudaDevAttrComputeCapabilityMajor:
            *value = p.major;
            break;
        case cudaDevAttrComputeCapabilityMinor:
            *value = p.minor;
            break;
        case cudaDevAttrStreamPrioritiesSupported:
            *value = p.streamPrioritiesSupported;
            break;
        case cudaDevAttrGlobalL1CacheSupported:
            *value = p.globalL1CacheSupported;
            break;
        case cudaDevAttrLocalL1CacheSupported:
            *value = p.localL1CacheSupported;
            break;
        case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
            *value = (int)p.sharedMemPerMultiprocessor;
            break;
        case cudaDevAttrMaxRegistersPerMultiprocessor:
            *value = p.regsPerMultiprocessor;
            break;
        case cudaDevAttrManagedMemory:
            *value = p.managedMemory;
            break;
        case cudaDevAttrCooperativeLaunch:
            *value = p.cooperativeLaunch;
            break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin:
            *value = (int)p.sharedMemPerBlockOptin;
            break;
        case cudaDevAttrMaxBlocksPerMultiprocessor:
            *value = p.maxBlocksPerMultiProcessor;
            break;
        case cudaDevAttrReservedSharedMemoryPerBlock:
            *value = (int)p.reservedSharedMemPerBlock;
            break;
        case cudaDevAttrMemoryPoolsSupported:
            *value = p.memoryPoolsSupported;
            break;
        case cudaDevAttrClusterLaunch:
            *value = p.clusterLaunch;
            break;
        default:
            return api_return(cudaErrorInvalidValue);
    }
    return cudaSuccess;
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

cudaError_t cudaDeviceSynchronize(void) { return api_return(synchronize_device(tls_device)); }

// Finishes the device's queued work (so kernel printf output appears, as CUDA flushes it at
// reset), then frees its memory and streams and forgets function attributes and errors.
cudaError_t cudaDeviceReset(void) {
    synchronize_device(tls_device);
    ApiLock lock;
    destroy_device_streams(tls_device);
    free_all_device_memory(tls_device);
    reset_function_attributes();
    clear_sticky_error(tls_device);
    tls_last_error = cudaSuccess;
    return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer_device) {
    if (!can_access) return api_return(cudaErrorInvalidValue);
    int n = config().devices;
    if (device < 0 || device >= n || peer_device < 0 || peer_device >= n)
        return api_return(cudaErrorInvalidDevice);
    *can_access = device != peer_device;
    return cudaSuccess;
}

}  // extern "C"
