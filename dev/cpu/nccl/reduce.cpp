// reduce.cpp: the element types of nccl.h and the arithmetic of NCCL's reductions on them.
//
// What a GPU's NCCL computes, per element, for ranks reduced one after the other (a ring):
//   sum, prod, max, min  acc = round(acc op x): 16- and 8-bit floats are widened to float, combined
//                        and rounded back at every step (float holds the exact sum or product
//                        of two such values, so this is the correctly rounded result, as the
//                        GPU's half/bf16 instructions give). fp8 rounds with saturation to the
//                        largest finite value, as CUDA's __nv_fp8 conversions do.
//   avg, floating types  NCCL's PreMulSum: every contribution is first multiplied by the scalar
//                        T(1/n) (for fp8 a half scalar) and rounded, then summed.
//   avg, integer types   NCCL's SumPostDiv: wrapping sum, then a division truncated toward zero.
//   PreMulSum            (ncclRedOpCreatePreMulSum) each contribution multiplied by its poster's
//                        scalar and rounded, then summed, as avg; integers wrap.
//   integer sum, prod    wrap around (computed in the unsigned type).
//   max, min on floats   fmax/fmin: a NaN loses against a number.
// The order is fixed (rank 0, 1, ..., n-1) so that every rank gets the same bits.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "nccl_internal.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace cucc_nccl {

