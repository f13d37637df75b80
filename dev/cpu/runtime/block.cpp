// block.cpp: runs one thread block on one OS thread, each CUDA thread as a fiber (or, for a
// kernel without synchronization, all of them as one loop, and for one whose only
// synchronization is top-level __syncthreads() statements, one loop per stretch between them:
// see thread loops below).
//
// Fibers: a switch leaves a resumption address on the stack, swaps stack pointers and jumps to
// the other fiber's (switch_fiber below, a few ns, no syscall).
// Each fiber has its own mmap'ed stack with a guard page below it (up to a budget of mappings,
// see take_stack); stacks are pooled per OS thread and reused by every block that thread runs.
//
// Scheduling inside a block: a thread runs until it must wait (a barrier or a warp-synchronous
// call whose partners have not all arrived) or exits. Then the same fiber picks the next thread
// and jumps straight to it (no trip through a scheduler context). When a thread exits, the
// next thread that has not started yet runs on the same fiber and stack, inline: a kernel
// without barriers costs about what a loop over its threads costs.
//
// Which thread runs next: threads released by a completed barrier or warp call (a FIFO, in
// thread order, each warp's released lanes one entry) before threads that have not started
// (in thread order). A converged warp call so costs each lane its deposit, a bit scan for the
// next lane and one switch; the lane that completes the call queues the whole warp at once.
// Under
// CUCC_SCHEDULE=random the pick is uniform over all runnable threads and the start order is
// shuffled, so a missing __syncthreads/__syncwarp changes the result.
//
// Thread loops: a kernel that cucc found free of synchronization (cucc/runtime.h, Thread loops)
// runs as one loop over the block's threads on one fiber stack: one switch per block, none per
// thread, and the same stack size, guard page and overflow message as a thread on the fiber
// path. Under CUCC_SCHEDULE=random the loop takes the threads in the block's shuffled start
// order, which is exactly the order the fiber path runs a kernel that never waits (each thread
// runs to its end before the next starts), so the random schedule exposes the same races. A
// synchronizing call made in a thread loop (through a function cucc could not see) cannot be
// honoured, since the threads before have finished: it ends the process with an error naming
// the kernel and CUCC_THREAD_LOOPS=0, which runs every kernel on the fiber path.
//
// Thread loops at barriers: a kernel whose only synchronization is __syncthreads() statements at
// the top level of its body runs the same way, on one fiber stack, its body called once for the
// block: each stretch of it between barriers (a region) is a loop over the block's threads
// (run_region in cucc/runtime.h), the next region's loop starting when the last thread has
// finished this one, which is what the barrier asks for. No region contains a synchronizing call
// (cucc checks), so on the fiber path too each thread runs its part of a region from one barrier
// to the next without a switch: the fiber path's runs of such a kernel are the sequences of
// regions in which every region runs its threads one after the other, in some order, and the
// region loops run the same sequences. In thread order both take the threads of every region in
// thread order (the fiber path's barrier releases them in thread order), so the results are the
// same bit for bit, races included. Under CUCC_SCHEDULE=random the fiber path starts the threads
// in a shuffled order and picks the released ones uniformly after every barrier, so each region
// runs in a uniformly random order of its own; region_order gives every region's loop a new
// shuffle, drawn from the block's generator the same way: the region form can take every order
// the fiber path can (a race inside a region, threads meeting through shared memory without a
// barrier, shows up the same), and no other. (Which seed gives which order differs between the
// two, as their generators are drawn from in a different sequence.) A synchronizing call made
// inside a region loop through code cucc could not see is an error naming the kernel and
// CUCC_THREAD_LOOPS=0, as in a thread loop.
//
// Deadlock: when no thread is runnable but some have not exited, nothing can ever complete;
// the runtime prints what every group of threads waits on and exits with code 1.
//
// Warp-synchronous calls wait for the non-exited lanes of their mask, as the PTX ISA words it
// for shfl.sync, vote.sync, match.sync and bar.warp.sync on sm_70+ ("wait until all non-exited
// threads corresponding to membermask have executed" it): a lane that has exited, or does not
// exist in a partial last warp, is not waited for. A value read from such a lane is undefined
// in CUDA; here a shuffle then returns the caller's own value and a vote counts the lane as
// absent (see warp_exchange in cucc/runtime.h). A lane named in the mask that waits somewhere
// else is a deadlock, reported as above. A lane of the mask that was running when the call
// opened, went past it (a loop it ran fewer times, a branch it skipped) and exited without
// making it leaves the result undefined in CUDA: an error naming the kernel, block, warp and
// lanes (see report_skipped_call).
//
// Convergence: __activemask() (and so cooperative_groups::coalesced_threads()) returns the lanes
// of the warp that are at the same __activemask call site together. A lane calling it waits
// until every other live lane of its warp is waiting somewhere (a barrier, a warp call, an
// __activemask) or has exited; then the lanes at each call site (file and line) get the mask of
// that group. Lanes that took different branches reach different sites and get their own
// masks, as a GPU executes the two sides of a divergent branch one after the other. A helper
// function called from two divergent branches is one site here (its file and line), so both
// groups get the mask of the union; pass the caller's site through (cooperative_groups does)
// to tell them apart.
//
// A failed assert() in device code traps the grid with cudaErrorAssert, as on a GPU: this file
// defines glibc's __assert_fail, which the program's assert() calls; outside a kernel it prints
// glibc's message and aborts, as glibc's own does.
#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "internal.h"

__thread uint3 threadIdx;
__thread uint3 blockIdx;
__thread uint3 blockDim;
__thread uint3 gridDim;

