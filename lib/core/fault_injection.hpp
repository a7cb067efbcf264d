// Failure points and allocation accounting for the reliability tests (include/metaltopk_testing.h).
//
// A backend marks each place that can fail for reasons outside the caller's control with one line,
// placed just before the operation it stands for:
//
//     mtk::fault_point(mtk::FaultSite::DeviceCall);
//
// Disarmed (always, outside tests) that is one relaxed load of a flag nobody writes. Armed, the
// chosen point throws exactly what the real failure would, so the caller's error path runs.
// Every allocation the library keeps beyond one call's stack (caller-visible memory, scratch) is
// reported with track_allocation / track_release so tests can prove nothing leaks.
#pragma once

#include <atomic>

#include "metaltopk_testing.h"

namespace mtk {

enum class FaultSite : unsigned {
  HostAllocation = MTK_FAULT_HOST_ALLOCATION,      // throws std::bad_alloc
  DeviceAllocation = MTK_FAULT_DEVICE_ALLOCATION,  // throws Error(MTK_ERROR_OUT_OF_MEMORY)
  DeviceCall = MTK_FAULT_DEVICE_CALL,              // throws Error(MTK_ERROR_DEVICE)
  EncodeStep = MTK_FAULT_ENCODE_STEP,              // throws Error(MTK_ERROR_DEVICE)
};

namespace detail {
extern std::atomic<bool> fault_points_armed;
void reach_armed_fault_point(FaultSite site);
}  // namespace detail

inline void fault_point(FaultSite site) {
  if (__builtin_expect(detail::fault_points_armed.load(std::memory_order_relaxed), false)) {
    detail::reach_armed_fault_point(site);
  }
}

void track_allocation() noexcept;
void track_release() noexcept;

}  // namespace mtk
