// llmc/stability.h: riding through bad steps. A step whose loss or gradient norm is not finite
// is never applied: the update is skipped on every rank (the loss and the norm are the global
// batch's, the same bits on every rank, so every rank decides the same), and a run ends only
// after --max-skips such steps in a row.
//
// Spikes: each applied step's loss and gradient norm join a trailing window of the last
// --spike-window applied steps; once the window is full, a step whose loss or norm lies more
// than --spike-zscore standard deviations above the window's mean is a spike, and its update is
// skipped like a non-finite step's (it does not join the window).
//
// Rewinds (--spike-rewind K): when K spikes fall within the last --spike-window steps, the run
// goes back to the newest checkpoint from before the first of them and skips data batches
// (--spike-skip-batches; default all those consumed since that checkpoint), as PaLM recovered
// from its spikes. The steps after the checkpoint are trained again; each pass over them is a
// timeline, counted by `rewinds`, which every log line after the first rewind carries, so the
// log keeps the abandoned steps and a resumed run knows which lines are its own
// (llmc/logger.h). The window, the recent spikes, the rewinds and the furthest step trained are
// the same on every rank and go into checkpoints (section "spikes"), so a resumed run decides
// as the uninterrupted one. A rewind keeps the run's history: the rewind count, the furthest
// step and the skip count are not taken back.
//
// --inject-fault makes the faults that test all this, for tests and demonstrations only: a
// comma-separated list of STEP:KIND[:RANK]
//   nan-grad       micro-batch 0's loss gradient times NaN: every gradient NaN after the
//                  data-parallel reduction
//   loss-scale=X   micro-batch 0's loss gradient times X (a gradient spike)
//   bad-batch      micro-batch 0's tokens replaced by one repeated token
//   skip           the update skipped on purpose (every rank): what a skipped step must equal
//   kill           the process kills itself (SIGKILL) as the step begins: a crash to resume from
// RANK is the job's rank (default 0; skip takes none); under tensor parallelism the data faults
// (nan-grad, loss-scale, bad-batch) happen on every rank of RANK's tensor-parallel group, which
// share the batch and hold the parts of its loss gradient (the data-parallel replica), and kill
// on RANK alone. STEP is 1-based, as the step lines
// count, and a fault happens the first time the run reaches its step: steps trained again
// after a rewind (whose data is other batches) do not repeat it.
//
// Entry points: FaultKind, Fault, FaultPlan, fault_parse, fault_here; Stability,
// stability_init, spike_check, spike_add, spike_note, stability_save / stability_load. Host code
// only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

enum FaultKind {
    FAULT_NONE,
    FAULT_NAN_GRAD,
    FAULT_LOSS_SCALE,
    FAULT_BAD_BATCH,
    FAULT_SKIP,
    FAULT_KILL
};

struct Fault {
    int kind;      // FaultKind
    int step;      // 1-based
    double scale;  // FAULT_LOSS_SCALE's X
    int rank;      // the job's rank it happens on (FAULT_SKIP: every rank)
};

constexpr int MAX_FAULTS = 16;
struct FaultPlan {
    Fault faults[MAX_FAULTS];
    int count;
};

// Reads one "STEP:KIND[:RANK]" into *f; false when it is not one.
inline bool fault_parse_one(const char* text, Fault* f) {
    char kind[64] = "";
    int step = 0, rank = 0, used = 0;
    const int fields = sscanf(text, "%d:%63[^:]%n:%d%n", &step, kind, &used, &rank, &used);
    if (fields < 2 || (size_t)used != strlen(text) || step < 1 || rank < 0) return false;
    *f = Fault{FAULT_NONE, step, 1.0, rank};
    double scale = 1.0;
    if (strcmp(kind, "nan-grad") == 0) f->kind = FAULT_NAN_GRAD;
    else if (strcmp(kind, "bad-batch") == 0) f->kind = FAULT_BAD_BATCH;
    else if (strcmp(kind, "kill") == 0) f->kind = FAULT_KILL;
    else if (strcmp(kind, "skip") == 0 && fields == 2) f->kind = FAULT_SKIP;
    else if (sscanf(kind, "loss-scale=%lf%n", &scale, &used) == 1 && (size_t)used == strlen(kind) &&
             std::isfinite(scale)) {
        f->kind = FAULT_LOSS_SCALE;
        f->scale = scale;
    }
    return f->kind != FAULT_NONE;
}

