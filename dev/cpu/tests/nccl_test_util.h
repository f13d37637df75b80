// nccl_test_util.h: test_util.h plus what the nccl_*.cu tests share:
//   NCCL_CHECK(call)  stops the program (exit 1) with file:line, the call and NCCL's message;
//   wait_for_async_error, expect_stuck_until_abort: NCCL's failure semantics. When a peer
//     died, failed, left or made another call (or a wait timed out), the error comes from
//     ncclCommGetAsyncError while the failed collective never completes, as a GPU's NCCL kernel
//     spins; ncclCommAbort ends it.
#pragma once

#include <nccl.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

#define NCCL_CHECK(call) check_nccl((call), #call, __FILE__, __LINE__)

static void check_nccl(ncclResult_t result, const char* call, const char* file, int line) {
    check_call(result == ncclSuccess, ncclGetErrorString(result), call, file, line);
}

static double nccl_test_now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// Runs `stream` (a query runs what is ready: the collectives poll their peers) until comm
// reports an error, the stream is done, or limit_s passes. Returns the error (ncclSuccess: none).
static ncclResult_t wait_for_async_error(ncclComm_t comm, cudaStream_t stream, double limit_s) {
    ncclResult_t async = ncclSuccess;
    for (const double start = nccl_test_now_s(); nccl_test_now_s() - start < limit_s;) {
        const cudaError_t query = cudaStreamQuery(stream);
        if (query != cudaErrorNotReady) CUDA_CHECK(query);
        NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
        if (async != ncclSuccess || query == cudaSuccess) break;
        usleep(1000);
    }
    return async;
}

// After comm failed with a collective queued on `stream`: the stream, and an event recorded
// after the collective, stay busy (0.5 s of polls); then ncclCommAbort(comm), and both finish.
static void expect_stuck_until_abort(ncclComm_t comm, cudaStream_t stream,
                                     const std::string& what) {
    cudaEvent_t after;
    CUDA_CHECK(cudaEventCreate(&after));
    CUDA_CHECK(cudaEventRecord(after, stream));
    bool finished = false;
    for (const double start = nccl_test_now_s(); nccl_test_now_s() - start < 0.5; usleep(5000))
        finished |= cudaStreamQuery(stream) != cudaErrorNotReady ||
                    cudaEventQuery(after) != cudaErrorNotReady;
    expect(!finished, (what + ": the failed collective never completes (its stream and an event "
                              "after it stay busy)")
                          .c_str());
    NCCL_CHECK(ncclCommAbort(comm));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    expect(cudaEventQuery(after) == cudaSuccess, (what + ": ncclCommAbort ends it").c_str());
    CUDA_CHECK(cudaEventDestroy(after));
}
