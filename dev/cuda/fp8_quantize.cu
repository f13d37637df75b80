// dev/cuda/fp8_quantize.cu: the FP8 quantize kernels of llmc/fp8.cuh (rules and layouts in its
// header comment), checked against PyTorch's float8 casts and a float64 host model, and timed.
// Variants (one per recipe; q^T is the transposed FP8 copy, row-major cols x rows):
//   1  per tensor, current scaling (q and q^T)    5  1x128 tiles (q)
//   2  delayed scaling (q)                        6  1x128 tiles of q^T
//   3  row-wise (q)                               7  128x128 blocks (q and q^T)
//   4  row-wise q^T                               8  MXFP8, E8M0 scales (q)
// Checks, for every variant and both formats (E4M3, E5M2):
//   - with --torch FILE (written by dev/cuda/fp8_quantize_torch.py): every FP8 byte, scale and
//     amax equal to PyTorch's on PyTorch's inputs (NaN bytes compared as NaN: E4M3 has one NaN
//     pattern per sign, E5M2 several). The inputs hold Gaussian rows of magnitudes 1e-3 .. 1e3,
//     all-zero rows and tiles (scale 1; MX: 2^-127), tiny and bf16-subnormal rows (the 1e-12
//     amax floor; MX: the exponent clamp at -127), values beyond the maxima with an Inf in the
//     tensor/row/tile (scale 1, so they saturate at +-fp8_max), NaN (ignored by the amax, stays
//     NaN; MX: the block's scale and elements NaN) and a delayed-scaling sequence whose amax
//     jumps 25x (saturation) and drops to 0 (the scale kept);
//   - on those inputs and on random ones, a float64 model: each amax exact, each fp32 scale
//     within 2 ulps of fp8_max / amax (2^-margin), MX exponents floor(log2 amax) - emax_elem, and
//     every dequantized element q * scale_inv within FP8's rounding of x (half an ulp: 2^-4 of |x|
//     E4M3, 2^-3 E5M2, plus half the smallest subnormal times scale_inv, plus the fp32 product's
//     rounding) or, where |x| * scale passes fp8_max, exactly +-fp8_max * scale_inv;
//   - MXFP8: the scales as the whole tiled tensor cuBLASLt's VEC32_UE8M0 mode reads (llmc/fp8.cuh's
//     mx_scale_index; PyTorch's file holds the same rearrangement done with tensor reshapes), its
//     padding 0 (written over poisoned memory), and end to end (check_mx_matmul): quantized x and
//     w multiplied by cuBLASLt in that mode against the float64 product of the dequantized inputs
//     on a device of compute capability 10.0 or later (the CPU runtime under
//     CUCC_COMPUTE_CAPABILITY=10.0), refused below it.
// Usage: ./fp8_quantize [variant] [--bench] [--small] [--torch FILE]
// Built with -DCHUNK_THREADS=256 -DROW_LANES=32, the GPU's amax and tile blocks and MXFP8 warps,
// also on the CPU runtime (whose trainer build gives a reduction or tile block one thread, and a
// 32-element MXFP8 block one thread; see CHUNK_THREADS and ROW_LANES in llmc/common.cuh, and
// dev/cuda/fp8_matmul.cu, which quantizes with those forms), so both forms are checked.
//! cucc: -lcublasLt -DCHUNK_THREADS=256 -DROW_LANES=32
//! run: python3 dev/cuda/fp8_quantize_torch.py --out build/fp8_quantize_torch.bin && ./prog --small --torch build/fp8_quantize_torch.bin => pass /PyTorch's casts[\s\S]*all checks passed/
//! run: ./prog --small --bench => pass /bench fp8_quantize variant 8: [\s\S]*all checks passed/
//! run: CUCC_COMPUTE_CAPABILITY=10.0 ./prog --small 8 => pass /MXFP8 through cuBLASLt \(compute capability (10\.0, CPU runtime\): \d+ x \d+ x \d+ products within|\d+\.\d, native\))[\s\S]*all checks passed/
#define TRAIN_GPT_MODEL_ONLY
#include "../../train_gpt.cu"
#include "../../llmc/fp8.cuh"
#include "common.h"
#include "fp8_common.h"

#include <map>
#include <string>

static const char* const VARIANTS[] = {"per tensor, q and q^T", "delayed",   "row-wise",
                                       "row-wise q^T",          "1x128",     "1x128 q^T",
                                       "128x128, q and q^T",    "MXFP8 E8M0"};