namespace cucc {
namespace {

// A suspended fiber: its saved stack pointer.
using FiberContext = void*;

// switch_fiber(save, to): stores the running fiber's resumption point in *save (unless save is
// null: the fiber is abandoned) and resumes the fiber saved at `to`; returns when some fiber
// switches back to *save. new_fiber(top, size, entry): a fiber on the stack [top - size, top)
// whose first resumption calls entry(), which must never return.
// On x86-64 the switch is ours, written inline where it is used: it pushes the address to resume
// at, swaps stack pointers and jumps to the other fiber's resumption address, telling the compiler
// that every register is clobbered, so the function around it keeps only the values it still
// needs, in its own frame, instead of a call that saves all six callee-saved registers again.
// The jump's target is the same instruction for every fiber suspended at the same place, so the
// CPU predicts it, and no call or return is involved, so the return predictor stays right.
// boost.context's jump_fcontext, used before, also saved and restored the SSE and x87 control
// words (microcoded loads) and resumed with an indirect jump after a call, which left the return
// predictor one entry off: every return after a switch was mispredicted. 32 fibers passing
// control round-robin took 2.9 ns per switch with a plain push/pop/ret switch against
// jump_fcontext's 14.5 ns; inlined, a shuffle of runtime_speed.cu takes 20 ns per lane instead
// of 22. Kernels never change the floating-point environment (CUDA device code has no way to),
// so the control words need no saving. Elsewhere, boost.context's fcontext does the same.
#if defined(__x86_64__)
// A new fiber's first resumption lands here, with entry() on top of its stack.
extern "C" void cucc_fiber_start();
asm(R"(
    .text
    .globl cucc_fiber_start
    .hidden cucc_fiber_start
    .type cucc_fiber_start, @function
cucc_fiber_start:
    .cfi_startproc
    .cfi_undefined rip
    popq %rax
    callq *%rax
    ud2
    .cfi_endproc
    .size cucc_fiber_start, .-cucc_fiber_start
)");

// Steps over the caller's red zone (the 128 bytes below the stack pointer that the ABI lets
// leaf code use without moving it), saves rbp (which the compiler may not be told is clobbered),
// and leaves the resumption address (label 1) on top of the stack it leaves.
__attribute__((always_inline)) inline void switch_fiber(FiberContext* save, FiberContext to) {
    asm volatile(
        "leaq -128(%%rsp), %%rsp\n\t"
        "pushq %%rbp\n\t"
        "leaq 1f(%%rip), %%rax\n\t"
        "pushq %%rax\n\t"
        "testq %%rdi, %%rdi\n\t"
        "jz 2f\n\t"
        "movq %%rsp, (%%rdi)\n\t"
        "2:\n\t"
        "movq %%rsi, %%rsp\n\t"
        "popq %%rax\n\t"
        "jmpq *%%rax\n\t"
        "1:\n\t"
        "popq %%rbp\n\t"
        "leaq 128(%%rsp), %%rsp\n\t"
        : "+D"(save), "+S"(to)
        :
        : "rax", "rbx", "rcx", "rdx", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
          "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
          "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "st", "st(1)", "st(2)",
          "st(3)", "st(4)", "st(5)", "st(6)", "st(7)");
}

// The new stack holds the resumption address cucc_fiber_start and entry, above which the stack
// pointer is 16-byte aligned, as the ABI wants it before cucc_fiber_start's call.
FiberContext new_fiber(char* top, size_t size, void (*entry)()) {
    (void)size;
    void** frame = (void**)(((uintptr_t)top & ~(uintptr_t)15) - 32);
    frame[0] = (void*)cucc_fiber_start;
    frame[1] = (void*)entry;
    return frame;
}
#else
}  // namespace
}  // namespace cucc
#include <boost/context/detail/fcontext.hpp>
namespace cucc {
namespace {
using boost::context::detail::fcontext_t;
using boost::context::detail::transfer_t;

void note_switch(transfer_t t) {
    if (t.data) *(FiberContext*)t.data = t.fctx;
}

inline void switch_fiber(FiberContext* save, FiberContext to) {
    note_switch(boost::context::detail::jump_fcontext((fcontext_t)to, save));
}

// The entry of the fiber being started, read by its first instructions (new_fiber is always
// followed at once by the switch to it, on the same OS thread).
thread_local void (*starting_entry)();

void boost_fiber_start(transfer_t t) {
    note_switch(t);
    starting_entry();
}

FiberContext new_fiber(char* top, size_t size, void (*entry)()) {
    starting_entry = entry;
    return boost::context::detail::make_fcontext(top, size, boost_fiber_start);
}
#endif

// Largest value one lane can pass through warp_exchange (a double4 / 4 x uint64).
constexpr size_t kMaxExchangeBytes = 32;
constexpr int kMaxWarps = kMaxThreadsPerBlock / 32;

// One warp-synchronous call (a shuffle, vote or __syncwarp) of a set of lanes. Lanes deposit
// their value at data + lane*bytes; when every lane in mask has arrived, all of them continue
// and read the others' values here.
// A converged call (its mask names every live lane of the warp and no other call of the warp
// is open) uses one of the warp's own two records, in turn, with no allocation or reference
// count: the record used by call k is next used by call k+2, which opens only after call k+1
// has completed, and every live lane arrived at k+1 after reading what k gave it. Other calls
// (lanes that are actually divergent, or masks of part of a warp) take a record from a pool,
// recycled once every participant has made its next warp-synchronous call (or exited), which
// is when the contract lets the pointer die.
struct Exchange {
    unsigned mask;      // lanes taking part (as passed by every participant)
    unsigned arrived;   // lanes that have deposited
    unsigned expected;  // lanes of mask that had started and not exited when the call opened
    unsigned bytes;
    WarpCombine combine;  // run on the slots once every lane has arrived (null: none)
    const void* combine_context;
    int refs;    // pooled records: participants still waiting in it or allowed to read it
    bool owned;  // one of a warp's own two records (never pooled)
    Exchange* next_free;
    alignas(64) unsigned char data[32 * kMaxExchangeBytes];
};

// One collective of a tile larger than a warp (thread_block_tile<64> and up): the non-exited
// threads first..first+count-1 of the block deposit a value each, as in an Exchange.
struct GroupCall {
    unsigned first, count, bytes;
    unsigned arrived_count;
    uint32_t arrived[kMaxThreadsPerBlock / 32];  // bit t % 32 of word t / 32: thread first + t
    int refs;
    GroupCall* next_free;
    alignas(64) unsigned char data[kMaxThreadsPerBlock * kMaxExchangeBytes];
};

// Records recycled through a free list (warp calls, group calls).
template <class T>
struct RecordPool {
    std::vector<std::unique_ptr<T>> all;
    T* free_list = nullptr;
    T* take() {
        if (!free_list) {
            all.push_back(std::make_unique<T>());
            all.back()->next_free = nullptr;
            free_list = all.back().get();
        }
        T* r = free_list;
        free_list = r->next_free;
        return r;
    }
    void give(T* r) {
        r->next_free = free_list;
        free_list = r;
    }
    void reclaim_all() {
        free_list = nullptr;
        for (auto& r : all) give(r.get());
    }
};

// A thread's record is only written once it starts (threads not started yet have no state).
// A thread released from a wait keeps the state of its wait until it runs again.
enum class State : uint8_t { Running, AtBarrier, InWarpCall, InGroupCall, AtActiveMask, Exited };

struct Thread {
    FiberContext ctx;  // saved context while suspended
    char* stack;     // fiber stack it runs on (set when it starts)
    State state;
    // At a barrier: its call site, its predicate, and the results written at completion.
    const char* file;
    int line;
    int predicate;
    int count_result;      // threads whose predicate was non-zero
    int all_result;        // 1 if that is every thread that arrived
    Exchange* exchange;    // warp call it waits in, or the last one whose data it may still read
    GroupCall* group;      // the same for tile collectives
    bool holds_pooled;     // exchange or group is a pooled record it holds a reference to
    unsigned active_mask;  // __activemask's result, written when its group is released
    uint64_t grid_syncs;   // this_grid().sync() calls it has passed
};

struct Warp {
    Exchange* open[32];  // warp calls some lanes wait in (different masks may be open at once)
    int open_count;
    Exchange own[2];  // the records of converged calls, used in turn
    int own_next;
    unsigned live;     // lanes that exist and have not exited
    unsigned started;  // lanes that have started running
    unsigned blocked;  // live lanes waiting (barrier, warp call, __activemask)
    unsigned at_mask;  // lanes waiting in __activemask
};

struct Worker;

// Lanes of one warp that are runnable (an entry of Block::ring).
struct RunnableLanes {
    unsigned warp;
    unsigned lanes;
};

struct Block {
    const Grid* grid;
    Worker* worker;  // the OS thread's pools (saves a thread_local lookup on hot paths)
    uint3 idx;
    dim3 dim;     // blockDim
    bool flat;    // dim.y == dim.z == 1: threadIdx.x is the linear index
    bool random;  // CUCC_SCHEDULE=random
    bool thread_loop;  // runs grid->thread_loop instead of a fiber per thread
    int nthreads;
    int exited;
    int current;  // linear index of the running thread
    Thread threads[kMaxThreadsPerBlock];
    Warp warps[kMaxWarps];
    std::vector<GroupCall*> open_groups;  // tile collectives some threads wait in
    // Runnable threads: a FIFO ring of released threads, then the not-yet-started ones:
    // next_start..nthreads-1, or start_order[next_start..] under CUCC_SCHEDULE=random.
    // An entry of the ring is some lanes of one warp, which run in lane order: a completed warp
    // call or barrier queues a warp's lanes as one entry, and taking the next thread is a bit
    // scan. Under CUCC_SCHEDULE=random every entry is one thread, so a uniform pick over the
    // entries is a uniform pick over the threads.
    RunnableLanes ring[kMaxThreadsPerBlock];
    unsigned ring_head;  // unsigned, so that % kMaxThreadsPerBlock (on every switch) is a mask
    int ring_count;      // entries
    int start_order[kMaxThreadsPerBlock];
    int next_start;
    bool starting;  // set by pick_next: the thread picked has not started yet
    // The barrier being filled: the site of its first arrival, arrivals there, predicate sum.
    const char* barrier_file;
    int barrier_line;
    int barrier_arrived;
    int barrier_count;
    FiberContext main_ctx;  // the OS thread's own context, resumed when the block ends
    bool trapped;
    cudaError_t trap_error;
    uint64_t rng;
    uint64_t grid_syncs_done;  // this_grid().sync() rounds this block has completed
};

thread_local Block* tls_block;  // the block this OS thread is running, or null

// What an OS thread keeps between the blocks it runs.
struct Worker {
    Block block{};
    std::vector<char*> all_stacks, free_stacks;  // base of each mapping (guard page first)
    size_t stack_bytes = 0, page = 0;
    unsigned char* smem = nullptr;  // dynamic shared memory of the running block
    size_t smem_capacity = 0;
    RecordPool<Exchange> exchanges;
    RecordPool<GroupCall> groups;
    void* region_storage = nullptr;  // the per-thread variables of regions (region_storage)
    size_t region_capacity = 0;

