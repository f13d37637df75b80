// dev/cuda/layernorm_forward.cu: LayerNorm forward (fused with the residual add before it),
// checked against a float64 host reference and timed.
//   x = a + b rounded to floatX (stored to residual_out), or x = a when b is absent
//   out = (x - mean) * rstd * weight + bias, rstd = 1/sqrt(var + 1e-5); mean, rstd saved (float)
// Layout: a, b, residual_out, out are (N, C) row-major (N = B*T rows); weight, bias (C).
// Variants:
//   1  one thread per row, plain loops (the simplest correct kernel, any block size)
//   2  train_gpt.cu layernorm_forward: one warp per row, 128-bit loads
// Usage: ./layernorm_forward [variant] [--bench] [--small]
// Built with -DROW_LANES=32, the GPU's warp per row, also on the CPU runtime (whose trainer
// build gives a row one thread; see ROW_LANES in llmc/common.cuh), so both forms are checked.
//! cucc: -lcublasLt -DROW_LANES=32
//! run: ./prog --small => pass /all checks passed/
//! run: ./prog --small --bench => pass /bench layernorm_forward variant 2: [\s\S]*all checks passed/
#define TRAIN_GPT_MODEL_ONLY
#include "../../train_gpt.cu"
#include "common.h"

static const char* const VARIANTS[] = {"one thread per row",
                                       "train_gpt.cu layernorm_forward (warp per row)"};
constexpr int NUM_VARIANTS = 2;

// Variant 1: thread `row` does the whole row in three passes over global memory.
__global__ void layernorm_forward_row_kernel(floatX* residual_out, floatX* out, float* mean_out,
                                             float* rstd_out, const floatX* a, const floatX* b,
                                             const floatX* weight, const floatX* bias, int N,
                                             int C) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const floatX* x = a + (size_t)row * C;
    if (b) {
        for (int c = 0; c < C; c++)
            residual_out[(size_t)row * C + c] =
                (floatX)((float)x[c] + (float)b[(size_t)row * C + c]);
        x = residual_out + (size_t)row * C;
    }
    float sum = 0.0f;
    for (int c = 0; c < C; c++) sum += (float)x[c];
    const float mean = sum / C;
    float sq = 0.0f;
    for (int c = 0; c < C; c++) sq += ((float)x[c] - mean) * ((float)x[c] - mean);
    const float rstd = 1.0f / sqrtf(sq / C + LN_EPS);
    for (int c = 0; c < C; c++)
        out[(size_t)row * C + c] =
            (floatX)(((float)x[c] - mean) * rstd * (float)weight[c] + (float)bias[c]);
    mean_out[row] = mean;
    rstd_out[row] = rstd;
}

struct Buffers {  // device
    floatX *a, *b, *weight, *bias, *residual, *out;
    float *mean, *rstd;
};

static void free_buffers(Buffers* d) {
    device_free({d->a, d->b, d->weight, d->bias, d->residual, d->out, d->mean, d->rstd});
}

// Launches a variant; block_size matters to variant 1 only (variant 2 has its fixed shape).
static void launch(int variant, int block_size, const Buffers* d, bool fused, int N, int C) {
    const floatX* b = fused ? d->b : nullptr;
    if (variant == 1) {
        layernorm_forward_row_kernel<<<(int)ceil_div(N, block_size), block_size>>>(
            d->residual, d->out, d->mean, d->rstd, d->a, b, d->weight, d->bias, N, C);
        CUDA_CHECK_LAUNCH();
    } else {
        layernorm_forward(d->residual, d->out, d->mean, d->rstd, d->a, b, d->weight, d->bias, N, C,
                          0);
    }
}

struct Reference {
    std::vector<double> residual, out, out_scale, mean, mean_scale, rstd;
};

// Float64 reference. The residual sum is formed in float and rounded to floatX, as specified.
static Reference reference(const std::vector<floatX>& a, const std::vector<floatX>& b, bool fused,
                           const std::vector<floatX>& weight, const std::vector<floatX>& bias,
                           int N, int C) {
    Reference r;
    r.residual.resize((size_t)N * C);
    r.out.resize((size_t)N * C);
    r.out_scale.resize((size_t)N * C);
    std::vector<double> x(C);
    for (int row = 0; row < N; row++) {
        double sum = 0.0, abs_sum = 0.0;
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)row * C + c;
            x[c] = fused ? round_floatx((float)a[i] + (float)b[i]) : (double)(float)a[i];
            r.residual[i] = x[c];
            sum += x[c];
            abs_sum += fabs(x[c]);
        }
        double mean = sum / C, var = 0.0;
        for (int c = 0; c < C; c++) var += (x[c] - mean) * (x[c] - mean);
        double rstd = 1.0 / sqrt(var / C + (double)LN_EPS);
        r.mean.push_back(mean);
        r.mean_scale.push_back(abs_sum / C);
        r.rstd.push_back(rstd);
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)row * C + c;
            double w = (float)weight[c], bb = (float)bias[c];
            r.out[i] = (x[c] - mean) * rstd * w + bb;
            r.out_scale[i] = (fabs(x[c]) + fabs(mean)) * rstd * fabs(w) + fabs(bb);
        }
    }
    return r;
}

