// SLURM hostlist and tasks-per-node expansion (see hostlist.h).
//
// Grammar accepted by expandHostlist (whitespace around top-level commas ignored):
//   list  := item (',' item)*
//   item  := (text | '[' range (',' range)* ']')+    -- text: letters, digits, '-', '.', '_'
//   range := digits | digits '-' digits               -- lo <= hi
// The expansion of one item is the cartesian product of its bracket groups, the
// leftmost group varying slowest. Each number is zero-padded to the width of the
// lower bound as written ("01-04" -> 01 02 03 04; "8-10" -> 8 9 10).
#include "common/hostlist.h"

#include <cctype>
#include <cstdint>

#include "common/error.h"

namespace ftb {
namespace {

constexpr size_t kMaxHosts = kMaxHostlistHosts;

constexpr const char* kHostlistHint =
    "expected SLURM hostlist syntax: names of letters, digits, '-', '.', '_' with bracket "
    "ranges, e.g. 'n[01-04,07],gpu-a1'";
constexpr const char* kTasksHint =
    "expected SLURM's tasks-per-node syntax: counts >= 1, a repeat as COUNT(xN), e.g. '2(x3),1'";

[[noreturn]] void fail(const std::string& what, const std::string& expr, size_t pos,
                       const std::string& problem, const char* hint = kHostlistHint) {
  throw ConfigError(what, "",
                    problem + " at position " + std::to_string(pos) + " in '" + expr + "'", hint);
}

bool isSpace(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }
bool isDigit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }
// Characters of a host name (RFC 1123 plus '_', which SLURM node names allow).
bool isHostChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '.' || c == '_';
}

// Parses a run of digits at expr[pos..]; advances pos. Fails when there is none.
int64_t parseNumber(const std::string& expr, size_t& pos, const std::string& what,
                    std::string* text, const char* hint = kHostlistHint) {
  size_t start = pos;
  while (pos < expr.size() && isDigit(expr[pos])) ++pos;
  if (pos == start) {
    if (pos < expr.size() && (expr[pos] == ']' || expr[pos] == ','))
      fail(what, expr, pos, "empty range", hint);
    fail(what, expr, pos, "expected a number", hint);
  }
  if (pos - start > 9) fail(what, expr, start, "number too large", hint);
  *text = expr.substr(start, pos - start);
  return std::stoll(*text);
}

std::string padded(int64_t n, size_t width) {
  std::string s = std::to_string(n);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// Parses "[...]" starting at expr[pos] == '['; returns the group's values in order
// and leaves pos after the closing ']'.
std::vector<std::string> parseGroup(const std::string& expr, size_t& pos, const std::string& what) {
  size_t open = pos++;
  std::vector<std::string> values;
  while (true) {
    if (pos >= expr.size()) fail(what, expr, open, "unbalanced '['");
    std::string lo_text, hi_text;
    int64_t lo = parseNumber(expr, pos, what, &lo_text);
    int64_t hi = lo;
    if (pos < expr.size() && expr[pos] == '-') {
      ++pos;
      if (pos >= expr.size()) fail(what, expr, open, "unbalanced '['");
      size_t hi_pos = pos;
      hi = parseNumber(expr, pos, what, &hi_text);
      if (hi < lo)
        fail(what, expr, hi_pos, "range end " + hi_text + " is smaller than its start " + lo_text);
    }
    if (values.size() + static_cast<size_t>(hi - lo + 1) > kMaxHosts)
      fail(what, expr, open, "range too large");
    for (int64_t n = lo; n <= hi; ++n) values.push_back(padded(n, lo_text.size()));
    if (pos >= expr.size()) fail(what, expr, open, "unbalanced '['");
    if (expr[pos] == ']') {
      ++pos;
      return values;
    }
    if (expr[pos] != ',') fail(what, expr, pos, std::string("unexpected '") + expr[pos] + "'");
    ++pos;
  }
}

// Expands the item expr[begin..end) and appends its hosts to `out`.
void expandItem(const std::string& expr, size_t begin, size_t end, const std::string& what,
                std::vector<std::string>& out) {
  std::vector<std::string> partial = {""};  // names built so far (cartesian prefix)
  size_t pos = begin;
  while (pos < end) {
    char c = expr[pos];
    if (c == '[') {
      std::vector<std::string> group = parseGroup(expr, pos, what);
      if (partial.size() * group.size() > kMaxHosts) fail(what, expr, begin, "hostlist too large");
      std::vector<std::string> next;
      next.reserve(partial.size() * group.size());
      for (const std::string& p : partial)
        for (const std::string& g : group) next.push_back(p + g);
      partial.swap(next);
    } else if (c == ']') {
      fail(what, expr, pos, "unbalanced ']'");
    } else if (isSpace(c)) {
      fail(what, expr, pos, "whitespace inside a host name");
    } else if (!isHostChar(c)) {
      fail(what, expr, pos,
           std::string("character '") + c +
               "' is not allowed in a host name (letters, digits, '-', '.', '_')");
    } else {
      for (std::string& p : partial) p += c;
      ++pos;
    }
  }
  out.insert(out.end(), partial.begin(), partial.end());
}

}  // namespace

