// kernels/fp8_cast.h against base/fp8.h, bit for bit: the cast on every bf16 value and on inputs that,
// scaled, land on every FP8 code, every midpoint between neighbouring codes and the floats beside it,
// at several scales; the amax (NaN wins, order-free across blocks); the scale rules (zero amax → 1,
// a non-finite amax flagged and scale 1); the delayed recipe's ring against a list of the last N
// amaxes kept here; the cast + transpose layout on non-square shapes that are not tile multiples,
// aligned and not; and the current recipe replayed from a CUDA graph.
#include <cmath>
#include <cstring>
#include <deque>
#include <vector>

#include "base/fp8.h"
#include "kernels/fp8_cast.h"
#include "test/kernels/kernel_test.h"

namespace {

const Fp8Format kFormats[] = {Fp8Format::e4m3, Fp8Format::e5m2};

Fp8ScaleState* device_state(float scale, float amax = 0.0f) {
    return device_copy_of(std::vector<Fp8ScaleState>{{scale, 1.0f / scale, amax, 0}});
}
Fp8ScaleState host_state(const Fp8ScaleState* d) { return host_copy_of(d, 1)[0]; }
uint32_t bits(float x) { return fp8_float_bits(x); }

// Every bf16 value, then for each code pair of both formats the midpoint and the floats beside it,
// and each code's value and its neighbours, all divided by `scale` (a power of two: exact), so that
// x · scale lands there. In the bf16 build the extra values round to bf16 (the reference is computed
// from the value the kernel sees).
std::vector<floatX> cast_inputs(float scale) {
    std::vector<float> v;
    for (uint32_t b = 0; b < 65536; b++) v.push_back(fp8_bits_float(b << 16));
    for (Fp8Format f : kFormats) {
        for (int c = 0; c < 127; c++) {
            const float lo = fp8_decode((uint8_t)c, f), hi = fp8_decode((uint8_t)(c + 1), f);
            if (!std::isfinite(lo) || !std::isfinite(hi)) continue;
            const float mid = (lo + hi) / 2;
            for (float x : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY), std::nextafter(lo, INFINITY)})
                for (float s : {1.0f, -1.0f}) v.push_back(s * x / scale);
        }
    }
    v.resize(v.size() + 7, 0.5f);  // not a multiple of 16: the ragged end
    std::vector<floatX> out(v.size());
    for (size_t i = 0; i < v.size(); i++) out[i] = host_to_floatX(v[i]);
    return out;
}

// max |x| by base/fp8.h's order (NaN wins).
float host_amax(const std::vector<floatX>& x) {
    float a = 0.0f;
    for (floatX v : x) a = fp8_amax_merge(a, host_from_floatX(v));
    return a;
}

std::vector<uint8_t> host_codes(const std::vector<floatX>& x, float scale, Fp8Format f) {
    std::vector<uint8_t> q(x.size());
    for (size_t i = 0; i < x.size(); i++) q[i] = fp8_encode(host_from_floatX(x[i]) * scale, f);
    return q;
}

// The index and values of the first difference between two code arrays, or "" when equal.
std::string first_difference(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                             const std::vector<floatX>* inputs = nullptr) {
    for (size_t i = 0; i < want.size(); i++)
        if (got[i] != want[i])
            return tst::format("element %zu: 0x%02X, expected 0x%02X (input %.9g)", i, got[i], want[i],
                               inputs ? host_from_floatX((*inputs)[i]) : 0.0f);
    return "";
}

}  // namespace

