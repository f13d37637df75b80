// dev/cuda/qk_norm.cu: the QK-norm kernels (--qk-norm: RMSNorm of every head's query and key,
// with learned per-dimension scales q_w for the queries and k_w for the keys, shared by the
// heads), forward and backward, checked against a float64 host reference and timed. For one
// head's q or k vector x of HS dimensions, with its scale w:
//   forward   r = 1 / sqrt(mean(x^2) + 1e-6);  y = x * r * w, in place of x in qkv; x saved to raw
//             and r to rstd
//   backward  with xhat = x * r (r the saved rstd) and g = dy * w: dx = r * (g - xhat * mean(g *
//             xhat)), in place of dy in dqkv;  dq_w += sum over rows and heads of dy * xhat for
//             the queries, dk_w likewise for the keys
// The v part of qkv and of dqkv is left as it was.
// Layout: qkv, dqkv (N, 3C) row-major, q k v parts of C = NH * HS each, head h at h * HS in a
// part; raw (N, 2C), the q and k parts; rstd (N, 2, NH) float, vector v = (row * 2 + part) * NH +
// head (part 0 q, 1 k); q_w, k_w, dq_w, dk_w (HS).
// Variants:
//   1  one thread per vector for y and dx; the scale gradients one thread per (part, dimension),
//      adding all N * NH vectors in order
//   2  train_gpt.cu qk_norm_forward / qk_norm_backward: a group of HS / x128::size lanes per
//      vector (16-byte packs, group shuffle sums); the scale gradients in per-chunk partial sums
//      added in chunk order (no atomics)
// Usage: ./qk_norm [variant] [--bench] [--small]
//! cucc: -lcublasLt
//! run: ./prog --small => pass /all checks passed/
//! run: ./prog --small --bench => pass /bench qk_norm forward variant 2: [\s\S]*bench qk_norm backward variant 2: [\s\S]*all checks passed/
#define TRAIN_GPT_MODEL_ONLY
#include "../../train_gpt.cu"
#include "common.h"

static const char* const VARIANTS[] = {
    "thread per vector, thread per scale dimension",
    "train_gpt.cu qk_norm_forward / qk_norm_backward (lane group per vector, chunked sums)"};
constexpr int NUM_VARIANTS = 2;

// Variant 1, forward: thread v owns vector v (the rstd index) and reads it three times.
__global__ void qk_norm_forward_vector_kernel(floatX* qkv, floatX* raw, float* rstd,
                                              const floatX* q_w, const floatX* k_w, int N, int NH,
                                              int HS) {
    const size_t v = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (v >= (size_t)N * 2 * NH) return;
    const int C = NH * HS, part = (int)(v / NH % 2), h = (int)(v % NH);
    const size_t row = v / (2 * NH), at = (size_t)part * C + h * HS;
    floatX* x = qkv + row * 3 * C + at;
    const floatX* w = part == 0 ? q_w : k_w;
    float sq = 0.0f;
    for (int i = 0; i < HS; i++) sq += (float)x[i] * (float)x[i];
    const float r = 1.0f / sqrtf(sq / HS + QK_NORM_EPS);
    for (int i = 0; i < HS; i++) {
        raw[row * 2 * C + at + i] = x[i];
        x[i] = (floatX)((float)x[i] * r * (float)w[i]);
    }
    rstd[v] = r;
}

// Variant 1, scale gradients: thread part * HS + i owns dimension i of part's scale and adds
// dy * xhat over the (row, head) pairs in order.
__global__ void qk_norm_scale_column_kernel(floatX* dq_w, floatX* dk_w, const floatX* dqkv,
                                            const floatX* raw, const float* rstd, int N, int NH,
                                            int HS) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= 2 * HS) return;
    const int part = t / HS, i = t % HS, C = NH * HS;
    float sum = 0.0f;
    for (int row = 0; row < N; row++)
        for (int h = 0; h < NH; h++) {
            const size_t at = (size_t)part * C + h * HS + i;
            const float r = rstd[((size_t)row * 2 + part) * NH + h];
            sum +=
                (float)dqkv[(size_t)row * 3 * C + at] * ((float)raw[(size_t)row * 2 * C + at] * r);
        }
    floatX* dw = part == 0 ? dq_w : dk_w;
    dw[i] = (floatX)((float)dw[i] + sum);
}

