/*
llmc/dataloader.h: reads the token shards written by dev/data/prepare.py (llm.c's format) into
B x T batches of inputs and targets, shuffled reproducibly and split across ranks; plus the
unigram baseline loss that the trainer prints once.

Entry points: dataloader_init / dataloader_free, dataloader_next_batch, dataloader_reset,
dataloader_state / dataloader_restore, unigram_loss.

Shard file: 256 int32 header ([0] 20240520 magic, [1] version 1, [2] token count N, rest 0),
then N uint16 tokens, nothing after them.

Samples and batches. A shard of N tokens holds (N - 1) / T samples; sample k is the T + 1
tokens starting at k * T (inputs = the first T, targets = the last T, i.e. inputs shifted by
one). Consecutive samples overlap by one token, so every token but the first is a target
once. A global batch, the samples of one optimizer step, is G = A * world * B samples (A
micro-batches of world * B): micro-batch a of rank r takes the (a * world + r)-th group of B.
A shard gives floor(samples / G) global batches; the samples left over are skipped this epoch
(they land elsewhere in the next epoch's order). Ranks never read the same sample in an epoch.
Because the position counts global batches and each one is the same G samples however it is
split, a run may continue on another grid (another number of ranks, B or A) with the same G.

Order. With shuffling on, every epoch visits the shards in a random order and each shard's
samples in a random order; both permutations are pure functions of (seed, epoch, shard), made
with splitmix64 and Fisher-Yates. So the loader's whole state is its position (epoch, shard,
batch): saving and restoring it continues the exact same sequence of batches, and every
rank computes the same permutations without talking to the others. With shuffling off
(validation), shards and samples go in file order, and dataloader_reset() rewinds.

Errors. dataloader_init checks every shard up front - a regular file (a FIFO, a directory or
a device matched by the pattern is refused, never read: fopen_regular in fileio.h), magic,
version, size against the header's token count (truncated or trailing bytes), every token
below the vocabulary size - and that the shards hold at least one global batch. Opening a
shard again for its batches checks its size again, so one replaced since the start is
reported. Failures return -1 with a message in dl->error naming the file and the problem; the
caller prints it and exits non-zero. Running out of memory exits at once (MALLOC_CHECK).

Unigram baseline: cross-entropy of the validation tokens under the train split's token
frequencies with add-one smoothing, in nats per token:
    p(v) = (count_train(v) + 1) / (N_train + V)
    loss = -(1/N_val) * sum over val tokens t of ln p(t)
A model that has learned nothing about context cannot do better than about this.
*/
#pragma once

#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * (int64_t)sizeof(int32_t))

// Everything a checkpoint needs to continue the batch sequence, plus what it depends on
// (checked on restore, so a checkpoint cannot silently continue on different data or shape).
typedef struct {
    uint64_t seed, epoch, shard_pos, batch, micro;  // position (micro: within the global batch)
    int64_t num_shards, total_tokens, global_batch, T, shuffle;  // must match the loader
} DataLoaderState;
// Only 64-bit fields, no padding: a checkpoint can store the struct as its bytes.
static_assert(sizeof(DataLoaderState) == 10 * 8, "DataLoaderState must have no padding");

typedef struct {
    int count;
    char** paths;
    int64_t* tokens;  // tokens in each shard
} ShardSet;

typedef struct {
    int B, T, rank, world, accum, vocab_size, shuffle;  // accum: micro-batches per global batch
    uint64_t seed;
    ShardSet shards;
    int64_t* shard_batches;  // global batches in each shard
    int64_t batches_per_epoch;
    // position: the next batch is micro-batch `micro` of global batch `batch` of shard
    // shard_order[shard_pos]
    uint64_t epoch;
    int shard_pos;
    int64_t batch;
    int micro;
    int* shard_order;       // this epoch's order of the shards
    int order_shard;        // shard whose sample order is in sample_order (-1: none yet)
    int64_t* sample_order;  // that shard's samples in this epoch's order
    FILE* file;             // open handle of shard `file_shard`
    int file_shard;
    uint16_t* buffer;  // one sample, T + 1 tokens
    int* inputs;       // (B, T) this rank's inputs
    int* targets;      // (B, T) this rank's targets
    char error[1024];
} DataLoader;

// ----------------------------------------------------------------------------------------------
// shard files

