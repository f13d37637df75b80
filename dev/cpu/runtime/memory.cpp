// memory.cpp: device, pinned, registered and managed memory; 1D, 2D and 3D copies and memsets;
// the memory hints (cudaMemAdvise, cudaMemPrefetchAsync, cudaStreamAttachMemAsync) and the
// queries of them (cudaMemRangeGetAttribute(s)): hints change nothing about where memory is (it
// is all host memory) but are recorded per byte range and reported back as CUDA documents.
//
// Device memory is ordinary host memory recorded in a table of live allocations, so the runtime
// can tell device pointers from host pointers and check that a copy stays inside its allocation.
// Each allocation has a kind: device (cudaMalloc, cudaMallocPitch), pinned (cudaMallocHost,
// cudaHostAlloc), registered (cudaHostRegister'ed user memory, which the runtime never frees)
// or managed (cudaMallocManaged). Kernels and the CPU libraries may use device and managed
// memory; pinned and registered memory count as page-locked host memory for the stream
// semantics of asynchronous copies.
//
// The memory limit is real. The default per-device limit (cudaMemGetInfo's total) is what the
// machine has available when the program starts: MemAvailable from /proc/meminfo, or the room
// left under the cgroup's memory limit (v2 memory.max, v1 memory.limit_in_bytes, of the
// process's cgroup and its ancestors) when that is less, minus a headroom of 5% of the
// machine's (or cgroup's) memory and at least 512 MiB. CUCC_MEM_LIMIT overrides it. Device
// memory counts against the limit in sizes rounded up to 256 bytes. Allocations are committed:
// mapped with MAP_POPULATE (no MAP_NORESERVE), so the pages exist when cudaMalloc returns, and
// an allocation of 1 MiB or more first checks that the machine still has its size plus the
// headroom available (another process may have taken memory meanwhile). A request that does not
// fit fails with cudaErrorMemoryAllocation, whatever CUCC_MEM_LIMIT says, instead of the
// process being killed later when it touches the pages. (Committing costs time: about 1 s per
// GiB on the development machine, see map_memory.) So that a program that frees and allocates
// buffers of the same size over and over (a workspace per call) does not pay it each time,
// freed mappings of 1 MiB or more are kept, up to 1 GiB in all, and given to the next
// allocation of the same page-rounded size (uncleared, as cudaMalloc's memory is); they are
// unmapped when an allocation would otherwise not fit the machine. Managed and pinned memory are
// not device memory (they do not count against the device limit) but are committed and checked the
// same way. Under AddressSanitizer (the program was linked with --asan, seen at run time
// through ASan's __asan_init) allocations come from posix_memalign instead, with exactly the
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
// pageable (not page-locked) host memory: a copy from pageable memory to the device takes a
// snapshot of the source before returning, and a copy from the device to pageable memory
// returns only once it is done. Captured into a graph, any asynchronous copy becomes a memcpy
// node that reads its source when the graph runs. A copy of 0 bytes (or a 2D/3D copy with a
// zero extent) only checks its direction and succeeds, wherever its pointers point. cudaFree
// and cudaFreeHost first finish all queued work, since it may still use the memory (CUDA's
// cudaFree synchronizes too).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_runtime.h>  // make_cudaPitchedPtr, make_cudaExtent

#include "internal.h"

// Defined by the AddressSanitizer runtime when the program was linked with -fsanitize=address.
extern "C" void __asan_init() __attribute__((weak));

