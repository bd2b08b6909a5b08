// FP8 products through cuBLASLt, for the linear layers' matmuls (not yet called by the model):
//   out (R×C) = sx · sy · (x (R×K) · yᵀ)  [+ out when accumulating]  [+ bias (C)]  [pre_gelu = that, out = gelu(it)]
// x (R×K) and y (C×K) are FP8 codes, row-major, K contiguous in both (E4M3 or E5M2, not both E5M2);
// sx and sy are their inverse scales in device memory (Fp8ScaleState::scale_inv, kernels/fp8_cast.h);
// out, bias and pre_gelu are floatX (bf16; fp32 in the fp32 build), row-major. Accumulation fp32
// (CUBLAS_COMPUTE_32F). R, C and K must be multiples of 16 and every pointer 16-byte aligned.
// In a linear layer (inp N×IC, weight OC×IC, dout N×OC):
//   forward   out (N×OC)     x = inp (E4M3),     y = weight (E4M3)
//   dinp      dinp (N×IC)    x = dout (E5M2),    y = weightᵀ (IC×OC, E4M3: fp8_cast_transpose of the weight)
//   dweight   dweight (OC×IC, accumulate)  x = doutᵀ (OC×N, E5M2), y = inpᵀ (IC×N, E4M3)
// so every operand has K contiguous, which is the one layout Hopper's FP8 GEMMs take: in cuBLASLt's
// column-major terms D (C×R) = op(A) · op(B) with A = y (K×C, ld K) transposed and B = x (K×R, ld K)
// not, the "TN" layout.
// Optionally the largest |value| of the result (before rounding to floatX) into a device float, for
// the current scale of whatever casts `out` next.
// Per call: 2·R·C·K FLOPs; reads (R·K + C·K) bytes + (C + R·C when accumulating)·e, writes R·C·e
// (twice with pre_gelu), e = sizeof(floatX).
//
// Descriptors and layouts are made once per configuration (shape, formats, accumulate, epilogue) and
// cached, with the heuristic's first algorithm (no timing: the bf16 products' timing and algorithm
// tables, kernels/matmul.h, are not extended to FP8 yet); the handle and workspace are
// kernels/matmul.h's. Where cuBLASLt has no algorithm for the fused epilogue (or cannot fuse: an fp32
// output takes no bias, amax or GELU in FP8 products), the product runs plain and the bias, GELU and
// amax follow in passes of their own, computing the same values.
#pragma once
#include <string>
#include <vector>

#include <cublasLt.h>

#include "kernels/fp8_cast.h"
#include "kernels/gelu.h"
#include "kernels/matmul.h"

// FP8 products on `device`: compute capability 8.9 or more, and a cuBLASLt with FP8 (11.11, CUDA 11.8,
// or later). false, with the reason in *why, otherwise. To be asked before allocating FP8 buffers.
inline bool fp8_supported(int device, std::string* why) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        if (why) *why = "cannot read the device's properties";
        return false;
    }
    if (prop.major * 10 + prop.minor < 89) {
        if (why) *why = "compute capability " + std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                        " has no FP8 tensor cores (8.9 or more: Ada, Hopper and later)";
        return false;
    }
#ifndef EMU_CUDA  // the emulator's stand-in reports version 0 and computes FP8 products
    const size_t version = cublasLtGetVersion();
    if (version < 111100) {
        if (why) *why = "cuBLASLt " + std::to_string(version) + " has no FP8 products (11.11 or later)";
        return false;
    }
#endif
    if (why) why->clear();
    return true;
}

