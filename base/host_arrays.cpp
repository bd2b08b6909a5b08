#include "base/host_arrays.h"

#include <algorithm>
#include <mutex>

namespace {
struct KeptArrays {
    std::mutex lock;
    std::vector<std::vector<float>> arrays;
};
KeptArrays& kept() {
    static KeptArrays k;
    return k;
}
}  // namespace

std::vector<float> reusable_host_array(size_t n) {
    if (n * sizeof(float) >= kReusedArrayBytes) {
        KeptArrays& k = kept();
        std::lock_guard<std::mutex> guard(k.lock);
        // The smallest kept array that holds n elements: the others stay for larger requests.
        auto best = k.arrays.end();
        for (auto it = k.arrays.begin(); it != k.arrays.end(); ++it)
            if (it->capacity() >= n && (best == k.arrays.end() || it->capacity() < best->capacity())) best = it;
        if (best != k.arrays.end()) {
            std::vector<float> array = std::move(*best);
            k.arrays.erase(best);
            array.resize(n);  // within its capacity: no allocation; only elements beyond its old size are written
            return array;
        }
    }
    return std::vector<float>(n);
}

std::vector<float> reused_copy(const std::vector<float>& from) {
    std::vector<float> to = reusable_host_array(from.size());
    std::copy(from.begin(), from.end(), to.begin());
    return to;
}

void reuse_host_array(std::vector<float>&& array) {
    std::vector<float> taken = std::move(array);
    array.clear();
    if (taken.capacity() * sizeof(float) < kReusedArrayBytes) return;
    KeptArrays& k = kept();
    std::lock_guard<std::mutex> guard(k.lock);
    k.arrays.push_back(std::move(taken));
    if ((int)k.arrays.size() > kReusedArraysKept) {  // the smallest goes back to the system
        auto smallest = std::min_element(k.arrays.begin(), k.arrays.end(), [](const auto& a, const auto& b) {
            return a.capacity() < b.capacity();
        });
        k.arrays.erase(smallest);
    }
}

size_t reused_host_arrays_kept() {
    KeptArrays& k = kept();
    std::lock_guard<std::mutex> guard(k.lock);
    return k.arrays.size();
}

size_t reused_host_array_bytes() {
    KeptArrays& k = kept();
    std::lock_guard<std::mutex> guard(k.lock);
    size_t bytes = 0;
    for (const auto& a : k.arrays) bytes += a.capacity() * sizeof(float);
    return bytes;
}
