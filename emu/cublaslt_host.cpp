// Host stand-in for the part of cuBLASLt that a GPT-2 trainer calls, for the emulated (g++) build.
// It implements functions declared in NVIDIA's own cublasLt.h with the semantics NVIDIA documents:
// column-major D = epilogue(alpha * op(A) op(B) + beta * C), strided batches, fp32 or bf16 matrices,
// fp32 compute. Epilogues: BIAS adds a per-row vector before GELU; GELU is the tanh approximation;
// *_AUX stores the GELU input into the aux matrix; DGELU multiplies by gelu'(aux); DGELU_BGRAD also
// sums each row of D into the bias pointer; BGRADA / BGRADB sum op(A) / op(B) over the k dimension.
//
// The product goes through the CPU reference's gemm() (cpu/gemm.h: OpenBLAS with the right kernels for
// this CPU, or plain loops) on fp32 copies of A and B (bf16 widened, fp32 copied densely). The copy
// costs O(mk + kn) against the product's O(mnk), and is made by our own (sanitized) code, so under ASan
// an operand whose layout runs past its allocation is still reported. The element-wise passes here are
// single-threaded on purpose: OpenMP threads spin-waiting beside the GEMM's made whole GEMMs 2-3x
// slower on 2 cores (dev/bench_cublaslt).
// Streams are ignored: emulated streams run synchronously. Anything unsupported returns an error status
// and prints one line that names it, so a trainer bug surfaces here rather than as wrong numbers.
//
// Beyond what the host could compute, the stand-in refuses what the real library refuses, so that
// code which works only here fails in CI (both cublasLtMatmulAlgoGetHeuristic, which then returns
// no algorithm, and cublasLtMatmul refuse; beta is seen by cublasLtMatmul only):
//   documented in NVIDIA's cublasLt.h (CUDA 12/13), attribute comments:
//   - EPILOGUE_AUX_LD of a GELU input matrix "must be divisible by 8 and be no less than the number
//     of rows in the output matrix"; its EPILOGUE_AUX_BATCH_STRIDE "must be divisible by 8";
//   - the bias (or bias gradient) vector has the type of the output D (BIAS_DATA_TYPE: "Bias vector
//     elements are the same type as the elements of output matrix (Dtype)", exceptions only for IMMA
//     and fp8 kernels, which the stand-in does not run);
//   conservative, not found stated in NVIDIA's documentation (refused so that the trainer never
//   depends on them; matmul.h falls back to separate passes where the heuristic refuses):
//   - bias and aux pointers not 16-byte aligned (the header says only that the heuristic derives the
//     expected alignment from these pointers' values);
//   - GELU / DGELU epilogues with beta != 0 (accumulating into a GELU output).
// The real library is more lenient than this: on an H100 with CUDA 13.0 it ran a BIAS epilogue with a
// 2-byte aligned bias and a GELU_AUX_BIAS epilogue whose EPILOGUE_AUX_LD was 100. The trainer never
// passes either; refusing them here keeps it from starting to.
//
// FP8 products (A and B of type CUDA_R_8F_E4M3 or CUDA_R_8F_E5M2), as cuBLASLt runs them on Hopper:
//   D = scale_D · epilogue(alpha · scale_A · scale_B · op(A) op(B) + beta · scale_C · C),
//   amax_D = max |epilogue(...)| (before scale_D), written where AMAX_D_POINTER points.
// The scales are device pointers (A/B/C/D_SCALE_POINTER, fp32; null means 1), read when the product
// runs (so a CUDA graph sees the values of its replay). Operands are decoded exactly by base/fp8.h;
// the products of two FP8 values are exact in fp32 and the sum over k is gemm()'s fp32 sum, as the
// compute type CUBLAS_COMPUTE_32F says (a GPU sums in another order: agreement to fp32 rounding, not
// bit for bit). An FP8 D is encoded by base/fp8.h (round to nearest even, saturating). Refused:
//   documented by NVIDIA (cublasLtMatmul's FP8 requirements, cublasLt.h's attribute comments):
//   - A not transposed or B transposed: only the "TN" layout (NOT_SUPPORTED);
//   - a compute type other than CUBLAS_COMPUTE_32F, a scale type other than CUDA_R_32F (NOT_SUPPORTED);
//   - both A and B E5M2, or an FP8 operand beside a non-FP8 one (NOT_SUPPORTED);
//   - D and C types outside the table: D bf16 (C bf16), fp32 (C fp32), E4M3 (C bf16), E5M2 (C bf16,
//     one of A and B E5M2); the bias bf16 (NOT_SUPPORTED);
//   - pointers or leading dimensions of A, B, C, D not multiples of 16 bytes (NOT_SUPPORTED; the
//     heuristic judges the pointers by the preference's minimum alignments);
//   - a scale or amax pointer on a product that is not FP8 (INVALID_VALUE, cublasLt.h);
//   conservative, not found stated (the trainer never needs them):
//   - gradient epilogues (DGELU, DGELU_BGRAD, BGRADA, BGRADB) with FP8 operands, and GELU_AUX* with an
//     FP8 D (NOT_SUPPORTED);
//   - D_SCALE_POINTER with a D that is not FP8, AMAX_D_POINTER with an fp32 D (INVALID_VALUE).
//   not supported by the stand-in (NOT_SUPPORTED): fp16 C or D, FAST_ACCUM other than 0 is accepted
//   and computes the same as 0 (it only trades accuracy for speed on a GPU).
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <thread>
#include <vector>

