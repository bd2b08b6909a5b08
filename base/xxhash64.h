// XXH64, the 64-bit hash of xxHash (Yann Collet; seed 0 here), computed as bytes arrive: the
// checksum of the training-state file from version 5 on (train/training_state.h). It reads 8 bytes at
// a time into four independent lanes, so a core runs it at several bytes per cycle, where FNV-1a's
// multiply per byte is one long chain of dependent multiplies (about 1.3 ns a byte). The output is
// the reference implementation's for any split of the same bytes into update() calls.
#pragma once
#include <cstddef>
#include <cstdint>

class Xxh64 {
public:
    void update(const void* data, size_t bytes);
    uint64_t digest() const;  // of everything so far; more may follow

private:
    // The four lanes start at P1 + P2, P2, 0 and -P1 (the seed, 0, plus the primes of xxhash64.cpp).
    uint64_t lanes_[4] = {0x60EA27EEADC0B5D6ull, 0xC2B2AE3D27D4EB4Full, 0, 0x61C8864E7A143579ull};
    uint64_t total_ = 0;         // bytes so far
    unsigned char pending_[32];  // the start of a 32-byte stripe not yet complete
    size_t pending_bytes_ = 0;
};

// XXH64 of one buffer.
uint64_t xxhash64(const void* data, size_t bytes);
