// llmc/comm.cuh: the processes of a run and the collectives between them. One process drives
// one GPU. Processes are started by a launcher, in one of three ways, and find each other here:
//   - an MPI launcher (mpirun -np 8 ./train_gpt ..., mpirun -H a:8,b:8 ..., srun --mpi=pmi2):
//     rank, world and the node-local rank come from MPI, and MPI carries the NCCL id;
//   - a launcher that only sets environment variables, torchrun-style (RANK, WORLD_SIZE,
//     LOCAL_RANK) or Slurm's srun without an MPI plugin (SLURM_PROCID, SLURM_NTASKS,
//     SLURM_LOCALID): the NCCL id travels through files in a folder every rank can read
//     (--rendezvous DIR, see comm_id_by_files), and every rank must be given its local rank;
//   - no launcher: a single process, rank 0 of 1, that makes no MPI or NCCL call; collectives
//     over one rank leave their data as it is.
// After start-up everything goes through NCCL: device collectives on the caller's stream, and
// the small host values (scalars for the log, broadcasts of configurations, barriers) through
// a scratch buffer on a stream of their own, so that the same code serves every launch.
//
// Entry points: comm_init / comm_destroy (the job), comm_split / comm_group_free (a CommGroup); on
// the device comm_allreduce_sum / comm_allreduce_avg, comm_reduce_scatter, comm_allgather,
// comm_reduce, comm_broadcast_device, comm_sync, comm_sync_event; on the host comm_sum_scalars,
// comm_mean, comm_broadcast, comm_allgather_host, comm_barrier; host_buffer_hash and
// comm_hashes_agree.
//
// Groups. A CommGroup is a set of ranks that run collectives together, with an NCCL
// communicator. comm_init makes `all`, every rank of the job; comm_split() cuts a group into
// sub-groups (ncclCommSplit); comm_grid_groups() cuts `all` into the groups of a process grid
// (llmc/parallel.h's ParallelDims), once, at start-up.
//
// Builds: with -DMULTI_GPU (the Makefile adds it, with MPI's flags and -lnccl, when the MPI and
// NCCL headers exist); a binary built without it refuses to run as one of several ranks
// instead of training alone.
//
// Determinism: NCCL gives every rank of an all-reduce the same bits (the CPU NCCL of dev/cpu
// also reduces in rank order, so runs repeat exactly); host scalars are gathered and summed in
// rank order on every rank, so they too are the same bits everywhere.
//
// Timeouts: no wait for another rank lasts forever. A rank that dies is noticed by an MPI
// launcher, which ends the job; a rank that hangs (stopped, deadlocked, or started with other
// flags and so making other calls) would leave the others waiting in their next collective, and
// waits for other ranks hide everywhere: a copy of a loss into pageable host memory waits for
// the tensor-parallel collectives queued before it, a cudaStreamSynchronize for ZeRO's buckets,
// MPI_Finalize for every rank to arrive. So the waits are not timed one by one: a watchdog
// thread (see "The watchdog" below), started by comm_init in a run of several ranks, times
// every device collective from the moment it actually starts on its stream and every blocking
// call into NCCL or MPI from its call, and polls NCCL's asynchronous errors. A collective or
// call that does not finish within `timeout_s` seconds (--comm-timeout), or an asynchronous
// error, ends the whole job with a message naming the rank and what it waited for
// (ncclCommAbort of every communicator, then MPI_Abort under MPI; a prompt exit otherwise, after
// which the other ranks time out in turn). The deadline must exceed the longest time one rank
// works while the others wait for it (rank 0 writing a checkpoint or a sample).
//
// Errors: NCCL_CHECK and MPI_CHECK print the file, line and the library's message and end the
// process.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "common.cuh"
#include "parallel.h"  // ParallelDims: the grid comm_grid_groups splits

#ifdef MULTI_GPU
#include <mpi.h>
#include <nccl.h>

inline void nccl_check(ncclResult_t result, const char* file, int line) {
    if (result != ncclSuccess) {
        fprintf(stderr, "NCCL error at %s:%d: %s (%s)\n", file, line, ncclGetErrorString(result),
                ncclGetLastError(nullptr));
        exit(EXIT_FAILURE);
    }
}
#define NCCL_CHECK(call) nccl_check((call), __FILE__, __LINE__)

inline void mpi_check(int err, const char* file, int line) {
    if (err != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING];
        int len = 0;
        if (MPI_Error_string(err, text, &len) != MPI_SUCCESS)
            snprintf(text, sizeof(text), "error code %d", err);
        fprintf(stderr, "MPI error at %s:%d: %s\n", file, line, text);
        exit(EXIT_FAILURE);
    }
}
#define MPI_CHECK(call) mpi_check((call), __FILE__, __LINE__)
#endif

// Bytes of the device buffer that carries a group's host collectives; larger broadcasts go in
// pieces of this size.
constexpr size_t COMM_SCRATCH_BYTES = (size_t)64 << 10;

enum CommKind {
    COMM_ALL_REDUCE,
    COMM_REDUCE_SCATTER,
    COMM_ALL_GATHER,
    COMM_REDUCE,
    COMM_BROADCAST,
    COMM_SEND_RECV,  // point to point (pipeline parallelism): the bytes sent
    NUM_COMM_KINDS
};
static const char* const COMM_KIND_NAMES[NUM_COMM_KINDS] = {
    "all_reduce", "reduce_scatter", "all_gather", "reduce", "broadcast", "send_recv"};

struct CommTraffic {
    double bytes[NUM_COMM_KINDS];  // sent by this rank, as above, since the last reset
    long long calls[NUM_COMM_KINDS];
};

struct CommGroup {
    int rank, size;    // this process's place in the group
    int world_rank;    // and in the whole job, for messages
    double timeout_s;  // deadline of every wait for the group's other ranks
#ifdef MULTI_GPU
    ncclComm_t nccl;           // nullptr in a single-process run
    cudaStream_t host_stream;  // the host collectives' stream
    uint8_t* scratch;          // COMM_SCRATCH_BYTES of device memory for them
#endif
    CommTraffic* traffic;  // the device collectives' bytes (nullptr: not counted)
};

enum LaunchKind { LAUNCH_NONE, LAUNCH_MPI, LAUNCH_ENV };

struct Rendezvous;

struct Comm {
    int rank, world;              // this process among all of them
    int local_rank, local_world;  // among the processes of its node: local_rank is its GPU
    LaunchKind launch;
    CommGroup all;           // every rank of the job (split into the grid's groups by comm_split)
    Rendezvous* rendezvous;  // an environment launch's: this rank's card stays while it runs
};

// ---------------------------------------------------------------------------------------------
// What the launcher says.

inline int launcher_env_int(const char* name, int fallback) {
    const char* value = getenv(name);
    if (value == nullptr || *value == '\0') return fallback;
    char* end = nullptr;
    long v = strtol(value, &end, 10);
    if (*end != '\0' || v < 0 || v > INT32_MAX) {
        fprintf(stderr, "error: the launcher's %s=%s is not a rank number\n", name, value);
        exit(EXIT_FAILURE);
    }
    return (int)v;
}

// The number of processes an MPI launcher says it started (Open MPI, or any PMI launcher:
// MPICH's hydra, Slurm's srun --mpi=pmi2), 0 without one. PMIx-only launchers set PMIX_RANK.
inline int mpi_launcher_world_size() {
    const char* vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (const char* var : vars)
        if (getenv(var)) return launcher_env_int(var, 0);
    return getenv("PMIX_RANK") ? 1 : 0;
}

// Rank, world and local rank from a launcher that sets them in the environment (torchrun's
// names first, then Slurm's). Returns false when neither set is there. The local rank picks the
// rank's GPU on its node, so a launch of several ranks must give it: without it every rank would
// take GPU 0 (torchrun always sets LOCAL_RANK, srun SLURM_LOCALID; a script must set it too).
inline bool env_launch(int* rank, int* world, int* local_rank) {
    const char* sets[2][3] = {{"RANK", "WORLD_SIZE", "LOCAL_RANK"},
                              {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}};
    for (auto& names : sets) {
        if (!getenv(names[0]) || !getenv(names[1])) continue;
        *rank = launcher_env_int(names[0], 0);
        *world = launcher_env_int(names[1], 0);
        *local_rank = launcher_env_int(names[2], -1);
        if (*world < 1 || *rank >= *world) {
            fprintf(stderr, "error: the launcher says rank %d of %d (%s, %s)\n", *rank, *world,
                    names[0], names[1]);
            exit(EXIT_FAILURE);
        }
        if (*local_rank < 0 && *world > 1) {
            fprintf(stderr,
                    "error: rank %d of %d: the launcher set %s and %s but not %s, the rank's "
                    "place among the processes of its node, which picks its GPU (without it every "
                    "rank would take GPU 0); set %s for every rank (0 to the node's GPUs - 1)\n",
                    *rank, *world, names[0], names[1], names[2], names[2]);
            exit(EXIT_FAILURE);
        }
        if (*local_rank < 0) *local_rank = 0;
        return true;
    }
    return false;
}

// ---------------------------------------------------------------------------------------------
// Waiting with a deadline.

inline double comm_now_s() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

// Sleeps `seconds` (not at all when it is not positive).
inline void comm_sleep_s(double seconds) {
    if (seconds <= 0) return;
    const timespec t = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&t, nullptr);
}

// Sleeps a little longer each time it is called in one wait (50 us doubling to 2 ms), so a
// short wait answers fast and a long one costs little CPU.
inline void comm_backoff(long* sleep_ns) {
    comm_sleep_s(1e-9 * *sleep_ns);
    *sleep_ns = *sleep_ns * 2 < 2000000 ? *sleep_ns * 2 : 2000000;
}

#ifdef MULTI_GPU
// ---------------------------------------------------------------------------------------------
// The watchdog: a host thread of each process of a multi-rank run, started by comm_init and
// joined by comm_destroy, that gives every wait for other ranks the deadline. It watches
//   - every device collective of this file (comm_watched), through two events recorded on the
//     collective's stream just before and just after it. The collective's clock starts when the
//     watchdog sees the start event complete: when the work queued before it on its stream (the
//     compute it follows, a wait for another stream) is done and the collective itself runs. A
//     collective queued long before it runs (ZeRO-3's prefetch of the next block, a bucket
//     queued behind the backward pass) does not count the compute before it. The end event
//     stops the clock;
//   - the asynchronous error of every communicator (ncclCommGetAsyncError): a peer died,
//     failed, aborted, or made another call;
//   - the blocking calls into MPI and NCCL that wait for the other ranks (MPI's start-up,
//     ncclCommInitRank, ncclCommSplit, ncclCommFinalize, MPI_Finalize), from their call
//     (comm_wait_begin with COMM_WAIT_CALL or COMM_WAIT_MPI);
//   - SIGTERM and SIGINT, with which a launcher ends the job once another rank has failed.
// So any host wait anywhere (a copy into pageable memory, cudaStreamSynchronize,
// cudaEventSynchronize, a host collective, MPI_Finalize) ends in time: whatever it waits for
// behind is a watched collective or is itself a watched call.
//
// Ending the job (comm_end_job: the watchdog's, or the main thread's at start-up) prints which
// rank waited for what, aborts every communicator (ncclCommAbort: its queued collectives end as
// no-ops and the peers' collectives fail rather than wait; the CPU NCCL removes the
// communicator's files from /dev/shm, also those of a stopped or killed peer, which cannot do
// it itself) and ends the process: MPI_Abort under MPI (the launcher ends every rank), or
// _exit with a failure while the main thread is inside an MPI call (MPI_Abort may not run
// alongside it; the launcher ends the job on the failed rank alike) or without MPI; on a
// signal, the signal's default action.
//
// Threads: the main thread makes the NCCL calls and records the events; the watchdog queries the
// events and the errors and, when it ends the job, aborts the communicators. The watchdog's lock
// guards their shared state and is held only for bookkeeping: never across a CUDA or NCCL call
// that may wait (an enqueue blocks behind a stuck collective once a GPU's launch queue is full,
// and on the CPU runtime an event query runs the device work that is ready). While the main
// thread is inside an NCCL call, that communicator is `busy_comm`: NCCL allows no other call on
// it meanwhile, so an ending leaves it alone (after waiting briefly for a call that returns at
// once). Whoever ends the job sets comm_ending and then takes the lock for good; the main thread
// checks comm_ending whenever it takes the lock (comm_lock_or_park) and stops there. So once
// collectives are aborted, the main thread, whose waits then return, stops at its next call into
// this file: no function here returns what an aborted collective left (a barrier never passes
// on an abort) and no NCCL call reaches a destroyed communicator. Device work queued behind an
// aborted collective may still run on undefined data until the process ends, as on a GPU.