    ~Worker() {
        // exit() called inside a kernel runs this on one of these stacks: leave them mapped.
        if (tls_block) return;
        for (char* s : all_stacks) munmap(s, stack_bytes + 2 * page);
        free(smem);
        free(region_storage);
    }
};

thread_local std::unique_ptr<Worker> tls_worker;

// Stack overflow: a fiber that runs into its guard page gets SIGSEGV. The handler (on an
// alternate signal stack, since the fiber's stack is full) reports it in words; any other
// fault goes on to the handler installed before ours (AddressSanitizer's), or, where that is the
// default one, is reported in words too when it happens in a kernel: an access to memory that
// is not mapped at all (past the end of an allocation, a null or stale pointer), where a GPU
// stops the kernel with cudaErrorIllegalAddress.
struct sigaction previous_segv;

[[noreturn]] void report_fault(const char* what, const char* advice) {
    char msg[768];
    int n = snprintf(msg, sizeof msg,
                     "cucc: %s in kernel %s (block (%u,%u,%u), thread (%u,%u,%u)): %s\n", what,
                     tls_block->grid->name, tls_block->idx.x, tls_block->idx.y, tls_block->idx.z,
                     threadIdx.x, threadIdx.y, threadIdx.z, advice);
    if (write(2, msg, n > 0 ? (size_t)n : 0) < 0) _exit(1);
    _exit(1);
}

void on_segv(int sig, siginfo_t* info, void* context) {
    Worker* w = tls_worker.get();
    uintptr_t addr = (uintptr_t)info->si_addr;
    if (w && tls_block) {
        for (char* s : w->all_stacks) {
            if (addr >= (uintptr_t)s && addr < (uintptr_t)s + w->page) {
                char advice[128];
                snprintf(advice, sizeof advice,
                         "each CUDA thread has a %zu KiB stack; raise CUCC_STACK_KB",
                         w->stack_bytes / 1024);
                report_fault("stack overflow", advice);
            }
        }
    }
    if (previous_segv.sa_flags & SA_SIGINFO) {
        previous_segv.sa_sigaction(sig, info, context);
    } else if (previous_segv.sa_handler != SIG_DFL && previous_segv.sa_handler != SIG_IGN) {
        previous_segv.sa_handler(sig);
    } else if (w && tls_block) {
        char what[96];
        snprintf(what, sizeof what, "illegal memory access at address 0x%llx",
                 (unsigned long long)addr);
        report_fault(what,
                     "no memory is mapped there (a GPU stops the kernel with "
                     "cudaErrorIllegalAddress); build with cucc --asan to see the access and "
                     "the allocation it missed");
    } else {
        signal(SIGSEGV, SIG_DFL);  // returning re-runs the faulting access, which now kills us
    }
}

// Once per process: install the handler. Once per OS thread: give it an alternate stack.
void install_overflow_handler() {
    static bool installed = [] {
        struct sigaction sa = {};
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGSEGV, &sa, &previous_segv) != 0) fatal("cannot install a SIGSEGV handler");
        return true;
    }();
    (void)installed;
    stack_t ss = {};
    if (sigaltstack(nullptr, &ss) == 0 && !(ss.ss_flags & SS_DISABLE)) return;  // has one
    ss.ss_size = 64 * 1024;
    ss.ss_flags = 0;
    ss.ss_sp =
        mmap(nullptr, ss.ss_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ss.ss_sp == MAP_FAILED || sigaltstack(&ss, nullptr) != 0)
        fatal("cannot set up a signal stack");
}

uint64_t splitmix64(uint64_t& state) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

Block& current_block(const char* what) {
    Block* b = tls_block;
    if (!b) fatal("%s called outside a kernel", what);
    return *b;
}

// A call that waits for other threads made in a thread loop, which cannot honour it.
[[noreturn]] __attribute__((noinline, cold)) void report_wait_in_thread_loop(const Block& b,
                                                                            const char* what) {
    fatal(
        "kernel %s, block (%u,%u,%u), thread (%u,%u,%u) calls %s, but cucc found %s in the "
        "kernel and runs it as %s, so the threads before this one have already finished (the "
        "call is in code cucc could not see: a device function of another file, or called "
        "through a pointer); run with CUCC_THREAD_LOOPS=0 to give every thread a fiber",
        b.grid->name, b.idx.x, b.idx.y, b.idx.z, threadIdx.x, threadIdx.y, threadIdx.z, what,
        b.grid->regions ? "no synchronizing call besides top-level __syncthreads() statements"
                        : "no synchronizing call",
        b.grid->regions ? "loops over its threads between those barriers"
                        : "a loop over its threads");
}

