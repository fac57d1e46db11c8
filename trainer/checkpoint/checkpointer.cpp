#include "trainer/checkpoint/checkpointer.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "common/sha256.h"
#include "common/tag.h"
#include "trainer/checkpoint/shard_io.h"
#include "trainer/metrics/perf.h"

namespace ftb {
namespace fs = std::filesystem;
using ckpt::Box;
using ckpt::StatePiece;
using nlohmann::json;

namespace {

const char* kCompatKeys[] = {
    "model.dim",      "model.n_layers",       "model.n_heads",     "model.n_kv_heads",
    "model.ffn_dim",  "model.vocab_size",     "model.max_seq_len", "model.rope_theta",
    "model.norm_eps", "model.tie_embeddings", "training.optimizer"};

std::string sliceKey(const StatePiece& p) {
  std::string k = p.name + "@";
  for (size_t d = 0; d < p.box.offset.size(); ++d)
    k += std::to_string(p.box.offset[d]) + "+" + std::to_string(p.box.size[d]) + ",";
  return k;
}

std::vector<std::string> splitLines(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b < s.size()) {
    size_t e = s.find('\n', b);
    if (e == std::string::npos) e = s.size();
    out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

// Test hook (tests/e2e/trainer/test_checkpoint.py): FTB_TEST_CKPT_SAVE_DELAY="STEP:SECONDS"
// sleeps after this rank's file is written in the save of STEP (STEP "stop": any save
// after this rank learned of a stop signal), widening the window in which a SIGKILL or
// the preempt_grace_s deadline meets a partial checkpoint.
void testSaveDelay(int64_t step, const std::function<bool()>& stop_seen) {
  const char* v = std::getenv("FTB_TEST_CKPT_SAVE_DELAY");
  if (!v) return;
  std::string s = v;
  size_t c = s.find(':');
  if (c == std::string::npos) return;
  const std::string which = s.substr(0, c);
  if (which == "stop" ? !(stop_seen && stop_seen()) : std::stoll(which) != step) return;
  std::this_thread::sleep_for(std::chrono::duration<double>(std::stod(s.substr(c + 1))));
}

// The first non-empty verdict of all ranks ("" = every rank found its files good).
std::string firstProblem(const std::vector<std::string>& verdicts) {
  for (const std::string& v : verdicts)
    if (!v.empty()) return v;
  return "";
}

}  // namespace

std::string loraBaseIdentity(const TrainConfig& tc) {
  if (tc.from_pretrained.empty()) return "seed " + std::to_string(tc.training.seed);
  static std::map<std::string, std::string> cache;
  auto hit = cache.find(tc.from_pretrained);
  if (hit != cache.end()) return hit->second;
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(tc.from_pretrained, ec)) {
    const std::string name = e.path().filename().string();
    if (name == "config.json" || e.path().extension() == ".safetensors") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  Sha256 h;
  std::vector<char> buf(1 << 20);
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw CheckpointError(f.string(), "cannot be read to identify the LoRA base");
    h.update(f.filename().string());
    while (in.read(buf.data(), std::streamsize(buf.size())) || in.gcount() > 0)
      h.update(buf.data(), size_t(in.gcount()));
  }
  std::string hex;
  for (uint8_t b : h.finish()) {
    char two[3];
    std::snprintf(two, sizeof two, "%02x", b);
    hex += two;
  }
  return cache[tc.from_pretrained] = tc.from_pretrained + " sha256 " + hex;
}

std::map<std::string, std::string> checkpointCompatKeys(const Config& cfg, const TrainConfig& tc) {
  std::map<std::string, std::string> m;
  for (const char* k : kCompatKeys)
    if (cfg.has(k)) m[k] = valueToString(cfg.entries().at(k).value);
  if (tc.lora.enabled()) {
    for (const char* k : {"lora.rank", "lora.alpha", "lora.dropout"})
      m[k] = valueToString(cfg.entries().at(k).value);
    std::string targets;
    for (const auto& t : tc.lora.targets) targets += (targets.empty() ? "" : ",") + t;
    m["lora.targets"] = valueToString(Value(targets));
    m["lora.base"] = valueToString(Value(loraBaseIdentity(tc)));
  }
  return m;
}

namespace {

// Collective. Every rank parses `dir`'s manifest; each checks every world-th file (size,
// crc32, the datasets the manifest names in it). Returns the first problem any rank found
// ("" = usable) and, when usable, the manifest in `m`.
std::string verifyCheckpoint(const std::string& dir, const std::string& key, Distributed& dist,
                             Manifest& m) {
  const int rank = dist.env.rank, world = dist.env.world_size;
  std::string problem;
  try {
    m = loadVerifiedManifest(dir, {-1});
    std::vector<int64_t> mine;
    std::vector<std::string> my_files;
    for (size_t i = 0; i < m.files.size(); ++i)
      if (int(i % world) == rank)
        mine.push_back(m.files[i].rank), my_files.push_back(m.files[i].name);
    if (!mine.empty()) loadVerifiedManifest(dir, mine);
    for (const std::string& f : my_files) ckpt::checkShardFile(dir, m, f);
  } catch (const CheckpointError& e) {
    problem = e.what();
  }
  return firstProblem(dist.allGatherString(key, problem));
}

// Why the verified checkpoint `m` in `dir` cannot continue this run (the key to blame,
// what, a hint), or nullopt. `run`: this run's identity (tag, config hash: what its run
// directory is bound to, common/tag.h) when checkpoint.dir may be shared with other
// runs (empty = no identity check); `gbs_set`: training.global_batch_size set.
struct Refusal {
  std::string key, what, hint;
};
struct RunIdentity {
  std::string tag, config_hash;
  bool empty() const { return tag.empty(); }
  std::string text() const { return "'" + tag + "' (config hash " + config_hash + ")"; }
};
std::optional<Refusal> resumeRefusal(const Manifest& m, const std::string& dir,
                                     const TrainConfig& tc,
                                     const std::map<std::string, std::string>& compat,
                                     const RunIdentity& run, bool gbs_set) {
  const RunIdentity saver{m.tag, m.config_hash};
  if (!run.empty() && !saver.empty() &&
      (saver.tag != run.tag || saver.config_hash != run.config_hash))
    return Refusal{
        "checkpoint.dir",
        "checkpoint " + dir + " belongs to run " + saver.text() + ", not to this run " + run.text(),
        "give each run a checkpoint.dir of its own, or set checkpoint.resume to that "
        "step_N directory to start from it on purpose"};
  std::string diff = compatDiff(m.compat, compat);
  if (diff.empty() && m.compat.count("lora.rank") && !tc.lora.enabled())
    diff = "lora.rank = " + m.compat.at("lora.rank") +
           " in the checkpoint (adapters only), 0 now (full finetuning)";
  if (!diff.empty())
    return Refusal{"checkpoint.resume",
                   "checkpoint " + dir + " was saved by a different model or optimizer: " + diff,
                   "resume with the model and optimizer it was saved with, or "
                   "checkpoint.resume=never to start over"};
  auto gb = m.state.find("global_batch");
  if (gb == m.state.end() || gb->second == tc.globalBatch()) return std::nullopt;
  // Blame the key that set this run's global batch.
  return Refusal{gbs_set ? "training.global_batch_size" : "training.micro_batch_size",
                 "checkpoint " + dir + " was saved with a global batch of " +
                     std::to_string(gb->second) + " samples, this run has " +
                     std::to_string(tc.globalBatch()) + " = micro_batch_size(" +
                     std::to_string(tc.training.micro_batch_size) + ") * grad_accum_steps(" +
                     std::to_string(tc.training.grad_accum_steps) + ") * data-parallel size(" +
                     std::to_string(tc.layout.dpSize()) + ")",
                 "keep micro_batch_size * grad_accum_steps * dp equal (set "
                 "training.global_batch_size) so the data order continues"};
}

// This run's identity (its tag: the run directory's name, as the session names it; its
// config hash) when `resume = auto` scans a checkpoint.dir set by the user, which other
// runs may share; else empty.
RunIdentity sharedDirRun(const Config& cfg, const TrainConfig& tc) {
  if (tc.checkpoint.dir.empty() || tc.checkpoint.resume != "auto") return {};
  const fs::path run_dir = runDirPath(cfg, tc.layout.world_size, tc.output.output_dir,
                                      tc.output.no_sweep_dir, tc.layout.nodes);
  return {run_dir.filename().string(), configHash(cfg, tc.layout.world_size, tc.layout.nodes)};
}

}  // namespace

std::optional<ResumePoint> planResume(const TrainConfig& tc, const Config& cfg,
                                      const std::string& ckpt_dir, Distributed& dist) {
  const std::string& mode = tc.checkpoint.resume;
  if (mode == "never") return std::nullopt;
  const bool explicit_path = mode != "auto";
  std::vector<std::string> candidates =
      explicit_path ? std::vector<std::string>{mode} : listCheckpointDirs(ckpt_dir);
  const RunIdentity run = sharedDirRun(cfg, tc);
  for (size_t c = 0; c < candidates.size(); ++c) {
    const std::string& dir = candidates[c];
    Manifest m;
    const std::string problem = verifyCheckpoint(dir, "ckpt/verify/" + std::to_string(c), dist, m);
    if (!problem.empty()) {
      if (explicit_path)
        throw ConfigError("checkpoint.resume", cfg.where("checkpoint.resume"),
                          "checkpoint " + dir + " cannot be loaded: " + problem,
                          "pick another step_N directory, or checkpoint.resume=auto to take the "
                          "newest usable one");
      if (dist.env.rank == 0) FTB_WARN("skipping checkpoint " << dir << ": " << problem);
      continue;
    }
    if (std::optional<Refusal> r = resumeRefusal(m, dir, tc, checkpointCompatKeys(cfg, tc), run,
                                                 cfg.getInt("training.global_batch_size") > 0))
      throw ConfigError(r->key, cfg.where(r->key), r->what, r->hint);
    return ResumePoint{dir, std::move(m)};
  }
  if (!candidates.empty() && dist.env.rank == 0)
    FTB_WARN("no usable checkpoint in " << ckpt_dir << ": starting from step 0");
  return std::nullopt;
}

std::optional<ResumePoint> Checkpointer::fallBackFrom(const ResumePoint& bad, const TrainConfig& tc,
                                                      const Fits& fits) {
  const int64_t bad_step = bad.manifest.state.at("step");
  const RunIdentity run =
      tc.checkpoint.dir.empty() ? RunIdentity{} : RunIdentity{id_.tag, id_.config_hash};
  int c = 0;
  for (const std::string& dir : listCheckpointDirs(dir_)) {
    if (*checkpointStepOf(fs::path(dir).filename().string()) >= bad_step) continue;
    const std::string key = "ckpt/fallback/" + std::to_string(bad_step) + "/" + std::to_string(c++);
    ResumePoint rp{dir, {}};
    std::string problem = verifyCheckpoint(dir, key, dist_, rp.manifest);
    if (problem.empty())
      if (std::optional<Refusal> r = resumeRefusal(rp.manifest, dir, tc, id_.compat, run, false))
        problem = r->what;  // the same on every rank: the same manifest
    if (problem.empty()) problem = agreedProblem(key + "/fits", fits(rp));
    if (problem.empty()) return rp;
    if (dist_.env.rank == 0) FTB_WARN("skipping checkpoint " << dir << ": " << problem);
  }
  return std::nullopt;
}

std::string Checkpointer::agreedProblem(const std::string& key, const std::string& problem) {
  return firstProblem(dist_.allGatherString(key, problem));
}

Checkpointer::Checkpointer(std::string dir, int64_t keep_last, Identity id, Distributed& dist)
    : dir_(std::move(dir)), keep_last_(keep_last), id_(std::move(id)), dist_(dist) {
  if (dist_.env.rank != 0) return;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() <= 4 || name.compare(name.size() - 4, 4, ".tmp") != 0 ||
        !checkpointStepOf(name.substr(0, name.size() - 4)))
      continue;
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    if (rm)
      FTB_WARN("could not remove the unfinished checkpoint "
               << e.path().string() << " of an earlier attempt: " << rm.message());
    else
      FTB_WARN("removed the unfinished checkpoint "
               << e.path().string() << " an earlier attempt left (killed mid-save)");
  }
}

