// pybind11 module pytfcomm._core. Arrays arrive already validated by the
// Python layer (pytfcomm/communicator.py); this layer re-checks what would
// be memory-unsafe to get wrong (sizes, contiguity, writability) and
// releases the GIL for every collective.
#include <sys/mman.h>

#include <cstdlib>
#include <optional>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/blocking.h"
#include "bindings/codes.h"
#include "bindings/errors.h"
#include "bindings/fast_allreduce.h"
#include "bindings/gpu_bindings.h"
#include "bindings/output_arrays.h"
#include "bindings/params.h"
#include "bindings/sigint_watch.h"
#include "common/error.h"
#include "common/reduce.h"
#include "engine/communicator.h"
#include "engine/fusion.h"
#include "engine/fusion_queue.h"
#include "engine/registry.h"
#include "local/buffer_cache.h"
#include "pytfcomm_config.h"
#include "transport/wire.h"

namespace py = pybind11;
using pytfcomm::Algorithm;
using pytfcomm::Communicator;
using pytfcomm::DType;
using pytfcomm::kCachedOutputBytes;
using pytfcomm::ReduceOp;
using pytfcomm::tf_buffer_cache;

namespace {

DType to_dtype(int code) { return pytfcomm::code_arg<DType>(code, "dtype"); }
ReduceOp to_op(int code) { return pytfcomm::code_arg<ReduceOp>(code, "op"); }
Algorithm to_algorithm(int code) { return pytfcomm::code_arg<Algorithm>(code, "algorithm"); }

size_t checked_count(const py::array& a, DType dt, const char* what) {
  // The words of pytfcomm/_args.py's check_input, which the NumPy API runs first.
  PTC_CHECK_ARG(a.flags() & py::array::c_style, what,
                " is not C-contiguous (a strided view or a transpose?); pass "
                "np.ascontiguousarray(x) -- pytfcomm works on the array's memory without copying");
  PTC_CHECK_ARG(static_cast<size_t>(a.itemsize()) == pytfcomm::dtype_size(dt), what,
                " has item size ", a.itemsize(), " but dtype ", pytfcomm::dtype_name(dt), " needs ",
                pytfcomm::dtype_size(dt));
  return static_cast<size_t>(a.size());
}

// The result of a collective whose size only the engine learns (allgatherv,
// alltoallv): allocated by alloc() on the engine's thread without the GIL,
// handed to NumPy (as bytes; Python views them with the dtype) after.
struct VarResult {
  char* data = nullptr;
  bool cached = false;  // from the output cache (else aligned_alloc)
  size_t bytes = 0;
  size_t elem = 1;
  void* alloc(uint64_t count) {
    bytes = static_cast<size_t>(count) * elem;
    // From 1 MiB, the output cache, as results without out= (output_arrays.cc):
    // glibc maps buffers of 32 MiB or more afresh on every call.
    if (bytes >= kCachedOutputBytes) {
      data = static_cast<char*>(tf_buffer_cache().take(bytes));
      cached = data != nullptr;
      if (cached) return data;
    }
    // Else as NumPy allocates them: 2 MiB aligned, huge pages advised (else
    // first-touch page faults alone doubled a 64 MiB gather).
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t align = bytes >= 2 * kHuge ? kHuge : 64;
    data = static_cast<char*>(
        std::aligned_alloc(align, (std::max<size_t>(bytes, 1) + align - 1) / align * align));
    if (data && align == kHuge) madvise(data, bytes, MADV_HUGEPAGE);
    return data;  // null when out of memory: the call takes part, then fails here
  }
  py::tuple finish(py::array_t<uint64_t>& counts) {
    if (data == nullptr) PTC_THROW(kInternal, "out of memory for a result of ", bytes, " bytes");
    py::capsule owner(data, release());
    char* p = data;
    data = nullptr;
    return py::make_tuple(
        py::array_t<uint8_t>({bytes}, {size_t{1}}, reinterpret_cast<uint8_t*>(p), owner), counts);
  }
  ~VarResult() {
    if (data) release()(data);
  }
  // How `data` goes back: to the cache, or to the C library.
  using Release = void (*)(void*);
  Release release() const {
    if (cached) return [](void* p) { tf_buffer_cache().give(p); };
    return [](void* p) { std::free(p); };
  }
};

void* writable(py::array& a, const char* what) {
  // The words of pytfcomm/_args.py's check_writable, which the NumPy API runs first.
  PTC_CHECK_ARG(a.writeable(), what, " is read-only; pass a writable array");
  return a.mutable_data();
}

// An async all-reduce as Python sees it: the engine's request plus the
// arrays it reads and writes, kept alive until it is done.
// A handle dropped early waits (bounded by the collective timeout) so the
// engine never writes into freed memory.
struct PyAsyncHandle {
  std::shared_ptr<pytfcomm::AsyncRequest> req;
  py::object src, dst;
  PyAsyncHandle(std::shared_ptr<pytfcomm::AsyncRequest> r, py::object s, py::object d)
      : req(std::move(r)), src(std::move(s)), dst(std::move(d)) {}
  PyAsyncHandle(PyAsyncHandle&&) = default;
  ~PyAsyncHandle() {
    if (!req || req->done()) return;
    py::gil_scoped_release release;
    try {
      req->wait(-1.0);
    } catch (const std::exception&) {  // reported to whoever waits; nobody does
    }
  }
};

pytfcomm::FusionRequest fusion_request(const py::handle& src, const py::handle& dst, int dtype,
                                       size_t index) {
  PTC_CHECK_ARG(py::isinstance<py::array>(src) && py::isinstance<py::array>(dst), "tensor ", index,
                ": input and output must be numpy arrays");
  auto in = py::reinterpret_borrow<py::array>(src);
  auto out = py::reinterpret_borrow<py::array>(dst);
  DType dt = to_dtype(dtype);
  pytfcomm::FusionRequest r;
  r.count = checked_count(in, dt, "input");
  PTC_CHECK_ARG(checked_count(out, dt, "output") == r.count, "tensor ", index,
                ": output must have as many elements as the input");
  r.in = in.data();
  r.out = writable(out, "output");
  r.dtype = dt;
  return r;
}

void bind_fusion(py::module_& m, py::class_<Communicator, std::shared_ptr<Communicator>>& cls) {
  py::class_<PyAsyncHandle>(m, "AsyncHandle")
      .def("done", [](const PyAsyncHandle& h) { return h.req->done(); })
      .def(
          "wait",
          [](PyAsyncHandle& h, double timeout) {
            py::gil_scoped_release release;
            return h.req->wait(timeout);
          },
          py::arg("timeout") = -1.0);
  cls.def(
         "allreduce_many",
         [](Communicator& c, const py::list& srcs, const py::list& dsts, const py::list& dtypes,
            int op, int algorithm, double timeout, uint32_t tag, size_t fusion_bytes,
            size_t direct_bytes) {
           PTC_CHECK_ARG(srcs.size() == dsts.size() && srcs.size() == dtypes.size(),
                         "inputs, outputs and dtypes must have the same length");
           std::vector<pytfcomm::FusionRequest> reqs;
           reqs.reserve(srcs.size());
           for (size_t i = 0; i < srcs.size(); ++i) {
             reqs.push_back(fusion_request(srcs[i], dsts[i], dtypes[i].cast<int>(), i));
           }
           ReduceOp o = to_op(op);
           pytfcomm::Blocking blocking;
           c.fusion().allreduce_many(reqs, o, to_algorithm(algorithm), timeout, tag, fusion_bytes,
                                     direct_bytes);
         },
         py::arg("srcs"), py::arg("dsts"), py::arg("dtypes"), py::arg("op"), py::arg("algorithm"),
         py::arg("timeout"), py::arg("tag") = 0, py::arg("fusion_bytes") = 0,
         py::arg("direct_bytes") = 0)
      .def(
          "allreduce_async",
          [](Communicator& c, const py::object& src, const py::object& dst, int dtype, int op,
             int algorithm, double timeout, uint32_t tag) {
            pytfcomm::FusionRequest r = fusion_request(src, dst, dtype, 0);
            ReduceOp o = to_op(op);
            Algorithm a = to_algorithm(algorithm);
            PyAsyncHandle h{nullptr, src, dst};
            {
              py::gil_scoped_release release;
              h.req = c.fusion().allreduce_async(r, o, a, timeout, tag);
            }
            return h;
          },
          py::arg("src"), py::arg("dst"), py::arg("dtype"), py::arg("op"), py::arg("algorithm"),
          py::arg("timeout"), py::arg("tag") = 0);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "pytfcomm native core (no TensorFlow dependency)";

  pytfcomm::bind_errors(m);
  pytfcomm::bind_codes(m);
  pytfcomm::bind_sigint_watch(m);

  py::class_<Communicator, std::shared_ptr<Communicator>> comm_class(m, "Communicator");
  comm_class
      .def(py::init([](int rank, int size, const std::string& root_host, int root_port,
                       const std::string& bind_host, const std::string& host_id,
                       double connect_timeout, double timeout, const std::string& secret,
                       const std::string& transport, double stall_warning) {
             pytfcomm::CommOptions o;
             o.rank = rank;
             o.size = size;
             o.root_host = root_host;
             o.root_port = root_port;
             o.bind_host = bind_host;
             o.host_id = host_id;
             o.connect_timeout_s = connect_timeout;
             o.timeout_s = timeout;
             o.secret = secret;
             o.transport = transport;
             o.stall_warning_s = stall_warning;
             pytfcomm::Blocking blocking;
             return std::make_shared<Communicator>(o);
           }),
           py::arg("rank"), py::arg("size"), py::arg("root_host"), py::arg("root_port"),
           py::arg("bind_host") = "", py::arg("host_id") = "", py::arg("connect_timeout") = -1.0,
           py::arg("timeout") = -1.0, py::arg("secret") = "", py::arg("transport") = "",
           py::arg("stall_warning") = -1.0)
      .def_property_readonly("rank", &Communicator::rank)
      .def_property_readonly("size", &Communicator::size)
      .def_property_readonly("local_rank", &Communicator::local_rank)
      .def_property_readonly("local_size", &Communicator::local_size)
      .def_property_readonly("num_hosts", &Communicator::num_hosts)
      .def_property_readonly("root_port", &Communicator::root_port)
      .def_property_readonly("closed", &Communicator::closed)
      .def("host_of", &Communicator::host_of)
      .def_property_readonly("timeline_path", &Communicator::timeline_path,
                             "This rank's timeline file, or '' when off")
      .def("start_timeline", &Communicator::start_timeline, py::arg("pattern"),
           "Start this rank's timeline in the file of `pattern` ('%r' or '.rank<N>'); "
           "returns its path")
      .def("stop_timeline", &Communicator::stop_timeline,
           "Stop the timeline (the file is complete; later events are dropped)")
      .def_property_readonly(
          "handle",
          [](const std::shared_ptr<Communicator>& c) { return pytfcomm::register_communicator(c); },
          "Process-wide handle through which the TF op library finds this communicator")
      .def("stream_states", &Communicator::stream_states)
      .def("last_algorithm",
           [](const Communicator& c) { return pytfcomm::algorithm_name(c.last_algorithm()); })
      .def(
          "first_steps_ahead",
          [](const Communicator& c) { return py::make_tuple(c.ahead_sent(), c.ahead_taken()); },
          "(sent, taken): first messages of pairwise all-reduces this rank sent right behind "
          "its negotiation records, and its partners' it used (docs/negotiation.md)")
      .def("choose_allreduce",
           [](const Communicator& c, size_t bytes) {
             return pytfcomm::algorithm_name(c.choose_allreduce(bytes));
           })
      .def(
          "allreduce",
          [](Communicator& c, const py::array& src, py::array& dst, int dtype, int op,
             int algorithm, double timeout, uint32_t shape_tag, const std::string& name) {
            DType dt = to_dtype(dtype);
            size_t n = checked_count(src, dt, "input");
            PTC_CHECK_ARG(checked_count(dst, dt, "output") == n,
                          "output must have as many elements as the input");
            const void* in = src.data();
            void* out = writable(dst, "output");
            pytfcomm::CallKey key{name};
            pytfcomm::Blocking blocking;
            c.allreduce(in, out, n, dt, to_op(op), to_algorithm(algorithm), timeout, shape_tag,
                        &key);
          },
          py::arg("src"), py::arg("dst"), py::arg("dtype"), py::arg("op"), py::arg("algorithm"),
          py::arg("timeout"), py::arg("shape_tag") = 0, py::arg("name") = "")
      .def(
          "broadcast",
          [](Communicator& c, py::array& buf, int dtype, int root, double timeout,
             uint32_t shape_tag, const std::string& name) {
            DType dt = to_dtype(dtype);
            size_t n = checked_count(buf, dt, "buffer");
            void* p = writable(buf, "buffer");
            pytfcomm::CallKey key{name};
            pytfcomm::Blocking blocking;
            c.broadcast(p, n, dt, root, timeout, shape_tag, &key);
          },
          py::arg("buf"), py::arg("dtype"), py::arg("root"), py::arg("timeout"),
          py::arg("shape_tag") = 0, py::arg("name") = "")
      .def(
          "allgather",
          [](Communicator& c, const py::array& src, py::array& dst, int dtype, double timeout,
             uint32_t shape_tag, const std::string& name) {
            DType dt = to_dtype(dtype);
            size_t n = checked_count(src, dt, "input");
            PTC_CHECK_ARG(checked_count(dst, dt, "output") == n * static_cast<size_t>(c.size()),
                          "output must hold size * input elements");
            const void* in = src.data();
            void* out = writable(dst, "output");
            pytfcomm::CallKey key{name};
            pytfcomm::Blocking blocking;
            c.allgather(in, out, n, dt, timeout, shape_tag, &key);
          },
          py::arg("src"), py::arg("dst"), py::arg("dtype"), py::arg("timeout"),
          py::arg("shape_tag") = 0, py::arg("name") = "")
      .def(
          "allgatherv",
          [](Communicator& c, const py::array& src, int dtype, double timeout, uint32_t shape_tag,
             const std::string& name, std::optional<py::array> dst, bool dst_only) -> py::tuple {
            DType dt = to_dtype(dtype);
            size_t n = checked_count(src, dt, "input");
            py::array_t<uint64_t> counts(static_cast<py::ssize_t>(c.size()));
            uint64_t* cp = counts.mutable_data();
            VarResult res;
            res.elem = pytfcomm::dtype_size(dt);
            // dst: where the result goes when it is exactly dst's size; else
            // a buffer of our own, or nowhere with dst_only (the counts say why).
            void* fixed = nullptr;
            size_t fixed_count = 0;
            bool used_dst = false;
            if (dst) {
              fixed_count = checked_count(*dst, dt, "output");
              fixed = writable(*dst, "output");
            }
            const void* in = src.data();
            pytfcomm::CallKey key{name};
            {
              pytfcomm::Blocking blocking;
              c.allgatherv(
                  in, n, dt,
                  [&](uint64_t total) -> void* {
                    if (fixed && total == fixed_count) {
                      used_dst = true;
                      return fixed;
                    }
                    return dst_only ? nullptr : res.alloc(total);
                  },
                  cp, timeout, shape_tag, &key);
            }
            if (used_dst || dst_only) return py::make_tuple(py::none(), counts);
            return res.finish(counts);
          },
          py::arg("src"), py::arg("dtype"), py::arg("timeout"), py::arg("shape_tag") = 0,
          py::arg("name") = "", py::arg("dst") = py::none(), py::arg("dst_only") = false,
          "Every rank's src (its own element count) in rank order: (bytes of the result, or None "
          "when it went into dst, which it does when it has exactly dst's size; element count "
          "of each rank). dst_only: never anywhere else (a result of another size is dropped)")
      .def(
          "alltoallv",
          [](Communicator& c, const py::array& src, const py::array_t<int64_t>& splits, int dtype,
             double timeout, uint32_t shape_tag, const std::string& name) {
            DType dt = to_dtype(dtype);
            size_t n = checked_count(src, dt, "input");
            PTC_CHECK_ARG(splits.ndim() == 1 && splits.size() == c.size(),
                          "alltoallv needs one split per rank (", c.size(), "), got ",
                          splits.size());
            std::vector<uint64_t> send(static_cast<size_t>(c.size()));
            uint64_t sum = 0;
            for (int i = 0; i < c.size(); ++i) {
              const int64_t s = splits.at(i);
              PTC_CHECK_ARG(s >= 0, "alltoallv's splits must be >= 0, got ", s, " for rank ", i);
              send[static_cast<size_t>(i)] = static_cast<uint64_t>(s);
              sum += static_cast<uint64_t>(s);
            }
            PTC_CHECK_ARG(sum == n, "alltoallv's splits add up to ", sum,
                          " elements but the input has ", n);
            py::array_t<uint64_t> counts(static_cast<py::ssize_t>(c.size()));
            uint64_t* cp = counts.mutable_data();
            VarResult res;
            res.elem = pytfcomm::dtype_size(dt);
            const void* in = src.data();
            pytfcomm::CallKey key{name};
            {
              pytfcomm::Blocking blocking;
              c.alltoallv(
                  in, send.data(), dt, [&res](uint64_t total) { return res.alloc(total); }, cp,
                  timeout, shape_tag, &key);
            }
            return res.finish(counts);
          },
          py::arg("src"), py::arg("splits"), py::arg("dtype"), py::arg("timeout"),
          py::arg("shape_tag") = 0, py::arg("name") = "",
          "splits[i] elements of src to rank i; (bytes of what every rank sent this one, in "
          "rank order, element count from each rank)")
      .def(
          "reduce_scatter",
          [](Communicator& c, const py::array& src, py::array& dst, int dtype, int op,
             double timeout, uint32_t shape_tag, const std::string& name) {
            DType dt = to_dtype(dtype);
            size_t n = checked_count(src, dt, "input");
            PTC_CHECK_ARG(checked_count(dst, dt, "output") * static_cast<size_t>(c.size()) == n,
                          "output must hold input elements / size");
            const void* in = src.data();
            void* out = writable(dst, "output");
            pytfcomm::CallKey key{name};
            pytfcomm::Blocking blocking;
            c.reduce_scatter(in, out, n, dt, to_op(op), timeout, shape_tag, &key);
          },
          py::arg("src"), py::arg("dst"), py::arg("dtype"), py::arg("op"), py::arg("timeout"),
          py::arg("shape_tag") = 0, py::arg("name") = "")
      .def(
          "barrier",
          [](Communicator& c, double timeout, const std::string& name) {
            pytfcomm::CallKey key{name};
            pytfcomm::Blocking blocking;
            c.barrier(timeout, &key);
          },
          py::arg("timeout"), py::arg("name") = "")
      .def(
          "join",
          [](Communicator& c, double timeout) {
            pytfcomm::Blocking blocking;
            return c.join(timeout);
          },
          py::arg("timeout"),
          "Horovod's join: take part in the others' collectives with nothing of one's own "
          "until every rank joined; returns the rank that joined last")
      .def_property_readonly("failure", &Communicator::failure,
                             "Why an error closed the communicator ('' otherwise)")
      .def("close", [](Communicator& c) {
        py::gil_scoped_release release;
        c.close();
      });
  bind_fusion(m, comm_class);
  pytfcomm::bind_fast_allreduce(m, comm_class);

  m.def("build_info", [] {
    py::dict d;
    d["version"] = PYTFCOMM_VERSION;
    d["protocol_version"] = pytfcomm::wire::kProtocolVersion;
    d["reduce_isa"] = pytfcomm::reduce_isa();
    d["transports"] = std::vector<std::string>{"tcp", "shm"};
    d["compiler"] = __VERSION__;
    d["cuda"] = static_cast<bool>(PYTFCOMM_WITH_CUDA);
    return d;
  });
  pytfcomm::bind_params(m);
  pytfcomm::bind_output_arrays(m);
  pytfcomm::bind_gpu(m);
  m.attr("__version__") = PYTFCOMM_VERSION;
}
