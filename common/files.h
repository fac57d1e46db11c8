// Reading small input files (configs, sweep files, presets, run.toml) safely, and
// writing output files so that no crash leaves a partial file behind.
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

// The directory of the running executable (/proc/self/exe), "" where it cannot be read:
// programs find their sibling binaries and libraries there.
std::string ownExecutableDir();

// Creates `dir` (and its parents) and proves it writable by creating and removing a file
// in it (access(2) says yes to root on a read-only mount). Else throws ConfigError (exit 2)
// for `key` at `where`, naming the directory and the OS error, with `hint`.
void requireWritableDir(const std::string& dir, const std::string& key, const std::string& where,
                        const std::string& hint);

// ---- Durable writes. Each throws IoError (exit 4) naming the file and the OS error
// (strerror: "No space left on device", "Permission denied", ...).

// Writes `text` to `path` atomically: into <path>.tmp.<pid> beside it (same file system),
// fsynced, renamed over `path`, then the directory fsynced. Readers and crashes (SIGKILL,
// power loss) see the old file or the new one, never a part of either.
// On failure (ENOSPC, EFBIG, EACCES, a failed fsync or close, ...) the temporary file is
// removed and `path` is left as it was (old content, or absent); the message says so.
// A SIGKILL during the write can leave <path>.tmp.<pid>, never a partial `path`.
void writeFileDurably(const std::string& path, const std::string& text);
// Truncates and writes `path` in place, then fsyncs it. Only for files inside a directory
// that is itself renamed into place when complete (a checkpoint's step_N.tmp).
void writeFileAndFsync(const std::string& path, const std::string& text);
void fsyncPath(const std::string& path);                             // a file or a directory
void renameDurably(const std::string& from, const std::string& to);  // rename, fsync parent

}  // namespace ftb
