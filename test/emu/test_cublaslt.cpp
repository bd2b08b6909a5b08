// Tests of the host cuBLASLt stand-in (emu/cublaslt_host.cpp) against a plain triple loop in double
// precision: every transpose, epilogue, data type, batch and beta combination, on random inputs with
// non-square shapes, leading dimensions above the minimum and batch strides with gaps. Outputs start
// poisoned (all bytes 0xFF, a NaN) and every element the call must not touch is checked to still be.
// Buffers are allocated to exactly the extent their layout spans, so ASan catches any overrun.
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "test/test.h"

namespace {

// A batch of column-major matrices (or vectors: cols = 1) in one exactly-sized allocation.
struct Buffer {
    cudaDataType type = CUDA_R_32F;
    int64_t rows = 0, cols = 0, ld = 0, stride = 0;
    int batch = 1;
    std::vector<unsigned char> bytes;

    Buffer() = default;
    Buffer(cudaDataType t, int64_t r, int64_t c, int64_t l, int64_t s, int b)
        : type(t), rows(r), cols(c), ld(l), stride(s), batch(b) {
        size_t elements = (size_t)((b - 1) * s + (c - 1) * l + r);
        bytes.assign(elements * element_size(), 0xFF);  // 0xFF.. is a NaN in fp32 and bf16
    }
    size_t element_size() const { return type == CUDA_R_32F ? 4 : 2; }
    size_t index(int b, int64_t i, int64_t j) const { return (size_t)(b * stride + j * ld + i); }
    double get(int b, int64_t i, int64_t j) const {
        size_t at = index(b, i, j);
        if (type == CUDA_R_32F) return reinterpret_cast<const float*>(bytes.data())[at];
        return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(bytes.data())[at]);
    }
    void set(int b, int64_t i, int64_t j, float v) {
        size_t at = index(b, i, j);
        if (type == CUDA_R_32F)
            reinterpret_cast<float*>(bytes.data())[at] = v;
        else
            reinterpret_cast<__nv_bfloat16*>(bytes.data())[at] = __float2bfloat16(v);
    }
    void fill_random(std::mt19937& rng, float lo, float hi) {
        std::uniform_real_distribution<float> u(lo, hi);
        for (int b = 0; b < batch; b++)
            for (int64_t j = 0; j < cols; j++)
                for (int64_t i = 0; i < rows; i++) set(b, i, j, u(rng));
    }
    // True when every byte outside the matrices' elements still holds the 0xFF poison.
    bool padding_untouched() const {
        std::vector<bool> inside(bytes.size() / element_size(), false);
        for (int b = 0; b < batch; b++)
            for (int64_t j = 0; j < cols; j++)
                for (int64_t i = 0; i < rows; i++) inside[index(b, i, j)] = true;
        for (size_t e = 0; e < inside.size(); e++)
            if (!inside[e])
                for (size_t k = 0; k < element_size(); k++)
                    if (bytes[e * element_size() + k] != 0xFF) return false;
        return true;
    }
    void* data() { return bytes.data(); }
};

// GELU by its definition (tanh approximation) in double; its derivative by central differences.
double gelu_ref(double x) {
    const double pi = 3.14159265358979323846;
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}
double gelu_grad_ref(double x) {
    const double h = 1e-5;
    return (gelu_ref(x + h) - gelu_ref(x - h)) / (2 * h);
}

const char* type_label(cudaDataType t) { return t == CUDA_R_32F ? "f32" : "bf16"; }

struct Case {
    bool trans_a = false, trans_b = false;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    cudaDataType ab_type = CUDA_R_32F, cd_type = CUDA_R_32F;
    bool set_bias_type = false;  // set CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE explicitly to bf16
    int batch = 1;
    float alpha = 0.75f, beta = 0.0f;
    int64_t m = 13, n = 11, k = 17;
    std::string label() const {
        return tst::format("m%lld n%lld k%lld op(A)=%c op(B)=%c epilogue=%d A/B=%s C/D=%s bias=%s batch=%d beta=%g",
                           (long long)m, (long long)n, (long long)k, trans_a ? 'T' : 'N', trans_b ? 'T' : 'N',
                           (int)epilogue, type_label(ab_type), type_label(cd_type),
                           set_bias_type ? "bf16" : "default", batch, beta);
    }
};

