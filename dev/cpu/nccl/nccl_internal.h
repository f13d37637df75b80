// nccl_internal.h: what the CPU NCCL's .cpp files share and nothing else includes.
//
// The CPU NCCL implements nccl.h for ranks that are processes (one per simulated GPU, started by
// mpirun or any other way) or several ranks inside one process (ncclCommInitAll). It never calls
// MPI: everything goes through files named after the ncclUniqueId, in $CUCC_NCCL_DIR (default
// /dev/shm, a RAM file system):
//
//   cucc-nccl-<comm>            the control file, mapped by every rank: one SharedRank per rank
//                               and rings of Slots that announce posted contributions. Unlinked as
//                               soon as the last rank has attached.
//   cucc-nccl-<comm>.<pid>-c<r>-<seq>      rank r's contribution to collective number seq of the
//                                          comm (pid: the poster's process).
//   cucc-nccl-<comm>.<pid>-p<r>-<q>-<seq>  the seq-th message rank r sends to rank q.
//
// A data file is written once by its poster, then published in a Slot; each reader opens it and
// sets its bit in the slot; the reader that completes the set unlinks the file (open descriptors
// keep the data alive). A Slot is reused S sequence numbers later once every reader has opened.
// Files of killed processes: a rank that finds a peer dead unlinks what that peer posted and
// nobody read, and its own unread posts, when it fails; an init that finds a peer dead unlinks
// the control file; ncclCommAbort unlinks what nobody will read to the end any more (see
// unlink_at_abort), also what a stopped peer posted. When every rank was killed (mpirun ends the
// others), the first communicator a later process creates in the same directory removes what they
// left: data files whose poster's pid is no longer a live process, and control files whose recorded
// ranks are all dead (or, never claimed by any rank, older than a minute).
//
// Every call is stream-ordered: it becomes a cucc::StreamOp whose ready() predicate, polled by
// the runtime once the op is at the head of its stream (the kernels before it have run), posts
// this rank's contribution and then consumes the peers' contributions as they appear; run()
// only ends the op. An op of a failed communicator never ends, as NCCL's kernels spin after a
// peer's failure: the error is reported by ncclCommGetAsyncError, and ncclCommAbort makes the
// queued ops no-ops that end. Doing the work inside ready() lets every op of an ncclGroupStart/End
// group advance together and lets one thread drive several communicators (ncclCommInitAll); ranks
// in separate processes progress whenever they poll. Reductions run in rank order 0..n-1 on every
// rank, rounding to the element type at each step, so every rank gets the same bits.
//
// Limits: all ranks on one host (they meet through files), at most kMaxRanks per communicator.
// Each call copies its data through a fresh RAM file: simple, and about 0.2-0.5 GB/s per rank,
// far from a GPU's NCCL but ample for the models a CPU trains.
//
// The split by concern:
//   reduce.cpp       element types and the reduction arithmetic
//   transport.cpp    the control file, data files, slots, liveness of peers, errors
//   comm.cpp         communicators: init, init-all, split, finalize, destroy, abort, queries
//   collectives.cpp  argument checks, groups, the stream ops of collectives and send/recv
#pragma once

// Standard headers first: nccl.h brings in cuda_runtime.h, whose keyword macros must not reach
// the standard library's own attributes.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nccl.h>

