// Collectives of several NCCL communicators running at once on one device. The trainer issues some
// collectives on streams of their own so that they overlap compute and each other: -z 3's weight
// gathers beside its gradient reductions, the tensor group's prefetched gathers beside its
// all-reduces, ZeRO's reductions beside the pipeline's transfers. Each such pair uses two
// communicators. NCCL's kernels wait for their peers on the device, so two ranks that start two
// communicators' collectives in opposite orders can wait for each other forever. From NCCL 2.26 on,
// NCCL_LAUNCH_ORDER_IMPLICIT=1 makes NCCL start a device's collectives in the order its host issued
// them, across communicators, while still letting them run at once; the trainer then only needs
// every rank to issue its collectives in the same order, which one host thread per rank running the
// same schedule does (CUDA graphs included: each is captured, and the graphs launched, in the same
// order on every rank).
// The trainer sets NCCL_LAUNCH_ORDER_IMPLICIT=1 before its first communicator unless the environment
// sets it. With an older NCCL, or with NCCL_LAUNCH_ORDER_IMPLICIT=0, the collectives that would run on
// a communicator of their own (the tensor group's prefetch, -z 3's gathers) run in line on the
// stream of another, and the start-up report says so.
#pragma once
#include <string>

// Whether NCCL `version` (ncclGetVersion's code) with NCCL_LAUNCH_ORDER_IMPLICIT set to `setting`
// (null: unset, which the trainer turns into 1) orders launches across communicators.
bool launch_order_is_implicit(int version, const char* setting);
// For this process: the NCCL it runs and its environment.
bool communicators_may_overlap();
// Sets NCCL_LAUNCH_ORDER_IMPLICIT=1 where NCCL has it and the environment leaves it unset; called
// before the process's first NCCL communicator.
void request_implicit_launch_order();
// "" where communicators may overlap; else a one-line note of why the overlapping gathers run in line.
std::string launch_order_note();
