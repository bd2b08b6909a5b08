// kernels/attention_hopper.h: the Hopper (TMA + mbarrier + wgmma, warp-specialised) attention
// forward and backward against the fp32 CPU reference (cpu/attention.h) and lse in double, at odd shapes
// (T = 37, 50, 1000; HS = 64 and 128; NH = 3), fresh random inputs, outputs poisoned first; two runs
// must give identical bits. The forward runs as shipped (128-key tiles) and as the ladder's 64-key
// versions, each against the reference; the 64-key one with and without its softmax/MMA overlap
// must give identical bits. Grouped-query
// attention (KV < NH key/value heads, qkv (B, T, (NH + 2·KV)·HS)): out, lse and dqkv against
// cpu/gqa_attention.h and against the mma kernel (kernels/attention_tensor_cores.h), two runs
// identical, at NH = 4 on KV = 2 and 1 and NH = 8 on KV = 2, T past one tile and not a multiple of
// it. bf16 build only (the kernels are bf16); on a GPU, sm_90 only.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention_hopper.h"
#include "kernels/attention_tensor_cores.h"
#include "test/kernels/attention_reference.h"
#include "test/kernels/kernel_test.h"

namespace {

struct Shape {
    int B, T, NH, HS;
    int KV = 0;  // key/value heads; 0: as many as query heads
    int kv() const { return KV ? KV : NH; }
    int C() const { return NH * HS; }
    size_t qkv_size() const { return (size_t)B * T * (NH + 2 * kv()) * HS; }
    size_t out_size() const { return (size_t)B * T * C(); }
    size_t lse_size() const { return (size_t)B * NH * T; }
};

#ifndef ENABLE_FP32
// "B=.. T=.. NH=.. [KV=..] HS=.."
std::string shape_name(const Shape& s) {
    char name[96];
    if (s.kv() == s.NH)
        snprintf(name, sizeof name, "B=%d T=%d NH=%d HS=%d", s.B, s.T, s.NH, s.HS);
    else
        snprintf(name, sizeof name, "B=%d T=%d NH=%d KV=%d HS=%d", s.B, s.T, s.NH, s.kv(), s.HS);
    return name;
}

// Part `part` (0 q, 1 k, 2 v) of a tensor laid out as qkv, as (B, T, heads·HS).
std::vector<float> qkv_part(const std::vector<float>& qkv, const Shape& s, int part) {
    return attention_qkv_part(qkv, s.B, s.T, s.NH, s.kv(), s.HS, part);
}

// The CPU reference (test/kernels/attention_reference.h): out and (given dout) dqkv from
// cpu/attention.h, or cpu/gqa_attention.h for grouped shapes; lse in double.
using Reference = AttentionTensors;
Reference cpu_reference(const Shape& s, const std::vector<float>& qkv, const std::vector<float>* dout) {
    return attention_cpu_reference(qkv, dout, s.B, s.T, s.NH, s.kv(), s.HS);
}

// pipelined false: the ladder's backward that waits for each step's accumulation before the next
// step's products (the shipped one issues them behind it); the same arithmetic. Both from the
// shipped forward's out and lse.
template <int HS>
void launch_forward_backward(bool pipelined, floatX* dqkv, void* scratch, floatX* out, float* lse, const floatX* qkv,
                             const floatX* dout, const Shape& s) {
    attention_forward_hopper<HS>(out, lse, qkv, s.B, s.T, s.NH, s.kv(), 0);
    if (pipelined)
        attention_backward_hopper<HS, true>(dqkv, scratch, dout, out, lse, qkv, s.B, s.T, s.NH, s.kv(), 0);
    else
        attention_backward_hopper<HS, false>(dqkv, scratch, dout, out, lse, qkv, s.B, s.T, s.NH, s.kv(), 0);
}
void run_backward(const Shape& s, const floatX* d_qkv, const floatX* d_dout, std::vector<float>& dqkv,
                  bool pipelined = true) {
    floatX* d_out = device_poisoned<floatX>(s.out_size());
    float* d_lse = device_poisoned<float>(s.lse_size());
    floatX* d_dqkv = device_poisoned<floatX>(s.qkv_size());
    void* d_scratch = device_poisoned<unsigned char>(attention_backward_scratch_bytes(s.B, s.T, s.NH, s.HS));
    if (s.HS == 64)
        launch_forward_backward<64>(pipelined, d_dqkv, d_scratch, d_out, d_lse, d_qkv, d_dout, s);
    else
        launch_forward_backward<128>(pipelined, d_dqkv, d_scratch, d_out, d_lse, d_qkv, d_dout, s);
    CUDA_CHECK(cudaGetLastError());
    dqkv = host_floats_of(d_dqkv, s.qkv_size());
    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(d_lse));
    CUDA_CHECK(cudaFree(d_dqkv));
    CUDA_CHECK(cudaFree(d_scratch));
}

