// Cost per intercepted call on real hardware, measured by the program itself: run it plain, with a no-op CUPTI
// subscriber (runtime domain and cuLaunchKernel: the callback dispatch the agent's subscription costs by itself),
// with that subscriber plus kernel activity records (what any CUPTI tracer pays), and under `cuflight record`.
// scripts/gpu-validate runs the modes alternated and prints medians: the agent's own cost is traced minus
// null-subscriber-plus-activity.
// Build: nvcc -O2 -o overhead overhead.cu -I$CUPTI/include -L$CUPTI/lib64 -lcupti
// Usage: overhead [calls] [plain|null|null+activity|percbid+PIECES|ab]
//
// ab, under `cuflight record`: batches of calls alternated with the agent's callback working and skipped
// (cuflight_bench_skip_callbacks), in this one process: the median difference of paired batches per call is the
// agent's own work, with CUPTI's dispatch and records and the machine's state common to both halves.
//
// percbid+PIECES rebuilds cuflight's CUPTI configuration piece by piece with a no-op callback, to find what an
// unsubscribed call pays (issue 26: under `cuflight record` an unsubscribed cudaGetDevice cost more than with a
// no-op subscriber to the whole runtime domain). percbid: the runtime launch and the driver launch callbacks only;
// PIECES, joined by '+': activity (concurrent kernel records), kinds (memcpy, memset, memory2, synchronization and
// overhead records; or one of them alone: memcpy, memset, memory2, sync, ovh), ts (a timestamp callback on CLOCK_MONOTONIC), tid (system thread ids), driver (the driver
// callbacks cuflight enables for copies, memsets, allocations and synchronisation), api (the launches' API activity
// records, cuptiActivityEnableRuntimeApi/DriverApi, instead of their callbacks: what `--trace ...,api-records`
// makes CUPTI do).
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

static uint64_t CUPTIAPI timestamp(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int has(const char *mode, const char *piece) {
  size_t n = strlen(piece);
  for (const char *p = strstr(mode, piece); p; p = strstr(p + 1, piece))
    if ((p == mode || p[-1] == '+') && (p[n] == 0 || p[n] == '+')) return 1;
  return 0;
}

// The per-cbid configuration, piece by piece (see the header).
static int percbid(const char *mode) {
  CUpti_SubscriberHandle sub;
  if (cuptiSubscribe(&sub, noop, NULL) != CUPTI_SUCCESS) return 20;
  if (has(mode, "tid")) cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
  if (has(mode, "ts")) cuptiActivityRegisterTimestampCallback(timestamp);
  // "api": the launches' API activity records instead of their callbacks (`--trace ...,api-records`, issue 52).
  if (has(mode, "api")) {
    cuptiActivityEnableRuntimeApi(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 1);
    cuptiActivityEnableDriverApi(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 1);
  } else {
    cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000);
    cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
  }
  if (has(mode, "driver")) {
    const CUpti_CallbackId ids[] = {
        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,      CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
        CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,         CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
        CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2,     CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost,
        CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,       CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync,
        CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync,         CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2,
        CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2,       CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2,
        CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2,         CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async,
        CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize,      CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize,
        CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize,    CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent,
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, ids[i]);
  }
  cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (has(mode, "activity")) cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  // The kinds one by one (issue 26: all five together made an unsubscribed cudaGetDevice cost 43 -> 411 ns).
  const struct {
    const char *piece;
    CUpti_ActivityKind kind;
  } kinds[] = {{"memcpy", CUPTI_ACTIVITY_KIND_MEMCPY},       {"memset", CUPTI_ACTIVITY_KIND_MEMSET},
               {"memory2", CUPTI_ACTIVITY_KIND_MEMORY2},     {"sync", CUPTI_ACTIVITY_KIND_SYNCHRONIZATION},
               {"ovh", CUPTI_ACTIVITY_KIND_OVERHEAD}};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (has(mode, "kinds") || has(mode, kinds[i].piece)) {
      CUptiResult r = cuptiActivityEnable(kinds[i].kind);
      if (r != CUPTI_SUCCESS) fprintf(stderr, "cuptiActivityEnable(%s): %d\n", kinds[i].piece, (int)r);
    }
  return 0;
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

#include "../c/agent_ab.h"

static void one_get(void) {
  int dev;
  cudaGetDevice(&dev);
}

static void one_launch(void) { empty<<<1, 1>>>(); }

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 200000;
  const char *mode = argc > 2 ? argv[2] : "plain";
  int dev;
  cudaGetDevice(&dev);
  cudaFree(0);
  if (strncmp(mode, "percbid", 7) == 0) {
    int rc = percbid(mode);
    if (rc) return rc;
  } else if (strncmp(mode, "null", 4) == 0) {
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
  if (strcmp(mode, "ab") == 0) {
    return ab_report(n, n / 10, 512, one_get, one_launch);
  }
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
