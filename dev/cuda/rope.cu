// dev/cuda/rope.cu: Llama's RoPE kernel (--arch llama), forward and backward, on the qkv buffer in
// place, checked against a float64 host reference and timed. For a row at position t = row % T
// and each head vector of [q | k] (NH query heads, then KVH kv heads; v untouched), dimension i <
// HS/2 turns with i + HS/2 (transformers' rotate_half pairing) by the angle t * f_i:
//   forward   y_i = x_i cos - x_{i+HS/2} sin,  y_{i+HS/2} = x_{i+HS/2} cos + x_i sin
//   backward  the same turn by -angle, on the gradients (the rotation is orthogonal)
// with f_i = theta^(-2i/HS), under llama3 scaling rescaled (train_gpt.cu's rope_freqs; the
// reference recomputes them in float64 from the rule).
// Layout: qkv (N, (NH + 2 KVH) HS) row-major.
// Variant 1: train_gpt.cu rope_forward / rope_backward (a thread per pair).
// Usage: ./rope [variant] [--bench] [--small]
//! cucc: -lcublasLt
//! run: ./prog --small => pass /all checks passed/
//! run: ./prog --small --bench => pass /bench rope forward variant 1: [\s\S]*all checks passed/
#define TRAIN_GPT_MODEL_ONLY
#include "../../train_gpt.cu"
#include "common.h"

static const char* const VARIANTS[] = {
    "train_gpt.cu rope_forward / rope_backward (thread per pair)"};
constexpr int NUM_VARIANTS = 1;

// f_i in float64 from the rule (not rope_freqs): theta^(-2i/HS), llama3-rescaled when asked.
static double frequency(const LlamaConfig* l, int i, int HS) {
    const double pi = 3.14159265358979323846;
    double f = pow(l->rope_theta, -2.0 * i / HS);
    if (l->rope_scaling != ROPE_SCALING_LLAMA3) return f;
    const double wavelength = 2 * pi / f, old = l->rope_original_context;
    if (wavelength > old / l->rope_low_freq_factor) return f / l->rope_factor;
    if (wavelength < old / l->rope_high_freq_factor) return f;
    const double s = (old / wavelength - l->rope_low_freq_factor) /
                     (l->rope_high_freq_factor - l->rope_low_freq_factor);
    return (1 - s) * f / l->rope_factor + s * f;
}

// The reference turn of qkv (as doubles) by sign * angle.
static std::vector<double> reference(const std::vector<floatX>& qkv, const LlamaConfig* l, int N,
                                     int T, int NH, int KVH, int HS, double sign) {
    std::vector<double> out = to_double(qkv);
    const size_t width = (size_t)(NH + 2 * KVH) * HS;
    for (int row = 0; row < N; row++)
        for (int j = 0; j < NH + KVH; j++)
            for (int i = 0; i < HS / 2; i++) {
                const double angle = sign * (row % T) * frequency(l, i, HS);
                const size_t at = row * width + (size_t)j * HS + i;
                const double x1 = out[at], x2 = out[at + HS / 2];
                out[at] = x1 * cos(angle) - x2 * sin(angle);
                out[at + HS / 2] = x2 * cos(angle) + x1 * sin(angle);
            }
    return out;
}

// The kernel computes the angle in float (t * f_i, f_i rounded to float: each off by 2^-24 of
// itself) and its cos and sin (a few ulps): an angle error of ~3 2^-24 t f_i, at most ~1e-5 for
// the positions here (t f_i < 64), moves each output by that times the pair's magnitude; the two
// products and their sum add ~3 2^-24 of it, then floatX's rounding. Bound: 2e-5 of |x1| + |x2|
// (the scale) plus floatX's relative rounding.
static const Tolerance TOL_TURN = {2e-5, FLOATX_ROUNDOFF};

// |x1| + |x2| of each element's pair (the scale of its output), v parts 0.
static std::vector<double> pair_scale(const std::vector<floatX>& qkv, int N, int NH, int KVH,
                                      int HS) {
    std::vector<double> s(qkv.size(), 0.0);
    const size_t width = (size_t)(NH + 2 * KVH) * HS;
    for (int row = 0; row < N; row++)
        for (int j = 0; j < NH + KVH; j++)
            for (int i = 0; i < HS / 2; i++) {
                const size_t at = row * width + (size_t)j * HS + i;
                s[at] = s[at + HS / 2] = fabs((float)qkv[at]) + fabs((float)qkv[at + HS / 2]);
            }
    return s;
}

