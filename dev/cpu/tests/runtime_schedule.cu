// runtime_schedule.cu: how the CPU runtime schedules the threads of a block, and what it does
// with kernels that are wrong.
//   race / fixed:    a kernel missing a __syncthreads (and one missing a __syncwarp) is right
//                    in the default sequential order but wrong for some seed under
//                    CUCC_SCHEDULE=random; with the barrier it is right for every seed.
//   exited:          threads that returned early count as arrived at later barriers.
//   exited-warp:     a full-mask shuffle after lane 31 returned completes without it (the PTX
//                    ISA's sync instructions wait for the non-exited lanes of the mask); lane
//                    30, whose source exited, gets its own value.
//   deadlock-*:      threads waiting at different barriers, or a shuffle whose mask names a
//                    lane that waits at a barrier, end the program with a report instead of
//                    hanging.
//   stack:           a kernel overflowing its fiber stack is reported as such (CUCC_STACK_KB).
//   trap:            a fault in a kernel stops its grid and is returned (sticky) by the next
//                    synchronization, until cudaDeviceReset.
// Each mode prints what it compared and exits 0 when the result is the expected one.
//! cpu-only
//! run: ./prog race => pass /barrier race: right/
//! run: for s in 1 2 3 4 5 6 7 8 9 10; do CUCC_SCHEDULE=random CUCC_SEED=$s ./prog race || exit 0; done; exit 1 => pass /barrier race: wrong/
//! run: for s in 1 2 3 4 5 6 7 8 9 10; do CUCC_SCHEDULE=random CUCC_SEED=$s ./prog fixed || exit 1; done => pass /barrier race: right/
//! run: ./prog warp-race => pass /warp race: right/
//! run: for s in 1 2 3 4 5 6 7 8 9 10; do CUCC_SCHEDULE=random CUCC_SEED=$s ./prog warp-race || exit 0; done; exit 1 => pass /warp race: wrong/
//! run: for s in 1 2 3 4 5 6 7 8 9 10; do CUCC_SCHEDULE=random CUCC_SEED=$s ./prog warp-fixed || exit 1; done => pass /warp race: right/
//! run: ./prog exited => pass /early exits: right/
//! run: CUCC_SCHEDULE=random ./prog exited => pass /early exits: right/
//! run: ./prog deadlock-barrier-sites => fail /cucc: deadlock in kernel two_barriers_kernel \(block \(1,0,0\)\): threads 0-15 wait at __syncthreads \(.*runtime_schedule.cu:\d+\); threads 16-47 wait at __syncthreads \(.*runtime_schedule.cu:\d+\)/
//! run: ./prog deadlock-syncthreads-shim => fail /cucc: deadlock in kernel two_syncthreads_kernel .*threads 0-15 wait at __syncthreads \(.*runtime_schedule.cu:\d+\); threads 16-47 wait at __syncthreads \(.*runtime_schedule.cu:\d+\)/
//! run: ./prog exited-warp => pass /exited lane: right/
//! run: ./prog deadlock-barrier-warp => fail /cucc: deadlock in kernel barrier_vs_warp_kernel \(block \(0,0,0\)\): threads 0-30 wait in a warp-synchronous call of warp 0 with mask 0xffffffff for lanes 0x80000000; threads 31-63 wait at __syncthreads/
//! run: ./prog stack => fail /cucc: stack overflow in kernel big_stack_kernel \(block \(0,0,0\), thread \(0,0,0\)\): each CUDA thread has a 64 KiB stack; raise CUCC_STACK_KB/
//! run: CUCC_STACK_KB=512 ./prog stack => pass /big stack: right/
//! run: ./prog trap => pass /trap: right/
//! run: CUCC_THREADS=1 ./prog trap => pass /trap: right/
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "test_util.h"

// Each thread reads its right neighbour's slot, then overwrites its own. Without a barrier
// between the read and the write the result depends on whether the right neighbour has written
// already: the sequential order (thread 0 first) happens to be right, other orders are not.
__global__ void shift_kernel(int* out, const int* in, bool barrier) {
    __shared__ int s[256];
    int t = threadIdx.x;
    s[t] = in[t];
    __syncthreads();
    int right = t + 1 < (int)blockDim.x ? s[t + 1] : 0;
    if (barrier) __syncthreads();
    s[t] = 2 * right;
    __syncthreads();
    out[t] = s[t];
}

