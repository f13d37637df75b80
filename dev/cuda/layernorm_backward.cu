// dev/cuda/layernorm_backward.cu: LayerNorm backward, checked against a float64 host reference
// and timed. With xhat = (x - mean) * rstd and g = dout * weight:
//   dinp (+)= rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))   (+= when accumulating into the
//             residual stream's gradient, = otherwise)
//   dweight += sum over rows of dout * xhat;  dbias += sum over rows of dout
// Layout: dout, inp, dinp are (N, C) row-major; mean, rstd (N) float; weight, dweight, dbias (C).
// Variants:
//   1  one thread per row for dinp, then one thread per column summing all N rows
//   2  train_gpt.cu layernorm_backward: warp per row, then per-chunk column partial sums added
//      in chunk order (no atomics)
// Usage: ./layernorm_backward [variant] [--bench] [--small]
// Built with -DROW_LANES=32, the GPU's warp per row, also on the CPU runtime (whose trainer
// build gives a row one thread; see ROW_LANES in llmc/common.cuh), so both forms are checked.
//! cucc: -lcublasLt -DROW_LANES=32
//! run: ./prog --small => pass /all checks passed/
//! run: ./prog --small --bench => pass /bench layernorm_backward variant 2: [\s\S]*all checks passed/
#define TRAIN_GPT_MODEL_ONLY
#include "../../train_gpt.cu"
#include "common.h"

static const char* const VARIANTS[] = {
    "thread per row, then thread per column",
    "train_gpt.cu layernorm_backward (warp per row, chunked column sums)"};
constexpr int NUM_VARIANTS = 2;

// Variant 1, input gradient: thread `row` owns one row.
__global__ void layernorm_backward_row_kernel(floatX* dinp, const floatX* dout, const floatX* inp,
                                              const float* mean, const float* rstd,
                                              const floatX* weight, int N, int C, bool accumulate) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const size_t base = (size_t)row * C;
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int c = 0; c < C; c++) {
        float g = (float)dout[base + c] * (float)weight[c];
        sum_g += g;
        sum_gx += g * ((float)inp[base + c] - mean[row]) * rstd[row];
    }
    for (int c = 0; c < C; c++) {
        float g = (float)dout[base + c] * (float)weight[c];
        float xhat = ((float)inp[base + c] - mean[row]) * rstd[row];
        float dx = rstd[row] * (g - sum_g / C - xhat * sum_gx / C);
        dinp[base + c] = (floatX)(accumulate ? (float)dinp[base + c] + dx : dx);
    }
}

// Variant 1, parameter gradients: thread `c` owns column c and walks all N rows in order.
__global__ void layernorm_backward_column_kernel(floatX* dweight, floatX* dbias, const floatX* dout,
                                                 const floatX* inp, const float* mean,
                                                 const float* rstd, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sum_dx = 0.0f, sum_d = 0.0f;
    for (int row = 0; row < N; row++) {
        float d = (float)dout[(size_t)row * C + c];
        sum_d += d;
        sum_dx += d * ((float)inp[(size_t)row * C + c] - mean[row]) * rstd[row];
    }
    dweight[c] = (floatX)((float)dweight[c] + sum_dx);
    dbias[c] = (floatX)((float)dbias[c] + sum_d);
}

struct Buffers {  // device
    floatX *dout, *inp, *weight, *dinp, *dweight, *dbias;
    float *mean, *rstd, *partials;
};

static void free_buffers(Buffers* d) {
    device_free(
        {d->dout, d->inp, d->weight, d->dinp, d->dweight, d->dbias, d->mean, d->rstd, d->partials});
}

// Launches a variant; block_size matters to variant 1 only.
static void launch(int variant, int block_size, const Buffers* d, bool accumulate, int N, int C) {
    if (variant == 1) {
        layernorm_backward_row_kernel<<<(int)ceil_div(N, block_size), block_size>>>(
            d->dinp, d->dout, d->inp, d->mean, d->rstd, d->weight, N, C, accumulate);
        CUDA_CHECK_LAUNCH();
        layernorm_backward_column_kernel<<<(int)ceil_div(C, block_size), block_size>>>(
            d->dweight, d->dbias, d->dout, d->inp, d->mean, d->rstd, N, C);
        CUDA_CHECK_LAUNCH();
    } else {
        layernorm_backward(d->dinp, d->dweight, d->dbias, d->partials, d->dout, d->inp, d->mean,
                           d->rstd, d->weight, N, C, accumulate, 0);
    }
}

