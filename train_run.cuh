// train_run.cuh: the run around the model of train_gpt.cu, which includes it at its end: the
// training data (batches from token shards, validation), text generation, the command line (one
// flag table), the --sample mode, the memory plan and fitting a batch to the device, the process
// grid, the log, the training loop and main(); checkpoints are train_checkpoint.cuh's. Everything
// here builds on the model's structs and functions (GPT, gpt_build, gpt_forward_backward,
// gpt_update, ...); nothing of the model's arithmetic is here.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <csignal>
#include <numeric>
#include <string>

#include "llmc/dataloader.h"  // token shards -> shuffled (B,T) batches, validation split, unigram baseline
#include "llmc/flags.h"   // the command line as one table: parsing, bounds, --help, comparing runs
#include "llmc/logger.h"  // the JSONL training log
#include "llmc/stability.h"  // skipped steps, spikes and rewinds, --inject-fault
#include "llmc/tokenizer.h"  // token ids <-> text: decodes samples, encodes prompts
#include "train_checkpoint.cuh"  // checkpoints of the model: save, load on any grid, find
#include "train_weights.cuh"     // pretrained weights: load_pretrained (HF, llm.c), export_hf
#ifdef __CUCC__
#include <cucc/blas.h>  // cucc_blas_description: the BLAS under the CPU cuBLASLt, for the log
#endif

// =============================================================================================
// Training data: B x T batches from the token shards of a folder written by dev/data/prepare.py
// (llmc/dataloader.h checks every shard up front, shuffles with the seed and keeps a validation
// split), or uniform random tokens when there is no --data (benchmarks).

struct TrainData {
    bool shards;         // false: random tokens
    int rank, world;     // this rank's part of each global batch of world x B sequences
    DataLoader train;    // DIR/*_train*.bin, shuffled
    DataLoader val;      // DIR/*_val*.bin, in file order
    uint64_t token_rng;  // random tokens: the generator's state (rng_next)
    double unigram;      // the baseline: val loss of the train split's token frequencies
};

inline void shard_glob(char* out, size_t len, const char* dir, const char* split) {
    snprintf(out, len, "%s/*_%s*.bin", dir, split);
}

// Opens the two splits of `dir` (or random tokens when dir is empty) for batches of B x T
// tokens below `vocab`, and computes the unigram baseline. Bad data ends the program with the
// loader's message.
inline void train_data_open(TrainData* d, const char* dir, int vocab, int B, int T, int A,
                            uint64_t seed, int rank, int world) {
    memset(d, 0, sizeof(*d));
    d->rank = rank;
    d->world = world;
    d->token_rng = seed ^ 0x5851f42d4c957f2dull;
    d->shards = dir[0] != '\0';
    if (!d->shards) return;
    char train_glob[600], val_glob[600];
    shard_glob(train_glob, sizeof(train_glob), dir, "train");
    shard_glob(val_glob, sizeof(val_glob), dir, "val");
    if (dataloader_init(&d->train, train_glob, B, T, rank, world, A, vocab, 1, seed) != 0)
        fatal("%s", d->train.error);
    if (dataloader_init(&d->val, val_glob, B, T, rank, world, 1, vocab, 0, seed) != 0)
        fatal("%s", d->val.error);
    char err[1024];
    if (unigram_loss(train_glob, val_glob, vocab, &d->unigram, err, sizeof(err)) != 0)
        fatal("%s", err);
}

inline void train_data_free(TrainData* d) {
    if (!d->shards) return;
    dataloader_free(&d->train);
    dataloader_free(&d->val);
}

// Fills A micro-batches of this rank's inputs and targets, host (A,B,T): micro-batch a is the
// rank's B sequences (a * world + rank) * B ... of the step's global batch of A x world x B,
// the loader's, or random tokens, of which every rank draws the whole global batch in order and
// keeps its rows. Either way the global batch does not depend on how the grid splits it.
inline void train_data_next(TrainData* d, int* inputs, int* targets, int A, int B, int T,
                            int vocab) {
    const size_t N = (size_t)B * T;
    for (int micro = 0; micro < A; micro++) {
        int* in = inputs + micro * N;
        int* tg = targets + micro * N;
        if (d->shards) {
            if (dataloader_next_batch(&d->train) != 0) fatal("%s", d->train.error);
            memcpy(in, d->train.inputs, N * sizeof(int));
            memcpy(tg, d->train.targets, N * sizeof(int));
            continue;
        }
        // each row is T + 1 tokens: the inputs, and the targets shifted by one
        for (int row = 0; row < d->world * B; row++) {
            const int b = row - d->rank * B;  // the row's place in this rank's batch
            for (int t = 0; t <= T; t++) {
                int token = (int)(rng_next(&d->token_rng) % (uint64_t)vocab);
                if (b < 0 || b >= B) continue;
                if (t < T) in[b * T + t] = token;
                if (t > 0) tg[b * T + t - 1] = token;
            }
        }
    }
}

// Mean loss over the first n batches of the validation split (all of them when n is 0 or more
// than it holds). The loader rewinds first, so every evaluation sees the same tokens.
inline double evaluate(GPT* m, DataLoader* val, int n) {
    if (n <= 0 || n > val->batches_per_epoch) n = (int)val->batches_per_epoch;
    dataloader_reset(val);
    double sum = 0.0;
    std::vector<int> inputs((size_t)m->B * m->T), targets(inputs.size());  // this rank's rows
    for (int i = 0; i < n; i++) {
        if (dataloader_next_batch(val) != 0) fatal("%s", val->error);
        cp_local_tokens(&m->cp, val->inputs, inputs.data(), m->B, val->T);
        cp_local_tokens(&m->cp, val->targets, targets.data(), m->B, val->T);
        sum += gpt_forward(m, inputs.data(), targets.data(), 0.0f);
    }
    return sum / n;
}

// --dump-logits: the logits of the first validation micro-batch (this rank's B sequences of T
// tokens, as evaluate() reads them first; under data parallelism rank 0's), written by rank 0 to
// `path`, little-endian: a header of 8 int32 {DUMP_LOGITS_MAGIC, DUMP_LOGITS_VERSION, B, T, V, 0,
// 0, 0}, the input tokens (B,T) int32, the logits (B,T,V) float32: the forward pass's floatX
// logits widened (the bf16 build's are bf16 values), the padding columns V..Vp-1 left out. Under
// tensor parallelism each rank holds Vp/tp columns of every row: they are all-gathered. Every
// rank calls it (the forward pass's collectives).
constexpr int DUMP_LOGITS_MAGIC = 20261202, DUMP_LOGITS_VERSION = 1;
inline void dump_logits(GPT* m, DataLoader* val, int rank, const char* path) {
    const int B = m->B, T = m->T, V = m->config.vocab, Vl = m->shape.vocab;
    const int tp = m->tensor_parallel.size;
    const size_t N = (size_t)B * T;
    dataloader_reset(val);
    if (dataloader_next_batch(val) != 0) fatal("%s", val->error);
    gpt_forward(m, val->inputs, val->targets, 0.0f);
    std::vector<floatX> parts(N * Vl * tp);  // rank-major: each rank's (N, Vl)
    const floatX* logits = m->acts.logits;
    floatX* gathered = nullptr;
    if (tp > 1) {
        CUDA_CHECK(cudaMalloc(&gathered, parts.size() * sizeof(floatX)));
        comm_allgather(m->tensor_parallel.group, m->acts.logits, gathered, N * Vl, m->stream);
        comm_sync(m->tensor_parallel.group, m->stream, "the gather of the dumped logits (NCCL)");
        logits = gathered;
    }
    CUDA_CHECK(
        cudaMemcpy(parts.data(), logits, parts.size() * sizeof(floatX), cudaMemcpyDeviceToHost));
    if (gathered) CUDA_CHECK(cudaFree(gathered));
    if (rank != 0) return;
    std::vector<float> out(N * V);
    for (size_t row = 0; row < N; row++)
        for (int v = 0; v < V; v++)
            out[row * V + v] = (float)parts[(v / Vl) * N * Vl + row * Vl + v % Vl];
    const int header[8] = {DUMP_LOGITS_MAGIC, DUMP_LOGITS_VERSION, B, T, V, 0, 0, 0};
    FILE* f = FOPEN_CHECK(path, "wb");
    const bool written = fwrite(header, sizeof(int), 8, f) == 8 &&
                         fwrite(val->inputs, sizeof(int), N, f) == N &&
                         fwrite(out.data(), sizeof(float), out.size(), f) == out.size();
    if (fclose(f) != 0 || !written) fatal("--dump-logits: cannot write %s", path);
    printf("logits of the first validation batch (B %d x T %d x V %d) written to %s\n", B, T, V,
           path);
}

// =============================================================================================
// Text generation: the forward pass rerun over the growing context (one sequence, its last T
// tokens at most) for every new token; plenty fast at the sizes trained here on a CPU.

