// stream.cpp: streams, events and the queue of pending device work.
//
// Nothing runs when it is queued. Work runs on a host thread that needs it done: a
// synchronization (stream, event, device), a synchronous copy or memset, a query (which runs
// what is ready without waiting), or an enqueue that finds more than kMaxPending ops queued.
// A GPU also runs queued work when no host thread waits for it, and programs rely on that: a
// stream callback that hands the results to a thread of its own (cuda-samples' simpleCallback),
// a host loop polling a flag in mapped memory without any CUDA call. So a progress thread,
// started with the first queued op, runs what is ready once the runtime has seen no activity
// (no op queued, started or finished, no synchronization begun) for kProgressDelay while work
// is pending; a program that synchronizes runs its work itself, on its own thread, as before.
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
//
// Stream capture. cudaStreamBeginCapture puts a created stream in capture mode: what is queued on
// it becomes nodes of the capture's graph (graph.cpp) instead of work. Each capturing stream
// keeps its frontier, the nodes the next one depends on. An event recorded on a capturing stream
// remembers the frontier (it does not become a node); a stream waiting on such an event joins
// the capture with that frontier (fork) or, already in it, adds it (join).
// cudaStreamBeginCaptureToGraph captures into the caller's graph instead, the first nodes
// depending on the given ones; the caller keeps that graph whatever the capture's outcome.
// cudaStreamEndCapture on the stream that began it returns the graph, once every stream that
// joined has been joined back (its frontier lies in what the origin depends on), else
// cudaErrorStreamCaptureUnjoined. Errors CUDA documents: work on the legacy stream while a
// blocking stream of its device captures (cudaErrorStreamCaptureImplicit), waiting from a
// capturing stream on an event of uncaptured work (cudaErrorStreamCaptureIsolation),
// synchronizing a capturing stream, and potentially unsafe calls (allocation, free, synchronous
// copies, device synchronization) under the rules of cudaThreadExchangeStreamCaptureMode
// (cudaErrorStreamCaptureUnsupported). Each error but the last-named ones invalidates the
// capture: cudaStreamEndCapture then gives cudaErrorStreamCaptureInvalidated and no graph.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <set>
#include <thread>
#include <unordered_set>
#include <vector>

#include "internal.h"