std::vector<std::string> expandHostlist(const std::string& expr, const std::string& what) {
  std::vector<std::string> hosts;
  size_t pos = 0;
  bool any = false;
  while (true) {
    // One top-level item: up to the next comma outside brackets.
    while (pos < expr.size() && isSpace(expr[pos])) ++pos;
    size_t begin = pos;
    int depth = 0;
    while (pos < expr.size() && !(expr[pos] == ',' && depth == 0)) {
      if (expr[pos] == '[') ++depth;
      if (expr[pos] == ']') --depth;
      ++pos;
    }
    size_t end = pos;
    while (end > begin && isSpace(expr[end - 1])) --end;
    if (end == begin) {
      if (!any && pos >= expr.size()) fail(what, expr, 0, "empty hostlist");
      fail(what, expr, begin, "empty host name");
    }
    expandItem(expr, begin, end, what, hosts);
    any = true;
    if (hosts.size() > kMaxHosts) fail(what, expr, begin, "hostlist too large");
    if (pos >= expr.size()) break;
    ++pos;  // skip ','
  }
  return hosts;
}

std::vector<int> expandTasksPerNode(const std::string& expr, const std::string& what) {
  std::vector<int> tasks;
  size_t pos = 0;
  if (expr.empty()) fail(what, expr, 0, "empty value", kTasksHint);
  while (true) {
    std::string text;
    size_t count_pos = pos;
    int64_t count = parseNumber(expr, pos, what, &text, kTasksHint);
    if (count < 1) fail(what, expr, count_pos, "tasks per node must be >= 1", kTasksHint);
    int64_t repeat = 1;
    if (pos < expr.size() && expr[pos] == '(') {
      size_t open = pos++;
      if (pos >= expr.size() || expr[pos] != 'x')
        fail(what, expr, pos, "expected 'x' after '('", kTasksHint);
      ++pos;
      size_t num_pos = pos;
      if (pos >= expr.size() || !isDigit(expr[pos]))
        fail(what, expr, pos, "expected a repeat count", kTasksHint);
      repeat = parseNumber(expr, pos, what, &text, kTasksHint);
      if (repeat < 1) fail(what, expr, num_pos, "repeat count must be >= 1", kTasksHint);
      if (pos >= expr.size() || expr[pos] != ')')
        fail(what, expr, open, "unbalanced '('", kTasksHint);
      ++pos;
    }
    if (tasks.size() + static_cast<size_t>(repeat) > kMaxHosts)
      fail(what, expr, 0, "too many nodes", kTasksHint);
    tasks.insert(tasks.end(), static_cast<size_t>(repeat), static_cast<int>(count));
    if (pos >= expr.size()) break;
    if (expr[pos] != ',')
      fail(what, expr, pos, std::string("unexpected '") + expr[pos] + "'", kTasksHint);
    ++pos;
    if (pos >= expr.size()) fail(what, expr, pos, "trailing ','", kTasksHint);
  }
  return tasks;
}

}  // namespace ftb
