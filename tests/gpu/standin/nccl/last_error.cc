#include "nccl/last_error.h"

namespace ptcsi_nccl {
namespace {

std::string& text_here() {
  thread_local std::string text;
  return text;
}

}  // namespace

void set_last_error(const std::string& text) { text_here() = text; }

const char* last_error() { return text_here().c_str(); }

ncclResult_t fail(ncclResult_t r, const std::string& text) {
  set_last_error(text);
  return r;
}

}  // namespace ptcsi_nccl
