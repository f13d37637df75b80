// Tests llmc/comm.cuh, each check against values computed here from what every rank knows:
// - comm_init: rank, world and node-local rank equal what the launcher says (Open MPI's
//   OMPI_COMM_WORLD_* variables), the GPU is the local rank's; without a launcher the process
//   is rank 0 of 1 and MPI is never initialized;
// - comm_allreduce_sum of float and bf16 on small integers: exact, so it must equal the sum
//   computed here bit for bit; comm_allreduce_avg of float and bf16 on random values: within
//   the rounding bound (n + 1) * u * mean|x| of the float64 mean (u = 2^-24 float, 2^-8 bf16);
//   every rank gets the same bits; guard elements after each buffer stay untouched;
// - comm_sum_scalars and comm_mean: exact on values chosen to be exact in binary;
// - comm_broadcast from the last rank; comm_barrier holds every rank until the slowest one
//   (rank 0 sleeps 0.3 s first) arrives;
// - comm_split by parity, keys reversing the order: group rank and size as MPI_Comm_split
//   defines them, and a sum over each half equals the sum of that half's ranks;
// - comm_replicas_agree: true on identical buffers, false when one byte of one rank differs
//   (the last byte of an odd-sized buffer: the hash must see the zero-padded tail word);
// - timeouts: with `--hang host|device|finalize` the last rank stops (SIGSTOP to itself) and
//   the others wait for it in a host collective (comm_mean), a device all-reduce (comm_sync) or
//   MPI_Finalize (comm_destroy); the watchdog must end the whole job after --timeout seconds
//   with a message naming the collective (for the device one, also the wait it is under) or
//   the call; with `--hang killed` the last rank passes a barrier and is killed (SIGKILL), and
//   rank 0 then waits for it in a device all-reduce, the watchdog held off (its lock taken)
//   until the peer's death has failed the communicator: the barrier has finished but is still
//   in the watchdog's list, and the message must name the all-reduce, not the barrier (it did
//   when a pipeline's receive failed right after a checkpoint's barrier);
// - the launch by environment variables (torchrun's RANK/WORLD_SIZE/LOCAL_RANK, Slurm's
//   SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID) with a --rendezvous folder: the same checks, the
//   folder empty afterwards; a rank that never arrives and a rank 0 that never publishes the id
//   end with a message naming who is missing; no folder, and no local rank, are errors (more
//   cases of the rendezvous, stale files and duplicated ranks among them, are in
//   scripts/test_bad_inputs.py).
// Multi-rank runs need one GPU per rank, hence cpu-only; comm_single.cu includes this file to
// run the same checks on a build without -DMULTI_GPU.
//! cucc: -DMULTI_GPU --mpi -lnccl
//! cpu-only
//! run: ./prog => pass /all comm checks passed on 1 ranks \(launched: no\)/
//! run: mpirun -np 1 ./prog => pass /all comm checks passed on 1 ranks \(launched: yes\)/
//! run: mpirun -np 2 ./prog => pass /all comm checks passed on 2 ranks/
//! run: mpirun -np 3 ./prog => pass /all comm checks passed on 3 ranks/
//! run: CUCC_DEVICES=2 mpirun -np 3 ./prog => fail /rank 2 is process 3 of 3 on its node, but the node has 2 GPUs/
//! run: timeout 60 mpirun -np 2 ./prog --timeout 1 --hang host => fail /rank 0: a sum of host values over the ranks \(all_gather #\d+, 16 bytes over a group of 2 ranks\) did not finish within 1 s \(--comm-timeout\)/
//! run: timeout 60 mpirun -np 3 ./prog --timeout 1 --hang device => fail /rank [01]: all_reduce #\d+ \(4096 bytes over a group of 3 ranks\) did not finish within 1 s \(--comm-timeout\) while this rank waited for the test's all-reduce/
//! run: timeout 60 mpirun -np 2 ./prog --timeout 1 --hang finalize => fail /rank 0: MPI_Finalize \(every rank ending\) did not finish within 1 s \(--comm-timeout\)/
//! run: d=$(mktemp -d) && (RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 ./prog --rendezvous $d --hang killed & RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 timeout 60 ./prog --rendezvous $d --hang killed; s=$?; wait; exit $s) => fail /(?s)\A(?!.*failed during the test's barrier)(?=.*error: rank 0: NCCL failed during all_reduce #\d+ \(4096 bytes over a group of 2 ranks\): remote error.*rank 1 exited)/
//! run: d=$(mktemp -d) && (RANK=2 WORLD_SIZE=3 LOCAL_RANK=2 ./prog --rendezvous $d & RANK=1 WORLD_SIZE=3 LOCAL_RANK=1 ./prog --rendezvous $d & RANK=0 WORLD_SIZE=3 LOCAL_RANK=0 ./prog --rendezvous $d; s=$?; wait; test $s = 0 && test -z "$(ls $d)") => pass /all comm checks passed on 3 ranks \(launched: yes, by environment variables\)/
//! run: d=$(mktemp -d) && (SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_LOCALID=1 SLURM_JOB_ID=7 ./prog --rendezvous $d & SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=0 SLURM_JOB_ID=7 ./prog --rendezvous $d) => pass /all comm checks passed on 2 ranks/
//! run: d=$(mktemp -d) && RANK=0 WORLD_SIZE=3 LOCAL_RANK=0 timeout 60 ./prog --rendezvous $d --timeout 1 => fail /rank 0: ranks 1, 2 of 3 did not join the rendezvous in .* within 1 s/
//! run: d=$(mktemp -d) && RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 timeout 60 ./prog --rendezvous $d --timeout 1 => fail /rank 1: no complete offer from rank 0 in .* within 1 s/
//! run: RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 ./prog => fail /give every rank --rendezvous DIR/
//! run: RANK=1 WORLD_SIZE=2 ./prog => fail /the launcher set RANK and WORLD_SIZE but not LOCAL_RANK/

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <chrono>
#include <vector>

