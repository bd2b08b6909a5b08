// Causal self-attention from naive to the shipped flash attention (kernels/attention.h), forward and
// backward, each checked against the CPU reference (cpu/attention.h, lse in double) and then, on a
// GPU, timed at GPT-2 124M's shape (B=8, NH=12, HS=64, T=1024) in TFLOP/s and as a share of the bf16
// GEMM rate measured in the same run. FLOPs are counted for the causal half: forward 2·2·B·NH·T²·HS/2,
// backward 2.5x that (what the kernels execute beyond it, tile edges and the separate dQ pass,
// counts as overhead).
//
//   1 naive: the T×T scores, probabilities and their gradients in global memory, one thread per
//     element of each product (dev only: B·NH·T² floats twice, 800 MB at this shape)
//   2 tiled online softmax on CUDA cores in fp32 (the shipped kernel of the fp32 build and of head
//     sizes without a tensor-core kernel)
//   3 tensor cores: mma.sync m16n8k16, fragments by 32-bit loads from padded shared memory
//   4 + ldmatrix (x4, x4.trans) from XOR-swizzled shared memory
//   5 + cp.async tile loads, double-buffered (the next tile streams in during this one): the shipped
//     kernel on sm_80
//   6 Hopper (sm_90a, HS 64/128): a producer warpgroup loads Q, K, V (and dO) tiles by TMA into an
//     mbarrier-guarded ring; two consumer warpgroups (setmaxnreg: 240 registers each) multiply with
//     wgmma from shared memory, P and dS as register operands (kernels/attention_hopper.h)
//   7 + each consumer issues the next tile's QK^T before this tile's softmax, so its own MMAs run
//     during the softmax (the backward is 6's). Slower than 6 on an H100 at every shape measured
//     (dev/RESULTS.md)
//   8 as 6, with tiles of 128 keys instead of 64 (forward; the backward is 6's): half the softmax
//     passes (row maxima, their shuffles, the O rescale) and barrier rounds per key, S by wgmma
//     N=128; the consumer of a block's first 64 rows computes the masked half of its diagonal tile
//     (about 6% more products at T=1024)
//   9 as 8, with the backward pipelined: each step's X = R1·C1ᵀ and Y = R2·C2ᵀ issued right behind the
//     step before's accumulation, one wait for both (the dQ pass, and the dK/dV pass at HS 64); the
//     steps a consumer's rows do not meet run masked rather than branch around the products. The
//     shipped kernel on sm_90
//   last: what kernels/attention.h dispatches to (--attention-kernel NAME forces one: auto, hopper,
//     mma, cuda-cores)
// Versions 3-9 exist in the bf16 build only; 6 to 9 run where attention_hopper_runnable() (an sm_90
// GPU, or the emulator). Grouped-query shapes (KV < NH key/value heads, Llama 3's; reference
// cpu/gqa_attention.h) run every version but the naive one, which takes KV == NH only; on a GPU, at
// Llama 3 8B's heads (B=4 T=1024 NH=32 KV=8 HS=128), the Hopper versions and the shipped one. FLOPs
// count query heads, as for multi-head attention. On a GPU, the last lines weigh the shipped kernel
// against the Hopper goals (fwd+bwd >= 300 TFLOP/s at T 1024, >= 350 at T 2048, fwd >= 400 at T 2048;
// HS 64, causal).
//
// Build and run: make dev/bin/cuda_attention && ./dev/bin/cuda_attention [--attention-kernel NAME]
//                make build/dev/cuda/attention_emu && ./build/dev/cuda/attention_emu  (emulated check)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "dev/cuda/bench.h"
#include "dev/cuda/gemm_ceiling.h"
#include "kernels/attention.h"
#include "test/kernels/attention_reference.h"

