#include "common/h5_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <stdexcept>
#include <system_error>

#include "common/error.h"
#include "common/step_columns.h"

namespace ftb {
namespace {

int64_t toInt(double v) { return std::isnan(v) ? -1 : static_cast<int64_t>(std::llround(v)); }

void writeAttr(hid_t obj, const std::string& name, const AttrValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v))
    h5::writeAttrInt(obj, name, *i);
  else if (const auto* d = std::get_if<double>(&v))
    h5::writeAttrDouble(obj, name, *d);
  else
    h5::writeAttrString(obj, name, std::get<std::string>(v));
}

}  // namespace

std::string metricsFilePath(const std::string& run_dir, int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank_%05d.h5", rank);
  return (std::filesystem::path(run_dir) / "metrics" / name).string();
}

MetricsFile MetricsFile::create(const std::string& path, const RunInfo& info) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) throw IoError("cannot create directory '" + parent.string() + "': " + ec.message());

  MetricsFile m;
  m.path_ = path;
  m.file_ = h5::createFile(path, /*file_locking=*/false);  // live files stay readable
  h5::reserveSpace(m.file_, m.headroom());
  h5::H5Handle root = h5::openGroup(m.file_, "/");
  h5::writeAttrInt(root, "schema_version", kMetricsSchemaVersion);
  const std::pair<const char*, const std::string*> strings[] = {
      {"tag", &info.tag},
      {"config_hash", &info.config_hash},
      {"hostname", &info.hostname},
      {"start_utc", &info.start_utc},
      {"ftbench_version", &info.ftbench_version},
      {"torch_version", &info.torch_version},
      {"device", &info.device},
      {"peak_source", &info.peak_source}};
  for (const auto& [name, value] : strings) h5::writeAttrString(root, name, *value);
  if (!info.cpu_model.empty()) h5::writeAttrString(root, "cpu_model", info.cpu_model);
  h5::writeAttrInt(root, "world_size", info.world_size);
  h5::writeAttrInt(root, "rank", info.rank);
  h5::writeAttrInt(root, "local_rank", info.local_rank);
  h5::writeAttrInt(root, "node_rank", info.node_rank);
  h5::writeAttrDouble(root, "peak_flops", info.peak_flops);
  for (const auto& [name, value] : info.extra_attrs) writeAttr(root, name, value);
  h5::writeStringDataset(m.file_, "config", info.config_toml);
  m.steps_group_ = h5::createGroup(m.file_, "steps");
  m.status_group_ = h5::createGroup(m.file_, "status");
  m.writeStatus(true);
  h5::flushFile(m.file_);
  return m;
}

MetricsFile MetricsFile::resume(const std::string& path, const RunInfo& info, int64_t resume_step) {
  std::error_code ec;
  const bool existed = std::filesystem::exists(path, ec);
  MetricsFile m;
  if (existed) {
    m.path_ = path;
    m.file_ = h5::openFile(path, /*writable=*/true, /*file_locking=*/false);
    h5::reserveSpace(m.file_, m.headroom());  // a full disk: refused before the cut
    m.steps_group_ = h5::openGroup(m.file_, "steps");
    m.status_group_ = h5::openGroup(m.file_, "status");
    m.cutRowsFrom(resume_step);
  } else {
    m = create(path, info);
  }
  h5::H5Handle root = h5::openGroup(m.file_, "/");
  if (existed) {  // this attempt's peak and environment replace the earlier attempt's
    h5::writeAttrString(root, "peak_source", info.peak_source);
    h5::writeAttrDouble(root, "peak_flops", info.peak_flops);
    for (const auto& [name, value] : info.extra_attrs) writeAttr(root, name, value);
  }
  std::vector<int64_t> steps;
  if (h5::hasAttr(root, "resume_steps")) steps = h5::readAttrInts(root, "resume_steps");
  steps.push_back(resume_step);
  h5::writeAttrInts(root, "resume_steps", steps);
  h5::writeAttrInt(root, "resume_count", static_cast<int64_t>(steps.size()));
  m.message_ = "resumed from the checkpoint of step " + std::to_string(resume_step);
  m.writeStatus(true);
  h5::flushFile(m.file_);
  return m;
}

