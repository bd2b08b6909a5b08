// Tests of the cuBLASLt stand-in's FP8 products (emu/cublaslt_host.cpp) against a double-precision
// product of the decoded operands written here: E4M3 and E5M2 operands in the TN layout, with and
// without scales, bias, GELU (and its aux matrix), beta, amax of D, bf16 / fp32 / FP8 outputs, leading
// dimensions above the minimum and a batch; and every documented refusal, with its status.
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/fp8.h"
#include "test/test.h"

namespace {

bool is_fp8(cudaDataType t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }
Fp8Format format_of(cudaDataType t) { return t == CUDA_R_8F_E4M3 ? Fp8Format::e4m3 : Fp8Format::e5m2; }
size_t size_of(cudaDataType t) { return t == CUDA_R_32F ? 4 : is_fp8(t) ? 1 : 2; }

// A column-major matrix (rows × cols, leading dimension ld) of `batch` matrices `stride` apart, in
// 16-byte aligned memory (the allocation holds 16 spare bytes so `offset` can misalign it).
struct Matrix {
    cudaDataType type = CUDA_R_16BF;
    int64_t rows = 0, cols = 0, ld = 0, stride = 0;
    int batch = 1;
    size_t offset = 0;  // bytes
    std::vector<unsigned char> bytes;
    Matrix() = default;
    Matrix(cudaDataType t, int64_t r, int64_t c, int64_t l, int b = 1)
        : type(t), rows(r), cols(c), ld(l), stride(l * c), batch(b),
          bytes((size_t)(b * l * c) * size_of(t) + 32, 0xFF) {}
    void* data() { return aligned() + offset; }
    unsigned char* aligned() {
        const uintptr_t p = reinterpret_cast<uintptr_t>(bytes.data());
        return bytes.data() + (16 - p % 16) % 16;
    }
    size_t at(int b, int64_t i, int64_t j) const { return (size_t)(b * stride + j * ld + i); }
    double get(int b, int64_t i, int64_t j) {
        unsigned char* base = static_cast<unsigned char*>(data());
        const size_t e = at(b, i, j);
        if (type == CUDA_R_32F) return reinterpret_cast<float*>(base)[e];
        if (is_fp8(type)) return fp8_decode(base[e], format_of(type));
        return __bfloat162float(reinterpret_cast<__nv_bfloat16*>(base)[e]);
    }
    void set(int b, int64_t i, int64_t j, float v) {
        unsigned char* base = static_cast<unsigned char*>(data());
        const size_t e = at(b, i, j);
        if (type == CUDA_R_32F) reinterpret_cast<float*>(base)[e] = v;
        else if (is_fp8(type)) base[e] = fp8_encode(v, format_of(type));
        else reinterpret_cast<__nv_bfloat16*>(base)[e] = __float2bfloat16(v);
    }
    // Random finite values of the type (for FP8: values spread over many binades, so that the
    // product's operands use the format's range, not only its top).
    void fill(std::mt19937& rng, float scale) {
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        std::uniform_int_distribution<int> binade(-6, 0);
        for (int b = 0; b < batch; b++)
            for (int64_t j = 0; j < cols; j++)
                for (int64_t i = 0; i < rows; i++) set(b, i, j, scale * u(rng) * std::ldexp(1.0f, binade(rng)));
    }
};

double gelu_ref(double x) {
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

// One FP8 product: D (m×n) = scale_D · epilogue(alpha · sA · sB · Aᵀ B + beta · sC · C), A k×m, B k×n.
struct Fp8Case {
    cudaDataType a_type = CUDA_R_8F_E4M3, b_type = CUDA_R_8F_E4M3, d_type = CUDA_R_16BF;
    cudaDataType c_type = CUDA_R_16BF;  // what the table asks: bf16 for bf16 and FP8 D, fp32 for fp32 D
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    cublasOperation_t op_a = CUBLAS_OP_T, op_b = CUBLAS_OP_N;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    int64_t m = 32, n = 48, k = 64, pad = 16;  // leading dimensions: rows + pad
    int batch = 1;
    float alpha = 1.0f, beta = 0.0f;
    float sa = 0, sb = 0, sc = 0, sd = 0;  // 0: pointer not set
    bool amax = false;
    int32_t bias_type = -1;  // -1: not set
    size_t d_offset = 0;     // bytes
    uint32_t min_alignment = 256;
};

struct Outcome {
    cublasStatus_t heuristic, matmul;
};

void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* value, size_t size) {
    CHECK(cublasLtMatmulDescSetAttribute(desc, attr, value, size) == CUBLAS_STATUS_SUCCESS);
}

// Runs c through the API on random operands; unless it is refused, checks D (and amax, aux) against
// the double-precision reference.
Outcome run(const Fp8Case& c, unsigned seed = 1) {
    std::mt19937 rng(seed);
    const bool ta = c.op_a == CUBLAS_OP_T, tb = c.op_b == CUBLAS_OP_T;
    Matrix A(c.a_type, ta ? c.k : c.m, ta ? c.m : c.k, (ta ? c.k : c.m) + c.pad, c.batch);
    Matrix B(c.b_type, tb ? c.n : c.k, tb ? c.k : c.n, (tb ? c.n : c.k) + c.pad, c.batch);
    Matrix C(c.c_type, c.m, c.n, c.m + c.pad, c.batch), D(c.d_type, c.m, c.n, c.m + c.pad, c.batch);
    Matrix aux(c.d_type, c.m, c.n, c.m + c.pad, c.batch);
    Matrix bias(c.bias_type == -1 ? CUDA_R_16BF : (cudaDataType)c.bias_type, c.m, 1, c.m, c.batch);
    D.offset = c.d_offset;
    A.fill(rng, is_fp8(c.a_type) ? 400.0f : 1.0f);
    B.fill(rng, is_fp8(c.b_type) ? 400.0f : 1.0f);
    C.fill(rng, 2.0f);
    bias.fill(rng, 1.0f);
    const float sa = c.sa, sb = c.sb, sc = c.sc, sd = c.sd;
    float amax = -1.0f;

    cublasLtHandle_t handle;
    CHECK(cublasLtCreate(&handle) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulDesc_t desc;
    CHECK(cublasLtMatmulDescCreate(&desc, c.compute, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    set(desc, CUBLASLT_MATMUL_DESC_TRANSA, &c.op_a, sizeof c.op_a);
    set(desc, CUBLASLT_MATMUL_DESC_TRANSB, &c.op_b, sizeof c.op_b);
    set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &c.epilogue, sizeof c.epilogue);
    const float* scales[] = {&sa, &sb, &sc, &sd};
    const cublasLtMatmulDescAttributes_t scale_attrs[] = {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                         CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER};
    for (int i = 0; i < 4; i++)
        if (*scales[i] != 0) {
            const void* p = scales[i];
            set(desc, scale_attrs[i], &p, sizeof p);
        }
    if (c.amax) {
        void* p = &amax;
        set(desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &p, sizeof p);
    }
    const bool add_bias = c.epilogue == CUBLASLT_EPILOGUE_BIAS || c.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS ||
                          c.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || c.epilogue == CUBLASLT_EPILOGUE_BGRADB;
    const bool gelu = c.epilogue == CUBLASLT_EPILOGUE_GELU || c.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS ||
                      c.epilogue == CUBLASLT_EPILOGUE_GELU_AUX || c.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    const bool uses_aux = c.epilogue == CUBLASLT_EPILOGUE_GELU_AUX || c.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
                          c.epilogue == CUBLASLT_EPILOGUE_DGELU;
    if (add_bias) {
        const void* p = bias.data();
        set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof p);
        if (c.bias_type != -1) set(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &c.bias_type, sizeof c.bias_type);
    }
    if (uses_aux) {
        const void* p = aux.data();
        set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p, sizeof p);
        set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux.ld, sizeof aux.ld);
        set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &aux.stride, sizeof aux.stride);
    }
    auto layout = [&](Matrix& x) {
        cublasLtMatrixLayout_t l;
        CHECK(cublasLtMatrixLayoutCreate(&l, x.type, x.rows, x.cols, x.ld) == CUBLAS_STATUS_SUCCESS);
        CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &x.batch, sizeof x.batch) == 0);
        CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &x.stride, sizeof x.stride) == 0);
        return l;
    };
    cublasLtMatrixLayout_t la = layout(A), lb = layout(B), lc = layout(C), ld = layout(D);
    if (add_bias) {
        const int64_t bias_stride = bias.stride;
        set(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bias_stride, sizeof bias_stride);
    }
    cublasLtMatmulPreference_t pref;
    CHECK(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &c.min_alignment, sizeof c.min_alignment) == 0);
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    Outcome outcome;
    outcome.heuristic = cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, lc, ld, pref, 1, &result, &returned);
    if (outcome.heuristic == CUBLAS_STATUS_SUCCESS) CHECK(returned == 1);
    outcome.matmul = cublasLtMatmul(handle, desc, &c.alpha, A.data(), la, B.data(), lb, &c.beta, C.data(), lc, D.data(),
                                    ld, returned ? &result.algo : nullptr, nullptr, 0, nullptr);
    if (outcome.matmul == CUBLAS_STATUS_SUCCESS) {
        const double factor = (double)c.alpha * (sa ? sa : 1) * (sb ? sb : 1), c_factor = (double)c.beta * (sc ? sc : 1);
        const double d_scale = sd ? sd : 1;
        double ref_amax = 0;
        for (int b = 0; b < c.batch; b++)
            for (int64_t j = 0; j < c.n; j++)
                for (int64_t i = 0; i < c.m; i++) {
                    double sum = 0, magnitude = 0;
                    for (int64_t q = 0; q < c.k; q++) {
                        const double term = A.get(b, q, i) * B.get(b, q, j);
                        sum += term;
                        magnitude += std::fabs(term);
                    }
                    double v = factor * sum + (c.beta ? c_factor * C.get(b, i, j) : 0.0);
                    if (add_bias) v += bias.get(b, i, 0);
                    const double pre = v;
                    if (gelu) v = gelu_ref(v);
                    ref_amax = std::max(ref_amax, std::fabs(v));
                    // fp32 accumulation: errors up to ~k·2^-24 of Σ|terms| (times the factor), then D's rounding.
                    const double slack = 4e-6 * std::fabs(factor) * magnitude + 1e-30;
                    const double got = D.get(b, i, j);
                    if (is_fp8(c.d_type)) {
                        const Fp8Format f = format_of(c.d_type);
                        const float lo = (float)((v - slack) * d_scale), hi = (float)((v + slack) * d_scale);
                        CHECK_MSG(got >= fp8_round(lo, f) && got <= fp8_round(hi, f), "D(%lld,%lld) = %g, reference %g",
                                  (long long)i, (long long)j, got, v * d_scale);
                    } else {
                        const double rounding = c.d_type == CUDA_R_32F ? 1.2e-7 : 4e-3;
                        CHECK_MSG(std::fabs(got - v) <= rounding * std::fabs(v) + 1.2 * slack,
                                  "D(%lld,%lld) = %.9g, reference %.9g", (long long)i, (long long)j, got, v);
                    }
                    if (uses_aux)
                        CHECK_MSG(std::fabs(aux.get(b, i, j) - pre) <= 4e-3 * std::fabs(pre) + 1.1 * slack, "aux(%lld,%lld)",
                                  (long long)i, (long long)j);
                }
        if (c.amax) CHECK_MSG(std::fabs(amax - ref_amax) <= 1e-4 * ref_amax, "amax %.9g, reference %.9g", amax, ref_amax);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    for (cublasLtMatrixLayout_t l : {la, lb, lc, ld}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(handle);
    return outcome;
}

void expect_success(const Fp8Case& c, const char* what) {
    const Outcome o = run(c);
    CHECK_MSG(o.heuristic == CUBLAS_STATUS_SUCCESS && o.matmul == CUBLAS_STATUS_SUCCESS, "%s: heuristic %d, matmul %d",
              what, (int)o.heuristic, (int)o.matmul);
}

}  // namespace

