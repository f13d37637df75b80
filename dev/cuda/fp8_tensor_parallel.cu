// dev/cuda/fp8_tensor_parallel.cu: the FP8 operands of the tensor-parallel layers
// (llmc/fp8_linear.cuh) against one process's, element for element. Under tensor parallelism a
// rank holds part of a cut tensor, and the recipes whose scale groups span the cut (one scale
// per tensor; one per row of an operand whose reduction dimension is cut) reduce their amaxes
// over the group first. This harness shows that the reduction makes every rank's operands the
// same bytes and scales as one process holding the whole tensors, for each recipe and both
// kinds of layer:
//   column-parallel (W's rows and G's columns cut: W, W^T, G, G^T against one process's rows or
//   columns of them; X whole), row-parallel (W's and X's columns cut: W, W^T, X, X^T).
// Every rank draws the same whole X (N, IC), W (OC, IC) and G (N, OC), their columns scaled by
// factors growing along the row (and W's rows too), so a rank's part never holds its tensor's
// (or its rows') amax by chance: without the reduction the check fails (its scales differ). It
// quantizes them as one process (a layer of the whole shape, no cut) and as its part of a group
// (fp8_quantize_weight and fp8_quantize_activation with the layer's cut), then compares, for
// each element of each of this rank's operands, its byte and the dequantization scale of its
// group with those of the same element in the whole operand: both must be equal, bit for bit.
// Block scaling and MXFP8 need each cut at a tile boundary (fp8_layer_error) and then reduce
// nothing: the same check shows their tiles do not straddle ranks.
// Several ranks need one GPU each: cpu-only (the CPU runtime offers 8 devices).
//! cucc: -DMULTI_GPU --mpi -lnccl -lcublasLt
//! cpu-only
//! run: mpirun -np 2 ./prog => pass /all 48 checks passed on 2 ranks/
#define TRAIN_GPT_MODEL_ONLY
#include "../../train_gpt.cu"
#include "common.h"
#include "fp8_common.h"

#include <functional>

// A micro-batch of N tokens, a layer of IC inputs and OC outputs: every dimension a multiple of
// 128 per rank (block scaling's tiles), so each recipe runs on tp 2.
constexpr int N = 256, IC = 256, OC = 512;

struct Harness {
    const CommGroup* world;
    int checks, failures;
};

// Element (r, kk) of this rank's operand `got` must be element whole_of(r, kk) of `whole`.
static void compare(Harness* h, int recipe, const char* what, const HostFp8Operand* got,
                    const HostFp8Operand* whole,
                    const std::function<std::pair<int, int>(int, int)>& whole_of) {
    long bad = 0;
    for (int r = 0; r < got->rows; r++)
        for (int kk = 0; kk < got->k; kk++) {
            const std::pair<int, int> w = whole_of(r, kk);
            const bool same_q = got->q[(size_t)r * got->k + kk] ==
                                whole->q[(size_t)w.first * whole->k + w.second];
            const bool same_scale = host_fp8_scale_bits(got, r, kk) ==
                                    host_fp8_scale_bits(whole, w.first, w.second);
            bad += !(same_q && same_scale);
        }
    double all_bad = (double)bad;
    comm_sum_scalars(h->world, &all_bad, 1);
    h->checks++;
    if (all_bad > 0) h->failures++;
    if (h->world->rank == 0)
        printf("%s  --fp8 %s %s: %.0f elements differ from one process's\n",
               all_bad > 0 ? "FAIL" : "PASS", FP8_RECIPE_NAMES[recipe], what, all_bad);
}

// The four operands a layer quantizes from (x, w, g): W and W^T, then X, X^T, G and G^T (the
// backward pass's grouping: G^T with G where they share one scale).
struct LayerOperands {
    HostFp8Operand w, wt, x, xt, g, gt;
};

