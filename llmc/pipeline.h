// llmc/pipeline.h: pipeline parallelism's schedules as data, and a simulator that proves them.
// Pure host code (no CUDA): the trainer's pipeline executor (train_gpt.cu's pipe_forward_backward,
// --pp) runs a rank's list of actions in one loop, and dev/cpu/tests/pipeline_schedule.cu checks
// every schedule here on its own.
//
// The words. The L blocks are cut into p x v contiguous virtual stages of L / (p v) blocks each
// (pipe_stage): the embeddings run on virtual stage 0, the final LayerNorm, the lm head and the
// loss on the last one (the tied wte is then on both: its gradient is summed between them). The
// pipeline group has p ranks; rank r holds v model chunks, chunk c being virtual stage
// s = c p + r (Megatron-LM's interleaving; v = 1: rank r is stage r), so consecutive virtual
// stages are on consecutive ranks and stage s's neighbours are always on other ranks (p >= 2).
// A step's batch is m micro-batches (--grad-accum). An action is the forward or the backward pass
// of one micro-batch through one of the rank's chunks (PipeAction); a rank's schedule is the list
// of its actions in the order it runs them, each (micro-batch, chunk) forward and backward once.
//
// Dependencies (pipe_deps). The forward of micro-batch i on virtual stage s > 0 receives the
// activation of (i, s - 1)'s forward from the rank before; the backward of (i, s) needs its own
// forward (the activations it keeps) and, for s < last, receives the gradient of its output
// from (i, s + 1)'s backward on the rank after. After it runs, a forward sends its output to
// stage s + 1 and a backward its input's gradient to stage s - 1. Sends are posted and not
// waited for (a rank never blocks on a send): the executor must not let a pending send hold up a
// later receive (NCCL: a send and the receive it may meet go in one group).
//
// The schedules: one generator per kind (PIPE_SCHEDULES), each a rank's list from the config:
//   gpipe       all m forwards, then all m backwards (GPipe); m micro-batches in flight;
//   1f1b        PipeDream-Flush / Megatron's 1F1B: p - r - 1 warm-up forwards, then one forward
//               and one backward in turn, then the remaining backwards; at most p - r in flight;
//   interleaved Megatron-LM's interleaved 1F1B (Narayanan et al. 2021): forwards go through the
//               chunks in groups of p micro-batches (micro-batches 0..p-1 on chunk 0, then on
//               chunk 1, ..., then p..2p-1 on chunk 0, ...), backwards the same with the chunks
//               in reverse; (p - r - 1) x 2 + (v - 1) x p warm-up forwards, then 1F1B.
//               (Megatron-LM runs every forward first when m = p; here the warm-up is the
//               same for every m: the simulator finds m = p deadlock-free at the same bubble,
//               with fewer activations in flight on ranks > 0.)
// A new schedule (zero bubble, DualPipe) is a new generator in the table.
//
// The bubble. pipe_simulate runs every rank's list against the others with blocking receives,
// each action starting when its rank has finished the previous one and its inputs have arrived
// (the producing action's end plus the transfer time), and returns each rank's busy and idle
// time. The step takes T, from its start to the end of the last action on any rank (the flush:
// the gradient reduction and the update follow); a rank's bubble fraction is its idle time over
// T, idle = T - busy. With forward and backward times tf and tb per chunk (a chunk holds 1/v of
// a rank's blocks) and no transfer time, every rank is busy m v (tf + tb), and no schedule takes
// less than T = (p - 1) tf + m v (tf + tb) + (p - 1) tb: the last rank's first action is a
// forward on a stage >= p - 1, after p - 1 forwards on the ranks before it, and its last action
// a backward on a stage >= p - 1, before p - 1 backwards on the ranks before it. So no rank's
// bubble is below (p - 1)/(m v + p - 1), which is (p - 1)/(m + p - 1) at v = 1: the formulas of
// GPipe/1F1B and of the interleaved schedule are this bound, reached when the last rank never
// waits between its first and its last action. The simulated T of every schedule here equals
// the bound exactly for every config pipe_config_check accepts with p <= 8, v <= 4, m <= 32
// and tb/tf = 1/2, 1, 3/2, 2 or 3 (dev/cpu/tests/pipeline_schedule.cu, in integer time units).
// A transfer time c adds at least 2 (p - 1) c (the same chains cross p - 1 links each way):
// gpipe takes exactly that; interleaved 2 (p v - 1) c (measured at tf 2, tb 4, c 1: a
// micro-batch crosses p v - 1 boundaries each way, and the schedule hides none of them); 1f1b
// more, growing with m (its steady phase does not hide the transfers).
//
// Entry points: pipe_config_check (what does not fit), pipe_schedule_from_name,
// pipe_rank_schedule (one rank's actions) and pipe_schedule (every rank's); pipe_stage (what a
// virtual stage runs), pipe_stage_of / pipe_rank_of / pipe_chunk_of (where it lives), pipe_deps
// (what an action receives and sends), pipe_peak_in_flight (the activations a rank keeps);
// pipe_schedule_check (each action exactly once), pipe_simulate; pipe_exchange_plan (a rank's
// actions and transfers in the executor's time steps, and the activation sets it needs);
// pipe_action_label, pipe_timeline and pipe_print_schedule (the text timeline, one row per
// rank).
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

