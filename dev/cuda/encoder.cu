// Encoder (token + position embedding) kernels from naive to the shipped ones (kernels/encoder.h),
// each checked against the CPU reference (cpu/encoder.h in double) and then, on a GPU, timed at
// GPT-2 124M's shape (B=16, T=1024, C=768, Vp=50304) against the device's copy bandwidth.
//
//   forward    1 naive: one thread per element
//              2 shipped: one thread per 128-bit vector
//   backward   1 naive: fp32 atomicAdd into fp32 copies of dwte and dwpe, then a pass adding the
//                copies into the floatX gradients (NOT deterministic: the order of the atomics varies)
//              2 positions grouped by token on the host, one thread block per distinct token
//              3 shipped: as 2, frequent tokens split over 8 position groups and launched first
// The backward is timed on two token mixes: uniform over the vocabulary, and Zipf-distributed like
// text (the most frequent token about 9% of the batch). Versions 2 and 3 are timed on the GPU
// alone (grouping uploaded beforehand) and the shipped call also in full, host grouping included.
//
// Build and run: make dev/bin/cuda_encoder && ./dev/bin/cuda_encoder  (on a GPU)
//                make build/dev/cuda/encoder_emu && ./build/dev/cuda/encoder_emu  (emulated check)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cpu/encoder.h"
#include "dev/cuda/bench.h"
#include "kernels/encoder.h"

// ------------------------------------------------------------------------------------------------
// Version 1 kernels

__global__ void encoder_forward_naive_kernel(floatX* out, const int* tokens, const floatX* wte,
                                             const floatX* wpe, int B, int T, int C) {
    const size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= (size_t)B * T * C) return;
    const size_t position = index / C;
    const int c = (int)(index % C), t = (int)(position % T);
    out[index] = from_float<floatX>(to_float(wte[(size_t)tokens[position] * C + c]) +
                                    to_float(wpe[(size_t)t * C + c]));
}

// One thread per element of dout, adding it into fp32 copies of the two rows it belongs to.
__global__ void encoder_backward_atomic_kernel(float* dwte32, float* dwpe32, const floatX* dout,
                                               const int* tokens, int B, int T, int C) {
    const size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= (size_t)B * T * C) return;
    const size_t position = index / C;
    const int c = (int)(index % C), t = (int)(position % T);
    const float d = to_float(dout[index]);
    atomicAdd(dwte32 + (size_t)tokens[position] * C + c, d);
    atomicAdd(dwpe32 + (size_t)t * C + c, d);
}
__global__ void add_float_copy_kernel(floatX* grad, const float* copy, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) grad[i] = from_float<floatX>(to_float(grad[i]) + copy[i]);
}

// ------------------------------------------------------------------------------------------------
// Harness

