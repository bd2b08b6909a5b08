// Tests of the NCCL stand-in (emu/nccl_host.cpp), run by test_nccl.sh under mpirun -np 2 and -np 4.
// Every process knows every rank's input (a hash of rank, test and index), so it computes each
// expected result itself, in double precision, and compares its own output. It also checks that all
// ranks hold bitwise identical results. Every op, fp32 and bf16, sum and avg, in place and out of
// place, groups, two communicators side by side, splits, max, send and receive, and refused arguments. Rank 0 prints one
// "PASS name" / "FAIL name: why" line per test for the whole job.
#include <mpi.h>
#include <nccl.h>

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

int g_rank = 0, g_size = 1, g_failures = 0;
ncclComm_t g_comm = nullptr;

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
    char text[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(text, sizeof text, fmt, args);
    va_end(args);
    return text;
}

// The first failed expectation of the running test on this rank ("" while none).
std::string g_failure;
#define EXPECT(cond, ...)                                                           \
    do {                                                                            \
        if (!(cond) && g_failure.empty()) g_failure = format(__VA_ARGS__);          \
    } while (0)

// Runs one test on every rank; rank 0 prints its result for the whole job, with the first failing
// rank's message.
void run(const char* name, void (*test)()) {
    g_failure.clear();
    test();
    int mine = g_failure.empty() ? g_size : g_rank, first = 0;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    std::string message = g_failure;
    if (first != g_size && first != 0) {
        char buffer[512] = "";
        if (g_rank == first) {
            snprintf(buffer, sizeof buffer, "%s", g_failure.c_str());
            MPI_Send(buffer, sizeof buffer, MPI_CHAR, 0, 7, MPI_COMM_WORLD);
        } else if (g_rank == 0) {
            MPI_Recv(buffer, sizeof buffer, MPI_CHAR, first, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            message = buffer;
        }
    }
    if (first != g_size) g_failures++;
    if (g_rank == 0) {
        if (first == g_size)
            printf("PASS nccl_np%d_%s\n", g_size, name);
        else
            printf("FAIL nccl_np%d_%s: rank %d: %s\n", g_size, name, first, message.c_str());
        fflush(stdout);
    }
}

// Rank q's input element i for test `seed`: a hash mapped to [-1, 1).
float input_value(int seed, int q, size_t i) {
    uint64_t x = (uint64_t)seed * 0x9E3779B97F4A7C15ull ^ (uint64_t)q << 40 ^ i;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 32;
    return (float)((double)(x & 0xFFFFFF) / (1 << 23) - 1.0);
}

// A buffer of fp32 or bf16 elements.
struct Buffer {
    ncclDataType_t type;
    std::vector<unsigned char> bytes;
    Buffer(ncclDataType_t t, size_t n) : type(t), bytes(n * (t == ncclFloat32 ? 4 : 2), 0xFF) {}
    size_t size() const { return bytes.size() / (type == ncclFloat32 ? 4 : 2); }
    void* data() { return bytes.data(); }
    double get(size_t i) const {
        if (type == ncclFloat32) return reinterpret_cast<const float*>(bytes.data())[i];
        return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(bytes.data())[i]);
    }
    void set(size_t i, float v) {
        if (type == ncclFloat32)
            reinterpret_cast<float*>(bytes.data())[i] = v;
        else
            reinterpret_cast<__nv_bfloat16*>(bytes.data())[i] = __float2bfloat16(v);
    }
};

// What rank q holds: input_value rounded to the type, exactly as set() stores it.
double stored_input(ncclDataType_t type, int seed, int q, size_t i) {
    float v = input_value(seed, q, i);
    return type == ncclFloat32 ? v : __bfloat162float(__float2bfloat16(v));
}

void fill_input(Buffer& b, int seed, int q) {
    for (size_t i = 0; i < b.size(); i++) b.set(i, input_value(seed, q, i));
}

// Expected reduction over `ranks` (world ranks q with this member's inputs) of element i.
struct Expected {
    double value, magnitude;
};
Expected reduce_reference(ncclDataType_t type, int seed, const std::vector<int>& ranks, size_t i, ncclRedOp_t op) {
    double sum = 0, magnitude = 0;
    for (int q : ranks) {
        double v = stored_input(type, seed, q, i);
        sum += v;
        magnitude += std::fabs(v);
    }
    if (op == ncclAvg) sum /= (double)ranks.size(), magnitude /= (double)ranks.size();
    return {sum, magnitude};
}

