// Baseline kernel set: compiled with the project's default flags (SSE2 on
// x86-64, or whatever the target offers), so it runs on any CPU. Must not be
// built with -march=native or other ISA flags: it is the fallback.
#define PTC_REDUCE_NS reduce_generic
#define PTC_REDUCE_VEC_BYTES 16  // SSE2 / NEON width
#include "common/reduce_internal.h"
#include "common/reduce_kernels.h"

namespace pytfcomm {
namespace reduce_internal {

using GenericSet = reduce_generic::KernelSet<reduce_generic::PortableVec>;

const Kernels kGenericKernels = {"generic", &GenericSet::reduce, &GenericSet::reduce_divide,
                                 &GenericSet::divide, &GenericSet::reduce_many};

}  // namespace reduce_internal
}  // namespace pytfcomm