static const char* const RECIPES[] = {"tensor", "delayed", "rowwise", "rowwise_t",
                                      "1x128",  "1x128_t", "128x128", "mx"};
constexpr int NUM_VARIANTS = 8;

struct Case {
    std::string name;
    int variant;
    int format;  // 0 E4M3, 1 E5M2
    int rows, cols, steps, history_length, margin;
    std::vector<floatX> x;                             // steps * rows * cols
    std::map<std::string, std::vector<uint8_t>> want;  // PyTorch's blobs (empty: none)
};

static __nv_fp8_interpretation_t format_of(const Case& c) {
    return c.format ? __NV_E5M2 : __NV_E4M3;
}

static std::vector<uint8_t> host_bytes(const void* d, size_t n) {
    std::vector<uint8_t> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost));
    return h;
}

// Runs the case's recipe on the device; the outputs named as fp8_quantize_torch.py names them.
static std::map<std::string, std::vector<uint8_t>> run_case(const Case& c) {
    const size_t n = (size_t)c.rows * c.cols;
    const int rows = c.rows, cols = c.cols;
    const __nv_fp8_interpretation_t format = format_of(c);
    floatX* x = device_copy(c.x);
    uint8_t* q = device_poisoned<uint8_t>(n * c.steps);
    uint8_t* qt = device_poisoned<uint8_t>(n);
    const size_t n_scales =
        std::max({(size_t)rows, (size_t)cols, ceil_div(cols, 128) * rows,
                  ceil_div(rows, 128) * cols, fp8_block_scale_stride(cols) * ceil_div(rows, 128),
                  fp8_block_scale_stride(rows) * ceil_div(cols, 128)});
    float* scale_inv = device_poisoned<float>(n_scales);
    float* scale_inv_t = device_poisoned<float>(n_scales);
    float* partial = device_poisoned<float>(FP8_AMAX_BLOCKS);
    Fp8TensorScale* tensor_scale = device_poisoned<Fp8TensorScale>(c.steps);
    float* history = device_poisoned<float>(c.history_length);
    uint8_t* e8m0 = device_poisoned<uint8_t>(mx_scale_bytes(rows, cols));
    std::map<std::string, std::vector<uint8_t>> got;
    const size_t scale_bytes = sizeof(float) * n_scales;
    switch (c.variant) {
        case 1:
            fp8_quantize_tensor(q, qt, tensor_scale, partial, x, rows, cols, format, FP8_WHOLE, 0);
            got["q"] = host_bytes(q, n);
            got["qt"] = host_bytes(qt, n);
            got["tensor_scale"] = host_bytes(tensor_scale, sizeof(Fp8TensorScale));
            break;
        case 2: {
            CUDA_CHECK(cudaMemset(history, 0, sizeof(float) * c.history_length));
            const Fp8TensorScale start = {0.0f, 1.0f, 1.0f};
            CUDA_CHECK(cudaMemcpy(tensor_scale, &start, sizeof(start), cudaMemcpyHostToDevice));
            Fp8DelayedScaling d = {history, tensor_scale, 1, c.history_length, 0, c.margin};
            std::vector<uint8_t> scales;
            for (int s = 0; s < c.steps; s++) {  // one tensor a step: its amax, the scale used
                fp8_quantize_delayed(q + s * n, nullptr, &d, 0, partial, x + s * n, rows, cols,
                                     format, 0);
                std::vector<uint8_t> step = host_bytes(tensor_scale, sizeof(Fp8TensorScale));
                scales.insert(scales.end(), step.begin(), step.end());
                fp8_delayed_end_step(&d, 0, 1, format, 0);
                fp8_delayed_advance(&d);
            }
            got["q"] = host_bytes(q, n * c.steps);
            got["tensor_scale"] = scales;
            got["history"] = host_bytes(history, sizeof(float) * c.history_length);
            break;
        }
        case 3:
            fp8_quantize_rowwise(q, scale_inv, x, rows, cols, format, FP8_WHOLE, nullptr, 0);
            got["q"] = host_bytes(q, n);
            got["scale_inv"] = host_bytes(scale_inv, sizeof(float) * rows);
            break;
        case 4:
            fp8_quantize_rowwise_transposed(qt, scale_inv_t, x, rows, cols, format, FP8_WHOLE,
                                            nullptr, 0);
            got["qt"] = host_bytes(qt, n);
            got["scale_inv"] = host_bytes(scale_inv_t, sizeof(float) * cols);
            break;
        case 5:
            fp8_quantize_1x128(q, scale_inv, x, rows, cols, format, 0);
            got["q"] = host_bytes(q, n);
            got["scale_inv"] = host_bytes(scale_inv, sizeof(float) * ceil_div(cols, 128) * rows);
            break;
        case 6:
            fp8_quantize_1x128_transposed(qt, scale_inv_t, x, rows, cols, format, 0);
            got["qt"] = host_bytes(qt, n);
            got["scale_inv"] = host_bytes(scale_inv_t, sizeof(float) * ceil_div(rows, 128) * cols);
            break;
        case 7: {
            // padding entries stay as PyTorch's file has them (0)
            CUDA_CHECK(cudaMemset(scale_inv, 0, scale_bytes));
            CUDA_CHECK(cudaMemset(scale_inv_t, 0, scale_bytes));
            fp8_quantize_128x128(q, qt, scale_inv, scale_inv_t, x, rows, cols, format, 0);
            got["q"] = host_bytes(q, n);
            got["qt"] = host_bytes(qt, n);
            const size_t tiles_r = ceil_div(rows, 128), tiles_c = ceil_div(cols, 128);
            got["scale_inv"] =
                host_bytes(scale_inv, sizeof(float) *
                                          ((tiles_r - 1) * fp8_block_scale_stride(cols) + tiles_c));
            got["scale_inv_t"] = host_bytes(
                scale_inv_t,
                sizeof(float) * ((tiles_c - 1) * fp8_block_scale_stride(rows) + tiles_r));
            break;
        }
        case 8:  // the whole tiled scale tensor, padding included (poisoned before)
            fp8_quantize_mx(q, e8m0, x, rows, cols, format, 0);
            got["q"] = host_bytes(q, n);
            got["scale_e8m0"] = host_bytes(e8m0, mx_scale_bytes(rows, cols));
            break;
    }
    device_free({x, q, qt, scale_inv, scale_inv_t, partial, tensor_scale, history, e8m0});
    return got;
}

