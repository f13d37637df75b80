// cucc_barrier_fission.cu: kernels whose only synchronization is __syncthreads() statements at
// the top level of their bodies, which cucc runs as one thread loop per region between barriers
// (Thread loops at barriers in dev/cpu/cucc), and kernels with barriers that cucc must keep on
// fibers.
//   check:   every kernel against values computed on the host: one and several barriers,
//            variables kept across barriers (scalars, a pointer, arrays, several declarators in
//            one declaration, one whose address is taken), constexpr and const values and a
//            type alias used after a barrier, __shared__ and extern __shared__ arrays, a shared
//            tree reduction, sums through shared memory, a return in the last region,
//            parameters changed by each thread, 2-D and 3-D blocks, a template kernel, blocks
//            of 100 and 60 threads; the kernels cucc keeps on fibers (a barrier in a loop or an
//            if, a return before a barrier, an auto variable used after one); and the first
//            kernel launched by address (cudaLaunchKernel: the fiber path of the same body).
//   race:    a kernel that leaves out a barrier between a shared write and the neighbour's read,
//            and the same kernel with it. In thread order the racy one reads the one value the
//            fiber path reads too; under CUCC_SCHEDULE=random its result changes with the seed,
//            while the right one's never does.
//   hidden:  a region kernel that reaches __syncthreads through a device function pointer,
//            which cucc cannot see: the call ends the program with an error naming the kernel;
//            with CUCC_THREAD_LOOPS=0 (a fiber per thread) it is right.
// The -v case checks which kernels cucc runs as regions (and how many) and why the others not.
//! cpu-only
//! run: ./prog check => pass /all barrier fission checks passed/
//! run: CUCC_THREAD_LOOPS=0 ./prog check => pass /all barrier fission checks passed/
//! run: for s in 1 2 3; do CUCC_SCHEDULE=random CUCC_SEED=$s ./prog check || exit 1; done => pass /all barrier fission checks passed/
//! run: ./prog race => pass /^racy sum 1, right sum 2080: right$/
//! run: CUCC_THREAD_LOOPS=0 ./prog race => pass /^racy sum 1, right sum 2080: right$/
//! run: for s in 1 2 3 4 5 6 7 8; do CUCC_SCHEDULE=random CUCC_SEED=$s ./prog race || exit 1; done | sort -u => pass /\A(?![\s\S]*WRONG)[\s\S]*^racy sum (?!1,)\d+, right sum 2080: right$/
//! run: ./prog hidden => fail /cucc: kernel hidden_region_kernel, block \(0,0,0\), thread \(\d+,0,0\) calls __syncthreads, but cucc found no synchronizing call besides top-level __syncthreads\(\) statements in the kernel and runs it as loops over its threads between those barriers.*CUCC_THREAD_LOOPS=0/
//! run: CUCC_THREAD_LOOPS=0 ./prog hidden => pass /hidden barrier: right/
//! run: d=$(mktemp -d) && dev/cpu/cucc -v -c dev/cpu/tests/cucc_barrier_fission.cu -o $d/x.o 2>&1 | grep 'cucc: kernel'; rm -rf $d => pass /kernel auto_kernel: fibers \(not thread loops at barriers: twice, used after a barrier, has no type a typedef can repeat \(auto, decltype, attributes\)\)\n.*kernel column_finish_kernel: thread loops at barriers \(2 regions\)\n.*kernel cube_kernel: thread loops at barriers \(2 regions\)\n.*kernel early_return_kernel: fibers \(not thread loops at barriers: a return before the last barrier\)\n.*kernel hidden_region_kernel: thread loops at barriers \(2 regions\)\n.*kernel if_barrier_kernel: fibers \(not thread loops at barriers: a synchronizing call other than a top-level __syncthreads\(\)\)\n.*kernel loop_barrier_kernel: fibers \(not thread loops at barriers: a synchronizing call other than a top-level __syncthreads\(\)\)\n.*kernel race_kernel: thread loops at barriers \(2 regions\)\n.*kernel right_kernel: thread loops at barriers \(3 regions\)\n.*kernel stages_kernel: thread loops at barriers \(4 regions\)\n.*kernel template_sum_kernel: thread loops at barriers \(2 regions\)\n.*kernel tree_kernel: thread loops at barriers \(7 regions\)\n/
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>
#include "column_finish.h"
#include "test_util.h"