std::vector<ckpt::SliceToWrite> Checkpointer::mySlices(const std::string& key, int64_t step,
                                                       const std::vector<StatePiece>& pieces,
                                                       const std::string& tmp_error) {
  // Every rank learns every rank's slices; each slice held by several ranks goes to
  // the holder with the fewest bytes assigned so far (same decision on every rank).
  // Rank 0's record is "!" + why when it could not create step_N.tmp: every rank then
  // throws that error at once instead of waiting for files that never come.
  std::string keys;
  for (const StatePiece& p : pieces)
    keys += sliceKey(p) + "\t" + std::to_string(p.box.numel() * p.view.element_size()) + "\n";
  std::vector<std::string> all =
      dist_.allGatherString(key + "/keys", tmp_error.empty() ? keys : "!" + tmp_error);
  if (!all[0].empty() && all[0][0] == '!') {
    dist_.leaveAfterGather(key + "/keys");
    throw IoError("checkpoint of step " + std::to_string(step) + " failed: " + all[0].substr(1));
  }
  std::map<std::string, std::pair<int64_t, std::vector<int>>> holders;  // key -> bytes, ranks
  for (size_t r = 0; r < all.size(); ++r)
    for (const std::string& line : splitLines(all[r])) {
      size_t t = line.find('\t');
      auto& h = holders[line.substr(0, t)];
      h.first = std::stoll(line.substr(t + 1));
      h.second.push_back(int(r));
    }
  std::vector<int64_t> assigned(all.size(), 0);
  std::set<std::string> mine;
  for (const auto& [key, h] : holders) {
    int best = h.second[0];
    for (int r : h.second)
      if (assigned[r] < assigned[best]) best = r;
    assigned[best] += h.first;
    if (best == dist_.env.rank) mine.insert(key);
  }
  std::vector<ckpt::SliceToWrite> out;
  for (const StatePiece& p : pieces)
    if (mine.count(sliceKey(p))) out.push_back({p.name, p.global_shape, p.box, p.view});
  return out;
}

