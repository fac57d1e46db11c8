// What tune's halving rounds rank by (tune_state.h): a short run disturbed in one step keeps
// the figure of its fastest steps; the final ranking's figure stays the median.
#include <gtest/gtest.h>

#include "sweep_tagger/tune_state.h"

namespace ftb {
namespace {

// A completed run of `round` at `tps` dataset tokens/s, its steps' p50 and p90 tokens/s.
TuneRun tuneRun(int round, double tps, double p50, double p90) {
  TuneRun r;
  r.round = round;
  r.row.status = RunState::Completed;
  r.row.tokens_per_s_dataset = tps;
  r.row.step_time_p50_s = 1.0;
  r.row.step_tokens_p10 = p50;
  r.row.step_tokens_p50 = p50;
  r.row.step_tokens_p90 = p90;
  return r;
}

TEST(TuneScreen, OneDisturbedStepDoesNotHideAFastPoint) {
  // Two measured steps: 407 tokens/s and, disturbed, 293: median 350, fastest 407.
  TuneCandidate fast, steady;
  fast.runs.push_back(tuneRun(0, 350, 350, 407));
  steady.runs.push_back(tuneRun(0, 370, 370, 375));
  EXPECT_LT(*fast.measuredTokensPerS(), *steady.measuredTokensPerS());
  EXPECT_DOUBLE_EQ(*fast.screenTokensPerS(), 407);
  EXPECT_DOUBLE_EQ(*steady.screenTokensPerS(), 375);
  EXPECT_GT(*fast.screenTokensPerS(), *steady.screenTokensPerS());
}

TEST(TuneScreen, ScalesDatasetTokensByTheFastestStepsAndUsesTheLastRound) {
  TuneCandidate c;
  c.runs.push_back(tuneRun(0, 100, 100, 200));  // round 0: left behind by round 1
  c.runs.push_back(tuneRun(1, 90, 100, 110));   // dataset 90 of padded 100 tokens/s
  c.runs.push_back(tuneRun(1, 80, 100, 120));
  c.runs.push_back(tuneRun(1, 70, 100, 100));
  EXPECT_DOUBLE_EQ(*c.measuredTokensPerS(), 80);
  EXPECT_DOUBLE_EQ(*c.screenTokensPerS(), 96);  // median of 99, 96, 70
}

TEST(TuneScreen, WithoutStepPercentilesFallsBackToTheMedianAndWithoutRunsToNothing) {
  TuneCandidate none;
  EXPECT_FALSE(none.screenTokensPerS());
  TuneCandidate c;
  TuneRun r = tuneRun(0, 120, 0, 0);
  r.row.step_tokens_p50.reset();
  c.runs.push_back(r);
  EXPECT_DOUBLE_EQ(*c.screenTokensPerS(), 120);
  c.runs.back().row.status = RunState::Failed;
  EXPECT_FALSE(c.screenTokensPerS());
}

}  // namespace
}  // namespace ftb
