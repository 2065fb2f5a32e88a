// Attach/detach cycles of CUPTI inside one running process, on real hardware: the facts the always-on agent
// (issue 11) stands on. Per the CUPTI documentation, CUPTI initialises lazily on any CUPTI call (so it can be
// attached after contexts exist) and cuptiFinalize() detaches it, preferably from the exit callsite of a CUDA API
// call. This program checks, for CYCLES cycles: every kernel launched while attached arrives as an activity
// record (exact count), none arrives while detached, the launch cost after detaching returns to what it was
// before the first attach, and resident memory stays flat.
// Build: nvcc -O2 -o attach_cycles attach_cycles.cu -I$CUPTI/include -L$CUPTI/lib64 -lcupti
// Usage: attach_cycles [CYCLES] [KERNELS_PER_WINDOW]
#include <cuda_runtime.h>
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK_CUPTI(call)                                                          \
  do {                                                                             \
    CUptiResult r_ = (call);                                                       \
    if (r_ != CUPTI_SUCCESS) {                                                     \
      const char *s_ = "?";                                                        \
      cuptiGetResultString(r_, &s_);                                               \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, s_);    \
      exit(2);                                                                     \
    }                                                                              \
  } while (0)

__global__ void tick(int *p) {
  if (p) atomicAdd(p, 1);
}

static volatile long kernel_records;
static volatile int detach_requested, detached_in_callback;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *size = 1 << 20;
  *buffer = (uint8_t *)aligned_alloc(8, *size);
  *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
  CUpti_Activity *record = NULL;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL)
      kernel_records++;
  }
  free(buffer);
}

// Detaches from the exit callsite of a runtime API call, as NVIDIA recommends for cuptiFinalize.
static void CUPTIAPI on_api(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data) {
  const CUpti_CallbackData *cb = (const CUpti_CallbackData *)data;
  if (cb->callbackSite == CUPTI_API_EXIT && detach_requested) {
    detach_requested = 0;
    cuptiActivityFlushAll(1);
    CHECK_CUPTI(cuptiFinalize());
    detached_in_callback = 1;
  }
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static long rss_kb(void) {
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

// Nanoseconds per cudaLaunchKernel over n launches (the queue drained first and after).
static double launch_ns(int n) {
  cudaDeviceSynchronize();
  double t0 = now_ns();
  for (int i = 0; i < n; i++) tick<<<1, 1>>>(NULL);
  double t1 = now_ns();
  cudaDeviceSynchronize();
  return (t1 - t0) / n;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median_launch_ns(int rounds, int n) {
  double v[16];
  for (int i = 0; i < rounds; i++) v[i] = launch_ns(n);
  qsort(v, rounds, sizeof(double), cmp_double);
  return v[rounds / 2];
}

int main(int argc, char **argv) {
  int cycles = argc > 1 ? atoi(argv[1]) : 100;
  int per_window = argc > 2 ? atoi(argv[2]) : 50;
  cudaFree(0);  // contexts exist before CUPTI is touched: the attach case
  launch_ns(2000);
  long rss0 = rss_kb();
  double before = median_launch_ns(7, 5000);
  int bad_windows = 0, leaked = 0, callback_detaches = 0;
  long rss_after_first = 0;
  double attached_ns = 0;
  for (int c = 0; c < cycles; c++) {
    kernel_records = 0;
    CUpti_SubscriberHandle sub;
    CHECK_CUPTI(cuptiSubscribe(&sub, on_api, NULL));
    CHECK_CUPTI(cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API));
    CHECK_CUPTI(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    CHECK_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    double t0 = now_ns();
    for (int i = 0; i < per_window; i++) tick<<<1, 1>>>(NULL);
    attached_ns += (now_ns() - t0) / per_window;
    cudaDeviceSynchronize();
    detach_requested = 1;
    detached_in_callback = 0;
    cudaGetLastError();  // any runtime call: its exit callback detaches
    callback_detaches += detached_in_callback;
    if (!detached_in_callback) {
      cuptiActivityFlushAll(1);
      CHECK_CUPTI(cuptiFinalize());
    }
    if (kernel_records != per_window) {
      bad_windows++;
      if (bad_windows <= 3) fprintf(stderr, "cycle %d: %ld kernel records, want %d\n", c, kernel_records, per_window);
    }
    long during = kernel_records;
    for (int i = 0; i < per_window; i++) tick<<<1, 1>>>(NULL);
    cudaDeviceSynchronize();
    if (kernel_records != during) leaked++;
    if (c == 0) rss_after_first = rss_kb();
  }
  double after = median_launch_ns(7, 5000);
  long rss1 = rss_kb();
  printf("cycles %d, kernels per window %d\n", cycles, per_window);
  printf("windows with the exact kernel count: %d of %d\n", cycles - bad_windows, cycles);
  printf("detached windows that still produced records: %d\n", leaked);
  printf("detaches done in an API exit callback: %d of %d\n", callback_detaches, cycles);
  printf("launch ns: before any attach %.0f, attached (mean) %.0f, after %d detaches %.0f (%+.1f%%)\n", before,
         attached_ns / cycles, cycles, after, (after / before - 1) * 100);
  printf("RSS KB: before %ld, after the first cycle %ld, after all %ld (growth after the first cycle %ld)\n", rss0,
         rss_after_first, rss1, rss1 - rss_after_first);
  int ok = bad_windows == 0 && leaked == 0;
  printf("attach_cycles: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
