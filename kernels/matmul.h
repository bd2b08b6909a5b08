// Linear layer through cuBLASLt, with the bias, GELU and GELU-gradient passes fused into the GEMM's
// epilogue where cuBLASLt offers them:
//   forward   out (N×OC) = inp (N×IC) · weightᵀ + bias                  (bias (OC) may be null)
//             or, with pre_gelu:  pre_gelu = inp · weightᵀ + bias,  out = gelu(pre_gelu)
//   backward  dinp (N×IC)     = dout (N×OC) · weight    [⊙ gelu'(pre_gelu), pre_gelu N×IC]  overwritten
//             dweight (OC×IC) += doutᵀ · inp                                                  added into
//             dbias (OC)      += Σ_n dout[n, :]                                               added into
// All matrices are row-major floatX; weight is (OC × IC) as in llm.c's files. Storage is floatX (bf16
// by default, fp32 with -DENABLE_FP32), accumulation fp32 (TF32 tensor cores in the fp32 build only
// when matmul_setup(true) allows them). IC and OC must be multiples of 8 (rows of 16 bytes; cuBLASLt
// also asks it of the GELU matrix's leading dimension).
// Per call, e = sizeof(floatX):
//   forward   2·N·IC·OC FLOPs; reads (N·IC + OC·IC + OC)·e, writes N·OC·e (twice with pre_gelu)
//   backward  4·N·IC·OC FLOPs; reads (2·N·OC + N·IC + 2·OC·IC)·e (+ N·IC·e for pre_gelu,
//             + N·OC·e for dbias), writes (N·IC + OC·IC)·e
//
// cuBLASLt is column-major. A row-major R×C matrix is the column-major C×R matrix of its transpose, so
// every product here is written for the transposes, with m = rows of the column-major result:
//   outᵀ  (OC×N)  = weight_cmᵀ · inp_cm        A = weight (IC×OC, transposed), B = inp (IC×N)
//   dinpᵀ (IC×N)  = weight_cm · dout_cm        A = weight (IC×OC),             B = dout (OC×N)
//   dweightᵀ (IC×OC) += inp_cm · dout_cmᵀ      A = inp (IC×N),       B = dout (OC×N, transposed)
// The bias is a vector along m (rows of the column-major result) in the forward product, which is what
// CUBLASLT_EPILOGUE_BIAS broadcasts; the GELU input is an m×N matrix with leading dimension m.
//
// The bias gradient is our own deterministic column-sum (one small kernel), not cuBLASLt's
// BGRADB epilogue on the dweight product: that epilogue *stores* the sum (dbias must be added into,
// across gradient-accumulation micro-steps) in the output type (bf16: we would add a rounded partial
// sum to the rounded running sum), and its reduction order is cuBLASLt's. Ours sums in fp32 with a
// fixed order that depends only on (N, OC), rounds once when adding into dbias, and costs one extra
// read of dout (N·OC·e bytes, memory-bound). Against the backward's 4·N·IC·OC FLOPs that read costs
// GEMM rate / (2·IC·bandwidth) of the GEMM time: on an H100 (~650 TFLOP/s, ~3 TB/s) about 15% when
// IC = 768 and 4% when IC = 3072 (to be measured: dev/cuda/matmul.cu times both).
// matmul_set_bias_gradient_epilogue(true) switches to the BGRADB epilogue (into the scratch, then
// one small add), for that measurement: off by default.
//
// One cuBLASLt handle and one 32 MiB workspace serve the whole program: matmul calls on different
// streams must not run at the same time. Each configuration (shape, transposes, epilogue, alignments)
// gets its descriptor and layouts made once and its algorithm chosen once, then cached: on a GPU the
// heuristic's top candidates (up to kMatmulCandidates) that compute the same bits as its first are
// each timed on the call's own operands and the fastest is kept (matmul_fastest; matmul_set_autotune;
// the emulated build takes the heuristic's first unless a test or EMU_CUBLASLT_FASTEST turns timing
// on: emu/README.md); a product that accumulates into D has D kept aside and put back around the
// timing. So the fastest computes what the heuristic's first candidate computes on the operands it was
// timed on; cuBLAS documents bitwise
// identical results run to run for a given algorithm, toolkit version, architecture and SM count (its
// "Results reproducibility" section). A timed choice can still differ between processes and runs, and
// two candidates that agree on the operands timed need not agree on all; so the trainer holds timed
// choices back (matmul_hold_timed_choices: the heuristic's first computes meanwhile), shares one table
// of them between its ranks and its resumes (matmul_algorithm_table, matmul_adopt_algorithms;
// train/algorithm_table.h), and every product computes with the heuristic's first or that table's
// algorithm. The choice happens at the
// first call of a configuration, which must not be inside a CUDA graph capture (the trainer's first
// step runs eagerly); a configuration first met inside a capture takes the heuristic's first.
// Where cuBLASLt has no algorithm for a fused epilogue, the same result is computed in separate
// passes (plain GEMM, then our bias / GELU / GELU-gradient kernels); matmul_set_epilogue_fusion(false)
// forces those passes (tests and dev/cuda/matmul.cu compare both). Each refusal is recorded with
// cuBLASLt's status: matmul_refusal_report() lists them, one line each, for the trainer to print.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cublasLt.h>

#include "kernels/common.h"
#include "kernels/gelu.h"

// ---- errors
#define CUBLAS_CHECK(call) matmul_cublas_check((call), #call, __FILE__, __LINE__)
inline void matmul_cublas_check(cublasStatus_t status, const char* what, const char* file, int line) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "cuBLASLt error %d (%s) at %s:%d: %s\n", (int)status, cublasLtGetStatusString(status),
            file, line, what);
    exit(1);
}
inline void matmul_require(bool ok, const char* function, const char* what) {
    if (ok) return;
    fprintf(stderr, "%s: %s\n", function, what);
    exit(1);
}

