/*
test_gpt.cu: checks train_gpt.cu against a PyTorch dump written by scripts/reference.py (whose
docstring specifies the model and the dump format).

  test_gpt DUMP

builds the model with the dump's configuration, loads its initial parameters and then compares:
  1. the logits of every micro-batch of step 0 and the step-0 loss,
  2. every accumulated gradient of step 0 (and that the key bias gradient is exactly zero),
  3. for each step k: the loss, the learning rate, the gradient norm and every parameter after
     the update.
Then it runs everything a second time and checks that both runs produced identical bits.

Bounds (each printed next to the measured error; a NaN or Inf never passes):
  relative norm error  rel = ||ours - ref|| / ||ref||  (rel = 0 when both are exactly zero)
  fp32 build: rel <= 1e-5 for every tensor and scalar, and max |ours - ref| <= 1e-4 * max |ref|:
              an element may stray further than the norm average, but not 10x the norm bound
              measured against the tensor's largest entry. Parameters are compared as they are
              (theta_k): their change since initialization cannot be held to 1e-5, because fp32
              rounds each weight to 2^-24 of its size (about 6e-8 for a LayerNorm gain of 1)
              while a step moves it by about lr = 1e-3, a 6e-5 relative error neither program
              can avoid. At 1e-5 of theta, an update that is off by more than ~1e-3 of itself
              still fails.
  bf16 build: rel <= min(max(BF16_FACTOR * d, BF16_FLOOR), 5e-2), where d is the dump's
              bf16.<name>, how far PyTorch's own bf16-autocast run moves that quantity.
              BF16_FLOOR = 2^-8 is bf16's unit roundoff: storing an exact result in bf16 alone
              can cost that much, so a quantity PyTorch's run happens to leave (almost) unchanged
              still gets it. Parameters are compared through their change since initialization
              (theta_k - theta_0), so a wrong update cannot hide under the size of the weights.
              Logits, gradients and scalars also get max |ours - ref| <= 10 * (rel bound) *
              max |ref|, the fp32 rule; parameter changes get no per-element bound (AdamW moves
              an element by about lr whatever its gradient, see add_adamw_allowance).
  Parameters, both builds: elements whose gradients are within the gradient noise of zero get
  AdamW's sign allowance (add_adamw_allowance); PyTorch's own bf16 run differs from its fp32
  run by more than 5e-2 on such steps (e.g. 0.087 for h0.attn.qkv.w and 0.25 for a 64-element
  bias after step 0), all of it from elements whose update changed sign.
  the learning rate is double arithmetic in both programs: rel <= 1e-12 in both builds.
  Exact zeros in the reference (the key bias gradient) must be exact zeros here.
*/
#define TRAIN_GPT_NO_MAIN
#include "train_gpt.cu"

// The bf16 tolerance rule (see the header).
constexpr double BF16_FACTOR = 4.0;
constexpr double BF16_FLOOR = 1.0 / 256.0;
constexpr double BF16_CEILING = 5e-2;
constexpr double FP32_REL = 1e-5;
constexpr double MAX_ABS_FACTOR = 10.0;  // max-abs bound = factor * rel bound * max |ref|
constexpr double LR_REL = 1e-12;
// Gradient noise relative to a tensor's largest gradient (see add_adamw_allowance).
// GRAD_NOISE: typical noise of one gradient element; SIGN_NOISE: below this RMS an element's
// update may change sign.
constexpr double GRAD_NOISE = FLOATX_IS_FP32 ? 1e-6 : 1.0 / 512.0;
constexpr double SIGN_NOISE = FLOATX_IS_FP32 ? 1e-5 : 1.0 / 64.0;

// =============================================================================================
// The dump: a list of named, typed arrays.

enum DumpType { DUMP_F32 = 0, DUMP_I32 = 1, DUMP_F64 = 2, DUMP_I64 = 3 };

struct DumpRecord {
    char* name;
    int dtype;
    int ndim;
    int64_t dims[8];
    size_t numel;
    void* data;
};

struct Dump {
    int count;
    DumpRecord* records;
};