// The block of a call that waits for other threads (a barrier, a warp or tile collective,
// __activemask). Inline: it is on the path of every shuffle.
inline Block& waiting_block(const char* what) {
    Block& b = current_block(what);
    if (__builtin_expect(b.thread_loop, 0)) report_wait_in_thread_loop(b, what);
    return b;
}

// Stacks with a guard page, process-wide. Each costs the kernel two memory mappings; past a
// quarter of vm.max_map_count (8k stacks by default), stacks come without one, so that a
// cooperative grid of thousands of co-resident blocks (blocks per SM x 132 SMs, each block on
// its own OS thread with all its threads suspended at this_grid().sync()) still fits.
std::atomic<size_t> guarded_stacks{0};

size_t guard_budget() {
    static const size_t budget = [] {
        size_t max_maps = 65530;
        if (FILE* f = fopen("/proc/sys/vm/max_map_count", "r")) {
            if (fscanf(f, "%zu", &max_maps) != 1) max_maps = 65530;
            fclose(f);
        }
        return max_maps / 4 / 2;
    }();
    return budget;
}

char* take_stack(Worker& w) {
    if (!w.free_stacks.empty()) {
        char* s = w.free_stacks.back();
        w.free_stacks.pop_back();
        return s;
    }
    size_t total = w.stack_bytes + 2 * w.page;  // guard page, stack, room for the skew
    void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fatal("cannot map a %zu-byte fiber stack", total);
    // Guard page at the low end: a stack overflow faults instead of corrupting a neighbour.
    if (guarded_stacks.fetch_add(1) < guard_budget() && mprotect(p, w.page, PROT_NONE) != 0)
        fatal("cannot protect a fiber stack guard page");
    w.all_stacks.push_back((char*)p);
    return (char*)p;
}

// Gives up the thread's reference to the pooled warp or tile call it read last, if any.
inline void release_exchange(Worker& w, Thread& t) {
    if (__builtin_expect(!t.holds_pooled, 1)) return;
    t.holds_pooled = false;
    Exchange* e = t.exchange;
    t.exchange = nullptr;
    if (e && !e->owned && --e->refs == 0) w.exchanges.give(e);
    GroupCall* g = t.group;
    t.group = nullptr;
    if (g && --g->refs == 0) w.groups.give(g);
}

// Sets the built-in threadIdx of thread i (blockIdx/blockDim/gridDim are set per block).
inline void set_thread_idx(const Block& b, int i) {
    if (b.flat) {
        threadIdx = uint3{(unsigned)i, 0, 0};
    } else {
        const dim3& d = b.dim;
        unsigned u = (unsigned)i;
        threadIdx = uint3{u % d.x, (u / d.x) % d.y, u / (d.x * d.y)};
    }
}

// Queues the given lanes of a warp (waiting, none of them queued yet) to run, in lane order,
// after the threads queued before. Their state says what they waited on until they run (see
// describe_wait: nothing reads it before they run again).
inline void make_lanes_runnable(Block& b, unsigned warp, unsigned lanes) {
    b.warps[warp].blocked &= ~lanes;
    if (__builtin_expect(!b.random, 1)) {
        b.ring[(b.ring_head + b.ring_count++) % kMaxThreadsPerBlock] = {warp, lanes};
        return;
    }
    for (; lanes; lanes &= lanes - 1)
        b.ring[(b.ring_head + b.ring_count++) % kMaxThreadsPerBlock] = {warp, lanes & -lanes};
}

void make_runnable(Block& b, int i) { make_lanes_runnable(b, (unsigned)i / 32, 1u << (i % 32)); }

// Thread t will be resumed after the next switch: fetch the top of its stack (the registers the
// switch pops and the frames it returns through) into the cache now, while the thread picked
// before it runs. Suspended threads are many (a block's every thread waits at a barrier), their
// stacks fall out of the L1 cache, and without this every resumption waits for its stack.
inline void prefetch_context(const Thread& t) {
    const char* top = static_cast<const char*>(t.ctx);
    for (int line = 0; line < 4; line++) __builtin_prefetch(top + 64 * line);
}

// Takes the first thread of the ring's front entry (the ring is not empty).
__attribute__((always_inline)) inline int take_front(Block& b) {
    RunnableLanes& front = b.ring[b.ring_head];
    int i = (int)(32 * front.warp + __builtin_ctz(front.lanes));
    front.lanes &= front.lanes - 1;
    const RunnableLanes* after = &front;
    if (!front.lanes) {
        b.ring_head = (b.ring_head + 1) % kMaxThreadsPerBlock;
        after = --b.ring_count > 0 ? &b.ring[b.ring_head] : nullptr;
    }
    if (after) prefetch_context(b.threads[32 * after->warp + __builtin_ctz(after->lanes)]);
    return i;
}

// pick_next under CUCC_SCHEDULE=random: uniform over the runnable threads and the next one to
// start.
int pick_random(Block& b) {
    int unstarted = b.nthreads - b.next_start;
    int choices = b.ring_count + (unstarted > 0 ? 1 : 0);
    if (choices == 0) return -1;
    int r = (int)(splitmix64(b.rng) % (uint64_t)choices);
    if (r == b.ring_count) {
        b.starting = true;
        return b.start_order[b.next_start++];
    }
    // Swap the chosen entry (one thread) to the front of the ring, then take the front.
    int front = b.ring_head, pos = (b.ring_head + r) % kMaxThreadsPerBlock;
    std::swap(b.ring[front], b.ring[pos]);
    return take_front(b);
}

// The next thread to run, or -1 if none is runnable; sets b.starting.
__attribute__((always_inline)) inline int pick_next(Block& b) {
    b.starting = false;
    if (__builtin_expect(b.random, 0)) return pick_random(b);
    if (b.ring_count > 0) return take_front(b);
    if (b.next_start == b.nthreads) return -1;
    b.starting = true;
    return b.next_start++;
}

// Thread i starts running (on `stack`).
inline void start_thread(Block& b, int i, char* stack) {
    Thread& t = b.threads[i];
    t.state = State::Running;
    t.exchange = nullptr;
    t.group = nullptr;
    t.holds_pooled = false;
    t.grid_syncs = 0;
    t.stack = stack;
    b.current = i;
    b.warps[i / 32].started |= 1u << (i % 32);
    set_thread_idx(b, i);
}

// What thread i is doing, in words, for the deadlock report: the verb's singular and plural
// forms (for "thread 3 waits ..." and "threads 0-2 wait ...") and the rest of the phrase.
struct WaitDescription {
    const char* singular;
    const char* plural;
    std::string rest;
    bool operator==(const WaitDescription& o) const {
        return singular == o.singular && rest == o.rest;
    }
};

