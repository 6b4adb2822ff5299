#include <cstdlib>
#include <new>

#include "algorithms/collective.h"
#include "common/error.h"

namespace pytfcomm::algorithms {

void* Workspace::get(int slot, size_t bytes) {
  PTC_ENFORCE(slot >= 0 && slot < 16, "bad workspace slot ", slot);
  if (blocks_.size() <= static_cast<size_t>(slot)) blocks_.resize(static_cast<size_t>(slot) + 1);
  Block& b = blocks_[static_cast<size_t>(slot)];
  if (b.bytes < bytes || !b.data) {
    size_t want = std::max<size_t>(bytes, 64);
    want = (want + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, want);
    if (p == nullptr) {
      PTC_THROW(kInternal, "out of memory allocating ", want, " bytes of scratch space");
    }
    b.data = std::unique_ptr<char[], void (*)(char*)>(static_cast<char*>(p),
                                                      [](char* q) { std::free(q); });
    b.bytes = want;
  }
  return b.data.get();
}

}  // namespace pytfcomm::algorithms
