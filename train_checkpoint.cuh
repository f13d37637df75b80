// train_checkpoint.cuh: the glue between the model of train_gpt.cu and the checkpoint files of
// llmc/checkpoint.h, included by train_run.cuh. A checkpoint is a manifest (the whole model's
// parameter table, the run state, the data position) and one shard per rank with state of its
// own, each holding ranges of the logical (whole-model) layout, so any grid and ZeRO stage can
// read what any other wrote.
// Entry points: save_checkpoint (every rank), load_checkpoint (every rank, from a manifest opened
// with ckpt_open), find_checkpoint / latest_checkpoint (which file --resume names),
// peek_checkpoint_config (sample mode: the model's shape from a file), checkpoint_config_of.
#pragma once

#include <sys/stat.h>

#include <vector>

#include "llmc/checkpoint.h"  // atomic, checksummed checkpoint files
#include "llmc/dataloader.h"  // the training loader's saved position

// Checkpoints (llmc/checkpoint.h: written atomically, checksummed, the newest N kept). One holds
// what a run needs to continue bit for bit: the parameters as the forward pass reads them, the
// fp32 master weights (bf16 build), the optimizers' state buffers (sections named as in
// STATE_BUFFERS) and the layout section that says where each tensor's part of them lies (the
// parameter table: names, shapes, offsets, optimizers), the step and the optimizer step count, the
// seed of stochastic rounding, the generators of samples and random tokens, the training
// loader's position, and under --fp8 delayed the amax histories and scales. Its configuration
// block, compared byte for byte on load, is the model's shape and precision; the loader's saved
// state checks the data, B, T and the seed itself.

struct CheckpointConfig {  // int32 fields only: no padding bytes
    int32_t vocab, padded_vocab, context, layers, heads, channels;
    int32_t floatx_bytes;  // 2: bf16 build, 4: fp32 build
};
static const CkptField CHECKPOINT_FIELDS[] = {
    {"vocab", offsetof(CheckpointConfig, vocab), CKPT_INT32},
    {"padded vocab", offsetof(CheckpointConfig, padded_vocab), CKPT_INT32},
    {"context", offsetof(CheckpointConfig, context), CKPT_INT32},
    {"layers", offsetof(CheckpointConfig, layers), CKPT_INT32},
    {"heads", offsetof(CheckpointConfig, heads), CKPT_INT32},
    {"embd", offsetof(CheckpointConfig, channels), CKPT_INT32},
    {"bytes per weight (2 bf16, 4 fp32 build)", offsetof(CheckpointConfig, floatx_bytes),
     CKPT_INT32},
};
constexpr int NUM_CHECKPOINT_FIELDS = sizeof(CHECKPOINT_FIELDS) / sizeof(CHECKPOINT_FIELDS[0]);

inline CheckpointConfig checkpoint_config_of(const GPTConfig* c) {
    return CheckpointConfig{c->vocab,    c->padded_vocab,        c->context, c->layers, c->heads,
                            c->channels, (int32_t)sizeof(floatX)};
}

struct RunState {            // section "run"
    uint64_t step;           // optimizer steps done
    uint64_t opt_step;       // GPT::opt_step (AdamW's bias correction, stochastic rounding)
    uint64_t rounding_seed;  // GPT::seed, from which each step's rounding seed derives
    uint64_t sample_rng;     // generator of the samples printed during training
    uint64_t token_rng;      // generator of random tokens (no --data)
};

// Section "fp8_delayed" (--fp8 delayed): the header, then the amax histories (count x length
// floats) and the scales (count Fp8TensorScale), as gpt_fp8_delayed_download gives them; the
// same on every rank, so the manifest holds them.
struct Fp8DelayedHeader {
    int32_t count, length, position, reserved;
};

