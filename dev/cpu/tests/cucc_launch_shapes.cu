// Launch shapes and forms: 1-D, 2-D and 3-D grids and blocks given as ints or dim3 (each thread
// records its coordinates, which the host checks against the grid it asked for); templated
// kernels with explicit and deduced arguments; overloaded kernels; kernels in a namespace and
// called with ::; launches written inside macros; a launch in an included header (this file
// includes itself once, as a header, to get one); configuration expressions with commas inside
// parentheses and templates; a kernel whose argument is a literal 0 for a pointer.
// clang-format off
//! run: ./prog => pass
#ifndef LAUNCH_SHAPES_HEADER_PART
#define LAUNCH_SHAPES_HEADER_PART
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "test_util.h"

// Each thread writes its linear global id at its position; unwritten slots stay -1.
__global__ void coords_kernel(int* out, int* dims) {
    int bx = blockIdx.x, by = blockIdx.y, bz = blockIdx.z;
    int block_linear = (bz * gridDim.y + by) * gridDim.x + bx;
    int thread_linear = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    int per_block = blockDim.x * blockDim.y * blockDim.z;
    int id = block_linear * per_block + thread_linear;
    out[id] = id;
    if (id == 0) {
        dims[0] = gridDim.x; dims[1] = gridDim.y; dims[2] = gridDim.z;
        dims[3] = blockDim.x; dims[4] = blockDim.y; dims[5] = blockDim.z;
    }
}

template <typename T, int Scale>
__global__ void scale_kernel(T* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * (T)Scale;
}

template <typename T>
__global__ void add_kernel(T* x, T amount, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += amount;
}

__global__ void mark_kernel(int* x) { x[threadIdx.x] = 1; }
__global__ void mark_kernel(float* x) { x[threadIdx.x] = 2.0f; }

// Writes 7 to out, or nothing when out is null.
__global__ void maybe_write(int* out, int* unused) {
    if (out) *out = 7;
    if (unused) *unused = 8;
}

namespace kernels {
__global__ void fill(int* x, int v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}
}  // namespace kernels

// A launch configuration named through template arguments that contain a comma.
template <int Blocks, int Threads>
struct Shape {
    static constexpr int grid = Blocks, block = Threads;
};

#define LAUNCH_FILL(ptr, value, n) kernels::fill<<<((n) + 63) / 64, 64>>>(ptr, value, n)

#include __FILE__  // the header part below, which launches from inside an included file

int failures = 0;

