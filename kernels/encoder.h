// Token and position embeddings, the first layer of GPT-2, over the whole padded vocabulary or over
// one slice of it (vocabulary-parallel embedding: a tensor-parallel rank holds the rows
// [vocab_begin, vocab_begin + vocab_count) of wte, and the trainer sums the ranks' outputs).
//
//   forward    out[b,t,:] = wte[tokens[b,t], :] + wpe[t, :]
//   backward   dwte[v,:] += Σ_{(b,t) : tokens[b,t] = v} dout[b,t,:]        (every token id v used)
//              dwpe[t,:] += Σ_b dout[b,t,:]
//   over a slice (wte_slice, dwte_slice: rows [vocab_begin, vocab_begin + vocab_count) of wte, dwte)
//   forward    out[b,t,:] = (tokens[b,t] in the slice ? wte_slice[tokens[b,t] − vocab_begin, :] : 0)
//                           + (wpe ? wpe[t, :] : 0)
//   backward   dwte_slice[v − vocab_begin, :] += as above, for the token ids v in the slice only;
//              dwpe as above when dwpe is not null
// The whole-vocabulary functions are the slice [0, every id) with wpe. Summed over the slices of a
// partition of the vocabulary, with wpe passed to one of them, the slice forwards give the whole
// forward to the bit: each position gets its wte row from exactly one slice and exact zeros from the
// others. Each slice's backward gives its rows of the whole backward's dwte to the bit (the same
// positions summed in the same order).
//
// Shapes and types: tokens (B, T) int32 on the device (forward) and on the host (backward); wte and
// dwte (Vp, C) or a slice of them (vocab_count, C), wpe and dwpe (maxT ≥ T, C), out and dout
// (B, T, C), all floatX. C must be a multiple of 8 and the tensors 16-byte aligned (128-bit
// accesses). Sums are accumulated in fp32 and rounded to floatX once, when added into the gradient.
//
// Per call, with S = sizeof(floatX), N = B·T positions, N' ≤ N of them with a token in the slice (all
// of them for the whole vocabulary) and U ≤ N' distinct tokens among those:
//   encoder_forward(_vocab_slice)   reads 4N + N'·C·S (the slice's wte rows) + N·C·S with wpe (wpe
//                      rows mostly from cache), writes N·C·S bytes;                    N·C FLOPs
//   encoder_backward(_vocab_slice)  reads dout for the slice's positions (N'·C·S) and with dwpe for
//                      all (N·C·S), reads and writes the U touched dwte rows (2·U·C·S) and with dwpe
//                      T dwpe rows (2·T·C·S); copies the grouping to the device (about 4N + 16U
//                      bytes);                                                     ~(N' + N)·C FLOPs
//
// Determinism of the backward. Positions that share a token must be summed into one dwte row, and
// float atomics would make the order (and so the bits) change from run to run. Instead the host,
// which has the tokens, groups the positions by token (a stable radix sort: positions stay in
// increasing order within a token; positions whose token is outside the slice are left out) and
// uploads the groups; one thread block owns each distinct token's row and sums its positions in that
// fixed order. Frequent tokens (" the", ",", EOT: a few percent of a batch each) would make one
// block's serial sum the long pole, so a token used at least ENCODER_SPLIT_POSITIONS times gets a
// block whose 8 thread groups take every 8th position, after which group 0 adds the 8 partial sums in
// group order; these blocks are launched first, most positions first. dwpe sums over b in order, one
// thread per 128-bit vector of a wpe row.
#pragma once
#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>

#include "kernels/common.h"

constexpr int ENCODER_X128 = Packed128<floatX>::size;  // floatX values per 128-bit vector
constexpr int ENCODER_SPLIT_POSITIONS = 16;            // a token this frequent gets split groups
constexpr int ENCODER_SPLIT_GROUPS = 8;                // position groups of a split token's block
constexpr int ENCODER_MAX_LANES = 128;                 // threads across a row's 128-bit vectors

// Offset of row `row` of an (rows, C) tensor: 64-bit, since B·T·C and Vp·C can pass 2^31.
__host__ __device__ inline size_t encoder_row_offset(size_t row, int C) { return row * (size_t)C; }

