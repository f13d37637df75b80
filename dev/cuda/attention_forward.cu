// dev/cuda/attention_forward.cu: causal self-attention forward, checked against a float64 host
// reference and timed. For each batch b, head h and query t (scale = 1/sqrt(HS)):
//   s_j = scale * q_t . k_j for keys j <= t;  p_j = softmax_j(s);  out_t = sum_j p_j v_j
//   lse_t = log(sum_j exp(s_j))   (kept for the backward pass)
// Layout: qkv (B,T,3C) with q, k, v of head h at columns h*HS, C + h*HS, 2C + h*HS (C = NH*HS);
// out (B,T,C), head h at columns h*HS; lse (B,NH,T) float.
// Grouped-query attention (KVH kv heads, train_gpt.cu's (NH + 2 KVH) HS rows) is checked for
// variants 2 and 3 against the reference of rows whose query heads share their group's k and v.
// Variants:
//   1  one thread per (b, h, query): a max pass, then an exp-sum pass, all from global memory
//   2  train_gpt.cu attention_forward on CUDA cores: flash style, HS/ATT_LANE_DIMS lanes per
//      query (256 threads per block, fewer for short sequences), keys streamed through shared
//      memory in tiles of which a lane takes four rows at a time (tile_dots), with an online
//      softmax (the fp32 build's path)
//   3  train_gpt.cu attention_forward on tensor cores (bf16 build only, the bf16 build's path):
//      FlashAttention-2 style, mma.sync m16n8k16, cp.async double buffering; checked against the
//      float64 reference and against variant 2
// Usage: ./attention_forward [variant] [--bench] [--small]
// --bench times every variant on the shapes scripts/gpu_check.sh compares with PyTorch (causal,
// B x NH x T = 8 x 12 x 1024 and 4 x 16 x 2048, HS 64 and 128; --small: one small shape).
// Built with -DATT_LANE_DIMS=16, the GPU's row split, also on the CPU runtime (whose trainer
// build splits rows in 32s; see ATT_LANE_DIMS in train_gpt.cu), so both splits are checked.
//! cucc: -lcublasLt -DATT_LANE_DIMS=16
//! run: ./prog --small => pass /all checks passed/
//! run: ./prog --small --bench => pass /bench attention_forward B1 NH2 T64 HS64 variant 2: [\s\S]*variant 3: [\s\S]*all checks passed/
#define TRAIN_GPT_MODEL_ONLY
#include "../../train_gpt.cu"
#include "common.h"
#include "attention_reference.h"

static const char* const VARIANTS[] = {
    "one thread per query, two passes over the keys",
    "train_gpt.cu attention_forward, CUDA cores (flash style, shared-memory key tiles)",
    "train_gpt.cu attention_forward, tensor cores (FlashAttention-2 style, mma.sync)"};
constexpr int NUM_VARIANTS = FLOATX_IS_FP32 ? 2 : 3;
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

static void launch(int v, int block_size, floatX* out, float* lse, const floatX* qkv,
                   AttentionShape sh) {
    if (v == 1) {
        attention_forward_naive_kernel<<<(int)ceil_div((size_t)sh.B * sh.NH * sh.T, block_size),
                                         block_size>>>(out, lse, qkv, sh.B, sh.T, sh.NH, sh.HS);
        CUDA_CHECK_LAUNCH();
    } else {
        attention_forward(out, lse, qkv, sh.B, sh.T, sh.NH, sh.NH, sh.HS, 0,
                          v == 2 ? AttentionPath::cuda_cores : AttentionPath::tensor_cores);
    }
}

// float arithmetic: within ~1e-6 of the scale (about 16 ulps); out is floatX, rounded once.
static const Tolerance TOL_OUT = {1e-6, FLOATX_ROUNDOFF};
static const Tolerance TOL_LSE = {1e-6, 0.0};
// Tensor cores multiply P, rounded to bf16 (each p off by at most 2^-9 of itself), with V and
// divide by the sum of the unrounded p: out moves by at most 2^-9 sum_s p_s |v_s| <= 2^-9 scale
// more. lse is summed in float as in variant 2.
static const Tolerance TOL_OUT_MMA = {1e-6 + 0x1p-9, FLOATX_ROUNDOFF};
// Variant 3 against variant 2: each is within its bound of the exact value.
static const Tolerance TOL_OUT_VS_2 = {TOL_OUT.atol + TOL_OUT_MMA.atol, 2 * FLOATX_ROUNDOFF};
static const Tolerance TOL_LSE_VS_2 = {2 * TOL_LSE.atol, 0.0};

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
    std::vector<double> out2, lse2;  // variant 2's results, compared with variant 3's
    for (int v = 1; v <= NUM_VARIANTS; v++) {
        if (!variant_selected(o, v) && !(v == 2 && variant_selected(o, 3))) continue;
        const std::vector<int> block_sizes =
            v == 1 ? std::vector<int>{32, 128, 512} : std::vector<int>{0};
        for (int block_size : block_sizes) {
            CUDA_CHECK(cudaMemset(d_out, 0xff, n_out * sizeof(floatX)));
            CUDA_CHECK(cudaMemset(d_lse, 0xff, n_lse * sizeof(float)));
            launch(v, block_size, d_out, d_lse, d_qkv, sh);
            CUDA_CHECK(cudaDeviceSynchronize());
            const std::vector<float> out = host_floats(d_out, n_out),
                                     lse = host_floats(d_lse, n_lse);
            if (v == 2) {
                out2.assign(out.begin(), out.end());
                lse2.assign(lse.begin(), lse.end());
                if (!variant_selected(o, 2)) continue;
            }
            printf("  variant %d B %d T %d NH %d HS %d block %d\n", v, sh.B, sh.T, sh.NH, sh.HS,
                   block_size);
            const Tolerance tol_out = v == 3 ? TOL_OUT_MMA : TOL_OUT;
            bool ok = check_close("out", out, ref.out, ref.out_scale, tol_out);
            ok &= check_close("lse", lse, ref.lse, ref.lse_scale, TOL_LSE);
            if (v == 3) {
                ok &= check_close("out vs 2", out, out2, ref.out_scale, TOL_OUT_VS_2);
                ok &= check_close("lse vs 2", lse, lse2, ref.lse_scale, TOL_LSE_VS_2);
            }
            failures += !ok;
        }
    }
    device_free({d_qkv, d_out, d_lse});
    return failures;
}

