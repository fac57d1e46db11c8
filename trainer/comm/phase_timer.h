#pragma once
// Step timing: one clock for the consecutive phases of a step.
//
// A PhaseTimer starts its first phase when it is made. Each end*() closes the running phase,
// charges its seconds to the field it is given, and starts the next phase at once, so the
// fields one timer charges add up to its elapsed() (Invariant). A phase ends when the compute
// device's queued work does (phaseEnd(), trainer/metrics/perf.h): on a GPU each phase is
// charged its own kernels, on the CPU the wait is free.
//
// Collectives issued inside a phase are timed by every Comm (collectiveSeconds(), comm.h);
// endSplit() charges that part of the phase to a separate comm field.

#include "trainer/comm/comm.h"
#include "trainer/metrics/perf.h"

namespace ftb {

class PhaseTimer {
 public:
  PhaseTimer() : start_(nowSeconds()), mark_(start_), coll_mark_(collectiveSeconds()) {}

  // Ends the running phase: adds its seconds to `phase` and returns them.
  double end(double& phase) {
    const double now = phaseEnd(), d = now - mark_;
    phase += d;
    mark_ = now;
    coll_mark_ = collectiveSeconds();
    return d;
  }

  // Ends the running phase: its collectives' seconds go to `comm`, the rest to `phase`.
  void endSplit(double& phase, double& comm) {
    const double coll_before = coll_mark_;
    end(phase);
    const double c = coll_mark_ - coll_before;
    phase -= c;
    comm += c;
  }

  // Seconds since the timer was made, the running phase's device work included.
  double elapsed() const { return phaseEnd() - start_; }

 private:
  double start_, mark_, coll_mark_;
};

}  // namespace ftb