constexpr double COMM_WATCHDOG_POLL_S = 0.01;  // between two looks at everything
constexpr unsigned COMM_END_GRACE_S = 5;       // the most an ending may take

// What the main thread is waiting in.
enum CommWaitKind {
    COMM_WAIT_NONE,
    COMM_WAIT_STREAM,  // device work: the collectives under it are watched; named in messages
    COMM_WAIT_CALL,    // a blocking NCCL call: the deadline runs from the call
    COMM_WAIT_MPI,     // a blocking MPI call, likewise (MPI_Abort may not run alongside it)
};

struct CommWatch {           // a device collective queued and not seen finished
    cudaEvent_t start, end;  // recorded just before and just after it on its stream
    ncclComm_t nccl;
    double started_s;  // when the watchdog saw `start` complete (0: not yet)
    char what[320];
};

struct CommWatched {  // a communicator of this process
    ncclComm_t nccl;
    long long calls;  // collectives queued on it (their numbers in messages)
};

struct CommWatchdog {
    // Recursive: an error check that exits while holding it reaches comm_at_exit, which takes it.
    std::recursive_mutex lock;
    std::thread thread;
    std::thread::id main_thread;
    bool running = false, stop = false;
    double timeout_s = 0.0;
    int world_rank = -1;          // -1 until MPI or the launcher says it
    int device = 0;               // the GPU comm_init selected
    bool mpi_serialized = false;  // MPI may be called from the watchdog (MPI_THREAD_SERIALIZED)
    std::vector<CommWatched> comms;
    std::vector<CommWatch> watches;  // in the order they were queued
    std::vector<cudaEvent_t> spare_events;
    // The main thread's wait: its kind, what it is, since when.
    CommWaitKind wait_kind = COMM_WAIT_NONE;
    const char* wait_what = nullptr;
    double wait_since = 0.0;
    ncclComm_t busy_comm = nullptr;  // the communicator of the main thread's NCCL call, if any
    struct sigaction old_term, old_int;
};

// The process's watchdog, never freed: its thread may outlive static destructors.
inline CommWatchdog* comm_watchdog() {
    static CommWatchdog* w = new CommWatchdog();
    return w;
}
inline std::atomic<bool> comm_ending{false};        // set once, by whoever ends the job
inline volatile sig_atomic_t comm_signal_seen = 0;  // SIGTERM or SIGINT, set by the handler

// Stops the calling thread for good: another thread is ending the process.
[[noreturn]] inline void comm_park() {
    for (;;) pause();
}

// "rank R" for messages, or "process PID" before MPI has said the rank.
inline void comm_rank_name(const CommWatchdog* w, char* out, size_t len) {
    if (w->world_rank >= 0) snprintf(out, len, "rank %d", w->world_rank);
    else snprintf(out, len, "process %ld", (long)getpid());
}

// Aborts every communicator but the one an NCCL call of the main thread uses. Under the lock.
inline void comm_abort_all(CommWatchdog* w) {
    for (const CommWatched& c : w->comms) {
        if (c.nccl == w->busy_comm) continue;
        const ncclResult_t res = ncclCommAbort(c.nccl);
        if (res != ncclSuccess)
            fprintf(stderr, "ncclCommAbort failed: %s (%s)\n", ncclGetErrorString(res),
                    ncclGetLastError(nullptr));
    }
    w->comms.clear();
}

// Ends the job (see above) after printing `message`; `signal_number`: the signal that asked for
// it, or 0 for a failure.
[[noreturn]] inline void comm_end_job(const char* message, int signal_number) {
    CommWatchdog* w = comm_watchdog();
    if (comm_ending.exchange(true)) comm_park();  // another thread is ending the job
    fprintf(stderr, "%s\n", message);
    fflush(stderr);
    // Should the ending itself hang (a GPU's ncclCommAbort can, behind a stuck kernel), the
    // default action of SIGALRM ends the process.
    signal(SIGALRM, SIG_DFL);
    alarm(COMM_END_GRACE_S);
    w->lock.lock();  // for good: the main thread stops at its next call into this file
    // An NCCL call that returns at once (an enqueue) is given 0.2 s to return, so that its
    // communicator is aborted too; a blocking call (or an enqueue stuck behind a full launch
    // queue) is not waited for.
    for (int ms = 0; ms < 200 && w->busy_comm && w->wait_kind != COMM_WAIT_CALL; ms++) {
        w->lock.unlock();
        comm_sleep_s(1e-3);
        w->lock.lock();
    }
    comm_abort_all(w);
    fflush(stdout);
    if (signal_number != 0) {  // (should either call fail, the exit below ends the process)
        signal(signal_number, SIG_DFL);
        raise(signal_number);
    }
    int initialized = 0, finalized = 0;  // (failed calls leave 0: then the exit below)
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    const bool on_main = std::this_thread::get_id() == w->main_thread;
    if (initialized && !finalized &&
        (on_main || (w->mpi_serialized && w->wait_kind != COMM_WAIT_MPI)))
        MPI_Abort(MPI_COMM_WORLD, EXIT_FAILURE);
    _exit(EXIT_FAILURE);
}

// The message for a wait of `who` for `what` that did not finish by the deadline (waiting: what
// the main thread waits in meanwhile, or nullptr).
inline void comm_deadline_message(const char* who, double timeout_s, const char* what,
                                  const char* waiting, char* message, size_t len) {
    snprintf(message, len,
             "error: %s: %s did not finish within %g s (--comm-timeout)%s%s: another rank died, "
             "hangs, or is busy for longer than that; ending the job",
             who, what, timeout_s, waiting ? " while this rank waited for " : "",
             waiting ? waiting : "");
}

// Ends the job because the main thread's own wait for `what` (at start-up) ran out of time.
[[noreturn]] inline void comm_timed_out(const CommGroup* g, const char* what) {
    char who[64], message[1024];
    snprintf(who, sizeof(who), "rank %d", g->world_rank);
    comm_deadline_message(who, g->timeout_s, what, nullptr, message, sizeof(message));
    comm_end_job(message, 0);
}

// The main thread releases the lock and, if the job is being ended, stops for good: what it
// used or waited for may have been aborted.
inline void comm_unlock_or_park(CommWatchdog* w) {
    const bool ending = comm_ending.load();
    w->lock.unlock();
    if (ending) comm_park();
}

// The main thread takes the lock, unless the job is being ended (then it stops for good).
inline void comm_lock_or_park(CommWatchdog* w) {
    w->lock.lock();
    if (comm_ending.load()) comm_unlock_or_park(w);
}

// The main thread starts waiting for `what` (kind: see CommWaitKind; nccl: the communicator of
// a blocking NCCL call, busy until comm_wait_end).
inline void comm_wait_begin(CommWaitKind kind, const char* what, ncclComm_t nccl) {
    CommWatchdog* w = comm_watchdog();
    comm_lock_or_park(w);
    w->wait_kind = kind;
    w->wait_what = what;
    w->wait_since = comm_now_s();
    w->busy_comm = nccl;
    w->lock.unlock();
}

// The wait is over. Stops for good if the job is being ended: what it waited for may have
// returned only because it was aborted.
inline void comm_wait_end() {
    CommWatchdog* w = comm_watchdog();
    w->lock.lock();
    w->wait_kind = COMM_WAIT_NONE;
    w->wait_what = nullptr;
    w->busy_comm = nullptr;
    comm_unlock_or_park(w);
}

// An event for a watch: a spare one, or a new one. Under the lock.
inline cudaEvent_t comm_spare_event(CommWatchdog* w) {
    if (w->spare_events.empty()) {
        cudaEvent_t e;
        CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        return e;
    }
    cudaEvent_t e = w->spare_events.back();
    w->spare_events.pop_back();
    return e;
}

// Queues `call` (an NCCL collective of g on `stream`, a callable returning ncclResult_t)
// between the events of a new watch. `what` names a host collective (nullptr: a device
// collective, named by its kind); whole_bytes: the size of the whole buffer, for messages.
template <class Call>
void comm_watched(const CommGroup* g, CommKind kind, size_t whole_bytes, cudaStream_t stream,
                  const char* what, Call call) {
    CommWatchdog* w = comm_watchdog();
    comm_lock_or_park(w);
    CommWatch x = {};
    x.start = comm_spare_event(w);
    x.end = comm_spare_event(w);
    x.nccl = g->nccl;
    long long number = 0;
    for (CommWatched& c : w->comms)
        if (c.nccl == g->nccl) number = ++c.calls;
    if (what)
        snprintf(x.what, sizeof(x.what), "%s (%s #%lld, %zu bytes over a group of %d ranks)", what,
                 COMM_KIND_NAMES[kind], number, whole_bytes, g->size);
    else
        snprintf(x.what, sizeof(x.what), "%s #%lld (%zu bytes over a group of %d ranks)",
                 COMM_KIND_NAMES[kind], number, whole_bytes, g->size);
    w->busy_comm = g->nccl;
    w->lock.unlock();
    // Without the lock: an enqueue may wait (see above), and the watchdog must go on meanwhile.
    CUDA_CHECK(cudaEventRecord(x.start, stream));
    NCCL_CHECK(call());
    CUDA_CHECK(cudaEventRecord(x.end, stream));
    w->lock.lock();
    w->busy_comm = nullptr;
    w->watches.push_back(x);
    comm_unlock_or_park(w);
}

// A communicator of this process that has failed (its asynchronous error: a peer died, failed,
// aborted, or made another call) and its error, or nullptr. Under the lock.
inline ncclComm_t comm_failed(const CommWatchdog* w, ncclResult_t* error) {
    for (const CommWatched& c : w->comms) {
        if (c.nccl == w->busy_comm) continue;  // no other call on it meanwhile
        ncclResult_t async = ncclSuccess;
        const ncclResult_t res = ncclCommGetAsyncError(c.nccl, &async);
        if (res != ncclSuccess) async = res;
        if (async == ncclSuccess || async == ncclInProgress) continue;
        *error = async;
        return c.nccl;
    }
    return nullptr;
}

