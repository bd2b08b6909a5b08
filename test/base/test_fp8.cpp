// Tests of base/fp8.h against computations written here: every code of both formats decoded from its
// bit fields in double; encode against a nearest-value search over the decoded codes (ties to the even
// code, saturating); every midpoint between neighbouring codes and the floats just beside it; NaN,
// infinities, signed zeros, subnormals of both FP8 and float; and the scale rule against log2 in double.
#include "base/fp8.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "test/test.h"

namespace {

const Fp8Format kFormats[] = {Fp8Format::e4m3, Fp8Format::e5m2};

// The value of a code from its fields: S.EEEE.MMM (bias 7) or S.EEEEE.MM (bias 15).
double decode_by_hand(int code, Fp8Format f) {
    const int m = f == Fp8Format::e4m3 ? 3 : 2, bias = f == Fp8Format::e4m3 ? 7 : 15;
    const int sign = code >> 7, exponent = (code >> m) & ((1 << (7 - m)) - 1), mantissa = code & ((1 << m) - 1);
    const int top = (1 << (7 - m)) - 1;
    const double s = sign ? -1.0 : 1.0;
    if (f == Fp8Format::e4m3 && exponent == top && mantissa == 7) return std::nan("");
    if (f == Fp8Format::e5m2 && exponent == top) return mantissa ? std::nan("") : s * INFINITY;
    if (exponent == 0) return s * std::pow(2.0, 1 - bias) * (mantissa / std::pow(2.0, m));
    return s * std::pow(2.0, exponent - bias) * (1.0 + mantissa / std::pow(2.0, m));
}

// The finite non-negative values of a format, ascending, with their codes (0 .. max_code).
std::vector<std::pair<double, int>> finite_ladder(Fp8Format f) {
    std::vector<std::pair<double, int>> ladder;
    for (int c = 0; c < 128; c++) {
        const double v = decode_by_hand(c, f);
        if (std::isfinite(v)) ladder.push_back({v, c});
    }
    std::sort(ladder.begin(), ladder.end());
    return ladder;
}

// The code a saturating round-to-nearest-even conversion must give, by search: the nearest finite
// value, the even code on a tie; beyond the largest finite value, the largest.
int encode_by_search(float x, Fp8Format, const std::vector<std::pair<double, int>>& ladder) {
    if (std::isnan(x)) return 0x7F;
    const int sign = std::signbit(x) ? 0x80 : 0;
    const double a = std::fabs((double)x);
    if (a >= ladder.back().first) return sign | ladder.back().second;
    size_t hi = 0;
    while (ladder[hi].first < a) hi++;
    if (ladder[hi].first == a || hi == 0) return sign | ladder[hi].second;
    const double below = a - ladder[hi - 1].first, above = ladder[hi].first - a;
    if (below < above) return sign | ladder[hi - 1].second;
    if (above < below) return sign | ladder[hi].second;
    return sign | (ladder[hi].second % 2 == 0 ? ladder[hi].second : ladder[hi - 1].second);
}

float next_up(float x) { return std::nextafter(x, INFINITY); }
float next_down(float x) { return std::nextafter(x, -INFINITY); }
uint32_t bits_of(float x) { return fp8_float_bits(x); }

}  // namespace

TEST(fp8_decode_matches_the_bit_fields_for_all_256_codes_of_each_format) {
    int checked = 0;
    for (Fp8Format f : kFormats) {
        for (int c = 0; c < 256; c++, checked++) {
            const double expected = decode_by_hand(c, f);
            const float got = fp8_decode((uint8_t)c, f);
            if (std::isnan(expected)) {
                CHECK_MSG(std::isnan(got), "%s code 0x%02X: expected NaN, got %g", fp8_format_name(f), c, got);
                continue;
            }
            CHECK_MSG((double)got == expected && std::signbit(got) == std::signbit(expected),
                      "%s code 0x%02X: expected %.10g, got %.10g", fp8_format_name(f), c, expected, got);
        }
    }
    CHECK(checked == 512);
    // The landmarks of the header's table.
    CHECK(fp8_decode(0x7E, Fp8Format::e4m3) == 448.0f && fp8_decode(0x7B, Fp8Format::e5m2) == 57344.0f);
    CHECK(fp8_decode(0x01, Fp8Format::e4m3) == std::ldexp(1.0f, -9));
    CHECK(fp8_decode(0x01, Fp8Format::e5m2) == std::ldexp(1.0f, -16));
    CHECK(fp8_decode(0x08, Fp8Format::e4m3) == std::ldexp(1.0f, -6));
    CHECK(fp8_decode(0x04, Fp8Format::e5m2) == std::ldexp(1.0f, -14));
    CHECK(fp8_decode(0x7C, Fp8Format::e5m2) == INFINITY && fp8_decode(0xFC, Fp8Format::e5m2) == -INFINITY);
    CHECK(std::isnan(fp8_decode(0x7F, Fp8Format::e4m3)) && std::isnan(fp8_decode(0xFF, Fp8Format::e4m3)));
    CHECK(!std::isnan(fp8_decode(0x7E, Fp8Format::e4m3)) && !std::isnan(fp8_decode(0x78, Fp8Format::e4m3)));
    for (int c : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) CHECK(std::isnan(fp8_decode((uint8_t)c, Fp8Format::e5m2)));
    CHECK(bits_of(fp8_decode(0x80, Fp8Format::e4m3)) == 0x80000000u);  // negative zero
}

