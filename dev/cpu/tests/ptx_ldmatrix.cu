// Inline PTX ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.b16, from static and from dynamic
// shared memory, with the address in every form public code uses: a 32-bit shared address
// (.shared, "r"), a 64-bit one (.shared::cta, "l" of __cvta_generic_to_shared), a generic pointer
// (no state space, "l"), a register plus an offset, and the qualifiers in another order
// (.x4.m8n8, as CUTLASS writes them). The rows of each matrix are scattered
// (rows need not be contiguous) and the lanes past 8 * num give addresses of other rows, which
// must be ignored. Every register of every lane is compared with the PTX ISA's layout
// ("Warp-level matrix load instruction: ldmatrix"): lanes 8m..8m+7 address the rows of matrix
// m; lane l receives in register m elements 2(l%4) and 2(l%4)+1 of row l/4, the first in the
// low half, or with .trans the elements in column l/4 of rows 2(l%4) and 2(l%4)+1.
//! run: ./prog => pass /all ptx_ldmatrix checks passed/
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>
#include "test_util.h"

constexpr int kRowStride = 24;  // elements between row slots (48 bytes: 16-byte aligned)
constexpr int kSlots = 40;
constexpr int kElements = kSlots * kRowStride;

// Element index where row r (0..7) of matrix m (0..3) starts: a scattered permutation of slots.
__host__ __device__ int row_start(int m, int r) {
    return ((m * 8 + r) * 13 + 5) % kSlots * kRowStride;
}

// The row this lane addresses: its own for lanes < 8 * num, another matrix's row otherwise.
__host__ __device__ int lane_row(int lane, int num) {
    const int m = lane / 8 < num ? lane / 8 : (lane / 8 + 1) % 4, r = lane % 8;
    return row_start(m, r);
}

enum Form { SHARED_32, SHARED_64, GENERIC, OFFSET, REORDERED, NUM_FORMS };
static const char* const kForms[] = {
    ".shared, 32-bit \"r\" address", ".shared::cta, 64-bit \"l\" address", "generic \"l\" pointer",
    ".shared, [reg+16] address", "qualifiers in CUTLASS's order (.x4.m8n8)"};

// One ldmatrix in each address form: QUALS (.x1 ... .x4.trans), the destination vector REGS, the
// operand number ADDR of the address, and the outputs.
// clang-format off
#define LDMATRIX_FORMS(QUALS, REGS, ADDR, ...)                                                      \
    switch (form) {                                                                                 \
        case SHARED_32:                                                                             \
            asm volatile("ldmatrix.sync.aligned.m8n8" QUALS ".shared.b16 " REGS ", [%" ADDR "];"   \
                         : __VA_ARGS__ : "r"(a32));                                                 \
            break;                                                                                  \
        case SHARED_64:                                                                             \
            asm volatile("ldmatrix.sync.aligned.m8n8" QUALS ".shared::cta.b16 " REGS ", [%" ADDR "];" \
                         : __VA_ARGS__ : "l"(a64));                                                 \
            break;                                                                                  \
        case GENERIC:                                                                               \
            asm volatile("ldmatrix.sync.aligned.m8n8" QUALS ".b16 " REGS ", [%" ADDR "];"          \
                         : __VA_ARGS__ : "l"(row));                                                 \
            break;                                                                                  \
        case OFFSET:                                                                                \
            asm volatile("ldmatrix.sync.aligned.m8n8" QUALS ".shared.b16 " REGS ", [%" ADDR "+16];" \
                         : __VA_ARGS__ : "r"(a32 - 16));                                            \
            break;                                                                                  \
        default:                                                                                    \
            asm volatile("ldmatrix.sync.aligned" QUALS ".m8n8.shared.b16 " REGS ", [%" ADDR "];"   \
                         : __VA_ARGS__ : "r"(a32));                                                 \
    }
// clang-format on