// The same within one warp, with __syncwarp.
__global__ void warp_shift_kernel(int* out, const int* in, bool barrier) {
    __shared__ int s[32];
    int t = threadIdx.x;
    s[t] = in[t];
    __syncwarp();
    int right = t + 1 < 32 ? s[t + 1] : 0;
    if (barrier) __syncwarp();
    s[t] = 2 * right;
    __syncwarp();
    out[t] = s[t];
}

// Threads at or past `live` return at once; the others sum through two barriers.
__global__ void early_exit_kernel(int* out, int live) {
    __shared__ int s[128];
    int t = threadIdx.x;
    if (t >= live) return;
    s[t] = t + 1;
    __syncthreads();
    int sum = 0;
    for (int i = 0; i < live; i++) sum += s[i];
    __syncthreads();
    out[t] = sum;
}

// Threads 0-15 of block 1 wait at one barrier, the rest at another: a deadlock.
__global__ void two_barriers_kernel(int* out) {
    if (blockIdx.x == 1 && threadIdx.x < 16) cucc::syncthreads();
    else cucc::syncthreads();
    out[threadIdx.x] = 1;
}

// The same through __syncthreads (needs the device header to pass the call site on).
__global__ void two_syncthreads_kernel(int* out) {
    if (threadIdx.x < 16) __syncthreads();
    else __syncthreads();
    out[threadIdx.x] = 1;
}

// Lane 31 exits; the others shuffle with a full mask that still names it.
__global__ void exited_lane_kernel(int* out) {
    if (threadIdx.x == 31) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x + 100, 1);
}

// Lanes 0-30 shuffle with a mask naming lane 31, which waits at a barrier instead (with
// warp 1) that lanes 0-30 never reach.
__global__ void barrier_vs_warp_kernel(int* out) {
    if (threadIdx.x < 31) out[threadIdx.x] = __shfl_sync(0xffffffffu, 1, 0);
    else __syncthreads();
}

// Block 2's thread 5 traps; every thread of every block otherwise marks its slot.
__global__ void trap_kernel(int* out) {
    if (blockIdx.x == 2 && threadIdx.x == 5) cucc::trap(cudaErrorAssert, "test trap in block 2");
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}

__global__ void fill_kernel(int* out, int value) { out[threadIdx.x] = value; }

// 256 KiB of locals, written from the top of the frame down (as the stack grows).
__global__ void big_stack_kernel(int* out) {
    volatile char big[256 * 1024];
    for (int i = (int)sizeof big - 1; i >= 0; i--) big[i] = (char)i;
    out[threadIdx.x] = big[threadIdx.x * 1000];
}

