#include "launcher/wire.h"

#include <cstring>

#include "common/error.h"

namespace ftb::launcher {
namespace {

class Writer {
 public:
  Writer& i(int64_t v) {
    char b[8];
    std::memcpy(b, &v, 8);
    buf_.append(b, 8);
    return *this;
  }
  Writer& s(const std::string& v) {
    i(static_cast<int64_t>(v.size()));
    buf_ += v;
    return *this;
  }
  Writer& ss(const std::vector<std::string>& v) {
    i(static_cast<int64_t>(v.size()));
    for (const auto& x : v) s(x);
    return *this;
  }
  std::string take() { return std::move(buf_); }

 private:
  std::string buf_;
};

class Reader {
 public:
  Reader(const std::string& b, const char* kind) : b_(b), kind_(kind) {}
  int64_t i() {
    need(8);
    int64_t v;
    std::memcpy(&v, b_.data() + pos_, 8);
    pos_ += 8;
    return v;
  }
  int n() {  // a count or small int
    int64_t v = i();
    if (v < INT32_MIN || v > INT32_MAX) fail();
    return static_cast<int>(v);
  }
  std::string s() {
    int64_t len = i();
    if (len < 0) fail();
    need(static_cast<size_t>(len));
    std::string v = b_.substr(pos_, len);
    pos_ += len;
    return v;
  }
  std::vector<std::string> ss() {
    int count = n();
    if (count < 0) fail();
    std::vector<std::string> v;
    for (int k = 0; k < count; ++k) v.push_back(s());
    return v;
  }
  void done() {
    if (pos_ != b_.size()) fail();
  }

 private:
  void need(size_t len) {
    if (pos_ + len > b_.size()) fail();
  }
  [[noreturn]] void fail() {
    throw DistError(std::string("malformed ") + kind_ + " message (" + std::to_string(b_.size()) +
                    " bytes)");
  }
  const std::string& b_;
  const char* kind_;
  size_t pos_ = 0;
};

void put(Writer& w, const NodeInfo& v) {
  w.i(v.node).s(v.host).s(v.ip).s(v.iface).i(v.chosen).i(v.cores).ss(v.gpus).i(v.nproc);
  w.i(static_cast<int64_t>(v.preset.size()));
  for (const auto& [k, x] : v.preset) w.s(k).s(x);
  w.i(static_cast<int64_t>(v.addrs.size()));
  for (const auto& a : v.addrs) w.s(a.name).s(a.ip).i(a.prefix).i(a.loopback);
  w.s(v.error);
}

NodeInfo getNodeInfo(Reader& r) {
  NodeInfo v;
  v.node = r.n();
  v.host = r.s();
  v.ip = r.s();
  v.iface = r.s();
  v.chosen = r.i() != 0;
  v.cores = r.n();
  v.gpus = r.ss();
  v.nproc = r.n();
  for (int k = r.n(); k > 0; --k) {
    std::string key = r.s();
    v.preset[key] = r.s();
  }
  for (int k = r.n(); k > 0; --k) {
    IfAddr a;
    a.name = r.s();
    a.ip = r.s();
    a.prefix = r.n();
    a.loopback = r.i() != 0;
    v.addrs.push_back(a);
  }
  v.error = r.s();
  return v;
}

void put(Writer& w, const Failure& f) {
  w.i(f.time_us).i(f.node).s(f.host).s(f.ip).i(f.rank).i(f.local_rank).i(f.pid);
  w.i(f.exit_code).i(f.signal).s(f.note).ss(f.stderr_tail);
}

Failure getFailure(Reader& r) {
  Failure f;
  f.time_us = r.i();
  f.node = r.n();
  f.host = r.s();
  f.ip = r.s();
  f.rank = r.n();
  f.local_rank = r.n();
  f.pid = r.n();
  f.exit_code = r.n();
  f.signal = r.n();
  f.note = r.s();
  f.stderr_tail = r.ss();
  return f;
}

void put(Writer& w, const std::vector<Failure>& v) {
  w.i(static_cast<int64_t>(v.size()));
  for (const auto& f : v) put(w, f);
}

std::vector<Failure> getFailures(Reader& r) {
  std::vector<Failure> v;
  for (int k = r.n(); k > 0; --k) v.push_back(getFailure(r));
  return v;
}

}  // namespace

std::string encode(const NodeInfo& v) {
  Writer w;
  put(w, v);
  return w.take();
}

NodeInfo decodeNodeInfo(const std::string& b) {
  Reader r(b, "node info");
  NodeInfo v = getNodeInfo(r);
  r.done();
  return v;
}

std::string encode(const PlanMsg& v) {
  Writer w;
  w.s(v.error).s(v.plan.master_addr).i(v.plan.master_port).s(v.plan.run_id);
  w.i(v.plan.max_restarts).s(v.plan.source).i(static_cast<int64_t>(v.plan.nodes.size()));
  for (const auto& n : v.plan.nodes) put(w, n);
  return w.take();
}

PlanMsg decodePlan(const std::string& b) {
  Reader r(b, "plan");
  PlanMsg v;
  v.error = r.s();
  v.plan.master_addr = r.s();
  v.plan.master_port = r.n();
  v.plan.run_id = r.s();
  v.plan.max_restarts = r.n();
  v.plan.source = r.s();
  for (int k = r.n(); k > 0; --k) v.plan.nodes.push_back(getNodeInfo(r));
  r.done();
  return v;
}

std::string encode(const StopMsg& v) {
  Writer w;
  w.i(v.attempt).i(v.from_node).i(v.signal).s(v.reason);
  return w.take();
}

StopMsg decodeStop(const std::string& b) {
  Reader r(b, "stop");
  StopMsg v;
  v.attempt = r.n();
  v.from_node = r.n();
  v.signal = r.n();
  v.reason = r.s();
  r.done();
  return v;
}

std::string encode(const NodeEnd& v) {
  Writer w;
  w.i(v.attempt).i(v.node).i(v.shutdown_signal).i(v.all_clean).i(v.stop_exit_code).i(
      v.stop_exit_time_us);
  put(w, v.failures);
  return w.take();
}

NodeEnd decodeNodeEnd(const std::string& b) {
  Reader r(b, "attempt end");
  NodeEnd v;
  v.attempt = r.n();
  v.node = r.n();
  v.shutdown_signal = r.n();
  v.all_clean = r.i() != 0;
  v.stop_exit_code = r.n();
  v.stop_exit_time_us = r.i();
  v.failures = getFailures(r);
  r.done();
  return v;
}

std::string encode(const Decision& v) {
  Writer w;
  w.i(v.attempt).i(v.restart).i(v.exit_code).i(v.next_port).i(v.shutdown_signal);
  put(w, v.failures);
  return w.take();
}

Decision decodeDecision(const std::string& b) {
  Reader r(b, "decision");
  Decision v;
  v.attempt = r.n();
  v.restart = r.i() != 0;
  v.exit_code = r.n();
  v.next_port = r.n();
  v.shutdown_signal = r.n();
  v.failures = getFailures(r);
  r.done();
  return v;
}

}  // namespace ftb::launcher
