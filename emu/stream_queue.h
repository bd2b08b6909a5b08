// Queued streams (EMU_STREAMS=<seed>): work issued to a stream is queued instead of run, and runs when
// the host synchronises, in a seeded random order that honours only what a GPU guarantees:
//   - stream order: a stream's work runs in the order it was issued;
//   - events: after cudaStreamWaitEvent(s, e), s's later work waits for the work issued to e's stream
//     before the cudaEventRecord(e) it waits on;
//   - the legacy default stream (stream 0): its work waits for all earlier work of the blocking streams
//     (cudaStreamCreate's), and their later work waits for it; cudaStreamNonBlocking streams do not;
//   - communication (WorkKind::communication, the NCCL stand-in) keeps the order the host issued it
//     in, across all streams and communicators, as NCCL starts it under NCCL_LAUNCH_ORDER_IMPLICIT
//     (which the trainer sets: parallel/comm/launch_order.h): each rank then runs the same collectives
//     in the same order (on one thread, a collective blocks until every rank reaches it, so two ranks
//     running two collectives in opposite orders would wait for each other forever).
//     The trainer issues collectives on one communicator from two streams (ZeRO's reductions on the
//     communication stream, the loss on the compute stream) and orders them with events; this keeps
//     that order even where the events would not, a GPU's only guarantee being what the events say.
// A synchronisation runs what it waits for (a stream's or an event's work and everything that work
// waits for; everything for the device, the legacy stream, cudaFree) and, so that no rank sits on a
// collective its peers wait for, every communication issued so far. Work runs on the host thread
// that synchronises; one host thread issues work (as the trainer does).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "emu/work_kind.h"

namespace emu {

// One node of a captured graph (stream_capture.cpp): its work and the earlier nodes it waits for (the
// node before it on its stream, and the nodes an event it waited on was recorded after).
struct GraphNode {
    std::string name;
    std::function<void()> work;
    WorkKind kind = WorkKind::device;
    std::vector<size_t> after;
};

// Whether work is queued (EMU_STREAMS is set, or set_stream_seed chose a seed).
bool streams_queued();
// Queues from now on with random orders drawn from `seed`, or (0) runs work when it is issued again,
// after running what is queued.
void set_stream_seed(unsigned long long seed);

// Issuing: work on a stream; a recorded graph's nodes on a stream (in an order their edges allow,
// all after the stream's earlier work and before its later work); an event record; a wait.
void queue_work(cudaStream_t stream, const char* name, std::function<void()> work, WorkKind kind);
void queue_graph(cudaStream_t stream, const std::vector<GraphNode>& nodes);
void queue_event_record(cudaEvent_t event, cudaStream_t stream);
void queue_stream_wait(cudaStream_t stream, cudaEvent_t event);
// A destroyed stream's handle may be reused: it starts with no work to wait for.
void forget_stream(cudaStream_t stream);

// Synchronising: run the stream's work, the event's, or all that is queued (each with what it waits
// for and every communication issued). No-ops when nothing is queued.
void drain_stream(cudaStream_t stream);
void drain_event(cudaEvent_t event);
void drain_queued_work();
// Whether the stream's work, or the work before the event's record, has all run.
bool stream_idle(cudaStream_t stream);
bool event_done(cudaEvent_t event);

}  // namespace emu
