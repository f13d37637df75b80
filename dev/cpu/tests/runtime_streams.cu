// runtime_streams.cu: stream and event semantics of the CPU runtime.
//   race / event:   stream A writes a buffer, stream B reads it. Without an event the order is
//                   up to the scheduler: right in submission order, wrong for some seed under
//                   CUCC_SCHEDULE=random. With cudaEventRecord + cudaStreamWaitEvent it is
//                   right for every seed.
//   legacy:         the legacy default stream waits for blocking streams and they wait for
//                   it; a cudaStreamNonBlocking stream races with it (exposed by some seed).
//   timing:         cudaEventElapsedTime around a 30 ms host function; not-ready and invalid
//                   handle errors.
//   query:          cudaStreamQuery runs ready work; an op with an external readiness
//                   predicate is polled until it holds.
//   overflow:       thousands of queued ops start running before any synchronization, in order.
//   destroy:        work queued on a destroyed stream still runs; the handle is invalid.
//   threads:        several host threads using their own streams at once.
//   attributes:     priorities (range -5..0 as on an H100, clamped), the stream attributes
//                   (access policy window, synchronization policy, priority, memory sync
//                   domains) set, read back and copied, with CUDA's errors for a window larger
//                   than accessPolicyMaxWindowSize, a hit ratio above 1 and a launch-only
//                   attribute; cudaCtxResetPersistingL2Cache; work still runs right after.
//   callback-sync:  a host function that synchronizes is reported instead of waiting forever.
//   printf / exit:  kernel printf appears at synchronization; work still queued at exit is
//                   discarded without a crash.
// Each mode prints what it compared and exits 0 when the result is the expected one.
//! cpu-only
//! run: ./prog race => pass /stream race: right/
//! run: for s in 1 2 3 4 5 6 7 8 9 10; do CUCC_SCHEDULE=random CUCC_SEED=$s ./prog race || exit 0; done; exit 1 => pass /stream race: wrong/
//! run: for s in 1 2 3 4 5 6 7 8 9 10; do CUCC_SCHEDULE=random CUCC_SEED=$s ./prog event || exit 1; done => pass /stream race: right/
//! run: for s in 1 2 3 4 5 6 7 8 9 10; do CUCC_SCHEDULE=random CUCC_SEED=$s ./prog legacy || exit 1; done => pass /legacy: right/
//! run: for s in 1 2 3 4 5 6 7 8 9 10; do CUCC_SCHEDULE=random CUCC_SEED=$s ./prog nonblocking || exit 0; done; exit 1 => pass /non-blocking race: wrong/
//! run: ./prog timing => pass /timing: right/
//! run: ./prog query => pass /query: right/
//! run: ./prog overflow => pass /overflow: right/
//! run: ./prog destroy => pass /destroy: right/
//! run: ./prog threads => pass /threads: right/
//! run: CUCC_SCHEDULE=random ./prog threads => pass /threads: right/
//! run: ./prog attributes => pass /attributes: right/
//! run: ./prog callback-sync => fail /cucc: cudaLaunchHostFunc called a synchronizing CUDA function from inside queued device work/
//! run: ./prog printf => pass /hello from block 1 thread 2/
//! run: out=$(./prog exit) && echo "$out" && ! echo "$out" | grep -q "queued printf" => pass /exiting with work queued/
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <cucc/streams.h>  // cucc::stream_enqueue: work that waits on an outside condition
#include "test_util.h"

const int N = 4096;

__global__ void write_kernel(int* buf, int value) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) buf[i] = value + i;
}

__global__ void double_kernel(int* out, const int* buf) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = 2 * buf[i];
}

__global__ void increment_kernel(int* buf, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) buf[i] += 1;
}

__global__ void printf_kernel(const char* tag) {
    if (blockIdx.x == 1 && threadIdx.x == 2)
        printf("%s from block %d thread %d\n", tag, blockIdx.x, threadIdx.x);
}

