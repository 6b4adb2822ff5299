#include "bindings/codes.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <vector>

#include "common/algorithm.h"
#include "common/digest.h"
#include "common/dtype.h"

namespace py = pybind11;

namespace pytfcomm {
namespace {

// One enum value per table row, named as in C++ messages ("float32", "sum",
// "ring"), so Python builds its name -> code maps from these (pytfcomm/_dtypes.py).
template <typename Code>
void bind_enum(py::module_& m, const char* name, const char* doc) {
  py::enum_<Code> e(m, name, doc);
  for (const CodeName<Code>& r : CodeTable<Code>::rows) e.value(r.name, r.code);
}

}  // namespace

void bind_codes(py::module_& m) {
  bind_enum<DType>(m, "DType", "Element types (common/dtype.h); a name is NumPy's name.");
  bind_enum<ReduceOp>(m, "ReduceOp", "Reduction operators (common/dtype.h).");
  bind_enum<Algorithm>(m, "Algorithm", "All-reduce algorithms (common/algorithm.h).");
  m.def(
      "shape_digest",
      [](const std::vector<int64_t>& shape) { return shape_digest(shape.data(), shape.size()); },
      py::arg("shape"), "zlib.crc32(repr(tuple(shape)).encode()): a collective's shape tag.");
  m.def("shapes_digest", &shapes_digest, py::arg("shapes"),
        "zlib.crc32(repr([tuple(s) for s in shapes]).encode()): a fused list's shape tag.");
}

}  // namespace pytfcomm