namespace cucc {
namespace {

constexpr size_t kMiB = (size_t)1 << 20;
constexpr size_t kCheckedAllocation = kMiB;  // allocations this large re-check the machine
constexpr size_t kPitchAlignment = 512;      // cudaMallocPitch rounds rows to this (bytes)

// One cudaMemAdvise or cudaMemPrefetchAsync on a managed range, kept for
// cudaMemRangeGetAttribute. `what` is the attribute it changes: ReadMostly (set or unset),
// PreferredLocation (set: location; unset), AccessedBy (set or unset for device location.id)
// or LastPrefetchLocation (set: location).
struct RangeHint {
    uintptr_t begin, end;
    cudaMemRangeAttribute what;
    bool set;
    cudaMemLocation location;
};

struct MemoryState {
    std::map<uintptr_t, Allocation> allocations;  // by start address
    std::map<uintptr_t, Allocation> symbols;      // registered __device__ variables, by start
    std::vector<size_t> used;                     // device bytes allocated, per device
    std::vector<RangeHint> hints;                 // in the order they were given
};

MemoryState& memory() {
    static auto* m = new MemoryState{{}, {}, std::vector<size_t>(config().devices, 0), {}};
    return *m;
}

bool under_asan() { return &__asan_init != nullptr; }

size_t page_size() {
    static const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return page;
}

size_t mapped_bytes(size_t size) { return (size + page_size() - 1) / page_size() * page_size(); }

size_t rounded_bytes(size_t size) { return (size + 255) / 256 * 256; }

// ---------------------------------------------------------------------------------------------
// What the machine has.

// The number after `key` in a "key value" text file (/proc/meminfo, memory.stat), or false.
bool read_key(const std::string& path, const std::string& key, unsigned long long* value) {
    std::ifstream f(path);
    std::string k;
    unsigned long long v;
    while (f >> k >> v) {
        if (k == key) {
            *value = v;
            return true;
        }
        f.ignore(1 << 20, '\n');
    }
    return false;
}

// The first number in a file, or false ("max" and missing files are false).
bool read_number(const std::string& path, unsigned long long* value) {
    std::ifstream f(path);
    return bool(f >> *value);
}

// Where the process's memory cgroup lives: the directory of each level, leaf first, for v2
// (unified) or v1 (memory controller), with the files to read.
struct CgroupFiles {
    std::vector<std::string> dirs;
    const char* limit;
    const char* usage;
    const char* inactive;  // the key of reclaimable page cache in memory.stat
};

CgroupFiles find_cgroup() {
    CgroupFiles c{{}, nullptr, nullptr, nullptr};
    std::ifstream self("/proc/self/cgroup");
    std::string line, v1_path, v2_path;
    bool have_v1 = false, have_v2 = false;
    while (std::getline(self, line)) {
        size_t a = line.find(':'), b = line.find(':', a + 1);
        if (a == std::string::npos || b == std::string::npos) continue;
        std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
        if (controllers.empty()) {
            have_v2 = true;
            v2_path = path;
        }
        std::stringstream list(controllers);
        for (std::string name; std::getline(list, name, ',');)
            if (name == "memory") {
                have_v1 = true;
                v1_path = path;
            }
    }
    // mountinfo: "id parent major:minor root mountpoint options ... - fstype source superopts".
    std::ifstream mounts("/proc/self/mountinfo");
    while (std::getline(mounts, line)) {
        std::stringstream fields(line);
        std::string id, parent, devno, root, point, rest;
        fields >> id >> parent >> devno >> root >> point;
        size_t dash = line.find(" - ");
        if (dash == std::string::npos) continue;
        std::stringstream tail(line.substr(dash + 3));
        std::string fstype, source, super;
        tail >> fstype >> source >> super;
        bool v1 = fstype == "cgroup" && have_v1 &&
                  ("," + super + ",").find(",memory,") != std::string::npos;
        bool v2 = fstype == "cgroup2" && have_v2 && !have_v1;
        if (!v1 && !v2) continue;
        std::string path = v1 ? v1_path : v2_path;
        // The mount shows the hierarchy from `root` on: strip it from the process's path.
        if (root != "/" && path.compare(0, root.size(), root) == 0) path = path.substr(root.size());
        for (std::string p = path;; p = p.substr(0, p.rfind('/'))) {
            c.dirs.push_back(point + p);
            if (p.empty() || p == "/") break;
        }
        c.limit = v1 ? "memory.limit_in_bytes" : "memory.max";
        c.usage = v1 ? "memory.usage_in_bytes" : "memory.current";
        c.inactive = v1 ? "total_inactive_file" : "inactive_file";
        break;
    }
    return c;
}

const CgroupFiles& cgroup() {
    static const CgroupFiles* c = new CgroupFiles(find_cgroup());
    return *c;
}

// Memory the machine (and the cgroup) has, and what is available now, in bytes.
struct MachineMemory {
    size_t total, available;
};

MachineMemory machine_memory() {
    unsigned long long total_kb = 0, available_kb = 0;
    MachineMemory m;
    if (read_key("/proc/meminfo", "MemTotal:", &total_kb) &&
        read_key("/proc/meminfo", "MemAvailable:", &available_kb)) {
        m = {(size_t)total_kb * 1024, (size_t)available_kb * 1024};
    } else {
        size_t page = page_size();
        m = {(size_t)sysconf(_SC_PHYS_PAGES) * page, (size_t)sysconf(_SC_AVPHYS_PAGES) * page};
    }
    // Each level of the cgroup that sets a limit bounds what is left; page cache it holds is
    // reclaimable and counts as available, as in MemAvailable.
    const CgroupFiles& c = cgroup();
    for (const std::string& dir : c.dirs) {
        unsigned long long limit, usage, inactive = 0;
        if (!read_number(dir + "/" + c.limit, &limit) || limit >= (1ull << 62) ||
            !read_number(dir + "/" + c.usage, &usage))
            continue;
        read_key(dir + "/memory.stat", c.inactive, &inactive);
        unsigned long long held = usage > inactive ? usage - inactive : 0;
        m.total = std::min<size_t>(m.total, limit);
        m.available = std::min<size_t>(m.available, limit > held ? limit - held : 0);
    }
    return m;
}

size_t headroom_bytes() {
    static const size_t headroom = std::max<size_t>(512 * kMiB, machine_memory().total / 20);
    return headroom;
}

// Can the machine give `bytes` more and keep the headroom?
bool machine_has_room(size_t bytes) {
    if (bytes < kCheckedAllocation) return true;
    size_t available = machine_memory().available;
    return available >= headroom_bytes() && bytes <= available - headroom_bytes();
}

// ---------------------------------------------------------------------------------------------
// Allocations.

// Freed mappings kept for reuse, by mapped size (see the file comment).
constexpr size_t kCachedMapping = kMiB;      // the smallest mapping kept
constexpr size_t kCacheBytes = 1024 * kMiB;  // the most kept in all
std::multimap<size_t, void*>& cached_mappings() {
    static auto* c = new std::multimap<size_t, void*>;
    return *c;
}
size_t cached_bytes = 0;

void* take_cached(size_t size) {
    if (under_asan()) return nullptr;
    ApiLock lock;
    auto it = cached_mappings().find(mapped_bytes(size));
    if (it == cached_mappings().end()) return nullptr;
    void* p = it->second;
    cached_bytes -= it->first;
    cached_mappings().erase(it);
    return p;
}

void release_cached() {
    ApiLock lock;
    for (auto& [bytes, p] : cached_mappings())
        if (munmap(p, bytes) != 0) fatal("munmap of a %zu-byte mapping failed", bytes);
    cached_mappings().clear();
    cached_bytes = 0;
}

void* map_memory(size_t size) {
    if (under_asan()) {
        void* p;
        return posix_memalign(&p, 256, size) == 0 ? p : nullptr;
    }
    size_t bytes = mapped_bytes(size);
    if (bytes < size) return nullptr;
    // MAP_POPULATE commits every page now. Measured on the development machine (2 cores, a
    // VM): 0.7 to 2.6 GB/s for 256 MiB to 2 GiB, as fast as touching each page and, while
    // memory is fragmented, faster than asking for transparent huge pages (compaction stalls).
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
}

void unmap_memory(const Allocation& a) {
    if (a.kind == MemoryKind::Registered) return;  // the user's memory
    if (under_asan()) {
        free((void*)a.begin);
        return;
    }
    size_t bytes = mapped_bytes(a.size);
    {
        ApiLock lock;
        if (bytes >= kCachedMapping && cached_bytes + bytes <= kCacheBytes) {
            cached_mappings().emplace(bytes, (void*)a.begin);
            cached_bytes += bytes;
            return;
        }
    }
    if (munmap((void*)a.begin, bytes) != 0) fatal("munmap of a %zu-byte allocation failed", a.size);
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

// Device allocations (kind Device) count against device `device`'s limit.
cudaError_t allocate(void** ptr, size_t size, MemoryKind kind, unsigned flags) {
    if (!ptr) return cudaErrorInvalidValue;
    if (cudaError_t err = check_capture_safe()) return err;
    ApiLock lock;
    *ptr = nullptr;
    if (size == 0) return cudaSuccess;
    MemoryState& m = memory();
    int device = current_device();
    size_t rounded = rounded_bytes(size);
    if (rounded < size) return cudaErrorMemoryAllocation;
    if (kind == MemoryKind::Device && rounded > config().mem_limit - m.used[device])
        return cudaErrorMemoryAllocation;
    void* p = take_cached(size);
    if (!p) {
        if (!machine_has_room(size)) release_cached();  // then ask again without them
        if (!machine_has_room(size)) return cudaErrorMemoryAllocation;
        p = map_memory(size);
    }
    if (!p) return cudaErrorMemoryAllocation;
    m.allocations[(uintptr_t)p] = Allocation{(uintptr_t)p, size, device, kind, flags};
    if (kind == MemoryKind::Device) m.used[device] += rounded;
    *ptr = p;
    return cudaSuccess;
}

// Removes the allocation starting at ptr (of one of the kinds in `kinds`) from the table and
// returns it, or returns false. The caller unmaps it.
bool take_allocation(void* ptr, std::initializer_list<MemoryKind> kinds, Allocation* out) {
    ApiLock lock;
    MemoryState& m = memory();
    auto it = m.allocations.find((uintptr_t)ptr);
    if (it == m.allocations.end() ||
        std::find(kinds.begin(), kinds.end(), it->second.kind) == kinds.end())
        return false;
    *out = it->second;
    if (out->kind == MemoryKind::Device) m.used[out->device] -= rounded_bytes(out->size);
    m.allocations.erase(it);
    forget_pool_allocation(ptr);
    // Hints on freed managed memory would otherwise apply to a later allocation there.
    uintptr_t begin = out->begin, end = out->begin + out->size;
    m.hints.erase(
        std::remove_if(m.hints.begin(), m.hints.end(),
                       [&](const RangeHint& h) { return h.begin < end && h.end > begin; }),
        m.hints.end());
    return true;
}

cudaError_t release(void* ptr, std::initializer_list<MemoryKind> kinds) {
    if (!ptr) return cudaSuccess;
    if (cudaError_t err = check_capture_safe()) return err;
    {
        Allocation probe;
        if (!find_allocation(ptr, 0, &probe) || probe.begin != (uintptr_t)ptr ||
            std::find(kinds.begin(), kinds.end(), probe.kind) == kinds.end())
            return cudaErrorInvalidValue;
    }
    synchronize_all();
    Allocation a;
    if (!take_allocation(ptr, kinds, &a)) return cudaErrorInvalidValue;  // freed meanwhile
    unmap_memory(a);
    return cudaSuccess;
}

// Memory a kernel may use: device or managed memory (or a registered symbol).
bool is_device(const void* p, size_t bytes) {
    Allocation a;
    return find_allocation(p, bytes, &a) &&
           (a.kind == MemoryKind::Device || a.kind == MemoryKind::Managed);
}

// Host memory the runtime knows: page-locked (pinned or registered) or managed.
bool is_known_host(const void* p, size_t bytes) {
    Allocation a;
    return find_allocation(p, bytes, &a) && a.kind != MemoryKind::Device;
}

bool is_managed(const void* p, size_t bytes) {
    Allocation a;
    return find_allocation(p, bytes, &a) && a.kind == MemoryKind::Managed;
}

// ---------------------------------------------------------------------------------------------
// Copies and memsets of rectangular regions: `depth` slices of `height` rows of `width` bytes.
// Row r of slice z starts at ptr + z * slice + r * pitch on each side. A 1D copy is one row.
struct Region {
    size_t width, height, depth;
    size_t dpitch, dslice, spitch, sslice;
    bool empty() const { return width == 0 || height == 0 || depth == 0; }
    // Bytes from the first to one past the last byte touched on each side.
    size_t dst_span() const { return (depth - 1) * dslice + (height - 1) * dpitch + width; }
    size_t src_span() const { return (depth - 1) * sslice + (height - 1) * spitch + width; }
};

Region linear(size_t count) { return Region{count, 1, 1, count, count, count, count}; }

void copy_region(char* dst, const char* src, const Region& r) {
    for (size_t z = 0; z < r.depth; z++)
        for (size_t y = 0; y < r.height; y++)
            memmove(dst + z * r.dslice + y * r.dpitch, src + z * r.sslice + y * r.spitch, r.width);
}

// Checks a copy's pointers against its kind: the device side must lie inside one device (or
// managed) allocation. cudaMemcpyDefault infers the kind from the pointers.
cudaError_t check_copy(void* dst, const void* src, const Region& r, cudaMemcpyKind kind) {
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
        return cudaErrorInvalidMemcpyDirection;
    if (r.empty()) return cudaSuccess;
    if (!dst || !src) return cudaErrorInvalidValue;
    size_t dn = r.dst_span(), sn = r.src_span();
    switch (kind) {
        case cudaMemcpyHostToDevice:
            return is_device(dst, dn) ? cudaSuccess : cudaErrorInvalidValue;
        case cudaMemcpyDeviceToHost:
            return is_device(src, sn) ? cudaSuccess : cudaErrorInvalidValue;
        case cudaMemcpyDeviceToDevice:
            return is_device(dst, dn) && is_device(src, sn) ? cudaSuccess : cudaErrorInvalidValue;
        case cudaMemcpyDefault: {  // a pointer into known memory must keep the copy inside it
            Allocation a;
            bool dst_ok = !find_allocation(dst, 0, &a) || find_allocation(dst, dn, &a);
            bool src_ok = !find_allocation(src, 0, &a) || find_allocation(src, sn, &a);
            return dst_ok && src_ok ? cudaSuccess : cudaErrorInvalidValue;
        }
        default:
            return cudaSuccess;
    }
}

// Writes `value` (its low element_size bytes, 1, 2 or 4) into every element of region r at dst.
void fill_region(char* dst, const Region& r, unsigned value, unsigned element_size) {
    for (size_t z = 0; z < r.depth; z++) {
        for (size_t y = 0; y < r.height; y++) {
            char* row = dst + z * r.dslice + y * r.dpitch;
            if (element_size == 1) memset(row, (int)(value & 0xff), r.width);
            else
                for (size_t x = 0; x < r.width; x += element_size)
                    memcpy(row + x, &value, element_size);
        }
    }
}

// The stream op of a checked copy: it reads the source when it runs.
StreamOp copy_op(void* dst, const void* src, const Region& r, const char* what) {
    char* d = (char*)dst;
    const char* from = (const char*)src;
    StreamOp op{what, nullptr, [=] { copy_region(d, from, r); }};
    op.node_type = cudaGraphNodeTypeMemcpy;
    return op;
}

cudaError_t copy(void* dst, const void* src, const Region& r, cudaMemcpyKind kind,
                 cudaStream_t stream, bool synchronous) {
    cudaError_t err = check_copy(dst, src, r, kind);
    if (err != cudaSuccess || r.empty()) return err;
    cudaStream_t s;
    if (!resolve_stream(stream, &s)) return cudaErrorInvalidResourceHandle;
    // Captured into a graph, a copy is a memcpy node: it reads and writes its memory, pageable
    // or not, when the graph runs.
    if (!synchronous && stream_is_capturing(s))
        return stream_enqueue(s, copy_op(dst, src, r, "cudaMemcpyAsync"));
    bool src_pageable = !is_device(src, r.src_span()) && !is_known_host(src, r.src_span());
    bool dst_pageable = !is_device(dst, r.dst_span()) && !is_known_host(dst, r.dst_span());
    if (synchronous || dst_pageable) {
        if (synchronous)
            if (cudaError_t unsafe = check_capture_safe()) return unsafe;
        return enqueue_and_wait(s, copy_op(dst, src, r, "cudaMemcpy"));
    }
    if (!src_pageable) return stream_enqueue(s, copy_op(dst, src, r, "cudaMemcpyAsync"));
    // Snapshot the source now, packed; the copy reads the snapshot when it runs.
    size_t w = r.width, h = r.height;
    auto snapshot = std::make_shared<std::vector<char>>(w * h * r.depth);
    copy_region(snapshot->data(), (const char*)src,
                Region{w, h, r.depth, w, w * h, r.spitch, r.sslice});
    Region packed{w, h, r.depth, r.dpitch, r.dslice, w, w * h};
    char* d = (char*)dst;
    StreamOp op{"cudaMemcpyAsync", nullptr, [=] { copy_region(d, snapshot->data(), packed); }};
    op.node_type = cudaGraphNodeTypeMemcpy;
    op.capturable = false;
    return stream_enqueue(s, std::move(op));
}

// Checks a memset of region r (element_size 1, 2 or 4 bytes; r.width in bytes) and builds its op.
cudaError_t set_op(void* dst, unsigned value, unsigned element_size, const Region& r,
                   const char* what, StreamOp* op) {
    if (element_size != 1 && element_size != 2 && element_size != 4) return cudaErrorInvalidValue;
    if (r.empty()) return cudaSuccess;
    Allocation a;
    if (!dst || !find_allocation(dst, r.dst_span(), &a) || (uintptr_t)dst % element_size != 0)
        return cudaErrorInvalidValue;
    char* d = (char*)dst;
    *op = StreamOp{what, nullptr, [=] { fill_region(d, r, value, element_size); }};
    op->node_type = cudaGraphNodeTypeMemset;
    return cudaSuccess;
}

cudaError_t set(void* dst, int value, const Region& r, cudaStream_t stream, bool synchronous) {
    if (r.empty()) return cudaSuccess;
    StreamOp op;
    cudaError_t err =
        set_op(dst, (unsigned)value, 1, r, synchronous ? "cudaMemset" : "cudaMemsetAsync", &op);
    if (err != cudaSuccess) return err;
    cudaStream_t s;
    if (!resolve_stream(stream, &s)) return cudaErrorInvalidResourceHandle;
    if (!synchronous) return stream_enqueue(s, std::move(op));
    if (cudaError_t unsafe = check_capture_safe()) return unsafe;
    return enqueue_and_wait(s, std::move(op));
}

// 2D regions: rows of `width` bytes, `pitch` apart. A pitch smaller than the width, or larger
// than the device's maximum pitch, is invalid.
bool valid_pitch(size_t pitch, size_t width) { return pitch >= width && pitch <= 2147483647u; }

cudaError_t copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                    size_t height, cudaMemcpyKind kind, cudaStream_t stream, bool synchronous) {
    if (height > 1 && (!valid_pitch(dpitch, width) || !valid_pitch(spitch, width)))
        return cudaErrorInvalidPitchValue;
    Region r{width, height, 1, dpitch, dpitch * height, spitch, spitch * height};
    return copy(dst, src, r, kind, stream, synchronous);
}

// The region and the two start addresses of a 3D copy between linear memory (CUDA arrays are
// not supported). Positions are in bytes (x), rows (y) and slices (z) of the pitched pointers.
cudaError_t region_3d(const cudaMemcpy3DParms* p, void** dst, const void** src, Region* r) {
    if (!p) return cudaErrorInvalidValue;
    if (p->srcArray || p->dstArray) {
        fprintf(stderr,
                "cucc: a 3D copy with CUDA arrays is not supported by the CPU runtime; copy "
                "between linear (pitched) memory\n");
        return cudaErrorNotSupported;
    }
    const cudaPitchedPtr &sp = p->srcPtr, &dp = p->dstPtr;
    const cudaExtent& e = p->extent;
    if (e.height > 1 && (!valid_pitch(dp.pitch, e.width) || !valid_pitch(sp.pitch, e.width)))
        return cudaErrorInvalidPitchValue;
    if (e.depth > 1 && (dp.ysize < e.height || sp.ysize < e.height)) return cudaErrorInvalidValue;
    *dst = (char*)dp.ptr + (p->dstPos.z * dp.ysize + p->dstPos.y) * dp.pitch + p->dstPos.x;
    *src = (const char*)sp.ptr + (p->srcPos.z * sp.ysize + p->srcPos.y) * sp.pitch + p->srcPos.x;
    *r = Region{e.width,  e.height,           e.depth, dp.pitch, dp.pitch * dp.ysize,
                sp.pitch, sp.pitch * sp.ysize};
    return cudaSuccess;
}

cudaError_t copy_3d(const cudaMemcpy3DParms* p, cudaStream_t stream, bool synchronous) {
    void* dst;
    const void* src;
    Region r;
    cudaError_t err = region_3d(p, &dst, &src, &r);
    return err != cudaSuccess ? err : copy(dst, src, r, p->kind, stream, synchronous);
}

cudaError_t set_3d(cudaPitchedPtr p, int value, cudaExtent e, cudaStream_t stream,
                   bool synchronous) {
    if (e.height > 1 && !valid_pitch(p.pitch, e.width)) return cudaErrorInvalidValue;
    if (e.depth > 1 && p.ysize < e.height) return cudaErrorInvalidValue;
    Region r{e.width, e.height, e.depth, p.pitch, p.pitch * p.ysize, 0, 0};
    return set(p.ptr, value, r, stream, synchronous);
}

bool valid_location(const cudaMemLocation& l) {
    switch (l.type) {
        case cudaMemLocationTypeDevice:
            return l.id >= 0 && l.id < config().devices;
        case cudaMemLocationTypeHost:
        case cudaMemLocationTypeHostNumaCurrent:
            return true;
        case cudaMemLocationTypeHostNuma:
            return l.id == 0;  // one NUMA node
        default:
            return false;
    }
}

// Records a hint; earlier ones of the same attribute (and device, for AccessedBy) that it
// covers entirely can no longer show, so they go (a prefetch every iteration keeps one record).
void add_hint(const RangeHint& h) {
    std::vector<RangeHint>& hints = memory().hints;
    hints.erase(std::remove_if(hints.begin(), hints.end(),
                               [&](const RangeHint& o) {
                                   return o.what == h.what && o.begin >= h.begin &&
                                          o.end <= h.end &&
                                          (h.what != cudaMemRangeAttributeAccessedBy ||
                                           o.location.id == h.location.id);
                               }),
                hints.end());
    hints.push_back(h);
}

// The state of one attribute over [begin, end): the hints that cover it, replayed in order,
// piece by piece between the boundaries of the hints. For a location attribute, *location is
// the one every piece has (type cudaMemLocationTypeInvalid when a piece has none or they
// differ); for ReadMostly, *all says whether every piece has it; for AccessedBy of `device`,
// the same.
void range_state(uintptr_t begin, uintptr_t end, cudaMemRangeAttribute what, int device, bool* all,
                 cudaMemLocation* location) {
    const std::vector<RangeHint>& hints = memory().hints;
    std::vector<uintptr_t> cuts{begin, end};
    for (const RangeHint& h : hints) {
        if (h.what != what) continue;
        if (h.begin > begin && h.begin < end) cuts.push_back(h.begin);
        if (h.end > begin && h.end < end) cuts.push_back(h.end);
    }
    std::sort(cuts.begin(), cuts.end());
    *all = true;
    bool first = true;
    *location = cudaMemLocation{cudaMemLocationTypeInvalid, 0};
    for (size_t i = 0; i + 1 < cuts.size(); i++) {
        if (cuts[i] == cuts[i + 1]) continue;
        bool on = false;
        cudaMemLocation here{cudaMemLocationTypeInvalid, 0};
        for (const RangeHint& h : hints) {
            if (h.what != what || h.begin > cuts[i] || h.end < cuts[i + 1]) continue;
            if (what == cudaMemRangeAttributeAccessedBy && h.location.id != device) continue;
            on = h.set;
            here = h.set ? h.location : cudaMemLocation{cudaMemLocationTypeInvalid, 0};
        }
        *all = *all && on;
        if (first) *location = here;
        else if (here.type != location->type || here.id != location->id)
            *location = cudaMemLocation{cudaMemLocationTypeInvalid, 0};
        first = false;
    }
}

// A location as the int the older attributes give: a device id, cudaCpuDeviceId for the host,
// cudaInvalidDeviceId for none.
int location_device(const cudaMemLocation& l) {
    return l.type == cudaMemLocationTypeDevice    ? l.id
           : l.type == cudaMemLocationTypeInvalid ? cudaInvalidDeviceId
                                                  : cudaCpuDeviceId;
}

cudaError_t range_attribute(void* data, size_t size, cudaMemRangeAttribute attribute,
                            const void* dev_ptr, size_t count) {
    if (!data || count == 0 || !is_managed(dev_ptr, count)) return cudaErrorInvalidValue;
    bool int_sized = size == sizeof(int);
    uintptr_t begin = (uintptr_t)dev_ptr, end = begin + count;
    bool all;
    cudaMemLocation l;
    ApiLock lock;
    switch (attribute) {
        case cudaMemRangeAttributeReadMostly:
            if (!int_sized) return cudaErrorInvalidValue;
            range_state(begin, end, attribute, 0, &all, &l);
            *(int*)data = all ? 1 : 0;
            return cudaSuccess;
        case cudaMemRangeAttributeAccessedBy: {
            if (size == 0 || size % sizeof(int)) return cudaErrorInvalidValue;
            int* out = (int*)data;
            size_t n = size / sizeof(int), k = 0;
            for (int d = 0; d < config().devices && k < n; d++) {
                range_state(begin, end, attribute, d, &all, &l);
                if (all) out[k++] = d;
            }
            while (k < n) out[k++] = cudaInvalidDeviceId;
            return cudaSuccess;
        }
        case cudaMemRangeAttributePreferredLocation:
        case cudaMemRangeAttributeLastPrefetchLocation:
        case cudaMemRangeAttributePreferredLocationType:
        case cudaMemRangeAttributePreferredLocationId:
        case cudaMemRangeAttributeLastPrefetchLocationType:
        case cudaMemRangeAttributeLastPrefetchLocationId: {
            bool preferred = attribute == cudaMemRangeAttributePreferredLocation ||
                             attribute == cudaMemRangeAttributePreferredLocationType ||
                             attribute == cudaMemRangeAttributePreferredLocationId;
            range_state(begin, end,
                        preferred ? cudaMemRangeAttributePreferredLocation
                                  : cudaMemRangeAttributeLastPrefetchLocation,
                        0, &all, &l);
            if (attribute == cudaMemRangeAttributePreferredLocationType ||
                attribute == cudaMemRangeAttributeLastPrefetchLocationType) {
                if (size != sizeof(cudaMemLocationType)) return cudaErrorInvalidValue;
                *(cudaMemLocationType*)data = l.type;
                return cudaSuccess;
            }
            if (!int_sized) return cudaErrorInvalidValue;
            bool id = attribute == cudaMemRangeAttributePreferredLocationId ||
                      attribute == cudaMemRangeAttributeLastPrefetchLocationId;
            *(int*)data = id ? l.id : location_device(l);
            return cudaSuccess;
        }
        default:
            return cudaErrorInvalidValue;
    }
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
    a = Allocation{(uintptr_t)symbol, std::max(a.size, bytes), 0, MemoryKind::Device, 0};
}

bool is_device_pointer(const void* ptr) { return is_device(ptr, 0); }

size_t default_memory_limit() {
    size_t available = machine_memory().available;
    return available > 2 * headroom_bytes() ? available - headroom_bytes() : available / 2;
}

void free_all_device_memory(int device) {
    ApiLock lock;
    MemoryState& m = memory();
    for (auto it = m.allocations.begin(); it != m.allocations.end();) {
        if (it->second.kind == MemoryKind::Device && it->second.device == device) {
            unmap_memory(it->second);
            forget_pool_allocation((void*)it->first);
            it = m.allocations.erase(it);
        } else {
            ++it;
        }
    }
    m.used[device] = 0;
}

cudaError_t allocate_device(void** ptr, size_t size) {
    return allocate(ptr, size, MemoryKind::Device, 0);
}

cudaError_t free_device_now(void* ptr) {
    Allocation a;
    if (!take_allocation(ptr, {MemoryKind::Device}, &a)) return cudaErrorInvalidValue;
    unmap_memory(a);
    return cudaSuccess;
}

cudaError_t memcpy_node_op(const cudaMemcpy3DParms* p, StreamOp* op) {
    void* dst;
    const void* src;
    Region r;
    cudaError_t err = region_3d(p, &dst, &src, &r);
    if (err == cudaSuccess) err = check_copy(dst, src, r, p->kind);
    if (err == cudaSuccess) *op = copy_op(dst, src, r, "memcpy node");
    return err;
}

cudaError_t memcpy_1d_node_op(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                              StreamOp* op) {
    cudaError_t err = check_copy(dst, src, linear(count), kind);
    if (err == cudaSuccess) *op = copy_op(dst, src, linear(count), "memcpy node");
    return err;
}

cudaError_t memset_node_op(const cudaMemsetParams* p, StreamOp* op) {
    if (!p) return cudaErrorInvalidValue;
    size_t row = p->width * p->elementSize;
    if (p->height > 1 && !valid_pitch(p->pitch, row)) return cudaErrorInvalidValue;
    Region r{row, p->height, 1, p->pitch, p->pitch * p->height, 0, 0};
    *op = StreamOp{"memset node", nullptr, nullptr};
    op->node_type = cudaGraphNodeTypeMemset;
    return set_op(p->dst, p->value, p->elementSize, r, "memset node", op);
}

}  // namespace cucc

using namespace cucc;

extern "C" {

cudaError_t cudaMalloc(void** dev_ptr, size_t size) {
    return api_return(allocate(dev_ptr, size, MemoryKind::Device, 0));
}

cudaError_t cudaFree(void* dev_ptr) {
    return api_return(release(dev_ptr, {MemoryKind::Device, MemoryKind::Managed}));
}

// Rows of `width` bytes, each starting kPitchAlignment bytes after the previous one's start.
cudaError_t cudaMallocPitch(void** dev_ptr, size_t* pitch, size_t width, size_t height) {
    if (!dev_ptr || !pitch) return api_return(cudaErrorInvalidValue);
    size_t p = (width + kPitchAlignment - 1) / kPitchAlignment * kPitchAlignment;
    if (p < width || (height > 0 && p * height / height != p))
        return api_return(cudaErrorMemoryAllocation);
    cudaError_t err = allocate(dev_ptr, p * height, MemoryKind::Device, 0);
    if (err == cudaSuccess) *pitch = p;
    return api_return(err);
}

cudaError_t cudaMalloc3D(cudaPitchedPtr* pitched, cudaExtent extent) {
    if (!pitched) return api_return(cudaErrorInvalidValue);
    size_t pitch = 0;
    void* p = nullptr;
    cudaError_t err = cudaMallocPitch(&p, &pitch, extent.width, extent.height * extent.depth);
    if (err == cudaSuccess) *pitched = make_cudaPitchedPtr(p, pitch, extent.width, extent.height);
    return err;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
    return api_return(allocate(ptr, size, MemoryKind::Pinned, cudaHostAllocDefault));
}

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
    if (flags &
        ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined))
        return api_return(cudaErrorInvalidValue);
    return api_return(allocate(ptr, size, MemoryKind::Pinned, flags));
}