// Checks one shard fully: header, size, every token < vocab_size. Adds each token's count to
// counts when counts is not NULL. Returns 0, or -1 with a message in err.
inline int shard_scan(const char* path, int vocab_size, int64_t* tokens_out, int64_t* counts,
                      char* err, size_t err_size) {
    int64_t file_size;
    FILE* f = fopen_regular(path, "shard", &file_size, err, err_size);
    if (f == NULL) return -1;
    int32_t header[SHARD_HEADER_INTS];
    int rc = -1;
    if (file_size < SHARD_HEADER_BYTES) {
        snprintf(err, err_size, "shard %s is truncated: %lld bytes, the header alone is %lld", path,
                 (long long)file_size, (long long)SHARD_HEADER_BYTES);
    } else if (fread(header, sizeof(header), 1, f) != 1) {
        snprintf(err, err_size, "cannot read shard %s: %s", path,
                 ferror(f) ? strerror(errno) : "it ended before its header (did it change?)");
    } else if (header[0] != SHARD_MAGIC) {
        snprintf(err, err_size,
                 "%s is not a token shard (magic %d, expected %d); write shards with "
                 "dev/data/prepare.py",
                 path, header[0], SHARD_MAGIC);
    } else if (header[1] != SHARD_VERSION) {
        snprintf(err, err_size, "shard %s has version %d, this program reads version %d", path,
                 header[1], SHARD_VERSION);
    } else if (header[2] < 0) {
        snprintf(err, err_size, "shard %s has a negative token count %d", path, header[2]);
    } else if (file_size != SHARD_HEADER_BYTES + 2 * (int64_t)header[2]) {
        int64_t expect = SHARD_HEADER_BYTES + 2 * (int64_t)header[2];
        snprintf(err, err_size,
                 file_size < expect ? "shard %s is truncated: its header says %d tokens (%lld "
                                      "bytes), the file has %lld bytes"
                                    : "shard %s has trailing bytes: its header says %d tokens "
                                      "(%lld bytes), the file has %lld bytes",
                 path, header[2], (long long)expect, (long long)file_size);
    } else {
        rc = 0;
        // Tokens read at a time: the whole shard, up to 2^20.
        const int64_t CHUNK = header[2] < (1 << 20) ? header[2] + 1 : (1 << 20);
        uint16_t* chunk = (uint16_t*)MALLOC_CHECK(CHUNK * sizeof(uint16_t));
        for (int64_t done = 0; done < header[2] && rc == 0;) {
            int64_t n = header[2] - done < CHUNK ? header[2] - done : CHUNK;
            if (fread(chunk, sizeof(uint16_t), (size_t)n, f) != (size_t)n) {
                snprintf(err, err_size, "error reading shard %s at token %lld", path,
                         (long long)done);
                rc = -1;
                break;
            }
            for (int64_t k = 0; k < n; k++) {
                if (chunk[k] >= vocab_size) {
                    snprintf(err, err_size,
                             "shard %s: token %d at position %lld is outside the vocabulary (size "
                             "%d); was it prepared with another tokenizer?",
                             path, chunk[k], (long long)(done + k), vocab_size);
                    rc = -1;
                    break;
                }
                if (counts != NULL) counts[chunk[k]]++;
            }
            done += n;
        }
        free(chunk);
        *tokens_out = header[2];
    }
    fclose(f);
    return rc;
}

inline void shardset_free(ShardSet* s) {
    for (int i = 0; i < s->count; i++) free(s->paths[i]);
    free(s->paths);
    free(s->tokens);
    memset(s, 0, sizeof(*s));
}

// Finds the shards matching a glob pattern (sorted by name) and checks each with shard_scan.
inline int shardset_open(ShardSet* s, const char* pattern, int vocab_size, int64_t* counts,
                         char* err, size_t err_size) {
    memset(s, 0, sizeof(*s));
    glob_t g;
    int grc = glob(pattern, 0, NULL, &g);
    if (grc != 0) {
        snprintf(err, err_size, grc == GLOB_NOMATCH ? "no files match %s" : "cannot list %s",
                 pattern);
        if (grc != GLOB_NOMATCH) globfree(&g);
        return -1;
    }
    s->count = (int)g.gl_pathc;
    s->paths = (char**)MALLOC_CHECK(s->count * sizeof(char*));
    s->tokens = (int64_t*)MALLOC_CHECK(s->count * sizeof(int64_t));
    for (int i = 0; i < s->count; i++) {
        size_t n = strlen(g.gl_pathv[i]) + 1;
        s->paths[i] = (char*)MALLOC_CHECK(n);
        memcpy(s->paths[i], g.gl_pathv[i], n);
        s->tokens[i] = 0;
    }
    globfree(&g);
    for (int i = 0; i < s->count; i++) {
        if (shard_scan(s->paths[i], vocab_size, &s->tokens[i], counts, err, err_size) != 0) {
            shardset_free(s);
            return -1;
        }
    }
    return 0;
}

