/*
 * metaltopk testing hooks: NOT part of the stable API in metaltopk.h. They exist so tests can make
 * the library fail on purpose and prove that every failure path reports the right status, writes
 * nothing and frees everything. They are compiled into every build and cost one relaxed atomic
 * load on a cold flag per failure point while disarmed.
 *
 * A failure point is a place where the library can fail for reasons outside the caller's control:
 * a host allocation, a device allocation, a device call or kernel launch, or a command-encoding
 * step. While armed, the library counts the points of the selected kinds that it reaches, in every
 * thread, and the N-th one (1-based) fails as the real failure would: host allocations with
 * MTK_ERROR_OUT_OF_MEMORY ("host allocation failed"), device allocations with
 * MTK_ERROR_OUT_OF_MEMORY, device calls and encoding steps with MTK_ERROR_DEVICE; injected
 * messages contain "injected fault". Only that one point fails; later ones succeed.
 *
 * Arming and resetting are not synchronised with calls in flight: arm, call, inspect, reset.
 */
#ifndef METALTOPK_TESTING_H
#define METALTOPK_TESTING_H

#include <stdint.h>

#include "metaltopk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kinds of failure points; combine them into a mask. */
typedef enum mtk_fault_site {
  MTK_FAULT_HOST_ALLOCATION = 1 << 0,
  MTK_FAULT_DEVICE_ALLOCATION = 1 << 1,
  MTK_FAULT_DEVICE_CALL = 1 << 2, /* driver calls, kernel launches, copies, synchronisation */
  MTK_FAULT_ENCODE_STEP = 1 << 3, /* command-buffer encoding (Metal, MPSGraph) */
  MTK_FAULT_ALL_SITES = (1 << 4) - 1
} mtk_fault_site;

/* Arms the failure points of the kinds in `site_mask`: the `n`-th one reached fails. n = 0 only
 * counts them (nothing fails). Restarts the count at zero. */
MTK_API void mtk_testing_fail_at(unsigned site_mask, uint64_t n);
/* Disarms every failure point and clears the count. */
MTK_API void mtk_testing_reset(void);
/* Failure points of the armed kinds reached since the last mtk_testing_fail_at, including the
 * one that failed. */
MTK_API uint64_t mtk_testing_failure_points_seen(void);
/* Allocations the library holds now, over all contexts: memory handed to callers (mtk_malloc,
 * mtk_topk_alloc) and every backend's scratch. */
MTK_API int64_t mtk_testing_live_allocations(void);

#ifdef __cplusplus
}
#endif

#endif /* METALTOPK_TESTING_H */