void MetricsFile::cutRowsFrom(int64_t step) {
  hsize_t keep = 0;
  if (h5::exists(steps_group_, "step")) {
    std::vector<int64_t> steps = h5::readInts(steps_group_, "step");
    while (keep < steps.size() && steps[keep] < step) ++keep;
  }
  for (const std::string& name : h5::listMembers(steps_group_)) {
    h5::H5Handle d = h5::openDataset(steps_group_, name);
    h5::truncateDataset(d, std::min<hsize_t>(keep, h5::datasetLength(d)));
  }
  steps_flushed_ = static_cast<int64_t>(keep);
  resumed_time_s_ = 0;
  if (keep > 0 && h5::exists(steps_group_, "time_s")) {
    std::vector<double> t = h5::readDoubles(steps_group_, "time_s");  // cut to <= keep rows
    if (!t.empty()) resumed_time_s_ = t.back();
  }
}

void MetricsFile::moveResumePoint(std::optional<int64_t> resume_step) {
  std::unique_lock<std::recursive_mutex> lock = guard();
  if (appended_ || steps_buffered_ > 0)
    throw std::logic_error("MetricsFile::moveResumePoint after a row was appended");
  h5::reserveSpace(file_, headroom());  // a full disk: refused before the cut
  h5::H5Handle root = h5::openGroup(file_, "/");
  std::vector<int64_t> steps;
  if (h5::hasAttr(root, "resume_steps")) steps = h5::readAttrInts(root, "resume_steps");
  if (!steps.empty()) steps.pop_back();  // the resume this attempt recorded at open
  cutRowsFrom(resume_step.value_or(0));
  if (resume_step) steps.push_back(*resume_step);
  if (steps.empty()) {  // no resume after all: as a file create() wrote
    for (const char* a : {"resume_steps", "resume_count"})
      if (h5::hasAttr(root, a))
        h5::checkStatus(H5Adelete(root, a), root, std::string("H5Adelete ") + a);
  } else {
    h5::writeAttrInts(root, "resume_steps", steps);
    h5::writeAttrInt(root, "resume_count", static_cast<int64_t>(steps.size()));
  }
  message_ = resume_step ? "resumed from the checkpoint of step " + std::to_string(*resume_step)
                         : "started from step 0: no checkpoint could be loaded";
  writeStatus(true);
  h5::flushFile(file_);
}

MetricsFile& MetricsFile::operator=(MetricsFile&& other) noexcept {
  if (this != &other) {
    try {
      close();
    } catch (...) {
    }
    path_ = std::move(other.path_);
    file_ = std::move(other.file_);
    steps_group_ = std::move(other.steps_group_);
    status_group_ = std::move(other.status_group_);
    columns_ = std::move(other.columns_);
    column_index_ = std::move(other.column_index_);
    steps_flushed_ = other.steps_flushed_;
    steps_buffered_ = other.steps_buffered_;
    appended_ = other.appended_;
    state_ = std::move(other.state_);
    message_ = std::move(other.message_);
    exit_code_ = other.exit_code_;
    resumed_time_s_ = other.resumed_time_s_;
    final_ = other.final_;
    broken_ = std::move(other.broken_);
  }
  return *this;
}

// A moved-from file (no mutex, no handles) locks nothing.
std::unique_lock<std::recursive_mutex> MetricsFile::guard() {
  return mu_ ? std::unique_lock<std::recursive_mutex>(*mu_)
             : std::unique_lock<std::recursive_mutex>();
}

MetricsFile::~MetricsFile() {
  try {
    close();
  } catch (...) {  // contract: never throws; handles are still released below
  }
}

void MetricsFile::declareMetric(const std::string& name, bool is_int) {
  auto it = column_index_.find(name);
  if (it != column_index_.end()) {
    if (columns_[it->second].is_int != is_int) {
      throw std::logic_error("metric '" + name + "' re-declared with another type");
    }
    return;
  }
  if (appended_) {
    throw std::logic_error("metric '" + name + "' declared after the first appendStep");
  }
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    throw std::invalid_argument("bad metric name '" + name + "'");
  }
  column_index_[name] = columns_.size();
  columns_.push_back(Column{name, is_int, {}, {}, {}});
}