// The failure of communicator `nccl` (comm_failed) as a message of `who`. It names the
// communicator's oldest collective in flight among `seen` (the watches listed once the failure
// was seen, `finished` by their end events queried since): the oldest one started (the failed
// one ran), else the oldest one queued. (A finished collective not yet dropped from the list is
// not named: the barrier passed just before a peer died.) Under the lock.
inline void comm_failure_message(const CommWatchdog* w, const char* who, ncclComm_t nccl,
                                 ncclResult_t error, const std::vector<CommWatch>& seen,
                                 const std::vector<char>& finished, char* message, size_t len) {
    const CommWatch* during = nullptr;
    for (size_t i = 0; i < seen.size(); i++) {
        const CommWatch* x = &seen[i];
        if (x->nccl == nccl && !finished[i] &&
            (!during || (during->started_s == 0.0 && x->started_s > 0.0)))
            during = x;
    }
    bool listed = false;  // (a communicator destroyed meanwhile is not asked for its last error)
    for (const CommWatched& c : w->comms) listed |= c.nccl == nccl;
    snprintf(message, len, "error: %s: NCCL failed during %s: %s (%s); ending the job", who,
             during ? during->what : "a collective", ncclGetErrorString(error),
             listed ? ncclGetLastError(nccl) : "");
}

// A failed CUDA call of the watchdog of `who` (`doing` what), as a message: the device failed,
// which the main thread would see too, but the other ranks would wait for this one.
inline void comm_cuda_failed(const char* who, const char* doing, cudaError_t err, char* message,
                             size_t len) {
    snprintf(message, len, "error: %s: CUDA error while the watchdog %s: %s (%s); ending the job",
             who, doing, cudaGetErrorString(err), cudaGetErrorName(err));
}

// The watchdog thread: every COMM_WATCHDOG_POLL_S, a signal, the asynchronous errors, a blocking
// call's clock, then the events of the collectives in flight (a failure is named once they are
// queried: by a collective not seen finished).
inline void comm_watchdog_loop(CommWatchdog* w) {
    char who[64], message[1024];
    std::vector<CommWatch> seen;  // a copy of the watches, queried without the lock
    std::vector<char> finished;
    bool on_device = false;
    for (;;) {
        ncclComm_t failed = nullptr;  // a communicator that has failed, and its error
        ncclResult_t failure = ncclSuccess;
        comm_sleep_s(COMM_WATCHDOG_POLL_S);
        if (comm_ending.load()) comm_park();  // the job is being ended elsewhere
        if (comm_signal_seen != 0) {
            comm_rank_name(w, who, sizeof(who));
            snprintf(message, sizeof(message), "%s: %s: aborting the communicators", who,
                     strsignal(comm_signal_seen));
            comm_end_job(message, comm_signal_seen);
        }
        message[0] = '\0';
        {
            std::lock_guard<std::recursive_mutex> guard(w->lock);
            if (w->stop) return;
            comm_rank_name(w, who, sizeof(who));
            failed = comm_failed(w, &failure);
            if (!failed && (w->wait_kind == COMM_WAIT_CALL || w->wait_kind == COMM_WAIT_MPI) &&
                comm_now_s() - w->wait_since > w->timeout_s)
                comm_deadline_message(who, w->timeout_s, w->wait_what, nullptr, message,
                                      sizeof(message));
            if (!message[0] && !on_device && !w->watches.empty()) {
                // the thread's CUDA calls go to the rank's GPU (not GPU 0's context)
                const cudaError_t err = cudaSetDevice(w->device);
                if (err != cudaSuccess)
                    comm_cuda_failed(who, "selected the GPU", err, message, sizeof(message));
                on_device = true;
            }
            seen = w->watches;
        }
        if (message[0]) comm_end_job(message, 0);
        finished.assign(seen.size(), 0);
        for (size_t i = 0; i < seen.size() && !message[0]; i++) {
            CommWatch* x = &seen[i];
            if (x->started_s == 0.0) {
                const cudaError_t q = cudaEventQuery(x->start);
                if (q == cudaSuccess) x->started_s = comm_now_s();  // its clock starts
                else if (q != cudaErrorNotReady)
                    comm_cuda_failed(who, "queried an event", q, message, sizeof(message));
            }
            if (x->started_s > 0.0 && !message[0]) {
                const cudaError_t q = cudaEventQuery(x->end);
                if (q == cudaSuccess) finished[i] = 1;
                else if (q != cudaErrorNotReady)
                    comm_cuda_failed(who, "queried an event", q, message, sizeof(message));
            }
        }
        if (message[0]) comm_end_job(message, 0);
        if (failed) {
            {
                std::lock_guard<std::recursive_mutex> guard(w->lock);
                comm_failure_message(w, who, failed, failure, seen, finished, message,
                                     sizeof(message));
            }
            comm_end_job(message, 0);
        }
        {
            std::lock_guard<std::recursive_mutex> guard(w->lock);
            const double now = comm_now_s();
            for (size_t i = 0; i < seen.size(); i++) {
                size_t k = 0;  // the same watch in the list (the main thread only appends)
                while (k < w->watches.size() && w->watches[k].start != seen[i].start) k++;
                if (k == w->watches.size()) continue;  // dropped with its communicator
                if (finished[i]) {
                    w->spare_events.push_back(seen[i].start);
                    w->spare_events.push_back(seen[i].end);
                    w->watches.erase(w->watches.begin() + k);
                    continue;
                }
                w->watches[k].started_s = seen[i].started_s;
                if (message[0] || seen[i].started_s == 0.0 ||
                    now - seen[i].started_s <= w->timeout_s)
                    continue;
                // late: named with the main thread's wait, unless that is its host collective
                const bool named = w->wait_kind == COMM_WAIT_STREAM && w->wait_what &&
                                   strncmp(seen[i].what, w->wait_what, strlen(w->wait_what)) != 0;
                comm_deadline_message(who, w->timeout_s, seen[i].what,
                                      named ? w->wait_what : nullptr, message, sizeof(message));
            }
        }
        if (message[0]) comm_end_job(message, 0);
    }
}

inline void comm_on_signal(int signal_number) { comm_signal_seen = signal_number; }

// At exit() while the watchdog runs (an error check or fatal() on this rank): aborts the
// communicators, so that the peers fail at once rather than time out and the files of the CPU
// NCCL go; the watchdog stops at its next look. (If another thread is ending the job already,
// the exit goes on: both end the process.)
inline void comm_at_exit() {
    CommWatchdog* w = comm_watchdog();
    if (!w->running || comm_ending.exchange(true)) return;
    std::lock_guard<std::recursive_mutex> guard(w->lock);
    w->busy_comm = nullptr;  // the exiting main thread is in no NCCL call
    comm_abort_all(w);
}

// Starts the watchdog (comm_init of a multi-rank run, before MPI's start-up).
inline void comm_watchdog_start(double timeout_s) {
    CommWatchdog* w = comm_watchdog();
    w->timeout_s = timeout_s;
    w->main_thread = std::this_thread::get_id();
    w->running = true;
    struct sigaction on;
    memset(&on, 0, sizeof(on));
    on.sa_handler = comm_on_signal;
    on.sa_flags = SA_RESTART;  // the main thread's system calls go on
    if (sigemptyset(&on.sa_mask) != 0 || sigaction(SIGTERM, &on, &w->old_term) != 0 ||
        sigaction(SIGINT, &on, &w->old_int) != 0 || atexit(comm_at_exit) != 0) {
        fprintf(stderr, "error: cannot install the collective watchdog's handlers: %s\n",
                strerror(errno));
        exit(EXIT_FAILURE);
    }
    w->thread = std::thread(comm_watchdog_loop, w);
}

// What messages call this rank, and its GPU (for the event queries).
inline void comm_watchdog_identify(int world_rank, int device) {
    CommWatchdog* w = comm_watchdog();
    std::lock_guard<std::recursive_mutex> guard(w->lock);
    w->world_rank = world_rank;
    w->device = device;
}

// Stops the watchdog (comm_destroy, after MPI_Finalize): joins it, restores the signals'
// handlers and frees the events.
inline void comm_watchdog_stop() {
    CommWatchdog* w = comm_watchdog();
    {
        std::lock_guard<std::recursive_mutex> guard(w->lock);
        w->stop = true;
    }
    w->thread.join();
    if (sigaction(SIGTERM, &w->old_term, nullptr) != 0 ||
        sigaction(SIGINT, &w->old_int, nullptr) != 0) {
        fprintf(stderr, "error: cannot restore the signal handlers: %s\n", strerror(errno));
        exit(EXIT_FAILURE);
    }
    for (const CommWatch& x : w->watches) {
        CUDA_CHECK(cudaEventDestroy(x.start));
        CUDA_CHECK(cudaEventDestroy(x.end));
    }
    for (cudaEvent_t e : w->spare_events) CUDA_CHECK(cudaEventDestroy(e));
    w->watches.clear();
    w->spare_events.clear();
    w->running = false;
}
#endif

// Runs `wait`, a host wait for device work that may hold collectives of g, under the watchdog's
// deadline when g's collectives are NCCL's; `what` names the wait in its messages.
template <class Wait>
inline void comm_timed_wait(const CommGroup* g, const char* what, Wait wait) {
#ifdef MULTI_GPU
    if (g->nccl) {
        comm_wait_begin(COMM_WAIT_STREAM, what, nullptr);
        wait();
        comm_wait_end();
        return;
    }
#endif
    (void)g;
    (void)what;
    wait();
}

// Waits until the work queued on `stream` (collectives of g included) is done.
inline void comm_sync(const CommGroup* g, cudaStream_t stream, const char* what) {
    comm_timed_wait(g, what, [&] { CUDA_CHECK(cudaStreamSynchronize(stream)); });
}

// Waits until `event`'s work is done (a collective of g recorded before it, with what it
// waits for): comm_sync for the work before one event, not a whole stream.
inline void comm_sync_event(const CommGroup* g, cudaEvent_t event, const char* what) {
    comm_timed_wait(g, what, [&] { CUDA_CHECK(cudaEventSynchronize(event)); });
}

// ---------------------------------------------------------------------------------------------
// Start-up.

inline void comm_single_process(Comm* comm, double timeout_s) {
    memset(comm, 0, sizeof(*comm));
    comm->world = 1;
    comm->local_world = 1;
    comm->launch = LAUNCH_NONE;
    comm->all.size = 1;
    comm->all.timeout_s = timeout_s;
}

