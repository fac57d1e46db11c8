// PhaseTimer (trainer/comm/phase_timer.h): phases are charged when the timer settles, not
// at each end (on a GPU that is what keeps the host from waiting at every phase end; on the
// CPU the same bookkeeping runs on host-clock marks), the charged seconds add up to the
// elapsed time, and endSplit moves a phase's collective seconds to the comm field.
#include "trainer/comm/phase_timer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace ftb {
namespace {

void sleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

TEST(PhaseTimer, ChargesEndedPhasesWhenItSettlesAndTheyAddUpToElapsed) {
  PhaseTimer t;
  double data = 0, fwd = 0, comm = 0, agree = 0;
  sleepMs(20);
  t.end(data);
  {
    CollectiveTimer blocked;  // a collective inside the forward phase
    sleepMs(30);
  }
  sleepMs(10);
  t.endSplit(fwd, comm);
  sleepMs(5);
  t.end(comm, &agree);
  EXPECT_EQ(data + fwd + comm + agree, 0.0);  // nothing is charged before the timer settles
  t.settle();
  EXPECT_GE(data, 0.020);
  EXPECT_GE(fwd, 0.010);           // the phase less its collective
  EXPECT_GE(comm, 0.030 + 0.005);  // the collective, then the whole last phase
  EXPECT_GE(agree, 0.005);
  EXPECT_LE(agree, comm);  // `also` gets the phase's seconds, `phase` them too
  const double charged = data + fwd + comm;
  const double elapsed = t.elapsed();
  EXPECT_LE(charged, elapsed);
  t.settle();  // nothing more ended: nothing more charged
  EXPECT_EQ(data + fwd + comm, charged);
}

TEST(PhaseTimer, EachPhaseIsChargedOnceAcrossSeveralSettles) {
  PhaseTimer t;
  double a = 0, b = 0;
  sleepMs(10);
  t.end(a);
  t.settle();
  const double a1 = a;
  sleepMs(10);
  t.end(b);
  t.settle();
  EXPECT_EQ(a, a1);
  EXPECT_GE(b, 0.010);
  EXPECT_LE(a + b, t.elapsed());
}

}  // namespace
}  // namespace ftb
