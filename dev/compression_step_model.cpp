// A model, not a measurement, of the time of one data-parallel training step of a GPT-2 under each
// gradient compression method of the CUDA trainer (--grad-compression: none, powersgd, int8, sign;
// docs/grad_compression.md), for a few model sizes, GPU counts and network speeds. A step is the
// compute (6·N + 12·L·C·T FLOP per token at a fraction of the GPU's peak), the compression kernels
// (their memory traffic at the HBM's rate, plus a fixed cost per kernel) and the reduction across the
// ranks as the trainer issues it under -z 0 (one bucket of gradients at a time: the embeddings, each
// layer, the final LayerNorm): the bytes of parallel/plan/compression_cost.h at the speed of the
// slowest link a collective crosses, plus a latency per collective that grows with the ring's hops.
// It prints the step with nothing overlapped, and with each bucket's reduction overlapping the rest of
// the last micro-step's backward. It leaves out: the optimizer's update and the forward's weight
// handling (the same for every method), NCCL's tree and NVLS algorithms and hierarchical all-to-alls
// (everything is a flat ring, or grouped point-to-point sends), congestion and jitter, the SMs and
// memory bandwidth that communication and compression take from the overlapped compute, the first
// --compression-start steps (sent uncompressed), -z 1 (reduce-scatter, then the weights gathered) and
// whether the compressed run needs more steps to reach the same loss (dev/grad_compression.sh measures
// that). Every constant is a flag; the program prints them all before its table.
//
// Usage: compression_step_model [flags]   (--help lists them; --csv for a machine-readable table)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/errors.h"
#include "base/model_descriptor.h"
#include "base/model_tensors.h"
#include "parallel/plan/compression_cost.h"
#include "parallel/plan/traffic.h"