// The device's outputs against PyTorch's, byte for byte (FP8 NaN bytes as NaN).
static int compare_with_torch(const Case& c, std::map<std::string, std::vector<uint8_t>>& got) {
    int failures = 0;
    for (const auto& [key, want] : c.want) {
        const std::vector<uint8_t>& have = got[key];
        const bool fp8 = key == "q" || key == "qt";
        size_t bad = 0, first = 0;
        if (have.size() != want.size()) {
            printf("    %-12s %zu bytes, PyTorch's %zu: FAIL\n", key.c_str(), have.size(),
                   want.size());
            failures++;
            continue;
        }
        for (size_t i = 0; i < want.size(); i++) {
            const bool same = have[i] == want[i] || (fp8 && fp8_is_nan(have[i], c.format) &&
                                                     fp8_is_nan(want[i], c.format));
            if (!same && bad++ == 0) first = i;
        }
        if (bad) {
            printf(
                "    %-12s %zu of %zu bytes differ from PyTorch's, first at %zu (%02x, PyTorch "
                "%02x): FAIL\n",
                key.c_str(), bad, want.size(), first, have[first], want[first]);
            failures++;
        }
    }
    if (!failures) printf("    equal to PyTorch's casts (%zu outputs)\n", c.want.size());
    return failures;
}

// The float64 model. For every element of step s: its group's slot (where its scale went), the
// scale_inv the device wrote for that slot, and its FP8 byte.
struct Quantized {
    std::vector<size_t> slot;       // per element of x (one step)
    std::vector<double> scale_inv;  // per slot, as the device wrote it
    std::vector<uint8_t> q;         // per element of x, in x's layout
    size_t transposed_mismatches;   // q^T bytes or scales that are not q's transposed
};

static float read_float(const std::vector<uint8_t>& bytes, size_t i) {
    float v;
    memcpy(&v, bytes.data() + 4 * i, 4);
    return v;
}