#include "base/fp8.h"
#include "cpu/gemm.h"
#include "emu/work_kind.h"

// The emulated runtime's launch counter and stream capture (emu/launch.h), when the program links
// them: a real cublasLtMatmul launches kernels, so each product counts as one launch, when it runs;
// on a capturing stream the product (its descriptors and pointers as they are now) is recorded into
// the graph and computed when the graph runs, and with queued streams (emu/stream_queue.h) it is
// queued like a kernel. Weak, so that the stand-in also links without the emulator (test_cublaslt,
// bench_cublaslt).
namespace emu {
void count_library_launch() __attribute__((weak));
bool record_work(cudaStream_t stream, const char* name, std::function<void()> work,
                 WorkKind kind = WorkKind::device) __attribute__((weak));
}

// ---------------------------------------------------------------------------------------------------
// Descriptors. The header's opaque types are fixed-size blobs; ours are placed inside them.

struct cublasLtContext {
    int unused;
};

namespace {

struct Layout {
    int32_t type;  // cudaDataType
    int32_t order;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch_count;
    int64_t batch_stride;  // elements between consecutive matrices of a batch
};

struct MatmulDesc {
    int32_t compute_type;  // cublasComputeType_t
    int32_t scale_type;    // cudaDataType of alpha and beta
    int32_t pointer_mode;
    int32_t transa, transb;  // cublasOperation_t
    uint32_t epilogue;       // cublasLtEpilogue_t
    void* bias;              // bias (input) or bias gradient (output)
    int64_t bias_batch_stride;
    int32_t bias_type;  // -1: same as D
    void* aux;          // GELU input: output of *_AUX epilogues, input of DGELU*
    int64_t aux_ld, aux_batch_stride;
    int32_t aux_type;  // -1: same as D
    // FP8 products: device pointers to fp32 scales (null: 1) and to D's amax (null: not computed).
    const void *a_scale, *b_scale, *c_scale, *d_scale;
    void* amax_d;
    int8_t fast_accum;
};

struct Preference {
    uint32_t search_mode;
    uint64_t max_workspace_bytes;
    uint64_t impl_mask;
    uint32_t min_alignment[4];  // A, B, C, D bytes: accepted and kept; host memory has no such rules
};

static_assert(sizeof(Layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "Layout must fit the opaque blob");
static_assert(sizeof(MatmulDesc) <= sizeof(cublasLtMatmulDescOpaque_t), "MatmulDesc must fit");
static_assert(sizeof(Preference) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "Preference must fit");

Layout* layout_of(cublasLtMatrixLayout_t p) { return std::launder(reinterpret_cast<Layout*>(p)); }
MatmulDesc* desc_of(cublasLtMatmulDesc_t p) { return std::launder(reinterpret_cast<MatmulDesc*>(p)); }
Preference* pref_of(cublasLtMatmulPreference_t p) {
    return std::launder(reinterpret_cast<Preference*>(p));
}

// One line on stderr saying why a call was refused, then the status to return.
cublasStatus_t refuse(cublasStatus_t status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
cublasStatus_t refuse(cublasStatus_t status, const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "cuBLASLt stand-in: ");
    vfprintf(stderr, fmt, args);
    fprintf(stderr, "\n");
    va_end(args);
    return status;
}

// Copies an attribute value of type T out of (buf, size), refusing a size that does not match.
template <typename T>
cublasStatus_t read_attribute(const void* buf, size_t size, T* out, const char* name) {
    if (!buf || size != sizeof(T))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: expected %zu bytes, got %zu", name, sizeof(T), size);
    memcpy(out, buf, sizeof(T));
    return CUBLAS_STATUS_SUCCESS;
}

// ---------------------------------------------------------------------------------------------------
// Element access for the two supported storage types.

bool is_fp8_type(int32_t type) { return type == CUDA_R_8F_E4M3 || type == CUDA_R_8F_E5M2; }
bool is_supported_type(int32_t type) { return type == CUDA_R_32F || type == CUDA_R_16BF || is_fp8_type(type); }
const char* type_name(int32_t type) {
    switch (type) {
        case CUDA_R_32F: return "CUDA_R_32F";
        case CUDA_R_16BF: return "CUDA_R_16BF";
        case CUDA_R_8F_E4M3: return "CUDA_R_8F_E4M3";
        case CUDA_R_8F_E5M2: return "CUDA_R_8F_E5M2";
        default: return "unsupported";
    }
}
size_t type_size(int32_t type) { return type == CUDA_R_32F ? 4 : is_fp8_type(type) ? 1 : 2; }
Fp8Format fp8_format_of(int32_t type) { return type == CUDA_R_8F_E4M3 ? Fp8Format::e4m3 : Fp8Format::e5m2; }

inline float load(const void* base, int32_t type, size_t index) {
    if (type == CUDA_R_32F) return static_cast<const float*>(base)[index];
    if (is_fp8_type(type)) return fp8_decode(static_cast<const uint8_t*>(base)[index], fp8_format_of(type));
    return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
}
inline void store(void* base, int32_t type, size_t index, float value) {
    if (type == CUDA_R_32F)
        static_cast<float*>(base)[index] = value;
    else if (is_fp8_type(type))  // round to nearest even, saturating (base/fp8.h)
        static_cast<uint8_t*>(base)[index] = fp8_encode(value, fp8_format_of(type));
    else
        static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16(value);  // round to nearest even
}

// GELU, tanh approximation, and its derivative.
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
inline float gelu(float x) {
    float t = tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
    return 0.5f * x * (1.0f + t);
}
inline float gelu_derivative(float x) {
    float t = tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
    float dt_dx = (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * dt_dx;
}

// ---------------------------------------------------------------------------------------------------
// What one cublasLtMatmul call computes, checked once against the descriptors.

struct Epilogue {
    bool add_bias = false, apply_gelu = false, store_aux = false, apply_dgelu = false;
    bool bgrad_of_d = false, bgrad_of_a = false, bgrad_of_b = false;
};

bool decode_epilogue(uint32_t value, Epilogue* e) {
    switch (value) {
        case CUBLASLT_EPILOGUE_DEFAULT: break;
        case CUBLASLT_EPILOGUE_BIAS: e->add_bias = true; break;
        case CUBLASLT_EPILOGUE_GELU: e->apply_gelu = true; break;
        case CUBLASLT_EPILOGUE_GELU_BIAS: e->add_bias = e->apply_gelu = true; break;
        case CUBLASLT_EPILOGUE_GELU_AUX: e->apply_gelu = e->store_aux = true; break;
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: e->add_bias = e->apply_gelu = e->store_aux = true; break;
        case CUBLASLT_EPILOGUE_DGELU: e->apply_dgelu = true; break;
        case CUBLASLT_EPILOGUE_DGELU_BGRAD: e->apply_dgelu = e->bgrad_of_d = true; break;
        case CUBLASLT_EPILOGUE_BGRADA: e->bgrad_of_a = true; break;
        case CUBLASLT_EPILOGUE_BGRADB: e->bgrad_of_b = true; break;
        default: return false;
    }
    return true;
}

struct Problem {
    int64_t m, n, k;
    int batch_count;
    bool trans_a, trans_b;
    Epilogue epilogue;
    int32_t bias_type, aux_type;
    bool uses_bias, uses_aux;
    int64_t aux_ld;
    bool fp8;  // A and B are FP8 (see the FP8 rules at the top of this file)
};

cublasStatus_t check_layout(const Layout& l, const char* name) {
    if (!is_supported_type(l.type))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matrix %s: data type %d not supported (CUDA_R_32F, CUDA_R_16BF)",
                      name, l.type);
    if (l.order != CUBLASLT_ORDER_COL)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matrix %s: only CUBLASLT_ORDER_COL is supported", name);
    if (l.ld < 1 || (uint64_t)l.ld < l.rows)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "matrix %s: leading dimension %lld < rows %llu", name,
                      (long long)l.ld, (unsigned long long)l.rows);
    if (l.batch_count < 1 || l.batch_stride < 0)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "matrix %s: batch count %d / stride %lld invalid", name,
                      l.batch_count, (long long)l.batch_stride);
    return CUBLAS_STATUS_SUCCESS;
}