WaitDescription describe_wait(const Block& b, int i) {
    const Thread& t = b.threads[i];
    char buf[256];
    switch (t.state) {
        case State::Exited:
            return {"has", "have", "exited"};
        case State::AtBarrier:
            snprintf(buf, sizeof buf, "at __syncthreads (%s:%d)", t.file, t.line);
            return {"waits", "wait", buf};
        case State::InWarpCall: {
            const Exchange* e = t.exchange;
            unsigned missing = e->mask & b.warps[i / 32].live & ~e->arrived;
            snprintf(buf, sizeof buf,
                     "in a warp-synchronous call of warp %d with mask 0x%08x for lanes 0x%08x",
                     i / 32, e->mask, missing);
            return {"waits", "wait", buf};
        }
        case State::InGroupCall: {
            const GroupCall* g = t.group;
            snprintf(buf, sizeof buf,
                     "in a collective of the %u-thread tile of threads %u-%u (%u of them arrived)",
                     g->count, g->first, g->first + g->count - 1, g->arrived_count);
            return {"waits", "wait", buf};
        }
        case State::AtActiveMask:
            snprintf(buf, sizeof buf, "at __activemask (%s:%d)", t.file, t.line);
            return {"waits", "wait", buf};
        default:
            return {"is", "are", "still runnable"};
    }
}

// Groups consecutive threads doing the same thing: "threads 0-15 wait at __syncthreads
// (a.cu:10); thread 16 waits at __syncthreads (a.cu:12); threads 17-31 have exited".
[[noreturn]] void report_deadlock(const Block& b) {
    std::string msg;
    int start = 0;
    WaitDescription what = describe_wait(b, 0);
    for (int i = 1; i <= b.nthreads; i++) {
        WaitDescription next = i < b.nthreads ? describe_wait(b, i) : WaitDescription{};
        if (i < b.nthreads && next == what) continue;
        char range[64];
        if (i - 1 == start) snprintf(range, sizeof range, "thread %d %s ", start, what.singular);
        else snprintf(range, sizeof range, "threads %d-%d %s ", start, i - 1, what.plural);
        msg += (msg.empty() ? "" : "; ") + std::string(range) + what.rest;
        start = i;
        what = next;
    }
    fatal("deadlock in kernel %s (block (%u,%u,%u)): %s", b.grid->name, b.idx.x, b.idx.y, b.idx.z,
          msg.c_str());
}

void fiber_main();

// Makes thread `next` the running one and switches to it; `save` receives the context being
// left (null when that context is abandoned). Returns when someone switches back.
// Inlined, as is wait_here: fewer call levels between a kernel and the switch make shuffles and
// barriers measurably cheaper.
__attribute__((always_inline)) inline void switch_to(Block& b, int next, FiberContext* save) {
    if (b.starting) {
        Worker& w = *b.worker;
        char* stack = take_stack(w);
        start_thread(b, next, stack);
        // Stack tops are staggered by 128 bytes per thread (the spare page above each stack
        // leaves at least stack_bytes): aligned alike, the frames of the suspended threads
        // would all fall into the same few L1 cache sets.
        size_t top = 2 * w.page + w.stack_bytes - (size_t)(next % 32) * 128;
        switch_fiber(save, new_fiber(stack + top, top - w.page, fiber_main));
    } else {
        Thread& n = b.threads[next];
        n.state = State::Running;
        b.current = next;
        set_thread_idx(b, next);
        switch_fiber(save, n.ctx);
    }
}

// The running thread must wait: run others until it is runnable again and picked.
__attribute__((always_inline)) inline void wait_here(Block& b) {
    int self = b.current;
    int next = pick_next(b);
    if (next < 0) report_deadlock(b);
    if (next == self) {
        b.threads[self].state = State::Running;
        return;
    }
    switch_to(b, next, &b.threads[self].ctx);
}

// Releases the threads at the barrier being filled, each warp's as one entry of the ring.
void release_barrier(Block& b) {
    for (int warp = 0; warp < (b.nthreads + 31) / 32; warp++) {
        unsigned released = 0;
        for (int lane = 0; lane < 32 && 32 * warp + lane < b.nthreads; lane++) {
            Thread& t = b.threads[32 * warp + lane];
            if (t.state != State::AtBarrier || t.line != b.barrier_line ||
                (t.file != b.barrier_file && strcmp(t.file, b.barrier_file) != 0))
                continue;
            t.count_result = b.barrier_count;
            t.all_result = b.barrier_count == b.barrier_arrived;
            released |= 1u << lane;
        }
        if (released) make_lanes_runnable(b, (unsigned)warp, released);
    }
    b.barrier_arrived = 0;
}

// Inline: it runs on every arrival at a barrier.
inline void check_barrier(Block& b) {
    if (b.barrier_arrived != 0 && b.barrier_arrived + b.exited >= b.nthreads) release_barrier(b);
}

// Releases the lanes of a warp call whose non-exited lanes have all arrived.
inline void finish_exchange(Block& b, Warp& w, int warp, Exchange* e) {
    int k = 0;
    while (w.open[k] != e) k++;
    w.open[k] = w.open[--w.open_count];
    make_lanes_runnable(b, warp, e->arrived);
}

// "a, b-c, d": the lanes of a mask, for messages.
std::string lane_list(unsigned mask) {
    std::string out;
    for (int lane = 0; lane < 32; lane++) {
        if (!(mask >> lane & 1u)) continue;
        int last = lane;
        while (last < 31 && (mask >> (last + 1) & 1u)) last++;
        out += (out.empty() ? "" : ", ") + std::to_string(lane) +
               (last > lane ? "-" + std::to_string(last) : "");
        lane = last;
    }
    return out;
}

// A warp call completed without lanes of its mask that were running when it opened and exited
// since without making it: they went past the call (a loop they ran fewer times, a branch they
// skipped) while the others waited in it. CUDA leaves that undefined: "Each calling thread must
// have its own bit set in the mask and all non-exited threads named in mask must execute the
// same intrinsic with the same mask, or the result is undefined" (CUDA C++ Programming Guide,
// Warp Shuffle Functions; the same for __syncwarp, votes, __match and __reduce), and what a
// lane reads from a lane that did not execute the instruction is unpredictable (PTX ISA,
// shfl.sync: "Value of SourceA[lane] is unpredictable for inactive/predicated-off threads in
// warp"). A GPU gives some value; no value here would be that one, so it is an error. Lanes that
// exited before the call opened (an early return, the missing lanes of a partial warp) are not
// waited for and are no error, as the PTX ISA's .sync instructions specify ("wait until all
// non-exited threads corresponding to membermask have executed" it); reading from them gives
// the caller's own value. Which of the two a lane did is told by when it ran: one that had not
// started when the call opened counts as having exited before it (code that skips a collective
// in its lanes' first steps is not caught), one that had started counts as having gone past it
// (so a lane returning right after an earlier collective while the others go on to a full-mask
// one is reported, although CUDA allows that).
[[noreturn]] void report_skipped_call(const Block& b, int warp, const Exchange* e) {
    fatal(
        "kernel %s, block (%u,%u,%u), warp %d: lanes %s wait in a warp-synchronous call (a "
        "shuffle, vote, match, reduce or __syncwarp with mask 0x%08x) that lanes %s of the mask "
        "went past and then exited without making; CUDA leaves the result undefined (all "
        "non-exited threads named in the mask must execute the same intrinsic with the same "
        "mask: CUDA C++ Programming Guide, Warp Shuffle Functions)",
        b.grid->name, b.idx.x, b.idx.y, b.idx.z, warp, lane_list(e->arrived).c_str(), e->mask,
        lane_list(e->expected & ~e->arrived).c_str());
}

