// Name <-> code tables of the core's enums (dtypes, reduce ops, algorithms,
// collective kinds, error kinds). Each enum is written once, as an X-macro
// list of rows X(enumerator, wire value, name, ...); the enum, its CodeTable
// and whatever else needs the rows (dtype sizes, the TF ops' attrs, the
// Python enums of bindings/codes.cc) expand that one list, so a name and its
// code cannot drift apart between C++, TensorFlow and Python.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pytfcomm {

template <typename Code>
struct CodeName {
  Code code;
  const char* name;
};

// Specialised once per enum by PTC_CODE_TABLE: `rows`, in wire value order.
template <typename Code>
struct CodeTable;

// An X-macro row as an enumerator, and as a CodeTable row.
#define PTC_CODE_ENUMERATOR(id, value, ...) id = value,
#define PTC_CODE_ROW(id, value, name, ...) {Code::id, name},

// The CodeTable of `Enum` from its X-macro list (in namespace pytfcomm).
#define PTC_CODE_TABLE(Enum, LIST)                                 \
  template <>                                                      \
  struct CodeTable<Enum> {                                         \
    using Code = Enum;                                             \
    static constexpr CodeName<Code> rows[] = {LIST(PTC_CODE_ROW)}; \
  }

// `code`'s name, or `unknown` for a value no row has (from a peer that lies).
template <typename Code>
constexpr const char* code_name(Code code, const char* unknown = "invalid") {
  for (const CodeName<Code>& r : CodeTable<Code>::rows) {
    if (r.code == code) return r.name;
  }
  return unknown;
}

// Whether `value` is the wire value of one of the codes.
template <typename Code>
constexpr bool valid_code(uint64_t value) {
  for (const CodeName<Code>& r : CodeTable<Code>::rows) {
    if (static_cast<uint64_t>(r.code) == value) return true;
  }
  return false;
}

// The code whose name is exactly `name`; false when none is.
template <typename Code>
constexpr bool code_of(std::string_view name, Code* out) {
  for (const CodeName<Code>& r : CodeTable<Code>::rows) {
    if (name == r.name) {
      *out = r.code;
      return true;
    }
  }
  return false;
}

// Every name in wire value order, each between `quote`s, joined by ", ":
// for messages ("sum, mean, ...") and TF attr specs ("'sum', 'mean', ...").
template <typename Code>
std::string code_names(std::string_view quote = "") {
  std::string s;
  for (const CodeName<Code>& r : CodeTable<Code>::rows) {
    if (!s.empty()) s += ", ";
    s.append(quote).append(r.name).append(quote);
  }
  return s;
}

// Whether the codes are 0, 1, ... in row order, so that `value < count`
// validates a wire value and a name table can be indexed by code.
template <typename Code>
constexpr bool codes_are_dense() {
  uint64_t next = 0;
  for (const CodeName<Code>& r : CodeTable<Code>::rows) {
    if (static_cast<uint64_t>(r.code) != next++) return false;
  }
  return true;
}

}  // namespace pytfcomm
