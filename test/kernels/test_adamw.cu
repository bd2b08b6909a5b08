// kernels/adamw.h against cpu/adamw.h over several steps (with and without fp32 master weights, with
// weight decay and grad_scale ≠ 1), the stochastic rounding (exact on representable values,
// unbiased), slices updated separately giving the same bits as the whole, unaligned arrays, n = 1,
// bitwise determinism, and 64-bit index arithmetic.
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/adamw.h"
#include "kernels/adamw.h"
#include "kernels/global_norm.h"
#include "test/kernels/kernel_test.h"

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
    float *m_buffer = nullptr, *v_buffer = nullptr;
    if (unaligned_state) {
        m_buffer = device_copy_of(std::vector<float>(n + 1, 0.0f));
        v_buffer = device_copy_of(std::vector<float>(n + 1, 0.0f));
        CUDA_CHECK(cudaFree(multi.m));
        CUDA_CHECK(cudaFree(multi.v));
        multi.m = m_buffer + 1;
        multi.v = v_buffer + 1;
    }
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
    if (unaligned_state) {
        multi.m = m_buffer;
        multi.v = v_buffer;
    }
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
