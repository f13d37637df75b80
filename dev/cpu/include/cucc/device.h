// cucc/device.h: the device-side functions of CUDA, for kernels compiled by dev/cpu/cucc.
//
// Kernels run as ordinary C++ on fibers of the CPU runtime (cucc/runtime.h), so most of CUDA's
// device API is plain host code here:
//   - block and warp synchronization, shuffles and votes go through the runtime's barrier and
//     warp_exchange, with the exact lane arithmetic of the PTX shfl.sync instruction;
//   - atomics are real atomics (__atomic builtins), because the blocks of a kernel run on
//     several OS threads at once; float types use a compare-and-swap loop;
//   - device math maps to the C library, rounding intrinsics (__fadd_rn ...) to plain IEEE
//     operations, which round to nearest even like the GPU;
//   - cache-hinted loads and stores (__ldg, __stcs ...) are plain loads and stores.
// The bf16/fp16 device functions live in our cuda_bf16.h / cuda_fp16.h, cooperative groups in
// our cooperative_groups.h, both next to this folder.
#pragma once

#include <cucc/runtime.h>

#include <math.h>
#include <cucc/libm.h>
#include <stdio.h>
#include <stdlib.h>
#include <assert.h>
#include <climits>
#include <cstring>
#include <limits>
#include <type_traits>
#include <sched.h>

