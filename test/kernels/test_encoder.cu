// kernels/encoder.h against the CPU reference (cpu/encoder.h) on the same floatX-rounded inputs:
// the forward gather, the backward's host grouping of positions by token, and the backward itself
// (frequent tokens split over position groups, rare ones not), with the GPT-2 vocabulary padded to
// Vp = 50304, T not a power of two, and non-zero initial gradients. Then the vocabulary slices of
// tensor parallelism against the whole-vocabulary kernels: the slices' forwards sum to the whole
// forward, and each slice's backward gives its rows of the whole backward's dwte, both to the bit.
#include <algorithm>
#include <set>
#include <vector>

#include "cpu/encoder.h"
#include "kernels/encoder.h"
#include "test/kernels/kernel_test.h"

namespace {

// One encoder problem. Token 7 fills `frequent` of the positions (so that it is split over
// position groups), the others are uniform over the vocabulary V, whose last id is always used.
struct EncoderProblem {
    int B, T, C, V, Vp, maxT;
    std::vector<int> tokens;
    std::vector<float> wte, wpe;
    EncoderProblem(int b, int t, int c, int v, int vp, double frequent, unsigned seed)
        : B(b), T(t), C(c), V(v), Vp(vp), maxT(t + 3) {
        tokens = random_tokens((size_t)B * T, V, seed);
        std::mt19937 rng(seed + 1);
        for (int& token : tokens)
            if (std::uniform_real_distribution<double>(0, 1)(rng) < frequent) token = 7;
        tokens[tokens.size() / 2] = V - 1;
        wte = round_to_floatX(random_floats((size_t)Vp * C, seed + 2));
        wpe = round_to_floatX(random_floats((size_t)maxT * C, seed + 3));
    }
    size_t positions() const { return (size_t)B * T; }
};

std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// Rows [0, rows) of a (rows, C) table as floats, and the same rows of another table.
std::vector<float> rows_of(const std::vector<float>& table, const std::vector<int>& rows, int C) {
    std::vector<float> out;
    for (int r : rows)
        out.insert(out.end(), table.begin() + (size_t)r * C, table.begin() + (size_t)(r + 1) * C);
    return out;
}
template <typename T>
std::vector<float> rows_of(const std::vector<T>& table, const std::vector<int>& rows, int C) {
    return rows_of(std::vector<float>(table.begin(), table.end()), rows, C);
}

// The forward's output on the device (poisoned first): encoder_forward over the whole of p.wte when
// vocab_count < 0, else encoder_forward_vocab_slice over `slice` (rows [vocab_begin, vocab_begin +
// vocab_count) of a table), with p.wpe or without.
std::vector<float> device_forward(const EncoderProblem& p, int vocab_begin = 0, int vocab_count = -1,
                                  const std::vector<float>& slice = {}, bool with_wpe = true) {
    const size_t n = p.positions() * p.C;
    int* d_tokens = device_copy_of(p.tokens);
    floatX* d_wte = device_floatX(vocab_count < 0 ? p.wte : slice);
    floatX* d_wpe = device_floatX(p.wpe);
    floatX* d_out = device_poisoned<floatX>(n);
    if (vocab_count < 0)
        encoder_forward(d_out, d_tokens, d_wte, d_wpe, p.B, p.T, p.C, 0);
    else
        encoder_forward_vocab_slice(d_out, d_tokens, d_wte, vocab_begin, vocab_count,
                                    with_wpe ? d_wpe : nullptr, p.B, p.T, p.C, 0);
    const std::vector<float> out = host_floats_of(d_out, n);
    for (void* ptr : {(void*)d_tokens, (void*)d_wte, (void*)d_wpe, (void*)d_out}) CUDA_CHECK(cudaFree(ptr));
    return out;
}

}  // namespace

