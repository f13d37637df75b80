// Tests NCCL point-to-point calls, groups and communicator splits across ranks that are
// processes (mpirun), each check against values computed here from the ranks' known inputs:
// - ncclGetVersion, ncclCommCount, ncclCommUserRank, ncclCommCuDevice (the device set before
//   ncclCommInitRank);
// - a grouped send/recv ring in both directions at once, and 20 messages to the same peer in
//   one group (more than can be in flight at a time in the CPU NCCL, so the receiver must drain
//   them while the sender is still sending);
// - send/recv to self inside a group, the receive issued before the send;
// - a group mixing an AllReduce with send/recv, and ncclBcast (the legacy in-place broadcast);
// - ncclCommSplit by parity with keys that reverse the order (new rank = order by key), with
//   NCCL_SPLIT_NOCOLOR on rank 0 (it gets a NULL communicator, the others a working one), into
//   one communicator per rank, a split of a split, and two splits of one communicator issued
//   inside one group; every new communicator runs an AllReduce of the parent ranks of its
//   members.
// Multi-rank runs need one GPU per rank, hence cpu-only here.
//! cucc: -lnccl --mpi
//! cpu-only
//! run: mpirun -np 1 ./prog => pass /all \d+ nccl p2p and split checks passed on 1 ranks/
//! run: mpirun -np 2 ./prog => pass /all \d+ nccl p2p and split checks passed on 2 ranks/
//! run: mpirun -np 3 ./prog => pass /all \d+ nccl p2p and split checks passed on 3 ranks/
//! run: mpirun -np 4 ./prog => pass /all \d+ nccl p2p and split checks passed on 4 ranks/

#include <stdio.h>
#include <stdlib.h>
#include <vector>
#include "nccl_mpi_test_util.h"

static int g_rank, g_checks, g_failures;
static cudaStream_t g_stream;

static void expect(bool ok, const char* what, int got, int want) {
    g_checks++;
    if (!ok) {
        g_failures++;
        printf("FAIL rank %d: %s: got %d, expected %d\n", g_rank, what, got, want);
    }
}

// Rank r's message tag for element i: distinct across ranks, messages and elements.
static int value(int rank, int message, int i) { return rank * 1000000 + message * 1000 + i; }

static int* device_ints(const std::vector<int>& host) {
    int* d;
    CUDA_CHECK(cudaMalloc(&d, host.size() * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(int), cudaMemcpyHostToDevice));
    return d;
}
static std::vector<int> host_ints(const int* d, size_t n) {
    CUDA_CHECK(cudaStreamSynchronize(g_stream));
    std::vector<int> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
    return h;
}
static void expect_message(const char* what, const int* d, size_t n, int rank, int message) {
    std::vector<int> h = host_ints(d, n);
    size_t bad = 0;
    while (bad < n && h[bad] == value(rank, message, (int)bad)) bad++;
    expect(bad == n, what, bad < n ? h[bad] : 0, bad < n ? value(rank, message, (int)bad) : 0);
}

// AllReduce (sum) of each member's parent rank over comm; checks it equals want.
static void expect_member_sum(ncclComm_t comm, int want, const char* what) {
    int* d = device_ints({g_rank});
    NCCL_CHECK(ncclAllReduce(d, d, 1, ncclInt32, ncclSum, comm, g_stream));
    expect(host_ints(d, 1)[0] == want, what, host_ints(d, 1)[0], want);
    CUDA_CHECK(cudaFree(d));
}