bool has(cublasLtEpilogue_t e, std::initializer_list<cublasLtEpilogue_t> set) {
    for (auto s : set)
        if (e == s) return true;
    return false;
}

void check_status(cublasStatus_t s, const char* what) {
    CHECK_MSG(s == CUBLAS_STATUS_SUCCESS, "%s returned %d", what, (int)s);
}

// Compares out against ref within tol * (scale + |ref|), and the rel. L2 error against rel_tol.
void compare(const std::vector<double>& out, const std::vector<double>& ref, const std::vector<double>& scale,
             double tol, double rel_tol, const std::string& what) {
    for (size_t e = 0; e < out.size(); e++)
        CHECK_MSG(std::fabs(out[e] - ref[e]) <= tol * (scale[e] + std::fabs(ref[e])) + 1e-30,
                  "%s: element %zu is %.9g, reference %.9g", what.c_str(), e, out[e], ref[e]);
    double err = tst::rel_l2_error(out.data(), ref.data(), out.size());
    CHECK_MSG(err <= rel_tol, "%s: relative L2 error %.3g > %.3g", what.c_str(), err, rel_tol);
}

void run_case(const Case& c) {
    const std::string label = c.label();
    const cublasLtEpilogue_t e = c.epilogue;
    const bool add_bias = has(e, {CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX_BIAS});
    const bool gelu = has(e, {CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX,
                              CUBLASLT_EPILOGUE_GELU_AUX_BIAS});
    const bool aux_out = has(e, {CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_GELU_AUX_BIAS});
    const bool dgelu = has(e, {CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_DGELU_BGRAD});
    const bool bgrad_d = e == CUBLASLT_EPILOGUE_DGELU_BGRAD, bgrad_a = e == CUBLASLT_EPILOGUE_BGRADA,
               bgrad_b = e == CUBLASLT_EPILOGUE_BGRADB;
    const bool uses_bias = add_bias || bgrad_d || bgrad_a || bgrad_b;
    const int64_t m = c.m, n = c.n, k = c.k;
    const int nb = c.batch;

    // Layouts with leading dimensions and batch strides above the minimum.
    int64_t a_rows = c.trans_a ? k : m, a_cols = c.trans_a ? m : k;
    int64_t b_rows = c.trans_b ? n : k, b_cols = c.trans_b ? k : n;
    Buffer A(c.ab_type, a_rows, a_cols, a_rows + 3, (a_rows + 3) * a_cols + 5, nb);
    Buffer B(c.ab_type, b_rows, b_cols, b_rows + 2, (b_rows + 2) * b_cols + 7, nb);
    Buffer C(c.cd_type, m, n, m + 1, (m + 1) * n + 3, nb);
    Buffer D(c.cd_type, m, n, m + 4, (m + 4) * n + 6, nb);
    cudaDataType bias_type = c.set_bias_type ? CUDA_R_16BF : c.cd_type;
    int64_t bias_len = bgrad_b ? n : m;
    Buffer bias(bias_type, bias_len, 1, bias_len, bias_len + 2, nb);
    int64_t aux_ld = (m + 7) / 8 * 8 + 8;  // > m and a multiple of 8, as cuBLASLt requires
    Buffer aux(c.cd_type, m, n, aux_ld, aux_ld * n + 8, nb);

    std::mt19937 rng(12345 + (unsigned)e * 7 + (c.trans_a ? 1 : 0) + (c.trans_b ? 2 : 0) + nb * 11);
    A.fill_random(rng, -1, 1);
    B.fill_random(rng, -1, 1);
    if (c.beta != 0) C.fill_random(rng, -1, 1);
    if (add_bias) bias.fill_random(rng, -1, 1);
    if (dgelu) aux.fill_random(rng, -3, 3);
    const Buffer C_before = C, aux_before = aux, bias_before = bias;

    // The call, as a trainer makes it.
    cublasLtHandle_t handle;
    check_status(cublasLtCreate(&handle), "cublasLtCreate");
    cublasLtMatmulDesc_t desc;
    check_status(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
    cublasOperation_t ta = c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    check_status(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "TRANSA");
    check_status(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "TRANSB");
    check_status(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), "EPILOGUE");
    if (uses_bias) {
        void* p = bias.data();
        check_status(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof p), "BIAS");
        int64_t stride = bias.stride;
        check_status(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &stride,
                                                    sizeof stride), "BIAS_BATCH_STRIDE");
        if (c.set_bias_type) {
            int32_t t = CUDA_R_16BF;
            check_status(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof t),
                         "BIAS_DATA_TYPE");
        }
    }
    if (aux_out || dgelu) {
        void* p = aux.data();
        check_status(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p, sizeof p),
                     "AUX_POINTER");
        check_status(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                    sizeof aux_ld), "AUX_LD");
        int64_t stride = aux.stride;
        check_status(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &stride,
                                                    sizeof stride), "AUX_BATCH_STRIDE");
    }
    cublasLtMatrixLayout_t layouts[4];
    Buffer* buffers[4] = {&A, &B, &C, &D};
    for (int l = 0; l < 4; l++) {
        Buffer& buf = *buffers[l];
        check_status(cublasLtMatrixLayoutCreate(&layouts[l], buf.type, buf.rows, buf.cols, buf.ld), "LayoutCreate");
        int32_t count = nb;
        int64_t stride = buf.stride;
        check_status(cublasLtMatrixLayoutSetAttribute(layouts[l], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                      sizeof count), "BATCH_COUNT");
        check_status(cublasLtMatrixLayoutSetAttribute(layouts[l], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                      &stride, sizeof stride), "STRIDED_BATCH_OFFSET");
    }
    cublasLtMatmulPreference_t pref;
    check_status(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
    size_t workspace_bytes = 1 << 20;
    check_status(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &workspace_bytes, sizeof workspace_bytes), "MAX_WORKSPACE");
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    check_status(cublasLtMatmulAlgoGetHeuristic(handle, desc, layouts[0], layouts[1], layouts[2], layouts[3], pref,
                                                1, &heuristic, &found), "AlgoGetHeuristic");
    CHECK_MSG(found == 1 && heuristic.workspaceSize <= workspace_bytes, "%s: heuristic found %d", label.c_str(),
              found);
    std::vector<unsigned char> workspace(workspace_bytes);
    check_status(cublasLtMatmul(handle, desc, &c.alpha, A.data(), layouts[0], B.data(), layouts[1], &c.beta,
                                C.data(), layouts[2], D.data(), layouts[3], &heuristic.algo, workspace.data(),
                                workspace_bytes, nullptr), "cublasLtMatmul");
    for (auto l : layouts) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(handle);

    // The reference: a triple loop in double, reading the same (possibly bf16-rounded) inputs.
    auto op_a = [&](int b, int64_t i, int64_t t) { return c.trans_a ? A.get(b, t, i) : A.get(b, i, t); };
    auto op_b = [&](int b, int64_t t, int64_t j) { return c.trans_b ? B.get(b, j, t) : B.get(b, t, j); };
    std::vector<double> d_out, d_ref, d_scale, aux_out_v, aux_ref, aux_scale, g_out, g_ref, g_scale;
    for (int b = 0; b < nb; b++) {
        std::vector<double> row_sum(m, 0), row_scale(m, 0);
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < m; i++) {
                double z = 0, mag = 0;
                for (int64_t t = 0; t < k; t++) {
                    z += op_a(b, i, t) * op_b(b, t, j);
                    mag += std::fabs(op_a(b, i, t) * op_b(b, t, j));
                }
                z *= c.alpha;
                mag *= std::fabs(c.alpha);
                if (c.beta != 0) {
                    z += c.beta * C_before.get(b, i, j);
                    mag += std::fabs(c.beta * C_before.get(b, i, j));
                }
                if (add_bias) {
                    z += bias_before.get(b, i, 0);
                    mag += std::fabs(bias_before.get(b, i, 0));
                }
                double out = z;
                if (aux_out) {
                    aux_out_v.push_back(aux.get(b, i, j));
                    aux_ref.push_back(z);
                    aux_scale.push_back(mag);
                }
                if (gelu) out = gelu_ref(z);
                if (dgelu) out = z * gelu_grad_ref(aux_before.get(b, i, j));
                d_out.push_back(D.get(b, i, j));
                d_ref.push_back(out);
                d_scale.push_back(1.5 * mag);
                row_sum[i] += out;
                row_scale[i] += 1.5 * mag;
            }
        if (bgrad_d)
            for (int64_t i = 0; i < m; i++) {
                g_out.push_back(bias.get(b, i, 0));
                g_ref.push_back(row_sum[i]);
                g_scale.push_back(row_scale[i]);
            }
        if (bgrad_a)
            for (int64_t i = 0; i < m; i++) {
                double s = 0, mag = 0;
                for (int64_t t = 0; t < k; t++) s += op_a(b, i, t), mag += std::fabs(op_a(b, i, t));
                g_out.push_back(bias.get(b, i, 0));
                g_ref.push_back(s);
                g_scale.push_back(mag);
            }
        if (bgrad_b)
            for (int64_t j = 0; j < n; j++) {
                double s = 0, mag = 0;
                for (int64_t t = 0; t < k; t++) s += op_b(b, t, j), mag += std::fabs(op_b(b, t, j));
                g_out.push_back(bias.get(b, j, 0));
                g_ref.push_back(s);
                g_scale.push_back(mag);
            }
    }
    // fp32 results: fp32 accumulation error only. bf16 results: one rounding, at most 2^-9 relative.
    double tol_d = c.cd_type == CUDA_R_32F ? 1e-5 : 4e-3, rel_d = c.cd_type == CUDA_R_32F ? 1e-5 : 1e-2;
    compare(d_out, d_ref, d_scale, tol_d, rel_d, label + " D");
    if (aux_out) compare(aux_out_v, aux_ref, aux_scale, tol_d, rel_d, label + " aux");
    if (bgrad_d || bgrad_a || bgrad_b) {
        double tol_g = bias_type == CUDA_R_32F ? 1e-5 : 4e-3, rel_g = bias_type == CUDA_R_32F ? 1e-5 : 1e-2;
        compare(g_out, g_ref, g_scale, tol_g, rel_g, label + " bias gradient");
    }
    CHECK_MSG(D.padding_untouched(), "%s: D written outside its matrices", label.c_str());
    CHECK_MSG(C.bytes == C_before.bytes, "%s: C was modified", label.c_str());
    if (!aux_out) CHECK_MSG(aux.bytes == aux_before.bytes, "%s: aux was modified", label.c_str());
    if (aux_out) CHECK_MSG(aux.padding_untouched(), "%s: aux written outside its matrices", label.c_str());
    if (!(bgrad_d || bgrad_a || bgrad_b)) CHECK_MSG(bias.bytes == bias_before.bytes, "%s: bias modified", label.c_str());
    if (bgrad_d || bgrad_a || bgrad_b)
        CHECK_MSG(bias.padding_untouched(), "%s: bias gradient written outside its vectors", label.c_str());
}

