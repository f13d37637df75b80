// cucc/runtime.h: the contract between code rewritten by dev/cpu/cucc, the device-side shims
// (dev/cpu/include/*.h) and the CPU runtime library (dev/cpu/runtime/*.cpp).
//
// How a CUDA program runs on the CPU:
//   - cucc preprocesses the .cu, rewrites every `NAME<<<grid, block, smem, stream>>>(args...)`
//     into a call of cucc::launch_kernel below, and every `extern __shared__ T x[];` into
//     `T* x = (T*)cucc::dynamic_smem();`, then compiles the result with g++.
//   - A launch is validated at once (errors as CUDA reports them, see cudaGetLastError) and then
//     queued on its stream. Stream work runs in stream order; see "Streams" below.
//   - A kernel runs its blocks on a pool of OS threads (CUCC_THREADS, default: the cores,
//     shared among the ranks a launcher started on this machine: OMPI_COMM_WORLD_LOCAL_SIZE,
//     LOCAL_WORLD_SIZE, ...), one block at a time per OS thread. Each CUDA thread of a block
//     is a fiber; barriers, warp shuffles and votes switch between the fibers of the block. A
//     kernel in which cucc finds no synchronizing call runs each block as one loop over its
//     threads instead, and one whose only synchronization is __syncthreads() statements at the
//     top level of its body as one loop per stretch between them (Thread loops, below).
//   - Static __shared__ variables are `static thread_local`: one copy per OS worker thread,
//     which runs one block at a time.
//   - A cooperative launch (cudaLaunchCooperativeKernel) runs every block at once, each on an
//     OS thread of its own, so this_grid().sync() can hold them all (see grid_sync).
//   - Launches that name a kernel by address with a `void**` argument array go through the
//     kernel registry (register_kernel below).
//   - Warp-synchronous calls wait for the non-exited lanes of their mask; __activemask() gives
//     the lanes at the same call site together (see warp_exchange and active_mask). A converged
//     warp call costs about one fiber switch per lane and a little bookkeeping (block.cpp); a
//     butterfly reduction loop of five xor shuffles is one warp call (cucc rewrites it into
//     warp_butterfly, cucc/device.h).
//   - Stream capture records stream work into graphs that replay it (cucc/streams.h); device
//     memory is committed host memory bounded by what the machine has (memory.cpp).
//   - Inline PTX of a documented subset (mma.sync, ldmatrix, cp.async, atom ...) becomes calls of
//     cucc/ptx.h, whose warp-collective instructions go through warp_exchange below.
// Where each piece lives: dev/cpu/runtime/internal.h lists the runtime's files; the CPU
// cuBLASLt and legacy cuBLAS are dev/cpu/cublaslt (one matmul implementation serves both), the
// CPU NCCL dev/cpu/nccl (nccl_internal.h describes its shared-file transport).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <new>  // placement new, in the rewritten bodies of kRegions kernels
#include <type_traits>
#include <utility>

#include <driver_types.h>  // cudaError_t, cudaStream_t, cudaEvent_t, cudaGraphNodeType
#include <vector_types.h>  // uint3, dim3

// ---------------------------------------------------------------------------------------------
// Built-in variables of the running CUDA thread. The scheduler sets them on every switch to a
// fiber. blockDim/gridDim are uint3 (CUDA's are dim3; every use reads .x/.y/.z).
// __thread rather than thread_local: it promises no dynamic initialization, so reading them
// is a plain load instead of a call through a TLS wrapper function. The local-exec model says
// they are defined in the executable (the runtime is a static library, linked into every
// program cucc builds): a read is one %fs-relative load, where the initial-exec model that an
// extern variable gets by default loads its offset from the GOT first, which GCC 12 targeting
// AVX-512 may do into a vector register through a `lea x@gottpoff`, an instruction the linker
// cannot relax ("TLS transition from R_X86_64_GOTTPOFF to R_X86_64_TPOFF32 ... failed").
extern __thread uint3 threadIdx __attribute__((tls_model("local-exec")));
extern __thread uint3 blockIdx __attribute__((tls_model("local-exec")));
extern __thread uint3 blockDim __attribute__((tls_model("local-exec")));
extern __thread uint3 gridDim __attribute__((tls_model("local-exec")));
// A variable, not a macro, so `prop.warpSize` on the host still compiles.
constexpr int warpSize = 32;

