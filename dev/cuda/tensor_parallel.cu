// dev/cuda/tensor_parallel.cu: each tensor-parallel layer of llmc/tensor_parallel.cuh checked
// against the single-device computation, layer by layer (as picotron's tests do). Every rank
// draws the same inputs and weights (one seed per check), runs the whole layer itself with the
// model's own kernels as one rank would (linear_forward / linear_backward, classifier with
// tp_single(), the embedding over the whole vocabulary), then runs the parallel layer with only
// its shard, cut where llmc/parallel.h's tp_local_runs says the shard lives (the map that the
// trainer's initialization and checkpoints use, so its layout logic is tested too), and compares
// its part of every result with the same part of the reference. The checks:
//   - the layout: tp_local_runs's map of each cut (attn.qkv's Q, K and V parts, rows, columns)
//     is the one llmc/parallel.h describes, also when asked for pieces of a tensor (ZeRO's
//     shards); the sums over ranks below then show that the ranks' parts cover each tensor once;
//   - column-parallel linear (weight (OC, IC) cut by rows, bias with it), as mlp.fc (one part)
//     and as attn.qkv (parts Q, K and V, each cut): this rank's output columns, its dweight and
//     dbias rows, and dinp after f's backward (tp_enter_backward: the sum of the ranks' partial
//     input gradients);
//   - row-parallel linear (weight and input cut by columns, bias replicated), as attn.proj and
//     mlp.proj: the output after g (the sum of the ranks' partial products) with the bias added
//     once (the bias is of the output's scale: added on every rank, it is an error of 0.4 to
//     0.6 at tp 2 and 1.2 to 1.9 at tp 4), dweight's columns, the whole dbias, dinp's columns;
//   - the vocabulary-parallel embedding: each rank looks up its wte rows [v0, v0 + Vl) (wpe on
//     the group's first rank only) and the sum over the group (tp_leave) must be the plain
//     lookup; the wte gradient rows of this rank from token_buckets_build(v0, Vl) and
//     encoder_backward, and wpe's gradient;
//   - the vocabulary-parallel cross-entropy: classifier() on this rank's (N, Vp/t) logits, the
//     padding columns V..Vp-1 set to 30 (they would dominate the softmax if counted), targets in
//     every rank's slice, z-loss 0 and 0.01: losses, z-losses and this rank's dlogits columns.
// The embedding and the loss run with two vocabularies, one leaving a rank only padding.
// The layers run without and with sequence parallelism (rank r then holds rows [r N/t,
// (r+1) N/t) of a layer's input and output: tp_enter all-gathers them, the row-parallel output
// and the embedding are reduce-scattered, the backward passes mirror it), for each group size
// t in {2, 4} that divides the job: under mpirun -np 4 two groups of 2 also run side by side,
// ranks 2 and 3 being ranks 0 and 1 of the second, so the group's rank, not the job's, must
// choose every shard.
// Bounds (fp32 build): what the parallel layer computes with the same kernel from the same data
// (the embedding and its gradients, dbias as column sums) must be exact; a matmul of a
// different shape or a sum over ranks (the same fp32 terms in another order) within 1e-5 of the
// reference in relative norm, |got - ref|_2 / |ref|_2 (fp32 rounding of these sums of at most
// 256 terms is ~1e-7). A buffer a layer must write starts as NaN, so an element it skips fails.
// Each rank checks its part; rank 0 prints the worst error over all ranks of the job.
// Several ranks need one GPU each: cpu-only (the CPU runtime offers 8 devices).
//! cucc: -DMULTI_GPU --mpi -lnccl -lcublasLt -DENABLE_FP32
//! cpu-only
//! run: mpirun -np 2 ./prog => pass /all 62 checks passed on 2 ranks \(tp 2\)/
//! run: mpirun -np 4 ./prog => pass /all 124 checks passed on 4 ranks \(tp 2 4\)/
#define TRAIN_GPT_MODEL_ONLY
#include "../../train_gpt.cu"
#include "common.h"

