// kernels/attention.h: causal flash attention forward (out, lse) and backward (dq, dk, dv) against
// the fp32 CPU reference (cpu/attention.h) and, at T <= 128, against a naive T×T attention in
// double precision written here; fresh random inputs, outputs poisoned first; head sizes 32, 64,
// 128 (tensor cores in the bf16 build) and 80 (the CUDA-core path); T = 1, 37, 64, 257; B = 2..4;
// NH = 5 and 12. Two runs must give identical bits, backward included. Grouped-query attention
// (KV < NH key/value heads, qkv (B, T, (NH + 2·KV)·HS)) against cpu/gqa_attention.h and the naive
// attention: NH = 4 with KV = 2, NH = 3 with KV = 1, at each head size, odd T.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

#include "kernels/attention.h"
#include "test/kernels/attention_reference.h"
#include "test/kernels/kernel_test.h"

namespace {

struct Shape {
    int B, T, NH, HS;
    int KV = 0;  // key/value heads; 0: as many as query heads, through the multi-head calls
    int kv() const { return KV ? KV : NH; }
    int C() const { return NH * HS; }
    size_t qkv_size() const { return (size_t)B * T * (NH + 2 * kv()) * HS; }
    size_t out_size() const { return (size_t)B * T * C(); }
    size_t lse_size() const { return (size_t)B * NH * T; }
};

// What the kernels produce, copied back as floats.
using Results = AttentionTensors;

Results run_kernels(const Shape& s, const floatX* d_qkv, const floatX* d_dout) {
    floatX* d_out = device_poisoned<floatX>(s.out_size());
    float* d_lse = device_poisoned<float>(s.lse_size());
    floatX* d_dqkv = device_poisoned<floatX>(s.qkv_size());
    const size_t scratch_bytes = attention_backward_scratch_bytes(s.B, s.T, s.NH, s.HS);
    void* d_scratch = device_poisoned<unsigned char>(scratch_bytes);
    if (s.KV == 0) {
        attention_forward(d_out, d_lse, d_qkv, s.B, s.T, s.NH, s.HS, 0);
        CUDA_CHECK(cudaGetLastError());
        attention_backward(d_dqkv, d_scratch, d_dout, d_out, d_lse, d_qkv, s.B, s.T, s.NH, s.HS, 0);
    } else {
        attention_forward(d_out, d_lse, d_qkv, s.B, s.T, s.NH, s.KV, s.HS, 0);
        CUDA_CHECK(cudaGetLastError());
        attention_backward(d_dqkv, d_scratch, d_dout, d_out, d_lse, d_qkv, s.B, s.T, s.NH, s.KV, s.HS, 0);
    }
    CUDA_CHECK(cudaGetLastError());
    Results r{host_floats_of(d_out, s.out_size()), host_copy_of(d_lse, s.lse_size()),
              host_floats_of(d_dqkv, s.qkv_size())};
    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(d_lse));
    CUDA_CHECK(cudaFree(d_dqkv));
    CUDA_CHECK(cudaFree(d_scratch));
    return r;
}

// Part `part` (0 q, 1 k, 2 v) of a tensor laid out as qkv, as (B, T, heads·HS).
std::vector<float> qkv_part(const std::vector<float>& qkv, const Shape& s, int part) {
    return attention_qkv_part(qkv, s.B, s.T, s.NH, s.kv(), s.HS, part);
}

// The CPU reference (test/kernels/attention_reference.h): cpu/attention.h (cpu/gqa_attention.h for
// KV < NH) for out and the gradients, and lse in double.
Results cpu_reference(const Shape& s, const std::vector<float>& qkv, const std::vector<float>& dout) {
    return attention_cpu_reference(qkv, &dout, s.B, s.T, s.NH, s.kv(), s.HS);
}

