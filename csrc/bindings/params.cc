// The PYTFCOMM_* registry (common/param.h) in pytfcomm._core: `params()`, the
// values in effect, and `param_table()`, the table itself, which `info` and
// scripts/param_table.py (docs/parameters.md) read.
#include "bindings/params.h"

#include <pybind11/stl.h>

#include "common/param.h"

namespace py = pybind11;

namespace pytfcomm {

void bind_params(py::module_& m) {
  m.def("params", &describe_params,
        "(variable, value) of every parameter as the last init() parsed them; raises "
        "ConfigError when one is not valid");
  m.def(
      "param_table",
      [] {
        py::list out;
        for (const ParamInfo& p : param_table()) {
          py::dict d;
          d["name"] = p.name;
          d["env"] = p.env;
          d["type"] = p.type;
          d["default"] = p.fallback;
          d["range"] = p.range;
          d["read"] = p.read;
          d["doc"] = p.doc;
          d["value"] = p.error.empty() ? py::object(py::str(p.value)) : py::none();
          d["error"] = p.error.empty() ? py::none() : py::object(py::str(p.error));
          out.append(d);
        }
        return out;
      },
      "Every PYTFCOMM_* variable the core reads: name, env, type, default, range, read "
      "('init': every init(), 'first use': once per process), doc, and value (as the "
      "environment gives it now; None with `error` when not valid). Never raises.");
}

}  // namespace pytfcomm
