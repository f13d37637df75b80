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
// Entry points: FaultKind, FaultPlan, fault_parse, fault_here. Host code only.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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