namespace {

// ------------------------------------------------------------------------------------------------
// Version 1: naive. att (B, NH, T, T) fp32 holds the scores, then the probabilities; datt the
// gradient of the probabilities, then of the scores.
__global__ void naive_scores_kernel(float* att, const floatX* qkv, int B, int T, int NH, int HS,
                                    float scale) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // ((b·NH + h)·T + t)·T + t2
    if (i >= (size_t)B * NH * T * T) return;
    const int t2 = (int)(i % T), t = (int)(i / T % T), h = (int)(i / T / T % NH), b = (int)(i / T / T / NH);
    if (t2 > t) {
        att[i] = -INFINITY;
        return;
    }
    const floatX* q = qkv + attention_qkv_index(b, t, 0, h, T, NH, HS);
    const floatX* k = qkv + attention_qkv_index(b, t2, 1, h, T, NH, HS);
    float dot = 0.0f;
    for (int d = 0; d < HS; d++) dot += to_float(q[d]) * to_float(k[d]);
    att[i] = scale * dot;
}
// One thread per row: softmax in place, and lse.
__global__ void naive_softmax_kernel(float* att, float* lse, int B, int T, int NH) {
    const size_t row = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // (b·NH + h)·T + t
    if (row >= (size_t)B * NH * T) return;
    float* a = att + row * T;
    const int t = (int)(row % T);
    float m = -INFINITY, sum = 0.0f;
    for (int t2 = 0; t2 <= t; t2++) m = fmaxf(m, a[t2]);
    for (int t2 = 0; t2 <= t; t2++) sum += expf(a[t2] - m);
    for (int t2 = 0; t2 < T; t2++) a[t2] = t2 <= t ? expf(a[t2] - m) / sum : 0.0f;
    lse[row] = m + logf(sum);  // (B, NH, T): the same order as the rows
}
// One thread per output element: out[b][t][h·HS + d] = Σ_t2 att · v.
__global__ void naive_out_kernel(floatX* out, const float* att, const floatX* qkv, int B, int T, int NH,
                                 int HS) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // ((b·T + t)·NH + h)·HS + d
    if (i >= (size_t)B * T * NH * HS) return;
    const int d = (int)(i % HS), h = (int)(i / HS % NH), t = (int)(i / HS / NH % T),
              b = (int)(i / HS / NH / T);
    const float* a = att + attention_lse_index(b, h, t, T, NH) * T;
    float sum = 0.0f;
    for (int t2 = 0; t2 <= t; t2++)
        sum += a[t2] * to_float(qkv[attention_qkv_index(b, t2, 2, h, T, NH, HS) + d]);
    out[i] = from_float<floatX>(sum);
}
// datt = dout·vᵀ (causal part).
__global__ void naive_datt_kernel(float* datt, const floatX* dout, const floatX* qkv, int B, int T, int NH,
                                  int HS) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * T * T) return;
    const int t2 = (int)(i % T), t = (int)(i / T % T), h = (int)(i / T / T % NH), b = (int)(i / T / T / NH);
    if (t2 > t) {
        datt[i] = 0.0f;
        return;
    }
    const floatX* g = dout + attention_out_index(b, t, h, T, NH, HS);
    const floatX* v = qkv + attention_qkv_index(b, t2, 2, h, T, NH, HS);
    float dot = 0.0f;
    for (int d = 0; d < HS; d++) dot += to_float(g[d]) * to_float(v[d]);
    datt[i] = dot;
}
// One thread per row: datt becomes dscore = att ⊙ (datt − Σ att·datt) · scale.
__global__ void naive_softmax_backward_kernel(float* datt, const float* att, int B, int T, int NH,
                                              float scale) {
    const size_t row = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= (size_t)B * NH * T) return;
    float* g = datt + row * T;
    const float* a = att + row * T;
    float dot = 0.0f;
    for (int t2 = 0; t2 < T; t2++) dot += a[t2] * g[t2];
    for (int t2 = 0; t2 < T; t2++) g[t2] = a[t2] * (g[t2] - dot) * scale;
}
// One thread per element of dq, dk and dv (dqkv overwritten).
__global__ void naive_dqkv_kernel(floatX* dqkv, const float* att, const float* dscore, const floatX* dout,
                                  const floatX* qkv, int B, int T, int NH, int HS) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // (((b·T + t)·3 + part)·NH + h)·HS + d
    if (i >= (size_t)B * T * 3 * NH * HS) return;
    const int d = (int)(i % HS), h = (int)(i / HS % NH), part = (int)(i / HS / NH % 3);
    const int t = (int)(i / HS / NH / 3 % T), b = (int)(i / HS / NH / 3 / T);
    const size_t head = attention_lse_index(b, h, 0, T, NH) * T;  // (b, h) square of att
    float sum = 0.0f;
    if (part == 0) {  // dq[t] = Σ_t2 dscore[t][t2] k[t2]
        for (int t2 = 0; t2 <= t; t2++)
            sum += dscore[head + (size_t)t * T + t2] *
                   to_float(qkv[attention_qkv_index(b, t2, 1, h, T, NH, HS) + d]);
    } else if (part == 1) {  // dk[t] = Σ_t1 dscore[t1][t] q[t1]
        for (int t1 = t; t1 < T; t1++)
            sum += dscore[head + (size_t)t1 * T + t] *
                   to_float(qkv[attention_qkv_index(b, t1, 0, h, T, NH, HS) + d]);
    } else {  // dv[t] = Σ_t1 att[t1][t] dout[t1]
        for (int t1 = t; t1 < T; t1++)
            sum +=
                att[head + (size_t)t1 * T + t] * to_float(dout[attention_out_index(b, t1, h, T, NH, HS) + d]);
    }
    dqkv[i] = from_float<floatX>(sum);
}