// ------------------------------------------------------------------------------------------------
// Forward: one thread per 128-bit vector of the output. `row` (the token minus vocab_begin) selects
// the wte_slice row; a token outside the slice reads nothing and contributes 0, a null wpe likewise.
// The whole vocabulary reads the same bytes as a plain gather and adds in the same order.

static __global__ void encoder_forward_kernel(floatX* __restrict__ out, const int* __restrict__ tokens,
                                       const floatX* __restrict__ wte_slice, int vocab_begin, int vocab_count,
                                       const floatX* __restrict__ wpe, int B, int T, int C) {
    const int vecs = C / ENCODER_X128;
    const size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= (size_t)B * T * vecs) return;
    const size_t position = index / vecs;  // b·T + t
    const int column = (int)(index % vecs) * ENCODER_X128;
    const int t = (int)(position % T);
    // Unsigned: tokens below vocab_begin wrap around to large rows and fail the test too.
    const unsigned row = (unsigned)tokens[position] - (unsigned)vocab_begin;
    float sum[ENCODER_X128] = {};
    if (row < (unsigned)vocab_count) {
        const Packed128<floatX> token_row = load128(wte_slice + encoder_row_offset(row, C) + column);
#pragma unroll
        for (int k = 0; k < ENCODER_X128; k++) sum[k] = to_float(token_row[k]);
    }
    if (wpe != nullptr) {
        const Packed128<floatX> position_row = load128(wpe + encoder_row_offset(t, C) + column);
#pragma unroll
        for (int k = 0; k < ENCODER_X128; k++) sum[k] += to_float(position_row[k]);
    }
    Packed128<floatX> packed;
#pragma unroll
    for (int k = 0; k < ENCODER_X128; k++) packed[k] = from_float<floatX>(sum[k]);
    store128(out + encoder_row_offset(position, C) + column, packed);
}

// ------------------------------------------------------------------------------------------------
// Backward

// One distinct token of the batch: its row in dwte (the token id minus the slice's vocab_begin; the
// id itself for the whole vocabulary) and its positions, sorted_positions[first .. first+count).
// 16 bytes, read by a kernel in one load.
struct alignas(16) EncoderTokenGroup {
    int token, first, count, unused;
};

// dwte rows: block i owns groups[i]. The block is blockDim.x lanes across the row's 128-bit vectors
// (looping when the row has more) by blockDim.y position groups; group g sums positions g, g+G, ...
// of its token in order. With G > 1, groups 1..G-1 leave their sums in shared memory
// ((G-1)·ENCODER_X128·blockDim.x floats) and group 0 adds them in group order.
static __global__ void encoder_backward_wte_kernel(floatX* __restrict__ dwte, const floatX* __restrict__ dout,
                                            const int* __restrict__ sorted_positions,
                                            const EncoderTokenGroup* __restrict__ groups, int C) {
    DYNAMIC_SHARED(float, group_sums);
    const EncoderTokenGroup group = groups[blockIdx.x];
    const int lane = threadIdx.x, lanes = blockDim.x;
    const int position_group = threadIdx.y, position_groups = blockDim.y;
    const int vecs = C / ENCODER_X128;
    const int* positions = sorted_positions + group.first;

    for (int first_vec = 0; first_vec < vecs; first_vec += lanes) {  // the same trip count in every thread
        const int vec = first_vec + lane;
        float sum[ENCODER_X128] = {};
        if (vec < vecs) {
#pragma unroll 4
            for (int j = position_group; j < group.count; j += position_groups) {
                const Packed128<floatX> d =
                    load128(dout + encoder_row_offset(positions[j], C) + vec * ENCODER_X128);
#pragma unroll
                for (int k = 0; k < ENCODER_X128; k++) sum[k] += to_float(d[k]);
            }
        }
        if (position_groups > 1) {
            // Layout [group-1][k][lane]: consecutive lanes, consecutive words (no bank conflicts).
            if (position_group > 0)
                for (int k = 0; k < ENCODER_X128; k++)
                    group_sums[((position_group - 1) * ENCODER_X128 + k) * lanes + lane] = sum[k];
            __syncthreads();
            if (position_group == 0)
                for (int g = 1; g < position_groups; g++)
                    for (int k = 0; k < ENCODER_X128; k++)
                        sum[k] += group_sums[((g - 1) * ENCODER_X128 + k) * lanes + lane];
            __syncthreads();  // the next slice of the row reuses group_sums
        }
        if (position_group == 0 && vec < vecs) {
            floatX* row = dwte + encoder_row_offset(group.token, C) + vec * ENCODER_X128;
            Packed128<floatX> grad = load128(row);
#pragma unroll
            for (int k = 0; k < ENCODER_X128; k++) grad[k] = from_float<floatX>(to_float(grad[k]) + sum[k]);
            store128(row, grad);
        }
    }
}

