// NCCL 2.28's device API (nccl_device.h) is not part of the CPU NCCL: including it stops the
// build with an error naming what is missing (dev/cpu/include/nccl_device.h says why).
//! cpu-only
//! compile: fail /nccl_device\.h:\d+:\d+: error: #error "cucc: NCCL's device API \(nccl_device\.h: ncclDevComm, ncclDevCommCreate, ncclLsaBarrierSession, ncclGetLsaPointer, ncclGin\) is not part of the CPU NCCL/
#include <nccl.h>
#include <nccl_device.h>

int main() { return 0; }
