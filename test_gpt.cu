/*
test_gpt.cu: checks train_gpt.cu against a PyTorch dump written by scripts/reference.py (whose
docstring specifies the model and the dump format).

  test_gpt DUMP

builds the model with the dump's configuration and checks it in two parts (three for an FP8
dump: part (c), after the bounds).

The dump names the model (QK-norm or not), the objective (the z-loss coefficient) and the
optimizers (AdamW alone, Muon for the hidden matrices, or Lion alone), and the model is built the
same way.

(a) The free-running run: from the dump's initial parameters, the same forward, backward and K
    steps as PyTorch's fp32 run, comparing
      - the logits of every micro-batch of step 0 and the step-0 loss,
      - every accumulated gradient of step 0 (without QK-norm the key bias gradient exactly
        zero),
      - for each step k: the loss, the z-loss, both learning rates and the gradient norm,
      - every parameter after step 0, with AdamW's and Lion's sign allowance (sign_allowance) for
        their tensors.
    Then the whole run again: both runs must produce identical bits.
    Parameters after later steps are not compared here. AdamW moves an element whose gradient is
    within rounding noise of zero by about lr in a direction the noise picks; the allowance
    excuses that at step 0, but the moved elements then change the next step's forward pass and
    gradients by more than any noise model of that step covers, and the difference compounds.
    Part (b) checks every step without that cascade.
(b) Teacher-forced steps k = 0..K-1, each from the dump's own state: the parameters theta_{k-1}
    (init for k = 0; the fp32 master weights too in the bf16 build, whose bf16 copy is rounded as
    the trainer's update k would store it: stochastically, with that update's seed. Rounded to
    nearest instead, a gain of 1 moved by about lr = 2e-3 lands below its master weight both
    ways, bf16's grid being twice as fine below 1 as above, and every gradient of a Llama block
    with QK-norm then shrank by 0.2-1%: a gradient norm 5.0e-3 below the dump's where PyTorch's
    own bf16 run moves it by 9e-4), the optimizers' state of
    step k-1 (AdamW's m, v of the AdamW tensors, Muon's momentum of the Muon tensors, Lion's m
    of the Lion tensors; zeros
    for k = 0) and the step count k. Then
      - gradients: forward and backward of step k's micro-batches; the loss, the z-loss, the
        gradient norm and every gradient against step<k>.grad.* (key bias as in (a));
      - optimizer: the dump's gradient step<k>.grad.* goes into the gradient buffer and the
        update runs with the dump's learning rates and clip scale; theta_k - theta_{k-1} (fp32
        parameters: master weights in the bf16 build) and the new state (m_k and v_k, the
        momentum, or Lion's m) are compared with the dump.
    The gradient check has identical parameters and the optimizer check identical inputs, so
    an error in either shows up at the step that makes it. Part (b) excuses no element: its
    optimizer bounds are norms of what the identical inputs force (below).

Bounds (each printed next to the measured error; a NaN or Inf never passes):
  relative norm error  rel = ||ours - ref|| / ||ref||  (rel = 0 when both are exactly zero)
  fp32 build: rel <= 1e-5 for every tensor and scalar, and max |ours - ref| <= 1e-4 * max |ref|:
              an element may stray further than the norm average, but not 10x the norm bound
              measured against the tensor's largest entry.
  bf16 build: rel <= min(max(BF16_FACTOR * d, BF16_FLOOR), 5e-2), where d is the dump's
              bf16.<name>, how far PyTorch's own bf16-autocast run moves that quantity
              (teacher-forced for the per-step losses, norms and gradients).
              BF16_FLOOR = 2^-8 is bf16's unit roundoff: storing an exact result in bf16 alone
              can cost that much, so a quantity PyTorch's run happens to leave (almost) unchanged
              still gets it. Logits, gradients and scalars also get max |ours - ref| <= 10 *
              (rel bound) * max |ref|, the fp32 rule. The losses and gradient norms of part (a)
              after step 0 get the teacher-forced d too: PyTorch's free-running bf16 run moves
              them by up to ~5e-4 relative (measured), far below the 2^-8 floor.
  Part (a), parameters after step 0 (theta_0; init is theta_{-1}, as in the dump): fp32
              compares theta_0 itself at 1e-5 (fp32 rounds a weight to 2^-24 of its size, 6e-8
              for a LayerNorm gain of 1, while a step moves it by about lr: part (b) holds the
              change to account for that rounding); bf16 compares theta_0 - init with the bf16
              rule, d = bf16.step0.param.<p>, and no per-element bound (AdamW moves an element
              by about lr whatever its gradient). Both subtract AdamW's sign allowance
              element by element before the norm, and print the raw error next to it. PyTorch's
              own bf16 run differs from its fp32 run by more than 5e-2 on such steps (e.g.
              0.087 for h0.attn.qkv.w and 0.25 for a 64-element bias), all of it from elements
              whose update changed sign.
  Part (b), optimizer, both builds: for each of X = theta_k - theta_{k-1}, m_k, v_k
              rel <= 1e-5 + ||e|| / ||X_ref||  and  max |ours - ref| <= max e + 1e-4 * max |X_ref|
              where e is, per element, what the inputs and fp32 storage force on the two
              programs, computed in double from the dump's inputs:
              - the change of X when the gradient is rounded to floatX on its way into our
                gradient buffer: zero in the fp32 build; in bf16 each gradient element moves
                by up to 2^-8 of itself (round to nearest), which moves m_k by 0.1 times that
                change, v_k by 0.05 times the change of g^2, and the update by whatever AdamW's
                formula makes of it (almost nothing at step 0, where it is lr * sign(g));
              - for the update only: half a unit in the last place of theta_k as each program
                stores it in fp32 (theta_k - theta_{k-1} carries that rounding), and with weight
                decay another half unit of the decayed theta_{k-1} each (PyTorch stores it
                between its two operations; a fused multiply-add may skip that rounding).
              Muon's momentum is one fp32 lerp in both programs: e is (1 - mu) times the
              change of the (clipped) gradient element on its rounding to floatX (zero in fp32;
              measured: bit-identical to torch's in the fp32 build).
              Lion (update lr * sign(c), c = b1 m + (1-b1) g): e of the update and of m is the
              change the gradient's rounding to floatX makes in double (for the update 2 lr
              where it flips the sign of c), plus 2 lr where c is within float32 rounding of
              zero (1e-6 of its terms), whose sign either program may decide otherwise.
  the learning rates are double arithmetic in both programs: rel <= 1e-12 in both builds.
  Exact zeros in the reference (the key bias gradient without QK-norm) must be exact zeros here.

Muon's update, theta_k - theta_{k-1} = -lr wd theta - lr adjust NS(u), needs bounds of its own:
Newton-Schulz amplifies a perturbation along the directions of the small singular values of u
by up to a = 3.4445 per step (a^5 ~ 490), and the gradients of a few tokens, the suite's, have
many small singular values. So what an implementation's rounding does to NS(u) is measured, by
PyTorch, on the dump's own matrices (scripts/reference.py, records fp32.* and bf16.*):
  fp32 build, part (b): the optimizer rule above plus MUON_DRIFT_FACTOR (4) x s, s =
              fp32.step<k>.update.<p>, how far float32 arithmetic moves torch's Newton-Schulz
              update from the same iteration in float64 (s: 6.8e-7 to 2.8e-6 on the suite's
              dumps, so the 1e-5 still binds there; 10 iterations on few tokens reach s ~ 4e-4).
              Measured: at most 0.11 of the bound (2.4e-6 against 2.2e-5).
  fp32 build, part (a): theta_0 at 1e-5 plus 4 s ||theta_0 - init|| / ||theta_0|| (the same
              drift, carried by the update's share of theta_0). Measured: at most 0.04 of it.
  bf16 build, part (b): against the fp32 dump no bound can hold: torch's own bf16 step
              (bfloat16 Newton-Schulz, as in ours) lies d = bf16.step<k>.update.<p> = 1.7e-2 to
              7.6e-2 from the fp32 one on the suite's dumps (0.12 at C = 256, 0.29 at 10
              iterations), and ours as far (up to 8.6e-2): 4d is past the 5e-2 ceiling, and on
              some matrices d itself. So the bf16 build's update is held against torch's own bf16
              step from the same inputs, step<k>.update_bf16.<p> (the dump's state, the gradient
              rounded to bf16 as our buffer holds it), with the bf16 rule on D, the largest
              bf16.*.update_order.* of the dump: how far a second correct bf16 run of torch's
              iteration (every product summed in another order) lands from torch's on the same
              inputs. It is pooled over the dump's Muon matrices because one reordering of one
              matrix may flip no rounding that matters, while ours flips others: the size of
              the effect, not where it falls, is the property of the iteration. Measured: D is
              2.5e-3 to 9.6e-3 on the suite's dumps; ours is bit-identical to torch's on some
              matrices and at most 0.28 of the bound (1.1e-2 against 3.8e-2); its distance from
              the fp32 dump is printed next to it. When D itself is past the 5e-2 ceiling
              (measured: D = 0.11 at 10 iterations) no bf16 run determines the step within it:
              the comparison is printed, not held.
  bf16 build, part (a): theta_0 - init of a Muon tensor carries a bf16 Newton-Schulz of our own
              bf16 gradients, torch's of its own: their distance from the fp32 run is d =
              bf16.step0.param.<p> each (measured: d 2.2e-2 to 8.6e-2, ours up to 9.2e-2). The
              bf16 rule holds it where 4d is under the ceiling; beyond it (every Muon tensor of
              the suite's dumps) it is printed, not held, and part (b) holds the step.
FP8 dumps (scripts/reference.py --fp8 tensor|delayed|rowwise|block|mx): the model is built with
the dump's recipe (config.fp8*: GPTConfig.fp8). The trainer runs FP8 in its bf16 build only (bf16
activations, FP8 linear layers with fp32 accumulation, bf16 outputs); the fp32 build refuses the
dump (gpt_fp8_error), and the suite holds it to that refusal. Parts (a) and (b) run as above
against the dump's fp32 run of the recipe, and part (c) holds the recipe itself.
  Why the bf16 rule's d still works, and why it alone cannot hold the recipe: quantization is
  discontinuous. An element within rounding noise of a rounding boundary of its FP8 format goes
  to either neighbour (E4M3 neighbours are up to 2^-3 of it apart, E5M2 2^-2), so two correct
  runs of the same FP8 arithmetic quantize different elements differently, and every quantity
  downstream moves by far more than the noise that decided it. d = bf16.<name> of an FP8 dump is
  how far PyTorch's bf16-autocast run of the same recipe (teacher-forced; the fp32 run's delayed
  scales) lands from its fp32 run: a second correct run of the FP8 arithmetic, whose bf16
  activations flip quantizations as ours do. Measured on the suite's FP8 dumps and eight unseen
  ones: d of the gradients 2e-3 to 0.17 (up to 0.75 at step 0 of delayed scaling, below);
  ours lands at 1.0x to 1.05x d in the median and at most 1.61x d for a gradient, 2.3x for a
  gradient norm (where 4d is above the floor), so the factor 4 and the floor of the bf16 rule
  stand. Its ceiling does not: PyTorch's own second run moves gradients by up to 0.17, past
  bf16's 5e-2, and no bound that follows from FP8 arithmetic caps how far two correct runs may
  differ (a delayed-scaling step 0 runs at scale 1, so E4M3 gradients flush to zero below 2^-9
  and PyTorch's own runs differ by up to 0.75). So FP8 dumps have no ceiling, and a quantity
  whose d exceeds FP8_UNDETERMINED = 2^-2 (one E5M2 spacing at the bottom of a binade:
  PyTorch's second run lands more than a quarter of the quantity away, so the recipe does not
  determine it) is printed, not held. Measured: no gradient on the suite's configurations; on
  the unseen delayed one with E4M3 gradients, the step-0 gradients of the lower layers (part (b)
  holds its later steps).
  Part (a) after step 0: FP8 gradient noise flips the sign of many AdamW step-0 updates
  (PyTorch's own bf16 run: d = bf16.step0.param.<p> up to ~0.4), so theta_0 - init is held by
  the rule above, with the sign allowance's noise raised to the gradient's d (sign_allowance),
  where d is at most 2^-2 (measured: 5 to 25 tensors of a dump are past it and printed; part
  (b) holds their step), and the runs drift apart after it. The later losses get
  d = bf16.free.step<k>.<name>, how far PyTorch's own free-running bf16 run of the recipe moves
  them (the 2^-8 floor binds: ours up to 1.6e-4). The later gradient norms are printed next
  to PyTorch's distance, not held: a norm's difference is one scalar sample of the drift, which
  may land near zero by chance (measured: PyTorch's 1.45e-3 and ours 5.8e-3 at step 2 of one
  unseen configuration, ours a fraction of PyTorch's on others); part (b) holds every step's
  norm.
  Gradient norms (part (a) step 0, part (b)): a norm's difference is one scalar, the projection
  of the gradient's error on the gradient, which lands near zero by chance in PyTorch's run as
  in ours, so its d is pooled over the dump's steps: the largest bf16.step<j>.grad_norm, the
  size of the effect rather than one sample of it (as D for Muon). Measured: one unseen mx
  configuration's step 1 gave ours 3.9e-3 against d 9.3e-4 (its pooled d 2.2e-3).
  Part (b), delayed scaling: each step starts from the dump's amax histories and scales
  (fp8.step<k>.*, uploaded with gpt_fp8_delayed_upload at ring position k mod H). After the
  step's update our new state (the dump's state of step k-1 with our amaxes of step k-1) is held
  against the dump's state of step k by the largest relative error of an entry (the amaxes of X,
  W and G differ by orders of magnitude, so a norm would see X alone), with the bf16 rule on d =
  bf16.fp8.step<k>.*, the same measure of PyTorch's bf16 run. Measured: ours at most 2.3x d.
(c) FP8 layers alone: the dump records, for each FP8 layer, the operands of its first micro-batch
    of step K-1 in PyTorch's bf16 run (bf16 values: X, W, b, G, delayed with step K-1's scales)
    and the products the recipe makes of them, Y = q(X) q(W)^T + b, dX = q(G) q(W^T)^T,
    dW = q(G^T) q(X^T)^T, each rounded once to bf16 (fp8.layer<slot>.*). Each layer here runs
    fp8_linear_forward and fp8_linear_backward on exactly those operands. The inputs being
    identical, so is every quantization: the scales and FP8 bytes follow from the same bf16
    values by the same rules, and only the fp32 summation differs (cuBLASLt applies the scales
    to the sums, PyTorch to the operands). So each element must lie within one bf16 spacing of
    the dump's (two roundings of nearly equal fp32 sums may land on neighbours) plus
    4 K 2^-24 |a| |b|, the recursive-summation bound (K 2^-24 of the sum of |terms|, bounded by
    Cauchy-Schwarz with |a| |b| the norms of the two reduced vectors, and a dequantized value at
    most 2|x|, the subnormal case included) for elements where the sum cancels. Measured: at
    most 0.991 of that bound; a recipe error is not subtle here: 1x64 tiles in place of block's
    1x128 put elements at 25 to 215 times their bound.
  scripts/check_reference.py confirms the dump's FP8 records with its own float64 model of the
  quantization, and reference.py's exact.* records (its float64 run of the recipe) serve that
  check; they would be the fp32 build's yardstick if it ran FP8.
*/
#define TRAIN_GPT_NO_MAIN
#include "train_gpt.cu"