TEST(fp8_encode_round_trips_every_finite_code) {
    for (Fp8Format f : kFormats) {
        for (int c = 0; c < 256; c++) {
            const double v = decode_by_hand(c, f);
            if (!std::isfinite(v)) continue;
            CHECK_MSG(fp8_encode((float)v, f) == c, "%s: %.10g encodes to 0x%02X, not 0x%02X", fp8_format_name(f), v,
                      fp8_encode((float)v, f), c);
        }
    }
}

TEST(fp8_encode_rounds_midpoints_to_even_and_their_neighbours_to_the_nearer_code) {
    int checked = 0;
    for (Fp8Format f : kFormats) {
        const std::vector<std::pair<double, int>> ladder = finite_ladder(f);
        for (size_t i = 0; i + 1 < ladder.size(); i++) {
            const float lo = (float)ladder[i].first, hi = (float)ladder[i + 1].first;
            const float mid = (float)((ladder[i].first + ladder[i + 1].first) / 2);
            CHECK((double)mid == (ladder[i].first + ladder[i + 1].first) / 2);  // exact in float
            const int even = ladder[i].second % 2 == 0 ? ladder[i].second : ladder[i + 1].second;
            for (int sign : {0, 0x80}) {
                const float s = sign ? -1.0f : 1.0f;
                CHECK_MSG(fp8_encode(s * mid, f) == (sign | even), "%s midpoint %g -> 0x%02X", fp8_format_name(f),
                          s * mid, fp8_encode(s * mid, f));
                CHECK(fp8_encode(s * next_down(mid), f) == (sign | ladder[i].second));
                CHECK(fp8_encode(s * next_up(mid), f) == (sign | ladder[i + 1].second));
                CHECK(fp8_encode(s * next_up(lo), f) == (sign | ladder[i].second));
                CHECK(fp8_encode(s * next_down(hi), f) == (sign | ladder[i + 1].second));
                checked += 5;
            }
        }
    }
    printf("  %d midpoints and neighbours checked\n", checked);
}

TEST(fp8_encode_saturates_beyond_the_largest_value_and_on_infinity) {
    for (Fp8Format f : kFormats) {
        const float max = fp8_max(f);
        const uint8_t top = f == Fp8Format::e4m3 ? 0x7E : 0x7B;
        for (float x : {max, next_up(max), max * 1.0625f, max * 1.125f, max * 1.5f, max * 4.0f, 1e30f,
                        std::numeric_limits<float>::max(), INFINITY}) {
            CHECK_MSG(fp8_encode(x, f) == top, "%s: %g -> 0x%02X", fp8_format_name(f), x, fp8_encode(x, f));
            CHECK(fp8_encode(-x, f) == (0x80 | top));
        }
    }
    // E5M2's infinity code is never produced by a saturating cast.
    CHECK(fp8_encode(INFINITY, Fp8Format::e5m2) != 0x7C && fp8_encode(-INFINITY, Fp8Format::e5m2) != 0xFC);
}

TEST(fp8_encode_nan_gives_the_canonical_nan_and_zeros_keep_their_sign) {
    const uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0xFFFFFFFFu};
    for (Fp8Format f : kFormats) {
        for (uint32_t n : nans) CHECK(fp8_encode(fp8_bits_float(n), f) == 0x7F);
        CHECK(fp8_encode(0.0f, f) == 0x00 && fp8_encode(-0.0f, f) == 0x80);
        // Float subnormals and values below half the smallest FP8 subnormal: zeros of their sign.
        const float tiny = f == Fp8Format::e4m3 ? std::ldexp(1.0f, -9) : std::ldexp(1.0f, -16);
        for (float x : {std::numeric_limits<float>::denorm_min(), std::ldexp(1.0f, -130), tiny / 4, tiny / 2}) {
            CHECK_MSG(fp8_encode(x, f) == 0x00, "%s: %g -> 0x%02X", fp8_format_name(f), x, fp8_encode(x, f));
            CHECK(fp8_encode(-x, f) == 0x80);
        }
        CHECK(fp8_encode(next_up(tiny / 2), f) == 0x01 && fp8_encode(-next_up(tiny / 2), f) == 0x81);
        CHECK(fp8_encode(tiny * 1.5f, f) == 0x02);  // a tie between 1 and 2 quanta: even
        CHECK(fp8_encode(tiny * 2.5f, f) == 0x02);  // between 2 and 3: even
    }
}