// This rank's file in `tmp`: written, fsynced and checksummed. Returns its manifest
// record (JSON), or "!" + the error naming this rank's host and the file.
std::string Checkpointer::writeMyFile(const std::string& tmp, int64_t step,
                                      const std::vector<ckpt::SliceToWrite>& slices) {
  const int rank = dist_.env.rank;
  const std::string fname = checkpointShardName(rank);
  const std::string path = (fs::path(tmp) / fname).string();
  std::string record;
  try {
    const double tw = nowSeconds();
    auto written = ckpt::writeShardFile(path, slices, rank, step);
    // The fsync (waiting on the disk) and the crc32 re-read (CPU, from the page cache) overlap.
    std::future<void> synced = std::async(std::launch::async, [&path] { fsyncPath(path); });
    int64_t bytes = 0;
    std::string crc = fileCrc32(path, &bytes);
    synced.get();  // rethrows the fsync's IoError
    last_write_s_ = nowSeconds() - tw;
    last_save_bytes_ = bytes;
    testSaveDelay(step, stop_seen_);
    json j = {{"file", {{"name", fname}, {"rank", rank}, {"bytes", bytes}, {"crc32", crc}}},
              {"slices", json::array()}};
    for (size_t i = 0; i < written.size(); ++i) {
      const CkptSlice& s = written[i].second;
      j["slices"].push_back({{"name", written[i].first},
                             {"dtype", ckpt::dtypeName(slices[i].data.scalar_type())},
                             {"shape", slices[i].global_shape},
                             {"dataset", s.dataset},
                             {"offset", s.offset},
                             {"size", s.size}});
    }
    record = j.dump();
  } catch (const std::exception& e) {
    record = std::string("!") + logPrefix() + " writing " + path + ": " + e.what();
  }
  return record;
}