// The bytes of section `name` of an open checkpoint into *out; false when it has none.
inline bool manifest_section(CheckpointReader* r, const char* name, std::vector<uint8_t>* out) {
    const CkptSectionInfo* info = ckpt_lookup(r, name);
    if (info == nullptr) return false;
    out->resize(info->size);
    if (ckpt_read_section(r, name, out->data(), info->size) != 0) fatal("%s", r->error);
    return true;
}

// Section "llama" (--arch llama runs): Llama's settings (LlamaConfig) as float64 values in the
// order below, so that sampling and --export-hf rebuild the model from the checkpoint alone.
inline std::vector<double> llama_section(const LlamaConfig* l) {
    return {(double)l->arch,
            (double)l->kv_heads,
            (double)l->mlp_hidden,
            (double)l->untied_head,
            l->norm_eps,
            l->rope_theta,
            (double)l->rope_scaling,
            l->rope_factor,
            l->rope_low_freq_factor,
            l->rope_high_freq_factor,
            (double)l->rope_original_context};
}

// Llama's settings from an open checkpoint's "llama" section; false when it has none (a GPT-2).
inline bool read_llama_section(CheckpointReader* r, LlamaConfig* l) {
    std::vector<uint8_t> bytes;
    if (!manifest_section(r, "llama", &bytes)) return false;
    const size_t count = llama_section(l).size();
    if (bytes.size() != count * sizeof(double))
        fatal("checkpoint %s: its llama section is malformed", r->path);
    std::vector<double> v(count);
    memcpy(v.data(), bytes.data(), bytes.size());
    *l = LlamaConfig{(int)v[0], (int)v[1], (int)v[2], (int)v[3], v[4],      v[5],
                     (int)v[6], v[7],      v[8],      v[9],      (int)v[10]};
    return true;
}

inline std::vector<uint8_t> fp8_delayed_section(const GPT* m) {
    const Fp8DelayedScaling* d = &m->fp8.delayed;
    const size_t history = sizeof(float) * d->count * d->length;
    std::vector<uint8_t> out(sizeof(Fp8DelayedHeader) + history +
                             sizeof(Fp8TensorScale) * d->count);
    const Fp8DelayedHeader h = {d->count, d->length, d->position, 0};
    memcpy(out.data(), &h, sizeof(h));
    gpt_fp8_delayed_download(m, (float*)(out.data() + sizeof(h)),
                             (Fp8TensorScale*)(out.data() + sizeof(h) + history));
    return out;
}

inline void load_fp8_delayed(GPT* m, CheckpointReader* manifest) {
    const Fp8DelayedScaling* d = &m->fp8.delayed;
    std::vector<uint8_t> bytes;
    if (!manifest_section(manifest, "fp8_delayed", &bytes))
        fatal(
            "checkpoint %s holds no FP8 delayed-scaling state (not written by an --fp8 delayed "
            "run)",
            manifest->path);
    Fp8DelayedHeader h;
    const size_t history = sizeof(float) * d->count * d->length;
    if (bytes.size() < sizeof(h))
        fatal("checkpoint %s: its fp8_delayed section is malformed", manifest->path);
    memcpy(&h, bytes.data(), sizeof(h));
    if (h.count != d->count || h.length != d->length || h.position < 0 || h.position >= h.length ||
        bytes.size() != sizeof(h) + history + sizeof(Fp8TensorScale) * d->count)
        fatal(
            "checkpoint %s: its FP8 delayed-scaling state is for %d tensors with histories of "
            "%d, this model has %d tensors with histories of %d",
            manifest->path, h.count, h.length, d->count, d->length);
    gpt_fp8_delayed_upload(m, (const float*)(bytes.data() + sizeof(h)),
                           (const Fp8TensorScale*)(bytes.data() + sizeof(h) + history), h.position);
}

// Device tensors go to and from the file through a host buffer of this size.
constexpr size_t CHECKPOINT_STAGE_BYTES = (size_t)16 << 20;