// The numbering is PIPE_SCHEDULES's.
enum PipeScheduleId { PIPE_GPIPE, PIPE_1F1B, PIPE_INTERLEAVED };

struct PipeConfig {
    int schedule;       // PipeScheduleId
    int pp;             // p: ranks in the pipeline group
    int chunks;         // v: model chunks (virtual stages) per rank
    int micro_batches;  // m: micro-batches per step
    int layers;         // L: blocks of the model
};

enum PipeOp { PIPE_FORWARD, PIPE_BACKWARD };

// The forward or backward pass of micro-batch `micro` through this rank's chunk `chunk`.
struct PipeAction {
    int op;  // PipeOp
    int micro;
    int chunk;
};

inline int pipe_stage_count(const PipeConfig* c) { return c->pp * c->chunks; }
inline int pipe_stage_of(const PipeConfig* c, int rank, int chunk) { return chunk * c->pp + rank; }
inline int pipe_rank_of(const PipeConfig* c, int stage) { return stage % c->pp; }
inline int pipe_chunk_of(const PipeConfig* c, int stage) { return stage / c->pp; }

// What a virtual stage runs: blocks [first_block, first_block + blocks), and before them the
// embeddings (stage 0), after them the final LayerNorm, the lm head and the loss (the last).
struct PipeStage {
    int first_block, blocks;
    bool embeddings, head;
};

inline PipeStage pipe_stage(const PipeConfig* c, int stage) {
    const int per_stage = c->layers / pipe_stage_count(c);
    return {stage * per_stage, per_stage, stage == 0, stage == pipe_stage_count(c) - 1};
}

// ---------------------------------------------------------------------------------------------
// The generators

// Appends what every schedule here shares: `warmup` forwards, then a forward and a backward in
// turn while forwards remain, then the remaining backwards; the k-th forward is forwards[k], the
// k-th backward backwards[k] (warmup = forwards.size(): all forwards, then all backwards).
inline void pipe_warmup_steady_cooldown(const std::vector<PipeAction>& forwards,
                                        const std::vector<PipeAction>& backwards, int warmup,
                                        std::vector<PipeAction>* out) {
    const int n = (int)forwards.size();
    for (int k = 0; k < warmup; k++) out->push_back(forwards[k]);
    for (int k = warmup; k < n; k++) {
        out->push_back(forwards[k]);
        out->push_back(backwards[k - warmup]);
    }
    for (int k = n - warmup; k < n; k++) out->push_back(backwards[k]);
}

// Micro-batches 0..m-1 on chunk 0, forward and backward, in order.
inline void pipe_in_order(const PipeConfig* c, std::vector<PipeAction>* forwards,
                          std::vector<PipeAction>* backwards) {
    for (int i = 0; i < c->micro_batches; i++) {
        forwards->push_back({PIPE_FORWARD, i, 0});
        backwards->push_back({PIPE_BACKWARD, i, 0});
    }
}

inline void pipe_generate_gpipe(const PipeConfig* c, int, std::vector<PipeAction>* out) {
    std::vector<PipeAction> forwards, backwards;
    pipe_in_order(c, &forwards, &backwards);
    pipe_warmup_steady_cooldown(forwards, backwards, c->micro_batches, out);
}

inline void pipe_generate_1f1b(const PipeConfig* c, int rank, std::vector<PipeAction>* out) {
    std::vector<PipeAction> forwards, backwards;
    pipe_in_order(c, &forwards, &backwards);
    pipe_warmup_steady_cooldown(forwards, backwards, std::min(c->pp - rank - 1, c->micro_batches),
                                out);
}