static LayerOperands quantize(const Fp8Config* config, const CommGroup* tp, int in, int out,
                              Fp8Cut cut, const std::vector<floatX>& x,
                              const std::vector<floatX>& w, const std::vector<floatX>& g) {
    Fp8State f;
    fp8_init(&f, config, tp, 1);
    fp8_add_layer(&f, in, out, cut);
    DeviceLedger ledger = {};
    fp8_take_buffers(&f, N, &ledger);
    floatX *dx = device_copy(x), *dw = device_copy(w), *dg = device_copy(g);
    Fp8Layer* l = &f.layers[0];
    Fp8TensorScale* x_scale = fp8_tensor_scale(&f, l, FP8_X);
    Fp8TensorScale* g_scale = fp8_tensor_scale(&f, l, FP8_G);
    Fp8TensorScale* w_scale = fp8_tensor_scale(&f, l, FP8_W);
    fp8_quantize_weight(&f, l, dw, 0);
    const int recipe = config->recipe;
    LayerOperands o;
    o.w = host_fp8_operand(&f, l->weight.q, l->weight.scale, w_scale, out, in, true, __NV_E4M3);
    o.wt = host_fp8_operand(&f, l->weight.qt, l->weight.scale_t, w_scale, in, out, true, __NV_E4M3);
    // as fp8_linear_backward groups them: whole-tensor scales take q and q^T in one pass
    const bool per_tensor = fp8_per_tensor(recipe);
    fp8_quantize_activation(&f, &f.x, per_tensor ? &f.xt : nullptr, dx, N, in, __NV_E4M3, cut.in,
                            0, FP8_X, x_scale, false, 0);
    if (!per_tensor)
        fp8_quantize_activation(&f, nullptr, &f.xt, dx, N, in, __NV_E4M3, false, 0, FP8_X, x_scale,
                                false, 0);
    o.x = host_fp8_operand(&f, f.x.q, f.x.scale, x_scale, N, in, false, __NV_E4M3);
    o.xt = host_fp8_operand(&f, f.xt.q, f.xt.scale, x_scale, in, N, false, __NV_E4M3);
    fp8_quantize_activation(&f, &f.g, per_tensor ? &f.gt : nullptr, dg, N, out, f.grad_format,
                            cut.out, 0, FP8_G, g_scale, false, 0);
    if (!per_tensor)
        fp8_quantize_activation(&f, nullptr, &f.gt, dg, N, out, f.grad_format, false, 0, FP8_G,
                                g_scale, false, 0);
    o.g = host_fp8_operand(&f, f.g.q, f.g.scale, g_scale, N, out, false, f.grad_format);
    o.gt = host_fp8_operand(&f, f.gt.q, f.gt.scale, g_scale, out, N, false, f.grad_format);
    device_free({dx, dw, dg});
    fp8_free(&f);
    return o;
}

// A (rows, cols) tensor with values in [-1, 1) times factors growing with the column (and with
// the row when rows_grow), so every piece of a row or a column has a different amax.
static std::vector<floatX> graded(int rows, int cols, bool rows_grow, uint64_t seed) {
    uint64_t rng = seed;
    std::vector<floatX> v((size_t)rows * cols);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            v[(size_t)r * cols + c] = (floatX)(uniform(&rng, -1.0f, 1.0f) * (1.0f + 3.0f * c / cols) *
                                              (rows_grow ? 1.0f + 2.0f * r / rows : 1.0f));
    return v;
}

// This rank's columns [c0, c0 + width) of a row-major (rows, cols) tensor, or its rows.
static std::vector<floatX> columns(const std::vector<floatX>& v, int rows, int cols, int c0,
                                   int width) {
    std::vector<floatX> out((size_t)rows * width);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < width; c++) out[(size_t)r * width + c] = v[(size_t)r * cols + c0 + c];
    return out;
}
static std::vector<floatX> rows_of(const std::vector<floatX>& v, int cols, int r0, int count) {
    return std::vector<floatX>(v.begin() + (size_t)r0 * cols, v.begin() + (size_t)(r0 + count) * cols);
}

