// Comm over real multi-process Gloo: the fallbacks (bf16 reductions travel as fp32,
// bf16 data movement as bytes, reduce-scatter = alltoall + local sum, allgather into
// views of one flat buffer) against closed-form references. The same checks run over
// the local-memory transport (parallel/local_comm.h: CommLocal.*), which a group of
// ranks on one host uses by default, and over the hierarchical composition a group
// spanning hosts uses (parallel/hier_comm.h: CommHier.*; pretend hosts of 2 or 3 ranks).
//
// The parent test posix_spawns N fresh copies of this gtest binary running only
// CommWorker.Run, with rank/world/port/mode in FTB_COMM_TEST_* variables (a fresh
// exec, so no libtorch or OpenMP thread state crosses a fork). Each worker joins a
// TCPStore + ProcessGroupGloo through initDistributed and reports through its exit
// code (gtest exits non-zero on any failed expectation). The parent kills workers
// that outlive the timeout and shows their logs on failure.
#include "trainer/comm/comm.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "trainer/parallel/dist.h"
#include "trainer/parallel/hier_comm.h"
#include "tests/unit/trainer/tensor_util.h"

extern char** environ;

namespace ftb {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kRankVar = "FTB_COMM_TEST_RANK";
constexpr const char* kWorldVar = "FTB_COMM_TEST_WORLD";
constexpr const char* kPortVar = "FTB_COMM_TEST_PORT";
constexpr const char* kModeVar = "FTB_COMM_TEST_MODE";

// ---------------------------------------------------------------- reference data

// Dyadic values with few significant bits: exact in fp32 and bf16, and so are their
// sums over <= 3 ranks, whatever order a backend adds them in.
float valueOf(int rank, int64_t i) {
  return static_cast<float>(((i * 7 + rank * 13) % 29 - 14) * 0.25 + rank);
}

torch::Tensor valuesOf(int rank, int64_t n, torch::ScalarType dt) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = valueOf(rank, i);
  return torch::tensor(v).to(dt);
}

// Element 0 of every chunk for reductions: rank 0 contributes 256, the others 1.
// In bf16 (8 significant bits) 256 + 1 rounds back to 256, so a reduction carried out
// in bf16 can lose the small terms; in fp32 the sum is exact and is then rounded once.
float spikeOf(int rank) { return rank == 0 ? 256.0f : 1.0f; }

// The exact sum of the spikes over `world` ranks, rounded once to `dt`.
float spikeSum(int world, torch::ScalarType dt) {
  return torch::tensor(256.0f + static_cast<float>(world - 1)).to(dt).item<float>();
}

// Arbitrary bf16 bit patterns (NaNs with payloads included) for pure data movement:
// only a byte-exact transport reproduces them.
torch::Tensor bitsOf(int rank, int64_t n) {
  std::vector<int16_t> bits(static_cast<size_t>(n));
  uint32_t x = 0x9e3779b9u * static_cast<uint32_t>(rank + 1);
  for (auto& b : bits) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<int16_t>(x >> 16);
  }
  bits[0] = static_cast<int16_t>(0x7fc1);  // a NaN with a payload
  return torch::tensor(bits, torch::kInt16).view(torch::kBFloat16);
}

bool sameBits(const torch::Tensor& a, const torch::Tensor& b) {
  return a.numel() == b.numel() && torch::equal(a.contiguous().view(-1).view(torch::kInt16),
                                                b.contiguous().view(-1).view(torch::kInt16));
}

// ---------------------------------------------------------------- worker bodies

DistEnv envFor(int rank, int world, int port) {
  DistEnv env;
  env.rank = rank;
  env.world_size = world;
  env.local_rank = rank;
  env.local_world_size = world;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  env.source = "test";
  return env;
}

void checkAllReduce(Comm& c, int world) {
  const int64_t n = 1001;
  for (torch::ScalarType dt : {torch::kFloat32, torch::kBFloat16}) {
    torch::Tensor t = valuesOf(c.rank(), n, dt);
    t[0] = spikeOf(c.rank());
    torch::Tensor ref = torch::zeros({n}, torch::kFloat32);
    for (int r = 0; r < world; ++r) {
      torch::Tensor v = valuesOf(r, n, dt).to(torch::kFloat32);
      v[0] = spikeOf(r);
      ref += v;
    }
    c.allReduceSum(t);
    EXPECT_EQ(t.scalar_type(), dt);
    EXPECT_TRUE(torch::equal(t, ref.to(dt)))
        << "allReduceSum " << dt << " max diff " << maxAbsDiff(t, ref.to(dt));
    // For 3 ranks 256 + 1 + 1 = 258 is a bf16 value; summing in bf16 could give 256.
    EXPECT_EQ(t[0].item<float>(), spikeSum(world, dt))
        << dt << ": small terms lost, the reduction did not run in fp32";
  }
  // Max: elementwise over ranks, also through the fp32 path for bf16.
  for (torch::ScalarType dt : {torch::kFloat32, torch::kBFloat16}) {
    torch::Tensor t = valuesOf(c.rank(), n, dt);
    torch::Tensor ref = valuesOf(0, n, dt);
    for (int r = 1; r < world; ++r) ref = torch::maximum(ref, valuesOf(r, n, dt));
    c.allReduceMax(t);
    EXPECT_TRUE(torch::equal(t, ref)) << "allReduceMax " << dt;
  }
  // A 2-D bf16 tensor is reduced in place through the same path.
  torch::Tensor m = valuesOf(c.rank(), 24, torch::kBFloat16).view({4, 6});
  torch::Tensor mref = torch::zeros({24});
  for (int r = 0; r < world; ++r) mref += valuesOf(r, 24, torch::kFloat32);
  c.allReduceSum(m);
  EXPECT_TRUE(torch::equal(m, mref.view({4, 6}).to(torch::kBFloat16)));
}