// Offset of element (row, col) of a row-major matrix `width` columns wide. size_t: the logits are
// B·T × Vp = 65536 × 50304 = 3.3e9 elements at B=64, T=1024.
__host__ __device__ inline size_t matmul_element_offset(int row, int col, int width) {
    return (size_t)row * (size_t)width + (size_t)col;
}

// ================================================================================================
// Kernels: bias added in a separate pass (when not fused), and the bias gradient.

// out (N×OC) += bias broadcast over rows; one thread per 128-bit vector, OC a multiple of the width.
template <typename T>
__global__ void matmul_add_bias_kernel(T* out, const T* bias, int N, int OC) {
    constexpr int V = Packed128<T>::size;
    const size_t first = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (first >= (size_t)N * OC) return;
    const int col = (int)(first % (size_t)OC);
    Packed128<T> y = load128(out + first);
    const Packed128<T> b = load128(bias + col);
    for (int k = 0; k < V; k++) y[k] = from_float<T>(to_float(y[k]) + to_float(b[k]));
    store128(out + first, y);
}

// Bias gradient: dbias[col] += Σ_row dout[row, col] (dout N×OC), in one launch.
// Grid (column strips, row bands); block BIAS_GRAD_BLOCK_X × BIAS_GRAD_BLOCK_Y. Thread (x, y) owns one
// 128-bit column vector of the strip and sums rows y, y+Y, y+2Y, ... of the band; the Y row lanes are
// then added in order through shared memory and each column's fp32 sum is written to
// partial[band · OC + column]. Warps read whole 512-byte row segments (coalesced).
// The block that finishes last (counted on bias_grad_arrivals) then adds, for every column, the bands'
// partial sums in band order into dbias: the same order whichever block is last, so the same bits in
// every run. The counter is zero between launches (the last block resets it), so bias-gradient
// kernels must not run at the same time on one device (matmul calls never do: see above).
constexpr int BIAS_GRAD_BLOCK_X = 32, BIAS_GRAD_BLOCK_Y = 8;
static __device__ unsigned int bias_grad_arrivals = 0;
template <typename T>
__global__ void bias_grad_kernel(T* dbias, float* partial, const T* dout, int N, int OC, int rows_per_band) {
    constexpr int V = Packed128<T>::size;
    constexpr int STRIP = BIAS_GRAD_BLOCK_X * V;  // columns per block
    constexpr int PITCH = V + 1;                  // padding: conflict-free shared-memory access
    __shared__ float lane_sums[BIAS_GRAD_BLOCK_Y][BIAS_GRAD_BLOCK_X * PITCH];

    const int col0 = blockIdx.x * STRIP + threadIdx.x * V;
    const int row_begin = blockIdx.y * rows_per_band;
    const int row_end = min(N, row_begin + rows_per_band);
    float sum[V];
    for (int k = 0; k < V; k++) sum[k] = 0.0f;
    if (col0 < OC) {
#ifdef __CUDACC__
#pragma unroll 4  // several independent 16-byte loads in flight per thread
#endif
        for (int row = row_begin + threadIdx.y; row < row_end; row += BIAS_GRAD_BLOCK_Y) {
            const Packed128<T> d = load128cs(dout + matmul_element_offset(row, col0, OC));
            for (int k = 0; k < V; k++) sum[k] += to_float(d[k]);
        }
    }
    for (int k = 0; k < V; k++) lane_sums[threadIdx.y][threadIdx.x * PITCH + k] = sum[k];
    __syncthreads();

    const int tid = threadIdx.y * BIAS_GRAD_BLOCK_X + threadIdx.x;
    for (int c = tid; c < STRIP; c += BIAS_GRAD_BLOCK_X * BIAS_GRAD_BLOCK_Y) {
        const int col = blockIdx.x * STRIP + c;
        if (col >= OC) break;
        const int at = (c / V) * PITCH + c % V;
        float total = 0.0f;
        for (int y = 0; y < BIAS_GRAD_BLOCK_Y; y++) total += lane_sums[y][at];
        partial[matmul_element_offset(blockIdx.y, col, OC)] = total;
    }

    __shared__ bool finishes;
    __threadfence();  // this block's partial sums are visible to the block that finishes
    __syncthreads();
    if (tid == 0) finishes = atomicAdd(&bias_grad_arrivals, 1u) == gridDim.x * gridDim.y - 1;
    __syncthreads();
    if (!finishes) return;
    for (int col = tid; col < OC; col += BIAS_GRAD_BLOCK_X * BIAS_GRAD_BLOCK_Y) {
        float total = 0.0f;
        for (int band = 0; band < (int)gridDim.y; band++) total += __ldcg(partial + matmul_element_offset(band, col, OC));
        dbias[col] = from_float<T>(to_float(dbias[col]) + total);
    }
    if (tid == 0) bias_grad_arrivals = 0;
}

// dbias[col] += partial[col] (OC values of floatX, from cuBLASLt's BGRADB epilogue); one thread per column.
template <typename T>
__global__ void bias_grad_add_kernel(T* dbias, const T* partial, int OC) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col < OC) dbias[col] = from_float<T>(to_float(dbias[col]) + to_float(partial[col]));
}

// Row bands of the bias gradient: up to ~512 blocks (four per SM on an H100), each band at least 32
// rows. A function of (N, OC) only, so the summation order, and with it every bit of dbias, is the
// same on any device and in every run. bands · strips ≤ 512 also bounds the scratch: bands · OC ≤
// max(512 · columns per strip, OC) floats, i.e. at most max(512 KiB, 4·OC) bytes in bf16 (256 KiB
// for the first term in fp32), whatever N.
constexpr int BIAS_GRAD_TARGET_BLOCKS = 512, BIAS_GRAD_MIN_ROWS = 32;
inline int bias_grad_bands(int N, int OC) {
    const int strips = ceil_div(OC, BIAS_GRAD_BLOCK_X * Packed128<floatX>::size);
    const int wanted = std::max(1, BIAS_GRAD_TARGET_BLOCKS / strips);
    const int most = ceil_div(N, BIAS_GRAD_MIN_ROWS);
    return std::max(1, std::min(wanted, most));
}

