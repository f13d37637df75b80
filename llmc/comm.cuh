// llmc/comm.cuh: the processes of a run and the collectives between them. One process drives
// one GPU; processes are started by an MPI launcher (mpirun -np 8 ./train_gpt ..., or
// mpirun -H a:8,b:8 -np 16 across nodes). MPI only starts them and carries small host values
// (the NCCL id, scalars for the log, broadcasts, barriers); gradients travel through NCCL on
// the GPU's stream.
//
// Groups. A CommGroup is a set of ranks that run collectives together, with an MPI and an NCCL
// communicator. Today there is one, `dp` (data parallel: every rank holds the same parameters
// and reads its own part of each batch), spanning all ranks. Tensor parallelism adds a `tp`
// group: comm_split() cuts a group into sub-groups (ncclCommSplit + MPI_Comm_split), e.g.
// color = rank / tp for tp and color = rank % tp for dp, and ZeRO shards over `dp`.
//
// Builds and launches:
// - built with -DMULTI_GPU (the Makefile adds it, with MPI's flags and -lnccl, when the MPI and
//   NCCL headers exist) and launched by an MPI launcher: MPI_Init, one rank per process, the
//   GPU of the process's rank within its node (MPI_COMM_TYPE_SHARED), an NCCL communicator
//   over all ranks;
// - run without a launcher, or built without -DMULTI_GPU: a single process, rank 0 of 1, that
//   makes no MPI or NCCL call; collectives over one rank leave their data as it is. A binary
//   built without -DMULTI_GPU refuses to run as one of several ranks instead of training
//   alone.
//
// Determinism: NCCL gives every rank of an all-reduce the same bits (the CPU NCCL of dev/cpu
// also reduces in rank order, so runs repeat exactly); host scalars are gathered and summed in
// rank order on every rank, so they too are the same bits everywhere whatever MPI's algorithm.
//
// Errors: NCCL_CHECK and MPI_CHECK print the file, line and the library's message and end the
// process; the MPI launcher then ends the other ranks.
//
// Timeouts: no collective waits forever. A rank that dies is noticed by the launcher, which
// ends the job; a rank that hangs (stopped, deadlocked, or started with other flags and so
// making other calls) would leave the others waiting in their next collective. So every wait
// for another rank has a deadline, `timeout_s` seconds (--comm-timeout) from its start: host
// collectives are MPI's non-blocking ones polled with MPI_Test, device collectives are awaited
// by polling the stream (comm_sync) and NCCL's asynchronous error. A rank that reaches the
// deadline prints which collective it was waiting in and ends the whole job (ncclCommAbort,
// then MPI_Abort). The deadline must exceed the longest time one rank works while the others
// wait for it (rank 0 writing a checkpoint or a sample).
#pragma once

#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common.cuh"

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

struct CommGroup {
    int rank, size;    // this process's place in the group
    int world_rank;    // and in the whole job, for messages
    double timeout_s;  // deadline of every wait for the group's other ranks
#ifdef MULTI_GPU
    MPI_Comm mpi;     // host collectives; MPI_COMM_NULL in a single-process run
    ncclComm_t nccl;  // device collectives; nullptr in a single-process run
#endif
};

struct Comm {
    int rank, world;              // this process among all of them
    int local_rank, local_world;  // among the processes of its node: local_rank is its GPU
    bool launched;                // started by an MPI launcher (MPI is initialized)
    CommGroup dp;                 // data parallel: all ranks
};

// The number of processes an MPI launcher says it started (Open MPI, or any PMI launcher:
// MPICH's hydra, Slurm's srun --mpi=pmi2), 0 without one. PMIx-only launchers set PMIX_RANK.
inline int launcher_world_size() {
    const char* vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (const char* var : vars)
        if (const char* value = getenv(var)) return atoi(value);
    return getenv("PMIX_RANK") ? 1 : 0;
}

inline void comm_single_process(Comm* comm, double timeout_s) {
    comm->rank = 0;
    comm->world = 1;
    comm->local_rank = 0;
    comm->local_world = 1;
    comm->launched = false;
    comm->dp.rank = 0;
    comm->dp.size = 1;
    comm->dp.world_rank = 0;
    comm->dp.timeout_s = timeout_s;
#ifdef MULTI_GPU
    comm->dp.mpi = MPI_COMM_NULL;
    comm->dp.nccl = nullptr;
#endif
}

// ---------------------------------------------------------------------------------------------
// Waiting with a deadline.

