// The two 8-bit floating-point formats of the OCP FP8 specification (the formats Hopper's tensor cores
// multiply), their conversions from and to float, and the per-tensor scale rule of scaled FP8 products.
// This is the one reference the CUDA cast kernels (kernels/fp8_cast.h), the cuBLASLt stand-in
// (emu/cublaslt_host.cpp) and the CPU simulation (cpu/fp8_sim.h) are checked against.
//
//   format  bits         bias  largest finite    smallest normal  smallest subnormal  specials
//   E4M3    S.EEEE.MMM   7     448   (0x7E)      2^-6             2^-9                NaN = S.1111.111 only; no infinity
//   E5M2    S.EEEEE.MM   15    57344 (0x7B)      2^-14            2^-16               ±inf = S.11111.00; NaN = S.11111.{01,10,11}
//
// Conversion from float (fp8_encode), as scaled training casts use it (NVIDIA's __NV_SATFINITE):
//   - round to nearest, ties to even, onto the format's grid, subnormals included (a value below half
//     the smallest subnormal becomes a zero of its sign: -1e-9 gives 0x80, negative zero);
//   - SATURATING: a finite value whose magnitude is at or beyond the largest finite one, and ±inf,
//     become ±(largest finite), never inf or NaN (E5M2 has an infinity but a saturating cast never
//     produces it);
//   - NaN (of either sign, any payload) becomes 0x7F, the canonical NaN: what NVIDIA's conversions
//     return for both formats.
// Conversion to float (fp8_decode) is exact: every FP8 value is a float.
//
// The scale rule (fp8_scale_from_amax): a tensor x is cast as fp8(x · s) and its products multiply by
// s⁻¹ again (cuBLASLt's A/B scale). s is the largest power of two with amax · s ≤ the format's largest
// finite value, so the tensor's largest magnitude never saturates and lands in the top binade:
//   s = 2^e,  e = floor(log2(fp8_max / amax)),  e clamped to [-126, 126]
// Powers of two, not the exact ratio fp8_max / amax, because then x · s is exact in fp32 (a power of
// two changes only the exponent), so a cast rounds once (to FP8), not twice (to fp32, then to FP8);
// s⁻¹ is exact too, so dequantising (q · s⁻¹) is exact, and the kernels, the stand-in and the CPU
// simulation agree bit for bit whatever division or fast-math flags a compiler uses. The price: the
// top binade is used only partly (amax · s lies in (fp8_max / 2, fp8_max]), i.e. up to one binade less
// headroom below, at the subnormal end; precision of normal values is the same (floating point).
// The clamp keeps s and s⁻¹ normal fp32 numbers (a tensor of bf16 subnormals would ask for 2^141).
// amax = 0 (an all-zero tensor) gives s = 1; a non-finite amax (inf or NaN in the tensor) gives s = 1
// and finite = false, which the caller raises as a flag for the step guard.
//
// Everything here is inline and, under nvcc, also __host__ __device__ (no CUDA header is needed), so
// the device's scale kernels run this same arithmetic: integer operations on the float bits only.
#pragma once
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define FP8_HOST_DEVICE __host__ __device__
#else
#define FP8_HOST_DEVICE
#endif

enum class Fp8Format : int { e4m3 = 0, e5m2 = 1 };

constexpr float kFp8E4M3Max = 448.0f;
constexpr float kFp8E5M2Max = 57344.0f;
constexpr uint8_t kFp8CanonicalNaN = 0x7F;
constexpr int kFp8ScaleExponentLimit = 126;  // scales lie in [2^-126, 2^126]

// The fields of one format.
struct Fp8Layout {
    int mantissa_bits;
    int exponent_bias;
    uint8_t max_code;  // the largest finite magnitude's code (sign bit clear)
    float max;
};
FP8_HOST_DEVICE constexpr Fp8Layout fp8_layout(Fp8Format f) {
    return f == Fp8Format::e4m3 ? Fp8Layout{3, 7, 0x7E, kFp8E4M3Max} : Fp8Layout{2, 15, 0x7B, kFp8E5M2Max};
}
FP8_HOST_DEVICE constexpr float fp8_max(Fp8Format f) { return fp8_layout(f).max; }
inline const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::e4m3 ? "E4M3" : "E5M2"; }

FP8_HOST_DEVICE inline uint32_t fp8_float_bits(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    return bits;
}
FP8_HOST_DEVICE inline float fp8_bits_float(uint32_t bits) {
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}
// 2^e for e in [-126, 127], exactly.
FP8_HOST_DEVICE inline float fp8_power_of_two(int e) { return fp8_bits_float((uint32_t)(e + 127) << 23); }

