// RankGroup over MPI (base/ranks.h), and the NCCL communicator built on it. Ranks come from the MPI
// launcher (mpirun, or srun with PMI): one process per GPU, `local_rank` picking the GPU on its node.
// Multi-node runs use nothing else: MPI starts the processes and carries the few host messages, NCCL
// moves the gradients.
#pragma once
#include <memory>

#include <nccl.h>

#include "base/ranks.h"

// True when this process was started by an MPI launcher (its environment says so).
bool launched_by_mpi();
// Initialises MPI and returns the group of all ranks (MPI_COMM_WORLD); finalises MPI at exit.
std::unique_ptr<RankGroup> make_mpi_rank_group();
// One NCCL communicator over every rank of `group`: rank 0 creates the unique id and MPI broadcasts
// it (NCCL_LAUNCH_ORDER_IMPLICIT requested first: parallel/comm/launch_order.h). Fails on every rank
// with one InputError line if NCCL cannot start.
ncclComm_t make_nccl_communicator(const RankGroup& group);