namespace cucc {
namespace {

constexpr uint64_t kMaxPending = 1024;  // queued ops past which an enqueue runs ready work
// Idle time after which the progress thread runs pending work (see the top of this file).
constexpr auto kProgressDelay = std::chrono::milliseconds(20);
constexpr int kLeastPriority = 0, kGreatestPriority = -5;
// A requested priority outside the range is clamped to it, as CUDA does.
int clamp_priority(int priority) {
    return std::max(kGreatestPriority, std::min(kLeastPriority, priority));
}

struct Stream;

// One capture sequence (cudaStreamBeginCapture .. cudaStreamEndCapture).
struct Capture {
    unsigned long long id;
    cudaGraph_t graph;
    cudaStreamCaptureMode mode;
    std::thread::id owner;  // the thread that began it
    Stream* origin;
    bool invalidated = false;
    std::vector<Stream*> streams;  // every stream in it, the origin first
    bool user_graph = false;       // cudaStreamBeginCaptureToGraph: the caller owns the graph
};

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
    Capture* capture = nullptr;              // the capture it records into, if any
    cudaAccessPolicyWindow access_policy{};  // stream attributes: hints, stored and reported
    cudaSynchronizationPolicy sync_policy = cudaSyncPolicyAuto;
    cudaLaunchMemSyncDomainMap domain_map{0, 1};
    cudaLaunchMemSyncDomain domain = cudaLaunchMemSyncDomainDefault;
    std::vector<cudaGraphNode_t> frontier;  // while capturing: what the next node depends on
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
    // Last recorded on a capturing stream: that capture and the stream's frontier then.
    Capture* capture = nullptr;
    std::vector<cudaGraphNode_t> captured;
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
    // The progress thread: started with the first queued op; `activity` is when the runtime
    // last queued, started or finished an op or began a synchronization; `exiting` stops it
    // at process exit, which waits for the op it is running (progress_running). It sleeps on
    // a condition of its own, told only of the exit: woken by every finished op, as it was
    // on `progress`, it cost every kernel two context switches and four futex calls.
    std::condition_variable_any progress_tick;
    bool progress_started = false, exiting = false, progress_running = false;
    std::chrono::steady_clock::time_point activity;
    std::vector<Capture*> captures;        // ongoing captures
    unsigned long long next_capture_id = 1;
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
thread_local cudaStreamCaptureMode tls_capture_mode = cudaStreamCaptureModeGlobal;

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

void start_progress_thread();

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
    st.activity = std::chrono::steady_clock::now();
    if (!st.progress_started) start_progress_thread();
}

// Under the lock: ends capture c for all its streams (the graph is the caller's).
void end_capture(Capture* c) {
    for (Stream* t : c->streams) {
        t->capture = nullptr;
        t->frontier.clear();
    }
    auto& all = state().captures;
    all.erase(std::find(all.begin(), all.end(), c));
    delete c;
}

// Under the lock: does the legacy stream of `device` have to wait for a capturing stream?
Capture* capture_blocking_legacy(int device) {
    for (Capture* c : state().captures)
        for (Stream* t : c->streams)
            if (t->device == device && t->blocking()) return c;
    return nullptr;
}

// Under the lock: records op as a node of s's capture after s's frontier.
cudaError_t record_node(Stream* s, StreamOp op) {
    Capture* c = s->capture;
    if (c->invalidated) return cudaErrorStreamCaptureInvalidated;
    if (!op.capturable) {
        c->invalidated = true;
        return cudaErrorStreamCaptureUnsupported;
    }
    cudaGraphNodeType type = op.node_type;
    NodeLaunch launch = [op](cudaStream_t t) { return stream_enqueue(t, op); };
    s->frontier = {add_graph_node(c->graph, type, std::move(launch), s->frontier)};
    return cudaSuccess;
}

// Under the lock: a synchronization of stream s, which is not allowed while it captures.
cudaError_t refuse_if_capturing(Stream* s) {
    if (!s->capture) return cudaSuccess;
    s->capture->invalidated = true;
    return cudaErrorStreamCaptureUnsupported;
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
    st.activity = idle_since;
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
        st.activity = std::chrono::steady_clock::now();
        st.progress.notify_all();
    }
}

// The progress thread's loop (see the top of this file): when work is pending, none is running
// and nothing happened for kProgressDelay, runs what is ready; it sleeps until the runtime will
// have been idle that long (a whole delay when there is nothing to run).
void progress_loop() {
    StreamState& st = state();
    std::unique_lock<std::recursive_mutex> lock(api_mutex());
    auto wait = std::chrono::steady_clock::duration(kProgressDelay);
    for (;;) {
        st.progress_tick.wait_for(lock, wait);
        if (st.exiting) return;
        wait = kProgressDelay;
        if (st.pending == 0 || st.running > 0) continue;
        const auto idle = std::chrono::steady_clock::now() - st.activity;
        if (idle < kProgressDelay) {
            wait = kProgressDelay - idle;
            continue;
        }
        st.progress_running = true;
        lock.unlock();
        run_work([] { return state().exiting; }, false);
        lock.lock();
        st.progress_running = false;
        st.progress.notify_all();
    }
}

// At exit: queued work is discarded (runtime.h), so the progress thread stops; an op it is
// running is let finish, as the exit would otherwise free what that op uses.
void stop_progress_thread() {
    StreamState& st = state();
    std::unique_lock<std::recursive_mutex> lock(api_mutex());
    st.exiting = true;
    st.progress_tick.notify_all();
    while (st.progress_running) st.progress.wait(lock);
}

// Under the lock.
void start_progress_thread() {
    StreamState& st = state();
    st.progress_started = true;
    if (atexit(stop_progress_thread) != 0) fatal("atexit failed for the stream progress thread");
    std::thread(progress_loop).detach();
}

bool stream_idle(const Stream* s) { return s->queue.empty() && !s->running; }

