// graph.cpp: CUDA graphs: graphs and their nodes (built by stream capture, see stream.cpp, or
// by the cudaGraphAdd*Node calls), instantiation, launch, update, and the queries.
//
// A node holds its dependencies and a launch function that queues the node's work on a stream
// (a kernel, a copy, a memset, a host function, an event record or wait; empty nodes queue
// nothing). cudaGraphInstantiate orders the nodes topologically (Kahn's algorithm, ties broken
// by creation order, so a captured graph replays in capture order), flattens child graphs into
// that order, and keeps the launch functions; cudaGraphLaunch calls them one after the other
// on the launch stream. Running the nodes one at a time, in an order that respects every
// dependency, is one of the executions the graph allows, so results are those of the GPU; what
// is lost is only the concurrency between independent branches.
// Node parameters are copied when a node is made (kernel arguments included, as CUDA copies
// them); an executable graph keeps its own copies, so changing or destroying the graph after
// instantiation does not change it. cudaGraphExecUpdate and cudaGraph*NodeSetParams replace the
// launch functions of nodes that keep their place in the topology.
// The CUDA 12 generic calls (cudaGraphAddNode, cudaGraphNodeSetParams,
// cudaGraphExecNodeSetParams) take every node type's parameters in one union and go through the
// typed call of the node's type. Memory allocation/free, conditional and external semaphore
// nodes are not supported (cudaErrorNotSupported, with a message naming the node type).
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include <cuda_runtime.h>  // make_cudaPitchedPtr, make_cudaExtent

#include "internal.h"

// The structs behind the opaque handles of driver_types.h.
struct CUgraphNode_st {
    cudaGraph_t graph;
    cudaGraphNodeType type;
    cucc::NodeLaunch launch;
    std::vector<cudaGraphNode_t> deps;  // incoming edges, in the order they were added
    // The parameters the node was made with, for the Get*Params calls.
    cudaKernelNodeParams kernel{};
    cudaMemcpy3DParms memcpy_params{};
    cudaMemsetParams memset_params{};
    cudaHostNodeParams host{};
    cudaEvent_t event = nullptr;
    cudaGraph_t child = nullptr;  // owned: a child graph node holds a clone of its graph
    cudaGraphNode_t cloned_from = nullptr;
};

struct CUgraph_st {
    std::vector<std::unique_ptr<CUgraphNode_st>> nodes;  // in creation order
};

struct CUgraphExec_st {
    unsigned long long flags;
    // The launches in topological order; entry i was made from node nodes[i] (child graph
    // nodes are flattened, so their nodes appear in their place).
    std::vector<cudaGraphNode_t> nodes;
    std::vector<cucc::NodeLaunch> launches;
    std::vector<cudaGraphNodeType> types;
};