// The k-th of a rank's m v forwards (and backwards) goes to micro-batch group k / (p v), chunk
// (k / p) % v (backwards: from the last chunk down), micro-batch k % p of the group.
inline void pipe_generate_interleaved(const PipeConfig* c, int rank, std::vector<PipeAction>* out) {
    const int p = c->pp, v = c->chunks, n = c->micro_batches * v;
    std::vector<PipeAction> forwards, backwards;
    for (int k = 0; k < n; k++) {
        const int micro = k / (p * v) * p + k % p, chunk = k / p % v;
        forwards.push_back({PIPE_FORWARD, micro, chunk});
        backwards.push_back({PIPE_BACKWARD, micro, v - 1 - chunk});
    }
    pipe_warmup_steady_cooldown(forwards, backwards, std::min((p - rank - 1) * 2 + (v - 1) * p, n),
                                out);
}

struct PipeScheduleKind {
    const char* name;
    void (*generate)(const PipeConfig* c, int rank, std::vector<PipeAction>* out);
};

static const PipeScheduleKind PIPE_SCHEDULES[] = {
    {"gpipe", pipe_generate_gpipe},
    {"1f1b", pipe_generate_1f1b},
    {"interleaved", pipe_generate_interleaved},
};
constexpr int PIPE_SCHEDULE_COUNT = sizeof(PIPE_SCHEDULES) / sizeof(PIPE_SCHEDULES[0]);

// The schedule named `name`, or -1 if there is none.
inline int pipe_schedule_from_name(const char* name) {
    for (int i = 0; i < PIPE_SCHEDULE_COUNT; i++)
        if (std::string(PIPE_SCHEDULES[i].name) == name) return i;
    return -1;
}

// nullptr if the schedule can run the model, else the first thing that does not fit, in msg.
inline const char* pipe_config_check(const PipeConfig* c, char* msg, size_t len) {
    const int stages = c->pp * c->chunks;
    if (c->schedule < 0 || c->schedule >= PIPE_SCHEDULE_COUNT)
        snprintf(msg, len, "unknown pipeline schedule %d", c->schedule);
    else if (c->pp < 1) snprintf(msg, len, "the pipeline needs at least 1 rank (pp %d)", c->pp);
    else if (c->chunks < 1)
        snprintf(msg, len, "each pipeline rank needs at least 1 model chunk (got %d)", c->chunks);
    else if (c->micro_batches < 1)
        snprintf(msg, len, "the pipeline needs at least 1 micro-batch per step (got %d)",
                 c->micro_batches);
    else if (c->schedule != PIPE_INTERLEAVED && c->chunks > 1)
        snprintf(msg, len,
                 "%d model chunks per rank need the interleaved schedule (%s runs one stage per "
                 "rank)",
                 c->chunks, PIPE_SCHEDULES[c->schedule].name);
    else if (c->schedule == PIPE_INTERLEAVED && c->pp < 2)
        snprintf(msg, len, "the interleaved schedule needs at least 2 pipeline ranks (pp %d)",
                 c->pp);
    else if (c->schedule == PIPE_INTERLEAVED && c->chunks < 2)
        snprintf(msg, len,
                 "the interleaved schedule needs at least 2 model chunks per rank (got %d; with 1 "
                 "it is 1f1b with more forwards in flight)",
                 c->chunks);
    else if (c->schedule == PIPE_INTERLEAVED && c->micro_batches % c->pp != 0)
        snprintf(msg, len,
                 "the interleaved schedule runs micro-batches in groups of pp %d: it does not "
                 "divide the %d micro-batches",
                 c->pp, c->micro_batches);
    else if (c->layers < 1 || c->layers % stages != 0)
        snprintf(msg, len,
                 "the %d layers cannot be cut into pp %d x %d chunks per rank = %d virtual stages "
                 "of the same number of contiguous blocks",
                 c->layers, c->pp, c->chunks, stages);
    else return nullptr;
    return msg;
}

// Rank `rank`'s actions in the order it runs them (c passed pipe_config_check).
inline std::vector<PipeAction> pipe_rank_schedule(const PipeConfig* c, int rank) {
    std::vector<PipeAction> actions;
    PIPE_SCHEDULES[c->schedule].generate(c, rank, &actions);
    return actions;
}

