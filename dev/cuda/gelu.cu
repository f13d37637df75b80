// dev/cuda/gelu.cu: the GELU forward and backward kernels (the tanh approximation, as GPT-2 uses
// it), checked against a float64 host reference and timed. With th = tanh(u),
// u = sqrt(2/pi) (x + 0.044715 x^3):
//   forward   out = 0.5 x (1 + th)
//   backward  d = dout * (0.5 (1 + th) + 0.5 x (1 - th^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)), in
//             place: d holds the gradient of the output before and of the input after
// Layout: inp, out, d are n elements, element-wise (the (N, 4C) MLP activations, flat); n is a
// multiple of the 16-byte pack (x128::size elements), as 4C always is.
// Variants:
//   1  one thread per element
//   2  train_gpt.cu gelu_forward / gelu_backward: grid-stride over 16-byte packs; checked through
//      the launchers (block 0) and with the kernels launched directly on a grid of STRIDE_GRID
//      blocks of other sizes, so that the grid-stride loop wraps
// Usage: ./gelu [variant] [--bench] [--small]
// Built with -DGELU_PACKS=1, the GPU's pack a thread, also on the CPU runtime (whose trainer
// build gives a thread four; see GELU_PACKS in train_gpt.cu), so both forms are checked.
//! cucc: -lcublasLt -DGELU_PACKS=1
//! run: ./prog --small => pass /all checks passed/
//! run: ./prog --small --bench => pass /bench gelu forward variant 2: [\s\S]*bench gelu backward variant 2: [\s\S]*all checks passed/
#define TRAIN_GPT_MODEL_ONLY
#include "../../train_gpt.cu"
#include "common.h"

static const char* const VARIANTS[] = {
    "one thread per element",
    "train_gpt.cu gelu_forward / gelu_backward (grid-stride, 16-byte packs)"};
constexpr int NUM_VARIANTS = 2;

// Variant 1: thread i owns element i (out[i] forward, d[i] in place backward).
__global__ void gelu_forward_element_kernel(floatX* out, const floatX* inp, size_t n) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = (float)inp[i];
    const float th = tanhf(GELU_SCALE * (x + 0.044715f * x * x * x));
    out[i] = (floatX)(0.5f * x * (1.0f + th));
}

__global__ void gelu_backward_element_kernel(floatX* d, const floatX* inp, size_t n) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = (float)inp[i];
    const float th = tanhf(GELU_SCALE * (x + 0.044715f * x * x * x));
    const float du = GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    d[i] = (floatX)((float)d[i] * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du));
}

// Launches a variant's forward (out from inp) or backward (d in place). Variant 1 runs
// ceil(n / block_size) blocks; variant 2 goes through the launcher for block_size 0 and runs the
// kernel on STRIDE_GRID blocks of block_size threads otherwise.
static void launch(int variant, int block_size, bool backward, floatX* out_or_d, const floatX* inp,
                   size_t n) {
    if (variant == 1) {
        const unsigned grid = (unsigned)ceil_div(n, block_size);
        if (backward) gelu_backward_element_kernel<<<grid, block_size>>>(out_or_d, inp, n);
        else gelu_forward_element_kernel<<<grid, block_size>>>(out_or_d, inp, n);
        CUDA_CHECK_LAUNCH();
    } else if (block_size == 0) {
        if (backward) gelu_backward(out_or_d, inp, n, 0);
        else gelu_forward(out_or_d, inp, n, 0);
    } else {
        if (backward) gelu_kernel<true><<<STRIDE_GRID, block_size>>>(out_or_d, inp, n);
        else gelu_kernel<false><<<STRIDE_GRID, block_size>>>(out_or_d, inp, n);
        CUDA_CHECK_LAUNCH();
    }
}

struct Reference {
    std::vector<double> out, out_scale, dinp, dinp_scale;
};

// Float64 reference, with sqrt(2/pi) and 0.044715 in double. Each scale is the sum of the
// magnitudes of the terms of its output: an error of a few ulps in th (or in 1 - th^2) moves the
// output by that many ulps of the scale, however much 1 + th or 1 - th^2 cancels.
static Reference reference(const std::vector<floatX>& inp, const std::vector<floatX>& dout) {
    const double s = sqrt(2.0 / M_PI), a = 0.044715;
    Reference r;
    for (size_t i = 0; i < inp.size(); i++) {
        const double x = (float)inp[i], g = (float)dout[i];
        const double th = tanh(s * (x + a * x * x * x));
        const double du = s * (1.0 + 3.0 * a * x * x);
        r.out.push_back(0.5 * x * (1.0 + th));
        r.out_scale.push_back(0.5 * fabs(x) * (1.0 + fabs(th)));
        r.dinp.push_back(g * (0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du));
        r.dinp_scale.push_back(fabs(g) *
                               (0.5 * (1.0 + fabs(th)) + 0.5 * fabs(x) * (1.0 + th * th) * du));
    }
    return r;
}