static Quantized quantized_step(const Case& c, std::map<std::string, std::vector<uint8_t>>& got,
                                int step) {
    const size_t rows = c.rows, cols = c.cols, n = rows * cols;
    Quantized r;
    r.transposed_mismatches = 0;
    r.slot.resize(n);
    r.q.resize(n);
    const bool transposed = c.variant == 4 || c.variant == 6;
    const std::vector<uint8_t>& q = got[transposed ? "qt" : "q"];
    for (size_t i = 0, row = 0; row < rows; row++)
        for (size_t col = 0; col < cols; col++, i++) {
            r.q[i] = transposed ? q[col * rows + row] : q[step * n + i];
            size_t slot = 0;
            switch (c.variant) {
                case 3:
                    slot = row;
                    break;
                case 4:
                    slot = col;
                    break;
                case 5:
                    slot = (col / 128) * rows + row;
                    break;
                case 6:
                    slot = (row / 128) * cols + col;
                    break;
                case 7:
                    slot = (row / 128) * fp8_block_scale_stride(cols) + col / 128;
                    break;
                case 8:
                    slot = mx_scale_index((int)row, (int)col / MX_BLOCK, c.cols);
                    break;
            }
            r.slot[i] = slot;
        }
    if (c.variant == 1 || c.variant == 2) {
        r.scale_inv = {read_float(got["tensor_scale"], 3 * step + 2)};
    } else if (c.variant == 8) {
        for (uint8_t e : got["scale_e8m0"])
            r.scale_inv.push_back(e == 0xFF ? NAN : ldexp(1.0, e - 127));
    } else {
        for (size_t i = 0; i < got["scale_inv"].size() / 4; i++)
            r.scale_inv.push_back(read_float(got["scale_inv"], i));
    }
    if (c.variant == 7) {  // q^T: x's (r, c) is q^T's (c, r), same block scale, transposed grid
        const std::vector<uint8_t>& qt = got["qt"];
        for (size_t row = 0; row < rows; row++)
            for (size_t col = 0; col < cols; col++) {
                const size_t slot_t = (col / 128) * fp8_block_scale_stride(rows) + row / 128;
                r.transposed_mismatches +=
                    qt[col * rows + row] != r.q[row * cols + col] ||
                    read_float(got["scale_inv_t"], slot_t) != r.scale_inv[r.slot[row * cols + col]];
            }
    }
    if (c.variant == 1)
        for (size_t row = 0; row < rows; row++)
            for (size_t col = 0; col < cols; col++)
                r.transposed_mismatches += got["qt"][col * rows + row] != r.q[row * cols + col];
    return r;
}

// Checks one step's scales and elements against the float64 model; `expected_scale_inv(slot,
// amax)` gives the double scale_inv the recipe asks for (NaN: the MX NaN scale). Returns failures.
template <class Rule>
static int check_model(const Case& c, const Quantized& r, const floatX* x, const char* what,
                       Rule expected_scale_inv) {
    const double fp8_max = fp8_max_finite(format_of(c));
    const double u = c.format == 0 ? 0x1p-4 : 0x1p-3, tiny = c.format == 0 ? 0x1p-10 : 0x1p-17;
    std::vector<double> amax(r.scale_inv.size(), 0.0);
    std::vector<bool> nonfinite(r.scale_inv.size(), false);
    const size_t n = (size_t)c.rows * c.cols;
    for (size_t i = 0; i < n; i++) {
        const double v = (float)x[i];
        if (!std::isnan(v)) amax[r.slot[i]] = std::max(amax[r.slot[i]], fabs(v));
        if (!std::isfinite(v)) nonfinite[r.slot[i]] = true;
    }
    size_t bad_scales = 0, bad_elements = 0;
    std::vector<bool> used(r.scale_inv.size(), false);
    for (size_t i = 0; i < n; i++) used[r.slot[i]] = true;
    for (size_t s = 0; s < r.scale_inv.size(); s++) {
        if (!used[s]) continue;
        const double want = expected_scale_inv(s, amax[s], nonfinite[s]), have = r.scale_inv[s];
        const bool ok = std::isnan(want) ? std::isnan(have) : fabs(have - want) <= 0x1p-22 * want;
        if (!ok && bad_scales++ == 0)
            printf("    %s: scale_inv[%zu] %.9g, float64 model %.9g (amax %.9g)\n", what, s, have,
                   want, amax[s]);
    }
    for (size_t i = 0; i < n; i++) {
        const double v = (float)x[i], scale_inv = r.scale_inv[r.slot[i]];
        const uint8_t b = r.q[i];
        bool ok;
        if (std::isnan(v) || std::isnan(scale_inv)) ok = fp8_is_nan(b, c.format);
        else if (fp8_is_nan(b, c.format)) ok = false;
        else if (fabs(v) / scale_inv > fp8_max * (1 + 0x1p-22))
            ok = fp8_decode(b, c.format) == (v > 0 ? fp8_max : -fp8_max);
        else {
            const double deq = fp8_decode(b, c.format) * scale_inv;
            ok = fabs(deq - v) <= (u + 0x1p-22) * fabs(v) + tiny * scale_inv;
        }
        if (!ok && bad_elements++ == 0)
            printf("    %s: element %zu x %.9g quantized to %02x (%.9g) with scale_inv %.9g\n",
                   what, i, v, b, fp8_decode(b, c.format), scale_inv);
    }
    if (r.transposed_mismatches)
        printf("    %s: %zu elements of q^T differ from q's transposed: FAIL\n", what,
               r.transposed_mismatches);
    if (bad_scales || bad_elements)
        printf("    %s: %zu scales, %zu elements off the float64 model: FAIL\n", what, bad_scales,
               bad_elements);
    return (bad_scales || bad_elements || r.transposed_mismatches) ? 1 : 0;
}

