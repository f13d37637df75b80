// dev/cuda/newton_schulz.cu: Muon's Newton-Schulz orthogonalization (llmc/muon.cuh), checked
// against a float64 host reference and against PyTorch's own results, and timed on GPT-2 124M's
// matrix shapes. For an (A, B) matrix G, as torch.optim._muon._zeropower_via_newtonschulz:
//   X = G as floatX, transposed to (B, A) when A > B (so X is (m, n) with m <= n);
//   X /= max(||X||_F, 1e-7);  `steps` times: gram = X X^T, poly = b gram + c gram^2,
//   X = a X + poly X, (a, b, c) = (3.4445, -4.7750, 2.0315); the result transposed back.
// Layout: X, the next X (m, n) and gram, poly (m, m) row-major floatX (MuonWorkspace).
// Variants:
//   1  llmc/muon.cuh newton_schulz: every product one cuBLASLt call (matmul_general)
//   2  one thread per output element for every product (fp32 sums, one rounding), no cuBLASLt
// Checks, for every variant:
//   - against a float64 host reference of the same iteration that rounds what each step stores
//     (the norm, X, gram, poly) to floatX as the device does: it then differs from the device
//     only where fp32 and float64 sums round a stored value differently;
//   - with --torch FILE (written by dev/cuda/newton_schulz_torch.py): against PyTorch on its own
//     inputs, the fp32 build against the float32 copy of torch's function, the bf16 build against
//     torch's bfloat16 one, and the seed example's singular values (about 919, 74, 6 before, 1.20,
//     0.87, 0.68 after 5 steps) from our result, by Jacobi's method in float64.
// Usage: ./newton_schulz [variant] [--bench] [--small] [--torch FILE]
//! cucc: -lcublasLt
//! run: python3 dev/cuda/newton_schulz_torch.py --out build/newton_schulz_torch.bin && ./prog --small --torch build/newton_schulz_torch.bin => pass /seed example[\s\S]*all checks passed/
//! run: ./prog --small --bench => pass /bench newton_schulz variant 1: [\s\S]*all checks passed/
#define TRAIN_GPT_MODEL_ONLY
#include "../../train_gpt.cu"
#include "common.h"

static const char* const VARIANTS[] = {"llmc/muon.cuh newton_schulz (cuBLASLt products)",
                                       "one thread per output element, no cuBLASLt"};
constexpr int NUM_VARIANTS = 2;

// Variant 2's product, row-major: D (M, N) = alpha * A B^T' + beta * C, with A (M, K), B stored
// (N, K) when b_transposed (B^T' = B^T) else (K, N); thread (i, j) owns D[i][j] and sums over k
// in order, in fp32, then rounds once. C may be nullptr (beta 0).
__global__ void product_kernel(floatX* d, const floatX* a, const floatX* b, const floatX* c,
                               float alpha, float beta, int M, int N, int K, bool b_transposed) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
    if (j >= N) return;
    float sum = 0.0f;
    for (int k = 0; k < K; k++)
        sum += (float)a[(size_t)i * K + k] *
               (float)(b_transposed ? b[(size_t)j * K + k] : b[(size_t)k * N + j]);
    const float cv = c ? beta * (float)c[(size_t)i * N + j] : 0.0f;
    d[(size_t)i * N + j] = (floatX)(alpha * sum + cv);
}

static void product(floatX* d, const floatX* a, const floatX* b, const floatX* c, float alpha,
                    float beta, int M, int N, int K, bool b_transposed) {
    const int block = 128;
    product_kernel<<<dim3((unsigned)ceil_div(N, block), M), block>>>(d, a, b, c, alpha, beta, M, N,
                                                                     K, b_transposed);
    CUDA_CHECK_LAUNCH();
}