// The bf16 tolerance rule (see the header).
constexpr double BF16_FACTOR = 4.0;
constexpr double BF16_FLOOR = 1.0 / 256.0;
constexpr double BF16_CEILING = 5e-2;
// FP8 dumps: no ceiling; a quantity PyTorch's own bf16 run of the recipe moves by more than this
// is not determined by the recipe and is printed, not held (header).
constexpr double FP8_UNDETERMINED = 0.25;
constexpr double FP32_REL = 1e-5;
constexpr double MAX_ABS_FACTOR = 10.0;  // max-abs bound = factor * rel bound * max |ref|
constexpr double LR_REL = 1e-12;
// Muon's fp32 update also gets this many times the drift float32 arithmetic is measured to leave
// in torch's own Newton-Schulz (fp32.<name>, header).
constexpr double MUON_DRIFT_FACTOR = 4.0;
// Gradient noise relative to a tensor's largest gradient (see sign_allowance).
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
            fprintf(stderr, "%s: record '%s' has dtype %u ndim %u (corrupt dump?)\n", path, r->name,
                    dtype, ndim);
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

inline void dump_free(Dump* d) {
    for (int i = 0; i < d->count; i++) {
        free(d->records[i].name);
        free(d->records[i].data);
    }
    free(d->records);
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
        fprintf(stderr,
                "dump record '%s': dtype %d with %zu elements, expected dtype %d with %zu\n", name,
                r->dtype, r->numel, dtype, numel);
        exit(EXIT_FAILURE);
    }
    return r->data;
}

// The records <prefix><tensor name> of every parameter tensor, in layout order: dst holds
// layout.total floats, zero in the alignment gaps. Each record must have its tensor's shape.
inline void dump_param_set(const Dump* d, const ParamLayout* layout, const char* prefix,
                           float* dst) {
    memset(dst, 0, layout->total * sizeof(float));
    for (int i = 0; i < layout->count; i++) {
        const ParamTensor* t = &layout->tensors[i];
        char name[160];
        snprintf(name, sizeof(name), "%s%s", prefix, t->name);
        const DumpRecord* r = dump_find(d, name);
        bool shape_ok = r->dtype == DUMP_F32 && r->ndim == (t->cols > 0 ? 2 : 1) &&
                        r->dims[0] == t->rows && (t->cols == 0 || r->dims[1] == t->cols);
        if (!shape_ok) {
            fprintf(stderr, "dump record %s does not have the model's shape (%d, %d)\n", name,
                    t->rows, t->cols);
            exit(EXIT_FAILURE);
        }
        memcpy(dst + t->offset, r->data, t->numel * sizeof(float));
    }
}

// =============================================================================================
// Comparisons.

struct Tally {
    int checks, failures;
    bool print;  // the second run of part (a) only counts
};

inline bool fp8_dump(const Dump* d) { return dump_scalar(d, "config.fp8") != FP8_OFF; }

// The bf16 rule's d of a quantity: the dump's bf16.<name>.
inline double bf16_d(const Dump* d, const char* name) {
    char key[192];
    snprintf(key, sizeof(key), "bf16.%s", name);
    return dump_scalar(d, key);
}

inline double rel_bound_for(const Dump* d, const char* name) {
    if (FLOATX_IS_FP32) return FP32_REL;
    double bound = BF16_FACTOR * bf16_d(d, name);
    if (bound < BF16_FLOOR || std::isnan(bound)) bound = BF16_FLOOR;
    if (fp8_dump(d)) return bound;  // no ceiling (fp8_not_held)
    return bound < BF16_CEILING ? bound : BF16_CEILING;
}

// FP8 dumps in the bf16 build: whether the recipe leaves the quantity `key` undetermined (d past
// FP8_UNDETERMINED, header); if so, prints ours (relative error rel) next to d.
inline bool fp8_not_held(const Tally* tally, const Dump* d, const char* name, const char* key,
                         double rel) {
    if (FLOATX_IS_FP32 || !fp8_dump(d) || !(bf16_d(d, key) > FP8_UNDETERMINED)) return false;
    if (tally->print)
        printf("  %-30s rel %.3e (not held: PyTorch's bf16 run of the recipe lands %.3e away, "
               "past %.2g)\n",
               name, rel, bf16_d(d, key), FP8_UNDETERMINED);
    return true;
}