namespace cucc {
namespace {

std::set<cudaGraph_t>& live_graphs() {
    static auto* s = new std::set<cudaGraph_t>;
    return *s;
}
std::set<cudaGraphExec_t>& live_execs() {
    static auto* s = new std::set<cudaGraphExec_t>;
    return *s;
}

bool valid_graph(cudaGraph_t g) { return g && live_graphs().count(g); }

bool valid_node(cudaGraphNode_t n) {
    return n && valid_graph(n->graph) && graph_has_node(n->graph, n);
}

bool valid_exec(cudaGraphExec_t e) { return e && live_execs().count(e); }

// Under the lock: checks that deps[0..n) are nodes of g, then adds a node of the given type.
cudaError_t add_node(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                     cudaGraphNodeType type, NodeLaunch launch, CUgraphNode_st** made) {
    if (!out || !valid_graph(g) || (n > 0 && !deps)) return cudaErrorInvalidValue;
    std::vector<cudaGraphNode_t> list;
    for (size_t i = 0; i < n; i++) {
        if (!graph_has_node(g, deps[i])) return cudaErrorInvalidValue;
        if (std::find(list.begin(), list.end(), deps[i]) != list.end())
            return cudaErrorInvalidValue;  // a duplicate dependency
        list.push_back(deps[i]);
    }
    *out = add_graph_node(g, type, std::move(launch), list);
    if (made) *made = *out;
    return cudaSuccess;
}

NodeLaunch op_launch(StreamOp op) {
    return [op](cudaStream_t s) { return stream_enqueue(s, op); };
}

cudaError_t kernel_launch(const cudaKernelNodeParams* p, NodeLaunch* out) {
    if (!p) return cudaErrorInvalidValue;
    if (p->extra) {
        fprintf(stderr,
                "cucc: kernel node parameters in the `extra` form are not supported; "
                "pass kernelParams\n");
        return cudaErrorNotSupported;
    }
    StreamOp op;
    cudaError_t err =
        kernel_op(p->func, p->gridDim, p->blockDim, p->kernelParams, p->sharedMemBytes, &op);
    if (err == cudaSuccess) *out = op_launch(std::move(op));
    return err;
}

cudaError_t memcpy_launch(const cudaMemcpy3DParms* p, NodeLaunch* out) {
    StreamOp op;
    cudaError_t err = memcpy_node_op(p, &op);
    if (err == cudaSuccess) *out = op_launch(std::move(op));
    return err;
}

cudaError_t memset_launch(const cudaMemsetParams* p, NodeLaunch* out) {
    StreamOp op;
    cudaError_t err = memset_node_op(p, &op);
    if (err == cudaSuccess) *out = op_launch(std::move(op));
    return err;
}

cudaError_t host_launch(const cudaHostNodeParams* p, NodeLaunch* out) {
    if (!p || !p->fn) return cudaErrorInvalidValue;
    cudaHostFn_t fn = p->fn;
    void* data = p->userData;
    StreamOp op{"host node", nullptr, [fn, data] { fn(data); }};
    op.node_type = cudaGraphNodeTypeHost;
    *out = op_launch(std::move(op));
    return cudaSuccess;
}

// Nodes of g in topological order (stable: among ready nodes the earliest made first), or false
// when the edges form a cycle.
bool topological_order(cudaGraph_t g, std::vector<cudaGraphNode_t>* order) {
    std::map<cudaGraphNode_t, size_t> index, waiting;
    for (size_t i = 0; i < g->nodes.size(); i++) index[g->nodes[i].get()] = i;
    std::map<cudaGraphNode_t, std::vector<cudaGraphNode_t>> dependents;
    for (auto& n : g->nodes) {
        waiting[n.get()] = n->deps.size();
        for (cudaGraphNode_t d : n->deps) dependents[d].push_back(n.get());
    }
    std::set<size_t> ready;
    for (auto& n : g->nodes)
        if (n->deps.empty()) ready.insert(index[n.get()]);
    order->clear();
    while (!ready.empty()) {
        cudaGraphNode_t n = g->nodes[*ready.begin()].get();
        ready.erase(ready.begin());
        order->push_back(n);
        for (cudaGraphNode_t d : dependents[n])
            if (--waiting[d] == 0) ready.insert(index[d]);
    }
    return order->size() == g->nodes.size();
}

// Appends g's launches to exec in topological order, flattening child graphs.
bool flatten(cudaGraph_t g, CUgraphExec_st* exec) {
    std::vector<cudaGraphNode_t> order;
    if (!topological_order(g, &order)) return false;
    for (cudaGraphNode_t n : order) {
        if (n->type == cudaGraphNodeTypeGraph) {
            if (!flatten(n->child, exec)) return false;
            continue;
        }
        exec->nodes.push_back(n);
        exec->launches.push_back(n->launch);
        exec->types.push_back(n->type);
    }
    return true;
}

// Copies g's nodes and edges into the empty graph `into` (which must be live).
void clone_into(cudaGraph_t g, cudaGraph_t into) {
    std::map<cudaGraphNode_t, cudaGraphNode_t> copy_of;
    for (auto& n : g->nodes) {
        auto c = std::make_unique<CUgraphNode_st>(*n);
        c->graph = into;
        c->cloned_from = n.get();
        for (cudaGraphNode_t& d : c->deps) d = copy_of[d];
        if (n->child) {
            c->child = new_graph();
            clone_into(n->child, c->child);
        }
        copy_of[n.get()] = c.get();
        into->nodes.push_back(std::move(c));
    }
}

// Fills list[0..*count) as the graph queries do: a null list asks for the count; a longer list
// gets null entries past the end; *count becomes the number written.
cudaError_t write_nodes(const std::vector<cudaGraphNode_t>& nodes, cudaGraphNode_t* list,
                        cudaGraphEdgeData* edges, size_t* count) {
    if (!count) return cudaErrorInvalidValue;
    if (!list) {
        *count = nodes.size();
        return cudaSuccess;
    }
    size_t n = std::min(*count, nodes.size());
    for (size_t i = 0; i < *count; i++) {
        list[i] = i < n ? nodes[i] : nullptr;
        if (edges) edges[i] = cudaGraphEdgeData{};
    }
    *count = n;
    return cudaSuccess;
}

std::vector<cudaGraphNode_t> dependents_of(cudaGraphNode_t node) {
    std::vector<cudaGraphNode_t> out;
    for (auto& n : node->graph->nodes)
        if (std::find(n->deps.begin(), n->deps.end(), node) != n->deps.end())
            out.push_back(n.get());
    return out;
}

// The node of exec made from `node` (a node of the graph exec was instantiated from), or -1.
long exec_index(cudaGraphExec_t exec, cudaGraphNode_t node) {
    for (size_t i = 0; i < exec->nodes.size(); i++)
        if (exec->nodes[i] == node) return (long)i;
    return -1;
}

// Replaces the launch of `node` in exec after make(&launch) succeeds; the node's type must be
// `type`.
template <class Make>
cudaError_t exec_set(cudaGraphExec_t exec, cudaGraphNode_t node, cudaGraphNodeType type,
                     Make make) {
    ApiLock lock;
    if (!valid_exec(exec) || !node) return cudaErrorInvalidValue;
    long i = exec_index(exec, node);
    if (i < 0 || exec->types[i] != type) return cudaErrorInvalidValue;
    NodeLaunch launch;
    cudaError_t err = make(&launch);
    if (err == cudaSuccess) exec->launches[i] = std::move(launch);
    return err;
}

// The same for the node itself (cudaGraph*NodeSetParams).
template <class Make>
cudaError_t node_set(cudaGraphNode_t node, cudaGraphNodeType type, Make make) {
    ApiLock lock;
    if (!valid_node(node) || node->type != type) return cudaErrorInvalidValue;
    NodeLaunch launch;
    cudaError_t err = make(&launch);
    if (err == cudaSuccess) node->launch = std::move(launch);
    return err;
}

// The typed forms of the generic (V2) parameters.
cudaKernelNodeParams kernel_params(const cudaKernelNodeParamsV2& p) {
    return cudaKernelNodeParams{p.func,           p.gridDim,      p.blockDim,
                                p.sharedMemBytes, p.kernelParams, p.extra};
}
cudaMemsetParams memset_params(const cudaMemsetParamsV2& p) {
    return cudaMemsetParams{p.dst, p.pitch, p.value, p.elementSize, p.width, p.height};
}
cudaHostNodeParams host_params(const cudaHostNodeParamsV2& p) {
    return cudaHostNodeParams{p.fn, p.userData};
}

// What cudaGraphAddNode and the generic set calls do not handle: says which node type it was.
cudaError_t unsupported_node(const char* api, cudaGraphNodeType type) {
    fprintf(
        stderr, "cucc: %s: graph nodes of type %d (%s) are not supported by the CPU runtime\n", api,
        (int)type,
        type == cudaGraphNodeTypeMemAlloc      ? "memory allocation"
        : type == cudaGraphNodeTypeMemFree     ? "memory free"
        : type == cudaGraphNodeTypeConditional ? "conditional"
        : type == cudaGraphNodeTypeGraph       ? "child graph"
        : type == cudaGraphNodeTypeExtSemaphoreSignal || type == cudaGraphNodeTypeExtSemaphoreWait
            ? "external semaphore"
            : "unknown");
    return cudaErrorNotSupported;
}

// Event record and wait nodes: the launch that records or waits on `event`.
NodeLaunch event_launch(cudaGraphNodeType type, cudaEvent_t event) {
    if (type == cudaGraphNodeTypeEventRecord)
        return [event](cudaStream_t s) { return record_event(event, s); };
    return [event](cudaStream_t s) { return wait_event(s, event); };
}

// The typed node calls (cudaGraphAdd<Type>Node, cudaGraph<Type>NodeGet/SetParams) of the node
// types whose parameters a node keeps in `field`; make builds the node's launch from them.
template <class P, class Make>
cudaError_t add_typed_node(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                           size_t num_deps, cudaGraphNodeType type, const P* params, Make make,
                           P CUgraphNode_st::*field) {
    NodeLaunch launch;
    cudaError_t err = make(params, &launch);
    if (err != cudaSuccess) return err;
    ApiLock lock;
    CUgraphNode_st* made = nullptr;
    err = add_node(node, graph, deps, num_deps, type, launch, &made);
    if (made) made->*field = *params;
    return err;
}
template <class P>
cudaError_t get_typed_params(cudaGraphNode_t node, cudaGraphNodeType type, P* params,
                             P CUgraphNode_st::*field) {
    ApiLock lock;
    if (!params || !valid_node(node) || node->type != type) return cudaErrorInvalidValue;
    *params = node->*field;
    return cudaSuccess;
}
template <class P, class Make>
cudaError_t set_typed_params(cudaGraphNode_t node, cudaGraphNodeType type, const P* params,
                             Make make, P CUgraphNode_st::*field) {
    cudaError_t err = node_set(node, type, [&](NodeLaunch* l) { return make(params, l); });
    if (err == cudaSuccess) node->*field = *params;
    return err;
}

// The event of an event record or wait node, in the graph or in an executable graph.
cudaError_t set_node_event(cudaGraphNode_t node, cudaGraphNodeType type, cudaEvent_t event) {
    if (!event) return cudaErrorInvalidValue;
    ApiLock lock;
    cudaError_t err = node_set(node, type, [&](NodeLaunch* l) {
        *l = event_launch(type, event);
        return cudaSuccess;
    });
    if (err == cudaSuccess) node->event = event;
    return err;
}
cudaError_t set_exec_event(cudaGraphExec_t exec, cudaGraphNode_t node, cudaGraphNodeType type,
                           cudaEvent_t event) {
    if (!event) return cudaErrorInvalidValue;
    return exec_set(exec, node, type, [&](NodeLaunch* l) {
        *l = event_launch(type, event);
        return cudaSuccess;
    });
}
cudaError_t get_node_event(cudaGraphNode_t node, cudaGraphNodeType type, cudaEvent_t* event) {
    ApiLock lock;
    if (!event || !valid_node(node) || node->type != type) return cudaErrorInvalidValue;
    *event = node->event;
    return cudaSuccess;
}

}  // namespace

cudaGraph_t new_graph() {
    ApiLock lock;
    cudaGraph_t g = new CUgraph_st;
    live_graphs().insert(g);
    return g;
}

cudaGraphNode_t add_graph_node(cudaGraph_t graph, cudaGraphNodeType type, NodeLaunch launch,
                               const std::vector<cudaGraphNode_t>& deps) {
    ApiLock lock;
    auto n = std::make_unique<CUgraphNode_st>();
    n->graph = graph;
    n->type = type;
    n->launch = std::move(launch);
    n->deps = deps;
    graph->nodes.push_back(std::move(n));
    return graph->nodes.back().get();
}

void delete_graph(cudaGraph_t graph) {
    ApiLock lock;
    for (auto& n : graph->nodes)
        if (n->child) delete_graph(n->child);
    live_graphs().erase(graph);
    delete graph;
}

bool graph_is_live(cudaGraph_t graph) {
    ApiLock lock;
    return valid_graph(graph);
}

bool graph_has_node(cudaGraph_t graph, cudaGraphNode_t node) {
    ApiLock lock;
    if (!node || !graph) return false;
    for (auto& n : graph->nodes)
        if (n.get() == node) return true;
    return false;
}

}  // namespace cucc

