#include "launcher/tcp_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/log.h"

namespace ftb::launcher {
namespace {

// Frame: 4 big-endian int32 (payload length, type, source node, destination node), payload.
// type > 0: a message tag; the others are control frames.
constexpr int kHello = -1;  // payload "nnodes rdzv_id"
constexpr int kBye = -2;    // the sender called finish()
constexpr int kAbort = -3;  // payload: exit code; every launcher exits with it
constexpr size_t kHeader = 16;
constexpr uint32_t kMaxFrame = 64u << 20;
constexpr int64_t kRetryMs = 200;

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string errnoText() { return std::strerror(errno); }

std::string addressOf(const sockaddr_in& a) {
  char b[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &a.sin_addr, b, sizeof b);
  return std::string(b) + ":" + std::to_string(ntohs(a.sin_port));
}

void putInt(std::string& s, int32_t v) {
  uint32_t n = htonl(static_cast<uint32_t>(v));
  s.append(reinterpret_cast<const char*>(&n), 4);
}

int32_t getInt(const std::string& s, size_t at) {
  uint32_t n;
  std::memcpy(&n, s.data() + at, 4);
  return static_cast<int32_t>(ntohl(n));
}

}  // namespace

TcpTransport::TcpTransport(int node_rank, int nnodes, const std::string& master_host, int port,
                           const std::string& rdzv_id)
    : rank_(node_rank), size_(nnodes), master_host_(master_host), port_(port), rdzv_id_(rdzv_id) {
  if (rank_ == 0) {
    listen_ = Fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    int one = 1;
    setsockopt(listen_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (!listen_ || bind(listen_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        listen(listen_.get(), 128) != 0)
      throw ConfigError("--master-port", "command line",
                        "node 0 cannot listen on port " + std::to_string(port) + ": " + errnoText(),
                        "pick a free port with --master-port (or --rdzv-endpoint HOST:PORT)");
    return;
  }
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(master_host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res)
    throw ConfigError(
        "--master-addr", "command line",
        "cannot resolve '" + master_host + "' to an IPv4 address: " + gai_strerror(rc),
        "give node 0's address or host name");
  master_ = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
  master_.sin_port = htons(static_cast<uint16_t>(port));
  freeaddrinfo(res);
  auto p = std::make_unique<Peer>();
  p->node = 0;
  p->address = addressOf(master_);
  peers_.push_back(std::move(p));
}

TcpTransport::~TcpTransport() = default;

std::string TcpTransport::describe() const {
  std::ostringstream o;
  o << "TCP rendezvous, node " << rank_ << " of " << size_ << ", ";
  if (rank_ == 0) {
    int joined = 0;
    for (const auto& p : peers_) joined += p->node > 0;
    o << "listening on port " << port_ << ", " << joined << " of " << size_ - 1
      << " other node(s) connected";
  } else {
    o << "node 0 at " << master_host_ << " (" << addressOf(master_) << ") "
      << (peers_[0]->connected
              ? "connected"
              : "not reached yet" +
                    (connect_error_.empty() ? std::string() : ": " + connect_error_));
  }
  return o.str();
}

TcpTransport::Peer* TcpTransport::peerFor(int node) {
  if (rank_ != 0) return peers_[0].get();  // everything goes through node 0
  for (auto& p : peers_)
    if (p->node == node) return p.get();
  return nullptr;
}

void TcpTransport::queue(Peer& p, int type, int src, int dst, const std::string& payload) {
  putInt(p.out, static_cast<int32_t>(payload.size()));
  putInt(p.out, type);
  putInt(p.out, src);
  putInt(p.out, dst);
  p.out += payload;
}

void TcpTransport::send(int dest, int tag, const std::string& payload) {
  if (dest == rank_) {
    inbox_[tag].push_back(Message{rank_, payload});
    return;
  }
  if (dest < 0 || dest >= size_)
    throw DistError("TCP transport: no node " + std::to_string(dest) + " in a job of " +
                    std::to_string(size_));
  Peer* p = peerFor(dest);
  if (!p) throw DistError("TCP transport: node " + std::to_string(dest) + " has not joined");
  queue(*p, tag, rank_, dest, payload);
  progress();
}

std::optional<Message> TcpTransport::tryRecv(int tag) {
  progress();
  auto& q = inbox_[tag];
  if (q.empty()) return std::nullopt;
  Message m = std::move(q.front());
  q.pop_front();
  return m;
}

void TcpTransport::connectToMaster() {
  Peer& p = *peers_[0];
  if (p.connected || nowMs() < next_connect_ms_) return;
  if (!p.fd) {
    p.fd = Fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (connect(p.fd.get(), reinterpret_cast<const sockaddr*>(&master_), sizeof master_) != 0 &&
        errno != EINPROGRESS) {
      connect_error_ = errnoText();
      p.fd.reset();
      next_connect_ms_ = nowMs() + kRetryMs;
      return;
    }
  }
  pollfd pf{p.fd.get(), POLLOUT, 0};
  if (poll(&pf, 1, 0) <= 0) return;  // still connecting
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt(p.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    connect_error_ = std::strerror(err);
    p.fd.reset();
    next_connect_ms_ = nowMs() + kRetryMs;
    return;
  }
  int one = 1;
  setsockopt(p.fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  p.connected = true;
  std::string queued = std::move(p.out);  // messages sent before the connection existed
  p.out.clear();
  queue(p, kHello, rank_, 0, std::to_string(size_) + " " + rdzv_id_);
  p.out += queued;
}

void TcpTransport::acceptNew() {
  while (true) {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    int fd =
        accept4(listen_.get(), reinterpret_cast<sockaddr*>(&a), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN: none pending
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto p = std::make_unique<Peer>();
    p->fd = Fd(fd);
    p->connected = true;
    p->address = addressOf(a);
    peers_.push_back(std::move(p));
  }
}

void TcpTransport::lost(Peer& p, const std::string& why) {
  std::string who = p.node >= 0 ? "node " + std::to_string(p.node) : "a connecting launcher";
  if (p.bye || (finishing_ && rank_ != 0)) {  // an orderly end
    p.fd.reset();
    return;
  }
  p.fd.reset();
  if (p.node < 0) return;  // never said HELLO: not part of the job
  throw DistError("node " + std::to_string(rank_) + ": lost the connection to " + who + " (" +
                  p.address + "): " + why + "; its launcher exited or was killed");
}

void TcpTransport::handleFrame(Peer& p, int type, int src, int dst, std::string payload) {
  if (type == kHello) {
    std::istringstream in(payload);
    int n = 0;
    std::string id;
    in >> n;
    std::getline(in >> std::ws, id);
    auto refuse = [&](const std::string& what) {
      throw ConfigError("--node-rank", "command line",
                        "launcher at " + p.address + " (node rank " + std::to_string(src) +
                            ", --nnodes " + std::to_string(n) + "): " + what,
                        "every launcher needs the same --nnodes and --rdzv-id and its own "
                        "--node-rank in 0.." +
                            std::to_string(size_ - 1));
    };
    if (n != size_) refuse("node 0 has --nnodes " + std::to_string(size_));
    if (id != rdzv_id_) refuse("rendezvous id '" + id + "', node 0 has '" + rdzv_id_ + "'");
    if (src <= 0 || src >= size_) refuse("node rank out of range");
    if (Peer* other = peerFor(src)) refuse("node rank already taken by " + other->address);
    p.node = src;
    return;
  }
  if (type == kBye) {
    p.bye = true;
    return;
  }
  if (type == kAbort) {
    int code = std::atoi(payload.c_str());
    if (rank_ == 0)  // relay before leaving
      for (auto& q : peers_)
        if (q.get() != &p && q->fd) queue(*q, kAbort, src, q->node, payload);
    if (rank_ == 0) abortJob(code);
    throw FtbError("node " + std::to_string(src) + " aborted the job (exit code " + payload + ")",
                   code);
  }
  if (p.node < 0) throw DistError("TCP transport: message from " + p.address + " before HELLO");
  if (dst == rank_) {
    inbox_[type].push_back(Message{src, std::move(payload)});
  } else if (Peer* q = peerFor(dst)) {  // node 0 relays
    queue(*q, type, src, dst, payload);
  }
}

void TcpTransport::readFrom(Peer& p) {
  char buf[65536];
  std::string ended;  // why the connection ended; handled after the frames that came before
  while (p.fd) {
    ssize_t n = recv(p.fd.get(), buf, sizeof buf, 0);
    if (n > 0) {
      p.in.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
    ended = n == 0 ? "connection closed" : errnoText();
    break;
  }
  size_t at = 0;
  while (p.in.size() - at >= kHeader) {
    uint32_t len = static_cast<uint32_t>(getInt(p.in, at));
    if (len > kMaxFrame)
      throw DistError("TCP transport: frame of " + std::to_string(len) + " bytes from " +
                      p.address + " (limit " + std::to_string(kMaxFrame) + ")");
    if (p.in.size() - at < kHeader + len) break;
    int type = getInt(p.in, at + 4), src = getInt(p.in, at + 8), dst = getInt(p.in, at + 12);
    std::string payload = p.in.substr(at + kHeader, len);
    at += kHeader + len;
    handleFrame(p, type, src, dst, std::move(payload));
  }
  p.in.erase(0, at);
  if (!ended.empty()) lost(p, ended);
}

void TcpTransport::writeTo(Peer& p) {
  while (p.fd && p.connected && !p.out.empty()) {
    ssize_t n = ::send(p.fd.get(), p.out.data(), p.out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      p.out.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    lost(p, errnoText());
  }
}

void TcpTransport::progress() {
  if (rank_ == 0) {
    acceptNew();
  } else {
    connectToMaster();
  }
  for (size_t i = 0; i < peers_.size(); ++i) {  // handleFrame may queue to any peer
    Peer& p = *peers_[i];
    if (!p.fd || !p.connected) continue;
    readFrom(p);
    writeTo(p);
  }
  for (auto& p : peers_) writeTo(*p);
}

void TcpTransport::finish(double timeout_s, int exit_code) {
  finishing_ = true;
  if (rank_ != 0) queue(*peers_[0], kBye, rank_, 0, "");
  const int64_t deadline = nowMs() + static_cast<int64_t>(timeout_s * 1000);
  while (true) {
    progress();
    bool done = true;
    std::string missing;
    if (rank_ == 0) {
      for (int n = 1; n < size_; ++n) {
        Peer* p = peerFor(n);
        bool ended = p && p->bye && p->out.empty();
        if (!ended) missing += (missing.empty() ? "" : ", ") + std::to_string(n);
        done = done && ended;
      }
    } else {
      done = !peers_[0]->fd;  // node 0 closes after every BYE
      missing = "0";
    }
    if (done) break;
    if (nowMs() > deadline) {
      FTB_ERROR("timed out after " << timeout_s << " s waiting at the final barrier for node(s) "
                                   << missing << "; aborting the job");
      abortJob(exit_code);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  peers_.clear();
  listen_.reset();
}

void TcpTransport::abortJob(int exit_code) {
  for (auto& p : peers_)
    if (p->fd && p->connected) queue(*p, kAbort, rank_, p->node, std::to_string(exit_code));
  const int64_t deadline = nowMs() + 1000;  // best effort: peers may be gone already
  bool pending = true;
  while (pending && nowMs() < deadline) {
    pending = false;
    for (auto& p : peers_) {
      if (!p->fd || !p->connected || p->out.empty()) continue;
      ssize_t n = ::send(p->fd.get(), p->out.data(), p->out.size(), MSG_NOSIGNAL);
      if (n > 0) p->out.erase(0, static_cast<size_t>(n));
      if (n < 0 && errno != EAGAIN && errno != EINTR) p->fd.reset();
      pending = pending || (p->fd && !p->out.empty());
    }
    if (pending) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::_Exit(exit_code);
}

}  // namespace ftb::launcher
