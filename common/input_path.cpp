#include "common/input_path.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace ftb {

PathKind inputPathKind(const std::string& path, const std::string& key,
                       const std::string& expected) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0)
    return S_ISREG(st.st_mode)   ? PathKind::kFile
           : S_ISDIR(st.st_mode) ? PathKind::kDirectory
                                 : PathKind::kOther;
  const int err = errno;
  if (err == ENOENT || err == ENOTDIR) return PathKind::kMissing;
  throw ConfigError(key, path, std::string("cannot tell what it is: ") + std::strerror(err),
                    err == ELOOP ? "expected " + expected +
                                       "; the symbolic links on its way form a loop: point "
                                       "them at the real file or directory"
                                 : "expected " + expected);
}

}  // namespace ftb