namespace {

constexpr int kMaxRank = 32;  // PowerSGD's largest rank (kernels/grad_compression.h, a CUDA header)

// ---- flags

struct Options {
    std::vector<std::string> models = {"gpt2:d12", "gpt2:d48"};
    std::vector<double> gpus = {8, 64};
    std::vector<double> gbps = {10, 100, 400};
    std::vector<std::string> methods = {"none", "none-bf16", "powersgd", "int8", "sign"};
    int powersgd_rank = 4;
    int gpus_per_node = 8;
    double nvlink_gbps = 2880;  // 360 GB/s per GPU: what NCCL's rings reach on H100 NVLink
    double tokens = 16384;      // per GPU per step
    int seq_len = 0;            // 0: the model's maxT
    int micro_steps = 1;
    double peak_tflops = 989, mfu = 0.4;
    double hbm_tbps = 3.35, cuda_core_tflops = 67;
    double latency_us = 20, nvlink_latency_us = 2, collective_us = 10;
    double kernel_us = 3, sync_us = 1, sm_gbs = 200;
    bool csv = false, per_tensor = false;
};

const char* const kHelp =
    "compression_step_model: the modelled step time of data-parallel GPT-2 training under each gradient\n"
    "compression method (-z 0, fp32 gradients). Lists are comma-separated.\n"
    "  --models LIST           model descriptors (default gpt2:d12,gpt2:d48)\n"
    "  --gpus LIST             data-parallel GPU counts (default 8,64)\n"
    "  --gbps LIST             a node's network bandwidth to the other nodes, all its NICs together,\n"
    "                          Gbit/s each way (default 10,100,400; used where the GPUs span nodes)\n"
    "  --methods LIST          none (fp32), none-bf16, powersgd, powersgd:R (rank R), int8, sign\n"
    "                          (default none,none-bf16,powersgd,int8,sign)\n"
    "  --powersgd-rank R       the rank of plain 'powersgd' (default 4; 1..32)\n"
    "  --gpus-per-node N       GPUs per node (default 8)\n"
    "  --nvlink-gbps X         one GPU's bandwidth within a node, Gbit/s each way (default 2880)\n"
    "  --tokens N              tokens per GPU per step (default 16384)\n"
    "  --seq-len T             sequence length for the attention FLOPs (default: the model's maxT)\n"
    "  --micro-steps G         micro-steps per step; only the last one's backward overlaps (default 1)\n"
    "  --peak-tflops X         the GPU's dense bf16 peak (default 989: H100 SXM)\n"
    "  --mfu X                 the fraction of it the step's compute reaches (default 0.4)\n"
    "  --hbm-tbps X            memory bandwidth for the compression kernels, TB/s (default 3.35)\n"
    "  --cuda-core-tflops X    fp32 FMA rate for PowerSGD's products (default 67)\n"
    "  --latency-us X          a ring hop between nodes (default 20)\n"
    "  --nvlink-latency-us X   a ring hop within a node, and each peer of an all-to-all (default 2)\n"
    "  --collective-us X       the fixed cost of each collective call (default 10)\n"
    "  --kernel-us X           the fixed cost of each compression kernel (default 3)\n"
    "  --sync-us X             one block-wide reduction in PowerSGD's orthogonalisation (default 1)\n"
    "  --sm-gbs X              one thread block's bandwidth to L2, GB/s (default 200)\n"
    "  --csv                   the table as CSV (the assumptions as # lines above it)\n"
    "  --per-tensor            also each tensor's bytes per rank per step under each method\n"
    "  --help                  this text\n";

std::vector<std::string> split(const std::string& text) {
    std::vector<std::string> parts;
    size_t start = 0;
    while (true) {
        const size_t comma = text.find(',', start);
        parts.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return parts;
}

// A positive number (an integer where `integer`), or a one-line error naming the flag.
double positive(const char* flag, const std::string& text, bool integer) {
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !(value > 0) || !std::isfinite(value) ||
        (integer && (value != std::floor(value) || value > 1e9)))
        fail("%s: '%s' is not a positive %s", flag, text.c_str(), integer ? "integer" : "number");
    return value;
}
std::vector<double> positive_list(const char* flag, const std::string& text, bool integer) {
    std::vector<double> values;
    for (const std::string& part : split(text)) values.push_back(positive(flag, part, integer));
    return values;
}

Options parse_flags(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        const std::string flag = argv[i];
        if (flag == "--help" || flag == "-h") {
            fputs(kHelp, stdout);
            exit(0);
        }
        if (flag == "--csv") { o.csv = true; continue; }
        if (flag == "--per-tensor") { o.per_tensor = true; continue; }
        if (flag.rfind("--", 0) != 0) fail("unexpected argument '%s' (see --help)", flag.c_str());
        if (i + 1 >= argc) fail("%s needs a value (see --help)", flag.c_str());
        const std::string v = argv[++i];
        const char* f = flag.c_str();
        auto number = [&](double* out) { *out = positive(f, v, false); };
        auto integer = [&](int* out) { *out = (int)positive(f, v, true); };
        if (flag == "--models") o.models = split(v);
        else if (flag == "--gpus") o.gpus = positive_list(f, v, true);
        else if (flag == "--gbps") o.gbps = positive_list(f, v, false);
        else if (flag == "--methods") o.methods = split(v);
        else if (flag == "--powersgd-rank") integer(&o.powersgd_rank);
        else if (flag == "--gpus-per-node") integer(&o.gpus_per_node);
        else if (flag == "--nvlink-gbps") number(&o.nvlink_gbps);
        else if (flag == "--tokens") number(&o.tokens);
        else if (flag == "--seq-len") integer(&o.seq_len);
        else if (flag == "--micro-steps") integer(&o.micro_steps);
        else if (flag == "--peak-tflops") number(&o.peak_tflops);
        else if (flag == "--mfu") number(&o.mfu);
        else if (flag == "--hbm-tbps") number(&o.hbm_tbps);
        else if (flag == "--cuda-core-tflops") number(&o.cuda_core_tflops);
        else if (flag == "--latency-us") number(&o.latency_us);
        else if (flag == "--nvlink-latency-us") number(&o.nvlink_latency_us);
        else if (flag == "--collective-us") number(&o.collective_us);
        else if (flag == "--kernel-us") number(&o.kernel_us);
        else if (flag == "--sync-us") number(&o.sync_us);
        else if (flag == "--sm-gbs") number(&o.sm_gbs);
        else fail("unknown flag '%s' (see --help)", f);
    }
    if (o.mfu > 1) fail("--mfu: %g is above 1", o.mfu);
    if (o.powersgd_rank > kMaxRank) fail("--powersgd-rank: %d is above %d", o.powersgd_rank, kMaxRank);
    return o;
}

