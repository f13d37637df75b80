// dev/cuda/fused_classifier.cu: the fused softmax + cross-entropy + z-loss + dlogits kernel,
// checked against a float64 host reference and timed. For each row n of the (N, Vp) logits, over
// the first V columns (the rest is vocabulary padding), with log Z = log(sum_c exp(x_c)):
//   loss_n = log Z - x_target;  z_n = z_coef * (log Z)^2;  with dloss > 0 the logits are
//   overwritten by dlogits_c = dloss * (softmax(x)_c (1 + 2 z_coef log Z) - [c == target]) (the
//   gradient of loss_n + z_n) and the padding columns by 0; with dloss = 0 only the losses are
//   written and the logits are left as they were. Every shape runs with z_coef 0 and 0.02.
// Layout: logits (N, Vp) row-major floatX; targets (N) int; losses, z_losses (N) float.
// Variants:
//   1  one thread per row: a max pass, a sum pass and a write pass over global memory
//   2  train_gpt.cu fused_classifier: one warp per row, online softmax, 128-bit loads
// Usage: ./fused_classifier [variant] [--bench] [--small]
// Built with -DROW_LANES=32, the GPU's warp per row, also on the CPU runtime (whose trainer
// build gives a row one thread; see ROW_LANES in llmc/common.cuh), so both forms are checked.
//! cucc: -lcublasLt -DROW_LANES=32
//! run: ./prog --small => pass /all checks passed/
//! run: ./prog --small --bench => pass /bench fused_classifier variant 2: [\s\S]*all checks passed/
#define TRAIN_GPT_MODEL_ONLY
#include "../../train_gpt.cu"
#include "common.h"

static const char* const VARIANTS[] = {
    "one thread per row, three passes",
    "train_gpt.cu fused_classifier (warp per row, online softmax)"};
constexpr int NUM_VARIANTS = 2;

// Variant 1: thread `row` owns one row of logits.
__global__ void fused_classifier_row_kernel(floatX* logits, float* losses, float* z_losses,
                                            const int* targets, int N, int V, int Vp, float dloss,
                                            float z_coef) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    floatX* x = logits + (size_t)row * Vp;
    float m = -INFINITY;
    for (int c = 0; c < V; c++) m = fmaxf(m, (float)x[c]);
    float sum = 0.0f;
    for (int c = 0; c < V; c++) sum += expf((float)x[c] - m);
    const int target = targets[row];
    const float log_z = m + logf(sum);
    losses[row] = log_z - (float)x[target];
    z_losses[row] = z_coef * log_z * log_z;
    if (dloss == 0.0f) return;
    for (int c = 0; c < Vp; c++) {
        float p = c < V ? expf((float)x[c] - m) / sum * (1.0f + 2.0f * z_coef * log_z) : 0.0f;
        x[c] = (floatX)(c < V ? dloss * (p - (c == target ? 1.0f : 0.0f)) : 0.0f);
    }
}

static void launch(int variant, int block_size, floatX* logits, float* losses, float* z_losses,
                   const int* targets, int N, int V, int Vp, float dloss, float z_coef) {
    if (variant == 1) {
        fused_classifier_row_kernel<<<(int)ceil_div(N, block_size), block_size>>>(
            logits, losses, z_losses, targets, N, V, Vp, dloss, z_coef);
        CUDA_CHECK_LAUNCH();
    } else {
        classifier(tp_single(), logits, losses, z_losses, nullptr, nullptr, nullptr, targets, N, V,
                   Vp, dloss, z_coef, 0);
    }
}

struct Reference {
    std::vector<double> loss, loss_scale, z, z_scale, dlogits, dlogits_scale;
};

// Float64 reference. A float sum of V positive terms is off by ~2^-24 sqrt(V) relative (random
// walk), which moves log(sum) and every probability by that much: the scales carry sqrt(V) next
// to the magnitudes of the terms (log Z's error, sqrt(V) + |m|, carried through the z-loss and
// its factor on the probabilities).
static Reference reference(const std::vector<floatX>& logits, const std::vector<int>& targets,
                           int N, int V, int Vp, double dloss, double z_coef) {
    Reference r;
    r.dlogits.assign((size_t)N * Vp, 0.0);
    r.dlogits_scale.assign((size_t)N * Vp, 0.0);
    for (int row = 0; row < N; row++) {
        const floatX* x = &logits[(size_t)row * Vp];
        double m = -INFINITY, sum = 0.0;
        for (int c = 0; c < V; c++) m = std::max(m, (double)(float)x[c]);
        for (int c = 0; c < V; c++) sum += exp((double)(float)x[c] - m);
        const int target = targets[row];
        const double log_z = m + log(sum), lse_err = sqrt((double)V) + fabs(m);
        const double z_factor = 1.0 + 2.0 * z_coef * log_z;
        r.loss.push_back(log_z - (float)x[target]);
        r.loss_scale.push_back(lse_err + fabs((double)(float)x[target]));
        r.z.push_back(z_coef * log_z * log_z);
        r.z_scale.push_back(z_coef * (2.0 * fabs(log_z) * lse_err + log_z * log_z));
        for (int c = 0; c < V; c++) {
            double p = exp((double)(float)x[c] - m) / sum, onehot = c == target ? 1.0 : 0.0;
            r.dlogits[(size_t)row * Vp + c] = dloss * (p * z_factor - onehot);
            r.dlogits_scale[(size_t)row * Vp + c] =
                dloss * (p * (sqrt((double)V) + fabs((float)x[c] - m)) * fabs(z_factor) +
                         p * 2.0 * z_coef * lse_err + onehot);
        }
    }
    return r;
}