// Section "layout": the parameter table, one record per tensor in table order. A resumed run's
// table must equal it record for record, which refuses a checkpoint of another model or
// optimizer by the name of the first tensor that differs, before any state is read.
struct LayoutRecord {  // 64 bytes, no padding
    char name[32];
    int32_t rows, cols;
    int32_t optimizer;  // OptimizerKind
    int32_t matrices;   // Muon's matrices of the tensor
    uint64_t offset;    // in the parameter layout (elements)
    uint64_t numel;
};
static_assert(sizeof(LayoutRecord) == 64, "LayoutRecord has padding");

inline LayoutRecord layout_record_of(const ParamTensor* t) {
    LayoutRecord rec;
    memset(&rec, 0, sizeof(rec));
    snprintf(rec.name, sizeof(rec.name), "%s", t->name);
    rec.rows = t->rows;
    rec.cols = t->cols;
    rec.optimizer = t->optimizer;
    rec.matrices = t->matrices;
    rec.offset = t->offset;
    rec.numel = t->numel;
    return rec;
}

// Section "owned" of a shard: the ranges of the layout it holds, in its writer's state order.
// The shard's other sections hold, range after range: "params" and "master" every range's
// elements, each optimizer's state buffer the ranges of that optimizer's tensors.
struct OwnedRecord {  // 32 bytes, no padding
    uint64_t tensor, offset, n, matrix;
};

// Whether this rank's shard holds owned range r: a replicated tensor is the same on every rank of
// a tensor-parallel group, so only the group's first rank writes it (a replicated kv head: the
// first of its ranks); the tied wte is the same on the first and the last pipeline stage, so
// only the first's rank writes it.
inline bool shard_holds(const GPT* m, const OwnedRange* r) {
    return tp_first_copy(&m->layout.tensors[r->tensor].tp_shape, m->tensor_parallel.rank) &&
           pipe_holder(m, (int)r->tensor) == m->pipe.rank;
}

// Streams into section `name` the parts of device buffer `base` (elem bytes per element) that
// this rank's shard holds: index(range, &at) says whether a range has a part, at which element
// of base.
template <class Index>
void write_owned_section(CheckpointWriter* w, const GPT* m, const char* name, const void* base,
                         size_t elem, Index index, uint8_t* stage) {
    size_t bytes = 0, at;
    for (int i = 0; i < m->dp.owned_count; i++)
        if (shard_holds(m, &m->dp.owned[i]) && index(&m->dp.owned[i], &at))
            bytes += m->dp.owned[i].n * elem;
    if (ckpt_section_begin(w, name, bytes) != 0) fatal("%s", w->error);
    for (int i = 0; i < m->dp.owned_count; i++) {
        const OwnedRange* r = &m->dp.owned[i];
        if (!shard_holds(m, r) || !index(r, &at)) continue;
        for (size_t done = 0; done < r->n * elem;) {
            const size_t n = std::min(r->n * elem - done, CHECKPOINT_STAGE_BYTES);
            CUDA_CHECK(cudaMemcpy(stage, (const uint8_t*)base + at * elem + done, n,
                                  cudaMemcpyDeviceToHost));
            if (ckpt_section_write(w, stage, n) != 0) fatal("%s", w->error);
            done += n;
        }
    }
}

