// The fused classifier (softmax cross-entropy and its gradient over the logits), from naive to the
// shipped kernel in kernels/classifier.h. Each version is checked against cpu/crossentropy.h, then
// (on a GPU) timed at GPT-2 shapes: N = 8192 rows (B·T, e.g. 8 × 1024), V = 50257, Vp = 50304.
//   1. naive: three passes over each row (max; exp and sum, writing exp(x − max) to an fp32 N × Vp
//      buffer; then a second kernel normalises the buffer into dlogits): 3 reads + 1 write of the row
//      in floatX and an fp32 round trip on top.
//   2. online softmax: the running max and sum come out of one read, so the buffer goes; the second
//      sweep recomputes the probabilities and writes dlogits over the logits. Scalar accesses.
//   3. 128-bit loads and stores (Packed128), the second read and the write with streaming hints: the
//      shipped fused_classifier (1024 threads per row). Also timed with 256 and 512 threads per row
//      (more rows in flight: less of the second read hits L2), and forward only.
// Then the whole LM head (product, classifier, both backward products) with the logits whole vs in
// chunks of rows (kernels/chunked_classifier.h), and the vocabulary-parallel classifier of tensor
// parallelism: one rank's calls on its slice of Vp / R columns (stats, combining the R gathered
// stats, gradient; the all-gather between them left out) for R = 2, 4, 8, checked against the
// reference on the whole rows, then timed beside the fused classifier on rows of the slice's width.
// Bandwidth counts the compulsory traffic of the op (classifier_bytes: the logits read once, dlogits
// written once), the same for every version, so the figures compare the versions' time.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cpu/crossentropy.h"
#include "dev/cuda/bench.h"
#include "kernels/chunked_classifier.h"
#include "kernels/classifier.h"

// ---- version 1: naive three-pass, fp32 probability buffer
__global__ void classifier_naive_exp_kernel(float* exps, float* row_max_out, float* row_sum_out,
                                            float* losses, const floatX* logits, const int* targets, int V,
                                            int Vp) {
    const int row = blockIdx.x;
    const floatX* x = logits + classifier_row_offset(row, Vp);
    float* e = exps + classifier_row_offset(row, Vp);
    float thread_max = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) thread_max = fmaxf(thread_max, to_float(x[j]));
    const float row_max = block_reduce_max(thread_max);
    float thread_sum = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        e[j] = expf(to_float(x[j]) - row_max);
        thread_sum += e[j];
    }
    const float row_sum = block_reduce_sum(thread_sum);
    if (threadIdx.x == 0) {
        row_max_out[row] = row_max;
        row_sum_out[row] = row_sum;
        losses[row] = row_max + logf(row_sum) - to_float(x[targets[row]]);
    }
}
__global__ void classifier_naive_gradient_kernel(floatX* dlogits, const float* exps, const float* row_sum,
                                                 const int* targets, float dloss, int N, int V, int Vp) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * Vp) return;
    const int row = (int)(i / Vp), column = (int)(i % Vp);
    float d = 0.0f;
    if (column < V) d = dloss * (exps[i] / row_sum[row] - (column == targets[row] ? 1.0f : 0.0f));
    dlogits[i] = from_float<floatX>(d);
}

// ---- version 2: online softmax in place, one element per thread per step
__global__ void classifier_online_scalar_kernel(floatX* logits, float* losses, float dloss,
                                                const int* targets, int V, int Vp) {
    const int row = blockIdx.x;
    floatX* x = logits + classifier_row_offset(row, Vp);
    const int target = targets[row];
    const float target_logit = threadIdx.x == 0 ? to_float(x[target]) : 0.0f;
    float running_max = -INFINITY, running_sum = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        const float value[1] = {to_float(x[j])};
        online_softmax_add<1>(running_max, running_sum, value);
    }
    const float row_max = block_reduce_max(running_max);
    const float row_sum =
        block_reduce_sum(running_max == -INFINITY ? 0.0f : running_sum * __expf(running_max - row_max));
    const float logsumexp = row_max + logf(row_sum);
    if (threadIdx.x == 0) losses[row] = logsumexp - target_logit;
    for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
        const float d =
            j < V ? dloss * (__expf(to_float(x[j]) - logsumexp) - (j == target ? 1.0f : 0.0f)) : 0.0f;
        x[j] = from_float<floatX>(d);
    }
}