// Every rank's actions: ranks[r] is rank r's list.
struct PipeSchedule {
    PipeConfig config;
    std::vector<std::vector<PipeAction>> ranks;
};

inline PipeSchedule pipe_schedule(const PipeConfig* c) {
    PipeSchedule s = {*c, {}};
    for (int r = 0; r < c->pp; r++) s.ranks.push_back(pipe_rank_schedule(c, r));
    return s;
}

// ---------------------------------------------------------------------------------------------
// Dependencies

// One end of a transfer: the other rank (-1: no transfer) and its action at the other end.
struct PipeTransfer {
    int rank;
    PipeAction action;
};

// What an action of rank `rank` receives before it runs (forward: the activation entering its
// stage; backward: the gradient of its stage's output) and sends after (the forward's output;
// the gradient of the stage's input). A backward also needs its own forward, on this rank.
struct PipeDeps {
    PipeTransfer recv, send;
};

inline PipeDeps pipe_deps(const PipeConfig* c, int rank, PipeAction a) {
    const int stage = pipe_stage_of(c, rank, a.chunk), last = pipe_stage_count(c) - 1;
    const int before = a.op == PIPE_FORWARD ? stage - 1 : stage + 1;  // where the input comes from
    const int after = a.op == PIPE_FORWARD ? stage + 1 : stage - 1;   // where the output goes
    auto end = [&](int s) -> PipeTransfer {
        if (s < 0 || s > last) return {-1, a};
        return {pipe_rank_of(c, s), {a.op, a.micro, pipe_chunk_of(c, s)}};
    };
    return {end(before), end(after)};
}

// The most (micro-batch, chunk) pairs whose forward has run and backward not yet, over a rank's
// list: the sets of activations it keeps at once.
inline int pipe_peak_in_flight(const std::vector<PipeAction>& actions) {
    int now = 0, peak = 0;
    for (const PipeAction& a : actions) {
        now += a.op == PIPE_FORWARD ? 1 : -1;
        peak = std::max(peak, now);
    }
    return peak;
}

// "F3" (forward of micro-batch 3), "B3.1" (backward of micro-batch 3 on chunk 1: the chunk is
// written when ranks hold more than one).
inline std::string pipe_action_label(const PipeConfig* c, PipeAction a) {
    char label[48];
    const char op = a.op == PIPE_FORWARD ? 'F' : 'B';
    if (c->chunks > 1) snprintf(label, sizeof label, "%c%d.%d", op, a.micro, a.chunk);
    else snprintf(label, sizeof label, "%c%d", op, a.micro);
    return label;
}

// nullptr if every rank's list runs the forward and the backward of each (micro-batch, chunk)
// exactly once and nothing else, else the first action missing, repeated or out of range.
inline const char* pipe_schedule_check(const PipeSchedule* s, char* msg, size_t len) {
    const PipeConfig* c = &s->config;
    const int m = c->micro_batches, v = c->chunks;
    if ((int)s->ranks.size() != c->pp) {
        snprintf(msg, len, "the schedule has lists for %zu ranks, the pipeline %d", s->ranks.size(),
                 c->pp);
        return msg;
    }
    for (int r = 0; r < c->pp; r++) {
        std::vector<int> runs(2 * m * v, 0);  // [op][micro][chunk]
        const std::vector<PipeAction>& actions = s->ranks[r];
        for (size_t i = 0; i < actions.size(); i++) {
            const PipeAction a = actions[i];
            if (a.op != PIPE_FORWARD && a.op != PIPE_BACKWARD) {
                snprintf(msg, len, "rank %d, action %zu: op %d is neither forward nor backward", r,
                         i, a.op);
                return msg;
            }
            const std::string label = pipe_action_label(c, a);
            if (a.micro < 0 || a.micro >= m || a.chunk < 0 || a.chunk >= v) {
                snprintf(msg, len,
                         "rank %d, action %zu (%s): outside micro-batches 0..%d, chunks 0..%d", r,
                         i, label.c_str(), m - 1, v - 1);
                return msg;
            }
            if (++runs[(a.op * m + a.micro) * v + a.chunk] > 1) {
                snprintf(msg, len, "rank %d runs %s twice (action %zu)", r, label.c_str(), i);
                return msg;
            }
        }
        for (int op : {PIPE_FORWARD, PIPE_BACKWARD})
            for (int i = 0; i < m; i++)
                for (int k = 0; k < v; k++)
                    if (runs[(op * m + i) * v + k] == 0) {
                        snprintf(msg, len, "rank %d never runs %s", r,
                                 pipe_action_label(c, {op, i, k}).c_str());
                        return msg;
                    }
    }
    return nullptr;
}