#include <string>

static_assert(FLOATX_IS_FP32, "the bounds are fp32's: build with -DENABLE_FP32");

// A micro-batch of B x T tokens, the model width C (attn.qkv 3C, the MLP 4C) and the padded
// vocabulary Vp (padded_vocab_of) of the vocabularies V in VOCABS: 250 fills every rank's slice
// with real tokens; 129 leaves tp 4's last rank a slice of padding only, and its third rank one
// real token (tp 2: the second rank holds one).
constexpr int B = 2, T = 16, N = B * T, C = 64, Vp = 256;
constexpr int VOCABS[] = {250, 129};
constexpr double REL_BOUND = 1e-5;  // relative norm: matmuls, sums over the ranks
constexpr double EXACT = 0.0;       // the same kernel on the same data

struct Test {
    const CommGroup* world;  // every rank of the job: the errors are gathered over it
    TensorParallel tp;
    MatmulContext mm;
    float* partials;  // column_sums' scratch
    cudaStream_t stream;
    int checks, failures;
};

// The device buffers of one check, freed together.
struct Arena {
    std::vector<void*> taken;
    template <class T>
    T* keep(T* p) {
        taken.push_back(p);
        return p;
    }
    template <class T>
    T* copy(const std::vector<T>& host) {
        return keep(device_copy(host));
    }
    template <class T>  // NaN: an element the layer should write and does not fails its check
    T* poisoned(size_t n) {
        return keep(device_poisoned<T>(n));
    }
    template <class T>  // gradients: accumulated into
    T* zeros(size_t n) {
        T* p = keep(device_poisoned<T>(n));
        CUDA_CHECK(cudaMemset(p, 0, n * sizeof(T)));
        return p;
    }
    ~Arena() {
        for (void* p : taken) CUDA_CHECK(cudaFree(p));
    }
};

// ---------------------------------------------------------------------------------------------
// Shards. A Map lists, for each element of a rank's local tensor, its index in the logical one.
typedef std::vector<size_t> Map;

// This rank's elements of a logical tensor cut as s, by tp_local_runs.
static Map local_map(const Test* t, TpShape s) {
    const int size = s.split == TP_REPLICATED ? 1 : t->tp.size;
    Map map((size_t)s.rows * (s.cols > 0 ? s.cols : 1) / size);
    tp_local_runs(&s, t->tp.rank, t->tp.size, 0, map.size(),
                  [&](size_t logical, size_t local, size_t count) {
                      for (size_t i = 0; i < count; i++) map[local + i] = logical + i;
                  });
    return map;
}

static Map whole_map(size_t n) {
    Map map(n);
    for (size_t i = 0; i < n; i++) map[i] = i;
    return map;
}

// The rows of a (rows, width) activation this rank holds: all of them, or its N/t under
// sequence parallelism.
static Map row_shard_map(const Test* t, int rows, int width) {
    return local_map(t, TpShape{t->tp.sequence ? TP_ROWS : TP_REPLICATED, 1, rows, width});
}

// Every row of a (rows, width) matrix whose columns are cut as the vector `cols` maps.
static Map each_row(const Map& cols, int rows, int width) {
    Map map;
    for (int r = 0; r < rows; r++)
        for (size_t c : cols) map.push_back((size_t)r * width + c);
    return map;
}

template <class T>
std::vector<T> pick(const std::vector<T>& v, const Map& map) {
    std::vector<T> out(map.size());
    for (size_t i = 0; i < map.size(); i++) out[i] = v[map[i]];
    return out;
}

// ---------------------------------------------------------------------------------------------
// Checks. Every rank measures its error; rank 0 prints the worst of all ranks of the job.

