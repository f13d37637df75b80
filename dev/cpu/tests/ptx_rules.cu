// The PTX rules the CPU runtime enforces on the inline PTX it runs, each reported instead of
// computing garbage:
//   exited   half of a warp returns before an mma.sync: warp-synchronous calls do not wait for
//            exited lanes (PTX ISA, sm_70+), so the mma completes without them, which .aligned
//            forbids: reported naming the lanes that exited;
//   partial  a block of 48 threads: its second warp has 16 lanes, so no mma.sync can complete;
//   sites    the two halves of a warp reach two different mma.sync statements (an if/else):
//            .aligned requires the same instruction, reported with the lanes and the site;
//   barrier  half of a warp calls ldmatrix while the other half waits at __syncthreads;
//   misaligned  an ldmatrix row address that is not 16-byte aligned: the kernel faults with
//            cudaErrorMisalignedAddress, as a GPU's misaligned access does;
//   outside  a cp.async destination past the launch's dynamic shared memory, and
//   generic  a generic (not shared) pointer given as a .shared address: both fault with
//            cudaErrorIllegalAddress.
//! cpu-only
//! run: ./prog exited => fail /kernel exited_kernel, block \(0,0,0\), warp 0: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 at .*ptx_rules.cu:\d+, but lanes 0xffff0000 of the warp have exited or do not exist/
//! run: CUCC_THREADS=1 ./prog stale => fail /kernel partial_kernel, block \(0,0,0\), warp 1: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 at .*ptx_rules.cu:\d+, but lanes 0xffff0000 of the warp have exited or do not exist/
//! run: ./prog partial => fail /kernel partial_kernel, block \(0,0,0\), warp 1: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 at .*ptx_rules.cu:\d+, but lanes 0xffff0000 of the warp have exited or do not exist/
//! run: ./prog sites => fail /kernel sites_kernel, block \(0,0,0\), warp 0: lanes 0x0000ffff execute mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 at .*ptx_rules.cu:\d+ while lanes 0xffff0000 are at another warp-synchronous call/
//! run: ./prog barrier => fail /deadlock in kernel barrier_kernel .*threads 0-15 wait in a warp-synchronous call .*; threads 16-31 wait at __syncthreads/
//! run: ./prog misaligned => fail /misaligned: cudaErrorMisalignedAddress[\s\S]*thread \(3,0,0\): ldmatrix.sync.aligned.m8n8.x1.shared.b16 at .*ptx_rules.cu:\d+: address 0x[0-9a-f]+ is not 16-byte aligned/
//! run: ./prog outside => fail /outside: cudaErrorIllegalAddress[\s\S]*thread \(16,0,0\): cp.async.cg.shared.global at .*ptx_rules.cu:\d+: shared address 0x100 \(16 bytes\) is outside the block's 256 bytes of dynamic shared memory/
//! run: ./prog generic => fail /generic: cudaErrorIllegalAddress[\s\S]*ldmatrix.sync.aligned.m8n8.x1.shared.b16 at .*ptx_rules.cu:\d+: 0x[0-9a-f]+ is not a 32-bit shared memory address/
#include <cstdint>
#include <cstdio>
#include <cstring>

__device__ void mma(float* d, const uint32_t* a, const uint32_t* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ void ldmatrix_x1(uint32_t* d, uint64_t address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];"
                 : "=r"(d[0])
                 : "l"(address));
}

__global__ void exited_kernel(float* out) {
    uint32_t a[4] = {}, b[2] = {};
    float d[4] = {};
    if (threadIdx.x >= 16) return;
    mma(d, a, b);
    out[threadIdx.x] = d[0];
}

// Two whole-warp calls in each of two warps: both of a warp's records of converged calls (which
// the runtime keeps from block to block) hold what a checked call leaves there.
__global__ void whole_kernel(float* out) {
    uint32_t a[4] = {}, b[2] = {};
    float d[4] = {};
    mma(d, a, b);
    mma(d, a, b);
    out[threadIdx.x] = d[0];
}

__global__ void partial_kernel(float* out) {
    uint32_t a[4] = {}, b[2] = {};
    float d[4] = {};
    mma(d, a, b);
    out[threadIdx.x] = d[0];
}

__global__ void sites_kernel(float* out) {
    uint32_t a[4] = {}, b[2] = {};
    float d[4] = {};
    if (threadIdx.x < 16) {
        mma(d, a, b);
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    out[threadIdx.x] = d[0];
}

__global__ void barrier_kernel(float* out) {
    __shared__ __align__(16) uint16_t tile[64];
    uint32_t d[1] = {};
    if (threadIdx.x < 16) ldmatrix_x1(d, __cvta_generic_to_shared(tile + 8 * (threadIdx.x % 8)));
    else __syncthreads();
    out[threadIdx.x] = (float)d[0];
}

__global__ void misaligned_kernel(float* out) {
    __shared__ __align__(16) uint16_t tile[128];
    uint32_t d[1] = {};
    ldmatrix_x1(d, __cvta_generic_to_shared(tile + 8 * (threadIdx.x % 8) + (threadIdx.x == 3)));
    out[threadIdx.x] = (float)d[0];
}

__global__ void outside_kernel(float* out, const float* src) {
    extern __shared__ __align__(16) unsigned char dyn[];
    const uint32_t dst = (uint32_t)__cvta_generic_to_shared(dyn) + 16 * threadIdx.x;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
    asm volatile("cp.async.wait_all;" ::: "memory");
    out[threadIdx.x] = (float)dyn[16 * threadIdx.x];
}

__global__ void generic_kernel(float* out) {
    __shared__ __align__(16) uint16_t tile[64];
    uint32_t d[1] = {};
    ldmatrix_x1(d, (uint64_t)(tile + 8 * (threadIdx.x % 8)));  // the pointer, not cvta'd
    out[threadIdx.x] = (float)d[0];
}

int main(int argc, char** argv) {
    const char* which = argc > 1 ? argv[1] : "";
    float *d_out, *d_src;
    cudaMalloc(&d_out, 64 * sizeof(float));
    cudaMalloc(&d_src, 64 * sizeof(float));
    if (strcmp(which, "exited") == 0) exited_kernel<<<1, 32>>>(d_out);
    else if (strcmp(which, "stale") == 0) {  // partial's warp 1 after whole's, on one OS thread
        whole_kernel<<<1, 64>>>(d_out);
        if (cudaDeviceSynchronize() != cudaSuccess) return 2;
        partial_kernel<<<1, 48>>>(d_out);
    } else if (strcmp(which, "partial") == 0) partial_kernel<<<1, 48>>>(d_out);
    else if (strcmp(which, "sites") == 0) sites_kernel<<<1, 32>>>(d_out);
    else if (strcmp(which, "barrier") == 0) barrier_kernel<<<1, 32>>>(d_out);
    else if (strcmp(which, "misaligned") == 0) misaligned_kernel<<<1, 32>>>(d_out);
    else if (strcmp(which, "outside") == 0) outside_kernel<<<1, 32, 256>>>(d_out, d_src);
    else if (strcmp(which, "generic") == 0) generic_kernel<<<1, 32>>>(d_out);
    else return 2;
    cudaError_t err = cudaDeviceSynchronize();
    printf("%s: %s\n", which, cudaGetErrorName(err));
    return err == cudaSuccess ? 0 : 1;
}
