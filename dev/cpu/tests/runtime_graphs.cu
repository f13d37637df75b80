// CUDA graphs on the CPU runtime, as the CUDA runtime documents them:
//   - stream capture records work instead of running it (kernels, copies, memsets, host
//     functions, a fork into a second stream and the join back through events); the
//     instantiated graph replays it in order at every launch; capture status and info queries;
//   - captured copies of pageable memory read and write it when the graph runs;
//   - capture errors: synchronizing a capturing stream, cudaMalloc in global mode (allowed in
//     relaxed mode and after cudaThreadExchangeStreamCaptureMode), the legacy stream meeting a
//     capturing blocking stream, an unjoined fork, ending on another
//     stream, waiting on uncaptured work, capturing the legacy stream or twice;
//   - graphs built by hand: memset, kernel (void** arguments), 1D copy, host and child graph
//     nodes with dependencies; queries (nodes, roots, edges, types); a cycle is refused at
//     instantiation; cudaGraphExecKernelNodeSetParams and cudaGraphExecUpdate change an
//     instantiated graph; event record nodes time a launch;
//   - the CUDA 12 generic calls: cudaGraphAddNode (memset, kernel, memcpy, host, event record
//     and wait nodes), cudaGraphNodeSetParams, cudaGraphExecNodeSetParams, the typed event
//     node getters/setters; a type mismatch and a memory allocation node are refused;
//     cudaStreamBeginCaptureToGraph appends captured work to an existing graph after a node.
// Every expected value is computed here from the operations issued.
//! cpu-only
//! run: ./prog => pass /all graph checks passed/
//! run: CUCC_SCHEDULE=random ./prog => pass /all graph checks passed/
#include <cstdio>
#include <cstring>
#include <vector>
#include "test_util.h"

__global__ void add_kernel(int* x, int n, int v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += v;
}
__global__ void scale_kernel(int* x, int n, int f) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= f;
}

static void count_call(void* counter) { ++*(int*)counter; }

