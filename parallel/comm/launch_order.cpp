// Ordering collectives across NCCL communicators (launch_order.h).
#include "parallel/comm/launch_order.h"

#include <cstdlib>
#include <cstring>

#include <nccl.h>

#include "base/errors.h"

namespace {
constexpr int kImplicitOrderVersion = 22600;  // NCCL 2.26.0, in ncclGetVersion's code (major·10000 + minor·100)
const char* kSetting = "NCCL_LAUNCH_ORDER_IMPLICIT";

int nccl_version() {
    int version = 0;
    if (ncclGetVersion(&version) != ncclSuccess) return 0;
    return version;
}
}  // namespace

bool launch_order_is_implicit(int version, const char* setting) {
    if (version < kImplicitOrderVersion) return false;
    return setting == nullptr || strcmp(setting, "0") != 0;
}

bool communicators_may_overlap() { return launch_order_is_implicit(nccl_version(), getenv(kSetting)); }

void request_implicit_launch_order() {
    if (nccl_version() >= kImplicitOrderVersion) setenv(kSetting, "1", 0);  // 0: a value already set stays
}

std::string launch_order_note() {
    if (communicators_may_overlap()) return "";
    const int version = nccl_version();
    if (version < kImplicitOrderVersion)
        return strprintf("note: NCCL %d.%d cannot order several communicators' launches (NCCL 2.26 can): the "
                         "gathers that would overlap compute on a communicator of their own run in line",
                         version / 10000, version / 100 % 100);
    return "note: NCCL_LAUNCH_ORDER_IMPLICIT=0: the gathers that would overlap compute on a communicator of "
           "their own run in line";
}