inline cudaDataType_t fp8_cuda_type(Fp8Format f) { return f == Fp8Format::e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

struct MatmulFp8Key {
    int R, C, K;
    Fp8Format x_format, y_format;
    bool accumulate, amax;
    uint32_t epilogue;
    bool operator==(const MatmulFp8Key& o) const {
        return R == o.R && C == o.C && K == o.K && x_format == o.x_format && y_format == o.y_format &&
               accumulate == o.accumulate && amax == o.amax && epilogue == o.epilogue;
    }
};

struct MatmulFp8Choice {
    MatmulFp8Key key;
    bool found;  // false: no algorithm for this epilogue (cached too)
    cublasLtMatmulAlgo_t algo;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
};

struct MatmulFp8Cache {
    std::vector<MatmulFp8Choice> choices;
    void clear() {
        for (MatmulFp8Choice& c : choices) {
            cublasLtMatmulDescDestroy(c.desc);
            for (cublasLtMatrixLayout_t l : {c.a, c.b, c.d}) cublasLtMatrixLayoutDestroy(l);
        }
        choices.clear();
    }
    ~MatmulFp8Cache() { clear(); }
};
inline MatmulFp8Cache& matmul_fp8_cache() {
    static MatmulFp8Cache cache;
    return cache;
}

// The call's scale, bias, GELU-matrix and amax pointers into the descriptor (A is y, B is x).
inline void matmul_fp8_set_pointers(cublasLtMatmulDesc_t desc, const float* sx, const float* sy, const floatX* bias,
                                    const floatX* aux, const float* amax) {
    const void* pointers[] = {sy, sx, bias, aux, amax};
    const cublasLtMatmulDescAttributes_t which[] = {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                    CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                    CUBLASLT_MATMUL_DESC_AMAX_D_POINTER};
    for (int i = 0; i < 5; i++)
        if (pointers[i]) CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, which[i], &pointers[i], sizeof pointers[i]));
}

// The configuration's descriptor (TN, fp32 compute, bias type floatX) and layouts, and the heuristic's
// first algorithm for 16-byte aligned operands and the call's pointers.
inline MatmulFp8Choice matmul_fp8_first_call(const MatmulFp8Key& key, const float* sx, const float* sy,
                                             const floatX* bias, const floatX* aux, const float* amax) {
    MatmulContext& ctx = matmul_context();
    MatmulFp8Choice c{};
    c.key = key;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&c.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
    const cublasLtEpilogue_t epilogue = (cublasLtEpilogue_t)key.epilogue;
    const cudaDataType_t bias_type = MATMUL_DATA_TYPE;
    const int64_t aux_ld = key.C;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof op_t));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof op_n));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c.a, fp8_cuda_type(key.y_format), key.K, key.C, key.K));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c.b, fp8_cuda_type(key.x_format), key.K, key.R, key.K));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c.d, MATMUL_DATA_TYPE, key.C, key.R, key.C));
    matmul_fp8_set_pointers(c.desc, sx, sy, bias, aux, amax);
    cublasLtMatmulPreference_t preference;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    const uint64_t workspace_bytes = MATMUL_WORKSPACE_BYTES;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &workspace_bytes, sizeof workspace_bytes));
    const uint32_t alignment = 16;
    for (auto which : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                       CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, which, &alignment, sizeof alignment));
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(ctx.handle, c.desc, c.a, c.b, c.d, c.d, preference, 1, &result, &returned);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(preference));
    c.found = status == CUBLAS_STATUS_SUCCESS && returned > 0;
    if (c.found) c.algo = result.algo;
    return c;
}

// One cuBLASLt FP8 call; false (nothing computed) when cuBLASLt has no algorithm for this epilogue.
inline bool matmul_fp8_cublaslt(floatX* out, const __nv_fp8_storage_t* x, Fp8Format xf, const float* sx,
                                const __nv_fp8_storage_t* y, Fp8Format yf, const float* sy, int R, int C, int K,
                                bool accumulate, cublasLtEpilogue_t epilogue, const floatX* bias, floatX* aux,
                                float* amax, cudaStream_t stream) {
    MatmulContext& ctx = matmul_context();
    if (!ctx.handle) matmul_setup();
    const MatmulFp8Key key{R, C, K, xf, yf, accumulate, amax != nullptr, (uint32_t)epilogue};
    MatmulFp8Cache& cache = matmul_fp8_cache();
    MatmulFp8Choice* choice = nullptr;
    for (MatmulFp8Choice& c : cache.choices)
        if (c.key == key) choice = &c;
    if (!choice) {
        cache.choices.push_back(matmul_fp8_first_call(key, sx, sy, bias, aux, amax));
        choice = &cache.choices.back();
    }
    if (!choice->found) {
        if (epilogue == CUBLASLT_EPILOGUE_DEFAULT && !amax) {
            fprintf(stderr, "cuBLASLt has no algorithm for an FP8 %d x %d x %d product (%s x %s)\n", R, C, K,
                    fp8_format_name(xf), fp8_format_name(yf));
            exit(1);
        }
        return false;
    }
    matmul_fp8_set_pointers(choice->desc, sx, sy, bias, aux, amax);
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(ctx.handle, choice->desc, &alpha, y, choice->a, x, choice->b, &beta, out, choice->d,
                                out, choice->d, &choice->algo, ctx.workspace, MATMUL_WORKSPACE_BYTES, stream));
    return true;
}