// This rank's shard of the checkpoint of `step`, as shard number save->index of that save.
inline void save_shard(const GPT* m, const char* dir, uint64_t step, const CkptSave* save) {
    const CheckpointConfig cc = checkpoint_config_of(&m->config);
    uint8_t* stage = (uint8_t*)MALLOC_CHECK(CHECKPOINT_STAGE_BYTES);
    CheckpointWriter w;
    if (ckpt_writer_begin_part(&w, dir, step, save, &cc, sizeof(cc)) != 0) fatal("%s", w.error);
    // the ranges in the logical layout: a range of a tensor-parallel part is one record per run
    // of it that is contiguous in the whole tensor (its elements are written in local order,
    // which is the runs' order)
    std::vector<OwnedRecord> records;
    for (int i = 0; i < m->dp.owned_count; i++) {
        const OwnedRange* r = &m->dp.owned[i];
        if (!shard_holds(m, r)) continue;
        const ParamTensor* t = &m->layout.tensors[r->tensor];
        const size_t base = m->logical.tensors[r->tensor].offset;
        tp_local_runs(&t->tp_shape, m->tensor_parallel.rank, m->tensor_parallel.size,
                      r->offset - t->offset, r->n, [&](size_t logical, size_t, size_t n) {
                          records.push_back(OwnedRecord{(uint64_t)r->tensor, base + logical, n,
                                                        (uint64_t)r->matrix});
                      });
    }
    if (ckpt_write_section(&w, "owned", records.data(), records.size() * sizeof(OwnedRecord)) != 0)
        fatal("%s", w.error);
    auto params_at = [m](const OwnedRange* r, size_t* at) {
        *at = param_index(m, r);
        return true;
    };
    write_owned_section(&w, m, "params", m->params, sizeof(floatX), params_at, stage);
    for (int which = 0; which <= STATE_MASTER; which++) {
        if (state_buffer(m, which) == nullptr) continue;
        auto at = [m, which](const OwnedRange* r, size_t* i) {
            return state_index(m, which, r, i);
        };
        write_owned_section(&w, m, which == STATE_MASTER ? "master" : STATE_BUFFERS[which].name,
                            state_buffer(m, which), sizeof(float), at, stage);
    }
    if (ckpt_writer_commit(&w, 0) != 0) fatal("%s", w.error);
    free(stage);
}

// Writes the checkpoint of rs->step into dir and keeps the newest `keep` (0: all): every rank
// with state of its own writes its shard (ZeRO: every rank; stage 0: the first data-parallel
// rank of each tensor-parallel rank, which holds everything of its part), then rank 0 the
// manifest (the whole model's table, the run state and identity, the data position), which
// commits it. Under pipeline parallelism each stage's ranks write shards of their own tensors.
// Every file carries the save's identity (llmc/checkpoint.h's CkptSave: rank 0's random id for this
// save, the number of shards, the file's index), so a shard of any other save is never taken for
// one of this checkpoint's. Shards hold logical tensors, so any grid reads them. train_loader: the
// training data's loader, whose position the manifest keeps (nullptr: random tokens); `sections`:
// the run's own sections of the manifest (its identity, run_config, and its stability state). keep:
// the newest checkpoints kept (0: all), and also the newest of a step below keep_before (0: none).
// Every rank of the job (`world`) calls it.
struct RunSection {
    const char* name;
    const void* data;
    size_t size;
};
inline void save_checkpoint(const GPT* m, const CommGroup* world, const char* dir, int keep,
                            uint64_t keep_before, const RunState* rs,
                            const DataLoader* train_loader, const RunSection* sections, int count) {
    const int dp_rank = m->dp.group->rank, tp = m->tensor_parallel.size;
    const int pp = m->pipe.group->size, pp_rank = m->pipe.rank;
    const int shards = (m->dp.stage > 0 ? m->dp.group->size : 1) * pp * tp;
    CkptSave save;
    char err[CKPT_ERROR_BYTES];
    if (world->rank == 0 && ckpt_new_save(&save, (uint64_t)shards, err, sizeof(err)) != 0)
        fatal("%s", err);
    comm_broadcast(world, &save, sizeof(save), 0);
    if (m->dp.stage > 0 || dp_rank == 0) {
        CkptSave mine = save;
        mine.index = (uint64_t)(((m->dp.stage > 0 ? dp_rank : 0) * pp + pp_rank) * tp +
                                m->tensor_parallel.rank);
        save_shard(m, dir, rs->step, &mine);
    }
    comm_barrier(world, "the barrier before a checkpoint's manifest (every shard written)");
    if (world->rank != 0) return;
    const CheckpointConfig cc = checkpoint_config_of(&m->config);
    CheckpointWriter w;
    if (ckpt_writer_begin_part(&w, dir, rs->step, &save, &cc, sizeof(cc)) != 0)
        fatal("%s", w.error);
    std::vector<LayoutRecord> records(m->logical.count);
    for (int i = 0; i < m->logical.count; i++)
        records[i] = layout_record_of(&m->logical.tensors[i]);
    if (ckpt_write_section(&w, "layout", records.data(), records.size() * sizeof(LayoutRecord)) !=
            0 ||
        ckpt_write_section(&w, "run", rs, sizeof(*rs)) != 0)
        fatal("%s", w.error);
    for (int i = 0; i < count; i++)
        if (ckpt_write_section(&w, sections[i].name, sections[i].data, sections[i].size) != 0)
            fatal("%s", w.error);
    if (train_loader != nullptr) {
        DataLoaderState ds = dataloader_state(train_loader);
        if (ckpt_write_section(&w, "data", &ds, sizeof(ds)) != 0) fatal("%s", w.error);
    }
    if (m->config.llama.arch == ARCH_LLAMA) {
        const std::vector<double> llama = llama_section(&m->config.llama);
        if (ckpt_write_section(&w, "llama", llama.data(), llama.size() * sizeof(double)) != 0)
            fatal("%s", w.error);
    }
    if (m->config.fp8.recipe == FP8_DELAYED) {
        const std::vector<uint8_t> fp8 = fp8_delayed_section(m);
        if (ckpt_write_section(&w, "fp8_delayed", fp8.data(), fp8.size()) != 0)
            fatal("%s", w.error);
    }
    w.keep_before = keep_before;
    if (ckpt_writer_commit(&w, keep) != 0) fatal("%s", w.error);
}