// A 16 x 8 block (2-D) of 128 threads per 128 elements, in stages through shared memory. Each
// thread changes the parameters out (before the first barrier, used after the last), rounds
// (used in three regions) and bias (in the one region that uses it).
constexpr int kStageThreads = 128;

__global__ void stages_kernel(float* out, const float* in, int rounds, int bias) {
    constexpr int kSpan = 3;  // hoisted ahead of the regions, sizes an array after a barrier
    const int kHalf = 2;      // a const of a literal: hoisted too
    using Pair = float2;
    __shared__ float s[kStageThreads], t[kStageThreads];
    extern __shared__ float scratch[];  // blockDim.x * blockDim.y floats
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * blockDim.x + tx;
    const float* row = in + blockIdx.x * kStageThreads;
    out += blockIdx.x * kStageThreads;
    float acc[2] = {row[tid], 2.0f * row[tid]};
    Pair p;
    p.x = acc[0];
    p.y = acc[1];
    float own = row[tid] + 1.0f;
    float* own_at = &own;  // own lives on across barriers: its address does
    s[tid] = acc[0];
    scratch[tid] = (float)tid;
    __syncthreads();
    float neighbour = s[(tid + 1) % kStageThreads];
    t[tid] = neighbour + acc[1] + scratch[kStageThreads - 1 - tid];
    for (int k = 0; k < rounds; k++) acc[0] += 1.0f;  // a region's own loop
    __syncthreads();
    float window[kSpan];
    for (int k = 0; k < kSpan; k++) window[k] = t[(tid + k) % kStageThreads];
    acc[1] = window[0] + window[1] + window[2];
    rounds -= kHalf;
    __syncthreads();
    bias += 1;
    out[tid] = acc[0] + acc[1] * p.x + p.y + neighbour + *own_at + (float)(rounds + bias);
}

static void stages_host(std::vector<float>& out, const std::vector<float>& in, int rounds,
                        int bias) {
    const int n = kStageThreads;
    for (int b = 0; b < (int)in.size() / n; b++) {
        const float* row = &in[b * n];
        std::vector<float> t(n);
        for (int i = 0; i < n; i++) t[i] = row[(i + 1) % n] + 2.0f * row[i] + (float)(n - 1 - i);
        for (int i = 0; i < n; i++) {
            float acc0 = row[i] + (float)rounds, acc1 = t[i] + t[(i + 1) % n] + t[(i + 2) % n];
            out[b * n + i] = acc0 + acc1 * row[i] + 2.0f * row[i] + row[(i + 1) % n] +
                             (row[i] + 1.0f) + (float)(rounds - 2 + bias + 1);
        }
    }
}

// The sum of a 64-thread block's values by a shared tree, each step a top-level barrier.
__global__ void tree_kernel(float* sums, const float* in) {
    __shared__ float s[64];
    const unsigned t = threadIdx.x;
    s[t] = in[blockIdx.x * 64 + t];
    __syncthreads();
    if (t < 32) s[t] += s[t + 32];
    __syncthreads();
    if (t < 16) s[t] += s[t + 16];
    __syncthreads();
    if (t < 8) s[t] += s[t + 8];
    __syncthreads();
    if (t < 4) s[t] += s[t + 4];
    __syncthreads();
    if (t < 2) s[t] += s[t + 2];
    __syncthreads();
    if (t == 0) sums[blockIdx.x] = s[0] + s[1];
}

// A 5 x 4 x 3 block (60 threads): every thread reads the value of the thread opposite.
__global__ void cube_kernel(int* out) {
    __shared__ int s[60];
    const int linear = threadIdx.x + 5 * (threadIdx.y + 4 * threadIdx.z);
    const int mine = 100 * threadIdx.z + 10 * threadIdx.y + threadIdx.x;
    s[linear] = mine;
    __syncthreads();
    out[blockIdx.x * 60 + linear] = s[59 - linear] * 1000 + mine;
}

