/* fork before and after CUDA use. The parent uses NVTX before its first fork (so the agent is live in it, with
 * its fork handlers, but CUPTI is not). Expected (tests/tests/capture.rs): 3 processes (a fourth child records
 * nothing); parent: 10 "step" kernels, NVTX "parent" x2 and "setup" x1; first child (forked before the parent
 * touched CUDA, like a DataLoader worker that starts CUDA itself): NVTX "child-before" x1 and 3 "child_step"
 * kernels of its own; second child: NVTX "child-after" x1 and no kernel events, since the CUPTI state it
 * inherited belongs to the parent. */
#include "sim.h"
#include <nvtx3/nvToolsExt.h>
#include <sys/wait.h>
#include <unistd.h>

void step(void **args) {
    (void)args;
    busy_us(50);
}

void child_step(void **args) {
    (void)args;
    busy_us(50);
}

static void child(const char *name, int use_cuda) {
    nvtxRangePushA(name);
    busy_us(1000);
    if (use_cuda) {
        void *args[] = {NULL};
        for (int i = 0; i < 3; i++) launch(child_step, 1, 32, 0, args);
        CHECK(cudaDeviceSynchronize());
    }
    nvtxRangePop();
    fflush(stdout);
    /* The CUDA child leaves through _exit(), as Python's multiprocessing workers do: no exit handler runs, so
     * its records must already have been flushed (a fork child flushes every 100 ms; it waits 400 ms). */
    if (use_cuda) {
        struct timespec t = {0, 400 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    _exit(0);
}

int main(void) {
    nvtxRangePushA("setup");
    nvtxRangePop();
    pid_t a = fork();
    if (a == 0) child("child-before", 1);
    waitpid(a, NULL, 0);

    nvtxRangePushA("parent");
    void *args[] = {NULL};
    for (int i = 0; i < 5; i++) launch(step, 1, 32, 0, args);
    CHECK(cudaDeviceSynchronize());
    nvtxRangePop();

    pid_t b = fork();
    if (b == 0) child("child-after", 0);
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