// The layout section of an open checkpoint. A checkpoint from before the parameter table
// (AdamW's moments as adam_m/adam_v over every tensor, no layout) is refused here, by name.
inline std::vector<LayoutRecord> read_layout(CheckpointReader* r) {
    if (!ckpt_has_section(r, "layout")) {
        if (ckpt_has_section(r, "adam_m"))
            fatal(
                "checkpoint %s was written before optimizer state had a layout (it holds "
                "adam_m/adam_v for every tensor and no 'layout' section); this program cannot "
                "resume or sample it: start a new run, or use the build that wrote it",
                r->path);
        fatal("checkpoint %s has no 'layout' section", r->path);
    }
    const CkptSectionInfo* s = ckpt_lookup(r, "layout");
    if (s->size % sizeof(LayoutRecord) != 0)
        fatal("checkpoint %s: its layout section has %llu bytes, not whole %zu-byte records",
              r->path, (unsigned long long)s->size, sizeof(LayoutRecord));
    std::vector<LayoutRecord> records(s->size / sizeof(LayoutRecord));
    if (ckpt_read_section(r, "layout", records.data(), s->size) != 0) fatal("%s", r->error);
    for (LayoutRecord& rec : records) rec.name[sizeof(rec.name) - 1] = '\0';
    return records;
}

inline const char* optimizer_name(int32_t kind) {
    return kind >= 0 && kind < NUM_OPTIMIZERS ? OPTIMIZERS[kind].name : "an unknown optimizer";
}

