// launcher: one per node. parse -> (plan-only dry run) -> transport -> rendezvous and
// supervise -> agree on the exit code -> finish. See README.md in this directory.
#include <iostream>
#include <memory>
#include <new>

#include "common/crash_report.h"
#include "common/error.h"
#include "common/log.h"
#include "common/out_of_memory.h"
#include "launcher/ctl.h"
#include "launcher/env_probe.h"
#include "launcher/launcher.h"
#include "launcher/mpi_transport.h"
#include "launcher/plan_only.h"
#include "launcher/process.h"
#include "launcher/reaper.h"
#include "launcher/report.h"
#include "launcher/tcp_transport.h"

using namespace ftb::launcher;

namespace {

// MPI when started by mpirun/srun+PMI; TCP for torchrun-style --nnodes > 1; else one node.
std::unique_ptr<Transport> makeTransport(const LaunchOptions& opts) {
  if (opts.tcpRendezvous()) {
    if (launchedByMpi())
      throw ftb::ConfigError("--nnodes", "command line",
                             "the launchers were started by mpirun/srun with PMI, which already "
                             "connects them",
                             "drop --nnodes/--node-rank/--master-addr, or start one launcher per "
                             "node without mpirun");
    return std::make_unique<TcpTransport>(opts.node_rank, opts.nnodes, opts.rdzv_host,
                                          opts.rdzv_port, opts.rdzv_id, loadRdzvSecret());
  }
  if (launchedByMpi() && !opts.standalone)
    return std::make_unique<MpiTransport>(opts.rdzv_timeout_s);
  return std::make_unique<LocalTransport>();
}

}  // namespace

static int launcherMain(int argc, char** argv) {
  const auto start = Clock::now();
  ensureStdFds();
  ftb::installCrashReport("launcher");
  ftb::setLogPrefix("[launcher]");
  if (argc >= 2 && std::string(argv[1]) == "ctl")  // control of a running trainer: no MPI
    return runCtl(std::vector<std::string>(argv + 2, argv + argc), std::cout, std::cerr);
  if (argc >= 2 && std::string(argv[1]) == "__env-probe")  // launcher/env_probe.h: no MPI
    return runEnvProbe(std::vector<std::string>(argv + 2, argv + argc));
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Reaper> reaper;  // outlives the try: an abort below still arms it
  try {
    LaunchOptions opts = parseOptions(argc, argv);
    if (opts.help) {
      std::cout << usage();
      return 0;
    }
    if (isPlanOnly(opts)) {
      writeDryRunReport(std::cout, planWithoutMpi(opts), opts.program[0], opts.program,
                        environList(), dryRunView(opts));
      std::cout << std::flush;
      return 0;
    }
    if (!opts.tcpRendezvous()) rejectSrunWithoutPmi();
    SignalChannel signals;  // before MPI creates threads: they inherit the mask
    if (!opts.dry_run) reaper = std::make_unique<Reaper>();  // forks: before MPI threads exist
    transport = makeTransport(opts);
    transport->setBeforeAbort([&reaper] {
      // Behind a cut link the abort reaches mpirun but not every orted: mpirun and the
      // orted stay up until TCP keepalive gives up (~10 min). The reaper ends them.
      if (!reaper) return;
      const std::string armed = reaper->endMpiDaemonsAfterExit();
      if (!armed.empty())
        FTB_WARN("aborting the MPI job; " << armed << " will be ended if still up "
                                          << kEndDaemonsWaitS << " s after this launcher exits");
    });
    int code = Launcher(opts, *transport, signals, start, reaper.get()).run();
    transport->finish(30.0, code);
    FTB_DEBUG("finished " << msSince(start) << " ms after start");
    return code;
  } catch (const ftb::FtbError& e) {
    FTB_ERROR(e.what());
    if (transport) transport->abortJob(e.exitCode());
    return e.exitCode();
  } catch (const std::bad_alloc& e) {
    const int code = ftb::exitOutOfMemory("launcher", e);
    if (transport) transport->abortJob(code);
    return code;
  } catch (const std::exception& e) {
    FTB_ERROR("internal error: " << e.what());
    if (transport) transport->abortJob(1);
    return 1;
  }
}

int main(int argc, char** argv) {
  try {  // ctl and the env probe run outside launcherMain's own catches
    return launcherMain(argc, argv);
  } catch (const std::bad_alloc& e) {
    return ftb::exitOutOfMemory("launcher", e);
  }
}
