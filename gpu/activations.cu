// The micro-batch's buffers (activations.h): their sizes and the classifier's chunking.
#include "gpu/activations.h"

#include <algorithm>

#include "kernels/attention.h"
#include "kernels/encoder.h"
#include "kernels/global_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"

// The rows of logits the classifier holds at once (the LM head and its loss run over chunks of them,
// kernels/chunked_classifier.h, so that the (N, Vp) logits never exist whole): whole sequences, as
// few chunks as keep a chunk within classifier_chunk_bytes (one chunk, the unchunked computation, for
// small batches; GPT-2 124M at B=64, T=1024: 6.6 GB of logits become 7 chunks of 0.94 GB). Under
// tensor parallelism every row of this rank's vocabulary slice (already 1/T of the vocabulary): the
// slices' statistics are gathered once per call, where chunks would gather once per chunk.
static size_t classifier_chunk_bytes = (size_t)1 << 30;
int classifier_rows(const TensorParallel& tp, int B, int T, int Vp) {
    if (tp.size() > 1) return B * T;
    const size_t bytes = (size_t)B * T * Vp * sizeof(floatX);
    const int chunks = (int)std::max<size_t>(1, (bytes + classifier_chunk_bytes - 1) / classifier_chunk_bytes);
    return (B + chunks - 1) / chunks * T;
}
void set_classifier_chunk_bytes(size_t bytes) { classifier_chunk_bytes = bytes; }

void request_step_buffers(DeviceArena* arena, StepBuffers* buffers, const LayerWidths& widths, int padded_vocab,
                          const TrainOptions& opt, const TensorParallel& tp, const PipelineStage& stage) {
    const size_t C = widths.channels, NH = widths.heads;
    const size_t Vp = padded_vocab, HS = widths.head_size, T_ranks = tp.size();
    const int B = opt.batch_size, T = opt.seq_len;
    const size_t N = (size_t)B * T, Nl = tp.local_positions((int)N);
    const size_t NHt = NH / T_ranks, Vs = tp.vocab_slice((int)Vp);
    const size_t QKVt = widths.qkv / T_ranks, ATTt = widths.attention / T_ranks;
    const size_t Ht = widths.hidden / T_ranks, At = widths.activated / T_ranks;
    const size_t K = stage.slots, slices = (size_t)stage.layers() * K;
    const size_t ln_slices = opt.recompute >= 2 ? 1 : slices, gelu_slices = opt.recompute >= 1 ? 1 : slices;
    Activations& a = buffers->act;
    auto request = [&](auto** pointer, size_t count) {
        arena->request(pointer, count, MemoryKind::ACTIVATIONS);
    };
    request(&a.encoded, K * Nl * C);
    request(&a.ln1, ln_slices * Nl * C);
    request(&a.ln1_mean, slices * Nl);
    request(&a.ln1_rstd, slices * Nl);
    request(&a.qkv, slices * N * QKVt);
    request(&a.atty, slices * N * ATTt);
    request(&a.att_lse, slices * N * NHt);
    request(&a.residual2, slices * Nl * C);
    request(&a.ln2, ln_slices * Nl * C);
    request(&a.ln2_mean, slices * Nl);
    request(&a.ln2_rstd, slices * Nl);
    request(&a.mlp_hidden, slices * N * Ht);
    request(&a.mlp_activated, gelu_slices * N * At);
    request(&a.residual3, slices * Nl * C);
    if (stage.last) {
        request(&a.lnf, Nl * C);
        request(&a.lnf_mean, K * Nl);
        request(&a.lnf_rstd, K * Nl);
        request(&a.dlnf, K * Nl * C);
        request(&a.logits, (size_t)classifier_rows(tp, B, T, (int)Vp) * Vs);
        request(&a.losses, N);
    }
    request(&a.branch, Nl * C);
    request(&a.dresidual[0], Nl * C);
    if (!(stage.first && stage.last)) request(&a.dresidual[1], Nl * C);
    request(&a.dln, Nl * C);
    request(&a.datty, N * ATTt);
    request(&a.dqkv, N * QKVt);
    request(&a.dmlp_hidden, N * Ht);
    if (widths.activated != widths.hidden) request(&a.dmlp_activated, N * At);
    if (tp.sequence_parallel()) {
        request(&a.whole, N * C);
        request(&a.whole_ln, N * C);
        request(&a.partial, N * C);
    }
    if (tp.size() > 1 && stage.last) {
        request(&a.class_stats, N * 3);
        request(&a.class_stats_all, T_ranks * N * 3);
        request(&a.class_lse, N);
    }
    if (tp.size() > 1 || !(stage.first && stage.last)) request(&a.logits_row, T_ranks * Vs);
    request(&buffers->inputs, N);
    request(&buffers->targets, N);
    const size_t scratch_bytes = std::max(
        {encoder_backward_scratch_bytes(B, T), layernorm_backward_scratch_bytes((int)Nl, (int)C),
         matmul_backward_scratch_bytes((int)N, (int)std::max(widths.hidden, widths.qkv)), matmul_backward_scratch_bytes((int)N, (int)Vp),
         attention_backward_scratch_bytes(B, T, (int)NHt, (int)HS), global_norm_scratch_bytes(),
         widths.rms_norms ? rmsnorm_backward_scratch_bytes((int)Nl, (int)C) : 0});
    request(reinterpret_cast<char**>(&buffers->scratch), scratch_bytes);
    request(&buffers->control, 1);
    if (widths.rope_pairs > 0) {
        request(&buffers->rope_cos, (size_t)T * widths.rope_pairs);
        request(&buffers->rope_sin, (size_t)T * widths.rope_pairs);
    }
}
