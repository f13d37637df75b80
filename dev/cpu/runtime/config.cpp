// config.cpp: settings from the environment, the current device of each host thread, error
// names and the last-error / sticky-error bookkeeping (the devices themselves: device.cpp).
//
// Errors follow CUDA's model: every failing call records its error as the host thread's last
// error (cudaGetLastError returns and clears it, cudaPeekAtLastError only returns it); a fault
// inside queued work is sticky for its device until cudaDeviceReset.
#include <unistd.h>

#include <algorithm>
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

// CUCC_COMPUTE_CAPABILITY: MAJOR.MINOR, one of the compute capabilities CUDA 13 compiles for
// (nvcc --list-gpu-arch: compute_75 ... compute_121).
void parse_compute_capability(Config* c) {
    static const char* const kKnown[] = {"7.5", "8.0",  "8.6",  "8.7",  "8.8",  "8.9",
                                         "9.0", "10.0", "10.3", "11.0", "12.0", "12.1"};
    const char* s = getenv("CUCC_COMPUTE_CAPABILITY");
    c->cc_major = 9;
    c->cc_minor = 0;
    if (!s || !*s) return;
    for (const char* known : kKnown)
        if (strcmp(s, known) == 0) {
            c->cc_major = atoi(known);
            c->cc_minor = strchr(known, '.')[1] - '0';
            return;
        }
    fatal(
        "CUCC_COMPUTE_CAPABILITY=%s: expected one of CUDA 13's compute capabilities: 7.5, 8.0, "
        "8.6, 8.7, 8.8, 8.9, 9.0, 10.0, 10.3, 11.0, 12.0, 12.1",
        s);
}

// Processes of this job on this machine, as the launcher says (Open MPI's mpirun, MPICH's and
// Intel MPI's, torchrun, srun), or 1. A plain leading integer only: srun's "2(x3)" gives 2.
int local_processes() {
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "LOCAL_WORLD_SIZE",
                             "SLURM_NTASKS_PER_NODE"}) {
        const char* s = getenv(name);
        if (!s || !*s) continue;
        char* end;
        long v = strtol(s, &end, 10);
        if (end != s && v >= 1) return (int)std::min<long>(v, 1024);
    }
    return 1;
}

Config read_config() {
    Config c;
    // By default the ranks that share this machine share its cores: with 4 ranks on 2 cores,
    // each taking both, 8 OS threads would contend and every launch would wake a helper that
    // has no core to run on (measured on a 2-core machine: a run of test_pp's model under
    // mpirun -np 4 took 14% less CPU time with 1 thread per rank than with 2).
    int cores = (int)std::thread::hardware_concurrency();
    int share = std::max(1, (cores > 0 ? cores : 1) / local_processes());
    c.threads = (int)parse_env_int("CUCC_THREADS", share, 1, 1024);
    c.stack_bytes = (size_t)parse_env_int("CUCC_STACK_KB", 64, 16, 1 << 20) * 1024;
    c.mem_limit = parse_env_bytes("CUCC_MEM_LIMIT", default_memory_limit());
    c.devices = (int)parse_env_int("CUCC_DEVICES", 8, 1, 1024);
    parse_compute_capability(&c);
    const char* sched = getenv("CUCC_SCHEDULE");
    if (!sched || !*sched || strcmp(sched, "sequential") == 0) c.random = false;
    else if (strcmp(sched, "random") == 0) c.random = true;
    else fatal("CUCC_SCHEDULE=%s: expected sequential or random", sched);
    c.seed = (uint64_t)parse_env_int("CUCC_SEED", 1, 0, INT64_MAX);
    c.thread_loops = parse_env_int("CUCC_THREAD_LOOPS", 1, 0, 1) != 0;
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
    CUCC_ERROR(cudaErrorUnsupportedLimit, "limit is not supported on this architecture"),
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
    CUCC_ERROR(cudaErrorCooperativeLaunchTooLarge, "too many blocks in cooperative launch"),
    CUCC_ERROR(cudaErrorStreamCaptureUnsupported,
               "operation not permitted when stream is capturing"),
    CUCC_ERROR(cudaErrorStreamCaptureInvalidated,
               "operation failed due to a previous error during capture"),
    CUCC_ERROR(cudaErrorStreamCaptureMerge,
               "operation would result in a merge of separate capture sequences"),
    CUCC_ERROR(cudaErrorStreamCaptureUnmatched,
               "capture was not ended in the same stream as it began"),
    CUCC_ERROR(cudaErrorStreamCaptureUnjoined, "capturing stream has unjoined work"),
    CUCC_ERROR(cudaErrorStreamCaptureIsolation,
               "dependency created on uncaptured work in another stream"),
    CUCC_ERROR(cudaErrorStreamCaptureImplicit,
               "operation would make the legacy stream depend on a capturing blocking stream"),
    CUCC_ERROR(cudaErrorCapturedEvent,
               "operation not permitted on an event last recorded in a capturing stream"),
    CUCC_ERROR(cudaErrorStreamCaptureWrongThread,
               "attempt to terminate a thread-local capture sequence from another thread"),
    CUCC_ERROR(cudaErrorGraphExecUpdateFailure,
               "the graph update was not performed because it included changes which violated "
               "constraints specific to instantiated graph update"),
    CUCC_ERROR(cudaErrorUnknown, "unknown error"),
};
#undef CUCC_ERROR

const ErrorText* find_error(cudaError_t err) {
    for (const ErrorText& e : kErrors)
        if (e.code == err) return &e;
    return nullptr;
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

void set_current_device(int device) { tls_device = device; }

void clear_last_error() { tls_last_error = cudaSuccess; }

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

}  // extern "C"
