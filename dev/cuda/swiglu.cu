// dev/cuda/swiglu.cu: Llama's SwiGLU kernels (--arch llama), forward and backward, checked against
// a float64 host reference and timed. fch holds a row's [gate | up] (the w1 and w3 products, H
// each); with g, u a pair and s = sigmoid(g):
//   forward   out = silu(g) u = g s u
//   backward  dgate = dout u s (1 + g (1 - s)),  dup = dout g s
// Layout: fch, dfch (N, 2H) row-major; out, dout (N, H).
// Variant 1: train_gpt.cu swiglu_forward / swiglu_backward (a thread per output element).
// Usage: ./swiglu [variant] [--bench] [--small]
//! cucc: -lcublasLt
//! run: ./prog --small => pass /all checks passed/
//! run: ./prog --small --bench => pass /bench swiglu backward variant 1: [\s\S]*all checks passed/
#define TRAIN_GPT_MODEL_ONLY
#include "../../train_gpt.cu"
#include "common.h"

static const char* const VARIANTS[] = {
    "train_gpt.cu swiglu_forward / swiglu_backward (thread per element)"};
constexpr int NUM_VARIANTS = 1;

// expf and the division are within a few ulps: sigmoid within ~4 2^-24 of itself, and each output
// a product of three or four such factors (the 1 + g (1 - s) factor's cancellation is bounded
// by the magnitudes of its terms, 1 + |g| (1 - s)): 2e-6 relative of the terms' magnitudes,
// then floatX's rounding.
static const Tolerance TOL = {2e-6, FLOATX_ROUNDOFF};

static int check_shape(int N, int H, float amplitude, uint64_t seed) {
    uint64_t rng = seed;
    const std::vector<floatX> fch = random_floatx((size_t)N * 2 * H, &rng, -amplitude, amplitude);
    const std::vector<floatX> dout = random_floatx((size_t)N * H, &rng, -1.0f, 1.0f);
    std::vector<double> out, out_scale, dfch((size_t)N * 2 * H), dfch_scale((size_t)N * 2 * H);
    for (int row = 0; row < N; row++)
        for (int j = 0; j < H; j++) {
            const size_t at = (size_t)row * 2 * H + j, o = (size_t)row * H + j;
            const double g = (float)fch[at], u = (float)fch[at + H], d = (float)dout[o];
            const double s = 1.0 / (1.0 + exp(-g));
            out.push_back(g * s * u);
            out_scale.push_back(fabs(g * s * u));
            dfch[at] = d * u * s * (1 + g * (1 - s));
            dfch_scale[at] = fabs(d * u * s) * (1 + fabs(g) * (1 - s));
            dfch[at + H] = d * g * s;
            dfch_scale[at + H] = fabs(d * g * s);
        }
    floatX *d_fch = device_copy(fch), *d_dout = device_copy(dout);
    floatX *d_out = device_poisoned<floatX>((size_t)N * H),
           *d_dfch = device_poisoned<floatX>(fch.size());
    printf("  N %d H %d amplitude %g\n", N, H, amplitude);
    swiglu_forward(d_out, d_fch, N, H, 0);
    swiglu_backward(d_dfch, d_dout, d_fch, N, H, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    bool ok = check_close("out", host_floats(d_out, (size_t)N * H), out, out_scale, TOL);
    ok &= check_close("dfch", host_floats(d_dfch, fch.size()), dfch, dfch_scale, TOL);
    device_free({d_fch, d_dout, d_out, d_dfch});
    return ok ? 0 : 1;
}

static void bench(const Options* o) {
    const int N = o->small ? 64 : 8 * 1024, H = 14336;
    char shape[96];
    snprintf(shape, sizeof(shape), "N %d H %d (Llama 3 8B's MLP)", N, H);
    print_bench_intro(shape);
    uint64_t rng = 7;
    floatX* fch = device_copy(random_floatx((size_t)N * 2 * H, &rng, -3.0f, 3.0f));
    floatX* dout = device_copy(random_floatx((size_t)N * H, &rng, -1.0f, 1.0f));
    floatX *out = device_poisoned<floatX>((size_t)N * H),
           *dfch = device_poisoned<floatX>((size_t)N * 2 * H);
    const double bytes = (double)N * H * sizeof(floatX);
    // forward: read 2H, write H per row; backward: read 3H, write 2H
    bench_variants(o, "swiglu forward", VARIANTS, NUM_VARIANTS, 3.0 * bytes, 0.0,
                   [&](int) { swiglu_forward(out, fch, N, H, 0); });
    bench_variants(o, "swiglu backward", VARIANTS, NUM_VARIANTS, 5.0 * bytes, 0.0,
                   [&](int) { swiglu_backward(dfch, dout, fch, N, H, 0); });
    device_free({fch, dout, out, dfch});
}

int main(int argc, char** argv) {
    Options o = parse_options(argc, argv, NUM_VARIANTS, VARIANTS);
    print_header("swiglu");
    // odd sizes (a partly used last block); gates far into both tails of the sigmoid
    int failures = check_shape(7, 96, 3.0f, 960) + check_shape(33, 170, 12.0f, 961) +
                   check_shape(2, 512, 0.01f, 962);
    if (o.bench) bench(&o);
    return finish("swiglu", failures);
}
