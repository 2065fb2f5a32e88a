/* Kernels of known character for the device counters (record --gpu-metrics): each says what it does with
 * cudasim_kernel_work (cudasim is the CPU stand-in for the GPU; a real GPU's counters see the work themselves) and
 * runs a planted time, so the counters' true values are the declared work over the kernel's own duration and the
 * simulated H100's peaks (3.35 TB/s DRAM, 989.4 dense bf16 TFLOP/s):
 *   stream_copy  reads and writes 6 GB each way in 5 ms: DRAM-bound, no Tensor Cores;
 *   sm90_xmma_gemm_bf16...  does 4.2 TFLOP on Tensor Cores in 5 ms and moves 0.5 GB: compute-bound;
 *   sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x64x64  a GEMM too small for the GPU: 15% Tensor Core
 *                activity for 2 ms (0.3 TFLOP) with 0.2 GB moved;
 *   fma_loop     a full grid of dependent FMAs on registers for 5 ms: SMs busy, DRAM and Tensor Cores idle;
 *   vectorized_elementwise_kernel  60 us each, 40 in a row: too short for whole samples, an aggregate by name.
 * Usage: counters ROUNDS [nocopy]: nocopy leaves the streaming copy out (the memory-bound kernel "fused away"). */
#include <stdint.h>
#include <string.h>

#include "sim.h"

extern void cudasim_kernel_work(uint64_t bytes_read, uint64_t bytes_written, uint64_t tensor_flops);
extern void cudasim_kernel_ends_at(uint64_t ns);
extern uint64_t cudasim_machine_monotonic_ns(void);

/* The kernel ends `us` after it began on the simulated GPU's clock, however the host schedules its thread (a
 * loaded machine would otherwise stretch it, and with it every rate). */
static void runs_for(int64_t us) { cudasim_kernel_ends_at(cudasim_machine_monotonic_ns() + (uint64_t)us * 1000); }

void stream_copy(void **a) {
    (void)a;
    cudasim_kernel_work(6000000000ull, 6000000000ull, 0);
    runs_for(5000);
}
void sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1(void **a) {
    (void)a;
    cudasim_kernel_work(400000000ull, 100000000ull, 4200000000000ull);
    runs_for(5000);
}
void sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x64x64(void **a) {
    (void)a;
    cudasim_kernel_work(100000000ull, 100000000ull, 296820000000ull);
    runs_for(2000);
}
void fma_loop(void **a) {
    (void)a;
    runs_for(5000);
}
void vectorized_elementwise_kernel(void **a) {
    (void)a;
    cudasim_kernel_work(100000000ull, 100000000ull, 0);
    busy_us(60);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    int copy = !(argc > 2 && !strcmp(argv[2], "nocopy"));
    void *args[] = {NULL};
    for (int r = 0; r < rounds; r++) {
        if (copy) launch(stream_copy, 132 * 8, 512, 0, args);
        launch(sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1, 132, 384, 0, args);
        launch(sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x64x64, 16, 128, 0, args);
        launch(fma_loop, 132 * 16, 256, 0, args);
        for (int i = 0; i < 40; i++) launch(vectorized_elementwise_kernel, 132 * 4, 256, 0, args);
        CHECK(cudaDeviceSynchronize());
    }
    printf("counters: %d rounds\n", rounds);
    return 0;
}