// The largest |out| into *amax, in a pass of its own (the fallback of the fused amax).
inline void matmul_fp8_amax_pass(float* amax, const floatX* out, size_t n, cudaStream_t stream) {
    CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
    LAUNCH(fp8_amax_kernel<floatX>, fp8_cast_grid(n), FP8_CAST_BLOCK, 0, stream, amax, out, n);
    CUDA_CHECK(cudaGetLastError());
}

// out (R×C) [+]= sx·sy·(x · yᵀ) [+ bias], with pre_gelu: pre_gelu = that and out = gelu(pre_gelu)
// (accumulate must then be false); amax (may be null): the largest |out| (|gelu| with pre_gelu). See
// the top of this file. Exits with one line naming the call for shapes or pointers cuBLASLt's FP8
// products cannot take.
inline void matmul_fp8(floatX* out, const __nv_fp8_storage_t* x, Fp8Format xf, const float* sx,
                       const __nv_fp8_storage_t* y, Fp8Format yf, const float* sy, int R, int C, int K, bool accumulate,
                       cudaStream_t stream, const floatX* bias = nullptr, floatX* pre_gelu = nullptr,
                       float* amax = nullptr) {
    matmul_require(R > 0 && C > 0 && K > 0 && R % 16 == 0 && C % 16 == 0 && K % 16 == 0, "matmul_fp8",
                   "R, C and K must be positive multiples of 16 (cuBLASLt's FP8 products)");
    matmul_require(!(xf == Fp8Format::e5m2 && yf == Fp8Format::e5m2), "matmul_fp8", "x and y cannot both be E5M2");
    matmul_require(fp8_aligned16(out) && fp8_aligned16(x) && fp8_aligned16(y) && fp8_aligned16(bias) &&
                       fp8_aligned16(pre_gelu) && sx && sy,
                   "matmul_fp8", "out, x, y, bias and pre_gelu must be 16-byte aligned, sx and sy given");
    matmul_require(!(pre_gelu && (accumulate || pre_gelu == out)), "matmul_fp8",
                   "pre_gelu needs accumulate false and another buffer than out");
    const bool fuse = matmul_context().fuse_epilogues;
    const cublasLtEpilogue_t epilogue = pre_gelu ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                                                 : (bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
    const bool fused_ok = MATMUL_DATA_TYPE != CUDA_R_32F || epilogue == CUBLASLT_EPILOGUE_DEFAULT;
    const bool fused_amax = amax && MATMUL_DATA_TYPE != CUDA_R_32F;
    if (fuse && fused_ok && (epilogue != CUBLASLT_EPILOGUE_DEFAULT || fused_amax) &&
        matmul_fp8_cublaslt(out, x, xf, sx, y, yf, sy, R, C, K, accumulate, epilogue, bias, pre_gelu,
                            fused_amax ? amax : nullptr, stream)) {
        if (amax && !fused_amax) matmul_fp8_amax_pass(amax, out, (size_t)R * C, stream);
        return;
    }
    floatX* product = pre_gelu ? pre_gelu : out;
    matmul_fp8_cublaslt(product, x, xf, sx, y, yf, sy, R, C, K, accumulate, CUBLASLT_EPILOGUE_DEFAULT, nullptr,
                        nullptr, nullptr, stream);
    if (bias) matmul_add_bias(product, bias, R, C, stream);
    if (pre_gelu) gelu_forward(out, pre_gelu, (size_t)R * C, stream);
    if (amax) matmul_fp8_amax_pass(amax, out, (size_t)R * C, stream);
}

// Forgets every FP8 configuration (descriptors, layouts, algorithms).
inline void matmul_fp8_clear() { matmul_fp8_cache().clear(); }
inline int matmul_fp8_configurations() { return (int)matmul_fp8_cache().choices.size(); }
