// stream.cpp: streams, events and the queue of pending device work.
//
// Nothing runs when it is queued. Work runs on a host thread that needs it done: a
// synchronization (stream, event, device), a synchronous copy or memset, a query (which runs
// what is ready without waiting), or an enqueue that finds more than kMaxPending ops queued.
// Each step picks one stream whose first op is ready and runs that op, with the runtime lock
// released. An op is ready when the ops before it on its stream are done, the ops it depends
// on are done, and its own ready() predicate (if any) holds. Among ready streams the one whose
// op was submitted first is picked, or a random one under CUCC_SCHEDULE=random, which is what
// exposes a missing event between two streams.
//
// Dependencies are (stream, count) pairs: satisfied when that stream has finished `count` ops.
//   - cudaStreamWaitEvent: the ops up to the event's latest record.
//   - the legacy default stream: an op on it waits for everything queued before it on the
//     device's blocking streams, and an op on a blocking stream waits for everything queued
//     before it on the legacy stream (streams made with cudaStreamNonBlocking are exempt).
// Dependencies always point at ops submitted earlier, so the earliest queued op is always
// ready unless it waits on an external predicate; such waits are polled with the lock released
// and a backoff, with a message every minute while nothing moves.
//
// Streams are never freed (a destroyed stream stays in memory, unusable, because events and
// dependencies may still name it); it leaves the scheduler once its queue is empty.
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <thread>
#include <unordered_set>
#include <vector>

#include "internal.h"

