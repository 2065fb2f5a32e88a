/* Paths the other programs do not take. Expected (tests/tests/capture.rs):
 *  - driver API: 3 cuLaunchKernel of "drv_kernel", 1 cuMemAlloc_v2 + 1 cuMemFree_v2 of 4096 bytes;
 *  - __cudaRegisterFunction names host function `registered_impl` "my_registered_kernel" (2 launches);
 *  - stream-ordered cudaMallocAsync/cudaFreeAsync of 8192 bytes; cudaHostAlloc of 16384 bytes, freed;
 *  - legacy default stream ordering: a kernel on the legacy stream starts after a kernel queued before it on a
 *    blocking stream ends (checked here, exit 3 otherwise);
 *  - 2 devices (CUDASIM_DEVICES=2): 1 "on_device1" kernel after cudaSetDevice(1);
 *  - cudaProfilerStop flushes: the process then SIGKILLs itself with a 60 s flush period, and everything before
 *    cudaProfilerStop must still be in the trace. */
#include "sim.h"
#include <cuda.h>
extern cudaError_t cudaProfilerStop(void); /* cuda_profiler_api.h is not in the PyPI wheels */
#include <signal.h>
#include <unistd.h>

extern void **__cudaRegisterFatBinary(void *);
extern void __cudaRegisterFunction(void **, const char *, char *, const char *, int, void *, void *, void *, void *,
                                   int *);

static volatile int64_t slow_end_ns, after_start_ns;

static int64_t mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

void drv_kernel(void **a) { (void)a; busy_us(10); }
void registered_impl(void **a) { (void)a; busy_us(10); }
void on_device1(void **a) { (void)a; }
void slow(void **a) { (void)a; busy_us(20000); slow_end_ns = mono_ns(); }
void after(void **a) { (void)a; after_start_ns = mono_ns(); }

int main(void) {
    void *args[] = {NULL};
    /* Driver API. */
    if (cuInit(0) != CUDA_SUCCESS) return 2;
    CUdeviceptr p;
    if (cuMemAlloc(&p, 4096) != CUDA_SUCCESS) return 2;
    for (int i = 0; i < 3; i++)
        if (cuLaunchKernel((CUfunction)(void *)drv_kernel, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL) != CUDA_SUCCESS) return 2;
    if (cuCtxSynchronize() != CUDA_SUCCESS || cuMemFree(p) != CUDA_SUCCESS) return 2;

    /* A registered device name. */
    void **handle = __cudaRegisterFatBinary(NULL);
    __cudaRegisterFunction(handle, (const char *)registered_impl, "my_registered_kernel", "my_registered_kernel", -1,
                           NULL, NULL, NULL, NULL, NULL);
    launch(registered_impl, 1, 1, 0, args);
    launch(registered_impl, 1, 1, 0, args);

    /* Stream-ordered and host allocations. */
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s)); /* a blocking stream */
    void *a = NULL, *h = NULL;
    CHECK(cudaMallocAsync(&a, 8192, s));
    CHECK(cudaFreeAsync(a, s));
    CHECK(cudaHostAlloc(&h, 16384, cudaHostAllocDefault));
    CHECK(cudaFreeHost(h));

    /* Legacy default stream waits for earlier work on blocking streams. */
    launch(slow, 1, 1, s, args);
    launch(after, 1, 1, 0, args);
    CHECK(cudaDeviceSynchronize());
    if (after_start_ns < slow_end_ns) {
        fprintf(stderr, "legacy stream did not wait: %lld < %lld\n", (long long)after_start_ns, (long long)slow_end_ns);
        return 3;
    }

    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    if (count != 2) return 4;
    CHECK(cudaSetDevice(1));
    launch(on_device1, 1, 1, 0, args);
    CHECK(cudaDeviceSynchronize());

    CHECK(cudaProfilerStop());
    fflush(stdout);
    raise(SIGKILL);
    return 0;
}