void MetricsFile::appendStep(const std::map<std::string, double>& values) {
  std::unique_lock<std::recursive_mutex> lock = guard();
  if (final_) return;
  for (const auto& kv : values) {
    if (column_index_.count(kv.first) == 0) {
      throw std::invalid_argument("appendStep: metric '" + kv.first + "' was not declared");
    }
  }
  for (Column& c : columns_) {
    auto it = values.find(c.name);
    double v = it == values.end() ? std::numeric_limits<double>::quiet_NaN() : it->second;
    if (c.is_int) {
      c.ints.push_back(toInt(v));
    } else {
      c.doubles.push_back(v);
    }
  }
  ++steps_buffered_;
  appended_ = true;
}

void MetricsFile::declareStepColumns() {
  for (const StepColumn& c : stepColumns()) declareMetric(c.name, c.type == ColumnType::kInt);
}

void MetricsFile::appendStep(const StepRow& row) {
  if (const StepColumn* unset = row.firstUnset())
    throw std::logic_error(std::string("appendStep: the row sets no value for step column '") +
                           unset->name + "' (common/step_columns.h): every column needs one");
  std::map<std::string, double> values;
  for (const StepColumn& c : stepColumns()) {
    if (column_index_.count(c.name) == 0)
      throw std::logic_error(std::string("appendStep: step column '") + c.name +
                             "' was not declared: call declareStepColumns() first");
    values[c.name] = row.get(c.id);
  }
  appendStep(values);
}

uint64_t MetricsFile::headroom() const {
  constexpr uint64_t kChunkBytes = 1024 * 8;  // h5::createAppendable's default chunk
  const uint64_t cols = std::max<uint64_t>(columns_.size(), kStepColumnCount);
  const uint64_t rows = uint64_t(std::max<int64_t>(steps_buffered_, 0));
  return cols * kChunkBytes + 2 * rows * cols * 8 + (128 << 10);
}

void MetricsFile::appendColumn(Column& c) {
  if (!c.dset.valid()) {  // a resumed file already has it (and its attributes)
    if (h5::exists(steps_group_, c.name)) {
      c.dset = h5::openDataset(steps_group_, c.name);
    } else {
      c.dset = h5::createAppendable(steps_group_, c.name,
                                    c.is_int ? h5::ElemType::kInt64 : h5::ElemType::kFloat64);
      const StepColumn* doc = findStepColumn(c.name);
      h5::writeAttrString(c.dset, "units", doc ? doc->units : "");
      h5::writeAttrString(c.dset, "description", doc ? doc->description : "");
    }
  }
  if (c.is_int) {
    h5::appendValues(c.dset, c.ints.data(), c.ints.size());
    c.ints.clear();
  } else {
    h5::appendValues(c.dset, c.doubles.data(), c.doubles.size());
    c.doubles.clear();
  }
}

// Two steps, so that a row is whole or absent for readMetricsFile: every other column is
// appended and flushed, then `step`, the row's commit mark, with steps_done (written
// last: rows past it are dropped). A failure or kill in the first leaves `step` shorter
// than the rest; in the second, `step` elements whose data never reached the disk read as
// its fill value -1.
void MetricsFile::flush() {
  std::unique_lock<std::recursive_mutex> lock = guard();
  if (!isOpen() || final_) return;
  if (!broken_.empty()) {  // no more rows: a retry would write them at the wrong offsets
    writeStatus(false);
    h5::flushFile(file_);
    return;
  }
  h5::reserveSpace(file_, headroom());  // throws before anything is written
  try {
    Column* step = nullptr;
    for (Column& c : columns_)
      if (c.name == "step")
        step = &c;
      else
        appendColumn(c);
    if (step != nullptr) {
      h5::flushFile(file_);
      appendColumn(*step);
    }
    steps_flushed_ += steps_buffered_;
    steps_buffered_ = 0;
    writeStatus(false);
    h5::flushFile(file_);
  } catch (const IoError& e) {
    broken_ = e.what();
    throw IoError("metrics file '" + path_ + "': writing rows failed, no more rows will be " +
                  "written (the " + std::to_string(steps_flushed_) +
                  " rows flushed before stay readable): " + e.what());
  }
}