// ---- the FP8 rules (see the top of this file)

// A product whose A and B are not FP8 has no FP8 matrix or vector anywhere.
cublasStatus_t check_not_fp8(const Layout& a, const Layout& b, const Layout& c, const Layout& d, const Problem& p) {
    for (const Layout* l : {&a, &b, &c, &d})
        if (is_fp8_type(l->type))
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s matrix beside non-FP8 A and B", type_name(l->type));
    if ((p.uses_bias && is_fp8_type(p.bias_type)) || (p.uses_aux && is_fp8_type(p.aux_type)))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 bias or aux vector in a product that is not FP8");
    return CUBLAS_STATUS_SUCCESS;
}

// The types an FP8 product may have (cublasLtMatmul's FP8 table, less fp16, which the stand-in lacks).
cublasStatus_t check_fp8_types(const Layout& a, const Layout& b, const Layout& c, const Layout& d) {
    const cublasStatus_t unsupported = CUBLAS_STATUS_NOT_SUPPORTED;
    if (!is_fp8_type(a.type) || !is_fp8_type(b.type))
        return refuse(unsupported, "FP8 product with A %s and B %s: both must be FP8", type_name(a.type),
                      type_name(b.type));
    if (a.type == CUDA_R_8F_E5M2 && b.type == CUDA_R_8F_E5M2)
        return refuse(unsupported, "FP8 product with A and B both CUDA_R_8F_E5M2");
    const bool c_ok = d.type == CUDA_R_32F ? c.type == CUDA_R_32F : c.type == CUDA_R_16BF;
    if (!c_ok) return refuse(unsupported, "FP8 product: C %s with D %s", type_name(c.type), type_name(d.type));
    if (d.type == CUDA_R_8F_E5M2 && a.type != CUDA_R_8F_E5M2 && b.type != CUDA_R_8F_E5M2)
        return refuse(unsupported, "FP8 product: an E5M2 D needs an E5M2 A or B");
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t check_fp8_problem(const MatmulDesc& desc, const Layout& a, const Layout& b, const Layout& c,
                                 const Layout& d, const Problem& p) {
    const cublasStatus_t unsupported = CUBLAS_STATUS_NOT_SUPPORTED;
    if (cublasStatus_t s = check_fp8_types(a, b, c, d)) return s;
    if (desc.compute_type != CUBLAS_COMPUTE_32F)
        return refuse(unsupported, "FP8 product with compute type %d (only CUBLAS_COMPUTE_32F)", desc.compute_type);
    if (!p.trans_a || p.trans_b)
        return refuse(unsupported, "FP8 product with op(A)=%c op(B)=%c: only TN (A transposed, B not)",
                      p.trans_a ? 'T' : 'N', p.trans_b ? 'T' : 'N');
    const Layout* layouts[] = {&a, &b, &c, &d};
    const char* names[] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; i++)
        if ((layouts[i]->ld * (int64_t)type_size(layouts[i]->type)) % 16 != 0)
            return refuse(unsupported, "FP8 product: leading dimension of %s (%lld elements) is not a multiple of 16 bytes",
                          names[i], (long long)layouts[i]->ld);
    const Epilogue& e = p.epilogue;
    if (e.apply_dgelu || e.bgrad_of_a || e.bgrad_of_b || e.bgrad_of_d)
        return refuse(unsupported, "FP8 product with gradient epilogue %u", desc.epilogue);
    if (e.store_aux && is_fp8_type(d.type))
        return refuse(unsupported, "FP8 product: GELU_AUX epilogue with an FP8 D");
    if (p.uses_bias && p.bias_type != CUDA_R_16BF)
        return refuse(unsupported, "FP8 product: bias type %s (only CUDA_R_16BF)", type_name(p.bias_type));
    if (p.uses_aux && p.aux_type != d.type)
        return refuse(unsupported, "FP8 product: aux type %s differs from D's", type_name(p.aux_type));
    return CUBLAS_STATUS_SUCCESS;
}

