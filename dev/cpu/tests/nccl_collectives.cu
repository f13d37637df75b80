// Tests every NCCL collective (AllReduce, Reduce, ReduceScatter, AllGather, Broadcast) on every
// data type of nccl.h with every reduction op (sum, prod, max, min, avg), in place and out of
// place, against a host computation of what a ring computes: contributions combined in rank
// order and rounded to the element type at every step (computed here in double and rounded
// once per step, which gives the same bits as NCCL's float arithmetic), avg as NCCL's
// PreMulSum (x * T(1/n) then sum) on floating types and as a truncating division of the
// wrapped sum on integers. Results must match bit for bit. Output buffers are poisoned first
// and have guard elements after them that must stay untouched; Reduce must leave recvbuff of
// non-root ranks alone. Each type's 34 calls are queued before one synchronization, so many
// collectives are in flight at once (more than the CPU NCCL's 16 slots per rank).
// Ranks are processes under mpirun; the ncclUniqueId travels by MPI_Bcast; each rank uses the
// device of its local rank. Multi-rank runs need one GPU per rank, hence cpu-only here.
//! cucc: -lnccl --mpi
//! cpu-only
//! run: mpirun -np 1 ./prog => pass /all 408 nccl collective checks passed on 1 ranks/
//! run: mpirun -np 2 ./prog => pass /all 408 nccl collective checks passed on 2 ranks/
//! run: mpirun -np 3 ./prog => pass /all 408 nccl collective checks passed on 3 ranks/
//! run: mpirun -np 4 ./prog => pass /all 408 nccl collective checks passed on 4 ranks/

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include "nccl_mpi_test_util.h"

// ---------------------------------------------------------------------------------------------
// Host model of the element types: floating types go through double, integers through 64 bits.

struct TypeInfo {
    ncclDataType_t type;
    const char* name;
    size_t size;
    bool floating;
    bool is_signed;
};
static const TypeInfo kTypes[] = {
    {ncclInt8, "int8", 1, false, true},         {ncclUint8, "uint8", 1, false, false},
    {ncclInt32, "int32", 4, false, true},       {ncclUint32, "uint32", 4, false, false},
    {ncclInt64, "int64", 8, false, true},       {ncclUint64, "uint64", 8, false, false},
    {ncclFloat16, "float16", 2, true, true},    {ncclFloat32, "float32", 4, true, true},
    {ncclFloat64, "float64", 8, true, true},    {ncclBfloat16, "bfloat16", 2, true, true},
    {ncclFloat8e4m3, "fp8e4m3", 1, true, true}, {ncclFloat8e5m2, "fp8e5m2", 1, true, true},
};
static const ncclRedOp_t kOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
static const char* kOpNames[] = {"sum", "prod", "max", "min", "avg"};

static double load_float(const TypeInfo& t, const void* p) {
    switch (t.type) {
        case ncclFloat16:
            return (double)__half2float(*(const __half*)p);
        case ncclBfloat16:
            return (double)__bfloat162float(*(const __nv_bfloat16*)p);
        case ncclFloat32:
            return *(const float*)p;
        case ncclFloat64:
            return *(const double*)p;
        case ncclFloat8e4m3:
            return (double)__half2float(
                __half(__nv_cvt_fp8_to_halfraw(*(const uint8_t*)p, __NV_E4M3)));
        default:
            return (double)__half2float(
                __half(__nv_cvt_fp8_to_halfraw(*(const uint8_t*)p, __NV_E5M2)));
    }
}

// Rounds v to the type (to nearest even; fp8 saturates to its largest finite value).
static void store_float(const TypeInfo& t, void* p, double v) {
    switch (t.type) {
        case ncclFloat16:
            *(__half*)p = __double2half(v);
            break;
        case ncclBfloat16:
            *(__nv_bfloat16*)p = __double2bfloat16(v);
            break;
        case ncclFloat32:
            *(float*)p = (float)v;
            break;
        case ncclFloat64:
            *(double*)p = v;
            break;
        case ncclFloat8e4m3:
            *(uint8_t*)p = __nv_cvt_double_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
            break;
        default:
            *(uint8_t*)p = __nv_cvt_double_to_fp8(v, __NV_SATFINITE, __NV_E5M2);
            break;
    }
}

