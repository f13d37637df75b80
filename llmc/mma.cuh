// llmc/mma.cuh: warp-level tensor-core building blocks as inline PTX: the bf16 mma.sync
// m16n8k16 product with fp32 accumulators, ldmatrix loads of its operand fragments from shared
// memory, and cp.async copies from global to shared memory with their commit/wait groups.
// The same source runs on a GPU (sm_80 and later) and on the CPU runtime, whose cucc translates
// exactly this PTX (dev/cpu/include/cucc/ptx.h).
//
// Entry points: mma_bf16_16816, ldmatrix_x4 / ldmatrix_x4_trans, cp_async_16 / cp_async_4 with
// cp_async_commit / cp_async_wait, smem_address, pack_bf16.
//
// Fragments of mma.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point
// type"), for lane l with g = l / 4 and t = l % 4, two bf16 per 32-bit register, the lower
// column (or row of B) in the low half:
//   A (16x16, row major): a[0] = A[g][2t..2t+1],  a[1] = A[g+8][2t..],  a[2] = A[g][2t+8..],
//                         a[3] = A[g+8][2t+8..]
//   B (16x8, "col"):      b[0] = B[2t..2t+1][g],  b[1] = B[2t+8..2t+9][g]
//   C, D (16x8, fp32):    c[0], c[1] = C[g][2t], C[g][2t+1];  c[2], c[3] = C[g+8][2t], C[g+8][2t+1]
// ldmatrix (PTX ISA, "Warp-level matrix load instruction: ldmatrix") loads 8x8 matrices of
// 16-bit elements whose rows are 16 contiguous bytes at addresses given by lanes 8m..8m+7 for
// matrix m; lane l receives row l/4, elements 2(l%4) and 2(l%4)+1 of each matrix, or with .trans
// column l/4, elements 2(l%4) and 2(l%4)+1 of it. So an A fragment is one ldmatrix.x4 of a row-
// major 16x16 tile, and a B fragment of an (n, k) row-major tile (B = its transpose) comes from
// ldmatrix without .trans, of a (k, n) row-major tile from ldmatrix .trans.
#pragma once

#include <cstdint>

#include "common.cuh"

// The 32-bit shared-memory address of a pointer into shared memory.
__device__ inline uint32_t smem_address(const void* p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// Two floats as a bf16 pair, lo in the low half (the element with the lower index).
__device__ inline uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t bits;
    memcpy(&bits, &v, 4);
    return bits;
}

// d += a * b: one 16x8x16 product of the warp (every lane calls it with its fragments).
__device__ inline void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Four 8x8 matrices; this lane gives the row address of row l%8 of matrix l/8.
__device__ inline void ldmatrix_x4(uint32_t r[4], uint32_t address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}
__device__ inline void ldmatrix_x4_trans(uint32_t r[4], uint32_t address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}

// 16 bytes from global src to shared dst, asynchronously; zeros instead when !valid (src is not
// read then, but must still be a mapped address: pass any valid one).
__device__ inline void cp_async_16(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}
// 4 bytes from global src to shared dst (cp.async.ca: .cg copies 16 bytes only), zeros when !valid.
__device__ inline void cp_async_4(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src),
                 "r"(valid ? 4 : 0)
                 : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most N of this thread's most recent groups are still in flight.
template <int N>
__device__ inline void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
