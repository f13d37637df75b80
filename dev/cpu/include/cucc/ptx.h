// cucc/ptx.h: the documented subset of inline PTX that the CPU runtime executes, as the C++
// functions that dev/cpu/cucc translates `asm` statements into (the translator is
// dev/cpu/cucc_ptx.py; the semantics live in dev/cpu/runtime/ptx.cpp).
//
// The subset, each instruction as the PTX ISA document specifies it (section titles in ptx.cpp):
//   mma.sync.aligned.{m16n8k8,m16n8k16}.row.col.f32.{f16.f16,bf16.bf16}.f32 and
//   mma.sync.aligned.{m16n8k8,m16n8k16}.row.col.f16.f16.f16.f16: one exchange of the warp, then
//     every lane computes its accumulator fragment from the others' A and B fragments;
//   ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}{.shared{::cta}}.b16: one exchange of the row
//     addresses, then every lane reads its fragment;
//   cp.async.{ca,cg}.shared{::cta}.global (4, 8 or 16 bytes, src-size or ignore-src), with
//     cp.async.commit_group, cp.async.wait_group N and cp.async.wait_all: the copies of a thread
//     are queued and performed when that thread waits for their group, the latest moment the
//     ISA allows, so a read of the destination before the wait sees the old bytes;
//   atom and red ({.sem}{.scope}{.space}.op.type) on the scalar types: real atomics;
//   and the glue around them: .reg declarations, `{ }` scopes, @p / @!p guards, setp, mov (also
//   packing and unpacking {lo, hi} vectors), cvta{.to}.shared and integer cvt, and
//   reads of the special registers %laneid, %warpid, %lanemask_{eq,lt,le,gt,ge}, %tid, %ntid,
//   %ctaid, %nctaid (.x/.y/.z), %clock and %clock64 (cucc_ptx.py: SPECIAL_REGISTERS).
// Shared memory addresses (the .shared state space, __cvta_generic_to_shared) are 32-bit, as on
// a GPU: dynamic shared memory is the window [0, its size) and static __shared__ variables (which
// are thread_local here) sit at 2^32 - their distance below the OS thread's TLS pointer, so both
// map back to the host pointer of the block's copy. Every warp-collective instruction checks the
// PTX rules it can: all 32 lanes of the warp execute the same instruction (a lane that exited or
// waits elsewhere is reported like a deadlock), ldmatrix row and cp.async addresses aligned, and
// shared addresses inside the block's shared memory (a GPU's misaligned- or illegal-address fault).
#pragma once

