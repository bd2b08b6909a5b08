// AdamW with fp32 master weights and stochastic rounding of the bf16 params, from naive to the shipped
// kernel in kernels/adamw.h. Each version is checked against cpu/adamw.h (the master weights, m and v
// to 1e-5; the params to the floatX tolerance; and the versions give the same bits, since they draw
// the same random bits per element), then (on a GPU) timed on GPT-2 124M's 124,475,904 parameters.
//   1. naive: one thread per element, the update of master, m, v in one kernel, then a second kernel
//      that rounds the master into params: the master is written then read again.
//   2. fused: one kernel updates master, m, v and writes the rounded params (one thread per element,
//      scalar accesses).
//   3. 128-bit: 8 elements per thread with Packed128 loads and stores of every array: the shipped
//      adamw_update. Also timed without master weights (params read and written as floatX), and one
//      call per tensor of GPT-2 124M (148 launches), as the trainer updates the model.
//   4. multi-tensor: version 3's per-thread work over all 148 tensors in one launch
//      (adamw_update_multi_tensor; its bits equal version 3's: test/kernels/test_adamw.cu).
// Bandwidth counts each version's compulsory traffic (adamw_bytes: master, m, v read and written,
// grads read, params written), the same for every version.
// Then LAMB and LARS (kernels/layer_adaptive.h: three launches each, one slot per tensor, adaptation
// and weight decay on the 2-D tensors) on the same 148 tensors, each launch timed and the whole
// against version 4's one launch (the ratio printed; the target for LAMB is 1.15). Checked first,
// here and under the emulator, against the double-precision reference of
// test/kernels/layer_adaptive_reference.h.
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/adamw.h"
#include "dev/cuda/bench.h"
#include "kernels/adamw.h"
#include "kernels/layer_adaptive.h"
#include "test/kernels/layer_adaptive_reference.h"

// ---- version 1: two kernels
__global__ void adamw_naive_master_kernel(float* master, float* m, float* v, const floatX* grads, size_t n,
                                          AdamWKernelArgs s) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float mi = m[i], vi = v[i];
    master[i] = adamw_step(master[i], to_float(grads[i]), mi, vi, s);
    m[i] = mi;
    v[i] = vi;
}
__global__ void round_master_kernel(floatX* params, const float* master, size_t n, AdamWKernelArgs s) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        params[i] =
            parameter_for_storage<floatX>(master[i], hash_random_bits(s.random_key, s.global_offset + i));
}

// ---- version 2: fused, one element per thread
__global__ void adamw_fused_scalar_kernel(floatX* params, float* master, float* m, float* v,
                                          const floatX* grads, size_t n, AdamWKernelArgs s) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) adamw_element(params, master, m, v, grads, i, s);
}

struct Hyper {
    float lr = 6e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f, grad_scale = 0.8f;
    uint32_t seed = 42;
};
AdamWKernelArgs settings_of(const Hyper& h, int step) {
    return adamw_kernel_args(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.grad_scale, step, h.seed, 0,
                             "settings_of");
}

struct Buffers {
    size_t n;
    floatX *params = device_buffer<floatX>(n), *grads = device_buffer<floatX>(n);
    float *master = device_buffer<float>(n), *m = device_buffer<float>(n), *v = device_buffer<float>(n);
    explicit Buffers(size_t n_) : n(n_) {}
    ~Buffers() { device_free(params, grads, master, m, v); }
};

void run_version(int version, Buffers& b, const Hyper& h, int step, bool with_master = true) {
    const AdamWKernelArgs s = settings_of(h, step);
    const unsigned blocks = (unsigned)((b.n + 255) / 256);
    switch (version) {
        case 1:
            LAUNCH(adamw_naive_master_kernel, blocks, 256, 0, 0, b.master, b.m, b.v, b.grads, b.n, s);
            LAUNCH(round_master_kernel, blocks, 256, 0, 0, b.params, b.master, b.n, s);
            break;
        case 2:
            LAUNCH(adamw_fused_scalar_kernel, blocks, 256, 0, 0, b.params, b.master, b.m, b.v, b.grads, b.n,
                   s);
            break;
        case 3:
            adamw_update(b.params, with_master ? b.master : nullptr, b.m, b.v, b.grads, b.n, 0, h.lr, h.beta1,
                         h.beta2, h.eps, h.weight_decay, h.grad_scale, step, h.seed, 0);
            break;
    }
    CUDA_CHECK(cudaGetLastError());
}
const char* version_name(int version) {
    static const char* names[] = {"", "1 naive: update, then round (2 kernels)", "2 fused, scalar",
                                  "3 fused, 128-bit (shipped)"};
    return names[version];
}

