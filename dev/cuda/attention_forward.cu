// dev/cuda/attention_forward.cu: causal self-attention forward, checked against a float64 host
// reference and timed. For each batch b, head h and query t (scale = 1/sqrt(HS)):
//   s_j = scale * q_t . k_j for keys j <= t;  p_j = softmax_j(s);  out_t = sum_j p_j v_j
//   lse_t = log(sum_j exp(s_j))   (kept for the backward pass)
// Layout: qkv (B,T,3C) with q, k, v of head h at columns h*HS, C + h*HS, 2C + h*HS (C = NH*HS);
// out (B,T,C), head h at columns h*HS; lse (B,NH,T) float.
// Variants:
//   1  one thread per (b, h, query): a max pass, then an exp-sum pass, all from global memory
//   2  train_gpt.cu attention_forward: flash style, HS/ATT_LANE_DIMS lanes per query (256 threads
//      per block), keys streamed through shared memory in tiles with an online softmax
// Usage: ./attention_forward [variant] [--bench] [--small]
// Built with -DATT_LANE_DIMS=16, the GPU's row split, also on the CPU runtime (whose trainer
// build splits rows in 32s; see ATT_LANE_DIMS in train_gpt.cu), so both splits are checked.
//! cucc: -lcublasLt -DATT_LANE_DIMS=16
//! run: ./prog --small => pass /all checks passed/
//! run: ./prog --small --bench => pass /bench attention_forward variant 2: [\s\S]*all checks passed/
#define TRAIN_GPT_NO_MAIN
#include "../../train_gpt.cu"
#include "common.h"
#include "attention_reference.h"

static const char* const VARIANTS[] = {
    "one thread per query, two passes over the keys",
    "train_gpt.cu attention_forward (flash style, shared-memory key tiles)"};
constexpr int NUM_VARIANTS = 2;
constexpr int MAX_HS = 128;

// Variant 1: thread i owns query t of head h of sequence b, i = (b*NH + h)*T + t.
__global__ void attention_forward_naive_kernel(floatX* out, float* lse, const floatX* qkv, int B,
                                               int T, int NH, int HS) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * NH * T) return;
    const int t = i % T, h = (i / T) % NH, b = i / (T * NH), C = NH * HS;
    const floatX* q = qkv + ((size_t)b * T + t) * 3 * C + h * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    float m = -INFINITY;
    for (int s = 0; s <= t; s++) {
        const floatX* k = qkv + ((size_t)b * T + s) * 3 * C + C + h * HS;
        float dot = 0.0f;
        for (int d = 0; d < HS; d++) dot += (float)q[d] * (float)k[d];
        m = fmaxf(m, dot * scale);
    }
    float o[MAX_HS] = {};
    float l = 0.0f;
    for (int s = 0; s <= t; s++) {
        const floatX* k = qkv + ((size_t)b * T + s) * 3 * C + C + h * HS;
        const floatX* v = k + C;
        float dot = 0.0f;
        for (int d = 0; d < HS; d++) dot += (float)q[d] * (float)k[d];
        float p = expf(dot * scale - m);
        l += p;
        for (int d = 0; d < HS; d++) o[d] += p * (float)v[d];
    }
    for (int d = 0; d < HS; d++) out[((size_t)b * T + t) * C + h * HS + d] = (floatX)(o[d] / l);
    lse[i] = m + logf(l);
}

static void launch(int variant, int block_size, floatX* out, float* lse, const floatX* qkv,
                   AttentionShape sh) {
    if (variant == 1) {
        attention_forward_naive_kernel<<<(int)ceil_div((size_t)sh.B * sh.NH * sh.T, block_size),
                                         block_size>>>(out, lse, qkv, sh.B, sh.T, sh.NH, sh.HS);
        CUDA_CHECK_LAUNCH();
    } else {
        attention_forward(out, lse, qkv, sh.B, sh.T, sh.NH, sh.HS, 0);
    }
}

