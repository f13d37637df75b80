// comm.cpp: communicators. Unique ids, ncclCommInitRank(Config), ncclCommInitAll, ncclCommSplit,
// finalize/destroy/abort, the queries, version and error strings.
//
// A communicator is named by 32 hex digits: the random bytes of its ncclUniqueId, or for a split
// a hash of the parent's name, the split's number and the color, which every member computes
// alike. Creation has phases (see complete_inits) so that one thread can create the
// communicators of several ranks inside ncclGroupStart/End, as ncclCommInitAll does.
#include <sys/random.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "nccl_internal.h"

#include <cucc/streams.h>
#include <cuda_runtime_api.h>

namespace cucc_nccl {

namespace {

// What ncclGetUniqueId writes into ncclUniqueId::internal.
struct IdContents {
    char magic[16];
    unsigned char random[16];
};
static_assert(sizeof(IdContents) <= NCCL_UNIQUE_ID_BYTES, "id does not fit ncclUniqueId");
constexpr char kIdMagic[16] = "cucc-nccl-id-1";
constexpr unsigned kConfigMagic = 0xcafebeef;  // set by NCCL_CONFIG_INITIALIZER

std::string hex(const unsigned char* bytes, size_t n) {
    static const char digits[] = "0123456789abcdef";
    std::string s;
    for (size_t i = 0; i < n; i++) {
        s += digits[bytes[i] >> 4];
        s += digits[bytes[i] & 15];
    }
    return s;
}

uint64_t mix64(uint64_t x) {  // splitmix64's finalizer
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// Name of the communicator made by split number `split` of `parent` for `color`.
std::string child_name(const std::string& parent, uint64_t split, int color) {
    unsigned char bytes[16];
    for (int half = 0; half < 2; half++) {
        uint64_t h = mix64(uint64_t(half) + 1);
        for (char ch : parent) h = mix64(h ^ uint64_t((unsigned char)ch));
        h = mix64(h ^ split);
        h = mix64(h ^ uint64_t(uint32_t(color)));
        memcpy(bytes + 8 * half, &h, 8);
    }
    return hex(bytes, 16);
}

double timeout_from_env() {
    const char* s = getenv("CUCC_NCCL_TIMEOUT");
    if (!s || !*s) return 300;
    char* end = nullptr;
    double t = strtod(s, &end);
    if (*end != 0 || !(t > 0)) {
        report("CUCC_NCCL_TIMEOUT=%s is not a positive number of seconds; using 300", s);
        return 300;
    }
    return t;
}

std::shared_ptr<CommState> new_state(const std::string& name, int nranks, int rank, int device) {
    auto c = std::make_shared<CommState>();
    c->name = name;
    c->dir = data_dir();
    c->nranks = nranks;
    c->rank = rank;
    c->device = device;
    c->timeout_s = timeout_from_env();
    c->send_seq.assign(size_t(nranks), 0);
    c->recv_seq.assign(size_t(nranks), 0);
    return c;
}

ncclResult_t check_config(const char* api, const ncclConfig_t* config) {
    if (!config) return ncclSuccess;
    if (config->magic != kConfigMagic) {
        report("%s: config was not initialized with NCCL_CONFIG_INITIALIZER", api);
        return ncclInvalidArgument;
    }
    // Every call completes before it returns, which a non-blocking communicator allows too.
    if (config->blocking != NCCL_CONFIG_UNDEF_INT && config->blocking != 0 &&
        config->blocking != 1) {
        report("%s: config.blocking is %d, not 0 or 1", api, config->blocking);
        return ncclInvalidArgument;
    }
    return ncclSuccess;
}

// Waits until done(r) holds for every rank of c. A rank still owing is checked for having
// exited, failed or left; the wait fails after the timeout.
template <class Done>
ncclResult_t wait_ranks(CommState* c, const char* what, Done done) {
    double start = now_s();
    std::vector<double> next_check(size_t(c->nranks), 0.0);
    for (;;) {
        bool all = true;
        for (int r = 0; r < c->nranks; r++) {
            if (done(r)) continue;
            all = false;
            const char* why = peer_gone(c, r, &next_check[size_t(r)]);
            if (why && !done(r)) {  // done again: it may have acted, then left
                fail_waiting_on(c, r, why, what);
                return ncclRemoteError;
            }
        }
        if (all) return ncclSuccess;
        double waited = now_s() - start;
        if (waited > c->timeout_s) {
            comm_fail(c, ncclSystemError, "%s: timed out after %.0f s (CUCC_NCCL_TIMEOUT)", what,
                      c->timeout_s);
            return ncclSystemError;
        }
        idle_wait(waited);
    }
}

// ncclCommSplit, first half: publish this rank's color and key once every rank has read the
// previous split's (the fields are reused).
ncclResult_t post_split(PendingInit& p) {
    CommState* parent = p.parent.get();
    SharedRank* ranks = parent->ranks();
    ncclResult_t res = wait_ranks(parent, "ncclCommSplit", [&](int r) {
        return ranks[r].splits_read.load(std::memory_order_acquire) >= p.split_index;
    });
    if (res != ncclSuccess) return res;
    SharedRank& me = ranks[parent->rank];
    me.split_color.store(p.color, std::memory_order_relaxed);
    me.split_key.store(p.key, std::memory_order_relaxed);
    me.splits_posted.store(p.split_index + 1, std::memory_order_release);
    return ncclSuccess;
}

// ncclCommSplit, second half: read everybody's color and key, and make this rank's child: the
// ranks of its color ordered by key, then by parent rank.
ncclResult_t read_split(PendingInit& p) {
    CommState* parent = p.parent.get();
    SharedRank* ranks = parent->ranks();
    ncclResult_t res = wait_ranks(parent, "ncclCommSplit", [&](int r) {
        return ranks[r].splits_posted.load(std::memory_order_acquire) >= p.split_index + 1;
    });
    if (res != ncclSuccess) return res;
    struct Member {
        int key, parent_rank;
    };
    std::vector<Member> members;
    for (int r = 0; r < parent->nranks; r++) {
        if (ranks[r].split_color.load(std::memory_order_relaxed) == p.color) {
            members.push_back({ranks[r].split_key.load(std::memory_order_relaxed), r});
        }
    }
    ranks[parent->rank].splits_read.store(p.split_index + 1, std::memory_order_release);
    if (p.color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
    std::sort(members.begin(), members.end(), [](const Member& a, const Member& b) {
        return a.key != b.key ? a.key < b.key : a.parent_rank < b.parent_rank;
    });
    int rank = 0;
    while (members[size_t(rank)].parent_rank != parent->rank) rank++;
    p.state = new_state(child_name(parent->name, p.split_index, p.color), int(members.size()), rank,
                        parent->device);
    return ncclSuccess;
}

}  // namespace

ncclResult_t complete_inits(std::vector<PendingInit>& inits) {
    // Phase by phase over all pending inits, so that none waits on a rank of this thread that
    // has not reached the same phase. A failed init keeps its error and drops out.
    std::vector<ncclResult_t> result(inits.size(), ncclSuccess);
    // Splits go in rounds of at most one per parent (its earliest pending one), because a
    // parent's next split waits until every rank has read the previous one.
    std::vector<bool> split_done(inits.size(), false);
    for (;;) {
        std::vector<size_t> round;
        for (size_t i = 0; i < inits.size(); i++) {
            if (!inits[i].parent || split_done[i]) continue;
            bool parent_taken = false;
            for (size_t j : round) parent_taken |= inits[j].parent == inits[i].parent;
            if (!parent_taken) round.push_back(i);
        }
        if (round.empty()) break;
        for (size_t i : round) result[i] = post_split(inits[i]);
        for (size_t i : round) {
            if (result[i] == ncclSuccess) result[i] = read_split(inits[i]);
            split_done[i] = true;
        }
    }
    for (size_t i = 0; i < inits.size(); i++) {
        if (inits[i].state && result[i] == ncclSuccess) result[i] = attach(inits[i].state.get());
    }
    for (size_t i = 0; i < inits.size(); i++) {
        if (inits[i].state && result[i] == ncclSuccess) {
            result[i] = wait_all_attached(inits[i].state.get());
        }
    }
    ncclResult_t first = ncclSuccess;
    for (size_t i = 0; i < inits.size(); i++) {
        bool ok = result[i] == ncclSuccess && inits[i].state;
        *inits[i].out = ok ? new ncclComm{inits[i].state} : nullptr;
        if (first == ncclSuccess) first = result[i];
    }
    return first;
}

}  // namespace cucc_nccl

using namespace cucc_nccl;

// ---------------------------------------------------------------------------------------------
// Version, ids, errors.

ncclResult_t ncclGetVersion(int* version) {
    if (!version) {
        report("ncclGetVersion: version argument is NULL");
        return ncclInvalidArgument;
    }
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
    if (!uniqueId) {
        report("ncclGetUniqueId: uniqueId argument is NULL");
        return ncclInvalidArgument;
    }
    IdContents id;
    memcpy(id.magic, kIdMagic, sizeof(id.magic));
    if (getrandom(id.random, sizeof(id.random), 0) != ssize_t(sizeof(id.random))) {
        report("ncclGetUniqueId: getrandom failed");
        return ncclSystemError;
    }
    memset(uniqueId, 0, sizeof(*uniqueId));
    memcpy(uniqueId->internal, &id, sizeof(id));
    return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
    switch (result) {
        case ncclSuccess:
            return "no error";
        case ncclUnhandledCudaError:
            return "unhandled cuda error";
        case ncclSystemError:
            return "system error (a system call failed, or a timeout)";
        case ncclInternalError:
            return "internal error";
        case ncclInvalidArgument:
            return "invalid argument";
        case ncclInvalidUsage:
            return "invalid usage";
        case ncclRemoteError:
            return "remote error (a peer exited, failed or aborted)";
        case ncclInProgress:
            return "operation in progress";
        default:
            return "unknown result code";
    }
}

const char* ncclGetLastError(ncclComm_t comm) { return last_error(); }

// ---------------------------------------------------------------------------------------------
// Creation.

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config) {
    const char* api = "ncclCommInitRank";
    if (!comm) {
        report("%s: comm argument is NULL", api);
        return call_error(ncclInvalidArgument);
    }
    *comm = nullptr;  // until the communicator is complete
    if (nranks < 1 || nranks > kMaxRanks) {
        report("%s: nranks %d is not in 1..%d (the CPU NCCL's limit)", api, nranks, kMaxRanks);
        return call_error(ncclInvalidArgument);
    }
    if (rank < 0 || rank >= nranks) {
        report("%s: rank %d is not in 0..%d", api, rank, nranks - 1);
        return call_error(ncclInvalidArgument);
    }
    IdContents id;
    memcpy(&id, commId.internal, sizeof(id));
    if (memcmp(id.magic, kIdMagic, sizeof(id.magic)) != 0) {
        report("%s: the ncclUniqueId was not made by ncclGetUniqueId", api);
        return call_error(ncclInvalidArgument);
    }
    if (ncclResult_t res = check_config(api, config)) return call_error(res);
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
        report("%s: cudaGetDevice failed", api);
        return call_error(ncclUnhandledCudaError);
    }
    PendingInit p;
    p.state = new_state(hex(id.random, sizeof(id.random)), nranks, rank, device);
    p.out = comm;
    if (in_group()) {
        defer_init(p);
        return ncclSuccess;
    }
    std::vector<PendingInit> one{p};
    return complete_inits(one);
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
    return ncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
    if (!comms) {
        report("ncclCommInitAll: comms argument is NULL");
        return ncclInvalidArgument;
    }
    if (ndev < 0 || ndev > kMaxRanks) {
        report("ncclCommInitAll: ndev %d is not in 0..%d", ndev, kMaxRanks);
        return ncclInvalidArgument;
    }
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) return ncclUnhandledCudaError;
    for (int i = 0; devlist && i < ndev; i++) {
        if (devlist[i] < 0 || devlist[i] >= count) {
            report("ncclCommInitAll: device %d does not exist (%d devices)", devlist[i], count);
            return ncclInvalidArgument;
        }
        for (int j = 0; j < i; j++) {
            if (devlist[j] == devlist[i]) {
                report("ncclCommInitAll: device %d appears twice in devlist", devlist[i]);
                return ncclInvalidUsage;
            }
        }
    }
    if (!devlist && ndev > count) {
        report("ncclCommInitAll: %d devices asked for, %d exist", ndev, count);
        return ncclUnhandledCudaError;
    }
    if (ndev == 0) return ncclSuccess;
    ncclUniqueId id;
    if (ncclResult_t res = ncclGetUniqueId(&id)) return res;
    int saved = 0;
    if (cudaGetDevice(&saved) != cudaSuccess) return ncclUnhandledCudaError;
    // One rank per device, created together in a group by this one thread.
    ncclGroupStart();
    for (int i = 0; i < ndev; i++) {
        cudaSetDevice(devlist ? devlist[i] : i);
        ncclCommInitRank(&comms[i], ndev, id, i);
    }
    ncclResult_t res = ncclGroupEnd();
    cudaSetDevice(saved);
    return res;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
    const char* api = "ncclCommSplit";
    if (!comm) {
        report("%s: comm argument is NULL", api);
        return call_error(ncclInvalidArgument);
    }
    if (!newcomm) {
        report("%s: newcomm argument is NULL", api);
        return call_error(ncclInvalidArgument);
    }
    *newcomm = nullptr;  // until the communicator is complete
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
        report("%s: color %d is negative and not NCCL_SPLIT_NOCOLOR", api, color);
        return call_error(ncclInvalidArgument);
    }
    if (ncclResult_t res = check_config(api, config)) return call_error(res);
    CommState* parent = comm->state.get();
    if (ncclResult_t res = ncclResult_t(parent->async_error.load())) return call_error(res);
    PendingInit p;
    p.out = newcomm;
    p.parent = comm->state;
    p.split_index = parent->splits++;
    p.color = color;
    p.key = key;
    if (in_group()) {
        defer_init(p);
        return ncclSuccess;
    }
    std::vector<PendingInit> one{p};
    return complete_inits(one);
}

