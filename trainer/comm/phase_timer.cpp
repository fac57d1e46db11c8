#include "trainer/comm/phase_timer.h"

#include <algorithm>

namespace ftb {

PhaseTimer::PhaseTimer()
    : start_(DeviceMark::mark()), settled_(start_), coll_mark_(collectiveSeconds()) {}

void PhaseTimer::end(double& phase, double* also) {
  const double coll = collectiveSeconds();
  ended_.push_back({DeviceMark::mark(), &phase, also, nullptr, coll - coll_mark_});
  coll_mark_ = coll;
}

void PhaseTimer::endSplit(double& phase, double& comm) {
  end(phase);
  ended_.back().comm = &comm;
}

void PhaseTimer::settle() {
  if (ended_.empty()) return;
  ended_.back().at.secondsSince(settled_);  // the one wait: every earlier mark is reached too
  for (const Ended& e : ended_) {
    double d = e.at.secondsSince(settled_);
    settled_ = e.at;
    if (e.also) *e.also += d;
    if (e.comm) {  // host-timed collectives inside a device-timed phase: at most all of it
      const double c = std::min(e.collective_s, std::max(d, 0.0));
      *e.comm += c;
      d -= c;
    }
    *e.phase += d;
  }
  ended_.clear();
}

double PhaseTimer::elapsed() {
  settle();
  return DeviceMark::mark().secondsSince(start_);
}

}  // namespace ftb
