// kernels/attention_hopper.h: the Hopper (TMA + mbarrier + wgmma, warp-specialised) attention
// forward and backward against the fp32 CPU reference (cpu/attention.h) and lse in double, at odd shapes
// (T = 37, 50, 1000; HS = 64 and 128; NH = 3), fresh random inputs, outputs poisoned first; two runs,
// and the forward with and without its softmax/MMA overlap, must give identical bits. bf16 build only
// (the kernels are bf16); on a GPU, sm_90 only.
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/attention.h"
#include "kernels/attention_hopper.h"
#include "test/kernels/kernel_test.h"

namespace {

struct Shape {
    int B, T, NH, HS;
    int C() const { return NH * HS; }
    size_t qkv_size() const { return (size_t)B * T * 3 * C(); }
    size_t out_size() const { return (size_t)B * T * C(); }
    size_t lse_size() const { return (size_t)B * NH * T; }
};

#ifndef ENABLE_FP32
void run_backward(const Shape& s, const floatX* d_qkv, const floatX* d_dout, std::vector<float>& dqkv) {
    floatX* d_out = device_poisoned<floatX>(s.out_size());
    float* d_lse = device_poisoned<float>(s.lse_size());
    floatX* d_dqkv = device_poisoned<floatX>(s.qkv_size());
    void* d_scratch = device_poisoned<unsigned char>(attention_backward_scratch_bytes(s.B, s.T, s.NH, s.HS));
    if (s.HS == 64) {
        attention_forward_hopper<64>(d_out, d_lse, d_qkv, s.B, s.T, s.NH, 0);
        attention_backward_hopper<64>(d_dqkv, d_scratch, d_dout, d_out, d_lse, d_qkv, s.B, s.T, s.NH, 0);
    } else {
        attention_forward_hopper<128>(d_out, d_lse, d_qkv, s.B, s.T, s.NH, 0);
        attention_backward_hopper<128>(d_dqkv, d_scratch, d_dout, d_out, d_lse, d_qkv, s.B, s.T, s.NH, 0);
    }
    CUDA_CHECK(cudaGetLastError());
    dqkv = host_floats_of(d_dqkv, s.qkv_size());
    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(d_lse));
    CUDA_CHECK(cudaFree(d_dqkv));
    CUDA_CHECK(cudaFree(d_scratch));
}

// dq, dk, dv against cpu/attention.h's backward (att from its forward); two runs identical bits.
void check_backward(const Shape& s, unsigned seed) {
    const std::vector<float> qkv = round_to_floatX(random_floats(s.qkv_size(), seed, -2.0f, 2.0f));
    const std::vector<float> dout = round_to_floatX(random_floats(s.out_size(), seed + 1));
    floatX* d_qkv = device_floatX(qkv);
    floatX* d_dout = device_floatX(dout);
    std::vector<float> got, again;
    run_backward(s, d_qkv, d_dout, got);
    run_backward(s, d_qkv, d_dout, again);
    CUDA_CHECK(cudaFree(d_qkv));
    CUDA_CHECK(cudaFree(d_dout));
    std::vector<float> ref_out(s.out_size()), att((size_t)s.B * s.NH * s.T * s.T), ref(s.qkv_size(), 0.0f);
    attention_forward(ref_out.data(), att.data(), qkv.data(), s.B, s.T, s.C(), s.NH);
    attention_backward(ref.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.C(), s.NH);
    const int C = s.C();
    for (int part = 0; part < 3; part++) {
        std::vector<float> g, r;
        for (size_t row = 0; row < (size_t)s.B * s.T; row++)
            for (int c = 0; c < C; c++) {
                g.push_back(got[row * 3 * C + part * C + c]);
                r.push_back(ref[row * 3 * C + part * C + c]);
            }
        char what[96];
        snprintf(what, sizeof what, "B=%d T=%d NH=%d HS=%d %s", s.B, s.T, s.NH, s.HS, part == 0 ? "dq" : part == 1 ? "dk" : "dv");
        CHECK_CLOSE(g, r, KERNEL_TOLERANCE, what);
        printf("  hopper backward %s: rel err %.2e\n", what, tst::rel_l2_error(g.data(), r.data(), r.size()));
    }
    CHECK_MSG(bitwise_equal(got.data(), again.data(), got.size() * sizeof(float)), "two backward runs differ (T=%d HS=%d)",
              s.T, s.HS);
}

// overlap false: the kernel without the softmax/MMA overlap (the same arithmetic, another schedule).
void run_forward(const Shape& s, const floatX* d_qkv, std::vector<float>& out, std::vector<float>& lse,
                 bool overlap = true) {
    floatX* d_out = device_poisoned<floatX>(s.out_size());
    float* d_lse = device_poisoned<float>(s.lse_size());
    if (s.HS == 64 && overlap) attention_forward_hopper<64, true>(d_out, d_lse, d_qkv, s.B, s.T, s.NH, 0);
    if (s.HS == 64 && !overlap) attention_forward_hopper<64, false>(d_out, d_lse, d_qkv, s.B, s.T, s.NH, 0);
    if (s.HS == 128 && overlap) attention_forward_hopper<128, true>(d_out, d_lse, d_qkv, s.B, s.T, s.NH, 0);
    if (s.HS == 128 && !overlap) attention_forward_hopper<128, false>(d_out, d_lse, d_qkv, s.B, s.T, s.NH, 0);
    CUDA_CHECK(cudaGetLastError());
    out = host_floats_of(d_out, s.out_size());
    lse = host_copy_of(d_lse, s.lse_size());
    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(d_lse));
}