// Every transpose pair x type combination x batch (1, 3) x beta (0, 0.5) for one epilogue.
void run_all_combinations(cublasLtEpilogue_t epilogue) {
    struct Types {
        cudaDataType ab, cd;
        bool bias_bf16;
    };
    // (bias_bf16: the bias type set explicitly to bf16, which is D's type; a bias type other than D's
    // is refused: refuses_what_the_library_refuses.)
    const Types types[] = {{CUDA_R_32F, CUDA_R_32F, false}, {CUDA_R_16BF, CUDA_R_16BF, true},
                           {CUDA_R_16BF, CUDA_R_32F, false}};
    const bool gelu = has(epilogue, {CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX,
                                     CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU,
                                     CUBLASLT_EPILOGUE_DGELU_BGRAD});
    for (int trans = 0; trans < 4; trans++)
        for (const Types& t : types)
            for (int batch : {1, 3})
                for (float beta : {0.0f, 0.5f}) {
                    if (gelu && beta != 0.0f) continue;  // refused (refuses_what_the_library_refuses)
                    Case c;
                    c.trans_a = trans & 1;
                    c.trans_b = trans & 2;
                    c.epilogue = epilogue;
                    c.ab_type = t.ab;
                    c.cd_type = t.cd;
                    c.set_bias_type = t.bias_bf16;
                    c.batch = batch;
                    c.beta = beta;
                    run_case(c);
                }
}

}  // namespace

