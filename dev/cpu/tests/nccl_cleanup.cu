// The CPU NCCL leaves no files in $CUCC_NCCL_DIR behind ranks that are killed (kill -9):
//   survivor  a forked rank posts a contribution and kills itself; the surviving rank's next
//             collective fails with ncclRemoteError, and by then it has unlinked everything
//             (its own unread posts and the dead rank's);
//   stale     every rank is killed: a forked rank 0 sends a message nobody receives, another
//             process dies while creating a communicator; files are left. The first
//             communicator a later process makes in that directory removes them, and leaves
//             the file of a live process alone;
//   mpi-kill  under mpirun, rank 1 posts a message and kills itself and mpirun ends rank 0;
//   check     then a new process's first communicator leaves the directory empty.
//! cucc: -lnccl --mpi
//! cpu-only
//! run: d=build/cpu/tests/nccl_cleanup_survivor; rm -rf $d && mkdir -p $d && CUCC_NCCL_DIR=$d ./prog survivor => pass /all nccl cleanup checks passed/
//! run: d=build/cpu/tests/nccl_cleanup_stale; rm -rf $d && mkdir -p $d && CUCC_NCCL_DIR=$d ./prog stale => pass /all nccl cleanup checks passed/
//! run: d=build/cpu/tests/nccl_cleanup_mpi; rm -rf $d && mkdir -p $d && (CUCC_NCCL_DIR=$d mpirun -np 2 ./prog mpi-kill; true) && test -n "$(ls $d)" && CUCC_NCCL_DIR=$d ./prog check => pass /all nccl cleanup checks passed/
#include <dirent.h>
#include <mpi.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include "nccl_test_util.h"

static std::string dir() { return getenv("CUCC_NCCL_DIR") ? getenv("CUCC_NCCL_DIR") : ""; }

static std::vector<std::string> files() {
    std::vector<std::string> names;
    if (DIR* d = opendir(dir().c_str())) {
        while (dirent* e = readdir(d))
            if (e->d_name[0] != '.') names.push_back(e->d_name);
        closedir(d);
    }
    return names;
}

static std::string listing() {
    std::string s;
    for (const std::string& f : files()) s += (s.empty() ? "" : " ") + f;
    return s.empty() ? "empty" : s;
}

// One rank of a communicator of `nranks` in this process, on device `rank`.
static ncclComm_t join(const ncclUniqueId& id, int nranks, int rank) {
    CUDA_CHECK(cudaSetDevice(rank));
    ncclComm_t comm;
    NCCL_CHECK(ncclCommInitRank(&comm, nranks, id, rank));
    return comm;
}

// Sends 64 floats to `peer`, which never receives them (the send polls once, which posts the
// message file), then kills this process.
static void send_and_die(ncclComm_t comm, int peer) {
    float* d;
    CUDA_CHECK(cudaMalloc(&d, 64 * sizeof(float)));
    NCCL_CHECK(ncclSend(d, 64, ncclFloat32, peer, comm, 0));
    cudaStreamQuery(0);
    raise(SIGKILL);
}

// Starts the collective (its op polls once, which posts this rank's data) and returns.
static void post_allreduce(ncclComm_t comm, float* d, int n) {
    NCCL_CHECK(ncclAllReduce(d, d, n, ncclFloat32, ncclSum, comm, 0));
    cudaStreamQuery(0);
}