// Picks the next token from the logits of the real vocabulary (V values: the padding columns
// never get here). A draw from softmax(logits / temperature) restricted to the top_k largest
// logits (0: all V; ties go to the lower id), with one uniform number from rng; temperature 0
// takes the most likely token. order: scratch room for V ints.
inline int sample_token(const float* logits, int V, double temperature, int top_k, uint64_t* rng,
                        int* order) {
    const int k = temperature == 0.0 ? 1 : (top_k > 0 && top_k < V) ? top_k : V;
    for (int i = 0; i < V; i++) order[i] = i;
    std::partial_sort(order, order + k, order + V, [logits](int a, int b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    if (k == 1) return order[0];
    // weights exp((logit - max) / temperature), max = logits[order[0]]: the largest is 1
    double total = 0.0;
    for (int i = 0; i < k; i++) total += exp((logits[order[i]] - logits[order[0]]) / temperature);
    const double u = rng_uniform(rng) * total;
    double cumulative = 0.0;
    for (int i = 0; i < k; i++) {
        cumulative += exp((logits[order[i]] - logits[order[0]]) / temperature);
        if (u < cumulative) return order[i];
    }
    return order[k - 1];  // u within rounding of total
}

// Appends n_new tokens to tokens[0..n), n >= 1 (tokens has room for n + n_new), each drawn
// from the prediction after the last m->T tokens before it. Under tensor parallelism every rank
// of the group calls it (the forward pass is theirs together); the logits of the last position
// are all-gathered from the ranks' vocabulary slices, and every rank draws the same token.
// Under pipeline parallelism every rank of the pipeline group calls it too: each forward pass
// runs through the pipeline (pipe_forward: each stage on its rank, only the (window, C)
// activation crossing a stage boundary), and the last stage broadcasts the last position's
// logits to the group. Through the pipeline rather than gathered to one stage: no rank ever
// holds more than its stages' parameters, the memory plan holds, and the sample is the same
// computation as one process's (the same kernels on the same rows).
// Sequence parallelism cuts the rows into tp parts: its forward passes run on the fewest whole
// sequences of T tokens that divide (a multiple of tp rows), the context at the start of the
// first, the rest filled with its last token (causal attention: no position before them sees
// them).
// Context parallelism generates through the ring, as training runs: every rank of the cp group
// calls it, the padded sequences of T tokens (as under sequence parallelism) laid out as
// training lays them (cp_local_tokens: each rank its two chunks), the forward pass running the
// ring attention, and the rank holding the context's last position (cp_rank_of) broadcasts its
// logits to the group. Through the ring rather than on one rank of the group: one rank would
// need activations for all T rows, C times what the memory plan gives it, and under ZeRO-3 the
// other ranks of the shard group would still have to join every parameter gather; through the
// ring every rank runs the collectives a forward pass runs, within the plan.
inline void gpt_generate(GPT* m, int* tokens, int n, int n_new, double temperature, int top_k,
                         uint64_t* rng) {
    const int V = m->config.vocab, Vl = m->shape.vocab, tp = m->tensor_parallel.size;
    const ContextParallel* cp = &m->cp;
    const int T = m->T * cp->size;  // the whole sequence (m->T: the rows a rank holds)
    floatX* row = (floatX*)MALLOC_CHECK((size_t)Vl * tp * sizeof(floatX));
    float* logits = (float*)MALLOC_CHECK(V * sizeof(float));
    int* order = (int*)MALLOC_CHECK(V * sizeof(int));
    floatX* gathered = nullptr;
    if (tp > 1) CUDA_CHECK(cudaMalloc(&gathered, (size_t)Vl * tp * sizeof(floatX)));
    // sequence parallelism: the fewest sequences of T tokens whose rows divide by tp
    const int sequences = m->tensor_parallel.sequence ? tp / std::gcd(m->T, tp) : 1;
    const bool padding = m->tensor_parallel.sequence || cp->size > 1;
    std::vector<int> padded(padding ? (size_t)sequences * T : 0);
    std::vector<int> local(cp->size > 1 ? (size_t)sequences * m->T : 0);  // this rank's rows
    for (int len = n; len < n + n_new; len++) {
        const int window = len < T ? len : T;
        const int* context = tokens + len - window;
        // the targets only feed the unused loss: the context itself serves as valid ids
        if (padding) {
            std::fill(padded.begin(), padded.end(), context[window - 1]);
            std::copy(context, context + window, padded.begin());
            const int* rows = padded.data();
            if (cp->size > 1) {
                cp_local_tokens(cp, padded.data(), local.data(), sequences, T);
                rows = local.data();
            }
            gpt_forward_shape(m, rows, rows, 0.0f, sequences, m->T);
        } else {
            gpt_forward_shape(m, context, context, 0.0f, 1, window);
        }
        int held;  // the last position's row, on cp rank `holder`
        const int holder = cp_rank_of(cp, window - 1, &held);
        const floatX* last = m->acts.logits + (size_t)held * Vl;
        if (m->acts.head) {  // (the last pipeline stage's rank, or every rank)
            if (tp > 1) {
                comm_allgather(m->tensor_parallel.group, last, gathered, Vl, m->stream);
                comm_sync(m->tensor_parallel.group, m->stream,
                          "the gather of a sample's logits (NCCL)");
                last = gathered;
            }
            CUDA_CHECK(cudaMemcpy(row, last, V * sizeof(floatX), cudaMemcpyDeviceToHost));
        }
        const PipeConfig* pc = &m->pipe.config;
        if (pc->pp > 1)
            comm_broadcast(m->pipe.group, row, V * sizeof(floatX),
                           pipe_rank_of(pc, pipe_stage_count(pc) - 1));
        if (cp->size > 1) comm_broadcast(cp->group, row, V * sizeof(floatX), holder);
        for (int v = 0; v < V; v++) logits[v] = (float)row[v];
        tokens[len] = sample_token(logits, V, temperature, top_k, rng, order);
    }
    if (gathered) CUDA_CHECK(cudaFree(gathered));
    free(row);
    free(logits);
    free(order);
}

// The bytes that tokens[0..n) decode to, in a malloc'ed buffer of *len bytes (no terminator).
// Every id is below the tokenizer's vocabulary: the model's V is the tokenizer's.
inline char* decode_tokens(const Tokenizer* tok, const int* tokens, int n, size_t* len) {
    size_t total = 0, piece = 0;
    for (int i = 0; i < n; i++) {
        if (tokenizer_decode(tok, tokens[i], &piece) == nullptr)
            fatal("token %d is outside the tokenizer", tokens[i]);
        total += piece;
    }
    char* text = (char*)MALLOC_CHECK(total + 1);
    *len = 0;
    for (int i = 0; i < n; i++) {
        const uint8_t* bytes = tokenizer_decode(tok, tokens[i], &piece);
        memcpy(text + *len, bytes, piece);
        *len += piece;
    }
    return text;
}

// The end-of-text token (documents start with it, so a sample starts a fresh document), then
// the prompt encoded by the tokenizer, then n_new generated tokens; prints the text (without
// the end-of-text token) and returns it for the log, malloc'ed, *len bytes.
inline char* generate_text(GPT* m, const Tokenizer* tok, const char* prompt, int n_new,
                           double temperature, int top_k, uint64_t* rng, size_t* len) {
    const size_t prompt_len = strlen(prompt);
    int* tokens = (int*)MALLOC_CHECK((1 + prompt_len + n_new) * sizeof(int));
    tokens[0] = tok->eot;
    const int n = 1 + (int)tokenizer_encode(tok, prompt, prompt_len, tokens + 1);
    gpt_generate(m, tokens, n, n_new, temperature, top_k, rng);
    char* text = decode_tokens(tok, tokens + 1, n - 1 + n_new, len);
    fwrite(text, 1, *len, stdout);
    printf("\n");
    fflush(stdout);
    free(tokens);
    return text;
}

// =============================================================================================
// Command line: one table of flags (llmc/flags.h parses, bounds-checks and prints it).

struct TrainConfig {
    GPTConfig model;
    int batch, seq, grad_accum, steps, warmup;
    long long seed;
    double lr, min_lr_frac, decay_frac, weight_decay, grad_clip, peak_flops;
    char schedule[16];
    char optimizer[16];  // a row of OPTIMIZERS: "adamw", "muon" or "lion"
    char recompute[16];  // RECOMPUTE_NAMES
    double muon_lr;      // 0: --lr (muon_peak_lr); kept as given, so a resumed run that changes
                         // --lr alone differs from its checkpoint in --lr alone
    double muon_momentum;
    int muon_nesterov, muon_ns_steps;
    char muon_adjust[24];
    double lion_beta1, lion_beta2;
    char fp8[16];      // FP8_RECIPE_NAMES (llmc/fp8_linear.cuh)
    char fp8_grad[8];  // auto, e4m3 or e5m2
    int fp8_lm_head, fp8_amax_history, fp8_margin;
    int fp8_allgather;  // ZeRO-3 gathers the FP8 weights in FP8 (llmc/zero_fp8.cuh)
    char data[512];  // a prepare.py output folder; empty: random tokens
    char tokenizer[512];
    int val_every, val_steps;
    int sample_every, sample_len, top_k;
    double temperature;
    char prompt[1024];
    char checkpoint_dir[512];
    int checkpoint_every, keep_checkpoints;
    char resume[512];
    char log[512];
    char sample[512];  // sample mode: the checkpoint (file or folder)
    char init_from[512];  // pretrained weights (train_weights.cuh), or --export-hf's checkpoint
    char export_hf[512];  // export mode: the Hugging Face folder to write
    char dump_logits[512];  // the first validation micro-batch's logits into this file, then end
    double comm_timeout, bucket_mb;
    int zero;                       // ZeRO stage
    int tp;                         // tensor-parallel group size
    int sequence_parallel;          // 1: --sequence-parallel
    int pp;                         // pipeline-parallel stages (ranks of a pipeline group)
    int cp;                         // context-parallel ranks sharing each sequence
    char pp_schedule[16];           // PIPE_SCHEDULES (llmc/pipeline.h)
    int pp_virtual;                 // model chunks per pipeline rank
    int pp_print_schedule;          // print the pipeline's schedule and exit
    int pp_cost_ms;                 // a test's cost model: each pipeline action lasts this long
    int pp_cost_transfer_ms;        // and each of its exchanges is queued this long after
    int comm_stats;                 // log one step's collective traffic
    int plan;                       // print the memory plan and exit
    int plan_ranks;                 // data-parallel ranks the plan is for (0: the launch's)
    long long global_batch_tokens;  // 0: --grad-accum as given
    long long device_memory;        // bytes; 0: cudaMemGetInfo's free bytes
    char rendezvous[512];           // the meeting folder of a launch without MPI
    int max_skips;                  // non-finite steps in a row a run rides through
    int spike_window;               // llmc/stability.h's trailing window of steps
    double spike_zscore;            // a spike's standard deviations above its mean (0: off)
    int spike_rewind;               // spikes within the window that rewind the run (0: never)
    int spike_skip_batches;         // batches a rewind skips (FLAG_WORD: all since the checkpoint)
    int max_rewinds;                // rewinds a run may take before it stops
    char inject_fault[256];         // llmc/stability.h's STEP:KIND[:RANK],... (tests only)
    int print_monitors;             // the step's line shows the monitors (the log has them)
    int log_attn_logits;            // log the largest attention logit of every layer
    int log_layer_norms;            // log every layer's gradient norm
    int log_update_ratio;           // log ||dW|| / ||W|| per tensor group
    char arch[8];                   // ModelArch: gpt2 or llama
    char rope_scaling[8];           // RopeScaling: none or llama3
    int mlp_multiple_of;            // Llama's SwiGLU width rule
    int tie_embeddings;             // Llama: 1 the lm head is wte
    int help;
};

#define FIELD(f) offsetof(TrainConfig, f), 0
#define STRING_FIELD(f) offsetof(TrainConfig, f), sizeof(TrainConfig::f)
#define NON_NEGATIVE 0, FLAG_INT_MAX
#define POSITIVE 1, FLAG_INT_MAX
static const Flag FLAGS[] = {
    {"--data", FLAG_STRING, STRING_FIELD(data), "", 0, 0, nullptr, FLAG_IDENTITY,
     "folder written by dev/data/prepare.py: trains on its *_train*.bin shards, validates on "
     "*_val*.bin; empty: random tokens"},
    {"--tokenizer", FLAG_STRING, STRING_FIELD(tokenizer), "", 0, 0, nullptr, FLAG_FREE,
     "tokenizer file for samples and prompts (empty: tokenizer.bin in --data)"},
    {"--vocab", FLAG_INT, FIELD(model.vocab), "0", 0, MAX_VOCAB, nullptr, FLAG_IDENTITY,
     "vocabulary size V, padded to a multiple of 128 inside (0: the tokenizer's, else 50257)"},
    {"--context", FLAG_INT, FIELD(model.context), "0", 0, MAX_SEQ, nullptr, FLAG_IDENTITY,
     "model context maxT, rows of wpe (0: same as --seq)"},
    {"--layers", FLAG_INT, FIELD(model.layers), "12", 1, MAX_LAYERS, nullptr, FLAG_IDENTITY,
     "transformer blocks L"},
    {"--heads", FLAG_INT, FIELD(model.heads), "12", 1, MAX_HEADS, nullptr, FLAG_IDENTITY,
     "attention heads NH; --embd/--heads must be 32, 64 or 128"},
    {"--embd", FLAG_INT, FIELD(model.channels), "768", 1, MAX_CHANNELS, nullptr, FLAG_IDENTITY,
     "model width C"},
    {"--seq", FLAG_INT, FIELD(seq), "1024", 1, MAX_SEQ, nullptr, FLAG_IDENTITY,
     "sequence length T (<= --context)"},
    {"--batch", FLAG_INT, FIELD(batch), "4", 1, MAX_BATCH, "auto", FLAG_PER_RANK,
     "micro-batch: sequences per forward/backward pass of each data-parallel replica (B; the "
     "ranks of a tensor-parallel group share them); auto: the largest whose memory plan fits "
     "--device-memory"},
    {"--grad-accum", FLAG_INT, FIELD(grad_accum), "1", 1, 1 << 20, nullptr, FLAG_PER_RANK,
     "micro-batches accumulated per optimizer step (A)"},
    {"--global-batch-tokens", FLAG_INT64, FIELD(global_batch_tokens), "0", 0, 9.2e18, nullptr,
     FLAG_PER_RANK,
     "sets --grad-accum so that --batch x --seq x accumulation x data-parallel ranks is this "
     "many tokens (0: off; it must come out whole)"},
    {"--device-memory", FLAG_BYTES, FIELD(device_memory), "0", 0, FLAG_BYTES_MAX, nullptr,
     FLAG_FREE,
     "bytes of device memory --batch auto and --recompute auto plan for, a whole number with an "
     "optional unit k, M, G or T (powers of 1024: 80G is 80 x 2^30 bytes) (0: what the device "
     "has free)"},
    {"--steps", FLAG_INT, FIELD(steps), "20", POSITIVE, nullptr, FLAG_FREE, "optimizer steps K"},
    {"--lr", FLAG_DOUBLE, FIELD(lr), "6e-4", 0, INFINITY, nullptr, FLAG_IDENTITY,
     "peak learning rate"},
    {"--warmup", FLAG_INT, FIELD(warmup), "0", NON_NEGATIVE, nullptr, FLAG_IDENTITY,
     "linear warmup steps W (0: none)"},
    {"--schedule", FLAG_STRING, STRING_FIELD(schedule), "cosine", 0, 0,
     "cosine|wsd|linear|constant", FLAG_IDENTITY, "learning rate after warmup"},
    {"--min-lr-frac", FLAG_DOUBLE, FIELD(min_lr_frac), "0.1", 0, 1, nullptr, FLAG_IDENTITY,
     "final learning rate as a fraction of --lr (cosine, wsd, linear)"},
    {"--decay-frac", FLAG_DOUBLE, FIELD(decay_frac), "0.2", 0, 1, nullptr, FLAG_IDENTITY,
     "wsd: fraction of the steps spent decaying"},
    {"--weight-decay", FLAG_DOUBLE, FIELD(weight_decay), "0.1", 0, INFINITY, nullptr, FLAG_IDENTITY,
     "decoupled weight decay on 2-D tensors (AdamW's, Muon's and Lion's, with the unadjusted "
     "lr)"},
    {"--grad-clip", FLAG_DOUBLE, FIELD(grad_clip), "1", 0, INFINITY, nullptr, FLAG_IDENTITY,
     "clip the global gradient norm to this (0: off)"},
    {"--optimizer", FLAG_STRING, STRING_FIELD(optimizer), "adamw", 0, 0, "adamw|muon|lion",
     FLAG_IDENTITY,
     "adamw: AdamW for every tensor (betas 0.9/0.95, eps 1e-8); muon: Muon for the hidden "
     "matrices (attn.qkv.w as Q, K, V, attn.proj.w, mlp.fc.w, mlp.proj.w; llama: attn.q.w, "
     "attn.k.w, attn.v.w, attn.proj.w, mlp.gate.w, mlp.up.w, mlp.proj.w), AdamW for the rest; "
     "lion: Lion for every tensor, at --lr (take it 3-10x smaller than AdamW's)"},
    {"--muon-lr", FLAG_DOUBLE, FIELD(muon_lr), "0", 0, INFINITY, nullptr, FLAG_IDENTITY,
     "Muon's peak learning rate, scaled by the schedule as --lr is (0: --lr)"},
    {"--muon-momentum", FLAG_DOUBLE, FIELD(muon_momentum), "0.95", 0, 1, nullptr, FLAG_IDENTITY,
     "Muon's momentum mu (the buffer is an average: buf += (1-mu)(g - buf))"},
    {"--muon-nesterov", FLAG_INT, FIELD(muon_nesterov), "1", 0, 1, nullptr, FLAG_IDENTITY,
     "1: Nesterov momentum (orthogonalize g + mu (buf - g)); 0: orthogonalize buf"},
    {"--muon-ns-steps", FLAG_INT, FIELD(muon_ns_steps), "5", 1, 99, nullptr, FLAG_IDENTITY,
     "Newton-Schulz iterations (quintic, coefficients 3.4445, -4.7750, 2.0315)"},
    {"--muon-adjust", FLAG_STRING, STRING_FIELD(muon_adjust), "match_rms_adamw", 0, 0,
     "original|match_rms_adamw", FLAG_IDENTITY,
     "Muon's lr per matrix of A output x B input features: original sqrt(max(1, A/B)); "
     "match_rms_adamw 0.2 sqrt(max(A, B)), so AdamW's lr and weight decay carry over"},
    {"--lion-beta1", FLAG_DOUBLE, FIELD(lion_beta1), "0.9", 0, 1, nullptr, FLAG_IDENTITY,
     "Lion's beta1: the update is sign(beta1 m + (1-beta1) g)"},
    {"--lion-beta2", FLAG_DOUBLE, FIELD(lion_beta2), "0.99", 0, 1, nullptr, FLAG_IDENTITY,
     "Lion's beta2: the momentum m = beta2 m + (1-beta2) g"},
    {"--arch", FLAG_STRING, STRING_FIELD(arch), "gpt2", 0, 0, "gpt2|llama", FLAG_IDENTITY,
     "the block: gpt2 (LayerNorm, learned positions, GELU, biases, lm head tied to wte) or llama "
     "(RMSNorm, RoPE, SwiGLU, grouped-query attention, no biases, no wpe)"},
    {"--kv-heads", FLAG_INT, FIELD(model.llama.kv_heads), "0", NON_NEGATIVE, nullptr, FLAG_IDENTITY,
     "llama: key/value heads KVH, dividing --heads, each serving heads/KVH query heads (1: "
     "multi-query; 0: --heads)"},
    {"--mlp-hidden", FLAG_INT, FIELD(model.llama.mlp_hidden), "0", NON_NEGATIVE, nullptr,
     FLAG_IDENTITY,
     "llama: SwiGLU's hidden units (0: int(2/3 x 4C) rounded up to --mlp-multiple-of)"},
    {"--mlp-multiple-of", FLAG_INT, FIELD(mlp_multiple_of), "256", POSITIVE, nullptr, FLAG_IDENTITY,
     "llama: --mlp-hidden 0 rounds up to a multiple of this"},
    {"--norm-eps", FLAG_DOUBLE, FIELD(model.llama.norm_eps), "1e-5", 0, 1, nullptr, FLAG_IDENTITY,
     "llama: RMSNorm's eps"},
    {"--rope-theta", FLAG_DOUBLE, FIELD(model.llama.rope_theta), "10000", 0, INFINITY, nullptr,
     FLAG_IDENTITY, "llama: RoPE's base (Llama 3: 500000)"},
    {"--rope-scaling", FLAG_STRING, STRING_FIELD(rope_scaling), "none", 0, 0, "none|llama3",
     FLAG_IDENTITY,
     "llama: RoPE's frequency scaling (llama3: transformers' rope_type llama3, with the four "
     "--rope-* parameters below)"},
    {"--rope-factor", FLAG_DOUBLE, FIELD(model.llama.rope_factor), "8", 0, INFINITY, nullptr,
     FLAG_IDENTITY, "--rope-scaling llama3: factor"},
    {"--rope-low-freq-factor", FLAG_DOUBLE, FIELD(model.llama.rope_low_freq_factor), "1", 0,
     INFINITY, nullptr, FLAG_IDENTITY, "--rope-scaling llama3: low_freq_factor"},
    {"--rope-high-freq-factor", FLAG_DOUBLE, FIELD(model.llama.rope_high_freq_factor), "4", 0,
     INFINITY, nullptr, FLAG_IDENTITY, "--rope-scaling llama3: high_freq_factor"},
    {"--rope-original-context", FLAG_INT, FIELD(model.llama.rope_original_context), "8192",
     POSITIVE, nullptr, FLAG_IDENTITY, "--rope-scaling llama3: original_max_position_embeddings"},
    {"--tie-embeddings", FLAG_INT, FIELD(tie_embeddings), "1", 0, 1, nullptr, FLAG_IDENTITY,
     "llama: 1 the lm head is wte; 0 a tensor of its own (gpt2 is always tied)"},
    {"--qk-norm", FLAG_SWITCH, FIELD(model.qk_norm), "off", 0, 0, nullptr, FLAG_IDENTITY,
     "RMSNorm of each head's q and k (eps 1e-6) with learned per-dimension scales, before the "
     "softmax scale"},
    {"--z-loss", FLAG_DOUBLE, FIELD(model.z_loss), "0", 0, INFINITY, nullptr, FLAG_IDENTITY,
     "z-loss coefficient: adds COEF * (log Z)^2 per position to the objective (0: off; 1e-4 "
     "is the usual value); train_loss stays the cross-entropy"},
    {"--fp8", FLAG_STRING, STRING_FIELD(fp8), "off", 0, 0, "off|tensor|delayed|rowwise|block|mx",
     FLAG_IDENTITY,
     "FP8 matmuls (bf16 build) for each block's four linear layers (--arch llama: [q | k | v], "
     "the output projection, [gate | up] and down): tensor (one scale per "
     "tensor, current), delayed (per tensor, from an amax history), rowwise (one scale per row), "
     "block (1x128 tiles, 128x128 weight blocks: DeepSeek-V3), mx (MXFP8 32-element blocks, "
     "Blackwell); fp32 accumulation, bf16 outputs"},
    {"--fp8-grad", FLAG_STRING, STRING_FIELD(fp8_grad), "auto", 0, 0, "auto|e4m3|e5m2",
     FLAG_IDENTITY,
     "FP8 format of the gradients (auto: e5m2 for tensor and delayed, e4m3 for rowwise, block "
     "and mx)"},
    {"--fp8-lm-head", FLAG_SWITCH, FIELD(fp8_lm_head), "off", 0, 0, nullptr, FLAG_IDENTITY,
     "the lm head (logits = lnf @ wte^T) in FP8 too"},
    {"--fp8-amax-history", FLAG_INT, FIELD(fp8_amax_history), "16", 1, 1 << 16, nullptr,
     FLAG_IDENTITY, "--fp8 delayed: the steps of amax history a scale comes from"},
    {"--fp8-margin", FLAG_INT, FIELD(fp8_margin), "0", 0, 64, nullptr, FLAG_IDENTITY,
     "--fp8 delayed: scales divided by 2^margin (headroom for amaxes that grow)"},
    {"--fp8-allgather", FLAG_SWITCH, FIELD(fp8_allgather), "off", 0, 0, nullptr, FLAG_FREE,
     "--zero 3 with --fp8 tensor or delayed: each rank quantizes its shard of the blocks' four "
     "FP8 weights and the gathers move FP8 bytes (1 per element, not 2), the per-tensor scale "
     "agreed by a max of the shards' amaxes (tensor) or known from the history (delayed); the "
     "same bits as the bf16 gather. Not for rowwise, block or mx (their W^T scales differ from "
     "W's, or their blocks straddle shards)"},
    {"--seed", FLAG_INT64, FIELD(seed), "1337", 0, 9.2e18, nullptr, FLAG_IDENTITY,
     "seed of initialization, data order, random tokens, stochastic rounding and sampling"},
    {"--val-every", FLAG_INT, FIELD(val_every), "100", NON_NEGATIVE, nullptr, FLAG_FREE,
     "validation loss at step 0, every N steps and at the end (0: never)"},
    {"--val-steps", FLAG_INT, FIELD(val_steps), "20", NON_NEGATIVE, nullptr, FLAG_FREE,
     "validation batches per evaluation (0: the whole split)"},
    {"--sample-every", FLAG_INT, FIELD(sample_every), "0", NON_NEGATIVE, nullptr, FLAG_FREE,
     "print a text sample every N steps and at the end (0: at the end only)"},
    {"--sample-len", FLAG_INT, FIELD(sample_len), "200", 0, MAX_SAMPLE_LEN, nullptr, FLAG_FREE,
     "tokens per sample (0: no samples)"},
    {"--temperature", FLAG_DOUBLE, FIELD(temperature), "0.8", 0, INFINITY, nullptr, FLAG_FREE,
     "sampling temperature (0: always the most likely token)"},
    {"--top-k", FLAG_INT, FIELD(top_k), "40", NON_NEGATIVE, nullptr, FLAG_FREE,
     "sample from the k most likely tokens (0: from all)"},
    {"--prompt", FLAG_STRING, STRING_FIELD(prompt), "", 0, 0, nullptr, FLAG_FREE,
     "text the samples continue"},
    {"--checkpoint-dir", FLAG_STRING, STRING_FIELD(checkpoint_dir), "", 0, 0, nullptr, FLAG_FREE,
     "folder for checkpoints, locked for the run (empty: none are written)"},
    {"--checkpoint-every", FLAG_INT, FIELD(checkpoint_every), "0", NON_NEGATIVE, nullptr, FLAG_FREE,
     "write a checkpoint every N steps and at the end (0: at the end only)"},
    {"--keep-checkpoints", FLAG_INT, FIELD(keep_checkpoints), "3", NON_NEGATIVE, nullptr, FLAG_FREE,
     "keep the newest N checkpoints (0: all)"},
    {"--resume", FLAG_STRING, STRING_FIELD(resume), "", 0, 0, nullptr, FLAG_FREE,
     "continue from a checkpoint file, or 'latest' in --checkpoint-dir (a fresh start when there "
     "is none); the checkpoint must be of this run (see README)"},
    {"--log", FLAG_STRING, STRING_FIELD(log), "", 0, 0, nullptr, FLAG_FREE,
     "JSONL log of the run, read by scripts/plot.py (empty: none)"},
    {"--sample", FLAG_STRING, STRING_FIELD(sample), "", 0, 0, nullptr, FLAG_FREE,
     "sample mode: load this checkpoint (a file, or a folder's newest; the model's shape comes "
     "from it), continue --prompt by --sample-len tokens, print, exit"},
    {"--init-from", FLAG_STRING, STRING_FIELD(init_from), "", 0, 0, nullptr, FLAG_IDENTITY,
     "start from pretrained GPT-2 weights: a Hugging Face folder (config.json, model.safetensors) "
     "or an llm.c model file (gpt2_124M.bin, fp32 or bf16); the model's shape comes from it (a "
     "shape flag set to another value than its default must agree); with --export-hf: the "
     "model to export (also a checkpoint file or folder)"},
    {"--export-hf", FLAG_STRING, STRING_FIELD(export_hf), "", 0, 0, nullptr, FLAG_FREE,
     "export mode: write --init-from's model as a Hugging Face GPT-2 folder (config.json, "
     "model.safetensors; with GPT-2's BPE tokenizer, from --tokenizer, --data or else the "
     "checkpoint's run's --data, also its tokenizer files) and exit"},
    {"--dump-logits", FLAG_STRING, STRING_FIELD(dump_logits), "", 0, 0, nullptr, FLAG_FREE,
     "after loading or initializing the model (and resuming), write the logits of the first "
     "validation micro-batch (rank 0's B sequences of --seq tokens) to this file and end the run "
     "before any step: header int32 {20261202, 1, B, T, V, 0, 0, 0}, the tokens int32 (B,T), "
     "the logits float32 (B,T,V), little-endian; needs --data; not under --pp or --cp"},
    {"--peak-flops", FLAG_DOUBLE, FIELD(peak_flops), "989e12", 1, INFINITY, nullptr, FLAG_FREE,
     "device peak FLOP/s for MFU (H100/H200 dense bf16: 989e12)"},
    {"--comm-timeout", FLAG_DOUBLE, FIELD(comm_timeout), "300", 0.1, 1e6, nullptr, FLAG_FREE,
     "seconds a rank waits in a collective before it ends the job (longer than any rank "
     "works alone: checkpoint writes, samples)"},
    {"--zero", FLAG_INT, FIELD(zero), "0", 0, ZERO_MAX_STAGE, nullptr, FLAG_FREE,
     "ZeRO stage over the data-parallel ranks: 0 every rank holds everything, 1 the optimizer "
     "state and master weights are sharded, 2 the gradients too, 3 the parameters too (each "
     "block gathered before it runs)"},
    {"--tp", FLAG_INT, FIELD(tp), "1", 1, 1 << 16, nullptr, FLAG_FREE,
     "tensor-parallel group size: groups of consecutive ranks on one node split every matrix "
     "(attention by heads, the MLP by its hidden units, the vocabulary); must divide the ranks, "
     "the heads, the width and the padded vocabulary"},
    {"--sequence-parallel", FLAG_SWITCH, FIELD(sequence_parallel), "off", 0, 0, nullptr, FLAG_FREE,
     "with --tp > 1: each rank of a group keeps 1/tp of the token rows of the residual stream "
     "and LayerNorms (all-gather / reduce-scatter in place of all-reduce); --batch x --seq must "
     "divide by --tp"},
    {"--pp", FLAG_INT, FIELD(pp), "1", 1, 1 << 16, nullptr, FLAG_FREE,
     "pipeline-parallel stages: the blocks are cut into --pp x --pp-virtual contiguous stages "
     "run by a pipeline group of --pp ranks, the --grad-accum micro-batches of a step flowing "
     "through them (llmc/pipeline.h); must divide the ranks, with --pp x --pp-virtual dividing "
     "the layers. Composes with --tp (and --sequence-parallel), data parallelism at every "
     "--zero stage, --fp8, recompute and text samples (generated through the pipeline)"},
    {"--cp", FLAG_INT, FIELD(cp), "1", 1, 1 << 16, nullptr, FLAG_FREE,
     "context-parallel group size: each sequence is cut into 2 x --cp chunks, rank i of a group "
     "holding chunks i and 2cp-1-i (the causal load balance), and attention passes keys and "
     "values around the group's ring (llmc/context_parallel.cuh); outside --tp, must divide the "
     "ranks, --seq a multiple of 2 x --cp. Text samples are generated through the ring. Not "
     "built with --pp > 1"},
    {"--pp-schedule", FLAG_STRING, STRING_FIELD(pp_schedule), "1f1b", 0, 0,
     "gpipe|1f1b|interleaved", FLAG_FREE,
     "with --pp > 1: the pipeline's schedule: gpipe (all forwards, then all backwards), 1f1b "
     "(one forward, one backward in turn: at most --pp micro-batches in flight), interleaved "
     "(1F1B over --pp-virtual chunks per rank: a smaller bubble; --pp must divide --grad-accum)"},
    {"--pp-virtual", FLAG_INT, FIELD(pp_virtual), "1", 1, 1 << 10, nullptr, FLAG_FREE,
     "with --pp-schedule interleaved: model chunks (virtual stages) per pipeline rank, at least "
     "2"},
    {"--pp-cost-ms", FLAG_INT, FIELD(pp_cost_ms), "0", 0, 1 << 16, nullptr, FLAG_FREE,
     "with --pp > 1, for tests: a cost model of known forward and backward times, each forward "
     "action of the pipeline lasting this many ms (the host sleeps what its work leaves), each "
     "backward twice as long (--comm-stats then measures a bubble comparable with the formula)"},
    {"--pp-cost-transfer-ms", FLAG_INT, FIELD(pp_cost_transfer_ms), "0", 0, 1 << 16, nullptr,
     FLAG_FREE,
     "with --pp-cost-ms, for tests: a transfer time in the cost model, each exchange of "
     "activations and gradients queued this many ms after the time step it ends (the host goes "
     "on with its next action meanwhile: an action waits only for its own input)"},
    {"--pp-print-schedule", FLAG_SWITCH, FIELD(pp_print_schedule), "off", 0, 0, nullptr, FLAG_FREE,
     "print the pipeline schedule of --pp, --pp-schedule, --pp-virtual, --grad-accum and "
     "--layers (one row per rank, one column per action) and exit"},
    {"--recompute", FLAG_STRING, STRING_FIELD(recompute), "none", 0, 0, "none|selective|full|auto",
     FLAG_FREE,
     "activation recompute: selective keeps no LayerNorm or GELU outputs (recomputed in the "
     "backward pass), full keeps only each block's output (its forward rerun); the same bits; "
     "auto: the least recompute whose memory plan fits --device-memory"},
    {"--plan", FLAG_SWITCH, FIELD(plan), "off", 0, 0, nullptr, FLAG_FREE,
     "print each rank's device memory plan for this configuration (nothing is allocated) and "
     "exit"},
    {"--plan-ranks", FLAG_INT, FIELD(plan_ranks), "0", 0, 1 << 20, nullptr, FLAG_FREE,
     "--plan: the ranks to plan for, --tp per tensor-parallel group (0: the ranks of this "
     "launch)"},
    {"--comm-stats", FLAG_SWITCH, FIELD(comm_stats), "off", 0, 0, nullptr, FLAG_FREE,
     "print and log the bytes this rank's collectives send in the first step (ring convention)"},
    {"--bucket-mb", FLAG_DOUBLE, FIELD(bucket_mb), "25", 1e-3, 1e6, nullptr, FLAG_FREE,
     "data parallel: gradients are reduced in buckets of at least this many MiB, each as soon "
     "as the backward pass has finished it (ZeRO-3: a bucket per block)"},
    {"--rendezvous", FLAG_STRING, STRING_FIELD(rendezvous), "", 0, 0, nullptr, FLAG_FREE,
     "folder where ranks started without MPI (torchrun-style RANK/WORLD_SIZE/LOCAL_RANK or "
     "srun's SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID) meet; shared by every node"},
    {"--max-skips", FLAG_INT, FIELD(max_skips), "5", 0, FLAG_INT_MAX, nullptr, FLAG_FREE,
     "a step whose loss or gradient norm is not finite is skipped (no update, on every rank); "
     "this many in a row end the run (0: the first ends it)"},
    {"--spike-window", FLAG_INT, FIELD(spike_window), "100", 2, 1 << 20, nullptr, FLAG_IDENTITY,
     "spike detection: the applied steps whose losses and gradient norms a step is measured "
     "against (detection starts once it is full)"},
    {"--spike-zscore", FLAG_DOUBLE, FIELD(spike_zscore), "6", 0, 1e6, nullptr, FLAG_IDENTITY,
     "a step whose loss or gradient norm lies more than this many standard deviations above the "
     "window's mean is a spike: its update is skipped (0: no detection)"},
    {"--spike-rewind", FLAG_INT, FIELD(spike_rewind), "0", NON_NEGATIVE, nullptr, FLAG_FREE,
     "K: when K spikes fall within the last --spike-window steps, go back to the newest "
     "checkpoint before the first of them and skip data (0: never; needs --checkpoint-dir and "
     "--checkpoint-every)"},
    {"--spike-skip-batches", FLAG_INT, FIELD(spike_skip_batches), "all", NON_NEGATIVE, "all",
     FLAG_FREE,
     "global batches a rewind skips after the checkpoint it goes back to (all: every one "
     "consumed since, so training resumes on the data after the spikes)"},
    {"--max-rewinds", FLAG_INT, FIELD(max_rewinds), "3", POSITIVE, nullptr, FLAG_FREE,
     "rewinds a run may take; the next one stops it (skipping data has not helped)"},
    {"--inject-fault", FLAG_STRING, STRING_FIELD(inject_fault), "", 0, 0, nullptr, FLAG_FREE,
     "for tests and demonstrations only: a comma-separated list of STEP:KIND[:RANK], KIND "
     "nan-grad, loss-scale=X (micro-batch 0's loss gradient times NaN or X), bad-batch (its "
     "tokens one repeated token), skip (the update skipped on purpose, every rank) or kill "
     "(SIGKILL as the step begins); RANK of the job, default 0 (under --tp the data faults hit "
     "its whole tensor-parallel group); each the first time the run reaches its step"},
    {"--print-monitors", FLAG_SWITCH, FIELD(print_monitors), "off", 0, 0, nullptr, FLAG_FREE,
     "the step's line shows the monitors the log always has (the largest attention logit, "
     "log Z's mean and max) and those of --log-layer-norms and --log-update-ratio"},
    {"--log-attn-logits", FLAG_SWITCH, FIELD(log_attn_logits), "off", 0, 0, nullptr, FLAG_FREE,
     "log the largest attention logit q.k/sqrt(HS) of every layer (attn_logit_max_layers), not "
     "only the largest of all"},
    {"--log-layer-norms", FLAG_SWITCH, FIELD(log_layer_norms), "off", 0, 0, nullptr, FLAG_FREE,
     "log the gradient norm (before clipping) of every block, of the embeddings (wte, wpe) and "
     "of the final LayerNorm (grad_norm_layers)"},
    {"--log-update-ratio", FLAG_SWITCH, FIELD(log_update_ratio), "off", 0, 0, nullptr, FLAG_FREE,
     "log ||W_after - W_before|| / ||W_after|| of the fp32 weights per tensor group: embeddings, "
     "attention and MLP matrices, norms and biases (update_ratio; none on a skipped step); keeps a "
     "copy of this rank's weights (the plan's monitors line)"},
    {"--help", FLAG_SWITCH, FIELD(help), "off", 0, 0, nullptr, FLAG_FREE,
     "print this help and exit"},
};
#undef FIELD
#undef STRING_FIELD
#undef NON_NEGATIVE
#undef POSITIVE
constexpr int NUM_FLAGS = sizeof(FLAGS) / sizeof(FLAGS[0]);

// Every flag at its default (the table's column), the other bytes zero.
inline void train_config_defaults(TrainConfig* tc) {
    char msg[256];
    if (const char* err = flags_defaults(FLAGS, NUM_FLAGS, tc, sizeof(*tc), msg, sizeof(msg)))
        fatal("a default of the flag table: %s", err);
}

// ---------------------------------------------------------------------------------------------
// The run's identity in a checkpoint. The section "run_config" holds the value of every flag of
// role FLAG_IDENTITY (the model, the data, the schedule, the optimizer and its hyperparameters,
// the seed) as "--name\0value\0" pairs (flag_format's text), and the global batch in sequences
// as "global-batch\0N\0". --resume compares it with the run being started: those flags and the
// global batch (ranks x --batch x --grad-accum) must be equal, while the grid, the per-rank
// split of the batch and the FLAG_FREE flags (--steps, logging, sampling, checkpoint frequency)
// may change, and leave the checkpoint's bytes as they are. A flag the checkpoint does not
// record has its default.

inline int64_t global_batch_sequences(const TrainConfig* tc, int ranks) {
    return (int64_t)ranks * tc->batch * tc->grad_accum;
}

inline std::vector<char> run_config_section(const TrainConfig* tc, int ranks) {
    std::vector<char> out;
    auto put = [&out](const char* text) { out.insert(out.end(), text, text + strlen(text) + 1); };
    char value[1100];
    for (int i = 0; i < NUM_FLAGS; i++) {
        if (FLAGS[i].role != FLAG_IDENTITY) continue;
        put(FLAGS[i].name);
        put(flag_format(&FLAGS[i], tc, value, sizeof(value)));
    }
    put("global-batch");
    snprintf(value, sizeof(value), "%lld", (long long)global_batch_sequences(tc, ranks));
    put(value);
    return out;
}

// Refuses (fatal) a checkpoint whose recorded run is not the run tc describes on `ranks` ranks,
// naming every difference.
inline void check_run_config(CheckpointReader* r, const TrainConfig* tc, int ranks) {
    std::vector<uint8_t> raw;
    if (!manifest_section(r, "run_config", &raw))
        fatal(
            "checkpoint %s records no run configuration (written by an older train_gpt), so it "
            "cannot be checked against this run; start a fresh run",
            r->path);
    const size_t size = raw.size();
    std::vector<char> bytes(raw.begin(), raw.end());
    bytes.push_back('\0');
    TrainConfig stored;
    train_config_defaults(&stored);
    long long stored_batch = -1;
    char msg[512];
    for (size_t pos = 0; pos < size;) {
        const char* key = bytes.data() + pos;
        const char* value = key + strlen(key) + 1;
        pos = (size_t)(value - bytes.data()) + strlen(value) + 1;
        if (pos > size) fatal("checkpoint %s: its run configuration is malformed", r->path);
        if (strcmp(key, "global-batch") == 0) {
            stored_batch = atoll(value);
            continue;
        }
        const Flag* flag = flag_find(FLAGS, NUM_FLAGS, key, strlen(key));
        if (flag == nullptr)
            fatal(
                "checkpoint %s records flag '%s', which this train_gpt does not know (written "
                "by another version?)",
                r->path, key);
        if (const char* err = flag_set(flag, &stored, value, msg, sizeof(msg)))
            fatal("checkpoint %s: its run configuration is malformed: %s", r->path, err);
    }
    char diff[4096] = "";
    int n = flags_differences(FLAGS, NUM_FLAGS, &stored, tc, 1u << FLAG_IDENTITY,
                              "in the checkpoint", "in this run", diff, sizeof(diff));
    const long long batch = global_batch_sequences(tc, ranks);
    if (stored_batch != batch) {
        n++;
        const size_t used = strlen(diff);
        snprintf(diff + used, sizeof(diff) - used,
                 "\n  global batch (ranks x --batch x --grad-accum): %lld sequences in the "
                 "checkpoint, %lld in this run (%d x %d x %d)",
                 stored_batch, batch, ranks, tc->batch, tc->grad_accum);
    }
    if (n > 0)
        fatal(
            "checkpoint %s is of another run (%d difference%s):%s\n--resume continues the same "
            "run: its model, data, global batch, schedule and optimizer stay as they were; "
            "--steps and the logging, sampling and checkpoint flags may change (see README)",
            r->path, n, n == 1 ? "" : "s", diff);
}

inline void print_usage(FILE* f, const char* prog) {
    TrainConfig defaults;
    train_config_defaults(&defaults);
    fprintf(f,
            "usage: %s [--flag value]...   (also --flag=value; a repeated flag takes its last "
            "value)\n"
            "Trains a GPT-2-style model (%s build) and prints one line per step;\n"
            "with --sample CHECKPOINT, generates text from a trained model instead.\n"
            "Under mpirun -np N, N ranks (one per GPU) each take --batch sequences of every "
            "batch.\n\nflags:\n",
            prog, PRECISION_NAME);
    flags_print_usage(f, FLAGS, NUM_FLAGS, &defaults);
}

inline const char* llama_refusal(const TrainConfig* tc, char* msg, size_t len);

// Completes the model's Llama settings from the flags (--arch, --kv-heads 0, --mlp-hidden 0,
// --tie-embeddings, --rope-scaling), and refuses what --arch llama does not combine with.
inline const char* llama_config_resolve(TrainConfig* tc, char* msg, size_t len) {
    LlamaConfig* l = &tc->model.llama;
    l->arch = strcmp(tc->arch, "llama") == 0 ? ARCH_LLAMA : ARCH_GPT2;
    l->rope_scaling =
        strcmp(tc->rope_scaling, "llama3") == 0 ? ROPE_SCALING_LLAMA3 : ROPE_SCALING_NONE;
    if (l->arch == ARCH_GPT2) {
        const bool llama_flags = l->kv_heads != 0 || l->mlp_hidden != 0 || !tc->tie_embeddings ||
                                 l->rope_scaling != ROPE_SCALING_NONE;
        *l = LlamaConfig{};  // GPT-2's block: zero
        if (!llama_flags) return nullptr;
        snprintf(msg, len,
                 "--kv-heads, --mlp-hidden, --tie-embeddings 0 and --rope-scaling are for --arch "
                 "llama");
        return msg;
    }
    if (l->kv_heads == 0) l->kv_heads = tc->model.heads;
    if (l->mlp_hidden == 0)
        l->mlp_hidden = llama_mlp_hidden(tc->model.channels, tc->mlp_multiple_of);
    l->untied_head = !tc->tie_embeddings;
    return llama_refusal(tc, msg, len);
}

// What a Llama model (tc->model.llama, resolved) is not built with, or nullptr.
inline const char* llama_refusal(const TrainConfig* tc, char* msg, size_t len) {
    const LlamaConfig* l = &tc->model.llama;
    if (l->arch != ARCH_LLAMA) return nullptr;
    if (tc->tp > 1 && l->kv_heads % tc->tp != 0 && tc->tp % l->kv_heads != 0)
        snprintf(msg, len,
                 "--arch llama under --tp %d needs --kv-heads (%d) to be a multiple of it (the "
                 "kv heads split across the tensor-parallel ranks) or a divisor of it (each kv "
                 "head replicated on --tp / --kv-heads ranks)",
                 tc->tp, l->kv_heads);
    else if (tc->tp > 1 && l->mlp_hidden % tc->tp != 0)
        snprintf(msg, len, "--arch llama under --tp %d needs --mlp-hidden (%d) divisible by it",
                 tc->tp, l->mlp_hidden);
    else return nullptr;
    return msg;
}

// Checks a parsed configuration, in every mode: each flag within its bounds (the table), then
// what involves several flags. Completes the derived fields (context 0 -> seq, padded vocab;
// vocab already resolved). Returns an error message or nullptr.
inline const char* train_config_check(TrainConfig* tc, char* msg, size_t len) {
    if (const char* err = flags_check(FLAGS, NUM_FLAGS, tc, msg, len)) return err;
    // values inside the table's ranges that leave nothing to train
    if (tc->model.vocab == 1) {
        snprintf(msg, len,
                 "--vocab must be 0 (the tokenizer's) or at least 2 (got 1): with one token the "
                 "loss and every gradient are 0");
        return msg;
    }
    if (tc->muon_momentum >= 1.0) {
        snprintf(msg, len,
                 "--muon-momentum must be in [0, 1) (got %g): at 1 Muon's momentum buffer never "
                 "leaves zero, so Muon never moves its matrices",
                 tc->muon_momentum);
        return msg;
    }
    FaultPlan faults;
    if (const char* err = fault_parse(tc->inject_fault, &faults, msg, len)) return err;
    if (tc->model.context == 0) tc->model.context = tc->seq;
    if (const char* err = llama_config_resolve(tc, msg, len)) return err;
    tc->model.padded_vocab = padded_vocab_of(tc->model.vocab);
    const int recipe = fp8_recipe_of(tc->fp8);  // the flag table admits only the names
    tc->model.fp8 = Fp8Config{recipe,
                              strcmp(tc->fp8_grad, "auto") == 0 ? fp8_default_grad_e5m2(recipe)
                                                                : strcmp(tc->fp8_grad, "e5m2") == 0,
                              tc->fp8_lm_head, tc->fp8_amax_history, tc->fp8_margin};
    tc->model.fp8.allgather = tc->fp8_allgather;
    if (tc->fp8_allgather)
        if (const char* err = fp8_allgather_error(recipe, tc->zero, tc->tp, msg, len)) return err;
    // --batch auto is chosen later (fit_batch), within the limits one sequence must meet
    const int B = tc->batch == FLAG_WORD ? 1 : tc->batch;
    if (const char* err = gpt_config_error(&tc->model, B, tc->seq, msg, len)) return err;
    if (strcmp(tc->resume, "latest") == 0 && tc->checkpoint_dir[0] == '\0')
        snprintf(msg, len, "--resume latest needs --checkpoint-dir");
    else if (tc->spike_rewind > 0 &&
             (!tc->checkpoint_dir[0] || tc->checkpoint_every == 0 || tc->spike_zscore == 0.0))
        snprintf(msg, len,
                 "--spike-rewind %d goes back to checkpoints taken before the spikes: it needs "
                 "--checkpoint-dir, --checkpoint-every and spike detection (--spike-zscore > 0)",
                 tc->spike_rewind);
    else if (tc->sample[0] && (tc->resume[0] || tc->checkpoint_dir[0] || tc->log[0]))
        snprintf(msg, len,
                 "--sample only generates text: it takes no --resume, --checkpoint-dir "
                 "or --log");
    else if (tc->sample[0] && tc->init_from[0])
        snprintf(msg, len,
                 "--sample loads its weights itself: give it the Hugging Face folder or llm.c "
                 "file (--sample %s), without --init-from",
                 tc->init_from);
    else if (tc->export_hf[0] && !tc->init_from[0])
        snprintf(msg, len, "--export-hf needs --init-from, the model to export");
    else if (tc->export_hf[0] &&
             (tc->sample[0] || tc->resume[0] || tc->checkpoint_dir[0] || tc->log[0]))
        snprintf(msg, len,
                 "--export-hf only writes the folder: it takes no --sample, --resume, "
                 "--checkpoint-dir or --log");
    else if (tc->init_from[0] && tc->model.qk_norm)
        snprintf(msg, len, "--init-from loads GPT-2, which has no QK-norm: leave out --qk-norm");
    else if (tc->dump_logits[0] && (tc->sample[0] || tc->export_hf[0] || !tc->data[0]))
        snprintf(msg, len,
                 "--dump-logits runs a validation batch of a training run: it needs --data and "
                 "takes no --sample or --export-hf");
    else if (tc->dump_logits[0] && (tc->pp > 1 || tc->cp > 1))
        snprintf(msg, len,
                 "--dump-logits is not built with --pp or --cp (the logits of a micro-batch lie "
                 "on the last pipeline stage, its positions on the context-parallel ranks): dump "
                 "them from a run without them");
    else return nullptr;
    return msg;
}

inline int recompute_from_name(const char* name) {
    for (int p = 0; p < NUM_RECOMPUTE; p++)
        if (strcmp(name, RECOMPUTE_NAMES[p]) == 0) return p;
    return RECOMPUTE_NONE;  // the flag table admits only the names above
}

// Muon's peak learning rate: --muon-lr, or --lr when it is 0.
inline double muon_peak_lr(const TrainConfig* tc) {
    return tc->muon_lr > 0.0 ? tc->muon_lr : tc->lr;
}

// The monitors a configuration asks for (the ones always logged need nothing).
inline MonitorConfig monitor_config_of(const TrainConfig* tc) {
    return MonitorConfig{tc->log_layer_norms != 0, tc->log_update_ratio != 0};
}

// The optimizer settings of a checked configuration.
inline OptimizerConfig optimizer_config_of(const TrainConfig* tc) {
    OptimizerConfig o;
    o.kind = OPT_ADAMW;
    for (int k = 0; k < NUM_OPTIMIZERS; k++)
        if (strcmp(tc->optimizer, OPTIMIZERS[k].name) == 0) o.kind = k;
    o.weight_decay = tc->weight_decay;
    o.beta1 = 0.9;
    o.beta2 = 0.95;
    o.eps = 1e-8;
    o.muon_momentum = tc->muon_momentum;
    o.muon_nesterov = tc->muon_nesterov;
    o.muon_ns_steps = tc->muon_ns_steps;
    o.muon_adjust = strcmp(tc->muon_adjust, "original") == 0 ? MUON_ADJUST_ORIGINAL
                                                             : MUON_ADJUST_MATCH_RMS_ADAMW;
    o.lion_beta1 = tc->lion_beta1;
    o.lion_beta2 = tc->lion_beta2;
    return o;
}

// Loads the tokenizer of --tokenizer, or else of --data (DIR/tokenizer.bin). Returns false when
// neither flag is given.
inline bool load_tokenizer(const TrainConfig* tc, Tokenizer* tok) {
    char path[600];
    if (tc->tokenizer[0]) snprintf(path, sizeof(path), "%s", tc->tokenizer);
    else if (tc->data[0]) snprintf(path, sizeof(path), "%s/tokenizer.bin", tc->data);
    else return false;
    if (tokenizer_load(tok, path) != 0) fatal("%s", tok->error);
    return true;
}

// =============================================================================================
// Sample mode: the model's shape comes from the checkpoint.

// =============================================================================================
// The memory plan (llmc/memplan.h): the model built by gpt_build without allocating, whose
// ledger is what a run of this configuration allocates on each rank, printed next to the
// seeds' formulas.

// Tensor parallelism's accounting of one rank: the elements of its parameter table in tensors
// the group cuts (1/tp of the whole model's each) and in replicated ones (whole on every rank),
// and of those the ranges it owns under ZeRO; the bytes of its parameters, gradients, master
// weights and optimizer state in each (the tensors' elements: without the layout's alignment
// gaps and ZeRO's slice padding, which the allocated buffers add); and the bytes of the
// activations that sequence parallelism cuts (1/tp of the rows) next to the rest.
enum TpPart { TP_PART_CUT, TP_PART_REPLICATED, NUM_TP_PARTS };
struct TpAccount {
    size_t elements[NUM_TP_PARTS];                  // of the table
    size_t owned[NUM_TP_PARTS];                     // of the owned ranges
    size_t bytes[MEM_OPTIMIZER + 1][NUM_TP_PARTS];  // params, grads, master, optimizer
    size_t seq_activation_bytes, other_activation_bytes;
};

inline TpAccount tp_account(const GPT* m) {
    TpAccount t = {};
    const int stage = m->dp.stage;
    auto part_of = [m](int tensor) {
        const TpShape* shape = &m->layout.tensors[tensor].tp_shape;  // (or a kv head's copies)
        return shape->split == TP_REPLICATED || shape->replicas > 1 ? TP_PART_REPLICATED
                                                                    : TP_PART_CUT;
    };
    for (int i = 0; i < m->layout.count; i++) {
        const size_t n = m->layout.tensors[i].numel;
        t.elements[part_of(i)] += n;
        if (stage < 3) t.bytes[MEM_PARAMS][part_of(i)] += n * sizeof(floatX);
        if (stage < 2) t.bytes[MEM_GRADS][part_of(i)] += n * sizeof(floatX);
    }
    for (int i = 0; i < m->dp.owned_count; i++) {
        const OwnedRange* r = &m->dp.owned[i];
        const int part = part_of(r->tensor);
        t.owned[part] += r->n;
        if (stage == 3) t.bytes[MEM_PARAMS][part] += r->n * sizeof(floatX);
        if (stage >= 2) t.bytes[MEM_GRADS][part] += r->n * sizeof(floatX);  // the reduced shard
        if (m->master) t.bytes[MEM_MASTER][part] += r->n * sizeof(float);
        const OptimizerInfo* o = &OPTIMIZERS[m->layout.tensors[r->tensor].optimizer];
        for (int b = o->first_state; b < o->first_state + o->state_count; b++)
            t.bytes[MEM_OPTIMIZER][part] += r->n * STATE_BUFFERS[b].elem_bytes;
    }
    t.seq_activation_bytes = m->acts.seq_bytes;
    t.other_activation_bytes = m->activation_bytes - m->acts.seq_bytes;
    return t;
}

// The ledger of the model this configuration builds on this rank of grid `dims`.
inline DeviceLedger plan_model(const TrainConfig* tc, const OptimizerConfig* opt,
                               const ParallelDims* dims) {
    GPT planned;
    gpt_build(&planned, &tc->model, opt, tc->batch, tc->seq / tc->cp, (uint64_t)tc->seed, *dims,
              recompute_from_name(tc->recompute), true, monitor_config_of(tc));
    const DeviceLedger ledger = planned.memory;
    gpt_free(&planned);
    return ledger;
}

// Bytes of the activations one block of model m keeps of its own under `policy` (the first
// block also holds the buffers the others share), from the activation table.
inline size_t block_activation_bytes(const GPT* m, int B, int T, int policy) {
    size_t bytes = 0;
    for (int i = 0; i < NUM_BLOCK_ACTIVATIONS; i++) {
        const ActivationInfo* info = &BLOCK_ACTIVATIONS[i];
        if (!activation_present(info, &m->config) || policy > info->kept_until) continue;
        const size_t rows =
            activation_rows(info, (size_t)B * T, &m->shape, m->tensor_parallel.sequence);
        bytes += round_up(rows * activation_width(info, &m->shape), TENSOR_ALIGN) *
                 (info->is_float ? sizeof(float) : sizeof(floatX));
    }
    return bytes;
}

// Prints the plan of `planned` (built plan-only) of rank `rank` among `ranks`, each line next
// to its formula (Psi parameters, AdamW's mixed precision: 2 + 2 + 4 + 8 bytes each in the
// bf16 build, 4 + 4 + 8 in fp32).
inline void print_plan(const GPT* planned, const TrainConfig* tc, int rank, int ranks) {
    const GPTConfig* c = &tc->model;
    const DeviceLedger* plan = &planned->memory;
    const int stage = planned->dp.stage;
    // under tensor parallelism the ZeRO formulas hold for this rank's part of the model: 1/tp
    // of each cut tensor and the replicated ones whole; under pipeline parallelism its stages'
    const TpAccount tpa = tp_account(planned);
    const bool tp_cut = planned->tensor_parallel.size > 1, staged = planned->pipe.config.pp > 1;
    const double psi = tp_cut || staged
                           ? (double)(tpa.elements[TP_PART_CUT] + tpa.elements[TP_PART_REPLICATED])
                           : (double)count_parameters(&planned->layout, c);
    const int policy = recompute_from_name(tc->recompute);
    // s: the positions of a sequence this rank holds (--seq / --cp under context parallelism)
    const double s = planned->T, b = tc->batch, h = c->channels, a = c->heads;
    const double N = planned->dp.group->size;
    const double GB = 1e9;
    // per parameter: bytes of each kind, and the first ZeRO stage that shards it
    const double per_param[4] = {(double)sizeof(floatX), (double)sizeof(floatX),
                                 FLOATX_IS_FP32 ? 0.0 : 4.0, 8.0};
    const int sharded_from[4] = {3, 2, 1, 1};
    printf(
        "memory plan of rank %d of %d (ZeRO-%d over %d data-parallel ranks, tp %d%s%s, recompute "
        "%s, B %d x T %d, %s), Psi = %.0f%s\n",
        rank, ranks, stage, planned->dp.group->size, planned->tensor_parallel.size,
        planned->tensor_parallel.sequence ? " sequence parallel" : "",
        planned->cp.size > 1 ? ", context parallel (T: this rank's positions)" : "", tc->recompute,
        tc->batch, planned->T, PRECISION_NAME, psi,
        tp_cut   ? " (this rank's tensor-parallel part)"
        : staged ? " (this rank's pipeline stages)"
                 : "");
    printf("  %-15s %16s %12s | %s\n", "", "bytes", "GB", "the seeds' formula (GB)");
    for (int k = MEM_PARAMS; k <= MEM_OPTIMIZER; k++)
        printf("  %-15s %16zu %12.6g | %.0f Psi%s = %.6g\n", MEM_KIND_NAMES[k], plan->bytes[k],
               plan->bytes[k] / GB, per_param[k], stage >= sharded_from[k] ? " / N" : "",
               per_param[k] * psi / (stage >= sharded_from[k] ? N : 1.0) / GB);
    const size_t state = plan->bytes[MEM_PARAMS] + plan->bytes[MEM_GRADS] +
                         plan->bytes[MEM_MASTER] + plan->bytes[MEM_OPTIMIZER];
    printf(
        "  %-15s %16zu %12.6g | %.6g (AdamW; differences: the layout's alignment gaps and wte's "
        "padding rows, ZeRO slices' padding, Muon's 12 bytes per parameter)\n",
        "model state", state, state / GB, seed_model_state_bytes(psi, N, stage) / GB);
    const size_t block = block_activation_bytes(planned, tc->batch, planned->T, policy);
    const double seed_block =
        seed_layer_activation_bytes(s, b, h, a, true, policy == RECOMPUTE_FULL);
    printf(
        "  %-15s %16zu %12.6g | a block keeps %zu bytes; %s per layer = %.6g, x L = %.6g (fused "
        "attention stores no 5 a s^2 b scores: %.6g more per layer unfused; ours: %s, plus the "
        "logits B T Vp, the backward pass's scratch and the buffers blocks share)\n",
        "activations", plan->bytes[MEM_ACTIVATIONS], plan->bytes[MEM_ACTIVATIONS] / GB, block,
        policy == RECOMPUTE_FULL ? "2 s b h" : "34 s b h", seed_block / GB,
        seed_block * c->layers / GB, 5 * a * s * s * b / GB,
        policy == RECOMPUTE_FULL   ? "2 s b h (the block's output)"
        : policy == RECOMPUTE_NONE ? "32 s b h (16 h values of 2 bytes per token) + statistics"
                                   : "20 s b h + statistics");
    if (planned->cp.size > 1) {
        const size_t ring =
            5 * (size_t)tc->batch * planned->T * 2 * planned->shape.att * sizeof(floatX);
        printf(
            "  %-15s %16zu %12.6g | of the activations, the ring attention's buffers: two K/V "
            "blocks and three dK/dV of B x T/cp x 2 att (--cp %d: T %d of --seq %d per rank)\n",
            "cp: ring", ring, ring / GB, planned->cp.size, planned->T, tc->seq);
    }
    if (tp_cut)
        printf(
            "  %-15s %16zu %12.6g | of the activations, those between the tensor-parallel "
            "regions (residual stream, LayerNorms): %s; the parameters: %zu elements of cut "
            "tensors (1/%d each) + %zu replicated\n",
            "tp: seq acts", tpa.seq_activation_bytes, tpa.seq_activation_bytes / GB,
            planned->tensor_parallel.sequence
                ? "1/tp of the token rows (sequence parallel)"
                : "every token row on every rank (--sequence-parallel cuts them "
                  "by 1/tp)",
            tpa.elements[TP_PART_CUT], planned->tensor_parallel.size,
            tpa.elements[TP_PART_REPLICATED]);
    const char* why[NUM_MEM_KINDS] = {nullptr,
                                      nullptr,
                                      nullptr,
                                      nullptr,
                                      nullptr,
                                      "data parallel: buckets in flight, staging",
                                      "ZeRO-3: two blocks and the embeddings",
                                      "cuBLASLt 32 MiB, Newton-Schulz scratch",
                                      "--fp8: cached FP8 weights, operand scratch, scales",
                                      "--log-update-ratio: the weights before the update",
                                      "token ids, run lists, norm sums, monitors"};
    for (int k = MEM_BUCKETS; k < NUM_MEM_KINDS; k++)
        printf("  %-15s %16zu %12.6g | %s\n", MEM_KIND_NAMES[k], plan->bytes[k],
               plan->bytes[k] / GB, why[k]);
    printf("  %-15s %16zu %12.6g | cudaMalloc's %zu-byte rounding of %d allocations\n", "rounding",
           plan->rounding, plan->rounding / GB, DEVICE_ALLOC_ROUNDING, plan->allocations);
    printf("  %-15s %16zu %12.6g |\n", "total", ledger_total(plan), ledger_total(plan) / GB);
}

// The process grid of tc's run on `world` ranks (llmc/parallel.h), its groups not yet made.
inline ParallelDims grid_of(const TrainConfig* tc, int world) {
    ParallelDims d = parallel_dims(world, tc->tp, tc->zero, tc->sequence_parallel != 0,
                                   tc->bucket_mb, tc->pp, tc->cp);
    d.pp_schedule = pipe_schedule_from_name(tc->pp_schedule);
    d.pp_virtual = tc->pp_virtual;
    d.pp_micro_batches = tc->grad_accum;
    return d;
}

// The pipeline's configuration (llmc/pipeline.h) of tc.
inline PipeConfig pipe_config_of(const TrainConfig* tc) {
    return PipeConfig{pipe_schedule_from_name(tc->pp_schedule), tc->pp, tc->pp_virtual,
                      tc->grad_accum, tc->model.layers};
}

// nullptr if tc's pipeline can run, else why not: what pipe_config_check refuses (the layers by
// the stages, the micro-batches by --pp for the interleaved schedule).
inline const char* pipeline_error(const TrainConfig* tc, char* msg, size_t len) {
    const PipeConfig c = pipe_config_of(tc);
    return pipe_config_check(&c, msg, len);
}

// Stops the run if tc's model and micro-batch cannot train on grid `dims` (ranks_per_node: the
// ranks on this node, 0 when the launcher does not say).
inline void check_grid(const TrainConfig* tc, const ParallelDims* dims, int ranks_per_node) {
    // a rank's micro-batch: --batch sequences of --seq / --cp positions (context parallelism)
    const long long rows = tc->batch > 0 ? (long long)tc->batch * (tc->seq / tc->cp) : 0;
    const ParallelShapes shapes = {tc->model.heads, tc->model.channels, tc->model.padded_vocab,
                                   rows};
    char msg[512];
    if (const char* err = parallel_dims_check(dims, &shapes, ranks_per_node, msg, sizeof(msg)))
        fatal("%s", err);
    if (const char* err = pipeline_error(tc, msg, sizeof(msg))) fatal("%s", err);
    if (const char* err = cp_check(tc->cp, tc->seq, msg, sizeof(msg))) fatal("%s", err);
    if (tc->cp > 1 && tc->pp > 1)
        fatal("context parallelism (--cp %d) with pipeline parallelism (--pp %d) is not built yet",
              tc->cp, tc->pp);
    const ModelShapes part = model_shapes(&tc->model, dims->tp, 0);  // every rank's shapes
    if (tc->batch > 0)
        if (const char* err = gpt_fp8_error(&tc->model, &part, (int)rows, msg, sizeof(msg)))
            fatal("%s", err);
}

// The largest of every rank's `value`, the same on every rank. Every rank calls it.
inline double ranks_max(const Comm* comm, double value) {
    std::vector<double> all(comm->world);
    comm_allgather_host(&comm->all, &value, sizeof(value), all.data(),
                        "the ranks' device memory and plans");
    return *std::max_element(all.begin(), all.end());
}

// The device memory this rank fits --batch auto and --recompute auto into: --device-memory, or
// what cudaMemGetInfo reports free.
inline double device_budget(const TrainConfig* tc) {
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return tc->device_memory > 0 ? (double)tc->device_memory : (double)free_bytes;
}

// --batch auto and --recompute auto: the largest micro-batch (and the least recompute) whose
// plan fits `budget` bytes of device memory, less 1% of it for what the plan cannot see on a GPU
// (the allocator's page rounding of large buffers, NCCL's and cuBLASLt's own allocations; under
// the CPU runtime the plan is exact). need(config) is the plan's total for a configuration on
// the rank that needs the most, so that every rank makes the same choice. Under
// --sequence-parallel (tensor-parallel groups of tp) the batch is cut to one whose rows tp
// divides. Sets tc->batch and tc->recompute and prints the choice with the numbers behind it.
template <class Need>
void fit_memory(TrainConfig* tc, double budget, int tp, Need need) {
    const bool auto_batch = tc->batch == FLAG_WORD;
    const bool auto_policy = strcmp(tc->recompute, "auto") == 0;
    const double usable = 0.99 * budget;
    auto planned = [&](int B, int policy) {
        TrainConfig t = *tc;
        t.batch = B;
        snprintf(t.recompute, sizeof(t.recompute), "%s", RECOMPUTE_NAMES[policy]);
        return need(&t);
    };
    const int largest = (int)std::min<double>(MAX_BATCH, std::floor(MAX_ROWS / tc->seq));
    int batch = 0, policy = 0;
    for (int p = auto_policy ? 0 : recompute_from_name(tc->recompute); p < NUM_RECOMPUTE; p++) {
        const int fixed = auto_batch ? 1 : tc->batch;
        if (planned(fixed, p) > usable) {
            if (!auto_policy) break;  // not even this batch fits under the policy asked for
            continue;
        }
        batch = fixed;
        policy = p;
        if (auto_batch) {  // the plan grows with B: the largest B that fits, by bisection
            int hi = 2;
            while (hi <= largest && planned(hi, p) <= usable) batch = hi, hi *= 2;
            hi = std::min(hi, largest + 1);  // batch fits, hi does not (or is past the limit)
            while (hi - batch > 1) {
                const int mid = batch + (hi - batch) / 2;
                if (planned(mid, p) <= usable) batch = mid;
                else hi = mid;
            }
        }
        break;
    }
    if (batch == 0)
        fatal(
            "no configuration fits %.0f bytes of device memory (99%% of %.0f%s): --batch %s "
            "with --recompute %s needs %.0f; use a higher --zero, more ranks or a smaller "
            "--seq (--plan shows where the bytes go)",
            usable, budget, tc->device_memory > 0 ? ", --device-memory" : " free",
            auto_batch ? "1" : "as given", auto_policy ? "full" : tc->recompute,
            planned(auto_batch ? 1 : tc->batch,
                    auto_policy ? RECOMPUTE_FULL : recompute_from_name(tc->recompute)));
    // sequence parallelism cuts the B x T rows into tp parts: the largest such batch
    const int multiple = tc->sequence_parallel ? tp / std::gcd(tc->seq, tp) : 1;
    if (auto_batch && batch % multiple != 0) {
        if (batch < multiple)
            fatal(
                "--batch auto: %d sequences fit, but --sequence-parallel needs --batch x --seq "
                "%d to divide by --tp %d (a multiple of %d sequences)",
                batch, tc->seq, tp, multiple);
        batch -= batch % multiple;
    }
    tc->batch = batch;
    snprintf(tc->recompute, sizeof(tc->recompute), "%s", RECOMPUTE_NAMES[policy]);
    printf(
        "fitted to %.0f bytes of device memory (99%% of %.0f): --batch %d --recompute %s, planned "
        "%.0f bytes",
        usable, budget, batch, tc->recompute, planned(batch, policy));
    if (auto_batch && batch < largest)
        printf("; --batch %d would need %.0f", batch + multiple, planned(batch + multiple, policy));
    printf("\n");
}

// --batch auto and --recompute auto for a run on this grid: the least budget of every rank's
// (device_budget), each candidate's plan on the rank that needs the most (fit_memory); then
// --global-batch-tokens sets the accumulation. Every rank calls it.
inline void fit_batch(TrainConfig* tc, const Comm* comm, const ParallelDims* dims) {
    if (tc->batch == FLAG_WORD || strcmp(tc->recompute, "auto") == 0) {
        const double least = -ranks_max(comm, -device_budget(tc));
        const OptimizerConfig opt = optimizer_config_of(tc);
        fit_memory(tc, least, dims->tp, [&](const TrainConfig* t) {
            const DeviceLedger plan = plan_model(t, &opt, dims);
            return ranks_max(comm, (double)ledger_total(&plan));
        });
    }
    if (tc->global_batch_tokens > 0) {
        const long long per_micro = (long long)tc->batch * tc->seq * dims->dp;
        const long long accum = tc->global_batch_tokens / per_micro;
        if (tc->global_batch_tokens % per_micro != 0 || accum > (1 << 20))
            fatal(
                "--global-batch-tokens %lld is not a whole number (up to 2^20) of micro-batches of "
                "--batch %d x --seq %d x %d data-parallel ranks = %lld tokens",
                tc->global_batch_tokens, tc->batch, tc->seq, dims->dp, per_micro);
        tc->grad_accum = (int)accum;
        printf("--global-batch-tokens %lld: --grad-accum %d (%lld tokens per micro-batch)\n",
               tc->global_batch_tokens, tc->grad_accum, per_micro);
    }
}

// One rank of a planned launch: rank r of grid `dims`, its groups only shapes (no collective is
// made), its model built plan-only. Free the model with gpt_free.
struct PlannedRank {
    ParallelDims dims;
    GridGroups groups;  // the model points at them
    GPT model;
};

inline void plan_rank(PlannedRank* p, const TrainConfig* tc, const OptimizerConfig* opt,
                      const ParallelDims* dims, int r) {
    p->dims = *dims;
    comm_grid_groups(nullptr, r, tc->comm_timeout, &p->dims, &p->groups);
    gpt_build(&p->model, &tc->model, opt, tc->batch, tc->seq / tc->cp, (uint64_t)tc->seed, p->dims,
              recompute_from_name(tc->recompute), true, monitor_config_of(tc));
}

// --plan: every rank's plan for tc's configuration on --plan-ranks data-parallel ranks (or this
// launch's), rank 0's in full; allocates nothing, needs no data. --batch auto and --recompute
// auto are fitted first, to --device-memory or what this device has free, by the plan of the
// planned rank that needs the most.
inline int plan_main(TrainConfig* tc, const Comm* comm, const ParallelDims* dims) {
    if (comm->rank != 0) return EXIT_SUCCESS;
    const int ranks = dims->world;
    const OptimizerConfig opt = optimizer_config_of(tc);
    // calls each(r, model) with the planned model of every rank r of t's configuration
    auto for_each_rank = [&](const TrainConfig* t, auto each) {
        for (int r = 0; r < ranks; r++) {
            PlannedRank p;
            plan_rank(&p, t, &opt, dims, r);
            each(r, &p.model);
            gpt_free(&p.model);
        }
    };
    if (tc->batch == FLAG_WORD || strcmp(tc->recompute, "auto") == 0)
        fit_memory(tc, device_budget(tc), tc->tp, [&](const TrainConfig* t) {
            size_t most = 0;
            for_each_rank(
                t, [&](int, const GPT* g) { most = std::max(most, ledger_total(&g->memory)); });
            return (double)most;
        });
    // Under --pp the stages hold different layers: a line per pipeline rank (its first data-,
    // context- and tensor-parallel rank) after rank 0's plan.
    std::string stages;
    size_t lo = SIZE_MAX, hi = 0;
    for_each_rank(tc, [&](int r, const GPT* g) {
        const DeviceLedger* m = &g->memory;
        if (r == 0) print_plan(g, tc, 0, ranks);
        const GridCoords c = grid_coords(dims, r);
        if (dims->pp > 1 && c.dp_rank == 0 && c.cp_rank == 0 && c.tp_rank == 0) {
            const size_t state = m->bytes[MEM_PARAMS] + m->bytes[MEM_GRADS] + m->bytes[MEM_MASTER] +
                                 m->bytes[MEM_OPTIMIZER];
            char line[128];
            snprintf(line, sizeof line, "%-8d %16.6f %16.6f %16.6f\n", c.pp_rank, state / 1e9,
                     m->bytes[MEM_ACTIVATIONS] / 1e9, ledger_total(m) / 1e9);
            stages += line;
        }
        lo = std::min(lo, ledger_total(m));
        hi = std::max(hi, ledger_total(m));
    });
    if (dims->pp > 1)
        printf("%-8s %16s %16s %16s\n%s", "pp rank", "model state GB", "activations GB", "total GB",
               stages.c_str());
    printf("total per rank over the %d ranks: %zu to %zu bytes (%.3f to %.3f GB)\n", ranks, lo, hi,
           lo / 1e9, hi / 1e9);
    return EXIT_SUCCESS;
}

// --init-from: the model's shape is the pretrained weights' (train_weights.cuh). A shape flag
// left at its default takes the file's value; one set to another value must equal it. The
// tokenizer, when there is one, must have the model's vocabulary. A checkpoint of this trainer
// is refused here: it continues with --resume, or becomes pretrained weights with --export-hf.
inline void init_from_shape(TrainConfig* tc, const Tokenizer* tok) {
    const char* path = tc->init_from;
    if (weights_kind(path, "--init-from file") == WEIGHTS_CHECKPOINT)
        fatal(
            "--init-from %s is a checkpoint of this trainer or a folder without config.json: "
            "pretrained weights are a Hugging Face folder (with config.json) or an llm.c file; a "
            "checkpoint continues its run with --resume, or becomes a Hugging Face folder with "
            "--export-hf",
            path);
    const GPTConfig file = pretrained_shape(path);
    TrainConfig defaults;
    train_config_defaults(&defaults);
    struct ShapeFlag {
        const char* flag;
        int* value;
        int default_value, from_file;
    };
    const ShapeFlag shape[] = {
        {"--vocab", &tc->model.vocab, defaults.model.vocab, file.vocab},
        {"--context", &tc->model.context, defaults.model.context, file.context},
        {"--layers", &tc->model.layers, defaults.model.layers, file.layers},
        {"--heads", &tc->model.heads, defaults.model.heads, file.heads},
        {"--embd", &tc->model.channels, defaults.model.channels, file.channels}};
    for (const ShapeFlag& f : shape) {
        if (*f.value != f.default_value && *f.value != f.from_file)
            fatal("%s %d contradicts --init-from %s, whose model has %d (leave %s out)", f.flag,
                  *f.value, path, f.from_file, f.flag);
        *f.value = f.from_file;
    }
    // the block's kind and Llama's settings are the file's (--arch llama with a GPT-2 refused;
    // --kv-heads and --mlp-hidden, when given, must equal the file's), set as the flags that
    // train_config_check resolves (llama_config_resolve)
    const LlamaConfig* fl = &file.llama;
    if (strcmp(tc->arch, "llama") == 0 && fl->arch != ARCH_LLAMA)
        fatal("--arch llama contradicts --init-from %s, a GPT-2 (leave --arch out)", path);
    if (fl->arch == ARCH_LLAMA) {
        LlamaConfig* l = &tc->model.llama;
        if ((l->kv_heads && l->kv_heads != fl->kv_heads) ||
            (l->mlp_hidden && l->mlp_hidden != fl->mlp_hidden))
            fatal(
                "--kv-heads %d or --mlp-hidden %d contradicts --init-from %s, whose model has %d "
                "and %d (leave them out)",
                l->kv_heads, l->mlp_hidden, path, fl->kv_heads, fl->mlp_hidden);
        snprintf(tc->arch, sizeof(tc->arch), "llama");
        snprintf(tc->rope_scaling, sizeof(tc->rope_scaling), "%s",
                 fl->rope_scaling == ROPE_SCALING_LLAMA3 ? "llama3" : "none");
        tc->tie_embeddings = !fl->untied_head;
        l->kv_heads = fl->kv_heads;
        l->mlp_hidden = fl->mlp_hidden;
        l->norm_eps = fl->norm_eps;
        l->rope_theta = fl->rope_theta;
        if (fl->rope_scaling == ROPE_SCALING_LLAMA3) {
            l->rope_factor = fl->rope_factor;
            l->rope_low_freq_factor = fl->rope_low_freq_factor;
            l->rope_high_freq_factor = fl->rope_high_freq_factor;
            l->rope_original_context = fl->rope_original_context;
        }
    }
    char msg[512];
    if (gpt_config_error(&tc->model, 1, file.context, msg, sizeof(msg)))
        fatal("--init-from %s: this trainer cannot build its model: %s", path, msg);
    if (tok != nullptr && tok->vocab_size != file.vocab)
        fatal("--init-from %s is a model of %d tokens, the tokenizer has %d", path, file.vocab,
              tok->vocab_size);
    if (tc->seq > file.context)
        fatal(
            "--seq %d is longer than --init-from %s's context of %d positions (give --seq %d or "
            "less)",
            tc->seq, path, file.context, file.context);
}

// A model on this process alone, for sampling and export: its shape and weights from `spec`, a
// checkpoint (a file, or a folder's newest), a Hugging Face GPT-2 folder or an llm.c model file;
// built for micro-batches of 1 x T (0: its context). Says what it loaded.
inline void load_single_model(const char* spec, const TrainConfig* tc, int T, GPT* model) {
    OptimizerConfig opt = optimizer_config_of(tc);
    if (weights_kind(spec, "checkpoint") != WEIGHTS_CHECKPOINT) {
        const GPTConfig c = pretrained_shape(spec);
        char msg[512];
        if (gpt_config_error(&c, 1, T > 0 ? T : c.context, msg, sizeof(msg)))
            fatal("%s: this trainer cannot build its model: %s", spec, msg);
        gpt_build(model, &c, &opt, 1, T > 0 ? T : c.context, 0);
        load_pretrained(model, spec);
        printf("loaded %s (L %d NH %d C %d maxT %d V %d)\n", spec, c.layers, c.heads, c.channels,
               c.context, c.vocab);
        return;
    }
    char path[CKPT_PATH_BYTES];
    if (!find_checkpoint(spec, path, sizeof(path))) fatal("no checkpoint in %s", spec);
    CheckpointConfig cc = peek_checkpoint_config(path);
    CheckpointReader reader;
    if (ckpt_open(&reader, path, &cc, sizeof(cc), CHECKPOINT_FIELDS, NUM_CHECKPOINT_FIELDS) != 0)
        fatal("%s", reader.error);
    if (cc.floatx_bytes != (int32_t)sizeof(floatX))
        fatal(
            "checkpoint %s holds %d-byte weights; this %s build reads %d-byte weights (use the %s "
            "build)",
            path, cc.floatx_bytes, PRECISION_NAME, (int)sizeof(floatX),
            sizeof(floatX) == 4 ? "bf16" : "fp32");
    GPTConfig c = {cc.vocab, cc.padded_vocab, cc.context, cc.layers, cc.heads, cc.channels};
    read_llama_section(&reader, &c.llama);  // (a GPT-2 checkpoint has none: zeros)
    char msg[512];
    if (gpt_config_error(&c, 1, c.context, msg, sizeof(msg)) ||
        c.padded_vocab != padded_vocab_of(c.vocab))
        fatal("checkpoint %s holds an invalid model configuration", path);
    // The config block holds the shape; the layout section says whether the model has QK-norm's
    // scales and which optimizer's state the file holds (needed to read it in full): the kind
    // of the optimizer other than AdamW that updates some tensor, if any.
    char q_norm_name[32];
    snprintf(q_norm_name, sizeof(q_norm_name), "h0.%s", LAYER_TENSOR_NAMES[Q_NORM_W]);
    for (const LayoutRecord& rec : read_layout(&reader)) {
        if (strcmp(rec.name, q_norm_name) == 0) c.qk_norm = 1;
        if (rec.optimizer > OPT_ADAMW && rec.optimizer < NUM_OPTIMIZERS) opt.kind = rec.optimizer;
    }
    gpt_build(model, &c, &opt, 1, T > 0 ? T : c.context, 0);
    RunState rs = load_checkpoint(model, &reader, nullptr);
    ckpt_close(&reader);
    printf("loaded %s (step %llu; L %d NH %d C %d maxT %d V %d)\n", path,
           (unsigned long long)rs.step, c.layers, c.heads, c.channels, c.context, c.vocab);
}

inline int sample_main(const TrainConfig* tc, const Tokenizer* tok) {
    if (tok == nullptr)
        fatal("--sample needs a tokenizer: --data DIR (its tokenizer.bin) or --tokenizer PATH");
    GPT model;
    load_single_model(tc->sample, tc, 0, &model);
    if (model.config.vocab != tok->vocab_size)
        fatal("%s is a model of %d tokens, the tokenizer has %d", tc->sample, model.config.vocab,
              tok->vocab_size);
    printf("sampling %s, temperature %g, top-k %d, seed %lld\n", tc->sample, tc->temperature,
           tc->top_k, tc->seed);
    printf("---\n");
    uint64_t rng = (uint64_t)tc->seed;
    size_t len;
    free(generate_text(&model, tok, tc->prompt, tc->sample_len, tc->temperature, tc->top_k, &rng,
                       &len));
    gpt_free(&model);
    return EXIT_SUCCESS;
}

// =============================================================================================
// Training loop.

#ifdef __CUCC__
constexpr bool ON_GPU = false;  // built by dev/cpu/cucc: the CPU runtime, where MFU means nothing
#else
constexpr bool ON_GPU = true;
#endif

// The startup report's line on FP8: which matmuls, which recipe, what the copies take.
inline void print_fp8(const GPT* m) {
    const Fp8Config* f = &m->config.fp8;
    if (f->recipe == FP8_OFF) return;
    printf(
        "fp8: recipe %s, E4M3 inputs and weights, %s gradients, fp32 accumulation, bf16 outputs; "
        "%d matmuls per step in FP8 (attn.qkv, attn.proj, mlp.fc, mlp.proj x %d blocks%s, "
        "forward and both backward products); %.2f MiB cached FP8 weights + scales, %.2f MiB "
        "operand scratch",
        FP8_RECIPE_NAMES[f->recipe], f->grad_e5m2 ? "E5M2" : "E4M3", 3 * m->fp8.count,
        m->config.layers, f->lm_head ? " and the lm head" : "", m->fp8.weight_bytes / 1048576.0,
        m->fp8.scratch_bytes / 1048576.0);
    if (f->recipe == FP8_DELAYED)
        printf(" (with the amax histories: %d steps, margin %d)", f->amax_history, f->margin);
    if (m->fp8.count > 0 && m->fp8.layers[0].gathered)
        printf("; ZeRO-3 gathers the blocks' weights in FP8 (--fp8-allgather)");
    printf("\n");
}

// The log's first line: the run's configuration, the bytes of model state it holds and the
// baseline plot.py draws.
inline void log_header(Logger* lg, const TrainConfig* tc, size_t parameters, double unigram,
                       int ranks, const GPT* m, const DeviceLedger* plan) {
    const size_t* held = m->memory.bytes;
    const GPTConfig* c = &tc->model;
    logger_begin(lg);
    logger_string(lg, "precision", PRECISION_NAME, strlen(PRECISION_NAME));
    logger_string(lg, "data", tc->data, strlen(tc->data));
    logger_int(lg, "vocab", c->vocab);
    logger_int(lg, "context", c->context);
    logger_int(lg, "layers", c->layers);
    logger_int(lg, "heads", c->heads);
    logger_int(lg, "embd", c->channels);
    logger_int(lg, "parameters", (int64_t)parameters);
    logger_int(lg, "batch", tc->batch);
    logger_int(lg, "seq", tc->seq);
    logger_int(lg, "grad_accum", tc->grad_accum);
    logger_int(lg, "ranks", ranks);
    logger_int(lg, "steps", tc->steps);
    logger_float(lg, "lr", (float)tc->lr);
    logger_int(lg, "warmup", tc->warmup);
    logger_string(lg, "schedule", tc->schedule, strlen(tc->schedule));
    logger_string(lg, "optimizer", tc->optimizer, strlen(tc->optimizer));
    logger_string(lg, "recompute", tc->recompute, strlen(tc->recompute));
    if (strcmp(tc->optimizer, "muon") == 0) logger_float(lg, "muon_lr", (float)muon_peak_lr(tc));
    logger_int(lg, "qk_norm", c->qk_norm);
    logger_float(lg, "z_loss", (float)tc->model.z_loss);
    logger_string(lg, "fp8", tc->fp8, strlen(tc->fp8));
    if (tc->model.fp8.recipe != FP8_OFF) {
        const char* grad = tc->model.fp8.grad_e5m2 ? "e5m2" : "e4m3";
        logger_string(lg, "fp8_grad", grad, strlen(grad));
        logger_int(lg, "fp8_lm_head", tc->fp8_lm_head);
        logger_int(lg, "fp8_allgather", tc->fp8_allgather);
        logger_int(lg, "fp8_bytes", (int64_t)held[MEM_FP8]);
        if (tc->model.fp8.recipe == FP8_DELAYED) {
            logger_int(lg, "fp8_amax_history", tc->fp8_amax_history);
            logger_int(lg, "fp8_margin", tc->fp8_margin);
        }
    }
    logger_int(lg, "seed", tc->seed);
    logger_object_begin(lg, "state_bytes");  // as allocated
    for (int k : {MEM_PARAMS, MEM_GRADS, MEM_MASTER, MEM_OPTIMIZER, MEM_BUCKETS, MEM_GATHER})
        if (held[k] > 0 || k <= MEM_OPTIMIZER) logger_int(lg, MEM_KIND_NAMES[k], (int64_t)held[k]);
    logger_object_end(lg);
    logger_int(lg, "zero", tc->zero);
    logger_int(lg, "tp", tc->tp);
    logger_int(lg, "pp", tc->pp);
    logger_int(lg, "cp", tc->cp);
    logger_int(lg, "sequence_parallel", m->tensor_parallel.sequence);
    const TpAccount tpa = tp_account(m);
    // rank 0's parameter table and state, in the tensors tensor parallelism cuts and the rest
    logger_object_begin(lg, "tp_elements");
    logger_int(lg, "sharded", (int64_t)tpa.elements[TP_PART_CUT]);
    logger_int(lg, "replicated", (int64_t)tpa.elements[TP_PART_REPLICATED]);
    logger_int(lg, "owned_sharded", (int64_t)tpa.owned[TP_PART_CUT]);
    logger_int(lg, "owned_replicated", (int64_t)tpa.owned[TP_PART_REPLICATED]);
    logger_object_end(lg);
    for (int part = 0; part < NUM_TP_PARTS; part++) {
        logger_object_begin(lg, part == TP_PART_CUT ? "tp_cut_bytes" : "tp_replicated_bytes");
        for (int k = MEM_PARAMS; k <= MEM_OPTIMIZER; k++)
            logger_int(lg, MEM_KIND_NAMES[k], (int64_t)tpa.bytes[k][part]);
        logger_object_end(lg);
    }
    logger_int(lg, "activation_bytes", (int64_t)m->activation_bytes);
    logger_int(lg, "seq_activation_bytes", (int64_t)tpa.seq_activation_bytes);
    logger_object_begin(lg, "plan_bytes");  // llmc/memplan.h: this rank's, before allocating
    for (int k = 0; k < NUM_MEM_KINDS; k++)
        logger_int(lg, MEM_KIND_NAMES[k], (int64_t)plan->bytes[k]);
    logger_int(lg, "rounding", (int64_t)plan->rounding);
    logger_int(lg, "total", (int64_t)ledger_total(plan));
    logger_object_end(lg);
    logger_int(lg, "recompute_saved_bytes", (int64_t)m->recompute_saved_bytes);
    if (tc->data[0]) logger_float(lg, "unigram_val_loss", (float)unigram);
    if (logger_end(lg) != 0) fatal("%s", lg->error);
}

inline void log_value(Logger* lg, int step, const char* key, double value) {
    if (lg->file == nullptr) return;
    logger_begin_step(lg, step);
    logger_float(lg, key, (float)value);
    if (logger_end(lg) != 0) fatal("%s", lg->error);
}

// Validation loss after `step` steps, the mean over the ranks' parts of each batch: printed,
// logged, returned.
inline double run_validation(GPT* m, TrainData* d, const TrainConfig* tc, Logger* lg, int step,
                             double unigram) {
    auto start = std::chrono::steady_clock::now();
    double loss = comm_mean(m->dp.group, evaluate(m, &d->val, tc->val_steps));  // dp x cp
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    printf("val loss %.4f at step %d (unigram baseline %.4f; %.1f s)\n", loss, step, unigram,
           seconds);
    fflush(stdout);
    log_value(lg, step, "val_loss", loss);
    return loss;
}

// A text sample after `step` steps, continuing --prompt: printed and logged.
inline void run_sample(GPT* m, const Tokenizer* tok, const TrainConfig* tc, Logger* lg, int step,
                       uint64_t* rng) {
    printf("sample at step %d:\n---\n", step);
    size_t len;
    char* text =
        generate_text(m, tok, tc->prompt, tc->sample_len, tc->temperature, tc->top_k, rng, &len);
    printf("---\n");
    if (lg->file) {
        logger_begin_step(lg, step);
        logger_string(lg, "sample", text, len);
        if (logger_end(lg) != 0) fatal("%s", lg->error);
    }
    free(text);
}

// Every parameter of the whole model into host memory in the logical layout (m->logical.total,
// zero in the alignment gaps), on every rank: this rank's part (gpt_params_download), under
// tensor parallelism the group's parts all-gathered and placed, and under pipeline parallelism
// each tensor from the stage that holds it (the tied wte: the first). Every rank calls it.
inline void gpt_params_download_logical(GPT* m, floatX* logical) {
    const size_t P = m->layout.total;
    const int tp = m->tensor_parallel.size;
    std::vector<floatX> parts(P * tp);
    gpt_params_download(m, parts.data() + (size_t)m->tensor_parallel.rank * P);
    if (tp > 1) {
        floatX* dev;
        CUDA_CHECK(cudaMalloc(&dev, P * tp * sizeof(floatX)));
        floatX* mine = dev + (size_t)m->tensor_parallel.rank * P;
        CUDA_CHECK(cudaMemcpy(mine, parts.data() + (size_t)m->tensor_parallel.rank * P,
                              P * sizeof(floatX), cudaMemcpyHostToDevice));
        comm_allgather(m->tensor_parallel.group, mine, dev, P, m->stream);
        comm_sync(m->tensor_parallel.group, m->stream,
                  "the gather of the tensor-parallel parts (NCCL)");
        CUDA_CHECK(cudaMemcpy(parts.data(), dev, P * tp * sizeof(floatX), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaFree(dev));
    }
    memset(logical, 0, m->logical.total * sizeof(floatX));
    for (int r = 0; r < tp; r++)
        for (int i = 0; i < m->layout.count; i++) {
            const ParamTensor* t = &m->layout.tensors[i];
            const size_t base = m->logical.tensors[i].offset;
            const floatX* part = parts.data() + (size_t)r * P + t->offset;
            tp_local_runs(&t->tp_shape, r, tp, 0, t->numel,
                          [&](size_t logical_at, size_t local_at, size_t n) {
                              memcpy(logical + base + logical_at, part + local_at,
                                     n * sizeof(floatX));
                          });
        }
    const CommGroup* pipe = m->pipe.group;
    if (pipe->size == 1) return;
    const size_t total = m->logical.total;
    floatX* dev;
    CUDA_CHECK(cudaMalloc(&dev, total * pipe->size * sizeof(floatX)));
    floatX* mine = dev + (size_t)pipe->rank * total;
    CUDA_CHECK(cudaMemcpy(mine, logical, total * sizeof(floatX), cudaMemcpyHostToDevice));
    comm_allgather(pipe, mine, dev, total, m->stream);
    comm_sync(pipe, m->stream, "the gather of the pipeline stages' parameters (NCCL)");
    std::vector<floatX> stages(total * pipe->size);
    CUDA_CHECK(
        cudaMemcpy(stages.data(), dev, stages.size() * sizeof(floatX), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(dev));
    for (int i = 0; i < m->logical.count; i++) {
        const ParamTensor* t = &m->logical.tensors[i];
        const size_t from = (size_t)pipe_holder(m, i) * total + t->offset;
        std::copy(stages.begin() + from, stages.begin() + from + t->numel, logical + t->offset);
    }
}

// Prints a hash of the parameters, which fingerprints the run, after checking that every rank
// holds the same model. The hash is of the whole model in the logical layout, gathered first
// where ranks hold parts (ZeRO-3's shards, tensor parallelism's parts): the same quantity for
// every grid, equal to one process's when the arithmetic is the same.
inline void check_replicas(const Comm* comm, GPT* m) {
    std::vector<uint64_t> hashes(comm->all.size);
    std::vector<floatX> params(m->logical.total);
    gpt_params_download_logical(m, params.data());
    const bool agree = comm_hashes_agree(
        &comm->all, host_buffer_hash(params.data(), params.size() * sizeof(floatX)), hashes.data());
    if (!agree) {
        if (comm->rank == 0)
            for (int r = 0; r < comm->all.size; r++)
                fprintf(stderr, "rank %d: parameter hash %016llx\n", r,
                        (unsigned long long)hashes[r]);
        fatal("the ranks hold different parameters");
    }
    printf("parameter hash %016llx on each of %d ranks\n", (unsigned long long)hashes[0],
           comm->all.size);
}

// The tokenizer of the run that wrote the checkpoint `spec` names: the tokenizer.bin of the --data
// folder its run configuration records, when that file is there. Returns whether it loaded one.
inline bool recorded_tokenizer(const char* spec, Tokenizer* tok) {
    char path[CKPT_PATH_BYTES];
    if (weights_kind(spec, "checkpoint") != WEIGHTS_CHECKPOINT ||
        !find_checkpoint(spec, path, sizeof(path)))
        return false;
    CheckpointReader r;
    if (ckpt_open(&r, path, nullptr, 0, nullptr, 0) != 0) fatal("%s", r.error);
    std::vector<uint8_t> raw;
    const bool recorded = manifest_section(&r, "run_config", &raw);
    ckpt_close(&r);
    raw.push_back('\0');
    const char* text = (const char*)raw.data();
    // "--name\0value\0" pairs (run_config_section)
    for (size_t pos = 0; recorded && pos + 1 < raw.size();) {
        const char* key = text + pos;
        const size_t value_at = pos + strlen(key) + 1;
        if (value_at >= raw.size()) break;
        const char* value = text + value_at;
        pos = value_at + strlen(value) + 1;
        if (strcmp(key, "--data") != 0 || value[0] == '\0') continue;
        const std::string file = std::string(value) + "/tokenizer.bin";
        if (!path_is_file(file)) return false;
        if (tokenizer_load(tok, file.c_str()) != 0) fatal("%s", tok->error);
        printf("the tokenizer of the run's --data: %s\n", file.c_str());
        return true;
    }
    return false;
}

// --export-hf DIR: --init-from's model (a checkpoint, or pretrained weights) written as a Hugging
// Face GPT-2 folder, the weights as the forward pass reads them (train_weights.cuh's export_hf),
// with the tokenizer of --tokenizer or --data, or else of the checkpoint's run.
inline int export_main(const TrainConfig* tc, const Tokenizer* given) {
    Tokenizer recorded;
    const Tokenizer* tok = given                                          ? given
                           : recorded_tokenizer(tc->init_from, &recorded) ? &recorded
                                                                          : nullptr;
    GPT model;
    load_single_model(tc->init_from, tc, 1, &model);
    if (tok != nullptr && tok->vocab_size != model.config.vocab)
        fatal("%s is a model of %d tokens, the tokenizer has %d", tc->init_from, model.config.vocab,
              tok->vocab_size);
    std::vector<floatX> params(model.logical.total);
    gpt_params_download_logical(&model, params.data());
    std::vector<float> values(params.begin(), params.end());
    export_hf(&model, values.data(), tc->export_hf, tok);
    gpt_free(&model);
    if (tok == &recorded) tokenizer_free(&recorded);
    return EXIT_SUCCESS;
}

// The startup report's line on the model state: the bytes each buffer holds (as allocated) and
// what a parameter costs under each optimizer (weights, gradients, master weights and state).
inline void print_state_bytes(const GPT* m) {
    const size_t* h = m->memory.bytes;
    const double MiB = 1024.0 * 1024.0;
    printf("model state: params %.2f MiB, grads %.2f MiB, master %.2f MiB, optimizer %.2f MiB",
           h[MEM_PARAMS] / MiB, h[MEM_GRADS] / MiB, h[MEM_MASTER] / MiB, h[MEM_OPTIMIZER] / MiB);
    for (int o = 0; o < NUM_OPTIMIZERS; o++) {
        int tensors = 0;
        size_t params = 0, bytes = 2 * sizeof(floatX) + (m->master ? sizeof(float) : 0);
        for (int i = 0; i < m->layout.count; i++) {
            if (m->layout.tensors[i].optimizer != o) continue;
            tensors++;
            params += m->layout.tensors[i].numel;
        }
        for (int b = OPTIMIZERS[o].first_state;
             b < OPTIMIZERS[o].first_state + OPTIMIZERS[o].state_count; b++)
            bytes += STATE_BUFFERS[b].elem_bytes;
        if (tensors > 0)
            printf(" | %s: %d tensors, %zu parameters, %zu bytes each", OPTIMIZERS[o].name, tensors,
                   params, bytes);
    }
    printf(" | workspaces %.2f MiB\n", h[MEM_WORKSPACE] / MiB);
}

// Each rank's model state as allocated (a line per rank, printed by rank 0), next to what the
// ZeRO formulas give for mixed-precision AdamW (bf16 weights and gradients, fp32 master weights
// and moments: 16 bytes per parameter Psi): stage 0 16 Psi, 1 4 Psi + 12 Psi / N, 2 2 Psi + 14
// Psi / N, 3 16 Psi / N. The counts differ from the formula by the alignment gaps of the
// parameter layout (every tensor on 128 elements), the slices' padding (64 elements per
// bucket), and Muon's 12 bytes per parameter; the buffers of buckets in flight and ZeRO-3's gather buffers are reported apart.
inline void print_rank_state_bytes(const GPT* m, const CommGroup* group, size_t parameters) {
    const size_t* h = m->memory.bytes;
    const TpAccount tpa = tp_account(m);
    // the allocated buffers, then the model state in the cut and the replicated tensors, then
    // the activations between and inside the parallel regions
    constexpr int K = 6 + 2 * 4 + 2;
    double mine[K] = {(double)h[MEM_PARAMS],    (double)h[MEM_GRADS],   (double)h[MEM_MASTER],
                      (double)h[MEM_OPTIMIZER], (double)h[MEM_BUCKETS], (double)h[MEM_GATHER]};
    for (int part = 0; part < NUM_TP_PARTS; part++)
        for (int k = MEM_PARAMS; k <= MEM_OPTIMIZER; k++)
            mine[6 + 4 * part + k] = (double)tpa.bytes[k][part];
    mine[14] = (double)tpa.seq_activation_bytes;
    mine[15] = (double)tpa.other_activation_bytes;
    std::vector<double> all(K * group->size);
    comm_allgather_host(group, mine, sizeof(mine), all.data(), "the ranks' state bytes");
    const double MiB = 1024.0 * 1024.0;
    // a rank's share of the model: 1/tp of the cut tensors and the replicated ones whole
    const bool staged = m->pipe.config.pp > 1;  // a rank's share: its pipeline stages'
    const size_t psi = m->tensor_parallel.size > 1 || staged
                           ? tpa.elements[TP_PART_CUT] + tpa.elements[TP_PART_REPLICATED]
                           : parameters;
    printf(
        "ZeRO stage %d over %d data-parallel rank(s); formula for AdamW in bf16: %.2f MiB of model "
        "state per rank (Psi = %zu%s)\n",
        m->dp.stage, m->dp.group->size,
        seed_model_state_bytes((double)psi, m->dp.group->size, m->dp.stage) / MiB, psi,
        m->tensor_parallel.size > 1 ? ", this rank's tensor-parallel part"
        : staged                    ? ", this rank's pipeline stages"
                                    : "");
    if (m->dp.stage == 3)
        printf(
            "ZeRO-3: 3 gather buffers: 2 for the blocks (the current one and the prefetched "
            "next), 1 for the embeddings (kept for the step)\n");
    if (m->tensor_parallel.size > 1)
        printf(
            "tensor parallelism over groups of %d%s: each rank holds 1/%d of every cut tensor "
            "(attn.qkv, attn.proj.w, mlp.fc, mlp.proj.w, wte) and all of the replicated ones%s\n",
            m->tensor_parallel.size,
            m->tensor_parallel.sequence ? " with sequence parallelism" : "",
            m->tensor_parallel.size,
            m->tensor_parallel.sequence
                ? "; the activations between the parallel regions hold 1/tp of the "
                  "token rows"
                : "");
    for (int r = 0; r < group->size; r++) {
        const double* b = &all[K * r];
        printf(
            "  rank %d: params %.2f + grads %.2f + master %.2f + optimizer %.2f = %.2f MiB, "
            "buckets in flight %.2f MiB, gather buffers %.2f MiB\n",
            r, b[0] / MiB, b[1] / MiB, b[2] / MiB, b[3] / MiB, (b[0] + b[1] + b[2] + b[3]) / MiB,
            b[4] / MiB, b[5] / MiB);
        if (m->tensor_parallel.size == 1) continue;
        for (int part = 0; part < NUM_TP_PARTS; part++)
            printf(
                "          %-10s tensors: params %.2f + grads %.2f + master %.2f + optimizer "
                "%.2f MiB\n",
                part == TP_PART_CUT ? "cut" : "replicated", b[6 + 4 * part] / MiB,
                b[7 + 4 * part] / MiB, b[8 + 4 * part] / MiB, b[9 + 4 * part] / MiB);
        printf(
            "          activations: %.2f MiB between the parallel regions (residual stream, "
            "LayerNorms) + %.2f MiB inside\n",
            b[14] / MiB, b[15] / MiB);
    }
}

// The pipeline's bubble in this rank's last step, measured, for every rank of the group (each
// rank's loop: pipe_forward_backward times it). A rank's time goes to its actions, to waiting
// for their inputs (the transfers run on their own stream meanwhile and count in neither), and
// little else. The step's time T is pipeline rank 0's loop (it runs the first action and the
// last), a rank's idle time T minus its time in actions. Under the --pp-cost-ms model every
// action lasts a whole number of time steps (a forward 1, a backward 2) and every wait of the
// schedule is whole time steps too, plus a transfer's latency and the host's delays: there the
// bubble is counted in time steps, each wait rounded to the nearest (so the latency and a loaded
// machine's delays, under half a step each, drop out), T being the most any rank's actions and
// waits take. Printed next to the formula (p - 1)/(v m + p - 1) (llmc/pipeline.h: the bound
// every schedule here reaches when a backward costs twice a forward), with the seconds' bubble,
// the most a wait was off whole steps and the most an action outlasted its cost (the count
// holds while both stay well under half a step; with --pp-cost-transfer-ms a whole number of
// steps, a transfer's wait is whole steps too). Every rank of the group calls it.
struct PipeBubble {
    std::vector<double> bubble;   // by rank: idle / T (time steps under the cost model)
    std::vector<double> seconds;  // by rank: (T - busy) / T in seconds
    std::vector<double> loop_ms, busy_ms, wait_ms;  // by rank
    double formula, wait_off_ms, overrun_ms;        // the most over the group
    double time_steps;  // under the cost model: T in time steps (0 without it)
};

inline PipeBubble report_pipeline_bubble(const CommGroup* pp, const Pipeline* pipe, int step) {
    const int p = pp->size, K = 6;
    std::vector<double> times(K * p, 0.0);  // [rank]: loop, busy, wait, wait steps, off, overrun
    const double mine[K] = {pipe->loop_s,     pipe->busy_s,
                            pipe->wait_s,     (double)pipe->wait_steps,
                            pipe->wait_off_s, pipe->overrun_s};
    std::copy(mine, mine + K, times.begin() + K * pp->rank);
    comm_sum_scalars(pp, times.data(), K * p);
    const PipeConfig* c = &pipe->config;
    const double T = times[0], mv = (double)c->micro_batches * c->chunks;
    const double busy_steps = 3.0 * mv;  // a forward and a backward per (micro-batch, chunk)
    double T_steps = 0.0;
    PipeBubble out = {};
    out.formula = (p - 1.0) / (mv + p - 1.0);
    for (int r = 0; r < p; r++) T_steps = std::max(T_steps, busy_steps + times[K * r + 3]);
    if (pipe->cost_ms > 0) out.time_steps = T_steps;
    for (int r = 0; r < p; r++) {
        const double* t = &times[K * r];
        out.loop_ms.push_back(1e3 * t[0]);
        out.busy_ms.push_back(1e3 * t[1]);
        out.wait_ms.push_back(1e3 * t[2]);
        out.seconds.push_back((T - t[1]) / T);
        out.wait_off_ms = std::max(out.wait_off_ms, 1e3 * t[4]);
        out.overrun_ms = std::max(out.overrun_ms, 1e3 * t[5]);
        out.bubble.push_back(pipe->cost_ms > 0 ? (T_steps - busy_steps) / T_steps
                                               : out.seconds.back());
        if (pipe->cost_ms > 0)
            printf(
                "pipeline bubble of step %d, rank %d: %.0f time steps of %d ms in actions, %d "
                "waiting for inputs (%.1f ms), idle %.4f of T = %.0f steps; in seconds %.4f of T = "
                "%.1f ms (rank 0's loop), %.1f ms in actions; formula (p - 1)/(v m + p - 1) = "
                "%d/%.0f = %.4f\n",
                step, r, busy_steps, pipe->cost_ms, (int)t[3], 1e3 * t[2], out.bubble.back(),
                T_steps, out.seconds.back(), 1e3 * T, 1e3 * t[1], p - 1, mv + p - 1, out.formula);
        else
            printf(
                "pipeline bubble of step %d, rank %d: %.1f ms in actions, %.1f ms waiting for "
                "inputs, idle %.4f of T = %.1f ms (rank 0's loop); formula (p - 1)/(v m + p - 1) "
                "= %d/%.0f = %.4f\n",
                step, r, 1e3 * t[1], 1e3 * t[2], out.bubble.back(), 1e3 * T, p - 1, mv + p - 1,
                out.formula);
    }
    if (pipe->cost_ms > 0)
        printf(
            "pipeline cost model of step %d: a wait was off whole time steps by at most %.1f ms, "
            "an action outlasted its cost by at most %.1f ms\n",
            step, out.wait_off_ms, out.overrun_ms);
    return out;
}

// The bytes the device collectives of one step sent from this rank (llmc/comm.cuh counts them
// where they are issued, as a ring moves them), per group: data-parallel (the gradients and
// ZeRO's gathers), tensor-parallel (the layers' activations), and the job's (host values).
// Printed, and logged as a line {"step": k, "comm_bytes": {"all_reduce": ..., ...},
// "tp_comm_bytes": {...}, "tp_comm_calls": {...}} (the tensor-parallel entries with --tp > 1),
// and under pipeline parallelism "pp_sent_bytes": the activations and gradients that the ranks
// of this rank's pipeline group sent each other (counted by the executor as it sends them,
// pipe->sent_bytes: this rank's), summed over the group, and the measured bubble
// (report_pipeline_bubble). Every rank calls it.
inline void report_traffic(Logger* lg, const CommGroup* all, const CommGroup* dp,
                           const CommGroup* tp, const CommGroup* pp, const Pipeline* pipe,
                           const ContextParallel* cp, int step) {
    // context parallelism: the ring's sends are the cp group's only point-to-point transfers;
    // the attention work of every rank of the group (the load balance)
    const double ring_bytes = cp->size > 1 ? cp->group->traffic->bytes[COMM_SEND_RECV] : 0.0;
    std::vector<double> pairs(cp->size);
    if (cp->size > 1) {
        comm_allgather_host(cp->group, &cp->pairs, sizeof(double), pairs.data(),
                            "the context-parallel ranks' attention pair counts");
        printf(
            "context-parallel ring of step %d: %.0f bytes of K/V and their gradients sent by this "
            "rank; key/query pairs of attention computed by the group's ranks:",
            step, ring_bytes);
        for (double p : pairs) printf(" %.0f", p);
        printf("\n");
    }
    double pipe_sent = pipe->sent_bytes;
    PipeBubble bubble = {};
    if (pp->size > 1) {
        comm_sum_scalars(pp, &pipe_sent, 1);
        printf(
            "pipeline transfers of step %d: %.0f bytes of activations and gradients sent by the "
            "%d ranks of the pipeline group\n",
            step, pipe_sent, pp->size);
        bubble = report_pipeline_bubble(pp, pipe, step);
    }
    const CommGroup* groups[3] = {dp, tp, all};
    const char* names[3] = {"data-parallel", "tensor-parallel", "all ranks"};
    CommTraffic sum = {};  // data-parallel and the job's: the gradient side, as before --tp
    for (int i = 0; i < 3; i++) {
        const CommTraffic* t = groups[i]->traffic;
        if (t == nullptr || groups[i]->size == 1 || (i == 2 && dp == all)) continue;
        printf("%s collectives of step %d (bytes sent by this rank, ring convention):", names[i],
               step);
        double total = 0.0;
        for (int k = 0; k < NUM_COMM_KINDS; k++) {
            printf(" %s %.0f (%lld calls)", COMM_KIND_NAMES[k], t->bytes[k], t->calls[k]);
            total += t->bytes[k];
            if (i != 1) sum.bytes[k] += t->bytes[k], sum.calls[k] += t->calls[k];
        }
        printf(" | total %.0f\n", total);
    }
    if (lg->file == nullptr) return;
    logger_begin_step(lg, step);
    logger_object_begin(lg, "comm_bytes");
    for (int k = 0; k < NUM_COMM_KINDS; k++)
        logger_int(lg, COMM_KIND_NAMES[k], (int64_t)sum.bytes[k]);
    logger_object_end(lg);
    if (cp->size > 1) {
        logger_int(lg, "cp_ring_bytes", (int64_t)ring_bytes);
        logger_object_begin(lg, "cp_pairs");  // by rank of the group
        for (int r = 0; r < cp->size; r++) {
            char rank[16];
            snprintf(rank, sizeof(rank), "%d", r);
            logger_int(lg, rank, (int64_t)pairs[r]);
        }
        logger_object_end(lg);
    }
    if (pp->size > 1) {
        logger_int(lg, "pp_sent_bytes", (int64_t)pipe_sent);
        auto log_array = [&](const char* key, const std::vector<double>& v) {
            const std::vector<float> f(v.begin(), v.end());
            logger_float_array(lg, key, f.data(), (int)f.size());
        };
        log_array("pp_bubble", bubble.bubble);
        logger_float(lg, "pp_bubble_formula", (float)bubble.formula);
        log_array("pp_bubble_seconds", bubble.seconds);
        log_array("pp_loop_ms", bubble.loop_ms);
        log_array("pp_busy_ms", bubble.busy_ms);
        log_array("pp_wait_ms", bubble.wait_ms);
        logger_float(lg, "pp_wait_off_ms", (float)bubble.wait_off_ms);
        logger_float(lg, "pp_overrun_ms", (float)bubble.overrun_ms);
        if (bubble.time_steps > 0) logger_int(lg, "pp_time_steps", (int64_t)bubble.time_steps);
    }
    if (tp->traffic) {
        logger_object_begin(lg, "tp_comm_bytes");
        for (int k = 0; k < NUM_COMM_KINDS; k++)
            logger_int(lg, COMM_KIND_NAMES[k], (int64_t)tp->traffic->bytes[k]);
        logger_object_end(lg);
        logger_object_begin(lg, "tp_comm_calls");
        for (int k = 0; k < NUM_COMM_KINDS; k++)
            logger_int(lg, COMM_KIND_NAMES[k], (int64_t)tp->traffic->calls[k]);
        logger_object_end(lg);
    }
    if (logger_end(lg) != 0) fatal("%s", lg->error);
}

// Appends to out the ranks r in [from, n) whose masks[r] has bit `bit`, as "3, 5-7".
inline void append_rank_list(char* out, size_t len, const FlagMask* masks, int from, int n,
                             int bit) {
    auto has = [&](int r) { return r < n && flag_mask_has(&masks[r], bit); };
    const char* sep = "";
    for (int r = from; r < n; r++) {
        if (!has(r)) continue;
        int last = r;
        while (has(last + 1)) last++;
        const size_t used = strlen(out);
        if (last == r) snprintf(out + used, len - used, "%s%d", sep, r);
        else snprintf(out + used, len - used, "%s%d-%d", sep, r, last);
        sep = ", ";
        r = last;
    }
}

// Every rank must run with rank 0's configuration: ranks started with other flags (an MPMD
// launch, a script that differs per node) would issue other collectives and hang, or train
// something else. Rank 0's resolved configuration goes to every rank, which names each flag
// where it differs; then every rank learns which flags differ where (a bit per flag from each
// rank, and a flag's value on the first rank where it differs), so that the message all ranks
// stop with, rank 0's included, names every difference. Called before any work.
inline void check_ranks_agree(const Comm* comm, const TrainConfig* tc) {
    if (comm->world == 1) return;
    char build[64], root_build[64];  // the same struct layout and precision first
    snprintf(build, sizeof(build), "%s build, TrainConfig of %zu bytes", PRECISION_NAME,
             sizeof(TrainConfig));
    memcpy(root_build, build, sizeof(build));
    comm_broadcast(&comm->all, root_build, sizeof(root_build), 0);
    double other_builds = strcmp(build, root_build) != 0;
    comm_sum_scalars(&comm->all, &other_builds, 1);
    if (other_builds > 0)
        fatal("rank %d: the ranks run different builds of train_gpt (here: %s; rank 0: %s)",
              comm->rank, build, root_build);
    TrainConfig root = *tc;
    comm_broadcast(&comm->all, &root, sizeof(root), 0);
    char diff[4096] = "";
    const unsigned every_role = (1u << FLAG_IDENTITY) | (1u << FLAG_PER_RANK) | (1u << FLAG_FREE);
    if (flags_differences(FLAGS, NUM_FLAGS, &root, tc, every_role, "on rank 0", "here", diff,
                          sizeof(diff)) > 0)
        fprintf(stderr, "error: rank %d was started with other flags than rank 0:%s\n", comm->rank,
                diff);
    static_assert(NUM_FLAGS <= FLAG_MASK_BITS, "a rank's differing flags travel as a FlagMask");
    const FlagMask mine = flags_difference_mask(FLAGS, NUM_FLAGS, &root, tc, every_role);
    std::vector<FlagMask> masks(comm->world);
    comm_allgather_host(&comm->all, &mine, sizeof(mine), masks.data(),
                        "the ranks' differing flags");
    char named[4096] = "";
    int differences = 0;
    for (int i = 0; i < NUM_FLAGS; i++) {
        int first = 0;
        while (first < comm->world && !flag_mask_has(&masks[first], i)) first++;
        if (first == comm->world) continue;
        differences++;
        char value[600], root_value[600];
        flag_format(&FLAGS[i], tc, value, sizeof(value));
        comm_broadcast(&comm->all, value, sizeof(value), first);
        flag_format(&FLAGS[i], &root, root_value, sizeof(root_value));
        size_t used = strlen(named);
        snprintf(named + used, sizeof(named) - used, "\n  %s: %s on rank 0, %s on rank %d",
                 FLAGS[i].name, root_value, value, first);
        if (first + 1 < comm->world) {
            char more[512] = "";
            append_rank_list(more, sizeof(more), masks.data(), first + 1, comm->world, i);
            used = strlen(named);
            if (more[0])
                snprintf(named + used, sizeof(named) - used, " (it differs on ranks %s too)", more);
        }
    }
    if (differences > 0)
        fatal(
            "rank %d: the ranks were started with different flags (%d difference%s; every rank "
            "must get the same command line):%s",
            comm->rank, differences, differences == 1 ? "" : "s", named);
}

// =============================================================================================
// The training run, in steps: train_main checks the command line and makes the grid;
// run_setup opens the data and builds the model; run_resume loads a checkpoint; run_start
// opens the log and describes the run; then for each step train_step, log_step and
// after_step (validation, samples, checkpoints); run_end.

// One rank's training run: what run_setup makes and the steps use.
struct Run {
    const Comm* comm;
    const TrainConfig* tc;
    const ParallelDims* dims;  // the grid, its groups made
    const Tokenizer* tok;      // nullptr: none (no samples)
    TrainData data;
    std::vector<char> run_config;  // the checkpoints' run_config section
    OptimizerConfig opt;
    ScheduleConfig sched;
    DeviceLedger plan;  // the model's memory plan
    size_t allocated;   // the device memory building the model took (cudaMemGetInfo)
    GPT model;
    RunState rs;
    Logger lg;
    int *inputs, *targets;   // a step's tokens on this rank
    size_t tokens_per_step;  // of every rank
    double flops_per_step;
    double val_loss;  // the last validation's (-1: none yet)
    FaultPlan faults;     // --inject-fault
    Stability stability;  // the spike window, skips, spikes and rewinds (llmc/stability.h)
};

// Opens the data and builds the model on grid `dims`, its parameters drawn from --seed.
inline void run_setup(Run* run, const Comm* comm, const TrainConfig* tc, const ParallelDims* dims,
                      const Tokenizer* tok) {
    run->comm = comm;
    run->tc = tc;
    run->dims = dims;
    run->tok = tok;
    char msg[256];
    if (const char* err = fault_parse(tc->inject_fault, &run->faults, msg, sizeof(msg)))
        fatal("%s", err);  // train_config_check took it already
    stability_init(&run->stability, tc->spike_window, tc->spike_zscore);
    const GPTConfig* c = &tc->model;
    const int B = tc->batch, T = tc->seq, A = tc->grad_accum;
    run->sched = {schedule_from_name(tc->schedule),
                  tc->lr,
                  tc->warmup,
                  tc->min_lr_frac,
                  tc->decay_frac,
                  tc->steps};

    // Data first: a bad shard stops the run before anything is written.
    // every rank of a tensor-parallel group reads the same tokens: its data-parallel replica's
    const CommGroup* dp = dims->dp_group;
    train_data_open(&run->data, tc->data, c->vocab, B, T, A, (uint64_t)tc->seed, dp->rank,
                    dp->size);
    // The checkpoint folder belongs to this run from here to its exit (rank 0 writes it); taking
    // it also proves it can be written, before any step is trained.
    if (tc->checkpoint_dir[0] && comm->rank == 0) {
        char err[CKPT_ERROR_BYTES];
        if (ckpt_lock_for_process(tc->checkpoint_dir, err, sizeof(err)) != 0) fatal("%s", err);
    }
    run->run_config = run_config_section(tc, dp->size);

    // The memory plan first: the model built without allocating, by the code that allocates,
    // so a run that cannot fit stops here with the numbers; then the model, measured.
    run->opt = optimizer_config_of(tc);
    run->plan = plan_model(tc, &run->opt, dims);
    size_t free_before = 0, free_after = 0, device_total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_before, &device_total));
    if (ledger_total(&run->plan) > free_before)
        fatal(
            "rank %d: the model needs %zu bytes of device memory (--plan shows where they go), "
            "the device has %zu of %zu free: use a smaller --batch, --recompute selective or "
            "full, a higher --zero, or more ranks",
            comm->rank, ledger_total(&run->plan), free_before, device_total);
    gpt_build(&run->model, c, &run->opt, B, T / tc->cp, (uint64_t)tc->seed, *dims,
              recompute_from_name(tc->recompute), false, monitor_config_of(tc));
    run->model.pipe.cost_ms = tc->pp_cost_ms;
    run->model.pipe.transfer_ms = tc->pp_cost_transfer_ms;
    CUDA_CHECK(cudaMemGetInfo(&free_after, &device_total));
    run->allocated = free_before - free_after;
    if (tc->init_from[0]) load_pretrained(&run->model, tc->init_from);
    else gpt_init_random(&run->model, (uint64_t)tc->seed);
    run->rs = {0, 0, run->model.seed, (uint64_t)tc->seed ^ 0x2545f4914f6cdd1dull,
               run->data.token_rng};
}

// Loads checkpoint `path` into the run, verified: the model, its optimizer state, the data's
// position and the stability state. Every rank calls it with the same path.
inline void run_load(Run* run, const char* path) {
    const TrainConfig* tc = run->tc;
    CheckpointConfig cc = checkpoint_config_of(&tc->model);
    CheckpointReader reader;
    if (ckpt_open(&reader, path, &cc, sizeof(cc), CHECKPOINT_FIELDS, NUM_CHECKPOINT_FIELDS) != 0)
        fatal("%s", reader.error);
    check_run_config(&reader, tc, run->dims->dp_group->size);
    TrainData* data = &run->data;
    DataLoaderState ds;
    run->rs = load_checkpoint(&run->model, &reader, data->shards ? &ds : nullptr);
    std::vector<uint8_t> stability;  // a checkpoint without it: an empty window, no history
    stability_init(&run->stability, tc->spike_window, tc->spike_zscore);
    if (manifest_section(&reader, "spikes", &stability) &&
        !stability_load(&run->stability, stability))
        fatal("checkpoint %s: its spike window does not fit --spike-window %d", path,
              tc->spike_window);
    ckpt_close(&reader);
    if (data->shards && dataloader_restore(&data->train, &ds) != 0)
        fatal("%s: %s", path, data->train.error);
    data->token_rng = run->rs.token_rng;
}

// --resume: loads the checkpoint before the log or any checkpoint is touched. Returns whether
// one was loaded. Rank 0 picks the checkpoint and every rank loads that file, so all start from
// one state; the loader's saved position is that of the global batch, the same for every rank.
inline bool run_resume(Run* run) {
    const TrainConfig* tc = run->tc;
    if (!tc->resume[0]) return false;
    char path[CKPT_PATH_BYTES] = "";
    const bool latest = strcmp(tc->resume, "latest") == 0;
    const char* spec = latest ? tc->checkpoint_dir : tc->resume;
    if (run->comm->rank == 0 && !(latest ? latest_checkpoint(spec, UINT64_MAX, path, sizeof(path))
                                         : find_checkpoint(spec, path, sizeof(path))))
        path[0] = '\0';
    comm_broadcast(&run->comm->all, path, sizeof(path), 0);
    if (!path[0]) {
        printf("no checkpoint in %s: starting at step 0\n", spec);
        return false;
    }
    run_load(run, path);
    if (run->rs.step > (uint64_t)tc->steps)
        fatal("checkpoint %s is at step %llu, past --steps %d", path,
              (unsigned long long)run->rs.step, tc->steps);
    printf("resuming from %s at step %llu%s\n", path, (unsigned long long)run->rs.step,
           run->stability.rewinds > 0 ? " (after a rewind)" : "");
    return true;
}

// Opens the log (appending to it when resumed), describes the run on standard output and, for
// a new one, in the log's header, and validates at step 0.
inline void run_start(Run* run, bool resumed) {
    const TrainConfig* tc = run->tc;
    const GPTConfig* c = &tc->model;
    const GPT* model = &run->model;
    const int B = tc->batch, T = tc->seq, A = tc->grad_accum;
    const CommGroup* dp = run->dims->dp_group;
    const double unigram = run->data.unigram;
    Logger* lg = &run->lg;
    memset(lg, 0, sizeof(*lg));
    if (tc->log[0] && run->comm->rank == 0 &&
        logger_open(lg, tc->log, resumed ? (int64_t)run->rs.step : -1, run->stability.rewinds) != 0)
        fatal("%s", lg->error);

    const size_t parameters = count_parameters(&model->layout, c);
    printf(
        "train_gpt (%s): V %d (padded %d) maxT %d L %d NH %d C %d | B %d T %d A %d ranks %d (dp %d "
        "x cp %d x tp %d%s) | %zu parameters | %s | attention on %s\n",
        PRECISION_NAME, c->vocab, c->padded_vocab, c->context, c->layers, c->heads, c->channels, B,
        T, A, run->comm->world, dp->size, run->dims->cp, run->dims->tp,
        model->tensor_parallel.sequence ? ", sequence parallel" : "", parameters,
        tc->data[0] ? tc->data : "random tokens", attention_path_name(ATTENTION_PATH));
#ifdef __CUCC__
    printf("CPU runtime: cuBLASLt on %s\n", cucc_blas_description());
#endif
    if (run->data.shards)
        printf(
            "data: %lld train batches per epoch, %lld val batches | unigram baseline val loss "
            "%.4f\n",
            (long long)run->data.train.batches_per_epoch,
            (long long)run->data.val.batches_per_epoch, unigram);
    print_state_bytes(model);
    print_fp8(model);
    printf(
        "activations: %.2f MiB for B %d x T %d (recompute %s: %.2f MiB saved, %.1f%% more "
        "FLOPs per token)\n",
        model->activation_bytes / 1048576.0, B, T, tc->recompute,
        model->recompute_saved_bytes / 1048576.0,
        100.0 * recompute_flops_per_token(c, T, model->acts.recompute) / flops_per_token(c, T));
    print_rank_state_bytes(model, &run->comm->all, parameters);
    const size_t planned = ledger_total(&run->plan);
    printf(
        "device memory: planned %zu bytes, allocated %zu (cudaMemGetInfo before and after the "
        "model), difference %+.3f%%\n",
        planned, run->allocated,
        100.0 * ((double)run->allocated - (double)planned) / (double)planned);
    // the log describes the run as it started: a resumed run appends to it, changing neither
    if (lg->file && lg->needs_header) {
        log_header(lg, tc, parameters, unigram, dp->size, model, &run->plan);
        logger_begin_step(lg, (int64_t)run->rs.step);
        logger_int(lg, "allocated_bytes", (int64_t)run->allocated);
        logger_int(lg, "planned_bytes", (int64_t)planned);
        if (logger_end(lg) != 0) fatal("%s", lg->error);
    }
    run->val_loss = -1.0;
    if (run->data.shards && tc->val_every > 0 && run->rs.step == 0)
        run_validation(&run->model, &run->data, tc, lg, 0, unigram);

    const size_t rank_tokens =
        (size_t)A * B * T;  // per rank and step; tokens/s and MFU count every rank
    run->tokens_per_step = rank_tokens * dp->size;
    run->flops_per_step = flops_per_token(c, T) * run->tokens_per_step;
    run->inputs = (int*)MALLOC_CHECK(rank_tokens * sizeof(int));
    run->targets = (int*)MALLOC_CHECK(rank_tokens * sizeof(int));
}

// What one optimizer step did: its line and log record (log_step).
struct StepStats {
    int step;             // steps done, this one included
    double loss, z_loss;  // the global batch's mean cross-entropy and z-loss term
    float norm;           // the global gradient norm, before clipping
    bool clipped;         // whether --grad-clip scaled the gradient down
    double lrs[NUM_OPTIMIZERS];
    double seconds, tokens_per_s, mfu;  // tokens/s and MFU of every rank
    char skipped[256];                  // why the update was not taken ("": it was)
    bool rewind;                        // --spike-rewind's count of spikes was reached
};

// Trains step `step` (0-based) on the next global batch.
inline StepStats train_step(Run* run, int step) {
    const TrainConfig* tc = run->tc;
    GPT* model = &run->model;
    StepStats s = {};
    s.step = step + 1;
    Stability* stab = &run->stability;
    const Fault* injected =
        fault_here(&run->faults, s.step, run->comm->rank, run->dims->tp, stab->furthest);
    const int fault = injected ? injected->kind : FAULT_NONE;
    if (fault == FAULT_KILL) raise(SIGKILL);
    train_data_next(&run->data, run->inputs, run->targets, tc->grad_accum, tc->batch, tc->seq,
                    tc->model.vocab);
    if (fault == FAULT_BAD_BATCH)  // micro-batch 0: its first token over and over
        for (int i = 0; i < tc->batch * tc->seq; i++)
            run->inputs[i] = run->targets[i] = run->inputs[0];
    // context parallelism: this rank's positions of every sequence (cp_local_tokens), each
    // micro-batch moved to the front in place (a token never moves to a later index)
    for (int micro = 0; micro < tc->grad_accum && model->cp.size > 1; micro++) {
        const size_t whole = (size_t)micro * tc->batch * tc->seq,
                     local = (size_t)micro * tc->batch * model->T;
        cp_local_tokens(&model->cp, run->inputs + whole, run->inputs + local, tc->batch, tc->seq);
        cp_local_tokens(&model->cp, run->targets + whole, run->targets + local, tc->batch, tc->seq);
    }
    const float first_scale = fault == FAULT_NAN_GRAD     ? NAN
                              : fault == FAULT_LOSS_SCALE ? (float)injected->scale
                                                          : 1.0f;
    auto start = std::chrono::steady_clock::now();
    s.loss = gpt_forward_backward(model, run->inputs, run->targets, tc->grad_accum, &s.z_loss,
                                  first_scale);
    // Data parallel: the backward pass left the gradients' mean over the ranks (model->dp),
    // so the norm, clipping and the optimizers see the global batch's gradient on every rank
    // and the parameters stay identical; the losses become the global batch's too.
    // (under context parallelism the mean over the shard group, dp x cp: every rank's positions)
    s.loss = comm_mean(model->dp.group, s.loss);
    s.z_loss = comm_mean(model->dp.group, s.z_loss);
    s.norm = gpt_grad_norm(model);
    // Every rank holds the same loss and norm, so all decide alike (llmc/stability.h): a
    // non-finite step is skipped, --max-skips of them in a row stop the run before the update,
    // and the checkpoints on disk stay those of finite steps.
    const bool finite = std::isfinite(s.loss) && std::isfinite(s.norm);
    stab->skips_in_row = finite ? 0 : stab->skips_in_row + 1;
    if (stab->skips_in_row > tc->max_skips)
        fatal(
            "step %d: the loss is %g and the gradient norm %g: training diverged (%d non-finite "
            "steps in a row, --max-skips %d); stopping before the update (try a lower --lr, "
            "warmup or --grad-clip)",
            step + 1, s.loss, s.norm, stab->skips_in_row, tc->max_skips);
    step_learning_rates(&run->sched, muon_peak_lr(tc), step, s.lrs);
    if (!finite)
        snprintf(s.skipped, sizeof(s.skipped), "the loss or the gradient norm is not finite");
    else if (fault == FAULT_SKIP) snprintf(s.skipped, sizeof(s.skipped), "--inject-fault skip");
    else if (spike_check(stab, s.loss, s.norm, s.skipped, sizeof(s.skipped)))
        s.rewind = spike_note(stab, s.step, tc->spike_rewind);
    else spike_add(stab, s.loss, s.norm);
    stab->furthest = std::max(stab->furthest, (int32_t)s.step);
    if (s.skipped[0]) {
        gpt_skip_update(model);
        stab->skips++;
    } else {
        const double scale = clip_scale(s.norm, tc->grad_clip);
        s.clipped = scale < 1.0;
        gpt_update(model, s.lrs, scale);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    s.tokens_per_s = run->tokens_per_step / s.seconds;
    s.mfu = 100.0 * run->flops_per_step / s.seconds / (tc->peak_flops * run->comm->world);
    return s;
}

// One value of a step's line and log record.
enum StepValueKind { STEP_FLOAT, STEP_INT, STEP_TEXT };
struct StepValue {
    const char* shown;  // its printf format in the step's line; nullptr: logged only
    const char* key;    // its key in the log
    int kind;           // StepValueKind: logged as a float, an integer or text
    double number;      // STEP_FLOAT, STEP_INT (whole, below 2^53)
    const char* text;   // STEP_TEXT
    bool present;       // whether this run has it
};

// The monitors' per-layer and per-group values of the step that just ended (train_gpt.cu's
// Monitors): printed after the step's line with --print-monitors (print != 0), or logged.
inline void step_monitor_lists(Run* run, const StepStats* s, Logger* lg, bool print) {
    const TrainConfig* tc = run->tc;
    const GPT* m = &run->model;
    const int L = tc->model.layers;
    std::vector<float> values(L + 2);
    if (tc->log_attn_logits) {
        for (int l = 0; l < L; l++) values[l] = gpt_monitor_attn_logit_max(m, l);
        if (print) {
            printf(" | attn max by layer");
            for (int l = 0; l < L; l++) printf(" %.3f", values[l]);
        } else {
            logger_float_array(lg, "attn_logit_max_layers", values.data(), L);
        }
    }
    if (tc->log_layer_norms) {  // blocks, the embeddings, lnf
        for (int e = 0; e < L + 2; e++) values[e] = sqrtf(m->mon.layer_sq[e]);
        if (print) {
            printf(" | grad norms");
            for (int l = 0; l < L; l++) printf(" h%d %.4f", l, values[l]);
            printf(" emb %.4f lnf %.4f", values[L], values[L + 1]);
        } else {
            logger_float_array(lg, "grad_norm_layers", values.data(), L + 2);
        }
    }
    if (tc->log_update_ratio && !s->skipped[0]) {  // a skipped step has no update
        if (print) printf(" | update/weight");
        else logger_object_begin(lg, "update_ratio");
        for (int g = 0; g < NUM_UPDATE_GROUPS; g++) {
            const double ratio = gpt_monitor_update_ratio(m, g);
            if (print) printf(" %s %.3e", UPDATE_GROUP_NAMES[g], ratio);
            else logger_float(lg, UPDATE_GROUP_NAMES[g], (float)ratio);
        }
        if (!print) logger_object_end(lg);
    }
}

// Prints the step's line and appends its log record, both from one list of values.
inline void log_step(Run* run, const StepStats* s) {
    const TrainConfig* tc = run->tc;
    const GPT* m = &run->model;
    const bool z_loss = tc->model.z_loss > 0.0, muon = run->opt.kind == OPT_MUON;
    const bool recompute = m->acts.recompute != RECOMPUTE_NONE;
    const int L = tc->model.layers;
    // the monitors' values in the line with --print-monitors only (the log has them always)
    auto shown = [&](const char* format) { return tc->print_monitors ? format : nullptr; };
    const StepValue values[] = {
        {" | loss %.6f", "train_loss", STEP_FLOAT, s->loss, nullptr, true},
        {" | z-loss %.6f", "z_loss", STEP_FLOAT, s->z_loss, nullptr, z_loss},
        {" | lr %.4e", "lr", STEP_FLOAT, s->lrs[OPT_ADAMW], nullptr, true},
        {" | muon lr %.4e", "muon_lr", STEP_FLOAT, s->lrs[OPT_MUON], nullptr, muon},
        {" | norm %.4f", "grad_norm", STEP_FLOAT, s->norm, nullptr, true},
        {nullptr, "clipped", STEP_INT, (double)s->clipped, nullptr, tc->grad_clip > 0.0},
        {shown(" | attn max %.3f"), "attn_logit_max", STEP_FLOAT, gpt_monitor_attn_logit_max(m, L),
         nullptr, true},
        {shown(" | logZ mean %.4f"), "log_z_mean", STEP_FLOAT, gpt_monitor_log_z_mean(m), nullptr,
         true},
        {shown(" max %.4f"), "log_z_max", STEP_FLOAT, gpt_monitor_log_z_max(m), nullptr, true},
        {nullptr, "recompute", STEP_TEXT, 0.0, tc->recompute, recompute},
        {nullptr, "recompute_saved_bytes", STEP_INT, (double)m->recompute_saved_bytes, nullptr,
         recompute},
        {" | %.1f ms", "ms", STEP_FLOAT, s->seconds * 1e3, nullptr, true},
        {" | %.0f tok/s", "tok_per_s", STEP_FLOAT, s->tokens_per_s, nullptr, true},
        {" | MFU %.1f%%", "mfu", STEP_FLOAT, s->mfu, nullptr, ON_GPU},
        {" | update skipped", "skipped", STEP_INT, 1.0, nullptr, s->skipped[0] != '\0'},
        {nullptr, "skip_reason", STEP_TEXT, 0.0, s->skipped, s->skipped[0] != '\0'},
        {nullptr, "skips", STEP_INT, (double)run->stability.skips, nullptr,
         run->stability.skips > 0},
    };
    printf("step %5d/%d", s->step, tc->steps);
    for (const StepValue& v : values)
        if (v.present && v.shown) printf(v.shown, v.number);
    if (tc->print_monitors) step_monitor_lists(run, s, nullptr, true);
    printf("\n");
    fflush(stdout);
    Logger* lg = &run->lg;
    if (!lg->file) return;
    logger_begin_step(lg, s->step);
    for (const StepValue& v : values) {
        if (!v.present) continue;
        if (v.kind == STEP_FLOAT) logger_float(lg, v.key, (float)v.number);
        else if (v.kind == STEP_INT) logger_int(lg, v.key, (int64_t)v.number);
        else logger_string(lg, v.key, v.text, strlen(v.text));
    }
    step_monitor_lists(run, s, lg, false);
    if (logger_end(lg) != 0) fatal("%s", lg->error);
}

// After step `done` (1-based): validation, samples and checkpoints when they are due.
inline void after_step(Run* run, int done) {
    const TrainConfig* tc = run->tc;
    GPT* model = &run->model;
    const CommGroup* dp = run->dims->dp_group;
    run->rs.step = (uint64_t)done;
    run->rs.opt_step = (uint64_t)model->opt_step;
    const bool last = done == tc->steps;
    if (run->data.shards && tc->val_every > 0 && (done % tc->val_every == 0 || last))
        run->val_loss = run_validation(model, &run->data, tc, &run->lg, done, run->data.unigram);
    // under ZeRO-3 every rank runs the forward passes of generation (they gather the
    // parameters), else the tensor-, pipeline- and context-parallel groups of data-parallel
    // rank 0; only rank 0's output is seen
    const bool samples_here = dp->rank == 0 || model->dp.stage == 3;
    if (run->tok && tc->sample_len > 0 && samples_here &&
        ((tc->sample_every > 0 && done % tc->sample_every == 0) || last))
        run_sample(model, run->tok, tc, &run->lg, done, &run->rs.sample_rng);
    if (tc->checkpoint_dir[0] &&
        ((tc->checkpoint_every > 0 && done % tc->checkpoint_every == 0) || last)) {
        run->rs.token_rng = run->data.token_rng;
        const Stability* stab = &run->stability;
        const std::vector<uint8_t> stability = stability_save(stab);
        const RunSection sections[] = {
            {"run_config", run->run_config.data(), run->run_config.size()},
            {"spikes", stability.data(), stability.size()}};
        // with rewinds on, pruning keeps the checkpoint a rewind over the recent spikes needs
        const uint64_t keep_before =
            tc->spike_rewind > 0 && !stab->spikes.empty() ? (uint64_t)stab->spikes.front() : 0;
        save_checkpoint(model, &run->comm->all, tc->checkpoint_dir, tc->keep_checkpoints,
                        keep_before, &run->rs, run->data.shards ? &run->data.train : nullptr,
                        sections, 2);
        printf("checkpoint: %s/ckpt_step%08d.bin\n", tc->checkpoint_dir, done);
    }
}

// --spike-rewind: the spikes of step `from` and the steps before it call for a rewind. Goes back
// to the newest checkpoint from before the first of them (rank 0 finds it, every rank loads it)
// and skips --spike-skip-batches global batches of data after it; the rewind count, the furthest
// step and the skip count carry on (the run's history). Prints and logs what it did, as the
// first line of the new timeline. Returns the step training continues after: the checkpoint's,
// or `from` when there is none to go back to (the spike was skipped; the run goes on).
inline int run_rewind(Run* run, int from) {
    const TrainConfig* tc = run->tc;
    Stability* stab = &run->stability;
    const int first_spike = stab->spikes.front();
    std::string spikes;
    for (int32_t step : stab->spikes) spikes += (spikes.empty() ? "" : ", ") + std::to_string(step);
    char path[CKPT_PATH_BYTES] = "";
    if (run->comm->rank == 0 &&
        !latest_checkpoint(tc->checkpoint_dir, (uint64_t)first_spike, path, sizeof(path)))
        path[0] = '\0';
    comm_broadcast(&run->comm->all, path, sizeof(path), 0);
    if (!path[0]) {
        printf(
            "rewind: %d spikes within the last %d steps (steps %s), but %s holds no checkpoint "
            "from before step %d: the run goes on\n",
            (int)stab->spikes.size(), stab->window, spikes.c_str(), tc->checkpoint_dir,
            first_spike);
        stab->spikes.clear();
        return from;
    }
    if (stab->rewinds >= tc->max_rewinds)
        fatal(
            "step %d: %d spikes within the last %d steps (steps %s) call for rewind %d, past "
            "--max-rewinds %d: skipping data has not stopped the spikes (try a lower --lr, "
            "longer warmup or --grad-clip)",
            from, (int)stab->spikes.size(), stab->window, spikes.c_str(), stab->rewinds + 1,
            tc->max_rewinds);
    const Stability history = *stab;
    run_load(run, path);
    stab->rewinds = history.rewinds + 1;
    stab->furthest = history.furthest;
    stab->skips = history.skips;
    const int to = (int)run->rs.step;
    const int skip = tc->spike_skip_batches == FLAG_WORD ? from - to : tc->spike_skip_batches;
    for (int i = 0; i < skip; i++)
        train_data_next(&run->data, run->inputs, run->targets, tc->grad_accum, tc->batch, tc->seq,
                        tc->model.vocab);
    printf(
        "rewind %d: %d spikes within the last %d steps (steps %s): back to step %d (%s), "
        "skipping %d global batches; steps %d to %d are trained again\n",
        stab->rewinds, (int)history.spikes.size(), stab->window, spikes.c_str(), to, path, skip,
        to + 1, from);
    fflush(stdout);
    Logger* lg = &run->lg;
    if (lg->file) {
        lg->rewinds = stab->rewinds;
        logger_begin_step(lg, to);
        logger_int(lg, "rewind_from", from);
        logger_string(lg, "rewind_spikes", spikes.data(), spikes.size());
        logger_string(lg, "rewind_checkpoint", path, strlen(path));
        logger_int(lg, "rewind_skipped_batches", skip);
        if (logger_end(lg) != 0) fatal("%s", lg->error);
    }
    return to;
}

// The end of the run: the last validation against the baseline, the replicas' check, the
// log closed, everything freed.
inline void run_end(Run* run) {
    const double val_loss = run->val_loss, unigram = run->data.unigram;
    if (val_loss >= 0.0)
        printf("final val loss %.4f | unigram baseline %.4f | %.1f%% %s the baseline\n", val_loss,
               unigram, 100.0 * fabs(1.0 - val_loss / unigram),
               val_loss <= unigram ? "below" : "above");
    check_replicas(run->comm, &run->model);
    if (run->lg.file && logger_close(&run->lg) != 0) fatal("%s", run->lg.error);
    free(run->inputs);
    free(run->targets);
    train_data_free(&run->data);
    gpt_free(&run->model);
}

// Trains (or samples, with --sample) as one rank of `comm`.
inline int train_main(const Comm* comm, TrainConfig* config, const char* prog) {
    TrainConfig& tc = *config;
    char msg[512];
    if (tc.help) {
        print_usage(stdout, prog);
        return EXIT_SUCCESS;
    }
    if ((tc.sample[0] || tc.export_hf[0]) && comm->world > 1)
        fatal("%s runs as a single process, not under an MPI launcher",
              tc.sample[0] ? "--sample" : "--export-hf");
    Tokenizer tok;
    const bool have_tokenizer = load_tokenizer(&tc, &tok);
    if (tc.init_from[0] && !tc.export_hf[0] && !tc.sample[0])
        init_from_shape(&tc, have_tokenizer ? &tok : nullptr);
    if (have_tokenizer && tc.model.vocab != 0 && tc.model.vocab != tok.vocab_size && !tc.sample[0])
        fatal("--vocab %d differs from the tokenizer's vocabulary of %d tokens", tc.model.vocab,
              tok.vocab_size);
    if (tc.model.vocab == 0) tc.model.vocab = have_tokenizer ? tok.vocab_size : 50257;
    if (const char* err = train_config_check(&tc, msg, sizeof(msg))) fatal("%s", err);
    if (tc.pp_print_schedule) {  // needs no ranks: the schedule is data (llmc/pipeline.h)
        const PipeConfig c = pipe_config_of(&tc);
        if (const char* err = pipe_config_check(&c, msg, sizeof(msg))) fatal("%s", err);
        if (comm->rank == 0) pipe_print_schedule(stdout, &c);
        return EXIT_SUCCESS;
    }
    check_ranks_agree(comm, &tc);
    // The grid is checked before any group is made, and again once --batch auto is fitted.
    const int plan_world = tc.plan && tc.plan_ranks > 0 ? tc.plan_ranks : comm->world;
    ParallelDims dims = grid_of(&tc, plan_world);
    check_grid(&tc, &dims, plan_world == comm->world ? comm->local_world : 0);
    if (tc.plan) {
        if (have_tokenizer) tokenizer_free(&tok);
        return plan_main(&tc, comm, &dims);
    }
    GridGroups groups;
    comm_grid_groups(comm, comm->rank, comm->all.timeout_s, &dims, &groups);
    if (!tc.sample[0]) fit_batch(&tc, comm, &dims);
    dims.pp_micro_batches = tc.grad_accum;  // --global-batch-tokens may have set it
    check_grid(&tc, &dims, comm->local_world);
    if (tc.sample[0] || tc.export_hf[0]) {
        const Tokenizer* t = have_tokenizer ? &tok : nullptr;
        const int status = tc.sample[0] ? sample_main(&tc, t) : export_main(&tc, t);
        if (have_tokenizer) tokenizer_free(&tok);
        return status;
    }

    Run run{};
    run_setup(&run, comm, &tc, &dims, have_tokenizer ? &tok : nullptr);
    run_start(&run, run_resume(&run));
    const int first_step = (int)run.rs.step;
    if (tc.dump_logits[0]) dump_logits(&run.model, &run.data.val, comm->rank, tc.dump_logits);
    const int last_step = tc.dump_logits[0] ? first_step : tc.steps;  // (--dump-logits: no step)
    for (int step = first_step; step < last_step; step++) {
        const bool count_traffic = tc.comm_stats && step == first_step && comm->all.traffic;
        const CommGroup* counted[4] = {&comm->all, dims.dp_group, dims.tp_group, dims.cp_group};
        if (count_traffic) {
            for (const CommGroup* g : counted)
                if (g->traffic) memset(g->traffic, 0, sizeof(CommTraffic));
            run.model.pipe.sent_bytes = 0.0;
            run.model.cp.pairs = 0.0;
        }
        const StepStats stats = train_step(&run, step);
        log_step(&run, &stats);
        if (count_traffic)
            report_traffic(&run.lg, &comm->all, dims.dp_group, dims.tp_group, dims.pp_group,
                           &run.model.pipe, &run.model.cp, stats.step);
        const int done = stats.rewind ? run_rewind(&run, stats.step) : stats.step;
        if (done == stats.step) after_step(&run, done);
        else step = done - 1;  // the loop's step++ makes it `done`: step done + 1 comes next
    }
    run_end(&run);
    if (have_tokenizer) tokenizer_free(&tok);
    comm_grid_free(&groups);
    return EXIT_SUCCESS;
}

#ifndef TRAIN_GPT_NO_MAIN
int main(int argc, char** argv) {
    // The flags first: they hold the deadline of the collectives (--comm-timeout), which starts
    // with comm_init's. Errors are reported after comm_init, on every rank.
    TrainConfig tc;
    train_config_defaults(&tc);
    char msg[512], unused[512];
    const char* parse_error = flags_parse(FLAGS, NUM_FLAGS, &tc, argc, argv, msg, sizeof(msg));
    TrainConfig defaults;
    train_config_defaults(&defaults);
    const bool flags_ok = parse_error == nullptr &&
                          flags_check(FLAGS, NUM_FLAGS, &tc, unused, sizeof(unused)) == nullptr;
    // Ranks next: this selects the process's GPU. Only rank 0 prints (the others' standard
    // output goes to /dev/null; errors still reach stderr), logs, samples and writes checkpoints.
    Comm comm;
    comm_init(&comm, argc, argv, flags_ok ? tc.comm_timeout : defaults.comm_timeout, tc.rendezvous);
    if (comm.rank != 0 && freopen("/dev/null", "w", stdout) == nullptr)
        fatal("cannot silence rank %d", comm.rank);
    if (parse_error) fatal("%s", parse_error);
    int status = train_main(&comm, &tc, argv[0]);
    comm_destroy(&comm);
    return status;
}
#endif
