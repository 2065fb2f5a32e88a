/* Cost of intercepted calls, measured by the program itself: run it plain and under `cuflight record`
 * (benches/agent-overhead does both, side by side) and compare. Usage: overhead [calls] */
#include "sim.h"

void empty(void **a) { (void)a; }

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 200000;
    int dev;
    CHECK(cudaGetDevice(&dev)); /* initialise outside the timed loops */
    double t0 = now_ns();
    for (long i = 0; i < n; i++) cudaGetDevice(&dev);
    double t1 = now_ns();
    void *args[] = {NULL};
    long launches = n / 10;
    double t2 = now_ns();
    for (long i = 0; i < launches; i++) launch(empty, 1, 1, 0, args);
    double t3 = now_ns();
    CHECK(cudaDeviceSynchronize());
    printf("cudaGetDevice_ns %.1f\n", (t1 - t0) / n);
    printf("cudaLaunchKernel_ns %.1f\n", (t3 - t2) / launches);
    return 0;
}
