// cublaslt_test_util.h: test_util.h plus the check for cuBLASLt calls used by the cublaslt_*.cu
// tests: CUBLAS_CHECK(call) stops the program (exit 1) with file:line, the call and the status
// name; expect_status counts a check that a call returned a given status; and the host side of
// the element types the tests use (fp32, bf16, fp16, FP8 E4M3/E5M2 through cuda_fp8.h): their
// sizes, names, rounding, get/put of one element of a byte buffer, and a splitmix64 uniform.
// Valid CUDA: a native build links the real cuBLASLt (-lcublasLt).
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "test_util.h"

#define CUBLAS_CHECK(call) check_cublas((call), #call, __FILE__, __LINE__)

static void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
    check_call(status == CUBLAS_STATUS_SUCCESS, cublasLtGetStatusName(status), call, file, line);
}

// One check: `got` must be `want`; prints the status returned (and the one wanted, on a failure).
static void expect_status(cublasStatus_t got, cublasStatus_t want, const char* what) {
    std::string detail = cublasLtGetStatusName(got);
    if (got != want) detail += std::string(" (want ") + cublasLtGetStatusName(want) + ")";
    expect(got == want, what, detail);
}

// ---------------------------------------------------------------------------------------------
// Host-side values of the element types.
static const double kU32 = 1.0 / (1 << 24);

static inline bool is_fp8(cudaDataType t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }
static inline size_t type_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : is_fp8(t) ? 1 : 2; }
static const char* type_name(cudaDataType t) {
    switch (t) {
        case CUDA_R_32F:
            return "f32";
        case CUDA_R_16BF:
            return "bf16";
        case CUDA_R_16F:
            return "f16";
        case CUDA_R_8F_E4M3:
            return "e4m3";
        default:
            return "e5m2";
    }
}
static inline double unit_roundoff(cudaDataType t) {
    switch (t) {
        case CUDA_R_32F:
            return kU32;
        case CUDA_R_16BF:
            return 1.0 / 256;
        case CUDA_R_16F:
            return 1.0 / 2048;
        case CUDA_R_8F_E4M3:
            return 1.0 / 16;
        default:
            return 1.0 / 8;
    }
}
static inline double fp8_max(cudaDataType t) { return t == CUDA_R_8F_E4M3 ? 448.0 : 57344.0; }
// Half the smallest subnormal: 2^-10 (E4M3), 2^-17 (E5M2).
static inline double fp8_tiny(cudaDataType t) { return t == CUDA_R_8F_E4M3 ? 0x1p-10 : 0x1p-17; }

static inline double decode_fp8(cudaDataType t, uint8_t bits) {
    if (t == CUDA_R_8F_E4M3) {
        __nv_fp8_e4m3 x;
        x.__x = bits;
        return static_cast<float>(x);
    }
    __nv_fp8_e5m2 x;
    x.__x = bits;
    return static_cast<float>(x);
}
static inline uint8_t encode_fp8(cudaDataType t, float v) {
    return t == CUDA_R_8F_E4M3 ? __nv_fp8_e4m3(v).__x : __nv_fp8_e5m2(v).__x;
}

static inline double get(cudaDataType t, const std::vector<unsigned char>& mem, int64_t i) {
    const unsigned char* p = mem.data() + i * type_size(t);
    if (is_fp8(t)) return decode_fp8(t, *p);
    if (t == CUDA_R_32F) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    if (t == CUDA_R_16BF) {
        __nv_bfloat16 h;
        memcpy(&h, p, 2);
        return __bfloat162float(h);
    }
    __half h;
    memcpy(&h, p, 2);
    return __half2float(h);
}
static inline void put(cudaDataType t, std::vector<unsigned char>& mem, int64_t i, float v) {
    unsigned char* p = mem.data() + i * type_size(t);
    if (is_fp8(t)) {
        *p = encode_fp8(t, v);
    } else if (t == CUDA_R_32F) {
        memcpy(p, &v, 4);
    } else if (t == CUDA_R_16BF) {
        __nv_bfloat16 h = __float2bfloat16_rn(v);
        memcpy(p, &h, 2);
    } else {
        __half h = __float2half_rn(v);
        memcpy(p, &h, 2);
    }
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static inline float uniform(float lo, float hi) {  // splitmix64
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return lo + (hi - lo) * static_cast<float>((z >> 40) * (1.0 / (1ull << 24)));
}
