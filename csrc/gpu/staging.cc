#include "gpu/staging.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "common/error.h"
#include "gpu/cuda_driver.h"

namespace pytfcomm::gpu {
Stager::Stager(Device& device, size_t chunk_bytes) : device_(device), chunk_bytes_(chunk_bytes) {
  ScopedContext scope(device.context());
  for (char*& h : host_) {
    void* p = nullptr;
    // Portable: usable from any context; pinned so copies are true DMA and async.
    PTC_CU_CHECK(driver().cuMemHostAlloc(&p, chunk_bytes_, CU_MEMHOSTALLOC_PORTABLE));
    h = static_cast<char*>(p);
  }
}

Stager::~Stager() {
  for (char* h : host_) {
    if (h) driver().cuMemFreeHost(h);
  }
}

void Stager::pipeline(size_t chunks, TimePoint deadline,
                      const std::function<void(size_t, char*)>& copy_out,
                      const std::function<void(size_t, char*)>& host_step,
                      const std::function<void(size_t, char*)>& copy_in) {
  bool in_pending[2] = {false, false};
  // On any error, wait (bounded) for copies still in flight: they target
  // our pinned buffers and the caller's tensors.
  auto drain = [&] {
    for (int b = 0; b < 2; ++b) {
      if (in_pending[b]) {
        try {
          wait_event(in_done_[b].get(), deadline_after(5.0), "staging copy-in");
        } catch (...) {
        }
      }
    }
  };
  auto start_out = [&](size_t i) {
    int b = static_cast<int>(i % 2);
    if (in_pending[b]) {
      wait_event(in_done_[b].get(), deadline, "staging copy-in");
      in_pending[b] = false;
    }
    copy_out(i, host_[b]);
    out_done_[b].record(device_.stream());
  };
  try {
    // Copies back in run on a second stream: order them after whatever the
    // tensors' producers enqueued on the main stream (DLPack synchronised
    // the producers with that one).
    ready_.record(device_.stream());
    PTC_CU_CHECK(driver().cuStreamWaitEvent(device_.copy_in_stream(), ready_.get(), 0));
    if (chunks > 0) start_out(0);
    for (size_t i = 0; i < chunks; ++i) {
      int b = static_cast<int>(i % 2);
      wait_event(out_done_[b].get(), deadline, "staging copy-out");
      if (i + 1 < chunks) start_out(i + 1);
      host_step(i, host_[b]);
      copy_in(i, host_[b]);
      in_done_[b].record(device_.copy_in_stream());
      in_pending[b] = true;
    }
    for (int b = 0; b < 2; ++b) {
      if (in_pending[b]) wait_event(in_done_[b].get(), deadline, "staging copy-in");
      in_pending[b] = false;
    }
  } catch (...) {
    drain();
    throw;
  }
}

void Stager::allreduce(Communicator& c, CUdeviceptr in, CUdeviceptr out, size_t count, DType dtype,
                       ReduceOp op, Algorithm algorithm, TimePoint deadline, uint32_t shape_tag) {
  const CudaDriver& d = driver();
  const size_t esz = dtype_size(dtype);
  const size_t per = std::max<size_t>(1, chunk_bytes_ / esz);
  const size_t chunks = (count + per - 1) / per;
  auto n_of = [&](size_t i) { return std::min(per, count - i * per); };
  pipeline(
      chunks, deadline,
      [&](size_t i, char* h) {
        PTC_CU_CHECK(
            d.cuMemcpyDtoHAsync_v2(h, in + i * per * esz, n_of(i) * esz, device_.stream()));
      },
      [&](size_t i, char* h) {
        c.allreduce(h, h, n_of(i), dtype, op, algorithm, seconds_left(deadline), shape_tag);
      },
      [&](size_t i, char* h) {
        PTC_CU_CHECK(d.cuMemcpyHtoDAsync_v2(out + i * per * esz, h, n_of(i) * esz,
                                            device_.copy_in_stream()));
      });
}

void Stager::broadcast(Communicator& c, CUdeviceptr buf, size_t count, DType dtype, int root,
                       TimePoint deadline, uint32_t shape_tag) {
  const CudaDriver& d = driver();
  const size_t esz = dtype_size(dtype);
  const size_t per = std::max<size_t>(1, chunk_bytes_ / esz);
  const size_t chunks = (count + per - 1) / per;
  const bool is_root = c.rank() == root;
  auto n_of = [&](size_t i) { return std::min(per, count - i * per); };
  pipeline(
      chunks, deadline,
      [&](size_t i, char* h) {
        if (is_root) {
          PTC_CU_CHECK(
              d.cuMemcpyDtoHAsync_v2(h, buf + i * per * esz, n_of(i) * esz, device_.stream()));
        }
      },
      [&](size_t i, char* h) {
        c.broadcast(h, n_of(i), dtype, root, seconds_left(deadline), shape_tag);
      },
      [&](size_t i, char* h) {
        if (!is_root) {
          PTC_CU_CHECK(d.cuMemcpyHtoDAsync_v2(buf + i * per * esz, h, n_of(i) * esz,
                                              device_.copy_in_stream()));
        }
      });
}

void Stager::allgather(Communicator& c, CUdeviceptr in, CUdeviceptr out, size_t count, DType dtype,
                       TimePoint deadline, uint32_t shape_tag) {
  const CudaDriver& d = driver();
  const size_t esz = dtype_size(dtype);
  const size_t n = static_cast<size_t>(c.size());
  // A host buffer holds this rank's chunk and then every rank's.
  const size_t per = std::max<size_t>(1, chunk_bytes_ / esz / (n + 1));
  PTC_CHECK_ARG(per * (n + 1) * esz <= chunk_bytes_,
                "PYTFCOMM_GPU_STAGE_BYTES is too small for an all-gather of ", n, " ranks");
  const size_t chunks = (count + per - 1) / per;
  auto n_of = [&](size_t i) { return std::min(per, count - i * per); };
  pipeline(
      chunks, deadline,
      [&](size_t i, char* h) {
        PTC_CU_CHECK(
            d.cuMemcpyDtoHAsync_v2(h, in + i * per * esz, n_of(i) * esz, device_.stream()));
      },
      [&](size_t i, char* h) {
        c.allgather(h, h + per * esz, n_of(i), dtype, seconds_left(deadline), shape_tag);
      },
      [&](size_t i, char* h) {
        for (size_t r = 0; r < n; ++r) {
          PTC_CU_CHECK(d.cuMemcpyHtoDAsync_v2(out + (r * count + i * per) * esz,
                                              h + (per + r * n_of(i)) * esz, n_of(i) * esz,
                                              device_.copy_in_stream()));
        }
      });
}

void Stager::reduce_scatter(Communicator& c, CUdeviceptr in, CUdeviceptr out, size_t count,
                            DType dtype, ReduceOp op, TimePoint deadline, uint32_t shape_tag) {
  const CudaDriver& d = driver();
  const size_t esz = dtype_size(dtype);
  const size_t n = static_cast<size_t>(c.size());
  const size_t part = count / n;  // elements each rank ends with
  // A host buffer holds chunk i of every rank's part, then this rank's result.
  const size_t per = std::max<size_t>(1, chunk_bytes_ / esz / (n + 1));
  PTC_CHECK_ARG(per * (n + 1) * esz <= chunk_bytes_,
                "PYTFCOMM_GPU_STAGE_BYTES is too small for a reduce-scatter of ", n, " ranks");
  const size_t chunks = (part + per - 1) / per;
  auto n_of = [&](size_t i) { return std::min(per, part - i * per); };
  pipeline(
      chunks, deadline,
      [&](size_t i, char* h) {
        for (size_t r = 0; r < n; ++r) {
          PTC_CU_CHECK(d.cuMemcpyDtoHAsync_v2(h + r * n_of(i) * esz,
                                              in + (r * part + i * per) * esz, n_of(i) * esz,
                                              device_.stream()));
        }
      },
      [&](size_t i, char* h) {
        c.reduce_scatter(h, h + n * per * esz, n * n_of(i), dtype, op, seconds_left(deadline),
                         shape_tag);
      },
      [&](size_t i, char* h) {
        PTC_CU_CHECK(d.cuMemcpyHtoDAsync_v2(out + i * per * esz, h + n * per * esz, n_of(i) * esz,
                                            device_.copy_in_stream()));
      });
}

std::shared_ptr<char> pinned_block(size_t bytes) {
  constexpr size_t kMaxIdle = size_t{256} << 20;
  static std::mutex mu;
  static auto* idle = new std::map<size_t, std::vector<char*>>();  // never freed: see executors
  static size_t idle_bytes = 0;
  size_t size = size_t{64} << 10;
  while (size < bytes) size <<= 1;
  char* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto& free_list = (*idle)[size];
    if (!free_list.empty()) {
      p = free_list.back();
      free_list.pop_back();
      idle_bytes -= size;
    }
  }
  if (p == nullptr) {
    void* v = nullptr;
    PTC_CU_CHECK(driver().cuMemHostAlloc(&v, size, CU_MEMHOSTALLOC_PORTABLE));
    p = static_cast<char*>(v);
  }
  return std::shared_ptr<char>(p, [size](char* q) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (idle_bytes + size <= kMaxIdle) {
        (*idle)[size].push_back(q);
        idle_bytes += size;
        return;
      }
    }
    driver().cuMemFreeHost(q);
  });
}

}  // namespace pytfcomm::gpu
