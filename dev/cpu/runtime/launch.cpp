// launch.cpp: kernel launches. A launch is checked at once, as CUDA checks it (bad sizes, more
// threads than the kernel's __launch_bounds__ and too much dynamic shared memory are reported
// through cudaGetLastError and the kernel does not run; such errors are not sticky), then
// queued on its stream. When the stream work runs, the grid's blocks are spread over a
// persistent pool of OS threads (CUCC_THREADS, default all cores): the synchronizing host
// thread plus CUCC_THREADS-1 helpers, each taking the next block from a shared counter and
// running it to completion with run_block (block.cpp).
// Also here: cudaFuncSetAttribute / cudaFuncGetAttributes, the occupancy query, and
// cudaLaunchKernel / cudaLaunchKernelExC, which are not supported: a `const void*` kernel and a
// `void**` argument array carry no parameter types, which a CPU call of the kernel needs.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <condition_variable>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "internal.h"

namespace cucc {
namespace {

// Per-kernel attribute set with cudaFuncSetAttribute (under api_mutex).
struct FuncAttributes {
    size_t max_dynamic_smem = kDefaultSmemPerBlock;
    int carveout = -1;
};
std::map<const void*, FuncAttributes>& func_attributes() {
    static auto* m = new std::map<const void*, FuncAttributes>;
    return *m;
}

// The worker pool. A grid is published with a new generation number; each helper runs blocks
// until none is left, then reports done. Helpers are never joined (detached at exit).
struct Pool {
    std::mutex mutex;
    std::condition_variable wake, done;
    uint64_t generation = 0;
    int running = 0;  // helpers still working on the current grid
    const Grid* grid = nullptr;
    uint64_t nblocks = 0;
    uint64_t stride = 1, offset = 0;  // block order: (stride * k + offset) mod nblocks
    std::atomic<uint64_t> next{0};
    std::atomic<bool> trapped{false};
    cudaError_t trap_error = cudaSuccess;
};

uint64_t gcd(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

void run_blocks(Pool& pool) {
    const Grid& g = *pool.grid;
    for (;;) {
        if (pool.trapped.load(std::memory_order_relaxed)) return;
        uint64_t k = pool.next.fetch_add(1, std::memory_order_relaxed);
        if (k >= pool.nblocks) return;
        uint64_t linear = (unsigned __int128)(pool.stride) * k % pool.nblocks;
        linear = (linear + pool.offset) % pool.nblocks;
        uint3 idx{(unsigned)(linear % g.grid.x), (unsigned)(linear / g.grid.x % g.grid.y),
                  (unsigned)(linear / ((uint64_t)g.grid.x * g.grid.y))};
        cudaError_t err;
        ptx_block_begin(g);
        if (!run_block(g, idx, &err)) {
            std::lock_guard<std::mutex> lock(pool.mutex);
            if (!pool.trapped.exchange(true)) pool.trap_error = err;
            return;
        }
    }
}

void helper_loop(Pool* pool) {
    uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(pool->mutex);
            pool->wake.wait(lock, [&] { return pool->generation != seen; });
            seen = pool->generation;
        }
        run_blocks(*pool);
        std::lock_guard<std::mutex> lock(pool->mutex);
        if (--pool->running == 0) pool->done.notify_one();
    }
}

Pool& pool() {
    static Pool* p = [] {
        auto* created = new Pool;  // never destroyed: helpers may outlive static destructors
        for (int i = 1; i < config().threads; i++) std::thread(helper_loop, created).detach();
        return created;
    }();
    return *p;
}

cudaError_t check_launch(const void* kernel_addr, dim3 grid, dim3 block, size_t smem,
                         unsigned max_threads) {
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0)
        return cudaErrorInvalidConfiguration;
    if (block.x > kMaxBlockDim[0] || block.y > kMaxBlockDim[1] || block.z > kMaxBlockDim[2] ||
        (uint64_t)block.x * block.y * block.z > (uint64_t)kMaxThreadsPerBlock)
        return cudaErrorInvalidConfiguration;
    if (grid.x > kMaxGridDim[0] || grid.y > kMaxGridDim[1] || grid.z > kMaxGridDim[2])
        return cudaErrorInvalidConfiguration;
    if (smem > max_dynamic_smem(kernel_addr)) return cudaErrorInvalidValue;
    // A kernel compiled for at most max_threads threads per block cannot run more.
    if (max_threads > 0 && (uint64_t)block.x * block.y * block.z > max_threads)
        return cudaErrorLaunchOutOfResources;
    return cudaSuccess;
}

}  // namespace

size_t max_dynamic_smem(const void* kernel_addr) {
    ApiLock lock;
    auto& attrs = func_attributes();
    if (kernel_addr) {
        auto it = attrs.find(kernel_addr);
        return it == attrs.end() ? kDefaultSmemPerBlock : it->second.max_dynamic_smem;
    }
    // The launch site could not name the kernel: allow the largest limit any kernel was given.
    size_t largest = kDefaultSmemPerBlock;
    for (auto& kv : attrs) largest = std::max(largest, kv.second.max_dynamic_smem);
    return largest;
}

void reset_function_attributes() {
    ApiLock lock;
    func_attributes().clear();
}

