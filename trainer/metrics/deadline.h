// Start-up measurements that end: the GEMMs behind gemm_efficiency and training.fp32_gemm
// (measureGemmPeak in perf.h, measureFp32Gemm in model/linear.h) run through
// measureWithDeadline. Under an address-space limit just below a run's need the trainer
// hung at 100 % CPU in OpenBLAS, which retries a failing mmap of its work buffer forever,
// silent until killed.
//
// Contract of measureWithDeadline(what, bytes, deadline_s, measure):
// - First the `bytes` the measurement will map (gemmMeasureBytes: its operands and the
//   BLAS's work buffers) are mapped and released again (addressSpaceShortfall). When they do
//   not fit (ulimit -v, the overcommit limit) it throws OomError (exit 5) naming `what`, the
//   bytes and the limit, before the BLAS is entered.
// - Then `measure` runs on this thread while a watchdog thread waits `deadline_s`. Past it,
//   the watchdog writes "<what> did not finish within S s" to stderr and ends the process
//   (the measuring thread cannot be interrupted): exit 5 with "out of memory" and the
//   shortfall when the bytes no longer fit by then (an allocation inside is failing), else
//   exit 1. A watchdog thread that cannot start is an OomError too. measure()'s result or
//   exception is returned or rethrown once the watchdog is joined.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>

namespace ftb {

// The 2048^3 GEMM's four products take seconds on one busy core: minutes are beyond any
// machine of ours.
inline constexpr double kMeasureDeadlineS = 120;
// The BLAS's work buffers a first product maps: OpenBLAS 0.3's is 128 MiB (VmSize grew by
// 139 MiB at its first 2048^3 sgemm), plus slack for thread stacks.
inline constexpr int64_t kBlasWorkBytes = int64_t{160} << 20;

// The bytes a start-up GEMM of n x n in `dtype` maps on the CPU: three operands and the
// BLAS's buffers; 0 on a GPU (device memory is not this process's address space).
int64_t gemmMeasureBytes(torch::ScalarType dtype, int64_t n, bool on_gpu);

// "" when `bytes` more of address space can be mapped now, else why not ("cannot map 188 MiB
// more (mmap: Cannot allocate memory): 3012 MiB of the address-space limit (ulimit -v) of
// 3100 MiB are mapped"). Formats without the heap.
std::string addressSpaceShortfall(int64_t bytes);

double measureWithDeadline(const std::string& what, int64_t bytes, double deadline_s,
                           const std::function<double()>& measure);

}  // namespace ftb
