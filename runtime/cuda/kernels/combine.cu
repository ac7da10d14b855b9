// The combine module (built by build.py, with the prelude of sources.py in front): the combine
// and bypass kernels of the sliced levels, and level fp32-ordered's kernels.

#include "device.cuh"
#include "combine.cuh"
#include "bypass.cuh"
#include "ordered.cuh"
#include "ordered_rows.cuh"
#include "ordered_thin.cuh"

// The combine kernels, one per class-sum type (int32, float64 or float32 sums) and width (one
// entry a thread, or four: combine4_*); CuPy's RawModule looks them up by name.
#define COMBINE_ENTRY(NAME, SUM, VEC)                                                              \
extern "C" __global__ void NAME(                                                                   \
    const SUM* sums, int groups, long long group_stride, int w0, int step, int exp_offset,         \
    double k_slack, const int* row_exp, const int* col_exp, const int* row_bad,                    \
    const int* col_bad, int m, int n, int batch0, float* c)                                        \
{                                                                                                  \
    combine_impl<SUM, VEC>(sums, groups, group_stride, w0, step, exp_offset, k_slack, row_exp,     \
                           col_exp, row_bad, col_bad, m, n, batch0, c);                            \
}
COMBINE_ENTRY(combine_int32, int, 1)
COMBINE_ENTRY(combine4_int32, int, 4)
COMBINE_ENTRY(combine_float64, double, 1)
COMBINE_ENTRY(combine4_float64, double, 4)
COMBINE_ENTRY(combine_float32, float, 1)
COMBINE_ENTRY(combine4_float32, float, 4)
#undef COMBINE_ENTRY
