// The LM head and its loss over chunks of rows, so that the (N × Vp) logits never exist whole:
// for each chunk of R = rows_per_chunk rows [r0, r0 + R) of the N = B·T positions (the last chunk may
// be shorter),
//   logits (R×Vp)     = lnf[r0 : r0+R] (R×C) · wteᵀ                       (matmul_forward, no bias)
//   losses[r0 + i]    = logsumexp(logits[i, :V]) − logits[i, target]      (fused_classifier)
//   logits            ← dloss · (softmax − onehot), 0 in the padding      (in place, when backward)
//   d_lnf[r0 : r0+R]  = logits · wte   (R×C), OVERWRITTEN                 (matmul_backward:
//   d_wte (Vp×C)     += logitsᵀ · lnf[r0 : r0+R]                            both products, no bias)
// which is, row for row, what the unchunked path (a whole N×Vp logits buffer, one classifier call,
// one backward) computes. The only large buffer is the chunk: rows_per_chunk × Vp floatX.
//
// Inputs: lnf (N×C floatX, the final LayerNorm's output), wte (Vp×C floatX, the tied embedding),
// targets (N ints in [0, V)). Outputs: losses (N floats, or null), d_lnf (N×C floatX), d_wte (Vp×C
// floatX, added into: zero it at the start of the gradient accumulation, as for every weight).
// C and Vp multiples of 8; all pointers 16-byte aligned (then every chunk's rows are too).
// Numerics: the same kernels as the unchunked path; in bf16, d_wte is rounded once per chunk (as it is
// once per micro-step across gradient accumulation), so fewer, larger chunks round less.
// Per call, summed over chunks: 6·N·C·Vp FLOPs (forward 2, backward 4); DRAM traffic of the products
// as matmul.h gives it per chunk (wte is read three times per chunk: pick chunks of thousands of rows),
// plus 2·N·Vp·sizeof(floatX) for the classifier's read and write of each chunk; the logits'
// N·Vp·sizeof(floatX) bytes of memory become R·Vp·sizeof(floatX): at N = 65536 (B=64, T=1024),
// Vp = 50304, bf16: 6.6 GB → 103 MB with R = 1024.
// Launches per chunk: 1 (forward) + 1 (classifier) + 2 (backward); no host synchronisation.
#pragma once
#include <cstdio>
#include <cstdlib>

#include "kernels/classifier.h"
#include "kernels/matmul.h"

// Bytes of the chunk buffer chunked_classifier needs.
inline size_t chunked_classifier_buffer_bytes(int rows_per_chunk, int Vp) {
    return (size_t)rows_per_chunk * (size_t)Vp * sizeof(floatX);
}

// Losses of the N rows (and, when backward, d_lnf overwritten and d_wte added into), chunk by chunk.
// chunk: chunked_classifier_buffer_bytes(rows_per_chunk, Vp) bytes of device memory, scratch (its
// content on return is the last chunk's dlogits, or logits when !backward). dloss: the gradient of the
// total loss with respect to each row's loss (1/N for a mean over the N rows, times any loss scale).
// backward == false: losses only (validation); d_lnf and d_wte are not touched (may be null).
inline void chunked_classifier(float* losses, floatX* d_lnf, floatX* d_wte, floatX* chunk, const floatX* lnf,
                               const floatX* wte, const int* targets, int N, int C, int V, int Vp,
                               int rows_per_chunk, float dloss, bool backward, cudaStream_t stream) {
    if (N < 0 || C <= 0 || C % 8 != 0 || Vp % 8 != 0 || V < 1 || V > Vp || rows_per_chunk < 1 || !chunk ||
        !lnf || !wte || !targets || (backward && (!d_lnf || !d_wte))) {
        fprintf(stderr,
                "chunked_classifier: need N >= 0, C and Vp multiples of 8, 1 <= V <= Vp, rows_per_chunk >= 1, "
                "and the buffers (N=%d C=%d V=%d Vp=%d rows_per_chunk=%d)\n",
                N, C, V, Vp, rows_per_chunk);
        exit(1);
    }
    for (int r0 = 0; r0 < N; r0 += rows_per_chunk) {
        const int R = N - r0 < rows_per_chunk ? N - r0 : rows_per_chunk;
        const size_t row_offset = (size_t)r0 * (size_t)C;
        // logits (R×Vp) = lnf rows · wteᵀ
        matmul_forward(chunk, lnf + row_offset, wte, nullptr, R, C, Vp, stream);
        fused_classifier(chunk, losses ? losses + r0 : nullptr, dloss, targets + r0, R, V, Vp, backward, stream);
        if (!backward) continue;
        // d_lnf rows (R×C) = dlogits · wte;  d_wte (Vp×C) += dlogitsᵀ · lnf rows
        matmul_backward(d_lnf + row_offset, d_wte, nullptr, nullptr, chunk, lnf + row_offset, wte, R, C, Vp,
                        stream);
    }
}