// Refuses (fatal) a checkpoint whose layout is not this model's table, naming the first tensor
// that differs and how.
inline void check_layout(const CheckpointReader* r, const std::vector<LayoutRecord>& stored,
                         const ParamLayout* layout) {
    for (int i = 0; i < layout->count; i++) {
        const ParamTensor* t = &layout->tensors[i];
        const LayoutRecord* s = nullptr;
        for (const LayoutRecord& rec : stored)
            if (strcmp(rec.name, t->name) == 0) s = &rec;
        if (s == nullptr)
            fatal(
                "checkpoint %s holds no tensor %s, which this model has (another model: "
                "--qk-norm?)",
                r->path, t->name);
        if (s->optimizer != t->optimizer)
            fatal("checkpoint %s: tensor %s is updated by %s there, by %s here (--optimizer)",
                  r->path, t->name, optimizer_name(s->optimizer), optimizer_name(t->optimizer));
        if (s->rows != t->rows || s->cols != t->cols || s->matrices != t->matrices)
            fatal(
                "checkpoint %s: tensor %s is (%d, %d) in %d matrices there, (%d, %d) in %d "
                "here",
                r->path, t->name, s->rows, s->cols, s->matrices, t->rows, t->cols, t->matrices);
        if (s->offset != t->offset || s->numel != t->numel || (size_t)i >= stored.size() ||
            s != &stored[i])
            fatal(
                "checkpoint %s: tensor %s lies elsewhere there (entry %d, offset %llu) than here "
                "(entry %d, offset %zu)",
                r->path, t->name, (int)(s - stored.data()), (unsigned long long)s->offset, i,
                t->offset);
    }
    if (stored.size() != (size_t)layout->count)
        fatal(
            "checkpoint %s holds tensor %s, which this model does not have (another model: "
            "--qk-norm?)",
            r->path, stored[layout->count].name);
}

// One shard of a checkpoint being read: its reader and its ranges, each with where its elements
// start in "params"/"master" (all) and in its tensor's optimizer's state buffers.
struct ShardSource {
    CheckpointReader r;
    std::vector<OwnedRecord> ranges;
    std::vector<uint64_t> at_all, at_optimizer;
};