static uint64_t load_int(const TypeInfo& t, const void* p) {  // sign- or zero-extended
    uint64_t v = 0;
    memcpy(&v, p, t.size);
    if (t.is_signed && t.size < 8 && (v >> (8 * t.size - 1) & 1)) v |= ~0ull << (8 * t.size);
    return v;
}
static void store_int(const TypeInfo& t, void* p, uint64_t v) { memcpy(p, &v, t.size); }

static bool int_less(const TypeInfo& t, uint64_t a, uint64_t b) {
    return t.is_signed ? (int64_t)a < (int64_t)b : a < b;
}

// PreMulSum's scalar T(1/n) for ncclAvg on floating types (a half for the fp8 types).
static double avg_scale(const TypeInfo& t, int n) {
    float f = (float)(1.0 / n);
    switch (t.type) {
        case ncclFloat16:
        case ncclFloat8e4m3:
        case ncclFloat8e5m2:
            return (double)__half2float(__float2half(f));
        case ncclBfloat16:
            return (double)__bfloat162float(__float2bfloat16(f));
        case ncclFloat32:
            return (double)f;
        default:
            return 1.0 / n;
    }
}

// out = the reduction over ranks of in[r] (count elements each), in rank order.
static void host_reduce(const TypeInfo& t, ncclRedOp_t op, int n,
                        const std::vector<std::vector<uint8_t>>& in, size_t offset, size_t count,
                        uint8_t* out) {
    for (size_t i = 0; i < count; i++) {
        uint8_t* o = out + i * t.size;
        if (t.floating) {
            double acc = 0;
            for (int r = 0; r < n; r++) {
                double x = load_float(t, &in[r][(offset + i) * t.size]);
                if (op == ncclAvg) {  // pre-multiply and round, as a contribution of type T
                    uint8_t tmp[8];
                    store_float(t, tmp, x * avg_scale(t, n));
                    x = load_float(t, tmp);
                }
                double v = r == 0           ? x
                           : op == ncclProd ? acc * x
                           : op == ncclMax  ? (acc > x ? acc : x)
                           : op == ncclMin  ? (acc < x ? acc : x)
                                            : acc + x;
                store_float(t, o, v);
                acc = load_float(t, o);
            }
        } else {
            uint64_t acc = 0;
            for (int r = 0; r < n; r++) {
                uint64_t x = load_int(t, &in[r][(offset + i) * t.size]);
                acc = r == 0           ? x
                      : op == ncclProd ? acc * x
                      : op == ncclMax  ? (int_less(t, acc, x) ? x : acc)
                      : op == ncclMin  ? (int_less(t, x, acc) ? x : acc)
                                       : acc + x;
                uint8_t tmp[8];
                store_int(t, tmp, acc);  // wrap to the type's width at every step
                acc = load_int(t, tmp);
            }
            if (op == ncclAvg) {
                acc = t.is_signed ? (uint64_t)((int64_t)acc / n) : acc / (uint64_t)n;
            }
            store_int(t, o, acc);
        }
    }
}

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// Rank r's input for (type, op): integers use all their bits (sums and products wrap); floats
// lie in [-4, 4] (sum, max, min, avg) or +-[0.5, 2] (prod), rounded to the type.
static std::vector<uint8_t> make_input(const TypeInfo& t, int op_index, int rank, size_t count) {
    std::vector<uint8_t> v(count * t.size);
    for (size_t i = 0; i < count; i++) {
        uint64_t h =
            mix((uint64_t)t.type << 48 ^ (uint64_t)op_index << 40 ^ (uint64_t)rank << 32 ^ i);
        if (!t.floating) {
            store_int(t, &v[i * t.size], h);
            continue;
        }
        double u = (double)(h >> 11) / 9007199254740992.0;  // [0, 1)
        double x = kOps[op_index] == ncclProd ? (0.5 + 1.5 * u) * ((h & 1) ? -1 : 1) : 8 * u - 4;
        store_float(t, &v[i * t.size], x);
    }
    return v;
}

// ---------------------------------------------------------------------------------------------

static int g_rank, g_nranks, g_checks, g_failures;

static void check_bytes(const char* what, const TypeInfo& t, const uint8_t* got,
                        const uint8_t* want, size_t count) {
    g_checks++;
    for (size_t i = 0; i < count; i++) {
        if (memcmp(got + i * t.size, want + i * t.size, t.size) != 0) {
            g_failures++;
            const uint8_t* g8 = got + i * t.size;
            const uint8_t* w8 = want + i * t.size;
            double g = t.floating ? load_float(t, g8) : (double)(int64_t)load_int(t, g8);
            double w = t.floating ? load_float(t, w8) : (double)(int64_t)load_int(t, w8);
            printf("FAIL rank %d: %s %s: element %zu is %.9g, expected %.9g\n", g_rank, what,
                   t.name, i, g, w);
            return;
        }
    }
}

