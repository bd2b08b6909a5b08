// The optimizer kernels. AdamW (kernels/adamw.h) against cpu/adamw.h over several steps (with and
// without fp32 master weights, with weight decay and grad_scale ≠ 1), the stochastic rounding (exact
// on representable values, unbiased), slices updated separately giving the same bits as the whole,
// unaligned arrays, n = 1, bitwise determinism, 64-bit index arithmetic, and the multi-tensor form.
// LAMB and LARS (kernels/layer_adaptive.h) against a double-precision reference
// (test/kernels/layer_adaptive_reference.h) step by step, and bitwise across plans, runs, alignments
// and a replayed CUDA graph.
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/adamw.h"
#include "kernels/adamw.h"
#include "kernels/global_norm.h"
#include "kernels/layer_adaptive.h"
#include "test/kernels/kernel_test.h"
#include "test/kernels/layer_adaptive_reference.h"

namespace {

struct Hyper {
    float lr = 3e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f, grad_scale = 0.7f;
    uint32_t seed = 1234;
};

// Host state of one slice and its device copies.
struct State {
    size_t n;
    std::vector<float> params, master, m, v;  // params: floatX values as floats
    bool with_master;
};
struct DeviceState {
    floatX* params = nullptr;
    float *master = nullptr, *m = nullptr, *v = nullptr;
};
DeviceState to_device(const State& s) {
    DeviceState d;
    d.params = device_floatX(s.params);
    d.master = s.with_master ? device_copy_of(s.master) : nullptr;
    d.m = device_copy_of(s.m);
    d.v = device_copy_of(s.v);
    return d;
}
void free_device(DeviceState& d) {
    CUDA_CHECK(cudaFree(d.params));
    if (d.master) CUDA_CHECK(cudaFree(d.master));
    CUDA_CHECK(cudaFree(d.m));
    CUDA_CHECK(cudaFree(d.v));
}
// m and v moved one float past a 16-byte boundary (fresh zeroed buffers): runs then take the
// element-by-element path. unshift_moments gives free_device the buffers back.
struct MomentBuffers {
    float *m = nullptr, *v = nullptr;
};
MomentBuffers shift_moments_off_boundary(DeviceState& d, size_t n) {
    const MomentBuffers buffers{device_copy_of(std::vector<float>(n + 1, 0.0f)),
                                device_copy_of(std::vector<float>(n + 1, 0.0f))};
    CUDA_CHECK(cudaFree(d.m));
    CUDA_CHECK(cudaFree(d.v));
    d.m = buffers.m + 1;
    d.v = buffers.v + 1;
    return buffers;
}
void unshift_moments(DeviceState& d, const MomentBuffers& buffers) {
    if (buffers.m == nullptr) return;
    d.m = buffers.m;
    d.v = buffers.v;
}
State from_device(const DeviceState& d, size_t n, bool with_master) {
    State s{n, host_floats_of(d.params, n), {}, host_copy_of(d.m, n), host_copy_of(d.v, n), with_master};
    if (with_master) s.master = host_copy_of(d.master, n);
    return s;
}

// Fresh parameters (with master weights: the fp32 master, and params its floatX rounding), m = v = 0.
State initial_state(size_t n, bool with_master, unsigned seed) {
    State s{n,          {}, random_floats(n, seed), std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f),
            with_master};
    s.params = round_to_floatX(s.master);
    if (!with_master) s.master.clear();
    return s;
}

void gpu_step(DeviceState& d, const floatX* grads, size_t n, size_t global_offset, const Hyper& h, int step) {
    adamw_update(d.params, d.master, d.m, d.v, grads, n, global_offset, h.lr, h.beta1, h.beta2, h.eps,
                 h.weight_decay, h.grad_scale, step, h.seed, 0);
    CUDA_CHECK(cudaGetLastError());
}

// Distance between neighbouring bf16 values around x (the rounding gap), for finite non-zero x.
double bf16_gap(float x) {
    int exponent;
    std::frexp(std::fabs(x), &exponent);  // |x| in [2^(e−1), 2^e)
    return std::ldexp(1.0, exponent - 1 - 7);
}
// True when stored is x rounded down or up to a bf16 neighbour (x itself when representable).
bool is_bf16_neighbour(float stored, float x) {
    if (stored == x) return true;
    uint32_t bits;
    memcpy(&bits, &x, 4);
    const uint32_t toward_zero_bits = bits & 0xffff0000u;
    float toward_zero, away;
    memcpy(&toward_zero, &toward_zero_bits, 4);
    const uint32_t away_bits = toward_zero_bits + 0x10000u;
    memcpy(&away, &away_bits, 4);
    return stored == toward_zero || stored == away;
}

// Several steps of the kernel against the reference, all from the same floatX-rounded gradients.
// Without master weights (bf16) the stochastic rounding errors of the steps add up: many elements
// keep ‖error‖/‖ref‖ near 0.4%.
void check_steps_against_reference(size_t n, bool with_master, unsigned seed, int steps = 4) {
    const Hyper h;
    State ref = initial_state(n, with_master, seed);
    DeviceState d = to_device(ref);
    // The reference updates fp32 values: the master when there is one, else the floatX params.
    std::vector<float>& ref_p = with_master ? ref.master : ref.params;
    for (int step = 1; step <= steps; step++) {
        const std::vector<float> grads = round_to_floatX(random_floats(n, seed + 100 * step, -2.0f, 2.0f));
        floatX* d_grads = device_floatX(grads);
        gpu_step(d, d_grads, n, 0, h, step);
        CUDA_CHECK(cudaFree(d_grads));
        adamw_update(ref_p.data(), ref.m.data(), ref.v.data(), grads.data(), n, h.lr, h.beta1, h.beta2, h.eps,
                     h.weight_decay, h.grad_scale, step);
    }
    const State out = from_device(d, n, with_master);
    CHECK_CLOSE(out.m, ref.m, 1e-5, "m");
    CHECK_CLOSE(out.v, ref.v, 1e-5, "v");
    if (with_master) {
        CHECK_CLOSE(out.master, ref.master, 1e-5, "master weights");
        // params: the master rounded (stochastically in bf16, exactly in fp32).
        for (size_t i = 0; i < n; i++) {
#ifdef ENABLE_FP32
            CHECK_MSG(out.params[i] == out.master[i], "params[%zu] = %.9g is not the master %.9g", i,
                      out.params[i], out.master[i]);
#else
            CHECK_MSG(is_bf16_neighbour(out.params[i], out.master[i]),
                      "params[%zu] = %.9g is not a bf16 neighbour of the master %.9g", i, out.params[i],
                      out.master[i]);
#endif
        }
        CHECK_CLOSE(out.params, ref.master, KERNEL_TOLERANCE, "params vs reference master");
    } else {
        CHECK_CLOSE(out.params, ref.params, KERNEL_TOLERANCE, "params");
    }
    free_device(d);
}

}  // namespace

