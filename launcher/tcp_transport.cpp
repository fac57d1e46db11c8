#include "launcher/tcp_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "launcher/wire.h"

namespace ftb::launcher {
namespace {

// Frame: 4 big-endian int32 (payload length, type, source node, destination node), payload.
// type > 0: a message tag (wire.h); the others are control frames.
constexpr int kHello = -1;      // nonce_c, proof, "nnodes rdzv_id" (tcp_transport.h)
constexpr int kBye = -2;        // the sender called finish()
constexpr int kAbort = -3;      // payload: exit code; every launcher exits with it
constexpr int kChallenge = -4;  // node 0's nonce
constexpr int kWelcome = -5;    // node 0's proof
constexpr size_t kHeader = 16;
constexpr int64_t kRetryMs = 200;
constexpr int kExitAbortDefault = 3;  // an ABORT whose code is not in 1..255

// Largest payload of a frame of `type`; -1 for a type that does not exist.
int64_t maxPayload(int type) {
  switch (type) {
    case kHello:
      return TcpTransport::kMaxHandshake;
    case kChallenge:
      return kNonceBytes;
    case kWelcome:
      return kMacBytes;
    case kBye:
      return 0;
    case kAbort:
      return 16;
    case kTagStop:
      return int64_t{1} << 20;
    case kTagInfo:
      return int64_t{16} << 20;
    case kTagPlan:
    case kTagEnd:
    case kTagDecision:
      return int64_t{64} << 20;
  }
  return -1;
}

// The exit code an ABORT carries, kExitAbortDefault unless it is a whole number in 1..255.
int abortCode(const std::string& payload) {
  char* end = nullptr;
  long v = std::strtol(payload.c_str(), &end, 10);
  if (payload.empty() || *end != '\0' || v < 1 || v > 255) return kExitAbortDefault;
  return static_cast<int>(v);
}

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string errnoText() { return std::strerror(errno); }

std::string ipOf(const sockaddr_in& a) {
  char b[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &a.sin_addr, b, sizeof b);
  return b;
}

std::string addressOf(const sockaddr_in& a) {
  return ipOf(a) + ":" + std::to_string(ntohs(a.sin_port));
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
                           const std::string& rdzv_id, RdzvSecret secret)
    : rank_(node_rank),
      size_(nnodes),
      master_host_(master_host),
      port_(port),
      rdzv_id_(rdzv_id),
      secret_(std::move(secret)) {
  if (rdzv_id_.size() > kMaxRdzvId)
    throw ConfigError(
        "--rdzv-id", "command line",
        std::to_string(rdzv_id_.size()) + " characters; at most " + std::to_string(kMaxRdzvId),
        "give a shorter job id");
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
    for (const auto& p : peers_) joined += p->authed && p->node > 0;
    o << "listening on port " << port_ << ", " << joined << " of " << size_ - 1
      << " other node(s) connected";
    if (dropped_ > 0) o << ", " << dropped_ << " unauthenticated connection(s) dropped";
  } else {
    const Peer& m = *peers_[0];
    o << "node 0 at " << master_host_ << " (" << addressOf(master_) << ") "
      << (m.authed      ? "connected"
          : m.connected ? "connected, authenticating"
                        : "not reached yet" +
                              (connect_error_.empty() ? std::string() : ": " + connect_error_));
    if (!m.authed && !auth_error_.empty() && auth_error_ != connect_error_)
      o << "; an earlier attempt: " << auth_error_;
  }
  return o.str();
}

TcpTransport::Peer* TcpTransport::peerFor(int node) {
  if (rank_ != 0) return peers_[0].get();  // everything goes through node 0
  for (auto& p : peers_)
    if (p->authed && p->node == node) return p.get();
  return nullptr;
}

void TcpTransport::queue(Peer& p, int type, int src, int dst, const std::string& payload) {
  const bool handshake = type == kHello || type == kChallenge || type == kWelcome;
  std::string& to = handshake || p.authed ? p.out : p.held;
  putInt(to, static_cast<int32_t>(payload.size()));
  putInt(to, type);
  putInt(to, src);
  putInt(to, dst);
  to += payload;
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
  p.since_ms = nowMs();  // node 0 speaks first: its CHALLENGE
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
    p->ip = ipOf(a);
    p->since_ms = nowMs();
    admit(std::move(p));
  }
}