namespace cucc {

// The simulated device's SM clock (cudaDevAttrClockRate, kHz; an H100 SXM's boost clock):
// clock64() counts cycles of it in real time.
constexpr int kClockRateKHz = 1980000;

// ---------------------------------------------------------------------------------------------
// Kernel launch.
// name:        the kernel's name as written at the launch site (for error messages).
// kernel_addr: the kernel's address when cucc could name it unambiguously, else nullptr;
//              used to look up attributes set with cudaFuncSetAttribute.
// body:        invoked as body(args...) once per CUDA thread, on that thread's fiber.
// bound:       bound(args...) is the first argument of the kernel's __launch_bounds__, its
//              largest block (0: none). A launch with more threads per block fails with
//              cudaErrorLaunchOutOfResources, as on a GPU.
// args are copied at launch time (kernel parameters are passed by value in CUDA).
//
// cucc turns `__launch_bounds__(E, ...)` into a declaration-only companion of the kernel with
// the same template header and parameters, `launch_bound<max_threads_of(E, ...)>
// __cucc_bounds_NAME(params);`, and passes [](auto&&... a) { return
// decltype(__cucc_bounds_NAME(a...))::value; } as bound: overload resolution at the launch
// picks the companion of the kernel the launch calls, template arguments included.
// Not modelled: static __shared__ variables do not count against the shared memory limit
// (only the launch's dynamic bytes do). cudaFuncGetAttributes reports the bound of registered
// non-template kernels.
//
// Thread loops: a kernel whose body (and every function it calls, as far as cucc can see) makes
// no synchronizing call (no barrier, warp collective, __activemask, inline PTX) needs no fiber
// per thread: cucc launches it as kThreadLoop, and each block runs the closure's `block`, which
// calls the body for every thread of the block in turn (run_threads below), inlined into one
// loop that the host compiler may vectorize. order is null for thread order (x fastest), or the
// linear thread indices to run in that order (CUCC_SCHEDULE=random: see block.cpp).
//
// Thread loops at barriers: a kernel whose only synchronization is `__syncthreads();` statements
// at the top level of its body (loop fission at barriers) is launched as kRegions. cucc rewrites
// its body into one region per stretch between barriers, each a lambda of the thread's linear
// index, and the block's closure calls the body once: run_region runs the first region for every
// thread, then the second for every thread, and so on, with no fiber switch per thread. The
// top-level variables of a region that a later one uses (or whose address may outlive the region)
// live in per-thread arrays (region_arrays), `__shared__` declarations are hoisted ahead of the
// regions. The same rewritten body runs on the fiber path too (CUCC_THREAD_LOOPS=0, a launch by
// address): called once per thread, run_region then runs the region for the calling thread and
// waits at the barrier. What is eligible, and the rewrite: "Thread loops at barriers" in
// dev/cpu/cucc.
//
// A launch's closure, type-erased by hand: `data` holds the kernel's body and its arguments;
// thread(data) runs the body as the current CUDA thread, block(data, order) runs the whole block
// without a fiber per thread (a thread loop, or the regions; nullptr: a fiber per thread),
// destroy(data) frees it when the last use of the grid is done; regions says the block runs
// regions (for the runtime's messages). (A std::function here, instantiated for the closure of
// every launch site, took 3/4 of the compile time of 300 launches: 16.2 s against 3.8 s.)
enum KernelForm { kFibers, kThreadLoop, kRegions };
struct LaunchClosure {
    void* data;
    void (*thread)(const void* data);
    void (*block)(const void* data, const int* order);
    void (*destroy)(void* data);
    bool regions;
};
void launch_validated(const char* name, const void* kernel_addr, dim3 grid, dim3 block, size_t smem,
                      cudaStream_t stream, unsigned max_threads, LaunchClosure closure);

// Runs thread(t) once for every thread of the running block, t its linear index (x fastest),
// setting threadIdx before each: in thread order, or in `order` (linear indices).
template <class Thread>
inline void for_each_thread(Thread&& thread, const int* order) {
    const uint3 d = blockDim;
    if (!order) {
        unsigned t = 0;
        for (unsigned z = 0; z < d.z; z++)
            for (unsigned y = 0; y < d.y; y++)
                for (unsigned x = 0; x < d.x; x++) {
                    threadIdx = uint3{x, y, z};
                    thread(t++);
                }
        return;
    }
    const unsigned n = d.x * d.y * d.z;
    for (unsigned k = 0; k < n; k++) {
        const unsigned i = (unsigned)order[k];
        threadIdx = uint3{i % d.x, i / d.x % d.y, i / (d.x * d.y)};
        thread(i);
    }
}

// Runs thread() once for every thread of the running block, setting threadIdx before each.
template <class Thread>
inline void run_threads(Thread&& thread, const int* order) {
    for_each_thread([&](unsigned) { thread(); }, order);
}

// The closure that calls body(args...), the arguments held by value.
template <KernelForm Form, class Body, class... Args>
LaunchClosure launch_closure(Body body, Args... args) {
    auto call = [body, args...] { body(args...); };
    using Call = decltype(call);
    LaunchClosure c = {new Call(call), nullptr, nullptr, nullptr, Form == kRegions};
    c.thread = [](const void* data) { (*static_cast<const Call*>(data))(); };
    if constexpr (Form == kThreadLoop)
        c.block = [](const void* data, const int* order) {
            // A local copy of the arguments: the kernel's stores cannot alias it, so the loop
            // keeps them in registers (read through the heap copy, a float argument would be
            // reloaded after every float store, which stops vectorization).
            const Call local = *static_cast<const Call*>(data);
            run_threads(local, order);
        };
    if constexpr (Form == kRegions)
        c.block = [](const void* data, const int*) {
            const Call local = *static_cast<const Call*>(data);
            local();  // once: the body's regions loop over the threads (run_region)
        };
    c.destroy = [](void* data) { delete static_cast<Call*>(data); };
    return c;
}

template <unsigned N>
struct launch_bound {
    static constexpr unsigned value = N;
};
constexpr unsigned max_threads_of(unsigned max_threads, unsigned = 0, unsigned = 0) {
    return max_threads;
}
// The bound of a kernel without __launch_bounds__.
struct no_launch_bound {
    template <class... Args>
    unsigned operator()(const Args&...) const {
        return 0;
    }
};

// args: the launch's arguments, copied (kernel parameters are passed by value in CUDA).
template <KernelForm Form, class Body, class Bound, class... Args>
void launch_copied(const char* name, const void* kernel_addr, dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, Body body, Bound bound, Args... args) {
    const unsigned max_threads = bound(args...);
    launch_validated(name, kernel_addr, grid, block, smem, stream, max_threads,
                     launch_closure<Form>(body, args...));
}
template <KernelForm Form, class Body, class Bound, class... Args>
void launch_kernel(const char* name, const void* kernel_addr, dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, Body body, Bound bound, Args&&... args) {
    launch_copied<Form>(name, kernel_addr, grid, block, smem, stream, body, bound,
                        std::decay_t<Args>(std::forward<Args>(args))...);
}

// The kernel registry, for launches that name a kernel by address and pass a `void**` array of
// pointers to the arguments (cudaLaunchKernel, cudaLaunchCooperativeKernel, cudaLaunchKernelEx,
// graph kernel nodes). cucc emits `register_kernel(kernel, "name", bound, loop)` after every
// non-template __global__ definition, and wraps every use of a template kernel's name outside a
// launch (`(void*)kernel<float>`, `&kernel<T, 4>`) in registered_kernel(), so each instantiation
// whose address the program takes is known too. The binder copies the arguments out of the
// array (as a launch copies them) and returns the closure that calls the kernel with them.
using KernelBinder = LaunchClosure (*)(const void* kernel, void** args);
// thread_loop: cucc found no synchronization in the kernel (see Thread loops above). A kernel
// run as thread loops at barriers is registered without: a launch by address runs its rewritten
// body on the fiber path.
void register_kernel_binder(const void* kernel, const char* name, unsigned max_threads,
                            size_t params, KernelBinder bind, bool thread_loop);

template <class... P, size_t... I>
LaunchClosure bind_arguments(void (*kernel)(P...), void** args, std::index_sequence<I...>) {
    return launch_closure<kFibers>(kernel,
                                   std::decay_t<P>(*static_cast<std::decay_t<P>*>(args[I]))...);
}
template <class... P>
LaunchClosure bind_kernel(const void* kernel, void** args) {
    auto f = reinterpret_cast<void (*)(P...)>(const_cast<void*>(kernel));
    return bind_arguments(f, args, std::index_sequence_for<P...>{});
}
template <class... P>
bool register_kernel(void (*kernel)(P...), const char* name, unsigned max_threads = 0,
                     bool thread_loop = false) {
    register_kernel_binder(reinterpret_cast<const void*>(kernel), name, max_threads, sizeof...(P),
                           &bind_kernel<P...>, thread_loop);
    return true;
}
template <class... P>
auto registered_kernel(void (*kernel)(P...), const char* name, bool thread_loop = false) {
    register_kernel(kernel, name, 0, thread_loop);
    return kernel;
}

// The __CUDA_ARCH__ of a file's device pass: cucc compiles a .cu whose code mentions
// __CUDA_ARCH__ twice, as nvcc does (see dev/cpu/cucc), and the host pass registers the value its
// kernels were compiled for. nvcc would embed code for each architecture asked for and the driver
// would pick the one matching the device; cucc compiles one (the highest not above
// CUCC_COMPUTE_CAPABILITY at compile time), so the first launch prints a warning when a file was
// compiled for a newer architecture than the simulated device has (a GPU would refuse its
// kernels with cudaErrorNoKernelImageForDevice).
bool note_device_pass_arch(int arch, const char* file);

// This block's dynamic shared memory: the launch's smem bytes, 4096-byte aligned, never null
// (also for 0 bytes). Under CUCC_SCHEDULE=random it starts filled with 0xff bytes.
void* dynamic_smem();

// ---------------------------------------------------------------------------------------------
// Block and warp synchronization, called from kernel code only.
// A barrier completes when every thread of the block that has not exited waits at it. Threads
// waiting at barriers of different call sites are a deadlock: the runtime prints what each
// group of threads waits on and exits with code 1. The call site is the file and line where
// these functions are called, so a shim must pass its caller's site on: make __syncthreads a
// macro (`#define __syncthreads() cucc::syncthreads()`) or give it the same default arguments.
void syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE());
int syncthreads_count(int predicate, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE());
int syncthreads_and(int predicate, const char* file = __builtin_FILE(),
                    int line = __builtin_LINE());