// Releases the lanes of a warp call once every non-exited lane of its mask has arrived. Inline:
// the test runs on every arrival.
inline bool complete_exchange(Block& b, Warp& w, int warp, Exchange* e) {
    if (e->mask & w.live & ~e->arrived) return false;
    if (e->expected & ~e->arrived) report_skipped_call(b, warp, e);
    if (e->combine) e->combine(e->data, e->arrived, e->combine_context);
    finish_exchange(b, w, warp, e);
    return true;
}

// Releases a tile collective once every non-exited thread of its range has arrived.
bool complete_group(Block& b, GroupCall* g) {
    for (unsigned t = 0; t < g->count; t += 32) {
        unsigned thread = g->first + t;             // tiles larger than a warp are whole warps
        if (thread >= (unsigned)b.nthreads) break;  // the block ends inside the tile
        if (b.warps[thread / 32].live & ~g->arrived[t / 32]) return false;
    }
    b.open_groups.erase(std::find(b.open_groups.begin(), b.open_groups.end(), g));
    for (unsigned t = 0; t < g->count; t++)
        if (g->arrived[t / 32] >> (t % 32) & 1u) make_runnable(b, (int)(g->first + t));
    return true;
}

// Once every live lane of the warp waits or has exited, the lanes waiting in __activemask get
// the mask of the lanes at their call site.
void converge(Block& b, int warp) {
    Warp& w = b.warps[warp];
    unsigned left = w.at_mask;
    while (left) {
        const Thread& first = b.threads[32 * warp + __builtin_ctz(left)];
        unsigned group = 0;
        for (unsigned m = left; m; m &= m - 1) {
            const Thread& t = b.threads[32 * warp + __builtin_ctz(m)];
            if (t.line == first.line && (t.file == first.file || strcmp(t.file, first.file) == 0))
                group |= m & -m;
        }
        for (unsigned m = group; m; m &= m - 1) {
            int i = 32 * warp + __builtin_ctz(m);
            b.threads[i].active_mask = group;
            make_runnable(b, i);
        }
        left &= ~group;
    }
    w.at_mask = 0;
}

// Inline: on every warp call, where mostly no lane waits in __activemask.
inline void check_convergence(Block& b, int warp) {
    const Warp& w = b.warps[warp];
    if (w.at_mask && !(w.live & ~w.blocked)) converge(b, warp);
}

// Thread i stops to wait (state `how`); its warp may now be able to converge.
void block_thread(Block& b, unsigned i, State how) {
    b.threads[i].state = how;
    b.warps[i / 32].blocked |= 1u << (i % 32);
}

void thread_exited(Block& b, int i) {
    Thread& t = b.threads[i];
    t.state = State::Exited;
    b.exited++;
    release_exchange(*b.worker, t);
    int warp = i / 32;
    Warp& w = b.warps[warp];
    w.live &= ~(1u << (i % 32));
    // Warp calls that waited only for this lane complete without it.
    for (int k = w.open_count - 1; k >= 0; k--)
        if (k < w.open_count) complete_exchange(b, w, warp, w.open[k]);
    if (!b.open_groups.empty()) {
        std::vector<GroupCall*> open = b.open_groups;
        for (GroupCall* g : open)
            if (i >= (int)g->first && i < (int)(g->first + g->count)) complete_group(b, g);
    }
    check_convergence(b, warp);
    check_barrier(b);
}

// Entry of every fiber: runs threads until one must wait (the fiber is then suspended with it)
// or until a thread exits and the next pick is a suspended thread (the fiber is abandoned and
// its stack returned to the pool).
void fiber_main() {
    Block& b = *tls_block;
    char* stack = b.threads[b.current].stack;
    for (;;) {
        b.grid->body();
        thread_exited(b, b.current);
        int next = pick_next(b);
        if (b.starting) {
            start_thread(b, next, stack);  // inline on this stack: no switch at all
            continue;
        }
        if (next < 0 && b.exited < b.nthreads) report_deadlock(b);
        // The stack goes back to the pool before we leave it; nothing uses it until we have.
        b.worker->free_stacks.push_back(stack);
        if (next < 0) switch_fiber(nullptr, b.main_ctx);
        switch_to(b, next, nullptr);
    }
}

// Entry of the one fiber of a thread-loop block: every thread in turn, then back to run_block.
void thread_loop_main() {
    Block& b = *tls_block;
    b.grid->thread_loop(b.random ? b.start_order : nullptr);
    switch_fiber(nullptr, b.main_ctx);
}

int barrier(int predicate, const char* file, int line, const char* what) {
    Block& b = waiting_block(what);
    Thread& t = b.threads[b.current];
    block_thread(b, b.current, State::AtBarrier);
    t.file = file;
    t.line = line;
    t.predicate = predicate != 0;
    if (b.barrier_arrived == 0) {
        b.barrier_file = file;
        b.barrier_line = line;
        b.barrier_count = 0;
    }
    // A thread at another site never completes this barrier; the deadlock report names both.
    if (line == b.barrier_line && (file == b.barrier_file || strcmp(file, b.barrier_file) == 0)) {
        b.barrier_arrived++;
        b.barrier_count += t.predicate;
        check_barrier(b);
    }
    check_convergence(b, b.current / 32);
    wait_here(b);
    return t.count_result;
}

}  // namespace

