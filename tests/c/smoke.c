/* Smallest program: one malloc, copy, kernel, copy back. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdint.h>

void scale(void **args) {
    float *x = *(float **)args[0];
    int64_t n = *(int64_t *)args[1];
    for (int64_t i = 0; i < n; i++) x[i] *= 2.0f;
}

int main(void) {
    float host[256];
    for (int i = 0; i < 256; i++) host[i] = (float)i;
    float *dev = NULL;
    if (cudaMalloc((void **)&dev, sizeof host) != cudaSuccess) return 1;
    cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice);
    int64_t n = 256;
    void *args[] = {&dev, &n, NULL};
    dim3 grid = {1, 1, 1}, block = {256, 1, 1};
    if (cudaLaunchKernel((const void *)scale, grid, block, args, 0, 0) != cudaSuccess) return 2;
    cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost);
    cudaFree(dev);
    printf("host[255]=%.1f\n", host[255]);
    return host[255] == 510.0f ? 0 : 3;
}
