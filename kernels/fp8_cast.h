// FP8 casts with per-tensor scales, all on the device (no host synchronisation, capturable in a CUDA
// graph): the building blocks of FP8 products (kernels/matmul_fp8.h). Formats, rounding, saturation
// and the scale rule are base/fp8.h's; docs/FP8.md says why.
//   amax        amax = max_i |x_i|                         (NaN wins: a NaN in x makes amax NaN)
//   scale       s = 2^floor(log2(fp8_max / amax)), s⁻¹     (fp8_scale_from_amax; amax 0 → 1; a
//                                                           non-finite amax → 1 and the flag raised)
//     current   from this tensor's amax now (fp8_amax, then fp8_current_scale)
//     delayed   from the largest of the last N amaxes (a ring of N floats per tensor): the casts of a
//               step take the amax of what they cast, then fp8_delayed_update pushes it into the ring
//               and sets the scale for the next step from the ring's maximum
//   cast        q_i = fp8(x_i · s)                          (E4M3 or E5M2, saturating, s read from the
//                                                           device; optionally taking amax in the pass)
//   cast + transpose  q (R×C) and qᵀ (C×R) from x (R×C), in one pass (Hopper's FP8 GEMMs take only
//               the TN layout, so an operand needed the other way round is written transposed)
// x is floatX (bf16, or fp32 in the fp32 build), n elements or R×C row-major; q is one byte per value
// (__nv_fp8_storage_t), row-major. The scale state of each tensor is an Fp8ScaleState on the device.
// Per call, e = sizeof(floatX):
//   amax                 reads n·e bytes, writes 4 (one atomic per block)
//   cast                 reads n·e, writes n bytes (+ one atomic per block with the amax)
//   cast + transpose     reads R·C·e, writes 2·R·C bytes (R·C without the untransposed copy)
//   current scale / delayed update: one thread per tensor, reads 12 bytes (+ 4N of ring), writes 12
// The element-wise kernels move 128 bits at a time (16 FP8 values per store) where aligned.
//
// The amax is a max over |x| as bit patterns (unsigned integers order non-negative floats as the
// floats, NaN above inf): atomicMax on those bits, so the result does not depend on the order in which
// blocks finish. FP8 conversions are cuda_fp8.h's __nv_cvt_float2_to_fp8x2 with __NV_SATFINITE: the
// cvt.rn.satfinite instruction on sm_89 and later, NVIDIA's software conversion on older targets
// (the compute_80 PTX) and under the emulator; tests check them against base/fp8.h bit for bit.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cuda_fp8.h>
#include <type_traits>

#include "base/fp8.h"
#include "kernels/common.h"

// One tensor's scaling state, on the device.
struct Fp8ScaleState {
    float scale;      // the cast computes fp8(x · scale)
    float scale_inv;  // 1 / scale: what cuBLASLt multiplies the product by (A/B_SCALE_POINTER)
    float amax;       // current: the amax the scale came from; delayed: the amax the casts take,
                      // pushed into the ring and zeroed by fp8_delayed_update
    int history_next; // delayed: where the next amax goes in the ring
};

constexpr int FP8_CAST_BLOCK = 256;
constexpr int FP8_CAST_PER_THREAD = 16;  // FP8 values per thread per step: one 16-byte store
constexpr int FP8_TILE = 64;             // cast + transpose: 64×64 tiles, FP8_CAST_BLOCK threads each
constexpr int FP8_TILE_PITCH = FP8_TILE + 4;  // shared-memory row, bytes: fewer bank conflicts

__host__ __device__ constexpr __nv_fp8_interpretation_t fp8_interpretation(Fp8Format f) {
    return f == Fp8Format::e4m3 ? __NV_E4M3 : __NV_E5M2;
}

// |x| as bits (the amax order; see the top of this file).
__device__ __forceinline__ unsigned fp8_magnitude_bits(float x) { return __float_as_uint(x) & 0x7FFFFFFFu; }

