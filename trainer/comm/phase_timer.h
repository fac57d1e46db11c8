#pragma once
// Step timing: one clock for the consecutive phases of a step, which never stalls the host
// at a phase end.
//
// A PhaseTimer starts its first phase when it is made. Each end*() closes the running phase
// and starts the next at once; the phase's seconds are charged to the field it names when
// the timer settles. A phase ends on the compute device's timeline (DeviceMark,
// trainer/metrics/device.h): on a GPU, when the device has done the work queued before the
// end*() call (a CUDA event; the host goes on queueing), so each phase is charged its own
// kernels and the device's idle time waiting for the host to queue them; on the CPU, where
// every op has finished when it returns, at the host clock.
//
// settle() charges every ended phase: on a GPU it waits for the device once, for the last
// phase's end. Invariant: after settle(), the seconds charged add up to the timer's time from
// its start to the last end*(); elapsed() settles and adds the running phase's time so far.
//
// Collectives issued inside a phase are timed by every Comm on the host (collectiveSeconds(),
// comm.h); endSplit() charges that part of the phase to a separate comm field.

#include <vector>

#include "trainer/comm/comm.h"
#include "trainer/metrics/device.h"

namespace ftb {

class PhaseTimer {
 public:
  PhaseTimer();

  // Ends the running phase: its seconds go to `phase`, and also to `*also` when given.
  // REQUIRES: the fields outlive the next settle().
  void end(double& phase, double* also = nullptr);
  // Ends the running phase: its collectives' seconds go to `comm`, the rest to `phase`.
  void endSplit(double& phase, double& comm);
  // Charges every phase ended so far (see the header comment).
  void settle();
  // settle(), then the seconds since the timer was made, the running phase's device work
  // included (on a GPU: waits for the device).
  double elapsed();

 private:
  struct Ended {
    DeviceMark at;
    double* phase;
    double* also;
    double* comm;         // null: not split
    double collective_s;  // collective seconds that accrued in the phase
  };
  DeviceMark start_, settled_;  // settled_: the end of the last phase charged
  double coll_mark_;
  std::vector<Ended> ended_;
};

}  // namespace ftb
