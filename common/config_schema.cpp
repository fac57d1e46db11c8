// Value types and their TOML spelling, Schema lookup, the renamed keys and other tools'
// spellings, and the Markdown table of a schema. The trainer's keys themselves are the
// rows of common/run_keys.cpp (trainerSchema() is made from them).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>

#include "common/config.h"

namespace ftb {
namespace {

std::string quoteString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char esc[8];
          std::snprintf(esc, sizeof(esc), "\\u%04x", static_cast<unsigned char>(c));
          out += esc;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string leafName(const std::string& key) {
  size_t dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

// A domain bound: whole numbers as integers ("0", not "0.0": int keys share them),
// others by formatDouble.
std::string bound(double v) {
  if (v == std::trunc(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  return formatDouble(v);
}

}  // namespace

const char* valueTypeName(ValueType t) {
  switch (t) {
    case ValueType::kInt:
      return "int";
    case ValueType::kFloat:
      return "float";
    case ValueType::kBool:
      return "bool";
    case ValueType::kString:
      return "string";
    case ValueType::kIntList:
      return "int list";
    case ValueType::kStringList:
      return "string list";
  }
  return "?";
}

std::string choiceList(const std::vector<std::string>& choices) {
  std::string out;
  for (const std::string& c : choices) out += (out.empty() ? "" : " | ") + quoteString(c);
  return out;
}

std::string formatFixed(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

std::string formatMib(double bytes) { return formatFixed(bytes / (1 << 20), 1) + " MiB"; }

std::string formatDouble(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return "0.0";  // also -0.0
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, res.ptr);
  size_t e = s.find('e');
  if (e == std::string::npos) {
    if (s.find('.') == std::string::npos) s += ".0";
    return s;
  }
  std::string mant = s.substr(0, e), exp = s.substr(e + 1);
  bool neg = !exp.empty() && exp[0] == '-';
  if (!exp.empty() && (exp[0] == '-' || exp[0] == '+')) exp.erase(0, 1);
  exp.erase(0, std::min(exp.find_first_not_of('0'), exp.size() - 1));
  return mant + "e" + (neg ? "-" : "") + exp;
}

std::string valueToString(const Value& v) {
  struct Visitor {
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return formatDouble(d); }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(const std::string& s) const { return quoteString(s); }
    std::string operator()(const std::vector<int64_t>& l) const {
      std::string out = "[";
      for (size_t i = 0; i < l.size(); ++i) out += (i ? ", " : "") + std::to_string(l[i]);
      return out + "]";
    }
    std::string operator()(const std::vector<std::string>& l) const {
      std::string out = "[";
      for (size_t i = 0; i < l.size(); ++i) out += (i ? ", " : "") + quoteString(l[i]);
      return out + "]";
    }
  };
  return std::visit(Visitor{}, v);
}

// REQUIRES (programming errors, std::logic_error): key not yet declared; the
// default, if any, has the declared type (an int default for a float key is widened).
Schema& Schema::add(KeySpec spec) {
  if (find(spec.key) != nullptr) throw std::logic_error("schema: duplicate key " + spec.key);
  if (spec.domain.declared && spec.type != ValueType::kInt && spec.type != ValueType::kFloat)
    throw std::logic_error("schema: a domain on non-numeric key " + spec.key);
  if (!spec.choices.empty() && spec.type != ValueType::kString)
    throw std::logic_error("schema: choices on non-string key " + spec.key);
  if (spec.default_value) {
    Value& v = *spec.default_value;
    if (spec.type == ValueType::kFloat && std::holds_alternative<int64_t>(v))
      v = static_cast<double>(std::get<int64_t>(v));
    if (static_cast<ValueType>(v.index()) != spec.type)
      throw std::logic_error("schema: default of " + spec.key + " is not a " +
                             valueTypeName(spec.type));
  }
  keys_.push_back(std::move(spec));
  return *this;
}

Schema& Schema::add(KeySpec spec, Domain domain) {
  if (spec.type != ValueType::kInt && spec.type != ValueType::kFloat)
    throw std::logic_error("schema: a domain on non-numeric key " + spec.key);
  domain.declared = true;
  spec.domain = domain;
  return add(std::move(spec));
}

Domain atLeast(double lo) { return Domain{lo, HUGE_VAL, false, false, true}; }
Domain above(double lo) { return Domain{lo, HUGE_VAL, true, false, true}; }
Domain between(double lo, double hi) { return Domain{lo, hi, false, false, true}; }
Domain halfOpen(double lo, double hi) { return Domain{lo, hi, false, true, true}; }

bool Domain::contains(double v) const {
  if (!std::isfinite(v)) return false;
  if (lo_open ? !(v > lo) : !(v >= lo)) return false;
  return hi_open ? v < hi : v <= hi;
}

std::string Domain::range() const {
  bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
  if (has_lo && has_hi)
    return std::string("in ") + (lo_open ? "(" : "[") + bound(lo) + ", " + bound(hi) +
           (hi_open ? ")" : "]");
  if (has_lo) return (lo_open ? "> " : ">= ") + bound(lo);
  if (has_hi) return (hi_open ? "< " : "<= ") + bound(hi);
  return "";
}

std::string Domain::describe(bool integer) const {
  std::string what = integer ? "an integer" : "a finite number";
  std::string r = range();
  return r.empty() ? what : what + " " + r;
}

const KeySpec* Schema::find(const std::string& key) const {
  for (const KeySpec& s : keys_)
    if (s.key == key) return &s;
  return nullptr;
}

// Closest declared key within edit distance 3 (ties: first declared). A unique
// declared key with the same last component ("model.lr" -> "training.lr") is
// preferred over any fuzzy match farther than distance 1.
std::string Schema::closest(const std::string& key) const {
  constexpr size_t kMaxDistance = 3;
  const KeySpec* best = nullptr;
  size_t best_distance = kMaxDistance + 1;
  for (const KeySpec& s : keys_) {
    size_t d = editDistance(key, s.key);
    if (d < best_distance) {
      best = &s;
      best_distance = d;
    }
  }
  if (best != nullptr && best_distance <= 1) return best->key;
  const std::string leaf = leafName(key);
  const KeySpec* same_leaf = nullptr;
  int same_leaf_count = 0;
  for (const KeySpec& s : keys_) {
    if (leafName(s.key) == leaf && s.key != key) {
      same_leaf = &s;
      ++same_leaf_count;
    }
  }
  if (same_leaf_count == 1) return same_leaf->key;
  return best != nullptr ? best->key : "";
}

// Invariant (SchemaTest.RenamedKeysPointToRealKeys): no old name is a key, every new name is.
const std::vector<RenamedKey>& renamedKeys() {
  static const std::vector<RenamedKey> table = {
      {"training.warmup_steps", "metrics.skip_first_steps"},
  };
  return table;
}

const RenamedKey* renamedFrom(const std::string& old_key) {
  for (const RenamedKey& r : renamedKeys())
    if (old_key == r.old_key) return &r;
  return nullptr;
}

const RenamedKey* renamedTo(const std::string& key) {
  for (const RenamedKey& r : renamedKeys())
    if (key == r.key) return &r;
  return nullptr;
}

// torchtitan: JobConfig (torchtitan/config/job_config.py) and its older spellings
// (training.batch_size, training.*_degree). torchrun: its launch flags as sweep keys.
// The Hugging Face Trainer: TrainingArguments names, matched by their last part.
// Invariant (ConfigSchema.ForeignSpellingsNameRealKeys): no spelling is an ftbench key and
// every non-empty key is a trainerSchema() key or a sweep's nodes / nproc_per_node.
const std::vector<ForeignSpelling>& foreignSpellings() {
  static const std::vector<ForeignSpelling> table = {
      {"training.steps", "training.max_steps", "torchtitan"},
      {"training.local_batch_size", "training.micro_batch_size", "torchtitan"},
      {"training.batch_size", "training.micro_batch_size", "torchtitan"},
      {"training.seq_len", "data.seq_len", "torchtitan"},
      {"training.max_norm", "training.max_grad_norm", "torchtitan"},
      {"training.dataset", "data.source", "torchtitan"},
      {"training.dataset_path", "data.source", "torchtitan"},
      {"training.mixed_precision_param", "training.dtype", "torchtitan"},
      {"training.data_parallel_replicate_degree", "parallel.dp_replicate", "torchtitan"},
      {"training.data_parallel_shard_degree", "parallel.dp_shard", "torchtitan"},
      {"training.tensor_parallel_degree", "parallel.tp", "torchtitan"},
      {"training.compile", "", "torchtitan"},
      {"optimizer.name", "training.optimizer", "torchtitan"},
      {"optimizer.lr", "training.lr", "torchtitan"},
      {"optimizer.beta1", "training.beta1", "torchtitan"},
      {"optimizer.beta2", "training.beta2", "torchtitan"},
      {"optimizer.eps", "training.eps", "torchtitan"},
      {"optimizer.weight_decay", "training.weight_decay", "torchtitan"},
      {"lr_scheduler.warmup_steps", "training.lr_warmup_steps", "torchtitan"},
      {"parallelism.data_parallel_replicate_degree", "parallel.dp_replicate", "torchtitan"},
      {"parallelism.data_parallel_shard_degree", "parallel.dp_shard", "torchtitan"},
      {"parallelism.tensor_parallel_degree", "parallel.tp", "torchtitan"},
      {"parallelism.pipeline_parallel_degree", "parallel.pp", "torchtitan"},
      {"parallelism.pipeline_parallel_schedule", "parallel.pp_schedule", "torchtitan"},
      {"parallelism.context_parallel_degree", "", "torchtitan"},
      {"checkpoint.folder", "checkpoint.dir", "torchtitan"},
      {"checkpoint.keep_latest_k", "checkpoint.keep_last", "torchtitan"},
      {"checkpoint.initial_load_path", "checkpoint.resume", "torchtitan"},
      {"activation_checkpoint.mode", "training.activation_checkpointing", "torchtitan"},
      {"metrics.log_freq", "metrics.log_every", "torchtitan"},
      {"job.dump_folder", "output.dir", "torchtitan"},
      {"comm.init_timeout_seconds", "parallel.timeout_seconds", "torchtitan"},
      {"comm.train_timeout_seconds", "parallel.timeout_seconds", "torchtitan"},
      {"model.flavor", "model.name", "torchtitan"},
      {"model.tokenizer_path", "data.tokenizer", "torchtitan"},
      {"model.hf_assets_path", "model.from_pretrained", "torchtitan"},
      {"nnodes", "nodes", "torchrun"},
      {"nproc-per-node", "nproc_per_node", "torchrun"},
      {"learning_rate", "training.lr", "the Hugging Face Trainer"},
      {"per_device_train_batch_size", "training.micro_batch_size", "the Hugging Face Trainer"},
      {"gradient_accumulation_steps", "training.grad_accum_steps", "the Hugging Face Trainer"},
      {"adam_beta1", "training.beta1", "the Hugging Face Trainer"},
      {"adam_beta2", "training.beta2", "the Hugging Face Trainer"},
      {"adam_epsilon", "training.eps", "the Hugging Face Trainer"},
      {"max_seq_length", "data.seq_len", "the Hugging Face Trainer"},
      {"gradient_checkpointing", "training.activation_checkpointing", "the Hugging Face Trainer"},
      {"output_dir", "output.dir", "the Hugging Face Trainer"},
      {"save_steps", "checkpoint.interval", "the Hugging Face Trainer"},
      {"save_total_limit", "checkpoint.keep_last", "the Hugging Face Trainer"},
      {"logging_steps", "metrics.log_every", "the Hugging Face Trainer"},
  };
  return table;
}

std::string closestName(const std::string& name, const std::vector<std::string>& names) {
  for (const std::string& n : names) {
    size_t dot = n.rfind('.');
    if (dot != std::string::npos && n.compare(dot + 1, std::string::npos, name) == 0) return n;
  }
  std::string best;
  size_t best_d = std::max<size_t>(2, name.size() / 3) + 1;
  for (const std::string& n : names) {
    size_t d = editDistance(name, n);
    if (d < best_d) best = n, best_d = d;
  }
  return best;
}

// Edit distance (insert/delete/substitute, cost 1 each).
size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// A markdown table cell: `|` escaped (GitHub markdown splits cells on it, also inside
// code spans); outside code spans also `<` (`<run_dir>` would render as an unknown HTML
// tag, i.e. not at all); newlines as spaces.
std::string markdownCell(const std::string& text, bool code_span) {
  std::string out;
  for (char c : text) {
    if (c == '|' || (c == '<' && !code_span)) out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out;
}

std::string schemaMarkdown(const Schema& schema) {
  std::string out = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const KeySpec& k : schema.keys()) {
    std::string def = k.default_value ? valueToString(*k.default_value) : "(preset)";
    if (!k.derive_doc.empty()) def += "; " + k.derive_doc;
    if (!k.default_value && k.key.rfind("model.", 0) != 0) def = "(none)";
    std::string doc = k.doc;
    if (!k.affects_experiment) doc += " (not part of the sweep tag)";
    if (k.planned) doc = "**planned** (not implemented yet; refused if set): " + doc;
    std::string type = valueTypeName(k.type);
    if (k.domain.declared) type += " " + k.domain.range();
    if (!k.choices.empty()) type += ": " + choiceList(k.choices);
    if (k.comma_list) type = "string or string list";
    out += "| `" + k.key + "` | " + markdownCell(type, false) + " | `" + markdownCell(def, true) +
           "` | " + markdownCell(doc, false) + " |\n";
  }
  return out;
}

}  // namespace ftb
