// dev/cuda/fp8_matmul.cu: the FP8 linear layer of llmc/fp8_linear.cuh, one variant per recipe,
// checked product by product and timed against the bf16 layer.
// Variants: 1 tensor, 2 delayed, 3 rowwise, 4 block, 5 mx (MXFP8: a device of compute capability
// 10.0 or later; the CPU runtime under CUCC_COMPUTE_CAPABILITY=10.0; skipped, with a line, on
// others, as are row-wise and block scales where cuBLASLt lacks them: fp8_device_error).
// Checks, for each variant on four shapes (--small: N 256 and widths 128..512; else GPT-2 124M's
// attn.qkv, attn.proj, mlp.fc and mlp.proj at N = B x T = 8 x 1024):
//   - each operand the layer quantized (W, X for the forward; W^T, G for dX; X^T, G^T for dW)
//     dequantizes to its source within FP8's rounding in relative norm (2^-4 E4M3, 2^-3 E5M2:
//     a transposed or misplaced operand, or a wrong scale, is off by about 1 or more);
//   - each product equals the float64 product of those dequantized operands (forward with its
//     bias, dW added to the dW it started from), element by element within the bf16 rounding of
//     the output (2^-8 of it) plus the fp32 accumulation's bound (K 2^-24 times the sum of the
//     terms' magnitudes): every element with --small, 512 random ones per product otherwise.
// Bench (--bench): per shape, forward + backward of the layer (the three products and the
// quantization of X, X^T, G, G^T; the weights cached as in a training step) in TFLOP/s of
// 6 N IC OC, bf16 first (variant 6) then each recipe: the rows scripts/gpu_check.sh collects.
// Usage: ./fp8_matmul [variant] [--bench] [--small]
//! cucc: -lcublasLt
//! run: ./prog --small => pass /tensor[\s\S]*block[\s\S]*all checks passed/
//! run: CUCC_COMPUTE_CAPABILITY=10.0 ./prog --small 5 => pass /--fp8 mx attn.qkv[\s\S]*all checks passed/
#define TRAIN_GPT_MODEL_ONLY
#include "../../train_gpt.cu"
#include "common.h"
#include "fp8_common.h"

static const char* const VARIANTS[] = {"tensor", "delayed", "rowwise",
                                       "block",  "mx",      "bf16 (no FP8)"};
constexpr int NUM_RECIPE_VARIANTS = 5;

struct Shape {
    const char* name;
    int in, out;
};
static const Shape SMALL[] = {
    {"attn.qkv", 128, 384}, {"attn.proj", 128, 128}, {"mlp.fc", 128, 512}, {"mlp.proj", 512, 128}};
static const Shape GPT2[] = {{"attn.qkv", 768, 2304},
                             {"attn.proj", 768, 768},
                             {"mlp.fc", 768, 3072},
                             {"mlp.proj", 3072, 768}};

// ||dequantized operand - its source|| / ||source||: source(r, kk) is the operand's element.
template <class Source>
double operand_error(const HostFp8Operand* o, Source source) {
    double err = 0.0, norm = 0.0;
    for (int r = 0; r < o->rows; r++)
        for (int kk = 0; kk < o->k; kk++) {
            const double s = source(r, kk), v = host_fp8_value(o, r, kk);
            err += (v - s) * (v - s);
            norm += s * s;
        }
    return sqrt(err / norm);
}

// D (m x n, stored row-major as n rows of m: the layer's row-major output) against the float64
// product of A (m rows of k) and B (n rows of k), plus base[n][m] (bias per m, or the old D).
static bool check_product(const char* what, const std::vector<float>& d, const HostFp8Operand* a,
                          const HostFp8Operand* b, const std::vector<float>& base, bool bias_only,
                          bool every, uint64_t* rng) {
    const int m = a->rows, n = b->rows, k = a->k;
    const long count = every ? (long)m * n : 512;
    HostFp8Rows a_rows(a), b_rows(b);
    double worst = 0.0;
    for (long e = 0; e < count; e++) {
        const int i = every ? (int)(e % m) : (int)(rng_next(rng) % m);
        const int j = every ? (int)(e / m) : (int)(rng_next(rng) % n);
        const double *ai = a_rows.row(i), *bj = b_rows.row(j);
        double sum = bias_only ? base[i] : base[(size_t)j * m + i], abs_sum = fabs(sum);
        for (int kk = 0; kk < k; kk++) {
            const double t = ai[kk] * bj[kk];
            sum += t;
            abs_sum += fabs(t);
        }
        const double bound = 0x1p-8 * fabs(sum) + k * 0x1p-24 * abs_sum + 1e-30;
        worst = std::max(worst, fabs((double)d[(size_t)j * m + i] - sum) / bound);
    }
    const bool ok = worst <= 1.0;
    printf("%s  %s: %ld elements, worst error / bound %.3f\n", ok ? "PASS" : "FAIL", what, count,
           worst);
    return ok;
}

