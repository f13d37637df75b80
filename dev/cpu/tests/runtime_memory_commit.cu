// The CPU runtime's device memory is real memory:
//   - the default limit (cudaMemGetInfo's total) is at most what the machine has available
//     (MemAvailable, read here from /proc/meminfo) and at least that less the documented
//     headroom (5% of MemTotal, at least 512 MiB) and what this process has used since;
//   - cudaMalloc commits its pages: the process's resident memory grows by the allocation
//     before anything touches it; the time it takes is printed;
//   - freeing and allocating 64 MiB 50 times (a workspace per call) reuses the committed
//     mapping: it takes under a quarter of the time that committing those 3.2 GB afresh would,
//     at the rate the 256 MiB above were committed in the same run (no fixed time: machines
//     commit at 0.7 to 2.6 GB/s here, and reusing measured 30 to 100 times faster), and
//     cudaMemGetInfo's free memory comes back after each cudaFree;
//   - more than the limit, and, with CUCC_MEM_LIMIT raised past the machine, more than the
//     machine has, fails with cudaErrorMemoryAllocation (not sticky) instead of the process
//     being killed later; smaller allocations still work afterwards.
//! cpu-only
//! run: ./prog => pass /all memory commit checks passed/
//! run: CUCC_MEM_LIMIT=64T ./prog over-machine => pass /all memory commit checks passed/
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include "test_util.h"

static size_t meminfo_bytes(const char* key) {
    std::ifstream f("/proc/meminfo");
    std::string k;
    size_t kb;
    while (f >> k >> kb) {
        if (k == key) return kb * 1024;
        f.ignore(1 << 20, '\n');
    }
    return 0;
}

static size_t resident_bytes() {
    long pages = 0, resident = 0;
    FILE* f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld %ld", &pages, &resident) != 2) return 0;
    fclose(f);
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

static void default_limit() {
    size_t available = meminfo_bytes("MemAvailable:"), total_ram = meminfo_bytes("MemTotal:");
    size_t free_bytes, total;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    size_t headroom = total_ram / 20 > ((size_t)512 << 20) ? total_ram / 20 : (size_t)512 << 20;
    // The runtime read MemAvailable a moment earlier; allow 256 MiB of drift since then.
    size_t slack = (size_t)256 << 20;
    char detail[160];
    snprintf(detail, sizeof detail, "limit %zu MiB, MemAvailable %zu MiB, headroom %zu MiB",
             total >> 20, available >> 20, headroom >> 20);
    expect(
        total <= available + slack && total + headroom + slack >= available && free_bytes == total,
        "default limit: MemAvailable less the headroom", detail);
}

// Returns the seconds that committing took per byte.
static double committed() {
    const size_t bytes = (size_t)256 << 20;
    size_t before = resident_bytes();
    auto t0 = std::chrono::steady_clock::now();
    void* p;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    size_t grew = resident_bytes() - before;
    char detail[128];
    snprintf(detail, sizeof detail, "resident +%zu MiB; %.3f s (%.2f GB/s)", grew >> 20, s,
             bytes / s / 1e9);
    expect(grew >= bytes - ((size_t)4 << 20), "cudaMalloc(256 MiB) commits its pages", detail);
    CUDA_CHECK(cudaFree(p));
    return s / bytes;
}

// commit_s_per_byte: committed()'s rate, measured in the same run.
static void reused(double commit_s_per_byte) {
    const size_t bytes = (size_t)64 << 20;
    size_t free0, free1, total;
    CUDA_CHECK(cudaMemGetInfo(&free0, &total));
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 50; i++) {
        void* p;
        CUDA_CHECK(cudaMalloc(&p, bytes));
        CUDA_CHECK(cudaFree(p));
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CUDA_CHECK(cudaMemGetInfo(&free1, &total));
    const double afresh = 50.0 * bytes * commit_s_per_byte;
    char detail[160];
    snprintf(detail, sizeof detail,
             "%.3f s, %.0f times faster than committing afresh (%.3f s); "
             "free memory %s",
             s, afresh / s, afresh, free1 == free0 ? "back" : "not back");
    expect(s < afresh / 4 && free1 == free0,
           "50 x cudaMalloc + cudaFree of 64 MiB reuse the mapping", detail);
}

static void refused(size_t bytes, const char* what) {
    void* p = (void*)1;
    cudaError_t err = cudaMalloc(&p, bytes);
    cudaError_t last = cudaGetLastError();
    char line[200];
    snprintf(line, sizeof line, "%s (%zu MiB): %s, not sticky", what, bytes >> 20,
             cudaGetErrorName(err));
    expect(err == cudaErrorMemoryAllocation && p == nullptr && last == err &&
               cudaGetLastError() == cudaSuccess,
           line);
    void* small;
    CUDA_CHECK(cudaMalloc(&small, 1 << 20));
    CUDA_CHECK(cudaFree(small));
}

int main(int argc, char** argv) {
    bool over_machine = argc > 1 && !strcmp(argv[1], "over-machine");
    size_t free_bytes, total;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    if (over_machine) {
        expect(total == (size_t)64 << 40, "CUCC_MEM_LIMIT=64T sets the device size");
        // Within the limit but more than the machine has: refused at once, cleanly.
        refused(meminfo_bytes("MemAvailable:") + ((size_t)1 << 30),
                "more than the machine has available");
    } else {
        default_limit();
        reused(committed());
        refused(free_bytes + 1, "one byte more than cudaMemGetInfo's free memory");
    }
    return test_report("memory commit");
}
