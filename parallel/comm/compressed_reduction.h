// CompressedReduction: the data group's average of one bucket's fp32 gradients, sent compressed
// (--grad-compression; kernels/grad_compression.h has the maths of each method, parallel/plan/
// compression_cost.h the bytes). ParameterStore calls reduce() where it would all-reduce (-z 0) or
// reduce-scatter (-z 1) the bucket, on its communication stream, once the step's last micro-step has
// finished the bucket's gradients; reduce() leaves the averaged (approximated) gradients where the
// uncompressed reduction would: the whole bucket (-z 0), or at least this rank's chunk (-z 1).
//
// Error feedback: what compression drops from a rank's gradient is kept in that rank's fp32 residual
// (one element per gradient element) and added to its next step's gradient, so it is delayed, not lost.
// The residuals and PowerSGD's Q factors are the state a checkpoint keeps (state(), set_state()).
//
// int8 and sign, per bucket of R chunks (a ZeRO chunk each, parallel/plan/param_buckets.h):
//   1. each chunk of g + e compressed into a packet of its own: int8 values or packed sign bits, then
//      one fp32 scale per block of 256 (e keeps what was dropped);
//   2. all-to-all: packet k goes to rank k (grouped sends and receives, an int8 or 1-bit
//      reduce-scatter), so rank k holds every rank's packet of its chunk;
//   3. rank k decompresses them and averages in fp32, in rank order: under -z 1 into its chunk of the
//      gradients, and that is all; under -z 0 the average is compressed again (the "server" side, with a
//      residual of its own per chunk: 1-bit Adam's two-sided error feedback), the packets all-gathered,
//      and every rank decompresses all R of them into the whole bucket (the same bytes on every rank:
//      the replicas stay bitwise equal).
// PowerSGD of rank r, per bucket: each gradient matrix (a segment of rows × cols on the device) whose
// factors P (rows × r) and Q (cols × r) are at most half its size is M = g + e, P = M·Q, P all-reduced
// (mean) and orthogonalised, Q = Mᵀ·P all-reduced (mean), M̂ = P·Qᵀ written over the gradient and
// e = M − M̂; the bucket's P's travel in one all-reduce and its Q's in another. Q starts random (the
// same seed on every rank) and is warm-started from the previous step. The other tensors (biases,
// LayerNorms, small matrices) are all-reduced as they are, in one group.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include <nccl.h>

#include "base/errors.h"
#include "kernels/device_arena.h"
#include "kernels/grad_compression.h"
#include "kernels/host_transfer.h"
#include "parallel/comm/collective_hook.h"
#include "parallel/comm/nccl_check.h"
#include "parallel/plan/compression_cost.h"
#include "parallel/plan/param_buckets.h"
#include "parallel/plan/traffic.h"

class CompressedReduction {
public:
    // whole_result: every rank needs the whole bucket averaged (-z 0); else its chunk (-z 1).
    CompressedReduction(const ParamBuckets& buckets, GradCompression method, int powersgd_rank, int rank,
                        bool whole_result)
        : buckets_(buckets), method_(method), r_(powersgd_rank), rank_(rank), whole_(whole_result) {
        if (!active()) return;
        for (int b = 0; b < (int)buckets_.buckets.size(); b++) {
            max_packet_ = std::max(max_packet_, packet_bytes(b));
            max_chunk_ = std::max(max_chunk_, buckets_.chunk(b));
            shard_ += buckets_.chunk(b);
        }
        if (method_ == GradCompression::POWERSGD) plan_matrices();
    }
    CompressedReduction(const CompressedReduction&) = delete;
    CompressedReduction& operator=(const CompressedReduction&) = delete;

    // A method chosen and a data group to send to (one rank sends nothing).
    bool active() const { return method_ != GradCompression::NONE && buckets_.num_ranks > 1; }
    GradCompression method() const { return method_; }

