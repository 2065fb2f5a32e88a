// Attach/detach cycles of CUPTI inside one running process, on real hardware: the facts the always-on agent
// (issue 11) stands on. Per the CUPTI documentation, CUPTI initialises lazily on any CUPTI call (so it can be
// attached after contexts exist) and cuptiFinalize() detaches it, preferably from the exit callsite of a CUDA API
// call. This program checks, for CYCLES cycles: every kernel launched while attached arrives as an activity
// record (exact count), none arrives while detached, the launch cost after detaching returns to what it was
// before the first attach, and resident memory stays flat.
// Where memory grows (an H200 kept about 95 KB a cycle, issue 30), it says where: resident bytes by kind of
// mapping (heap, anonymous, file-backed), glibc's heap in use and free (mallinfo2), threads and mappings, and what
// malloc_trim(0) gives back at the end (freed memory glibc kept, as against memory still in use). MODE cuts the
// cycle down, to find the step that keeps memory: `full` (the default: subscribe, runtime callbacks, kernel
// records, finalize), `callbacks` (no activity API), `subscribe` (subscribe and finalize only), and `keep`: one
// subscriber for the whole run, each window enabling the runtime domain and kernel records and disabling them again
// (cuptiEnableDomain(0), cuptiActivityDisable, a flush) instead of finalizing: whether a duty-cycled agent that
// keeps CUPTI between windows escapes the per-cycle memory, and what a disabled subscriber costs a launch.
// MODE+unsub (full+unsub, subscribe+unsub) calls cuptiUnsubscribe before each cuptiFinalize, as Kineto does
// (pytorch/kineto#739): whether the memory a cycle keeps is the subscriber's, which a finalize alone leaves.
// Build: nvcc -O2 -o attach_cycles attach_cycles.cu -I$CUPTI/include -L$CUPTI/lib64 -lcupti
// Usage: attach_cycles [CYCLES] [KERNELS_PER_WINDOW] [MODE]
#include <cuda_runtime.h>
#include <cupti.h>
#include <malloc.h>
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
static int unsubscribe_first;
static CUpti_SubscriberHandle current;

// Ends the session: cuptiFinalize, after cuptiUnsubscribe in the +unsub modes.
static void finalize(void) {
  if (unsubscribe_first) CHECK_CUPTI(cuptiUnsubscribe(current));
  CHECK_CUPTI(cuptiFinalize());
}

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
    finalize();
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

// Where the process's memory is: resident KB by kind of mapping (/proc/self/smaps), glibc's heap, threads.
struct Memory {
  long heap_kb, anon_kb, file_kb, other_kb, mappings, threads;
  long malloc_used_kb, malloc_free_kb, malloc_mmap_kb;
};

static Memory memory_now(void) {
  Memory m = {};
  FILE *f = fopen("/proc/self/smaps", "r");
  char line[512];
  int kind = 3;  // of the mapping whose fields follow: 0 heap, 1 anonymous, 2 file, 3 other
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    long kb;
    if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && strchr(line, ' ')) {
      m.mappings++;
      const char *path = strchr(line, '/');
      if (strstr(line, "[heap]")) kind = 0;
      else if (path) kind = 2;
      else if (strchr(line, '[')) kind = 3;
      else kind = 1;
    } else if (sscanf(line, "Rss: %ld kB", &kb) == 1) {
      long *to[] = {&m.heap_kb, &m.anon_kb, &m.file_kb, &m.other_kb};
      *to[kind] += kb;
    }
  }
  if (f) fclose(f);
  f = fopen("/proc/self/status", "r");
  while (f && fgets(line, sizeof line, f)) sscanf(line, "Threads: %ld", &m.threads);
  if (f) fclose(f);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  struct mallinfo2 mi = mallinfo2();
  m.malloc_used_kb = (long)(mi.uordblks / 1024);
  m.malloc_free_kb = (long)(mi.fordblks / 1024);
  m.malloc_mmap_kb = (long)(mi.hblkhd / 1024);
#endif
  return m;
}

