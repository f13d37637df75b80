// NCCL entry points beyond the collectives, on every rank under mpirun:
//   - ncclGetVersion reports the version of the nccl.h the program was built with
//     (NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), 2.2x or later);
//   - ncclMemAlloc / ncclMemFree, ncclCommRegister / ncclCommDeregister and the window forms,
//     with their argument errors;
//   - ncclRedOpCreatePreMulSum with a host scalar (read at creation) and a device scalar (read
//     when the collective runs) on fp32, fp16 and int32, in AllReduce and ReduceScatter;
//     ncclRedOpDestroy; an op used with another type or after destruction is refused;
//   - an AllReduce and a kernel captured into a CUDA graph (inside ncclGroupStart/End, as
//     nccl-tests does) run at every launch with fresh collective numbers.
// Expected values are computed here: each rank's contribution times its scalar, rounded to the
// element type, summed in rank order with rounding at each step.
//! cucc: -lnccl --mpi
//! cpu-only
//! run: mpirun -np 1 ./prog => pass /all \d+ nccl API checks passed on 1 ranks/
//! run: mpirun -np 2 ./prog => pass /all \d+ nccl API checks passed on 2 ranks/
//! run: mpirun -np 3 ./prog => pass /all \d+ nccl API checks passed on 3 ranks/
#include <cuda_fp16.h>

#include <cstdio>
#include <vector>
#include "nccl_mpi_test_util.h"

static int rank_, nranks_;

static void expect_result(ncclResult_t got, ncclResult_t want, const char* what) {
    char line[256];
    snprintf(line, sizeof line, "%s: %s (got %s)", what, ncclGetErrorString(want),
             ncclGetErrorString(got));
    expect(got == want, line);
}

__global__ void set_kernel(float* x, float v) { *x = v; }

__global__ void add_one_kernel(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}

static float input(int r, int i) { return (float)((r * 7 + i * 3) % 11) - 4.5f; }

static void version() {
    int v = 0;
    NCCL_CHECK(ncclGetVersion(&v));
    expect(v == NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH) && v >= NCCL_VERSION(2, 20, 0),
           "ncclGetVersion is the header's version, 2.20 or later", std::to_string(v));
}

static void memory(ncclComm_t comm) {
    void* buf = nullptr;
    NCCL_CHECK(ncclMemAlloc(&buf, 1 << 20));
    cudaPointerAttributes attr;
    CUDA_CHECK(cudaPointerGetAttributes(&attr, buf));
    void *handle = nullptr, *win = nullptr;
    NCCL_CHECK(ncclCommRegister(comm, buf, 1 << 20, &handle));
    NCCL_CHECK(
        ncclCommWindowRegister(comm, buf, 1 << 20, (ncclWindow_t*)&win, NCCL_WIN_COLL_SYMMETRIC));
    expect(attr.type == cudaMemoryTypeDevice && handle && win,
           "ncclMemAlloc gives device memory; register and window-register it");
    std::vector<char> host(64);
    void* bad = nullptr;
    expect_result(ncclCommRegister(comm, host.data(), 64, &bad), ncclInvalidArgument,
                  "registering host memory");
    expect_result(ncclCommRegister(comm, buf, (1 << 20) + 1, &bad), ncclInvalidArgument,
                  "registering past the end of the buffer");
    expect_result(ncclCommWindowRegister(comm, (char*)buf + 8, 4096, (ncclWindow_t*)&bad,
                                         NCCL_WIN_COLL_SYMMETRIC),
                  ncclInvalidArgument, "a symmetric window that is not 4096-byte aligned");
    NCCL_CHECK(ncclCommDeregister(comm, handle));
    expect_result(ncclCommDeregister(comm, handle), ncclInvalidArgument, "deregistering twice");
    NCCL_CHECK(ncclCommWindowDeregister(comm, (ncclWindow_t)win));
    NCCL_CHECK(ncclMemFree(buf));
    NCCL_CHECK(ncclMemFree(nullptr));
    expect_result(ncclMemAlloc(nullptr, 16), ncclInvalidArgument, "ncclMemAlloc(NULL, ...)");
}

