// collectives.cpp: the collectives and send/recv of nccl.h, and ncclGroupStart/End.
//
// A call is checked at once (errors as NCCL returns them), becomes a Task and, outside a group,
// a stream op of its own; inside a group the tasks wait for ncclGroupEnd, which gives each
// stream one op running all of that stream's tasks together (as NCCL's one kernel per group),
// so a send and a receive in one group never wait on each other through stream order.
//
// A task's progress, polled by the stream op's ready() once the op is at the head of its stream:
//   1. post: write this rank's contribution (sendbuff, read now, in stream order) to a data file
//      and publish it in the rank's slot for the task's sequence number;
//   2. consume: for each source rank in order, once its slot carries the sequence number, check
//      that its call matches ours, and copy or reduce its data into recvbuff.
// Who posts and who reads:
//   AllReduce, AllGather     all post count elements; all read every contribution
//   ReduceScatter            all post nranks*count; rank r reads block r of every contribution
//   Reduce                   all post; only the root reads
//   Broadcast                the root posts; all read it (the root too: out-of-place copies)
//   Send / Recv              the sender posts to the (sender, receiver) ring; the receiver reads
// Every rank reads its own contribution from the file too, so in-place calls never read a value
// they already overwrote.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "nccl_internal.h"

#include <cucc/streams.h>
#include <cuda_runtime_api.h>

namespace cucc_nccl {

const char* kind_name(int32_t kind) {
    switch (kind) {
        case kAllReduce:
            return "ncclAllReduce";
        case kBroadcast:
            return "ncclBroadcast";
        case kReduce:
            return "ncclReduce";
        case kAllGather:
            return "ncclAllGather";
        case kReduceScatter:
            return "ncclReduceScatter";
        case kSend:
            return "ncclSend";
        case kRecv:
            return "ncclRecv";
        default:
            return "an unknown call";
    }
}

namespace {

struct Task {
    std::shared_ptr<CommState> comm;
    Kind kind;
    const void* sendbuff;
    void* recvbuff;
    size_t count;  // per rank: recvcount for ReduceScatter, sendcount for AllGather
    ncclDataType_t type;
    int op;  // a built-in ncclRedOp_t, or kPreMulSum (with the op's scalar in premul)
    CommState::UserOp premul;
    int root;  // the root, or the peer of a send/recv
    cudaStream_t stream;
    // Collective number, or message number on the (sender, receiver) ring: taken when the task
    // is queued on its stream (for a captured call, at each launch of the graph).
    uint64_t seq = 0;

