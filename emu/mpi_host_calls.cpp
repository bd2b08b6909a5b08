// MPI calls the host makes to the other ranks (the trainer's barrier, sums and gathers of host values),
// through MPI's profiling interface: each first runs the work the emulator's queued streams hold
// (EMU_STREAMS, stream_queue.h), then makes the call. A rank must not wait in MPI for a peer that is
// itself waiting, in a queued collective, for this rank: queued collectives run when their rank
// synchronises, and two ranks may reach the same host call having synchronised different streams
// (only rank 0 reads the weights for a checkpoint while ZeRO-3's prefetch is queued on both).
// Inside a drain (the NCCL stand-in's own MPI calls) there is nothing to run first.
#include <mpi.h>

namespace emu {
void drain_queued_work() __attribute__((weak));
}

namespace {
void run_queued_work() {
    if (emu::drain_queued_work) emu::drain_queued_work();
}
}  // namespace

extern "C" {

int MPI_Barrier(MPI_Comm comm) {
    run_queued_work();
    return PMPI_Barrier(comm);
}
int MPI_Bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) {
    run_queued_work();
    return PMPI_Bcast(buffer, count, type, root, comm);
}
int MPI_Allreduce(const void* send, void* receive, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
    run_queued_work();
    return PMPI_Allreduce(send, receive, count, type, op, comm);
}
int MPI_Gather(const void* send, int send_count, MPI_Datatype send_type, void* receive, int receive_count,
               MPI_Datatype receive_type, int root, MPI_Comm comm) {
    run_queued_work();
    return PMPI_Gather(send, send_count, send_type, receive, receive_count, receive_type, root, comm);
}
int MPI_Send(const void* buffer, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm) {
    run_queued_work();
    return PMPI_Send(buffer, count, type, peer, tag, comm);
}
int MPI_Recv(void* buffer, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm, MPI_Status* status) {
    run_queued_work();
    return PMPI_Recv(buffer, count, type, peer, tag, comm, status);
}
int MPI_Sendrecv(const void* send, int send_count, MPI_Datatype send_type, int to, int send_tag, void* receive,
                 int receive_count, MPI_Datatype receive_type, int from, int receive_tag, MPI_Comm comm,
                 MPI_Status* status) {
    run_queued_work();
    return PMPI_Sendrecv(send, send_count, send_type, to, send_tag, receive, receive_count, receive_type, from,
                         receive_tag, comm, status);
}

}  // extern "C"