bool run_block(const Grid& grid, uint3 block_idx, cudaError_t* trap_error) {
    ptx_block_begin(grid);
    if (!tls_worker) {
        tls_worker = std::make_unique<Worker>();
        tls_worker->page = (size_t)sysconf(_SC_PAGESIZE);
        tls_worker->stack_bytes = config().stack_bytes;
        install_overflow_handler();
    }
    Worker& w = *tls_worker;
    Block& b = w.block;
    int n = (int)(grid.block.x * grid.block.y * grid.block.z);
    b.grid = &grid;
    b.worker = &w;
    b.idx = block_idx;
    b.dim = grid.block;
    b.flat = grid.block.y == 1 && grid.block.z == 1;
    b.random = config().random;
    b.nthreads = n;
    b.exited = 0;
    b.ring_head = 0;
    b.ring_count = 0;
    b.next_start = 0;
    b.barrier_arrived = 0;
    b.trapped = false;
    b.grid_syncs_done = 0;
    b.open_groups.clear();
    for (int k = 0; k < (n + 31) / 32; k++) {
        int lanes = n - 32 * k < 32 ? n - 32 * k : 32;
        b.warps[k].open_count = 0;
        b.warps[k].own_next = 0;
        b.warps[k].own[0].owned = b.warps[k].own[1].owned = true;
        b.warps[k].live = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
        b.warps[k].blocked = b.warps[k].at_mask = b.warps[k].started = 0;
    }
    if (config().random) {
        uint64_t linear = block_idx.x + (uint64_t)grid.grid.x *
                                            (block_idx.y + (uint64_t)grid.grid.y * block_idx.z);
        b.rng = config().seed * 0x100000001b3ull ^ (grid.launch_index << 32) ^ linear;
        for (int i = 0; i < n; i++) b.start_order[i] = i;
        for (int i = n - 1; i > 0; i--)
            std::swap(b.start_order[i], b.start_order[splitmix64(b.rng) % (uint64_t)(i + 1)]);
    }
    // Dynamic shared memory: 128-byte aligned, never null. Under CUCC_SCHEDULE=random it is
    // filled with 0xff bytes (NaN as float) so reads before writes show up.
    size_t want = grid.smem > 0 ? grid.smem : 1;
    if (want > w.smem_capacity) {
        free(w.smem);
        w.smem_capacity = (want + 4095) / 4096 * 4096;
        w.smem = (unsigned char*)aligned_alloc(4096, w.smem_capacity);
        if (!w.smem) fatal("cannot allocate %zu bytes of shared memory", w.smem_capacity);
    }
    if (config().random) memset(w.smem, 0xff, grid.smem);

    blockIdx = block_idx;
    blockDim = uint3{grid.block.x, grid.block.y, grid.block.z};
    gridDim = uint3{grid.grid.x, grid.grid.y, grid.grid.z};
    tls_block = &b;
    b.thread_loop = grid.thread_loop && config().thread_loops;
    if (b.thread_loop) {
        char* stack = take_stack(w);
        size_t top = 2 * w.page + w.stack_bytes;
        switch_fiber(&b.main_ctx, new_fiber(stack + top, top - w.page, thread_loop_main));
        if (!b.trapped) w.free_stacks.push_back(stack);
    } else {
        switch_to(b, pick_next(b), &b.main_ctx);
    }
    tls_block = nullptr;
    if (!b.trapped) return true;
    // The block was abandoned midway: every stack and warp record is free again.
    w.free_stacks = w.all_stacks;
    w.exchanges.reclaim_all();
    w.groups.reclaim_all();
    *trap_error = b.trap_error;
    return false;
}

void* dynamic_smem() { return current_block("dynamic shared memory").worker->smem; }

bool running_as_loops() { return current_block("a kernel region").thread_loop; }

const int* region_order() {
    Block& b = current_block("a kernel region");
    if (!b.random) return nullptr;
    for (int i = b.nthreads - 1; i > 0; i--)
        std::swap(b.start_order[i], b.start_order[splitmix64(b.rng) % (uint64_t)(i + 1)]);
    return b.start_order;
}

void* region_storage(size_t bytes) {
    Worker& w = *current_block("a kernel region").worker;
    if (bytes > w.region_capacity) {
        free(w.region_storage);
        w.region_capacity = (bytes + 4095) / 4096 * 4096;
        w.region_storage = aligned_alloc(64, w.region_capacity);
        if (!w.region_storage)
            fatal("cannot allocate %zu bytes for the variables of a kernel's regions",
                  w.region_capacity);
    }
    return w.region_storage;
}

void syncthreads(const char* file, int line) { barrier(1, file, line, "__syncthreads"); }

int syncthreads_count(int predicate, const char* file, int line) {
    return barrier(predicate, file, line, "__syncthreads_count");
}

int syncthreads_and(int predicate, const char* file, int line) {
    barrier(predicate, file, line, "__syncthreads_and");
    Block& b = *tls_block;
    return b.threads[b.current].all_result;
}

int syncthreads_or(int predicate, const char* file, int line) {
    return barrier(predicate, file, line, "__syncthreads_or") != 0;
}

namespace {

// The warp call that a lane joins: the open one with the same mask and size that the lane has
// not joined yet, or a new one (the warp's own record when the call is converged).
Exchange* find_or_open_exchange(Block& b, Warp& w, unsigned mask, size_t bytes, unsigned lane,
                                WarpCombine combine, const void* context) {
    for (int k = 0; k < w.open_count; k++) {
        Exchange* o = w.open[k];
        if (o->mask == mask && o->bytes == bytes && o->combine == combine &&
            o->combine_context == context && !(o->arrived & (1u << lane)))
            return o;
    }
    Exchange* e;
    if (w.open_count == 0 && (mask & w.live) == w.live) {
        e = &w.own[w.own_next];
        w.own_next ^= 1;
    } else {
        e = b.worker->exchanges.take();
        e->owned = false;
    }
    e->mask = mask;
    e->arrived = 0;
    e->expected = mask & w.live & w.started;
    e->bytes = (unsigned)bytes;
    e->combine = combine;
    e->combine_context = context;
    e->refs = 0;
    w.open[w.open_count++] = e;
    return e;
}

[[noreturn]] __attribute__((noinline, cold)) void report_bad_warp_call(const Block& b,
                                                                       unsigned mask,
                                                                       size_t bytes) {
    unsigned i = (unsigned)b.current;
    if (bytes > kMaxExchangeBytes)
        fatal("warp exchange of %zu bytes per lane (at most %zu)", bytes, kMaxExchangeBytes);
    fatal(
        "kernel %s: thread %u calls a warp-synchronous function with mask 0x%08x, which "
        "does not include its own lane %u",
        b.grid->name, i, mask, i % 32);
}

}  // namespace

// The common case, a converged warp whose lanes arrive one after the other at the one open
// call, takes no loop: the lane checks the open call, deposits its value and, unless it is the
// last, switches straight to the next runnable thread (its warp's next lane).
const void* warp_exchange(unsigned mask, const void* value, size_t bytes, unsigned* arrived,
                          WarpCombine combine, const void* context) {
    Block& b = waiting_block("a warp-synchronous function");
    unsigned i = (unsigned)b.current, lane = i % 32, warp = i / 32, bit = 1u << lane;
    Thread& t = b.threads[i];
    Warp& w = b.warps[warp];
    if (__builtin_expect(!(mask & bit) || bytes > kMaxExchangeBytes, 0))
        report_bad_warp_call(b, mask, bytes);
    release_exchange(*b.worker, t);
    Exchange* e = w.open_count == 1 ? w.open[0] : nullptr;
    if (!e || e->mask != mask || e->bytes != bytes || e->combine != combine ||
        e->combine_context != context || (e->arrived & bit))
        e = find_or_open_exchange(b, w, mask, bytes, lane, combine, context);
    // Fixed-size copies for the common sizes compile to one move.
    unsigned char* slot = e->data + lane * bytes;
    if (bytes == 4) memcpy(slot, value, 4);
    else if (bytes == 8) memcpy(slot, value, 8);
    else memcpy(slot, value, bytes);
    e->arrived |= bit;
    if (!e->owned) {
        e->refs++;
        t.holds_pooled = true;
    }
    t.exchange = e;
    block_thread(b, i, State::InWarpCall);
    if (!complete_exchange(b, w, warp, e)) check_convergence(b, warp);
    wait_here(b);
    if (arrived) *arrived = e->arrived;
    return e->data;
}

