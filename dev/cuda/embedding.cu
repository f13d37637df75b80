// dev/cuda/embedding.cu: the embedding (encoder) kernels, forward and backward, checked against a
// float64 host reference and timed. This rank's wte holds the rows of tokens [v0, v0 + Vl) (all
// of them, v0 = 0 and Vl = Vp, without tensor parallelism; a token outside the slice has no row
// here); wpe may be absent (the tensor-parallel ranks but the first):
//   forward   out[b,t,:] = wte[token - v0,:] (0 outside the slice) + wpe[t,:] (0 without wpe)
//   backward  dwpe[t,:] += sum over b of dout[b,t,:];  dwte[v,:] += sum of dout over the positions
//             holding token v0 + v; the rows of tokens that do not occur are left alone
// The backward kernels promise the same bits run to run (no atomics: every gradient element is
// summed by one thread, in a fixed order): the harness runs each backward and forward pass
// REPEATS times and requires identical bits, which a test runs under CUCC_SCHEDULE=random.
// Layout: tokens (B, T) int; out, dout (B, T, C) row-major; wte, dwte (Vl, C), each with a guard
// row on either side (the neighbouring ranks' rows, random values: reading them changes out, and
// they must keep their bits in dwte); wpe, dwpe (maxT, C), maxT >= T (rows from T on are not
// touched). C is a multiple of the 16-byte pack.
// Variants:
//   1  one thread per output element; the wte gradient one thread per (row, channel) of the
//      slice, scanning all B*T tokens in order; the wpe gradient one thread per (t, channel)
//   2  train_gpt.cu encoder_forward / token_buckets_build + encoder_backward: grid-stride over
//      16-byte packs, the wte gradient over the host's buckets of positions grouped by token;
//      checked through the launchers (block 0) and with the kernels launched directly on a grid
//      of STRIDE_GRID blocks of other sizes, so that the grid-stride loops wrap
// Usage: ./embedding [variant] [--bench] [--small]
//! cucc: -lcublasLt
//! run: ./prog --small => pass /all checks passed/
//! run: CUCC_SCHEDULE=random CUCC_SEED=3 CUCC_THREADS=3 ./prog --small => pass /variant 2 [\s\S]*bit-identical[\s\S]*all checks passed/
//! run: ./prog --small --bench => pass /bench embedding forward variant 2: [\s\S]*bench embedding backward variant 2: [\s\S]*all checks passed/
#define TRAIN_GPT_MODEL_ONLY
#include "../../train_gpt.cu"
#include "common.h"

static const char* const VARIANTS[] = {
    "thread per element; wte gradient: thread per (row, channel) scanning the tokens",
    "train_gpt.cu encoder_forward / encoder_backward (16-byte packs, token buckets)"};
constexpr int NUM_VARIANTS = 2;

// Runs of each pass per block size whose bits must agree.
constexpr int REPEATS = 3;

// Variant 1, forward: thread i owns element i of out.
__global__ void encoder_forward_element_kernel(floatX* out, const int* tokens, const floatX* wte,
                                               const floatX* wpe, int N, int T, int C, int v0,
                                               int Vl) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    const size_t row = i / C;
    const int c = (int)(i % C), t = (int)(row % T), token = tokens[row] - v0;
    const float tok = token >= 0 && token < Vl ? (float)wte[(size_t)token * C + c] : 0.0f;
    const float pos = wpe ? (float)wpe[(size_t)t * C + c] : 0.0f;
    out[i] = (floatX)(tok + pos);
}

// Variant 1, wpe gradient: thread t * C + c owns dwpe[t, c] and adds the B rows in order.
__global__ void wpe_backward_element_kernel(floatX* dwpe, const floatX* dout, int B, int T, int C) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C) return;
    const size_t t = i / C, c = i % C;
    float sum = 0.0f;
    for (int b = 0; b < B; b++) sum += (float)dout[((size_t)b * T + t) * C + c];
    dwpe[i] = (floatX)((float)dwpe[i] + sum);
}

