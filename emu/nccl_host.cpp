// Host stand-in for the part of NCCL that a data-parallel trainer calls, over MPI, for the emulated
// (g++) build: ranks are real processes started by mpirun. It implements functions declared in
// NVIDIA's own nccl.h: unique ids, communicators and their splits, all-reduce (sum, avg, max),
// reduce-scatter, all-gather, broadcast, point-to-point send and receive, and groups, on fp32 and
// bf16 buffers (device memory is host memory in the emulator), and moves of bytes (int8, uint8).
//
// Reductions are computed here, not by MPI's reduction operators, so the result is the same on every
// rank and independent of MPI's algorithm: each element is summed in fp32 in rank order 0..n-1 on one
// rank (an MPI_Alltoall brings it the values), divided by n for ncclAvg, rounded once to the buffer's
// type, and then broadcast. bf16 is therefore summed in fp32 and rounded once, as NCCL does.
// Collectives run when they are issued, also inside ncclGroupStart/End: every rank issues the same
// collectives in the same order (NCCL requires that too), so the result is what the group would give.
// Sends and receives inside a group are started when issued and completed together at the group's
// end (as NCCL progresses them concurrently, so a pair of ranks may each send to the other first);
// outside a group each completes before the call returns, which deadlocks where NCCL would too.
// Streams are ignored (emulated streams run synchronously), except that on a stream being captured
// into a CUDA graph (emu/stream_capture.cpp) a collective is recorded and runs when the graph does:
// every rank replays the same graph, so the ranks still issue the same collectives in the same order.
// Sends and receives in a capture are recorded as queued ones are (below). With queued streams (EMU_STREAMS,
// emu/stream_queue.h) collectives, sends and receives are queued on their stream as communication,
// which keeps its issue order; a group's sends and receives are queued as one piece of work at
// ncclGroupEnd (they must share a stream); creating, splitting and destroying a communicator first
// runs everything queued (they talk to the other ranks at once).
#include <mpi.h>
#include <nccl.h>

#include "emu/work_kind.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <unistd.h>
#include <vector>

struct ncclComm {
    MPI_Comm mpi;
    int rank, size;
};

// The emulator's stream capture and queued streams, when the program links them (weak: test_nccl
// links the stand-in alone).
namespace emu {
bool record_work(cudaStream_t stream, const char* name, std::function<void()> work, WorkKind kind)
    __attribute__((weak));
bool capturing(cudaStream_t stream) __attribute__((weak));
bool defers_work(cudaStream_t stream) __attribute__((weak));
void drain_queued_work() __attribute__((weak));
}
// When each collective ran on the host (µs on the steady clock), for the trainer's phase timers: on the
// emulated device nothing else runs meanwhile (gpu/step_timer.cu). Taken (and cleared) by the timers.
namespace emu {
static std::vector<std::pair<double, double>> g_communication_intervals;
std::vector<std::pair<double, double>> take_communication_intervals() {
    std::vector<std::pair<double, double>> taken;
    taken.swap(g_communication_intervals);
    return taken;
}
}  // namespace emu
static double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// Runs `collective`, keeping when it ran.
static void run_timed(const std::function<void()>& collective) {
    const double start = now_us();
    collective();
    if (emu::g_communication_intervals.size() < 100000) emu::g_communication_intervals.push_back({start, now_us()});
}
// Runs `collective` now, or records or queues it when the emulator defers `stream`'s work.
static void run_or_record(cudaStream_t stream, const char* name, const std::function<void()>& collective) {
    const std::function<void()> timed = [collective] { run_timed(collective); };
    if (!(emu::record_work && emu::record_work(stream, name, timed, emu::WorkKind::communication))) timed();
}
static bool queued(cudaStream_t stream) { return emu::defers_work && emu::defers_work(stream); }
// Before talking to the other ranks from the host: run what is queued (their collectives included).
static void run_queued_work() {
    if (emu::drain_queued_work) emu::drain_queued_work();
}