// Three steps of every version from the same start against the reference; the versions' bits agree.
void check_versions(size_t n) {
    const Hyper h;
    const std::vector<float> master0 = random_floats(n, 1, -1.0f, 1.0f);
    std::vector<std::vector<float>> grads;
    for (int step = 1; step <= 3; step++) grads.push_back(rounded_random_floats(n, 10 + step, -2, 2));
    std::vector<float> ref = master0, ref_m(n, 0.0f), ref_v(n, 0.0f);
    for (int step = 1; step <= 3; step++)
        adamw_update(ref.data(), ref_m.data(), ref_v.data(), grads[step - 1].data(), n, h.lr, h.beta1,
                     h.beta2, h.eps, h.weight_decay, h.grad_scale, step);

    std::vector<floatX> first_params;
    Buffers b(n);
    for (int version = 1; version <= 3; version++) {
        copy_to_device(b.master, master0);
        copy_floats_to_device(b.params, master0);
        CUDA_CHECK(cudaMemset(b.m, 0, n * sizeof(float)));
        CUDA_CHECK(cudaMemset(b.v, 0, n * sizeof(float)));
        for (int step = 1; step <= 3; step++) {
            copy_floats_to_device(b.grads, grads[step - 1]);
            run_version(version, b, h, step);
        }
        const std::vector<floatX> params = host_copy_of(b.params, n);
        const std::string name = std::string("adamw ") + version_name(version);
        const std::string size = " (n=" + std::to_string(n) + ")";
        report_check(name + " master" + size, relative_error(host_copy_of(b.master, n), ref), 1e-5);
        report_check(name + " m, v" + size,
                     std::max(relative_error(host_copy_of(b.m, n), ref_m),
                              relative_error(host_copy_of(b.v, n), ref_v)),
                     1e-5);
        report_check(name + " params" + size, relative_error(host_floats_of(b.params, n), ref));
        if (version == 1)
            first_params = params;
        else
            report_same_bits(name + " params have version 1's bits",
                             memcmp(params.data(), first_params.data(), n * sizeof(floatX)) == 0);
    }
}

// ---- LAMB and LARS over a list of tensors: one slot each, adaptation and decay where AdamW decays.
enum class LayerRule { lamb, lars };
const char* rule_name(LayerRule rule) { return rule == LayerRule::lamb ? "LAMB" : "LARS"; }
std::vector<LayerAdaptiveRun> layer_adaptive_runs_of(const std::vector<AdamWRun>& tensors, LayerRule rule) {
    std::vector<LayerAdaptiveRun> runs;
    for (size_t t = 0; t < tensors.size(); t++) {
        AdamWRun tensor = tensors[t];
        if (rule == LayerRule::lars) tensor.v = nullptr;  // LARS keeps one buffer, b, in m
        runs.push_back({tensor, (int)t, tensor.decay});
    }
    return runs;
}
const LayerAdaptiveHyper kLayerHyper;
// Launches 1 and 2 (the norms), or 3 (the update), of LAMB or LARS with kLayerHyper's constants.
void layer_adaptive_norms(const LayerAdaptivePlan& plan, LayerRule rule, const AdamWDeviceStep* step) {
    const LayerAdaptiveHyper& h = kLayerHyper;
    if (rule == LayerRule::lamb)
        lamb_moments_and_norms(plan, (float)h.beta1, (float)h.beta2, (float)h.eps, step, 0);
    else
        lars_norms(plan, step, 0);
}
void layer_adaptive_apply(const LayerAdaptivePlan& plan, LayerRule rule, const AdamWDeviceStep* step) {
    const LayerAdaptiveHyper& h = kLayerHyper;
    if (rule == LayerRule::lamb)
        lamb_apply(plan, (float)h.eps, step, 0);
    else
        lars_apply(plan, (float)h.momentum, (float)h.trust_coefficient, step, 0);
}
void layer_adaptive_step(const LayerAdaptivePlan& plan, LayerRule rule, const AdamWDeviceStep* step) {
    layer_adaptive_norms(plan, rule, step);
    layer_norms_sum(plan, 0);
    layer_adaptive_apply(plan, rule, step);
}
AdamWDeviceStep* device_step_of(int step) {
    const LayerAdaptiveHyper& h = kLayerHyper;
    AdamWDeviceStep* d = device_buffer<AdamWDeviceStep>(1);
    copy_to_device(d, std::vector<AdamWDeviceStep>{adamw_device_step((float)h.lr, (float)h.beta1, (float)h.beta2,
                                                                     (float)h.weight_decay, (float)h.grad_scale,
                                                                     step, 42)});
    return d;
}

