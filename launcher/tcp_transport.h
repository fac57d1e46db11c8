// Transport over TCP for launchers started without MPI: torchrun's static rendezvous
// (--nnodes N --node-rank R --master-addr A --master-port P, or --rdzv-endpoint A:P).
//
// Star topology: node 0 listens on port P (all IPv4 interfaces); every other node connects
// to A:P, retrying every 200 ms. Node 0 relays messages between the other nodes.
//
// Authentication (rdzv_auth.h): node 0 opens every connection with a CHALLENGE (a random
// nonce); the node answers with a HELLO carrying its own nonce, its node rank, the node count,
// the rendezvous id and HMAC(secret, both nonces and those fields); node 0 answers a valid
// HELLO with a WELCOME, its own HMAC over the same nonces. Until then node 0 reads nothing
// but that one HELLO from a connection (at most 16 + kMaxHandshake bytes), and a node
// sends nothing but its HELLO and reads nothing but CHALLENGE and WELCOME. A connection that
// sends anything else, a wrong proof, or nothing within kAuthTimeoutMs is closed with a
// warning naming its address; it never ends the job. At most kMaxPendingPerAddr
// unauthenticated connections per address and kMaxPending in all are kept (the oldest is
// closed first). A node whose HELLO node 0 refuses retries until --rdzv-timeout, which then
// names the refusal. Every frame type has a largest payload (maxPayload in the .cpp); a
// larger frame from a node of the job is a protocol error (DistError).
//
// Contract (beyond transport.h): nothing here blocks or sleeps; the constructor only binds
// (node 0) or resolves A (others). Accepting, connecting, sending and receiving progress in
// send(), tryRecv() and finish(), which the launcher calls from its own bounded waits, so a
// node that never arrives is named by the rendezvous timeout (describe() tells whether
// node 0 was reachable). Errors: an authenticated HELLO with a node rank out of range or
// already taken, or another node count or rendezvous id, throws ConfigError naming both
// sides (exit 2); an authenticated peer whose connection ends before finish() throws
// DistError naming it (its launcher died; the caller aborts the job); an ABORT from an
// authenticated peer throws FtbError with the peer's exit code, 3 when that is not in
// 1..255 (an abort never exits 0).
#pragma once

#include <netinet/in.h>

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launcher/process.h"
#include "launcher/rdzv_auth.h"
#include "launcher/transport.h"

namespace ftb::launcher {

class TcpTransport : public Transport {
 public:
  static constexpr size_t kMaxRdzvId = 1024;
  // Largest HELLO payload: nonce, proof, "nnodes rdzv_id".
  static constexpr size_t kMaxHandshake = kNonceBytes + kMacBytes + 16 + kMaxRdzvId;
  static constexpr int kMaxPendingPerAddr = 8;
  static constexpr int kMaxPending = 64;
  static constexpr int64_t kAuthTimeoutMs = 5000;

  // REQUIRES: 0 <= node_rank < nnodes; `secret` from loadRdzvSecret(). Throws ConfigError
  // when node 0 cannot listen on `port`, (other nodes) `master_host` does not resolve to an
  // IPv4 address, or `rdzv_id` is longer than kMaxRdzvId.
  TcpTransport(int node_rank, int nnodes, const std::string& master_host, int port,
               const std::string& rdzv_id, RdzvSecret secret);
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
    int node = -1;  // node 0 side: -1 until its HELLO was verified and accepted
    std::string address, ip;
    std::string in, out;
    std::string held;        // others: messages sent before node 0 was authenticated
    std::string nonce;       // node 0's challenge
    std::string nonce_c;     // the connecting node's nonce
    int64_t since_ms = 0;    // accepted / connected at
    bool authed = false;     // the peer proved the secret
    bool bye = false;        // sent BYE: its end is expected
    bool connected = false;  // others: connect() completed
  };
  void progress();
  void acceptNew();
  void admit(std::unique_ptr<Peer> p);
  void connectToMaster();
  void expireHandshakes();
  void readFrom(Peer& p);
  void takeFrames(Peer& p);
  std::string frameProblem(const Peer& p, int type, uint32_t len) const;
  void refuse(Peer& p, const std::string& why);
  void dropStranger(Peer& p, const std::string& why);
  void retryMaster(const std::string& why);
  void checkHello(Peer& p, int src, const std::string& payload);
  void checkMaster(Peer& p, int type, const std::string& payload);
  void handleFrame(Peer& p, int type, int src, int dst, std::string payload);
  void handleAbort(Peer& p, int src, const std::string& payload);
  std::string proof(const char* label, const Peer& p, int node, const std::string& rest) const;
  void writeTo(Peer& p);
  void queue(Peer& p, int type, int src, int dst, const std::string& payload);
  Peer* peerFor(int node);
  void lost(Peer& p, const std::string& why);

  int rank_;
  int size_;
  std::string master_host_;
  int port_;
  std::string rdzv_id_;
  RdzvSecret secret_;
  sockaddr_in master_{};
  Fd listen_;                                 // node 0
  std::vector<std::unique_ptr<Peer>> peers_;  // node 0: every connection; others: node 0
  std::map<int, std::deque<Message>> inbox_;
  bool finishing_ = false;
  std::string connect_error_;  // last failed connect attempt (others)
  std::string auth_error_;     // last authentication that failed (others)
  int64_t next_connect_ms_ = 0;
  bool joined_ = false;  // others: node 0 accepted this node once
  int64_t dropped_ = 0;  // node 0: connections dropped before authentication
};

}  // namespace ftb::launcher
