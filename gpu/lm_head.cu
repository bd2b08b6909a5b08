// The LM head and its loss (lm_head.h), vocabulary-parallel under tensor parallelism.
#include "gpu/lm_head.h"

#include <algorithm>

#include "kernels/chunked_classifier.h"
#include "kernels/classifier.h"
#include "kernels/matmul.h"

void lm_head_logits(const LayerContext& c, const LmHead& head, const floatX* norm) {
    const int N = c.positions(), C = head.channels, Vs = c.tp.vocab_slice(head.padded_vocab);
    matmul_forward(c.buf.act.logits, c.tp.whole_input(norm, N, C, c.stream), head.weight, nullptr,
                   std::min(N, c.classifier_rows), C, Vs, c.stream);
}

void lm_head_loss(const LayerContext& c, const LmHead& head, const floatX* norm, floatX* dnorm, bool training,
                  float loss_scale, int micro_steps) {
    const int N = c.positions(), V = head.vocab_size, Vp = head.padded_vocab, C = head.channels;
    Activations& a = c.buf.act;
    StepTotals& totals = c.buf.control->totals;
    if (c.tp.size() == 1) {
        chunked_classifier(a.losses, dnorm, training ? head.gradient : nullptr, a.logits, norm, head.weight,
                           c.buf.targets, N, C, V, Vp, c.classifier_rows, loss_scale / N, training, c.stream);
        loss_mean(&totals.micro_loss, training ? &totals.loss_sum : nullptr, &totals.loss, a.losses, N, micro_steps,
                  c.stream);
        return;
    }
    const int Vs = c.tp.vocab_slice(Vp), begin = c.tp.vocab_begin(Vp);
    const int valid = std::max(0, std::min(V - begin, Vs));  // real tokens in this slice
    c.tp.column_forward(a.logits, norm, head.weight, nullptr, N, C, Vs, c.stream);  // (N, Vs)
    classifier_slice_stats(a.class_stats, a.logits, c.buf.targets, N, begin, valid, Vs, c.stream);
    c.tp.gather(a.class_stats_all, a.class_stats, (size_t)N * 3, c.stream);
    classifier_combine_stats(a.class_lse, a.losses, a.class_stats_all, c.tp.size(), N, c.stream);
    if (training)
        classifier_slice_gradient(a.logits, a.class_lse, c.buf.targets, loss_scale / N, N, begin, valid, Vs, c.stream);
    loss_mean(&totals.micro_loss, training ? &totals.loss_sum : nullptr, &totals.loss, a.losses, N, micro_steps,
              c.stream);
    if (training)  // logits = norm · weightᵀ backward: d(norm) and the weight's gradient (this vocabulary slice)
        c.tp.column_backward(dnorm, head.gradient, nullptr, c.buf.scratch, a.logits,
                             c.tp.whole_input(norm, N, C, c.stream), head.weight, N, C, Vs, c.stream);
}