TEST(epilogue_default) { run_all_combinations(CUBLASLT_EPILOGUE_DEFAULT); }
TEST(epilogue_bias) { run_all_combinations(CUBLASLT_EPILOGUE_BIAS); }
TEST(epilogue_gelu) { run_all_combinations(CUBLASLT_EPILOGUE_GELU); }
TEST(epilogue_gelu_bias) { run_all_combinations(CUBLASLT_EPILOGUE_GELU_BIAS); }
TEST(epilogue_gelu_aux) { run_all_combinations(CUBLASLT_EPILOGUE_GELU_AUX); }
TEST(epilogue_gelu_aux_bias) { run_all_combinations(CUBLASLT_EPILOGUE_GELU_AUX_BIAS); }
TEST(epilogue_dgelu) { run_all_combinations(CUBLASLT_EPILOGUE_DGELU); }
TEST(epilogue_dgelu_bgrad) { run_all_combinations(CUBLASLT_EPILOGUE_DGELU_BGRAD); }
TEST(epilogue_bgrada) { run_all_combinations(CUBLASLT_EPILOGUE_BGRADA); }
TEST(epilogue_bgradb) { run_all_combinations(CUBLASLT_EPILOGUE_BGRADB); }

// Shapes large enough that OpenBLAS takes its blocked, multi-threaded path, and a k = 1 edge.
TEST(larger_and_degenerate_shapes) {
    Case big;
    big.m = 200, big.n = 150, big.k = 300, big.trans_a = true, big.beta = 0.5f;
    big.epilogue = CUBLASLT_EPILOGUE_BIAS;
    run_case(big);
    big.beta = 0.0f, big.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;  // GELU epilogues: beta = 0 only
    run_case(big);
    big.ab_type = big.cd_type = CUDA_R_16BF, big.epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD;
    run_case(big);
    Case thin;
    thin.m = 1, thin.n = 5, thin.k = 1, thin.epilogue = CUBLASLT_EPILOGUE_BGRADB;
    run_case(thin);
}