namespace cucc_nccl {

// ---------------------------------------------------------------------------------------------
// Element types and reductions (reduce.cpp).

// Bytes per element, or 0 for a value that is not an ncclDataType_t.
size_t type_size(ncclDataType_t type);
const char* type_name(ncclDataType_t type);
const char* op_name(int op);

// The op value that stands for every ncclRedOpCreatePreMulSum op in the shared slots (the
// handles are per rank; what must match between ranks is the kind of reduction).
constexpr int kPreMulSum = ncclNumOps;

// One step of a reduction in rank order over nranks contributions:
//   rank == 0:        acc = pre(x)
//   0 < rank < n:     acc = round(acc op pre(x))
//   rank == n-1:      then acc = post(acc)
// pre is the identity except for ncclAvg on floating types (x * T(1/n), as NCCL's PreMulSum)
// and for kPreMulSum (x * scalar, the poster's scalar, of the element type); post is the
// identity except for ncclAvg on integers (truncating division by n, NCCL's SumPostDiv).
// 16- and 8-bit floats compute in float and round to the type at every step.
void reduce_step(void* acc, const void* x, size_t count, ncclDataType_t type, int op, int rank,
                 int nranks, const void* scalar);

// ---------------------------------------------------------------------------------------------
// Shared memory layout (transport.cpp). Every field is written with atomics or before a release
// store that publishes it; the mapping is shared by processes, so only lock-free atomics.

constexpr int kMaxRanks = 64;   // a rank set fits one uint64_t mask
constexpr int kCollSlots = 16;  // collectives a rank may post ahead of its slowest reader
constexpr int kP2pSlots = 8;    // messages in flight from one rank to one peer

enum Kind : int32_t {
    kAllReduce = 1,
    kBroadcast,
    kReduce,
    kAllGather,
    kReduceScatter,
    kSend,
    kRecv
};
const char* kind_name(int32_t kind);

enum RankState : int32_t {
    kAbsent = 0,  // not attached yet
    kAlive = 1,   // attached
    kLeft = 2,    // finalized or destroyed its communicator: posts nothing more
    kFailed = 3,  // aborted or saw an error: its peers fail too instead of waiting
};

struct alignas(64) SharedRank {
    std::atomic<int32_t> pid;
    std::atomic<int32_t> state;
    // ncclCommSplit exchange: split number s writes color/key, then splits_posted = s+1;
    // splits_read = s+1 once this rank has read everybody's split s.
    std::atomic<int32_t> split_color;
    std::atomic<int32_t> split_key;
    std::atomic<uint64_t> splits_posted;
    std::atomic<uint64_t> splits_read;
};

// One posted contribution, announced by tag = seq+1 (release) after the other fields.
struct alignas(64) Slot {
    std::atomic<uint64_t> tag;
    std::atomic<uint64_t> opened;  // bit r: rank r has opened the data file
    uint64_t readers;              // the ranks that will read it
    int32_t kind, type, op, root;  // the poster's call, to detect mismatched calls
    uint64_t bytes;                // size of the data file
    uint64_t scalar;               // kPreMulSum: the poster's scalar (its bytes)
};

struct alignas(64) Header {
    std::atomic<uint64_t> magic;  // kMagic once the creator has initialized the file
    int32_t nranks;
    std::atomic<int32_t> attached;
};

// ---------------------------------------------------------------------------------------------
// A communicator as one rank sees it. ncclComm_t points to a `struct ncclComm` that owns a
// shared_ptr to this; queued stream ops hold their own reference, so a destroy or abort never
// leaves them dangling.
struct CommState {
    std::string name;  // 32 hex digits naming the control file and data files
    std::string dir;   // where the files live
    int nranks = 0, rank = 0, device = 0;
    Header* header = nullptr;
    size_t header_bytes = 0;
    double timeout_s = 300;  // CUCC_NCCL_TIMEOUT

    // Call-order counters (the calling thread only).
    uint64_t coll_seq = 0;
    std::vector<uint64_t> send_seq, recv_seq;  // per peer
    uint64_t splits = 0;

    // Reduction ops made by ncclRedOpCreatePreMulSum: op ncclNumOps + i is ops[i].
    struct UserOp {
        bool live;
        ncclDataType_t type;
        bool device;     // ncclScalarDevice: read from scalar_ptr when the call runs
        uint64_t value;  // ncclScalarHostImmediate: the scalar's bytes
        const void* scalar_ptr;
    };
    std::vector<UserOp> ops;
    // ncclCommRegister / ncclCommWindowRegister handles point to these: registration lets NCCL
    // use a buffer without copies; every call here copies through files anyway, so a
    // registration is checked and remembered, and deregistering forgets it.
    struct Registration {
        void* buff;
        size_t size;
    };
    std::vector<std::unique_ptr<Registration>> registrations;

    std::atomic<int> async_error{ncclSuccess};
    std::atomic<int> pending{0};  // queued tasks not finished yet
    std::atomic<bool> aborted{false};
    // post() calls between creating their data file and publishing it: ncclCommAbort waits for
    // them, so that a post it cannot see in a slot yet is not left behind.
    std::atomic<int> posting{0};
    bool finalized = false;

