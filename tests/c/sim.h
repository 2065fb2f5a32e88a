/* Shared helpers for the integration-test programs. These are ordinary CUDA C programs; the only cudasim
 * conventions are that a kernel is a host function `void k(void **args)` and that argument arrays end with NULL
 * (each argument 8 bytes). */
#ifndef CUFLIGHT_TEST_SIM_H
#define CUFLIGHT_TEST_SIM_H
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(call)                                                                          \
    do {                                                                                     \
        cudaError_t err_ = (call);                                                           \
        if (err_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,             \
                    cudaGetErrorString(err_));                                               \
            exit(10);                                                                        \
        }                                                                                    \
    } while (0)

static inline void busy_us(int64_t us) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000 + (t.tv_nsec - t0.tv_nsec) / 1000 < us);
}

static inline void launch(void (*kernel)(void **), unsigned grid, unsigned block, cudaStream_t s, void **args) {
    dim3 g = {grid, 1, 1}, b = {block, 1, 1};
    CHECK(cudaLaunchKernel((const void *)kernel, g, b, args, 0, s));
}
#endif
