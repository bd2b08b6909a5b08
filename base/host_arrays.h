// Large host arrays kept for reuse. A checkpoint's (or snapshot's) host copy at a step boundary
// fills fp32 arrays of the model's size (the weights, the master weights, both moments: 1.9 GiB for
// GPT-2 124M) that live until the background writer has written them, and a snapshot's files are
// made as byte images of the same size. Fresh arrays that large are mapped by the C library page by
// page as they are first touched, and given back to the operating system when freed: the next copy
// faults in every page again, on a virtual machine at some 10 us a 4 KiB page, which made the copy
// several times slower than the copying. So the arrays a written checkpoint or snapshot is done with
// are handed back here, and the next copy takes them, already mapped.
//
// Arrays of at least kReusedArrayBytes are kept (smaller ones come from the C library's heap, which
// the trainer already tells to keep its freed memory), at most kReusedArraysKept of each kind (fp32
// values, bytes): what a checkpoint and the snapshot or checkpoint after it held at once. They stay
// allocated between checkpoints: a run that checkpoints keeps that much host memory for good, as
// much as each checkpoint needed anyway. Safe to call from any thread.
#pragma once
#include <cstddef>
#include <vector>

constexpr size_t kReusedArrayBytes = 32u << 20;
constexpr int kReusedArraysKept = 8;

// An array of n elements whose values are unspecified (a kept one, or a fresh one of zeros): for a
// caller that writes every element.
std::vector<float> reusable_host_array(size_t n);
std::vector<char> reusable_host_bytes(size_t n);
// A copy of `from` in such an array.
std::vector<float> reused_copy(const std::vector<float>& from);
// Takes `array` to be handed out again (where it is large enough to be worth keeping); leaves it empty.
void reuse_host_array(std::vector<float>&& array);
void reuse_host_bytes(std::vector<char>&& bytes);
// How many arrays of both kinds are kept now, and their bytes (for tests and reports).
size_t reused_host_arrays_kept();
size_t reused_host_array_bytes();