inline double comm_now_s() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

// Sleeps a little longer each time it is called in one wait (50 us doubling to 2 ms), so a
// short wait answers fast and a long one costs little CPU.
inline void comm_backoff(long* sleep_ns) {
    timespec t = {0, *sleep_ns};
    nanosleep(&t, nullptr);
    *sleep_ns = *sleep_ns * 2 < 2000000 ? *sleep_ns * 2 : 2000000;
}

// The end of a collective that did not finish in time: says so and ends the whole job.
[[noreturn]] inline void comm_timed_out(const CommGroup* g, const char* what) {
    fprintf(stderr,
            "error: rank %d: %s did not finish within %g s (--comm-timeout): another rank died, "
            "hangs, or is busy for longer than that; ending the job\n",
            g->world_rank, what, g->timeout_s);
    fflush(stderr);
#ifdef MULTI_GPU
    if (g->nccl) ncclCommAbort(g->nccl);
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) MPI_Abort(MPI_COMM_WORLD, EXIT_FAILURE);
#endif
    exit(EXIT_FAILURE);
}

#ifdef MULTI_GPU
// Completes a non-blocking MPI operation of group g, or ends the job at the deadline.
inline void comm_wait_mpi(const CommGroup* g, MPI_Request* request, const char* what) {
    const double deadline = comm_now_s() + g->timeout_s;
    long sleep_ns = 50000;
    for (;;) {
        int done = 0;
        MPI_CHECK(MPI_Test(request, &done, MPI_STATUS_IGNORE));
        if (done) return;
        if (comm_now_s() > deadline) comm_timed_out(g, what);
        comm_backoff(&sleep_ns);
    }
}
#endif

// Waits until the work queued on `stream` (collectives of g included) is done, or ends the job
// when a collective of g fails or does not finish by the deadline. Without an NCCL
// communicator it is cudaStreamSynchronize.
inline void comm_sync(const CommGroup* g, cudaStream_t stream, const char* what) {
#ifdef MULTI_GPU
    if (g->nccl) {
        const double deadline = comm_now_s() + g->timeout_s;
        long sleep_ns = 50000;
        for (;;) {
            cudaError_t status = cudaStreamQuery(stream);
            if (status == cudaSuccess) return;
            if (status != cudaErrorNotReady) CUDA_CHECK(status);
            ncclResult_t async = ncclSuccess;
            NCCL_CHECK(ncclCommGetAsyncError(g->nccl, &async));
            if (async != ncclSuccess && async != ncclInProgress) {
                fprintf(stderr, "error: rank %d: NCCL failed during %s: %s (%s)\n", g->world_rank,
                        what, ncclGetErrorString(async), ncclGetLastError(g->nccl));
                comm_timed_out(g, what);
            }
            if (comm_now_s() > deadline) comm_timed_out(g, what);
            comm_backoff(&sleep_ns);
        }
    }
#else
    (void)g;
    (void)what;
#endif
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

// Sets up this process's place in the run and selects its GPU. Call first in main, before any
// other CUDA call. Every wait for the other ranks, from here on, ends after timeout_s seconds.
inline void comm_init(Comm* comm, int argc, char** argv, double timeout_s) {
    comm_single_process(comm, timeout_s);
    const int launched_ranks = launcher_world_size();
#ifndef MULTI_GPU
    (void)argc;
    (void)argv;
    if (launched_ranks > 1) {
        fprintf(stderr,
                "error: started as one of %d ranks, but this binary was built without "
                "multi-GPU support (-DMULTI_GPU, NCCL and MPI): build it where nccl.h and "
                "mpicxx exist, or run a single process\n",
                launched_ranks);
        exit(EXIT_FAILURE);
    }
#else
    if (launched_ranks == 0) return;
    MPI_CHECK(MPI_Init(&argc, &argv));
    // Errors come back as codes, so MPI_CHECK can say where they happened.
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    comm->launched = true;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &comm->rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &comm->world));
    MPI_Comm node;  // the ranks that share this node's memory, i.e. its GPUs
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, comm->rank, MPI_INFO_NULL,
                                  &node));
    MPI_CHECK(MPI_Comm_rank(node, &comm->local_rank));
    MPI_CHECK(MPI_Comm_size(node, &comm->local_world));
    MPI_CHECK(MPI_Comm_free(&node));
    int devices = 0;
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    if (comm->local_rank >= devices) {
        fprintf(stderr,
                "error: rank %d is process %d of %d on its node, but the node has %d GPUs: "
                "start at most one process per GPU (mpirun -H host:%d,...)\n",
                comm->rank, comm->local_rank + 1, comm->local_world, devices, devices);
        exit(EXIT_FAILURE);
    }
    CUDA_CHECK(cudaSetDevice(comm->local_rank));

    CommGroup* dp = &comm->dp;
    dp->rank = comm->rank;
    dp->size = comm->world;
    dp->world_rank = comm->rank;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dp->mpi));
    ncclUniqueId id;  // rank 0 makes the id that names the communicator; everyone joins it
    if (comm->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    // Every rank that has the id is alive and calls ncclCommInitRank next.
    MPI_Request request;
    MPI_CHECK(MPI_Ibcast(&id, sizeof(id), MPI_BYTE, 0, dp->mpi, &request));
    comm_wait_mpi(dp, &request, "the broadcast of the NCCL id (start-up)");
    NCCL_CHECK(ncclCommInitRank(&dp->nccl, dp->size, id, dp->rank));
#endif
}