// A fingerprint of a matrix's bits: Σ_i mix(i, word_i) over its 16-bit words, mod 2^64. Integer sums
// do not depend on their order, so it is the same in every run; two candidates' outputs with equal
// fingerprints are, but for a 2^-64 chance, the same bits. One thread per word (grid-stride), one
// integer atomic per warp.
__device__ __forceinline__ unsigned long long matmul_mix_word(unsigned long long index, unsigned short word) {
    unsigned long long x = (index << 16 | word) + 0x9E3779B97F4A7C15ull;  // splitmix64's finaliser
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
static __global__ void matmul_fingerprint_kernel(unsigned long long* out, const unsigned short* words, size_t n) {
    unsigned long long sum = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        sum += matmul_mix_word(i, words[i]);
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (threadIdx.x % 32 == 0) atomicAdd(out, sum);
}

// ================================================================================================
// cuBLASLt: the program-wide handle, workspace and algorithm cache.

#ifdef ENABLE_FP32
constexpr cudaDataType_t MATMUL_DATA_TYPE = CUDA_R_32F;
#else
constexpr cudaDataType_t MATMUL_DATA_TYPE = CUDA_R_16BF;
#endif
constexpr size_t MATMUL_WORKSPACE_BYTES = (size_t)32 << 20;  // what cuBLAS advises for Hopper

// Everything that can change cuBLASLt's choice of algorithm for one call.
struct MatmulAlgoKey {
    int m, n, k;
    bool trans_a, trans_b, accumulate;
    uint32_t epilogue;
    int align_a, align_b, align_d, align_bias, align_aux;  // bytes, up to 256
    bool operator==(const MatmulAlgoKey& o) const {
        return m == o.m && n == o.n && k == o.k && trans_a == o.trans_a && trans_b == o.trans_b &&
               accumulate == o.accumulate && epilogue == o.epilogue && align_a == o.align_a &&
               align_b == o.align_b && align_d == o.align_d && align_bias == o.align_bias &&
               align_aux == o.align_aux;
    }
};
constexpr int kMatmulCandidates = 8;

// Where a configuration's algorithm came from.
enum class MatmulAlgoSource {
    heuristic,  // the heuristic's first candidate (nothing timed)
    timed,      // the fastest candidate, timed here, in use
    held,       // the fastest candidate, timed here, proposed for a table (matmul_hold_timed_choices);
                // the heuristic's first computes until a table is adopted
    adopted,    // the algorithm of an adopted table (matmul_adopt_algorithms)
};

// What one configuration needs, made once: its descriptor (transposes, epilogue and the GELU matrix's
// leading dimension set; the bias and aux pointers set per call), its layouts, and its algorithm.
struct MatmulAlgoChoice {
    MatmulAlgoKey key;
    bool found;  // false: cuBLASLt has no algorithm for this epilogue here (cached too)
    cublasLtMatmulAlgo_t algo;      // what computes
    cublasLtMatmulAlgo_t proposal;  // what this process would put in a shared table (algo, or held)
    MatmulAlgoSource source;
    cublasLtMatmulAlgo_t offered[kMatmulCandidates];  // the heuristic's candidates, best first
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    int candidates;  // the heuristic's candidates, and how many of them were timed (0: none)
    int timed;
    int set_aside;   // candidates not timed because their bits differ from the heuristic's first
};

// One configuration's algorithm as a table holds it, to be saved, sent to other processes and
// adopted (matmul_algorithm_table, matmul_adopt_algorithms). cublasLtMatmulAlgo_t is 64 bytes of plain
// data that cuBLASLt documents as reusable across calls; it holds only for the same GPU model and
// library version, which the table's keeper checks.
struct MatmulAlgoEntry {
    MatmulAlgoKey key;
    int32_t compute_type;  // cublasComputeType_t: exact fp32 or TF32 change the candidates
    cublasLtMatmulAlgo_t algo;
};

// A fused epilogue cuBLASLt had no algorithm for (the product then ran in separate passes).
struct MatmulRefusal {
    MatmulAlgoKey key;
    cublasStatus_t status;  // what cublasLtMatmulAlgoGetHeuristic returned (SUCCESS: it returned 0 algorithms)
};

struct MatmulContext {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    int users = 0;  // matmul_setup calls not yet matched by matmul_teardown
    cublasComputeType_t compute_type = CUBLAS_COMPUTE_32F;
    bool fuse_epilogues = true;
    bool bias_gradient_epilogue = false;  // matmul_set_bias_gradient_epilogue
#ifdef EMU_CUDA
    // The stand-in's candidates all take the same time unless EMU_CUBLASLT_FASTEST makes one faster
    // per process (emu/README.md): only then is there anything to time.
    bool autotune = getenv("EMU_CUBLASLT_FASTEST") != nullptr;  // matmul_set_autotune
#else
    bool autotune = true;
#endif
    bool hold_timed_choices = false;       // matmul_hold_timed_choices
    std::vector<MatmulAlgoEntry> adopted;  // matmul_adopt_algorithms
    int rejected = 0;                      // adopted algorithms the heuristic did not offer here
    std::vector<MatmulAlgoChoice> algos;
    std::vector<MatmulRefusal> refusals;  // one per configuration (the heuristic is asked once)
    void destroy_descriptors() {
        for (MatmulAlgoChoice& c : algos) {
            cublasLtMatmulDescDestroy(c.desc);
            for (cublasLtMatrixLayout_t l : {c.a, c.b, c.d}) cublasLtMatrixLayoutDestroy(l);
        }
        algos.clear();
    }
    ~MatmulContext() { destroy_descriptors(); }  // host memory, at exit where no teardown freed it
};
inline MatmulContext& matmul_context() {
    static MatmulContext context;
    return context;
}

// Forgets every configuration's descriptor, layouts and algorithm.
inline void matmul_clear_algos() { matmul_context().destroy_descriptors(); }

// Creates the handle and workspace (or, if they exist, only changes the TF32 setting). allow_tf32
// matters in the fp32 build only: compute type 32F_FAST_TF32 instead of exact 32F.
// Reference-counted: every matmul_setup is matched by one matmul_teardown, and the handle and the
// workspace are freed once, by the teardown that matches the first setup (several models or tests in
// one program may each set up and tear down). A matmul call made before any setup creates them too;
// the next teardown then frees them.
inline void matmul_setup(bool allow_tf32 = false) {
    MatmulContext& ctx = matmul_context();
#ifdef ENABLE_FP32
    const cublasComputeType_t compute = allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
#else
    (void)allow_tf32;
    const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
#endif
    if (compute != ctx.compute_type) matmul_clear_algos();
    ctx.compute_type = compute;
    ctx.users++;
    if (ctx.handle) return;
    CUBLAS_CHECK(cublasLtCreate(&ctx.handle));
    CUDA_CHECK(cudaMalloc(&ctx.workspace, MATMUL_WORKSPACE_BYTES));
}

// Frees the handle, the workspace and the algorithm cache once the last user is done. The record
// of refused epilogues stays (matmul_refusal_report) until matmul_clear_refusals.
inline void matmul_teardown() {
    MatmulContext& ctx = matmul_context();
    if (ctx.users > 0) ctx.users--;
    if (ctx.users > 0) return;
    matmul_clear_algos();
    if (ctx.handle) CUBLAS_CHECK(cublasLtDestroy(ctx.handle));
    if (ctx.workspace) CUDA_CHECK(cudaFree(ctx.workspace));
    ctx.handle = nullptr;
    ctx.workspace = nullptr;
}

// True while a handle exists (for tests).
inline bool matmul_is_set_up() { return matmul_context().handle != nullptr; }

// true (default): bias, GELU and GELU gradient in cuBLASLt's epilogues where it has them;
// false: always in separate passes (for tests and benchmarks).
inline void matmul_set_epilogue_fusion(bool fused) { matmul_context().fuse_epilogues = fused; }

// false (default): the bias gradient is our two-kernel column sum (one extra read of dout, fp32 sum
// rounded once into dbias). true: cuBLASLt's BGRADB epilogue on the dweight product computes the
// column sums while that product reads dout anyway, stores them (in floatX: the bias-gradient type is
// D's) into the scratch, and one small kernel adds them into dbias: no extra read of dout, one launch
// fewer per layer, but in bf16 the sum is rounded twice (into the scratch,
// then into dbias) and its order is cuBLASLt's (reproducible on a given GPU and toolkit, as its
// products are). Where cuBLASLt refuses the epilogue, the column-sum kernels run (and the refusal is
// recorded). Off until measured on a GPU (dev/cuda/matmul.cu).
inline void matmul_set_bias_gradient_epilogue(bool on) { matmul_context().bias_gradient_epilogue = on; }

// true (the default on a GPU): a configuration's algorithm is the fastest of the heuristic's top
// candidates, timed at its first call; false (the emulated build's default): the heuristic's first.
// Applies to configurations met from now on.
inline void matmul_set_autotune(bool on) { matmul_context().autotune = on; }

// Largest power of two up to 256 that divides the address (256 for null).
inline int matmul_alignment_bytes(const void* p) {
    const uintptr_t address = (uintptr_t)p;
    int alignment = 256;
    while (alignment > 1 && address % alignment != 0) alignment /= 2;
    return alignment;
}

// Whether work issued to `stream` is being captured into a CUDA graph.
inline bool matmul_stream_capturing(cudaStream_t stream) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    return cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone;
}

