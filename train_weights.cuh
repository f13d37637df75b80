// train_weights.cuh: pretrained GPT-2 weights in and out, the glue between the model of
// train_gpt.cu and the formats of llmc/weights_io.h, included by train_run.cuh.
// In: a Hugging Face GPT-2 folder (config.json and model.safetensors, or the shards of
// model.safetensors.index.json, as GPT2LMHeadModel.save_pretrained writes them) or an llm.c model
// file (gpt2_124M.bin and its bf16 form). The model's shape comes from the file (pretrained_shape);
// the tensors go into the whole model's parameter table (m->logical) and from there, as random
// initialization does (gpt_set_logical_params), into each rank's part on any grid
// (load_pretrained). Out: a model of this trainer as a Hugging Face GPT-2 folder (export_hf),
// with GPT-2's tokenizer files when the model uses GPT-2's BPE.
// Entry points: weights_kind, pretrained_shape, load_pretrained, export_hf.
//
// The mapping. Hugging Face's GPT-2 stores its four block matrices as Conv1D weights, (in, out):
// attn.c_attn (C, 3C) with the output columns q | k | v, attn.c_proj (C, C), mlp.c_fc (C, 4C),
// mlp.c_proj (4C, C); ours are (out, in), as nn.Linear and llm.c keep them, so they are
// transposed on the way in and out. Its lm_head is wte (tied; save_pretrained leaves it out, and
// when a file holds it, it must equal wte); attn.bias and attn.masked_bias are buffers (the causal
// mask), skipped. Its wte has V rows, ours Vp: the padding rows are zero. Tensor names carry the
// prefix "transformer." (GPT2LMHeadModel) or none (GPT2Model, as the hub's gpt2 files).
// config.json must describe the model this trainer computes: GPT-2 (model_type gpt2), GELU with
// the tanh approximation (activation_function gelu_new or gelu_pytorch_tanh), LayerNorm eps 1e-5,
// a 4C MLP (n_inner null), attention scaled by 1/sqrt(head size) only, no cross-attention, the
// head tied to wte; anything else is refused by name rather than computed differently.
//
// Hugging Face Llama (model_type llama, LlamaForCausalLM; our --arch llama): model.embed_tokens,
// model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm,
// mlp.{gate,up,down}_proj}, model.norm and lm_head (absent when tied), all nn.Linear (out, in)
// as ours, so nothing is transposed. transformers' Llama rotates q and k with rotate_half (the
// dimension pairs i, i + HS/2), which train_gpt.cu's RoPE kernel uses too: the q and k rows load
// as they are, with no permutation (the permutation Meta-format conversions apply is inside the
// Hugging Face files already). config.json must say silu, no attention or MLP biases,
// head_dim = hidden_size / heads, pretraining_tp 1 and rope_scaling null or llama3's.
#pragma once

#include <sys/stat.h>

#include <cmath>
#include <string>
#include <vector>

#include "llmc/tokenizer.h"   // the tokenizer written out as GPT-2's vocab.json and merges.txt
#include "llmc/weights_io.h"  // JSON, safetensors and llm.c's model files

enum WeightsKind { WEIGHTS_CHECKPOINT, WEIGHTS_HF, WEIGHTS_LLMC };