// dq, dk and dv, each against the CPU reference's backward; two runs identical bits, and the bits
// of the backward that is not pipelined.
void check_backward(const Shape& s, unsigned seed) {
    const std::vector<float> qkv = round_to_floatX(random_floats(s.qkv_size(), seed, -2.0f, 2.0f));
    const std::vector<float> dout = round_to_floatX(random_floats(s.out_size(), seed + 1));
    floatX* d_qkv = device_floatX(qkv);
    floatX* d_dout = device_floatX(dout);
    std::vector<float> got, again, unpipelined;
    run_backward(s, d_qkv, d_dout, got);
    run_backward(s, d_qkv, d_dout, again);
    run_backward(s, d_qkv, d_dout, unpipelined, /*pipelined=*/false);
    CUDA_CHECK(cudaFree(d_qkv));
    CUDA_CHECK(cudaFree(d_dout));
    const Reference ref = cpu_reference(s, qkv, &dout);
    for (int part = 0; part < 3; part++) {
        const std::vector<float> g = qkv_part(got, s, part), r = qkv_part(ref.dqkv, s, part);
        const std::string what = shape_name(s) + (part == 0 ? " dq" : part == 1 ? " dk" : " dv");
        CHECK_CLOSE(g, r, KERNEL_TOLERANCE, what.c_str());
        printf("  hopper backward %s: rel err %.2e\n", what.c_str(), tst::rel_l2_error(g.data(), r.data(), r.size()));
    }
    CHECK_MSG(bitwise_equal(got.data(), again.data(), got.size() * sizeof(float)), "two backward runs differ (%s)",
              shape_name(s).c_str());
    CHECK_MSG(bitwise_equal(got.data(), unpipelined.data(), got.size() * sizeof(float)),
              "the pipelined and the plain backward differ (%s)", shape_name(s).c_str());
}

// Which forward: the shipped one (128-key tiles), or the ladder's 64-key tiles without or with the
// softmax/MMA overlap (the same arithmetic as each other, another schedule).
enum class Forward { Shipped, Keys64, Keys64Overlap };
template <int HS>
void launch_forward(Forward f, floatX* out, float* lse, const floatX* qkv, const Shape& s) {
    if (f == Forward::Shipped) attention_forward_hopper<HS>(out, lse, qkv, s.B, s.T, s.NH, s.kv(), 0);
    if (f == Forward::Keys64) attention_forward_hopper<HS, false, 64>(out, lse, qkv, s.B, s.T, s.NH, s.kv(), 0);
    if (f == Forward::Keys64Overlap)
        attention_forward_hopper<HS, true, 64>(out, lse, qkv, s.B, s.T, s.NH, s.kv(), 0);
}
void run_forward(const Shape& s, const floatX* d_qkv, std::vector<float>& out, std::vector<float>& lse,
                 Forward f = Forward::Shipped) {
    floatX* d_out = device_poisoned<floatX>(s.out_size());
    float* d_lse = device_poisoned<float>(s.lse_size());
    if (s.HS == 64)
        launch_forward<64>(f, d_out, d_lse, d_qkv, s);
    else
        launch_forward<128>(f, d_out, d_lse, d_qkv, s);
    CUDA_CHECK(cudaGetLastError());
    out = host_floats_of(d_out, s.out_size());
    lse = host_copy_of(d_lse, s.lse_size());
    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(d_lse));
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && bitwise_equal(a.data(), b.data(), a.size() * sizeof(float));
}

