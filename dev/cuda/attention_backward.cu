// dev/cuda/attention_backward.cu: causal self-attention backward, checked against a float64 host
// reference and timed. With p_ts = exp(score_ts - lse_t) (s <= t), dP_ts = dout_t . v_s,
// D_t = dout_t . out_t and dS_ts = p_ts (dP_ts - D_t):
//   dq_t = scale * sum_s dS_ts k_s,  dk_s = scale * sum_t dS_ts q_t,  dv_s = sum_t p_ts dout_t
// Grouped-query attention (KVH kv heads, train_gpt.cu's (NH + 2 KVH) HS rows) is checked for
// variants 2 and 3 against the reference of rows whose query heads share their group's k and v,
// dk and dv summed over the group (attention_reference.h's gqa_* helpers).
// Layout: qkv and dqkv (B,T,3C) with q, k, v of head h at columns h*HS, C + h*HS, 2C + h*HS;
// out, dout (B,T,C); lse (B,NH,T) float. out and lse come from the float64 forward reference,
// rounded as the forward pass stores them, so this check does not depend on a forward kernel.
// Variants:
//   1  one thread per query for dq, then one thread per key for dk and dv, all from global memory
//   2  train_gpt.cu attention_backward on CUDA cores: a dq pass over key tiles and a dk/dv pass
//      over query tiles, tiles in shared memory (the fp32 build's path)
//   3  train_gpt.cu attention_backward on tensor cores (bf16 build only, the bf16 build's path):
//      the same two passes as FlashAttention-2 style mma.sync products; checked against the
//      float64 reference and against variant 2
// Usage: ./attention_backward [variant] [--bench] [--small]
// --bench times every variant on the shapes scripts/gpu_check.sh compares with PyTorch (see
// bench_shapes in attention_reference.h).
// Built with -DATT_LANE_DIMS=16, the GPU's row split, also on the CPU runtime (whose trainer
// build splits rows in 32s; see ATT_LANE_DIMS in train_gpt.cu), so both splits are checked.
//! cucc: -lcublasLt -DATT_LANE_DIMS=16
//! run: ./prog --small => pass /all checks passed/
//! run: ./prog --small --bench => pass /bench attention_backward B1 NH2 T64 HS64 variant 2: [\s\S]*variant 3: [\s\S]*all checks passed/
#define TRAIN_GPT_MODEL_ONLY
#include "../../train_gpt.cu"
#include "common.h"
#include "attention_reference.h"

static const char* const VARIANTS[] = {
    "thread per query (dq), then thread per key (dk, dv)",
    "train_gpt.cu attention_backward, CUDA cores (flash style, two passes)",
    "train_gpt.cu attention_backward, tensor cores (FlashAttention-2 style, mma.sync)"};
constexpr int NUM_VARIANTS = FLOATX_IS_FP32 ? 2 : 3;
constexpr int MAX_HS = 128;

// Variant 1, dq: thread i owns query t of head h of sequence b, i = (b*NH + h)*T + t.
__global__ void attention_backward_dq_naive_kernel(floatX* dqkv, const floatX* dout,
                                                   const floatX* out, const floatX* qkv,
                                                   const float* lse, int B, int T, int NH, int HS) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * NH * T) return;
    const int t = i % T, h = (i / T) % NH, b = i / (T * NH), C = NH * HS;
    const size_t row = (size_t)b * T + t;
    const floatX* q = qkv + row * 3 * C + h * HS;
    const floatX* dO = dout + row * C + h * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    float D = 0.0f;
    for (int d = 0; d < HS; d++) D += (float)dO[d] * (float)out[row * C + h * HS + d];
    float dq[MAX_HS] = {};
    for (int s = 0; s <= t; s++) {
        const floatX* k = qkv + ((size_t)b * T + s) * 3 * C + C + h * HS;
        const floatX* v = k + C;
        float score = 0.0f, dp = 0.0f;
        for (int d = 0; d < HS; d++) {
            score += (float)q[d] * (float)k[d];
            dp += (float)dO[d] * (float)v[d];
        }
        float ds = expf(score * scale - lse[i]) * (dp - D);
        for (int d = 0; d < HS; d++) dq[d] += ds * (float)k[d];
    }
    for (int d = 0; d < HS; d++) dqkv[row * 3 * C + h * HS + d] = (floatX)(dq[d] * scale);
}