// A device buffer of `count` elements plus guard elements, poisoned with byte 0xA5.
struct Buffer {
    uint8_t* dev = nullptr;
    size_t bytes = 0;
};
static const size_t kGuard = 16;
static std::vector<uint8_t*> g_allocations;  // freed after each type's checks
static Buffer make_buffer(size_t bytes) {
    Buffer b;
    b.bytes = bytes + kGuard;
    CUDA_CHECK(cudaMalloc(&b.dev, b.bytes));
    g_allocations.push_back(b.dev);
    CUDA_CHECK(cudaMemset(b.dev, 0xA5, b.bytes));
    return b;
}
static std::vector<uint8_t> fetch(const Buffer& b) {
    std::vector<uint8_t> h(b.bytes);
    CUDA_CHECK(cudaMemcpy(h.data(), b.dev, b.bytes, cudaMemcpyDeviceToHost));
    return h;
}

// One queued call and what its output must be afterwards (the whole buffer, guard included).
struct Expect {
    char what[96];
    Buffer buf;
    std::vector<uint8_t> want;
};

int main(int argc, char** argv) {
    ncclComm_t comm = mpi_nccl_start(&argc, &argv, &g_rank, &g_nranks);
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));

    const int n = g_nranks, me = g_rank;
    const int reduce_root = n - 1, bcast_root = 1 % n;
    const size_t count = 1031, block = 257;  // AllReduce/Reduce/Broadcast; per-rank block
    for (const TypeInfo& t : kTypes) {
        std::vector<Expect> expects;
        auto expect = [&](const char* what, bool in_place, Buffer buf, std::vector<uint8_t> want) {
            Expect e;
            snprintf(e.what, sizeof(e.what), "%s (%s)", what,
                     in_place ? "in place" : "out of place");
            e.buf = buf;
            e.want = std::move(want);
            expects.push_back(std::move(e));
        };
        auto upload = [&](Buffer& b, size_t offset, const std::vector<uint8_t>& data) {
            CUDA_CHECK(
                cudaMemcpy(b.dev + offset, data.data(), data.size(), cudaMemcpyHostToDevice));
        };
        auto poisoned = [&](size_t bytes) { return std::vector<uint8_t>(bytes + kGuard, 0xA5); };

        for (int oi = 0; oi < 5; oi++) {
            ncclRedOp_t op = kOps[oi];
            std::vector<std::vector<uint8_t>> in(n), rs_in(n);
            for (int r = 0; r < n; r++) {
                in[r] = make_input(t, oi, r, count);
                rs_in[r] = make_input(t, oi, r + 1000, block * n);
            }
            std::vector<uint8_t> full(count * t.size), rs_block(block * t.size);
            host_reduce(t, op, n, in, 0, count, full.data());
            host_reduce(t, op, n, rs_in, block * me, block, rs_block.data());
            char what[64];
            for (int in_place = 0; in_place < 2; in_place++) {
                // AllReduce: every rank gets the full reduction.
                snprintf(what, sizeof(what), "AllReduce %s", kOpNames[oi]);
                Buffer ar_out = make_buffer(count * t.size), ar_in = ar_out;
                if (in_place) upload(ar_out, 0, in[me]);
                else {
                    ar_in = make_buffer(count * t.size);
                    upload(ar_in, 0, in[me]);
                }
                NCCL_CHECK(ncclAllReduce(ar_in.dev, ar_out.dev, count, t.type, op, comm, stream));
                std::vector<uint8_t> want = poisoned(count * t.size);
                memcpy(want.data(), full.data(), full.size());
                expect(what, in_place, ar_out, want);

                // Reduce: only the root's recvbuff changes.
                snprintf(what, sizeof(what), "Reduce %s root %d", kOpNames[oi], reduce_root);
                Buffer rd_out = make_buffer(count * t.size), rd_in = rd_out;
                if (in_place) upload(rd_out, 0, in[me]);
                else {
                    rd_in = make_buffer(count * t.size);
                    upload(rd_in, 0, in[me]);
                }
                NCCL_CHECK(ncclReduce(rd_in.dev, rd_out.dev, count, t.type, op, reduce_root, comm,
                                      stream));
                want = poisoned(count * t.size);
                if (me == reduce_root) memcpy(want.data(), full.data(), full.size());
                else if (in_place) memcpy(want.data(), in[me].data(), in[me].size());
                expect(what, in_place, rd_out, want);

                // ReduceScatter: rank r gets block r; in place, recvbuff = sendbuff + r*block.
                snprintf(what, sizeof(what), "ReduceScatter %s", kOpNames[oi]);
                Buffer rs_send = make_buffer(block * n * t.size), rs_recv;
                upload(rs_send, 0, rs_in[me]);
                if (in_place) {
                    NCCL_CHECK(ncclReduceScatter(rs_send.dev, rs_send.dev + block * me * t.size,
                                                 block, t.type, op, comm, stream));
                    want = poisoned(block * n * t.size);
                    memcpy(want.data(), rs_in[me].data(), rs_in[me].size());
                    memcpy(want.data() + block * me * t.size, rs_block.data(), rs_block.size());
                    expect(what, true, rs_send, want);
                } else {
                    rs_recv = make_buffer(block * t.size);
                    NCCL_CHECK(ncclReduceScatter(rs_send.dev, rs_recv.dev, block, t.type, op, comm,
                                                 stream));
                    want = poisoned(block * t.size);
                    memcpy(want.data(), rs_block.data(), rs_block.size());
                    expect(what, false, rs_recv, want);
                }
            }
        }
        // AllGather: block r of every rank's recvbuff is rank r's input; in place, each rank's
        // input already sits at recvbuff + rank*block.
        std::vector<std::vector<uint8_t>> ag_in(n), bc_in(n);
        std::vector<uint8_t> gathered;
        for (int r = 0; r < n; r++) {
            ag_in[r] = make_input(t, 0, r + 2000, block);
            bc_in[r] = make_input(t, 0, r + 3000, count);
            gathered.insert(gathered.end(), ag_in[r].begin(), ag_in[r].end());
        }
        for (int in_place = 0; in_place < 2; in_place++) {
            Buffer ag_out = make_buffer(block * n * t.size);
            std::vector<uint8_t> want = poisoned(block * n * t.size);
            memcpy(want.data(), gathered.data(), gathered.size());
            if (in_place) {
                upload(ag_out, block * me * t.size, ag_in[me]);
                NCCL_CHECK(ncclAllGather(ag_out.dev + block * me * t.size, ag_out.dev, block,
                                         t.type, comm, stream));
            } else {
                Buffer ag_send = make_buffer(block * t.size);
                upload(ag_send, 0, ag_in[me]);
                NCCL_CHECK(ncclAllGather(ag_send.dev, ag_out.dev, block, t.type, comm, stream));
            }
            expect("AllGather", in_place, ag_out, want);

            // Broadcast: every rank gets the root's input; sendbuff is read on the root only.
            Buffer bc_out = make_buffer(count * t.size), bc_send = bc_out;
            if (in_place) {
                if (me == bcast_root) upload(bc_out, 0, bc_in[me]);
            } else {
                bc_send = make_buffer(count * t.size);
                upload(bc_send, 0, bc_in[me]);
            }
            NCCL_CHECK(
                ncclBroadcast(bc_send.dev, bc_out.dev, count, t.type, bcast_root, comm, stream));
            want = poisoned(count * t.size);
            memcpy(want.data(), bc_in[bcast_root].data(), bc_in[bcast_root].size());
            expect("Broadcast root 1%nranks", in_place, bc_out, want);
        }

        CUDA_CHECK(cudaStreamSynchronize(stream));
        for (Expect& e : expects) {
            std::vector<uint8_t> got = fetch(e.buf);
            check_bytes(e.what, t, got.data(), e.want.data(), got.size() / t.size);
        }
        ncclResult_t async;
        NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
        if (async != ncclSuccess) {
            printf("FAIL rank %d: async error %s\n", me, ncclGetErrorString(async));
            g_failures++;
        }
        for (uint8_t* p : g_allocations) CUDA_CHECK(cudaFree(p));
        g_allocations.clear();
    }

    NCCL_CHECK(ncclCommDestroy(comm));
    return mpi_test_report("nccl collective", g_checks, g_failures);
}