namespace cucc {

// The kernel's address as cucc passes it to launch_kernel (a function name or a pointer).
template <class F>
const void* kernel_address(F* f) {
    return reinterpret_cast<const void*>(f);
}

// A literal 0 or NULL kernel argument: cucc passes this instead, because once forwarded through
// the launch, a 0 is an int that no longer converts to the kernel's pointer parameter.
struct null_argument {
    template <class T>
    constexpr operator T() const {
        return static_cast<T>(0);
    }
};

// `extern __shared__ T name[];` at namespace scope: an object that converts to the block's
// dynamic shared memory wherever the array would (name[i], name + i, (U*)name).
template <class T>
struct dynamic_shared_array {
    operator T*() const { return static_cast<T*>(dynamic_smem()); }
    template <class U>
    explicit operator U*() const {
        return static_cast<U*>(dynamic_smem());
    }
};

// ---------------------------------------------------------------------------------------------
// Warp shuffles. The source lane is computed as PTX's shfl.sync does: the warp is split into
// segments of `width` lanes (segmask = 32 - width selects the segment's base bits); a source
// outside the caller's segment (up/down/xor) gives the caller its own value.
enum class Shuffle { index, up, down, bfly };

inline int shuffle_source(int lane, Shuffle mode, int b, int width) {
    int segmask = (32 - width) & 31;
    int clamp = mode == Shuffle::up ? 0 : 31;
    int min_lane = lane & segmask;
    int max_lane = min_lane | (clamp & ~segmask);
    int j;
    bool in_range;
    switch (mode) {
        case Shuffle::index:
            j = min_lane | (b & ~segmask & 31);
            in_range = j <= max_lane;
            break;
        case Shuffle::up:
            j = lane - b;
            in_range = j >= max_lane;
            break;
        case Shuffle::down:
            j = lane + b;
            in_range = j <= max_lane;
            break;
        default:
            j = lane ^ b;
            in_range = j <= max_lane;
            break;
    }
    return in_range ? j : lane;
}

// Types a shuffle may move as bytes: the trivially copyable ones, and the toolkit's __half2 and
// __nv_bfloat162, plain pairs of 16-bit values whose user-written copy constructor copies
// exactly that (our cuda_fp16.h / cuda_bf16.h specialize this).
template <class T>
struct shuffleable : std::is_trivially_copyable<T> {};

// A source lane that did not take part (it exited) has no value to give: CUDA leaves the result
// undefined; the caller gets its own value. Always inlined, as are the __shfl*_sync below: each
// call level between a kernel and the fiber switch costs (see switch_to in runtime/block.cpp).
template <class T>
__attribute__((always_inline)) inline T shuffle(unsigned mask, T var, Shuffle mode, int b,
                                                int width) {
    static_assert(shuffleable<T>::value, "a shuffled type must be trivially copyable");
    int src = shuffle_source(lane_id(), mode, b, width);
    unsigned arrived;
    const char* slots = static_cast<const char*>(warp_exchange(mask, &var, sizeof(T), &arrived));
    if (!(arrived >> src & 1u)) return var;
    T out;
    std::memcpy(&out, slots + src * sizeof(T), sizeof(T));
    return out;
}

// The butterfly reduction `for (int o = 16; o > 0; o /= 2) v = op(v, __shfl_xor_sync(mask, v, o));`
// as one warp call: cucc rewrites such a loop into warp_butterfly (dev/cpu/cucc, BUTTERFLY_LOOP),
// with one of the operations below. Each lane's result is the one the five shuffles give,
// operation for operation: at the step with offset o, lane l's value becomes op(its value, lane
// l ^ o's value), or op(its value, its value) where lane l ^ o took no part (what the shuffle
// gives then). The lanes that take part are the same in all five shuffles (a lane inside the
// loop cannot exit between them), so one exchange has them all; the warp's last lane to arrive
// computes the five steps for every lane (five operations per lane) where the loop would switch
// between the lanes five times. The operations are types, so that the combining loop inlines
// them, and the combine function (one per list of value types and operations) is what matches
// calls.
#define CUCC_BUTTERFLY_OP(NAME, BODY)  \
    struct NAME {                      \
        template <class T>             \
        T operator()(T a, T b) const { \
            BODY;                      \
        }                              \
    };
// `v OP= shuffle`: the compound assignment, as the loop does it.
CUCC_BUTTERFLY_OP(butterfly_add, a += b; return a)
CUCC_BUTTERFLY_OP(butterfly_sub, a -= b; return a)
CUCC_BUTTERFLY_OP(butterfly_mul, a *= b; return a)
CUCC_BUTTERFLY_OP(butterfly_and, a &= b; return a)
CUCC_BUTTERFLY_OP(butterfly_or, a |= b; return a)
CUCC_BUTTERFLY_OP(butterfly_xor, a ^= b; return a)
// `v = F(v, shuffle)`, the result converted back to v's type as the assignment does.
CUCC_BUTTERFLY_OP(butterfly_fmaxf, return (T)::fmaxf(a, b))
CUCC_BUTTERFLY_OP(butterfly_fminf, return (T)::fminf(a, b))
CUCC_BUTTERFLY_OP(butterfly_fmax, return (T)::fmax(a, b))
CUCC_BUTTERFLY_OP(butterfly_fmin, return (T)::fmin(a, b))
#undef CUCC_BUTTERFLY_OP

// The five steps on one value of each lane that took part: lane l's at slots + l * stride +
// offset (one value per slot, or one field of a slot that holds several).
template <class T, class Op>
void butterfly_steps(unsigned char* slots, size_t stride, size_t offset, unsigned arrived) {
    T value[32], next[32];
    for (int lane = 0; lane < 32; lane++)
        if (arrived >> lane & 1u)
            std::memcpy(&value[lane], slots + lane * stride + offset, sizeof(T));
    for (int o = 16; o > 0; o /= 2) {
        for (int lane = 0; lane < 32; lane++)
            if (arrived >> lane & 1u)
                next[lane] =
                    Op()(value[lane], arrived >> (lane ^ o) & 1u ? value[lane ^ o] : value[lane]);
        for (int lane = 0; lane < 32; lane++)
            if (arrived >> lane & 1u) value[lane] = next[lane];
    }
    for (int lane = 0; lane < 32; lane++)
        if (arrived >> lane & 1u)
            std::memcpy(slots + lane * stride + offset, &value[lane], sizeof(T));
}

// The butterflies of one loop (one or more: `{ a += __shfl_xor_sync(m, a, o); b += ...; }`),
// variable i reduced by operation i: one exchange of a slot holding every variable (at most 32
// bytes), each field then taken through its own five steps, as the loop's shuffles would (a fold
// reads only its own variable, so the order of the folds inside a step changes nothing). C++14: the
// runtime's headers compile under -std=c++14 (the pack expansions below stand for C++17 folds).
constexpr size_t total_size() { return 0; }
template <class... Sizes>
constexpr size_t total_size(size_t first, Sizes... rest) {
    return first + total_size(rest...);
}

constexpr bool all_true() { return true; }
template <class... Bools>
constexpr bool all_true(bool first, Bools... rest) {
    return first && all_true(rest...);
}

template <class Ops, class Values>
struct Butterflies;
template <class... Ops, class... T>
struct Butterflies<void(Ops...), void(T...)> {
    static constexpr size_t bytes = total_size(sizeof(T)...);
    static void combine(void* slots, unsigned arrived, const void*) {
        size_t offset = 0;
        int steps[] = {
            (butterfly_steps<T, Ops>(static_cast<unsigned char*>(slots), bytes, offset, arrived),
             offset += sizeof(T), 0)...};
        (void)steps;
    }
};

template <class... Ops, class... T>
__attribute__((always_inline)) inline void warp_butterflies(unsigned mask, T&... vars) {
    static_assert(sizeof...(Ops) == sizeof...(T), "one operation per variable");
    static_assert(all_true(shuffleable<T>::value...), "a shuffled type must be trivially copyable");
    typedef Butterflies<void(Ops...), void(T...)> B;
    static_assert(B::bytes <= 32, "a warp exchange carries at most 32 bytes per lane");
    unsigned char mine[B::bytes];
    size_t offset = 0;
    int put[] = {(std::memcpy(mine + offset, &vars, sizeof(T)), offset += sizeof(T), 0)...};
    (void)put;
    const unsigned char* slot = static_cast<const unsigned char*>(warp_exchange(
                                    mask, mine, B::bytes, nullptr, &B::combine, nullptr)) +
                                lane_id() * B::bytes;
    offset = 0;
    int got[] = {(std::memcpy(&vars, slot + offset, sizeof(T)), offset += sizeof(T), 0)...};
    (void)got;
}

// One butterfly (`v op= __shfl_xor_sync(mask, v, o)` over o = 16..1): a slot of one value.
template <class Op, class T>
__attribute__((always_inline)) inline T warp_butterfly(unsigned mask, T var) {
    warp_butterflies<Op>(mask, var);
    return var;
}

// Every non-exited lane of mask deposits one value; returns a pointer to the 32 slots and, in
// *arrived, the lanes that took part (see runtime.h).
template <class T>
const T* warp_values(unsigned mask, T value, unsigned* arrived) {
    return static_cast<const T*>(warp_exchange(mask, &value, sizeof(T), arrived));
}

// ---------------------------------------------------------------------------------------------
// Atomics on plain memory. A GPU atomic is relaxed; __threadfence orders around it. Sequential
// consistency costs nothing more on x86 and keeps the compiler from moving accesses across.
template <class T>
using bits_of =
    std::conditional_t<sizeof(T) == 2, unsigned short,
                       std::conditional_t<sizeof(T) == 4, unsigned int, unsigned long long>>;

// Atomically replaces *address with op(*address) and returns the old value (CAS loop on the bits).
template <class T, class Op>
T atomic_update(T* address, Op op) {
    static_assert(sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "atomic on an odd size");
    using Bits = bits_of<T>;
    Bits* p = reinterpret_cast<Bits*>(address);
    Bits expected = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    for (;;) {
        T old;
        std::memcpy(&old, &expected, sizeof(T));
        T updated = op(old);
        Bits desired;
        std::memcpy(&desired, &updated, sizeof(T));
        if (__atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST))
            return old;
    }
}