// Variant 1, dk and dv: thread i owns key s of head h of sequence b, i = (b*NH + h)*T + s, and
// walks the queries t >= s, recomputing each query's D.
__global__ void attention_backward_dkv_naive_kernel(floatX* dqkv, const floatX* dout,
                                                    const floatX* out, const floatX* qkv,
                                                    const float* lse, int B, int T, int NH,
                                                    int HS) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * NH * T) return;
    const int s = i % T, h = (i / T) % NH, b = i / (T * NH), C = NH * HS;
    const floatX* k = qkv + ((size_t)b * T + s) * 3 * C + C + h * HS;
    const floatX* v = k + C;
    const float scale = 1.0f / sqrtf((float)HS);
    float dk[MAX_HS] = {}, dv[MAX_HS] = {};
    for (int t = s; t < T; t++) {
        const size_t row = (size_t)b * T + t;
        const floatX* q = qkv + row * 3 * C + h * HS;
        const floatX* dO = dout + row * C + h * HS;
        float score = 0.0f, dp = 0.0f, D = 0.0f;
        for (int d = 0; d < HS; d++) {
            score += (float)q[d] * (float)k[d];
            dp += (float)dO[d] * (float)v[d];
            D += (float)dO[d] * (float)out[row * C + h * HS + d];
        }
        float p = expf(score * scale - lse[((size_t)b * NH + h) * T + t]);
        float ds = p * (dp - D);
        for (int d = 0; d < HS; d++) {
            dv[d] += p * (float)dO[d];
            dk[d] += ds * (float)q[d];
        }
    }
    const size_t row = (size_t)b * T + s;
    for (int d = 0; d < HS; d++) {
        dqkv[row * 3 * C + C + h * HS + d] = (floatX)(dk[d] * scale);
        dqkv[row * 3 * C + 2 * C + h * HS + d] = (floatX)dv[d];
    }
}

struct Buffers {  // device
    floatX *qkv, *out, *dout, *dqkv;
    float *lse, *delta;
};

static void launch(int variant, int block_size, const Buffers* d, AttentionShape sh) {
    if (variant == 1) {
        const int grid = (int)ceil_div((size_t)sh.B * sh.NH * sh.T, block_size);
        attention_backward_dq_naive_kernel<<<grid, block_size>>>(d->dqkv, d->dout, d->out, d->qkv,
                                                                 d->lse, sh.B, sh.T, sh.NH, sh.HS);
        CUDA_CHECK_LAUNCH();
        attention_backward_dkv_naive_kernel<<<grid, block_size>>>(d->dqkv, d->dout, d->out, d->qkv,
                                                                  d->lse, sh.B, sh.T, sh.NH, sh.HS);
        CUDA_CHECK_LAUNCH();
    } else {
        attention_backward(d->dqkv, d->delta, d->dout, d->out, d->qkv, d->lse, sh.B, sh.T, sh.NH,
                           sh.NH, sh.HS, 0,
                           variant == 2 ? AttentionPath::cuda_cores : AttentionPath::tensor_cores);
    }
}

struct Inputs {  // host
    std::vector<floatX> qkv, out, dout;
    std::vector<float> lse;
};

// Random inputs; kv_heads > 0: the query heads of a group share their k and v (gqa_share_kv).
static Inputs make_inputs(AttentionShape sh, uint64_t seed, int kv_heads = 0) {
    uint64_t rng = seed;
    const size_t n_out = (size_t)sh.B * sh.T * sh.NH * sh.HS;
    Inputs in;
    in.qkv = random_floatx(3 * n_out, &rng, -2.0f, 2.0f);
    if (kv_heads > 0) gqa_share_kv(&in.qkv, sh, kv_heads);
    in.dout = random_floatx(n_out, &rng, -1.0f, 1.0f);
    AttentionReference fwd = attention_forward_reference(in.qkv, sh);
    for (double o : fwd.out) in.out.push_back((floatX)(float)o);
    for (double l : fwd.lse) in.lse.push_back((float)l);
    return in;
}