void check_forward(const Shape& s, unsigned seed) {
    const std::vector<float> qkv = round_to_floatX(random_floats(s.qkv_size(), seed, -2.0f, 2.0f));
    floatX* d_qkv = device_floatX(qkv);
    std::vector<float> out, lse, out2, lse2, out64, lse64, overlap, overlap_lse;
    run_forward(s, d_qkv, out, lse);
    run_forward(s, d_qkv, out2, lse2);
    run_forward(s, d_qkv, out64, lse64, Forward::Keys64);
    run_forward(s, d_qkv, overlap, overlap_lse, Forward::Keys64Overlap);
    CUDA_CHECK(cudaFree(d_qkv));

    const Reference ref = cpu_reference(s, qkv, nullptr);
    const std::string name = shape_name(s);
    const struct {
        const char* tiles;
        const std::vector<float>&out, &lse;
    } forwards[] = {{"128-key tiles", out, lse}, {"64-key tiles", out64, lse64}};
    for (const auto& f : forwards) {
        CHECK_CLOSE(f.out, ref.out, KERNEL_TOLERANCE, (name + " out, " + f.tiles).c_str());
        CHECK_CLOSE(f.lse, ref.lse, 1e-4, (name + " lse, " + f.tiles).c_str());
        printf("  hopper forward %s, %s: out rel err %.2e, lse rel err %.2e\n", name.c_str(), f.tiles,
               tst::rel_l2_error(f.out.data(), ref.out.data(), ref.out.size()),
               tst::rel_l2_error(f.lse.data(), ref.lse.data(), ref.lse.size()));
    }
    CHECK_MSG(same_bits(out, out2) && same_bits(lse, lse2), "two runs differ (%s)", name.c_str());
    CHECK_MSG(same_bits(out64, overlap) && same_bits(lse64, overlap_lse),
              "with and without the softmax/MMA overlap differ (%s)", name.c_str());
}

// The mma kernel (kernels/attention_tensor_cores.h, the shipped recipe) on the same inputs: out, lse
// and dqkv (its backward from its own out and lse).
Reference run_mma(const Shape& s, const floatX* d_qkv, const floatX* d_dout) {
    using namespace attention_tc;
    floatX* d_out = device_poisoned<floatX>(s.out_size());
    float* d_lse = device_poisoned<float>(s.lse_size());
    floatX* d_dqkv = device_poisoned<floatX>(s.qkv_size());
    void* d_scratch = device_poisoned<unsigned char>(attention_backward_scratch_bytes(s.B, s.T, s.NH, s.HS));
    if (s.HS == 64) {
        attention_forward_tensor_cores<64, kCpAsyncPipeline>(d_out, d_lse, d_qkv, s.B, s.T, s.NH, s.kv(), 0);
        attention_backward_tensor_cores<64, kCpAsyncPipeline>(d_dqkv, d_scratch, d_dout, d_out, d_lse, d_qkv, s.B,
                                                              s.T, s.NH, s.kv(), 0);
    } else {
        attention_forward_tensor_cores<128, kCpAsyncPipeline>(d_out, d_lse, d_qkv, s.B, s.T, s.NH, s.kv(), 0);
        attention_backward_tensor_cores<128, kCpAsyncPipeline>(d_dqkv, d_scratch, d_dout, d_out, d_lse, d_qkv, s.B,
                                                               s.T, s.NH, s.kv(), 0);
    }
    CUDA_CHECK(cudaGetLastError());
    Reference r{host_floats_of(d_out, s.out_size()), host_copy_of(d_lse, s.lse_size()),
                host_floats_of(d_dqkv, s.qkv_size())};
    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(d_lse));
    CUDA_CHECK(cudaFree(d_dqkv));
    CUDA_CHECK(cudaFree(d_scratch));
    return r;
}

