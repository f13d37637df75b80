// launch.cpp: kernel launches. A launch is checked at once, as CUDA checks it (bad sizes, more
// threads than the kernel's __launch_bounds__ and too much dynamic shared memory are reported
// through cudaGetLastError and the kernel does not run; such errors are not sticky), then
// queued on its stream. When the stream work runs, the grid's blocks are spread over a
// persistent pool of OS threads (CUCC_THREADS, default the cores / the job's ranks on this
// machine): the synchronizing host thread plus CUCC_THREADS-1 helpers, each taking the next
// block from a shared counter and running it to completion with run_block (block.cpp). A kernel
// whose last grid took under 200 us starts on the host thread alone and calls the helpers only
// if it runs longer (waking them costs more than such a grid; see run_grid). A
// cooperative grid (one that may call this_grid().sync()) runs every block on an OS thread of
// its own instead, all at once, so that a grid-wide barrier can hold them all; the launch refuses
// more blocks than the device could keep resident (cudaErrorCooperativeLaunchTooLarge), as CUDA
// does.
//
// The kernel registry: cudaLaunchKernel, cudaLaunchCooperativeKernel, cudaLaunchKernelExC (and
// the C++ templates over them, cudaLaunchKernelEx included) and graph kernel nodes name a kernel
// by its address and pass its arguments as a `void**` array. Calling it on the CPU needs the
// parameter types: cucc registers every kernel it compiles with its types (see register_kernel
// in cucc/runtime.h), which gives the registry a function that copies the arguments out of the
// array into a closure. A kernel the registry does not know fails with
// cudaErrorInvalidDeviceFunction and a message saying why.
// Also here: cudaFuncSetAttribute / cudaFuncGetAttributes and the occupancy queries, and the
// warning at the first launch when a file's device pass was compiled for a newer __CUDA_ARCH__
// than the simulated device's (note_device_pass_arch).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <thread>
#include <unordered_map>
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

struct RegisteredKernel {
    const char* name;
    unsigned max_threads;  // its __launch_bounds__, 0: none
    size_t params;         // number of parameters
    KernelBinder bind;
    bool thread_loop;  // runs as a loop over each block's threads (ThreadLoop in runtime.h)
};
std::map<const void*, RegisteredKernel>& registry() {
    static auto* m = new std::map<const void*, RegisteredKernel>;
    return *m;
}

// A launch's closure as the runtime's two functions, which share it: freed with the last copy
// of either (*loop is null when the closure has no thread loop).
KernelBody closure_functions(LaunchClosure c, ThreadLoop* loop) {
    std::shared_ptr<void> data(c.data, c.destroy);
    *loop = nullptr;
    if (c.block) *loop = [data, block = c.block](const int* order) { block(data.get(), order); };
    return [data, thread = c.thread] { thread(data.get()); };
}

// The thread loop of a registered kernel launched by address: the body called for each thread
// (not inlined into one loop as a <<<>>> launch's is, but still no fiber per thread).
ThreadLoop loop_over(const KernelBody& body) {
    return [body](const int* order) { run_threads(body, order); };
}

// The kernel at func, or false after saying why on stderr.
bool find_kernel(const char* api, const void* func, RegisteredKernel* out) {
    ApiLock lock;
    auto it = registry().find(func);
    if (it != registry().end()) {
        *out = it->second;
        return true;
    }
    fprintf(stderr,
            "cucc: %s: %p is not a kernel the CPU runtime knows (cucc registers the kernels it "
            "compiles and the template kernels whose address the program takes by name)\n",
            api, func);
    return false;
}