// float arithmetic: within ~1e-6 of the scale; dlogits are floatX, rounded once; the padding
// columns must be exactly 0 (scale 0) and dloss = 0 must leave the logits bit for bit.
static const Tolerance TOL_LOSS = {1e-6, 0.0};
static const Tolerance TOL_DLOGITS = {1e-6, FLOATX_ROUNDOFF};
static const Tolerance TOL_EXACT = {0.0, 0.0};

// Random logits in [-3, 3]; every third row's target gets a logit of 12 so its probability is
// close to 1 and p - 1 cancels.
static void make_inputs(int N, int V, int Vp, uint64_t seed, std::vector<floatX>* logits,
                        std::vector<int>* targets) {
    uint64_t rng = seed;
    *logits = random_floatx((size_t)N * Vp, &rng, -3.0f, 3.0f);
    targets->resize(N);
    for (int row = 0; row < N; row++) {
        (*targets)[row] = (int)(rng_next(&rng) % (uint64_t)V);
        if (row % 3 == 0) (*logits)[(size_t)row * Vp + (*targets)[row]] = (floatX)12.0f;
    }
}

// Checks every selected variant on one shape, with and without dlogits, at one z-loss
// coefficient; returns the failure count.
static int check_shape(const Options* o, int N, int V, double z_coef, uint64_t seed) {
    const int Vp = padded_vocab_of(V);
    const double dloss = 1.0 / N;
    std::vector<floatX> logits;
    std::vector<int> targets;
    make_inputs(N, V, Vp, seed, &logits, &targets);
    Reference ref = reference(logits, targets, N, V, Vp, dloss, z_coef);
    std::vector<double> unchanged = to_double(logits);
    floatX* d_logits = device_copy(logits);
    int* d_targets = device_copy(targets);
    float* d_losses = device_poisoned<float>(N);
    float* d_z_losses = device_poisoned<float>(N);
    int failures = 0;
    for (int v = 1; v <= NUM_VARIANTS; v++) {
        if (!variant_selected(o, v)) continue;
        const std::vector<int> block_sizes =
            v == 1 ? std::vector<int>{32, 256} : std::vector<int>{0};
        for (int block_size : block_sizes)
            for (bool backward : {true, false}) {
                CUDA_CHECK(cudaMemcpy(d_logits, logits.data(), logits.size() * sizeof(floatX),
                                      cudaMemcpyHostToDevice));
                CUDA_CHECK(cudaMemset(d_losses, 0xff, N * sizeof(float)));
                CUDA_CHECK(cudaMemset(d_z_losses, 0xff, N * sizeof(float)));
                launch(v, block_size, d_logits, d_losses, d_z_losses, d_targets, N, V, Vp,
                       backward ? (float)dloss : 0.0f, (float)z_coef);
                CUDA_CHECK(cudaDeviceSynchronize());
                printf("  variant %d N %d V %d Vp %d dloss %g z-loss %g block %d\n", v, N, V, Vp,
                       backward ? dloss : 0.0, z_coef, block_size);
                bool ok = check_close("loss", host_floats(d_losses, N), ref.loss, ref.loss_scale,
                                      TOL_LOSS);
                ok &= check_close("z-loss", host_floats(d_z_losses, N), ref.z, ref.z_scale,
                                  z_coef > 0.0 ? TOL_LOSS : TOL_EXACT);
                std::vector<float> after = host_floats(d_logits, logits.size());
                if (backward)
                    ok &=
                        check_close("dlogits", after, ref.dlogits, ref.dlogits_scale, TOL_DLOGITS);
                else ok &= check_close("logits", after, unchanged, {}, TOL_EXACT);
                failures += !ok;
            }
    }
    device_free({d_logits, d_targets, d_losses, d_z_losses});
    return failures;
}

static void bench(const Options* o) {
    const int N = o->small ? 16 : 4 * 1024, V = o->small ? 1000 : 50257, Vp = padded_vocab_of(V);
    char shape[128];
    snprintf(shape, sizeof(shape), "N %d V %d Vp %d, with dlogits (GPT-2 124M, B*T = %d)", N, V, Vp,
             N);
    print_bench_intro(shape);
    std::vector<floatX> logits;
    std::vector<int> targets;
    make_inputs(N, V, Vp, 7, &logits, &targets);
    floatX* d_logits = device_copy(logits);
    int* d_targets = device_copy(targets);
    float* d_losses = device_poisoned<float>(N);
    float* d_z_losses = device_poisoned<float>(N);
    // read the logits once, write the dlogits once (each run starts from the last one's dlogits)
    const double bytes = 2.0 * N * Vp * sizeof(floatX);
    bench_variants(o, "fused_classifier", VARIANTS, NUM_VARIANTS, bytes, 0.0, [&](int v) {
        launch(v, 256, d_logits, d_losses, d_z_losses, d_targets, N, V, Vp, 1.0f / N, 1e-4f);
    });
    device_free({d_logits, d_targets, d_losses, d_z_losses});
}

int main(int argc, char** argv) {
    Options o = parse_options(argc, argv, NUM_VARIANTS, VARIANTS);
    print_header("fused_classifier");
    struct Shape {
        int N, V;
    };
    std::vector<Shape> shapes = {{1, 1}, {3, 100}, {9, 1000}, {40, 130}, {17, 50257}};
    if (!o.small) shapes.insert(shapes.end(), {{1024, 50257}, {300, 32000}});
    int failures = 0;
    for (size_t s = 0; s < shapes.size(); s++)
        for (double z_coef : {0.0, 0.02})
            failures += check_shape(&o, shapes[s].N, shapes[s].V, z_coef, 500 + s);
    if (o.bench) bench(&o);
    return finish("fused_classifier", failures);
}