TEST(encoder_forward_matches_reference) {
    for (const EncoderProblem& p :
         {EncoderProblem(4, 37, 768, 1000, 1024, 0.0, 1), EncoderProblem(2, 257, 160, 50257, 50304, 0.0, 2),
          EncoderProblem(3, 5, 32, 50, 64, 0.0, 3)}) {
        const size_t n = p.positions() * p.C;
        std::vector<float> ref(n);
        encoder_forward(ref.data(), p.tokens.data(), p.wte.data(), p.wpe.data(), p.B, p.T, p.C);
        ref = round_to_floatX(ref);  // one rounding of the fp32 sum, as the kernel does
        const std::vector<float> out = device_forward(p);
        CHECK_MSG(bitwise_equal(out.data(), ref.data(), n * sizeof(float)), "B=%d T=%d C=%d: out differs",
                  p.B, p.T, p.C);
    }
}

TEST(encoder_grouping_by_token) {
    // Ids of one, two, three and four bytes (one to four radix passes); 37 positions (not a
    // multiple of 4: the groups still start 16-byte aligned).
    for (int max_token : {200, 50256, 1 << 20, 2000000000}) {
        const int n = 37;
        std::vector<int> tokens = random_tokens(n, 3, max_token);  // ids 0..2...
        for (int i = 0; i < n; i += 3) tokens[i] = max_token - i;  // ...and some large ones
        for (int i = 1; i < n; i += 2) tokens[i] = 3;              // one id at 18 positions: split
        std::vector<unsigned char> scratch(encoder_backward_host_scratch_bytes(1, n) + 16);
        void* aligned = scratch.data() + (16 - (uintptr_t)scratch.data() % 16) % 16;
        int split = -1;
        const int total = encoder_group_positions(tokens.data(), n, aligned, &split);
        const int* sorted = static_cast<const int*>(aligned);
        const EncoderTokenGroup* groups = reinterpret_cast<const EncoderTokenGroup*>(
            static_cast<const char*>(aligned) + encoder_positions_bytes(1, n));

        CHECK((uintptr_t)groups % 16 == 0);
        CHECK(total == (int)std::set<int>(tokens.begin(), tokens.end()).size());
        CHECK(split == 1 && groups[0].token == 3 && groups[0].count == 18);
        std::vector<int> seen(n, 0);
        for (int g = 0; g < total; g++) {
            const EncoderTokenGroup& group = groups[g];
            CHECK(group.count >= 1);
            CHECK((group.count >= ENCODER_SPLIT_POSITIONS) == (g < split));
            if (g > split) CHECK(groups[g - 1].token < group.token);  // the others in token order
            for (int j = group.first; j < group.first + group.count; j++) {
                CHECK(tokens[sorted[j]] == group.token);
                if (j > group.first) CHECK(sorted[j - 1] < sorted[j]);  // positions in order
                seen[sorted[j]]++;
            }
        }
        CHECK(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }));

        // The slice [1, max_token − 3): rows relative to the slice, its positions only, in order.
        const int begin = 1, count = max_token - 4;
        const int slice_total = encoder_group_positions(tokens.data(), n, aligned, &split, begin, count);
        std::set<int> in_slice;
        int in_slice_positions = 0;
        for (int token : tokens)
            if (token >= begin && token < begin + count) in_slice.insert(token), in_slice_positions++;
        CHECK(slice_total == (int)in_slice.size());
        CHECK(split == 1 && groups[0].token == 3 - begin && groups[0].count == 18);
        std::vector<int> seen_in_slice(n, 0);
        int grouped = 0;
        for (int g = 0; g < slice_total; g++) {
            const EncoderTokenGroup& group = groups[g];
            CHECK(group.token >= 0 && group.token < count);
            if (g > split) CHECK(groups[g - 1].token < group.token);
            for (int j = group.first; j < group.first + group.count; j++) {
                CHECK(tokens[sorted[j]] == group.token + begin);
                if (j > group.first) CHECK(sorted[j - 1] < sorted[j]);
                seen_in_slice[sorted[j]]++;
            }
            grouped += group.count;
        }
        CHECK(grouped == in_slice_positions);
        CHECK(std::all_of(seen_in_slice.begin(), seen_in_slice.end(), [](int s) { return s <= 1; }));
        // A slice no token falls in: no group.
        CHECK(encoder_group_positions(tokens.data(), n, aligned, &split, max_token + 1, 100) == 0 &&
              split == 0);
    }
}