// Counts how many of out[i] == 2 * (value + i); returns the number of mismatches.
static int mismatches(const int* dout, int value) {
    std::vector<int> h(N);
    CUDA_CHECK(cudaMemcpy(h.data(), dout, N * sizeof(int), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < N; i++) wrong += h[i] != 2 * (value + i);
    return wrong;
}

// Stream a writes, stream b doubles what a wrote; with_event orders them.
static int stream_race(bool with_event) {
    int *buf, *out;
    CUDA_CHECK(cudaMalloc(&buf, N * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&out, N * sizeof(int)));
    CUDA_CHECK(cudaMemset(buf, 0, N * sizeof(int)));
    cudaStream_t a, b;
    CUDA_CHECK(cudaStreamCreate(&a));
    CUDA_CHECK(cudaStreamCreate(&b));
    cudaEvent_t written;
    CUDA_CHECK(cudaEventCreateWithFlags(&written, cudaEventDisableTiming));
    write_kernel<<<N / 256, 256, 0, a>>>(buf, 100);
    if (with_event) {
        CUDA_CHECK(cudaEventRecord(written, a));
        CUDA_CHECK(cudaStreamWaitEvent(b, written, 0));
    }
    double_kernel<<<N / 256, 256, 0, b>>>(out, buf);
    CUDA_CHECK(cudaDeviceSynchronize());
    int wrong = mismatches(out, 100);
    printf("stream race: %s (%d of %d values differ from the host result)\n",
           wrong ? "wrong" : "right", wrong, N);
    return wrong ? 1 : 0;
}

// The legacy default stream against blocking streams (always ordered) and, when nonblocking,
// against a cudaStreamNonBlocking stream (not ordered).
static int legacy(bool nonblocking) {
    int *buf, *out;
    CUDA_CHECK(cudaMalloc(&buf, N * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&out, N * sizeof(int)));
    CUDA_CHECK(cudaMemset(buf, 0, N * sizeof(int)));
    cudaStream_t s;
    CUDA_CHECK(
        cudaStreamCreateWithFlags(&s, nonblocking ? cudaStreamNonBlocking : cudaStreamDefault));
    if (nonblocking) {
        write_kernel<<<N / 256, 256, 0, s>>>(buf, 5);
        double_kernel<<<N / 256, 256>>>(out, buf);
        CUDA_CHECK(cudaDeviceSynchronize());
        int wrong = mismatches(out, 5);
        printf("non-blocking race: %s (%d values differ)\n", wrong ? "wrong" : "right", wrong);
        return wrong ? 1 : 0;
    }
    int wrong = 0;
    write_kernel<<<N / 256, 256, 0, s>>>(buf, 1);     // blocking stream, then
    double_kernel<<<N / 256, 256, 0, 0>>>(out, buf);  // legacy stream reads it
    CUDA_CHECK(cudaDeviceSynchronize());
    wrong += mismatches(out, 1);
    write_kernel<<<N / 256, 256>>>(buf, 2);           // legacy stream, then
    double_kernel<<<N / 256, 256, 0, s>>>(out, buf);  // blocking stream reads it
    CUDA_CHECK(cudaDeviceSynchronize());
    wrong += mismatches(out, 2);
    write_kernel<<<N / 256, 256, 0, cudaStreamPerThread>>>(buf, 3);  // per-thread stream, then
    double_kernel<<<N / 256, 256, 0, cudaStreamLegacy>>>(out, buf);  // legacy stream
    CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    wrong += mismatches(out, 3);
    printf("legacy: %s (%d values differ)\n", wrong ? "wrong" : "right", wrong);
    return wrong ? 1 : 0;
}

static void sleep_30ms(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }

static int timing() {
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    cudaEvent_t start, stop, never, untimed;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventCreate(&never));
    CUDA_CHECK(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(start, s));
    CUDA_CHECK(cudaLaunchHostFunc(s, sleep_30ms, nullptr));
    CUDA_CHECK(cudaEventRecord(stop, s));
    CUDA_CHECK(cudaEventRecord(untimed, s));
    float ms = -1;
    cudaError_t early = cudaEventElapsedTime(&ms, start, stop);  // nothing has run yet
    CUDA_CHECK(cudaEventSynchronize(stop));
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    cudaError_t query = cudaEventQuery(stop);
    cudaError_t query_never = cudaEventQuery(never);
    cudaError_t elapsed_never = cudaEventElapsedTime(&ms, start, never);
    cudaError_t elapsed_untimed = cudaEventElapsedTime(&ms, start, untimed);
    float measured;
    CUDA_CHECK(cudaEventElapsedTime(&measured, start, stop));
    printf(
        "elapsed %.2f ms (expected 30 to 3000); before sync %s; query %s; never recorded: "
        "query %s, elapsed %s; timing disabled: %s\n",
        measured, cudaGetErrorName(early), cudaGetErrorName(query), cudaGetErrorName(query_never),
        cudaGetErrorName(elapsed_never), cudaGetErrorName(elapsed_untimed));
    bool ok = measured >= 30.0f && measured < 3000.0f && early == cudaErrorNotReady &&
              query == cudaSuccess && query_never == cudaSuccess &&
              elapsed_never == cudaErrorInvalidResourceHandle &&
              elapsed_untimed == cudaErrorInvalidResourceHandle;
    printf("timing: %s\n", ok ? "right" : "wrong");
    return ok ? 0 : 1;
}

