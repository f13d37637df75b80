// nccl_mpi_test_util.h: what the NCCL tests that run one rank per process under mpirun share
// (build with --mpi): MPI_CHECK(call), the start-up every such program makes (MPI, one device
// per local rank, the ncclUniqueId of rank 0 broadcast over MPI, the communicator) and the
// closing report, which sums the failures of all ranks.
#pragma once

#include <mpi.h>

#include "nccl_test_util.h"

#define MPI_CHECK(call) check_mpi((call), #call, __FILE__, __LINE__)

static void check_mpi(int err, const char* call, const char* file, int line) {
    char message[MPI_MAX_ERROR_STRING] = "";
    int length = 0;
    if (err != MPI_SUCCESS) MPI_Error_string(err, message, &length);
    check_call(err == MPI_SUCCESS, message, call, file, line);
}

// Starts MPI, selects device (local rank mod device count) and returns a communicator over all
// ranks, with this process's rank and the number of ranks.
static ncclComm_t mpi_nccl_start(int* argc, char*** argv, int* rank, int* nranks) {
    MPI_CHECK(MPI_Init(argc, argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, nranks));
    MPI_Comm local;
    int local_rank = 0, devices = 0;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local));
    MPI_CHECK(MPI_Comm_rank(local, &local_rank));
    MPI_CHECK(MPI_Comm_free(&local));
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    CUDA_CHECK(cudaSetDevice(local_rank % devices));
    ncclUniqueId id;
    if (*rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
    ncclComm_t comm;
    NCCL_CHECK(ncclCommInitRank(&comm, *nranks, id, *rank));
    return comm;
}

// Sums the failures over all ranks; rank 0 prints "all N NAME checks passed on R ranks" (N: the
// checks of one rank) or how many failed. Ends MPI and returns main's exit status.
static int mpi_test_report(const char* name, int checks, int failures) {
    int rank, nranks, total = 0;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &nranks));
    MPI_CHECK(MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    if (rank == 0) {
        if (total == 0) printf("all %d %s checks passed on %d ranks\n", checks, name, nranks);
        else printf("%d of %d %s checks FAILED on %d ranks\n", total, checks, name, nranks);
    }
    MPI_CHECK(MPI_Finalize());
    return total == 0 ? 0 : 1;
}
