// The CPU reference of kernels/attention.h's op on tensors in the kernels' layouts, for checking the
// kernels: test/kernels/test_attention.cu, test/kernels/test_attention_hopper.cu and
// dev/cuda/attention.cu. qkv (B, T, (NH + 2·KV)·HS) as attention_qkv_index lays it out (KV key/value
// heads; KV == NH: multi-head attention, (B, T, 3C)); out and dout (B, T, NH·HS); lse (B, NH, T).
// out and dqkv come from cpu/attention.h (KV == NH) or cpu/gqa_attention.h (KV < NH), lse from a
// direct sum in double.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/attention.h"
#include "cpu/gqa_attention.h"
#include "kernels/attention_common.h"

struct AttentionTensors {
    std::vector<float> out, lse, dqkv;
};

// Part `part` (0 q, 1 k, 2 v) of a tensor laid out as qkv, as (B, T, heads·HS) with NH heads for q
// and KV for k and v; and back.
inline std::vector<float> attention_qkv_part(const std::vector<float>& qkv, int B, int T, int NH, int KV, int HS,
                                             int part) {
    const size_t width = (size_t)(part == 0 ? NH : KV) * HS;
    std::vector<float> x;
    x.reserve((size_t)B * T * width);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const size_t at = attention_qkv_index(b, t, part, 0, T, NH, KV, HS);
            x.insert(x.end(), qkv.begin() + at, qkv.begin() + at + width);
        }
    return x;
}
inline void attention_set_qkv_part(std::vector<float>& qkv, const std::vector<float>& x, int B, int T, int NH,
                                   int KV, int HS, int part) {
    const size_t width = (size_t)(part == 0 ? NH : KV) * HS;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            std::copy_n(x.begin() + ((size_t)b * T + t) * width, width,
                        qkv.begin() + attention_qkv_index(b, t, part, 0, T, NH, KV, HS));
}

// out and lse, and dqkv where dout is given (empty otherwise).
inline AttentionTensors attention_cpu_reference(const std::vector<float>& qkv, const std::vector<float>* dout, int B,
                                                int T, int NH, int KV, int HS) {
    AttentionTensors r;
    r.out.assign((size_t)B * T * NH * HS, 0.0f);
    std::vector<float> att((size_t)B * NH * T * T);
    if (dout) r.dqkv.assign(qkv.size(), 0.0f);  // the references add into it
    if (KV == NH) {
        attention_forward(r.out.data(), att.data(), qkv.data(), B, T, NH * HS, NH);
        if (dout) attention_backward(r.dqkv.data(), dout->data(), qkv.data(), att.data(), B, T, NH * HS, NH);
    } else {
        const std::vector<float> q = attention_qkv_part(qkv, B, T, NH, KV, HS, 0),
                                 k = attention_qkv_part(qkv, B, T, NH, KV, HS, 1),
                                 v = attention_qkv_part(qkv, B, T, NH, KV, HS, 2);
        gqa_attention_forward(r.out.data(), att.data(), q.data(), k.data(), v.data(), B, T, NH, KV, HS);
        if (dout) {
            std::vector<float> dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
            gqa_attention_backward(dq.data(), dk.data(), dv.data(), dout->data(), q.data(), k.data(), v.data(),
                                   att.data(), B, T, NH, KV, HS);
            attention_set_qkv_part(r.dqkv, dq, B, T, NH, KV, HS, 0);
            attention_set_qkv_part(r.dqkv, dk, B, T, NH, KV, HS, 1);
            attention_set_qkv_part(r.dqkv, dv, B, T, NH, KV, HS, 2);
        }
    }
    r.lse.resize((size_t)B * NH * T);
    const double scale = 1.0 / std::sqrt((double)HS);
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            std::vector<double> scores(T);
            for (int t = 0; t < T; t++) {
                const float* q = &qkv[attention_qkv_index(b, t, 0, h, T, NH, KV, HS)];
                double max_score = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const float* k = &qkv[attention_qkv_index(b, j, 1, kv_head_of(h, NH, KV), T, NH, KV, HS)];
                    double dot = 0;
                    for (int d = 0; d < HS; d++) dot += (double)q[d] * k[d];
                    scores[j] = scale * dot;
                    max_score = std::max(max_score, scores[j]);
                }
                for (int j = 0; j <= t; j++) sum += std::exp(scores[j] - max_score);
                r.lse[attention_lse_index(b, h, t, T, NH)] = (float)(max_score + std::log(sum));
            }
        }
    return r;
}