static void check_layer(Harness* h, const CommGroup* tp, int recipe, bool column_parallel) {
    const Fp8Config config = {recipe, fp8_default_grad_e5m2(recipe), 0, 16, 0};
    const std::vector<floatX> x = graded(N, IC, false, 1), w = graded(OC, IC, true, 2),
                              g = graded(N, OC, false, 3);
    const LayerOperands whole =
        quantize(&config, comm_group_of_one(), IC, OC, Fp8Cut{false, false}, x, w, g);
    const int t = tp->size, rank = tp->rank;
    char what[160];
    auto same = [](int r, int kk) { return std::make_pair(r, kk); };
    if (column_parallel) {  // W's rows [o0, o0 + OC/t) and G's columns
        const int ol = OC / t, o0 = rank * ol;
        const LayerOperands part = quantize(&config, tp, IC, ol, Fp8Cut{false, true}, x,
                                            rows_of(w, IC, o0, ol), columns(g, N, OC, o0, ol));
        auto tag = [&](const char* op) {
            snprintf(what, sizeof(what), "column-parallel %s (tp %d)", op, t);
            return what;
        };
        compare(h, recipe, tag("W"), &part.w, &whole.w,
                [&](int r, int kk) { return std::make_pair(o0 + r, kk); });
        compare(h, recipe, tag("W^T"), &part.wt, &whole.wt,
                [&](int r, int kk) { return std::make_pair(r, o0 + kk); });
        compare(h, recipe, tag("X"), &part.x, &whole.x, same);
        compare(h, recipe, tag("X^T"), &part.xt, &whole.xt, same);
        compare(h, recipe, tag("G"), &part.g, &whole.g,
                [&](int r, int kk) { return std::make_pair(r, o0 + kk); });
        compare(h, recipe, tag("G^T"), &part.gt, &whole.gt,
                [&](int r, int kk) { return std::make_pair(o0 + r, kk); });
    } else {  // W's and X's columns [i0, i0 + IC/t)
        const int il = IC / t, i0 = rank * il;
        const LayerOperands part = quantize(&config, tp, il, OC, Fp8Cut{true, false},
                                            columns(x, N, IC, i0, il), columns(w, OC, IC, i0, il), g);
        auto tag = [&](const char* op) {
            snprintf(what, sizeof(what), "row-parallel %s (tp %d)", op, t);
            return what;
        };
        compare(h, recipe, tag("W"), &part.w, &whole.w,
                [&](int r, int kk) { return std::make_pair(r, i0 + kk); });
        compare(h, recipe, tag("W^T"), &part.wt, &whole.wt,
                [&](int r, int kk) { return std::make_pair(i0 + r, kk); });
        compare(h, recipe, tag("X"), &part.x, &whole.x,
                [&](int r, int kk) { return std::make_pair(r, i0 + kk); });
        compare(h, recipe, tag("X^T"), &part.xt, &whole.xt,
                [&](int r, int kk) { return std::make_pair(i0 + r, kk); });
        compare(h, recipe, tag("G"), &part.g, &whole.g, same);
        compare(h, recipe, tag("G^T"), &part.gt, &whole.gt, same);
    }
}

int main(int argc, char** argv) {
    Comm comm;
    comm_init(&comm, argc, argv, 60.0, nullptr);
    if (comm.world != 2) {
        fprintf(stderr, "error: run under mpirun -np 2 (not %d ranks)\n", comm.world);
        comm_destroy(&comm);
        return EXIT_FAILURE;
    }
    if (comm.rank == 0) print_header("fp8_tensor_parallel");
    Harness h = {&comm.all, 0, 0};
    for (int recipe : {FP8_TENSOR, FP8_ROWWISE, FP8_BLOCK, FP8_MX})
        for (bool column_parallel : {true, false}) check_layer(&h, &comm.all, recipe, column_parallel);
    if (comm.rank == 0) {
        if (h.failures) printf("fp8_tensor_parallel: FAILED (%d of %d checks)\n", h.failures, h.checks);
        else printf("fp8_tensor_parallel: all %d checks passed on %d ranks\n", h.checks, comm.world);
    }
    comm_destroy(&comm);
    return h.failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
