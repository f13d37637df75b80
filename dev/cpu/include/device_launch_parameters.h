// device_launch_parameters.h (CPU runtime shadow): threadIdx, blockIdx, blockDim, gridDim and
// warpSize are declared by cucc/runtime.h; the toolkit's version would redeclare them.
#pragma once
#include <cuda_runtime.h>