void checkAllGather(Comm& c, int world) {
  const int64_t n = 333;
  torch::Tensor in32 = valuesOf(c.rank(), n, torch::kFloat32);
  torch::Tensor out32 = torch::full({world * n}, -1.0f);
  c.allGather(out32, in32);
  for (int r = 0; r < world; ++r)
    EXPECT_TRUE(torch::equal(out32.narrow(0, r * n, n), valuesOf(r, n, torch::kFloat32)))
        << "fp32 allGather chunk " << r;
  EXPECT_TRUE(torch::equal(in32, valuesOf(c.rank(), n, torch::kFloat32))) << "input modified";

  // bf16 moves as bytes: every bit pattern, NaN payloads included, arrives unchanged.
  torch::Tensor in16 = bitsOf(c.rank(), n);
  torch::Tensor out16 = torch::zeros({world, n}, torch::kBFloat16);  // flat buffer, 2-D view
  c.allGather(out16, in16);
  EXPECT_EQ(out16.scalar_type(), torch::kBFloat16);
  for (int r = 0; r < world; ++r)
    EXPECT_TRUE(sameBits(out16[r], bitsOf(r, n))) << "bf16 allGather chunk " << r;

  // Size mismatch is refused, not silently truncated.
  torch::Tensor wrong = torch::empty({world * n + 1});
  EXPECT_ANY_THROW(c.allGather(wrong, in32));
}

void checkReduceScatter(Comm& c, int world) {
  const int64_t n = 257;
  for (torch::ScalarType dt : {torch::kFloat32, torch::kBFloat16}) {
    auto inputOf = [&](int r) {
      torch::Tensor v = valuesOf(r, world * n, dt);
      for (int k = 0; k < world; ++k) v[k * n] = spikeOf(r);  // element 0 of each chunk
      return v;
    };
    torch::Tensor in = inputOf(c.rank());
    torch::Tensor out = torch::full({n}, -7.0f, torch::TensorOptions().dtype(dt));
    c.reduceScatterSum(out, in);
    torch::Tensor ref = torch::zeros({n});
    for (int r = 0; r < world; ++r)
      ref += inputOf(r).narrow(0, c.rank() * n, n).to(torch::kFloat32);
    EXPECT_EQ(out.scalar_type(), dt);
    EXPECT_TRUE(torch::equal(out, ref.to(dt)))
        << "reduceScatterSum " << dt << " max diff " << maxAbsDiff(out, ref.to(dt));
    EXPECT_EQ(out[0].item<float>(), spikeSum(world, dt)) << dt;
    EXPECT_TRUE(torch::equal(in, inputOf(c.rank()))) << "input modified";
  }
  torch::Tensor out = torch::empty({n});
  torch::Tensor wrong = torch::empty({world * n - 1});
  EXPECT_ANY_THROW(c.reduceScatterSum(out, wrong));
}

void checkBroadcast(Comm& c, int world) {
  const int root = world - 1;
  const int64_t n = 129;
  torch::Tensor t32 = c.rank() == root ? valuesOf(root, n, torch::kFloat32) : torch::zeros({n});
  c.broadcast(t32, root);
  EXPECT_TRUE(torch::equal(t32, valuesOf(root, n, torch::kFloat32)));

  torch::Tensor t16 = c.rank() == root ? bitsOf(root, 6 * 20).view({6, 20})
                                       : torch::zeros({6, 20}, torch::kBFloat16);
  c.broadcast(t16, root);
  EXPECT_EQ(t16.sizes().vec(), (std::vector<int64_t>{6, 20}));
  EXPECT_TRUE(sameBits(t16, bitsOf(root, 6 * 20))) << "bf16 broadcast";

  torch::Tensor t0 = torch::full({5}, static_cast<float>(c.rank() + 10));
  c.broadcast(t0, 0);
  EXPECT_TRUE(torch::equal(t0, torch::full({5}, 10.0f)));
}

// Rank and size, then every collective check, then a barrier.
void checkEveryCollective(Comm& c, int rank, int world) {
  EXPECT_EQ(c.rank(), rank);
  EXPECT_EQ(c.size(), world);
  checkAllReduce(c, world);
  checkAllGather(c, world);
  checkReduceScatter(c, world);
  checkBroadcast(c, world);
  c.barrier();
}

