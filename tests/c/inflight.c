/* Flushes and unfinished work. A 300 ms kernel is still running when the program calls cudaProfilerStop (which
 * flushes): it must still be recorded whole once it finishes. A second kernel is still running when the program
 * exits: the exit flush is forced and hands it over unfinished, so it is counted, never placed at time 0.
 * Expected: "long_kernel" x1 lasting >= 290 ms, no "left_running", one unfinished kernel record. */
#include "sim.h"
extern cudaError_t cudaProfilerStop(void); /* cuda_profiler_api.h is not in the PyPI wheels */

void long_kernel(void **args) {
    (void)args;
    busy_us(300000);
}

void left_running(void **args) {
    (void)args;
    busy_us(2000000);
}

int main(void) {
    void *args[] = {NULL};
    launch(long_kernel, 1, 32, 0, args);
    busy_us(50000);
    CHECK(cudaProfilerStop());
    CHECK(cudaDeviceSynchronize());
    launch(left_running, 1, 32, 0, args);
    busy_us(50000);
    printf("inflight: ok\n");
    return 0;
}