// ---- the versions behind one signature: (logits in, dlogits written over them; losses)
struct Problem {
    int N, V, Vp;
    floatX* logits;
    float* losses;
    const int* targets;
    float dloss;
    float* exps;               // version 1's N × Vp buffer
    float *row_max, *row_sum;  // version 1's per-row values
};
void run_version(int version, const Problem& p, int block_size = kClassifierBlockSize) {
    switch (version) {
        case 1:
            LAUNCH(classifier_naive_exp_kernel, p.N, 1024, 0, 0, p.exps, p.row_max, p.row_sum, p.losses,
                   p.logits, p.targets, p.V, p.Vp);
            LAUNCH(classifier_naive_gradient_kernel, ceil_div((long long)p.N * p.Vp, 256), 256, 0, 0,
                   p.logits, p.exps, p.row_sum, p.targets, p.dloss, p.N, p.V, p.Vp);
            break;
        case 2:
            LAUNCH(classifier_online_scalar_kernel, p.N, 1024, 0, 0, p.logits, p.losses, p.dloss, p.targets,
                   p.V, p.Vp);
            break;
        case 3:
            if (block_size == kClassifierBlockSize) {
                fused_classifier(p.logits, p.losses, p.dloss, p.targets, p.N, p.V, p.Vp, true, 0);
            } else {
                LAUNCH(fused_classifier_kernel, p.N, block_size, 0, 0, p.logits, p.losses, p.dloss, p.targets,
                       p.V, p.Vp, true);
            }
            break;
    }
    CUDA_CHECK(cudaGetLastError());
}
const char* version_name(int version) {
    static const char* names[] = {"", "1 naive three-pass + fp32 buffer", "2 online softmax, scalar",
                                  "3 online softmax, 128-bit (shipped)"};
    return names[version];
}

struct HostCase {
    int N, V, Vp;
    std::vector<float> logits;  // rounded to floatX; padding columns random too (never read)
    std::vector<int> targets;
};
HostCase random_case(int N, int V, int Vp, unsigned seed) {
    HostCase c{N, V, Vp, std::vector<float>((size_t)N * Vp), std::vector<int>(N)};
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> logit(-8.0f, 8.0f);
    std::uniform_int_distribution<int> token(0, V - 1);
    for (float& x : c.logits) x = host_from_floatX(host_to_floatX(logit(rng)));
    for (int& t : c.targets) t = token(rng);
    return c;
}

struct DeviceBuffers {
    floatX* logits;
    float *losses, *exps, *row_max, *row_sum;
    int* targets;
    DeviceBuffers(int N, int Vp)
        : logits(device_buffer<floatX>((size_t)N * Vp)),
          losses(device_buffer<float>(N)),
          exps(device_buffer<float>((size_t)N * Vp)),
          row_max(device_buffer<float>(N)),
          row_sum(device_buffer<float>(N)),
          targets(device_buffer<int>(N)) {}
    ~DeviceBuffers() { device_free(logits, losses, exps, row_max, row_sum, targets); }
    Problem problem(int N, int V, int Vp, float dloss) const {
        return Problem{N, V, Vp, logits, losses, targets, dloss, exps, row_max, row_sum};
    }
};

// Every version against cpu/crossentropy.h on one case.
void check_versions(int N, int V, int Vp) {
    const HostCase c = random_case(N, V, Vp, 1000 + N + V);
    const float dloss = 1.0f / N;
    std::vector<float> ref_losses(N), logsumexp(N), ref_dlogits((size_t)N * Vp, 0.0f);
    crossentropy_forward(ref_losses.data(), logsumexp.data(), c.logits.data(), c.targets.data(), N, V, Vp);
    crossentropy_backward(ref_dlogits.data(), c.logits.data(), logsumexp.data(), c.targets.data(), dloss, N,
                          V, Vp);

    DeviceBuffers d(N, Vp);
    copy_to_device(d.targets, c.targets);
    const std::string shape =
        " (N=" + std::to_string(N) + " V=" + std::to_string(V) + " Vp=" + std::to_string(Vp) + ")";
    for (int version = 1; version <= 3; version++) {
        copy_floats_to_device(d.logits, c.logits);
        poison(d.losses, N);
        run_version(version, d.problem(N, V, Vp, dloss));
        const std::string name = std::string("classifier ") + version_name(version);
        report_check(name + " losses" + shape, relative_error(host_copy_of(d.losses, N), ref_losses), 1e-5);
        report_check(name + " dlogits" + shape,
                     relative_error(host_floats_of(d.logits, c.logits.size()), ref_dlogits));
    }
}