#ifdef MULTI_GPU
// Gives g its NCCL communicator, which the watchdog then watches, and the buffers of its host
// collectives.
inline void comm_group_attach(CommGroup* g, ncclComm_t nccl) {
    g->nccl = nccl;
    CommWatchdog* w = comm_watchdog();
    comm_lock_or_park(w);
    w->comms.push_back(CommWatched{nccl, 0});
    w->lock.unlock();
    g->traffic = (CommTraffic*)calloc(1, sizeof(CommTraffic));
    CUDA_CHECK(cudaStreamCreateWithFlags(&g->host_stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaMalloc(&g->scratch, COMM_SCRATCH_BYTES));
}

// The NCCL id under MPI: rank 0 makes it, MPI_Ibcast carries it (polled with the deadline).
inline void comm_id_by_mpi(const Comm* comm, ncclUniqueId* id) {
    if (comm->rank == 0) NCCL_CHECK(ncclGetUniqueId(id));
    MPI_Request request;
    MPI_CHECK(MPI_Ibcast(id, sizeof(*id), MPI_BYTE, 0, MPI_COMM_WORLD, &request));
    const double deadline = comm_now_s() + comm->all.timeout_s;
    long sleep_ns = 50000;
    for (int done = 0;;) {
        MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
        if (done) return;
        if (comm_now_s() > deadline)
            comm_timed_out(&comm->all, "the broadcast of the NCCL id at start-up (MPI)");
        comm_backoff(&sleep_ns);
    }
}

// The rendezvous of an environment launch, through files in `dir` (a folder every rank can read
// and write, shared by all nodes) named after the job: DIR/train_gpt_rendezvous_<job>, <job>
// from the launcher's job id (SLURM_JOB_ID and SLURM_STEP_ID, else TORCHELASTIC_RUN_ID, else
// MASTER_ADDR and MASTER_PORT, else "job"), so that jobs sharing the folder keep apart.
//
// Every process publishes a card, NAME.rank<r> (RendezvousCard): its rank, world size, local
// rank, host, pid and start time, and a random nonce of its own. Rank 0 publishes an offer,
// NAME.id (RendezvousOffer): a random session number, its world size, the NCCL id, and for each
// rank the nonce of the card it accepted. Then:
//   1. rank 0 lists in its offer the card of every rank r < world it finds;
//   2. a rank whose nonce the offer lists answers it: it writes the session into its card. An
//      answer proves that the card's process runs and sees this offer, so rank 0 checks the
//      answered cards: one of another world size, or on the same host with the same local
//      rank as another (two ranks on one GPU), ends the rendezvous with a message naming both;
//   3. once every rank has answered, rank 0 marks the offer complete ("go"); a rank that reads
//      it marks its card joined and joins ncclCommInitRank, and rank 0 deletes the offer once
//      that returns (every rank has joined, so every rank has read the offer) and marks its own
//      card: no rank enters ncclCommInitRank unless all will. The joined cards stay while the
//      job runs, so that a process given a rank of a running job is told so at once; each rank
//      deletes its own at the end (comm_destroy).
// Files of an earlier job cannot complete the rendezvous of a new one: a stale card never
// answers, and a stale offer never lists a new rank's nonce; rank 0 replaces them, or names them
// when it gives up. All writes are atomic (a temporary file, then rename), and a card is claimed
// with link(), which fails when one is there already:
//   - a card of a live process of this host (its pid runs, started at the card's start time)
//     means two processes were given the same rank: the newcomer replaces it by a conflict card
//     naming itself, which tells the holder, and both end with a message naming the two (the
//     holder goes on only when it was past its rendezvous already: then its job has all ranks);
//   - a card of a process of this host that ended is stale and replaced; a card of another host
//     cannot be judged from here and is replaced too: a live holder that finds its card taken
//     over ends with a message naming the newcomer.
// Every rank gives up at its deadline (--comm-timeout from its start), deletes the files it
// wrote while they are still its own, and says why: rank 0 names the ranks that did not join and
// what their cards say, the others what they saw of rank 0; and both list the rendezvous files
// of other jobs in the folder whose processes may run (ranks given different job ids meet under
// different names).

constexpr char RENDEZVOUS_MAGIC[16] = "train_gpt-rdv-1";
constexpr size_t RENDEZVOUS_PATH_BYTES = 4400;

struct RendezvousCard {  // DIR/NAME.rank<r>
    char magic[16];
    int32_t rank, world, local_rank;
    int32_t joined;  // 1 once past the rendezvous: its job runs
    int64_t pid;
    uint64_t start;      // the process's start time (process_start_time)
    uint64_t nonce;      // random, this process's own
    uint64_t session;    // the session of the offer it answered (0: none yet)
    uint64_t displaces;  // a conflict card: the nonce of the live card it contests (0: none)
    char host[128];
};

struct RendezvousOffer {  // DIR/NAME.id, followed by `world` nonces (uint64_t)
    char magic[16];
    uint64_t session;   // random, this rendezvous's
    int32_t world, go;  // go: 1 once every rank has answered
    int64_t pid;
    uint64_t start;
    char host[128];
    ncclUniqueId id;
};

struct Rendezvous {
    char dir[4096];
    char job[256];
    char base[RENDEZVOUS_PATH_BYTES];  // DIR/train_gpt_rendezvous_<job>
    char card_path[RENDEZVOUS_PATH_BYTES], offer_path[RENDEZVOUS_PATH_BYTES];
    RendezvousCard card;  // this process's
    uint64_t session;     // rank 0: its offer's
    double timeout_s, deadline;
    char others[2048];  // the other jobs' files the last scan that found any found
    double next_scan;   // when rendezvous_watch_others scans next
};

// A random number other than 0 (getrandom). Ends the process when the system gives none.
inline uint64_t rendezvous_random() {
    uint64_t v = 0;
    while (v == 0) {
        if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
            fprintf(stderr, "error: cannot draw a random number for the rendezvous: %s\n",
                    strerror(errno));
            exit(EXIT_FAILURE);
        }
    }
    return v;
}

// The job's name from the launcher's variables, as a file name (letters, digits, '.', '-').
inline void rendezvous_job(char* job, size_t len) {
    if (getenv("SLURM_JOB_ID"))
        snprintf(job, len, "slurm%s.%s", getenv("SLURM_JOB_ID"),
                 getenv("SLURM_STEP_ID") ? getenv("SLURM_STEP_ID") : "0");
    else if (getenv("TORCHELASTIC_RUN_ID"))
        snprintf(job, len, "run%s", getenv("TORCHELASTIC_RUN_ID"));
    else if (getenv("MASTER_ADDR") && getenv("MASTER_PORT"))
        snprintf(job, len, "%s.%s", getenv("MASTER_ADDR"), getenv("MASTER_PORT"));
    else snprintf(job, len, "job");
    for (char* p = job; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '-'))
            *p = '_';
}

// Writes bytes to path (created or truncated) and syncs it. Returns false with errno.
inline bool rendezvous_write_file(const char* path, const void* data, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return false;
    const bool ok = write(fd, data, n) == (ssize_t)n && fsync(fd) == 0;
    const int saved = errno;
    const bool closed = close(fd) == 0;
    if (!ok) errno = saved;
    return ok && closed;
}

// Reads a small file whole (up to 16 MiB) into bytes. Returns false when it is missing, not a
// regular file or larger.
inline bool rendezvous_load(const char* path, std::vector<uint8_t>* bytes) {
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) return false;
    struct stat st;
    bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= (16 << 20);
    if (ok) {
        bytes->resize((size_t)st.st_size);
        ok = read(fd, bytes->data(), bytes->size()) == (ssize_t)bytes->size();
    }
    close(fd);
    return ok;
}

// The card at path, when it is rank `rank`'s card.
inline bool rendezvous_read_card(const char* path, int rank, RendezvousCard* c) {
    std::vector<uint8_t> bytes;
    if (!rendezvous_load(path, &bytes) || bytes.size() != sizeof(*c)) return false;
    memcpy(c, bytes.data(), sizeof(*c));
    c->host[sizeof(c->host) - 1] = '\0';
    return memcmp(c->magic, RENDEZVOUS_MAGIC, sizeof(c->magic)) == 0 && c->rank == rank;
}

// The offer at path and the nonces it lists, when it is an offer.
inline bool rendezvous_read_offer(const char* path, RendezvousOffer* o,
                                  std::vector<uint64_t>* nonces) {
    std::vector<uint8_t> bytes;
    if (!rendezvous_load(path, &bytes) || bytes.size() < sizeof(*o)) return false;
    memcpy(o, bytes.data(), sizeof(*o));
    o->host[sizeof(o->host) - 1] = '\0';
    if (memcmp(o->magic, RENDEZVOUS_MAGIC, sizeof(o->magic)) != 0 || o->world < 1 ||
        bytes.size() != sizeof(*o) + (size_t)o->world * sizeof(uint64_t))
        return false;
    nonces->resize((size_t)o->world);
    memcpy(nonces->data(), bytes.data() + sizeof(*o), nonces->size() * sizeof(uint64_t));
    return true;
}

// "host H pid P": the process a card or an offer names.
inline const char* rendezvous_who(const char* host, int64_t pid, char* out, size_t len) {
    snprintf(out, len, "host %s pid %lld", host, (long long)pid);
    return out;
}

// Whether the process of a card is known to have ended (a process of this host).
inline bool rendezvous_gone(const Rendezvous* rv, const RendezvousCard* c) {
    return process_gone(c->host, (long)c->pid, c->start, rv->card.host);
}

// Deletes this process's card and (rank 0) its offer, each while it is still this process's.
inline void comm_rendezvous_cleanup(const Rendezvous* rv) {
    RendezvousCard c;
    if (rendezvous_read_card(rv->card_path, rv->card.rank, &c) && c.nonce == rv->card.nonce)
        unlink(rv->card_path);
    RendezvousOffer o;
    std::vector<uint64_t> nonces;
    if (rv->session != 0 && rendezvous_read_offer(rv->offer_path, &o, &nonces) &&
        o.session == rv->session)
        unlink(rv->offer_path);
}

// Ends this process's part in the rendezvous: deletes its files (comm_rendezvous_cleanup),
// prints "error: rank R: MESSAGE" and exits.
[[noreturn]] __attribute__((format(printf, 2, 3))) inline void rendezvous_fail(const Rendezvous* rv,
                                                                               const char* fmt,
                                                                               ...) {
    char message[8192];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof(message), fmt, args);
    va_end(args);
    comm_rendezvous_cleanup(rv);
    fprintf(stderr, "error: rank %d: %s\n", rv->card.rank, message);
    exit(EXIT_FAILURE);
}

// Writes bytes to path atomically (a temporary file, then rename), or ends the rendezvous.
inline void rendezvous_write(const Rendezvous* rv, const char* path, const void* data, size_t n) {
    char tmp[RENDEZVOUS_PATH_BYTES + 32];
    snprintf(tmp, sizeof(tmp), "%s.tmp%ld", path, (long)getpid());
    if (!rendezvous_write_file(tmp, data, n) || rename(tmp, path) != 0) {
        const int saved = errno;
        unlink(tmp);
        rendezvous_fail(rv,
                        "cannot write the rendezvous file %s: %s (--rendezvous must be a folder "
                        "every rank can write)",
                        path, strerror(saved));
    }
}

