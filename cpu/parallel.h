// When a loop is worth splitting over OpenMP threads. Starting a parallel region costs microseconds
// on idle cores, but on busy ones (a machine shared with other jobs) a region waits until every
// thread gets a time slice: a LayerNorm over 256x768 took 15 ms on 2 threads under load and 0.06 ms on one.
// Loops with less work than this (in elements or multiply-adds) run on the calling thread:
// `#pragma omp parallel for if (worth_parallel(n))`. Results never depend on it.
#pragma once
#include <cstddef>

constexpr size_t PARALLEL_MIN_WORK = 1 << 20;
inline bool worth_parallel(size_t work) { return work >= PARALLEL_MIN_WORK; }
