#include "common/crash_report.h"

#include <execinfo.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/fd.h"

namespace ftb {
namespace {

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE};
constexpr size_t kAltStackBytes = 64 * 1024;
// "<program> on HOST", formatted at install time: the handler only copies it.
char g_who[256];

void put(const char* s) { writeAll(STDERR_FILENO, s, std::strlen(s)); }

// `v` in base 10 or 16 (with a 0x prefix), into buf (at least 24 bytes).
const char* digits(uintptr_t v, unsigned base, char* buf) {
  char d[22];
  int n = 0;
  do {
    d[n++] = "0123456789abcdef"[v % base];
    v /= base;
  } while (v != 0);
  char* p = buf;
  if (base == 16) {
    *p++ = '0';
    *p++ = 'x';
  }
  while (n > 0) *p++ = d[--n];
  *p = '\0';
  return buf;
}

// The instruction that faulted, from the signal's context, and, when it is no code at all
// (a call through a null or stale function pointer: the unwinder cannot step out of it and
// the stack below shows the handler alone), the return address its caller pushed.
void putFaultingFrames(const void* context) {
#if defined(__x86_64__)
  if (context == nullptr) return;
  const mcontext_t& m = static_cast<const ucontext_t*>(context)->uc_mcontext;
  void* pc[1] = {reinterpret_cast<void*>(m.gregs[REG_RIP])};
  put("faulting instruction: ");
  backtrace_symbols_fd(pc, 1, STDERR_FILENO);
  if (reinterpret_cast<uintptr_t>(pc[0]) < 4096) {
    void* caller[1] = {*reinterpret_cast<void* const*>(m.gregs[REG_RSP])};
    put("called from (return address on the stack): ");
    backtrace_symbols_fd(caller, 1, STDERR_FILENO);
  }
#else
  (void)context;
#endif
}

void onFatalSignal(int sig, siginfo_t* info, void* context) {
  char num[24];
  put("\n");
  put(g_who);
  put(" (pid ");
  put(digits(uintptr_t(getpid()), 10, num));  // a forked child reports its own
  put("): fatal signal ");
  put(sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
  put(" (");
  put(sigdescr_np(sig) ? sigdescr_np(sig) : "?");
  if (info && info->si_code <= 0) {  // sent by kill() or tgkill(): no faulting address
    put(") sent by pid ");
    put(digits(uintptr_t(info->si_pid), 10, num));
  } else {
    put(") at address ");
    put(digits(reinterpret_cast<uintptr_t>(info ? info->si_addr : nullptr), 16, num));
  }
  put("; (addr2line -f -C -e BINARY OFFSET names each frame)\n");
  putFaultingFrames(context);
  put("stack:\n");
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  // SA_RESETHAND restored the default action: re-raise it (a fault re-executes and dies).
  raise(sig);
}

}  // namespace

void installCrashReport(const char* program) {
  char host[64] = "?";
  gethostname(host, sizeof host - 1);
  const std::string who = std::string(program) + " on " + host;
  std::strncpy(g_who, who.c_str(), sizeof g_who - 1);
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the handler
  static char* alt = static_cast<char*>(std::malloc(kAltStackBytes));
  stack_t ss{};
  ss.ss_sp = alt;
  ss.ss_size = kAltStackBytes;
  if (alt) sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = onFatalSignal;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND | (alt ? SA_ONSTACK : 0);
  sigemptyset(&sa.sa_mask);
  for (int sig : kFatalSignals) sigaction(sig, &sa, nullptr);
}

}  // namespace ftb
