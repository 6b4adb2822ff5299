// Baseline kernel set: compiled with the project's default flags (SSE2 on
// x86-64, or whatever the target offers), so it runs on any CPU. Must not be
// built with -march=native or other ISA flags: it is the fallback.
#define PTC_REDUCE_NS reduce_generic
#include "common/reduce_kernels.h"
#include "common/reduce_internal.h"

namespace pytfcomm {
namespace reduce_internal {

using GenericDispatch = reduce_generic::Dispatch<reduce_generic::ScalarLoops16>;

const Kernels kGenericKernels = {"generic", &GenericDispatch::reduce,
                                 &GenericDispatch::reduce_divide, &GenericDispatch::divide};

}  // namespace reduce_internal
}  // namespace pytfcomm
