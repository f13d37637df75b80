// The SIMD video intrinsics (per-halfword "2" and per-byte "4" forms) and __dp2a/__dp4a, as the
// CUDA Math API defines them: wrap-around add/sub/neg/abs, signed (ss) and unsigned (us)
// saturation, absolute differences, rounded (avg) and truncated (hadd) unsigned averages,
// min/max, the vcmp (all ones) and vset (1) comparisons and the sums of absolute differences.
// First a few values worked by hand, then every function on 256 random words against a host
// reference that splits each word into lanes and applies the definition lane by lane.
//! run: ./prog => pass /all SIMD intrinsic checks passed/
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "test_util.h"

const int kFunctions = 52;

// out[f] = function f of (a, b); the order is that of reference() below.
__global__ void simd_kernel(const unsigned* a, const unsigned* b, unsigned* out, int n) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    unsigned x = a[t], y = b[t];
    unsigned* o = out + (size_t)t * kFunctions;
    unsigned r[kFunctions] = {__vadd2(x, y),
                              __vadd4(x, y),
                              __vsub2(x, y),
                              __vsub4(x, y),
                              __vaddss2(x, y),
                              __vaddss4(x, y),
                              __vsubss2(x, y),
                              __vsubss4(x, y),
                              __vaddus2(x, y),
                              __vaddus4(x, y),
                              __vsubus2(x, y),
                              __vsubus4(x, y),
                              __vabsdiffs2(x, y),
                              __vabsdiffs4(x, y),
                              __vabsdiffu2(x, y),
                              __vabsdiffu4(x, y),
                              __vavgu2(x, y),
                              __vavgu4(x, y),
                              __vhaddu2(x, y),
                              __vhaddu4(x, y),
                              __vmaxs2(x, y),
                              __vmaxs4(x, y),
                              __vmaxu2(x, y),
                              __vmaxu4(x, y),
                              __vmins2(x, y),
                              __vmins4(x, y),
                              __vminu2(x, y),
                              __vminu4(x, y),
                              __vabs2(x),
                              __vabs4(x),
                              __vabsss2(x),
                              __vabsss4(x),
                              __vneg2(x),
                              __vneg4(x),
                              __vnegss2(x),
                              __vnegss4(x),
                              __vcmpeq4(x, y),
                              __vcmpne2(x, y),
                              __vcmpges4(x, y),
                              __vcmpgeu2(x, y),
                              __vcmpgts2(x, y),
                              __vcmpgtu4(x, y),
                              __vsetles4(x, y),
                              __vsetleu2(x, y),
                              __vsetlts2(x, y),
                              __vsetltu4(x, y),
                              __vsads2(x, y),
                              __vsadu4(x, y),
                              (unsigned)__dp2a_lo((int)x, (int)y, 5),
                              (unsigned)__dp2a_hi((int)x, (int)y, -7),
                              __dp2a_lo(x, y, 3u),
                              (unsigned)__dp4a((int)x, (int)y, 11)};
    for (int f = 0; f < kFunctions; f++) o[f] = r[f];
}

// Lane i of w with `bits` bits per lane, unsigned and sign-extended.
static int64_t lane_u(unsigned w, int bits, int i) {
    return (w >> (bits * i)) & ((1u << bits) - 1);
}
static int64_t lane_s(unsigned w, int bits, int i) {
    int64_t v = lane_u(w, bits, i);
    return v >= (int64_t(1) << (bits - 1)) ? v - (int64_t(1) << bits) : v;
}
static int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

// Applies op to every lane (bits wide) of a and b and packs the results modulo the lane width.
template <class Op>
static unsigned lanes(unsigned a, unsigned b, int bits, Op op) {
    unsigned r = 0;
    for (int i = 0; i < 32 / bits; i++) {
        int64_t v = op(a, b, i);
        r |= (unsigned)(v & ((int64_t(1) << bits) - 1)) << (bits * i);
    }
    return r;
}