static int query() {
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    int* buf;
    CUDA_CHECK(cudaMalloc(&buf, N * sizeof(int)));
    write_kernel<<<N / 256, 256, 0, s>>>(buf, 9);
    cudaError_t first = cudaStreamQuery(s);  // runs the kernel: it is ready
    // An op that only becomes ready on the 5th poll, like a collective waiting for peers.
    static int polls = 0;
    static bool ran = false;
    CUDA_CHECK(cucc::stream_enqueue(
        s, cucc::StreamOp{"external", [] { return ++polls >= 5; }, [] { ran = true; }}));
    cudaError_t pending = cudaStreamQuery(s);
    int polls_after_query = polls;
    CUDA_CHECK(cudaStreamSynchronize(s));
    cudaError_t done = cudaStreamQuery(s);
    std::vector<int> h(N);
    CUDA_CHECK(cudaMemcpy(h.data(), buf, N * sizeof(int), cudaMemcpyDeviceToHost));
    cudaStream_t bogus = (cudaStream_t)0x1234;
    cudaError_t invalid = cudaStreamQuery(bogus);
    printf(
        "first query %s, with external op %s (%d polls), after sync %s (%d polls, ran %d), "
        "bogus handle %s\n",
        cudaGetErrorName(first), cudaGetErrorName(pending), polls_after_query,
        cudaGetErrorName(done), polls, ran, cudaGetErrorName(invalid));
    bool ok = first == cudaSuccess && pending == cudaErrorNotReady && done == cudaSuccess &&
              polls == 5 && ran && h[N - 1] == 9 + N - 1 &&
              invalid == cudaErrorInvalidResourceHandle;
    printf("query: %s\n", ok ? "right" : "wrong");
    return ok ? 0 : 1;
}

static int overflow_count = 0, overflow_errors = 0;
static void count_op(void* index) {
    if ((long)index != overflow_count) overflow_errors++;
    overflow_count++;
}

static int overflow() {
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    const long ops = 5000;
    for (long i = 0; i < ops; i++) CUDA_CHECK(cudaLaunchHostFunc(s, count_op, (void*)i));
    int before_sync = overflow_count;
    CUDA_CHECK(cudaStreamSynchronize(s));
    printf("%d of %ld ops ran before synchronizing, %d after, %d out of order\n", before_sync, ops,
           overflow_count, overflow_errors);
    bool ok = before_sync > 0 && before_sync < ops && overflow_count == ops && !overflow_errors;
    printf("overflow: %s\n", ok ? "right" : "wrong");
    return ok ? 0 : 1;
}

static int destroy() {
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    int *buf, *out;
    CUDA_CHECK(cudaMalloc(&buf, N * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&out, N * sizeof(int)));
    write_kernel<<<N / 256, 256, 0, s>>>(buf, 11);
    double_kernel<<<N / 256, 256, 0, s>>>(out, buf);
    CUDA_CHECK(cudaStreamDestroy(s));
    cudaError_t reuse = cudaStreamSynchronize(s);
    cudaError_t twice = cudaStreamDestroy(s);
    write_kernel<<<1, 1, 0, s>>>(buf, 0);
    cudaError_t launch = cudaGetLastError();
    CUDA_CHECK(cudaDeviceSynchronize());
    int wrong = mismatches(out, 11);
    printf("queued work ran: %d values differ; destroyed handle: sync %s, destroy %s, launch %s\n",
           wrong, cudaGetErrorName(reuse), cudaGetErrorName(twice), cudaGetErrorName(launch));
    bool ok = !wrong && reuse == cudaErrorInvalidResourceHandle &&
              twice == cudaErrorInvalidResourceHandle && launch == cudaErrorInvalidResourceHandle;
    printf("destroy: %s\n", ok ? "right" : "wrong");
    return ok ? 0 : 1;
}

