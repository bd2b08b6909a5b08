// Rotary position embeddings (RoPE, kernels/rope.h) from naive to the shipped kernel, forward and
// backward, each checked against the CPU reference (cpu/rope.h in double) and then, on a GPU, timed at
// Llama 3 shapes against the device's copy bandwidth: Llama 3.2 1B (32 query heads, 8 key/value
// heads, head size 64, B·T = 8·1024 tokens) and Llama 3.1 8B (32/8 heads, head size 128, B·T =
// 4·1024), each with its model's frequencies (θ = 500000 and Llama 3.1's scaling, factor 32 and 8).
//
// What it computes, in place on the fused qkv activation (B, T, (H + 2·KV)·hs), position t = row mod T:
// in every query and key head, channel i and channel i + hs/2 (i < hs/2) form a pair rotated by the
// angle t·f_i,
//   x'[i] = x[i]·cos − x[i + hs/2]·sin,   x'[i + hs/2] = x[i + hs/2]·cos + x[i]·sin;
// the value heads are neither read nor written. Backward rotates the gradient back (sin negated), in
// place, with the same kernels.
// Memory, S = sizeof(floatX) (2 in bf16): each rotated element is read once and written once, 2·S
// bytes, so a call moves 2·B·T·(H + KV)·hs·S bytes, plus the cos and sin tables, (T, hs/2) fp32 each,
// read from memory once and then from cache by every head and sequence. 3 FLOPs per element: the op
// is memory-bound and its ceiling is the copy bandwidth. GB/s counts these compulsory bytes, the same
// for every version.
//
//   forward and backward (one kernel each version, the sign of the angle its argument)
//     1 naive: one thread per pair, scalar loads, cos and sin computed per pair (sincosf of t·f_i
//       rounded to fp32), no tables
//     2 one thread per pair, scalar loads, cos and sin read from the (T, hs/2) tables (the shipped
//       kernel's path for heads whose half is not a whole 128-bit vector)
//     3 shipped: one thread per 128-bit vector of each half of a head (8 pairs in bf16, 4 in fp32),
//       float4 loads of the tables
//
// Build and run: make dev/bin/cuda_rope && ./dev/bin/cuda_rope  (on a GPU)
//                make build/dev/cuda/rope_emu && ./build/dev/cuda/rope_emu  (emulated check)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "base/llama_config.h"
#include "cpu/rope.h"
#include "dev/cuda/bench.h"
#include "kernels/rope.h"

// ------------------------------------------------------------------------------------------------
// Version 1: one thread per pair, the rotation's cos and sin computed where they are needed.
// freq holds f_i (hs/2 floats). Every head of every sequence recomputes the same T·hs/2 angles, and
// the angle t·f_i rounded to fp32 is off by up to ~t·f_i·2^-23 radians (1e-4 at t = 1023, f_0 = 1):
// invisible in bf16; in an fp32 build at T = 1024 a relative error of 3e-6 (measured through the
// emulator), inside the 1e-5 tolerance but 100 times the table versions' 2e-8.
__global__ void rope_naive_kernel(floatX* qkv, const float* freq, int B, int T, int H, int KV, int hs,
                                  float sign) {
    const int half = hs / 2, rotated = H + KV;
    const size_t pair = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (pair >= (size_t)B * T * rotated * half) return;
    // pair = ((token · rotated) + head) · half + i
    const int i = (int)(pair % half);
    const int head = (int)(pair / half % rotated);
    const size_t token = pair / half / rotated;
    const int t = (int)(token % T);

    float sin_angle, cos_angle;
    sincosf((float)t * freq[i], &sin_angle, &cos_angle);  // one argument reduction for both
    const float s = sign * sin_angle;
    floatX* x = qkv + token * (size_t)(rotated + KV) * hs + (size_t)head * hs + i;
    const float x1 = to_float(x[0]), x2 = to_float(x[half]);
    x[0] = from_float<floatX>(x1 * cos_angle - x2 * s);
    x[half] = from_float<floatX>(x2 * cos_angle + x1 * s);
}
// Version 2 is the shipped header's scalar kernel, rope_rotate_kernel<1> (one pair per thread, the
// tables read with scalar loads); version 3 the shipped rope_forward / rope_backward, which launch
// rope_rotate_kernel<8> in bf16 (<4> in fp32) for these head sizes.

// ------------------------------------------------------------------------------------------------
// Harness

