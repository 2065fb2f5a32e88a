/* Kernels named as CUDA libraries name theirs (cuBLAS, FlashAttention, ATen, NCCL), each doing a known amount of
 * busy work, plus a copy and a memset: stats and report must put each in its category. Usage: categories */
#include "sim.h"

/* The names cudasim reports are these functions' symbols. */
void ampere_sgemm_128x64_nn(void **a) { (void)a; busy_us(400); }
void flash_fwd_kernel(void **a) { (void)a; busy_us(300); }
void softmax_warp_forward(void **a) { (void)a; busy_us(200); }
void vectorized_layer_norm_kernel(void **a) { (void)a; busy_us(100); }
void ncclKernel_AllReduce_RING_LL_Sum_float(void **a) { (void)a; busy_us(500); }
void vectorized_elementwise_kernel_add(void **a) { (void)a; busy_us(50); }

int main(void) {
    void *args[] = {NULL};
    for (int i = 0; i < 5; i++) {
        launch(ampere_sgemm_128x64_nn, 1, 1, 0, args);
        launch(flash_fwd_kernel, 1, 1, 0, args);
        launch(softmax_warp_forward, 1, 1, 0, args);
        launch(vectorized_layer_norm_kernel, 1, 1, 0, args);
        launch(ncclKernel_AllReduce_RING_LL_Sum_float, 1, 1, 0, args);
        launch(vectorized_elementwise_kernel_add, 1, 1, 0, args);
    }
    void *dev = NULL;
    char host[4096] = {0};
    CHECK(cudaMalloc(&dev, sizeof host));
    CHECK(cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(dev, 0, sizeof host));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(dev));
    return 0;
}
