// Tests llmc/pipeline.h, pipeline parallelism's schedules as data, on their own: every schedule
// (gpipe, 1f1b, interleaved) for every config pipe_config_check accepts with pp 1..8, 1..4 chunks
// per rank and 1..32 micro-batches. For each:
// - complete: each rank runs the forward and the backward of each of its (micro-batch, chunk)
//   pairs exactly once (pipe_schedule_check), 2 m v actions;
// - the stages: the virtual stages cut the layers into equal contiguous runs, in order, the
//   embeddings on the first only, the head on the last only; chunk c of rank r is stage c p + r;
// - the dependencies are consistent: an action's send names the action that receives it, whose
//   receive names it back, on the neighbouring virtual stage of another rank;
// - no deadlock, and the simulated times obey the rules: no action starts before its rank is
//   free, before its inputs arrived or its own forward ended, and each starts as early as they
//   allow;
// - the bubble equals the formula exactly, (p - 1)/(m v + p - 1) (v = 1: (p - 1)/(m + p - 1)), in
//   integer time units with tb = 2 tf, and the step time (m v + p - 1)(tf + tb) for tb/tf = 1/2,
//   1, 3/2, 2, 3 (llmc/pipeline.h derives it: the lower bound of any schedule);
// - a transfer time c: gpipe's step grows by exactly 2 (p - 1) c, interleaved's by 2 (p v - 1) c;
// - the micro-batches in flight (activations kept): gpipe m, 1f1b min(p - r, m), interleaved
//   min(warm-up + 1, m v) with Megatron's warm-up (p - r - 1) x 2 + (v - 1) p;
// - known answers: two small simulations worked out by hand, and the 1f1b timeline of pp 4 with
//   8 micro-batches as PipeDream-Flush draws it (every action one unit);
// - the README's table of bubbles, printed, up to pp 16 (the seeds' example), each the formula;
// - the executor's exchange plans (pipe_exchange_plan), every rank's, for every schedule and
//   config with pp 2..8, 1..4 chunks, 1..32 micro-batches, run against each other with
//   rendezvous transfers (run_rendezvous: a send completes only with its receive, a rank blocks
//   in a group until all of its transfers completed): none deadlocks, each activation and
//   gradient is sent once and received by the right (rank, micro-batch, chunk) before the action
//   that needs it runs, and no rank holds more activation sets than the plan's slots; and in
//   lock-step (each rank's exchange of a step waits for its peers' actions of the step), with a
//   forward lasting 1, a backward 2 and eager sends, every step takes pipe_simulate's time, the
//   formula's bubble (with rendezvous sends some take longer: printed).
// Then each check is shown to fail where it should: a deadlocked schedule (rank 0 without
// warm-up: its first backward waits for a gradient that needs its own later forwards) and one
// that waits on itself are named, missing, repeated and out-of-range actions are named, a
// one-micro-batch-at-a-time schedule's bubble is not the formula, gpipe's in-flight count
// breaks 1f1b's bound, an action moved by one unit breaks the time check; and every message of
// pipe_config_check; the naive pairing of the transfers (each send grouped with the rank's next
// receive) deadlocks the interleaved schedule, named rank by rank, and one activation set fewer
// than the plan's is found too few, and plans laid out in unit steps take longer in lock-step.
// Prints two timelines.
// Host code only.
//! run: ./prog => pass /all pipeline schedule checks passed/

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <string>
#include <vector>

#include "../../../llmc/pipeline.h"
#include "test_util.h"

// A failure inside a loop over many configs: counted, the first few printed.
static int loop_failures = 0;
static void loop_check(bool ok, const PipeConfig* c, const std::string& what) {
    if (ok) return;
    if (++loop_failures <= 20)
        printf("FAIL %s pp %d chunks %d micro-batches %d: %s\n", PIPE_SCHEDULES[c->schedule].name,
               c->pp, c->chunks, c->micro_batches, what.c_str());
}

// The most (micro-batch, chunk) pairs in flight rank r may hold under each schedule.
static int expected_peak(int schedule, const PipeConfig* c, int r) {
    const int p = c->pp, v = c->chunks, m = c->micro_batches;
    if (schedule == PIPE_GPIPE) return m;
    if (schedule == PIPE_1F1B) return std::min(p - r, m);
    return std::min((p - r - 1) * 2 + (v - 1) * p + 1, m * v);
}

// Whether every rank's idle/T is exactly (p - 1)/(m v + p - 1) (integer times: exact in double).
static bool bubble_is_formula(const PipeSimulation* sim, const PipeConfig* c) {
    const double p = c->pp, mv = (double)c->micro_batches * c->chunks;
    for (const PipeRankStats& st : sim->ranks)
        if (st.idle * (mv + p - 1) != sim->makespan * (p - 1)) return false;
    return true;
}

