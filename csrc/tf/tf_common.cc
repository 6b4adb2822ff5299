#include "tf/tf_common.h"

#include <string>

#include "common/error.h"
#include "engine/registry.h"

namespace pytfcomm {
namespace tf {
namespace {

absl::StatusCode CodeOf(ErrorKind kind) {
#define PTC_TF_STATUS_CASE(id, value, name, python, tf_status) \
  case ErrorKind::id:                                          \
    return absl::StatusCode::k##tf_status;
  switch (kind) { PTC_ERROR_KINDS(PTC_TF_STATUS_CASE) }
#undef PTC_TF_STATUS_CASE
  return absl::StatusCode::kInternal;
}

}  // namespace

absl::Status Guard(const char* what, const std::function<void()>& body) {
  try {
    body();
    return absl::OkStatus();
  } catch (...) {
    return StatusOf(what, std::current_exception());
  }
}

absl::Status StatusOf(const char* what, std::exception_ptr error) {
  if (!error) return absl::OkStatus();
  const std::string prefix = std::string("pytfcomm ") + what + ": ";
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return absl::Status(CodeOf(e.kind()), prefix + e.what());
  } catch (const std::exception& e) {
    return absl::InternalError(prefix + e.what());
  } catch (...) {
    return absl::InternalError(prefix + "unknown exception");
  }
}

absl::Status OpComm(const OpAttrs& a, std::shared_ptr<Communicator>* comm) {
  comm->reset();
  if (a.comm_handle <= 0) return absl::OkStatus();
  *comm = find_communicator(a.comm_handle);
  if (!*comm) {
    return absl::InvalidArgumentError(
        "pytfcomm: no communicator has handle " + std::to_string(a.comm_handle) +
        " in this process (was it closed? create one with pytfcomm.init())");
  }
  return absl::OkStatus();
}

absl::Status CoreDType(const Tensor& t, const char* what, DType* dt, ReduceOp op) {
  if (!ToDType(t.dtype(), dt)) {
    return absl::InvalidArgumentError(std::string("pytfcomm ") + what + ": unsupported dtype " +
                                      tensorflow::DataTypeString(t.dtype()));
  }
  if (op == ReduceOp::kMean && *dt == DType::kBool) {
    return absl::InvalidArgumentError(std::string("pytfcomm ") + what +
                                      ": op 'mean' is not defined for bool; use 'max' (any) or "
                                      "'min' (all)");
  }
  return absl::OkStatus();
}

}  // namespace tf
}  // namespace pytfcomm
