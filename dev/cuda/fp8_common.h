// dev/cuda/fp8_common.h: what the FP8 harnesses share on the host: decoding FP8 bytes, and the
// operands of a layer's products (llmc/fp8_linear.cuh) brought back from the device with their
// scales, so a harness can read each element's byte, its group's scale and its dequantized
// value whatever the recipe's scale layout.
#pragma once

#include <cuda_fp8.h>

#include <cstring>
#include <vector>

// format: 0 E4M3, 1 E5M2 (the harnesses' numbering).
inline bool fp8_is_nan(uint8_t b, int format) {
    return format == 0 ? (b & 0x7F) == 0x7F : (b & 0x7F) > 0x7C;
}
inline double fp8_decode(uint8_t b, int format) {
    if (format == 0) {
        __nv_fp8_e4m3 v;
        v.__x = b;
        return (float)v;
    }
    __nv_fp8_e5m2 v;
    v.__x = b;
    return (float)v;
}

// One operand as a product reads it: `rows` rows of k bytes (row-major), its format and its raw
// scale array (fp32 dequantization scales, or MXFP8's E8M0 bytes).
struct HostFp8Operand {
    int recipe;
    std::vector<uint8_t> q;
    std::vector<uint8_t> scales;
    int rows, k;
    bool is_weight;
    int format;  // 0 E4M3, 1 E5M2
};

inline HostFp8Operand host_fp8_operand(const Fp8State* f, const uint8_t* q, const void* scale,
                                       const Fp8TensorScale* tensor, int rows, int k,
                                       bool is_weight, __nv_fp8_interpretation_t format) {
    const int recipe = f->config.recipe;
    HostFp8Operand o = {recipe,
                        std::vector<uint8_t>((size_t)rows * k),
                        {},
                        rows,
                        k,
                        is_weight,
                        format == __NV_E4M3 ? 0 : 1};
    CUDA_CHECK(cudaMemcpy(o.q.data(), q, o.q.size(), cudaMemcpyDeviceToHost));
    const bool per_tensor = fp8_per_tensor(recipe);
    const size_t bytes = per_tensor ? sizeof(float) : fp8_scale_bytes(recipe, is_weight, rows, k);
    o.scales.resize(bytes);
    CUDA_CHECK(cudaMemcpy(o.scales.data(), per_tensor ? (const void*)&tensor->scale_inv : scale,
                          bytes, cudaMemcpyDeviceToHost));
    return o;
}

// The dequantization scale of element (r, kk), bit for bit (an fp32's bits, or the E8M0 byte).
inline uint32_t host_fp8_scale_bits(const HostFp8Operand* o, int r, int kk) {
    size_t at;  // in fp32 values
    switch (o->recipe) {
        case FP8_ROWWISE:
            at = r;
            break;
        case FP8_BLOCK:
            at = o->is_weight ? (r / 128) * fp8_block_scale_stride(o->k) + kk / 128
                              : (size_t)(kk / 128) * o->rows + r;
            break;
        case FP8_MX:
            return o->scales[mx_scale_index(r, kk / 32, o->k)];
        default:
            at = 0;
    }
    uint32_t bits;
    memcpy(&bits, o->scales.data() + at * sizeof(float), sizeof(bits));
    return bits;
}

// Element (r, kk) as the product multiplies it: the decoded byte times its scale.
inline double host_fp8_value(const HostFp8Operand* o, int r, int kk) {
    const uint32_t bits = host_fp8_scale_bits(o, r, kk);
    double scale;
    if (o->recipe == FP8_MX) {
        scale = bits == 0xFF ? NAN : ldexp(1.0, (int)bits - 127);
    } else {
        float s;
        memcpy(&s, &bits, sizeof(s));
        scale = s;
    }
    return fp8_decode(o->q[(size_t)r * o->k + kk], o->format) * scale;
}

// The operand's rows as the product multiplies them (host_fp8_value of each element), each
// decoded once, when first asked for: a check that reads a row many times decodes it once.
struct HostFp8Rows {
    const HostFp8Operand* o;
    std::vector<std::vector<double>> rows;
    explicit HostFp8Rows(const HostFp8Operand* operand) : o(operand), rows(operand->rows) {}
    const double* row(int r) {
        std::vector<double>& v = rows[r];
        if (v.empty()) {
            v.resize(o->k);
            for (int kk = 0; kk < o->k; kk++) v[kk] = host_fp8_value(o, r, kk);
        }
        return v.data();
    }
};