// A naive T×T attention in double, straight from the formulas (no shared code with the others); the
// lambdas' h is the query head, whose key/value head they look up.
Results naive_reference(const Shape& s, const std::vector<float>& qkv, const std::vector<float>& dout) {
    const int B = s.B, T = s.T, NH = s.NH, KV = s.kv(), HS = s.HS, group = NH / KV;
    const double scale = 1.0 / std::sqrt((double)HS);
    std::vector<double> out(s.out_size(), 0.0), lse(s.lse_size(), 0.0), dqkv(s.qkv_size(), 0.0);
    auto Q = [&](int b, int t, int h, int d) {
        return (double)qkv[attention_qkv_index(b, t, 0, h, T, NH, KV, HS) + d];
    };
    auto K = [&](int b, int t, int h, int d) {
        return (double)qkv[attention_qkv_index(b, t, 1, h / group, T, NH, KV, HS) + d];
    };
    auto V = [&](int b, int t, int h, int d) {
        return (double)qkv[attention_qkv_index(b, t, 2, h / group, T, NH, KV, HS) + d];
    };
    auto dO = [&](int b, int t, int h, int d) {
        return (double)dout[attention_out_index(b, t, h, T, NH, HS) + d];
    };
    std::vector<double> P((size_t)T * T), dS((size_t)T * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < T; i++) {
                double m = -INFINITY, sum = 0;
                for (int j = 0; j <= i; j++) {
                    double dot = 0;
                    for (int d = 0; d < HS; d++) dot += Q(b, i, h, d) * K(b, j, h, d);
                    P[(size_t)i * T + j] = scale * dot;
                    m = std::max(m, scale * dot);
                }
                for (int j = 0; j <= i; j++) sum += std::exp(P[(size_t)i * T + j] - m);
                lse[attention_lse_index(b, h, i, T, NH)] = m + std::log(sum);
                for (int j = 0; j <= i; j++) P[(size_t)i * T + j] = std::exp(P[(size_t)i * T + j] - m) / sum;
                for (int d = 0; d < HS; d++) {
                    double o = 0;
                    for (int j = 0; j <= i; j++) o += P[(size_t)i * T + j] * V(b, j, h, d);
                    out[attention_out_index(b, i, h, T, NH, HS) + d] = o;
                }
            }
            for (int i = 0; i < T; i++) {
                double D = 0;
                for (int j = 0; j <= i; j++) {
                    double dp = 0;
                    for (int d = 0; d < HS; d++) dp += dO(b, i, h, d) * V(b, j, h, d);
                    dS[(size_t)i * T + j] = dp;
                    D += P[(size_t)i * T + j] * dp;
                }
                for (int j = 0; j <= i; j++)
                    dS[(size_t)i * T + j] = P[(size_t)i * T + j] * (dS[(size_t)i * T + j] - D);
            }
            for (int i = 0; i < T; i++)
                for (int j = 0; j <= i; j++) {
                    const double p = P[(size_t)i * T + j], ds = dS[(size_t)i * T + j];
                    double* dq = &dqkv[attention_qkv_index(b, i, 0, h, T, NH, KV, HS)];
                    double* dk = &dqkv[attention_qkv_index(b, j, 1, h / group, T, NH, KV, HS)];
                    double* dv = &dqkv[attention_qkv_index(b, j, 2, h / group, T, NH, KV, HS)];
                    for (int d = 0; d < HS; d++) {
                        dq[d] += scale * ds * K(b, j, h, d);
                        dk[d] += scale * ds * Q(b, i, h, d);
                        dv[d] += p * dO(b, i, h, d);
                    }
                }
        }
    auto as_floats = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
    return {as_floats(out), as_floats(lse), as_floats(dqkv)};
}

void check_against(const Results& got, const Results& ref, const char* reference, const Shape& s) {
    char what[160];
    auto name = [&](const char* tensor) {
        snprintf(what, sizeof what, "%s vs %s (B=%d T=%d NH=%d KV=%d HS=%d)", tensor, reference, s.B, s.T, s.NH,
                 s.kv(), s.HS);
        return what;
    };
    CHECK_CLOSE(got.out, ref.out, KERNEL_TOLERANCE, name("out"));
    CHECK_CLOSE(got.lse, ref.lse, KERNEL_TOLERANCE, name("lse"));
    // dq, dk and dv separately: each must be right on its own.
    for (int part = 0; part < 3; part++)
        CHECK_CLOSE(qkv_part(got.dqkv, s, part), qkv_part(ref.dqkv, s, part), KERNEL_TOLERANCE,
                    name(part == 0 ? "dq" : part == 1 ? "dk" : "dv"));
}