static void reference(unsigned x, unsigned y, unsigned* w) {
    int k = 0;
    for (int bits : {16, 8}) {
        int64_t smin = -(int64_t(1) << (bits - 1)), smax = (int64_t(1) << (bits - 1)) - 1;
        int64_t umax = (int64_t(1) << bits) - 1;
        auto u = [&](unsigned v, int i) { return lane_u(v, bits, i); };
        auto s = [&](unsigned v, int i) { return lane_s(v, bits, i); };
        // The 2 and 4 forms are interleaved in the kernel's list: write them at stride 2.
        int base = bits == 16 ? 0 : 1;
        int64_t (*labs64)(int64_t) = [](int64_t v) { return v < 0 ? -v : v; };
        auto put = [&](int slot, unsigned v) { w[slot + base] = v; };
        put(0, lanes(x, y, bits, [&](unsigned a, unsigned b, int i) { return u(a, i) + u(b, i); }));
        put(2, lanes(x, y, bits, [&](unsigned a, unsigned b, int i) { return u(a, i) - u(b, i); }));
        put(4, lanes(x, y, bits, [&](unsigned a, unsigned b, int i) {
                return clamp(s(a, i) + s(b, i), smin, smax);
            }));
        put(6, lanes(x, y, bits, [&](unsigned a, unsigned b, int i) {
                return clamp(s(a, i) - s(b, i), smin, smax);
            }));
        put(8, lanes(x, y, bits, [&](unsigned a, unsigned b, int i) {
                return clamp(u(a, i) + u(b, i), 0, umax);
            }));
        put(10, lanes(x, y, bits, [&](unsigned a, unsigned b, int i) {
                return clamp(u(a, i) - u(b, i), 0, umax);
            }));
        put(12, lanes(x, y, bits,
                      [&](unsigned a, unsigned b, int i) { return labs64(s(a, i) - s(b, i)); }));
        put(14, lanes(x, y, bits,
                      [&](unsigned a, unsigned b, int i) { return labs64(u(a, i) - u(b, i)); }));
        put(16, lanes(x, y, bits,
                      [&](unsigned a, unsigned b, int i) { return (u(a, i) + u(b, i) + 1) / 2; }));
        put(18, lanes(x, y, bits,
                      [&](unsigned a, unsigned b, int i) { return (u(a, i) + u(b, i)) / 2; }));
        put(20, lanes(x, y, bits, [&](unsigned a, unsigned b, int i) {
                return s(a, i) > s(b, i) ? s(a, i) : s(b, i);
            }));
        put(22, lanes(x, y, bits, [&](unsigned a, unsigned b, int i) {
                return u(a, i) > u(b, i) ? u(a, i) : u(b, i);
            }));
        put(24, lanes(x, y, bits, [&](unsigned a, unsigned b, int i) {
                return s(a, i) < s(b, i) ? s(a, i) : s(b, i);
            }));
        put(26, lanes(x, y, bits, [&](unsigned a, unsigned b, int i) {
                return u(a, i) < u(b, i) ? u(a, i) : u(b, i);
            }));
        put(28, lanes(x, 0, bits, [&](unsigned a, unsigned, int i) { return labs64(s(a, i)); }));
        put(30, lanes(x, 0, bits, [&](unsigned a, unsigned, int i) {
                return clamp(labs64(s(a, i)), smin, smax);
            }));
        put(32, lanes(x, 0, bits, [&](unsigned a, unsigned, int i) { return -s(a, i); }));
        put(34, lanes(x, 0, bits,
                      [&](unsigned a, unsigned, int i) { return clamp(-s(a, i), smin, smax); }));
        k = 36;
    }
    auto cmp = [&](int bits, bool all_ones, auto pred) {
        return lanes(x, y, bits, [&](unsigned a, unsigned b, int i) -> int64_t {
            return pred(a, b, i) ? (all_ones ? -1 : 1) : 0;
        });
    };
    w[k++] = cmp(8, true,
                 [](unsigned a, unsigned b, int i) { return lane_u(a, 8, i) == lane_u(b, 8, i); });
    w[k++] = cmp(16, true, [](unsigned a, unsigned b, int i) {
        return lane_u(a, 16, i) != lane_u(b, 16, i);
    });
    w[k++] = cmp(8, true,
                 [](unsigned a, unsigned b, int i) { return lane_s(a, 8, i) >= lane_s(b, 8, i); });
    w[k++] = cmp(16, true, [](unsigned a, unsigned b, int i) {
        return lane_u(a, 16, i) >= lane_u(b, 16, i);
    });
    w[k++] = cmp(16, true,
                 [](unsigned a, unsigned b, int i) { return lane_s(a, 16, i) > lane_s(b, 16, i); });
    w[k++] = cmp(8, true,
                 [](unsigned a, unsigned b, int i) { return lane_u(a, 8, i) > lane_u(b, 8, i); });
    w[k++] = cmp(8, false,
                 [](unsigned a, unsigned b, int i) { return lane_s(a, 8, i) <= lane_s(b, 8, i); });
    w[k++] = cmp(16, false, [](unsigned a, unsigned b, int i) {
        return lane_u(a, 16, i) <= lane_u(b, 16, i);
    });
    w[k++] = cmp(16, false,
                 [](unsigned a, unsigned b, int i) { return lane_s(a, 16, i) < lane_s(b, 16, i); });
    w[k++] = cmp(8, false,
                 [](unsigned a, unsigned b, int i) { return lane_u(a, 8, i) < lane_u(b, 8, i); });
    int64_t sad2 = 0, sad4 = 0;
    for (int i = 0; i < 2; i++) sad2 += llabs(lane_s(x, 16, i) - lane_s(y, 16, i));
    for (int i = 0; i < 4; i++) sad4 += llabs(lane_u(x, 8, i) - lane_u(y, 8, i));
    w[k++] = (unsigned)sad2;
    w[k++] = (unsigned)sad4;
    int64_t lo = 5, hi = -7, ulo = 3, d4 = 11;
    for (int i = 0; i < 2; i++) {
        lo += lane_s(x, 16, i) * lane_s(y, 8, i);
        hi += lane_s(x, 16, i) * lane_s(y, 8, i + 2);
        ulo += lane_u(x, 16, i) * lane_u(y, 8, i);
    }
    for (int i = 0; i < 4; i++) d4 += lane_s(x, 8, i) * lane_s(y, 8, i);
    w[k++] = (unsigned)lo;
    w[k++] = (unsigned)hi;
    w[k++] = (unsigned)ulo;
    w[k++] = (unsigned)d4;
}