// Rank r's contribution times (r + 1) (or the device scalar 0.5 (r + 1)), summed in rank order.
static void premulsum(ncclComm_t comm) {
    const int n = 257;
    std::vector<float> x(n * nranks_);
    for (int i = 0; i < n * nranks_; i++) x[i] = input(rank_, i);
    float *d_in, *d_out, *d_scalar;
    CUDA_CHECK(cudaMalloc(&d_in, x.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_out, x.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_scalar, sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d_in, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
    float host_scalar = (float)(rank_ + 1);
    ncclRedOp_t host_op, device_op;
    NCCL_CHECK(ncclRedOpCreatePreMulSum(&host_op, &host_scalar, ncclFloat32,
                                        ncclScalarHostImmediate, comm));
    host_scalar = 100;  // read before ncclRedOpCreatePreMulSum returned
    NCCL_CHECK(ncclRedOpCreatePreMulSum(&device_op, d_scalar, ncclFloat32, ncclScalarDevice, comm));
    NCCL_CHECK(ncclAllReduce(d_in, d_out, n, ncclFloat32, host_op, comm, 0));
    std::vector<float> got(n);
    CUDA_CHECK(cudaMemcpy(got.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < n; i++) {
        float want = 0;
        for (int r = 0; r < nranks_; r++) want += input(r, i) * (float)(r + 1);
        wrong += got[i] != want;
    }
    expect(wrong == 0, "AllReduce with a host-scalar PreMulSum (rank r scales by r + 1)",
           std::to_string(wrong) + " wrong");

    // The device scalar is set by a kernel queued before the collective: it holds 0 when the
    // call is made and 0.5 (r + 1) when the collective runs.
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    CUDA_CHECK(cudaMemset(d_scalar, 0, sizeof(float)));
    set_kernel<<<1, 1, 0, s>>>(d_scalar, 0.5f * (rank_ + 1));
    NCCL_CHECK(ncclReduceScatter(d_in, d_out, n, ncclFloat32, device_op, comm, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaMemcpy(got.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
    wrong = 0;
    for (int i = 0; i < n; i++) {
        float want = 0;
        for (int r = 0; r < nranks_; r++) want += input(r, rank_ * n + i) * (0.5f * (r + 1));
        wrong += got[i] != want;
    }
    expect(wrong == 0, "ReduceScatter with a device-scalar PreMulSum, read when it runs",
           std::to_string(wrong) + " wrong");

    std::vector<__half> h(n);
    for (int i = 0; i < n; i++) h[i] = __float2half(input(rank_, i) / 8);
    __half *d_h, *d_hout;
    CUDA_CHECK(cudaMalloc(&d_h, n * sizeof(__half)));
    CUDA_CHECK(cudaMalloc(&d_hout, n * sizeof(__half)));
    CUDA_CHECK(cudaMemcpy(d_h, h.data(), n * sizeof(__half), cudaMemcpyHostToDevice));
    __half hs = __float2half(0.375f * (rank_ + 1));
    ncclRedOp_t half_op;
    NCCL_CHECK(ncclRedOpCreatePreMulSum(&half_op, &hs, ncclFloat16, ncclScalarHostImmediate, comm));
    NCCL_CHECK(ncclAllReduce(d_h, d_hout, n, ncclFloat16, half_op, comm, 0));
    std::vector<__half> hgot(n);
    CUDA_CHECK(cudaMemcpy(hgot.data(), d_hout, n * sizeof(__half), cudaMemcpyDeviceToHost));
    wrong = 0;
    for (int i = 0; i < n; i++) {
        float acc = 0;
        for (int r = 0; r < nranks_; r++) {
            float scaled = __half2float(__float2half(__half2float(__float2half(input(r, i) / 8)) *
                                                     __half2float(__float2half(0.375f * (r + 1)))));
            acc = r == 0 ? scaled : __half2float(__float2half(acc + scaled));
        }
        wrong += __half2float(hgot[i]) != acc;
    }
    expect(wrong == 0, "AllReduce with a PreMulSum on fp16, rounded at each step",
           std::to_string(wrong) + " wrong");
    int *d_i, *d_iout, is = -(rank_ + 2);
    std::vector<int> iv(n), igot(n);
    for (int i = 0; i < n; i++) iv[i] = i * (rank_ + 1) - 50;
    CUDA_CHECK(cudaMalloc(&d_i, n * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_iout, n * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d_i, iv.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    ncclRedOp_t int_op;
    NCCL_CHECK(ncclRedOpCreatePreMulSum(&int_op, &is, ncclInt32, ncclScalarHostImmediate, comm));
    NCCL_CHECK(ncclAllReduce(d_i, d_iout, n, ncclInt32, int_op, comm, 0));
    CUDA_CHECK(cudaMemcpy(igot.data(), d_iout, n * sizeof(int), cudaMemcpyDeviceToHost));
    wrong = 0;
    for (int i = 0; i < n; i++) {
        int want = 0;
        for (int r = 0; r < nranks_; r++) want += (i * (r + 1) - 50) * -(r + 2);
        wrong += igot[i] != want;
    }
    expect(wrong == 0, "AllReduce with a PreMulSum on int32", std::to_string(wrong) + " wrong");

    expect_result(ncclAllReduce(d_in, d_out, n, ncclFloat16, host_op, comm, 0), ncclInvalidArgument,
                  "a fp32 PreMulSum op on fp16 data");
    NCCL_CHECK(ncclRedOpDestroy(host_op, comm));
    expect_result(ncclAllReduce(d_in, d_out, n, ncclFloat32, host_op, comm, 0), ncclInvalidArgument,
                  "an op after ncclRedOpDestroy");
    expect_result(ncclRedOpDestroy(host_op, comm), ncclInvalidArgument, "destroying it twice");
    expect_result(ncclRedOpDestroy(ncclSum, comm), ncclInvalidArgument, "destroying ncclSum");
    expect_result(
        ncclRedOpCreatePreMulSum(&host_op, d_scalar, ncclFloat32, (ncclScalarResidence_t)7, comm),
        ncclInvalidArgument, "scalar residence 7");
    for (ncclRedOp_t op : {device_op, half_op, int_op}) NCCL_CHECK(ncclRedOpDestroy(op, comm));
    for (void* p : {(void*)d_in, (void*)d_out, (void*)d_scalar, (void*)d_h, (void*)d_hout,
                    (void*)d_i, (void*)d_iout})
        CUDA_CHECK(cudaFree(p));
    CUDA_CHECK(cudaStreamDestroy(s));
}

// x += 1, then x = sum over ranks, captured once and launched three times.
static void graph(ncclComm_t comm) {
    const int n = 100;
    std::vector<float> x(n);
    for (int i = 0; i < n; i++) x[i] = input(rank_, i);
    float* d;
    CUDA_CHECK(cudaMalloc(&d, n * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    cudaGraph_t g;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    add_one_kernel<<<1, n, 0, s>>>(d, n);
    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclAllReduce(d, d, n, ncclFloat32, ncclSum, comm, s));
    NCCL_CHECK(ncclGroupEnd());
    CUDA_CHECK(cudaStreamEndCapture(s, &g));
    CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    // A collective between the launches takes its own number in between.
    std::vector<std::vector<float>> all(nranks_, std::vector<float>(x));
    for (int r = 0; r < nranks_; r++)
        for (int i = 0; i < n; i++) all[r][i] = input(r, i);
    for (int launch = 0; launch < 3; launch++) {
        CUDA_CHECK(cudaGraphLaunch(exec, s));
        NCCL_CHECK(ncclBroadcast(d, d, 1, ncclFloat32, 0, comm, s));
        std::vector<float> sum(n, 0);
        for (int r = 0; r < nranks_; r++)
            for (int i = 0; i < n; i++) sum[i] = r == 0 ? all[r][i] + 1 : sum[i] + (all[r][i] + 1);
        for (int r = 0; r < nranks_; r++) all[r] = sum;
    }
    CUDA_CHECK(cudaStreamSynchronize(s));
    std::vector<float> got(n);
    CUDA_CHECK(cudaMemcpy(got.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < n; i++) wrong += got[i] != all[0][i];
    expect(wrong == 0,
           "a captured kernel + AllReduce replayed three times, with a broadcast "
           "between the launches",
           std::to_string(wrong) + " wrong");
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(g));
    CUDA_CHECK(cudaStreamDestroy(s));
    CUDA_CHECK(cudaFree(d));
}

int main(int argc, char** argv) {
    ncclComm_t comm = mpi_nccl_start(&argc, &argv, &rank_, &nranks_);
    version();
    memory(comm);
    premulsum(comm);
    graph(comm);
    NCCL_CHECK(ncclCommDestroy(comm));
    return mpi_test_report("nccl API", test_checks, test_failures);
}