// Forward and backward at one shape against the references; optionally a second run for bits.
void check_shape(const Shape& s, unsigned seed, bool check_determinism = false) {
    const std::vector<float> qkv = round_to_floatX(random_floats(s.qkv_size(), seed, -2.0f, 2.0f));
    const std::vector<float> dout = round_to_floatX(random_floats(s.out_size(), seed + 1));
    floatX* d_qkv = device_floatX(qkv);
    floatX* d_dout = device_floatX(dout);
    const Results got = run_kernels(s, d_qkv, d_dout);
    check_against(got, cpu_reference(s, qkv, dout), "CPU reference", s);
    if (s.T <= 128) check_against(got, naive_reference(s, qkv, dout), "naive T*T", s);
    if (check_determinism) {
        const Results again = run_kernels(s, d_qkv, d_dout);
        CHECK(bitwise_equal(got.out.data(), again.out.data(), got.out.size() * sizeof(float)));
        CHECK(bitwise_equal(got.lse.data(), again.lse.data(), got.lse.size() * sizeof(float)));
        CHECK_MSG(bitwise_equal(got.dqkv.data(), again.dqkv.data(), got.dqkv.size() * sizeof(float)),
                  "backward differs between two runs");
    }
    CUDA_CHECK(cudaFree(d_qkv));
    CUDA_CHECK(cudaFree(d_dout));
}

// The shape grid: every B in 2..4, NH 5 and 12, HS 32/64/128, T 1/37/64/257 appears, and each head
// size meets T = 257 (several tiles, the last one partial) and a T below one tile.
TEST(attention_hs32) {
    check_shape({3, 37, 12, 32}, 101, /*check_determinism=*/true);
    check_shape({2, 257, 5, 32}, 102);
    check_shape({4, 1, 12, 32}, 103);
}
TEST(attention_hs64) {
    check_shape({2, 1, 5, 64}, 201);
    check_shape({4, 64, 12, 64}, 202);
    check_shape({4, 257, 5, 64}, 203, /*check_determinism=*/true);
}
TEST(attention_hs128) {
    check_shape({2, 64, 5, 128}, 301);
    check_shape({3, 37, 5, 128}, 302);
    check_shape({2, 257, 5, 128}, 303);
}
// A head size off the tensor-core list (GPT-3 2.7B has 80): the CUDA-core path.
TEST(attention_hs80_general_path) { check_shape({2, 37, 5, 80}, 401, /*check_determinism=*/true); }

// Grouped-query attention (Llama 3): {B, T, NH, HS, KV}. T = 67 gives each dK/dV block of the first
// key block two query tiles (three at HS 128) per query head, so the pipeline crosses from one query
// head of the group to the next mid-stream; T = 37 and 19 one partial tile.
TEST(attention_gqa_hs32) {
    check_shape({2, 67, 4, 32, 2}, 501, /*check_determinism=*/true);
    check_shape({1, 37, 3, 32, 1}, 502);
}
TEST(attention_gqa_hs64) {
    check_shape({1, 67, 3, 64, 1}, 601, /*check_determinism=*/true);
    check_shape({2, 37, 4, 64, 2}, 602);
}
TEST(attention_gqa_hs128) {
    check_shape({1, 67, 4, 128, 2}, 701);
    check_shape({1, 37, 3, 128, 1}, 702, /*check_determinism=*/true);
}
TEST(attention_gqa_hs80_general_path) { check_shape({1, 19, 4, 80, 2}, 801, /*check_determinism=*/true); }
// Grouped shapes go where their head size goes: a forced --attention-kernel hopper takes them
// (where the Hopper kernel runs: the bf16 build under the emulator or on an sm_90 GPU), through
// attention_forward and attention_backward, against the references.
TEST(attention_gqa_forced_hopper) {
    if (!attention_hopper_runnable()) SKIP("the Hopper kernel needs the bf16 build and an sm_90 GPU");
    set_attention_kernel("hopper");
    CHECK(attention_kernel_for(64) == AttentionKernel::Hopper && attention_kernel_for(128) == AttentionKernel::Hopper);
    check_shape({2, 67, 4, 64, 2}, 901, /*check_determinism=*/true);
    set_attention_kernel("auto");
}