void TcpTransport::admit(std::unique_ptr<Peer> p) {
  Peer *oldest = nullptr, *oldest_here = nullptr;  // peers_ is in accept order
  int pending = 0, here = 0;
  for (auto& q : peers_) {
    if (!q->fd || q->authed) continue;
    ++pending;
    if (!oldest) oldest = q.get();
    if (q->ip != p->ip) continue;
    ++here;
    if (!oldest_here) oldest_here = q.get();
  }
  const std::string limits = " (limit " + std::to_string(kMaxPendingPerAddr) + " per address, " +
                             std::to_string(kMaxPending) + " in all): the oldest is closed";
  const std::string many = "too many unauthenticated connections";
  if (here >= kMaxPendingPerAddr)
    dropStranger(*oldest_here, many + " from " + p->ip + limits);
  else if (pending >= kMaxPending)
    dropStranger(*oldest, many + limits);
  p->nonce = randomNonce();
  queue(*p, kChallenge, 0, -1, p->nonce);
  peers_.push_back(std::move(p));
}

void TcpTransport::dropStranger(Peer& p, const std::string& why) {
  ++dropped_;
  if (dropped_ <= 20 || dropped_ % 100 == 0)
    FTB_WARN("TCP rendezvous: dropped the connection from " << p.address << ": " << why << " ("
                                                            << dropped_ << " dropped so far)");
  p.fd.reset();
  p.in.clear();
  p.out.clear();
}

void TcpTransport::retryMaster(const std::string& why) {
  Peer& p = *peers_[0];
  p.fd.reset();
  p.connected = false;
  p.in.clear();
  p.out.clear();
  p.nonce.clear();
  p.nonce_c.clear();
  connect_error_ = auth_error_ = why;
  next_connect_ms_ = nowMs() + kRetryMs;
}

void TcpTransport::expireHandshakes() {
  const int64_t now = nowMs();
  for (auto& p : peers_) {
    if (!p->fd || !p->connected || p->authed || now - p->since_ms <= kAuthTimeoutMs) continue;
    const std::string after = " within " + std::to_string(kAuthTimeoutMs / 1000) + " s";
    if (rank_ == 0)
      dropStranger(*p, "no valid HELLO" + after);
    else
      retryMaster("node 0 did not complete the authentication" + after);
  }
}

void TcpTransport::lost(Peer& p, const std::string& why) {
  std::string who = "node " + std::to_string(p.node);
  if (p.bye || (finishing_ && rank_ != 0)) {  // an orderly end
    p.fd.reset();
    return;
  }
  if (!p.authed) {
    if (rank_ == 0) return dropStranger(p, why + " before authenticating");
    return retryMaster("node 0 closed the connection during authentication (" + why +
                       "): it refused this launcher's proof; is its rendezvous secret the same "
                       "as this one's (" +
                       secret_.source + ")?");
  }
  p.fd.reset();
  throw DistError("node " + std::to_string(rank_) + ": lost the connection to " + who + " (" +
                  p.address + "): " + why + "; its launcher exited or was killed");
}

std::string TcpTransport::proof(const char* label, const Peer& p, int node,
                                const std::string& rest) const {
  std::string msg = std::string("ftbench rdzv ") + label + '\0' + p.nonce + p.nonce_c +
                    std::to_string(node) + '\0' + rest;
  return hmacSha256(secret_.key, msg);
}

void TcpTransport::checkHello(Peer& p, int src, const std::string& payload) {
  if (payload.size() < kNonceBytes + kMacBytes)
    return dropStranger(p, "HELLO of " + std::to_string(payload.size()) + " bytes: too short");
  p.nonce_c = payload.substr(0, kNonceBytes);
  const std::string rest = payload.substr(kNonceBytes + kMacBytes);
  if (!constantTimeEqual(payload.substr(kNonceBytes, kMacBytes), proof("hello", p, src, rest)))
    return dropStranger(p, "its HELLO (node rank " + std::to_string(src) +
                               ") does not prove this job's rendezvous secret (" + secret_.source +
                               "): not a launcher of this job, or one with another secret");
  // A launcher of this job: welcomed before its fields are checked, so that it hears the
  // ABORT a mismatch below leads to (exit 2 on both sides).
  queue(p, kWelcome, 0, src, proof("welcome", p, src, rest));
  p.authed = true;
  std::istringstream in(rest);
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
}

void TcpTransport::checkMaster(Peer& p, int type, const std::string& payload) {
  if (type == kChallenge && p.nonce.empty() && payload.size() == kNonceBytes) {
    p.nonce = payload;
    p.nonce_c = randomNonce();
    const std::string rest = std::to_string(size_) + " " + rdzv_id_;
    queue(p, kHello, rank_, 0, p.nonce_c + proof("hello", p, rank_, rest) + rest);
    return;
  }
  if (type == kWelcome && !p.nonce.empty() &&
      constantTimeEqual(payload,
                        proof("welcome", p, rank_, std::to_string(size_) + " " + rdzv_id_))) {
    p.authed = joined_ = true;
    p.out += p.held;  // what this node sent before: node 0 is who it claims to be
    p.held.clear();
    return;
  }
  retryMaster(type == kWelcome
                  ? "node 0's WELCOME does not prove this job's rendezvous secret (" +
                        secret_.source + ")"
                  : "node 0 sent frame type " + std::to_string(type) + " during authentication");
}