// N threads (100: not a multiple of a warp) add up their block's values; thread 0 writes the sum,
// the others return after the barrier.
template <int N, class T>
__global__ void template_sum_kernel(T* sums, const T* in) {
    __shared__ T s[N];
    const T mine = in[blockIdx.x * N + threadIdx.x];
    s[threadIdx.x] = mine;
    __syncthreads();
    if (threadIdx.x != 0) return;
    T total = 0;
    for (int k = 0; k < N; k++) total += s[k];
    sums[blockIdx.x] = total;
}

// Kept on fibers: the barrier in a loop (a tree reduction).
__global__ void loop_barrier_kernel(float* sums, const float* in) {
    __shared__ float s[64];
    s[threadIdx.x] = in[blockIdx.x * 64 + threadIdx.x];
    __syncthreads();
    for (int stride = 32; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) sums[blockIdx.x] = s[0];
}

// Kept on fibers: a barrier inside an if (the same for every thread of a block).
__global__ void if_barrier_kernel(int* out, int reverse) {
    __shared__ int s[64];
    s[threadIdx.x] = threadIdx.x;
    if (reverse) {
        __syncthreads();
        out[threadIdx.x] = s[63 - threadIdx.x];
    }
}

// Kept on fibers: a return before the barrier (the block's threads beyond n exit first).
__global__ void early_return_kernel(int* out, int n) {
    __shared__ int s[64];
    if ((int)threadIdx.x >= n) return;
    s[threadIdx.x] = 2 * threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[n - 1 - threadIdx.x];
}

// Kept on fibers: an auto variable used after the barrier.
__global__ void auto_kernel(int* out) {
    __shared__ int s[64];
    auto twice = 2 * (int)threadIdx.x;
    s[threadIdx.x] = twice;
    __syncthreads();
    out[threadIdx.x] = s[63 - threadIdx.x] + twice;
}

// Every thread writes its shared slot and reads its neighbour's: race_kernel without a barrier
// between (a race: whether the neighbour has written yet depends on the order), right_kernel with
// one. The zeroing before the first barrier is the same for both.
__global__ void race_kernel(int* out) {
    __shared__ int s[64];
    const int t = threadIdx.x;
    s[t] = 0;
    __syncthreads();
    s[t] = t + 1;
    out[t] = s[(t + 1) % 64];
}

__global__ void right_kernel(int* out) {
    __shared__ int s[64];
    const int t = threadIdx.x;
    s[t] = 0;
    __syncthreads();
    s[t] = t + 1;
    __syncthreads();
    out[t] = s[(t + 1) % 64];
}

// A region kernel that reaches __syncthreads through a pointer, which cucc cannot see.
__device__ void reverse_through_shared(int* data) {
    __shared__ int r[64];
    r[threadIdx.x] = data[threadIdx.x];
    __syncthreads();
    data[threadIdx.x] = r[63 - threadIdx.x];
}
__device__ void (*hidden_sync)(int*) = reverse_through_shared;

__global__ void hidden_region_kernel(int* data) {
    __shared__ int s[64];
    const int t = threadIdx.x;
    s[t] = data[t] + 1;
    __syncthreads();
    data[t] = s[t];
    hidden_sync(data);
}

