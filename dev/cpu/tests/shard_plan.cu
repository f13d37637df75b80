// Tests llmc/shard_plan.h, the ZeRO shard plan, on its own: random parameter tables (element-wise
// tensors, matrices cut into Muon's whole matrices, the layout's alignment gaps) over random bucket
// cuts and 1 to 9 ranks. For every plan:
// - every element of every tensor is owned by exactly one rank, and nothing outside a tensor
//   (the alignment gaps) by any;
// - each rank's element-wise ranges fill distinct places of its element-wise shard, inside
//   [0, elem_shard), and its matrices distinct places of its matrix shard, on SHARD_ALIGN;
// - a rank's element-wise ranges in a bucket are exactly its slice of the bucket's packed
//   sequence (what the reduce-scatter hands it), in packed order;
// - padding is bounded: a bucket's slices exceed its packed elements by less than
//   ranks x (SHARD_ALIGN + 1);
// - Muon's work is balanced as list scheduling guarantees: the most loaded rank carries at most
//   the mean load plus the largest matrix's cost, and largest-first ownership is what the plan
//   says (each matrix to the least loaded rank at its turn, ties to the lowest);
// - the plan is a function of the table and the rank count alone (built twice: the same).
// Host code only.
//! run: ./prog => pass /all shard plan checks passed/

#include <stdio.h>
#include <stdlib.h>

#include <random>
#include <vector>

#include "../../../llmc/shard_plan.h"

static int checks = 0, failures = 0;

static void expect(bool ok, const char* what, int trial) {
    checks++;
    if (!ok) {
        failures++;
        if (failures <= 20) printf("FAIL trial %d: %s\n", trial, what);
    }
}

struct Table {
    std::vector<ShardTensor> tensors;
    std::vector<size_t> bucket_begin, bucket_end;
    size_t total;  // the layout's elements, gaps included
};

// A layout as train_gpt.cu lays it out: tensors one after the other, each on 128 elements;
// matrices (rows x cols, rows cut into `matrices` row blocks) and element-wise vectors. Buckets
// are runs of consecutive tensors, taken from the end of the layout to its start, as the
// backward pass finishes them.
static Table random_table(std::mt19937* rng) {
    Table t;
    const int count = 1 + (int)((*rng)() % 24);
    size_t offset = 0;
    for (int i = 0; i < count; i++) {
        ShardTensor s = {};
        s.offset = offset;
        s.in_norm = (*rng)() % 5 != 0;
        if ((*rng)() % 3 == 0) {  // a tensor of Muon matrices
            const int matrices = 1 + (int)((*rng)() % 4);
            s.cols = 32 * (1 + (int)((*rng)() % 8));
            s.rows = matrices * 32 * (1 + (int)((*rng)() % 6));
            s.matrices = matrices;
            s.numel = (size_t)s.rows * s.cols;
        } else {
            s.rows = 1;
            s.cols = 1 + (int)((*rng)() % 5000);
            s.numel = s.cols;
        }
        t.tensors.push_back(s);
        offset = round_up(offset + s.numel, 128);
    }
    t.total = offset;
    // cut points between tensors, then the buckets from the last range to the first
    std::vector<size_t> cuts = {0};
    for (int i = 1; i < count; i++)
        if ((*rng)() % 3 == 0) cuts.push_back(t.tensors[i].offset);
    cuts.push_back(t.total);
    for (int b = (int)cuts.size() - 2; b >= 0; b--) {
        t.bucket_begin.push_back(cuts[b]);
        t.bucket_end.push_back(cuts[b + 1]);
    }
    return t;
}

static double matrix_cost(const ShardTensor* t) {  // what plan_build balances: m^2 n, m <= n
    const double rows = t->rows / t->matrices;
    const double m = rows < t->cols ? rows : t->cols, k = rows < t->cols ? t->cols : rows;
    return m * m * k;
}

