/* Ordinary CUDA C argument arrays: a kernel taking (float *x, int n, double scale), its parameters registered in
 * cudasim's table (standing in for the cubin's metadata), launched with a 3-entry array and no NULL terminator;
 * the 4-byte int sits right before other data. Exits 3 if the kernel saw wrong arguments. Expected: 1 "scale_n". */
#include "sim.h"

extern int cudasimRegisterKernelParams(const void *func, int count, const size_t *sizes); /* cudasim only */

static int seen_n;
static double seen_scale;

void scale_n(void **args) {
    float *x = *(float **)args[0];
    seen_n = *(int *)args[1];
    seen_scale = *(double *)args[2];
    for (int i = 0; i < seen_n; i++) x[i] = (float)(x[i] * seen_scale);
}

int main(void) {
    size_t sizes[] = {sizeof(float *), sizeof(int), sizeof(double)};
    if (cudasimRegisterKernelParams((const void *)scale_n, 3, sizes) != 0) return 2;
    float *x;
    CHECK(cudaMallocManaged((void **)&x, 16 * sizeof(float), cudaMemAttachGlobal));
    for (int i = 0; i < 16; i++) x[i] = 1.0f;
    struct {
        int n;
        int poison; /* what an 8-byte read of n would pick up */
    } packed = {16, -1};
    double scale = 3.0;
    void *args[3] = {&x, &packed.n, &scale}; /* no NULL entry, as nvcc's stubs pass them */
    launch(scale_n, 1, 32, 0, args);
    CHECK(cudaDeviceSynchronize());
    if (seen_n != 16 || seen_scale != 3.0 || x[15] != 3.0f) return 3;
    printf("params: ok\n");
    return 0;
}
