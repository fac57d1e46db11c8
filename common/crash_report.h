// A report of a crash on stderr, before the process dies of it.
//
// installCrashReport(program): from then on a fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE)
// first writes one line naming the program, its pid and host, the signal and the faulting
// address (or the pid that sent it), then the instruction it stopped at (on x86-64, from the
// signal's context) and, when that is no code (a call through a null pointer, which the
// unwinder cannot step out of), the return address its caller pushed, then the stack's
// return addresses (glibc's
// backtrace_symbols_fd: "binary(+offset)", which `addr2line -f -C -e BINARY OFFSET` turns into a
// function and line of the same build), and then dies of the same signal by the default action (a
// core where the limits allow one, the same exit status for the parent: 128 + the signal). The
// handler runs on an alternate stack of its own, so a stack overflow is reported too, and uses only
// async-signal-safe calls (the backtrace library is loaded at install time).
//
// REQUIRES: called once, early in main, before other threads start; a library that installs
// handlers of its own afterwards (OpenMPI's MPI_Init, unless OMPI_MCA_opal_signal leaves
// these signals out) replaces this one for the signals it takes.
#pragma once

namespace ftb {

void installCrashReport(const char* program);

}  // namespace ftb
