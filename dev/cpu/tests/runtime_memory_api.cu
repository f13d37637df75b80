// Memory entry points beyond cudaMalloc, as the CUDA runtime documents them:
//   - managed memory: written by the host and a kernel alike, cudaPointerGetAttributes says
//     managed, cudaMemAdvise and cudaMemPrefetchAsync with CUDA 13's cudaMemLocation (and their
//     errors), cudaMemRangeGetAttribute(s) reading the hints back over whole and partial
//     ranges (read-mostly, preferred location, accessed-by, last prefetch location, the
//     location type/id forms), cudaStreamAttachMemAsync, cudaMallocManaged(0) refused;
//   - cudaHostRegister / cudaHostUnregister / cudaHostGetDevicePointer / cudaHostGetFlags and
//     their errors (overlap, not registered);
//   - cudaMallocPitch + cudaMemcpy2D + cudaMemset2D (and the async forms), cudaMemcpy3D and
//     cudaMemset3D on pitched memory, with pitch errors;
//   - zero-byte copies, also at the end of an allocation, succeed; a bad direction does not;
//   - stream-ordered allocation: cudaMallocAsync / cudaFreeAsync on a stream, the default and
//     a created pool with their attributes (used memory and its high-water mark), and refusal
//     on a capturing stream.
// Every expected value is computed here.
//! cpu-only
//! run: ./prog => pass /all memory API checks passed/
#include <cstdio>
#include <cstring>
#include <vector>
#include "test_util.h"

__global__ void triple_kernel(int* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 3;
}

static cudaMemLocation location(cudaMemLocationType type, int id) {
    cudaMemLocation l;
    l.type = type;
    l.id = id;
    return l;
}

