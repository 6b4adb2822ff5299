#include "transport/host/bundle.h"

#include <cstring>

#include "common/error.h"

namespace pytfcomm::host {

size_t write_bundle(char* out, uint32_t first, const char* const* records, const size_t* sizes,
                    size_t count) {
  BundleHeader h{kBundleMagic, static_cast<uint32_t>(count), first, 0};
  std::memcpy(out, &h, sizeof(h));
  size_t at = bundle_table_bytes(count);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t n = sizes[i];
    std::memcpy(out + sizeof(h) + i * sizeof(uint64_t), &n, sizeof(n));
    if (records[i] != out + at && n > 0) std::memcpy(out + at, records[i], n);
    at += bundle_align(n);
  }
  return at;
}

std::string parse_bundle(const char* b, size_t bytes, uint32_t first, uint32_t count,
                         size_t max_record, BundleView* out) {
  BundleHeader h;
  if (bytes < sizeof(h)) return str_cat("a bundle of ", bytes, " bytes");
  std::memcpy(&h, b, sizeof(h));
  if (h.magic != kBundleMagic) return "no bundle magic";
  if (h.count != count || h.first != first) {
    return str_cat("records of ", h.count, " rank(s) from rank ", h.first, " where ", count,
                   " from rank ", first, " were due");
  }
  size_t at = bundle_table_bytes(count);
  if (at > bytes) return str_cat("a bundle of ", bytes, " bytes for ", count, " records");
  out->offset.resize(count);
  out->bytes.resize(count);
  for (size_t i = 0; i < count; ++i) {
    uint64_t n;
    std::memcpy(&n, b + sizeof(h) + i * sizeof(uint64_t), sizeof(n));
    if (n > max_record || n > bytes - at) {
      return str_cat("a record of ", n, " bytes (at most ", max_record, ", ", bytes - at,
                     " left in the bundle)");
    }
    out->offset[i] = at;
    out->bytes[i] = static_cast<size_t>(n);
    at += bundle_align(static_cast<size_t>(n));
    if (i + 1 < count && at > bytes) return "records past the bundle's end";
  }
  return "";
}

}  // namespace pytfcomm::host
