// Tests llmc/dataloader.h on shards this test writes itself, whose every token says where it
// is (token = 1000 * shard + position), so each batch row can be checked against the place it
// claims to come from:
// - file order without shuffling; inputs/targets are the T + 1 token window shifted by one;
// - with shuffling and 3 ranks: every epoch reads each sample at most once, ranks are disjoint,
//   the counts are what the sample/batch rules give, and the order changes with epoch and seed;
// - a 3-rank run equals a 1-rank run with 3x the batch (the distributed split is a partition
//   of the single-process batches);
// - saving the state and restoring it into a new loader continues bit-exactly, across epochs;
// - bad inputs are rejected with a message: wrong magic, wrong version, truncated, trailing
//   bytes, a token >= vocab, no files, an empty split, less than one batch, a foreign state,
//   a FIFO (without blocking), a directory (alone or matched with a shard), a 0-byte file, a
//   shard that changed size since the start;
// - the unigram loss equals the formula computed here from the token counts;
// - shards written by dev/data/prepare.py read back as the tokens Python wrote.
// Host code only: the CPU runtime and nvcc build it alike.
//! run: python3 dev/data/make_fixture.py --what prepared --out build/cpu/tests/data_loader_fixture && ./prog build/cpu/tests/data_loader_fixture => pass /all dataloader checks passed/

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <set>
#include <string>
#include <vector>
#include "../../../llmc/dataloader.h"
#include "test_util.h"

static const int VOCAB = 60000;
static int token_at(int shard, int pos) { return 1000 * shard + pos; }

// Writes a shard: header fields as given, then `tokens`, then `extra` stray bytes.
static void write_shard(const std::string& path, const std::vector<uint16_t>& tokens,
                        int magic = SHARD_MAGIC, int version = SHARD_VERSION, int count = -1,
                        int extra = 0) {
    int32_t header[SHARD_HEADER_INTS] = {0};
    header[0] = magic;
    header[1] = version;
    header[2] = count >= 0 ? count : (int)tokens.size();
    FILE* f = fopen(path.c_str(), "wb");
    std::vector<uint8_t> pad(extra, 7);
    if (f == NULL || fwrite(header, sizeof(header), 1, f) != 1 ||
        (!tokens.empty() && fwrite(tokens.data(), 2, tokens.size(), f) != tokens.size()) ||
        (!pad.empty() && fwrite(pad.data(), 1, pad.size(), f) != pad.size()) || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path.c_str());
        exit(1);
    }
}

static std::vector<uint16_t> positional_tokens(int shard, int n) {
    std::vector<uint16_t> t(n);
    for (int p = 0; p < n; p++) t[p] = (uint16_t)token_at(shard, p);
    return t;
}

// A sample read back: which shard, which sample index, which rank read it.
struct Sample {
    int shard, index, rank;
};

// Checks every row of the current batch is a valid window; appends what each row is.
static bool decode_batch(const DataLoader* dl, int rank, std::vector<Sample>* out) {
    bool ok = true;
    for (int b = 0; b < dl->B; b++) {
        const int* in = dl->inputs + b * dl->T;
        const int* tg = dl->targets + b * dl->T;
        int shard = in[0] / 1000, pos = in[0] % 1000;
        ok = ok && pos % dl->T == 0;
        for (int t = 0; t < dl->T; t++) {
            ok = ok && in[t] == token_at(shard, pos + t) && tg[t] == token_at(shard, pos + t + 1);
        }
        out->push_back({shard, pos / dl->T, rank});
    }
    return ok;
}

static void must_init(DataLoader* dl, const std::string& pattern, int B, int T, int rank, int world,
                      int shuffle, uint64_t seed) {
    if (dataloader_init(dl, pattern.c_str(), B, T, rank, world, VOCAB, shuffle, seed) != 0) {
        fprintf(stderr, "dataloader_init(%s): %s\n", pattern.c_str(), dl->error);
        exit(1);
    }
}