// The simulated times against the rules, worked out again from the starts alone: rank r's i-th
// action starts at max(the end of its action before, its input's arrival, its own forward's end).
static bool times_obey_rules(const PipeSchedule* s, const PipeSimulation* sim, PipeCosts costs) {
    const PipeConfig* c = &s->config;
    auto cost = [&](PipeAction a) { return a.op == PIPE_FORWARD ? costs.forward : costs.backward; };
    auto end_of = [&](int rank, PipeAction want) {
        const std::vector<PipeAction>& actions = s->ranks[rank];
        for (size_t i = 0; i < actions.size(); i++)
            if (actions[i].op == want.op && actions[i].micro == want.micro &&
                actions[i].chunk == want.chunk)
                return sim->start[rank][i] + cost(actions[i]);
        return -1.0;
    };
    for (int r = 0; r < c->pp; r++) {
        for (size_t i = 0; i < s->ranks[r].size(); i++) {
            const PipeAction a = s->ranks[r][i];
            double earliest = i > 0 ? sim->start[r][i - 1] + cost(s->ranks[r][i - 1]) : 0.0;
            const PipeTransfer recv = pipe_deps(c, r, a).recv;
            if (recv.rank >= 0)
                earliest = std::max(earliest, end_of(recv.rank, recv.action) + costs.transfer);
            if (a.op == PIPE_BACKWARD)
                earliest = std::max(earliest, end_of(r, {PIPE_FORWARD, a.micro, a.chunk}));
            if (sim->start[r][i] != earliest) return false;
        }
    }
    return true;
}

static bool same_action(PipeAction a, PipeAction b) {
    return a.op == b.op && a.micro == b.micro && a.chunk == b.chunk;
}

// The stages and the dependencies of config c (any schedule: they do not depend on it).
static void check_stages_and_deps(const PipeSchedule* s) {
    const PipeConfig* c = &s->config;
    const int S = pipe_stage_count(c);
    int next_block = 0;
    for (int stage = 0; stage < S; stage++) {
        const PipeStage st = pipe_stage(c, stage);
        loop_check(st.first_block == next_block && st.blocks * S == c->layers, c,
                   "stage " + std::to_string(stage) + " is not the next L/(p v) blocks");
        loop_check(st.embeddings == (stage == 0) && st.head == (stage == S - 1), c,
                   "embeddings or head on stage " + std::to_string(stage));
        loop_check(pipe_stage_of(c, pipe_rank_of(c, stage), pipe_chunk_of(c, stage)) == stage, c,
                   "stage " + std::to_string(stage) + " is not chunk x p + rank");
        next_block += st.blocks;
    }
    loop_check(next_block == c->layers, c, "the stages do not cover the layers");
    for (int r = 0; r < c->pp; r++)
        for (const PipeAction& a : s->ranks[r]) {
            const int stage = pipe_stage_of(c, r, a.chunk);
            const PipeDeps d = pipe_deps(c, r, a);
            const int from = a.op == PIPE_FORWARD ? stage - 1 : stage + 1;
            const bool at_end = from < 0 || from >= S;
            const std::string where = pipe_action_label(c, a) + " on rank " + std::to_string(r);
            if (at_end) loop_check(d.recv.rank == -1, c, where + " receives from outside");
            else
                loop_check(d.recv.rank != r && d.recv.action.op == a.op &&
                               d.recv.action.micro == a.micro &&
                               pipe_stage_of(c, d.recv.rank, d.recv.action.chunk) == from,
                           c, where + " does not receive from the neighbouring stage");
            if (d.send.rank < 0) continue;
            const PipeDeps there = pipe_deps(c, d.send.rank, d.send.action);
            loop_check(
                d.send.rank != r && there.recv.rank == r && same_action(there.recv.action, a), c,
                "what " + where + " sends is not received back");
        }
}

// Every schedule over the grid of configs: completeness, deadlock, times, bubble, in-flight.
static void check_all_configs() {
    const int ratios[][2] = {{1, 2}, {2, 1}, {1, 1}, {2, 3}, {1, 3}};  // (tf, tb); tb = 2 tf first
    char msg[256];
    for (int schedule = 0; schedule < PIPE_SCHEDULE_COUNT; schedule++) {
        const int failures_before = loop_failures;
        int configs = 0, actions = 0;
        double worst = 0;  // the largest |bubble - formula| at tb = 2 tf
        for (int p = 1; p <= 8; p++)
            for (int v = 1; v <= 4; v++)
                for (int m = 1; m <= 32; m++) {
                    const PipeConfig c = {schedule, p, v, m, p * v * (1 + m % 3)};
                    if (pipe_config_check(&c, msg, sizeof msg)) continue;
                    configs++;
                    const PipeSchedule s = pipe_schedule(&c);
                    const char* incomplete = pipe_schedule_check(&s, msg, sizeof msg);
                    loop_check(!incomplete, &c, incomplete ? incomplete : "");
                    for (int r = 0; r < p; r++) {
                        loop_check((int)s.ranks[r].size() == 2 * m * v, &c,
                                   "rank " + std::to_string(r) + " has " +
                                       std::to_string(s.ranks[r].size()) + " actions");
                        actions += (int)s.ranks[r].size();
                    }
                    check_stages_and_deps(&s);
                    for (const auto& ratio : ratios) {
                        const PipeCosts costs = {(double)ratio[0], (double)ratio[1], 0.0};
                        const PipeSimulation sim = pipe_simulate(&s, costs);
                        loop_check(sim.error.empty(), &c, sim.error);
                        if (!sim.error.empty()) continue;
                        loop_check(times_obey_rules(&s, &sim, costs), &c,
                                   "the simulated times break the rules");
                        const double step = (double)(m * v + p - 1) * (ratio[0] + ratio[1]);
                        loop_check(sim.makespan == step, &c,
                                   "tf " + std::to_string(ratio[0]) + " tb " +
                                       std::to_string(ratio[1]) + ": step " +
                                       std::to_string(sim.makespan) + ", the bound " +
                                       std::to_string(step));
                        for (const PipeRankStats& st : sim.ranks)
                            loop_check(st.busy == (double)m * v * (ratio[0] + ratio[1]), &c,
                                       "a rank's busy time");
                        if (ratio[1] != 2 * ratio[0]) continue;
                        loop_check(bubble_is_formula(&sim, &c), &c, "bubble is not the formula");
                        for (int r = 0; r < p; r++) {
                            const double formula = (p - 1.0) / (m * v + p - 1.0);
                            worst = std::max(worst, fabs(sim.ranks[r].bubble - formula));
                            loop_check(
                                sim.ranks[r].peak_in_flight == expected_peak(schedule, &c, r), &c,
                                "rank " + std::to_string(r) + " keeps " +
                                    std::to_string(sim.ranks[r].peak_in_flight) +
                                    " in flight, expected " +
                                    std::to_string(expected_peak(schedule, &c, r)));
                        }
                    }
                    // a transfer time: gpipe's and interleaved's step grow by a fixed amount
                    if (schedule == PIPE_1F1B) continue;
                    const PipeSimulation sim = pipe_simulate(&s, {2.0, 4.0, 1.0});
                    const int hops = schedule == PIPE_GPIPE ? p - 1 : p * v - 1;
                    loop_check(
                        sim.error.empty() && sim.makespan == (m * v + p - 1) * 6.0 + 2 * hops, &c,
                        "with transfer time 1: step " + std::to_string(sim.makespan));
                }
        char line[512];
        snprintf(line, sizeof line,
                 "%s: %d configs (%d actions) complete, dependencies consistent, no deadlock, "
                 "times by the rules, step = (m v + p - 1)(tf + tb) for 5 ratios, in-flight "
                 "bounds%s",
                 PIPE_SCHEDULES[schedule].name, configs, actions,
                 schedule == PIPE_1F1B ? "" : ", transfer time adds 2 x hops x c");
        char detail[128];
        snprintf(detail, sizeof detail, "largest |bubble - formula| at tb = 2 tf: %.3g", worst);
        expect(configs > 0 && loop_failures == failures_before, line, detail);
    }
}