// A grouped-query shape, forward and backward: out, lse and dq, dk, dv (from its own forward's out
// and lse) against cpu/gqa_attention.h and against the mma kernel; a second run gives the same bits;
// the 64-key forward against both too, and with the softmax/MMA overlap its bits.
void check_grouped(const Shape& s, unsigned seed) {
    const std::vector<float> qkv = round_to_floatX(random_floats(s.qkv_size(), seed, -2.0f, 2.0f));
    const std::vector<float> dout = round_to_floatX(random_floats(s.out_size(), seed + 1));
    floatX* d_qkv = device_floatX(qkv);
    floatX* d_dout = device_floatX(dout);
    Reference got, again, keys64, overlap;
    run_forward(s, d_qkv, got.out, got.lse);
    run_forward(s, d_qkv, again.out, again.lse);
    run_forward(s, d_qkv, keys64.out, keys64.lse, Forward::Keys64);
    run_forward(s, d_qkv, overlap.out, overlap.lse, Forward::Keys64Overlap);
    run_backward(s, d_qkv, d_dout, got.dqkv);
    run_backward(s, d_qkv, d_dout, again.dqkv);
    const Reference mma = run_mma(s, d_qkv, d_dout);
    CUDA_CHECK(cudaFree(d_qkv));
    CUDA_CHECK(cudaFree(d_dout));
    const Reference cpu = cpu_reference(s, qkv, &dout);
    const std::string name = shape_name(s);
    const struct {
        const char* name;
        const Reference& ref;
    } refs[] = {{"CPU", cpu}, {"mma", mma}};
    for (const auto& r : refs) {
        CHECK_CLOSE(got.out, r.ref.out, KERNEL_TOLERANCE, (name + " out vs " + r.name).c_str());
        CHECK_CLOSE(got.lse, r.ref.lse, 1e-4, (name + " lse vs " + r.name).c_str());
        CHECK_CLOSE(keys64.out, r.ref.out, KERNEL_TOLERANCE, (name + " out (64-key tiles) vs " + r.name).c_str());
        CHECK_CLOSE(keys64.lse, r.ref.lse, 1e-4, (name + " lse (64-key tiles) vs " + r.name).c_str());
        printf("  hopper %s vs %s: out %.2e (64-key tiles %.2e), lse %.2e", name.c_str(), r.name,
               tst::rel_l2_error(got.out.data(), r.ref.out.data(), r.ref.out.size()),
               tst::rel_l2_error(keys64.out.data(), r.ref.out.data(), r.ref.out.size()),
               tst::rel_l2_error(got.lse.data(), r.ref.lse.data(), r.ref.lse.size()));
        for (int part = 0; part < 3; part++) {
            const std::vector<float> g = qkv_part(got.dqkv, s, part), x = qkv_part(r.ref.dqkv, s, part);
            const char* tensor = part == 0 ? "dq" : part == 1 ? "dk" : "dv";
            CHECK_CLOSE(g, x, KERNEL_TOLERANCE, (name + " " + tensor + " vs " + r.name).c_str());
            printf(", %s %.2e", tensor, tst::rel_l2_error(g.data(), x.data(), x.size()));
        }
        printf("\n");
    }
    CHECK_MSG(same_bits(got.out, again.out) && same_bits(got.lse, again.lse), "two forward runs differ (%s)",
              name.c_str());
    CHECK_MSG(same_bits(keys64.out, overlap.out) && same_bits(keys64.lse, overlap.lse),
              "with and without the softmax/MMA overlap differ (%s)", name.c_str());
    CHECK_MSG(bitwise_equal(got.dqkv.data(), again.dqkv.data(), got.dqkv.size() * sizeof(float)),
              "two backward runs differ (%s)", name.c_str());
}
#endif

void skip_unless_runnable() {
#ifdef ENABLE_FP32
    SKIP("the Hopper kernels are bf16 only");
#else
    if (!hopper_units_available()) SKIP("needs an sm_90 device");
#endif
}

TEST(hopper_forward_small_odd_shapes) {
    skip_unless_runnable();
#ifndef ENABLE_FP32
    check_forward({2, 37, 3, 64}, 11);
    check_forward({2, 37, 3, 128}, 16);
    check_forward({2, 50, 3, 64}, 17);
    check_forward({2, 50, 3, 128}, 12);
    check_forward({1, 130, 3, 64}, 13);  // a second query block, a partial last key tile
    check_forward({1, 520, 1, 64}, 18);  // 5 key tiles of 128 (9 of 64): the three-stage ring wraps
#endif
}

// T = 1000 (8 query blocks of 128 rows, 8 key tiles of 128 or 16 of 64): plain builds only. What
// they add, long softmax accumulations, is no concern of the sanitizers; the short shapes (T = 130
// and 200: two query blocks, partial last tiles; T = 520 and 200: key tiles wrapping the three-stage
// ring) run the same index paths under them. These two tests took most of the sanitized program's
// 59 s.
void skip_long_sequences_under_sanitizers() {
#if defined(__SANITIZE_ADDRESS__)
    SKIP("plain build only: the sanitized build runs the same index paths at T = 130, 200 and 520");
#endif
}