using namespace cucc;

extern "C" {

cudaError_t cudaGraphCreate(cudaGraph_t* graph, unsigned int flags) {
    if (!graph || flags != 0) return api_return(cudaErrorInvalidValue);
    *graph = new_graph();
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    ApiLock lock;
    if (!valid_graph(graph)) return api_return(cudaErrorInvalidValue);
    delete_graph(graph);
    return cudaSuccess;
}

cudaError_t cudaGraphClone(cudaGraph_t* clone, cudaGraph_t original) {
    ApiLock lock;
    if (!clone || !valid_graph(original)) return api_return(cudaErrorInvalidValue);
    *clone = new_graph();
    clone_into(original, *clone);
    return cudaSuccess;
}

cudaError_t cudaGraphNodeFindInClone(cudaGraphNode_t* node, cudaGraphNode_t original,
                                     cudaGraph_t clone) {
    ApiLock lock;
    if (!node || !original || !valid_graph(clone)) return api_return(cudaErrorInvalidValue);
    for (auto& n : clone->nodes) {
        if (n->cloned_from == original) {
            *node = n.get();
            return cudaSuccess;
        }
    }
    return api_return(cudaErrorInvalidValue);
}

cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                   const cudaGraphNode_t* deps, size_t num_deps,
                                   const cudaKernelNodeParams* params) {
    return api_return(add_typed_node(node, graph, deps, num_deps, cudaGraphNodeTypeKernel, params,
                                     kernel_launch, &CUgraphNode_st::kernel));
}

cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, cudaKernelNodeParams* params) {
    return api_return(
        get_typed_params(node, cudaGraphNodeTypeKernel, params, &CUgraphNode_st::kernel));
}

cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node, const cudaKernelNodeParams* params) {
    return api_return(set_typed_params(node, cudaGraphNodeTypeKernel, params, kernel_launch,
                                       &CUgraphNode_st::kernel));
}

cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                   const cudaGraphNode_t* deps, size_t num_deps,
                                   const cudaMemcpy3DParms* params) {
    return api_return(add_typed_node(node, graph, deps, num_deps, cudaGraphNodeTypeMemcpy, params,
                                     memcpy_launch, &CUgraphNode_st::memcpy_params));
}

cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t* node, cudaGraph_t graph,
                                     const cudaGraphNode_t* deps, size_t num_deps, void* dst,
                                     const void* src, size_t count, cudaMemcpyKind kind) {
    cudaMemcpy3DParms p{};
    p.srcPtr = make_cudaPitchedPtr((void*)src, count, count, 1);
    p.dstPtr = make_cudaPitchedPtr(dst, count, count, 1);
    p.extent = make_cudaExtent(count, 1, 1);
    p.kind = kind;
    return cudaGraphAddMemcpyNode(node, graph, deps, num_deps, &p);
}

cudaError_t cudaGraphMemcpyNodeGetParams(cudaGraphNode_t node, cudaMemcpy3DParms* params) {
    return api_return(
        get_typed_params(node, cudaGraphNodeTypeMemcpy, params, &CUgraphNode_st::memcpy_params));
}

cudaError_t cudaGraphMemcpyNodeSetParams(cudaGraphNode_t node, const cudaMemcpy3DParms* params) {
    return api_return(set_typed_params(node, cudaGraphNodeTypeMemcpy, params, memcpy_launch,
                                       &CUgraphNode_st::memcpy_params));
}

cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                   const cudaGraphNode_t* deps, size_t num_deps,
                                   const cudaMemsetParams* params) {
    return api_return(add_typed_node(node, graph, deps, num_deps, cudaGraphNodeTypeMemset, params,
                                     memset_launch, &CUgraphNode_st::memset_params));
}

cudaError_t cudaGraphMemsetNodeGetParams(cudaGraphNode_t node, cudaMemsetParams* params) {
    return api_return(
        get_typed_params(node, cudaGraphNodeTypeMemset, params, &CUgraphNode_st::memset_params));
}

