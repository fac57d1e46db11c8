#include "common/own_dir.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace ftb {

std::string describeUid(unsigned uid) {
  std::string s = "uid " + std::to_string(uid);
  passwd pw{}, *found = nullptr;
  std::vector<char> buf(16384);
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found)
    s += std::string(" (") + found->pw_name + ")";
  return s;
}

std::string ownDirProblem(const std::string& path) {
  const unsigned me = ::geteuid();
  const std::string not_me = ", not by this user (" + describeUid(me) + ")";
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0)
    return errno == ENOENT ? "is missing"
                           : std::string("cannot be examined: ") + std::strerror(errno);
  if (S_ISLNK(st.st_mode)) {
    if (st.st_uid != me) return "is a symlink owned by " + describeUid(st.st_uid) + not_me;
    if (::stat(path.c_str(), &st) != 0)
      return std::string("is a symlink to nothing usable: ") + std::strerror(errno);
  }
  if (!S_ISDIR(st.st_mode)) return "is not a directory";
  if (st.st_uid != me) return "is owned by " + describeUid(st.st_uid) + not_me;
  return "";
}

}  // namespace ftb