// Float-to-integer conversion as the GPU's cvt instruction does it: rounded as asked, NaN
// gives 0, out-of-range values saturate to the integer type's limits.
template <class I>
I convert_saturate(double rounded) {
    if (rounded != rounded) return 0;
    if (rounded <= (double)std::numeric_limits<I>::min()) return std::numeric_limits<I>::min();
    if (rounded >= (double)std::numeric_limits<I>::max()) return std::numeric_limits<I>::max();
    return (I)rounded;
}

}  // namespace cucc

// ---------------------------------------------------------------------------------------------
// Synchronization
// The default arguments are evaluated at the call site, so the runtime learns which barrier a
// thread waits at (threads waiting at different barriers are reported as a deadlock).
inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    cucc::syncthreads(file, line);
}
inline int __syncthreads_count(int predicate, const char* file = __builtin_FILE(),
                               int line = __builtin_LINE()) {
    return cucc::syncthreads_count(predicate, file, line);
}
inline int __syncthreads_and(int predicate, const char* file = __builtin_FILE(),
                             int line = __builtin_LINE()) {
    return cucc::syncthreads_and(predicate, file, line);
}
inline int __syncthreads_or(int predicate, const char* file = __builtin_FILE(),
                            int line = __builtin_LINE()) {
    return cucc::syncthreads_or(predicate, file, line);
}
inline void __syncwarp(unsigned mask = 0xffffffffu) { cucc::syncwarp(mask); }
// The call site tells apart the lanes of the two sides of a divergent branch (see runtime.h).
inline unsigned __activemask(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return cucc::active_mask(file, line);
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// ---------------------------------------------------------------------------------------------
// Warp shuffles and votes, for every shuffleable type (CUDA's overloads are a subset).
template <class T>
__attribute__((always_inline)) inline T __shfl_sync(unsigned mask, T var, int src_lane,
                                                    int width = warpSize) {
    return cucc::shuffle(mask, var, cucc::Shuffle::index, src_lane, width);
}
template <class T>
__attribute__((always_inline)) inline T __shfl_up_sync(unsigned mask, T var, unsigned delta,
                                                       int width = warpSize) {
    return cucc::shuffle(mask, var, cucc::Shuffle::up, (int)delta, width);
}
template <class T>
__attribute__((always_inline)) inline T __shfl_down_sync(unsigned mask, T var, unsigned delta,
                                                         int width = warpSize) {
    return cucc::shuffle(mask, var, cucc::Shuffle::down, (int)delta, width);
}
template <class T>
__attribute__((always_inline)) inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask,
                                                        int width = warpSize) {
    return cucc::shuffle(mask, var, cucc::Shuffle::bfly, lane_mask, width);
}

// Votes count the non-exited lanes of mask (an exited lane's bit is 0 in a ballot).
inline unsigned __ballot_sync(unsigned mask, int predicate) {
    unsigned arrived;
    const int* p = cucc::warp_values(mask, predicate != 0 ? 1 : 0, &arrived);
    unsigned ballot = 0;
    for (int lane = 0; lane < 32; lane++)
        if ((arrived >> lane & 1u) && p[lane]) ballot |= 1u << lane;
    return ballot;
}
inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
inline int __all_sync(unsigned mask, int predicate) {
    unsigned arrived;
    const int* p = cucc::warp_values(mask, predicate != 0 ? 1 : 0, &arrived);
    for (int lane = 0; lane < 32; lane++)
        if ((arrived >> lane & 1u) && !p[lane]) return 0;
    return 1;
}
// Lanes of mask holding the same value as the caller.
template <class T>
unsigned __match_any_sync(unsigned mask, T value) {
    unsigned arrived;
    const T* v = cucc::warp_values(mask, value, &arrived);
    unsigned same = 0;
    for (int lane = 0; lane < 32; lane++)
        if ((arrived >> lane & 1u) && std::memcmp(&v[lane], &value, sizeof(T)) == 0)
            same |= 1u << lane;
    return same;
}
template <class T>
unsigned __match_all_sync(unsigned mask, T value, int* pred) {
    unsigned arrived;
    const T* v = cucc::warp_values(mask, value, &arrived);
    bool all = true;
    for (int lane = 0; lane < 32; lane++)
        if ((arrived >> lane & 1u) && std::memcmp(&v[lane], &value, sizeof(T)) != 0) all = false;
    *pred = all;
    return all ? mask : 0u;
}

