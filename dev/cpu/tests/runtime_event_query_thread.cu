// cudaEventQuery from a host thread other than the one that queues and synchronizes the work, as
// llmc/comm.cuh's watchdog makes it. The main thread queues, on a stream of the last device,
// ROUNDS kernels that each add to a slot of mapped host memory (each slot once, so a kernel that
// ran twice shows), an event after each, and on a second stream a kernel that waits for the
// middle event and checks that the first half has run; then it synchronizes while a watcher
// thread, whose current device is 0, queries the events in order. Checked:
//   - a query answers cudaSuccess or cudaErrorNotReady, never an error;
//   - once an event is complete, the kernel before it has run and its write is visible to the
//     watcher; the kernels' order and the cross-stream wait hold;
//   - every kernel ran exactly once, whichever thread ran it (on the CPU runtime a query runs
//     the work that is ready, so both threads run work at once).
#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

constexpr int ROUNDS = 64;

// Adds round + 1 to slots[round] (once: a second run doubles it) after a little busy work.
__global__ void add_round(int* slots, int round) {
    float x = (float)round;
    for (int i = 0; i < 20000; i++) x = x * 0.999f + 1.0f;
    if (x < 0.0f) slots[ROUNDS + 1] = -1;  // never: keeps the loop
    slots[round] += round + 1;
}

// After the middle event: the first half has run (slots[ROUNDS] = 1, else 2).
__global__ void check_first_half(int* slots) {
    int ok = 1;
    for (int r = 0; r <= ROUNDS / 2; r++) ok &= slots[r] == r + 1;
    slots[ROUNDS] = ok ? 1 : 2;
}

int main() {
    int devices = 0;
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    const int device = devices - 1;
    CUDA_CHECK(cudaSetDevice(device));
    int *host = nullptr, *slots = nullptr;
    CUDA_CHECK(cudaHostAlloc(&host, (ROUNDS + 2) * sizeof(int), cudaHostAllocMapped));
    for (int i = 0; i < ROUNDS + 2; i++) host[i] = 0;
    CUDA_CHECK(cudaHostGetDevicePointer(&slots, host, 0));
    cudaStream_t main_stream, side_stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&main_stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&side_stream, cudaStreamNonBlocking));
    std::vector<cudaEvent_t> events(ROUNDS + 1);
    for (cudaEvent_t& e : events) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    for (int r = 0; r < ROUNDS; r++) {
        add_round<<<1, 1, 0, main_stream>>>(slots, r);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaEventRecord(events[r], main_stream));
    }
    CUDA_CHECK(cudaStreamWaitEvent(side_stream, events[ROUNDS / 2], 0));
    check_first_half<<<1, 1, 0, side_stream>>>(slots);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaEventRecord(events[ROUNDS], side_stream));

    std::atomic<int> errors{0}, invisible{0}, not_ready{0};
    std::thread watcher([&] {  // current device: 0, not the stream's
        for (int r = 0; r <= ROUNDS; r++) {
            cudaError_t q;
            while ((q = cudaEventQuery(events[r])) == cudaErrorNotReady) not_ready++;
            if (q != cudaSuccess) errors++;
            const int want = r < ROUNDS ? r + 1 : 1;
            if (((volatile int*)host)[r] != want) invisible++;
        }
    });
    CUDA_CHECK(cudaStreamSynchronize(main_stream));
    CUDA_CHECK(cudaStreamSynchronize(side_stream));
    watcher.join();

    expect(errors == 0, "the watcher's queries answer cudaSuccess or cudaErrorNotReady");
    expect(invisible == 0,
           "a complete event's kernels have run, their writes visible to the watcher",
           std::to_string(invisible.load()) + " events");
    int wrong = 0;
    for (int r = 0; r < ROUNDS; r++) wrong += host[r] != r + 1;
    expect(wrong == 0, "every kernel ran exactly once", std::to_string(wrong) + " slots wrong");
    expect(host[ROUNDS] == 1, "the second stream waited for the middle event");
    printf("the watcher saw cudaErrorNotReady %d times\n", not_ready.load());
    for (cudaEvent_t e : events) CUDA_CHECK(cudaEventDestroy(e));
    CUDA_CHECK(cudaStreamDestroy(main_stream));
    CUDA_CHECK(cudaStreamDestroy(side_stream));
    CUDA_CHECK(cudaFreeHost(host));
    return test_report("event query from another thread");
}
