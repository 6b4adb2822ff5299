// Element-wise reductions of the stand-in (one job: the arithmetic).
//
// Integers wrap in two's complement exactly as the GPU's do (so results are
// bit-exact with NCCL's); float16 and bfloat16 are computed in float32 and
// rounded back to nearest-even after every operation. Ranks' inputs are
// combined in rank order, so every rank gets the same bits. ncclAvg is the
// sum divided by nranks (integers: C++ truncating division of the wrapped
// sum; floats: one division, 16-bit types rounded once more).
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>

namespace ptcsi_nccl {

// Bytes per element; 0 for a type the stand-in does not support.
size_t type_size(ncclDataType_t t);
const char* type_name(ncclDataType_t t);
const char* op_name(ncclRedOp_t op);
bool op_supported(ncclRedOp_t op);

// out[i] = in[0][i] (op) in[1][i] ... (op) in[n-1][i], for i < count.
// out may alias any in[k].
void reduce(ncclDataType_t t, ncclRedOp_t op, void* out, const void* const* in, int n,
            size_t count);

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);

}  // namespace ptcsi_nccl