// Warp reductions over the lanes of mask (sm_80 __reduce_*_sync).
namespace cucc {
template <class T, class Op>
T warp_reduce(unsigned mask, T value, Op op) {
    unsigned arrived;
    const T* v = cucc::warp_values(mask, value, &arrived);
    bool first = true;
    T acc = value;
    for (int lane = 0; lane < 32; lane++) {
        if (!(arrived >> lane & 1u)) continue;
        acc = first ? v[lane] : op(acc, v[lane]);
        first = false;
    }
    return acc;
}
}  // namespace cucc
inline unsigned __reduce_add_sync(unsigned mask, unsigned v) {
    return cucc::warp_reduce(mask, v, [](unsigned a, unsigned b) { return a + b; });
}
inline int __reduce_add_sync(unsigned mask, int v) {
    return (int)__reduce_add_sync(mask, (unsigned)v);
}
inline unsigned __reduce_min_sync(unsigned mask, unsigned v) {
    return cucc::warp_reduce(mask, v, [](unsigned a, unsigned b) { return a < b ? a : b; });
}
inline int __reduce_min_sync(unsigned mask, int v) {
    return cucc::warp_reduce(mask, v, [](int a, int b) { return a < b ? a : b; });
}
inline unsigned __reduce_max_sync(unsigned mask, unsigned v) {
    return cucc::warp_reduce(mask, v, [](unsigned a, unsigned b) { return a > b ? a : b; });
}
inline int __reduce_max_sync(unsigned mask, int v) {
    return cucc::warp_reduce(mask, v, [](int a, int b) { return a > b ? a : b; });
}
inline unsigned __reduce_and_sync(unsigned mask, unsigned v) {
    return cucc::warp_reduce(mask, v, [](unsigned a, unsigned b) { return a & b; });
}
inline unsigned __reduce_or_sync(unsigned mask, unsigned v) {
    return cucc::warp_reduce(mask, v, [](unsigned a, unsigned b) { return a | b; });
}
inline unsigned __reduce_xor_sync(unsigned mask, unsigned v) {
    return cucc::warp_reduce(mask, v, [](unsigned a, unsigned b) { return a ^ b; });
}

// ---------------------------------------------------------------------------------------------
// Atomics. Each returns the value before the update, as CUDA's do.
inline int atomicAdd(int* a, int v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned* a, unsigned v) {
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) {
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
inline float atomicAdd(float* a, float v) {
    return cucc::atomic_update(a, [v](float old) { return old + v; });
}
inline double atomicAdd(double* a, double v) {
    return cucc::atomic_update(a, [v](double old) { return old + v; });
}
// sm_90 vector atomics: each element is atomic on its own.
inline float2 atomicAdd(float2* a, float2 v) {
    return make_float2(atomicAdd(&a->x, v.x), atomicAdd(&a->y, v.y));
}
inline float4 atomicAdd(float4* a, float4 v) {
    return make_float4(atomicAdd(&a->x, v.x), atomicAdd(&a->y, v.y), atomicAdd(&a->z, v.z),
                       atomicAdd(&a->w, v.w));
}
inline int atomicSub(int* a, int v) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicSub(unsigned* a, unsigned v) {
    return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);
}

namespace cucc {
template <class T>
T atomic_max(T* a, T v) {
    return cucc::atomic_update(a, [v](T old) { return old < v ? v : old; });
}
template <class T>
T atomic_min(T* a, T v) {
    return cucc::atomic_update(a, [v](T old) { return v < old ? v : old; });
}
}  // namespace cucc
inline int atomicMax(int* a, int v) { return cucc::atomic_max(a, v); }
inline unsigned atomicMax(unsigned* a, unsigned v) { return cucc::atomic_max(a, v); }
inline long long atomicMax(long long* a, long long v) { return cucc::atomic_max(a, v); }
inline unsigned long long atomicMax(unsigned long long* a, unsigned long long v) {
    return cucc::atomic_max(a, v);
}
inline int atomicMin(int* a, int v) { return cucc::atomic_min(a, v); }
inline unsigned atomicMin(unsigned* a, unsigned v) { return cucc::atomic_min(a, v); }
inline long long atomicMin(long long* a, long long v) { return cucc::atomic_min(a, v); }
inline unsigned long long atomicMin(unsigned long long* a, unsigned long long v) {
    return cucc::atomic_min(a, v);
}

// ((old >= limit) ? 0 : old + 1) and ((old == 0 || old > limit) ? limit : old - 1).
inline unsigned atomicInc(unsigned* a, unsigned limit) {
    return cucc::atomic_update(a, [limit](unsigned old) { return old >= limit ? 0u : old + 1u; });
}
inline unsigned atomicDec(unsigned* a, unsigned limit) {
    return cucc::atomic_update(
        a, [limit](unsigned old) { return (old == 0u || old > limit) ? limit : old - 1u; });
}

