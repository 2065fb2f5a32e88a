// Real-GPU counterpart of tests/c/server.c's "cmd" mode, driven by tests/py/attach_check.py from
// scripts/gpu-validate: a long-running process whose dormant agent is attached to, windowed and sampled.
// Lines on stdin: "k N" launches N kernels and synchronises; "t N M" runs N steps (an NVTX range "step" around
// M kernels each); "r NAME M" runs M kernels inside an NVTX range NAME; "p"/"P" call cudaProfilerStart/Stop;
// "s" subscribes to CUPTI and unsubscribes ("subscribed" or "refused"). Each prints one line; EOF ends it.
#include <cuda_runtime.h>
#include <cuda_profiler_api.h>
#include <cupti.h>
#include <nvtx3/nvToolsExt.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

__global__ void tick(float *x) {
    if (threadIdx.x == 0 && blockIdx.x == 0) x[0] += 1.0f;
}

static void CUPTIAPI on_api(void *, CUpti_CallbackDomain, CUpti_CallbackId, const void *) {}

int main() {
    float *x;
    cudaMalloc(&x, sizeof(float));
    tick<<<1, 32>>>(x);
    cudaDeviceSynchronize();
    printf("server: ready\n");
    fflush(stdout);
    char line[128];
    long kernels = 1;
    while (fgets(line, sizeof line, stdin)) {
        if (line[0] == 'k') {
            long n = atol(line + 1);
            for (long i = 0; i < n; i++) tick<<<1, 32>>>(x);
            cudaDeviceSynchronize();
            kernels += n;
            printf("done %ld\n", n);
        } else if (line[0] == 't') {
            long steps = 0, per = 0;
            sscanf(line + 1, "%ld %ld", &steps, &per);
            for (long i = 0; i < steps; i++) {
                nvtxRangePushA("step");
                for (long k = 0; k < per; k++) tick<<<1, 32>>>(x);
                cudaDeviceSynchronize();
                nvtxRangePop();
            }
            kernels += steps * per;
            printf("done\n");
        } else if (line[0] == 'r') {
            char name[32] = "";
            long per = 0;
            sscanf(line + 1, "%31s %ld", name, &per);
            nvtxRangePushA(name);
            for (long k = 0; k < per; k++) tick<<<1, 32>>>(x);
            cudaDeviceSynchronize();
            nvtxRangePop();
            kernels += per;
            printf("done\n");
        } else if (line[0] == 'p' || line[0] == 'P') {
            cudaError_t e = line[0] == 'p' ? cudaProfilerStart() : cudaProfilerStop();
            printf(e == cudaSuccess ? "done\n" : "error\n");
        } else if (line[0] == 's') {
            CUpti_SubscriberHandle sub;
            bool ok = cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_api, nullptr) == CUPTI_SUCCESS;
            if (ok) cuptiUnsubscribe(sub);
            printf(ok ? "subscribed\n" : "refused\n");
        }
        fflush(stdout);
    }
    printf("server: %ld kernels\n", kernels);
    return 0;
}