inline void dump_load(Dump* d, const char* path) {
    FILE* f = FOPEN_CHECK(path, "rb");
    char magic[8];
    FREAD_CHECK(magic, 1, 8, f);
    if (memcmp(magic, "GPTDUMP1", 8) != 0) {
        fprintf(stderr, "%s: not a GPTDUMP1 file\n", path);
        exit(EXIT_FAILURE);
    }
    uint32_t n;
    FREAD_CHECK(&n, 4, 1, f);
    d->count = (int)n;
    d->records = (DumpRecord*)MALLOC_CHECK(n * sizeof(DumpRecord));
    for (uint32_t i = 0; i < n; i++) {
        DumpRecord* r = &d->records[i];
        uint32_t name_len, dtype, ndim;
        FREAD_CHECK(&name_len, 4, 1, f);
        r->name = (char*)MALLOC_CHECK(name_len + 1);
        FREAD_CHECK(r->name, 1, name_len, f);
        r->name[name_len] = '\0';
        FREAD_CHECK(&dtype, 4, 1, f);
        FREAD_CHECK(&ndim, 4, 1, f);
        if (dtype > 3 || ndim > 8) {
            fprintf(stderr, "%s: record '%s' has dtype %u ndim %u (corrupt dump?)\n", path, r->name, dtype, ndim);
            exit(EXIT_FAILURE);
        }
        r->dtype = (int)dtype;
        r->ndim = (int)ndim;
        r->numel = 1;
        if (ndim > 0) FREAD_CHECK(r->dims, 8, ndim, f);
        for (uint32_t k = 0; k < ndim; k++) r->numel *= (size_t)r->dims[k];
        size_t elem = (dtype == DUMP_F32 || dtype == DUMP_I32) ? 4 : 8;
        r->data = MALLOC_CHECK(r->numel * elem);
        FREAD_CHECK(r->data, elem, r->numel, f);
    }
    fclose(f);
}

inline const DumpRecord* dump_find(const Dump* d, const char* name) {
    for (int i = 0; i < d->count; i++)
        if (strcmp(d->records[i].name, name) == 0) return &d->records[i];
    fprintf(stderr, "dump has no record '%s'\n", name);
    exit(EXIT_FAILURE);
}

// A scalar record (i64 or f64) as a double.
inline double dump_scalar(const Dump* d, const char* name) {
    const DumpRecord* r = dump_find(d, name);
    if (r->numel != 1 || (r->dtype != DUMP_F64 && r->dtype != DUMP_I64)) {
        fprintf(stderr, "dump record '%s' is not an f64/i64 scalar\n", name);
        exit(EXIT_FAILURE);
    }
    return r->dtype == DUMP_F64 ? *(const double*)r->data : (double)*(const int64_t*)r->data;
}

// An f32 (or i32) record of exactly `numel` elements.
inline const void* dump_array(const Dump* d, const char* name, int dtype, size_t numel) {
    const DumpRecord* r = dump_find(d, name);
    if (r->dtype != dtype || r->numel != numel) {
        fprintf(stderr, "dump record '%s': dtype %d with %zu elements, expected dtype %d with %zu\n",
                name, r->dtype, r->numel, dtype, numel);
        exit(EXIT_FAILURE);
    }
    return r->data;
}

// =============================================================================================
// Comparisons.

struct Tally {
    int checks, failures;
    bool print;  // the second run only counts
};

inline double rel_bound_for(const Dump* d, const char* name) {
    if (FLOATX_IS_FP32) return FP32_REL;
    char key[160];
    snprintf(key, sizeof(key), "bf16.%s", name);
    double diff = dump_scalar(d, key);
    double bound = BF16_FACTOR * diff;
    if (bound < BF16_FLOOR || std::isnan(bound)) bound = BF16_FLOOR;
    return bound < BF16_CEILING ? bound : BF16_CEILING;
}

