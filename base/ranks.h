// The ranks of a data-parallel run as the training loop sees them: which one this process is, and
// the few host-side collectives the loop needs (averages of losses, agreement on the configuration,
// a barrier before a checkpoint is marked done, and a way to stop every rank at once). A trainer
// started by mpirun or srun gets the MPI implementation (parallel/comm/mpi_ranks.h); otherwise it is the
// single rank below.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

class RankGroup {
public:
    virtual ~RankGroup() = default;
    int rank = 0, num_ranks = 1;
    int local_rank = 0;  // among the ranks on this machine: picks the GPU
    int node_ranks = 1;  // the ranks on this machine (MPI's ranks sharing its memory)

    // The mean of `value` over all ranks (every rank gets it).
    virtual double mean(double value) { return value; }
    // Fails with an InputError on every rank (all at once, so none is left waiting) when the ranks
    // do not all pass the same `fingerprint`; `what` names what was compared.
    virtual void check_same(uint64_t fingerprint, const char* what) { (void)fingerprint, (void)what; }
    virtual void barrier() {}
    // Every rank's bytes on rank 0, in rank order (the other ranks get an empty vector).
    virtual std::vector<std::vector<char>> gather_on_rank0(const std::vector<char>& mine) { return {mine}; }
    // Rank 0's bytes on every rank (`mine` is read on rank 0 only).
    virtual std::vector<char> broadcast_from_rank0(const std::vector<char>& mine) { return mine; }
    // Around the ring: sends `mine` to rank (rank + 1) % num_ranks and returns what rank
    // (rank − 1 + num_ranks) % num_ranks sent (a copy of this rank's part kept by its neighbour).
    virtual std::vector<char> pass_to_next_rank(const std::vector<char>& mine) { return mine; }
    // Ends every rank's process now with `status` (after an error on this rank only, which would
    // leave the others waiting in a collective).
    [[noreturn]] virtual void abort_all(int status) { exit(status); }
    // One line for the start-up report.
    virtual std::string description() const { return "1 rank"; }
};
