// Gallery: matrix transpose through a shared-memory tile padded to 33 columns against bank
// conflicts, 32x8 threads per 32x32 tile (each thread moves 4 elements), non-multiple sizes.
//! run: ./prog => pass
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "test_util.h"

const int TILE_DIM = 32;
const int BLOCK_ROWS = 8;

// in is (rows, cols), out is (cols, rows), both row-major.
__global__ void transpose_kernel(float* out, const float* in, int rows, int cols) {
    __shared__ float tile[TILE_DIM][TILE_DIM + 1];
    int x = blockIdx.x * TILE_DIM + threadIdx.x;
    int y = blockIdx.y * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        if (x < cols && y + j < rows)
            tile[threadIdx.y + j][threadIdx.x] = in[(size_t)(y + j) * cols + x];
    __syncthreads();
    x = blockIdx.y * TILE_DIM + threadIdx.x;
    y = blockIdx.x * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        if (x < rows && y + j < cols)
            out[(size_t)(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
}

int main() {
    const int rows = 1000, cols = 777;
    std::vector<float> in((size_t)rows * cols), out(in.size());
    for (size_t i = 0; i < in.size(); i++) in[i] = (float)i;
    float *d_in, *d_out;
    CUDA_CHECK(cudaMalloc(&d_in, in.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_out, out.size() * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d_in, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice));
    dim3 grid((cols + TILE_DIM - 1) / TILE_DIM, (rows + TILE_DIM - 1) / TILE_DIM);
    dim3 block(TILE_DIM, BLOCK_ROWS);
    transpose_kernel<<<grid, block>>>(d_out, d_in, rows, cols);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) bad += out[(size_t)c * rows + r] != in[(size_t)r * cols + c];
    printf("transpose %d x %d: %zu wrong\n", rows, cols, bad);
    CUDA_CHECK(cudaFree(d_in));
    CUDA_CHECK(cudaFree(d_out));
    return bad ? 1 : 0;
}