// Variant 1, wte gradient: thread v * C + c owns dwte[v, c] and scans all N tokens in order.
__global__ void wte_backward_element_kernel(floatX* dwte, const floatX* dout, const int* tokens,
                                            int N, int C, int v0, int Vl) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)Vl * C) return;
    const int v = (int)(i / C), c = (int)(i % C);
    float sum = 0.0f;
    bool occurs = false;
    for (int row = 0; row < N; row++)
        if (tokens[row] - v0 == v) {
            sum += (float)dout[(size_t)row * C + c];
            occurs = true;
        }
    if (occurs) dwte[i] = (floatX)((float)dwte[i] + sum);
}

struct Shape {
    int B, T, C;
    int v0, Vl;  // this rank's slice of the vocabulary
    int span;    // tokens are drawn from [0, span): small spans repeat tokens
    bool wpe;    // this rank adds wpe
    const char* what;
};

// wpe's rows: a few more than T, which the backward pass must leave alone.
static int wpe_rows(const Shape* s) { return s->T + 3; }

struct Buffers {  // device
    int* tokens;
    floatX *wte, *wpe, *out, *dout, *dwte, *dwpe;  // wte, dwte: Vl + 2 rows, the guards included
    TokenBuckets tb;  // built on the host by token_buckets_build, as the forward pass does
};

static Buffers alloc_buffers(const Shape* s, const std::vector<int>& tokens) {
    const int N = s->B * s->T;
    Buffers d;
    d.tokens = device_copy(tokens);
    d.wte = device_poisoned<floatX>(((size_t)s->Vl + 2) * s->C);
    d.wpe = device_poisoned<floatX>((size_t)wpe_rows(s) * s->C);
    d.out = device_poisoned<floatX>((size_t)N * s->C);
    d.dout = device_poisoned<floatX>((size_t)N * s->C);
    d.dwte = device_poisoned<floatX>(((size_t)s->Vl + 2) * s->C);
    d.dwpe = device_poisoned<floatX>((size_t)wpe_rows(s) * s->C);
    d.tb.token = device_poisoned<int>(N);
    d.tb.start = device_poisoned<int>(N + 1);
    d.tb.pos = device_poisoned<int>(N);
    d.tb.host = (int*)MALLOC_CHECK((3 * (size_t)N + 1) * sizeof(int));
    token_buckets_build(&d.tb, tokens.data(), N, s->v0, s->Vl, 0);
    return d;
}

static void free_buffers(Buffers* d) {
    device_free({d->tokens, d->wte, d->wpe, d->out, d->dout, d->dwte, d->dwpe, d->tb.token,
                 d->tb.start, d->tb.pos});
    free(d->tb.host);
}

// Launches a variant's forward (out) or backward (dwte, dwpe) pass. Variant 1 runs enough blocks
// of block_size for its threads; variant 2 goes through the launchers for block_size 0 and runs
// the kernels on STRIDE_GRID blocks of block_size threads otherwise.
static void launch(int variant, int block_size, bool backward, const Buffers* d, const Shape* s) {
    const int N = s->B * s->T, C = s->C;
    const floatX* wpe = s->wpe ? d->wpe : nullptr;
    const floatX* wte = d->wte + C;  // the slice, past the first guard row
    floatX* dwte = d->dwte + C;
    if (variant == 2 && block_size == 0) {
        if (backward) encoder_backward(dwte, d->dwpe, d->dout, &d->tb, s->B, s->T, C, 0);
        else encoder_forward(d->out, d->tokens, wte, wpe, s->B, s->T, C, s->v0, s->Vl, 0);
        return;
    }
    if (variant == 2 && backward) {
        wpe_backward_kernel<<<STRIDE_GRID, block_size>>>(d->dwpe, d->dout, nullptr, s->B, s->T, C);
        CUDA_CHECK_LAUNCH();
        wte_backward_kernel<<<STRIDE_GRID, block_size>>>(dwte, d->dout, d->tb.token, d->tb.start,
                                                         d->tb.pos, d->tb.count, C);
    } else if (variant == 2) {
        encoder_forward_kernel<<<STRIDE_GRID, block_size>>>(d->out, d->tokens, wte, wpe, nullptr, N,
                                                            s->T, C, s->v0, s->Vl);
    } else if (backward) {
        wpe_backward_element_kernel<<<(unsigned)ceil_div((size_t)s->T * C, block_size),
                                      block_size>>>(d->dwpe, d->dout, s->B, s->T, C);
        CUDA_CHECK_LAUNCH();
        wte_backward_element_kernel<<<(unsigned)ceil_div((size_t)s->Vl * C, block_size),
                                      block_size>>>(dwte, d->dout, d->tokens, N, C, s->v0, s->Vl);
    } else {
        encoder_forward_element_kernel<<<(unsigned)ceil_div((size_t)N * C, block_size),
                                         block_size>>>(d->out, d->tokens, wte, wpe, N, s->T, C,
                                                       s->v0, s->Vl);
    }
    CUDA_CHECK_LAUNCH();
}