// float arithmetic: within ~1e-6 of the scale (about 16 ulps); out is floatX, rounded once.
static const Tolerance TOL_OUT = {1e-6, FLOATX_ROUNDOFF};
static const Tolerance TOL_LSE = {1e-6, 0.0};

// Checks every selected variant on one shape; returns the failure count.
static int check_shape(const Options* o, AttentionShape sh, uint64_t seed) {
    uint64_t rng = seed;
    const size_t C = (size_t)sh.NH * sh.HS, n_out = (size_t)sh.B * sh.T * C,
                 n_lse = (size_t)sh.B * sh.NH * sh.T;
    std::vector<floatX> qkv = random_floatx(n_out * 3, &rng, -2.0f, 2.0f);
    AttentionReference ref = attention_forward_reference(qkv, sh);
    floatX* d_qkv = device_copy(qkv);
    floatX* d_out = device_poisoned<floatX>(n_out);
    float* d_lse = device_poisoned<float>(n_lse);
    int failures = 0;
    for (int v = 1; v <= NUM_VARIANTS; v++) {
        if (!variant_selected(o, v)) continue;
        const std::vector<int> block_sizes =
            v == 1 ? std::vector<int>{32, 128, 512} : std::vector<int>{0};
        for (int block_size : block_sizes) {
            CUDA_CHECK(cudaMemset(d_out, 0xff, n_out * sizeof(floatX)));
            CUDA_CHECK(cudaMemset(d_lse, 0xff, n_lse * sizeof(float)));
            launch(v, block_size, d_out, d_lse, d_qkv, sh);
            CUDA_CHECK(cudaDeviceSynchronize());
            printf("  variant %d B %d T %d NH %d HS %d block %d\n", v, sh.B, sh.T, sh.NH, sh.HS,
                   block_size);
            bool ok =
                check_close("out", host_floats(d_out, n_out), ref.out, ref.out_scale, TOL_OUT);
            ok &= check_close("lse", host_floats(d_lse, n_lse), ref.lse, ref.lse_scale, TOL_LSE);
            failures += !ok;
        }
    }
    device_free({d_qkv, d_out, d_lse});
    return failures;
}

static void bench(const Options* o) {
    const AttentionShape sh =
        o->small ? AttentionShape{1, 64, 2, 64} : AttentionShape{4, 1024, 12, 64};
    char shape[128];
    snprintf(shape, sizeof(shape), "B %d T %d NH %d HS %d (GPT-2 124M)", sh.B, sh.T, sh.NH, sh.HS);
    print_bench_intro(shape);
    uint64_t rng = 7;
    const size_t n_out = (size_t)sh.B * sh.T * sh.NH * sh.HS;
    floatX* d_qkv = device_copy(random_floatx(n_out * 3, &rng, -2.0f, 2.0f));
    floatX* d_out = device_poisoned<floatX>(n_out);
    float* d_lse = device_poisoned<float>((size_t)sh.B * sh.NH * sh.T);
    bench_variants(o, "attention_forward", VARIANTS, NUM_VARIANTS, 0.0, attention_forward_flops(sh),
                   [&](int v) { launch(v, 128, d_out, d_lse, d_qkv, sh); });
    device_free({d_qkv, d_out, d_lse});
}

int main(int argc, char** argv) {
    Options o = parse_options(argc, argv, NUM_VARIANTS, VARIANTS);
    print_header("attention_forward");
    std::vector<AttentionShape> shapes = {
        {1, 1, 1, 32}, {2, 37, 2, 32}, {1, 70, 2, 64}, {2, 65, 1, 128}, {1, 100, 3, 64}};
    if (!o.small)
        shapes.insert(shapes.end(), {{2, 512, 12, 64}, {1, 777, 4, 128}, {2, 1024, 4, 32}});
    int failures = 0;
    for (size_t s = 0; s < shapes.size(); s++) failures += check_shape(&o, shapes[s], 300 + s);
    if (o.bench) bench(&o);
    return finish("attention_forward", failures);
}
