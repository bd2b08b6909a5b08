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
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/adamw.h"
#include "dev/cuda/bench.h"
#include "kernels/adamw.h"

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
    AdamWKernelArgs s;
    s.learning_rate = h.lr;
    s.beta1 = h.beta1;
    s.beta2 = h.beta2;
    s.eps = h.eps;
    s.weight_decay = h.weight_decay;
    s.grad_scale = h.grad_scale;
    s.m_correction = 1.0f - std::pow(h.beta1, (float)step);
    s.v_correction = 1.0f - std::pow(h.beta2, (float)step);
    s.random_key = adamw_random_key(h.seed, step);
    s.global_offset = 0;
    return s;
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
    device_free(grad_scale);
}

int main() {
    print_device_header();
    if (BENCH_ON_GPU) {
        check_versions(1000003);
        time_versions(124475904);  // GPT-2 124M with the vocabulary padded to 50304
    } else {
        check_versions(10007);
    }
    return bench_exit_status();
}