TEST(fp8_products_match_a_double_product_of_the_decoded_operands) {
    Fp8Case c;
    expect_success(c, "E4M3 x E4M3 -> bf16");
    c.a_type = CUDA_R_8F_E5M2;
    c.sa = 0.125f, c.sb = 1.0f / 64, c.amax = true;
    c.epilogue = CUBLASLT_EPILOGUE_BIAS;
    expect_success(c, "E5M2 x E4M3 -> bf16, scales, bias, amax");
    c.a_type = CUDA_R_8F_E4M3, c.b_type = CUDA_R_8F_E5M2;
    c.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    c.m = 48, c.n = 16, c.k = 96, c.batch = 2;
    expect_success(c, "E4M3 x E5M2 -> bf16, GELU_AUX_BIAS, batch of 2");
    c.epilogue = CUBLASLT_EPILOGUE_GELU;
    c.batch = 1;
    expect_success(c, "GELU");
}

TEST(fp8_products_with_fp32_and_fp8_outputs_beta_and_scale_c) {
    Fp8Case c;
    c.d_type = c.c_type = CUDA_R_32F;
    c.alpha = 0.5f, c.beta = 1.0f, c.sa = 2.0f, c.sb = 0.25f, c.sc = 0.5f;
    expect_success(c, "E4M3 x E4M3 -> fp32, beta 1, scale C");
    Fp8Case q;
    q.d_type = CUDA_R_8F_E4M3;
    q.sa = 1.0f / 256, q.sb = 1.0f / 128, q.sd = 16.0f, q.amax = true;
    q.epilogue = CUBLASLT_EPILOGUE_BIAS;
    expect_success(q, "E4M3 x E4M3 -> E4M3, D scale, amax");
    q.b_type = CUDA_R_8F_E5M2, q.d_type = CUDA_R_8F_E5M2;
    q.sd = 4096.0f;  // some values saturate at 57344
    expect_success(q, "E4M3 x E5M2 -> E5M2");
}