cudaError_t create_stream(cudaStream_t* out, unsigned flags, int priority) {
    if (!out || (flags & ~(unsigned)cudaStreamNonBlocking)) return cudaErrorInvalidValue;
    // CUDA clamps priorities to the device's range.
    priority = clamp_priority(priority);
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

bool stream_is_capturing(cudaStream_t stream) {
    ApiLock lock;
    Stream* s = lookup(stream);
    return s && s->capture;
}

cudaError_t stream_enqueue(cudaStream_t stream, StreamOp op) {
    bool overflow;
    {
        ApiLock lock;
        Stream* s = lookup(stream);
        if (!s) return cudaErrorInvalidResourceHandle;
        if (s->capture) return record_node(s, std::move(op));
        if (s->kind == StreamKind::Legacy) {
            if (Capture* c = capture_blocking_legacy(s->device)) {
                c->invalidated = true;
                return cudaErrorStreamCaptureImplicit;
            }
        }
        if (op.make) op = op.make();
        enqueue(s, std::move(op), nullptr);
        overflow = state().pending > kMaxPending;
    }
    // Too much queued: run what is ready now (never waiting), unless the caller holds the lock.
    if (overflow && api_lock_depth() == 0)
        run_work([] { return state().pending <= kMaxPending / 2; }, false);
    return cudaSuccess;
}

cudaError_t check_capture_safe() {
    ApiLock lock;
    if (tls_capture_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
    cudaError_t err = cudaSuccess;
    for (Capture* c : state().captures) {
        bool own = c->owner == std::this_thread::get_id();
        if (own && c->mode != cudaStreamCaptureModeRelaxed) {
            c->invalidated = true;
            err = cudaErrorStreamCaptureUnsupported;
        } else if (!own && c->mode == cudaStreamCaptureModeGlobal &&
                   tls_capture_mode == cudaStreamCaptureModeGlobal) {
            err = cudaErrorStreamCaptureUnsupported;
        }
    }
    return err;
}

cudaError_t enqueue_and_wait(cudaStream_t stream, StreamOp op) {
    Stream* s;
    uint64_t target;
    {
        ApiLock lock;
        s = lookup(stream);
        if (!s) return cudaErrorInvalidResourceHandle;
        if (cudaError_t err = refuse_if_capturing(s)) return err;
        if (s->kind == StreamKind::Legacy) {
            if (Capture* c = capture_blocking_legacy(s->device)) {
                c->invalidated = true;
                return cudaErrorStreamCaptureImplicit;
            }
        }
        if (op.make) op = op.make();
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

void run_until(const std::function<bool()>& done) { run_work(done, true); }

cudaError_t record_event(cudaEvent_t event, cudaStream_t stream) {
    ApiLock lock;
    Event* e = lookup_event(event);
    Stream* s = lookup(stream);
    if (!e || !s) return cudaErrorInvalidResourceHandle;
    if (s->capture) {
        // A capture-time record marks a point of the capture for other streams to wait on.
        if (s->capture->invalidated) return cudaErrorStreamCaptureInvalidated;
        e->capture = s->capture;
        e->captured = s->frontier;
        return cudaSuccess;
    }
    if (s->kind == StreamKind::Legacy) {
        if (Capture* c = capture_blocking_legacy(s->device)) {
            c->invalidated = true;
            return cudaErrorStreamCaptureImplicit;
        }
    }
    auto record = std::make_shared<Record>(Record{s, s->submitted + 1, s->device});
    StreamOp op{"cudaEventRecord", nullptr, [record] { record->ms = now_ms(); }};
    enqueue(s, std::move(op), nullptr);
    e->record = record;
    e->capture = nullptr;
    e->captured.clear();
    return cudaSuccess;
}

cudaError_t wait_event(cudaStream_t stream, cudaEvent_t event) {
    ApiLock lock;
    Stream* s = lookup(stream);
    Event* e = lookup_event(event);
    if (!s || !e) return cudaErrorInvalidResourceHandle;
    StreamState& st = state();
    bool live_capture = e->capture && std::find(st.captures.begin(), st.captures.end(),
                                                e->capture) != st.captures.end();
    if (e->capture && !live_capture) return cudaErrorStreamCaptureIsolation;
    if (live_capture) {
        Capture* c = e->capture;
        if (s->capture == c) {
            // Join: s now also depends on what the event marked.
            for (cudaGraphNode_t n : e->captured)
                if (std::find(s->frontier.begin(), s->frontier.end(), n) == s->frontier.end())
                    s->frontier.push_back(n);
            return cudaSuccess;
        }
        if (s->capture) {
            s->capture->invalidated = c->invalidated = true;
            return cudaErrorStreamCaptureMerge;
        }
        if (s->kind != StreamKind::Created) {
            c->invalidated = true;
            return cudaErrorStreamCaptureImplicit;
        }
        // Fork: s joins the capture, after what the event marked.
        s->capture = c;
        s->frontier = e->captured;
        c->streams.push_back(s);
        return cudaSuccess;
    }
    if (s->capture) {
        if (!e->record) return cudaSuccess;  // never recorded: nothing to wait for
        s->capture->invalidated = true;
        return cudaErrorStreamCaptureIsolation;
    }
    if (!e->record) return cudaSuccess;
    Dep dep{e->record->stream, e->record->count};
    StreamOp op{"cudaStreamWaitEvent", nullptr, nullptr};
    enqueue(s, std::move(op), &dep);
    return cudaSuccess;
}

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

// Stream attributes. The L2 access policy window, synchronization policy and memory
// synchronization domains are performance hints with no effect here; they are checked as CUDA
// documents, kept, and reported back. Priority is the stream's priority (clamped to the range).
cudaError_t cudaStreamSetAttribute(cudaStream_t stream, cudaStreamAttrID attr,
                                   const cudaStreamAttrValue* value) {
    if (!value) return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    Stream* s = lookup(stream);
    if (!s) return api_return(cudaErrorInvalidResourceHandle);
    switch (attr) {
        case cudaLaunchAttributeAccessPolicyWindow: {
            const cudaAccessPolicyWindow& w = value->accessPolicyWindow;
            if (w.num_bytes > (size_t)kAccessPolicyMaxWindowSize || !(w.hitRatio >= 0.0f) ||
                w.hitRatio > 1.0f)
                return api_return(cudaErrorInvalidValue);
            s->access_policy = w;
            return cudaSuccess;
        }
        case cudaLaunchAttributeSynchronizationPolicy:
            if (value->syncPolicy < cudaSyncPolicyAuto ||
                value->syncPolicy > cudaSyncPolicyBlockingSync)
                return api_return(cudaErrorInvalidValue);
            s->sync_policy = value->syncPolicy;
            return cudaSuccess;
        case cudaLaunchAttributePriority:
            s->priority = clamp_priority(value->priority);
            return cudaSuccess;
        case cudaLaunchAttributeMemSyncDomainMap:
            s->domain_map = value->memSyncDomainMap;
            return cudaSuccess;
        case cudaLaunchAttributeMemSyncDomain:
            if (value->memSyncDomain != cudaLaunchMemSyncDomainDefault &&
                value->memSyncDomain != cudaLaunchMemSyncDomainRemote)
                return api_return(cudaErrorInvalidValue);
            s->domain = value->memSyncDomain;
            return cudaSuccess;
        default:
            return api_return(cudaErrorInvalidValue);  // not an attribute of streams
    }
}

cudaError_t cudaStreamGetAttribute(cudaStream_t stream, cudaStreamAttrID attr,
                                   cudaStreamAttrValue* value) {
    if (!value) return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    Stream* s = lookup(stream);
    if (!s) return api_return(cudaErrorInvalidResourceHandle);
    switch (attr) {
        case cudaLaunchAttributeAccessPolicyWindow:
            value->accessPolicyWindow = s->access_policy;
            break;
        case cudaLaunchAttributeSynchronizationPolicy:
            value->syncPolicy = s->sync_policy;
            break;
        case cudaLaunchAttributePriority:
            value->priority = s->priority;
            break;
        case cudaLaunchAttributeMemSyncDomainMap:
            value->memSyncDomainMap = s->domain_map;
            break;
        case cudaLaunchAttributeMemSyncDomain:
            value->memSyncDomain = s->domain;
            break;
        default:
            return api_return(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaStreamCopyAttributes(cudaStream_t dst, cudaStream_t src) {
    ApiLock lock;
    Stream* d = lookup(dst);
    Stream* s = lookup(src);
    if (!d || !s) return api_return(cudaErrorInvalidResourceHandle);
    d->access_policy = s->access_policy;
    d->sync_policy = s->sync_policy;
    d->priority = s->priority;
    d->domain_map = s->domain_map;
    d->domain = s->domain;
    return cudaSuccess;
}

// Persisting L2 lines are a hint the CPU has nothing to reset for.
cudaError_t cudaCtxResetPersistingL2Cache() { return cudaSuccess; }

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    Stream* s;
    {
        ApiLock lock;
        s = lookup(stream);
        if (!s) return api_return(cudaErrorInvalidResourceHandle);
        if (cudaError_t err = refuse_if_capturing(s)) return api_return(err);
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
        if (cudaError_t err = refuse_if_capturing(s)) return api_return(err);
    }
    bool idle = run_work([=] { return stream_idle(s); }, false);
    cudaError_t sticky = sticky_error(s->device);
    if (sticky != cudaSuccess) return api_return(sticky);
    return idle ? cudaSuccess : cudaErrorNotReady;  // not-ready is not an error to record
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
    if (flags & ~(unsigned)cudaEventWaitExternal) return api_return(cudaErrorInvalidValue);
    {
        ApiLock lock;
        Stream* s = lookup(stream);
        if (s && s->capture && (flags & cudaEventWaitExternal)) {
            // An event wait node: at every launch the graph waits for the event's record then.
            if (!lookup_event(event)) return api_return(cudaErrorInvalidResourceHandle);
            StreamOp wait{"cudaStreamWaitEvent", nullptr, nullptr};
            wait.node_type = cudaGraphNodeTypeWaitEvent;
            Capture* c = s->capture;
            if (c->invalidated) return api_return(cudaErrorStreamCaptureInvalidated);
            NodeLaunch launch = [event](cudaStream_t t) { return wait_event(t, event); };
            s->frontier = {add_graph_node(c->graph, wait.node_type, launch, s->frontier)};
            return cudaSuccess;
        }
    }
    return api_return(wait_event(stream, event));
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
    if (!fn) return api_return(cudaErrorInvalidValue);
    StreamOp op{"cudaLaunchHostFunc", nullptr, [=] { fn(user_data); }};
    op.node_type = cudaGraphNodeTypeHost;
    return api_return(stream_enqueue(stream, std::move(op)));
}

// The older form of cudaLaunchHostFunc: the callback also gets the stream and the device's
// error state (cudaSuccess, or the sticky error of a fault before it).
cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback,
                                  void* user_data, unsigned int flags) {
    if (!callback || flags != 0) return api_return(cudaErrorInvalidValue);
    int device = current_device();
    StreamOp op{"cudaStreamAddCallback", nullptr,
                [=] { callback(stream, sticky_error(device), user_data); }};
    op.node_type = cudaGraphNodeTypeHost;
    return api_return(stream_enqueue(stream, std::move(op)));
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
    unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
    if (!event || (flags & ~known)) return api_return(cudaErrorInvalidValue);
    if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))
        return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    Event* e = new Event{flags, nullptr, nullptr, {}};
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
    return api_return(record_event(event, stream));
}

// cudaEventRecordExternal on a capturing stream makes an event record node: every launch of the
// graph records the event. Otherwise the same as cudaEventRecord.
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
    if (flags & ~(unsigned)cudaEventRecordExternal) return api_return(cudaErrorInvalidValue);
    {
        ApiLock lock;
        Stream* s = lookup(stream);
        if (s && s->capture && (flags & cudaEventRecordExternal)) {
            if (!lookup_event(event)) return api_return(cudaErrorInvalidResourceHandle);
            Capture* c = s->capture;
            if (c->invalidated) return api_return(cudaErrorStreamCaptureInvalidated);
            NodeLaunch launch = [event](cudaStream_t t) { return record_event(event, t); };
            s->frontier = {
                add_graph_node(c->graph, cudaGraphNodeTypeEventRecord, launch, s->frontier)};
            return cudaSuccess;
        }
    }
    return api_return(record_event(event, stream));
}

// cudaEventQuery (block = false) and cudaEventSynchronize (block = true): runs queued work until
// the event's last record has completed, or, without blocking, as far as it can; an event never
// recorded is complete. cudaErrorNotReady only comes back without blocking.
static cudaError_t wait_for_event(cudaEvent_t event, bool block) {
    if (block)
        if (cudaError_t err = check_capture_safe()) return api_return(err);
    std::shared_ptr<Record> r;
    {
        ApiLock lock;
        Event* e = lookup_event(event);
        if (!e) return api_return(cudaErrorInvalidResourceHandle);
        if (e->capture) return api_return(cudaErrorCapturedEvent);
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
    if (!a || !b) return api_return(cudaErrorInvalidResourceHandle);
    if (a->capture || b->capture) return api_return(cudaErrorCapturedEvent);
    if ((a->flags & cudaEventDisableTiming) || (b->flags & cudaEventDisableTiming) || !a->record ||
        !b->record)
        return api_return(cudaErrorInvalidResourceHandle);
    if (a->record->stream->done < a->record->count || b->record->stream->done < b->record->count)
        return cudaErrorNotReady;
    *ms = (float)(b->record->ms - a->record->ms);
    return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// Stream capture.

// Begins a capture into `graph` (a new one when null) whose first nodes depend on deps.
static cudaError_t begin_capture(cudaStream_t stream, cudaGraph_t graph,
                                 const cudaGraphNode_t* deps, const cudaGraphEdgeData* edges,
                                 size_t num_deps, cudaStreamCaptureMode mode) {
    if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
        mode != cudaStreamCaptureModeRelaxed)
        return cudaErrorInvalidValue;
    ApiLock lock;
    Stream* s = lookup(stream);
    if (!s) return cudaErrorInvalidResourceHandle;
    if (s->kind != StreamKind::Created) return cudaErrorStreamCaptureUnsupported;
    if (s->capture) return cudaErrorIllegalState;
    if (graph && !graph_is_live(graph)) return cudaErrorInvalidValue;
    if (num_deps > 0 && (!graph || !deps)) return cudaErrorInvalidValue;
    for (size_t i = 0; i < num_deps; i++) {
        if (!graph_has_node(graph, deps[i])) return cudaErrorInvalidValue;
        if (edges && (edges[i].from_port || edges[i].to_port || edges[i].type))
            return cudaErrorNotSupported;
    }
    StreamState& st = state();
    Capture* c = new Capture{st.next_capture_id++,
                             graph ? graph : new_graph(),
                             mode,
                             std::this_thread::get_id(),
                             s,
                             false,
                             {s},
                             graph != nullptr};
    st.captures.push_back(c);
    s->capture = c;
    s->frontier.assign(deps, deps + num_deps);
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
    return api_return(begin_capture(stream, nullptr, nullptr, nullptr, 0, mode));
}

cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                          const cudaGraphNode_t* deps,
                                          const cudaGraphEdgeData* edges, size_t num_deps,
                                          cudaStreamCaptureMode mode) {
    if (!graph) return api_return(cudaErrorInvalidValue);
    return api_return(begin_capture(stream, graph, deps, edges, num_deps, mode));
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
    if (!graph) return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    Stream* s = lookup(stream);
    if (!s) return api_return(cudaErrorInvalidResourceHandle);
    Capture* c = s->capture;
    if (!c) return api_return(cudaErrorIllegalState);
    *graph = nullptr;
    if (c->origin != s) {
        c->invalidated = true;
        return api_return(cudaErrorStreamCaptureUnmatched);
    }
    if (c->mode != cudaStreamCaptureModeRelaxed && c->owner != std::this_thread::get_id())
        return api_return(cudaErrorStreamCaptureWrongThread);
    // Every node some joined stream depends on must be one the origin depends on.
    std::set<cudaGraphNode_t> reached(s->frontier.begin(), s->frontier.end());
    std::vector<cudaGraphNode_t> pending(s->frontier.begin(), s->frontier.end());
    while (!pending.empty()) {
        cudaGraphNode_t n = pending.back();
        pending.pop_back();
        size_t count = 0;
        cudaGraphNodeGetDependencies(n, nullptr, nullptr, &count);
        std::vector<cudaGraphNode_t> deps(count);
        cudaGraphNodeGetDependencies(n, deps.data(), nullptr, &count);
        for (cudaGraphNode_t d : deps)
            if (reached.insert(d).second) pending.push_back(d);
    }
    bool unjoined = false;
    for (Stream* t : c->streams)
        for (cudaGraphNode_t n : t->frontier) unjoined |= !reached.count(n);
    cudaError_t err = c->invalidated ? cudaErrorStreamCaptureInvalidated
                      : unjoined     ? cudaErrorStreamCaptureUnjoined
                                     : cudaSuccess;
    if (err == cudaSuccess) *graph = c->graph;
    else if (!c->user_graph) delete_graph(c->graph);
    end_capture(c);
    return api_return(err);
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
    if (!status) return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    Stream* s = lookup(stream);
    if (!s) return api_return(cudaErrorInvalidResourceHandle);
    *status = !s->capture               ? cudaStreamCaptureStatusNone
              : s->capture->invalidated ? cudaStreamCaptureStatusInvalidated
                                        : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

// The capture's id and graph and the stream's current dependencies (valid until the stream
// captures more). Edge data is all zero (default edges).
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status,
                                     unsigned long long* id, cudaGraph_t* graph,
                                     const cudaGraphNode_t** dependencies,
                                     const cudaGraphEdgeData** edge_data,
                                     size_t* num_dependencies) {
    if (!status || (edge_data && !dependencies)) return api_return(cudaErrorInvalidValue);
    cudaError_t err = cudaStreamIsCapturing(stream, status);
    if (err != cudaSuccess) return err;
    ApiLock lock;
    Stream* s = lookup(stream);
    Capture* c = s->capture;
    static thread_local std::vector<cudaGraphEdgeData> zero_edges;
    if (c && edge_data) zero_edges.assign(s->frontier.size() + 1, cudaGraphEdgeData{});
    if (id && c) *id = c->id;
    if (graph) *graph = c ? c->graph : nullptr;
    if (dependencies) *dependencies = c ? s->frontier.data() : nullptr;
    if (edge_data) *edge_data = c ? zero_edges.data() : nullptr;
    if (num_dependencies) *num_dependencies = c ? s->frontier.size() : 0;
    return cudaSuccess;
}

cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t stream, cudaGraphNode_t* nodes,
                                                const cudaGraphEdgeData* edges, size_t count,
                                                unsigned int flags) {
    if ((count > 0 && !nodes) ||
        (flags != cudaStreamAddCaptureDependencies && flags != cudaStreamSetCaptureDependencies))
        return api_return(cudaErrorInvalidValue);
    for (size_t i = 0; edges && i < count; i++)
        if (edges[i].from_port || edges[i].to_port || edges[i].type)
            return api_return(cudaErrorNotSupported);
    ApiLock lock;
    Stream* s = lookup(stream);
    if (!s) return api_return(cudaErrorInvalidResourceHandle);
    if (!s->capture) return api_return(cudaErrorIllegalState);
    for (size_t i = 0; i < count; i++)
        if (!graph_has_node(s->capture->graph, nodes[i])) return api_return(cudaErrorInvalidValue);
    if (flags == cudaStreamSetCaptureDependencies) s->frontier.clear();
    for (size_t i = 0; i < count; i++)
        if (std::find(s->frontier.begin(), s->frontier.end(), nodes[i]) == s->frontier.end())
            s->frontier.push_back(nodes[i]);
    return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
    if (!mode ||
        (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
         *mode != cudaStreamCaptureModeRelaxed))
        return api_return(cudaErrorInvalidValue);
    std::swap(*mode, tls_capture_mode);
    return cudaSuccess;
}

cudaError_t cudaStreamGetDevice(cudaStream_t stream, int* device) {
    if (!device) return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    Stream* s = lookup(stream);
    if (!s) return api_return(cudaErrorInvalidResourceHandle);
    *device = s->device;
    return cudaSuccess;
}

}  // extern "C"