int syncthreads_or(int predicate, const char* file = __builtin_FILE(), int line = __builtin_LINE());
// this_grid().sync(): every thread of a cooperative grid (cudaLaunchCooperativeKernel, or
// cudaLaunchKernelEx with cudaLaunchAttributeCooperative) waits until all have arrived. In a
// grid not launched cooperatively it is an error, as CUDA makes it one.
void grid_sync(const char* file = __builtin_FILE(), int line = __builtin_LINE());
// Whether the running grid was launched cooperatively (grid_group::is_valid()).
bool grid_is_cooperative();
// Whether the calling OS thread is running a kernel's block (device code).
bool in_kernel();
// Cycles of the device clock (kClockRateKHz) from real time: clock64() and, in a kernel, clock().
long long clock_cycles();
// Warps are threads 32k..32k+31 of the block in linear order (x fastest).
// Warp-synchronous exchange: the calling lane deposits `bytes` (at most 32) bytes of `value`,
// waits until every non-exited lane in mask has deposited, and gets a pointer to the slots of
// this call (lane i's value at offset i*bytes) and, in *arrived if not null, the lanes that
// took part; the slots of other lanes are undefined. Lanes of mask that have exited (or do not
// exist, in a partial last warp) are not waited for, as the PTX ISA specifies for the .sync
// instructions on sm_70+. The pointer stays valid until this lane's next warp-synchronous call.
// Calls match by mask and size, so disjoint groups of lanes may exchange at the same time. The
// mask must include the caller. A mask naming a lane that waits elsewhere is a deadlock
// (reported as for barriers); one naming a lane that was running when the call opened and then
// exits without making it (it went past the call) is an error, the result being undefined in
// CUDA (see report_skipped_call in block.cpp).
// combine, if not null, runs once on the slots when every lane has deposited, before any lane
// reads them: combine(slots, arrived lanes, context) may replace each lane's value with its
// result, computed once for the warp (see warp_butterfly in device.h). Only calls with the same
// combine and context match.
using WarpCombine = void (*)(void* slots, unsigned arrived, const void* context);
const void* warp_exchange(unsigned mask, const void* value, size_t bytes, unsigned* arrived,
                          WarpCombine combine = nullptr, const void* context = nullptr);