// Variant 1, input gradient: thread v owns vector v of dqkv (it reads all of dy before writing).
__global__ void qk_norm_backward_vector_kernel(floatX* dqkv, const floatX* raw, const float* rstd,
                                               const floatX* q_w, const floatX* k_w, int N, int NH,
                                               int HS) {
    const size_t v = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (v >= (size_t)N * 2 * NH) return;
    const int C = NH * HS, part = (int)(v / NH % 2), h = (int)(v % NH);
    const size_t row = v / (2 * NH), at = (size_t)part * C + h * HS;
    floatX* dy = dqkv + row * 3 * C + at;
    const floatX* x = raw + row * 2 * C + at;
    const floatX* w = part == 0 ? q_w : k_w;
    const float r = rstd[v];
    float sum_gx = 0.0f;
    for (int i = 0; i < HS; i++) sum_gx += (float)dy[i] * (float)w[i] * ((float)x[i] * r);
    const float mean_gx = sum_gx / HS;
    for (int i = 0; i < HS; i++)
        dy[i] = (floatX)(r * ((float)dy[i] * (float)w[i] - (float)x[i] * r * mean_gx));
}

struct Buffers {  // device
    floatX *qkv, *raw, *q_w, *k_w, *dqkv, *dq_w, *dk_w;
    float *rstd, *partials;
};

static void free_buffers(Buffers* d) {
    device_free({d->qkv, d->raw, d->q_w, d->k_w, d->dqkv, d->dq_w, d->dk_w, d->rstd, d->partials});
}

// Launches a variant's forward pass (qkv, raw, rstd) or backward pass (dqkv, dq_w, dk_w, from
// raw and rstd); block_size matters to variant 1 only (variant 2 has its fixed shapes).
static void launch(int variant, int block_size, bool backward, const Buffers* d, int N, int NH,
                   int HS) {
    if (variant == 2) {
        if (backward)
            qk_norm_backward(d->dqkv, d->dq_w, d->dk_w, d->partials, d->raw, d->rstd, d->q_w,
                             d->k_w, N, NH, NH, HS, 0);
        else qk_norm_forward(d->qkv, d->raw, d->rstd, d->q_w, d->k_w, N, NH, NH, HS, 0);
        return;
    }
    const unsigned vector_blocks = (unsigned)ceil_div((size_t)N * 2 * NH, block_size);
    if (backward) {
        // the scale gradients read dy: first
        qk_norm_scale_column_kernel<<<(unsigned)ceil_div(2 * HS, block_size), block_size>>>(
            d->dq_w, d->dk_w, d->dqkv, d->raw, d->rstd, N, NH, HS);
        CUDA_CHECK_LAUNCH();
        qk_norm_backward_vector_kernel<<<vector_blocks, block_size>>>(d->dqkv, d->raw, d->rstd,
                                                                      d->q_w, d->k_w, N, NH, HS);
    } else {
        qk_norm_forward_vector_kernel<<<vector_blocks, block_size>>>(d->qkv, d->raw, d->rstd,
                                                                     d->q_w, d->k_w, N, NH, HS);
    }
    CUDA_CHECK_LAUNCH();
}

// qk_norm_backward's partials: ceil(N * NH / COLUMN_CHUNK) chunks of 2 * HS floats.
static size_t partials_floats(int N, int NH, int HS) {
    return ceil_div((size_t)N * NH, COLUMN_CHUNK) * 2 * HS;
}

// r of one vector of HS values, in float64.
static double rms_rstd(const floatX* x, int HS) {
    double sq = 0.0;
    for (int i = 0; i < HS; i++) sq += (double)(float)x[i] * (float)x[i];
    return 1.0 / sqrt(sq / HS + 1e-6);
}