// ---- methods

struct Method {
    std::string label;            // as the table prints it
    CompressionSettings settings;  // ranks set per configuration
};

Method parse_method(const std::string& text, int default_rank) {
    Method m;
    if (text == "none" || text == "none-fp32") {
        m.label = "none fp32";
    } else if (text == "none-bf16") {
        m.label = "none bf16", m.settings.element_bytes = 2;
    } else if (text == "int8" || text == "sign") {
        m.label = text;
        parse_grad_compression(text.c_str(), &m.settings.method);
    } else if (text == "powersgd" || text.rfind("powersgd:", 0) == 0) {
        m.settings.method = GradCompression::POWERSGD;
        m.settings.powersgd_rank = text == "powersgd" ? default_rank : (int)positive("--methods", text.substr(9), true);
        if (m.settings.powersgd_rank > kMaxRank)
            fail("--methods: '%s': PowerSGD's rank is at most %d", text.c_str(), kMaxRank);
        m.label = strprintf("powersgd r=%d", m.settings.powersgd_rank);
    } else {
        fail("--methods: unknown method '%s' (none, none-bf16, powersgd, powersgd:R, int8, sign)", text.c_str());
    }
    return m;
}

// ---- the model's tensors and the trainer's buckets (parallel/plan/param_buckets.h)

const char* const kTensorNames[NUM_PARAM_TENSORS] = {
    "wte", "wpe", "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
    "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight",
    "mlp.c_proj.bias", "ln_f.weight", "ln_f.bias"};

struct Tensor {
    std::string name;
    TensorShape shape;
};

// One bucket: what one reduction sends, and when the last micro-step's backward has finished it (the
// fraction of the backward's FLOPs done by then).
struct Bucket {
    std::string name;
    std::vector<Tensor> tensors;
    double ready = 1;
};

struct Model {
    std::string descriptor;
    GPTConfig config;
    double parameters = 0;
    double flops_per_token = 0;  // 6N + 12·L·C·T
    std::vector<Tensor> tensors;  // in the parameter file's order
    std::vector<Bucket> buckets;  // in the order the backward finishes them
};

// The backward runs the classifier (6·C·Vp FLOP per token), the final LayerNorm, the layers from the
// last (72·C² + 12·C·T each), then the embeddings (the rest of 6N, tiny): the final norm's bucket is
// ready after the classifier, layer l's after layers L−1..l, the positions' and the vocabulary's
// (wte is also the embedding) at the end.
Model build_model(const std::string& descriptor, int seq_len) {
    Model m;
    m.descriptor = descriptor;
    m.config = with_flag("--models", [&] { return config_from_descriptor(descriptor); });
    const GPTConfig& c = m.config;
    const double C = c.channels, L = c.num_layers, T = seq_len > 0 ? seq_len : c.max_seq_len;
    m.parameters = (double)param_layout(c).total;
    const double classifier = 6 * C * c.padded_vocab_size, layer = 72 * C * C + 12 * C * T;
    m.flops_per_token = 6 * m.parameters + 12 * L * C * T;

    const std::vector<ModelTensor> tensors = model_tensors(c);
    const std::vector<TensorShape> shapes = model_gradient_shapes(c);
    Bucket positions{"positions", {}, 1}, vocabulary{"vocabulary", {}, 1};
    Bucket final_norm{"final norm", {}, classifier / m.flops_per_token};
    std::vector<Bucket> layers(c.num_layers);
    for (int l = 0; l < c.num_layers; l++)
        layers[l] = {strprintf("layer %d", l), {}, (classifier + (L - l) * layer) / m.flops_per_token};
    for (size_t i = 0; i < tensors.size(); i++) {
        const ModelTensor& t = tensors[i];
        const std::string name = t.layer >= 0 ? strprintf("h.%d.%s", t.layer, kTensorNames[t.kind]) : kTensorNames[t.kind];
        const Tensor tensor{name, shapes[i]};
        m.tensors.push_back(tensor);
        if (t.kind == WTE) vocabulary.tensors.push_back(tensor);
        else if (t.kind == WPE) positions.tensors.push_back(tensor);
        else if (t.kind == LNFW || t.kind == LNFB) final_norm.tensors.push_back(tensor);
        else layers[t.layer].tensors.push_back(tensor);
    }
    m.buckets.push_back(final_norm);
    for (int l = c.num_layers - 1; l >= 0; l--) m.buckets.push_back(layers[l]);
    m.buckets.push_back(positions);
    m.buckets.push_back(vocabulary);
    return m;
}