// ---------------------------------------------------------------------------------------------
// The simulator

// Time of one action of one chunk, and of carrying an activation or a gradient between ranks.
struct PipeCosts {
    double forward, backward, transfer;
};

struct PipeRankStats {
    double busy, idle;   // idle = makespan - busy
    double bubble;       // idle / makespan
    int peak_in_flight;  // pipe_peak_in_flight of the rank's list
};

struct PipeSimulation {
    std::string error;  // empty: every list complete and run to its end; else what is wrong
                        // (pipe_schedule_check's message, or the deadlock: each waiting action)
    double makespan;    // the end of the last action on any rank (the step's start is 0)
    std::vector<PipeRankStats> ranks;
    std::vector<std::vector<double>> start;  // start[r][i]: when rank r's i-th action starts
};

// Runs every rank's list with blocking receives: an action starts when its rank has finished the
// action before it and its inputs are there (pipe_deps: a received one transfer time after the
// action that sends it ends; a backward's own forward ended). The times are the earliest each
// action can start in its list's order (each follows from ones already known, in whatever order
// they are worked out); when no rank can start its next action, the schedule deadlocks.
inline PipeSimulation pipe_simulate(const PipeSchedule* s, PipeCosts costs) {
    const PipeConfig* c = &s->config;
    const int p = c->pp, m = c->micro_batches, S = pipe_stage_count(c);
    PipeSimulation sim = {};
    char msg[256];
    if (pipe_schedule_check(s, msg, sizeof msg)) {
        sim.error = msg;
        return sim;
    }
    // when each (op, virtual stage, micro-batch) ended; -1: not yet run
    std::vector<double> end(2 * S * m, -1.0);
    auto end_of = [&](int rank, PipeAction a) -> double& {
        return end[(a.op * S + pipe_stage_of(c, rank, a.chunk)) * m + a.micro];
    };
    std::vector<size_t> next(p, 0);  // each rank's next action
    std::vector<double> free_at(p, 0.0);
    sim.ranks.assign(p, PipeRankStats{});
    sim.start.resize(p);
    for (bool progress = true; progress;) {
        progress = false;
        for (int r = 0; r < p; r++) {
            const std::vector<PipeAction>& actions = s->ranks[r];
            for (; next[r] < actions.size(); next[r]++) {
                const PipeAction a = actions[next[r]];
                double ready = free_at[r];
                const PipeTransfer recv = pipe_deps(c, r, a).recv;
                if (recv.rank >= 0) {
                    const double sent = end_of(recv.rank, recv.action);
                    if (sent < 0) break;
                    ready = std::max(ready, sent + costs.transfer);
                }
                if (a.op == PIPE_BACKWARD) {
                    const double forward = end_of(r, {PIPE_FORWARD, a.micro, a.chunk});
                    if (forward < 0) break;
                    ready = std::max(ready, forward);
                }
                const double cost = a.op == PIPE_FORWARD ? costs.forward : costs.backward;
                sim.start[r].push_back(ready);
                free_at[r] = end_of(r, a) = ready + cost;
                sim.ranks[r].busy += cost;
                progress = true;
            }
        }
    }
    std::string waits;
    for (int r = 0; r < p; r++) {
        if (next[r] == s->ranks[r].size()) continue;
        const PipeAction a = s->ranks[r][next[r]];
        const PipeTransfer recv = pipe_deps(c, r, a).recv;
        const PipeAction forward = {PIPE_FORWARD, a.micro, a.chunk};
        waits += "; rank " + std::to_string(r) + " waits at " + pipe_action_label(c, a) + " for ";
        if (recv.rank >= 0 && end_of(recv.rank, recv.action) < 0)
            waits += std::string(a.op == PIPE_FORWARD ? "the activation" : "the gradient") +
                     " from rank " + std::to_string(recv.rank) + "'s " +
                     pipe_action_label(c, recv.action);
        else waits += "its own " + pipe_action_label(c, forward);
    }
    if (!waits.empty()) {
        sim.error = "deadlock: no rank can run its next action" + waits;
        return sim;
    }
    for (int r = 0; r < p; r++) sim.makespan = std::max(sim.makespan, free_at[r]);
    for (int r = 0; r < p; r++) {
        PipeRankStats* st = &sim.ranks[r];
        st->idle = sim.makespan - st->busy;
        st->bubble = sim.makespan > 0 ? st->idle / sim.makespan : 0.0;
        st->peak_in_flight = pipe_peak_in_flight(s->ranks[r]);
    }
    return sim;
}

