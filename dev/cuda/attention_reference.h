// dev/cuda/attention_reference.h: the float64 host reference of causal self-attention forward,
// shared by attention_forward.cu (which checks against it) and attention_backward.cu (which
// feeds its rounded output and log-sum-exp to the backward kernels, as the forward pass would).
//
// Layout as in train_gpt.cu: qkv (B,T,3C) with q, k, v of head h at columns h*HS, C + h*HS,
// 2C + h*HS (C = NH*HS); out (B,T,C); lse (B,NH,T). For query t and key s <= t:
//   score_ts = q_t . k_s / sqrt(HS),  p_ts = exp(score_ts - lse_t),  out_t = sum_s p_ts v_s.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

struct AttentionShape {
    int B, T, NH, HS;
};

// Causal forward FLOPs: two matmuls (q.k and p.v) of 2*HS flops per (query, visible key) pair.
// The backward pass is counted as 2.5 times this (five such matmuls), the usual accounting.
inline double attention_forward_flops(AttentionShape sh) {
    return 4.0 * sh.B * sh.NH * sh.HS * ((double)sh.T * (sh.T + 1) / 2);
}

// The benchmark shapes: those scripts/gpu_check.sh compares with PyTorch's
// scaled_dot_product_attention (causal; B x NH x T = 8 x 12 x 1024 and 4 x 16 x 2048, HS 64 and
// 128), or one small shape.
inline std::vector<AttentionShape> bench_shapes(const Options* o) {
    if (o->small) return {{1, 64, 2, 64}};
    return {{8, 1024, 12, 64}, {8, 1024, 12, 128}, {4, 2048, 16, 64}, {4, 2048, 16, 128}};
}

// The naive variant 1 is a correctness reference: at the full benchmark sizes it is only timed
// when asked for by number.
inline int bench_first_variant(const Options* o) { return o->small || o->variant == 1 ? 1 : 2; }

// "attention_forward B8 NH12 T1024 HS64": the harness name of a benchmark line, shape included.
inline std::string bench_label(const char* harness, AttentionShape sh) {
    char s[128];
    snprintf(s, sizeof s, "%s B%d NH%d T%d HS%d", harness, sh.B, sh.NH, sh.T, sh.HS);
    return s;
}

// Grouped-query attention (Llama's --kv-heads): KVH kv heads, query head h reading kv head
// h / (NH/KVH), in qkv rows (NH + 2 KVH) HS wide (train_gpt.cu's layout). The float64 reference
// of such an attention is the reference above on the "expanded" rows (B,T,3C) in which every
// query head's k and v are its kv head's; gqa_share_kv makes random rows so (each head's k and v
// copied from the first head of its group), gqa_compact turns them into the kernels' layout, and
// gqa_compact_grad the expanded gradient into the kernels' one (dk and dv of a kv head: the sum
// of its query heads').
inline void gqa_share_kv(std::vector<floatX>* qkv, AttentionShape sh, int KVH) {
    const int C = sh.NH * sh.HS, group = sh.NH / KVH;
    for (size_t row = 0; row < (size_t)sh.B * sh.T; row++)
        for (int part = 1; part <= 2; part++)
            for (int h = 0; h < sh.NH; h++)
                for (int d = 0; d < sh.HS; d++)
                    (*qkv)[row * 3 * C + part * C + h * sh.HS + d] =
                        (*qkv)[row * 3 * C + part * C + h / group * group * sh.HS + d];
}

template <class T>
std::vector<T> gqa_compact_rows(const std::vector<T>& expanded, AttentionShape sh, int KVH,
                                bool sum_group) {
    const int C = sh.NH * sh.HS, group = sh.NH / KVH, width = (sh.NH + 2 * KVH) * sh.HS;
    std::vector<T> out((size_t)sh.B * sh.T * width, T(0));
    for (size_t row = 0; row < (size_t)sh.B * sh.T; row++) {
        for (int c = 0; c < C; c++) out[row * width + c] = expanded[row * 3 * C + c];  // q
        for (int part = 1; part <= 2; part++)
            for (int h = 0; h < sh.NH; h++) {
                if (!sum_group && h % group != 0) continue;  // one copy of the shared k and v
                for (int d = 0; d < sh.HS; d++)
                    out[row * width + C + (part - 1) * KVH * sh.HS + h / group * sh.HS + d] +=
                        expanded[row * 3 * C + part * C + h * sh.HS + d];
            }
    }
    return out;
}

inline std::vector<floatX> gqa_compact(const std::vector<floatX>& qkv, AttentionShape sh, int KVH) {
    std::vector<float> f(qkv.begin(), qkv.end());
    std::vector<float> c = gqa_compact_rows(f, sh, KVH, false);
    return std::vector<floatX>(c.begin(), c.end());  // the same values, exactly
}

inline std::vector<double> gqa_compact_grad(const std::vector<double>& dqkv, AttentionShape sh,
                                            int KVH) {
    return gqa_compact_rows(dqkv, sh, KVH, true);
}

struct AttentionReference {
    std::vector<double> out, out_scale, lse, lse_scale;
};

// One score in double, and the sum of the absolute values of its terms (same scaling).
inline double attention_score(const floatX* q, const floatX* k, int HS, double* abs_out) {
    double dot = 0.0, dot_abs = 0.0;
    for (int d = 0; d < HS; d++) {
        double term = (double)(float)q[d] * (float)k[d];
        dot += term;
        dot_abs += fabs(term);
    }
    const double scale = 1.0 / sqrt((double)HS);
    *abs_out = dot_abs * scale;
    return dot * scale;
}

// Scales (what float errors grow with): for lse, 1 + the largest score magnitude of the row; for
// out, sum_s p_ts |v_s| (1 + that magnitude): a score off by e moves p by a factor exp(e).
inline AttentionReference attention_forward_reference(const std::vector<floatX>& qkv,
                                                      AttentionShape sh) {
    const int B = sh.B, T = sh.T, NH = sh.NH, HS = sh.HS, C = NH * HS;
    AttentionReference r;
    r.out.assign((size_t)B * T * C, 0.0);
    r.out_scale.assign((size_t)B * T * C, 0.0);
    r.lse.resize((size_t)B * NH * T);
    r.lse_scale.resize((size_t)B * NH * T);
    std::vector<double> score(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const floatX* q = &qkv[((size_t)b * T + t) * 3 * C + h * HS];
                double m = -INFINITY, max_abs = 0.0;
                for (int s = 0; s <= t; s++) {
                    double score_abs;
                    score[s] = attention_score(q, &qkv[((size_t)b * T + s) * 3 * C + C + h * HS],
                                               HS, &score_abs);
                    m = std::max(m, score[s]);
                    max_abs = std::max(max_abs, score_abs);
                }
                double l = 0.0;
                for (int s = 0; s <= t; s++) l += exp(score[s] - m);
                double* o = &r.out[((size_t)b * T + t) * C + h * HS];
                double* o_scale = &r.out_scale[((size_t)b * T + t) * C + h * HS];
                for (int s = 0; s <= t; s++) {
                    const floatX* v = &qkv[((size_t)b * T + s) * 3 * C + 2 * C + h * HS];
                    double p = exp(score[s] - m) / l;
                    for (int d = 0; d < HS; d++) {
                        o[d] += p * (float)v[d];
                        o_scale[d] += p * fabs((double)(float)v[d]) * (1.0 + max_abs);
                    }
                }
                r.lse[((size_t)b * NH + h) * T + t] = m + log(l);
                r.lse_scale[((size_t)b * NH + h) * T + t] = 1.0 + max_abs;
            }
    return r;
}
