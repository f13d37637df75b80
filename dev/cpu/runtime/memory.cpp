// memory.cpp: device and pinned host memory, copies and memsets.
//
// Device memory is ordinary host memory recorded in a table of live allocations, so the runtime
// can tell device pointers from host pointers, check that a copy stays inside its allocation,
// and enforce a per-device limit (CUCC_MEM_LIMIT, default 80 GiB) past which cudaMalloc fails
// with cudaErrorMemoryAllocation; the limit counts sizes rounded up to 256 bytes.
// Allocations come from mmap(MAP_NORESERVE): page-aligned, and pages cost memory only once
// touched, so a program may allocate what cudaMemGetInfo reports free even when that is more
// than the machine's RAM. Under AddressSanitizer (the program was linked with --asan, seen at
// run time through ASan's __asan_init) they come from posix_memalign instead, with exactly the
// requested bytes, because ASan only watches the ends of malloc'ed blocks: an access one past
// the end of a cudaMalloc'ed buffer is then reported.
//
// __device__ and __constant__ variables are host globals. The C++ cudaGetSymbolAddress (see
// cucc/runtime_cxx.h) registers the variable's address range here, so that the pointer it
// returns works with cudaMemcpy and cudaMemset like any device pointer, as in CUDA. Symbols
// never count against the limit and cannot be cudaFree'd.
//
// Copies and memsets are stream work. The synchronous calls queue on the legacy default
// stream and wait for it. The asynchronous ones follow CUDA's documented host behaviour for
// pageable (not cudaMallocHost'ed) host memory: a copy from pageable memory to the device takes
// a snapshot of the source before returning, and a copy from the device to pageable memory
// returns only once it is done. cudaFree and cudaFreeHost first finish all queued work, since
// it may still use the memory (CUDA's cudaFree synchronizes too).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "internal.h"

// Defined by the AddressSanitizer runtime when the program was linked with -fsanitize=address.
extern "C" void __asan_init() __attribute__((weak));

