/* fork before and after CUDA use. Children only use NVTX and must get segments of their own; the parent's
 * CUDA work is recorded once. Expected (tests/tests/capture.rs): 3 processes (a fourth child records nothing); parent: 10 "step" kernels,
 * NVTX "parent" x2; first child: NVTX "child-before" x1, no CUDA; second child: NVTX "child-after" x1, no CUDA
 * and no kernel events even though it inherited the parent's initialised CUDA state. */
#include "sim.h"
#include <nvtx3/nvToolsExt.h>
#include <sys/wait.h>
#include <unistd.h>

void step(void **args) {
    (void)args;
    busy_us(50);
}

static void child(const char *name) {
    nvtxRangePushA(name);
    busy_us(1000);
    nvtxRangePop();
    fflush(stdout);
    _exit(0);
}

int main(void) {
    pid_t a = fork();
    if (a == 0) child("child-before");
    waitpid(a, NULL, 0);

    nvtxRangePushA("parent");
    void *args[] = {NULL};
    for (int i = 0; i < 5; i++) launch(step, 1, 32, 0, args);
    CHECK(cudaDeviceSynchronize());
    nvtxRangePop();

    pid_t b = fork();
    if (b == 0) child("child-after");
    waitpid(b, NULL, 0);

    /* A child that records nothing and leaves through exit(): the inherited atexit handler runs in it and must
     * not create a segment (so the trace still holds 3 processes). */
    pid_t quiet = fork();
    if (quiet == 0) exit(0);
    waitpid(quiet, NULL, 0);

    nvtxRangePushA("parent");
    for (int i = 0; i < 5; i++) launch(step, 1, 32, 0, args);
    CHECK(cudaDeviceSynchronize());
    nvtxRangePop();
    printf("fork: ok\n");
    return 0;
}