// Appends to out the rendezvous files of other jobs in the folder whose processes may still run
// (a few of them): ranks given different job ids meet under different names. Empty when there
// are none.
inline void rendezvous_other_jobs(const Rendezvous* rv, char* out, size_t len) {
    DIR* d = opendir(rv->dir);
    if (d == nullptr) return;
    const char* prefix = "train_gpt_rendezvous_";
    const size_t prefix_len = strlen(prefix);
    int listed = 0;
    for (struct dirent* e; listed < 4 && (e = readdir(d)) != nullptr;) {
        const char* dot = strrchr(e->d_name, '.');
        if (strncmp(e->d_name, prefix, prefix_len) != 0 || dot == nullptr) continue;
        char job[256], path[RENDEZVOUS_PATH_BYTES + 256], who[200], what[300];
        snprintf(job, sizeof(job), "%.*s", (int)(dot - e->d_name - prefix_len),
                 e->d_name + prefix_len);
        snprintf(path, sizeof(path), "%s/%s", rv->dir, e->d_name);
        int rank = -1, used = 0;
        RendezvousCard c;
        RendezvousOffer o;
        std::vector<uint64_t> nonces;
        if (strcmp(job, rv->job) == 0) continue;
        if (sscanf(dot, ".rank%d%n", &rank, &used) == 1 && dot[used] == '\0' &&
            rendezvous_read_card(path, rank, &c) && !rendezvous_gone(rv, &c))
            snprintf(what, sizeof(what), "rank %d of %d ranks (%s)", rank, c.world,
                     rendezvous_who(c.host, c.pid, who, sizeof(who)));
        else if (strcmp(dot, ".id") == 0 && rendezvous_read_offer(path, &o, &nonces) &&
                 !process_gone(o.host, (long)o.pid, o.start, rv->card.host))
            snprintf(what, sizeof(what), "rank 0's offer for %d ranks (%s)", o.world,
                     rendezvous_who(o.host, o.pid, who, sizeof(who)));
        else continue;
        const size_t at = strlen(out);
        snprintf(out + at, len - at, "\n  a file of job '%s' (this job is '%s'): %s", job, rv->job,
                 what);
        listed++;
    }
    closedir(d);
    if (listed > 0) {
        const size_t at = strlen(out);
        snprintf(out + at, len - at,
                 "\n  ranks of one job must get the same job id (SLURM_JOB_ID and SLURM_STEP_ID, "
                 "TORCHELASTIC_RUN_ID, or MASTER_ADDR and MASTER_PORT): ranks given different "
                 "ones meet under different names");
    }
}

// Scans the folder for other jobs' files (rendezvous_other_jobs) every half second of a wait, or
// now, keeping what the last scan that found any found: a rank that gives up deletes its files,
// so a scan at this rank's deadline alone could miss the rank of another job id that gave up a
// moment before.
inline void rendezvous_watch_others(Rendezvous* rv, bool now) {
    if (!now && comm_now_s() < rv->next_scan) return;
    rv->next_scan = comm_now_s() + 0.5;
    char found[sizeof(rv->others)] = "";
    rendezvous_other_jobs(rv, found, sizeof(found));
    if (found[0]) memcpy(rv->others, found, sizeof(found));
}

// This process was given the rank that `held`, a live process of this host, holds: replaces
// that card by a conflict card naming this process, which tells the holder (which ends and
// deletes it). Waits until the holder has done so, has ended, or is past its rendezvous (an
// offer marked complete lists its card: it joins its job, reading no more cards), or the
// deadline; deletes the conflict card if it is still there, and ends.
[[noreturn]] inline void rendezvous_conflict(Rendezvous* rv, const RendezvousCard* held,
                                             const char* tmp) {
    RendezvousCard conflict = rv->card;
    conflict.displaces = held->nonce;
    // a holder past its rendezvous reads no more cards: there is no one to tell
    const bool posted = !held->joined && rendezvous_write_file(tmp, &conflict, sizeof(conflict)) &&
                        rename(tmp, rv->card_path) == 0;
    if (!posted) unlink(tmp);
    long sleep_ns = 50000;
    RendezvousCard now;
    RendezvousOffer offer;
    std::vector<uint64_t> nonces;
    bool told = false, joined = held->joined != 0;
    while (posted && !told && !joined && !rendezvous_gone(rv, held) &&
           comm_now_s() < rv->deadline) {
        comm_backoff(&sleep_ns);
        told = !rendezvous_read_card(rv->card_path, rv->card.rank, &now) ||
               now.nonce != conflict.nonce;
        joined = rendezvous_read_offer(rv->offer_path, &offer, &nonces) && offer.go &&
                 held->rank < offer.world && nonces[held->rank] == held->nonce;
    }
    if (rendezvous_read_card(rv->card_path, rv->card.rank, &now) && now.nonce == conflict.nonce)
        unlink(rv->card_path);
    char who[200];
    fprintf(stderr,
            "error: rank %d: two processes were given rank %d (RANK or SLURM_PROCID): %s holds it "
            "in %s%s, and this process (pid %ld) came second; %s\n",
            rv->card.rank, rv->card.rank, rendezvous_who(held->host, held->pid, who, sizeof(who)),
            rv->dir, joined ? " (it has joined its job)" : "", (long)getpid(),
            told ? "both end" : "this one ends");
    exit(EXIT_FAILURE);
}

// Publishes this process's card, claiming its rank's name with link(): a card that is there
// already is judged as the comment above the rendezvous says.
inline void rendezvous_claim(Rendezvous* rv) {
    char tmp[RENDEZVOUS_PATH_BYTES + 32];
    snprintf(tmp, sizeof(tmp), "%s.tmp%ld", rv->card_path, (long)getpid());
    if (!rendezvous_write_file(tmp, &rv->card, sizeof(rv->card))) {
        const int saved = errno;
        unlink(tmp);
        rendezvous_fail(rv,
                        "cannot write the rendezvous file %s: %s (--rendezvous must be a "
                        "folder every rank can write)",
                        tmp, strerror(saved));
    }
    long sleep_ns = 50000;
    for (;;) {
        if (link(tmp, rv->card_path) == 0) break;
        if (errno != EEXIST) {
            const int saved = errno;
            unlink(tmp);
            rendezvous_fail(rv, "cannot create the rendezvous file %s: %s", rv->card_path,
                            strerror(saved));
        }
        RendezvousCard held;
        const bool card = rendezvous_read_card(rv->card_path, rv->card.rank, &held);
        if (!card && access(rv->card_path, F_OK) != 0) {  // deleted meanwhile: link again
            if (comm_now_s() > rv->deadline) {
                unlink(tmp);
                rendezvous_fail(rv, "cannot claim the rendezvous file %s", rv->card_path);
            }
            comm_backoff(&sleep_ns);
            continue;
        }
        const bool gone = card && rendezvous_gone(rv, &held);
        if (card && !gone && strcmp(held.host, rv->card.host) == 0)
            rendezvous_conflict(rv, &held, tmp);
        if (rename(tmp, rv->card_path) != 0) {
            const int saved = errno;
            unlink(tmp);
            rendezvous_fail(rv, "cannot replace the rendezvous file %s: %s", rv->card_path,
                            strerror(saved));
        }
        char who[200] = "", why[400];
        if (card) rendezvous_who(held.host, held.pid, who, sizeof(who));
        if (!card)
            snprintf(why, sizeof(why), "it is no rendezvous card (a file of an older train_gpt?)");
        else if (gone)
            snprintf(why, sizeof(why), "its process (%s) no longer runs: a file of an earlier job",
                     who);
        else
            snprintf(why, sizeof(why),
                     "its process (%s) runs on another host, which cannot be checked from here: a "
                     "file of an earlier job, or of another process given the same rank",
                     who);
        fprintf(stderr, "note: rank %d: replaced the rendezvous file %s: %s\n", rv->card.rank,
                rv->card_path, why);
        return;
    }
    unlink(tmp);
}

// Ends this process when its card is no longer its own: replaced by a conflict card that names
// it (another process of this host was given this rank: this one deletes that card), or by the
// card of another process (one of another host was given this rank, or took over this name).
inline void rendezvous_check_card(const Rendezvous* rv) {
    RendezvousCard now;
    const bool card = rendezvous_read_card(rv->card_path, rv->card.rank, &now);
    if (card && now.nonce == rv->card.nonce) return;
    if (!card)
        rendezvous_fail(rv, "another process deleted or damaged this rank's rendezvous file %s",
                        rv->card_path);
    char who[200];
    rendezvous_who(now.host, now.pid, who, sizeof(who));
    if (now.displaces == rv->card.nonce) {
        unlink(rv->card_path);  // the conflict card is addressed to this process
        rendezvous_fail(rv,
                        "two processes were given rank %d (RANK or SLURM_PROCID): this one (pid "
                        "%ld) and %s, which came second; both end",
                        rv->card.rank, (long)getpid(), who);
    }
    rendezvous_fail(rv,
                    "%s took over this rank's rendezvous file %s: two processes were given rank %d "
                    "(RANK or SLURM_PROCID); this one (pid %ld) ends",
                    who, rv->card_path, rv->card.rank, (long)getpid());
}

// Rank 0's side: publishes the offer, lists the cards it finds, checks the answers, and marks
// the offer complete once every rank has answered (see above). The NCCL id goes to *id.
inline void rendezvous_offer(Rendezvous* rv, ncclUniqueId* id) {
    const int world = rv->card.world;
    RendezvousOffer offer;
    memset(&offer, 0, sizeof(offer));
    memcpy(offer.magic, RENDEZVOUS_MAGIC, sizeof(offer.magic));
    offer.session = rv->session = rendezvous_random();
    offer.world = world;
    offer.pid = rv->card.pid;
    offer.start = rv->card.start;
    memcpy(offer.host, rv->card.host, sizeof(offer.host));
    NCCL_CHECK(ncclGetUniqueId(&offer.id));
    std::vector<uint8_t> bytes(sizeof(offer) + (size_t)world * sizeof(uint64_t));
    uint64_t* nonces = (uint64_t*)(bytes.data() + sizeof(offer));
    auto publish = [&]() {
        memcpy(bytes.data(), &offer, sizeof(offer));
        rendezvous_write(rv, rv->offer_path, bytes.data(), bytes.size());
    };
    std::vector<RendezvousCard> cards(world);  // the last card read of each rank
    std::vector<char> seen(world, 0), answered(world, 0);
    cards[0] = rv->card;
    seen[0] = answered[0] = 1;
    nonces[0] = rv->card.nonce;
    publish();
    char path[RENDEZVOUS_PATH_BYTES + 32], who[200], other[200];
    long sleep_ns = 50000;
    for (int missing = world - 1; missing > 0;) {
        rendezvous_check_card(rv);
        bool changed = false;
        for (int r = 1; r < world; r++) {
            if (answered[r]) continue;
            snprintf(path, sizeof(path), "%s.rank%d", rv->base, r);
            RendezvousCard* c = &cards[r];
            seen[r] = rendezvous_read_card(path, r, c) && c->displaces == 0;
            if (!seen[r] || rendezvous_gone(rv, c)) continue;  // none yet, or a leftover
            if (nonces[r] != c->nonce) nonces[r] = c->nonce, changed = true;
            if (c->session != rv->session) continue;
            rendezvous_who(c->host, c->pid, who, sizeof(who));
            if (c->world != world)
                rendezvous_fail(rv,
                                "rank %d (%s) was started as one of %d ranks, rank 0 as one of "
                                "%d: the launcher's WORLD_SIZE (or SLURM_NTASKS) differs between "
                                "them",
                                r, who, c->world, world);
            for (int q = 0; q < world; q++)
                if (answered[q] && cards[q].local_rank == c->local_rank &&
                    strcmp(cards[q].host, c->host) == 0)
                    rendezvous_fail(
                        rv,
                        "ranks %d (%s) and %d (%s) are both local rank %d of host %s "
                        "(LOCAL_RANK or SLURM_LOCALID), so they would share a GPU",
                        q, rendezvous_who(cards[q].host, cards[q].pid, other, sizeof(other)), r,
                        who, c->local_rank, c->host);
            answered[r] = 1;
            missing--;
        }
        if (changed) publish();
        if (missing == 0) break;
        if (comm_now_s() > rv->deadline) {
            char ranks[2048] = "", detail[4096] = "";
            for (int r = 1; r < world; r++) {
                if (answered[r]) continue;
                size_t at = strlen(ranks);
                snprintf(ranks + at, sizeof(ranks) - at, "%s%d", ranks[0] ? ", " : "", r);
                if (!seen[r]) continue;
                const RendezvousCard* c = &cards[r];
                rendezvous_who(c->host, c->pid, who, sizeof(who));
                at = strlen(detail);
                if (rendezvous_gone(rv, c))
                    snprintf(detail + at, sizeof(detail) - at,
                             "\n  %s.rank%d is a file of an earlier job: its process (%s) no "
                             "longer runs",
                             rv->base, r, who);
                else
                    snprintf(detail + at, sizeof(detail) - at,
                             "\n  rank %d's card (%s, one of %d ranks) never answered: a file an "
                             "earlier job left on another host, or a rank that stopped",
                             r, who, c->world);
            }
            rendezvous_watch_others(rv, true);
            snprintf(detail + strlen(detail), sizeof(detail) - strlen(detail), "%s", rv->others);
            rendezvous_fail(rv,
                            "rank%s %s of %d did not join the rendezvous in %s within %g s "
                            "(--comm-timeout)%s",
                            strchr(ranks, ',') ? "s" : "", ranks, world, rv->dir, rv->timeout_s,
                            detail);
        }
        rendezvous_watch_others(rv, false);
        comm_backoff(&sleep_ns);
    }
    offer.go = 1;
    publish();
    *id = offer.id;
}