void MetricsFile::setStatus(const std::string& state, int exit_code, const std::string& message) {
  std::optional<RunState> s = tryParseRunState(state);
  if (!s || !isRecorded(*s))
    throw std::invalid_argument("bad metrics state '" + state + "': expected one of " +
                                recordedStateNames());
  setStatus(*s, exit_code, message);
}

void MetricsFile::setStatus(RunState state, int exit_code, const std::string& message) {
  if (!isRecorded(state))
    throw std::invalid_argument("bad metrics state '" + toString(state) + "': expected one of " +
                                recordedStateNames());
  std::unique_lock<std::recursive_mutex> lock = guard();
  if (final_) return;
  state_ = state;
  exit_code_ = exit_code;
  message_ = message;
  if (!isOpen()) return;
  h5::reserveSpace(file_, headroom());
  writeStatus(true);
  flush();
}

void MetricsFile::setRootAttr(const std::string& name, const AttrValue& value) {
  std::unique_lock<std::recursive_mutex> lock = guard();
  if (!isOpen()) return;
  h5::reserveSpace(file_, headroom());
  h5::H5Handle root = h5::openGroup(file_, "/");
  writeAttr(root, name, value);
  flush();
}

void MetricsFile::setFinalStatus(RunState state, int exit_code, const std::string& message) {
  std::unique_lock<std::recursive_mutex> lock = guard();
  setStatus(state, exit_code, message);
  final_ = true;
}

void MetricsFile::close() {
  std::unique_lock<std::recursive_mutex> lock = guard();
  if (!isOpen() || final_) return;
  struct Releaser {  // releases every handle even when flush() throws
    MetricsFile* m;
    ~Releaser() {
      m->columns_.clear();
      m->column_index_.clear();
      m->steps_group_ = h5::H5Handle();
      m->status_group_ = h5::H5Handle();
      m->file_ = h5::H5Handle();
    }
  } releaser{this};
  flush();
  for (Column& c : columns_) c.dset.close();
  steps_group_.close();
  status_group_.close();
  file_.close();
}

void MetricsFile::writeStatus(bool all) {
  if (all) {
    h5::writeAttrString(status_group_, "state", toString(state_));
    h5::writeAttrInt(status_group_, "exit_code", exit_code_);
    h5::writeAttrString(status_group_, "message", message_);
  }
  h5::writeAttrInt(status_group_, "steps_done", steps_flushed_);
}