// The configuration's descriptor and layouts (D (m×n, ld m) = op(A) · op(B); see matmul_cublaslt).
inline void matmul_make_descriptors(MatmulAlgoChoice* c, cublasLtEpilogue_t epilogue) {
    MatmulContext& ctx = matmul_context();
    const MatmulAlgoKey& k = c->key;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&c->desc, ctx.compute_type, CUDA_R_32F));
    const cublasOperation_t op_a = k.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = k.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (epilogue == CUBLASLT_EPILOGUE_GELU_AUX || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
        epilogue == CUBLASLT_EPILOGUE_DGELU) {
        const int64_t aux_ld = k.m;  // the GELU matrix is m×n, like D
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
    }
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c->a, MATMUL_DATA_TYPE, k.trans_a ? k.k : k.m, k.trans_a ? k.m : k.k,
                                            k.trans_a ? k.k : k.m));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c->b, MATMUL_DATA_TYPE, k.trans_b ? k.n : k.k, k.trans_b ? k.k : k.n,
                                            k.trans_b ? k.n : k.k));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c->d, MATMUL_DATA_TYPE, k.m, k.n, k.m));  // C and D: the same matrix
}

// The call's bias and GELU-matrix pointers into the configuration's descriptor.
inline void matmul_set_pointers(const MatmulAlgoChoice& c, const floatX* bias, const floatX* aux) {
    if (bias) {
        const void* bias_pointer = bias;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_pointer,
                                                    sizeof(bias_pointer)));
    }
    if (aux) {
        const void* aux_pointer = aux;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux_pointer,
                                                    sizeof(aux_pointer)));
    }
}

inline void matmul_run(const MatmulAlgoChoice& c, const cublasLtMatmulAlgo_t& algo, floatX* d, const floatX* a,
                       const floatX* b, cudaStream_t stream) {
    MatmulContext& ctx = matmul_context();
    const float alpha = 1.0f, beta = c.key.accumulate ? 1.0f : 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(ctx.handle, c.desc, &alpha, a, c.a, b, c.b, &beta, d, c.d, d, c.d, &algo,
                                ctx.workspace, MATMUL_WORKSPACE_BYTES, stream));
}