namespace {

// B·T tokens over vocabulary V: uniform, or Zipf (rank r with probability ∝ 1/(r+1)), ranks
// scattered over the ids.
std::vector<int> make_tokens(int n, int V, bool zipf, unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<int> tokens(n);
    if (!zipf) {
        std::uniform_int_distribution<int> dist(0, V - 1);
        for (int& t : tokens) t = dist(rng);
        return tokens;
    }
    std::vector<double> cdf(V);
    double total = 0;
    for (int r = 0; r < V; r++) cdf[r] = total += 1.0 / (r + 1);
    std::uniform_real_distribution<double> dist(0, total);
    for (int& t : tokens) {
        const int rank = (int)(std::lower_bound(cdf.begin(), cdf.end(), dist(rng)) - cdf.begin());
        t = (int)(((long long)std::min(rank, V - 1) * 7919) % V);
    }
    return tokens;
}

void run(int B, int T, int C, int V, int Vp, bool zipf, double ceiling) {
    const int n = B * T;
    const std::vector<int> tokens = make_tokens(n, V, zipf, 1);
    const int distinct = (int)std::set<int>(tokens.begin(), tokens.end()).size();
    printf("-- B=%d T=%d C=%d Vp=%d, %s tokens (%d distinct)\n", B, T, C, Vp, zipf ? "Zipf" : "uniform",
           distinct);
    const std::vector<float> wte = rounded_random_floats((size_t)Vp * C, 2, -1, 1),
                             wpe = rounded_random_floats((size_t)T * C, 3, -1, 1);
    const std::vector<float> dout = rounded_random_floats((size_t)n * C, 4, -1, 1);
    const std::vector<float> dwte0 = rounded_random_floats((size_t)Vp * C, 5, -0.1f, 0.1f);
    const std::vector<float> dwpe0 = rounded_random_floats((size_t)T * C, 6, -0.1f, 0.1f);
    const std::string shape = " (B=" + std::to_string(B) + " T=" + std::to_string(T) +
                              " C=" + std::to_string(C) + (zipf ? " Zipf)" : " uniform)");

    // References.
    std::vector<double> out_ref((size_t)n * C);
    {
        std::vector<float> out((size_t)n * C);
        encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
        for (size_t i = 0; i < out.size(); i++) out_ref[i] = host_from_floatX(host_to_floatX(out[i]));
    }
    std::vector<double> dwte_ref(dwte0.begin(), dwte0.end()), dwpe_ref(dwpe0.begin(), dwpe0.end());
    encoder_backward(dwte_ref.data(), dwpe_ref.data(), std::vector<double>(dout.begin(), dout.end()).data(),
                     tokens.data(), B, T, C);

    int* d_tokens = device_copy_of(tokens);
    floatX *d_wte = device_floatX(wte), *d_wpe = device_floatX(wpe), *d_dout = device_floatX(dout);
    floatX* d_out = device_poisoned<floatX>((size_t)n * C);
    floatX *d_dwte = device_floatX(dwte0), *d_dwpe = device_floatX(dwpe0);
    float *d_dwte32 = device_buffer<float>((size_t)Vp * C), *d_dwpe32 = device_buffer<float>((size_t)T * C);
    void* d_scratch = device_buffer<char>(encoder_backward_scratch_bytes(B, T));
    std::vector<int4> host_scratch(encoder_backward_host_scratch_bytes(B, T) / sizeof(int4) + 1);

    // ---- forward
    const double S = sizeof(floatX), forward_bytes = 4.0 * n + 3.0 * n * C * S;
    const std::vector<std::pair<std::string, std::function<void()>>> forwards = {
        {"forward 1 naive (thread per element)",
         [&] {
             LAUNCH(encoder_forward_naive_kernel, ceil_div((size_t)n * C, 256), 256, 0, 0, d_out, d_tokens,
                    d_wte, d_wpe, B, T, C);
         }},
        {"forward 2 shipped (128-bit vectors)",
         [&] { encoder_forward(d_out, d_tokens, d_wte, d_wpe, B, T, C, 0); }},
    };
    if (!zipf)
        for (const auto& [name, launch] : forwards) {
            poison(d_out, (size_t)n * C);
            launch();
            CUDA_CHECK(cudaGetLastError());
            report_check(name + shape, relative_error(host_floats_of(d_out, (size_t)n * C), out_ref));
            time_bandwidth(name, launch, forward_bytes, ceiling);
        }

    // ---- backward. Bytes: dout read twice, touched dwte rows and the dwpe rows read and written.
    const double backward_bytes = 2.0 * n * C * S + 2.0 * distinct * C * S + 2.0 * T * C * S;
    int split = 0;
    const int groups = encoder_group_positions(tokens.data(), n, host_scratch.data(), &split);
    auto upload_grouping = [&] {
        CUDA_CHECK(cudaMemcpy(d_scratch, host_scratch.data(),
                              encoder_positions_bytes(B, T) + (size_t)groups * sizeof(EncoderTokenGroup),
                              cudaMemcpyHostToDevice));
    };
    const std::vector<std::pair<std::string, std::function<void()>>> backwards = {
        {"backward 1 naive (fp32 atomics)",
         [&] {
             CUDA_CHECK(cudaMemsetAsync(d_dwte32, 0, (size_t)Vp * C * sizeof(float), 0));
             CUDA_CHECK(cudaMemsetAsync(d_dwpe32, 0, (size_t)T * C * sizeof(float), 0));
             LAUNCH(encoder_backward_atomic_kernel, ceil_div((size_t)n * C, 256), 256, 0, 0, d_dwte32,
                    d_dwpe32, d_dout, d_tokens, B, T, C);
             LAUNCH(add_float_copy_kernel, ceil_div((size_t)Vp * C, 256), 256, 0, 0, d_dwte, d_dwte32,
                    (size_t)Vp * C);
             LAUNCH(add_float_copy_kernel, ceil_div((size_t)T * C, 256), 256, 0, 0, d_dwpe, d_dwpe32,
                    (size_t)T * C);
         }},
        {"backward 2 block per token (GPU only)",
         [&] { encoder_backward_launch(d_dwte, d_dwpe, d_dout, B, T, C, d_scratch, groups, 0, 0); }},
        {"backward 3 shipped (GPU only)",
         [&] { encoder_backward_launch(d_dwte, d_dwpe, d_dout, B, T, C, d_scratch, groups, split, 0); }},
        {"backward 3 shipped (whole call)",
         [&] {
             encoder_backward(d_dwte, d_dwpe, d_dout, tokens.data(), B, T, C, d_scratch, host_scratch.data(),
                              0);
         }},
    };
    for (const auto& [name, launch] : backwards) {
        copy_floats_to_device(d_dwte, dwte0);
        copy_floats_to_device(d_dwpe, dwpe0);
        upload_grouping();
        launch();
        CUDA_CHECK(cudaGetLastError());
        report_check(name + " dwte" + shape, relative_error(host_floats_of(d_dwte, dwte0.size()), dwte_ref));
        report_check(name + " dwpe" + shape, relative_error(host_floats_of(d_dwpe, dwpe0.size()), dwpe_ref));
        time_bandwidth(name, launch, backward_bytes, ceiling);  // keeps adding into the gradients: harmless
    }
    if (BENCH_ON_GPU) {  // the host's share of the shipped call
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < 20; i++) encoder_group_positions(tokens.data(), n, host_scratch.data(), &split);
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        printf("%-40s %9.3f ms on the host (%d groups, %d split)\n", "grouping positions by token", ms / 20,
               groups, split);
    }

    device_free(d_tokens, d_wte, d_wpe, d_dout, d_out, d_dwte, d_dwpe, d_dwte32, d_dwpe32, d_scratch);
}

}  // namespace

int main() {
    double ceiling = 0;
    if (BENCH_ON_GPU) {
        print_device_header();
        ceiling = measure_and_print_copy_bandwidth();
        run(16, 1024, 768, 50257, 50304, false, ceiling);
        run(16, 1024, 768, 50257, 50304, true, ceiling);
    } else {
        run(2, 37, 768, 1000, 1024, false, ceiling);
        run(4, 37, 160, 1000, 1024, true, ceiling);
    }
    return bench_exit_status();
}
