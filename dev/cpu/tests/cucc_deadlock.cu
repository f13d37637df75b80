// Kernels that can never finish stop the program with a message naming the kernel instead of
// hanging: threads of one block waiting at two different __syncthreads, and two lanes whose
// shuffles with the same mask never match (one moves an int, the other a double). The message
// says what each thread does, with the verb agreeing with one thread or a range.
//! cpu-only
//! run: ./prog barrier => fail /deadlock in kernel split_barrier_kernel \(block \(0,0,0\)\): thread 0 waits at __syncthreads \(.*cucc_deadlock.cu:\d+\); thread 1 waits at __syncthreads \(.*cucc_deadlock.cu:\d+\); thread 2 waits/
//! run: ./prog shuffle => fail /deadlock in kernel mismatched_shuffle_kernel \(block \(0,0,0\)\): thread 0 waits in a warp-synchronous call of warp 0 with mask 0x00000003 for lanes 0x00000002; thread 1 waits in a warp-synchronous call of warp 0 with mask 0x00000003 for lanes 0x00000001; threads 2-31 have exited/
#include <cstdio>
#include <cstring>

// The even threads wait at one barrier, the odd threads at another.
__global__ void split_barrier_kernel(int* out) {
    if (threadIdx.x % 2 == 0) {
        __syncthreads();
        out[threadIdx.x] = 1;
    } else {
        __syncthreads();
        out[threadIdx.x] = 2;
    }
}

// Lanes 0 and 1 shuffle with the same mask but different types: the calls never match.
__global__ void mismatched_shuffle_kernel(int* out) {
    if (threadIdx.x == 0) out[0] = __shfl_sync(0x3u, 5, 1);
    if (threadIdx.x == 1) out[1] = (int)__shfl_sync(0x3u, 5.0, 0);
}

int main(int argc, char** argv) {
    int* d_out;
    cudaMalloc(&d_out, 64 * sizeof(int));
    if (argc > 1 && strcmp(argv[1], "barrier") == 0) split_barrier_kernel<<<1, 64>>>(d_out);
    else mismatched_shuffle_kernel<<<1, 32>>>(d_out);
    cudaError_t err = cudaDeviceSynchronize();
    printf("the kernel finished (%s): the deadlock was not reported\n", cudaGetErrorString(err));
    return 0;
}
