// Tests for common/hdf5.h (RAII + helpers) and common/h5_metrics.h.
// Env FTB_H5_OUT / FTB_H5_KILLED_OUT: where MetricsFileTest.RoundTrip / .SigkillKeeps...
// leave their files (read by tests/e2e/test_h5_layout.py); default: a temp dir.
#include "common/hdf5.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "common/h5_metrics.h"
#include "common/proc_memory.h"
#include "test_util.h"

namespace ftb {
namespace {

namespace fs = std::filesystem;
using h5::H5Handle;

std::string outPath(const char* env, const std::string& fallback) {
  const char* p = std::getenv(env);
  return p != nullptr && *p != '\0' ? std::string(p) : fallback;
}

RunInfo sampleInfo() {
  RunInfo i;
  i.tag = "tiny.ws2.0123abcd";
  i.config_hash = "0123456789abcdef";
  i.hostname = "node-é1";
  i.start_utc = "2024-05-01T12:00:00Z";
  i.ftbench_version = "0.1.0";
  i.torch_version = "1.13.1";
  i.device = "cpu";
  i.peak_source = "measured gemm fp32";
  i.config_toml = "[model]\nname = \"tiny\"\n\n[training]\nmax_steps = 25\n";
  i.world_size = 2, i.rank = 1, i.local_rank = 1, i.node_rank = 0;
  i.peak_flops = 1.14e11;
  return i;
}

TEST(H5HandleTest, MoveTransfersOwnershipAndScopeCloses) {
  std::string path = test::makeTempDir("ftb_h5_") + "/h.h5";
  hid_t id;
  {
    H5Handle f = h5::createFile(path);
    id = f.get();
    H5Handle g = std::move(f);
    EXPECT_FALSE(f.valid());  // NOLINT(bugprone-use-after-move): moved-from is invalid
    EXPECT_EQ(g.get(), id);
    EXPECT_EQ(g.kind(), h5::Kind::kFile);
    H5Handle grp = h5::createGroup(g, "a");
    hid_t gid = grp.get();
    grp = h5::createGroup(g, "b");  // move-assign closes the old group
    EXPECT_LE(H5Iis_valid(gid), 0);
    EXPECT_GT(H5Iis_valid(grp), 0);
    hid_t raw = grp.release();
    EXPECT_FALSE(grp.valid());
    EXPECT_GE(H5Gclose(raw), 0);
    grp.close();  // no-op when invalid
  }
  EXPECT_LE(H5Iis_valid(id), 0);
  H5Handle f = h5::openFile(path);
  EXPECT_EQ(h5::listMembers(f), (std::vector<std::string>{"a", "b"}));
  f.close();
  EXPECT_FALSE(f.valid());
}

TEST(H5HandleTest, FailuresBecomeIoErrorNamingTheFile) {
  std::string dir = test::makeTempDir("ftb_h5_");
  try {
    h5::openFile(dir + "/missing.h5");
    FAIL() << "no throw";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/missing.h5"), std::string::npos) << e.what();
  }
  H5Handle f = h5::createFile(dir + "/f.h5");
  h5::createGroup(f, "g");
  try {
    h5::createGroup(f, "g");
    FAIL() << "no throw";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("f.h5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("H5Gcreate2 'g'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(h5::readDoubles(f, "nope"), IoError);
  EXPECT_THROW(h5::createFile(dir + "/no/such/dir/x.h5"), IoError);
}

TEST(H5AttrTest, ScalarAttributesRoundTrip) {
  H5Handle f = h5::createFile(test::makeTempDir("ftb_h5_") + "/a.h5");
  H5Handle g = h5::createGroup(f, "g");
  h5::writeAttrInt(g, "i", -(int64_t{1} << 40));
  h5::writeAttrDouble(g, "d", 1.25e-7);
  h5::writeAttrString(g, "s", "héllo ✓");
  h5::writeAttrString(g, "fixed", "abc", /*fixed_length=*/true);
  h5::writeAttrString(g, "empty", "");
  h5::writeAttrString(g, "empty_fixed", "", true);
  EXPECT_EQ(h5::readAttrInt(g, "i"), -(int64_t{1} << 40));
  EXPECT_EQ(h5::readAttrDouble(g, "d"), 1.25e-7);
  EXPECT_EQ(h5::readAttrDouble(g, "i"), -static_cast<double>(int64_t{1} << 40));
  EXPECT_EQ(h5::readAttrString(g, "s"), "héllo ✓");
  EXPECT_EQ(h5::readAttrString(g, "fixed"), "abc");
  EXPECT_EQ(h5::readAttrString(g, "empty"), "");
  EXPECT_EQ(h5::readAttrString(g, "empty_fixed"), "");
  EXPECT_EQ(h5::attrType(g, "i"), h5::AttrType::kInt);
  EXPECT_EQ(h5::attrType(g, "d"), h5::AttrType::kFloat);
  EXPECT_EQ(h5::attrType(g, "fixed"), h5::AttrType::kString);
  EXPECT_THROW(h5::readAttrString(g, "i"), IoError);
  EXPECT_THROW(h5::readAttrInt(g, "missing"), IoError);
  h5::writeAttrString(g, "i", "now a string");  // replaces, even across types
  EXPECT_EQ(h5::readAttrString(g, "i"), "now a string");
  EXPECT_EQ(h5::listAttrs(g),
            (std::vector<std::string>{"d", "empty", "empty_fixed", "fixed", "i", "s"}));
  EXPECT_TRUE(h5::hasAttr(g, "d"));
  EXPECT_FALSE(h5::hasAttr(g, "x"));
}

TEST(H5DatasetTest, StringAndAppendableDatasetsRoundTrip) {
  H5Handle f = h5::createFile(test::makeTempDir("ftb_h5_") + "/d.h5");
  std::string toml = "[a]\nb = \"ü\"\n";
  h5::writeStringDataset(f, "config", toml);
  EXPECT_EQ(h5::readStringDataset(f, "config"), toml);

  H5Handle d = h5::createAppendable(f, "loss", h5::ElemType::kFloat64, 4);
  H5Handle n = h5::createAppendable(f, "tokens", h5::ElemType::kInt64);
  EXPECT_EQ(h5::datasetLength(d), 0u);
  std::vector<double> dv;
  std::vector<int64_t> iv;
  for (int i = 0; i < 1003; ++i) dv.push_back(0.5 * i), iv.push_back(int64_t{3} << 35 | i);
  h5::appendValues(d, dv.data(), 3);
  h5::appendValues(d, dv.data() + 3, 0);
  h5::appendValues(d, dv.data() + 3, dv.size() - 3);
  h5::appendValues(n, iv.data(), iv.size());
  EXPECT_FALSE(h5::isIntDataset(d));
  EXPECT_TRUE(h5::isIntDataset(n));
  EXPECT_EQ(h5::readDoubles(f, "loss"), dv);
  EXPECT_EQ(h5::readInts(f, "tokens"), iv);
  EXPECT_EQ(h5::readInts(f, "loss")[4], 2);  // converted by HDF5
  EXPECT_TRUE(h5::exists(f, "loss"));
  EXPECT_FALSE(h5::exists(f, "nope"));
  EXPECT_EQ(h5::listMembers(f), (std::vector<std::string>{"config", "loss", "tokens"}));
}

// Appending to the /steps columns keeps the memory flat: 50 columns of 1024-row chunks, 16
// rows per append, flushed after each, 16 chunks each. With HDF5's default 1 MiB chunk
// cache every completed 8 KiB chunk stayed cached (50 x 15 x 8 KiB = 6 MiB of growth); the
// files' 16 KiB cache (common/hdf5.cpp accessPlist) keeps two per column.
TEST(H5DatasetTest, AppendingToManyColumnsKeepsTheChunkCacheBounded) {
  H5Handle f = h5::createFile(test::makeTempDir("ftb_h5_") + "/cache.h5");
  std::vector<H5Handle> cols;
  for (int c = 0; c < 50; ++c)
    cols.push_back(h5::createAppendable(f, "c" + std::to_string(c), h5::ElemType::kFloat64));
  std::vector<double> rows(16, 1.5);
  auto append = [&](int times) {
    for (int i = 0; i < times; ++i) {
      for (H5Handle& d : cols) h5::appendValues(d, rows.data(), rows.size());
      h5::flushFile(f);
    }
  };
  append(64 * 2);  // two chunks per column: the cache and the index are warm
  const double before = double(currentRssBytes());
  append(64 * 14);
  const double grown = double(currentRssBytes()) - before;
  EXPECT_LT(grown, 1.5 * (1 << 20)) << "resident memory grew by " << grown / (1 << 20)
                                    << " MiB over 14 chunks of 50 columns";
  EXPECT_EQ(h5::datasetLength(cols[49]), 16u * 1024u);
}

TEST(MetricsFileTest, PathFormat) {
  EXPECT_EQ(metricsFilePath("/r/tag", 7), "/r/tag/metrics/rank_00007.h5");
}

TEST(MetricsFileTest, RoundTrip) {
  std::string path =
      outPath("FTB_H5_OUT", metricsFilePath(test::makeTempDir("ftb_h5_") + "/run", 1));
  RunInfo info = sampleInfo();
  {
    MetricsFile m = MetricsFile::create(path, info);
    m.declareMetric("step", true);
    m.declareMetric("time_s", false);
    m.declareMetric("loss", false);
    m.declareMetric("tokens", true);
    for (int s = 0; s < 25; ++s) {
      std::map<std::string, double> row{{"step", s}, {"time_s", 0.1 * s}, {"tokens", 4096}};
      if (s != 3) row["loss"] = 10.0 - 0.25 * s;  // step 3: loss missing -> NaN
      if (s == 4) row.erase("tokens");            // step 4: int missing -> -1
      m.appendStep(row);
      if ((s + 1) % 10 == 0) m.flush();
    }
    EXPECT_EQ(m.stepsFlushed(), 20);
    EXPECT_EQ(m.stepsBuffered(), 5);
    m.setStatus("completed", 0, "done");
    EXPECT_EQ(m.stepsFlushed(), 25);
    m.close();
    m.close();  // idempotent
  }
  MetricsData d = readMetricsFile(path);
  EXPECT_EQ(std::get<int64_t>(d.attrs.at("schema_version")), 1);
  EXPECT_EQ(std::get<std::string>(d.attrs.at("tag")), info.tag);
  EXPECT_EQ(std::get<std::string>(d.attrs.at("hostname")), info.hostname);
  EXPECT_EQ(std::get<int64_t>(d.attrs.at("world_size")), 2);
  EXPECT_EQ(std::get<int64_t>(d.attrs.at("rank")), 1);
  EXPECT_EQ(std::get<double>(d.attrs.at("peak_flops")), 1.14e11);
  EXPECT_EQ(d.attrs.size(), 14u);
  EXPECT_EQ(d.config, info.config_toml);
  EXPECT_EQ(d.status.state, RunState::Completed);
  EXPECT_EQ(d.status.exit_code, 0);
  EXPECT_EQ(d.status.message, "done");
  EXPECT_EQ(d.status.steps_done, 25);
  EXPECT_EQ(d.int_metrics, (std::set<std::string>{"step", "tokens"}));
  ASSERT_EQ(d.steps.size(), 4u);
  for (const auto& kv : d.steps) ASSERT_EQ(kv.second.size(), 25u) << kv.first;
  for (int s = 0; s < 25; ++s) {
    EXPECT_EQ(d.steps["step"][s], s);
    EXPECT_DOUBLE_EQ(d.steps["time_s"][s], 0.1 * s);
    EXPECT_EQ(d.steps["tokens"][s], s == 4 ? -1 : 4096);
    if (s == 3) {
      EXPECT_TRUE(std::isnan(d.steps["loss"][s]));
    } else {
      EXPECT_EQ(d.steps["loss"][s], 10.0 - 0.25 * s);
    }
  }
}

// A run resumed three times (resume_steps holds 3 elements) reads back: the scalar read of
// that array attribute wrote past its one value and crashed aggregate's reader.
TEST(MetricsFileTest, RunResumedSeveralTimesReadsBack) {
  std::string path = metricsFilePath(test::makeTempDir("ftb_h5_") + "/resumed3", 0);
  RunInfo info = sampleInfo();
  {
    MetricsFile m = MetricsFile::create(path, info);
    m.declareMetric("step", true);
    for (int s = 0; s < 4; ++s) m.appendStep({{"step", s}});
    m.setStatus("completed", 0, "done");
    m.close();
  }
  for (int i = 0; i < 3; ++i) {
    MetricsFile m = MetricsFile::resume(path, info, 4);
    m.setStatus("completed", 0, "done");
    m.close();
  }
  MetricsData d = readMetricsFile(path);
  EXPECT_EQ(std::get<int64_t>(d.attrs.at("resume_count")), 3);
  EXPECT_EQ(d.attrs.count("resume_steps"), 0u);  // an array, not a scalar attribute
  EXPECT_EQ(d.status.steps_done, 4);
  h5::H5Handle file = h5::openFile(path, false, false);
  h5::H5Handle root = h5::openGroup(file, "/");
  EXPECT_EQ(h5::readAttrInts(root, "resume_steps"), (std::vector<int64_t>{4, 4, 4}));
  EXPECT_EQ(h5::attrElements(root, "resume_steps"), 3);
  EXPECT_THROW(h5::readAttrInt(root, "resume_steps"), IoError);
  EXPECT_THROW(h5::readAttrDouble(root, "resume_steps"), IoError);
}

// A resume whose checkpoint cannot be loaded falls back to an older one (or to step 0):
// the rows from there on are cut and the resume this attempt recorded says where it went.
TEST(MetricsFileTest, MovedResumePointCutsRowsAndReplacesTheRecordedResume) {
  std::string path = metricsFilePath(test::makeTempDir("ftb_h5_") + "/moved", 0);
  RunInfo info = sampleInfo();
  {
    MetricsFile m = MetricsFile::create(path, info);
    m.declareMetric("step", true);
    m.declareMetric("time_s", false);
    for (int s = 0; s < 12; ++s) m.appendStep({{"step", s}, {"time_s", 0.5 * s}});
    m.close();
  }
  {
    MetricsFile m = MetricsFile::resume(path, info, 12);
    EXPECT_EQ(m.stepsFlushed(), 12);
    m.moveResumePoint(8);
    EXPECT_EQ(m.stepsFlushed(), 8);
    EXPECT_DOUBLE_EQ(m.resumedTimeS(), 3.5);
    m.close();
  }
  MetricsData d = readMetricsFile(path);
  EXPECT_EQ(std::get<int64_t>(d.attrs.at("resume_count")), 1);
  EXPECT_EQ(d.status.steps_done, 8);
  EXPECT_EQ(d.status.message, "resumed from the checkpoint of step 8");
  {
    h5::H5Handle file = h5::openFile(path, false, false);
    h5::H5Handle root = h5::openGroup(file, "/");
    EXPECT_EQ(h5::readAttrInts(root, "resume_steps"), (std::vector<int64_t>{8}));
  }
  {
    MetricsFile m = MetricsFile::resume(path, info, 8);
    m.moveResumePoint(std::nullopt);  // no checkpoint fits: step 0, no resume recorded
    EXPECT_EQ(m.resumedTimeS(), 0.0);
    m.close();
  }
  d = readMetricsFile(path);
  EXPECT_EQ(d.status.steps_done, 0);
  EXPECT_EQ(std::get<int64_t>(d.attrs.at("resume_count")), 1);  // the first attempt's
  {
    MetricsFile m = MetricsFile::create(path, info);
    m.close();
  }
  {
    MetricsFile m = MetricsFile::resume(path, info, 4);
    m.moveResumePoint(std::nullopt);
    m.close();
  }
  EXPECT_EQ(readMetricsFile(path).attrs.count("resume_count"), 0u);
  MetricsFile m = MetricsFile::resume(path, info, 0);
  m.declareMetric("step", true);
  m.appendStep({{"step", 0}});
  EXPECT_THROW(m.moveResumePoint(0), std::logic_error);
}

TEST(MetricsFileTest, ContractViolationsThrow) {
  MetricsFile m = MetricsFile::create(test::makeTempDir("ftb_h5_") + "/m.h5", sampleInfo());
  m.declareMetric("loss", false);
  m.declareMetric("loss", false);  // same type: no-op
  EXPECT_THROW(m.declareMetric("loss", true), std::logic_error);
  EXPECT_THROW(m.declareMetric("a/b", false), std::invalid_argument);
  EXPECT_THROW(m.appendStep({{"los", 1.0}}), std::invalid_argument);
  EXPECT_EQ(m.stepsBuffered(), 0);
  m.appendStep({{"loss", 1.0}});
  EXPECT_THROW(m.declareMetric("step", true), std::logic_error);
  EXPECT_THROW(m.setStatus("done", 0, ""), std::invalid_argument);
}

// States outside the recorded ones: refused when written, a corrupt file when read.
TEST(MetricsFileTest, UnrecordedStateIsRefusedAndAnUnknownOneOnDiskIsCorrupt) {
  const std::string path = test::makeTempDir("ftb_h5_") + "/m.h5";
  {
    MetricsFile m = MetricsFile::create(path, sampleInfo());
    EXPECT_THROW(m.setStatus(RunState::Held, 0, ""), std::invalid_argument);
    EXPECT_THROW(m.setStatus("killed", 0, ""), std::invalid_argument);
    m.setStatus(RunState::Oom, 5, "oom");
  }
  EXPECT_EQ(readMetricsFile(path).status.state, RunState::Oom);
  {
    h5::H5Handle f = h5::openFile(path, true);
    h5::H5Handle status = h5::openGroup(f, "status");
    h5::writeAttrString(status.get(), "state", "done");
  }
  try {
    readMetricsFile(path);
    FAIL() << "a /status state 'done' was read";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown /status state 'done' (expected one of "
                                         "running|completed|failed|oom|preempted|invalid)"),
              std::string::npos)
        << e.what();
  }
}

TEST(MetricsFileTest, DestructorFlushesAndMoveKeepsOneOwner) {
  std::string path = test::makeTempDir("ftb_h5_") + "/m.h5";
  {
    MetricsFile a = MetricsFile::create(path, sampleInfo());
    a.declareMetric("loss", false);
    a.appendStep({{"loss", 2.0}});
    MetricsFile b = std::move(a);
    b.appendStep({{"loss", 3.0}});
  }
  MetricsData d = readMetricsFile(path);
  EXPECT_EQ(d.steps.at("loss"), (std::vector<double>{2.0, 3.0}));
  EXPECT_EQ(d.status.state, RunState::Running);
  EXPECT_EQ(d.status.steps_done, 2);
}

TEST(MetricsFileTest, LiveFileIsNotLocked) {
  std::string path = test::makeTempDir("ftb_h5_") + "/live.h5";
  MetricsFile m = MetricsFile::create(path, sampleInfo());
  m.declareMetric("loss", false);
  m.appendStep({{"loss", 1.0}});
  m.flush();
  int fd = open(path.c_str(), O_RDONLY);  // a new open file description: conflicts with
  ASSERT_GE(fd, 0);                       // any flock HDF5 holds, even in this process
  EXPECT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0) << "HDF5 holds a lock on the live file";
  close(fd);
  EXPECT_EQ(readMetricsFile(path).steps.at("loss").size(), 1u);
}

TEST(MetricsFileTest, CorruptOrTruncatedFileThrowsIoError) {
  std::string dir = test::makeTempDir("ftb_h5_");
  std::string good = dir + "/good.h5";
  {
    MetricsFile m = MetricsFile::create(good, sampleInfo());
    m.declareMetric("loss", false);
    for (int i = 0; i < 100; ++i) m.appendStep({{"loss", i}});
  }
  std::ifstream in(good, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 1000u);
  std::ofstream(dir + "/trunc.h5", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  std::ofstream(dir + "/garbage.h5") << "not an hdf5 file\n";
  EXPECT_THROW(readMetricsFile(dir + "/trunc.h5"), IoError);
  EXPECT_THROW(readMetricsFile(dir + "/garbage.h5"), IoError);
  EXPECT_THROW(readMetricsFile(dir + "/missing.h5"), IoError);
  H5Handle f = h5::createFile(dir + "/other.h5");  // valid HDF5, wrong schema
  f.close();
  EXPECT_THROW(readMetricsFile(dir + "/other.h5"), IoError);
}

TEST(MetricsFileTest, SigkillKeepsEveryFlushedStep) {
  std::string path = outPath("FTB_H5_KILLED_OUT", test::makeTempDir("ftb_h5_") + "/killed.h5");
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // child: no gtest assertions here
    try {
      MetricsFile m = MetricsFile::create(path, sampleInfo());
      m.declareMetric("step", true);
      m.declareMetric("loss", false);
      for (int s = 0; s < 15; ++s) {
        m.appendStep({{"step", s}, {"loss", 1.0 / (s + 1)}});
        if (s == 9) m.flush();
      }
      raise(SIGKILL);
    } catch (...) {
    }
    _exit(1);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL) << "status " << wstatus;
  MetricsData d = readMetricsFile(path);
  EXPECT_EQ(d.status.state, RunState::Running);
  EXPECT_EQ(d.status.steps_done, 10);
  ASSERT_EQ(d.steps.at("step").size(), 10u);
  ASSERT_EQ(d.steps.at("loss").size(), 10u);
  for (int s = 0; s < 10; ++s) EXPECT_EQ(d.steps.at("step")[s], s);
}

// A process killed inside flush(), after a column's rows reached the file and before
// /status steps_done counted them: the reader returns the counted rows, whole.
TEST(MetricsFileTest, RowsPastStepsDoneOfAnInterruptedFlushAreNotReturned) {
  std::string path = test::makeTempDir("ftb_h5_") + "/torn.h5";
  {
    MetricsFile m = MetricsFile::create(path, sampleInfo());
    m.declareMetric("step", true);
    m.declareMetric("loss", false);
    for (int s = 0; s < 4; ++s) m.appendStep({{"step", s}, {"loss", 1.0 / (s + 1)}});
    m.close();
  }
  {  // what a kill between the rows' flush and steps_done's leaves: loss one row longer
    h5::H5Handle file = h5::openFile(path, /*writable=*/true, /*file_locking=*/false);
    h5::H5Handle steps = h5::openGroup(file, "steps");
    h5::H5Handle loss = h5::openDataset(steps, "loss");
    const double extra = 0.2;
    h5::appendValues(loss, &extra, 1);
    h5::flushFile(file);
  }
  MetricsData d = readMetricsFile(path);
  EXPECT_EQ(d.status.steps_done, 4);
  ASSERT_EQ(d.steps.at("step").size(), 4u);
  ASSERT_EQ(d.steps.at("loss").size(), 4u);
  EXPECT_EQ(d.steps.at("loss")[3], 0.25);
  EXPECT_EQ(metricsProblem(d), "");
}

}  // namespace
}  // namespace ftb