// Variant 2: the iteration of llmc/muon.cuh with product_kernel for the products (the norm and
// the division are the shipped kernels). Returns the buffer holding the result.
static const floatX* newton_schulz_plain(MuonWorkspace* ws, int m, int n, int steps) {
    const size_t numel = (size_t)m * n;
    l2_norm(ws->norm, ws->norm + 1, ws->x, numel, norm_blocks_for(numel), 0);
    muon_normalize_kernel<<<grid_for(numel, 256), 256>>>(ws->x, numel, ws->norm);
    CUDA_CHECK_LAUNCH();
    floatX* x = ws->x;
    floatX* next = ws->x_next;
    for (int s = 0; s < steps; s++) {
        product(ws->gram, x, x, nullptr, 1.0f, 0.0f, m, m, n, true);
        product(ws->poly, ws->gram, ws->gram, ws->gram, NS_C, NS_B, m, m, m, false);
        product(next, ws->poly, x, x, 1.0f, NS_A, m, n, m, false);
        std::swap(x, next);
    }
    return x;
}

// One case: an (rows, cols) input, the steps, and PyTorch's results when they came from a file.
struct Case {
    char name[96];
    int rows, cols, steps;
    std::vector<float> g, torch_bf16, torch_fp32;  // row-major (rows, cols)
    std::vector<double> sv_in, sv_bf16, sv_fp32;   // torch.linalg.svdvals, descending
};

// Reads dev/cuda/newton_schulz_torch.py's file (format in its docstring).
static std::vector<Case> read_torch_cases(const char* path) {
    uint32_t count;
    FILE* f = torch_file_open(path, "NSTORCH1", "dev/cuda/newton_schulz_torch.py", &count);
    std::vector<Case> cases(count);
    for (Case& c : cases) {
        const std::string name = torch_file_string(f, path);
        if (name.size() >= sizeof(c.name)) fatal("%s: a case name of %zu bytes", path, name.size());
        snprintf(c.name, sizeof(c.name), "%s", name.c_str());
        int dims[3];
        FREAD_CHECK(dims, 4, 3, f);
        c.rows = dims[0];
        c.cols = dims[1];
        c.steps = dims[2];
        if (c.rows < 1 || c.cols < 1 || c.rows > 1 << 14 || c.cols > 1 << 14)
            fatal("%s: case %s has shape (%d, %d)", path, c.name, c.rows, c.cols);
        const size_t n = (size_t)c.rows * c.cols, k = std::min(c.rows, c.cols);
        for (std::vector<float>* v : {&c.g, &c.torch_bf16, &c.torch_fp32}) {
            v->resize(n);
            FREAD_CHECK(v->data(), 4, n, f);
        }
        for (std::vector<double>* v : {&c.sv_in, &c.sv_bf16, &c.sv_fp32}) {
            v->resize(k);
            FREAD_CHECK(v->data(), 8, k, f);
        }
    }
    fclose(f);
    return cases;
}

static Case random_case(const char* name, int rows, int cols, int steps, uint64_t seed) {
    Case c;
    snprintf(c.name, sizeof(c.name), "%s", name);
    c.rows = rows;
    c.cols = cols;
    c.steps = steps;
    uint64_t rng = seed;
    c.g.resize((size_t)rows * cols);
    for (float& v : c.g) v = (float)rng_normal(&rng);
    return c;
}

// The case's input as the (m, n) floatX matrix X of the iteration (transposed when tall).
static std::vector<floatX> iteration_input(const Case* c) {
    const bool tall = c->rows > c->cols;
    std::vector<floatX> x((size_t)c->rows * c->cols);
    for (int r = 0; r < c->rows; r++)
        for (int k = 0; k < c->cols; k++)
            x[tall ? (size_t)k * c->rows + r : (size_t)r * c->cols + k] =
                (floatX)c->g[(size_t)r * c->cols + k];
    return x;
}

