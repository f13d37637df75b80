// dev/cuda/adamw.cu: the fused AdamW step (llmc/adamw.cuh), checked against a float64 host
// reference and timed. As torch.optim.AdamW, with g = grad * grad_scale and step t:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p = p (1 - lr wd) - lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
// In the bf16 build p is the fp32 master weight and the bf16 parameter is written from it with
// stochastic rounding (either bf16 neighbour of the master value is right); in the fp32 build
// the parameters are the master weights.
// Layout: params, grads (n) floatX; master, m, v (n) float; all element-wise.
// Variants:
//   1  one thread per element, the textbook form with bias-corrected moments
//   2  llmc/adamw.cuh adamw_update: grid-stride, constants folded on the host
// Usage: ./adamw [variant] [--bench] [--small]
//! cucc: -lcublasLt
//! run: ./prog --small => pass /all checks passed/
//! run: ./prog --small --bench => pass /bench adamw variant 2: [\s\S]*all checks passed/
#define TRAIN_GPT_MODEL_ONLY
#include "../../train_gpt.cu"
#include "common.h"

static const char* const VARIANTS[] = {
    "one thread per element, textbook form",
    "llmc/adamw.cuh adamw_update (grid-stride, folded constants)"};
constexpr int NUM_VARIANTS = 2;

// Variant 1: thread i owns element i. bias1 = 1 - b1^t, bias2 = 1 - b2^t.
__global__ void adamw_naive_kernel(floatX* params, float* master, const floatX* grads, float* m,
                                   float* v, size_t n, size_t offset, float lr, float beta1,
                                   float beta2, float eps, float weight_decay, float grad_scale,
                                   float bias1, float bias2, uint32_t seed) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = (float)grads[i] * grad_scale;
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    const float m_hat = m[i] / bias1, v_hat = v[i] / bias2;
    float p = master ? master[i] : (float)params[i];
    p = p * (1.0f - lr * weight_decay) - lr * m_hat / (sqrtf(v_hat) + eps);
    if (master) master[i] = p;
    stochastic_round_store(&params[i], p, seed, offset + i);
}

struct Step {  // one optimizer step's settings
    AdamWHyper h;
    double weight_decay;
    size_t offset;  // the tensor's offset in the parameter buffer (rounding noise index)
};

struct Buffers {  // device
    floatX *params, *grads;
    float *master, *m, *v;  // master is nullptr in the fp32 build
};

static void free_buffers(Buffers* d) { device_free({d->params, d->grads, d->master, d->m, d->v}); }

static void launch(int variant, int block_size, const Buffers* d, size_t n, const Step* s) {
    if (variant == 1) {
        const AdamWHyper* h = &s->h;
        adamw_naive_kernel<<<(unsigned)ceil_div(n, block_size), block_size>>>(
            d->params, d->master, d->grads, d->m, d->v, n, s->offset, (float)h->lr, (float)h->beta1,
            (float)h->beta2, (float)h->eps, (float)s->weight_decay, (float)h->grad_scale,
            (float)(1.0 - pow(h->beta1, h->t)), (float)(1.0 - pow(h->beta2, h->t)), h->seed);
        CUDA_CHECK_LAUNCH();
    } else {
        adamw_update(d->params, d->master, d->grads, d->m, d->v, n, s->offset, s->weight_decay,
                     &s->h, 0);
    }
}

struct Inputs {  // host
    std::vector<floatX> params, grads;
    std::vector<float> master, m, v;  // master: the parameters' fp32 values (bf16 build)
};

static Inputs make_inputs(size_t n, uint64_t seed) {
    uint64_t rng = seed;
    Inputs in;
    in.master = random_float(n, &rng, -0.2f, 0.2f);
    for (float p : in.master) in.params.push_back((floatX)p);
    in.grads = random_floatx(n, &rng, -0.05f, 0.05f);
    in.m = random_float(n, &rng, -0.01f, 0.01f);
    in.v = random_float(n, &rng, 0.0f, 1e-3f);
    for (size_t i = 0; i < n; i += 7)
        in.v[i] = 0.0f;  // first steps: v = 0, the update is ~ lr * sign(g)
    return in;
}

static Buffers upload(const Inputs* in) {
    return {device_copy(in->params), device_copy(in->grads),
            FLOATX_IS_FP32 ? nullptr : device_copy(in->master), device_copy(in->m),
            device_copy(in->v)};
}

struct Reference {
    std::vector<double> p, p_scale, m, m_scale, v, v_scale;
};