static void capture_and_replay() {
    const int n = 1000;
    int *d, *e, *pinned;
    CUDA_CHECK(cudaMalloc(&d, n * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&e, n * sizeof(int)));
    CUDA_CHECK(cudaMallocHost(&pinned, n * sizeof(int)));
    CUDA_CHECK(cudaMemset(d, 0, n * sizeof(int)));
    cudaStream_t s, side;
    cudaEvent_t fork, join;
    CUDA_CHECK(cudaStreamCreate(&s));
    CUDA_CHECK(cudaStreamCreate(&side));
    CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    int calls = 0;

    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureStatus status;
    unsigned long long id = 0;
    cudaGraph_t building = nullptr;
    size_t deps = 99;
    CUDA_CHECK(cudaStreamIsCapturing(s, &status));
    bool active = status == cudaStreamCaptureStatusActive;
    add_kernel<<<(n + 255) / 256, 256, 0, s>>>(d, n, 1);  // d = old + 1
    CUDA_CHECK(cudaEventRecord(fork, s));
    CUDA_CHECK(cudaStreamWaitEvent(side, fork, 0));  // side joins the capture
    CUDA_CHECK(cudaMemsetAsync(e, 0, n * sizeof(int), side));
    add_kernel<<<(n + 255) / 256, 256, 0, side>>>(e, n, 5);  // e = 5
    CUDA_CHECK(cudaEventRecord(join, side));
    scale_kernel<<<(n + 255) / 256, 256, 0, s>>>(d, n, 3);  // d = 3 (old + 1)
    CUDA_CHECK(cudaStreamWaitEvent(s, join, 0));
    CUDA_CHECK(cudaMemcpyAsync(d + n / 2, e, n / 2 * sizeof(int), cudaMemcpyDeviceToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(pinned, d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaLaunchHostFunc(s, count_call, &calls));
    const cudaGraphNode_t* frontier = nullptr;
    CUDA_CHECK(cudaStreamGetCaptureInfo(s, &status, &id, &building, &frontier, nullptr, &deps));
    bool info = status == cudaStreamCaptureStatusActive && id != 0 && building && deps == 1;
    cudaGraph_t graph;
    CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    CUDA_CHECK(cudaStreamIsCapturing(s, &status));
    expect(active && info && status == cudaStreamCaptureStatusNone && graph == building,
           "capture status and info: active with one dependency, none after the end");
    int h = -1;
    CUDA_CHECK(cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost));
    expect(h == 0 && calls == 0, "captured work did not run at capture");

    size_t count = 0;
    CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
    std::vector<cudaGraphNode_t> nodes(count);
    CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
    std::vector<cudaGraphNodeType> types(count);
    for (size_t i = 0; i < count; i++) CUDA_CHECK(cudaGraphNodeGetType(nodes[i], &types[i]));
    std::vector<cudaGraphNodeType> want = {cudaGraphNodeTypeKernel, cudaGraphNodeTypeMemset,
                                           cudaGraphNodeTypeKernel, cudaGraphNodeTypeKernel,
                                           cudaGraphNodeTypeMemcpy, cudaGraphNodeTypeMemcpy,
                                           cudaGraphNodeTypeHost};
    size_t roots = 0, edges = 0;
    CUDA_CHECK(cudaGraphGetRootNodes(graph, nullptr, &roots));
    CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &edges));
    // kernel -> {memset -> kernel, scale}; the first copy after both; then copy, host.
    expect(types == want && roots == 1 && edges == 7, "captured graph: 7 nodes of the right types",
           std::to_string(count) + " nodes, " + std::to_string(roots) + " roots, " +
               std::to_string(edges) + " edges");

    cudaGraphExec_t exec;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    std::vector<int> model(n, 0);
    bool replays = true;
    for (int launch = 0; launch < 3; launch++) {
        CUDA_CHECK(cudaGraphLaunch(exec, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        for (int i = 0; i < n; i++) model[i] = i < n / 2 ? 3 * (model[i] + 1) : 5;
        for (int i = 0; i < n; i++) replays &= pinned[i] == model[i];
    }
    expect(replays && calls == 3, "three launches replay the captured work in order",
           "host function ran " + std::to_string(calls) + " times");
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    expect_error(cudaGraphDestroy(graph), cudaErrorInvalidValue, "destroying a graph twice");
    CUDA_CHECK(cudaStreamDestroy(s));
    CUDA_CHECK(cudaStreamDestroy(side));
    CUDA_CHECK(cudaEventDestroy(fork));
    CUDA_CHECK(cudaEventDestroy(join));
    CUDA_CHECK(cudaFree(d));
    CUDA_CHECK(cudaFree(e));
    CUDA_CHECK(cudaFreeHost(pinned));
}

// Ends the capture on s and checks that it reports `want` and gives no graph.
static void expect_end(cudaStream_t s, cudaError_t want, const char* what) {
    cudaGraph_t g = (cudaGraph_t)1;
    cudaError_t err = cudaStreamEndCapture(s, &g);
    char line[256];
    snprintf(line, sizeof line, "%s, then cudaStreamEndCapture: %s (got %s)", what,
             cudaGetErrorName(want), cudaGetErrorName(err));
    expect(err == want && g == nullptr, line);
    cudaGetLastError();
}

static void capture_errors() {
    int* d;
    CUDA_CHECK(cudaMalloc(&d, 64 * sizeof(int)));
    cudaStream_t s, t;
    CUDA_CHECK(cudaStreamCreate(&s));
    CUDA_CHECK(cudaStreamCreate(&t));
    std::vector<int> pageable(64);
    void* p = nullptr;

    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    expect_error(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported,
                 "cudaStreamSynchronize of a capturing stream");
    expect_end(s, cudaErrorStreamCaptureInvalidated, "after it");

    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    expect_error(cudaMalloc(&p, 256), cudaErrorStreamCaptureUnsupported,
                 "cudaMalloc during a global-mode capture");
    expect_end(s, cudaErrorStreamCaptureInvalidated, "after it");

    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    cudaError_t relaxed_malloc = cudaMalloc(&p, 256);
    CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    expect(relaxed_malloc == cudaSuccess && mode == cudaStreamCaptureModeRelaxed,
           "cudaMalloc after cudaThreadExchangeStreamCaptureMode(relaxed)");
    add_kernel<<<1, 64, 0, s>>>(d, 64, 1);
    cudaGraph_t g;
    CUDA_CHECK(cudaStreamEndCapture(s, &g));
    CUDA_CHECK(cudaGraphDestroy(g));
    CUDA_CHECK(cudaFree(p));

    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    CUDA_CHECK(cudaMalloc(&p, 256));
    CUDA_CHECK(cudaStreamEndCapture(s, &g));
    expect(g != nullptr, "cudaMalloc during a relaxed-mode capture");
    CUDA_CHECK(cudaGraphDestroy(g));
    CUDA_CHECK(cudaFree(p));

    // Copies of pageable memory become memcpy nodes that read and write it when the graph runs.
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CUDA_CHECK(cudaMemcpyAsync(d, pageable.data(), 64 * sizeof(int), cudaMemcpyHostToDevice, s));
    add_kernel<<<1, 64, 0, s>>>(d, 64, 1);
    std::vector<int> back(64, -1);
    CUDA_CHECK(cudaMemcpyAsync(back.data(), d, 64 * sizeof(int), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamEndCapture(s, &g));
    for (int i = 0; i < 64; i++) pageable[i] = 3 * i;  // after the capture, before the launch
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    CUDA_CHECK(cudaGraphLaunch(exec, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    bool read_at_launch = true;
    for (int i = 0; i < 64; i++) read_at_launch &= back[i] == 3 * i + 1;
    expect(read_at_launch, "captured copies of pageable memory read and write it at the launch");
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(g));

    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    add_kernel<<<1, 64>>>(d, 64, 1);  // the legacy stream would wait for the capturing stream
    expect_error(cudaGetLastError(), cudaErrorStreamCaptureImplicit,
                 "a launch on the legacy stream while a blocking stream captures");
    expect_end(s, cudaErrorStreamCaptureInvalidated, "after it");

    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreate(&ev));
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CUDA_CHECK(cudaEventRecord(ev, s));
    CUDA_CHECK(cudaStreamWaitEvent(t, ev, 0));
    add_kernel<<<1, 64, 0, t>>>(d, 64, 1);
    expect_end(s, cudaErrorStreamCaptureUnjoined, "a forked stream never joined back");

    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CUDA_CHECK(cudaEventRecord(ev, s));
    CUDA_CHECK(cudaStreamWaitEvent(t, ev, 0));
    expect_error(cudaStreamEndCapture(t, &g), cudaErrorStreamCaptureUnmatched,
                 "cudaStreamEndCapture on a joined stream");
    expect_end(s, cudaErrorStreamCaptureInvalidated, "after it");

    cudaEvent_t outside;
    CUDA_CHECK(cudaEventCreate(&outside));
    CUDA_CHECK(cudaEventRecord(outside, t));
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    expect_error(cudaStreamWaitEvent(s, outside, 0), cudaErrorStreamCaptureIsolation,
                 "waiting on uncaptured work from a capturing stream");
    expect_end(s, cudaErrorStreamCaptureInvalidated, "after it");

    expect_error(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal),
                 cudaErrorStreamCaptureUnsupported, "capturing the legacy stream");
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    expect_error(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaErrorIllegalState,
                 "beginning a capture twice");
    CUDA_CHECK(cudaStreamEndCapture(s, &g));
    CUDA_CHECK(cudaGraphDestroy(g));
    expect_error(cudaStreamEndCapture(s, &g), cudaErrorIllegalState,
                 "ending a capture that is not there");
    CUDA_CHECK(cudaEventDestroy(ev));
    CUDA_CHECK(cudaEventDestroy(outside));
    CUDA_CHECK(cudaStreamDestroy(s));
    CUDA_CHECK(cudaStreamDestroy(t));
    CUDA_CHECK(cudaFree(d));
}

static void built_graphs() {
    const int n = 256;
    int *d, *pinned;
    CUDA_CHECK(cudaMalloc(&d, n * sizeof(int)));
    CUDA_CHECK(cudaMallocHost(&pinned, n * sizeof(int)));
    int calls = 0;
    cudaGraph_t graph, child;
    CUDA_CHECK(cudaGraphCreate(&graph, 0));
    CUDA_CHECK(cudaGraphCreate(&child, 0));

    cudaMemsetParams ms = {};
    ms.dst = d;
    ms.value = 4;
    ms.elementSize = 4;
    ms.width = n;
    ms.height = 1;
    cudaGraphNode_t set, add, copy, host, sub;
    CUDA_CHECK(cudaGraphAddMemsetNode(&set, graph, nullptr, 0, &ms));
    int nn = n, v = 10;
    void* args[] = {&d, &nn, &v};
    cudaKernelNodeParams kp = {};
    kp.func = (void*)add_kernel;
    kp.gridDim = dim3(1);
    kp.blockDim = dim3(n);
    kp.kernelParams = args;
    CUDA_CHECK(cudaGraphAddKernelNode(&add, graph, &set, 1, &kp));
    v = 1000;  // the node copied the arguments when it was made
    // The child graph doubles d.
    int f = 2;
    void* child_args[] = {&d, &nn, &f};
    cudaKernelNodeParams cp = kp;
    cp.func = (void*)scale_kernel;
    cp.kernelParams = child_args;
    cudaGraphNode_t child_kernel;
    CUDA_CHECK(cudaGraphAddKernelNode(&child_kernel, child, nullptr, 0, &cp));
    CUDA_CHECK(cudaGraphAddChildGraphNode(&sub, graph, &add, 1, child));
    CUDA_CHECK(cudaGraphAddMemcpyNode1D(&copy, graph, &sub, 1, pinned, d, n * sizeof(int),
                                        cudaMemcpyDeviceToHost));
    cudaHostNodeParams hp = {count_call, &calls};
    CUDA_CHECK(cudaGraphAddHostNode(&host, graph, &copy, 1, &hp));
    size_t roots = 0, deps = 0;
    CUDA_CHECK(cudaGraphGetRootNodes(graph, nullptr, &roots));
    CUDA_CHECK(cudaGraphNodeGetDependencies(copy, nullptr, nullptr, &deps));
    expect(roots == 1 && deps == 1, "a graph built by hand: one root, a chain of nodes");

    cudaGraphExec_t exec;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphLaunch(exec, 0));
    CUDA_CHECK(cudaDeviceSynchronize());
    bool ok = calls == 1;
    for (int i = 0; i < n; i++) ok &= pinned[i] == (4 + 10) * 2;
    expect(ok, "memset, kernel, child graph, copy and host nodes run in dependency order",
           "pinned[0] = " + std::to_string(pinned[0]));

    // A new argument for the kernel node of the instantiated graph.
    int v2 = -3;
    void* args2[] = {&d, &nn, &v2};
    kp.kernelParams = args2;
    CUDA_CHECK(cudaGraphExecKernelNodeSetParams(exec, add, &kp));
    CUDA_CHECK(cudaGraphLaunch(exec, 0));
    CUDA_CHECK(cudaDeviceSynchronize());
    expect(pinned[7] == (4 - 3) * 2 && calls == 2, "cudaGraphExecKernelNodeSetParams",
           std::to_string(pinned[7]));

    // cudaGraphExecUpdate from a graph of the same shape, and refused from another shape.
    int v3 = 6;
    void* args3[] = {&d, &nn, &v3};
    kp.kernelParams = args3;
    CUDA_CHECK(cudaGraphKernelNodeSetParams(add, &kp));
    cudaGraphExecUpdateResultInfo info;
    CUDA_CHECK(cudaGraphExecUpdate(exec, graph, &info));
    CUDA_CHECK(cudaGraphLaunch(exec, 0));
    CUDA_CHECK(cudaDeviceSynchronize());
    bool updated = info.result == cudaGraphExecUpdateSuccess && pinned[0] == (4 + 6) * 2;
    cudaGraphNode_t extra;
    CUDA_CHECK(cudaGraphAddEmptyNode(&extra, graph, &host, 1));
    cudaError_t refused = cudaGraphExecUpdate(exec, graph, &info);
    cudaGetLastError();
    expect(updated && refused == cudaErrorGraphExecUpdateFailure &&
               info.result == cudaGraphExecUpdateErrorTopologyChanged,
           "cudaGraphExecUpdate: same topology applied, a new node refused");

    // A cycle cannot be instantiated.
    CUDA_CHECK(cudaGraphAddDependencies(graph, &extra, &set, nullptr, 1));
    cudaGraphExec_t cyclic;
    expect_error(cudaGraphInstantiate(&cyclic, graph, 0), cudaErrorInvalidValue,
                 "instantiating a graph with a cycle");
    expect_error(cudaGraphAddDependencies(graph, &extra, &set, nullptr, 1), cudaErrorInvalidValue,
                 "adding an edge twice");

    // Event record nodes around a kernel time each launch.
    cudaGraph_t timed;
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaGraphCreate(&timed, 0));
    cudaGraphNode_t a, b, c;
    CUDA_CHECK(cudaGraphAddEventRecordNode(&a, timed, nullptr, 0, start));
    kp.kernelParams = args;
    CUDA_CHECK(cudaGraphAddKernelNode(&b, timed, &a, 1, &kp));
    CUDA_CHECK(cudaGraphAddEventRecordNode(&c, timed, &b, 1, stop));
    cudaGraphExec_t timed_exec;
    CUDA_CHECK(cudaGraphInstantiate(&timed_exec, timed, 0));
    CUDA_CHECK(cudaGraphLaunch(timed_exec, 0));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms_elapsed = -1;
    CUDA_CHECK(cudaEventElapsedTime(&ms_elapsed, start, stop));
    expect(ms_elapsed >= 0, "event record nodes time a launch", std::to_string(ms_elapsed) + " ms");
    const char* dot = "build/cpu/tests/runtime_graphs.dot";
    CUDA_CHECK(cudaGraphDebugDotPrint(graph, dot, 0));
    FILE* file = fopen(dot, "r");
    char text[4096] = {0};
    size_t got = file ? fread(text, 1, sizeof text - 1, file) : 0;
    if (file) fclose(file);
    expect(got > 0 && strstr(text, "digraph") && strstr(text, "kernel"),
           "cudaGraphDebugDotPrint writes the graph");

    CUDA_CHECK(cudaGraphExecDestroy(timed_exec));
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(timed));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaGraphDestroy(child));
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    CUDA_CHECK(cudaFree(d));
    CUDA_CHECK(cudaFreeHost(pinned));
}