static int check_float64(const Case& c, std::map<std::string, std::vector<uint8_t>>& got) {
    const double fp8_max = fp8_max_finite(format_of(c));
    const size_t n = (size_t)c.rows * c.cols;
    auto current = [&](double amax) {
        if (amax == 0.0 || std::isinf(amax)) return 1.0;
        return std::max(amax, (double)1e-12f) / fp8_max;
    };
    int failures = 0;
    if (c.variant == 2) {
        std::vector<double> history(c.history_length, 0.0);
        double scale_inv = 1.0;
        for (int s = 0; s < c.steps; s++) {
            const double hmax = *std::max_element(history.begin(), history.end());
            if (hmax > 0.0 && !std::isinf(hmax))
                scale_inv = std::max(hmax, (double)1e-12f) / fp8_max * ldexp(1.0, c.margin);
            const floatX* x = c.x.data() + s * n;
            char what[32];
            snprintf(what, sizeof(what), "step %d", s);
            const double want = scale_inv;
            failures += check_model(c, quantized_step(c, got, s), x, what,
                                    [&](size_t, double, bool) { return want; });
            double amax = 0.0;
            for (size_t i = 0; i < n; i++)
                if (!std::isnan((float)x[i])) amax = std::max(amax, fabs((double)(float)x[i]));
            history[s % c.history_length] = amax;
            if (read_float(got["tensor_scale"], 3 * s) != amax) {
                printf("    step %d: amax %.9g, float64 %.9g: FAIL\n", s,
                       read_float(got["tensor_scale"], 3 * s), amax);
                failures++;
            }
        }
        for (int i = 0; i < c.history_length; i++)
            if (read_float(got["history"], i) != history[i]) {
                printf("    history[%d] %.9g, float64 %.9g: FAIL\n", i,
                       read_float(got["history"], i), history[i]);
                failures++;
            }
        return failures;
    }
    const Quantized r = quantized_step(c, got, 0);
    if (c.variant == 8) {
        const int emax = fp8_emax(format_of(c));
        failures += check_model(c, r, c.x.data(), "mx", [&](size_t, double amax, bool nonfinite) {
            if (nonfinite) return (double)NAN;
            const int e = amax == 0.0 ? -127 : (int)floor(log2(amax)) - emax;
            return ldexp(1.0, std::max(-127, std::min(127, e)));
        });
        // every byte of the tiled tensor that no block's scale took is padding, written 0
        std::vector<bool> used(got["scale_e8m0"].size(), false);
        for (size_t slot : r.slot) used[slot] = true;
        size_t bad_padding = 0;
        for (size_t i = 0; i < used.size(); i++) bad_padding += !used[i] && got["scale_e8m0"][i];
        if (bad_padding) {
            printf("    mx: %zu padding bytes of %zu are not 0: FAIL\n", bad_padding,
                   used.size() - (size_t)c.rows * c.cols / MX_BLOCK);
            failures++;
        }
        return failures;
    }
    failures += check_model(c, r, c.x.data(), "scales",
                            [&](size_t, double amax, bool) { return current(amax); });
    if (c.variant == 1) {
        double amax = 0.0;
        for (size_t i = 0; i < n; i++)
            if (!std::isnan((float)c.x[i])) amax = std::max(amax, fabs((double)(float)c.x[i]));
        if (read_float(got["tensor_scale"], 0) != amax) {
            printf("    amax %.9g, float64 %.9g: FAIL\n", read_float(got["tensor_scale"], 0), amax);
            failures++;
        }
    }
    return failures;
}