    bool posted = false;
    bool done = false;
    int next = 0;                    // next source to consume
    double blocked_since = -1;       // when the task last stopped progressing
    std::vector<double> next_check;  // per rank: when to look at its process again
};

struct GroupState {
    int depth = 0;
    ncclResult_t error = ncclSuccess;
    std::vector<Task> tasks;
    std::vector<PendingInit> inits;
};
thread_local GroupState g_group;

uint64_t all_ranks(int nranks) { return nranks == 64 ? ~0ull : (1ull << nranks) - 1; }

bool is_reduction(Kind k) { return k == kAllReduce || k == kReduce || k == kReduceScatter; }

// Bytes a rank posts for this call (the same for every poster of a matching call).
size_t post_bytes(const Task& t) {
    size_t bytes = t.count * type_size(t.type);
    return t.kind == kReduceScatter ? bytes * size_t(t.comm->nranks) : bytes;
}

bool posts(const Task& t) {
    return t.kind != kRecv && (t.kind != kBroadcast || t.comm->rank == t.root);
}

int num_sources(const Task& t) {
    switch (t.kind) {
        case kAllReduce:
        case kAllGather:
        case kReduceScatter:
            return t.comm->nranks;
        case kReduce:
            return t.comm->rank == t.root ? t.comm->nranks : 0;
        case kBroadcast:
        case kRecv:
            return 1;
        default:
            return 0;
    }
}

int source_rank(const Task& t, int i) {
    return t.kind == kBroadcast || t.kind == kRecv ? t.root : i;
}

Slot* source_slot(const Task& t, int src) {
    CommState* c = t.comm.get();
    return t.kind == kRecv ? c->p2p_slot(src, c->rank, t.seq) : c->coll_slot(src, t.seq);
}

std::string source_path(const Task& t, int src) {
    CommState* c = t.comm.get();
    return t.kind == kRecv ? p2p_path(*c, src, c->rank, t.seq) : coll_path(*c, src, t.seq);
}

// Fails the task's communicator (and returns false) if rank r cannot make progress any more
// while still_waiting() holds. still_waiting is evaluated after the peer's state: a peer may
// post and then leave between our look at its slot and at its state.
template <class StillWaiting>
bool check_peer(Task& t, int r, StillWaiting still_waiting) {
    CommState* c = t.comm.get();
    const char* why = peer_gone(c, r, &t.next_check[size_t(r)]);
    if (why && still_waiting()) {
        char what[64];
        snprintf(what, sizeof(what), "%s (call %llu)", kind_name(t.kind),
                 (unsigned long long)t.seq);
        // r posts to this call unless the call is our send to r
        fail_waiting_on(c, r, why, what, t.kind == kSend ? std::string() : source_path(t, r));
        return false;
    }
    return true;
}

// Step 1. Returns false while the slot still holds an older contribution not every reader has
// opened (then checks on those readers) or on an error (the communicator has its async error).
bool post(Task& t) {
    CommState* c = t.comm.get();
    if (!posts(t)) return true;
    bool p2p = t.kind == kSend;
    Slot* slot = p2p ? c->p2p_slot(c->rank, t.root, t.seq) : c->coll_slot(c->rank, t.seq);
    if (slot->tag.load(std::memory_order_acquire) != 0) {
        uint64_t missing = slot->readers & ~slot->opened.load(std::memory_order_acquire);
        if (missing != 0) {
            for (int r = 0; r < c->nranks; r++) {
                auto unopened = [&] { return !(slot->opened.load() >> r & 1); };
                if ((missing >> r & 1) && !check_peer(t, r, unopened)) return false;
            }
            return false;
        }
    }
    // From here until the slot is published ncclCommAbort waits (posting), and an abort that
    // began before cannot see this post: then it is not made.
    c->posting.fetch_add(1);
    if (c->aborted.load()) {
        c->posting.fetch_sub(1);
        return false;
    }
    std::string path = p2p ? p2p_path(*c, c->rank, t.root, t.seq) : coll_path(*c, c->rank, t.seq);
    size_t bytes = post_bytes(t);
    if (!write_data_file(c, path, t.sendbuff, bytes)) {
        c->posting.fetch_sub(1);
        return false;
    }
    slot->readers = p2p                 ? 1ull << t.root
                    : t.kind == kReduce ? 1ull << t.root
                                        : all_ranks(c->nranks);
    slot->kind = t.kind;
    slot->type = t.type;
    slot->op = t.op;
    slot->root = t.root;
    slot->scalar = 0;
    if (t.op == kPreMulSum) {
        // A device scalar is read now, in stream order ("while the collective is running").
        const void* from = t.premul.device ? t.premul.scalar_ptr : &t.premul.value;
        memcpy(&slot->scalar, from, type_size(t.type));
    }
    slot->bytes = bytes;
    slot->opened.store(0, std::memory_order_relaxed);
    slot->tag.store(t.seq + 1, std::memory_order_release);
    c->posting.fetch_sub(1);
    return true;
}

// Does the poster's call (in slot) match ours? If not, fails the communicator.
bool matches(Task& t, int src, const Slot* slot) {
    bool ok;
    if (t.kind == kRecv) {
        ok = slot->kind == kSend && slot->bytes == post_bytes(t);
    } else {
        ok = slot->kind == t.kind && slot->type == t.type && slot->bytes == post_bytes(t) &&
             (!is_reduction(t.kind) || slot->op == t.op) &&
             ((t.kind != kBroadcast && t.kind != kReduce) || slot->root == t.root);
    }
    if (!ok) {
        // The peer's count, as its call would have been written.
        size_t size = type_size(ncclDataType_t(slot->type));
        size_t per = size * (slot->kind == kReduceScatter ? size_t(t.comm->nranks) : 1);
        comm_fail(t.comm.get(), ncclInvalidUsage,
                  "call %llu: this rank called %s(count %zu, %s, %s, root/peer %d) but rank %d "
                  "called %s(count %zu, %s, %s, root/peer %d)",
                  (unsigned long long)t.seq, kind_name(t.kind), t.count, type_name(t.type),
                  op_name(t.op), t.root, src, kind_name(slot->kind), size_t(slot->bytes / per),
                  type_name(ncclDataType_t(slot->type)), op_name(slot->op), slot->root);
    }
    return ok;
}

// Copies or reduces source src's contribution (open as fd) into recvbuff.
bool apply(Task& t, int src, const Slot* slot, int fd, const std::string& path) {
    CommState* c = t.comm.get();
    size_t bytes = t.count * type_size(t.type);
    char* out = (char*)t.recvbuff;
    switch (t.kind) {
        case kAllGather:
            return read_data_file(c, fd, 0, out + size_t(src) * bytes, bytes, path);
        case kBroadcast:
        case kRecv:
            return read_data_file(c, fd, 0, out, bytes, path);
        default: {
            // Reductions read the data in place through a mapping: block `rank` of a
            // ReduceScatter contribution, all of it otherwise.
            size_t offset = t.kind == kReduceScatter ? size_t(c->rank) * bytes : 0;
            void* base = nullptr;
            size_t base_bytes = 0;
            const void* x = map_data_file(c, fd, offset, bytes, &base, &base_bytes, path);
            if (!x) return false;
            reduce_step(out, x, t.count, t.type, t.op, src, c->nranks, &slot->scalar);
            unmap_data(base, base_bytes);
            return true;
        }
    }
}

// Step 2. Consumes the sources that have posted, in order. Stops at one that has not (after
// checking it can still post) or at an error (the communicator then has its async error).
void consume(Task& t, bool* progressed) {
    int n = num_sources(t);
    while (t.next < n) {
        int src = source_rank(t, t.next);
        Slot* slot = source_slot(t, src);
        auto unposted = [&] { return slot->tag.load(std::memory_order_acquire) != t.seq + 1; };
        if (unposted()) {
            check_peer(t, src, unposted);
            return;
        }
        if (!matches(t, src, slot)) return;
        std::string path = source_path(t, src);
        int fd = open_data_file(t.comm.get(), slot, path, src);
        if (fd < 0) return;
        bool ok = apply(t, src, slot, fd, path);
        close(fd);
        if (!ok) return;
        t.next++;
        *progressed = true;
    }
    t.done = true;
}

// The tasks of one stream op. ready() may be polled by several host threads at once (each
// synchronizing): one advances the tasks, the others see "not ready".
struct Batch {
    std::mutex mutex;
    std::vector<Task> tasks;
    bool done = false;
};

// The stream op's ready(): advances every task; true once all are done, or ended by an abort.
// The runtime backs off between polls that return false.
// A task of a failed communicator (a peer died, failed, left or made another call, or the wait
// timed out) never completes, as a GPU's NCCL kernel spins until ncclCommAbort: its stream stays
// blocked, the error shows in ncclCommGetAsyncError, and the caller's way out is
// ncclCommAbort, after which the task ends as a no-op. A collective that completed would let
// the caller go on with a result that not every rank made (a barrier would pass).
bool progress(Batch& batch) {
    std::unique_lock<std::mutex> lock(batch.mutex, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    if (batch.done) return true;
    for (Task& t : batch.tasks) {
        if (t.done) continue;
        CommState* c = t.comm.get();
        if (c->aborted.load()) {
            t.done = true;
            continue;
        }
        if (c->async_error.load() != ncclSuccess) continue;  // hangs until aborted
        bool progressed = false;
        if (!t.posted) {
            t.posted = post(t);
            progressed = t.posted;
        }
        if (t.posted && c->async_error.load() == ncclSuccess) consume(t, &progressed);
        if (t.done || c->async_error.load() != ncclSuccess) continue;
        double now = now_s();
        if (progressed || t.blocked_since < 0) t.blocked_since = now;
        if (now - t.blocked_since > c->timeout_s) {
            comm_fail(c, ncclSystemError,
                      "%s (call %llu): no progress for %.0f s (CUCC_NCCL_TIMEOUT); a rank may not "
                      "have made the same call",
                      kind_name(t.kind), (unsigned long long)t.seq, c->timeout_s);
        }
    }
    bool all_done = true;
    for (const Task& t : batch.tasks) all_done &= t.done;
    batch.done = all_done;
    return all_done;
}

// The stream op's run(): everything happened in ready(); the communicators stop waiting.
void finish(Batch& batch) {
    for (Task& t : batch.tasks) t.comm->pending.fetch_sub(1);
}

// Takes the task's sequence number from its communicator's counters.
void take_sequence_number(Task& t) {
    CommState* c = t.comm.get();
    t.seq = t.kind == kSend   ? c->send_seq[size_t(t.root)]++
            : t.kind == kRecv ? c->recv_seq[size_t(t.root)]++
                              : c->coll_seq++;
}

// Queues tasks: one stream op per stream, in the order the streams first appear. Each op is
// built when it is queued (StreamOp::make): the tasks take their sequence numbers then, in
// call order, so that a graph that captured them takes fresh ones at every launch.
ncclResult_t launch(std::vector<Task>& tasks) {
    std::vector<cudaStream_t> streams;
    for (const Task& t : tasks) {
        if (std::find(streams.begin(), streams.end(), t.stream) == streams.end()) {
            streams.push_back(t.stream);
        }
    }
    ncclResult_t res = ncclSuccess;
    for (cudaStream_t s : streams) {
        std::vector<Task> mine;
        for (const Task& t : tasks) {
            if (t.stream == s) mine.push_back(t);
        }
        const char* what = mine.size() == 1 ? kind_name(mine[0].kind) : "ncclGroupEnd";
        cucc::StreamOp op(what);
        op.make = [mine, what] {
            auto batch = std::make_shared<Batch>();
            batch->tasks = mine;
            for (Task& t : batch->tasks) {
                take_sequence_number(t);
                t.comm->pending.fetch_add(1);
            }
            return cucc::StreamOp(
                what, [batch] { return progress(*batch); }, [batch] { finish(*batch); });
        };
        cudaError_t err = cucc::stream_enqueue(s, std::move(op));
        if (err != cudaSuccess) {
            report("%s: stream %p: %s", what, (void*)s, cudaGetErrorString(err));
            res = ncclUnhandledCudaError;
        }
    }
    return res;
}

bool device_buffer(const void* p, size_t bytes) {
    return p && cucc::is_device_pointer(p) && cucc::is_device_pointer((const char*)p + bytes - 1);
}

// Checks a call as NCCL does (plus device pointers, which NCCL checks under NCCL_CHECK_POINTERS)
// and queues it. root is the root, or the peer of a send/recv (0 when unused).
ncclResult_t enqueue(Kind kind, const void* sendbuff, void* recvbuff, size_t count,
                     ncclDataType_t type, ncclRedOp_t op, int root, ncclComm_t comm,
                     cudaStream_t stream) {
    const char* api = kind_name(kind);
    if (!comm) {
        report("%s: comm argument is NULL", api);
        return call_error(ncclInvalidArgument);
    }
    std::shared_ptr<CommState> c = comm->state;
    if (ncclResult_t res = ncclResult_t(c->async_error.load())) {
        report("%s: the communicator has failed before: %s", api, ncclGetErrorString(res));
        return call_error(res);
    }
    if (c->finalized) {
        report("%s: the communicator was finalized", api);
        return call_error(ncclInvalidUsage);
    }
    bool p2p = kind == kSend || kind == kRecv;
    if (root < 0 || root >= c->nranks) {
        report("%s: %s %d is not in 0..%d", api, p2p ? "peer" : "root", root, c->nranks - 1);
        return call_error(ncclInvalidArgument);
    }
    if (type_size(type) == 0) {
        report("%s: invalid data type %d", api, int(type));
        return call_error(ncclInvalidArgument);
    }
    CommState::UserOp premul{};
    if (int(op) >= int(ncclNumOps)) {
        size_t i = size_t(op) - size_t(ncclNumOps);
        if (i >= c->ops.size() || !c->ops[i].live) {
            report(
                "%s: reduction op %d was not created by ncclRedOpCreatePreMulSum on this "
                "communicator, or was destroyed",
                api, int(op));
            return call_error(ncclInvalidArgument);
        }
        premul = c->ops[i];
        if (is_reduction(kind) && premul.type != type) {
            report("%s: the PreMulSum op was created for %s, the call is on %s", api,
                   type_name(premul.type), type_name(type));
            return call_error(ncclInvalidArgument);
        }
    } else if (int(op) < 0) {
        report("%s: invalid reduction op %d", api, int(op));
        return call_error(ncclInvalidArgument);
    }
    if (count == 0) return ncclSuccess;
    size_t bytes = count * type_size(type);
    size_t send_bytes = kind == kReduceScatter ? bytes * size_t(c->nranks) : bytes;
    size_t recv_bytes = kind == kAllGather ? bytes * size_t(c->nranks) : bytes;
    bool check_send = kind != kRecv && (kind != kBroadcast || c->rank == root);
    bool check_recv = kind != kSend && (kind != kReduce || c->rank == root);
    const char* bad = check_send && !device_buffer(sendbuff, send_bytes)   ? "sendbuff"
                      : check_recv && !device_buffer(recvbuff, recv_bytes) ? "recvbuff"
                                                                           : nullptr;
    if (bad) {
        report("%s: %s %p is not a device buffer of %zu bytes (cudaMalloc)", api, bad,
               bad[0] == 's' ? sendbuff : (const void*)recvbuff,
               bad[0] == 's' ? send_bytes : recv_bytes);
        return call_error(ncclInvalidArgument);
    }
    Task t;
    t.comm = c;
    t.kind = kind;
    t.sendbuff = sendbuff;
    t.recvbuff = recvbuff;
    t.count = count;
    t.type = type;
    t.op = int(op) >= int(ncclNumOps) ? kPreMulSum : int(op);
    t.premul = premul;
    t.root = root;
    t.stream = stream;
    t.next_check.assign(size_t(c->nranks), 0.0);
    if (in_group()) {
        g_group.tasks.push_back(std::move(t));
        return ncclSuccess;
    }
    std::vector<Task> one{std::move(t)};
    return launch(one);
}

}  // namespace

bool in_group() { return g_group.depth > 0; }

ncclResult_t call_error(ncclResult_t err) {
    if (in_group() && g_group.error == ncclSuccess) g_group.error = err;
    return err;
}

void defer_init(PendingInit init) { g_group.inits.push_back(std::move(init)); }

}  // namespace cucc_nccl

using namespace cucc_nccl;

ncclResult_t ncclGroupStart() {
    g_group.depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
    if (g_group.depth == 0) {
        report("ncclGroupEnd: not inside ncclGroupStart");
        return ncclInvalidUsage;
    }
    if (--g_group.depth > 0) return ncclSuccess;
    GroupState group = std::move(g_group);
    g_group = GroupState();
    if (group.error != ncclSuccess) {
        // NCCL drops the whole group when one of its calls failed.
        for (PendingInit& p : group.inits) *p.out = nullptr;
        return group.error;
    }
    ncclResult_t res = group.inits.empty() ? ncclSuccess : complete_inits(group.inits);
    ncclResult_t launched = launch(group.tasks);
    return res != ncclSuccess ? res : launched;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
    return enqueue(kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
    return enqueue(kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
    return enqueue(kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm, stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
    return enqueue(kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream);
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
    return enqueue(kBroadcast, buff, buff, count, datatype, ncclSum, root, comm, stream);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
    return enqueue(kReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
    return enqueue(kSend, sendbuff, nullptr, count, datatype, ncclSum, peer, comm, stream);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
    return enqueue(kRecv, nullptr, recvbuff, count, datatype, ncclSum, peer, comm, stream);
}