// The hints managed() gave m (bytes long): read-mostly and preferred location device 1 on all
// of it, the last prefetch to the host. Then more hints on parts of it.
static void range_attributes(int* m, size_t bytes) {
    int read_mostly = -1, preferred = -7, prefetched = -7, ids[3] = {7, 7, 7};
    cudaMemLocationType type = cudaMemLocationTypeHostNuma;
    CUDA_CHECK(
        cudaMemRangeGetAttribute(&read_mostly, 4, cudaMemRangeAttributeReadMostly, m, bytes));
    CUDA_CHECK(
        cudaMemRangeGetAttribute(&preferred, 4, cudaMemRangeAttributePreferredLocation, m, bytes));
    CUDA_CHECK(cudaMemRangeGetAttribute(&prefetched, 4, cudaMemRangeAttributeLastPrefetchLocation,
                                        m, bytes));
    CUDA_CHECK(cudaMemRangeGetAttribute(&type, sizeof type,
                                        cudaMemRangeAttributeLastPrefetchLocationType, m, bytes));
    expect(
        read_mostly == 1 && preferred == 1 && prefetched == cudaCpuDeviceId &&
            type == cudaMemLocationTypeHost,
        "cudaMemRangeGetAttribute: read-mostly, preferred device 1, last prefetched to the host");
    // Part of the range: unset read-mostly on the first 100 bytes, accessed-by device 0 on all,
    // device 2 on the second half, a prefetch of the second half to device 0.
    CUDA_CHECK(cudaMemAdvise(m, 100, cudaMemAdviseUnsetReadMostly,
                             location(cudaMemLocationTypeDevice, 0)));
    CUDA_CHECK(cudaMemAdvise(m, bytes, cudaMemAdviseSetAccessedBy,
                             location(cudaMemLocationTypeDevice, 0)));
    CUDA_CHECK(cudaMemAdvise((char*)m + bytes / 2, bytes / 2, cudaMemAdviseSetAccessedBy,
                             location(cudaMemLocationTypeDevice, 2)));
    CUDA_CHECK(cudaMemPrefetchAsync((char*)m + bytes / 2, bytes / 2,
                                    location(cudaMemLocationTypeDevice, 0), 0, 0));
    int whole_rm, tail_rm, whole_prefetch, tail_prefetch, tail_ids[3];
    CUDA_CHECK(cudaMemRangeGetAttribute(&whole_rm, 4, cudaMemRangeAttributeReadMostly, m, bytes));
    CUDA_CHECK(cudaMemRangeGetAttribute(&tail_rm, 4, cudaMemRangeAttributeReadMostly,
                                        (char*)m + 100, bytes - 100));
    CUDA_CHECK(cudaMemRangeGetAttribute(&whole_prefetch, 4,
                                        cudaMemRangeAttributeLastPrefetchLocation, m, bytes));
    CUDA_CHECK(cudaMemRangeGetAttribute(&tail_prefetch, 4,
                                        cudaMemRangeAttributeLastPrefetchLocation,
                                        (char*)m + bytes / 2, bytes / 2));
    CUDA_CHECK(
        cudaMemRangeGetAttribute(ids, sizeof ids, cudaMemRangeAttributeAccessedBy, m, bytes));
    CUDA_CHECK(cudaMemRangeGetAttribute(tail_ids, sizeof tail_ids, cudaMemRangeAttributeAccessedBy,
                                        (char*)m + bytes / 2, bytes / 2));
    expect(whole_rm == 0 && tail_rm == 1 && whole_prefetch == cudaInvalidDeviceId &&
               tail_prefetch == 0 && ids[0] == 0 && ids[1] == cudaInvalidDeviceId &&
               ids[2] == cudaInvalidDeviceId && tail_ids[0] == 0 && tail_ids[1] == 2 &&
               tail_ids[2] == cudaInvalidDeviceId,
           "partial ranges: all pages must agree, accessed-by lists devices set on all of it");
    int id = -1;
    cudaMemLocationType ptype;
    CUDA_CHECK(cudaMemAdvise(m, bytes, cudaMemAdviseUnsetPreferredLocation,
                             location(cudaMemLocationTypeDevice, 0)));
    void* data[] = {&ptype, &id};
    size_t sizes[] = {sizeof ptype, sizeof id};
    cudaMemRangeAttribute attrs[] = {cudaMemRangeAttributePreferredLocationType,
                                     cudaMemRangeAttributeLastPrefetchLocationId};
    CUDA_CHECK(cudaMemRangeGetAttributes(data, sizes, attrs, 2, (char*)m + bytes / 2, bytes / 2));
    expect(ptype == cudaMemLocationTypeInvalid && id == 0,
           "cudaMemRangeGetAttributes: preferred location unset, prefetch location id");
    expect_error(cudaMemRangeGetAttribute(&id, 8, cudaMemRangeAttributeReadMostly, m, bytes),
                 cudaErrorInvalidValue, "a read-mostly query with 8 bytes of data");
    int pageable[4];
    expect_error(cudaMemRangeGetAttribute(&id, 4, cudaMemRangeAttributeReadMostly, pageable,
                                          sizeof pageable),
                 cudaErrorInvalidValue, "a range query on memory that is not managed");
}

