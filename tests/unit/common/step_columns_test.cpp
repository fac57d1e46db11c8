// The step column table (common/step_columns.h) and the MetricsFile rows it types:
// every column documented (units, one-line description), names unique, the Markdown of
// `trainer --help-metrics`, a row that leaves a column out refused, and a written file whose
// datasets carry the table's types and attributes.
#include "common/step_columns.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>

#include "common/h5_metrics.h"
#include "common/hdf5.h"

namespace ftb {
namespace {

// Every column a writer must declare: units, a description Markdown can hold in one cell,
// a valid dataset name, a unique name, its own id at its position.
TEST(StepColumnsTest, EveryColumnDocumentedAndUnique) {
  std::set<std::string> names;
  size_t i = 0;
  for (const StepColumn& c : stepColumns()) {
    const std::string name = c.name, units = c.units, text = c.description;
    EXPECT_EQ(static_cast<size_t>(c.id), i++) << name;
    EXPECT_TRUE(names.insert(name).second) << "duplicate column " << name;
    EXPECT_FALSE(name.empty());
    EXPECT_EQ(name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_"), std::string::npos)
        << name;
    EXPECT_FALSE(units.empty()) << name;
    EXPECT_GE(text.size(), 10u) << name;
    EXPECT_EQ(text.find_first_of("|<\n"), std::string::npos) << name << ": " << text;
    EXPECT_EQ(findStepColumn(name), &c);
    EXPECT_EQ(&stepColumn(c.id), &c);
  }
  EXPECT_EQ(names.size(), kStepColumnCount);
  EXPECT_EQ(findStepColumn("no_such_column"), nullptr);
}

// Units follow the names' own promises: *_s seconds, *_bytes bytes, *_frac / *_fraction a
// ratio, tokens_per_s_* and tokens_per_cpu_s a rate of tokens.
TEST(StepColumnsTest, UnitsAgreeWithNames) {
  auto ends = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (const StepColumn& c : stepColumns()) {
    const std::string name = c.name, units = c.units;
    const bool rate = name.rfind("tokens_per_", 0) == 0;
    if (ends(name, "_s") && !rate) EXPECT_EQ(units, "s") << name;
    if (ends(name, "_bytes")) {
      EXPECT_EQ(units, "bytes") << name;
      EXPECT_EQ(c.type, ColumnType::kInt) << name;
    }
    if (ends(name, "_frac") || ends(name, "_fraction")) EXPECT_EQ(units, "1") << name;
    if (rate) EXPECT_EQ(units.rfind("tokens/s", 0), 0u) << name;
  }
}

// One header, one separator, then one row of 4 cells per column in table order.
TEST(StepColumnsTest, MarkdownHasOneRowPerColumn) {
  std::istringstream md(stepColumnsMarkdown());
  std::string line;
  ASSERT_TRUE(std::getline(md, line));
  EXPECT_EQ(line, "| column | units | type | meaning |");
  ASSERT_TRUE(std::getline(md, line));
  EXPECT_EQ(line, "|---|---|---|---|");
  for (const StepColumn& c : stepColumns()) {
    ASSERT_TRUE(std::getline(md, line)) << "no row for " << c.name;
    EXPECT_EQ(line.rfind(std::string("| `") + c.name + "` | " + c.units + " | ", 0), 0u) << line;
    EXPECT_NE(line.find(c.type == ColumnType::kInt ? " | int64 | " : " | float64 | "),
              std::string::npos)
        << line;
    EXPECT_EQ(std::count(line.begin(), line.end(), '|'), 5) << line;
  }
  EXPECT_FALSE(std::getline(md, line)) << "extra line: " << line;
}

StepRow fullRow(double step) {
  StepRow row;
  for (const StepColumn& c : stepColumns()) row.set(c.id, 0.5);
  row.set(StepCol::kStep, step);
  return row;
}

std::string tempFile() {
  std::string dir = ::testing::TempDir() + "ftb_cols_XXXXXX";
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  return dir + "/rank_00000.h5";
}

TEST(StepColumnsTest, RowLeavingAColumnOutIsRefused) {
  StepRow row = fullRow(0);
  EXPECT_EQ(row.firstUnset(), nullptr);
  StepRow partial;
  partial.set(StepCol::kStep, 0).set(StepCol::kTimeS, 1);
  ASSERT_NE(partial.firstUnset(), nullptr);
  EXPECT_STREQ(partial.firstUnset()->name, "step_time_s");
  EXPECT_TRUE(std::isnan(partial.get(StepCol::kLoss)));

  const std::string path = tempFile();
  MetricsFile m = MetricsFile::create(path, RunInfo{});
  EXPECT_THROW(m.appendStep(row), std::logic_error);  // not declared yet
  m.declareStepColumns();
  try {
    m.appendStep(partial);
    ADD_FAILURE() << "a row without step_time_s was buffered";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("'step_time_s'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(m.stepsBuffered(), 0);
  m.appendStep(row);
  EXPECT_EQ(m.stepsBuffered(), 1);
  m.close();
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

// The file holds exactly the table's columns, each with its type, `units` and
// `description`; NaN passes metricsProblem only in the columns that allow it.
TEST(StepColumnsTest, FileCarriesTheTable) {
  const std::string path = tempFile();
  {
    MetricsFile m = MetricsFile::create(path, RunInfo{});
    m.declareStepColumns();
    for (int s = 0; s < 3; ++s) m.appendStep(fullRow(s));
    m.close();
  }
  MetricsData d = readMetricsFile(path);
  EXPECT_EQ(d.steps.size(), kStepColumnCount);
  h5::H5Handle file = h5::openFile(path);
  h5::H5Handle steps = h5::openGroup(file, "steps");
  for (const StepColumn& c : stepColumns()) {
    ASSERT_EQ(d.steps.count(c.name), 1u) << c.name;
    EXPECT_EQ(d.steps[c.name].size(), 3u) << c.name;
    EXPECT_EQ(d.int_metrics.count(c.name), c.type == ColumnType::kInt ? 1u : 0u) << c.name;
    h5::H5Handle dset = h5::openDataset(steps, c.name);
    EXPECT_EQ(h5::readAttrString(dset, "units"), c.units);
    EXPECT_EQ(h5::readAttrString(dset, "description"), c.description);
  }
  EXPECT_EQ(metricsProblem(d), "");
  for (const StepColumn& c : stepColumns()) {
    if (c.type == ColumnType::kInt) continue;  // NaN is stored as -1 there
    MetricsData nan = d;
    nan.steps[c.name][1] = std::nan("");
    EXPECT_EQ(metricsProblem(nan).empty(), c.nan_allowed) << c.name << ": " << metricsProblem(nan);
  }
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

}  // namespace
}  // namespace ftb
