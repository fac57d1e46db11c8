// Output formats of the aggregation table and the worker-process row encoding.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/tag.h"
#include "sweep_tagger/aggregate.h"
#include "sweep_tagger/compare.h"

namespace ftb {
namespace {

using Json = nlohmann::ordered_json;

Cell opt(const std::optional<double>& v) { return v ? Cell(*v) : Cell(); }
Cell opt(const std::optional<int64_t>& v) { return v ? Cell(*v) : Cell(); }
Cell opt(const std::optional<bool>& v) { return v ? Cell(*v) : Cell(); }

// "full", or "lora r<rank>" for a run whose lora.rank is above 0.
std::string finetuningMethod(const RunRow& r) {
  auto it = r.config.find("lora.rank");
  if (it == r.config.end() || !std::holds_alternative<int64_t>(it->second) ||
      std::get<int64_t>(it->second) <= 0)
    return "full";
  return "lora r" + std::to_string(std::get<int64_t>(it->second));
}

Json cellJson(const Cell& c) {
  return std::visit(
      [](const auto& x) -> Json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>)
          return nullptr;
        else if constexpr (std::is_same_v<T, double>)
          return std::isfinite(x) ? Json(x) : Json();
        else
          return Json(x);
      },
      c);
}

Cell jsonCell(const Json& j) {
  if (j.is_null()) return Cell();
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) return j.get<std::string>();
  return j.dump();
}

std::string csvField(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string fixed(const Cell& c, int prec, double scale = 1) {
  const double* d = std::get_if<double>(&c);
  if (!d || !std::isfinite(*d)) return cellText(c);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, *d * scale);
  return buf;
}

}  // namespace

std::string markdownCell(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

// CSV/plain text of a cell: shortest round-trip numbers, "" when missing.
std::string cellText(const Cell& c) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>)
          return "";
        else if constexpr (std::is_same_v<T, int64_t>)
          return std::to_string(x);
        else if constexpr (std::is_same_v<T, double>)
          return std::isfinite(x) ? formatDouble(x) : "";
        else if constexpr (std::is_same_v<T, bool>)
          return x ? "true" : "false";
        else
          return x;
      },
      c);
}

namespace {

// The valid cell: true/false/empty, or "noisy" for a run the trainer marked noisy that is
// not invalid.
Cell validCell(const RunRow& r) {
  if (!r.noisy.empty() && r.is_valid != false) return std::string("noisy");
  return r.is_valid ? Cell(*r.is_valid) : Cell();
}

}  // namespace