static void print_growth(const char *what, Memory a, Memory b, int cycles) {
  printf("%s over %d cycles: heap %+ld KB, anonymous %+ld KB, file-backed %+ld KB, other %+ld KB; malloc in use %+ld KB, "
         "free %+ld KB, mmapped %+ld KB; mappings %+ld, threads %+ld\n",
         what, cycles, b.heap_kb - a.heap_kb, b.anon_kb - a.anon_kb, b.file_kb - a.file_kb, b.other_kb - a.other_kb,
         b.malloc_used_kb - a.malloc_used_kb, b.malloc_free_kb - a.malloc_free_kb, b.malloc_mmap_kb - a.malloc_mmap_kb,
         b.mappings - a.mappings, b.threads - a.threads);
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
  char mode[64];
  snprintf(mode, sizeof mode, "%s", argc > 3 ? argv[3] : "full");
  char *plus = strstr(mode, "+unsub");
  if (plus && plus[6] == 0) {
    unsubscribe_first = 1;
    *plus = 0;
  }
  int keep = strcmp(mode, "keep") == 0;
  int activity = keep || strcmp(mode, "full") == 0, callbacks = activity || strcmp(mode, "callbacks") == 0;
  if (!activity && !callbacks && strcmp(mode, "subscribe") != 0) {
    fprintf(stderr, "attach_cycles: MODE is full, callbacks, subscribe or keep\n");
    return 2;
  }
  cudaFree(0);  // contexts exist before CUPTI is touched: the attach case
  launch_ns(2000);
  long rss0 = rss_kb();
  double before = median_launch_ns(7, 5000);
  int bad_windows = 0, leaked = 0, callback_detaches = 0;
  long rss_after_first = 0;
  Memory before_all = memory_now(), after_first = before_all;
  double attached_ns = 0;
  CUpti_SubscriberHandle sub;
  for (int c = 0; c < cycles; c++) {
    kernel_records = 0;
    if (!keep || c == 0) CHECK_CUPTI(cuptiSubscribe(&sub, on_api, NULL));
    current = sub;
    if (callbacks) CHECK_CUPTI(cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API));
    if (activity && (!keep || c == 0)) CHECK_CUPTI(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    if (activity) CHECK_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    double t0 = now_ns();
    for (int i = 0; i < per_window; i++) tick<<<1, 1>>>(NULL);
    attached_ns += (now_ns() - t0) / per_window;
    cudaDeviceSynchronize();
    if (keep) {  // the window ends without finalizing: callbacks and records off, what was recorded delivered
      CHECK_CUPTI(cuptiEnableDomain(0, sub, CUPTI_CB_DOMAIN_RUNTIME_API));
      CHECK_CUPTI(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
      CHECK_CUPTI(cuptiActivityFlushAll(1));
    }
    detach_requested = !keep;
    detached_in_callback = 0;
    cudaGetLastError();  // any runtime call: its exit callback detaches
    callback_detaches += detached_in_callback;
    detach_requested = 0;  // no exit callback came (callbacks off): the next window must not detach at once
    if (!detached_in_callback && !keep) {
      cuptiActivityFlushAll(1);
      finalize();
    }
    if (activity && kernel_records != per_window) {
      bad_windows++;
      if (bad_windows <= 3) fprintf(stderr, "cycle %d: %ld kernel records, want %d\n", c, kernel_records, per_window);
    }
    long during = kernel_records;
    for (int i = 0; i < per_window; i++) tick<<<1, 1>>>(NULL);
    cudaDeviceSynchronize();
    if (kernel_records != during) leaked++;
    if (c == 0) {
      rss_after_first = rss_kb();
      after_first = memory_now();
    }
  }
  double after = median_launch_ns(7, 5000);  // keep: with the disabled subscriber still there
  long rss1 = rss_kb();
  Memory after_all = memory_now();
  if (keep) CHECK_CUPTI(cuptiFinalize());
  printf("cycles %d, kernels per window %d, mode %s%s\n", cycles, per_window, mode, unsubscribe_first ? "+unsub" : "");
  printf("windows with the exact kernel count: %d of %d\n", cycles - bad_windows, cycles);
  printf("detached windows that still produced records: %d\n", leaked);
  printf("detaches done in an API exit callback: %d of %d\n", callback_detaches, cycles);
  print_growth("growth in the first cycle", before_all, after_first, 1);
  print_growth("growth after the first cycle", after_first, after_all, cycles - 1);
  printf("launch ns: before any attach %.0f, attached (mean) %.0f, after %d detaches %.0f (%+.1f%%)\n", before,
         attached_ns / cycles, cycles, after, (after / before - 1) * 100);
  printf("RSS KB: before %ld, after the first cycle %ld, after all %ld (growth after the first cycle %ld)\n", rss0,
         rss_after_first, rss1, rss1 - rss_after_first);
  malloc_trim(0);
  long rss_trimmed = rss_kb();
  printf("malloc_trim(0) at the end gave back %ld KB (RSS %ld KB after it)\n", rss1 - rss_trimmed, rss_trimmed);
  if (callbacks && !activity) printf("(callbacks mode: a detach happens in the exit callback, no records expected)\n");
  if (keep) printf("(keep mode: one subscriber, windows enabled and disabled; the launch after is with it disabled)\n");
  if (!callbacks) printf("(subscribe mode: no callbacks enabled, every detach finalizes outside a callback)\n");
  int ok = bad_windows == 0 && leaked == 0;
  printf("attach_cycles: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