// ------------------------------------------------------------------------------------------------
struct Problem {
    int B = 0, T = 0, NH = 0, KV = 0, HS = 0;  // KV key/value heads (NH: multi-head attention)
    size_t qkv_n = 0, out_n = 0, lse_n = 0, att_n = 0;
    std::vector<float> qkv, dout;  // rounded to floatX
    floatX *d_qkv = nullptr, *d_dout = nullptr, *d_out = nullptr, *d_dqkv = nullptr;
    float *d_lse = nullptr, *d_att = nullptr, *d_datt = nullptr;  // att, datt: version 1 only
    void* d_scratch = nullptr;
};

Problem make_problem(int B, int T, int NH, int KV, int HS, bool naive_buffers) {
    Problem p;
    p.B = B, p.T = T, p.NH = NH, p.KV = KV, p.HS = HS;
    p.qkv_n = (size_t)B * T * (NH + 2 * KV) * HS, p.out_n = (size_t)B * T * NH * HS, p.lse_n = (size_t)B * NH * T;
    p.att_n = naive_buffers ? (size_t)B * NH * T * T : 0;
    p.qkv = rounded_random_floats(p.qkv_n, 1, -2.0f, 2.0f);
    p.dout = rounded_random_floats(p.out_n, 2, -1.0f, 1.0f);
    p.d_qkv = device_floatX(p.qkv);
    p.d_dout = device_floatX(p.dout);
    p.d_out = device_poisoned<floatX>(p.out_n);
    p.d_dqkv = device_poisoned<floatX>(p.qkv_n);
    p.d_lse = device_poisoned<float>(p.lse_n);
    p.d_att = naive_buffers ? device_poisoned<float>(p.att_n) : nullptr;
    p.d_datt = naive_buffers ? device_poisoned<float>(p.att_n) : nullptr;
    p.d_scratch = device_buffer<char>(attention_backward_scratch_bytes(B, T, NH, HS));
    return p;
}
void free_problem(Problem& p) {
    device_free(p.d_qkv, p.d_dout, p.d_out, p.d_dqkv, p.d_lse, p.d_att, p.d_datt, p.d_scratch);
}

// The CPU reference (test/kernels/attention_reference.h): out, lse (in double) and dqkv.
AttentionTensors reference(const Problem& p) {
    return attention_cpu_reference(p.qkv, &p.dout, p.B, p.T, p.NH, p.KV, p.HS);
}
// One of q (0), k (1), v (2) out of a (B, T, (NH + 2·KV)·HS) tensor, as (B, T, heads·HS).
std::vector<float> part_of(const std::vector<float>& qkv, const Problem& p, int part) {
    return attention_qkv_part(qkv, p.B, p.T, p.NH, p.KV, p.HS, part);
}
// ------------------------------------------------------------------------------------------------
struct Version {
    std::string name;
    std::function<void(Problem&)> forward, backward;
    std::function<bool(int HS, bool grouped)> runs_here = [](int, bool) { return true; };
    const char* needs = "";  // what runs_here asks for, said when it skips
};