std::vector<std::pair<std::string, Cell>> rowCells(const RunRow& r,
                                                   const std::vector<std::string>& varying) {
  std::vector<std::pair<std::string, Cell>> c = {{"tag", r.tag}, {"status", toString(r.status)}};
  for (const std::string& k : varying) {
    auto it = r.config.find(k);
    c.emplace_back(k, it == r.config.end() ? Cell() : it->second);
  }
  c.insert(c.end(), {{"world_size", opt(r.world_size)},
                     {"nodes", opt(r.nodes)},
                     {"ranks", r.ranks_found},
                     {"steps_done", r.steps_done},
                     {"resumes", r.resumes},
                     {"measured_steps", r.measured_steps},
                     {"train_runtime_s", opt(r.train_runtime_s)},
                     {"tokens_per_s_dataset", opt(r.tokens_per_s_dataset)},
                     {"tokens_per_s_padded", opt(r.tokens_per_s_padded)},
                     {"tokens_per_s_dataset_per_device", opt(r.tokens_per_s_dataset_per_device)},
                     {"tokens_per_s_padded_per_device", opt(r.tokens_per_s_padded_per_device)},
                     {"mfu", opt(r.mfu)},
                     {"mfu_causal", opt(r.mfu_causal)},
                     {"hfu", opt(r.hfu)},
                     {"gemm_efficiency", opt(r.gemm_efficiency)},
                     {"step_time_p50_s", opt(r.step_time_p50_s)},
                     {"step_time_p90_s", opt(r.step_time_p90_s)},
                     {"data_frac", opt(r.data_frac)},
                     {"forward_frac", opt(r.forward_frac)},
                     {"backward_frac", opt(r.backward_frac)},
                     {"optimizer_frac", opt(r.optimizer_frac)},
                     {"comm_frac", opt(r.comm_frac)},
                     {"peak_mem_mib", opt(r.peak_mem_mib)},
                     {"first_loss", opt(r.first_loss)},
                     {"last_loss", opt(r.last_loss)},
                     {"mt_per_hour", opt(r.mt_per_hour)},
                     {"usd_per_mt", opt(r.usd_per_mt)},
                     {"price_per_hour", opt(r.price_per_hour)},
                     {"is_valid", validCell(r)},
                     {"interference", opt(r.interference)},
                     {"tokens_per_cpu_s", opt(r.tokens_per_cpu_s)},
                     {"noisy", r.noisy},
                     {"env_warnings", r.env_warnings},
                     {"host", r.host},
                     {"cpu_model", r.cpu_model},
                     {"peak_flops", opt(r.peak_flops)},
                     {"peak_source", r.peak_source},
                     {"gemm_flops", opt(r.gemm_flops)},
                     {"gemm_source", r.gemm_source},
                     {"link_busbw_GBps", opt(r.link_busbw_gbps)},
                     {"traces", r.traces}});
  // ---- Comparisons (compare.h) ----
  auto label = [&r](const char* key) {
    auto it = r.config.find(key);
    return it == r.config.end() ? Cell() : it->second;
  };
  c.insert(c.end(), {{"method", finetuningMethod(r)},
                     {"trainable_params", opt(r.trainable_params)},
                     {"flops_formula", r.flops_formula},
                     {"layout", label("sweep.layout")},
                     {"repeat", label("sweep.repeat")},
                     {"config_hash", r.config_hash},
                     {"global_batch_seqs", opt(r.global_batch_seqs)},
                     {"global_batch_tokens", opt(r.global_batch_tokens)},
                     {"batch_mode", r.batch_mode},
                     {"step_tokens_per_s_padded_p10", opt(r.step_tokens_p10)},
                     {"step_tokens_per_s_padded_p50", opt(r.step_tokens_p50)},
                     {"step_tokens_per_s_padded_p90", opt(r.step_tokens_p90)},
                     {"repeats", r.repeats},
                     {"tokens_per_s_median", opt(r.tokens_median)},
                     {"tokens_per_s_min", opt(r.tokens_min)},
                     {"tokens_per_s_max", opt(r.tokens_max)},
                     {"message", r.message}});
  return c;
}

std::string toCsv(const AggregateTable& t) {
  std::string out;
  std::vector<std::pair<std::string, Cell>> header = rowCells(RunRow{}, t.varying);
  for (size_t i = 0; i < header.size(); ++i) out += (i ? "," : "") + csvField(header[i].first);
  out += "\n";
  for (const RunRow& r : t.runs) {
    auto cells = rowCells(r, t.varying);
    for (size_t i = 0; i < cells.size(); ++i)
      out += (i ? "," : "") + csvField(cellText(cells[i].second));
    out += "\n";
  }
  return out;
}

std::string constantsCsv(const AggregateTable& t) {
  std::string out = "key,value\n";
  for (const auto& [k, v] : t.constant) out += csvField(k) + "," + csvField(cellText(v)) + "\n";
  return out;
}

std::string toJson(const AggregateTable& t) {
  Json j;
  j["results_dir"] = t.results_dir;
  j["constant"] = Json::object();
  for (const auto& [k, v] : t.constant) j["constant"][k] = cellJson(v);
  j["varying"] = t.varying;
  j["runs"] = Json::array();
  for (const RunRow& r : t.runs) {
    Json row = Json::object();
    for (const auto& [k, v] : rowCells(r, t.varying)) row[k] = cellJson(v);
    j["runs"].push_back(row);
  }
  return j.dump(1) + "\n";
}

