// ptx.cpp: what the inline PTX subset of cucc/ptx.h does, instruction by instruction, from the
// PTX ISA document (sections named by their titles, which stay stable across ISA versions while
// their numbers move):
//   "Matrix Fragments for mma.m16n8k8", "Matrix Fragments for mma.m16n8k16 with floating point
//   type", "Multiply-and-Accumulate Instruction: mma", "Warp-level matrix load instruction:
//   ldmatrix", "Data Movement and Conversion Instructions: cp.async" (with cp.async.commit_group
//   and cp.async.wait_group / cp.async.wait_all), "Parallel Synchronization and Communication
//   Instructions: atom" (and red), "Generic Addressing" and cvta.
//
// Warp-collective instructions (mma, ldmatrix) make one warp_exchange of all 32 lanes: each lane
// deposits what the others need (its A and B registers, or its row address) together with the
// instruction's Site; the last lane to arrive checks the 32 sites once for the warp (and for mma
// gathers A and B from the fragments), and after the exchange each lane computes its own result.
// So a warp costs one round of fiber switches per instruction, like a shuffle.
#include "cucc/ptx.h"

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <vector>

#include "internal.h"

namespace cucc {
namespace {

// What the OS thread's current block needs here (set by ptx_block_begin before each block).
// generation counts the blocks: a CUDA thread's cp.async queue from an older block is stale.
struct BlockState {
    const Grid* grid = nullptr;
    uint64_t generation = 0;
};
thread_local BlockState tls_state;

// The copies a CUDA thread has issued and not yet performed.
struct AsyncCopy {
    void* dst;
    const void* src;
    uint32_t bytes, src_bytes;  // bytes written; the first src_bytes come from src, the rest are 0
    uint64_t group;             // async-group it belongs to once committed (the commit count then)
};
struct AsyncQueue {
    uint64_t generation = 0;
    uint64_t committed = 0;  // commit_group calls so far
    std::vector<AsyncCopy> copies;
};
thread_local AsyncQueue tls_queues[kMaxThreadsPerBlock];

int linear_thread() {
    return (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}

const char* where(const ptx::Site* site, char* buf, size_t len) {
    if (site) snprintf(buf, len, "%s at %s:%d", site->instruction, site->file, site->line);
    else snprintf(buf, len, "an address-space conversion (__cvta_*)");
    return buf;
}

[[noreturn]] void fault(cudaError_t error, const ptx::Site* site, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
void fault(cudaError_t error, const ptx::Site* site, const char* fmt, ...) {
    char what[512], msg[1024], at[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(msg, sizeof msg, "%s: %s", where(site, at, sizeof at), what);
    trap(error, msg);
}

// ---------------------------------------------------------------------------------------------
// The shared window: 32-bit shared addresses [0, 2^31) are offsets into the block's dynamic
// shared memory, [2^31, 2^32) are 2^32 minus the distance of a static __shared__ variable
// (thread_local here: in the OS thread's static TLS, right below its thread pointer on x86-64).
constexpr uint64_t kTlsBase = 1ull << 31;

uintptr_t thread_pointer() { return (uintptr_t)__builtin_thread_pointer(); }

size_t dynamic_bytes() { return tls_state.grid ? tls_state.grid->smem : 0; }

bool shared_offset(const void* p, uint32_t* out) {
    uintptr_t a = (uintptr_t)p, base = (uintptr_t)dynamic_smem(), tp = thread_pointer();
    if (a >= base && a - base <= kMaxSmemPerBlockOptin) {
        *out = (uint32_t)(a - base);
        return true;
    }
    if (a < tp && tp - a <= kTlsBase) {
        *out = (uint32_t)(a - tp);  // 2^32 - distance
        return true;
    }
    return false;
}

// ---------------------------------------------------------------------------------------------
// Warp-collective instructions: every lane of the warp must take part, at the same instruction.

// Marks a warp call's slots as checked by check_aligned: stored in place of lane 31's site,
// where no instruction's Site can be.
const ptx::Site kAlignedMark = {"", 0, "checked"};

// A warp-collective instruction's exchange completes with every lane's deposit in the slots; on
// the last lane to arrive, this checks (once for the warp, not once a lane) that all 32 lanes
// took part at the same instruction, then lets `prepare` (if any) rearrange the slots for the
// lanes' reads, and marks them so. Any other outcome leaves the slots as deposited, for each lane
// to report (exchange_aligned).
template <class Deposit, void (*prepare)(Deposit* all)>
void check_aligned(void* slots, unsigned arrived, const void*) {
    Deposit* all = static_cast<Deposit*>(slots);
    if (!(arrived >> 31)) all[31].site = nullptr;  // a stale slot may hold an earlier call's mark
    if (arrived != 0xffffffffu) return;
    for (int lane = 1; lane < 32; lane++)
        if (all[lane].site != all[0].site) return;
    if constexpr (prepare != nullptr) prepare(all);
    all[31].site = &kAlignedMark;
}

// The warp's 32 deposits after the exchange (rearranged by `prepare`, where given). A lane that
// finds them unchecked reports why: lanes that exited, or lanes at another instruction.
template <class Deposit, void (*prepare)(Deposit* all) = nullptr>
const Deposit* exchange_aligned(const ptx::Site* site, const Deposit& mine, const char* section) {
    static_assert(sizeof(Deposit) <= 32, "a warp exchange carries at most 32 bytes per lane");
    // Exited lanes are not waited for (see warp_exchange): `arrived` says which took part.
    unsigned arrived;
    const Deposit* all = static_cast<const Deposit*>(warp_exchange(
        0xffffffffu, &mine, sizeof mine, &arrived, check_aligned<Deposit, prepare>, nullptr));
    if (__builtin_expect(all[31].site == &kAlignedMark, 1)) return all;
    char at[256];
    if (arrived != 0xffffffffu)
        fatal(
            "kernel %s, block (%u,%u,%u), warp %d: %s, but lanes 0x%08x of the warp have exited "
            "or do not exist: all 32 lanes must execute a .sync.aligned instruction together "
            "(PTX ISA, \"%s\")",
            tls_state.grid->name, blockIdx.x, blockIdx.y, blockIdx.z, linear_thread() / 32,
            where(site, at, sizeof at), ~arrived, section);
    unsigned same = 0;
    for (int lane = 0; lane < 32; lane++)
        if (all[lane].site == site) same |= 1u << lane;
    fatal(
        "kernel %s, block (%u,%u,%u), warp %d: lanes 0x%08x execute %s while lanes 0x%08x are "
        "at another warp-synchronous call: all 32 lanes must execute the same .sync.aligned "
        "instruction together (PTX ISA, \"%s\")",
        tls_state.grid->name, blockIdx.x, blockIdx.y, blockIdx.z, linear_thread() / 32, same,
        where(site, at, sizeof at), ~same, section);
}

// 16-bit floats to double (exact) and back (rounded to nearest even).
double f16_to_double(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0    ? std::ldexp((double)m, -24)
               : e == 31 ? (m ? NAN : INFINITY)
                         : std::ldexp((double)(m | 1024), e - 25);
    return (h & 0x8000) ? -v : v;
}

uint16_t double_to_f16(double x) {
    uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    x = std::fabs(x);
    if (std::isnan(x)) return 0x7e00;
    if (x < 0x1p-14) return sign | (uint16_t)std::nearbyint(x * 0x1p24);  // subnormal (or 0x0400)
    int e;
    std::frexp(x, &e);                                 // x = f * 2^e, f in [0.5, 1)
    double q = std::nearbyint(std::ldexp(x, 11 - e));  // 11 significant bits: [1024, 2048]
    int biased = e - 1 + 15;
    if (q == 2048.0) {
        q = 1024.0;
        biased++;
    }
    if (biased >= 31) return sign | 0x7c00;
    return sign | (uint16_t)(biased << 10) | (uint16_t)((int)q - 1024);
}

float f16_to_float(uint32_t bits) { return (float)f16_to_double((uint16_t)bits); }

float bf16_to_float(uint32_t bits) {
    const uint32_t b = bits << 16;
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

struct MmaDeposit {
    uint32_t a[4], b[2];
    const ptx::Site* site;
};

const char* const kMmaSection = "Multiply-and-Accumulate Instruction: mma";

// The warp's A (16xK) and B (Kx8) as 16-bit elements, rows of A and columns of B each in k
// order: what mma_prepare makes of the 32 deposits, in their place (768 of their 1024 bytes).
struct MmaOperands {
    uint16_t a[16][16];  // a[r][k]: A's row r
    uint16_t b[8][16];   // b[n][k]: B's column n
};
static_assert(sizeof(MmaOperands) <= 31 * sizeof(MmaDeposit), "lane 31's site stays free");

// The fragments ("Matrix Fragments for mma.m16n8k16 with floating point type" and "... for
// mma.m16n8k8"), with groupID = lane >> 2 and threadID_in_group = lane % 4; element i of a lane
// is in register i/2, the low half for even i:
//   A (16xK): K = 16: row groupID (+8 for i in 2,3,6,7), column 2*threadID_in_group + (i & 1)
//     (+8 for i >= 4); K = 8: row groupID (+8 for a2, a3), column 2*threadID_in_group + (i & 1).
//   B (Kx8): row 2*threadID_in_group + (i & 1) (+8 for i >= 2, K = 16 only), column groupID.
//   C, D (16x8): c0, c1 at row groupID, c2, c3 at row groupID + 8, column
//     2*threadID_in_group + (i & 1).
// So columns k = 2p, 2p+1 of row r of A are register (r >= 8) + 2*(p >= 4) of lane
// (r % 8)*4 + p % 4, and rows k = 2p, 2p+1 of column n of B register p >= 4 of lane n*4 + p % 4.
// Gathered once for the warp (K = 8 uses the first 8 of each row and column).
void mma_prepare(MmaDeposit* all) {
    MmaOperands m;
    for (int p = 0; p < 8; p++) {
        for (int r = 0; r < 16; r++) {
            const uint32_t reg = all[(r % 8) * 4 + p % 4].a[(r >= 8) + 2 * (p >= 4)];
            m.a[r][2 * p] = (uint16_t)reg;
            m.a[r][2 * p + 1] = (uint16_t)(reg >> 16);
        }
        for (int n = 0; n < 8; n++) {
            const uint32_t reg = all[n * 4 + p % 4].b[p >= 4];
            m.b[n][2 * p] = (uint16_t)reg;
            m.b[n][2 * p + 1] = (uint16_t)(reg >> 16);
        }
    }
    std::memcpy(static_cast<void*>(all), &m, sizeof m);
}

// This lane's four accumulators of D = A*B + C (the ISA leaves the accumulation order and
// rounding unspecified, at least single precision: here the products, exact in float for 16-bit
// inputs, are summed in double in k order and rounded once by the caller): rows g and g + 8 of
// A, columns 2t and 2t + 1 of B, with g = lane >> 2, t = lane % 4.
template <int K, float (*convert)(uint32_t)>
void mma_lane(const MmaOperands& m, const double* c, double* d) {
    const int lane = lane_id(), g = lane >> 2, t = lane & 3;
    float arow[2][K], bcol[2][K];
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < K; k++) {
            arow[h][k] = convert(m.a[g + 8 * h][k]);
            bcol[h][k] = convert(m.b[2 * t + h][k]);
        }
    double s0 = c[0], s1 = c[1], s2 = c[2], s3 = c[3];  // four independent chains of additions
    for (int k = 0; k < K; k++) {
        s0 += (double)(arow[0][k] * bcol[0][k]);
        s1 += (double)(arow[0][k] * bcol[1][k]);
        s2 += (double)(arow[1][k] * bcol[0][k]);
        s3 += (double)(arow[1][k] * bcol[1][k]);
    }
    d[0] = s0;
    d[1] = s1;
    d[2] = s2;
    d[3] = s3;
}

void mma_any(const ptx::Site* site, int K, ptx::Operand type, const uint32_t* a, const uint32_t* b,
             const double* c, double* d) {
    if (K != 8 && K != 16) fatal("mma: shape m16n8k%d is not supported", K);
    MmaDeposit mine = {};
    std::memcpy(mine.a, a, K / 4 * sizeof(uint32_t));
    std::memcpy(mine.b, b, K / 8 * sizeof(uint32_t));
    mine.site = site;
    const MmaOperands& m = *reinterpret_cast<const MmaOperands*>(
        exchange_aligned<MmaDeposit, mma_prepare>(site, mine, kMmaSection));
    const bool bf16 = type == ptx::Operand::bf16;
    if (K == 16) (bf16 ? mma_lane<16, bf16_to_float> : mma_lane<16, f16_to_float>)(m, c, d);
    else (bf16 ? mma_lane<8, bf16_to_float> : mma_lane<8, f16_to_float>)(m, c, d);
}

// "cp.async": the copy of one thread is complete once the thread's wait_group covers its group;
// until then the destination must not be read nor the source written (undefined), so performing
// it at that wait is one of the behaviours a GPU may show, and the one that exposes a missing wait.
// queue() is the calling CUDA thread's queue, emptied when the OS thread starts another block.
AsyncQueue& queue() {
    AsyncQueue& q = tls_queues[linear_thread()];
    if (q.generation != tls_state.generation) {
        q.generation = tls_state.generation;
        q.committed = 0;
        q.copies.clear();
    }
    return q;
}

}  // namespace

void ptx_block_begin(const Grid& grid) {
    tls_state.grid = &grid;
    tls_state.generation++;
}

namespace ptx {

uint32_t to_shared(const void* generic, const Site* site) {
    uint32_t offset;
    if (!shared_offset(generic, &offset))
        fault(cudaErrorIllegalAddress, site, "%p is not an address in shared memory", generic);
    return offset;
}

void* from_shared(uint64_t address, const Site* site) {
    if (address >= (1ull << 32))
        fault(cudaErrorIllegalAddress, site,
              "0x%llx is not a 32-bit shared memory address (a generic pointer? "
              "__cvta_generic_to_shared converts one)",
              (unsigned long long)address);
    if (address < kTlsBase) return (char*)dynamic_smem() + address;
    return (char*)thread_pointer() - ((1ull << 32) - address);
}

bool is_shared(const void* p) {
    uint32_t offset;
    return shared_offset(p, &offset) && (offset >= kTlsBase || offset < dynamic_bytes());
}

void* pointer(Space space, uint64_t address, size_t bytes, size_t align, const Site* site) {
    if (address % align != 0)
        fault(cudaErrorMisalignedAddress, site, "address 0x%llx is not %zu-byte aligned",
              (unsigned long long)address, align);
    if (space != Space::shared) return (void*)(uintptr_t)address;
    void* p = from_shared(address, site);
    if (address < kTlsBase && address + bytes > dynamic_bytes())
        fault(cudaErrorIllegalAddress, site,
              "shared address 0x%llx (%zu bytes) is outside the block's %zu bytes of dynamic "
              "shared memory",
              (unsigned long long)address, bytes, dynamic_bytes());
    if (address >= kTlsBase && address + bytes > (1ull << 32))
        fault(cudaErrorIllegalAddress, site, "shared address 0x%llx (%zu bytes) is out of range",
              (unsigned long long)address, bytes);
    return p;
}

void mma(const Site* site, int K, Operand type, float* d, const uint32_t* a, const uint32_t* b,
         const float* c) {
    double cd[4] = {c[0], c[1], c[2], c[3]}, dd[4];
    mma_any(site, K, type, a, b, cd, dd);
    for (int i = 0; i < 4; i++) d[i] = (float)dd[i];
}

void mma_f16(const Site* site, int K, uint32_t* d, const uint32_t* a, const uint32_t* b,
             const uint32_t* c) {
    double cd[4], dd[4];
    for (int i = 0; i < 4; i++) cd[i] = f16_to_double((uint16_t)(c[i >> 1] >> (16 * (i & 1))));
    mma_any(site, K, Operand::f16, a, b, cd, dd);
    for (int r = 0; r < 2; r++)
        d[r] = (uint32_t)double_to_f16(dd[2 * r]) | (uint32_t)double_to_f16(dd[2 * r + 1]) << 16;
}

// "Warp-level matrix load instruction: ldmatrix": lanes 8m..8m+7 give the row addresses of
// matrix m (each 16-byte aligned: four lanes load 16 bytes of a row). Each lane receives in
// register m a fragment of a row, four consecutive lanes a whole row: lane l gets elements
// (l/4, 2(l%4)) and (l/4, 2(l%4)+1), the first in the low half. With .trans the matrix is read
// column-major: lane l gets elements (2(l%4), l/4) and (2(l%4)+1, l/4) of the rows as addressed.
void ldmatrix(const Site* site, int num, bool trans, Space space, uint64_t address, uint32_t* d) {
    struct Deposit {
        const char* row;
        const Site* site;
    } mine = {nullptr, site};
    const int lane = lane_id();
    if (lane < 8 * num) mine.row = (const char*)pointer(space, address, 16, 16, site);
    if (space == Space::generic && lane < 8 * num && !is_shared(mine.row))
        fault(cudaErrorIllegalAddress, site, "the row address %p is not in shared memory",
              (const void*)mine.row);
    const Deposit* all =
        exchange_aligned(site, mine, "Warp-level matrix load instruction: ldmatrix");
    for (int m = 0; m < num; m++) {
        const Deposit* rows = all + 8 * m;
        if (!trans) {
            std::memcpy(&d[m], rows[lane / 4].row + 4 * (lane % 4), 4);
        } else {
            uint16_t lo, hi;
            std::memcpy(&lo, rows[2 * (lane % 4)].row + 2 * (lane / 4), 2);
            std::memcpy(&hi, rows[2 * (lane % 4) + 1].row + 2 * (lane / 4), 2);
            d[m] = (uint32_t)lo | (uint32_t)hi << 16;
        }
    }
}

void cp_async(const Site* site, bool cg, uint64_t dst, uint64_t src, long long cp_size,
              long long src_size) {
    if (cp_size != 4 && cp_size != 8 && cp_size != 16)
        fault(cudaErrorInvalidValue, site, "cp-size is %lld; it must be 4, 8 or 16", cp_size);
    if (cg && cp_size != 16)
        fault(cudaErrorInvalidValue, site, "cp.async.cg copies 16 bytes, not %lld", cp_size);
    if (src_size < 0 || src_size > cp_size)
        fault(cudaErrorInvalidValue, site, "src-size %lld is larger than cp-size %lld", src_size,
              cp_size);
    AsyncCopy c;
    c.dst = pointer(Space::shared, dst, (size_t)cp_size, (size_t)cp_size, site);
    c.src = src_size > 0 ? pointer(Space::global, src, (size_t)src_size, (size_t)cp_size, site)
                         : nullptr;
    c.bytes = (uint32_t)cp_size;
    c.src_bytes = (uint32_t)src_size;
    AsyncQueue& q = queue();
    c.group = q.committed;
    q.copies.push_back(c);
}

void cp_async_commit_group(const Site*) { queue().committed++; }

void cp_async_wait_group(const Site*, long long n) {
    AsyncQueue& q = queue();
    if (n < 0) {  // wait_all = commit_group; wait_group 0
        q.committed++;
        n = 0;
    }
    // groups committed before the n most recent ones complete, in commit order
    const uint64_t done = q.committed > (uint64_t)n ? q.committed - (uint64_t)n : 0;
    size_t kept = 0;
    for (const AsyncCopy& c : q.copies) {
        if (c.group < done) {
            if (c.src_bytes) std::memcpy(c.dst, c.src, c.src_bytes);
            std::memset((char*)c.dst + c.src_bytes, 0, c.bytes - c.src_bytes);
        } else {
            q.copies[kept++] = c;
        }
    }
    q.copies.resize(kept);
}

}  // namespace ptx
}  // namespace cucc