#include "../../../llmc/comm.cuh"

static int failures = 0;
static int g_rank = 0;

static void expect(bool ok, const char* what, double got, double want) {
    if (!ok) {
        failures++;
        printf("FAIL rank %d: %s: got %.9g, expected %.9g\n", g_rank, what, got, want);
    }
}

static int env_int(const char* name, int fallback) {
    const char* v = getenv(name);
    return v ? atoi(v) : fallback;
}

// A reproducible value in [-1, 1) for (rank, index).
static float uniform(int rank, size_t i) {
    return (float)(hash_u32((uint32_t)i * 2654435761u ^ hash_u32((uint32_t)rank + 17u)) >> 8) /
               8388608.0f -
           1.0f;
}

static float to_float(float x) { return x; }
static float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// Fills rank r's n elements with value(r, i), adds `guard` sentinel elements after them, runs
// the all-reduce, and checks the result against the float64 reduction of every rank's values:
// exactly when `exact`, else within the bound (n + 1) * u * mean|x|.
template <class T>
static void check_allreduce(const Comm* c, const char* what, size_t n, bool average, bool exact,
                            double unit_roundoff, float (*value)(int, size_t)) {
    const size_t guard = 64;
    const T sentinel = T(-12345.0f);
    std::vector<T> host(n + guard, sentinel);
    for (size_t i = 0; i < n; i++) host[i] = T(value(c->rank, i));
    T* dev;
    CUDA_CHECK(cudaMalloc(&dev, (n + guard) * sizeof(T)));
    CUDA_CHECK(cudaMemcpy(dev, host.data(), (n + guard) * sizeof(T), cudaMemcpyHostToDevice));
    if (average) comm_allreduce_avg(&c->all, dev, n, (cudaStream_t)0);
    else comm_allreduce_sum(&c->all, dev, n, (cudaStream_t)0);
    CUDA_CHECK(cudaMemcpy(host.data(), dev, (n + guard) * sizeof(T), cudaMemcpyDeviceToHost));
    const int ranks = c->all.size;
    size_t bad = 0;
    double worst_got = 0, worst_want = 0;
    for (size_t i = 0; i < n; i++) {
        double sum = 0.0, abs_sum = 0.0;
        for (int r = 0; r < ranks; r++) {
            double x = to_float(T(value(r, i)));  // the value as rank r stored it
            sum += x;
            abs_sum += fabs(x);
        }
        const double want = average ? sum / ranks : sum;
        const double bound = exact ? 0.0 : (ranks + 1) * unit_roundoff * abs_sum / ranks;
        const double got = to_float(host[i]);
        if (!(fabs(got - want) <= bound)) {
            if (bad++ == 0) worst_got = got, worst_want = want;
        }
    }
    expect(bad == 0, what, worst_got, worst_want);
    size_t touched = 0;
    for (size_t i = n; i < n + guard; i++) touched += to_float(host[i]) != to_float(sentinel);
    expect(touched == 0, "guard elements after the buffer untouched", (double)touched, 0);
    uint64_t* hashes = (uint64_t*)MALLOC_CHECK(ranks * sizeof(uint64_t));
    expect(comm_replicas_agree(&c->all, dev, n * sizeof(T), hashes, (cudaStream_t)0),
           "every rank has the same result bits", 0, 1);
    free(hashes);
    CUDA_CHECK(cudaFree(dev));
}