namespace {

// "Constant (identical in every run):" then one "- `key` = value" line per key; model
// shape keys are implied by model.name.
std::string constantsBlock(const AggregateTable& t) {
  if (t.constant.empty()) return "";
  std::string out = "Constant (identical in every run):\n\n";
  for (const auto& [k, v] : t.constant) {
    if (k.rfind("model.", 0) == 0 && k != "model.name") continue;
    out += "- `" + k + "` = " + markdownCell(cellText(v)) + "\n";
  }
  return out + "\n";
}

// The footnotes of the price columns: what MT/h and $/MT mean and which price was used.
// Each run's environment warnings (rank 0's env_warnings), one list per run; "" if none.
std::string envWarningNotes(const AggregateTable& t) {
  std::string out;
  for (const RunRow& r : t.runs) {
    if (r.env_warnings.empty()) continue;
    out += "\n- " + r.tag + ":";
    std::istringstream lines(r.env_warnings);
    for (std::string w; std::getline(lines, w);) out += "\n  - " + w;
  }
  return out.empty() ? "" : "\nEnvironment warnings (rank 0, at start-up):" + out + "\n";
}

std::string priceNotes(const AggregateTable& t) {
  std::set<std::string> prices;
  bool flag = false;  // a price from --price-per-hour (a run recorded without one)
  for (const RunRow& r : t.runs)
    if (r.price_per_hour) {
      prices.insert(formatDouble(*r.price_per_hour));
      flag |= r.price_from_flag;
    }
  std::string used;
  for (const std::string& p : prices) used += (used.empty() ? "" : ", ") + p;
  return "\n¹ M tokens/h: million dataset (non-padding) tokens per hour over all devices "
         "(tokens/s, global, dataset × 3600 / 10⁶).\n"
         "² $/M tokens: US dollars per million dataset tokens = price × world size / "
         "(M tokens/h), with price = `metrics.price_per_hour`" +
         (flag ? std::string(" (`--price-per-hour` for the runs without one)") : "") + " = " +
         used + " $ per device-hour" + (prices.size() > 1 ? " (per run: see CSV)" : "") + ".\n";
}

}  // namespace

namespace {

// "p10/p50/p90" of a run's per-step dataset tokens/s; "" without measured steps.
std::string stepSpreadText(const RunRow& r) {
  if (!r.step_tokens_p50) return "";
  return fixed(*r.step_tokens_p10, 1) + "/" + fixed(*r.step_tokens_p50, 1) + "/" +
         fixed(*r.step_tokens_p90, 1);
}

// "8 (1024)": sequences (tokens) per optimizer step; "" when unknown.
std::string globalBatchText(const RunRow& r) {
  if (!r.global_batch_seqs) return "";
  return std::to_string(*r.global_batch_seqs) + " (" + std::to_string(*r.global_batch_tokens) + ")";
}

}  // namespace