static int check_shape(int N, int T, int NH, int KVH, int HS, const LlamaConfig* l, uint64_t seed) {
    const size_t n = (size_t)N * (NH + 2 * KVH) * HS;
    uint64_t rng = seed;
    const std::vector<floatX> qkv = random_floatx(n, &rng, -2.0f, 2.0f);
    const RopeFreqs freqs = rope_freqs(l, HS);
    floatX* d = device_copy(qkv);
    printf("  N %d T %d NH %d KVH %d HS %d theta %g%s\n", N, T, NH, KVH, HS, l->rope_theta,
           l->rope_scaling == ROPE_SCALING_LLAMA3 ? " llama3 scaling" : "");
    const std::vector<double> scale = pair_scale(qkv, N, NH, KVH, HS);
    bool ok = true;
    for (double sign : {1.0, -1.0}) {
        copy_to_device(d, qkv);
        if (sign > 0) rope_forward(d, &freqs, nullptr, N, T, NH, KVH, HS, 0);
        else rope_backward(d, &freqs, nullptr, N, T, NH, KVH, HS, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
        ok &= check_close(sign > 0 ? "forward" : "backward", host_floats(d, n),
                          reference(qkv, l, N, T, NH, KVH, HS, sign), scale, TOL_TURN);
    }
    CUDA_CHECK(cudaFree(d));
    return ok ? 0 : 1;
}

static void bench(const Options* o) {
    const int N = o->small ? 64 : 8 * 1024, T = 1024, NH = 32, KVH = 8, HS = 128;
    char shape[128];
    snprintf(shape, sizeof(shape), "N %d NH %d KVH %d HS %d (Llama 3 8B's attention)", N, NH, KVH,
             HS);
    print_bench_intro(shape);
    LlamaConfig l = {ARCH_LLAMA, KVH, 14336, 0, 1e-5, 500000.0};
    const RopeFreqs freqs = rope_freqs(&l, HS);
    uint64_t rng = 7;
    floatX* d = device_copy(random_floatx((size_t)N * (NH + 2 * KVH) * HS, &rng, -2.0f, 2.0f));
    // reads and writes q and k
    const double bytes = 2.0 * N * (NH + KVH) * HS * sizeof(floatX);
    bench_variants(o, "rope forward", VARIANTS, NUM_VARIANTS, bytes, 0.0,
                   [&](int) { rope_forward(d, &freqs, nullptr, N, T, NH, KVH, HS, 0); });
    CUDA_CHECK(cudaFree(d));
}

int main(int argc, char** argv) {
    Options o = parse_options(argc, argv, NUM_VARIANTS, VARIANTS);
    print_header("rope");
    const LlamaConfig plain = {ARCH_LLAMA, 1, 1, 0, 1e-5, 10000.0};
    const LlamaConfig llama3 = {ARCH_LLAMA,          1,   1,   0,   1e-5, 500000.0,
                                ROPE_SCALING_LLAMA3, 8.0, 1.0, 4.0, 16};
    const LlamaConfig theta_llama3 = {ARCH_LLAMA,          1,   1,   0,   1e-5, 10000.0,
                                      ROPE_SCALING_LLAMA3, 4.0, 1.0, 2.0, 8};
    struct Shape {
        int N, T, NH, KVH, HS;
        const LlamaConfig* l;
    };
    // positions up to 63, every head size, grouped (KVH < NH), multi-query and full heads;
    // llama3 scaling with an original context below T, so every frequency band is used
    std::vector<Shape> shapes = {{24, 24, 2, 2, 32, &plain},
                                 {40, 20, 4, 1, 64, &plain},
                                 {64, 64, 4, 2, 128, &llama3},
                                 {33, 33, 2, 1, 32, &theta_llama3}};
    int failures = 0;
    for (size_t s = 0; s < shapes.size(); s++)
        failures += check_shape(shapes[s].N, shapes[s].T, shapes[s].NH, shapes[s].KVH, shapes[s].HS,
                                shapes[s].l, 950 + s);
    if (o.bench) bench(&o);
    return finish("rope", failures);
}