// What cublasLtMatmul alone can check of an FP8 product: the matrices' pointers (16-byte aligned) and
// which scale and amax pointers are set. Any product: scale or amax pointers need FP8 A and B.
cublasStatus_t check_fp8_pointers(const MatmulDesc& desc, const Layout& d, const Problem& p, const void* A,
                                  const void* B, const void* C, const void* D) {
    const bool any_scale = desc.a_scale || desc.b_scale || desc.c_scale || desc.d_scale || desc.amax_d;
    if (!p.fp8)
        return any_scale ? refuse(CUBLAS_STATUS_INVALID_VALUE, "scale or amax pointer set on a product that is not FP8")
                         : CUBLAS_STATUS_SUCCESS;
    if (desc.d_scale && !is_fp8_type(d.type))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "D_SCALE_POINTER set with D %s (only an FP8 D)", type_name(d.type));
    if (desc.amax_d && d.type == CUDA_R_32F)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "AMAX_D_POINTER set with an fp32 D");
    const void* pointers[] = {A, B, C, D};
    const char* names[] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)pointers[i] % 16 != 0)
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 product: %s pointer %p is not 16-byte aligned", names[i],
                          pointers[i]);
    return CUBLAS_STATUS_SUCCESS;
}

// Fills *p from the descriptors, or prints why the combination is refused and returns its status.
cublasStatus_t describe_problem(const MatmulDesc& desc, const Layout& a, const Layout& b, const Layout& c,
                                const Layout& d, Problem* p) {
    const cublasStatus_t bad = CUBLAS_STATUS_INVALID_VALUE, unsupported = CUBLAS_STATUS_NOT_SUPPORTED;
    switch (desc.compute_type) {
        case CUBLAS_COMPUTE_32F: case CUBLAS_COMPUTE_32F_PEDANTIC: case CUBLAS_COMPUTE_32F_FAST_TF32:
        case CUBLAS_COMPUTE_32F_FAST_16BF: case CUBLAS_COMPUTE_32F_FAST_16F: break;  // all fp32 here
        default: return refuse(unsupported, "compute type %d not supported (fp32 compute only)", desc.compute_type);
    }
    if (desc.scale_type != CUDA_R_32F) return refuse(unsupported, "scale type must be CUDA_R_32F");
    if (desc.pointer_mode != CUBLASLT_POINTER_MODE_HOST)
        return refuse(unsupported, "only CUBLASLT_POINTER_MODE_HOST is supported");
    for (int32_t t : {desc.transa, desc.transb})
        if (t != CUBLAS_OP_N && t != CUBLAS_OP_T) return refuse(unsupported, "transpose %d not supported", t);
    const Layout* layouts[] = {&a, &b, &c, &d};
    const char* names[] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; i++)
        if (cublasStatus_t s = check_layout(*layouts[i], names[i])) return s;

    p->trans_a = desc.transa == CUBLAS_OP_T;
    p->trans_b = desc.transb == CUBLAS_OP_T;
    p->m = (int64_t)d.rows;
    p->n = (int64_t)d.cols;
    p->k = (int64_t)(p->trans_a ? a.rows : a.cols);
    uint64_t a_rows = p->trans_a ? a.cols : a.rows;
    uint64_t b_rows = p->trans_b ? b.cols : b.rows, b_cols = p->trans_b ? b.rows : b.cols;
    if ((int64_t)a_rows != p->m || (int64_t)b_rows != p->k || (int64_t)b_cols != p->n)
        return refuse(bad, "shapes disagree: op(A) is %llux%lld, op(B) %llux%llu, D %lldx%lld",
                      (unsigned long long)a_rows, (long long)p->k, (unsigned long long)b_rows,
                      (unsigned long long)b_cols, (long long)p->m, (long long)p->n);
    if (c.rows != d.rows || c.cols != d.cols) return refuse(bad, "C and D shapes differ");
    if (p->m > INT32_MAX || p->n > INT32_MAX || p->k > INT32_MAX)
        return refuse(unsupported, "dimensions beyond int32");
    p->batch_count = d.batch_count;
    if (a.batch_count != p->batch_count || b.batch_count != p->batch_count || c.batch_count != p->batch_count)
        return refuse(bad, "batch counts of A, B, C and D differ");

    p->epilogue = Epilogue{};
    if (!decode_epilogue(desc.epilogue, &p->epilogue))
        return refuse(unsupported, "epilogue %u not supported", desc.epilogue);
    const Epilogue& e = p->epilogue;
    p->uses_bias = e.add_bias || e.bgrad_of_d || e.bgrad_of_a || e.bgrad_of_b;
    p->uses_aux = e.store_aux || e.apply_dgelu;
    p->fp8 = is_fp8_type(a.type) || is_fp8_type(b.type);
    // FP8 products' bias is bf16 whatever D is (the exception cublasLt.h names for fp32 and FP8 D).
    p->bias_type = desc.bias_type != -1 ? desc.bias_type : p->fp8 ? CUDA_R_16BF : d.type;
    p->aux_type = desc.aux_type == -1 ? d.type : desc.aux_type;
    p->aux_ld = desc.aux_ld;
    // What the real library refuses, so that a trainer relying on it fails here too (see the rules at
    // the top of this file).
    if (p->uses_bias) {
        if (!desc.bias) return refuse(bad, "epilogue %u needs CUBLASLT_MATMUL_DESC_BIAS_POINTER", desc.epilogue);
        if (!is_supported_type(p->bias_type)) return refuse(unsupported, "bias data type %d", p->bias_type);
        if (!p->fp8 && p->bias_type != d.type)
            return refuse(unsupported, "bias data type %s differs from D's %s", type_name(p->bias_type),
                          type_name(d.type));
        if ((uintptr_t)desc.bias % 16 != 0)
            return refuse(unsupported, "bias pointer %p is not 16-byte aligned", desc.bias);
    }
    if (p->uses_aux) {
        if (!desc.aux) return refuse(bad, "epilogue %u needs CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER", desc.epilogue);
        if (desc.aux_ld < p->m)
            return refuse(bad, "EPILOGUE_AUX_LD %lld < rows of D %lld", (long long)desc.aux_ld, (long long)p->m);
        if (desc.aux_ld % 8 != 0)
            return refuse(bad, "EPILOGUE_AUX_LD %lld is not a multiple of 8", (long long)desc.aux_ld);
        if (p->batch_count > 1 && desc.aux_batch_stride % 8 != 0)
            return refuse(bad, "EPILOGUE_AUX_BATCH_STRIDE %lld is not a multiple of 8",
                          (long long)desc.aux_batch_stride);
        if (!is_supported_type(p->aux_type)) return refuse(unsupported, "aux data type %d", p->aux_type);
        if ((uintptr_t)desc.aux % 16 != 0)
            return refuse(unsupported, "EPILOGUE_AUX_POINTER %p is not 16-byte aligned", desc.aux);
    }
    return p->fp8 ? check_fp8_problem(desc, a, b, c, d, *p) : check_not_fp8(a, b, c, d, *p);
}

