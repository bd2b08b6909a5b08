// When a loop is worth splitting over OpenMP threads. Starting a parallel region costs microseconds
// on idle cores, but on busy ones (a machine shared with other jobs) a region waits until every
// thread gets a time slice: a LayerNorm over 256x768 took 15 ms on 2 threads under load and 0.06 ms on one.
// Loops with less work than this (in elements or multiply-adds) run on the calling thread:
// `#pragma omp parallel for if (worth_parallel(n))`. Results never depend on it.
#pragma once
#include <cstddef>
#include <vector>

constexpr size_t PARALLEL_MIN_WORK = 1 << 20;
inline bool worth_parallel(size_t work) { return work >= PARALLEL_MIN_WORK; }

// Sets the first n elements of v to zero (the models' gradient buffers, before an op adds into them).
template <typename Real>
void fill_zero(std::vector<Real>& v, size_t n) {
#pragma omp parallel for schedule(static) if (worth_parallel(n))
    for (size_t i = 0; i < n; i++) v[i] = 0;
}