TEST(fp8_cast_matches_base_fp8_on_every_bf16_value_code_and_midpoint) {
    long checked = 0;
    for (float scale : {1.0f, 1.0f / 16, 128.0f}) {
        const std::vector<floatX> x = cast_inputs(scale);
        floatX* dx = device_copy_of(x);
        for (Fp8Format f : kFormats) {
            for (bool take_amax : {false, true}) {
                Fp8ScaleState* state = device_state(scale);
                __nv_fp8_storage_t* dq = device_poisoned<__nv_fp8_storage_t>(x.size());
                fp8_cast(dq, dx, x.size(), f, state, take_amax, 0);
                const std::string diff = first_difference(host_copy_of(dq, x.size()), host_codes(x, scale, f), &x);
                CHECK_MSG(diff.empty(), "%s scale %g: %s", fp8_format_name(f), scale, diff.c_str());
                const Fp8ScaleState after = host_state(state);
                CHECK(after.scale == scale);
                // The inputs hold bf16's NaNs, so the amax is NaN (the largest NaN pattern, as bits).
                if (take_amax) CHECK_MSG(bits(after.amax) == bits(host_amax(x)), "amax 0x%08X", bits(after.amax));
                if (!take_amax) CHECK(after.amax == 0.0f);
                checked += (long)x.size();
                CUDA_CHECK(cudaFree(dq));
                CUDA_CHECK(cudaFree(state));
            }
        }
        CUDA_CHECK(cudaFree(dx));
    }
    printf("  %ld casts checked\n", checked);
}