std::vector<TensorShape> all_shapes(const Model& m) {
    std::vector<TensorShape> shapes;
    for (const Tensor& t : m.tensors) shapes.push_back(t.shape);
    return shapes;
}

// ---- the machine

// One configuration's ranks and links, in seconds and bytes per second.
struct Machine {
    int ranks = 1, nodes = 1, per_node = 1;  // per_node: ranks on one node
    double node_rate = 0, nvlink_rate = 0;    // a node's network (0: one node), a GPU's NVLink
    double hop_between = 0, hop_within = 0, call = 0;
    double hbm_rate = 0, fp32_rate = 0, kernel = 0, sync = 0, sm_rate = 0;
    bool spans_nodes() const { return nodes > 1; }
};

Machine make_machine(const Options& o, int ranks, double gbps) {
    Machine m;
    m.ranks = ranks;
    m.per_node = std::min(ranks, o.gpus_per_node);
    m.nodes = (ranks + o.gpus_per_node - 1) / o.gpus_per_node;
    m.node_rate = gbps * 1e9 / 8;
    m.nvlink_rate = o.nvlink_gbps * 1e9 / 8;
    m.hop_between = o.latency_us * 1e-6, m.hop_within = o.nvlink_latency_us * 1e-6, m.call = o.collective_us * 1e-6;
    m.hbm_rate = o.hbm_tbps * 1e12, m.fp32_rate = o.cuda_core_tflops * 1e12;
    m.kernel = o.kernel_us * 1e-6, m.sync = o.sync_us * 1e-6, m.sm_rate = o.sm_gbs * 1e9;
    return m;
}

// What a bucket's (or a step's) reduction costs.
struct Cost {
    double sent = 0;       // bytes one rank sends (compression_cost.h)
    double node_sent = 0;  // bytes one node sends to the other nodes
    double kernels = 0;    // seconds of compression kernels
    double transfer = 0;   // seconds of the collectives' bytes on their slowest link
    double latency = 0;    // seconds of the collectives' fixed costs and hops
    int collectives = 0;
    double total() const { return kernels + transfer + latency; }
    Cost& operator+=(const Cost& o) {
        sent += o.sent, node_sent += o.node_sent, kernels += o.kernels, transfer += o.transfer;
        latency += o.latency, collectives += o.collectives;
        return *this;
    }
};

// A ring collective (NCCL's ring algorithm, parallel/plan/traffic.h) in which each rank sends `bytes`
// over `passes` trips round the ring (an all-reduce 2, an all-gather 1). Ordered node by node, each
// trip takes R − 1 hops, `nodes` of them between nodes; a ring enters and leaves each node once, so a
// node's network link carries what one rank sends (and each NVLink as much).
void ring(Cost* cost, const Machine& m, double bytes, int passes) {
    if (m.ranks <= 1) return;
    const int hops = passes * (m.ranks - 1);
    const int between = m.spans_nodes() ? passes * std::min(m.nodes, m.ranks - 1) : 0;
    cost->collectives++;
    cost->sent += bytes;
    cost->latency += m.call + between * m.hop_between + (hops - between) * m.hop_within;
    if (!m.spans_nodes()) {
        cost->transfer += bytes / m.nvlink_rate;
        return;
    }
    cost->node_sent += bytes;
    cost->transfer += std::max(bytes / m.node_rate, m.per_node > 1 ? bytes / m.nvlink_rate : 0.0);
}

