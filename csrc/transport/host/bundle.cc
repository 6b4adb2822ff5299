#include "transport/host/bundle.h"

#include <cstring>

#include "common/error.h"

namespace pytfcomm::host {
namespace {

bool same_record(const char* a, size_t na, const char* b, size_t nb) {
  return na == nb && (a == b || std::memcmp(a, b, na) == 0);
}

}  // namespace

size_t write_bundle(char* out, uint32_t first, const char* const* records, const size_t* sizes,
                    size_t count) {
  size_t runs = 0;
  for (size_t i = 0; i < count; ++i) {
    PTC_ENFORCE(sizes[i] <= UINT32_MAX, "a negotiation record of ", sizes[i], " bytes");
    if (i == 0 || !same_record(records[i], sizes[i], records[i - 1], sizes[i - 1])) ++runs;
  }
  BundleHeader h{kBundleMagic, static_cast<uint32_t>(count), first, static_cast<uint32_t>(runs)};
  std::memcpy(out, &h, sizeof(h));
  char* table = out + sizeof(h);
  size_t at = bundle_table_bytes(runs);
  for (size_t i = 0; i < count;) {
    size_t end = i + 1;
    while (end < count && same_record(records[end], sizes[end], records[i], sizes[i])) ++end;
    const BundleRun run{static_cast<uint32_t>(end - i), static_cast<uint32_t>(sizes[i])};
    std::memcpy(table, &run, sizeof(run));
    table += sizeof(run);
    if (records[i] != out + at && sizes[i] > 0) std::memcpy(out + at, records[i], sizes[i]);
    at += bundle_align(sizes[i]);
    i = end;
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
  if (h.runs == 0 || h.runs > count) {
    return str_cat(h.runs, " distinct records for ", count, " rank(s)");
  }
  size_t at = bundle_table_bytes(h.runs);
  if (at > bytes) return str_cat("a bundle of ", bytes, " bytes for ", h.runs, " records");
  out->offset.resize(count);
  out->bytes.resize(count);
  size_t filled = 0;
  for (uint32_t r = 0; r < h.runs; ++r) {
    BundleRun run;
    std::memcpy(&run, b + sizeof(h) + r * sizeof(run), sizeof(run));
    if (run.count == 0 || run.count > count - filled) {
      return str_cat("a run of ", run.count, " rank(s) where ", count - filled, " were left");
    }
    if (run.bytes > max_record || run.bytes > bytes - at) {
      return str_cat("a record of ", run.bytes, " bytes (at most ", max_record, ", ", bytes - at,
                     " left in the bundle)");
    }
    for (uint32_t i = 0; i < run.count; ++i, ++filled) {
      out->offset[filled] = at;
      out->bytes[filled] = run.bytes;
    }
    at += bundle_align(run.bytes);
    if (r + 1 < h.runs && at > bytes) return "records past the bundle's end";
  }
  if (filled != count) return str_cat("runs of ", filled, " rank(s) where ", count, " were due");
  return "";
}

}  // namespace pytfcomm::host