static void survivor() {
    ncclUniqueId id;
    NCCL_CHECK(ncclGetUniqueId(&id));
    pid_t child = fork();
    if (child == 0) {
        ncclComm_t comm = join(id, 2, 1);
        float* d;
        CUDA_CHECK(cudaMalloc(&d, 64 * sizeof(float)));
        NCCL_CHECK(ncclAllReduce(d, d, 64, ncclFloat32, ncclSum, comm, 0));
        CUDA_CHECK(cudaDeviceSynchronize());
        post_allreduce(comm, d, 64);
        raise(SIGKILL);
    }
    ncclComm_t comm = join(id, 2, 0);
    float* d;
    CUDA_CHECK(cudaMalloc(&d, 64 * sizeof(float)));
    NCCL_CHECK(ncclAllReduce(d, d, 64, ncclFloat32, ncclSum, comm, 0));
    CUDA_CHECK(cudaDeviceSynchronize());
    int status = 0;
    waitpid(child, &status, 0);
    expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "rank 1 was killed after posting",
           listing());
    // The dead rank's contribution is there: this call completes; the next one cannot.
    NCCL_CHECK(ncclAllReduce(d, d, 64, ncclFloat32, ncclSum, comm, 0));
    CUDA_CHECK(cudaDeviceSynchronize());
    NCCL_CHECK(ncclAllReduce(d, d, 64, ncclFloat32, ncclSum, comm, 0));
    ncclResult_t async = wait_for_async_error(comm, 0, 30);  // the failed call never completes
    expect(async == ncclRemoteError, "the survivor's next collective fails with ncclRemoteError");
    expect(files().empty(), "nothing is left in the directory", listing());
    NCCL_CHECK(ncclCommAbort(comm));
}

static void stale() {
    // A process that dies while it waits for the second rank of a new communicator. It starts
    // first: the cleanup it does when it attaches must run before there is anything to clean.
    ncclUniqueId lonely;
    NCCL_CHECK(ncclGetUniqueId(&lonely));
    pid_t creator = fork();
    if (creator == 0) {
        join(lonely, 2, 0);
        _exit(0);
    }
    for (int i = 0; i < 2000 && files().empty(); i++) usleep(5000);
    // Rank 0 sends a message rank 1 never receives, then both are killed.
    ncclUniqueId id;
    NCCL_CHECK(ncclGetUniqueId(&id));
    pid_t ranks[2];
    for (int r = 0; r < 2; r++) {
        ranks[r] = fork();
        if (ranks[r] == 0) {
            ncclComm_t comm = join(id, 2, r);
            if (r == 0) send_and_die(comm, 1);
            raise(SIGKILL);
        }
    }
    for (pid_t p : ranks) waitpid(p, nullptr, 0);
    kill(creator, SIGKILL);
    waitpid(creator, nullptr, 0);
    size_t left = files().size();
    expect(left >= 2, "killed ranks left a message file and a control file", listing());

    // The file of a live process (this one) must survive the cleanup.
    std::string live =
        dir() + "/cucc-nccl-0123456789abcdef0123456789abcdef." + std::to_string(getpid()) + "-c0-0";
    FILE* f = fopen(live.c_str(), "w");
    if (f) fclose(f);
    ncclUniqueId fresh;
    NCCL_CHECK(ncclGetUniqueId(&fresh));
    ncclComm_t comm = join(fresh, 1, 0);
    std::vector<std::string> after = files();
    expect(after.size() == 1 && dir() + "/" + after[0] == live,
           "a new communicator removed the dead processes' files, not the live one's", listing());
    unlink(live.c_str());
    NCCL_CHECK(ncclCommDestroy(comm));
}

// Under mpirun: rank 1 posts a message nobody receives and kills itself; mpirun ends rank 0.
static int mpi_kill(int* argc, char*** argv) {
    MPI_Init(argc, argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    ncclUniqueId id;
    if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm = join(id, 2, rank);
    if (rank == 1) send_and_die(comm, 0);
    pause();  // until mpirun ends this rank
    return 0;
}

int main(int argc, char** argv) {
    std::string mode = argc > 1 ? argv[1] : "";
    if (dir().empty()) {
        fprintf(stderr, "set CUCC_NCCL_DIR to a scratch directory\n");
        return 2;
    }
    if (mode == "survivor") survivor();
    else if (mode == "stale") stale();
    else if (mode == "mpi-kill") return mpi_kill(&argc, &argv);
    else if (mode == "check") {
        ncclUniqueId id;
        NCCL_CHECK(ncclGetUniqueId(&id));
        ncclComm_t comm = join(id, 1, 0);
        NCCL_CHECK(ncclCommDestroy(comm));
        expect(files().empty(), "a new process's communicator removed what the killed job left",
               listing());
    } else {
        fprintf(stderr, "usage: %s survivor|stale|mpi-kill|check\n", argv[0]);
        return 2;
    }
    return test_report("nccl cleanup");
}