static void managed() {
    const int n = 1000;
    int* m;
    CUDA_CHECK(cudaMallocManaged(&m, n * sizeof(int)));
    for (int i = 0; i < n; i++) m[i] = i;
    CUDA_CHECK(cudaMemAdvise(m, n * sizeof(int), cudaMemAdviseSetReadMostly,
                             location(cudaMemLocationTypeDevice, 0)));
    CUDA_CHECK(cudaMemAdvise(m, n * sizeof(int), cudaMemAdviseSetPreferredLocation,
                             location(cudaMemLocationTypeDevice, 1)));
    CUDA_CHECK(
        cudaMemPrefetchAsync(m, n * sizeof(int), location(cudaMemLocationTypeDevice, 0), 0, 0));
    triple_kernel<<<(n + 127) / 128, 128>>>(m, n);
    CUDA_CHECK(
        cudaMemPrefetchAsync(m, n * sizeof(int), location(cudaMemLocationTypeHost, 0), 0, 0));
    CUDA_CHECK(cudaDeviceSynchronize());
    bool ok = true;
    for (int i = 0; i < n; i++) ok &= m[i] == 3 * i;
    cudaPointerAttributes attr;
    CUDA_CHECK(cudaPointerGetAttributes(&attr, m + 10));
    expect(ok && attr.type == cudaMemoryTypeManaged && attr.devicePointer == m + 10 &&
               attr.hostPointer == m + 10,
           "managed memory: host writes, kernel triples, host reads; attributes say managed");
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    CUDA_CHECK(cudaStreamAttachMemAsync(s, m, 0, cudaMemAttachSingle));
    CUDA_CHECK(cudaStreamSynchronize(s));
    expect_error(cudaStreamAttachMemAsync(s, m, 12, cudaMemAttachSingle), cudaErrorInvalidValue,
                 "attaching part of a managed allocation");
    CUDA_CHECK(cudaStreamDestroy(s));

    range_attributes(m, n * sizeof(int));

    std::vector<int> host(16);
    expect_error(cudaMemAdvise(host.data(), 64, cudaMemAdviseSetReadMostly,
                               location(cudaMemLocationTypeDevice, 0)),
                 cudaErrorInvalidValue, "cudaMemAdvise on pageable memory");
    expect_error(cudaMemAdvise(m, n * sizeof(int), cudaMemAdviseSetPreferredLocation,
                               location(cudaMemLocationTypeDevice, 8)),
                 cudaErrorInvalidDevice, "a preferred location on device 8");
    expect_error(cudaMemAdvise(m, n * sizeof(int), (cudaMemoryAdvise)9,
                               location(cudaMemLocationTypeDevice, 0)),
                 cudaErrorInvalidValue, "advice 9");
    expect_error(
        cudaMemPrefetchAsync(m, n * sizeof(int) + 4, location(cudaMemLocationTypeDevice, 0), 0, 0),
        cudaErrorInvalidValue, "a prefetch past the end of the allocation");
    expect_error(cudaMemPrefetchAsync(m, 4, location(cudaMemLocationTypeDevice, 0), 1, 0),
                 cudaErrorInvalidValue, "a prefetch with flags");
    void* z = (void*)1;
    expect_error(cudaMallocManaged(&z, 0), cudaErrorInvalidValue, "cudaMallocManaged(0)");
    expect_error(cudaMallocManaged(&z, 16, 7), cudaErrorInvalidValue, "managed flags 7");
    size_t free0, free1, total;
    CUDA_CHECK(cudaMemGetInfo(&free0, &total));
    CUDA_CHECK(cudaFree(m));
    CUDA_CHECK(cudaMemGetInfo(&free1, &total));
    expect(free0 == free1, "managed memory does not count against the device's memory");
}