TEST(adamw_with_master_weights_matches_reference) { check_steps_against_reference(10007, true, 1); }
TEST(adamw_without_master_weights_matches_reference) { check_steps_against_reference(10007, false, 2); }
TEST(adamw_single_element) {
    check_steps_against_reference(1, true, 3);
    // One step: a lone bf16 parameter is within one rounding gap (< 1e-2 relative) of the reference,
    // while several steps of stochastic rounding could add up past that.
    check_steps_against_reference(1, false, 4, 1);
}

// Without master weights each step rounds the fp32 result to a bf16 neighbour: check one step exactly
// against the reference started from the same params, and that the roundings do not drift one way.
TEST(adamw_without_master_rounds_to_a_neighbour_each_step) {
    const Hyper h;
    const size_t n = 20011;
    State s = initial_state(n, false, 5);
    DeviceState d = to_device(s);
    const std::vector<float> grads = round_to_floatX(random_floats(n, 6, -2.0f, 2.0f));
    floatX* d_grads = device_floatX(grads);
    gpu_step(d, d_grads, n, 0, h, 1);
    std::vector<float> ref_p = s.params;
    adamw_update(ref_p.data(), s.m.data(), s.v.data(), grads.data(), n, h.lr, h.beta1, h.beta2, h.eps,
                 h.weight_decay, h.grad_scale, 1);
    const std::vector<float> out = host_floats_of(d.params, n);
    double drift = 0, gaps = 0;
    size_t outside = 0;
    for (size_t i = 0; i < n; i++) {
#ifdef ENABLE_FP32
        if (std::fabs(out[i] - ref_p[i]) > 1e-6 * std::fabs(ref_p[i])) outside++;
#else
        if (!is_bf16_neighbour(out[i], ref_p[i])) outside++;  // fp32 last-bit differences may cross
        drift += std::fabs(out[i]) - std::fabs(ref_p[i]);     // a bias toward or away from zero
        gaps += bf16_gap(ref_p[i]);
#endif
    }
    CHECK_MSG(outside <= n / 1000, "%zu of %zu params are not a neighbour of the reference", outside, n);
    CHECK_MSG(std::fabs(drift) <= 0.03 * gaps, "rounding drifts: mean error %.3g gaps",
              drift / (gaps + 1e-30));
    CUDA_CHECK(cudaFree(d_grads));
    free_device(d);
}

// A model updated in two slices (global_offset = start of the second) gives the same bits as one
// call over the whole: shards agree. Split points: aligned, and not (head elements before the vectors).
TEST(adamw_slices_match_the_whole_bitwise) {
    const Hyper h;
    const size_t n = 5003;
    for (bool with_master : {true, false}) {
        for (size_t split : {(size_t)1024, (size_t)1003, (size_t)3}) {
            const State s = initial_state(n, with_master, 7);
            const std::vector<float> grads = round_to_floatX(random_floats(n, 8, -2.0f, 2.0f));
            floatX* d_grads = device_floatX(grads);
            DeviceState whole = to_device(s), parts = to_device(s);
            for (int step = 1; step <= 2; step++) {
                gpu_step(whole, d_grads, n, 0, h, step);
                adamw_update(parts.params, parts.master, parts.m, parts.v, d_grads, split, 0, h.lr, h.beta1,
                             h.beta2, h.eps, h.weight_decay, h.grad_scale, step, h.seed, 0);
                adamw_update(parts.params + split, with_master ? parts.master + split : nullptr,
                             parts.m + split, parts.v + split, d_grads + split, n - split, split, h.lr,
                             h.beta1, h.beta2, h.eps, h.weight_decay, h.grad_scale, step, h.seed, 0);
            }
            const State a = from_device(whole, n, with_master), b = from_device(parts, n, with_master);
            CHECK_MSG(bitwise_equal(a.params.data(), b.params.data(), n * 4), "params differ (split %zu)",
                      split);
            CHECK(bitwise_equal(a.m.data(), b.m.data(), n * 4) &&
                  bitwise_equal(a.v.data(), b.v.data(), n * 4));
            if (with_master) CHECK(bitwise_equal(a.master.data(), b.master.data(), n * 4));
            free_device(whole);
            free_device(parts);
            CUDA_CHECK(cudaFree(d_grads));
        }
    }
}

