// kernels/matmul_fp8.h: a linear layer's three products in FP8 (forward with bias, GELU and the
// amax of the result; dinp through the weight's cast + transpose; dweight accumulated from the
// transposed dout and inp), each against the CPU simulation (cpu/fp8_sim.h: the operands quantised
// and dequantised with the same scales, then a double-precision product here); the device's current
// and delayed scales against the simulation's, step by step; and fp8_supported on this device.
#include <cmath>
#include <string>
#include <vector>

#include "cpu/fp8_sim.h"
#include "kernels/matmul_fp8.h"
#include "test/kernels/kernel_test.h"

namespace {

constexpr int N = 32, IC = 48, OC = 64;

std::vector<float> as_floatX_values(std::vector<float> v) { return round_to_floatX(std::move(v)); }

// The CPU simulation's operand: x quantised and dequantised by a current recipe of format f.
std::vector<float> simulated(const std::vector<float>& x, Fp8Format f, float* scale) {
    Fp8SimTensor t = fp8_sim_current(f);
    std::vector<float> out(x.size());
    fp8_sim_cast(t, out.data(), x.data(), x.size());
    *scale = t.scale;
    return out;
}

// out (R×C) = x (R×K) · y (C×K)ᵀ in double.
std::vector<float> product(const std::vector<float>& x, const std::vector<float>& y, int R, int C, int K) {
    std::vector<float> out((size_t)R * C);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            double sum = 0;
            for (int k = 0; k < K; k++) sum += (double)x[(size_t)r * K + k] * y[(size_t)c * K + k];
            out[(size_t)r * C + c] = (float)sum;
        }
    return out;
}
std::vector<float> transpose(const std::vector<float>& x, int R, int C) {
    std::vector<float> t(x.size());
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) t[(size_t)c * R + r] = x[(size_t)r * C + c];
    return t;
}

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

// A device FP8 operand made by the current recipe: codes, state (scale, scale_inv), both on the device.
struct DeviceOperand {
    __nv_fp8_storage_t* q = nullptr;
    Fp8ScaleState* state = nullptr;
    void release() {
        CUDA_CHECK(cudaFree(q));
        CUDA_CHECK(cudaFree(state));
    }
};
// x (R×C) cast by the current recipe, transposed when `transposed` (then C×R).
DeviceOperand quantized(const floatX* x, int R, int C, Fp8Format f, bool transposed, int* nonfinite) {
    DeviceOperand o;
    o.q = device_poisoned<__nv_fp8_storage_t>((size_t)R * C);
    o.state = device_poisoned<Fp8ScaleState>(1);
    fp8_amax(o.state, x, (size_t)R * C, 0);
    fp8_current_scale(o.state, 1, f, nonfinite, 0);
    if (transposed)
        fp8_cast_transpose(nullptr, o.q, x, R, C, f, o.state, false, 0);
    else
        fp8_cast(o.q, x, (size_t)R * C, f, o.state, false, 0);
    return o;
}
float device_scale(const DeviceOperand& o) { return host_copy_of(o.state, 1)[0].scale; }

}  // namespace

TEST(fp8_supported_on_the_emulated_or_real_device) {
    std::string why;
    const bool ok = fp8_supported(0, &why);
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    CHECK_MSG(ok == (prop.major * 10 + prop.minor >= 89), "fp8_supported says %d: %s", (int)ok, why.c_str());
    if (!ok) CHECK(!why.empty());
}