void time_versions(int N, int V, int Vp) {
    const double ceiling = measure_and_print_copy_bandwidth();
    printf("N=%d V=%d Vp=%d: %.1f MB of logits\n", N, V, Vp, (double)N * Vp * sizeof(floatX) / 1e6);
    const HostCase c = random_case(N, V, Vp, 7);
    DeviceBuffers d(N, Vp);
    copy_to_device(d.targets, c.targets);
    copy_floats_to_device(d.logits, c.logits);
    // Each call overwrites the logits with dlogits: later calls run on those (finite) values, which
    // costs the same time.
    const Problem p = d.problem(N, V, Vp, 1.0f / N);
    const double bytes = classifier_bytes(N, Vp, true);
    for (int version = 1; version <= 3; version++)
        report_bandwidth(version_name(version), time_median_ms([&] { run_version(version, p); }), bytes,
                         ceiling);
    for (int block_size : {256, 512}) {
        char name[80];
        snprintf(name, sizeof name, "3 shipped kernel, block of %d", block_size);
        report_bandwidth(name, time_median_ms([&] { run_version(3, p, block_size); }), bytes, ceiling);
    }
    copy_floats_to_device(d.logits, c.logits);
    const double forward_ms =
        time_median_ms([&] { fused_classifier(p.logits, p.losses, p.dloss, p.targets, N, V, Vp, false, 0); });
    report_bandwidth("3 shipped, losses only (no dlogits)", forward_ms, classifier_bytes(N, Vp, false),
                     ceiling);
}

// The whole LM head (logits product, classifier, both backward products) with the N × Vp logits whole
// vs in chunks of rows (kernels/chunked_classifier.h): time and the logits memory each needs.
void time_lm_head(int N, int C, int V, int Vp) {
    floatX *lnf = device_buffer<floatX>((size_t)N * C), *wte = device_buffer<floatX>((size_t)Vp * C);
    floatX *d_lnf = device_buffer<floatX>((size_t)N * C), *d_wte = device_buffer<floatX>((size_t)Vp * C);
    floatX* logits = device_buffer<floatX>((size_t)N * Vp);
    int* targets = device_buffer<int>(N);
    float* losses = device_buffer<float>(N);
    copy_floats_to_device(lnf, random_floats((size_t)N * C, 11, -1.0f, 1.0f));
    copy_floats_to_device(wte, random_floats((size_t)Vp * C, 12, -0.05f, 0.05f));
    copy_to_device(targets, random_tokens(N, V, 13));
    CUDA_CHECK(cudaMemset(d_wte, 0, (size_t)Vp * C * sizeof(floatX)));
    const double flops = 6.0 * N * (double)C * Vp;
    const double whole = time_median_ms([&] {
        matmul_forward(logits, lnf, wte, nullptr, N, C, Vp, 0);
        fused_classifier(logits, losses, 1.0f / N, targets, N, V, Vp, true, 0);
        matmul_backward(d_lnf, d_wte, nullptr, nullptr, logits, lnf, wte, N, C, Vp, 0);
    });
    printf("LM head N=%d C=%d Vp=%d, logits whole (%.0f MB): %9.3f ms %9.1f TFLOP/s\n", N, C, Vp,
           (double)N * Vp * sizeof(floatX) / 1e6, whole, flops / (whole * 1e-3) / 1e12);
    for (int rows : {512, 1024, 2048, 4096}) {
        const double ms = time_median_ms([&] {
            chunked_classifier(losses, d_lnf, d_wte, logits, lnf, wte, targets, N, C, V, Vp, rows, 1.0f / N, true, 0);
        });
        printf("LM head, chunks of %4d rows (%.0f MB):       %9.3f ms %9.1f TFLOP/s\n", rows,
               chunked_classifier_buffer_bytes(rows, Vp) / 1e6, ms, flops / (ms * 1e-3) / 1e12);
    }
    device_free(lnf, wte, d_lnf, d_wte, logits, targets, losses);
}