inline bool path_is_file(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// What `path` holds: a Hugging Face folder (it has config.json), a checkpoint of this trainer (a
// folder of them, or a file that starts with the checkpoint magic) or an llm.c model file (its
// magic). Anything else is refused; `what` names the path's role in the message of a path that
// is no regular file or folder (a FIFO is refused, never opened to wait for a writer).
inline int weights_kind(const char* path, const char* what) {
    struct stat st;
    if (stat(path, &st) != 0) fatal("cannot open %s %s: %s", what, path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {  // a config.json that is no regular file is refused when read
        struct stat config;
        return stat((std::string(path) + "/config.json").c_str(), &config) == 0
                   ? WEIGHTS_HF
                   : WEIGHTS_CHECKPOINT;
    }
    char head[8] = {}, err[1024];
    int64_t size;
    FILE* f = fopen_regular(path, what, &size, err, sizeof(err));
    if (f == nullptr) fatal("%s", err);
    const bool got = fread(head, 1, sizeof(head), f) == sizeof(head);
    fclose(f);
    int32_t magic;
    memcpy(&magic, head, sizeof(magic));
    if (got && memcmp(head, CKPT_MAGIC, 8) == 0) return WEIGHTS_CHECKPOINT;
    if (got && magic == LLMC_MAGIC) return WEIGHTS_LLMC;
    fatal(
        "%s is none of the weights read here: a checkpoint of this trainer (a file or folder), a "
        "Hugging Face GPT-2 folder (config.json and model.safetensors) or an llm.c model file "
        "(magic %d)",
        path, LLMC_MAGIC);
    return -1;
}

// ---------------------------------------------------------------------------------------------
// Hugging Face GPT-2

// Our block tensors' names in a Hugging Face GPT-2, in LayerTensor order (QK-norm has none).
static const char* const HF_BLOCK_TENSORS[Q_NORM_W] = {
    "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
    "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};

// Our Llama block tensors' names in a Hugging Face Llama (QK-norm has none), by LayerTensor.
inline const char* hf_llama_block_tensor(int which) {
    switch (which) {
        case LN1_W:
            return "input_layernorm.weight";
        case Q_W:
            return "self_attn.q_proj.weight";
        case K_W:
            return "self_attn.k_proj.weight";
        case V_W:
            return "self_attn.v_proj.weight";
        case ATTPROJ_W:
            return "self_attn.o_proj.weight";
        case LN2_W:
            return "post_attention_layernorm.weight";
        case GATE_W:
            return "mlp.gate_proj.weight";
        case UP_W:
            return "mlp.up_proj.weight";
        case FCPROJ_W:
            return "mlp.down_proj.weight";
        default:
            fatal("a Hugging Face Llama has no %s", LAYER_TENSOR_NAMES[which]);
    }
}

// The Hugging Face name (without "transformer."; a Llama's with "model.") of logical tensor i
// of a model of config c, and whether it is stored transposed (a GPT-2 Conv1D weight).
inline std::string hf_tensor_name(const GPTConfig* c, const ParamIndex* at, int i,
                                  bool* transposed) {
    *transposed = false;
    if (c->llama.arch == ARCH_LLAMA) {
        if (i == at->wte) return "model.embed_tokens.weight";
        if (i == at->lm_head) return "lm_head.weight";
        if (i == at->lnf_w) return "model.norm.weight";
        const int l = block_of_tensor(at, i);
        return "model.layers." + std::to_string(l) + "." +
               hf_llama_block_tensor(which_of_tensor(at, l, i));
    }
    if (i == at->wte) return "wte.weight";
    if (i == at->wpe) return "wpe.weight";
    if (i == at->lnf_w) return "ln_f.weight";
    if (i == at->lnf_b) return "ln_f.bias";
    const int l = block_of_tensor(at, i), which = which_of_tensor(at, l, i);
    *transposed = which == QKV_W || which == ATTPROJ_W || which == FC_W || which == FCPROJ_W;
    return "h." + std::to_string(l) + "." + HF_BLOCK_TENSORS[which];
}

// The JSON file `path` (what: its role, for messages), parsed; fatal when it cannot be read or
// is not JSON.
inline JsonValue read_json_file(const std::string& path, const char* what) {
    int64_t size;
    char err[1024];
    FILE* f = fopen_regular(path.c_str(), what, &size, err, sizeof(err));
    if (f == nullptr) fatal("%s", err);
    std::string text((size_t)size, '\0');
    if (size > 0 && fread(&text[0], 1, (size_t)size, f) != (size_t)size)
        fatal("cannot read %s: %s", path.c_str(), strerror(errno));
    fclose(f);
    JsonValue v;
    if (json_parse(text.data(), text.size(), &v, err, sizeof(err)) != 0)
        fatal("%s is not valid JSON: %s", path.c_str(), err);
    return v;
}

// The folder's config.json, parsed; fatal when it is missing, not JSON or not an object.
inline JsonValue hf_config(const char* dir) {
    const std::string path = std::string(dir) + "/config.json";
    const JsonValue config = read_json_file(path, "config file");
    if (config.kind != JSON_OBJECT) fatal("%s is not a JSON object", path.c_str());
    return config;
}

// The shape of the Hugging Face Llama whose config.json (at path) is `config`, after checking
// that it describes the model this trainer computes (see the top of this file).
inline GPTConfig hf_llama_shape(const JsonValue* config, const std::string& path) {
    auto number = [&](const char* key, double fallback) {
        const JsonValue* v = json_get(config, key);
        if (v == nullptr) return fallback;  // LlamaConfig's default
        if (v->kind != JSON_NUMBER) fatal("%s: %s is not a number", path.c_str(), key);
        return v->number;
    };
    auto whole = [&](const char* key, int64_t hi, bool required, int64_t fallback) {
        int64_t out = fallback;
        const JsonValue* v = json_get(config, key);
        if ((v || required) && !json_int(v, 1, hi, &out))
            fatal("%s: %s is missing or not a whole number in [1, %lld]", path.c_str(), key,
                  (long long)hi);
        return out;
    };
    auto flag_is = [&](const char* key, bool expected, const char* what) {
        const JsonValue* v = json_get(config, key);
        if (v != nullptr && (v->kind != JSON_BOOL || v->boolean != expected))
            fatal("%s: %s is not %s; %s", path.c_str(), key, expected ? "true" : "false", what);
    };
    const JsonValue* act = json_get(config, "hidden_act");
    if (act != nullptr && (act->kind != JSON_STRING || act->text != "silu"))
        fatal("%s: hidden_act is not silu; this trainer's SwiGLU uses silu", path.c_str());
    flag_is("attention_bias", false, "this trainer's Llama attention has no biases");
    flag_is("mlp_bias", false, "this trainer's Llama MLP has no biases");
    GPTConfig c = {};
    c.vocab = (int)whole("vocab_size", MAX_VOCAB, true, 0);
    c.context = (int)whole("max_position_embeddings", MAX_SEQ, true, 0);
    c.layers = (int)whole("num_hidden_layers", MAX_LAYERS, true, 0);
    c.heads = (int)whole("num_attention_heads", MAX_HEADS, true, 0);
    c.channels = (int)whole("hidden_size", MAX_CHANNELS, true, 0);
    c.padded_vocab = padded_vocab_of(c.vocab);
    LlamaConfig* l = &c.llama;
    l->arch = ARCH_LLAMA;
    l->kv_heads = (int)whole("num_key_value_heads", MAX_HEADS, false, c.heads);
    l->mlp_hidden = (int)whole("intermediate_size", 4 * MAX_CHANNELS, true, 0);
    if (whole("head_dim", MAX_CHANNELS, false, c.channels / c.heads) * c.heads != c.channels)
        fatal("%s: head_dim x num_attention_heads is not hidden_size, as this trainer needs",
              path.c_str());
    if (whole("pretraining_tp", 1, false, 1) != 1)
        fatal("%s: pretraining_tp is not 1", path.c_str());
    l->norm_eps = number("rms_norm_eps", 1e-6);
    l->rope_theta = number("rope_theta", 10000.0);
    const JsonValue* tie = json_get(config, "tie_word_embeddings");
    if (tie != nullptr && tie->kind != JSON_BOOL)
        fatal("%s: tie_word_embeddings is not true or false", path.c_str());
    l->untied_head = tie != nullptr && !tie->boolean;  // LlamaConfig's default: tied
    const JsonValue* scaling = json_get(config, "rope_scaling");
    if (scaling != nullptr && scaling->kind != JSON_NULL) {
        const JsonValue* type =
            scaling->kind == JSON_OBJECT ? json_get(scaling, "rope_type") : nullptr;
        if (type == nullptr) type = json_get(scaling, "type");
        if (type == nullptr || type->kind != JSON_STRING || type->text != "llama3")
            fatal("%s: rope_scaling is not llama3's, the one scaling this trainer computes",
                  path.c_str());
        auto field = [&](const char* key) {
            const JsonValue* v = json_get(scaling, key);
            if (v == nullptr || v->kind != JSON_NUMBER)
                fatal("%s: rope_scaling.%s is missing or not a number", path.c_str(), key);
            return v->number;
        };
        l->rope_scaling = ROPE_SCALING_LLAMA3;
        l->rope_factor = field("factor");
        l->rope_low_freq_factor = field("low_freq_factor");
        l->rope_high_freq_factor = field("high_freq_factor");
        l->rope_original_context = (int)field("original_max_position_embeddings");
    }
    return c;
}

// The shape of the Hugging Face GPT-2 (or Llama) in `dir`, from its config.json, after checking
// that it describes the model this trainer computes (see the top of this file).
inline GPTConfig hf_shape(const char* dir) {
    const JsonValue config = hf_config(dir);
    const std::string path = std::string(dir) + "/config.json";
    const JsonValue* type = json_get(&config, "model_type");
    if (type != nullptr && type->kind == JSON_STRING && type->text == "llama")
        return hf_llama_shape(&config, path);
    const JsonValue* archs = json_get(&config, "architectures");
    bool gpt2 = type != nullptr && type->kind == JSON_STRING && type->text == "gpt2";
    if (type == nullptr && archs != nullptr && archs->kind == JSON_ARRAY)
        for (const JsonValue& a : archs->items)
            gpt2 |= a.kind == JSON_STRING && (a.text == "GPT2LMHeadModel" || a.text == "GPT2Model");
    if (!gpt2)
        fatal(
            "%s: model_type %s is neither GPT-2's (gpt2) nor Llama's (llama), the architectures "
            "read here",
            path.c_str(), type && type->kind == JSON_STRING ? type->text.c_str() : "(none)");
    auto text_is = [&](const char* key, const char* a, const char* b, const char* expected) {
        const JsonValue* v = json_get(&config, key);
        if (v == nullptr) return;  // GPT2Config's default, which is GPT-2's
        if (v->kind != JSON_STRING || (v->text != a && v->text != b))
            fatal("%s: %s is %s; this trainer computes %s", path.c_str(), key,
                  v->kind == JSON_STRING ? v->text.c_str() : "not a string", expected);
    };
    text_is("activation_function", "gelu_new", "gelu_pytorch_tanh",
            "GELU with the tanh approximation (gelu_new)");
    auto flag_is = [&](const char* key, bool expected, const char* what) {
        const JsonValue* v = json_get(&config, key);
        if (v != nullptr && (v->kind != JSON_BOOL || v->boolean != expected))
            fatal("%s: %s is not %s; %s", path.c_str(), key, expected ? "true" : "false", what);
    };
    flag_is("scale_attn_weights", true, "this trainer scales attention scores by 1/sqrt(HS)");
    flag_is("scale_attn_by_inverse_layer_idx", false,
            "this trainer scales attention scores by 1/sqrt(HS) alone");
    flag_is("add_cross_attention", false, "this trainer's blocks have no cross-attention");
    flag_is("tie_word_embeddings", true, "this trainer's lm head is wte");
    static_assert(LN_EPS == 1e-5f, "config.json's layer_norm_epsilon is compared with 1e-5");
    if (const JsonValue* eps = json_get(&config, "layer_norm_epsilon"))
        if (eps->kind != JSON_NUMBER || eps->number != 1e-5)
            fatal("%s: layer_norm_epsilon is %.9g; this trainer's LayerNorms use 1e-5",
                  path.c_str(), eps->kind == JSON_NUMBER ? eps->number : NAN);
    int64_t sizes[5];
    const char* keys[5] = {"vocab_size", "n_positions", "n_layer", "n_head", "n_embd"};
    const int64_t limits[5] = {MAX_VOCAB, MAX_SEQ, MAX_LAYERS, MAX_HEADS, MAX_CHANNELS};
    for (int k = 0; k < 5; k++)
        if (!json_int(json_get(&config, keys[k]), 1, limits[k], &sizes[k]))
            fatal("%s: %s is missing or not a whole number in [1, %lld]", path.c_str(), keys[k],
                  (long long)limits[k]);
    if (const JsonValue* inner = json_get(&config, "n_inner"))
        if (inner->kind != JSON_NULL &&
            !(inner->kind == JSON_NUMBER && inner->number == 4.0 * (double)sizes[4]))
            fatal("%s: n_inner is %s; this trainer's MLP has 4 x n_embd = %lld hidden units",
                  path.c_str(), inner->kind == JSON_NUMBER ? "not 4 x n_embd" : "not a number",
                  (long long)(4 * sizes[4]));
    GPTConfig c = {};
    c.vocab = (int)sizes[0];
    c.context = (int)sizes[1];
    c.layers = (int)sizes[2];
    c.heads = (int)sizes[3];
    c.channels = (int)sizes[4];
    c.padded_vocab = padded_vocab_of(c.vocab);
    return c;
}

// The safetensors files of a Hugging Face folder: model.safetensors, or the shards that
// model.safetensors.index.json's weight_map names.
struct HfFiles {
    std::vector<SafetensorsFile> files;
};

inline void hf_open(HfFiles* h, const char* dir) {
    std::vector<std::string> names;
    const std::string single = std::string(dir) + "/model.safetensors";
    const std::string index = single + ".index.json";
    if (path_is_file(single) || !path_is_file(index)) {
        names.push_back(single);
    } else {
        const JsonValue v = read_json_file(index, "safetensors index");
        const JsonValue* map = json_get(&v, "weight_map");
        if (map == nullptr || map->kind != JSON_OBJECT)
            fatal("%s has no weight_map object", index.c_str());
        for (const JsonValue& file : map->items) {
            if (file.kind != JSON_STRING || file.text.empty() ||
                file.text.find('/') != std::string::npos)
                fatal("%s: its weight_map names something other than a file of the folder",
                      index.c_str());
            const std::string path = std::string(dir) + "/" + file.text;
            if (std::find(names.begin(), names.end(), path) == names.end()) names.push_back(path);
        }
    }
    h->files.resize(names.size());
    for (size_t i = 0; i < names.size(); i++)
        if (safetensors_open(&h->files[i], names[i].c_str()) != 0) fatal("%s", h->files[i].error);
}

inline void hf_close(HfFiles* h) {
    for (SafetensorsFile& f : h->files) safetensors_close(&f);
}

// Tensor `name` with the prefix "transformer." or none, and the file that holds it.
inline const SafeTensor* hf_find(HfFiles* h, const std::string& name, SafetensorsFile** file) {
    for (const std::string& full : {"transformer." + name, name})
        for (SafetensorsFile& f : h->files)
            if (const SafeTensor* t = safetensors_find(&f, full.c_str())) {
                *file = &f;
                return t;
            }
    return nullptr;
}

inline std::string shape_text(const std::vector<int64_t>& shape) {
    std::string s = "(";
    for (size_t d = 0; d < shape.size(); d++) s += (d ? ", " : "") + std::to_string(shape[d]);
    return s + (shape.size() == 1 ? ",)" : ")");
}

// Refuses a tensor holding a NaN or an infinity (no trained GPT-2 has one; a damaged file may),
// naming the file, the tensor and the element.
inline void require_finite(const float* values, size_t n, const char* file, const char* tensor) {
    for (size_t k = 0; k < n; k++)
        if (!std::isfinite(values[k]))
            fatal("%s: tensor %s holds %s at element %zu: the weights are damaged", file, tensor,
                  std::isnan(values[k]) ? "a NaN" : "an infinity", k);
}

// The Hugging Face shape of logical tensor i of model m (wte: V rows).
inline std::vector<int64_t> hf_tensor_shape(const GPT* m, int i, bool transposed) {
    const ParamTensor* t = &m->logical.tensors[i];
    const bool vocab_rows = i == m->logical.index.wte || i == m->logical.index.lm_head;
    const int64_t rows = vocab_rows ? m->config.vocab : t->rows;
    if (t->cols == 0) return {rows};
    return transposed ? std::vector<int64_t>{t->cols, rows} : std::vector<int64_t>{rows, t->cols};
}

// Every tensor of the Hugging Face GPT-2 in `dir` into `values` (m->logical's layout), checked
// against m's shape (config.json's): a tensor missing, of another shape or dtype, an lm_head that
// is not wte and a tensor GPT-2 does not have are refused by name.
inline void read_hf_tensors(const GPT* m, const char* dir, float* values) {
    HfFiles h;
    hf_open(&h, dir);
    const ParamLayout* logical = &m->logical;
    const GPTConfig* c = &m->config;
    char sizes[256];
    if (c->llama.arch == ARCH_LLAMA)
        snprintf(sizes, sizeof(sizes),
                 "config.json's sizes (vocab_size %d, num_hidden_layers %d, num_attention_heads "
                 "%d, num_key_value_heads %d, hidden_size %d, intermediate_size %d)",
                 c->vocab, c->layers, c->heads, c->llama.kv_heads, c->channels,
                 c->llama.mlp_hidden);
    else
        snprintf(sizes, sizeof(sizes),
                 "config.json's sizes (vocab_size %d, n_positions %d, n_layer %d, n_head %d, "
                 "n_embd %d)",
                 c->vocab, c->context, c->layers, c->heads, c->channels);
    const bool llama = c->llama.arch == ARCH_LLAMA;
    std::vector<const SafeTensor*> used;
    std::vector<float> staged;
    for (int i = 0; i < logical->count; i++) {
        const ParamTensor* t = &logical->tensors[i];
        bool transposed;
        const std::string name = hf_tensor_name(c, &logical->index, i, &transposed);
        SafetensorsFile* file;
        const SafeTensor* st = hf_find(&h, name, &file);
        if (st == nullptr)
            fatal("%s: no tensor transformer.%s (nor %s), which %s need", dir, name.c_str(),
                  name.c_str(), sizes);
        const std::vector<int64_t> shape = hf_tensor_shape(m, i, transposed);
        if (st->shape != shape)
            fatal("%s: tensor %s has shape %s; %s give %s", file->path, st->name.c_str(),
                  shape_text(st->shape).c_str(), sizes, shape_text(shape).c_str());
        const size_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
        staged.resize(rows * cols);
        if (safetensors_read(file, st, 0, rows * cols, staged.data()) != 0)
            fatal("%s", file->error);
        require_finite(staged.data(), staged.size(), file->path, st->name.c_str());
        float* dst = values + t->offset;
        for (size_t r = 0; r < rows; r++)  // (in, out) -> (out, in) for a Conv1D weight
            for (size_t k = 0; k < cols; k++)
                dst[transposed ? k * rows + r : r * cols + k] = staged[r * cols + k];
        used.push_back(st);
    }
    const ParamTensor* wte = &logical->tensors[logical->index.wte];
    for (SafetensorsFile& f : h.files)
        for (const SafeTensor& st : f.tensors) {
            if (std::find(used.begin(), used.end(), &st) != used.end()) continue;
            const std::string& n = st.name;
            auto ends_with = [&n](const char* s) {
                const size_t k = strlen(s);
                return n.size() >= k && n.compare(n.size() - k, k, s) == 0;
            };
            if (ends_with(".attn.bias") || ends_with(".attn.masked_bias") ||
                ends_with(".rotary_emb.inv_freq"))
                continue;                 // buffers
            if (n == "lm_head.weight") {  // tied: it must be wte
                const size_t count = (size_t)c->vocab * c->channels;
                staged.resize(count);
                if (st.shape != hf_tensor_shape(m, logical->index.wte, false) ||
                    safetensors_read(&f, &st, 0, count, staged.data()) != 0 ||
                    memcmp(staged.data(), values + wte->offset, count * sizeof(float)) != 0)
                    fatal(
                        "%s: lm_head.weight is not %s: the model's head is not tied to its "
                        "embedding (%s)",
                        f.path, llama ? "model.embed_tokens.weight" : "transformer.wte.weight",
                        llama ? "config.json's tie_word_embeddings says it is"
                              : "GPT-2's is, and this trainer's");
                continue;
            }
            fatal("%s: tensor %s is not part of a GPT-2 of %s", f.path, n.c_str(), sizes);
        }
    hf_close(&h);
}

// ---------------------------------------------------------------------------------------------
// llm.c's model files

// Our logical tensor for llm.c's tensor j (its order, llmc_tensors) of layer l.
inline int llmc_logical_tensor(const ParamIndex* at, int j, int l) {
    if (j == 0) return at->wte;
    if (j == 1) return at->wpe;
    if (j == LLMC_NUM_TENSORS - 2) return at->lnf_w;
    if (j == LLMC_NUM_TENSORS - 1) return at->lnf_b;
    return block_tensor(at, l, j - 2);  // ln1w ... fcprojb: LayerTensor's order
}

inline GPTConfig llmc_shape(const char* path) {
    LlmcFile f;
    if (llmc_open(&f, path) != 0) fatal("%s", f.error);
    GPTConfig c = {};
    c.vocab = f.V;
    c.context = f.maxT;
    c.layers = f.L;
    c.heads = f.NH;
    c.channels = f.C;
    c.padded_vocab = padded_vocab_of(c.vocab);
    llmc_close(&f);
    return c;
}

// Every tensor of the llm.c model file at path into `values` (m->logical's layout). Its wte
// has the file's Vp rows, of which the first V are taken.
inline void read_llmc_tensors(const GPT* m, const char* path, float* values) {
    LlmcFile f;
    if (llmc_open(&f, path) != 0) fatal("%s", f.error);
    const ParamIndex* at = &m->logical.index;
    for (int j = 0; j < LLMC_NUM_TENSORS; j++) {
        const LlmcTensor* lt = &f.tensors[j];
        const uint64_t each = (uint64_t)lt->rows * (lt->cols > 0 ? lt->cols : 1);
        for (int l = 0; l < (lt->per_layer ? f.L : 1); l++) {
            const ParamTensor* t = &m->logical.tensors[llmc_logical_tensor(at, j, l)];
            const uint64_t n = j == 0 ? (uint64_t)f.V * f.C : each;
            if (t->numel < n)
                fatal("%s: tensor %s does not fit %s", path, lt->name, t->name);  // never: shapes
            if (llmc_read(&f, lt->offset + l * each, n, values + t->offset) != 0)
                fatal("%s", f.error);
            const std::string name =
                lt->per_layer ? std::string(lt->name) + " of layer " + std::to_string(l) : lt->name;
            require_finite(values + t->offset, n, path, name.c_str());
        }
    }
    llmc_close(&f);
}

// ---------------------------------------------------------------------------------------------
// In

// The model shape of the pretrained weights at path (a Hugging Face folder or an llm.c file).
inline GPTConfig pretrained_shape(const char* path) {
    const int kind = weights_kind(path, "weights file");
    if (kind == WEIGHTS_CHECKPOINT)
        fatal("%s is a checkpoint of this trainer, not pretrained weights", path);
    return kind == WEIGHTS_HF ? hf_shape(path) : llmc_shape(path);
}

// Sets m's parameters (every rank: its part, on any grid) to the pretrained weights at path,
// whose shape m was built with (pretrained_shape); the optimizer state starts at zero. The bf16
// build rounds them to nearest (even), as gpt_set_params does; its master weights hold them
// exactly.
inline void load_pretrained(GPT* m, const char* path) {
    std::vector<float> values(m->logical.total, 0.0f);
    if (weights_kind(path, "weights file") == WEIGHTS_HF) read_hf_tensors(m, path, values.data());
    else read_llmc_tensors(m, path, values.data());
    gpt_set_logical_params(m, values.data());
}

// ---------------------------------------------------------------------------------------------
// Out

// GPT-2's map of bytes to printable characters (vocab.json and merges.txt spell tokens in it):
// '!'..'~', 0xa1..0xac and 0xae..0xff stand for themselves, the other 68 bytes for U+0100 on,
// in byte order.
inline void gpt2_byte_chars(uint32_t out[256]) {
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
        out[b] = printable ? (uint32_t)b : next++;
    }
}

inline std::string gpt2_token_text(const Tokenizer* tok, int id, const uint32_t chars[256]) {
    size_t len;
    const uint8_t* bytes = tokenizer_decode(tok, id, &len);
    std::string s;
    for (size_t i = 0; i < len; i++) json_put_utf8(&s, chars[bytes[i]]);
    return s;
}

inline void write_text_file(const std::string& path, const std::string& text) {
    char err[1024];
    if (write_file_atomic(path.c_str(), text.data(), text.size(), err, sizeof(err)) != 0)
        fatal("%s", err);
}

// GPT-2's tokenizer files (vocab.json, merges.txt, tokenizer_config.json) of tok into dir.
inline void export_gpt2_tokenizer(const Tokenizer* tok, const char* dir, int context) {
    uint32_t chars[256];
    gpt2_byte_chars(chars);
    std::string vocab = "{";
    for (int id = 0; id < tok->vocab_size; id++) {
        if (id) vocab += ",";
        json_put_string(&vocab, gpt2_token_text(tok, id, chars));
        vocab += ":" + std::to_string(id);
    }
    vocab += "}";
    std::string merges = "#version: 0.2\n";
    for (int r = 0; r < tok->num_merges; r++)
        merges += gpt2_token_text(tok, tok->merges[r].left, chars) + " " +
                  gpt2_token_text(tok, tok->merges[r].right, chars) + "\n";
    std::string eot;
    json_put_string(&eot, gpt2_token_text(tok, tok->eot, chars));
    const std::string config = "{\"tokenizer_class\": \"GPT2Tokenizer\", \"model_max_length\": " +
                               std::to_string(context) + ", \"bos_token\": " + eot +
                               ", \"eos_token\": " + eot + ", \"unk_token\": " + eot +
                               ", \"add_prefix_space\": false}\n";
    write_text_file(std::string(dir) + "/vocab.json", vocab);
    write_text_file(std::string(dir) + "/merges.txt", merges);
    write_text_file(std::string(dir) + "/tokenizer_config.json", config);
}

// Writes model m, whose whole parameters are `values` (m->logical's layout, as floats), as a
// Hugging Face GPT-2 folder `dir` (made if missing): config.json and model.safetensors (F32), and
// with tok (nullptr: none) of GPT-2's BPE its tokenizer files.
inline void export_hf(const GPT* m, const float* values, const char* dir, const Tokenizer* tok) {
    const GPTConfig* c = &m->config;
    const bool llama = c->llama.arch == ARCH_LLAMA;
    if (c->qk_norm)
        fatal(
            "--export-hf: this model has QK-norm, which GPT-2 and Llama (and so Hugging Face's) "
            "do not have");
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        fatal("--export-hf: cannot make folder %s: %s", dir, strerror(errno));
    const ParamLayout* logical = &m->logical;
    std::vector<SafetensorsOut> out;
    std::vector<std::vector<float>> transposed_copies;
    for (int i = 0; i < logical->count; i++) {
        const ParamTensor* t = &logical->tensors[i];
        bool transposed;
        const std::string name =
            (llama ? "" : "transformer.") + hf_tensor_name(c, &logical->index, i, &transposed);
        const float* data = values + t->offset;
        if (transposed) {  // (out, in) -> Conv1D's (in, out)
            std::vector<float> copy(t->numel);
            for (int r = 0; r < t->rows; r++)
                for (int k = 0; k < t->cols; k++)
                    copy[(size_t)k * t->rows + r] = data[(size_t)r * t->cols + k];
            transposed_copies.push_back(std::move(copy));
            data = transposed_copies.back().data();
        }
        out.push_back({name, hf_tensor_shape(m, i, transposed), data});
    }
    char err[1024];
    const std::string weights = std::string(dir) + "/model.safetensors";
    if (safetensors_write(weights.c_str(), out, {{"format", "pt"}}, err, sizeof(err)) != 0)
        fatal("%s", err);
    const bool bpe = tok != nullptr && tok->kind == TOKENIZER_KIND_GPT2;
    std::string config =
        llama ? "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
              : "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": "
                "\"gpt2\",\n";
    auto put = [&config](const char* key, const std::string& value) {
        config += std::string("  \"") + key + "\": " + value + ",\n";
    };
    auto number = [](double v) {
        char text[32];
        snprintf(text, sizeof(text), "%.17g", v);
        return std::string(text);
    };
    if (llama) {
        const LlamaConfig* l = &c->llama;
        put("vocab_size", std::to_string(c->vocab));
        put("max_position_embeddings", std::to_string(c->context));
        put("hidden_size", std::to_string(c->channels));
        put("intermediate_size", std::to_string(l->mlp_hidden));
        put("num_hidden_layers", std::to_string(c->layers));
        put("num_attention_heads", std::to_string(c->heads));
        put("num_key_value_heads", std::to_string(l->kv_heads));
        put("head_dim", std::to_string(c->channels / c->heads));
        put("hidden_act", "\"silu\"");
        put("rms_norm_eps", number(l->norm_eps));
        put("rope_theta", number(l->rope_theta));
        if (l->rope_scaling == ROPE_SCALING_LLAMA3)
            put("rope_scaling",
                "{\"rope_type\": \"llama3\", \"factor\": " + number(l->rope_factor) +
                    ", \"low_freq_factor\": " + number(l->rope_low_freq_factor) +
                    ", \"high_freq_factor\": " + number(l->rope_high_freq_factor) +
                    ", \"original_max_position_embeddings\": " +
                    std::to_string(l->rope_original_context) + "}");
        else put("rope_scaling", "null");
        put("attention_bias", "false");
        put("mlp_bias", "false");
        put("pretraining_tp", "1");
        put("initializer_range", "0.02");
        put("tie_word_embeddings", l->untied_head ? "false" : "true");
    } else {
        put("vocab_size", std::to_string(c->vocab));
        put("n_positions", std::to_string(c->context));
        put("n_ctx", std::to_string(c->context));
        put("n_embd", std::to_string(c->channels));
        put("n_layer", std::to_string(c->layers));
        put("n_head", std::to_string(c->heads));
        put("n_inner", "null");
        put("activation_function", "\"gelu_new\"");
        put("layer_norm_epsilon", "1e-05");
        put("resid_pdrop", "0.0");  // this trainer has no dropout
        put("embd_pdrop", "0.0");
        put("attn_pdrop", "0.0");
        put("initializer_range", "0.02");
        put("scale_attn_weights", "true");
        put("tie_word_embeddings", "true");
    }
    if (tok != nullptr) {
        put("bos_token_id", std::to_string(tok->eot));
        put("eos_token_id", std::to_string(tok->eot));
    }
    config += "  \"torch_dtype\": \"float32\"\n}\n";
    write_text_file(std::string(dir) + "/config.json", config);
    if (bpe) export_gpt2_tokenizer(tok, dir, c->context);
    printf("wrote %s: config.json, model.safetensors (F32, %d tensors)%s\n", dir, logical->count,
           bpe   ? ", vocab.json, merges.txt, tokenizer_config.json (GPT-2's BPE)"
           : tok ? " (the byte tokenizer has no Hugging Face form: no tokenizer files)"
                 : " (no tokenizer given: no tokenizer files)");
}