// dwpe rows: one thread per 128-bit vector of dwpe[0..T), summing dout over b in order.
static __global__ void encoder_backward_wpe_kernel(floatX* __restrict__ dwpe, const floatX* __restrict__ dout, int B,
                                            int T, int C) {
    const int vecs = C / ENCODER_X128;
    const int index = blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= T * vecs) return;
    const int t = index / vecs, column = (index % vecs) * ENCODER_X128;
    float sum[ENCODER_X128] = {};
#pragma unroll 4
    for (int b = 0; b < B; b++) {
        const Packed128<floatX> d = load128cs(dout + encoder_row_offset((size_t)b * T + t, C) + column);
#pragma unroll
        for (int k = 0; k < ENCODER_X128; k++) sum[k] += to_float(d[k]);
    }
    floatX* row = dwpe + encoder_row_offset(t, C) + column;
    Packed128<floatX> grad = load128(row);
#pragma unroll
    for (int k = 0; k < ENCODER_X128; k++) grad[k] = from_float<floatX>(to_float(grad[k]) + sum[k]);
    store128(row, grad);
}

// ------------------------------------------------------------------------------------------------
// Host side

// Why the shapes or pointers cannot be handled, or nullptr when they can (tests call it directly).
inline const char* encoder_shape_error(int B, int T, int C, std::initializer_list<const void*> tensors) {
    if (B <= 0 || T <= 0) return "B and T must be positive";
    if (C <= 0 || C % 8 != 0) return "C must be a positive multiple of 8 (128-bit vectors of bf16)";
    for (const void* p : tensors)
        if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return "tensors must be 16-byte aligned";
    return nullptr;
}
inline void encoder_check(const char* function, int B, int T, int C,
                          std::initializer_list<const void*> tensors) {
    const char* error = encoder_shape_error(B, T, C, tensors);
    if (error == nullptr) return;
    fprintf(stderr, "%s: B=%d, T=%d, C=%d: %s\n", function, B, T, C, error);
    exit(EXIT_FAILURE);
}

// Why the slice cannot be handled, or nullptr when it can.
inline const char* encoder_slice_error(int vocab_begin, int vocab_count) {
    return vocab_begin < 0 || vocab_count < 0 ? "vocab_begin and vocab_count must be non-negative" : nullptr;
}
inline void encoder_slice_check(const char* function, int vocab_begin, int vocab_count) {
    const char* error = encoder_slice_error(vocab_begin, vocab_count);
    if (error == nullptr) return;
    fprintf(stderr, "%s: vocab_begin=%d, vocab_count=%d: %s\n", function, vocab_begin, vocab_count, error);
    exit(EXIT_FAILURE);
}

// out[b,t,:] = (wte_slice[tokens[b,t] − vocab_begin, :] if the token is in [vocab_begin,
// vocab_begin + vocab_count), else 0) + (wpe[t,:] if wpe is not null, else 0); tokens on the device.
inline void encoder_forward_vocab_slice(floatX* out, const int* tokens, const floatX* wte_slice,
                                        int vocab_begin, int vocab_count, const floatX* wpe, int B, int T,
                                        int C, cudaStream_t stream) {
    encoder_check("encoder_forward_vocab_slice", B, T, C, {out, wte_slice, wpe});
    encoder_slice_check("encoder_forward_vocab_slice", vocab_begin, vocab_count);
    const int threads = 256;
    const size_t vectors = (size_t)B * T * (C / ENCODER_X128);
    LAUNCH(encoder_forward_kernel, (unsigned)((vectors + threads - 1) / threads), threads, 0, stream, out,
           tokens, wte_slice, vocab_begin, vocab_count, wpe, B, T, C);
    CUDA_CHECK(cudaGetLastError());
}

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]; tokens on the device: the slice holding every id.
inline void encoder_forward(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe, int B,
                            int T, int C, cudaStream_t stream) {
    encoder_forward_vocab_slice(out, tokens, wte, 0, INT_MAX, wpe, B, T, C, stream);
}

