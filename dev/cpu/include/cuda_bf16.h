// cuda_bf16.h (CPU runtime shadow): the toolkit's bf16 types and host functions, plus the
// device functions it defines only for nvcc's device pass (hexp, __hfma, atomicAdd ...; see
// cucc/low_precision.h). Shuffles and __ldg on bf16 use the generic ones of cucc/device.h.
#pragma once

#include_next <cuda_bf16.h>

#ifdef __CUCC__
#include <cucc/low_precision.h>

namespace cucc {
template <>
struct shuffleable<__nv_bfloat162> : std::true_type {};

template <>
struct half_traits<__nv_bfloat16> {
    static float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
    static __nv_bfloat162 make(__nv_bfloat16 x, __nv_bfloat16 y) { return __halves2bfloat162(x, y); }
};
}  // namespace cucc

CUCC_HALF_DEVICE_FUNCTIONS(__nv_bfloat16, __nv_bfloat162)

inline int __bfloat162int_rn(__nv_bfloat16 x) { return __float2int_rn(__bfloat162float(x)); }
inline int __bfloat162int_rd(__nv_bfloat16 x) { return __float2int_rd(__bfloat162float(x)); }
inline int __bfloat162int_ru(__nv_bfloat16 x) { return __float2int_ru(__bfloat162float(x)); }
inline unsigned __bfloat162uint_rn(__nv_bfloat16 x) { return __float2uint_rn(__bfloat162float(x)); }
#endif
