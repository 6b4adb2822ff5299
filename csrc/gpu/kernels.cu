// Element-wise kernels the GPU paths need besides NCCL. Compiled by nvcc into
// a fatbin that is embedded in libpytfcomm_core and launched through the
// driver API (device.cc), so the module needs no CUDA runtime.
//
// Semantics match the CPU kernels (common/reduce_kernels.h): "mean" is a sum
// followed by one division, floats divide (no reciprocal multiply), 16-bit
// floats in float32, integers truncate toward zero; bool results are 0 or 1.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace {

template <class T, class D>
__device__ void divide_all(T* p, unsigned long long n, long long d) {
  const D dd = static_cast<D>(d);
  for (unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < n;
       i += 1ull * gridDim.x * blockDim.x) {
    p[i] = static_cast<T>(static_cast<D>(p[i]) / dd);
  }
}

}  // namespace

extern "C" {

__global__ void ptc_divide_f16(__half* p, unsigned long long n, long long d) {
  const float dd = static_cast<float>(d);
  for (unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < n;
       i += 1ull * gridDim.x * blockDim.x) {
    p[i] = __float2half_rn(__half2float(p[i]) / dd);
  }
}

__global__ void ptc_divide_bf16(__nv_bfloat16* p, unsigned long long n, long long d) {
  const float dd = static_cast<float>(d);
  for (unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < n;
       i += 1ull * gridDim.x * blockDim.x) {
    p[i] = __float2bfloat16_rn(__bfloat162float(p[i]) / dd);
  }
}

__global__ void ptc_divide_f32(float* p, unsigned long long n, long long d) {
  divide_all<float, float>(p, n, d);
}
__global__ void ptc_divide_f64(double* p, unsigned long long n, long long d) {
  divide_all<double, double>(p, n, d);
}
__global__ void ptc_divide_i8(signed char* p, unsigned long long n, long long d) {
  divide_all<signed char, int>(p, n, d);
}
__global__ void ptc_divide_u8(unsigned char* p, unsigned long long n, long long d) {
  divide_all<unsigned char, int>(p, n, d);
}
__global__ void ptc_divide_i32(int* p, unsigned long long n, long long d) {
  divide_all<int, long long>(p, n, d);
}
__global__ void ptc_divide_i64(long long* p, unsigned long long n, long long d) {
  divide_all<long long, long long>(p, n, d);
}

// NCCL reduces bool as uint8 max/min; inputs may hold any non-zero byte for
// true, and the CPU path always answers 0 or 1.
__global__ void ptc_bool_normalize(unsigned char* p, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < n;
       i += 1ull * gridDim.x * blockDim.x) {
    p[i] = p[i] != 0;
  }
}

}  // extern "C"