TEST(fp8_encode_agrees_with_a_nearest_value_search_on_every_bf16_and_random_floats) {
    std::mt19937 rng(7);
    std::vector<float> inputs;
    for (uint32_t b = 0; b < 65536; b++) inputs.push_back(fp8_bits_float(b << 16));  // every bf16
    std::uniform_int_distribution<uint32_t> any;
    for (int i = 0; i < 200000; i++) {  // random floats near the formats' ranges
        const uint32_t exponent = 127 - 30 + any(rng) % 50;
        inputs.push_back(fp8_bits_float((any(rng) & 0x807FFFFFu) | exponent << 23));
    }
    long checked = 0;
    for (Fp8Format f : kFormats) {
        const std::vector<std::pair<double, int>> ladder = finite_ladder(f);
        for (float x : inputs) {
            const int expected = encode_by_search(x, f, ladder);
            const int got = fp8_encode(x, f);
            if (got != expected)
                CHECK_MSG(false, "%s: %.9g (0x%08X) -> 0x%02X, expected 0x%02X", fp8_format_name(f), x, bits_of(x), got,
                          expected);
            checked++;
        }
    }
    printf("  %ld conversions checked\n", checked);
}

TEST(fp8_scale_is_the_largest_power_of_two_keeping_amax_finite) {
    std::mt19937 rng(3);
    std::uniform_int_distribution<uint32_t> any;
    std::vector<float> amaxes = {448.0f, 449.0f, 447.0f, 1.0f, 0.5f, 57344.0f, 3.0f, 1e-3f, 1e-20f, 1e20f,
                                 std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                                 std::numeric_limits<float>::denorm_min()};
    for (int i = 0; i < 100000; i++) amaxes.push_back(fp8_bits_float(any(rng) & 0x7F7FFFFFu));
    for (Fp8Format f : kFormats) {
        for (float amax : amaxes) {
            if (amax == 0) continue;
            const Fp8Scale s = fp8_scale_from_amax(amax, f);
            int e = (int)std::floor(std::log2((double)fp8_max(f) / (double)amax));
            // log2 in double may land a hair off an exact power: the definition decides.
            if (std::ldexp((double)amax, e + 1) <= fp8_max(f)) e++;
            if (std::ldexp((double)amax, e) > fp8_max(f)) e--;
            e = std::max(-126, std::min(126, e));
            CHECK_MSG(s.finite && s.scale == std::ldexp(1.0f, e) && s.scale_inv == std::ldexp(1.0f, -e),
                      "%s amax %g: scale %g, expected 2^%d", fp8_format_name(f), amax, s.scale, e);
            if (e < 126) CHECK((double)amax * s.scale <= fp8_max(f) && (double)amax * s.scale * 2 > fp8_max(f));
        }
        CHECK(fp8_scale_from_amax(fp8_max(f), f).scale == 1.0f);
        CHECK(fp8_scale_from_amax(std::numeric_limits<float>::denorm_min(), f).scale == std::ldexp(1.0f, 126));
        const Fp8Scale zero = fp8_scale_from_amax(0.0f, f);
        CHECK(zero.finite && zero.scale == 1.0f && zero.scale_inv == 1.0f);
        for (float bad : {INFINITY, std::nanf(""), -std::nanf("")}) {
            const Fp8Scale s = fp8_scale_from_amax(bad, f);
            CHECK(!s.finite && s.scale == 1.0f && s.scale_inv == 1.0f);
        }
    }
    CHECK(fp8_scale_from_amax(1.0f, Fp8Format::e4m3).scale == 256.0f);    // 448 / 1 → 2^8
    CHECK(fp8_scale_from_amax(1.0f, Fp8Format::e5m2).scale == 32768.0f);  // 57344 / 1 → 2^15
    CHECK(fp8_scale_from_amax(3.5f, Fp8Format::e4m3).scale == 128.0f);    // exactly 448
}

TEST(fp8_amax_merge_keeps_nan_and_the_largest_magnitude) {
    CHECK(fp8_amax_merge(-3.0f, 2.0f) == 3.0f && fp8_amax_merge(0.0f, -0.0f) == 0.0f);
    CHECK(std::isnan(fp8_amax_merge(std::nanf(""), 5.0f)) && std::isnan(fp8_amax_merge(5.0f, -std::nanf(""))));
    CHECK(fp8_amax_merge(-INFINITY, 1.0f) == INFINITY);
}