cudaError_t cudaFreeHost(void* ptr) { return api_return(release(ptr, {MemoryKind::Pinned})); }

// Managed memory is host memory here, which every device and the host reach alike; it does not
// count against a device's limit (on a GPU it may exceed device memory and migrate).
cudaError_t cudaMallocManaged(void** dev_ptr, size_t size, unsigned int flags) {
    if (!dev_ptr || size == 0 || (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost))
        return api_return(cudaErrorInvalidValue);
    return api_return(allocate(dev_ptr, size, MemoryKind::Managed, flags));
}

// Page-locks [ptr, ptr+size) of the caller's memory: asynchronous copies from and to it become
// truly asynchronous, and its device pointer is its own address.
cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
    unsigned known = cudaHostRegisterPortable | cudaHostRegisterMapped | cudaHostRegisterIoMemory |
                     cudaHostRegisterReadOnly;
    if (!ptr || size == 0 || (flags & ~known)) return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    MemoryState& m = memory();
    uintptr_t begin = (uintptr_t)ptr;
    auto next = m.allocations.lower_bound(begin);
    bool overlaps_next = next != m.allocations.end() && next->first < begin + size;
    bool overlaps_prev = next != m.allocations.begin() &&
                         std::prev(next)->second.begin + std::prev(next)->second.size > begin;
    if (overlaps_next || overlaps_prev) return api_return(cudaErrorHostMemoryAlreadyRegistered);
    m.allocations[begin] = Allocation{begin, size, current_device(), MemoryKind::Registered, flags};
    return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* ptr) {
    Allocation a;
    if (!ptr || !take_allocation(ptr, {MemoryKind::Registered}, &a))
        return api_return(cudaErrorHostMemoryNotRegistered);
    return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void** dev_ptr, void* host_ptr, unsigned int flags) {
    if (!dev_ptr || flags != 0) return api_return(cudaErrorInvalidValue);
    Allocation a;
    if (!find_allocation(host_ptr, 0, &a) ||
        (a.kind != MemoryKind::Pinned && a.kind != MemoryKind::Registered))
        return api_return(cudaErrorInvalidValue);
    *dev_ptr = host_ptr;
    return cudaSuccess;
}

