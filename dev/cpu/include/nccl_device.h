// nccl_device.h (CPU runtime shadow): NCCL 2.28's device API is not part of the CPU NCCL.
//
// The device API (ncclDevComm and ncclDevCommCreate, ncclLsaBarrierSession, ncclGetLsaPointer,
// ncclGin ...) lets a kernel load and store the buffers of the peers of a symmetric memory window
// (ncclCommWindowRegister) directly, over NVLink ("LSA": load/store accessible) or the network,
// and meet them at barriers in device code. The CPU NCCL (dev/cpu/nccl) runs each rank as a
// process of its own that exchanges data through shared files, and maps no peer's device memory
// into a kernel's address space, so such kernels have nothing to run on: a program that
// includes this header stops here, naming what is missing, instead of failing later with
// undefined symbols or wrong data. The host API of nccl.h (collectives, send/recv, groups,
// ncclMemAlloc, ncclCommRegister) is there.
#pragma once

#error \
    "cucc: NCCL's device API (nccl_device.h: ncclDevComm, ncclDevCommCreate, ncclLsaBarrierSession, ncclGetLsaPointer, ncclGin) is not part of the CPU NCCL: its kernels address the peers' memory directly through symmetric windows, which the CPU NCCL's ranks (processes exchanging through shared files) do not have; use the host API of nccl.h (see README.md)"
