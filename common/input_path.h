// What a path given as input is, asked without opening it and without throwing a
// std::filesystem error: a symbolic-link loop on the way to a model or adapter file gave
// exit 1 and "filesystem error: status: Too many levels of symbolic links".
//
// Contract: inputPathKind(path, key, expected) follows symlinks (stat). kMissing when the
// path does not exist (ENOENT, ENOTDIR); when the OS cannot tell what it is (a symlink loop:
// ELOOP, EACCES, ENAMETOOLONG, ...) it throws ConfigError (exit 2) for `key` naming the
// path, the OS error and `expected` (what the path should be: "a PEFT adapter directory").
#pragma once

#include <string>

namespace ftb {

enum class PathKind { kMissing, kFile, kDirectory, kOther };

PathKind inputPathKind(const std::string& path, const std::string& key,
                       const std::string& expected);

}  // namespace ftb