namespace cucc {
template <class T>
T atomic_cas(T* a, T compare, T value) {
    __atomic_compare_exchange_n(a, &compare, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return compare;  // on failure, compare_exchange stored the current value here
}
}  // namespace cucc
inline int atomicCAS(int* a, int c, int v) { return cucc::atomic_cas(a, c, v); }
inline unsigned atomicCAS(unsigned* a, unsigned c, unsigned v) { return cucc::atomic_cas(a, c, v); }
inline unsigned long long atomicCAS(unsigned long long* a, unsigned long long c,
                                    unsigned long long v) {
    return cucc::atomic_cas(a, c, v);
}
inline unsigned short atomicCAS(unsigned short* a, unsigned short c, unsigned short v) {
    return cucc::atomic_cas(a, c, v);
}

inline int atomicExch(int* a, int v) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicExch(unsigned* a, unsigned v) {
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicExch(unsigned long long* a, unsigned long long v) {
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);
}
inline float atomicExch(float* a, float v) {
    return cucc::atomic_update(a, [v](float) { return v; });
}

inline int atomicAnd(int* a, int v) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAnd(unsigned* a, unsigned v) {
    return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicAnd(unsigned long long* a, unsigned long long v) {
    return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);
}
inline int atomicOr(int* a, int v) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicOr(unsigned* a, unsigned v) {
    return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicOr(unsigned long long* a, unsigned long long v) {
    return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);
}
inline int atomicXor(int* a, int v) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicXor(unsigned* a, unsigned v) {
    return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicXor(unsigned long long* a, unsigned long long v) {
    return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);
}

// Block- and system-scoped forms (atomicAdd_block, atomicCAS_system, ...): every atomic here is
// already atomic system-wide, so each forwards to the unscoped one.
#define CUCC_SCOPED_ATOMIC(op, scope) \
    template <class T, class V>       \
    T op##scope(T* a, V v) {          \
        return op(a, v);              \
    }
#define CUCC_SCOPED_ATOMICS(op) CUCC_SCOPED_ATOMIC(op, _block) CUCC_SCOPED_ATOMIC(op, _system)
CUCC_SCOPED_ATOMICS(atomicAdd)
CUCC_SCOPED_ATOMICS(atomicSub)
CUCC_SCOPED_ATOMICS(atomicExch)
CUCC_SCOPED_ATOMICS(atomicMax)
CUCC_SCOPED_ATOMICS(atomicMin)
CUCC_SCOPED_ATOMICS(atomicInc)
CUCC_SCOPED_ATOMICS(atomicDec)
CUCC_SCOPED_ATOMICS(atomicAnd)
CUCC_SCOPED_ATOMICS(atomicOr)
CUCC_SCOPED_ATOMICS(atomicXor)
#undef CUCC_SCOPED_ATOMICS
#undef CUCC_SCOPED_ATOMIC
template <class T, class V>
T atomicCAS_block(T* a, V c, V v) {
    return atomicCAS(a, c, v);
}
template <class T, class V>
T atomicCAS_system(T* a, V c, V v) {
    return atomicCAS(a, c, v);
}

// ---------------------------------------------------------------------------------------------
// Reinterpreting bits
inline float __int_as_float(int x) {
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}
inline int __float_as_int(float x) {
    int i;
    std::memcpy(&i, &x, 4);
    return i;
}
inline float __uint_as_float(unsigned x) {
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}
inline unsigned __float_as_uint(float x) {
    unsigned u;
    std::memcpy(&u, &x, 4);
    return u;
}
inline double __longlong_as_double(long long x) {
    double d;
    std::memcpy(&d, &x, 8);
    return d;
}
inline long long __double_as_longlong(double x) {
    long long l;
    std::memcpy(&l, &x, 8);
    return l;
}
inline int __double2hiint(double x) { return (int)(__double_as_longlong(x) >> 32); }
inline int __double2loint(double x) { return (int)__double_as_longlong(x); }
inline double __hiloint2double(int hi, int lo) {
    return __longlong_as_double((long long)((unsigned long long)(unsigned)hi << 32 | (unsigned)lo));
}