std::string Checkpointer::save(int64_t step, const std::vector<StatePiece>& pieces,
                               const std::map<std::string, int64_t>& state) {
  const double t0 = nowSeconds();
  const int rank = dist_.env.rank;
  const std::string final_dir = (fs::path(dir_) / checkpointDirName(step)).string();
  const std::string tmp = final_dir + ".tmp";
  saving_.store(true);
  struct Done {
    std::atomic<bool>& f;
    ~Done() { f.store(false); }
  } done_saving{saving_};
  // One sequence number per save attempt, taken on every rank before anything can fail.
  const std::string key = "ckpt/save/" + std::to_string(seq_++);
  std::string tmp_error;  // rank 0: why step_N.tmp could not be made ("" = it exists)
  if (rank == 0) {
    try {
      prepareTmp(tmp);
    } catch (const std::exception& e) {
      tmp_error = e.what();
    }
  }
  // Waits for rank 0's mkdir; throws rank 0's tmp_error on every rank.
  std::vector<ckpt::SliceToWrite> slices = mySlices(key, step, pieces, tmp_error);
  const std::string record = writeMyFile(tmp, step, slices);
  std::vector<std::string> records = dist_.allGatherString(key + "/files", record);
  std::string verdict;
  for (const std::string& r : records)
    if (!r.empty() && r[0] == '!') verdict = r.substr(1);
  if (rank == 0 && verdict.empty()) {
    try {
      verdict = writeManifest(step, tmp, records, state);
      if (verdict.empty()) prune(step);
    } catch (const std::exception& e) {
      verdict = logPrefix() + " writing the manifest of " + final_dir + ": " + e.what();
    }
  }
  std::vector<std::string> done = dist_.allGatherString(key + "/done", rank == 0 ? verdict : "");
  if (!done[0].empty()) {
    dist_.leaveAfterGather(key + "/done");
    throw IoError("checkpoint of step " + std::to_string(step) + " failed: " + done[0]);
  }
  {
    std::lock_guard<std::mutex> lock(commit_mu_);  // every rank: complete on rank 0's word
    last_complete_ = final_dir;
  }
  last_save_s_ = nowSeconds() - t0;
  return final_dir;
}