static void generic_api() {
    const int n = 128;
    int *d, *pinned;
    CUDA_CHECK(cudaMalloc(&d, n * sizeof(int)));
    CUDA_CHECK(cudaMallocHost(&pinned, n * sizeof(int)));
    cudaGraph_t graph;
    CUDA_CHECK(cudaGraphCreate(&graph, 0));
    cudaEvent_t ev, ev2;
    CUDA_CHECK(cudaEventCreate(&ev));
    CUDA_CHECK(cudaEventCreate(&ev2));

    cudaGraphNodeParams mp = {};
    mp.type = cudaGraphNodeTypeMemset;
    mp.memset.dst = d;
    mp.memset.value = 3;
    mp.memset.elementSize = 4;
    mp.memset.width = n;
    mp.memset.height = 1;
    cudaGraphNode_t set, add, rec, wait, copy, host;
    CUDA_CHECK(cudaGraphAddNode(&set, graph, nullptr, nullptr, 0, &mp));
    int nn = n, v = 4, calls = 0;
    void* args[] = {&d, &nn, &v};
    cudaGraphNodeParams kp = {};
    kp.type = cudaGraphNodeTypeKernel;
    kp.kernel.func = (void*)add_kernel;
    kp.kernel.gridDim = dim3(1);
    kp.kernel.blockDim = dim3(n);
    kp.kernel.kernelParams = args;
    CUDA_CHECK(cudaGraphAddNode(&add, graph, &set, nullptr, 1, &kp));
    cudaGraphNodeParams rp = {};
    rp.type = cudaGraphNodeTypeEventRecord;
    rp.eventRecord.event = ev;
    CUDA_CHECK(cudaGraphAddNode(&rec, graph, &add, nullptr, 1, &rp));
    cudaGraphNodeParams wp = {};
    wp.type = cudaGraphNodeTypeWaitEvent;
    wp.eventWait.event = ev;
    CUDA_CHECK(cudaGraphAddNode(&wait, graph, &rec, nullptr, 1, &wp));
    cudaGraphNodeParams cp = {};
    cp.type = cudaGraphNodeTypeMemcpy;
    cp.memcpy.copyParams.srcPtr = make_cudaPitchedPtr(d, n * sizeof(int), n, 1);
    cp.memcpy.copyParams.dstPtr = make_cudaPitchedPtr(pinned, n * sizeof(int), n, 1);
    cp.memcpy.copyParams.extent = make_cudaExtent(n * sizeof(int), 1, 1);
    cp.memcpy.copyParams.kind = cudaMemcpyDeviceToHost;
    CUDA_CHECK(cudaGraphAddNode(&copy, graph, &wait, nullptr, 1, &cp));
    cudaGraphNodeParams hp = {};
    hp.type = cudaGraphNodeTypeHost;
    hp.host.fn = count_call;
    hp.host.userData = &calls;
    CUDA_CHECK(cudaGraphAddNode(&host, graph, &copy, nullptr, 1, &hp));
    cudaGraphNodeType type;
    CUDA_CHECK(cudaGraphNodeGetType(wait, &type));
    cudaEvent_t got_event = nullptr;
    CUDA_CHECK(cudaGraphEventRecordNodeGetEvent(rec, &got_event));
    expect(type == cudaGraphNodeTypeWaitEvent && got_event == ev,
           "cudaGraphAddNode: node types and events as given");

    cudaGraphExec_t exec;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphLaunch(exec, 0));
    CUDA_CHECK(cudaDeviceSynchronize());
    bool ok = calls == 1;
    for (int i = 0; i < n; i++) ok &= pinned[i] == 3 + 4;
    expect(ok, "generic memset, kernel, event, copy and host nodes run in order",
           "pinned[0] = " + std::to_string(pinned[0]));

    v = 10;
    CUDA_CHECK(cudaGraphExecNodeSetParams(exec, add, &kp));
    rp.eventRecord.event = ev2;
    CUDA_CHECK(cudaGraphExecNodeSetParams(exec, rec, &rp));
    CUDA_CHECK(cudaGraphLaunch(exec, 0));
    CUDA_CHECK(cudaDeviceSynchronize());
    float ms = -1;  // elapsed time needs both events recorded: ev2 only was by the new node
    cudaError_t recorded = cudaEventElapsedTime(&ms, ev2, ev2);
    expect(pinned[5] == 3 + 10 && recorded == cudaSuccess && calls == 2,
           "cudaGraphExecNodeSetParams: new kernel arguments, a new event recorded",
           std::to_string(pinned[5]) + ", " + cudaGetErrorName(recorded));
    v = -1;
    CUDA_CHECK(cudaGraphNodeSetParams(add, &kp));
    CUDA_CHECK(cudaGraphEventWaitNodeSetEvent(wait, ev2));
    CUDA_CHECK(cudaGraphEventWaitNodeGetEvent(wait, &got_event));
    cudaGraphExec_t exec2;
    CUDA_CHECK(cudaGraphInstantiate(&exec2, graph, 0));
    CUDA_CHECK(cudaGraphLaunch(exec2, 0));
    CUDA_CHECK(cudaDeviceSynchronize());
    expect(pinned[5] == 3 - 1 && got_event == ev2,
           "cudaGraphNodeSetParams and the event node setters change the graph",
           std::to_string(pinned[5]));
    expect_error(cudaGraphNodeSetParams(add, &mp), cudaErrorInvalidValue,
                 "cudaGraphNodeSetParams with another node type");
    cudaGraphNodeParams alloc = {};
    alloc.type = cudaGraphNodeTypeMemAlloc;
    cudaGraphNode_t none;
    expect_error(cudaGraphAddNode(&none, graph, nullptr, nullptr, 0, &alloc), cudaErrorNotSupported,
                 "a memory allocation node");

    // Capturing into the graph: two kernels after the host node.
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    CUDA_CHECK(
        cudaStreamBeginCaptureToGraph(s, graph, &host, nullptr, 1, cudaStreamCaptureModeGlobal));
    scale_kernel<<<1, n, 0, s>>>(d, n, 5);
    CUDA_CHECK(cudaMemcpyAsync(pinned, d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    cudaGraph_t captured = nullptr;
    CUDA_CHECK(cudaStreamEndCapture(s, &captured));
    size_t count = 0, deps = 0;
    CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
    size_t roots = 0;
    CUDA_CHECK(cudaGraphGetRootNodes(graph, nullptr, &roots));
    cudaGraphExec_t exec3;
    CUDA_CHECK(cudaGraphInstantiate(&exec3, graph, 0));
    CUDA_CHECK(cudaGraphLaunch(exec3, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaGraphNodeGetDependentNodes(host, nullptr, nullptr, &deps));
    expect(captured == graph && count == 8 && roots == 1 && deps == 1 && pinned[9] == (3 - 1) * 5,
           "cudaStreamBeginCaptureToGraph appends to the graph after the given node",
           std::to_string(count) + " nodes, pinned[9] = " + std::to_string(pinned[9]));

    for (cudaGraphExec_t e : {exec, exec2, exec3}) CUDA_CHECK(cudaGraphExecDestroy(e));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaStreamDestroy(s));
    CUDA_CHECK(cudaEventDestroy(ev));
    CUDA_CHECK(cudaEventDestroy(ev2));
    CUDA_CHECK(cudaFree(d));
    CUDA_CHECK(cudaFreeHost(pinned));
}

int main() {
    capture_and_replay();
    capture_errors();
    built_graphs();
    generic_api();
    return test_report("graph");
}