// Compares n values and prints one line. abs_bound < 0: no max-abs bound (printed as "-").
// allowance (or nullptr): element i's difference counts only beyond allowance[i]; the line then
// also shows the raw relative error, before the allowance.
inline bool compare_values(Tally* tally, const char* name, const double* ours, const double* ref,
                           size_t n, double rel_bound, double abs_bound,
                           const double* allowance = nullptr) {
    double diff2 = 0.0, raw2 = 0.0, ref2 = 0.0, max_abs = 0.0;
    size_t worst = 0;
    bool finite = true;
    for (size_t i = 0; i < n; i++) {
        if (!std::isfinite(ours[i])) finite = false;
        double raw = fabs(ours[i] - ref[i]);
        double e = allowance ? fmax(0.0, raw - allowance[i]) : raw;
        raw2 += raw * raw;
        diff2 += e * e;
        ref2 += ref[i] * ref[i];
        if (e > max_abs) {
            max_abs = e;
            worst = i;
        }
    }
    auto relative = [&](double d2) {
        return ref2 > 0.0 ? sqrt(d2 / ref2) : (d2 > 0.0 ? INFINITY : 0.0);
    };
    double rel = relative(diff2);
    bool ok = finite && rel <= rel_bound && (abs_bound < 0.0 || max_abs <= abs_bound);
    if (!finite) rel = NAN;
    tally->checks++;
    if (!ok) tally->failures++;
    if (tally->print || !ok) {
        char abs_text[32] = "-", raw_text[48] = "";
        if (abs_bound >= 0.0) snprintf(abs_text, sizeof(abs_text), "%.2e", abs_bound);
        if (allowance)
            snprintf(raw_text, sizeof(raw_text), " (raw %.3e)", finite ? relative(raw2) : NAN);
        printf("  %-30s rel %.3e%s (bound %.2e)  max abs %.3e (bound %s)  %s\n", name, rel,
               raw_text, rel_bound, max_abs, abs_text, ok ? "ok" : "FAIL");
        if (!ok)
            printf("    largest difference at element %zu: ours %.9g reference %.9g\n", worst,
                   ours[worst], ref[worst]);
    }
    return ok;
}

// The max-abs bound that goes with a relative bound: MAX_ABS_FACTOR * rel_bound * max |ref|.
inline double abs_bound_for(const double* ref, size_t n, double rel_bound) {
    double max_ref = 0.0;
    for (size_t i = 0; i < n; i++) max_ref = fmax(max_ref, fabs(ref[i]));
    return MAX_ABS_FACTOR * rel_bound * max_ref;
}

// The relative norm difference of two arrays (0 when both are exactly zero).
inline double rel_diff(const double* a, const double* b, size_t n) {
    double d2 = 0.0, b2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        d2 += (a[i] - b[i]) * (a[i] - b[i]);
        b2 += b[i] * b[i];
    }
    return b2 > 0.0 ? sqrt(d2 / b2) : (d2 > 0.0 ? INFINITY : 0.0);
}

// A float tensor against the dump's record `name`, with the build's rule for that name.
inline bool compare_floats(Tally* tally, const Dump* d, const char* name, const float* ours,
                           size_t n) {
    const float* ref = (const float*)dump_array(d, name, DUMP_F32, n);
    double* a = (double*)MALLOC_CHECK(n * sizeof(double));
    double* b = (double*)MALLOC_CHECK(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        a[i] = ours[i];
        b[i] = ref[i];
    }
    bool ok = true;
    if (!fp8_not_held(tally, d, name, name, rel_diff(a, b, n))) {
        double rel_bound = rel_bound_for(d, name);
        ok = compare_values(tally, name, a, b, n, rel_bound, abs_bound_for(b, n, rel_bound));
    }
    free(a);
    free(b);
    return ok;
}

// A scalar against the dump's record `name`.
inline void compare_scalar(Tally* tally, const Dump* d, const char* name, double ours,
                           double rel_bound) {
    double ref = dump_scalar(d, name);
    compare_values(tally, name, &ours, &ref, 1, rel_bound, abs_bound_for(&ref, 1, rel_bound));
}

// A scalar against the dump's record `name` with the build's rule for the quantity `key` (name,
// or a record of its own d).
inline void compare_scalar_rule(Tally* tally, const Dump* d, const char* name, const char* key,
                                double ours) {
    const double ref = dump_scalar(d, name);
    if (!fp8_not_held(tally, d, name, key, fabs(ours - ref) / fabs(ref)))
        compare_scalar(tally, d, name, ours, rel_bound_for(d, key));
}

// Part (b)'s optimizer rule: rel <= FP32_REL + drift + ||e|| / ||ref||, max abs <= max e +
// MAX_ABS_FACTOR * (FP32_REL + drift) * max |ref|, with e the per-element error the inputs and
// storage force and drift the relative error the arithmetic is measured to leave (Muon's
// Newton-Schulz; 0 elsewhere) (header). With ref all zero only exact zeros pass (rel is then 0
// or inf).
inline void compare_forced(Tally* tally, const char* name, const double* ours, const double* ref,
                           const double* e, size_t n, double drift = 0.0) {
    double e2 = 0.0, max_e = 0.0, ref2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        e2 += e[i] * e[i];
        max_e = fmax(max_e, e[i]);
        ref2 += ref[i] * ref[i];
    }
    double rel_bound = FP32_REL + drift + (ref2 > 0.0 ? sqrt(e2 / ref2) : 0.0);
    compare_values(tally, name, ours, ref, n, rel_bound,
                   max_e + abs_bound_for(ref, n, FP32_REL + drift));
}


// =============================================================================================
// The model's state, read back and set.