cudaError_t cudaHostGetFlags(unsigned int* flags, void* host_ptr) {
    if (!flags) return api_return(cudaErrorInvalidValue);
    Allocation a;
    if (!find_allocation(host_ptr, 0, &a) || a.kind != MemoryKind::Pinned)
        return api_return(cudaErrorInvalidValue);
    *flags = a.flags;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    if (!free_bytes || !total_bytes) return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    *total_bytes = config().mem_limit;
    *free_bytes = config().mem_limit - memory().used[current_device()];
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
    return api_return(copy(dst, src, linear(count), kind, cudaStreamLegacy, true));
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
    return api_return(copy(dst, src, linear(count), kind, stream, false));
}

cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                         size_t height, cudaMemcpyKind kind) {
    return api_return(
        copy_2d(dst, dpitch, src, spitch, width, height, kind, cudaStreamLegacy, true));
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream) {
    return api_return(copy_2d(dst, dpitch, src, spitch, width, height, kind, stream, false));
}

cudaError_t cudaMemcpy3D(const cudaMemcpy3DParms* p) {
    return api_return(copy_3d(p, cudaStreamLegacy, true));
}

cudaError_t cudaMemcpy3DAsync(const cudaMemcpy3DParms* p, cudaStream_t stream) {
    return api_return(copy_3d(p, stream, false));
}

