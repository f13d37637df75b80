// transport.cpp: the files ranks share (see nccl_internal.h for the layout and the protocol),
// the liveness of peers, and how errors are recorded and reported.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "nccl_internal.h"

namespace cucc_nccl {

static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<int32_t>::is_always_lock_free,
              "the shared control file needs address-free (lock-free) atomics");

constexpr uint64_t kMagic = 0x31636e6363756375ull;  // "cuccuncc1", marks an initialized file
constexpr const char* kFilePrefix = "cucc-nccl-";
// A control file older than this with no rank recorded in it was left by a creator that died
// while making it (a live creator records itself within microseconds).
constexpr double kUnclaimedControlFileS = 60;

size_t header_bytes(int nranks) {
    size_t n = size_t(nranks);
    return sizeof(Header) + n * sizeof(SharedRank) + n * kCollSlots * sizeof(Slot) +
           n * n * kP2pSlots * sizeof(Slot);
}

SharedRank* CommState::ranks() const { return (SharedRank*)((char*)header + sizeof(Header)); }
// Slots after the ranks: [poster][kCollSlots] for collectives, then
// [sender][receiver][kP2pSlots] for messages.
Slot* CommState::coll_slot(int poster, uint64_t seq) const {
    Slot* base = (Slot*)(ranks() + nranks);
    return base + size_t(poster) * kCollSlots + seq % kCollSlots;
}
Slot* CommState::p2p_slot(int sender, int receiver, uint64_t seq) const {
    Slot* base = (Slot*)(ranks() + nranks) + size_t(nranks) * kCollSlots;
    return base + (size_t(sender) * nranks + receiver) * kP2pSlots + seq % kP2pSlots;
}
CommState::~CommState() {
    if (header) munmap(header, header_bytes);
}

std::string data_dir() {
    const char* dir = getenv("CUCC_NCCL_DIR");
    return dir && *dir ? dir : "/dev/shm";
}
std::string control_path(const CommState& c) { return c.dir + "/" + kFilePrefix + c.name; }
// A data file's name carries its poster's pid, so that files of a dead process can be found.
static std::string data_prefix(const CommState& c, int poster) {
    return control_path(c) + "." + std::to_string(c.ranks()[poster].pid.load()) + "-";
}
std::string coll_path(const CommState& c, int poster, uint64_t seq) {
    return data_prefix(c, poster) + "c" + std::to_string(poster) + "-" + std::to_string(seq);
}
std::string p2p_path(const CommState& c, int sender, int receiver, uint64_t seq) {
    return data_prefix(c, sender) + "p" + std::to_string(sender) + "-" + std::to_string(receiver) +
           "-" + std::to_string(seq);
}

double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

void idle_wait(double waited_s) {
    if (waited_s < 1e-3) {
        sched_yield();
    } else {
        timespec ts = {0, waited_s < 0.1 ? 20000 : 500000};
        nanosleep(&ts, nullptr);
    }
}

// ---------------------------------------------------------------------------------------------
// Errors.

static std::mutex g_last_error_mutex;
static char g_last_error[1024];

static void report_v(const char* fmt, va_list args) {
    char message[1024];
    vsnprintf(message, sizeof(message), fmt, args);
    fprintf(stderr, "cucc nccl: %s\n", message);
    std::lock_guard<std::mutex> lock(g_last_error_mutex);
    memcpy(g_last_error, message, sizeof(message));
}

void report(const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    report_v(fmt, args);
    va_end(args);
}

const char* last_error() {
    std::lock_guard<std::mutex> lock(g_last_error_mutex);
    return g_last_error;
}

void comm_fail(CommState* c, ncclResult_t err, const char* fmt, ...) {
    int expected = ncclSuccess;
    c->async_error.compare_exchange_strong(expected, err);
    if (c->header) c->ranks()[c->rank].state.store(kFailed, std::memory_order_release);
    char message[900];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof(message), fmt, args);
    va_end(args);
    report("rank %d of %d (communicator %.8s): %s: %s", c->rank, c->nranks, c->name.c_str(),
           message, ncclGetErrorString(err));
    if (c->header) unlink_unread_posts(c);
}