struct Inputs {  // host
    std::vector<floatX> dout, inp, weight, dinp, dweight, dbias;
    std::vector<float> mean, rstd;
};

// Random inputs; mean and rstd are the rows' true statistics (double, stored as float), as the
// forward pass would have saved them.
static Inputs make_inputs(int N, int C, uint64_t seed) {
    uint64_t rng = seed;
    Inputs in;
    in.dout = random_floatx((size_t)N * C, &rng, -1.0f, 1.0f);
    in.inp = random_floatx((size_t)N * C, &rng, -2.0f, 3.0f);
    in.weight = random_floatx(C, &rng, 0.5f, 1.5f);
    in.dinp = random_floatx((size_t)N * C, &rng, -1.0f, 1.0f);
    in.dweight = random_floatx(C, &rng, -1.0f, 1.0f);
    in.dbias = random_floatx(C, &rng, -1.0f, 1.0f);
    for (int row = 0; row < N; row++) {
        double sum = 0.0, sq = 0.0;
        for (int c = 0; c < C; c++) sum += (float)in.inp[(size_t)row * C + c];
        double m = sum / C;
        for (int c = 0; c < C; c++)
            sq +=
                ((float)in.inp[(size_t)row * C + c] - m) * ((float)in.inp[(size_t)row * C + c] - m);
        in.mean.push_back((float)m);
        in.rstd.push_back((float)(1.0 / sqrt(sq / C + (double)LN_EPS)));
    }
    return in;
}

struct Reference {
    std::vector<double> dinp, dinp_scale, dweight, dweight_scale, dbias, dbias_scale;
};

// Float64 reference from the same (rounded) inputs; each *_scale is the sum of the absolute values
// of the terms of that output.
static Reference reference(const Inputs* in, int N, int C, bool accumulate) {
    Reference r;
    r.dinp.resize((size_t)N * C);
    r.dinp_scale.resize((size_t)N * C);
    r.dweight = to_double(in->dweight);
    r.dbias = to_double(in->dbias);
    r.dweight_scale.resize(C);
    r.dbias_scale.resize(C);
    for (int c = 0; c < C; c++) {
        r.dweight_scale[c] = fabs(r.dweight[c]);
        r.dbias_scale[c] = fabs(r.dbias[c]);
    }
    std::vector<double> g(C), xhat(C);
    for (int row = 0; row < N; row++) {
        const size_t base = (size_t)row * C;
        const double m = in->mean[row], rs = in->rstd[row];
        double sum_g = 0.0, sum_gx = 0.0, abs_g = 0.0, abs_gx = 0.0;
        for (int c = 0; c < C; c++) {
            double d = (float)in->dout[base + c];
            xhat[c] = ((double)(float)in->inp[base + c] - m) * rs;
            g[c] = d * (float)in->weight[c];
            sum_g += g[c];
            sum_gx += g[c] * xhat[c];
            abs_g += fabs(g[c]);
            abs_gx += fabs(g[c] * xhat[c]);
            r.dweight[c] += d * xhat[c];
            r.dbias[c] += d;
            r.dweight_scale[c] += fabs(d * xhat[c]);
            r.dbias_scale[c] += fabs(d);
        }
        for (int c = 0; c < C; c++) {
            double old = accumulate ? (double)(float)in->dinp[base + c] : 0.0;
            r.dinp[base + c] = old + rs * (g[c] - sum_g / C - xhat[c] * sum_gx / C);
            r.dinp_scale[base + c] =
                fabs(old) + rs * (fabs(g[c]) + abs_g / C + fabs(xhat[c]) * abs_gx / C);
        }
    }
    return r;
}

// float sums stay within ~1e-6 of the sum of their terms' magnitudes (about 16 ulps); every
// output is floatX, rounded once.
static const Tolerance TOL = {1e-6, FLOATX_ROUNDOFF};

