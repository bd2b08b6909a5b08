// DeviceArena: a model's device memory in one allocation. Buffers are requested first, as
// (pointer, element count, kind), laid out 256-byte aligned; allocate() then makes one cudaMalloc and
// points every request into it. Because the layout exists before the allocation, the start-up report,
// the out-of-memory check and a --dry-run plan all read the exact bytes from the requests themselves,
// split by kind (parameters, gradients, master weights, optimizer state, activations).
#pragma once
#include <cstddef>
#include <vector>

#include "base/errors.h"
#include "base/train_model.h"  // ModelMemory
#include "kernels/common.h"

enum class MemoryKind { PARAMETERS, GRADIENTS, MASTER_WEIGHTS, OPTIMIZER_STATE, ACTIVATIONS };

class DeviceArena {
public:
    template <typename T>
    void request(T** pointer, size_t count, MemoryKind kind) {
        requests_.push_back({reinterpret_cast<void**>(pointer), count * sizeof(T), kind});
    }
    // Bytes of every request, as allocated (each rounded up to 256).
    size_t bytes() const {
        size_t total = 0;
        for (const Request& r : requests_) total += round_up(r.bytes);
        return total;
    }
    // The requested bytes by kind (network bytes are the caller's to fill in).
    ModelMemory memory() const {
        ModelMemory m;
        for (const Request& r : requests_) {
            const size_t b = round_up(r.bytes);
            switch (r.kind) {
                case MemoryKind::PARAMETERS: m.parameters += b; break;
                case MemoryKind::GRADIENTS: m.gradients += b; break;
                case MemoryKind::MASTER_WEIGHTS: m.master_weights += b; break;
                case MemoryKind::OPTIMIZER_STATE: m.optimizer_state += b; break;
                case MemoryKind::ACTIVATIONS: m.activations += b; break;
            }
        }
        return m;
    }
    // One cudaMalloc for every request, or an error naming the figure. Allocates once.
    void allocate(const char* what) {
        const size_t total = bytes();
        if (total == 0 || base_) return;
        char* base = nullptr;
        if (cudaMalloc(&base, total) != cudaSuccess) {
            cudaGetLastError();
            fail("out of GPU memory allocating %.1f MiB for %s (try a smaller -b, -t, -r 2, or a "
                 "higher -z with more ranks)", total / 1048576.0, what);
        }
        base_ = base;
        for (const Request& r : requests_) {
            *r.pointer = base;
            base += round_up(r.bytes);
        }
    }
    ~DeviceArena() {
        if (base_) cudaFree(base_);
    }

private:
    struct Request {
        void** pointer;
        size_t bytes;
        MemoryKind kind;
    };
    static size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }
    std::vector<Request> requests_;
    void* base_ = nullptr;
};