static void check_plan(const Table& t, int ranks, int trial) {
    const int n = (int)t.tensors.size(), buckets = (int)t.bucket_begin.size();
    ShardPlan plan, again;
    plan_build(&plan, t.bucket_begin.data(), t.bucket_end.data(), buckets, t.tensors.data(), n,
               ranks);
    plan_build(&again, t.bucket_begin.data(), t.bucket_end.data(), buckets, t.tensors.data(), n,
               ranks);

    std::vector<int> owners(t.total, 0);
    bool states_ok = true, aligned = true, same = true;
    for (int r = 0; r < ranks; r++) {
        std::vector<OwnedRange> owned = plan_owned(&plan, r), owned_again = plan_owned(&again, r);
        same = same && owned.size() == owned_again.size();
        std::vector<char> elem_used(plan.elem_shard, 0), matrix_used(plan.matrix_shard[r], 0);
        for (size_t i = 0; i < owned.size(); i++) {
            const OwnedRange& o = owned[i];
            if (same)
                same = o.tensor == owned_again[i].tensor && o.offset == owned_again[i].offset &&
                       o.state == owned_again[i].state && o.n == owned_again[i].n &&
                       o.matrix == owned_again[i].matrix;
            const ShardTensor& s = t.tensors[o.tensor];
            if (o.offset < s.offset || o.offset + o.n > s.offset + s.numel) states_ok = false;
            for (size_t e = 0; e < o.n && o.offset + e < t.total; e++) owners[o.offset + e]++;
            std::vector<char>& used = o.matrix ? matrix_used : elem_used;
            if (o.state + o.n > used.size()) {
                states_ok = false;
                continue;
            }
            for (size_t e = 0; e < o.n; e++) {
                if (used[o.state + e]) states_ok = false;
                used[o.state + e] = 1;
            }
            if (o.matrix && o.state % SHARD_ALIGN != 0) aligned = false;
        }
    }
    bool each_once = true;
    std::vector<char> inside(t.total, 0);
    for (const ShardTensor& s : t.tensors)
        for (size_t e = 0; e < s.numel; e++) inside[s.offset + e] = 1;
    for (size_t e = 0; e < t.total; e++)
        if (owners[e] != (inside[e] ? 1 : 0)) each_once = false;
    expect(each_once, "every element of every tensor owned by exactly one rank, no gap by any",
           trial);
    expect(states_ok, "each rank's ranges fill distinct places inside its shards", trial);
    expect(aligned, "matrices start on SHARD_ALIGN in their owner's shard", trial);
    expect(same, "the plan is a function of the table and the rank count", trial);

    // slices: rank r's element-wise ranges of bucket b are [r*slice, (r+1)*slice) of the packed
    // sequence, in order, and start where the bucket's slice starts in its shard
    bool slices_ok = true, padding_ok = true;
    for (int b = 0; b < buckets; b++) {
        const ShardBucket* sb = &plan.buckets[b];
        if (sb->slice % SHARD_ALIGN != 0 || sb->slice * ranks < sb->packed ||
            sb->slice * ranks - sb->packed >= (size_t)ranks * (SHARD_ALIGN + 1))
            padding_ok = false;
        for (int r = 0; r < ranks; r++) {
            size_t next_packed = r * sb->slice, next_state = sb->shard;
            for (const OwnedRange& o : plan_runs(&plan, r)) {
                if (o.state < sb->shard || o.state >= sb->shard + sb->slice) continue;
                // the packed position of this range: find its piece
                size_t packed = (size_t)-1;
                for (int p = sb->piece_first; p < sb->piece_first + sb->piece_count; p++) {
                    const ShardPiece* piece = &plan.pieces[p];
                    if (o.offset >= piece->offset && o.offset < piece->offset + piece->n)
                        packed = piece->packed + (o.offset - piece->offset);
                }
                if (packed != next_packed || o.state != next_state) slices_ok = false;
                next_packed += o.n;
                next_state += o.n;
            }
            const size_t end =
                (size_t)(r + 1) * sb->slice < sb->packed ? (r + 1) * sb->slice : sb->packed;
            if (next_packed < end) slices_ok = false;  // some of the slice is owned by no range
        }
    }
    expect(slices_ok, "a rank's ranges in a bucket are its slice of the packed sequence, in order",
           trial);
    expect(padding_ok, "slices padded by less than ranks x (SHARD_ALIGN + 1) per bucket", trial);

    // Muon: list scheduling's bound, and largest-first to the least loaded rank
    std::vector<double> load(ranks, 0.0);
    double total = 0.0, largest = 0.0;
    std::vector<int> order(plan.matrix_count);
    for (int i = 0; i < plan.matrix_count; i++) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return matrix_cost(&t.tensors[plan.matrices[a].tensor]) >
               matrix_cost(&t.tensors[plan.matrices[b].tensor]);
    });
    bool greedy = true;
    for (int i : order) {
        const double c = matrix_cost(&t.tensors[plan.matrices[i].tensor]);
        int least = 0;
        for (int r = 1; r < ranks; r++)
            if (load[r] < load[least]) least = r;
        if (plan.matrices[i].owner != least) greedy = false;
        load[plan.matrices[i].owner] += c;
        total += c;
        largest = c > largest ? c : largest;
    }
    double most = 0.0;
    for (double l : load) most = l > most ? l : most;
    expect(greedy, "each matrix owned by the least loaded rank at its turn, largest first", trial);
    expect(most <= total / ranks + largest + 1e-6 * total,
           "the most loaded rank within the mean plus the largest matrix", trial);
    plan_free(&plan);
    plan_free(&again);
}

int main() {
    std::mt19937 rng(20261202);
    int trial = 0;
    for (int table = 0; table < 300; table++) {
        const Table t = random_table(&rng);
        for (int ranks = 1; ranks <= 9; ranks++) check_plan(t, ranks, trial++);
    }
    printf("%d plans, %d checks, %d failed\n", trial, checks, failures);
    if (failures) return 1;
    printf("all shard plan checks passed\n");
    return 0;
}