std::string toMarkdown(const AggregateTable& t) {
  std::string out = constantsBlock(t) + workNote(t);
  bool any_price = false, any_note = false, any_link = false;
  for (const RunRow& r : t.runs) {
    any_price |= r.usd_per_mt.has_value();
    any_link |= r.link_busbw_gbps.has_value();
    any_note |= r.status != RunState::Completed || !r.noisy.empty();
  }
  bool any_layout = false;
  for (const RunRow& r : t.runs)
    any_layout |= r.config.count("sweep.layout") && !cellText(r.config.at("sweep.layout")).empty();
  std::vector<std::string> head = {"tag", "status"};
  if (any_layout) head.push_back("layout");
  head.insert(head.end(), t.varying.begin(), t.varying.end());
  for (const char* h : {"world size", "nodes", "steps", "resumes", "tokens/s global (dataset)",
                        "tokens/s per device (padded)", "step tokens/s p10/p50/p90 (padded)",
                        "global batch seqs (tokens)", "MFU % (hw peak, 6N+12·L·H·hd·T)",
                        "GEMM eff. % (measured GEMM)", "step p50 (s)", "step p90 (s)",
                        "time % data/fwd/bwd/opt/comm (rank 0)", "peak RSS MiB (max rank)",
                        "loss first→last (nats/token)"})
    head.push_back(h);
  if (any_price) head.insert(head.end(), {"M tokens/h global¹", "$/M tokens²"});
  head.insert(head.end(),
              {"tokens/s per CPU-s (padded, global)", "valid", "interference % (worst rank)"});
  if (any_link) head.push_back("link busbw GB/s (all-reduce)");
  if (any_note) head.push_back("note");
  auto line = [&out](const std::vector<std::string>& cells) {
    out += "|";
    for (const std::string& c : cells) out += " " + markdownCell(c) + " |";
    out += "\n";
  };
  line(head);
  out += "|";
  const size_t text_cols = 2 + (any_layout ? 1 : 0) + t.varying.size();
  for (size_t i = 0; i < head.size(); ++i) out += i < text_cols ? "---|" : "--:|";
  out += "\n";
  for (const RunRow& r : t.runs) {
    std::vector<std::string> c = {r.tag, toString(r.status)};
    if (any_layout)
      c.push_back(r.config.count("sweep.layout") ? cellText(r.config.at("sweep.layout")) : "");
    for (const std::string& k : t.varying) {
      auto it = r.config.find(k);
      c.push_back(it == r.config.end() ? "" : cellText(it->second));
    }
    auto o = [](const auto& v, int prec, double scale = 1) { return fixed(opt(v), prec, scale); };
    std::string shares;
    if (r.forward_frac)
      shares = o(r.data_frac, 0, 100) + "/" + o(r.forward_frac, 0, 100) + "/" +
               o(r.backward_frac, 0, 100) + "/" + o(r.optimizer_frac, 0, 100) + "/" +
               o(r.comm_frac, 0, 100);
    std::string loss = r.first_loss ? o(r.first_loss, 3) + "→" + o(r.last_loss, 3) : "";
    c.insert(c.end(),
             {cellText(opt(r.world_size)), cellText(opt(r.nodes)), std::to_string(r.steps_done),
              std::to_string(r.resumes), o(r.tokens_per_s_dataset, 1),
              o(r.tokens_per_s_padded_per_device, 1), stepSpreadText(r), globalBatchText(r),
              o(r.mfu, 2, 100), o(r.gemm_efficiency, 2, 100), o(r.step_time_p50_s, 4),
              o(r.step_time_p90_s, 4), shares, o(r.peak_mem_mib, 1), loss});
    if (any_price) c.insert(c.end(), {o(r.mt_per_hour, 3), o(r.usd_per_mt, 4)});
    c.insert(c.end(),
             {o(r.tokens_per_cpu_s, 1), cellText(validCell(r)), o(r.interference, 1, 100)});
    if (any_link) c.push_back(o(r.link_busbw_gbps, 2));
    if (any_note) c.push_back(r.status != RunState::Completed ? r.message : r.noisy);
    line(c);
  }
  if (any_price) out += priceNotes(t);
  out += repeatsTable(t);
  std::string traced;
  for (const RunRow& r : t.runs)
    if (r.traces > 0)
      traced += "\n- " + r.tag + "/traces/ (" + std::to_string(r.traces) + " rank file(s))";
  if (!traced.empty())
    out += "\nProfiler traces (open in chrome://tracing or ui.perfetto.dev):" + traced + "\n";
  out += envWarningNotes(t);
  return out;
}

std::string rowToJsonLine(const RunRow& r) {
  Json j = Json::object();
  for (const auto& [k, v] : rowCells(r, {})) j[k] = cellJson(v);
  j["config"] = Json::object();
  for (const auto& [k, v] : r.config) j["config"][k] = cellJson(v);
  return j.dump();
}