void Checkpointer::prepareTmp(const std::string& tmp) {
  std::lock_guard<std::mutex> lock(commit_mu_);
  if (abandoned_) throw IoError(logPrefix() + " checkpoint save abandoned at the stop deadline");
  tmp_in_progress_ = tmp;
  std::error_code ec;  // a leftover of a save killed earlier is never a checkpoint: start over
  fs::remove_all(tmp, ec);
  if (ec)
    throw IoError(logPrefix() + " cannot create checkpoint directory " + tmp +
                  ": removing what is there failed: " + ec.message());
  fs::create_directories(tmp, ec);
  if (ec)
    throw IoError(logPrefix() + " cannot create checkpoint directory " + tmp + ": " + ec.message());
}

// After the manifest: the directory's fsync and rename, the moment the checkpoint becomes
// complete.
void Checkpointer::commit(const std::string& tmp, const std::string& final_dir) {
  std::lock_guard<std::mutex> lock(commit_mu_);
  if (abandoned_) throw IoError(logPrefix() + " checkpoint save abandoned at the stop deadline");
  fsyncPath(tmp);
  if (fs::exists(final_dir)) {  // an older save of the same step (e.g. one resume skipped)
    int k = 1;
    while (fs::exists(final_dir + ".replaced_" + std::to_string(k))) ++k;
    renameDurably(final_dir, final_dir + ".replaced_" + std::to_string(k));
  }
  renameDurably(tmp, final_dir);
  tmp_in_progress_.clear();
  last_complete_ = final_dir;
}

std::string Checkpointer::abandon() {
  std::lock_guard<std::mutex> lock(commit_mu_);
  abandoned_ = true;
  if (!tmp_in_progress_.empty()) {
    std::error_code ec;
    fs::remove_all(tmp_in_progress_, ec);
    if (ec)
      FTB_WARN("could not remove the unfinished checkpoint " << tmp_in_progress_ << ": "
                                                             << ec.message());
  }
  return last_complete_;
}

std::string Checkpointer::writeManifest(int64_t step, const std::string& tmp,
                                        const std::vector<std::string>& records,
                                        const std::map<std::string, int64_t>& state) {
  Manifest m;
  m.ftbench_version = FTB_VERSION;
  m.config_hash = id_.config_hash;
  m.tag = id_.tag;
  m.created_utc = utcNowIso8601();
  m.layout = id_.layout;
  m.compat = id_.compat;
  m.state = state;
  m.state["step"] = step;
  for (const std::string& r : records) {
    json j = json::parse(r);
    m.files.push_back(
        {j["file"]["name"], j["file"]["rank"], j["file"]["bytes"], j["file"]["crc32"]});
    for (const json& s : j["slices"]) {
      CkptTensor& t = m.tensors[s["name"].get<std::string>()];
      t.shape = s["shape"].get<std::vector<int64_t>>();
      t.dtype = s["dtype"];
      t.slices.push_back({j["file"]["name"], s["dataset"], s["offset"].get<std::vector<int64_t>>(),
                          s["size"].get<std::vector<int64_t>>()});
    }
  }
  // Inside step_N.tmp the manifest needs no tmp name of its own: the directory's rename
  // is the commit. One fsync of the directory (in commit) makes every rank's file entry
  // and the manifest's durable before it (each file was fsynced by its writer).
  writeFileAndFsync((fs::path(tmp) / kManifestName).string(), manifestToJson(m));
  commit(tmp, (fs::path(dir_) / checkpointDirName(step)).string());
  return "";
}

