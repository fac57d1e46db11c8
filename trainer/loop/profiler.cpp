#include "trainer/loop/profiler.h"

#include <torch/csrc/autograd/profiler_legacy.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "common/error.h"
#include "common/log.h"

namespace ftb {
namespace {

namespace fs = std::filesystem;
namespace prof = torch::autograd::profiler;

// One complete event per push/pop pair (matched by RecordFunction handle, per thread).
nlohmann::json toChromeEvents(const prof::thread_event_lists& lists, int rank) {
  nlohmann::json events = nlohmann::json::array();
  for (const auto& list : lists) {
    std::unordered_map<uint64_t, const prof::LegacyEvent*> open;
    for (const prof::LegacyEvent& e : list) {
      if (e.kind() == prof::EventKind::PushRange) {
        open[e.handle()] = &e;
      } else if (e.kind() == prof::EventKind::PopRange) {
        auto it = open.find(e.handle());
        if (it == open.end()) continue;  // pushed before the window opened
        const prof::LegacyEvent& b = *it->second;
        events.push_back({{"name", b.name()},
                          {"ph", "X"},
                          {"cat", "cpu"},
                          {"ts", b.cpuUs()},
                          {"dur", b.cpuElapsedUs(e)},
                          {"pid", rank},
                          {"tid", b.threadId()}});
        open.erase(it);
      }
    }
  }
  return events;
}

}  // namespace

std::string tracePath(const std::string& run_dir, int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank_%05d.json", rank);
  return (fs::path(run_dir) / "traces" / name).string();
}

StepProfiler::StepProfiler(std::vector<int64_t> steps, std::string path, int rank)
    : steps_(std::move(steps)), path_(std::move(path)), rank_(rank) {}

StepProfiler::~StepProfiler() {
  if (!recording_) return;
  try {
    stop(last_done_);
  } catch (const std::exception& e) {
    FTB_ERROR("profiler trace not written: " << e.what());
  }
}

void StepProfiler::start(int64_t step) {
  prof::ProfilerConfig cfg(torch::profiler::impl::ProfilerState::CPU);
  prof::enableProfilerLegacy(cfg);
  recording_ = true;
  first_ = step;
}

// last_step: the last step recorded (-1: the run ended before the first one finished).
void StepProfiler::stop(int64_t last_step) {
  recording_ = false;
  prof::thread_event_lists lists = prof::disableProfilerLegacy();
  nlohmann::json trace;
  trace["traceEvents"] = toChromeEvents(lists, rank_);
  trace["traceEvents"].push_back(
      {{"name", "process_name"},
       {"ph", "M"},
       {"pid", rank_},
       {"args", {{"name", "rank " + std::to_string(rank_) + " (" + hostName() + ")"}}}});
  trace["displayTimeUnit"] = "ms";
  trace["ftbench"] = {{"rank", rank_},
                      {"first_step", first_},
                      {"last_step", last_step},
                      {"requested", steps_},
                      {"complete", last_step == steps_[1]}};
  fs::create_directories(fs::path(path_).parent_path());
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp);
    out << trace.dump() << "\n";
    if (!out) throw IoError("cannot write " + tmp);
  }
  fs::rename(tmp, path_);
  written_ = path_;
  if (rank_ == 0)
    FTB_INFO("profiler: steps " << first_ << ".." << last_step << " traced to " << path_ << " ("
                                << trace["traceEvents"].size()
                                << " events; open in chrome://tracing or ui.perfetto.dev)");
}

void StepProfiler::onStepBegin(TrainContext& ctx, int64_t step) {
  (void)ctx;
  // A resumed run that starts inside the window records from its first step.
  if (!recording_ && written_.empty() && steps_.size() == 2 && step >= steps_[0] &&
      step <= steps_[1])
    start(step);
}

void StepProfiler::onStepEnd(TrainContext& ctx, const StepEnd& end) {
  (void)ctx;
  if (!recording_) return;
  last_done_ = end.step;
  if (end.step == steps_[1] || end.last) stop(end.step);
}

}  // namespace ftb
