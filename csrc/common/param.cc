#include "common/param.h"

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/error.h"

namespace pytfcomm {
namespace {

enum class Kind : uint8_t { kInt, kReal, kChoice, kPath, kFlag, kBool };
enum class When : uint8_t { kInit, kFirstUse };

// How one variable is parsed, checked and spelt (the rule column of
// param_table.def). Integer bounds are held as doubles: all are below 2^53.
struct Rule {
  Kind kind;
  double fallback = 0;          // kInt, kReal; kBool: 1 or 0
  double lo = 0, hi = 0;        // kInt, kReal
  const char* unit = "";        // kInt, kReal: "seconds" shows as "600 s"
  const char* text = "";        // kChoice, kPath: the default
  const char* choices = "";     // kChoice: "a|b|c"
  double word_value = 0;        // kInt, kReal: spelt (and accepted as) `word`
  const char* word = nullptr;   // kInt, kReal: word_value's spelling; kPath: the empty value's
  bool word_number_too = true;  // kInt, kReal: word_value is accepted as a number as well
  bool pow2 = false;

  constexpr Rule or_word(double value, const char* w) const {
    Rule r = *this;
    r.word_value = value;
    r.word = w;
    return r;
  }
  // Like or_word, but only the word means `value`: the number itself stays
  // out of range (PYTFCOMM_TCP_STREAMS=0 was always an error).
  constexpr Rule or_word_only(double value, const char* w) const {
    Rule r = or_word(value, w);
    r.word_number_too = false;
    return r;
  }
  constexpr Rule when_empty(const char* w) const {
    Rule r = *this;
    r.word = w;
    return r;
  }
  constexpr Rule power_of_two() const {
    Rule r = *this;
    r.pow2 = true;
    return r;
  }
};

// The builders param_table.def spells its rules with.
namespace rules {
constexpr Rule Int(double fallback, double lo, double hi, const char* unit) {
  return Rule{Kind::kInt, fallback, lo, hi, unit};
}
constexpr Rule Real(double fallback, double lo, double hi, const char* unit) {
  return Rule{Kind::kReal, fallback, lo, hi, unit};
}
constexpr Rule Choice(const char* fallback, const char* choices) {
  return Rule{Kind::kChoice, 0, 0, 0, "", fallback, choices};
}
constexpr Rule Path(const char* fallback) { return Rule{Kind::kPath, 0, 0, 0, "", fallback}; }
constexpr Rule Flag() { return Rule{Kind::kFlag}; }
constexpr Rule Bool(bool fallback) { return Rule{Kind::kBool, fallback ? 1.0 : 0.0}; }
}  // namespace rules

struct Spec {
  const char* name;
  const char* env;
  When when;
  Rule rule;
  const char* doc;
};

// Whether a Params field of type T holds what `kind` parses to.
template <class T>
constexpr bool holds(Kind kind) {
  if constexpr (std::is_same_v<T, bool>) return kind == Kind::kFlag || kind == Kind::kBool;
  if constexpr (std::is_same_v<T, std::string>) return kind == Kind::kChoice || kind == Kind::kPath;
  if constexpr (std::is_floating_point_v<T>) return kind == Kind::kReal;
  return std::is_integral_v<T> && kind == Kind::kInt;
}

using namespace rules;  // the table's rule column reads Int(...), Choice(...)
constexpr Spec kSpecs[] = {
#define PTC_PARAM(field, type, env, when, rule, doc) {#field, env, When::when, rule, doc},
#include "common/param_table.def"
#undef PTC_PARAM
};
#define PTC_PARAM(field, type, env, when, rule, doc)                               \
  static_assert(holds<type>(rule.kind), #field ": its type cannot hold its rule"); \
  static_assert(std::string_view(env).substr(0, 9) == "PYTFCOMM_", #field);
#include "common/param_table.def"
#undef PTC_PARAM

const Spec& spec(ParamId id) { return kSpecs[static_cast<int>(id)]; }

// "s" for "seconds": how values show in `info` (as before the table existed).
const char* short_unit(const char* unit) {
  if (std::strcmp(unit, "seconds") == 0) return " s";
  if (std::strcmp(unit, "milliseconds") == 0) return " ms";
  if (std::strcmp(unit, "microseconds") == 0) return " us";
  return "";
}

ParamValue fallback_value(const Rule& r) {
  ParamValue v;
  v.integer = static_cast<int64_t>(r.fallback);
  v.real = r.fallback;
  v.text = r.text;
  v.flag = r.fallback != 0;
  return v;
}

std::string spell(const Rule& r, const ParamValue& v) {
  switch (r.kind) {
    case Kind::kInt:
      if (r.word && v.integer == static_cast<int64_t>(r.word_value)) return r.word;
      return str_cat(v.integer, short_unit(r.unit));
    case Kind::kReal:
      if (r.word && v.real == r.word_value) return r.word;
      return str_cat(v.real, short_unit(r.unit));
    case Kind::kChoice:
      return v.text;
    case Kind::kPath:
      return v.text.empty() && r.word ? r.word : v.text;
    case Kind::kFlag:
      return v.flag ? "set" : "unset";
    case Kind::kBool:
      return v.flag ? "1" : "0";
  }
  return "?";
}

// Large powers of two as 2^k: "[4096, 2^30]" reads better than the digits.
std::string bound(double x, Kind kind) {
  int exp = 0;
  if (kind == Kind::kInt && x >= (1 << 20) && std::frexp(x, &exp) == 0.5) {
    return str_cat("2^", exp - 1);
  }
  return kind == Kind::kInt ? str_cat(static_cast<int64_t>(x)) : str_cat(x);
}

// "auto|tcp|shm" -> "auto, tcp or shm"
std::string choice_list(const char* choices) {
  std::string s = choices;
  const size_t last = s.rfind('|');
  if (last == std::string::npos) return s;
  s.replace(last, 1, " or ");
  for (size_t i = s.find('|'); i != std::string::npos; i = s.find('|', i)) s.replace(i, 1, ", ");
  return s;
}

// The numbers allowed, without the kind: "[4096, 2^30] or auto".
std::string interval(const Rule& r) {
  return str_cat("[", bound(r.lo, r.kind), ", ", bound(r.hi, r.kind), "]",
                 r.word ? str_cat(" or ", r.word) : "", r.pow2 ? ", a power of two" : "");
}

std::string range(const Rule& r) {
  switch (r.kind) {
    case Kind::kInt:
    case Kind::kReal:
      return *r.unit ? str_cat(r.unit, " in ", interval(r)) : interval(r);
    case Kind::kChoice:
      return choice_list(r.choices);
    case Kind::kPath:
      return "a path";
    case Kind::kFlag:
      return "set or unset";
    case Kind::kBool:
      return "0 or 1";
  }
  return "?";
}

// What an error message says was expected.
std::string expected(const Rule& r) {
  if (r.kind != Kind::kInt && r.kind != Kind::kReal) return range(r);
  if (*r.unit) {
    const char* what = r.kind == Kind::kInt ? "a whole number of " : "a number of ";
    return str_cat(what, r.unit, " in ", interval(r));
  }
  return str_cat(r.kind == Kind::kInt ? "an integer in " : "a number in ", interval(r));
}

bool parse_int(const char* s, const Rule& r, int64_t& out) {
  if (r.word && std::strcmp(s, r.word) == 0) {
    out = static_cast<int64_t>(r.word_value);
    return true;
  }
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0') return false;
  out = x;
  if (r.word && r.word_number_too && x == static_cast<int64_t>(r.word_value)) return true;
  return x >= static_cast<int64_t>(r.lo) && x <= static_cast<int64_t>(r.hi) &&
         (!r.pow2 || (x & (x - 1)) == 0);
}

bool parse_real(const char* s, const Rule& r, double& out) {
  if (r.word && std::strcmp(s, r.word) == 0) {
    out = r.word_value;
    return true;
  }
  char* end = nullptr;
  errno = 0;
  out = std::strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0') return false;
  return (r.word && r.word_number_too && out == r.word_value) ||
         (out >= r.lo && out <= r.hi);  // NaN fails
}

bool is_choice(const char* s, const char* choices) {
  const size_t n = std::strlen(s);
  for (const char* c = choices;; ++c) {
    const char* bar = std::strchr(c, '|');
    const size_t len = bar ? static_cast<size_t>(bar - c) : std::strlen(c);
    if (len == n && std::strncmp(c, s, n) == 0) return true;
    if (!bar) return false;
    c = bar;
  }
}

// Unset (or empty, except for a flag, whose presence is its value) means the
// default; anything not allowed is a kConfig error, never ignored.
ParamValue parse(const Spec& spec) {
  const Rule& r = spec.rule;
  const char* s = std::getenv(spec.env);
  ParamValue v = fallback_value(r);
  if (r.kind == Kind::kFlag) {
    v.flag = s != nullptr;
    return v;
  }
  if (s == nullptr || *s == '\0') return v;
  bool ok = true;
  switch (r.kind) {
    case Kind::kInt:
      ok = parse_int(s, r, v.integer);
      break;
    case Kind::kReal:
      ok = parse_real(s, r, v.real);
      break;
    case Kind::kChoice:
      ok = is_choice(s, r.choices);
      v.text = s;
      break;
    case Kind::kPath:
      v.text = s;
      break;
    case Kind::kBool:
      ok = std::strcmp(s, "0") == 0 || std::strcmp(s, "1") == 0;
      v.flag = *s == '1';
      break;
    case Kind::kFlag:
      break;
  }
  if (!ok) {
    PTC_THROW(kConfig, spec.env, "='", s, "' is not valid: expected ", expected(r),
              "; unset it to use the default ", spell(r, fallback_value(r)));
  }
  return v;
}

template <class T>
void assign(T& field, const ParamValue& v) {
  if constexpr (std::is_same_v<T, bool>) {
    field = v.flag;
  } else if constexpr (std::is_same_v<T, std::string>) {
    field = v.text;
  } else if constexpr (std::is_floating_point_v<T>) {
    field = v.real;
  } else {
    field = static_cast<T>(v.integer);
  }
}

template <class T>
ParamValue value_of(const T& field) {
  ParamValue v;
  if constexpr (std::is_same_v<T, bool>) {
    v.flag = field;
  } else if constexpr (std::is_same_v<T, std::string>) {
    v.text = field;
  } else if constexpr (std::is_floating_point_v<T>) {
    v.real = field;
  } else {
    v.integer = field;
  }
  return v;
}

// Every variable, the kFirstUse ones too: a bad value fails init() at once
// rather than whatever first needs it.
Params load() {
  Params p;
#define PTC_PARAM(field, type, env, when, rule, doc) assign(p.field, parse(spec(ParamId::field)));
#include "common/param_table.def"
#undef PTC_PARAM
  return p;
}

// Every Params ever loaded stays allocated (and reachable, in `g_loaded`): a
// reference handed out before a reload must stay valid. Reloads happen once
// per new communicator, so this grows by a few hundred bytes per init().
std::atomic<const Params*> g_current{nullptr};
std::mutex g_load_mu;
auto* g_loaded = new std::vector<std::unique_ptr<const Params>>();

const Params* load_and_publish() {
  auto fresh = std::make_unique<const Params>(load());  // throws kConfig: nothing published
  g_current.store(fresh.get(), std::memory_order_release);
  g_loaded->push_back(std::move(fresh));
  return g_loaded->back().get();
}

}  // namespace

const Params& params() {
  const Params* p = g_current.load(std::memory_order_acquire);
  if (p) return *p;
  std::lock_guard<std::mutex> lock(g_load_mu);
  p = g_current.load(std::memory_order_acquire);
  return p ? *p : *load_and_publish();
}

void reload_params() {
  std::lock_guard<std::mutex> lock(g_load_mu);
  load_and_publish();
}

ParamValue read_param(ParamId id) { return parse(spec(id)); }

std::vector<std::pair<std::string, std::string>> describe_params() {
  const Params& p = params();
  std::vector<std::pair<std::string, std::string>> out;
#define PTC_PARAM(field, type, var, when, check, doc) \
  out.emplace_back(var, spell(spec(ParamId::field).rule, value_of(p.field)));
#include "common/param_table.def"
#undef PTC_PARAM
  return out;
}

std::vector<ParamInfo> param_table() {
  static const char* const kTypes[] = {"int", "float", "choice", "path", "flag", "bool"};
  std::vector<ParamInfo> out;
  for (const Spec& s : kSpecs) {
    ParamInfo i{s.name,
                s.env,
                kTypes[static_cast<int>(s.rule.kind)],
                spell(s.rule, fallback_value(s.rule)),
                range(s.rule),
                s.when == When::kInit ? "init" : "first use",
                s.doc,
                "",
                ""};
    try {
      i.value = spell(s.rule, parse(s));
    } catch (const Error& e) {
      i.error = e.what();
    }
    out.push_back(std::move(i));
  }
  return out;
}

}  // namespace pytfcomm
