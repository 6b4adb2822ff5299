#include "gpu/nccl_lib.h"

#include <dlfcn.h>

#include <mutex>

#include "common/error.h"
#include "common/param.h"

namespace pytfcomm::gpu {
namespace {

std::mutex g_mu;
std::vector<std::string> g_candidates;
bool g_tried = false;
NcclLib g_lib;
NcclStatus g_status;

// Try one path; on success fill g_lib and return "", else the reason.
std::string try_load(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = dlerror();
    return why ? why : "dlopen failed";
  }
  NcclLib lib;
#define PTC_RESOLVE(fn)                                         \
  lib.fn = reinterpret_cast<decltype(&::fn)>(dlsym(h, #fn));    \
  if (lib.fn == nullptr) {                                      \
    dlclose(h);                                                 \
    return str_cat("missing symbol ", #fn, " (NCCL too old?)"); \
  }
  PTC_NCCL_FUNCS(PTC_RESOLVE)
#undef PTC_RESOLVE
  lib.ncclCommRevoke = reinterpret_cast<NcclCommRevokeFn>(dlsym(h, "ncclCommRevoke"));
  lib.ncclCommShrink = reinterpret_cast<NcclCommShrinkFn>(dlsym(h, "ncclCommShrink"));
  if (lib.ncclGetVersion(&lib.version) != ncclSuccess) {
    dlclose(h);
    return "ncclGetVersion failed";
  }
  if (lib.version < kMinNcclVersion) {
    dlclose(h);
    return str_cat("NCCL ", nccl_version_string(lib.version), " is older than the ",
                   nccl_version_string(kMinNcclVersion), " pytfcomm needs");
  }
  char origin[4096] = {0};
  lib.path = dlinfo(h, RTLD_DI_ORIGIN, origin) == 0 && path.find('/') == std::string::npos
                 ? str_cat(origin, "/", path)
                 : path;
  g_lib = lib;  // the handle stays open for the life of the process
  return "";
}

void load_locked() {
  if (g_tried) return;
  g_tried = true;
  std::vector<std::string> order;
  const std::string env = read_param(ParamId::nccl_library).text;
  if (!env.empty()) order.push_back(env);
  order.insert(order.end(), g_candidates.begin(), g_candidates.end());
  order.push_back("libnccl.so.2");
  std::string reasons;
  for (const auto& p : order) {
    std::string why = try_load(p);
    if (why.empty()) {
      g_status.loaded = true;
      g_status.path = g_lib.path;
      g_status.version = g_lib.version;
      return;
    }
    reasons += str_cat(reasons.empty() ? "" : "; ", p, ": ", why);
    // An explicit PYTFCOMM_NCCL_LIBRARY that fails is a configuration error,
    // not a reason to silently pick another NCCL.
    if (!env.empty() && p == env) break;
  }
  g_status.error = str_cat("NCCL not found (", reasons,
                           "); pip install nvidia-nccl-cu13 (or -cu12), or set "
                           "PYTFCOMM_NCCL_LIBRARY to a libnccl.so.2");
}

}  // namespace

void set_nccl_candidates(const std::vector<std::string>& paths) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_tried) g_candidates = paths;
}

NcclStatus nccl_status() {
  std::lock_guard<std::mutex> lock(g_mu);
  load_locked();
  return g_status;
}

const NcclLib& nccl() {
  std::lock_guard<std::mutex> lock(g_mu);
  load_locked();
  if (!g_status.loaded) PTC_THROW(kConfig, g_status.error);
  return g_lib;
}

std::string nccl_version_string(int code) {
  // Codes from 2.9 on are MAJOR*10000 + MINOR*100 + PATCH.
  return str_cat(code / 10000, ".", (code / 100) % 100, ".", code % 100);
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kInt8:
      return ncclInt8;
    case DType::kUInt8:
    case DType::kBool:
      return ncclUint8;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
    default:
      PTC_THROW(kInvalidArgument, "dtype ", dtype_name(t), " has no NCCL equivalent");
  }
}

// bool reduces as bytes: any (sum, max) is a max, all (prod, min) a min.
ncclRedOp_t nccl_op(ReduceOp op, DType t) {
  if (t == DType::kBool) return op == ReduceOp::kSum || op == ReduceOp::kMax ? ncclMax : ncclMin;
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProd:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    default:
      PTC_THROW(kInternal, "op ", op_name(op), " must be lowered before NCCL");
  }
}

}  // namespace pytfcomm::gpu
