// runtime_block.cu: kernels that exercise what a block does (built-in indices, __syncthreads
// and its reductions, warp shuffles and votes, dynamic shared memory, deep stacks) and the
// launch checks, each compared with a host computation. Valid CUDA: it must pass on a GPU too.
//! run: ./prog => pass /all block checks passed/
//! run: CUCC_THREADS=1 ./prog => pass /all block checks passed/
//! run: CUCC_THREADS=3 CUCC_SCHEDULE=random CUCC_SEED=7 ./prog => pass /all block checks passed/
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "test_util.h"

// Every thread writes its indices; out is (grid, block) flattened as x fastest.
__global__ void indices_kernel(int4* out) {
    unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned nthreads = blockDim.x * blockDim.y * blockDim.z;
    out[block * nthreads + thread] = make_int4(threadIdx.x | threadIdx.y << 10 | threadIdx.z << 20,
                                               blockIdx.x | blockIdx.y << 10 | blockIdx.z << 20,
                                               blockDim.x | blockDim.y << 10 | blockDim.z << 20,
                                               gridDim.x | gridDim.y << 10 | gridDim.z << 20);
}

// Tree sum of in[0..n) per block in dynamic shared memory (one barrier per level).
__global__ void block_sum_kernel(long long* out, const int* in, int n) {
    extern __shared__ long long partial[];
    int t = threadIdx.x;
    long long s = 0;
    for (int i = blockIdx.x * blockDim.x + t; i < n; i += gridDim.x * blockDim.x) s += in[i];
    partial[t] = s;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (t < stride) partial[t] += partial[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = partial[0];
}

// The predicate reductions of __syncthreads_count / _and / _or.
__global__ void barrier_votes_kernel(int* out, int threshold) {
    int t = threadIdx.x;
    int count = __syncthreads_count(t < threshold);
    int all = __syncthreads_and(t < threshold);
    int any = __syncthreads_or(t >= threshold);
    if (t == 0) {
        out[0] = count;
        out[1] = all != 0;
        out[2] = any != 0;
    }
}

// Warp sums with xor and down shuffles, a ballot, and two half warps shuffling with disjoint
// masks at the same time.
__global__ void warp_kernel(int* out, const int* in) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x % 32;
    int v = in[i];
    int x = v;
    for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
    int d = v;
    for (int o = 16; o > 0; o /= 2) d += __shfl_down_sync(0xffffffffu, d, o);
    unsigned ballot = __ballot_sync(0xffffffffu, v % 3 == 0);
    int half;
    if (lane < 16) half = __shfl_xor_sync(0x0000ffffu, v, 1);
    else half = __shfl_xor_sync(0xffff0000u, v, 2);
    int from0 = __shfl_sync(0xffffffffu, v, 0);
    out[4 * i + 0] = x;
    out[4 * i + 1] = lane == 0 ? d : 0;
    out[4 * i + 2] = (int)ballot;
    out[4 * i + 3] = half + from0 * 1000;
}

// Writes all of its dynamic shared memory, then each thread sums a stripe; also reports the
// alignment of the dynamic shared memory and uses a large local array (deep stack).
__global__ void smem_kernel(unsigned* out, int words) {
    extern __shared__ unsigned words_smem[];
    for (int i = threadIdx.x; i < words; i += blockDim.x) words_smem[i] = i * 2654435761u;
    __syncthreads();
    unsigned s = 0;
    for (int i = threadIdx.x; i < words; i += blockDim.x) s += words_smem[words - 1 - i];
    volatile unsigned char local[16384];
    for (int i = 0; i < 16384; i++) local[i] = (unsigned char)(i + threadIdx.x);
    unsigned l = 0;
    for (int i = 0; i < 16384; i += 97) l += local[i];
    out[threadIdx.x] = s;
    out[blockDim.x + threadIdx.x] = l;
    if (threadIdx.x == 0) out[2 * blockDim.x] = (unsigned)((size_t)words_smem % 16);
}

__global__ void poke_kernel(int* flag) { *flag = 1; }