static float small_integer(int rank, size_t i) { return (float)((int)(i % 17) - 8 + (rank % 3)); }
static float random_value(int rank, size_t i) { return uniform(rank, i); }

static void check_scalars(const Comm* c) {
    const int n = c->all.size;
    double v[3] = {1.0 * c->rank, 0.5, -0.25 * c->rank};
    comm_sum_scalars(&c->all, v, 3);
    const double ranks_sum = n * (n - 1) / 2.0;
    expect(v[0] == ranks_sum, "comm_sum_scalars [0]", v[0], ranks_sum);
    expect(v[1] == 0.5 * n, "comm_sum_scalars [1]", v[1], 0.5 * n);
    expect(v[2] == -0.25 * ranks_sum, "comm_sum_scalars [2]", v[2], -0.25 * ranks_sum);
    const double mean = comm_mean(&c->all, c->rank + 0.25);
    expect(mean == (n - 1) / 2.0 + 0.25, "comm_mean", mean, (n - 1) / 2.0 + 0.25);
}

static void check_broadcast_and_barrier(const Comm* c) {
    const int root = c->all.size - 1;
    char text[37];
    memset(text, 0, sizeof(text));
    snprintf(text, sizeof(text), "rank %d says hello", c->rank);
    comm_broadcast(&c->all, text, sizeof(text), root);
    char want[37];
    memset(want, 0, sizeof(want));
    snprintf(want, sizeof(want), "rank %d says hello", root);
    expect(memcmp(text, want, sizeof(want)) == 0, "comm_broadcast from the last rank", 0, 1);

    comm_barrier(&c->all, "the test's barrier");
    auto start = std::chrono::steady_clock::now();
    if (c->rank == 0) usleep(300000);
    comm_barrier(&c->all, "the test's barrier");
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    expect(waited >= 0.25, "comm_barrier waits for the slowest rank (seconds)", waited, 0.3);
}

static void check_split(const Comm* c) {
    const int n = c->all.size, color = c->rank % 2;
    CommGroup half;
    comm_split(&c->all, color, -c->rank, &half);
    // Members: the ranks of my parity; keys reverse them, so the highest parent rank is rank 0.
    int size = 0, rank = 0;
    float members_sum = 0.0f;
    for (int r = 0; r < n; r++) {
        if (r % 2 != color) continue;
        size++;
        members_sum += (float)r;
        if (r > c->rank) rank++;
    }
    expect(half.size == size, "comm_split group size", half.size, size);
    expect(half.rank == rank, "comm_split group rank", half.rank, rank);
    float* dev;
    const float mine = (float)c->rank;
    CUDA_CHECK(cudaMalloc(&dev, sizeof(float)));
    CUDA_CHECK(cudaMemcpy(dev, &mine, sizeof(float), cudaMemcpyHostToDevice));
    comm_allreduce_sum(&half, dev, 1, (cudaStream_t)0);
    float got;
    CUDA_CHECK(cudaMemcpy(&got, dev, sizeof(float), cudaMemcpyDeviceToHost));
    expect(got == members_sum, "sum of the parent ranks over a split group", got, members_sum);
    expect(comm_mean(&half, 1.0) == 1.0, "comm_mean over a split group", comm_mean(&half, 1.0),
           1.0);
    CUDA_CHECK(cudaFree(dev));
    comm_group_free(&half);
}