// The vocabulary-parallel classifier over R slices of Vs = Vp / R columns: every slice's three calls
// checked against the reference on the whole rows; on a GPU, the last slice's (it ends in the padding)
// calls timed, as one rank runs them, beside fused_classifier on rows of Vs columns.
void vocab_slices(int N, int V, int Vp, int R, double ceiling) {
    const HostCase c = random_case(N, V, Vp, 31 + R);
    const int Vs = Vp / R;
    const float dloss = 1.0f / N;
    std::vector<float> ref_losses(N), logsumexp(N), ref_dlogits((size_t)N * Vp, 0.0f);
    crossentropy_forward(ref_losses.data(), logsumexp.data(), c.logits.data(), c.targets.data(), N, V, Vp);
    crossentropy_backward(ref_dlogits.data(), c.logits.data(), logsumexp.data(), c.targets.data(), dloss, N,
                          V, Vp);
    int* targets = device_buffer<int>(N);
    copy_to_device(targets, c.targets);
    float *gathered = device_buffer<float>((size_t)R * N * kClassifierStats), *lse = device_buffer<float>(N),
          *losses = device_buffer<float>(N);
    std::vector<floatX*> slices(R);
    auto valid = [&](int r) { return std::min(std::max(V - r * Vs, 0), Vs); };
    auto stats = [&](int r) {
        classifier_slice_stats(gathered + (size_t)r * N * kClassifierStats, slices[r], targets, N, r * Vs,
                               valid(r), Vs, 0);
    };
    auto gradient = [&](int r) {
        classifier_slice_gradient(slices[r], lse, targets, dloss, N, r * Vs, valid(r), Vs, 0);
    };
    poison(gathered, (size_t)R * N * kClassifierStats);
    poison(lse, N);
    poison(losses, N);
    for (int r = 0; r < R; r++) {
        std::vector<float> slice((size_t)N * Vs);
        for (int n = 0; n < N; n++)
            for (int j = 0; j < Vs; j++) slice[(size_t)n * Vs + j] = c.logits[(size_t)n * Vp + r * Vs + j];
        slices[r] = device_buffer<floatX>((size_t)N * Vs);
        copy_floats_to_device(slices[r], slice);
        stats(r);
    }
    classifier_combine_stats(lse, losses, gathered, R, N, 0);
    std::vector<float> dlogits((size_t)N * Vp);
    for (int r = 0; r < R; r++) {
        gradient(r);
        const std::vector<float> slice = host_floats_of(slices[r], (size_t)N * Vs);
        for (int n = 0; n < N; n++)
            std::copy(slice.begin() + (size_t)n * Vs, slice.begin() + (size_t)(n + 1) * Vs,
                      dlogits.begin() + (size_t)n * Vp + r * Vs);
    }
    const std::string shape = " (N=" + std::to_string(N) + " V=" + std::to_string(V) +
                              " Vp=" + std::to_string(Vp) + " R=" + std::to_string(R) + ")";
    report_check("vocabulary slices losses" + shape, relative_error(host_copy_of(losses, N), ref_losses),
                 1e-5);
    report_check("vocabulary slices dlogits" + shape, relative_error(dlogits, ref_dlogits));

    if (BENCH_ON_GPU) {  // one rank's calls on the last slice (they run on its gradient: the same time)
        const int r = R - 1;
        const double S = sizeof(floatX), rows = (double)N * Vs * S;
        char name[80];
        snprintf(name, sizeof name, "slice stats, R=%d (Vs=%d)", R, Vs);
        report_bandwidth(name, time_median_ms([&] { stats(r); }), rows + 16.0 * N, ceiling);
        snprintf(name, sizeof name, "combine stats, R=%d", R);
        report_bandwidth(name,
                         time_median_ms([&] { classifier_combine_stats(lse, losses, gathered, R, N, 0); }),
                         12.0 * R * N + 8.0 * N, ceiling);
        snprintf(name, sizeof name, "slice gradient, R=%d", R);
        report_bandwidth(name, time_median_ms([&] { gradient(r); }), 2 * rows + 8.0 * N, ceiling);
        snprintf(name, sizeof name, "fused classifier on Vs=%d columns", Vs);
        report_bandwidth(name, time_median_ms([&] {
                             fused_classifier(slices[r], losses, dloss, targets, N, Vs, Vs, true, 0);
                         }),
                         classifier_bytes(N, Vs, true), ceiling);
    }
    for (floatX* slice : slices) device_free(slice);
    device_free(targets, gathered, lse, losses);
}

int main() {
    print_device_header();
    if (BENCH_ON_GPU) {
        check_versions(64, 50257, 50304);
        check_versions(37, 1000, 1024);
        time_versions(8192, 50257, 50304);
        time_lm_head(8192, 768, 50257, 50304);
        const double ceiling = measure_copy_bandwidth_gbs();
        for (int R : {2, 4, 8}) vocab_slices(8192, 50257, 50304, R, ceiling);
    } else {
        check_versions(4, 50257, 50304);
        check_versions(37, 997, 1008);
        vocab_slices(3, 50257, 50304, 4, 0);
        vocab_slices(5, 100, 128, 8, 0);
    }
    return bench_exit_status();
}