template <int NUM, bool TRANS>
__device__ void ldmatrix(uint32_t* d, const uint16_t* row, int form) {
    const uint32_t a32 = (uint32_t)__cvta_generic_to_shared(row);
    const size_t a64 = __cvta_generic_to_shared(row);
    if constexpr (NUM == 1 && !TRANS) LDMATRIX_FORMS(".x1", "{%0}", "1", "=r"(d[0]))
    if constexpr (NUM == 1 && TRANS) LDMATRIX_FORMS(".x1.trans", "{%0}", "1", "=r"(d[0]))
    if constexpr (NUM == 2 && !TRANS) LDMATRIX_FORMS(".x2", "{%0, %1}", "2", "=r"(d[0]), "=r"(d[1]))
    if constexpr (NUM == 2 && TRANS)
        LDMATRIX_FORMS(".x2.trans", "{%0, %1}", "2", "=r"(d[0]), "=r"(d[1]))
    if constexpr (NUM == 4 && !TRANS)
        LDMATRIX_FORMS(".x4", "{%0, %1, %2, %3}", "4", "=r"(d[0]), "=r"(d[1]), "=r"(d[2]),
                       "=r"(d[3]))
    if constexpr (NUM == 4 && TRANS)
        LDMATRIX_FORMS(".x4.trans", "{%0, %1, %2, %3}", "4", "=r"(d[0]), "=r"(d[1]), "=r"(d[2]),
                       "=r"(d[3]))
}

// Element i of the shared region holds the value i + 1000 (16 bits, distinct).
template <int NUM, bool TRANS>
__global__ void ldmatrix_kernel(uint32_t* out, int form, bool dynamic) {
    __shared__ __align__(16) uint16_t static_tile[kElements];
    extern __shared__ __align__(16) uint16_t dynamic_tile[];
    uint16_t* tile = dynamic ? dynamic_tile : static_tile;
    for (int i = threadIdx.x; i < kElements; i += blockDim.x) tile[i] = (uint16_t)(i + 1000);
    __syncthreads();
    uint32_t d[4] = {0, 0, 0, 0};
    ldmatrix<NUM, TRANS>(d, tile + lane_row(threadIdx.x, NUM), form);
    for (int m = 0; m < NUM; m++) out[threadIdx.x * 4 + m] = d[m];
}

template <int NUM, bool TRANS>
void run(int form, bool dynamic, uint32_t* d_out) {
    ldmatrix_kernel<NUM, TRANS><<<1, 32, dynamic ? kElements * 2 : 0>>>(d_out, form, dynamic);
}

// The value the ISA puts in the low (h = 0) or high half of register m of lane l.
static uint32_t expected(bool trans, int lane, int m, int h) {
    if (!trans) return row_start(m, lane / 4) + 2 * (lane % 4) + h + 1000;
    return row_start(m, 2 * (lane % 4) + h) + lane / 4 + 1000;
}

int main() {
    uint32_t* d_out;
    CUDA_CHECK(cudaMalloc(&d_out, 128 * 4));
    for (int num : {1, 2, 4})
        for (bool trans : {false, true})
            for (int form = 0; form < NUM_FORMS; form++)
                for (bool dynamic : {false, true}) {
                    CUDA_CHECK(cudaMemset(d_out, 0, 128 * 4));
                    if (num == 1)
                        trans ? run<1, true>(form, dynamic, d_out)
                              : run<1, false>(form, dynamic, d_out);
                    if (num == 2)
                        trans ? run<2, true>(form, dynamic, d_out)
                              : run<2, false>(form, dynamic, d_out);
                    if (num == 4)
                        trans ? run<4, true>(form, dynamic, d_out)
                              : run<4, false>(form, dynamic, d_out);
                    CUDA_CHECK(cudaGetLastError());
                    CUDA_CHECK(cudaDeviceSynchronize());
                    std::vector<uint32_t> out(128);
                    CUDA_CHECK(cudaMemcpy(out.data(), d_out, 128 * 4, cudaMemcpyDeviceToHost));
                    int bad = 0;
                    std::string first;
                    for (int lane = 0; lane < 32; lane++)
                        for (int m = 0; m < num; m++)
                            for (int h = 0; h < 2; h++) {
                                const uint32_t got =
                                    h ? out[lane * 4 + m] >> 16 : out[lane * 4 + m] & 0xffff;
                                const uint32_t want = expected(trans, lane, m, h);
                                if (got != want && !bad++) {
                                    char s[128];
                                    snprintf(
                                        s, sizeof s,
                                        "first: lane %d register %d %s half: %u, ISA layout %u",
                                        lane, m, h ? "high" : "low", got, want);
                                    first = s;
                                }
                            }
                    char what[160];
                    snprintf(what, sizeof what, "ldmatrix .x%d%s, %s, %s shared memory", num,
                             trans ? ".trans" : "", kForms[form], dynamic ? "dynamic" : "static");
                    expect(bad == 0, what,
                           bad ? std::to_string(bad) + " elements wrong, " + first : "");
                }
    CUDA_CHECK(cudaFree(d_out));
    return test_report("ptx_ldmatrix");
}
