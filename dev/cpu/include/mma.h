// mma.h (CPU runtime shadow): the nvcuda::wmma API has no CPU implementation in cucc. The
// tensor-core instructions themselves run as inline PTX (mma.sync, ldmatrix: cucc/ptx.h).
#pragma once
#error \
    "cucc: nvcuda::wmma (mma.h) is not supported by the CPU runtime; it runs tensor-core code written with inline PTX mma.sync and ldmatrix (dev/cpu/include/cucc/ptx.h)"
