// Whether a directory a run keeps its state in (the run directory, control/, checkpoints/)
// is this user's own. In a results directory others may write (a shared one, mode 1777),
// another user could create those directories first, or put a symlink there, and steer the
// run: stop it through control/, read or plant its checkpoints. The run refuses them.
#pragma once

#include <string>

namespace ftb {

// "" when `path` is a directory owned by this process's effective user and, when its last
// component is a symlink, that symlink is this user's too (one they made). Otherwise what
// it is instead, for a message after the path: "is owned by uid 1001 (bob), not by this
// user (uid 0, root)", "is a symlink owned by uid 1001 (bob)", "is not a directory",
// "is missing". Never creates or changes anything.
std::string ownDirProblem(const std::string& path);

// "uid N (name)", or "uid N" when the name is unknown.
std::string describeUid(unsigned uid);

}  // namespace ftb