static bool next(DataLoader* dl) {
    bool ok = dataloader_next_batch(dl) == 0;
    if (!ok) expect(false, "next batch", dl->error);
    return ok;
}

static void expect_rejected(const std::string& pattern, int B, int T, const char* what,
                            const char* needle) {
    DataLoader dl;
    int rc = dataloader_init(&dl, pattern.c_str(), B, T, 0, 1, VOCAB, 1, 1);
    expect(rc != 0 && strstr(dl.error, needle) != NULL, what,
           "rc " + std::to_string(rc) + ", message \"" + (rc != 0 ? dl.error : "") + "\"");
    if (rc == 0) dataloader_free(&dl);
}

int main(int argc, char** argv) {
    std::string dir = directory_argument(
        argc, argv, "FIXTURE_DIR (written by dev/data/make_fixture.py --what prepared)", false);
    std::string good = dir + "/good";
    mkdir(good.c_str(), 0755);
    // Shard sizes: an empty shard, one too small for a batch, and three usable ones.
    const int sizes[5] = {250, 0, 20, 901, 137};
    for (int s = 0; s < 5; s++)
        write_shard(good + "/t_" + std::to_string(s) + ".bin", positional_tokens(s, sizes[s]));
    std::string pattern = good + "/t_*.bin";
    const int B = 2, T = 8, W = 3;

    // 1. file order, one rank
    {
        DataLoader dl;
        must_init(&dl, pattern, B, T, 0, 1, 0, 1);
        int64_t expect_batches = 0;
        for (int s = 0; s < 5; s++) expect_batches += (sizes[s] > 0 ? (sizes[s] - 1) / T : 0) / B;
        expect(dl.batches_per_epoch == expect_batches, "batches per epoch, one rank",
               std::to_string(dl.batches_per_epoch) + " vs " + std::to_string(expect_batches));
        std::vector<Sample> seen;
        bool windows = true;
        for (int64_t i = 0; i < dl.batches_per_epoch; i++)
            windows = next(&dl) && decode_batch(&dl, 0, &seen) && windows;
        bool in_order = true;
        size_t k = 0;
        for (int s = 0; s < 5; s++) {
            int usable = (sizes[s] > 0 ? (sizes[s] - 1) / T : 0) / B * B;
            for (int i = 0; i < usable; i++, k++)
                in_order = in_order && k < seen.size() && seen[k].shard == s && seen[k].index == i;
        }
        expect(windows, "rows are T+1 windows, targets = inputs shifted by one");
        expect(in_order && k == seen.size(), "unshuffled epoch reads every batch in file order");
        std::vector<Sample> again;
        next(&dl);
        decode_batch(&dl, 0, &again);
        expect(again[0].shard == 0 && again[0].index == 0, "the next epoch starts over");
        dataloader_reset(&dl);
        again.clear();
        next(&dl);
        decode_batch(&dl, 0, &again);
        expect(again[0].shard == 0 && again[0].index == 0 && again[1].index == 1,
               "reset rewinds (validation)");
        dataloader_free(&dl);
    }

    // 2. shuffled, 3 ranks, two epochs
    std::vector<std::vector<Sample>> epochs(2);
    {
        DataLoader dl[W];
        for (int r = 0; r < W; r++) must_init(&dl[r], pattern, B, T, r, W, 1, 42);
        int64_t per_epoch = dl[0].batches_per_epoch;
        int64_t expect_batches = 0;
        for (int s = 0; s < 5; s++)
            expect_batches += (sizes[s] > 0 ? (sizes[s] - 1) / T : 0) / (B * W);
        expect(per_epoch == expect_batches, "batches per epoch, 3 ranks",
               std::to_string(per_epoch) + " vs " + std::to_string(expect_batches));
        bool windows = true;
        for (int e = 0; e < 2; e++)
            for (int64_t i = 0; i < per_epoch; i++)
                for (int r = 0; r < W; r++)
                    windows = next(&dl[r]) && decode_batch(&dl[r], r, &epochs[e]) && windows;
        expect(windows, "shuffled rows are valid windows");
        for (int e = 0; e < 2; e++) {
            std::set<std::pair<int, int>> unique;
            for (const Sample& s : epochs[e]) unique.insert({s.shard, s.index});
            expect(
                unique.size() == epochs[e].size() && (int64_t)unique.size() == per_epoch * B * W,
                ("epoch " + std::to_string(e) + ": no sample read twice, by any rank").c_str(),
                std::to_string(unique.size()) + " distinct of " + std::to_string(epochs[e].size()));
        }
        bool shuffled = false, differ = false;
        for (size_t k = 0; k + 1 < epochs[0].size(); k++) {
            const Sample &a = epochs[0][k], &b = epochs[0][k + 1];
            if (a.shard == b.shard && b.index != a.index + 1) shuffled = true;
            if (a.shard != epochs[1][k].shard || a.index != epochs[1][k].index) differ = true;
        }
        std::vector<int> shard3[2];
        for (int e = 0; e < 2; e++)
            for (const Sample& s : epochs[e])
                if (s.shard == 3) shard3[e].push_back(s.index);
        expect(shuffled, "samples within a shard are shuffled");
        expect(differ, "the second epoch has another order");
        expect(shard3[0] != shard3[1],
               "a shard's samples come in another order in the second epoch");
        for (int r = 0; r < W; r++) dataloader_free(&dl[r]);
    }

    // 3. 3 ranks of B = one rank of 3B; the same seed repeats, another seed does not
    {
        DataLoader one, other;
        must_init(&one, pattern, B * W, T, 0, 1, 1, 42);
        must_init(&other, pattern, B * W, T, 0, 1, 1, 43);
        std::vector<Sample> a, c;
        for (int e = 0; e < 2; e++)
            for (int64_t i = 0; i < one.batches_per_epoch; i++) {
                next(&one);
                decode_batch(&one, 0, &a);
                next(&other);
                decode_batch(&other, 0, &c);
            }
        bool same = a.size() == epochs[0].size() + epochs[1].size();
        for (size_t k = 0; same && k < a.size(); k++) {
            const Sample& d = k < epochs[0].size() ? epochs[0][k] : epochs[1][k - epochs[0].size()];
            same = a[k].shard == d.shard && a[k].index == d.index;
        }
        expect(same, "3 ranks x B equals 1 rank x 3B, batch for batch",
               std::to_string(a.size()) + " samples");
        bool differ = false;
        for (size_t k = 0; k < a.size(); k++)
            differ = differ || a[k].shard != c[k].shard || a[k].index != c[k].index;
        expect(differ, "another seed gives another order");
        dataloader_free(&one);
        dataloader_free(&other);
    }

    // 4. save and restore, across an epoch boundary
    {
        DataLoader a, b;
        must_init(&a, pattern, B, T, 1, W, 1, 7);
        int64_t skip = a.batches_per_epoch - 2;
        for (int64_t i = 0; i < skip; i++) next(&a);
        DataLoaderState saved = dataloader_state(&a);
        std::vector<int> tail_a, tail_b;
        for (int i = 0; i < 9; i++) {
            next(&a);
            tail_a.insert(tail_a.end(), a.inputs, a.inputs + B * T);
            tail_a.insert(tail_a.end(), a.targets, a.targets + B * T);
        }
        must_init(&b, pattern, B, T, 1, W, 1, 7);
        next(&b);  // a restored loader may have moved before: the state overrides it
        int rc = dataloader_restore(&b, &saved);
        expect(rc == 0, "restore a saved state", rc ? b.error : "");
        for (int i = 0; i < 9; i++) {
            next(&b);
            tail_b.insert(tail_b.end(), b.inputs, b.inputs + B * T);
            tail_b.insert(tail_b.end(), b.targets, b.targets + B * T);
        }
        expect(tail_a == tail_b && a.epoch == 1,
               "restored loader continues bit-exactly into the next epoch");
        DataLoader c;
        must_init(&c, pattern, B, T + 1, 1, W, 1, 7);
        rc = dataloader_restore(&c, &saved);
        expect(rc != 0 && strstr(c.error, "does not fit") != NULL,
               "rejects a state saved with another T", c.error);
        DataLoaderState wrong = saved;
        wrong.batch = 1000000;
        rc = dataloader_restore(&b, &wrong);
        expect(rc != 0 && strstr(b.error, "names no batch") != NULL,
               "rejects a position past the data", b.error);
        dataloader_free(&a);
        dataloader_free(&b);
        dataloader_free(&c);
    }

    // 5. unigram loss against the formula, on shards 0, 3 (train) and 4 (val)
    {
        char err[1024] = "";
        double loss = 0;
        int rc = unigram_loss((good + "/t_[03].bin").c_str(), (good + "/t_4.bin").c_str(), VOCAB,
                              &loss, err, sizeof(err));
        std::vector<double> count(VOCAB, 0.0);
        double n_train = 0;
        for (int s : {0, 3})
            for (int p = 0; p < sizes[s]; p++, n_train++) count[token_at(s, p)] += 1;
        double sum = 0;
        for (int p = 0; p < sizes[4]; p++)
            sum -= log((count[token_at(4, p)] + 1) / (n_train + VOCAB));
        double want = sum / sizes[4];
        char detail[256];
        snprintf(detail, sizeof(detail), "%.12f vs %.12f, relative error %.2e (bound 1e-12)", loss,
                 want, fabs(loss - want) / want);
        expect(rc == 0 && fabs(loss - want) <= 1e-12 * want, "unigram loss matches the formula",
               rc ? err : detail);
        rc = unigram_loss(pattern.c_str(), (good + "/t_1.bin").c_str(), VOCAB, &loss, err,
                          sizeof(err));
        expect(rc != 0 && strstr(err, "empty split") != NULL,
               "unigram loss rejects an empty val split", err);
    }

    // 6. rejected inputs
    std::string bad = dir + "/bad";
    mkdir(bad.c_str(), 0755);
    std::vector<uint16_t> t100 = positional_tokens(0, 100);
    write_shard(bad + "/magic.bin", t100, 20240519);
    expect_rejected(bad + "/magic.bin", 1, 8, "rejects a wrong magic", "not a token shard");
    write_shard(bad + "/version.bin", t100, SHARD_MAGIC, 2);
    expect_rejected(bad + "/version.bin", 1, 8, "rejects a wrong version", "version 2");
    write_shard(bad + "/truncated.bin", t100, SHARD_MAGIC, SHARD_VERSION, 101);
    expect_rejected(bad + "/truncated.bin", 1, 8, "rejects a truncated shard", "truncated");
    write_shard(bad + "/short_header.bin", {}, SHARD_MAGIC, SHARD_VERSION, 0);
    truncate((bad + "/short_header.bin").c_str(), 1000);
    expect_rejected(bad + "/short_header.bin", 1, 8, "rejects a file shorter than the header",
                    "truncated");
    write_shard(bad + "/trailing.bin", t100, SHARD_MAGIC, SHARD_VERSION, -1, 3);
    expect_rejected(bad + "/trailing.bin", 1, 8, "rejects trailing bytes", "trailing bytes");
    std::vector<uint16_t> high = t100;
    high[57] = VOCAB;
    write_shard(bad + "/vocab.bin", high);
    expect_rejected(bad + "/vocab.bin", 1, 8, "rejects a token id >= vocab size",
                    "token 60000 at position 57");
    expect_rejected(bad + "/nothing_*.bin", 1, 8, "rejects a pattern that matches no file",
                    "no files match");
    write_shard(bad + "/empty.bin", {});
    expect_rejected(bad + "/empty.bin", 1, 8, "rejects an empty split", "empty split");
    write_shard(bad + "/small.bin", t100);  // 99 / 8 = 12 samples < 13
    expect_rejected(bad + "/small.bin", 13, 8, "rejects less data than one batch",
                    "too little data");
    expect_rejected(bad + "/small.bin", 0, 8, "rejects B = 0", "invalid arguments");
    // Files that are not regular are refused before they are read, and a FIFO must not block
    // the open (SIGALRM ends a hang as a failure).
    alarm(60);
    mkfifo((bad + "/fifo.bin").c_str(), 0644);  // EEXIST on a rerun: the FIFO is there
    expect_rejected(bad + "/fifo.bin", 1, 8, "rejects a FIFO as a shard, without blocking",
                    "fifo.bin: it is a FIFO (named pipe), not a regular file");
    mkdir((bad + "/dir.bin").c_str(), 0755);
    expect_rejected(bad + "/dir.bin", 1, 8, "rejects a directory as a shard",
                    "dir.bin: it is a directory, not a regular file");
    alarm(0);
    write_shard(bad + "/mixed_0.bin", t100);
    mkdir((bad + "/mixed_1.bin").c_str(), 0755);
    expect_rejected(bad + "/mixed_*.bin", 1, 8, "rejects a pattern that also matches a directory",
                    ("cannot open shard " + bad + "/mixed_1.bin: it is a directory").c_str());
    fclose(fopen((bad + "/zero.bin").c_str(), "wb"));
    expect_rejected(bad + "/zero.bin", 1, 8, "rejects a file of 0 bytes",
                    "truncated: 0 bytes, the header alone is 1024");
    // A shard that changes size after the start is reported when it is next opened.
    {
        write_shard(bad + "/changing.bin", t100);
        DataLoader dl;
        must_init(&dl, bad + "/changing.bin", 1, 8, 0, 1, 0, 1);
        write_shard(bad + "/changing.bin", positional_tokens(0, 120));
        int rc = dataloader_next_batch(&dl);
        expect(rc != 0 && strstr(dl.error,
                                 "changed since the start: it has 1264 bytes, it had "
                                 "1224") != NULL,
               "reports a shard that changed size since the start", dl.error);
        dataloader_free(&dl);
    }

    // 7. shards written by prepare.py (byte tokenizer, 1000-token shards) read back exactly
    {
        std::string prepared = dir + "/prepared";
        FILE* f = fopen((prepared + "/stream.bin").c_str(), "rb");
        std::vector<int> stream(1 << 20);
        size_t n = f != NULL ? fread(stream.data(), sizeof(int), stream.size(), f) : 0;
        if (f != NULL) fclose(f);
        stream.resize(n);
        DataLoader dl;
        int rc =
            dataloader_init(&dl, (prepared + "/tiny_train_*.bin").c_str(), 1, 16, 0, 1, 256, 0, 0);
        expect(rc == 0 && n > 0, "opens prepare.py's train shards", rc ? dl.error : "");
        bool same = rc == 0;
        int64_t base = 0, rows = 0;
        for (int s = 0; same && s < dl.shards.count; s++) {
            for (int64_t k = 0; same && k < dl.shard_batches[s]; k++, rows++) {
                same = next(&dl);
                for (int t = 0; same && t < 16; t++)
                    same = dl.inputs[t] == stream[base + k * 16 + t] &&
                           dl.targets[t] == stream[base + k * 16 + t + 1];
            }
            base += dl.shards.tokens[s];
        }
        expect(same && base == (int64_t)n, "batches equal the tokens prepare.py wrote",
               std::to_string(rows) + " rows over " + std::to_string(base) + " tokens");
        char err[1024] = "";
        double loss = 0;
        rc = unigram_loss((prepared + "/tiny_train_*.bin").c_str(),
                          (prepared + "/tiny_val_*.bin").c_str(), 256, &loss, err, sizeof(err));
        expect(rc == 0 && loss > 0 && loss < log(256.0),
               "unigram loss of prepare.py's split is below ln(256)",
               rc ? err : std::to_string(loss));
        if (rc == 0) dataloader_free(&dl);
    }

    return test_report("dataloader");
}