// ---------------------------------------------------------------------------------------------
// Float math. The fast intrinsics (__expf ...) are the accurate functions here; the _rn
// operations are single IEEE operations, which round to nearest even.
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return exp10f(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline void __sincosf(float x, float* s, float* c) {
    *s = sinf(x);
    *c = cosf(x);
}
inline float __fdividef(float x, float y) { return x / y; }
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }  // NaN -> 0
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline double rcbrt(double x) { return 1.0 / cbrt(x); }
inline float sinpif(float x) { return sinf((float)M_PI * x); }
inline float cospif(float x) { return cosf((float)M_PI * x); }
inline void sincospif(float x, float* s, float* c) {
    *s = sinpif(x);
    *c = cospif(x);
}
inline float normcdff(float x) { return 0.5f * erfcf(-x * (float)M_SQRT1_2); }
inline double normcdf(double x) { return 0.5 * erfc(-x * M_SQRT1_2); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __frsqrt_rn(float a) { return 1.0f / sqrtf(a); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline double __drcp_rn(double a) { return 1.0 / a; }
inline double __dsqrt_rn(double a) { return sqrt(a); }

// min/max for any pair of arithmetic types, as CUDA's overload set behaves (mixed signed and
// unsigned compare as unsigned; floating point ignores a NaN operand like fminf/fmaxf).
template <class A, class B,
          class = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
std::common_type_t<A, B> min(A a, B b) {
    using C = std::common_type_t<A, B>;
    if constexpr (std::is_floating_point<C>::value) return fmin((C)a, (C)b);
    else return (C)a < (C)b ? (C)a : (C)b;
}
template <class A, class B,
          class = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
std::common_type_t<A, B> max(A a, B b) {
    using C = std::common_type_t<A, B>;
    if constexpr (std::is_floating_point<C>::value) return fmax((C)a, (C)b);
    else return (C)a < (C)b ? (C)b : (C)a;
}
inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned umax(unsigned a, unsigned b) { return a < b ? b : a; }
inline long long llmin(long long a, long long b) { return a < b ? a : b; }
inline long long llmax(long long a, long long b) { return a < b ? b : a; }
inline unsigned long long ullmin(unsigned long long a, unsigned long long b) {
    return a < b ? a : b;
}
inline unsigned long long ullmax(unsigned long long a, unsigned long long b) {
    return a < b ? b : a;
}

// Conversions with an explicit rounding: rn = to nearest even, rz = toward zero,
// rd = down, ru = up.
inline int __float2int_rn(float x) { return cucc::convert_saturate<int>(nearbyint(x)); }
inline int __float2int_rz(float x) { return cucc::convert_saturate<int>(trunc(x)); }
inline int __float2int_rd(float x) { return cucc::convert_saturate<int>(floor(x)); }
inline int __float2int_ru(float x) { return cucc::convert_saturate<int>(ceil(x)); }
inline unsigned __float2uint_rn(float x) { return cucc::convert_saturate<unsigned>(nearbyint(x)); }
inline unsigned __float2uint_rz(float x) { return cucc::convert_saturate<unsigned>(trunc(x)); }
inline unsigned __float2uint_rd(float x) { return cucc::convert_saturate<unsigned>(floor(x)); }
inline unsigned __float2uint_ru(float x) { return cucc::convert_saturate<unsigned>(ceil(x)); }
inline long long __float2ll_rn(float x) { return cucc::convert_saturate<long long>(nearbyint(x)); }
inline long long __float2ll_rz(float x) { return cucc::convert_saturate<long long>(trunc(x)); }
inline int __double2int_rn(double x) { return cucc::convert_saturate<int>(nearbyint(x)); }
inline int __double2int_rz(double x) { return cucc::convert_saturate<int>(trunc(x)); }
inline float __double2float_rn(double x) { return (float)x; }
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }
inline float __ll2float_rn(long long x) { return (float)x; }
inline double __int2double_rn(int x) { return (double)x; }

// ---------------------------------------------------------------------------------------------
// Integer intrinsics
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; i++) r |= (x >> i & 1u) << (31 - i);
    return r;
}
inline unsigned long long __brevll(unsigned long long x) {
    return (unsigned long long)__brev((unsigned)x) << 32 | __brev((unsigned)(x >> 32));
}
inline int __mul24(int x, int y) {
    return (int)((long long)(x << 8 >> 8) * (long long)(y << 8 >> 8));
}
inline unsigned __umul24(unsigned x, unsigned y) { return (x & 0xffffffu) * (y & 0xffffffu); }
inline int __mulhi(int x, int y) { return (int)((long long)x * y >> 32); }
inline unsigned __umulhi(unsigned x, unsigned y) {
    return (unsigned)((unsigned long long)x * y >> 32);
}
inline long long __mul64hi(long long x, long long y) { return (long long)((__int128)x * y >> 64); }
inline unsigned long long __umul64hi(unsigned long long x, unsigned long long y) {
    return (unsigned long long)((unsigned __int128)x * y >> 64);
}
inline unsigned __sad(int x, int y, unsigned z) {
    return z + (x > y ? (unsigned)x - (unsigned)y : (unsigned)y - (unsigned)x);
}
inline unsigned __usad(unsigned x, unsigned y, unsigned z) { return z + (x > y ? x - y : y - x); }
inline int __hadd(int x, int y) { return (int)(((long long)x + y) >> 1); }
inline int __rhadd(int x, int y) { return (int)(((long long)x + y + 1) >> 1); }
inline unsigned __uhadd(unsigned x, unsigned y) {
    return (unsigned)(((unsigned long long)x + y) >> 1);
}
inline unsigned __urhadd(unsigned x, unsigned y) {
    return (unsigned)(((unsigned long long)x + y + 1) >> 1);
}
// Byte i of the result is byte (s >> 4i) & 7 of the 8-byte value y:x.
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    unsigned long long v = (unsigned long long)y << 32 | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)(v >> (8 * (s >> (4 * i) & 7u)) & 0xffu) << (8 * i);
    return r;
}
// Funnel shifts of the 64-bit value hi:lo; the l/r forms wrap the shift mod 32, lc/rc clamp it.
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)(((unsigned long long)hi << 32 | lo) << (s & 31u) >> 32);
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)(((unsigned long long)hi << 32 | lo) << (s < 32u ? s : 32u) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)(((unsigned long long)hi << 32 | lo) >> (s & 31u));
}
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)(((unsigned long long)hi << 32 | lo) >> (s < 32u ? s : 32u));
}
// Dot product of four bytes (signed or unsigned) plus an accumulator.
inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (signed char)(a >> 8 * i) * (signed char)(b >> 8 * i);
    return c;
}
inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
    for (int i = 0; i < 4; i++) c += (a >> 8 * i & 0xffu) * (b >> 8 * i & 0xffu);
    return c;
}
// Dot product of the two 16-bit halves of a with two bytes of b (the low two: _lo, the high
// two: _hi), plus an accumulator.
inline int __dp2a_lo(int a, int b, int c) {
    for (int i = 0; i < 2; i++) c += (short)(a >> 16 * i) * (signed char)(b >> 8 * i);
    return c;
}
inline int __dp2a_hi(int a, int b, int c) {
    for (int i = 0; i < 2; i++) c += (short)(a >> 16 * i) * (signed char)(b >> (16 + 8 * i));
    return c;
}
inline unsigned __dp2a_lo(unsigned a, unsigned b, unsigned c) {
    for (int i = 0; i < 2; i++) c += (a >> 16 * i & 0xffffu) * (b >> 8 * i & 0xffu);
    return c;
}
inline unsigned __dp2a_hi(unsigned a, unsigned b, unsigned c) {
    for (int i = 0; i < 2; i++) c += (a >> 16 * i & 0xffffu) * (b >> (16 + 8 * i) & 0xffu);
    return c;
}

