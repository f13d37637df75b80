// cucc/runtime_cxx.h: the C++ overloads of the runtime API that the toolkit's cuda_runtime.h
// defines only under nvcc (__CUDACC__): functions taking a kernel or a __device__ variable
// directly instead of a `const void*`. Each forwards to the C function of the runtime API, as
// the toolkit's versions do.
#pragma once

#include <cuda_runtime_api.h>

#include <cucc/runtime.h>  // cucc::register_symbol

template <class T>
cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value) {
    return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(entry), attr, value);
}
template <class T>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, T* entry) {
    return ::cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(entry));
}
template <class T>
cudaError_t cudaFuncSetCacheConfig(T* entry, cudaFuncCache config) {
    return ::cudaFuncSetCacheConfig(reinterpret_cast<const void*>(entry), config);
}
template <class T>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* num_blocks, T* entry, int block_size,
                                                          size_t dynamic_smem) {
    return ::cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        num_blocks, reinterpret_cast<const void*>(entry), block_size, dynamic_smem);
}

// __device__ and __constant__ variables are host globals here; the runtime copies to and from
// their addresses. Each overload registers the variable with its size, so that a copy past its
// end fails with cudaErrorInvalidValue and its address works as device memory afterwards.
template <class T>
cudaError_t cudaMemcpyToSymbol(const T& symbol, const void* src, size_t count = sizeof(T),
                               size_t offset = 0, cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
    cucc::register_symbol(&symbol, sizeof(T));
    return ::cudaMemcpyToSymbol(static_cast<const void*>(&symbol), src, count, offset, kind);
}
template <class T>
cudaError_t cudaMemcpyToSymbolAsync(const T& symbol, const void* src, size_t count = sizeof(T),
                                    size_t offset = 0, cudaMemcpyKind kind = cudaMemcpyHostToDevice,
                                    cudaStream_t stream = 0) {
    cucc::register_symbol(&symbol, sizeof(T));
    return ::cudaMemcpyToSymbolAsync(static_cast<const void*>(&symbol), src, count, offset, kind,
                                     stream);
}
template <class T>
cudaError_t cudaMemcpyFromSymbol(void* dst, const T& symbol, size_t count = sizeof(T),
                                 size_t offset = 0, cudaMemcpyKind kind = cudaMemcpyDeviceToHost) {
    cucc::register_symbol(&symbol, sizeof(T));
    return ::cudaMemcpyFromSymbol(dst, static_cast<const void*>(&symbol), count, offset, kind);
}
template <class T>
cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const T& symbol, size_t count = sizeof(T),
                                      size_t offset = 0,
                                      cudaMemcpyKind kind = cudaMemcpyDeviceToHost,
                                      cudaStream_t stream = 0) {
    cucc::register_symbol(&symbol, sizeof(T));
    return ::cudaMemcpyFromSymbolAsync(dst, static_cast<const void*>(&symbol), count, offset, kind,
                                       stream);
}
// Knows the variable's size, so the runtime can accept the address as device memory.
template <class T>
cudaError_t cudaGetSymbolAddress(void** dev_ptr, const T& symbol) {
    cucc::register_symbol(&symbol, sizeof(T));
    return ::cudaGetSymbolAddress(dev_ptr, static_cast<const void*>(&symbol));
}
template <class T>
cudaError_t cudaGetSymbolSize(size_t* size, const T&) {
    *size = sizeof(T);
    return cudaSuccess;
}
