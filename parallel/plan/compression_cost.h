// What one data rank sends per step to reduce its gradients over R data ranks, by gradient compression
// method (kernels/grad_compression.h computes them; cpu/grad_compression.h is their reference). Every
// tensor is its own collective here; a trainer that packs tensors into buckets differs only in how
// each collective rounds its shards (a few elements, or one block, per tensor). Per tensor of n
// elements (rows × cols), by the rules of parallel/plan/traffic.h (NCCL's ring algorithms):
//
//   none       the gradients all-reduced as they are, `element_bytes` each (4: fp32, 2: bf16):
//                all_reduce_bytes(n, R, element_bytes)                      ≈ 2·(R−1)/R · n·element_bytes
//   int8       B = ⌈n/256⌉ blocks of 256 int8 values and one fp32 scale (260 bytes), cut into R shards of
//              S = ⌈B/R⌉ blocks (whole blocks, every shard the same size). Reduce-scatter (each rank sends
//              its R−1 other shards, an all-to-all), then the requantised shards all-gathered (R−1 shards
//              sent again):
//                2·(R−1)·S·260                                              ≈ 2·(R−1)/R · (n + 4·n/256)
//   sign       the same two stages with blocks of 256 sign bits (32 bytes) and a scale:
//                2·(R−1)·S·36                                               ≈ 2·(R−1)/R · (n/8 + 4·n/256)
//   powersgd   a matrix (rows, cols > 1) whose factors are at most half its size, 2·(rows + cols)·r ≤
//              rows·cols, is sent as its factors: P (rows×r) and Q (cols×r), each all-reduced in fp32:
//                all_reduce_bytes(rows·r, R, 4) + all_reduce_bytes(cols·r, R, 4)
//              every other tensor (1-D ones, small matrices) is all-reduced as it is, as `none` would.
//
// A group of one rank sends nothing. The residuals (error feedback) stay on their rank: no traffic.
#pragma once
#include <cstddef>
#include <cstring>
#include <vector>

#include "base/gpt_config.h"
#include "base/model_tensors.h"
#include "parallel/plan/traffic.h"

enum class GradCompression { NONE, POWERSGD, INT8, SIGN };

inline const char* grad_compression_name(GradCompression method) {
    switch (method) {
        case GradCompression::NONE: return "none";
        case GradCompression::POWERSGD: return "powersgd";
        case GradCompression::INT8: return "int8";
        case GradCompression::SIGN: return "sign";
    }
    return "?";
}
// The method a --grad-compression value names; false for anything else.
inline bool parse_grad_compression(const char* text, GradCompression* method) {
    for (GradCompression m : {GradCompression::NONE, GradCompression::POWERSGD, GradCompression::INT8,
                              GradCompression::SIGN})
        if (std::strcmp(text, grad_compression_name(m)) == 0) {
            *method = m;
            return true;
        }
    return false;
}

// A gradient tensor's shape: rows × cols (a 1-D tensor of n elements is n × 1).
struct TensorShape {
    size_t rows, cols;
    size_t elements() const { return rows * cols; }
};

struct CompressionSettings {
    GradCompression method = GradCompression::NONE;
    int ranks = 1;             // R: the data-parallel group
    size_t element_bytes = 4;  // what an uncompressed gradient element takes: 4 (fp32) or 2 (bf16)
    int powersgd_rank = 4;     // r
};

constexpr size_t kCompressionBlockElements = 256;
constexpr size_t kInt8BlockBytes = kCompressionBlockElements + 4;      // int8 values + fp32 scale
constexpr size_t kSignBlockBytes = kCompressionBlockElements / 8 + 4;  // packed bits + fp32 scale

// Reduce-scatter then all-gather of n elements in blocks of block_bytes, shards of whole blocks.
inline size_t blockwise_exchange_bytes(size_t n, int ranks, size_t block_bytes) {
    if (ranks <= 1) return 0;
    const size_t blocks = (n + kCompressionBlockElements - 1) / kCompressionBlockElements;
    const size_t shard_blocks = (blocks + ranks - 1) / ranks;
    return 2 * (size_t)(ranks - 1) * shard_blocks * block_bytes;
}

// Whether PowerSGD of rank r sends this tensor as its factors.
inline bool powersgd_compresses(const TensorShape& shape, int r) {
    return shape.rows > 1 && shape.cols > 1 && 2 * (shape.rows + shape.cols) * (size_t)r <= shape.rows * shape.cols;
}

// Bytes one rank sends per step for one tensor.
inline size_t compressed_tensor_bytes(const TensorShape& shape, const CompressionSettings& s) {
    const size_t n = shape.elements();
    switch (s.method) {
        case GradCompression::INT8: return blockwise_exchange_bytes(n, s.ranks, kInt8BlockBytes);
        case GradCompression::SIGN: return blockwise_exchange_bytes(n, s.ranks, kSignBlockBytes);
        case GradCompression::POWERSGD:
            if (powersgd_compresses(shape, s.powersgd_rank))
                return all_reduce_bytes(shape.rows * s.powersgd_rank, s.ranks, sizeof(float)) +
                       all_reduce_bytes(shape.cols * s.powersgd_rank, s.ranks, sizeof(float));
            break;
        case GradCompression::NONE: break;
    }
    return all_reduce_bytes(n, s.ranks, s.element_bytes);
}

// Bytes one rank sends per step for all the tensors.
inline size_t compressed_gradient_bytes(const std::vector<TensorShape>& shapes, const CompressionSettings& s) {
    size_t total = 0;
    for (const TensorShape& shape : shapes) total += compressed_tensor_bytes(shape, s);
    return total;
}

// How long a row of tensor `kind`'s matrix is, as the parameter buffer stores it (C, or 4C for the
// fc projection; see below), or 0 for the 1-D tensors.
inline size_t matrix_row_length(int kind, size_t channels) {
    switch (kind) {
        case WTE: case WPE: case QKVW: case ATTPROJW: case FCW: return channels;
        case FCPROJW: return 4 * channels;
        default: return 0;
    }
}

// The GPT model's gradient tensors (base/model_tensors.h's list: wte, wpe, each layer's, ln_f's), the
// weight matrices as the parameter buffer stores them (wte Vp × C, wpe maxT × C, qkv 3C × C, attention
// projection C × C, fc 4C × C, fc projection C × 4C), the rest 1-D.
inline std::vector<TensorShape> model_gradient_shapes(const GPTConfig& c) {
    const size_t C = c.channels;
    std::vector<TensorShape> shapes;
    for (const ModelTensor& t : model_tensors(c)) {
        switch (t.kind) {
            case WTE: shapes.push_back({(size_t)c.padded_vocab_size, C}); break;
            case WPE: shapes.push_back({(size_t)c.max_seq_len, C}); break;
            case QKVW: shapes.push_back({3 * C, C}); break;
            case ATTPROJW: shapes.push_back({C, C}); break;
            case FCW: shapes.push_back({4 * C, C}); break;
            case FCPROJW: shapes.push_back({C, 4 * C}); break;
            default: shapes.push_back({t.size, 1}); break;
        }
    }
    return shapes;
}