namespace {

// The calls of one plain fp32 matmul, for the tests below.
struct Plain {
    cublasLtHandle_t handle = nullptr;
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
    Plain(cudaDataType type, int64_t m, int64_t n, int64_t k, cublasOperation_t ta, cublasOperation_t tb) {
        check_status(cublasLtCreate(&handle), "cublasLtCreate");
        check_status(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F), "DescCreate");
        check_status(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "TRANSA");
        check_status(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "TRANSB");
        check_status(cublasLtMatrixLayoutCreate(&a, type, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m,
                                                ta == CUBLAS_OP_N ? m : k), "layout A");
        check_status(cublasLtMatrixLayoutCreate(&b, type, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k,
                                                tb == CUBLAS_OP_N ? k : n), "layout B");
        check_status(cublasLtMatrixLayoutCreate(&c, type, m, n, m), "layout C");
        check_status(cublasLtMatrixLayoutCreate(&d, type, m, n, m), "layout D");
    }
    ~Plain() {
        for (auto l : {a, b, c, d}) cublasLtMatrixLayoutDestroy(l);
        cublasLtMatmulDescDestroy(desc);
        cublasLtDestroy(handle);
    }
};

}  // namespace

// A GPT-2 linear layer as a trainer writes it: row-major out[BT][OC] = inp[BT][C] . W[OC][C]^T + b,
// computed as the column-major D (OC x BT) = op_T(W as C x OC) . inp (C x BT), with the bias epilogue;
// then the weight gradient accumulated into an existing dW (beta = 1, C == D) and the bias gradient
// through BGRADB, as in the backward pass. Checked against row-major loops.
TEST(gpt2_linear_layer_row_major) {
    const int64_t BT = 24, C = 20, OC = 36;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> inp(BT * C), w(OC * C), bias(OC), out(BT * OC, NAN);
    for (auto* v : {&inp, &w, &bias})
        for (float& x : *v) x = u(rng);
    {
        Plain p(CUDA_R_32F, OC, BT, C, CUBLAS_OP_T, CUBLAS_OP_N);
        cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BIAS;
        const float* bias_ptr = bias.data();
        check_status(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), "EPILOGUE");
        check_status(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                                    sizeof bias_ptr), "BIAS");
        float one = 1, zero = 0;
        check_status(cublasLtMatmul(p.handle, p.desc, &one, w.data(), p.a, inp.data(), p.b, &zero, out.data(), p.c,
                                    out.data(), p.d, nullptr, nullptr, 0, nullptr), "forward");
    }
    for (int64_t t = 0; t < BT; t++)
        for (int64_t o = 0; o < OC; o++) {
            double ref = bias[o];
            for (int64_t c = 0; c < C; c++) ref += (double)inp[t * C + c] * w[o * C + c];
            CHECK_NEAR(out[t * OC + o], ref, 1e-5 * (1 + std::fabs(ref)));
        }

    // Backward: dW[OC][C] += dout^T . inp, i.e. column-major (C x OC) += inp (C x BT) . op_T(dout as OC x BT);
    // dbias[OC] = sum over BT of dout, from BGRADB (op(B) = dout^T is BT x OC, reduced over k = BT).
    std::vector<float> dout(BT * OC), dw(OC * C), dw_before, dbias(OC, NAN);
    for (float& x : dout) x = u(rng);
    for (float& x : dw) x = u(rng);
    dw_before = dw;
    {
        Plain p(CUDA_R_32F, C, OC, BT, CUBLAS_OP_N, CUBLAS_OP_T);
        cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BGRADB;
        float* dbias_ptr = dbias.data();
        check_status(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), "EPILOGUE");
        check_status(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias_ptr,
                                                    sizeof dbias_ptr), "BIAS");
        float one = 1;
        check_status(cublasLtMatmul(p.handle, p.desc, &one, inp.data(), p.a, dout.data(), p.b, &one, dw.data(), p.c,
                                    dw.data(), p.d, nullptr, nullptr, 0, nullptr), "backward");
    }
    for (int64_t o = 0; o < OC; o++) {
        double db = 0;
        for (int64_t t = 0; t < BT; t++) db += dout[t * OC + o];
        CHECK_NEAR(dbias[o], db, 1e-5 * (1 + std::fabs(db)));
        for (int64_t c = 0; c < C; c++) {
            double ref = dw_before[o * C + c];
            for (int64_t t = 0; t < BT; t++) ref += (double)dout[t * OC + o] * inp[t * C + c];
            CHECK_NEAR(dw[o * C + c], ref, 1e-5 * (1 + std::fabs(ref)));
        }
    }
}

