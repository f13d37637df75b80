// clock() means two things in one CUDA file: in device code the SM's 32-bit cycle counter, at
// the rate cudaDevAttrClockRate reports (kHz), and in host code the C library's CPU time. A
// kernel that spins for clockRate * 40 cycles, as cuda-samples' simpleHyperQ and
// concurrentKernels spin, must take about 40 ms of real time (it took 80 s when device code got
// the C library's microseconds), and agree with clock64() over the spin; host code must still
// get CPU time in CLOCKS_PER_SEC units.
//! cpu-only
//! run: ./prog => pass /all runtime_device_clock checks passed/
#include <chrono>
#include <ctime>
#include <string>
#include "test_util.h"

__global__ void spin(clock_t cycles, long long* elapsed64, unsigned* elapsed32) {
    // clock64's span encloses clock()'s (read first, and after the last clock()), so it can
    // only be longer: by the few cycles between the two reads at each end
    long long start64 = clock64();
    unsigned start = (unsigned)clock();
    clock_t offset = 0;
    while (offset < cycles) offset = (clock_t)((unsigned)clock() - start);
    *elapsed64 = clock64() - start64;
    *elapsed32 = (unsigned)offset;
}

int main() {
    int rate_khz = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&rate_khz, cudaDevAttrClockRate, 0));
    const double ms = 40;
    const clock_t cycles = (clock_t)(ms * rate_khz);
    long long* elapsed64;
    unsigned* elapsed32;
    CUDA_CHECK(cudaMallocManaged(&elapsed64, sizeof(long long)));
    CUDA_CHECK(cudaMallocManaged(&elapsed32, sizeof(unsigned)));
    auto t0 = std::chrono::steady_clock::now();
    spin<<<1, 1>>>(cycles, elapsed64, elapsed32);
    CUDA_CHECK(cudaDeviceSynchronize());
    double wall_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    expect(wall_ms >= ms && wall_ms < 20 * ms, "a kernel spinning clockRate * 40 cycles",
           std::to_string(wall_ms) + " ms of real time (at least 40, under 800)");
    expect(*elapsed32 >= (unsigned)cycles && *elapsed64 >= (long long)cycles &&
               *elapsed64 - (long long)*elapsed32 < (long long)rate_khz,
           "clock() and clock64() count the same cycles",
           std::to_string(*elapsed32) + " and " + std::to_string(*elapsed64) + " for " +
               std::to_string((long long)cycles));

    // Host clock(): CPU time. Burn about 30 ms of CPU and compare with CLOCK_PROCESS_CPUTIME_ID.
    timespec a, b;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
    clock_t c0 = clock();
    volatile double sink = 0;
    for (;;) {
        for (int i = 0; i < 100000; i++) sink = sink + i * 0.5;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
        if ((b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6 > 30) break;
    }
    clock_t c1 = clock();
    double cpu_ms = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
    double clock_ms = (c1 - c0) * 1000.0 / CLOCKS_PER_SEC;
    expect(clock_ms >= cpu_ms - 1 && clock_ms < cpu_ms + 20, "host clock() is CPU time",
           std::to_string(clock_ms) + " ms by clock(), " + std::to_string(cpu_ms) +
               " ms by CLOCK_PROCESS_CPUTIME_ID");
    CUDA_CHECK(cudaFree(elapsed64));
    CUDA_CHECK(cudaFree(elapsed32));
    return test_report("runtime_device_clock");
}