// An (m, n) iteration result back in the case's (rows, cols) orientation.
static std::vector<double> to_case_layout(const Case* c, const std::vector<double>& x) {
    const bool tall = c->rows > c->cols;
    std::vector<double> out(x.size());
    for (int r = 0; r < c->rows; r++)
        for (int k = 0; k < c->cols; k++)
            out[(size_t)r * c->cols + k] =
                x[tall ? (size_t)k * c->rows + r : (size_t)r * c->cols + k];
    return out;
}

// The float64 reference: the iteration in double, rounding each stored value to floatX.
static std::vector<double> reference(const std::vector<floatX>& x0, int m, int n, int steps) {
    std::vector<double> x(x0.size()), gram((size_t)m * m), poly((size_t)m * m), next(x0.size());
    double sq = 0.0;
    for (size_t i = 0; i < x0.size(); i++) {
        x[i] = (double)(float)x0[i];
        sq += x[i] * x[i];
    }
    const double s = round_floatx(std::max(round_floatx(sqrt(sq)), (double)MUON_EPS));
    for (double& v : x) v = round_floatx(v / s);
    for (int step = 0; step < steps; step++) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++) {
                double acc = 0.0;
                for (int k = 0; k < n; k++) acc += x[(size_t)i * n + k] * x[(size_t)j * n + k];
                gram[(size_t)i * m + j] = round_floatx(acc);
            }
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++) {
                double acc = 0.0;
                for (int k = 0; k < m; k++)
                    acc += gram[(size_t)i * m + k] * gram[(size_t)k * m + j];
                poly[(size_t)i * m + j] =
                    round_floatx((double)NS_C * acc + (double)NS_B * gram[(size_t)i * m + j]);
            }
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double acc = 0.0;
                for (int k = 0; k < m; k++) acc += poly[(size_t)i * m + k] * x[(size_t)k * n + j];
                next[(size_t)i * n + j] = round_floatx(acc + (double)NS_A * x[(size_t)i * n + j]);
            }
        std::swap(x, next);
    }
    return x;
}

// Singular values of a (rows, cols) matrix, descending: square roots of the eigenvalues of its
// smaller Gram matrix, by cyclic Jacobi rotations in float64.
static std::vector<double> singular_values(const std::vector<double>& a, int rows, int cols) {
    const bool wide = rows < cols;
    const int k = std::min(rows, cols), len = std::max(rows, cols);
    auto at = [&](int i, int l) {  // element l of line i of the smaller side
        return wide ? a[(size_t)i * cols + l] : a[(size_t)l * cols + i];
    };
    std::vector<double> g((size_t)k * k);
    for (int i = 0; i < k; i++)
        for (int j = 0; j < k; j++) {
            double acc = 0.0;
            for (int l = 0; l < len; l++) acc += at(i, l) * at(j, l);
            g[(size_t)i * k + j] = acc;
        }
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0.0, diag = 0.0;
        for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++)
                (i == j ? diag : off) += g[(size_t)i * k + j] * g[(size_t)i * k + j];
        if (off <= 1e-30 * diag) break;
        for (int p = 0; p < k; p++)
            for (int q = p + 1; q < k; q++) {
                const double apq = g[(size_t)p * k + q];
                if (apq == 0.0) continue;
                const double theta = (g[(size_t)q * k + q] - g[(size_t)p * k + p]) / (2.0 * apq);
                const double t =
                    (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1));
                const double c = 1.0 / sqrt(t * t + 1), s = t * c;
                for (int r = 0; r < k; r++) {  // columns p and q, then rows p and q
                    const double gp = g[(size_t)r * k + p], gq = g[(size_t)r * k + q];
                    g[(size_t)r * k + p] = c * gp - s * gq;
                    g[(size_t)r * k + q] = s * gp + c * gq;
                }
                for (int r = 0; r < k; r++) {
                    const double gp = g[(size_t)p * k + r], gq = g[(size_t)q * k + r];
                    g[(size_t)p * k + r] = c * gp - s * gq;
                    g[(size_t)q * k + r] = s * gp + c * gq;
                }
            }
    }
    std::vector<double> sv(k);
    for (int i = 0; i < k; i++) sv[i] = sqrt(std::max(0.0, g[(size_t)i * k + i]));
    std::sort(sv.begin(), sv.end(), std::greater<double>());
    return sv;
}

