// internal.h: what the runtime's .cpp files share and nothing else includes.
//
// The runtime is split by concern:
//   config.cpp  environment variables, the current device, error names, the last error
//   device.cpp  the simulated devices: properties, attributes, flags, limits, PCI ids, reset
//   block.cpp   one block on one OS thread: fibers, __syncthreads, warp exchanges, deadlocks
//   launch.cpp  launch validation, function attributes, the OS worker pool that runs grids
//   memory.cpp  cudaMalloc & co., copies, memsets, the per-device memory limit
//   pools.cpp   stream-ordered allocation (cudaMallocAsync, cudaFreeAsync) and memory pools
//   graph.cpp   CUDA graphs: nodes, instantiation, launch, update (capture is in stream.cpp)
//   stream.cpp  streams, events, the queue of pending work and when it runs
//   ptx.cpp     the inline PTX subset of cucc/ptx.h: mma, ldmatrix, cp.async, shared addresses
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cucc/streams.h"

namespace cucc {

// ---------------------------------------------------------------------------------------------
// Settings read once from the environment (config.cpp).
struct Config {
    int threads;         // CUCC_THREADS: OS threads that run blocks (default: cores / local ranks)
    size_t stack_bytes;  // CUCC_STACK_KB: stack of each CUDA-thread fiber (default 64 KiB)
    size_t mem_limit;    // CUCC_MEM_LIMIT: device memory per device (default: what the machine
                         // has available, see default_memory_limit)
    int devices;         // CUCC_DEVICES: number of devices (default 8)
    int cc_major, cc_minor;  // CUCC_COMPUTE_CAPABILITY: the devices' compute capability (9.0)
    bool random;         // CUCC_SCHEDULE=random: randomize run orders (default sequential)
    uint64_t seed;       // CUCC_SEED: seed of the random orders (default 1)
    bool thread_loops;   // CUCC_THREAD_LOOPS=0: run every kernel with a fiber per thread, also
                         // those cucc compiled as thread loops (default 1, see block.cpp)
};
const Config& config();

// Limits of the simulated H100-class device (config.cpp fills cudaDeviceProp from these too).
constexpr int kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockDim[3] = {1024, 1024, 64};
constexpr unsigned kMaxGridDim[3] = {2147483647u, 65535, 65535};
constexpr size_t kDefaultSmemPerBlock = 48 * 1024;
constexpr size_t kMaxSmemPerBlockOptin = 227 * 1024;
constexpr int kMultiprocessors = 132;
constexpr int kMaxThreadsPerMultiprocessor = 2048;
constexpr int kMaxBlocksPerMultiprocessor = 32;
constexpr size_t kSmemPerMultiprocessor = 228 * 1024;
constexpr size_t kReservedSmemPerBlock = 1024;
constexpr int kAccessPolicyMaxWindowSize = 134213632;  // bytes (cudaAccessPolicyWindow)

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
void set_current_device(int device);
// Clears this host thread's last error (cudaDeviceReset).
void clear_last_error();
// Device flags, limits, cache config and peers back to their defaults (device.cpp).
void reset_device_state(int device);

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
// A launch's closure (LaunchClosure in cucc/runtime.h) as the runtime holds it: the body for one
// CUDA thread, and for a thread loop the body for every thread of the block (see there).
using KernelBody = std::function<void()>;
using ThreadLoop = std::function<void(const int* order)>;
struct GridBarrier;  // this_grid().sync() of a cooperative grid (block.cpp)
struct Grid {
    const char* name;
    KernelBody body;
    ThreadLoop thread_loop;  // set when cucc found no synchronization in the kernel, or only
                             // __syncthreads() statements at the top level of its body:
    bool regions;            // then the block runs as regions, thread loops at barriers
    dim3 grid, block;
    size_t smem;
    uint64_t launch_index;  // counts launches; seeds the random orders of this grid
    int device;
    bool cooperative;  // launched with cudaLaunchCooperativeKernel: all blocks run at once
    std::shared_ptr<GridBarrier> barrier = nullptr;
};
// The grid barrier of a cooperative grid of nblocks blocks; reset before every run of the grid
// (a graph may run it again); a block that has finished no longer counts.
std::shared_ptr<GridBarrier> new_grid_barrier(uint64_t nblocks);
void reset_grid_barrier(const Grid& grid);
void grid_block_finished(const Grid& grid);
// Runs all blocks of the grid on the worker pool; returns cudaSuccess or the error of a trap.
cudaError_t run_grid(const Grid& grid);
// Runs one block on the calling OS thread. Returns false if a thread trapped (*trap_error set).
bool run_block(const Grid& grid, uint3 block_idx, cudaError_t* trap_error);
// Called by run_block first: the inline PTX state of the OS thread (ptx.cpp) follows the block.
void ptx_block_begin(const Grid& grid);

// The op of a kernel launch through the registry (cudaLaunchKernel's arguments), for graph
// kernel nodes (launch.cpp).
cudaError_t kernel_op(const void* func, dim3 grid, dim3 block, void** args, size_t smem,
                      StreamOp* out);

// Largest dynamic shared memory limit (launch.cpp).
size_t max_dynamic_smem(const void* kernel_addr);
void reset_function_attributes();

// ---------------------------------------------------------------------------------------------
// Memory (memory.cpp).
enum class MemoryKind : uint8_t { Device, Pinned, Registered, Managed };
struct Allocation {
    uintptr_t begin;
    size_t size;
    int device;  // the device it was allocated (or registered) on
    MemoryKind kind;
    unsigned flags;  // cudaHostAlloc / cudaHostRegister / cudaMallocManaged flags
};
// The allocation containing [ptr, ptr+bytes), or false.
bool find_allocation(const void* ptr, size_t bytes, Allocation* out);
void free_all_device_memory(int device);
// The default CUCC_MEM_LIMIT: what the machine has available now, less the headroom.
size_t default_memory_limit();
// cudaMalloc without the API's bookkeeping of errors; and a free that does not synchronize
// (for stream-ordered frees, which run as stream work).
cudaError_t allocate_device(void** ptr, size_t size);
cudaError_t free_device_now(void* ptr);
// A freed pointer leaves the counts of the pool it came from, if any (pools.cpp).
void forget_pool_allocation(void* ptr);
// The ops of graph memcpy and memset nodes (checked as the matching API calls check them).
cudaError_t memcpy_node_op(const cudaMemcpy3DParms* p, StreamOp* op);
cudaError_t memcpy_1d_node_op(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                              StreamOp* op);
cudaError_t memset_node_op(const cudaMemsetParams* p, StreamOp* op);

// ---------------------------------------------------------------------------------------------
// Streams (stream.cpp).
// Resolves a handle (0, cudaStreamLegacy, cudaStreamPerThread or a created stream) and checks
// it; *out is an internal handle that stream_enqueue accepts. False for an invalid handle.
bool resolve_stream(cudaStream_t stream, cudaStream_t* out);
// Whether the stream (an internal handle from resolve_stream) records into a capture.
bool stream_is_capturing(cudaStream_t stream);
// Enqueues op and runs work until op has finished (a synchronous call such as cudaMemcpy).
cudaError_t enqueue_and_wait(cudaStream_t stream, StreamOp op);
// Runs work until every stream of the device is empty; returns the device's sticky error.
cudaError_t synchronize_device(int device);
// Runs all queued work of every device (before freeing memory, at cudaDeviceReset).
void synchronize_all();
void destroy_device_streams(int device);
// cudaErrorStreamCaptureUnsupported when this host thread may not make a potentially unsafe
// call (one that allocates, frees or synchronizes) because of an ongoing capture, as
// cudaThreadExchangeStreamCaptureMode documents; the thread's own capture is invalidated.
cudaError_t check_capture_safe();
// Records an event on a stream (cudaEventRecord without the error bookkeeping).
cudaError_t record_event(cudaEvent_t event, cudaStream_t stream);
cudaError_t wait_event(cudaStream_t stream, cudaEvent_t event);

// ---------------------------------------------------------------------------------------------
// Graphs (graph.cpp). A node queues its work on a stream when its graph is launched.
using NodeLaunch = std::function<cudaError_t(cudaStream_t)>;
// A new empty graph, and a node added to it after deps (nodes of the same graph).
cudaGraph_t new_graph();
cudaGraphNode_t add_graph_node(cudaGraph_t graph, cudaGraphNodeType type, NodeLaunch launch,
                               const std::vector<cudaGraphNode_t>& deps);
void delete_graph(cudaGraph_t graph);
bool graph_is_live(cudaGraph_t graph);
bool graph_has_node(cudaGraph_t graph, cudaGraphNode_t node);

}  // namespace cucc