// x's code in format f: round to nearest even, saturating, NaN → 0x7F (see the top of this file).
// Integer arithmetic on the float's bits: m = the format's mantissa bits; the float's significand is
// shifted right so that m bits stay below the leading one (fewer for values in the subnormal range),
// and the dropped bits decide the rounding.
FP8_HOST_DEVICE inline uint8_t fp8_encode(float x, Fp8Format f) {
    const Fp8Layout L = fp8_layout(f);
    const uint32_t bits = fp8_float_bits(x);
    const uint8_t sign = (uint8_t)((bits >> 24) & 0x80);
    const uint32_t magnitude = bits & 0x7FFFFFFFu;
    if (magnitude > 0x7F800000u) return kFp8CanonicalNaN;
    if (magnitude >= fp8_float_bits(L.max)) return sign | L.max_code;  // saturate (±inf included)
    const int min_exponent = 1 - L.exponent_bias;                       // of the smallest normal
    int exponent = (int)(magnitude >> 23) - 127;                        // unbiased; floats' subnormals: -127
    uint32_t significand = (magnitude & 0x7FFFFFu) | (exponent > -127 ? 0x800000u : 0u);
    if (exponent == -127) exponent = -126;  // a float subnormal: 0.f · 2^-126
    // Bits to drop: 23 - m in the normal range, more below the smallest normal exponent.
    const int drop = 23 - L.mantissa_bits + (exponent < min_exponent ? min_exponent - exponent : 0);
    if (drop >= 25) return sign;  // below half the smallest subnormal: a zero of x's sign
    uint32_t kept = significand >> drop;
    const uint32_t rest = significand & ((1u << drop) - 1), half = 1u << (drop - 1);
    if (rest > half || (rest == half && (kept & 1u))) kept++;  // may carry into the next binade
    // kept counts quanta of 2^(e - m) where e = max(exponent, min_exponent); its leading one (bit m,
    // or m + 1 after a carry) is the implicit bit.
    int e = exponent < min_exponent ? min_exponent : exponent;
    if (kept >> (L.mantissa_bits + 1)) {
        kept >>= 1;
        e++;
    }
    if (!(kept >> L.mantissa_bits)) return sign | (uint8_t)kept;  // subnormal (or zero)
    const uint32_t code = ((uint32_t)(e + L.exponent_bias) << L.mantissa_bits) | (kept & ((1u << L.mantissa_bits) - 1));
    return sign | (uint8_t)code;
}

// The value of code c in format f (exact); NaN for NaN codes, ±inf for E5M2's infinities.
FP8_HOST_DEVICE inline float fp8_decode(uint8_t c, Fp8Format f) {
    const Fp8Layout L = fp8_layout(f);
    const uint32_t sign = (uint32_t)(c & 0x80) << 24;
    const int exponent_field = (c & 0x7F) >> L.mantissa_bits;
    const uint32_t mantissa = c & ((1u << L.mantissa_bits) - 1);
    const int all_ones = (1 << (7 - L.mantissa_bits)) - 1;
    if (f == Fp8Format::e4m3 && exponent_field == all_ones && mantissa == (1u << L.mantissa_bits) - 1)
        return fp8_bits_float(0x7FC00000u);
    if (f == Fp8Format::e5m2 && exponent_field == all_ones)
        return fp8_bits_float(mantissa ? 0x7FC00000u : (sign | 0x7F800000u));
    if (exponent_field == 0) {  // subnormal: mantissa · 2^(1 - bias - m), an exact float product
        const float quantum = fp8_power_of_two(1 - L.exponent_bias - L.mantissa_bits);
        return fp8_bits_float(sign | fp8_float_bits((float)mantissa * quantum));
    }
    const uint32_t float_exponent = (uint32_t)(exponent_field - L.exponent_bias + 127);
    return fp8_bits_float(sign | float_exponent << 23 | mantissa << (23 - L.mantissa_bits));
}

// x rounded to format f and back (the value a scaled cast followed by its dequantisation sees, at s = 1).
FP8_HOST_DEVICE inline float fp8_round(float x, Fp8Format f) { return fp8_decode(fp8_encode(x, f), f); }

// The result of the scale rule: s, s⁻¹, and whether amax was finite.
struct Fp8Scale {
    float scale, scale_inv;
    bool finite;
};

// floor(log2(a / b)) for positive finite floats a, b (normal or subnormal), by integer arithmetic:
// with a = sa · 2^ea and b = sb · 2^eb (24-bit significands, leading bit 23 set), it is ea - eb,
// less one when sa < sb.
FP8_HOST_DEVICE inline int fp8_floor_log2_ratio(float a, float b) {
    auto split = [](float x, int* exponent) {
        uint32_t bits = fp8_float_bits(x);
        int e = (int)(bits >> 23) - 127;
        uint32_t s = bits & 0x7FFFFFu;
        if (e == -127) {  // subnormal: normalise
            e = -126;
            while (!(s & 0x800000u)) {
                s <<= 1;
                e--;
            }
        } else {
            s |= 0x800000u;
        }
        *exponent = e;
        return s;
    };
    int ea, eb;
    const uint32_t sa = split(a, &ea), sb = split(b, &eb);
    return ea - eb - (sa < sb ? 1 : 0);
}

// The scale rule (see the top of this file): amax is the tensor's largest magnitude.
FP8_HOST_DEVICE inline Fp8Scale fp8_scale_from_amax(float amax, Fp8Format f) {
    const uint32_t magnitude = fp8_float_bits(amax) & 0x7FFFFFFFu;
    if (magnitude >= 0x7F800000u) return {1.0f, 1.0f, false};  // inf or NaN
    if (magnitude == 0) return {1.0f, 1.0f, true};
    int e = fp8_floor_log2_ratio(fp8_max(f), fp8_bits_float(magnitude));
    e = e < -kFp8ScaleExponentLimit ? -kFp8ScaleExponentLimit : e > kFp8ScaleExponentLimit ? kFp8ScaleExponentLimit : e;
    return {fp8_power_of_two(e), fp8_power_of_two(-e), true};
}

// The largest magnitude of a and b where NaN wins (fmaxf would drop it): magnitudes compare as their
// bit patterns, and NaN's patterns lie above inf's. The amax reductions use the same order.
FP8_HOST_DEVICE inline float fp8_amax_merge(float a, float b) {
    const uint32_t x = fp8_float_bits(a) & 0x7FFFFFFFu, y = fp8_float_bits(b) & 0x7FFFFFFFu;
    return fp8_bits_float(x > y ? x : y);
}