namespace cucc {
namespace {

struct MemoryState {
    std::map<uintptr_t, Allocation> allocations;  // by start address
    std::map<uintptr_t, Allocation> symbols;      // registered __device__ variables, by start
    std::vector<size_t> used;                     // device bytes allocated, per device
};

MemoryState& memory() {
    static auto* m = new MemoryState{{}, {}, std::vector<size_t>(config().devices, 0)};
    return *m;
}

bool under_asan() { return &__asan_init != nullptr; }

size_t mapped_bytes(size_t size) {
    static const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (size + page - 1) / page * page;
}

void* map_memory(size_t size) {
    if (under_asan()) {
        void* p;
        return posix_memalign(&p, 256, size) == 0 ? p : nullptr;
    }
    if (mapped_bytes(size) < size) return nullptr;
    void* p = mmap(nullptr, mapped_bytes(size), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
}

void unmap_memory(const Allocation& a) {
    if (under_asan()) free((void*)a.begin);
    else if (munmap((void*)a.begin, mapped_bytes(a.size)) != 0)
        fatal("munmap of a %zu-byte allocation failed", a.size);
}

// The entry of `table` containing [p, p+bytes) (a zero-size entry contains its start), or null.
const Allocation* lookup(const std::map<uintptr_t, Allocation>& table, uintptr_t p, size_t bytes) {
    auto it = table.upper_bound(p);
    if (it == table.begin()) return nullptr;
    const Allocation& a = std::prev(it)->second;
    if (p - a.begin >= std::max<size_t>(a.size, 1) || bytes > a.size - (p - a.begin))
        return nullptr;
    return &a;
}

cudaError_t allocate(void** ptr, size_t size, int device) {
    if (!ptr) return cudaErrorInvalidValue;
    ApiLock lock;
    *ptr = nullptr;
    if (size == 0) return cudaSuccess;
    MemoryState& m = memory();
    size_t rounded = (size + 255) / 256 * 256;
    if (rounded < size) return cudaErrorMemoryAllocation;
    if (device >= 0 && rounded > config().mem_limit - m.used[device])
        return cudaErrorMemoryAllocation;
    void* p = map_memory(size);
    if (!p) return cudaErrorMemoryAllocation;
    m.allocations[(uintptr_t)p] = Allocation{(uintptr_t)p, size, device};
    if (device >= 0) m.used[device] += rounded;
    *ptr = p;
    return cudaSuccess;
}

bool is_allocation_start(void* ptr, bool device_memory) {
    ApiLock lock;
    auto& allocs = memory().allocations;
    auto it = allocs.find((uintptr_t)ptr);
    return it != allocs.end() && (it->second.device >= 0) == device_memory;
}

cudaError_t release(void* ptr, bool device_memory) {
    if (!ptr) return cudaSuccess;
    if (!is_allocation_start(ptr, device_memory)) return cudaErrorInvalidValue;
    synchronize_all();
    ApiLock lock;
    MemoryState& m = memory();
    auto it = m.allocations.find((uintptr_t)ptr);
    if (it == m.allocations.end()) return cudaErrorInvalidValue;  // freed by another thread
    if (device_memory) m.used[it->second.device] -= (it->second.size + 255) / 256 * 256;
    unmap_memory(it->second);
    m.allocations.erase(it);
    return cudaSuccess;
}

bool is_device(const void* p, size_t bytes) {
    Allocation a;
    return find_allocation(p, bytes, &a) && a.device >= 0;
}

bool is_pinned(const void* p, size_t bytes) {
    Allocation a;
    return find_allocation(p, bytes, &a) && a.device < 0;
}

// Checks a copy's pointers against its kind: the device side must lie inside one device
// allocation. cudaMemcpyDefault infers the kind from the pointers.
cudaError_t check_copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
    if (count > 0 && (!dst || !src)) return cudaErrorInvalidValue;
    switch (kind) {
        case cudaMemcpyHostToHost:
            return cudaSuccess;
        case cudaMemcpyHostToDevice:
            return is_device(dst, count) ? cudaSuccess : cudaErrorInvalidValue;
        case cudaMemcpyDeviceToHost:
            return is_device(src, count) ? cudaSuccess : cudaErrorInvalidValue;
        case cudaMemcpyDeviceToDevice:
            return is_device(dst, count) && is_device(src, count) ? cudaSuccess
                                                                  : cudaErrorInvalidValue;
        case cudaMemcpyDefault:  // a pointer into device memory must keep the copy inside it
            return (!is_device(dst, 0) || is_device(dst, count)) &&
                           (!is_device(src, 0) || is_device(src, count))
                       ? cudaSuccess
                       : cudaErrorInvalidValue;
        default:
            return cudaErrorInvalidMemcpyDirection;
    }
}

cudaError_t copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream,
                 bool synchronous) {
    cudaError_t err = check_copy(dst, src, count, kind);
    if (err != cudaSuccess) return err;
    cudaStream_t s;
    if (!resolve_stream(stream, &s)) return cudaErrorInvalidResourceHandle;
    if (count == 0) return cudaSuccess;
    bool src_pageable = !is_device(src, count) && !is_pinned(src, count);
    bool dst_pageable = !is_device(dst, count) && !is_pinned(dst, count);
    if (synchronous || dst_pageable) {
        StreamOp op{"cudaMemcpy", nullptr, [=] { memmove(dst, src, count); }};
        return enqueue_and_wait(s, std::move(op));
    }
    if (src_pageable) {
        auto snapshot = std::make_shared<std::vector<unsigned char>>(
            (const unsigned char*)src, (const unsigned char*)src + count);
        return stream_enqueue(
            s, StreamOp{"cudaMemcpyAsync", nullptr, [=] { memcpy(dst, snapshot->data(), count); }});
    }
    return stream_enqueue(s,
                          StreamOp{"cudaMemcpyAsync", nullptr, [=] { memmove(dst, src, count); }});
}

cudaError_t set(void* dst, int value, size_t count, cudaStream_t stream, bool synchronous) {
    if (count == 0) return cudaSuccess;
    Allocation a;
    if (!dst || !find_allocation(dst, count, &a)) return cudaErrorInvalidValue;
    cudaStream_t s;
    if (!resolve_stream(stream, &s)) return cudaErrorInvalidResourceHandle;
    StreamOp op{synchronous ? "cudaMemset" : "cudaMemsetAsync", nullptr,
                [=] { memset(dst, value, count); }};
    if (synchronous) return enqueue_and_wait(s, std::move(op));
    return stream_enqueue(s, std::move(op));
}

}  // namespace

bool find_allocation(const void* ptr, size_t bytes, Allocation* out) {
    ApiLock lock;
    MemoryState& m = memory();
    if (const Allocation* a = lookup(m.allocations, (uintptr_t)ptr, bytes)) {
        *out = *a;
        return true;
    }
    if (const Allocation* a = lookup(m.symbols, (uintptr_t)ptr, bytes)) {
        *out = *a;
        out->device = current_device();  // every device has the variable
        return true;
    }
    return false;
}

void register_symbol(const void* symbol, size_t bytes) {
    ApiLock lock;
    Allocation& a = memory().symbols[(uintptr_t)symbol];
    a = Allocation{(uintptr_t)symbol, std::max(a.size, bytes), 0};
}

bool is_device_pointer(const void* ptr) { return is_device(ptr, 0); }

