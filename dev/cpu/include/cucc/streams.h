// cucc/streams.h: how work reaches a stream of the CPU runtime (StreamOp, stream_enqueue,
// run_until), for the runtime itself and the CPU libraries (cuBLASLt, cuBLAS, NCCL), which queue
// their calls as stream work. Not part of what a CUDA program sees: cuda_runtime.h does not
// include it, so programs compiled by cucc do not pay for <functional> (nvcc's headers do not
// give it to them either).
#pragma once

#include <functional>

#include <cucc/runtime.h>

namespace cucc {

// Streams. Work queued on a stream runs in order. Queued work runs on the host thread that
// synchronizes (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize, cudaMemcpy,
// ...) or when the queues grow long; work that no host thread waits for (a stream callback that
// passes results on by other means, a flag in mapped memory) is run by a progress thread once
// the runtime has been idle for 20 ms with work pending (stream.cpp). Heads of different streams
// are picked in submission order, or at random under CUCC_SCHEDULE=random, so a missing event
// between streams shows up. The legacy default stream (0, cudaStreamLegacy) orders against every
// blocking stream of its device as CUDA documents; streams created with cudaStreamNonBlocking do
// not. Work still queued when the process exits is discarded (not run), as when a CUDA program
// exits without synchronizing: e.g. output of a kernel's printf that was never synchronized
// does not appear.
//
// Stream capture (cudaStreamBeginCapture ... cudaStreamEndCapture) records ops instead of
// queueing them: each op becomes a node of the capture's graph, and every launch of the
// instantiated graph queues the recorded ops again, in an order that respects the graph's
// dependencies (a topological order, one op after the other on the launch stream). So an op's
// run() must read its inputs when it runs, as a kernel reads its buffers; work that is prepared
// anew for every run sets make instead (see below).
struct StreamOp {
    StreamOp(const char* what_ = nullptr, std::function<bool()> ready_ = nullptr,
             std::function<void()> run_ = nullptr)
        : what(what_), ready(std::move(ready_)), run(std::move(run_)) {}
    const char* what;  // for messages ("kernel foo", "ncclAllReduce", ...)
    // null: ready once the ops before it on its stream are done. Otherwise also polled until
    // true (a quick check, called with the runtime's lock held; between polls the lock is
    // released and the poller sleeps, backing off to 1 ms): use it for conditions set by other
    // processes or threads (e.g. NCCL peers). A message goes to stderr every minute it waits.
    std::function<bool()> ready;
    std::function<void()> run;  // the work itself; runs on a synchronizing host thread (or
                                // the progress thread)
    // What a captured graph shows the op as (cudaGraphNodeGetType).
    cudaGraphNodeType node_type = cudaGraphNodeTypeKernel;
    // False for work that cannot be recorded (a copy from pageable memory, whose data is taken
    // when the call is made): on a capturing stream it fails with
    // cudaErrorStreamCaptureUnsupported and invalidates the capture, as in CUDA.
    bool capturable = true;
    // Set instead of ready and run by work that must be built anew each time it is queued (an
    // NCCL call takes its communicator's next sequence number): called when the op is queued on
    // a stream that is not capturing, and at every launch of a graph that captured it.
    std::function<StreamOp()> make;
};
// Queues op on stream (0, cudaStreamLegacy, cudaStreamPerThread or a created stream), or
// records it when the stream is capturing. Returns cudaErrorInvalidResourceHandle (and queues
// nothing) for an invalid stream, and the capture errors CUDA gives (see stream.cpp).
cudaError_t stream_enqueue(cudaStream_t stream, StreamOp op);
// Runs queued work (of every device) until done() holds. done is called with the runtime's lock
// held, between ops and while the work waits for an external condition (a StreamOp's ready).
void run_until(const std::function<bool()>& done);
}  // namespace cucc
