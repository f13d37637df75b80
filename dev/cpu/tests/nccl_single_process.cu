// Tests NCCL with several devices driven by one thread of one process (ncclCommInitAll), and
// the stream ordering of NCCL calls with kernels. Each check compares with values computed here:
// - ncclCommInitAll(4 devices): comm i has rank i of 4 on device i (and with an explicit
//   devlist, rank i on devlist[i]);
// - per round: a kernel fills each device's buffer, an AllReduce of all four (one group, one
//   stream per device) runs after it, and a kernel doubles the result after that, all on one
//   stream per device: the result is 2 * the sum over devices, so the AllReduce neither read
//   the buffer before the fill nor let the doubling run before it wrote;
// - the same with the fill and the doubling on a compute stream and the AllReduce on a
//   communication stream, ordered by events (cudaEventRecord / cudaStreamWaitEvent): right under
//   the default and the random schedule (CUCC_SCHEDULE=random);
// - with --skip-event the events are left out and the program expects the race to show up as a
//   wrong result in some round (it exits 1 if it never does);
// - a grouped send/recv ring across the four communicators, and ncclCommSplit of all four
//   inside one group (by parity), with an AllReduce on the halves;
// - one host thread per device, each calling ncclCommInitRank with a shared id, then
//   AllReduce + cudaStreamSynchronize rounds from all threads at once.
// Needs 4 devices in one process, hence cpu-only.
//! cucc: -lnccl
//! cpu-only
//! run: ./prog => pass /all nccl single-process checks passed/
//! run: CUCC_SCHEDULE=random CUCC_SEED=3 ./prog => pass /all nccl single-process checks passed/
//! run: CUCC_SCHEDULE=random CUCC_SEED=5 ./prog --skip-event => pass /missing event exposed/

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <atomic>
#include <thread>
#include <vector>
#include "nccl_test_util.h"

static int g_checks, g_failures;
static void expect(bool ok, const char* what, double got, double want) {
    g_checks++;
    if (!ok) {
        g_failures++;
        printf("FAIL %s: got %g, expected %g\n", what, got, want);
    }
}

// x[i] = base + i (one thread per element).
__global__ void fill_kernel(float* x, int n, float base) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = base + (float)i;
}
// x[i] *= 2.
__global__ void double_kernel(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}

static const int kDevices = 4, N = 4096, kRounds = 8;

// One round of fill -> AllReduce -> double on every device. With events, fill and double run
// on compute[d] and the AllReduce on comm_stream[d]. Returns the number of wrong elements.
static int fill_reduce_double(ncclComm_t* comms, float** bufs, cudaStream_t* compute,
                              cudaStream_t* comm_stream, bool two_streams, bool events, int round) {
    std::vector<cudaEvent_t> filled(kDevices), reduced(kDevices);
    for (int d = 0; d < kDevices; d++) {
        CUDA_CHECK(cudaSetDevice(d));
        CUDA_CHECK(cudaEventCreateWithFlags(&filled[d], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&reduced[d], cudaEventDisableTiming));
        fill_kernel<<<(N + 255) / 256, 256, 0, compute[d]>>>(bufs[d], N, (float)(100 * round + d));
        CUDA_CHECK(cudaGetLastError());
        if (two_streams && events) {
            CUDA_CHECK(cudaEventRecord(filled[d], compute[d]));
            CUDA_CHECK(cudaStreamWaitEvent(comm_stream[d], filled[d], 0));
        }
    }
    NCCL_CHECK(ncclGroupStart());
    for (int d = 0; d < kDevices; d++) {
        cudaStream_t s = two_streams ? comm_stream[d] : compute[d];
        NCCL_CHECK(ncclAllReduce(bufs[d], bufs[d], N, ncclFloat32, ncclSum, comms[d], s));
    }
    NCCL_CHECK(ncclGroupEnd());
    for (int d = 0; d < kDevices; d++) {
        CUDA_CHECK(cudaSetDevice(d));
        if (two_streams && events) {
            CUDA_CHECK(cudaEventRecord(reduced[d], comm_stream[d]));
            CUDA_CHECK(cudaStreamWaitEvent(compute[d], reduced[d], 0));
        }
        double_kernel<<<(N + 255) / 256, 256, 0, compute[d]>>>(bufs[d], N);
        CUDA_CHECK(cudaGetLastError());
    }
    int wrong = 0;
    std::vector<float> h(N);
    for (int d = 0; d < kDevices; d++) {
        CUDA_CHECK(cudaSetDevice(d));
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(h.data(), bufs[d], N * sizeof(float), cudaMemcpyDeviceToHost));
        for (int i = 0; i < N; i++) {
            // sum over devices of (100*round + dev + i), all exact in float
            float want =
                2.0f * (float)(kDevices * (100 * round + i) + kDevices * (kDevices - 1) / 2);
            if (h[i] != want) wrong++;
        }
        CUDA_CHECK(cudaEventDestroy(filled[d]));
        CUDA_CHECK(cudaEventDestroy(reduced[d]));
    }
    return wrong;
}