namespace {

struct BackwardResult {
    std::vector<float> dwte, dwpe;
};

// encoder_backward on the device, adding into copies of dwte0 and dwpe0.
BackwardResult device_backward(const EncoderProblem& p, const std::vector<float>& dout,
                               const std::vector<float>& dwte0, const std::vector<float>& dwpe0) {
    floatX* d_dwte = device_floatX(dwte0);
    floatX* d_dwpe = device_floatX(dwpe0);
    floatX* d_dout = device_floatX(dout);
    void* d_scratch = device_poisoned<unsigned char>(encoder_backward_scratch_bytes(p.B, p.T));
    std::vector<unsigned char> host_scratch(encoder_backward_host_scratch_bytes(p.B, p.T), 0xff);
    encoder_backward(d_dwte, d_dwpe, d_dout, p.tokens.data(), p.B, p.T, p.C, d_scratch, host_scratch.data(),
                     0);
    BackwardResult result{host_floats_of(d_dwte, dwte0.size()), host_floats_of(d_dwpe, dwpe0.size())};
    for (void* ptr : {(void*)d_dwte, (void*)d_dwpe, (void*)d_dout, d_scratch}) CUDA_CHECK(cudaFree(ptr));
    return result;
}

void check_backward(const EncoderProblem& p) {
    const std::vector<float> dout = round_to_floatX(random_floats(p.positions() * p.C, 10));
    const std::vector<float> dwte0 = round_to_floatX(random_floats((size_t)p.Vp * p.C, 11, -0.1f, 0.1f));
    const std::vector<float> dwpe0 = round_to_floatX(random_floats((size_t)p.maxT * p.C, 12, -0.1f, 0.1f));
    std::vector<double> ref_dwte = to_double(dwte0), ref_dwpe = to_double(dwpe0);
    encoder_backward(ref_dwte.data(), ref_dwpe.data(), to_double(dout).data(), p.tokens.data(), p.B, p.T,
                     p.C);

    const BackwardResult got = device_backward(p, dout, dwte0, dwpe0);
    const std::string what = tst::format("B=%d T=%d C=%d", p.B, p.T, p.C);
    // Rows of used tokens against the reference; every other row exactly as it was.
    const std::set<int> used_set(p.tokens.begin(), p.tokens.end());
    const std::vector<int> used(used_set.begin(), used_set.end());
    std::vector<int> unused;
    for (int v = 0; v < p.Vp; v++)
        if (!used_set.count(v)) unused.push_back(v);
    CHECK_CLOSE(rows_of(got.dwte, used, p.C), rows_of(ref_dwte, used, p.C), KERNEL_TOLERANCE,
                ("dwte " + what).c_str());
    const std::vector<float> untouched = rows_of(got.dwte, unused, p.C), before = rows_of(dwte0, unused, p.C);
    CHECK_MSG(bitwise_equal(untouched.data(), before.data(), before.size() * sizeof(float)),
              "%s: dwte rows of unused tokens changed", what.c_str());
    // dwpe rows [0, T) against the reference, rows [T, maxT) untouched.
    std::vector<int> positions, beyond;
    for (int t = 0; t < p.maxT; t++) (t < p.T ? positions : beyond).push_back(t);
    CHECK_CLOSE(rows_of(got.dwpe, positions, p.C), rows_of(ref_dwpe, positions, p.C), KERNEL_TOLERANCE,
                ("dwpe " + what).c_str());
    CHECK(rows_of(got.dwpe, beyond, p.C) == rows_of(dwpe0, beyond, p.C));

    // Bitwise the same on a second run.
    const BackwardResult again = device_backward(p, dout, dwte0, dwpe0);
    CHECK_MSG(got.dwte == again.dwte && got.dwpe == again.dwpe, "%s: two runs differ", what.c_str());
}

}  // namespace

