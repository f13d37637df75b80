// mma.h (CPU runtime shadow): tensor-core WMMA has no CPU implementation in cucc.
#pragma once
#error "cucc: tensor-core wmma/mma (mma.h) has no CPU equivalent; guard it with #ifdef __CUDA_ARCH__ and give a portable fallback"