void naive_forward(Problem& p) {
    const size_t squares = p.att_n, rows = p.lse_n, outs = p.out_n;
    LAUNCH(naive_scores_kernel, (unsigned)((squares + 255) / 256), 256, 0, 0, p.d_att, p.d_qkv, p.B, p.T,
           p.NH, p.HS, 1.0f / sqrtf((float)p.HS));
    LAUNCH(naive_softmax_kernel, (unsigned)((rows + 255) / 256), 256, 0, 0, p.d_att, p.d_lse, p.B, p.T, p.NH);
    LAUNCH(naive_out_kernel, (unsigned)((outs + 255) / 256), 256, 0, 0, p.d_out, p.d_att, p.d_qkv, p.B, p.T,
           p.NH, p.HS);
}
void naive_backward(Problem& p) {  // needs att from naive_forward
    const size_t squares = p.att_n, rows = p.lse_n;
    LAUNCH(naive_datt_kernel, (unsigned)((squares + 255) / 256), 256, 0, 0, p.d_datt, p.d_dout, p.d_qkv, p.B,
           p.T, p.NH, p.HS);
    LAUNCH(naive_softmax_backward_kernel, (unsigned)((rows + 255) / 256), 256, 0, 0, p.d_datt, p.d_att, p.B,
           p.T, p.NH, 1.0f / sqrtf((float)p.HS));
    LAUNCH(naive_dqkv_kernel, (unsigned)((p.qkv_n + 255) / 256), 256, 0, 0, p.d_dqkv, p.d_att, p.d_datt,
           p.d_dout, p.d_qkv, p.B, p.T, p.NH, p.HS);
}

#ifndef ENABLE_FP32
template <int kRecipe>
void tensor_core_forward(Problem& p) {
    switch (p.HS) {
        case 32:
            return attention_forward_tensor_cores<32, kRecipe>(p.d_out, p.d_lse, p.d_qkv, p.B, p.T, p.NH, p.KV,
                                                                0);
        case 64:
            return attention_forward_tensor_cores<64, kRecipe>(p.d_out, p.d_lse, p.d_qkv, p.B, p.T, p.NH, p.KV,
                                                                0);
        case 128:
            return attention_forward_tensor_cores<128, kRecipe>(p.d_out, p.d_lse, p.d_qkv, p.B, p.T, p.NH, p.KV,
                                                                 0);
    }
    fprintf(stderr, "no tensor-core kernel for HS=%d\n", p.HS);
    exit(1);
}
template <int kRecipe>
void tensor_core_backward(Problem& p) {
    switch (p.HS) {
        case 32:
            return attention_backward_tensor_cores<32, kRecipe>(p.d_dqkv, p.d_scratch, p.d_dout, p.d_out,
                                                                p.d_lse, p.d_qkv, p.B, p.T, p.NH, p.KV, 0);
        case 64:
            return attention_backward_tensor_cores<64, kRecipe>(p.d_dqkv, p.d_scratch, p.d_dout, p.d_out,
                                                                p.d_lse, p.d_qkv, p.B, p.T, p.NH, p.KV, 0);
        case 128:
            return attention_backward_tensor_cores<128, kRecipe>(p.d_dqkv, p.d_scratch, p.d_dout, p.d_out,
                                                                 p.d_lse, p.d_qkv, p.B, p.T, p.NH, p.KV, 0);
    }
    fprintf(stderr, "no tensor-core kernel for HS=%d\n", p.HS);
    exit(1);
}
template <bool kOverlapSoftmax, int kKeys>
void hopper_forward(Problem& p) {
    if (p.HS == 64)
        attention_forward_hopper<64, kOverlapSoftmax, kKeys>(p.d_out, p.d_lse, p.d_qkv, p.B, p.T, p.NH, p.KV, 0);
    else
        attention_forward_hopper<128, kOverlapSoftmax, kKeys>(p.d_out, p.d_lse, p.d_qkv, p.B, p.T, p.NH, p.KV, 0);
}
template <bool kPipelined>
void hopper_backward(Problem& p) {
    if (p.HS == 64)
        attention_backward_hopper<64, kPipelined>(p.d_dqkv, p.d_scratch, p.d_dout, p.d_out, p.d_lse, p.d_qkv, p.B,
                                                  p.T, p.NH, p.KV, 0);
    else
        attention_backward_hopper<128, kPipelined>(p.d_dqkv, p.d_scratch, p.d_dout, p.d_out, p.d_lse, p.d_qkv, p.B,
                                                   p.T, p.NH, p.KV, 0);
}
#endif