// What the stand-in cannot run is refused with a status (and a line on stderr), never computed wrongly.
TEST(refuses_what_it_cannot_run) {
    float x[64] = {0}, one = 1, zero = 0;
    {
        Plain p(CUDA_R_16F, 4, 4, 4, CUBLAS_OP_N, CUBLAS_OP_N);  // fp16 data: not supported
        CHECK(cublasLtMatmul(p.handle, p.desc, &one, x, p.a, x, p.b, &zero, x, p.c, x, p.d, nullptr, nullptr, 0,
                             nullptr) == CUBLAS_STATUS_NOT_SUPPORTED);
        cublasLtMatmulPreference_t pref;
        check_status(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
        cublasLtMatmulHeuristicResult_t result;
        int found = 7;
        CHECK(cublasLtMatmulAlgoGetHeuristic(p.handle, p.desc, p.a, p.b, p.c, p.d, pref, 1, &result, &found) ==
              CUBLAS_STATUS_NOT_SUPPORTED);
        CHECK(found == 0);
        cublasLtMatmulPreferenceDestroy(pref);
    }
    {
        Plain p(CUDA_R_32F, 4, 4, 4, CUBLAS_OP_N, CUBLAS_OP_N);
        uint64_t rows = 5;  // op(A) no longer m x k
        check_status(cublasLtMatrixLayoutSetAttribute(p.a, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof rows), "ROWS");
        CHECK(cublasLtMatmul(p.handle, p.desc, &one, x, p.a, x, p.b, &zero, x, p.c, x, p.d, nullptr, nullptr, 0,
                             nullptr) == CUBLAS_STATUS_INVALID_VALUE);
    }
    {
        Plain p(CUDA_R_32F, 4, 4, 4, CUBLAS_OP_N, CUBLAS_OP_N);
        int64_t too_small_ld = 3;  // below the 4 rows of C
        check_status(cublasLtMatrixLayoutSetAttribute(p.c, CUBLASLT_MATRIX_LAYOUT_LD, &too_small_ld,
                                                      sizeof too_small_ld), "LD");
        CHECK(cublasLtMatmul(p.handle, p.desc, &one, x, p.a, x, p.b, &zero, x, p.c, x, p.d, nullptr, nullptr, 0,
                             nullptr) == CUBLAS_STATUS_INVALID_VALUE);
    }
    {
        Plain p(CUDA_R_32F, 4, 4, 4, CUBLAS_OP_N, CUBLAS_OP_N);
        cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_GELU_AUX;  // aux pointer never set
        check_status(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), "EPILOGUE");
        CHECK(cublasLtMatmul(p.handle, p.desc, &one, x, p.a, x, p.b, &zero, x, p.c, x, p.d, nullptr, nullptr, 0,
                             nullptr) == CUBLAS_STATUS_INVALID_VALUE);
        e = CUBLASLT_EPILOGUE_RELU;  // not one a GPT-2 trainer uses
        check_status(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), "EPILOGUE");
        CHECK(cublasLtMatmul(p.handle, p.desc, &one, x, p.a, x, p.b, &zero, x, p.c, x, p.d, nullptr, nullptr, 0,
                             nullptr) == CUBLAS_STATUS_NOT_SUPPORTED);
        int16_t wrong_size = 0;  // attributes are checked against their documented size
        CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &wrong_size, sizeof wrong_size) ==
              CUBLAS_STATUS_INVALID_VALUE);
    }
}