// Loads the checkpoint of an open manifest (verified against m's config by ckpt_open) into m
// and returns its run state; the training loader's state goes to *ds when ds is not nullptr.
// The checkpoint may come from any grid, ZeRO stage and pipeline: its shards hold ranges of the
// logical (whole-model) layout, checked equal to this model's first; the parameters of the
// tensors this rank holds (under --pp its stages') are read whole, and the state of each range
// this rank owns now (a run of its tensor-parallel part at a time) from
// the shard ranges that overlap it, so a run re-shards on load.
inline RunState load_checkpoint(GPT* m, CheckpointReader* manifest, DataLoaderState* ds) {
    const ParamLayout* logical = &m->logical;
    check_layout(manifest, read_layout(manifest), logical);
    CkptSave save;
    const int64_t shard_count = ckpt_manifest_save(manifest, &save);
    if (shard_count < 0) fatal("%s", manifest->error);
    if (shard_count == 0)
        fatal(
            "checkpoint %s is one file, written before checkpoints had shards (an older "
            "train_gpt): this program cannot resume or sample it; start a new run",
            manifest->path);
    char dir[CKPT_PATH_BYTES];
    snprintf(dir, sizeof(dir), "%s", manifest->path);
    if (char* slash = strrchr(dir, '/')) *slash = '\0';
    else snprintf(dir, sizeof(dir), ".");
    const CheckpointConfig cc = checkpoint_config_of(&m->config);
    std::vector<floatX> params(logical->total, (floatX)0.0f);
    std::vector<std::vector<float>> state(STATE_MASTER + 1);
    for (int which = 0; which <= STATE_MASTER; which++)
        if (state_buffer(m, which))
            state[which].assign(which == STATE_MASTER ? m->dp.elem_state + m->dp.matrix_state
                                                      : state_elems(m, which),
                                0.0f);
    size_t params_read = 0, owned_read = 0, owned_total = 0;
    for (int i = 0; i < m->dp.owned_count; i++) owned_total += m->dp.owned[i].n;
    for (int64_t k = 0; k < shard_count; k++) {
        ShardSource src;
        char path[CKPT_PATH_BYTES];
        ckpt_shard_name(path, sizeof(path), dir, manifest->step, (int)k);
        if (ckpt_open(&src.r, path, &cc, sizeof(cc), CHECKPOINT_FIELDS, NUM_CHECKPOINT_FIELDS) !=
                0 ||
            ckpt_check_shard(&src.r, manifest->step, &save, (uint64_t)k) != 0)
            fatal("%s", src.r.error);
        const CkptSectionInfo* info = ckpt_lookup(&src.r, "owned");
        if (info == nullptr || info->size % sizeof(OwnedRecord) != 0)
            fatal("checkpoint shard %s has no valid 'owned' section", path);
        src.ranges.resize(info->size / sizeof(OwnedRecord));
        if (ckpt_read_section(&src.r, "owned", src.ranges.data(), info->size) != 0)
            fatal("%s", src.r.error);
        uint64_t all = 0, of_optimizer[NUM_OPTIMIZERS] = {};
        for (const OwnedRecord& o : src.ranges) {
            if (o.tensor >= (uint64_t)logical->count || o.matrix > 1 ||
                o.offset < logical->tensors[o.tensor].offset ||
                o.offset + o.n >
                    logical->tensors[o.tensor].offset + logical->tensors[o.tensor].numel)
                fatal("checkpoint shard %s holds a range outside its tensor", path);
            const int kind = logical->tensors[o.tensor].optimizer;
            src.at_all.push_back(all);
            src.at_optimizer.push_back(of_optimizer[kind]);
            all += o.n;
            of_optimizer[kind] += o.n;
        }
        // the shard's ranges by offset (they do not overlap), to find those a run overlaps
        std::vector<size_t> by_offset(src.ranges.size());
        for (size_t j = 0; j < by_offset.size(); j++) by_offset[j] = j;
        std::sort(by_offset.begin(), by_offset.end(), [&src](size_t a, size_t b) {
            return src.ranges[a].offset < src.ranges[b].offset;
        });
        // the parameters of the tensors this rank holds (all of them but under pipeline
        // parallelism), whole, from every shard
        for (size_t j = 0; j < src.ranges.size(); j++) {
            const OwnedRecord& o = src.ranges[j];
            if (!m->layout.tensors[o.tensor].held) continue;
            if (ckpt_read_section_part(&src.r, "params", src.at_all[j] * sizeof(floatX),
                                       params.data() + o.offset, o.n * sizeof(floatX)) != 0)
                fatal("%s", src.r.error);
            params_read += o.n;
        }
        // the state of each range this rank owns, run by run, from the overlapping ranges
        for (int i = 0; i < m->dp.owned_count; i++) {
            const OwnedRange* mine = &m->dp.owned[i];
            const ParamTensor* t = &m->layout.tensors[mine->tensor];
            const size_t base = logical->tensors[mine->tensor].offset;
            const size_t first = mine->offset - t->offset;
            tp_local_runs(
                &t->tp_shape, m->tensor_parallel.rank, m->tensor_parallel.size, first, mine->n,
                [&](size_t run_logical, size_t run_local, size_t run_n) {
                    const size_t run_lo = base + run_logical, run_hi = run_lo + run_n;
                    auto it = std::lower_bound(
                        by_offset.begin(), by_offset.end(), run_lo, [&src](size_t j, size_t at) {
                            return src.ranges[j].offset + src.ranges[j].n <= at;
                        });
                    for (; it != by_offset.end() && src.ranges[*it].offset < run_hi; ++it) {
                        const size_t j = *it;
                        const OwnedRecord& o = src.ranges[j];
                        const size_t lo = std::max<size_t>(run_lo, o.offset),
                                     hi = std::min<size_t>(run_hi, o.offset + o.n);
                        if (lo >= hi || (int)o.tensor != mine->tensor) continue;
                        owned_read += hi - lo;
                        // where the overlap lies in this range's state
                        const size_t into = run_local - first + (lo - run_lo);
                        for (int which = 0; which <= STATE_MASTER; which++) {
                            size_t at;
                            if (state[which].empty() || !state_index(m, which, mine, &at)) continue;
                            const bool all_ranges = which == STATE_MASTER;
                            const uint64_t from =
                                (all_ranges ? src.at_all[j] : src.at_optimizer[j]) +
                                (lo - o.offset);
                            const char* name = all_ranges ? "master" : STATE_BUFFERS[which].name;
                            if (ckpt_read_section_part(&src.r, name, from * sizeof(float),
                                                       state[which].data() + at + into,
                                                       (hi - lo) * sizeof(float)) != 0)
                                fatal("%s", src.r.error);
                        }
                    }
                });
        }
        ckpt_close(&src.r);
    }
    size_t numel = 0;
    for (int i = 0; i < logical->count; i++)
        if (m->layout.tensors[i].held) numel += logical->tensors[i].numel;
    if (params_read != numel || owned_read != owned_total)
        fatal(
            "checkpoint %s: its %lld shards hold %zu of the %zu parameters and %zu of the %zu "
            "elements of state this rank needs (its shards, all of this save, do not cover "
            "them: written by a faulty writer)",
            manifest->path, (long long)shard_count, params_read, numel, owned_read, owned_total);
    std::vector<floatX> local(m->layout.total);
    local_from_logical(m, params.data(), local.data());
    gpt_params_upload(m, local.data());
    for (int which = 0; which <= STATE_MASTER; which++)
        if (!state[which].empty())
            CUDA_CHECK(cudaMemcpy(state_buffer(m, which), state[which].data(),
                                  state[which].size() * sizeof(float), cudaMemcpyHostToDevice));
    RunState rs;
    if (ckpt_read_section(manifest, "run", &rs, sizeof(rs)) != 0) fatal("%s", manifest->error);
    if (ds && ckpt_read_section(manifest, "data", ds, sizeof(*ds)) != 0)
        fatal("%s (was it written by a run on random tokens?)", manifest->error);
    if (rs.step != manifest->step)
        fatal("checkpoint %s is inconsistent: step %llu in its header, %llu in its run state",
              manifest->path, (unsigned long long)manifest->step, (unsigned long long)rs.step);
    m->opt_step = (int)rs.opt_step;
    m->seed = rs.rounding_seed;
    if (m->config.fp8.recipe == FP8_DELAYED) load_fp8_delayed(m, manifest);
    return rs;
}

