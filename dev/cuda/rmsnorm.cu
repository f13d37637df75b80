// dev/cuda/rmsnorm.cu: Llama's RMSNorm kernels (--arch llama), forward fused with the residual
// add before it, its recompute from the saved rstd, and backward, checked against a float64 host
// reference and timed. For a row x of C values with the learned scale w (eps --norm-eps):
//   forward   x = a + b (stored to residual, rounded to floatX first; b may be absent: x = a),
//             r = 1 / sqrt(mean(x^2) + eps), out = x * r * w, r saved to rstd
//   recompute out again from x and the saved r (activation recompute): the forward's bits
//   backward  with xhat = x * r and g = dout * w: dinp += r * (g - xhat * mean(g * xhat));
//             dw += sum over rows of dout * xhat (column_sums' chunked sums, no atomics)
// Layout: a, b, residual, out, dout, dinp (N, C) row-major; rstd (N) float; w, dw (C).
// Variant 1: train_gpt.cu rmsnorm_forward / rmsnorm_recompute / rmsnorm_backward (a warp per row).
// Usage: ./rmsnorm [variant] [--bench] [--small]
// Built with -DROW_LANES=32, the GPU's warp per row, also on the CPU runtime (whose trainer
// build gives a row one thread; see ROW_LANES in llmc/common.cuh), so both forms are checked.
//! cucc: -lcublasLt -DROW_LANES=32
//! run: ./prog --small => pass /all checks passed/
//! run: ./prog --small --bench => pass /bench rmsnorm backward variant 1: [\s\S]*all checks passed/
#define TRAIN_GPT_MODEL_ONLY
#include "../../train_gpt.cu"
#include "common.h"

static const char* const VARIANTS[] = {
    "train_gpt.cu rmsnorm_forward / rmsnorm_backward (warp per row, chunked column sums)"};
constexpr int NUM_VARIANTS = 1;

struct Inputs {  // host
    std::vector<floatX> a, b, w, dout, dinp, dw;
};

static Inputs make_inputs(int N, int C, float amplitude, uint64_t seed) {
    uint64_t rng = seed;
    Inputs in;
    in.a = random_floatx((size_t)N * C, &rng, -2.0f * amplitude, 3.0f * amplitude);
    in.b = random_floatx((size_t)N * C, &rng, -1.0f * amplitude, 1.0f * amplitude);
    in.w = random_floatx(C, &rng, 0.5f, 1.5f);
    in.dout = random_floatx((size_t)N * C, &rng, -1.0f, 1.0f);
    in.dinp = random_floatx((size_t)N * C, &rng, -1.0f, 1.0f);
    in.dw = random_floatx(C, &rng, -1.0f, 1.0f);
    return in;
}

struct Reference {
    std::vector<double> x, rstd, out, dinp, dinp_scale, dw, dw_scale;
};

// Float64 from the same (rounded) inputs; x is a + b rounded to floatX, as the kernel stores it.
static Reference reference(const Inputs* in, int N, int C, double eps) {
    Reference r;
    r.dw = to_double(in->dw);
    for (double w : r.dw) r.dw_scale.push_back(fabs(w));
    for (int row = 0; row < N; row++) {
        const size_t at = (size_t)row * C;
        double sq = 0.0;
        for (int c = 0; c < C; c++) {
            const double x = round_floatx((double)(float)in->a[at + c] + (float)in->b[at + c]);
            r.x.push_back(x);
            sq += x * x;
        }
        const double rs = 1.0 / sqrt(sq / C + eps);
        r.rstd.push_back(rs);
        double sum_gx = 0.0, abs_gx = 0.0;
        for (int c = 0; c < C; c++) {
            const double x = r.x[at + c], w = (float)in->w[c], dy = (float)in->dout[at + c];
            r.out.push_back(x * rs * w);
            sum_gx += dy * w * x * rs;
            abs_gx += fabs(dy * w * x * rs);
            r.dw[c] += dy * x * rs;
            r.dw_scale[c] += fabs(dy * x * rs);
        }
        for (int c = 0; c < C; c++) {
            const double x = r.x[at + c], g = (double)(float)in->dout[at + c] * (float)in->w[c];
            const double old = (float)in->dinp[at + c];
            r.dinp.push_back(old + rs * (g - x * rs * sum_gx / C));
            r.dinp_scale.push_back(fabs(old) + rs * (fabs(g) + fabs(x * rs) * abs_gx / C));
        }
    }
    return r;
}

// rstd: a float sum of C <= 1024 positive squares, off by ~sqrt(C) 2^-24 of itself (~2e-6 at
// 1024), r by half that, plus the square root's and the division's roundings: held to 4e-6
// relative. out = x * r * w: two more roundings of itself, then floatX's. dinp and dw are float
// sums of products (C of them, or N): within ~1e-6 of the sum of their terms' magnitudes, then
// floatX's rounding. The residual is a + b rounded once: exact against the rounded reference.
static const Tolerance TOL_RSTD = {0.0, 4e-6};
static const Tolerance TOL_OUT = {0.0, 4e-6 + 2 * 0x1p-24 + FLOATX_ROUNDOFF};
static const Tolerance TOL_GRAD = {1e-6, FLOATX_ROUNDOFF};
static const Tolerance TOL_EXACT = {0.0, 0.0};