cudaError_t cudaGraphMemsetNodeSetParams(cudaGraphNode_t node, const cudaMemsetParams* params) {
    return api_return(set_typed_params(node, cudaGraphNodeTypeMemset, params, memset_launch,
                                       &CUgraphNode_st::memset_params));
}

cudaError_t cudaGraphAddHostNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                 const cudaGraphNode_t* deps, size_t num_deps,
                                 const cudaHostNodeParams* params) {
    return api_return(add_typed_node(node, graph, deps, num_deps, cudaGraphNodeTypeHost, params,
                                     host_launch, &CUgraphNode_st::host));
}

cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t node, cudaHostNodeParams* params) {
    return api_return(get_typed_params(node, cudaGraphNodeTypeHost, params, &CUgraphNode_st::host));
}

cudaError_t cudaGraphHostNodeSetParams(cudaGraphNode_t node, const cudaHostNodeParams* params) {
    return api_return(
        set_typed_params(node, cudaGraphNodeTypeHost, params, host_launch, &CUgraphNode_st::host));
}

cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                  const cudaGraphNode_t* deps, size_t num_deps) {
    ApiLock lock;
    NodeLaunch nothing = [](cudaStream_t) { return cudaSuccess; };
    return api_return(
        add_node(node, graph, deps, num_deps, cudaGraphNodeTypeEmpty, nothing, nullptr));
}

cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                       const cudaGraphNode_t* deps, size_t num_deps,
                                       cudaGraph_t child) {
    ApiLock lock;
    if (!valid_graph(child) || child == graph) return api_return(cudaErrorInvalidValue);
    CUgraphNode_st* made = nullptr;
    cudaError_t err = add_node(node, graph, deps, num_deps, cudaGraphNodeTypeGraph, nullptr, &made);
    if (made) {
        made->child = new_graph();
        clone_into(child, made->child);
    }
    return api_return(err);
}

cudaError_t cudaGraphChildGraphNodeGetGraph(cudaGraphNode_t node, cudaGraph_t* graph) {
    ApiLock lock;
    if (!graph || !valid_node(node) || node->type != cudaGraphNodeTypeGraph)
        return api_return(cudaErrorInvalidValue);
    *graph = node->child;
    return cudaSuccess;
}

cudaError_t cudaGraphAddEventRecordNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                        const cudaGraphNode_t* deps, size_t num_deps,
                                        cudaEvent_t event) {
    if (!event) return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    NodeLaunch launch = event_launch(cudaGraphNodeTypeEventRecord, event);
    CUgraphNode_st* made = nullptr;
    cudaError_t err =
        add_node(node, graph, deps, num_deps, cudaGraphNodeTypeEventRecord, launch, &made);
    if (made) made->event = event;
    return api_return(err);
}

cudaError_t cudaGraphAddEventWaitNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                      const cudaGraphNode_t* deps, size_t num_deps,
                                      cudaEvent_t event) {
    if (!event) return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    NodeLaunch launch = event_launch(cudaGraphNodeTypeWaitEvent, event);
    CUgraphNode_st* made = nullptr;
    cudaError_t err =
        add_node(node, graph, deps, num_deps, cudaGraphNodeTypeWaitEvent, launch, &made);
    if (made) made->event = event;
    return api_return(err);
}

cudaError_t cudaGraphEventRecordNodeGetEvent(cudaGraphNode_t node, cudaEvent_t* event) {
    return api_return(get_node_event(node, cudaGraphNodeTypeEventRecord, event));
}
cudaError_t cudaGraphEventRecordNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event) {
    return api_return(set_node_event(node, cudaGraphNodeTypeEventRecord, event));
}
cudaError_t cudaGraphEventWaitNodeGetEvent(cudaGraphNode_t node, cudaEvent_t* event) {
    return api_return(get_node_event(node, cudaGraphNodeTypeWaitEvent, event));
}
cudaError_t cudaGraphEventWaitNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event) {
    return api_return(set_node_event(node, cudaGraphNodeTypeWaitEvent, event));
}
cudaError_t cudaGraphExecEventRecordNodeSetEvent(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                 cudaEvent_t event) {
    return api_return(set_exec_event(exec, node, cudaGraphNodeTypeEventRecord, event));
}
cudaError_t cudaGraphExecEventWaitNodeSetEvent(cudaGraphExec_t exec, cudaGraphNode_t node,
                                               cudaEvent_t event) {
    return api_return(set_exec_event(exec, node, cudaGraphNodeTypeWaitEvent, event));
}

cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t* from,
                                     const cudaGraphNode_t* to, const cudaGraphEdgeData* edges,
                                     size_t count) {
    ApiLock lock;
    if (!valid_graph(graph) || (count > 0 && (!from || !to)))
        return api_return(cudaErrorInvalidValue);
    for (size_t i = 0; i < count; i++) {
        if (!graph_has_node(graph, from[i]) || !graph_has_node(graph, to[i]) || from[i] == to[i])
            return api_return(cudaErrorInvalidValue);
        const std::vector<cudaGraphNode_t>& d = to[i]->deps;
        if (std::find(d.begin(), d.end(), from[i]) != d.end())
            return api_return(cudaErrorInvalidValue);  // the edge exists already
        if (edges && (edges[i].from_port || edges[i].to_port || edges[i].type))
            return api_return(cudaErrorNotSupported);
    }
    for (size_t i = 0; i < count; i++) to[i]->deps.push_back(from[i]);
    return cudaSuccess;
}