// GELU epilogues (forward and gradient) with beta != 0: refused by cublasLtMatmul, which alone sees beta.
bool is_gelu_epilogue(const Epilogue& e) { return e.apply_gelu || e.apply_dgelu; }

// ---------------------------------------------------------------------------------------------------
// The computation of one matrix of a batch.

// A rows x cols column-major matrix with leading dimension ld, widened to a dense fp32 copy.
std::vector<float> widen(const void* base, int32_t type, int64_t rows, int64_t cols, int64_t ld) {
    std::vector<float> out((size_t)rows * cols);
    for (int64_t j = 0; j < cols; j++)
        for (int64_t i = 0; i < rows; i++) out[(size_t)j * rows + i] = load(base, type, (size_t)j * ld + i);
    return out;
}

// Sums of each row / each column of a dense column-major rows x cols matrix, in double.
std::vector<double> row_sums(const float* x, int64_t rows, int64_t cols) {
    std::vector<double> sums(rows, 0.0);
    for (int64_t j = 0; j < cols; j++)
        for (int64_t i = 0; i < rows; i++) sums[i] += x[(size_t)j * rows + i];
    return sums;
}
std::vector<double> column_sums(const float* x, int64_t rows, int64_t cols) {
    std::vector<double> sums(cols, 0.0);
    for (int64_t j = 0; j < cols; j++)
        for (int64_t i = 0; i < rows; i++) sums[j] += x[(size_t)j * rows + i];
    return sums;
}

struct BatchPointers {
    const void *a, *b, *c;
    void *d, *bias, *aux;
};

// Which stand-in algorithm computes the product: the heuristic's candidates 0 and 1 sum over k in one
// pass; candidate 2 sums each half of k on its own, rounds both partial sums to D's type and then adds
// them, as a split-k algorithm of the real library does with its OUTPUT_TYPE reduction scheme: the same
// product, rounded differently (a caller that times candidates must not let that change its results:
// kernels/matmul.h sets such a candidate aside).
constexpr uint64_t kSplitKAlgorithm = 2;
constexpr int kCandidates = 3;