int main() {
    const int n = 256 + 3;
    std::vector<unsigned> a(n), b(n);
    // Worked by hand (first three): bytes, high to low, 7f,7f,00,80 and 01,80,01,80.
    a[0] = 0x7f7f0080u, b[0] = 0x01800180u;
    a[1] = 0x8000ffffu, b[1] = 0x00010001u;
    a[2] = 0x01020304u, b[2] = 0x04030201u;
    uint64_t state = 7;
    for (int i = 3; i < n; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        a[i] = (unsigned)(state >> 32);
        b[i] = (unsigned)state;
    }
    unsigned *da, *db, *dout;
    CUDA_CHECK(cudaMalloc(&da, n * sizeof(unsigned)));
    CUDA_CHECK(cudaMalloc(&db, n * sizeof(unsigned)));
    CUDA_CHECK(cudaMalloc(&dout, (size_t)n * kFunctions * sizeof(unsigned)));
    CUDA_CHECK(cudaMemcpy(da, a.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(db, b.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
    simd_kernel<<<(n + 63) / 64, 64>>>(da, db, dout, n);
    CUDA_CHECK(cudaGetLastError());
    std::vector<unsigned> out((size_t)n * kFunctions);
    CUDA_CHECK(cudaMemcpy(out.data(), dout, out.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));

    const unsigned* o = out.data();
    // 7f+01 = 80 wraps; saturated signed: 7f+01 -> 7f, 7f+80 = -1 -> ff, 00+01 = 01,
    // 80+80 = -256 -> 80; unsigned saturation: 80, ff, 01, ff.
    expect(o[1] == 0x80ff0100u, "__vadd4 wraps", std::to_string(o[1]));
    expect(o[5] == 0x7fff0180u, "__vaddss4 saturates signed", std::to_string(o[5]));
    expect(o[9] == 0x80ff01ffu, "__vaddus4 saturates unsigned", std::to_string(o[9]));
    // Halfwords 8000,ffff and 0001,0001: 8000-0001 = 7fff wraps; saturated: -32768-1 -> 8000.
    expect(o[kFunctions + 2] == 0x7ffffffeu, "__vsub2", std::to_string(o[kFunctions + 2]));
    expect(o[kFunctions + 6] == 0x8000fffeu, "__vsubss2 saturates",
           std::to_string(o[kFunctions + 6]));
    expect(o[kFunctions + 30] == 0x7fff0001u, "__vabsss2: |-32768| -> 7fff, |-1| = 1",
           std::to_string(o[kFunctions + 30]));
    // Bytes 01,02,03,04 vs 04,03,02,01: sum of |differences| 3+1+1+3 = 8; vcmpgtu4 lanes
    // where a > b: bytes 0 (04 > 01) and 1 (03 > 02).
    expect(o[2 * kFunctions + 47] == 8, "__vsadu4", std::to_string(o[2 * kFunctions + 47]));
    expect(o[2 * kFunctions + 41] == 0x0000ffffu, "__vcmpgtu4",
           std::to_string(o[2 * kFunctions + 41]));

    int wrong = 0;
    for (int t = 0; t < n; t++) {
        unsigned want[kFunctions];
        reference(a[t], b[t], want);
        for (int f = 0; f < kFunctions; f++) {
            if (o[(size_t)t * kFunctions + f] == want[f]) continue;
            if (wrong++ < 8)
                printf("word %d, function %d: a %08x b %08x got %08x want %08x\n", t, f, a[t], b[t],
                       o[(size_t)t * kFunctions + f], want[f]);
        }
    }
    expect(wrong == 0, "52 functions on 259 words against the lane-by-lane definitions",
           std::to_string(wrong) + " wrong");
    CUDA_CHECK(cudaFree(da));
    CUDA_CHECK(cudaFree(db));
    CUDA_CHECK(cudaFree(dout));
    return test_report("SIMD intrinsic");
}
