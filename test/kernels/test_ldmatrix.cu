// kernels/ldmatrix.h: the ldmatrix wrappers (x1, x2, x4, with and without .trans) against the
// fragment layout written out by hand from the PTX ISA, their use as mma operands, and the XOR
// swizzle's bank-conflict freedom. Under the emulator this checks the host twin; built by nvcc and
// run on a GPU, the same expectations check the twin's layout against the hardware.
#include <cstdint>
#include <vector>

#include "kernels/ldmatrix.h"
#include "kernels/mma.h"
#include "test/kernels/kernel_test.h"

namespace {

// Matrix element ids: matrix m, row r, column c holds the 16-bit value 64·m + 8·r + c.
__host__ __device__ constexpr uint16_t element_id(int matrix, int row, int col) {
    return (uint16_t)(64 * matrix + 8 * row + col);
}

// The 32 rows of four matrices live in shared memory in a scrambled order, one 16-byte row per
// slot, so that each lane must really supply its own row's address: row r of matrix m sits in slot
// slot_of(8·m + r).
__host__ __device__ inline int slot_of(int row_index) { return (row_index * 13 + 5) % 32; }

// Each lane loads with the given variant and writes its registers to out[lane·4 + i].
template <int kCount, bool kTrans>
__global__ void ldmatrix_kernel(uint32_t* out) {
    __shared__ __align__(16) uint16_t rows[32][8];
    const int lane = threadIdx.x;
    for (int i = 0; i < 8; i++) {  // lane fills row `lane` (matrix lane/8, row lane%8)
        rows[slot_of(lane)][i] = element_id(lane / 8, lane % 8, i);
    }
    __syncwarp();
    // Lanes past the matrices in use give another (valid) row: ldmatrix must ignore them.
    const int row_index = lane < 8 * kCount ? lane : (lane + 3) % (8 * kCount);
    const void* address = rows[slot_of(row_index)];
    uint32_t r[4] = {0, 0, 0, 0};
    if constexpr (kCount == 1 && !kTrans) ldmatrix_x1(r, address);
    if constexpr (kCount == 2 && !kTrans) ldmatrix_x2(r, address);
    if constexpr (kCount == 4 && !kTrans) ldmatrix_x4(r, address);
    if constexpr (kCount == 1 && kTrans) ldmatrix_x1_trans(r, address);
    if constexpr (kCount == 2 && kTrans) ldmatrix_x2_trans(r, address);
    if constexpr (kCount == 4 && kTrans) ldmatrix_x4_trans(r, address);
    for (int i = 0; i < 4; i++) out[lane * 4 + i] = r[i];
}

template <int kCount, bool kTrans>
void check_variant() {
    uint32_t* d_out = device_poisoned<uint32_t>(32 * 4);
    LAUNCH((ldmatrix_kernel<kCount, kTrans>), 1, 32, 0, 0, d_out);
    CUDA_CHECK(cudaGetLastError());
    std::vector<uint32_t> out = host_copy_of(d_out, 32 * 4);
    for (int lane = 0; lane < 32; lane++) {
        for (int m = 0; m < kCount; m++) {
            // PTX ISA: without .trans, lane l holds row l/4, columns 2(l%4) and 2(l%4)+1 of each
            // matrix; with .trans, column l/4, rows 2(l%4) and 2(l%4)+1. Low half first.
            const int g = lane / 4, p = lane % 4;
            const uint16_t lo = kTrans ? element_id(m, 2 * p, g) : element_id(m, g, 2 * p);
            const uint16_t hi = kTrans ? element_id(m, 2 * p + 1, g) : element_id(m, g, 2 * p + 1);
            const uint32_t want = (uint32_t)lo | (uint32_t)hi << 16;
            CHECK_MSG(out[lane * 4 + m] == want, "x%d%s lane %d matrix %d: got 0x%08x, want 0x%08x", kCount,
                      kTrans ? ".trans" : "", lane, m, out[lane * 4 + m], want);
        }
    }
    CUDA_CHECK(cudaFree(d_out));
}

TEST(ldmatrix_layout_entries_match_ptx_isa) {
    // Entries read off the PTX ISA's figure of an 8x8 matrix fragment (row, column).
    LdmatrixIndex e;
    e = ldmatrix_element(0, 0, false);
    CHECK(e.row == 0 && e.col == 0);
    e = ldmatrix_element(0, 1, false);
    CHECK(e.row == 0 && e.col == 1);
    e = ldmatrix_element(5, 0, false);
    CHECK(e.row == 1 && e.col == 2);
    e = ldmatrix_element(5, 1, false);
    CHECK(e.row == 1 && e.col == 3);
    e = ldmatrix_element(31, 1, false);
    CHECK(e.row == 7 && e.col == 7);
    e = ldmatrix_element(5, 0, true);
    CHECK(e.row == 2 && e.col == 1);
    e = ldmatrix_element(5, 1, true);
    CHECK(e.row == 3 && e.col == 1);
    e = ldmatrix_element(30, 0, true);
    CHECK(e.row == 4 && e.col == 7);
    // Each of the 64 elements goes to exactly one (lane, half), in both variants.
    for (int trans = 0; trans < 2; trans++) {
        std::vector<int> seen(64, 0);
        for (int lane = 0; lane < 32; lane++)
            for (int which = 0; which < 2; which++) {
                e = ldmatrix_element(lane, which, trans != 0);
                seen[e.row * 8 + e.col]++;
            }
        CHECK(seen == std::vector<int>(64, 1));
    }
}

TEST(ldmatrix_x1) { check_variant<1, false>(); }
TEST(ldmatrix_x2) { check_variant<2, false>(); }
TEST(ldmatrix_x4) { check_variant<4, false>(); }
TEST(ldmatrix_x1_trans) { check_variant<1, true>(); }
TEST(ldmatrix_x2_trans) { check_variant<2, true>(); }
TEST(ldmatrix_x4_trans) { check_variant<4, true>(); }

// ---- ldmatrix feeding mma: D = A·B with A (16×16) row-major in shared memory, and B (16×8) stored
// either as its transpose (8 rows of 16 k values: the "col" operand layout, loaded without .trans)
// or as is (16 rows of 8 n values, loaded with .trans). Both must give the same product.
__global__ void ldmatrix_mma_kernel(const __nv_bfloat16* A, const __nv_bfloat16* B, float* D_from_bt,
                                    float* D_from_b) {
    __shared__ __align__(16) __nv_bfloat16 a_s[16][16], bt_s[8][16], b_s[16][8];
    const int lane = threadIdx.x;
    for (int i = lane; i < 256; i += 32) a_s[i / 16][i % 16] = A[i];
    for (int i = lane; i < 128; i += 32) {
        b_s[i / 8][i % 8] = B[i];
        bt_s[i % 8][i / 8] = B[i];
    }
    __syncwarp();
    const int m = lane / 8, r = lane % 8;
    uint32_t a[4], b[2], b_trans[2];
    // A: matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
    ldmatrix_x4(a, &a_s[(m & 1) * 8 + r][(m >> 1) * 8]);
    // B from its transpose: matrices (n 0-7, k 0-7), (n 0-7, k 8-15); lanes 16-31 ignored.
    ldmatrix_x2(b, &bt_s[r][(m & 1) * 8]);
    // B as is, transposed on load: matrices (k 0-7, n 0-7), (k 8-15, n 0-7).
    ldmatrix_x2_trans(b_trans, &b_s[(m & 1) * 8 + r][0]);
    const float zero[4] = {0, 0, 0, 0};
    float d[4], d_trans[4];
    mma_m16n8k16_bf16(d, a, b, zero);
    mma_m16n8k16_bf16(d_trans, a, b_trans, zero);
    for (int i = 0; i < 4; i++) {
        const MmaIndex e = mma_c_element(lane, i);
        D_from_bt[e.row * 8 + e.col] = d[i];
        D_from_b[e.row * 8 + e.col] = d_trans[i];
    }
}

TEST(ldmatrix_fragments_feed_mma) {
    std::vector<float> a = random_floats(256, 21), b = random_floats(128, 22);
    std::vector<__nv_bfloat16> a16(256), b16(128);
    for (int i = 0; i < 256; i++) a16[i] = __float2bfloat16(a[i]);
    for (int i = 0; i < 128; i++) b16[i] = __float2bfloat16(b[i]);
    __nv_bfloat16 *d_a = device_copy_of(a16), *d_b = device_copy_of(b16);
    float *d_d1 = device_poisoned<float>(128), *d_d2 = device_poisoned<float>(128);
    LAUNCH(ldmatrix_mma_kernel, 1, 32, 0, 0, d_a, d_b, d_d1, d_d2);
    CUDA_CHECK(cudaGetLastError());
    std::vector<float> d1 = host_copy_of(d_d1, 128), d2 = host_copy_of(d_d2, 128);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            double ref = 0;
            for (int k = 0; k < 16; k++)
                ref += (double)__bfloat162float(a16[i * 16 + k]) * __bfloat162float(b16[k * 8 + j]);
            CHECK_NEAR(d1[i * 8 + j], ref, 1e-4);
            CHECK_NEAR(d2[i * 8 + j], ref, 1e-4);
        }
    CUDA_CHECK(cudaFree(d_a));
    CUDA_CHECK(cudaFree(d_b));
    CUDA_CHECK(cudaFree(d_d1));
    CUDA_CHECK(cudaFree(d_d2));
}