static double rel_error(const std::vector<double>& a, const std::vector<double>& b) {
    double d2 = 0.0, b2 = 0.0;
    for (size_t i = 0; i < a.size(); i++) {
        d2 += (a[i] - b[i]) * (a[i] - b[i]);
        b2 += b[i] * b[i];
    }
    return std::isfinite(d2) ? sqrt(d2 / b2) : INFINITY;
}

static std::vector<double> as_double(const std::vector<float>& v) {
    return std::vector<double>(v.begin(), v.end());
}

// Our result for the case with variant v, in the case's orientation.
static std::vector<double> run_variant(int v, const Case* c, MatmulContext* mm) {
    const int m = std::min(c->rows, c->cols), n = std::max(c->rows, c->cols);
    MuonWorkspace ws;
    DeviceLedger ledger = {};
    muon_workspace_init(&ws, (size_t)m * n, (size_t)m * m, &ledger);
    const std::vector<floatX> x0 = iteration_input(c);
    CUDA_CHECK(cudaMemcpy(ws.x, x0.data(), x0.size() * sizeof(floatX), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(ws.x_next, 0xff, x0.size() * sizeof(floatX)));  // NaN: must be written
    const floatX* out = v == 1 ? newton_schulz(&ws, mm, m, n, c->steps, 0)
                               : newton_schulz_plain(&ws, m, n, c->steps);
    const std::vector<float> got = host_floats(out, x0.size());
    muon_workspace_free(&ws);
    return to_case_layout(c, as_double(got));
}

// Bounds (relative norm error). Against the rounding-faithful float64 reference: the two differ
// where an fp32 sum of up to n products rounds a stored value to the other floatX neighbour
// than the float64 sum does. fp32: each stored value is off by up to ~n 2^-24 relative, and the
// iteration amplifies a perturbation by at most its largest slope (a = 3.4445 per step, ~490
// over 5 steps, reached only by directions of tiny singular values): 1e-5 leaves room for it on
// these well-conditioned inputs. bf16: a stored value is rounded the other way with probability
// ~ n 2^-24 / 2^-8 (~1e-3 of the elements for n ~ 100), each by one bf16 step (2^-8); such flips
// in 15 products of 5 steps, amplified as above, measure up to 6.3e-3 here: 1e-2.
// Against PyTorch: the fp32 build computes exactly torch's float32 iteration in another
// summation order: 1e-5 as above (except the rank-16 case, whose null space amplifies fp32
// noise without bound: no check there, printed only). The bf16 build computes torch's bfloat16
// iteration; the bound comes from how far torch's own bfloat16 run moves its result from its
// float32 run (d = rel(torch bf16, torch fp32)): ours must be no further from torch's bf16 result
// than d (two bf16 runs of the same iteration, rounding differently), printed next to it.
constexpr double REF_BOUND = FLOATX_IS_FP32 ? 1e-5 : 1e-2;
constexpr double TORCH_FP32_BOUND = 1e-5;
constexpr double MAX_HOST_WORK = 1e9;  // m^2 n steps of the largest case the host reference runs

// One relative-error check of variant v: printed, and whether it passed. A rank-deficient
// input's result is not held to the fp32 bound (its null space amplifies any rounding).
static bool held(int v, const char* against, double e, double bound, bool rank_deficient) {
    const bool ok = e <= bound || rank_deficient;
    printf("    variant %d vs %s: rel %.3e (bound %.3e%s) %s\n", v, against, e, bound,
           rank_deficient ? ", not held: rank-deficient" : "", ok ? "ok" : "FAIL");
    return ok;
}

static int check_case(const Options* o, const Case* c, MatmulContext* mm, bool from_torch) {
    const int m = std::min(c->rows, c->cols), n = std::max(c->rows, c->cols);
    const bool rank_deficient = strstr(c->name, "rank") != nullptr;
    printf("  %s (%d steps)\n", c->name, c->steps);
    // the float64 reference runs on the host: GPT-2's shapes (from --large files) only against
    // PyTorch
    const bool host_sized = (double)m * m * n * c->steps <= MAX_HOST_WORK;
    const std::vector<double> ref =
        host_sized ? to_case_layout(c, reference(iteration_input(c), m, n, c->steps))
                   : std::vector<double>();
    int failures = 0;
    for (int v = 1; v <= NUM_VARIANTS; v++) {
        if (!variant_selected(o, v)) continue;
        const std::vector<double> got = run_variant(v, c, mm);
        if (host_sized)
            failures +=
                !held(v, "float64 reference", rel_error(got, ref), REF_BOUND, rank_deficient);
        if (!from_torch) continue;
        const std::vector<double> bf16 = as_double(c->torch_bf16), fp32 = as_double(c->torch_fp32);
        const double d = rel_error(bf16, fp32);
        if (FLOATX_IS_FP32) {
            failures += !held(v, "torch float32 iteration", rel_error(got, fp32), TORCH_FP32_BOUND,
                              rank_deficient);
        } else {
            printf("    (torch's bf16 iteration is d = %.3e from its fp32 one; ours %.3e)\n", d,
                   rel_error(got, fp32));
            failures += !held(v, "torch bfloat16 iteration", rel_error(got, bf16), d, false);
        }
        if (v != 1 || strncmp(c->name, "seed", 4) != 0) continue;
        // The seed example: singular values before and after, ours by Jacobi against torch's.
        const std::vector<double> sv_in = singular_values(as_double(c->g), c->rows, c->cols);
        const std::vector<double> sv_out = singular_values(got, c->rows, c->cols);
        const std::vector<double>& torch_out = FLOATX_IS_FP32 ? c->sv_fp32 : c->sv_bf16;
        const size_t k = sv_in.size(), mid = k / 2;
        printf(
            "    seed example singular values (max, middle, min): before %.1f %.1f %.2f "
            "(torch %.1f %.1f %.2f), after %.3f %.3f %.3f (torch %.3f %.3f %.3f)\n",
            sv_in[0], sv_in[mid], sv_in[k - 1], c->sv_in[0], c->sv_in[mid], c->sv_in[k - 1],
            sv_out[0], sv_out[mid], sv_out[k - 1], torch_out[0], torch_out[mid], torch_out[k - 1]);
        // Jacobi against svdvals on the same float32 input: float64 agreement (1e-9). After:
        // the seed's rounded figures (919, 6; 1.20, 0.68) to their last digit, and torch's
        // values to the bound of the result itself (every singular value moves by at most the
        // matrix's error, ||E||_2 <= ||E||_F = rel * ||O||_F).
        double sv_in_err = 0.0, sv_out_err = 0.0, o_norm = 0.0;
        for (size_t i = 0; i < k; i++) {
            sv_in_err = std::max(sv_in_err, fabs(sv_in[i] - c->sv_in[i]) / c->sv_in[i]);
            sv_out_err = std::max(sv_out_err, fabs(sv_out[i] - torch_out[i]));
            o_norm += torch_out[i] * torch_out[i];
        }
        const double out_bound = (FLOATX_IS_FP32 ? TORCH_FP32_BOUND : d) * sqrt(o_norm);
        const bool ok = sv_in_err <= 1e-9 && fabs(sv_in[0] - 919) < 0.5 &&
                        fabs(sv_in[k - 1] - 6) < 0.5 && fabs(sv_out[0] - 1.20) < 0.005 &&
                        fabs(sv_out[k - 1] - 0.68) < 0.005 && sv_out_err <= out_bound;
        printf(
            "    seed example: before vs svdvals rel %.1e (bound 1e-9), after vs torch max "
            "abs %.2e (bound %.2e), seed's figures %s\n",
            sv_in_err, sv_out_err, out_bound, ok ? "ok" : "FAIL");
        failures += !ok;
    }
    return failures;
}

// GPT-2 124M's Muon matrices (C = 768): per layer four (C, C) matrices (q, k, v, attn.proj) and
// the (4C, C) and (C, 4C) MLP matrices, both iterated as (C, 4C).
static void bench(const Options* o, MatmulContext* mm) {
    const int C = o->small ? 64 : 768, L = 12;
    char shape[160];
    snprintf(shape, sizeof(shape),
             "GPT-2 124M's Muon matrices at C = %d: (C, C) and (C, 4C), 5 steps; a step of %d "
             "layers runs 4 of the first and 2 of the second per layer",
             C, L);
    print_bench_intro(shape);
    double total_ms[NUM_VARIANTS + 1] = {};
    for (int shape_i = 0; shape_i < 2; shape_i++) {
        const int m = C, n = shape_i == 0 ? C : 4 * C, per_layer = shape_i == 0 ? 4 : 2;
        Case c = random_case("bench", m, n, 5, 99);
        MuonWorkspace ws;
        DeviceLedger ledger = {};
        muon_workspace_init(&ws, (size_t)m * n, (size_t)m * m, &ledger);
        const std::vector<floatX> x0 = iteration_input(&c);
        const double flops = 5.0 * (4.0 * m * m * n + 2.0 * (double)m * m * m);
        char name[160];
        for (int v = 1; v <= NUM_VARIANTS; v++) {
            if (!variant_selected(o, v)) continue;
            if (v == 2 && !o->small) continue;  // the plain kernel is for checking, far too slow
            const float ms = time_ms(
                [&] {
                    CUDA_CHECK(cudaMemcpy(ws.x, x0.data(), x0.size() * sizeof(floatX),
                                          cudaMemcpyHostToDevice));
                    if (v == 1) newton_schulz(&ws, mm, m, n, 5, 0);
                    else newton_schulz_plain(&ws, m, n, 5);
                },
                bench_warmup(), bench_repeats());
            snprintf(name, sizeof(name), "%s, (%d, %d)", VARIANTS[v - 1], m, n);
            print_bench("newton_schulz", v, name, ms, 0.0, flops);
            total_ms[v] += per_layer * L * ms;
        }
        muon_workspace_free(&ws);
    }
    for (int v = 1; v <= NUM_VARIANTS; v++)
        if (total_ms[v] > 0)
            printf("variant %d: Newton-Schulz of one optimizer step of %d layers: %.3f ms\n", v, L,
                   total_ms[v]);
}

int main(int argc, char** argv) {
    Options o = parse_options(argc, argv, NUM_VARIANTS, VARIANTS);
    print_header("newton_schulz");
    MatmulContext mm;
    DeviceLedger ledger = {};
    matmul_init(&mm, 0, &ledger);
    int failures = 0;
    if (o.torch_file) {
        printf("PyTorch's results from %s:\n", o.torch_file);
        for (const Case& c : read_torch_cases(o.torch_file))
            failures += check_case(&o, &c, &mm, true);
    }
    printf("random inputs:\n");
    std::vector<Case> cases = {random_case("wide", 24, 72, 5, 1), random_case("tall", 80, 40, 5, 2),
                               random_case("square", 48, 48, 5, 3),
                               random_case("odd", 33, 17, 4, 4),
                               random_case("one step", 16, 16, 1, 5)};
    if (!o.small) cases.push_back(random_case("large", 256, 512, 5, 6));
    for (const Case& c : cases) failures += check_case(&o, &c, &mm, false);
    if (o.bench) bench(&o, &mm);
    matmul_free(&mm);
    return finish("newton_schulz", failures);
}