static void report(Test* t, const char* layer, const char* what, const char* metric, double err,
                   double bound) {
    std::vector<double> all(t->world->size);
    comm_allgather_host(t->world, &err, sizeof(err), all.data(), "the gather of the errors");
    double worst = 0.0;
    for (double e : all) worst = std::isnan(worst) || std::isnan(e) ? NAN : std::max(worst, e);
    const bool ok = worst <= bound;  // NaN fails
    t->checks++;
    t->failures += !ok;
    if (t->world->rank != 0) return;
    char label[160];
    snprintf(label, sizeof(label), "%s: %s", layer, what);
    char bound_text[32] = "exact";
    if (bound != EXACT) snprintf(bound_text, sizeof(bound_text), "%.0e", bound);
    printf("%s  tp %d %-2s  %-62s %s %.3g (bound %s)", ok ? "PASS" : "FAIL", t->tp.size,
           t->tp.sequence ? "sp" : "", label, metric, worst, bound_text);
    if (!ok) {
        printf("  per rank:");
        for (double e : all) printf(" %.3g", e);
    }
    printf("\n");
}

// got (device, map.size() elements) against ref's elements at map: within bound in relative
// norm, or equal when bound is EXACT.
template <class T>
static void check(Test* t, const char* layer, const char* what, const T* got_d,
                  const std::vector<float>& ref, const Map& map, double bound) {
    const std::vector<float> got = host_floats(got_d, map.size());
    double diff2 = 0.0, ref2 = 0.0, max_abs = 0.0;
    bool nan = false;
    for (size_t i = 0; i < map.size(); i++) {
        const double r = ref[map[i]], d = (double)got[i] - r;
        nan |= std::isnan(d);
        diff2 += d * d;
        ref2 += r * r;
        max_abs = std::max(max_abs, fabs(d));
    }
    double err = bound == EXACT ? max_abs
                 : ref2 > 0.0   ? sqrt(diff2 / ref2)
                 : diff2 > 0.0  ? INFINITY
                                : 0.0;
    report(t, layer, what, bound == EXACT ? "max |err|" : "rel err", nan ? NAN : err, bound);
}

// The layout itself, as llmc/parallel.h words it: TP_ROWS, rows [r R/t, (r+1) R/t) of each
// part of R rows, parts one after the other; TP_COLS, columns [r cols/t, (r+1) cols/t) of
// every row. tp_local_runs must visit this in runs of any range [lo, lo + n) (ZeRO's shards
// cut tensors anywhere): asked in pieces of 7 elements, it must give the same map. The error
// is the number of elements it places elsewhere.
static void check_layout(Test* t, const char* name, TpShape s) {
    const int r = t->tp.rank, size = t->tp.size;
    const size_t cols = s.cols > 0 ? s.cols : 1;
    Map want;
    if (s.split == TP_ROWS) {
        const size_t part_rows = s.rows / s.parts, mine = part_rows / size;
        for (size_t p = 0; p < (size_t)s.parts; p++)
            for (size_t row = r * mine; row < (r + 1) * mine; row++)
                for (size_t c = 0; c < cols; c++) want.push_back((p * part_rows + row) * cols + c);
    } else {
        for (size_t row = 0; row < (size_t)s.rows; row++)
            for (size_t c = r * cols / size; c < (r + 1) * cols / size; c++)
                want.push_back(row * cols + c);
    }
    Map got(want.size(), SIZE_MAX);
    for (size_t lo = 0; lo < got.size(); lo += 7)
        tp_local_runs(&s, r, size, lo, std::min<size_t>(7, got.size() - lo),
                      [&](size_t logical, size_t local, size_t count) {
                          for (size_t i = 0; i < count; i++) got[local + i] = logical + i;
                      });
    size_t wrong = 0;
    for (size_t i = 0; i < want.size(); i++) wrong += got[i] != want[i];
    report(t, "tp_local_runs", name, "misplaced", (double)wrong, EXACT);
}

static void sync(const Test* t) {
    comm_sync(t->tp.group, t->stream, "the tensor-parallel collectives of a check");
}