// The newest intact checkpoint in folder `dir` of a step below `below` (UINT64_MAX: any; none
// when the folder does not exist).
inline bool latest_checkpoint(const char* dir, uint64_t below, char* path, size_t len) {
    uint64_t step;
    char err[1024];
    int found = ckpt_find_latest(dir, below, path, len, &step, err, sizeof(err));
    if (found < 0) fatal("%s", err);
    return found == 1;
}

// The checkpoint that `spec` names: a file, or a folder whose newest complete checkpoint is
// taken. Returns false when the folder holds none.
inline bool find_checkpoint(const char* spec, char* path, size_t len) {
    struct stat st;
    if (stat(spec, &st) != 0) fatal("cannot open checkpoint %s: %s", spec, strerror(errno));
    if (S_ISDIR(st.st_mode)) return latest_checkpoint(spec, UINT64_MAX, path, len);
    snprintf(path, len, "%s", spec);
    return true;
}

// The configuration block stored in a checkpoint file (format: llmc/checkpoint.h), for sample
// mode, which takes the model's shape from the checkpoint; ckpt_open then verifies the whole
// file against it. Zeros when the file is too short or its block has another size: ckpt_open
// reports what is wrong.
inline CheckpointConfig peek_checkpoint_config(const char* path) {
    CheckpointConfig cc;
    char err[CKPT_ERROR_BYTES];
    if (ckpt_peek_config(path, &cc, sizeof(cc), err, sizeof(err)) != 0) memset(&cc, 0, sizeof(cc));
    return cc;
}