inline void download_floatX(float* dst, const floatX* src, size_t n) {
    floatX* tmp = (floatX*)MALLOC_CHECK(n * sizeof(floatX));
    CUDA_CHECK(cudaMemcpy(tmp, src, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) dst[i] = (float)tmp[i];
    free(tmp);
}

// Rounds n floats to floatX (to nearest) and copies them to the device.
inline void upload_floatX(floatX* dst, const float* src, size_t n) {
    floatX* tmp = (floatX*)MALLOC_CHECK(n * sizeof(floatX));
    for (size_t i = 0; i < n; i++) tmp[i] = (floatX)src[i];
    CUDA_CHECK(cudaMemcpy(dst, tmp, n * sizeof(floatX), cudaMemcpyHostToDevice));
    free(tmp);
}

// The fp32 parameters: master weights in the bf16 build, the parameters themselves in fp32.
inline void download_params(float* dst, const GPT* m) {
    if (m->master) {
        memset(dst, 0, m->layout.total * sizeof(float));  // the alignment gaps
        gpt_state_download(m, STATE_MASTER, dst);
    } else {
        download_floatX(dst, m->params, m->layout.total);
    }
}

// The optimizer state on the host: one array per state buffer (STATE_BUFFERS), each in layout
// order (layout.total floats, a tensor's part at its offset; zero for the other optimizer's
// tensors).
struct HostState {
    std::vector<float> buf[NUM_STATE_BUFFERS];
};

// The dump's records of each state buffer (step<k>.<kind>.<param>, for its optimizer's tensors).
static const char* const STATE_RECORDS[NUM_STATE_BUFFERS] = {"adam_m", "adam_v", "muon_momentum",
                                                             "lion_m"};

// The state after step k from the dump's records (k < 0: zeros, the state before step 0).
inline void dump_state_set(const Dump* d, const ParamLayout* layout, int k, HostState* st) {
    for (int b = 0; b < NUM_STATE_BUFFERS; b++) {
        st->buf[b].assign(layout->total, 0.0f);
        for (int i = 0; i < layout->count && k >= 0; i++) {
            const ParamTensor* t = &layout->tensors[i];
            if (t->optimizer != STATE_BUFFERS[b].optimizer) continue;
            char name[160];
            snprintf(name, sizeof(name), "step%d.%s.%s", k, STATE_RECORDS[b], t->name);
            memcpy(st->buf[b].data() + t->offset, dump_array(d, name, DUMP_F32, t->numel),
                   t->numel * sizeof(float));
        }
    }
}

inline void download_state(const GPT* m, HostState* st) {
    for (int b = 0; b < NUM_STATE_BUFFERS; b++) {
        st->buf[b].assign(m->layout.total, 0.0f);
        gpt_state_download(m, b, st->buf[b].data());
    }
}

// Sets the state a step starts from: parameters theta (fp32, layout.total floats; the floatX
// copy as the trainer's update opt_step stores it: gpt_set_params), the optimizer state and the
// optimizer step count.
inline void set_optimizer_state(GPT* m, const float* theta, const HostState* st, int opt_step) {
    gpt_set_params(m, theta, opt_step);
    for (int b = 0; b < NUM_STATE_BUFFERS; b++)
        if (!st->buf[b].empty()) gpt_state_upload(m, b, st->buf[b].data());
    m->opt_step = opt_step;
}

// Without QK-norm the key bias gradient (slice C..2C of every qkv.b gradient) must be exactly +0
// (with QK-norm it is an ordinary gradient).
inline void check_key_bias_zero(Tally* tally, const GPT* m, const float* grads) {
    const int C = m->config.channels;
    const bool key_bias = !m->config.qk_norm && m->config.llama.arch == ARCH_GPT2;
    for (int l = 0; l < m->config.layers && key_bias; l++) {
        const float* kb =
            grads + m->layout.tensors[block_tensor(&m->layout.index, l, QKV_B)].offset + C;
        bool zero = true;
        for (int i = 0; i < C; i++) zero = zero && kb[i] == 0.0f && !std::signbit(kb[i]);
        tally->checks++;
        if (!zero) tally->failures++;
        if (!zero || tally->print)
            printf("  h%d key bias gradient exactly zero: %s\n", l, zero ? "ok" : "FAIL");
    }
}

// Every gradient in the model's buffer against the dump's step<k>.grad.<p> (grads: scratch of
// layout.total floats, left holding the gradients).
inline void compare_grads(Tally* tally, const Dump* d, const GPT* m, int k, float* grads) {
    const ParamLayout* layout = &m->layout;
    download_floatX(grads, m->grads, layout->total);
    char name[160];
    for (int i = 0; i < layout->count; i++) {
        const ParamTensor* t = &layout->tensors[i];
        snprintf(name, sizeof(name), "step%d.grad.%s", k, t->name);
        compare_floats(tally, d, name, grads + t->offset, t->numel);
    }
    check_key_bias_zero(tally, m, grads);
}

// A step's gradient norm (step<k>.grad_norm as `name`). FP8 dumps in the bf16 build: d pooled
// over the dump's K steps, the largest bf16.step<j>.grad_norm (header); otherwise the rule.
inline void compare_grad_norm(Tally* tally, const Dump* d, const char* name, double ours, int K) {
    if (FLOATX_IS_FP32 || !fp8_dump(d)) {
        compare_scalar_rule(tally, d, name, name, ours);
        return;
    }
    double pooled = 0.0;
    for (int j = 0; j < K; j++) {
        char key[64];
        snprintf(key, sizeof(key), "step%d.grad_norm", j);
        pooled = fmax(pooled, bf16_d(d, key));
    }
    compare_scalar(tally, d, name, ours, fmax(BF16_FACTOR * pooled, BF16_FLOOR));
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

// AdamW's and Lion's sign allowance (part (a), step 0). AdamW moves an element by lr *
// m/(sqrt(v)+eps), about lr whatever the size of its gradient, so gradient noise far below anything
// a gradient check can resolve moves elements with small gradients a lot. To first order a gradient
// error n moves the update by up to 2 * lr * n / (sqrt(v_hat) + eps) (one term from m, one from
// sqrt(v)), never more than 2 * lr. The element's difference counts only beyond that, with
// n = GRAD_NOISE * max|g| of its tensor: fp32 1e-6 (measured gradient errors: up to 3e-7 of
// max|g|), bf16 2^-9 (bf16's rounding of a gradient). An element whose gradient is below
// SIGN_NOISE * max|g| (fp32 1e-5, bf16 2^-6; measured bf16 gradient errors reach 2^-7 of
// max|g|) may move the other way altogether and gets the full 2 * lr. Elements with ordinary
// gradients get a small allowance (fp32: ~2e-5 lr), so the bounds keep their teeth. At step 0
// this is the whole story: the update is lr * sign(g) up to eps, and m, v start at zero.
// Lion's step-0 update is lr * sign(g) exactly (its m starts at zero): an element whose gradient
// is below SIGN_NOISE * max|g| gets 2 * lr, the others none.
// Muon's tensors get none: Newton-Schulz acts on the whole matrix, not on each element's sign.
// FP8 dumps (bf16 build): the gradient check resolves a tensor's gradient only to its d =
// bf16.step0.grad.<p>, so the noise is max(GRAD_NOISE, d) and the sign threshold
// max(SIGN_NOISE, BF16_FACTOR d) of max|g| (d is relative to the norm, which max|g| does not
// exceed: the per-element noise it stands for is no larger than the measured one).
// grads_scratch: layout.total floats of scratch; allowance: layout.total doubles.
inline void sign_allowance(double* allowance, float* grads_scratch, const Dump* d, const GPT* m,
                           double lr, double grad_scale) {
    const ParamLayout* layout = &m->layout;
    download_floatX(grads_scratch, m->grads, layout->total);
    HostState st;
    download_state(m, &st);
    const float* v_state = st.buf[ADAMW_V].data();
    const double bias_corr2 = 1.0 - pow(0.95, m->opt_step);
    memset(allowance, 0, layout->total * sizeof(double));
    for (int i = 0; i < layout->count; i++) {
        const ParamTensor* t = &layout->tensors[i];
        if (t->optimizer == OPT_MUON) continue;
        double max_g = 0.0;
        for (size_t j = 0; j < t->numel; j++)
            max_g = fmax(max_g, fabs(grads_scratch[t->offset + j]));
        // FP8 dumps in the bf16 build: the gradient is known to d, not to bf16's rounding
        double grad_noise = GRAD_NOISE, sign_noise = SIGN_NOISE;
        if (!FLOATX_IS_FP32 && fp8_dump(d)) {
            char name[160];
            snprintf(name, sizeof(name), "step0.grad.%s", t->name);
            grad_noise = fmax(grad_noise, bf16_d(d, name));
            sign_noise = fmax(sign_noise, BF16_FACTOR * bf16_d(d, name));
        }
        const double noise = grad_noise * max_g * grad_scale;
        for (size_t j = 0; j < t->numel && t->optimizer == OPT_LION; j++) {
            const bool may_flip = fabs(grads_scratch[t->offset + j]) < sign_noise * max_g;
            allowance[t->offset + j] = may_flip ? 2.0 * lr : 0.0;
        }
        for (size_t j = 0; j < t->numel && t->optimizer == OPT_ADAMW; j++) {
            double denom = sqrt(v_state[t->offset + j] / bias_corr2) + 1e-8;
            bool may_flip = denom < sign_noise * max_g * grad_scale;
            allowance[t->offset + j] = 2.0 * lr * (may_flip ? 1.0 : fmin(1.0, noise / denom));
        }
    }
}

// =============================================================================================
// The test's setup, read from the dump.

struct TestSetup {
    GPTConfig config;
    OptimizerConfig opt;
    int B, T, A, K;
    ScheduleConfig sched;  // AdamW's peak; Muon's is muon_lr
    double muon_lr, grad_clip;
    double muon_order_noise;  // the largest bf16.*.update_order.* of the dump (header)
    uint64_t seed;
    ParamLayout layout;
    float* init;         // layout.total floats, zero in the gaps
    const int* inputs;   // (K,A,B,T)
    const int* targets;  // (K,A,B,T)
};

// =============================================================================================
// Part (a): the free-running run. Returns a hash of everything it computed (logits, losses,
// norms, final parameters, gradients and optimizer state).

inline uint64_t run_free(const Dump* d, const TestSetup* s, Tally* tally) {
    const GPTConfig* c = &s->config;
    const int A = s->A, K = s->K, V = c->vocab, Vp = c->padded_vocab;
    const size_t N = (size_t)s->B * s->T;
    GPT model;
    gpt_build(&model, c, &s->opt, s->B, s->T, s->seed);
    model.poison_activations = true;
    gpt_set_params(&model, s->init);
    const ParamLayout* layout = &model.layout;
    const size_t P = layout->total;
    uint64_t h = 0xcbf29ce484222325ull;
    char name[160];

    // Step-0 logits (A,B,T,V) and loss, micro-batch by micro-batch, forward only.
    float* logits = (float*)MALLOC_CHECK((size_t)A * N * V * sizeof(float));
    float* row = (float*)MALLOC_CHECK(N * Vp * sizeof(float));
    double loss0 = 0.0;
    for (int micro = 0; micro < A; micro++) {
        loss0 += gpt_forward(&model, s->inputs + micro * N, s->targets + micro * N, 0.0f) / A;
        download_floatX(row, model.acts.logits, N * Vp);
        for (size_t i = 0; i < N; i++)
            memcpy(logits + (micro * N + i) * V, row + i * Vp, V * sizeof(float));
    }
    if (tally->print) printf("step 0 forward:\n");
    compare_floats(tally, d, "step0.logits", logits, (size_t)A * N * V);
    compare_scalar_rule(tally, d, "step0.loss", "step0.loss", loss0);
    h = hash_bytes(h, logits, (size_t)A * N * V * sizeof(float));
    free(logits);
    free(row);

    float* values = (float*)MALLOC_CHECK(P * sizeof(float));
    for (int k = 0; k < K; k++) {
        const size_t step_offset = (size_t)k * A * N;
        double z_loss;
        double loss = gpt_forward_backward(&model, s->inputs + step_offset,
                                           s->targets + step_offset, A, &z_loss);
        if (k == 0) {
            if (tally->print) printf("step 0 gradients:\n");
            compare_grads(tally, d, &model, 0, values);
            h = hash_bytes(h, values, P * sizeof(float));
        }
        float norm = gpt_grad_norm(&model);
        double lrs[NUM_OPTIMIZERS];
        step_learning_rates(&s->sched, s->muon_lr, k, lrs);
        double grad_scale = clip_scale(norm, s->grad_clip);
        gpt_update(&model, lrs, grad_scale);

        if (tally->print) printf("step %d:\n", k);
        // FP8 dumps after step 0: PyTorch's free-running bf16 run's d (header)
        const char* free_run = k > 0 && c->fp8.recipe != FP8_OFF ? "free." : "";
        char key[176];
        snprintf(name, sizeof(name), "step%d.loss", k);
        snprintf(key, sizeof(key), "%s%s", free_run, name);
        compare_scalar_rule(tally, d, name, key, loss);
        snprintf(name, sizeof(name), "step%d.z_loss", k);
        snprintf(key, sizeof(key), "%s%s", free_run, name);
        compare_scalar_rule(tally, d, name, key, z_loss);
        snprintf(name, sizeof(name), "step%d.lr", k);
        compare_scalar(tally, d, name, lrs[OPT_ADAMW], LR_REL);
        snprintf(name, sizeof(name), "step%d.muon_lr", k);
        compare_scalar(tally, d, name, lrs[OPT_MUON], LR_REL);
        snprintf(name, sizeof(name), "step%d.grad_norm", k);
        snprintf(key, sizeof(key), "%s%s", free_run, name);
        if (*free_run) {
            // an FP8 run's drifting gradient norm: printed, not held (header)
            char bf16_key[184];
            snprintf(bf16_key, sizeof(bf16_key), "bf16.%s", key);
            const double ref = dump_scalar(d, name);
            if (tally->print)
                printf("  %-30s rel %.3e (not held: the FP8 runs drift; PyTorch's bf16 run "
                       "lands %.3e away; part (b) holds this step's norm)\n",
                       name, fabs(norm - ref) / fabs(ref), dump_scalar(d, bf16_key));
        } else {
            compare_grad_norm(tally, d, name, norm, s->K);
        }
        h = hash_bytes(h, &loss, sizeof(loss));
        h = hash_bytes(h, &z_loss, sizeof(z_loss));
        h = hash_bytes(h, &norm, sizeof(norm));
        if (k > 0) continue;

        // The parameters after step 0: theta_0 (fp32) or theta_0 - init (bf16), with the
        // allowance for elements AdamW or Lion may move the other way.
        double* allowance = (double*)MALLOC_CHECK(P * sizeof(double));
        sign_allowance(allowance, values, d, &model, lrs[OPT_ADAMW], grad_scale);
        download_params(values, &model);
        for (int i = 0; i < layout->count; i++) {
            const ParamTensor* t = &layout->tensors[i];
            snprintf(name, sizeof(name), "step0.param.%s", t->name);
            const float* ref = (const float*)dump_array(d, name, DUMP_F32, t->numel);
            double* ours_k = (double*)MALLOC_CHECK(t->numel * sizeof(double));
            double* ref_k = (double*)MALLOC_CHECK(t->numel * sizeof(double));
            for (size_t j = 0; j < t->numel; j++) {
                double init = FLOATX_IS_FP32 ? 0.0 : s->init[t->offset + j];
                ours_k[j] = (double)values[t->offset + j] - init;
                ref_k[j] = (double)ref[j] - init;
            }
            double rel_bound = rel_bound_for(d, name);
            if (t->optimizer == OPT_MUON && FLOATX_IS_FP32) {
                // theta_0 = init + update: the update's measured float32 drift, relative to
                // theta_0 (header)
                double up2 = 0.0, th2 = 0.0;
                for (size_t j = 0; j < t->numel; j++) {
                    const double up = ref_k[j] - s->init[t->offset + j];
                    up2 += up * up;
                    th2 += ref_k[j] * ref_k[j];
                }
                char drift[160];
                snprintf(drift, sizeof(drift), "fp32.step0.update.%s", t->name);
                rel_bound += MUON_DRIFT_FACTOR * dump_scalar(d, drift) * sqrt(up2 / th2);
            }
            double abs_bound = FLOATX_IS_FP32 ? abs_bound_for(ref_k, t->numel, rel_bound) : -1.0;
            char key[170];
            snprintf(key, sizeof(key), "bf16.%s", name);
            if (fp8_not_held(tally, d, name, name, rel_diff(ours_k, ref_k, t->numel))) {
                // part (b) holds this step
            } else if (t->optimizer == OPT_MUON && !FLOATX_IS_FP32 && !fp8_dump(d) &&
                       BF16_FACTOR * dump_scalar(d, key) > BF16_CEILING) {
                // torch's own bf16 run is further from the fp32 one than the ceiling allows a
                // bound to derive from: printed, held in part (b) (header)
                if (tally->print)
                    printf(
                        "  %-30s rel %.3e (not held: torch's bf16 run differs by %.3e, "
                        "%gx that is past the %.0e ceiling; part (b) holds this step)\n",
                        name, rel_diff(ours_k, ref_k, t->numel), dump_scalar(d, key), BF16_FACTOR,
                        BF16_CEILING);
            } else {
                compare_values(tally, name, ours_k, ref_k, t->numel, rel_bound, abs_bound,
                               allowance + t->offset);
            }
            free(ours_k);
            free(ref_k);
        }
        free(allowance);
    }
    free(values);
    h = hash_device(h, model.params, P * sizeof(floatX));
    h = hash_device(h, model.grads, P * sizeof(floatX));
    if (model.master)
        h = hash_device(h, model.master,
                        (model.dp.elem_state + model.dp.matrix_state) * sizeof(float));
    for (int b = 0; b < NUM_STATE_BUFFERS; b++)
        if (model.opt_state[b])
            h = hash_device(h, model.opt_state[b], state_elems(&model, b) * sizeof(float));
    gpt_free(&model);
    return h;
}

// =============================================================================================
// Part (b): teacher-forced steps.

// One AdamW step of one element in double, the formula of llmc/adamw.cuh and torch.optim.AdamW
// (betas 0.9/0.95, eps 1e-8; t is 1-based; g already scaled by the clip factor). Returns
// theta_t - theta_{t-1} and sets *m, *v to m_t, v_t.
inline double adamw_element(double theta, double g, double* m, double* v, int t, double lr,
                            double wd) {
    const double b1 = 0.9, b2 = 0.95, eps = 1e-8;
    *m = b1 * *m + (1.0 - b1) * g;
    *v = b2 * *v + (1.0 - b2) * g * g;
    const double m_hat = *m / (1.0 - pow(b1, t)), v_hat = *v / (1.0 - pow(b2, t));
    return -lr * wd * theta - lr * m_hat / (sqrt(v_hat) + eps);
}

// Half a unit in the last place of a float.
inline double half_ulp(float x) {
    x = fabsf(x);
    return 0.5 * ((double)nextafterf(x, INFINITY) - (double)x);
}

// What fp32 storage forces on theta_k - theta_{k-1} of one element (header): half a unit in the
// last place of theta_k as each program stores it and, with weight decay, of the decayed
// theta_{k-1} in each.
inline double stored_rounding(float theta, float decay, float ours, float dumped) {
    return half_ulp(ours) + half_ulp(dumped) +
           (decay != 1.0f ? 2.0 * half_ulp(theta * decay) : 0.0);
}

// One step's inputs and results for one tensor in part (b): theta_{k-1} and the dump's gradient
// (layout.total floats each), the state before the step, ours after it (theta_k and state).
struct ForcedStep {
    int k;
    double lr[NUM_OPTIMIZERS], grad_scale;
    const float* theta;
    const float* grads;
    const HostState* before;
    const float* theta_ours;
    const HostState* after;
};

// Fills ours/ref with the tensor's theta_k - theta_{k-1} and e with the stored roundings.
inline void update_errors(const Dump* d, const ParamTensor* t, const ForcedStep* f, float decay,
                          double* ours, double* ref, double* e) {
    char name[160];
    snprintf(name, sizeof(name), "step%d.param.%s", f->k, t->name);
    const float* dumped = (const float*)dump_array(d, name, DUMP_F32, t->numel);
    for (size_t j = 0; j < t->numel; j++) {
        const size_t o = t->offset + j;
        ours[j] = (double)f->theta_ours[o] - f->theta[o];
        ref[j] = (double)dumped[j] - f->theta[o];
        e[j] = stored_rounding(f->theta[o], decay, f->theta_ours[o], dumped[j]);
    }
}

// An AdamW tensor: theta_k - theta_{k-1}, m_k and v_k, with the forced errors of the header.
inline void check_adamw_step(Tally* tally, const Dump* d, const TestSetup* s, const ParamTensor* t,
                             const ForcedStep* f) {
    const size_t n = t->numel;
    const double lr = f->lr[OPT_ADAMW], wd = t->decay ? s->opt.weight_decay : 0.0;
    const float decay = (float)(1.0 - lr * wd);  // both programs' fp32 decay factor
    // [0] update, [1] m_k, [2] v_k: ours, the dump's and the forced error e (header)
    std::vector<double> ours[3], refs[3], e[3];
    for (int q = 0; q < 3; q++) {
        ours[q].resize(n);
        refs[q].resize(n);
        e[q].resize(n);
    }
    update_errors(d, t, f, decay, ours[0].data(), refs[0].data(), e[0].data());
    char name[160];
    const float* dumped[3];
    for (int q = 1; q < 3; q++) {
        snprintf(name, sizeof(name), "step%d.%s.%s", f->k, STATE_RECORDS[q - 1], t->name);
        dumped[q] = (const float*)dump_array(d, name, DUMP_F32, n);
    }
    const float* m0 = f->before->buf[ADAMW_M].data() + t->offset;
    const float* v0 = f->before->buf[ADAMW_V].data() + t->offset;
    for (size_t j = 0; j < n; j++) {
        // the element through AdamW with the exact and with the buffer's gradient
        const size_t o = t->offset + j;
        double m_exact = m0[j], v_exact = v0[j];
        double m_round = m_exact, v_round = v_exact;
        const double g_round = (double)(float)(floatX)f->grads[o];
        const double u_exact = adamw_element(f->theta[o], f->grads[o] * f->grad_scale, &m_exact,
                                             &v_exact, f->k + 1, lr, wd);
        const double u_round = adamw_element(f->theta[o], g_round * f->grad_scale, &m_round,
                                             &v_round, f->k + 1, lr, wd);
        e[0][j] += fabs(u_round - u_exact);
        e[1][j] = fabs(m_round - m_exact);
        e[2][j] = fabs(v_round - v_exact);
        for (int q = 1; q < 3; q++) {
            ours[q][j] = f->after->buf[q - 1][t->offset + j];
            refs[q][j] = dumped[q][j];
        }
    }
    const char* labels[3] = {"update", "adam_m", "adam_v"};
    for (int q = 0; q < 3; q++) {
        snprintf(name, sizeof(name), "step%d.%s.%s", f->k, labels[q], t->name);
        compare_forced(tally, name, ours[q].data(), refs[q].data(), e[q].data(), n);
    }
}

// A Muon tensor: the momentum with the forced error of the gradient's rounding (it moves the
// momentum by (1 - mu) times that), and theta_k - theta_{k-1}: fp32 against the dump with the
// stored roundings and MUON_DRIFT_FACTOR x fp32.step<k>.update.<p>; bf16 against torch's own
// bf16 step from the same inputs, step<k>.update_bf16.<p>, with the bf16 rule on
// d = bf16.step<k>.update_bf16_grad.<p> (header), its distance from the fp32 dump printed.
inline void check_muon_step(Tally* tally, const Dump* d, const TestSetup* s, const ParamTensor* t,
                            const ForcedStep* f) {
    const size_t n = t->numel;
    const double lr = f->lr[OPT_MUON], mu = s->opt.muon_momentum;
    const float decay = (float)(1.0 - lr * (t->decay ? s->opt.weight_decay : 0.0));
    std::vector<double> ours_u(n), ref_u(n), e_u(n), ours_b(n), ref_b(n), e_b(n);
    update_errors(d, t, f, decay, ours_u.data(), ref_u.data(), e_u.data());
    char name[160];
    snprintf(name, sizeof(name), "step%d.muon_momentum.%s", f->k, t->name);
    const float* dumped = (const float*)dump_array(d, name, DUMP_F32, n);
    for (size_t j = 0; j < n; j++) {
        const double g = f->grads[t->offset + j];
        e_b[j] = (1.0 - mu) * fabs((double)(float)(floatX)g - g) * f->grad_scale;
        ours_b[j] = f->after->buf[MUON_MOMENTUM][t->offset + j];
        ref_b[j] = dumped[j];
    }
    compare_forced(tally, name, ours_b.data(), ref_b.data(), e_b.data(), n);
    snprintf(name, sizeof(name), "step%d.update.%s", f->k, t->name);
    if (FLOATX_IS_FP32) {
        char drift[176];
        snprintf(drift, sizeof(drift), "fp32.%s", name);
        compare_forced(tally, name, ours_u.data(), ref_u.data(), e_u.data(), n,
                       MUON_DRIFT_FACTOR * dump_scalar(d, drift));
        return;
    }
    snprintf(name, sizeof(name), "step%d.update_bf16.%s", f->k, t->name);
    const float* torch_bf16 = (const float*)dump_array(d, name, DUMP_F32, n);
    std::vector<double> ref_b16(torch_bf16, torch_bf16 + n);
    char rule[160];
    const double order_noise = s->muon_order_noise;
    if (order_noise > BF16_CEILING) {
        // a second correct bf16 run lands further away than any bound may be (header)
        if (tally->print)
            printf(
                "  %-30s rel %.3e (not held: a reordered bf16 run of torch's lands up to "
                "%.3e away, past the %.0e ceiling)\n",
                name, rel_diff(ours_u.data(), ref_b16.data(), n), order_noise, BF16_CEILING);
        return;
    }
    const double rel_bound =
        std::min(std::max(BF16_FACTOR * order_noise, BF16_FLOOR), BF16_CEILING);
    compare_values(tally, name, ours_u.data(), ref_b16.data(), n, rel_bound,
                   abs_bound_for(ref_b16.data(), n, rel_bound));
    if (tally->print) {
        snprintf(rule, sizeof(rule), "bf16.step%d.update.%s", f->k, t->name);
        printf("    against the fp32 dump: rel %.3e; torch's bf16 step is %.3e from it\n",
               rel_diff(ours_u.data(), ref_u.data(), n), dump_scalar(d, rule));
    }
}

// One Lion step of one element in double, the formula of llmc/lion.cuh (g already scaled by the
// clip factor). Returns theta_t - theta_{t-1}, sets *m to m_t and *c to the interpolation whose
// sign is the update.
inline double lion_element(double theta, double g, double* m, double* c, double lr, double wd,
                           const OptimizerConfig* o) {
    *c = o->lion_beta1 * *m + (1.0 - o->lion_beta1) * g;
    *m = o->lion_beta2 * *m + (1.0 - o->lion_beta2) * g;
    return -lr * wd * theta - lr * (double)((*c > 0.0) - (*c < 0.0));
}

// A Lion tensor: theta_k - theta_{k-1} and m_k, with the forced errors of the header.
inline void check_lion_step(Tally* tally, const Dump* d, const TestSetup* s, const ParamTensor* t,
                            const ForcedStep* f) {
    const size_t n = t->numel;
    const double lr = f->lr[OPT_LION], wd = t->decay ? s->opt.weight_decay : 0.0;
    const float decay = (float)(1.0 - lr * wd);
    std::vector<double> ours_u(n), ref_u(n), e_u(n), ours_m(n), ref_m(n), e_m(n);
    update_errors(d, t, f, decay, ours_u.data(), ref_u.data(), e_u.data());
    char name[160];
    snprintf(name, sizeof(name), "step%d.lion_m.%s", f->k, t->name);
    const float* dumped = (const float*)dump_array(d, name, DUMP_F32, n);
    const float* m0 = f->before->buf[LION_M].data() + t->offset;
    const double b1 = s->opt.lion_beta1;
    for (size_t j = 0; j < n; j++) {
        const size_t o = t->offset + j;
        const double g = f->grads[o] * f->grad_scale;
        const double g_round = (double)(float)(floatX)f->grads[o] * f->grad_scale;
        double m_exact = m0[j], m_round = m0[j], c_exact, c_round;
        const double u_exact = lion_element(f->theta[o], g, &m_exact, &c_exact, lr, wd, &s->opt);
        const double u_round =
            lion_element(f->theta[o], g_round, &m_round, &c_round, lr, wd, &s->opt);
        // either gradient's c within float32 rounding of zero: its sign is the arithmetic's
        const double terms = b1 * fabs(m0[j]) + (1.0 - b1) * fmax(fabs(g), fabs(g_round));
        const bool near_zero = fmin(fabs(c_exact), fabs(c_round)) < 1e-6 * terms;
        e_u[j] += fabs(u_round - u_exact) + (near_zero ? 2.0 * lr : 0.0);
        e_m[j] = fabs(m_round - m_exact);
        ours_m[j] = f->after->buf[LION_M][o];
        ref_m[j] = dumped[j];
    }
    compare_forced(tally, name, ours_m.data(), ref_m.data(), e_m.data(), n);
    snprintf(name, sizeof(name), "step%d.update.%s", f->k, t->name);
    compare_forced(tally, name, ours_u.data(), ref_u.data(), e_u.data(), n);
}

// Delayed scaling: the dump's state at the start of step k (fp8.step<k>.*, slot-major (slot,
// X/W/G, H)) into the model, whose Fp8DelayedScaling holds tensor kind * layers + slot; the ring
// position k mod H. Other recipes: nothing.
inline void upload_fp8_delayed(const Dump* d, GPT* m, int k) {
    if (m->config.fp8.recipe != FP8_DELAYED) return;
    const int layers = m->fp8.count, H = m->config.fp8.amax_history;
    char name[64];
    snprintf(name, sizeof(name), "fp8.step%d.amax_history", k);
    const float* hist = (const float*)dump_array(d, name, DUMP_F32, (size_t)layers * 3 * H);
    snprintf(name, sizeof(name), "fp8.step%d.scale", k);
    const float* scale = (const float*)dump_array(d, name, DUMP_F32, (size_t)layers * 3);
    std::vector<float> history((size_t)layers * 3 * H);
    std::vector<Fp8TensorScale> scales((size_t)layers * 3);
    for (int slot = 0; slot < layers; slot++)
        for (int kind = 0; kind < 3; kind++) {
            const int i = fp8_delayed_index(&m->fp8, slot, (Fp8TensorKind)kind);
            memcpy(&history[(size_t)i * H], hist + ((size_t)slot * 3 + kind) * H,
                   H * sizeof(float));
            const float sc = scale[slot * 3 + kind];
            scales[i] = Fp8TensorScale{0.0f, sc, 1.0f / sc};
        }
    gpt_fp8_delayed_upload(m, history.data(), scales.data(), k % H);
}

// Delayed scaling after part (b)'s step k-1: our history and scales (from the dump's state of
// step k-1 and our amaxes of that step) against the dump's state of step k: the largest
// relative error of an entry, with the bf16 rule on d = bf16.fp8.step<k>.*, the same measure of
// PyTorch's bf16 run against its fp32 run (header).
inline void check_fp8_delayed(Tally* tally, const Dump* d, const GPT* m, int k) {
    const int layers = m->fp8.count, H = m->config.fp8.amax_history;
    std::vector<float> history((size_t)layers * 3 * H), hist((size_t)layers * 3 * H);
    std::vector<Fp8TensorScale> scales((size_t)layers * 3);
    std::vector<float> scale((size_t)layers * 3);
    gpt_fp8_delayed_download(m, history.data(), scales.data());
    for (int slot = 0; slot < layers; slot++)
        for (int kind = 0; kind < 3; kind++) {
            const int i = fp8_delayed_index(&m->fp8, slot, (Fp8TensorKind)kind);
            memcpy(&hist[((size_t)slot * 3 + kind) * H], &history[(size_t)i * H],
                   H * sizeof(float));
            scale[slot * 3 + kind] = scales[i].scale;
        }
    const char* kinds[2] = {"amax_history", "scale"};
    const std::vector<float>* ours[2] = {&hist, &scale};
    for (int q = 0; q < 2; q++) {
        char name[64];
        snprintf(name, sizeof(name), "fp8.step%d.%s", k, kinds[q]);
        const size_t n = ours[q]->size();
        const float* ref = (const float*)dump_array(d, name, DUMP_F32, n);
        double worst = 0.0;  // max |ours - ref| / |ref|, 0 where equal (NaN fails)
        for (size_t i = 0; i < n; i++) {
            const double o = (*ours[q])[i];
            const double e = o == ref[i] ? 0.0 : fabs(o - ref[i]) / fabs(ref[i]);
            worst = std::isnan(e) ? NAN : fmax(worst, e);
        }
        const double bound = rel_bound_for(d, name);
        const bool ok = worst <= bound;
        tally->checks++;
        if (!ok) tally->failures++;
        printf("  %-30s max relative error %.3e (bound %.2e)  %s\n", name, worst, bound,
               ok ? "ok" : "FAIL");
    }
}

inline void run_teacher_forced(const Dump* d, const TestSetup* s, Tally* tally) {
    const GPTConfig* c = &s->config;
    const int A = s->A, K = s->K;
    const size_t N = (size_t)s->B * s->T;
    GPT model;
    gpt_build(&model, c, &s->opt, s->B, s->T, s->seed);
    model.poison_activations = true;
    const ParamLayout* layout = &model.layout;
    const size_t P = layout->total;
    std::vector<float> theta(P);    // theta_{k-1}
    std::vector<float> grads(P);    // the dump's step<k>.grad
    std::vector<float> scratch(P);  // ours: gradients, then theta_k
    HostState before, after;        // the dump's state after step k-1, ours after step k
    char name[160], prefix[64];
    for (int k = 0; k < K; k++) {
        if (k == 0) {
            memcpy(theta.data(), s->init, P * sizeof(float));
        } else {
            snprintf(prefix, sizeof(prefix), "step%d.param.", k - 1);
            dump_param_set(d, layout, prefix, theta.data());
        }
        dump_state_set(d, layout, k - 1, &before);
        set_optimizer_state(&model, theta.data(), &before, k);
        upload_fp8_delayed(d, &model, k);

        // Gradients at theta_{k-1}.
        if (tally->print) printf("step %d gradients from the dump's theta_%d:\n", k, k - 1);
        const size_t step_offset = (size_t)k * A * N;
        double z_loss;
        double loss = gpt_forward_backward(&model, s->inputs + step_offset,
                                           s->targets + step_offset, A, &z_loss);
        snprintf(name, sizeof(name), "step%d.loss", k);
        compare_scalar_rule(tally, d, name, name, loss);
        snprintf(name, sizeof(name), "step%d.z_loss", k);
        compare_scalar_rule(tally, d, name, name, z_loss);
        snprintf(name, sizeof(name), "step%d.grad_norm", k);
        compare_grad_norm(tally, d, name, gpt_grad_norm(&model), K);
        compare_grads(tally, d, &model, k, scratch.data());

        // The optimizers on the dump's gradient, learning rates and clip scale.
        snprintf(prefix, sizeof(prefix), "step%d.grad.", k);
        dump_param_set(d, layout, prefix, grads.data());
        upload_floatX(model.grads, grads.data(), P);
        ForcedStep f;
        f.k = k;
        snprintf(name, sizeof(name), "step%d.lr", k);
        f.lr[OPT_ADAMW] = dump_scalar(d, name);
        snprintf(name, sizeof(name), "step%d.muon_lr", k);
        f.lr[OPT_MUON] = dump_scalar(d, name);
        f.lr[OPT_LION] = f.lr[OPT_ADAMW];  // the dump's lr is AdamW's and Lion's
        snprintf(name, sizeof(name), "step%d.grad_norm", k);
        f.grad_scale = clip_scale(dump_scalar(d, name), s->grad_clip);
        gpt_update(&model, f.lr, f.grad_scale);
        if (c->fp8.recipe == FP8_DELAYED && k + 1 < K) check_fp8_delayed(tally, d, &model, k + 1);
        download_params(scratch.data(), &model);
        download_state(&model, &after);
        f.theta = theta.data();
        f.grads = grads.data();
        f.before = &before;
        f.theta_ours = scratch.data();
        f.after = &after;

        if (tally->print)
            printf("step %d update from the dump's theta_%d, optimizer state and gradient:\n", k,
                   k - 1);
        for (int i = 0; i < layout->count; i++) {
            const ParamTensor* t = &layout->tensors[i];
            if (t->optimizer == OPT_ADAMW) check_adamw_step(tally, d, s, t, &f);
            else if (t->optimizer == OPT_MUON) check_muon_step(tally, d, s, t, &f);
            else check_lion_step(tally, d, s, t, &f);
        }
    }
    gpt_free(&model);
}

// =============================================================================================
// Part (c): each FP8 layer alone, on the operands the dump recorded (fp8.layer<slot>.*).

// The Euclidean norms of the rows (by_rows) or the columns of a (rows, cols) matrix.
inline std::vector<double> line_norms(const float* a, int rows, int cols, bool by_rows) {
    std::vector<double> out(by_rows ? rows : cols, 0.0);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            const double v = a[(size_t)r * cols + c];
            out[by_rows ? r : c] += v * v;
        }
    for (double& v : out) v = sqrt(v);
    return out;
}

// One product of part (c), (R, C) with reduction length K, ours against the dump's element by
// element: |ours - ref| <= one bfloat16 spacing of ref + 4 K 2^-24 |a_r| |b_c| (header), with
// a_norm[r], b_norm[c] the norms of the operands' vectors that element r, c reduces.
inline void compare_fp8_product(Tally* tally, const char* name, const float* ours,
                                const float* ref, int R, int C, int K,
                                const std::vector<double>& a_norm,
                                const std::vector<double>& b_norm) {
    double worst = 0.0, diff2 = 0.0, ref2 = 0.0;
    size_t at = 0;
    bool finite = true;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            const size_t i = (size_t)r * C + c;
            int e;
            frexp(ref[i], &e);
            const double bound = ldexp(1.0, e - 8) + 4.0 * K * ldexp(a_norm[r] * b_norm[c], -24);
            const double err = fabs((double)ours[i] - ref[i]);
            if (!std::isfinite(ours[i])) finite = false;
            if (err / bound > worst) {
                worst = err / bound;
                at = i;
            }
            diff2 += err * err;
            ref2 += (double)ref[i] * ref[i];
        }
    const bool ok = finite && worst <= 1.0;
    tally->checks++;
    if (!ok) tally->failures++;
    printf("  %-14s rel %.3e  worst element at %.3f of its bound  %s\n", name,
           ref2 > 0.0 ? sqrt(diff2 / ref2) : sqrt(diff2), worst, ok ? "ok" : "FAIL");
    if (!ok) printf("    at element %zu: ours %.9g reference %.9g\n", at, ours[at], ref[at]);
}

