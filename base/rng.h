// The one random number generator of the project's host code: SplitMix64 (Steele, Lea and Flood,
// 2014). Its whole state is one uint64, so a checkpoint saves it exactly and a resumed run draws
// the same numbers. Used for weight initialisation, data shuffling and sampling.
#pragma once
#include <cstddef>
#include <cstdint>

struct Rng {
    uint64_t state;
    explicit Rng(uint64_t seed) : state(seed) {}

    uint64_t next_u64() {
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // Uniform in [0, 1) with 53 random bits.
    double uniform() { return (next_u64() >> 11) * (1.0 / 9007199254740992.0); }
    // Uniform integer in [0, n), n > 0 (rejection sampling, so exactly uniform).
    uint64_t below(uint64_t n) {
        uint64_t limit = UINT64_MAX - UINT64_MAX % n;
        uint64_t x;
        do x = next_u64();
        while (x >= limit);
        return x % n;
    }
    // Standard normal by the Box-Muller transform (one of the pair is used, the other dropped).
    double normal();
    // Moves on as `count` normal() calls would (each takes two next_u64() draws, and a draw only adds
    // the constant to the state), without drawing them.
    void skip_normals(uint64_t count) { state += 2 * count * 0x9E3779B97F4A7C15ull; }
};

// p[i] = (float)(scale · rng.normal()) for i < n, the very values and rng state of that loop, drawn by
// all the machine's threads: each takes a block of i and starts its own Rng where the loop would be
// there (skip_normals). A 1.5B-parameter model's weights are one sequence of normals: one thread
// took a minute over them.
void fill_normal(float* p, size_t n, double scale, Rng& rng);
