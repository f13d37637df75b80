// Reads of PTX special registers in inline asm (the PTX ISA's "Special Registers" chapter), as
// samples write them: `asm("mov.u32 %0, %%laneid;" : "=r"(lane))`. Every thread of a 3D block in
// a 2D grid (with a partial last warp) stores what %laneid, %warpid, the five %lanemask_*
// registers, %tid, %ntid, %ctaid and %nctaid give it; the host compares each with the value the
// ISA defines, computed from the thread's coordinates (%warpid: equal across a warp, different
// between the warps of a block). %clock64 must not run backwards.
//! run: ./prog => pass /all ptx_special_registers checks passed/
#include <cstdio>
#include <string>
#include <vector>
#include "test_util.h"

constexpr int kValues = 20;  // per thread, in the order of the asm block below

__global__ void read_special_registers(unsigned* out) {
    unsigned v[kValues];
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(v[0]));
    asm volatile("mov.u32 %0, %%warpid;" : "=r"(v[1]));
    asm volatile("mov.u32 %0, %%lanemask_eq;" : "=r"(v[2]));
    asm volatile("mov.u32 %0, %%lanemask_lt;" : "=r"(v[3]));
    asm volatile("mov.u32 %0, %%lanemask_le;" : "=r"(v[4]));
    asm volatile("mov.u32 %0, %%lanemask_gt;" : "=r"(v[5]));
    asm volatile("mov.u32 %0, %%lanemask_ge;" : "=r"(v[6]));
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(v[7]));
    asm volatile("mov.u32 %0, %%tid.y;" : "=r"(v[8]));
    asm volatile("mov.u32 %0, %%tid.z;" : "=r"(v[9]));
    asm volatile("mov.u32 %0, %%ntid.x;" : "=r"(v[10]));
    asm volatile("mov.u32 %0, %%ntid.y;" : "=r"(v[11]));
    asm volatile("mov.u32 %0, %%ntid.z;" : "=r"(v[12]));
    asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(v[13]));
    asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(v[14]));
    asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(v[15]));
    asm volatile("mov.u32 %0, %%nctaid.y;" : "=r"(v[16]));
    unsigned long long t0, t1;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t0));
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t1));
    v[17] = t1 >= t0;
    // A register of the asm itself, set from a special one in the same statement.
    asm volatile("{\n .reg .u32 t;\n mov.u32 t, %%laneid;\n mov.u32 %0, t;\n}" : "=r"(v[18]));
    v[19] = 0;
    unsigned block = blockIdx.x + gridDim.x * blockIdx.y;
    unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned threads = blockDim.x * blockDim.y * blockDim.z;
    for (int k = 0; k < kValues; k++) out[(block * threads + linear) * kValues + k] = v[k];
}

int main() {
    const dim3 grid(3, 2), block(5, 3, 3);  // 45 threads: a full warp and 13 lanes of another
    const unsigned threads = block.x * block.y * block.z, blocks = grid.x * grid.y;
    const size_t n = (size_t)blocks * threads * kValues;
    unsigned* d_out;
    CUDA_CHECK(cudaMalloc(&d_out, n * sizeof(unsigned)));
    CUDA_CHECK(cudaMemset(d_out, 0xff, n * sizeof(unsigned)));
    read_special_registers<<<grid, block>>>(d_out);
    CUDA_CHECK(cudaGetLastError());
    std::vector<unsigned> out(n);
    CUDA_CHECK(cudaMemcpy(out.data(), d_out, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    const char* names[kValues] = {"%laneid",
                                  "%warpid",
                                  "%lanemask_eq",
                                  "%lanemask_lt",
                                  "%lanemask_le",
                                  "%lanemask_gt",
                                  "%lanemask_ge",
                                  "%tid.x",
                                  "%tid.y",
                                  "%tid.z",
                                  "%ntid.x",
                                  "%ntid.y",
                                  "%ntid.z",
                                  "%ctaid.x",
                                  "%ctaid.y",
                                  "%nctaid.x",
                                  "%nctaid.y",
                                  "%clock64 monotonic",
                                  "%laneid in a { } scope",
                                  "(unused)"};
    const std::vector<unsigned>& warp_ids = out;  // %warpid of each warp's first lane
    int wrong[kValues] = {0};
    std::string first[kValues];
    for (unsigned by = 0; by < grid.y; by++)
        for (unsigned bx = 0; bx < grid.x; bx++)
            for (unsigned z = 0; z < block.z; z++)
                for (unsigned y = 0; y < block.y; y++)
                    for (unsigned x = 0; x < block.x; x++) {
                        unsigned linear = x + block.x * (y + block.y * z);
                        unsigned lane = linear % 32;
                        // %warpid: the ISA promises one value per warp, not which (on a GPU
                        // it is the warp's slot in the SM); the runtime's is linear / 32.
                        unsigned want[kValues] = {
                            lane,
                            warp_ids[((by * grid.x + bx) * threads + linear / 32 * 32) * kValues +
                                     1],
                            1u << lane,
                            (1u << lane) - 1,
                            (unsigned)((2ull << lane) - 1),
                            ~(unsigned)((2ull << lane) - 1),
                            ~((1u << lane) - 1),
                            x,
                            y,
                            z,
                            block.x,
                            block.y,
                            block.z,
                            bx,
                            by,
                            grid.x,
                            grid.y,
                            1,
                            lane,
                            0};
                        const unsigned* got =
                            &out[((by * grid.x + bx) * threads + linear) * kValues];
                        for (int k = 0; k < kValues; k++) {
                            if (got[k] == want[k]) continue;
                            if (wrong[k]++ == 0) {
                                char line[160];
                                snprintf(line, sizeof line,
                                         "block (%u,%u) thread (%u,%u,%u): 0x%x, expected 0x%x", bx,
                                         by, x, y, z, got[k], want[k]);
                                first[k] = line;
                            }
                        }
                    }
    int clashes = 0;  // blocks where two warps read the same %warpid
    for (unsigned b = 0; b < blocks; b++)
        clashes +=
            warp_ids[(b * threads) * kValues + 1] == warp_ids[(b * threads + 32) * kValues + 1];
    expect(clashes == 0, "%warpid differs between the warps of a block",
           std::to_string(clashes) + " blocks with a clash");
    for (int k = 0; k < kValues - 1; k++) {
        char what[96];
        snprintf(what, sizeof what, "%s in all %u threads", names[k], blocks * threads);
        expect(wrong[k] == 0, what, wrong[k] ? first[k] : "");
    }
    CUDA_CHECK(cudaFree(d_out));
    return test_report("ptx_special_registers");
}