static void registered() {
    const int n = 4096;
    std::vector<int> buf(n, 0), other(n, 0);
    CUDA_CHECK(cudaHostRegister(buf.data(), n * sizeof(int), cudaHostRegisterMapped));
    expect_error(cudaHostRegister(buf.data() + 100, 64, 0), cudaErrorHostMemoryAlreadyRegistered,
                 "registering part of a registered range");
    void* dev = nullptr;
    CUDA_CHECK(cudaHostGetDevicePointer(&dev, buf.data(), 0));
    unsigned flags = 0;
    expect_error(cudaHostGetFlags(&flags, buf.data()), cudaErrorInvalidValue,
                 "cudaHostGetFlags of registered (not cudaHostAlloc'ed) memory");
    cudaPointerAttributes attr;
    CUDA_CHECK(cudaPointerGetAttributes(&attr, buf.data() + 3));
    expect(dev == buf.data() && attr.type == cudaMemoryTypeHost,
           "registered memory: its device pointer is its address; attributes say host");

    // An asynchronous copy into registered memory returns before it ran (it is page-locked).
    int* d;
    CUDA_CHECK(cudaMalloc(&d, n * sizeof(int)));
    CUDA_CHECK(cudaMemset(d, 0x11, n * sizeof(int)));
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    CUDA_CHECK(cudaMemcpyAsync(buf.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    expect(buf[n - 1] == 0x11111111, "an async copy into registered memory, after a sync");
    CUDA_CHECK(cudaHostUnregister(buf.data()));
    expect_error(cudaHostUnregister(buf.data()), cudaErrorHostMemoryNotRegistered,
                 "unregistering twice");
    expect_error(cudaHostUnregister(other.data()), cudaErrorHostMemoryNotRegistered,
                 "unregistering memory never registered");
    expect_error(cudaHostRegister(nullptr, 64, 0), cudaErrorInvalidValue, "registering null");
    int* pinned;
    CUDA_CHECK(cudaHostAlloc(&pinned, 64, cudaHostAllocMapped | cudaHostAllocPortable));
    CUDA_CHECK(cudaHostGetFlags(&flags, pinned));
    expect(flags == (cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostGetFlags");
    CUDA_CHECK(cudaFreeHost(pinned));
    CUDA_CHECK(cudaStreamDestroy(s));
    CUDA_CHECK(cudaFree(d));
}

static void pitched() {
    const int w = 100, h = 7;  // ints
    int* d;
    size_t pitch = 0;
    CUDA_CHECK(cudaMallocPitch(&d, &pitch, w * sizeof(int), h));
    expect(pitch >= w * sizeof(int) && pitch % 512 == 0, "cudaMallocPitch rounds rows to 512 bytes",
           std::to_string(pitch) + " bytes");
    std::vector<int> src(w * h), back(w * h, -1);
    for (int i = 0; i < w * h; i++) src[i] = i * 13 - 5;
    CUDA_CHECK(cudaMemset2D(d, pitch, 0, pitch, h));
    CUDA_CHECK(cudaMemcpy2D(d, pitch, src.data(), w * sizeof(int), w * sizeof(int), h,
                            cudaMemcpyHostToDevice));
    // Columns 10..19 of every row set to 0x7f bytes, asynchronously.
    CUDA_CHECK(cudaMemset2DAsync((char*)d + 10 * sizeof(int), pitch, 0x7f, 10 * sizeof(int), h, 0));
    CUDA_CHECK(cudaMemcpy2DAsync(back.data(), w * sizeof(int), d, pitch, w * sizeof(int), h,
                                 cudaMemcpyDeviceToHost, 0));
    CUDA_CHECK(cudaDeviceSynchronize());
    int wrong = 0;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            wrong += back[y * w + x] != (x >= 10 && x < 20 ? 0x7f7f7f7f : src[y * w + x]);
    expect(wrong == 0, "cudaMemcpy2D / cudaMemset2D(Async) on pitched memory",
           std::to_string(wrong) + " wrong");
    expect_error(cudaMemcpy2D(d, 16, src.data(), w * sizeof(int), w * sizeof(int), h,
                              cudaMemcpyHostToDevice),
                 cudaErrorInvalidPitchValue, "a destination pitch smaller than the width");
    expect_error(cudaMemcpy2D(d, pitch, src.data(), w * sizeof(int), w * sizeof(int), h + 1,
                              cudaMemcpyHostToDevice),
                 cudaErrorInvalidValue, "a 2D copy past the end of the allocation");

    // 3D: a 4 x 3 x 2 box of ints at (x=2 ints, y=1, z=0) of a pitched 3D allocation.
    cudaExtent extent = make_cudaExtent(16 * sizeof(int), 4, 3);
    cudaPitchedPtr vol;
    CUDA_CHECK(cudaMalloc3D(&vol, extent));
    CUDA_CHECK(cudaMemset3D(vol, 0, extent));
    std::vector<int> box(4 * 3 * 2);
    for (size_t i = 0; i < box.size(); i++) box[i] = (int)i + 1;
    cudaMemcpy3DParms p = {};
    p.srcPtr = make_cudaPitchedPtr(box.data(), 4 * sizeof(int), 4, 3);
    p.dstPtr = vol;
    p.dstPos = make_cudaPos(2 * sizeof(int), 1, 0);
    p.extent = make_cudaExtent(4 * sizeof(int), 3, 2);
    p.kind = cudaMemcpyHostToDevice;
    CUDA_CHECK(cudaMemcpy3D(&p));
    std::vector<int> all(16 * 4 * 3, -1);
    cudaMemcpy3DParms q = {};
    q.srcPtr = vol;
    q.dstPtr = make_cudaPitchedPtr(all.data(), 16 * sizeof(int), 16, 4);
    q.extent = extent;
    q.kind = cudaMemcpyDeviceToHost;
    CUDA_CHECK(cudaMemcpy3D(&q));
    wrong = 0;
    for (int z = 0; z < 3; z++)
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 16; x++) {
                bool in = x >= 2 && x < 6 && y >= 1 && y < 4 && z < 2;
                int want = in ? box[(z * 3 + (y - 1)) * 4 + (x - 2)] : 0;
                wrong += all[(z * 4 + y) * 16 + x] != want;
            }
    expect(wrong == 0, "cudaMalloc3D, cudaMemset3D and cudaMemcpy3D of a box",
           std::to_string(wrong) + " wrong");
    CUDA_CHECK(cudaFree(vol.ptr));
    CUDA_CHECK(cudaFree(d));
}

static void zero_bytes() {
    int* d;
    CUDA_CHECK(cudaMalloc(&d, 64));
    int h = 0;
    cudaError_t results[] = {
        cudaMemcpy(d + 16, &h, 0, cudaMemcpyHostToDevice),
        cudaMemcpy(&h, d + 16, 0, cudaMemcpyDeviceToHost),
        cudaMemcpyAsync(d + 16, d, 0, cudaMemcpyDeviceToDevice, 0),
        cudaMemset(d + 16, 0, 0),
        cudaMemcpy2D(d + 16, 64, &h, 64, 0, 4, cudaMemcpyHostToDevice),
    };
    int failed = 0;
    for (cudaError_t e : results) failed += e != cudaSuccess;
    expect(failed == 0, "zero-byte copies and memsets at the end of an allocation succeed",
           std::to_string(failed) + " failed");
    expect_error(cudaMemcpy(d, &h, 0, (cudaMemcpyKind)9), cudaErrorInvalidMemcpyDirection,
                 "a zero-byte copy in direction 9");
    CUDA_CHECK(cudaFree(d));
}

static void stream_ordered() {
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    cudaMemPool_t def, cur;
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&def, 0));
    CUDA_CHECK(cudaDeviceGetMemPool(&cur, 0));
    int* a;
    const int n = 1000;
    CUDA_CHECK(cudaMallocAsync(&a, n * sizeof(int), s));
    CUDA_CHECK(cudaMemsetAsync(a, 0, n * sizeof(int), s));
    uint64_t used = 0, high = 0;
    CUDA_CHECK(cudaMemPoolGetAttribute(def, cudaMemPoolAttrUsedMemCurrent, &used));
    CUDA_CHECK(cudaFreeAsync(a, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    uint64_t after = 1;
    CUDA_CHECK(cudaMemPoolGetAttribute(def, cudaMemPoolAttrUsedMemCurrent, &after));
    CUDA_CHECK(cudaMemPoolGetAttribute(def, cudaMemPoolAttrUsedMemHigh, &high));
    expect(def == cur && used == n * sizeof(int) && after == 0 && high == n * sizeof(int),
           "cudaMallocAsync / cudaFreeAsync from the default pool; used memory and its peak");

    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool;
    CUDA_CHECK(cudaMemPoolCreate(&pool, &props));
    uint64_t threshold = 1 << 20, got = 0;
    CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &got));
    CUDA_CHECK(cudaDeviceSetMemPool(0, pool));
    CUDA_CHECK(cudaMallocAsync(&a, 64, s));
    CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    CUDA_CHECK(cudaFreeAsync(a, s));
    void* b;
    CUDA_CHECK(cudaMallocFromPoolAsync(&b, 128, def, s));
    CUDA_CHECK(cudaMemPoolGetAttribute(def, cudaMemPoolAttrUsedMemCurrent, &after));
    CUDA_CHECK(cudaFree(b));
    CUDA_CHECK(cudaDeviceSetMemPool(0, def));
    CUDA_CHECK(cudaStreamSynchronize(s));
    expect(got == threshold && used == 64 && after == 128,
           "a created pool: release threshold kept, current pool, cudaMallocFromPoolAsync");
    uint64_t one = 1;
    expect_error(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &one),
                 cudaErrorInvalidValue, "setting a high-water mark to anything but 0");
    CUDA_CHECK(cudaMemPoolDestroy(pool));
    expect_error(cudaMemPoolDestroy(def), cudaErrorInvalidValue, "destroying a default pool");

    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    expect_error(cudaMallocAsync(&a, 64, s), cudaErrorStreamCaptureUnsupported,
                 "cudaMallocAsync on a capturing stream");
    cudaGraph_t g;
    expect_error(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated,
                 "the capture after it");
    CUDA_CHECK(cudaStreamDestroy(s));
}

int main() {
    stream_ordered();
    managed();
    registered();
    pitched();
    zero_bytes();
    return test_report("memory API");
}