static int check_shape(int N, int C, float amplitude, double eps, uint64_t seed) {
    const size_t n = (size_t)N * C;
    Inputs in = make_inputs(N, C, amplitude, seed);
    Reference ref = reference(&in, N, C, eps);
    floatX *a = device_copy(in.a), *b = device_copy(in.b), *w = device_copy(in.w);
    floatX *residual = device_poisoned<floatX>(n), *out = device_poisoned<floatX>(n);
    floatX *dout = device_copy(in.dout), *dinp = device_copy(in.dinp), *dw = device_copy(in.dw);
    float* rstd = device_poisoned<float>(N);
    float* partials = device_poisoned<float>(ceil_div((size_t)N, COLUMN_CHUNK) * 2 * C);
    printf("  N %d C %d amplitude %g eps %g\n", N, C, amplitude, eps);
    rmsnorm_forward(residual, out, rstd, a, b, w, N, C, (float)eps, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> out_fwd = host_floats(out, n);
    bool ok = check_close("residual", host_floats(residual, n), ref.x, {}, TOL_EXACT);
    ok &= check_close("rstd", host_floats(rstd, N), ref.rstd, {}, TOL_RSTD);
    ok &= check_close("out", out_fwd, ref.out, {}, TOL_OUT);
    CUDA_CHECK(cudaMemset(out, 0xff, n * sizeof(floatX)));
    rmsnorm_recompute(out, rstd, residual, w, N, C, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> out_again = host_floats(out, n);
    const bool same = memcmp(out_again.data(), out_fwd.data(), n * sizeof(float)) == 0;
    printf("    recompute  bit-identical to the forward pass: %s\n", same ? "ok" : "FAIL");
    ok &= same;
    rmsnorm_backward(dinp, dw, partials, dout, residual, rstd, w, N, C, true, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    ok &= check_close("dinp", host_floats(dinp, n), ref.dinp, ref.dinp_scale, TOL_GRAD);
    ok &= check_close("dw", host_floats(dw, C), ref.dw, ref.dw_scale, TOL_GRAD);
    device_free({a, b, w, residual, out, dout, dinp, dw, rstd, partials});
    return ok ? 0 : 1;
}

static void bench(const Options* o) {
    const int N = o->small ? 64 : 8 * 1024, C = 4096;
    char shape[96];
    snprintf(shape, sizeof(shape), "N %d C %d (Llama 3 8B's width)", N, C);
    print_bench_intro(shape);
    Inputs in = make_inputs(N, C, 1.0f, 7);
    floatX *a = device_copy(in.a), *b = device_copy(in.b), *w = device_copy(in.w);
    floatX *residual = device_copy(in.a), *out = device_copy(in.a), *dout = device_copy(in.dout);
    floatX *dinp = device_copy(in.dinp), *dw = device_copy(in.dw);
    float* rstd = device_poisoned<float>(N);
    float* partials = device_poisoned<float>(ceil_div((size_t)N, COLUMN_CHUNK) * 2 * C);
    const double bytes = (double)N * C * sizeof(floatX);
    rmsnorm_forward(residual, out, rstd, a, b, w, N, C, 1e-5f, 0);
    // forward: read a, b, write the residual and out; backward: read x and dout twice (dx, then
    // the column sums), read and write dinp
    bench_variants(o, "rmsnorm forward", VARIANTS, NUM_VARIANTS, 4.0 * bytes, 0.0,
                   [&](int) { rmsnorm_forward(residual, out, rstd, a, b, w, N, C, 1e-5f, 0); });
    bench_variants(o, "rmsnorm backward", VARIANTS, NUM_VARIANTS, 6.0 * bytes, 0.0, [&](int) {
        rmsnorm_backward(dinp, dw, partials, dout, residual, rstd, w, N, C, true, 0);
    });
    device_free({a, b, w, residual, out, dout, dinp, dw, rstd, partials});
}

int main(int argc, char** argv) {
    Options o = parse_options(argc, argv, NUM_VARIANTS, VARIANTS);
    print_header("rmsnorm");
    struct Shape {
        int N, C;
        float amplitude;
        double eps;
    };
    // odd rows (a partly empty last block, 70 rows: 3 column-sum chunks), widths from one pack
    // per lane to several; a small amplitude makes mean(x^2) comparable to eps
    std::vector<Shape> shapes = {
        {1, 64, 1.0f, 1e-5}, {7, 256, 1.0f, 1e-6}, {70, 768, 1.0f, 1e-5}, {9, 128, 1e-3f, 1e-5}};
    if (!o.small) shapes.insert(shapes.end(), {{4096, 1024, 1.0f, 1e-5}, {1025, 4096, 1.0f, 1e-5}});
    int failures = 0;
    for (size_t s = 0; s < shapes.size(); s++)
        failures +=
            check_shape(shapes[s].N, shapes[s].C, shapes[s].amplitude, shapes[s].eps, 900 + s);
    if (o.bench) bench(&o);
    return finish("rmsnorm", failures);
}