// m and v one float past a 16-byte boundary (unlike params): the element-by-element path, same bits.
TEST(adamw_unaligned_arrays_give_the_same_bits) {
    const Hyper h;
    const size_t n = 3001;
    const State s = initial_state(n, true, 9);
    const std::vector<float> grads = round_to_floatX(random_floats(n, 10, -2.0f, 2.0f));
    floatX* d_grads = device_floatX(grads);
    DeviceState aligned = to_device(s), shifted = to_device(s);
    std::vector<float> padded(n + 1, 0.0f);
    float* m_buffer = device_copy_of(padded);
    float* v_buffer = device_copy_of(padded);
    CUDA_CHECK(cudaMemcpy(m_buffer + 1, s.m.data(), n * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(v_buffer + 1, s.v.data(), n * 4, cudaMemcpyHostToDevice));
    for (int step = 1; step <= 2; step++) {
        gpu_step(aligned, d_grads, n, 0, h, step);
        adamw_update(shifted.params, shifted.master, m_buffer + 1, v_buffer + 1, d_grads, n, 0, h.lr, h.beta1,
                     h.beta2, h.eps, h.weight_decay, h.grad_scale, step, h.seed, 0);
    }
    const State a = from_device(aligned, n, true);
    const std::vector<float> params = host_floats_of(shifted.params, n),
                             master = host_copy_of(shifted.master, n);
    const std::vector<float> m = host_copy_of(m_buffer + 1, n), v = host_copy_of(v_buffer + 1, n);
    CHECK(bitwise_equal(a.params.data(), params.data(), n * 4) &&
          bitwise_equal(a.master.data(), master.data(), n * 4));
    CHECK(bitwise_equal(a.m.data(), m.data(), n * 4) && bitwise_equal(a.v.data(), v.data(), n * 4));
    CUDA_CHECK(cudaFree(m_buffer));
    CUDA_CHECK(cudaFree(v_buffer));
    CUDA_CHECK(cudaFree(d_grads));
    free_device(aligned);
    free_device(shifted);
}

// Two runs give the same bits; another seed gives other roundings (bf16), the same master.
TEST(adamw_is_deterministic_and_uses_the_seed) {
    Hyper h;
    const size_t n = 4099;
    const State s = initial_state(n, true, 11);
    const std::vector<float> grads = round_to_floatX(random_floats(n, 12, -2.0f, 2.0f));
    floatX* d_grads = device_floatX(grads);
    std::vector<State> results;
    for (uint32_t seed : {1u, 1u, 2u}) {
        h.seed = seed;
        DeviceState d = to_device(s);
        for (int step = 1; step <= 3; step++) gpu_step(d, d_grads, n, 0, h, step);
        results.push_back(from_device(d, n, true));
        free_device(d);
    }
    CHECK(bitwise_equal(results[0].params.data(), results[1].params.data(), n * 4));
    CHECK(bitwise_equal(results[0].master.data(), results[1].master.data(), n * 4));
    CHECK(bitwise_equal(results[0].master.data(), results[2].master.data(), n * 4));
#ifndef ENABLE_FP32
    CHECK(!bitwise_equal(results[0].params.data(), results[2].params.data(), n * 4));
#endif
    CUDA_CHECK(cudaFree(d_grads));
}

// ---- stochastic rounding through a kernel (the device code), every random_bits given.
__global__ void stochastic_round_kernel(__nv_bfloat16* out, const float* x, const uint32_t* bits, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = stochastic_round_bf16(x[i], bits[i]);
}
std::vector<float> stochastic_round_on_device(const std::vector<float>& x,
                                              const std::vector<uint32_t>& bits) {
    float* d_x = device_copy_of(x);
    uint32_t* d_bits = device_copy_of(bits);
    __nv_bfloat16* d_out = device_poisoned<__nv_bfloat16>(x.size());
    LAUNCH(stochastic_round_kernel, ceil_div(x.size(), 256), 256, 0, 0, d_out, d_x, d_bits, (int)x.size());
    CUDA_CHECK(cudaGetLastError());
    const std::vector<__nv_bfloat16> out = host_copy_of(d_out, x.size());
    std::vector<float> result(x.size());
    for (size_t i = 0; i < x.size(); i++) result[i] = __bfloat162float(out[i]);
    CUDA_CHECK(cudaFree(d_x));
    CUDA_CHECK(cudaFree(d_bits));
    CUDA_CHECK(cudaFree(d_out));
    return result;
}

TEST(stochastic_rounding_keeps_representable_values) {
    std::vector<float> x = {0.0f, -0.0f, 1.0f, -2.5f, 3.0e38f, INFINITY, -INFINITY, 1e-40f};
    for (float r : random_floats(4000, 13, -100.0f, 100.0f))
        x.push_back(__bfloat162float(__float2bfloat16(r)));
    x[7] = __bfloat162float(__float2bfloat16(x[7]));  // a subnormal bf16
    x[4] = __bfloat162float(__float2bfloat16(x[4]));
    std::vector<uint32_t> bits(x.size());
    for (size_t i = 0; i < x.size(); i++) bits[i] = hash_random_bits(99, i) | (i % 2 ? 0xffffu : 0u);
    const std::vector<float> out = stochastic_round_on_device(x, bits);
    CHECK(bitwise_equal(out.data(), x.data(), x.size() * 4));
    // NaN stays NaN.
    const std::vector<float> nan = stochastic_round_on_device({NAN}, {0xffffffffu});
    CHECK(std::isnan(nan[0]));
}

TEST(stochastic_rounding_is_unbiased) {
    const std::vector<float> values = {1.0f + 1.0f / 3 * (1.0f / 128), -3.14159265f, 1.0e-3f, 7.77e5f,
                                       -2.0e-20f};
    for (float x : values) {
        // Every one of the 2^16 dithers once: the mean is x exactly (in double).
        std::vector<float> xs(65536, x);
        std::vector<uint32_t> every(65536), hashed(65536);
        for (uint32_t i = 0; i < 65536; i++) {
            every[i] = i;
            hashed[i] = hash_random_bits(adamw_random_key(5, 1), i);
        }
        const std::vector<float> all = stochastic_round_on_device(xs, every);
        double sum = 0;
        for (float r : all) {
            CHECK(is_bf16_neighbour(r, x));
            sum += r;
        }
        CHECK_MSG(sum / 65536 == (double)x, "mean of all roundings of %.9g is %.12g", x, sum / 65536);
        // The hashed bits the optimizer uses: the mean within 6 standard errors (≤ gap/2/256 each).
        const std::vector<float> sampled = stochastic_round_on_device(xs, hashed);
        double sampled_sum = 0;
        for (float r : sampled) sampled_sum += r;
        const double tolerance = 6 * bf16_gap(x) * 0.5 / 256;
        CHECK_MSG(std::fabs(sampled_sum / 65536 - x) <= tolerance,
                  "mean of hashed roundings of %.9g off by %.3g", x, sampled_sum / 65536 - x);
    }
}

// Index arithmetic past 2^31 and 2^32 elements, on the host (no such arrays are allocated).
TEST(adamw_index_arithmetic_is_64_bit) {
    ElementGroups split;
    split.n = (size_t)6e9;
    split.head = 5;
    split.groups = (split.n - 5) / kGroupSize;
    CHECK(split.group_start(700000000) == (size_t)5 + (size_t)700000000 * 8);
    CHECK(split.tail_start() == 5 + split.groups * 8 && split.tail_start() <= split.n);
    CHECK(flat_thread_index(20000000u, 256u, 255u) == (size_t)20000000 * 256 + 255);
    CHECK(blocks_for(split.threads(), 256) == (split.groups + 1 + 255) / 256);
    // A slice far into a 1.5B-parameter model draws bits from its global index.
    CHECK(hash_random_bits(7, (size_t)1 << 33) != hash_random_bits(7, 0));
}

// ---- multi-tensor update: one launch over a table of runs, against adamw_update run by run (bitwise)
// and against the CPU reference (cpu/adamw.h, per run with its weight decay).
namespace {

struct RunSpec {
    size_t offset, n;
    bool decay;
};
// Runs inside one buffer, as the trainer's tensors lie in its parameter buffer: starting on and off
// 16-byte boundaries, one of 1 element, one of fewer than a group, an empty one, and a gap (elements
// no run covers, which must keep their values).
const std::vector<RunSpec> kRuns = {{0, 1024, true},  {1024, 3, false}, {1027, 4001, true}, {5028, 0, true},
                                    {5028, 1, false}, {5033, 2050, false}, {7083, 7, true}, {7090, 517, true}};
constexpr size_t kRunsTotal = 7607;

void check_multi_tensor(bool with_master, bool unaligned_state) {
    Hyper h;
    const size_t n = kRunsTotal;
    const State s = initial_state(n, with_master, 21);
    // The per-run calls (reference of the bits), and the multi-tensor update.
    DeviceState per_run = to_device(s), multi = to_device(s);
    // Optionally m and v one float off a boundary: those runs take the element-by-element path.
    const MomentBuffers shifted = unaligned_state ? shift_moments_off_boundary(multi, n) : MomentBuffers{};
    float* grad_scale = device_poisoned<float>(1);
    float* norm_squared = device_poisoned<float>(1);
    std::vector<AdamWRun> runs;
    for (const RunSpec& r : kRuns)
        runs.push_back({multi.params + r.offset, with_master ? multi.master + r.offset : nullptr,
                        multi.m + r.offset, multi.v + r.offset, nullptr, r.n, r.offset, r.decay});
    std::vector<float> ref_p = with_master ? s.master : s.params, ref_m = s.m, ref_v = s.v;
    for (int step = 1; step <= 3; step++) {
        // Gradients large enough that the clipping bites on some steps (norm² = 4.0 · n / 3 · scale²).
        const float spread = step == 2 ? 0.001f : 2.0f;
        const std::vector<float> grads = round_to_floatX(random_floats(n, 30 + step, -spread, spread));
        floatX* d_grads = device_floatX(grads);
        double norm2 = 0;
        for (float g : grads) norm2 += (double)g * g;
        const float clip = 1.0f;
        const float host_scale = global_norm_clip_scale_host((float)norm2, clip);
        CUDA_CHECK(cudaMemcpy(norm_squared, std::vector<float>{(float)norm2}.data(), 4, cudaMemcpyHostToDevice));
        global_norm_clip_scale(grad_scale, norm_squared, clip, 0);
        for (AdamWRun& r : runs) r.grads = d_grads + (r.params - multi.params);
        AdamWMultiTensor plan = adamw_multi_tensor_plan(runs.data(), (int)runs.size());
        CHECK(plan.runs == (int)kRuns.size() - 1);  // the empty run has no entry
#ifdef EMU_CUDA
        emu::reset_counters();
#endif
        adamw_update_multi_tensor(plan, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, grad_scale, step, h.seed,
                                  0);
#ifdef EMU_CUDA
        CHECK_MSG(emu::launch_count() == 1 && emu::host_sync_count() == 0,
                  "the update took %llu launches and %llu host synchronisations", emu::launch_count(),
                  emu::host_sync_count());
#endif
        adamw_multi_tensor_free(plan);
        for (const RunSpec& r : kRuns) {
            adamw_update(per_run.params + r.offset, with_master ? per_run.master + r.offset : nullptr,
                         per_run.m + r.offset, per_run.v + r.offset, d_grads + r.offset, r.n, r.offset, h.lr,
                         h.beta1, h.beta2, h.eps, r.decay ? h.weight_decay : 0.0f, host_scale, step, h.seed, 0);
            // The reference updates fp32 values: the master when there is one, else the floatX params.
            adamw_update(ref_p.data() + r.offset, ref_m.data() + r.offset, ref_v.data() + r.offset,
                         grads.data() + r.offset, r.n, h.lr, h.beta1, h.beta2, h.eps,
                         r.decay ? h.weight_decay : 0.0f, host_scale, step);
        }
        CUDA_CHECK(cudaFree(d_grads));
    }
    CHECK_MSG(host_copy_of(grad_scale, 1)[0] == global_norm_clip_scale_host(host_copy_of(norm_squared, 1)[0], 1.0f),
              "device clip scale differs from the host formula");
    const State a = from_device(per_run, n, with_master), b = from_device(multi, n, with_master);
    CHECK_MSG(bitwise_equal(a.params.data(), b.params.data(), n * 4), "params differ from the per-run update");
    CHECK_MSG(bitwise_equal(a.m.data(), b.m.data(), n * 4) && bitwise_equal(a.v.data(), b.v.data(), n * 4),
              "m or v differ from the per-run update");
    if (with_master) CHECK(bitwise_equal(a.master.data(), b.master.data(), n * 4));
    // Elements between runs (the gap [5029, 5033)) are untouched: m stays 0.
    for (size_t i = 5029; i < 5033; i++) CHECK_MSG(b.m[i] == 0.0f && b.params[i] == s.params[i], "gap %zu", i);
    CHECK_CLOSE(b.m, ref_m, 1e-5, "m vs reference");
    CHECK_CLOSE(b.v, ref_v, 1e-5, "v vs reference");
    if (with_master) CHECK_CLOSE(b.master, ref_p, 1e-5, "master vs reference");
    CHECK_CLOSE(b.params, ref_p, KERNEL_TOLERANCE, "params vs reference");
    free_device(per_run);
    unshift_moments(multi, shifted);
    free_device(multi);
    CUDA_CHECK(cudaFree(grad_scale));
    CUDA_CHECK(cudaFree(norm_squared));
}

}  // namespace

TEST(adamw_multi_tensor_matches_per_run_bitwise_with_master) { check_multi_tensor(true, false); }
TEST(adamw_multi_tensor_matches_per_run_bitwise_without_master) { check_multi_tensor(false, false); }
TEST(adamw_multi_tensor_unaligned_state_matches_per_run_bitwise) { check_multi_tensor(true, true); }

// The device clip scale against the host formula, bit for bit, across the threshold.
TEST(global_norm_clip_scale_matches_host_formula) {
    const std::vector<float> squares = {0.0f, 1e-30f, 0.25f, 0.999999f, 1.0f, 1.000001f, 4.0f, 12345.678f,
                                        3.0e38f};
    float* d_square = device_poisoned<float>(1);
    float* d_scale = device_poisoned<float>(1);
    float* d_norm = device_poisoned<float>(1);
    for (float clip : {1.0f, 0.5f})
        for (float sq : squares) {
            CUDA_CHECK(cudaMemcpy(d_square, &sq, 4, cudaMemcpyHostToDevice));
            global_norm_clip_scale(d_scale, d_square, clip, 0, d_norm);
            const float scale = host_copy_of(d_scale, 1)[0], norm = host_copy_of(d_norm, 1)[0];
            const double exact_norm = std::sqrt((double)sq);
            const float expected = exact_norm > clip ? (float)(clip / exact_norm) : 1.0f;
            CHECK_MSG(scale == expected, "norm² %.9g clip %g: scale %.9g, expected %.9g", sq, clip, scale,
                      expected);
            CHECK(norm == (float)exact_norm);
            CHECK(scale == global_norm_clip_scale_host(sq, clip));
        }
    CUDA_CHECK(cudaFree(d_square));
    CUDA_CHECK(cudaFree(d_scale));
    CUDA_CHECK(cudaFree(d_norm));
}

// ---- LAMB and LARS (kernels/layer_adaptive.h): three launches per step over a table of runs, against
// the double-precision reference of test/kernels/layer_adaptive_reference.h, step by step from the
// kernels' own state; and bitwise: one plan per run and two ranks' plans against one plan, a repeated
// run, m and v off a 16-byte boundary (element-by-element path), a CUDA graph replaying the launches.
namespace {

enum class Rule { lamb, lars };

struct SlotSpec {
    bool decay, adapt;
    float weight_scale, grad_scale;  // 0: all zero
};
// Slot 0: small weights (a trust ratio well below 1); 1: three elements; 2: split into two runs, large
// weights and small gradients (a ratio well above 1); 3: one element, no adaptation; 4: zero weights;
// 5 and 6: zero gradients, with and without decay (LAMB's u is then λ·p, or 0); 7: no adaptation,
// fp32 gradients; 8: no run at all (its sums must be 0).
const std::vector<SlotSpec> kSlots = {{true, true, 0.05f, 1.0f}, {false, true, 1.0f, 1.0f}, {true, true, 3.0f, 0.01f},
                                      {false, false, 1.0f, 1.0f}, {true, true, 0.0f, 1.0f}, {true, true, 1.0f, 0.0f},
                                      {false, true, 1.0f, 0.0f},  {true, false, 0.5f, 2.0f}, {true, true, 1.0f, 1.0f}};
constexpr int kFp32GradientSlot = 7;
struct PieceSpec {
    size_t offset, n;
    int slot;
};
// Runs in one buffer, on and off 16-byte boundaries and of odd lengths; slot 3's first run is empty;
// the elements [kGapBegin, kGapEnd) belong to no run and must keep their values; slot 2's second run
// comes last in the table, and each of its runs spans several blocks (2,048 elements a block).
const std::vector<PieceSpec> kPieces = {{0, 1024, 0},   {1024, 3, 1},    {1027, 4501, 2}, {5528, 0, 3},
                                        {5528, 1, 3},   {5533, 2050, 4}, {7583, 517, 5},  {8100, 300, 6},
                                        {8400, 777, 7}, {9177, 5004, 2}};
constexpr size_t kPiecesTotal = 14181, kGapBegin = 5529, kGapEnd = 5533;
constexpr uint32_t kLayerAdaptiveSeed = 77;

// Master weights uniform in ±weight_scale per slot (params their floatX rounding), m = v = 0.
State initial_layer_adaptive_state(bool with_master) {
    State s = initial_state(kPiecesTotal, true, 41);
    for (const PieceSpec& piece : kPieces)
        for (size_t i = piece.offset; i < piece.offset + piece.n; i++) s.master[i] *= kSlots[piece.slot].weight_scale;
    s.params = round_to_floatX(s.master);
    s.with_master = with_master;
    if (!with_master) s.master.clear();
    return s;
}
// Step `step`'s gradients: uniform in ±grad_scale per slot, rounded to floatX but for the fp32 slot.
std::vector<float> layer_adaptive_gradients(int step) {
    const std::vector<float> uniform = random_floats(kPiecesTotal, 50 + step);
    std::vector<float> grads(kPiecesTotal, 0.0f);
    for (const PieceSpec& piece : kPieces)
        for (size_t i = piece.offset; i < piece.offset + piece.n; i++) {
            const float g = uniform[i] * kSlots[piece.slot].grad_scale;
            grads[i] = piece.slot == kFp32GradientSlot ? g : host_from_floatX(host_to_floatX(g));
        }
    return grads;
}

struct Gradients {
    floatX* floatx;
    float* fp32;
};
std::vector<LayerAdaptiveRun> layer_adaptive_runs(const DeviceState& d, const Gradients& grads, Rule rule,
                                                  const std::vector<PieceSpec>& pieces) {
    std::vector<LayerAdaptiveRun> runs;
    for (const PieceSpec& p : pieces) {
        const bool fp32 = p.slot == kFp32GradientSlot;
        AdamWRun tensor{d.params + p.offset, d.master ? d.master + p.offset : nullptr, d.m + p.offset,
                        rule == Rule::lamb ? d.v + p.offset : nullptr, fp32 ? nullptr : grads.floatx + p.offset,
                        p.n, p.offset, kSlots[p.slot].decay, fp32 ? grads.fp32 + p.offset : nullptr};
        runs.push_back({tensor, p.slot, kSlots[p.slot].adapt});
    }
    return runs;
}

void upload_gradients(const Gradients& grads, const std::vector<float>& host) {
    std::vector<floatX> rounded(host.size());
    for (size_t i = 0; i < host.size(); i++) rounded[i] = host_to_floatX(host[i]);
    CUDA_CHECK(cudaMemcpy(grads.floatx, rounded.data(), host.size() * sizeof(floatX), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(grads.fp32, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
}

const LayerAdaptiveHyper kAdaptiveHyper;
AdamWDeviceStep layer_adaptive_device_step(int step) {
    const LayerAdaptiveHyper& h = kAdaptiveHyper;
    return adamw_device_step((float)h.lr, (float)h.beta1, (float)h.beta2, (float)h.weight_decay, (float)h.grad_scale,
                             step, kLayerAdaptiveSeed);
}
void launch_norms(const LayerAdaptivePlan& plan, Rule rule, const AdamWDeviceStep* step, cudaStream_t stream) {
    const LayerAdaptiveHyper& h = kAdaptiveHyper;
    if (rule == Rule::lamb)
        lamb_moments_and_norms(plan, (float)h.beta1, (float)h.beta2, (float)h.eps, step, stream);
    else
        lars_norms(plan, step, stream);
    layer_norms_sum(plan, stream);
}
void launch_apply(const LayerAdaptivePlan& plan, Rule rule, const AdamWDeviceStep* step, cudaStream_t stream) {
    const LayerAdaptiveHyper& h = kAdaptiveHyper;
    if (rule == Rule::lamb)
        lamb_apply(plan, (float)h.eps, step, stream);
    else
        lars_apply(plan, (float)h.momentum, (float)h.trust_coefficient, step, stream);
}

// The sums of several plans added from 0 in plan order, then written back to each: what the trainer's
// all-reduce across ranks does (in some order). Returns the summed vector.
std::vector<float> all_reduce_sums(const std::vector<LayerAdaptivePlan>& plans) {
    const size_t count = 2 * kSlots.size();
    std::vector<float> total(count, 0.0f);
    for (const LayerAdaptivePlan& plan : plans) {
        const std::vector<float> sums = host_copy_of(plan.sums, count);
        for (size_t i = 0; i < count; i++) total[i] += sums[i];
    }
    if (plans.size() > 1)
        for (const LayerAdaptivePlan& plan : plans)
            CUDA_CHECK(cudaMemcpy(plan.sums, total.data(), count * 4, cudaMemcpyHostToDevice));
    return total;
}

std::vector<double> gather(const std::vector<float>& x, const std::vector<size_t>& indices) {
    std::vector<double> out;
    for (size_t i : indices) out.push_back(x[i]);
    return out;
}
std::vector<size_t> slot_indices(int slot) {
    std::vector<size_t> indices;
    for (const PieceSpec& p : kPieces)
        if (p.slot == slot)
            for (size_t i = p.offset; i < p.offset + p.n; i++) indices.push_back(i);
    return indices;
}

// Largest errors seen (printed), the figures the tolerances below are set from.
struct ErrorFigures {
    double state = 0, master = 0, params = 0;  // params: without master only
};

// The step from `before` that the kernels took to `after`, checked slot by slot against the reference.
// Tolerances (relative L2 per slot): m, v, b and the master within 2e-6 (fp32 arithmetic against
// double: a few float roundings per element, plus the trust ratio from fp32 sums of squares; the
// figures seen, printed by each test, are at most 6.2e-7); params without master in the fp32 build
// the same; in bf16, params with master are the master rounded with AdamW's bits, exactly, and without
// master each is within one bf16 gap of the reference (stochastic rounding moves a value to one of its
// two neighbours).
void check_step_against_reference(Rule rule, const State& before, const State& after, const std::vector<float>& grads,
                                  int step, ErrorFigures& figures) {
    const double tolerance = 2e-6;
    for (int slot = 0; slot < (int)kSlots.size(); slot++) {
        const std::vector<size_t> indices = slot_indices(slot);
        if (indices.empty()) continue;
        std::vector<double> p = gather(before.with_master ? before.master : before.params, indices);
        std::vector<double> m = gather(before.m, indices), v = gather(before.v, indices);
        const std::vector<double> g = gather(grads, indices);
        if (rule == Rule::lamb)
            lamb_reference_step(p, m, v, g, kAdaptiveHyper, step, kSlots[slot].decay, kSlots[slot].adapt);
        else
            lars_reference_step(p, m, g, kAdaptiveHyper, kSlots[slot].decay, kSlots[slot].adapt);
        const double m_error = tst::rel_l2_error(gather(after.m, indices).data(), m.data(), m.size());
        const double v_error = rule == Rule::lamb ? tst::rel_l2_error(gather(after.v, indices).data(), v.data(), v.size()) : 0;
        figures.state = std::max(figures.state, std::max(m_error, v_error));
        CHECK_MSG(m_error <= tolerance && v_error <= tolerance, "slot %d step %d: m/b error %.3g, v error %.3g", slot,
                  step, m_error, v_error);
        const std::vector<double> params = gather(after.params, indices);
        if (after.with_master) {
            const std::vector<double> master = gather(after.master, indices);
            const double error = tst::rel_l2_error(master.data(), p.data(), p.size());
            figures.master = std::max(figures.master, error);
            CHECK_MSG(error <= tolerance, "slot %d step %d: master error %.3g", slot, step, error);
            for (size_t k = 0; k < indices.size(); k++) {
#ifdef ENABLE_FP32
                const float expected = (float)master[k];
#else
                const uint64_t key = adamw_random_key(kLayerAdaptiveSeed, step);
                const float expected = __bfloat162float(
                    stochastic_round_bf16((float)master[k], hash_random_bits(key, indices[k])));
#endif
                CHECK_MSG(params[k] == expected, "slot %d step %d: params[%zu] = %.9g, not the master rounded (%.9g)",
                          slot, step, indices[k], params[k], expected);
            }
            continue;
        }
#ifdef ENABLE_FP32
        const double error = tst::rel_l2_error(params.data(), p.data(), p.size());
        figures.params = std::max(figures.params, error);
        CHECK_MSG(error <= tolerance, "slot %d step %d: params error %.3g", slot, step, error);
#else
        for (size_t k = 0; k < indices.size(); k++) {
            const double distance = std::fabs(params[k] - p[k]), gap = bf16_gap((float)p[k]);
            figures.params = std::max(figures.params, distance / gap);
            CHECK_MSG(distance <= gap * (1 + 1e-4), "slot %d step %d: params[%zu] = %.9g, reference %.9g", slot, step,
                      indices[k], params[k], p[k]);
        }
#endif
    }
    // Elements of no run keep their values.
    for (size_t i = kGapBegin; i < kGapEnd; i++)
        CHECK_MSG(after.params[i] == before.params[i] && after.m[i] == before.m[i], "element %zu of no run changed", i);
}

enum class Arrangement {
    one_plan,        // every run in one plan
    plan_per_run,    // each run in a plan of its own, the plans' sums added in the table's order
    two_ranks,       // the runs in two plans as two ranks would hold them, slot 2's two runs apart
    unaligned_state  // one plan, with m and v one float off a 16-byte boundary
};
struct Outcome {
    State state;
    std::vector<std::vector<float>> sums;  // after each step's launch 2 (and the all-reduce)
};

// Three steps from initial_layer_adaptive_state, optionally checked against the reference.
Outcome run_layer_adaptive(Rule rule, bool with_master, Arrangement arrangement, ErrorFigures* figures = nullptr) {
    const size_t n = kPiecesTotal;
    const State initial = initial_layer_adaptive_state(with_master);
    DeviceState d = to_device(initial);
    const MomentBuffers shifted =
        arrangement == Arrangement::unaligned_state ? shift_moments_off_boundary(d, n) : MomentBuffers{};
    Gradients grads{device_poisoned<floatX>(n), device_poisoned<float>(n)};
    std::vector<std::vector<PieceSpec>> groups;
    if (arrangement == Arrangement::plan_per_run) {
        for (const PieceSpec& p : kPieces) groups.push_back({p});
    } else if (arrangement == Arrangement::two_ranks) {
        groups = {std::vector<PieceSpec>(kPieces.begin(), kPieces.begin() + 5),
                  std::vector<PieceSpec>(kPieces.begin() + 5, kPieces.end())};
    } else {
        groups = {kPieces};
    }
    std::vector<LayerAdaptivePlan> plans;
    for (const std::vector<PieceSpec>& group : groups) {
        const std::vector<LayerAdaptiveRun> runs = layer_adaptive_runs(d, grads, rule, group);
        plans.push_back(layer_adaptive_plan(runs.data(), (int)runs.size(), (int)kSlots.size()));
    }
    AdamWDeviceStep* device_step = device_poisoned<AdamWDeviceStep>(1);
    Outcome outcome;
    State before = initial;
    for (int step = 1; step <= 3; step++) {
        const std::vector<float> host_grads = layer_adaptive_gradients(step);
        upload_gradients(grads, host_grads);
        const AdamWDeviceStep values = layer_adaptive_device_step(step);
        CUDA_CHECK(cudaMemcpy(device_step, &values, sizeof values, cudaMemcpyHostToDevice));
#ifdef EMU_CUDA
        emu::reset_counters();
        unsigned long long expected_launches = 0;  // launch 1 where the plan has runs, launch 2 always
        for (const LayerAdaptivePlan& plan : plans) expected_launches += plan.runs > 0 ? 2 : 1;
#endif
        for (const LayerAdaptivePlan& plan : plans) launch_norms(plan, rule, device_step, 0);
#ifdef EMU_CUDA
        CHECK_MSG(emu::launch_count() == expected_launches && emu::host_sync_count() == 0,
                  "launches 1 and 2 took %llu launches and %llu host synchronisations", emu::launch_count(),
                  emu::host_sync_count());
#endif
        outcome.sums.push_back(all_reduce_sums(plans));
        for (const LayerAdaptivePlan& plan : plans) launch_apply(plan, rule, device_step, 0);
        const State after = from_device(d, n, with_master);
        if (figures) check_step_against_reference(rule, before, after, host_grads, step, *figures);
        before = after;
    }
    for (int slot : {8}) CHECK(outcome.sums.back()[2 * slot] == 0.0f && outcome.sums.back()[2 * slot + 1] == 0.0f);
    outcome.state = before;
    for (LayerAdaptivePlan& plan : plans) layer_adaptive_free(plan);
    unshift_moments(d, shifted);
    free_device(d);
    CUDA_CHECK(cudaFree(grads.floatx));
    CUDA_CHECK(cudaFree(grads.fp32));
    CUDA_CHECK(cudaFree(device_step));
    return outcome;
}

bool same_state_bits(const State& a, const State& b) {
    const size_t n = kPiecesTotal;
    return bitwise_equal(a.params.data(), b.params.data(), n * 4) && bitwise_equal(a.m.data(), b.m.data(), n * 4) &&
           bitwise_equal(a.v.data(), b.v.data(), n * 4) && a.master.size() == b.master.size() &&
           (a.master.empty() || bitwise_equal(a.master.data(), b.master.data(), a.master.size() * 4));
}
bool same_bits(const Outcome& a, const Outcome& b) {
    bool same = same_state_bits(a.state, b.state);
    for (size_t step = 0; step < a.sums.size(); step++)
        same = same && bitwise_equal(a.sums[step].data(), b.sums[step].data(), a.sums[step].size() * 4);
    return same;
}

void check_layer_adaptive(Rule rule, bool with_master) {
    ErrorFigures figures;
    const Outcome one = run_layer_adaptive(rule, with_master, Arrangement::one_plan, &figures);
#ifdef ENABLE_FP32
    const char* params_unit = "relative";
#else
    const char* params_unit = "bf16 gaps";
#endif
    const std::string weights =
        with_master ? tst::format("master %.2e (relative), params exactly the master rounded", figures.master)
                    : tst::format("params %.3g (%s)", figures.params, params_unit);
    printf("  %s %s master, largest errors: m, v or b %.2e (relative), %s\n", rule == Rule::lamb ? "LAMB" : "LARS",
           with_master ? "with" : "without", figures.state, weights.c_str());
    CHECK_MSG(same_bits(one, run_layer_adaptive(rule, with_master, Arrangement::one_plan)), "a second run differs");
    CHECK_MSG(same_bits(one, run_layer_adaptive(rule, with_master, Arrangement::plan_per_run)),
              "one plan per run differs from the multi-run plan");
}

}  // namespace

TEST(lamb_with_master_weights_matches_reference) { check_layer_adaptive(Rule::lamb, true); }
TEST(lamb_without_master_weights_matches_reference) { check_layer_adaptive(Rule::lamb, false); }
TEST(lars_with_master_weights_matches_reference) { check_layer_adaptive(Rule::lars, true); }
TEST(lars_without_master_weights_matches_reference) { check_layer_adaptive(Rule::lars, false); }

// A slot split across two ranks' plans, the sums added between launches 2 and 3 as the all-reduce
// would: the reference's step, and the bits of one plan.
TEST(layer_adaptive_two_ranks_match_reference_and_one_plan) {
    for (Rule rule : {Rule::lamb, Rule::lars})
        for (bool with_master : {true, false}) {
            ErrorFigures figures;
            CHECK(same_bits(run_layer_adaptive(rule, with_master, Arrangement::two_ranks, &figures),
                            run_layer_adaptive(rule, with_master, Arrangement::one_plan)));
        }
}

// A second rank holding a copy of every run, planned as not counted (as a tensor-parallel rank holds
// the replicated tensors): its squares are left out of the sums, so the all-reduced sums are the
// first rank's alone, and both copies take the bits of one plan.
TEST(layer_adaptive_copies_left_out_of_the_sums) {
    const size_t n = kPiecesTotal;
    for (Rule rule : {Rule::lamb, Rule::lars}) {
        const State initial = initial_layer_adaptive_state(true);
        DeviceState mine = to_device(initial), copy = to_device(initial);
        Gradients grads{device_poisoned<floatX>(n), device_poisoned<float>(n)};
        std::vector<LayerAdaptiveRun> copy_runs = layer_adaptive_runs(copy, grads, rule, kPieces);
        for (LayerAdaptiveRun& run : copy_runs) run.counted = false;
        const std::vector<LayerAdaptiveRun> my_runs = layer_adaptive_runs(mine, grads, rule, kPieces);
        std::vector<LayerAdaptivePlan> plans = {
            layer_adaptive_plan(my_runs.data(), (int)my_runs.size(), (int)kSlots.size()),
            layer_adaptive_plan(copy_runs.data(), (int)copy_runs.size(), (int)kSlots.size())};
        AdamWDeviceStep* device_step = device_poisoned<AdamWDeviceStep>(1);
        Outcome outcome;
        for (int step = 1; step <= 3; step++) {
            upload_gradients(grads, layer_adaptive_gradients(step));
            const AdamWDeviceStep values = layer_adaptive_device_step(step);
            CUDA_CHECK(cudaMemcpy(device_step, &values, sizeof values, cudaMemcpyHostToDevice));
            for (const LayerAdaptivePlan& plan : plans) launch_norms(plan, rule, device_step, 0);
            const std::vector<float> copy_sums = host_copy_of(plans[1].sums, 2 * kSlots.size());
            for (float sum : copy_sums) CHECK(sum == 0.0f);
            outcome.sums.push_back(all_reduce_sums(plans));
            for (const LayerAdaptivePlan& plan : plans) launch_apply(plan, rule, device_step, 0);
        }
        outcome.state = from_device(mine, n, true);
        CHECK(same_bits(outcome, run_layer_adaptive(rule, true, Arrangement::one_plan)));
        CHECK(same_state_bits(from_device(copy, n, true), outcome.state));
        for (LayerAdaptivePlan& plan : plans) layer_adaptive_free(plan);
        free_device(mine);
        free_device(copy);
        CUDA_CHECK(cudaFree(grads.floatx));
        CUDA_CHECK(cudaFree(grads.fp32));
        CUDA_CHECK(cudaFree(device_step));
    }
}

// m and v off a 16-byte boundary: the element-by-element path, the same bits as the 128-bit one.
TEST(layer_adaptive_unaligned_state_gives_the_same_bits) {
    for (Rule rule : {Rule::lamb, Rule::lars})
        CHECK(same_bits(run_layer_adaptive(rule, true, Arrangement::one_plan),
                        run_layer_adaptive(rule, true, Arrangement::unaligned_state)));
}

// The three launches captured once in a CUDA graph and replayed each step (the step's values written
// to device memory in between) give the bits of launches issued directly; a step with skip set
// changes nothing and leaves the sums at 0.
TEST(layer_adaptive_launches_replay_in_a_cuda_graph_and_skip) {
    const size_t n = kPiecesTotal;
    for (Rule rule : {Rule::lamb, Rule::lars}) {
        const State initial = initial_layer_adaptive_state(true);
        DeviceState direct = to_device(initial), replayed = to_device(initial);
        Gradients grads{device_poisoned<floatX>(n), device_poisoned<float>(n)};
        AdamWDeviceStep* device_step = device_poisoned<AdamWDeviceStep>(1);
        const std::vector<LayerAdaptiveRun> direct_runs = layer_adaptive_runs(direct, grads, rule, kPieces),
                                            replayed_runs = layer_adaptive_runs(replayed, grads, rule, kPieces);
        LayerAdaptivePlan direct_plan = layer_adaptive_plan(direct_runs.data(), (int)direct_runs.size(), (int)kSlots.size());
        LayerAdaptivePlan replayed_plan =
            layer_adaptive_plan(replayed_runs.data(), (int)replayed_runs.size(), (int)kSlots.size());
        cudaStream_t stream;
        CUDA_CHECK(cudaStreamCreate(&stream));
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        launch_norms(replayed_plan, rule, device_step, stream);
        launch_apply(replayed_plan, rule, device_step, stream);
        CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        State before_skip;
        for (int step = 1; step <= 3; step++) {
            upload_gradients(grads, layer_adaptive_gradients(step));
            AdamWDeviceStep values = layer_adaptive_device_step(step);
            values.skip = step == 2;
            CUDA_CHECK(cudaMemcpy(device_step, &values, sizeof values, cudaMemcpyHostToDevice));
            launch_norms(direct_plan, rule, device_step, 0);
            launch_apply(direct_plan, rule, device_step, 0);
            CUDA_CHECK(cudaGraphLaunch(exec, stream));
            CUDA_CHECK(cudaStreamSynchronize(stream));
            const State after = from_device(replayed, n, true);
            if (step == 2) {
                CHECK_MSG(same_state_bits(after, before_skip), "a skipped step changed the state");
                CHECK(host_copy_of(replayed_plan.sums, 2 * kSlots.size()) == std::vector<float>(2 * kSlots.size(), 0.0f));
            }
            before_skip = after;
        }
        CHECK_MSG(same_state_bits(from_device(direct, n, true), from_device(replayed, n, true)),
                  "the replayed graph's result differs from the direct launches'");
        CUDA_CHECK(cudaGraphExecDestroy(exec));
        CUDA_CHECK(cudaGraphDestroy(graph));
        CUDA_CHECK(cudaStreamDestroy(stream));
        layer_adaptive_free(direct_plan);
        layer_adaptive_free(replayed_plan);
        free_device(direct);
        free_device(replayed);
        CUDA_CHECK(cudaFree(grads.floatx));
        CUDA_CHECK(cudaFree(grads.fp32));
        CUDA_CHECK(cudaFree(device_step));
    }
}