void TcpTransport::handleAbort(Peer& p, int src, const std::string& payload) {
  const int code = abortCode(payload);
  const std::string what = "node " + std::to_string(src) + " (via " + p.address +
                           ") aborted the job (exit code " + std::to_string(code) + ")";
  if (rank_ == 0) {  // relay before leaving
    FTB_ERROR(what);
    for (auto& q : peers_)
      if (q.get() != &p && q->fd && q->authed)
        queue(*q, kAbort, src, q->node, std::to_string(code));
    abortJob(code);
  }
  throw FtbError(what, code);
}

void TcpTransport::handleFrame(Peer& p, int type, int src, int dst, std::string payload) {
  if (!p.authed) {
    if (rank_ == 0) return checkHello(p, src, payload);
    return checkMaster(p, type, payload);
  }
  if (rank_ == 0) src = p.node;  // a node speaks for itself only
  if (type == kBye) {
    p.bye = true;
    return;
  }
  if (type == kAbort) return handleAbort(p, src, payload);
  if (dst == rank_) {
    inbox_[type].push_back(Message{src, std::move(payload)});
  } else if (Peer* q = peerFor(dst)) {  // node 0 relays
    queue(*q, type, src, dst, payload);
  }
}

std::string TcpTransport::frameProblem(const Peer& p, int type, uint32_t len) const {
  const int64_t max = maxPayload(type);
  bool allowed = max >= 0;
  if (!p.authed)  // the handshake only
    allowed = rank_ == 0 ? type == kHello : (type == kChallenge || type == kWelcome);
  else
    allowed = allowed && type != kHello && type != kChallenge && type != kWelcome;
  if (!allowed)
    return "frame type " + std::to_string(type) + (p.authed ? "" : " before authentication") +
           " (" + std::to_string(len) + " bytes)";
  if (int64_t{len} > max)
    return "frame of " + std::to_string(len) + " bytes, type " + std::to_string(type) + " (limit " +
           std::to_string(max) + ")";
  return "";
}

void TcpTransport::refuse(Peer& p, const std::string& why) {
  if (p.authed)
    throw DistError("node " + std::to_string(rank_) + ": protocol error from node " +
                    std::to_string(p.node) + " (" + p.address + "): " + why);
  if (rank_ == 0) return dropStranger(p, why);
  retryMaster("node 0 at " + p.address + " sent a " + why);
}

void TcpTransport::takeFrames(Peer& p) {
  size_t at = 0;
  while (p.fd && p.in.size() - at >= kHeader) {
    const uint32_t len = static_cast<uint32_t>(getInt(p.in, at));
    const int type = getInt(p.in, at + 4);
    const std::string bad = frameProblem(p, type, len);
    if (!bad.empty()) return refuse(p, bad);  // clears p.in or throws
    if (p.in.size() - at < kHeader + len) break;
    int src = getInt(p.in, at + 8), dst = getInt(p.in, at + 12);
    std::string payload = p.in.substr(at + kHeader, len);
    at += kHeader + len;
    handleFrame(p, type, src, dst, std::move(payload));
  }
  if (p.fd) p.in.erase(0, at);
}

void TcpTransport::readFrom(Peer& p) {
  char buf[65536];
  std::string ended;  // why the connection ended; handled after the frames that came before
  while (p.fd) {
    size_t room = sizeof buf;
    if (!p.authed) {  // before authentication: at most one handshake frame is buffered
      const size_t cap = kHeader + kMaxHandshake;
      if (p.in.size() >= cap) break;
      room = std::min(room, cap - p.in.size());
    }
    ssize_t n = recv(p.fd.get(), buf, room, 0);
    if (n > 0) {
      p.in.append(buf, static_cast<size_t>(n));
      takeFrames(p);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
    ended = n == 0 ? "connection closed" : errnoText();
    break;
  }
  if (!ended.empty() && p.fd) lost(p, ended);
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
  expireHandshakes();
  if (rank_ == 0)  // strangers dropped: nothing of them stays
    peers_.erase(std::remove_if(peers_.begin(), peers_.end(),
                                [](const auto& p) { return !p->fd && !p->authed; }),
                 peers_.end());
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
      done = joined_ && !peers_[0]->fd;  // node 0 closes after every BYE
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
  if (exit_code < 1 || exit_code > 255) exit_code = kExitAbortDefault;  // never reads as success
  for (auto& p : peers_)
    if (p->fd && p->authed) queue(*p, kAbort, rank_, p->node, std::to_string(exit_code));
  const int64_t deadline = nowMs() + 1000;  // best effort: peers may be gone already
  bool pending = true;
  while (pending && nowMs() < deadline) {
    pending = false;
    for (auto& p : peers_) {
      if (!p->fd || !p->authed || p->out.empty()) continue;
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