    // The device buffers: the residual; int8 and sign: the packets out and in, the server side's
    // residual (-z 0) and its average; PowerSGD: the P's of a bucket and the Q's of all.
    void request_memory(DeviceArena* arena) {
        if (!active()) return;
        const int R = buckets_.num_ranks;
        arena->request(&residual_, buckets_.total, MemoryKind::GRADIENTS);
        if (method_ == GradCompression::POWERSGD) {
            arena->request(&p_, std::max<size_t>(max_p_, 1), MemoryKind::GRADIENTS);
            arena->request(&q_, std::max<size_t>(q_total_, 1), MemoryKind::GRADIENTS);
            return;
        }
        arena->request(&packets_out_, (size_t)R * max_packet_, MemoryKind::GRADIENTS);
        arena->request(&packets_in_, (size_t)R * max_packet_, MemoryKind::GRADIENTS);
        if (whole_blockwise()) {
            arena->request(&server_residual_, shard_, MemoryKind::GRADIENTS);
            if (method_ == GradCompression::SIGN) arena->request(&average_, max_chunk_, MemoryKind::GRADIENTS);
        }
    }

    // Once the arena is allocated: the communicator and stream of the reductions; the state reset.
    void start(ncclComm_t comm, cudaStream_t stream, CollectiveHook* hook) {
        comm_ = comm, stream_ = stream, hook_ = hook;
        if (active()) reset();
    }
    void set_hook(CollectiveHook* hook) { hook_ = hook; }

    // The residuals zeroed and Q drawn afresh (the start of compression, or after a step whose
    // gradients were not finite: their NaNs would otherwise stay in the residual for good).
    void reset() {
        if (!active()) return;
        CUDA_CHECK(cudaMemsetAsync(residual_, 0, buckets_.total * sizeof(float), stream_));
        if (server_residual_) CUDA_CHECK(cudaMemsetAsync(server_residual_, 0, shard_ * sizeof(float), stream_));
        if (method_ == GradCompression::POWERSGD) copy_to_device(q_, initial_q(), stream_);
    }

    // The bucket's gradients (fp32, the whole bucket, on the device) averaged over the data ranks.
    void reduce(float* grads, int bucket) {
        if (method_ == GradCompression::POWERSGD)
            reduce_powersgd(grads, bucket);
        else
            reduce_blockwise(grads, bucket);
    }

    // Bytes one rank sends to reduce the bucket (parallel/plan/traffic.h's rules: the all-to-all and
    // the all-gather send R − 1 packets each).
    size_t cost(int bucket) const {
        const int R = buckets_.num_ranks;
        if (!active()) return 0;
        if (method_ != GradCompression::POWERSGD)
            return (whole_ ? 2 : 1) * gather_bytes(packet_bytes(bucket), R, 1);
        const BucketMatrices& m = matrices_[bucket];
        size_t sent = all_reduce_bytes(m.p_length, R, sizeof(float)) + all_reduce_bytes(m.q_length, R, sizeof(float));
        for (const Segment& s : m.sent_whole) sent += all_reduce_bytes(s.length, R, sizeof(float));
        return sent;
    }

    // ---- the state a checkpoint keeps: the residual, then the server side's (int8, sign under -z 0)
    // or the Q factors (PowerSGD), fp32, as this rank holds them
    std::vector<float> state() const {
        if (!active()) return {};
        std::vector<float> values = copy_from_device(residual_, buckets_.total, stream_);
        const std::vector<float> second = server_residual_ ? copy_from_device(server_residual_, shard_, stream_)
                                          : q_ ? copy_from_device(q_, q_total_, stream_)
                                               : std::vector<float>();
        values.insert(values.end(), second.begin(), second.end());
        return values;
    }
    size_t state_size() const {
        if (!active()) return 0;
        return buckets_.total + (whole_blockwise() ? shard_ : 0) + (method_ == GradCompression::POWERSGD ? q_total_ : 0);
    }
    void set_state(const std::vector<float>& values) {
        if (values.size() != state_size())
            fail("internal error: %zu values of compression state, this rank keeps %zu", values.size(), state_size());
        if (!active()) return;
        const std::vector<float> first(values.begin(), values.begin() + buckets_.total);
        const std::vector<float> second(values.begin() + buckets_.total, values.end());
        copy_to_device(residual_, first, stream_);
        if (server_residual_) copy_to_device(server_residual_, second, stream_);
        if (q_) copy_to_device(q_, second, stream_);
    }
    // What the state's cut depends on (the buckets, the data ranks, the method, its rank, -z 0 or 1):
    // a checkpoint whose fingerprint differs cannot be resumed bit for bit.
    uint64_t layout_fingerprint() const {
        uint64_t h = 0xcbf29ce484222325ull;
        auto mix = [&](uint64_t v) { h = (h ^ v) * 0x100000001b3ull; };
        mix((uint64_t)method_), mix((uint64_t)r_), mix((uint64_t)buckets_.num_ranks), mix(whole_ ? 1 : 0);
        mix(rank_);
        for (const ParamBucket& b : buckets_.buckets) mix(b.length);
        return h;
    }

private:
    struct Segment {
        size_t offset, length;  // within the bucket
    };
    struct Matrix {
        size_t offset;  // within the bucket
        int rows, cols;
        size_t p_at, q_at;  // its P in the bucket's P's, its Q in all the Q's
    };
    struct BucketMatrices {
        std::vector<Matrix> compressed;
        std::vector<Segment> sent_whole;
        size_t p_length = 0, q_first = 0, q_length = 0;
    };

