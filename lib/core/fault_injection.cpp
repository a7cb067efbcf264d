#include "fault_injection.hpp"

#include <cstdint>
#include <new>

#include "error.hpp"

namespace mtk {
namespace {
std::atomic<unsigned> armed_sites{0};
std::atomic<uint64_t> failing_ordinal{0};  // 0: count only
std::atomic<uint64_t> points_seen{0};
std::atomic<int64_t> live_allocations{0};
}  // namespace

namespace detail {
std::atomic<bool> fault_points_armed{false};

void reach_armed_fault_point(FaultSite site) {
  if ((armed_sites.load(std::memory_order_relaxed) & static_cast<unsigned>(site)) == 0) return;
  const uint64_t ordinal = points_seen.fetch_add(1, std::memory_order_relaxed) + 1;
  if (ordinal != failing_ordinal.load(std::memory_order_relaxed)) return;
  switch (site) {
    case FaultSite::HostAllocation:
      throw std::bad_alloc();
    case FaultSite::DeviceAllocation:
      fail(MTK_ERROR_OUT_OF_MEMORY, "device allocation failed (injected fault at failure point ",
           ordinal, ")");
    case FaultSite::DeviceCall:
      fail(MTK_ERROR_DEVICE, "device call failed (injected fault at failure point ", ordinal, ")");
    case FaultSite::EncodeStep:
      fail(MTK_ERROR_DEVICE, "command encoding failed (injected fault at failure point ", ordinal,
           ")");
  }
}
}  // namespace detail

void track_allocation() noexcept { live_allocations.fetch_add(1, std::memory_order_relaxed); }
void track_release() noexcept { live_allocations.fetch_sub(1, std::memory_order_relaxed); }

}  // namespace mtk

extern "C" {

MTK_API void mtk_testing_fail_at(unsigned site_mask, uint64_t n) {
  using namespace mtk;
  detail::fault_points_armed.store(false, std::memory_order_relaxed);
  armed_sites.store(site_mask & MTK_FAULT_ALL_SITES, std::memory_order_relaxed);
  failing_ordinal.store(n, std::memory_order_relaxed);
  points_seen.store(0, std::memory_order_relaxed);
  // Relaxed is enough: arming happens before the call it targets on this thread, and the call
  // hands work to other threads only through synchronisation.
  detail::fault_points_armed.store((site_mask & MTK_FAULT_ALL_SITES) != 0,
                                   std::memory_order_relaxed);
}

MTK_API void mtk_testing_reset(void) { mtk_testing_fail_at(0, 0); }

MTK_API uint64_t mtk_testing_failure_points_seen(void) {
  return mtk::points_seen.load(std::memory_order_relaxed);
}

MTK_API int64_t mtk_testing_live_allocations(void) {
  return mtk::live_allocations.load(std::memory_order_relaxed);
}

}  // extern "C"