static cudaError_t check_peers(int dst_device, int src_device) {
    int n = config().devices;
    return dst_device < 0 || dst_device >= n || src_device < 0 || src_device >= n
               ? cudaErrorInvalidDevice
               : cudaSuccess;
}

cudaError_t cudaMemcpyPeer(void* dst, int dst_device, const void* src, int src_device,
                           size_t count) {
    if (cudaError_t err = check_peers(dst_device, src_device)) return api_return(err);
    return api_return(
        copy(dst, src, linear(count), cudaMemcpyDeviceToDevice, cudaStreamLegacy, true));
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                size_t count, cudaStream_t stream) {
    if (cudaError_t err = check_peers(dst_device, src_device)) return api_return(err);
    return api_return(copy(dst, src, linear(count), cudaMemcpyDeviceToDevice, stream, false));
}

cudaError_t cudaMemset(void* dst, int value, size_t count) {
    return api_return(set(dst, value, linear(count), cudaStreamLegacy, true));
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t count, cudaStream_t stream) {
    return api_return(set(dst, value, linear(count), stream, false));
}

cudaError_t cudaMemset2D(void* dst, size_t pitch, int value, size_t width, size_t height) {
    return api_return(set_3d(make_cudaPitchedPtr(dst, pitch, width, height), value,
                             make_cudaExtent(width, height, 1), cudaStreamLegacy, true));
}

