// Cost per intercepted call on real hardware, measured by the program itself: run it plain, with a no-op CUPTI
// subscriber (runtime domain and cuLaunchKernel: the callback dispatch the agent's subscription costs by itself),
// with that subscriber plus kernel activity records (what any CUPTI tracer pays), and under `cuflight record`.
// scripts/gpu-validate runs the modes alternated and prints medians: the agent's own cost is traced minus
// null-subscriber-plus-activity.
// Build: nvcc -O2 -o overhead overhead.cu -I$CUPTI/include -L$CUPTI/lib64 -lcupti
// Usage: overhead [calls] [plain|null|null+activity]
#include <cuda_runtime.h>
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__global__ void empty(void) {}

static void CUPTIAPI noop(void *u, CUpti_CallbackDomain d, CUpti_CallbackId c, const void *data) {}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *size = 8 << 20;
  *buffer = (uint8_t *)aligned_alloc(8, *size);
  *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
  free(buffer);
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 200000;
  const char *mode = argc > 2 ? argv[2] : "plain";
  int dev;
  cudaGetDevice(&dev);
  cudaFree(0);
  if (strncmp(mode, "null", 4) == 0) {
    CUpti_SubscriberHandle sub;
    if (cuptiSubscribe(&sub, noop, NULL) != CUPTI_SUCCESS) return 20;
    cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API);
    cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
    if (strcmp(mode, "null+activity") == 0) {
      cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    }
  }
  for (int i = 0; i < 1000; i++) empty<<<1, 1>>>();
  cudaDeviceSynchronize();
  double t0 = now_ns();
  for (long i = 0; i < n; i++) cudaGetDevice(&dev);
  double t1 = now_ns();
  // Launches in batches the GPU's queue holds, drained between batches outside the timed part.
  long launches = n / 10, done = 0;
  double launch_total = 0;
  while (done < launches) {
    long batch = launches - done < 512 ? launches - done : 512;
    double a = now_ns();
    for (long i = 0; i < batch; i++) empty<<<1, 1>>>();
    launch_total += now_ns() - a;
    cudaDeviceSynchronize();
    done += batch;
  }
  printf("cudaGetDevice_ns %.1f\n", (t1 - t0) / n);
  printf("cudaLaunchKernel_ns %.1f\n", launch_total / launches);
  return 0;
}