// An all-to-all (grouped sends and receives) in which each rank sends `bytes`, (R − 1) equal packets:
// those to the R − per_node ranks of other nodes leave by the node's network link, per_node ranks'
// worth at once. The R − 1 exchanges run together: one hop, plus a within-node hop's cost per peer.
void all_to_all(Cost* cost, const Machine& m, double bytes) {
    if (m.ranks <= 1) return;
    const double R = m.ranks, M = m.per_node;
    cost->collectives++;
    cost->sent += bytes;
    cost->latency += m.call + (m.spans_nodes() ? m.hop_between : m.hop_within) + (R - 1) * m.hop_within;
    if (!m.spans_nodes()) {
        cost->transfer += bytes / m.nvlink_rate;
        return;
    }
    const double leaving = M * bytes * (R - M) / (R - 1), within = bytes * (M - 1) / (R - 1);
    cost->node_sent += leaving;
    cost->transfer += std::max(leaving / m.node_rate, within / m.nvlink_rate);
}

// `count` kernels that together move `bytes` through HBM and do `flops` fp32 FMAs' worth of work.
double kernels(const Machine& m, double count, double bytes, double flops = 0) {
    return count * m.kernel + std::max(bytes / m.hbm_rate, flops / m.fp32_rate);
}

// ---- each method's reduction of one bucket, as parallel/comm/compressed_reduction.h issues it (-z 0)

// int8 and sign: R chunks, each compressed into a packet (R kernels over the bucket), packets
// exchanged by an all-to-all, this rank's chunk averaged and compressed again (the server side, with
// its residual), the packets all-gathered and decompressed (R kernels). Bytes through HBM per element
// of the bucket (n), per kernels/grad_compression.h's table (b: a packet's bytes per element, 1 + 1/64
// for int8, 1/8 + 1/64 for sign):
//   int8   quantise 13 + 1/64, own packet copied 2b/R, sum-requantise (R·b + b + 8)/R, dequantise 5 + 1/64
//   sign   compress 12 + b, own packet copied 2b/R, average (R·b + 4)/R, compress (12 + b)/R,
//          decompress 4 + b
Cost blockwise_reduction(const Bucket& bucket, const CompressionSettings& s, const Machine& m) {
    Cost cost;
    double n = 0, sent = 0;
    for (const Tensor& t : bucket.tensors) {
        n += (double)t.shape.elements();
        sent += (double)compressed_tensor_bytes(t.shape, s);
    }
    all_to_all(&cost, m, sent / 2);  // compression_cost.h: the two stages send the same
    ring(&cost, m, sent / 2, 1);
    const double R = m.ranks;
    if (s.method == GradCompression::INT8) {
        const double b = 1 + 1.0 / 64;
        cost.kernels = kernels(m, 2 * R + 2, n * ((13 + 1.0 / 64) + 2 * b / R + (R * b + b + 8) / R + (5 + 1.0 / 64)));
    } else {
        const double b = 1.0 / 8 + 1.0 / 64;
        cost.kernels = kernels(m, 2 * R + 3, n * ((12 + b) + 2 * b / R + (R * b + 4) / R + (12 + b) / R + (4 + b)));
    }
    return cost;
}

// The one block of PowerSGD's Gram-Schmidt over P (rows × r, row-major; two classical passes,
// kernels/grad_compression.h): 3r − 2 block-wide reductions and about 2r² column reads plus 3r column
// writes, each element of which costs min(4r, 32) bytes of L2 traffic (a 32-byte sector holds 32/(4r)
// rows' entries).
double orthogonalise_time(const Machine& m, double rows, int r) {
    const double sweeps = 2.0 * r * r + 3.0 * r, reductions = 3.0 * r - 2;
    return m.kernel + reductions * m.sync + sweeps * rows * std::min(4.0 * r, 32.0) / m.sm_rate;
}

