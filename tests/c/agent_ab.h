/* The agent's own work per call inside one recorded process, for tests/c/overhead.c (cudasim) and
 * tests/gpu/overhead.cu (a real GPU): batches of calls alternated with the agent's API callback working and
 * skipped (cuflight_bench_skip_callbacks, found in the library CUDA loaded), the median over the pairs of the
 * difference. CUPTI's dispatch and records, the thread's placement and the machine's state are common to both
 * halves. The includer defines now_ns() first. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime_api.h>

typedef void (*skip_fn)(int);

/* The injected agent's switch (after CUDA's initialisation, which loads the agent); NULL without one. */
static skip_fn agent_skip(void) {
    const char *path = getenv("CUDA_INJECTION64_PATH");
    void *lib = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    return lib ? (skip_fn)dlsym(lib, "cuflight_bench_skip_callbacks") : NULL;
}

static int ab_by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* 100 pairs: single H200 runs of 20 pairs gave medians from -139 to 358 ns a launch (2026-11-28), the launch's
 * own spread; the median of more pairs narrows it. */
#define AB_BLOCKS 200

/* ns per call of `calls` calls of `one` (at most `most` a block: a GPU's queue holds only so many launches) in
 * AB_BLOCKS blocks, the agent skipped in one block of each pair, which one alternating; the GPU is drained after
 * each block, outside the timed part. */
static double ab_cost(skip_fn skip, long calls, long most, void (*one)(void)) {
    double diff[AB_BLOCKS / 2], per[2];
    long each = calls / AB_BLOCKS > 0 ? calls / AB_BLOCKS : 1;
    if (each > most) each = most;
    for (int b = 0; b < AB_BLOCKS; b++) {
        int skipped = (b ^ (b >> 1)) & 1; /* 0 1 1 0 0 1 1 0 ...: each pair holds one of each, in both orders */
        skip(skipped);
        double t = now_ns();
        for (long i = 0; i < each; i++) one();
        per[skipped] = (now_ns() - t) / each;
        skip(0);
        cudaDeviceSynchronize();
        if (b & 1) diff[b / 2] = per[0] - per[1];
    }
    qsort(diff, AB_BLOCKS / 2, sizeof diff[0], ab_by_value);
    return (diff[AB_BLOCKS / 4 - 1] + diff[AB_BLOCKS / 4]) / 2;
}

/* Prints the agent's own ns per cudaGetDevice (`gets` calls) and per launch (`launches`, through `one_launch`);
 * returns 23, with a line on stderr, when no cuflight agent is in the process. */
static int ab_report(long gets, long launches, long most, void (*one_get)(void), void (*one_launch)(void)) {
    skip_fn skip = agent_skip();
    if (!skip) {
        fprintf(stderr, "overhead ab: no cuflight agent in this process (run it under `cuflight record`)\n");
        return 23;
    }
    if (gets > 0) printf("agent_own_getdevice_ns %.1f\n", ab_cost(skip, gets, gets, one_get));
    if (launches > 0) printf("agent_own_launch_ns %.1f\n", ab_cost(skip, launches, most, one_launch));
    return 0;
}
