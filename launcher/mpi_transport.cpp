#include "launcher/mpi_transport.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "common/fd.h"
#include "common/log.h"

namespace ftb::launcher {
namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw DistError(std::string(what) + " failed: " + std::string(msg, len));
}

}  // namespace

bool launchedByMpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_SIZE");
}

void rejectSrunWithoutPmi() {
  const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS");
  if (launchedByMpi() || !tasks || std::atoi(tasks) <= 1) return;
  throw ConfigError("srun", "environment",
                    "started as one of " + std::string(tasks) +
                        " srun tasks without PMI: every launcher would run alone",
                    "use srun --mpi=pmix --ntasks-per-node=1 launcher ...");
}

namespace {

char g_init_timeout_msg[512];  // formatted before the alarm is armed: the handler only writes

void onInitTimeout(int) {
  ftb::writeAll(STDERR_FILENO, g_init_timeout_msg, std::strlen(g_init_timeout_msg));
  std::_Exit(3);  // DistError's code: no MPI call can be made from here, none is needed
}

// SIGALRM after `seconds` (rounded up to whole seconds) ends the process with a message.
void armInitDeadline(double seconds) {
  const unsigned s = static_cast<unsigned>(std::ceil(std::max(seconds, 1.0)));
  char host[64] = "?";
  gethostname(host, sizeof host - 1);
  std::snprintf(g_init_timeout_msg, sizeof g_init_timeout_msg,
                "[launcher] %s (pid %d): timed out after %u s in MPI_Init waiting for every "
                "launcher of the job to start (a peer died or never started; --rdzv-timeout)\n",
                host, int(getpid()), s);
  struct sigaction sa {};
  sa.sa_handler = onInitTimeout;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, nullptr);
  alarm(s);
}

void disarmInitDeadline() {
  alarm(0);
  signal(SIGALRM, SIG_DFL);
}

}  // namespace

MpiSession::MpiSession(double init_timeout_s) {
  // Workers are started with fork(); with the TCP transport this is safe.
  setenv("OMPI_MCA_mpi_warn_on_fork", "0", 0);
  // The launchers exchange a few small messages: skip UCX/OFI initialization (~200 ms of
  // MPI_Init here) unless the user chose otherwise. Workers never see these variables.
  setenv("OMPI_MCA_pml", "ob1", 0);
  setenv("OMPI_MCA_osc", "^ucx", 0);
  setenv("OMPI_MCA_mtl", "^ofi", 0);
  setenv("OMPI_MCA_btl", "^openib,ofi", 0);
  // OpenMPI's own fatal-signal handler (opal_signal, default SIGABRT, SIGBUS, SIGFPE and
  // SIGSEGV) would replace the launcher's crash report (common/crash_report.h), which
  // names the program and host and prints addr2line offsets: keep only its SIGABRT.
  setenv("OMPI_MCA_opal_signal", "6", 0);
  int provided = 0;
  armInitDeadline(init_timeout_s);
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SINGLE, &provided), "MPI_Init_thread");
  disarmInitDeadline();
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

MpiSession::~MpiSession() {
  if (!finalized_) MPI_Abort(MPI_COMM_WORLD, abort_code_);
}

void MpiSession::finalize() {
  if (finalized_) return;
  finalized_ = true;
  MPI_Finalize();
}

void MpiSession::abort(int exit_code) {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; belt and braces
}

MpiComm::MpiComm() {
  check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

MpiComm::~MpiComm() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

MpiTransport::MpiTransport(double init_timeout_s)
    : session_(init_timeout_s), comm_(std::make_unique<MpiComm>()) {
  MPI_Comm_rank(comm_->get(), &rank_);
  MPI_Comm_size(comm_->get(), &size_);
}

MpiTransport::~MpiTransport() {
  // Not finished: the session destructor aborts the job. Freeing the communicator first
  // could wait for peers, so it is deliberately leaked on this path.
  if (comm_) (void)comm_.release();
}

void MpiTransport::send(int dest, int tag, const std::string& payload) {
  if (dest == rank_) return self_.send(0, tag, payload);
  sends_.push_back(PendingSend{MPI_REQUEST_NULL, payload});
  auto& s = sends_.back();
  check(MPI_Isend(s.buf.data(), static_cast<int>(s.buf.size()), MPI_BYTE, dest, tag, comm_->get(),
                  &s.req),
        "MPI_Isend");
  progressSends();
}

void MpiTransport::progressSends() {
  for (auto it = sends_.begin(); it != sends_.end();) {
    int done = 0;
    check(MPI_Test(&it->req, &done, MPI_STATUS_IGNORE), "MPI_Test(send)");
    it = done ? sends_.erase(it) : std::next(it);
  }
}

std::optional<Message> MpiTransport::tryRecv(int tag) {
  if (auto m = self_.tryRecv(tag)) return m;
  progressSends();
  int flag = 0;
  MPI_Status st;
  check(MPI_Iprobe(MPI_ANY_SOURCE, tag, comm_->get(), &flag, &st), "MPI_Iprobe");
  if (!flag) return std::nullopt;
  int count = 0;
  MPI_Get_count(&st, MPI_BYTE, &count);
  Message m{st.MPI_SOURCE, std::string(static_cast<size_t>(count), '\0')};
  // The probed message is matched by this receive: it cannot block.
  check(MPI_Recv(m.payload.data(), count, MPI_BYTE, st.MPI_SOURCE, tag, comm_->get(),
                 MPI_STATUS_IGNORE),
        "MPI_Recv");
  return m;
}

void MpiTransport::finish(double timeout_s, int exit_code) {
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  MPI_Request barrier = MPI_REQUEST_NULL;
  check(MPI_Ibarrier(comm_->get(), &barrier), "MPI_Ibarrier");
  int done = 0;
  while (true) {
    progressSends();
    check(MPI_Test(&barrier, &done, MPI_STATUS_IGNORE), "MPI_Test(barrier)");
    if (done && sends_.empty()) break;
    if (Clock::now() > deadline) {
      FTB_ERROR("timed out after " << timeout_s << " s waiting for all " << size_
                                   << " launchers to reach the final barrier"
                                   << (sends_.empty() ? "" : " (messages still unsent)")
                                   << "; aborting the MPI job");
      abortJob(exit_code);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  comm_.reset();
  session_.finalize();
}

void MpiTransport::abortJob(int exit_code) {
  runBeforeAbort();
  session_.abort(exit_code);
}

std::string MpiTransport::describe() const {
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(v, &len);
  std::string s(v, len);
  s = s.substr(0, s.find(','));
  return "MPI, " + std::to_string(size_) + " launchers (" + s + ")";
}

}  // namespace ftb::launcher