// fp32: a few fp32 additions. bf16: those plus one rounding to 8 significant bits.
bool close_enough(ncclDataType_t type, double got, Expected e) {
    double tol = 1e-6 * e.magnitude + (type == ncclBfloat16 ? 4e-3 * std::fabs(e.value) : 0) + 1e-30;
    return std::fabs(got - e.value) <= tol;
}

std::vector<int> all_ranks() {
    std::vector<int> r;
    for (int q = 0; q < g_size; q++) r.push_back(q);
    return r;
}

// True when every rank of `comm` holds the same bytes as its rank 0.
bool identical_on_all_ranks(const Buffer& b, MPI_Comm comm) {
    std::vector<unsigned char> root = b.bytes;
    MPI_Bcast(root.data(), (int)root.size(), MPI_BYTE, 0, comm);
    int same = root == b.bytes, all_same = 0;
    MPI_Allreduce(&same, &all_same, 1, MPI_INT, MPI_MIN, comm);
    return all_same;
}

const char* type_label(ncclDataType_t t) { return t == ncclFloat32 ? "f32" : "bf16"; }

void check_ok(ncclResult_t r, const char* what) { EXPECT(r == ncclSuccess, "%s returned %d (%s)", what, (int)r, ncclGetErrorString(r)); }

// --- the tests

void test_count_and_rank() {
    int count = -1, rank = -1;
    check_ok(ncclCommCount(g_comm, &count), "ncclCommCount");
    check_ok(ncclCommUserRank(g_comm, &rank), "ncclCommUserRank");
    EXPECT(count == g_size && rank == g_rank, "count %d rank %d, expected %d %d", count, rank, g_size, g_rank);
}

void all_reduce_case(ncclDataType_t type, ncclRedOp_t op, bool in_place, size_t count, int seed) {
    Buffer send(type, count), recv(type, count);
    fill_input(send, seed, g_rank);
    Buffer& out = in_place ? send : recv;
    check_ok(ncclAllReduce(send.data(), out.data(), count, type, op, g_comm, nullptr), "ncclAllReduce");
    for (size_t i = 0; i < count; i++) {
        Expected e = reduce_reference(type, seed, all_ranks(), i, op);
        EXPECT(close_enough(type, out.get(i), e), "%s %s %s count %zu: element %zu is %.9g, expected %.9g",
               type_label(type), op == ncclSum ? "sum" : "avg", in_place ? "in place" : "out of place", count, i,
               out.get(i), e.value);
    }
    EXPECT(identical_on_all_ranks(out, MPI_COMM_WORLD), "all-reduce results differ between ranks");
}

void test_all_reduce() {
    int seed = 1;
    for (ncclDataType_t type : {ncclFloat32, ncclBfloat16})
        for (ncclRedOp_t op : {ncclSum, ncclAvg})
            for (bool in_place : {false, true})
                for (size_t count : {size_t(1), size_t(3), size_t(10007)}) all_reduce_case(type, op, in_place, count, seed++);
}

// More elements per rank than the stand-in moves per MPI call (2^16), so its chunked paths run.
void test_all_reduce_large() { all_reduce_case(ncclFloat32, ncclSum, true, (size_t(1) << 16) * g_size + 7, 99); }

void test_reduce_scatter() {
    int seed = 100;
    const size_t recvcount = 4099;
    for (ncclDataType_t type : {ncclFloat32, ncclBfloat16})
        for (ncclRedOp_t op : {ncclSum, ncclAvg})
            for (bool in_place : {false, true}) {
                seed++;
                Buffer send(type, recvcount * g_size), recv(type, recvcount);
                fill_input(send, seed, g_rank);
                // In place: recvbuff = sendbuff + rank * recvcount, as NCCL defines it.
                unsigned char* out = in_place ? send.bytes.data() + g_rank * recvcount * (send.bytes.size() / send.size())
                                              : recv.bytes.data();
                check_ok(ncclReduceScatter(send.data(), out, recvcount, type, op, g_comm, nullptr), "ncclReduceScatter");
                Buffer result(type, recvcount);
                memcpy(result.data(), out, result.bytes.size());
                for (size_t i = 0; i < recvcount; i++) {
                    Expected e = reduce_reference(type, seed, all_ranks(), g_rank * recvcount + i, op);
                    EXPECT(close_enough(type, result.get(i), e), "%s %s %s: element %zu is %.9g, expected %.9g",
                           type_label(type), op == ncclSum ? "sum" : "avg", in_place ? "in place" : "out of place", i,
                           result.get(i), e.value);
                }
            }
}