RunRow rowFromJsonLine(const std::string& line) {
  Json j = Json::parse(line);
  RunRow r;
  auto d = [&](const char* k) -> std::optional<double> {
    const Json& v = j[k];
    return v.is_number() ? std::optional<double>(v.get<double>()) : std::nullopt;
  };
  auto i = [&](const char* k) -> std::optional<int64_t> {
    const Json& v = j[k];
    return v.is_number_integer() ? std::optional<int64_t>(v.get<int64_t>()) : std::nullopt;
  };
  r.tag = j["tag"].get<std::string>();
  r.status = parseRunState(j["status"].get<std::string>());
  r.message = j["message"].get<std::string>();
  r.world_size = i("world_size");
  r.nodes = i("nodes");
  r.ranks_found = i("ranks").value_or(0);
  r.steps_done = i("steps_done").value_or(0);
  r.resumes = i("resumes").value_or(0);
  r.traces = i("traces").value_or(0);
  r.measured_steps = i("measured_steps").value_or(0);
  r.train_runtime_s = d("train_runtime_s");
  r.tokens_per_s_dataset = d("tokens_per_s_dataset");
  r.tokens_per_s_padded = d("tokens_per_s_padded");
  r.tokens_per_s_dataset_per_device = d("tokens_per_s_dataset_per_device");
  r.tokens_per_s_padded_per_device = d("tokens_per_s_padded_per_device");
  r.mfu = d("mfu");
  r.mfu_causal = d("mfu_causal");
  r.hfu = d("hfu");
  r.gemm_efficiency = d("gemm_efficiency");
  r.step_time_p50_s = d("step_time_p50_s");
  r.step_time_p90_s = d("step_time_p90_s");
  r.data_frac = d("data_frac");
  r.forward_frac = d("forward_frac");
  r.backward_frac = d("backward_frac");
  r.optimizer_frac = d("optimizer_frac");
  r.comm_frac = d("comm_frac");
  r.peak_mem_mib = d("peak_mem_mib");
  r.first_loss = d("first_loss");
  r.last_loss = d("last_loss");
  r.mt_per_hour = d("mt_per_hour");
  r.usd_per_mt = d("usd_per_mt");
  r.price_per_hour = d("price_per_hour");
  r.peak_flops = d("peak_flops");
  r.gemm_flops = d("gemm_flops");
  r.link_busbw_gbps = d("link_busbw_GBps");
  auto str = [&](const char* k) { return j[k].is_string() ? j[k].get<std::string>() : ""; };
  r.host = str("host");
  r.cpu_model = str("cpu_model");
  r.peak_source = str("peak_source");
  r.gemm_source = str("gemm_source");
  r.flops_formula = str("flops_formula");
  r.trainable_params = i("trainable_params");
  if (j["is_valid"].is_boolean()) r.is_valid = j["is_valid"].get<bool>();
  if (j["is_valid"].is_string()) r.is_valid = true;  // "noisy": valid, marked noisy
  r.interference = d("interference");
  r.tokens_per_cpu_s = d("tokens_per_cpu_s");
  r.noisy = str("noisy");
  r.env_warnings = str("env_warnings");
  r.config_hash = str("config_hash");
  r.global_batch_seqs = i("global_batch_seqs");
  r.global_batch_tokens = i("global_batch_tokens");
  r.batch_mode = str("batch_mode");
  r.step_tokens_p10 = d("step_tokens_per_s_padded_p10");
  r.step_tokens_p50 = d("step_tokens_per_s_padded_p50");
  r.step_tokens_p90 = d("step_tokens_per_s_padded_p90");
  r.repeats = i("repeats").value_or(0);
  r.tokens_median = d("tokens_per_s_median");
  r.tokens_min = d("tokens_per_s_min");
  r.tokens_max = d("tokens_per_s_max");
  for (const auto& [k, v] : j["config"].items()) r.config[k] = jsonCell(v);
  return r;
}

}  // namespace ftb