int main(int argc, char** argv) {
    int n, device = -1;
    ncclComm_t comm = mpi_nccl_start(&argc, &argv, &g_rank, &n);
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    const int me = g_rank, next = (me + 1) % n, prev = (me + n - 1) % n;

    int version = 0, count = 0, rank = -1, dev = -1;
    NCCL_CHECK(ncclGetVersion(&version));
    NCCL_CHECK(ncclCommCount(comm, &count));
    NCCL_CHECK(ncclCommUserRank(comm, &rank));
    NCCL_CHECK(ncclCommCuDevice(comm, &dev));
    expect(version == NCCL_VERSION_CODE, "ncclGetVersion", version, NCCL_VERSION_CODE);
    expect(count == n, "ncclCommCount", count, n);
    expect(rank == me, "ncclCommUserRank", rank, me);
    expect(dev == device, "ncclCommCuDevice", dev, device);

    // Ring in both directions in one group: send to next and prev, receive from both.
    const int N = 333;
    std::vector<int> mine(N), mine2(N);
    for (int i = 0; i < N; i++) mine[i] = value(me, 0, i), mine2[i] = value(me, 1, i);
    int* send0 = device_ints(mine);
    int* send1 = device_ints(mine2);
    int* from_prev = device_ints(std::vector<int>(N, -1));
    int* from_next = device_ints(std::vector<int>(N, -1));
    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclSend(send0, N, ncclInt32, next, comm, g_stream));
    NCCL_CHECK(ncclSend(send1, N, ncclInt32, prev, comm, g_stream));
    NCCL_CHECK(ncclRecv(from_prev, N, ncclInt32, prev, comm, g_stream));
    NCCL_CHECK(ncclRecv(from_next, N, ncclInt32, next, comm, g_stream));
    NCCL_CHECK(ncclGroupEnd());
    if (next == prev) {
        // One or two ranks: messages to one peer are matched in the order they were issued.
        expect_message("ring: first message from the other rank", from_prev, N, prev, 0);
        expect_message("ring: second message from the other rank", from_next, N, next, 1);
    } else {
        expect_message("ring: message from prev", from_prev, N, prev, 0);
        expect_message("ring: message from next", from_next, N, next, 1);
    }

    // 20 messages to the next rank in one group, each of its own size.
    const int M = 20;
    std::vector<int*> sends(M), recvs(M);
    NCCL_CHECK(ncclGroupStart());
    for (int m = 0; m < M; m++) {
        std::vector<int> msg(m + 1);
        for (int i = 0; i <= m; i++) msg[i] = value(me, m, i);
        sends[m] = device_ints(msg);
        recvs[m] = device_ints(std::vector<int>(m + 1, -1));
        NCCL_CHECK(ncclRecv(recvs[m], m + 1, ncclInt32, prev, comm, g_stream));
        NCCL_CHECK(ncclSend(sends[m], m + 1, ncclInt32, next, comm, g_stream));
    }
    NCCL_CHECK(ncclGroupEnd());
    for (int m = 0; m < M; m++) {
        char what[64];
        snprintf(what, sizeof(what), "message %d of %d from prev", m, M);
        expect_message(what, recvs[m], m + 1, prev, m);
    }

    // Send to self, the receive issued first.
    int* self = device_ints(std::vector<int>(N, -1));
    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclRecv(self, N, ncclInt32, me, comm, g_stream));
    NCCL_CHECK(ncclSend(send0, N, ncclInt32, me, comm, g_stream));
    NCCL_CHECK(ncclGroupEnd());
    expect_message("send/recv to self", self, N, me, 0);

    // A group with a collective and a ring step; then the legacy in-place broadcast.
    int* sum = device_ints({me + 1});
    int* ring = device_ints(std::vector<int>(N, -1));
    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclAllReduce(sum, sum, 1, ncclInt32, ncclSum, comm, g_stream));
    NCCL_CHECK(ncclSend(send0, N, ncclInt32, next, comm, g_stream));
    NCCL_CHECK(ncclRecv(ring, N, ncclInt32, prev, comm, g_stream));
    NCCL_CHECK(ncclGroupEnd());
    expect(host_ints(sum, 1)[0] == n * (n + 1) / 2, "AllReduce in a group", host_ints(sum, 1)[0],
           n * (n + 1) / 2);
    expect_message("ring step in a group with an AllReduce", ring, N, prev, 0);
    int* bcast = device_ints(me == n - 1 ? mine : std::vector<int>(N, -1));
    NCCL_CHECK(ncclBcast(bcast, N, ncclInt32, n - 1, comm, g_stream));
    expect_message("ncclBcast from the last rank", bcast, N, n - 1, 0);

    // Split by parity; key -rank puts the higher parent ranks first.
    ncclComm_t parity;
    NCCL_CHECK(ncclCommSplit(comm, me % 2, -me, &parity, nullptr));
    int members = 0, position = 0, member_sum = 0;
    for (int r = 0; r < n; r++) {
        if (r % 2 != me % 2) continue;
        members++;
        member_sum += r;
        if (r > me) position++;
    }
    NCCL_CHECK(ncclCommCount(parity, &count));
    NCCL_CHECK(ncclCommUserRank(parity, &rank));
    NCCL_CHECK(ncclCommCuDevice(parity, &dev));
    expect(count == members, "split by parity: size", count, members);
    expect(rank == position, "split by parity: rank ordered by key", rank, position);
    expect(dev == device, "split by parity: device of the parent", dev, device);
    expect_member_sum(parity, member_sum, "split by parity: AllReduce of parent ranks");

    // A split of the split: within the parity group, keep all (color 7) with equal keys, so the
    // order follows the parity communicator's ranks.
    ncclComm_t again;
    NCCL_CHECK(ncclCommSplit(parity, 7, 0, &again, nullptr));
    NCCL_CHECK(ncclCommUserRank(again, &rank));
    expect(rank == position, "split of a split: rank follows the parent on equal keys", rank,
           position);
    expect_member_sum(again, member_sum, "split of a split: AllReduce of parent ranks");

    // NCCL_SPLIT_NOCOLOR on rank 0.
    ncclComm_t without0 = comm;  // must become NULL on rank 0
    NCCL_CHECK(ncclCommSplit(comm, me == 0 ? NCCL_SPLIT_NOCOLOR : 3, me, &without0, nullptr));
    if (me == 0) {
        expect(without0 == nullptr, "NCCL_SPLIT_NOCOLOR gives a NULL communicator",
               without0 != nullptr, 0);
    } else {
        NCCL_CHECK(ncclCommCount(without0, &count));
        expect(count == n - 1, "split without rank 0: size", count, n - 1);
        expect_member_sum(without0, n * (n - 1) / 2, "split without rank 0: AllReduce");
    }

    // One communicator per rank and a copy of the parent, split in one group.
    ncclComm_t alone, copy;
    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclCommSplit(comm, me, 0, &alone, nullptr));
    NCCL_CHECK(ncclCommSplit(comm, 0, me, &copy, nullptr));
    NCCL_CHECK(ncclGroupEnd());
    NCCL_CHECK(ncclCommCount(alone, &count));
    expect(count == 1, "split into single ranks (in a group): size", count, 1);
    expect_member_sum(alone, me, "split into single ranks: AllReduce");
    NCCL_CHECK(ncclCommCount(copy, &count));
    NCCL_CHECK(ncclCommUserRank(copy, &rank));
    expect(count == n && rank == me, "second split in the same group: a copy of the parent",
           count * 100 + rank, n * 100 + me);
    expect_member_sum(copy, n * (n - 1) / 2, "second split in the same group: AllReduce");

    // The parent still works after all the splits.
    expect_member_sum(comm, n * (n - 1) / 2, "parent after the splits: AllReduce");

    ncclResult_t async;
    for (ncclComm_t c : {comm, parity, again, alone, copy}) {
        NCCL_CHECK(ncclCommGetAsyncError(c, &async));
        expect(async == ncclSuccess, "no async error", async, ncclSuccess);
    }
    NCCL_CHECK(ncclCommDestroy(copy));
    NCCL_CHECK(ncclCommDestroy(alone));
    if (without0) NCCL_CHECK(ncclCommDestroy(without0));
    NCCL_CHECK(ncclCommDestroy(again));
    NCCL_CHECK(ncclCommDestroy(parity));
    NCCL_CHECK(ncclCommDestroy(comm));

    return mpi_test_report("nccl p2p and split", g_checks, g_failures);
}