// Two simulations worked out by hand (tf 1, tb 2).
static void check_known_answers() {
    // 1f1b, pp 2, 2 micro-batches: rank 0 F0 [0,1] F1 [1,2]; rank 1 F0 [1,2] B0 [2,4] F1 [4,5]
    // B1 [5,7]; rank 0 B0 [4,6] (B0's gradient at 4) B1 [7,9]: step 9, rank 0 idle 9 - 6 = 3.
    PipeConfig c = {PIPE_1F1B, 2, 1, 2, 2};
    PipeSchedule s = pipe_schedule(&c);
    PipeSimulation sim = pipe_simulate(&s, {1.0, 2.0, 0.0});
    const std::vector<double> rank0 = {0, 1, 4, 7}, rank1 = {1, 2, 4, 5};
    expect(sim.error.empty() && sim.start[0] == rank0 && sim.start[1] == rank1 &&
               sim.makespan == 9 && sim.ranks[0].idle == 3 && sim.ranks[1].idle == 3,
           "1f1b pp 2, 2 micro-batches: starts rank 0 {0,1,4,7}, rank 1 {1,2,4,5}, step 9",
           "step " + std::to_string(sim.makespan));
    // gpipe, pp 2, 1 micro-batch, transfer 1: rank 0 F0 [0,1]; rank 1 F0 [2,3] B0 [3,5]; rank 0
    // B0 [6,8]: step 8.
    c = {PIPE_GPIPE, 2, 1, 1, 2};
    s = pipe_schedule(&c);
    sim = pipe_simulate(&s, {1.0, 2.0, 1.0});
    expect(sim.error.empty() && sim.makespan == 8 && sim.start[0][1] == 6 && sim.start[1][0] == 2,
           "gpipe pp 2, 1 micro-batch, transfer 1: rank 1 starts at 2, rank 0's B0 at 6, step 8",
           "step " + std::to_string(sim.makespan));
    // 1f1b, pp 4, 8 micro-batches, every action one unit: micro-batch 0 reaches rank 3 at 3, its
    // gradient comes back to rank 2 at 5, rank 1 at 6, rank 0 at 7; from then on every rank
    // alternates; the last backwards drain the other way.
    c = {PIPE_1F1B, 4, 1, 8, 8};
    s = pipe_schedule(&c);
    const std::string timeline = pipe_timeline(&s);
    const char* rows[] = {
        "rank 0 | F0 F1 F2 F3 .  .  .  B0 F4 B1 F5 B2 F6 B3 F7 B4 .  B5 .  B6 .  B7 |",
        "rank 1 | .  F0 F1 F2 .  .  B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 .  B6 .  B7 .  |",
        "rank 2 | .  .  F0 F1 .  B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 .  B7 .  .  |",
        "rank 3 | .  .  .  F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 .  .  .  |"};
    bool all = true;
    for (const char* row : rows) all = all && timeline.find(row) != std::string::npos;
    expect(all, "the 1f1b timeline of pp 4, 8 micro-batches is PipeDream-Flush's");
    printf("%s", timeline.c_str());
    c = {PIPE_INTERLEAVED, 4, 2, 8, 8};
    pipe_print_schedule(stdout, &c);
}