// The grouping uploaded to the device scratch: the sorted positions (padded to a multiple of 4 ints
// so that the groups after them are 16-byte aligned), then the groups. The host scratch holds the
// same, followed by N ints for the radix sort.
inline size_t encoder_positions_bytes(int B, int T) { return (((size_t)B * T + 3) / 4 * 4) * sizeof(int); }
inline size_t encoder_backward_scratch_bytes(int B, int T) {
    return encoder_positions_bytes(B, T) + (size_t)B * T * sizeof(EncoderTokenGroup);
}
inline size_t encoder_backward_host_scratch_bytes(int B, int T) {
    return encoder_backward_scratch_bytes(B, T) + (size_t)B * T * sizeof(int);
}

// Groups by token the positions among the n whose token lies in the slice [vocab_begin,
// vocab_begin + vocab_count) (the defaults: every id below INT_MAX), in host_scratch laid out as above:
// sorted_positions holds those positions ordered by token, ascending within a token (an LSD radix sort
// on 8-bit digits of the row, token − vocab_begin: stable); groups holds one EncoderTokenGroup per
// distinct token, whose `token` is its row in the slice, those with at least ENCODER_SPLIT_POSITIONS
// positions first (most positions first), then the others in token order. Returns the number of
// groups (0 when no token is in the slice); *split_groups receives how many of them come first.
inline int encoder_group_positions(const int* tokens, int n, void* host_scratch, int* split_groups,
                                   int vocab_begin = 0, int vocab_count = INT_MAX) {
    int* sorted = static_cast<int*>(host_scratch);
    EncoderTokenGroup* groups = reinterpret_cast<EncoderTokenGroup*>(static_cast<char*>(host_scratch) +
                                                                     ((size_t)n + 3) / 4 * 4 * sizeof(int));
    int* spare = reinterpret_cast<int*>(groups + n);
    // tokens[i] ≥ 0 and vocab_begin ≥ 0: the difference cannot overflow.
    auto row_of = [&](int position) { return tokens[position] - vocab_begin; };
    auto in_slice = [&](int position) { return row_of(position) >= 0 && row_of(position) < vocab_count; };

    int max_row = 0, m = 0;  // m: positions in the slice
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0) {
            fprintf(stderr, "encoder_backward: token %d at position %d is negative\n", tokens[i], i);
            exit(EXIT_FAILURE);
        }
        if (!in_slice(i)) continue;
        max_row = std::max(max_row, row_of(i));
        m++;
    }
    int passes = 1;
    while (passes < 4 && (max_row >> (8 * passes)) != 0) passes++;
    // Start in the buffer that makes the last pass end in `sorted`.
    int* from = passes % 2 == 0 ? sorted : spare;
    int* to = passes % 2 == 0 ? spare : sorted;
    for (int i = 0, k = 0; i < n; i++)
        if (in_slice(i)) from[k++] = i;
    for (int pass = 0; pass < passes; pass++) {
        const int shift = 8 * pass;
        int start[257] = {};
        for (int i = 0; i < m; i++) start[((row_of(from[i]) >> shift) & 255) + 1]++;
        for (int d = 0; d < 256; d++) start[d + 1] += start[d];
        for (int i = 0; i < m; i++) to[start[(row_of(from[i]) >> shift) & 255]++] = from[i];
        std::swap(from, to);
    }

    // Runs of one token: split ones first, then the rest.
    auto run_end = [&](int i) {
        int j = i + 1;
        while (j < m && tokens[sorted[j]] == tokens[sorted[i]]) j++;
        return j;
    };
    int split = 0, total = 0;
    for (int i = 0, j; i < m; i = j) {
        j = run_end(i);
        split += j - i >= ENCODER_SPLIT_POSITIONS;
        total++;
    }
    int next_split = 0, next_other = split;
    for (int i = 0, j; i < m; i = j) {
        j = run_end(i);
        groups[j - i >= ENCODER_SPLIT_POSITIONS ? next_split++ : next_other++] =
            EncoderTokenGroup{row_of(sorted[i]), i, j - i, 0};
    }
    std::sort(groups, groups + split, [](const EncoderTokenGroup& a, const EncoderTokenGroup& b) {
        return a.count != b.count ? a.count > b.count : a.token < b.token;
    });
    *split_groups = split;
    return total;
}