// ---------------------------------------------------------------------------------------------
// Teardown.

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    if (!comm) return ncclSuccess;  // as NCCL
    CommState* c = comm->state.get();
    if (c->finalized) {
        report("ncclCommFinalize: communicator %.8s was finalized already", c->name.c_str());
        return ncclInvalidArgument;
    }
    // Flush: run the streams (of every device: ncclCommInitAll's ranks share a thread) until this
    // communicator's queued operations have finished, or it has failed: its operations then
    // never finish (see progress in collectives.cpp), and the error is the result.
    cucc::run_until([c] { return c->pending.load() == 0 || c->async_error.load() != ncclSuccess; });
    c->finalized = true;
    ncclResult_t res = ncclResult_t(c->async_error.load());
    if (c->pending.load() > 0 && res == ncclSuccess) {
        comm_fail(c, ncclInternalError,
                  "ncclCommFinalize: operations still queued after draining "
                  "every device");
        res = ncclInternalError;
    }
    if (res == ncclSuccess) c->ranks()[c->rank].state.store(kLeft, std::memory_order_release);
    return res;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclSuccess;  // as NCCL
    ncclResult_t res = comm->state->finalized ? ncclResult_t(comm->state->async_error.load())
                                              : ncclCommFinalize(comm);
    delete comm;
    return res;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    CommState* c = comm->state.get();
    c->aborted.store(true);
    // A post being written (another thread's progress, after a stop and continue) is published
    // before the clean-up below looks at the slots: it takes microseconds, but wait at most 1 s.
    for (const double start = now_s(); c->posting.load() > 0 && now_s() - start < 1.0;)
        idle_wait(now_s() - start);
    // Operations still queued become no-ops; peers waiting on them fail instead of hanging.
    // Without any, an abort leaves like a destroy and peers may still read what was posted.
    bool failed = c->pending.load() > 0 || c->async_error.load() != ncclSuccess;
    c->ranks()[c->rank].state.store(failed ? kFailed : kLeft, std::memory_order_release);
    unlink_at_abort(c, failed);
    delete comm;
    return ncclSuccess;
}