// The worker pool. A grid is published with a new generation number and wakes helpers, which
// join it while it is open and run blocks until none is left. The host thread closes the grid
// when it finds no block left, then waits only for the helpers that joined: one that wakes after
// that (a small grid is often done before a helper is scheduled) goes back to sleep. Helpers are
// never joined (detached at exit).
struct Pool {
    std::mutex mutex;
    std::condition_variable wake, done;
    uint64_t generation = 0;
    bool open = false;  // helpers may still join the current grid
    int working = 0;    // helpers running blocks of the current grid
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

// Runs the grid's blocks until none is left, or, when `until` is given, until the steady clock
// passes it between two blocks. Returns whether it stopped for the clock (blocks may remain).
bool run_blocks(Pool& pool, std::chrono::steady_clock::time_point until = {}) {
    const Grid& g = *pool.grid;
    const bool timed = until != std::chrono::steady_clock::time_point{};
    for (;;) {
        if (pool.trapped.load(std::memory_order_relaxed)) return false;
        if (timed && std::chrono::steady_clock::now() >= until) return true;
        uint64_t k = pool.next.fetch_add(1, std::memory_order_relaxed);
        if (k >= pool.nblocks) return false;
        uint64_t linear = (unsigned __int128)(pool.stride) * k % pool.nblocks;
        linear = (linear + pool.offset) % pool.nblocks;
        uint3 idx{(unsigned)(linear % g.grid.x), (unsigned)(linear / g.grid.x % g.grid.y),
                  (unsigned)(linear / ((uint64_t)g.grid.x * g.grid.y))};
        cudaError_t err;
        if (!run_block(g, idx, &err)) {
            std::lock_guard<std::mutex> lock(pool.mutex);
            if (!pool.trapped.exchange(true)) pool.trap_error = err;
            return false;
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
            if (!pool->open) continue;
            pool->working++;
        }
        run_blocks(*pool);
        std::lock_guard<std::mutex> lock(pool->mutex);
        if (--pool->working == 0) pool->done.notify_one();
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

// The OS threads of cooperative grids. They are kept, parked, between launches: an OS thread's
// worker (block.cpp) keeps the fiber stacks it mapped, and a grid of co-resident blocks maps one
// per CUDA thread (264 blocks of 1024: 270k mappings, each with a guard page), so a thread made
// anew for every launch spent most of each launch mapping and unmapping stacks (cuda-samples'
// reductionMultiBlockCG, 100 launches of such a grid, ran past a minute in the kernel's memory
// calls). A launch takes as many idle threads as it has blocks, making new ones when too few
// are idle, so launches from several host threads still run side by side. Never destroyed.
struct CoopThread {
    std::mutex mutex;
    std::condition_variable wake;
    std::function<void()> job;  // set by a launch, cleared when done; the thread waits for one
};

struct CoopPool {
    std::mutex mutex;
    std::vector<CoopThread*> idle;
};

CoopPool& coop_pool() {
    static CoopPool* pool = new CoopPool;
    return *pool;
}

void coop_thread_loop(CoopThread* t) {
    for (;;) {
        std::function<void()> job;
        {
            std::unique_lock<std::mutex> lock(t->mutex);
            t->wake.wait(lock, [t] { return (bool)t->job; });
            job = std::move(t->job);
            t->job = nullptr;
        }
        job();
    }
}

// Counts the blocks of one cooperative grid still running.
struct CoopLatch {
    std::mutex mutex;
    std::condition_variable done;
    uint64_t running;
};

// A cooperative grid: one OS thread per block, all running at once; GridBarrier (block.cpp)
// holds them at this_grid().sync().
cudaError_t run_cooperative_grid(const Grid& g) {
    uint64_t nblocks = (uint64_t)g.grid.x * g.grid.y * g.grid.z;
    std::vector<cudaError_t> errors(nblocks, cudaSuccess);
    std::vector<CoopThread*> threads;
    CoopPool& pool = coop_pool();
    {
        std::lock_guard<std::mutex> lock(pool.mutex);
        while (threads.size() < nblocks && !pool.idle.empty()) {
            threads.push_back(pool.idle.back());
            pool.idle.pop_back();
        }
    }
    while (threads.size() < nblocks) {
        CoopThread* t = new CoopThread;
        std::thread(coop_thread_loop, t).detach();
        threads.push_back(t);
    }
    CoopLatch latch;
    latch.running = nblocks;
    for (uint64_t linear = 0; linear < nblocks; linear++) {
        uint3 idx{(unsigned)(linear % g.grid.x), (unsigned)(linear / g.grid.x % g.grid.y),
                  (unsigned)(linear / ((uint64_t)g.grid.x * g.grid.y))};
        CoopThread* t = threads[linear];
        std::lock_guard<std::mutex> lock(t->mutex);
        t->job = [&g, &errors, &latch, idx, linear] {
            cudaError_t err = cudaSuccess;
            if (!run_block(g, idx, &err)) errors[linear] = err;
            grid_block_finished(g);
            std::lock_guard<std::mutex> done(latch.mutex);
            if (--latch.running == 0) latch.done.notify_all();
        };
        t->wake.notify_one();
    }
    {
        std::unique_lock<std::mutex> lock(latch.mutex);
        latch.done.wait(lock, [&latch] { return latch.running == 0; });
    }
    {
        std::lock_guard<std::mutex> lock(pool.mutex);
        pool.idle.insert(pool.idle.end(), threads.begin(), threads.end());
    }
    for (cudaError_t err : errors)
        if (err != cudaSuccess) return err;
    return cudaSuccess;
}

// A grid shorter than this runs on the calling thread alone (see run_grid).
constexpr std::chrono::microseconds kBriefGrid{200};

cudaError_t run_grid(const Grid& g) {
    if (g.cooperative) return run_cooperative_grid(g);
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
    // Waking a helper costs a futex wake and two context switches, more than the whole run of a
    // small grid: a kernel whose last grid took less than kBriefGrid starts on this thread alone,
    // and calls the helpers only if blocks remain after kBriefGrid (a tiny model's 30 steps on 2
    // threads: 0.30-0.35 s of CPU instead of 0.70-0.80). CUDA does not promise that any two
    // blocks of a grid run at once, so running them one after another is as faithful as in
    // parallel.
    static std::unordered_map<const char*, std::chrono::steady_clock::duration> last_run;
    const auto start = std::chrono::steady_clock::now();
    auto last = last_run.find(g.name);
    const bool brief = last != last_run.end() && last->second < kBriefGrid;
    const int helpers = (int)std::min<uint64_t>(config().threads - 1, nblocks - 1);
    bool called = false;
    auto call_helpers = [&] {
        std::lock_guard<std::mutex> lock(p.mutex);
        p.open = true;
        p.generation++;
        for (int i = 0; i < helpers; i++) p.wake.notify_one();
        called = true;
    };
    if (helpers > 0 && (!brief || run_blocks(p, start + kBriefGrid))) call_helpers();
    run_blocks(p);
    if (called) {
        std::unique_lock<std::mutex> lock(p.mutex);
        p.open = false;
        p.done.wait(lock, [&] { return p.working == 0; });
    }
    last_run[g.name] = std::chrono::steady_clock::now() - start;
    return p.trapped ? p.trap_error : cudaSuccess;
}

namespace {

// Blocks of this kernel that fit on one SM at once (threads, blocks, shared memory; registers
// are not modelled), as cudaOccupancyMaxActiveBlocksPerMultiprocessor reports.
int resident_blocks(int block_size, size_t smem) {
    int warps = (block_size + 31) / 32;
    int by_threads = kMaxThreadsPerMultiprocessor / 32 / warps;
    int by_smem = (int)(kSmemPerMultiprocessor / (smem + kReservedSmemPerBlock));
    return std::min(std::min(by_threads, kMaxBlocksPerMultiprocessor), by_smem);
}

// The newest __CUDA_ARCH__ a file of the program was compiled for (note_device_pass_arch), and
// that file; under api_mutex after static initialization.
struct DevicePassArch {
    int arch = 0;
    const char* file = nullptr;
};
DevicePassArch& device_pass_arch() {
    static DevicePassArch a;
    return a;
}

// Once per process, at the first launch: a warning when some file's kernels were compiled for a
// newer architecture than the simulated device's compute capability.
void warn_device_pass_arch() {
    static std::once_flag once;
    std::call_once(once, [] {
        const DevicePassArch& a = device_pass_arch();
        int device_arch = config().cc_major * 100 + config().cc_minor * 10;
        if (a.arch <= device_arch) return;
        fprintf(stderr,
                "cucc: warning: %s was compiled with __CUDA_ARCH__ %d, newer than the simulated "
                "device's compute capability %d.%d (CUCC_COMPUTE_CAPABILITY); a GPU would refuse "
                "its kernels (cudaErrorNoKernelImageForDevice), here they run as compiled (build "
                "with -arch=sm_%d%d or an architecture list that includes it)\n",
                a.file, a.arch, config().cc_major, config().cc_minor, config().cc_major,
                config().cc_minor);
    });
}

cudaError_t grid_op(const char* name, const void* kernel_addr, dim3 grid, dim3 block, size_t smem,
                    unsigned max_threads, bool cooperative, KernelBody thread_body,
                    ThreadLoop thread_loop, bool regions, StreamOp* out) {
    static std::atomic<uint64_t> launches{0};
    warn_device_pass_arch();
    int device = current_device();
    cudaError_t err = sticky_error(device);
    if (err == cudaSuccess) err = check_launch(kernel_addr, grid, block, smem, max_threads);
    if (err != cudaSuccess) return err;
    if (cooperative &&
        (uint64_t)grid.x * grid.y * grid.z >
            (uint64_t)resident_blocks((int)(block.x * block.y * block.z), smem) * kMultiprocessors)
        return cudaErrorCooperativeLaunchTooLarge;
    auto g =
        std::make_shared<Grid>(Grid{name, std::move(thread_body), std::move(thread_loop), regions,
                                    grid, block, smem, launches++, device, cooperative});
    if (cooperative) g->barrier = new_grid_barrier((uint64_t)grid.x * grid.y * grid.z);
    // A kernel queued behind a fault does not run, as on a GPU whose context has failed.
    *out = StreamOp{name, nullptr, [g] {
                        if (sticky_error(g->device) != cudaSuccess) return;
                        if (g->cooperative) reset_grid_barrier(*g);
                        cudaError_t trap = run_grid(*g);
                        if (trap != cudaSuccess) set_sticky_error(g->device, trap);
                    }};
    return cudaSuccess;
}

// A launch through the registry: the kernel at func with the arguments args points to.
cudaError_t registry_op(const char* api, const void* func, dim3 grid, dim3 block, void** args,
                        size_t smem, bool cooperative, StreamOp* out) {
    if (!func) return cudaErrorInvalidDeviceFunction;
    RegisteredKernel k;
    if (!find_kernel(api, func, &k)) return cudaErrorInvalidDeviceFunction;
    if (k.params > 0 && !args) return cudaErrorInvalidValue;
    ThreadLoop loop;  // (a binder's closure has none: the registry's flag decides)
    KernelBody body = closure_functions(k.bind(func, args), &loop);
    if (k.thread_loop) loop = loop_over(body);
    return grid_op(k.name, func, grid, block, smem, k.max_threads, cooperative, std::move(body),
                   std::move(loop), false, out);
}

cudaError_t registry_launch(const char* api, const void* func, dim3 grid, dim3 block, void** args,
                            size_t smem, cudaStream_t stream, bool cooperative) {
    StreamOp op;
    cudaError_t err = registry_op(api, func, grid, block, args, smem, cooperative, &op);
    if (err == cudaSuccess) err = stream_enqueue(stream, std::move(op));
    return api_return(err);
}

}  // namespace

void launch_validated(const char* name, const void* kernel_addr, dim3 grid, dim3 block, size_t smem,
                      cudaStream_t stream, unsigned max_threads, LaunchClosure closure) {
    ThreadLoop thread_loop;
    KernelBody thread_body = closure_functions(closure, &thread_loop);
    // A launch through a function pointer (`table[i]<<<...>>>`): cucc could not tell which
    // kernel it calls, the registry can, by the pointer's value (also whether the file that
    // defines it found it free of synchronization).
    if (kernel_addr && max_threads == 0) {
        ApiLock lock;
        auto k = registry().find(kernel_addr);
        if (k != registry().end()) {
            name = k->second.name;
            max_threads = k->second.max_threads;
            if (k->second.thread_loop && !thread_loop) thread_loop = loop_over(thread_body);
        }
    }
    StreamOp op;
    cudaError_t err = grid_op(name, kernel_addr, grid, block, smem, max_threads, false,
                              std::move(thread_body), std::move(thread_loop), closure.regions, &op);
    if (err == cudaSuccess) err = stream_enqueue(stream, std::move(op));
    api_return(err);
}

bool note_device_pass_arch(int arch, const char* file) {
    DevicePassArch& a = device_pass_arch();
    if (arch > a.arch) a = DevicePassArch{arch, file};
    return true;
}

void register_kernel_binder(const void* kernel, const char* name, unsigned max_threads,
                            size_t params, KernelBinder bind, bool thread_loop) {
    ApiLock lock;
    registry()[kernel] = RegisteredKernel{name, max_threads, params, bind, thread_loop};
}

cudaError_t kernel_op(const void* func, dim3 grid, dim3 block, void** args, size_t smem,
                      StreamOp* out) {
    return registry_op("cudaGraphAddKernelNode", func, grid, block, args, smem, false, out);
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
    auto k = registry().find(func);
    unsigned bound = k != registry().end() ? k->second.max_threads : 0;
    attr->maxThreadsPerBlock = bound > 0 ? (int)bound : kMaxThreadsPerBlock;
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
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* num_blocks,
                                                                   const void* func, int block_size,
                                                                   size_t smem,
                                                                   unsigned int flags) {
    if (!num_blocks || block_size <= 0 || block_size > kMaxThreadsPerBlock ||
        (flags & ~(unsigned)cudaOccupancyDisableCachingOverride))
        return api_return(cudaErrorInvalidValue);
    if (!func) return api_return(cudaErrorInvalidDeviceFunction);
    *num_blocks = smem > max_dynamic_smem(func) ? 0 : resident_blocks(block_size, smem);
    return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* num_blocks, const void* func,
                                                          int block_size, size_t smem) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(num_blocks, func, block_size,
                                                                  smem, cudaOccupancyDefault);
}

// Dynamic shared memory a block may use when num_blocks of them share an SM.
cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t* smem, const void* func,
                                                      int num_blocks, int block_size) {
    if (!smem || num_blocks <= 0 || block_size <= 0 || block_size > kMaxThreadsPerBlock)
        return api_return(cudaErrorInvalidValue);
    if (!func) return api_return(cudaErrorInvalidDeviceFunction);
    if (resident_blocks(block_size, 0) < num_blocks) {
        *smem = 0;
        return cudaSuccess;
    }
    size_t per_block = kSmemPerMultiprocessor / (size_t)num_blocks;
    per_block = per_block > kReservedSmemPerBlock ? per_block - kReservedSmemPerBlock : 0;
    *smem = std::min(per_block, max_dynamic_smem(func));
    return cudaSuccess;
}

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t smem,
                             cudaStream_t stream) {
    return registry_launch("cudaLaunchKernel", func, grid, block, args, smem, stream, false);
}

cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 grid, dim3 block, void** args,
                                        size_t smem, cudaStream_t stream) {
    return registry_launch("cudaLaunchCooperativeKernel", func, grid, block, args, smem, stream,
                           true);
}

// The attributes change how a GPU schedules a launch; here only cooperative launches and
// completion events change anything. Clusters must tile the grid (at most 8 blocks, the portable
// size). Programmatic dependent launch is trivially satisfied: kernels of a stream run one
// after the other.
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
    if (!config || (config->numAttrs > 0 && !config->attrs))
        return api_return(cudaErrorInvalidValue);
    bool cooperative = false;
    std::vector<cudaEvent_t> completion_events;
    for (unsigned i = 0; i < config->numAttrs; i++) {
        const cudaLaunchAttribute& a = config->attrs[i];
        switch (a.id) {
            case cudaLaunchAttributeCooperative:
                cooperative = a.val.cooperative != 0;
                break;
            case cudaLaunchAttributeClusterDimension:
            case cudaLaunchAttributePreferredClusterDimension: {
                unsigned cx = a.val.clusterDim.x, cy = a.val.clusterDim.y, cz = a.val.clusterDim.z;
                if (cx == 0 || cy == 0 || cz == 0 || cx * cy * cz > 8 || config->gridDim.x % cx ||
                    config->gridDim.y % cy || config->gridDim.z % cz)
                    return api_return(cudaErrorInvalidValue);
                break;
            }
            case cudaLaunchAttributeProgrammaticEvent:
                completion_events.push_back(a.val.programmaticEvent.event);
                break;
            case cudaLaunchAttributeLaunchCompletionEvent:
                completion_events.push_back(a.val.launchCompletionEvent.event);
                break;
            case cudaLaunchAttributeIgnore:
            case cudaLaunchAttributeAccessPolicyWindow:
            case cudaLaunchAttributeClusterSchedulingPolicyPreference:
            case cudaLaunchAttributeProgrammaticStreamSerialization:
            case cudaLaunchAttributePriority:
            case cudaLaunchAttributeMemSyncDomainMap:
            case cudaLaunchAttributeMemSyncDomain:
            case cudaLaunchAttributeDeviceUpdatableKernelNode:
            case cudaLaunchAttributePreferredSharedMemoryCarveout:
            case cudaLaunchAttributeNvlinkUtilCentricScheduling:
                break;
            default:
                return api_return(cudaErrorInvalidValue);
        }
    }
    cudaError_t err = registry_launch("cudaLaunchKernelEx", func, config->gridDim, config->blockDim,
                                      args, config->dynamicSmemBytes, config->stream, cooperative);
    for (cudaEvent_t e : completion_events)
        if (err == cudaSuccess) err = api_return(record_event(e, config->stream));
    return err;
}

cudaError_t cudaFuncGetName(const char** name, const void* func) {
    if (!name) return api_return(cudaErrorInvalidValue);
    RegisteredKernel k;
    if (!func || !find_kernel("cudaFuncGetName", func, &k))
        return api_return(cudaErrorInvalidDeviceFunction);
    *name = k.name;
    return cudaSuccess;
}

}  // extern "C"