// SIMD intrinsics on the two halfwords (suffix 2) or four bytes (suffix 4) of a 32-bit word:
// each lane computed alone, in int, then wrapped, saturated or compared as the name says
// (ss: signed saturation, us: unsigned saturation; vcmp gives all ones per true lane, vset 1).
namespace cucc {
template <int Lanes>
struct simd_lanes {
    static constexpr int bits = 32 / Lanes;
    static constexpr unsigned mask = Lanes == 2 ? 0xffffu : 0xffu;
    static constexpr int smin = -(1 << (bits - 1)), smax = (1 << (bits - 1)) - 1;
    static int s(unsigned v, int i) {  // lane i, sign-extended
        int x = (int)(v >> bits * i & mask);
        return x > smax ? x - (int)mask - 1 : x;
    }
    static int u(unsigned v, int i) { return (int)(v >> bits * i & mask); }
    static int sat_s(int x) { return x < smin ? smin : x > smax ? smax : x; }
    static int sat_u(int x) { return x < 0 ? 0 : x > (int)mask ? (int)mask : x; }
    // f(lane of a, lane of b) for every lane, each result wrapped to the lane's width.
    template <class F>
    static unsigned map(unsigned a, unsigned b, F f) {
        unsigned r = 0;
        for (int i = 0; i < Lanes; i++) r |= ((unsigned)f(a, b, i) & mask) << bits * i;
        return r;
    }
};
}  // namespace cucc
#define CUCC_SIMD_BINARY(name, expr)                                             \
    inline unsigned name##2(unsigned a, unsigned b) {                            \
        using L = cucc::simd_lanes<2>;                                           \
        return L::map(a, b, [](unsigned a, unsigned b, int i) { return expr; }); \
    }                                                                            \
    inline unsigned name##4(unsigned a, unsigned b) {                            \
        using L = cucc::simd_lanes<4>;                                           \
        return L::map(a, b, [](unsigned a, unsigned b, int i) { return expr; }); \
    }
#define CUCC_SIMD_UNARY(name, expr)                                            \
    inline unsigned name##2(unsigned a) {                                      \
        using L = cucc::simd_lanes<2>;                                         \
        return L::map(a, 0, [](unsigned a, unsigned, int i) { return expr; }); \
    }                                                                          \
    inline unsigned name##4(unsigned a) {                                      \
        using L = cucc::simd_lanes<4>;                                         \
        return L::map(a, 0, [](unsigned a, unsigned, int i) { return expr; }); \
    }
