// MPI ranks and the NCCL communicator (see mpi_ranks.h).
#include "parallel/comm/mpi_ranks.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include "base/errors.h"
#include "base/host_arrays.h"
#include "parallel/comm/launch_order.h"

namespace {

void finalize_mpi() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

class MpiRankGroup : public RankGroup {
public:
    MpiRankGroup() {
        int initialized = 0;
        MPI_Initialized(&initialized);
        if (!initialized) {
            int provided = 0;
            MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
            atexit(finalize_mpi);
        }
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &num_ranks);
        // The ranks that share this machine's memory are its local ranks.
        MPI_Comm node;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &local_rank);
        MPI_Comm_size(node, &node_ranks);
        MPI_Comm_free(&node);
        int nodes_local = local_rank == 0 ? 1 : 0;
        MPI_Allreduce(&nodes_local, &nodes_, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    }

    double mean(double value) override {
        double sum = 0;
        MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        return sum / num_ranks;
    }

    void check_same(uint64_t fingerprint, const char* what) override {
        unsigned long long mine = fingerprint, low = 0, high = 0;
        MPI_Allreduce(&mine, &low, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&mine, &high, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
        if (low != high)
            fail("the %d ranks disagree on %s (rank %d's differs from another's): start every rank "
                 "with the same command line and the same files",
                 num_ranks, what, rank);
    }

    void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }

    // Point to point, in pieces of at most 1 GiB (MPI counts are int).
    std::vector<std::vector<char>> gather_on_rank0(const std::vector<char>& mine) override {
        const size_t kPiece = size_t(1) << 30;
        unsigned long long bytes = mine.size();
        std::vector<unsigned long long> sizes(num_ranks);
        MPI_Gather(&bytes, 1, MPI_UNSIGNED_LONG_LONG, sizes.data(), 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
        if (rank != 0) {
            for (size_t at = 0; at < mine.size(); at += kPiece)
                MPI_Send(mine.data() + at, (int)std::min(kPiece, mine.size() - at), MPI_BYTE, 0, 0, MPI_COMM_WORLD);
            return {};
        }
        // Received into the host memory checkpoints reuse (base/host_arrays.h): these are model-sized.
        std::vector<std::vector<char>> all(num_ranks);
        all[0] = reusable_host_bytes(mine.size());
        std::copy(mine.begin(), mine.end(), all[0].begin());
        for (int r = 1; r < num_ranks; r++) {
            all[r] = reusable_host_bytes(sizes[r]);
            for (size_t at = 0; at < all[r].size(); at += kPiece)
                MPI_Recv(all[r].data() + at, (int)std::min(kPiece, all[r].size() - at), MPI_BYTE, r, 0,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        return all;
    }

    std::vector<char> broadcast_from_rank0(const std::vector<char>& mine) override {
        unsigned long long bytes = mine.size();
        MPI_Bcast(&bytes, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
        if (bytes > (unsigned long long)INT_MAX) fail("broadcast of %llu bytes: more than MPI sends at once", bytes);
        std::vector<char> all = rank == 0 ? mine : std::vector<char>(bytes);
        MPI_Bcast(all.data(), (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
        return all;
    }

    std::vector<char> pass_to_next_rank(const std::vector<char>& mine) override {
        const int next = (rank + 1) % num_ranks, previous = (rank + num_ranks - 1) % num_ranks;
        unsigned long long bytes = mine.size(), incoming = 0;
        MPI_Sendrecv(&bytes, 1, MPI_UNSIGNED_LONG_LONG, next, 1, &incoming, 1, MPI_UNSIGNED_LONG_LONG, previous, 1,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        std::vector<char> theirs = reusable_host_bytes(incoming);  // a snapshot's part (base/host_arrays.h)
        const size_t kPiece = size_t(1) << 30;  // MPI counts are ints
        for (size_t at = 0; at < std::max(mine.size(), theirs.size()); at += kPiece) {
            const int out = (int)(at < mine.size() ? std::min(kPiece, mine.size() - at) : 0);
            const int in = (int)(at < theirs.size() ? std::min(kPiece, theirs.size() - at) : 0);
            MPI_Sendrecv(mine.data() + (out ? at : 0), out, MPI_BYTE, next, 2, theirs.data() + (in ? at : 0), in,
                         MPI_BYTE, previous, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        return theirs;
    }

    [[noreturn]] void abort_all(int status) override {
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, status);
        exit(status);
    }

    std::string description() const override {
        return strprintf("%d ranks on %d node(s) over MPI (this is rank %d, local rank %d of %d)",
                         num_ranks, nodes_, rank, local_rank, node_ranks);
    }

private:
    int nodes_ = 1;
};

}  // namespace

bool launched_by_mpi() {
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
        if (getenv(name)) return true;
    return false;
}

std::unique_ptr<RankGroup> make_mpi_rank_group() { return std::make_unique<MpiRankGroup>(); }

ncclComm_t make_nccl_communicator(const RankGroup& group) {
    request_implicit_launch_order();  // before NCCL reads its environment
    ncclUniqueId id;
    ncclResult_t status = ncclSuccess;
    if (group.rank == 0) status = ncclGetUniqueId(&id);
    int ok = status == ncclSuccess, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) fail("NCCL could not create its unique id on rank 0: %s", ncclGetErrorString(status));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm = nullptr;
    status = ncclCommInitRank(&comm, group.num_ranks, id, group.rank);
    ok = status == ncclSuccess;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok)
        fail("NCCL could not start its communicator over %d ranks (rank %d: %s); see NCCL_DEBUG=INFO",
             group.num_ranks, group.rank, ncclGetErrorString(status));
    return comm;
}