struct Inputs {  // host
    std::vector<floatX> qkv, q_w, k_w, dqkv, dq_w, dk_w;
    std::vector<floatX> raw;  // the q and k parts of qkv: the backward pass's x
    std::vector<float> rstd;  // r of every vector of raw (double, stored as float)
};

// Random inputs; raw and rstd are what the forward pass saves for qkv, so that the backward pass
// runs on the forward pass's input. amplitude scales qkv: a small one makes mean(x^2) comparable
// to the epsilon, so its placement matters.
static Inputs make_inputs(int N, int NH, int HS, float amplitude, uint64_t seed) {
    const int C = NH * HS;
    uint64_t rng = seed;
    Inputs in;
    in.qkv = random_floatx((size_t)N * 3 * C, &rng, -2.0f * amplitude, 3.0f * amplitude);
    in.q_w = random_floatx(HS, &rng, 0.5f, 1.5f);
    in.k_w = random_floatx(HS, &rng, 0.5f, 1.5f);
    in.dqkv = random_floatx((size_t)N * 3 * C, &rng, -1.0f, 1.0f);
    in.dq_w = random_floatx(HS, &rng, -1.0f, 1.0f);
    in.dk_w = random_floatx(HS, &rng, -1.0f, 1.0f);
    for (int row = 0; row < N; row++)
        in.raw.insert(in.raw.end(), in.qkv.begin() + (size_t)row * 3 * C,
                      in.qkv.begin() + (size_t)row * 3 * C + 2 * C);
    for (size_t v = 0; v < (size_t)N * 2 * NH; v++)
        in.rstd.push_back((float)rms_rstd(&in.raw[v * HS], HS));
    return in;
}

// Columns [begin, end) of every row of an (N, width) row-major matrix.
template <class T>
static std::vector<T> columns(const std::vector<T>& m, int N, int width, int begin, int end) {
    std::vector<T> out;
    for (int row = 0; row < N; row++)
        out.insert(out.end(), m.begin() + (size_t)row * width + begin,
                   m.begin() + (size_t)row * width + end);
    return out;
}

struct Reference {
    std::vector<double> y, rstd, dx, dx_scale, dq_w, dk_w, dw_scale_q, dw_scale_k;
};

// Float64 reference from the same (rounded) inputs: y and dx over the q and k parts, (N, 2C) like
// raw (a vector's HS values are contiguous there too: vector v at v * HS). The forward pass
// computes r itself, the backward pass takes the saved float one. Each *_scale is the sum of the
// magnitudes of the terms of that output.
static Reference reference(const Inputs* in, int N, int NH, int HS) {
    Reference r;
    r.dq_w = to_double(in->dq_w);
    r.dk_w = to_double(in->dk_w);
    for (double w : r.dq_w) r.dw_scale_q.push_back(fabs(w));
    for (double w : r.dk_w) r.dw_scale_k.push_back(fabs(w));
    for (size_t v = 0; v < (size_t)N * 2 * NH; v++) {
        const floatX* x = &in->raw[v * HS];
        const bool is_q = v / NH % 2 == 0;
        const std::vector<floatX>& w = is_q ? in->q_w : in->k_w;
        const size_t row = v / (2 * NH), h = v % NH;
        const floatX* dy = &in->dqkv[row * 3 * NH * HS + (is_q ? 0 : NH * HS) + h * HS];
        std::vector<double>& dw = is_q ? r.dq_w : r.dk_w;
        std::vector<double>& dw_scale = is_q ? r.dw_scale_q : r.dw_scale_k;
        const double rf = rms_rstd(x, HS), rb = in->rstd[v];
        r.rstd.push_back(rf);
        double sum_gx = 0.0, abs_gx = 0.0;
        for (int i = 0; i < HS; i++) {
            r.y.push_back((float)x[i] * rf * (float)w[i]);
            const double g = (double)(float)dy[i] * (float)w[i], xhat = (float)x[i] * rb;
            sum_gx += g * xhat;
            abs_gx += fabs(g * xhat);
            dw[i] += (float)dy[i] * xhat;
            dw_scale[i] += fabs((float)dy[i] * xhat);
        }
        for (int i = 0; i < HS; i++) {
            const double g = (double)(float)dy[i] * (float)w[i], xhat = (float)x[i] * rb;
            r.dx.push_back(rb * (g - xhat * sum_gx / HS));
            r.dx_scale.push_back(rb * (fabs(g) + fabs(xhat) * abs_gx / HS));
        }
    }
    return r;
}