TEST(attention_head_sizes_and_scratch) {
    CHECK(attention_supports_head_size(32) && attention_supports_head_size(64) &&
          attention_supports_head_size(128));
    CHECK(attention_supports_head_size(80) && attention_supports_head_size(256));
    CHECK(!attention_supports_head_size(0) && !attention_supports_head_size(257));
#ifdef ENABLE_FP32
    CHECK(!attention_uses_tensor_cores(64));
#else
    CHECK(attention_uses_tensor_cores(32) && attention_uses_tensor_cores(64) &&
          attention_uses_tensor_cores(128));
    CHECK(!attention_uses_tensor_cores(80));
#endif
    CHECK(attention_backward_scratch_bytes(8, 1024, 12, 64) >= (size_t)8 * 12 * 1024 * sizeof(float));
    CHECK(attention_backward_scratch_bytes(3, 37, 5, 64) % 256 == 0);
}

// Offsets past 2^32 elements, checked without allocating: B=200, T=2048, NH=48, HS=128 (C=6144).
TEST(attention_index_arithmetic_is_64_bit) {
    const int B = 200, T = 2048, NH = 48, HS = 128;
    const unsigned long long C = (unsigned long long)NH * HS;
    const unsigned long long last_v =
        ((unsigned long long)(B - 1) * T + (T - 1)) * 3 * C + 2 * C + (NH - 1) * HS;
    CHECK(last_v > (1ull << 32));
    CHECK(attention_qkv_index(B - 1, T - 1, 2, NH - 1, T, NH, HS) == last_v);
    CHECK(attention_out_index(B - 1, T - 1, NH - 1, T, NH, HS) ==
          ((unsigned long long)(B - 1) * T + (T - 1)) * C + (NH - 1) * HS);
    CHECK(attention_lse_index(B - 1, NH - 1, T - 1, T, NH) ==
          ((unsigned long long)(B - 1) * NH + NH - 1) * T + T - 1);
}

}  // namespace

#ifdef EMU_CUDA
// Every attention launch is checked: an error pending when a launch is made (here one left by an
// earlier failed call) stops the program with the CUDA error's report and status 2, in the forward and
// in the backward, rather than passing silently. Each case runs in a child process (this program, one
// test named, ATTENTION_CHECK_CHILD saying which call to make).
TEST(attention_launches_are_checked) {
    if (const char* which = getenv("ATTENTION_CHECK_CHILD")) {
        const int B = 1, T = 16, NH = 2, HS = std::string(which).find("64") != std::string::npos ? 64 : 80;
        const size_t n = (size_t)B * T * 3 * NH * HS;
        floatX* qkv = device_floatX(random_floats(n, 1));
        floatX *out = device_poisoned<floatX>(n), *dqkv = device_poisoned<floatX>(n);
        float* lse = device_poisoned<float>((size_t)B * NH * T);
        void* scratch = nullptr;
        CUDA_CHECK(cudaMalloc(&scratch, attention_backward_scratch_bytes(B, T, NH, HS)));
        const bool backward = std::string(which).find("backward") != std::string::npos;
        if (backward) attention_forward(out, lse, qkv, B, T, NH, HS, 0);
        cudaSetDevice(7);  // fails, and leaves cudaErrorInvalidDevice pending
        if (backward)
            attention_backward(dqkv, scratch, out, out, lse, qkv, B, T, NH, HS, 0);
        else
            attention_forward(out, lse, qkv, B, T, NH, HS, 0);
        exit(0);  // not reached when the launch is checked
    }
    char self[4096];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(len > 0);
    self[len] = '\0';
    for (const char* which : {"forward64", "backward64", "forward80", "backward80"}) {
        std::string output;
        const int status = tst::run_command(std::string("ATTENTION_CHECK_CHILD=") + which + " " + self +
                                                " attention_launches_are_checked 2>&1",
                                            &output);
        CHECK_MSG(status != 0 && output.find("cudaErrorInvalidDevice") != std::string::npos,
                  "%s: exit status %d, output:\n%s", which, status, output.c_str());
    }
}
#endif