// Grouped-query attention (KVH kv heads) on one shape, variants 2 and 3 (the naive variant has
// no kv heads): against the reference of rows whose query heads share their group's k and v
// (attention_reference.h's gqa_* helpers); returns the failure count.
static int check_gqa_shape(const Options* o, AttentionShape sh, int KVH, uint64_t seed) {
    uint64_t rng = seed;
    const size_t n_out = (size_t)sh.B * sh.T * sh.NH * sh.HS, n_lse = (size_t)sh.B * sh.NH * sh.T;
    std::vector<floatX> expanded = random_floatx(n_out * 3, &rng, -2.0f, 2.0f);
    gqa_share_kv(&expanded, sh, KVH);
    AttentionReference ref = attention_forward_reference(expanded, sh);
    floatX* d_qkv = device_copy(gqa_compact(expanded, sh, KVH));
    floatX* d_out = device_poisoned<floatX>(n_out);
    float* d_lse = device_poisoned<float>(n_lse);
    int failures = 0;
    for (int v = 2; v <= NUM_VARIANTS; v++) {
        if (!variant_selected(o, v)) continue;
        CUDA_CHECK(cudaMemset(d_out, 0xff, n_out * sizeof(floatX)));
        CUDA_CHECK(cudaMemset(d_lse, 0xff, n_lse * sizeof(float)));
        attention_forward(d_out, d_lse, d_qkv, sh.B, sh.T, sh.NH, KVH, sh.HS, 0,
                          v == 2 ? AttentionPath::cuda_cores : AttentionPath::tensor_cores);
        CUDA_CHECK(cudaDeviceSynchronize());
        printf("  variant %d B %d T %d NH %d KVH %d HS %d (grouped-query)\n", v, sh.B, sh.T, sh.NH,
               KVH, sh.HS);
        bool ok = check_close("out", host_floats(d_out, n_out), ref.out, ref.out_scale,
                              v == 3 ? TOL_OUT_MMA : TOL_OUT);
        ok &= check_close("lse", host_floats(d_lse, n_lse), ref.lse, ref.lse_scale, TOL_LSE);
        failures += !ok;
    }
    device_free({d_qkv, d_out, d_lse});
    return failures;
}

static void bench(const Options* o) {
    for (AttentionShape sh : bench_shapes(o)) {
        const std::string label = bench_label("attention_forward", sh);
        print_bench_intro(label.c_str());
        uint64_t rng = 7;
        const size_t n_out = (size_t)sh.B * sh.T * sh.NH * sh.HS;
        floatX* d_qkv = device_copy(random_floatx(n_out * 3, &rng, -2.0f, 2.0f));
        floatX* d_out = device_poisoned<floatX>(n_out);
        float* d_lse = device_poisoned<float>((size_t)sh.B * sh.NH * sh.T);
        bench_variants(
            o, label.c_str(), VARIANTS, NUM_VARIANTS, 0.0, attention_forward_flops(sh),
            [&](int v) { launch(v, 128, d_out, d_lse, d_qkv, sh); }, bench_first_variant(o));
        device_free({d_qkv, d_out, d_lse});
    }
}

int main(int argc, char** argv) {
    Options o = parse_options(argc, argv, NUM_VARIANTS, VARIANTS);
    print_header("attention_forward");
    std::vector<AttentionShape> shapes = {{1, 1, 1, 32},   {2, 37, 2, 32},  {1, 70, 2, 64},
                                          {2, 65, 1, 128}, {1, 100, 3, 64}, {1, 150, 1, 128},
                                          {1, 200, 1, 32}};
    if (!o.small)
        shapes.insert(shapes.end(), {{2, 512, 12, 64}, {1, 777, 4, 128}, {2, 1024, 4, 32}});
    int failures = 0;
    for (size_t s = 0; s < shapes.size(); s++) failures += check_shape(&o, shapes[s], 300 + s);
    // grouped-query attention: 2 kv heads of 4, multi-query (1 of 3, 1 of 2), 2 of 8
    const struct {
        AttentionShape sh;
        int KVH;
    } gqa[] = {{{2, 37, 4, 32}, 2}, {{1, 70, 3, 64}, 1}, {{1, 65, 2, 128}, 1}, {{1, 40, 8, 64}, 2}};
    for (size_t s = 0; s < sizeof(gqa) / sizeof(gqa[0]); s++)
        failures += check_gqa_shape(&o, gqa[s].sh, gqa[s].KVH, 350 + s);
    if (o.bench) bench(&o);
    return finish("attention_forward", failures);
}
