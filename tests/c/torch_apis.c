/* Runtime calls PyTorch makes beyond launches and plain copies. Exits non-zero on a wrong answer. Expected
 * (CUDASIM_DEVICES=2): HtoD from cudaHostRegister'ed memory counted as pinned (1 MiB); one 2D copy of 4 rows x
 * 256 bytes (1024 bytes, one record); one peer copy of 64 KiB between devices 0 and 1 (PtoP); one kernel
 * "ex_kernel" through cudaLaunchKernelExC; function attributes, occupancy and device attributes answered. */
#include "sim.h"
#include <string.h>

void ex_kernel(void **args) { (void)args; }

int main(void) {
    size_t mib = 1 << 20;
    char *host = malloc(mib), *dev;
    memset(host, 1, mib);
    CHECK(cudaMalloc((void **)&dev, mib));
    CHECK(cudaHostRegister(host, mib, cudaHostRegisterDefault));
    CHECK(cudaMemcpy(dev, host, mib, cudaMemcpyHostToDevice));
    CHECK(cudaHostUnregister(host));

    char *pitched;
    CHECK(cudaMalloc((void **)&pitched, 4 * 512));
    CHECK(cudaMemcpy2D(pitched, 512, host, 256, 256, 4, cudaMemcpyHostToDevice));

    char *other;
    CHECK(cudaSetDevice(1));
    CHECK(cudaMalloc((void **)&other, 64 << 10));
    CHECK(cudaSetDevice(0));
    CHECK(cudaMemcpyPeer(other, 1, dev, 0, 64 << 10));

    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = (dim3){2, 1, 1};
    cfg.blockDim = (dim3){128, 1, 1};
    void *args[] = {NULL};
    CHECK(cudaLaunchKernelExC(&cfg, (const void *)ex_kernel, args));
    CHECK(cudaDeviceSynchronize());

    struct cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, (const void *)ex_kernel));
    if (fa.numRegs != 32 || fa.maxThreadsPerBlock != 1024) return 3;
    CHECK(cudaFuncSetAttribute((const void *)ex_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10));
    int blocks = 0, sms = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, (const void *)ex_kernel, 256, 0, 0));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    if (blocks != 8 || sms != 132) return 4;
    CHECK(cudaFree(dev));
    CHECK(cudaFree(pitched));
    CHECK(cudaFree(other));
    free(host);
    printf("torch_apis: ok\n");
    return 0;
}
