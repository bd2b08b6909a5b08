// The two kinds of work a stream carries, as the emulator's queue (stream_queue.h) orders them:
// device work (kernels, copies, memsets, cuBLASLt products), which runs in any order the streams and
// events allow, and communication (the NCCL stand-in's collectives and transfers), which also keeps
// the order in which the host issued it. Host-only stand-ins include this without the emulator.
#pragma once

namespace emu {
enum class WorkKind { device, communication };
}