// The fingerprint (matmul_fingerprint_kernel) of `bytes` bytes at p; the host waits for it.
inline unsigned long long matmul_fingerprint(const void* p, size_t bytes, unsigned long long* scratch,
                                             cudaStream_t stream) {
    CUDA_CHECK(cudaMemsetAsync(scratch, 0, sizeof(*scratch), stream));
    const size_t words = bytes / 2;
    const int block = 256, grid = (int)std::min<size_t>(1024, std::max<size_t>(1, ceil_div(words, (size_t)block)));
    LAUNCH(matmul_fingerprint_kernel, grid, block, 0, stream, scratch, static_cast<const unsigned short*>(p), words);
    unsigned long long fingerprint = 0;
    CUDA_CHECK(cudaMemcpyAsync(&fingerprint, scratch, sizeof(fingerprint), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return fingerprint;
}

// The fastest of the candidates on these operands that compute the heuristic's first candidate's bits.
// cuBLASLt's algorithms differ in how they split and order the sum over k (tile shapes, split-k,
// stream-k), so two candidates may give different roundings; a choice by timing alone would then make
// the bits of a run depend on which one happened to be faster at start-up. So each candidate first
// runs once from the same D, and one whose output (D, and the bias gradient of a BGRAD epilogue) has
// another fingerprint than the first candidate's is set aside; the others are timed over a few runs
// (CUDA events, on the call's stream; the host waits: set-up time, not a step's). A product that
// accumulates into D has D copied aside first and put back before each candidate and at the end; any
// other output (D, the GELU matrix, a bias gradient) is rewritten by the call that follows.
inline cublasLtMatmulAlgo_t matmul_fastest(MatmulAlgoChoice& c, const cublasLtMatmulHeuristicResult_t* results,
                                           int count, floatX* d, const floatX* a, const floatX* b,
                                           const floatX* bias_gradient, cudaStream_t stream) {
#ifdef EMU_CUDA
    const int runs = 1;  // the emulator's times mean nothing: run each once, for the save and restore
#else
    const int runs = 5;
#endif
    const size_t d_bytes = (size_t)c.key.m * c.key.n * sizeof(floatX);
    floatX* saved = nullptr;
    if (c.key.accumulate) {
        CUDA_CHECK(cudaMalloc(&saved, d_bytes));
        CUDA_CHECK(cudaMemcpyAsync(saved, d, d_bytes, cudaMemcpyDeviceToDevice, stream));
    }
    unsigned long long* scratch = nullptr;
    CUDA_CHECK(cudaMalloc(&scratch, sizeof(*scratch)));
    auto fingerprint = [&] {
        unsigned long long f = matmul_fingerprint(d, d_bytes, scratch, stream);
        if (bias_gradient) {  // BGRADB: one value per column of D; BGRADA, DGELU_BGRAD: per row
            const size_t values = c.key.epilogue == CUBLASLT_EPILOGUE_BGRADB ? c.key.n : c.key.m;
            f ^= 31 * matmul_fingerprint(bias_gradient, values * sizeof(floatX), scratch, stream);
        }
        return f;
    };
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    int best = 0, first = -1;
    float best_ms = 0;
    unsigned long long first_bits = 0;
    for (int i = 0; i < count; i++) {
        if (results[i].state != CUBLAS_STATUS_SUCCESS || results[i].workspaceSize > MATMUL_WORKSPACE_BYTES) continue;
        if (saved) CUDA_CHECK(cudaMemcpyAsync(d, saved, d_bytes, cudaMemcpyDeviceToDevice, stream));
        matmul_run(c, results[i].algo, d, a, b, stream);
        const unsigned long long bits = fingerprint();
        if (first < 0) {
            first = best = i;
            first_bits = bits;
        } else if (bits != first_bits) {
            c.set_aside++;
            continue;
        }
        CUDA_CHECK(cudaEventRecord(start, stream));
        for (int r = 0; r < runs; r++) matmul_run(c, results[i].algo, d, a, b, stream);
        CUDA_CHECK(cudaEventRecord(stop, stream));
        CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        if (i == first || ms < best_ms) best = i, best_ms = ms;
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    CUDA_CHECK(cudaFree(scratch));
    if (saved) {
        CUDA_CHECK(cudaMemcpyAsync(d, saved, d_bytes, cudaMemcpyDeviceToDevice, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        CUDA_CHECK(cudaFree(saved));
    }
    return results[best].algo;
}

// The adopted table's algorithm for `key` under this compute type, if it has one.
inline const MatmulAlgoEntry* matmul_adopted_entry(const MatmulAlgoKey& key) {
    const MatmulContext& ctx = matmul_context();
    for (const MatmulAlgoEntry& e : ctx.adopted)
        if (e.key == key && e.compute_type == (int32_t)ctx.compute_type) return &e;
    return nullptr;
}

// Whether the heuristic offered `algo` for this configuration (so that it can run it here).
inline bool matmul_offered(const MatmulAlgoChoice& c, const cublasLtMatmulAlgo_t& algo) {
    for (int i = 0; i < c.candidates; i++)
        if (memcmp(&c.offered[i], &algo, sizeof algo) == 0) return true;
    return false;
}

// Puts an adopted algorithm in use for c, where the heuristic offers it here; else (another GPU or
// library: the keeper of the table should have noticed) counts a rejection and runs the heuristic's
// first. Either way nothing is timed.
inline void matmul_use_adopted(MatmulAlgoChoice& c, const cublasLtMatmulAlgo_t& algo) {
    const bool offered = matmul_offered(c, algo);
    matmul_context().rejected += !offered;
    c.algo = c.proposal = offered ? algo : c.offered[0];
    c.source = offered ? MatmulAlgoSource::adopted : MatmulAlgoSource::heuristic;
}

// The algorithm of a configuration's first call, from the heuristic's `returned` candidates: the
// adopted table's; else with autotune the fastest (in use at once, or held: see
// matmul_hold_timed_choices); else the heuristic's first.
inline void matmul_choose(MatmulAlgoChoice& c, const cublasLtMatmulHeuristicResult_t* results, int returned,
                          floatX* d, const floatX* a, const floatX* b, const floatX* bias, cudaStream_t stream) {
    MatmulContext& ctx = matmul_context();
    for (int i = 0; i < returned; i++) c.offered[i] = results[i].algo;
    c.algo = c.proposal = results[0].algo;
    c.source = MatmulAlgoSource::heuristic;
    if (const MatmulAlgoEntry* entry = matmul_adopted_entry(c.key)) return matmul_use_adopted(c, entry->algo);
    if (!ctx.autotune || returned < 2 || matmul_stream_capturing(stream)) return;
    const uint32_t e = c.key.epilogue;
    const bool writes_bias_gradient =
        e == CUBLASLT_EPILOGUE_BGRADB || e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
    c.proposal = matmul_fastest(c, results, returned, d, a, b, writes_bias_gradient ? bias : nullptr, stream);
    c.timed = returned;
    c.source = ctx.hold_timed_choices ? MatmulAlgoSource::held : MatmulAlgoSource::timed;
    if (!ctx.hold_timed_choices) c.algo = c.proposal;
}

// A configuration met for the first time: its descriptors, the heuristic's candidates (for the call's
// alignments, within the workspace), and its algorithm (matmul_choose).
inline MatmulAlgoChoice matmul_first_call(const MatmulAlgoKey& key, cublasLtEpilogue_t epilogue, floatX* d,
                                          const floatX* a, const floatX* b, const floatX* bias, const floatX* aux,
                                          cudaStream_t stream) {
    MatmulContext& ctx = matmul_context();
    MatmulAlgoChoice fresh{};
    fresh.key = key;
    matmul_make_descriptors(&fresh, epilogue);
    matmul_set_pointers(fresh, bias, aux);
    cublasLtMatmulPreference_t preference;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    const uint64_t workspace_bytes = MATMUL_WORKSPACE_BYTES;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &workspace_bytes, sizeof(workspace_bytes)));
    // The heuristic assumes 256-byte aligned matrices unless told otherwise.
    const uint32_t alignments[4] = {(uint32_t)key.align_a, (uint32_t)key.align_b, (uint32_t)key.align_d,
                                    (uint32_t)key.align_d};
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(preference, which[i], &alignments[i], sizeof(alignments[i])));
    cublasLtMatmulHeuristicResult_t results[kMatmulCandidates];
    int returned = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        ctx.handle, fresh.desc, fresh.a, fresh.b, fresh.d, fresh.d, preference, kMatmulCandidates, results, &returned);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(preference));
    fresh.found = status == CUBLAS_STATUS_SUCCESS && returned > 0;
    fresh.candidates = fresh.found ? returned : 0;
    if (fresh.found) matmul_choose(fresh, results, returned, d, a, b, bias, stream);
    if (!fresh.found && epilogue != CUBLASLT_EPILOGUE_DEFAULT) ctx.refusals.push_back({key, status});
    return fresh;
}

