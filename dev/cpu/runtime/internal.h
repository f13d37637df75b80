// internal.h: what the runtime's .cpp files share and nothing else includes.
//
// The runtime is split by concern:
//   config.cpp  environment variables, devices, properties, error names, the last error
//   block.cpp   one block on one OS thread: fibers, __syncthreads, warp exchanges, deadlocks
//   launch.cpp  launch validation, function attributes, the OS worker pool that runs grids
//   memory.cpp  cudaMalloc & co., copies, memsets, the per-device memory limit
//   stream.cpp  streams, events, the queue of pending work and when it runs
//   ptx.cpp     the inline PTX subset of cucc/ptx.h: mma, ldmatrix, cp.async, shared addresses
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "cucc/runtime.h"

namespace cucc {

// ---------------------------------------------------------------------------------------------
// Settings read once from the environment (config.cpp).
struct Config {
    int threads;         // CUCC_THREADS: OS threads that run blocks (default: all cores)
    size_t stack_bytes;  // CUCC_STACK_KB: stack of each CUDA-thread fiber (default 64 KiB)
    size_t mem_limit;    // CUCC_MEM_LIMIT: device memory per device (default 80 GiB)
    int devices;         // CUCC_DEVICES: number of devices (default 8)
    bool random;         // CUCC_SCHEDULE=random: randomize run orders (default sequential)
    uint64_t seed;       // CUCC_SEED: seed of the random orders (default 1)
};
const Config& config();

// Limits of the simulated H100-class device (config.cpp fills cudaDeviceProp from these too).
constexpr int kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockDim[3] = {1024, 1024, 64};
constexpr unsigned kMaxGridDim[3] = {2147483647u, 65535, 65535};
constexpr size_t kDefaultSmemPerBlock = 48 * 1024;
constexpr size_t kMaxSmemPerBlockOptin = 227 * 1024;

// ---------------------------------------------------------------------------------------------
// Errors. Every API function returns through api_return, which records a failure as this host
// thread's last error (what cudaGetLastError returns). A sticky error (a fault inside queued
// work) is kept per device until cudaDeviceReset and returned by every later synchronization.
cudaError_t api_return(cudaError_t err);
void set_sticky_error(int device, cudaError_t err);
cudaError_t sticky_error(int device);
void clear_sticky_error(int device);

// The current device of this host thread.
int current_device();

// One lock for all runtime state touched by the API (streams, events, allocations,
// attributes), held through ApiLock. It is recursive so that helpers can call each other, but
// queued work always runs with it released (see stream.cpp), so kernels on other OS threads and
// other host threads are never blocked behind a long-running kernel.
std::recursive_mutex& api_mutex();
struct ApiLock {
    ApiLock();
    ~ApiLock();
    ApiLock(const ApiLock&) = delete;
    ApiLock& operator=(const ApiLock&) = delete;
};
// How many ApiLocks this host thread holds (work may only run at depth 0).
int api_lock_depth();

// Prints "cucc: <message>" to stderr and ends the process with exit code 1 (no atexit handlers,
// which could wait on the state that failed).
[[noreturn]] void fatal(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// ---------------------------------------------------------------------------------------------
// Kernels (launch.cpp, block.cpp).
struct Grid {
    const char* name;
    KernelBody body;
    dim3 grid, block;
    size_t smem;
    uint64_t launch_index;  // counts launches; seeds the random orders of this grid
    int device;
};
// Runs all blocks of the grid on the worker pool; returns cudaSuccess or the error of a trap.
cudaError_t run_grid(const Grid& grid);
// Runs one block on the calling OS thread. Returns false if a thread trapped (*trap_error set).
bool run_block(const Grid& grid, uint3 block_idx, cudaError_t* trap_error);
// Called before each run_block: the inline PTX state of the OS thread (ptx.cpp) follows the block.
void ptx_block_begin(const Grid& grid);

// Largest dynamic shared memory limit (launch.cpp).
size_t max_dynamic_smem(const void* kernel_addr);
void reset_function_attributes();

// ---------------------------------------------------------------------------------------------
// Memory (memory.cpp).
struct Allocation {
    uintptr_t begin;
    size_t size;
    int device;  // -1: pinned host memory
};
// The allocation containing [ptr, ptr+bytes), or false.
bool find_allocation(const void* ptr, size_t bytes, Allocation* out);
void free_all_device_memory(int device);

// ---------------------------------------------------------------------------------------------
// Streams (stream.cpp).
// Resolves a handle (0, cudaStreamLegacy, cudaStreamPerThread or a created stream) and checks
// it; *out is an internal handle that stream_enqueue accepts. False for an invalid handle.
bool resolve_stream(cudaStream_t stream, cudaStream_t* out);
// Enqueues op and runs work until op has finished (a synchronous call such as cudaMemcpy).
cudaError_t enqueue_and_wait(cudaStream_t stream, StreamOp op);
// Runs work until every stream of the device is empty; returns the device's sticky error.
cudaError_t synchronize_device(int device);
// Runs all queued work of every device (before freeing memory, at cudaDeviceReset).
void synchronize_all();
void destroy_device_streams(int device);

}  // namespace cucc