void test_all_gather() {
    int seed = 200;
    const size_t sendcount = 5003;
    for (ncclDataType_t type : {ncclFloat32, ncclBfloat16})
        for (bool in_place : {false, true}) {
            seed++;
            Buffer send(type, sendcount), recv(type, sendcount * g_size);
            fill_input(send, seed, g_rank);
            const void* source = send.data();
            if (in_place) {  // sendbuff = recvbuff + rank * sendcount
                memcpy(recv.bytes.data() + g_rank * send.bytes.size(), send.data(), send.bytes.size());
                source = recv.bytes.data() + g_rank * send.bytes.size();
            }
            check_ok(ncclAllGather(source, recv.data(), sendcount, type, g_comm, nullptr), "ncclAllGather");
            for (int q = 0; q < g_size; q++)
                for (size_t i = 0; i < sendcount; i++) {
                    double expected = stored_input(type, seed, q, i);
                    EXPECT(recv.get(q * sendcount + i) == expected, "%s %s: rank %d's element %zu is %.9g, expected %.9g",
                           type_label(type), in_place ? "in place" : "out of place", q, i,
                           recv.get(q * sendcount + i), expected);
                }
        }
}

void test_broadcast() {
    int seed = 300;
    const size_t count = 3001;
    const int root = g_size - 1;
    for (ncclDataType_t type : {ncclFloat32, ncclBfloat16})
        for (bool in_place : {false, true}) {
            seed++;
            Buffer send(type, count), recv(type, count);
            fill_input(send, seed, g_rank);  // only the root's content may arrive
            if (in_place)
                check_ok(ncclBcast(send.data(), count, type, root, g_comm, nullptr), "ncclBcast");
            else
                check_ok(ncclBroadcast(send.data(), recv.data(), count, type, root, g_comm, nullptr), "ncclBroadcast");
            Buffer& out = in_place ? send : recv;
            for (size_t i = 0; i < count; i++)
                EXPECT(out.get(i) == stored_input(type, seed, root, i), "%s %s: element %zu is %.9g, expected %.9g",
                       type_label(type), in_place ? "in place" : "out of place", i, out.get(i),
                       stored_input(type, seed, root, i));
        }
}

// Three different collectives inside one group, then each result checked.
void test_group() {
    const size_t n_ar = 777, n_rs = 301, n_ag = 129;
    Buffer ar(ncclFloat32, n_ar), rs_send(ncclBfloat16, n_rs * g_size), rs_recv(ncclBfloat16, n_rs),
        ag_send(ncclFloat32, n_ag), ag_recv(ncclFloat32, n_ag * g_size);
    fill_input(ar, 401, g_rank);
    fill_input(rs_send, 402, g_rank);
    fill_input(ag_send, 403, g_rank);
    check_ok(ncclGroupStart(), "ncclGroupStart");
    check_ok(ncclAllReduce(ar.data(), ar.data(), n_ar, ncclFloat32, ncclAvg, g_comm, nullptr), "ncclAllReduce");
    check_ok(ncclReduceScatter(rs_send.data(), rs_recv.data(), n_rs, ncclBfloat16, ncclSum, g_comm, nullptr),
             "ncclReduceScatter");
    check_ok(ncclAllGather(ag_send.data(), ag_recv.data(), n_ag, ncclFloat32, g_comm, nullptr), "ncclAllGather");
    check_ok(ncclGroupEnd(), "ncclGroupEnd");
    for (size_t i = 0; i < n_ar; i++) {
        Expected e = reduce_reference(ncclFloat32, 401, all_ranks(), i, ncclAvg);
        EXPECT(close_enough(ncclFloat32, ar.get(i), e), "all-reduce element %zu is %.9g, expected %.9g", i, ar.get(i), e.value);
    }
    for (size_t i = 0; i < n_rs; i++) {
        Expected e = reduce_reference(ncclBfloat16, 402, all_ranks(), g_rank * n_rs + i, ncclSum);
        EXPECT(close_enough(ncclBfloat16, rs_recv.get(i), e), "reduce-scatter element %zu is %.9g, expected %.9g", i,
               rs_recv.get(i), e.value);
    }
    for (size_t i = 0; i < n_ag * g_size; i++)
        EXPECT(ag_recv.get(i) == stored_input(ncclFloat32, 403, (int)(i / n_ag), i % n_ag), "all-gather element %zu", i);
}