void free_all_device_memory(int device) {
    ApiLock lock;
    MemoryState& m = memory();
    for (auto it = m.allocations.begin(); it != m.allocations.end();) {
        if (it->second.device == device) {
            unmap_memory(it->second);
            it = m.allocations.erase(it);
        } else {
            ++it;
        }
    }
    m.used[device] = 0;
}

}  // namespace cucc

using namespace cucc;

extern "C" {

cudaError_t cudaMalloc(void** dev_ptr, size_t size) {
    return api_return(allocate(dev_ptr, size, current_device()));
}

cudaError_t cudaFree(void* dev_ptr) { return api_return(release(dev_ptr, true)); }

cudaError_t cudaMallocHost(void** ptr, size_t size) { return api_return(allocate(ptr, size, -1)); }

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
    if (flags &
        ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined))
        return api_return(cudaErrorInvalidValue);
    return api_return(allocate(ptr, size, -1));
}

cudaError_t cudaFreeHost(void* ptr) { return api_return(release(ptr, false)); }

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    if (!free_bytes || !total_bytes) return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    *total_bytes = config().mem_limit;
    *free_bytes = config().mem_limit - memory().used[current_device()];
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
    return api_return(copy(dst, src, count, kind, cudaStreamLegacy, true));
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
    return api_return(copy(dst, src, count, kind, stream, false));
}

cudaError_t cudaMemcpyPeer(void* dst, int dst_device, const void* src, int src_device,
                           size_t count) {
    if (dst_device < 0 || dst_device >= config().devices || src_device < 0 ||
        src_device >= config().devices)
        return api_return(cudaErrorInvalidDevice);
    return api_return(copy(dst, src, count, cudaMemcpyDeviceToDevice, cudaStreamLegacy, true));
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                size_t count, cudaStream_t stream) {
    if (dst_device < 0 || dst_device >= config().devices || src_device < 0 ||
        src_device >= config().devices)
        return api_return(cudaErrorInvalidDevice);
    return api_return(copy(dst, src, count, cudaMemcpyDeviceToDevice, stream, false));
}

cudaError_t cudaMemset(void* dst, int value, size_t count) {
    return api_return(set(dst, value, count, cudaStreamLegacy, true));
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t count, cudaStream_t stream) {
    return api_return(set(dst, value, count, stream, false));
}

// __device__ and __constant__ variables are host globals under cucc, so a symbol's address is
// the variable's own address and a symbol copy is an ordinary stream-ordered copy. The symbol
// may not be registered (only cudaGetSymbolAddress registers it), so after the direction is
// checked the copy runs as cudaMemcpyDefault, which accepts any host address.
cudaError_t cudaGetSymbolAddress(void** dev_ptr, const void* symbol) {
    if (!dev_ptr || !symbol) return api_return(cudaErrorInvalidSymbol);
    *dev_ptr = (void*)symbol;
    return cudaSuccess;
}

static cudaError_t symbol_copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                               cudaMemcpyKind symbol_side_kind, cudaStream_t stream,
                               bool synchronous) {
    if (!dst || !src) return cudaErrorInvalidSymbol;
    if (kind != symbol_side_kind && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
        return cudaErrorInvalidMemcpyDirection;
    return copy(dst, src, count, cudaMemcpyDefault, stream, synchronous);
}

cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                               cudaMemcpyKind kind) {
    return api_return(symbol_copy((char*)symbol + offset, src, count, kind, cudaMemcpyHostToDevice,
                                  cudaStreamLegacy, true));
}

cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t count,
                                    size_t offset, cudaMemcpyKind kind, cudaStream_t stream) {
    return api_return(symbol_copy((char*)symbol + offset, src, count, kind, cudaMemcpyHostToDevice,
                                  stream, false));
}

cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                                 cudaMemcpyKind kind) {
    return api_return(symbol_copy(dst, (const char*)symbol + offset, count, kind,
                                  cudaMemcpyDeviceToHost, cudaStreamLegacy, true));
}

cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t count, size_t offset,
                                      cudaMemcpyKind kind, cudaStream_t stream) {
    return api_return(symbol_copy(dst, (const char*)symbol + offset, count, kind,
                                  cudaMemcpyDeviceToHost, stream, false));
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
    if (!attributes) return api_return(cudaErrorInvalidValue);
    Allocation a;
    *attributes = cudaPointerAttributes{};
    if (!find_allocation(ptr, 0, &a)) {
        attributes->type = cudaMemoryTypeUnregistered;
        return cudaSuccess;
    }
    attributes->type = a.device >= 0 ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
    attributes->device = a.device >= 0 ? a.device : current_device();
    attributes->devicePointer = (void*)ptr;
    attributes->hostPointer = a.device >= 0 ? nullptr : (void*)ptr;
    return cudaSuccess;
}

}  // extern "C"