std::vector<Version> versions() {
    std::vector<Version> v = {
        {"1 naive T*T", naive_forward, naive_backward, [](int, bool grouped) { return !grouped; }, "KV == NH only"},
        {"2 tiled online softmax, fp32 cores",
         [](Problem& p) { attention_forward_simple(p.d_out, p.d_lse, p.d_qkv, p.B, p.T, p.NH, p.KV, p.HS, 0); },
         [](Problem& p) {
             attention_backward_simple(p.d_dqkv, p.d_scratch, p.d_dout, p.d_out, p.d_lse, p.d_qkv, p.B, p.T,
                                       p.NH, p.KV, p.HS, 0);
         }},
    };
#ifndef ENABLE_FP32
    using namespace attention_tc;
    v.push_back({"3 tensor cores (mma.sync)", tensor_core_forward<kMmaOnly>, tensor_core_backward<kMmaOnly>});
    v.push_back({"4 + ldmatrix, swizzle", tensor_core_forward<kLdmatrixSwizzle>,
                 tensor_core_backward<kLdmatrixSwizzle>});
    v.push_back({"5 + cp.async pipeline", tensor_core_forward<kCpAsyncPipeline>,
                 tensor_core_backward<kCpAsyncPipeline>});
    const auto hopper_here = [](int HS, bool) { return (HS == 64 || HS == 128) && attention_hopper_runnable(); };
    const char* hopper_needs = "needs HS 64/128 and an sm_90 GPU";
    v.push_back({"6 Hopper: TMA ring, warp-specialised wgmma", hopper_forward<false, 64>, hopper_backward<false>,
                 hopper_here, hopper_needs});
    v.push_back({"7 + softmax during the next QK^T", hopper_forward<true, 64>, hopper_backward<false>, hopper_here,
                 hopper_needs});
    v.push_back({"8 as 6, with 128-key tiles", hopper_forward<false, 128>, hopper_backward<false>, hopper_here,
                 hopper_needs});
    v.push_back({"9 + backward products behind the accumulation", hopper_forward<false, 128>, hopper_backward<true>,
                 hopper_here, hopper_needs});
#endif
#ifdef ENABLE_FP32
    const char* shipped = "shipped (version 2 in the fp32 build)";
#else
    const char* shipped = "shipped (kernels/attention.h's choice)";
#endif
    v.push_back({shipped,
                 [](Problem& p) { attention_forward(p.d_out, p.d_lse, p.d_qkv, p.B, p.T, p.NH, p.KV, p.HS, 0); },
                 [](Problem& p) {
                     attention_backward(p.d_dqkv, p.d_scratch, p.d_dout, p.d_out, p.d_lse, p.d_qkv, p.B, p.T,
                                        p.NH, p.KV, p.HS, 0);
                 }});
    return v;
}

// The last version's rates at one shape (TFLOP/s, causal FLOPs; 0 where not timed).
struct Rates {
    double forward = 0, both = 0;
};

// Checks every version (or only the Hopper ones and the shipped one) at one shape, then times them on a
// GPU. KV key/value heads; KV == NH is multi-head attention.
Rates run(int B, int T, int NH, int KV, int HS, bool all_versions, double gemm_tflops) {
    Rates rates;
    printf("-- B=%d T=%d NH=%d KV=%d HS=%d\n", B, T, NH, KV, HS);
    std::vector<Version> list = versions();
    if (!all_versions)  // the Hopper versions (where built) and the shipped one
        list.erase(std::remove_if(list.begin(), list.end() - 1,
                                  [](const Version& v) { return v.name[0] != '6' && v.name[0] != '7'; }),
                   list.end() - 1);
    Problem p = make_problem(B, T, NH, KV, HS, all_versions && KV == NH);
    const AttentionTensors ref = reference(p);
    const double forward_flops = 2.0 * 2.0 * B * NH * (double)T * T * HS / 2.0,
                 backward_flops = 2.5 * forward_flops;
    const std::string shape = " (B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" +
                              std::to_string(NH) + (KV != NH ? " KV=" + std::to_string(KV) : std::string()) +
                              " HS=" + std::to_string(HS) + ")";
    for (Version& v : list) {
        if (!v.runs_here(HS, KV != NH)) {
            printf("SKIPPED %s%s (%s)\n", v.name.c_str(), shape.c_str(), v.needs);
            continue;
        }
        poison(p.d_out, p.out_n);
        poison(p.d_lse, p.lse_n);
        poison(p.d_dqkv, p.qkv_n);
        v.forward(p);
        CUDA_CHECK(cudaGetLastError());
        v.backward(p);  // from this version's own out and lse
        CUDA_CHECK(cudaGetLastError());
        report_check(v.name + " out" + shape, relative_error(host_floats_of(p.d_out, p.out_n), ref.out));
        report_check(v.name + " lse" + shape, relative_error(host_copy_of(p.d_lse, p.lse_n), ref.lse));
        const std::vector<float> dqkv = host_floats_of(p.d_dqkv, p.qkv_n);
        const char* names[3] = {" dq", " dk", " dv"};
        for (int part = 0; part < 3; part++)
            report_check(v.name + names[part] + shape,
                         relative_error(part_of(dqkv, p, part), part_of(ref.dqkv, p, part)));
        if (!BENCH_ON_GPU) continue;
        const double fwd_ms = time_median_ms([&] { v.forward(p); });
        const double both_ms = time_median_ms([&] { v.forward(p), v.backward(p); });
        report_flops(("fwd  " + v.name).c_str(), fwd_ms, forward_flops, gemm_tflops);
        report_flops(("bwd  " + v.name).c_str(), time_median_ms([&] { v.backward(p); }), backward_flops,
                     gemm_tflops);
        report_flops(("both " + v.name).c_str(), both_ms, forward_flops + backward_flops, gemm_tflops);
        rates.forward = forward_flops / (fwd_ms * 1e-3) / 1e12;
        rates.both = (forward_flops + backward_flops) / (both_ms * 1e-3) / 1e12;
    }
    free_problem(p);
    return rates;
}