// N token ids < V: row n's in the vocabulary slice of rank n % k of the k ranks whose slices
// hold real tokens (each of them gets some), every third row's among the first 4 tokens of its
// slice (repeated tokens: buckets of several rows).
static std::vector<int> spread_tokens(uint64_t* rng, int V, int t) {
    const int Vl = Vp / t, k = (int)ceil_div(V, Vl);
    std::vector<int> tokens(N);
    for (int n = 0; n < N; n++) {
        const int v0 = (n % k) * Vl, real = std::min(Vl, V - v0);
        const int span = n % 3 == 0 ? std::min(real, 4) : real;
        tokens[n] = v0 + (int)(rng_next(rng) % (uint64_t)span);
    }
    return tokens;
}

// ---------------------------------------------------------------------------------------------
// The linear layers.

// The reference: the whole layer on this device, out = inp @ w^T + b, and from dout: dinp,
// dweight, dbias.
struct Linear {
    std::vector<float> out, dinp, dweight, dbias;
};

static Linear whole_linear(Test* t, const std::vector<floatX>& inp, const std::vector<floatX>& w,
                           const std::vector<floatX>& b, const std::vector<floatX>& dout, int IC,
                           int OC) {
    Arena a;
    floatX *x = a.copy(inp), *weight = a.copy(w), *out = a.poisoned<floatX>((size_t)N * OC);
    floatX* dinp = a.poisoned<floatX>((size_t)N * IC);
    floatX *dw = a.zeros<floatX>((size_t)OC * IC), *db = a.zeros<floatX>(OC);
    linear_forward(&t->mm, FP8_NONE, out, x, weight, a.copy(b), N, IC, OC);
    linear_backward(&t->mm, FP8_NONE, dinp, dw, db, t->partials, a.copy(dout), x, weight, N, IC,
                    OC);
    CUDA_CHECK(cudaStreamSynchronize(t->stream));
    return Linear{host_floats(out, (size_t)N * OC), host_floats(dinp, (size_t)N * IC),
                  host_floats(dw, (size_t)OC * IC), host_floats(db, OC)};
}

struct LinearData {
    std::vector<floatX> inp, w, b, dout;
};

static LinearData linear_data(uint64_t seed, int IC, int OC) {
    uint64_t rng = seed;
    LinearData d;
    d.inp = random_floatx((size_t)N * IC, &rng, -1.0f, 1.0f);
    d.w = random_floatx((size_t)OC * IC, &rng, -0.5f, 0.5f);
    d.b = random_floatx(OC, &rng, -2.0f, 2.0f);
    d.dout = random_floatx((size_t)N * OC, &rng, -1.0f, 1.0f);
    return d;
}

// Column-parallel IC -> OC, the weight's rows cut in `parts` (attn.qkv: Q, K, V; mlp.fc: 1).
static void check_column_parallel(Test* t, const char* layer, int IC, int OC, int parts,
                                  uint64_t seed) {
    const TensorParallel* tp = &t->tp;
    const int OCl = OC / tp->size;
    const LinearData d = linear_data(seed, IC, OC);
    const Linear ref = whole_linear(t, d.inp, d.w, d.b, d.dout, IC, OC);
    const Map w_map = local_map(t, TpShape{TP_ROWS, parts, OC, IC});
    const Map b_map = local_map(t, TpShape{TP_ROWS, parts, OC, 0});
    const Map out_map = each_row(b_map, N, OC);  // this rank's output columns: its weight rows
    const Map in_rows = row_shard_map(t, N, IC);

    Arena a;
    floatX *w = a.copy(pick(d.w, w_map)), *out = a.poisoned<floatX>((size_t)N * OCl);
    const floatX* x = tp_enter(tp, a.copy(pick(d.inp, in_rows)), a.poisoned<floatX>((size_t)N * IC),
                               N, IC, t->stream);
    column_parallel_forward(&t->mm, FP8_NONE, out, x, w, a.copy(pick(d.b, b_map)), N, IC, OCl);
    floatX *dw = a.zeros<floatX>((size_t)OCl * IC), *db = a.zeros<floatX>(OCl);
    const floatX* dinp =
        column_parallel_backward(&t->mm, FP8_NONE, tp, a.poisoned<floatX>((size_t)N * IC), dw, db,
                                 t->partials, a.copy(pick(d.dout, out_map)), x, w, N, IC, OCl);
    sync(t);
    check(t, layer, "out, its columns", out, ref.out, out_map, REL_BOUND);
    check(t, layer, "dweight, its rows", dw, ref.dweight, w_map, REL_BOUND);
    check(t, layer, "dbias, its rows", db, ref.dbias, b_map, EXACT);
    check(t, layer, "dinp, summed by f backward", dinp, ref.dinp, in_rows, REL_BOUND);
}

