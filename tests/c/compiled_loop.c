/* A training loop as torch.compile runs it: each step ("ProfilerStep#N" NVTX ranges) launches the Triton kernels
 * Inductor generated (named as Inductor names them: triton_<kind>_fused_<ops>_<index>) and synchronises.
 * Step 0 compiles them first (30 ms of host work: Dynamo's tracing, Inductor's code generation, Triton's compile),
 * so it runs kernels no later step runs, slowly. At step RECOMPILE a new input shape fails a guard and the model
 * recompiles (30 ms again): from then on it runs newly generated kernels (`..._2`, `..._3`) instead of `_0`, `_1`.
 * Usage: compiled_loop [STEPS [RECOMPILE [HOST_US]]] (20, 12, 0). It prints "compiled_loop: recompiled at step N".
 * With HOST_US, the host works that long before each launch and every kernel takes 5 us: a small model whose
 * compiled kernels the host cannot launch fast enough (launch-bound under 100 us, host-bound above). */
#include "sim.h"
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <unistd.h>

extern void cudasim_kernel_ends_at(uint64_t ns);
extern uint64_t cudasim_machine_monotonic_ns(void);

static int host_us;

static void runs_us(uint64_t us) {
    cudasim_kernel_ends_at(cudasim_machine_monotonic_ns() + (host_us ? 5 : us) * 1000);
}

/* Host work of host_us: spinning under 100 us (a sleep that short oversleeps by far more on a loaded machine),
 * sleeping from 100 us (the report sees time outside CUDA either way; and cudasim's stream thread needs a core
 * meanwhile: on a loaded 2-core machine a host spinning 400 us at a time once starved it, and every kernel of a
 * step waited in the queue until the step's synchronisation). */
static void host_work(void) {
    if (host_us >= 100) {
        usleep((useconds_t)host_us);
        return;
    }
    uint64_t until = cudasim_machine_monotonic_ns() + (uint64_t)host_us * 1000;
    while (host_us && cudasim_machine_monotonic_ns() < until) {
    }
}

/* The first shape's kernels, and those compiled for the second. */
void triton_poi_fused_add_mul_0(void **args) { (void)args; runs_us(200); }
void triton_red_fused__to_copy_mean_pow_rsqrt_1(void **args) { (void)args; runs_us(300); }
void triton_poi_fused_add_mul_2(void **args) { (void)args; runs_us(220); }
void triton_red_fused__to_copy_mean_pow_rsqrt_3(void **args) { (void)args; runs_us(320); }
/* A GEMM (extern_kernels.mm: cuBLAS, not Triton) every step, whatever the shape. */
void sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n(void **args) { (void)args; runs_us(1000); }

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 20;
    int recompile = argc > 2 ? atoi(argv[2]) : 12;
    host_us = argc > 3 ? atoi(argv[3]) : 0;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *args[] = {NULL};
    char name[32];
    for (int step = 0; step < steps; step++) {
        snprintf(name, sizeof name, "ProfilerStep#%d", step);
        nvtxRangePushA(name);
        int second_shape = step >= recompile;
        if (step == 0 || step == recompile) usleep(30000); /* compiling */
        for (int layer = 0; layer < 4; layer++) {
            host_work();
            launch(sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n, 132, 256, s, args);
            host_work();
            launch(second_shape ? triton_poi_fused_add_mul_2 : triton_poi_fused_add_mul_0, 264, 128, s, args);
            host_work();
            launch(second_shape ? triton_red_fused__to_copy_mean_pow_rsqrt_3 : triton_red_fused__to_copy_mean_pow_rsqrt_1,
                   132, 512, s, args);
        }
        CHECK(cudaStreamSynchronize(s));
        nvtxRangePop();
    }
    printf("compiled_loop: recompiled at step %d\n", recompile);
    return 0;
}
