// GPU additions to pytfcomm._core: `gpu_info()` and `GpuCommunicator`, which
// takes any object with __dlpack__ / __dlpack_device__ on a CUDA device
// (CuPy arrays, PyTorch tensors, ...). A build without CUDA keeps both names
// so Python can say precisely why GPU tensors are refused.
#include "bindings/gpu_bindings.h"

#include <pybind11/stl.h>

#include "bindings/blocking.h"
#include "bindings/dlpack_abi.h"
#include "common/error.h"
#include "pytfcomm_config.h"

#if PYTFCOMM_WITH_CUDA
#include "gpu/cuda_driver.h"
#include "gpu/device.h"
#include "gpu/gpu_comm.h"
#include "gpu/gpu_params.h"
#include "gpu/nccl_lib.h"
#endif

namespace py = pybind11;

namespace pytfcomm {
namespace {

[[maybe_unused]] const char* kNoCuda =
    "this build of pytfcomm has no CUDA support (built with PYTFCOMM_WITH_CUDA=OFF); GPU "
    "tensors need a CUDA build: PYTFCOMM_WITH_CUDA=ON pip install pytfcomm --no-binary pytfcomm "
    "(docs/gpu.md), or move the tensor to the CPU";

#if PYTFCOMM_WITH_CUDA
using dlpack::DLManagedTensor;

DType dtype_of(const dlpack::DLDataType& t, const char* what) {
  PTC_CHECK_ARG(t.lanes == 1, what, " has vector dtype lanes=", t.lanes, "; not supported");
  switch (t.code) {
    case dlpack::kDLFloat:
      if (t.bits == 16) return DType::kFloat16;
      if (t.bits == 32) return DType::kFloat32;
      if (t.bits == 64) return DType::kFloat64;
      break;
    case dlpack::kDLBfloat:
      if (t.bits == 16) return DType::kBFloat16;
      break;
    case dlpack::kDLInt:
      if (t.bits == 8) return DType::kInt8;
      if (t.bits == 32) return DType::kInt32;
      if (t.bits == 64) return DType::kInt64;
      break;
    case dlpack::kDLUInt:
      if (t.bits == 8) return DType::kUInt8;
      break;
    case dlpack::kDLBool:
      if (t.bits == 8) return DType::kBool;
      break;
    default:
      break;
  }
  PTC_THROW(kInvalidArgument, what, " has DLPack dtype (code ", static_cast<int>(t.code), ", ",
            static_cast<int>(t.bits),
            " bits) which pytfcomm does not reduce; use float16, bfloat16, float32, float64, "
            "int8, uint8, int32, int64 or bool");
}

// A borrowed view of a CUDA tensor. The capsule stays alive (and so the
// producer's memory) for as long as this object; it is never consumed, so
// the producer's capsule destructor frees the DLManagedTensor.
struct Imported {
  py::object capsule;
  gpu::DeviceBuffer buf;
};

Imported import_cuda(gpu::GpuCommunicator& g, const py::object& obj, const char* what) {
  PTC_CHECK_ARG(py::hasattr(obj, "__dlpack__") && py::hasattr(obj, "__dlpack_device__"), what,
                " is not a DLPack tensor (no __dlpack__ / __dlpack_device__)");
  py::tuple dev = obj.attr("__dlpack_device__")();
  PTC_CHECK_ARG(dev.size() == 2, what, ".__dlpack_device__() must return (type, id)");
  int type = dev[0].cast<int>();
  int id = dev[1].cast<int>();
  PTC_CHECK_ARG(type == dlpack::kDLCUDA || type == dlpack::kDLCUDAManaged, what,
                " is on DLPack device type ", type,
                ", not CUDA (2); pytfcomm takes CPU and CUDA tensors only");
  uintptr_t stream = g.stream(id);
  // The producer orders its pending work on the tensor before our stream.
  py::object cap = obj.attr("__dlpack__")(py::arg("stream") = stream);
  PTC_CHECK_ARG(PyCapsule_IsValid(cap.ptr(), "dltensor"), what,
                ".__dlpack__() did not return an unused 'dltensor' capsule");
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
  PTC_CHECK_ARG(m != nullptr, what, ": empty DLPack capsule");
  const dlpack::DLTensor& t = m->dl_tensor;
  PTC_CHECK_ARG(t.device.device_type == type && t.device.device_id == id, what,
                ": the DLPack tensor's device disagrees with __dlpack_device__()");
  PTC_CHECK_ARG(t.ndim >= 0 && t.ndim <= 64, what, ": bad DLPack ndim ", t.ndim);
  Imported r;
  r.buf.dtype = dtype_of(t.dtype, what);
  r.buf.device = id;
  size_t count = 1;
  int64_t expect = 1;  // row-major stride of the current dimension
  for (int i = t.ndim - 1; i >= 0; --i) {
    PTC_CHECK_ARG(t.shape[i] >= 0, what, ": negative DLPack shape");
    if (t.strides != nullptr && t.shape[i] > 1) {
      PTC_CHECK_ARG(t.strides[i] == expect, what,
                    " is not C-contiguous; make it contiguous first (x.contiguous() in PyTorch, "
                    "cupy.ascontiguousarray(x))");
    }
    expect *= t.shape[i];
    count *= static_cast<size_t>(t.shape[i]);
  }
  r.buf.count = count;
  r.buf.ptr = reinterpret_cast<uint64_t>(t.data) + t.byte_offset;
  if (count > 0) {
    int owner = gpu::Device::pointer_device(r.buf.ptr);
    PTC_CHECK_ARG(owner == id, what, " says it is on cuda:", id,
                  " but its memory belongs to cuda:", owner);
  }
  r.capsule = std::move(cap);
  return r;
}

// `out`, imported: in place (the input object itself) takes the input's import,
// since every __dlpack__(stream=) costs the producer a stream hand-off (~15 us
// in PyTorch), and one is enough to order its pending work on the tensor.
Imported import_out(gpu::GpuCommunicator& g, const py::object& src, const Imported& in,
                    const py::object& dst) {
  return dst.is(src) ? in : import_cuda(g, dst, "out");
}

void check_out(const Imported& in, const Imported& out, size_t want, const char* rule) {
  PTC_CHECK_ARG(out.buf.dtype == in.buf.dtype, "out has dtype ", dtype_name(out.buf.dtype),
                " but the result is ", dtype_name(in.buf.dtype));
  PTC_CHECK_ARG(out.buf.count == want, "out has ", out.buf.count, " elements but ", rule, " (",
                want, ")");
  PTC_CHECK_ARG(out.buf.device == in.buf.device, "out is on cuda:", out.buf.device,
                " but the input is on cuda:", in.buf.device);
  size_t esz = dtype_size(in.buf.dtype);
  uint64_t a0 = in.buf.ptr, a1 = a0 + in.buf.count * esz;
  uint64_t b0 = out.buf.ptr, b1 = b0 + out.buf.count * esz;
  PTC_CHECK_ARG(a0 == b0 || a1 <= b0 || b1 <= a0 || in.buf.count == 0,
                "out partly overlaps the input; pass the input itself (in place) or a separate "
                "tensor");
}

gpu::Backend to_backend(int code) {
  PTC_CHECK_ARG(code >= 0 && code <= 2, "bad GPU transport code ", code);
  return static_cast<gpu::Backend>(code);
}
#endif

py::dict gpu_info(const std::vector<std::string>& nccl_candidates) {
  py::dict d;
#if PYTFCOMM_WITH_CUDA
  d["cuda_build"] = true;
  d["cuda_headers"] = PYTFCOMM_CUDA_VERSION_STRING;
  d["nccl_headers"] = PYTFCOMM_NCCL_HEADER_VERSION_STRING;
  gpu::DriverStatus ds = gpu::driver_status();
  d["cuda_driver"] = ds.loaded ? py::str(ds.path) : py::str("not found");
  d["cuda_driver_version"] =
      ds.version ? py::str(str_cat(ds.version / 1000, ".", (ds.version % 1000) / 10))
                 : py::str("-");
  d["gpus"] = ds.device_count;
  if (!ds.error.empty()) d["gpu_status"] = ds.error;
  // None given: those named before (by init()) stand; NCCL loads once per process.
  if (!nccl_candidates.empty()) gpu::set_nccl_candidates(nccl_candidates);
  gpu::NcclStatus ns = gpu::nccl_status();
  d["nccl"] = ns.loaded ? py::str(ns.path) : py::str("not found");
  d["nccl_version"] = ns.loaded ? py::str(gpu::nccl_version_string(ns.version)) : py::str("-");
  if (!ns.loaded) d["nccl_status"] = ns.error;
  if (ns.loaded) {
    d["nccl_revoke"] = gpu::nccl().ncclCommRevoke != nullptr;
    // How the survivors of a lost rank get NCCL (docs/elastic.md): the old
    // communicator shrunk where NCCL has ncclCommShrink and ncclCommRevoke
    // (falling back to a new one where it cannot be, gpu/nccl_reform.h),
    // else a new one.
    d["nccl_shrink"] = gpu::nccl().ncclCommShrink != nullptr;
    d["nccl_reform"] = gpu::nccl().shrinks() ? "shrink" : "recreate";
    try {
      d["nccl_mode"] = gpu::nccl_blocking() ? "blocking" : "nonblocking";
    } catch (const Error& e) {
      d["nccl_mode"] = str_cat("error: ", e.what());
    }
  }
  try {
    for (const auto& [k, v] : gpu::describe_gpu_params()) d[py::str(k)] = v;
  } catch (const Error& e) {
    d["gpu_params"] = str_cat("error: ", e.what());
  }
#else
  (void)nccl_candidates;
  d["cuda_build"] = false;
  d["gpu_status"] = "built without PYTFCOMM_WITH_CUDA";
#endif
  return d;
}

}  // namespace

void bind_gpu(py::module_& m) {
  m.def("gpu_info", &gpu_info, py::arg("nccl_candidates") = std::vector<std::string>{},
        "CUDA build, driver, GPUs and NCCL as found at run time (loading NCCL if not yet "
        "loaded, from nccl_candidates or else those init() named); never raises");
#if PYTFCOMM_WITH_CUDA
  m.def("set_nccl_candidates", &gpu::set_nccl_candidates,
        "libnccl.so.2 paths to try before the loader's default (before NCCL is first used)");
  py::class_<gpu::GpuCommunicator, std::shared_ptr<gpu::GpuCommunicator>>(m, "GpuCommunicator")
      .def(py::init<std::shared_ptr<Communicator>>())
      .def(
          "allreduce",
          [](gpu::GpuCommunicator& g, py::object src, py::object dst, int op, int algorithm,
             int backend, double timeout, uint32_t shape_tag) {
            Imported in = import_cuda(g, src, "input");
            Imported out = import_out(g, src, in, dst);
            check_out(in, out, in.buf.count, "the result has as many as the input");
            PTC_CHECK_ARG(valid_op(static_cast<uint8_t>(op)) && op >= 0, "bad op code ", op);
            PTC_CHECK_ARG(algorithm >= 0 && algorithm <= 3, "bad algorithm code ", algorithm);
            pytfcomm::Blocking blocking;
            g.allreduce(in.buf, out.buf, static_cast<ReduceOp>(op),
                        static_cast<Algorithm>(algorithm), to_backend(backend), timeout, shape_tag);
          },
          py::arg("src"), py::arg("dst"), py::arg("op"), py::arg("algorithm"), py::arg("backend"),
          py::arg("timeout"), py::arg("shape_tag") = 0)
      .def(
          "broadcast",
          [](gpu::GpuCommunicator& g, py::object src, py::object dst, int root, int backend,
             double timeout, uint32_t shape_tag) {
            Imported in = import_cuda(g, src, "input");
            Imported out = import_out(g, src, in, dst);
            check_out(in, out, in.buf.count, "the result has as many as the input");
            pytfcomm::Blocking blocking;
            g.broadcast(in.buf, out.buf, root, to_backend(backend), timeout, shape_tag);
          },
          py::arg("src"), py::arg("dst"), py::arg("root"), py::arg("backend"), py::arg("timeout"),
          py::arg("shape_tag") = 0)
      .def(
          "allgather",
          [](gpu::GpuCommunicator& g, py::object src, py::object dst, int size, int backend,
             double timeout, uint32_t shape_tag) {
            Imported in = import_cuda(g, src, "input");
            Imported out = import_cuda(g, dst, "out");
            check_out(in, out, in.buf.count * static_cast<size_t>(size),
                      "the result has size * input");
            PTC_CHECK_ARG(in.buf.ptr != out.buf.ptr || in.buf.count == 0,
                          "allgather cannot run in place");
            pytfcomm::Blocking blocking;
            g.allgather(in.buf, out.buf, to_backend(backend), timeout, shape_tag);
          },
          py::arg("src"), py::arg("dst"), py::arg("size"), py::arg("backend"), py::arg("timeout"),
          py::arg("shape_tag") = 0)
      .def(
          "reduce_scatter",
          [](gpu::GpuCommunicator& g, py::object src, py::object dst, int op, int size, int backend,
             double timeout, uint32_t shape_tag) {
            Imported in = import_cuda(g, src, "input");
            Imported out = import_cuda(g, dst, "out");
            check_out(in, out, in.buf.count / static_cast<size_t>(size),
                      "the result has input / size");
            PTC_CHECK_ARG(valid_op(static_cast<uint8_t>(op)) && op >= 0, "bad op code ", op);
            PTC_CHECK_ARG(in.buf.ptr != out.buf.ptr || in.buf.count == 0,
                          "reduce_scatter cannot run in place");
            pytfcomm::Blocking blocking;
            g.reduce_scatter(in.buf, out.buf, static_cast<ReduceOp>(op), to_backend(backend),
                             timeout, shape_tag);
          },
          py::arg("src"), py::arg("dst"), py::arg("op"), py::arg("size"), py::arg("backend"),
          py::arg("timeout"), py::arg("shape_tag") = 0)
      .def("last_backend", &gpu::GpuCommunicator::last_backend)
      .def(
          "verify_stats",
          [](const gpu::GpuCommunicator& g) {
            auto [compact, full] = g.verify_stats();
            py::dict d;
            d["compact"] = compact;
            d["full"] = full;
            return d;
          },
          "NCCL calls confirmed by the compact check / that took the full round "
          "(PYTFCOMM_GPU_VERIFY_CACHE)")
      .def("close", [](gpu::GpuCommunicator& g) {
        pytfcomm::Blocking blocking;
        g.close();
      });
#else
  m.def("set_nccl_candidates", [](const std::vector<std::string>&) {});
  m.def("GpuCommunicator", [](py::object) -> py::object { PTC_THROW(kConfig, kNoCuda); });
#endif
}

}  // namespace pytfcomm