// PowerSGD of rank r: per matrix M (k = rows·cols elements) sent as factors, M = g + e (12k bytes),
// P = M·Q (4k, 2kr FLOP), P orthogonalised, Q = Mᵀ·P (4k, 2kr), M̂ and e written (12k, 2kr); the
// bucket's P's all-reduced in one call, its Q's in another, the tensors sent whole in a third (one
// group of calls).
Cost powersgd_reduction(const Bucket& bucket, const CompressionSettings& s, const Machine& m) {
    Cost cost;
    const int r = s.powersgd_rank;
    double p_bytes = 0, q_bytes = 0, whole_bytes = 0;
    for (const Tensor& t : bucket.tensors) {
        if (!powersgd_compresses(t.shape, r)) {
            whole_bytes += (double)all_reduce_bytes(t.shape.elements(), m.ranks, sizeof(float));
            continue;
        }
        const double k = (double)t.shape.elements();
        p_bytes += (double)all_reduce_bytes(t.shape.rows * r, m.ranks, sizeof(float));
        q_bytes += (double)all_reduce_bytes(t.shape.cols * r, m.ranks, sizeof(float));
        cost.kernels += kernels(m, 4, 32 * k, 6 * k * r) + orthogonalise_time(m, (double)t.shape.rows, r);
    }
    if (p_bytes > 0) ring(&cost, m, p_bytes, 2), ring(&cost, m, q_bytes, 2);
    if (whole_bytes > 0) ring(&cost, m, whole_bytes, 2);
    return cost;
}

Cost bucket_reduction(const Bucket& bucket, const CompressionSettings& s, const Machine& m) {
    switch (s.method) {
        case GradCompression::INT8:
        case GradCompression::SIGN: return blockwise_reduction(bucket, s, m);
        case GradCompression::POWERSGD: return powersgd_reduction(bucket, s, m);
        case GradCompression::NONE: break;
    }
    Cost cost;
    double bytes = 0;
    for (const Tensor& t : bucket.tensors) bytes += (double)compressed_tensor_bytes(t.shape, s);
    if (bytes > 0) ring(&cost, m, bytes, 2);
    return cost;
}

// ---- a step

struct Step {
    Cost reduction;         // all the buckets'
    double compute = 0;     // seconds
    double serial = 0;      // compute, then every bucket's reduction
    double overlapped = 0;  // each reduction as soon as its bucket is ready and the one before is done
};

// The reductions run one after another on their own stream, bucket b from the moment the last
// micro-step's backward has finished it (and the reduction before it is done); the step ends when
// both the compute and the last reduction have.
Step model_step(const Model& model, const CompressionSettings& s, const Machine& m, const Options& o) {
    Step step;
    step.compute = model.flops_per_token * o.tokens / (o.peak_tflops * 1e12 * o.mfu);
    const double micro = step.compute / o.micro_steps;
    const double backward_start = step.compute - micro * 2 / 3, backward = micro * 2 / 3;
    double stream_free = 0;
    for (const Bucket& bucket : model.buckets) {
        const Cost c = bucket_reduction(bucket, s, m);
        step.reduction += c;
        const double start = std::max(stream_free, backward_start + bucket.ready * backward);
        stream_free = start + c.total();
    }
    step.serial = step.compute + step.reduction.total();
    step.overlapped = std::max(step.compute, stream_free);
    const double expected = (double)compressed_gradient_bytes(all_shapes(model), s);
    if (std::fabs(step.reduction.sent - expected) > 0.5)  // this model's sum against compression_cost.h's
        fail("internal error: %.0f bytes modelled, compression_cost.h says %.0f", step.reduction.sent, expected);
    return step;
}

// ---- output