// Reads a comma-separated list of faults (empty: none) into *p; nullptr, or what is wrong.
inline const char* fault_parse(const char* text, FaultPlan* p, char* msg, size_t len) {
    p->count = 0;
    for (const char* at = text; *at;) {
        const char* comma = strchr(at, ',');
        const size_t n = comma ? (size_t)(comma - at) : strlen(at);
        char one[128];
        Fault f;
        if (p->count == MAX_FAULTS) {
            snprintf(msg, len, "--inject-fault '%s': more than %d faults", text, MAX_FAULTS);
            return msg;
        }
        if (n >= sizeof(one) || !(memcpy(one, at, n), one[n] = '\0', fault_parse_one(one, &f))) {
            snprintf(msg, len,
                     "--inject-fault '%s': expected a comma-separated list of STEP:KIND[:RANK] "
                     "with STEP >= 1 and KIND nan-grad, loss-scale=X (finite X), bad-batch, "
                     "kill or skip (skip takes no RANK: every rank skips)",
                     text);
            return msg;
        }
        for (int i = 0; i < p->count; i++)
            if (p->faults[i].step == f.step) {
                snprintf(msg, len, "--inject-fault '%s': two faults at step %d", text, f.step);
                return msg;
            }
        p->faults[p->count++] = f;
        at += n + (comma != nullptr);
    }
    return nullptr;
}

// The fault of step `step` (1-based) on rank `rank`, whose tensor-parallel group is the `tp`
// consecutive ranks from rank / tp * tp, or nullptr: only the first time the run reaches the
// step (`furthest`: the furthest step it has trained before this one).
inline const Fault* fault_here(const FaultPlan* p, int step, int rank, int tp, int furthest) {
    if (step <= furthest) return nullptr;
    for (int i = 0; i < p->count; i++) {
        const Fault* f = &p->faults[i];
        const bool mine = f->kind == FAULT_KILL ? f->rank == rank : f->rank / tp == rank / tp;
        if (f->step == step && (f->kind == FAULT_SKIP || mine)) return f;
    }
    return nullptr;
}

// ---------------------------------------------------------------------------------------------
// The run's stability state: the spike window and the history of skips, spikes and rewinds

struct Stability {
    int window;     // steps the spike window holds when full
    double zscore;  // a spike's distance from the mean, in standard deviations (0: detection off)
    std::vector<double> losses, norms;  // rings of `window`
    int count, next;                    // held so far (up to window), the slot the next goes to
    std::vector<int32_t> spikes;        // the steps of the spikes within the last `window` steps
    int32_t rewinds;                    // rewinds so far: the timeline the run is in
    int32_t furthest;      // the furthest step trained (steps before it trained again after a
                           // rewind do not repeat its faults)
    int32_t skips;         // steps whose update was not taken, in all
    int32_t skips_in_row;  // non-finite steps in a row, up to the last one
};

inline void stability_init(Stability* w, int window, double zscore) {
    w->window = window;
    w->zscore = zscore;
    w->losses.assign(window, 0.0);
    w->norms.assign(window, 0.0);
    w->count = w->next = 0;
    w->spikes.clear();
    w->rewinds = w->furthest = w->skips = w->skips_in_row = 0;
}

// How far x lies above the mean of v, in standard deviations (0 when they do not vary).
inline double spike_z(const std::vector<double>& v, double x, double* mean) {
    double sum = 0.0, squares = 0.0;
    for (double e : v) sum += e;
    *mean = sum / v.size();
    for (double e : v) squares += (e - *mean) * (e - *mean);
    const double sd = sqrt(squares / v.size());
    return sd > 0.0 ? (x - *mean) / sd : 0.0;
}