// Under ASan, a layout that runs past its operand's allocation is reported (the stand-in reads every
// operand element in its own, instrumented code before handing fp32 copies to OpenBLAS). The test
// runs itself in a child process with CUBLASLT_OVERRUN_CHILD set; the child makes the bad call.
TEST(asan_reports_operand_overrun) {
#if defined(__SANITIZE_ADDRESS__)
    if (getenv("CUBLASLT_OVERRUN_CHILD")) {
        Plain p(CUDA_R_32F, 8, 8, 8, CUBLAS_OP_N, CUBLAS_OP_N);
        std::vector<float> a(8 * 8 - 1), b(8 * 8), d(8 * 8);  // A is one element short
        float one = 1, zero = 0;
        cublasLtMatmul(p.handle, p.desc, &one, a.data(), p.a, b.data(), p.b, &zero, d.data(), p.c, d.data(), p.d,
                       nullptr, nullptr, 0, nullptr);
        return;
    }
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(len > 0);
    self[len] = '\0';
    std::string output;
    int status = tst::run_command(std::string("CUBLASLT_OVERRUN_CHILD=1 ") + self + " asan_reports_operand_overrun", &output);
    CHECK_MSG(status != 0 && output.find("heap-buffer-overflow") != std::string::npos,
              "child exited %d without an ASan report:\n%s", status, output.c_str());
#else
    SKIP("needs AddressSanitizer: run `make SAN=1 test`");
#endif
}

// What the real cuBLASLt refuses, the stand-in refuses too (rules at the top of emu/cublaslt_host.cpp):
// each case is first run as given (accepted: the call is valid otherwise), then with one rule broken,
// when the heuristic must find no algorithm and cublasLtMatmul must return an error status.
namespace {

struct EpilogueCall {
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    int64_t aux_ld = 8;
    size_t bias_shift = 0, aux_shift = 0;  // bytes added to 16-byte aligned pointers
    int32_t bias_type = -1;                // -1: not set (D's type)
    float beta = 0.0f;
};

// m = n = k = 8, fp32; returns {heuristic status, number of algorithms, cublasLtMatmul status}.
struct Outcome {
    cublasStatus_t heuristic;
    int found;
    cublasStatus_t matmul;
};
Outcome run_epilogue_call(const EpilogueCall& call) {
    const int64_t m = 8;
    Plain p(CUDA_R_32F, m, m, m, CUBLAS_OP_N, CUBLAS_OP_N);
    alignas(16) static float a[64], b[64], c[64], d[64], bias[16 + 8], aux[16 * 8 + 8];
    for (int i = 0; i < 64; i++) a[i] = b[i] = c[i] = 0.01f * i;
    for (float& x : aux) x = 0.5f;
    for (float& x : bias) x = 0.25f;
    cublasLtEpilogue_t e = call.epilogue;
    check_status(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), "EPILOGUE");
    void* bias_pointer = reinterpret_cast<char*>(bias) + call.bias_shift;
    void* aux_pointer = reinterpret_cast<char*>(aux) + call.aux_shift;
    check_status(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_pointer,
                                                sizeof bias_pointer), "BIAS_POINTER");
    check_status(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux_pointer,
                                                sizeof aux_pointer), "AUX_POINTER");
    check_status(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &call.aux_ld,
                                                sizeof call.aux_ld), "AUX_LD");
    if (call.bias_type != -1)
        check_status(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &call.bias_type,
                                                    sizeof call.bias_type), "BIAS_DATA_TYPE");
    cublasLtMatmulPreference_t pref;
    check_status(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
    cublasLtMatmulHeuristicResult_t result;
    Outcome out;
    out.found = 0;
    out.heuristic = cublasLtMatmulAlgoGetHeuristic(p.handle, p.desc, p.a, p.b, p.c, p.d, pref, 1, &result, &out.found);
    cublasLtMatmulPreferenceDestroy(pref);
    const float one = 1.0f;
    out.matmul = cublasLtMatmul(p.handle, p.desc, &one, a, p.a, b, p.b, &call.beta, c, p.c, d, p.d, nullptr, nullptr,
                                0, nullptr);
    return out;
}