TEST(encoder_backward_matches_reference_gpt2_vocabulary) {
    // GPT-2's vocabulary padded to 50304 rows; token 7 at ~30% of the 514 positions (split).
    check_backward(EncoderProblem(2, 257, 160, 50257, 50304, 0.3, 20));
}

TEST(encoder_backward_matches_reference_c768) {
    // C=768, a small vocabulary so that many tokens repeat, some more than 16 times.
    check_backward(EncoderProblem(4, 37, 768, 40, 64, 0.2, 21));
}

TEST(encoder_backward_matches_reference_small_rows) {
    // C=32 (4 vectors: most lanes of a warp idle) and C=64; a single position per batch row.
    check_backward(EncoderProblem(3, 1, 32, 10, 16, 0.0, 22));
    check_backward(EncoderProblem(8, 9, 64, 10, 16, 0.5, 23));
}

TEST(encoder_backward_wide_rows) {
    // C=1600 (GPT-2 XL): more 128-bit vectors than a block has lanes, so blocks loop over the row.
    check_backward(EncoderProblem(2, 41, 1600, 30, 32, 0.5, 24));
}

TEST(encoder_shape_checks_and_offsets) {
    alignas(16) static floatX buffer[16];
    CHECK(encoder_shape_error(4, 37, 768, {buffer}) == nullptr);
    CHECK(encoder_shape_error(4, 37, 100, {buffer}) != nullptr);
    CHECK(encoder_shape_error(0, 37, 768, {buffer}) != nullptr);
    CHECK(encoder_shape_error(4, 37, 768, {buffer + 1}) != nullptr);
    CHECK(encoder_shape_error(4, 37, 768, {buffer, nullptr}) == nullptr);  // a null wpe or dwpe
    CHECK(encoder_slice_error(0, 50304) == nullptr && encoder_slice_error(25152, 0) == nullptr);
    CHECK(encoder_slice_error(-1, 100) != nullptr && encoder_slice_error(0, -1) != nullptr);
    // Offsets past 2^31: the last position of B=64, T=1024 at C=12288 (GPT-3 175B), the last
    // padded vocabulary row at C=50000, and a row index past 2^32.
    CHECK(encoder_row_offset(64 * 1024 - 1, 12288) == (size_t)(64 * 1024 - 1) * 12288);
    CHECK(encoder_row_offset(50303, 50000) == (size_t)50303 * 50000);
    CHECK(encoder_row_offset((size_t)5000000000ull, 8) == (size_t)40000000000ull);
    // Scratch sizes: the positions padded to 16 bytes, one group per position, and N ints more on
    // the host.
    CHECK(encoder_backward_scratch_bytes(1, 37) == 40 * 4 + 37 * sizeof(EncoderTokenGroup));
    CHECK(encoder_backward_host_scratch_bytes(1, 37) == encoder_backward_scratch_bytes(1, 37) + 37 * 4);
}

// ------------------------------------------------------------------------------------------------
// Vocabulary slices (tensor parallelism): slice r of R holds rows [r·Vs, (r+1)·Vs) of wte, Vs = Vp/R.

