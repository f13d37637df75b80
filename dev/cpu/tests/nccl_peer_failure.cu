// A collective never completes when a peer did not take part in it, whether the peer died or
// left: it fails, as NCCL's does. ncclCommGetAsyncError reports the error while the collective,
// its stream and everything queued after it stay blocked, until ncclCommAbort ends them; the
// bytes the missing peer would have sent are never written. (A collective that completed would
// let its caller go on as if every rank had called it: the barrier before a checkpoint's
// manifest passed while a killed rank had never written its shard.) ncclCommFinalize of the
// failed communicator returns the error rather than wait for the blocked collective.
// Each case runs two ranks as two processes (this one and a fork). Rank 0 calls the barrier of
// llmc/comm.cuh's comm_barrier, an AllGather of one byte per rank; rank 1 does not, and
//   killed  is killed (SIGKILL) first;
//   left    destroys its communicator first (ncclCommFinalize, ncclCommDestroy).
// After each case the directory of the CPU NCCL's files (CUCC_NCCL_DIR, a fresh one per run) is
// empty. Fork and CUCC_NCCL_DIR: cpu-only.
//! cucc: -lnccl
//! cpu-only
//! run: ./prog killed => pass /(?s)\A(?=.*rank 1 exited)(?=.*all nccl peer failure \(killed\) checks passed)/
//! run: ./prog left => pass /(?s)\A(?=.*rank 1 had already finalized)(?=.*all nccl peer failure \(left\) checks passed)/

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include "nccl_test_util.h"

static int files_in(const char* dir) {
    int n = 0;
    if (DIR* d = opendir(dir)) {
        while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
        closedir(d);
    }
    return n;
}

static void rank0(ncclComm_t comm, const std::string& which) {
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    uint8_t* gathered;  // rank r's byte at [r]; 0xee: not written
    CUDA_CHECK(cudaMalloc(&gathered, 2));
    CUDA_CHECK(cudaMemset(gathered, 0xee, 2));
    CUDA_CHECK(cudaMemset(gathered, 1, 1));
    NCCL_CHECK(ncclAllGather(gathered, gathered, 1, ncclUint8, comm, stream));
    expect(wait_for_async_error(comm, stream, 30) == ncclRemoteError,
           "the barrier without rank 1 fails: ncclCommGetAsyncError gives ncclRemoteError");
    expect(ncclCommFinalize(comm) == ncclRemoteError,
           "ncclCommFinalize of the failed communicator returns the error, without waiting");
    expect_stuck_until_abort(comm, stream, "the barrier without rank 1 (" + which + ")");
    uint8_t host[2];
    CUDA_CHECK(cudaMemcpy(host, gathered, 2, cudaMemcpyDeviceToHost));
    expect(host[0] == 1 && host[1] == 0xee, "rank 1's byte was never written",
           std::to_string(host[0]) + " " + std::to_string(host[1]));
    CUDA_CHECK(cudaFree(gathered));
    CUDA_CHECK(cudaStreamDestroy(stream));
}

int main(int argc, char** argv) {
    const std::string which = argc == 2 ? argv[1] : "";
    if (which != "killed" && which != "left") {
        fprintf(stderr, "usage: %s killed|left\n", argv[0]);
        return 2;
    }
    char dir[] = "/tmp/nccl_peer_failure_XXXXXX";
    if (!mkdtemp(dir)) {
        printf("FAIL: mkdtemp\n");
        return 1;
    }
    setenv("CUCC_NCCL_DIR", dir, 1);
    ncclUniqueId id;
    NCCL_CHECK(ncclGetUniqueId(&id));  // no CUDA call yet: each process starts its own runtime
    fflush(stdout);
    const pid_t child = fork();
    if (child < 0) {
        printf("FAIL: fork\n");
        return 1;
    }
    const int rank = child == 0 ? 1 : 0;
    if (rank == 1) prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a failed rank 0
    CUDA_CHECK(cudaSetDevice(rank));
    ncclComm_t comm;
    NCCL_CHECK(ncclCommInitRank(&comm, 2, id, rank));
    if (rank == 1) {
        if (which == "killed") raise(SIGKILL);
        NCCL_CHECK(ncclCommFinalize(comm));
        NCCL_CHECK(ncclCommDestroy(comm));
        _exit(0);
    }
    rank0(comm, which);
    int status = 0;
    waitpid(child, &status, 0);
    expect(files_in(dir) == 0, "no file is left in CUCC_NCCL_DIR");
    rmdir(dir);
    return test_report(("nccl peer failure (" + which + ")").c_str());
}