cudaError_t cudaGraphRemoveDependencies(cudaGraph_t graph, const cudaGraphNode_t* from,
                                        const cudaGraphNode_t* to, const cudaGraphEdgeData* edges,
                                        size_t count) {
    ApiLock lock;
    if (!valid_graph(graph) || (count > 0 && (!from || !to)))
        return api_return(cudaErrorInvalidValue);
    for (size_t i = 0; i < count; i++) {
        if (!graph_has_node(graph, to[i])) return api_return(cudaErrorInvalidValue);
        const std::vector<cudaGraphNode_t>& d = to[i]->deps;
        if (std::find(d.begin(), d.end(), from[i]) == d.end())
            return api_return(cudaErrorInvalidValue);
    }
    for (size_t i = 0; i < count; i++) {
        std::vector<cudaGraphNode_t>& d = to[i]->deps;
        d.erase(std::find(d.begin(), d.end(), from[i]));
    }
    return cudaSuccess;
}

cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node) {
    ApiLock lock;
    if (!valid_node(node)) return api_return(cudaErrorInvalidValue);
    cudaGraph_t g = node->graph;
    for (auto& n : g->nodes) {
        auto& d = n->deps;
        d.erase(std::remove(d.begin(), d.end(), node), d.end());
    }
    if (node->child) delete_graph(node->child);
    for (auto it = g->nodes.begin(); it != g->nodes.end(); ++it) {
        if (it->get() == node) {
            g->nodes.erase(it);
            break;
        }
    }
    return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
    ApiLock lock;
    if (!valid_graph(graph)) return api_return(cudaErrorInvalidValue);
    std::vector<cudaGraphNode_t> all;
    for (auto& n : graph->nodes) all.push_back(n.get());
    return api_return(write_nodes(all, nodes, nullptr, count));
}

cudaError_t cudaGraphGetRootNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
    ApiLock lock;
    if (!valid_graph(graph)) return api_return(cudaErrorInvalidValue);
    std::vector<cudaGraphNode_t> roots;
    for (auto& n : graph->nodes)
        if (n->deps.empty()) roots.push_back(n.get());
    return api_return(write_nodes(roots, nodes, nullptr, count));
}

cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t* from, cudaGraphNode_t* to,
                              cudaGraphEdgeData* edges, size_t* count) {
    ApiLock lock;
    if (!valid_graph(graph) || !count || (!from != !to)) return api_return(cudaErrorInvalidValue);
    std::vector<cudaGraphNode_t> f, t;
    for (auto& n : graph->nodes)
        for (cudaGraphNode_t d : n->deps) {
            f.push_back(d);
            t.push_back(n.get());
        }
    size_t wanted = *count;
    cudaError_t err = write_nodes(f, from, edges, count);
    if (err == cudaSuccess && to) write_nodes(t, to, nullptr, &wanted);
    return api_return(err);
}

cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t* deps,
                                         cudaGraphEdgeData* edges, size_t* count) {
    ApiLock lock;
    if (!valid_node(node)) return api_return(cudaErrorInvalidValue);
    return api_return(write_nodes(node->deps, deps, edges, count));
}

cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node, cudaGraphNode_t* dependents,
                                           cudaGraphEdgeData* edges, size_t* count) {
    ApiLock lock;
    if (!valid_node(node)) return api_return(cudaErrorInvalidValue);
    return api_return(write_nodes(dependents_of(node), dependents, edges, count));
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
    ApiLock lock;
    if (!type || !valid_node(node)) return api_return(cudaErrorInvalidValue);
    *type = node->type;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags) {
    unsigned long long known =
        cudaGraphInstantiateFlagAutoFreeOnLaunch | cudaGraphInstantiateFlagUpload |
        cudaGraphInstantiateFlagDeviceLaunch | cudaGraphInstantiateFlagUseNodePriority;
    if (!exec || (flags & ~known)) return api_return(cudaErrorInvalidValue);
    ApiLock lock;
    if (!valid_graph(graph)) return api_return(cudaErrorInvalidValue);
    auto e = std::make_unique<CUgraphExec_st>();
    e->flags = flags;
    if (!flatten(graph, e.get())) {
        fprintf(stderr, "cucc: cudaGraphInstantiate: the graph's dependencies form a cycle\n");
        return api_return(cudaErrorInvalidValue);
    }
    *exec = e.release();
    live_execs().insert(*exec);
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph,
                                          unsigned long long flags) {
    return cudaGraphInstantiate(exec, graph, flags);
}

cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t* exec, cudaGraph_t graph,
                                           cudaGraphInstantiateParams* params) {
    if (!params) return api_return(cudaErrorInvalidValue);
    params->errNode_out = nullptr;
    cudaError_t err = cudaGraphInstantiate(exec, graph, params->flags);
    params->result_out =
        err == cudaSuccess ? cudaGraphInstantiateSuccess : cudaGraphInstantiateError;
    if (err == cudaSuccess && (params->flags & cudaGraphInstantiateFlagUpload))
        err = cudaGraphUpload(*exec, params->uploadStream);
    return err;
}

