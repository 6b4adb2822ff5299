// Modules and kernels of the CUDA driver stand-in (see driver.cc).
//
// cuModuleLoadData takes what nvcc writes (a fatbin, magic 0xBA55ED50, or a
// cubin ELF); a module has those kernels of csrc/gpu/kernels.cu whose names
// its image holds (every one when the image is compressed and names cannot
// be seen). cuLaunchKernel copies the parameter values at the call, as CUDA
// does, and runs the kernel as a CPU loop on the stream's thread, with the
// arithmetic of kernels.cu: 16-bit floats divided in float32 and rounded to
// nearest even (NaN becomes the canonical 0x7FFF, as the GPU's cvt does),
// integers truncate toward zero, bool bytes become 0 or 1. Grid and block
// dimensions are checked as CUDA checks them, then ignored.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <type_traits>

#include "cuda/internal.h"

namespace ptcsi {
namespace {

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24, exact in float
    return bits_float(sign | float_bits(std::ldexp(static_cast<float>(man), -24)));
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (man << 13));
  return bits_float(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t float_to_half_rn(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return 0x7fff;                                  // NaN
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (ax >= 0x38800000u) {  // normal half: rebias, round the 13 dropped bits to even
    const uint32_t r = ax - (112u << 23);
    return static_cast<uint16_t>(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
  }
  // Subnormal half (or zero): round |f| * 2^24 to an integer, ties to even
  // (the scaling is exact; 1024 is the smallest normal, encoded the same way).
  const float scaled = std::ldexp(bits_float(ax), 24);
  return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)));
}

float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

uint16_t float_to_bf16_rn(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fff;  // NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// One launch's copied parameters.
struct Args {
  uintptr_t p = 0;
  unsigned long long n = 0;
  long long d = 0;
};

template <class T, class D>
void divide_all(T* p, unsigned long long n, long long d) {
  const D dd = static_cast<D>(d);
  if constexpr (std::is_integral_v<D>) {
    using U = std::make_unsigned_t<D>;
    if (dd == 0) {  // a GPU does not trap; its result is unspecified
      std::fprintf(stderr, "ptcsi: integer divide kernel with divisor 0 (results set to -1)\n");
      for (unsigned long long i = 0; i < n; ++i) p[i] = static_cast<T>(-1);
      return;
    }
    if (dd == -1) {  // x / -1 without the CPU's overflow trap: wraps as the GPU does
      for (unsigned long long i = 0; i < n; ++i) {
        p[i] = static_cast<T>(static_cast<D>(U{0} - static_cast<U>(static_cast<D>(p[i]))));
      }
      return;
    }
  }
  for (unsigned long long i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<D>(p[i]) / dd);
}

template <uint16_t (*Round)(float), float (*Widen)(uint16_t)>
void divide_16(uint16_t* p, unsigned long long n, long long d) {
  const float dd = static_cast<float>(d);
  for (unsigned long long i = 0; i < n; ++i) p[i] = Round(Widen(p[i]) / dd);
}

struct KernelDef {
  const char* name;
  int params;  // 3: (T* p, unsigned long long n, long long d); 2: (p, n)
  size_t esz;  // bytes per element
  void (*run)(const Args&);
};

template <class T, class D>
void run_divide(const Args& a) {
  divide_all<T, D>(reinterpret_cast<T*>(a.p), a.n, a.d);
}

const KernelDef kKernels[] = {
    {"ptc_divide_f16", 3, 2,
     [](const Args& a) {
       divide_16<float_to_half_rn, half_to_float>(reinterpret_cast<uint16_t*>(a.p), a.n, a.d);
     }},
    {"ptc_divide_bf16", 3, 2,
     [](const Args& a) {
       divide_16<float_to_bf16_rn, bf16_to_float>(reinterpret_cast<uint16_t*>(a.p), a.n, a.d);
     }},
    {"ptc_divide_f32", 3, 4, run_divide<float, float>},
    {"ptc_divide_f64", 3, 8, run_divide<double, double>},
    {"ptc_divide_i8", 3, 1, run_divide<signed char, int>},
    {"ptc_divide_u8", 3, 1, run_divide<unsigned char, int>},
    {"ptc_divide_i32", 3, 4, run_divide<int, long long>},
    {"ptc_divide_i64", 3, 8, run_divide<long long, long long>},
    {"ptc_bool_normalize", 2, 1,
     [](const Args& a) {
       auto* p = reinterpret_cast<unsigned char*>(a.p);
       for (unsigned long long i = 0; i < a.n; ++i) p[i] = p[i] != 0;
     }},
};

struct Module;
struct Function {
  Module* mod;
  const KernelDef* def;
};

struct Module {
  Context* ctx = nullptr;
  std::map<std::string, Function*> functions;  // the kernels its image holds
};

struct Modules {
  std::mutex mu;
  std::set<Module*> modules;  // never unloaded (no cuModuleUnload here)
  std::set<Function*> functions;
};

Modules& modules() {
  static auto* m = new Modules();
  return *m;
}

// The bytes of an image nvcc wrote, or 0 when it is not one.
size_t image_size(const unsigned char* img) {
  uint32_t magic;
  std::memcpy(&magic, img, 4);
  if (magic == 0xBA55ED50u) {  // fatbin: magic, version (2), header size (2), body size (8)
    uint16_t header;
    uint64_t body;
    std::memcpy(&header, img + 6, 2);
    std::memcpy(&body, img + 8, 8);
    return header + body;
  }
  if (std::memcmp(img,
                  "\x7f"
                  "ELF",
                  4) == 0 &&
      img[4] == 2) {  // 64-bit cubin: end of the section header table
    uint64_t shoff;
    uint16_t shentsize, shnum;
    std::memcpy(&shoff, img + 0x28, 8);
    std::memcpy(&shentsize, img + 0x3a, 2);
    std::memcpy(&shnum, img + 0x3c, 2);
    return shoff + static_cast<size_t>(shentsize) * shnum;
  }
  return 0;
}

bool holds(const unsigned char* img, size_t size, const char* name) {
  const std::string key = std::string(name) + '\0';
  return std::search(img, img + size, key.begin(), key.end()) != img + size;
}

}  // namespace
}  // namespace ptcsi