struct Inputs {  // host
    std::vector<int> tokens;
    std::vector<floatX> wte, wpe, dout, dwte, dwpe;  // wte, dwte: Vl + 2 rows, the guards included
};

static Inputs make_inputs(const Shape* s, uint64_t seed) {
    const int N = s->B * s->T;
    uint64_t rng = seed;
    Inputs in;
    for (int i = 0; i < N; i++) in.tokens.push_back((int)(rng_next(&rng) % (uint64_t)s->span));
    // the first positions get the tokens at the slice's edges that are in [0, span): v0 - 1 and
    // v0 + Vl just outside it, v0 and v0 + Vl - 1 just inside
    const int edges[4] = {s->v0 - 1, s->v0, s->v0 + s->Vl - 1, s->v0 + s->Vl};
    int at = 0;
    for (int token : edges)
        if (token >= 0 && token < s->span && at < N) in.tokens[at++] = token;
    in.wte = random_floatx(((size_t)s->Vl + 2) * s->C, &rng, -1.0f, 1.0f);
    in.wpe = random_floatx((size_t)wpe_rows(s) * s->C, &rng, -0.5f, 0.5f);
    in.dout = random_floatx((size_t)N * s->C, &rng, -1.0f, 1.0f);
    in.dwte = random_floatx(((size_t)s->Vl + 2) * s->C, &rng, -1.0f, 1.0f);
    in.dwpe = random_floatx((size_t)wpe_rows(s) * s->C, &rng, -1.0f, 1.0f);
    return in;
}

static void upload_inputs(const Buffers* d, const Inputs* in) {
    copy_to_device(d->wte, in->wte);
    copy_to_device(d->wpe, in->wpe);
    copy_to_device(d->dout, in->dout);
}

// The gradients the backward pass adds to, back to their starting values.
static void reset_gradients(const Buffers* d, const Inputs* in) {
    copy_to_device(d->dwte, in->dwte);
    copy_to_device(d->dwpe, in->dwpe);
}

struct Reference {
    std::vector<double> out, dwte, dwte_scale, dwpe, dwpe_scale;
    // the rows the backward pass adds to (wte: the slice's tokens that occur, never a guard row;
    // wpe: t < T), and the rest
    std::vector<bool> wte_used, wte_unused, wpe_used, wpe_unused;
};

// Float64 reference; each *_scale is the sum of the magnitudes of the terms of that gradient.
static Reference reference(const Inputs* in, const Shape* s) {
    const int N = s->B * s->T, C = s->C;
    Reference r;
    r.dwte = to_double(in->dwte);
    r.dwpe = to_double(in->dwpe);
    for (double g : r.dwte) r.dwte_scale.push_back(fabs(g));
    for (double g : r.dwpe) r.dwpe_scale.push_back(fabs(g));
    r.wte_used.assign(s->Vl + 2, false);
    for (int row = 0; row < N; row++) {
        const int t = row % s->T, v = in->tokens[row] - s->v0;
        const bool in_slice = v >= 0 && v < s->Vl;
        const size_t w = (size_t)(v + 1) * C;  // the token's wte row, past the first guard
        if (in_slice) r.wte_used[v + 1] = true;
        for (int c = 0; c < C; c++) {
            const double d = (float)in->dout[(size_t)row * C + c];
            const double tok = in_slice ? (double)(float)in->wte[w + c] : 0.0;
            const double pos = s->wpe ? (double)(float)in->wpe[(size_t)t * C + c] : 0.0;
            r.out.push_back(tok + pos);
            r.dwpe[(size_t)t * C + c] += d;
            r.dwpe_scale[(size_t)t * C + c] += fabs(d);
            if (!in_slice) continue;
            r.dwte[w + c] += d;
            r.dwte_scale[w + c] += fabs(d);
        }
    }
    for (int t = 0; t < wpe_rows(s); t++) r.wpe_used.push_back(t < s->T);
    for (bool used : r.wte_used) r.wte_unused.push_back(!used);
    for (bool used : r.wpe_used) r.wpe_unused.push_back(!used);
    return r;
}