// The backward's kernels, once the grouping of encoder_group_positions (`groups` of them, the first
// `split_groups` split over position groups) is in the device scratch; dwpe may be null (not wanted).
inline void encoder_backward_launch(floatX* dwte, floatX* dwpe, const floatX* dout, int B, int T, int C,
                                    const void* scratch, int groups, int split_groups, cudaStream_t stream) {
    const int* sorted_positions = static_cast<const int*>(scratch);
    const EncoderTokenGroup* token_groups = reinterpret_cast<const EncoderTokenGroup*>(
        static_cast<const char*>(scratch) + encoder_positions_bytes(B, T));
    const int vecs = C / ENCODER_X128;
    const int lanes = std::min(ceil_div(vecs, 32) * 32, ENCODER_MAX_LANES);
    // Frequent tokens first (split over position groups), then one position group per token.
    if (split_groups > 0) {
        const int shared = (ENCODER_SPLIT_GROUPS - 1) * ENCODER_X128 * lanes * (int)sizeof(float);
        LAUNCH(encoder_backward_wte_kernel, split_groups, dim3(lanes, ENCODER_SPLIT_GROUPS), shared, stream,
               dwte, dout, sorted_positions, token_groups, C);
        CUDA_CHECK(cudaGetLastError());
    }
    if (groups > split_groups) {
        LAUNCH(encoder_backward_wte_kernel, groups - split_groups, dim3(lanes, 1), 0, stream, dwte, dout,
               sorted_positions, token_groups + split_groups, C);
        CUDA_CHECK(cudaGetLastError());
    }
    if (dwpe == nullptr) return;
    const int threads = 256;
    LAUNCH(encoder_backward_wpe_kernel, ceil_div(T * vecs, threads), threads, 0, stream, dwpe, dout, B, T, C);
    CUDA_CHECK(cudaGetLastError());
}

// Adds dout into the rows of dwte_slice (rows [vocab_begin, vocab_begin + vocab_count) of dwte) of the
// batch's tokens in that slice, and into dwpe[0..T) unless dwpe is null, deterministically; tokens
// outside the slice are skipped. tokens_host: the B·T token ids (the same as the device copy the
// forward used). scratch: device memory of encoder_backward_scratch_bytes(B, T); host_scratch: host
// memory of encoder_backward_host_scratch_bytes(B, T), 16-byte aligned (malloc, cudaMallocHost). If
// host_scratch is pinned, the upload is asynchronous: do not call again before the stream has passed
// this call (the trainer synchronises every step).
inline void encoder_backward_vocab_slice(floatX* dwte_slice, int vocab_begin, int vocab_count, floatX* dwpe,
                                         const floatX* dout, const int* tokens_host, int B, int T, int C,
                                         void* scratch, void* host_scratch, cudaStream_t stream) {
    encoder_check("encoder_backward_vocab_slice", B, T, C, {dwte_slice, dwpe, dout, scratch, host_scratch});
    encoder_slice_check("encoder_backward_vocab_slice", vocab_begin, vocab_count);
    int split_groups = 0;
    const int groups =
        encoder_group_positions(tokens_host, B * T, host_scratch, &split_groups, vocab_begin, vocab_count);
    if (groups > 0) {
        const size_t upload = encoder_positions_bytes(B, T) + (size_t)groups * sizeof(EncoderTokenGroup);
        CUDA_CHECK(cudaMemcpyAsync(scratch, host_scratch, upload, cudaMemcpyHostToDevice, stream));
    }
    encoder_backward_launch(dwte_slice, dwpe, dout, B, T, C, scratch, groups, split_groups, stream);
}

// Adds dout into the dwte rows of the batch's tokens and into dwpe[0..T): the slice holding every id
// (arguments as above).
inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* tokens_host, int B,
                             int T, int C, void* scratch, void* host_scratch, cudaStream_t stream) {
    encoder_backward_vocab_slice(dwte, 0, INT_MAX, dwpe, dout, tokens_host, B, T, C, scratch, host_scratch,
                                 stream);
}