cudaError_t cudaMemset2DAsync(void* dst, size_t pitch, int value, size_t width, size_t height,
                              cudaStream_t stream) {
    return api_return(set_3d(make_cudaPitchedPtr(dst, pitch, width, height), value,
                             make_cudaExtent(width, height, 1), stream, false));
}

cudaError_t cudaMemset3D(cudaPitchedPtr p, int value, cudaExtent extent) {
    return api_return(set_3d(p, value, extent, cudaStreamLegacy, true));
}

cudaError_t cudaMemset3DAsync(cudaPitchedPtr p, int value, cudaExtent extent, cudaStream_t stream) {
    return api_return(set_3d(p, value, extent, stream, false));
}

// Hints about managed memory. They change where a GPU keeps pages, never what a program
// computes, so after the checks CUDA documents they do nothing here; a prefetch is ordered on
// its stream like other work.
cudaError_t cudaMemAdvise(const void* dev_ptr, size_t count, cudaMemoryAdvise advice,
                          cudaMemLocation location) {
    if (advice < cudaMemAdviseSetReadMostly || advice > cudaMemAdviseUnsetAccessedBy)
        return api_return(cudaErrorInvalidValue);
    if (!is_managed(dev_ptr, count)) return api_return(cudaErrorInvalidValue);
    bool needs_location = advice == cudaMemAdviseSetPreferredLocation ||
                          advice == cudaMemAdviseSetAccessedBy ||
                          advice == cudaMemAdviseUnsetAccessedBy;
    if (needs_location && !valid_location(location))
        return api_return(location.type == cudaMemLocationTypeDevice ? cudaErrorInvalidDevice
                                                                     : cudaErrorInvalidValue);
    // Accessed-by names a processor that maps the range: a device (the host always can).
    bool accessed_by =
        advice == cudaMemAdviseSetAccessedBy || advice == cudaMemAdviseUnsetAccessedBy;
    if (accessed_by && location.type != cudaMemLocationTypeDevice) return cudaSuccess;
    cudaMemRangeAttribute what =
        advice <= cudaMemAdviseUnsetReadMostly          ? cudaMemRangeAttributeReadMostly
        : advice <= cudaMemAdviseUnsetPreferredLocation ? cudaMemRangeAttributePreferredLocation
                                                        : cudaMemRangeAttributeAccessedBy;
    bool set = advice == cudaMemAdviseSetReadMostly ||
               advice == cudaMemAdviseSetPreferredLocation || advice == cudaMemAdviseSetAccessedBy;
    ApiLock lock;
    uintptr_t begin = (uintptr_t)dev_ptr;
    add_hint(RangeHint{begin, begin + count, what, set, location});
    return cudaSuccess;
}