static int check_case(const Options* o, const Case& c) {
    if (!variant_selected(o, c.variant)) return 0;
    printf("  variant %d %-9s %s %s (%d x %d", c.variant, RECIPES[c.variant - 1],
           c.format ? "E5M2" : "E4M3", c.name.c_str(), c.rows, c.cols);
    if (c.variant == 2)
        printf(", %d steps, history %d, margin %d", c.steps, c.history_length, c.margin);
    printf(")\n");
    std::map<std::string, std::vector<uint8_t>> got = run_case(c);
    int failures = 0;
    if (!c.want.empty()) failures += compare_with_torch(c, got);
    const int model_failures = check_float64(c, got);
    if (!model_failures) printf("    float64 model: amax, scales and elements agree\n");
    return failures + model_failures;
}

// Reads dev/cuda/fp8_quantize_torch.py's file (format in its docstring).
static std::vector<Case> read_torch_cases(const char* path) {
    uint32_t count;
    FILE* f = torch_file_open(path, "FP8QTRC1", "dev/cuda/fp8_quantize_torch.py", &count);
    std::vector<Case> cases(count);
    for (Case& c : cases) {
        c.name = torch_file_string(f, path);
        const std::string recipe = torch_file_string(f, path);
        c.variant = 0;
        for (int v = 1; v <= NUM_VARIANTS; v++)
            if (recipe == RECIPES[v - 1]) c.variant = v;
        if (c.variant == 0) fatal("%s: unknown recipe %s", path, recipe.c_str());
        int dims[6];
        FREAD_CHECK(dims, 4, 6, f);
        c.format = dims[0];
        c.rows = dims[1];
        c.cols = dims[2];
        c.steps = dims[3];
        c.history_length = dims[4];
        c.margin = dims[5];
        if (c.rows < 1 || c.cols < 1 || c.rows > 1 << 14 || c.cols > 1 << 14 || c.steps < 1 ||
            c.steps > 64 || c.history_length < 1 || (c.format != 0 && c.format != 1))
            fatal("%s: case %s has bad dimensions", path, c.name.c_str());
        const size_t n = (size_t)c.steps * c.rows * c.cols;
        std::vector<uint16_t> bits(n);
        FREAD_CHECK(bits.data(), 2, n, f);
        for (uint16_t b : bits) {
            float v;
            const uint32_t wide = (uint32_t)b << 16;
            memcpy(&v, &wide, 4);
            c.x.push_back((floatX)v);
        }
        uint32_t blobs;
        FREAD_CHECK(&blobs, 4, 1, f);
        for (uint32_t i = 0; i < blobs; i++) {
            const std::string key = torch_file_string(f, path);
            uint64_t size;
            FREAD_CHECK(&size, 8, 1, f);
            if (size > (1u << 30))
                fatal("%s: a blob of %llu bytes", path, (unsigned long long)size);
            std::vector<uint8_t>& blob = c.want[key];
            blob.resize(size);
            FREAD_CHECK(blob.data(), 1, size, f);
        }
    }
    fclose(f);
    return cases;
}

// Random inputs: Gaussian rows of magnitudes 1e-4 .. 1e4 with an all-zero row, for every variant
// and format.
static std::vector<Case> random_cases(bool small) {
    std::vector<Case> cases;
    const int shapes[][2] = {{64, 128}, {130, 288}, {256, 512}};
    uint64_t rng = 22;
    for (int s = 0; s < (small ? 2 : 3); s++)
        for (int v = 1; v <= NUM_VARIANTS; v++)
            for (int format = 0; format < 2; format++) {
                Case c = {"random",       v, format, shapes[s][0], shapes[s][1],
                          v == 2 ? 3 : 1, 2, 1,      {},           {}};
                for (int step = 0; step < c.steps; step++)
                    for (int row = 0; row < c.rows; row++) {
                        const float magnitude = row == 1 ? 0.0f : powf(10.0f, uniform(&rng, -4, 4));
                        for (int col = 0; col < c.cols; col++)
                            c.x.push_back((floatX)(magnitude * uniform(&rng, -1, 1)));
                    }
                cases.push_back(c);
            }
    return cases;
}

