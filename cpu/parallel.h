// When a loop is worth splitting over OpenMP threads. Starting a parallel region costs microseconds
// on idle cores and far more when they are busy, so loops over fewer elements than this run on the
// calling thread: `#pragma omp parallel for if (worth_parallel(n))`. Results never depend on it.
#pragma once
#include <cstddef>

constexpr size_t PARALLEL_MIN_WORK = 1 << 15;
inline bool worth_parallel(size_t work) { return work >= PARALLEL_MIN_WORK; }