// EMU_CUBLASLT_FASTEST=F0,F1,... (environment): in the process of MPI rank r, candidate F_r (the last
// one listed for higher ranks) is the fastest: every product by another candidate first waits 20 ms, so
// that a caller timing the candidates (kernels/matmul.h) sees a winner, and ranks may see different
// ones. 20 ms is far above what a tiny product's own time varies by on a loaded 2-core machine (2 ms
// was not: a busy moment there could make another candidate look fastest). With it set, each process also counts the products each candidate computed and prints the
// counts at exit, one line on stderr:
//   cuBLASLt stand-in: rank 1 products by candidate: 0: 412, 1: 96, 2: 24
// Unset (the default): every candidate takes the same time and nothing is printed.
struct CandidateSpeeds {
    int fastest = -1;  // -1: EMU_CUBLASLT_FASTEST unset
    int rank = 0;
    std::atomic<unsigned long long> products[kCandidates] = {};
    CandidateSpeeds() {
        const char* list = getenv("EMU_CUBLASLT_FASTEST");
        if (!list || !*list) return;
        for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
            if (const char* r = getenv(name)) rank = atoi(r);
        for (int i = 0; i <= rank && *list; i++) {
            fastest = atoi(list);
            const char* comma = strchr(list, ',');
            if (!comma) break;
            list = comma + 1;
        }
    }
    ~CandidateSpeeds() {
        if (fastest < 0) return;
        fprintf(stderr, "cuBLASLt stand-in: rank %d products by candidate: 0: %llu, 1: %llu, 2: %llu\n", rank,
                products[0].load(), products[1].load(), products[2].load());
    }
    // Called as a product runs: counts it, and waits where its candidate is not the fastest.
    void run(uint64_t candidate) {
        if (fastest < 0 || candidate >= (uint64_t)kCandidates) return;
        products[candidate]++;
        if ((int)candidate != fastest) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
};
CandidateSpeeds& candidate_speeds() {
    static CandidateSpeeds speeds;
    return speeds;
}

// An FP8 product's scales, read from device memory when the product runs (1 where a pointer is null),
// and where D's amax goes.
struct Scales {
    float a = 1, b = 1, c = 1, d = 1;
    float* amax_d = nullptr;
    static Scales of(const MatmulDesc& desc) {
        auto value = [](const void* p) { return p ? *static_cast<const float*>(p) : 1.0f; };
        return {value(desc.a_scale), value(desc.b_scale), value(desc.c_scale), value(desc.d_scale),
                static_cast<float*>(desc.amax_d)};
    }
};

void matmul_one(const Problem& p, const Layout& la, const Layout& lb, const Layout& lc, const Layout& ld,
                const BatchPointers& ptr, const Scales& scales, float alpha, float beta, bool split_k) {
    const int64_t m = p.m, n = p.n, k = p.k;
    const Epilogue& e = p.epilogue;
    alpha *= scales.a * scales.b;  // all 1 unless FP8
    beta *= scales.c;
    std::vector<float> a = widen(ptr.a, la.type, (int64_t)la.rows, (int64_t)la.cols, la.ld);
    std::vector<float> b = widen(ptr.b, lb.type, (int64_t)lb.rows, (int64_t)lb.cols, lb.ld);

    // z = alpha * op(A) op(B), dense m x n column-major. gemm() is row-major, and a column-major
    // matrix read row-major is its transpose, so it computes zᵀ = op(B)ᵀ op(A)ᵀ (n x m, ld m).
    // product(k0, kn, out): the sum over k0 <= κ < k0 + kn only (A and B start at their κ = k0).
    auto product = [&](int64_t k0, int64_t kn, float* out) {
        const float* a0 = a.data() + (p.trans_a ? k0 : k0 * m);  // op(A) = Aᵀ: A is k x m, ld k
        const float* b0 = b.data() + (p.trans_b ? k0 * n : k0);  // op(B) = Bᵀ: B is n x k, ld n
        gemm(p.trans_b, p.trans_a, (int)n, (int)m, (int)kn, alpha, b0, (int)lb.rows, a0, (int)la.rows, 0.0f, out,
             (int)m);
    };
    std::vector<float> z((size_t)m * n);
    if (k == 0) {
        std::fill(z.begin(), z.end(), 0.0f);
    } else if (split_k && k >= 2) {
        std::vector<float> second((size_t)m * n);
        product(0, k / 2, z.data());
        product(k / 2, k - k / 2, second.data());
        auto in_output_type = [&](float x) {
            unsigned char word[4];
            store(word, ld.type, 0, x);
            return load(word, ld.type, 0);
        };
        for (size_t i = 0; i < z.size(); i++) z[i] = in_output_type(z[i]) + in_output_type(second[i]);
    } else {
        product(0, k, z.data());
    }

    // Element-wise epilogue; z keeps each final fp32 value for the bias-gradient sum. amax: D's largest
    // magnitude before scale_D, NaN winning (base/fp8.h's order).
    float amax = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        for (int64_t i = 0; i < m; i++) {
            float v = z[(size_t)j * m + i];
            if (beta != 0.0f) v += beta * load(ptr.c, lc.type, (size_t)j * lc.ld + i);
            if (e.add_bias) v += load(ptr.bias, p.bias_type, i);
            size_t aux_index = (size_t)j * p.aux_ld + i;
            if (e.store_aux) store(ptr.aux, p.aux_type, aux_index, v);
            if (e.apply_gelu) v = gelu(v);
            if (e.apply_dgelu) v *= gelu_derivative(load(ptr.aux, p.aux_type, aux_index));
            amax = fp8_amax_merge(amax, v);
            store(ptr.d, ld.type, (size_t)j * ld.ld + i, is_fp8_type(ld.type) ? v * scales.d : v);
            z[(size_t)j * m + i] = v;
        }
    }
    if (scales.amax_d) *scales.amax_d = fp8_amax_merge(*scales.amax_d, amax);  // batches: over all of them

