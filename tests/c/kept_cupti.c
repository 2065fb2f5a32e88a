/* What a kernel launch costs before CUPTI is set up, while it records kernels, while it stays set up with nothing
 * enabled (a subscriber kept, its domain and kinds disabled: how a paused sampler leaves it) and after
 * cuptiFinalize: "kept_cupti [LAUNCHES]" times LAUNCHES (default 20000) launches of an empty kernel in each phase,
 * in 5 cycles of set-up, recording, pause and finalize, and prints one JSON line of ns per launch: each phase's
 * fastest batch, since another process's load only ever adds. On cudasim, the CPU test double, this checks its
 * model of CUPTI's cost to a launch (cudasim/src/timing.rs, from H200 measurements). */
#include "sim.h"
#include <cupti.h>

static void tick(void **args) { (void)args; }

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* The fastest of 5 batches' ns per launch, or `best` if that was faster; the stream drained between them. */
static double launch_ns(long n, double best) {
    for (int b = 0; b < 5; b++) {
        double t0 = now_ns();
        for (long i = 0; i < n / 5; i++) launch(tick, 1, 1, 0, NULL);
        double ns = (now_ns() - t0) / (double)(n / 5);
        if (ns < best) best = ns;
        CHECK(cudaDeviceSynchronize());
    }
    return best;
}

static void CUPTIAPI on_api(void *u, CUpti_CallbackDomain d, CUpti_CallbackId c, const void *data) {
    (void)u; (void)d; (void)c; (void)data;
}

static void CUPTIAPI requested(uint8_t **buf, size_t *size, size_t *max) {
    *size = 1 << 20;
    *buf = aligned_alloc(8, *size);
    *max = 0;
}

static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
    (void)ctx; (void)stream; (void)size; (void)valid;
    free(buf);
}

#define OK(call)                                                                   \
    do {                                                                           \
        if ((call) != CUPTI_SUCCESS) {                                             \
            fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #call);      \
            return 2;                                                              \
        }                                                                          \
    } while (0)

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 20000;
    CHECK(cudaFree(0));
    launch_ns(n / 10, 1e18); /* warm */
    double before = launch_ns(n, 1e18), recording = 1e18, kept = 1e18, finalized = 1e18;
    for (int cycle = 0; cycle < 5; cycle++) {
        CUpti_SubscriberHandle sub;
        OK(cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_api, NULL));
        OK(cuptiActivityRegisterCallbacks(requested, completed));
        OK(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000));
        OK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
        recording = launch_ns(n, recording);
        OK(cuptiEnableDomain(0, sub, CUPTI_CB_DOMAIN_RUNTIME_API));
        OK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
        OK(cuptiActivityFlushAll(1));
        kept = launch_ns(n, kept);
        OK(cuptiUnsubscribe(sub));
        OK(cuptiFinalize());
        finalized = launch_ns(n, finalized);
    }
    printf("{\"before_ns\": %.1f, \"recording_ns\": %.1f, \"kept_ns\": %.1f, \"finalized_ns\": %.1f}\n", before,
           recording, kept, finalized);
    return 0;
}
