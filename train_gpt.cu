/*
train_gpt.cu: trains a GPT-2-style language model on one GPU or many, in one readable file; with
--arch llama its blocks are Llama's (RMSNorm, RoPE, SwiGLU, grouped-query attention, no biases,
an untied lm head if asked).

It holds, top to bottom: the model configuration; the parameter table (the layout of every
tensor, and which optimizer updates it with what learning rate and weight decay) and the
activation layout; every layer's forward and backward kernel (embedding, layernorm, RMSNorm,
flash-style causal attention with grouped-query heads, QK-norm, RoPE, GELU, SwiGLU, the fused
softmax/cross-entropy/z-loss classifier); the step's
monitors (the largest attention logit, log Z, per-layer gradient norms, update ratios); the forward
pass, the backward pass and the update, a loop over the parameter table. The run around them
(batches from token shards, validation, text samples, checkpoints, the log, the command line,
the memory plan, the training loop and a --sample mode that generates text from a checkpoint) is
train_run.cuh, included at the end. Matrix multiplies go to
cuBLASLt (llmc/matmul.cuh), the optimizer kernels live in llmc/adamw.cuh and llmc/muon.cuh;
data, tokenizer, checkpoint files and the log have a header each in llmc/.

Ranks: under an MPI launcher (mpirun -np N) every process drives one GPU (llmc/comm.cuh). The
ranks form a grid (llmc/parallel.h): tensor-parallel groups of --tp consecutive ranks split every
matrix between them and work on the same tokens (llmc/tensor_parallel.cuh: the layout and the
passes below read this rank's widths from ModelShapes), pipeline groups of --pp ranks each hold
their stages' blocks and pass the micro-batches' activations and gradients on (the executor of
llmc/pipeline.h's schedules, near the end), context-parallel groups of --cp ranks each hold
their share of every sequence's positions and pass keys and values around a ring in attention
(llmc/context_parallel.cuh, over the attention kernels' AttBlock), and the data-parallel groups
across them each read their own part of every global batch. The gradients are averaged over the
data-parallel ranks before the norm, clipping and the optimizers read them, so every replica
takes the same step and keeps bit-identical parameters (checked by a hash at the end); printed
losses are the global batch's. Only rank 0 prints, logs and writes the checkpoint's manifest;
on resume every rank loads the checkpoint rank 0 picks.

Resuming: a checkpoint holds everything the step depends on (weights, master weights, the
optimizers' state and step count, the rounding seed, the loader's position, the generators), so a
run that is killed and resumed from its last checkpoint prints the same losses, bit for bit, as one
that never stopped.

Precision: floatX (llmc/common.cuh) is bf16 by default and fp32 with -DENABLE_FP32. In the bf16
build parameters, gradients and activations are bf16, the optimizers keep fp32 master weights
and fp32 state (AdamW's moments, Muon's momentum), every kernel accumulates in fp32, and parameters
are written back from the master weights with seeded stochastic rounding.

Determinism: there are no floating-point atomics. Every sum over many threads has a fixed
order (warp butterflies, per-chunk partial sums added in chunk order, embedding gradients
grouped by token on the host), so a run gives the same bits on any device and on any number
of CPU threads under the CPU runtime (dev/cpu).

The reference for every number is scripts/reference.py (its docstring specifies the model);
test_gpt.cu includes this file (with TRAIN_GPT_NO_MAIN defined) and compares against its dumps.

The kernels here and in llmc/ are static: the program is one translation unit, and a static
kernel that is only launched needs no entry in the CPU runtime's registry, so a dev/cuda harness
(which includes this file) compiles only the kernels it launches (see launched_only in
dev/cpu/cucc).
*/
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "llmc/common.cuh"  // error checks, floatX, Packed128, warp sums, stochastic rounding
#include "llmc/matmul.cuh"  // matmul(): every matrix product, through cuBLASLt
#include "llmc/mma.cuh"     // mma.sync, ldmatrix and cp.async: the tensor-core attention
#include "llmc/norm.cuh"    // the deterministic L2 norm (gradient clipping, Muon)
#include "llmc/adamw.cuh"   // AdamW's step on one tensor
#include "llmc/muon.cuh"    // Muon's step on one tensor: momentum, Newton-Schulz, update
#include "llmc/lion.cuh"    // Lion's step on one tensor
#include "llmc/schedule.h"  // learning-rate schedules
#include "llmc/comm.cuh"    // ranks (MPI or environment launch) and the NCCL collectives
#include "llmc/parallel.h"  // the process grid (dp, pp, cp, tp): its checks and rank arithmetic
#include "llmc/zero.cuh"    // data parallelism: gradient buckets reduced on a communication stream
#include "llmc/tensor_parallel.cuh"  // tensor and sequence parallelism: the parallel layers
#include "llmc/fp8_linear.cuh"       // --fp8: the linear layers' products in FP8, each recipe
#include "llmc/pipeline.h"           // pipeline parallelism: the schedules the executor below runs

// =============================================================================================
// Configuration

// The block's kind (--arch): GPT-2's (LayerNorm, learned positions, GELU MLP, biases, the lm
// head tied to wte) or Llama's (RMSNorm, RoPE on q and k, SwiGLU MLP, grouped-query attention,
// no biases, no learned positions, an lm head of its own unless tied).
enum ModelArch { ARCH_GPT2 = 0, ARCH_LLAMA = 1 };

// RoPE's frequency scaling for long contexts (--rope-scaling): none, or Llama 3's (transformers'
// rope_type "llama3": wavelengths above original_max / low_freq_factor are divided by factor,
// those below original_max / high_freq_factor kept, the ones between interpolated).
enum RopeScaling { ROPE_SCALING_NONE = 0, ROPE_SCALING_LLAMA3 = 1 };

struct LlamaConfig {
    int arch;           // ModelArch (--arch)
    int kv_heads;       // KVH: key/value heads, each serving heads/KVH query heads (--kv-heads)
    int mlp_hidden;     // SwiGLU's hidden units (--mlp-hidden; resolved from the rule if 0)
    int untied_head;    // 1: the lm head is a tensor of its own (--tie-embeddings 0)
    double norm_eps;    // RMSNorm's eps (--norm-eps)
    double rope_theta;  // RoPE's base (--rope-theta)
    int rope_scaling;   // RopeScaling (--rope-scaling)
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;  // llama3 scaling
    int rope_original_context;  // llama3 scaling's original_max_position_embeddings
};

// Llama's rule for the SwiGLU width: int(2/3 * 4C), rounded up to a multiple of multiple_of.
inline int llama_mlp_hidden(int C, int multiple_of) {
    const int hidden = (int)(2.0 * 4 * C / 3);
    return (hidden + multiple_of - 1) / multiple_of * multiple_of;
}

struct GPTConfig {
    int vocab;         // V: tokens the model predicts
    int padded_vocab;  // Vp: V rounded up to a multiple of 128 (rows of wte, columns of logits)
    int context;       // maxT: rows of wpe, the longest sequence the model accepts
    int layers;        // L
    int heads;         // NH
    int channels;      // C; the head size is HS = C / NH
    int qk_norm;       // 1: RMSNorm of each head's q and k, with learned scales (--qk-norm)
    double z_loss;     // the objective adds z_loss * (log Z)^2 per position (--z-loss; 0: off)
    Fp8Config fp8;     // which matmuls run in FP8 with which recipe (llmc/fp8_linear.cuh)
    LlamaConfig llama;  // the block's kind and Llama's settings (zero: GPT-2's block)
};

inline int padded_vocab_of(int vocab) { return (int)round_up((size_t)vocab, 128); }

// Limits that keep every size the program computes far from overflow; beyond them a value (a
// flag, or a checkpoint's configuration) is refused, never attempted.
constexpr int MAX_SEQ = 1 << 20;    // maxT and T
constexpr int MAX_VOCAB = 1 << 24;  // V
constexpr int MAX_LAYERS = 1024, MAX_HEADS = 1024, MAX_CHANNELS = 1 << 17;
constexpr int MAX_BATCH = 65535;           // attention's grid has one z index per sequence
constexpr double MAX_ROWS = 2147483647.0;  // B*T: kernels index rows with int
constexpr int MAX_SAMPLE_LEN = 1 << 20;    // tokens generated per sample

// The first thing wrong with Llama's settings of model c, or nullptr.
inline const char* llama_config_error(const LlamaConfig* l, const struct GPTConfig* c, char* msg,
                                      size_t len);

// The message of the first thing wrong with a model config and a micro-batch shape (B, T), or
// nullptr when it can be built. msg is scratch space for the message.
inline const char* gpt_config_error(const GPTConfig* c, int B, int T, char* msg, size_t len) {
    if (c->vocab < 1 || c->vocab > MAX_VOCAB)
        snprintf(msg, len, "--vocab must be in [1, %d] (got %d)", MAX_VOCAB, c->vocab);
    else if (c->context < 1 || c->context > MAX_SEQ)
        snprintf(msg, len, "--context must be in [1, %d] (got %d)", MAX_SEQ, c->context);
    else if (c->layers < 1 || c->layers > MAX_LAYERS)
        snprintf(msg, len, "--layers must be in [1, %d] (got %d)", MAX_LAYERS, c->layers);
    else if (c->heads < 1 || c->heads > MAX_HEADS)
        snprintf(msg, len, "--heads must be in [1, %d] (got %d)", MAX_HEADS, c->heads);
    else if (c->channels < 1 || c->channels > MAX_CHANNELS)
        snprintf(msg, len, "--embd must be in [1, %d] (got %d)", MAX_CHANNELS, c->channels);
    else if (c->channels % c->heads != 0)
        snprintf(msg, len, "--heads %d does not divide --embd %d", c->heads, c->channels);
    else if (int hs = c->channels / c->heads; hs != 32 && hs != 64 && hs != 128)
        snprintf(msg, len, "head size --embd/--heads = %d/%d = %d is not supported (32, 64 or 128)",
                 c->channels, c->heads, hs);
    else if (B < 1 || B > MAX_BATCH)
        snprintf(msg, len, "--batch must be in [1, %d] (got %d)", MAX_BATCH, B);
    else if (T < 1) snprintf(msg, len, "--seq must be >= 1 (got %d)", T);
    else if (c->context < T)
        snprintf(msg, len, "--seq %d is longer than the model's context %d (--context)", T,
                 c->context);
    else if ((double)B * T > MAX_ROWS)
        snprintf(msg, len, "--batch %d x --seq %d is more than %.0f rows", B, T, MAX_ROWS);
    else if (c->llama.arch == ARCH_LLAMA) return llama_config_error(&c->llama, c, msg, len);
    else return nullptr;
    return msg;
}

inline const char* llama_config_error(const LlamaConfig* l, const GPTConfig* c, char* msg,
                                      size_t len) {
    if (l->kv_heads < 1 || l->kv_heads > c->heads || c->heads % l->kv_heads != 0)
        snprintf(msg, len, "--kv-heads %d must divide --heads %d", l->kv_heads, c->heads);
    else if (l->mlp_hidden < 1 || l->mlp_hidden > 4 * MAX_CHANNELS)
        snprintf(msg, len, "--mlp-hidden must be in [1, %d] (got %d)", 4 * MAX_CHANNELS,
                 l->mlp_hidden);
    else if ((size_t)l->mlp_hidden * c->channels % TENSOR_ALIGN != 0)
        snprintf(msg, len,
                 "--mlp-hidden %d x --embd %d must be a multiple of %d (the gate and up matrices "
                 "are one matmul: they must be adjacent in the parameter buffer)",
                 l->mlp_hidden, c->channels, (int)TENSOR_ALIGN);
    else if (!(l->norm_eps > 0.0f)) snprintf(msg, len, "--norm-eps must be > 0");
    else if (!(l->rope_theta > 1.0)) snprintf(msg, len, "--rope-theta must be > 1");
    else if (l->rope_scaling == ROPE_SCALING_LLAMA3 &&
             !(l->rope_factor >= 1.0 && l->rope_low_freq_factor > 0.0 &&
               l->rope_high_freq_factor > l->rope_low_freq_factor && l->rope_original_context > 0))
        snprintf(msg, len,
                 "--rope-scaling llama3 needs --rope-factor >= 1, --rope-high-freq-factor > "
                 "--rope-low-freq-factor > 0 and --rope-original-context > 0");
    else return nullptr;
    return msg;
}

// The shapes of this rank's part of the model, in one place: tensor parallelism (--tp,
// llmc/tensor_parallel.cuh) cuts the attention heads, the MLP's hidden units and the vocabulary
// over a group of tp ranks, so the layout, both passes and the checkpoint read the widths here
// and never write 3*C or 4*C themselves. tp = 1: the whole model.
struct ModelShapes {
    int C, NH, HS;    // width, heads and head size of the whole model
    int tp, tp_rank;  // the tensor-parallel degree and this rank's place in its group
    int heads;        // attention heads here: NH / tp
    int att;          // their width, heads * HS = C / tp (q and the attention output)
    int kv_heads;     // key/value heads here: KVH / tp (GPT-2: heads); 1 when tp > KVH
    int kv_replicas;  // ranks holding each of them: 1, or tp / KVH when tp > KVH (Megatron's
                      // replicated kv heads: rank r's query heads all use kv head r / kv_replicas,
                      // whose k and v rows it holds; their gradients are summed over those ranks)
    int kv_att;       // their width, kv_heads * HS (k and v each)
    int qkv;          // [q | k | v] of these heads: att + 2 kv_att
    int mlp;          // hidden units of the MLP here: 4C / tp (Llama: mlp_hidden / tp)
    int fc;           // the MLP's first product's width: mlp (Llama: [gate | up], 2 mlp)
    int vocab;        // vocabulary rows of wte (and logit columns) here: Vp / tp
    int vocab_begin;  // the first of them: tp_rank * vocab
};

inline ModelShapes model_shapes(const GPTConfig* c, int tp, int tp_rank) {
    ModelShapes s;
    s.C = c->channels;
    s.NH = c->heads;
    s.HS = c->channels / c->heads;
    s.tp = tp;
    s.tp_rank = tp_rank;
    s.heads = c->heads / tp;
    s.att = s.heads * s.HS;
    const bool llama = c->llama.arch == ARCH_LLAMA;
    const int kv_heads = llama ? c->llama.kv_heads : c->heads;
    s.kv_replicas = tp > kv_heads ? tp / kv_heads : 1;
    s.kv_heads = kv_heads * s.kv_replicas / tp;
    s.kv_att = s.kv_heads * s.HS;
    s.qkv = s.att + 2 * s.kv_att;
    s.mlp = (llama ? c->llama.mlp_hidden : 4 * c->channels) / tp;
    s.fc = llama ? 2 * s.mlp : s.mlp;
    s.vocab = c->padded_vocab / tp;
    s.vocab_begin = tp_rank * s.vocab;
    return s;
}

// =============================================================================================
// The parameter table: every parameter tensor lives in one buffer, in the order below, each
// starting on a multiple of TENSOR_ALIGN elements (the gap is zero and stays zero: its gradient
// is zero, so the optimizers leave it alone). Gradients and fp32 master weights use the same
// layout in buffers of their own, so a tensor's offset addresses it in all of them, and a later
// ZeRO shard or FP8 128-block never straddles two tensors. Each entry also names the optimizer
// that updates the tensor, whether weight decay applies and its learning-rate multiplier (the
// update, gpt_update, is a loop over the table), and where its state lies in that optimizer's
// state buffers, which hold only that optimizer's tensors, back to back.

enum LayerTensor {  // a block's tensors, in layout order
    LN1_W,
    LN1_B,
    QKV_W,
    QKV_B,
    ATTPROJ_W,
    ATTPROJ_B,
    LN2_W,
    LN2_B,
    FC_W,
    FC_B,
    FCPROJ_W,
    FCPROJ_B,
    Q_NORM_W,  // QK-norm's scales (--qk-norm only): the last two, so a block without them
    K_NORM_W,  // is the first NUM_LAYER_TENSORS - 2
    // Llama's block (--arch llama) has no biases; its q, k, v and its gate (w1) and up (w3)
    // matrices are tensors of their own (Muon orthogonalizes each, tensor parallelism cuts each
    // by rows), laid out next to each other so that each group is one product
    Q_W,
    K_W,
    V_W,
    GATE_W,
    UP_W,
    NUM_LAYER_TENSORS
};
static const char* const LAYER_TENSOR_NAMES[NUM_LAYER_TENSORS] = {
    "ln1.w",       "ln1.b",      "attn.qkv.w",    "attn.qkv.b",    "attn.proj.w",
    "attn.proj.b", "ln2.w",      "ln2.b",         "mlp.fc.w",      "mlp.fc.b",
    "mlp.proj.w",  "mlp.proj.b", "attn.q_norm.w", "attn.k_norm.w", "attn.q.w",
    "attn.k.w",    "attn.v.w",   "mlp.gate.w",    "mlp.up.w"};

// A block's tensors in layout order, per kind (the last two, QK-norm's, only with --qk-norm).
// Llama's: ln1.w and ln2.w are its RMSNorms' scales, mlp.proj.w its down matrix (w2).
static const int GPT2_BLOCK_TENSORS[] = {LN1_W,     LN1_B,    QKV_W,    QKV_B,   ATTPROJ_W,
                                         ATTPROJ_B, LN2_W,    LN2_B,    FC_W,    FC_B,
                                         FCPROJ_W,  FCPROJ_B, Q_NORM_W, K_NORM_W};
static const int LLAMA_BLOCK_TENSORS[] = {LN1_W,  Q_W,  K_W,      V_W,      ATTPROJ_W, LN2_W,
                                          GATE_W, UP_W, FCPROJ_W, Q_NORM_W, K_NORM_W};

// The optimizers. Each tensor of the parameter table names its optimizer (OptimizerKind), an
// index into OPTIMIZERS, the optimizer table: its name, its state buffers, whether it needs
// whole matrices and its update. The state layout (state_elems, state_index), the shard plan
// (whole matrices or element ranges), gpt_update and the checkpoint's state sections read
// the table; a new optimizer is a row there, its state buffers in STATE_BUFFERS, its kernel in a
// header of its own and its settings in OptimizerConfig.
enum OptimizerKind { OPT_ADAMW = 0, OPT_MUON = 1, OPT_LION = 2, NUM_OPTIMIZERS };

// Which optimizer takes which tensors, and the settings of each (the peak learning rates are
// the schedules', in the training loop). kind OPT_MUON puts the hidden matrices (attn.qkv.w,
// attn.proj.w, mlp.fc.w, mlp.proj.w) on Muon; wte (also the lm head), wpe, the biases and the
// norm scales stay on AdamW. OPT_ADAMW and OPT_LION put every tensor on that optimizer.
struct OptimizerConfig {
    int kind;                  // OptimizerKind: see above
    double weight_decay;       // decoupled, on 2-D tensors, with the optimizer's unadjusted lr
    double beta1, beta2, eps;  // AdamW
    double muon_momentum;      // mu
    int muon_nesterov;         // 1: Nesterov momentum
    int muon_ns_steps;         // Newton-Schulz iterations
    int muon_adjust;           // MuonAdjust (llmc/muon.cuh): the lr's shape adjustment
    double lion_beta1;         // Lion's interpolation of the momentum and the gradient (sign)
    double lion_beta2;         // Lion's momentum decay
};

// The optimizer of a tensor under configuration opt: Muon takes the hidden matrices (AdamW the
// rest), AdamW and Lion every tensor.
inline int tensor_optimizer(const OptimizerConfig* opt, bool hidden_matrix) {
    if (opt->kind == OPT_MUON) return hidden_matrix ? OPT_MUON : OPT_ADAMW;
    return opt->kind;
}

// The optimizers' state buffers. Each holds the state of the ranges of the parameter layout this
// rank owns under the shard plan (llmc/zero.cuh) with that optimizer, at the plan's state
// offsets (OwnedRange::state); the names are the checkpoint's section names.
enum StateBuffer { ADAMW_M, ADAMW_V, MUON_MOMENTUM, LION_M, NUM_STATE_BUFFERS };
struct StateBufferInfo {
    const char* name;
    int optimizer;      // whose tensors it holds
    size_t elem_bytes;  // per element (every state is fp32 today)
};
static const StateBufferInfo STATE_BUFFERS[NUM_STATE_BUFFERS] = {
    {"optimizer.adamw.m", OPT_ADAMW, sizeof(float)},
    {"optimizer.adamw.v", OPT_ADAMW, sizeof(float)},
    {"optimizer.muon.momentum", OPT_MUON, sizeof(float)},
    {"optimizer.lion.m", OPT_LION, sizeof(float)}};

// What every update gets of a step: its optimizer's scheduled lr, the clipping scale of the
// gradients and the stochastic rounding seed. Each row's update builds its own argument struct
// (AdamWHyper, MuonHyper, LionHyper) from these and the model's OptimizerConfig.
struct OptimizerStep {
    double lr, grad_scale;
    uint32_t seed;
};
struct GPT;
typedef void (*OptimizerUpdate)(GPT* m, const OwnedRange* r, const OptimizerStep* step);
inline void adamw_step(GPT* m, const OwnedRange* r, const OptimizerStep* step);
inline void muon_step(GPT* m, const OwnedRange* r, const OptimizerStep* step);
inline void lion_step(GPT* m, const OwnedRange* r, const OptimizerStep* step);

struct OptimizerInfo {
    const char* name;              // --optimizer's word, and the checkpoints' and logs' name
    int first_state, state_count;  // its state buffers: STATE_BUFFERS[first_state ...]
    bool whole_matrices;           // updates each matrix of a tensor whole (Newton-Schulz); else
                                   // element-wise, on ranges cut anywhere
    OptimizerUpdate update;        // one owned range of one of its tensors
};
static const OptimizerInfo OPTIMIZERS[NUM_OPTIMIZERS] = {
    {"adamw", ADAMW_M, 2, false, adamw_step},
    {"muon", MUON_MOMENTUM, 1, true, muon_step},
    {"lion", LION_M, 1, false, lion_step}};

struct ParamTensor {
    char name[32];   // as in the reference dump: "wte", "h3.attn.qkv.w", "lnf.b"
    int rows, cols;  // shape (rows, cols) of a 2-D tensor; 1-D tensors have cols = 0
    size_t numel;
    size_t offset;    // in elements from the start of the parameter/gradient/master buffers
    int optimizer;    // OptimizerKind: its row in OPTIMIZERS
    int matrices;     // an optimizer of whole matrices: `matrices` row blocks of (rows /
                      // matrices, cols), each a matrix of its own (qkv.w: Q, K and V); 1
                      // otherwise
    bool decay;       // weight decay applies (2-D tensors only)
    double lr_scale;  // the optimizer's scheduled lr is multiplied by this: AdamW 1 (the
                      // whole step); Muon the shape adjustment of one matrix (the update
                      // only: weight decay uses the unadjusted lr, as torch's Muon does)
    float init_std;   // > 0: drawn from N(0, init_std); else filled with init_value
    float init_value;
    TpShape tp_shape;  // the logical tensor and how tensor parallelism cuts it (llmc/parallel.h);
                       // rows, cols above are this rank's part
    bool held;  // this rank holds it; under pipeline parallelism only its stages' tensors are
                // (the others keep their entry with rows = numel = 0, taking no space)
};

// Where the model's tensors are in ParamLayout::tensors, filled by build_param_layout as it
// adds them: the passes, the gradient groups and the tests find a tensor through it, never by
// its position. A block's tensors follow its kind's tensor table (GPT-2's: LayerTensor).
struct ParamIndex {
    int wte, wpe;      // the embeddings (wpe: -1 under Llama, which has none)
    int lm_head;       // the lm head: wte when tied (GPT-2 always), else a tensor of its own
    int lnf_w, lnf_b;  // the final norm (lnf_b: -1 under Llama's RMSNorm)
    int blocks;        // L
    int block_first;   // block l's tensor `which` is block_first + l * per_block + slot[which]
    int per_block;     // tensors of a block: its kind's table, less 2 without QK-norm
    int slot[NUM_LAYER_TENSORS];   // a LayerTensor's place in the block (-1: this kind has none)
    int which[NUM_LAYER_TENSORS];  // the LayerTensor at each place
};

// Block l's tensor `which` (a LayerTensor), or -1 when the block's kind has none.
inline int block_tensor(const ParamIndex* at, int l, int which) {
    const int slot = at->slot[which];
    return slot < 0 ? -1 : at->block_first + l * at->per_block + slot;
}

// The block tensor `index` belongs to, or -1 for a tensor outside the blocks.
inline int block_of_tensor(const ParamIndex* at, int index) {
    const int first = at->block_first, end = first + at->blocks * at->per_block;
    return index >= first && index < end ? (index - first) / at->per_block : -1;
}

// Which LayerTensor block tensor `index` is (a tensor of block l).
inline int which_of_tensor(const ParamIndex* at, int l, int index) {
    return at->which[index - (at->block_first + l * at->per_block)];
}

struct ParamLayout {
    int count;             // the tensors outside the blocks and per_block * L
    ParamTensor* tensors;  // in layout order: wte, wpe (Llama: lm_head if untied), h0.ln1.w ...
                           // h{L-1}.<last>, lnf.w, lnf.b (Llama: lnf.w only)
    ParamIndex index;      // where each of them is
    size_t total;          // parameter buffer size in elements
};

// Whether pipeline rank `rank` holds block l, the embeddings (wte and wpe: stage 0) and the
// head (lnf and, tied, wte: the last stage). pipe nullptr: no pipeline, every rank holds all.
inline bool pipe_holds_block(const PipeConfig* pipe, int rank, int l) {
    return !pipe || pipe_rank_of(pipe, l / (pipe->layers / pipe_stage_count(pipe))) == rank;
}
inline bool pipe_holds_embeddings(const PipeConfig* pipe, int rank) { return !pipe || rank == 0; }
inline bool pipe_holds_head(const PipeConfig* pipe, int rank) {
    return !pipe || pipe_rank_of(pipe, pipe_stage_count(pipe) - 1) == rank;
}

// The table of this rank's part of the model (shapes s; tp = 1 and pipe nullptr: the whole
// model, the logical table that checkpoints describe). Every rank of a tensor-parallel group
// has the same table; under pipeline parallelism (pipe) rank pipe_rank holds its stages'
// tensors only, the others' entries keep their logical shape (tp_shape) and take no space.
inline void build_param_layout(ParamLayout* layout, const GPTConfig* c, const OptimizerConfig* opt,
                               const ModelShapes* s, const PipeConfig* pipe = nullptr,
                               int pipe_rank = 0) {
    const int C = c->channels, L = c->layers, HS = s->HS, tp = s->tp;
    const bool llama = c->llama.arch == ARCH_LLAMA;
    const int* kind = llama ? LLAMA_BLOCK_TENSORS : GPT2_BLOCK_TENSORS;
    const int kind_count = llama ? (int)(sizeof(LLAMA_BLOCK_TENSORS) / sizeof(int))
                                 : (int)(sizeof(GPT2_BLOCK_TENSORS) / sizeof(int));
    ParamIndex* at = &layout->index;
    at->blocks = L;
    at->per_block = kind_count - (c->qk_norm ? 0 : 2);
    for (int j = 0; j < NUM_LAYER_TENSORS; j++) at->slot[j] = -1;
    for (int j = 0; j < at->per_block; j++) {
        at->slot[kind[j]] = j;
        at->which[j] = kind[j];
    }
    // outside the blocks: wte, wpe, lnf.w, lnf.b (Llama: wte, the untied lm head, lnf.w)
    const int outside = llama ? 2 + c->llama.untied_head : 4;
    layout->count = outside + at->per_block * L;
    layout->tensors = (ParamTensor*)MALLOC_CHECK(layout->count * sizeof(ParamTensor));
    size_t offset = 0;
    int index = 0;
    // rows, cols: this rank's part; split: how the logical tensor is cut (parts: of its rows).
    // Returns the tensor's index.
    auto add = [&](const char* name, int rows, int cols, float init_std, float init_value,
                   int optimizer, int matrices, int split, int parts, bool held, int replicas = 1) {
        ParamTensor* t = &layout->tensors[index];
        snprintf(t->name, sizeof(t->name), "%s", name);
        t->held = held;
        t->rows = held ? rows : 0;
        t->cols = cols;
        t->numel = (size_t)t->rows * (cols > 0 ? cols : 1);
        t->offset = offset;
        t->optimizer = optimizer;
        t->matrices = matrices;
        t->decay = cols > 0;
        t->tp_shape = TpShape{split, parts, split == TP_ROWS ? rows * tp / replicas : rows,
                              split == TP_COLS ? cols * tp : cols, replicas};
        // the shape adjustment of a whole (logical) matrix: the same lr on every grid
        t->lr_scale =
            optimizer == OPT_MUON
                ? muon_lr_scale(opt->muon_adjust, t->tp_shape.rows / matrices, t->tp_shape.cols)
                : 1.0;
        t->init_std = init_std;
        t->init_value = init_value;
        offset += round_up(t->numel, TENSOR_ALIGN);
        return index++;
    };
    const float std = 0.02f, residual_std = 0.02f / sqrtf(2.0f * L);
    const bool embeddings = pipe_holds_embeddings(pipe, pipe_rank);
    const bool head = pipe_holds_head(pipe, pipe_rank);
    at->wte = add("wte", s->vocab, C, std, 0.0f, tensor_optimizer(opt, false), 1, TP_ROWS, 1,
                  embeddings || (head && !c->llama.untied_head));
    at->wpe = llama ? -1
                    : add("wpe", c->context, C, std, 0.0f, tensor_optimizer(opt, false), 1,
                          TP_REPLICATED, 1, embeddings);
    // the untied lm head: next to wte, in the embeddings' gradient group as the tied one is
    at->lm_head = c->llama.untied_head ? add("lm_head", s->vocab, C, std, 0.0f,
                                             tensor_optimizer(opt, false), 1, TP_ROWS, 1, head)
                                       : at->wte;
    // (rows, cols) of this rank's part of each block tensor and how it is cut, in LayerTensor
    // order: column-parallel layers by output rows (attn.qkv in its Q, K and V parts), row-
    // parallel ones by input columns, the rest replicated
    struct BlockTensor {
        int rows, cols, split, parts;
    };
    const BlockTensor shapes[NUM_LAYER_TENSORS] = {
        {C, 0, TP_REPLICATED, 1},   {C, 0, TP_REPLICATED, 1},   {s->qkv, C, TP_ROWS, 3},
        {s->qkv, 0, TP_ROWS, 3},    {C, s->att, TP_COLS, 1},    {C, 0, TP_REPLICATED, 1},
        {C, 0, TP_REPLICATED, 1},   {C, 0, TP_REPLICATED, 1},   {s->mlp, C, TP_ROWS, 1},
        {s->mlp, 0, TP_ROWS, 1},    {C, s->mlp, TP_COLS, 1},    {C, 0, TP_REPLICATED, 1},
        {HS, 0, TP_REPLICATED, 1},  {HS, 0, TP_REPLICATED, 1},  {s->att, C, TP_ROWS, 1},
        {s->kv_att, C, TP_ROWS, 1}, {s->kv_att, C, TP_ROWS, 1}, {s->mlp, C, TP_ROWS, 1},
        {s->mlp, C, TP_ROWS, 1}};
    at->block_first = index;
    for (int l = 0; l < L; l++) {
        for (int slot = 0; slot < at->per_block; slot++) {
            const int j = kind[slot];
            const BlockTensor* b = &shapes[j];
            char name[32];
            snprintf(name, sizeof(name), "h%d.%s", l, LAYER_TENSOR_NAMES[j]);
            const bool is_matrix = b->cols > 0;
            const bool is_gain = j == LN1_W || j == LN2_W || j == Q_NORM_W || j == K_NORM_W;
            const float tensor_std = !is_matrix                          ? 0.0f
                                     : (j == ATTPROJ_W || j == FCPROJ_W) ? residual_std
                                                                         : std;
            // every matrix of a block is a hidden matrix
            const int optimizer = tensor_optimizer(opt, is_matrix);
            add(name, b->rows, b->cols, tensor_std, is_gain ? 1.0f : 0.0f, optimizer,
                OPTIMIZERS[optimizer].whole_matrices && j == QKV_W ? 3 : 1, b->split, b->parts,
                pipe_holds_block(pipe, pipe_rank, l), j == K_W || j == V_W ? s->kv_replicas : 1);
        }
    }
    at->lnf_w =
        add("lnf.w", C, 0, 0.0f, 1.0f, tensor_optimizer(opt, false), 1, TP_REPLICATED, 1, head);
    at->lnf_b = llama ? -1
                      : add("lnf.b", C, 0, 0.0f, 0.0f, tensor_optimizer(opt, false), 1,
                            TP_REPLICATED, 1, head);
    layout->total = offset;
    // Llama's q, k, v (and gate, up) are one product each: their parts must be adjacent
    for (int l = 0; llama && l < L; l++)
        for (int pair : {Q_W, K_W, GATE_W}) {
            const ParamTensor* a = &layout->tensors[block_tensor(at, l, pair)];
            const ParamTensor* b = &layout->tensors[block_tensor(at, l, pair + 1)];
            if (a->numel > 0 && a->offset + a->numel != b->offset)
                fatal(
                    "%s and %s are not adjacent in the parameter buffer (%zu elements are not "
                    "a multiple of %zu: change --mlp-hidden or --embd)",
                    a->name, b->name, a->numel, TENSOR_ALIGN);
        }
}

// Number of model parameters (of the whole model: the logical tensors, without the alignment
// gaps and without wte's padding rows).
inline size_t count_parameters(const ParamLayout* layout, const GPTConfig* c) {
    size_t n = 0;
    for (int i = 0; i < layout->count; i++) {
        const TpShape* t = &layout->tensors[i].tp_shape;
        n += (size_t)t->rows * (t->cols > 0 ? t->cols : 1);
    }
    const int vocab_tensors = c->llama.untied_head ? 2 : 1;  // wte and the untied lm head
    return n - (size_t)vocab_tensors * (c->padded_vocab - c->vocab) * c->channels;
}

// =============================================================================================
// Activation layout: everything the forward pass keeps for the backward pass, plus the
// backward pass's scratch, in two buffers (floatX and float), each tensor aligned like the
// parameters. Shapes for a micro-batch of B sequences of T tokens, N = B*T rows.
//
// Activation recompute (--recompute) trades memory for compute: a block's activation that the
// policy does not keep is not saved per block; every block writes it into one buffer shared
// by all blocks, and the backward pass of block l recomputes it there, with the forward pass's
// own kernels on the same inputs (so the bits are the same), before it reads it:
//   none       every activation of every block is kept;
//   selective  the LayerNorm outputs and the GELU output (6C of a block's 16C floatX values per
//              token) are recomputed: from the block input or residual2 and the saved mean and
//              rstd, and from the pre-GELU fch;
//   full       only the block's output (residual3, the next block's input) is kept; the block's
//              forward pass is rerun from its input, up to the GELU, before its backward pass.

enum RecomputePolicy { RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL, NUM_RECOMPUTE };
static const char* const RECOMPUTE_NAMES[NUM_RECOMPUTE] = {"none", "selective", "full"};