int main() {
    // Built-in indices over a 3-D grid of 3-D blocks.
    {
        dim3 grid(3, 2, 2), block(4, 3, 2);
        int n = 12 * 24;
        int4* d;
        CUDA_CHECK(cudaMalloc(&d, n * sizeof(int4)));
        indices_kernel<<<grid, block>>>(d);
        CUDA_CHECK(cudaGetLastError());
        std::vector<int4> h(n);
        CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(int4), cudaMemcpyDeviceToHost));
        bool ok = true;
        for (int bz = 0; bz < 2; bz++)
            for (int by = 0; by < 2; by++)
                for (int bx = 0; bx < 3; bx++)
                    for (int tz = 0; tz < 2; tz++)
                        for (int ty = 0; ty < 3; ty++)
                            for (int tx = 0; tx < 4; tx++) {
                                int b = bx + 3 * (by + 2 * bz), t = tx + 4 * (ty + 3 * tz);
                                int4 v = h[b * 24 + t];
                                ok &= v.x == (tx | ty << 10 | tz << 20) &&
                                      v.y == (bx | by << 10 | bz << 20) &&
                                      v.z == (4 | 3 << 10 | 2 << 20) &&
                                      v.w == (3 | 2 << 10 | 2 << 20);
                            }
        expect(ok, "threadIdx/blockIdx/blockDim/gridDim of a (3,2,2) x (4,3,2) launch");
        CUDA_CHECK(cudaFree(d));
    }
    // Barrier tree sum.
    {
        int n = 100003, blocks = 7, threads = 256;
        std::vector<int> h(n);
        for (int i = 0; i < n; i++) h[i] = (i * 7919) % 1000 - 500;
        int* d;
        long long* dsum;
        CUDA_CHECK(cudaMalloc(&d, n * sizeof(int)));
        CUDA_CHECK(cudaMalloc(&dsum, blocks * sizeof(long long)));
        CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
        block_sum_kernel<<<blocks, threads, threads * sizeof(long long)>>>(dsum, d, n);
        CUDA_CHECK(cudaGetLastError());
        std::vector<long long> sums(blocks);
        CUDA_CHECK(
            cudaMemcpy(sums.data(), dsum, blocks * sizeof(long long), cudaMemcpyDeviceToHost));
        long long got = 0, want = 0;
        for (long long s : sums) got += s;
        for (int i = 0; i < n; i++) want += h[i];
        printf("block sum %lld, host %lld\n", got, want);
        expect(got == want, "__syncthreads tree sum equals the host sum");
        CUDA_CHECK(cudaFree(d));
        CUDA_CHECK(cudaFree(dsum));
    }
    // Barrier votes.
    {
        int* d;
        int h[3];
        CUDA_CHECK(cudaMalloc(&d, 3 * sizeof(int)));
        barrier_votes_kernel<<<1, 200>>>(d, 77);
        CUDA_CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
        expect(h[0] == 77 && h[1] == 0 && h[2] == 1,
               "__syncthreads_count/and/or with 77 of 200 true");
        barrier_votes_kernel<<<1, 200>>>(d, 200);
        CUDA_CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
        expect(h[0] == 200 && h[1] == 1 && h[2] == 0, "__syncthreads_count/and/or with all true");
        CUDA_CHECK(cudaFree(d));
    }
    // Warp shuffles and votes.
    {
        int n = 4 * 96;
        std::vector<int> h(n), out(4 * n);
        for (int i = 0; i < n; i++) h[i] = (i * 37) % 101;
        int *d, *dout;
        CUDA_CHECK(cudaMalloc(&d, n * sizeof(int)));
        CUDA_CHECK(cudaMalloc(&dout, 4 * n * sizeof(int)));
        CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
        warp_kernel<<<4, 96>>>(dout, d);
        CUDA_CHECK(cudaMemcpy(out.data(), dout, 4 * n * sizeof(int), cudaMemcpyDeviceToHost));
        bool sums = true, downs = true, ballots = true, halves = true;
        for (int w = 0; w < n / 32; w++) {
            int sum = 0;
            unsigned ballot = 0;
            for (int l = 0; l < 32; l++) {
                sum += h[32 * w + l];
                if (h[32 * w + l] % 3 == 0) ballot |= 1u << l;
            }
            for (int l = 0; l < 32; l++) {
                int i = 32 * w + l;
                int partner = l < 16 ? (l ^ 1) : (l ^ 2);
                sums &= out[4 * i] == sum;
                downs &= l != 0 || out[4 * i + 1] == sum;
                ballots &= (unsigned)out[4 * i + 2] == ballot;
                halves &= out[4 * i + 3] == h[32 * w + partner] + 1000 * h[32 * w];
            }
        }
        expect(sums, "__shfl_xor_sync warp sums");
        expect(downs, "__shfl_down_sync warp sums in lane 0");
        expect(ballots, "__ballot_sync");
        expect(halves, "two half warps shuffling with disjoint masks, and __shfl_sync from lane 0");
        CUDA_CHECK(cudaFree(d));
        CUDA_CHECK(cudaFree(dout));
    }
    // Dynamic shared memory above 48 KiB (opt-in) and deep stacks.
    {
        int threads = 128, words = 100 * 1024 / 4;
        unsigned* d;
        CUDA_CHECK(cudaMalloc(&d, (2 * threads + 1) * sizeof(unsigned)));
        smem_kernel<<<1, threads, words * 4>>>(d, words);
        expect(cudaGetLastError() == cudaErrorInvalidValue,
               "100 KiB of dynamic shared memory without opting in: cudaErrorInvalidValue");
        expect(cudaGetLastError() == cudaSuccess, "the launch error is cleared once read");
        CUDA_CHECK(cudaFuncSetAttribute((const void*)smem_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, words * 4));
        smem_kernel<<<1, threads, words * 4>>>(d, words);
        CUDA_CHECK(cudaGetLastError());
        std::vector<unsigned> h(2 * threads + 1);
        CUDA_CHECK(cudaMemcpy(h.data(), d, h.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
        bool ok = true, local_ok = true;
        for (int t = 0; t < threads; t++) {
            unsigned s = 0, l = 0;
            for (int i = t; i < words; i += threads) s += (unsigned)(words - 1 - i) * 2654435761u;
            for (int i = 0; i < 16384; i += 97) l += (unsigned char)(i + t);
            ok &= h[t] == s;
            local_ok &= h[threads + t] == l;
        }
        expect(ok, "100 KiB of dynamic shared memory after cudaFuncSetAttribute");
        expect(local_ok, "a 16 KiB local array per thread");
        expect(h[2 * threads] == 0, "dynamic shared memory is 16-byte aligned");
        expect(cudaFuncSetAttribute((const void*)smem_kernel,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    227 * 1024 + 1) == cudaErrorInvalidValue,
               "cudaFuncSetAttribute above 227 KiB: cudaErrorInvalidValue");
        cudaGetLastError();
        CUDA_CHECK(cudaFree(d));
    }
    // Launch configuration errors: reported, not sticky, and the kernel does not run.
    {
        int* flag;
        CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
        CUDA_CHECK(cudaMemset(flag, 0, sizeof(int)));
        struct Bad {
            dim3 grid, block;
            const char* what;
        } bad[] = {
            {dim3(1), dim3(1025), "1025 threads per block"},
            {dim3(1), dim3(32, 32, 2), "2048 threads per block"},
            {dim3(1), dim3(1, 1, 65), "block z of 65"},
            {dim3(2147483648u), dim3(1), "grid x of 2^31"},
            {dim3(1, 65536), dim3(1), "grid y of 65536"},
            {dim3(1, 1, 65536), dim3(1), "grid z of 65536"},
            {dim3(0), dim3(32), "grid x of 0"},
            {dim3(1), dim3(32, 0), "block y of 0"},
        };
        for (const Bad& b : bad) {
            poke_kernel<<<b.grid, b.block>>>(flag);
            cudaError_t peek = cudaPeekAtLastError();
            cudaError_t err = cudaGetLastError();
            char what[128];
            snprintf(what, sizeof what, "%s: cudaErrorInvalidConfiguration (got %s)", b.what,
                     cudaGetErrorName(err));
            expect(peek == cudaErrorInvalidConfiguration && err == cudaErrorInvalidConfiguration,
                   what);
        }
        poke_kernel<<<1, 1, 48 * 1024 + 1>>>(flag);
        expect(cudaGetLastError() == cudaErrorInvalidValue,
               "48 KiB + 1 of dynamic shared memory: cudaErrorInvalidValue");
        int h = -1;
        CUDA_CHECK(cudaMemcpy(&h, flag, sizeof(int), cudaMemcpyDeviceToHost));
        expect(h == 0, "rejected launches did not run");
        CUDA_CHECK(cudaDeviceReset());
    }
    return test_report("block");
}