// The side of a rank > 0: answers the offers that list its card, and returns with the NCCL id
// once one of them is complete (see above).
inline void rendezvous_join(Rendezvous* rv, ncclUniqueId* id) {
    const int rank = rv->card.rank, world = rv->card.world;
    RendezvousOffer offer, listed;  // the offer read last, the last one that listed this rank
    memset(&listed, 0, sizeof(listed));
    std::vector<uint64_t> nonces;
    char who[200];
    long sleep_ns = 50000;
    for (;;) {
        rendezvous_check_card(rv);
        const bool have = rendezvous_read_offer(rv->offer_path, &offer, &nonces);
        if (have && rank < offer.world && nonces[rank] == rv->card.nonce) {
            listed = offer;
            if (rv->card.session != offer.session) {  // the answer
                rv->card.session = offer.session;
                rendezvous_write(rv, rv->card_path, &rv->card, sizeof(rv->card));
            }
            if (offer.go && offer.world == world) {
                *id = offer.id;
                rv->card.joined = 1;
                rendezvous_write(rv, rv->card_path, &rv->card, sizeof(rv->card));
                return;
            }
        } else if (!have && listed.session != 0) {  // rank 0 gave up after it listed this rank
            rendezvous_who(listed.host, listed.pid, who, sizeof(who));
            if (listed.world != world)
                rendezvous_fail(rv,
                                "rank 0 (%s) was started as one of %d ranks, this rank as one of "
                                "%d: the launcher's WORLD_SIZE (or SLURM_NTASKS) differs between "
                                "them",
                                who, listed.world, world);
            rendezvous_fail(rv,
                            "rank 0 (%s) ended the rendezvous before it completed: see its "
                            "message",
                            who);
        }
        if (comm_now_s() > rv->deadline) {
            char detail[4096];
            if (!have) {
                snprintf(detail, sizeof(detail),
                         "there is no offer of rank 0 (%s): is rank 0 running, with the same "
                         "--rendezvous folder and job id?",
                         rv->offer_path);
            } else {
                const char* mismatch =
                    "is for another number of ranks: the launcher's WORLD_SIZE (or SLURM_NTASKS) "
                    "differs between rank 0 and this rank";
                const char* why =
                    "does not list this rank: a file of an earlier job, or rank 0 has not found "
                    "this rank's card";
                if (listed.session == offer.session)  // rank 0 runs: it read this rank's card
                    why = offer.world != world ? mismatch
                                               : "lists this rank, but other ranks did not answer "
                                                 "it (see rank 0's message)";
                else if (process_gone(offer.host, (long)offer.pid, offer.start, rv->card.host))
                    why = "is a file of an earlier job: its process no longer runs";
                else if (offer.world != world) why = mismatch;
                snprintf(detail, sizeof(detail), "the offer there (%s, for %d ranks) %s",
                         rendezvous_who(offer.host, offer.pid, who, sizeof(who)), offer.world, why);
            }
            rendezvous_watch_others(rv, true);
            snprintf(detail + strlen(detail), sizeof(detail) - strlen(detail), "%s", rv->others);
            rendezvous_fail(rv,
                            "no complete offer from rank 0 in %s within %g s (--comm-timeout): %s",
                            rv->dir, rv->timeout_s, detail);
        }
        rendezvous_watch_others(rv, false);
        comm_backoff(&sleep_ns);
    }
}

// Rank 0, once every rank has joined: deletes its offer and marks its card joined.
inline void rendezvous_joined_rank0(Rendezvous* rv) {
    RendezvousOffer o;
    std::vector<uint64_t> nonces;
    if (rendezvous_read_offer(rv->offer_path, &o, &nonces) && o.session == rv->session)
        unlink(rv->offer_path);
    rv->card.joined = 1;
    rendezvous_write(rv, rv->card_path, &rv->card, sizeof(rv->card));
}

// The NCCL id of an environment launch, through the rendezvous in `dir`; rv keeps what
// comm_rendezvous_cleanup needs once ncclCommInitRank has returned.
inline void comm_id_by_files(const Comm* comm, const char* dir, Rendezvous* rv, ncclUniqueId* id) {
    memset(rv, 0, sizeof(*rv));
    struct stat st;
    if (strlen(dir) >= sizeof(rv->dir) - 64 || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "error: rank %d: --rendezvous %s is not a folder\n", comm->rank, dir);
        exit(EXIT_FAILURE);
    }
    snprintf(rv->dir, sizeof(rv->dir), "%s", dir);
    rendezvous_job(rv->job, sizeof(rv->job));
    snprintf(rv->base, sizeof(rv->base), "%s/train_gpt_rendezvous_%s", dir, rv->job);
    snprintf(rv->card_path, sizeof(rv->card_path), "%s.rank%d", rv->base, comm->rank);
    snprintf(rv->offer_path, sizeof(rv->offer_path), "%s.id", rv->base);
    rv->timeout_s = comm->all.timeout_s;
    rv->deadline = comm_now_s() + rv->timeout_s;
    RendezvousCard* c = &rv->card;
    memcpy(c->magic, RENDEZVOUS_MAGIC, sizeof(c->magic));
    c->rank = comm->rank;
    c->world = comm->world;
    c->local_rank = comm->local_rank;
    c->pid = (int64_t)getpid();
    c->start = process_start_time((long)getpid());
    c->nonce = rendezvous_random();
    if (gethostname(c->host, sizeof(c->host) - 1) != 0) snprintf(c->host, sizeof(c->host), "?");
    rendezvous_claim(rv);
    if (comm->rank == 0) rendezvous_offer(rv, id);
    else rendezvous_join(rv, id);
}
#endif

inline void comm_barrier(const CommGroup* g, const char* what);

// Sets up this process's place in the run and selects its GPU. Call first in main, before any
// other CUDA call. Every wait for the other ranks, from here on, ends after timeout_s seconds.
// rendezvous: the folder of an environment launch (nullptr or "" when there is none).
inline void comm_init(Comm* comm, int argc, char** argv, double timeout_s, const char* rendezvous) {
    comm_single_process(comm, timeout_s);
    int env_rank = 0, env_world = 1, env_local = 0;
    const int mpi_ranks = mpi_launcher_world_size();
    const bool by_env = mpi_ranks == 0 && env_launch(&env_rank, &env_world, &env_local);
#ifndef MULTI_GPU
    (void)argc;
    (void)argv;
    (void)rendezvous;
    if (mpi_ranks > 1 || (by_env && env_world > 1)) {
        fprintf(stderr,
                "error: started as one of %d ranks, but this binary was built without "
                "multi-GPU support (-DMULTI_GPU, NCCL and MPI): build it where nccl.h and "
                "mpicxx exist, or run a single process\n",
                mpi_ranks > 1 ? mpi_ranks : env_world);
        exit(EXIT_FAILURE);
    }
#else
    // From here every wait for the other ranks is watched (MPI's start-up included).
    if (mpi_ranks > 0 || (by_env && env_world > 1)) comm_watchdog_start(timeout_s);
    if (mpi_ranks > 0) {
        comm_wait_begin(COMM_WAIT_MPI, "MPI's start-up (MPI_Init_thread, MPI_Comm_split_type)",
                        nullptr);
        // SERIALIZED: the watchdog may call MPI_Abort (never while the main thread is in MPI)
        int provided = MPI_THREAD_SINGLE;
        MPI_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided));
        CommWatchdog* w = comm_watchdog();
        comm_lock_or_park(w);
        w->mpi_serialized = provided >= MPI_THREAD_SERIALIZED;
        w->lock.unlock();
        // Errors come back as codes, so MPI_CHECK can say where they happened.
        MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        comm->launch = LAUNCH_MPI;
        MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &comm->rank));
        MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &comm->world));
        comm_watchdog_identify(comm->rank, 0);
        MPI_Comm node;  // the ranks that share this node's memory, i.e. its GPUs
        MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, comm->rank,
                                      MPI_INFO_NULL, &node));
        MPI_CHECK(MPI_Comm_rank(node, &comm->local_rank));
        MPI_CHECK(MPI_Comm_size(node, &comm->local_world));
        MPI_CHECK(MPI_Comm_free(&node));
        comm_wait_end();
    } else if (by_env && env_world > 1) {  // one rank started this way is a single process
        comm->launch = LAUNCH_ENV;
        comm->rank = env_rank;
        comm->world = env_world;
        comm->local_rank = env_local;
        comm->local_world =
            launcher_env_int("LOCAL_WORLD_SIZE", launcher_env_int("SLURM_NTASKS_PER_NODE", 0));
        if (rendezvous == nullptr || rendezvous[0] == '\0') {
            fprintf(stderr,
                    "error: rank %d of %d was started without MPI (by environment variables): "
                    "give every rank --rendezvous DIR, a folder all of them can write, where "
                    "they meet\n",
                    comm->rank, comm->world);
            exit(EXIT_FAILURE);
        }
    }
    if (comm->launch == LAUNCH_NONE) return;
    int devices = 0;
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    if (comm->local_rank >= devices) {
        fprintf(stderr,
                "error: rank %d is process %d of %d on its node, but the node has %d GPUs: "
                "start at most one process per GPU\n",
                comm->rank, comm->local_rank + 1, comm->local_world, devices);
        exit(EXIT_FAILURE);
    }
    CUDA_CHECK(cudaSetDevice(comm->local_rank));
    comm_watchdog_identify(comm->rank, comm->local_rank);

    CommGroup* all = &comm->all;
    all->rank = comm->rank;
    all->size = comm->world;
    all->world_rank = comm->rank;
    ncclUniqueId id;  // rank 0 makes the id that names the communicator; everyone joins it
    if (comm->launch == LAUNCH_MPI) {
        comm_wait_begin(COMM_WAIT_MPI, "the broadcast of the NCCL id at start-up (MPI)", nullptr);
        comm_id_by_mpi(comm, &id);
        comm_wait_end();
    } else {
        comm->rendezvous = (Rendezvous*)calloc(1, sizeof(Rendezvous));
        comm_id_by_files(comm, rendezvous, comm->rendezvous, &id);
    }
    ncclComm_t nccl;
    comm_wait_begin(COMM_WAIT_CALL, "ncclCommInitRank (every rank joining the communicator)",
                    nullptr);
    NCCL_CHECK(ncclCommInitRank(&nccl, all->size, id, all->rank));
    comm_wait_end();
    comm_group_attach(all, nccl);
    // every rank has joined, so has read the offer: rank 0 deletes it and marks its card
    if (comm->rendezvous && comm->rank == 0) rendezvous_joined_rank0(comm->rendezvous);
