// Kernels of known character for `cuflight record --gpu-metrics` (issue 50), each with a figure computed without
// counters: a streaming float4 copy (bytes moved / kernel time, against the DRAM peak the device attributes give:
// memory clock x bus width x 2), an FMA loop on registers (compute-bound, DRAM idle) and bf16 cuBLAS GEMMs
// (2*m*n*k / time). Each phase's kernels run back to back for about 0.5 s; the event-timed rates go to
// OUT/measured.json for scripts/gpu-validate to set against the counters `stats --report gpu_metrics` joins to
// the same kernels. Usage: counter_kernels OUT_DIR.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#define CUDA_OK(x)                                                                                \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));          \
      exit(2);                                                                                    \
    }                                                                                             \
  } while (0)

__global__ void stream_copy(const float4* __restrict__ in, float4* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = in[i];
}

__global__ void fma_loop(float* out, int iterations) {
  float a = threadIdx.x * 1e-3f, b = 1.0001f, c = 1e-4f, d = 0.5f;
  for (int i = 0; i < iterations; i++) {
    a = fmaf(a, b, c);
    d = fmaf(d, b, c);
  }
  if (a + d == 12345.0f) out[threadIdx.x] = a + d;  // never true: keeps the loop without a store
}

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : ".";
  int sms = 0, mem_khz = 0, bus_bits = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CUDA_OK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, 0));
  CUDA_OK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0));
  double dram_peak = 2.0 * mem_khz * 1e3 * bus_bits / 8.0;  // bytes/s, double data rate
  size_t n4 = (size_t)1 << 26;                               // 1 GiB each way
  float4 *in, *out;
  float* sink;
  CUDA_OK(cudaMalloc(&in, n4 * sizeof(float4)));
  CUDA_OK(cudaMalloc(&out, n4 * sizeof(float4)));
  CUDA_OK(cudaMemset(in, 1, n4 * sizeof(float4)));
  CUDA_OK(cudaMalloc(&sink, 4096));
  int m = 8192;
  __nv_bfloat16 *A, *B, *C;
  size_t mm = (size_t)m * m * sizeof(__nv_bfloat16);
  CUDA_OK(cudaMalloc(&A, mm));
  CUDA_OK(cudaMalloc(&B, mm));
  CUDA_OK(cudaMalloc(&C, mm));
  CUDA_OK(cudaMemset(A, 0, mm));
  CUDA_OK(cudaMemset(B, 0, mm));
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) return 2;
  cudaEvent_t e0, e1;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  float one = 1, zero = 0;
  auto gemm = [&] {
    cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, &one, A, CUDA_R_16BF, m, B, CUDA_R_16BF, m, &zero, C,
                 CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  gemm();  // cuBLAS picks its kernel; clocks rise
  for (int r = 0; r < 10; r++) stream_copy<<<sms * 8, 512>>>(in, out, n4);
  CUDA_OK(cudaDeviceSynchronize());
  float ms[3];
  const int copies = 600, fmas = 100, gemms = 400;
  CUDA_OK(cudaEventRecord(e0));
  for (int r = 0; r < copies; r++) stream_copy<<<sms * 8, 512>>>(in, out, n4);
  CUDA_OK(cudaEventRecord(e1));
  CUDA_OK(cudaEventSynchronize(e1));
  CUDA_OK(cudaEventElapsedTime(&ms[0], e0, e1));
  CUDA_OK(cudaEventRecord(e0));
  for (int r = 0; r < fmas; r++) fma_loop<<<sms * 16, 256>>>(sink, 100000);
  CUDA_OK(cudaEventRecord(e1));
  CUDA_OK(cudaEventSynchronize(e1));
  CUDA_OK(cudaEventElapsedTime(&ms[1], e0, e1));
  CUDA_OK(cudaEventRecord(e0));
  for (int r = 0; r < gemms; r++) gemm();
  CUDA_OK(cudaEventRecord(e1));
  CUDA_OK(cudaEventSynchronize(e1));
  CUDA_OK(cudaEventElapsedTime(&ms[2], e0, e1));
  double copy_bps = copies * 2.0 * n4 * sizeof(float4) / (ms[0] * 1e-3);
  double gemm_flops = gemms * 2.0 * m * (double)m * m / (ms[2] * 1e-3);
  FILE* f = fopen((dir + "/measured.json").c_str(), "w");
  if (!f) return 2;
  fprintf(f,
          "{\"dram_peak_bps\": %.6g, \"copy_bps\": %.6g, \"copy_ms\": %.3f, \"fma_ms\": %.3f, \"gemm_flops\": %.6g, "
          "\"gemm_ms\": %.3f}\n",
          dram_peak, copy_bps, ms[0], ms[1], gemm_flops, ms[2]);
  fclose(f);
  printf("copy %.1f GB/s (%.1f%% of %.1f GB/s), gemm %.1f TFLOP/s; phases %.1f %.1f %.1f ms\n", copy_bps / 1e9,
         100 * copy_bps / dram_peak, dram_peak / 1e9, gemm_flops / 1e12, ms[0], ms[1], ms[2]);
  return 0;
}