namespace cucc {
namespace {

constexpr uint64_t kMaxPending = 1024;  // queued ops past which an enqueue runs ready work
constexpr int kLeastPriority = 0, kGreatestPriority = -5;

struct Stream;
struct Dep {
    Stream* stream;
    uint64_t count;
};

struct QueuedOp {
    StreamOp op;
    uint64_t seq;  // global submission order
    std::vector<Dep> deps;
};

enum class StreamKind { Created, Legacy, PerThread };

struct Stream {
    int device;
    StreamKind kind;
    unsigned flags;
    int priority;
    std::deque<QueuedOp> queue;
    uint64_t submitted = 0, done = 0;
    bool running = false;  // its first op was taken off and is running now
    bool destroyed = false;
    bool blocking() const {
        return kind != StreamKind::Created || !(flags & cudaStreamNonBlocking);
    }
};

// One cudaEventRecord: done when `stream` has finished `count` ops; ms is when it ran.
struct Record {
    Stream* stream;
    uint64_t count;
    int device;
    double ms = NAN;
};

struct Event {
    unsigned flags;
    std::shared_ptr<Record> record;  // the latest record, or null if never recorded
};

struct StreamState {
    std::vector<Stream*> all;                // every stream made (never freed, see above)
    std::vector<Stream*> scheduled;          // streams that may hold work
    std::unordered_set<const void*> valid;   // live stream handles (internal pointers)
    std::vector<Stream*> legacy;             // per device, made on first use
    std::unordered_set<const void*> events;  // live event handles
    uint64_t next_seq = 0;
    uint64_t pending = 0;  // queued ops not yet finished
    int running = 0;       // ops running now (on any host thread)
    uint64_t rng;
    std::condition_variable_any progress;  // an op finished
};

StreamState& state() {
    static auto* s = [] {
        auto* created = new StreamState;  // never destroyed: see the exit note in runtime.h
        created->legacy.assign(config().devices, nullptr);
        created->rng = config().seed;
        return created;
    }();
    return *s;
}

thread_local std::vector<Stream*> tls_per_thread;  // cudaStreamPerThread of each device
thread_local const char* tls_running_op;           // the op this host thread is running

double now_ms() {
    static const auto start = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
}

uint64_t next_random(uint64_t& s) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

Stream* new_stream(int device, StreamKind kind, unsigned flags, int priority) {
    StreamState& st = state();
    Stream* s = new Stream;
    s->device = device;
    s->kind = kind;
    s->flags = flags;
    s->priority = priority;
    st.all.push_back(s);
    st.scheduled.push_back(s);
    st.valid.insert(s);
    return s;
}

// Under the lock: the Stream behind a handle, or null if the handle is not a live stream.
Stream* lookup(cudaStream_t handle) {
    StreamState& st = state();
    int device = current_device();
    if (handle == nullptr || handle == cudaStreamLegacy) {
        if (!st.legacy[device]) st.legacy[device] = new_stream(device, StreamKind::Legacy, 0, 0);
        return st.legacy[device];
    }
    if (handle == cudaStreamPerThread) {
        if (tls_per_thread.empty()) tls_per_thread.assign(config().devices, nullptr);
        if (!tls_per_thread[device])
            tls_per_thread[device] = new_stream(device, StreamKind::PerThread, 0, 0);
        return tls_per_thread[device];
    }
    return st.valid.count(handle) ? (Stream*)handle : nullptr;
}

Event* lookup_event(cudaEvent_t handle) {
    return state().events.count(handle) ? (Event*)handle : nullptr;
}

// Under the lock: queues op on s behind the implicit legacy-stream dependencies.
void enqueue(Stream* s, StreamOp op, const Dep* extra) {
    StreamState& st = state();
    QueuedOp q{std::move(op), st.next_seq++, {}};
    if (extra) q.deps.push_back(*extra);
    if (s->kind == StreamKind::Legacy) {
        for (Stream* t : st.scheduled)
            if (t != s && t->device == s->device && t->blocking() && t->submitted > t->done)
                q.deps.push_back(Dep{t, t->submitted});
    } else if (s->blocking()) {
        Stream* legacy = st.legacy[s->device];
        if (legacy && legacy->submitted > legacy->done)
            q.deps.push_back(Dep{legacy, legacy->submitted});
    }
    s->queue.push_back(std::move(q));
    s->submitted++;
    st.pending++;
}

bool head_ready(Stream* s, bool* external_wait) {
    if (s->running || s->queue.empty()) return false;
    const QueuedOp& q = s->queue.front();
    for (const Dep& d : q.deps)
        if (d.stream->done < d.count) return false;
    if (q.op.ready && !q.op.ready()) {
        *external_wait = true;
        return false;
    }
    return true;
}

// Under the lock: the stream whose first op should run next, or null if none is ready.
Stream* pick_ready(bool* external_wait) {
    StreamState& st = state();
    Stream* best = nullptr;
    int candidates = 0;
    for (size_t i = 0; i < st.scheduled.size();) {
        Stream* s = st.scheduled[i];
        if (s->destroyed && s->queue.empty() && !s->running) {
            st.scheduled[i] = st.scheduled.back();  // finished and unusable: stop scanning it
            st.scheduled.pop_back();
            continue;
        }
        i++;
        if (!head_ready(s, external_wait)) continue;
        candidates++;
        if (config().random) {
            // Reservoir sampling: each ready stream is kept with probability 1/candidates.
            if (next_random(st.rng) % (uint64_t)candidates == 0) best = s;
        } else if (!best || s->queue.front().seq < best->queue.front().seq) {
            best = s;
        }
    }
    return best;
}

[[noreturn]] void report_stream_deadlock() {
    std::string msg;
    for (Stream* s : state().scheduled) {
        if (s->queue.empty()) continue;
        const QueuedOp& q = s->queue.front();
        char buf[256];
        snprintf(buf, sizeof buf, "%s%s on a stream of device %d waits for %zu earlier op(s)",
                 msg.empty() ? "" : "; ", q.op.what, s->device, q.deps.size());
        msg += buf;
    }
    fatal("deadlock between streams (no queued op can ever become ready): %s", msg.c_str());
}

// Runs queued work until done() holds (true) or, when !block, until no op is ready (false).
// done() is evaluated under the lock. The caller must not hold the lock.
bool run_work(const std::function<bool()>& done, bool block) {
    if (api_lock_depth() != 0) fatal("internal error: device work run with the runtime lock held");
    if (tls_running_op) {
        // Queued work that synchronizes would wait for itself (CUDA forbids CUDA calls in
        // stream callbacks); a query or an enqueue from inside queued work runs nothing.
        if (block)
            fatal("%s called a synchronizing CUDA function from inside queued device work",
                  tls_running_op);
        ApiLock lock;
        return done();
    }
    StreamState& st = state();
    std::unique_lock<std::recursive_mutex> lock(api_mutex());
    auto idle_since = std::chrono::steady_clock::now();
    int idle_rounds = 0, warnings = 0;
    for (;;) {
        if (done()) return true;
        bool external_wait = false;
        Stream* s = pick_ready(&external_wait);
        if (!s) {
            if (!block) return false;
            if (st.running == 0 && !external_wait) report_stream_deadlock();
            // Another host thread is running an op, or a peer has to act: wait, backing off.
            auto wait = std::chrono::microseconds(std::min(1000, 10 << std::min(idle_rounds, 7)));
            st.progress.wait_for(lock, wait);
            idle_rounds++;
            auto idle = std::chrono::steady_clock::now() - idle_since;
            if (idle > std::chrono::seconds(60 * (warnings + 1))) {
                warnings++;
                for (Stream* t : st.scheduled)
                    if (!t->queue.empty())
                        fprintf(stderr,
                                "cucc: still waiting after %d s: %s on a stream of device %d\n",
                                60 * warnings, t->queue.front().op.what, t->device);
            }
            continue;
        }
        idle_rounds = 0;
        idle_since = std::chrono::steady_clock::now();
        QueuedOp q = std::move(s->queue.front());
        s->queue.pop_front();
        s->running = true;
        st.running++;
        lock.unlock();
        tls_running_op = q.op.what;
        if (q.op.run) q.op.run();
        tls_running_op = nullptr;
        lock.lock();
        s->running = false;
        s->done++;
        st.pending--;
        st.running--;
        st.progress.notify_all();
    }
}

bool stream_idle(const Stream* s) { return s->queue.empty() && !s->running; }

cudaError_t create_stream(cudaStream_t* out, unsigned flags, int priority) {
    if (!out || (flags & ~(unsigned)cudaStreamNonBlocking)) return cudaErrorInvalidValue;
    // CUDA clamps priorities to the device's range.
    priority = std::max(kGreatestPriority, std::min(kLeastPriority, priority));
    ApiLock lock;
    *out = (cudaStream_t)new_stream(current_device(), StreamKind::Created, flags, priority);
    return cudaSuccess;
}

}  // namespace

bool resolve_stream(cudaStream_t stream, cudaStream_t* out) {
    ApiLock lock;
    Stream* s = lookup(stream);
    if (s) *out = (cudaStream_t)s;
    return s != nullptr;
}

cudaError_t stream_enqueue(cudaStream_t stream, StreamOp op) {
    bool overflow;
    {
        ApiLock lock;
        Stream* s = lookup(stream);
        if (!s) return cudaErrorInvalidResourceHandle;
        enqueue(s, std::move(op), nullptr);
        overflow = state().pending > kMaxPending;
    }
    // Too much queued: run what is ready now (never waiting), unless the caller holds the lock.
    if (overflow && api_lock_depth() == 0)
        run_work([] { return state().pending <= kMaxPending / 2; }, false);
    return cudaSuccess;
}

cudaError_t enqueue_and_wait(cudaStream_t stream, StreamOp op) {
    Stream* s;
    uint64_t target;
    {
        ApiLock lock;
        s = lookup(stream);
        if (!s) return cudaErrorInvalidResourceHandle;
        enqueue(s, std::move(op), nullptr);
        target = s->submitted;
    }
    run_work([=] { return s->done >= target; }, true);
    return sticky_error(s->device);
}

cudaError_t synchronize_device(int device) {
    run_work(
        [=] {
            for (Stream* s : state().scheduled)
                if (s->device == device && !stream_idle(s)) return false;
            return true;
        },
        true);
    return sticky_error(device);
}

void synchronize_all() {
    run_work(
        [] {
            for (Stream* s : state().scheduled)
                if (!stream_idle(s)) return false;
            return true;
        },
        true);
}

void drain_all() { synchronize_device(current_device()); }

void destroy_device_streams(int device) {
    ApiLock lock;
    StreamState& st = state();
    for (Stream* s : st.scheduled) {
        if (s->device == device && s->kind == StreamKind::Created && !s->destroyed) {
            s->destroyed = true;
            st.valid.erase(s);
        }
    }
}

}  // namespace cucc

