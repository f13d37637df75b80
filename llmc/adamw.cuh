// llmc/adamw.cuh: AdamW's step on one tensor as one fused kernel (gradient scaling for clipping,
// moment updates, bias correction, decoupled weight decay, the fp32 master weight and the rounded
// floatX copy). train_gpt.cu's parameter table decides which tensors it updates. Entry point:
// adamw_update.
//
// AdamW follows torch.optim.AdamW (the reference): with g = grad * grad_scale,
//   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g
//   p = p * (1 - lr*wd) - (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps)
// In the bf16 build p is the fp32 master weight and the model's bf16 copy is written from it
// with stochastic rounding; in the fp32 build the parameters are the master weights.
#pragma once

#include "common.cuh"

struct AdamWHyper {
    double lr, beta1, beta2, eps;
    double grad_scale;  // multiplies every gradient (gradient clipping)
    int t;              // 1-based step count, for the bias corrections
    uint32_t seed;      // stochastic rounding seed of this step
};

// The per-tensor constants, computed on the host in double as the reference does.
struct AdamWScalars {
    float beta1, beta2, eps, grad_scale;
    float decay_factor;     // 1 - lr * weight_decay
    float step_size;        // lr / (1 - beta1^t)
    float bias_corr2_sqrt;  // sqrt(1 - beta2^t)
    uint32_t seed;
};

// One thread per element (grid-stride). params/grads/master/m/v point at the same tensor in
// their buffers; `offset` is the tensor's offset in the buffer, so the rounding noise of an
// element depends only on its global position.
static __global__ void adamw_kernel(floatX* params, float* master, const floatX* grads, float* m,
                                    float* v, size_t n, size_t offset, AdamWScalars s) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = (float)grads[i] * s.grad_scale;
        float mi = m[i] + (1.0f - s.beta1) * (g - m[i]);
        float vi = s.beta2 * v[i] + (1.0f - s.beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float p = master ? master[i] : (float)params[i];
        p *= s.decay_factor;
        p -= s.step_size * (mi / (sqrtf(vi) / s.bias_corr2_sqrt + s.eps));
        if (master) master[i] = p;
        stochastic_round_store(&params[i], p, s.seed, offset + i);
    }
}

// Updates one tensor of n elements. master is nullptr in the fp32 build.
inline void adamw_update(floatX* params, float* master, const floatX* grads, float* m, float* v,
                         size_t n, size_t offset, double weight_decay, const AdamWHyper* h,
                         cudaStream_t stream) {
    AdamWScalars s;
    s.beta1 = (float)h->beta1;
    s.beta2 = (float)h->beta2;
    s.eps = (float)h->eps;
    s.grad_scale = (float)h->grad_scale;
    s.decay_factor = (float)(1.0 - h->lr * weight_decay);
    s.step_size = (float)(h->lr / (1.0 - pow(h->beta1, h->t)));
    s.bias_corr2_sqrt = (float)sqrt(1.0 - pow(h->beta2, h->t));
    s.seed = h->seed;
    const int block = 256;
    int grid = (int)(ceil_div(n, block) < 4096 ? ceil_div(n, block) : 4096);
    adamw_kernel<<<grid, block, 0, stream>>>(params, master, grads, m, v, n, offset, s);
    CUDA_CHECK_LAUNCH();
}