// ----------------------------------------------------------------------------------------------
// permutations

// splitmix64: one step of the generator; *state advances by a fixed odd constant.
inline uint64_t splitmix64(uint64_t* state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// A generator state for one permutation, mixed from the seed, the epoch and a stream number
// (the shard index, or -1 for the shard order).
inline uint64_t dataloader_stream(uint64_t seed, uint64_t epoch, int64_t stream) {
    uint64_t s = seed;
    s = splitmix64(&s) ^ epoch;
    s = splitmix64(&s) ^ (uint64_t)stream;
    splitmix64(&s);
    return s;
}

// Fisher-Yates shuffle of a[0..n) with the generator state rng (modulo bias ~n/2^64: none
// that matters).
inline void shuffle_int64(int64_t* a, int64_t n, uint64_t rng) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(splitmix64(&rng) % (uint64_t)(i + 1));
        int64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

inline int64_t dataloader_samples(const DataLoader* dl, int shard) {
    return dl->shards.tokens[shard] > 0 ? (dl->shards.tokens[shard] - 1) / dl->T : 0;
}

// Lays out this epoch's shard order.
inline void dataloader_order_shards(DataLoader* dl) {
    int64_t* order = (int64_t*)MALLOC_CHECK(dl->shards.count * sizeof(int64_t));
    for (int i = 0; i < dl->shards.count; i++) order[i] = i;
    if (dl->shuffle)
        shuffle_int64(order, dl->shards.count, dataloader_stream(dl->seed, dl->epoch, -1));
    for (int i = 0; i < dl->shards.count; i++) dl->shard_order[i] = (int)order[i];
    free(order);
    dl->order_shard = -1;
}

// Moves the position forward past shards that give no batch, into the next epoch if needed,
// so that it names a batch that exists. Needs batches_per_epoch > 0.
inline void dataloader_settle(DataLoader* dl) {
    while (dl->batch >= dl->shard_batches[dl->shard_order[dl->shard_pos]]) {
        dl->batch = 0;
        if (++dl->shard_pos == dl->shards.count) {
            dl->shard_pos = 0;
            dl->epoch++;
            dataloader_order_shards(dl);
        }
    }
}

// ----------------------------------------------------------------------------------------------
// the loader

inline void dataloader_free(DataLoader* dl) {
    if (dl->file != NULL) fclose(dl->file);
    shardset_free(&dl->shards);
    free(dl->shard_batches);
    free(dl->shard_order);
    free(dl->sample_order);
    free(dl->buffer);
    free(dl->inputs);
    free(dl->targets);
    char reason[sizeof(dl->error)];
    memcpy(reason, dl->error, sizeof(reason));
    memset(dl, 0, sizeof(*dl));
    memcpy(dl->error, reason, sizeof(reason));
}

// Rewinds to the first batch of epoch 0.
inline void dataloader_reset(DataLoader* dl) {
    dl->epoch = 0;
    dl->shard_pos = 0;
    dl->batch = 0;
    dl->micro = 0;
    dataloader_order_shards(dl);
    dataloader_settle(dl);
}

// Opens the shards matching `pattern` (a glob, e.g. "data/austen/austen_train_*.bin") for rank
// `rank` of `world`, micro-batches of B x T, `accum` of them per global batch. shuffle = 0
// keeps file order (for validation). Returns 0, or -1 with the reason in dl->error.
inline int dataloader_init(DataLoader* dl, const char* pattern, int B, int T, int rank, int world,
                           int accum, int vocab_size, int shuffle, uint64_t seed) {
    memset(dl, 0, sizeof(*dl));
    if (B < 1 || T < 1 || T == INT_MAX || world < 1 || rank < 0 || rank >= world || accum < 1 ||
        vocab_size < 1 || vocab_size > 65536) {
        snprintf(dl->error, sizeof(dl->error),
                 "dataloader: invalid arguments B=%d T=%d rank=%d world=%d accum=%d vocab=%d", B, T,
                 rank, world, accum, vocab_size);
        return -1;
    }
    if (shardset_open(&dl->shards, pattern, vocab_size, NULL, dl->error, sizeof(dl->error)) != 0)
        return -1;
    dl->B = B;
    dl->T = T;
    dl->rank = rank;
    dl->world = world;
    dl->accum = accum;
    dl->vocab_size = vocab_size;
    dl->shuffle = shuffle;
    dl->seed = seed;
    int64_t total_tokens = 0, max_samples = 0;
    dl->shard_batches = (int64_t*)MALLOC_CHECK(dl->shards.count * sizeof(int64_t));
    for (int i = 0; i < dl->shards.count; i++) {
        int64_t samples = dataloader_samples(dl, i);
        dl->shard_batches[i] = samples / ((int64_t)accum * world * B);
        dl->batches_per_epoch += dl->shard_batches[i];
        total_tokens += dl->shards.tokens[i];
        if (samples > max_samples) max_samples = samples;
    }
    if (total_tokens == 0) {
        snprintf(dl->error, sizeof(dl->error),
                 "empty split: the %d shard(s) matching %s hold no tokens", dl->shards.count,
                 pattern);
        dataloader_free(dl);
        return -1;
    }
    if (dl->batches_per_epoch == 0) {
        snprintf(dl->error, sizeof(dl->error),
                 "too little data in %s: %lld tokens in %d shard(s), but one batch needs %d "
                 "micro-batches x %d ranks x B=%d samples of T+1=%d tokens from one shard (%lld "
                 "tokens); use a smaller B, T or --grad-accum, or more data",
                 pattern, (long long)total_tokens, dl->shards.count, accum, world, B, T + 1,
                 (long long)accum * world * B * T + 1);
        dataloader_free(dl);
        return -1;
    }
    dl->shard_order = (int*)MALLOC_CHECK(dl->shards.count * sizeof(int));
    dl->sample_order = (int64_t*)MALLOC_CHECK(max_samples * sizeof(int64_t));
    dl->buffer = (uint16_t*)MALLOC_CHECK((T + 1) * sizeof(uint16_t));
    dl->inputs = (int*)MALLOC_CHECK((size_t)B * T * sizeof(int));
    dl->targets = (int*)MALLOC_CHECK((size_t)B * T * sizeof(int));
    dl->file_shard = -1;
    dataloader_reset(dl);
    return 0;
}

// Fills dl->inputs and dl->targets with this rank's part of the next global batch and moves
// on. Returns 0, or -1 with the reason in dl->error (a shard changed or failed to read).
inline int dataloader_next_batch(DataLoader* dl) {
    int shard = dl->shard_order[dl->shard_pos];
    const char* path = dl->shards.paths[shard];
    if (dl->order_shard != shard) {
        int64_t n = dataloader_samples(dl, shard);
        for (int64_t k = 0; k < n; k++) dl->sample_order[k] = k;
        if (dl->shuffle)
            shuffle_int64(dl->sample_order, n, dataloader_stream(dl->seed, dl->epoch, shard));
        dl->order_shard = shard;
    }
    if (dl->file_shard != shard) {
        if (dl->file != NULL) fclose(dl->file);
        dl->file_shard = -1;
        int64_t size;
        dl->file = fopen_regular(path, "shard", &size, dl->error, sizeof(dl->error));
        if (dl->file == NULL) return -1;
        const int64_t expect = SHARD_HEADER_BYTES + 2 * dl->shards.tokens[shard];
        if (size != expect) {
            snprintf(dl->error, sizeof(dl->error),
                     "shard %s changed since the start: it has %lld bytes, it had %lld", path,
                     (long long)size, (long long)expect);
            return -1;
        }
        dl->file_shard = shard;
    }
    // This rank's B samples: positions ((batch * accum + micro) * world + rank) * B + b of the
    // sample order.
    int64_t first = ((dl->batch * dl->accum + dl->micro) * dl->world + dl->rank) * dl->B;
    for (int b = 0; b < dl->B; b++) {
        int64_t sample = dl->sample_order[first + b];
        int64_t offset = SHARD_HEADER_BYTES + sample * dl->T * (int64_t)sizeof(uint16_t);
        if (fseek(dl->file, (long)offset, SEEK_SET) != 0 ||
            fread(dl->buffer, sizeof(uint16_t), dl->T + 1, dl->file) != (size_t)dl->T + 1) {
            snprintf(
                dl->error, sizeof(dl->error),
                "error reading %d tokens at byte %lld of shard %s (did it change since the start?)",
                dl->T + 1, (long long)offset, path);
            return -1;
        }
        for (int t = 0; t <= dl->T; t++) {
            if (dl->buffer[t] >= dl->vocab_size) {
                snprintf(dl->error, sizeof(dl->error),
                         "shard %s: token %d is outside the vocabulary (size %d) (did it change "
                         "since the start?)",
                         path, dl->buffer[t], dl->vocab_size);
                return -1;
            }
        }
        for (int t = 0; t < dl->T; t++) {
            dl->inputs[b * dl->T + t] = dl->buffer[t];
            dl->targets[b * dl->T + t] = dl->buffer[t + 1];
        }
    }
    if (++dl->micro == dl->accum) {
        dl->micro = 0;
        dl->batch++;
        dataloader_settle(dl);
    }
    return 0;
}

inline DataLoaderState dataloader_state(const DataLoader* dl) {
    DataLoaderState s;
    memset(&s, 0, sizeof(s));
    s.seed = dl->seed;
    s.epoch = dl->epoch;
    s.shard_pos = (uint64_t)dl->shard_pos;
    s.batch = (uint64_t)dl->batch;
    s.micro = (uint64_t)dl->micro;
    s.num_shards = dl->shards.count;
    for (int i = 0; i < dl->shards.count; i++) s.total_tokens += dl->shards.tokens[i];
    s.global_batch = (int64_t)dl->accum * dl->world * dl->B;
    s.T = dl->T;
    s.shuffle = dl->shuffle;
    return s;
}

// Continues from a saved state, on any grid with the same global batch. Returns 0, or -1 with
// the reason in dl->error when the state belongs to other data, another global batch or sample
// length, is not at the start of a global batch, or names no batch.
inline int dataloader_restore(DataLoader* dl, const DataLoaderState* s) {
    DataLoaderState now = dataloader_state(dl);
    if (s->seed != now.seed || s->num_shards != now.num_shards ||
        s->total_tokens != now.total_tokens || s->global_batch != now.global_batch ||
        s->T != now.T || s->shuffle != now.shuffle || s->micro != 0) {
        snprintf(dl->error, sizeof(dl->error),
                 "saved data position does not fit this run: it was for seed %llu, %lld shards "
                 "with %lld tokens, global batch %lld x T=%lld, shuffle=%lld, micro-batch %llu; "
                 "this run has seed %llu, %lld shards with %lld tokens, global batch %lld x "
                 "T=%lld, shuffle=%lld",
                 (unsigned long long)s->seed, (long long)s->num_shards, (long long)s->total_tokens,
                 (long long)s->global_batch, (long long)s->T, (long long)s->shuffle,
                 (unsigned long long)s->micro, (unsigned long long)now.seed,
                 (long long)now.num_shards, (long long)now.total_tokens,
                 (long long)now.global_batch, (long long)now.T, (long long)now.shuffle);
        return -1;
    }
    dl->epoch = s->epoch;
    dataloader_order_shards(dl);
    if (s->shard_pos >= (uint64_t)dl->shards.count ||
        s->batch >= (uint64_t)dl->shard_batches[dl->shard_order[s->shard_pos]]) {
        snprintf(
            dl->error, sizeof(dl->error),
            "saved data position (epoch %llu, shard %llu, batch %llu) names no batch of this data",
            (unsigned long long)s->epoch, (unsigned long long)s->shard_pos,
            (unsigned long long)s->batch);
        dataloader_reset(dl);
        return -1;
    }
    dl->shard_pos = (int)s->shard_pos;
    dl->batch = (int64_t)s->batch;
    return 0;
}

// ----------------------------------------------------------------------------------------------
// unigram baseline

// The unigram loss described at the top of this file. Returns 0 and sets *loss, or -1 with
// the reason in err.
inline int unigram_loss(const char* train_pattern, const char* val_pattern, int vocab_size,
                        double* loss, char* err, size_t err_size) {
    int64_t* train_counts = (int64_t*)MALLOC_CHECK(vocab_size * sizeof(int64_t));
    int64_t* val_counts = (int64_t*)MALLOC_CHECK(vocab_size * sizeof(int64_t));
    memset(train_counts, 0, vocab_size * sizeof(int64_t));
    memset(val_counts, 0, vocab_size * sizeof(int64_t));
    ShardSet train, val;
    int rc = shardset_open(&train, train_pattern, vocab_size, train_counts, err, err_size);
    if (rc == 0) {
        rc = shardset_open(&val, val_pattern, vocab_size, val_counts, err, err_size);
        shardset_free(&train);
    }
    if (rc == 0) {
        shardset_free(&val);
        int64_t n_train = 0, n_val = 0;
        for (int v = 0; v < vocab_size; v++) {
            n_train += train_counts[v];
            n_val += val_counts[v];
        }
        if (n_train == 0 || n_val == 0) {
            snprintf(err, err_size, "empty split: the shards matching %s hold no tokens",
                     n_train == 0 ? train_pattern : val_pattern);
            rc = -1;
        } else {
            double sum = 0.0;
            for (int v = 0; v < vocab_size; v++) {
                if (val_counts[v] > 0)
                    sum += (double)val_counts[v] *
                           log((double)(train_counts[v] + 1) / (double)(n_train + vocab_size));
            }
            *loss = -sum / (double)n_val;
        }
    }
    free(train_counts);
    free(val_counts);
    return rc;
}
