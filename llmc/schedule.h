// llmc/schedule.h: the learning-rate schedules (warmup, then cosine, WSD, linear or constant),
// plain host code in double precision shared by train_gpt.cu and test_gpt.cu. The formulas are
// those of the PyTorch reference (scripts/reference.py), step s 0-based out of K steps:
//   s < W (warmup takes precedence):  LR * (s+1) / W
//   cosine:   floor + (LR-floor) * 0.5 * (1 + cos(pi*p)),  p = (s-W) / max(1, K-1-W)
//   linear:   LR + (floor-LR) * p, p as for cosine
//   wsd:      n = ceil(D*K); LR while s < K-n, then LR + (floor-LR) * (s-(K-n)+1)/n
//   constant: LR
// with floor = F * LR (F = min_lr_frac) and D = decay_frac.
//
// Entry points: learning_rate(ScheduleConfig, step), schedule_from_name.
#pragma once

#include <cmath>
#include <cstring>

// The numbering is the dump's config.schedule.
enum LRSchedule {
    SCHEDULE_COSINE = 0,
    SCHEDULE_WSD = 1,
    SCHEDULE_LINEAR = 2,
    SCHEDULE_CONSTANT = 3
};

static const char* const SCHEDULE_NAMES[] = {"cosine", "wsd", "linear", "constant"};
constexpr int NUM_SCHEDULES = 4;

// The schedule named `name`, or -1 if there is none.
inline int schedule_from_name(const char* name) {
    for (int i = 0; i < NUM_SCHEDULES; i++)
        if (strcmp(name, SCHEDULE_NAMES[i]) == 0) return i;
    return -1;
}

struct ScheduleConfig {
    int schedule;        // LRSchedule
    double lr;           // peak learning rate
    int warmup;          // W
    double min_lr_frac;  // F
    double decay_frac;   // D (wsd only)
    int steps;           // K
};

inline double learning_rate(const ScheduleConfig* s, int step) {
    const double lr = s->lr, floor_lr = s->min_lr_frac * s->lr;
    const int K = s->steps, W = s->warmup;
    if (step < W) return lr * (step + 1) / W;
    double p = (double)(step - W) / (K - 1 - W > 1 ? K - 1 - W : 1);
    switch (s->schedule) {
        case SCHEDULE_COSINE:
            return floor_lr + (lr - floor_lr) * 0.5 * (1.0 + cos(M_PI * p));
        case SCHEDULE_LINEAR:
            return lr + (floor_lr - lr) * p;
        case SCHEDULE_WSD: {
            int n_decay = (int)ceil(s->decay_frac * K);
            if (step < K - n_decay) return lr;
            return lr + (floor_lr - lr) * (double)(step - (K - n_decay) + 1) / n_decay;
        }
        default:
            return lr;  // SCHEDULE_CONSTANT
    }
}