// tanhf is within 2 ulps (CUDA's bound; glibc's is tighter) and its float argument within a few
// ulps of u, which moves th by at most 0.45 (the largest u sech^2 u) times that: th is off by
// about 4 ulps of 1, 1 - th^2 by about 8; the products and sums around them add an ulp of the
// scale each. 16 ulps of the scale (16 x 2^-24) holds fp32 close to exact; the outputs are
// floatX, rounded once on top (bf16: 2^-8 of the value, which dwarfs the float part).
static const Tolerance TOL = {16 * 0x1p-24, FLOATX_ROUNDOFF};

// Checks one variant on n elements drawn from [-amplitude, amplitude] for every block size it
// takes, forward and backward; returns the failure count. Amplitude 8 reaches the tails, where
// 1 + th underflows (x < 0) and 1 - th^2 does (both signs).
static int check_shape(int variant, size_t n, float amplitude, uint64_t seed) {
    uint64_t rng = seed;
    std::vector<floatX> inp = random_floatx(n, &rng, -amplitude, amplitude);
    std::vector<floatX> dout = random_floatx(n, &rng, -1.0f, 1.0f);
    Reference ref = reference(inp, dout);
    floatX* d_inp = device_copy(inp);
    floatX* d_out = device_poisoned<floatX>(n);
    floatX* d_d = device_poisoned<floatX>(n);
    const std::vector<int> block_sizes =
        variant == 1 ? std::vector<int>{32, 96, 1024} : std::vector<int>{0, 64, 160};
    int failures = 0;
    for (int block_size : block_sizes) {
        CUDA_CHECK(cudaMemset(d_out, 0xff, n * sizeof(floatX)));
        copy_to_device(d_d, dout);
        launch(variant, block_size, false, d_out, d_inp, n);
        launch(variant, block_size, true, d_d, d_inp, n);
        CUDA_CHECK(cudaDeviceSynchronize());
        printf("  variant %d n %zu amplitude %g block %d\n", variant, n, amplitude, block_size);
        bool ok = check_close("out", host_floats(d_out, n), ref.out, ref.out_scale, TOL);
        ok &= check_close("dinp", host_floats(d_d, n), ref.dinp, ref.dinp_scale, TOL);
        failures += !ok;
    }
    device_free({d_inp, d_out, d_d});
    return failures;
}

static void bench(const Options* o) {
    const size_t rows = o->small ? 64 : 8 * 1024, n = rows * 3072;
    char shape[128];
    snprintf(shape, sizeof(shape), "n %zu (GPT-2 124M: B*T = %zu rows of 4C = 3072)", n, rows);
    print_bench_intro(shape);
    uint64_t rng = 7;
    floatX* d_inp = device_copy(random_floatx(n, &rng, -4.0f, 4.0f));
    floatX* d_out = device_poisoned<floatX>(n);
    floatX* d_d = device_copy(random_floatx(n, &rng, -1.0f, 1.0f));
    // forward: read inp, write out; backward: read inp and d, write d (each run scales the last
    // run's d again, which changes nothing about the traffic)
    for (bool backward : {false, true})
        bench_variants(o, backward ? "gelu backward" : "gelu forward", VARIANTS, NUM_VARIANTS,
                       (backward ? 3.0 : 2.0) * n * sizeof(floatX), 0.0, [&](int v) {
                           launch(v, v == 1 ? 256 : 0, backward, backward ? d_d : d_out, d_inp, n);
                       });
    device_free({d_inp, d_out, d_d});
}

int main(int argc, char** argv) {
    Options o = parse_options(argc, argv, NUM_VARIANTS, VARIANTS);
    print_header("gelu");
    struct Shape {
        size_t n;
        float amplitude;
    };
    // odd pack counts (1, 37, 1001); small x, where out ~ x / 2, at 4608 elements
    std::vector<Shape> shapes = {
        {x128::size, 8.0f}, {37 * x128::size, 8.0f}, {1001 * x128::size, 3.0f}, {4608, 0.01f}};
    if (!o.small)
        shapes.insert(shapes.end(), {{(size_t)4096 * 3072, 8.0f}, {(size_t)1025 * 6400, 3.0f}});
    int failures = 0;
    for (int v = 1; v <= NUM_VARIANTS; v++) {
        if (!variant_selected(&o, v)) continue;
        for (size_t s = 0; s < shapes.size(); s++)
            failures += check_shape(v, shapes[s].n, shapes[s].amplitude, 600 + s);
    }
    if (o.bench) bench(&o);
    return finish("gelu", failures);
}
