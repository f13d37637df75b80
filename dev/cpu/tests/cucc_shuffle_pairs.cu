// Warp shuffles of the toolkit's 16-bit pair types, __nv_bfloat162 and __half2 (cuda_bf16.h and
// cuda_fp16.h give __shfl_*_sync overloads for them). Each lane packs two values that are exact
// in both formats, every shuffle kind moves them, and the host recomputes which lane each
// result must come from.
//! run: ./prog => pass
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdio>

// out is (4, 32, 4): for shuffle kind k and lane l, the low and high halves received as
// bfloat162, then as half2. Lane l sends (l, l + 100).
__global__ void shuffle_pairs_kernel(float* out) {
    int lane = threadIdx.x;
    __nv_bfloat162 b = __floats2bfloat162_rn((float)lane, (float)(lane + 100));
    __half2 h = __floats2half2_rn((float)lane, (float)(lane + 100));
    __nv_bfloat162 rb[4] = {__shfl_sync(0xffffffffu, b, 31 - lane),
                            __shfl_up_sync(0xffffffffu, b, 3), __shfl_down_sync(0xffffffffu, b, 5),
                            __shfl_xor_sync(0xffffffffu, b, 6)};
    __half2 rh[4] = {__shfl_sync(0xffffffffu, h, 31 - lane), __shfl_up_sync(0xffffffffu, h, 3),
                     __shfl_down_sync(0xffffffffu, h, 5), __shfl_xor_sync(0xffffffffu, h, 6)};
    for (int k = 0; k < 4; k++) {
        float* o = out + (k * 32 + lane) * 4;
        o[0] = __low2float(rb[k]);
        o[1] = __high2float(rb[k]);
        o[2] = __low2float(rh[k]);
        o[3] = __high2float(rh[k]);
    }
}

int main() {
    float* d_out;
    float out[4 * 32 * 4];
    if (cudaMalloc(&d_out, sizeof(out)) != cudaSuccess) return 1;
    shuffle_pairs_kernel<<<1, 32>>>(d_out);
    cudaError_t err = cudaMemcpy(out, d_out, sizeof(out), cudaMemcpyDeviceToHost);
    if (err != cudaSuccess) {
        printf("FAIL: %s\n", cudaGetErrorString(err));
        return 1;
    }
    const char* kinds[4] = {"shfl (31 - lane)", "shfl_up 3", "shfl_down 5", "shfl_xor 6"};
    int bad = 0;
    for (int k = 0; k < 4; k++) {
        for (int lane = 0; lane < 32; lane++) {
            int src = k == 0   ? 31 - lane
                      : k == 1 ? (lane >= 3 ? lane - 3 : lane)
                      : k == 2 ? (lane + 5 < 32 ? lane + 5 : lane)
                               : lane ^ 6;
            const float* o = out + (k * 32 + lane) * 4;
            for (int j = 0; j < 4; j++) {
                float want = (float)(src + (j % 2) * 100);
                if (o[j] != want && bad++ < 5)
                    printf("FAIL: %s lane %d value %d: %g, want %g\n", kinds[k], lane, j, o[j],
                           want);
            }
        }
    }
    printf("bf16x2 and half2 shuffles: %d wrong values of %d\n", bad, 4 * 32 * 4);
    return bad == 0 ? 0 : 1;
}