// A comparison: vcmp gives the lane all ones, vset gives it 1, where the comparison holds.
#define CUCC_SIMD_COMPARE(suffix, expr)               \
    CUCC_SIMD_BINARY(__vcmp##suffix, (expr) ? -1 : 0) \
    CUCC_SIMD_BINARY(__vset##suffix, (expr) ? 1 : 0)
CUCC_SIMD_BINARY(__vadd, L::u(a, i) + L::u(b, i))
CUCC_SIMD_BINARY(__vsub, L::u(a, i) - L::u(b, i))
CUCC_SIMD_BINARY(__vaddss, L::sat_s(L::s(a, i) + L::s(b, i)))
CUCC_SIMD_BINARY(__vsubss, L::sat_s(L::s(a, i) - L::s(b, i)))
CUCC_SIMD_BINARY(__vaddus, L::sat_u(L::u(a, i) + L::u(b, i)))
CUCC_SIMD_BINARY(__vsubus, L::sat_u(L::u(a, i) - L::u(b, i)))
CUCC_SIMD_BINARY(__vabsdiffs, abs(L::s(a, i) - L::s(b, i)))
CUCC_SIMD_BINARY(__vabsdiffu, abs(L::u(a, i) - L::u(b, i)))
CUCC_SIMD_BINARY(__vavgu, (L::u(a, i) + L::u(b, i) + 1) >> 1)
CUCC_SIMD_BINARY(__vhaddu, (L::u(a, i) + L::u(b, i)) >> 1)
CUCC_SIMD_BINARY(__vmaxs, L::s(a, i) > L::s(b, i) ? L::s(a, i) : L::s(b, i))
CUCC_SIMD_BINARY(__vmaxu, L::u(a, i) > L::u(b, i) ? L::u(a, i) : L::u(b, i))
CUCC_SIMD_BINARY(__vmins, L::s(a, i) < L::s(b, i) ? L::s(a, i) : L::s(b, i))
CUCC_SIMD_BINARY(__vminu, L::u(a, i) < L::u(b, i) ? L::u(a, i) : L::u(b, i))
CUCC_SIMD_UNARY(__vabs, abs(L::s(a, i)))
CUCC_SIMD_UNARY(__vabsss, L::sat_s(abs(L::s(a, i))))
CUCC_SIMD_UNARY(__vneg, -L::s(a, i))
CUCC_SIMD_UNARY(__vnegss, L::sat_s(-L::s(a, i)))
CUCC_SIMD_COMPARE(eq, L::u(a, i) == L::u(b, i))
CUCC_SIMD_COMPARE(ne, L::u(a, i) != L::u(b, i))
CUCC_SIMD_COMPARE(ges, L::s(a, i) >= L::s(b, i))
CUCC_SIMD_COMPARE(geu, L::u(a, i) >= L::u(b, i))
CUCC_SIMD_COMPARE(gts, L::s(a, i) > L::s(b, i))
CUCC_SIMD_COMPARE(gtu, L::u(a, i) > L::u(b, i))
CUCC_SIMD_COMPARE(les, L::s(a, i) <= L::s(b, i))
CUCC_SIMD_COMPARE(leu, L::u(a, i) <= L::u(b, i))
CUCC_SIMD_COMPARE(lts, L::s(a, i) < L::s(b, i))
CUCC_SIMD_COMPARE(ltu, L::u(a, i) < L::u(b, i))
#undef CUCC_SIMD_COMPARE
#undef CUCC_SIMD_UNARY
#undef CUCC_SIMD_BINARY
// Sums over the lanes of |a - b| (signed or unsigned lanes).
inline unsigned __vsads2(unsigned a, unsigned b) {
    return (__vabsdiffs2(a, b) & 0xffffu) + (__vabsdiffs2(a, b) >> 16);
}
inline unsigned __vsadu2(unsigned a, unsigned b) {
    return (__vabsdiffu2(a, b) & 0xffffu) + (__vabsdiffu2(a, b) >> 16);
}
inline unsigned __vsads4(unsigned a, unsigned b) {
    return __dp4a(__vabsdiffs4(a, b), 0x01010101u, 0u);
}
inline unsigned __vsadu4(unsigned a, unsigned b) {
    return __dp4a(__vabsdiffu4(a, b), 0x01010101u, 0u);
}

// ---------------------------------------------------------------------------------------------
// Cache-hinted loads and stores: plain memory accesses on a CPU.
namespace cucc {
template <class T>
struct identity {
    using type = T;
};  // keeps v out of T's deduction
}  // namespace cucc
template <class T>
T __ldg(const T* p) {
    return *p;
}
template <class T>
T __ldcg(const T* p) {
    return *p;
}
template <class T>
T __ldca(const T* p) {
    return *p;
}
template <class T>
T __ldcs(const T* p) {
    return *p;
}
template <class T>
T __ldlu(const T* p) {
    return *p;
}
template <class T>
T __ldcv(const T* p) {
    return *p;
}
template <class T>
void __stwb(T* p, typename cucc::identity<T>::type v) {
    *p = v;
}
template <class T>
void __stcg(T* p, typename cucc::identity<T>::type v) {
    *p = v;
}
template <class T>
void __stcs(T* p, typename cucc::identity<T>::type v) {
    *p = v;
}
template <class T>
void __stwt(T* p, typename cucc::identity<T>::type v) {
    *p = v;
}

// ---------------------------------------------------------------------------------------------
// Miscellaneous
// Cycles of the clock cudaDevAttrClockRate reports, from real time, so that a kernel that spins
// for clockRate * ms cycles spins for ms milliseconds.
// (clock() in device code is the low 32 bits of the same count: runtime/device.cpp.)
inline long long clock64() { return cucc::clock_cycles(); }
inline void __nanosleep(unsigned) { sched_yield(); }
inline bool __isGlobal(const void* p) { return cucc::is_device_pointer(p); }
// Programmatic dependent launch (cudaLaunchAttributeProgrammaticStreamSerialization): kernels of
// a stream run one after the other here, so the previous grid is always complete.
inline void cudaGridDependencySynchronize() {}
inline void cudaTriggerProgrammaticLaunchCompletion() {}
// Both stop the grid and leave cudaErrorLaunchFailure for the next synchronization.
[[noreturn]] inline void __trap() { cucc::trap(cudaErrorLaunchFailure, "__trap() called"); }
[[noreturn]] inline void __brkpt() { cucc::trap(cudaErrorLaunchFailure, "__brkpt() called"); }