void Checkpointer::prune(int64_t newest_step) {
  if (keep_last_ <= 0) return;
  int64_t kept = 0;
  for (const std::string& d : listCheckpointDirs(dir_)) {
    int64_t s = *checkpointStepOf(fs::path(d).filename().string());
    if (s > newest_step) continue;  // a later checkpoint of an earlier attempt: not ours to judge
    if (!fs::exists(fs::path(d) / kManifestName)) continue;
    if (++kept <= keep_last_) continue;
    std::error_code ec;
    fs::remove_all(d, ec);
    if (ec) FTB_WARN("could not prune old checkpoint " << d << ": " << ec.message());
  }
}

namespace {

// The manifest tensor `p` is filled from (a rank-private piece of a checkpoint saved by
// another world size: rank 0's), or nullptr.
const CkptTensor* sourceOf(const Manifest& m, const StatePiece& p) {
  auto it = m.tensors.find(p.name);
  if (it == m.tensors.end() && p.per_rank)
    it = m.tensors.find(p.name.substr(0, p.name.rfind('.') + 1) + "rank_00000");
  return it == m.tensors.end() ? nullptr : &it->second;
}

// The box of `t` that `p` is filled from: p's own box, or the whole of a rank-private tensor.
Box wantedBox(const StatePiece& p, const CkptTensor& t) {
  return p.per_rank ? Box{{0}, {t.shape.empty() ? 1 : t.shape[0]}} : p.box;
}

std::string shapeText(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

}  // namespace

std::string Checkpointer::loadProblem(const ResumePoint& rp,
                                      const std::vector<StatePiece>& pieces) {
  auto bad = [](const std::string& what) { return std::string(kManifestName) + " " + what; };
  for (const StatePiece& p : pieces) {
    const CkptTensor* t = sourceOf(rp.manifest, p);
    if (!t) return bad("has no tensor '" + p.name + "', which this model has");
    if (t->shape != p.global_shape && !p.per_rank)
      return bad("tensor '" + p.name + "' has shape " + shapeText(t->shape) + ", this model's is " +
                 shapeText(p.global_shape));
    const Box want = wantedBox(p, *t);
    if (p.per_rank && want.size != p.box.size)
      return bad("'" + p.name + "' has " + std::to_string(want.size[0]) + " bytes, expected " +
                 std::to_string(p.box.size[0]));
    int64_t covered = 0;
    for (const CkptSlice& s : t->slices)
      if (std::optional<Box> part = ckpt::intersect(want, Box{s.offset, s.size}))
        covered += part->numel();
    if (covered != want.numel())
      return bad("the slices of '" + p.name + "' cover " + std::to_string(covered) + " of the " +
                 std::to_string(want.numel()) + " elements this rank needs");
  }
  return "";
}

std::map<std::string, int64_t> Checkpointer::load(const ResumePoint& rp,
                                                  std::vector<StatePiece>& pieces,
                                                  int64_t* bytes_read) {
  // Every piece is checked before any tensor is read: a bad checkpoint changes no state.
  if (std::string problem = loadProblem(rp, pieces); !problem.empty())
    throw CheckpointError(rp.dir, problem);  // "<dir>: manifest.json has no tensor ..."
  int64_t read = 0;
  ckpt::ShardReader reader(rp.dir);
  for (StatePiece& p : pieces) {
    const CkptTensor& t = *sourceOf(rp.manifest, p);
    const Box want = wantedBox(p, t);
    for (const CkptSlice& s : t.slices) {
      std::optional<Box> part = ckpt::intersect(want, Box{s.offset, s.size});
      if (!part) continue;
      torch::Tensor tmp = torch::empty(part->size, p.view.options().device(torch::kCPU));
      reader.read(s, *part, tmp);
      Box rel = ckpt::relativeTo(*part, want);
      torch::Tensor dst = p.view;
      for (size_t d = 0; d < rel.offset.size(); ++d)
        dst = dst.narrow(int64_t(d), rel.offset[d], rel.size[d]);
      dst.copy_(tmp);
      read += tmp.numel() * int64_t(tmp.element_size());
    }
    if (p.per_rank && p.name.rfind("rng.torch_cpu.", 0) == 0) {
      at::Generator g = at::detail::getDefaultCPUGenerator();
      g.set_state(p.view);
    }
  }
  if (bytes_read) *bytes_read = read;
  return rp.manifest.state;
}

}  // namespace ftb
