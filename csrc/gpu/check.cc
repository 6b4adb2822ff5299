#include "gpu/check.h"

#include <cstring>

#include "gpu/cuda_driver.h"
#include "gpu/nccl_lib.h"

namespace pytfcomm::gpu {

ErrorKind nccl_error_kind(ncclResult_t r) {
  switch (r) {
    case ncclRemoteError:
    case ncclSystemError:
      return ErrorKind::kPeerLost;
    case ncclInvalidUsage:
    case ncclInvalidArgument:
      return ErrorKind::kConfig;
    default:
      return ErrorKind::kInternal;
  }
}

ErrorKind cuda_error_kind(CUresult r) {
  switch (r) {
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
    case CUDA_ERROR_STUB_LIBRARY:
      return ErrorKind::kConfig;
    default:
      return ErrorKind::kInternal;
  }
}

void throw_nccl_error(ncclResult_t r, const std::string& what, const std::string& detail,
                      const char* file, int line) {
  const NcclStatus st = nccl_status();
  const char* text = st.loaded ? nccl().ncclGetErrorString(r) : "unknown NCCL error";
  std::string msg =
      str_cat(what, " failed: ", text, detail.empty() ? "" : str_cat(" (", detail, ")"));
  const ErrorKind kind = nccl_error_kind(r);
  if (kind == ErrorKind::kConfig) {
    msg +=
        "; if several ranks share one GPU, NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1 "
        "or PYTFCOMM_GPU_TRANSPORT=staged is needed";
    // Which NCCL: a process can load another than the one meant (the loader path's).
    if (st.loaded) {
      msg += str_cat(" (this process loaded NCCL ", nccl_version_string(st.version), " from ",
                     st.path, "; PYTFCOMM_NCCL_LIBRARY names another)");
    }
  }
  throw_error(kind, file, line, "NCCL: ", msg);
}

void throw_cuda_error(CUresult r, const std::string& what, const char* file, int line) {
  const ErrorKind kind = cuda_error_kind(r);
  throw_error(kind, file, line, "CUDA call ", what, " failed: ", cu_error_text(r),
              kind == ErrorKind::kConfig
                  ? "; the driver, the GPU or this build's kernels do not fit together (check "
                    "nvidia-smi and PYTFCOMM_CUDA_ARCHS)"
                  : "");
}

std::string call_name(const char* expr) {
  const char* paren = std::strchr(expr, '(');
  const char* end = paren ? paren : expr + std::strlen(expr);
  const char* begin = expr;
  for (const char* p = expr; p < end; ++p) {
    if (*p == '.' || *p == '>' || *p == ':') begin = p + 1;
  }
  return std::string(begin, end);
}

}  // namespace pytfcomm::gpu
