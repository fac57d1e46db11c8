// Transport over MPI point-to-point messages (OpenMPI), used when the launcher runs under
// mpirun or srun with PMI. MPI is used only between launchers; workers never see it.
#pragma once

#include <mpi.h>

#include <list>
#include <memory>

#include "launcher/transport.h"

namespace ftb::launcher {

// True when this process was started by an MPI launcher (OMPI_COMM_WORLD_SIZE, PMIX_RANK
// or PMI_SIZE in the environment). Without it the launcher runs as a single node.
bool launchedByMpi();

// Throws ConfigError when this process is one of several tasks of an srun step but has no
// PMI to find the others (srun without --mpi=pmix): each launcher would silently run alone.
void rejectSrunWithoutPmi();

// Owns MPI initialization. REQUIRES: constructed before any other thread exists in the
// process except MPI's own, after the launcher's signal mask is in place (MPI threads
// inherit it). Invariant: the destructor either finalizes (after finalize()) or aborts the
// whole MPI job, so no peer is left waiting on a launcher that is gone.
// MPI_Init waits until every launcher of the job has reached it (under srun, PMIx's fence):
// a peer that died before, or never started, would leave it waiting for ever. So it has a
// deadline of init_timeout_s (--rdzv-timeout): past it, SIGALRM ends this launcher with exit
// 3 (a DistError's) and a line naming its host and what it waited for.
class MpiSession {
 public:
  explicit MpiSession(double init_timeout_s);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  void finalize();
  [[noreturn]] void abort(int exit_code);
  void setAbortCode(int code) { abort_code_ = code; }

 private:
  bool finalized_ = false;
  int abort_code_ = 3;
};

// A private duplicate of MPI_COMM_WORLD, freed in the destructor.
class MpiComm {
 public:
  MpiComm();
  ~MpiComm();
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

class MpiTransport : public Transport {
 public:
  explicit MpiTransport(double init_timeout_s);
  ~MpiTransport() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void send(int dest, int tag, const std::string& payload) override;
  std::optional<Message> tryRecv(int tag) override;
  void finish(double timeout_s, int exit_code) override;
  [[noreturn]] void abortJob(int exit_code) override;
  std::string describe() const override;

 private:
  struct PendingSend {
    MPI_Request req = MPI_REQUEST_NULL;
    std::string buf;  // must outlive the request
  };
  void progressSends();

  MpiSession session_;
  std::unique_ptr<MpiComm> comm_;
  int rank_ = 0;
  int size_ = 1;
  std::list<PendingSend> sends_;
  LocalTransport self_;  // messages to self bypass MPI
};

}  // namespace ftb::launcher