// The block's largest magnitude bits into *amax (a float, compared as bits), one atomic per block.
// Every thread of the (1-D or 2-D) block must call it.
__device__ __forceinline__ void fp8_block_amax_commit(unsigned bits, float* amax) {
    __shared__ unsigned warp_max[32];
    for (int offset = 16; offset > 0; offset /= 2) bits = max(bits, __shfl_xor_sync(0xffffffffu, bits, offset));
    const int thread = threadIdx.y * blockDim.x + threadIdx.x;
    const int warps = blockDim.x * blockDim.y / 32;
    if (thread % 32 == 0) warp_max[thread / 32] = bits;
    __syncthreads();
    if (thread == 0) {
        unsigned block_max = 0;
        for (int w = 0; w < warps; w++) block_max = max(block_max, warp_max[w]);
        if (block_max) atomicMax(reinterpret_cast<unsigned*>(amax), block_max);
    }
}

// Two values to two FP8 codes (low byte: a), saturating, round to nearest even.
template <Fp8Format F>
__device__ __forceinline__ unsigned short fp8_pack2(float a, float b) {
    return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, fp8_interpretation(F));
}

// ---- amax

// *amax = max(*amax, max_i |x_i|), grid-stride, FP8_CAST_PER_THREAD elements per thread per step (in
// 128-bit loads); x 16-byte aligned.
template <typename T>
__global__ void fp8_amax_kernel(float* amax, const T* x, size_t n) {
    constexpr int V = Packed128<T>::size;
    unsigned bits = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x * FP8_CAST_PER_THREAD;
    for (size_t first = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * FP8_CAST_PER_THREAD; first < n;
         first += stride) {
        if (first + FP8_CAST_PER_THREAD <= n) {
            for (int v = 0; v < FP8_CAST_PER_THREAD; v += V) {
                const Packed128<T> p = load128cs(x + first + v);
                for (int k = 0; k < V; k++) bits = max(bits, fp8_magnitude_bits(to_float(p[k])));
            }
        } else {
            for (size_t i = first; i < n; i++) bits = max(bits, fp8_magnitude_bits(to_float(x[i])));
        }
    }
    fp8_block_amax_commit(bits, amax);
}

// ---- scales: one thread per tensor, over `tensors` consecutive states of one format

// Current recipe: each state's scale from its amax (base/fp8.h's rule); *nonfinite = 1 where an amax
// is not finite.
template <Fp8Format F>
__global__ void fp8_current_scale_kernel(Fp8ScaleState* states, int tensors, int* nonfinite) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= tensors) return;
    Fp8ScaleState& s = states[t];
    const Fp8Scale scale = fp8_scale_from_amax(s.amax, F);
    s.scale = scale.scale;
    s.scale_inv = scale.scale_inv;
    if (!scale.finite) *nonfinite = 1;
}

// Delayed recipe: pushes each state's amax (what this step's casts took) into its ring of `length`
// (histories: tensors × length floats), zeroes the amax for the next step's casts, and sets the scale
// from the ring's maximum. A non-finite amax raises *nonfinite and is not pushed: the step it came
// from is skipped by the step guard, and the ring keeps the last `length` finite amaxes.
template <Fp8Format F>
__global__ void fp8_delayed_update_kernel(Fp8ScaleState* states, float* histories, int tensors, int length,
                                          int* nonfinite) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= tensors) return;
    Fp8ScaleState& s = states[t];
    float* ring = histories + (size_t)t * length;
    const float amax = s.amax;
    if (fp8_magnitude_bits(amax) < 0x7F800000u) {
        ring[s.history_next] = amax;
        s.history_next = (s.history_next + 1) % length;
    } else {
        *nonfinite = 1;
    }
    s.amax = 0.0f;
    float largest = 0.0f;
    for (int i = 0; i < length; i++) largest = fp8_amax_merge(largest, ring[i]);
    const Fp8Scale scale = fp8_scale_from_amax(largest, F);
    s.scale = scale.scale;
    s.scale_inv = scale.scale_inv;
}

// Every state: scale 1, amax 0, its ring (length floats, may be 0) zeroed.
__global__ void fp8_scale_state_init_kernel(Fp8ScaleState* states, int tensors, float* histories, int length) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)tensors) states[i] = Fp8ScaleState{1.0f, 1.0f, 0.0f, 0};
    if (i < (size_t)tensors * length) histories[i] = 0.0f;
}

// ---- cast