// __syncwarp(mask): a warp_exchange of nothing.
void syncwarp(unsigned mask);
// The same for a tile larger than a warp: threads first..first+count-1 of the block (in linear
// order) exchange `bytes` (at most 32) bytes each; thread first+r's value is at offset r*bytes
// and bit r of the bitmap *arrived (32-bit words) says whether it took part (it had not exited).
const void* group_exchange(unsigned first, unsigned count, const void* value, size_t bytes,
                           const uint32_t** arrived);
// __activemask(): the lanes of the caller's warp at this call site (file:line) together; the
// call waits until every other live lane of the warp waits somewhere or has exited (see
// block.cpp: convergence).
unsigned active_mask(const char* file, int line);
// Linear index of the calling thread in its block (x fastest, then y, then z).
inline unsigned thread_index() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
// Lane of the calling thread in its warp.
inline int lane_id() { return (int)(thread_index() & 31u); }

// ---------------------------------------------------------------------------------------------
// Thread loops at barriers (see Thread loops above). cucc rewrites the body of a kRegions kernel
// into
//     hoisted __shared__ declarations; per-thread arrays (region_arrays) of the variables that
//     outlive their region; const bool loops = running_as_loops();
//     run_region(loops, [&](unsigned t) { region 1 }, file, line of the first __syncthreads);
//     ...
//     run_region(loops, [&](unsigned t) { last region });
// t is the thread's linear index, which selects its elements of the arrays.
constexpr bool all_of(std::initializer_list<bool> values) {
    for (bool v : values)
        if (!v) return false;
    return true;
}

