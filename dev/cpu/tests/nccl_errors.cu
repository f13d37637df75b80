// Tests NCCL's error paths and communicators made without MPI. Every case is one run line:
//   --case args         argument checks on a one-rank communicator and ncclCommInitAll: each
//                       call returns the result code NCCL documents (invalid argument for NULL,
//                       host or too-small buffers, bad type/op/root/peer, bad ids and configs,
//                       a second ncclCommFinalize; invalid usage for ncclGroupEnd without
//                       ncclGroupStart, a duplicate device in ncclCommInitAll's devlist, a call
//                       on a finalized communicator; success for NULL in ncclCommDestroy,
//                       ncclCommFinalize and ncclCommAbort); a failed call inside a group fails
//                       ncclGroupEnd and drops the group.
// The other cases run two ranks as two processes (this one and a fork), the ncclUniqueId
// written to a file by rank 0 and read by rank 1 (no MPI):
//   --case file-id      AllReduce, Broadcast and send/recv between the two work;
//   --case mismatch     the ranks call AllReduce with different counts: both fail with
//                       ncclInvalidUsage (from ncclCommGetAsyncError) and say why on stderr;
//   --case op-mismatch  the same with different reduction ops;
//   --case peer-exit    rank 1 exits right after ncclCommInitRank: rank 0's AllReduce fails
//                       with ncclRemoteError instead of hanging, later calls return it too;
//   --case abort        rank 1 aborts its communicator with an AllReduce still queued: rank 0
//                       fails with ncclRemoteError;
//   --case timeout      rank 1 stays alive but never calls: with CUCC_NCCL_TIMEOUT=1 rank 0
//                       fails with ncclSystemError after about a second;
//   --case init-timeout rank 1 never calls ncclCommInitRank: rank 0's fails (ncclSystemError).
// A failed collective never completes (as NCCL's kernels spin): its stream stays busy until
// ncclCommAbort (nccl_test_util.h's expect_stuck_until_abort).
// After each two-rank case the directory of the CPU NCCL's files (CUCC_NCCL_DIR, a fresh one
// per run) must be empty again: no shared-memory file leaks, errors included.
// CPU-runtime specific (host pointers, ids, CUCC_NCCL_* variables), hence cpu-only.
//! cucc: -lnccl
//! cpu-only
//! run: ./prog --case args => pass /nccl errors case args passed/
//! run: ./prog --case file-id => pass /nccl errors case file-id passed/
//! run: ./prog --case mismatch => pass /(?s)\A(?=.*this rank called ncclAllReduce)(?=.*nccl errors case mismatch passed)/
//! run: ./prog --case op-mismatch => pass /nccl errors case op-mismatch passed/
//! run: ./prog --case peer-exit => pass /(?s)\A(?=.*rank 1 exited)(?=.*nccl errors case peer-exit passed)/
//! run: ./prog --case abort => pass /nccl errors case abort passed/
//! run: CUCC_NCCL_TIMEOUT=1 ./prog --case timeout => pass /nccl errors case timeout passed/
//! run: CUCC_NCCL_TIMEOUT=1 ./prog --case init-timeout => pass /nccl errors case init-timeout passed/

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <string>
#include <vector>
#include "nccl_test_util.h"

static int g_rank;

// Checks that a call returned `want`.
#define EXPECT_RESULT(call, want) expect_result((call), (want), #call)
static void expect_result(ncclResult_t got, ncclResult_t want, const char* what) {
    expect(got == want, what,
           "rank " + std::to_string(g_rank) + " got " + ncclGetErrorString(got) + ", want " +
               ncclGetErrorString(want));
}

