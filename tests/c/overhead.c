/* Cost of intercepted calls, measured by the program itself: run it plain, with a no-op CUPTI subscriber (the
 * cost of CUPTI's own callback dispatch), with that subscriber plus kernel activity records whose buffers are
 * freed unread (what any CUPTI tracer pays, cudasim's modelled CUPTI work included), under `cuflight launch`
 * (dormant agent) and under `cuflight record` (benches/agent-overhead runs them side by side). NVTX push/pop
 * pairs are timed too: without an injected tool NVTX's own stubs return at once.
 * null+api: the subscriber with no callback enabled, kernel records, and API activity records of the launch calls
 * instead (cuptiActivityEnableRuntimeApi/DriverApi), freed unread: the configuration `--trace ...,api-records`
 * makes, without the agent.
 * Usage: overhead [calls] [plain|null-subscriber|null+activity|null+api|ab] [all|getdevice|launch|nvtx]
 * (the last: time one kind of call only, as benches/agent-instructions counts each kind's instructions apart).
 * ab, under `cuflight record`: batches of calls alternated with the agent's callback working and skipped
 * (cuflight_bench_skip_callbacks), in this one process; prints the median difference of paired batches per call,
 * the agent's own work with everything else in common. */
#include "sim.h"
#include <cupti.h>
#include <nvtx3/nvToolsExt.h>
#include <string.h>

static void CUPTIAPI noop_callback(void *u, CUpti_CallbackDomain d, CUpti_CallbackId c, const void *data) {
    (void)u; (void)d; (void)c; (void)data;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *size = 8 << 20;
    *buffer = (uint8_t *)aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx; (void)stream; (void)size; (void)valid;
    free(buffer);
}

/* An empty kernel under a name as long as real ones (PyTorch's fill kernel, 105 characters mangled): the agent
 * interns each record's name, and short names would hide what that costs. */
void _ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_(void **a) {
    (void)a;
}
#define empty _ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

#include "agent_ab.h"

static void one_get(void) {
    int dev;
    cudaGetDevice(&dev);
}

static void one_launch(void) {
    void *args[] = {NULL};
    launch(empty, 1, 1, 0, args);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 200000;
    const char *only = argc > 3 ? argv[3] : "all";
    int all = strcmp(only, "all") == 0;
    int do_get = all || strcmp(only, "getdevice") == 0, do_launch = all || strcmp(only, "launch") == 0;
    int do_nvtx = all || strcmp(only, "nvtx") == 0;
    if (!all && !do_get && !do_launch && !do_nvtx) return 2;
    if (argc > 2 && strncmp(argv[2], "null", 4) == 0) {
        CUpti_SubscriberHandle sub;
        int api = strcmp(argv[2], "null+api") == 0;
        if (cuptiSubscribe(&sub, (CUpti_CallbackFunc)noop_callback, NULL) != CUPTI_SUCCESS) return 20;
        if (!api) {
            cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API);
            cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
        }
        if (strcmp(argv[2], "null+activity") == 0 || api) {
            if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return 21;
            if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) return 22;
        }
        if (api && (cuptiActivityEnableRuntimeApi(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 1) != CUPTI_SUCCESS ||
                    cuptiActivityEnableDriverApi(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 1) != CUPTI_SUCCESS))
            return 23;
    }
    int dev;
    CHECK(cudaGetDevice(&dev)); /* initialise outside the timed loops */
    if (argc > 2 && strcmp(argv[2], "ab") == 0) {
        return ab_report(do_get ? n : 0, do_launch ? n / 10 : 0, n, one_get, one_launch);
    }
    double t0 = now_ns();
    for (long i = 0; do_get && i < n; i++) cudaGetDevice(&dev);
    double t1 = now_ns();
    void *args[] = {NULL};
    long launches = n / 10;
    double t2 = now_ns();
    for (long i = 0; do_launch && i < launches; i++) launch(empty, 1, 1, 0, args);
    double t3 = now_ns();
    CHECK(cudaDeviceSynchronize());
    nvtxRangePushA("warm-up"); /* the first NVTX call loads the injected tool, if any */
    nvtxRangePop();
    double t4 = now_ns();
    for (long i = 0; do_nvtx && i < n; i++) {
        nvtxRangePushA("step");
        nvtxRangePop();
    }
    double t5 = now_ns();
    printf("cudaGetDevice_ns %.1f\n", (t1 - t0) / n);
    printf("cudaLaunchKernel_ns %.1f\n", (t3 - t2) / launches);
    printf("nvtxPushPop_ns %.1f\n", (t5 - t4) / n);
    return 0;
}