static int check_shape(int variant, int N, int C, bool accumulate, uint64_t seed) {
    Inputs in = make_inputs(N, C, seed);
    Reference ref = reference(&in, N, C, accumulate);
    Buffers d = {device_copy(in.dout),
                 device_copy(in.inp),
                 device_copy(in.weight),
                 device_poisoned<floatX>((size_t)N * C),
                 device_poisoned<floatX>(C),
                 device_poisoned<floatX>(C),
                 device_copy(in.mean),
                 device_copy(in.rstd),
                 device_poisoned<float>(ceil_div(N, COLUMN_CHUNK) * 2 * C)};
    const std::vector<int> block_sizes =
        variant == 1 ? std::vector<int>{32, 128, 1024} : std::vector<int>{0};
    int failures = 0;
    for (int block_size : block_sizes) {
        // the accumulated-into buffers start from the inputs' values (dinp poisoned when it is
        // only written)
        if (accumulate)
            CUDA_CHECK(cudaMemcpy(d.dinp, in.dinp.data(), (size_t)N * C * sizeof(floatX),
                                  cudaMemcpyHostToDevice));
        else CUDA_CHECK(cudaMemset(d.dinp, 0xff, (size_t)N * C * sizeof(floatX)));
        CUDA_CHECK(
            cudaMemcpy(d.dweight, in.dweight.data(), C * sizeof(floatX), cudaMemcpyHostToDevice));
        CUDA_CHECK(
            cudaMemcpy(d.dbias, in.dbias.data(), C * sizeof(floatX), cudaMemcpyHostToDevice));
        launch(variant, block_size, &d, accumulate, N, C);
        CUDA_CHECK(cudaDeviceSynchronize());
        printf("  variant %d N %d C %d %s block %d\n", variant, N, C,
               accumulate ? "dinp +=" : "dinp =", block_size);
        bool ok =
            check_close("dinp", host_floats(d.dinp, (size_t)N * C), ref.dinp, ref.dinp_scale, TOL);
        ok &=
            check_close("dweight", host_floats(d.dweight, C), ref.dweight, ref.dweight_scale, TOL);
        ok &= check_close("dbias", host_floats(d.dbias, C), ref.dbias, ref.dbias_scale, TOL);
        failures += !ok;
    }
    free_buffers(&d);
    return failures;
}

static void bench(const Options* o) {
    const int N = o->small ? 64 : 8 * 1024, C = o->small ? 256 : 768;
    char shape[128];
    snprintf(shape, sizeof(shape), "N %d C %d, dinp += (GPT-2 124M, B*T = %d)", N, C, N);
    print_bench_intro(shape);
    Inputs in = make_inputs(N, C, 7);
    Buffers d = {device_copy(in.dout),
                 device_copy(in.inp),
                 device_copy(in.weight),
                 device_copy(in.dinp),
                 device_copy(in.dweight),
                 device_copy(in.dbias),
                 device_copy(in.mean),
                 device_copy(in.rstd),
                 device_poisoned<float>(ceil_div(N, COLUMN_CHUNK) * 2 * C)};
    // the least traffic: read dout, inp and dinp once, write dinp
    const double bytes = 4.0 * N * C * sizeof(floatX);
    bench_variants(o, "layernorm_backward", VARIANTS, NUM_VARIANTS, bytes, 0.0,
                   [&](int v) { launch(v, 256, &d, true, N, C); });
    free_buffers(&d);
}

int main(int argc, char** argv) {
    Options o = parse_options(argc, argv, NUM_VARIANTS, VARIANTS);
    print_header("layernorm_backward");
    struct Shape {
        int N, C;
        bool accumulate;
    };
    std::vector<Shape> shapes = {{1, 64, false}, {7, 104, true}, {45, 768, true}, {70, 256, false}};
    if (!o.small)
        shapes.insert(shapes.end(), {{4096, 768, true}, {1025, 1600, true}, {8192, 768, false}});
    int failures = 0;
    for (int v = 1; v <= NUM_VARIANTS; v++) {
        if (!variant_selected(&o, v)) continue;
        for (size_t s = 0; s < shapes.size(); s++)
            failures += check_shape(v, shapes[s].N, shapes[s].C, shapes[s].accumulate, 200 + s);
    }
    if (o.bench) bench(&o);
    return finish("layernorm_backward", failures);
}
