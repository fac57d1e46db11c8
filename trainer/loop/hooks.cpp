#include "trainer/loop/hooks.h"

namespace ftb {

void HookList::onStart(TrainContext& ctx, TrainState& state) {
  for (StepHooks* h : hooks_)
    if (h) h->onStart(ctx, state);
}

void HookList::onStepBegin(TrainContext& ctx, int64_t step) {
  for (StepHooks* h : hooks_)
    if (h) h->onStepBegin(ctx, step);
}

void HookList::onStepEnd(TrainContext& ctx, const StepEnd& end) {
  for (StepHooks* h : hooks_)
    if (h) h->onStepEnd(ctx, end);
}

std::string HookList::lastCheckpoint() const {
  for (StepHooks* h : hooks_)
    if (h && !h->lastCheckpoint().empty()) return h->lastCheckpoint();
  return "";
}

}  // namespace ftb
