// The decode attention kernel (kernels/decode_attention.h), emulated (bf16 and fp32) and, built by
// nvcc, on a GPU: against a double-precision attention over a cache written here, at multi-head
// (KV = NH, GPT-2's), grouped-query (2 and 4 query heads per key/value head) and multi-query (one
// key/value head) shapes, head sizes that fill the block, leave threads idle or take all of them as
// one group, and positions at the start, middle and end of the cache. The cache from the new position
// on is poisoned with NaN (a read of it shows), and afterwards must be the old one with the new
// token's keys and values at that position, bit for bit.
#include "kernels/decode_attention.h"

#include <cmath>
#include <tuple>
#include <vector>

#include "test/kernels/kernel_test.h"

namespace {

// Attention of the new token (qkv of one position) over cache rows 0..pos, in double: query head h
// reads key/value head h / (NH/KV).
std::vector<double> reference_attention(const std::vector<float>& qkv, const std::vector<float>& K,
                                        const std::vector<float>& V, int pos, int NH, int KV, int HS,
                                        int capacity) {
    std::vector<double> out((size_t)NH * HS);
    for (int h = 0; h < NH; h++) {
        const int kv = h / (NH / KV);
        auto key = [&](int j, int d) {
            return j == pos ? qkv[(NH + kv) * HS + d] : K[((size_t)kv * capacity + j) * HS + d];
        };
        auto value = [&](int j, int d) {
            return j == pos ? qkv[(NH + KV + kv) * HS + d] : V[((size_t)kv * capacity + j) * HS + d];
        };
        std::vector<double> p(pos + 1);
        double max_score = -1e300, sum = 0;
        for (int j = 0; j <= pos; j++) {
            double dot = 0;
            for (int d = 0; d < HS; d++) dot += (double)qkv[h * HS + d] * key(j, d);
            p[j] = dot / std::sqrt((double)HS);
            max_score = std::max(max_score, p[j]);
        }
        for (double& v : p) sum += v = std::exp(v - max_score);
        for (int j = 0; j <= pos; j++)
            for (int d = 0; d < HS; d++) out[h * HS + d] += p[j] / sum * value(j, d);
    }
    return out;
}

void check_decode_attention(int NH, int KV, int HS, int capacity, int pos) {
    const int Cq = NH * HS, Ckv = KV * HS;
    const size_t cache = (size_t)KV * capacity * HS;
    const std::vector<float> qkv = round_to_floatX(random_floats(Cq + 2 * Ckv, 1 + pos, -2.0f, 2.0f));
    std::vector<float> K = round_to_floatX(random_floats(cache, 2 + pos));
    std::vector<float> V = round_to_floatX(random_floats(cache, 3 + pos));
    // Rows from pos on hold NaN: the kernel must never read a cache row at or beyond pos.
    for (int kv = 0; kv < KV; kv++)
        for (size_t i = ((size_t)kv * capacity + pos) * HS; i < (size_t)(kv + 1) * capacity * HS; i++)
            K[i] = V[i] = NAN;
    floatX *d_qkv = device_floatX(qkv), *d_K = device_floatX(K), *d_V = device_floatX(V);
    floatX* d_out = device_poisoned<floatX>(Cq);
    // The caches afterwards: as before, with the new token's keys and values at row pos.
    std::vector<floatX> K_expected = host_copy_of(d_K, cache), V_expected = host_copy_of(d_V, cache);
    for (int kv = 0; kv < KV; kv++)
        for (int d = 0; d < HS; d++) {
            K_expected[((size_t)kv * capacity + pos) * HS + d] = host_to_floatX(qkv[Cq + kv * HS + d]);
            V_expected[((size_t)kv * capacity + pos) * HS + d] = host_to_floatX(qkv[Cq + Ckv + kv * HS + d]);
        }
    decode_attention_forward(d_out, d_K, d_V, d_qkv, pos, NH, KV, HS, capacity, 0);
    const std::vector<float> out = host_floats_of(d_out, Cq);
    const std::vector<double> ref = reference_attention(qkv, K, V, pos, NH, KV, HS, capacity);
    const std::vector<float> ref_f(ref.begin(), ref.end());
    const std::string shape = tst::format("NH=%d KV=%d HS=%d pos=%d", NH, KV, HS, pos);
    CHECK_CLOSE(out, ref_f, KERNEL_TOLERANCE, shape.c_str());
    CHECK_MSG(bitwise_equal(host_copy_of(d_K, cache).data(), K_expected.data(), cache * sizeof(floatX)) &&
                  bitwise_equal(host_copy_of(d_V, cache).data(), V_expected.data(), cache * sizeof(floatX)),
              "%s: the caches are not the old ones with the new row at pos", shape.c_str());
    for (floatX* p : {d_qkv, d_K, d_V, d_out}) cudaFree(p);
}

}  // namespace

TEST(decode_attention_matches_reference) {
    // Head sizes that fill the block's 256 threads (32, 64), leave some idle (80: 3 groups), or
    // take all of them as one group (256); positions at the start, middle and end of the cache.
    // Multi-head (KV = NH) and grouped-query: two or four query heads per key/value head, one
    // key/value head for all (multi-query).
    for (const auto& [NH, KV, HS] : std::vector<std::tuple<int, int, int>>{
             {4, 4, 32}, {2, 2, 64}, {3, 3, 80}, {1, 1, 256}, {4, 2, 32}, {8, 2, 16}, {6, 3, 80}, {4, 1, 64}})
        for (int pos : {0, 1, 33, 69}) check_decode_attention(NH, KV, HS, 70, pos);
    CHECK(decode_attention_shape_error(70, 4, 4, 32, 70) != nullptr);
    CHECK(decode_attention_shape_error(0, 1, 1, 257, 70) != nullptr);
    CHECK(decode_attention_shape_error(0, 1, 1, 64, 20000) != nullptr);
    CHECK(decode_attention_shape_error(0, 6, 4, 32, 70) != nullptr);  // KV does not divide NH
    CHECK(decode_attention_shape_error(0, 4, 0, 32, 70) != nullptr);
    CHECK(decode_attention_shape_error(0, 6, 2, 32, 70) == nullptr);
}