// End to end, MXFP8 through cuBLASLt: x (M x K) and w (N x K), bf16, quantized by fp8_quantize_mx
// to E4M3, multiplied as cuBLASLt's TN operands A (K x M, op T) and B (K x N) in VEC32_UE8M0 mode
// into an fp32 D = x w^T (M x N, column-major). Each element of D must be the float64 product of
// the dequantized inputs (q decoded times 2^(byte - 127), the byte found by mx_scale_index, so the
// layout fp8_quantize_mx writes is the one cuBLASLt reads) within (K + 16) * 2^-23 * sum_k |a b|,
// the fp32 accumulation's bound (each dequantized value and each product of two is exact in fp32).
// On a device below compute capability 10.0 the call must be refused with
// CUBLAS_STATUS_NOT_SUPPORTED, as cuBLASLt has no MXFP8 there. M = 200 and K = 352 leave partial
// scale tiles (rows past 200, K blocks past 11). Returns the failures.
static int check_mx_matmul() {
    const int M = 200, N = 136, K = 352;
    int major = 0, minor = 0;
    device_compute_capability(&major, &minor);
#ifdef __CUCC__
    const char* where = "CPU runtime";
#else
    const char* where = "native";
#endif
    printf("MXFP8 through cuBLASLt (compute capability %d.%d, %s): ", major, minor, where);
    uint64_t rng = 32;
    std::vector<floatX> x_host, w_host;
    for (int row = 0; row < M + N; row++) {  // rows of magnitudes 1e-3 .. 1e3, one all zero
        const float magnitude = row == 7 ? 0.0f : powf(10.0f, uniform(&rng, -3, 3));
        for (int col = 0; col < K; col++)
            (row < M ? x_host : w_host).push_back((floatX)(magnitude * uniform(&rng, -1, 1)));
    }
    floatX* x = device_copy(x_host);
    floatX* w = device_copy(w_host);
    uint8_t* qa = device_poisoned<uint8_t>((size_t)M * K);
    uint8_t* qb = device_poisoned<uint8_t>((size_t)N * K);
    uint8_t* sa = device_poisoned<uint8_t>(mx_scale_bytes(M, K));
    uint8_t* sb = device_poisoned<uint8_t>(mx_scale_bytes(N, K));
    float* d = device_poisoned<float>((size_t)M * N);
    fp8_quantize_mx(qa, sa, x, M, K, __NV_E4M3, 0);
    fp8_quantize_mx(qb, sb, w, N, K, __NV_E4M3, 0);

    cublasLtHandle_t handle;
    CUBLAS_CHECK(cublasLtCreate(&handle));
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
    const auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* value, size_t size) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, value, size));
    };
    set(CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof op_t);
    set(CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof op_n);
    set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode);
    set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode);
    set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
    set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb);
    cublasLtMatrixLayout_t la, lb, ld;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, K, M, K));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, K, N, K));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, M, N, M));
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t status = cublasLtMatmul(handle, desc, &alpha, qa, la, qb, lb, &beta, d, ld,
                                                 d, ld, nullptr, nullptr, 0, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    int failures = 0;
    if (major < 10) {
        const bool ok = status == CUBLAS_STATUS_NOT_SUPPORTED;
        printf("refused (%s)%s\n", cublasLtGetStatusName(status),
               ok ? "" : ": FAIL, want CUBLAS_STATUS_NOT_SUPPORTED");
        failures += !ok;
    } else if (status != CUBLAS_STATUS_SUCCESS) {
        printf("%s: FAIL\n", cublasLtGetStatusName(status));
        failures++;
    } else {
        const std::vector<uint8_t> a = host_bytes(qa, (size_t)M * K),
                                   b = host_bytes(qb, (size_t)N * K);
        const std::vector<uint8_t> a_scale = host_bytes(sa, mx_scale_bytes(M, K));
        const std::vector<uint8_t> b_scale = host_bytes(sb, mx_scale_bytes(N, K));
        std::vector<float> got((size_t)M * N);
        CUDA_CHECK(cudaMemcpy(got.data(), d, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
        const auto dequantized = [&](const std::vector<uint8_t>& q,
                                     const std::vector<uint8_t>& scale, int row, int k) {
            const uint8_t e = scale[mx_scale_index(row, k / MX_BLOCK, K)];
            return fp8_decode(q[(size_t)row * K + k], 0) * (e == 0xFF ? NAN : ldexp(1.0, e - 127));
        };
        double worst = 0.0;
        size_t bad = 0;
        for (int j = 0; j < N; j++)
            for (int i = 0; i < M; i++) {
                double sum = 0.0, magnitude = 0.0;
                for (int k = 0; k < K; k++) {
                    const double p = dequantized(a, a_scale, i, k) * dequantized(b, b_scale, j, k);
                    sum += p;
                    magnitude += fabs(p);
                }
                const double err = fabs(got[i + (size_t)j * M] - sum);
                const double bound = (K + 16) * 0x1p-23 * magnitude;
                if (!(err <= bound) && bad++ == 0)
                    printf("\n    D(%d, %d) = %.9g, float64 %.9g (bound %.3g): FAIL\n    ", i, j,
                           got[i + (size_t)j * M], sum, bound);
                if (bound > 0) worst = std::max(worst, err / bound);
            }
        printf(
            "%d x %d x %d products within the fp32 bound of the float64 product of the "
            "dequantized inputs (worst error / bound %.2g)%s\n",
            M, N, K, worst, bad ? ": FAIL" : "");
        failures += bad != 0;
    }
    for (cublasLtMatrixLayout_t l : {la, lb, ld}) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(l));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    CUBLAS_CHECK(cublasLtDestroy(handle));
    device_free({x, w, qa, qb, sa, sb, d});
    return failures;
}

static void bench(const Options* o) {
    // GPT-2 124M: B*T = 8 x 1024 tokens by the fc layer's C = 768 (and its weight, 3072 x 768)
    const int rows = o->small ? 256 : 8 * 1024, cols = 768;
    const size_t n = (size_t)rows * cols;
    char shape[128];
    snprintf(shape, sizeof(shape), "%d x %d bf16 -> E4M3", rows, cols);
    print_bench_intro(shape);
    uint64_t rng = 7;
    floatX* x = device_copy(random_floatx(n, &rng, -4.0f, 4.0f));
    uint8_t* q = device_poisoned<uint8_t>(n);
    uint8_t* qt = device_poisoned<uint8_t>(n);
    float* scale_inv = device_poisoned<float>(n / 32);
    float* scale_inv_t = device_poisoned<float>(n / 32);
    float* partial = device_poisoned<float>(FP8_AMAX_BLOCKS);
    Fp8TensorScale* tensor_scale = device_poisoned<Fp8TensorScale>(1);
    float* history = device_poisoned<float>(16);
    uint8_t* e8m0 = device_poisoned<uint8_t>(mx_scale_bytes(rows, cols));
    CUDA_CHECK(cudaMemset(history, 0, 16 * sizeof(float)));
    Fp8DelayedScaling d = {history, tensor_scale, 1, 16, 0, 0};
    const __nv_fp8_interpretation_t f = __NV_E4M3;
    for (int v = 1; v <= NUM_VARIANTS; v++) {
        if (!variant_selected(o, v)) continue;
        // bytes: x read (twice where the amax is a separate pass), q and/or q^T written
        const bool two_reads = v <= 2, both = v == 1 || v == 7;
        const double bytes = n * sizeof(floatX) * (two_reads ? 2 : 1) + n * (both ? 2 : 1);
        const float ms = time_ms(
            [&] {
                switch (v) {
                    case 1:
                        fp8_quantize_tensor(q, qt, tensor_scale, partial, x, rows, cols, f,
                                            FP8_WHOLE, 0);
                        break;
                    case 2:
                        fp8_quantize_delayed(q, nullptr, &d, 0, partial, x, rows, cols, f, 0);
                        break;
                    case 3:
                        fp8_quantize_rowwise(q, scale_inv, x, rows, cols, f, FP8_WHOLE, nullptr, 0);
                        break;
                    case 4:
                        fp8_quantize_rowwise_transposed(qt, scale_inv_t, x, rows, cols, f,
                                                        FP8_WHOLE, nullptr, 0);
                        break;
                    case 5:
                        fp8_quantize_1x128(q, scale_inv, x, rows, cols, f, 0);
                        break;
                    case 6:
                        fp8_quantize_1x128_transposed(qt, scale_inv_t, x, rows, cols, f, 0);
                        break;
                    case 7:
                        fp8_quantize_128x128(q, qt, scale_inv, scale_inv_t, x, rows, cols, f, 0);
                        break;
                    case 8:
                        fp8_quantize_mx(q, e8m0, x, rows, cols, f, 0);
                        break;
                }
            },
            bench_warmup(), bench_repeats());
        print_bench("fp8_quantize", v, VARIANTS[v - 1], ms, bytes, 0.0);
    }
    device_free({x, q, qt, scale_inv, scale_inv_t, partial, tensor_scale, history, e8m0});
}

int main(int argc, char** argv) {
    Options o = parse_options(argc, argv, NUM_VARIANTS, VARIANTS);
    print_header("fp8_quantize");
    int failures = 0;
    if (o.torch_file) {
        printf("PyTorch's casts from %s:\n", o.torch_file);
        for (const Case& c : read_torch_cases(o.torch_file)) failures += check_case(&o, c);
    }
    printf("random inputs:\n");
    for (const Case& c : random_cases(o.small)) failures += check_case(&o, c);
    if (variant_selected(&o, 8)) failures += check_mx_matmul();
    if (o.bench) bench(&o);
    return finish("fp8_quantize", failures);
}