// Broken schedules, and configs that do not divide: each detector must name the problem.
static void check_detectors() {
    PipeConfig c = {PIPE_1F1B, 4, 1, 8, 8};
    const PipeSchedule good = pipe_schedule(&c);
    char msg[256];
    auto simulated_error = [&](const PipeSchedule& s) {
        return pipe_simulate(&s, {1.0, 2.0, 0.0}).error;
    };
    auto expect_message = [&](const std::string& got, const std::vector<std::string>& wants,
                              const char* what) {
        bool ok = !got.empty();
        for (const std::string& want : wants) ok = ok && got.find(want) != std::string::npos;
        expect(ok, what, got);
    };

    // rank 0 without warm-up: F0 B0 F1 F2 ... its B0 needs rank 1's B0, which comes after rank
    // 1's F1 and F2, which need rank 0's F1 and F2, after its B0
    PipeSchedule s = good;
    std::vector<PipeAction>& rank0 = s.ranks[0];
    const auto first_backward = std::find_if(rank0.begin(), rank0.end(),
                                             [](PipeAction a) { return a.op == PIPE_BACKWARD; });
    const PipeAction b0 = *first_backward;
    rank0.erase(first_backward);
    rank0.insert(rank0.begin() + 1, b0);
    expect_message(simulated_error(s),
                   {"deadlock", "rank 0 waits at B0 for the gradient from rank 1's B0",
                    "rank 1 waits at F1 for the activation from rank 0's F1"},
                   "deadlock detected and named (rank 0 without warm-up)");
    // the last rank's B0 before its F0: it waits on itself
    s = good;
    std::swap(s.ranks[3][0], s.ranks[3][1]);
    expect_message(simulated_error(s), {"deadlock", "rank 3 waits at B0 for its own F0"},
                   "a backward before its own forward: deadlock named");
    s = good;
    s.ranks[2].erase(s.ranks[2].begin() + 12);
    expect_message(simulated_error(s), {"rank 2 never runs B"}, "a missing action named");
    s = good;
    s.ranks[1].back() = {PIPE_FORWARD, 3, 0};
    expect_message(simulated_error(s), {"rank 1 runs F3 twice"}, "a repeated action named");
    s = good;
    s.ranks[0][0].chunk = 1;
    expect_message(simulated_error(s), {"rank 0, action 0 (F0): outside", "chunks 0..0"},
                   "an action on a chunk the rank does not hold named");
    s = good;
    s.ranks.pop_back();
    expect_message(simulated_error(s), {"lists for 3 ranks, the pipeline 4"},
                   "a schedule for the wrong number of ranks refused");

    // an action started one unit late, or early, breaks the rules of the simulated times
    const PipeCosts costs = {1.0, 2.0, 0.0};
    const PipeSimulation right = pipe_simulate(&good, costs);
    PipeSimulation late = right, early = right;
    late.start[2][5] += 1;
    early.start[2][5] -= 1;
    expect(times_obey_rules(&good, &right, costs) && !times_obey_rules(&good, &late, costs) &&
               !times_obey_rules(&good, &early, costs),
           "the time check fails an action started one unit late or early");

    // one micro-batch at a time through the whole pipeline: complete, no deadlock, and a bubble
    // of (p - 1)/p, not the formula's (p - 1)/(m + p - 1)
    s = good;
    for (std::vector<PipeAction>& actions : s.ranks) {
        actions.clear();
        for (int i = 0; i < c.micro_batches; i++) {
            actions.push_back({PIPE_FORWARD, i, 0});
            actions.push_back({PIPE_BACKWARD, i, 0});
        }
    }
    PipeSimulation sim = pipe_simulate(&s, {1.0, 2.0, 0.0});
    expect(sim.error.empty() && !bubble_is_formula(&sim, &c) &&
               sim.ranks[0].idle * 4 == sim.makespan * 3,
           "the bubble check fails a sequential schedule (its bubble is (p-1)/p = 0.75)",
           "measured " + std::to_string(sim.ranks[0].bubble));
    // gpipe keeps all 8 micro-batches in flight on rank 0: more than 1f1b's p - 0 = 4
    c.schedule = PIPE_GPIPE;
    s = pipe_schedule(&c);
    sim = pipe_simulate(&s, {1.0, 2.0, 0.0});
    expect(sim.error.empty() && bubble_is_formula(&sim, &c) &&
               sim.ranks[0].peak_in_flight != expected_peak(PIPE_1F1B, &c, 0),
           "the in-flight check fails gpipe against 1f1b's bound (same bubble, 8 in flight, not 4)",
           "rank 0 keeps " + std::to_string(sim.ranks[0].peak_in_flight));

    struct Bad {
        PipeConfig config;
        const char* message;  // nullptr: accepted
    };
    const Bad configs[] = {
        {{PIPE_1F1B, 4, 1, 8, 8}, nullptr},
        {{PIPE_GPIPE, 1, 1, 1, 1}, nullptr},
        {{PIPE_INTERLEAVED, 4, 2, 8, 16}, nullptr},
        {{7, 4, 1, 8, 8}, "unknown pipeline schedule 7"},
        {{PIPE_1F1B, 0, 1, 8, 8}, "the pipeline needs at least 1 rank (pp 0)"},
        {{PIPE_1F1B, 4, 0, 8, 8}, "at least 1 model chunk (got 0)"},
        {{PIPE_1F1B, 4, 1, 0, 8}, "at least 1 micro-batch per step (got 0)"},
        {{PIPE_1F1B, 4, 2, 8, 8}, "2 model chunks per rank need the interleaved schedule (1f1b"},
        {{PIPE_GPIPE, 2, 3, 8, 6}, "3 model chunks per rank need the interleaved schedule (gpipe"},
        {{PIPE_INTERLEAVED, 1, 2, 8, 8}, "needs at least 2 pipeline ranks (pp 1)"},
        {{PIPE_INTERLEAVED, 4, 1, 8, 8}, "needs at least 2 model chunks per rank"},
        {{PIPE_INTERLEAVED, 4, 2, 6, 8}, "groups of pp 4: it does not divide the 6 micro-batches"},
        {{PIPE_1F1B, 4, 1, 8, 6}, "the 6 layers cannot be cut into pp 4 x 1 chunks per rank"},
        {{PIPE_INTERLEAVED, 4, 2, 8, 12},
         "the 12 layers cannot be cut into pp 4 x 2 chunks per rank"},
        {{PIPE_1F1B, 1, 1, 1, 0}, "the 0 layers cannot be cut"},
    };
    for (const Bad& bad : configs) {
        const char* got = pipe_config_check(&bad.config, msg, sizeof msg);
        const bool ok = bad.message ? got && strstr(got, bad.message) : !got;
        const PipeConfig* c = &bad.config;
        std::string what = std::string("refused: ") + (bad.message ? bad.message : "");
        if (!bad.message)
            what = "accepted: " + std::string(PIPE_SCHEDULES[c->schedule].name) + " pp " +
                   std::to_string(c->pp) + ", " + std::to_string(c->chunks) + " chunk(s), " +
                   std::to_string(c->micro_batches) + " micro-batches, " +
                   std::to_string(c->layers) + " layers";
        expect(ok, what.c_str(), got ? got : "(accepted)");
    }
    expect(pipe_schedule_from_name("interleaved") == PIPE_INTERLEAVED &&
               pipe_schedule_from_name("1f1b") == PIPE_1F1B &&
               pipe_schedule_from_name("zero-bubble") == -1,
           "schedules by name (an unknown name: -1)");
}