// Whether a step of this loss and gradient norm is a spike; if so, why, in `why`.
inline bool spike_check(const Stability* w, double loss, double norm, char* why, size_t len) {
    if (w->zscore <= 0.0 || w->count < w->window) return false;
    double loss_mean, norm_mean;
    const double zl = spike_z(w->losses, loss, &loss_mean),
                 zn = spike_z(w->norms, norm, &norm_mean);
    if (zl <= w->zscore && zn <= w->zscore) return false;
    const bool by_loss = zl >= zn;
    snprintf(why, len,
             "a spike: the %s %.6g is %.1f standard deviations above the last %d steps' "
             "mean %.6g (--spike-zscore %g)",
             by_loss ? "loss" : "gradient norm", by_loss ? loss : norm, by_loss ? zl : zn,
             w->window, by_loss ? loss_mean : norm_mean, w->zscore);
    return true;
}

inline void spike_add(Stability* w, double loss, double norm) {
    w->losses[w->next] = loss;
    w->norms[w->next] = norm;
    w->next = (w->next + 1) % w->window;
    if (w->count < w->window) w->count++;
}

// Notes a spike at `step`, forgetting those no longer within the last `window` steps. Returns
// whether `rewind_after` (> 0) spikes now lie within the window: time to rewind.
inline bool spike_note(Stability* w, int step, int rewind_after) {
    size_t kept = 0;
    for (int32_t s : w->spikes)
        if (s > step - w->window) w->spikes[kept++] = s;
    w->spikes.resize(kept);
    w->spikes.push_back(step);
    return rewind_after > 0 && (int)w->spikes.size() >= rewind_after;
}

// A checkpoint's section "spikes": int32 window, count, next, 1 (the layout's version), the
// losses and the norms (window doubles each), then int32 rewinds, furthest, skips,
// skips_in_row, the number of recent spikes and their steps. Version 0 (no int32s after the
// rings) is read as a run without any of that history.
inline std::vector<uint8_t> stability_save(const Stability* w) {
    const int32_t header[4] = {w->window, w->count, w->next, 1};
    const int32_t history[5] = {w->rewinds, w->furthest, w->skips, w->skips_in_row,
                                (int32_t)w->spikes.size()};
    const size_t ring = sizeof(double) * w->window;
    std::vector<uint8_t> out(sizeof(header) + 2 * ring + sizeof(history) +
                             sizeof(int32_t) * w->spikes.size());
    uint8_t* at = out.data();
    auto put = [&at](const void* data, size_t n) {
        memcpy(at, data, n);
        at += n;
    };
    put(header, sizeof(header));
    put(w->losses.data(), ring);
    put(w->norms.data(), ring);
    put(history, sizeof(history));
    put(w->spikes.data(), sizeof(int32_t) * w->spikes.size());
    return out;
}

// Restores w (of its own window length) from a section; false when it does not fit.
inline bool stability_load(Stability* w, const std::vector<uint8_t>& bytes) {
    int32_t header[4], history[5] = {0, 0, 0, 0, 0};
    const size_t ring = sizeof(double) * w->window, rings_end = sizeof(header) + 2 * ring;
    if (bytes.size() < rings_end) return false;
    memcpy(header, bytes.data(), sizeof(header));
    if (header[0] != w->window || header[1] < 0 || header[1] > w->window || header[2] < 0 ||
        header[2] >= w->window || header[3] < 0 || header[3] > 1)
        return false;
    if (header[3] == 1) {
        if (bytes.size() < rings_end + sizeof(history)) return false;
        memcpy(history, bytes.data() + rings_end, sizeof(history));
    }
    const size_t size = header[3] == 0 ? rings_end
                                       : rings_end + sizeof(history) +
                                             sizeof(int32_t) * (size_t)std::max(history[4], 0);
    if (history[4] < 0 || history[4] > w->window || bytes.size() != size) return false;
    w->count = header[1];
    w->next = header[2];
    memcpy(w->losses.data(), bytes.data() + sizeof(header), ring);
    memcpy(w->norms.data(), bytes.data() + sizeof(header) + ring, ring);
    w->rewinds = history[0];
    w->furthest = history[1];
    w->skips = history[2];
    w->skips_in_row = history[3];
    w->spikes.resize(history[4]);
    memcpy(w->spikes.data(), bytes.data() + rings_end + sizeof(history),
           sizeof(int32_t) * w->spikes.size());
    return true;
}