// Float64 reference of dqkv from the same (rounded) inputs, with the specified D = dout . out of
// the stored out. scale[i] of each gradient element: the sum over its terms of
// |p| (|dout|.|v| + |dout|.|out|) |k or q| (dq, dk) or |p| |dout| (dv), times (1 + the largest
// score magnitude of the head), for the float error of the recomputed probabilities.
static void reference(const Inputs* in, AttentionShape sh, std::vector<double>* dqkv,
                      std::vector<double>* scale) {
    const int B = sh.B, T = sh.T, NH = sh.NH, HS = sh.HS, C = NH * HS;
    const double sc = 1.0 / sqrt((double)HS);
    dqkv->assign((size_t)B * T * 3 * C, 0.0);
    scale->assign((size_t)B * T * 3 * C, 0.0);
    auto at = [&](const std::vector<floatX>& v, size_t i) { return (double)(float)v[i]; };
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            double max_abs = 0.0;
            for (int t = 0; t < T; t++)
                for (int s = 0; s <= t; s++) {
                    double a;
                    attention_score(&in->qkv[((size_t)b * T + t) * 3 * C + h * HS],
                                    &in->qkv[((size_t)b * T + s) * 3 * C + C + h * HS], HS, &a);
                    max_abs = std::max(max_abs, a);
                }
            for (int t = 0; t < T; t++) {
                const size_t qrow = ((size_t)b * T + t) * 3 * C,
                             orow = ((size_t)b * T + t) * C + h * HS;
                double D = 0.0, D_abs = 0.0;
                for (int d = 0; d < HS; d++) {
                    D += at(in->dout, orow + d) * at(in->out, orow + d);
                    D_abs += fabs(at(in->dout, orow + d) * at(in->out, orow + d));
                }
                const double lse = in->lse[((size_t)b * NH + h) * T + t];
                for (int s = 0; s <= t; s++) {
                    const size_t krow = ((size_t)b * T + s) * 3 * C;
                    double score_abs;
                    double p = exp(attention_score(&in->qkv[qrow + h * HS],
                                                   &in->qkv[krow + C + h * HS], HS, &score_abs) -
                                   lse);
                    double dp = 0.0, dp_abs = 0.0;
                    for (int d = 0; d < HS; d++) {
                        dp += at(in->dout, orow + d) * at(in->qkv, krow + 2 * C + h * HS + d);
                        dp_abs +=
                            fabs(at(in->dout, orow + d) * at(in->qkv, krow + 2 * C + h * HS + d));
                    }
                    const double ds = p * (dp - D), ds_abs = p * (dp_abs + D_abs) * (1.0 + max_abs);
                    for (int d = 0; d < HS; d++) {
                        const size_t iq = qrow + h * HS + d, ik = krow + C + h * HS + d,
                                     iv = krow + 2 * C + h * HS + d;
                        (*dqkv)[iq] += sc * ds * at(in->qkv, ik);
                        (*scale)[iq] += sc * ds_abs * fabs(at(in->qkv, ik));
                        (*dqkv)[ik] += sc * ds * at(in->qkv, iq);
                        (*scale)[ik] += sc * ds_abs * fabs(at(in->qkv, iq));
                        (*dqkv)[iv] += p * at(in->dout, orow + d);
                        (*scale)[iv] += p * fabs(at(in->dout, orow + d)) * (1.0 + max_abs);
                    }
                }
            }
        }
}

// float arithmetic: within ~1e-6 of the scale (about 16 ulps); dqkv is floatX, rounded once.
static const Tolerance TOL = {1e-6, FLOATX_ROUNDOFF};
// Tensor cores multiply P and dS rounded to bf16 (each off by at most 2^-9 of itself; dS is
// formed from the unrounded P and dP), which moves each term of the scale by at most 2^-9 of it.
static const Tolerance TOL_MMA = {1e-6 + 0x1p-9, FLOATX_ROUNDOFF};
// Variant 3 against variant 2: each is within its bound of the exact value.
static const Tolerance TOL_VS_2 = {TOL.atol + TOL_MMA.atol, 2 * FLOATX_ROUNDOFF};

static Buffers upload(const Inputs* in) {
    return {device_copy(in->qkv),  device_copy(in->out),
            device_copy(in->dout), device_poisoned<floatX>(in->qkv.size()),
            device_copy(in->lse),  device_poisoned<float>(in->lse.size())};
}

static void free_buffers(Buffers* d) {
    device_free({d->qkv, d->out, d->dout, d->dqkv, d->lse, d->delta});
}

// Checks every selected variant on one shape; returns the failure count.
static int check_shape(const Options* o, AttentionShape sh, uint64_t seed) {
    Inputs in = make_inputs(sh, seed);
    std::vector<double> ref, scale;
    reference(&in, sh, &ref, &scale);
    Buffers d = upload(&in);
    int failures = 0;
    std::vector<double> dqkv2;  // variant 2's result, compared with variant 3's
    for (int v = 1; v <= NUM_VARIANTS; v++) {
        if (!variant_selected(o, v) && !(v == 2 && variant_selected(o, 3))) continue;
        const std::vector<int> block_sizes =
            v == 1 ? std::vector<int>{32, 128, 512} : std::vector<int>{0};
        for (int block_size : block_sizes) {
            CUDA_CHECK(cudaMemset(d.dqkv, 0xff, in.qkv.size() * sizeof(floatX)));
            launch(v, block_size, &d, sh);
            CUDA_CHECK(cudaDeviceSynchronize());
            const std::vector<float> dqkv = host_floats(d.dqkv, in.qkv.size());
            if (v == 2) {
                dqkv2.assign(dqkv.begin(), dqkv.end());
                if (!variant_selected(o, 2)) continue;
            }
            printf("  variant %d B %d T %d NH %d HS %d block %d\n", v, sh.B, sh.T, sh.NH, sh.HS,
                   block_size);
            bool ok = check_close("dqkv", dqkv, ref, scale, v == 3 ? TOL_MMA : TOL);
            if (v == 3) ok &= check_close("dqkv vs 2", dqkv, dqkv2, scale, TOL_VS_2);
            failures += !ok;
        }
    }
    free_buffers(&d);
    return failures;
}