namespace {

// fp8 elements, one byte each, told apart by their interpretation.
template <__nv_fp8_interpretation_t I>
struct Fp8 {
    __nv_fp8_storage_t bits;
};

// How an element type is computed with: C is the computation type, load widens, store rounds,
// avg_scale is NCCL's PreMulSum scalar for n ranks (as a C).
template <class T>
struct Num {
    using C = T;
    static C load(T x) { return x; }
    static T store(C c) { return c; }
    static C avg_scale(int n) { return C(1.0 / n); }
};
template <>
struct Num<__half> {
    using C = float;
    static C load(__half x) { return __half2float(x); }
    static __half store(C c) { return __float2half_rn(c); }
    static C avg_scale(int n) { return load(store(float(1.0 / n))); }
};
template <>
struct Num<__nv_bfloat16> {
    using C = float;
    static C load(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __nv_bfloat16 store(C c) { return __float2bfloat16_rn(c); }
    static C avg_scale(int n) { return load(store(float(1.0 / n))); }
};
template <__nv_fp8_interpretation_t I>
struct Num<Fp8<I>> {
    using C = float;
    static C load(Fp8<I> x) { return __half2float(__half(__nv_cvt_fp8_to_halfraw(x.bits, I))); }
    static Fp8<I> store(C c) { return {__nv_cvt_float_to_fp8(c, __NV_SATFINITE, I)}; }
    static C avg_scale(int n) { return __half2float(__float2half_rn(float(1.0 / n))); }
};

// acc[i] = f(acc[i], x[i]), or acc = x for the first contribution.
template <class T, class F>
void fold(T* acc, const T* x, size_t count, bool first, F f) {
    if (first) {
        std::memmove(acc, x, count * sizeof(T));
        return;
    }
    for (size_t i = 0; i < count; i++) acc[i] = f(acc[i], x[i]);
}

template <class T>
void integer_step(T* acc, const T* x, size_t count, int op, int rank, int nranks,
                  const void* scalar) {
    using U = std::make_unsigned_t<T>;
    bool first = rank == 0;
    switch (op) {
        case kPreMulSum: {
            U s = U(*static_cast<const T*>(scalar));
            for (size_t i = 0; i < count; i++) {
                U scaled = U(U(x[i]) * s);
                acc[i] = first ? T(scaled) : T(U(U(acc[i]) + scaled));
            }
            break;
        }
        case ncclSum:
        case ncclAvg:
            fold(acc, x, count, first, [](T a, T b) { return T(U(a) + U(b)); });
            break;
        case ncclProd:
            fold(acc, x, count, first, [](T a, T b) { return T(U(a) * U(b)); });
            break;
        case ncclMax:
            fold(acc, x, count, first, [](T a, T b) { return a > b ? a : b; });
            break;
        case ncclMin:
            fold(acc, x, count, first, [](T a, T b) { return a < b ? a : b; });
            break;
        default:
            break;
    }
    if (op == ncclAvg && rank == nranks - 1) {
        for (size_t i = 0; i < count; i++) acc[i] = T(acc[i] / T(nranks));
    }
}

template <class T>
void float_step(T* acc, const T* x, size_t count, int op, int rank, int nranks,
                const void* scalar) {
    using N = Num<T>;
    using C = typename N::C;
    bool first = rank == 0;
    // Each contribution times a scalar, rounded, then summed (avg and PreMulSum).
    auto premul_sum = [&](C scale) {
        for (size_t i = 0; i < count; i++) {
            C scaled = N::load(N::store(N::load(x[i]) * scale));
            acc[i] = first ? N::store(scaled) : N::store(N::load(acc[i]) + scaled);
        }
    };
    switch (op) {
        case ncclSum:
            fold(acc, x, count, first, [](T a, T b) { return N::store(N::load(a) + N::load(b)); });
            break;
        case ncclProd:
            fold(acc, x, count, first, [](T a, T b) { return N::store(N::load(a) * N::load(b)); });
            break;
        case ncclMax:
            fold(acc, x, count, first,
                 [](T a, T b) { return N::store(std::fmax(N::load(a), N::load(b))); });
            break;
        case ncclMin:
            fold(acc, x, count, first,
                 [](T a, T b) { return N::store(std::fmin(N::load(a), N::load(b))); });
            break;
        case ncclAvg:
            premul_sum(N::avg_scale(nranks));
            break;
        case kPreMulSum:
            premul_sum(N::load(*static_cast<const T*>(scalar)));
            break;
        default:
            break;
    }
}

}  // namespace

size_t type_size(ncclDataType_t type) {
    switch (type) {
        case ncclInt8:
        case ncclUint8:
        case ncclFloat8e4m3:
        case ncclFloat8e5m2:
            return 1;
        case ncclFloat16:
        case ncclBfloat16:
            return 2;
        case ncclInt32:
        case ncclUint32:
        case ncclFloat32:
            return 4;
        case ncclInt64:
        case ncclUint64:
        case ncclFloat64:
            return 8;
        default:
            return 0;
    }
}

const char* type_name(ncclDataType_t type) {
    switch (type) {
        case ncclInt8:
            return "ncclInt8";
        case ncclUint8:
            return "ncclUint8";
        case ncclInt32:
            return "ncclInt32";
        case ncclUint32:
            return "ncclUint32";
        case ncclInt64:
            return "ncclInt64";
        case ncclUint64:
            return "ncclUint64";
        case ncclFloat16:
            return "ncclFloat16";
        case ncclFloat32:
            return "ncclFloat32";
        case ncclFloat64:
            return "ncclFloat64";
        case ncclBfloat16:
            return "ncclBfloat16";
        case ncclFloat8e4m3:
            return "ncclFloat8e4m3";
        case ncclFloat8e5m2:
            return "ncclFloat8e5m2";
        default:
            return "an invalid type";
    }
}

const char* op_name(int op) {
    switch (op) {
        case ncclSum:
            return "ncclSum";
        case ncclProd:
            return "ncclProd";
        case ncclMax:
            return "ncclMax";
        case ncclMin:
            return "ncclMin";
        case ncclAvg:
            return "ncclAvg";
        case kPreMulSum:
            return "a PreMulSum op";
        default:
            return "an invalid op";
    }
}

void reduce_step(void* acc, const void* x, size_t count, ncclDataType_t type, int op, int rank,
                 int nranks, const void* scalar) {
    switch (type) {
        case ncclInt8:
            integer_step((int8_t*)acc, (const int8_t*)x, count, op, rank, nranks, scalar);
            break;
        case ncclUint8:
            integer_step((uint8_t*)acc, (const uint8_t*)x, count, op, rank, nranks, scalar);
            break;
        case ncclInt32:
            integer_step((int32_t*)acc, (const int32_t*)x, count, op, rank, nranks, scalar);
            break;
        case ncclUint32:
            integer_step((uint32_t*)acc, (const uint32_t*)x, count, op, rank, nranks, scalar);
            break;
        case ncclInt64:
            integer_step((int64_t*)acc, (const int64_t*)x, count, op, rank, nranks, scalar);
            break;
        case ncclUint64:
            integer_step((uint64_t*)acc, (const uint64_t*)x, count, op, rank, nranks, scalar);
            break;
        case ncclFloat16:
            float_step((__half*)acc, (const __half*)x, count, op, rank, nranks, scalar);
            break;
        case ncclFloat32:
            float_step((float*)acc, (const float*)x, count, op, rank, nranks, scalar);
            break;
        case ncclFloat64:
            float_step((double*)acc, (const double*)x, count, op, rank, nranks, scalar);
            break;
        case ncclBfloat16:
            float_step((__nv_bfloat16*)acc, (const __nv_bfloat16*)x, count, op, rank, nranks,
                       scalar);
            break;
        case ncclFloat8e4m3:
            float_step((Fp8<__NV_E4M3>*)acc, (const Fp8<__NV_E4M3>*)x, count, op, rank, nranks,
                       scalar);
            break;
        case ncclFloat8e5m2:
            float_step((Fp8<__NV_E5M2>*)acc, (const Fp8<__NV_E5M2>*)x, count, op, rank, nranks,
                       scalar);
            break;
        default:
            break;
    }
}

}  // namespace cucc_nccl