// The rows of an (rows, C) matrix that keep[row] selects, concatenated.
template <class T>
static std::vector<T> select_rows(const std::vector<T>& m, int C, const std::vector<bool>& keep) {
    std::vector<T> out;
    for (size_t row = 0; row < keep.size(); row++)
        if (keep[row]) out.insert(out.end(), m.begin() + row * C, m.begin() + (row + 1) * C);
    return out;
}

// check_close on the rows of (rows, C) results that `rows` selects (scale empty: none).
static bool check_rows(const char* what, const std::vector<float>& got,
                       const std::vector<double>& ref, const std::vector<double>& scale,
                       const std::vector<bool>& rows, int C, Tolerance tol) {
    return check_close(what, select_rows(got, C, rows), select_rows(ref, C, rows),
                       scale.empty() ? scale : select_rows(scale, C, rows), tol);
}

// out: the float sum of two floatX values, rounded once to floatX: exact to one rounding (a tie
// lands on the bound: err/bound up to 1). The
// gradients are float sums of up to B*T terms (a random walk of roundings, ~sqrt(B*T) ulps of
// the partial sums), within ~1e-6 of the sum of their terms' magnitudes (about 16 ulps), then
// rounded once to floatX. The rows no token touches (dwte) and the positions from T on (dwpe)
// must keep their bits.
static const Tolerance TOL_OUT = {0.0, FLOATX_ROUNDOFF};
static const Tolerance TOL_GRAD = {1e-6, FLOATX_ROUNDOFF};
static const Tolerance TOL_EXACT = {0.0, 0.0};

static bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs a variant at one block size REPEATS times; checks the first run against the reference and
// every later run against the first run's bits. Returns whether all passed.
static bool check_runs(int variant, int block_size, const Buffers* d, const Inputs* in,
                       const Reference* ref, const Shape* s) {
    const int C = s->C;
    const char* const names[3] = {"out", "dwte", "dwpe"};
    std::vector<float> first[3];  // out, dwte, dwpe of the first run
    bool same[3] = {true, true, true};
    for (int run = 0; run < REPEATS; run++) {
        reset_gradients(d, in);
        CUDA_CHECK(cudaMemset(d->out, 0xff, in->dout.size() * sizeof(floatX)));
        launch(variant, block_size, false, d, s);
        launch(variant, block_size, true, d, s);
        CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<float> got[3] = {host_floats(d->out, in->dout.size()),
                                     host_floats(d->dwte, in->dwte.size()),
                                     host_floats(d->dwpe, in->dwpe.size())};
        for (int k = 0; k < 3; k++) {
            if (run == 0) first[k].swap(got[k]);
            else same[k] &= same_bits(first[k], got[k]);
        }
    }
    bool ok = true;
    for (int k = 0; k < 3; k++) {
        printf("    %-10s bit-identical over %d runs: %s\n", names[k], REPEATS,
               same[k] ? "ok" : "FAIL");
        ok &= same[k];
    }
    ok &= check_close("out", first[0], ref->out, {}, TOL_OUT);
    ok &= check_rows("dwte", first[1], ref->dwte, ref->dwte_scale, ref->wte_used, C, TOL_GRAD);
    ok &= check_rows("dwte rest", first[1], ref->dwte, {}, ref->wte_unused, C, TOL_EXACT);
    ok &= check_rows("dwpe", first[2], ref->dwpe, ref->dwpe_scale, ref->wpe_used, C, TOL_GRAD);
    ok &= check_rows("dwpe rest", first[2], ref->dwpe, {}, ref->wpe_unused, C, TOL_EXACT);
    return ok;
}