using namespace ptcsi;

PTCSI_API CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  Context* c = nullptr;
  if (CUresult r = need_current(&c)) return r;
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto* img = static_cast<const unsigned char*>(image);
  const size_t size = image_size(img);
  if (size == 0) return CUDA_ERROR_INVALID_IMAGE;
  auto* m = new Module();
  m->ctx = c;
  bool any = false;
  for (const KernelDef& k : kKernels) any = any || holds(img, size, k.name);
  for (const KernelDef& k : kKernels) {
    if (!any || holds(img, size, k.name)) m->functions[k.name] = new Function{m, &k};
  }
  Modules& ms = modules();
  std::lock_guard<std::mutex> lock(ms.mu);
  ms.modules.insert(m);
  for (auto& [name, f] : m->functions) ms.functions.insert(f);
  *module = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

PTCSI_API CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  if (CUresult r = need_init()) return r;
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Modules& ms = modules();
  std::lock_guard<std::mutex> lock(ms.mu);
  auto* m = reinterpret_cast<Module*>(hmod);
  if (ms.modules.count(m) == 0) return CUDA_ERROR_INVALID_HANDLE;
  auto it = m->functions.find(name);
  if (it == m->functions.end()) return CUDA_ERROR_NOT_FOUND;
  *hfunc = reinterpret_cast<CUfunction>(it->second);
  return CUDA_SUCCESS;
}

PTCSI_API CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                  unsigned int bx, unsigned int by, unsigned int bz,
                                  unsigned int shared_bytes, CUstream h, void** params,
                                  void** extra) {
  if (CUresult r = need_init()) return r;
  auto* fn = reinterpret_cast<Function*>(f);
  {
    Modules& ms = modules();
    std::lock_guard<std::mutex> lock(ms.mu);
    if (ms.functions.count(fn) == 0) return CUDA_ERROR_INVALID_HANDLE;
  }
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (gy > 65535 || gz > 65535 || bx > 1024 || by > 1024 || bz > 64 ||
      static_cast<unsigned long long>(bx) * by * bz > 1024 || shared_bytes > 48 * 1024) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (extra != nullptr) return params ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, &s)) return r;
  if (stream_context(*s) != fn->mod->ctx) return CUDA_ERROR_INVALID_HANDLE;
  // The values, now: the caller's argument storage may be gone by the time
  // the kernel runs.
  Args a;
  const KernelDef* k = fn->def;
  CUdeviceptr p = 0;
  std::memcpy(&p, params[0], sizeof p);
  a.p = static_cast<uintptr_t>(p);
  std::memcpy(&a.n, params[1], sizeof a.n);
  if (k->params == 3) std::memcpy(&a.d, params[2], sizeof a.d);
  enqueue(s, [a, k]() -> CUresult {
    if (a.n == 0) return CUDA_SUCCESS;
    auto lock = hold_memory();
    if (a.n > SIZE_MAX / k->esz || !device_range_held(a.p, a.n * k->esz)) {
      return fault(k->name, a.p, a.n * k->esz);
    }
    k->run(a);
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}