namespace {

// An encoder problem whose tokens include both sides of every slice boundary below V.
EncoderProblem slice_problem(int Vp, int R, unsigned seed) {
    EncoderProblem p(3, 37, 160, 1000, Vp, 0.2, seed);
    const int Vs = Vp / R;
    for (int r = 1; r < R; r++)
        if (r * Vs < p.V) {
            p.tokens[5 * r] = r * Vs - 1;
            p.tokens[5 * r + 1] = r * Vs;
        }
    return p;
}

// Rows [first, first + count) of a (rows, C) table.
std::vector<float> row_range(const std::vector<float>& table, int first, int count, int C) {
    return std::vector<float>(table.begin() + (size_t)first * C, table.begin() + (size_t)(first + count) * C);
}

// The forward of each slice (wpe given to slice 0 only) exactly as the formula says, and their sum
// (in floatX, slice by slice, as a reduction over the ranks adds them) equal to the whole forward.
void check_forward_slices(int Vp, int R, unsigned seed) {
    const EncoderProblem p = slice_problem(Vp, R, seed);
    const int Vs = Vp / R;
    const size_t n = p.positions() * p.C;
    const std::vector<float> whole = device_forward(p);
    std::vector<float> sum(n, 0.0f);
    for (int r = 0; r < R; r++) {
        const int begin = r * Vs;
        const std::vector<float> out = device_forward(p, begin, Vs, row_range(p.wte, begin, Vs, p.C), r == 0);
        std::vector<float> expected(n);
        for (size_t pos = 0; pos < p.positions(); pos++) {
            const int token = p.tokens[pos], t = (int)(pos % p.T);
            const bool in_slice = token >= begin && token < begin + Vs;
            for (int c = 0; c < p.C; c++) {
                const float from_wte = in_slice ? p.wte[(size_t)token * p.C + c] : 0.0f;
                expected[pos * p.C + c] = from_wte + (r == 0 ? p.wpe[(size_t)t * p.C + c] : 0.0f);
            }
        }
        expected = round_to_floatX(expected);
        CHECK_MSG(bitwise_equal(out.data(), expected.data(), n * sizeof(float)),
                  "Vp=%d R=%d: slice %d's forward differs from wte_slice[token] + wpe", Vp, R, r);
        for (size_t i = 0; i < n; i++) sum[i] += out[i];
        sum = round_to_floatX(sum);
    }
    // Exact in both builds: each position gets one non-zero wte row, and adding zeros rounds nothing.
    CHECK_MSG(bitwise_equal(sum.data(), whole.data(), n * sizeof(float)),
              "Vp=%d R=%d: the slices' forwards do not sum to the whole forward", Vp, R);
}

// Each slice's backward (into a slice framed by a guard row on each side; dwpe given to the even
// slices, null for the odd ones) gives its rows of the whole backward's dwte and, where given, its
// dwpe, to the bit; guard rows untouched; a second run the same bits.
void check_backward_slices(int Vp, int R, unsigned seed) {
    const EncoderProblem p = slice_problem(Vp, R, seed);
    const int Vs = Vp / R, C = p.C;
    const std::vector<float> dout = round_to_floatX(random_floats(p.positions() * C, seed + 10));
    const std::vector<float> dwte0 = round_to_floatX(random_floats((size_t)p.Vp * C, seed + 11, -0.1f, 0.1f));
    const std::vector<float> dwpe0 =
        round_to_floatX(random_floats((size_t)p.maxT * C, seed + 12, -0.1f, 0.1f));
    const std::vector<float> guard = round_to_floatX(random_floats(C, seed + 13, 5.0f, 6.0f));
    const BackwardResult whole = device_backward(p, dout, dwte0, dwpe0);

    floatX* d_dout = device_floatX(dout);
    void* d_scratch = device_poisoned<unsigned char>(encoder_backward_scratch_bytes(p.B, p.T));
    std::vector<unsigned char> host_scratch(encoder_backward_host_scratch_bytes(p.B, p.T), 0xff);
    auto run_slice = [&](int r) {
        std::vector<float> framed = guard;
        const std::vector<float> rows = row_range(dwte0, r * Vs, Vs, C);
        framed.insert(framed.end(), rows.begin(), rows.end());
        framed.insert(framed.end(), guard.begin(), guard.end());
        floatX* d_framed = device_floatX(framed);
        floatX* d_dwpe = r % 2 == 0 ? device_floatX(dwpe0) : nullptr;
        encoder_backward_vocab_slice(d_framed + C, r * Vs, Vs, d_dwpe, d_dout, p.tokens.data(), p.B, p.T, C,
                                     d_scratch, host_scratch.data(), 0);
        BackwardResult result{host_floats_of(d_framed, framed.size()),
                              d_dwpe ? host_floats_of(d_dwpe, dwpe0.size()) : std::vector<float>()};
        CUDA_CHECK(cudaFree(d_framed));
        if (d_dwpe) CUDA_CHECK(cudaFree(d_dwpe));
        return result;
    };
    for (int r = 0; r < R; r++) {
        const BackwardResult got = run_slice(r);
        const std::vector<float> rows = row_range(got.dwte, 1, Vs, C),
                                 expected = row_range(whole.dwte, r * Vs, Vs, C);
        CHECK_MSG(bitwise_equal(rows.data(), expected.data(), rows.size() * sizeof(float)),
                  "Vp=%d R=%d: slice %d's dwte differs from the whole backward's rows", Vp, R, r);
        CHECK_MSG(row_range(got.dwte, 0, 1, C) == guard && row_range(got.dwte, Vs + 1, 1, C) == guard,
                  "Vp=%d R=%d: slice %d's backward wrote outside the slice", Vp, R, r);
        if (r % 2 == 0)
            CHECK_MSG(bitwise_equal(got.dwpe.data(), whole.dwpe.data(), whole.dwpe.size() * sizeof(float)),
                      "Vp=%d R=%d: slice %d's dwpe differs from the whole backward's", Vp, R, r);
        const BackwardResult again = run_slice(r);
        CHECK_MSG(again.dwte == got.dwte && again.dwpe == got.dwpe, "Vp=%d R=%d: slice %d: two runs differ",
                  Vp, R, r);
    }
    CUDA_CHECK(cudaFree(d_dout));
    CUDA_CHECK(cudaFree(d_scratch));
}

}  // namespace

