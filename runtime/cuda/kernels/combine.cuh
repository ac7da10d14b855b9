// The combine kernels (``combine``; launched from sliced.py): the class sums, weighted and
// added in the CPU oracle's order, into float32 C, bit for bit.

#include "device.cuh"

// Four consecutive class sums as one 16-byte load (p 16-byte aligned), widened exactly.
__device__ __forceinline__ void load4(const int* p, double (&v)[4])
{
    const int4 x = *reinterpret_cast<const int4*>(p);
    v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w;
}

__device__ __forceinline__ void load4(const float* p, double (&v)[4])
{
    const float4 x = *reinterpret_cast<const float4*>(p);
    v[0] = exact_double(x.x); v[1] = exact_double(x.y);
    v[2] = exact_double(x.z); v[3] = exact_double(x.w);
}

__device__ __forceinline__ void load4(const double* p, double (&v)[4])
{
    const double2 x = reinterpret_cast<const double2*>(p)[0];
    const double2 y = reinterpret_cast<const double2*>(p)[1];
    v[0] = x.x; v[1] = x.y; v[2] = y.x; v[3] = y.y;
}

// C = float32(2^(row_exp + col_exp + exp_offset) * sum_g sums[g] * 2^-(w0 + step * g)),
// summed from the largest g (smallest weight) down. Stacks: product z = blockIdx.z + batch0
// has its sums and output z * m * n entries in, its lines' scales and flags z * m and z * n.
// VEC = 4: each thread takes four neighbouring entries with vector loads and one float4 store
// (n % 4 == 0, sums and c 16-byte aligned); entries of flagged lines get a value too, which
// bypass_lines, launched after, overwrites.
template <typename Sum, int VEC>
__device__ void combine_impl(
    const Sum* __restrict__ sums, int groups, long long group_stride, int w0, int step,
    int exp_offset, double k_slack,
    const int* __restrict__ row_exp, const int* __restrict__ col_exp,
    const int* __restrict__ row_bad, const int* __restrict__ col_bad,
    int m, int n, int batch0, float* __restrict__ c)
{
    const long long z = blockIdx.z + (long long)batch0;
    sums += z * m * n;
    c += z * m * n;
    row_exp += z * m;
    row_bad += z * m;
    col_exp += z * n;
    col_bad += z * n;
    for (int r = blockIdx.y; r < m; r += gridDim.y) {
        for (int col = VEC * (blockIdx.x * blockDim.x + threadIdx.x); col < n;
             col += VEC * gridDim.x * blockDim.x) {
            const long long idx = (long long)r * n + col;
            if constexpr (VEC == 1) {
                if (row_bad[r] | col_bad[col]) continue;  // bypass_lines writes it
                double acc = 0.0;
                for (int g = groups - 1; g >= 0; --g)  // smallest weight first (combine.combine)
                    acc = acc + exact_double(sums[g * group_stride + idx]) * pow2(-(w0 + step * g));
                const int scale = row_exp[r] + col_exp[col];
                c[idx] = saturate(acc * pow2(scale + exp_offset), scale, k_slack);
            } else {
                double acc[4] = {0.0, 0.0, 0.0, 0.0};
                for (int g = groups - 1; g >= 0; --g) {
                    double v[4];
                    load4(sums + g * group_stride + idx, v);
                    const double weight = pow2(-(w0 + step * g));
                    for (int t = 0; t < 4; ++t) acc[t] = acc[t] + v[t] * weight;
                }
                const int4 col_e = *reinterpret_cast<const int4*>(col_exp + col);
                const int scales[4] = {row_exp[r] + col_e.x, row_exp[r] + col_e.y,
                                       row_exp[r] + col_e.z, row_exp[r] + col_e.w};
                float out[4];
                for (int t = 0; t < 4; ++t)
                    out[t] = saturate(acc[t] * pow2(scales[t] + exp_offset), scales[t], k_slack);
                *reinterpret_cast<float4*>(c + idx) = make_float4(out[0], out[1], out[2], out[3]);
            }
        }
    }
}