namespace {

int g_group_depth = 0;
std::vector<MPI_Request> g_pending;  // sends and receives of the open group
char g_last_error[256] = "";

// Records (and prints, one line) why a call was refused, then returns the result code.
ncclResult_t refuse(ncclResult_t result, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
ncclResult_t refuse(ncclResult_t result, const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(g_last_error, sizeof g_last_error, fmt, args);
    va_end(args);
    fprintf(stderr, "NCCL stand-in: %s\n", g_last_error);
    return result;
}

size_t type_size(ncclDataType_t type) {
    return type == ncclFloat32 ? 4 : type == ncclInt8 || type == ncclUint8 ? 1 : 2;
}

// Reductions take fp32 and bf16; operations that only move data (all-gather, broadcast, send and
// receive) also bytes (ncclInt8, ncclUint8: compressed gradients).
ncclResult_t check_args(const char* op, ncclDataType_t type, ncclComm_t comm, bool moves_only = false) {
    if (!comm) return refuse(ncclInvalidArgument, "%s: null communicator", op);
    const bool bytes = type == ncclInt8 || type == ncclUint8;
    if (type != ncclFloat32 && type != ncclBfloat16 && !(moves_only && bytes))
        return refuse(ncclInvalidArgument, "%s: data type %d not supported (ncclFloat32, ncclBfloat16%s)", op,
                      (int)type, moves_only ? ", ncclInt8, ncclUint8" : " only");
    return ncclSuccess;
}

ncclResult_t check_op(const char* op, ncclRedOp_t red) {
    if (red != ncclSum && red != ncclAvg && red != ncclMax)
        return refuse(ncclInvalidArgument, "%s: reduction %d not supported (ncclSum, ncclAvg, ncclMax only)", op,
                      (int)red);
    return ncclSuccess;
}

inline float load(const void* base, ncclDataType_t type, size_t index) {
    if (type == ncclFloat32) return static_cast<const float*>(base)[index];
    return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
}
inline void store(void* base, ncclDataType_t type, size_t index, float value) {
    if (type == ncclFloat32)
        static_cast<float*>(base)[index] = value;
    else
        static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16(value);  // round to nearest even
}

// MPI counts are int: move large buffers in pieces of at most this many elements or bytes.
constexpr size_t kChunk = size_t(1) << 16;

void broadcast_bytes(void* data, size_t bytes, int root, MPI_Comm comm) {
    for (size_t done = 0; done < bytes; done += kChunk)
        MPI_Bcast(static_cast<char*>(data) + done, (int)std::min(kChunk, bytes - done), MPI_BYTE, root, comm);
}

// The reduction everything else builds on. `send` holds comm->size blocks of `block` elements, of
// which only the first `count` exist (the rest count as zero). Writes to `out` (block elements, or
// fewer where the last block is short) the sum over ranks, in rank order, of this rank's block,
// divided by the rank count for ncclAvg (or their maximum for ncclMax), rounded once to `type`.
void reduce_my_block(const void* send, size_t count, size_t block, void* out, ncclDataType_t type, ncclRedOp_t red,
                     ncclComm* comm) {
    const int n = comm->size;
    const size_t my_start = (size_t)comm->rank * block;
    const size_t my_len = my_start >= count ? 0 : std::min(block, count - my_start);
    std::vector<float> outgoing, incoming, result(block);
    for (size_t offset = 0; offset < block; offset += kChunk) {
        const size_t piece = std::min(kChunk, block - offset);
        outgoing.resize(piece * n);
        incoming.resize(piece * n);
        for (int q = 0; q < n; q++)  // block q goes to rank q
            for (size_t i = 0; i < piece; i++) {
                size_t index = (size_t)q * block + offset + i;
                outgoing[(size_t)q * piece + i] = index < count ? load(send, type, index) : 0.0f;
            }
        MPI_Alltoall(outgoing.data(), (int)piece, MPI_FLOAT, incoming.data(), (int)piece, MPI_FLOAT, comm->mpi);
        for (size_t i = 0; i < piece; i++) {
            float sum = 0.0f, max = -INFINITY;
            for (int q = 0; q < n; q++) sum += incoming[(size_t)q * piece + i];
            for (int q = 0; q < n; q++) max = std::max(max, incoming[(size_t)q * piece + i]);
            result[offset + i] = red == ncclMax ? max : red == ncclAvg ? sum / (float)n : sum;
        }
    }
    // Written only now: with in-place calls `out` overlaps `send`, which the loop above still read.
    for (size_t i = 0; i < my_len; i++) store(out, type, i, result[i]);
}

// Every rank q broadcasts its `block`-element slice of `buffer` (fewer where `count` ends it).
void gather_blocks(void* buffer, size_t count, size_t block, ncclDataType_t type, ncclComm* comm) {
    for (int q = 0; q < comm->size; q++) {
        size_t start = (size_t)q * block;
        if (start >= count) break;
        size_t len = std::min(block, count - start);
        broadcast_bytes(static_cast<char*>(buffer) + start * type_size(type), len * type_size(type), q, comm->mpi);
    }
}

void finalize_mpi_at_exit() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

}  // namespace

extern "C" {

const char* ncclGetErrorString(ncclResult_t result) {
    switch (result) {
        case ncclSuccess: return "no error";
        case ncclUnhandledCudaError: return "unhandled cuda error";
        case ncclSystemError: return "unhandled system error";
        case ncclInternalError: return "internal error";
        case ncclInvalidArgument: return "invalid argument";
        case ncclInvalidUsage: return "invalid usage";
        case ncclRemoteError: return "remote process exited or there was a network error";
        case ncclInProgress: return "NCCL operation in progress";
        default: return "unknown result code";
    }
}

const char* ncclGetLastError(ncclComm_t /*comm*/) { return g_last_error; }

ncclResult_t ncclGetVersion(int* version) {
    if (!version) return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

// 128 random bytes behind a tag. Only equality matters: ncclCommInitRank groups the processes that
// pass the same id into one communicator.
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    if (!id) return refuse(ncclInvalidArgument, "ncclGetUniqueId: null id");
    static std::mt19937_64 rng(std::random_device{}() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)time(nullptr));
    memset(id->internal, 0, sizeof id->internal);
    const char tag[] = "emulated-nccl-id";
    memcpy(id->internal, tag, sizeof tag);
    for (size_t at = 32; at + 8 <= sizeof id->internal; at += 8) {
        uint64_t word = rng();
        memcpy(id->internal + at, &word, 8);
    }
    return ncclSuccess;
}

// Collective over all of MPI_COMM_WORLD: every process must call it at the same time (the trainer
// does: one communicator over all ranks). Processes that pass the same id form one communicator,
// ordered by `rank`. Initialises MPI (and finalises it at exit) if the program has not.
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    if (!comm) return refuse(ncclInvalidArgument, "ncclCommInitRank: null communicator pointer");
    run_queued_work();
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        int provided = 0;
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
        atexit(finalize_mpi_at_exit);
    }
    int world_size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);

    // Group by id: the colour is the lowest world rank holding the same id.
    std::vector<char> ids((size_t)world_size * NCCL_UNIQUE_ID_BYTES);
    MPI_Allgather(id.internal, NCCL_UNIQUE_ID_BYTES, MPI_BYTE, ids.data(), NCCL_UNIQUE_ID_BYTES, MPI_BYTE,
                  MPI_COMM_WORLD);
    int colour = 0;
    while (memcmp(&ids[(size_t)colour * NCCL_UNIQUE_ID_BYTES], id.internal, NCCL_UNIQUE_ID_BYTES) != 0) colour++;
    MPI_Comm split;
    MPI_Comm_split(MPI_COMM_WORLD, colour, rank, &split);
    int size = 0, my_rank = 0;
    MPI_Comm_size(split, &size);
    MPI_Comm_rank(split, &my_rank);

    // All members agree on success or failure, so that none of them goes on to a collective alone.
    int ok = size == nranks && my_rank == rank && rank >= 0 && rank < nranks, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, split);
    if (!all_ok) {
        MPI_Comm_free(&split);
        return refuse(ncclInvalidArgument,
                      "ncclCommInitRank: %d processes share this id but nranks=%d, or ranks are not 0..nranks-1 "
                      "(this process: rank %d)", size, nranks, rank);
    }
    *comm = new ncclComm{split, rank, nranks};
    return ncclSuccess;
}