// ---- the swizzle: a permutation of each row's chunks, and the 8 rows of any ldmatrix matrix
// (rows 8i..8i+7 at one logical chunk) land on 8 different 16-byte slots of the 128-byte bank window.
template <int kChunks>
void check_swizzle() {
    for (int row = 0; row < 64; row++) {
        std::vector<int> seen(kChunks, 0);
        for (int c = 0; c < kChunks; c++) {
            const int s = swizzle_chunk<kChunks>(row, c);
            CHECK(s >= 0 && s < kChunks);
            seen[s]++;
        }
        CHECK(seen == std::vector<int>(kChunks, 1));
    }
    for (int first = 0; first < 64; first += 8)
        for (int c = 0; c < kChunks; c++) {
            std::vector<int> slots(8, 0);
            for (int r = first; r < first + 8; r++) slots[(r * kChunks + swizzle_chunk<kChunks>(r, c)) % 8]++;
            CHECK_MSG(slots == std::vector<int>(8, 1), "%d chunks per row: rows %d..%d at chunk %d conflict",
                      kChunks, first, first + 7, c);
        }
}
TEST(swizzle_is_conflict_free_permutation) {
    check_swizzle<4>();
    check_swizzle<8>();
    check_swizzle<16>();
    CHECK(swizzle_chunk<8>(0, 3) == 3);
    CHECK(swizzle_chunk<8>(5, 3) == 6);
    CHECK(swizzle_chunk<4>(3, 0) == 1);
}

}  // namespace