cudaError_t cudaGraphExecGetFlags(cudaGraphExec_t exec, unsigned long long* flags) {
    ApiLock lock;
    if (!flags || !valid_exec(exec)) return api_return(cudaErrorInvalidValue);
    *flags = exec->flags;
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    ApiLock lock;
    if (!valid_exec(exec)) return api_return(cudaErrorInvalidValue);
    live_execs().erase(exec);
    delete exec;
    return cudaSuccess;
}

// Nothing to upload: the graph lives in host memory. The stream is checked.
cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t stream) {
    cudaStream_t s;
    {
        ApiLock lock;
        if (!valid_exec(exec)) return api_return(cudaErrorInvalidValue);
    }
    if (!resolve_stream(stream, &s)) return api_return(cudaErrorInvalidResourceHandle);
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    std::vector<NodeLaunch> launches;
    {
        ApiLock lock;
        if (!valid_exec(exec)) return api_return(cudaErrorInvalidValue);
        launches = exec->launches;
    }
    cudaStream_t s;
    if (!resolve_stream(stream, &s)) return api_return(cudaErrorInvalidResourceHandle);
    for (NodeLaunch& launch : launches)
        if (launch)
            if (cudaError_t err = launch(stream)) return api_return(err);
    return cudaSuccess;
}

// The executable graph takes the new graph's node parameters when both have the same nodes
// (types, in creation order) and the same edges; otherwise nothing changes and the result says
// why.
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph,
                                cudaGraphExecUpdateResultInfo* info) {
    ApiLock lock;
    if (!info || !valid_exec(exec) || !valid_graph(graph)) return api_return(cudaErrorInvalidValue);
    *info = cudaGraphExecUpdateResultInfo{cudaGraphExecUpdateSuccess, nullptr, nullptr};
    CUgraphExec_st fresh;
    if (!flatten(graph, &fresh)) return api_return(cudaErrorInvalidValue);
    if (fresh.types.size() != exec->types.size()) {
        info->result = cudaGraphExecUpdateErrorTopologyChanged;
        return api_return(cudaErrorGraphExecUpdateFailure);
    }
    for (size_t i = 0; i < fresh.types.size(); i++) {
        if (fresh.types[i] != exec->types[i]) {
            info->result = cudaGraphExecUpdateErrorNodeTypeChanged;
            info->errorNode = fresh.nodes[i];
            return api_return(cudaErrorGraphExecUpdateFailure);
        }
        size_t a = fresh.nodes[i]->deps.size(), b = exec->nodes[i]->deps.size();
        if (a != b) {
            info->result = cudaGraphExecUpdateErrorTopologyChanged;
            info->errorNode = fresh.nodes[i];
            return api_return(cudaErrorGraphExecUpdateFailure);
        }
    }
    exec->launches = fresh.launches;
    exec->nodes = fresh.nodes;
    return cudaSuccess;
}

cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                             const cudaKernelNodeParams* params) {
    return api_return(exec_set(exec, node, cudaGraphNodeTypeKernel,
                               [&](NodeLaunch* l) { return kernel_launch(params, l); }));
}

cudaError_t cudaGraphExecMemcpyNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                             const cudaMemcpy3DParms* params) {
    return api_return(exec_set(exec, node, cudaGraphNodeTypeMemcpy,
                               [&](NodeLaunch* l) { return memcpy_launch(params, l); }));
}

cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                             const cudaMemsetParams* params) {
    return api_return(exec_set(exec, node, cudaGraphNodeTypeMemset,
                               [&](NodeLaunch* l) { return memset_launch(params, l); }));
}

cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                           const cudaHostNodeParams* params) {
    return api_return(exec_set(exec, node, cudaGraphNodeTypeHost,
                               [&](NodeLaunch* l) { return host_launch(params, l); }));
}