// Unlinks the data files of slots that `poster` published and not every reader has opened;
// with reader >= 0, only those that rank `reader` was to read and has not opened.
static void unlink_unread(CommState* c, int poster, int reader) {
    auto unread_seq = [reader](const Slot* s, uint64_t* seq) {
        uint64_t tag = s->tag.load(std::memory_order_acquire);
        *seq = tag - 1;
        uint64_t missing = s->readers & ~s->opened.load(std::memory_order_acquire);
        return tag != 0 && (reader < 0 ? missing != 0 : (missing >> reader & 1) != 0);
    };
    uint64_t seq;
    for (int i = 0; i < kCollSlots; i++) {
        if (unread_seq(c->coll_slot(poster, i), &seq)) unlink(coll_path(*c, poster, seq).c_str());
    }
    for (int q = 0; q < c->nranks; q++) {
        for (int i = 0; i < kP2pSlots; i++) {
            if (unread_seq(c->p2p_slot(poster, q, i), &seq)) {
                unlink(p2p_path(*c, poster, q, seq).c_str());
            }
        }
    }
}

void unlink_unread_posts(CommState* c) { unlink_unread(c, c->rank, -1); }

void unlink_at_abort(CommState* c, bool failed) {
    for (int poster = 0; poster < c->nranks; poster++)
        unlink_unread(c, poster, failed ? -1 : c->rank);
}

void fail_waiting_on(CommState* c, int r, const char* why, const char* what,
                     const std::string& unpublished) {
    comm_fail(c, ncclRemoteError, "%s: rank %d %s", what, r, why);
    // What a dead rank posted and nobody read yet would stay behind: nobody else cleans up.
    SharedRank& peer = c->ranks()[r];
    if (peer.state.load() == kAlive && !process_alive(peer.pid.load())) {
        unlink_unread(c, r, -1);
        if (!unpublished.empty()) unlink(unpublished.c_str());
    }
}

// ---------------------------------------------------------------------------------------------
// Peers.

bool process_alive(int pid) {
    if (pid <= 0) return false;
    if (kill(pid, 0) != 0 && errno == ESRCH) return false;
    // An exited child that its parent has not reaped yet is a zombie: state Z in /proc/pid/stat
    // ("pid (comm) S ..."; comm may hold spaces and parentheses, so look after the last ')').
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE* f = fopen(path, "r");
    if (!f) return true;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    const char* paren = strrchr(buf, ')');
    return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

const char* peer_gone(CommState* c, int r, double* next_check) {
    SharedRank& peer = c->ranks()[r];
    int state = peer.state.load(std::memory_order_acquire);
    if (state == kFailed) return "failed (it aborted the communicator or saw an error)";
    if (state == kLeft) return "had already finalized or destroyed the communicator";
    double t = now_s();
    if (state == kAlive && t >= *next_check) {
        *next_check = t + 0.02;
        if (!process_alive(peer.pid.load(std::memory_order_acquire))) return "exited";
    }
    return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Files left by processes that died (kill -9: nothing ran to clean up after them).

// Is the control file at path stale: initialized with every recorded rank's process gone, or
// never claimed by a rank and old?
static bool stale_control_file(const std::string& path) {
    int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW);
    if (fd < 0) return false;
    struct stat st;
    bool stale = false;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        bool old = difftime(time(nullptr), st.st_mtime) > kUnclaimedControlFileS;
        if (size_t(st.st_size) < sizeof(Header)) {
            stale = old;
        } else {
            void* p = mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
            if (p != MAP_FAILED) {
                const Header* h = (const Header*)p;
                int nranks = h->nranks;
                bool sized = h->magic.load() == kMagic && nranks > 0 && nranks <= kMaxRanks &&
                             size_t(st.st_size) == header_bytes(nranks);
                int recorded = 0, alive = 0;
                const SharedRank* ranks = (const SharedRank*)((const char*)p + sizeof(Header));
                for (int r = 0; sized && r < nranks; r++) {
                    int pid = ranks[r].pid.load();
                    if (pid == 0) continue;
                    recorded++;
                    alive += process_alive(pid);
                }
                stale = recorded > 0 ? alive == 0 : old;
                munmap(p, size_t(st.st_size));
            }
        }
    }
    close(fd);
    return stale;
}