// D (m×n, column-major, ld m) = op(A) · op(B) [+ D when accumulate], with a cuBLASLt epilogue
// (bias: m-vector; aux: the GELU input, m×n with ld m, written by GELU_AUX*, read by DGELU).
// op(A) is m×k: A is stored k×m when trans_a, else m×k; op(B) is k×n: B is n×k when trans_b, else k×n.
// Returns false without computing anything when cuBLASLt has no algorithm for this epilogue and
// layout; a failure of the plain product (DEFAULT epilogue) is fatal.
inline bool matmul_cublaslt(floatX* d, const floatX* a, const floatX* b, int m, int n, int k, bool trans_a,
                            bool trans_b, bool accumulate, cublasLtEpilogue_t epilogue, const floatX* bias,
                            const floatX* aux, cudaStream_t stream) {
    MatmulContext& ctx = matmul_context();
    if (!ctx.handle) matmul_setup();

    // clang-format off
    const MatmulAlgoKey key{m, n, k, trans_a, trans_b, accumulate, (uint32_t)epilogue,
                            matmul_alignment_bytes(a), matmul_alignment_bytes(b), matmul_alignment_bytes(d),
                            matmul_alignment_bytes(bias), matmul_alignment_bytes(aux)};
    // clang-format on
    MatmulAlgoChoice* choice = nullptr;
    for (MatmulAlgoChoice& c : ctx.algos)
        if (c.key == key) choice = &c;
    if (!choice) {  // first call of this configuration: its descriptors, and its algorithm
        ctx.algos.push_back(matmul_first_call(key, epilogue, d, a, b, bias, aux, stream));
        choice = &ctx.algos.back();
    }
    if (!choice->found) {
        if (epilogue == CUBLASLT_EPILOGUE_DEFAULT) {
            fprintf(stderr, "cuBLASLt has no algorithm for a %d x %d x %d product (trans_a %d, trans_b %d)\n",
                    m, n, k, (int)trans_a, (int)trans_b);
            exit(1);
        }
        return false;
    }
    matmul_set_pointers(*choice, bias, aux);
    matmul_run(*choice, choice->algo, d, a, b, stream);
    return true;
}

// How many configurations are cached, and how many of them chose their algorithm by timing (for the
// start-up report and tests).
inline int matmul_configurations() { return (int)matmul_context().algos.size(); }
inline int matmul_timed_configurations() {
    int timed = 0;
    for (const MatmulAlgoChoice& c : matmul_context().algos) timed += c.timed > 0;
    return timed;
}
// How many candidates the timing set aside for computing other bits than the heuristic's first.
inline int matmul_candidates_set_aside() {
    int set_aside = 0;
    for (const MatmulAlgoChoice& c : matmul_context().algos) set_aside += c.set_aside;
    return set_aside;
}