// ---------------------------------------------------------------------------------------------
// The exchange plans under rendezvous transfers

// One transfer as a rank posts it: a send of what `action` (this rank's) produced, or a receive
// of the input of `action` (this rank's).
struct PlanOp {
    bool send;
    int peer;
    PipeAction action;
};

// A rank's program: its actions and its groups of transfers, in the order it runs them.
struct PlanStep {
    bool is_group;
    PipeAction action;        // !is_group: the action run
    std::vector<PlanOp> ops;  // is_group: one group, posted at once, waited for as a whole
};

// The executor's program from pipe_exchange_plan: per time step its action, then its exchange.
static std::vector<PlanStep> program_of_plan(const PipeExchangePlan* plan) {
    std::vector<PlanStep> steps;
    size_t i = 0, x = 0;
    for (int t = 0; t < plan->ticks; t++) {
        if (i < plan->actions.size() && plan->action_tick[i] == t)
            steps.push_back({false, plan->actions[i++], {}});
        if (x < plan->exchanges.size() && plan->exchanges[x].tick == t) {
            const PipeExchange* e = &plan->exchanges[x++];
            PlanStep g = {true, {}, {}};
            for (int k = 0; k < e->recv_count; k++)
                g.ops.push_back({false, e->recv_peer[k], e->recv[k]});
            if (e->send_peer >= 0) g.ops.push_back({true, e->send_peer, e->sent});
            steps.push_back(g);
        }
    }
    return steps;
}

// The naive pairing: a rank's transfers in its schedule's order (an action's receive before it,
// its send after it), each send grouped with the rank's next receive.
static std::vector<PlanStep> naive_program(const PipeConfig* c, int rank) {
    std::vector<PlanStep> steps;
    std::vector<PlanOp> pending;  // a send waiting for the next receive
    for (const PipeAction& a : pipe_rank_schedule(c, rank)) {
        const PipeDeps d = pipe_deps(c, rank, a);
        if (d.recv.rank >= 0) {
            pending.push_back({false, d.recv.rank, a});
            steps.push_back({true, {}, pending});
            pending.clear();
        }
        steps.push_back({false, a, {}});
        if (d.send.rank >= 0) pending.push_back({true, d.send.rank, a});
    }
    if (!pending.empty()) steps.push_back({true, {}, pending});
    return steps;
}

static std::string op_words(const PipeConfig* c, const PlanOp& op) {
    return std::string(op.send ? "send of " : "receive for ") + pipe_action_label(c, op.action) +
           (op.send ? " to rank " : " from rank ") + std::to_string(op.peer);
}

// Runs every rank's program with rendezvous transfers: a rank posts a group's transfers at once
// and blocks until all of them completed; a transfer completes only when the peer has posted the
// matching one (NCCL's matching: the k-th send from rank a to rank b meets the k-th receive on b
// from a), i.e. both ranks stand at the groups holding the two. Checks what pipe_exchange_plan
// promises: every program runs to its end (else the deadlock, each blocked rank and what it
// waits for); every input is sent once by the action producing it and received by the action
// needing it, before it runs; a backward after its own forward; every action with an output
// sends it once; and at most `slots[r]` activation sets held at once (an input received or
// embedded until its backward; slots empty: not checked). Returns "" or the first problem.
static int slots_limit(const std::vector<int>& slots, int r) {
    return slots.empty() ? 1 << 30 : slots[r];
}

