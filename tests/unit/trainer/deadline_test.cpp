// Start-up measurements end (trainer/metrics/deadline.h): bytes that cannot be mapped are an
// OomError before the measurement starts; a measurement past its deadline ends the process
// with a message, exit 5 when memory is what is missing. Under `ulimit -v` just below a
// run's need the trainer hung in OpenBLAS's start-up GEMM, silent for 11 minutes.
#include "trainer/metrics/deadline.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/error.h"
#include "common/proc_memory.h"

namespace ftb {
namespace {

TEST(MeasureDeadline, ReturnsWhatTheMeasurementReturnsAndRethrowsWhatItThrows) {
  EXPECT_EQ(measureWithDeadline("a sum", 4096, 10, [] { return 42.0; }), 42.0);
  EXPECT_THROW(measureWithDeadline("a failure", 4096, 10,
                                   []() -> double { throw std::runtime_error("no"); }),
               std::runtime_error);
}

TEST(MeasureDeadline, BytesTheAddressSpaceCannotHoldAreAnOomErrorBeforeMeasuring) {
  bool ran = false;
  try {
    measureWithDeadline("the huge GEMM", int64_t{1} << 50, 10, [&] {  // 1 PiB
      ran = true;
      return 1.0;
    });
    ADD_FAILURE() << "no OomError";
  } catch (const OomError& e) {
    EXPECT_EQ(e.exitCode(), 5);
    EXPECT_NE(std::string(e.what()).find("the huge GEMM: cannot map 1073741824 MiB more (mmap: "),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(ran);
  EXPECT_EQ(addressSpaceShortfall(4096), "");
}

TEST(MeasureDeadline, GemmBytesAreItsOperandsAndTheBlasBuffers) {
  EXPECT_EQ(gemmMeasureBytes(torch::kFloat32, 2048, false), 3 * 2048 * 2048 * 4 + kBlasWorkBytes);
  EXPECT_EQ(gemmMeasureBytes(torch::kBFloat16, 2048, false), 3 * 2048 * 2048 * 2 + kBlasWorkBytes);
  EXPECT_EQ(gemmMeasureBytes(torch::kBFloat16, 8192, true), 0);
}

TEST(MeasureDeadlineDeathTest, AMeasurementPastItsDeadlineEndsTheProcessWithAMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(measureWithDeadline("the stuck GEMM", 4096, 1,
                                  [] {
                                    std::this_thread::sleep_for(std::chrono::seconds(30));
                                    return 1.0;
                                  }),
              ::testing::ExitedWithCode(1),
              "the stuck GEMM did not finish within 1 s \\(the machine is overloaded or hung\\)");
}

// Lowers this process's address-space limit to what it maps now plus `extra` bytes.
void limitAddressSpace(int64_t extra) {
  const int64_t mapped = mappedBytes();
  ASSERT_GT(mapped, 0);
  rlimit as{};
  getrlimit(RLIMIT_AS, &as);
  as.rlim_cur = rlim_t(mapped) + rlim_t(extra);
  ASSERT_EQ(setrlimit(RLIMIT_AS, &as), 0);
}

// The hang this prevents: an allocation inside the measurement failing (and retried) while
// the address space is exhausted.
TEST(MeasureDeadlineDeathTest, PastItsDeadlineWithTheAddressSpaceExhaustedItIsOutOfMemory) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(measureWithDeadline("the starved GEMM", int64_t{256} << 20, 1,
                                  [] {
                                    limitAddressSpace(int64_t{64} << 20);  // 256 MiB won't fit
                                    std::this_thread::sleep_for(std::chrono::seconds(30));
                                    return 1.0;
                                  }),
              ::testing::ExitedWithCode(5),
              "the starved GEMM did not finish within 1 s: out of memory: cannot map 256 MiB "
              "more \\(mmap: Cannot allocate memory\\): [0-9]+ MiB of the address-space limit "
              "\\(ulimit -v\\) of [0-9]+ MiB are mapped");
}

}  // namespace
}  // namespace ftb
