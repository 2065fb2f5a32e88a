// Real-GPU counterpart of tests/c/streams.c: known numbers of kernels and copies, checked by scripts/gpu-validate.
// 2 streams x 50 iterations: saxpy + relu kernels, one pinned HtoD and one pinned DtoH copy of 256 KiB each.
#include <cuda_runtime.h>
#include <cstdio>

__global__ void saxpy(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 2.0f * x[i] + 1.0f;
}

__global__ void relu(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] > 0 ? x[i] : 0;
}

int main() {
    const int n = 64 * 1024, iters = 50;
    cudaStream_t s[2];
    float *d[2], *h;
    cudaMallocHost(&h, 2 * n * sizeof(float));
    for (int k = 0; k < 2; k++) {
        cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking);
        cudaMalloc(&d[k], n * sizeof(float));
    }
    for (int it = 0; it < iters; it++)
        for (int k = 0; k < 2; k++) {
            cudaMemcpyAsync(d[k], h + k * n, n * sizeof(float), cudaMemcpyHostToDevice, s[k]);
            saxpy<<<n / 256, 256, 0, s[k]>>>(d[k], n);
            relu<<<n / 256, 256, 0, s[k]>>>(d[k], n);
            cudaMemcpyAsync(h + k * n, d[k], n * sizeof(float), cudaMemcpyDeviceToHost, s[k]);
        }
    cudaDeviceSynchronize();
    printf("streams.cu: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 0;
}