// ---------------------------------------------------------------------------------------------
// Queries.

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
    if (!comm || !asyncError) {
        report("ncclCommGetAsyncError: %s argument is NULL", comm ? "asyncError" : "comm");
        return ncclInvalidArgument;
    }
    *asyncError = ncclResult_t(comm->state->async_error.load());
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
    if (!comm || !count) {
        report("ncclCommCount: %s argument is NULL", comm ? "count" : "comm");
        return ncclInvalidArgument;
    }
    *count = comm->state->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
    if (!comm || !device) {
        report("ncclCommCuDevice: %s argument is NULL", comm ? "device" : "comm");
        return ncclInvalidArgument;
    }
    *device = comm->state->device;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
    if (!comm || !rank) {
        report("ncclCommUserRank: %s argument is NULL", comm ? "rank" : "comm");
        return ncclInvalidArgument;
    }
    *rank = comm->state->rank;
    return ncclSuccess;
}

// ---------------------------------------------------------------------------------------------
// Memory, registration and user-defined reductions.

// NCCL allocates with the CUDA VMM API so that the memory can be registered for NVLink SHARP and
// the like; on the CPU runtime, device memory is device memory.
ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
    if (!ptr) {
        report("ncclMemAlloc: ptr argument is NULL");
        return ncclInvalidArgument;
    }
    cudaError_t err = cudaMalloc(ptr, size);
    if (err != cudaSuccess) {
        report("ncclMemAlloc: cudaMalloc of %zu bytes failed: %s", size, cudaGetErrorString(err));
        return ncclUnhandledCudaError;
    }
    return ncclSuccess;
}