// The layer of one recipe on one shape: forward and backward, every operand and product checked.
static int check_recipe(int recipe, const Shape* s, int N, bool every, uint64_t* rng) {
    const Fp8Config config = {recipe, fp8_default_grad_e5m2(recipe), 0, 4, 0};
    Fp8State f;
    fp8_init(&f, &config, comm_group_of_one(), 1);
    fp8_add_layer(&f, s->in, s->out, Fp8Cut{false, false}, 0);
    DeviceLedger ledger = {};
    fp8_take_buffers(&f, N, &ledger);
    f.training = true;
    MatmulContext mm;
    matmul_init(&mm, 0, &ledger);
    const std::vector<floatX> x = random_floatx((size_t)N * s->in, rng, -2.0f, 2.0f),
                              w = random_floatx((size_t)s->out * s->in, rng, -0.05f, 0.05f),
                              bias = random_floatx(s->out, rng, -0.5f, 0.5f),
                              g = random_floatx((size_t)N * s->out, rng, -1e-3f, 1e-3f),
                              dw0 = random_floatx((size_t)s->out * s->in, rng, -0.01f, 0.01f);
    floatX *dx_in = device_copy(x), *dw_in = device_copy(w), *dbias = device_copy(bias),
           *dg = device_copy(g), *ddw = device_copy(dw0);
    floatX *dy = device_poisoned<floatX>((size_t)N * s->out),
           *ddx = device_poisoned<floatX>((size_t)N * s->in);
    fp8_linear_forward(&f, 0, &mm, dy, dx_in, dw_in, dbias, N);
    const std::vector<float> y = host_floats(dy, (size_t)N * s->out);
    Fp8Layer* l = &f.layers[0];
    const Fp8Weight* cached = fp8_weight(&f, l);
    Fp8TensorScale *xs = fp8_tensor_scale(&f, l, FP8_X), *ws = fp8_tensor_scale(&f, l, FP8_W),
                   *gs = fp8_tensor_scale(&f, l, FP8_G);
    const HostFp8Operand qw =
        host_fp8_operand(&f, cached->q, cached->scale, ws, s->out, s->in, true, __NV_E4M3);
    const HostFp8Operand qx =
        host_fp8_operand(&f, f.x.q, f.x.scale, xs, N, s->in, false, __NV_E4M3);
    fp8_linear_backward(&f, 0, &mm, ddx, ddw, dg, dx_in, dw_in, N);
    const std::vector<float> got_dx = host_floats(ddx, (size_t)N * s->in),
                             got_dw = host_floats(ddw, (size_t)s->out * s->in);
    const HostFp8Operand qwt =
        host_fp8_operand(&f, cached->qt, cached->scale_t, ws, s->in, s->out, true, __NV_E4M3);
    const HostFp8Operand qg =
        host_fp8_operand(&f, f.g.q, f.g.scale, gs, N, s->out, false, f.grad_format);
    const HostFp8Operand qgt =
        host_fp8_operand(&f, f.gt.q, f.gt.scale, gs, s->out, N, false, f.grad_format);
    const HostFp8Operand qxt =
        host_fp8_operand(&f, f.xt.q, f.xt.scale, xs, s->in, N, false, __NV_E4M3);
    int failures = 0;
    char what[160];
    // the operands against their sources
    auto at = [](const std::vector<floatX>& v, int cols, int r, int c) {
        return (double)(float)v[(size_t)r * cols + c];
    };
    struct {
        const char* name;
        const HostFp8Operand* o;
        const std::vector<floatX>* v;
        int cols;
        bool transposed;
    } operands[] = {{"W", &qw, &w, s->in, false},   {"X", &qx, &x, s->in, false},
                    {"W^T", &qwt, &w, s->in, true}, {"G", &qg, &g, s->out, false},
                    {"X^T", &qxt, &x, s->in, true}, {"G^T", &qgt, &g, s->out, true}};
    for (const auto& op : operands) {
        const double err = operand_error(op.o, [&](int r, int kk) {
            return op.transposed ? at(*op.v, op.cols, kk, r) : at(*op.v, op.cols, r, kk);
        });
        const double bound = op.o->format == 0 ? 0x1p-4 : 0x1p-3;
        const bool ok = err <= bound;
        failures += !ok;
        printf("%s  --fp8 %s %s: %s dequantizes within %.2e of its source (<= %.2e)\n",
               ok ? "PASS" : "FAIL", VARIANTS[recipe - 1], s->name, op.name, err, bound);
    }
    std::vector<float> bias_f(s->out), dw0_f(dw0.size()), zero((size_t)N * s->in, 0.0f);
    for (int i = 0; i < s->out; i++) bias_f[i] = (float)bias[i];
    for (size_t i = 0; i < dw0.size(); i++) dw0_f[i] = (float)dw0[i];
    snprintf(what, sizeof(what), "--fp8 %s %s forward Y = X W^T + b", VARIANTS[recipe - 1],
             s->name);
    failures += !check_product(what, y, &qw, &qx, bias_f, true, every, rng);
    snprintf(what, sizeof(what), "--fp8 %s %s dX = G W", VARIANTS[recipe - 1], s->name);
    failures += !check_product(what, got_dx, &qwt, &qg, zero, false, every, rng);
    snprintf(what, sizeof(what), "--fp8 %s %s dW += G^T X", VARIANTS[recipe - 1], s->name);
    failures += !check_product(what, got_dw, &qxt, &qgt, dw0_f, false, every, rng);
    device_free({dx_in, dw_in, dbias, dg, ddw, dy, ddx});
    matmul_free(&mm);
    fp8_free(&f);
    return failures;
}