    bool whole_blockwise() const { return whole_ && method_ != GradCompression::POWERSGD; }

    // ---- int8 and sign
    // A chunk's packet: its int8 values (or sign bits), then its scales; a multiple of 4 bytes (a
    // chunk is a multiple of 128 elements), so that every packet's scales are aligned.
    size_t packet_bytes(int bucket) const {
        const size_t n = buckets_.chunk(bucket);
        const size_t values = method_ == GradCompression::INT8 ? n : sign_words(n) * 4;
        return values + compression_blocks(n) * sizeof(float);
    }
    size_t values_bytes(int bucket) const {
        const size_t n = buckets_.chunk(bucket);
        return method_ == GradCompression::INT8 ? n : sign_words(n) * 4;
    }
    float* scales_of(uint8_t* packet, int bucket) const {
        return reinterpret_cast<float*>(packet + values_bytes(bucket));
    }

    // Chunk x[0, n) + residual compressed into `packet` (residual keeps what was dropped).
    void compress(uint8_t* packet, float* residual, const float* x, int bucket) {
        const size_t n = buckets_.chunk(bucket);
        if (method_ == GradCompression::INT8)
            int8_quantise(reinterpret_cast<int8_t*>(packet), scales_of(packet, bucket), residual, x, n, stream_);
        else
            sign_compress(reinterpret_cast<uint32_t*>(packet), scales_of(packet, bucket), residual, x, n, stream_);
    }
    // The mean of every rank's packet of this rank's chunk (packets_in_, in rank order), decompressed
    // and added in fp32 in rank order, into out[0, n) (-z 1: the rank's chunk of the gradients).
    void average(float* out, int bucket) {
        const size_t n = buckets_.chunk(bucket), stride = packet_bytes(bucket);
        const int R = buckets_.num_ranks;
        uint8_t* scratch = packets_out_ + rank_ * stride;  // int8: the requantised mean, not needed here
        if (method_ == GradCompression::INT8)
            int8_sum_requantise(reinterpret_cast<int8_t*>(scratch), scales_of(scratch, bucket), nullptr, out,
                                reinterpret_cast<int8_t*>(packets_in_), stride, scales_of(packets_in_, bucket),
                                stride / sizeof(float), R, n, 1.0f / (float)R, stream_);
        else
            sign_average(out, reinterpret_cast<uint32_t*>(packets_in_), stride / sizeof(uint32_t),
                         scales_of(packets_in_, bucket), stride / sizeof(float), R, n, 1.0f / (float)R, stream_);
    }
    // -z 0: the same mean plus the server side's residual, compressed again into this rank's packet of
    // packets_out_ for the all-gather (the residual keeps what that dropped).
    void average_and_compress(int bucket) {
        const size_t n = buckets_.chunk(bucket), stride = packet_bytes(bucket);
        const int R = buckets_.num_ranks;
        uint8_t* mine = packets_out_ + rank_ * stride;
        float* residual = server_residual_ + shard_offset(bucket);
        if (method_ == GradCompression::INT8) {
            int8_sum_requantise(reinterpret_cast<int8_t*>(mine), scales_of(mine, bucket), residual, nullptr,
                                reinterpret_cast<int8_t*>(packets_in_), stride, scales_of(packets_in_, bucket),
                                stride / sizeof(float), R, n, 1.0f / (float)R, stream_);
        } else {
            average(average_, bucket);
            compress(mine, residual, average_, bucket);
        }
    }
    void decompress(float* out, uint8_t* packet, int bucket) {
        const size_t n = buckets_.chunk(bucket);
        if (method_ == GradCompression::INT8)
            int8_dequantise(out, reinterpret_cast<int8_t*>(packet), scales_of(packet, bucket), n, stream_);
        else
            sign_decompress(out, reinterpret_cast<uint32_t*>(packet), scales_of(packet, bucket), n, stream_);
    }