inline void check_fp8_layers(const Dump* d, const TestSetup* s, Tally* tally) {
    GPT model;
    gpt_build(&model, &s->config, &s->opt, s->B, s->T, s->seed);
    upload_fp8_delayed(d, &model, s->K - 1);
    const int N = s->B * s->T;
    for (int slot = 0; slot < model.fp8.count; slot++) {
        const int IC = model.fp8.layers[slot].in, OC = model.fp8.layers[slot].out;
        // the lm head has none, nor has Llama's block
        const bool bias = slot < 4 * s->config.layers && s->config.llama.arch == ARCH_GPT2;
        // operands x, w, b, g and products y, dx, dw: the dump's (bf16 values) and ours
        const char* names[7] = {"x", "w", "b", "g", "y", "dx", "dw"};
        const size_t sizes[7] = {(size_t)N * IC, (size_t)OC * IC, (size_t)OC, (size_t)N * OC,
                                 (size_t)N * OC, (size_t)N * IC, (size_t)OC * IC};
        const float* ref[7] = {};
        floatX* dev[7] = {};
        for (int i = 0; i < 7; i++) {
            if (i == 2 && !bias) continue;
            char name[64];
            snprintf(name, sizeof(name), "fp8.layer%d.%s", slot, names[i]);
            ref[i] = (const float*)dump_array(d, name, DUMP_F32, sizes[i]);
            CUDA_CHECK(cudaMalloc(&dev[i], sizes[i] * sizeof(floatX)));
            if (i < 4) upload_floatX(dev[i], ref[i], sizes[i]);  // bf16 values: exact
        }
        CUDA_CHECK(cudaMemset(dev[6], 0, sizes[6] * sizeof(floatX)));
        model.fp8.params_version++;  // a weight the cache has not seen
        fp8_linear_forward(&model.fp8, slot, &model.mm, dev[4], dev[0], dev[1], dev[2], N);
        fp8_linear_backward(&model.fp8, slot, &model.mm, dev[5], dev[6], dev[3], dev[0], dev[1],
                            N);
        CUDA_CHECK(cudaDeviceSynchronize());
        // y = x w^T, dx = g w, dw = g^T x: shape, reduction length and the reduced vectors
        const int shape[3][3] = {{N, OC, IC}, {N, IC, OC}, {OC, IC, N}};
        const std::vector<double> norms[3][2] = {
            {line_norms(ref[0], N, IC, true), line_norms(ref[1], OC, IC, true)},
            {line_norms(ref[3], N, OC, true), line_norms(ref[1], OC, IC, false)},
            {line_norms(ref[3], N, OC, false), line_norms(ref[0], N, IC, false)}};
        for (int i = 4; i < 7; i++) {
            std::vector<float> ours(sizes[i]);
            download_floatX(ours.data(), dev[i], sizes[i]);
            char name[64];
            snprintf(name, sizeof(name), "layer %d %s", slot, names[i]);
            const int* sh = shape[i - 4];
            compare_fp8_product(tally, name, ours.data(), ref[i], sh[0], sh[1], sh[2],
                                norms[i - 4][0], norms[i - 4][1]);
        }
        for (int i = 0; i < 7; i++) CUDA_CHECK(cudaFree(dev[i]));
    }
    gpt_free(&model);
}

