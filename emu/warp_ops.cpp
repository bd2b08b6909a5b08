// What shuffles and votes compute once every lane of the group has arrived (device_builtins.h).
// Lane numbering and width subsections follow the CUDA programming guide: with width w < 32 the
// warp is split into segments of w lanes; __shfl_sync reads lane (src mod w) of the caller's
// segment, up/down return the caller's own value when the source would leave the segment, xor
// returns it when the source lies in a later segment.
#include "emu/cuda_emu.h"

namespace emu {

void combine_shuffle(void* const lane_data[32], unsigned group) {
    // A lane that takes part in no shuffle gives this: all ones (a NaN, or -1), never a plausible
    // value, as reading it is undefined on a GPU.
    constexpr unsigned long long kPoison = ~0ull;
    for (int lane = 0; lane < 32; lane++) {
        if (!(group >> lane & 1)) continue;
        ShuffleSlot& s = *static_cast<ShuffleSlot*>(lane_data[lane]);
        const int width = s.width >= 1 && s.width <= 32 && (s.width & (s.width - 1)) == 0 ? s.width : 32;
        const int segment = lane & ~(width - 1);
        int src = lane;
        switch (s.kind) {
            case ShuffleKind::Index: src = segment + (s.arg & (width - 1)); break;
            case ShuffleKind::Up: src = lane - s.arg >= segment ? lane - s.arg : lane; break;
            case ShuffleKind::Down: src = lane + s.arg < segment + width ? lane + s.arg : lane; break;
            case ShuffleKind::Xor: {
                int x = lane ^ (s.arg & 31);
                src = x < segment + width ? x : lane;
                break;
            }
        }
        s.result = (group >> src & 1) ? static_cast<ShuffleSlot*>(lane_data[src])->value : kPoison;
    }
}

void combine_vote(void* const lane_data[32], unsigned group) {
    unsigned ballot = 0;
    for (int lane = 0; lane < 32; lane++)
        if ((group >> lane & 1) && static_cast<VoteSlot*>(lane_data[lane])->predicate)
            ballot |= 1u << lane;
    for (int lane = 0; lane < 32; lane++)
        if (group >> lane & 1) static_cast<VoteSlot*>(lane_data[lane])->ballot = ballot;
}

}  // namespace emu