// Each host thread owns a stream and a buffer and increments it 30 times, checking each time.
static int threads() {
    const int nthreads = 4, rounds = 30, n = 1000;
    std::vector<int> errors(nthreads, 0);
    std::vector<std::thread> pool;
    for (int t = 0; t < nthreads; t++) {
        pool.emplace_back([&, t] {
            cudaStream_t s;
            int* d;
            std::vector<int> h(n, t);
            if (cudaStreamCreate(&s) != cudaSuccess ||
                cudaMalloc(&d, n * sizeof(int)) != cudaSuccess) {
                errors[t]++;
                return;
            }
            cudaMemcpyAsync(d, h.data(), n * sizeof(int), cudaMemcpyHostToDevice, s);
            for (int r = 1; r <= rounds; r++) {
                increment_kernel<<<(n + 127) / 128, 128, 0, s>>>(d, n);
                cudaMemcpyAsync(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, s);
                if (cudaStreamSynchronize(s) != cudaSuccess) errors[t]++;
                for (int i = 0; i < n; i++) errors[t] += h[i] != t + r;
            }
            cudaFree(d);
            cudaStreamDestroy(s);
        });
    }
    for (auto& th : pool) th.join();
    int total = 0;
    for (int e : errors) total += e;
    printf("threads: %s (%d errors over %d host threads)\n", total ? "wrong" : "right", total,
           nthreads);
    return total ? 1 : 0;
}

static int attributes() {
    int least, greatest, p_hi, p_lo, p_clamped;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t hi, lo, clamped;
    CUDA_CHECK(cudaStreamCreateWithPriority(&hi, cudaStreamNonBlocking, greatest));
    CUDA_CHECK(cudaStreamCreateWithPriority(&lo, cudaStreamDefault, least));
    CUDA_CHECK(cudaStreamCreateWithPriority(&clamped, cudaStreamDefault, greatest - 10));
    CUDA_CHECK(cudaStreamGetPriority(hi, &p_hi));
    CUDA_CHECK(cudaStreamGetPriority(lo, &p_lo));
    CUDA_CHECK(cudaStreamGetPriority(clamped, &p_clamped));
    bool ok = least == 0 && greatest == -5 && p_hi == -5 && p_lo == 0 && p_clamped == -5;
    printf("priorities: range %d..%d, streams %d %d, clamped %d\n", least, greatest, p_hi, p_lo,
           p_clamped);

    int max_window;
    CUDA_CHECK(cudaDeviceGetAttribute(&max_window, cudaDevAttrMaxAccessPolicyWindowSize, 0));
    int* buf;
    CUDA_CHECK(cudaMalloc(&buf, N * sizeof(int)));
    cudaStreamAttrValue v = {}, back = {};
    v.accessPolicyWindow.base_ptr = buf;
    v.accessPolicyWindow.num_bytes = N * sizeof(int);
    v.accessPolicyWindow.hitRatio = 0.75f;
    v.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    v.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    CUDA_CHECK(cudaStreamSetAttribute(hi, cudaStreamAttributeAccessPolicyWindow, &v));
    CUDA_CHECK(cudaStreamGetAttribute(hi, cudaStreamAttributeAccessPolicyWindow, &back));
    ok &= back.accessPolicyWindow.base_ptr == buf &&
          back.accessPolicyWindow.num_bytes == N * sizeof(int) &&
          back.accessPolicyWindow.hitRatio == 0.75f &&
          back.accessPolicyWindow.hitProp == cudaAccessPropertyPersisting;
    v.syncPolicy = cudaSyncPolicyBlockingSync;
    CUDA_CHECK(cudaStreamSetAttribute(hi, cudaStreamAttributeSynchronizationPolicy, &v));
    v.priority = -3;
    CUDA_CHECK(cudaStreamSetAttribute(hi, cudaStreamAttributePriority, &v));
    v.memSyncDomain = cudaLaunchMemSyncDomainRemote;
    CUDA_CHECK(cudaStreamSetAttribute(hi, cudaStreamAttributeMemSyncDomain, &v));
    CUDA_CHECK(cudaStreamCopyAttributes(lo, hi));
    back = {};
    CUDA_CHECK(cudaStreamGetAttribute(lo, cudaStreamAttributeAccessPolicyWindow, &back));
    ok &= back.accessPolicyWindow.base_ptr == buf;
    CUDA_CHECK(cudaStreamGetAttribute(lo, cudaStreamAttributeSynchronizationPolicy, &back));
    ok &= back.syncPolicy == cudaSyncPolicyBlockingSync;
    CUDA_CHECK(cudaStreamGetAttribute(lo, cudaStreamAttributePriority, &back));
    ok &= back.priority == -3;
    CUDA_CHECK(cudaStreamGetPriority(lo, &p_lo));
    ok &= p_lo == -3;
    CUDA_CHECK(cudaStreamGetAttribute(lo, cudaStreamAttributeMemSyncDomain, &back));
    ok &= back.memSyncDomain == cudaLaunchMemSyncDomainRemote;
    CUDA_CHECK(cudaStreamGetAttribute(clamped, cudaStreamAttributeMemSyncDomainMap, &back));
    ok &= back.memSyncDomainMap.default_ == 0 && back.memSyncDomainMap.remote == 1;

    v.accessPolicyWindow.num_bytes = (size_t)max_window + 1;
    cudaError_t too_big = cudaStreamSetAttribute(hi, cudaStreamAttributeAccessPolicyWindow, &v);
    v.accessPolicyWindow.num_bytes = 1024;
    v.accessPolicyWindow.hitRatio = 1.5f;
    cudaError_t bad_ratio = cudaStreamSetAttribute(hi, cudaStreamAttributeAccessPolicyWindow, &v);
    cudaError_t launch_only = cudaStreamSetAttribute(hi, cudaLaunchAttributeCooperative, &v);
    cudaGetLastError();
    printf("errors: window %s, hit ratio %s, launch-only attribute %s\n", cudaGetErrorName(too_big),
           cudaGetErrorName(bad_ratio), cudaGetErrorName(launch_only));
    ok &= too_big == cudaErrorInvalidValue && bad_ratio == cudaErrorInvalidValue &&
          launch_only == cudaErrorInvalidValue;
    CUDA_CHECK(cudaCtxResetPersistingL2Cache());

    int* out;
    CUDA_CHECK(cudaMalloc(&out, N * sizeof(int)));
    write_kernel<<<N / 256, 256, 0, hi>>>(buf, 5);
    CUDA_CHECK(cudaStreamSynchronize(hi));
    double_kernel<<<N / 256, 256, 0, lo>>>(out, buf);
    CUDA_CHECK(cudaStreamSynchronize(lo));
    ok &= mismatches(out, 5) == 0;
    printf("attributes: %s\n", ok ? "right" : "wrong");
    return ok ? 0 : 1;
}