cudaError_t run_grid(const Grid& g) {
    uint64_t nblocks = (uint64_t)g.grid.x * g.grid.y * g.grid.z;
    Pool& p = pool();
    // One grid at a time runs on the pool; a second host thread synchronizing waits here.
    static std::mutex grid_mutex;
    std::lock_guard<std::mutex> grid_lock(grid_mutex);
    p.grid = &g;
    p.nblocks = nblocks;
    p.next = 0;
    p.trapped = false;
    p.trap_error = cudaSuccess;
    p.stride = 1;
    p.offset = 0;
    if (config().random && nblocks > 1) {
        // A random order of the blocks: k -> (stride*k + offset) mod n, stride coprime to n.
        uint64_t s = config().seed * 0x9e3779b97f4a7c15ull ^ g.launch_index * 0xbf58476d1ce4e5b9ull;
        p.offset = s % nblocks;
        p.stride = (s >> 17) % nblocks;
        while (p.stride == 0 || gcd(p.stride, nblocks) != 1) p.stride = (p.stride + 1) % nblocks;
    }
    int helpers = (int)std::min<uint64_t>(config().threads - 1, nblocks - 1);
    if (helpers > 0) {
        std::lock_guard<std::mutex> lock(p.mutex);
        p.running = config().threads - 1;
        p.generation++;
        p.wake.notify_all();
    }
    run_blocks(p);
    if (helpers > 0) {
        std::unique_lock<std::mutex> lock(p.mutex);
        p.done.wait(lock, [&] { return p.running == 0; });
    }
    return p.trapped ? p.trap_error : cudaSuccess;
}

void launch_validated(const char* name, const void* kernel_addr, dim3 grid, dim3 block, size_t smem,
                      cudaStream_t stream, unsigned max_threads, KernelBody thread_body) {
    static std::atomic<uint64_t> launches{0};
    int device = current_device();
    cudaError_t err = sticky_error(device);
    if (err == cudaSuccess) err = check_launch(kernel_addr, grid, block, smem, max_threads);
    if (err != cudaSuccess) {
        api_return(err);
        return;
    }
    auto g = std::make_shared<Grid>(
        Grid{name, std::move(thread_body), grid, block, smem, launches++, device});
    // A kernel queued behind a fault does not run, as on a GPU whose context has failed.
    err = stream_enqueue(stream, StreamOp{name, nullptr, [g] {
                                              if (sticky_error(g->device) != cudaSuccess) return;
                                              cudaError_t trap = run_grid(*g);
                                              if (trap != cudaSuccess)
                                                  set_sticky_error(g->device, trap);
                                          }});
    api_return(err);
}

}  // namespace cucc

using namespace cucc;

extern "C" {

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
    if (!func) return api_return(cudaErrorInvalidDeviceFunction);
    ApiLock lock;
    switch (attr) {
        case cudaFuncAttributeMaxDynamicSharedMemorySize:
            if (value < 0 || (size_t)value > kMaxSmemPerBlockOptin)
                return api_return(cudaErrorInvalidValue);
            func_attributes()[func].max_dynamic_smem = (size_t)value;
            return cudaSuccess;
        case cudaFuncAttributePreferredSharedMemoryCarveout:
            if (value < -1 || value > 100) return api_return(cudaErrorInvalidValue);
            func_attributes()[func].carveout = value;
            return cudaSuccess;
        default:
            return api_return(cudaErrorInvalidValue);
    }
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
    if (!attr) return api_return(cudaErrorInvalidValue);
    if (!func) return api_return(cudaErrorInvalidDeviceFunction);
    ApiLock lock;
    FuncAttributes f;
    auto it = func_attributes().find(func);
    if (it != func_attributes().end()) f = it->second;
    *attr = cudaFuncAttributes{};
    attr->maxThreadsPerBlock = kMaxThreadsPerBlock;
    attr->numRegs = 32;
    attr->ptxVersion = 90;
    attr->binaryVersion = 90;
    attr->maxDynamicSharedSizeBytes = (int)f.max_dynamic_smem;
    attr->preferredShmemCarveout = f.carveout;
    return cudaSuccess;
}

// The L1/shared split is a hint on a GPU; the CPU has nothing to configure.
cudaError_t cudaFuncSetCacheConfig(const void* func, cudaFuncCache config) {
    if (!func) return api_return(cudaErrorInvalidDeviceFunction);
    if (config < cudaFuncCachePreferNone || config > cudaFuncCachePreferEqual)
        return api_return(cudaErrorInvalidValue);
    return cudaSuccess;
}

// Resident blocks per SM of an H100: limited by threads (2048), blocks (32) and shared memory
// (228 KiB per SM, 1 KiB reserved per block). Registers are not modelled.
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* num_blocks, const void* func,
                                                          int block_size, size_t smem) {
    if (!num_blocks || block_size <= 0 || block_size > kMaxThreadsPerBlock)
        return api_return(cudaErrorInvalidValue);
    if (!func) return api_return(cudaErrorInvalidDeviceFunction);
    int warps = (block_size + 31) / 32;
    int by_threads = 64 / warps;
    int by_smem = (int)((228 * 1024) / (smem + 1024));
    *num_blocks = std::min(std::min(by_threads, 32), by_smem);
    return cudaSuccess;
}

static cudaError_t launch_not_supported(const char* what) {
    fprintf(stderr,
            "cucc: %s is not supported on the CPU runtime; launch with "
            "kernel<<<grid, block, shared_bytes, stream>>>(args...) instead\n",
            what);
    return api_return(cudaErrorNotSupported);
}

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t smem,
                             cudaStream_t stream) {
    return launch_not_supported("cudaLaunchKernel");
}

cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
    return launch_not_supported("cudaLaunchKernelEx");
}

}  // extern "C"