// ---- the table of algorithms, shared between processes (kernels/ knows no files and no ranks: the
// trainer gathers, merges, saves and loads it; train/matmul_algorithms.h).

// true: a timed choice is only proposed (matmul_algorithm_table) while the heuristic's first candidate
// computes, until a table is adopted; so no product's bits depend on which candidate timed fastest in
// this process. false (default): the timed choice computes at once.
inline void matmul_hold_timed_choices(bool hold) { matmul_context().hold_timed_choices = hold; }

// This process's algorithm for every configuration met so far that has one: what it computes with,
// or (held) what it timed fastest.
inline std::vector<MatmulAlgoEntry> matmul_algorithm_table() {
    std::vector<MatmulAlgoEntry> table;
    const MatmulContext& ctx = matmul_context();
    for (const MatmulAlgoChoice& c : ctx.algos)
        if (c.found) table.push_back({c.key, (int32_t)ctx.compute_type, c.proposal});
    return table;
}

// From now on, `table`'s algorithm for each configuration it holds (met already or later), without
// timing; configurations it does not hold are chosen as before. An algorithm the heuristic does not
// offer here is not run: that configuration takes the heuristic's first (matmul_algorithms_rejected).
inline void matmul_adopt_algorithms(const std::vector<MatmulAlgoEntry>& table) {
    MatmulContext& ctx = matmul_context();
    ctx.adopted = table;
    ctx.rejected = 0;
    for (MatmulAlgoChoice& c : ctx.algos)
        if (c.found)
            if (const MatmulAlgoEntry* entry = matmul_adopted_entry(c.key)) matmul_use_adopted(c, entry->algo);
}

// How many configurations took their algorithm from `source`, and how many adopted algorithms the
// heuristic did not offer here.
inline int matmul_configurations_from(MatmulAlgoSource source) {
    int count = 0;
    for (const MatmulAlgoChoice& c : matmul_context().algos) count += c.found && c.source == source;
    return count;
}
inline int matmul_algorithms_rejected() { return matmul_context().rejected; }

// ---- the record of refused epilogues, for a start-up report. A refusal costs speed, not accuracy
// (the separate passes compute the same result), so it is silent while it happens; the trainer
// prints this report after its first step, when every product has been asked for once.

inline const char* matmul_epilogue_name(uint32_t epilogue) {
    switch (epilogue) {
        case CUBLASLT_EPILOGUE_DEFAULT: return "DEFAULT";
        case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
        case CUBLASLT_EPILOGUE_GELU: return "GELU";
        case CUBLASLT_EPILOGUE_GELU_BIAS: return "GELU_BIAS";
        case CUBLASLT_EPILOGUE_GELU_AUX: return "GELU_AUX";
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
        case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
        case CUBLASLT_EPILOGUE_DGELU_BGRAD: return "DGELU_BGRAD";
        case CUBLASLT_EPILOGUE_BGRADA: return "BGRADA";
        case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
        default: return "other";
    }
}

// Fused epilogues refused so far (one per configuration).
inline int matmul_refusal_count() { return (int)matmul_context().refusals.size(); }
inline void matmul_clear_refusals() { matmul_context().refusals.clear(); }

// One line per refused fused epilogue, e.g.
//   matmul: GELU_AUX_BIAS epilogue refused for m=3072 n=8192 k=768 (op(A)=T op(B)=N, alignment A 256
//   B 256 D 256 bias 16 aux 256 bytes): CUBLAS_STATUS_NOT_SUPPORTED; computed in separate passes
// (m, n, k of cuBLASLt's column-major product: see the top of this file). Empty when none was refused.
inline std::string matmul_refusal_report() {
    std::string report;
    for (const MatmulRefusal& r : matmul_context().refusals) {
        const MatmulAlgoKey& k = r.key;
        char line[400];
        snprintf(line, sizeof line,
                 "matmul: %s epilogue refused for m=%d n=%d k=%d (op(A)=%c op(B)=%c, alignment A %d B %d D %d "
                 "bias %d aux %d bytes): %s; computed in separate passes\n",
                 matmul_epilogue_name(k.epilogue), k.m, k.n, k.k, k.trans_a ? 'T' : 'N', k.trans_b ? 'T' : 'N',
                 k.align_a, k.align_b, k.align_d, k.align_bias, k.align_aux,
                 r.status == CUBLAS_STATUS_SUCCESS ? "no algorithm returned" : cublasLtGetStatusName(r.status));
        report += line;
    }
    return report;
}

// ================================================================================================
// Host launch functions.

inline void matmul_check_shapes(const char* function, int N, int IC, int OC) {
    matmul_require(N >= 0 && IC > 0 && OC > 0, function, "N must be >= 0, IC and OC > 0");
    matmul_require(IC % 8 == 0 && OC % 8 == 0, function, "IC and OC must be multiples of 8");
}

// out (N×OC) += bias, in a pass of its own.
inline void matmul_add_bias(floatX* out, const floatX* bias, int N, int OC, cudaStream_t stream) {
    matmul_require(matmul_alignment_bytes(out) >= 16 && matmul_alignment_bytes(bias) >= 16, "matmul_add_bias",
                   "out and bias must be 16-byte aligned");
    const size_t vectors = (size_t)N * OC / Packed128<floatX>::size;
    const int block_size = 256;
    LAUNCH(matmul_add_bias_kernel<floatX>, ceil_div(vectors, block_size), block_size, 0, stream, out, bias, N,
           OC);
    CUDA_CHECK(cudaGetLastError());
}