static std::string run_rendezvous(const PipeConfig* c,
                                  const std::vector<std::vector<PlanStep>>& prog,
                                  const std::vector<int>& slots) {
    const int p = c->pp;
    auto channel = [&](int from, int to) { return from * p + to; };
    // every op, numbered per channel: seq[rank][step][op]
    std::vector<std::vector<std::vector<int>>> seq(p);
    std::vector<int> posted_sends(p * p, 0), posted_recvs(p * p, 0);
    // what each channel carries: the k-th send's action, the k-th receive's action
    std::vector<std::vector<PipeAction>> sent(p * p), received(p * p);
    for (int r = 0; r < p; r++)
        for (const PlanStep& st : prog[r]) {
            seq[r].push_back({});
            for (const PlanOp& op : st.ops) {
                if (op.peer < 0 || op.peer >= p || op.peer == r)
                    return "rank " + std::to_string(r) + ": " + op_words(c, op) +
                           " to no other rank";
                const int ch = op.send ? channel(r, op.peer) : channel(op.peer, r);
                seq[r].back().push_back(op.send ? posted_sends[ch]++ : posted_recvs[ch]++);
                (op.send ? sent : received)[ch].push_back(op.action);
            }
        }
    // data: the k-th send on a channel is what the k-th receive needs, each counted once
    for (int a = 0; a < p; a++)
        for (int b = 0; b < p; b++) {
            const int ch = channel(a, b);
            if (sent[ch].size() != received[ch].size())
                return "rank " + std::to_string(a) + " sends " + std::to_string(sent[ch].size()) +
                       " transfers to rank " + std::to_string(b) + ", which receives " +
                       std::to_string(received[ch].size());
            for (size_t k = 0; k < sent[ch].size(); k++) {
                const PipeDeps d = pipe_deps(c, b, received[ch][k]);
                if (d.recv.rank != a || !same_action(d.recv.action, sent[ch][k]))
                    return "rank " + std::to_string(b) + "'s receive for " +
                           pipe_action_label(c, received[ch][k]) + " from rank " +
                           std::to_string(a) + " meets the send of " +
                           pipe_action_label(c, sent[ch][k]);
            }
        }
    std::vector<size_t> at(p, 0);            // each rank's next step
    std::vector<std::vector<bool>> done(p);  // the ops of its current group completed
    std::vector<std::vector<bool>> ran(p), arrived(p), sent_out(p);  // [op][micro][chunk]
    std::vector<int> held(p, 0);
    const int m = c->micro_batches, v = c->chunks;
    auto idx = [&](PipeAction a) { return (a.op * m + a.micro) * v + a.chunk; };
    for (int r = 0; r < p; r++) ran[r] = arrived[r] = sent_out[r] = std::vector<bool>(2 * m * v);
    auto who = [&](int r) { return "rank " + std::to_string(r); };
    for (bool progress = true; progress;) {
        progress = false;
        for (int r = 0; r < p; r++) {
            while (at[r] < prog[r].size()) {
                const PlanStep& st = prog[r][at[r]];
                if (!st.is_group) {
                    const PipeAction a = st.action;
                    const PipeDeps d = pipe_deps(c, r, a);
                    const std::string where = who(r) + "'s " + pipe_action_label(c, a);
                    if (ran[r][idx(a)]) return where + " runs twice";
                    if (d.recv.rank >= 0 && !arrived[r][idx(a)])
                        return where + " runs before its input arrived";
                    if (a.op == PIPE_BACKWARD && !ran[r][idx({PIPE_FORWARD, a.micro, a.chunk})])
                        return where + " runs before its own forward";
                    ran[r][idx(a)] = true;
                    if (a.op == PIPE_BACKWARD) held[r]--;
                    else if (d.recv.rank < 0 && ++held[r] > slots_limit(slots, r))
                        return where + " holds " + std::to_string(held[r]) +
                               " activation sets, "
                               "pipe_exchange_plan allocates " +
                               std::to_string(slots[r]);
                    at[r]++;
                    progress = true;
                    continue;
                }
                if (done[r].empty()) done[r].assign(st.ops.size(), false);
                for (size_t k = 0; k < st.ops.size(); k++) {
                    if (done[r][k]) continue;
                    const PlanOp& op = st.ops[k];
                    // the peer must stand at the group holding the matching op
                    const int q = op.peer;
                    if (at[q] >= prog[q].size() || !prog[q][at[q]].is_group) continue;
                    const PlanStep& there = prog[q][at[q]];
                    for (size_t j = 0; j < there.ops.size(); j++)
                        if (there.ops[j].send != op.send && there.ops[j].peer == r &&
                            seq[q][at[q]][j] == seq[r][at[r]][k]) {
                            // both ends complete together
                            if (done[q].empty()) done[q].assign(there.ops.size(), false);
                            done[r][k] = done[q][j] = true;
                            progress = true;
                        }
                }
                bool all = true;
                for (bool d : done[r]) all = all && d;
                if (!all) break;
                for (const PlanOp& op : st.ops) {
                    if (op.send) {
                        if (!ran[r][idx(op.action)])
                            return who(r) + " sends what " + pipe_action_label(c, op.action) +
                                   " produces before running it";
                        if (sent_out[r][idx(op.action)])
                            return who(r) + " sends " + pipe_action_label(c, op.action) +
                                   "'s output twice";
                        sent_out[r][idx(op.action)] = true;
                        continue;
                    }
                    if (arrived[r][idx(op.action)])
                        return who(r) + " receives " + pipe_action_label(c, op.action) +
                               "'s input twice";
                    arrived[r][idx(op.action)] = true;
                    if (op.action.op == PIPE_FORWARD && ++held[r] > slots_limit(slots, r))
                        return who(r) + " holds " + std::to_string(held[r]) +
                               " activation sets after receiving " +
                               pipe_action_label(c, op.action) +
                               "'s input, pipe_exchange_plan "
                               "allocates " +
                               std::to_string(slots[r]);
                }
                done[r].clear();
                at[r]++;
                progress = true;
            }
        }
    }
    std::string waits;
    for (int r = 0; r < p; r++) {
        if (at[r] == prog[r].size()) continue;
        waits += "; " + who(r) + " blocks in its group of";
        const PlanStep& st = prog[r][at[r]];
        for (size_t k = 0; k < st.ops.size(); k++)
            if (done[r].empty() || !done[r][k]) waits += " [" + op_words(c, st.ops[k]) + "]";
    }
    if (!waits.empty()) return "deadlock" + waits;
    for (int r = 0; r < p; r++)
        for (const PipeAction& a : pipe_rank_schedule(c, r)) {
            const PipeDeps d = pipe_deps(c, r, a);
            if (d.send.rank >= 0 && !sent_out[r][idx(a)])
                return who(r) + " never sends " + pipe_action_label(c, a) + "'s output";
        }
    return "";
}