// Threads t = 0..kDevices-1 each own rank t on device t; every round each sets its buffer to
// t+1+round and all-reduces it. Returns the number of wrong results.
static int one_thread_per_device() {
    ncclUniqueId id;
    NCCL_CHECK(ncclGetUniqueId(&id));
    std::atomic<int> wrong{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kDevices; t++) {
        threads.emplace_back([&, t] {
            CUDA_CHECK(cudaSetDevice(t));
            ncclComm_t comm;
            NCCL_CHECK(ncclCommInitRank(&comm, kDevices, id, t));
            cudaStream_t stream;
            CUDA_CHECK(cudaStreamCreate(&stream));
            float* x;
            CUDA_CHECK(cudaMalloc(&x, N * sizeof(float)));
            std::vector<float> h(N);
            for (int round = 0; round < kRounds; round++) {
                fill_kernel<<<(N + 255) / 256, 256, 0, stream>>>(x, N, (float)(t + 1 + round));
                NCCL_CHECK(ncclAllReduce(x, x, N, ncclFloat32, ncclSum, comm, stream));
                CUDA_CHECK(cudaStreamSynchronize(stream));
                CUDA_CHECK(cudaMemcpy(h.data(), x, N * sizeof(float), cudaMemcpyDeviceToHost));
                for (int i = 0; i < N; i++) {
                    // sum over threads u of (u + 1 + round + i)
                    float want = (float)(kDevices * (kDevices + 1) / 2 + kDevices * (round + i));
                    if (h[i] != want) wrong++;
                }
            }
            CUDA_CHECK(cudaFree(x));
            NCCL_CHECK(ncclCommDestroy(comm));
        });
    }
    for (std::thread& t : threads) t.join();
    return wrong.load();
}

