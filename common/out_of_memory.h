// The last word of a program on an allocation that failed.
//
// Contract: exitOutOfMemory(program, e) writes "<program>: out of memory: <e.what()>: ..." to
// stderr without allocating and returns the out-of-memory exit code 5 (OomError's,
// common/error.h). Every program's main catches std::bad_alloc with it, so no failed
// allocation ends a program as an abort (terminate, exit 134).
#pragma once

#include <exception>

namespace ftb {

inline constexpr int kExitOutOfMemory = 5;  // = OomError(...).exitCode()

int exitOutOfMemory(const char* program, const std::exception& e);

}  // namespace ftb