// Compares n values and prints one line. abs_bound < 0: no max-abs bound (printed as "-").
// allowance (or nullptr): element i's difference counts only beyond allowance[i].
inline bool compare_values(Tally* tally, const char* name, const double* ours, const double* ref,
                           size_t n, double rel_bound, double abs_bound,
                           const double* allowance = nullptr) {
    double diff2 = 0.0, ref2 = 0.0, max_abs = 0.0;
    size_t worst = 0;
    bool finite = true;
    for (size_t i = 0; i < n; i++) {
        if (!std::isfinite(ours[i])) finite = false;
        double e = fabs(ours[i] - ref[i]);
        if (allowance) e = fmax(0.0, e - allowance[i]);
        diff2 += e * e;
        ref2 += ref[i] * ref[i];
        if (e > max_abs) {
            max_abs = e;
            worst = i;
        }
    }
    double rel = ref2 > 0.0 ? sqrt(diff2 / ref2) : (diff2 > 0.0 ? INFINITY : 0.0);
    bool ok = finite && rel <= rel_bound && (abs_bound < 0.0 || max_abs <= abs_bound);
    if (!finite) rel = NAN;
    tally->checks++;
    if (!ok) tally->failures++;
    if (tally->print || !ok) {
        char abs_text[32] = "-";
        if (abs_bound >= 0.0) snprintf(abs_text, sizeof(abs_text), "%.2e", abs_bound);
        printf("  %-28s rel %.3e (bound %.2e)  max abs %.3e (bound %s)  %s\n", name, rel,
               rel_bound, max_abs, abs_text, ok ? "ok" : "FAIL");
        if (!ok) printf("    largest difference at element %zu: ours %.9g reference %.9g\n", worst, ours[worst], ref[worst]);
    }
    return ok;
}

// The max-abs bound that goes with a relative bound: MAX_ABS_FACTOR * rel_bound * max |ref|.
inline double abs_bound_for(const double* ref, size_t n, double rel_bound) {
    double max_ref = 0.0;
    for (size_t i = 0; i < n; i++) max_ref = fmax(max_ref, fabs(ref[i]));
    return MAX_ABS_FACTOR * rel_bound * max_ref;
}

inline bool compare_floats(Tally* tally, const Dump* d, const char* name, const float* ours,
                           const float* ref, size_t n) {
    double* a = (double*)MALLOC_CHECK(n * sizeof(double));
    double* b = (double*)MALLOC_CHECK(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        a[i] = ours[i];
        b[i] = ref[i];
    }
    double rel_bound = rel_bound_for(d, name);
    bool ok = compare_values(tally, name, a, b, n, rel_bound, abs_bound_for(b, n, rel_bound));
    free(a);
    free(b);
    return ok;
}

inline void compare_scalar(Tally* tally, const Dump* d, const char* name, double ours, double rel_bound) {
    double ref = dump_scalar(d, name);
    compare_values(tally, name, &ours, &ref, 1, rel_bound, abs_bound_for(&ref, 1, rel_bound));
}

// =============================================================================================
// Reading the model's state back.