// r: a float sum of HS <= 128 positive squares, off by ~sqrt(HS) 2^-24 of itself (~7e-7 at 128),
// r by half that, plus the square root's and the division's roundings: rstd held to 2e-6
// relative (~32 ulps), y = x * r * w two more roundings of itself. dx and the scale gradients
// are float sums of products (HS of them, or N * NH): within ~1e-6 of the sum of their terms'
// magnitudes (about 16 ulps). Every floatX output is rounded once on top; raw and the v parts are
// copies, exact.
static const Tolerance TOL_RSTD = {0.0, 2e-6};
static const Tolerance TOL_Y = {0.0, 2e-6 + 2 * 0x1p-24 + FLOATX_ROUNDOFF};
static const Tolerance TOL_GRAD = {1e-6, FLOATX_ROUNDOFF};
static const Tolerance TOL_EXACT = {0.0, 0.0};

// Checks one variant on one shape for every block size it takes, forward then backward; returns
// the failure count.
static int check_shape(int variant, int N, int NH, int HS, float amplitude, uint64_t seed) {
    const int C = NH * HS;
    const size_t qkv_size = (size_t)N * 3 * C, vectors = (size_t)N * 2 * NH;
    Inputs in = make_inputs(N, NH, HS, amplitude, seed);
    Reference ref = reference(&in, N, NH, HS);
    // the v parts (columns 2C..3C) must come out as they went in
    const std::vector<double> qkv_v = columns(to_double(in.qkv), N, 3 * C, 2 * C, 3 * C);
    const std::vector<double> dqkv_v = columns(to_double(in.dqkv), N, 3 * C, 2 * C, 3 * C);
    Buffers d = {device_poisoned<floatX>(qkv_size),
                 device_poisoned<floatX>((size_t)N * 2 * C),
                 device_copy(in.q_w),
                 device_copy(in.k_w),
                 device_poisoned<floatX>(qkv_size),
                 device_poisoned<floatX>(HS),
                 device_poisoned<floatX>(HS),
                 device_poisoned<float>(vectors),
                 device_poisoned<float>(partials_floats(N, NH, HS))};
    const std::vector<int> block_sizes =
        variant == 1 ? std::vector<int>{32, 96, 1024} : std::vector<int>{0};
    int failures = 0;
    for (int block_size : block_sizes) {
        copy_to_device(d.qkv, in.qkv);
        CUDA_CHECK(cudaMemset(d.raw, 0xff, (size_t)N * 2 * C * sizeof(floatX)));
        CUDA_CHECK(cudaMemset(d.rstd, 0xff, vectors * sizeof(float)));
        launch(variant, block_size, false, &d, N, NH, HS);
        CUDA_CHECK(cudaDeviceSynchronize());
        printf("  variant %d N %d NH %d HS %d amplitude %g block %d\n", variant, N, NH, HS,
               amplitude, block_size);
        std::vector<float> qkv = host_floats(d.qkv, qkv_size);
        bool ok = check_close("y", columns(qkv, N, 3 * C, 0, 2 * C), ref.y, {}, TOL_Y);
        ok &= check_close("v", columns(qkv, N, 3 * C, 2 * C, 3 * C), qkv_v, {}, TOL_EXACT);
        ok &= check_close("raw", host_floats(d.raw, (size_t)N * 2 * C), to_double(in.raw), {},
                          TOL_EXACT);
        ok &= check_close("rstd", host_floats(d.rstd, vectors), ref.rstd, {}, TOL_RSTD);
        // the backward pass from make_inputs' raw and rstd (the forward pass's x, and its r
        // rounded from float64)
        copy_to_device(d.raw, in.raw);
        copy_to_device(d.rstd, in.rstd);
        copy_to_device(d.dqkv, in.dqkv);
        copy_to_device(d.dq_w, in.dq_w);
        copy_to_device(d.dk_w, in.dk_w);
        launch(variant, block_size, true, &d, N, NH, HS);
        CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<float> dqkv = host_floats(d.dqkv, qkv_size);
        ok &= check_close("dx", columns(dqkv, N, 3 * C, 0, 2 * C), ref.dx, ref.dx_scale, TOL_GRAD);
        ok &= check_close("dv", columns(dqkv, N, 3 * C, 2 * C, 3 * C), dqkv_v, {}, TOL_EXACT);
        ok &= check_close("dq_w", host_floats(d.dq_w, HS), ref.dq_w, ref.dw_scale_q, TOL_GRAD);
        ok &= check_close("dk_w", host_floats(d.dk_w, HS), ref.dk_w, ref.dw_scale_k, TOL_GRAD);
        failures += !ok;
    }
    free_buffers(&d);
    return failures;
}

