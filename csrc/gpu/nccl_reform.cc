#include "gpu/nccl_reform.h"

#include <mutex>

namespace pytfcomm::gpu {
namespace {

std::mutex g_mu;
// Never freed at exit (like the TF path's cliques): NCCL may be gone then.
Parked*& g_parked() {
  static Parked* p = nullptr;
  return p;
}

}  // namespace

Parked::~Parked() {
  clique.reset();  // NCCL first: its handles use the devices' contexts
  devices.clear();
}

void park(std::unique_ptr<Parked> p) {
  std::unique_ptr<Parked> earlier;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    earlier.reset(g_parked());
    g_parked() = p.release();
  }
}

std::unique_ptr<Parked> take_parked() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::unique_ptr<Parked> p(g_parked());
  g_parked() = nullptr;
  return p;
}

}  // namespace pytfcomm::gpu