inline void download_floatX(float* dst, const floatX* src, size_t n) {
    floatX* tmp = (floatX*)MALLOC_CHECK(n * sizeof(floatX));
    CUDA_CHECK(cudaMemcpy(tmp, src, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) dst[i] = (float)tmp[i];
    free(tmp);
}

// The fp32 parameters: master weights in the bf16 build, the parameters themselves in fp32.
inline void download_params(float* dst, const GPT* m) {
    if (m->master) CUDA_CHECK(cudaMemcpy(dst, m->master, m->layout.total * sizeof(float), cudaMemcpyDeviceToHost));
    else download_floatX(dst, m->params, m->layout.total);
}

// FNV-1a over the bytes of a device buffer.
inline uint64_t hash_device(uint64_t h, const void* ptr, size_t bytes) {
    unsigned char* tmp = (unsigned char*)MALLOC_CHECK(bytes);
    CUDA_CHECK(cudaMemcpy(tmp, ptr, bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < bytes; i++) h = (h ^ tmp[i]) * 0x100000001b3ull;
    free(tmp);
    return h;
}
inline uint64_t hash_bytes(uint64_t h, const void* ptr, size_t bytes) {
    const unsigned char* p = (const unsigned char*)ptr;
    for (size_t i = 0; i < bytes; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

// AdamW's allowance. AdamW moves an element by lr * m/(sqrt(v)+eps), about lr whatever the
// size of its gradient, so gradient noise far below anything a gradient check can resolve
// moves elements with small gradients a lot. To first order a gradient error n moves the
// update by up to 2 * lr * n / (sqrt(v_hat) + eps) (one term from m, one from sqrt(v)), never
// more than 2 * lr. Each step adds that to the element's allowance (its difference counts only
// beyond it), with n = GRAD_NOISE * max|g| of its tensor: fp32 1e-6 (measured gradient errors:
// up to 3e-7 of max|g|), bf16 2^-9 (bf16's rounding of a gradient). An element whose gradient
// RMS is below SIGN_NOISE * max|g| (fp32 1e-5, bf16 2^-6; measured bf16 gradient errors reach
// 2^-7 of max|g|) may move the other way altogether and gets the full 2 * lr. Elements with
// ordinary gradients get a small allowance (fp32: ~2e-5 lr), so the bounds keep their teeth.
// grads_scratch / v_scratch: layout.total floats of scratch.
inline void add_adamw_allowance(double* allowance, float* grads_scratch, float* v_scratch,
                                const GPT* m, double lr, double grad_scale) {
    const ParamLayout* layout = &m->layout;
    download_floatX(grads_scratch, m->grads, layout->total);
    CUDA_CHECK(cudaMemcpy(v_scratch, m->adam_v, layout->total * sizeof(float), cudaMemcpyDeviceToHost));
    const double bias_corr2 = 1.0 - pow(0.95, m->adam_t);
    for (int i = 0; i < layout->count; i++) {
        const ParamTensor* t = &layout->tensors[i];
        double max_g = 0.0;
        for (size_t j = 0; j < t->numel; j++) max_g = fmax(max_g, fabs(grads_scratch[t->offset + j]));
        const double noise = GRAD_NOISE * max_g * grad_scale;
        for (size_t j = 0; j < t->numel; j++) {
            double denom = sqrt(v_scratch[t->offset + j] / bias_corr2) + 1e-8;
            bool may_flip = denom < SIGN_NOISE * max_g * grad_scale;
            allowance[t->offset + j] += 2.0 * lr * (may_flip ? 1.0 : fmin(1.0, noise / denom));
        }
    }
}

// =============================================================================================
// One complete run: step-0 logits and gradients, then K steps. Returns a hash of everything
// it computed (logits, losses, norms, final parameters, gradients and optimizer state).

struct TestSetup {
    GPTConfig config;
    int B, T, A, K;
    ScheduleConfig sched;
    double weight_decay, grad_clip;
    uint64_t seed;
    float* init;  // layout.total floats, zero in the gaps
};

inline uint64_t run_once(const Dump* d, const TestSetup* s, Tally* tally) {
    const GPTConfig* c = &s->config;
    const int B = s->B, T = s->T, A = s->A, K = s->K, V = c->vocab, Vp = c->padded_vocab;
    const size_t N = (size_t)B * T;
    GPT model;
    gpt_build(&model, c, B, T, s->seed);
    model.poison_activations = true;
    gpt_set_params(&model, s->init);
    const ParamLayout* layout = &model.layout;
    const int* inputs = (const int*)dump_array(d, "inputs", DUMP_I32, (size_t)K * A * N);
    const int* targets = (const int*)dump_array(d, "targets", DUMP_I32, (size_t)K * A * N);
    uint64_t h = 0xcbf29ce484222325ull;
    char name[160];

    // 1. Step-0 logits (A,B,T,V) and loss, micro-batch by micro-batch, forward only.
    float* logits = (float*)MALLOC_CHECK((size_t)A * N * V * sizeof(float));
    float* row = (float*)MALLOC_CHECK((size_t)N * Vp * sizeof(float));
    double loss0 = 0.0;
    for (int a = 0; a < A; a++) {
        loss0 += gpt_forward(&model, inputs + a * N, targets + a * N, 0.0f) / A;
        download_floatX(row, model.acts.logits, N * Vp);
        for (size_t i = 0; i < N; i++) memcpy(logits + (a * N + i) * V, row + i * Vp, V * sizeof(float));
    }
    if (tally->print) printf("step 0 forward:\n");
    compare_floats(tally, d, "step0.logits", logits,
                   (const float*)dump_array(d, "step0.logits", DUMP_F32, (size_t)A * N * V), (size_t)A * N * V);
    h = hash_bytes(h, logits, (size_t)A * N * V * sizeof(float));
    free(logits);
    free(row);

    float* values = (float*)MALLOC_CHECK(layout->total * sizeof(float));
    float* adam_v = (float*)MALLOC_CHECK(layout->total * sizeof(float));
    double* allowance = (double*)MALLOC_CHECK(layout->total * sizeof(double));
    for (size_t i = 0; i < layout->total; i++) allowance[i] = 0.0;
    for (int k = 0; k < K; k++) {
        const size_t step_offset = (size_t)k * A * N;
        double loss = gpt_forward_backward(&model, inputs + step_offset, targets + step_offset, A);
        if (k == 0) {
            // forward-only and training forward of step 0 agree on the loss
            snprintf(name, sizeof(name), "step0.loss");
            compare_scalar(tally, d, name, loss0, rel_bound_for(d, name));
            // 2. every gradient of step 0, before clipping
            if (tally->print) printf("step 0 gradients:\n");
            download_floatX(values, model.grads, layout->total);
            for (int i = 0; i < layout->count; i++) {
                const ParamTensor* t = &layout->tensors[i];
                snprintf(name, sizeof(name), "step0.grad.%s", t->name);
                compare_floats(tally, d, name, values + t->offset,
                               (const float*)dump_array(d, name, DUMP_F32, t->numel), t->numel);
            }
            for (int l = 0; l < c->layers; l++) {  // the key bias gradient: exactly zero
                const float* kb = values + layout->tensors[layer_tensor_index(l, QKV_B)].offset + c->channels;
                bool zero = true;
                for (int i = 0; i < c->channels; i++) zero = zero && kb[i] == 0.0f && !std::signbit(kb[i]);
                tally->checks++;
                if (!zero) tally->failures++;
                if (!zero || tally->print)
                    printf("  h%d key bias gradient exactly zero: %s\n", l, zero ? "ok" : "FAIL");
            }
            h = hash_bytes(h, values, layout->total * sizeof(float));
        }
        float norm = gpt_grad_norm(&model);
        double lr = learning_rate(&s->sched, k);
        double grad_scale = clip_scale(norm, s->grad_clip);
        gpt_update(&model, lr, s->weight_decay, grad_scale);
        add_adamw_allowance(allowance, values, adam_v, &model, lr, grad_scale);

        // 3. the step's scalars and every parameter, through theta_k - theta_0
        if (tally->print) printf("step %d:\n", k);
        snprintf(name, sizeof(name), "step%d.loss", k);
        compare_scalar(tally, d, name, loss, rel_bound_for(d, name));
        snprintf(name, sizeof(name), "step%d.lr", k);
        compare_scalar(tally, d, name, lr, LR_REL);
        snprintf(name, sizeof(name), "step%d.grad_norm", k);
        compare_scalar(tally, d, name, norm, rel_bound_for(d, name));
        h = hash_bytes(h, &loss, sizeof(loss));
        h = hash_bytes(h, &norm, sizeof(norm));
        download_params(values, &model);
        for (int i = 0; i < layout->count; i++) {
            const ParamTensor* t = &layout->tensors[i];
            snprintf(name, sizeof(name), "step%d.param.%s", k, t->name);
            const float* ref = (const float*)dump_array(d, name, DUMP_F32, t->numel);
            double* ours_k = (double*)MALLOC_CHECK(t->numel * sizeof(double));
            double* ref_k = (double*)MALLOC_CHECK(t->numel * sizeof(double));
            for (size_t j = 0; j < t->numel; j++) {
                double init = FLOATX_IS_FP32 ? 0.0 : s->init[t->offset + j];
                ours_k[j] = (double)values[t->offset + j] - init;
                ref_k[j] = (double)ref[j] - init;
            }
            double rel_bound = rel_bound_for(d, name);
            double abs_bound = FLOATX_IS_FP32 ? abs_bound_for(ref_k, t->numel, rel_bound) : -1.0;
            compare_values(tally, name, ours_k, ref_k, t->numel, rel_bound, abs_bound,
                           allowance + t->offset);
            free(ours_k);
            free(ref_k);
        }
    }
    free(values);
    free(adam_v);
    free(allowance);
    const size_t P = layout->total;
    h = hash_device(h, model.params, P * sizeof(floatX));
    h = hash_device(h, model.grads, P * sizeof(floatX));
    if (model.master) h = hash_device(h, model.master, P * sizeof(float));
    h = hash_device(h, model.adam_m, P * sizeof(float));
    h = hash_device(h, model.adam_v, P * sizeof(float));
    gpt_free(&model);
    return h;
}

int main(int argc, char** argv) {
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: %s DUMP\n  checks the %s build of train_gpt.cu against a dump of "
                        "scripts/reference.py\n", argv[0], PRECISION_NAME);
        return EXIT_FAILURE;
    }
    Dump d;
    dump_load(&d, argv[1]);
    TestSetup s;
    s.config.vocab = (int)dump_scalar(&d, "config.vocab");
    s.config.padded_vocab = (int)dump_scalar(&d, "config.padded_vocab");
    s.config.context = (int)dump_scalar(&d, "config.context");
    s.config.layers = (int)dump_scalar(&d, "config.layers");
    s.config.heads = (int)dump_scalar(&d, "config.heads");
    s.config.channels = (int)dump_scalar(&d, "config.embd");
    s.B = (int)dump_scalar(&d, "config.batch");
    s.T = (int)dump_scalar(&d, "config.seq");
    s.A = (int)dump_scalar(&d, "config.grad_accum");
    s.K = (int)dump_scalar(&d, "config.steps");
    s.seed = (uint64_t)dump_scalar(&d, "config.seed");
    s.sched.schedule = (int)dump_scalar(&d, "config.schedule");
    s.sched.lr = dump_scalar(&d, "config.lr");
    s.sched.warmup = (int)dump_scalar(&d, "config.warmup");
    s.sched.min_lr_frac = dump_scalar(&d, "config.min_lr_frac");
    s.sched.decay_frac = dump_scalar(&d, "config.decay_frac");
    s.sched.steps = s.K;
    s.weight_decay = dump_scalar(&d, "config.weight_decay");
    s.grad_clip = dump_scalar(&d, "config.grad_clip");
    char msg[256];
    if (const char* err = gpt_config_error(&s.config, s.B, s.T, msg, sizeof(msg))) {
        fprintf(stderr, "dump config: %s\n", err);
        return EXIT_FAILURE;
    }
    if (s.config.padded_vocab != padded_vocab_of(s.config.vocab) || s.A < 1 || s.K < 1 ||
        s.sched.schedule < 0 || s.sched.schedule >= NUM_SCHEDULES) {
        fprintf(stderr, "dump config: padded vocab %d (expected %d), grad accum %d, steps %d, schedule %d\n",
                s.config.padded_vocab, padded_vocab_of(s.config.vocab), s.A, s.K, s.sched.schedule);
        return EXIT_FAILURE;
    }
    printf("test_gpt (%s): %s\n  V %d Vp %d T %d maxT %d L %d NH %d C %d | B %d A %d K %d | %s lr %g warmup %d\n",
           PRECISION_NAME, argv[1], s.config.vocab, s.config.padded_vocab, s.T, s.config.context,
           s.config.layers, s.config.heads, s.config.channels, s.B, s.A, s.K,
           SCHEDULE_NAMES[s.sched.schedule], s.sched.lr, s.sched.warmup);

    // initial parameters in layout order
    ParamLayout layout;
    build_param_layout(&layout, &s.config);
    s.init = (float*)MALLOC_CHECK(layout.total * sizeof(float));
    memset(s.init, 0, layout.total * sizeof(float));
    for (int i = 0; i < layout.count; i++) {
        const ParamTensor* t = &layout.tensors[i];
        char name[64];
        snprintf(name, sizeof(name), "init.%s", t->name);
        const DumpRecord* r = dump_find(&d, name);
        bool shape_ok = r->dtype == DUMP_F32 && r->ndim == (t->cols > 0 ? 2 : 1) && r->dims[0] == t->rows &&
                        (t->cols == 0 || r->dims[1] == t->cols);
        if (!shape_ok) {
            fprintf(stderr, "dump record %s does not have the model's shape (%d, %d)\n", name, t->rows, t->cols);
            return EXIT_FAILURE;
        }
        memcpy(s.init + t->offset, r->data, t->numel * sizeof(float));
    }

    Tally first = {0, 0, true};
    uint64_t h1 = run_once(&d, &s, &first);
    Tally second = {0, 0, false};
    uint64_t h2 = run_once(&d, &s, &second);
    bool identical = h1 == h2 && first.failures == second.failures;
    printf("second run bit-identical to the first: %s (state hash %016llx)\n", identical ? "yes" : "NO",
           (unsigned long long)h1);
    int failures = first.failures + (identical ? 0 : 1);
    printf("test_gpt %s: %d checks, %d failed, runs %s -> %s\n", PRECISION_NAME, first.checks + 1,
           failures, identical ? "identical" : "DIFFER", failures == 0 ? "PASS" : "FAIL");
    free(s.init);
    free(layout.tensors);
    return failures == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