static void bench(const Options* o) {
    const int N = o->small ? 64 : 8 * 1024, NH = 12, HS = 64;
    char shape[128];
    snprintf(shape, sizeof(shape), "N %d NH %d HS %d (GPT-2 124M, B*T = %d)", N, NH, HS, N);
    print_bench_intro(shape);
    Inputs in = make_inputs(N, NH, HS, 1.0f, 7);
    Buffers d = {device_copy(in.qkv),
                 device_copy(in.raw),
                 device_copy(in.q_w),
                 device_copy(in.k_w),
                 device_copy(in.dqkv),
                 device_copy(in.dq_w),
                 device_copy(in.dk_w),
                 device_copy(in.rstd),
                 device_poisoned<float>(partials_floats(N, NH, HS))};
    // forward: read q and k, write them and raw; backward: read dq, dk and raw twice (the scale
    // gradients, then dx), write dq and dk (the runs go on from the last run's values)
    const double qk_bytes = 2.0 * N * NH * HS * sizeof(floatX);
    for (bool backward : {false, true})
        bench_variants(o, backward ? "qk_norm backward" : "qk_norm forward", VARIANTS, NUM_VARIANTS,
                       (backward ? 5.0 : 3.0) * qk_bytes, 0.0,
                       [&](int v) { launch(v, 256, backward, &d, N, NH, HS); });
    free_buffers(&d);
}

int main(int argc, char** argv) {
    Options o = parse_options(argc, argv, NUM_VARIANTS, VARIANTS);
    print_header("qk_norm");
    struct Shape {
        int N, NH, HS;
        float amplitude;
    };
    // odd rows and heads, so the last block is partly empty; 350 (row, head) pairs are 11 chunks
    // of the scale gradients' partial sums
    std::vector<Shape> shapes = {{1, 1, 32, 1.0f},
                                 {7, 3, 64, 1.0f},
                                 {33, 5, 128, 1.0f},
                                 {70, 5, 32, 1.0f},
                                 {9, 2, 64, 1e-3f}};
    if (!o.small)
        shapes.insert(shapes.end(),
                      {{4096, 12, 64, 1.0f}, {1025, 25, 64, 1.0f}, {2047, 8, 128, 1.0f}});
    int failures = 0;
    for (int v = 1; v <= NUM_VARIANTS; v++) {
        if (!variant_selected(&o, v)) continue;
        for (size_t s = 0; s < shapes.size(); s++)
            failures += check_shape(v, shapes[s].N, shapes[s].NH, shapes[s].HS, shapes[s].amplitude,
                                    700 + s);
    }
    if (o.bench) bench(&o);
    return finish("qk_norm", failures);
}