static float* device_floats(size_t n, float value) {
    std::vector<float> h(n, value);
    float* d;
    CUDA_CHECK(cudaMalloc(&d, n * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

// ---------------------------------------------------------------------------------------------

static void case_args() {
    EXPECT_RESULT(ncclGetVersion(nullptr), ncclInvalidArgument);
    EXPECT_RESULT(ncclGetUniqueId(nullptr), ncclInvalidArgument);
    expect(strlen(ncclGetLastError(nullptr)) > 0, "ncclGetLastError has the last message");
    for (int r = 0; r < ncclNumResults; r++) {
        for (int s = 0; s < r; s++) {
            expect(strcmp(ncclGetErrorString((ncclResult_t)r),
                          ncclGetErrorString((ncclResult_t)s)) != 0,
                   "ncclGetErrorString: a distinct string per result");
        }
    }

    ncclUniqueId id, zero;
    memset(&zero, 0, sizeof(zero));
    NCCL_CHECK(ncclGetUniqueId(&id));
    ncclComm_t comm = nullptr;
    EXPECT_RESULT(ncclCommInitRank(nullptr, 1, id, 0), ncclInvalidArgument);
    EXPECT_RESULT(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument);
    EXPECT_RESULT(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument);
    EXPECT_RESULT(ncclCommInitRank(&comm, 2, id, -1), ncclInvalidArgument);
    EXPECT_RESULT(ncclCommInitRank(&comm, 1, zero, 0), ncclInvalidArgument);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.magic = 0;
    EXPECT_RESULT(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclInvalidArgument);
    ncclConfig_t bad_blocking = NCCL_CONFIG_INITIALIZER;
    bad_blocking.blocking = 2;
    EXPECT_RESULT(ncclCommInitRankConfig(&comm, 1, id, 0, &bad_blocking), ncclInvalidArgument);
    ncclConfig_t good = NCCL_CONFIG_INITIALIZER;
    NCCL_CHECK(ncclCommInitRankConfig(&comm, 1, id, 0, &good));

    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    float* buf = device_floats(10, 1.0f);
    std::vector<float> host(10, 1.0f);
    EXPECT_RESULT(ncclAllReduce(buf, buf, 10, ncclFloat32, ncclSum, nullptr, stream),
                  ncclInvalidArgument);
    EXPECT_RESULT(ncclAllReduce(nullptr, buf, 10, ncclFloat32, ncclSum, comm, stream),
                  ncclInvalidArgument);
    EXPECT_RESULT(ncclAllReduce(buf, nullptr, 10, ncclFloat32, ncclSum, comm, stream),
                  ncclInvalidArgument);
    EXPECT_RESULT(ncclAllReduce(host.data(), buf, 10, ncclFloat32, ncclSum, comm, stream),
                  ncclInvalidArgument);
    EXPECT_RESULT(ncclAllReduce(buf, host.data(), 10, ncclFloat32, ncclSum, comm, stream),
                  ncclInvalidArgument);
    EXPECT_RESULT(ncclAllReduce(buf, buf, 11, ncclFloat32, ncclSum, comm, stream),
                  ncclInvalidArgument);
    EXPECT_RESULT(ncclAllReduce(buf, buf, 10, ncclNumTypes, ncclSum, comm, stream),
                  ncclInvalidArgument);
    EXPECT_RESULT(ncclAllReduce(buf, buf, 10, ncclFloat32, ncclNumOps, comm, stream),
                  ncclInvalidArgument);
    EXPECT_RESULT(ncclAllReduce(buf, buf, 10, ncclFloat32, (ncclRedOp_t)-1, comm, stream),
                  ncclInvalidArgument);
    EXPECT_RESULT(ncclAllGather(buf, buf, 10, ncclFloat32, comm, stream), ncclSuccess);
    EXPECT_RESULT(ncclReduceScatter(buf, buf, 5, ncclFloat32, ncclSum, comm, stream), ncclSuccess);
    EXPECT_RESULT(ncclBroadcast(buf, buf, 10, ncclFloat32, 1, comm, stream), ncclInvalidArgument);
    EXPECT_RESULT(ncclBroadcast(buf, buf, 10, ncclFloat32, -1, comm, stream), ncclInvalidArgument);
    EXPECT_RESULT(ncclReduce(buf, buf, 10, ncclFloat32, ncclSum, 1, comm, stream),
                  ncclInvalidArgument);
    EXPECT_RESULT(ncclSend(buf, 10, ncclFloat32, 1, comm, stream), ncclInvalidArgument);
    EXPECT_RESULT(ncclRecv(buf, 10, ncclFloat32, -1, comm, stream), ncclInvalidArgument);
    EXPECT_RESULT(ncclRecv(host.data(), 10, ncclFloat32, 0, comm, stream), ncclInvalidArgument);
    EXPECT_RESULT(ncclAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSum, comm, stream),
                  ncclSuccess);

    EXPECT_RESULT(ncclGroupEnd(), ncclInvalidUsage);
    // A failed call inside a group fails the group; the group's other calls are dropped.
    NCCL_CHECK(ncclGroupStart());
    EXPECT_RESULT(ncclAllReduce(buf, buf, 10, ncclFloat32, ncclProd, comm, stream), ncclSuccess);
    EXPECT_RESULT(ncclAllReduce(buf, buf, 10, (ncclDataType_t)99, ncclSum, comm, stream),
                  ncclInvalidArgument);
    EXPECT_RESULT(ncclGroupEnd(), ncclInvalidArgument);
    // Nested groups: the calls run at the outermost ncclGroupEnd.
    float* sum = device_floats(1, 3.0f);
    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclAllReduce(sum, sum, 1, ncclFloat32, ncclAvg, comm, stream));
    NCCL_CHECK(ncclGroupEnd());
    NCCL_CHECK(ncclGroupEnd());
    CUDA_CHECK(cudaStreamSynchronize(stream));
    float got = 0;
    CUDA_CHECK(cudaMemcpy(&got, sum, sizeof(float), cudaMemcpyDeviceToHost));
    expect(got == 3.0f, "nested groups: the AllReduce ran once");

    ncclComm_t sub = nullptr;
    EXPECT_RESULT(ncclCommSplit(comm, -2, 0, &sub, nullptr), ncclInvalidArgument);
    EXPECT_RESULT(ncclCommSplit(comm, 0, 0, nullptr, nullptr), ncclInvalidArgument);
    EXPECT_RESULT(ncclCommSplit(nullptr, 0, 0, &sub, nullptr), ncclInvalidArgument);
    int value = 0;
    EXPECT_RESULT(ncclCommCount(nullptr, &value), ncclInvalidArgument);
    EXPECT_RESULT(ncclCommCount(comm, nullptr), ncclInvalidArgument);
    EXPECT_RESULT(ncclCommUserRank(comm, nullptr), ncclInvalidArgument);
    EXPECT_RESULT(ncclCommCuDevice(nullptr, &value), ncclInvalidArgument);
    ncclResult_t async;
    EXPECT_RESULT(ncclCommGetAsyncError(comm, nullptr), ncclInvalidArgument);
    EXPECT_RESULT(ncclCommGetAsyncError(comm, &async), ncclSuccess);
    expect(async == ncclSuccess, "no async error on the one-rank communicator");

    NCCL_CHECK(ncclCommFinalize(comm));
    EXPECT_RESULT(ncclCommFinalize(comm), ncclInvalidArgument);
    EXPECT_RESULT(ncclAllReduce(buf, buf, 10, ncclFloat32, ncclSum, comm, stream),
                  ncclInvalidUsage);
    NCCL_CHECK(ncclCommDestroy(comm));
    EXPECT_RESULT(ncclCommDestroy(nullptr), ncclSuccess);
    EXPECT_RESULT(ncclCommFinalize(nullptr), ncclSuccess);
    EXPECT_RESULT(ncclCommAbort(nullptr), ncclSuccess);

    ncclComm_t comms[2];
    const int dup[2] = {1, 1}, missing[2] = {0, 99};
    EXPECT_RESULT(ncclCommInitAll(nullptr, 2, nullptr), ncclInvalidArgument);
    EXPECT_RESULT(ncclCommInitAll(comms, -1, nullptr), ncclInvalidArgument);
    EXPECT_RESULT(ncclCommInitAll(comms, 0, nullptr), ncclSuccess);
    EXPECT_RESULT(ncclCommInitAll(comms, 2, dup), ncclInvalidUsage);
    EXPECT_RESULT(ncclCommInitAll(comms, 2, missing), ncclInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// Two-rank cases: body(rank, comm) runs in both processes after ncclCommInitRank.

static void case_file_id(int rank, ncclComm_t comm, cudaStream_t stream) {
    const int N = 1000;
    float* x = device_floats(N, (float)(rank + 1));
    float* b = device_floats(N, rank == 1 ? 7.0f : -1.0f);
    float* r = device_floats(N, -1.0f);
    NCCL_CHECK(ncclAllReduce(x, x, N, ncclFloat32, ncclSum, comm, stream));
    NCCL_CHECK(ncclBroadcast(b, b, N, ncclFloat32, 1, comm, stream));
    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclSend(x, N, ncclFloat32, 1 - rank, comm, stream));
    NCCL_CHECK(ncclRecv(r, N, ncclFloat32, 1 - rank, comm, stream));
    NCCL_CHECK(ncclGroupEnd());
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> hx(N), hb(N), hr(N);
    CUDA_CHECK(cudaMemcpy(hx.data(), x, N * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(hb.data(), b, N * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(hr.data(), r, N * sizeof(float), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < N; i++) wrong += hx[i] != 3.0f || hb[i] != 7.0f || hr[i] != 3.0f;
    expect(wrong == 0, "file-id: AllReduce, Broadcast and send/recv results");
    NCCL_CHECK(ncclCommDestroy(comm));
}

// Both ranks call AllReduce; rank 1 with other arguments. Both must see ncclInvalidUsage.
static void case_mismatch(int rank, ncclComm_t comm, cudaStream_t stream, bool op_differs) {
    float* x = device_floats(100, 1.0f);
    size_t count = op_differs || rank == 0 ? 100 : 50;
    ncclRedOp_t op = op_differs && rank == 1 ? ncclMax : ncclSum;
    NCCL_CHECK(ncclAllReduce(x, x, count, ncclFloat32, op, comm, stream));
    expect_result(wait_for_async_error(comm, stream, 30), ncclInvalidUsage,
                  "mismatched AllReduce: ncclCommGetAsyncError");
    EXPECT_RESULT(ncclAllReduce(x, x, 100, ncclFloat32, ncclSum, comm, stream), ncclInvalidUsage);
    expect_stuck_until_abort(comm, stream, "mismatched AllReduce, rank " + std::to_string(rank));
}

// Rank 0 calls an AllReduce rank 1 never joins; it must fail with `want` within `limit_s`.
static void expect_failed_allreduce(ncclComm_t comm, cudaStream_t stream, ncclResult_t want,
                                    double limit_s) {
    float* x = device_floats(100, 1.0f);
    double start = nccl_test_now_s();
    NCCL_CHECK(ncclAllReduce(x, x, 100, ncclFloat32, ncclSum, comm, stream));
    ncclResult_t async = wait_for_async_error(comm, stream, 30);
    double waited = nccl_test_now_s() - start;
    expect_result(async, want, "AllReduce without its peer: ncclCommGetAsyncError");
    EXPECT_RESULT(ncclAllReduce(x, x, 100, ncclFloat32, ncclSum, comm, stream), want);
    expect(waited < limit_s, "the failure came in time");
    printf("rank 0 saw %s after %.2f s\n", ncclGetErrorString(async), waited);
    expect_stuck_until_abort(comm, stream, "AllReduce without its peer");
}

static int list_files(const char* dir) {
    int n = 0;
    DIR* d = opendir(dir);
    if (!d) return -1;
    while (dirent* e = readdir(d)) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            printf("left behind: %s/%s\n", dir, e->d_name);
            n++;
        }
    }
    closedir(d);
    return n;
}

static void two_ranks(const std::string& which) {
    char data_dir[] = "/tmp/nccl_errors_data_XXXXXX", id_dir[] = "/tmp/nccl_errors_id_XXXXXX";
    if (!mkdtemp(data_dir) || !mkdtemp(id_dir)) {
        printf("FAIL: mkdtemp\n");
        exit(1);
    }
    setenv("CUCC_NCCL_DIR", data_dir, 1);
    setenv("CUCC_NCCL_TIMEOUT", "20", 0);  // a failing run ends in bounded time (unless set)
    std::string id_path = std::string(id_dir) + "/id", tmp_path = id_path + ".tmp";
    fflush(stdout);
    pid_t child = fork();  // before any CUDA call: each process starts its own runtime
    if (child < 0) {
        printf("FAIL: fork\n");
        exit(1);
    }
    g_rank = child == 0 ? 1 : 0;
    if (g_rank == 1) prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a failed rank 0
    CUDA_CHECK(cudaSetDevice(g_rank));
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));

    // The id travels through a file, written whole before it appears under its name.
    ncclUniqueId id;
    if (g_rank == 0) {
        NCCL_CHECK(ncclGetUniqueId(&id));
        FILE* f = fopen(tmp_path.c_str(), "wb");
        if (!f || fwrite(&id, sizeof(id), 1, f) != 1 || fclose(f) != 0 ||
            rename(tmp_path.c_str(), id_path.c_str()) != 0) {
            printf("FAIL: writing %s\n", id_path.c_str());
            exit(1);
        }
    } else {
        FILE* f = nullptr;
        for (double start = nccl_test_now_s();
             !(f = fopen(id_path.c_str(), "rb")) && nccl_test_now_s() - start < 30;)
            usleep(1000);
        if (!f || fread(&id, sizeof(id), 1, f) != 1) {
            printf("FAIL: reading %s\n", id_path.c_str());
            exit(1);
        }
        fclose(f);
    }

    ncclComm_t comm = nullptr;
    if (which == "init-timeout") {
        if (g_rank == 0) {
            double start = nccl_test_now_s();
            EXPECT_RESULT(ncclCommInitRank(&comm, 2, id, 0), ncclSystemError);
            expect(nccl_test_now_s() - start < 5, "init timeout came in time");
        }
    } else {
        NCCL_CHECK(ncclCommInitRank(&comm, 2, id, g_rank));
        if (which == "file-id") {
            case_file_id(g_rank, comm, stream);
        } else if (which == "mismatch" || which == "op-mismatch") {
            case_mismatch(g_rank, comm, stream, which == "op-mismatch");
        } else if (which == "peer-exit") {
            if (g_rank == 0) expect_failed_allreduce(comm, stream, ncclRemoteError, 10);
        } else if (which == "abort") {
            if (g_rank == 1) {
                float* x = device_floats(100, 1.0f);
                NCCL_CHECK(ncclAllReduce(x, x, 100, ncclFloat32, ncclSum, comm, stream));
                NCCL_CHECK(ncclCommAbort(comm));
            } else {
                expect_failed_allreduce(comm, stream, ncclRemoteError, 10);
            }
        } else if (which == "timeout") {
            // Rank 1 stays alive until rank 0 has seen its failure (or 30 s).
            std::string done_path = std::string(id_dir) + "/done";
            if (g_rank == 1) {
                for (double start = nccl_test_now_s();
                     access(done_path.c_str(), F_OK) != 0 && nccl_test_now_s() - start < 30;)
                    usleep(1000);
            } else {
                expect_failed_allreduce(comm, stream, ncclSystemError, 3.5);
                fclose(fopen(done_path.c_str(), "w"));
            }
        } else {
            expect(false, "a known case", which);
        }
    }
    if (g_rank == 1) exit(test_failures == 0 ? 0 : 1);

    int status = 0;
    waitpid(child, &status, 0);
    expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank 1 (the child) passed its checks");
    expect(list_files(data_dir) == 0, "no files left in CUCC_NCCL_DIR");
    unlink(id_path.c_str());
    unlink((std::string(id_dir) + "/done").c_str());
    rmdir(id_dir);
    rmdir(data_dir);
}

int main(int argc, char** argv) {
    if (argc != 3 || strcmp(argv[1], "--case") != 0) {
        fprintf(stderr,
                "usage: %s --case args|file-id|mismatch|op-mismatch|peer-exit|abort|"
                "timeout|init-timeout\n",
                argv[0]);
        return 2;
    }
    std::string which = argv[2];
    if (which == "args") case_args();
    else two_ranks(which);
    if (test_failures == 0) printf("nccl errors case %s passed\n", which.c_str());
    else printf("nccl errors case %s: %d checks FAILED\n", which.c_str(), test_failures);
    return test_failures == 0 ? 0 : 1;
}