// Row-parallel IC -> OC, the weight's columns cut (attn.proj, mlp.proj); the bias replicated.
static void check_row_parallel(Test* t, const char* layer, int IC, int OC, uint64_t seed) {
    const TensorParallel* tp = &t->tp;
    const int ICl = IC / tp->size;
    const LinearData d = linear_data(seed, IC, OC);
    const Linear ref = whole_linear(t, d.inp, d.w, d.b, d.dout, IC, OC);
    const Map w_map = local_map(t, TpShape{TP_COLS, 1, OC, IC});
    const Map in_map = local_map(t, TpShape{TP_COLS, 1, N, IC});  // the input columns: w's
    const Map out_rows = row_shard_map(t, N, OC);

    Arena a;
    floatX *x = a.copy(pick(d.inp, in_map)), *w = a.copy(pick(d.w, w_map));
    const floatX* out = row_parallel_forward(
        &t->mm, FP8_NONE, tp, a.poisoned<floatX>((size_t)N * OC), x, w, a.copy(d.b), N, ICl, OC);
    const floatX* dout = tp_leave_backward(tp, a.copy(pick(d.dout, out_rows)),
                                           a.poisoned<floatX>((size_t)N * OC), N, OC, t->stream);
    floatX *dinp = a.poisoned<floatX>((size_t)N * ICl), *dw = a.zeros<floatX>((size_t)OC * ICl);
    floatX* db = a.zeros<floatX>(OC);
    row_parallel_backward(&t->mm, FP8_NONE, dinp, dw, db, t->partials, dout, x, w, N, ICl, OC);
    sync(t);
    check(t, layer, "out, summed by g, bias once", out, ref.out, out_rows, REL_BOUND);
    check(t, layer, "dweight, its columns", dw, ref.dweight, w_map, REL_BOUND);
    check(t, layer, "dbias", db, ref.dbias, whole_map(OC), EXACT);
    check(t, layer, "dinp, its columns", dinp, ref.dinp, in_map, REL_BOUND);
}

// ---------------------------------------------------------------------------------------------
// The vocabulary-parallel embedding and cross-entropy.

static TokenBuckets token_buckets(Arena* a, std::vector<int>* host) {
    host->resize(3 * N + 1);
    return TokenBuckets{0, a->poisoned<int>(N), a->poisoned<int>(N + 1), a->poisoned<int>(N),
                        host->data()};
}