// Float64 reference; each scale is the sum of the magnitudes of the terms of the update.
static Reference reference(const Inputs* in, const Step* s) {
    const AdamWHyper* h = &s->h;
    const double bias1 = 1.0 - pow(h->beta1, h->t), bias2 = 1.0 - pow(h->beta2, h->t);
    Reference r;
    for (size_t i = 0; i < in->grads.size(); i++) {
        const double g = (double)(float)in->grads[i] * h->grad_scale;
        const double p = FLOATX_IS_FP32 ? (double)(float)in->params[i] : (double)in->master[i];
        const double m = h->beta1 * in->m[i] + (1.0 - h->beta1) * g;
        const double v = h->beta2 * in->v[i] + (1.0 - h->beta2) * g * g;
        const double step_per_m = h->lr / bias1 / (sqrt(v / bias2) + h->eps);
        const double m_scale = h->beta1 * fabs(in->m[i]) + (1.0 - h->beta1) * fabs(g);
        r.m.push_back(m);
        r.m_scale.push_back(m_scale);
        r.v.push_back(v);
        r.v_scale.push_back(v);
        r.p.push_back(p * (1.0 - h->lr * s->weight_decay) - step_per_m * m);
        r.p_scale.push_back(
            fabs(p) + step_per_m * m_scale);  // m's error (it can cancel) scaled into the step
    }
    return r;
}

// float arithmetic over a handful of operations: within 1e-6 of the terms' magnitude (the
// largest part: 1 - beta, formed in float from the rounded beta, is off by up to ~4e-7). The
// stochastically rounded parameter may land on either floatX neighbour: up to one floatX ulp
// (2 x roundoff, relative) from the master value.
static const Tolerance TOL_STATE = {1e-6, 0.0};
static const Tolerance TOL_PARAMS = {1e-6, FLOATX_IS_FP32 ? 0.0 : 2 * FLOATX_ROUNDOFF};

static Step make_step(int t) {
    Step s;
    s.h.lr = 1e-3;
    s.h.beta1 = 0.9;
    s.h.beta2 = 0.95;
    s.h.eps = 1e-8;
    s.h.grad_scale = 0.6;
    s.h.t = t;
    s.h.seed = 0x9e3779b9u + t;
    s.weight_decay = 0.1;
    s.offset = 12345;
    return s;
}

// Checks every selected variant on n elements at step t; returns the failure count.
static int check_shape(const Options* o, size_t n, int t, uint64_t seed) {
    Inputs in = make_inputs(n, seed);
    const Step s = make_step(t);
    Reference ref = reference(&in, &s);
    int failures = 0;
    for (int v = 1; v <= NUM_VARIANTS; v++) {
        if (!variant_selected(o, v)) continue;
        const std::vector<int> block_sizes =
            v == 1 ? std::vector<int>{32, 256, 1024} : std::vector<int>{0};
        for (int block_size : block_sizes) {
            Buffers d = upload(&in);
            launch(v, block_size, &d, n, &s);
            CUDA_CHECK(cudaDeviceSynchronize());
            printf("  variant %d n %zu step %d block %d\n", v, n, t, block_size);
            bool ok =
                check_close("params", host_floats(d.params, n), ref.p, ref.p_scale, TOL_PARAMS);
            if (d.master)
                ok &=
                    check_close("master", host_floats(d.master, n), ref.p, ref.p_scale, TOL_STATE);
            ok &= check_close("m", host_floats(d.m, n), ref.m, ref.m_scale, TOL_STATE);
            ok &= check_close("v", host_floats(d.v, n), ref.v, ref.v_scale, TOL_STATE);
            failures += !ok;
            free_buffers(&d);
        }
    }
    return failures;
}

static void bench(const Options* o) {
    const size_t n = o->small ? 100000 : 124475904;  // GPT-2 124M's parameter count
    char shape[128];
    snprintf(shape, sizeof(shape), "n %zu parameters", n);
    print_bench_intro(shape);
    Inputs in = make_inputs(n, 7);
    Buffers d = upload(&in);
    const Step s = make_step(10);
    const double master_bytes =
        d.master ? 2 * sizeof(float) : 2 * sizeof(floatX);  // p read + written
    const double bytes =
        n * (master_bytes + (d.master ? sizeof(floatX) : 0) + sizeof(floatX) + 4 * sizeof(float));
    bench_variants(o, "adamw", VARIANTS, NUM_VARIANTS, bytes, 0.0,
                   [&](int v) { launch(v, 256, &d, n, &s); });
    free_buffers(&d);
}

int main(int argc, char** argv) {
    Options o = parse_options(argc, argv, NUM_VARIANTS, VARIANTS);
    print_header("adamw");
    struct Shape {
        size_t n;
        int t;
    };
    std::vector<Shape> shapes = {{1, 1}, {1000, 2}, {70001, 10}};
    if (!o.small)
        shapes.insert(shapes.end(), {{3000017, 1}, {5 << 20, 1000}});  // past the 4096-block grid
    int failures = 0;
    for (size_t s = 0; s < shapes.size(); s++)
        failures += check_shape(&o, shapes[s].n, shapes[s].t, 600 + s);
    if (o.bench) bench(&o);
    return finish("adamw", failures);
}