// The members of `comm` that pass the same colour form one new communicator, ordered by key (then by
// their rank in comm); NCCL_SPLIT_NOCOLOR gives a null one. Collective over comm.
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* /*config*/) {
    if (!comm || !newcomm) return refuse(ncclInvalidArgument, "ncclCommSplit: null argument");
    run_queued_work();
    MPI_Comm split;
    MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &split);
    if (split == MPI_COMM_NULL) {
        *newcomm = nullptr;
        return ncclSuccess;
    }
    int size = 0, rank = 0;
    MPI_Comm_size(split, &size);
    MPI_Comm_rank(split, &rank);
    *newcomm = new ncclComm{split, rank, size};
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    run_queued_work();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm->mpi);
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
    if (!comm || !count) return refuse(ncclInvalidArgument, "ncclCommCount: null argument");
    *count = comm->size;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
    if (!comm || !rank) return refuse(ncclInvalidArgument, "ncclCommUserRank: null argument");
    *rank = comm->rank;
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
    if (!comm || !async_error) return ncclInvalidArgument;
    *async_error = ncclSuccess;  // operations complete when issued: nothing is ever pending
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    if (ncclResult_t r = check_args("ncclAllReduce", type, comm)) return r;
    if (ncclResult_t r = check_op("ncclAllReduce", op)) return r;
    if (count == 0) return ncclSuccess;
    if (!sendbuff || !recvbuff) return refuse(ncclInvalidArgument, "ncclAllReduce: null buffer");
    // Reduce-scatter into this rank's slice of recvbuff, then every rank broadcasts its slice.
    run_or_record(stream, "ncclAllReduce", [=] {
        const size_t block = (count + comm->size - 1) / comm->size;
        void* my_slice = static_cast<char*>(recvbuff) + (size_t)comm->rank * block * type_size(type);
        reduce_my_block(sendbuff, count, block, my_slice, type, op, comm);
        gather_blocks(recvbuff, count, block, type, comm);
    });
    return ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    if (ncclResult_t r = check_args("ncclReduceScatter", type, comm)) return r;
    if (ncclResult_t r = check_op("ncclReduceScatter", op)) return r;
    if (recvcount == 0) return ncclSuccess;
    if (!sendbuff || !recvbuff) return refuse(ncclInvalidArgument, "ncclReduceScatter: null buffer");
    run_or_record(stream, "ncclReduceScatter", [=] {
        reduce_my_block(sendbuff, recvcount * comm->size, recvcount, recvbuff, type, op, comm);
    });
    return ncclSuccess;
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
    if (ncclResult_t r = check_args("ncclAllGather", type, comm, true)) return r;
    if (sendcount == 0) return ncclSuccess;
    if (!sendbuff || !recvbuff) return refuse(ncclInvalidArgument, "ncclAllGather: null buffer");
    run_or_record(stream, "ncclAllGather", [=] {
        const size_t bytes = sendcount * type_size(type);
        char* my_slice = static_cast<char*>(recvbuff) + (size_t)comm->rank * bytes;
        if (my_slice != sendbuff) memmove(my_slice, sendbuff, bytes);  // equal pointers: in place
        gather_blocks(recvbuff, sendcount * comm->size, sendcount, type, comm);
    });
    return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, int root,
                           ncclComm_t comm, cudaStream_t stream) {
    if (ncclResult_t r = check_args("ncclBroadcast", type, comm, true)) return r;
    if (root < 0 || root >= comm->size) return refuse(ncclInvalidArgument, "ncclBroadcast: root %d out of range", root);
    if (count == 0) return ncclSuccess;
    if (!recvbuff || (comm->rank == root && !sendbuff)) return refuse(ncclInvalidArgument, "ncclBroadcast: null buffer");
    run_or_record(stream, "ncclBroadcast", [=] {
        const size_t bytes = count * type_size(type);
        if (comm->rank == root && sendbuff != recvbuff) memcpy(recvbuff, sendbuff, bytes);
        broadcast_bytes(recvbuff, bytes, root, comm->mpi);
    });
    return ncclSuccess;
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t stream) {
    return ncclBroadcast(buff, buff, count, type, root, comm, stream);
}