// Even and odd world ranks form two communicators from two ids; each all-reduce stays within its own.
void test_two_communicators() {
    const int parity = g_rank % 2;
    ncclUniqueId ids[2];
    for (int p = 0; p < 2 && p < g_size; p++) {
        if (g_rank == p) check_ok(ncclGetUniqueId(&ids[p]), "ncclGetUniqueId");
        MPI_Bcast(&ids[p], sizeof ids[p], MPI_BYTE, p, MPI_COMM_WORLD);
    }
    std::vector<int> members;
    for (int q = parity; q < g_size; q += 2) members.push_back(q);
    ncclComm_t sub = nullptr;
    check_ok(ncclCommInitRank(&sub, (int)members.size(), ids[parity], g_rank / 2), "ncclCommInitRank");
    if (!sub) return;
    int count = 0, rank = 0;
    ncclCommCount(sub, &count);
    ncclCommUserRank(sub, &rank);
    EXPECT(count == (int)members.size() && rank == g_rank / 2, "sub-communicator size %d rank %d", count, rank);
    const size_t n = 513;
    Buffer buf(ncclFloat32, n);
    fill_input(buf, 500, g_rank);
    check_ok(ncclAllReduce(buf.data(), buf.data(), n, ncclFloat32, ncclSum, sub, nullptr), "ncclAllReduce");
    for (size_t i = 0; i < n; i++) {
        Expected e = reduce_reference(ncclFloat32, 500, members, i, ncclSum);
        EXPECT(close_enough(ncclFloat32, buf.get(i), e), "element %zu is %.9g, expected %.9g (parity %d)", i,
               buf.get(i), e.value, parity);
    }
    check_ok(ncclCommDestroy(sub), "ncclCommDestroy");
}

// ncclMax: the elementwise maximum over ranks, exact.
void test_all_reduce_max() {
    for (ncclDataType_t type : {ncclFloat32, ncclBfloat16}) {
        const size_t n = 2049;
        Buffer buf(type, n);
        fill_input(buf, 700, g_rank);
        check_ok(ncclAllReduce(buf.data(), buf.data(), n, type, ncclMax, g_comm, nullptr), "ncclAllReduce max");
        for (size_t i = 0; i < n; i++) {
            double expected = -INFINITY;
            for (int q = 0; q < g_size; q++) expected = std::fmax(expected, stored_input(type, 700, q, i));
            EXPECT(buf.get(i) == expected, "%s max element %zu is %.9g, expected %.9g", type_label(type), i,
                   buf.get(i), expected);
        }
    }
}

// ncclCommSplit: ranks of the same parity form one communicator, ordered by a key that reverses world
// order; the last rank passes NCCL_SPLIT_NOCOLOR (with 4 ranks) and gets none. An all-reduce in each
// stays within it.
void test_split() {
    const bool left_out = g_size == 4 && g_rank == 3;
    ncclComm_t sub = nullptr;
    check_ok(ncclCommSplit(g_comm, left_out ? NCCL_SPLIT_NOCOLOR : g_rank % 2, g_size - g_rank, &sub, nullptr),
             "ncclCommSplit");
    if (left_out) {
        EXPECT(sub == nullptr, "NCCL_SPLIT_NOCOLOR returned a communicator");
        return;
    }
    std::vector<int> members;  // in the new communicator's rank order: descending world rank
    for (int q = g_size - 1; q >= 0; q--)
        if (q % 2 == g_rank % 2 && !(g_size == 4 && q == 3)) members.push_back(q);
    int count = 0, rank = -1;
    ncclCommCount(sub, &count);
    ncclCommUserRank(sub, &rank);
    EXPECT(count == (int)members.size() && members[rank] == g_rank, "split: size %d rank %d", count, rank);
    const size_t n = 300;
    Buffer buf(ncclFloat32, n);
    fill_input(buf, 800, g_rank);
    check_ok(ncclAllReduce(buf.data(), buf.data(), n, ncclFloat32, ncclSum, sub, nullptr), "ncclAllReduce");
    for (size_t i = 0; i < n; i++)
        EXPECT(close_enough(ncclFloat32, buf.get(i), reduce_reference(ncclFloat32, 800, members, i, ncclSum)),
               "split all-reduce element %zu is %.9g", i, buf.get(i));
    check_ok(ncclCommDestroy(sub), "ncclCommDestroy");
}

