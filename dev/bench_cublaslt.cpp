// Benchmark of the host cuBLASLt stand-in (emu/cublaslt_host.cpp) on the GEMMs of a GPT-2 d12 training
// step: for each linear layer, the forward (bias epilogue), the input gradient and the weight gradient
// (BGRADB epilogue), in fp32 and bf16. Prints GFLOP/s, the ratio to a plain fp32 gemm() (cpu/gemm.h) on the same
// fp32 shape measured in the same run, and the GEMM time of one whole step (12 layers + LM head).
//   usage: bench_cublaslt [B*T tokens, default 256] [repeats, default 3]
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "cpu/gemm.h"

namespace {

double seconds_now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <typename F>
double median_seconds(int repeats, F&& f) {
    std::vector<double> t;
    for (int r = 0; r < repeats; r++) {
        double start = seconds_now();
        f();
        t.push_back(seconds_now() - start);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

void must(cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "bench_cublaslt: %s failed with status %d\n", what, (int)s);
        exit(1);
    }
}

// D (m x n) = op(A) op(B) with column-major dense operands of `type`, and an optional epilogue.
void matmul(cublasLtHandle_t h, cudaDataType type, bool ta, bool tb, int m, int n, int k, const void* A,
            const void* B, void* D, cublasLtEpilogue_t epilogue, void* bias) {
    cublasLtMatmulDesc_t desc;
    must(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "DescCreate");
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    must(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa), "TRANSA");
    must(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb), "TRANSB");
    must(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue), "EPILOGUE");
    if (bias) must(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), "BIAS");
    cublasLtMatrixLayout_t la, lb, ld;
    must(cublasLtMatrixLayoutCreate(&la, type, ta ? k : m, ta ? m : k, ta ? k : m), "layout");
    must(cublasLtMatrixLayoutCreate(&lb, type, tb ? n : k, tb ? k : n, tb ? n : k), "layout");
    must(cublasLtMatrixLayoutCreate(&ld, type, m, n, m), "layout");
    float one = 1, zero = 0;
    must(cublasLtMatmul(h, desc, &one, A, la, B, lb, &zero, D, ld, D, ld, nullptr, nullptr, 0, nullptr), "Matmul");
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
}

struct Linear {
    const char* name;
    int in, out;
    int per_step;  // how many of this layer a d12 step has
};

}  // namespace

int main(int argc, char** argv) {
    const int BT = argc > 1 ? atoi(argv[1]) : 256, repeats = argc > 2 ? atoi(argv[2]) : 3;
    if (BT <= 0 || repeats <= 0) {
        fprintf(stderr, "usage: bench_cublaslt [tokens > 0] [repeats > 0]\n");
        return 1;
    }
    const int C = 768;
    const Linear layers[] = {{"qkv", C, 3 * C, 12}, {"attproj", C, C, 12}, {"fc", C, 4 * C, 12},
                             {"fcproj", 4 * C, C, 12}, {"lm_head", C, 50304, 1}};
    cublasLtHandle_t h;
    must(cublasLtCreate(&h), "Create");
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);

    printf("GPT-2 d12 GEMMs, %d tokens, median of %d, fwd + dinp + dW per layer; sgemm = plain fp32 gemm() of cpu/gemm.h\n",
           BT, repeats);
    printf("%-8s %6s %6s | %10s %10s %10s | %9s\n", "layer", "in", "out", "fp32 GF/s", "bf16 GF/s",
           "sgemm GF/s", "fp32/sgemm");
    double step_fp32 = 0, step_bf16 = 0;
    for (const Linear& L : layers) {
        const size_t nw = (size_t)L.in * L.out, nx = (size_t)L.in * BT, ny = (size_t)L.out * BT;
        std::vector<float> w(nw), x(nx), y(ny), dx(nx), dw(nw), bias(L.out), dbias(L.out);
        for (auto* v : {&w, &x, &y, &bias}) std::generate(v->begin(), v->end(), [&] { return u(rng); });
        std::vector<__nv_bfloat16> wb(nw), xb(nx), yb(ny), dxb(nx), dwb(nw), biasb(L.out), dbiasb(L.out);
        for (size_t i = 0; i < nw; i++) wb[i] = __float2bfloat16(w[i]);
        for (size_t i = 0; i < nx; i++) xb[i] = __float2bfloat16(x[i]);
        for (size_t i = 0; i < ny; i++) yb[i] = __float2bfloat16(y[i]);
        const double flops = 3.0 * 2.0 * BT * (double)L.in * L.out;

        // Row-major activations (BT x in), weights (out x in), as a trainer calls them.
        auto three = [&](cudaDataType t, void* W, void* X, void* Y, void* DX, void* DW, void* B, void* DB) {
            matmul(h, t, true, false, L.out, BT, L.in, W, X, Y, CUBLASLT_EPILOGUE_BIAS, B);        // y = W x + b
            matmul(h, t, false, false, L.in, BT, L.out, W, Y, DX, CUBLASLT_EPILOGUE_DEFAULT, nullptr);  // dx = W^T dy
            matmul(h, t, false, true, L.in, L.out, BT, X, Y, DW, CUBLASLT_EPILOGUE_BGRADB, DB);   // dW = x dy^T
        };
        double t32 = median_seconds(repeats, [&] {
            three(CUDA_R_32F, w.data(), x.data(), y.data(), dx.data(), dw.data(), bias.data(), dbias.data());
        });
        double t16 = median_seconds(repeats, [&] {
            three(CUDA_R_16BF, wb.data(), xb.data(), yb.data(), dxb.data(), dwb.data(), biasb.data(), dbiasb.data());
        });
        double ts = median_seconds(repeats, [&] {
            // The same three products through cpu/gemm.h (row-major: a column-major matrix read
            // row-major is its transpose, so operands and transposes swap).
            gemm(false, true, BT, L.out, L.in, 1.0f, x.data(), L.in, w.data(), L.in, 0.0f, y.data(), L.out);
            gemm(false, false, BT, L.in, L.out, 1.0f, y.data(), L.out, w.data(), L.in, 0.0f, dx.data(), L.in);
            gemm(true, false, L.out, L.in, BT, 1.0f, y.data(), L.out, x.data(), L.in, 0.0f, dw.data(), L.in);
        });
        printf("%-8s %6d %6d | %10.1f %10.1f %10.1f | %9.2f\n", L.name, L.in, L.out, flops / t32 / 1e9,
               flops / t16 / 1e9, flops / ts / 1e9, ts / t32);
        step_fp32 += L.per_step * t32;
        step_bf16 += L.per_step * t16;
    }
    printf("one d12 step's linear-layer GEMMs at %d tokens: %.2f s fp32, %.2f s bf16 (attention GEMMs not included)\n",
           BT, step_fp32, step_bf16);
    cublasLtDestroy(h);
    return 0;
}