TEST(fp8_linear_layer_products_match_the_cpu_simulation) {
    std::string why;
    if (!fp8_supported(0, &why)) SKIP("no FP8 on this device: " + why);
    const std::vector<float> inp = as_floatX_values(random_floats((size_t)N * IC, 1, -3.0f, 3.0f));
    const std::vector<float> weight = as_floatX_values(random_floats((size_t)OC * IC, 2, -0.2f, 0.2f));
    const std::vector<float> bias = as_floatX_values(random_floats(OC, 3, -0.5f, 0.5f));
    const std::vector<float> dout = as_floatX_values(random_floats((size_t)N * OC, 4, -1e-3f, 1e-3f));
    const std::vector<float> dweight0 = as_floatX_values(random_floats((size_t)OC * IC, 5, -0.01f, 0.01f));
    floatX *d_inp = device_floatX(inp), *d_weight = device_floatX(weight), *d_bias = device_floatX(bias),
           *d_dout = device_floatX(dout), *d_dweight = device_floatX(dweight0);
    int* flag = device_copy_of(std::vector<int>{0});
    const Fp8Format E4 = Fp8Format::e4m3, E5 = Fp8Format::e5m2;

    // Forward: pre = inp · weightᵀ + bias, out = gelu(pre), amax = max |out|.
    DeviceOperand q_inp = quantized(d_inp, N, IC, E4, false, flag), q_w = quantized(d_weight, OC, IC, E4, false, flag);
    float s_inp, s_w;
    const std::vector<float> inp_sim = simulated(inp, E4, &s_inp), w_sim = simulated(weight, E4, &s_w);
    CHECK(device_scale(q_inp) == s_inp && device_scale(q_w) == s_w);
    floatX *out = device_poisoned<floatX>((size_t)N * OC), *pre = device_poisoned<floatX>((size_t)N * OC);
    float* amax = device_poisoned<float>(1);
    matmul_fp8(out, q_inp.q, E4, &q_inp.state->scale_inv, q_w.q, E4, &q_w.state->scale_inv, N, OC, IC, false, 0,
               d_bias, pre, amax);
    std::vector<float> pre_ref = product(inp_sim, w_sim, N, OC, IC), out_ref(pre_ref.size());
    double out_amax = 0;
    for (size_t i = 0; i < pre_ref.size(); i++) {
        pre_ref[i] += bias[i % OC];
        out_ref[i] = (float)gelu_ref(pre_ref[i]);
        out_amax = std::max(out_amax, (double)std::fabs(out_ref[i]));
    }
    CHECK_CLOSE(host_floats_of(pre, pre_ref.size()), pre_ref, KERNEL_TOLERANCE, "forward pre-GELU");
    CHECK_CLOSE(host_floats_of(out, out_ref.size()), out_ref, KERNEL_TOLERANCE, "forward GELU output");
    CHECK_NEAR(host_copy_of(amax, 1)[0], out_amax, 2 * KERNEL_TOLERANCE * out_amax);

    // dinp = dout · weight: x = dout (E5M2), y = weightᵀ (IC×OC, E4M3).
    DeviceOperand q_dout = quantized(d_dout, N, OC, E5, false, flag), q_wt = quantized(d_weight, OC, IC, E4, true, flag);
    float s_dout, s_wt;
    const std::vector<float> dout_sim = simulated(dout, E5, &s_dout);
    simulated(weight, E4, &s_wt);
    CHECK(device_scale(q_dout) == s_dout && device_scale(q_wt) == s_wt);
    floatX* dinp = device_poisoned<floatX>((size_t)N * IC);
    matmul_fp8(dinp, q_dout.q, E5, &q_dout.state->scale_inv, q_wt.q, E4, &q_wt.state->scale_inv, N, IC, OC, false, 0);
    const std::vector<float> dinp_ref = product(dout_sim, transpose(w_sim, OC, IC), N, IC, OC);
    CHECK_CLOSE(host_floats_of(dinp, dinp_ref.size()), dinp_ref, KERNEL_TOLERANCE, "dinp");

    // dweight += doutᵀ · inp: x = doutᵀ (OC×N, E5M2), y = inpᵀ (IC×N, E4M3).
    DeviceOperand q_dout_t = quantized(d_dout, N, OC, E5, true, flag), q_inp_t = quantized(d_inp, N, IC, E4, true, flag);
    matmul_fp8(d_dweight, q_dout_t.q, E5, &q_dout_t.state->scale_inv, q_inp_t.q, E4, &q_inp_t.state->scale_inv, OC, IC, N,
               true, 0);
    std::vector<float> dweight_ref = product(transpose(dout_sim, N, OC), transpose(inp_sim, N, IC), OC, IC, N);
    for (size_t i = 0; i < dweight_ref.size(); i++) dweight_ref[i] += dweight0[i];
    CHECK_CLOSE(host_floats_of(d_dweight, dweight_ref.size()), dweight_ref, KERNEL_TOLERANCE, "dweight (accumulated)");
    CHECK(host_copy_of(flag, 1)[0] == 0);
#ifdef ENABLE_FP32
    // The checks above tell a product of the FP8 operands from one of the originals: that one is
    // farther from the reference than the tolerance.
    const std::vector<float> unrounded = product(dout, transpose(weight, OC, IC), N, IC, OC);
    CHECK(tst::rel_l2_error(unrounded.data(), dinp_ref.data(), dinp_ref.size()) > 100 * KERNEL_TOLERANCE);
#endif

    for (DeviceOperand* o : {&q_inp, &q_w, &q_dout, &q_wt, &q_dout_t, &q_inp_t}) o->release();
    for (void* p : {(void*)d_inp, (void*)d_weight, (void*)d_bias, (void*)d_dout, (void*)d_dweight, (void*)flag, (void*)out,
                    (void*)pre, (void*)amax, (void*)dinp})
        CUDA_CHECK(cudaFree(p));
}