void check_forward(const Shape& s, unsigned seed) {
    const std::vector<float> qkv = round_to_floatX(random_floats(s.qkv_size(), seed, -2.0f, 2.0f));
    floatX* d_qkv = device_floatX(qkv);
    std::vector<float> out, lse, out2, lse2, out3, lse3;
    run_forward(s, d_qkv, out, lse);
    run_forward(s, d_qkv, out2, lse2);
    run_forward(s, d_qkv, out3, lse3, false);
    CUDA_CHECK(cudaFree(d_qkv));

    std::vector<float> ref_out(s.out_size()), att((size_t)s.B * s.NH * s.T * s.T);
    attention_forward(ref_out.data(), att.data(), qkv.data(), s.B, s.T, s.C(), s.NH);
    std::vector<float> ref_lse(s.lse_size());
    const double scale = 1.0 / std::sqrt((double)s.HS);
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < s.NH; h++)
            for (int t = 0; t < s.T; t++) {
                const float* q = &qkv[attention_qkv_index(b, t, 0, h, s.T, s.NH, s.HS)];
                std::vector<double> sc(t + 1);
                double m = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const float* k = &qkv[attention_qkv_index(b, j, 1, h, s.T, s.NH, s.HS)];
                    double dot = 0;
                    for (int d = 0; d < s.HS; d++) dot += (double)q[d] * k[d];
                    sc[j] = scale * dot;
                    m = std::max(m, sc[j]);
                }
                for (int j = 0; j <= t; j++) sum += std::exp(sc[j] - m);
                ref_lse[attention_lse_index(b, h, t, s.T, s.NH)] = (float)(m + std::log(sum));
            }
    char what[96];
    snprintf(what, sizeof what, "B=%d T=%d NH=%d HS=%d out", s.B, s.T, s.NH, s.HS);
    CHECK_CLOSE(out, ref_out, KERNEL_TOLERANCE, what);
    const double err = tst::rel_l2_error(out.data(), ref_out.data(), ref_out.size());
    snprintf(what, sizeof what, "B=%d T=%d NH=%d HS=%d lse", s.B, s.T, s.NH, s.HS);
    CHECK_CLOSE(lse, ref_lse, 1e-4, what);
    printf("  hopper forward B=%d T=%d NH=%d HS=%d: out rel err %.2e, lse rel err %.2e\n", s.B, s.T, s.NH, s.HS, err,
           tst::rel_l2_error(lse.data(), ref_lse.data(), ref_lse.size()));
    CHECK_MSG(bitwise_equal(out.data(), out2.data(), out.size() * sizeof(float)) &&
                  bitwise_equal(lse.data(), lse2.data(), lse.size() * sizeof(float)),
              "two runs differ (B=%d T=%d HS=%d)", s.B, s.T, s.HS);
    CHECK_MSG(bitwise_equal(out.data(), out3.data(), out.size() * sizeof(float)) &&
                  bitwise_equal(lse.data(), lse3.data(), lse.size() * sizeof(float)),
              "with and without the softmax/MMA overlap differ (B=%d T=%d HS=%d)", s.B, s.T, s.HS);
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
    check_forward({1, 130, 3, 64}, 13);  // a second query block, a partial third key tile
#endif
}

TEST(hopper_forward_long_sequence) {
    skip_unless_runnable();
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
#ifndef ENABLE_FP32
    check_backward({1, 1000, 3, 64}, 24);
    check_backward({1, 1000, 3, 128}, 25);
#endif
}

#if !defined(__CUDACC__) && !defined(ENABLE_FP32)
// Emulator only: every barrier phase's threads in a shuffled order (what EMU_SHUFFLE does) must
// give the same bits as thread order — a missing wait, fence or arrival would show as a difference,
// a NaN or a reported deadlock. (run_backward runs the forward first.)
TEST(hopper_shuffled_thread_order_gives_the_same_bits) {
    for (const Shape& s : {Shape{1, 200, 3, 64}, Shape{1, 130, 2, 128}}) {
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
                  "HS=%d: shuffled thread order changed the gradients", s.HS);
        CHECK_MSG(bitwise_equal(out.data(), shuffled_out.data(), out.size() * sizeof(float)) &&
                      bitwise_equal(lse.data(), shuffled_lse.data(), lse.size() * sizeof(float)),
                  "HS=%d: shuffled thread order changed the forward", s.HS);
        CUDA_CHECK(cudaFree(d_qkv));
        CUDA_CHECK(cudaFree(d_dout));
    }
}
#endif

}  // namespace