#endif
}

inline void comm_group_free(CommGroup* g) {
#ifdef MULTI_GPU
    if (g->nccl) {
        // The group's queued collectives first, watched; then the watchdog forgets the
        // communicator (and its finished watches) and the finalization has a call's deadline.
        comm_wait_begin(COMM_WAIT_STREAM, "the collectives queued before freeing a communicator",
                        nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        comm_wait_end();
        CommWatchdog* w = comm_watchdog();
        comm_lock_or_park(w);
        for (size_t i = 0; i < w->comms.size(); i++)
            if (w->comms[i].nccl == g->nccl) w->comms.erase(w->comms.begin() + i--);
        for (size_t i = 0; i < w->watches.size(); i++) {
            if (w->watches[i].nccl != g->nccl) continue;
            w->spare_events.push_back(w->watches[i].start);
            w->spare_events.push_back(w->watches[i].end);
            w->watches.erase(w->watches.begin() + i--);
        }
        w->lock.unlock();
        comm_wait_begin(COMM_WAIT_CALL, "ncclCommFinalize", nullptr);
        NCCL_CHECK(ncclCommFinalize(g->nccl));
        NCCL_CHECK(ncclCommDestroy(g->nccl));
        comm_wait_end();
        g->nccl = nullptr;
        CUDA_CHECK(cudaFree(g->scratch));
        CUDA_CHECK(cudaStreamDestroy(g->host_stream));
        free(g->traffic);
        g->traffic = nullptr;
    }
#else
    (void)g;
#endif
}

// Frees the groups, ends MPI (MPI_Finalize waits for every rank: a watched call) and stops the
// watchdog. Every rank must call it.
inline void comm_destroy(Comm* comm) {
    comm_group_free(&comm->all);
#ifdef MULTI_GPU
    if (comm->launch == LAUNCH_MPI) {
        comm_wait_begin(COMM_WAIT_MPI, "MPI_Finalize (every rank ending)", nullptr);
        MPI_CHECK(MPI_Finalize());
        comm_wait_end();
    }
    if (comm->launch != LAUNCH_NONE) comm_watchdog_stop();
    if (comm->rendezvous) comm_rendezvous_cleanup(comm->rendezvous);
    free(comm->rendezvous);
    comm->rendezvous = nullptr;
#endif
    comm->launch = LAUNCH_NONE;
}

// Splits `parent` into groups of the ranks that pass the same color (>= 0); ranks are numbered
// in the order of (key, parent rank). Every rank of parent must call it.
inline void comm_split(const CommGroup* parent, int color, int key, CommGroup* out) {
    memset(out, 0, sizeof(*out));
    out->size = 1;
    out->world_rank = parent->world_rank;
    out->timeout_s = parent->timeout_s;
#ifdef MULTI_GPU
    if (parent->nccl == nullptr) return;
    // ncclCommSplit blocks until the ranks of parent join: a barrier with a deadline first
    // shows that every one has come this far.
    comm_barrier(parent, "the barrier before splitting a communicator");
    ncclComm_t nccl;
    comm_wait_begin(COMM_WAIT_CALL, "ncclCommSplit (every rank joining the new groups)",
                    parent->nccl);
    NCCL_CHECK(ncclCommSplit(parent->nccl, color, key, &nccl, nullptr));
    comm_wait_end();
    NCCL_CHECK(ncclCommUserRank(nccl, &out->rank));
    NCCL_CHECK(ncclCommCount(nccl, &out->size));
    comm_group_attach(out, nccl);
#else
    (void)color;
    (void)key;
#endif
}

// A group of this rank alone (no tensor, context or pipeline parallelism; tests, sampling).
inline const CommGroup* comm_group_of_one() {
    static const CommGroup one = {0, 1, 0, 300.0};
    return &one;
}

// The groups of a grid that are not comm->all or a group of one (ParallelDims points at them).
struct GridGroups {
    CommGroup tp_group, cp_group, pp_group, dp_group, shard_group;
};

// Makes dims's groups for `rank` in `made` and points dims at them, in the order tp, cp, pp, dp,
// shard: split from comm->all when comm is given (rank is then comm->rank; every rank calls it),
// else only their shapes, with the deadline timeout_s (a plan: no collective is made). A group
// of one rank is comm_group_of_one(), one of every rank comm->all; with cp 1 the shard group is
// the data-parallel one. Free the groups with comm_grid_free.
inline void comm_grid_groups(const Comm* comm, int rank, double timeout_s, ParallelDims* dims,
                             GridGroups* made) {
    memset(made, 0, sizeof(*made));
    const GridCoords c = grid_coords(dims, rank);
    // a group of `size` ranks: those whose place in the other dimensions is `others` (the color),
    // numbered by `key`, this rank's place in the group
    auto group = [&](CommGroup* g, int size, GridCoords others, int key) -> const CommGroup* {
        if (size == 1) return comm_group_of_one();
        if (comm && size == comm->world) return &comm->all;
        if (comm) {
            comm_split(&comm->all, grid_rank(dims, others), key, g);
        } else {
            g->rank = key, g->size = size;
            g->world_rank = rank;
            g->timeout_s = timeout_s;
        }
        return g;
    };
    dims->tp_group =
        group(&made->tp_group, dims->tp, GridCoords{c.dp_rank, c.pp_rank, c.cp_rank, 0}, c.tp_rank);
    dims->cp_group =
        group(&made->cp_group, dims->cp, GridCoords{c.dp_rank, c.pp_rank, 0, c.tp_rank}, c.cp_rank);
    dims->pp_group =
        group(&made->pp_group, dims->pp, GridCoords{c.dp_rank, 0, c.cp_rank, c.tp_rank}, c.pp_rank);
    dims->dp_group =
        group(&made->dp_group, dims->dp, GridCoords{0, c.pp_rank, c.cp_rank, c.tp_rank}, c.dp_rank);
    dims->shard_group = dims->cp == 1 ? dims->dp_group
                                      : group(&made->shard_group, dims->dp * dims->cp,
                                              GridCoords{0, c.pp_rank, 0, c.tp_rank},
                                              c.dp_rank * dims->cp + c.cp_rank);
}

inline void comm_grid_free(GridGroups* made) {
    CommGroup* groups[] = {&made->tp_group, &made->cp_group, &made->pp_group, &made->dp_group,
                           &made->shard_group};
    for (CommGroup* g : groups) comm_group_free(g);
}

// ---------------------------------------------------------------------------------------------
// Device collectives, queued on `stream` after the work already there, each counted in the
// group's traffic (CommTraffic) as the bytes a rank sends when a ring carries it (nccl-tests'
// bus-bandwidth convention): with S the bytes of the whole (unsharded) buffer and N ranks,
// all-reduce 2(N-1)/N S, reduce-scatter and all-gather (N-1)/N S, reduce and broadcast S.
// average: ncclAvg (the mean over the ranks), else ncclSum.

inline void comm_count(const CommGroup* g, CommKind kind, size_t whole_bytes) {
    if (g->traffic == nullptr) return;
    const double n = g->size;
    const double factor = kind == COMM_ALL_REDUCE                                  ? 2 * (n - 1) / n
                          : kind == COMM_REDUCE_SCATTER || kind == COMM_ALL_GATHER ? (n - 1) / n
                                                                                   : 1.0;
    g->traffic->bytes[kind] += factor * (double)whole_bytes;
    g->traffic->calls[kind]++;
}

#ifdef MULTI_GPU
inline ncclDataType_t nccl_type_of(const float*) { return ncclFloat32; }
inline ncclDataType_t nccl_type_of(const __nv_bfloat16*) { return ncclBfloat16; }
inline ncclDataType_t nccl_type_of(const uint8_t*) { return ncclUint8; }  // FP8 bytes
inline ncclDataType_t nccl_type_of(const unsigned*) { return ncclUint32; }
#endif

// Whether g has no communicator (one rank, or a build without NCCL): then every collective's
// result is the rank's own data, and comm_local_result makes it.
inline bool comm_is_local(const CommGroup* g) {
#ifdef MULTI_GPU
    return g->nccl == nullptr;
#else
    (void)g;
    return true;
#endif
}

template <class T>
void comm_local_result(const T* send, T* recv, size_t n, cudaStream_t stream) {
    if (send != recv)
        CUDA_CHECK(cudaMemcpyAsync(recv, send, n * sizeof(T), cudaMemcpyDeviceToDevice, stream));
}

// How an all-reduce combines the ranks' values.
enum CommReduceOp { COMM_SUM, COMM_AVG, COMM_MAX };

// In place on buf (n elements).
template <class T>  // float or __nv_bfloat16 (uint8_t: gathers and broadcasts only)
void comm_allreduce(const CommGroup* g, T* buf, size_t n, CommReduceOp op, cudaStream_t stream) {
#ifdef MULTI_GPU
    if (g->nccl == nullptr) return;
    const ncclRedOp_t nccl_op = op == COMM_SUM ? ncclSum : op == COMM_AVG ? ncclAvg : ncclMax;
    comm_count(g, COMM_ALL_REDUCE, n * sizeof(T));
    comm_watched(g, COMM_ALL_REDUCE, n * sizeof(T), stream, nullptr, [&] {
        return ncclAllReduce(buf, buf, n, nccl_type_of(buf), nccl_op, g->nccl, stream);
    });
#else
    (void)g, (void)buf, (void)n, (void)op, (void)stream;
#endif
}
template <class T>
void comm_allreduce_avg(const CommGroup* g, T* buf, size_t n, cudaStream_t stream) {
    comm_allreduce(g, buf, n, COMM_AVG, stream);
}
template <class T>
void comm_allreduce_sum(const CommGroup* g, T* buf, size_t n, cudaStream_t stream) {
    comm_allreduce(g, buf, n, COMM_SUM, stream);
}
template <class T>
void comm_allreduce_max(const CommGroup* g, T* buf, size_t n, cudaStream_t stream) {
    comm_allreduce(g, buf, n, COMM_MAX, stream);
}

// recv (count elements) = the reduction of every rank's send[rank * count .. +count).
template <class T>
void comm_reduce_scatter(const CommGroup* g, const T* send, T* recv, size_t count, bool average,
                         cudaStream_t stream) {
    if (comm_is_local(g)) return comm_local_result(send, recv, count, stream);
#ifdef MULTI_GPU
    comm_count(g, COMM_REDUCE_SCATTER, count * g->size * sizeof(T));
    comm_watched(g, COMM_REDUCE_SCATTER, count * g->size * sizeof(T), stream, nullptr, [&] {
        return ncclReduceScatter(send, recv, count, nccl_type_of(send), average ? ncclAvg : ncclSum,
                                 g->nccl, stream);
    });
#else
    (void)average;
#endif
}

// recv[r * count .. +count) = rank r's send (count elements); in place when
// send == recv + rank * count.
template <class T>
void comm_allgather(const CommGroup* g, const T* send, T* recv, size_t count, cudaStream_t stream) {
    if (comm_is_local(g)) return comm_local_result(send, recv, count, stream);
#ifdef MULTI_GPU
    comm_count(g, COMM_ALL_GATHER, count * g->size * sizeof(T));
    comm_watched(g, COMM_ALL_GATHER, count * g->size * sizeof(T), stream, nullptr, [&] {
        return ncclAllGather(send, recv, count, nccl_type_of(send), g->nccl, stream);
    });
#endif
}

// recv on rank `root` (n elements) = the reduction of every rank's send; recv is not used on
// the other ranks.
template <class T>
void comm_reduce(const CommGroup* g, const T* send, T* recv, size_t n, int root, bool average,
                 cudaStream_t stream) {
    if (comm_is_local(g)) return comm_local_result(send, recv, n, stream);
#ifdef MULTI_GPU
    comm_count(g, COMM_REDUCE, n * sizeof(T));
    comm_watched(g, COMM_REDUCE, n * sizeof(T), stream, nullptr, [&] {
        return ncclReduce(send, recv, n, nccl_type_of(send), average ? ncclAvg : ncclSum, root,
                          g->nccl, stream);
    });
#else
    (void)root, (void)average;
#endif
}

// recv (n elements) on every rank = send of rank `root` (send is read on the root only; in
// place when send == recv).
template <class T>
void comm_broadcast_device(const CommGroup* g, const T* send, T* recv, size_t n, int root,
                           cudaStream_t stream) {
    if (comm_is_local(g)) return comm_local_result(send, recv, n, stream);
#ifdef MULTI_GPU
    comm_count(g, COMM_BROADCAST, n * sizeof(T));
    comm_watched(g, COMM_BROADCAST, n * sizeof(T), stream, nullptr, [&] {
        return ncclBroadcast(send, recv, n, nccl_type_of(recv), root, g->nccl, stream);
    });
#else
    (void)root;
#endif
}

// One point-to-point transfer: `n` elements of `buf` sent to (or received from) rank `peer`.
template <class T>
struct CommP2p {
    T* buf;
    size_t n;
    int peer;
    bool send;
};

// Point to point: the `count` sends and receives of `ops` in one NCCL group on `stream`, so that
// none of them waits for another (pipeline parallelism: a stage sends its output while it
// receives its neighbours'). The sends count in g's traffic (COMM_SEND_RECV). `what` names the
// transfers in a deadline's message; wait for them with comm_sync.
template <class T>
void comm_exchange(const CommGroup* g, const CommP2p<T>* ops, int count, cudaStream_t stream,
                   const char* what) {
#ifdef MULTI_GPU
    size_t sent = 0, bytes = 0;
    for (int k = 0; k < count; k++) {
        bytes += ops[k].n * sizeof(T);
        if (ops[k].send) sent += ops[k].n * sizeof(T);
    }
    if (sent > 0) comm_count(g, COMM_SEND_RECV, sent);
    comm_watched(g, COMM_SEND_RECV, bytes, stream, what, [&] {
        NCCL_CHECK(ncclGroupStart());
        for (int k = 0; k < count; k++) {
            const CommP2p<T>* o = &ops[k];
            if (o->send)
                NCCL_CHECK(ncclSend(o->buf, o->n, nccl_type_of(o->buf), o->peer, g->nccl, stream));
            else NCCL_CHECK(ncclRecv(o->buf, o->n, nccl_type_of(o->buf), o->peer, g->nccl, stream));
        }
        return ncclGroupEnd();
    });
#else
    (void)g, (void)ops, (void)count, (void)stream, (void)what;
#endif
}

// ---------------------------------------------------------------------------------------------
// Host collectives: small values, synchronous, through the group's scratch buffer. Every rank
// of the group must call them.

// all[r * bytes .. (r+1) * bytes) becomes rank r's `mine` on every rank (all: size * bytes).
inline void comm_allgather_host(const CommGroup* g, const void* mine, size_t bytes, void* all,
                                const char* what) {
    if (g->size == 1) {
        memmove(all, mine, bytes);
        return;
    }
#ifdef MULTI_GPU
    if (bytes * g->size > COMM_SCRATCH_BYTES) {
        fprintf(stderr,
                "error: %s: %zu bytes from each of %d ranks do not fit the %zu-byte "
                "scratch buffer\n",
                what, bytes, g->size, COMM_SCRATCH_BYTES);
        exit(EXIT_FAILURE);
    }
    comm_wait_begin(COMM_WAIT_STREAM, what, nullptr);
    CUDA_CHECK(cudaMemcpyAsync(g->scratch + g->rank * bytes, mine, bytes, cudaMemcpyHostToDevice,
                               g->host_stream));
    comm_watched(g, COMM_ALL_GATHER, bytes * g->size, g->host_stream, what, [&] {
        return ncclAllGather(g->scratch + g->rank * bytes, g->scratch, bytes, ncclUint8, g->nccl,
                             g->host_stream);
    });
    CUDA_CHECK(
        cudaMemcpyAsync(all, g->scratch, bytes * g->size, cudaMemcpyDeviceToHost, g->host_stream));
    CUDA_CHECK(cudaStreamSynchronize(g->host_stream));
    comm_wait_end();  // stops here if the gather was aborted: its bytes are never used
#else
    (void)what;
#endif
}

// values[0..count) become their sums over the ranks, added in rank order (the same bits on
// every rank).
inline void comm_sum_scalars(const CommGroup* g, double* values, int count) {
    if (g->size == 1) return;
    std::vector<double> all((size_t)count * g->size);
    comm_allgather_host(g, values, count * sizeof(double), all.data(),
                        "a sum of host values over the ranks");
    for (int i = 0; i < count; i++) {
        double sum = 0.0;
        for (int r = 0; r < g->size; r++) sum += all[(size_t)r * count + i];
        values[i] = sum;
    }
}

// The mean of `value` over the ranks of g (e.g. each rank's loss on its part of the batch).
inline double comm_mean(const CommGroup* g, double value) {
    comm_sum_scalars(g, &value, 1);
    return value / g->size;
}

// Copies `bytes` of host memory at buf from rank `root` of g to every other rank.
inline void comm_broadcast(const CommGroup* g, void* buf, size_t bytes, int root) {
#ifdef MULTI_GPU
    if (g->nccl == nullptr) return;
    const char* what = "a broadcast of host data";
    comm_wait_begin(COMM_WAIT_STREAM, what, nullptr);
    for (size_t done = 0; done < bytes; done += COMM_SCRATCH_BYTES) {
        const size_t n = bytes - done < COMM_SCRATCH_BYTES ? bytes - done : COMM_SCRATCH_BYTES;
        uint8_t* part = (uint8_t*)buf + done;
        if (g->rank == root)
            CUDA_CHECK(
                cudaMemcpyAsync(g->scratch, part, n, cudaMemcpyHostToDevice, g->host_stream));
        comm_watched(g, COMM_BROADCAST, n, g->host_stream, what, [&] {
            return ncclBroadcast(g->scratch, g->scratch, n, ncclUint8, root, g->nccl,
                                 g->host_stream);
        });
        CUDA_CHECK(cudaMemcpyAsync(part, g->scratch, n, cudaMemcpyDeviceToHost, g->host_stream));
        CUDA_CHECK(cudaStreamSynchronize(g->host_stream));
    }
    comm_wait_end();  // stops here if a piece was aborted, as above
#else
    (void)g;
    (void)buf;
    (void)bytes;
    (void)root;
#endif
}

// Returns once every rank of g has called it; `what` names it in a timeout's message.
inline void comm_barrier(const CommGroup* g, const char* what) {
    if (g->size == 1) return;
    std::vector<uint8_t> all(g->size);
    const uint8_t here = 1;
    comm_allgather_host(g, &here, 1, all.data(), what);
}

// ---------------------------------------------------------------------------------------------
// Replica check: data-parallel ranks must hold bit-identical parameters. A 64-bit hash of a
// device buffer (after the work queued on `stream`), gathered from every rank: any single
// differing 8-byte word changes the hash, since each step h = (h ^ word) * odd is a bijection.

constexpr size_t HASH_STAGE_BYTES = (size_t)16 << 20;

// One step of the hash over n bytes (the last word of an odd size zero-padded).
inline uint64_t hash_words(uint64_t h, const uint8_t* bytes, size_t n) {
    for (size_t w = 0; w < n; w += 8) {
        uint64_t word = 0;
        memcpy(&word, bytes + w, n - w < 8 ? n - w : 8);
        h = (h ^ word) * 0x100000001b3ull;  // FNV-1a's prime, per word
    }
    return h;
}

constexpr uint64_t HASH_BASIS = 0xcbf29ce484222325ull;  // FNV-1a's offset basis

inline uint64_t host_buffer_hash(const void* buf, size_t bytes) {
    return hash_words(HASH_BASIS ^ bytes, (const uint8_t*)buf, bytes);
}

// The same hash of a device buffer, after the work queued on `stream`.
inline uint64_t device_buffer_hash(const void* buf, size_t bytes, cudaStream_t stream) {
    uint8_t* stage = (uint8_t*)MALLOC_CHECK(HASH_STAGE_BYTES);
    uint64_t h = HASH_BASIS ^ bytes;
    for (size_t done = 0; done < bytes;) {  // stages of a multiple of 8 bytes: the same words
        const size_t n = bytes - done < HASH_STAGE_BYTES ? bytes - done : HASH_STAGE_BYTES;
        CUDA_CHECK(
            cudaMemcpyAsync(stage, (const uint8_t*)buf + done, n, cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        h = hash_words(h, stage, n);
        done += n;
    }
    free(stage);
    return h;
}

// Gathers every rank's hash `mine`: hashes[r] is rank r's (g->size entries, the same on every
// rank). Returns true when all are equal.
inline bool comm_hashes_agree(const CommGroup* g, uint64_t mine, uint64_t* hashes) {
    comm_allgather_host(g, &mine, sizeof(mine), hashes, "the replica check (parameter hashes)");
    for (int r = 1; r < g->size; r++)
        if (hashes[r] != hashes[0]) return false;
    return true;
}

// Hashes the buffer on every rank of g, as comm_hashes_agree.
inline bool comm_replicas_agree(const CommGroup* g, const void* buf, size_t bytes, uint64_t* hashes,
                                cudaStream_t stream) {
    return comm_hashes_agree(g, device_buffer_hash(buf, bytes, stream), hashes);
}
