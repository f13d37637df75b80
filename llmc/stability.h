// llmc/stability.h: riding through bad steps. A step whose loss or gradient norm is not finite
// is never applied: the update is skipped on every rank (the loss and the norm are the global
// batch's, the same bits on every rank, so every rank decides the same), and a run ends only
// after --max-skips such steps in a row. --inject-fault makes the faults that test it, at a
// given step on a given rank (for tests and demonstrations only):
//   STEP:nan-grad       micro-batch 0's loss gradient times NaN: every gradient NaN after the
//                       data-parallel reduction
//   STEP:loss-scale=X   micro-batch 0's loss gradient times X (a gradient spike)
//   STEP:bad-batch      micro-batch 0's tokens replaced by one repeated token
//   STEP:skip           the update skipped on purpose (every rank): what a skipped step must
//                       equal, bit for bit
// with an optional :RANK (the rank of the whole job; default 0) for the first three. STEP is
// 1-based, as the step lines count.
//
// Spikes: each applied step's loss and gradient norm join a trailing window of the last
// --spike-window applied steps; once the window is full, a step whose loss or norm lies more
// than --spike-zscore standard deviations above the window's mean is a spike, and its update is
// skipped like a non-finite step's (it does not join the window). The window is the same on
// every rank (the loss and norm are) and goes into checkpoints, so a resumed run decides as the
// uninterrupted one.
//
// Entry points: FaultKind, FaultPlan, fault_parse, fault_here; SpikeWindow, spike_init,
// spike_check, spike_add, spike_save / spike_load. Host code only.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

enum FaultKind { FAULT_NONE, FAULT_NAN_GRAD, FAULT_LOSS_SCALE, FAULT_BAD_BATCH, FAULT_SKIP };

struct FaultPlan {
    int kind;      // FaultKind (FAULT_NONE: no fault)
    int step;      // 1-based
    double scale;  // FAULT_LOSS_SCALE's X
    int rank;      // the job's rank it happens on (FAULT_SKIP: every rank)
};

// Reads "STEP:KIND[:RANK]" (empty: no fault) into *f; nullptr, or what is wrong with it.
inline const char* fault_parse(const char* text, FaultPlan* f, char* msg, size_t len) {
    *f = FaultPlan{FAULT_NONE, 0, 1.0, 0};
    if (text[0] == '\0') return nullptr;
    char kind[64] = "";
    int step = 0, rank = 0, used = 0;
    const int fields = sscanf(text, "%d:%63[^:]%n:%d%n", &step, kind, &used, &rank, &used);
    const bool parsed = fields >= 2 && (size_t)used == strlen(text) && step >= 1 && rank >= 0;
    double scale = 1.0;
    if (parsed && strcmp(kind, "nan-grad") == 0) f->kind = FAULT_NAN_GRAD;
    else if (parsed && strcmp(kind, "bad-batch") == 0) f->kind = FAULT_BAD_BATCH;
    else if (parsed && strcmp(kind, "skip") == 0 && fields == 2) f->kind = FAULT_SKIP;
    else if (parsed && sscanf(kind, "loss-scale=%lf%n", &scale, &used) == 1 &&
             (size_t)used == strlen(kind) && std::isfinite(scale))
        f->kind = FAULT_LOSS_SCALE;
    if (f->kind == FAULT_NONE) {
        snprintf(msg, len,
                 "--inject-fault '%s': expected STEP:KIND[:RANK] with STEP >= 1 and KIND nan-grad, "
                 "loss-scale=X (finite X), bad-batch or skip (skip takes no RANK: every rank skips)",
                 text);
        return msg;
    }
    f->step = step;
    f->scale = scale;
    f->rank = rank;
    return nullptr;
}

// The fault of step `step` (1-based) on rank `rank`, or FAULT_NONE.
inline int fault_here(const FaultPlan* f, int step, int rank) {
    if (f->kind == FAULT_NONE || step != f->step) return FAULT_NONE;
    return f->kind == FAULT_SKIP || rank == f->rank ? f->kind : FAULT_NONE;
}

// ---------------------------------------------------------------------------------------------
// Spikes

struct SpikeWindow {
    int window;     // steps it holds when full
    double zscore;  // a spike's distance from the mean, in standard deviations (0: detection off)
    std::vector<double> losses, norms;  // rings of `window`
    int count, next;                    // held so far (up to window), the slot the next goes to
};

inline void spike_init(SpikeWindow* w, int window, double zscore) {
    w->window = window;
    w->zscore = zscore;
    w->losses.assign(window, 0.0);
    w->norms.assign(window, 0.0);
    w->count = w->next = 0;
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
inline bool spike_check(const SpikeWindow* w, double loss, double norm, char* why, size_t len) {
    if (w->zscore <= 0.0 || w->count < w->window) return false;
    double loss_mean, norm_mean;
    const double zl = spike_z(w->losses, loss, &loss_mean), zn = spike_z(w->norms, norm, &norm_mean);
    if (zl <= w->zscore && zn <= w->zscore) return false;
    const bool by_loss = zl >= zn;
    snprintf(why, len, "a spike: the %s %.6g is %.1f standard deviations above the last %d steps' "
             "mean %.6g (--spike-zscore %g)",
             by_loss ? "loss" : "gradient norm", by_loss ? loss : norm, by_loss ? zl : zn,
             w->window, by_loss ? loss_mean : norm_mean, w->zscore);
    return true;
}

inline void spike_add(SpikeWindow* w, double loss, double norm) {
    w->losses[w->next] = loss;
    w->norms[w->next] = norm;
    w->next = (w->next + 1) % w->window;
    if (w->count < w->window) w->count++;
}

// A checkpoint's section "spikes": int32 window, count, next, 0, then the losses and the norms
// (window doubles each).
inline std::vector<uint8_t> spike_save(const SpikeWindow* w) {
    const int32_t header[4] = {w->window, w->count, w->next, 0};
    const size_t ring = sizeof(double) * w->window;
    std::vector<uint8_t> out(sizeof(header) + 2 * ring);
    memcpy(out.data(), header, sizeof(header));
    memcpy(out.data() + sizeof(header), w->losses.data(), ring);
    memcpy(out.data() + sizeof(header) + ring, w->norms.data(), ring);
    return out;
}

// Restores w (of its own window length) from a section; false when it does not fit.
inline bool spike_load(SpikeWindow* w, const std::vector<uint8_t>& bytes) {
    int32_t header[4];
    const size_t ring = sizeof(double) * w->window;
    if (bytes.size() != sizeof(header) + 2 * ring) return false;
    memcpy(header, bytes.data(), sizeof(header));
    if (header[0] != w->window || header[1] < 0 || header[1] > w->window || header[2] < 0 ||
        header[2] >= w->window)
        return false;
    w->count = header[1];
    w->next = header[2];
    memcpy(w->losses.data(), bytes.data() + sizeof(header), ring);
    memcpy(w->norms.data(), bytes.data() + sizeof(header) + ring, ring);
    return true;
}