MetricsData readMetricsFile(const std::string& path) {
  MetricsData d;
  h5::H5Handle file = h5::openFile(path, /*writable=*/false, /*file_locking=*/false);
  h5::H5Handle root = h5::openGroup(file, "/");
  for (const std::string& name : h5::listAttrs(root)) {
    // An attribute of several elements (resume_steps after a second resume) is no scalar:
    // reading it as one wrote past the value (sweep_tagger aggregate's reader crashed).
    if (h5::attrType(root, name) != h5::AttrType::kString && h5::attrElements(root, name) != 1)
      continue;
    switch (h5::attrType(root, name)) {
      case h5::AttrType::kInt:
        d.attrs[name] = h5::readAttrInt(root, name);
        break;
      case h5::AttrType::kFloat:
        d.attrs[name] = h5::readAttrDouble(root, name);
        break;
      case h5::AttrType::kString:
        d.attrs[name] = h5::readAttrString(root, name);
        break;
      case h5::AttrType::kOther:
        break;
    }
  }
  auto version = d.attrs.find("schema_version");
  if (version == d.attrs.end() || version->second != AttrValue(kMetricsSchemaVersion)) {
    throw IoError("metrics file '" + path + "': missing or unsupported schema_version (want " +
                  std::to_string(kMetricsSchemaVersion) + ")");
  }
  for (const char* required : {"config", "status", "steps"}) {
    if (!h5::exists(file, required)) {
      throw IoError("metrics file '" + path + "' has no /" + std::string(required));
    }
  }
  d.config = h5::readStringDataset(file, "config");
  h5::H5Handle status = h5::openGroup(file, "status");
  const std::string state = h5::readAttrString(status, "state");
  std::optional<RunState> parsed = tryParseRunState(state);
  if (!parsed || !isRecorded(*parsed))
    throw IoError("metrics file '" + path + "': unknown /status state '" + state +
                  "' (expected one of " + recordedStateNames() + ")");
  d.status.state = *parsed;
  d.status.message = h5::readAttrString(status, "message");
  d.status.exit_code = h5::readAttrInt(status, "exit_code");
  d.status.steps_done = h5::readAttrInt(status, "steps_done");
  h5::H5Handle steps = h5::openGroup(file, "steps");
  size_t rows = std::numeric_limits<size_t>::max();
  for (const std::string& name : h5::listMembers(steps)) {
    h5::H5Handle dset = h5::openDataset(steps, name);
    if (h5::isIntDataset(dset)) d.int_metrics.insert(name);
    std::vector<double>& col = d.steps[name] = h5::readDoubles(steps, name);
    rows = std::min(rows, col.size());
  }
  if (auto it = d.steps.find("step"); it != d.steps.end()) {
    // A row whose `step` never reached the disk (a failed flush, MetricsFile::flush) reads
    // as the fill value: -1, or 0 in files written before it was set (a step 0 after the
    // first row is never data: steps strictly increase).
    const std::vector<double>& step = it->second;
    while (rows > 0 && (step[rows - 1] < 0 || (rows > 1 && step[rows - 1] == 0))) --rows;
  }
  // Rows past steps_done are those of a flush the process was killed in: written, never
  // counted (steps_done is rewritten last). Fewer rows than steps_done is damage, left
  // for metricsProblem to report.
  if (d.status.steps_done >= 0) rows = std::min(rows, static_cast<size_t>(d.status.steps_done));
  for (auto& kv : d.steps) kv.second.resize(rows);
  return d;
}

}  // namespace ftb

namespace ftb {
namespace {

std::string valueText(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// "" or the first row of `col` breaking the order `ok(prev, cur)`.
template <typename Ok>
std::string orderProblem(const std::vector<double>& col, const std::string& name, Ok ok,
                         const char* expected) {
  for (size_t i = 1; i < col.size(); ++i)
    if (!ok(col[i - 1], col[i]))
      return "/steps/" + name + " row " + std::to_string(i) + " is " + valueText(col[i]) +
             " after " + valueText(col[i - 1]) + ": expected " + expected;
  return "";
}

// "Not reported": NaN, which an int64 column stores as -1 (ColumnType::kInt).
bool notReported(const StepColumn& c, double v) {
  return std::isnan(v) || (c.type == ColumnType::kInt && v == -1);
}

}  // namespace

std::string metricsProblem(const MetricsData& d) {
  for (const auto& [name, col] : d.steps)
    for (size_t i = 0; i < col.size(); ++i)
      if (const StepColumn* c = findStepColumn(name);
          c && c->nan_allowed && notReported(*c, col[i]))
        continue;
      else if (!std::isfinite(col[i]) || col[i] < 0)
        return "/steps/" + name + " row " + std::to_string(i) + " is " + valueText(col[i]) +
               ": expected a finite value >= 0";
  if (auto it = d.steps.find("step"); it != d.steps.end()) {
    for (size_t i = 0; i < it->second.size(); ++i)
      if (it->second[i] != std::floor(it->second[i]))
        return "/steps/step row " + std::to_string(i) + " is " + valueText(it->second[i]) +
               ": expected an integer";
    std::string p = orderProblem(
        it->second, "step", [](double a, double b) { return b > a; },
        "strictly increasing step numbers");
    if (!p.empty()) return p;
  }
  if (auto it = d.steps.find("time_s"); it != d.steps.end()) {
    std::string p = orderProblem(
        it->second, "time_s", [](double a, double b) { return b >= a; }, "non-decreasing times");
    if (!p.empty()) return p;
  }
  const size_t rows = d.steps.empty() ? 0 : d.steps.begin()->second.size();
  if (d.status.steps_done != static_cast<int64_t>(rows))
    return "/status steps_done is " + std::to_string(d.status.steps_done) + " but /steps has " +
           std::to_string(rows) + " rows";
  return "";
}

}  // namespace ftb