// Checks every selected variant on one shape at every block size it takes (the inputs and the
// reference built once); returns the failure count.
static int check_shape(const Options* o, const Shape* s, uint64_t seed) {
    Inputs in = make_inputs(s, seed);
    Reference ref = reference(&in, s);
    Buffers d = alloc_buffers(s, in.tokens);
    upload_inputs(&d, &in);
    int failures = 0;
    for (int v = 1; v <= NUM_VARIANTS; v++) {
        if (!variant_selected(o, v)) continue;
        const std::vector<int> block_sizes =
            v == 1 ? std::vector<int>{32, 96, 1024} : std::vector<int>{0, 64, 160};
        for (int block_size : block_sizes) {
            printf("  variant %d B %d T %d C %d slice [%d, %d) tokens < %d %s (%s) block %d\n", v,
                   s->B, s->T, s->C, s->v0, s->v0 + s->Vl, s->span, s->wpe ? "wpe" : "no wpe",
                   s->what, block_size);
            failures += !check_runs(v, block_size, &d, &in, &ref, s);
        }
    }
    free_buffers(&d);
    return failures;
}

static void bench(const Options* o) {
    const Shape s = o->small ? Shape{4, 16, 256, 0, 512, 500, true, "small"}
                             : Shape{8, 1024, 768, 0, 50304, 50257, true, "GPT-2 124M"};
    const int N = s.B * s.T;
    char shape[160];
    snprintf(shape, sizeof(shape), "B %d T %d C %d, %d wte rows (%s)", s.B, s.T, s.C, s.Vl, s.what);
    print_bench_intro(shape);
    Inputs in = make_inputs(&s, 7);
    Buffers d = alloc_buffers(&s, in.tokens);
    upload_inputs(&d, &in);
    reset_gradients(&d, &in);
    // forward: read a wte and a wpe row, write an out row per position; backward, the least
    // traffic: read dout twice (the wpe and the wte sums), read and write T wpe rows and a wte row
    // per distinct token
    const double row = (double)s.C * sizeof(floatX);
    const double fwd_bytes = 3.0 * N * row;
    const double bwd_bytes = 2.0 * N * row + 2.0 * s.T * row + 2.0 * d.tb.count * row;
    for (bool backward : {false, true})
        bench_variants(o, backward ? "embedding backward" : "embedding forward", VARIANTS,
                       NUM_VARIANTS, backward ? bwd_bytes : fwd_bytes, 0.0,
                       [&](int v) { launch(v, v == 1 ? 256 : 0, backward, &d, &s); });
    free_buffers(&d);
}

int main(int argc, char** argv) {
    Options o = parse_options(argc, argv, NUM_VARIANTS, VARIANTS);
    print_header("embedding");
    std::vector<Shape> shapes = {{1, 1, 8, 0, 5, 5, true, "one position"},
                                 {2, 7, 40, 0, 13, 3, true, "3 tokens repeated"},
                                 {3, 37, 104, 0, 300, 300, true, "mostly distinct tokens"},
                                 {8, 33, 24, 0, 7, 1, true, "one token everywhere"},
                                 {4, 19, 64, 20, 17, 50, false, "tensor-parallel middle rank"},
                                 {5, 16, 48, 0, 32, 64, true, "tensor-parallel first rank"},
                                 {2, 9, 32, 30, 10, 30, false, "no token in the slice"}};
    // full size: GPT-2's B*T and widths, on a tensor-parallel rank's slice of its 50304 rows
    if (!o.small)
        shapes.insert(shapes.end(),
                      {{8, 1024, 768, 0, 6288, 50257, true, "GPT-2 124M, tp 8, first rank"},
                       {4, 1024, 1600, 12576, 12576, 50257, false, "GPT-2 XL, tp 4, second rank"}});
    int failures = 0;
    for (size_t s = 0; s < shapes.size(); s++) failures += check_shape(&o, &shapes[s], 800 + s);
    if (o.bench) bench(&o);
    return finish("embedding", failures);
}
