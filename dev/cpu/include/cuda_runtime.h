// cuda_runtime.h (CPU runtime shadow): what nvcc makes implicitly available to a .cu file.
//
// dev/cpu/include comes before the CUDA toolkit's include dir, and cucc includes this header
// first in every .cu file, as nvcc does. It brings in the toolkit's own cuda_runtime.h (the
// runtime API declarations, vector types, dim3), then the CPU runtime contract, the C++
// overloads nvcc would add (cudaFuncSetAttribute(kernel, ...), cudaMemcpyToSymbol(var, ...))
// and the device-side functions (__syncthreads, shuffles, atomics, device math ...). __CUDACC__ and __CUDA_ARCH__ stay
// undefined so the toolkit headers take their host paths; __CUCC__ tells code it runs here.
#pragma once

#include <cucc/keywords.h>
#include_next <cuda_runtime.h>
#include <cucc/keywords.h>

#ifdef __CUCC__
#include <cucc/runtime.h>
#include <cucc/runtime_cxx.h>
#include <cucc/device.h>
#include <cucc/ptx.h>
#endif