// The delayed recipe on the device (cast taking the amax, then the update) and in the CPU
// simulation, over steps whose amax rises, falls and once is infinite: the same scales, the same
// dequantised values, the same flag.
TEST(fp8_delayed_recipe_on_the_device_matches_the_cpu_simulation) {
    constexpr int kHistory = 3, kSize = 256;
    const float step_scale[] = {1.0f, 30.0f, 0.01f, 0.02f, INFINITY, 0.5f, 0.003f, 0.004f};
    for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
        Fp8SimTensor sim = fp8_sim_delayed(f, kHistory);
        Fp8ScaleState* state = device_poisoned<Fp8ScaleState>(1);
        float* ring = device_poisoned<float>(kHistory);
        int* flag = device_copy_of(std::vector<int>{0});
        fp8_scale_state_init(state, 1, ring, kHistory, 0);
        __nv_fp8_storage_t* q = device_poisoned<__nv_fp8_storage_t>(kSize);
        int step = 0;
        for (float s : step_scale) {
            std::vector<float> x = random_floats(kSize, 40 + step, -1.0f, 1.0f);
            for (float& v : x) v *= std::isfinite(s) ? s : 1.0f;
            if (!std::isfinite(s)) x[3] = s;
            x = as_floatX_values(x);
            floatX* dx = device_floatX(x);
            const float scale_used = sim.scale;
            CHECK_MSG(host_copy_of(state, 1)[0].scale == scale_used, "%s step %d: the cast's scale", fp8_format_name(f), step);
            fp8_cast(q, dx, kSize, f, state, true, 0);
            fp8_delayed_update(state, ring, 1, kHistory, f, flag, 0);
            std::vector<float> dequantized(kSize);
            fp8_sim_cast(sim, dequantized.data(), x.data(), x.size());
            const std::vector<__nv_fp8_storage_t> codes = host_copy_of(q, kSize);
            for (int i = 0; i < kSize; i++) {
                const float device_value = fp8_decode(codes[i], f) * (1.0f / scale_used);
                CHECK_MSG(fp8_float_bits(device_value) == fp8_float_bits(dequantized[i]), "%s step %d element %d: %g vs %g",
                          fp8_format_name(f), step, i, device_value, dequantized[i]);
            }
            const Fp8ScaleState after = host_copy_of(state, 1)[0];
            CHECK_MSG(after.scale == sim.scale && after.scale_inv == sim.scale_inv, "%s step %d: next scale %g vs %g",
                      fp8_format_name(f), step, after.scale, sim.scale);
            CHECK(host_copy_of(flag, 1)[0] == (int)sim.nonfinite);
            CUDA_CHECK(cudaFree(dx));
            step++;
        }
        CHECK(sim.nonfinite);
        for (void* p : {(void*)state, (void*)ring, (void*)flag, (void*)q}) CUDA_CHECK(cudaFree(p));
    }
}