inline void comm_group_free(CommGroup* g) {
#ifdef MULTI_GPU
    if (g->nccl) {
        NCCL_CHECK(ncclCommFinalize(g->nccl));  // waits for the group's queued collectives
        NCCL_CHECK(ncclCommDestroy(g->nccl));
        g->nccl = nullptr;
    }
    if (g->mpi != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&g->mpi));
#else
    (void)g;
#endif
}

// Frees the groups and ends MPI. Every rank must call it.
inline void comm_destroy(Comm* comm) {
    comm_group_free(&comm->dp);
#ifdef MULTI_GPU
    if (comm->launched) MPI_CHECK(MPI_Finalize());
#endif
    comm->launched = false;
}

// Splits `parent` into groups of the ranks that pass the same color (>= 0); ranks are numbered
// in the order of (key, parent rank). Every rank of parent must call it.
inline void comm_barrier(const CommGroup* g, const char* what);

inline void comm_split(const CommGroup* parent, int color, int key, CommGroup* out) {
    out->rank = 0;
    out->size = 1;
    out->world_rank = parent->world_rank;
    out->timeout_s = parent->timeout_s;
#ifdef MULTI_GPU
    out->mpi = MPI_COMM_NULL;
    out->nccl = nullptr;
    if (parent->nccl == nullptr) return;
    // MPI_Comm_split has no non-blocking form: a barrier with a deadline first shows that every
    // rank has come this far.
    comm_barrier(parent, "the barrier before splitting a communicator");
    MPI_CHECK(MPI_Comm_split(parent->mpi, color, key, &out->mpi));
    MPI_CHECK(MPI_Comm_rank(out->mpi, &out->rank));
    MPI_CHECK(MPI_Comm_size(out->mpi, &out->size));
    NCCL_CHECK(ncclCommSplit(parent->nccl, color, key, &out->nccl, nullptr));
#else
    (void)parent;
    (void)color;
    (void)key;
#endif
}

// ---------------------------------------------------------------------------------------------
// Device collectives: in place on `buf` (n elements, device memory), queued on `stream` after
// the work already there. Gradients are averaged over the dp group with comm_allreduce_avg.

#ifdef MULTI_GPU
inline ncclDataType_t nccl_type_of(const float*) { return ncclFloat32; }
inline ncclDataType_t nccl_type_of(const __nv_bfloat16*) { return ncclBfloat16; }
#endif

template <class T>  // float or __nv_bfloat16
void comm_allreduce(const CommGroup* g, T* buf, size_t n, bool average, cudaStream_t stream) {
#ifdef MULTI_GPU
    if (g->nccl == nullptr) return;
    NCCL_CHECK(ncclAllReduce(buf, buf, n, nccl_type_of(buf), average ? ncclAvg : ncclSum, g->nccl,
                             stream));
#else
    (void)g;
    (void)buf;
    (void)n;
    (void)average;
    (void)stream;
#endif
}
template <class T>
void comm_allreduce_avg(const CommGroup* g, T* buf, size_t n, cudaStream_t stream) {
    comm_allreduce(g, buf, n, true, stream);
}
template <class T>
void comm_allreduce_sum(const CommGroup* g, T* buf, size_t n, cudaStream_t stream) {
    comm_allreduce(g, buf, n, false, stream);
}

// ---------------------------------------------------------------------------------------------
// Host collectives: small values, synchronous. Every rank of the group must call them.

