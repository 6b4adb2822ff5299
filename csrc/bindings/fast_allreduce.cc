// Small all-reduces cost about as much in the Python wrapper as on the wire
// (a dict lookup per argument, a flags object, tuple compares, a cached
// shape digest: ~0.6 us against ~1.5 us for a 4 KiB one-shot). This path
// takes the common call -- C-contiguous native-order NumPy arrays of the same
// dtype and shape, op and algorithm by name -- and does those checks on the
// array structs directly. Anything else returns False and the Python layer
// takes its full path, which produces every error message; so this path
// never raises for bad arguments, only for what the collective itself
// raises.
#include "bindings/fast_allreduce.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <utility>
#include <vector>

#include "bindings/blocking.h"
#include "bindings/codes.h"
#include "common/digest.h"
#include "common/dtype.h"

namespace py = pybind11;

namespace pytfcomm {
namespace {

// NumPy dtype objects (descriptors) the Python layer registered, with their
// codes; arrays of the built-in dtypes share one descriptor object each.
// Registered descriptors are kept alive, so the pointers stay valid.
struct DescrTable {
  std::vector<std::pair<PyObject*, DType>> entries;
  bool find(PyObject* descr, DType* dt) const {
    for (const auto& e : entries) {
      if (e.first == descr) {
        *dt = e.second;
        return true;
      }
    }
    return false;
  }
};

DescrTable& descr_table() {
  static auto* t = new DescrTable();  // never destroyed: outlives interpreter teardown
  return *t;
}

// The code whose table name `s` is: exact names only (the Python layer also
// accepts other spellings).
template <typename Code>
bool code_named(py::handle s, Code* out) {
  if (!PyUnicode_CheckExact(s.ptr())) return false;
  for (const CodeName<Code>& r : CodeTable<Code>::rows) {
    if (PyUnicode_CompareWithASCIIString(s.ptr(), r.name) == 0) {
      *out = r.code;
      return true;
    }
  }
  return false;
}

constexpr size_t kMaxDescrs = 64;

}  // namespace

void bind_fast_allreduce(py::module_& m,
                         py::class_<Communicator, std::shared_ptr<Communicator>>& cls) {
  m.def(
      "register_fast_dtype",
      [](py::object descr, int code) {
        const DType registered = code_arg<DType>(code, "dtype");
        DescrTable& t = descr_table();
        DType dt;
        // Bounded: dtype objects with metadata are new objects each time;
        // past the bound they simply take the full path.
        if (t.find(descr.ptr(), &dt) || t.entries.size() >= kMaxDescrs) return;
        t.entries.emplace_back(descr.release().ptr(), registered);
      },
      "Let the all-reduce fast path take arrays of this (native-order) dtype object.");
  cls.def(
      "allreduce_fast",
      [](Communicator& c, py::handle x, py::handle out, py::handle op, py::handle algorithm) {
        const auto& api = py::detail::npy_api::get();
        if (Py_TYPE(x.ptr()) != api.PyArray_Type_ || Py_TYPE(out.ptr()) != api.PyArray_Type_) {
          return false;
        }
        const auto* a = py::detail::array_proxy(x.ptr());
        const auto* b = py::detail::array_proxy(out.ptr());
        DType dt;
        ReduceOp op_code;
        Algorithm alg_code;
        constexpr int kContig = py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_;
        constexpr int kWrite = py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
        if (a->descr != b->descr || !descr_table().find(a->descr, &dt) || !(a->flags & kContig) ||
            (b->flags & (kContig | kWrite)) != (kContig | kWrite) || a->nd != b->nd ||
            !code_named(op, &op_code) || !code_named(algorithm, &alg_code)) {
          return false;
        }
        size_t count = 1;
        for (int i = 0; i < a->nd; ++i) {
          if (a->dimensions[i] != b->dimensions[i]) return false;
          count *= static_cast<size_t>(a->dimensions[i]);
        }
        const uint32_t tag = shape_digest(a->dimensions, static_cast<size_t>(a->nd));
        const void* in = a->data;
        void* dst = b->data;
        // Input and out that overlap without being one array: the full
        // path explains why that cannot be.
        const auto lo = reinterpret_cast<uintptr_t>(in), hi = reinterpret_cast<uintptr_t>(dst);
        const size_t bytes = count * dtype_size(dt);
        if (lo != hi && bytes && lo < hi + bytes && hi < lo + bytes) return false;
        Blocking blocking;
        c.allreduce(in, dst, count, dt, op_code, alg_code, -1.0, tag);
        return true;
      },
      "All-reduce for the common NumPy call; False: not that call, take the full path.");
}

}  // namespace pytfcomm