void print_assumptions(const Options& o, const char* prefix) {
    auto line = [&](const std::string& text) { printf("%s%s\n", prefix, text.c_str()); };
    line("Modelled step time of data-parallel GPT-2 training under each gradient compression method");
    line("(-z 0, fp32 gradients; the trainer's buckets: the embeddings, each layer, the final LayerNorm).");
    line("Assumptions (each one a flag, see --help):");
    line(strprintf("  compute    6N + 12*L*C*T FLOP per token (N parameters; attention as llm.c counts it, T = %s),",
                   o.seq_len > 0 ? std::to_string(o.seq_len).c_str() : "the model's maxT"));
    line(strprintf("             %.0f tokens per GPU per step in %d micro-step(s), at %.0f TFLOP/s x %.2f MFU;",
                   o.tokens, o.micro_steps, o.peak_tflops, o.mfu));
    line("             the backward is 2/3 of each micro-step, spread over the layers by their FLOPs");
    line(strprintf("  network    %d GPUs per node; NVLink %.0f Gbit/s per GPU; between nodes, the Gbit/s column is",
                   o.gpus_per_node, o.nvlink_gbps));
    line("             a node's bandwidth to the others (all its NICs), each way. Rings (all-reduce, all-gather)");
    line("             are flat, node by node: a node's link carries one rank's bytes. An all-to-all sends");
    line("             (R-M)/(R-1) of each GPU's packets off the node (M GPUs per node): M times as much per link");
    line(strprintf("  latency    %.0f us per call + %.0f us per ring hop between nodes + %.0f us per hop within a node",
                   o.collective_us, o.latency_us, o.nvlink_latency_us));
    line("             (an all-reduce: 2(R-1) hops, 2 x nodes of them between nodes; an all-gather half that);");
    line("             an all-to-all: one hop + a within-node hop's cost per peer");
    line(strprintf("  kernels    compression kernels move their bytes at %.2f TB/s, + %.0f us each; int8 ~19 and",
                   o.hbm_tbps, o.kernel_us));
    line("             sign ~16.4 bytes per element (2R+2, 2R+3 kernels per bucket), PowerSGD 32 bytes per");
    line(strprintf("             element of its matrices and 6r FLOP at %.0f TFLOP/s; its orthogonalisation, one block",
                   o.cuda_core_tflops));
    line(strprintf("             per matrix: 3r-2 reductions of %.1f us and 2r^2+3r column sweeps at %.0f GB/s",
                   o.sync_us, o.sm_gbs));
    line("  serial     compute + kernels + comm, nothing overlapped");
    line("  overlapped each bucket's reduction (kernels included) starts when the last micro-step's backward");
    line("             has finished the bucket and the previous reduction is done; none slows the compute");
    line("  left out   the optimizer, -z 1, tree/NVLS/hierarchical algorithms, congestion, steps to converge");
    line("MiB/rank: what one rank sends per step (parallel/plan/compression_cost.h); MiB/node: what a node");
    line("sends to the other nodes; comm: the collectives' bytes and latency (lat, of which latency).");
    line("x: the speed-up over 'none fp32' in the same configuration.");
}

std::string network_label(const Machine& m, double gbps) {
    return m.spans_nodes() ? strprintf("%g Gbit/s", gbps) : std::string("NVLink");
}

struct Row {
    std::string model, network;
    int gpus;
    double gbps;
    std::string method;
    Step step;
    double speedup_serial, speedup_overlapped;
};

void print_table_header() {
    printf("\n%-9s %5s %-11s %-13s %9s %9s %8s %8s %8s %7s %9s %6s %9s %6s\n", "model", "GPUs", "network", "method",
           "MiB/rank", "MiB/node", "compute", "kernels", "comm", "lat", "serial", "x", "overlap", "x");
    printf("%-9s %5s %-11s %-13s %9s %9s %8s %8s %8s %7s %9s %6s %9s\n", "", "", "", "", "", "", "ms", "ms", "ms", "ms",
           "ms", "", "ms");
}