// Shapes in this rank's widths (ModelShapes: att, qkv, mlp, heads, vocab; the whole model's
// without tensor parallelism) for a micro-batch of N = B*T tokens; S is the rows this rank keeps
// of the residual stream and the LayerNorms: N, or N/tp under sequence parallelism.
struct LayerActivations {
    floatX* ln1;        // (S,C)   ln1 output
    float* ln1_mean;    // (S)
    float* ln1_rstd;    // (S)
    floatX* qkv;        // (N,qkv) [q | k | v] of this rank's heads, q (heads, HS) and k, v
                        //         (kv_heads, HS) each; q and k QK-normed and (Llama) rotated
                        //         by RoPE in place
    floatX* qk_raw;     // (N,att+kv_att) [q | k] before QK-norm (--qk-norm only, else nullptr)
    float* qk_rstd;     // (N,heads+kv_heads) 1/rms of each head's q and k (--qk-norm only)
    floatX* atty;       // (N,att) attention output, heads side by side
    float* lse;         // (B,heads,T) log-sum-exp of each query's attention scores
    floatX* residual2;  // (S,C)   block input + attention projection
    floatX* ln2;        // (S,C)
    float* ln2_mean;    // (S)
    float* ln2_rstd;    // (S)
    floatX* fch;        // (N,fc)  fc output before GELU (Llama: [gate | up], (N,2 mlp))
    floatX* fch_gelu;   // (N,mlp) GELU's output (Llama: SwiGLU's, silu(gate) * up)
    floatX* residual3;  // (S,C)   block output: residual2 + mlp projection
};

// The activation tables: each saved tensor of a block (and then of the model, outside the
// blocks), its width per row in this rank's shapes (c x C + att x the attention width + heads x
// the heads + mlp x the MLP width + vocab x the vocabulary columns, ModelShapes), whether it
// lies between the tensor-parallel regions (seq: under sequence parallelism a rank keeps N/tp of
// its rows), its type, the last policy that keeps it, and the backward step that reads it.
struct ActivationInfo {
    const char* name;
    size_t field;   // offsetof(LayerActivations, ...), or offsetof(Activations, ...)
    bool is_float;  // float, else floatX
    int c, att, heads, mlp, vocab;
    bool seq;
    bool qk_norm_only;
    int kept_until;  // kept under policies up to this one
    const char* read_by;
    int qkv, qk, qk_heads, fc;  // x the qkv width, q and k's, their heads', fc's (ModelShapes)
    bool layernorm_only;        // GPT-2's LayerNorm means (Llama's RMSNorm has none)
};
#define ACT(f) #f, offsetof(LayerActivations, f)
static const ActivationInfo BLOCK_ACTIVATIONS[] = {
    {ACT(ln1), false, 1, 0, 0, 0, 0, true, false, RECOMPUTE_NONE, "the qkv weight gradient"},
    {ACT(ln1_mean), true, 0, 0, 0, 0, 0, true, false, RECOMPUTE_SELECTIVE, "ln1 backward", 0, 0, 0,
     0, true},
    {ACT(ln1_rstd), true, 0, 0, 0, 0, 0, true, false, RECOMPUTE_SELECTIVE, "ln1 backward"},
    {ACT(qkv), false, 0, 0, 0, 0, 0, false, false, RECOMPUTE_SELECTIVE, "attention backward", 1},
    {ACT(qk_raw), false, 0, 0, 0, 0, 0, false, true, RECOMPUTE_SELECTIVE, "QK-norm backward", 0, 1},
    {ACT(qk_rstd), true, 0, 0, 0, 0, 0, false, true, RECOMPUTE_SELECTIVE, "QK-norm backward", 0, 0,
     1},
    {ACT(atty), false, 0, 1, 0, 0, 0, false, false, RECOMPUTE_SELECTIVE,
     "attention backward, attn.proj gradient"},
    {ACT(lse), true, 0, 0, 1, 0, 0, false, false, RECOMPUTE_SELECTIVE, "attention backward"},
    {ACT(residual2), false, 1, 0, 0, 0, 0, true, false, RECOMPUTE_SELECTIVE, "ln2 backward"},
    {ACT(ln2), false, 1, 0, 0, 0, 0, true, false, RECOMPUTE_NONE, "the mlp.fc weight gradient"},
    {ACT(ln2_mean), true, 0, 0, 0, 0, 0, true, false, RECOMPUTE_SELECTIVE, "ln2 backward", 0, 0, 0,
     0, true},
    {ACT(ln2_rstd), true, 0, 0, 0, 0, 0, true, false, RECOMPUTE_SELECTIVE, "ln2 backward"},
    {ACT(fch), false, 0, 0, 0, 0, 0, false, false, RECOMPUTE_SELECTIVE, "GELU backward", 0, 0, 0,
     1},
    {ACT(fch_gelu), false, 0, 0, 0, 1, 0, false, false, RECOMPUTE_NONE,
     "the mlp.proj weight gradient"},
    {ACT(residual3), false, 1, 0, 0, 0, 0, true, false, RECOMPUTE_FULL,
     "the next block (its input)"},
};
#undef ACT
constexpr int NUM_BLOCK_ACTIVATIONS = sizeof(BLOCK_ACTIVATIONS) / sizeof(BLOCK_ACTIVATIONS[0]);

// Values per row of an activation (a mean or rstd: 1).
inline size_t activation_width(const ActivationInfo* info, const ModelShapes* s) {
    const size_t width =
        (size_t)info->c * s->C + (size_t)info->att * s->att + (size_t)info->heads * s->heads +
        (size_t)info->mlp * s->mlp + (size_t)info->vocab * s->vocab + (size_t)info->qkv * s->qkv +
        (size_t)info->qk * (s->att + s->kv_att) +
        (size_t)info->qk_heads * (s->heads + s->kv_heads) + (size_t)info->fc * s->fc;
    return width > 0 ? width : 1;
}

// Whether model c has an activation at all (QK-norm's with --qk-norm, the means under GPT-2).
inline bool activation_present(const ActivationInfo* info, const GPTConfig* c) {
    return (!info->qk_norm_only || c->qk_norm) &&
           (!info->layernorm_only || c->llama.arch == ARCH_GPT2);
}

// Rows of an activation on this rank for a micro-batch of N tokens.
inline size_t activation_rows(const ActivationInfo* info, size_t N, const ModelShapes* s,
                              bool sequence_parallel) {
    return info->seq && sequence_parallel ? N / s->tp : N;
}

struct Activations {
    int recompute;             // RecomputePolicy
    bool sequence_parallel;    // the seq activations hold N/tp rows (llmc/tensor_parallel.cuh)
    size_t seq_bytes;          // of the seq activations (tables above, and dresidual), unaligned
    floatX* encoded;           // (S,C) wte[token] + wpe[position]; under pipeline parallelism
                               // the input of the running chunk (its slot's, see Pipeline)
    LayerActivations* layers;  // L entries (a host array of device pointers)
    // where the blocks' activations are laid out: `layers` itself, or under pipeline
    // parallelism `stored` sets of a chunk's blocks each, one per micro-batch in flight, that
    // the executor points the chunk's entries of `layers` at (pipe_bind)
    LayerActivations* stored;
    int stored_count;
    bool head;  // lnf, the logits and the losses are here (pipeline: the last stage's rank only)
    floatX* lnf;               // (S,C)
    float* lnf_mean;           // (S)
    float* lnf_rstd;           // (S)
    floatX* logits;            // (N,vocab) this rank's vocabulary columns; the classifier
                               // overwrites them with dlogits
    float* losses;             // (N) cross-entropy of each position
    float* z_losses;           // (N) z-loss of each position: coef * (log Z)^2
    float* log_z;              // (N) log Z of each position (the monitors' mean and max)
    floatX* proj_out;          // (N,C) attn.proj / mlp.proj output before the residual add (a
                               // partial sum under tensor parallelism, until g sums it)
    // backward scratch, reused by every layer
    floatX* dresidual;     // (S,C) gradient of the residual stream
    floatX* dlinear_in;    // (N,C) gradient of a linear layer's input: lnf, ln2, ln1, atty
    floatX* dqkv;          // (N,qkv)
    floatX* dfch;          // (N,fc) gradient of fch_gelu, then of fch (in place; Llama: of
                           // fch only)
    floatX* dswiglu;       // (N,mlp) Llama: the gradient of SwiGLU's output (else nullptr)
    float* att_delta;      // (B,heads,T) rowsum(dO * O) of each query, for attention backward
    float* col_partials;   // (ceil(N/COLUMN_CHUNK), 2, max(C, qkv, mlp)) per-chunk column sums
    // tensor parallelism: the vocabulary-parallel cross-entropy's statistics, (N) and (tp, N)
    SoftmaxStats* softmax_stats;
    SoftmaxStats* softmax_stats_all;
    // sequence parallelism: a LayerNorm output and a residual gradient, all-gathered (N,C)
    floatX* gathered;
    floatX* dgathered;
};

#define ACT(f) #f, offsetof(Activations, f)
static const ActivationInfo MODEL_ACTIVATIONS[] = {
    {ACT(encoded), false, 1, 0, 0, 0, 0, true, false, RECOMPUTE_FULL, "block 0 (its input)"},
    {ACT(lnf), false, 1, 0, 0, 0, 0, true, false, RECOMPUTE_FULL, "the lm head's weight gradient"},
    {ACT(lnf_mean), true, 0, 0, 0, 0, 0, true, false, RECOMPUTE_FULL, "lnf backward", 0, 0, 0, 0,
     true},
    {ACT(lnf_rstd), true, 0, 0, 0, 0, 0, true, false, RECOMPUTE_FULL, "lnf backward"},
    {ACT(logits), false, 0, 0, 0, 0, 1, false, false, RECOMPUTE_FULL,
     "the lm head backward (as dlogits)"},
    {ACT(losses), true, 0, 0, 0, 0, 0, false, false, RECOMPUTE_FULL, "the loss (host)"},
    {ACT(z_losses), true, 0, 0, 0, 0, 0, false, false, RECOMPUTE_FULL, "the z-loss (host)"},
    {ACT(log_z), true, 0, 0, 0, 0, 0, false, false, RECOMPUTE_FULL, "the log Z monitor"},
};
#undef ACT
constexpr int NUM_MODEL_ACTIVATIONS = sizeof(MODEL_ACTIVATIONS) / sizeof(MODEL_ACTIVATIONS[0]);

// Rows summed by one thread of the column reductions (bias and layernorm parameter grads).
constexpr int COLUMN_CHUNK = 32;

template <class T>
void take_tensor(T** ptr, T* base, size_t* cursor, size_t numel) {
    *ptr = base ? base + *cursor : nullptr;
    *cursor += round_up(numel, TENSOR_ALIGN);
}

// Assigns every pointer of `acts` inside xbase / fbase (or nullptr while they are nullptr) and
// returns the sizes the two buffers need, under recompute policy acts->recompute and this rank's
// shapes s. acts->stored must hold acts->stored_count entries.
inline void layout_activations(Activations* acts, const GPTConfig* c, const ModelShapes* s, int B,
                               int T, floatX* xbase, float* fbase, size_t* x_elems,
                               size_t* f_elems) {
    const size_t N = (size_t)B * T, C = c->channels;
    size_t xc = 0, fc = 0;
    acts->seq_bytes = 0;
    auto take = [&](void** ptr, const ActivationInfo* info) {
        const size_t n =
            activation_rows(info, N, s, acts->sequence_parallel) * activation_width(info, s);
        if (info->seq) acts->seq_bytes += n * (info->is_float ? sizeof(float) : sizeof(floatX));
        if (info->is_float) take_tensor((float**)ptr, fbase, &fc, n);
        else take_tensor((floatX**)ptr, xbase, &xc, n);
    };
    // the model's, outside the blocks: under pipeline parallelism the head's on the last
    // stage's rank only, and the embeddings (block 0's input) in the executor's slots
    const bool pipelined = acts->stored != acts->layers;
    for (int i = 0; i < NUM_MODEL_ACTIVATIONS; i++) {
        void** ptr = (void**)((char*)acts + MODEL_ACTIVATIONS[i].field);
        const bool encoded = MODEL_ACTIVATIONS[i].field == offsetof(Activations, encoded);
        if ((encoded ? pipelined : !acts->head) || !activation_present(&MODEL_ACTIVATIONS[i], c))
            *ptr = nullptr;
        else take(ptr, &MODEL_ACTIVATIONS[i]);
    }
    // a block's activations: its own buffer when the policy keeps it, else the one all blocks
    // share (taken by the first block)
    for (int l = 0; l < acts->stored_count; l++) {
        for (int i = 0; i < NUM_BLOCK_ACTIVATIONS; i++) {
            const ActivationInfo* info = &BLOCK_ACTIVATIONS[i];
            void** ptr = (void**)((char*)&acts->stored[l] + info->field);
            const bool present = activation_present(info, c);
            if (!present || (l > 0 && acts->recompute > info->kept_until)) {
                *ptr = present ? *(void**)((char*)&acts->stored[0] + info->field) : nullptr;
                continue;
            }
            take(ptr, info);
        }
    }
    // the scratch of the passes: not saved, used by one layer at a time
    const size_t seq_rows = acts->sequence_parallel ? N / s->tp : N;
    take_tensor(&acts->proj_out, xbase, &xc, N * C);
    take_tensor(&acts->dresidual, xbase, &xc, seq_rows * C);
    acts->seq_bytes += seq_rows * C * sizeof(floatX);
    take_tensor(&acts->dlinear_in, xbase, &xc, N * C);
    take_tensor(&acts->dqkv, xbase, &xc, N * s->qkv);
    take_tensor(&acts->dfch, xbase, &xc, N * s->fc);
    take_tensor(&acts->dswiglu, xbase, &xc, c->llama.arch == ARCH_LLAMA ? N * s->mlp : 0);
    take_tensor(&acts->att_delta, fbase, &fc, N * s->heads);
    const size_t widest_column_sum = std::max<size_t>(C, std::max(s->qkv, s->fc));
    take_tensor(&acts->col_partials, fbase, &fc, ceil_div(N, COLUMN_CHUNK) * 2 * widest_column_sum);
    const size_t stats_floats = sizeof(SoftmaxStats) / sizeof(float);
    const size_t stats = s->tp > 1 ? N * stats_floats : 0;
    take_tensor((float**)&acts->softmax_stats, fbase, &fc, stats);
    take_tensor((float**)&acts->softmax_stats_all, fbase, &fc, stats * s->tp);
    take_tensor(&acts->gathered, xbase, &xc, acts->sequence_parallel ? N * C : 0);
    take_tensor(&acts->dgathered, xbase, &xc, acts->sequence_parallel ? N * C : 0);
    *x_elems = xc;
    *f_elems = fc;
}

// =============================================================================================
// Kernels. Layouts are row-major: (B,T,C) means element (b,t,c) at (b*T + t)*C + c, and the
// N = B*T rows are processed as one batch of rows wherever the position does not matter.

// ---------------------------------------------------------------------------------------------
// Embedding. Forward: out[b,t,:] = wte[token[b,t],:] + wpe[p,:] with p = t, or under context
// parallelism p = positions[t], the sequence position of the rank's row t
// (llmc/context_parallel.cuh's cp_position; the backward pass likewise). One thread per 16-byte
// pack of a row. Under tensor parallelism this rank's wte holds the rows of tokens [v0, v0 + Vl)
// only: the other tokens' rows are zero here (the sum over the group fills them in), and wpe is
// added by one rank of the group only (wpe nullptr on the others). The sum over the group then
// adds zeros to each element, exactly: the same bits as on one rank.

static __global__ void encoder_forward_kernel(floatX* out, const int* tokens, const floatX* wte,
                                              const floatX* wpe, const int* positions, int N, int T,
                                              int C, int v0, int Vl) {
    const int packs_per_row = C / x128::size;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N * packs_per_row;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t row = i / packs_per_row;
        int c = (int)(i % packs_per_row) * x128::size;
        int t = (int)(row % T);
        if (positions) t = positions[t];
        const int token = tokens[row] - v0;
        x128 tok = token >= 0 && token < Vl ? load128(wte + (size_t)token * C + c) : x128::zeros();
        x128 pos = wpe ? load128(wpe + (size_t)t * C + c) : x128::zeros();
        x128 o;
        for (int k = 0; k < x128::size; k++) o[k] = (floatX)((float)tok[k] + (float)pos[k]);
        store128(out + row * C + c, o);
    }
}

inline void encoder_forward(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe,
                            int B, int T, int C, int v0, int Vl, cudaStream_t stream,
                            const int* positions = nullptr) {
    const int block = 256;
    encoder_forward_kernel<<<grid_for((size_t)B * T * C / x128::size, block), block, 0, stream>>>(
        out, tokens, wte, wpe, positions, B * T, T, C, v0, Vl);
    CUDA_CHECK_LAUNCH();
}

// Backward, without atomics. dwpe[t,:] += sum over b of dout[b,t,:]: a thread owns one pack of
// one position and adds the B rows in order.
static __global__ void wpe_backward_kernel(floatX* dwpe, const floatX* dout, const int* positions,
                                           int B, int T, int C) {
    const int packs_per_row = C / x128::size;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)T * packs_per_row;
         i += (size_t)gridDim.x * blockDim.x) {
        int t = (int)(i / packs_per_row), c = (int)(i % packs_per_row) * x128::size;
        float acc[x128::size] = {};
        for (int b = 0; b < B; b++) {
            x128 d = load128(dout + ((size_t)b * T + t) * C + c);
            for (int k = 0; k < x128::size; k++) acc[k] += (float)d[k];
        }
        floatX* at = dwpe + (size_t)(positions ? positions[t] : t) * C + c;
        x128 g = load128(at);
        for (int k = 0; k < x128::size; k++) g[k] = (floatX)((float)g[k] + acc[k]);
        store128(at, g);
    }
}

// dwte[v,:] += sum of dout over the positions holding token v. The host groups the positions
// by token (TokenBuckets): bucket j is token bucket_token[j] at positions
// bucket_pos[bucket_start[j] .. bucket_start[j+1]), ascending. A thread owns one pack of one
// bucket's row, so no two threads touch the same gradient element.
static __global__ void wte_backward_kernel(floatX* dwte, const floatX* dout,
                                           const int* bucket_token, const int* bucket_start,
                                           const int* bucket_pos, int n_buckets, int C) {
    const int packs_per_row = C / x128::size;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
         i < (size_t)n_buckets * packs_per_row; i += (size_t)gridDim.x * blockDim.x) {
        int j = (int)(i / packs_per_row), c = (int)(i % packs_per_row) * x128::size;
        float acc[x128::size] = {};
        for (int p = bucket_start[j]; p < bucket_start[j + 1]; p++) {
            x128 d = load128(dout + (size_t)bucket_pos[p] * C + c);
            for (int k = 0; k < x128::size; k++) acc[k] += (float)d[k];
        }
        floatX* row = dwte + (size_t)bucket_token[j] * C + c;
        x128 g = load128(row);
        for (int k = 0; k < x128::size; k++) g[k] = (floatX)((float)g[k] + acc[k]);
        store128(row, g);
    }
}

// Positions of a micro-batch grouped by token id, built on the host (where the tokens are).
struct TokenBuckets {
    int count;   // distinct tokens in the micro-batch
    int* token;  // (N) device: the token of each bucket
    int* start;  // (N+1) device: bucket j covers pos[start[j] .. start[j+1])
    int* pos;    // (N) device: row indices b*T+t, grouped by token, ascending in a group
    int* host;   // (3N+1) host staging: token, start, pos
};