// Forward + backward of the layer, bf16 (recipe FP8_OFF) or FP8, in ms.
static float time_layer(int recipe, const Shape* s, int N, uint64_t* rng) {
    Fp8Config config = {recipe, fp8_default_grad_e5m2(recipe), 0, 4, 0};
    Fp8State f = {};
    DeviceLedger ledger = {};
    if (recipe != FP8_OFF) {
        fp8_init(&f, &config, comm_group_of_one(), 1);
        fp8_add_layer(&f, s->in, s->out, Fp8Cut{false, false}, 0);
        fp8_take_buffers(&f, N, &ledger);
        f.training = true;
    }
    const Fp8Use use = recipe == FP8_OFF ? FP8_NONE : Fp8Use{&f, 0};
    MatmulContext mm;
    matmul_init(&mm, 0, &ledger);
    floatX* x = device_copy(random_floatx((size_t)N * s->in, rng, -2.0f, 2.0f));
    floatX* w = device_copy(random_floatx((size_t)s->out * s->in, rng, -0.05f, 0.05f));
    floatX* g = device_copy(random_floatx((size_t)N * s->out, rng, -1e-3f, 1e-3f));
    floatX* y = device_poisoned<floatX>((size_t)N * s->out);
    floatX* dx = device_poisoned<floatX>((size_t)N * s->in);
    floatX* dw = device_poisoned<floatX>((size_t)s->out * s->in);
    CUDA_CHECK(cudaMemset(dw, 0, (size_t)s->out * s->in * sizeof(floatX)));
    const float ms = time_ms(
        [&] {
            linear_forward(&mm, use, y, x, w, nullptr, N, s->in, s->out);
            linear_backward(&mm, use, dx, dw, nullptr, nullptr, g, x, w, N, s->in, s->out);
        },
        bench_warmup(), bench_repeats());
    device_free({x, w, g, y, dx, dw});
    matmul_free(&mm);
    if (recipe != FP8_OFF) fp8_free(&f);
    return ms;
}

int main(int argc, char** argv) {
    const Options o = parse_options(argc, argv, NUM_RECIPE_VARIANTS + 1, VARIANTS);
    print_header("fp8_matmul");
    int major = 0, minor = 0;
    device_compute_capability(&major, &minor);
    const Shape* shapes = o.small ? SMALL : GPT2;
    const int N = o.small ? 256 : 8 * 1024;
    uint64_t rng = 42;
    int failures = 0;
    bool runnable[NUM_RECIPE_VARIANTS + 1] = {};
    for (int v = 1; v <= NUM_RECIPE_VARIANTS; v++) {
        if (!variant_selected(&o, v)) continue;
        char msg[256];
        if (const char* err = fp8_device_error(v, major, minor, msg, sizeof(msg))) {
            printf("skip  %s\n", err);
            continue;
        }
        runnable[v] = true;
        for (int i = 0; i < 4; i++) failures += check_recipe(v, &shapes[i], N, o.small, &rng);
    }
    if (o.bench) {
        print_bench_intro(o.small ? "N 256, widths 128..512" : "GPT-2 124M, N = 8 x 1024");
        for (int i = 0; i < 4; i++) {
            const Shape* s = &shapes[i];
            const double flops = 6.0 * N * s->in * s->out;
            char name[96];
            snprintf(name, sizeof(name), "%s %dx%d, bf16", s->name, s->in, s->out);
            print_bench("fp8_matmul", NUM_RECIPE_VARIANTS + 1, name,
                        time_layer(FP8_OFF, s, N, &rng), 0, flops);
            for (int v = 1; v <= NUM_RECIPE_VARIANTS; v++) {
                if (!runnable[v]) continue;
                snprintf(name, sizeof(name), "%s %dx%d, --fp8 %s", s->name, s->in, s->out,
                         VARIANTS[v - 1]);
                print_bench("fp8_matmul", v, name, time_layer(v, s, N, &rng), 0, flops);
            }
        }
    }
    return finish("fp8_matmul", failures);
}