cudaError_t cudaGraphAddNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                             const cudaGraphEdgeData* edges, size_t num_deps,
                             cudaGraphNodeParams* p) {
    if (!p) return api_return(cudaErrorInvalidValue);
    for (size_t i = 0; edges && i < num_deps; i++)
        if (edges[i].from_port || edges[i].to_port || edges[i].type)
            return api_return(cudaErrorNotSupported);
    switch (p->type) {
        case cudaGraphNodeTypeKernel: {
            cudaKernelNodeParams k = kernel_params(p->kernel);
            return cudaGraphAddKernelNode(node, graph, deps, num_deps, &k);
        }
        case cudaGraphNodeTypeMemcpy:
            if (p->memcpy.flags) return api_return(cudaErrorInvalidValue);  // must be zero
            return cudaGraphAddMemcpyNode(node, graph, deps, num_deps, &p->memcpy.copyParams);
        case cudaGraphNodeTypeMemset: {
            cudaMemsetParams m = memset_params(p->memset);
            return cudaGraphAddMemsetNode(node, graph, deps, num_deps, &m);
        }
        case cudaGraphNodeTypeHost: {
            cudaHostNodeParams h = host_params(p->host);
            return cudaGraphAddHostNode(node, graph, deps, num_deps, &h);
        }
        case cudaGraphNodeTypeGraph:
            // Moving the child graph into the node (cudaGraphChildGraphOwnershipMove) would
            // make the caller's handle the node's; only the default copy is supported.
            if (p->graph.ownership != cudaGraphChildGraphOwnershipClone)
                return api_return(unsupported_node("cudaGraphAddNode", p->type));
            return cudaGraphAddChildGraphNode(node, graph, deps, num_deps, p->graph.graph);
        case cudaGraphNodeTypeEmpty:
            return cudaGraphAddEmptyNode(node, graph, deps, num_deps);
        case cudaGraphNodeTypeEventRecord:
            return cudaGraphAddEventRecordNode(node, graph, deps, num_deps, p->eventRecord.event);
        case cudaGraphNodeTypeWaitEvent:
            return cudaGraphAddEventWaitNode(node, graph, deps, num_deps, p->eventWait.event);
        default:
            return api_return(unsupported_node("cudaGraphAddNode", p->type));
    }
}

cudaError_t cudaGraphNodeSetParams(cudaGraphNode_t node, cudaGraphNodeParams* p) {
    {
        ApiLock lock;
        if (!p || !valid_node(node) || node->type != p->type)
            return api_return(cudaErrorInvalidValue);
    }
    switch (p->type) {
        case cudaGraphNodeTypeKernel: {
            cudaKernelNodeParams k = kernel_params(p->kernel);
            return cudaGraphKernelNodeSetParams(node, &k);
        }
        case cudaGraphNodeTypeMemcpy:
            return cudaGraphMemcpyNodeSetParams(node, &p->memcpy.copyParams);
        case cudaGraphNodeTypeMemset: {
            cudaMemsetParams m = memset_params(p->memset);
            return cudaGraphMemsetNodeSetParams(node, &m);
        }
        case cudaGraphNodeTypeHost: {
            cudaHostNodeParams h = host_params(p->host);
            return cudaGraphHostNodeSetParams(node, &h);
        }
        case cudaGraphNodeTypeEventRecord:
            return api_return(set_node_event(node, p->type, p->eventRecord.event));
        case cudaGraphNodeTypeWaitEvent:
            return api_return(set_node_event(node, p->type, p->eventWait.event));
        default:
            return api_return(unsupported_node("cudaGraphNodeSetParams", p->type));
    }
}

cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                       cudaGraphNodeParams* p) {
    if (!p) return api_return(cudaErrorInvalidValue);
    switch (p->type) {
        case cudaGraphNodeTypeKernel: {
            cudaKernelNodeParams k = kernel_params(p->kernel);
            return cudaGraphExecKernelNodeSetParams(exec, node, &k);
        }
        case cudaGraphNodeTypeMemcpy:
            return cudaGraphExecMemcpyNodeSetParams(exec, node, &p->memcpy.copyParams);
        case cudaGraphNodeTypeMemset: {
            cudaMemsetParams m = memset_params(p->memset);
            return cudaGraphExecMemsetNodeSetParams(exec, node, &m);
        }
        case cudaGraphNodeTypeHost: {
            cudaHostNodeParams h = host_params(p->host);
            return cudaGraphExecHostNodeSetParams(exec, node, &h);
        }
        case cudaGraphNodeTypeEventRecord:
            return api_return(set_exec_event(exec, node, p->type, p->eventRecord.event));
        case cudaGraphNodeTypeWaitEvent:
            return api_return(set_exec_event(exec, node, p->type, p->eventWait.event));
        default:
            return api_return(unsupported_node("cudaGraphExecNodeSetParams", p->type));
    }
}

// A Graphviz description: one line per node (its type), one per edge.
cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char* path, unsigned int flags) {
    ApiLock lock;
    if (!valid_graph(graph) || !path) return api_return(cudaErrorInvalidValue);
    FILE* f = fopen(path, "w");
    if (!f) return api_return(cudaErrorOperatingSystem);
    static const char* names[] = {"kernel",     "memcpy",   "memset",     "host",
                                  "graph",      "empty",    "wait event", "event record",
                                  "ext signal", "ext wait", "mem alloc",  "mem free",
                                  "conditional"};
    std::map<cudaGraphNode_t, size_t> id;
    fprintf(f, "digraph cuda_graph {\n");
    for (auto& n : graph->nodes) {
        id[n.get()] = id.size();
        int t = (int)n->type;
        fprintf(f, "  n%zu [label=\"%s\"];\n", id[n.get()],
                t >= 0 && t < (int)(sizeof names / sizeof *names) ? names[t] : "node");
    }
    for (auto& n : graph->nodes)
        for (cudaGraphNode_t d : n->deps) fprintf(f, "  n%zu -> n%zu;\n", id[d], id[n.get()]);
    fprintf(f, "}\n");
    return api_return(fclose(f) == 0 ? cudaSuccess : cudaErrorOperatingSystem);
}

}  // extern "C"