// The step's time when every rank runs its plan in lock-step, each action lasting what `costs`
// says and each exchange ending when the rank's action before it has ended and every transfer's
// peer has posted its side (its own action of that step ended): with eager sends a send does
// not wait for its receiver (rendezvous: it does).
static double lockstep_makespan(const PipeConfig* c, const std::vector<PipeExchangePlan>& plans,
                                PipeCosts costs, bool rendezvous) {
    const int p = c->pp;
    std::vector<double> ready(p, 0.0), posted(p);
    std::vector<size_t> next_action(p, 0), next_exchange(p, 0);
    for (int t = 0; t < plans[0].ticks; t++) {
        std::vector<const PipeExchange*> x(p, nullptr);
        for (int r = 0; r < p; r++) {
            const PipeExchangePlan* plan = &plans[r];
            posted[r] = ready[r];
            if (next_action[r] < plan->actions.size() && plan->action_tick[next_action[r]] == t)
                posted[r] += plan->actions[next_action[r]++].op == PIPE_FORWARD ? costs.forward
                                                                                : costs.backward;
            if (next_exchange[r] < plan->exchanges.size() &&
                plan->exchanges[next_exchange[r]].tick == t)
                x[r] = &plan->exchanges[next_exchange[r]++];
        }
        for (int r = 0; r < p; r++) {
            ready[r] = posted[r];
            if (!x[r]) continue;
            for (int k = 0; k < x[r]->recv_count; k++)
                ready[r] = std::max(ready[r], posted[x[r]->recv_peer[k]]);
            if (rendezvous && x[r]->send_peer >= 0)
                ready[r] = std::max(ready[r], posted[x[r]->send_peer]);
        }
    }
    return *std::max_element(ready.begin(), ready.end());
}