// "off": Gloo only; "auto": the local-memory transport, which must have been chosen.
Distributed join(int rank, int world, int port, const std::string& local,
                 std::chrono::milliseconds timeout) {
  Distributed d = initDistributed(envFor(rank, world, port), timeout, "auto", local);
  const std::string how = d.transports.empty() ? "" : d.transports[0];
  if (local == "auto")
    EXPECT_EQ(how, "world: local memory (process_vm_readv)");
  else
    EXPECT_TRUE(d.transports.empty()) << how;
  return d;
}

void runCollectives(int rank, int world, int port, const std::string& local) {
  Distributed d = join(rank, world, port, local, std::chrono::seconds(30));
  ASSERT_TRUE(d.world);
  Comm& c = *d.world;
  checkEveryCollective(c, rank, world);
  std::vector<std::string> tags = d.allGatherString("tag", "rank-" + std::to_string(rank));
  ASSERT_EQ(static_cast<int>(tags.size()), world);
  for (int r = 0; r < world; ++r) EXPECT_EQ(tags[r], "rank-" + std::to_string(r));
  // Empty values, and values that are all prefix-like bytes, come back as sent.
  std::vector<std::string> odd = d.allGatherString("odd", rank == 0 ? "" : "v");
  ASSERT_EQ(static_cast<int>(odd.size()), world);
  for (int r = 0; r < world; ++r) EXPECT_EQ(odd[r], r == 0 ? "" : "v") << r;
  c.barrier();
}