static void check_embedding(Test* t, int V, uint64_t seed) {
    const TensorParallel* tp = &t->tp;
    const int Vl = Vp / tp->size, v0 = tp->rank * Vl;
    cudaStream_t st = t->stream;
    uint64_t rng = seed;
    const std::vector<floatX> wte = random_floatx((size_t)Vp * C, &rng, -1.0f, 1.0f);
    const std::vector<floatX> wpe = random_floatx((size_t)T * C, &rng, -1.0f, 1.0f);
    const std::vector<floatX> dout = random_floatx((size_t)N * C, &rng, -1.0f, 1.0f);
    const std::vector<int> tokens = spread_tokens(&rng, V, tp->size);
    Arena a;
    std::vector<int> staging;
    TokenBuckets tb = token_buckets(&a, &staging);
    int* d_tokens = a.copy(tokens);
    floatX* d_wpe = a.copy(wpe);

    // the reference: every token's row, and the gradients of all of them
    floatX *ref_out = a.poisoned<floatX>((size_t)N * C),
           *ref_dwte = a.zeros<floatX>((size_t)Vp * C);
    floatX* ref_dwpe = a.zeros<floatX>((size_t)T * C);
    encoder_forward(ref_out, d_tokens, a.copy(wte), d_wpe, B, T, C, 0, Vp, st);
    token_buckets_build(&tb, tokens.data(), N, 0, Vp, st);
    encoder_backward(ref_dwte, ref_dwpe, a.copy(dout), &tb, B, T, C, st);
    CUDA_CHECK(cudaStreamSynchronize(st));

    // this rank's rows of wte; the lookup is summed over the group into its rows of the output
    const Map wte_map = local_map(t, TpShape{TP_ROWS, 1, Vp, C}), rows = row_shard_map(t, N, C);
    floatX* lookup = a.poisoned<floatX>((size_t)N * C);
    encoder_forward(lookup, d_tokens, a.copy(pick(wte, wte_map)), tp->rank == 0 ? d_wpe : nullptr,
                    B, T, C, v0, Vl, st);
    const floatX* out = tp_leave(tp, lookup, a.poisoned<floatX>(rows.size()), N, C, st);
    const floatX* d = tp_leave_backward(tp, a.copy(pick(dout, rows)),
                                        a.poisoned<floatX>((size_t)N * C), N, C, st);
    floatX *dwte = a.zeros<floatX>((size_t)Vl * C), *dwpe = a.zeros<floatX>((size_t)T * C);
    token_buckets_build(&tb, tokens.data(), N, v0, Vl, st);
    encoder_backward(dwte, dwpe, d, &tb, B, T, C, st);
    sync(t);
    char layer[64];
    snprintf(layer, sizeof(layer), "vocab-parallel embedding, V %d", V);
    check(t, layer, "out, summed by g", out, host_floats(ref_out, (size_t)N * C), rows, EXACT);
    check(t, layer, "dwte, its rows", dwte, host_floats(ref_dwte, (size_t)Vp * C), wte_map, EXACT);
    check(t, layer, "dwpe", dwpe, host_floats(ref_dwpe, (size_t)T * C), whole_map(T * C), EXACT);
}

static void check_cross_entropy(Test* t, int V, float z_coef, uint64_t seed) {
    const TensorParallel* tp = &t->tp;
    const int Vl = Vp / tp->size;
    const float dloss = 1.0f / N;
    cudaStream_t st = t->stream;
    uint64_t rng = seed;
    std::vector<floatX> logits = random_floatx((size_t)N * Vp, &rng, -3.0f, 3.0f);
    const std::vector<int> targets = spread_tokens(&rng, V, tp->size);
    for (int n = 0; n < N; n++) {
        for (int c = V; c < Vp; c++) logits[(size_t)n * Vp + c] = (floatX)30.0f;
        if (n % 3 == 0) logits[(size_t)n * Vp + targets[n]] = (floatX)12.0f;  // p near 1
    }
    Arena a;
    int* d_targets = a.copy(targets);
    floatX* ref_logits = a.copy(logits);
    float *ref_losses = a.poisoned<float>(N), *ref_z = a.poisoned<float>(N);
    classifier(tp_single(), ref_logits, ref_losses, ref_z, nullptr, nullptr, nullptr, d_targets, N,
               V, Vp, dloss, z_coef, st);

    const Map cols = local_map(t, TpShape{TP_COLS, 1, N, Vp});
    floatX* x = a.copy(pick(logits, cols));
    float *losses = a.poisoned<float>(N), *z = a.poisoned<float>(N);
    classifier(tp, x, losses, z, nullptr, a.poisoned<SoftmaxStats>(N),
               a.poisoned<SoftmaxStats>((size_t)tp->size * N), d_targets, N, V, Vl, dloss, z_coef,
               st);
    sync(t);
    char layer[64];
    snprintf(layer, sizeof(layer), "vocab-parallel loss, V %d, z-loss %g", V, z_coef);
    check(t, layer, "losses", losses, host_floats(ref_losses, N), whole_map(N), REL_BOUND);
    check(t, layer, "z-losses", z, host_floats(ref_z, N), whole_map(N),
          z_coef == 0.0f ? EXACT : REL_BOUND);
    check(t, layer, "dlogits, its columns", x, host_floats(ref_logits, (size_t)N * Vp), cols,
          REL_BOUND);
}