    // Bias gradients, summed in double and rounded once into the bias type. A dense matrix stored
    // rows x cols: sums along its rows when op() leaves it as is, along its columns when op() transposes.
    std::vector<double> gradient;
    if (e.bgrad_of_d) gradient = row_sums(z.data(), m, n);  // over the n columns of D
    if (e.bgrad_of_a)  // over k: row i of op(A)
        gradient = p.trans_a ? column_sums(a.data(), k, m) : row_sums(a.data(), m, k);
    if (e.bgrad_of_b)  // over k: column j of op(B)
        gradient = p.trans_b ? row_sums(b.data(), n, k) : column_sums(b.data(), k, n);
    for (size_t i = 0; i < gradient.size(); i++) store(ptr.bias, p.bias_type, i, (float)gradient[i]);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// The API, as declared in cublasLt.h.

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    *handle = new cublasLtContext{0};
    return CUBLAS_STATUS_SUCCESS;
}

// The stand-in is no release of the library: version 0.
size_t cublasLtGetVersion(void) { return 0; }

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
    switch (status) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
        default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
    switch (status) {
        case CUBLAS_STATUS_SUCCESS: return "success";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "handle not initialized";
        case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
        case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported by the host stand-in";
        default: return "error";
    }
}

// --- matrix layouts

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
    if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
    *layout = new cublasLtMatrixLayoutOpaque_t{};
    new (*layout) Layout{(int32_t)type, CUBLASLT_ORDER_COL, rows, cols, ld, 1, 0};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    delete layout;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
    if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
    Layout* l = layout_of(layout);
    switch (attr) {
        case CUBLASLT_MATRIX_LAYOUT_TYPE: return read_attribute(buf, size, &l->type, "LAYOUT_TYPE");
        case CUBLASLT_MATRIX_LAYOUT_ORDER: return read_attribute(buf, size, &l->order, "LAYOUT_ORDER");
        case CUBLASLT_MATRIX_LAYOUT_ROWS: return read_attribute(buf, size, &l->rows, "LAYOUT_ROWS");
        case CUBLASLT_MATRIX_LAYOUT_COLS: return read_attribute(buf, size, &l->cols, "LAYOUT_COLS");
        case CUBLASLT_MATRIX_LAYOUT_LD: return read_attribute(buf, size, &l->ld, "LAYOUT_LD");
        case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
            return read_attribute(buf, size, &l->batch_count, "LAYOUT_BATCH_COUNT");
        case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
            return read_attribute(buf, size, &l->batch_stride, "LAYOUT_STRIDED_BATCH_OFFSET");
        default: return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matrix layout attribute %d not supported", (int)attr);
    }
}

// --- matmul descriptors

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute_type,
                                        cudaDataType_t scale_type) {
    if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
    *desc = new cublasLtMatmulDescOpaque_t{};
    MatmulDesc* d = new (*desc) MatmulDesc{};
    d->compute_type = compute_type;
    d->scale_type = scale_type;
    d->pointer_mode = CUBLASLT_POINTER_MODE_HOST;
    d->transa = d->transb = CUBLAS_OP_N;
    d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    d->bias_type = d->aux_type = -1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    delete desc;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
    if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
    MatmulDesc* d = desc_of(desc);
    switch (attr) {
        case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return read_attribute(buf, size, &d->compute_type, "COMPUTE_TYPE");
        case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return read_attribute(buf, size, &d->scale_type, "SCALE_TYPE");
        case CUBLASLT_MATMUL_DESC_POINTER_MODE: return read_attribute(buf, size, &d->pointer_mode, "POINTER_MODE");
        case CUBLASLT_MATMUL_DESC_TRANSA: return read_attribute(buf, size, &d->transa, "TRANSA");
        case CUBLASLT_MATMUL_DESC_TRANSB: return read_attribute(buf, size, &d->transb, "TRANSB");
        case CUBLASLT_MATMUL_DESC_EPILOGUE: return read_attribute(buf, size, &d->epilogue, "EPILOGUE");
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return read_attribute(buf, size, &d->bias, "BIAS_POINTER");
        case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
            return read_attribute(buf, size, &d->bias_batch_stride, "BIAS_BATCH_STRIDE");
        case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return read_attribute(buf, size, &d->bias_type, "BIAS_DATA_TYPE");
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return read_attribute(buf, size, &d->aux, "EPILOGUE_AUX_POINTER");
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return read_attribute(buf, size, &d->aux_ld, "EPILOGUE_AUX_LD");
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
            return read_attribute(buf, size, &d->aux_batch_stride, "EPILOGUE_AUX_BATCH_STRIDE");
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
            return read_attribute(buf, size, &d->aux_type, "EPILOGUE_AUX_DATA_TYPE");
        case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: return read_attribute(buf, size, &d->a_scale, "A_SCALE_POINTER");
        case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: return read_attribute(buf, size, &d->b_scale, "B_SCALE_POINTER");
        case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER: return read_attribute(buf, size, &d->c_scale, "C_SCALE_POINTER");
        case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER: return read_attribute(buf, size, &d->d_scale, "D_SCALE_POINTER");
        case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER: return read_attribute(buf, size, &d->amax_d, "AMAX_D_POINTER");
        case CUBLASLT_MATMUL_DESC_FAST_ACCUM: return read_attribute(buf, size, &d->fast_accum, "FAST_ACCUM");
        default: return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matmul descriptor attribute %d not supported", (int)attr);
    }
}