// Only the tokens of this rank's wte rows [v0, v0 + Vl) (all of them without tensor
// parallelism) get buckets, each with its token as a row of this rank's wte.
inline void token_buckets_build(TokenBuckets* tb, const int* tokens, int N, int v0, int Vl,
                                cudaStream_t stream) {
    int* h_token = tb->host;
    int* h_start = tb->host + N;
    int* h_pos = tb->host + 2 * N + 1;
    int n = 0;
    for (int i = 0; i < N; i++)
        if (tokens[i] >= v0 && tokens[i] < v0 + Vl) h_pos[n++] = i;
    std::stable_sort(h_pos, h_pos + n, [tokens](int a, int b) { return tokens[a] < tokens[b]; });
    int count = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 || tokens[h_pos[i]] != tokens[h_pos[i - 1]]) {
            h_token[count] = tokens[h_pos[i]] - v0;
            h_start[count] = i;
            count++;
        }
    }
    h_start[count] = n;
    tb->count = count;
    CUDA_CHECK(
        cudaMemcpyAsync(tb->token, h_token, count * sizeof(int), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(tb->start, h_start, (count + 1) * sizeof(int),
                               cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(tb->pos, h_pos, n * sizeof(int), cudaMemcpyHostToDevice, stream));
    // the staging buffer is reused by the next micro-batch: finish the copies first
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const TokenBuckets* tb,
                             int B, int T, int C, cudaStream_t stream,
                             const int* positions = nullptr) {
    const int block = 256;
    if (dwpe) {  // (Llama has no wpe)
        wpe_backward_kernel<<<grid_for((size_t)T * C / x128::size, block), block, 0, stream>>>(
            dwpe, dout, positions, B, T, C);
        CUDA_CHECK_LAUNCH();
    }
    if (tb->count == 0) return;  // tensor parallelism: none of this rank's tokens occurs
    wte_backward_kernel<<<grid_for((size_t)tb->count * C / x128::size, block), block, 0, stream>>>(
        dwte, dout, tb->token, tb->start, tb->pos, tb->count, C);
    CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// LayerNorm (eps 1e-5), optionally fused with the residual add before it:
//   x = a + b (stored to residual_out, rounded to floatX first, so the backward pass sees the
//   very x that was normalized) or x = a when b is nullptr;  out = (x - mean) * rstd * w + bias.
// ROW_LANES threads per row (llmc/common.cuh: a warp on a GPU, one thread on the CPU runtime);
// lane i handles packs i, i + ROW_LANES, ... of the row. Three passes over the row
// (sum, sum of squared deviations, output) keep the variance accurate; the row stays in L1.
// saved_stats: the mean and rstd are read from mean_out/rstd_out instead (activation
// recompute: the output is then the forward pass's, bit for bit, by the same last loop).

constexpr float LN_EPS = 1e-5f;

// The output of one row, (x - mean) * rstd * w + bias, by its ROW_LANES lanes: the one place it is
// computed, so a recomputed output has the forward pass's bits.
__device__ inline void layernorm_store(floatX* out, const floatX* x, float mean, float rstd,
                                       const floatX* weight, const floatX* bias, int lane,
                                       int packs) {
    for (int p = lane; p < packs; p += ROW_LANES) {
        int c = p * x128::size;
        x128 v = load128(x + c), w = load128(weight + c), bb = load128(bias + c), o;
        for (int k = 0; k < x128::size; k++)
            o[k] = (floatX)(((float)v[k] - mean) * rstd * (float)w[k] + (float)bb[k]);
        store128(out + c, o);
    }
}

// The residual add fused before a norm (LayerNorm and RMSNorm): row `row` of a + b, rounded to
// floatX, stored to residual_out by the row's lanes; returns that row, the norm's input.
__device__ inline const floatX* residual_add_row(floatX* residual_out, const floatX* a,
                                                 const floatX* b, int row, int C, int lane,
                                                 int packs) {
    const floatX* x = a + (size_t)row * C;
    floatX* r = residual_out + (size_t)row * C;
    for (int p = lane; p < packs; p += ROW_LANES) {
        x128 va = load128(x + p * x128::size), vb = load128(b + (size_t)row * C + p * x128::size),
             s;
        for (int k = 0; k < x128::size; k++) s[k] = (floatX)((float)va[k] + (float)vb[k]);
        store128(r + p * x128::size, s);
    }
    return r;
}

static __global__ void layernorm_forward_kernel(floatX* residual_out, floatX* out, float* mean_out,
                                                float* rstd_out, const floatX* a, const floatX* b,
                                                const floatX* weight, const floatX* bias, int N,
                                                int C, bool saved_stats) {
    const int lane = threadIdx.x % ROW_LANES;
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / ROW_LANES;
    if (row >= N) return;  // whole warps leave together
    const int packs = C / x128::size;
    const floatX* x = a + (size_t)row * C;
    float mean, rstd;
    if (saved_stats) {
        mean = mean_out[row];
        rstd = rstd_out[row];
        layernorm_store(out + (size_t)row * C, x, mean, rstd, weight, bias, lane, packs);
        return;
    }
    if (b) x = residual_add_row(residual_out, a, b, row, C, lane, packs);
    float sum = 0.0f;
    for (int p = lane; p < packs; p += ROW_LANES) {
        x128 v = load128(x + p * x128::size);
        for (int k = 0; k < x128::size; k++) sum += (float)v[k];
    }
    mean = row_sum(sum) / C;
    float sq = 0.0f;
    for (int p = lane; p < packs; p += ROW_LANES) {
        x128 v = load128(x + p * x128::size);
        for (int k = 0; k < x128::size; k++) {
            float d = (float)v[k] - mean;
            sq += d * d;
        }
    }
    rstd = 1.0f / sqrtf(row_sum(sq) / C + LN_EPS);
    layernorm_store(out + (size_t)row * C, x, mean, rstd, weight, bias, lane, packs);
    if (lane == 0) {
        mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}

// residual_out = a + b alone, as the fused kernel above forms it: a block's last residual add
// when no LayerNorm follows it on this rank (the last block of a pipeline stage, llmc/pipeline.h).
static __global__ void residual_forward_kernel(floatX* residual_out, const floatX* a,
                                               const floatX* b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        residual_out[i] = (floatX)((float)a[i] + (float)b[i]);
}

inline void residual_forward(floatX* residual_out, const floatX* a, const floatX* b, size_t n,
                             cudaStream_t stream) {
    residual_forward_kernel<<<(int)std::min<size_t>(ceil_div(n, (size_t)256), 4096), 256, 0,
                              stream>>>(residual_out, a, b, n);
    CUDA_CHECK_LAUNCH();
}

inline void layernorm_forward(floatX* residual_out, floatX* out, float* mean, float* rstd,
                              const floatX* a, const floatX* b, const floatX* weight,
                              const floatX* bias, int N, int C, cudaStream_t stream) {
    layernorm_forward_kernel<<<(int)ceil_div(N, ROWS_PER_BLOCK), ROW_THREADS, 0, stream>>>(
        residual_out, out, mean, rstd, a, b, weight, bias, N, C, false);
    CUDA_CHECK_LAUNCH();
}

// The output of a layernorm_forward again, from its input x and its saved mean and rstd.
inline void layernorm_recompute(floatX* out, const float* mean, const float* rstd, const floatX* x,
                                const floatX* weight, const floatX* bias, int N, int C,
                                cudaStream_t stream) {
    layernorm_forward_kernel<<<(int)ceil_div(N, ROWS_PER_BLOCK), ROW_THREADS, 0, stream>>>(
        nullptr, out, (float*)mean, (float*)rstd, x, nullptr, weight, bias, N, C, true);
    CUDA_CHECK_LAUNCH();
}

// Backward, input gradient. With xhat = (x - mean) * rstd and g = dout * w:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), added to dinp (the residual stream's
//   gradient, which also flows around the layernorm) or written when accumulate is false.
// ROW_LANES threads per row, two passes.
static __global__ void layernorm_backward_kernel(floatX* dinp, const floatX* dout,
                                                 const floatX* inp, const float* mean,
                                                 const float* rstd, const floatX* weight, int N,
                                                 int C, bool accumulate) {
    const int lane = threadIdx.x % ROW_LANES;
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / ROW_LANES;
    if (row >= N) return;
    const int packs = C / x128::size;
    const floatX* x = inp + (size_t)row * C;
    const floatX* dy = dout + (size_t)row * C;
    const float m = mean[row], r = rstd[row];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int p = lane; p < packs; p += ROW_LANES) {
        int c = p * x128::size;
        x128 v = load128(x + c), d = load128(dy + c), w = load128(weight + c);
        for (int k = 0; k < x128::size; k++) {
            float g = (float)d[k] * (float)w[k];
            sum_g += g;
            sum_gx += g * ((float)v[k] - m) * r;
        }
    }
    row_sum2(sum_g, sum_gx);
    const float mean_g = sum_g / C, mean_gx = sum_gx / C;
    floatX* dx = dinp + (size_t)row * C;
    for (int p = lane; p < packs; p += ROW_LANES) {
        int c = p * x128::size;
        x128 v = load128(x + c), d = load128(dy + c), w = load128(weight + c);
        x128 old = accumulate ? load128(dx + c) : x128{};
        x128 o;
        for (int k = 0; k < x128::size; k++) {
            float g = (float)d[k] * (float)w[k];
            float xhat = ((float)v[k] - m) * r;
            float val = r * (g - mean_g - xhat * mean_gx);
            o[k] = (floatX)(accumulate ? (float)old[k] + val : val);
        }
        store128(dx + c, o);
    }
}

// Column sums over the N rows, for bias and layernorm parameter gradients, without atomics:
// a thread owns one column c and one chunk of COLUMN_CHUNK rows and writes
//   partials[(chunk*2 + 0)*C + c] = sum dout * xhat   (only when inp != nullptr)
//   partials[(chunk*2 + 1)*C + c] = sum dout
// with xhat = (inp - mean) * rstd (RMSNorm: mean nullptr, xhat = inp * rstd). Threads of a warp
// read consecutive columns (coalesced).
// The grid is (chunks, column blocks): gridDim.x has room for any N.
static __global__ void column_partials_kernel(float* partials, const floatX* dout,
                                              const floatX* inp, const float* mean,
                                              const float* rstd, int N, int C) {
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    const int chunk = blockIdx.x;
    if (c >= C) return;
    const int row_end = min(N, (chunk + 1) * COLUMN_CHUNK);
    float sum_dx = 0.0f, sum_d = 0.0f;
    for (int row = chunk * COLUMN_CHUNK; row < row_end; row++) {
        float d = (float)dout[(size_t)row * C + c];
        sum_d += d;
        if (inp)
            sum_dx += d * ((float)inp[(size_t)row * C + c] - (mean ? mean[row] : 0.0f)) * rstd[row];
    }
    if (inp) partials[((size_t)chunk * 2 + 0) * C + c] = sum_dx;
    partials[((size_t)chunk * 2 + 1) * C + c] = sum_d;
}

// Adds up the chunks' partial sums: dweight[c] += slot 0 (if dweight is given), dbias[c] +=
// slot 1. A block owns 32 columns (lane = column, so a warp reads 32 consecutive floats) and
// COLUMN_FINISH_WARPS warps: warp w sums chunks w, w + COLUMN_FINISH_WARPS, ... in order, then
// warp 0 adds the warps' sums in warp order. The order depends only on N.
constexpr int COLUMN_FINISH_WARPS = 8;

static __global__ void column_finish_kernel(floatX* dweight, floatX* dbias, const float* partials,
                                            int n_chunks, int C) {
    __shared__ float warp_sums[2][COLUMN_FINISH_WARPS][32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int c = blockIdx.x * 32 + lane;
    float sum_dx = 0.0f, sum_d = 0.0f;
    for (int chunk = warp; c < C && chunk < n_chunks; chunk += COLUMN_FINISH_WARPS) {
        if (dweight) sum_dx += partials[((size_t)chunk * 2 + 0) * C + c];
        sum_d += partials[((size_t)chunk * 2 + 1) * C + c];
    }
    warp_sums[0][warp][lane] = sum_dx;
    warp_sums[1][warp][lane] = sum_d;
    __syncthreads();  // every warp's sums are in shared memory
    if (warp != 0 || c >= C) return;
    for (int w = 1; w < COLUMN_FINISH_WARPS; w++) {
        sum_dx += warp_sums[0][w][lane];
        sum_d += warp_sums[1][w][lane];
    }
    if (dweight) dweight[c] = (floatX)((float)dweight[c] + sum_dx);
    if (dbias) dbias[c] = (floatX)((float)dbias[c] + sum_d);
}

// dweight/dbias += the column sums above; dweight nullptr: a plain bias gradient (inp unused);
// dbias nullptr: a norm without bias (RMSNorm).
inline void column_sums(floatX* dweight, floatX* dbias, float* partials, const floatX* dout,
                        const floatX* inp, const float* mean, const float* rstd, int N, int C,
                        cudaStream_t stream) {
    const int block = 128;
    const int n_chunks = (int)ceil_div(N, COLUMN_CHUNK);
    column_partials_kernel<<<dim3(n_chunks, (unsigned)ceil_div(C, block)), block, 0, stream>>>(
        partials, dout, dweight ? inp : nullptr, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH();
    column_finish_kernel<<<(int)ceil_div(C, 32), 32 * COLUMN_FINISH_WARPS, 0, stream>>>(
        dweight, dbias, partials, n_chunks, C);
    CUDA_CHECK_LAUNCH();
}

// Full layernorm backward: dinp (+)= dx; dweight += sum dout*xhat; dbias += sum dout.
inline void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* partials,
                               const floatX* dout, const floatX* inp, const float* mean,
                               const float* rstd, const floatX* weight, int N, int C,
                               bool accumulate, cudaStream_t stream) {
    layernorm_backward_kernel<<<(int)ceil_div(N, ROWS_PER_BLOCK), ROW_THREADS, 0, stream>>>(
        dinp, dout, inp, mean, rstd, weight, N, C, accumulate);
    CUDA_CHECK_LAUNCH();
    column_sums(dweight, dbias, partials, dout, inp, mean, rstd, N, C, stream);
}

// ---------------------------------------------------------------------------------------------
// RMSNorm (Llama's norm, eps --norm-eps), fused with the residual add before it as LayerNorm is:
//   x = a + b (stored to residual_out, rounded to floatX first) or x = a when b is nullptr;
//   out = x * rstd * w,  rstd = 1 / sqrt(mean(x^2) + eps).
// ROW_LANES threads per row, one pass for the sum of squares; saved_stats: rstd is read from
// rstd_out (activation recompute), giving the forward pass's output bit for bit.

static __global__ void rmsnorm_forward_kernel(floatX* residual_out, floatX* out, float* rstd_out,
                                              const floatX* a, const floatX* b,
                                              const floatX* weight, int N, int C, float eps,
                                              bool saved_stats) {
    const int lane = threadIdx.x % ROW_LANES;
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / ROW_LANES;
    if (row >= N) return;  // whole warps leave together
    const int packs = C / x128::size;
    const floatX* x = a + (size_t)row * C;
    float rstd;
    if (saved_stats) {
        rstd = rstd_out[row];
    } else {
        if (b) x = residual_add_row(residual_out, a, b, row, C, lane, packs);
        float sq = 0.0f;
        for (int p = lane; p < packs; p += ROW_LANES) {
            x128 v = load128(x + p * x128::size);
            for (int k = 0; k < x128::size; k++) sq += (float)v[k] * (float)v[k];
        }
        rstd = 1.0f / sqrtf(row_sum(sq) / C + eps);
        if (lane == 0) rstd_out[row] = rstd;
    }
    for (int p = lane; p < packs; p += ROW_LANES) {
        const int c = p * x128::size;
        x128 v = load128(x + c), w = load128(weight + c), o;
        for (int k = 0; k < x128::size; k++) o[k] = (floatX)((float)v[k] * rstd * (float)w[k]);
        store128(out + (size_t)row * C + c, o);
    }
}

inline void rmsnorm_forward(floatX* residual_out, floatX* out, float* rstd, const floatX* a,
                            const floatX* b, const floatX* weight, int N, int C, float eps,
                            cudaStream_t stream) {
    rmsnorm_forward_kernel<<<(int)ceil_div(N, ROWS_PER_BLOCK), ROW_THREADS, 0, stream>>>(
        residual_out, out, rstd, a, b, weight, N, C, eps, false);
    CUDA_CHECK_LAUNCH();
}

// The output of an rmsnorm_forward again, from its input x and its saved rstd.
inline void rmsnorm_recompute(floatX* out, const float* rstd, const floatX* x, const floatX* weight,
                              int N, int C, cudaStream_t stream) {
    rmsnorm_forward_kernel<<<(int)ceil_div(N, ROWS_PER_BLOCK), ROW_THREADS, 0, stream>>>(
        nullptr, out, (float*)rstd, x, nullptr, weight, N, C, 0.0f, true);
    CUDA_CHECK_LAUNCH();
}

// Backward, input gradient. With xhat = x * rstd and g = dout * w:
//   dx = rstd * (g - xhat * mean(g * xhat)), added to dinp (the residual stream's gradient)
// or written when accumulate is false. ROW_LANES threads per row, two passes.
static __global__ void rmsnorm_backward_kernel(floatX* dinp, const floatX* dout, const floatX* inp,
                                               const float* rstd, const floatX* weight, int N,
                                               int C, bool accumulate) {
    const int lane = threadIdx.x % ROW_LANES;
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / ROW_LANES;
    if (row >= N) return;
    const int packs = C / x128::size;
    const floatX* x = inp + (size_t)row * C;
    const floatX* dy = dout + (size_t)row * C;
    const float r = rstd[row];
    float sum_gx = 0.0f;
    for (int p = lane; p < packs; p += ROW_LANES) {
        const int c = p * x128::size;
        x128 v = load128(x + c), d = load128(dy + c), w = load128(weight + c);
        for (int k = 0; k < x128::size; k++) sum_gx += (float)d[k] * (float)w[k] * (float)v[k] * r;
    }
    const float mean_gx = row_sum(sum_gx) / C;
    floatX* dx = dinp + (size_t)row * C;
    for (int p = lane; p < packs; p += ROW_LANES) {
        const int c = p * x128::size;
        x128 v = load128(x + c), d = load128(dy + c), w = load128(weight + c);
        x128 old = accumulate ? load128(dx + c) : x128{}, o;
        for (int k = 0; k < x128::size; k++) {
            const float g = (float)d[k] * (float)w[k], xhat = (float)v[k] * r;
            o[k] = (floatX)((float)old[k] + r * (g - xhat * mean_gx));
        }
        store128(dx + c, o);
    }
}

// Full RMSNorm backward: dinp (+)= dx; dweight += sum dout * xhat (column_sums without a bias).
inline void rmsnorm_backward(floatX* dinp, floatX* dweight, float* partials, const floatX* dout,
                             const floatX* inp, const float* rstd, const floatX* weight, int N,
                             int C, bool accumulate, cudaStream_t stream) {
    rmsnorm_backward_kernel<<<(int)ceil_div(N, ROWS_PER_BLOCK), ROW_THREADS, 0, stream>>>(
        dinp, dout, inp, rstd, weight, N, C, accumulate);
    CUDA_CHECK_LAUNCH();
    column_sums(dweight, nullptr, partials, dout, inp, nullptr, rstd, N, C, stream);
}

// ---------------------------------------------------------------------------------------------
// Causal self-attention, flash style: no (T,T) matrix ever reaches global memory.
// Here (as in QK-norm below) NH is the heads the caller passes and att_width = NH * HS their width:
// under tensor parallelism this rank's heads, ModelShapes' heads and att, whose qkv rows are
// [q | k | v] of those heads only (not the model's width C). Grouped-query attention (Llama's
// --kv-heads): KVH key/value heads, each serving the G = NH/KVH query heads h with h / G = kh
// (GPT-2: KVH = NH). qkv is (B,T,qkv_width), qkv_width = (NH + 2 KVH) HS, with q of head h at
// columns h*HS, k and v of kv head kh at att_width + kh*HS and att_width + KVH*HS + kh*HS; the
// output is (B,T,att_width) with head h at columns h*HS. The dK/dV pass runs one block per kv
// head, which sums the G query heads' contributions in head order (no atomics). A block of
// ATT_THREADS threads (fewer when one block holds every row: att_threads) owns consecutive rows
// (queries in the forward and dQ passes, keys in the dK/dV pass) of one (batch, head). A row
// belongs to a group of G = HS / ATT_LANE_DIMS adjacent lanes of a warp: lane g of the group owns
// the 16-byte packs g, g + G, ... of the row (ATT_LANE_DIMS of the HS dimensions) and keeps its
// part of the row and of the row's accumulators in registers, so a group reads and writes a row
// with contiguous 128-bit accesses. A dot product of two rows is the sum of the G lanes' partial
// sums, added by an xor butterfly inside the group, which leaves the same bits in every lane of the
// group. The other side (keys and values, or queries and output gradients) streams through shared
// memory in tiles of ATT_TILE rows, kept as floatX (half the space of floats) and copied in 16-byte
// packs by the whole block between two barriers; the lanes of a group read consecutive packs of a
// tile row and every group of a warp reads the same tile row (a broadcast), so the reads have no
// bank conflicts.

constexpr int ATT_THREADS = 256;  // threads per block

// The part of the attention one launch computes. One process runs one block, the whole causal
// sequence (att_whole); context parallelism (llmc/context_parallel.cuh) runs a sequence as blocks
// of queries against blocks of keys it passes around a ring. Every buffer holds T rows per
// sequence; the block's queries are rows q0 .. q0+n-1 of qkv (their q), out, lse, dout and
// delta, its keys rows k0 .. k0+n-1 of kv: a key row holds kv head kh's key at kh*HS and its
// value at KVH*HS + kh*HS, rows kv_stride elements apart (dkv, their gradients, the same layout).
// causal: the block lies on the diagonal, query q0+i sees keys k0 .. k0+i; else it sees all n.
// merge: out and lse (dq, dkv) hold the result over other keys already; the block's is merged
// into them (out and lse by their log-sum-exp, gradients added) instead of overwriting them.
struct AttBlock {
    int T, n, q0, k0;
    size_t kv_stride;
    bool causal, merge;
};

// The whole causal sequence of T rows, keys and values in qkv (B,T,qkv_width).
inline AttBlock att_whole(int T, int qkv_width) {
    return AttBlock{T, T, 0, 0, (size_t)qkv_width, true, false};
}

// The largest attention logit (q.k/sqrt(HS) over the unmasked positions), a monitor of the
// training step (gpt_monitors): the forward kernels keep the running max of each query row for
// the online softmax anyway; each warp takes the max of its rows' and raises the layer's slot
// with atomicMax on an order-preserving key of the float (max is order-independent: the same
// bits whatever order the warps come in). monitor_key(a) < monitor_key(b) exactly when a < b,
// and key 0 (a NaN's bits) is below every float, so a slot of zeros holds "none yet".
__host__ __device__ inline unsigned monitor_key(float x) {
    unsigned u;
    memcpy(&u, &x, sizeof(u));
    return u ^ ((u >> 31) ? 0xffffffffu : 0x80000000u);
}
__host__ __device__ inline float monitor_value(unsigned key) {
    const unsigned u = key ^ ((key >> 31) ? 0x80000000u : 0xffffffffu);
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

// Raises *slot to the max of v over the warp (the whole warp calls it).
__device__ inline void warp_max_into(unsigned* slot, float v) {
    for (int offset = 16; offset > 0; offset /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    if (threadIdx.x % 32 == 0) atomicMax(slot, monitor_key(v));
}
constexpr int ATT_TILE = 32;      // rows of a shared-memory tile

// ATT_LANE_DIMS: dimensions of a row owned by one lane. On a GPU 16 keeps every attention kernel
// under 128 registers with no spills (several blocks per SM). Under the CPU runtime each shuffle
// of the butterfly is a switch between fibers, so there rows are split half as finely (32),
// which makes attention about 2.5x faster there; the dev/cuda attention harnesses build with
// -DATT_LANE_DIMS=16 so the GPU's choice is checked on the CPU too.
#ifndef ATT_LANE_DIMS
#ifdef __CUCC__
#define ATT_LANE_DIMS 32
#else
#define ATT_LANE_DIMS 16
#endif
#endif

// How the threads of a block map onto rows for head size HS.
template <int HS>
struct AttRows {
    static constexpr int lanes = HS / ATT_LANE_DIMS;          // G: lanes per row (1 to 8)
    static constexpr int per_warp = 32 / lanes;               // rows per warp
    static constexpr int per_block = ATT_THREADS / lanes;     // rows per block
    static constexpr int packs = ATT_LANE_DIMS / x128::size;  // packs of a row per lane
};

// The sum of v over the `lanes` lanes of each aligned group (the whole warp calls it).
template <int lanes>
__device__ inline float group_sum(float v) {
    for (int offset = lanes / 2; offset > 0; offset /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// Lane g's part of a row of HS elements (global or shared memory) as floats, times scale.
template <int HS>
__device__ inline void row_part_load(float* dst, const floatX* row, int g, float scale) {
    for (int i = 0; i < AttRows<HS>::packs; i++) {
        x128 v = load128(row + (g + i * AttRows<HS>::lanes) * x128::size);
        for (int k = 0; k < x128::size; k++) dst[i * x128::size + k] = (float)v[k] * scale;
    }
}

// Stores lane g's part of a row, times scale.
template <int HS>
__device__ inline void row_part_store(floatX* row, const float* src, int g, float scale) {
    for (int i = 0; i < AttRows<HS>::packs; i++) {
        x128 v;
        for (int k = 0; k < x128::size; k++) v[k] = (floatX)(src[i * x128::size + k] * scale);
        store128(row + (g + i * AttRows<HS>::lanes) * x128::size, v);
    }
}

// dst += lane g's part of a row, times scale (a merged block adds the gradients stored before).
template <int HS>
__device__ inline void row_part_add(float* dst, const floatX* row, int g, float scale) {
    float before[ATT_LANE_DIMS];
    row_part_load<HS>(before, row, g, scale);
    for (int d = 0; d < ATT_LANE_DIMS; d++) dst[d] += before[d];
}

// Lane g's partial dot product of its part x with a row.
template <int HS>
__device__ inline float row_part_dot(const float* x, const floatX* row, int g) {
    float s = 0.0f;
    for (int i = 0; i < AttRows<HS>::packs; i++) {
        x128 v = load128(row + (g + i * AttRows<HS>::lanes) * x128::size);
        for (int k = 0; k < x128::size; k++) s += x[i * x128::size + k] * (float)v[k];
    }
    return s;
}

// ATT_STEP: tile rows a lane takes at once in the kernels' inner loops, ATT_DOT_PARTS: partial
// sums of each of their dot products, a pack's element k going to partial k % ATT_DOT_PARTS.
// The ATT_STEP x ATT_DOT_PARTS independent chains of adds, instead of one chain of
// ATT_LANE_DIMS adds per row, are what a core that waits on each add's latency (a GPU SM with few
// warps, a CPU) needs; on a CPU a row's partials are also one SIMD vector (fp32: a pack's four
// floats, added to the partials lane by lane).
constexpr int ATT_STEP = 4;
constexpr int ATT_DOT_PARTS = 4;

// s[r] = the group's dot product of its row part x with tile row j + r, r < ATT_STEP (a row past
// `last` reads row `last` instead: the current tile's rows only; its sum goes unused). Each lane
// adds its partials pairwise, (0 + 1) + (2 + 3), then the group its lanes' sums (group_sum).
template <int HS>
__device__ inline void tile_dots(float (&s)[ATT_STEP], const float* x, const floatX (*tile)[HS],
                                 int j, int last, int g) {
    typedef AttRows<HS> R;
    static_assert(ATT_DOT_PARTS == 4 && x128::size % ATT_DOT_PARTS == 0, "pairwise sum of 4");
    float part[ATT_STEP][ATT_DOT_PARTS];
#pragma unroll
    for (int r = 0; r < ATT_STEP; r++)
#pragma unroll
        for (int p = 0; p < ATT_DOT_PARTS; p++) part[r][p] = 0.0f;
#pragma unroll
    for (int i = 0; i < R::packs; i++) {
        x128 v[ATT_STEP];
#pragma unroll
        for (int r = 0; r < ATT_STEP; r++)
            v[r] = load128(tile[min(j + r, last)] + (g + i * R::lanes) * x128::size);
#pragma unroll
        for (int r = 0; r < ATT_STEP; r++)
            for (int k = 0; k < x128::size; k++)  // g++ makes this loop one SIMD multiply-add
                part[r][k % ATT_DOT_PARTS] += x[i * x128::size + k] * (float)v[r][k];
    }
#pragma unroll
    for (int r = 0; r < ATT_STEP; r++)
        s[r] = group_sum<R::lanes>((part[r][0] + part[r][1]) + (part[r][2] + part[r][3]));
}

// acc += a * (lane g's part of a row).
template <int HS>
__device__ inline void row_part_axpy(float* acc, float a, const floatX* row, int g) {
    for (int i = 0; i < AttRows<HS>::packs; i++) {
        x128 v = load128(row + (g + i * AttRows<HS>::lanes) * x128::size);
        for (int k = 0; k < x128::size; k++) acc[i * x128::size + k] += a * (float)v[k];
    }
}

// The whole block copies rows first .. first+count-1 of two (T, HS) matrices, whose rows are
// stride_a and stride_b elements apart, into the shared tiles tile_a and tile_b.
template <int HS>
__device__ inline void att_load_tiles(floatX (*tile_a)[HS], floatX (*tile_b)[HS], const floatX* a,
                                      size_t stride_a, const floatX* b, size_t stride_b, int first,
                                      int count) {
    constexpr int packs_per_row = HS / x128::size;
    for (int i = threadIdx.x; i < count * packs_per_row; i += blockDim.x) {
        const int j = i / packs_per_row, c = (i % packs_per_row) * x128::size;
        store128(&tile_a[j][c], load128(a + (size_t)(first + j) * stride_a + c));
        store128(&tile_b[j][c], load128(b + (size_t)(first + j) * stride_b + c));
    }
}

// Forward: online softmax per query row t (the running max m and sum l are updated key by
// key; o is rescaled when the max grows). Writes out and lse = log(sum_s exp(score_s)) (scores
// include the 1/sqrt(HS) scale), which the backward pass uses to recompute probabilities, and,
// when logit_max is not null, raises it to the largest score (monitor_key).
template <int HS>
static __global__ void __launch_bounds__(ATT_THREADS)
    attention_forward_kernel(floatX* out, float* lse, unsigned* logit_max, const floatX* qkv,
                             const floatX* kv, AttBlock blk, int NH, int KVH) {
    typedef AttRows<HS> R;
    alignas(16) __shared__ floatX k_tile[ATT_TILE][HS];
    alignas(16) __shared__ floatX v_tile[ATT_TILE][HS];
    const int att_width = NH * HS, b = blockIdx.z, h = blockIdx.y, g = threadIdx.x % R::lanes;
    const int T = blk.n;  // the block's rows: t, keys and the bounds below count in the block
    const int qkv_width = (NH + 2 * KVH) * HS, kv_width = KVH * HS, kh = h / (NH / KVH);
    const int q_first = blockIdx.x * R::per_block, t = q_first + threadIdx.x / R::lanes;
    const int block_last =
        blk.causal ? min(q_first + R::per_block, T) - 1 : T - 1;  // sees keys 0..block_last
    const int warp_first = q_first + (int)(threadIdx.x / 32) * R::per_warp;
    const int warp_keys = warp_first < T ? (blk.causal ? min(warp_first + R::per_warp, T) : T)
                                         : 0;  // keys some row of the warp sees
    const floatX* base = qkv + ((size_t)b * blk.T + blk.q0) * qkv_width;
    const floatX* keys = kv + ((size_t)b * blk.T + blk.k0) * blk.kv_stride + kh * HS;
    const size_t row = (size_t)b * blk.T + blk.q0 + t,
                 lse_at = ((size_t)b * NH + h) * blk.T + blk.q0 + t;
    float q[ATT_LANE_DIMS] = {}, o[ATT_LANE_DIMS] = {};
    if (t < T)
        row_part_load<HS>(q, base + (size_t)t * qkv_width + h * HS, g, 1.0f / sqrtf((float)HS));
    // merge: the earlier blocks' lse, read before the loop's barriers (lane 0 of the group
    // overwrites it at the end)
    const float lse_before = blk.merge && t < T ? lse[lse_at] : 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int k_first = 0; k_first <= block_last; k_first += ATT_TILE) {
        __syncthreads();  // every thread is done with the previous tile
        att_load_tiles<HS>(k_tile, v_tile, keys, blk.kv_stride, keys + kv_width, blk.kv_stride,
                           k_first, min(ATT_TILE, block_last + 1 - k_first));
        __syncthreads();  // the tile is loaded
        // every lane of the warp runs the same keys (the shuffles need them all); a row skips
        // the keys after it; rows past T in a warp with valid rows compute values never stored
        const int n_keys = min(ATT_TILE, warp_keys - k_first);
        for (int j0 = 0; j0 < n_keys; j0 += ATT_STEP) {
            float scores[ATT_STEP];
            tile_dots<HS>(scores, q, k_tile, j0, n_keys - 1, g);
#pragma unroll
            for (int r = 0; r < ATT_STEP; r++) {  // the keys in order
                const int j = j0 + r;
                const float s = scores[r];
                if (j >= n_keys || (blk.causal && k_first + j > t)) continue;
                if (s > m) {  // a new max: rescale what was summed so far (to 0 at the first key)
                    const float correction = expf(m - s);
                    l *= correction;
                    for (int d = 0; d < ATT_LANE_DIMS; d++) o[d] *= correction;
                    m = s;
                }
                const float p = expf(s - m);
                l += p;
                row_part_axpy<HS>(o, p, v_tile[j], g);
            }
        }
    }
    if (logit_max) warp_max_into(logit_max, t < T ? m : -INFINITY);  // m: the row's largest score
    if (t >= T) return;
    floatX* out_row = out + row * att_width + h * HS;
    float row_lse = m + logf(l), scale = 1.0f / l;
    if (blk.merge) {  // out = (e^lse_before out_before + e^row_lse o / l) / e^lse_after
        const float top = fmaxf(lse_before, row_lse), before = expf(lse_before - top),
                    mine = expf(row_lse - top), sum = before + mine;
        float o_before[ATT_LANE_DIMS];
        row_part_load<HS>(o_before, out_row, g, before / sum);
        for (int d = 0; d < ATT_LANE_DIMS; d++) o[d] = o[d] * (mine / sum / l) + o_before[d];
        row_lse = top + logf(sum);
        scale = 1.0f;
    }
    row_part_store<HS>(out_row, o, g, scale);
    if (g == 0) lse[lse_at] = row_lse;
}

// Backward, pass 1 (dQ): a lane group owns query row t. With P = exp(score - lse),
// dP = dO . v, D = dO . O and dS = P * (dP - D): dq = scale * sum_s dS_s k_s. It also stores D
// for pass 2. Keys stream through shared memory.
template <int HS>
static __global__ void __launch_bounds__(ATT_THREADS)
    attention_backward_dq_kernel(floatX* dqkv, float* delta, const floatX* dout, const floatX* out,
                                 const floatX* qkv, const floatX* kv, const float* lse,
                                 AttBlock blk, int NH, int KVH) {
    typedef AttRows<HS> R;
    alignas(16) __shared__ floatX k_tile[ATT_TILE][HS];
    alignas(16) __shared__ floatX v_tile[ATT_TILE][HS];
    const int att_width = NH * HS, b = blockIdx.z, h = blockIdx.y, g = threadIdx.x % R::lanes;
    const int T = blk.n;  // as in the forward pass
    const int qkv_width = (NH + 2 * KVH) * HS, kv_width = KVH * HS, kh = h / (NH / KVH);
    const int q_first = blockIdx.x * R::per_block, t = q_first + threadIdx.x / R::lanes;
    const int block_last = blk.causal ? min(q_first + R::per_block, T) - 1 : T - 1;
    const int warp_first = q_first + (int)(threadIdx.x / 32) * R::per_warp;
    const int warp_keys = warp_first < T ? (blk.causal ? min(warp_first + R::per_warp, T) : T)
                                         : 0;  // keys some row of the warp sees
    const floatX* base = qkv + ((size_t)b * blk.T + blk.q0) * qkv_width;
    const floatX* keys = kv + ((size_t)b * blk.T + blk.k0) * blk.kv_stride + kh * HS;
    const size_t row = (size_t)b * blk.T + blk.q0 + t,
                 lse_at = ((size_t)b * NH + h) * blk.T + blk.q0 + t;
    const float scale = 1.0f / sqrtf((float)HS);
    float q[ATT_LANE_DIMS] = {}, dO[ATT_LANE_DIMS] = {}, dq[ATT_LANE_DIMS] = {};
    float row_lse = 0.0f;
    if (t < T) {
        row_part_load<HS>(q, base + (size_t)t * qkv_width + h * HS, g, scale);
        row_part_load<HS>(dO, dout + row * att_width + h * HS, g, 1.0f);
        row_lse = lse[lse_at];
    }
    const float D =
        group_sum<R::lanes>(t < T ? row_part_dot<HS>(dO, out + row * att_width + h * HS, g) : 0.0f);
    if (t < T && g == 0) delta[lse_at] = D;
    for (int k_first = 0; k_first <= block_last; k_first += ATT_TILE) {
        __syncthreads();  // every thread is done with the previous tile
        att_load_tiles<HS>(k_tile, v_tile, keys, blk.kv_stride, keys + kv_width, blk.kv_stride,
                           k_first, min(ATT_TILE, block_last + 1 - k_first));
        __syncthreads();                                        // the tile is loaded
        const int n_keys = min(ATT_TILE, warp_keys - k_first);  // as in the forward pass
        for (int j0 = 0; j0 < n_keys; j0 += ATT_STEP) {
            float scores[ATT_STEP], dps[ATT_STEP];
            tile_dots<HS>(scores, q, k_tile, j0, n_keys - 1, g);
            tile_dots<HS>(dps, dO, v_tile, j0, n_keys - 1, g);
#pragma unroll
            for (int r = 0; r < ATT_STEP; r++) {  // the keys in order
                const int j = j0 + r;
                if (j >= n_keys || (blk.causal && k_first + j > t)) continue;
                row_part_axpy<HS>(dq, expf(scores[r] - row_lse) * (dps[r] - D), k_tile[j], g);
            }
        }
    }
    if (t >= T) return;
    floatX* dq_row = dqkv + row * qkv_width + h * HS;
    if (blk.merge) row_part_add<HS>(dq, dq_row, g, 1.0f / scale);
    row_part_store<HS>(dq_row, dq, g, scale);
}

// Backward, pass 2 (dK, dV): a lane group owns key row s of kv head blockIdx.y; the queries
// t >= s of each of its query heads in turn stream through shared memory: dv = sum_t P_ts dO_t,
// dk = scale * sum_t dS_ts q_t.
template <int HS>
static __global__ void __launch_bounds__(ATT_THREADS)
    attention_backward_dkv_kernel(floatX* dkv, const float* delta, const floatX* dout,
                                  const floatX* qkv, const floatX* kv, const float* lse,
                                  AttBlock blk, int NH, int KVH) {
    typedef AttRows<HS> R;
    alignas(16) __shared__ floatX q_tile[ATT_TILE][HS];
    alignas(16) __shared__ floatX do_tile[ATT_TILE][HS];
    __shared__ float lse_tile[ATT_TILE];
    __shared__ float delta_tile[ATT_TILE];
    const int att_width = NH * HS, b = blockIdx.z, kh = blockIdx.y, g = threadIdx.x % R::lanes;
    const int qkv_width = (NH + 2 * KVH) * HS, kv_width = KVH * HS, group = NH / KVH;
    const int T = blk.n;  // the block's rows, as in the forward pass
    const int k_first = blockIdx.x * R::per_block, s = k_first + threadIdx.x / R::lanes;
    const int warp_first = k_first + (int)(threadIdx.x / 32) * R::per_warp;  // the warp's first key
    const floatX* base = qkv + ((size_t)b * blk.T + blk.q0) * qkv_width;
    const size_t key_row = ((size_t)b * blk.T + blk.k0 + s) * blk.kv_stride + kh * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    float k[ATT_LANE_DIMS] = {}, v[ATT_LANE_DIMS] = {}, dk[ATT_LANE_DIMS] = {},
          dv[ATT_LANE_DIMS] = {};
    if (s < T) {
        row_part_load<HS>(k, kv + key_row, g, scale);  // scores = q . (scale k)
        row_part_load<HS>(v, kv + key_row + kv_width, g, 1.0f);
    }
    for (int h = kh * group; h < (kh + 1) * group; h++) {  // the query heads of kv head kh
        const float* lse_bh = lse + ((size_t)b * NH + h) * blk.T + blk.q0;
        const float* delta_bh = delta + ((size_t)b * NH + h) * blk.T + blk.q0;
        // queries before k_first see no key here (a diagonal block; otherwise every query does)
        for (int q_first = blk.causal ? k_first : 0; q_first < T; q_first += ATT_TILE) {
            const int count = min(ATT_TILE, T - q_first);
            __syncthreads();  // every thread is done with the previous tile
            att_load_tiles<HS>(q_tile, do_tile, base + h * HS, qkv_width,
                               dout + ((size_t)b * blk.T + blk.q0) * att_width + h * HS, att_width,
                               q_first, count);
            if ((int)threadIdx.x < count) {
                lse_tile[threadIdx.x] = lse_bh[q_first + threadIdx.x];
                delta_tile[threadIdx.x] = delta_bh[q_first + threadIdx.x];
            }
            __syncthreads();  // the tile is loaded
            // every lane of the warp runs the same queries (the shuffles need them all), from
            // the first one that sees the warp's first key; a row skips the queries before it
            for (int j0 = blk.causal ? max(0, warp_first - q_first) : 0; j0 < count;
                 j0 += ATT_STEP) {
                float scores[ATT_STEP], dps[ATT_STEP];
                tile_dots<HS>(scores, k, q_tile, j0, count - 1, g);
                tile_dots<HS>(dps, v, do_tile, j0, count - 1, g);
#pragma unroll
                for (int r = 0; r < ATT_STEP; r++) {  // the queries in order
                    const int j = j0 + r;
                    if (j >= count || (blk.causal && q_first + j < s)) continue;
                    const float p = expf(scores[r] - lse_tile[j]);
                    row_part_axpy<HS>(dv, p, do_tile[j], g);
                    row_part_axpy<HS>(dk, p * (dps[r] - delta_tile[j]), q_tile[j], g);
                }
            }
        }
    }
    if (s >= T) return;
    if (blk.merge) {
        row_part_add<HS>(dk, dkv + key_row, g, 1.0f / scale);
        row_part_add<HS>(dv, dkv + key_row + kv_width, g, 1.0f);
    }
    row_part_store<HS>(dkv + key_row, dk, g, scale);
    row_part_store<HS>(dkv + key_row + kv_width, dv, g, 1.0f);
}

// Threads per block: ATT_THREADS, or as many whole warps as the rows need when one block holds
// them all (at T 64 with one lane per row, 64 of 256 threads would own a row; the others would
// only pass the barriers).
template <int HS>
inline int att_threads(int n) {
    return (int)std::min(round_up((size_t)n * AttRows<HS>::lanes, 32), (size_t)ATT_THREADS);
}

template <int HS>
void attention_forward_cuda_cores(floatX* out, float* lse, unsigned* logit_max, const floatX* qkv,
                                  const floatX* kv, AttBlock blk, int B, int NH, int KVH,
                                  cudaStream_t stream) {
    dim3 grid((unsigned)ceil_div(blk.n, AttRows<HS>::per_block), NH, B);
    attention_forward_kernel<HS>
        <<<grid, att_threads<HS>(blk.n), 0, stream>>>(out, lse, logit_max, qkv, kv, blk, NH, KVH);
    CUDA_CHECK_LAUNCH();
}

template <int HS>
void attention_backward_cuda_cores(floatX* dqkv, floatX* dkv, float* delta, const floatX* dout,
                                   const floatX* out, const floatX* qkv, const floatX* kv,
                                   const float* lse, AttBlock blk, int B, int NH, int KVH,
                                   cudaStream_t stream) {
    dim3 grid((unsigned)ceil_div(blk.n, AttRows<HS>::per_block), NH, B);
    attention_backward_dq_kernel<HS><<<grid, att_threads<HS>(blk.n), 0, stream>>>(
        dqkv, delta, dout, out, qkv, kv, lse, blk, NH, KVH);
    CUDA_CHECK_LAUNCH();
    grid.y = KVH;  // a block per kv head
    attention_backward_dkv_kernel<HS>
        <<<grid, att_threads<HS>(blk.n), 0, stream>>>(dkv, delta, dout, qkv, kv, lse, blk, NH, KVH);
    CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// The same attention on tensor cores (bf16 build), FlashAttention-2 style: mma.sync m16n8k16
// bf16 products with fp32 accumulators (llmc/mma.cuh has the instructions and their fragment
// layouts). Same layout and outputs as above: out and lse from the forward pass, D = rowsum(dO*O)
// stored by the dQ pass and read by the dK/dV pass (two passes, so no gradient is summed by
// atomics).
// A block of MMA_ATT_WARPS warps owns 64 consecutive rows of one (batch, head): queries in the
// forward and dQ passes, keys in the dK/dV pass; warp w owns rows 16w..16w+15, the M dimension
// of its products. The other side (keys and values, or queries and output gradients) streams
// through shared memory in tiles, double buffered: cp.async fetches tile j+1 while the warps
// multiply tile j. Every product is a sum of m16n8k16 steps whose A fragments come from
// registers or ldmatrix and whose B fragments come from ldmatrix of the streamed tile:
//   forward:  S = Q K^T (A: Q, kept in registers), online softmax on S's accumulator fragments
//             (each lane holds 2 of the 16 rows: g and g+8, g = lane/4), O += P V with P's
//             accumulators reused as the A fragments (their layouts coincide).
//   dQ:       S = Q K^T, dP = dO V^T, dS = P (dP - D), dQ += dS K.
//   dK, dV:   S^T = K Q^T, dP^T = V dO^T, dV += P^T dO, dK += dS^T Q.
// A row's values are spread over the 4 lanes of its quad (t = lane % 4), so a row max or sum is
// two xor shuffles. Tiles entirely above the diagonal are never loaded; a warp skips the 16-key
// (or 16-query) steps none of its rows sees, and only tiles that cross the diagonal or T are
// masked. Rows past T are zero-filled by cp.async and never stored.
// Shared tiles hold rows of HS bf16 as 16-byte chunks with chunk c of row r stored at c ^ f(r)
// (f(r) = r % 8, or (r / 2) % 4 for 4-chunk rows): the eight rows one ldmatrix reads then fall
// into eight different bank groups.
#if !defined(ENABLE_FP32)
constexpr int MMA_ATT_WARPS = 4;
constexpr int MMA_ATT_THREADS = 32 * MMA_ATT_WARPS;
constexpr int MMA_ATT_ROWS = 16 * MMA_ATT_WARPS;  // rows a block owns
constexpr float LOG2E = 1.4426950408889634f;

template <int HS>
struct MmaAtt {
    static constexpr int chunks = HS / 8;   // 16-byte chunks of a row
    static constexpr int ksteps = HS / 16;  // k steps of a product over HS
    static constexpr int fwd_tile = 64;     // keys per tile, forward
    // streamed rows per tile, backward: at HS 128 the dK and dV (or dQ) accumulators take 64 or
    // 128 registers per lane, so S and dP get 32 columns (16 registers each), not 64, and ptxas
    // fits every kernel without spills (dev/cuda/attention_ptxas.txt); the backward passes also
    // read their A fragments (Q, dO, K, V) from shared memory instead of keeping them in registers
    static constexpr int bwd_tile = HS == 128 ? 32 : 64;
    static constexpr int row_bytes = HS * 2;
};

// Byte offset of chunk c (elements 8c..8c+7) of row r of a shared tile.
template <int HS>
__device__ inline uint32_t att_tile_offset(int r, int c) {
    constexpr int nc = MmaAtt<HS>::chunks;
    const int f = nc >= 8 ? (r & 7) : ((r >> 1) & (nc - 1));
    return (uint32_t)(r * MmaAtt<HS>::row_bytes + (c ^ f) * 16);
}

// The block copies rows first..first+ROWS-1 of a (T, HS) matrix whose rows are `stride` elements
// apart into the tile at shared address `tile`; rows >= T become zeros.
template <int HS, int ROWS>
__device__ inline void att_tile_load(uint32_t tile, const floatX* m, size_t stride, int first,
                                     int T) {
    constexpr int nc = MmaAtt<HS>::chunks;
    for (int i = threadIdx.x; i < ROWS * nc; i += MMA_ATT_THREADS) {
        const int r = i / nc, c = i % nc;
        const bool valid = first + r < T;
        cp_async_16(tile + att_tile_offset<HS>(r, c), m + (valid ? first + r : 0) * stride + c * 8,
                    valid);
    }
}

// ROWS floats of a (T) vector from `first` into shared memory (zeros past T).
template <int ROWS>
__device__ inline void att_vector_load(uint32_t dst, const float* v, int first, int T) {
    for (int i = threadIdx.x; i < ROWS; i += MMA_ATT_THREADS) {
        const bool valid = first + i < T;
        cp_async_4(dst + 4 * i, v + (valid ? first + i : 0), valid);
    }
}

// The A fragment of the 16x16 block at (row r0, column k0) of a tile (row-major A).
template <int HS>
__device__ inline void att_load_a(uint32_t a[4], uint32_t tile, int r0, int k0) {
    const int lane = threadIdx.x % 32, m = lane / 8;
    ldmatrix_x4(a, tile + att_tile_offset<HS>(r0 + (m & 1) * 8 + lane % 8, k0 / 8 + (m >> 1)));
}

// B fragments of two n-tiles (b[0..1]: n0..n0+7, b[2..3]: n0+8..n0+15) at k0..k0+15 where the
// tile holds B transposed, rows n and columns k (keys as rows for S = Q K^T).
template <int HS>
__device__ inline void att_load_b_nk(uint32_t b[4], uint32_t tile, int n0, int k0) {
    const int lane = threadIdx.x % 32, m = lane / 8;
    ldmatrix_x4(b, tile + att_tile_offset<HS>(n0 + (m >> 1) * 8 + lane % 8, k0 / 8 + (m & 1)));
}

// The same where the tile holds B itself, rows k and columns n (values as rows for O += P V).
template <int HS>
__device__ inline void att_load_b_kn(uint32_t b[4], uint32_t tile, int k0, int n0) {
    const int lane = threadIdx.x % 32, m = lane / 8;
    ldmatrix_x4_trans(b,
                      tile + att_tile_offset<HS>(k0 + (m & 1) * 8 + lane % 8, n0 / 8 + (m >> 1)));
}

// acc[n] (16 x 8 each, NT of them) = A (16 x HS, 16 rows from row r0 of tile a) times the
// transpose of NT*8 rows of tile b, skipping the 16-column steps from `steps` on.
template <int HS, int NT>
__device__ inline void att_mma_abt(float (*acc)[4], uint32_t a, int r0, uint32_t b, int steps) {
    for (int n = 0; n < NT; n++)
        for (int e = 0; e < 4; e++) acc[n][e] = 0.0f;
    for (int ks = 0; ks < MmaAtt<HS>::ksteps; ks++) {
        uint32_t af[4];
        att_load_a<HS>(af, a, r0, 16 * ks);
        for (int n2 = 0; n2 < NT / 2; n2++) {
            if (n2 >= steps) break;
            uint32_t bf[4];
            att_load_b_nk<HS>(bf, b, 16 * n2, 16 * ks);
            mma_bf16_16816(acc[2 * n2], af, bf);
            mma_bf16_16816(acc[2 * n2 + 1], af, bf + 2);
        }
    }
}

// acc (16 x HS as HS/8 n-tiles) += P (16 x NT*8, as the bf16 pairs p[n][r] of the accumulator
// layout: row g + 8r, columns 2t, 2t+1 of n-tile n) times NT*8 rows of tile b, k steps from
// `steps` on skipped.
template <int HS, int NT>
__device__ inline void att_mma_pb(float (*acc)[4], const uint32_t (*p)[2], uint32_t b, int steps) {
    for (int kb = 0; kb < NT / 2; kb++) {
        if (kb >= steps) break;
        const uint32_t pa[4] = {p[2 * kb][0], p[2 * kb][1], p[2 * kb + 1][0], p[2 * kb + 1][1]};
        for (int d2 = 0; d2 < HS / 16; d2++) {
            uint32_t bf[4];
            att_load_b_kn<HS>(bf, b, 16 * kb, 16 * d2);
            mma_bf16_16816(acc[2 * d2], pa, bf);
            mma_bf16_16816(acc[2 * d2 + 1], pa, bf + 2);
        }
    }
}

// Max or sum over the 4 lanes of a quad (one row of an accumulator fragment).
__device__ inline float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ inline float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Stores row r (0: g, 1: g + 8) of a 16 x HS accumulator times scale to a row of HS bf16; with
// before != 0 (a merged block, AttBlock) plus `before` times what the row held.
template <int HS>
__device__ inline void att_store_row(floatX* row, const float (*acc)[4], int r, float scale,
                                     float before = 0.0f) {
    const int t = threadIdx.x % 4;
    for (int d = 0; d < HS / 8; d++) {
        __nv_bfloat162* at = reinterpret_cast<__nv_bfloat162*>(row + 8 * d + 2 * t);
        float x = acc[d][2 * r] * scale, y = acc[d][2 * r + 1] * scale;
        if (before != 0.0f) {
            const float2 held = __bfloat1622float2(*at);
            x += before * held.x;
            y += before * held.y;
        }
        *at = __floats2bfloat162_rn(x, y);
    }
}

// Forward: a block owns 64 queries (the last query tiles first: they have the most keys), keys
// and values stream in tiles of 64. Online softmax in base 2: m is the running max of the
// scores times log2(e), l the running sum of 2^(x - m) (per lane over its columns; the quad
// adds them at the end). logit_max as in the CUDA-core kernel (the largest score is m / log2(e)).
template <int HS>
static __global__ void __launch_bounds__(MMA_ATT_THREADS)
    attention_forward_mma_kernel(floatX* out, float* lse, unsigned* logit_max, const floatX* qkv,
                                 const floatX* kvx, AttBlock blk, int NH, int KVH) {
    typedef MmaAtt<HS> A;
    constexpr int BC = A::fwd_tile, NT = BC / 8, TILE = BC * A::row_bytes;
    extern __shared__ __align__(16) unsigned char att_smem[];  // Q, then 2 x (K, V)
    const uint32_t q_tile = smem_address(att_smem), kv = q_tile + MMA_ATT_ROWS * A::row_bytes;
    const int att_width = NH * HS, b = blockIdx.z, h = blockIdx.y;
    const int T = blk.n;  // the block's rows (AttBlock): rows, keys and bounds count in it
    const int q0 = (gridDim.x - 1 - blockIdx.x) * MMA_ATT_ROWS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wq0 = q0 + 16 * warp;
    const int wlast = blk.causal ? min(wq0 + 15, T - 1) : T - 1;  // the warp's rows' last key
    const bool warp_has_rows = wq0 < T;
    const size_t stride = (size_t)(NH + 2 * KVH) * HS, kv_width = (size_t)KVH * HS;
    const floatX* q = qkv + ((size_t)b * blk.T + blk.q0) * stride + h * HS;
    const floatX* key_base =
        kvx + ((size_t)b * blk.T + blk.k0) * blk.kv_stride + h / (NH / KVH) * HS;  // v: + kv_width
    const int tiles = ((blk.causal ? min(q0 + MMA_ATT_ROWS, T) : T) - 1) / BC + 1;
    const size_t lse_bh = ((size_t)b * NH + h) * blk.T + blk.q0;
    float lse_before[2] = {};  // merge: read before the loop's barriers (written at the end)
    for (int r = 0; r < 2; r++)
        if (blk.merge && wq0 + g + 8 * r < T) lse_before[r] = lse[lse_bh + wq0 + g + 8 * r];
    att_tile_load<HS, MMA_ATT_ROWS>(q_tile, q, stride, q0, T);
    att_tile_load<HS, BC>(kv, key_base, blk.kv_stride, 0, T);
    att_tile_load<HS, BC>(kv + TILE, key_base + kv_width, blk.kv_stride, 0, T);
    cp_async_commit();
    const float scale_log2 = LOG2E / sqrtf((float)HS);
    uint32_t qf[A::ksteps][4];
    float o[HS / 8][4] = {};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    for (int j = 0; j < tiles; j++) {
        cp_async_wait<0>();
        __syncthreads();  // tile j is in for every thread; every warp is done with tile j - 1
        if (j + 1 < tiles) {
            const uint32_t next = kv + ((j + 1) & 1) * 2 * TILE;
            att_tile_load<HS, BC>(next, key_base, blk.kv_stride, (j + 1) * BC, T);
            att_tile_load<HS, BC>(next + TILE, key_base + kv_width, blk.kv_stride, (j + 1) * BC, T);
        }
        cp_async_commit();
        if (j == 0 && warp_has_rows)
            for (int ks = 0; ks < A::ksteps; ks++)
                att_load_a<HS>(qf[ks], q_tile, 16 * warp, 16 * ks);
        const int k0 = j * BC;
        if (!warp_has_rows || k0 > wlast) continue;  // warp-uniform: no row of the warp sees them
        const int steps = (wlast - k0) / 16 + 1;     // 16-key steps with a key some row sees
        const uint32_t k_tile = kv + (j & 1) * 2 * TILE, v_tile = k_tile + TILE;
        float s[NT][4];
        for (int n = 0; n < NT; n++)
            for (int e = 0; e < 4; e++) s[n][e] = 0.0f;
        for (int ks = 0; ks < A::ksteps; ks++)
            for (int n2 = 0; n2 < NT / 2; n2++) {
                if (n2 >= steps) break;
                uint32_t bf[4];
                att_load_b_nk<HS>(bf, k_tile, 16 * n2, 16 * ks);
                mma_bf16_16816(s[2 * n2], qf[ks], bf);
                mma_bf16_16816(s[2 * n2 + 1], qf[ks], bf + 2);
            }
        // the tile crosses the diagonal or T
        const bool masked = (blk.causal && k0 + BC - 1 > wq0) || k0 + BC > T;
        float mx[2] = {m[0], m[1]};
        for (int n = 0; n < NT; n++)
            for (int e = 0; e < 4; e++) {
                const int key = k0 + 8 * n + 2 * t + (e & 1), row = wq0 + g + 8 * (e >> 1);
                const bool skip =
                    n / 2 >= steps || (masked && ((blk.causal && key > row) || key >= T));
                s[n][e] = skip ? -INFINITY : s[n][e] * scale_log2;
                mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
            }
        float base[2];
        for (int r = 0; r < 2; r++) {
            mx[r] = quad_max(mx[r]);
            base[r] = mx[r] == -INFINITY ? 0.0f : mx[r];  // a row with no key yet stays at zero
            const float correction = exp2f(m[r] - base[r]);
            m[r] = mx[r];
            l[r] *= correction;
            for (int d = 0; d < HS / 8; d++) {
                o[d][2 * r] *= correction;
                o[d][2 * r + 1] *= correction;
            }
        }
        uint32_t p[NT][2];
        for (int n = 0; n < NT; n++)
            for (int r = 0; r < 2; r++) {
                const float p0 = exp2f(s[n][2 * r] - base[r]),
                            p1 = exp2f(s[n][2 * r + 1] - base[r]);
                l[r] += p0 + p1;
                p[n][r] = pack_bf16(p0, p1);
            }
        att_mma_pb<HS, NT>(o, p, v_tile, steps);
    }
    if (logit_max)
        warp_max_into(logit_max, fmaxf(wq0 + g < T ? m[0] / LOG2E : -INFINITY,
                                       wq0 + g + 8 < T ? m[1] / LOG2E : -INFINITY));
    for (int r = 0; r < 2; r++) {
        const float sum = quad_sum(l[r]);
        const int row = wq0 + g + 8 * r;
        if (row >= T) continue;
        float row_lse = (m[r] + log2f(sum)) / LOG2E, scale = 1.0f / sum, before = 0.0f;
        if (blk.merge) {  // as in the CUDA-core kernel
            const float top = fmaxf(lse_before[r], row_lse), held = expf(lse_before[r] - top),
                        mine = expf(row_lse - top), total = held + mine;
            scale = mine / total / sum;
            before = held / total;
            row_lse = top + logf(total);
        }
        att_store_row<HS>(out + ((size_t)b * blk.T + blk.q0 + row) * att_width + h * HS, o, r,
                          scale, before);
        if (t == 0) lse[lse_bh + row] = row_lse;
    }
}

// Backward, pass 1 (dQ): a block owns 64 queries (last ones first), keys and values stream in
// tiles of bwd_tile. It first computes D = dO . O of its rows (two lanes per row) and stores it
// for pass 2. P = 2^(x - lse log2(e)) with x the scores times log2(e).
template <int HS>
static __global__ void __launch_bounds__(MMA_ATT_THREADS)
    attention_backward_dq_mma_kernel(floatX* dqkv, float* delta, const floatX* dout,
                                     const floatX* out, const floatX* qkv, const floatX* kvx,
                                     const float* lse, AttBlock blk, int NH, int KVH) {
    typedef MmaAtt<HS> A;
    constexpr int BC = A::bwd_tile, NT = BC / 8, TILE = BC * A::row_bytes,
                  ROWS_BYTES = MMA_ATT_ROWS * A::row_bytes;
    // Q, dO (64 rows each), 2 x (K, V) (BC rows each), lse * log2(e) and D of the 64 queries
    extern __shared__ __align__(16) unsigned char att_smem[];
    const uint32_t q_tile = smem_address(att_smem), do_tile = q_tile + ROWS_BYTES,
                   kv = do_tile + ROWS_BYTES;
    float* row_lse = (float*)(att_smem + 2 * ROWS_BYTES + 4 * TILE);
    float* row_d = row_lse + MMA_ATT_ROWS;
    const int att_width = NH * HS, b = blockIdx.z, h = blockIdx.y;
    const int T = blk.n;  // as in the forward pass
    const int q0 = (gridDim.x - 1 - blockIdx.x) * MMA_ATT_ROWS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wq0 = q0 + 16 * warp, wlast = blk.causal ? min(wq0 + 15, T - 1) : T - 1;
    const bool warp_has_rows = wq0 < T;
    const size_t stride = (size_t)(NH + 2 * KVH) * HS, kv_width = (size_t)KVH * HS;
    const floatX* q = qkv + ((size_t)b * blk.T + blk.q0) * stride + h * HS;
    const floatX* key_base =
        kvx + ((size_t)b * blk.T + blk.k0) * blk.kv_stride + h / (NH / KVH) * HS;  // v: + kv_width
    const floatX* dout_bh = dout + ((size_t)b * blk.T + blk.q0) * att_width + h * HS;
    const size_t bh = ((size_t)b * NH + h) * blk.T + blk.q0;
    const int tiles = ((blk.causal ? min(q0 + MMA_ATT_ROWS, T) : T) - 1) / BC + 1;
    att_tile_load<HS, MMA_ATT_ROWS>(q_tile, q, stride, q0, T);
    att_tile_load<HS, MMA_ATT_ROWS>(do_tile, dout_bh, att_width, q0, T);
    att_tile_load<HS, BC>(kv, key_base, blk.kv_stride, 0, T);
    att_tile_load<HS, BC>(kv + TILE, key_base + kv_width, blk.kv_stride, 0, T);
    cp_async_commit();
    {  // D of row wq0 + lane/2: each lane of the pair sums half of the row
        const int r = 16 * warp + lane / 2, row = q0 + r, half = lane % 2;
        float sum = 0.0f;
        if (row < T)
            for (int i = 0; i < HS / 16; i++) {
                const size_t at = ((size_t)b * blk.T + blk.q0 + row) * att_width + h * HS +
                                  half * (HS / 2) + 8 * i;
                const x128 dov = load128(dout + at), ov = load128(out + at);
                for (int k = 0; k < x128::size; k++) sum += (float)dov[k] * (float)ov[k];
            }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        if (half == 0) {
            row_d[r] = sum;
            row_lse[r] = row < T ? lse[bh + row] * LOG2E : 0.0f;
            if (row < T) delta[bh + row] = sum;
        }
    }
    const float scale = 1.0f / sqrtf((float)HS), scale_log2 = scale * LOG2E;
    float dq[HS / 8][4] = {};
    float lse2[2] = {}, D[2] = {};
    for (int j = 0; j < tiles; j++) {
        cp_async_wait<0>();
        __syncthreads();  // tile j (at j = 0 also Q, dO, lse, D) is in; tile j - 1 is done with
        if (j + 1 < tiles) {
            const uint32_t next = kv + ((j + 1) & 1) * 2 * TILE;
            att_tile_load<HS, BC>(next, key_base, blk.kv_stride, (j + 1) * BC, T);
            att_tile_load<HS, BC>(next + TILE, key_base + kv_width, blk.kv_stride, (j + 1) * BC, T);
        }
        cp_async_commit();
        if (j == 0)
            for (int r = 0; r < 2; r++) {
                lse2[r] = row_lse[16 * warp + g + 8 * r];
                D[r] = row_d[16 * warp + g + 8 * r];
            }
        const int k0 = j * BC;
        if (!warp_has_rows || k0 > wlast) continue;
        const int steps = (wlast - k0) / 16 + 1;
        const uint32_t k_tile = kv + (j & 1) * 2 * TILE, v_tile = k_tile + TILE;
        float s[NT][4], dp[NT][4];
        att_mma_abt<HS, NT>(s, q_tile, 16 * warp, k_tile, steps);
        att_mma_abt<HS, NT>(dp, do_tile, 16 * warp, v_tile, steps);
        const bool masked = (blk.causal && k0 + BC - 1 > wq0) || k0 + BC > T;
        uint32_t ds[NT][2];
        for (int n = 0; n < NT; n++)
            for (int r = 0; r < 2; r++) {
                float v[2];
                for (int c = 0; c < 2; c++) {
                    const int key = k0 + 8 * n + 2 * t + c, row = wq0 + g + 8 * r;
                    const bool skip =
                        n / 2 >= steps || (masked && ((blk.causal && key > row) || key >= T));
                    const float p = skip ? 0.0f : exp2f(s[n][2 * r + c] * scale_log2 - lse2[r]);
                    v[c] = p * (dp[n][2 * r + c] - D[r]);
                }
                ds[n][r] = pack_bf16(v[0], v[1]);
            }
        att_mma_pb<HS, NT>(dq, ds, k_tile, steps);
    }
    for (int r = 0; r < 2; r++) {
        const int row = wq0 + g + 8 * r;
        if (row < T)
            att_store_row<HS>(dqkv + ((size_t)b * blk.T + blk.q0 + row) * stride + h * HS, dq, r,
                              scale, blk.merge ? 1.0f : 0.0f);
    }
}

// Backward, pass 2 (dK, dV): a block owns 64 keys of kv head blockIdx.y; the queries from the
// block's diagonal on of each of its query heads in turn stream in tiles of bwd_tile with their
// output gradients, lse and D (from pass 1).
template <int HS>
static __global__ void __launch_bounds__(MMA_ATT_THREADS)
    attention_backward_dkv_mma_kernel(floatX* dkv, const float* delta, const floatX* dout,
                                      const floatX* qkv, const floatX* kvx, const float* lse,
                                      AttBlock blk, int NH, int KVH) {
    typedef MmaAtt<HS> A;
    constexpr int BQ = A::bwd_tile, NT = BQ / 8, TILE = BQ * A::row_bytes,
                  ROWS_BYTES = MMA_ATT_ROWS * A::row_bytes;
    // K, V (64 rows each), 2 x (Q, dO) (BQ rows each), 2 x (lse, D) (BQ floats each)
    extern __shared__ __align__(16) unsigned char att_smem[];
    const uint32_t k_tile = smem_address(att_smem), v_tile = k_tile + ROWS_BYTES,
                   qd = v_tile + ROWS_BYTES, vec = qd + 4 * TILE;
    const float* vectors = (const float*)(att_smem + 2 * ROWS_BYTES + 4 * TILE);
    const int att_width = NH * HS, b = blockIdx.z, kh = blockIdx.y, k0 = blockIdx.x * MMA_ATT_ROWS;
    const int T = blk.n;  // as in the forward pass
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wk0 = k0 + 16 * warp;  // the warp's first key
    const bool warp_has_rows = wk0 < T;
    const size_t stride = (size_t)(NH + 2 * KVH) * HS, kv_width = (size_t)KVH * HS;
    const int group = NH / KVH;  // the query heads kh serves: kh * group ...
    const size_t keys = ((size_t)b * blk.T + blk.k0) * blk.kv_stride + kh * HS;  // of kvx and dkv
    // queries before k0 see no key (a diagonal block; otherwise every query does)
    const int first = blk.causal ? k0 / BQ : 0, per_head = (T - 1) / BQ + 1 - first;
    const int tiles = group * per_head;  // (query head, query tile) in head order
    att_tile_load<HS, MMA_ATT_ROWS>(k_tile, kvx + keys, blk.kv_stride, k0, T);
    att_tile_load<HS, MMA_ATT_ROWS>(v_tile, kvx + keys + kv_width, blk.kv_stride, k0, T);
    auto load_queries = [&](int i) {  // tile i % per_head of head i / per_head into buffer i % 2
        const int h = kh * group + i / per_head;
        const floatX* q = qkv + ((size_t)b * blk.T + blk.q0) * stride + h * HS;
        const floatX* dout_bh = dout + ((size_t)b * blk.T + blk.q0) * att_width + h * HS;
        const size_t bh = ((size_t)b * NH + h) * blk.T + blk.q0;
        const int buf = i & 1, qt0 = (first + i % per_head) * BQ;
        att_tile_load<HS, BQ>(qd + buf * 2 * TILE, q, stride, qt0, T);
        att_tile_load<HS, BQ>(qd + buf * 2 * TILE + TILE, dout_bh, att_width, qt0, T);
        att_vector_load<BQ>(vec + buf * 8 * BQ, lse + bh, qt0, T);
        att_vector_load<BQ>(vec + buf * 8 * BQ + 4 * BQ, delta + bh, qt0, T);
    };
    load_queries(0);
    cp_async_commit();
    const float scale = 1.0f / sqrtf((float)HS), scale_log2 = scale * LOG2E;
    float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};
    for (int i = 0; i < tiles; i++) {
        cp_async_wait<0>();
        __syncthreads();  // query tile i is in for every thread; tile i - 1 is done with
        if (i + 1 < tiles) load_queries(i + 1);
        cp_async_commit();
        const int qt0 = (first + i % per_head) * BQ;
        if (!warp_has_rows) continue;
        // 8-query n-tiles lo..hi-1 hold a query >= the warp's first key and < T (lo is even:
        // wk0 - qt0 is a multiple of 16); 16-query steps lo/2 .. (hi+1)/2 - 1
        const int lo = blk.causal ? max(0, (wk0 - qt0) / 8) : 0, hi = min(NT, (T - qt0 + 7) / 8);
        if (lo >= hi) continue;
        const int steps = (hi + 1) / 2;
        const int buf = i & 1;
        const uint32_t qt = qd + buf * 2 * TILE, dot = qt + TILE;
        const float* qlse = vectors + buf * 2 * BQ;
        const float* qd_delta = qlse + BQ;
        float st[NT][4], dpt[NT][4];
        att_mma_abt<HS, NT>(st, k_tile, 16 * warp, qt, steps);
        att_mma_abt<HS, NT>(dpt, v_tile, 16 * warp, dot, steps);
        const bool masked = (blk.causal && qt0 < wk0 + 15) || qt0 + BQ > T;
        uint32_t pt[NT][2], dst[NT][2];
        for (int n = 0; n < NT; n++)
            for (int r = 0; r < 2; r++) {
                float pv[2], dv2[2];
                for (int c = 0; c < 2; c++) {
                    const int col = 8 * n + 2 * t + c, query = qt0 + col, key = wk0 + g + 8 * r;
                    const bool skip = n < lo || n >= hi ||
                                      (masked && ((blk.causal && query < key) || query >= T));
                    const float p =
                        skip ? 0.0f : exp2f(st[n][2 * r + c] * scale_log2 - qlse[col] * LOG2E);
                    pv[c] = p;
                    dv2[c] = p * (dpt[n][2 * r + c] - qd_delta[col]);
                }
                pt[n][r] = pack_bf16(pv[0], pv[1]);
                dst[n][r] = pack_bf16(dv2[0], dv2[1]);
            }
        att_mma_pb<HS, NT>(dv, pt, dot, steps);
        att_mma_pb<HS, NT>(dk, dst, qt, steps);
    }
    for (int r = 0; r < 2; r++) {
        const int row = wk0 + g + 8 * r;
        if (row >= T) continue;
        floatX* drow = dkv + keys + (size_t)row * blk.kv_stride;
        const float before = blk.merge ? 1.0f : 0.0f;
        att_store_row<HS>(drow, dk, r, scale, before);
        att_store_row<HS>(drow + kv_width, dv, r, 1.0f, before);
    }
}

// Launches a tensor-core attention kernel with `smem` bytes of dynamic shared memory (more than
// the default 48 KiB needs the opt-in attribute, set at every launch: it is cheap and keeps no
// state between calls).
template <class Kernel, class... Args>
void att_launch_mma(Kernel kernel, dim3 grid, size_t smem, cudaStream_t stream, Args... args) {
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kernel<<<grid, MMA_ATT_THREADS, smem, stream>>>(args...);
    CUDA_CHECK_LAUNCH();
}

template <int HS>
void attention_forward_tensor_cores(floatX* out, float* lse, unsigned* logit_max, const floatX* qkv,
                                    const floatX* kv, AttBlock blk, int B, int NH, int KVH,
                                    cudaStream_t stream) {
    typedef MmaAtt<HS> A;
    const dim3 grid((unsigned)ceil_div(blk.n, MMA_ATT_ROWS), NH, B);
    const size_t smem = (size_t)(MMA_ATT_ROWS + 4 * A::fwd_tile) * A::row_bytes;
    att_launch_mma(attention_forward_mma_kernel<HS>, grid, smem, stream, out, lse, logit_max, qkv,
                   kv, blk, NH, KVH);
}

template <int HS>
void attention_backward_tensor_cores(floatX* dqkv, floatX* dkv, float* delta, const floatX* dout,
                                     const floatX* out, const floatX* qkv, const floatX* kv,
                                     const float* lse, AttBlock blk, int B, int NH, int KVH,
                                     cudaStream_t stream) {
    typedef MmaAtt<HS> A;
    const dim3 grid((unsigned)ceil_div(blk.n, MMA_ATT_ROWS), NH, B);
    const size_t tiles = (size_t)(2 * MMA_ATT_ROWS + 4 * A::bwd_tile) * A::row_bytes;
    att_launch_mma(attention_backward_dq_mma_kernel<HS>, grid, tiles + 2 * MMA_ATT_ROWS * 4, stream,
                   dqkv, delta, dout, out, qkv, kv, lse, blk, NH, KVH);
    const dim3 kv_grid(grid.x, KVH, B);  // a block per kv head
    att_launch_mma(attention_backward_dkv_mma_kernel<HS>, kv_grid, tiles + 4 * A::bwd_tile * 4,
                   stream, dkv, (const float*)delta, dout, qkv, kv, lse, blk, NH, KVH);
}
#endif

// Which kernels compute attention: tensor cores in the bf16 build, the CUDA-core kernels above
// in the fp32 build (the exact reference). The dev/cuda harnesses run both.
enum class AttentionPath { cuda_cores, tensor_cores };
constexpr AttentionPath ATTENTION_PATH =
    FLOATX_IS_FP32 ? AttentionPath::cuda_cores : AttentionPath::tensor_cores;

inline const char* attention_path_name(AttentionPath path) {
    return path == AttentionPath::tensor_cores
               ? "tensor cores (mma.sync m16n8k16 bf16, FlashAttention-2 style)"
               : "CUDA cores (fp32 FMA, flash style)";
}

// Calls f(std::integral_constant<int, HS>{}) for the head sizes gpt_config_error admits.
template <class F>
void with_head_size(int HS, F f) {
    switch (HS) {
        case 32:
            f(std::integral_constant<int, 32>{});
            break;
        case 64:
            f(std::integral_constant<int, 64>{});
            break;
        case 128:
            f(std::integral_constant<int, 128>{});
            break;
        default:
            fatal("attention: unsupported head size %d", HS);
    }
}

inline void attention_path_check(AttentionPath path) {
    if (FLOATX_IS_FP32 && path == AttentionPath::tensor_cores)
        fatal("attention: the tensor-core kernels need the bf16 build");
}

// Block blk (AttBlock) of the attention of queries in qkv (B,T,(NH + 2 KVH) HS) to keys and
// values in kv (KVH kv heads; GPT-2's KVH = NH): out (B,T,att_width), lse (B,NH,T); logit_max
// (nullptr: none) is raised to the key (monitor_key) of the largest q.k/sqrt(HS).
inline void attention_block_forward(floatX* out, float* lse, const floatX* qkv, const floatX* kv,
                                    AttBlock blk, int B, int NH, int KVH, int HS,
                                    cudaStream_t stream, AttentionPath path = ATTENTION_PATH,
                                    unsigned* logit_max = nullptr) {
    attention_path_check(path);
    with_head_size(HS, [&](auto hs) {
        constexpr int H = decltype(hs)::value;
#if !defined(ENABLE_FP32)
        if (path == AttentionPath::tensor_cores)
            return attention_forward_tensor_cores<H>(out, lse, logit_max, qkv, kv, blk, B, NH, KVH,
                                                     stream);
#endif
        attention_forward_cuda_cores<H>(out, lse, logit_max, qkv, kv, blk, B, NH, KVH, stream);
    });
}

// Its backward pass: the queries' gradient into dqkv's q, the keys' and values' into dkv (the
// layout of kv); delta is (B,NH,T) scratch.
inline void attention_block_backward(floatX* dqkv, floatX* dkv, float* delta, const floatX* dout,
                                     const floatX* out, const floatX* qkv, const floatX* kv,
                                     const float* lse, AttBlock blk, int B, int NH, int KVH, int HS,
                                     cudaStream_t stream, AttentionPath path = ATTENTION_PATH) {
    attention_path_check(path);
    with_head_size(HS, [&](auto hs) {
        constexpr int H = decltype(hs)::value;
#if !defined(ENABLE_FP32)
        if (path == AttentionPath::tensor_cores)
            return attention_backward_tensor_cores<H>(dqkv, dkv, delta, dout, out, qkv, kv, lse,
                                                      blk, B, NH, KVH, stream);
#endif
        attention_backward_cuda_cores<H>(dqkv, dkv, delta, dout, out, qkv, kv, lse, blk, B, NH, KVH,
                                         stream);
    });
}

// out (B,T,att_width), lse (B,NH,T) = causal attention of qkv (B,T,(NH + 2 KVH) HS); logit_max
// (nullptr: none) is raised to the key (monitor_key) of the largest q.k/sqrt(HS).
inline void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH,
                              int KVH, int HS, cudaStream_t stream,
                              AttentionPath path = ATTENTION_PATH, unsigned* logit_max = nullptr) {
    attention_block_forward(out, lse, qkv, qkv + NH * HS, att_whole(T, (NH + 2 * KVH) * HS), B, NH,
                            KVH, HS, stream, path, logit_max);
}

// dqkv (B,T,(NH + 2 KVH) HS) = gradient of the attention output dout (B,T,att_width); delta is
// (B,NH,T) scratch.
inline void attention_backward(floatX* dqkv, float* delta, const floatX* dout, const floatX* out,
                               const floatX* qkv, const float* lse, int B, int T, int NH, int KVH,
                               int HS, cudaStream_t stream, AttentionPath path = ATTENTION_PATH) {
    attention_block_backward(dqkv, dqkv + NH * HS, delta, dout, out, qkv, qkv + NH * HS, lse,
                             att_whole(T, (NH + 2 * KVH) * HS), B, NH, KVH, HS, stream, path);
}

#include "llmc/context_parallel.cuh"  // --cp: ring attention over these kernels, the causal load balance

// ---------------------------------------------------------------------------------------------
// GELU, tanh approximation: gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
// Elementwise: a thread takes GELU_PACKS consecutive 16-byte packs per step of its grid-stride
// loop. On a GPU one (a warp's loads then cover consecutive packs: coalesced). Under the CPU
// runtime four: a thread's elements are the SIMD lanes there (the block's threads run one after
// the other), and four packs of fp32 fill an AVX-512 register instead of a quarter of it
// (GELU 3x faster in a 4M-element loop on one core). dev/cuda/gelu.cu builds with
// -DGELU_PACKS=1, so the GPU's form is checked on the CPU too (as ROW_LANES in common.cuh).
#ifndef GELU_PACKS
#ifdef __CUCC__
#define GELU_PACKS 4
#else
#define GELU_PACKS 1
#endif
#endif
constexpr int GELU_CHUNK = GELU_PACKS * x128::size;  // elements a thread takes at once

constexpr float GELU_SCALE = 0.7978845608028654f;  // sqrt(2/pi)

// Forward: out[0, P packs) = gelu(inp[0, P packs)). Backward: out holds the gradient of the
// GELU's output there and becomes that of its input, in place.
template <bool backward, int P>
__device__ inline void gelu_packs(floatX* out, const floatX* inp) {
    constexpr int E = P * x128::size;
    float x[E], g[E];
    for (int q = 0; q < P; q++) {
        const x128 v = load128(inp + q * x128::size);
        const x128 d = backward ? load128(out + q * x128::size) : x128{};
        for (int k = 0; k < x128::size; k++) {
            x[q * x128::size + k] = (float)v[k];
            g[q * x128::size + k] = (float)d[k];
        }
    }
    for (int k = 0; k < E; k++) {
        const float v = x[k];
        const float th = tanhf(GELU_SCALE * (v + 0.044715f * v * v * v));
        if (backward) {
            const float du = GELU_SCALE * (1.0f + 3.0f * 0.044715f * v * v);
            g[k] *= 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du;
        } else {
            g[k] = 0.5f * v * (1.0f + th);
        }
    }
    for (int q = 0; q < P; q++) {
        x128 o;
        for (int k = 0; k < x128::size; k++) o[k] = (floatX)g[q * x128::size + k];
        store128(out + q * x128::size, o);
    }
}

// n is a multiple of x128::size; a tensor's last chunk may hold fewer than GELU_PACKS packs.
template <bool backward>
static __global__ void gelu_kernel(floatX* out, const floatX* inp, size_t n) {
    for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * GELU_CHUNK; i < n;
         i += (size_t)gridDim.x * blockDim.x * GELU_CHUNK) {
        if (i + GELU_CHUNK <= n) {
            gelu_packs<backward, GELU_PACKS>(out + i, inp + i);
            continue;
        }
        for (size_t j = i; j < n; j += x128::size) gelu_packs<backward, 1>(out + j, inp + j);
    }
}

inline void gelu_forward(floatX* out, const floatX* inp, size_t n, cudaStream_t stream) {
    const int block = 256;
    gelu_kernel<false>
        <<<grid_for(ceil_div(n, (size_t)GELU_CHUNK), block), block, 0, stream>>>(out, inp, n);
    CUDA_CHECK_LAUNCH();
}

inline void gelu_backward(floatX* d, const floatX* inp, size_t n, cudaStream_t stream) {
    const int block = 256;
    gelu_kernel<true>
        <<<grid_for(ceil_div(n, (size_t)GELU_CHUNK), block), block, 0, stream>>>(d, inp, n);
    CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// QK-norm (--qk-norm): RMSNorm of every head's query and key over its HS dimensions, with a
// learned per-dimension scale (q_norm.w for the queries, k_norm.w for the keys, shared by the
// heads of a layer), eps 1e-6:  y = x * r * w,  r = 1 / sqrt(mean(x^2) + eps). It runs on the
// qkv buffer in place, between the qkv projection and attention (whose 1/sqrt(HS) softmax scale
// comes after it), so the attention kernels read normalized q and k and know nothing of it.
// The forward pass keeps x (qk_raw) and r (qk_rstd) for the backward pass, which turns the
// attention's dq, dk into the gradients of the projection's q, k, in place in dqkv.
// A "vector" is one head's q or k of one row: vector v = row * (NH + KVH) + j, q of head j < NH
// or k of kv head j - NH (GPT-2: KVH = NH), at column j * HS of the row. A group of G = HS /
// x128::size lanes (4 to 32, aligned in the warp) owns a vector, one 16-byte pack per lane, and
// sums over the group with warp_group_sum.

constexpr float QK_NORM_EPS = 1e-6f;
constexpr int QK_NORM_THREADS = 256;

static __global__ void qk_norm_forward_kernel(floatX* qkv, floatX* raw, float* rstd,
                                              const floatX* q_w, const floatX* k_w, int N, int NH,
                                              int KVH, int HS) {
    const int G = HS / x128::size, per_row = NH + KVH;
    const size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x, v = t / G;
    const int c = (int)(t % G) * x128::size;
    // lanes past the last vector join the shuffles with zeros and store nothing
    const bool valid = v < (size_t)N * per_row;
    const int j = (int)(v % per_row), part = j < NH ? 0 : 1;
    const size_t row = v / per_row;
    const size_t at = (size_t)j * HS + c;
    const x128 x = valid ? load128(qkv + (size_t)row * (per_row + KVH) * HS + at) : x128{};
    float sq = 0.0f;
    for (int k = 0; k < x128::size; k++) sq += (float)x[k] * (float)x[k];
    const float r = 1.0f / sqrtf(warp_group_sum(sq, G) / HS + QK_NORM_EPS);
    if (!valid) return;
    const x128 w = load128((part == 0 ? q_w : k_w) + c);
    x128 y;
    for (int k = 0; k < x128::size; k++) y[k] = (floatX)((float)x[k] * r * (float)w[k]);
    store128(raw + (size_t)row * per_row * HS + at, x);
    store128(qkv + (size_t)row * (per_row + KVH) * HS + at, y);
    if (c == 0) rstd[v] = r;
}

// Input gradient, in place: dy (the attention's dq or dk) becomes, with xhat = x * r and
// g = dy * w,  dx = r * (g - xhat * mean(g * xhat)).
static __global__ void qk_norm_backward_kernel(floatX* dqkv, const floatX* raw, const float* rstd,
                                               const floatX* q_w, const floatX* k_w, int N, int NH,
                                               int KVH, int HS) {
    const int G = HS / x128::size, per_row = NH + KVH;
    const size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x, v = t / G;
    const int c = (int)(t % G) * x128::size;
    const bool valid = v < (size_t)N * per_row;
    const int j = (int)(v % per_row), part = j < NH ? 0 : 1;
    const size_t row = v / per_row;
    const size_t at = (size_t)j * HS + c;
    floatX* dx = dqkv + (size_t)row * (per_row + KVH) * HS + at;
    const x128 dy = valid ? load128(dx) : x128{};
    const x128 x = valid ? load128(raw + (size_t)row * per_row * HS + at) : x128{};
    const x128 w = load128((part == 0 ? q_w : k_w) + c);
    const float r = valid ? rstd[v] : 0.0f;
    float g[x128::size], xhat[x128::size], sum_gx = 0.0f;
    for (int k = 0; k < x128::size; k++) {
        g[k] = (float)dy[k] * (float)w[k];
        xhat[k] = (float)x[k] * r;
        sum_gx += g[k] * xhat[k];
    }
    const float mean_gx = warp_group_sum(sum_gx, G) / HS;
    if (!valid) return;
    x128 out;
    for (int k = 0; k < x128::size; k++) out[k] = (floatX)(r * (g[k] - xhat[k] * mean_gx));
    store128(dx, out);
}

// Scale gradients, without atomics, in column_sums' two steps: a thread owns dimension i of
// part (q or k) and a chunk of COLUMN_CHUNK (row, head) pairs j = row * heads + head (heads: NH
// for q, KVH for k; the k part's chunks past its N * KVH pairs write zeros) and writes
// partials[(chunk * 2 + part) * HS + i] = sum dy * xhat; column_finish_kernel then adds the
// chunks in order, its weight slot (0) going to dq_w and its bias slot (1) to dk_w.
static __global__ void qk_norm_scale_partials_kernel(float* partials, const floatX* dqkv,
                                                     const floatX* raw, const float* rstd, int N,
                                                     int NH, int KVH, int HS) {
    const int i = threadIdx.x % HS, part = threadIdx.x / HS, per_row = NH + KVH;
    const int heads = part == 0 ? NH : KVH;
    const size_t first = (size_t)blockIdx.x * COLUMN_CHUNK;
    const size_t vectors = (size_t)N * heads;  // (row, head) pairs
    const size_t end = first + COLUMN_CHUNK < vectors ? first + COLUMN_CHUNK : vectors;
    float sum = 0.0f;
    for (size_t j = first; j < end; j++) {
        const size_t row = j / heads;
        const int h = part * NH + (int)(j % heads);  // the vector's place in its row
        const float r = rstd[(size_t)row * per_row + h];
        const size_t at = (size_t)h * HS + i;
        sum += (float)dqkv[(size_t)row * (per_row + KVH) * HS + at] *
               ((float)raw[(size_t)row * per_row * HS + at] * r);
    }
    partials[((size_t)blockIdx.x * 2 + part) * HS + i] = sum;
}

inline void qk_norm_forward(floatX* qkv, floatX* raw, float* rstd, const floatX* q_w,
                            const floatX* k_w, int N, int NH, int KVH, int HS,
                            cudaStream_t stream) {
    const size_t threads = (size_t)N * (NH + KVH) * (HS / x128::size);
    qk_norm_forward_kernel<<<(int)ceil_div(threads, QK_NORM_THREADS), QK_NORM_THREADS, 0, stream>>>(
        qkv, raw, rstd, q_w, k_w, N, NH, KVH, HS);
    CUDA_CHECK_LAUNCH();
}

// dq_w, dk_w += the scale gradients; dqkv's q and k parts become the gradients before QK-norm.
// partials: ceil(N*NH / COLUMN_CHUNK) * 2 * HS floats, which col_partials' ceil(N /
// COLUMN_CHUNK) * 2 * 4C always covers.
inline void qk_norm_backward(floatX* dqkv, floatX* dq_w, floatX* dk_w, float* partials,
                             const floatX* raw, const float* rstd, const floatX* q_w,
                             const floatX* k_w, int N, int NH, int KVH, int HS,
                             cudaStream_t stream) {
    const int n_chunks = (int)ceil_div((size_t)N * NH, COLUMN_CHUNK);  // NH >= KVH
    // the scale gradients read dy, so they go first
    qk_norm_scale_partials_kernel<<<n_chunks, 2 * HS, 0, stream>>>(partials, dqkv, raw, rstd, N, NH,
                                                                   KVH, HS);
    CUDA_CHECK_LAUNCH();
    column_finish_kernel<<<(int)ceil_div(HS, 32), 32 * COLUMN_FINISH_WARPS, 0, stream>>>(
        dq_w, dk_w, partials, n_chunks, HS);
    CUDA_CHECK_LAUNCH();
    const size_t threads = (size_t)N * (NH + KVH) * (HS / x128::size);
    qk_norm_backward_kernel<<<(int)ceil_div(threads, QK_NORM_THREADS), QK_NORM_THREADS, 0,
                              stream>>>(dqkv, raw, rstd, q_w, k_w, N, NH, KVH, HS);
    CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// RoPE (Llama): rotary position embeddings on q and k, applied by a kernel on the qkv buffer in
// place, after the qkv product and QK-norm and before attention, so both attention paths (CUDA
// cores and tensor cores) read rotated q and k and know nothing of it. The pairing is
// transformers' rotate_half: dimension i of a head turns with dimension i + HS/2 (i < HS/2) by
// the angle pos * inv_freq[i]:
//   y_i = x_i cos - x_{i+HS/2} sin,   y_{i+HS/2} = x_{i+HS/2} cos + x_i sin,
// so Hugging Face Llama checkpoints load without permuting their q and k rows. QK-norm comes
// before it (as in OLMo 2): the norm's per-dimension scale would otherwise act on rotated
// dimensions, and q.k would no longer depend on the positions' difference alone.
// The rotation is orthogonal: the backward pass turns dq, dk in place by -angle, and nothing is
// saved. inv_freq is theta^(-2i/HS), under --rope-scaling llama3 rescaled as transformers'
// _compute_llama3_parameters does; it travels in the kernel's arguments.

constexpr int ROPE_MAX_PAIRS = 64;  // HS / 2 for the largest head size (128)
struct RopeFreqs {
    float inv_freq[ROPE_MAX_PAIRS];
};

// The frequencies of head size HS under Llama settings l (computed in double, rounded to float).
inline RopeFreqs rope_freqs(const LlamaConfig* l, int HS) {
    RopeFreqs f = {};
    const double pi = 3.14159265358979323846;
    for (int i = 0; i < HS / 2; i++) {
        double inv = 1.0 / pow(l->rope_theta, 2.0 * i / HS);
        if (l->rope_scaling == ROPE_SCALING_LLAMA3) {
            const double old = l->rope_original_context, wavelen = 2.0 * pi / inv;
            const double low_wavelen = old / l->rope_low_freq_factor;
            const double high_wavelen = old / l->rope_high_freq_factor;
            if (wavelen > low_wavelen) {
                inv /= l->rope_factor;             // low frequencies: interpolated
            } else if (wavelen >= high_wavelen) {  // between: smoothly from one to the other
                const double smooth = (old / wavelen - l->rope_low_freq_factor) /
                                      (l->rope_high_freq_factor - l->rope_low_freq_factor);
                inv = (1.0 - smooth) * inv / l->rope_factor + smooth * inv;
            }
        }
        f.inv_freq[i] = (float)inv;
    }
    return f;
}

// One thread per (row, head vector j < NH + KVH of [q | k], pair i); sign +1 forward (turns by
// the angle), -1 backward (turns the gradient back). Position: positions[row % T] (context
// parallelism: the rows' places in the sequence), or row % T when positions is nullptr.
static __global__ void rope_kernel(floatX* qkv, RopeFreqs freqs, const int* positions, int N, int T,
                                   int NH, int KVH, int HS, float sign) {
    const int pairs = HS / 2, per_row = NH + KVH;
    const size_t id = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (id >= (size_t)N * per_row * pairs) return;
    const int i = (int)(id % pairs), j = (int)(id / pairs % per_row);
    const size_t row = id / ((size_t)pairs * per_row);
    const int t = (int)(row % T), position = positions ? positions[t] : t;
    const float angle = (float)position * freqs.inv_freq[i];
    const float c = cosf(angle), s = sign * sinf(angle);
    floatX* x = qkv + row * (size_t)(per_row + KVH) * HS + (size_t)j * HS + i;
    const float x1 = (float)x[0], x2 = (float)x[pairs];
    x[0] = (floatX)(x1 * c - x2 * s);
    x[pairs] = (floatX)(x2 * c + x1 * s);
}

// In place on q and k of qkv (N rows of sequences of T, (NH + 2 KVH) HS wide; positions as
// rope_kernel's): forward rotates them; backward turns their gradients in dqkv back.
inline void rope_forward(floatX* qkv, const RopeFreqs* freqs, const int* positions, int N, int T,
                         int NH, int KVH, int HS, cudaStream_t stream, float sign = 1.0f) {
    const size_t threads = (size_t)N * (NH + KVH) * (HS / 2);
    rope_kernel<<<(int)ceil_div(threads, (size_t)256), 256, 0, stream>>>(qkv, *freqs, positions, N,
                                                                         T, NH, KVH, HS, sign);
    CUDA_CHECK_LAUNCH();
}
inline void rope_backward(floatX* dqkv, const RopeFreqs* freqs, const int* positions, int N, int T,
                          int NH, int KVH, int HS, cudaStream_t stream) {
    rope_forward(dqkv, freqs, positions, N, T, NH, KVH, HS, stream, -1.0f);
}

// ---------------------------------------------------------------------------------------------
// SwiGLU (Llama's MLP): fch holds [gate | up] of a row (the w1 and w3 products, H = mlp wide
// each, one matmul: the two matrices lie next to each other); out = silu(gate) * up with
// silu(g) = g sigmoid(g). Backward, with s = sigmoid(g):
//   dgate = dout * up * s (1 + g (1 - s)),  dup = dout * silu(g).
// Elementwise, one thread per element of out.

static __global__ void swiglu_forward_kernel(floatX* out, const floatX* fch, size_t N, int H) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N * H;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t row = i / H, j = i % H;
        const float g = (float)fch[row * 2 * H + j], u = (float)fch[row * 2 * H + H + j];
        out[i] = (floatX)(g / (1.0f + expf(-g)) * u);
    }
}

static __global__ void swiglu_backward_kernel(floatX* dfch, const floatX* dout, const floatX* fch,
                                              size_t N, int H) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N * H;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t row = i / H, j = i % H;
        const float g = (float)fch[row * 2 * H + j], u = (float)fch[row * 2 * H + H + j];
        const float d = (float)dout[i], sig = 1.0f / (1.0f + expf(-g));
        dfch[row * 2 * H + j] = (floatX)(d * u * sig * (1.0f + g * (1.0f - sig)));
        dfch[row * 2 * H + H + j] = (floatX)(d * g * sig);
    }
}

inline void swiglu_forward(floatX* out, const floatX* fch, int N, int H, cudaStream_t stream) {
    swiglu_forward_kernel<<<grid_for((size_t)N * H, 256), 256, 0, stream>>>(out, fch, N, H);
    CUDA_CHECK_LAUNCH();
}

// dfch (N, 2H) = the gradients of [gate | up] from dout (N, H), the gradient of the output.
inline void swiglu_backward(floatX* dfch, const floatX* dout, const floatX* fch, int N, int H,
                            cudaStream_t stream) {
    swiglu_backward_kernel<<<grid_for((size_t)N * H, 256), 256, 0, stream>>>(dfch, dout, fch, N, H);
    CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// Linear layers, through matmul() (llmc/matmul.cuh). Row-major shapes: inp (N, IC),
// weight (OC, IC) as in PyTorch, out (N, OC).

// out = inp @ weight^T + bias (bias may be nullptr). In cuBLASLt's column-major terms:
// out^T (OC, N) = weight (OC, IC, stored transposed) * inp^T (IC, N).
// With fp8.state set, the products run in FP8 (llmc/fp8_linear.cuh).
inline void linear_forward(MatmulContext* mm, Fp8Use fp8, floatX* out, const floatX* inp,
                           const floatX* weight, const floatX* bias, int N, int IC, int OC) {
    if (fp8.state) return fp8_linear_forward(fp8.state, fp8.layer, mm, out, inp, weight, bias, N);
    matmul(mm, out, weight, inp, bias, OC, N, IC, true, false, false);
}

// dinp = dout @ weight; dweight += dout^T @ inp; dbias += column sums of dout (if dbias).
inline void linear_backward(MatmulContext* mm, Fp8Use fp8, floatX* dinp, floatX* dweight,
                            floatX* dbias, float* partials, const floatX* dout, const floatX* inp,
                            const floatX* weight, int N, int IC, int OC) {
    if (fp8.state) {
        fp8_linear_backward(fp8.state, fp8.layer, mm, dinp, dweight, dout, inp, weight, N);
    } else {
        // dinp^T (IC, N) = weight^T (IC, OC) * dout^T (OC, N)
        matmul(mm, dinp, weight, dout, nullptr, IC, N, OC, false, false, false);
        // dweight^T (IC, OC) += inp^T (IC, N) * dout (N, OC)
        matmul(mm, dweight, inp, dout, nullptr, IC, OC, N, false, true, true);
    }
    if (dbias)
        column_sums(nullptr, dbias, partials, dout, nullptr, nullptr, nullptr, N, OC, mm->stream);
}

// ---------------------------------------------------------------------------------------------
// Classifier: softmax, cross-entropy, z-loss and dlogits of each row (b,t) of the logits, in
// kernels that never store probabilities. A rank holds the logits of tokens [v0, v0 + Vl) of
// every row, (N, Vl): all Vp of them on one rank, a slice under tensor parallelism (the
// vocabulary-parallel cross-entropy of llmc/tensor_parallel.cuh). Columns V..Vp-1 (vocabulary
// padding) are outside the softmax. ROW_LANES threads per row: pass 1 keeps a running max and a
// running sum of exponentials per lane (online softmax) and merges the lanes, giving the row's
// softmax statistics over these columns, log Z = log(sum exp) when they are all of them; the row's
// cross-entropy is log Z - logit[target] and its z-loss z_coef * (log Z)^2. Pass 2, when
// dloss > 0, overwrites the logits with the gradient of their sum,
//   dlogits = dloss * (softmax * (1 + 2 z_coef log Z) - onehot(target)),
// and the padding columns with 0. dloss folds in the loss normalization 1/(B*T*A).

// Pass 1 over row x (Vl logits of tokens v0...): every lane ends with the row's max and sum of
// exponentials, and the target's logit (0 when the target is not among these tokens).
__device__ SoftmaxStats row_softmax_stats(const floatX* x, int Vl, int v0, int V, int target,
                                          int lane) {
    const int packs = Vl / x128::size;
    float m = -INFINITY, s = 0.0f;
    float target_logit = 0.0f;  // set in the lane that reads the target's pack
    for (int p = lane; p < packs; p += ROW_LANES) {
        x128 v = load128(x + p * x128::size);
        for (int k = 0; k < x128::size; k++) {
            const int col = v0 + p * x128::size + k;
            if (col >= V) break;
            float val = (float)v[k];
            if (col == target) target_logit = val;
            if (val > m) {
                s = s * expf(m - val) + 1.0f;
                m = val;
            } else {
                s += expf(val - m);
            }
        }
    }
    const bool here = target >= v0 && target < v0 + Vl;
#if ROW_LANES > 1
    // pack p belongs to lane p % 32, which broadcasts the target's logit (a lane reads and
    // later overwrites only its own packs, so no lane waits for another)
    target_logit =
        __shfl_sync(0xffffffffu, target_logit, here ? ((target - v0) / x128::size) % 32 : 0);
    for (int offset = 16; offset > 0; offset /= 2) {  // merge (m, s) across lanes
        float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
        float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
        float m_new = fmaxf(m, m2);
        s = (s > 0.0f ? s * expf(m - m_new) : 0.0f) + (s2 > 0.0f ? s2 * expf(m2 - m_new) : 0.0f);
        m = m_new;
    }
#endif
    return SoftmaxStats{m, s, here ? target_logit : 0.0f};
}

// Pass 2: dlogits of row x from the row's max m, sum s and log Z over the whole vocabulary.
__device__ void row_dlogits(floatX* x, int Vl, int v0, int V, int target, float m, float s,
                            float log_z, float dloss, float z_coef, int lane) {
    // softmax times the z-loss factor; exactly 1/s without z-loss
    const float scale = 1.0f / s * (1.0f + 2.0f * z_coef * log_z);
    for (int p = lane; p < Vl / x128::size; p += ROW_LANES) {
        x128 v = load128(x + p * x128::size), d;
        for (int k = 0; k < x128::size; k++) {
            int col = v0 + p * x128::size + k;
            float prob = col < V ? expf((float)v[k] - m) * scale : 0.0f;
            float grad = col < V ? (prob - (col == target ? 1.0f : 0.0f)) * dloss : 0.0f;
            d[k] = (floatX)grad;
        }
        store128(x + p * x128::size, d);
    }
}

// One rank holds every logit: both passes in one kernel.
static __global__ void fused_classifier_kernel(floatX* logits, float* losses, float* z_losses,
                                               float* log_zs, const int* targets, int N, int V,
                                               int Vp, float dloss, float z_coef) {
    const int lane = threadIdx.x % ROW_LANES;
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / ROW_LANES;
    if (row >= N) return;
    floatX* x = logits + (size_t)row * Vp;
    const SoftmaxStats st = row_softmax_stats(x, Vp, 0, V, targets[row], lane);
    const float log_z = logf(st.sum) + st.max;
    if (lane == 0) {
        losses[row] = log_z - st.target;
        z_losses[row] = z_coef * log_z * log_z;
        if (log_zs) log_zs[row] = log_z;
    }
    if (dloss == 0.0f) return;
    row_dlogits(x, Vp, 0, V, targets[row], st.max, st.sum, log_z, dloss, z_coef, lane);
}

// Tensor parallelism: pass 1 into stats (N), combined over the group, then pass 2.
static __global__ void classifier_stats_kernel(SoftmaxStats* stats, const floatX* logits,
                                               const int* targets, int N, int V, int Vl, int v0) {
    const int lane = threadIdx.x % ROW_LANES;
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / ROW_LANES;
    if (row >= N) return;
    const SoftmaxStats st =
        row_softmax_stats(logits + (size_t)row * Vl, Vl, v0, V, targets[row], lane);
    if (lane == 0) stats[row] = st;
}

static __global__ void classifier_dlogits_kernel(floatX* logits, const SoftmaxStats* combined,
                                                 const int* targets, int N, int V, int Vl, int v0,
                                                 float dloss, float z_coef) {
    const int lane = threadIdx.x % ROW_LANES;
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / ROW_LANES;
    if (row >= N) return;
    const SoftmaxStats st = combined[row];  // target holds log Z (softmax_stats_combine_kernel)
    row_dlogits(logits + (size_t)row * Vl, Vl, v0, V, targets[row], st.max, st.sum, st.target,
                dloss, z_coef, lane);
}

// losses, z_losses, log_z (N; log_z nullptr: not wanted) and, with dloss > 0, dlogits in place
// of logits (N, Vl) of this rank's tokens; stats: (N) and all_stats (t, N) scratch under tensor
// parallelism, where log Z is the whole vocabulary's (combined over the group).
inline void classifier(const TensorParallel* tp, floatX* logits, float* losses, float* z_losses,
                       float* log_z, SoftmaxStats* stats, SoftmaxStats* all_stats,
                       const int* targets, int N, int V, int Vl, float dloss, float z_coef,
                       cudaStream_t stream) {
    const int grid = (int)ceil_div(N, ROWS_PER_BLOCK), block = ROW_THREADS;
    if (tp->size == 1) {
        fused_classifier_kernel<<<grid, block, 0, stream>>>(logits, losses, z_losses, log_z,
                                                            targets, N, V, Vl, dloss, z_coef);
        CUDA_CHECK_LAUNCH();
        return;
    }
    const int v0 = tp->rank * Vl;
    classifier_stats_kernel<<<grid, block, 0, stream>>>(stats, logits, targets, N, V, Vl, v0);
    CUDA_CHECK_LAUNCH();
    vocab_parallel_combine(tp, stats, losses, z_losses, log_z, stats, all_stats, N, z_coef, stream);
    if (dloss == 0.0f) return;
    classifier_dlogits_kernel<<<grid, block, 0, stream>>>(logits, stats, targets, N, V, Vl, v0,
                                                          dloss, z_coef);
    CUDA_CHECK_LAUNCH();
}

// =============================================================================================
// Monitors of a training step (train_run.cuh logs them; README "Monitors"): always the largest
// attention logit of each layer (written by the attention forward kernels: monitor_key) and the
// mean and max log Z of the output softmax over the global batch; with --log-layer-norms the
// gradient norm of each block, of the embeddings and of the final norm (gpt_grad_norm, through
// the gradient norm's own sums and gathers); with --log-update-ratio ||W_after - W_before|| /
// ||W_after|| of each tensor group (UpdateGroup), over the fp32 weights of record (the master
// weights in the bf16 build) of the ranges each rank owns. The step's values lie in one small
// device vector, keys (maxima, order keys) and sums: written only by a training step's forward
// passes (never evaluation, sampling or a recompute's rerun) and update, combined over the
// data- and tensor-parallel groups once at the end of the step (gpt_monitors_finish: one
// all-gather of the vector per group, then the max of the keys and the sum of the sums in rank
// order, the same bits on every rank) and copied into pinned host memory that the step's closing
// synchronization makes readable: no host synchronization of their own.

enum UpdateGroup {        // the tensor groups of --log-update-ratio
    UPDATE_EMBEDDINGS,    // wte (also the lm head), wpe
    UPDATE_ATTENTION,     // attn.qkv.w, attn.proj.w
    UPDATE_MLP,           // mlp.fc.w, mlp.proj.w
    UPDATE_NORMS_BIASES,  // LayerNorms (lnf too), QK-norm scales, every bias
    NUM_UPDATE_GROUPS
};
static const char* const UPDATE_GROUP_NAMES[NUM_UPDATE_GROUPS] = {"embeddings", "attention", "mlp",
                                                                  "norms_biases"};

struct MonitorConfig {
    bool layer_norms;   // --log-layer-norms
    bool update_ratio;  // --log-update-ratio (allocates a copy of the owned weights of record)
};

// What the update-ratio sums cover: n weights of record at `at` (in the buffer and in its copy
// from before the update) of group `group`, summed in `blocks` blocks.
struct UpdateItem {
    size_t at, n;
    int group, blocks;
};

// The device vector's layout: keys[l] the largest attention logit of layer l, keys[L] the
// largest log Z; sums[0] the sum of log Z over this rank's tokens (on one rank of a
// tensor-parallel group, which all hold the same), sums[1 + 2g] ||dW||^2 and sums[2 + 2g] ||W||^2
// of update group g over the ranges this rank counts (as the gradient norm counts them, and at
// ZeRO-0 on the first data-parallel rank only): each value is a max, or a sum, over every rank.
constexpr int MONITOR_SUMS = 1 + 2 * NUM_UPDATE_GROUPS;
inline int monitor_words(int layers) { return layers + 1 + MONITOR_SUMS; }
struct Monitors {
    MonitorConfig config;
    bool recording;      // the forward pass running is a training step's: it writes the keys
    unsigned* vec;       // device, monitor_words(L) 4-byte words: keys (L + 1), then sums (floats)
    unsigned* keys;      // vec's keys
    float* sums;         // vec's sums
    unsigned* gathered;  // device (the largest group's ranks, monitor_words(L)): the all-gather
    unsigned* host;      // pinned copy of vec, the step's combined values (gpt_monitors_finish)
    unsigned* host_keys;
    float* host_sums;
    double tokens;    // of the global batch, whose log Z sums[0] adds
    float* layer_sq;  // --log-layer-norms: host (L + 2), blocks, embeddings, lnf (gpt_grad_norm)
    // --log-update-ratio
    float* before;      // device: the weights of record before the update, as the buffer holds them
    UpdateItem* items;  // device
    int item_count, max_blocks;
    float* partials;  // (items, max_blocks, 2)
};

// vec (K words: `keys` order keys, then float sums) = the combination of `ranks` vectors
// gathered (ranks, K): the largest key, the floats' sum in rank order.
static __global__ void monitor_combine_kernel(unsigned* vec, const unsigned* gathered, int ranks,
                                              int keys, int K) {
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
        if (k < keys) {
            unsigned top = 0;
            for (int r = 0; r < ranks; r++) {
                const unsigned key = gathered[(size_t)r * K + k];
                if (key > top) top = key;
            }
            vec[k] = top;
            continue;
        }
        float sum = 0.0f;
        for (int r = 0; r < ranks; r++) {
            float v;
            memcpy(&v, &gathered[(size_t)r * K + k], sizeof(v));
            sum += v;
        }
        memcpy(&vec[k], &sum, sizeof(sum));
    }
}

// sums[0] += the sum of log_z[0..N) and keys[0] = max(keys[0], key of its max), in one block
// of CHUNK_THREADS threads in a fixed order; add_sum false: the max only.
static __global__ void log_z_monitor_kernel(float* sum, unsigned* key, const float* log_z, int N,
                                            bool add_sum) {
    float acc = 0.0f, mx = -INFINITY;
    for (int i = threadIdx.x; i < N; i += CHUNK_THREADS) {
        acc += log_z[i];
        mx = fmaxf(mx, log_z[i]);
    }
    acc = block_sum(acc);
    mx = block_max(mx);
    if (threadIdx.x != 0) return;
    if (add_sum) *sum += acc;
    const unsigned k = monitor_key(mx);
    if (k > *key) *key = k;
}

// partials[(item * max_blocks + block) * 2 + {0, 1}] = the sums of (now - before)^2 and now^2 over
// the chunk of the item that block `block` of its blocks owns (block_chunk, fixed order).
static __global__ void update_items_kernel(float* partials, const UpdateItem* items,
                                           const float* now, const float* before, int max_blocks) {
    const UpdateItem it = items[blockIdx.y];
    if ((int)blockIdx.x >= it.blocks) return;  // whole blocks leave: no barrier is skipped
    size_t begin, end;
    block_chunk(it.n, blockIdx.x, it.blocks, &begin, &end);
    float dd = 0.0f, ww = 0.0f;
    for (size_t i = begin + threadIdx.x; i < end; i += CHUNK_THREADS) {
        const float w = now[it.at + i], d = w - before[it.at + i];
        dd += d * d;
        ww += w * w;
    }
    dd = block_sum(dd);
    ww = block_sum(ww);
    if (threadIdx.x != 0) return;
    float* out = partials + ((size_t)blockIdx.y * max_blocks + blockIdx.x) * 2;
    out[0] = dd;
    out[1] = ww;
}

// sums[1 + 2g] and sums[2 + 2g] += the partials of group g's items, in item and block order.
static __global__ void update_sums_kernel(float* sums, const float* partials,
                                          const UpdateItem* items, int count, int max_blocks) {
    for (int i = 0; i < count; i++)
        for (int b = 0; b < items[i].blocks; b++) {
            const float* p = partials + ((size_t)i * max_blocks + b) * 2;
            sums[1 + 2 * items[i].group] += p[0];
            sums[2 + 2 * items[i].group] += p[1];
        }
}

// =============================================================================================
// The model: parameters, gradients and optimizer state in the table above, activations for
// micro-batches of B x T tokens.

// The gradient groups (llmc/zero.cuh), numbered in the order the backward pass
// completes them: block l's group is L-1-l (the last block's also holds lnf, which its fused
// residual add + norm reads), the embeddings' (wte, which the lm head also writes, and wpe) is
// L, the last. Every group is one contiguous range of the layout.
inline int block_grad_group(const ParamIndex* at, int l) { return at->blocks - 1 - l; }
inline int embeddings_grad_group(const ParamIndex* at) { return at->blocks; }
inline int num_grad_groups(const ParamIndex* at) { return at->blocks + 1; }

inline int grad_group_of_tensor(const ParamIndex* at, int index) {
    if (index == at->wte || index == at->wpe || index == at->lm_head)
        return embeddings_grad_group(at);
    if (index == at->lnf_w || index == at->lnf_b) return block_grad_group(at, at->blocks - 1);
    return block_grad_group(at, block_of_tensor(at, index));
}

// The element range [begin, end) of each gradient group in the parameter layout.
inline void gpt_grad_groups(const ParamLayout* layout, size_t* begin, size_t* end) {
    for (int g = 0; g < num_grad_groups(&layout->index); g++) {
        begin[g] = layout->total;
        end[g] = 0;
    }
    for (int i = 0; i < layout->count; i++) {
        const ParamTensor* t = &layout->tensors[i];
        const int g = grad_group_of_tensor(&layout->index, i);
        begin[g] = std::min(begin[g], t->offset);
        end[g] = std::max(end[g], t->offset + round_up(t->numel, TENSOR_ALIGN));
    }
}

// Pipeline parallelism (--pp, llmc/pipeline.h): this rank's place in the pipeline and the
// executor's state (pipe_forward_backward below). Without a pipeline config.pp is 1 and
// stage_blocks L: one stage, the whole model.
struct Pipeline {
    PipeConfig config;
    int rank;  // this rank's place in the pipeline group
    const CommGroup* group;
    int stage_blocks;     // blocks of a virtual stage: L / (pp x chunks)
    PipeAction* actions;  // this rank's schedule (pipe_rank_schedule)
    int* action_tick;     // the time step each one starts in (pipe_exchange_plan)
    int action_count;
    PipeExchange* exchanges;  // this rank's, in time order
    int exchange_count;
    int ticks;            // time steps of a step
    int slots;            // activation sets: the most micro-batches in flight here
    floatX* slot_inputs;  // (slots, S, C): each one's chunk input (received, or the embeddings)
    floatX* slot_douts;   // (slots, S, C): the gradient of each one's chunk output (received, or
                          // on the last stage from the head, computed in the forward)
    floatX* slot_dinputs;  // (slots, S, C): the gradient of each one's chunk input, sent from here
    int* slot_sent;        // [slot]: the exchange that last sent its slot_dinputs (-1: none)
    floatX* tied_grad;    // the first and the last stage's ranks: the other's part of dwte
    int* slot_of;         // [micro * chunks + chunk]: the slot of a chunk input received or
                          // embedded whose backward has not run
    int* slot_free;       // a stack of the free slots
    int free_count;
    size_t slot_elems;  // S x C, aligned
    double sent_bytes;  // the activations and gradients this rank sent (--comm-stats)
    // The transfers' stream and its events (pipe_forward_backward: the ordering between the
    // streams): `computed` recorded on the compute stream before an exchange is queued;
    // exchanged[x] on the transfers' stream after exchange x; arrival[(op * micro_batches +
    // micro) * chunks + chunk]: the exchange that carries that action's input (-1: none).
    cudaStream_t stream;
    cudaEvent_t computed;
    cudaEvent_t* exchanged;
    int* arrival;
    double* due_s;  // [exchange]: when it may be queued (its time step ended, and under the
                    // cost model its transfer time passed); -1: its time step has not ended
    const floatX** sending;  // [exchange]: what it sends (the buffer of the action that ended)
    int queued;              // the exchanges of this step queued so far
    // --pp-cost-ms and --pp-cost-transfer-ms (a test's cost model): a forward action lasts
    // cost_ms (the host sleeps the rest), a backward twice as long, and an exchange that sends
    // is queued transfer_ms after the end of its time step
    int cost_ms, transfer_ms;
    // The last step's loop on this rank (--comm-stats, train_run.cuh's report_pipeline_bubble):
    // its time, the time in actions (until their stream is done) and waiting for their inputs;
    // under the cost model those waits each rounded to whole time steps (cost_ms), the most a
    // wait was off whole steps and the most an action outlasted its cost
    double loop_s, busy_s, wait_s;
    int wait_steps;
    double wait_off_s, overrun_s;
};

struct GPT {
    GPTConfig config;
    OptimizerConfig opt;
    int B, T;             // micro-batch shape the activations are sized for
    TensorParallel
        tensor_parallel;  // the tensor-parallel group (llmc/tensor_parallel.cuh; one rank: none)
    ModelShapes shape;    // this rank's part of the model
    ParamLayout layout;   // the table of this rank's part
    ParamLayout logical;  // the table of the whole model (checkpoints, initialization)
    floatX* params;  // layout.total elements (ZeRO-3: this rank's part, in master weight order)
    floatX* grads;   // layout.total elements (nullptr under ZeRO-2 and 3)
    float* master;   // fp32 master weights (bf16 build only; else nullptr)
    float* opt_state[NUM_STATE_BUFFERS];  // STATE_BUFFERS; nullptr when it covers no tensor
    MuonWorkspace muon;                   // Newton-Schulz scratch (empty without Muon tensors)
    floatX* kv_grad_sum;  // replicated kv heads (shape.kv_replicas > 1): (KVH kv_att, C), where
                          // k's or v's gradient is summed over its ranks (tp_sum_kv_grads)
    DeviceLedger memory;  // every device buffer of the model, by kind (llmc/memplan.h)
    Activations acts;
    floatX* acts_x;  // the activation buffers
    float* acts_f;
    size_t acts_x_elems, acts_f_elems;
    size_t activation_bytes;       // the two activation buffers
    size_t recompute_saved_bytes;  // what the recompute policy saves of them
    int* inputs;                   // (B,T) device tokens of the current micro-batch
    int* targets;                  // (B,T)
    TokenBuckets buckets;          // inputs grouped by token, for the wte gradient
    float* host_losses;            // (B,T)
    float* host_z_losses;          // (B,T)
    int opt_step;             // optimizer steps taken (AdamW's bias correction, rounding seeds)
    uint64_t seed;            // stochastic rounding seeds derive from it
    bool poison_activations;  // tests: fill activations with NaN before every forward pass
    MatmulContext mm;
    Fp8State fp8;  // --fp8: the FP8 layers, their cached weights and scales (recipe FP8_OFF: none)
    cudaStream_t stream;
    DataParallel dp;  // gradient reduction and the shard plan (llmc/zero.cuh)
    Monitors mon;     // the step's monitors (above)
    Pipeline pipe;    // pipeline parallelism (one stage: none)
    RopeFreqs rope;   // Llama: RoPE's frequencies (rope_freqs)
    ContextParallel cp;  // context parallelism (llmc/context_parallel.cuh; one rank: none)
    int* positions;      // (T) device: the sequence position of each row under --cp (else nullptr)
};

// The pipeline rank that holds tensor `index` of the table (the tied wte: the first stage's; an
// untied lm head: the last stage's).
inline int pipe_holder(const GPT* m, int index) {
    const ParamIndex* at = &m->layout.index;
    const PipeConfig* c = &m->pipe.config;
    const int l = block_of_tensor(at, index), last = pipe_stage_count(c) - 1;
    if (l >= 0) return pipe_rank_of(c, l / m->pipe.stage_blocks);
    const bool head = index == at->lnf_w || index == at->lnf_b ||
                      (index == at->lm_head && at->lm_head != at->wte);
    return head ? pipe_rank_of(c, last) : 0;
}

// The parameters the passes read: in the parameter buffer, or under ZeRO-3 in the gather
// buffer of the tensor's group (which the passes' hooks fill first).
inline const floatX* weight(const GPT* m, int index) {
    if (index < 0) return nullptr;  // a tensor this block kind has none of (Llama's biases)
    return dp_weights(&m->dp, m->params, grad_group_of_tensor(&m->layout.index, index),
                      m->layout.tensors[index].offset);
}
inline const floatX* block_weight(const GPT* m, int l, int which) {
    return weight(m, block_tensor(&m->layout.index, l, which));
}

// Where the backward pass writes a tensor's gradient (llmc/zero.cuh): in the gradient buffer,
// or at ZeRO-2 and 3 in the buffer of the tensor's bucket.
inline floatX* param_grad(const GPT* m, int index) {
    if (index < 0) return nullptr;
    return dp_grad(&m->dp, m->grads, grad_group_of_tensor(&m->layout.index, index),
                   m->layout.tensors[index].offset);
}
// The FP8 layer of block l's linear layer `which` (QKV_W, ATTPROJ_W, FC_W or FCPROJ_W), numbered
// as gpt_build adds them (4 per block, then the lm head), or FP8_NONE without --fp8.
// The linear layers' weights in a block, in the order of their FP8 layers; Llama's first and
// third are [q | k | v] and [gate | up], each from the first of its adjacent tensors.
static const int FP8_BLOCK_WEIGHTS[4] = {QKV_W, ATTPROJ_W, FC_W, FCPROJ_W};
static const int LLAMA_FP8_BLOCK_WEIGHTS[4] = {Q_W, ATTPROJ_W, GATE_W, FCPROJ_W};
// The place among a block's FP8 layers of the layer whose weight holds tensor `which` (Llama's
// q, k, v: the first; gate, up: the third), or -1.
inline int fp8_weight_place(int which) {
    if (which == Q_W || which == K_W || which == V_W) return 0;
    if (which == GATE_W || which == UP_W) return 2;
    for (int j = 0; j < 4; j++)
        if (FP8_BLOCK_WEIGHTS[j] == which) return j;
    return -1;
}
inline Fp8Use fp8_use(GPT* m, int l, int which) {
    if (m->config.fp8.recipe == FP8_OFF) return FP8_NONE;
    return Fp8Use{&m->fp8, 4 * l + fp8_weight_place(which)};
}
// Whether ZeRO-3 gathers tensor `index` in FP8 (--fp8-allgather: the blocks' FP8 weights).
inline bool fp8_gathered(const GPTConfig* c, const ParamIndex* at, int index) {
    const int l = block_of_tensor(at, index);
    return c->fp8.allgather && c->fp8.recipe != FP8_OFF && l >= 0 &&
           fp8_weight_place(which_of_tensor(at, l, index)) >= 0;
}
inline Fp8Use fp8_lm_head(GPT* m) {
    if (m->config.fp8.recipe == FP8_OFF || !m->config.fp8.lm_head) return FP8_NONE;
    return Fp8Use{&m->fp8, 4 * m->config.layers};
}

inline floatX* block_grad(const GPT* m, int l, int which) {
    return param_grad(m, block_tensor(&m->layout.index, l, which));
}

// Whether some tensor of the table is updated by optimizer `kind`.
inline bool optimizer_in_use(const ParamLayout* layout, int kind) {
    for (int i = 0; i < layout->count; i++)
        if (layout->tensors[i].optimizer == kind) return true;
    return false;
}

// Elements of state buffer `which` (STATE_BUFFERS): none when its optimizer updates no tensor;
// else an element-wise optimizer's span the element-wise state this rank owns, a whole-matrix
// optimizer's its matrices.
inline size_t state_elems(const GPT* m, int which) {
    const int kind = STATE_BUFFERS[which].optimizer;
    if (!optimizer_in_use(&m->layout, kind)) return 0;
    return OPTIMIZERS[kind].whole_matrices ? m->dp.matrix_state : m->dp.elem_state;
}

// The master weights of an owned range: the element-wise ones first, then the matrices'.
inline size_t master_index(const GPT* m, const OwnedRange* o) {
    return (o->matrix ? m->dp.elem_state : 0) + o->state;
}

// The parameters of an owned range in m->params: at its layout offset, or under ZeRO-3 (where
// m->params is the owned part) where its master weights are.
inline size_t param_index(const GPT* m, const OwnedRange* o) {
    return m->dp.stage == 3 ? master_index(m, o) : o->offset;
}

// Host copies of the state in layout order (a tensor's part at its offset in the parameter
// layout; the ranges of other ranks and of the other optimizer left as they are), for
// initialization, tests and checkpoints: which is a StateBuffer or STATE_MASTER.
constexpr int STATE_MASTER = NUM_STATE_BUFFERS;

inline float* state_buffer(const GPT* m, int which) {
    return which == STATE_MASTER ? m->master : m->opt_state[which];
}

// Whether state `which` has a part for range r, and where in its buffer.
inline bool state_index(const GPT* m, int which, const OwnedRange* r, size_t* at) {
    if (which == STATE_MASTER) *at = master_index(m, r);
    else if (m->layout.tensors[r->tensor].optimizer != STATE_BUFFERS[which].optimizer) return false;
    else *at = r->state;
    return true;
}

inline void gpt_state_download(const GPT* m, int which, float* layout_values) {
    float* dev = state_buffer(m, which);
    if (dev == nullptr) return;
    for (int i = 0; i < m->dp.owned_count; i++) {
        size_t at;
        const OwnedRange* r = &m->dp.owned[i];
        if (state_index(m, which, r, &at))
            CUDA_CHECK(cudaMemcpy(layout_values + r->offset, dev + at, r->n * sizeof(float),
                                  cudaMemcpyDeviceToHost));
    }
}

inline void gpt_state_upload(GPT* m, int which, const float* layout_values) {
    float* dev = state_buffer(m, which);
    if (dev == nullptr) return;
    for (int i = 0; i < m->dp.owned_count; i++) {
        size_t at;
        const OwnedRange* r = &m->dp.owned[i];
        if (state_index(m, which, r, &at))
            CUDA_CHECK(cudaMemcpy(dev + at, layout_values + r->offset, r->n * sizeof(float),
                                  cudaMemcpyHostToDevice));
    }
}

// The parameters from host values in layout order (layout.total): all of them, or under
// ZeRO-3 the ranges this rank owns.
inline void gpt_params_upload(GPT* m, const floatX* layout_values) {
    dp_params_stale(&m->dp);
    m->fp8.params_version++;  // the FP8 weights are quantized again
    if (m->dp.stage != 3) {
        CUDA_CHECK(cudaMemcpy(m->params, layout_values, m->layout.total * sizeof(floatX),
                              cudaMemcpyHostToDevice));
        return;
    }
    for (int i = 0; i < m->dp.owned_count; i++) {
        const OwnedRange* r = &m->dp.owned[i];
        CUDA_CHECK(cudaMemcpy(m->params + param_index(m, r), layout_values + r->offset,
                              r->n * sizeof(floatX), cudaMemcpyHostToDevice));
    }
}

// Every parameter into host memory in layout order (layout.total, zero in the alignment gaps),
// on every rank: under ZeRO-3 each unit is gathered first (every rank of the group calls it).
inline void gpt_params_download(GPT* m, floatX* layout_values) {
    if (m->dp.stage != 3) {
        CUDA_CHECK(cudaMemcpy(layout_values, m->params, m->layout.total * sizeof(floatX),
                              cudaMemcpyDeviceToHost));
        return;
    }
    // each bucket gathered: into its gather buffer, or where that holds only its bf16 tensors
    // (--fp8-allgather), whole into a buffer of its own (outside the plan, freed after)
    memset(layout_values, 0, m->layout.total * sizeof(floatX));
    floatX* whole = nullptr;
    for (int b = 0; b < m->dp.count; b++) {
        const int group = m->dp.buckets[b].first_group;  // stage 3: a bucket per group
        const size_t begin = m->dp.buckets[b].begin;
        if (dp_compacted(&m->dp, b)) {
            if (whole == nullptr)
                CUDA_CHECK(cudaMalloc(&whole, dp_largest_bucket(&m->dp) * sizeof(floatX)));
            dp_gather_whole(&m->dp, b, m->params, whole, m->stream);
        } else {
            dp_params_ready(&m->dp, group, m->params, m->stream);
        }
        dp_sync(&m->dp, m->stream, "the gathers of the parameters (NCCL)");
        for (int i = 0; i < m->layout.count; i++) {
            const ParamTensor* t = &m->layout.tensors[i];
            if (grad_group_of_tensor(&m->layout.index, i) != group) continue;
            const floatX* src =
                dp_compacted(&m->dp, b) ? whole + (t->offset - begin) : weight(m, i);
            CUDA_CHECK(cudaMemcpy(layout_values + t->offset, src, t->numel * sizeof(floatX),
                                  cudaMemcpyDeviceToHost));
        }
    }
    if (whole) CUDA_CHECK(cudaFree(whole));
}

// The delayed scaling state (--fp8 delayed, llmc/fp8_linear.cuh) as host values, the same on
// every rank: each tensor's amax history (count x length, tensor by tensor, in ring-slot order,
// the next step's slot m->fp8.delayed.position) and its scale (count Fp8TensorScale).
inline void gpt_fp8_delayed_download(const GPT* m, float* history, Fp8TensorScale* scales) {
    const Fp8DelayedScaling* d = &m->fp8.delayed;
    CUDA_CHECK(cudaMemcpy(history, d->history, sizeof(float) * d->count * d->length,
                          cudaMemcpyDeviceToHost));
    CUDA_CHECK(
        cudaMemcpy(scales, d->scales, sizeof(Fp8TensorScale) * d->count, cudaMemcpyDeviceToHost));
}
inline void gpt_fp8_delayed_upload(GPT* m, const float* history, const Fp8TensorScale* scales,
                                   int position) {
    Fp8DelayedScaling* d = &m->fp8.delayed;
    CUDA_CHECK(cudaMemcpy(d->history, history, sizeof(float) * d->count * d->length,
                          cudaMemcpyHostToDevice));
    CUDA_CHECK(
        cudaMemcpy(d->scales, scales, sizeof(Fp8TensorScale) * d->count, cudaMemcpyHostToDevice));
    d->position = position;
}

// The grid of a single process (tests, sampling): every degree and group of one, stage 0.
inline ParallelDims single_process() {
    ParallelDims dims = parallel_dims(1, 1, 0, false, 25.0);
    dims.tp_group = dims.cp_group = dims.pp_group = dims.dp_group = dims.shard_group =
        comm_group_of_one();
    return dims;
}

// The message of the first reason the FP8 layers of config c cannot run on this rank's part
// (shapes s) with micro-batches of N tokens, or nullptr.
inline const char* gpt_fp8_error(const GPTConfig* c, const ModelShapes* s, int N, char* msg,
                                 size_t len) {
    const int r = c->fp8.recipe;
    if (r == FP8_OFF) return nullptr;
    if (FLOATX_IS_FP32) {
        snprintf(msg, len, "--fp8 needs the bf16 build (this is the fp32 build, -DENABLE_FP32)");
        return msg;
    }
    const bool cut = s->tp > 1;  // every block has the same shapes
    // the cut outputs: [q | k | v] (each part a multiple of k's width: q's is heads / kv_heads
    // of it) and Llama's [gate | up]
    const int qkv_parts = s->qkv / s->kv_att, fc_parts = s->fc / s->mlp;
    const char* err =
        fp8_layer_error(r, "attn.qkv", N, s->C, s->qkv, false, qkv_parts, cut, msg, len);
    if (!err) err = fp8_layer_error(r, "attn.proj", N, s->att, s->C, cut, 1, false, msg, len);
    if (!err) err = fp8_layer_error(r, "mlp.fc", N, s->C, s->fc, false, fc_parts, cut, msg, len);
    if (!err) err = fp8_layer_error(r, "mlp.proj", N, s->mlp, s->C, cut, 1, false, msg, len);
    if (!err && c->fp8.lm_head)
        err = fp8_layer_error(r, "the lm head", N, s->C, s->vocab, false, 1, cut, msg, len);
    if (!err) {
        int major = 0, minor = 0;
        device_compute_capability(&major, &minor);
        err = fp8_device_error(r, major, minor, msg, len);
    }
    return err;
}

// --fp8-allgather under ZeRO-3: the blocks' four FP8 weights are gathered in FP8 into their
// caches (llmc/zero_fp8.cuh), each with its per-tensor scale (tensor: the cache's, set by the
// gather; delayed: the history's). The lm head's wte stays a bf16 gather: the embedding lookup
// reads it in bf16 (its FP8 copy is quantized from the gathered wte, as without the flag).
inline void gpt_fp8_gather_init(GPT* m, DeviceLedger* ledger) {
    const ParamIndex* at = &m->layout.index;
    const bool llama = m->config.llama.arch == ARCH_LLAMA;
    const int* firsts = llama ? LLAMA_FP8_BLOCK_WEIGHTS : FP8_BLOCK_WEIGHTS;
    std::vector<ZeroFp8Target> targets(m->layout.count, ZeroFp8Target{});
    for (int l = 0; l < m->config.layers; l++)
        for (int slot = 0; slot < at->per_block; slot++) {  // (Llama: q, k, v one weight)
            const int which = at->which[slot], place = fp8_weight_place(which);
            if (place < 0) continue;
            const int number = fp8_use(m, l, FP8_BLOCK_WEIGHTS[place]).layer;
            Fp8Layer* layer = &m->fp8.layers[number];
            const Fp8Weight* cache = fp8_weight(&m->fp8, layer);
            Fp8TensorScale* scale = fp8_tensor_scale(&m->fp8, layer, FP8_W);
            const size_t offset = m->layout.tensors[block_tensor(at, l, firsts[place])].offset;
            targets[block_tensor(at, l, which)] = {cache->q, cache->qt, layer->out, layer->in,
                                                   scale,    offset,    number};
            layer->gathered = true;
        }
    dp_fp8_gather_init(&m->dp, targets.data(), m->params, m->config.fp8.recipe == FP8_TENSOR,
                       ledger);
}

// The FP8 layers (llmc/fp8_linear.cuh) of a model with --fp8: each block's four linear layers,
// then the lm head (--fp8-lm-head); under tensor parallelism the column-parallel layers' outputs
// and the row-parallel layers' inputs are cut.
inline void gpt_fp8_build(GPT* m, int N, DeviceLedger* ledger) {
    const GPTConfig* c = &m->config;
    if (c->fp8.recipe == FP8_OFF) return;
    const ModelShapes* s = &m->shape;
    char msg[512];
    if (const char* err = gpt_fp8_error(c, s, N, msg, sizeof(msg))) fatal("%s", err);
    const bool cut = s->tp > 1;
    // Each layer caches its FP8 weight; under ZeRO-3, where a rank holds only two blocks'
    // parameters at a time, the blocks share two sets of caches as they share the two gather
    // buffers (llmc/zero.cuh's dp_gather_slot: consecutive blocks in different ones). Under
    // pipeline parallelism every rank numbers every layer (delayed scaling's amaxes are reduced
    // over the pipeline group too, fp8_end_step), but caches the blocks it holds only: the h-th
    // of them in caches 4h..4h+3, the others' layers (never run here) share the first's.
    const ParamIndex* at = &m->layout.index;
    const bool sharded = m->dp.stage == 3;
    const PipeConfig* pipe = m->pipe.config.pp > 1 ? &m->pipe.config : nullptr;
    fp8_init(&m->fp8, &c->fp8, m->tensor_parallel.group, 4 * c->layers + 1);
    int held = 0;  // the blocks this rank holds so far
    for (int l = 0; l < c->layers; l++) {
        const int slot = dp_gather_slot(&m->dp, m->dp.bucket_of[block_grad_group(at, l)]);
        const bool holds = pipe_holds_block(pipe, m->pipe.rank, l);
        const int first = 4 * (sharded ? slot : holds ? held++ : 0);
        fp8_add_layer(&m->fp8, s->C, s->qkv, Fp8Cut{false, cut}, first);
        fp8_add_layer(&m->fp8, s->att, s->C, Fp8Cut{cut, false}, first + 1);
        fp8_add_layer(&m->fp8, s->C, s->fc, Fp8Cut{false, cut}, first + 2);
        fp8_add_layer(&m->fp8, s->mlp, s->C, Fp8Cut{cut, false}, first + 3);
    }
    if (c->fp8.lm_head)
        fp8_add_layer(&m->fp8, s->C, s->vocab, Fp8Cut{false, cut},
                      4 * (sharded ? std::min(c->layers, 2) : std::max(held, 1)));
    fp8_take_buffers(&m->fp8, N, ledger);
    if (c->fp8.allgather && sharded) gpt_fp8_gather_init(m, ledger);
}

// The entry of tensor `index` among the per-layer gradient norms (--log-layer-norms): block l's
// tensors are entry l, the embeddings' L, the final norm's L + 1.
inline int layer_norm_entry(const ParamIndex* at, int index) {
    if (index == at->wte || index == at->wpe || index == at->lm_head) return at->blocks;
    if (index == at->lnf_w || index == at->lnf_b) return at->blocks + 1;
    return block_of_tensor(at, index);
}

inline int update_group_of_tensor(const ParamIndex* at, int index) {
    if (index == at->wte || index == at->wpe || index == at->lm_head) return UPDATE_EMBEDDINGS;
    const int l = block_of_tensor(at, index);
    if (l < 0) return UPDATE_NORMS_BIASES;  // lnf
    const int which = which_of_tensor(at, l, index);
    if (which == QKV_W || which == Q_W || which == K_W || which == V_W || which == ATTPROJ_W)
        return UPDATE_ATTENTION;
    if (which == FC_W || which == GATE_W || which == UP_W || which == FCPROJ_W) return UPDATE_MLP;
    return UPDATE_NORMS_BIASES;
}

// The fp32 weights the optimizers update on this rank (the master weights in the bf16 build,
// the parameters in the fp32 one), their element count in *elems, and where an owned range's lie.
inline float* weights_of_record(const GPT* m, size_t* elems) {
    if (!FLOATX_IS_FP32) {
        *elems = m->dp.elem_state + m->dp.matrix_state;
        return m->master;
    }
    *elems = dp_param_elems(&m->dp, m->layout.total);
    return reinterpret_cast<float*>(m->params);
}
inline size_t record_index(const GPT* m, const OwnedRange* r) {
    return FLOATX_IS_FP32 ? param_index(m, r) : master_index(m, r);
}

// The monitors' buffers (after the parameter, master and state buffers and the shard plan):
// the device vector and its pinned copy; with --log-layer-norms the host sums; with
// --log-update-ratio the copy of the weights of record (MEM_MONITORS) and the update items,
// this rank's owned ranges that it counts.
inline void gpt_monitors_build(GPT* m, MonitorConfig config, DeviceLedger* ledger) {
    Monitors* mon = &m->mon;
    const int L = m->config.layers;
    mon->config = config;
    const int K = monitor_words(L);
    const int ranks = std::max({m->dp.group->size, m->tensor_parallel.size, m->pipe.group->size});
    mon->vec = device_take_n<unsigned>(ledger, MEM_OTHER, K);
    mon->gathered = device_take_n<unsigned>(ledger, MEM_OTHER, ranks > 1 ? (size_t)ranks * K : 0);
    if (!ledger->plan_only) {
        mon->keys = mon->vec;
        mon->sums = reinterpret_cast<float*>(mon->vec + L + 1);
        CUDA_CHECK(cudaMallocHost(&mon->host, K * sizeof(unsigned)));
        mon->host_keys = mon->host;
        mon->host_sums = reinterpret_cast<float*>(mon->host + L + 1);
        CUDA_CHECK(cudaMemset(mon->vec, 0, K * sizeof(unsigned)));
    }
    if (config.layer_norms) mon->layer_sq = (float*)MALLOC_CHECK((L + 2) * sizeof(float));
    if (!config.update_ratio) return;
    size_t elems;
    weights_of_record(m, &elems);
    mon->before = device_take_n<float>(ledger, MEM_MONITORS, elems);
    std::vector<UpdateItem> items;
    const bool counts = m->dp.stage > 0 || m->dp.me == 0;  // ZeRO-0: every rank owns everything
    for (int i = 0; counts && i < m->dp.owned_count; i++) {
        const OwnedRange* r = &m->dp.owned[i];
        const ParamTensor* t = &m->layout.tensors[r->tensor];
        if (!tp_first_copy(&t->tp_shape, m->tensor_parallel.rank)) continue;
        if (pipe_holder(m, r->tensor) != m->pipe.rank) continue;  // the tied wte: counted once
        const int blocks = norm_blocks_for(r->n);
        items.push_back(UpdateItem{record_index(m, r), r->n,
                                   update_group_of_tensor(&m->layout.index, r->tensor), blocks});
        mon->max_blocks = std::max(mon->max_blocks, blocks);
    }
    mon->item_count = (int)items.size();
    mon->items = device_take_copy(ledger, MEM_MONITORS, items);
    mon->partials = device_take_n<float>(ledger, MEM_MONITORS, items.size() * mon->max_blocks * 2);
}

inline void gpt_monitors_free(Monitors* mon) {
    for (void* p : {(void*)mon->vec, (void*)mon->gathered, (void*)mon->before, (void*)mon->items,
                    (void*)mon->partials})
        if (p) CUDA_CHECK(cudaFree(p));
    if (mon->host) CUDA_CHECK(cudaFreeHost(mon->host));
    free(mon->layer_sq);
}

// The exchange that carries the input of this rank's action a (Pipeline::arrival).
inline int* pipe_arrival_of(Pipeline* p, PipeAction a) {
    return &p->arrival[(a.op * p->config.micro_batches + a.micro) * p->config.chunks + a.chunk];
}

// Pipeline parallelism: this rank's plan (llmc/pipeline.h's pipe_exchange_plan: its schedule in
// time steps, its exchanges, the activation sets it needs) and those activation sets, each a
// chunk's blocks (laid out by layout_activations in acts.stored), its input and its output's
// gradient.
inline void pipe_build(GPT* m, int N, DeviceLedger* ledger) {
    Pipeline* p = &m->pipe;
    const PipeConfig* c = &p->config;
    const PipeExchangePlan plan = pipe_exchange_plan(c, p->rank, PIPE_PLAN_COSTS);
    if (!plan.error.empty()) {
        fprintf(stderr, "%s\n", plan.error.c_str());
        exit(EXIT_FAILURE);
    }
    p->ticks = plan.ticks;
    p->slots = plan.slots;
    p->action_count = (int)plan.actions.size();
    p->actions = (PipeAction*)MALLOC_CHECK(plan.actions.size() * sizeof(PipeAction));
    p->action_tick = (int*)MALLOC_CHECK(plan.actions.size() * sizeof(int));
    std::copy(plan.actions.begin(), plan.actions.end(), p->actions);
    std::copy(plan.action_tick.begin(), plan.action_tick.end(), p->action_tick);
    p->exchange_count = (int)plan.exchanges.size();
    p->exchanges = (PipeExchange*)MALLOC_CHECK((plan.exchanges.size() + 1) * sizeof(PipeExchange));
    std::copy(plan.exchanges.begin(), plan.exchanges.end(), p->exchanges);
    CUDA_CHECK(cudaStreamCreateWithFlags(&p->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&p->computed, cudaEventDisableTiming));
    p->exchanged = (cudaEvent_t*)MALLOC_CHECK((p->exchange_count + 1) * sizeof(cudaEvent_t));
    for (int x = 0; x < p->exchange_count; x++)
        CUDA_CHECK(cudaEventCreateWithFlags(&p->exchanged[x], cudaEventDisableTiming));
    p->due_s = (double*)MALLOC_CHECK((p->exchange_count + 1) * sizeof(double));
    p->sending = (const floatX**)MALLOC_CHECK((p->exchange_count + 1) * sizeof(floatX*));
    p->arrival = (int*)MALLOC_CHECK(2 * c->micro_batches * c->chunks * sizeof(int));
    for (int k = 0; k < 2 * c->micro_batches * c->chunks; k++) p->arrival[k] = -1;
    for (int x = 0; x < p->exchange_count; x++)
        for (int k = 0; k < p->exchanges[x].recv_count; k++)
            *pipe_arrival_of(p, p->exchanges[x].recv[k]) = x;
    p->slot_elems =
        round_up((size_t)tp_shard_rows(&m->tensor_parallel, N) * m->shape.C, TENSOR_ALIGN);
    p->slot_inputs = device_take_n<floatX>(ledger, MEM_ACTIVATIONS, p->slots * p->slot_elems);
    p->slot_douts = device_take_n<floatX>(ledger, MEM_ACTIVATIONS, p->slots * p->slot_elems);
    p->slot_dinputs = device_take_n<floatX>(ledger, MEM_ACTIVATIONS, p->slots * p->slot_elems);
    p->slot_sent = (int*)MALLOC_CHECK(p->slots * sizeof(int));
    const ParamTensor* wte = &m->layout.tensors[m->layout.index.wte];
    if (!m->config.llama.untied_head && (p->rank == 0 || m->acts.head))  // (both: the tied wte)
        p->tied_grad = device_take_n<floatX>(ledger, MEM_GRADS, wte->numel);
    p->slot_of = (int*)MALLOC_CHECK(c->micro_batches * c->chunks * sizeof(int));
    p->slot_free = (int*)MALLOC_CHECK(p->slots * sizeof(int));
    m->acts.stored_count = p->slots * p->stage_blocks;
    m->acts.stored =
        (LayerActivations*)MALLOC_CHECK(m->acts.stored_count * sizeof(LayerActivations));
}

inline void pipe_free(GPT* m) {
    Pipeline* p = &m->pipe;
    for (floatX* buf : {p->slot_inputs, p->slot_douts, p->slot_dinputs, p->tied_grad})
        if (buf) CUDA_CHECK(cudaFree(buf));
    free(p->actions);
    free(p->action_tick);
    free(p->exchanges);
    CUDA_CHECK(cudaStreamDestroy(p->stream));
    CUDA_CHECK(cudaEventDestroy(p->computed));
    for (int x = 0; x < p->exchange_count; x++) CUDA_CHECK(cudaEventDestroy(p->exchanged[x]));
    free(p->exchanged);
    free(p->due_s);
    free(p->sending);
    free(p->arrival);
    free(p->slot_sent);
    free(p->slot_of);
    free(p->slot_free);
    free(m->acts.stored);
}

// Builds the model on this rank of `dims`'s grid (its groups made: llmc/comm.cuh's
// comm_grid_groups), its buffers taken from m->memory (llmc/memplan.h); plan_only: none is
// allocated (every device pointer stays nullptr), the ledger says what would be: the plan.
inline void gpt_build(GPT* m, const GPTConfig* config, const OptimizerConfig* opt, int B, int T,
                      uint64_t seed, ParallelDims dims = single_process(),
                      int recompute = RECOMPUTE_NONE, bool plan_only = false,
                      MonitorConfig monitors = {}) {
    memset(m, 0, sizeof(*m));
    DeviceLedger* ledger = &m->memory;
    ledger->plan_only = plan_only;
    m->config = *config;
    m->opt = *opt;
    m->B = B;
    m->T = T;
    m->seed = seed;
    m->stream = 0;
    m->tensor_parallel = tp_of(dims.tp_group, dims.sequence_parallel);
    m->shape = model_shapes(config, m->tensor_parallel.size, m->tensor_parallel.rank);
    m->rope = rope_freqs(&config->llama, m->shape.HS);
    Pipeline* pipe = &m->pipe;
    pipe->config = PipeConfig{dims.pp_schedule, dims.pp, dims.pp_virtual, dims.pp_micro_batches,
                              config->layers};
    pipe->rank = dims.pp_group->rank;
    pipe->group = dims.pp_group;
    pipe->stage_blocks = config->layers / pipe_stage_count(&pipe->config);
    const bool pipelined = dims.pp > 1;
    build_param_layout(&m->layout, config, opt, &m->shape, pipelined ? &pipe->config : nullptr,
                       pipe->rank);
    const ModelShapes whole = model_shapes(config, 1, 0);
    build_param_layout(&m->logical, config, opt, &whole);
    const size_t P = m->layout.total;
    // ZeRO-2 and 3 keep no whole gradient: the backward pass writes into the buckets' buffers
    if (dims.zero < 2 || dims.shard_group->size == 1)
        m->grads = device_take_n<floatX>(ledger, MEM_GRADS, P);
    // The shard plan over the table: each tensor, element-wise or in whole matrices (as its
    // optimizer's row says), and the backward pass's gradient groups.
    // Under tensor parallelism the gradient norm counts a replicated tensor on the group's
    // first rank only (every rank holds the same one), a replicated kv head on the first of its
    // ranks; under pipeline parallelism the tied wte on the first stage's rank only. A tensor
    // this rank does not hold has no elements.
    std::vector<ShardTensor> shard_tensors(m->layout.count);
    for (int i = 0; i < m->layout.count; i++) {
        const ParamTensor* t = &m->layout.tensors[i];
        const bool in_norm = tp_first_copy(&t->tp_shape, m->tensor_parallel.rank) &&
                             (i != m->layout.index.wte || pipe->rank == 0);
        const int matrices = OPTIMIZERS[t->optimizer].whole_matrices && t->held ? t->matrices : 0;
        const bool fp8 = fp8_gathered(config, &m->layout.index, i);
        const int entry = layer_norm_entry(&m->layout.index, i);
        shard_tensors[i] =
            ShardTensor{t->offset, t->numel, matrices, t->rows, t->cols, in_norm, fp8, entry};
    }
    const int groups = num_grad_groups(&m->layout.index);
    std::vector<size_t> group_begin(groups), group_end(groups);
    gpt_grad_groups(&m->layout, group_begin.data(), group_end.data());
    // (a pipeline at ZeRO-2 and 3: a bucket per group, llmc/zero.cuh's dp_pipeline_begin)
    const double bucket_mb = pipelined && dims.zero >= 2 ? 0.0 : dims.bucket_mb;
    dp_init(&m->dp, dims.shard_group, dims.zero, m->grads, group_begin.data(), group_end.data(),
            groups, shard_tensors.data(), m->layout.count, bucket_mb, ledger);
    m->params = device_take_n<floatX>(ledger, MEM_PARAMS, dp_param_elems(&m->dp, P));
    if (!FLOATX_IS_FP32)
        m->master = device_take_n<float>(ledger, MEM_MASTER, m->dp.elem_state + m->dp.matrix_state);
    for (int i = 0; i < NUM_STATE_BUFFERS; i++)
        m->opt_state[i] = device_take_n<float>(ledger, MEM_OPTIMIZER, state_elems(m, i));
    // Newton-Schulz scratch for the largest Muon matrix, (m, n) with m <= n: a whole
    // (logical) matrix, also under tensor parallelism, or the tp ranks' parts of one gathered
    // (more when kv heads are replicated)
    size_t matrix_elems = 0, gram_elems = 0;
    for (int i = 0; i < m->layout.count; i++) {
        const ParamTensor* t = &m->layout.tensors[i];
        if (t->optimizer != OPT_MUON || !t->held) continue;
        const size_t rows = t->tp_shape.rows / t->matrices, cols = t->tp_shape.cols;
        const size_t gathered = t->numel / t->matrices * m->tensor_parallel.size;
        matrix_elems = std::max(matrix_elems, std::max(rows * cols, gathered));
        gram_elems = std::max(gram_elems, std::min(rows, cols) * std::min(rows, cols));
    }
    muon_workspace_init(&m->muon, matrix_elems, gram_elems, ledger);
    if (m->shape.kv_replicas > 1)
        m->kv_grad_sum = device_take_n<floatX>(
            ledger, MEM_GRADS, (size_t)config->llama.kv_heads * m->shape.kv_att * m->shape.C);
    gpt_monitors_build(m, monitors, ledger);

    // the activations: of the whole model, or under pipeline parallelism of one chunk per
    // micro-batch in flight (pipe_build)
    m->acts.layers = (LayerActivations*)MALLOC_CHECK(config->layers * sizeof(LayerActivations));
    memset(m->acts.layers, 0, config->layers * sizeof(LayerActivations));
    m->acts.stored = m->acts.layers;
    m->acts.stored_count = config->layers;
    m->acts.head = pipe_holds_head(pipelined ? &pipe->config : nullptr, pipe->rank);
    if (pipelined) pipe_build(m, B * T, ledger);
    m->acts.sequence_parallel = m->tensor_parallel.sequence;
    m->acts.recompute = RECOMPUTE_NONE;  // first the sizes without recompute, for the report
    layout_activations(&m->acts, config, &m->shape, B, T, nullptr, nullptr, &m->acts_x_elems,
                       &m->acts_f_elems);
    const size_t kept_all = m->acts_x_elems * sizeof(floatX) + m->acts_f_elems * sizeof(float);
    m->acts.recompute = recompute;
    layout_activations(&m->acts, config, &m->shape, B, T, nullptr, nullptr, &m->acts_x_elems,
                       &m->acts_f_elems);
    m->activation_bytes = m->acts_x_elems * sizeof(floatX) + m->acts_f_elems * sizeof(float);
    m->recompute_saved_bytes = kept_all - m->activation_bytes;
    m->acts_x = device_take_n<floatX>(ledger, MEM_ACTIVATIONS, m->acts_x_elems);
    m->acts_f = device_take_n<float>(ledger, MEM_ACTIVATIONS, m->acts_f_elems);
    layout_activations(&m->acts, config, &m->shape, B, T, m->acts_x, m->acts_f, &m->acts_x_elems,
                       &m->acts_f_elems);

    cp_build(&m->cp, dims.cp_group, B, T, m->shape.kv_att, ledger);
    if (m->cp.size > 1) {
        std::vector<int> positions(T);
        for (int t = 0; t < T; t++) positions[t] = cp_position(t, T, m->cp.size, m->cp.rank);
        m->positions = device_take_copy(ledger, MEM_OTHER, positions);
    }
    const int N = B * T;
    m->inputs = device_take_n<int>(ledger, MEM_OTHER, N);
    m->targets = device_take_n<int>(ledger, MEM_OTHER, N);
    m->buckets.token = device_take_n<int>(ledger, MEM_OTHER, N);
    m->buckets.start = device_take_n<int>(ledger, MEM_OTHER, N + 1);
    m->buckets.pos = device_take_n<int>(ledger, MEM_OTHER, N);
    m->buckets.host = (int*)MALLOC_CHECK((3 * (size_t)N + 1) * sizeof(int));
    m->host_losses = (float*)MALLOC_CHECK(N * sizeof(float));
    m->host_z_losses = (float*)MALLOC_CHECK(N * sizeof(float));
    matmul_init(&m->mm, m->stream, ledger);
    gpt_fp8_build(m, N, ledger);
}

inline void gpt_free(GPT* m) {
    if (m->config.fp8.recipe != FP8_OFF) fp8_free(&m->fp8);
    matmul_free(&m->mm);
    dp_free(&m->dp);
    CUDA_CHECK(cudaFree(m->params));
    if (m->grads) CUDA_CHECK(cudaFree(m->grads));
    if (m->master) CUDA_CHECK(cudaFree(m->master));
    for (int i = 0; i < NUM_STATE_BUFFERS; i++)
        if (m->opt_state[i]) CUDA_CHECK(cudaFree(m->opt_state[i]));
    muon_workspace_free(&m->muon);
    if (m->kv_grad_sum) CUDA_CHECK(cudaFree(m->kv_grad_sum));
    CUDA_CHECK(cudaFree(m->acts_x));
    CUDA_CHECK(cudaFree(m->acts_f));
    cp_free(&m->cp);
    if (m->positions) CUDA_CHECK(cudaFree(m->positions));
    CUDA_CHECK(cudaFree(m->inputs));
    CUDA_CHECK(cudaFree(m->targets));
    CUDA_CHECK(cudaFree(m->buckets.token));
    CUDA_CHECK(cudaFree(m->buckets.start));
    CUDA_CHECK(cudaFree(m->buckets.pos));
    free(m->buckets.host);
    free(m->host_losses);
    free(m->host_z_losses);
    gpt_monitors_free(&m->mon);
    free(m->acts.layers);
    if (m->acts.stored != m->acts.layers) pipe_free(m);
    free(m->layout.tensors);
    free(m->logical.tensors);
}

// The stochastic rounding seed of update opt_step (1, 2, ...) of a model built with seed.
inline uint32_t update_seed(uint64_t seed, int opt_step) {
    return hash_u32((uint32_t)seed ^
                    hash_u32((uint32_t)(seed >> 32) ^ hash_u32((uint32_t)opt_step)));
}

// Sets every parameter from fp32 host values in layout order (values: layout.total floats,
// zero in the alignment gaps). The master weights get the exact values; the floatX copy is
// rounded as they would be stored after `updates` updates: none (initialization, pretrained
// weights) rounds to nearest, update k stochastically with its seed (test_gpt: the teacher-forced
// step from the dump's parameters). The optimizer state starts at zero.
inline void gpt_set_params(GPT* m, const float* values, int updates = 0) {
    const size_t P = m->layout.total;
    floatX* rounded = (floatX*)MALLOC_CHECK(P * sizeof(floatX));
#if defined(ENABLE_FP32)
    (void)updates;
    for (size_t i = 0; i < P; i++) rounded[i] = values[i];
#else
    const uint32_t seed = update_seed(m->seed, updates);
    for (size_t i = 0; i < P; i++) {
        if (updates == 0) {
            rounded[i] = (floatX)values[i];
            continue;
        }
        __nv_bfloat16_raw raw;
        raw.x = stochastic_round_bits(values[i], seed, i);
        rounded[i] = __nv_bfloat16(raw);
    }
#endif
    gpt_params_upload(m, rounded);
    gpt_state_upload(m, STATE_MASTER, values);
    for (int i = 0; i < NUM_STATE_BUFFERS; i++)
        if (m->opt_state[i])
            CUDA_CHECK(cudaMemset(m->opt_state[i], 0, state_elems(m, i) * sizeof(float)));
    m->opt_step = 0;
    free(rounded);
}

// This rank's part, in the layout of m->layout, of values of the whole model in the logical
// layout (m->logical; the same when there is no tensor parallelism).
template <class T>
void local_from_logical(const GPT* m, const T* logical, T* local) {
    memset(local, 0, m->layout.total * sizeof(T));
    for (int i = 0; i < m->layout.count; i++) {
        const ParamTensor* t = &m->layout.tensors[i];
        const size_t base = m->logical.tensors[i].offset;
        tp_local_runs(&t->tp_shape, m->tensor_parallel.rank, m->tensor_parallel.size, 0, t->numel,
                      [&](size_t logical_at, size_t local_at, size_t n) {
                          memcpy(local + t->offset + local_at, logical + base + logical_at,
                                 n * sizeof(T));
                      });
    }
}

// Sets every parameter from fp32 values of the whole model in the logical layout (m->logical,
// zero in the alignment gaps; wte's padding rows are zeroed here): this rank's part of them,
// as gpt_set_params does (random initialization, pretrained weights: train_weights.cuh).
inline void gpt_set_logical_params(GPT* m, float* logical_values) {
    // wte's (and an untied lm head's) padding rows (tokens V..Vp-1) never occur: they start and
    // stay zero
    for (int index : {m->logical.index.wte, m->logical.index.lm_head}) {
        const ParamTensor* t = &m->logical.tensors[index];
        memset(logical_values + t->offset + (size_t)m->config.vocab * m->config.channels, 0,
               (size_t)(m->config.padded_vocab - m->config.vocab) * m->config.channels *
                   sizeof(float));
    }
    float* local = (float*)MALLOC_CHECK(m->layout.total * sizeof(float));
    local_from_logical(m, logical_values, local);
    gpt_set_params(m, local);
    free(local);
}

// GPT-2 initialization from the tensors' init rules (see build_param_layout), from `seed`: the
// whole model is drawn in the logical layout, so every grid starts from the same parameters.
inline void gpt_init_random(GPT* m, uint64_t seed) {
    const ParamLayout* logical = &m->logical;
    float* values = (float*)MALLOC_CHECK(logical->total * sizeof(float));
    memset(values, 0, logical->total * sizeof(float));
    uint64_t state = seed;
    for (int i = 0; i < logical->count; i++) {
        const ParamTensor* t = &logical->tensors[i];
        for (size_t j = 0; j < t->numel; j++)
            values[t->offset + j] =
                t->init_std > 0.0f ? (float)(t->init_std * rng_normal(&state)) : t->init_value;
    }
    gpt_set_logical_params(m, values);
    free(values);
}

// ---------------------------------------------------------------------------------------------
// The block (GPT-2's kind, or with --arch llama Llama's): its tensors (LayerTensor, in the
// parameter table), its activations (LayerActivations, BLOCK_ACTIVATIONS), and below its forward
// and backward pass side by side. The two kinds share the passes: they differ in the norm
// (norm_forward: LayerNorm or RMSNorm), in RoPE after the qkv product (Llama), in the MLP's
// activation (GELU or SwiGLU of [gate | up]), in the kv heads and in the biases (Llama: none,
// block_weight gives nullptr).
// The passes are loops over the blocks that call the per-block hooks (further below) around
// each one; they see a block only through block_input, block_forward, norm_after_block and
// block_backward.
// Tensor parallelism (llmc/tensor_parallel.cuh): attention runs this rank's heads and the MLP its
// hidden units; ln1 and ln2 enter the parallel region (f) before attn.qkv and mlp.fc, attn.proj
// and mlp.proj leave it (g). Of the N tokens of a micro-batch, the residual stream and the
// LayerNorms (inputs, outputs, statistics) hold seq_rows: N / tp under sequence parallelism.
// The fusion across blocks: a block's last residual add (residual3 = residual2 + mlp) is one
// kernel with the LayerNorm that reads the sum, the next block's ln1 or, after the last block,
// lnf (norm_after_block). So in the forward pass only block 0 runs its ln1 alone, and the last
// block's gradient group also holds lnf. Under pipeline parallelism the same holds per stage:
// the first block of a stage runs its ln1 alone (the stage before is on another rank), and the
// last block of a stage before the last ends with the residual add alone.

inline int seq_rows(const GPT* m, int N) { return tp_shard_rows(&m->tensor_parallel, N); }

// Whether block l is the first (the last) of its pipeline stage: block 0 (L-1) without one.
inline bool block_starts_stage(const GPT* m, int l) { return l % m->pipe.stage_blocks == 0; }
inline bool block_ends_stage(const GPT* m, int l) { return (l + 1) % m->pipe.stage_blocks == 0; }

// Block l's input: the embeddings (under pipeline parallelism the running chunk's input) for
// the first block of a stage, else the output of the block before.
inline const floatX* block_input(const GPT* m, int l) {
    return block_starts_stage(m, l) ? m->acts.encoded : m->acts.layers[l - 1].residual3;
}

// The LayerNorm that reads block l's output: its parameters and where it writes.
struct NormAfterBlock {
    const floatX *weight, *bias;
    floatX* out;
    float *mean, *rstd;
};

// Block l+1's ln1, or lnf after the last block. Under ZeRO-3 block l+1's parameters are another
// gradient group's: this waits for their gather (lnf's are the last block's own).
inline NormAfterBlock norm_after_block(GPT* m, int l) {  // (Llama: bias and mean nullptr)
    const ParamIndex* at = &m->layout.index;
    Activations* acts = &m->acts;
    if (l == at->blocks - 1)
        return {weight(m, at->lnf_w), weight(m, at->lnf_b), acts->lnf, acts->lnf_mean,
                acts->lnf_rstd};
    dp_params_ready(&m->dp, block_grad_group(at, l + 1), m->params, m->stream);
    LayerActivations* next = &acts->layers[l + 1];
    return {block_weight(m, l + 1, LN1_W), block_weight(m, l + 1, LN1_B), next->ln1, next->ln1_mean,
            next->ln1_rstd};
}

inline bool is_llama(const GPT* m) { return m->config.llama.arch == ARCH_LLAMA; }

// The block's norm, fused with the residual add before it (b not nullptr): GPT-2's LayerNorm,
// or Llama's RMSNorm (no bias, no mean), forward, recomputed and backward.
inline void norm_forward(const GPT* m, floatX* residual_out, floatX* out, float* mean, float* rstd,
                         const floatX* a, const floatX* b, const floatX* weight, const floatX* bias,
                         int N, int C, cudaStream_t st) {
    if (is_llama(m))
        return rmsnorm_forward(residual_out, out, rstd, a, b, weight, N, C,
                               (float)m->config.llama.norm_eps, st);
    layernorm_forward(residual_out, out, mean, rstd, a, b, weight, bias, N, C, st);
}
inline void norm_recompute(const GPT* m, floatX* out, const float* mean, const float* rstd,
                           const floatX* x, const floatX* weight, const floatX* bias, int N, int C,
                           cudaStream_t st) {
    if (is_llama(m)) return rmsnorm_recompute(out, rstd, x, weight, N, C, st);
    layernorm_recompute(out, mean, rstd, x, weight, bias, N, C, st);
}
inline void norm_backward(const GPT* m, floatX* dinp, floatX* dweight, floatX* dbias,
                          float* partials, const floatX* dout, const floatX* inp, const float* mean,
                          const float* rstd, const floatX* weight, int N, int C, bool accumulate,
                          cudaStream_t st) {
    if (is_llama(m))
        return rmsnorm_backward(dinp, dweight, partials, dout, inp, rstd, weight, N, C, accumulate,
                                st);
    layernorm_backward(dinp, dweight, dbias, partials, dout, inp, mean, rstd, weight, N, C,
                       accumulate, st);
}

// The MLP's activation: GELU of fch, or Llama's SwiGLU of fch's [gate | up].
inline void mlp_activation_forward(const GPT* m, LayerActivations* la, int N, cudaStream_t st) {
    if (is_llama(m)) return swiglu_forward(la->fch_gelu, la->fch, N, m->shape.mlp, st);
    gelu_forward(la->fch_gelu, la->fch, (size_t)N * m->shape.mlp, st);
}

// How far block_forward runs: to the GELU (what full recompute reruns before the block's
// backward pass), or to the block's output and the norm after it (the forward pass).
enum BlockForwardUntil { BLOCK_UNTIL_GELU, BLOCK_UNTIL_OUTPUT };

// Block l's forward pass over B x T tokens from its input. ln1 runs here for block 0 and when
// recomputing; in the forward pass the block before ran it, fused with its residual add.
inline void block_forward(GPT* m, int l, const floatX* input, int B, int T, int until) {
    const ModelShapes* s = &m->shape;
    const int N = B * T, rows = seq_rows(m, N), C = s->C;
    LayerActivations* la = &m->acts.layers[l];
    Activations* acts = &m->acts;
    const TensorParallel* tp = &m->tensor_parallel;
    cudaStream_t st = m->stream;
    const bool llama = is_llama(m);
    if (block_starts_stage(m, l) || until == BLOCK_UNTIL_GELU)
        norm_forward(m, nullptr, la->ln1, la->ln1_mean, la->ln1_rstd, input, nullptr,
                     block_weight(m, l, LN1_W), block_weight(m, l, LN1_B), rows, C, st);
    const floatX* ln1 = tp_enter(tp, la->ln1, acts->gathered, N, C, st);
    // (Llama: q.w, k.w and v.w are adjacent, one (qkv, C) matrix from q.w on; no bias)
    column_parallel_forward(&m->mm, fp8_use(m, l, QKV_W), la->qkv, ln1,
                            block_weight(m, l, llama ? Q_W : QKV_W), block_weight(m, l, QKV_B), N,
                            C, s->qkv);
    if (m->config.qk_norm)
        qk_norm_forward(la->qkv, la->qk_raw, la->qk_rstd, block_weight(m, l, Q_NORM_W),
                        block_weight(m, l, K_NORM_W), N, s->heads, s->kv_heads, s->HS, st);
    if (llama)
        rope_forward(la->qkv, &m->rope, m->positions, N, T, s->heads, s->kv_heads, s->HS, st);
    // the training forward pass raises the layer's largest-logit key (a recompute's rerun, which
    // stops at the GELU, gives the same values: it leaves it alone)
    unsigned* logit_max =
        m->mon.recording && until == BLOCK_UNTIL_OUTPUT ? m->mon.keys + l : nullptr;
    cp_attention_forward(&m->cp, la->atty, la->lse, la->qkv, B, T, s->heads, s->kv_heads, s->HS, st,
                         logit_max);
    const floatX* attn = row_parallel_forward(&m->mm, fp8_use(m, l, ATTPROJ_W), tp, acts->proj_out,
                                              la->atty, block_weight(m, l, ATTPROJ_W),
                                              block_weight(m, l, ATTPROJ_B), N, s->att, C);
    norm_forward(m, la->residual2, la->ln2, la->ln2_mean, la->ln2_rstd, input, attn,
                 block_weight(m, l, LN2_W), block_weight(m, l, LN2_B), rows, C, st);
    const floatX* ln2 = tp_enter(tp, la->ln2, acts->gathered, N, C, st);
    // (Llama: gate.w and up.w adjacent, one (2 mlp, C) matrix)
    column_parallel_forward(&m->mm, fp8_use(m, l, FC_W), la->fch, ln2,
                            block_weight(m, l, llama ? GATE_W : FC_W), block_weight(m, l, FC_B), N,
                            C, s->fc);
    mlp_activation_forward(m, la, N, st);
    if (until == BLOCK_UNTIL_GELU) return;
    const floatX* mlp = row_parallel_forward(&m->mm, fp8_use(m, l, FCPROJ_W), tp, acts->proj_out,
                                             la->fch_gelu, block_weight(m, l, FCPROJ_W),
                                             block_weight(m, l, FCPROJ_B), N, s->mlp, C);
    if (block_ends_stage(m, l) && l + 1 < m->config.layers)  // the next stage runs the norm
        return residual_forward(la->residual3, la->residual2, mlp, (size_t)rows * C, st);
    const NormAfterBlock next = norm_after_block(m, l);
    norm_forward(m, la->residual3, next.out, next.mean, next.rstd, la->residual2, mlp, next.weight,
                 next.bias, rows, C, st);
}

// What the policy did not keep of block l's activations, recomputed before its backward pass.
inline void block_recompute(GPT* m, int l, const floatX* input) {
    const int N = m->B * m->T, rows = seq_rows(m, N), C = m->shape.C;
    LayerActivations* la = &m->acts.layers[l];
    cudaStream_t st = m->stream;
    if (m->acts.recompute == RECOMPUTE_FULL) {
        block_forward(m, l, input, m->B, m->T, BLOCK_UNTIL_GELU);
    } else if (m->acts.recompute == RECOMPUTE_SELECTIVE) {
        norm_recompute(m, la->ln1, la->ln1_mean, la->ln1_rstd, input, block_weight(m, l, LN1_W),
                       block_weight(m, l, LN1_B), rows, C, st);
        norm_recompute(m, la->ln2, la->ln2_mean, la->ln2_rstd, la->residual2,
                       block_weight(m, l, LN2_W), block_weight(m, l, LN2_B), rows, C, st);
        mlp_activation_forward(m, la, N, st);
    }
}

// Block l's backward pass over the micro-batch of the last forward pass (its full shape): from
// the gradient of the block's output in acts.dresidual to that of its input, there; adds the
// block's parameter gradients. First recomputes what the policy did not keep.
inline void block_backward(GPT* m, int l, const floatX* input) {
    const ModelShapes* s = &m->shape;
    const int B = m->B, T = m->T, N = B * T, rows = seq_rows(m, N), C = s->C;
    LayerActivations* la = &m->acts.layers[l];
    Activations* acts = &m->acts;
    const TensorParallel* tp = &m->tensor_parallel;
    cudaStream_t st = m->stream;
    float* partials = acts->col_partials;
    const bool llama = is_llama(m);
    block_recompute(m, l, input);
    // residual3 = residual2 + mlp: dresidual flows to residual2 unchanged and into the MLP
    const floatX* dout = tp_leave_backward(tp, acts->dresidual, acts->dgathered, N, C, st);
    row_parallel_backward(&m->mm, fp8_use(m, l, FCPROJ_W), llama ? acts->dswiglu : acts->dfch,
                          block_grad(m, l, FCPROJ_W), block_grad(m, l, FCPROJ_B), partials, dout,
                          la->fch_gelu, block_weight(m, l, FCPROJ_W), N, s->mlp, C);
    if (llama) swiglu_backward(acts->dfch, acts->dswiglu, la->fch, N, s->mlp, st);
    else gelu_backward(acts->dfch, la->fch, (size_t)N * s->mlp, st);
    const floatX* ln2 = tp_enter(tp, la->ln2, acts->gathered, N, C, st);
    const int fc_w = llama ? GATE_W : FC_W;
    floatX* dln2 = column_parallel_backward(
        &m->mm, fp8_use(m, l, FC_W), tp, acts->dlinear_in, block_grad(m, l, fc_w),
        block_grad(m, l, FC_B), partials, acts->dfch, ln2, block_weight(m, l, fc_w), N, C, s->fc);
    norm_backward(m, acts->dresidual, block_grad(m, l, LN2_W), block_grad(m, l, LN2_B), partials,
                  dln2, la->residual2, la->ln2_mean, la->ln2_rstd, block_weight(m, l, LN2_W), rows,
                  C, true, st);
    // residual2 = input + attention
    dout = tp_leave_backward(tp, acts->dresidual, acts->dgathered, N, C, st);
    row_parallel_backward(&m->mm, fp8_use(m, l, ATTPROJ_W), acts->dlinear_in,
                          block_grad(m, l, ATTPROJ_W), block_grad(m, l, ATTPROJ_B), partials, dout,
                          la->atty, block_weight(m, l, ATTPROJ_W), N, s->att, C);
    cp_attention_backward(&m->cp, acts->dqkv, acts->att_delta, acts->dlinear_in, la->atty, la->qkv,
                          la->lse, B, T, s->heads, s->kv_heads, s->HS, st);
    if (llama)
        rope_backward(acts->dqkv, &m->rope, m->positions, N, T, s->heads, s->kv_heads, s->HS, st);
    if (m->config.qk_norm)
        qk_norm_backward(acts->dqkv, block_grad(m, l, Q_NORM_W), block_grad(m, l, K_NORM_W),
                         partials, la->qk_raw, la->qk_rstd, block_weight(m, l, Q_NORM_W),
                         block_weight(m, l, K_NORM_W), N, s->heads, s->kv_heads, s->HS, st);
    const floatX* ln1 = tp_enter(tp, la->ln1, acts->gathered, N, C, st);
    const int qkv_w = llama ? Q_W : QKV_W;
    floatX* dln1 =
        column_parallel_backward(&m->mm, fp8_use(m, l, QKV_W), tp, acts->dlinear_in,
                                 block_grad(m, l, qkv_w), block_grad(m, l, QKV_B), partials,
                                 acts->dqkv, ln1, block_weight(m, l, qkv_w), N, C, s->qkv);
    norm_backward(m, acts->dresidual, block_grad(m, l, LN1_W), block_grad(m, l, LN1_B), partials,
                  dln1, input, la->ln1_mean, la->ln1_rstd, block_weight(m, l, LN1_W), rows, C, true,
                  st);
    // without QK-norm the key bias gradient is exactly zero (softmax ignores a per-query
    // constant): set it so, rather than leave the rounding noise of its column sums for
    // AdamW to amplify (with QK-norm the bias is inside the normalization: a real gradient).
    // This rank's qkv bias is [q | k | v] of its heads: the key part is the middle third.
    if (!m->config.qk_norm && !llama)  // (Llama has no biases)
        CUDA_CHECK(
            cudaMemsetAsync(block_grad(m, l, QKV_B) + s->att, 0, s->att * sizeof(floatX), st));
}

// Replicated kv heads (ModelShapes::kv_replicas > 1): each rank's gradient of its kv head's k
// and v rows covers only its own query heads' use of them; the whole gradient is the sum over
// the kv_replicas ranks that hold that head. Summed as an all-reduce over the whole
// tensor-parallel group of a buffer of every kv head's rows, each rank's placed in its head's
// slot and zeros elsewhere (exact: the zeros add nothing), then the rank's slot read back: the
// simplest correct form (no communicator of its own), at KVH times the bytes of a sum within
// the head's ranks (k and v are (HS, C) a rank: small next to the block's other traffic).
inline void tp_sum_kv_grads(GPT* m, int l) {
    const ModelShapes* s = &m->shape;
    const size_t n = (size_t)s->kv_att * s->C, slot = s->tp_rank / s->kv_replicas;
    const size_t whole = (size_t)m->config.llama.kv_heads * n;
    for (int which : {K_W, V_W}) {
        floatX* grad = block_grad(m, l, which);
        CUDA_CHECK(cudaMemsetAsync(m->kv_grad_sum, 0, whole * sizeof(floatX), m->stream));
        CUDA_CHECK(cudaMemcpyAsync(m->kv_grad_sum + slot * n, grad, n * sizeof(floatX),
                                   cudaMemcpyDeviceToDevice, m->stream));
        comm_allreduce_sum(m->tensor_parallel.group, m->kv_grad_sum, whole, m->stream);
        CUDA_CHECK(cudaMemcpyAsync(grad, m->kv_grad_sum + slot * n, n * sizeof(floatX),
                                   cudaMemcpyDeviceToDevice, m->stream));
    }
}

// Tensor parallelism: the gradients of block l's replicated tensors that each rank computed
// from its part of the work, summed over the group (llmc/tensor_parallel.cuh): QK-norm's scales
// (each rank normalizes its heads) and, under sequence parallelism, the LayerNorms' (each rank
// normalizes its rows; the last block's group also holds lnf); replicated kv heads' k and v over
// their ranks (tp_sum_kv_grads). The other replicated tensors get whole gradients on every rank.
// Once per reduction of the gradients (m->dp.reduce: at stages 0 and 1 the last micro-batch sums
// the whole step's), before the data-parallel reduction.
inline void tp_sum_partial_grads(GPT* m, int l) {
    if (m->tensor_parallel.size == 1 || !m->dp.reduce) return;
    if (m->shape.kv_replicas > 1) tp_sum_kv_grads(m, l);
    const ParamIndex* at = &m->layout.index;
    std::vector<int> tensors;
    if (m->config.qk_norm)
        for (int which : {Q_NORM_W, K_NORM_W}) tensors.push_back(block_tensor(at, l, which));
    if (m->tensor_parallel.sequence) {
        for (int which : {LN1_W, LN1_B, LN2_W, LN2_B})
            tensors.push_back(block_tensor(at, l, which));
        if (l == at->blocks - 1)
            for (int index : {at->lnf_w, at->lnf_b}) tensors.push_back(index);
    }
    tensors.erase(std::remove(tensors.begin(), tensors.end(), -1), tensors.end());  // (Llama)
    for (int i : tensors)
        tp_sum_partial_grad(&m->tensor_parallel, param_grad(m, i), m->layout.tensors[i].numel,
                            m->stream);
}

// ---------------------------------------------------------------------------------------------
// The hooks the passes call around each block and around the embeddings. They own the gradient
// groups' numbering (block_grad_group), ZeRO-3's parameter gathers (llmc/zero.cuh; no-ops
// below stage 3: a group's parameters ready before its kernels, the gather of the group the
// pass runs next under way), the gradient buckets (made ready before a group's gradients are
// written, reduced once a bucket's last group is done) and the tensor-parallel sums of partial
// gradients. The one gather inside a block, of the next block's ln1, is norm_after_block's.

inline void before_embeddings_forward(GPT* m) {  // gathered once, kept for the whole step
    dp_params_ready(&m->dp, embeddings_grad_group(&m->layout.index), m->params, m->stream);
}

inline void before_block_forward(GPT* m, int l) {
    const ParamIndex* at = &m->layout.index;
    const int next = l + 1 < at->blocks ? block_grad_group(at, l + 1) : -1;
    dp_params_begin(&m->dp, block_grad_group(at, l), next, m->params, m->stream);
}

// (for the last block, also before lnf's backward pass: lnf is in its group)
inline void before_block_backward(GPT* m, int l) {
    const ParamIndex* at = &m->layout.index;
    const int group = block_grad_group(at, l), next = l > 0 ? block_grad_group(at, l - 1) : -1;
    dp_params_begin(&m->dp, group, next, m->params, m->stream);
    dp_group_begin(&m->dp, group, m->stream);
}

inline void after_block_backward(GPT* m, int l) {  // the block's gradients are complete
    tp_sum_partial_grads(m, l);
    dp_group_done(&m->dp, block_grad_group(&m->layout.index, l), m->stream);
}

inline void before_embeddings_backward(GPT* m) {
    dp_group_begin(&m->dp, embeddings_grad_group(&m->layout.index), m->stream);
}

inline void after_embeddings_backward(GPT* m) {
    dp_group_done(&m->dp, embeddings_grad_group(&m->layout.index), m->stream);
}

// ---------------------------------------------------------------------------------------------
// The passes' parts: the embeddings, a run of blocks and the head, forward and backward. One
// process runs them all in turn (gpt_forward_shape, gpt_backward); a pipeline stage its own
// (pipe_forward_backward, below).

// Stops the run at the first token id of the N rows outside the vocabulary.
inline void check_tokens(const GPTConfig* c, const int* inputs, const int* targets, int N) {
    for (int i = 0; i < N; i++) {
        if (inputs[i] < 0 || inputs[i] >= c->vocab || targets[i] < 0 || targets[i] >= c->vocab) {
            fprintf(stderr, "token id out of range [0, %d) at position %d: input %d target %d\n",
                    c->vocab, i, inputs[i], targets[i]);
            exit(EXIT_FAILURE);
        }
    }
}

// The vocabulary-parallel embedding of m->inputs into acts.encoded: each rank looks up its own
// tokens (the group's first rank adds wpe) and the sum over the group (g) gives every row (under
// sequence parallelism this rank's rows, reduce-scattered from the whole lookup in proj_out).
inline void embeddings_forward(GPT* m, int B, int T) {
    const ModelShapes* s = &m->shape;
    const ParamIndex* at = &m->layout.index;
    Activations* acts = &m->acts;
    const TensorParallel* tp = &m->tensor_parallel;
    const int N = B * T, C = s->C;
    before_embeddings_forward(m);
    floatX* lookup = tp->sequence ? acts->proj_out : acts->encoded;
    encoder_forward(lookup, m->inputs, weight(m, at->wte),
                    tp->rank == 0 ? weight(m, at->wpe) : nullptr, B, T, C, s->vocab_begin, s->vocab,
                    m->stream, m->positions);
    tp_leave(tp, lookup, acts->encoded, N, C, m->stream);
}

// Blocks [first, end) forward.
inline void blocks_forward(GPT* m, int first, int end, int B, int T) {
    for (int l = first; l < end; l++) {
        before_block_forward(m, l);
        block_forward(m, l, block_input(m, l), B, T, BLOCK_UNTIL_OUTPUT);
    }
}

// The lm head, column-parallel over the vocabulary, and the vocabulary-parallel loss over N rows
// (with dloss > 0 leaving dlogits in acts.logits); the losses go to the host buffers, queued.
inline void head_forward(GPT* m, float dloss, int N) {
    const GPTConfig* c = &m->config;
    const ModelShapes* s = &m->shape;
    const ParamIndex* at = &m->layout.index;
    Activations* acts = &m->acts;
    const TensorParallel* tp = &m->tensor_parallel;
    cudaStream_t st = m->stream;
    // the tied wte, gathered under ZeRO-3 with the embeddings (on a pipeline's last stage here)
    dp_params_ready(&m->dp, embeddings_grad_group(at), m->params, st);
    const floatX* lnf = tp_enter(tp, acts->lnf, acts->gathered, N, s->C, st);
    column_parallel_forward(&m->mm, fp8_lm_head(m), acts->logits, lnf, weight(m, at->lm_head),
                            nullptr, N, s->C, s->vocab);
    classifier(tp, acts->logits, acts->losses, acts->z_losses, acts->log_z, acts->softmax_stats,
               acts->softmax_stats_all, m->targets, N, c->vocab, s->vocab, dloss, (float)c->z_loss,
               st);
    if (m->mon.recording) {  // every rank of a tensor-parallel group holds the whole log Z
        log_z_monitor_kernel<<<1, CHUNK_THREADS, 0, st>>>(m->mon.sums, m->mon.keys + at->blocks,
                                                          acts->log_z, N, tp->rank == 0);
        CUDA_CHECK_LAUNCH();
    }
    CUDA_CHECK(cudaMemcpyAsync(m->host_losses, acts->losses, N * sizeof(float),
                               cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaMemcpyAsync(m->host_z_losses, acts->z_losses, N * sizeof(float),
                               cudaMemcpyDeviceToHost, st));
}

// The mean cross-entropy of the N rows in the host buffers (after the stream's sync), and the
// mean z-loss term in *z_loss (if given).
inline double host_mean_loss(const GPT* m, int N, double* z_loss) {
    double sum = 0.0, z_sum = 0.0;
    for (int i = 0; i < N; i++) {
        sum += m->host_losses[i];
        z_sum += m->host_z_losses[i];
    }
    if (z_loss) *z_loss = z_sum / N;
    return sum / N;
}

// Forward pass of one micro-batch. inputs, targets: host (B,T) token ids. With dloss > 0 the
// classifier also leaves dloss * d(objective of each position)/d(logits) in acts.logits for
// gpt_backward, the objective being the cross-entropy plus c->z_loss * (log Z)^2. Returns
// the mean cross-entropy over the B*T positions, and the mean z-loss term in *z_loss (if given).
// B <= m->B and T <= m->T: a smaller shape (generation runs B = 1 over its growing context)
// uses the front of every activation buffer; the backward pass needs the full shape. Under
// pipeline parallelism (dloss 0: validation, generation) through the pipeline (pipe_forward).
inline double pipe_forward(GPT* m, const int* inputs, const int* targets, int B, int T,
                           double* z_loss);
inline double gpt_forward_shape(GPT* m, const int* inputs, const int* targets, float dloss, int B,
                                int T, double* z_loss = nullptr) {
    if (m->pipe.config.pp > 1) return pipe_forward(m, inputs, targets, B, T, z_loss);
    const ModelShapes* s = &m->shape;
    const int N = B * T;
    const TensorParallel* tp = &m->tensor_parallel;
    cudaStream_t st = m->stream;
    if (m->poison_activations) {  // all-ones bytes are NaN in fp32 and bf16
        CUDA_CHECK(cudaMemsetAsync(m->acts_x, 0xff, m->acts_x_elems * sizeof(floatX), st));
        CUDA_CHECK(cudaMemsetAsync(m->acts_f, 0xff, m->acts_f_elems * sizeof(float), st));
    }
    check_tokens(&m->config, inputs, targets, N);
    m->fp8.training = dloss != 0.0f;   // delayed scaling counts training passes only
    m->mon.recording = dloss != 0.0f;  // so do the monitors
    CUDA_CHECK(cudaMemcpyAsync(m->inputs, inputs, N * sizeof(int), cudaMemcpyHostToDevice, st));
    CUDA_CHECK(cudaMemcpyAsync(m->targets, targets, N * sizeof(int), cudaMemcpyHostToDevice, st));
    token_buckets_build(&m->buckets, inputs, N, s->vocab_begin, s->vocab, st);
    embeddings_forward(m, B, T);
    blocks_forward(m, 0, m->config.layers, B, T);
    head_forward(m, dloss, N);
    // every wait for other ranks has a deadline (llmc/comm.cuh): the tensor-parallel group's
    // collectives on this stream first, then ZeRO-3's gathers
    if (tp->size > 1)
        comm_sync(tp->group, st, "the tensor-parallel collectives of the forward pass (NCCL)");
    dp_sync(&m->dp, st, "the gathers of the forward pass's parameters (NCCL)");
    return host_mean_loss(m, N, z_loss);
}

// (under pipeline parallelism, without a backward pass: validation)
inline double gpt_forward(GPT* m, const int* inputs, const int* targets, float dloss,
                          double* z_loss = nullptr) {
    return gpt_forward_shape(m, inputs, targets, dloss, m->B, m->T, z_loss);
}

// The lm head's backward pass (tied to wte, still gathered from the forward pass): dlnf =
// dlogits @ wte, returned (in acts.dlinear_in), and dwte += dlogits^T @ lnf (under sequence
// parallelism lnf is gathered again).
inline const floatX* lm_head_backward(GPT* m) {
    const ModelShapes* s = &m->shape;
    const int N = m->B * m->T;
    Activations* acts = &m->acts;
    const floatX* lnf =
        tp_enter(&m->tensor_parallel, acts->lnf, acts->gathered, N, s->C, m->stream);
    return column_parallel_backward(&m->mm, fp8_lm_head(m), &m->tensor_parallel, acts->dlinear_in,
                                    param_grad(m, m->layout.index.lm_head), nullptr,
                                    acts->col_partials, acts->logits, lnf,
                                    weight(m, m->layout.index.lm_head), N, s->C, s->vocab);
}

// lnf, the norm after the last block (in its group): from dlnf to acts.dresidual, the gradient
// of the last block's output. On a pipeline's last stage other micro-batches' forward passes may
// have run since this one's: lnf's statistics are computed again from the block's output first
// (the same kernel on the same input: the same bits).
inline void lnf_backward(GPT* m, const floatX* dlnf) {
    const ParamIndex* at = &m->layout.index;
    Activations* acts = &m->acts;
    const floatX* x = acts->layers[at->blocks - 1].residual3;
    const int rows = seq_rows(m, m->B * m->T), C = m->shape.C;
    if (m->pipe.config.pp > 1)
        norm_forward(m, nullptr, acts->lnf, acts->lnf_mean, acts->lnf_rstd, x, nullptr,
                     weight(m, at->lnf_w), weight(m, at->lnf_b), rows, C, m->stream);
    norm_backward(m, acts->dresidual, param_grad(m, at->lnf_w), param_grad(m, at->lnf_b),
                  acts->col_partials, dlnf, x, acts->lnf_mean, acts->lnf_rstd,
                  weight(m, at->lnf_w), rows, C, false, m->stream);
}

// Blocks [first, end) backward, from the gradient of block end-1's output in acts.dresidual to
// that of block first's input, there; dlnf (not nullptr): first lnf's backward pass from it,
// inside the last block's group.
inline void blocks_backward(GPT* m, int first, int end, const floatX* dlnf) {
    for (int l = end - 1; l >= first; l--) {
        before_block_backward(m, l);
        if (dlnf && l == m->layout.index.blocks - 1) lnf_backward(m, dlnf);
        block_backward(m, l, block_input(m, l));
        after_block_backward(m, l);
    }
}

// The embeddings: wpe's gradient from every row, wte's for this rank's tokens only (m->buckets).
inline void embeddings_backward(GPT* m) {
    const ParamIndex* at = &m->layout.index;
    const int N = m->B * m->T, C = m->shape.C;
    before_embeddings_backward(m);
    const floatX* dout = tp_leave_backward(&m->tensor_parallel, m->acts.dresidual,
                                           m->acts.dgathered, N, C, m->stream);
    encoder_backward(param_grad(m, at->wte), param_grad(m, at->wpe), dout, &m->buckets, m->B, m->T,
                     C, m->stream, m->positions);
    after_embeddings_backward(m);
}

// Backward pass of the micro-batch of the last gpt_forward (called with dloss > 0): adds its
// parameter gradients to m->grads.
inline void gpt_backward(GPT* m) {
    const floatX* dlnf = lm_head_backward(m);
    blocks_backward(m, 0, m->layout.index.blocks, dlnf);
    embeddings_backward(m);
}

inline void gpt_zero_grad(GPT* m) {  // ZeRO-2 zeroes each bucket's buffer as it is taken
    if (m->grads)
        CUDA_CHECK(cudaMemsetAsync(m->grads, 0, m->layout.total * sizeof(floatX), m->stream));
}

// The start of a training step's monitors: the device vector cleared; tokens: the global batch's.
inline void gpt_monitors_start(GPT* m, double tokens) {
    const int L = m->config.layers;
    m->mon.tokens = tokens;
    CUDA_CHECK(cudaMemsetAsync(m->mon.vec, 0, monitor_words(L) * sizeof(unsigned), m->stream));
}

// ---------------------------------------------------------------------------------------------
// Pipeline parallelism (--pp): the executor. Each rank of a pipeline group runs its schedule
// (llmc/pipeline.h's pipe_rank_schedule: a list of forwards and backwards of (micro-batch,
// chunk)) in one loop over the time steps of its plan (pipe_exchange_plan). A forward of chunk c
// (virtual stage s) takes the chunk's input, received from the rank before or on stage 0 embedded
// from the micro-batch's tokens; runs the stage's blocks (their activations in one of the rank's
// activation sets, pipe_bind); its output goes to the rank after, or on the last stage it runs
// lnf, the lm head and the loss with the backward's dloss and at once the lm head's backward
// pass, keeping the gradient of lnf's output for the chunk's backward. A backward takes the
// gradient of the chunk's output (received from the rank after; on the last stage lnf's
// backward from the kept gradient, in the last block's gradient group), runs the stage's blocks
// backward and its input's gradient goes to the rank before, or on stage 0 into the embeddings'
// backward. Under tensor parallelism each rank of a stage's tensor-parallel group exchanges its
// own part (the whole activation, or its rows under sequence parallelism) with the same
// tensor-parallel rank of the neighbouring stage: a pipeline group is the ranks with the same
// tensor-parallel rank (llmc/parallel.h).
//
// The transfers run on the pipeline's own stream (p->stream), ordered against the compute stream
// by events, and overlap the compute. After each time step, one NCCL group (an exchange,
// comm_exchange) with the send of what the action ending in the step produced and the receives
// of what the neighbours' actions ending in the step produced (a forward lasts one step, a
// backward two: PIPE_PLAN_COSTS) is queued on that stream: it waits first for the compute stream's
// work launched so far (an event: the output it sends is written, and a backward that freed the
// activation set a receive fills is done), and an event marks its end. Nothing waits for it
// then: the next action starts at once, unless it needs an input, when the compute stream (an
// event) and the host (timed: the measured bubble) wait for the exchange that carries it, with
// the group's deadline, naming the transfer. So a rank's sends, and receives its next action
// does not need, go on while it computes; a receive is posted in the exchange of the step its
// data is produced in, as soon as the plan has freed an activation set for it.
// Why this cannot deadlock: every rank queues its exchanges in the plan's order (by time step),
// each group pairing the same transfers on both sides (pipe_exchange_plan), and every wait
// points at work queued before it on this rank: an exchange at step t waits for actions launched
// before it, whose inputs came in exchanges queued before it, of steps < t; an action waits for
// an exchange queued before it. So what the exchanges of step t wait for, on every rank, is
// exchanges of earlier steps and the actions they feed: by induction over the steps, each
// completes (the groups of step 0 wait for no transfer). The buffers a send reads are not
// written again before it has read them: a forward's output (the activation set's last block)
// only after the set's backward, which waited for the gradient received in a later exchange of
// the same stream; a backward's input gradient is copied out of dresidual into its set's own
// buffer (slot_dinputs), which the next backward of that set writes after waiting for the send
// (slot_sent). Under the cost model (--pp-cost-ms: an action lasts its cost, the host sleeping
// the rest) --pp-cost-transfer-ms holds each exchange with a send back that long after its step,
// a transfer time, which the rank spends in its next action: scripts/test_pp.py measures the
// step against the sum of actions and transfers. The loop times itself (host timestamps, each
// action's stream synchronized): the time in actions and waiting for inputs, for the measured
// bubble of --comm-stats (train_run.cuh's report_pipeline_bubble).
//
// After the flush: the tied wte's gradient, in two parts on the first and the last stage's ranks,
// summed between them (both then hold the same sum); the tensor-parallel sums of partial
// gradients (tp_sum_partial_grads) and the data-parallel reduction of the step's gradients
// (ZeRO-0 and 1: each gradient group in the backward pass's order, as one process's last
// micro-batch reduces them; ZeRO-2 and 3 reduce-scatter each group as a backward action finishes
// it, and the embeddings' bucket here: llmc/zero.cuh's dp_pipeline_begin); the loss, the last
// stage's, broadcast over the pipeline group.

// Points the blocks of virtual stage `stage` and the chunk's input (acts.encoded) at activation
// set `slot`.
inline void pipe_bind(GPT* m, int slot, int stage) {
    Pipeline* p = &m->pipe;
    const int first = stage * p->stage_blocks;
    for (int j = 0; j < p->stage_blocks; j++)
        m->acts.layers[first + j] = m->acts.stored[slot * p->stage_blocks + j];
    m->acts.encoded = p->slot_inputs + slot * p->slot_elems;
}

inline int* pipe_slot_of(GPT* m, PipeAction a) {
    return &m->pipe.slot_of[a.micro * m->pipe.config.chunks + a.chunk];
}

// Appends to `what` the words of one transfer: "receive of micro-batch 3's activation from rank
// 0" (a receive for this rank's forward), "send of micro-batch 1's gradient to rank 2", ...
inline void pipe_transfer_words(char* what, size_t len, bool send, PipeAction a, int peer) {
    const size_t used = strlen(what);
    snprintf(what + used, len - used, "%s%s of micro-batch %d's %s %s rank %d",
             used > 0 ? ", " : "", send ? "send" : "receive", a.micro,
             a.op == PIPE_FORWARD ? "activation" : "gradient", send ? "to" : "from", peer);
}

// Queues exchange x on the transfers' stream: the send of what the action ending in its time
// step produced (p->sending[x]) and the receives of the neighbours' activations (each into a new
// activation set) and gradients (into their activation set's), in one group, after the compute
// stream's work launched so far (the producing action; the backward that freed a set received
// into); exchanged[x] marks its end. Nothing waits for it here.
inline void pipe_exchange(GPT* m, int x) {
    Pipeline* p = &m->pipe;
    const PipeExchange* e = &p->exchanges[x];
    const size_t n = (size_t)seq_rows(m, m->B * m->T) * m->shape.C;
    CommP2p<floatX> ops[3];
    int count = 0;
    char what[256] = "";
    for (int k = 0; k < e->recv_count; k++) {
        const PipeAction a = e->recv[k];
        int* slot = pipe_slot_of(m, a);
        if (a.op == PIPE_FORWARD) *slot = p->slot_free[--p->free_count];
        floatX* buf =
            (a.op == PIPE_FORWARD ? p->slot_inputs : p->slot_douts) + *slot * p->slot_elems;
        ops[count++] = CommP2p<floatX>{buf, n, e->recv_peer[k], false};
        pipe_transfer_words(what, sizeof(what), false, a, e->recv_peer[k]);
    }
    if (e->send_peer >= 0) {
        ops[count++] = CommP2p<floatX>{(floatX*)p->sending[x], n, e->send_peer, true};
        pipe_transfer_words(what, sizeof(what), true, e->sent, e->send_peer);
        p->sent_bytes += (double)n * sizeof(floatX);
    }
    char named[300];
    snprintf(named, sizeof(named), "the pipeline's %s", what);
    CUDA_CHECK(cudaEventRecord(p->computed, m->stream));
    CUDA_CHECK(cudaStreamWaitEvent(p->stream, p->computed, 0));
    comm_exchange(p->group, ops, count, p->stream, named);
    CUDA_CHECK(cudaEventRecord(p->exchanged[x], p->stream));
    // (a query runs nothing on a GPU; the CPU runtime posts the sends now, not at the next wait)
    const cudaError_t posted = cudaStreamQuery(p->stream);
    if (posted != cudaErrorNotReady) CUDA_CHECK(posted);
}

inline void pipe_sleep_until(double t) { comm_sleep_s(t - comm_now_s()); }

// Queues the step's exchanges in order: those due by now, and (sleeping until they are due)
// every one up to exchange `through` (-1: none forced). Exchanges not yet due (their time step
// not ended) stop it.
inline void pipe_queue_exchanges(GPT* m, int through) {
    Pipeline* p = &m->pipe;
    for (; p->queued < p->exchange_count && p->due_s[p->queued] >= 0; p->queued++) {
        if (p->queued > through && p->due_s[p->queued] > comm_now_s()) return;
        pipe_sleep_until(p->due_s[p->queued]);
        pipe_exchange(m, p->queued);
    }
}

// The host sleeps until `end` (the cost model: the action lasts until then), queuing the
// exchanges that fall due meanwhile.
inline void pipe_sleep_queuing(GPT* m, double end) {
    Pipeline* p = &m->pipe;
    for (;;) {
        pipe_queue_exchanges(m, -1);
        const bool next = p->queued < p->exchange_count && p->due_s[p->queued] >= 0;
        if (!next || p->due_s[p->queued] >= end) break;
        pipe_sleep_until(p->due_s[p->queued]);
    }
    pipe_sleep_until(end);
}

// The compute stream waits for exchange x, queued first if it is not yet; with `what` (the
// transfer an action waits for) the host waits too, with the pipeline group's deadline.
inline void pipe_wait_exchange(GPT* m, int x, const char* what) {
    Pipeline* p = &m->pipe;
    pipe_queue_exchanges(m, x);
    if (p->queued <= x) {  // (its step has not ended: the plan would be wrong)
        fprintf(stderr,
                "internal error: the pipeline waits for exchange %d of step %d, not queued\n", x,
                p->exchanges[x].tick);
        exit(EXIT_FAILURE);
    }
    if (what) comm_sync_event(p->group, p->exchanged[x], what);
    CUDA_CHECK(cudaStreamWaitEvent(m->stream, p->exchanged[x], 0));
}

// The forward pass of virtual stage ps over one micro-batch (inputs, targets: its host (B,T)
// tokens, B <= m->B and T <= m->T), its input already where the stage reads it (stage 0: embeds
// the tokens): returns the stage's output, or nullptr on the last stage, which has run the lm
// head and the loss with dloss (0: no gradient).
inline floatX* stage_forward(GPT* m, const PipeStage* ps, const int* inputs, const int* targets,
                             float dloss, int B, int T) {
    const int N = B * T;
    cudaStream_t st = m->stream;
    if (ps->embeddings) {
        CUDA_CHECK(cudaMemcpyAsync(m->inputs, inputs, N * sizeof(int), cudaMemcpyHostToDevice, st));
        embeddings_forward(m, B, T);
    }
    blocks_forward(m, ps->first_block, ps->first_block + ps->blocks, B, T);
    if (!ps->head) return m->acts.layers[ps->first_block + ps->blocks - 1].residual3;
    CUDA_CHECK(cudaMemcpyAsync(m->targets, targets, N * sizeof(int), cudaMemcpyHostToDevice, st));
    head_forward(m, dloss, N);
    return nullptr;
}

// Runs action a of a training step (see above; losses: the sums of the micro-batches' mean loss
// and z-loss, on the last stage). Returns what it sends: the forward's output, the backward's
// input gradient (nullptr: nothing).
inline const floatX* pipe_run_action(GPT* m, PipeAction a, const int* inputs, const int* targets,
                                     int A, float first_scale, double losses[2]) {
    Pipeline* p = &m->pipe;
    const PipeConfig* c = &p->config;
    const ModelShapes* s = &m->shape;
    const int B = m->B, T = m->T, N = B * T, stage = pipe_stage_of(c, p->rank, a.chunk);
    const PipeStage ps = pipe_stage(c, stage);
    const int *micro_inputs = inputs + (size_t)a.micro * N,
              *micro_targets = targets + (size_t)a.micro * N;
    cudaStream_t st = m->stream;
    int* slot = pipe_slot_of(m, a);
    if (a.op == PIPE_FORWARD && ps.embeddings) *slot = p->slot_free[--p->free_count];
    pipe_bind(m, *slot, stage);
    floatX* dout = p->slot_douts + *slot * p->slot_elems;
    const size_t n = (size_t)seq_rows(m, N) * s->C;
    if (a.op == PIPE_FORWARD) {
        const float dloss = (a.micro == 0 ? first_scale : 1.0f) / ((float)N * A);
        if (const floatX* out = stage_forward(m, &ps, micro_inputs, micro_targets, dloss, B, T))
            return out;
        // the lm head's backward (its dlogits do not outlive the forward), its gradient of lnf's
        // output kept for the backward action, which runs lnf's backward in the last block's group
        CUDA_CHECK(cudaMemcpyAsync(dout, lm_head_backward(m), n * sizeof(floatX),
                                   cudaMemcpyDeviceToDevice, st));
        CUDA_CHECK(cudaStreamSynchronize(st));  // the host's loss buffers
        double z = 0.0;
        losses[0] += host_mean_loss(m, N, &z);
        losses[1] += z;
        return nullptr;
    }
    dp_pipeline_action_begin(&m->dp, st);
    if (!ps.head)
        CUDA_CHECK(cudaMemcpyAsync(m->acts.dresidual, dout, n * sizeof(floatX),
                                   cudaMemcpyDeviceToDevice, st));
    blocks_backward(m, ps.first_block, ps.first_block + ps.blocks, ps.head ? dout : nullptr);
    p->slot_free[p->free_count++] = *slot;
    if (!ps.embeddings) {  // the input's gradient, sent from the set's own buffer (not dresidual,
                           // which the next backward writes), once its last send has read it
        if (p->slot_sent[*slot] >= 0) pipe_wait_exchange(m, p->slot_sent[*slot], nullptr);
        floatX* dinput = p->slot_dinputs + *slot * p->slot_elems;
        CUDA_CHECK(cudaMemcpyAsync(dinput, m->acts.dresidual, n * sizeof(floatX),
                                   cudaMemcpyDeviceToDevice, st));
        return dinput;
    }
    token_buckets_build(&m->buckets, micro_inputs, N, s->vocab_begin, s->vocab, st);
    embeddings_backward(m);
    return nullptr;
}

// The tied wte: the first stage's rank holds the embedding's part of its gradient, the last
// stage's the lm head's; each sends its part to the other and adds the one it receives. (An
// untied lm head has its gradient on the last stage alone: nothing to sum.)
inline void pipe_sum_tied_grad(GPT* m) {
    Pipeline* p = &m->pipe;
    const int last = pipe_rank_of(&p->config, pipe_stage_count(&p->config) - 1);
    if (m->config.llama.untied_head || (p->rank != 0 && p->rank != last)) return;
    const int peer = p->rank == 0 ? last : 0, wte = m->layout.index.wte;
    const size_t n = m->layout.tensors[wte].numel;
    floatX* grad = param_grad(m, wte);
    const char* what = "the pipeline's exchange of the tied wte's gradient parts";
    const CommP2p<floatX> ops[2] = {{grad, n, peer, true}, {p->tied_grad, n, peer, false}};
    comm_exchange(p->group, ops, 2, m->stream, what);
    comm_sync(p->group, m->stream, what);
    add_into(grad, p->tied_grad, n, m->stream);
}

// The forward pass of one micro-batch of (B,T) tokens through the pipeline, without a backward
// pass (validation; generation, whose B and T may be smaller, gpt_generate): the virtual stages
// in order, each on its rank, which receives the stage's input from the rank before and sends
// its output on, each transfer alone (a chain: stage s's send
// meets the receive of stage s + 1, which its rank posts after its transfers of earlier stages);
// returns the mean loss (the last stage's) on every rank of the pipeline group, the mean z-loss
// term in *z_loss (if given).
inline double pipe_forward(GPT* m, const int* inputs, const int* targets, int B, int T,
                           double* z_loss) {
    Pipeline* p = &m->pipe;
    const PipeConfig* c = &p->config;
    const int N = B * T;
    const size_t n = (size_t)seq_rows(m, N) * m->shape.C;
    cudaStream_t st = m->stream;
    check_tokens(&m->config, inputs, targets, N);
    m->fp8.training = m->mon.recording = false;
    double losses[2] = {0.0, 0.0};
    // one transfer of the activation entering or leaving the stage of action a
    auto transfer = [&](bool send, PipeAction a, floatX* buf, int peer) {
        char what[200] = "the pipeline's ";
        pipe_transfer_words(what + strlen(what), sizeof(what) - strlen(what), send, a, peer);
        const CommP2p<floatX> op = {buf, n, peer, send};
        comm_exchange(p->group, &op, 1, st, what);
        comm_sync(p->group, st, what);
    };
    for (int stage = 0; stage < pipe_stage_count(c); stage++) {
        if (pipe_rank_of(c, stage) != p->rank) continue;
        const PipeAction a = {PIPE_FORWARD, 0, pipe_chunk_of(c, stage)};
        const PipeDeps deps = pipe_deps(c, p->rank, a);
        const PipeStage ps = pipe_stage(c, stage);
        pipe_bind(m, 0, stage);
        if (deps.recv.rank >= 0) transfer(false, a, m->acts.encoded, deps.recv.rank);
        if (floatX* out = stage_forward(m, &ps, inputs, targets, 0.0f, B, T)) {
            transfer(true, a, out, deps.send.rank);
            continue;
        }
        CUDA_CHECK(cudaStreamSynchronize(st));
        losses[0] = host_mean_loss(m, N, &losses[1]);
    }
    comm_broadcast(p->group, losses, sizeof(losses), pipe_rank_of(c, pipe_stage_count(c) - 1));
    if (z_loss) *z_loss = losses[1];
    return losses[0];
}

// One step's forward and backward as this rank's part of the pipeline (see above); the same
// contract as gpt_forward_backward, whose arguments it takes.
inline double pipe_forward_backward(GPT* m, const int* inputs, const int* targets, int A,
                                    double* z_loss, float first_scale) {
    Pipeline* p = &m->pipe;
    const PipeConfig* c = &p->config;
    const int N = m->B * m->T;
    cudaStream_t st = m->stream;
    if (A != c->micro_batches) {
        fprintf(stderr, "the pipeline was built for %d micro-batches per step, not %d\n",
                c->micro_batches, A);
        exit(EXIT_FAILURE);
    }
    check_tokens(&m->config, inputs, targets, N * A);
    gpt_zero_grad(m);
    gpt_monitors_start(m, (double)N * A * m->dp.group->size);
    m->fp8.training = m->mon.recording = true;
    dp_pipeline_begin(&m->dp, st);  // ZeRO-0, 1: the data-parallel reduction follows the flush
    p->free_count = 0;
    for (int k = p->slots - 1; k >= 0; k--) p->slot_free[p->free_count++] = k;
    double losses[2] = {0.0, 0.0};  // the sums of the micro-batches' mean loss and z-loss
    for (int s = 0; s < p->slots; s++) p->slot_sent[s] = -1;
    for (int x = 0; x < p->exchange_count; x++) p->due_s[x] = -1.0;
    p->queued = 0;
    p->busy_s = p->wait_s = p->overrun_s = p->wait_off_s = 0.0;
    p->wait_steps = 0;
    const double step_s = 1e-3 * p->cost_ms;  // the cost model's time step (0: none)
    const double loop_start = comm_now_s();
    const floatX* produced = nullptr;  // what the last action produced: sent at its last step
    for (int t = 0, i = 0, x = 0; t < p->ticks; t++) {
        if (i < p->action_count && p->action_tick[i] == t) {
            const PipeAction a = p->actions[i++];
            const int arrival = *pipe_arrival_of(p, a);
            if (arrival >= 0) {  // its input: the host and the compute stream wait for it
                const double start = comm_now_s();
                char what[200] = "the pipeline's ";
                pipe_transfer_words(what + strlen(what), sizeof(what) - strlen(what), false, a,
                                    pipe_deps(c, p->rank, a).recv.rank);
                pipe_wait_exchange(m, arrival, what);
                const double waited = comm_now_s() - start;
                p->wait_s += waited;
                if (step_s > 0) {
                    const long steps = lround(waited / step_s);
                    p->wait_steps += (int)steps;
                    p->wait_off_s = std::max(p->wait_off_s, fabs(waited - steps * step_s));
                }
            }
            const double start = comm_now_s();
            produced = pipe_run_action(m, a, inputs, targets, A, first_scale, losses);
            CUDA_CHECK(cudaStreamSynchronize(st));
            // the cost model: the action lasts until step_s (a backward 2 step_s) after its start
            const double cost = (a.op == PIPE_FORWARD ? 1.0 : 2.0) * step_s;
            if (step_s > 0) {
                p->overrun_s = std::max(p->overrun_s, comm_now_s() - start - cost);
                pipe_sleep_queuing(m, start + cost);
            }
            p->busy_s += comm_now_s() - start;
        }
        if (x < p->exchange_count && p->exchanges[x].tick == t) {
            // due once the time step ended (the action's output is there); with a send, under
            // the cost model its transfer time later
            const bool sends = p->exchanges[x].send_peer >= 0;
            p->due_s[x] = comm_now_s() + (sends ? 1e-3 * p->transfer_ms : 0.0);
            p->sending[x] = sends ? produced : nullptr;
            if (sends && p->exchanges[x].sent.op == PIPE_BACKWARD)
                p->slot_sent[*pipe_slot_of(m, p->exchanges[x].sent)] = x;
            x++;
        }
        pipe_queue_exchanges(m, -1);
    }
    p->loop_s = comm_now_s() - loop_start;
    if (p->exchange_count > 0) {  // the last transfers, before the step's buffers are used again
        pipe_queue_exchanges(m, p->exchange_count - 1);
        CUDA_CHECK(cudaStreamWaitEvent(st, p->exchanged[p->exchange_count - 1], 0));
    }
    pipe_sum_tied_grad(m);
    if (m->dp.stage < 2) {  // (ZeRO-2, 3: each group was reduced as an action finished it)
        const int blocks = m->layout.index.blocks;
        dp_backward_begin(&m->dp, true, false, st);
        for (int g = 0; g < num_grad_groups(&m->layout.index); g++) {
            dp_group_begin(&m->dp, g, st);
            // the tensor-parallel sums of partial gradients (QK-norm's scales, under sequence
            // parallelism the LayerNorms'), of the blocks this rank holds, once per step
            if (g < blocks && pipe_holds_block(&p->config, p->rank, blocks - 1 - g))
                tp_sum_partial_grads(m, blocks - 1 - g);
            dp_group_done(&m->dp, g, st);
        }
    }
    dp_pipeline_finish(&m->dp, st);  // ZeRO-2, 3: the held embeddings' bucket reduced
    comm_broadcast(p->group, losses, sizeof(losses), pipe_rank_of(c, pipe_stage_count(c) - 1));
    if (z_loss) *z_loss = losses[1] / A;
    return losses[0] / A;
}

// Forward and backward over the A micro-batches of one step; inputs/targets: host (A,B,T).
// Leaves the gradient of the mean micro-batch objective, averaged over the data-parallel ranks
// (without QK-norm the key bias gradient exactly zero), where m->dp keeps it: in m->grads at
// ZeRO-0 and 1 (at 1, the ranges this rank owns hold the reduced gradient), and for the ranges
// this rank owns in its reduced shard at 2 and 3; returns the mean
// cross-entropy (this rank's; the mean z-loss term in *z_loss, if given). first_scale multiplies
// micro-batch 0's loss gradient (--inject-fault's spikes and NaN; 1 otherwise).
inline double gpt_forward_backward(GPT* m, const int* inputs, const int* targets, int A,
                                   double* z_loss = nullptr, float first_scale = 1.0f) {
    if (m->pipe.config.pp > 1)
        return pipe_forward_backward(m, inputs, targets, A, z_loss, first_scale);
    const int N = m->B * m->T;
    gpt_zero_grad(m);
    gpt_monitors_start(m, (double)N * A * m->dp.group->size);
    double loss = 0.0, z_sum = 0.0;
    for (int micro = 0; micro < A; micro++) {
        double z = 0.0;
        const float dloss = (micro == 0 ? first_scale : 1.0f) / ((float)N * A);
        loss += gpt_forward(m, inputs + (size_t)micro * N, targets + (size_t)micro * N, dloss, &z);
        z_sum += z;
        dp_backward_begin(&m->dp, micro == A - 1, micro == 0, m->stream);
        gpt_backward(m);
    }
    dp_finish(&m->dp, m->stream);
    if (m->tensor_parallel.size > 1)
        comm_sync(m->tensor_parallel.group, m->stream,
                  "the tensor-parallel collectives of the backward pass (NCCL)");
    if (z_loss) *z_loss = z_sum / A;
    return loss / A;
}

// The end of a training step's monitors (gpt_update, gpt_skip_update; `updated`: the update was
// taken): the update-ratio sums, the vector combined over the data-, tensor- and pipeline-parallel
// groups (an all-gather each, monitor_combine_kernel; a pipeline stage records its own blocks and
// the last stage log Z) and copied into pinned host memory, all queued on the stream; readable
// (gpt_monitor_* below) once the caller synchronizes.
inline void gpt_monitors_finish(GPT* m, bool updated) {
    Monitors* mon = &m->mon;
    const int L = m->config.layers;
    cudaStream_t st = m->stream;
    if (updated && mon->config.update_ratio && mon->item_count > 0) {
        size_t elems;
        const float* now = weights_of_record(m, &elems);
        update_items_kernel<<<dim3(mon->max_blocks, mon->item_count), CHUNK_THREADS, 0, st>>>(
            mon->partials, mon->items, now, mon->before, mon->max_blocks);
        CUDA_CHECK_LAUNCH();
        update_sums_kernel<<<1, 1, 0, st>>>(mon->sums, mon->partials, mon->items, mon->item_count,
                                            mon->max_blocks);
        CUDA_CHECK_LAUNCH();
    }
    const int K = monitor_words(L);
    for (const CommGroup* g : {m->dp.group, m->tensor_parallel.group, m->pipe.group}) {
        if (g->size == 1) continue;
        comm_allgather(g, mon->vec, mon->gathered, K, st);
        monitor_combine_kernel<<<1, 32, 0, st>>>(mon->vec, mon->gathered, g->size, L + 1, K);
        CUDA_CHECK_LAUNCH();
    }
    CUDA_CHECK(
        cudaMemcpyAsync(mon->host, mon->vec, K * sizeof(unsigned), cudaMemcpyDeviceToHost, st));
}

// The last step's monitors, after its synchronization: the largest attention logit of layer l
// (l = L: of every layer), log Z's mean and max over the global batch, and ||dW|| / ||W|| of
// update group g (0 when the step took no update).
inline float gpt_monitor_attn_logit_max(const GPT* m, int l) {
    const int L = m->config.layers;
    if (l < L) return monitor_value(m->mon.host_keys[l]);
    unsigned top = 0;  // the keys keep the floats' order
    for (int k = 0; k < L; k++) top = std::max(top, m->mon.host_keys[k]);
    return monitor_value(top);
}
inline double gpt_monitor_log_z_mean(const GPT* m) { return m->mon.host_sums[0] / m->mon.tokens; }
inline float gpt_monitor_log_z_max(const GPT* m) {
    return monitor_value(m->mon.host_keys[m->config.layers]);
}
inline double gpt_monitor_update_ratio(const GPT* m, int g) {
    const double dw = m->mon.host_sums[1 + 2 * g], w = m->mon.host_sums[2 + 2 * g];
    return w > 0.0 ? sqrt(dw / w) : 0.0;
}

// The global L2 norm of the gradients, summed over the shard plan (llmc/zero.cuh): the same bits
// on every rank and at every ZeRO stage.
// Under tensor parallelism each rank of a group sums its own parts of the sharded tensors and
// the group's first rank the replicated ones (llmc/zero.cuh's in_norm), added in rank order.
// With --log-layer-norms the same sums per layer entry (layer_norm_entry) go to m->mon.layer_sq,
// through the same copies and gathers.
inline float gpt_grad_norm(GPT* m) {
    const int entries = m->mon.layer_sq ? m->config.layers + 2 : 0, width = 1 + entries;
    std::vector<float> mine(width);  // the sum, then the entries'
    mine[0] = dp_grad_sum_squares(&m->dp, m->stream, entries ? mine.data() + 1 : nullptr);
    const int tp = m->tensor_parallel.size;
    std::vector<float> sums(mine);
    if (tp > 1) {
        std::vector<float> all((size_t)width * tp);
        comm_allgather_host(m->tensor_parallel.group, mine.data(), width * sizeof(float),
                            all.data(), "the gradient norm's tensor-parallel partial sums");
        for (int k = 0; k < width; k++) {
            sums[k] = 0.0f;
            for (int r = 0; r < tp; r++) sums[k] += all[(size_t)r * width + k];
        }
    }
    if (m->pipe.group->size > 1) {  // every stage's sums, added in pipeline rank order
        const int pp = m->pipe.group->size;
        std::vector<float> all((size_t)width * pp);
        const std::vector<float> here(sums);
        comm_allgather_host(m->pipe.group, here.data(), width * sizeof(float), all.data(),
                            "the gradient norm's pipeline stages' sums");
        for (int k = 0; k < width; k++) {
            sums[k] = 0.0f;
            for (int r = 0; r < pp; r++) sums[k] += all[(size_t)r * width + k];
        }
    }
    for (int e = 0; e < entries; e++) m->mon.layer_sq[e] = sums[1 + e];
    return sqrtf(sums[0]);
}

// Clipping as torch.nn.utils.clip_grad_norm_: scale by clip/(norm+1e-6) when that is < 1.
inline double clip_scale(double norm, double clip) {
    if (clip <= 0.0) return 1.0;
    double s = clip / (norm + 1e-6);
    return s < 1.0 ? s : 1.0;
}

// The scheduled learning rate of each optimizer at `step`: one schedule, two peaks (--lr for
// AdamW and Lion, --muon-lr for Muon), so the schedule scales all alike.
inline void step_learning_rates(const ScheduleConfig* sched, double muon_peak, int step,
                                double lr[NUM_OPTIMIZERS]) {
    ScheduleConfig muon = *sched;
    muon.lr = muon_peak;
    lr[OPT_ADAMW] = learning_rate(sched, step);
    lr[OPT_MUON] = learning_rate(&muon, step);
    lr[OPT_LION] = lr[OPT_ADAMW];
}

// The buffers of an owned range: its parameters, fp32 master weights (nullptr in the fp32
// build) and reduced gradients, and the weight decay of its tensor.
inline floatX* owned_params(GPT* m, const OwnedRange* r) { return m->params + param_index(m, r); }
inline float* owned_master(GPT* m, const OwnedRange* r) {
    return m->master ? m->master + master_index(m, r) : nullptr;
}
inline double owned_decay(const GPT* m, const OwnedRange* r) {
    return m->layout.tensors[r->tensor].decay ? m->opt.weight_decay : 0.0;
}

// The optimizer table's updates (OPTIMIZERS), one owned range each.
inline void adamw_step(GPT* m, const OwnedRange* r, const OptimizerStep* step) {
    const OptimizerConfig* o = &m->opt;
    // AdamW's lr_scale scales its whole step, decay included (a parameter group's lr)
    const AdamWHyper h = {step->lr * m->layout.tensors[r->tensor].lr_scale,
                          o->beta1,
                          o->beta2,
                          o->eps,
                          step->grad_scale,
                          m->opt_step,
                          step->seed};
    adamw_update(owned_params(m, r), owned_master(m, r), dp_owned_grad(&m->dp, r),
                 m->opt_state[ADAMW_M] + r->state, m->opt_state[ADAMW_V] + r->state, r->n,
                 r->offset, owned_decay(m, r), &h, m->stream);
}

inline void muon_step(GPT* m, const OwnedRange* r, const OptimizerStep* step) {  // one matrix
    const OptimizerConfig* o = &m->opt;
    const ParamTensor* t = &m->layout.tensors[r->tensor];
    const MuonHyper h = {step->lr,         o->muon_momentum, o->muon_nesterov != 0,
                         o->muon_ns_steps, step->grad_scale, step->seed};
    muon_update(owned_params(m, r), owned_master(m, r), dp_owned_grad(&m->dp, r),
                m->opt_state[MUON_MOMENTUM] + r->state, t->rows / t->matrices, t->cols, 1,
                r->offset, t->lr_scale, owned_decay(m, r), &h, &m->muon, &m->mm,
                m->tensor_parallel.group, t->tp_shape.split, t->tp_shape.replicas, m->stream);
}

inline void lion_step(GPT* m, const OwnedRange* r, const OptimizerStep* step) {
    const OptimizerConfig* o = &m->opt;
    const LionHyper h = {step->lr * m->layout.tensors[r->tensor].lr_scale, o->lion_beta1,
                         o->lion_beta2, step->grad_scale, step->seed};
    lion_update(owned_params(m, r), owned_master(m, r), dp_owned_grad(&m->dp, r),
                m->opt_state[LION_M] + r->state, r->n, r->offset, owned_decay(m, r), &h, m->stream);
}

// One optimizer step: a loop over the ranges of the parameter table this rank owns (everything
// at ZeRO-0), each through its tensor's optimizer's update (OPTIMIZERS) at the optimizer's
// scheduled lr (times the tensor's lr_scale), with the gradients scaled by grad_scale
// (clipping); then, under ZeRO, the updated parameters go from their owners to every rank.
inline void gpt_update(GPT* m, const double lr[NUM_OPTIMIZERS], double grad_scale) {
    m->opt_step++;
    // the step's FP8 amaxes are complete (delayed scaling): over every rank that trains on a
    // part of the global batch or holds a part of a cut tensor, and over the pipeline's stages
    // (each has its own layers' amaxes: every rank then holds every layer's history)
    const CommGroup* fp8_groups[] = {m->dp.group, m->tensor_parallel.group, m->pipe.group};
    fp8_end_step(&m->fp8, fp8_groups, 3, m->stream);
    m->fp8.params_version++;
    const uint32_t seed = update_seed(m->seed, m->opt_step);
    if (m->mon.config.update_ratio) {  // the weights of record before the update
        size_t elems;
        const float* now = weights_of_record(m, &elems);
        CUDA_CHECK(cudaMemcpyAsync(m->mon.before, now, elems * sizeof(float),
                                   cudaMemcpyDeviceToDevice, m->stream));
    }
    for (int i = 0; i < m->dp.owned_count; i++) {
        const OwnedRange* r = &m->dp.owned[i];
        const int kind = m->layout.tensors[r->tensor].optimizer;
        const OptimizerStep step = {lr[kind], grad_scale, seed};
        OPTIMIZERS[kind].update(m, r, &step);
    }
    // Muon's gathers of the tensor-parallel parts (the data-parallel gather waits for itself)
    if (m->tensor_parallel.size > 1)
        comm_sync(m->tensor_parallel.group, m->stream, "Muon's tensor-parallel gathers (NCCL)");
    dp_gather_params(&m->dp, m->params, m->stream);
    gpt_monitors_finish(m, true);
}

// A step whose update is not taken (llmc/stability.h): the parameters and the optimizer state
// stay as they are; the step's delayed-scaling amaxes (FP8) are dropped with it. Those include
// the weights', recorded when a weight is quantized (or, with --fp8-allgather, gathered) at its
// first use after a change: the next step quantizes and gathers every weight again, so that its
// amaxes count, as in a run resumed or rewound to this point.
inline void gpt_skip_update(GPT* m) {
    if (m->config.fp8.recipe == FP8_DELAYED) {
        fp8_delayed_discard_step(&m->fp8.delayed, m->stream);
        m->fp8.params_version++;
        dp_params_stale(&m->dp);
    }
    gpt_monitors_finish(m, false);
}

// Training FLOPs per token: 6 per parameter of the matmuls (forward 2, backward 4) plus the
// attention scores and weighted sums (causal: on average T/2 keys per query, 2 matmuls of
// 2*C*T/2 flops each, times 3 for forward and backward).
inline double flops_per_token(const GPTConfig* c, int T) {
    const double C = c->channels, L = c->layers;
    double matmul_params = L * 12.0 * C * C + (double)c->padded_vocab * C;
    return 6.0 * matmul_params + 6.0 * L * C * T;
}

// What a recompute policy adds to that per token: full reruns every block's forward pass up to
// the GELU (its matmuls, 2 FLOPs per block parameter but the MLP projection's 4C^2, and the
// attention forward, 2CT per block; the lm head is not rerun); selective reruns LayerNorms and
// GELUs only (a few FLOPs per activation: counted as 0 here, like the other elementwise work).
inline double recompute_flops_per_token(const GPTConfig* c, int T, int policy) {
    if (policy != RECOMPUTE_FULL) return 0.0;
    const double C = c->channels, L = c->layers;
    return L * (2.0 * 8.0 * C * C + 2.0 * C * T);
}

// =============================================================================================
// The run: data, sampling, checkpoints, the command line, the memory plan and the training loop.
// TRAIN_GPT_MODEL_ONLY (the kernel harnesses in dev/cuda) leaves it out: the model alone.
#ifndef TRAIN_GPT_MODEL_ONLY
#include "train_run.cuh"
#endif
