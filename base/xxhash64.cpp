// XXH64 (see xxhash64.h), from its published description: 32-byte stripes into four lanes, then the
// lanes merged, the tail of fewer than 32 bytes folded in 8, 4 and 1 bytes at a time, and a final
// avalanche of shifts and multiplies.
#include "base/xxhash64.h"

#include <cstring>

namespace {
constexpr uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full, P3 = 0x165667B19E3779F9ull,
                   P4 = 0x85EBCA77C2B2AE63ull, P5 = 0x27D4EB2F165667C5ull;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
uint64_t read64(const unsigned char* p) {  // little-endian, as every machine this builds for
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
uint32_t read32(const unsigned char* p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
uint64_t lane_round(uint64_t lane, uint64_t input) { return rotl(lane + input * P2, 31) * P1; }
uint64_t merge(uint64_t hash, uint64_t lane) { return (hash ^ lane_round(0, lane)) * P1 + P4; }

// One 32-byte stripe into the four lanes.
void stripe(uint64_t lanes[4], const unsigned char* p) {
    for (int i = 0; i < 4; i++) lanes[i] = lane_round(lanes[i], read64(p + 8 * i));
}
}  // namespace

void Xxh64::update(const void* data, size_t bytes) {
    if (bytes == 0) return;  // (data may then be null, which memcpy must not see)
    const unsigned char* p = (const unsigned char*)data;
    total_ += bytes;
    if (pending_bytes_ > 0) {  // complete the stripe begun by the last call
        const size_t n = bytes < 32 - pending_bytes_ ? bytes : 32 - pending_bytes_;
        memcpy(pending_ + pending_bytes_, p, n);
        pending_bytes_ += n, p += n, bytes -= n;
        if (pending_bytes_ < 32) return;
        stripe(lanes_, pending_);
        pending_bytes_ = 0;
    }
    uint64_t a = lanes_[0], b = lanes_[1], c = lanes_[2], d = lanes_[3];  // in registers
    for (; bytes >= 32; p += 32, bytes -= 32) {
        a = lane_round(a, read64(p)), b = lane_round(b, read64(p + 8));
        c = lane_round(c, read64(p + 16)), d = lane_round(d, read64(p + 24));
    }
    lanes_[0] = a, lanes_[1] = b, lanes_[2] = c, lanes_[3] = d;
    memcpy(pending_, p, bytes);
    pending_bytes_ = bytes;
}

uint64_t Xxh64::digest() const {
    uint64_t hash;
    if (total_ >= 32) {
        const uint64_t* v = lanes_;
        hash = rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18);
        for (int i = 0; i < 4; i++) hash = merge(hash, v[i]);
    } else {
        hash = P5;  // the seed (0) + P5: fewer than 32 bytes never touch the lanes
    }
    hash += total_;
    const unsigned char* p = pending_;
    size_t left = pending_bytes_;
    for (; left >= 8; p += 8, left -= 8) hash = rotl(hash ^ lane_round(0, read64(p)), 27) * P1 + P4;
    if (left >= 4) {
        hash = rotl(hash ^ (read32(p) * P1), 23) * P2 + P3;
        p += 4, left -= 4;
    }
    for (; left > 0; p++, left--) hash = rotl(hash ^ (*p * P5), 11) * P1;
    hash ^= hash >> 33, hash *= P2;
    hash ^= hash >> 29, hash *= P3;
    return hash ^ (hash >> 32);
}

uint64_t xxhash64(const void* data, size_t bytes) {
    Xxh64 h;
    h.update(data, bytes);
    return h.digest();
}
