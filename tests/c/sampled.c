/* A training loop for `record --sample`: "sampled STEPS [mark|plain]" runs STEPS steps, each an NVTX range
 * "train_step" (or, with "mark", steps marked by cuflight.step()'s C entry point; with "plain", no step marked
 * at all, and 3 ms of host work after each, as a program that names nothing) holding a nested range
 * "forward", a mark, launches of kernels of known durations (a GEMM 300 us, an attention kernel 200 us, an
 * elementwise one 40 us three times), a copy and a cudaStreamSynchronize. Every 7th step also runs a longer
 * GEMM (an uneven step, as a real loop has). It prints "sampled: N steps" at the end. */
#include "sim.h"
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <string.h>

void ampere_sgemm_128x64_nn(void **a) { (void)a; busy_us(300); }
void flash_fwd_kernel(void **a) { (void)a; busy_us(200); }
void vectorized_elementwise_kernel_add(void **a) { (void)a; busy_us(40); }
void ampere_sgemm_256x128_nn(void **a) { (void)a; busy_us(500); }

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 50;
    int marked = argc > 2 && strcmp(argv[2], "mark") == 0;
    int plain = argc > 2 && strcmp(argv[2], "plain") == 0;
    void *args[] = {NULL};
    void *dev = NULL;
    char host[65536] = {0};
    CHECK(cudaMalloc(&dev, sizeof host));
    /* The agent's step mark, found once CUDA (which loads the agent) is up: what the cuflight Python module
     * calls. A run without the agent has none and marks nothing. */
    long (*mark_step)(void) = NULL;
    if (marked) {
        mark_step = (long (*)(void))dlsym(RTLD_DEFAULT, "cuflight_mark_step");
        if (!mark_step) {
            fprintf(stderr, "sampled: no cuflight_mark_step (no agent loaded)\n");
            return 3;
        }
    }
    for (int i = 0; i < steps; i++) {
        if (mark_step) {
            mark_step();
        } else if (!plain) {
            nvtxRangePushA("train_step");
        }
        nvtxRangePushA("forward");
        launch(ampere_sgemm_128x64_nn, 1, 1, 0, args);
        launch(flash_fwd_kernel, 1, 1, 0, args);
        for (int k = 0; k < 3; k++) {
            launch(vectorized_elementwise_kernel_add, 1, 1, 0, args);
        }
        if (i % 7 == 6) {
            launch(ampere_sgemm_256x128_nn, 1, 1, 0, args);
        }
        nvtxRangePop();
        nvtxMarkA("loss");
        CHECK(cudaMemcpyAsync(dev, host, sizeof host, cudaMemcpyHostToDevice, 0));
        CHECK(cudaStreamSynchronize(0));
        if (plain) {
            busy_us(3000);
        } else if (!mark_step) {
            nvtxRangePop();
        }
    }
    if (mark_step) {
        mark_step();
    }
    CHECK(cudaFree(dev));
    printf("sampled: %d steps\n", steps);
    return 0;
}