// Send and receive: in a group every rank sends to the next and receives from the previous at once
// (a ring, more than one MPI piece long); outside a group, pairs exchange in an order that cannot
// deadlock (the lower rank sends first).
void test_send_recv() {
    if (g_size == 1) return;
    const size_t n = (size_t(1) << 15) + 11;  // bf16: more bytes than one piece of the stand-in
    const int next = (g_rank + 1) % g_size, previous = (g_rank + g_size - 1) % g_size;
    Buffer out(ncclBfloat16, n), in(ncclBfloat16, n);
    fill_input(out, 900, g_rank);
    check_ok(ncclGroupStart(), "ncclGroupStart");
    check_ok(ncclSend(out.data(), n, ncclBfloat16, next, g_comm, nullptr), "ncclSend");
    check_ok(ncclRecv(in.data(), n, ncclBfloat16, previous, g_comm, nullptr), "ncclRecv");
    check_ok(ncclGroupEnd(), "ncclGroupEnd");
    for (size_t i = 0; i < n; i++)
        EXPECT(in.get(i) == stored_input(ncclBfloat16, 900, previous, i), "ring: element %zu from rank %d", i,
               previous);
    const int partner = g_rank ^ 1;
    if (partner >= g_size) return;
    Buffer a(ncclFloat32, 77), b(ncclFloat32, 77);
    fill_input(a, 901, g_rank);
    if (g_rank < partner) {
        check_ok(ncclSend(a.data(), 77, ncclFloat32, partner, g_comm, nullptr), "ncclSend");
        check_ok(ncclRecv(b.data(), 77, ncclFloat32, partner, g_comm, nullptr), "ncclRecv");
    } else {
        check_ok(ncclRecv(b.data(), 77, ncclFloat32, partner, g_comm, nullptr), "ncclRecv");
        check_ok(ncclSend(a.data(), 77, ncclFloat32, partner, g_comm, nullptr), "ncclSend");
    }
    for (size_t i = 0; i < 77; i++)
        EXPECT(b.get(i) == stored_input(ncclFloat32, 901, partner, i), "pair: element %zu from rank %d", i, partner);
    EXPECT(ncclSend(a.data(), 77, ncclFloat32, g_rank, g_comm, nullptr) == ncclInvalidArgument,
           "a send to itself was accepted");
}

// Unsupported types and reductions, a group end without start, and an impossible nranks are refused
// on every rank alike (no rank is left waiting in a collective).
void test_refusals() {
    Buffer buf(ncclFloat32, 8);
    fill_input(buf, 600, g_rank);
    EXPECT(ncclAllReduce(buf.data(), buf.data(), 8, ncclInt8, ncclSum, g_comm, nullptr) == ncclInvalidArgument,
           "ncclInt8 accepted");
    EXPECT(ncclAllReduce(buf.data(), buf.data(), 8, ncclFloat32, ncclProd, g_comm, nullptr) == ncclInvalidArgument,
           "ncclProd accepted");
    EXPECT(ncclAllReduce(buf.data(), buf.data(), 8, ncclFloat32, ncclSum, nullptr, nullptr) == ncclInvalidArgument,
           "null communicator accepted");
    EXPECT(ncclGroupEnd() == ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart accepted");
    EXPECT(strcmp(ncclGetErrorString(ncclSuccess), ncclGetErrorString(ncclInvalidArgument)) != 0,
           "error strings do not distinguish results");
    ncclUniqueId id;
    if (g_rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t bad = nullptr;
    EXPECT(ncclCommInitRank(&bad, g_size + 1, id, g_rank) == ncclInvalidArgument, "nranks = size + 1 accepted");
    EXPECT(bad == nullptr, "a communicator was returned for a refused init");
    // The communicator still works after the refusals.
    check_ok(ncclAllReduce(buf.data(), buf.data(), 8, ncclFloat32, ncclSum, g_comm, nullptr), "ncclAllReduce");
    EXPECT(close_enough(ncclFloat32, buf.get(5), reduce_reference(ncclFloat32, 600, all_ranks(), 5, ncclSum)),
           "all-reduce after refusals is wrong");
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);

    // As a trainer does it: rank 0 makes the id, MPI carries it to the others.
    ncclUniqueId id;
    if (g_rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (ncclCommInitRank(&g_comm, g_size, id, g_rank) != ncclSuccess) {
        fprintf(stderr, "FAIL nccl_np%d_init: ncclCommInitRank failed on rank %d\n", g_size, g_rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    run("count_and_rank", test_count_and_rank);
    run("all_reduce", test_all_reduce);
    run("all_reduce_large", test_all_reduce_large);
    run("reduce_scatter", test_reduce_scatter);
    run("all_gather", test_all_gather);
    run("broadcast", test_broadcast);
    run("group", test_group);
    run("two_communicators", test_two_communicators);
    run("all_reduce_max", test_all_reduce_max);
    run("split", test_split);
    run("send_recv", test_send_recv);
    run("refusals", test_refusals);

    ncclCommDestroy(g_comm);
    MPI_Finalize();
    return g_failures ? 1 : 0;
}
