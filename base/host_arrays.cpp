#include "base/host_arrays.h"

#include <algorithm>
#include <mutex>

namespace {
// The kept arrays of one element type.
template <typename T>
class KeptArrays {
public:
    std::vector<T> take(size_t n) {
        if (n * sizeof(T) >= kReusedArrayBytes) {
            std::lock_guard<std::mutex> guard(lock_);
            // The smallest kept array that holds n elements: the others stay for larger requests.
            auto best = arrays_.end();
            for (auto it = arrays_.begin(); it != arrays_.end(); ++it)
                if (it->capacity() >= n && (best == arrays_.end() || it->capacity() < best->capacity())) best = it;
            if (best != arrays_.end()) {
                std::vector<T> array = std::move(*best);
                arrays_.erase(best);
                array.resize(n);  // within its capacity: no allocation; only elements past its old size are written
                return array;
            }
        }
        return std::vector<T>(n);
    }
    void keep(std::vector<T>&& array) {
        std::vector<T> taken = std::move(array);
        array.clear();
        if (taken.capacity() * sizeof(T) < kReusedArrayBytes) return;
        std::lock_guard<std::mutex> guard(lock_);
        arrays_.push_back(std::move(taken));
        if ((int)arrays_.size() > kReusedArraysKept) {  // the smallest goes back to the system
            auto smallest = std::min_element(arrays_.begin(), arrays_.end(), [](const auto& a, const auto& b) {
                return a.capacity() < b.capacity();
            });
            arrays_.erase(smallest);
        }
    }
    size_t count() {
        std::lock_guard<std::mutex> guard(lock_);
        return arrays_.size();
    }
    size_t bytes() {
        std::lock_guard<std::mutex> guard(lock_);
        size_t total = 0;
        for (const auto& a : arrays_) total += a.capacity() * sizeof(T);
        return total;
    }

private:
    std::mutex lock_;
    std::vector<std::vector<T>> arrays_;
};

KeptArrays<float>& kept_values() {
    static KeptArrays<float> k;
    return k;
}
KeptArrays<char>& kept_bytes() {
    static KeptArrays<char> k;
    return k;
}
}  // namespace

std::vector<float> reusable_host_array(size_t n) { return kept_values().take(n); }
std::vector<char> reusable_host_bytes(size_t n) { return kept_bytes().take(n); }

std::vector<float> reused_copy(const std::vector<float>& from) {
    std::vector<float> to = reusable_host_array(from.size());
    std::copy(from.begin(), from.end(), to.begin());
    return to;
}

void reuse_host_array(std::vector<float>&& array) { kept_values().keep(std::move(array)); }
void reuse_host_bytes(std::vector<char>&& bytes) { kept_bytes().keep(std::move(bytes)); }

size_t reused_host_arrays_kept() { return kept_values().count() + kept_bytes().count(); }
size_t reused_host_array_bytes() { return kept_values().bytes() + kept_bytes().bytes(); }