// Every rank's plan of every schedule, p 2..8, v 1..4, m 1..32, under rendezvous transfers; then
// the checker fails where it should: the naive pairing deadlocks the interleaved schedule, and
// one activation set fewer than pipe_exchange_plan's is too few.
static void check_exchange_plans() {
    char msg[256];
    int configs = 0, failures = 0, naive_configs = 0, naive_deadlocks = 0, short_slots = 0;
    int slow_eager = 0, slow_unit = 0, slow_rdv = 0;
    double worst_rdv = 1.0;
    std::string first_slow;
    std::string first_failure, first_naive, short_message;
    for (int schedule = 0; schedule < PIPE_SCHEDULE_COUNT; schedule++)
        for (int p = 2; p <= 8; p++)
            for (int v = 1; v <= 4; v++)
                for (int m = 1; m <= 32; m++) {
                    const PipeConfig c = {schedule, p, v, m, p * v};
                    if (pipe_config_check(&c, msg, sizeof msg)) continue;
                    configs++;
                    std::vector<std::vector<PlanStep>> prog, naive;
                    std::vector<int> slots;
                    std::vector<PipeExchangePlan> plans, unit_plans;
                    std::string error;
                    for (int r = 0; r < p; r++) {
                        plans.push_back(pipe_exchange_plan(&c, r, PIPE_PLAN_COSTS));
                        unit_plans.push_back(pipe_exchange_plan(&c, r, {1.0, 1.0, 0.0}));
                        if (!plans[r].error.empty()) error = plans[r].error;
                        prog.push_back(program_of_plan(&plans[r]));
                        naive.push_back(naive_program(&c, r));
                        slots.push_back(plans[r].slots);
                    }
                    if (error.empty()) error = run_rendezvous(&c, prog, slots);
                    if (error.empty()) {
                        // the time steps' layout: the lock-step takes the simulation's time
                        const PipeSchedule sched = pipe_schedule(&c);
                        const double bound = pipe_simulate(&sched, PIPE_PLAN_COSTS).makespan;
                        const double eager = lockstep_makespan(&c, plans, PIPE_PLAN_COSTS, false);
                        const double rdv = lockstep_makespan(&c, plans, PIPE_PLAN_COSTS, true);
                        const double unit =
                            lockstep_makespan(&c, unit_plans, PIPE_PLAN_COSTS, false);
                        if (eager != bound && slow_eager++ == 0)
                            first_slow = std::string(PIPE_SCHEDULES[schedule].name) + " pp " +
                                         std::to_string(p) + " v " + std::to_string(v) + " m " +
                                         std::to_string(m) + ": " + std::to_string(eager) +
                                         " for " + std::to_string(bound);
                        slow_unit += unit > bound;
                        if (rdv > bound) slow_rdv++, worst_rdv = std::max(worst_rdv, rdv / bound);
                    }
                    if (!error.empty() && failures++ == 0)
                        first_failure = std::string(PIPE_SCHEDULES[schedule].name) + " pp " +
                                        std::to_string(p) + " v " + std::to_string(v) + " m " +
                                        std::to_string(m) + ": " + error;
                    if (error.empty() && short_slots == 0 && schedule == PIPE_INTERLEAVED) {
                        std::vector<int> fewer = slots;
                        fewer[0]--;
                        short_message = run_rendezvous(&c, prog, fewer);
                        short_slots++;
                    }
                    if (schedule != PIPE_INTERLEAVED) continue;
                    naive_configs++;
                    const std::string naive_error = run_rendezvous(&c, naive, {});
                    if (naive_error.rfind("deadlock", 0) == 0 && naive_deadlocks++ == 0)
                        first_naive = "pp " + std::to_string(p) + " v " + std::to_string(v) +
                                      " m " + std::to_string(m) + ": " + naive_error;
                }
    expect(failures == 0,
           ("every rank's exchange plan completes under rendezvous transfers, each input sent "
            "once, received by its action before it runs, within the plan's activation sets (" +
            std::to_string(configs) + " configs)")
               .c_str(),
           failures ? std::to_string(failures) + " fail, the first " + first_failure : "");
    expect(slow_eager == 0,
           ("in lock-step with eager sends, a forward 1, a backward 2, every plan's step takes "
            "pipe_simulate's time (the formula's bubble), " +
            std::to_string(configs) + " configs")
               .c_str(),
           first_slow);
    expect(slow_unit > 0, ("laid out in unit steps instead, " + std::to_string(slow_unit) +
                           " configs take longer (the check can fail)")
                              .c_str());
    printf(
        "with rendezvous sends (a send waits for its receiver's action of the step), %d of %d "
        "configs take longer, at most %.3f x the simulation's time\n",
        slow_rdv, configs, worst_rdv);
    printf(
        "the naive pairing (each send grouped with the rank's next receive) deadlocks %d of "
        "%d interleaved configs; the first: %s\n",
        naive_deadlocks, naive_configs, first_naive.c_str());
    expect(naive_deadlocks > 0 && first_naive.find("rank 0 blocks") != std::string::npos,
           "the checker finds the naive pairing's interleaved deadlock, naming the ranks' waits");
    expect(short_message.find("activation sets") != std::string::npos,
           "one activation set fewer than the plan's is found too few", short_message);
}

// The README's table: the simulated bubble against the formula (tb = 2 tf, no transfer time),
// with the seeds' example (p 16, m 64: 15/79 = 19.0%). Times in forward passes of a rank's
// blocks (a chunk's are 1/v of it); in flight: (micro-batch, chunk) pairs on rank 0 and p - 1.
static void print_bubble_table() {
    const PipeConfig configs[] = {
        {PIPE_GPIPE, 4, 1, 8, 4},         {PIPE_1F1B, 4, 1, 8, 4},
        {PIPE_INTERLEAVED, 4, 2, 8, 8},   {PIPE_INTERLEAVED, 4, 4, 8, 16},
        {PIPE_1F1B, 8, 1, 32, 8},         {PIPE_INTERLEAVED, 8, 2, 32, 16},
        {PIPE_INTERLEAVED, 8, 4, 32, 32}, {PIPE_1F1B, 16, 1, 64, 16},
        {PIPE_INTERLEAVED, 16, 2, 64, 32}};
    bool all = true;
    printf("schedule      p  v   m    step  idle  bubble    formula          in flight\n");
    for (const PipeConfig& c : configs) {
        const PipeSchedule s = pipe_schedule(&c);
        const PipeSimulation sim = pipe_simulate(&s, {1.0, 2.0, 0.0});
        const int p = c.pp, v = c.chunks, m = c.micro_batches;
        all = all && sim.error.empty() && bubble_is_formula(&sim, &c);
        printf("%-12s %2d %2d %3d %7.2f %5.2f %.6f %3d/%-3d = %.6f %2d / %2d\n",
               PIPE_SCHEDULES[c.schedule].name, p, v, m, sim.makespan / v, sim.ranks[0].idle / v,
               sim.ranks[0].bubble, p - 1, m * v + p - 1, (p - 1.0) / (m * v + p - 1),
               sim.ranks[0].peak_in_flight, sim.ranks[p - 1].peak_in_flight);
    }
    expect(all, "the table's bubbles (p up to 16) equal the formula exactly");
}

int main() {
    check_all_configs();
    print_bubble_table();
    check_known_answers();
    check_detectors();
    check_exchange_plans();
    return test_report("pipeline schedule");
}