static int race(bool warp, bool barrier) {
    int n = warp ? 32 : 256;
    std::vector<int> h(n), got(n);
    for (int i = 0; i < n; i++) h[i] = 3 * i + 1;
    int *in, *out;
    CUDA_CHECK(cudaMalloc(&in, n * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&out, n * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(in, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    if (warp) warp_shift_kernel<<<1, n>>>(out, in, barrier);
    else shift_kernel<<<1, n>>>(out, in, barrier);
    CUDA_CHECK(cudaMemcpy(got.data(), out, n * sizeof(int), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < n; i++) wrong += got[i] != (i + 1 < n ? 2 * h[i + 1] : 0);
    printf("%s race: %s (%d of %d threads differ from the host result)\n",
           warp ? "warp" : "barrier", wrong ? "wrong" : "right", wrong, n);
    return wrong ? 1 : 0;
}

int main(int argc, char** argv) {
    const char* mode = argc > 1 ? argv[1] : "";
    int* out;
    CUDA_CHECK(cudaMalloc(&out, 4096 * sizeof(int)));
    if (!strcmp(mode, "race")) return race(false, false);
    if (!strcmp(mode, "fixed")) return race(false, true);
    if (!strcmp(mode, "warp-race")) return race(true, false);
    if (!strcmp(mode, "warp-fixed")) return race(true, true);
    if (!strcmp(mode, "exited")) {
        int live = 77;
        CUDA_CHECK(cudaMemset(out, 0, 128 * sizeof(int)));
        early_exit_kernel<<<1, 128>>>(out, live);
        std::vector<int> got(128);
        CUDA_CHECK(cudaMemcpy(got.data(), out, 128 * sizeof(int), cudaMemcpyDeviceToHost));
        int wrong = 0;
        for (int t = 0; t < 128; t++) wrong += got[t] != (t < live ? live * (live + 1) / 2 : 0);
        printf("early exits: %s (%d wrong)\n", wrong ? "wrong" : "right", wrong);
        return wrong ? 1 : 0;
    }
    if (!strcmp(mode, "deadlock-barrier-sites")) two_barriers_kernel<<<2, 48>>>(out);
    else if (!strcmp(mode, "deadlock-syncthreads-shim")) two_syncthreads_kernel<<<1, 48>>>(out);
    else if (!strcmp(mode, "deadlock-barrier-warp")) barrier_vs_warp_kernel<<<1, 64>>>(out);
    if (!strncmp(mode, "deadlock", 8)) {
        cudaDeviceSynchronize();
        printf("no deadlock was reported\n");
        return 0;  // the run line expects a failure
    }
    if (!strcmp(mode, "exited-warp")) {
        CUDA_CHECK(cudaMemset(out, 0, 32 * sizeof(int)));
        exited_lane_kernel<<<1, 32>>>(out);
        int h[32];
        CUDA_CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
        int wrong = h[31] != 0;  // lane 31 wrote nothing
        for (int lane = 0; lane < 31; lane++)
            wrong += h[lane] != 100 + (lane == 30 ? 30 : lane ^ 1);
        printf("exited lane: %s (%d wrong)\n", wrong ? "wrong" : "right", wrong);
        return wrong ? 1 : 0;
    }
    if (!strcmp(mode, "stack")) {
        big_stack_kernel<<<1, 4>>>(out);
        int h[4];
        CUDA_CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
        bool ok = h[0] == 0 && h[3] == (char)3000;
        printf("big stack: %s\n", ok ? "right" : "wrong");
        return ok ? 0 : 1;
    }
    if (!strcmp(mode, "trap")) {
        int blocks = 64, threads = 32;
        CUDA_CHECK(cudaMemset(out, 0, blocks * threads * sizeof(int)));
        trap_kernel<<<blocks, threads>>>(out);
        cudaError_t launch = cudaGetLastError();
        cudaError_t sync = cudaDeviceSynchronize();
        cudaError_t again = cudaDeviceSynchronize();
        fill_kernel<<<1, 32>>>(out, 7);
        cudaError_t after = cudaGetLastError();
        cudaError_t reset = cudaDeviceReset();
        cudaError_t cleared = cudaGetLastError();
        int* fresh;
        CUDA_CHECK(cudaMalloc(&fresh, 32 * sizeof(int)));
        fill_kernel<<<1, 32>>>(fresh, 7);
        int h[32];
        CUDA_CHECK(cudaMemcpy(h, fresh, sizeof h, cudaMemcpyDeviceToHost));
        printf("launch %s, sync %s, again %s, launch after fault %s, reset %s, then %s, h[31]=%d\n",
               cudaGetErrorName(launch), cudaGetErrorName(sync), cudaGetErrorName(again),
               cudaGetErrorName(after), cudaGetErrorName(reset), cudaGetErrorName(cleared), h[31]);
        bool ok = launch == cudaSuccess && sync == cudaErrorAssert && again == cudaErrorAssert &&
                  after == cudaErrorAssert && reset == cudaSuccess && cleared == cudaSuccess &&
                  h[31] == 7;
        printf("trap: %s\n", ok ? "right" : "wrong");
        return ok ? 0 : 1;
    }
    printf("usage: %s race|fixed|warp-race|warp-fixed|exited|deadlock-...|trap\n", argv[0]);
    return 2;
}
