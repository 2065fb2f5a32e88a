/* A program that loads the CUDA runtime itself with RTLD_LOCAL (as Python extension modules are loaded), so no
 * CUDA symbol is in the global scope: the agent must still find the driver to record the devices.
 * Expected: one "touch" kernel, and the devices in the trace. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>

void touch(void **args) {
    (void)args;
}

typedef cudaError_t (*launch_fn)(const void *, dim3, dim3, void **, size_t, cudaStream_t);
typedef cudaError_t (*sync_fn)(void);

int main(void) {
    void *rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!rt) return 2;
    launch_fn launch = (launch_fn)dlsym(rt, "cudaLaunchKernel");
    sync_fn sync = (sync_fn)dlsym(rt, "cudaDeviceSynchronize");
    if (!launch || !sync) return 3;
    dim3 g = {1, 1, 1}, b = {32, 1, 1};
    void *args[] = {NULL};
    if (launch((const void *)touch, g, b, args, 0, 0) != cudaSuccess || sync() != cudaSuccess) return 4;
    printf("dlopen_rt: ok\n");
    return 0;
}