// --- heuristic search: three algorithms, no workspace, for every problem the stand-in can run

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
    if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
    *pref = new cublasLtMatmulPreferenceOpaque_t{};
    new (*pref) Preference{0, 0, ~0ull, {256, 256, 256, 256}};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
    if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
    Preference* p = pref_of(pref);
    switch (attr) {
        case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return read_attribute(buf, size, &p->search_mode, "PREF_SEARCH_MODE");
        case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
            return read_attribute(buf, size, &p->max_workspace_bytes, "PREF_MAX_WORKSPACE_BYTES");
        case CUBLASLT_MATMUL_PREF_IMPL_MASK: return read_attribute(buf, size, &p->impl_mask, "PREF_IMPL_MASK");
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
            return read_attribute(buf, size, &p->min_alignment[0], "PREF_MIN_ALIGNMENT_A_BYTES");
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
            return read_attribute(buf, size, &p->min_alignment[1], "PREF_MIN_ALIGNMENT_B_BYTES");
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
            return read_attribute(buf, size, &p->min_alignment[2], "PREF_MIN_ALIGNMENT_C_BYTES");
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
            return read_attribute(buf, size, &p->min_alignment[3], "PREF_MIN_ALIGNMENT_D_BYTES");
        default: return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matmul preference attribute %d not supported", (int)attr);
    }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!op || !a || !b || !c || !d || !pref || requested <= 0 || !results || !returned)
        return CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    Problem problem;
    if (describe_problem(*desc_of(op), *layout_of(a), *layout_of(b), *layout_of(c), *layout_of(d), &problem) !=
        CUBLAS_STATUS_SUCCESS)
        return CUBLAS_STATUS_NOT_SUPPORTED;  // what cuBLASLt answers when no algorithm fits
    const Preference& preference = *pref_of(pref);
    if (problem.fp8)
        for (int i = 0; i < 4; i++)
            if (preference.min_alignment[i] % 16 != 0)
                return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 product: matrix %c's minimum alignment %u is not 16 bytes",
                              "ABCD"[i], preference.min_alignment[i]);
    // Up to three candidates, as cuBLASLt offers several (a caller may time them); the third sums over
    // k in two halves (kSplitKAlgorithm), so its roundings differ from the first two's.
    *returned = std::min(requested, kCandidates);
    for (int i = 0; i < *returned; i++) {
        results[i] = cublasLtMatmulHeuristicResult_t{};
        results[i].algo.data[0] = (uint64_t)i;
        results[i].workspaceSize = 0;
        results[i].state = CUBLAS_STATUS_SUCCESS;
        results[i].wavesCount = 1.0f;
    }
    return CUBLAS_STATUS_SUCCESS;
}

// --- the product

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a_layout, const void* B, cublasLtMatrixLayout_t b_layout,
                              const void* beta, const void* C, cublasLtMatrixLayout_t c_layout, void* D,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t* algo,
                              void* /*workspace*/, size_t /*workspace_bytes*/, cudaStream_t stream) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!op || !alpha || !beta || !a_layout || !b_layout || !c_layout || !d_layout)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: null descriptor or scalar");
    const MatmulDesc& desc = *desc_of(op);
    const Layout &la = *layout_of(a_layout), &lb = *layout_of(b_layout), &lc = *layout_of(c_layout),
                 &ld = *layout_of(d_layout);
    Problem p;
    cublasStatus_t status = describe_problem(desc, la, lb, lc, ld, &p);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    float alpha_value = *static_cast<const float*>(alpha), beta_value = *static_cast<const float*>(beta);
    if (beta_value != 0.0f && is_gelu_epilogue(p.epilogue))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "GELU / DGELU epilogue %u with beta = %g (only beta = 0)",
                      desc.epilogue, beta_value);
    if (p.m != 0 && p.n != 0 && (!D || (p.k > 0 && (!A || !B)) || (beta_value != 0.0f && !C)))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: null matrix pointer");
    if (cublasStatus_t s = check_fp8_pointers(desc, ld, p, A, B, C, D)) return s;

    // The product, with copies of the descriptors (the caller may destroy them once this returns).
    const uint64_t candidate = algo != nullptr ? algo->data[0] : 0;
    const bool split_k = candidate == kSplitKAlgorithm && !p.fp8;  // FP8 D: no partial sums in D's type
    auto run = [p, desc, la, lb, lc, ld, A, B, C, D, alpha_value, beta_value, split_k, candidate] {
        if (emu::count_library_launch) emu::count_library_launch();
        candidate_speeds().run(candidate);
        if (desc.amax_d) *static_cast<float*>(desc.amax_d) = 0.0f;  // the max over every batch, below
        if (p.m == 0 || p.n == 0) return;
        auto offset = [](const void* base, int32_t type, int64_t elements) {
            return base ? static_cast<const char*>(base) + elements * (int64_t)type_size(type) : nullptr;
        };
        for (int batch = 0; batch < p.batch_count; batch++) {
            BatchPointers ptr;
            ptr.a = offset(A, la.type, batch * la.batch_stride);
            ptr.b = offset(B, lb.type, batch * lb.batch_stride);
            ptr.c = offset(C, lc.type, batch * lc.batch_stride);
            ptr.d = const_cast<char*>(offset(D, ld.type, batch * ld.batch_stride));
            ptr.bias = const_cast<char*>(offset(desc.bias, p.bias_type, batch * desc.bias_batch_stride));
            ptr.aux = const_cast<char*>(offset(desc.aux, p.aux_type, batch * desc.aux_batch_stride));
            matmul_one(p, la, lb, lc, ld, ptr, Scales::of(desc), alpha_value, beta_value, split_k);
        }
    };
    if (!(emu::record_work && emu::record_work(stream, "cublasLtMatmul", run))) run();
    return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