using namespace cucc;

extern "C" {

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
    return api_return(create_stream(stream, cudaStreamDefault, 0));
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
    return api_return(create_stream(stream, flags, 0));
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int priority) {
    return api_return(create_stream(stream, flags, priority));
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
    if (least) *least = kLeastPriority;
    if (greatest) *greatest = kGreatestPriority;
    return cudaSuccess;
}

// Work already queued still runs (at a later synchronization), as CUDA documents.
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    ApiLock lock;
    Stream* s = lookup(stream);
    if (!s || s->kind != StreamKind::Created) return api_return(cudaErrorInvalidResourceHandle);
    s->destroyed = true;
    state().valid.erase(s);
    return cudaSuccess;
}

cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
    if (!flags) return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    Stream* s = lookup(stream);
    if (!s) return api_return(cudaErrorInvalidResourceHandle);
    *flags = s->flags;
    return cudaSuccess;
}

cudaError_t cudaStreamGetPriority(cudaStream_t stream, int* priority) {
    if (!priority) return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    Stream* s = lookup(stream);
    if (!s) return api_return(cudaErrorInvalidResourceHandle);
    *priority = s->priority;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    Stream* s;
    {
        ApiLock lock;
        s = lookup(stream);
        if (!s) return api_return(cudaErrorInvalidResourceHandle);
    }
    run_work([=] { return stream_idle(s); }, true);
    return api_return(sticky_error(s->device));
}

