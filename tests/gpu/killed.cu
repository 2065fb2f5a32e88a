// SIGKILL mid-run on a real GPU: 40 "work" kernels are synchronised, the agent flushes (record --flush-ms 100),
// then the process kills itself. Expected: exactly 40 kernels in the trace, the process marked not finished.
#include <cuda_runtime.h>
#include <csignal>
#include <unistd.h>

__global__ void work(float *x) { if (x) x[threadIdx.x] += 1.0f; }

int main() {
    for (int i = 0; i < 40; i++) work<<<1, 32>>>(nullptr);
    cudaDeviceSynchronize();
    usleep(400 * 1000);
    raise(SIGKILL);
    return 0;
}