// q_i = fp8(x_i · state->scale); with TAKE_AMAX also state->amax = max(state->amax, max |x_i|).
// Grid-stride, FP8_CAST_PER_THREAD values per thread per step: 128-bit loads, one 16-byte store; the
// ragged end element by element. x and q 16-byte aligned.
template <typename T, Fp8Format F, bool TAKE_AMAX>
__global__ void fp8_cast_kernel(__nv_fp8_storage_t* q, const T* x, size_t n, Fp8ScaleState* state) {
    constexpr int V = Packed128<T>::size;
    const float scale = state->scale;
    unsigned bits = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x * FP8_CAST_PER_THREAD;
    for (size_t first = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * FP8_CAST_PER_THREAD; first < n;
         first += stride) {
        if (first + FP8_CAST_PER_THREAD <= n) {
            float v[FP8_CAST_PER_THREAD];
            for (int c = 0; c < FP8_CAST_PER_THREAD; c += V) {
                const Packed128<T> p = load128cs(x + first + c);
                for (int k = 0; k < V; k++) v[c + k] = to_float(p[k]);
            }
            Packed128<unsigned short> out;  // 8 pairs of codes
            for (int k = 0; k < FP8_CAST_PER_THREAD; k += 2) {
                if (TAKE_AMAX) bits = max(bits, max(fp8_magnitude_bits(v[k]), fp8_magnitude_bits(v[k + 1])));
                out[k / 2] = fp8_pack2<F>(v[k] * scale, v[k + 1] * scale);
            }
            store128(reinterpret_cast<unsigned short*>(q + first), out);
        } else {
            for (size_t i = first; i < n; i++) {
                const float v = to_float(x[i]);
                if (TAKE_AMAX) bits = max(bits, fp8_magnitude_bits(v));
                q[i] = (__nv_fp8_storage_t)(fp8_pack2<F>(v * scale, 0.0f) & 0xFF);
            }
        }
    }
    if (TAKE_AMAX) fp8_block_amax_commit(bits, &state->amax);
}

// ---- cast + transpose

// One 64×64 tile of x (R×C row-major) per block: q (R×C, may be null) and qᵀ (C×R) get its FP8 codes.
// Phase 1 reads the tile row by row (8 values per chunk: one 128-bit load in bf16) into shared memory
// as codes, writing q's 8 bytes at once; phase 2 writes qᵀ's rows, 16 bytes per thread, from the
// tile's columns. A tile at the edge of x, or any tile when `vectors` is false (pointers or widths
// not aligned for 128-bit access), goes element by element. With TAKE_AMAX, state->amax takes max |x|.
template <typename T, Fp8Format F, bool TAKE_AMAX>
__global__ void fp8_cast_transpose_kernel(__nv_fp8_storage_t* q, __nv_fp8_storage_t* qt, const T* x, int R, int C,
                                          Fp8ScaleState* state, bool vectors) {
    constexpr int V = Packed128<T>::size;
    constexpr int CHUNK = 8;  // values per phase-1 chunk
    __shared__ __align__(16) unsigned char tile[FP8_TILE][FP8_TILE_PITCH];  // (row in tile, column in tile)
    const float scale = state->scale;
    const int row0 = blockIdx.y * FP8_TILE, col0 = blockIdx.x * FP8_TILE;
    const bool full = vectors && row0 + FP8_TILE <= R && col0 + FP8_TILE <= C;
    unsigned bits = 0;
    if (full) {
        for (int chunk = threadIdx.x; chunk < FP8_TILE * FP8_TILE / CHUNK; chunk += blockDim.x) {
            const int r = chunk / (FP8_TILE / CHUNK), c = chunk % (FP8_TILE / CHUNK) * CHUNK;
            const T* src = x + (size_t)(row0 + r) * C + col0 + c;
            float v[CHUNK];
            for (int k = 0; k < CHUNK; k += V) {
                const Packed128<T> p = load128cs(src + k);
                for (int j = 0; j < V; j++) v[k + j] = to_float(p[j]);
            }
            unsigned words[2];
            for (int w = 0; w < 2; w++) {
                const unsigned lo = fp8_pack2<F>(v[4 * w] * scale, v[4 * w + 1] * scale);
                const unsigned hi = fp8_pack2<F>(v[4 * w + 2] * scale, v[4 * w + 3] * scale);
                words[w] = lo | hi << 16;
                *reinterpret_cast<unsigned*>(&tile[r][c + 4 * w]) = words[w];
            }
            if (TAKE_AMAX)
                for (int k = 0; k < CHUNK; k++) bits = max(bits, fp8_magnitude_bits(v[k]));
            if (q) *reinterpret_cast<uint2*>(q + (size_t)(row0 + r) * C + col0 + c) = make_uint2(words[0], words[1]);
        }
    } else {
        for (int i = threadIdx.x; i < FP8_TILE * FP8_TILE; i += blockDim.x) {
            const int r = i / FP8_TILE, c = i % FP8_TILE;
            if (row0 + r >= R || col0 + c >= C) continue;
            const size_t at = (size_t)(row0 + r) * C + col0 + c;
            const float v = to_float(x[at]);
            if (TAKE_AMAX) bits = max(bits, fp8_magnitude_bits(v));
            const unsigned char code = (unsigned char)(fp8_pack2<F>(v * scale, 0.0f) & 0xFF);
            tile[r][c] = code;
            if (q) q[at] = code;
        }
    }
    __syncthreads();
    if (full) {
        // Thread → (column of the tile, 16 consecutive rows): qᵀ row col0 + c, columns row0 + r0 ...
        const int c = threadIdx.x / (FP8_TILE / 16), r0 = threadIdx.x % (FP8_TILE / 16) * 16;
        Packed128<unsigned char> out;
        for (int k = 0; k < 16; k++) out[k] = tile[r0 + k][c];
        store128(reinterpret_cast<unsigned char*>(qt + (size_t)(col0 + c) * R + row0 + r0), out);
    } else {
        for (int i = threadIdx.x; i < FP8_TILE * FP8_TILE; i += blockDim.x) {
            const int c = i / FP8_TILE, r = i % FP8_TILE;
            if (row0 + r < R && col0 + c < C) qt[(size_t)(col0 + c) * R + row0 + r] = tile[r][c];
        }
    }
    if (TAKE_AMAX) fp8_block_amax_commit(bits, &state->amax);
}