// ---------------------------------------------------------------------------------------------

int main(int argc, char** argv) {
    Comm comm;
    comm_init(&comm, argc, argv, 60.0, nullptr);
    if (comm.world < 2 || comm.world % 2 != 0) {
        fprintf(stderr, "error: run under mpirun -np 2 or -np 4 (not %d ranks)\n", comm.world);
        comm_destroy(&comm);
        return EXIT_FAILURE;
    }
    if (comm.rank == 0) print_header("tensor_parallel");
    Test t = {};
    t.world = &comm.all;
    t.stream = 0;
    DeviceLedger ledger = {};
    matmul_init(&t.mm, t.stream, &ledger);
    t.partials = device_take_n<float>(&ledger, MEM_OTHER, ceil_div(N, COLUMN_CHUNK) * 2 * 4 * C);
    std::string sizes;
    for (int size : {2, 4}) {
        if (comm.world % size != 0) continue;
        CommGroup group;  // consecutive ranks, as train_gpt's grid
        comm_split(&comm.all, comm.rank / size, comm.rank, &group);
        t.tp = tp_of(&group, false);
        check_layout(&t, "attn.qkv.w (3 parts of rows)", TpShape{TP_ROWS, 3, 3 * C, C});
        check_layout(&t, "attn.qkv.b (3 parts)", TpShape{TP_ROWS, 3, 3 * C, 0});
        check_layout(&t, "mlp.fc.w (rows)", TpShape{TP_ROWS, 1, 4 * C, C});
        check_layout(&t, "wte (rows)", TpShape{TP_ROWS, 1, Vp, C});
        check_layout(&t, "mlp.proj.w (columns)", TpShape{TP_COLS, 1, C, 4 * C});
        check_layout(&t, "attn.proj.w (columns)", TpShape{TP_COLS, 1, C, C});
        for (bool sequence : {false, true}) {
            t.tp = tp_of(&group, sequence);
            check_column_parallel(&t, "column-parallel mlp.fc", C, 4 * C, 1, 11);
            check_column_parallel(&t, "column-parallel attn.qkv", C, 3 * C, 3, 12);
            check_row_parallel(&t, "row-parallel attn.proj", C, C, 13);
            check_row_parallel(&t, "row-parallel mlp.proj", 4 * C, C, 14);
            for (int V : VOCABS) check_embedding(&t, V, 15);
        }
        t.tp = tp_of(&group, false);  // the loss takes whole rows: no sequence parallelism
        for (int V : VOCABS)
            for (float z_coef : {0.0f, 0.01f}) check_cross_entropy(&t, V, z_coef, 16);
        comm_group_free(&group);
        sizes += (sizes.empty() ? "" : " ") + std::to_string(size);
    }
    matmul_free(&t.mm);
    CUDA_CHECK(cudaFree(t.partials));
    if (comm.rank == 0) {
        if (t.failures)
            printf("tensor_parallel: FAILED %d of %d checks on %d ranks (tp %s)\n", t.failures,
                   t.checks, comm.world, sizes.c_str());
        else
            printf("all %d checks passed on %d ranks (tp %s)\n", t.checks, comm.world,
                   sizes.c_str());
    }
    comm_destroy(&comm);
    return t.failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