// The Hopper goals (H100, causal, bf16, HS 64, B·NH 96..192), for the shipped kernel.
void report_goal(const char* what, double tflops, double goal) {
    printf("goal %-44s %7.1f TFLOP/s (goal >= %.0f): %s\n", what, tflops, goal,
           tflops >= goal ? "met" : "NOT met");
}

}  // namespace

int main(int argc, char** argv) {
    for (int i = 1; i < argc; i++) {
        if (std::string(argv[i]) == "--attention-kernel" && i + 1 < argc) {
            set_attention_kernel(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--attention-kernel auto|hopper|mma|cuda-cores]\n", argv[0]);
            return 1;
        }
    }
    double gemm_tflops = 0;
    if (BENCH_ON_GPU) {
        print_device_header();
        gemm_tflops = measure_bf16_gemm_tflops();
        printf("bf16 GEMM rate (cuBLASLt, 8192^3): %.1f TFLOP/s\n", gemm_tflops);
        const Rates t1024 = run(8, 1024, 12, 12, 64, true, gemm_tflops);         // GPT-2 124M: B·NH 96
        const Rates t1024_wide = run(16, 1024, 12, 12, 64, false, gemm_tflops);  // B·NH 192
        run(8, 1024, 24, 24, 32, false, gemm_tflops);  // head size 32 (the quickstart model's)
        run(8, 1024, 8, 8, 128, false, gemm_tflops);   // head size 128 (large GPT-3 configurations)
        const Rates t2048 = run(8, 2048, 12, 12, 64, false, gemm_tflops);  // longer sequences, B·NH 96
        run(4, 1024, 32, 8, 128, false, gemm_tflops);  // Llama 3 8B's heads: 32 query, 8 key/value
        const bool hopper = attention_kernel_for(64) == AttentionKernel::Hopper;
        printf("shipped kernel at HS 64: %s\n",
               hopper ? "hopper" : "not hopper (the goals are the Hopper kernels'; these figures are not)");
        report_goal("fwd+bwd T=1024 B*NH=96", t1024.both, 300);
        report_goal("fwd+bwd T=1024 B*NH=192", t1024_wide.both, 300);
        report_goal("fwd+bwd T=2048 B*NH=96", t2048.both, 350);
        report_goal("fwd     T=2048 B*NH=96", t2048.forward, 400);
    } else {
        run(2, 80, 2, 2, 64, true, gemm_tflops);  // two query blocks, the second partial
        run(2, 130, 2, 2, 32, true, gemm_tflops);
        run(1, 100, 2, 2, 128, true, gemm_tflops);
        run(1, 80, 4, 2, 64, true, gemm_tflops);  // grouped-query: two query heads per key/value head
        run(1, 45, 3, 1, 32, true, gemm_tflops);  // one key/value head for three query heads
        run(1, 70, 8, 2, 128, true, gemm_tflops);  // four query heads per key/value head, HS 128
    }
    return bench_exit_status();
}