// ================================================================================================
// Host launch functions. `states` and `nonfinite` are device memory; nothing here waits for the device.

inline void fp8_require(bool ok, const char* function, const char* what) {
    if (ok) return;
    fprintf(stderr, "%s: %s\n", function, what);
    exit(1);
}
inline bool fp8_aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Calls launch(F, A) with F and A as compile-time constants (std::integral_constant) for a format f
// and take_amax: one place that turns the run-time choices into the kernels' template arguments.
template <typename Launch>
void fp8_dispatch(Fp8Format f, bool take_amax, Launch launch) {
    using E4M3 = std::integral_constant<Fp8Format, Fp8Format::e4m3>;
    using E5M2 = std::integral_constant<Fp8Format, Fp8Format::e5m2>;
    if (f == Fp8Format::e4m3)
        take_amax ? launch(E4M3{}, std::true_type{}) : launch(E4M3{}, std::false_type{});
    else
        take_amax ? launch(E5M2{}, std::true_type{}) : launch(E5M2{}, std::false_type{});
}

// Blocks of FP8_CAST_BLOCK threads for n values, FP8_CAST_PER_THREAD each, at most 4096 (grid-stride).
inline int fp8_cast_grid(size_t n) {
    const size_t per_block = (size_t)FP8_CAST_BLOCK * FP8_CAST_PER_THREAD;
    return (int)std::max<size_t>(1, std::min<size_t>(4096, (n + per_block - 1) / per_block));
}

// `tensors` states with scale 1 and amax 0, and their rings (tensors × length floats; length 0 and
// histories null for the current recipe) zeroed.
inline void fp8_scale_state_init(Fp8ScaleState* states, int tensors, float* histories, int length,
                                 cudaStream_t stream) {
    fp8_require(tensors > 0 && length >= 0 && (length == 0 || histories), "fp8_scale_state_init",
                "needs tensors > 0 and a ring for length > 0");
    const size_t threads = (size_t)tensors * std::max(1, length);
    LAUNCH(fp8_scale_state_init_kernel, ceil_div(threads, FP8_CAST_BLOCK), FP8_CAST_BLOCK, 0, stream, states,
           tensors, histories, length);
    CUDA_CHECK(cudaGetLastError());
}

// state->amax = max |x_i| over n values (zeroed first).
inline void fp8_amax(Fp8ScaleState* state, const floatX* x, size_t n, cudaStream_t stream) {
    fp8_require(fp8_aligned16(x), "fp8_amax", "x must be 16-byte aligned");
    CUDA_CHECK(cudaMemsetAsync(&state->amax, 0, sizeof(float), stream));
    if (n == 0) return;
    LAUNCH(fp8_amax_kernel<floatX>, fp8_cast_grid(n), FP8_CAST_BLOCK, 0, stream, &state->amax, x, n);
    CUDA_CHECK(cudaGetLastError());
}