// out = inp · weightᵀ (+ bias): the bias in the epilogue when fusion is on and cuBLASLt has it,
// else in a separate pass.
inline void matmul_linear_forward(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias,
                                  int N, int IC, int OC, cudaStream_t stream) {
    if (bias && matmul_context().fuse_epilogues &&
        matmul_cublaslt(out, weight, inp, OC, N, IC, true, false, false, CUBLASLT_EPILOGUE_BIAS, bias,
                        nullptr, stream))
        return;
    matmul_cublaslt(out, weight, inp, OC, N, IC, true, false, false, CUBLASLT_EPILOGUE_DEFAULT, nullptr,
                    nullptr, stream);
    if (bias) matmul_add_bias(out, bias, N, OC, stream);
}

// out (N×OC) = inp (N×IC) · weightᵀ + bias (bias may be null). With pre_gelu non-null (N×OC, distinct
// from out): pre_gelu = inp · weightᵀ + bias and out = gelu(pre_gelu), in the epilogue
// (GELU_AUX_BIAS, or GELU_AUX without bias).
inline void matmul_forward(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias, int N,
                           int IC, int OC, cudaStream_t stream, floatX* pre_gelu = nullptr) {
    matmul_check_shapes("matmul_forward", N, IC, OC);
    matmul_require(!pre_gelu || pre_gelu != out, "matmul_forward", "pre_gelu must not be the output");
    if (N == 0) return;
    if (!pre_gelu) {
        matmul_linear_forward(out, inp, weight, bias, N, IC, OC, stream);
        return;
    }
    const cublasLtEpilogue_t epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    if (matmul_context().fuse_epilogues &&
        matmul_cublaslt(out, weight, inp, OC, N, IC, true, false, false, epilogue, bias, pre_gelu, stream))
        return;
    matmul_linear_forward(pre_gelu, inp, weight, bias, N, IC, OC, stream);
    gelu_forward(out, pre_gelu, (size_t)N * OC, stream);
}

// Bytes of fp32 scratch matmul_backward needs for the bias gradient of an N×OC dout (never more than
// max(512 KiB, 4·OC): see bias_grad_bands; always at least the OC floatX the BGRADB path uses).
inline size_t matmul_backward_scratch_bytes(int N, int OC) {
    return (size_t)bias_grad_bands(N, OC) * (size_t)OC * sizeof(float);
}

// dbias (OC) += column sums of dout (N×OC), deterministic; scratch holds
// matmul_backward_scratch_bytes(N, OC) bytes.
inline void matmul_bias_gradient(floatX* dbias, void* scratch, const floatX* dout, int N, int OC,
                                 cudaStream_t stream) {
    matmul_require(matmul_alignment_bytes(dout) >= 16, "matmul_bias_gradient",
                   "dout must be 16-byte aligned");
    const int bands = bias_grad_bands(N, OC);
    const int strips = ceil_div(OC, BIAS_GRAD_BLOCK_X * Packed128<floatX>::size);
    float* partial = static_cast<float*>(scratch);
    LAUNCH(bias_grad_kernel<floatX>, dim3(strips, bands), dim3(BIAS_GRAD_BLOCK_X, BIAS_GRAD_BLOCK_Y), 0, stream,
           dbias, partial, dout, N, OC, ceil_div(N, bands));
    CUDA_CHECK(cudaGetLastError());
}

// dinp (N×IC) = dout · weight, OVERWRITTEN; with pre_gelu (N×IC) then multiplied by gelu'(pre_gelu)
// (DGELU epilogue: the backward of the GELU between the fc and fcproj layers).
// dweight (OC×IC) += doutᵀ · inp. dbias (OC) += column sums of dout, if dbias is not null (then
// scratch must hold matmul_backward_scratch_bytes(N, OC) bytes). dinp must not alias dout or inp.
inline void matmul_backward(floatX* dinp, floatX* dweight, floatX* dbias, void* scratch, const floatX* dout,
                            const floatX* inp, const floatX* weight, int N, int IC, int OC,
                            cudaStream_t stream, const floatX* pre_gelu = nullptr) {
    matmul_check_shapes("matmul_backward", N, IC, OC);
    matmul_require(!dbias || scratch, "matmul_backward", "dbias needs scratch memory");
    if (N == 0) return;
    const bool fused = matmul_context().fuse_epilogues;

    // dinpᵀ (IC×N) = weight_cm (IC×OC) · dout_cm (OC×N)
    if (!(pre_gelu && fused &&
          matmul_cublaslt(dinp, weight, dout, IC, N, OC, false, false, false, CUBLASLT_EPILOGUE_DGELU,
                          nullptr, pre_gelu, stream))) {
        matmul_cublaslt(dinp, weight, dout, IC, N, OC, false, false, false, CUBLASLT_EPILOGUE_DEFAULT,
                        nullptr, nullptr, stream);
        if (pre_gelu) gelu_backward(dinp, pre_gelu, dinp, (size_t)N * IC, stream);
    }
    // dweightᵀ (IC×OC) += inp_cm (IC×N) · dout_cmᵀ (N×OC); with BGRADB, scratch (OC floatX) = the
    // sums of op(B) = dout_cmᵀ over k = N, i.e. dout's column sums.
    if (dbias && fused && matmul_context().bias_gradient_epilogue) {
        floatX* partial = static_cast<floatX*>(scratch);
        if (matmul_cublaslt(dweight, inp, dout, IC, OC, N, false, true, true, CUBLASLT_EPILOGUE_BGRADB, partial,
                            nullptr, stream)) {
            const int block_size = 256;
            LAUNCH(bias_grad_add_kernel<floatX>, ceil_div(OC, block_size), block_size, 0, stream, dbias, partial,
                   OC);
            CUDA_CHECK(cudaGetLastError());
            return;
        }
    }
    matmul_cublaslt(dweight, inp, dout, IC, OC, N, false, true, true, CUBLASLT_EPILOGUE_DEFAULT, nullptr,
                    nullptr, stream);
    if (dbias) matmul_bias_gradient(dbias, scratch, dout, N, OC, stream);
}