TEST(hopper_forward_long_sequence) {
    skip_unless_runnable();
    skip_long_sequences_under_sanitizers();
#ifndef ENABLE_FP32
    check_forward({1, 1000, 3, 64}, 14);
    check_forward({1, 1000, 3, 128}, 15);
#endif
}

TEST(hopper_backward_odd_shapes) {
    skip_unless_runnable();
#ifndef ENABLE_FP32
    check_backward({2, 37, 3, 64}, 21);
    check_backward({2, 37, 3, 128}, 26);
    check_backward({2, 50, 3, 64}, 27);
    check_backward({2, 50, 3, 128}, 22);
    check_backward({1, 200, 3, 64}, 23);  // several key and query blocks, a partial last tile
#endif
}

TEST(hopper_backward_long_sequence) {
    skip_unless_runnable();
    skip_long_sequences_under_sanitizers();
#ifndef ENABLE_FP32
    check_backward({1, 1000, 3, 64}, 24);
    check_backward({1, 1000, 3, 128}, 25);
#endif
}

// Grouped-query attention, {B, T, NH, HS, KV}. T = 67 and 130 give the first dK/dV block two or
// three query tiles per query head (HS 64: 128 keys a block; HS 128: 64), so its ring crosses from
// one query head of the group to the next mid-stream; T = 37 one partial tile.
TEST(hopper_gqa_hs64) {
    skip_unless_runnable();
#ifndef ENABLE_FP32
    check_grouped({2, 67, 4, 64, 2}, 41);
    check_grouped({1, 130, 8, 64, 2}, 42);
#endif
}

TEST(hopper_gqa_hs128) {
    skip_unless_runnable();
#ifndef ENABLE_FP32
    check_grouped({2, 37, 4, 128, 1}, 43);
    check_grouped({1, 130, 8, 128, 2}, 44);
#endif
}

#if !defined(__CUDACC__) && !defined(ENABLE_FP32)
// Emulator only: every barrier phase's threads in a shuffled order (what EMU_SHUFFLE does) must
// give the same bits as thread order — a missing wait, fence or arrival would show as a difference,
// a NaN or a reported deadlock. (run_backward runs the forward first.) The grouped shape's dK/dV
// blocks walk two query heads of three tiles each through one ring.
TEST(hopper_shuffled_thread_order_gives_the_same_bits) {
    for (const Shape& s : {Shape{1, 200, 3, 64}, Shape{1, 130, 2, 128}, Shape{1, 130, 4, 64, 2}}) {
        const std::vector<float> qkv = round_to_floatX(random_floats(s.qkv_size(), 31, -2.0f, 2.0f));
        const std::vector<float> dout = round_to_floatX(random_floats(s.out_size(), 32));
        floatX* d_qkv = device_floatX(qkv);
        floatX* d_dout = device_floatX(dout);
        std::vector<float> plain, shuffled, out, lse, shuffled_out, shuffled_lse;
        emu::set_shuffle_seed(0);
        run_backward(s, d_qkv, d_dout, plain);
        run_forward(s, d_qkv, out, lse);
        emu::set_shuffle_seed(20261123);
        run_backward(s, d_qkv, d_dout, shuffled);
        run_forward(s, d_qkv, shuffled_out, shuffled_lse);
        const char* env = getenv("EMU_SHUFFLE");  // back to the process's setting
        emu::set_shuffle_seed(env ? strtoull(env, nullptr, 10) : 0);
        CHECK_MSG(bitwise_equal(plain.data(), shuffled.data(), plain.size() * sizeof(float)),
                  "%s: shuffled thread order changed the gradients", shape_name(s).c_str());
        CHECK_MSG(bitwise_equal(out.data(), shuffled_out.data(), out.size() * sizeof(float)) &&
                      bitwise_equal(lse.data(), shuffled_lse.data(), lse.size() * sizeof(float)),
                  "%s: shuffled thread order changed the forward", shape_name(s).c_str());
        CUDA_CHECK(cudaFree(d_qkv));
        CUDA_CHECK(cudaFree(d_dout));
    }
}
#endif

}  // namespace