void check_shape(dim3 grid, dim3 block, int* d_out, int* d_dims) {
    int total = grid.x * grid.y * grid.z * block.x * block.y * block.z;
    CUDA_CHECK(cudaMemset(d_out, 0xff, total * sizeof(int)));
    coords_kernel<<<grid, block>>>(d_out, d_dims);
    CUDA_CHECK(cudaGetLastError());
    std::vector<int> got(total);
    int dims[6];
    CUDA_CHECK(cudaMemcpy(got.data(), d_out, total * sizeof(int), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(dims, d_dims, sizeof(dims), cudaMemcpyDeviceToHost));
    for (int i = 0; i < total; i++)
        if (got[i] != i) {
            printf("grid (%u,%u,%u) block (%u,%u,%u): slot %d = %d\n", grid.x, grid.y, grid.z,
                   block.x, block.y, block.z, i, got[i]);
            failures++;
            break;
        }
    int want[6] = {(int)grid.x, (int)grid.y, (int)grid.z, (int)block.x, (int)block.y, (int)block.z};
    for (int k = 0; k < 6; k++)
        if (dims[k] != want[k]) {
            printf("grid (%u,%u,%u) block (%u,%u,%u): dimension %d reads %d\n", grid.x, grid.y,
                   grid.z, block.x, block.y, block.z, k, dims[k]);
            failures++;
        }
}

template <typename T>
void check_values(const char* what, const T* d, std::vector<T> want) {
    std::vector<T> got(want.size());
    CUDA_CHECK(cudaMemcpy(got.data(), d, want.size() * sizeof(T), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < want.size(); i++)
        if (got[i] != want[i]) {
            printf("%s [%zu]: got %g, want %g\n", what, i, (double)got[i], (double)want[i]);
            failures++;
            return;
        }
}

int main() {
    int *d_out, *d_dims;
    CUDA_CHECK(cudaMalloc(&d_out, 1 << 20));
    CUDA_CHECK(cudaMalloc(&d_dims, 6 * sizeof(int)));
    check_shape(dim3(5), dim3(64), d_out, d_dims);
    check_shape(dim3(3, 4), dim3(8, 16), d_out, d_dims);
    check_shape(dim3(2, 3, 4), dim3(4, 2, 8), d_out, d_dims);
    check_shape(dim3(1, 1, 7), dim3(1, 1, 64), d_out, d_dims);
    check_shape(dim3(1, 70000 / 1000), dim3(1024), d_out, d_dims);
    coords_kernel<<<2, 32>>>(d_out, d_dims);  // plain ints
    CUDA_CHECK(cudaGetLastError());
    check_values<int>("int configuration", d_out, {0, 1, 2, 3});

    const int n = 100;
    std::vector<float> ones(n, 1.0f);
    float* d_f;
    int* d_i;
    CUDA_CHECK(cudaMalloc(&d_f, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_i, n * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d_f, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    scale_kernel<float, 3><<<std::max(1, (n + 31) / 32), 32>>>(d_f, n);
    add_kernel<<<dim3((n + 31) / 32, 1, 1), dim3(32), 0, 0>>>(d_f, 0.5f, n);  // T deduced
    add_kernel<float><<<(n + 31) / 32, 32, 0>>>(d_f, 1, n);                    // T explicit
    CUDA_CHECK(cudaGetLastError());
    check_values<float>("templated kernels", d_f, std::vector<float>(n, 4.5f));

    mark_kernel<<<1, n>>>(d_i);
    mark_kernel<<<1, n>>>(d_f);
    CUDA_CHECK(cudaGetLastError());
    check_values<int>("overload (int*)", d_i, std::vector<int>(n, 1));
    check_values<float>("overload (float*)", d_f, std::vector<float>(n, 2.0f));

    LAUNCH_FILL(d_i, 5, n);
    CUDA_CHECK(cudaGetLastError());
    check_values<int>("launch in a macro", d_i, std::vector<int>(n, 5));
    ::kernels::fill<<<1, n>>>(d_i, 6, n);
    check_values<int>("qualified name", d_i, std::vector<int>(n, 6));

    coords_kernel<<<Shape<2, 3>::grid, n < 50 ? 1 : Shape<2, 3>::block>>>(d_out, d_dims);
    CUDA_CHECK(cudaGetLastError());
    check_values<int>("template commas in the configuration", d_out, {0, 1, 2, 3, 4, 5});

    header_launch(d_i, n);
    CUDA_CHECK(cudaGetLastError());
    check_values<int>("launch in a header", d_i, std::vector<int>(n, 9));

    maybe_write<<<1, 1>>>(0, NULL);
    maybe_write<<<1, 1>>>(d_i, 0);
    CUDA_CHECK(cudaGetLastError());
    check_values<int>("literal null arguments", d_i, {7, 9});

    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(d_dims));
    CUDA_CHECK(cudaFree(d_f));
    CUDA_CHECK(cudaFree(d_i));
    printf("%s: %d mismatches\n", failures ? "FAILED" : "OK", failures);
    return failures ? 1 : 0;
}

#else
// ---- the header part: included by the main part above ----
template <int Value>
__global__ void header_kernel(int* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = Value;
}
inline void header_launch(int* x, int n) {
    header_kernel<9><<<(n + 31) / 32, 32>>>(x, n);
}
#endif