int main(int argc, char** argv) {
    bool skip_event = argc > 1 && strcmp(argv[1], "--skip-event") == 0;
    int devices = 0;
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    if (devices < kDevices) {
        printf("FAIL: needs %d devices, has %d\n", kDevices, devices);
        return 1;
    }
    ncclComm_t comms[kDevices];
    NCCL_CHECK(ncclCommInitAll(comms, kDevices, nullptr));
    float* bufs[kDevices];
    cudaStream_t compute[kDevices], comm_stream[kDevices];
    for (int d = 0; d < kDevices; d++) {
        int count = 0, rank = -1, dev = -1;
        NCCL_CHECK(ncclCommCount(comms[d], &count));
        NCCL_CHECK(ncclCommUserRank(comms[d], &rank));
        NCCL_CHECK(ncclCommCuDevice(comms[d], &dev));
        expect(count == kDevices && rank == d && dev == d, "ncclCommInitAll: count/rank/device",
               count * 100 + rank * 10 + dev, kDevices * 100 + d * 10 + d);
        CUDA_CHECK(cudaSetDevice(d));
        CUDA_CHECK(cudaMalloc(&bufs[d], N * sizeof(float)));
        CUDA_CHECK(cudaStreamCreate(&compute[d]));
        CUDA_CHECK(cudaStreamCreate(&comm_stream[d]));
    }

    if (skip_event) {
        int exposed = 0;
        for (int round = 0; round < kRounds; round++) {
            if (fill_reduce_double(comms, bufs, compute, comm_stream, true, false, round) > 0)
                exposed++;
        }
        printf("missing event %s in %d of %d rounds\n", exposed ? "exposed" : "NOT exposed",
               exposed, kRounds);
        return exposed ? 0 : 1;
    }

    for (int round = 0; round < kRounds; round++) {
        int wrong = fill_reduce_double(comms, bufs, compute, comm_stream, false, false, round);
        expect(wrong == 0, "fill -> AllReduce -> double on one stream: wrong elements", wrong, 0);
        wrong = fill_reduce_double(comms, bufs, compute, comm_stream, true, true, round);
        expect(wrong == 0, "fill -> AllReduce -> double across streams with events: wrong elements",
               wrong, 0);
    }

    // Ring: device d sends its values to d+1 and receives from d-1, all in one group.
    NCCL_CHECK(ncclGroupStart());
    std::vector<float*> recv(kDevices);
    for (int d = 0; d < kDevices; d++) {
        CUDA_CHECK(cudaSetDevice(d));
        CUDA_CHECK(cudaMalloc(&recv[d], N * sizeof(float)));
        fill_kernel<<<(N + 255) / 256, 256, 0, compute[d]>>>(bufs[d], N, (float)(1000 * d));
        NCCL_CHECK(ncclSend(bufs[d], N, ncclFloat32, (d + 1) % kDevices, comms[d], compute[d]));
        NCCL_CHECK(
            ncclRecv(recv[d], N, ncclFloat32, (d + kDevices - 1) % kDevices, comms[d], compute[d]));
    }
    NCCL_CHECK(ncclGroupEnd());
    std::vector<float> h(N);
    for (int d = 0; d < kDevices; d++) {
        CUDA_CHECK(cudaSetDevice(d));
        CUDA_CHECK(cudaStreamSynchronize(compute[d]));
        CUDA_CHECK(cudaMemcpy(h.data(), recv[d], N * sizeof(float), cudaMemcpyDeviceToHost));
        int from = (d + kDevices - 1) % kDevices, wrong = 0;
        for (int i = 0; i < N; i++) wrong += h[i] != (float)(1000 * from + i);
        expect(wrong == 0, "send/recv ring across devices: wrong elements", wrong, 0);
    }

    // Split all four communicators in one group: parity halves, then an AllReduce on each.
    ncclComm_t halves[kDevices];
    NCCL_CHECK(ncclGroupStart());
    for (int d = 0; d < kDevices; d++)
        NCCL_CHECK(ncclCommSplit(comms[d], d % 2, d, &halves[d], nullptr));
    NCCL_CHECK(ncclGroupEnd());
    NCCL_CHECK(ncclGroupStart());
    for (int d = 0; d < kDevices; d++) {
        CUDA_CHECK(cudaSetDevice(d));
        fill_kernel<<<1, 1, 0, compute[d]>>>(bufs[d], 1, (float)d);
        NCCL_CHECK(ncclAllReduce(bufs[d], bufs[d], 1, ncclFloat32, ncclSum, halves[d], compute[d]));
    }
    NCCL_CHECK(ncclGroupEnd());
    for (int d = 0; d < kDevices; d++) {
        int count = 0, rank = -1;
        NCCL_CHECK(ncclCommCount(halves[d], &count));
        NCCL_CHECK(ncclCommUserRank(halves[d], &rank));
        expect(count == 2 && rank == d / 2, "split in a group: count/rank", count * 10 + rank,
               20 + d / 2);
        CUDA_CHECK(cudaSetDevice(d));
        CUDA_CHECK(cudaStreamSynchronize(compute[d]));
        float got = 0;
        CUDA_CHECK(cudaMemcpy(&got, bufs[d], sizeof(float), cudaMemcpyDeviceToHost));
        float want = d % 2 == 0 ? 0.0f + 2.0f : 1.0f + 3.0f;
        expect(got == want, "AllReduce on a half", got, want);
    }

    for (int d = 0; d < kDevices; d++) {
        NCCL_CHECK(ncclCommDestroy(halves[d]));
        NCCL_CHECK(ncclCommDestroy(comms[d]));
    }

    // An explicit devlist: rank i sits on devlist[i].
    const int devlist[2] = {3, 1};
    ncclComm_t pair[2];
    NCCL_CHECK(ncclCommInitAll(pair, 2, devlist));
    for (int i = 0; i < 2; i++) {
        int rank = -1, dev = -1;
        NCCL_CHECK(ncclCommUserRank(pair[i], &rank));
        NCCL_CHECK(ncclCommCuDevice(pair[i], &dev));
        expect(rank == i && dev == devlist[i], "ncclCommInitAll with devlist: rank/device",
               rank * 10 + dev, i * 10 + devlist[i]);
        NCCL_CHECK(ncclCommDestroy(pair[i]));
    }

    int wrong = one_thread_per_device();
    expect(wrong == 0, "one thread per device: wrong elements", wrong, 0);

    if (g_failures == 0) printf("all nccl single-process checks passed (%d)\n", g_checks);
    else printf("%d of %d nccl single-process checks FAILED\n", g_failures, g_checks);
    return g_failures == 0 ? 0 : 1;
}