// Rank 1 leaves right after a barrier (dead peer) or stays alive without joining
// (hung peer); rank 0's next all-reduce must fail with a DistError naming the
// collective within the 3 s timeout (plus slack), not hang. A hung peer can only be
// detected by the timeout, so that error must not come early either. Both ranks _Exit
// so that no Gloo destructor can block on the broken pair.
void runBrokenPeer(int rank, int world, int port, bool hang, const std::string& local) {
  const auto timeout = std::chrono::seconds(3);
  Distributed d = join(rank, world, port, local, timeout);
  d.world->barrier();
  if (rank != 0) {
    if (hang) std::this_thread::sleep_for(std::chrono::seconds(6));
    std::fflush(nullptr);
    std::_Exit(0);
  }
  torch::Tensor t = torch::ones({1024});
  auto t0 = Clock::now();
  bool threw = false;
  try {
    for (int i = 0; i < 50; ++i) d.world->allReduceSum(t);  // the first one should fail
  } catch (const DistError& e) {
    threw = true;
    std::string msg = e.what();
    std::printf("DistError: %s\n", msg.c_str());
    EXPECT_NE(msg.find("allreduce"), std::string::npos) << msg;
    EXPECT_NE(msg.find("timeout 3 s"), std::string::npos) << msg;
    // The peer it waited for, with its host (Gloo) or pid (local memory).
    EXPECT_NE(msg.find("rank 1 ("), std::string::npos) << msg;
    EXPECT_EQ(e.exitCode(), 3);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected DistError, got: " << e.what();
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_TRUE(threw) << "all-reduce with a dead peer did not throw";
  EXPECT_LT(secs, 3.0 + 2.0) << "DistError came after the timeout";
  if (hang) {
    EXPECT_GT(secs, 2.5) << "a live peer was declared failed before the timeout";
  }
  bool failed = ::testing::Test::HasFailure();
  std::fflush(nullptr);
  std::_Exit(failed ? 1 : 0);
}

// Ranks that issue different collectives (sizes differ) get a DistError naming the
// other rank's collective, at once, on both ranks: not a hang, not a wrong sum.
void runMismatch(int rank, int world, int port) {
  Distributed d = join(rank, world, port, "auto", std::chrono::seconds(20));
  torch::Tensor t = torch::ones({rank == 0 ? 100 : 200});
  auto t0 = Clock::now();
  try {
    d.world->allReduceSum(t);
    ADD_FAILURE() << "mismatched all-reduce did not throw";
  } catch (const DistError& e) {
    std::printf("DistError: %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("issue different collectives"), std::string::npos);
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
  bool failed = ::testing::Test::HasFailure();
  std::fflush(nullptr);
  std::_Exit(failed ? 1 : 0);
}

// An all-reduce large enough that the hierarchical Comm splits it (reduce-scatter
// within the host, all-reduce across hosts, all-gather), with a tail that does not
// divide by the host size, in fp32, bf16, asynchronously and a non-contiguous fp32 view.
void checkLargeAllReduce(Comm& c, int world) {
  const int64_t n = 3 * 65536 + 7;
  for (torch::ScalarType dt : {torch::kFloat32, torch::kBFloat16}) {
    torch::Tensor t = valuesOf(c.rank(), n, dt);
    t[n - 1] = spikeOf(c.rank());
    torch::Tensor ref = torch::zeros({n});
    for (int r = 0; r < world; ++r) {
      torch::Tensor v = valuesOf(r, n, dt).to(torch::kFloat32);
      v[n - 1] = spikeOf(r);
      ref += v;
    }
    c.allReduceSum(t);
    EXPECT_TRUE(torch::equal(t, ref.to(dt)))
        << "large allReduceSum " << dt << " max diff " << maxAbsDiff(t, ref.to(dt));
    EXPECT_EQ(t[n - 1].item<float>(), spikeSum(world, dt)) << dt << ": not reduced in fp32";
  }
  // Two asynchronous all-reduces in flight at once (DDP's buckets), waited in order.
  torch::Tensor a = valuesOf(c.rank(), n, torch::kFloat32),
                b = valuesOf(c.rank() + 1, n - 5, torch::kFloat32);
  torch::Tensor aref = torch::zeros({n}), bref = torch::zeros({n - 5});
  for (int r = 0; r < world; ++r) {
    aref += valuesOf(r, n, torch::kFloat32);
    bref += valuesOf(r + 1, n - 5, torch::kFloat32);
  }
  std::unique_ptr<PendingWork> wa = c.allReduceSumAsync(a);
  std::unique_ptr<PendingWork> wb = c.allReduceSumAsync(b);
  wa->wait();
  wb->wait();
  EXPECT_TRUE(torch::equal(a, aref)) << "first async allReduceSum";
  EXPECT_TRUE(torch::equal(b, bref)) << "second async allReduceSum";
  torch::Tensor m = valuesOf(c.rank(), 512 * 384, torch::kFloat32).view({512, 384}).t();
  torch::Tensor mref = torch::zeros({512 * 384});
  for (int r = 0; r < world; ++r) mref += valuesOf(r, 512 * 384, torch::kFloat32);
  c.allReduceSum(m);
  EXPECT_TRUE(torch::equal(m, mref.view({512, 384}).t())) << "non-contiguous allReduceSum";
}

// `world` ranks as world / per_host pretend hosts (host-major): each host's group runs
// in local memory, the groups of one rank per host on Gloo, composed by
// makeHierarchicalComm as newGroup() does for a group spanning real hosts.
void runHierarchical(int rank, int world, int port, int per_host) {
  Distributed d =
      initDistributed(envFor(rank, world, port), std::chrono::seconds(30), "auto", "off");
  const int host = rank / per_host, local = rank % per_host;
  std::vector<int> host_ranks, peer_ranks;
  for (int r = 0; r < world; ++r) {
    if (r / per_host == host) host_ranks.push_back(r);
    if (r % per_host == local) peer_ranks.push_back(r);
  }
  d.local_collectives = "auto";
  std::unique_ptr<Comm> intra = d.newGroup("host" + std::to_string(host), host_ranks);
  d.local_collectives = "off";
  std::unique_ptr<Comm> cross = d.newGroup("peers" + std::to_string(local), peer_ranks);
  ASSERT_EQ(d.transports, std::vector<std::string>{"host" + std::to_string(host) +
                                                   ": local memory (process_vm_readv)"});
  std::unique_ptr<Comm> hier =
      makeHierarchicalComm(std::move(d.world), std::move(intra), std::move(cross));
  checkEveryCollective(*hier, rank, world);
  checkLargeAllReduce(*hier, world);
  hier->barrier();
}

// A pipeline link (comm/p2p.h) between ranks 0 and 1: over local memory
// (parallel/local_link.h) when `local` is "auto", else over Gloo. Checks the transport
// recorded in Distributed::transports.
std::unique_ptr<P2PLink> joinLink(Distributed& d, int rank, const std::string& local) {
  d.pp_local_p2p = local == "auto";
  const int peer = 1 - rank;
  std::unique_ptr<P2PLink> link = d.newLink("p2p", {peer, peer, "h" + std::to_string(peer)});
  const std::string want = local == "auto"
                               ? "p2p: local memory"
                               : "p2p: backend point-to-point (parallel.pp_local_p2p = false)";
  EXPECT_EQ(d.transports, std::vector<std::string>{want});
  EXPECT_EQ(link->transport(), local == "auto" ? "local memory" : "backend point-to-point");
  return link;
}

// Messages match by tag, not by posting order (rank 1 posts its receives in reverse),
// bytes are exact in any dtype (fp32, bf16 bit patterns with NaN payloads, fp64, int64),
// both directions at once, and a message's send is posted before its receive (tag 4) and
// after it (the others).
void checkP2PExchange(P2PLink& link, int rank) {
  const torch::Tensor a = valuesOf(0, 1001, torch::kFloat32).view({7, 11, 13});
  const torch::Tensor b = bitsOf(1, 777);
  const torch::Tensor c = valuesOf(2, 300, torch::kFloat64).view({3, 100});
  const torch::Tensor e = torch::arange(-50, 50, torch::kInt64) * 1234567890123LL;
  if (rank == 0) {
    auto sa = link.sendAsync(a, 0, "a");
    auto sb = link.sendAsync(b, 1, "b");
    auto sc = link.sendAsync(c.t().contiguous().t(), 2, "c");  // a non-contiguous view
    auto se = link.sendAsync(e, 4, "e");
    torch::Tensor back = torch::empty({7, 11, 13});
    auto r = link.recvAsync(back, 3, "a back");
    sa->wait();
    sb->wait();
    sc->wait();
    se->wait();
    r->wait();
    EXPECT_TRUE(torch::equal(back, a * 2));
    EXPECT_EQ(link.bytesSent(), 1001 * 4 + 777 * 2 + 300 * 8 + 100 * 8);
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // rank 0's sends go first
    torch::Tensor ra = torch::empty({7, 11, 13}), rb = torch::empty({777}, torch::kBFloat16);
    torch::Tensor rc = torch::empty({3, 100}, torch::kFloat64),
                  re = torch::empty({100}, torch::kInt64);
    auto wc = link.recvAsync(rc, 2, "c");
    auto wb = link.recvAsync(rb, 1, "b");
    auto wa = link.recvAsync(ra, 0, "a");
    wa->wait();
    wb->wait();
    wc->wait();
    EXPECT_TRUE(torch::equal(ra, a));
    EXPECT_TRUE(sameBits(rb, b));
    EXPECT_TRUE(torch::equal(rc, c));
    auto sback = link.sendAsync(ra * 2, 3, "a back");  // before the receive of tag 4
    auto we = link.recvAsync(re, 4, "e");
    we->wait();
    EXPECT_TRUE(torch::equal(re, e));
    sback->wait();
  }
}

// rank 0 receives activations of micro-batch 0; rank 1 is silent (`fault` "hung": alive,
// never posts), posts another size ("size"), or exits ("dead"). Rank 0 must get a
// DistError naming the peer's stage, rank and host: within the 2 s timeout (and not
// before it) for a silent peer, at once for a dead one; naming both sizes for a mismatch,
// on both ranks.
void checkP2PFault(Distributed& d, P2PLink& link, int rank, const std::string& fault) {
  torch::Tensor in = torch::empty({7, 11, 13});
  const auto t0 = Clock::now();
  if (rank == 1) {
    if (fault == "dead") {
      std::fflush(nullptr);
      std::_Exit(0);
    }
    if (fault == "hung") std::this_thread::sleep_for(std::chrono::seconds(3));
    if (fault != "size") return;
    try {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the receive goes first
      link.sendAsync(torch::zeros({7, 11}), 0, "activations of micro-batch 0")->wait();
      ADD_FAILURE() << "a send of another size returned";
    } catch (const DistError& e) {
      std::printf("DistError: %s\n", e.what());
      EXPECT_NE(std::string(e.what()).find("308 bytes"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("4004 bytes"), std::string::npos) << e.what();
    }
    return;
  }
  try {
    link.recvAsync(in, 0, "activations of micro-batch 0")->wait();
    ADD_FAILURE() << "receive from a " << fault << " peer returned";
  } catch (const DistError& e) {
    std::printf("DistError: %s\n", e.what());
    const std::string w = e.what();
    EXPECT_NE(w.find("receive activations of micro-batch 0 from stage 1 (rank 1, host h1)"),
              std::string::npos)
        << w;
    if (fault == "size") {
      EXPECT_NE(w.find("4004 bytes"), std::string::npos) << w;  // this rank's
      EXPECT_NE(w.find("308 bytes"), std::string::npos) << w;   // the peer's
    }
    if (fault == "hung") {
      EXPECT_NE(w.find("2 s"), std::string::npos) << w;
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(secs, fault == "hung" ? 10.0 : 1.5) << fault;
  if (fault == "hung") {
    EXPECT_GT(secs, 1.9) << "a live peer was declared failed early";
  }
  (void)d;
}

void runP2P(int rank, int world, int port, const std::string& fault, const std::string& local) {
  Distributed d =
      initDistributed(envFor(rank, world, port), std::chrono::seconds(30), "auto", "off");
  if (fault == "hung") d.timeout = std::chrono::seconds(2);
  std::unique_ptr<P2PLink> link = joinLink(d, rank, local);
  if (fault.empty()) {
    checkP2PExchange(*link, rank);
  } else {
    checkP2PFault(d, *link, rank, fault);
    if (fault == "dead" || local == "auto") {  // no Gloo destructor may block on the pair
      const bool failed = ::testing::Test::HasFailure();
      std::fflush(nullptr);
      std::_Exit(failed ? 1 : 0);
    }
  }
  d.timeout = std::chrono::seconds(30);
  d.world->barrier();
}

TEST(CommWorker, Run) {
  const char* rank_s = std::getenv(kRankVar);
  if (rank_s == nullptr) GTEST_SKIP() << "worker body, started by the CommGloo tests";
  int rank = std::atoi(rank_s);
  int world = std::atoi(std::getenv(kWorldVar));
  int port = std::atoi(std::getenv(kPortVar));
  std::string mode = std::getenv(kModeVar);
  std::string local = "off";  // a "_local" suffix: the local-memory transport
  if (mode.size() > 6 && mode.compare(mode.size() - 6, 6, "_local") == 0) {
    local = "auto";
    mode.resize(mode.size() - 6);
  }
  if (mode == "collectives") {
    runCollectives(rank, world, port, local);
  } else if (mode.rfind("hier", 0) == 0) {  // "hier<ranks per host>"
    runHierarchical(rank, world, port, std::stoi(mode.substr(4)));
  } else if (mode == "mismatch") {
    runMismatch(rank, world, port);
  } else if (mode.rfind("p2p", 0) == 0) {  // "p2p", "p2p_hung", "p2p_size", "p2p_dead"
    runP2P(rank, world, port, mode.size() > 4 ? mode.substr(4) : "", local);
  } else if (mode == "dead_peer" || mode == "hung_peer") {
    runBrokenPeer(rank, world, port, mode == "hung_peer", local);
  } else {
    FAIL() << "unknown mode " << mode;
  }
}

// ---------------------------------------------------------------- parent side

int freePort() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  int port = -1;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(s);
  return port;
}

struct WorkerResult {
  int status = -1;  // raw waitpid status; -1 when killed on timeout
  std::string log;  // stdout + stderr
};

std::string readFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Spawns `world` workers of this binary and waits at most `timeout` for all of them.
std::vector<WorkerResult> spawnWorkers(int world, const std::string& mode,
                                       std::chrono::seconds timeout) {
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  char tmpl[] = "/tmp/ftb_comm_test_XXXXXX";
  fs::path dir = ::mkdtemp(tmpl);
  int port = freePort();
  std::vector<pid_t> pids;
  std::vector<fs::path> logs;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string kv = *e;
      if (kv.rfind("FTB_COMM_TEST_", 0) == 0 || kv.rfind("GTEST_", 0) == 0) continue;
      env.push_back(kv);
    }
    env.push_back(std::string(kRankVar) + "=" + std::to_string(r));
    env.push_back(std::string(kWorldVar) + "=" + std::to_string(world));
    env.push_back(std::string(kPortVar) + "=" + std::to_string(port));
    env.push_back(std::string(kModeVar) + "=" + mode);
    env.push_back("OMP_NUM_THREADS=1");
    std::vector<char*> envp;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = {exe, "--gtest_filter=CommWorker.Run"};
    std::vector<char*> argv;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);

    logs.push_back(dir / ("rank" + std::to_string(r) + ".log"));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, logs.back().c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    EXPECT_EQ(rc, 0) << "posix_spawn: " << std::strerror(rc);
    if (rc == 0) pids.push_back(pid);
  }
  std::vector<WorkerResult> results(pids.size());
  std::vector<bool> done(pids.size(), false);
  auto deadline = Clock::now() + timeout;
  size_t remaining = pids.size();
  while (remaining > 0 && Clock::now() < deadline) {
    for (size_t i = 0; i < pids.size(); ++i) {
      int st = 0;
      if (!done[i] && ::waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        done[i] = true;
        results[i].status = st;
        --remaining;
      }
    }
    if (remaining > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (done[i]) continue;
    ::kill(pids[i], SIGKILL);
    ::waitpid(pids[i], nullptr, 0);
    results[i].status = -1;
  }
  for (size_t i = 0; i < pids.size(); ++i) results[i].log = readFile(logs[i]);
  std::error_code ec;
  fs::remove_all(dir, ec);
  return results;
}

// As spawnWorkers, retried (at most twice more) when the port picked by freePort() was
// taken by someone else before rank 0's TCPStore could bind it (c10d says "address already in
// use" and EADDRINUSE; the C library's strerror "Address already in use").
std::vector<WorkerResult> runWorkers(int world, const std::string& mode,
                                     std::chrono::seconds timeout) {
  std::vector<WorkerResult> results;
  for (int attempt = 0; attempt < 3; ++attempt) {
    results = spawnWorkers(world, mode, timeout);
    bool port_taken = false;
    for (const auto& w : results)
      port_taken = port_taken || w.log.find("EADDRINUSE") != std::string::npos ||
                   w.log.find("ddress already in use") != std::string::npos;
    if (!port_taken) break;
  }
  return results;
}

std::string describe(const WorkerResult& w) {
  if (w.status == -1) return "killed after the timeout";
  if (WIFEXITED(w.status)) return "exit " + std::to_string(WEXITSTATUS(w.status));
  if (WIFSIGNALED(w.status)) return "signal " + std::to_string(WTERMSIG(w.status));
  return "status " + std::to_string(w.status);
}

void expectAllPassed(const std::vector<WorkerResult>& results, int world) {
  ASSERT_EQ(static_cast<int>(results.size()), world);
  for (size_t r = 0; r < results.size(); ++r) {
    const WorkerResult& w = results[r];
    bool ok = w.status != -1 && WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0;
    EXPECT_TRUE(ok) << "rank " << r << ": " << describe(w) << "\n----- log -----\n" << w.log;
    // The worker must really have run (not been filtered out or skipped).
    EXPECT_EQ(w.log.find("[  SKIPPED ]"), std::string::npos) << w.log;
  }
}

// `world` workers run every collective check in `mode` and all pass.
void expectCollectivesPass(int world, const std::string& mode) {
  auto results = runWorkers(world, mode, std::chrono::seconds(60));
  expectAllPassed(results, world);
  for (const auto& w : results) EXPECT_NE(w.log.find("[  PASSED  ] 1 test"), std::string::npos);
}

TEST(CommGloo, CollectivesTwoRanks) { expectCollectivesPass(2, "collectives"); }
TEST(CommGloo, CollectivesThreeRanks) { expectCollectivesPass(3, "collectives"); }

TEST(CommGloo, DeadPeerThrowsDistErrorWithinTimeout) {
  auto t0 = Clock::now();
  auto results = runWorkers(2, "dead_peer", std::chrono::seconds(30));
  expectAllPassed(results, 2);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_NE(results[0].log.find("DistError:"), std::string::npos) << results[0].log;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 25.0);
}

TEST(CommGloo, HungPeerThrowsDistErrorAfterTimeout) {
  auto results = runWorkers(2, "hung_peer", std::chrono::seconds(30));
  expectAllPassed(results, 2);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_NE(results[0].log.find("DistError:"), std::string::npos) << results[0].log;
}

// Whom a failed collective waited for: the peer the backend names, the other member of a
// pair, the members on other hosts (a cut link), else every other member.
TEST(CommMembers, AwaitedMembersNameThePeerAndItsHost) {
  std::vector<CommMember> m = {
      {0, "a", "10.0.0.1"}, {1, "a", "10.0.0.1"}, {2, "b", "10.0.0.2"}, {3, "b", "10.0.0.2"}};
  EXPECT_EQ(awaitedMembers({m[0], m[2]}, 0, "Operation timed out!"), "rank 2 (host b, 10.0.0.2)");
  EXPECT_EQ(awaitedMembers(m, 0, "Operation timed out!"),
            "rank 2 (host b, 10.0.0.2) or rank 3 (host b, 10.0.0.2) on other hosts");
  EXPECT_EQ(awaitedMembers(m, 2, "Connection closed by peer [10.0.0.1]:4040"),
            "rank 0 (host a, 10.0.0.1) or rank 1 (host a, 10.0.0.1), whose address the backend "
            "names");
  EXPECT_EQ(awaitedMembers(m, 2, "peer 110.0.0.1:4040"),  // not 10.0.0.1
            "rank 0 (host a, 10.0.0.1) or rank 1 (host a, 10.0.0.1) on other hosts");
  EXPECT_EQ(awaitedMembers({m[0], m[1], {5, "a", "10.0.0.1"}, {6, "a", "10.0.0.1"}}, 1, "x"),
            "one or more of rank 0 (host a, 10.0.0.1), rank 5 (host a, 10.0.0.1), rank 6 (host a, "
            "10.0.0.1)");
  EXPECT_EQ(awaitedMembers({}, 0, "x"), "");
}

TEST(CommP2P, TaggedSendsAndReceivesInBothDirections) { expectCollectivesPass(2, "p2p"); }

TEST(CommP2P, SilentPeerThrowsDistErrorNamingItsStageRankAndHost) {
  auto results = runWorkers(2, "p2p_hung", std::chrono::seconds(30));
  expectAllPassed(results, 2);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_NE(results[0].log.find("DistError:"), std::string::npos) << results[0].log;
}

// The same link contract through local memory (parallel/local_link.h), and its own
// failures: another size on the two ends, a peer process that is gone.
TEST(CommP2PLocal, TaggedSendsAndReceivesInBothDirections) {
  expectCollectivesPass(2, "p2p_local");
}

TEST(CommP2PLocal, SilentPeerTimesOutNamingItsStageRankAndHost) {
  auto results = runWorkers(2, "p2p_hung_local", std::chrono::seconds(30));
  expectAllPassed(results, 2);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_NE(results[0].log.find("did not post the matching message"), std::string::npos)
      << results[0].log;
}

TEST(CommP2PLocal, SizesThatDifferFailOnBothEndsNamingBoth) {
  auto results = runWorkers(2, "p2p_size_local", std::chrono::seconds(30));
  expectAllPassed(results, 2);
  for (const auto& w : results) EXPECT_NE(w.log.find("sizes differ"), std::string::npos) << w.log;
}

TEST(CommP2PLocal, DeadPeerIsReportedBeforeTheTimeout) {
  auto results = runWorkers(2, "p2p_dead_local", std::chrono::seconds(30));
  expectAllPassed(results, 2);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_NE(results[0].log.find("exited"), std::string::npos) << results[0].log;
}

// The same collectives and failure bounds over the local-memory transport. The hung
// peer must time out (a live process is never declared failed early); a dead one is
// noticed once its process is gone.
TEST(CommLocal, CollectivesTwoRanks) { expectCollectivesPass(2, "collectives_local"); }
TEST(CommLocal, CollectivesThreeRanks) { expectCollectivesPass(3, "collectives_local"); }

TEST(CommLocal, DeadPeerThrowsDistErrorWithinTimeout) {
  auto results = runWorkers(2, "dead_peer_local", std::chrono::seconds(30));
  expectAllPassed(results, 2);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_NE(results[0].log.find("DistError:"), std::string::npos) << results[0].log;
  EXPECT_NE(results[0].log.find("rank 1 (pid"), std::string::npos) << results[0].log;
}

TEST(CommLocal, HungPeerThrowsDistErrorAfterTimeout) {
  auto results = runWorkers(2, "hung_peer_local", std::chrono::seconds(30));
  expectAllPassed(results, 2);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_NE(results[0].log.find("timed out waiting for rank 1"), std::string::npos)
      << results[0].log;
}

TEST(CommLocal, MismatchedCollectivesFailOnEveryRank) {
  auto results = runWorkers(2, "mismatch_local", std::chrono::seconds(30));
  expectAllPassed(results, 2);
  for (const auto& w : results) EXPECT_NE(w.log.find("DistError:"), std::string::npos) << w.log;
}

// Two levels (parallel/hier_comm.h): hosts of 2 and 3 ranks, and 2 and 3 hosts, so a
// confusion of host-major and local-major chunk order cannot cancel out.
TEST(CommHier, TwoHostsOfTwoRanks) { expectCollectivesPass(4, "hier2"); }
TEST(CommHier, ThreeHostsOfTwoRanks) { expectCollectivesPass(6, "hier2"); }
TEST(CommHier, TwoHostsOfThreeRanks) { expectCollectivesPass(6, "hier3"); }

// Which groups run in two levels: host-major, the same number of ranks on each host,
// at least two hosts and two ranks per host; otherwise the reason.
TEST(CommHier, PlanHosts) {
  HostPlan p = planHosts({"a", "a", "b", "b"}, 3);
  EXPECT_EQ(p.why_not, "");
  EXPECT_EQ(p.hosts, 2);
  EXPECT_EQ(p.per_host, 2);
  EXPECT_EQ(p.host, 1);
  EXPECT_EQ(p.local, 1);
  p = planHosts({"x", "x", "x", "y", "y", "y"}, 4);
  EXPECT_EQ(p.why_not, "");
  EXPECT_EQ(p.per_host, 3);
  EXPECT_EQ(p.host, 1);
  EXPECT_EQ(p.local, 1);
  EXPECT_EQ(planHosts({"a", "a"}, 0).why_not, "one host");
  EXPECT_EQ(planHosts({"a", "b"}, 1).why_not, "one rank per host");
  EXPECT_EQ(planHosts({"a", "a", "b"}, 2).why_not, "hosts hold different numbers of its ranks");
  EXPECT_EQ(planHosts({"a", "b", "a", "b"}, 0).why_not,
            "its ranks are not host-major (rank order interleaves hosts)");
}

// A composite Comm times its collective and calls Comms that time theirs: the nested
// span must count once in collectiveSeconds(), not twice.
TEST(CollectiveTimer, NestedTimersCountTheOuterSpanOnce) {
  const double before = collectiveSeconds();
  const auto t0 = Clock::now();
  {
    CollectiveTimer outer;
    {
      CollectiveTimer inner;
      std::this_thread::sleep_for(std::chrono::milliseconds(60));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double span = std::chrono::duration<double>(Clock::now() - t0).count();
  const double counted = collectiveSeconds() - before;
  EXPECT_GE(counted, 0.079);
  EXPECT_LE(counted, span) << "the inner span was counted again";
}

// World size 1: every collective is the identity and nothing is communicated.
TEST(CommSelf, Identity) {
  std::unique_ptr<Comm> c = makeSelfComm();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  for (torch::ScalarType dt : {torch::kFloat32, torch::kBFloat16}) {
    torch::Tensor t = valuesOf(0, 17, dt);
    c->allReduceSum(t);
    EXPECT_TRUE(torch::equal(t, valuesOf(0, 17, dt)));
    torch::Tensor out = torch::zeros({17}, torch::TensorOptions().dtype(dt));
    c->allGather(out, valuesOf(1, 17, dt));
    EXPECT_TRUE(torch::equal(out, valuesOf(1, 17, dt)));
    torch::Tensor rs = torch::zeros({17}, torch::TensorOptions().dtype(dt));
    c->reduceScatterSum(rs, valuesOf(2, 17, dt));
    EXPECT_TRUE(torch::equal(rs, valuesOf(2, 17, dt)));
    c->broadcast(t, 0);
    EXPECT_TRUE(torch::equal(t, valuesOf(0, 17, dt)));
  }
  // Multi-dimensional inputs land flat in the buffer.
  torch::Tensor in2 = valuesOf(0, 12, torch::kFloat32).view({3, 4});
  torch::Tensor out2 = torch::zeros({12});
  c->allGather(out2, in2);
  EXPECT_TRUE(torch::equal(out2, in2.view(-1)));
  c->barrier();
}

// initDistributed with world size 1 creates no store and returns a self Comm.
TEST(CommSelf, InitDistributedWorldOne) {
  DistEnv env = envFor(0, 1, 1);  // port 1: would fail if anything tried to listen
  Distributed d = initDistributed(env, std::chrono::seconds(1));
  EXPECT_FALSE(d.store);
  ASSERT_TRUE(d.world);
  EXPECT_EQ(d.world->size(), 1);
  EXPECT_EQ(d.allGatherString("k", "v"), std::vector<std::string>{"v"});
}

}  // namespace
}  // namespace ftb
