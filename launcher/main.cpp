// launcher: one per node. parse -> (plan-only dry run) -> transport -> rendezvous and
// supervise -> agree on the exit code -> finish. See README.md in this directory.
#include <iostream>
#include <memory>

#include "common/error.h"
#include "common/log.h"
#include "launcher/launcher.h"
#include "launcher/mpi_transport.h"
#include "launcher/plan_only.h"
#include "launcher/process.h"
#include "launcher/reaper.h"
#include "launcher/report.h"

using namespace ftb::launcher;

int main(int argc, char** argv) {
  const auto start = Clock::now();
  ensureStdFds();
  ftb::setLogPrefix("[launcher]");
  std::unique_ptr<Transport> transport;
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
    rejectSrunWithoutPmi();
    SignalChannel signals;  // before MPI creates threads: they inherit the mask
    std::unique_ptr<Reaper> reaper;
    if (!opts.dry_run) reaper = std::make_unique<Reaper>();  // forks: before MPI threads exist
    if (launchedByMpi()) {
      transport = std::make_unique<MpiTransport>();
    } else {
      transport = std::make_unique<LocalTransport>();
    }
    int code = Launcher(opts, *transport, signals, start, reaper.get()).run();
    transport->finish(30.0, code);
    FTB_DEBUG("finished " << msSince(start) << " ms after start");
    return code;
  } catch (const ftb::FtbError& e) {
    FTB_ERROR(e.what());
    if (transport) transport->abortJob(e.exitCode());
    return e.exitCode();
  } catch (const std::exception& e) {
    FTB_ERROR("internal error: " << e.what());
    if (transport) transport->abortJob(1);
    return 1;
  }
}
