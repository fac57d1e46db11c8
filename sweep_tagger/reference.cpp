// Reading a reference table (REF.csv and its constants) back into runs: reference.h.
#include "sweep_tagger/reference.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "sweep_tagger/compare.h"

namespace ftb {
namespace {

// One CSV record and the line it starts on (1-based).
struct CsvRecord {
  size_t line = 0;
  std::vector<std::string> fields;
};

// RFC 4180 records of `text`: quoted fields may hold commas, "" quotes and line breaks;
// CRLF ends a record as LF does; blank lines are skipped.
std::vector<CsvRecord> csvRecords(const std::string& text, const std::string& path) {
  std::vector<CsvRecord> out;
  CsvRecord rec;
  std::string field;
  size_t line = 1;
  bool quoted = false, any = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') ++line;
    if (quoted) {
      if (c != '"') {
        field += c;
      } else if (i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else {
        quoted = false;
      }
      continue;
    }
    if (!any) rec.line = line - (c == '\n');
    if (c == '"') {
      quoted = any = true;
    } else if (c == ',') {
      rec.fields.push_back(std::move(field));
      field.clear();
      any = true;
    } else if (c == '\n' || (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) {
      if (c == '\r') continue;
      if (any) {
        rec.fields.push_back(std::move(field));
        out.push_back(std::move(rec));
      }
      rec = CsvRecord{};
      field.clear();
      any = false;
    } else {
      field += c;
      any = true;
    }
  }
  if (quoted)
    throw ConfigError("", path + ":" + std::to_string(rec.line),
                      "a quoted field is not closed before the end of the file",
                      "the file is cut short: write it again with sweep_tagger aggregate --out");
  if (any) {
    rec.fields.push_back(std::move(field));
    out.push_back(std::move(rec));
  }
  return out;
}

const char* const kRefHint =
    "--compare takes a table that `sweep_tagger aggregate RESULTS --format csv --out REF.csv` "
    "wrote";

// Column name -> index of the header, checking the needed ones.
std::map<std::string, size_t> refColumns(const CsvRecord& header, const std::string& path) {
  std::map<std::string, size_t> at;
  for (size_t i = 0; i < header.fields.size(); ++i) at.emplace(header.fields[i], i);
  for (const char* need : {"tag", "status", "world_size", "nodes", "tokens_per_s_dataset",
                           "is_valid", "config_hash"})
    if (!at.count(need))
      throw ConfigError(need, path + ":" + std::to_string(header.line),
                        "the header has no column '" + std::string(need) + "'", kRefHint);
  return at;
}

// Reads one record's cells by column name; numbers parsed whole, "" = missing.
struct RefCells {
  const CsvRecord& rec;
  const std::map<std::string, size_t>& at;
  const std::string& path;

  std::string text(const std::string& col) const {
    auto it = at.find(col);
    return it == at.end() ? "" : rec.fields[it->second];
  }
  std::string where() const { return path + ":" + std::to_string(rec.line); }
  std::optional<double> number(const std::string& col) const {
    const std::string s = text(col);
    if (s.empty()) return std::nullopt;
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v))
      throw ConfigError(col, where(), "expected a number, got '" + s + "'", kRefHint);
    return v;
  }
  std::optional<int64_t> integer(const std::string& col) const {
    std::optional<double> v = number(col);
    if (v && (*v != std::floor(*v) || std::fabs(*v) > 9e15))
      throw ConfigError(col, where(), "expected an integer, got '" + text(col) + "'", kRefHint);
    return v ? std::optional<int64_t>(static_cast<int64_t>(*v)) : std::nullopt;
  }
};

// is_valid: "true", "false", "noisy" (valid, marked noisy) or "" (unknown).
void readValidity(const RefCells& c, RunRow& r) {
  const std::string v = c.text("is_valid");
  if (v == "true" || v == "noisy") r.is_valid = true;
  if (v == "false") r.is_valid = false;
  if (!v.empty() && !r.is_valid)
    throw ConfigError("is_valid", c.where(), "expected true, false, noisy or empty, got '" + v + "'",
                      kRefHint);
  r.noisy = c.text("noisy");
  if (v == "noisy" && r.noisy.empty()) r.noisy = "noisy (reference table)";
}

RunRow refRun(const RefCells& c, const std::vector<std::string>& keys) {
  RunRow r;
  r.tag = c.text("tag");
  const std::optional<RunState> state = tryParseRunState(c.text("status"));
  if (!state)
    throw ConfigError("status", c.where(), "unknown run state '" + c.text("status") + "'",
                      kRefHint);
  r.status = *state;
  readValidity(c, r);
  r.world_size = c.integer("world_size");
  r.nodes = c.integer("nodes");
  r.tokens_per_s_dataset = c.number("tokens_per_s_dataset");
  r.step_tokens_p10 = c.number("step_tokens_per_s_padded_p10");
  r.step_tokens_p50 = c.number("step_tokens_per_s_padded_p50");
  r.step_tokens_p90 = c.number("step_tokens_per_s_padded_p90");
  if (!r.step_tokens_p10 || !r.step_tokens_p90) r.step_tokens_p50.reset();
  r.config_hash = c.text("config_hash");
  r.host = c.text("host");
  r.cpu_model = c.text("cpu_model");
  for (const std::string& k : keys)
    if (std::string v = c.text(k); !v.empty()) r.config[k] = v;
  if (std::string v = c.text("layout"); !v.empty()) r.config["sweep.layout"] = v;
  if (std::string v = c.text("repeat"); !v.empty()) r.config["sweep.repeat"] = v;
  return r;
}

// REF's constants side file (key,value), into every run's config; false when absent.
bool readRefConstants(ReferenceTable& ref) {
  if (!notRegularFileReason(ref.constants_path).empty()) return false;
  const std::vector<CsvRecord> recs = csvRecords(
      readInputFile(ref.constants_path, "reference constants (--compare)", size_t{1} << 26),
      ref.constants_path);
  for (size_t i = 1; i < recs.size(); ++i) {
    if (recs[i].fields.size() != 2)
      throw ConfigError("", ref.constants_path + ":" + std::to_string(recs[i].line),
                        "expected 2 fields (key,value), got " +
                            std::to_string(recs[i].fields.size()),
                        kRefHint);
    ref.table.constant[recs[i].fields[0]] = recs[i].fields[1];
  }
  for (RunRow& r : ref.table.runs)
    for (const auto& [k, v] : ref.table.constant) r.config.emplace(k, v);
  return true;
}

}  // namespace