    void reduce_blockwise(float* grads, int bucket) {
        const int R = buckets_.num_ranks;
        const size_t chunk = buckets_.chunk(bucket), stride = packet_bytes(bucket);
        float* residual = residual_ + buckets_.buckets[bucket].offset;
        for (int k = 0; k < R; k++) compress(packets_out_ + k * stride, residual + k * chunk, grads + k * chunk, bucket);
        exchange_packets(bucket);
        if (!whole_) {  // -z 1: this rank's chunk is all it needs
            average(grads + rank_ * chunk, bucket);
            return;
        }
        average_and_compress(bucket);
        {
            HookedCollective timed(hook_, CollectiveKind::ALL_GATHER, (double)R * stride, R, stream_);
            NCCL_CHECK(ncclAllGather(packets_out_ + rank_ * stride, packets_out_, stride, ncclUint8, comm_, stream_));
        }
        for (int k = 0; k < R; k++) decompress(grads + k * chunk, packets_out_ + k * stride, bucket);
    }
    // Packet k of packets_out_ to rank k, every rank's packet of this rank's chunk into packets_in_
    // (in rank order; its own copied).
    void exchange_packets(int bucket) {
        const int R = buckets_.num_ranks;
        const size_t stride = packet_bytes(bucket);
        CUDA_CHECK(cudaMemcpyAsync(packets_in_ + rank_ * stride, packets_out_ + rank_ * stride, stride,
                                   cudaMemcpyDeviceToDevice, stream_));
        HookedCollective timed(hook_, CollectiveKind::ALL_TO_ALL, (double)R * stride, R, stream_);
        NCCL_CHECK(ncclGroupStart());
        for (int k = 0; k < R; k++) {
            if (k == rank_) continue;
            NCCL_CHECK(ncclSend(packets_out_ + k * stride, stride, ncclUint8, k, comm_, stream_));
            NCCL_CHECK(ncclRecv(packets_in_ + k * stride, stride, ncclUint8, k, comm_, stream_));
        }
        NCCL_CHECK(ncclGroupEnd());
    }
    size_t shard_offset(int bucket) const {
        size_t at = 0;
        for (int b = 0; b < bucket; b++) at += buckets_.chunk(b);
        return at;
    }

    // ---- PowerSGD
    // Which of each bucket's segments are sent as factors, and where their P's and Q's go.
    void plan_matrices() {
        matrices_.resize(buckets_.buckets.size());
        for (int b = 0; b < (int)buckets_.buckets.size(); b++) {
            const ParamBucket& bucket = buckets_.buckets[b];
            BucketMatrices& m = matrices_[b];
            m.q_first = q_total_;
            for (int i = bucket.first_segment; i < bucket.first_segment + bucket.segment_count; i++) {
                const ParamSegment& s = buckets_.segments[i];
                const size_t offset = s.device_offset - bucket.offset;
                // A weight matrix (whole rows of it) as rows × cols; anything else is sent whole.
                const size_t cols = buckets_.table.spec(s.tensor).matrix_row_length();
                const TensorShape shape = {cols && s.length % cols == 0 ? s.length / cols : 1, cols ? cols : s.length};
                if (powersgd_compresses(shape, r_)) {
                    m.compressed.push_back({offset, (int)shape.rows, (int)shape.cols, m.p_length, q_total_});
                    m.p_length += shape.rows * r_;
                    q_total_ += shape.cols * r_;
                } else {
                    m.sent_whole.push_back({offset, s.length});
                }
            }
            m.q_length = q_total_ - m.q_first;
            max_p_ = std::max(max_p_, m.p_length);
        }
    }
    // Q's starting values: standard normal, from a fixed seed (the same on every rank), by matrix.
    std::vector<float> initial_q() const {
        std::vector<float> q(q_total_);
        uint64_t state = 0x5eed5eedull;
        auto next = [&] {  // splitmix64 to (0, 1)
            uint64_t z = (state += 0x9e3779b97f4a7c15ull);
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            return ((z ^ (z >> 31)) >> 11) * 0x1.0p-53 + 0x1.0p-54;
        };
        for (size_t i = 0; i < q.size(); i += 2) {  // Box-Muller, two at a time
            const double radius = std::sqrt(-2.0 * std::log(next())), angle = 6.283185307179586 * next();
            q[i] = (float)(radius * std::cos(angle));
            if (i + 1 < q.size()) q[i + 1] = (float)(radius * std::sin(angle));
        }
        return q;
    }