template <class T>
static T* device_copy(const std::vector<T>& h) {
    T* d;
    CUDA_CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
    CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

template <class T>
static std::vector<T> host_copy(const T* d, size_t n) {
    std::vector<T> h(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-5 * (1.0 + fabs(b)); }

static std::vector<float> values(size_t n, int seed) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = (float)((i * 37 + seed * 11) % 101) / 16.0f - 3.0f;
    return v;
}

static void check_columns() {
    const int C = 100, n_chunks = 37;  // 4 blocks, the last with 4 columns
    std::vector<float> partials = values((size_t)n_chunks * 2 * C, 1), ones(C, 1.0f);
    float* d_partials = device_copy(partials);
    for (int by_address = 0; by_address < 2; by_address++) {
        float *dw = device_copy(ones), *db = device_copy(ones);
        int nc = n_chunks, cols = C;
        if (by_address) {  // the kernel registry: the fiber path of the rewritten body
            void* args[] = {&dw, &db, &d_partials, &nc, &cols};
            CUDA_CHECK(cudaLaunchKernel((const void*)column_finish_kernel, dim3((C + 31) / 32),
                                        dim3(32 * kWarps), args, 0, 0));
        } else {
            column_finish_kernel<<<(C + 31) / 32, 32 * kWarps>>>(dw, db, d_partials, nc, cols);
        }
        std::vector<float> hw = host_copy(dw, C), hb = host_copy(db, C);
        bool ok = true;
        for (int c = 0; c < C; c++) {
            double w = 1.0, b = 1.0;
            for (int k = 0; k < n_chunks; k++) {
                w += partials[((size_t)k * 2 + 0) * C + c];
                b += partials[((size_t)k * 2 + 1) * C + c];
            }
            ok &= near(hw[c], w) && near(hb[c], b);
        }
        expect(ok, by_address ? "column sums, launched by address" : "column sums");
        CUDA_CHECK(cudaFree(dw));
        CUDA_CHECK(cudaFree(db));
    }
    CUDA_CHECK(cudaFree(d_partials));
}

static void check_stages() {
    const int blocks = 3, rounds = 5, bias = 7;
    std::vector<float> in = values(blocks * kStageThreads, 2), want(in.size());
    float* d_in = device_copy(in);
    float* d_out;
    CUDA_CHECK(cudaMalloc(&d_out, in.size() * sizeof(float)));
    stages_kernel<<<blocks, dim3(16, 8), kStageThreads * sizeof(float)>>>(d_out, d_in, rounds,
                                                                          bias);
    std::vector<float> got = host_copy(d_out, in.size());
    stages_host(want, in, rounds, bias);
    bool ok = true;
    for (size_t i = 0; i < in.size(); i++) ok &= near(got[i], want[i]);
    expect(ok, "stages (2-D block, 4 regions, kept variables, extern __shared__)");
    CUDA_CHECK(cudaFree(d_in));
    CUDA_CHECK(cudaFree(d_out));
}

static void check_sums() {
    const int blocks = 5;
    std::vector<float> in = values(blocks * 64, 3);
    float* d_in = device_copy(in);
    float* d_sums;
    CUDA_CHECK(cudaMalloc(&d_sums, blocks * sizeof(float)));
    for (int loop = 0; loop < 2; loop++) {
        if (loop) loop_barrier_kernel<<<blocks, 64>>>(d_sums, d_in);
        else tree_kernel<<<blocks, 64>>>(d_sums, d_in);
        std::vector<float> got = host_copy(d_sums, blocks);
        bool ok = true;
        for (int b = 0; b < blocks; b++) {
            double sum = 0;
            for (int t = 0; t < 64; t++) sum += in[b * 64 + t];
            ok &= near(got[b], sum);
        }
        expect(ok, loop ? "shared tree, barrier in a loop (fibers)"
                        : "shared tree, a top-level barrier per step (7 regions)");
    }
    CUDA_CHECK(cudaFree(d_in));
    CUDA_CHECK(cudaFree(d_sums));

    const int n = 100;
    std::vector<double> din(blocks * n);
    std::vector<float> fin(blocks * n);
    for (int i = 0; i < blocks * n; i++) fin[i] = (float)(din[i] = (i % 13) * 0.25 - 1.0);
    double* d_din = device_copy(din);
    float* d_fin = device_copy(fin);
    double* d_dsums;
    float* d_fsums;
    CUDA_CHECK(cudaMalloc(&d_dsums, blocks * sizeof(double)));
    CUDA_CHECK(cudaMalloc(&d_fsums, blocks * sizeof(float)));
    template_sum_kernel<n, double><<<blocks, n>>>(d_dsums, d_din);
    template_sum_kernel<n, float><<<blocks, n>>>(d_fsums, d_fin);
    std::vector<double> dsums = host_copy(d_dsums, blocks);
    std::vector<float> fsums = host_copy(d_fsums, blocks);
    bool ok = true;
    for (int b = 0; b < blocks; b++) {
        double sum = 0;
        for (int t = 0; t < n; t++) sum += din[b * n + t];
        ok &= near(dsums[b], sum) && near(fsums[b], sum);
    }
    expect(ok, "template kernel, 100 threads, double and float");
    CUDA_CHECK(cudaFree(d_din));
    CUDA_CHECK(cudaFree(d_fin));
    CUDA_CHECK(cudaFree(d_dsums));
    CUDA_CHECK(cudaFree(d_fsums));
}

static void check_cube() {
    const int blocks = 2;
    int* d_out;
    CUDA_CHECK(cudaMalloc(&d_out, blocks * 60 * sizeof(int)));
    cube_kernel<<<blocks, dim3(5, 4, 3)>>>(d_out);
    std::vector<int> got = host_copy(d_out, blocks * 60);
    bool ok = true;
    for (int b = 0; b < blocks; b++)
        for (int i = 0; i < 60; i++) {
            const int j = 59 - i;
            const int mine = 100 * (i / 20) + 10 * (i / 5 % 4) + i % 5;
            const int other = 100 * (j / 20) + 10 * (j / 5 % 4) + j % 5;
            ok &= got[b * 60 + i] == other * 1000 + mine;
        }
    expect(ok, "3-D block of 60 threads");
    CUDA_CHECK(cudaFree(d_out));
}

static void check_fibers() {
    int* d_out;
    CUDA_CHECK(cudaMalloc(&d_out, 64 * sizeof(int)));
    if_barrier_kernel<<<1, 64>>>(d_out, 1);
    std::vector<int> got = host_copy(d_out, 64);
    bool ok = true;
    for (int i = 0; i < 64; i++) ok &= got[i] == 63 - i;
    expect(ok, "barrier in an if (fibers)");
    early_return_kernel<<<1, 64>>>(d_out, 40);
    got = host_copy(d_out, 64);
    ok = true;
    for (int i = 0; i < 40; i++) ok &= got[i] == 2 * (39 - i);
    expect(ok, "return before the barrier (fibers)");
    auto_kernel<<<1, 64>>>(d_out);
    got = host_copy(d_out, 64);
    ok = true;
    for (int i = 0; i < 64; i++) ok &= got[i] == 2 * (63 - i) + 2 * i;
    expect(ok, "auto variable used after the barrier (fibers)");
    CUDA_CHECK(cudaFree(d_out));
}

int main(int argc, char** argv) {
    const char* mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "check") == 0) {
        check_columns();
        check_stages();
        check_sums();
        check_cube();
        check_fibers();
        return test_report("barrier fission");
    }
    if (strcmp(mode, "race") == 0) {
        int* d_out;
        CUDA_CHECK(cudaMalloc(&d_out, 2 * 64 * sizeof(int)));
        race_kernel<<<1, 64>>>(d_out);
        right_kernel<<<1, 64>>>(d_out + 64);
        std::vector<int> out = host_copy(d_out, 2 * 64);
        int sums[2] = {0, 0};
        for (int i = 0; i < 2 * 64; i++) sums[i / 64] += out[i];
        const bool right = sums[1] == 64 * 65 / 2;
        printf("racy sum %d, right sum %d: %s\n", sums[0], sums[1], right ? "right" : "WRONG");
        return right ? 0 : 1;
    }
    if (strcmp(mode, "hidden") == 0) {
        std::vector<int> h(64);
        for (int i = 0; i < 64; i++) h[i] = i;
        int* d = device_copy(h);
        hidden_region_kernel<<<1, 64>>>(d);
        h = host_copy(d, 64);
        bool right = true;
        for (int i = 0; i < 64; i++) right &= h[i] == 64 - i;
        printf("hidden barrier: %s\n", right ? "right" : "WRONG");
        return right ? 0 : 1;
    }
    fprintf(stderr, "usage: %s check|race|hidden\n", argv[0]);
    return 2;
}