void remove_stale_files(const std::string& dir) {
    DIR* d = opendir(dir.c_str());
    if (!d) return;
    size_t prefix = strlen(kFilePrefix), name_chars = 32;
    while (dirent* e = readdir(d)) {
        std::string name = e->d_name;
        if (name.compare(0, prefix, kFilePrefix) != 0 || name.size() < prefix + name_chars)
            continue;
        // A communicator's name (32 hex digits; files of other cucc versions may add more)
        // has no '.': the control file is cucc-nccl-<comm>, a data file cucc-nccl-<comm>.<pid>-...
        std::string path = dir + "/" + name;
        size_t dot = name.find('.', prefix);
        if (dot == std::string::npos) {
            if (stale_control_file(path)) unlink(path.c_str());
            continue;
        }
        if (dot < prefix + name_chars) continue;
        int pid = atoi(name.c_str() + dot + 1);
        if (pid > 0 && !process_alive(pid)) unlink(path.c_str());
    }
    closedir(d);
}

// ---------------------------------------------------------------------------------------------
// The control file.

ncclResult_t attach(CommState* c) {
    // Once per process and directory: files that dead processes left behind.
    static std::mutex cleaned_mutex;
    static std::vector<std::string> cleaned;
    {
        std::lock_guard<std::mutex> lock(cleaned_mutex);
        if (std::find(cleaned.begin(), cleaned.end(), c->dir) == cleaned.end()) {
            cleaned.push_back(c->dir);
            remove_stale_files(c->dir);
        }
    }
    std::string path = control_path(*c);
    size_t bytes = header_bytes(c->nranks);
    double deadline = now_s() + c->timeout_s;
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    bool creator = fd >= 0;
    if (creator) {
        // posix_fallocate reports a full file system now rather than SIGBUS on first touch.
        int err = posix_fallocate(fd, 0, off_t(bytes));
        if (err != 0) {
            report("cannot size %s to %zu bytes: %s (set CUCC_NCCL_DIR to a directory with room)",
                   path.c_str(), bytes, strerror(err));
            close(fd);
            unlink(path.c_str());
            return ncclSystemError;
        }
    } else {
        if (errno != EEXIST) {
            report("cannot create %s: %s (set CUCC_NCCL_DIR to a writable directory)", path.c_str(),
                   strerror(errno));
            return ncclSystemError;
        }
        fd = open(path.c_str(), O_RDWR);
        if (fd < 0) {
            report(
                "rank %d: communicator %.8s is complete already (all ranks attached, or a rank "
                "initialized twice with the same ncclUniqueId)",
                c->rank, c->name.c_str());
            return ncclInvalidUsage;
        }
        // The creator sizes the file right after creating it.
        struct stat st;
        st.st_size = 0;
        while (fstat(fd, &st) == 0 && st.st_size == 0 && now_s() < deadline) idle_wait(1e-2);
        if (size_t(st.st_size) != bytes) {
            if (st.st_size == 0) {
                report("rank %d: timed out waiting for the creator of %s", c->rank, path.c_str());
            } else {
                report(
                    "rank %d: ncclCommInitRank with nranks=%d, but another rank created "
                    "communicator %.8s for a different number of ranks",
                    c->rank, c->nranks, c->name.c_str());
            }
            close(fd);
            return st.st_size == 0 ? ncclSystemError : ncclInvalidUsage;
        }
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        report("cannot map %s: %s", path.c_str(), strerror(errno));
        return ncclSystemError;
    }
    c->header = (Header*)p;
    c->header_bytes = bytes;
    if (creator) {
        c->header->nranks = c->nranks;
        c->header->magic.store(kMagic, std::memory_order_release);
    } else {
        while (c->header->magic.load(std::memory_order_acquire) != kMagic) {
            if (now_s() > deadline) {
                report("rank %d: timed out waiting for the creator of %s", c->rank, path.c_str());
                return ncclSystemError;
            }
            idle_wait(1e-2);
        }
    }
    SharedRank& me = c->ranks()[c->rank];
    int32_t expected = 0;
    if (!me.pid.compare_exchange_strong(expected, int32_t(getpid()))) {
        report("rank %d of communicator %.8s was initialized twice (pids %d and %d)", c->rank,
               c->name.c_str(), expected, int(getpid()));
        return ncclInvalidUsage;
    }
    me.state.store(kAlive, std::memory_order_release);
    if (c->header->attached.fetch_add(1) + 1 == c->nranks) unlink(path.c_str());
    return ncclSuccess;
}