ReferenceTable readReferenceCsv(const std::string& path) {
  ReferenceTable ref;
  ref.path = path;
  const std::filesystem::path p(path);
  ref.constants_path = (p.parent_path() / (p.stem().string() + ".constants.csv")).string();
  ref.table.results_dir = path;
  if (std::string why = notRegularFileReason(path); !why.empty())
    throw ConfigError("--compare", path, "the reference table is " + why + ", expected a CSV file",
                      kRefHint);
  const std::vector<CsvRecord> recs =
      csvRecords(readInputFile(path, "reference table (--compare)", size_t{1} << 30), path);
  if (recs.empty()) throw ConfigError("", path + ":1", "the file is empty: no header", kRefHint);
  const std::map<std::string, size_t> at = refColumns(recs[0], path);
  std::set<std::string> own;  // aggregate's own columns; any other is a varying config key
  for (const auto& [name, cell] : rowCells(RunRow{}, {})) own.insert(name);
  for (const std::string& name : recs[0].fields)
    if (!own.count(name)) ref.table.varying.push_back(name);
  for (size_t i = 1; i < recs.size(); ++i) {
    if (recs[i].fields.size() != recs[0].fields.size())
      throw ConfigError("", path + ":" + std::to_string(recs[i].line),
                        "expected " + std::to_string(recs[0].fields.size()) +
                            " fields as in the header, got " +
                            std::to_string(recs[i].fields.size()),
                        kRefHint);
    ref.table.runs.push_back(refRun(RefCells{recs[i], at, path}, ref.table.varying));
  }
  ref.constants_known = readRefConstants(ref);
  groupRepeats(ref.table);
  return ref;
}

}  // namespace ftb
