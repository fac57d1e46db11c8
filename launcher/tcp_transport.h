// Transport over TCP for launchers started without MPI: torchrun's static rendezvous
// (--nnodes N --node-rank R --master-addr A --master-port P, or --rdzv-endpoint A:P).
//
// Star topology: node 0 listens on port P (all IPv4 interfaces); every other node connects
// to A:P, retrying every 200 ms, and first sends a HELLO with its node rank, the node count
// and the rendezvous id. Node 0 relays messages between the other nodes.
//
// Contract (beyond transport.h): nothing here blocks or sleeps; the constructor only binds
// (node 0) or resolves A (others). Accepting, connecting, sending and receiving progress in
// send(), tryRecv() and finish(), which the launcher calls from its own bounded waits, so a
// node that never arrives is named by the rendezvous timeout (describe() tells whether
// node 0 was reachable). Errors: a HELLO with a node rank out of range or already taken, or
// another node count or rendezvous id, throws ConfigError naming both sides (exit 2); a peer
// whose connection ends before finish() throws DistError naming it (its launcher died; the
// caller aborts the job); an ABORT from a peer throws FtbError with the peer's exit code.
#pragma once

#include <netinet/in.h>

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launcher/process.h"
#include "launcher/transport.h"

namespace ftb::launcher {

class TcpTransport : public Transport {
 public:
  // REQUIRES: 0 <= node_rank < nnodes. Throws ConfigError when node 0 cannot listen on
  // `port` or (other nodes) `master_host` does not resolve to an IPv4 address.
  TcpTransport(int node_rank, int nnodes, const std::string& master_host, int port,
               const std::string& rdzv_id);
  ~TcpTransport() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void send(int dest, int tag, const std::string& payload) override;
  std::optional<Message> tryRecv(int tag) override;
  void finish(double timeout_s, int exit_code) override;
  [[noreturn]] void abortJob(int exit_code) override;
  std::string describe() const override;

 private:
  struct Peer {
    Fd fd;
    int node = -1;  // -1 until its HELLO arrived (node 0 side)
    std::string address;
    std::string in, out;
    bool bye = false;        // sent BYE: its end is expected
    bool connected = false;  // others: connect() completed and HELLO queued
  };
  void progress();
  void acceptNew();
  void connectToMaster();
  void readFrom(Peer& p);
  void handleFrame(Peer& p, int type, int src, int dst, std::string payload);
  void writeTo(Peer& p);
  void queue(Peer& p, int type, int src, int dst, const std::string& payload);
  Peer* peerFor(int node);
  void lost(Peer& p, const std::string& why);

  int rank_;
  int size_;
  std::string master_host_;
  int port_;
  std::string rdzv_id_;
  sockaddr_in master_{};
  Fd listen_;                                 // node 0
  std::vector<std::unique_ptr<Peer>> peers_;  // node 0: every connection; others: node 0
  std::map<int, std::deque<Message>> inbox_;
  bool finishing_ = false;
  std::string connect_error_;  // last failed connect attempt (others)
  int64_t next_connect_ms_ = 0;
};

}  // namespace ftb::launcher