void syncwarp(unsigned mask) { warp_exchange(mask, nullptr, 0, nullptr, nullptr, nullptr); }

const void* group_exchange(unsigned first, unsigned count, const void* value, size_t bytes,
                           const uint32_t** arrived) {
    Block& b = waiting_block("a thread_block_tile collective");
    int i = b.current;
    Thread& t = b.threads[i];
    if ((unsigned)i < first || (unsigned)i >= first + count || first % 32 || count % 32)
        fatal("kernel %s: thread %d takes part in a collective of threads %u-%u", b.grid->name, i,
              first, first + count - 1);
    if (bytes > kMaxExchangeBytes)
        fatal("tile collective of %zu bytes per thread (at most %zu)", bytes, kMaxExchangeBytes);
    release_exchange(*b.worker, t);
    unsigned rank = (unsigned)i - first;
    GroupCall* g = nullptr;
    for (GroupCall* o : b.open_groups)
        if (o->first == first && o->count == count && o->bytes == bytes &&
            !(o->arrived[rank / 32] >> (rank % 32) & 1u)) {
            g = o;
            break;
        }
    if (!g) {
        g = b.worker->groups.take();
        g->first = first;
        g->count = count;
        g->bytes = (unsigned)bytes;
        g->arrived_count = 0;
        g->refs = 0;
        memset(g->arrived, 0, sizeof g->arrived);
        b.open_groups.push_back(g);
    }
    memcpy(g->data + rank * bytes, value, bytes);
    g->arrived[rank / 32] |= 1u << (rank % 32);
    g->arrived_count++;
    g->refs++;
    t.group = g;
    t.holds_pooled = true;
    block_thread(b, i, State::InGroupCall);
    if (!complete_group(b, g)) check_convergence(b, i / 32);
    wait_here(b);
    if (arrived) *arrived = g->arrived;
    return g->data;
}

unsigned active_mask(const char* file, int line) {
    Block& b = waiting_block("__activemask");
    int i = b.current, warp = i / 32;
    Thread& t = b.threads[i];
    block_thread(b, i, State::AtActiveMask);
    t.file = file;
    t.line = line;
    b.warps[warp].at_mask |= 1u << (i % 32);
    check_convergence(b, warp);
    wait_here(b);
    return t.active_mask;
}

// this_grid().sync() across the blocks of a cooperative grid, each on its own OS thread.
struct GridBarrier {
    std::mutex mutex;
    std::condition_variable released;
    uint64_t blocks = 0;    // blocks of the grid
    uint64_t expected = 0;  // blocks that have not finished
    uint64_t arrived = 0;
    uint64_t generation = 0;
};

std::shared_ptr<GridBarrier> new_grid_barrier(uint64_t nblocks) {
    auto g = std::make_shared<GridBarrier>();
    g->blocks = g->expected = nblocks;
    return g;
}

void reset_grid_barrier(const Grid& grid) {
    std::lock_guard<std::mutex> lock(grid.barrier->mutex);
    grid.barrier->expected = grid.barrier->blocks;
    grid.barrier->arrived = 0;
}

// Under the barrier's mutex: lets the waiting blocks go if every unfinished block is there.
static void release_if_complete(GridBarrier& g) {
    if (g.arrived > 0 && g.arrived >= g.expected) {
        g.arrived = 0;
        g.generation++;
        g.released.notify_all();
    }
}

void grid_block_finished(const Grid& grid) {
    std::lock_guard<std::mutex> lock(grid.barrier->mutex);
    grid.barrier->expected--;
    release_if_complete(*grid.barrier);
}

bool grid_is_cooperative() { return tls_block && tls_block->grid->cooperative; }

bool in_kernel() { return tls_block != nullptr; }

// The block's threads meet at a barrier at the call site; the first of them to go on holds its
// OS thread (and so the whole block) until every block has arrived; then all meet again, so no
// thread of the block runs ahead of the grid.
void grid_sync(const char* file, int line) {
    Block& b = waiting_block("this_grid().sync()");
    if (!b.grid->cooperative)
        fatal(
            "kernel %s calls this_grid().sync() but was not launched cooperatively "
            "(cudaLaunchCooperativeKernel, or the cooperative launch attribute); CUDA makes "
            "that an error",
            b.grid->name);
    barrier(1, file, line, "this_grid().sync()");
    Thread& t = b.threads[b.current];
    if (++t.grid_syncs > b.grid_syncs_done) {
        b.grid_syncs_done++;
        GridBarrier& g = *b.grid->barrier;
        std::unique_lock<std::mutex> lock(g.mutex);
        uint64_t generation = g.generation;
        g.arrived++;
        release_if_complete(g);
        int minutes = 0;
        while (g.generation == generation) {
            if (g.released.wait_for(lock, std::chrono::seconds(60)) == std::cv_status::timeout)
                fprintf(stderr,
                        "cucc: kernel %s, block (%u,%u,%u) has waited %d min at "
                        "this_grid().sync() (%s:%d): %llu of %llu blocks arrived\n",
                        b.grid->name, b.idx.x, b.idx.y, b.idx.z, ++minutes, file, line,
                        (unsigned long long)g.arrived, (unsigned long long)g.expected);
        }
    }
    barrier(1, file, line, "this_grid().sync()");
}

void trap(cudaError_t error, const char* message) {
    Block* b = tls_block;
    if (!b) fatal("trap outside a kernel: %s", message);
    fprintf(stderr, "cucc: kernel %s, block (%u,%u,%u), thread (%u,%u,%u): %s\n", b->grid->name,
            b->idx.x, b->idx.y, b->idx.z, threadIdx.x, threadIdx.y, threadIdx.z, message);
    b->trapped = true;
    b->trap_error = error;
    switch_fiber(nullptr, b->main_ctx);
    __builtin_unreachable();
}

}  // namespace cucc

// Replaces glibc's: in a kernel, a failed assert() stops the grid with cudaErrorAssert, and the
// message names the block and thread, as CUDA's does.
extern "C" void __assert_fail(const char* assertion, const char* file, unsigned int line,
                              const char* function) noexcept {
    char message[1024];
    snprintf(message, sizeof message, "%s:%u: %s: Assertion `%s' failed.", file, line, function,
             assertion);
    if (cucc::tls_block) cucc::trap(cudaErrorAssert, message);
    fprintf(stderr, "%s: %s\n", program_invocation_short_name, message);
    abort();
}