// The prefetch moves nothing (all memory is host memory); its location is recorded for
// cudaMemRangeGetAttribute, as CUDA records the requested location at the call.
cudaError_t cudaMemPrefetchAsync(const void* dev_ptr, size_t count, cudaMemLocation location,
                                 unsigned int flags, cudaStream_t stream) {
    if (flags != 0 || !is_managed(dev_ptr, count)) return api_return(cudaErrorInvalidValue);
    if (!valid_location(location))
        return api_return(location.type == cudaMemLocationTypeDevice ? cudaErrorInvalidDevice
                                                                     : cudaErrorInvalidValue);
    StreamOp op{"cudaMemPrefetchAsync", nullptr, nullptr};
    op.node_type = cudaGraphNodeTypeEmpty;
    cudaError_t err = stream_enqueue(stream, std::move(op));
    if (err == cudaSuccess) {
        ApiLock lock;
        uintptr_t begin = (uintptr_t)dev_ptr;
        add_hint(RangeHint{begin, begin + count, cudaMemRangeAttributeLastPrefetchLocation, true,
                           location});
    }
    return api_return(err);
}

cudaError_t cudaMemRangeGetAttribute(void* data, size_t data_size, cudaMemRangeAttribute attribute,
                                     const void* dev_ptr, size_t count) {
    return api_return(range_attribute(data, data_size, attribute, dev_ptr, count));
}

