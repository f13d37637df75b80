// comm_collectives.cu built without -DMULTI_GPU: llmc/comm.cuh compiles to its single-process
// version (no MPI, no NCCL), where the same checks hold for rank 0 of 1; and a process that a
// launcher started as one of several ranks refuses to run alone. Runs natively as well.
//! run: ./prog => pass /all comm checks passed on 1 ranks \(launched: no, single-process build\)/
//! run: OMPI_COMM_WORLD_SIZE=2 ./prog => fail /started as one of 2 ranks, but this binary was built without multi-GPU support/
//! run: PMI_SIZE=4 ./prog => fail /started as one of 4 ranks/
#include "comm_collectives.cu"