ncclResult_t ncclMemFree(void* ptr) {
    if (!ptr) return ncclSuccess;
    cudaError_t err = cudaFree(ptr);
    if (err != cudaSuccess) {
        report("ncclMemFree: %p: %s", ptr, cudaGetErrorString(err));
        return ncclUnhandledCudaError;
    }
    return ncclSuccess;
}

namespace {

ncclResult_t register_buffer(const char* api, ncclComm_t comm, void* buff, size_t size,
                             size_t alignment, void** handle) {
    if (!comm || !buff || !handle) {
        report("%s: %s argument is NULL", api, !comm ? "comm" : !buff ? "buff" : "handle");
        return ncclInvalidArgument;
    }
    if (!cucc::is_device_pointer(buff) ||
        (size > 0 && !cucc::is_device_pointer((const char*)buff + size - 1))) {
        report("%s: %p is not a device buffer of %zu bytes (cudaMalloc or ncclMemAlloc)", api, buff,
               size);
        return ncclInvalidArgument;
    }
    if ((uintptr_t)buff % alignment != 0) {
        report("%s: %p is not aligned to %zu bytes", api, buff, alignment);
        return ncclInvalidArgument;
    }
    comm->state->registrations.push_back(
        std::make_unique<CommState::Registration>(CommState::Registration{buff, size}));
    *handle = comm->state->registrations.back().get();
    return ncclSuccess;
}

ncclResult_t deregister_buffer(const char* api, ncclComm_t comm, void* handle) {
    if (!comm) {
        report("%s: comm argument is NULL", api);
        return ncclInvalidArgument;
    }
    auto& regs = comm->state->registrations;
    for (auto it = regs.begin(); it != regs.end(); ++it) {
        if (it->get() == handle) {
            regs.erase(it);
            return ncclSuccess;
        }
    }
    report("%s: %p is not a registration of this communicator", api, handle);
    return ncclInvalidArgument;
}

}  // namespace

ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
    return register_buffer("ncclCommRegister", comm, buff, size, 1, handle);
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
    return deregister_buffer("ncclCommDeregister", comm, handle);
}

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                    int flags) {
    if (flags != NCCL_WIN_DEFAULT && flags != NCCL_WIN_COLL_SYMMETRIC) {
        report(
            "ncclCommWindowRegister: flags %d are not NCCL_WIN_DEFAULT or "
            "NCCL_WIN_COLL_SYMMETRIC",
            flags);
        return ncclInvalidArgument;
    }
    size_t alignment = flags == NCCL_WIN_COLL_SYMMETRIC ? NCCL_WIN_REQUIRED_ALIGNMENT : 1;
    return register_buffer("ncclCommWindowRegister", comm, buff, size, alignment, (void**)win);
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
    return deregister_buffer("ncclCommWindowDeregister", comm, win);
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
    const char* api = "ncclRedOpCreatePreMulSum";
    if (!op || !scalar || !comm) {
        report("%s: %s argument is NULL", api, !op ? "op" : !scalar ? "scalar" : "comm");
        return ncclInvalidArgument;
    }
    if (type_size(datatype) == 0) {
        report("%s: invalid data type %d", api, int(datatype));
        return ncclInvalidArgument;
    }
    if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate) {
        report("%s: invalid scalar residence %d", api, int(residence));
        return ncclInvalidArgument;
    }
    if (residence == ncclScalarDevice && !cucc::is_device_pointer(scalar)) {
        report("%s: the scalar %p is not device memory (ncclScalarDevice)", api, scalar);
        return ncclInvalidArgument;
    }
    CommState::UserOp u{true, datatype, residence == ncclScalarDevice, 0, scalar};
    if (!u.device) memcpy(&u.value, scalar, type_size(datatype));  // read before returning
    std::vector<CommState::UserOp>& ops = comm->state->ops;
    size_t slot = 0;
    while (slot < ops.size() && ops[slot].live) slot++;  // reuse a destroyed op's number
    if (slot == ops.size()) ops.push_back(u);
    else ops[slot] = u;
    *op = ncclRedOp_t(int(ncclNumOps) + int(slot));
    return ncclSuccess;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
    if (!comm) {
        report("ncclRedOpDestroy: comm argument is NULL");
        return ncclInvalidArgument;
    }
    size_t i = size_t(op) - size_t(ncclNumOps);
    std::vector<CommState::UserOp>& ops = comm->state->ops;
    if (int(op) < int(ncclNumOps) || i >= ops.size() || !ops[i].live) {
        report(
            "ncclRedOpDestroy: op %d was not created by ncclRedOpCreatePreMulSum on this "
            "communicator",
            int(op));
        return ncclInvalidArgument;
    }
    ops[i].live = false;  // calls already made keep their own copy
    return ncclSuccess;
}