int main(int argc, char** argv) {
    const char* mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "race")) return stream_race(false);
    if (!strcmp(mode, "event")) return stream_race(true);
    if (!strcmp(mode, "legacy")) return legacy(false);
    if (!strcmp(mode, "nonblocking")) return legacy(true);
    if (!strcmp(mode, "timing")) return timing();
    if (!strcmp(mode, "query")) return query();
    if (!strcmp(mode, "overflow")) return overflow();
    if (!strcmp(mode, "destroy")) return destroy();
    if (!strcmp(mode, "threads")) return threads();
    if (!strcmp(mode, "attributes")) return attributes();
    if (!strcmp(mode, "callback-sync")) {
        CUDA_CHECK(cudaLaunchHostFunc(
            0, [](void*) { cudaDeviceSynchronize(); }, nullptr));
        cudaDeviceSynchronize();
        printf("no error was reported\n");
        return 0;  // the run line expects a failure
    }
    if (!strcmp(mode, "printf")) {
        printf_kernel<<<2, 4>>>("hello");
        CUDA_CHECK(cudaDeviceSynchronize());
        return 0;
    }
    if (!strcmp(mode, "exit")) {
        cudaStream_t s;
        CUDA_CHECK(cudaStreamCreate(&s));
        printf_kernel<<<2, 4, 0, s>>>("queued printf");
        printf("exiting with work queued\n");
        return 0;
    }
    printf(
        "usage: %s "
        "race|event|legacy|nonblocking|timing|query|overflow|destroy|threads|attributes|"
        "callback-sync|printf|exit\n",
        argv[0]);
    return 2;
}