#include <cucc/runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace cucc {
namespace ptx {

// One asm statement: where it is and the instruction (for messages). cucc emits one static
// constexpr Site per translated instruction; lanes compare Site addresses to find out whether
// they execute the same instruction.
struct Site {
    const char* file;
    int line;
    const char* instruction;
};

// The state space an address operand names.
enum class Space : uint8_t { generic, global, shared };

// cvta.to.shared: the 32-bit shared address of a generic pointer into shared memory (traps
// with cudaErrorIllegalAddress for any other pointer).
uint32_t to_shared(const void* generic, const Site* site);
// cvta.shared: the generic pointer of a shared address.
void* from_shared(uint64_t address, const Site* site);
// True if p lies in this block's shared memory (dynamic, or a static __shared__ variable).
bool is_shared(const void* p);
// The host pointer of an operand address of `bytes` bytes in `space`, checked: inside shared
// memory for .shared, aligned to `align` bytes (a GPU faults on a misaligned access).
void* pointer(Space space, uint64_t address, size_t bytes, size_t align, const Site* site);

// mma: D = A*B + C for one m16n8kK product (K = 8 or 16) of the warp. a holds K/4 registers, b
// K/8, as the ISA's fragment tables say; c and d are this lane's four f32 accumulators, or its
// two .f16x2 registers (mma_f16).
enum class Operand : uint8_t { f16, bf16 };
void mma(const Site* site, int K, Operand type, float* d, const uint32_t* a, const uint32_t* b,
         const float* c);
void mma_f16(const Site* site, int K, uint32_t* d, const uint32_t* a, const uint32_t* b,
             const uint32_t* c);
// ldmatrix .m8n8 .b16: `num` (1, 2, 4) matrices into d[0..num-1]; address is this lane's row
// address (read from lanes 0..8*num-1) in `space` (shared or generic).
void ldmatrix(const Site* site, int num, bool trans, Space space, uint64_t address, uint32_t* d);
// cp.async: cp_size bytes to shared dst, the first src_size of them from global src, the rest
// zeros (src_size 0: the ignore-src form).
void cp_async(const Site* site, bool cg, uint64_t dst, uint64_t src, long long cp_size,
              long long src_size);
void cp_async_commit_group(const Site* site);
// wait_group n; n < 0: wait_all.
void cp_async_wait_group(const Site* site, long long n);

// ---------------------------------------------------------------------------------------------
// atom / red. Every atomic here is sequentially consistent, which is at least as strong as any
// .sem and .scope the instruction names.
enum class AtomOp : uint8_t { add, min, max, and_, or_, xor_, inc, dec, exch, cas };

// Replaces *address with op(*address, b[, c]) atomically and returns the old value, with the
// ISA's inc(r, s) = r >= s ? 0 : r+1, dec(r, s) = (r == 0 || r > s) ? s : r-1, cas(r, s, t) =
// r == s ? t : r.
template <class T>
T atom(const Site* site, Space space, uint64_t address, AtomOp op, T b, T c) {
    T* p = static_cast<T*>(pointer(space, address, sizeof(T), sizeof(T), site));
    if constexpr (std::is_integral<T>::value) {
        switch (op) {
            case AtomOp::cas:
                __atomic_compare_exchange_n(p, &b, c, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
                return b;  // the old value, whether or not it matched
            case AtomOp::add:
                return __atomic_fetch_add(p, b, __ATOMIC_SEQ_CST);
            case AtomOp::and_:
                return __atomic_fetch_and(p, b, __ATOMIC_SEQ_CST);
            case AtomOp::or_:
                return __atomic_fetch_or(p, b, __ATOMIC_SEQ_CST);
            case AtomOp::xor_:
                return __atomic_fetch_xor(p, b, __ATOMIC_SEQ_CST);
            case AtomOp::exch:
                return __atomic_exchange_n(p, b, __ATOMIC_SEQ_CST);
            default:
                break;
        }
    }
    // The others (and float add) as a compare-and-swap loop on the bits.
    using Bits = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;
    Bits* q = reinterpret_cast<Bits*>(p);
    Bits expected = __atomic_load_n(q, __ATOMIC_SEQ_CST);
    for (;;) {
        T r;
        std::memcpy(&r, &expected, sizeof(T));
        T updated = r;
        switch (op) {
            case AtomOp::add:
                updated = r + b;
                break;
            case AtomOp::min:
                updated = b < r ? b : r;
                break;
            case AtomOp::max:
                updated = r < b ? b : r;
                break;
            case AtomOp::inc:
                updated = r >= b ? T{0} : T(r + 1);
                break;
            case AtomOp::dec:
                updated = (r == T{0} || r > b) ? b : T(r - 1);
                break;
            case AtomOp::exch:
                updated = b;
                break;
            default:
                break;
        }
        Bits desired;
        std::memcpy(&desired, &updated, sizeof(T));
        if (__atomic_compare_exchange_n(q, &expected, desired, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST))
            return r;
    }
}

// ---------------------------------------------------------------------------------------------
// A "memory" clobber: the compiler may not move memory accesses across the statement.
inline void memory_clobber() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

// Operand values. As nvcc does, a constraint takes only C++ types of its register's kind and
// size: "h", "r", "l" integers (or enums) of 16, 32, 64 bits, "l" also pointers, "f" float, "d"
// double. Integers keep their bits (a signed value is the register's two's complement).
template <class R, class V>
constexpr bool operand_fits() {
    if constexpr (std::is_floating_point<R>::value) return std::is_same<R, V>::value;
    else
        return (std::is_integral<V>::value || std::is_enum<V>::value ||
                (std::is_pointer<V>::value && sizeof(R) == 8)) &&
               sizeof(V) == sizeof(R);
}

template <class R, class V>
R reg(const V& v) {
    static_assert(operand_fits<R, V>(),
                  "asm operand type does not match the type/size its constraint implies (h: 16-bit "
                  "integer, r: 32-bit integer, l: 64-bit integer or pointer, f: float, d: double)");
    if constexpr (std::is_pointer<V>::value) return (R)(uintptr_t)v;
    else return (R)v;
}

// The bits of a register as another type of the same size (a .b32 register read as .f32 ...).
template <class To, class From>
To bits(From from) {
    static_assert(sizeof(To) == sizeof(From), "a register read as a type of another size");
    To to;
    std::memcpy(&to, &from, sizeof(To));
    return to;
}

// Stores a register into the C++ lvalue of an output operand.
template <class L, class R>
void store(L& lvalue, R r) {
    static_assert(operand_fits<R, L>(),
                  "asm output type does not match the type/size its constraint implies (h: 16-bit "
                  "integer, r: 32-bit integer, l: 64-bit integer or pointer, f: float, d: double)");
    if constexpr (std::is_pointer<L>::value) lvalue = (L)(uintptr_t)r;
    else lvalue = (L)r;
}

}  // namespace ptx
}  // namespace cucc

// CUDA's address-space conversion functions (nvcc's sm_20 intrinsics).
inline size_t __cvta_generic_to_shared(const void* p) { return cucc::ptx::to_shared(p, nullptr); }
inline void* __cvta_shared_to_generic(size_t a) { return cucc::ptx::from_shared(a, nullptr); }
inline size_t __cvta_generic_to_global(const void* p) { return (size_t)p; }
inline void* __cvta_global_to_generic(size_t a) { return (void*)a; }
inline unsigned __isShared(const void* p) { return cucc::ptx::is_shared(p); }