// Three steps over tensors of GPT-like shapes, one of them odd-sized, against the reference (the master,
// m and v or b to 1e-5, the params to the floatX tolerance); a second run gives the same bits.
void check_layer_adaptive(LayerRule rule) {
    const std::vector<size_t> sizes = {5003, 64, 3 * 64 * 64, 3 * 64, 1};
    const std::vector<bool> decayed = {true, false, true, false, false};
    size_t n = 0;
    for (size_t size : sizes) n += size;
    const std::vector<float> master0 = random_floats(n, 3, -1.0f, 1.0f);
    std::vector<std::vector<float>> grads;
    for (int step = 1; step <= 3; step++) grads.push_back(rounded_random_floats(n, 20 + step, -2, 2));
    // The reference, tensor by tensor.
    std::vector<double> ref_p(master0.begin(), master0.end()), ref_m(n, 0.0), ref_v(n, 0.0);
    for (int step = 1; step <= 3; step++)
        for (size_t t = 0, offset = 0; t < sizes.size(); offset += sizes[t++]) {
            auto piece = [&](const std::vector<double>& x) {
                return std::vector<double>(x.begin() + offset, x.begin() + offset + sizes[t]);
            };
            std::vector<double> p = piece(ref_p), m = piece(ref_m), v = piece(ref_v);
            const std::vector<double> g(grads[step - 1].begin() + offset, grads[step - 1].begin() + offset + sizes[t]);
            if (rule == LayerRule::lamb)
                lamb_reference_step(p, m, v, g, kLayerHyper, step, decayed[t], decayed[t]);
            else
                lars_reference_step(p, m, g, kLayerHyper, decayed[t], decayed[t]);
            std::copy(p.begin(), p.end(), ref_p.begin() + offset);
            std::copy(m.begin(), m.end(), ref_m.begin() + offset);
            std::copy(v.begin(), v.end(), ref_v.begin() + offset);
        }
    // The kernels, twice.
    std::vector<std::vector<float>> params_of_runs, sums_of_runs;
    const std::string name = std::string(rule_name(rule)) + " (n=" + std::to_string(n) + ")";
    for (int repeat = 0; repeat < 2; repeat++) {
        Buffers b(n);
        copy_to_device(b.master, master0);
        copy_floats_to_device(b.params, master0);
        CUDA_CHECK(cudaMemset(b.m, 0, n * sizeof(float)));
        CUDA_CHECK(cudaMemset(b.v, 0, n * sizeof(float)));
        std::vector<AdamWRun> tensors;
        for (size_t t = 0, offset = 0; t < sizes.size(); offset += sizes[t++])
            tensors.push_back({b.params + offset, b.master + offset, b.m + offset, b.v + offset, b.grads + offset,
                               sizes[t], offset, decayed[t]});
        const std::vector<LayerAdaptiveRun> runs = layer_adaptive_runs_of(tensors, rule);
        LayerAdaptivePlan plan = layer_adaptive_plan(runs.data(), (int)runs.size(), (int)runs.size());
        for (int step = 1; step <= 3; step++) {
            copy_floats_to_device(b.grads, grads[step - 1]);
            AdamWDeviceStep* device_step = device_step_of(step);
            layer_adaptive_step(plan, rule, device_step);
            device_free(device_step);
        }
        params_of_runs.push_back(host_floats_of(b.params, n));
        sums_of_runs.push_back(host_copy_of(plan.sums, 2 * sizes.size()));
        if (repeat == 0) {
            report_check(name + " master", relative_error(host_copy_of(b.master, n), ref_p), 1e-5);
            report_check(name + (rule == LayerRule::lamb ? " m, v" : " b"),
                         std::max(relative_error(host_copy_of(b.m, n), ref_m),
                                  rule == LayerRule::lamb ? relative_error(host_copy_of(b.v, n), ref_v) : 0.0),
                         1e-5);
            report_check(name + " params", relative_error(params_of_runs[0], ref_p));
        }
        layer_adaptive_free(plan);
    }
    report_same_bits(name + " params and norms the same bits in a second run",
                     params_of_runs[0] == params_of_runs[1] &&
                         memcmp(sums_of_runs[0].data(), sums_of_runs[1].data(), sums_of_runs[0].size() * 4) == 0);
}