void check_accepted(const EpilogueCall& call, const char* what) {
    const Outcome o = run_epilogue_call(call);
    CHECK_MSG(o.heuristic == CUBLAS_STATUS_SUCCESS && o.found == 1 && o.matmul == CUBLAS_STATUS_SUCCESS,
              "%s: valid call refused (heuristic %d, %d found, matmul %d)", what, (int)o.heuristic, o.found,
              (int)o.matmul);
}
void check_refused(const EpilogueCall& call, const char* what, bool heuristic_sees_it = true) {
    const Outcome o = run_epilogue_call(call);
    if (heuristic_sees_it)
        CHECK_MSG(o.heuristic != CUBLAS_STATUS_SUCCESS && o.found == 0, "%s: the heuristic found an algorithm",
                  what);
    CHECK_MSG(o.matmul != CUBLAS_STATUS_SUCCESS, "%s: cublasLtMatmul accepted it", what);
}

}  // namespace

TEST(refuses_what_the_library_refuses) {
    EpilogueCall gelu_aux;
    gelu_aux.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    check_accepted(gelu_aux, "GELU_AUX_BIAS, aux ld 8");
    EpilogueCall ld16 = gelu_aux;
    ld16.aux_ld = 16;
    check_accepted(ld16, "GELU_AUX_BIAS, aux ld 16");
    EpilogueCall ld12 = gelu_aux;
    ld12.aux_ld = 12;  // >= m, not a multiple of 8
    check_refused(ld12, "EPILOGUE_AUX_LD 12");
    EpilogueCall dgelu = gelu_aux;
    dgelu.epilogue = CUBLASLT_EPILOGUE_DGELU;
    dgelu.aux_ld = 12;
    check_refused(dgelu, "DGELU with EPILOGUE_AUX_LD 12");

    EpilogueCall bias;
    bias.epilogue = CUBLASLT_EPILOGUE_BIAS;
    check_accepted(bias, "BIAS");
    EpilogueCall shifted_bias = bias;
    shifted_bias.bias_shift = 8;  // 8-byte aligned only
    check_refused(shifted_bias, "bias pointer 8-byte aligned");
    EpilogueCall shifted_aux = gelu_aux;
    shifted_aux.aux_shift = 4;
    check_refused(shifted_aux, "aux pointer 4-byte aligned");
    EpilogueCall bf16_bias = bias;
    bf16_bias.bias_type = CUDA_R_16BF;  // D is fp32
    check_refused(bf16_bias, "bf16 bias with fp32 output");
    EpilogueCall bgrad = bias;
    bgrad.epilogue = CUBLASLT_EPILOGUE_BGRADB;
    check_accepted(bgrad, "BGRADB");
    bgrad.bias_type = CUDA_R_16BF;
    check_refused(bgrad, "bf16 bias gradient with fp32 output");

    // beta != 0: the product may accumulate (DEFAULT, BIAS), a GELU epilogue may not.
    EpilogueCall accumulate = bias;
    accumulate.beta = 1.0f;
    check_accepted(accumulate, "BIAS with beta 1");
    for (cublasLtEpilogue_t e : {CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX,
                                 CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU,
                                 CUBLASLT_EPILOGUE_DGELU_BGRAD}) {
        EpilogueCall g = gelu_aux;
        g.epilogue = e;
        check_accepted(g, tst::format("GELU epilogue %d, beta 0", (int)e).c_str());
        g.beta = 0.5f;
        check_refused(g, tst::format("GELU epilogue %d, beta 0.5", (int)e).c_str(), false);
    }
}