static void check_replicas(const Comm* c) {
    const int n = c->all.size;
    const size_t bytes = 12345;  // odd: the hash pads the last word
    std::vector<uint8_t> host(bytes);
    for (size_t i = 0; i < bytes; i++) host[i] = (uint8_t)(i * 7 + 3);
    uint8_t* dev;
    CUDA_CHECK(cudaMalloc(&dev, bytes));
    CUDA_CHECK(cudaMemcpy(dev, host.data(), bytes, cudaMemcpyHostToDevice));
    std::vector<uint64_t> same(n), changed(n);
    expect(comm_replicas_agree(&c->all, dev, bytes, same.data(), (cudaStream_t)0), "replicas agree",
           0, 1);
    for (int r = 1; r < n; r++)
        expect(same[r] == same[0], "equal buffers hash equally", (double)r, 0);
    if (c->rank == n - 1) host[bytes - 1] ^= 1;
    CUDA_CHECK(cudaMemcpy(dev, host.data(), bytes, cudaMemcpyHostToDevice));
    const bool agree = comm_replicas_agree(&c->all, dev, bytes, changed.data(), (cudaStream_t)0);
    expect(agree == (n == 1), "one flipped bit on the last rank is seen", agree, n == 1);
    expect(changed[n - 1] != same[n - 1], "the last rank's hash changed with its last byte", 0, 1);
    for (int r = 0; r < n - 1; r++)
        expect(changed[r] == same[r], "other ranks' hashes unchanged", (double)r, 0);
    CUDA_CHECK(cudaFree(dev));
}

#ifdef MULTI_GPU
// The last rank passes a barrier and dies; rank 0 fails in the all-reduce that follows, which
// the watchdog sees only after the communicator has failed (see the header).
static void killed_after_barrier(Comm* c) {
    comm_barrier(&c->all, "the test's barrier");
    if (c->rank == c->world - 1) raise(SIGKILL);
    float* buf;
    CUDA_CHECK(cudaMalloc(&buf, 1024 * sizeof(float)));
    CommWatchdog* w = comm_watchdog();
    w->lock.lock();  // (recursive: this thread's comm calls take it too)
    comm_allreduce_sum(&c->all, buf, 1024, (cudaStream_t)0);
    ncclResult_t async = ncclSuccess;
    // the CPU runtime runs the all-reduce when the stream is queried; it fails once it sees the
    // peer's process gone
    for (int i = 0; i < 3000 && async == ncclSuccess; i++) {
        const cudaError_t q = cudaStreamQuery((cudaStream_t)0);
        if (q != cudaErrorNotReady) CUDA_CHECK(q);
        NCCL_CHECK(ncclCommGetAsyncError(c->all.nccl, &async));
        comm_sleep_s(0.01);
    }
    w->lock.unlock();
    comm_sync(&c->all, (cudaStream_t)0, "the test's all-reduce");
}
#endif

// The last rank stops itself; the others wait for it in a collective that must time out.
static void hang(Comm* c, const char* where) {
#ifdef MULTI_GPU
    if (strcmp(where, "killed") == 0) killed_after_barrier(c);
#endif
    if (c->rank == c->world - 1) raise(SIGSTOP);
    if (strcmp(where, "host") == 0) {
        comm_mean(&c->all, 1.0);
    } else if (strcmp(where, "finalize") == 0) {
        comm_destroy(c);
    } else {
        float* buf;
        CUDA_CHECK(cudaMalloc(&buf, 1024 * sizeof(float)));
        comm_allreduce_sum(&c->all, buf, 1024, (cudaStream_t)0);
        comm_sync(&c->all, (cudaStream_t)0, "the test's all-reduce");
    }
    printf("rank %d: the wait returned although a rank is stopped\n", c->rank);
    exit(0);
}

