/*
fuzz/shard.cc: libFuzzer harness of the token-shard parser and loader (llmc/dataloader.h).

The input is a shard file. It is written twice, as the two files matching the loader's pattern
(so the shard order is shuffled too), and for each of a few loader shapes (batch, sequence,
rank of world, vocabulary, shuffling) dataloader_init is asked to open them. When it accepts:
- every batch of an epoch and one more is read; each holds tokens below the vocabulary, and
  its targets are its inputs shifted by one;
- the position saved halfway restores into a second loader, which then reads the same batch;
- the unigram baseline, with the shards as both splits, is a finite positive number (for
  the small vocabularies).
A rejection must come with a message. Seeds: shards written by dev/data/prepare.py (fuzz/run.py).
*/
#include <math.h>

#include "../llmc/dataloader.h"
#include "fuzz.h"

struct LoaderShape {
    int B, T, rank, world, vocab, shuffle;
};
// Byte-tokenizer seeds hold tokens below 256: vocab 256 and 257 accept them, 200 refuses most.
static const LoaderShape SHAPES[] = {
    {1, 1, 0, 1, 65536, 0},
    {2, 5, 1, 2, 257, 1},
    {3, 16, 2, 3, 256, 1},
    {1, 7, 0, 1, 200, 1},
};
// Bounds the batches read per shape, so one input takes milliseconds.
static const int64_t MAX_BATCHES = 300;

static void check_batch(const DataLoader* dl) {
    for (int b = 0; b < dl->B; b++) {
        const int* in = dl->inputs + (size_t)b * dl->T;
        const int* tg = dl->targets + (size_t)b * dl->T;
        for (int t = 0; t < dl->T; t++) {
            fuzz_check(in[t] >= 0 && in[t] < dl->vocab_size && tg[t] >= 0 && tg[t] < dl->vocab_size,
                       "a batch token is outside the vocabulary");
            fuzz_check(t + 1 == dl->T || tg[t] == in[t + 1], "targets are not inputs shifted by 1");
        }
    }
}

static bool same_batch(const DataLoader* a, const DataLoader* b) {
    size_t n = (size_t)a->B * a->T * sizeof(int);
    return memcmp(a->inputs, b->inputs, n) == 0 && memcmp(a->targets, b->targets, n) == 0;
}

static void exercise(const std::string& pattern, const LoaderShape& s) {
    DataLoader dl;
    if (dataloader_init(&dl, pattern.c_str(), s.B, s.T, s.rank, s.world, s.vocab, s.shuffle, 7) !=
        0) {
        fuzz_check(dl.error[0] != '\0', "dataloader_init failed without a message");
        return;
    }
    fuzz_check(dl.batches_per_epoch > 0, "an accepted data set has no batch");
    const int64_t total =
        dl.batches_per_epoch + 1 < MAX_BATCHES ? dl.batches_per_epoch + 1 : MAX_BATCHES;
    DataLoaderState saved;
    memset(&saved, 0, sizeof(saved));
    for (int64_t i = 0; i < total; i++) {
        if (i == total / 2) saved = dataloader_state(&dl);
        fuzz_check(dataloader_next_batch(&dl) == 0, "reading a batch of an accepted shard failed");
        check_batch(&dl);
    }
    // Restore the saved position into a fresh loader; both must then read the same batch.
    DataLoader again;
    fuzz_check(dataloader_init(&again, pattern.c_str(), s.B, s.T, s.rank, s.world, s.vocab,
                               s.shuffle, 7) == 0,
               "the same shards are refused the second time");
    fuzz_check(dataloader_restore(&again, &saved) == 0, "a saved position does not restore");
    dataloader_reset(&dl);
    fuzz_check(dataloader_restore(&dl, &saved) == 0, "a saved position does not restore twice");
    fuzz_check(dataloader_next_batch(&dl) == 0 && dataloader_next_batch(&again) == 0 &&
                   same_batch(&dl, &again),
               "a restored loader reads another batch");
    dataloader_free(&again);
    dataloader_free(&dl);

    if (s.vocab > 1024) return;  // its loops over the vocabulary would dominate the run time
    double loss = 0;
    char err[1024] = "";
    fuzz_check(
        unigram_loss(pattern.c_str(), pattern.c_str(), s.vocab, &loss, err, sizeof(err)) == 0,
        "the unigram baseline fails on accepted shards");
    fuzz_check(isfinite(loss) && loss > 0, "the unigram baseline is not a positive number");
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_write("x_000.bin", data, size);
    std::string pattern = fuzz_write("x_001.bin", data, size);
    pattern.replace(pattern.size() - 7, 3, "*");  // .../x_*.bin
    for (const LoaderShape& s : SHAPES) exercise(pattern, s);
    return 0;
}