// ---------------------------------------------------------------------------------------------
// The exchange plan

// One exchange of a rank's plan: at the end of time step `tick`, the send of what this rank's
// action of that step produced and the receives of what its neighbours' actions of that step
// produced, in one group (the executor: one NCCL group).
struct PipeExchange {
    int tick;
    int send_peer;    // -1: nothing sent
    PipeAction sent;  // the action whose output (forward) or input's gradient (backward) is sent
    int recv_count;
    int recv_peer[2];
    PipeAction recv[2];  // this rank's actions whose input arrives: a forward's activation, a
                         // backward's gradient of the chunk's output
};

// A rank's schedule laid out in time steps (ticks), and its exchanges.
struct PipeExchangePlan {
    std::string error;                    // empty: the plan; else why there is none
    std::vector<PipeAction> actions;      // the rank's schedule (pipe_rank_schedule)
    std::vector<int> action_tick;         // the time step each one runs in
    std::vector<PipeExchange> exchanges;  // in time order, only those with a transfer
    int ticks;                            // time steps of a step (the same on every rank)
    int slots;  // activation sets: the most micro-batches in flight here, inputs received early
                // included
};

// The costs the trainer's plan is laid out with: a forward one time step, a backward two (the
// usual ratio: a backward computes the gradients of the inputs and of the weights).
constexpr PipeCosts PIPE_PLAN_COSTS = {1.0, 2.0, 0.0};

// Rank `rank`'s plan (c passed pipe_config_check; costs: whole time steps, no transfer time, the
// trainer's PIPE_PLAN_COSTS). The time steps are pipe_simulate's with `costs`, the same on
// every rank: an action runs in the step it
// starts in, and its output goes out in the exchange at the end of its last step, which its
// receiver posts in the same step (it runs the action that needs it in a later one). Every
// exchange of a step pairs only with exchanges of that step, and all of a step's inputs come
// from earlier steps, so the exchanges complete step by step even where a send completes only
// together with its receive (rendezvous; proved for every schedule by
// dev/cpu/tests/pipeline_schedule.cu). Where the actions do cost what `costs` says and sends do
// not wait for their receives, the ranks wait for their inputs only as long as pipe_simulate's
// ranks are idle: the bubble is the formula's (the test checks it, scripts/test_pp.py measures
// it); unit steps would hold a forward's rank in each step its neighbour runs a backward.
// An activation set is taken from the step its input arrives (or, on stage 0, its forward runs)
// to its backward: the slots are the peak of that, replayed in the executor's order (a step's
// action, then its exchange) -- pipe_peak_in_flight's, or a few more where an input arrives a
// step or more before its forward. (The executor may queue an exchange later than its step,
// never earlier: a receive then takes its set later, which needs no more sets.)
inline PipeExchangePlan pipe_exchange_plan(const PipeConfig* c, int rank, PipeCosts costs) {
    PipeExchangePlan plan = {};
    const PipeSchedule schedule = pipe_schedule(c);
    const PipeSimulation sim = pipe_simulate(&schedule, costs);
    if (!sim.error.empty()) {
        plan.error = "the pipeline schedule does not run: " + sim.error;
        return plan;
    }
    plan.ticks = (int)sim.makespan;
    const int S = pipe_stage_count(c), mb = c->micro_batches;
    auto key = [&](int r, PipeAction a) {
        return (a.op * S + pipe_stage_of(c, r, a.chunk)) * mb + a.micro;
    };
    std::vector<int> tick_of(2 * S * mb), last_tick_of(2 * S * mb);  // its first and last step
    for (int r = 0; r < c->pp; r++)
        for (size_t i = 0; i < schedule.ranks[r].size(); i++) {
            const PipeAction a = schedule.ranks[r][i];
            const double cost = a.op == PIPE_FORWARD ? costs.forward : costs.backward;
            tick_of[key(r, a)] = (int)sim.start[r][i];
            last_tick_of[key(r, a)] = (int)(sim.start[r][i] + cost) - 1;
        }
    plan.actions = schedule.ranks[rank];
    std::vector<PipeExchange> at(plan.ticks, PipeExchange{0, -1, {}, 0, {-1, -1}, {}});
    for (const PipeAction& a : plan.actions) {
        const PipeDeps deps = pipe_deps(c, rank, a);
        plan.action_tick.push_back(tick_of[key(rank, a)]);
        const int end = last_tick_of[key(rank, a)];
        if (deps.send.rank >= 0) at[end].send_peer = deps.send.rank, at[end].sent = a;
        if (deps.recv.rank < 0) continue;
        PipeExchange* x = &at[last_tick_of[key(deps.recv.rank, deps.recv.action)]];
        if (x->recv_count == 2) {  // a neighbour ends one action a step: at most one from each
            plan.error = "the pipeline's timeline receives more than two inputs in a step";
            return plan;
        }
        x->recv_peer[x->recv_count] = deps.recv.rank;
        x->recv[x->recv_count++] = a;
    }
    for (int t = 0; t < plan.ticks; t++) {
        at[t].tick = t;
        if (at[t].send_peer >= 0 || at[t].recv_count > 0) plan.exchanges.push_back(at[t]);
    }
    int held = 0;
    size_t next = 0;
    for (int t = 0, i = 0; t < plan.ticks; t++) {
        if (i < (int)plan.actions.size() && plan.action_tick[i] == t) {
            const PipeAction a = plan.actions[i++];
            held += a.op == PIPE_BACKWARD ? -1 : pipe_stage_of(c, rank, a.chunk) == 0 ? 1 : 0;
        }
        for (; next < plan.exchanges.size() && plan.exchanges[next].tick == t; next++)
            for (int k = 0; k < plan.exchanges[next].recv_count; k++)
                held += plan.exchanges[next].recv[k].op == PIPE_FORWARD;
        plan.slots = std::max(plan.slots, held);
    }
    return plan;
}