int main(int argc, char** argv) {
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr,
                "usage: %s DUMP\n  checks the %s build of train_gpt.cu against a dump of "
                "scripts/reference.py\n",
                argv[0], PRECISION_NAME);
        return EXIT_FAILURE;
    }
    Dump d;
    dump_load(&d, argv[1]);
    TestSetup s = {};  // (zeros: a GPT-2 dump leaves config.llama as it is)
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
    s.grad_clip = dump_scalar(&d, "config.grad_clip");
    s.config.qk_norm = (int)dump_scalar(&d, "config.qk_norm");
    s.config.fp8.recipe = (int)dump_scalar(&d, "config.fp8");
    s.config.fp8.grad_e5m2 = (int)dump_scalar(&d, "config.fp8_grad_e5m2");
    s.config.fp8.lm_head = (int)dump_scalar(&d, "config.fp8_lm_head");
    s.config.fp8.amax_history = (int)dump_scalar(&d, "config.fp8_amax_history");
    s.config.fp8.margin = (int)dump_scalar(&d, "config.fp8_margin");
    s.config.z_loss = dump_scalar(&d, "config.z_loss");
    if ((int)dump_scalar(&d, "config.arch") == ARCH_LLAMA) {
        LlamaConfig* l = &s.config.llama;
        l->arch = ARCH_LLAMA;
        l->kv_heads = (int)dump_scalar(&d, "config.kv_heads");
        l->mlp_hidden = (int)dump_scalar(&d, "config.mlp_hidden");
        l->untied_head = !(int)dump_scalar(&d, "config.tie_embeddings");
        l->norm_eps = dump_scalar(&d, "config.norm_eps");
        l->rope_theta = dump_scalar(&d, "config.rope_theta");
        l->rope_scaling = (int)dump_scalar(&d, "config.rope_scaling");
        l->rope_factor = dump_scalar(&d, "config.rope_factor");
        l->rope_low_freq_factor = dump_scalar(&d, "config.rope_low_freq_factor");
        l->rope_high_freq_factor = dump_scalar(&d, "config.rope_high_freq_factor");
        l->rope_original_context = (int)dump_scalar(&d, "config.rope_original_context");
    }
    s.muon_lr = dump_scalar(&d, "config.muon_lr");
    s.opt.kind = (int)dump_scalar(&d, "config.optimizer");
    s.opt.weight_decay = dump_scalar(&d, "config.weight_decay");
    s.opt.beta1 = 0.9;
    s.opt.beta2 = 0.95;
    s.opt.eps = 1e-8;
    s.opt.muon_momentum = dump_scalar(&d, "config.muon_momentum");
    s.opt.muon_nesterov = (int)dump_scalar(&d, "config.muon_nesterov");
    s.opt.muon_ns_steps = (int)dump_scalar(&d, "config.muon_ns_steps");
    s.opt.muon_adjust = (int)dump_scalar(&d, "config.muon_adjust");
    s.opt.lion_beta1 = dump_scalar(&d, "config.lion_beta1");
    s.opt.lion_beta2 = dump_scalar(&d, "config.lion_beta2");
    s.muon_order_noise = 0.0;
    for (int i = 0; i < d.count; i++)
        if (strncmp(d.records[i].name, "bf16.", 5) == 0 &&
            strstr(d.records[i].name, ".update_order."))
            s.muon_order_noise = std::max(s.muon_order_noise, dump_scalar(&d, d.records[i].name));
    char msg[256];
    if (const char* err = gpt_config_error(&s.config, s.B, s.T, msg, sizeof(msg))) {
        fprintf(stderr, "dump config: %s\n", err);
        return EXIT_FAILURE;
    }
    if (s.config.fp8.recipe < FP8_OFF || s.config.fp8.recipe >= NUM_FP8_RECIPES) {
        fprintf(stderr, "dump config: fp8 recipe %d\n", s.config.fp8.recipe);
        return EXIT_FAILURE;
    }
    const ModelShapes whole = model_shapes(&s.config, 1, 0);
    if (const char* err = gpt_fp8_error(&s.config, &whole, s.B * s.T, msg, sizeof(msg))) {
        fprintf(stderr, "dump config: %s\n", err);  // the fp32 build has no FP8 (header)
        return EXIT_FAILURE;
    }
    if (s.config.padded_vocab != padded_vocab_of(s.config.vocab) || s.A < 1 || s.K < 1 ||
        s.sched.schedule < 0 || s.sched.schedule >= NUM_SCHEDULES || s.opt.kind < 0 ||
        s.opt.kind >= NUM_OPTIMIZERS || s.opt.muon_adjust < 0 || s.opt.muon_adjust > 1 ||
        s.opt.muon_ns_steps < 0 || s.opt.muon_ns_steps > 99) {
        fprintf(stderr,
                "dump config: padded vocab %d (expected %d), grad accum %d, steps %d, schedule "
                "%d, optimizer %d, muon adjust %d, muon ns steps %d\n",
                s.config.padded_vocab, padded_vocab_of(s.config.vocab), s.A, s.K, s.sched.schedule,
                s.opt.kind, s.opt.muon_adjust, s.opt.muon_ns_steps);
        return EXIT_FAILURE;
    }
    printf(
        "test_gpt (%s): %s\n  V %d Vp %d T %d maxT %d L %d NH %d C %d | B %d A %d K %d | %s lr %g "
        "warmup %d\n",
        PRECISION_NAME, argv[1], s.config.vocab, s.config.padded_vocab, s.T, s.config.context,
        s.config.layers, s.config.heads, s.config.channels, s.B, s.A, s.K,
        SCHEDULE_NAMES[s.sched.schedule], s.sched.lr, s.sched.warmup);
    printf("  %s", OPTIMIZERS[s.opt.kind].name);
    if (s.opt.kind == OPT_MUON)
        printf(" (lr %g, momentum %g, nesterov %d, %d Newton-Schulz steps, %s)", s.muon_lr,
               s.opt.muon_momentum, s.opt.muon_nesterov, s.opt.muon_ns_steps,
               MUON_ADJUST_NAMES[s.opt.muon_adjust]);
    if (s.opt.kind == OPT_LION)
        printf(" (lr %g, betas %g/%g)", s.sched.lr, s.opt.lion_beta1, s.opt.lion_beta2);
    printf(" | qk-norm %s | z-loss %g", s.config.qk_norm ? "on" : "off", s.config.z_loss);
    if (s.config.llama.arch == ARCH_LLAMA)
        printf(" | llama: kv heads %d, mlp %d, lm head %s, rope theta %g%s",
               s.config.llama.kv_heads, s.config.llama.mlp_hidden,
               s.config.llama.untied_head ? "untied" : "tied", s.config.llama.rope_theta,
               s.config.llama.rope_scaling == ROPE_SCALING_LLAMA3 ? " (llama3 scaling)" : "");
    if (s.config.fp8.recipe != FP8_OFF)
        printf(" | fp8 %s, gradients %s%s", FP8_RECIPE_NAMES[s.config.fp8.recipe],
               s.config.fp8.grad_e5m2 ? "e5m2" : "e4m3", s.config.fp8.lm_head ? ", lm head" : "");
    if (s.config.fp8.recipe == FP8_DELAYED)
        printf(" (history %d, margin %d)", s.config.fp8.amax_history, s.config.fp8.margin);
    printf("\n");
    const size_t tokens = (size_t)s.K * s.A * s.B * s.T;
    s.inputs = (const int*)dump_array(&d, "inputs", DUMP_I32, tokens);
    s.targets = (const int*)dump_array(&d, "targets", DUMP_I32, tokens);
    build_param_layout(&s.layout, &s.config, &s.opt, &whole);
    s.init = (float*)MALLOC_CHECK(s.layout.total * sizeof(float));
    dump_param_set(&d, &s.layout, "init.", s.init);

    printf("part (a): free-running run from the initial parameters\n");
    Tally first = {0, 0, true};
    uint64_t h1 = run_free(&d, &s, &first);
    Tally second = {0, 0, false};
    uint64_t h2 = run_free(&d, &s, &second);
    bool identical = h1 == h2 && first.failures == second.failures;
    printf("second run bit-identical to the first: %s (state hash %016llx)\n",
           identical ? "yes" : "NO", (unsigned long long)h1);
    const int free_failures = first.failures + (identical ? 0 : 1);
    printf("part (b): teacher-forced steps, each from the dump's state\n");
    Tally forced = {0, 0, true};
    run_teacher_forced(&d, &s, &forced);

    Tally layers = {0, 0, true};
    if (s.config.fp8.recipe != FP8_OFF) {
        printf("part (c): the FP8 layers alone on the dump's operands\n");
        check_fp8_layers(&d, &s, &layers);
    }

    printf("part (a) free-running:   %d checks, %d failed (runs %s)\n", first.checks + 1,
           free_failures, identical ? "identical" : "DIFFER");
    printf("part (b) teacher-forced: %d checks, %d failed\n", forced.checks, forced.failures);
    if (s.config.fp8.recipe != FP8_OFF)
        printf("part (c) FP8 layers:     %d checks, %d failed\n", layers.checks, layers.failures);
    const int failures = free_failures + forced.failures + layers.failures;
    printf("test_gpt %s: %d checks, %d failed -> %s\n", PRECISION_NAME,
           first.checks + 1 + forced.checks + layers.checks, failures,
           failures == 0 ? "PASS" : "FAIL");
    free(s.init);
    free(s.layout.tensors);
    dump_free(&d);
    return failures == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