TEST(fp8_products_refuse_what_cublaslt_refuses_with_its_status) {
    const cublasStatus_t unsupported = CUBLAS_STATUS_NOT_SUPPORTED, invalid = CUBLAS_STATUS_INVALID_VALUE;
    struct Refusal {
        const char* what;
        cublasStatus_t status;
        bool heuristic_too;  // the heuristic sees the cause (all but pointers and scale pointers)
        void (*change)(Fp8Case&);
    };
    const Refusal refusals[] = {
        {"A not transposed (NN)", unsupported, true, [](Fp8Case& c) { c.op_a = CUBLAS_OP_N; }},
        {"B transposed (TT)", unsupported, true, [](Fp8Case& c) { c.op_b = CUBLAS_OP_T; }},
        {"E5M2 x E5M2", unsupported, true, [](Fp8Case& c) { c.a_type = c.b_type = CUDA_R_8F_E5M2; }},
        {"E4M3 x bf16", unsupported, true, [](Fp8Case& c) { c.b_type = CUDA_R_16BF; }},
        {"compute type 32F_FAST_TF32", unsupported, true, [](Fp8Case& c) { c.compute = CUBLAS_COMPUTE_32F_FAST_TF32; }},
        // A's and B's leading dimensions 8 bytes past a multiple of 16
        {"leading dimension not a multiple of 16 bytes", unsupported, true, [](Fp8Case& c) { c.pad = 8; }},
        {"D pointer 2 bytes off 16", unsupported, false, [](Fp8Case& c) { c.d_offset = 2; }},
        {"DGELU epilogue", unsupported, true, [](Fp8Case& c) { c.epilogue = CUBLASLT_EPILOGUE_DGELU; }},
        {"BGRADB epilogue", unsupported, true, [](Fp8Case& c) { c.epilogue = CUBLASLT_EPILOGUE_BGRADB; }},
        {"E5M2 D from E4M3 x E4M3", unsupported, true, [](Fp8Case& c) { c.d_type = CUDA_R_8F_E5M2; }},
        {"fp32 D with a bf16 C", unsupported, true, [](Fp8Case& c) { c.d_type = CUDA_R_32F; }},
        {"fp32 bias", unsupported, true,
         [](Fp8Case& c) { c.epilogue = CUBLASLT_EPILOGUE_BIAS, c.bias_type = CUDA_R_32F; }},
        {"GELU_AUX with an FP8 D", unsupported, true,
         [](Fp8Case& c) { c.d_type = CUDA_R_8F_E4M3, c.epilogue = CUBLASLT_EPILOGUE_GELU_AUX; }},
        {"bf16 product with an FP8 D", unsupported, true,
         [](Fp8Case& c) { c.a_type = c.b_type = CUDA_R_16BF, c.d_type = CUDA_R_8F_E4M3; }},
        {"A scale on a bf16 product", invalid, false, [](Fp8Case& c) { c.a_type = c.b_type = CUDA_R_16BF, c.sa = 2.0f; }},
        {"D scale with a bf16 D", invalid, false, [](Fp8Case& c) { c.sd = 2.0f; }},
        {"amax of an fp32 D", invalid, false, [](Fp8Case& c) { c.d_type = c.c_type = CUDA_R_32F, c.amax = true; }},
    };
    for (const Refusal& r : refusals) {
        Fp8Case c;
        r.change(c);
        const Outcome o = run(c);
        CHECK_MSG(o.matmul == r.status, "%s: cublasLtMatmul returned %d, expected %d", r.what, (int)o.matmul, (int)r.status);
        if (r.heuristic_too)
            CHECK_MSG(o.heuristic == unsupported, "%s: the heuristic returned %d", r.what, (int)o.heuristic);
    }
    Fp8Case weak;
    weak.min_alignment = 8;  // the preference promises only 8-byte aligned matrices
    CHECK(run(weak).heuristic == unsupported);
    printf("  %zu refusals checked\n", sizeof refusals / sizeof refusals[0] + 1);
}