ncclResult_t wait_all_attached(CommState* c) {
    double start = now_s();
    std::vector<double> next_check(size_t(c->nranks), 0.0);
    while (c->header->attached.load(std::memory_order_acquire) < c->nranks) {
        for (int r = 0; r < c->nranks; r++) {
            if (c->ranks()[r].state.load(std::memory_order_acquire) == kAbsent) continue;
            const char* why = peer_gone(c, r, &next_check[size_t(r)]);
            // Once all have attached, a rank may already have gone on, and left or failed.
            if (why && c->header->attached.load(std::memory_order_acquire) < c->nranks) {
                // The communicator can never complete: nobody else will unlink its file.
                unlink(control_path(*c).c_str());
                fail_waiting_on(c, r, why, "ncclCommInitRank");
                return ncclRemoteError;
            }
        }
        double waited = now_s() - start;
        if (waited > c->timeout_s) {
            unlink(control_path(*c).c_str());
            comm_fail(c, ncclSystemError,
                      "ncclCommInitRank: only %d of %d ranks arrived within %.0f s "
                      "(CUCC_NCCL_TIMEOUT; ranks meet through files in %s, so all must run on "
                      "this host)",
                      c->header->attached.load(), c->nranks, c->timeout_s, c->dir.c_str());
            return ncclSystemError;
        }
        idle_wait(waited);
    }
    return ncclSuccess;
}

// ---------------------------------------------------------------------------------------------
// Data files.

bool write_data_file(CommState* c, const std::string& path, const void* src, size_t bytes) {
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        comm_fail(c, ncclSystemError, "cannot create %s: %s", path.c_str(), strerror(errno));
        return false;
    }
    const char* p = (const char*)src;
    size_t left = bytes;
    while (left > 0) {
        ssize_t n = write(fd, p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int err = n < 0 ? errno : ENOSPC;
            close(fd);
            unlink(path.c_str());
            comm_fail(c, ncclSystemError,
                      "cannot write %zu bytes to %s: %s (set CUCC_NCCL_DIR to a directory with "
                      "more room)",
                      bytes, path.c_str(), strerror(err));
            return false;
        }
        p += n;
        left -= size_t(n);
    }
    close(fd);
    return true;
}

int open_data_file(CommState* c, Slot* slot, const std::string& path, int poster) {
    int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) {
        const int err = errno;
        // A rank that aborted after a failure removed what was unread (unlink_at_abort).
        for (int r = 0; err == ENOENT && r < c->nranks; r++) {
            if (c->ranks()[r].state.load(std::memory_order_acquire) == kFailed) {
                comm_fail(c, ncclRemoteError,
                          "cannot open %s: rank %d failed (it aborted the communicator, which "
                          "removed what nobody had read)",
                          path.c_str(), r);
                return -1;
            }
        }
        // A poster that died (kill -9) had its unread posts removed by whichever process found
        // it dead first (fail_waiting_on, a later communicator's clean-up): its death is the
        // error, as when the reader finds it dead before the post.
        if (err == ENOENT && !process_alive(c->ranks()[poster].pid.load())) {
            comm_fail(c, ncclRemoteError, "cannot open %s: rank %d exited", path.c_str(), poster);
            return -1;
        }
        comm_fail(c, ncclSystemError, "cannot open %s: %s", path.c_str(), strerror(err));
        return -1;
    }
    uint64_t bit = 1ull << c->rank;
    uint64_t before = slot->opened.fetch_or(bit, std::memory_order_acq_rel);
    if ((before | bit) == slot->readers) unlink(path.c_str());
    return fd;
}

bool read_data_file(CommState* c, int fd, size_t offset, void* dst, size_t bytes,
                    const std::string& path) {
    char* p = (char*)dst;
    while (bytes > 0) {
        ssize_t n = pread(fd, p, bytes, off_t(offset));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            comm_fail(c, ncclSystemError, "cannot read %s: %s", path.c_str(),
                      n < 0 ? strerror(errno) : "file too short");
            return false;
        }
        p += n;
        offset += size_t(n);
        bytes -= size_t(n);
    }
    return true;
}

const void* map_data_file(CommState* c, int fd, size_t offset, size_t bytes, void** base,
                          size_t* base_bytes, const std::string& path) {
    size_t page = size_t(sysconf(_SC_PAGESIZE));
    size_t start = offset / page * page;
    *base_bytes = bytes + (offset - start);
    *base = mmap(nullptr, *base_bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, off_t(start));
    if (*base == MAP_FAILED) {
        *base = nullptr;
        comm_fail(c, ncclSystemError, "cannot map %s: %s", path.c_str(), strerror(errno));
        return nullptr;
    }
    return (const char*)*base + (offset - start);
}

void unmap_data(void* base, size_t base_bytes) {
    if (base) munmap(base, base_bytes);
}

}  // namespace cucc_nccl