TEST(fp8_amax_is_the_largest_magnitude_nan_wins_and_zero_is_zero) {
    const size_t n = 200003;  // many blocks, a ragged end
    std::vector<float> v = random_floats(n, 11, -3.0f, 3.0f);
    v[123457] = -7.75f;
    const std::vector<floatX> x = [&] {
        std::vector<floatX> out(n);
        for (size_t i = 0; i < n; i++) out[i] = host_to_floatX(v[i]);
        return out;
    }();
    floatX* dx = device_copy_of(x);
    Fp8ScaleState* state = device_state(1.0f, 123.0f);  // the amax is zeroed first
    fp8_amax(state, dx, n, 0);
    CHECK(host_state(state).amax == 7.75f);
    // The last element alone (the ragged end) decides.
    std::vector<floatX> y = x;
    y[n - 1] = host_to_floatX(-100.0f);
    floatX* dy = device_copy_of(y);
    fp8_amax(state, dy, n, 0);
    CHECK(host_state(state).amax == 100.0f);
    y[5] = host_to_floatX(NAN);
    CUDA_CHECK(cudaMemcpy(dy, y.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
    fp8_amax(state, dy, n, 0);
    CHECK(std::isnan(host_state(state).amax));
    std::vector<floatX> zeros(1000, host_to_floatX(-0.0f));
    floatX* dz = device_copy_of(zeros);
    fp8_amax(state, dz, zeros.size(), 0);
    CHECK(bits(host_state(state).amax) == 0u);
    for (floatX* p : {dx, dy, dz}) CUDA_CHECK(cudaFree(p));
    CUDA_CHECK(cudaFree(state));
}

TEST(fp8_current_scale_follows_the_rule_zero_gives_one_and_nonfinite_is_flagged) {
    const std::vector<float> amaxes = {1.0f, 448.0f, 449.0f, 3.5f, 0.0f, 1e-30f, 1e-42f, 3e38f, 0.001f, 57344.0f};
    for (Fp8Format f : kFormats) {
        std::vector<Fp8ScaleState> states;
        for (float a : amaxes) states.push_back({-1.0f, -1.0f, a, 0});
        Fp8ScaleState* d = device_copy_of(states);
        int* flag = device_copy_of(std::vector<int>{0});
        fp8_current_scale(d, (int)states.size(), f, flag, 0);
        const std::vector<Fp8ScaleState> out = host_copy_of(d, states.size());
        for (size_t i = 0; i < amaxes.size(); i++) {
            const Fp8Scale want = fp8_scale_from_amax(amaxes[i], f);
            CHECK_MSG(out[i].scale == want.scale && out[i].scale_inv == want.scale_inv,
                      "%s amax %g: scale %g (expected %g)", fp8_format_name(f), amaxes[i], out[i].scale, want.scale);
        }
        CHECK(out[4].scale == 1.0f && out[4].scale_inv == 1.0f);  // amax 0
        CHECK(host_copy_of(flag, 1)[0] == 0);                      // all finite: no flag
        for (float bad : {INFINITY, NAN}) {
            Fp8ScaleState* s = device_state(4.0f, bad);
            fp8_current_scale(s, 1, f, flag, 0);
            const Fp8ScaleState r = host_state(s);
            CHECK(r.scale == 1.0f && r.scale_inv == 1.0f && host_copy_of(flag, 1)[0] == 1);
            CUDA_CHECK(cudaMemset(flag, 0, sizeof(int)));
            CUDA_CHECK(cudaFree(s));
        }
        CUDA_CHECK(cudaFree(d));
        CUDA_CHECK(cudaFree(flag));
    }
}

// Steps of the delayed recipe on one tensor: each step casts a tensor whose amax is known (taking the
// amax in the pass) with the scale the previous update left, then updates. The reference keeps the
// last N finite amaxes in a list.
TEST(fp8_delayed_recipe_scales_from_the_last_n_amaxes_and_skips_nonfinite_ones) {
    constexpr int N = 4;
    const std::vector<float> step_amax = {2.0f, 40.0f, 0.5f, 3.0f, 0.25f, INFINITY, 0.125f, 1.5f, 0.75f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (Fp8Format f : kFormats) {
        Fp8ScaleState* state = device_poisoned<Fp8ScaleState>(1);
        float* ring = device_poisoned<float>(N);
        int* flag = device_copy_of(std::vector<int>{0});
        fp8_scale_state_init(state, 1, ring, N, 0);
        CHECK(host_state(state).scale == 1.0f && host_copy_of(ring, N) == std::vector<float>(N, 0.0f));
        std::deque<float> last;
        float expected_scale = 1.0f;  // before any history
        for (size_t step = 0; step < step_amax.size(); step++) {
            std::vector<float> v = random_floats(1000, 100 + (unsigned)step, -0.1f, 0.1f);
            for (float& e : v) e *= std::isfinite(step_amax[step]) ? step_amax[step] : 1.0f;
            v[17] = -step_amax[step];
            std::vector<floatX> x(v.size());
            for (size_t i = 0; i < v.size(); i++) x[i] = host_to_floatX(v[i]);
            floatX* dx = device_copy_of(x);
            __nv_fp8_storage_t* dq = device_poisoned<__nv_fp8_storage_t>(x.size());
            fp8_cast(dq, dx, x.size(), f, state, true, 0);
            const std::string diff = first_difference(host_copy_of(dq, x.size()), host_codes(x, expected_scale, f));
            CHECK_MSG(diff.empty(), "%s step %zu: %s", fp8_format_name(f), step, diff.c_str());
            CHECK(host_state(state).amax == std::fabs(host_from_floatX(x[17])));
            fp8_delayed_update(state, ring, 1, N, f, flag, 0);

            const bool finite = std::isfinite(step_amax[step]);
            if (finite) {
                last.push_back(step_amax[step]);
                if (last.size() > N) last.pop_front();
            }
            float largest = 0.0f;
            for (float a : last) largest = std::max(largest, a);
            expected_scale = fp8_scale_from_amax(largest, f).scale;
            const Fp8ScaleState after = host_state(state);
            CHECK_MSG(after.scale == expected_scale && after.scale_inv == 1.0f / expected_scale,
                      "%s step %zu: scale %g, expected %g", fp8_format_name(f), step, after.scale, expected_scale);
            CHECK(after.amax == 0.0f);
            CHECK_MSG(host_copy_of(flag, 1)[0] == (step >= 5 ? 1 : 0), "step %zu: flag", step);  // raised at step 5, kept
            CUDA_CHECK(cudaFree(dx));
            CUDA_CHECK(cudaFree(dq));
        }
        CHECK(expected_scale == 1.0f);  // four zero amaxes in a row: the ring holds only zeros
        CUDA_CHECK(cudaFree(state));
        CUDA_CHECK(cudaFree(ring));
        CUDA_CHECK(cudaFree(flag));
    }
}

// Shapes: tile multiples and not, aligned for 128-bit access (C % 8 == 0, R % 16 == 0) and not,
// with and without the untransposed copy, pointers offset by one byte.
TEST(fp8_cast_transpose_writes_both_layouts_on_ragged_shapes) {
    struct Shape {
        int R, C;
        bool with_q;
        int qt_offset;  // bytes: 1 makes the transposed output unaligned
    };
    const Shape shapes[] = {{1, 1, true, 0},     {3, 5, true, 0},    {64, 64, true, 0},   {128, 192, false, 0},
                            {144, 200, true, 0}, {100, 72, true, 0}, {80, 48, true, 1},   {17, 130, true, 0},
                            {64, 136, true, 0}};
    int tiles = 0;
    for (const Shape& s : shapes) {
        const size_t n = (size_t)s.R * s.C;
        std::vector<float> v = random_floats(n, (unsigned)(s.R * 1000 + s.C), -2.0f, 2.0f);
        std::vector<floatX> x(n);
        for (size_t i = 0; i < n; i++) x[i] = host_to_floatX(v[i]);
        floatX* dx = device_copy_of(x);
        for (Fp8Format f : kFormats) {
            const float scale = f == Fp8Format::e4m3 ? 128.0f : 8192.0f;
            Fp8ScaleState* state = device_state(scale);
            __nv_fp8_storage_t* dq = s.with_q ? device_poisoned<__nv_fp8_storage_t>(n) : nullptr;
            __nv_fp8_storage_t* dqt_base = device_poisoned<__nv_fp8_storage_t>(n + 16);
            __nv_fp8_storage_t* dqt = dqt_base + s.qt_offset;
            fp8_cast_transpose(dq, dqt, dx, s.R, s.C, f, state, true, 0);
            const std::vector<uint8_t> want = host_codes(x, scale, f);
            std::vector<uint8_t> want_t(n);
            for (int r = 0; r < s.R; r++)
                for (int c = 0; c < s.C; c++) want_t[(size_t)c * s.R + r] = want[(size_t)r * s.C + c];
            if (dq) {
                const std::string diff = first_difference(host_copy_of(dq, n), want);
                CHECK_MSG(diff.empty(), "%dx%d %s q: %s", s.R, s.C, fp8_format_name(f), diff.c_str());
            }
            const std::string diff_t = first_difference(host_copy_of(dqt, n), want_t);
            CHECK_MSG(diff_t.empty(), "%dx%d %s qT: %s", s.R, s.C, fp8_format_name(f), diff_t.c_str());
            CHECK(host_copy_of(dqt + n, 1)[0] == 0xFF);  // nothing written past the end
            CHECK(host_state(state).amax == host_amax(x));
            tiles += ceil_div(s.R, FP8_TILE) * ceil_div(s.C, FP8_TILE);
            if (dq) CUDA_CHECK(cudaFree(dq));
            CUDA_CHECK(cudaFree(dqt_base));
            CUDA_CHECK(cudaFree(state));
        }
        CUDA_CHECK(cudaFree(dx));
    }
    printf("  %d tiles checked\n", tiles);
}

TEST(fp8_current_recipe_replays_from_a_cuda_graph) {
    const size_t n = 4096 + 48;
    std::vector<float> v = random_floats(n, 5, -6.0f, 6.0f);
    std::vector<floatX> x(n);
    for (size_t i = 0; i < n; i++) x[i] = host_to_floatX(v[i]);
    floatX* dx = device_copy_of(x);
    Fp8ScaleState* state = device_state(1.0f);
    int* flag = device_copy_of(std::vector<int>{0});
    __nv_fp8_storage_t* dq = device_poisoned<__nv_fp8_storage_t>(n);
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    fp8_quantize_current(dq, dx, n, Fp8Format::e4m3, state, flag, stream);
    CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int run = 0; run < 2; run++) {
        if (run == 1) {  // new contents, same buffers: the graph computes a new scale
            for (floatX& e : x) e = host_to_floatX(host_from_floatX(e) * 0.01f);
            CUDA_CHECK(cudaMemcpy(dx, x.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
        }
        CUDA_CHECK(cudaGraphLaunch(exec, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        const float scale = fp8_scale_from_amax(host_amax(x), Fp8Format::e4m3).scale;
        CHECK(host_state(state).scale == scale && host_state(state).amax == host_amax(x));
        const std::string diff = first_difference(host_copy_of(dq, n), host_codes(x, scale, Fp8Format::e4m3));
        CHECK_MSG(diff.empty(), "run %d: %s", run, diff.c_str());
    }
    CHECK(host_copy_of(flag, 1)[0] == 0);
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaStreamDestroy(stream));
    for (void* p : {(void*)dx, (void*)state, (void*)flag, (void*)dq}) CUDA_CHECK(cudaFree(p));
}