// B 3, T 37, C 160, V 1000; Vp 1024 in 2 and 4 slices, Vp 1152 (= 9·128) in 3.
TEST(encoder_forward_vocab_slices_sum_to_whole) {
    check_forward_slices(1024, 2, 40);
    check_forward_slices(1152, 3, 41);
    check_forward_slices(1024, 4, 42);
}

TEST(encoder_backward_vocab_slices_match_whole) {
    check_backward_slices(1024, 2, 50);
    check_backward_slices(1152, 3, 51);
    check_backward_slices(1024, 4, 52);
}

// A slice no token of the batch falls in: out = wpe (zeros without wpe); dwte untouched (no group),
// dwpe as the whole backward's.
TEST(encoder_vocab_slice_without_tokens) {
    const EncoderProblem p(2, 9, 64, 100, 128, 0.0, 60);
    const size_t n = p.positions() * p.C;
    const std::vector<float> slice = row_range(p.wte, 100, 28, p.C);  // rows [100, 128): padding only
    std::vector<float> expected;
    for (int pos = 0; pos < (int)p.positions(); pos++) {
        const std::vector<float> row = row_range(p.wpe, pos % p.T, 1, p.C);
        expected.insert(expected.end(), row.begin(), row.end());
    }
    CHECK(device_forward(p, 100, 28, slice) == expected);
    CHECK(device_forward(p, 100, 28, slice, false) == std::vector<float>(n, 0.0f));  // nor wpe: zeros

    const std::vector<float> dout = round_to_floatX(random_floats(n, 61));
    const std::vector<float> dwpe0 = round_to_floatX(random_floats((size_t)p.maxT * p.C, 62));
    const BackwardResult whole = device_backward(p, dout, p.wte, dwpe0);
    floatX* d_slice = device_floatX(slice);
    floatX* d_dout = device_floatX(dout);
    floatX* d_dwpe = device_floatX(dwpe0);
    void* d_scratch = device_poisoned<unsigned char>(encoder_backward_scratch_bytes(p.B, p.T));
    std::vector<unsigned char> host_scratch(encoder_backward_host_scratch_bytes(p.B, p.T), 0xff);
    encoder_backward_vocab_slice(d_slice, 100, 28, d_dwpe, d_dout, p.tokens.data(), p.B, p.T, p.C, d_scratch,
                                 host_scratch.data(), 0);
    CHECK(host_floats_of(d_slice, slice.size()) == slice);
    CHECK(host_floats_of(d_dwpe, dwpe0.size()) == whole.dwpe);
    for (void* ptr : {(void*)d_slice, (void*)d_dout, (void*)d_dwpe, d_scratch}) CUDA_CHECK(cudaFree(ptr));
}