// Current recipe: the scales of `tensors` consecutive states of format f, from their amaxes.
inline void fp8_current_scale(Fp8ScaleState* states, int tensors, Fp8Format f, int* nonfinite, cudaStream_t stream) {
    const int grid = ceil_div(tensors, FP8_CAST_BLOCK);
    fp8_dispatch(f, false, [&](auto F, auto) {
        LAUNCH(fp8_current_scale_kernel<decltype(F)::value>, grid, FP8_CAST_BLOCK, 0, stream, states, tensors, nonfinite);
    });
    CUDA_CHECK(cudaGetLastError());
}

// Delayed recipe: after a step's casts took their amaxes, pushes them into the rings (histories:
// tensors × length floats) and sets the next step's scales.
inline void fp8_delayed_update(Fp8ScaleState* states, float* histories, int tensors, int length, Fp8Format f,
                               int* nonfinite, cudaStream_t stream) {
    fp8_require(length > 0 && histories, "fp8_delayed_update", "needs an amax ring (length > 0)");
    const int grid = ceil_div(tensors, FP8_CAST_BLOCK);
    fp8_dispatch(f, false, [&](auto F, auto) {
        LAUNCH(fp8_delayed_update_kernel<decltype(F)::value>, grid, FP8_CAST_BLOCK, 0, stream, states, histories,
               tensors, length, nonfinite);
    });
    CUDA_CHECK(cudaGetLastError());
}

// q = fp8(x · state->scale), n values; take_amax: state->amax also takes max |x| (delayed recipe).
inline void fp8_cast(__nv_fp8_storage_t* q, const floatX* x, size_t n, Fp8Format f, Fp8ScaleState* state,
                     bool take_amax, cudaStream_t stream) {
    fp8_require(fp8_aligned16(q) && fp8_aligned16(x), "fp8_cast", "q and x must be 16-byte aligned");
    if (n == 0) return;
    const int grid = fp8_cast_grid(n);
    fp8_dispatch(f, take_amax, [&](auto F, auto A) {
        LAUNCH((fp8_cast_kernel<floatX, decltype(F)::value, decltype(A)::value>), grid, FP8_CAST_BLOCK, 0, stream, q, x,
               n, state);
    });
    CUDA_CHECK(cudaGetLastError());
}

// qᵀ (C×R) and, unless q is null, q (R×C) = fp8(x · state->scale) of x (R×C row-major), one pass.
inline void fp8_cast_transpose(__nv_fp8_storage_t* q, __nv_fp8_storage_t* qt, const floatX* x, int R, int C,
                               Fp8Format f, Fp8ScaleState* state, bool take_amax, cudaStream_t stream) {
    fp8_require(R >= 0 && C >= 0 && qt, "fp8_cast_transpose", "needs R, C >= 0 and qt");
    if (R == 0 || C == 0) return;
    // 128-bit loads of x's rows, 8-byte stores of q's, 16-byte stores of qᵀ's.
    const bool vectors = fp8_aligned16(x) && fp8_aligned16(qt) && (!q || fp8_aligned16(q)) && C % 8 == 0 && R % 16 == 0;
    const dim3 grid(ceil_div(C, FP8_TILE), ceil_div(R, FP8_TILE));
    fp8_dispatch(f, take_amax, [&](auto F, auto A) {
        LAUNCH((fp8_cast_transpose_kernel<floatX, decltype(F)::value, decltype(A)::value>), grid, FP8_CAST_BLOCK, 0,
               stream, q, qt, x, R, C, state, vectors);
    });
    CUDA_CHECK(cudaGetLastError());
}

// The current recipe in one call: amax, scale, cast (three launches and a memset).
inline void fp8_quantize_current(__nv_fp8_storage_t* q, const floatX* x, size_t n, Fp8Format f,
                                 Fp8ScaleState* state, int* nonfinite, cudaStream_t stream) {
    fp8_amax(state, x, n, stream);
    fp8_current_scale(state, 1, f, nonfinite, stream);
    fp8_cast(q, x, n, f, state, false, stream);
}
