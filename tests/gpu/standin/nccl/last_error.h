// ncclGetLastError's text (one job): thread-local, set by every failing call
// and by ncclCommGetAsyncError when it reports a communicator's error.
#pragma once

#include <nccl.h>

#include <string>

namespace ptcsi_nccl {

void set_last_error(const std::string& text);
const char* last_error();

// set_last_error(text) and return r: `return fail(ncclInvalidUsage, ...)`.
ncclResult_t fail(ncclResult_t r, const std::string& text);

}  // namespace ptcsi_nccl