// Grouped-query attention (KVH kv heads) on one shape, variants 2 and 3 (the naive variant has
// no kv heads): dq against the reference of the expanded rows, dk and dv against the sums of
// their query heads' (gqa_compact_grad), scales summed likewise; returns the failure count.
static int check_gqa_shape(const Options* o, AttentionShape sh, int KVH, uint64_t seed) {
    Inputs in = make_inputs(sh, seed, KVH);
    std::vector<double> expanded, expanded_scale;
    reference(&in, sh, &expanded, &expanded_scale);
    const std::vector<double> ref = gqa_compact_grad(expanded, sh, KVH);
    const std::vector<double> scale = gqa_compact_grad(expanded_scale, sh, KVH);
    const std::vector<floatX> qkv = gqa_compact(in.qkv, sh, KVH);
    Buffers d = {device_copy(qkv),     device_copy(in.out),
                 device_copy(in.dout), device_poisoned<floatX>(qkv.size()),
                 device_copy(in.lse),  device_poisoned<float>(in.lse.size())};
    int failures = 0;
    for (int v = 2; v <= NUM_VARIANTS; v++) {
        if (!variant_selected(o, v)) continue;
        CUDA_CHECK(cudaMemset(d.dqkv, 0xff, qkv.size() * sizeof(floatX)));
        attention_backward(d.dqkv, d.delta, d.dout, d.out, d.qkv, d.lse, sh.B, sh.T, sh.NH, KVH,
                           sh.HS, 0,
                           v == 2 ? AttentionPath::cuda_cores : AttentionPath::tensor_cores);
        CUDA_CHECK(cudaDeviceSynchronize());
        printf("  variant %d B %d T %d NH %d KVH %d HS %d (grouped-query)\n", v, sh.B, sh.T, sh.NH,
               KVH, sh.HS);
        failures += !check_close("dqkv", host_floats(d.dqkv, qkv.size()), ref, scale,
                                 v == 3 ? TOL_MMA : TOL);
    }
    free_buffers(&d);
    return failures;
}

static void bench(const Options* o) {
    for (AttentionShape sh : bench_shapes(o)) {
        const std::string label = bench_label("attention_backward", sh);
        print_bench_intro((label + "; FLOPs counted as 2.5x forward").c_str());
        Inputs in = make_inputs(sh, 7);
        Buffers d = upload(&in);
        bench_variants(
            o, label.c_str(), VARIANTS, NUM_VARIANTS, 0.0, 2.5 * attention_forward_flops(sh),
            [&](int v) { launch(v, 128, &d, sh); }, bench_first_variant(o));
        free_buffers(&d);
    }
}

int main(int argc, char** argv) {
    Options o = parse_options(argc, argv, NUM_VARIANTS, VARIANTS);
    print_header("attention_backward");
    std::vector<AttentionShape> shapes = {{1, 1, 1, 32},   {2, 37, 2, 32},  {1, 70, 2, 64},
                                          {2, 65, 1, 128}, {1, 100, 3, 64}, {1, 150, 1, 128},
                                          {1, 200, 1, 32}};
    if (!o.small)
        shapes.insert(shapes.end(), {{2, 256, 12, 64}, {1, 333, 4, 128}, {2, 512, 4, 32}});
    int failures = 0;
    for (size_t s = 0; s < shapes.size(); s++) failures += check_shape(&o, shapes[s], 400 + s);
    // grouped-query attention: 2 kv heads of 4, multi-query (1 of 3, 1 of 2), 2 of 8; every head
    // size, partial tiles
    const struct {
        AttentionShape sh;
        int KVH;
    } gqa[] = {{{2, 37, 4, 32}, 2}, {{1, 70, 3, 64}, 1}, {{1, 65, 2, 128}, 1}, {{1, 40, 8, 64}, 2}};
    for (size_t s = 0; s < sizeof(gqa) / sizeof(gqa[0]); s++)
        failures += check_gqa_shape(&o, gqa[s].sh, gqa[s].KVH, 450 + s);
    if (o.bench) bench(&o);
    return finish("attention_backward", failures);
}
