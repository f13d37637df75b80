// llmc/lion.cuh: Lion's step on one tensor as one fused kernel (gradient scaling for clipping,
// the sign of the interpolated momentum, decoupled weight decay, the momentum update, the fp32
// master weight and the rounded floatX copy). train_gpt.cu's optimizer table decides which
// tensors it updates. Entry point: lion_update.
//
// Lion ("Symbolic Discovery of Optimization Algorithms", Chen et al. 2023), with
// g = grad * grad_scale:
//   c = b1*m + (1-b1)*g;  p = p * (1 - lr*wd) - lr * sign(c)  (sign(0) = 0)
//   m = b2*m + (1-b2)*g
// Every element moves by lr whatever its gradient's size, so its lr is some 3-10x smaller than
// AdamW's. In the bf16 build p is the fp32 master weight and the model's bf16 copy is written
// from it with stochastic rounding (as AdamW's); in the fp32 build the parameters are the master
// weights.
#pragma once

#include "common.cuh"

struct LionHyper {
    double lr, beta1, beta2;
    double grad_scale;  // multiplies every gradient (gradient clipping)
    uint32_t seed;      // stochastic rounding seed of this step
};

// The per-tensor constants, computed on the host in double as the reference does.
struct LionScalars {
    float lr, beta1, beta2, grad_scale;
    float one_minus_beta1, one_minus_beta2;  // rounded from double, as the reference's are
    float decay_factor;                      // 1 - lr * weight_decay
    uint32_t seed;
};

// One thread per element (grid-stride). params/grads/master/m point at the same tensor in their
// buffers; `offset` is the tensor's offset in the buffer, so the rounding noise of an element
// depends only on its global position.
static __global__ void lion_kernel(floatX* params, float* master, const floatX* grads, float* m,
                                   size_t n, size_t offset, LionScalars s) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float g = (float)grads[i] * s.grad_scale;
        const float c = s.beta1 * m[i] + s.one_minus_beta1 * g;
        const float update = (float)((c > 0.0f) - (c < 0.0f));
        m[i] = s.beta2 * m[i] + s.one_minus_beta2 * g;
        float p = master ? master[i] : (float)params[i];
        p *= s.decay_factor;
        p -= s.lr * update;
        if (master) master[i] = p;
        stochastic_round_store(&params[i], p, s.seed, offset + i);
    }
}

// Updates one tensor of n elements. master is nullptr in the fp32 build.
inline void lion_update(floatX* params, float* master, const floatX* grads, float* m, size_t n,
                        size_t offset, double weight_decay, const LionHyper* h,
                        cudaStream_t stream) {
    LionScalars s;
    s.lr = (float)h->lr;
    s.beta1 = (float)h->beta1;
    s.beta2 = (float)h->beta2;
    s.grad_scale = (float)h->grad_scale;
    s.one_minus_beta1 = (float)(1.0 - h->beta1);
    s.one_minus_beta2 = (float)(1.0 - h->beta2);
    s.decay_factor = (float)(1.0 - h->lr * weight_decay);
    s.seed = h->seed;
    const int block = 256;
    int grid = (int)(ceil_div(n, block) < 4096 ? ceil_div(n, block) : 4096);
    lion_kernel<<<grid, block, 0, stream>>>(params, master, grads, m, n, offset, s);
    CUDA_CHECK_LAUNCH();
}