// LAMB's or LARS's three launches, each timed, then the whole step against AdamW's time.
void time_layer_adaptive(LayerRule rule, const std::vector<AdamWRun>& tensors, size_t n, double adamw_ms,
                         double ceiling) {
    const std::vector<LayerAdaptiveRun> runs = layer_adaptive_runs_of(tensors, rule);
    LayerAdaptivePlan plan = layer_adaptive_plan(runs.data(), (int)runs.size(), (int)runs.size());
    AdamWDeviceStep* step = device_step_of(1);
    const LayerAdaptiveBytes bytes = rule == LayerRule::lamb ? lamb_bytes(plan, n, true) : lars_bytes(plan, n, true);
    const std::string name = rule_name(rule);
    report_bandwidth((name + " 1: norms' block sums").c_str(), time_median_ms([&] { layer_adaptive_norms(plan, rule, step); }),
                     bytes.norms, ceiling);
    report_bandwidth((name + " 2: sums per tensor").c_str(), time_median_ms([&] { layer_norms_sum(plan, 0); }), bytes.sum,
                     ceiling);
    report_bandwidth((name + " 3: update").c_str(), time_median_ms([&] { layer_adaptive_apply(plan, rule, step); }),
                     bytes.apply, ceiling);
    const double whole = time_median_ms([&] { layer_adaptive_step(plan, rule, step); });
    report_bandwidth((name + ", three launches").c_str(), whole, bytes.total(), ceiling);
    printf("%s / AdamW multi-tensor: %.2fx the time (bytes: %.2fx)%s\n", name.c_str(), whole / adamw_ms,
           bytes.total() / adamw_bytes(n, true), rule == LayerRule::lamb ? "; target <= 1.15x" : "");
    device_free(step);
    layer_adaptive_free(plan);
}

void time_versions(size_t n) {
    const double ceiling = measure_and_print_copy_bandwidth();
    printf("n=%zu parameters\n", n);
    const Hyper h;
    Buffers b(n);
    copy_to_device(b.master, random_floats(n, 1, -1.0f, 1.0f));
    copy_floats_to_device(b.grads, random_floats(n, 2, -1.0f, 1.0f));
    CUDA_CHECK(cudaMemset(b.m, 0, n * sizeof(float)));
    CUDA_CHECK(cudaMemset(b.v, 0, n * sizeof(float)));
    cast_array(b.params, b.master, n, 0);
    int step = 1;
    for (int version = 1; version <= 3; version++)
        report_bandwidth(version_name(version), time_median_ms([&] { run_version(version, b, h, step++); }),
                         adamw_bytes(n, true), ceiling);
    report_bandwidth("3 shipped, no master weights",
                     time_median_ms([&] { run_version(3, b, h, step++, false); }), adamw_bytes(n, false),
                     ceiling);

    // The model as the trainer updates it: GPT-2 124M's 148 tensors (wte, wpe, 12 layers x 12
    // tensors, lnfw, lnfb), one adamw_update per tensor vs one multi-tensor launch (weight decay on the
    // 2-D tensors only, the clip factor read from device memory).
    const size_t C = 768, L = 12, Vp = 50304, maxT = 1024;
    const size_t per_layer[12] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
    const bool decayed[12] = {false, false, true, false, true, false, false, false, true, false, true, false};
    std::vector<AdamWRun> runs;
    size_t offset = 0;
    auto add = [&](size_t count, bool decay) {
        runs.push_back({b.params + offset, b.master + offset, b.m + offset, b.v + offset, b.grads + offset, count,
                        offset, decay});
        offset += count;
    };
    add(Vp * C, true);
    add(maxT * C, true);
    for (int t = 0; t < 12; t++)
        for (size_t l = 0; l < L; l++) add(per_layer[t], decayed[t]);
    add(C, false);
    add(C, false);
    if (offset != n) {
        printf("the GPT-2 124M layout has %zu parameters, not %zu\n", offset, n);
        return;
    }
    float* grad_scale = device_buffer<float>(1);
    copy_to_device(grad_scale, std::vector<float>{h.grad_scale});
    const double per_tensor = time_median_ms([&] {
        for (const AdamWRun& r : runs)
            adamw_update(r.params, r.master, r.m, r.v, r.grads, r.n, r.global_offset, h.lr, h.beta1, h.beta2, h.eps,
                         r.decay ? h.weight_decay : 0.0f, h.grad_scale, step, h.seed, 0);
        step++;
    });
    report_bandwidth("3 shipped, one launch per tensor (148 launches)", per_tensor, adamw_bytes(n, true), ceiling);
    AdamWMultiTensor plan = adamw_multi_tensor_plan(runs.data(), (int)runs.size());
    const double multi = time_median_ms([&] {
        adamw_update_multi_tensor(plan, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, grad_scale, step++, h.seed,
                                  0);
    });
    report_bandwidth("4 multi-tensor, one launch for 148 tensors", multi, adamw_bytes(n, true), ceiling);
    adamw_multi_tensor_free(plan);
    for (LayerRule rule : {LayerRule::lamb, LayerRule::lars}) time_layer_adaptive(rule, runs, n, multi, ceiling);
    device_free(grad_scale);
}

int main() {
    print_device_header();
    if (BENCH_ON_GPU) {
        check_versions(1000003);
    } else {
        check_versions(10007);
    }
    for (LayerRule rule : {LayerRule::lamb, LayerRule::lars}) check_layer_adaptive(rule);
    if (BENCH_ON_GPU) time_versions(124475904);  // GPT-2 124M with the vocabulary padded to 50304
    return bench_exit_status();
}