void print_row(const Row& r, const Options& o) {
    const double MiB = 1024.0 * 1024.0, ms = 1e3;
    const Cost& c = r.step.reduction;
    if (o.csv) {
        printf("%s,%d,%s,%s,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n", r.model.c_str(), r.gpus,
               r.network == "NVLink" ? "nvlink" : strprintf("%g", r.gbps).c_str(), r.method.c_str(), c.sent / MiB,
               c.node_sent / MiB, r.step.compute * ms, c.kernels * ms, (c.transfer + c.latency) * ms, c.latency * ms,
               r.step.serial * ms, r.speedup_serial, r.step.overlapped * ms, r.speedup_overlapped);
        return;
    }
    const std::string node = c.node_sent > 0 ? strprintf("%.1f", c.node_sent / MiB) : "-";
    printf("%-9s %5d %-11s %-13s %9.2f %9s %8.1f %8.1f %8.1f %7.1f %9.1f %6.2f %9.1f %6.2f\n", r.model.c_str(), r.gpus,
           r.network.c_str(), r.method.c_str(), c.sent / MiB, node.c_str(), r.step.compute * ms, c.kernels * ms,
           (c.transfer + c.latency) * ms, c.latency * ms, r.step.serial * ms, r.speedup_serial,
           r.step.overlapped * ms, r.speedup_overlapped);
}

// Each tensor's bytes per rank per step under each method, for one model on `ranks` ranks.
void print_per_tensor(const Model& model, int ranks, const std::vector<Method>& methods, const Options& o) {
    const char* sep = o.csv ? "," : " ";
    printf("\n%s%s%d ranks: bytes per rank per step, by tensor\n", o.csv ? "# " : "", (model.descriptor + ", ").c_str(),
           ranks);
    printf(o.csv ? "tensor,rows,cols" : "%-26s %6s %6s", "tensor", "rows", "cols");
    for (const Method& m : methods) printf(o.csv ? ",%s" : " %13s", m.label.c_str());
    printf("\n");
    for (const Tensor& t : model.tensors) {
        printf(o.csv ? "%s,%zu,%zu" : "%-26s %6zu %6zu", t.name.c_str(), t.shape.rows, t.shape.cols);
        for (const Method& m : methods) {
            CompressionSettings s = m.settings;
            s.ranks = ranks;
            printf(o.csv ? "%s%zu" : "%s%13zu", sep, compressed_tensor_bytes(t.shape, s));
        }
        printf("\n");
    }
}

int run(const Options& o) {
    std::vector<Method> methods;
    for (const std::string& text : o.methods) methods.push_back(parse_method(text, o.powersgd_rank));
    std::vector<Model> models;
    for (const std::string& descriptor : o.models) models.push_back(build_model(descriptor, o.seq_len));

    print_assumptions(o, o.csv ? "# " : "");
    if (o.csv)
        printf("model,gpus,gbps,method,mib_per_rank,mib_per_node,compute_ms,kernels_ms,comm_ms,latency_ms,"
               "serial_ms,serial_speedup,overlapped_ms,overlapped_speedup\n");
    else
        print_table_header();
    CompressionSettings baseline;  // none, fp32
    for (const Model& model : models)
        for (double gpus : o.gpus) {
            // Within one node the network speed does not matter: one set of rows.
            const bool one_node = gpus <= o.gpus_per_node;
            for (size_t g = 0; g < (one_node ? 1 : o.gbps.size()); g++) {
                const Machine machine = make_machine(o, (int)gpus, o.gbps[g]);
                baseline.ranks = (int)gpus;
                const Step reference = model_step(model, baseline, machine, o);
                for (const Method& method : methods) {
                    CompressionSettings s = method.settings;
                    s.ranks = (int)gpus;
                    const Step step = model_step(model, s, machine, o);
                    print_row({model.descriptor, network_label(machine, o.gbps[g]), (int)gpus, one_node ? 0 : o.gbps[g],
                               method.label, step, reference.serial / step.serial, reference.overlapped / step.overlapped},
                              o);
                }
                if (!o.csv) printf("\n");
            }
        }
    if (o.per_tensor)
        for (const Model& model : models)
            for (double gpus : o.gpus) print_per_tensor(model, (int)gpus, methods, o);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(parse_flags(argc, argv));
    } catch (const InputError& e) {
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
