// When KeptPagesBound (trainer/loop/step_log.h) first returns the allocator's kept pages:
// the step after that return faults its working set in again, so it lands on a warm-up
// step where the run has one to spare, and never before lazily created state exists.
#include "trainer/loop/step_log.h"

#include <gtest/gtest.h>

namespace ftb {
namespace {

constexpr double kAt = KeptPagesBound::kPurgeAtS;

TEST(KeptPagesBound, FirstPurgeInWarmUpWhenAWarmUpStepFollowsLateEnough) {
  // D512/L8 with two warm-up steps: step 0 ends 7 s in, step 1 is warm-up too.
  EXPECT_TRUE(KeptPagesBound::firstPurgeDue(-1, 7.0, /*warmup_follows=*/true));
  // The last warm-up step: the step after it is measured, so no purge there.
  EXPECT_FALSE(KeptPagesBound::firstPurgeDue(-1, 13.0, /*warmup_follows=*/false));
  // A fast model's warm-up ends before kPurgeAtS: lazily created state may not exist yet.
  EXPECT_FALSE(KeptPagesBound::firstPurgeDue(-1, 0.5 * kAt, /*warmup_follows=*/true));
}

TEST(KeptPagesBound, OtherwiseKPurgeAtSAfterTheFirstMeasuredStep) {
  EXPECT_FALSE(KeptPagesBound::firstPurgeDue(0.0, 30.0, false));
  EXPECT_FALSE(KeptPagesBound::firstPurgeDue(0.99 * kAt, 30.0, false));
  EXPECT_TRUE(KeptPagesBound::firstPurgeDue(kAt, kAt, false));
}

}  // namespace
}  // namespace ftb
