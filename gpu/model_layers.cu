// Where a layer's activations are (model_layers.h): its slices of the buffers activations.h sizes.
#include "gpu/model_layers.h"

LayerActivations LayerContext::layer(int l, int slot) const {
    const Activations& a = buf.act;
    const size_t C = widths.channels, ranks = tp.size(), N = max_N, Nl = max_Nl;
    const size_t qkv = widths.qkv / ranks, att = widths.attention / ranks;
    const size_t hidden = widths.hidden / ranks, activated = widths.activated / ranks;
    const size_t i = (size_t)slot * stage.layers() + (l - stage.first_layer);  // this slice
    const size_t ln = recompute < 2 ? i : 0, act = recompute < 1 ? i : 0;
    return {l == stage.first_layer ? stage_input(slot) : a.residual3 + (i - 1) * Nl * C,
            a.ln1 + ln * Nl * C,
            a.qkv + i * N * qkv,
            a.atty + i * N * att,
            a.residual2 + i * Nl * C,
            a.ln2 + ln * Nl * C,
            a.mlp_hidden + i * N * hidden,
            a.mlp_activated + act * N * activated,
            a.residual3 + i * Nl * C,
            a.ln1_mean + i * Nl,
            a.ln1_rstd + i * Nl,
            a.ln2_mean + i * Nl,
            a.ln2_rstd + i * Nl,
            a.att_lse + i * N * widths.heads / ranks};
}
