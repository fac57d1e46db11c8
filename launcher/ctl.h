// `launcher ctl status|save|stop RUN_DIR [--timeout S]`: control of a running trainer
// through its run directory (protocol: common/run_control.h; README.md "ctl").
//
// Contract: every wait (posting the request, rank 0 picking it up, every rank's reply)
// ends within --timeout seconds (default 60) and then says what it waited for. Exit
// codes: 0 answered; 2 bad command line or RUN_DIR not a run directory; 1 no run is
// active in RUN_DIR (run.lock not held); 3 timed out (also: control/ did not appear);
// 4 control/ is not this user's (common/own_dir.h) or the request file cannot be written:
// the message names the file and the owner or the OS error.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace ftb::launcher {

// args: the words after `ctl`.
int runCtl(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace ftb::launcher