// The variance is a float sum of C positive terms, whose rounding error grows like
// sqrt(C) * 2^-24 of the sum (~3e-6 at C = 2048): mean, rstd and out are held to 1e-5 of their
// terms' magnitude (rstd relative to itself, ~half the variance's relative error); floatX outputs
// add one rounding.
static const Tolerance TOL_MEAN = {1e-5, 0.0};
static const Tolerance TOL_RSTD = {0.0, 1e-5};
static const Tolerance TOL_OUT = {1e-5, FLOATX_ROUNDOFF};
static const Tolerance TOL_EXACT = {0.0, 0.0};

// Checks one variant on one shape for every block size it takes; returns the failure count.
// amplitude scales the inputs: a small one makes the variance comparable to LN_EPS, so the
// epsilon's placement matters.
static int check_shape(int variant, int N, int C, bool fused, float amplitude, uint64_t seed) {
    uint64_t rng = seed;
    std::vector<floatX> a = random_floatx((size_t)N * C, &rng, -2.0f * amplitude, 3.0f * amplitude);
    std::vector<floatX> b = random_floatx((size_t)N * C, &rng, -amplitude, amplitude);
    std::vector<floatX> weight = random_floatx(C, &rng, 0.5f, 1.5f);
    std::vector<floatX> bias = random_floatx(C, &rng, -0.5f, 0.5f);
    Reference ref = reference(a, b, fused, weight, bias, N, C);
    Buffers d = {device_copy(a),
                 device_copy(b),
                 device_copy(weight),
                 device_copy(bias),
                 device_poisoned<floatX>((size_t)N * C),
                 device_poisoned<floatX>((size_t)N * C),
                 device_poisoned<float>(N),
                 device_poisoned<float>(N)};
    const std::vector<int> block_sizes =
        variant == 1 ? std::vector<int>{32, 64, 256, 1024} : std::vector<int>{0};
    int failures = 0;
    for (int block_size : block_sizes) {
        CUDA_CHECK(cudaMemset(d.out, 0xff, (size_t)N * C * sizeof(floatX)));
        CUDA_CHECK(cudaMemset(d.residual, 0xff, (size_t)N * C * sizeof(floatX)));
        CUDA_CHECK(cudaMemset(d.mean, 0xff, N * sizeof(float)));
        CUDA_CHECK(cudaMemset(d.rstd, 0xff, N * sizeof(float)));
        launch(variant, block_size, &d, fused, N, C);
        CUDA_CHECK(cudaDeviceSynchronize());
        printf("  variant %d N %d C %d %s block %d\n", variant, N, C,
               fused ? "fused residual" : "no residual", block_size);
        bool ok =
            check_close("out", host_floats(d.out, (size_t)N * C), ref.out, ref.out_scale, TOL_OUT);
        ok &= check_close("mean", host_floats(d.mean, N), ref.mean, ref.mean_scale, TOL_MEAN);
        ok &= check_close("rstd", host_floats(d.rstd, N), ref.rstd, {}, TOL_RSTD);
        if (fused)
            ok &= check_close("residual", host_floats(d.residual, (size_t)N * C), ref.residual, {},
                              TOL_EXACT);
        failures += !ok;
    }
    free_buffers(&d);
    return failures;
}

static void bench(const Options* o) {
    const int N = o->small ? 64 : 8 * 1024, C = o->small ? 256 : 768;
    char shape[128];
    snprintf(shape, sizeof(shape), "N %d C %d, fused residual (GPT-2 124M, B*T = %d)", N, C, N);
    print_bench_intro(shape);
    uint64_t rng = 7;
    Buffers d = {device_copy(random_floatx((size_t)N * C, &rng, -2.0f, 2.0f)),
                 device_copy(random_floatx((size_t)N * C, &rng, -1.0f, 1.0f)),
                 device_copy(random_floatx(C, &rng, 0.5f, 1.5f)),
                 device_copy(random_floatx(C, &rng, -0.5f, 0.5f)),
                 device_poisoned<floatX>((size_t)N * C),
                 device_poisoned<floatX>((size_t)N * C),
                 device_poisoned<float>(N),
                 device_poisoned<float>(N)};
    // reads a and b, writes residual and out (the weights and the statistics are negligible)
    const double bytes = 4.0 * N * C * sizeof(floatX);
    bench_variants(o, "layernorm_forward", VARIANTS, NUM_VARIANTS, bytes, 0.0,
                   [&](int v) { launch(v, 256, &d, true, N, C); });
    free_buffers(&d);
}

int main(int argc, char** argv) {
    Options o = parse_options(argc, argv, NUM_VARIANTS, VARIANTS);
    print_header("layernorm_forward");
    struct Shape {
        int N, C;
        bool fused;
        float amplitude;
    };
    std::vector<Shape> shapes = {{1, 64, false, 1.0f},
                                 {7, 104, true, 1.0f},
                                 {33, 768, true, 1.0f},
                                 {40, 1024, false, 1.0f},
                                 {16, 256, false, 0.003f}};
    if (!o.small)
        shapes.insert(
            shapes.end(),
            {{4096, 768, true, 1.0f}, {1025, 1600, true, 1.0f}, {2048, 2048, false, 1.0f}});
    int failures = 0;
    for (int v = 1; v <= NUM_VARIANTS; v++) {
        if (!variant_selected(&o, v)) continue;
        for (size_t s = 0; s < shapes.size(); s++)
            failures += check_shape(v, shapes[s].N, shapes[s].C, shapes[s].fused,
                                    shapes[s].amplitude, 100 + s);
    }
    if (o.bench) bench(&o);
    return finish("layernorm_forward", failures);
}