    ~CommState();
    SharedRank* ranks() const;
    Slot* coll_slot(int poster, uint64_t seq) const;
    Slot* p2p_slot(int sender, int receiver, uint64_t seq) const;
};

// Size of the control file for nranks.
size_t header_bytes(int nranks);
// $CUCC_NCCL_DIR or /dev/shm.
std::string data_dir();
std::string control_path(const CommState& c);
std::string coll_path(const CommState& c, int poster, uint64_t seq);
std::string p2p_path(const CommState& c, int sender, int receiver, uint64_t seq);

// Removes the files of dead processes from dir (see the file header); attach() runs it once per
// process and directory.
void remove_stale_files(const std::string& dir);
// Creates or opens the control file of comm `name` for nranks and records this rank in it.
// On success c->header is mapped; the last rank to attach unlinks the file.
ncclResult_t attach(CommState* c);
// Waits until all nranks have attached (timeout, or a rank already failed: error).
ncclResult_t wait_all_attached(CommState* c);

// Writes bytes from src into a new data file at path. False (the communicator failed, with a
// message) if the file system is full or refuses.
bool write_data_file(CommState* c, const std::string& path, const void* src, size_t bytes);
// Opens the data file that rank `poster` published in slot, as reader c->rank; the reader that
// completes the readers set unlinks it. Returns the descriptor, or -1 (the communicator failed).
int open_data_file(CommState* c, Slot* slot, const std::string& path, int poster);
// Reads [offset, offset+bytes) of an open data file into dst.
bool read_data_file(CommState* c, int fd, size_t offset, void* dst, size_t bytes,
                    const std::string& path);
// Maps [offset, offset+bytes) of an open data file read-only; unmap with unmap_data().
const void* map_data_file(CommState* c, int fd, size_t offset, size_t bytes, void** base,
                          size_t* base_bytes, const std::string& path);
void unmap_data(void* base, size_t base_bytes);

// Is the process alive (not exited, not a zombie)?
bool process_alive(int pid);
// Why rank r cannot be waited on any more, or nullptr if it may still make progress.
// Checks the shared state every call and the process (a system call) at most every 20 ms.
const char* peer_gone(CommState* c, int r, double* next_check);

// Monotonic seconds.
double now_s();
// Backs off in a blocking wait that has made no progress for waited_s: yields, then sleeps.
void idle_wait(double waited_s);

// Records an error of comm c: the first one becomes its async error, the rank is marked failed
// in shared memory (its peers stop waiting on it) and the message is printed on stderr.
void comm_fail(CommState* c, ncclResult_t err, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
// Prints "cucc nccl: <message>" on stderr and keeps it for ncclGetLastError.
void report(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// The last message report() printed.
const char* last_error();
// Unlinks the data files this rank posted that are not fully opened (after an error).
void unlink_unread_posts(CommState* c);
// At ncclCommAbort: unlinks what nobody will read to the end any more. After a failure (failed:
// this rank had queued operations or an error) the communicator is over for every rank, so
// every post not fully opened goes, whoever posted it: a stopped or killed peer cannot remove
// its own. After a clean leave, the posts this rank was to read and never opened (a peer ahead
// of it), which no reader can complete any more.
void unlink_at_abort(CommState* c, bool failed);
// Fails c (ncclRemoteError) because `what` waits on rank r, which is gone (`why`, from
// peer_gone); if r's process has died, unlinks what r posted and nobody read, and the file at
// `unpublished` (if not empty): r's post of the call waited on, which r may have died between
// creating and publishing.
void fail_waiting_on(CommState* c, int r, const char* why, const char* what,
                     const std::string& unpublished = std::string());

// ---------------------------------------------------------------------------------------------
// Groups (collectives.cpp) and the communicator setup they defer (comm.cpp).

// Is the calling thread inside ncclGroupStart/End?
bool in_group();
// Returns a failed call's error; inside a group the first one is also what ncclGroupEnd returns.
ncclResult_t call_error(ncclResult_t err);

// A communicator being created by ncclCommInitRank(Config) or ncclCommSplit. Outside a group
// it completes at once; inside, at ncclGroupEnd, all pending ones phase by phase so that one
// thread can create the communicators of several ranks.
struct PendingInit {
    std::shared_ptr<CommState> state;  // the new communicator (nullptr: split with no color)
    ncclComm_t* out;
    // For a split: the parent, this split's number, color and key.
    std::shared_ptr<CommState> parent;
    uint64_t split_index = 0;
    int color = 0, key = 0;
};
void defer_init(PendingInit init);
// Completes pending inits: for splits, exchange colors and name the children; then attach
// everybody; then wait for all ranks. Writes *out (nullptr on failure).
ncclResult_t complete_inits(std::vector<PendingInit>& inits);

}  // namespace cucc_nccl

// The object behind ncclComm_t.
struct ncclComm {
    std::shared_ptr<cucc_nccl::CommState> state;
};