// Runs the work that is ready (without waiting for external conditions), then reports.
cudaError_t cudaStreamQuery(cudaStream_t stream) {
    Stream* s;
    {
        ApiLock lock;
        s = lookup(stream);
        if (!s) return api_return(cudaErrorInvalidResourceHandle);
    }
    bool idle = run_work([=] { return stream_idle(s); }, false);
    cudaError_t sticky = sticky_error(s->device);
    if (sticky != cudaSuccess) return api_return(sticky);
    return idle ? cudaSuccess : cudaErrorNotReady;  // not-ready is not an error to record
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
    if (flags & ~(unsigned)cudaEventWaitExternal) return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    Stream* s = lookup(stream);
    Event* e = lookup_event(event);
    if (!s || !e) return api_return(cudaErrorInvalidResourceHandle);
    if (!e->record) return cudaSuccess;  // never recorded: nothing to wait for
    Dep dep{e->record->stream, e->record->count};
    enqueue(s, StreamOp{"cudaStreamWaitEvent", nullptr, nullptr}, &dep);
    return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
    if (!fn) return api_return(cudaErrorInvalidValue);
    return api_return(
        stream_enqueue(stream, StreamOp{"cudaLaunchHostFunc", nullptr, [=] { fn(user_data); }}));
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
    unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
    if (!event || (flags & ~known)) return api_return(cudaErrorInvalidValue);
    if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))
        return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    Event* e = new Event{flags, nullptr};
    state().events.insert(e);
    *event = (cudaEvent_t)e;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    ApiLock lock;
    Event* e = lookup_event(event);
    if (!e) return api_return(cudaErrorInvalidResourceHandle);
    state().events.erase(e);
    delete e;  // a pending record keeps its Record alive through the queued op
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    ApiLock lock;
    Event* e = lookup_event(event);
    Stream* s = lookup(stream);
    if (!e || !s) return api_return(cudaErrorInvalidResourceHandle);
    auto record = std::make_shared<Record>(Record{s, s->submitted + 1, s->device});
    enqueue(s, StreamOp{"cudaEventRecord", nullptr, [record] { record->ms = now_ms(); }}, nullptr);
    e->record = record;
    return cudaSuccess;
}

// cudaEventQuery (block = false) and cudaEventSynchronize (block = true): runs queued work until
// the event's last record has completed, or, without blocking, as far as it can; an event never
// recorded is complete. cudaErrorNotReady only comes back without blocking.
static cudaError_t wait_for_event(cudaEvent_t event, bool block) {
    std::shared_ptr<Record> r;
    {
        ApiLock lock;
        Event* e = lookup_event(event);
        if (!e) return api_return(cudaErrorInvalidResourceHandle);
        r = e->record;
    }
    if (!r) return cudaSuccess;
    bool done = run_work([=] { return r->stream->done >= r->count; }, block);
    cudaError_t sticky = sticky_error(r->device);
    if (sticky != cudaSuccess) return api_return(sticky);
    return done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventQuery(cudaEvent_t event) { return wait_for_event(event, false); }

cudaError_t cudaEventSynchronize(cudaEvent_t event) { return wait_for_event(event, true); }

// Milliseconds between the times the two records ran. Does not run work: an unfinished record
// gives cudaErrorNotReady.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (!ms) return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    Event* a = lookup_event(start);
    Event* b = lookup_event(end);
    if (!a || !b || (a->flags & cudaEventDisableTiming) || (b->flags & cudaEventDisableTiming) ||
        !a->record || !b->record)
        return api_return(cudaErrorInvalidResourceHandle);
    if (a->record->stream->done < a->record->count || b->record->stream->done < b->record->count)
        return cudaErrorNotReady;
    *ms = (float)(b->record->ms - a->record->ms);
    return cudaSuccess;
}

}  // extern "C"