// values[0..count) become their sums over the ranks, added in rank order (the same bits on
// every rank).
inline void comm_sum_scalars(const CommGroup* g, double* values, int count) {
#ifdef MULTI_GPU
    if (g->mpi == MPI_COMM_NULL) return;
    std::vector<double> all((size_t)count * g->size);
    MPI_Request request;
    MPI_CHECK(
        MPI_Iallgather(values, count, MPI_DOUBLE, all.data(), count, MPI_DOUBLE, g->mpi, &request));
    comm_wait_mpi(g, &request, "a sum of host values over the ranks (MPI all-gather)");
    for (int i = 0; i < count; i++) {
        double sum = 0.0;
        for (int r = 0; r < g->size; r++) sum += all[(size_t)r * count + i];
        values[i] = sum;
    }
#else
    (void)g;
    (void)values;
    (void)count;
#endif
}

// The mean of `value` over the ranks of g (e.g. each rank's loss on its part of the batch).
inline double comm_mean(const CommGroup* g, double value) {
    comm_sum_scalars(g, &value, 1);
    return value / g->size;
}

// Copies `bytes` of host memory at buf from rank `root` of g to every other rank.
inline void comm_broadcast(const CommGroup* g, void* buf, size_t bytes, int root) {
#ifdef MULTI_GPU
    if (g->mpi == MPI_COMM_NULL) return;
    if (bytes > (size_t)INT32_MAX) {
        fprintf(stderr, "error: comm_broadcast of %zu bytes: at most %d at a time\n", bytes,
                INT32_MAX);
        exit(EXIT_FAILURE);
    }
    MPI_Request request;
    MPI_CHECK(MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, g->mpi, &request));
    comm_wait_mpi(g, &request, "a broadcast of host data (MPI)");
#else
    (void)g;
    (void)buf;
    (void)bytes;
    (void)root;
#endif
}

// Returns once every rank of g has called it; `what` names it in a timeout's message.
inline void comm_barrier(const CommGroup* g, const char* what) {
#ifdef MULTI_GPU
    if (g->mpi == MPI_COMM_NULL) return;
    MPI_Request request;
    MPI_CHECK(MPI_Ibarrier(g->mpi, &request));
    comm_wait_mpi(g, &request, what);
#else
    (void)g;
    (void)what;
#endif
}

// ---------------------------------------------------------------------------------------------
// Replica check: data-parallel ranks must hold bit-identical parameters. A 64-bit hash of a
// device buffer (after the work queued on `stream`), gathered from every rank: any single
// differing 8-byte word changes the hash, since each step h = (h ^ word) * odd is a bijection.

constexpr size_t HASH_STAGE_BYTES = (size_t)16 << 20;

inline uint64_t device_buffer_hash(const void* buf, size_t bytes, cudaStream_t stream) {
    uint64_t* stage = (uint64_t*)MALLOC_CHECK(HASH_STAGE_BYTES);
    uint64_t h = 0xcbf29ce484222325ull ^ bytes;  // FNV-1a's offset basis and prime, per word
    for (size_t done = 0; done < bytes;) {
        const size_t n = bytes - done < HASH_STAGE_BYTES ? bytes - done : HASH_STAGE_BYTES;
        memset(stage, 0, round_up(n, 8));  // the last word of an odd size is zero-padded
        CUDA_CHECK(
            cudaMemcpyAsync(stage, (const uint8_t*)buf + done, n, cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        for (size_t w = 0; w < ceil_div(n, 8); w++) h = (h ^ stage[w]) * 0x100000001b3ull;
        done += n;
    }
    free(stage);
    return h;
}

// Hashes the buffer on every rank of g; hashes[r] is rank r's hash (g->size entries, the same
// on every rank). Returns true when all are equal.
inline bool comm_replicas_agree(const CommGroup* g, const void* buf, size_t bytes, uint64_t* hashes,
                                cudaStream_t stream) {
    hashes[0] = device_buffer_hash(buf, bytes, stream);
#ifdef MULTI_GPU
    if (g->mpi != MPI_COMM_NULL) {
        const uint64_t mine = hashes[0];
        MPI_Request request;
        MPI_CHECK(
            MPI_Iallgather(&mine, 1, MPI_UINT64_T, hashes, 1, MPI_UINT64_T, g->mpi, &request));
        comm_wait_mpi(g, &request, "the replica check (MPI all-gather of parameter hashes)");
    }
#endif
    for (int r = 1; r < g->size; r++)
        if (hashes[r] != hashes[0]) return false;
    return true;
}
