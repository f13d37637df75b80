// pools.cpp: stream-ordered allocation: cudaMallocAsync, cudaMallocFromPoolAsync, cudaFreeAsync
// and the memory pools they draw from.
//
// An allocation is made when the call is made (CUDA makes it usable in stream order; here it is
// usable at once, which every correct program accepts) and counts against the device's memory
// like cudaMalloc's; cudaFreeAsync frees it when its stream reaches the free. Each device has a
// default pool, which is its current pool until cudaDeviceSetMemPool; pools made with
// cudaMemPoolCreate belong to the device of their location. A pool keeps the attributes set on
// it and counts what is allocated from it (UsedMemCurrent, and ReservedMemCurrent: nothing is
// kept cached, so the same) and the high-water marks. Allocating or freeing on a capturing
// stream (graph memory nodes) is not supported: cudaErrorStreamCaptureUnsupported.
#include <map>
#include <vector>

#include "internal.h"

// The struct behind cudaMemPool_t.
struct CUmemPoolHandle_st {
    int device;
    bool is_default;
    int reuse[3] = {1, 1, 1};  // ReuseFollowEventDependencies, ...Opportunistic, ...Internal...
    uint64_t release_threshold = 0;
    uint64_t used = 0, used_high = 0;
};

namespace cucc {
namespace {

struct PoolState {
    std::vector<cudaMemPool_t> defaults, current;  // per device
    std::vector<cudaMemPool_t> created;
    std::map<void*, std::pair<cudaMemPool_t, size_t>> allocations;  // pointer -> (pool, bytes)
};

PoolState& pools() {
    static auto* s = [] {
        auto* created = new PoolState;
        for (int d = 0; d < config().devices; d++) {
            created->defaults.push_back(new CUmemPoolHandle_st{d, true});
            created->current.push_back(created->defaults.back());
        }
        return created;
    }();
    return *s;
}

bool valid_pool(cudaMemPool_t pool) {
    PoolState& s = pools();
    for (auto* list : {&s.defaults, &s.created})
        for (cudaMemPool_t p : *list)
            if (p == pool) return true;
    return false;
}

// Refuses stream-ordered allocation on a capturing stream (and checks the stream): queues
// nothing on any other stream.
cudaError_t check_stream(cudaStream_t stream, const char* what) {
    StreamOp marker(what);
    marker.node_type = cudaGraphNodeTypeEmpty;
    marker.capturable = false;
    return stream_enqueue(stream, std::move(marker));
}

cudaError_t allocate_from(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream) {
    if (!ptr) return cudaErrorInvalidValue;
    {
        ApiLock lock;
        if (!valid_pool(pool)) return cudaErrorInvalidValue;
    }
    if (cudaError_t err = check_stream(stream, "cudaMallocAsync")) return err;
    int saved = current_device();
    set_current_device(pool->device);
    cudaError_t err = allocate_device(ptr, size);
    set_current_device(saved);
    if (err != cudaSuccess || !*ptr) return err;
    ApiLock lock;
    pools().allocations[*ptr] = {pool, size};
    pool->used += size;
    if (pool->used > pool->used_high) pool->used_high = pool->used;
    return cudaSuccess;
}

}  // namespace

void forget_pool_allocation(void* ptr) {
    ApiLock lock;
    auto& allocs = pools().allocations;
    auto it = allocs.find(ptr);
    if (it == allocs.end()) return;
    it->second.first->used -= it->second.second;
    allocs.erase(it);
}

}  // namespace cucc

using namespace cucc;

extern "C" {

cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
    cudaMemPool_t pool;
    {
        ApiLock lock;
        pool = pools().current[current_device()];
    }
    return api_return(allocate_from(ptr, size, pool, stream));
}

cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool,
                                    cudaStream_t stream) {
    return api_return(allocate_from(ptr, size, pool, stream));
}

// Memory from cudaMalloc may be freed this way too, as in CUDA.
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
    if (!ptr) return cudaSuccess;
    Allocation a;
    if (!find_allocation(ptr, 0, &a) || a.begin != (uintptr_t)ptr || a.kind != MemoryKind::Device)
        return api_return(cudaErrorInvalidValue);
    if (cudaError_t err = check_stream(stream, "cudaFreeAsync")) return api_return(err);
    StreamOp op{"cudaFreeAsync", nullptr, [ptr] {
                    if (free_device_now(ptr) != cudaSuccess)
                        fatal("cudaFreeAsync: %p was freed before its stream reached the free",
                              ptr);
                }};
    op.node_type = cudaGraphNodeTypeMemFree;
    return api_return(stream_enqueue(stream, std::move(op)));
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
    if (!pool) return api_return(cudaErrorInvalidValue);
    if (device < 0 || device >= config().devices) return api_return(cudaErrorInvalidDevice);
    ApiLock lock;
    *pool = pools().defaults[device];
    return cudaSuccess;
}

cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* pool, int device) {
    if (!pool) return api_return(cudaErrorInvalidValue);
    if (device < 0 || device >= config().devices) return api_return(cudaErrorInvalidDevice);
    ApiLock lock;
    *pool = pools().current[device];
    return cudaSuccess;
}

cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t pool) {
    if (device < 0 || device >= config().devices) return api_return(cudaErrorInvalidDevice);
    ApiLock lock;
    if (!valid_pool(pool) || pool->device != device) return api_return(cudaErrorInvalidValue);
    pools().current[device] = pool;
    return cudaSuccess;
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
    if (!pool || !props || props->allocType != cudaMemAllocationTypePinned ||
        props->location.type != cudaMemLocationTypeDevice)
        return api_return(cudaErrorInvalidValue);
    if (props->location.id < 0 || props->location.id >= config().devices)
        return api_return(cudaErrorInvalidDevice);
    ApiLock lock;
    *pool = new CUmemPoolHandle_st{props->location.id, false};
    pools().created.push_back(*pool);
    return cudaSuccess;
}

// Memory still allocated from the pool stays valid until it is freed, as CUDA documents.
cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
    ApiLock lock;
    PoolState& s = pools();
    if (!valid_pool(pool) || pool->is_default) return api_return(cudaErrorInvalidValue);
    for (cudaMemPool_t& c : s.current)
        if (c == pool) c = s.defaults[pool->device];
    for (size_t i = 0; i < s.created.size(); i++)
        if (s.created[i] == pool) s.created.erase(s.created.begin() + (long)i);
    if (pool->used == 0) delete pool;  // else it lives on, unreachable, with its allocations
    return cudaSuccess;
}

// Nothing is cached: there is never anything to release.
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t min_bytes_to_keep) {
    ApiLock lock;
    return valid_pool(pool) ? cudaSuccess : api_return(cudaErrorInvalidValue);
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
    ApiLock lock;
    if (!value || !valid_pool(pool)) return api_return(cudaErrorInvalidValue);
    switch (attr) {
        case cudaMemPoolReuseFollowEventDependencies:
        case cudaMemPoolReuseAllowOpportunistic:
        case cudaMemPoolReuseAllowInternalDependencies:
            pool->reuse[attr - cudaMemPoolReuseFollowEventDependencies] = *(int*)value;
            return cudaSuccess;
        case cudaMemPoolAttrReleaseThreshold:
            pool->release_threshold = *(uint64_t*)value;
            return cudaSuccess;
        case cudaMemPoolAttrReservedMemHigh:
        case cudaMemPoolAttrUsedMemHigh:
            // Only a reset to zero is allowed: the mark becomes what is in use now.
            if (*(uint64_t*)value != 0) return api_return(cudaErrorInvalidValue);
            pool->used_high = pool->used;
            return cudaSuccess;
        default:
            return api_return(cudaErrorInvalidValue);
    }
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
    ApiLock lock;
    if (!value || !valid_pool(pool)) return api_return(cudaErrorInvalidValue);
    switch (attr) {
        case cudaMemPoolReuseFollowEventDependencies:
        case cudaMemPoolReuseAllowOpportunistic:
        case cudaMemPoolReuseAllowInternalDependencies:
            *(int*)value = pool->reuse[attr - cudaMemPoolReuseFollowEventDependencies];
            return cudaSuccess;
        case cudaMemPoolAttrReleaseThreshold:
            *(uint64_t*)value = pool->release_threshold;
            return cudaSuccess;
        case cudaMemPoolAttrReservedMemCurrent:
        case cudaMemPoolAttrUsedMemCurrent:
            *(uint64_t*)value = pool->used;
            return cudaSuccess;
        case cudaMemPoolAttrReservedMemHigh:
        case cudaMemPoolAttrUsedMemHigh:
            *(uint64_t*)value = pool->used_high;
            return cudaSuccess;
        default:
            return api_return(cudaErrorInvalidValue);
    }
}

}  // extern "C"