// Whether the running block runs without a fiber per thread (as a thread loop or regions); false
// on the fiber path, where every thread calls the body on its own fiber.
bool running_as_loops();
// The order of the next region's loop: null for thread order; under CUCC_SCHEDULE=random a new
// shuffle of the block's threads for every region, as the fiber path picks the threads released
// by a barrier in a random order (see block.cpp).
const int* region_order();
// `bytes` of storage, 64-byte aligned, owned by the OS worker (which runs one block at a time)
// and kept for its next blocks: it grows, and so moves, only when more is asked for than it
// holds. On the fiber path every thread of the block asks for the same size as it starts, before
// any thread stores anything there, so only the first one's call can move it.
void* region_storage(size_t bytes);

// Points each of arrays at an array of one T per thread of the block, in region_storage.
template <class... T>
inline void region_arrays(T*&... arrays) {
    // A variable that lives in these arrays is never destroyed (a kernel's are plain values).
    static_assert(all_of({std::is_trivially_destructible<T>::value...}),
                  "cucc: a kernel variable used across a __syncthreads() in a kernel run as "
                  "thread loops at barriers must be trivially destructible");
    static_assert(all_of({alignof(T) <= 64 ...}),
                  "cucc: a kernel variable aligned to more than 64 bytes used across a "
                  "__syncthreads()");
    const size_t n = (size_t)blockDim.x * blockDim.y * blockDim.z;
    size_t bytes = 0;
    const size_t offsets[] = {(bytes = (bytes + alignof(T) - 1) / alignof(T) * alignof(T),
                               bytes += n * sizeof(T), bytes - n * sizeof(T))...};
    char* base = static_cast<char*>(region_storage(bytes));
    size_t k = 0;
    const int assigned[] = {(arrays = reinterpret_cast<T*>(base + offsets[k++]), 0)...};
    (void)assigned;
}

// A region followed by the __syncthreads() at file:line: on the fiber path the calling thread's
// part of it, then the barrier.
template <class Region>
inline void run_region(bool loops, const Region& region, const char* file, int line) {
    if (loops) {
        for_each_thread(region, region_order());
        return;
    }
    region(thread_index());
    syncthreads(file, line);
}
// The last region (no barrier after it).
template <class Region>
inline void run_region(bool loops, const Region& region) {
    if (loops) {
        for_each_thread(region, region_order());
        return;
    }
    region(thread_index());
}

// A fault inside a kernel (__trap(), a failed device assert): prints message to stderr, stops
// the whole grid (no further thread or block of it runs) and leaves `error` (e.g.
// cudaErrorAssert, cudaErrorLaunchFailure) as the device's sticky error, returned by the next
// synchronization, as CUDA does. Outside a kernel it ends the process.
[[noreturn]] void trap(cudaError_t error, const char* message);

// ---------------------------------------------------------------------------------------------
// Queries of the runtime for the CPU libraries and the shadow headers. (Stream work, StreamOp, is
// declared in cucc/streams.h, for the runtime and the CPU libraries only.)
// OS threads the runtime runs blocks on (CUCC_THREADS, default: the cores / local ranks); the
// CPU libraries (cuBLASLt) split their work over as many.
int thread_count();
// True if ptr lies inside a live cudaMalloc allocation (of any device) or a registered symbol.
bool is_device_pointer(const void* ptr);
// Makes [symbol, symbol+bytes), a __device__ or __constant__ variable, usable as device memory
// (cudaMemcpy, cudaMemset ...). Called by cudaGetSymbolAddress; registering again is harmless.
void register_symbol(const void* symbol, size_t bytes);

}  // namespace cucc
