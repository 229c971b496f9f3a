// Kernels of IteraGPU Lab's CUDA device: what cuBLAS does not do for the synthetic model (the
// seeded inputs, GELU, and the bias broadcast of a Linear off the cuBLASLt path). A Linear is one
// cuBLASLt matmul with the BIAS epilogue where torch 2.11 takes that path; where it does not (a
// dimension of 1, see lab::workspaces), it copies the bias into the output and runs cublasGemmEx
// with beta = 1, as PyTorch does.
//
// Compiled ahead of time with NVRTC (no headers needed) to PTX for compute_80 and with ptxas to
// cubins (scripts/build-kernels.sh); the outputs in kernels/generated/ are embedded in the binary.
// float16 and bfloat16 are stored as their 16-bit patterns; every conversion uses PTX's
// round-to-nearest-even cvt, which is what the host's `DType::round` (the `half` crate) does.
// All arithmetic is float32. Every kernel walks its range with a grid-stride loop on 64-bit
// indices, so any grid size is correct.

typedef unsigned long long u64;
typedef unsigned short u16;

__device__ __forceinline__ float f16_to_f32(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ u16 f32_to_f16(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float bf16_to_f32(u16 h) {
    return __uint_as_float(((unsigned int)h) << 16);
}

__device__ __forceinline__ u16 f32_to_bf16(float f) {
    u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// ---- Seeded inputs: lab::measure::synthetic::input_value, bit for bit. ----

// SplitMix64's finaliser (lab::measure::synthetic::mix64).
__device__ __forceinline__ u64 mix64(u64 z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// symmetric_unit(seed, STREAM_INPUTS = 0, index): 24 random bits scaled to [-1, 1). Every step is
// exact in float32; the _rn intrinsics keep the compiler from fusing them anyway.
__device__ __forceinline__ float input_value(u64 key, u64 index) {
    u64 bits = mix64(key ^ (index * 0x9E3779B97F4A7C15ULL));
    unsigned int k = (unsigned int)(bits >> 40);
    return __fadd_rn(__fmul_rn((float)k, 1.1920928955078125e-07f), -1.0f);
}

// key = mix64(seed ^ stream * 0xD1B54A32D192ED03) with stream 0.
extern "C" __global__ void inputs_f32(float* out, u64 n, u64 seed) {
    u64 key = mix64(seed);
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        out[i] = input_value(key, i);
    }
}

extern "C" __global__ void inputs_f16(u16* out, u64 n, u64 seed) {
    u64 key = mix64(seed);
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        out[i] = f32_to_f16(input_value(key, i));
    }
}

extern "C" __global__ void inputs_bf16(u16* out, u64 n, u64 seed) {
    u64 key = mix64(seed);
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        out[i] = f32_to_bf16(input_value(key, i));
    }
}

// ---- Exact GELU, as nn.GELU() by default: 0.5 x (1 + erf(x / sqrt 2)) in float32. ----

__device__ __forceinline__ float gelu(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

extern "C" __global__ void gelu_f32(const float* x, float* y, u64 n) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        y[i] = gelu(x[i]);
    }
}

extern "C" __global__ void gelu_f16(const u16* x, u16* y, u64 n) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        y[i] = f32_to_f16(gelu(f16_to_f32(x[i])));
    }
}

extern "C" __global__ void gelu_bf16(const u16* x, u16* y, u64 n) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        y[i] = f32_to_bf16(gelu(bf16_to_f32(x[i])));
    }
}

// ---- Bias broadcast: out[r, c] = bias[c] for every row, before a cublasGemmEx with beta = 1. ----
// What torch's at::native::copy_(result, bias.expand(result.sizes())) does on that path. The
// element patterns are copied unchanged, so one kernel per element width serves every dtype.

extern "C" __global__ void bias_rows_b32(const unsigned int* bias, unsigned int* out, u64 n, u64 cols) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        out[i] = bias[i % cols];
    }
}

extern "C" __global__ void bias_rows_b16(const u16* bias, u16* out, u64 n, u64 cols) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        out[i] = bias[i % cols];
    }
}
