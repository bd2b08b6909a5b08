// AdamW with fp32 master weights and stochastic rounding of the bf16 params, from naive to the shipped
// kernel in kernels/adamw.h. Each version is checked against cpu/adamw.h (the master weights, m and v
// to 1e-5; the params to the floatX tolerance; and the versions give the same bits, since they draw
// the same random bits per element), then (on a GPU) timed on GPT-2 124M's 124,475,904 parameters.
//   1. naive: one thread per element, the update of master, m, v in one kernel, then a second kernel
//      that rounds the master into params: the master is written then read again.
//   2. fused: one kernel updates master, m, v and writes the rounded params (one thread per element,
//      scalar accesses).
//   3. 128-bit: 8 elements per thread with Packed128 loads and stores of every array: the shipped
//      adamw_update. Also timed without master weights (params read and written as floatX).
// Bandwidth counts each version's compulsory traffic (adamw_bytes: master, m, v read and written,
// grads read, params written), the same for every version.
#include <cmath>
#include <random>
#include <vector>

#include "cpu/adamw.h"
#include "dev/cuda/bench.h"
#include "kernels/adamw.h"

#ifdef ENABLE_FP32
constexpr double TOLERANCE = 1e-5;
#else
constexpr double TOLERANCE = 1e-2;
#endif

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
    floatX *params = nullptr, *grads = nullptr;
    float *master = nullptr, *m = nullptr, *v = nullptr;
    explicit Buffers(size_t n_) : n(n_) {
        CUDA_CHECK(cudaMalloc(&params, n * sizeof(floatX)));
        CUDA_CHECK(cudaMalloc(&grads, n * sizeof(floatX)));
        CUDA_CHECK(cudaMalloc(&master, n * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&m, n * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&v, n * sizeof(float)));
    }
    ~Buffers() {
        cudaFree(params);
        cudaFree(grads);
        cudaFree(master);
        cudaFree(m);
        cudaFree(v);
    }
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

// ---- host helpers
std::vector<float> random_vector(size_t n, unsigned seed, float lo, float hi) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}
std::vector<floatX> to_floatX(const std::vector<float>& x) {
    std::vector<floatX> out(x.size());
    for (size_t i = 0; i < x.size(); i++) out[i] = (floatX)x[i];
    return out;
}
std::vector<float> to_floats(const std::vector<floatX>& x) {
    std::vector<float> out(x.size());
    for (size_t i = 0; i < x.size(); i++) out[i] = (float)x[i];
    return out;
}
template <typename T>
std::vector<T> download(const T* device, size_t n) {
    std::vector<T> host(n);
    CUDA_CHECK(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
}
template <typename T>
void upload(T* device, const std::vector<T>& host) {
    CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
}
double relative_error(const std::vector<float>& out, const std::vector<float>& ref) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        diff += ((double)out[i] - ref[i]) * ((double)out[i] - ref[i]);
        norm += (double)ref[i] * ref[i];
    }
    return std::isnan(diff) ? INFINITY : std::sqrt(diff / norm);
}

// Three steps of every version from the same start against the reference; the versions' bits agree.
bool check_versions(size_t n) {
    const Hyper h;
    const std::vector<float> master0 = random_vector(n, 1, -1.0f, 1.0f);
    std::vector<std::vector<float>> grads;
    for (int step = 1; step <= 3; step++)
        grads.push_back(to_floats(to_floatX(random_vector(n, 10 + step, -2, 2))));
    std::vector<float> ref = master0, ref_m(n, 0.0f), ref_v(n, 0.0f);
    for (int step = 1; step <= 3; step++)
        adamw_update(ref.data(), ref_m.data(), ref_v.data(), grads[step - 1].data(), n, h.lr, h.beta1,
                     h.beta2, h.eps, h.weight_decay, h.grad_scale, step);

    bool ok = true;
    std::vector<floatX> first_params;
    Buffers b(n);
    for (int version = 1; version <= 3; version++) {
        upload(b.master, master0);
        upload(b.params, to_floatX(master0));
        CUDA_CHECK(cudaMemset(b.m, 0, n * sizeof(float)));
        CUDA_CHECK(cudaMemset(b.v, 0, n * sizeof(float)));
        for (int step = 1; step <= 3; step++) {
            upload(b.grads, to_floatX(grads[step - 1]));
            run_version(version, b, h, step);
        }
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<floatX> params = download(b.params, n);
        char name[160];
        snprintf(name, sizeof name, "adamw %s master (n=%zu)", version_name(version), n);
        ok &= report_check(name, relative_error(download(b.master, n), ref), 1e-5);
        snprintf(name, sizeof name, "adamw %s m, v (n=%zu)", version_name(version), n);
        ok &= report_check(
            name, std::max(relative_error(download(b.m, n), ref_m), relative_error(download(b.v, n), ref_v)),
            1e-5);
        snprintf(name, sizeof name, "adamw %s params (n=%zu)", version_name(version), n);
        ok &= report_check(name, relative_error(to_floats(params), ref), TOLERANCE);
        if (version == 1) {
            first_params = params;
        } else {
            const bool same = memcmp(params.data(), first_params.data(), n * sizeof(floatX)) == 0;
            printf("%s adamw %s params have version 1's bits\n", same ? "PASS" : "FAIL",
                   version_name(version));
            ok &= same;
        }
    }
    return ok;
}

void time_versions(size_t n) {
    const double ceiling = measure_copy_bandwidth_gbs();
    printf("copy bandwidth (read + write): %.1f GB/s\n", ceiling);
    printf("n=%zu parameters\n", n);
    const Hyper h;
    Buffers b(n);
    upload(b.master, random_vector(n, 1, -1.0f, 1.0f));
    upload(b.grads, to_floatX(random_vector(n, 2, -1.0f, 1.0f)));
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
}

int main() {
    print_device_header();
    bool ok = true;
    if (BENCH_ON_GPU) {
        ok &= check_versions(1000003);
        time_versions(124475904);  // GPT-2 124M with the vocabulary padded to 50304
    } else {
        ok &= check_versions(10007);
    }
    return ok ? 0 : 1;
}
