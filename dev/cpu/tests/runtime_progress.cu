// Queued work makes progress without a host thread synchronizing, as on a GPU (the runtime's
// progress thread, dev/cpu/runtime/stream.cpp). Each host wait below uses no CUDA call and
// gives up after 20 s (a FAIL line instead of a hang):
//   - a stream callback after a kernel hands the kernel's result to the host through a
//     condition variable (how cuda-samples' simpleCallback passes its workloads on);
//   - a kernel sets a flag in mapped pinned memory that the host polls;
//   - callbacks on two streams of two devices, queued from two host threads that exit at once.
//! run: ./prog => pass /all runtime_progress checks passed/
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include "test_util.h"

constexpr auto kDeadline = std::chrono::seconds(20);

__global__ void fill(int* out, int value) { out[threadIdx.x] = value + (int)threadIdx.x; }

__global__ void raise_flag(volatile int* flag) { *flag = 1; }

struct Handoff {
    std::mutex mutex;
    std::condition_variable cv;
    int calls = 0;
    int seen = -1;  // what the callback read from the kernel's output
    const int* data = nullptr;
};

void CUDART_CB on_done(void* user) {
    Handoff* h = (Handoff*)user;
    std::lock_guard<std::mutex> lock(h->mutex);
    h->seen = h->data ? h->data[31] : -1;
    h->calls++;
    h->cv.notify_all();
}

// Waits, with no CUDA call, until `calls` callbacks have come; false at the deadline.
bool wait_for_calls(Handoff& h, int calls) {
    std::unique_lock<std::mutex> lock(h.mutex);
    return h.cv.wait_for(lock, kDeadline, [&] { return h.calls >= calls; });
}

int main() {
    // A kernel, then a callback that reads its output (managed memory) and wakes the host.
    int* out;
    CUDA_CHECK(cudaMallocManaged(&out, 32 * sizeof(int)));
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    Handoff first;
    first.data = out;
    fill<<<1, 32, 0, stream>>>(out, 100);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaLaunchHostFunc(stream, on_done, &first));
    bool woke = wait_for_calls(first, 1);
    expect(woke && first.seen == 131, "callback after a kernel ran without a synchronization",
           woke ? "it read " + std::to_string(first.seen) + " (expected 131)"
                : "no callback within 20 s");

    // A flag in mapped pinned memory, polled by the host.
    int* flag;
    CUDA_CHECK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
    *flag = 0;
    int* device_flag;
    CUDA_CHECK(cudaHostGetDevicePointer(&device_flag, flag, 0));
    raise_flag<<<1, 1, 0, stream>>>(device_flag);
    CUDA_CHECK(cudaGetLastError());
    auto until = std::chrono::steady_clock::now() + kDeadline;
    while (*(volatile int*)flag == 0 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    expect(*(volatile int*)flag == 1, "host polling mapped memory saw the kernel's flag");

    // Two host threads queue a kernel and a callback each (on devices 0 and 1) and exit.
    Handoff both;
    int device_count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&device_count));
    const int devices = device_count >= 2 ? 2 : 1;
    std::thread threads[2];
    for (int d = 0; d < devices; d++)
        threads[d] = std::thread([d, &both] {
            CUDA_CHECK(cudaSetDevice(d));
            int* buffer;
            CUDA_CHECK(cudaMalloc(&buffer, 32 * sizeof(int)));
            cudaStream_t s;
            CUDA_CHECK(cudaStreamCreate(&s));
            fill<<<1, 32, 0, s>>>(buffer, d);
            CUDA_CHECK(cudaGetLastError());
            CUDA_CHECK(cudaLaunchHostFunc(s, on_done, &both));
        });
    for (int d = 0; d < devices; d++) threads[d].join();
    woke = wait_for_calls(both, devices);
    expect(woke, "callbacks queued by host threads that exited ran",
           std::to_string(both.calls) + " of " + std::to_string(devices));

    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaFreeHost(flag));
    CUDA_CHECK(cudaFree(out));
    return test_report("runtime_progress");
}