// ---------------------------------------------------------------------------------------------
// The timeline

// The schedule as text, one row per rank and one column per time unit, from pipe_simulate with
// every action one unit and no transfer time: "F3.1" the forward of micro-batch 3 on chunk 1
// (virtual stage chunk x p + rank), "." idle; then each rank's idle units and peak in flight.
// A schedule that does not run to its end gives pipe_simulate's message instead.
inline std::string pipe_timeline(const PipeSchedule* s) {
    const PipeConfig* c = &s->config;
    const PipeSimulation sim = pipe_simulate(s, {1.0, 1.0, 0.0});
    if (!sim.error.empty()) return "the schedule does not run: " + sim.error + "\n";
    const int units = (int)sim.makespan;
    size_t width = 1;
    for (const std::vector<PipeAction>& actions : s->ranks)
        for (const PipeAction& a : actions) width = std::max(width, pipe_action_label(c, a).size());
    char line[256];
    snprintf(line, sizeof line,
             "pipeline schedule %s: pp %d, %d chunk(s) per rank (virtual stage = chunk x %d + "
             "rank), %d micro-batches, %d layers; one column per action (forward and backward "
             "one unit each), F/B micro-batch%s, . idle\n",
             PIPE_SCHEDULES[c->schedule].name, c->pp, c->chunks, c->pp, c->micro_batches, c->layers,
             c->chunks > 1 ? ".chunk" : "");
    std::string text = line;
    for (int r = 0; r < c->pp; r++) {
        std::vector<std::string> cells(units, std::string(".") + std::string(width - 1, ' '));
        for (size_t i = 0; i < s->ranks[r].size(); i++) {
            std::string label = pipe_action_label(c, s->ranks[r][i]);
            cells[(int)sim.start[r][i]] = label + std::string(width - label.size(), ' ');
        }
        snprintf(line, sizeof line, "rank %d |", r);
        text += line;
        for (const std::string& cell : cells) text += " " + cell;
        const PipeRankStats* st = &sim.ranks[r];
        snprintf(line, sizeof line, " | idle %d of %d, peak in flight %d\n", (int)st->idle, units,
                 st->peak_in_flight);
        text += line;
    }
    return text;
}

// Prints the timeline of the schedule `c` generates (c passed pipe_config_check).
inline void pipe_print_schedule(FILE* out, const PipeConfig* c) {
    const PipeSchedule s = pipe_schedule(c);
    fputs(pipe_timeline(&s).c_str(), out);
}
