// Every tunable read from the environment, in one registry (NCCL's PARAM
// idea): common/param_table.def lists each variable once, with its type,
// default, allowed values and doc; parsing, validation, `info` and the
// docs/parameters.md table all come from it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pytfcomm {

// One field per variable, named as in param_table.def (timeout_s for
// PYTFCOMM_TIMEOUT, ...), as the last init() parsed it. The users of a
// kFirstUse variable read it with read_param() instead, once: its field only
// shows what the next first use would get.
struct Params {
#define PTC_PARAM(field, type, env, when, rule, doc) type field;
#include "common/param_table.def"
#undef PTC_PARAM
};

// read_param()'s name of each variable: ParamId::local_threads, ...
enum class ParamId : int {
#define PTC_PARAM(field, type, env, when, rule, doc) field,
#include "common/param_table.def"
#undef PTC_PARAM
};

// Parsed on first use; a malformed value of any variable in the table throws
// a kConfig error naming it, its value and what is allowed (and is parsed
// again at the next call, so a corrected environment works).
const Params& params();
// Parses the environment again (every new communicator does, so that a job
// sees the variables as they are when it starts); throws like params() and
// keeps the previous values then. References from params() stay valid.
void reload_params();

// One variable as the environment gives it now, for the kFirstUse ones that
// their users read once per process: only its own value is checked, so an
// unrelated bad variable cannot fail, say, a reduction. Throws like params().
// The member that holds it depends on its rule: integer (Int), real (Real),
// text (Choice, Path) or flag (Flag, Bool).
struct ParamValue {
  int64_t integer = 0;
  double real = 0;
  std::string text;
  bool flag = false;
};
ParamValue read_param(ParamId id);

// (name, value-as-text) of every parameter, for `python -m pytfcomm info`.
std::vector<std::pair<std::string, std::string>> describe_params();

// The table itself, for `_core.param_table()` and docs/parameters.md. value is the
// environment's now, or "" with `error` saying why it is not valid.
struct ParamInfo {
  std::string name;  // the Params field
  std::string env;
  std::string type;      // int, float, choice, path, flag or bool
  std::string fallback;  // the default, spelt as `value` would be
  std::string range;     // what is allowed
  std::string read;      // "init" (every init()) or "first use" (once per process)
  std::string doc;
  std::string value;
  std::string error;
};
std::vector<ParamInfo> param_table();

}  // namespace pytfcomm
