// cuda_fp16.h (CPU runtime shadow): the toolkit's half types and host functions, plus the
// device functions it defines only for nvcc's device pass (hexp, __hfma, atomicAdd ...; see
// cucc/low_precision.h). Shuffles and __ldg on half use the generic ones of cucc/device.h.
#pragma once

#include_next <cuda_fp16.h>

#ifdef __CUCC__
#include <cucc/low_precision.h>

namespace cucc {
template <>
struct shuffleable<__half2> : std::true_type {};

template <>
struct half_traits<__half> {
    static float to_float(__half x) { return __half2float(x); }
    static __half from_float(float x) { return __float2half_rn(x); }
    static __half2 make(__half x, __half y) { return __halves2half2(x, y); }
};
}  // namespace cucc

CUCC_HALF_DEVICE_FUNCTIONS(__half, __half2)

inline int __half2int_rn(__half x) { return __float2int_rn(__half2float(x)); }
inline int __half2int_rd(__half x) { return __float2int_rd(__half2float(x)); }
inline int __half2int_ru(__half x) { return __float2int_ru(__half2float(x)); }
inline unsigned __half2uint_rn(__half x) { return __float2uint_rn(__half2float(x)); }
#endif
