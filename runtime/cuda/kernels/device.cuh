// Device helpers every kernel module uses. CuPy compiles every kernel with -ftz=true
// (user options cannot undo it), which flushes subnormal operands and results of float32
// instructions to zero: so the kernels never do float32 arithmetic on data. They read float32
// values as bits (magnitudes compare as unsigned integers), widen them to double exactly, compute
// in double, and round back to float32 with their own subnormal-aware rounding.

#include <cuda_fp16.h>

// 2^e as a double, built from its bits (exact for -1022 <= e <= 1023); x * pow2(e) equals
// ldexp(x, e) whenever the result is a normal double, which the contract guarantees here.
__device__ __forceinline__ double pow2(int e)
{
    return __longlong_as_double((long long)(e + 1023) << 52);
}

// |x| as float32 bits: for finite values, unsigned order is magnitude order.
__device__ __forceinline__ unsigned int magnitude_bits(float x)
{
    return __float_as_uint(x) & 0x7fffffffu;
}

__device__ __forceinline__ bool finite_bits(float x)
{
    return magnitude_bits(x) < 0x7f800000u;
}

// float32 -> float64, exactly, subnormals, infinities and NaN payloads included.
__device__ __forceinline__ double exact_double(float x)
{
    const unsigned int u = __float_as_uint(x);
    const unsigned long long sign = (unsigned long long)(u >> 31) << 63;
    const unsigned int exponent = (u >> 23) & 0xffu, fraction = u & 0x7fffffu;
    if (exponent == 0) {  // zero or subnormal: fraction * 2^-149, exact in double
        const double v = (double)fraction * pow2(-149);
        return sign ? -v : v;
    }
    const unsigned long long e64 = exponent == 0xffu ? 0x7ffull : exponent - 127ull + 1023ull;
    const unsigned long long bits = sign | (e64 << 52) | ((unsigned long long)fraction << 29);
    return __longlong_as_double((long long)bits);
}

__device__ __forceinline__ double exact_double(double x) { return x; }
__device__ __forceinline__ double exact_double(int x) { return (double)x; }

// float64 -> float32, round to nearest even, subnormal results kept (NumPy's astype).
__device__ __forceinline__ float round_to_float(double d)
{
    if (!(fabs(d) < pow2(-126))) return (float)d;  // normal, overflow to inf, or NaN
    const int m = __double2int_rn(fabs(d) * pow2(149));  // < 2^23 (2^23: the smallest normal)
    return __uint_as_float((signbit(d) ? 0x80000000u : 0u) | (unsigned int)m);
}

// combine.saturate: float32(v), or +-FLT_MAX where v would overflow only by less than the
// level's error bound k_slack * 2^scale.
__device__ __forceinline__ float saturate(double v, int scale, double k_slack)
{
    if (fabs(v) >= OVERFLOW_THRESHOLD && fabs(v) - k_slack * pow2(scale) < OVERFLOW_THRESHOLD)
        return __uint_as_float((signbit(v) ? 0x80000000u : 0u) | 0x7f7fffffu);
    return round_to_float(v);
}

// Asynchronous copies into shared memory (cp.async, sm_80 and later; on older GPUs plain loads
// and stores, so the module still builds there). A copy of 0 source bytes writes zeros.
template <int BYTES>
__device__ __forceinline__ void copy_async(void* dst, const void* src, bool inside)
{
#if __CUDA_ARCH__ >= 800
    const unsigned to = (unsigned)__cvta_generic_to_shared(dst);
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
    if constexpr (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                     :: "r"(to), "l"(src), "r"(inside ? 16 : 0) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;"
                     :: "r"(to), "l"(src), "n"(BYTES), "r"(inside ? BYTES : 0) : "memory");
#else
    if constexpr (BYTES == 16)
        *reinterpret_cast<float4*>(dst) =
            inside ? *reinterpret_cast<const float4*>(src) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    else if constexpr (BYTES == 8)
        *reinterpret_cast<double*>(dst) = inside ? *reinterpret_cast<const double*>(src) : 0.0;
    else
        *reinterpret_cast<float*>(dst) = inside ? *reinterpret_cast<const float*>(src) : 0.0f;
#endif
}

__device__ __forceinline__ void copies_commit()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

template <int PENDING>  // wait until at most PENDING committed groups are still in flight
__device__ __forceinline__ void copies_wait()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" :: "n"(PENDING) : "memory");
#endif
}

// The canonical quiet NaN every backend writes (nonfinite.py).
__device__ __forceinline__ float canonical(double d)
{
    return isnan(d) ? __uint_as_float(0x7fc00000u) : round_to_float(d);
}