    void reduce_powersgd(float* grads, int bucket) {
        const int R = buckets_.num_ranks;
        const BucketMatrices& m = matrices_[bucket];
        float* residual = residual_ + buckets_.buckets[bucket].offset;
        for (const Matrix& a : m.compressed) {
            float* M = grads + a.offset;
            error_feedback_add(M, M, residual + a.offset, (size_t)a.rows * a.cols, stream_);
            powersgd_project_rows(p_ + a.p_at, M, q_ + a.q_at, a.rows, a.cols, r_, stream_);
        }
        if (m.p_length > 0) {
            {
                HookedCollective timed(hook_, CollectiveKind::ALL_REDUCE, (double)m.p_length * sizeof(float), R, stream_);
                NCCL_CHECK(ncclAllReduce(p_, p_, m.p_length, ncclFloat32, ncclAvg, comm_, stream_));
            }
            for (const Matrix& a : m.compressed) {
                powersgd_orthogonalise(p_ + a.p_at, a.rows, r_, stream_);
                powersgd_project_columns(q_ + a.q_at, grads + a.offset, p_ + a.p_at, a.rows, a.cols, r_, stream_);
            }
            {
                HookedCollective timed(hook_, CollectiveKind::ALL_REDUCE, (double)m.q_length * sizeof(float), R, stream_);
                NCCL_CHECK(ncclAllReduce(q_ + m.q_first, q_ + m.q_first, m.q_length, ncclFloat32, ncclAvg, comm_,
                                         stream_));
            }
            for (const Matrix& a : m.compressed) {
                float* M = grads + a.offset;
                powersgd_reconstruct(M, residual + a.offset, M, p_ + a.p_at, q_ + a.q_at, a.rows, a.cols, r_, stream_);
            }
        }
        if (m.sent_whole.empty()) return;
        size_t whole = 0;
        for (const Segment& s : m.sent_whole) whole += s.length;
        HookedCollective timed(hook_, CollectiveKind::ALL_REDUCE, (double)whole * sizeof(float), R, stream_);
        NCCL_CHECK(ncclGroupStart());
        for (const Segment& s : m.sent_whole)
            NCCL_CHECK(ncclAllReduce(grads + s.offset, grads + s.offset, s.length, ncclFloat32, ncclAvg, comm_, stream_));
        NCCL_CHECK(ncclGroupEnd());
    }

    const ParamBuckets& buckets_;
    GradCompression method_;
    int r_, rank_;
    bool whole_;
    ncclComm_t comm_ = nullptr;
    cudaStream_t stream_ = nullptr;
    CollectiveHook* hook_ = nullptr;
    size_t max_packet_ = 0, max_chunk_ = 0, shard_ = 0;
    std::vector<BucketMatrices> matrices_;
    size_t max_p_ = 0, q_total_ = 0;

    float* residual_ = nullptr;         // the worker side's error feedback, one per gradient element
    uint8_t* packets_out_ = nullptr;    // int8, sign: R packets compressed here (then, -z 0, gathered)
    uint8_t* packets_in_ = nullptr;     // int8, sign: every rank's packet of this rank's chunk
    float* server_residual_ = nullptr;  // int8, sign under -z 0: the second compression's error feedback
    float* average_ = nullptr;          // sign under -z 0: this rank's chunk averaged, before compression
    float* p_ = nullptr;                // PowerSGD: the P's of the bucket being reduced
    float* q_ = nullptr;                // PowerSGD: every matrix's Q (warm-started)
};