cudaError_t cudaMemRangeGetAttributes(void** data, size_t* data_sizes,
                                      cudaMemRangeAttribute* attributes, size_t num_attributes,
                                      const void* dev_ptr, size_t count) {
    if (num_attributes > 0 && (!data || !data_sizes || !attributes))
        return api_return(cudaErrorInvalidValue);
    for (size_t i = 0; i < num_attributes; i++)
        if (cudaError_t err =
                range_attribute(data[i], data_sizes[i], attributes[i], dev_ptr, count))
            return api_return(err);
    return cudaSuccess;
}

// length 0 means the whole allocation, which is also the only other length CUDA accepts for
// memory from cudaMallocManaged.
cudaError_t cudaStreamAttachMemAsync(cudaStream_t stream, void* dev_ptr, size_t length,
                                     unsigned int flags) {
    Allocation a;
    if (!find_allocation(dev_ptr, 0, &a) || a.kind != MemoryKind::Managed ||
        a.begin != (uintptr_t)dev_ptr || (length != 0 && length != a.size) ||
        (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost &&
         flags != cudaMemAttachSingle))
        return api_return(cudaErrorInvalidValue);
    StreamOp op{"cudaStreamAttachMemAsync", nullptr, nullptr};
    op.node_type = cudaGraphNodeTypeEmpty;
    return api_return(stream_enqueue(stream, std::move(op)));
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

// A copy of count bytes at offset into the symbol; dst or src (the other side) is its address.
// The C++ overloads register the variable first (cucc/runtime_cxx.h), so its size is known and a
// copy past its end fails, as in CUDA.
static cudaError_t symbol_copy(const void* symbol, size_t offset, void* dst, const void* src,
                               size_t count, cudaMemcpyKind kind, cudaMemcpyKind symbol_side_kind,
                               cudaStream_t stream, bool synchronous) {
    if (!dst || !src) return cudaErrorInvalidSymbol;
    if (kind != symbol_side_kind && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
        return cudaErrorInvalidMemcpyDirection;
    {
        ApiLock lock;
        auto it = memory().symbols.find((uintptr_t)symbol);
        if (it != memory().symbols.end() &&
            (offset > it->second.size || count > it->second.size - offset))
            return cudaErrorInvalidValue;
    }
    return copy(dst, src, linear(count), cudaMemcpyDefault, stream, synchronous);
}

cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                               cudaMemcpyKind kind) {
    return api_return(symbol_copy(symbol, offset, (char*)symbol + offset, src, count, kind,
                                  cudaMemcpyHostToDevice, cudaStreamLegacy, true));
}

cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t count,
                                    size_t offset, cudaMemcpyKind kind, cudaStream_t stream) {
    return api_return(symbol_copy(symbol, offset, (char*)symbol + offset, src, count, kind,
                                  cudaMemcpyHostToDevice, stream, false));
}

cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                                 cudaMemcpyKind kind) {
    return api_return(symbol_copy(symbol, offset, dst, (const char*)symbol + offset, count, kind,
                                  cudaMemcpyDeviceToHost, cudaStreamLegacy, true));
}

cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t count, size_t offset,
                                      cudaMemcpyKind kind, cudaStream_t stream) {
    return api_return(symbol_copy(symbol, offset, dst, (const char*)symbol + offset, count, kind,
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
    switch (a.kind) {
        case MemoryKind::Device:
            attributes->type = cudaMemoryTypeDevice;
            break;
        case MemoryKind::Managed:
            attributes->type = cudaMemoryTypeManaged;
            break;
        default:
            attributes->type = cudaMemoryTypeHost;
            break;
    }
    attributes->device = a.device;
    attributes->devicePointer = (void*)ptr;
    attributes->hostPointer = a.kind == MemoryKind::Device ? nullptr : (void*)ptr;
    return cudaSuccess;
}

}  // extern "C"
