// kernels/wgmma.h: the warpgroup MMA wrappers against the register-fragment and shared-memory
// layouts written out by hand from the PTX ISA, for m64nNk16 (N = 32, 64, 128), A from registers or
// from shared memory, A and B K-major and MN-major, descriptors without swizzle and with 32B/64B/128B
// swizzle. Under the emulator this checks the twin; built by nvcc and run on an H100, the same
// expectations check the twin's layouts against the hardware.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/wgmma.h"
#include "test/kernels/kernel_test.h"

namespace {

#ifdef __CUDACC__
constexpr bool kEmulated = false;
#else
constexpr bool kEmulated = true;
#endif

void skip_unless_hopper() {
    if (!hopper_units_available()) SKIP("needs an sm_90 device");
}
uint16_t bf16_bits(float x) {
    __nv_bfloat16 h = __float2bfloat16(x);
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}
float bf16_value(uint16_t b) {
    __nv_bfloat16 h;
    memcpy((void*)&h, &b, 2);
    return __bfloat162float(h);
}

// The test's own placement of element (mn, k) of an operand in a shared-memory image, written from
// the PTX ISA's description of the canonical layouts (8-row core matrices; groups of 8 rows SBO
// apart; without swizzle, K chunks LBO apart) and of the swizzle as a permutation of the 16-byte
// chunks of each row: in an aligned atom of 8 rows of S bytes, chunk c of row r is stored at chunk
// c ^ x(r), x(r) = (r·S/128) mod (S/16) (128B: c ^ r; 64B: c ^ (r/2); 32B: c ^ (r/4)). Kept apart
// from wgmma_operand_address(), which works on address bits, on purpose: it is the reference.
uint32_t reference_k_major(int mn, int k, int S, uint32_t sbo, uint32_t lbo) {
    if (S == 0) return (uint32_t)((mn / 8) * sbo + (k / 8) * lbo + (mn % 8) * 16 + (k % 8) * 2);
    const int chunks = S / 16, r = mn % 8, c = k / 8;
    const int xor_term = ((r * S) / 128) % 8 % chunks;
    return (uint32_t)((mn / 8) * sbo + r * S + ((c ^ xor_term) * 16) + (k % 8) * 2);
}
uint32_t reference_mn_major(int mn, int k, int S, uint32_t sbo, uint32_t lbo) {
    if (S == 0) return (uint32_t)((mn / 8) * sbo + (k / 8) * lbo + (k % 8) * 16 + (mn % 8) * 2);
    const int per_row = S / 2, chunks = S / 16, r = k % 8, c = mn % per_row / 8;
    const int xor_term = ((r * S) / 128) % 8 % chunks;
    return (uint32_t)((mn / per_row) * lbo + (k / 8) * sbo + r * S + ((c ^ xor_term) * 16) + (mn % 8) * 2);
}

// One warpgroup: fills shared memory from the host images, one mma (A from shared memory or from
// registers), writes every thread's accumulators to out[thread][r] in register order.
template <int N, int kTransA, int kTransB, bool kARegisters>
__global__ void wgmma_kernel(float* out, const uint16_t* image, int image_elems, uint32_t a_offset, uint32_t b_offset,
                             uint64_t a_fields, uint64_t b_fields, const uint32_t* a_regs, float init) {
    DYNAMIC_SHARED(unsigned char, raw);
    unsigned char* base = align_shared<unsigned char>(raw, 1024);
    uint16_t* smem = reinterpret_cast<uint16_t*>(base);
    for (int i = threadIdx.x; i < image_elems; i += blockDim.x) smem[i] = image[i];
    fence_proxy_async_shared();  // ordinary stores, read by wgmma (the async proxy)
    __syncthreads();
    // a_fields / b_fields: LBO (low 32 bits) and SBO (bits 32..61) and swizzle (62..63).
    const uint64_t da = wgmma_descriptor(base + a_offset, (uint32_t)a_fields & 0xffffff, (uint32_t)(a_fields >> 32) & 0xffffff,
                                         (WgmmaSwizzle)(a_fields >> 62));
    const uint64_t db = wgmma_descriptor(base + b_offset, (uint32_t)b_fields & 0xffffff, (uint32_t)(b_fields >> 32) & 0xffffff,
                                         (WgmmaSwizzle)(b_fields >> 62));
    float d[N / 2];
    for (int r = 0; r < N / 2; r++) d[r] = init;
    uint32_t a[4];
    for (int j = 0; j < 4; j++) a[j] = kARegisters ? a_regs[threadIdx.x * 4 + j] : 0;
    wgmma_fence();
    if constexpr (kARegisters) wgmma_rs<N, kTransB>(d, a, db, 1);
    else wgmma_ss<N, kTransA, kTransB>(d, da, db, 1);
    wgmma_commit_group();
    wgmma_wait_group<0, N>(d);
    for (int r = 0; r < N / 2; r++) out[threadIdx.x * (N / 2) + r] = d[r];
}

uint64_t fields(uint32_t lbo, uint32_t sbo, WgmmaSwizzle s) {
    return (uint64_t)lbo | (uint64_t)sbo << 32 | (uint64_t)s << 62;
}
WgmmaSwizzle mode_of(int S) {
    return S == 128 ? WgmmaSwizzle::B128 : S == 64 ? WgmmaSwizzle::B64 : S == 32 ? WgmmaSwizzle::B32 : WgmmaSwizzle::None;
}

// The strides and size of an operand of MN rows and 16 columns of K, packed as the canonical layout.
struct OperandLayout {
    uint32_t sbo, lbo, bytes;
    bool mn_major;
    int S;
    uint32_t offset(int mn, int k) const {
        return mn_major ? reference_mn_major(mn, k, S, sbo, lbo) : reference_k_major(mn, k, S, sbo, lbo);
    }
};
OperandLayout operand_layout(bool mn_major, int S, int MN) {
    if (!mn_major)  // MN rows of 16 elements; without swizzle the two 8-column halves LBO apart
        return S == 0 ? OperandLayout{256, 128, (uint32_t)(MN / 8) * 256, false, S}
                      : OperandLayout{8u * S, 0, (uint32_t)(MN / 8) * 8 * S, false, S};
    if (S == 0)  // 16 rows (k) of MN elements: next 8 of MN the next core matrix, next 8 of K after all
        return OperandLayout{128, (uint32_t)(MN / 8) * 128, (uint32_t)(MN / 8) * 256, true, S};
    // Swizzled: next 8 rows of K SBO apart, next S/2 columns of MN LBO apart (after both K groups).
    return OperandLayout{8u * S, 16u * S, (uint32_t)(MN / (S / 2)) * 16 * S, true, S};
}

// A (64×16) and B (16×N) with given values, placed by the reference functions, each K-major or
// MN-major; checks every thread's every accumulator against D = A·B + init, row and column taken
// from the hand-written fragment layout: d[r] of thread i is (16·(i/32) + (i%32)/4 + 8·((r/2)%2),
// 8·(r/4) + 2·(i%4) + r%2).
template <int N, int kTransA, int kTransB, bool kARegisters>
void check_case(int S_a, int S_b, const std::vector<float>& A, const std::vector<float>& B, float init, const char* what) {
    // Operand images: A at byte 0, B after it (1024-aligned).
    const OperandLayout a = operand_layout(kTransA, S_a, 64), b = operand_layout(kTransB, S_b, N);
    const uint32_t b_offset = (a.bytes + 1023) / 1024 * 1024;
    const int image_elems = (int)(b_offset + b.bytes) / 2;
    std::vector<uint16_t> image(image_elems, bf16_bits(NAN));
    for (int i = 0; i < 64; i++)
        for (int k = 0; k < 16; k++) image[a.offset(i, k) / 2] = bf16_bits(A[i * 16 + k]);
    for (int k = 0; k < 16; k++)
        for (int j = 0; j < N; j++) image[(b_offset + b.offset(j, k)) / 2] = bf16_bits(B[k * N + j]);
    // A as registers: thread i, element j of its 4 registers (low half first) holds row
    // 16·(i/32) + (i%32)/4 + 8·((j/2)%2), column 2·(i%4) + j%2 + 8·(j/4).
    std::vector<uint32_t> regs(128 * 4);
    for (int i = 0; i < 128; i++)
        for (int j = 0; j < 8; j++) {
            const int row = 16 * (i / 32) + (i % 32) / 4 + 8 * ((j / 2) % 2), col = 2 * (i % 4) + j % 2 + 8 * (j / 4);
            regs[i * 4 + j / 2] |= (uint32_t)bf16_bits(A[row * 16 + col]) << (16 * (j % 2));
        }
    uint16_t* d_image = device_copy_of(image);
    uint32_t* d_regs = device_copy_of(regs);
    float* d_out = device_poisoned<float>(128 * N / 2);
    const size_t smem = b_offset + b.bytes + 1024;
    CUDA_CHECK(cudaFuncSetAttribute((wgmma_kernel<N, kTransA, kTransB, kARegisters>),
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10));
    LAUNCH((wgmma_kernel<N, kTransA, kTransB, kARegisters>), 1, 128, smem, 0, d_out, d_image, image_elems, 0u,
           b_offset, fields(a.lbo, a.sbo, mode_of(S_a)), fields(b.lbo, b.sbo, mode_of(S_b)), d_regs, init);
    CUDA_CHECK(cudaGetLastError());
    std::vector<float> out = host_copy_of(d_out, 128 * N / 2);
    int bad = 0;
    for (int i = 0; i < 128; i++)
        for (int r = 0; r < N / 2; r++) {
            const int row = 16 * (i / 32) + (i % 32) / 4 + 8 * ((r / 2) % 2), col = 8 * (r / 4) + 2 * (i % 4) + r % 2;
            double want = init;
            for (int k = 0; k < 16; k++)
                want += (double)bf16_value(bf16_bits(A[row * 16 + k])) * bf16_value(bf16_bits(B[k * N + col]));
            const float got = out[i * (N / 2) + r];
            if (!(std::fabs(got - want) <= 1e-4 * (1 + std::fabs(want))) && bad++ < 4)
                CHECK_MSG(false, "%s: thread %d d[%d] (row %d col %d): got %g, want %g", what, i, r, row, col, got, want);
        }
    CHECK_MSG(bad == 0, "%s: %d accumulators wrong", what, bad);
    CUDA_CHECK(cudaFree(d_image));
    CUDA_CHECK(cudaFree(d_regs));
    CUDA_CHECK(cudaFree(d_out));
}

// Values that identify their position: A[i][k] = i for k = 0, 1 for k = 1, else 0; B[0][j] = 1,
// B[1][j] = 64·j: D[i][j] = i + 64·j, exact in bf16 products and fp32 sums.
template <int N>
void identifying_operands(std::vector<float>& A, std::vector<float>& B) {
    A.assign(64 * 16, 0.0f);
    B.assign(16 * N, 0.0f);
    for (int i = 0; i < 64; i++) A[i * 16 + 0] = (float)i, A[i * 16 + 1] = 1.0f;
    for (int j = 0; j < N; j++) B[0 * N + j] = 1.0f, B[1 * N + j] = 64.0f * j;
}

TEST(wgmma_accumulator_layout_matches_ptx_isa) {
    skip_unless_hopper();
    std::vector<float> A, B;
    identifying_operands<64>(A, B);
    check_case<64, 0, 0, false>(0, 0, A, B, 0.0f, "m64n64k16 no swizzle, D = i + 64 j");
    identifying_operands<128>(A, B);
    check_case<128, 0, 0, false>(0, 0, A, B, 0.5f, "m64n128k16 no swizzle, D = i + 64 j + 0.5");
    identifying_operands<32>(A, B);
    check_case<32, 0, 0, false>(0, 0, A, B, 0.0f, "m64n32k16 no swizzle");
}

TEST(wgmma_layout_entries_match_ptx_isa) {
    // Entries read off the PTX ISA's figures for m64nNk16 (row, column).
    WgmmaIndex e = wgmma_d_element(0, 0);
    CHECK(e.row == 0 && e.col == 0);
    e = wgmma_d_element(5, 3);  // lane 5: group 1, t 1; d3: row +8, column 2t+1
    CHECK(e.row == 9 && e.col == 3);
    e = wgmma_d_element(37, 6);  // warp 1, lane 5; d6: column block 1, row +8, column 8+2
    CHECK(e.row == 25 && e.col == 10);
    e = wgmma_d_element(127, 63);  // warp 3, lane 31: group 7, t 3; d63: block 15, row +8, column 127
    CHECK(e.row == 63 && e.col == 127);
    e = wgmma_a_element(5, 5);  // a5: row g, column 2t+1+8
    CHECK(e.row == 1 && e.col == 11);
    e = wgmma_a_element(70, 2);  // warp 2, lane 6: g 1, t 2; a2: row g+8, column 2t
    CHECK(e.row == 41 && e.col == 4);
}

TEST(wgmma_a_from_registers_and_b_swizzled) {
    skip_unless_hopper();
    std::vector<float> A = random_floats(64 * 16, 1), B = random_floats(16 * 64, 2);
    check_case<64, 0, 0, true>(0, 0, A, B, 0.0f, "A registers, B K-major no swizzle");
    check_case<64, 0, 0, true>(0, 128, A, B, 0.0f, "A registers, B K-major 128B swizzle");
    check_case<64, 0, 1, true>(0, 128, A, B, 0.0f, "A registers, B MN-major 128B swizzle");
    std::vector<float> B128 = random_floats(16 * 128, 3);
    check_case<128, 0, 1, true>(0, 128, A, B128, 0.25f, "A registers, B MN-major 128B swizzle, n128 (two atoms)");
    check_case<128, 0, 1, true>(0, 64, A, B128, 0.0f, "A registers, B MN-major 64B swizzle, n128");
}

TEST(wgmma_shared_operands_every_swizzle) {
    skip_unless_hopper();
    std::vector<float> A = random_floats(64 * 16, 4), B = random_floats(16 * 64, 5);
    for (int S : {0, 32, 64, 128}) {
        char what[80];
        snprintf(what, sizeof what, "A and B K-major, swizzle %d bytes", S);
        check_case<64, 0, 0, false>(S, S, A, B, 0.0f, what);
    }
    check_case<64, 0, 1, false>(128, 32, A, B, 0.0f, "A K-major 128B, B MN-major 32B");
    check_case<64, 0, 1, false>(64, 0, A, B, 0.0f, "A K-major 64B, B MN-major no swizzle");
    check_case<64, 1, 0, false>(128, 128, A, B, 0.0f, "A M-major 128B (one atom), B K-major 128B");
    check_case<64, 1, 1, false>(64, 64, A, B, 0.0f, "A M-major 64B (two atoms), B MN-major 64B");
    check_case<64, 1, 0, false>(0, 32, A, B, 0.0f, "A M-major no swizzle, B K-major 32B");
}

// Two groups in flight: G1 = A·B into d1, G2 into d2; wait_group 1 completes G1 only.
template <int N>
__global__ void pipeline_kernel(float* out, const uint16_t* image, int image_elems) {
    DYNAMIC_SHARED(unsigned char, raw);
    unsigned char* base = align_shared<unsigned char>(raw, 1024);
    uint16_t* smem = reinterpret_cast<uint16_t*>(base);
    for (int i = threadIdx.x; i < image_elems; i += blockDim.x) smem[i] = image[i];
    fence_proxy_async_shared();
    __syncthreads();
    const uint64_t da = wgmma_descriptor(base, 128, 256, WgmmaSwizzle::None);
    const uint64_t db = wgmma_descriptor(base + 2048, 128, 256, WgmmaSwizzle::None);
    float d1[N / 2], d2[N / 2];
    for (int r = 0; r < N / 2; r++) d1[r] = d2[r] = 1.0f;
    wgmma_fence();
    wgmma_ss<N>(d1, da, db, 1);
    wgmma_commit_group();
    const float early = d1[0];  // BUG on purpose: read before any wait
    wgmma_ss<N>(d2, da, db, 0);
    wgmma_commit_group();
    wgmma_wait_group<1, N>(d1);
    out[threadIdx.x * 4 + 0] = early;
    out[threadIdx.x * 4 + 1] = d1[0];
    out[threadIdx.x * 4 + 2] = d2[0];  // BUG on purpose: its group may still be pending
    wgmma_wait_group<0, N>(d2);
    out[threadIdx.x * 4 + 3] = d2[0];
}

TEST(wgmma_results_appear_only_at_wait_group) {
    skip_unless_hopper();
    std::vector<float> A, B;
    identifying_operands<64>(A, B);
    std::vector<uint16_t> image(2048 / 2 + 64 * 16, 0);
    for (int i = 0; i < 64; i++)
        for (int k = 0; k < 16; k++) image[reference_k_major(i, k, 0, 256, 128) / 2] = bf16_bits(A[i * 16 + k]);
    for (int k = 0; k < 16; k++)
        for (int j = 0; j < 64; j++) image[(2048 + reference_k_major(j, k, 0, 256, 128)) / 2] = bf16_bits(B[k * 64 + j]);
    uint16_t* d_image = device_copy_of(image);
    float* d_out = device_poisoned<float>(128 * 4);
    LAUNCH(pipeline_kernel<64>, 1, 128, 2048 + 64 * 16 * 2 + 1024, 0, d_out, d_image, (int)image.size());
    CUDA_CHECK(cudaGetLastError());
    std::vector<float> out = host_copy_of(d_out, 128 * 4);
    for (int i = 0; i < 128; i++) {
        const WgmmaIndex e = wgmma_d_element(i, 0);
        const float want = (float)(e.row + 64 * e.col);
        CHECK_MSG(out[i * 4 + 1] == want + 1.0f, "thread %d: D after wait_group 1: %g, want %g", i, out[i * 4 + 1], want + 1);
        CHECK_MSG(out[i * 4 + 3] == want, "thread %d: D after wait_group 0: %g, want %g", i, out[i * 4 + 3], want);
        if (kEmulated) {  // the twin: undefined values are NaN until the wait that completes them
            CHECK_MSG(std::isnan(out[i * 4 + 0]), "thread %d read an accumulator before waiting: %g", i, out[i * 4]);
            CHECK_MSG(std::isnan(out[i * 4 + 2]), "thread %d read a pending group's accumulator: %g", i, out[i * 4 + 2]);
        }
    }
    CUDA_CHECK(cudaFree(d_image));
    CUDA_CHECK(cudaFree(d_out));
}

#ifndef __CUDACC__
// Emulator only: each ordering rule broken on purpose, and what the twin makes of it. The kernel is
// pipeline_kernel's single product (D = i + 64 j, no swizzle) with one step left out or added.
enum class Misuse { None, NoProxyFence, NoWgmmaFence, NoCommit, OperandOverwritten, WarpsDisagree };
__global__ void misuse_kernel(float* out, const uint16_t* image, int image_elems, Misuse misuse) {
    DYNAMIC_SHARED(unsigned char, raw);
    unsigned char* base = align_shared<unsigned char>(raw, 1024);
    uint16_t* smem = reinterpret_cast<uint16_t*>(base);
    for (int i = threadIdx.x; i < image_elems; i += blockDim.x) smem[i] = image[i];
    if (misuse != Misuse::NoProxyFence) fence_proxy_async_shared();
    __syncthreads();
    const bool odd_warp = misuse == Misuse::WarpsDisagree && threadIdx.x / 32 == 1;
    const uint64_t da = wgmma_descriptor(base, 128, 256, WgmmaSwizzle::None);
    const uint64_t db = wgmma_descriptor(base + 2048 + (odd_warp ? 16 : 0), 128, 256, WgmmaSwizzle::None);
    float d[32];
    for (int r = 0; r < 32; r++) d[r] = 0.0f;
    if (misuse != Misuse::NoWgmmaFence) wgmma_fence();
    wgmma_ss<64>(d, da, db, 0);
    if (misuse != Misuse::NoCommit) wgmma_commit_group();
    if (misuse == Misuse::OperandOverwritten) {  // B zeroed (and made visible) before the wait
        for (int i = 1024 + threadIdx.x; i < image_elems; i += blockDim.x) smem[i] = 0;
        fence_proxy_async_shared();
    }
    wgmma_wait_group<0, 64>(d);
    out[threadIdx.x] = d[0];
}

TEST(wgmma_twin_turns_each_missing_step_into_a_wrong_result_or_an_error) {
    std::vector<float> A, B;
    identifying_operands<64>(A, B);
    std::vector<uint16_t> image(2048 / 2 + 64 * 16, 0);
    for (int i = 0; i < 64; i++)
        for (int k = 0; k < 16; k++)
            image[reference_k_major(i, k, 0, 256, 128) / 2] = bf16_bits(A[i * 16 + k]);
    for (int k = 0; k < 16; k++)
        for (int j = 0; j < 64; j++)
            image[(2048 + reference_k_major(j, k, 0, 256, 128)) / 2] = bf16_bits(B[k * 64 + j]);
    uint16_t* d_image = device_copy_of(image);
    float* d_out = device_poisoned<float>(128);
    auto run = [&](Misuse m, std::vector<float>* out) {
        LAUNCH(misuse_kernel, 1, 128, 2048 + 64 * 16 * 2 + 1024, 0, d_out, d_image, (int)image.size(), m);
        const std::string report = emu::last_kernel_report();
        const cudaError_t err = cudaGetLastError();
        if (out) *out = host_copy_of(d_out, 128);
        return err == cudaSuccess ? std::string() : report;
    };
    // Thread i's d[0]: row 16 (i/32) + (i%32)/4, column 2 (i%4).
    auto want = [](int i) { return (float)(16 * (i / 32) + (i % 32) / 4 + 64 * 2 * (i % 4)); };
    std::vector<float> out;
    CHECK(run(Misuse::None, &out).empty());
    for (int i = 0; i < 128; i++) CHECK_MSG(out[i] == want(i), "thread %d: %g, want %g", i, out[i], want(i));
    CHECK(run(Misuse::NoProxyFence, &out).empty());  // the async proxy never saw the operands
    for (int i = 0; i < 128; i++) CHECK_MSG(std::isnan(out[i]), "no proxy fence, thread %d: %g", i, out[i]);
    CHECK(run(Misuse::NoCommit, &out).empty());  // never committed: wait_group does not complete it
    for (int i = 0; i < 128; i++) CHECK_MSG(std::isnan(out[i]), "no commit, thread %d: %g", i, out[i]);
    CHECK(run(Misuse::OperandOverwritten, &out).empty());  // the product reads B when it executes
    for (int i = 0; i < 128; i++) CHECK_MSG(out[i] == 0.0f, "operand overwritten, thread %d: %g", i, out[i]);
    std::string report = run(Misuse::NoWgmmaFence, nullptr);
    CHECK_MSG(report.find("without a wgmma.fence") != std::string::npos, "no wgmma.fence: '%s'",
              report.c_str());
    report = run(Misuse::WarpsDisagree, nullptr);
    CHECK_MSG(report.find("differs from another warp") != std::string::npos, "warps disagree: '%s'",
              report.c_str());
    CUDA_CHECK(cudaFree(d_image));
    CUDA_CHECK(cudaFree(d_out));
}
#endif

TEST(wgmma_descriptor_fields) {
    // The encoding (PTX ISA "Matrix Descriptor Format"), checked on the host.
    const uint64_t d = ((uint64_t)(0x12340 >> 4)) | (uint64_t)(2048 >> 4) << 16 | (uint64_t)(1024 >> 4) << 32 |
                       (uint64_t)1 << 62;
    CHECK(wgmma_operand_address(d, false, 0, 0) == (0x12340u ^ (((0x12340u >> 7) & 7) << 4)));
    // K-major 128B: element (9, 8) is row 1 of the second 8-row group, chunk 1 -> 1 ^ 1 = 0.
    const uint64_t z = (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
    CHECK(wgmma_operand_address(z, false, 9, 8) == 1024 + 128 + 0);
    CHECK(wgmma_operand_address(z, false, 9, 0) == 1024 + 128 + 16);
}

}  // namespace
