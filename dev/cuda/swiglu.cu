// SwiGLU's elementwise step (kernels/swiglu.h) from naive to the shipped kernels, forward and
// backward, each checked against the CPU reference (cpu/swiglu.h in double) and then, on a GPU, timed
// at Llama 3 shapes against the device's copy bandwidth: Llama 3.2 1B (F = 8192, N = B·T = 8·1024
// rows) and Llama 3.1 8B (F = 14336, N = 4·1024 rows).
//
// What it computes, on the fused activation inp (N, 2F) whose rows are [gate | up]:
//   forward   h[n,j] = silu(g)·u,   g = gate[n,j], u = up[n,j], silu(g) = g·σ(g), σ(g) = 1/(1 + e^−g)
//   backward  dgate[n,j] = dh[n,j]·u·σ(g)·(1 + g·(1 − σ(g))),   dup[n,j] = dh[n,j]·silu(g),
//             written over dinp (N, 2F) = [dgate | dup], which may be inp itself
// Memory, S = sizeof(floatX) (2 in bf16), per element of h: forward reads gate and up and writes h,
// 3·S bytes; backward reads dh, gate and up and writes dgate and dup, 5·S bytes. About 5 and 10
// FLOPs and one exp per element: memory-bound, the ceiling is the copy bandwidth. GB/s counts these
// compulsory bytes, the same for every version (a version that moves more shows as slower).
//
//   forward    1 naive: one thread per element, scalar loads and stores
//              2 shipped: one thread per 128-bit vector (8 elements in bf16, 4 in fp32) of each of
//                gate, up and h, streaming loads
//   backward   1 naive: one kernel per gradient (dgate, then dup), one thread per element: dh and gate
//                are read twice, 7·S bytes moved per element instead of 5
//              2 fused: one kernel, one thread per element computing both gradients, scalar
//              3 shipped: as 2 with 128-bit vectors and streaming loads; also timed in place
//                (dinp = inp, the activation's buffer reused for its gradient)
//
// Build and run: make dev/bin/cuda_swiglu && ./dev/bin/cuda_swiglu  (on a GPU)
//                make build/dev/cuda/swiglu_emu && ./build/dev/cuda/swiglu_emu  (emulated check)
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cpu/swiglu.h"
#include "dev/cuda/bench.h"
#include "kernels/swiglu.h"

// ------------------------------------------------------------------------------------------------
// The scalar kernels. Element index = n·F + j: row n, column j of h (and of gate and up within the
// row of inp, F apart).

__device__ __forceinline__ float sigmoid_naive(float g) { return 1.0f / (1.0f + expf(-g)); }

// Forward version 1: one thread per element of h.
__global__ void swiglu_forward_naive_kernel(floatX* h, const floatX* inp, int N, int F) {
    const size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= (size_t)N * F) return;
    const size_t n = index / F;
    const int j = (int)(index % F);
    const float g = to_float(inp[n * 2 * F + j]), u = to_float(inp[n * 2 * F + F + j]);
    h[index] = from_float<floatX>(g * sigmoid_naive(g) * u);
}

// Backward version 1: each gradient its own kernel, as the formulas read. dgate needs dh, gate and up
// ...
__global__ void swiglu_backward_dgate_kernel(floatX* dinp, const floatX* dh, const floatX* inp, int N, int F) {
    const size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= (size_t)N * F) return;
    const size_t gate_at = index / F * 2 * F + index % F;
    const float g = to_float(inp[gate_at]), u = to_float(inp[gate_at + F]), sig = sigmoid_naive(g);
    dinp[gate_at] = from_float<floatX>(to_float(dh[index]) * u * sig * (1.0f + g * (1.0f - sig)));
}
// ... and dup needs dh and gate again. (Not in place: this kernel would read gate where the first
// one has already written dgate.)
__global__ void swiglu_backward_dup_kernel(floatX* dinp, const floatX* dh, const floatX* inp, int N, int F) {
    const size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= (size_t)N * F) return;
    const size_t gate_at = index / F * 2 * F + index % F;
    const float g = to_float(inp[gate_at]);
    dinp[gate_at + F] = from_float<floatX>(to_float(dh[index]) * g * sigmoid_naive(g));
}

// Backward version 2: one kernel, one thread per element reading dh, gate and up once for both
// gradients (and, since each thread reads its inputs before writing, safe in place).
__global__ void swiglu_backward_fused_kernel(floatX* dinp, const floatX* dh, const floatX* inp, int N, int F) {
    const size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= (size_t)N * F) return;
    const size_t gate_at = index / F * 2 * F + index % F;
    const float g = to_float(inp[gate_at]), u = to_float(inp[gate_at + F]), d = to_float(dh[index]);
    const float sig = sigmoid_naive(g);
    dinp[gate_at] = from_float<floatX>(d * u * sig * (1.0f + g * (1.0f - sig)));
    dinp[gate_at + F] = from_float<floatX>(d * g * sig);
}
// The shipped versions are swiglu_forward and swiglu_backward of kernels/swiglu.h.

// ------------------------------------------------------------------------------------------------
// Harness

