// Reading small input files (configs, sweep files, presets, run.toml) safely.
//
// Contract: readInputFile() never blocks and never reads without limit. It refuses,
// with a ConfigError (exit 2) naming the file, anything that is not a regular file
// after following symlinks (directory, FIFO, socket, character device such as
// /dev/zero), a missing or unreadable file, and a file larger than `max_bytes`. The
// file is opened with O_NONBLOCK and checked again with fstat, so a path swapped for
// a FIFO between the check and the open cannot block either.
#pragma once

#include <cstddef>
#include <string>

namespace ftb {

inline constexpr size_t kMaxInputFileBytes = size_t{1} << 20;  // 1 MiB

// `what` names the file's role in messages ("config file", "sweep file").
std::string readInputFile(const std::string& path, const std::string& what,
                          size_t max_bytes = kMaxInputFileBytes);

// "" if `path` is a regular file (after symlinks), else what it is instead
// ("a FIFO", "a directory", "missing: No such file or directory", ...). Never opens it.
std::string notRegularFileReason(const std::string& path);

}  // namespace ftb