namespace {

using Versions = std::vector<std::pair<std::string, std::function<void()>>>;

// One problem: the shape, the input (the same values serve as qkv forward and as its gradient
// backward), the tables and frequencies, on the host and on the device.
struct Problem {
    int B, T, H, KV, hs;
    std::vector<float> qkv;       // (B, T, (H + 2·KV)·hs), rounded to floatX
    std::vector<float> cos, sin;  // (T, hs/2): the fp32 tables every version but 1 reads
    std::vector<float> freq;      // (hs/2): f_i in fp32, for version 1
    floatX* d_qkv;
    float *d_cos, *d_sin, *d_freq;
    Problem(const LlamaConfig& config, int batch, int seq_len)
        : B(batch), T(seq_len), H(config.num_heads), KV(config.num_kv_heads), hs(config.head_size()) {
        qkv = rounded_random_floats(elements(), 7, -2.0f, 2.0f);
        cos.resize((size_t)T * hs / 2), sin.resize(cos.size());
        rope_tables(cos.data(), sin.data(), T, hs, config.rope_theta, config.rope_scaling);
        const std::vector<double> f = rope_frequencies(hs, config.rope_theta, config.rope_scaling);
        freq.assign(f.begin(), f.end());
        d_qkv = device_floatX(qkv);
        d_cos = device_copy_of(cos), d_sin = device_copy_of(sin), d_freq = device_copy_of(freq);
    }
    ~Problem() { device_free(d_qkv, d_cos, d_sin, d_freq); }
    int row() const { return (H + 2 * KV) * hs; }  // elements per token
    size_t elements() const { return (size_t)B * T * row(); }
    size_t pairs() const { return (size_t)B * T * (H + KV) * (hs / 2); }
    // The kernels work in place: each version starts from the input again.
    void reset() { copy_floats_to_device(d_qkv, qkv); }
};

// qkv after the op, by cpu/rope.h in double from the tables the device reads: every head of every
// token rotated (forward: by +t·f_i; backward: by −t·f_i, added into zeros), then the value heads
// put back as they were, since the kernels leave them alone.
std::vector<double> reference(const Problem& p, bool forward) {
    const std::vector<double> x(p.qkv.begin(), p.qkv.end());
    const std::vector<double> c(p.cos.begin(), p.cos.end()), s(p.sin.begin(), p.sin.end());
    const int all_heads = p.H + 2 * p.KV;
    std::vector<double> y(x.size(), 0.0);
    if (forward)
        rope_forward(y.data(), x.data(), c.data(), s.data(), p.B, p.T, all_heads, p.hs);
    else
        rope_backward(y.data(), x.data(), c.data(), s.data(), p.B, p.T, all_heads, p.hs);
    const size_t v_start = (size_t)(p.H + p.KV) * p.hs;
    for (size_t token = 0; token < (size_t)p.B * p.T; token++)
        std::copy(x.begin() + token * p.row() + v_start, x.begin() + (token + 1) * p.row(),
                  y.begin() + token * p.row() + v_start);
    return y;
}

Versions versions(Problem& p, bool forward) {
    const float sign = forward ? 1.0f : -1.0f;
    const std::string direction = forward ? "forward" : "backward";
    return {
        {direction + " 1 naive (sincosf per pair)",
         [&p, sign] {
             LAUNCH(rope_naive_kernel, ceil_div(p.pairs(), ROPE_BLOCK_SIZE), ROPE_BLOCK_SIZE, 0, 0, p.d_qkv,
                    p.d_freq, p.B, p.T, p.H, p.KV, p.hs, sign);
         }},
        {direction + " 2 scalar, tables",
         [&p, sign] {
             LAUNCH(rope_rotate_kernel<1>, ceil_div(p.pairs(), ROPE_BLOCK_SIZE), ROPE_BLOCK_SIZE, 0, 0, p.d_qkv,
                    p.d_cos, p.d_sin, p.B, p.T, p.H, p.KV, p.hs, sign);
         }},
        {direction + " 3 shipped (128-bit)",
         [&p, forward] {
             if (forward)
                 rope_forward(p.d_qkv, p.d_cos, p.d_sin, p.B, p.T, p.H, p.KV, p.hs, 0);
             else
                 rope_backward(p.d_qkv, p.d_cos, p.d_sin, p.B, p.T, p.H, p.KV, p.hs, 0);
         }},
    };
}

void run(const char* model, const LlamaConfig& config, int B, int T, double ceiling) {
    Problem p(config, B, T);
    printf("-- %s: B=%d T=%d H=%d KV=%d hs=%d\n", model, B, T, p.H, p.KV, p.hs);
    if (!rope_vectorised(p.d_qkv, p.d_cos, p.d_sin, p.hs)) printf("note: version 3 runs its scalar path here\n");
    const std::string shape = " (B=" + std::to_string(B) + " T=" + std::to_string(T) +
                              " hs=" + std::to_string(p.hs) + ")";
    const double bytes = 2.0 * (B * T) * (p.H + p.KV) * p.hs * sizeof(floatX) + 2.0 * T * (p.hs / 2) * 4;
    for (bool forward : {true, false}) {
        const std::vector<double> ref = reference(p, forward);
        for (auto& [name, launch] : versions(p, forward)) {
            p.reset();
            launch();
            CUDA_CHECK(cudaGetLastError());
            report_check(name + shape, relative_error(host_floats_of(p.d_qkv, p.elements()), ref));
            // Timed runs keep rotating the same buffer in place: harmless for timing.
            time_bandwidth(name, launch, bytes, ceiling);
        }
    }
}

}  // namespace

int main() {
    double ceiling = 0;
    if (BENCH_ON_GPU) {
        print_device_header();
        ceiling = measure_and_print_copy_bandwidth();
        run("Llama 3.2 1B", llama32_1b(), 8, 1024, ceiling);  // 8192 tokens
        run("Llama 3.1 8B", llama31_8b(), 4, 1024, ceiling);  // 4096 tokens
    } else {
        // The emulator runs a fiber per CUDA thread: the real head counts and sizes, few tokens.
        run("Llama 3.2 1B", llama32_1b(), 2, 9, ceiling);
        run("Llama 3.1 8B", llama31_8b(), 1, 17, ceiling);
    }
    return bench_exit_status();
}