ncclResult_t ncclGroupStart() {
    g_group_depth++;
    return ncclSuccess;
}

}  // extern "C"

// Point to point, as bytes in pieces of at most kChunk (MPI counts are int); each piece its own
// message, matched in order between the same two ranks.
namespace {
struct Transfer {
    bool send;
    void* buffer;
    size_t bytes;
    int peer;
    ncclComm_t comm;
};
std::vector<Transfer> g_queued_group;  // queued streams: the open group's sends and receives
cudaStream_t g_queued_group_stream = nullptr;

void start_transfer(const Transfer& t, std::vector<MPI_Request>* requests) {
    for (size_t done = 0; done < t.bytes; done += kChunk) {
        MPI_Request request;
        const int piece = (int)std::min(kChunk, t.bytes - done);
        char* at = static_cast<char*>(t.buffer) + done;
        if (t.send)
            MPI_Isend(at, piece, MPI_BYTE, t.peer, 7, t.comm->mpi, &request);
        else
            MPI_Irecv(at, piece, MPI_BYTE, t.peer, 7, t.comm->mpi, &request);
        requests->push_back(request);
    }
}
// Starts the transfers together and returns once all are done.
void transfer(const std::vector<Transfer>& transfers) {
    std::vector<MPI_Request> requests;
    for (const Transfer& t : transfers) start_transfer(t, &requests);
    MPI_Waitall((int)requests.size(), requests.data(), MPI_STATUSES_IGNORE);
}

ncclResult_t point_to_point(bool send, void* buffer, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                            cudaStream_t stream) {
    const char* op = send ? "ncclSend" : "ncclRecv";
    if (ncclResult_t r = check_args(op, type, comm, true)) return r;
    if (peer < 0 || peer >= comm->size || peer == comm->rank)
        return refuse(ncclInvalidArgument, "%s: peer %d is not another rank of %d", op, peer, comm->size);
    if (count == 0) return ncclSuccess;
    if (!buffer) return refuse(ncclInvalidArgument, "%s: null buffer", op);
    const Transfer t{send, buffer, count * type_size(type), peer, comm};
    // Deferred (queued, or recorded into a graph): run when the stream's work runs, a group's together.
    const bool deferred = queued(stream) || (emu::capturing && emu::capturing(stream));
    if (deferred && g_group_depth == 0) {
        run_or_record(stream, op, [t] { transfer({t}); });
    } else if (deferred) {
        if (!g_queued_group.empty() && stream != g_queued_group_stream)
            return refuse(ncclInvalidUsage, "%s: a group's sends and receives on two streams (not supported with "
                                            "queued streams)", op);
        g_queued_group_stream = stream;
        g_queued_group.push_back(t);
    } else if (g_group_depth > 0) {
        start_transfer(t, &g_pending);
    } else {
        run_timed([t] { transfer({t}); });
    }
    return ncclSuccess;
}
}  // namespace

extern "C" {

ncclResult_t ncclGroupEnd() {
    if (g_group_depth == 0) return refuse(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--g_group_depth == 0 && !g_pending.empty()) {
        run_timed([] { MPI_Waitall((int)g_pending.size(), g_pending.data(), MPI_STATUSES_IGNORE); });
        g_pending.clear();
    }
    if (g_group_depth == 0 && !g_queued_group.empty()) {
        std::vector<Transfer> group;
        group.swap(g_queued_group);
        run_or_record(g_queued_group_stream, "ncclGroupEnd (sends and receives)", [group] { transfer(group); });
    }
    return ncclSuccess;
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    return point_to_point(true, const_cast<void*>(sendbuff), count, type, peer, comm, stream);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    return point_to_point(false, recvbuff, count, type, peer, comm, stream);
}

}  // extern "C"