int main(int argc, char** argv) {
    // [--rendezvous DIR] [--timeout SECONDS] [--hang host|device|finalize]
    const char* rendezvous = nullptr;
    const char* hang_in = nullptr;
    double timeout = 60.0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--rendezvous") == 0) rendezvous = argv[i + 1];
        else if (strcmp(argv[i], "--timeout") == 0) timeout = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--hang") == 0) hang_in = argv[i + 1];
    }
    Comm c;
    comm_init(&c, argc, argv, timeout, rendezvous);
    g_rank = c.rank;
    if (hang_in) hang(&c, hang_in);
    // What the launcher said: Open MPI's variables, or torchrun's, or Slurm's.
    const bool slurm = getenv("SLURM_NTASKS") != nullptr;
    const int env_world = slurm ? env_int("SLURM_NTASKS", 1) : env_int("WORLD_SIZE", 1);
    const bool by_env = getenv("OMPI_COMM_WORLD_SIZE") == nullptr && env_world > 1;
    const int launched_world = by_env ? env_world : env_int("OMPI_COMM_WORLD_SIZE", 0);
    const int launched_rank = !by_env ? env_int("OMPI_COMM_WORLD_RANK", 0)
                              : slurm ? env_int("SLURM_PROCID", 0)
                                      : env_int("RANK", 0);
    const int local_rank = !by_env ? env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0)
                           : slurm ? env_int("SLURM_LOCALID", 0)
                                   : env_int("LOCAL_RANK", 0);
#ifdef MULTI_GPU
    const bool launched = launched_world > 0;
    const char* build = by_env ? ", by environment variables" : "";
    int mpi_initialized = 0;
    MPI_CHECK(MPI_Initialized(&mpi_initialized));
    expect(mpi_initialized == (launched && !by_env), "MPI initialized exactly when launched by MPI",
           mpi_initialized, launched && !by_env);
#else
    const bool launched = false;  // a single-process build never starts MPI
    const char* build = ", single-process build";
#endif
    const LaunchKind kind = !launched ? LAUNCH_NONE : by_env ? LAUNCH_ENV : LAUNCH_MPI;
    expect(c.launch == kind, "launch kind", c.launch, kind);
    expect(c.world == (launched ? launched_world : 1), "world", c.world,
           launched ? launched_world : 1);
    expect(c.rank == launched_rank, "rank", c.rank, launched_rank);
    expect(c.local_rank == local_rank, "local rank", c.local_rank, local_rank);
    if (!by_env)
        expect(c.local_world == env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1), "local world",
               c.local_world, env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1));
    expect(c.all.rank == c.rank && c.all.size == c.world,
           "the group of all ranks spans every rank", c.all.size, c.world);
    int device = -1;
    CUDA_CHECK(cudaGetDevice(&device));
    expect(device == local_rank, "device = local rank", device, local_rank);

    const size_t n = 100003;  // not a multiple of anything NCCL splits on
    check_allreduce<float>(&c, "float sum of small integers (exact)", n, false, true, 0.0,
                           small_integer);
    check_allreduce<__nv_bfloat16>(&c, "bf16 sum of small integers (exact)", n, false, true, 0.0,
                                   small_integer);
    check_allreduce<float>(&c, "float average within (n+1) u mean|x|", n, true, false, 0x1p-24,
                           random_value);
    check_allreduce<__nv_bfloat16>(&c, "bf16 average within (n+1) u mean|x|", n, true, false,
                                   0x1p-8, random_value);
    check_scalars(&c);
    check_broadcast_and_barrier(&c);
    check_split(&c);
    check_replicas(&c);

    const int world = c.world;
    comm_destroy(&c);
    if (failures) {
        printf("%d comm checks FAILED on rank %d\n", failures, g_rank);
        return 1;
    }
    if (g_rank == 0)
        printf("all comm checks passed on %d ranks (launched: %s%s)\n", world,
               launched ? "yes" : "no", build);
    return 0;
}