namespace {

using Versions = std::vector<std::pair<std::string, std::function<void()>>>;

constexpr int BLOCK = 256;

// One problem: inputs filled on the device (reproducible hashes, no host generation of the large
// buffers), their rounded values read back for the reference.
struct Problem {
    int N, F;
    floatX *d_inp, *d_dh, *d_h, *d_dinp;
    std::vector<float> inp, dh;  // what the device holds, as floats
    Problem(int rows, int ffn) : N(rows), F(ffn) {
        d_inp = device_buffer<floatX>(2 * elements()), d_dh = device_buffer<floatX>(elements());
        d_h = device_buffer<floatX>(elements()), d_dinp = device_buffer<floatX>(2 * elements());
        fill_random_device(d_inp, 2 * elements(), 11, 4.0f);  // gate and up in [-4, 4]: σ's whole bend
        fill_random_device(d_dh, elements(), 12);
        inp = host_floats_of(d_inp, 2 * elements());
        dh = host_floats_of(d_dh, elements());
    }
    ~Problem() { device_free(d_inp, d_dh, d_h, d_dinp); }
    size_t elements() const { return (size_t)N * F; }  // of h
};

// h (N, F) and dinp (N, 2F) = [dgate | dup] by cpu/swiglu.h in double, row by row on the fused layout:
// a row's gate and up are the two halves of its row of inp, its dgate and dup those of dinp.
struct Reference {
    std::vector<double> h, dinp;
};
Reference reference(const Problem& p) {
    const std::vector<double> x(p.inp.begin(), p.inp.end()), d(p.dh.begin(), p.dh.end());
    const size_t F = p.F;
    Reference r;
    r.h.resize(p.elements());
    r.dinp.assign(2 * p.elements(), 0.0);  // cpu swiglu_backward adds into its gradients
#pragma omp parallel for schedule(static) if (worth_parallel(p.elements()))
    for (int n = 0; n < p.N; n++) {
        const double *gate = &x[n * 2 * F], *up = gate + F;
        swiglu_forward(&r.h[n * F], gate, up, F);
        swiglu_backward(&r.dinp[n * 2 * F], &r.dinp[n * 2 * F + F], &d[n * F], gate, up, F);
    }
    return r;
}

Versions forward_versions(Problem& p) {
    const int N = p.N, F = p.F;
    return {
        {"forward 1 naive (scalar)",
         [&p, N, F] {
             LAUNCH(swiglu_forward_naive_kernel, ceil_div(p.elements(), BLOCK), BLOCK, 0, 0, p.d_h, p.d_inp, N, F);
         }},
        {"forward 2 shipped (128-bit)", [&p, N, F] { swiglu_forward(p.d_h, p.d_inp, N, F, 0); }},
    };
}
Versions backward_versions(Problem& p) {
    const int N = p.N, F = p.F;
    return {
        {"backward 1 naive (kernel per gradient)",
         [&p, N, F] {
             LAUNCH(swiglu_backward_dgate_kernel, ceil_div(p.elements(), BLOCK), BLOCK, 0, 0, p.d_dinp, p.d_dh,
                    p.d_inp, N, F);
             LAUNCH(swiglu_backward_dup_kernel, ceil_div(p.elements(), BLOCK), BLOCK, 0, 0, p.d_dinp, p.d_dh,
                    p.d_inp, N, F);
         }},
        {"backward 2 fused (scalar)",
         [&p, N, F] {
             LAUNCH(swiglu_backward_fused_kernel, ceil_div(p.elements(), BLOCK), BLOCK, 0, 0, p.d_dinp, p.d_dh,
                    p.d_inp, N, F);
         }},
        {"backward 3 shipped (128-bit)", [&p, N, F] { swiglu_backward(p.d_dinp, p.d_dh, p.d_inp, N, F, 0); }},
    };
}

void run(const char* model, int N, int F, double ceiling) {
    printf("-- %s: N=%d F=%d\n", model, N, F);
    Problem p(N, F);
    const Reference ref = reference(p);
    const size_t n = p.elements();
    const double S = sizeof(floatX);
    const std::string shape = " (N=" + std::to_string(N) + " F=" + std::to_string(F) + ")";

    for (auto& [name, launch] : forward_versions(p)) {
        poison(p.d_h, n);
        launch();
        CUDA_CHECK(cudaGetLastError());
        report_check(name + shape, relative_error(host_floats_of(p.d_h, n), ref.h));
        time_bandwidth(name, launch, 3.0 * n * S, ceiling);
    }
    for (auto& [name, launch] : backward_versions(p)) {
        poison(p.d_dinp, 2 * n);
        launch();
        CUDA_CHECK(cudaGetLastError());
        report_check(name + shape, relative_error(host_floats_of(p.d_dinp, 2 * n), ref.dinp));
        time_bandwidth(name, launch, 5.0 * n * S, ceiling);
    }
    // Last, since it overwrites inp: the shipped backward in place, dinp = inp, checked after one run
    // (the timed runs then take gradients of gradients: harmless for timing).
    const std::string name = "backward 3 shipped, in place";
    auto in_place = [&p] { swiglu_backward(p.d_inp, p.d_dh, p.d_inp, p.N, p.F, 0); };
    in_place();
    CUDA_CHECK(cudaGetLastError());
    report_check(name + shape, relative_error(host_floats_of(p.d_inp, 2 * n), ref.dinp));
    time_bandwidth(name, in_place, 5.0 * n * S, ceiling);
}

}  // namespace

int main() {
    double ceiling = 0;
    if (BENCH_ON_GPU) {
        print_device_header();
        ceiling = measure_and_print_copy_bandwidth();
        run("Llama 3.2 1B", 8 * 1024, 8192, ceiling);   // B=8, T=1024
        run("Llama 3.1 8B", 4 * 1024, 14336, ceiling);  // B=4, T=1024
    } else {
        // The emulator runs a fiber per CUDA thread: the real F, a few rows; then a short F that is
        // a multiple of the vector (8) but of nothing larger.
        run("Llama 3.2 1B", 3, 8192, ceiling);
        run("Llama 3.1 8B", 2, 14336, ceiling);
        run("short rows", 37, 136, ceiling);
    }
    return bench_exit_status();
}
