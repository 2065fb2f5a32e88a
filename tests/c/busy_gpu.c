/* A busy GPU that wastes its time in ways the kernels' names and order show, one step after another (each step an
 * NVTX range ProfilerStep#N). Kernels are named as cuBLAS, CUTLASS and ATen name theirs (their symbols are the
 * names cudasim, the CPU stand-in for the GPU, reports) and each runs a known time (busy_us). MODE:
 *   fallback:  three of the GPU's own GEMMs (sm90_xmma, 400 us each), one align1 GEMM (800 us) and one GEMM built
 *              for compute capability 7.5 (cutlass_75, aligned, 300 us): 1100 us a step on fallback kernels;
 *   chain:     GEMM (200 us), a tanh GELU as eager PyTorch computes it (pow, mul, add, mul, tanh, add, mul, mul:
 *              8 elementwise kernels of 50 us), GEMM (200 us): 400 us a step in the chain;
 *   attention: GEMM (Q K^T, 200 us), scale (30 us), softmax (100 us), GEMM (P V, 200 us), then the output
 *              projection GEMM (150 us): 530 us a step of attention from separate kernels;
 *   clean:     the same work done well, three layers a step: aligned GEMMs, FlashAttention, one fused activation.
 * Usage: busy_gpu MODE STEPS */
#include <nvtx3/nvToolsExt.h>
#include <string.h>

#include "sim.h"

void sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1(void **a) {
    (void)a;
    busy_us(400);
}
void cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align1(void **a) {
    (void)a;
    busy_us(800);
}
void cutlass_75_tensorop_bf16_s1688gemm_bf16_64x64_32x1_nn_align8(void **a) {
    (void)a;
    busy_us(300);
}
void sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x64x64(void **a) {
    (void)a;
    busy_us(200);
}
void sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize64x128x64(void **a) {
    (void)a;
    busy_us(150);
}
void vectorized_elementwise_kernel_pow(void **a) {
    (void)a;
    busy_us(50);
}
void vectorized_elementwise_kernel_mul(void **a) {
    (void)a;
    busy_us(50);
}
void vectorized_elementwise_kernel_add(void **a) {
    (void)a;
    busy_us(50);
}
void vectorized_elementwise_kernel_tanh(void **a) {
    (void)a;
    busy_us(50);
}
void vectorized_elementwise_kernel_scale(void **a) {
    (void)a;
    busy_us(30);
}
void softmax_warp_forward(void **a) {
    (void)a;
    busy_us(100);
}
void flash_fwd_kernel(void **a) {
    (void)a;
    busy_us(300);
}
void vectorized_elementwise_kernel_gelu(void **a) {
    (void)a;
    busy_us(60);
}
void vectorized_layer_norm_kernel(void **a) {
    (void)a;
    busy_us(40);
}

#define MODE(m) (!strcmp(mode, (m)))

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const char *mode = argv[1];
    int steps = atoi(argv[2]);
    void *args[] = {NULL};
    for (int step = 0; step < steps; step++) {
        char name[32];
        snprintf(name, sizeof name, "ProfilerStep#%d", step);
        nvtxRangePushA(name);
        if (MODE("fallback")) {
            for (int i = 0; i < 3; i++) launch(sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1, 1, 1, 0, args);
            launch(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align1, 1, 1, 0, args);
            launch(cutlass_75_tensorop_bf16_s1688gemm_bf16_64x64_32x1_nn_align8, 1, 1, 0, args);
        } else if (MODE("chain")) {
            launch(sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x64x64, 1, 1, 0, args);
            void (*gelu[])(void **) = {vectorized_elementwise_kernel_pow, vectorized_elementwise_kernel_mul,
                                       vectorized_elementwise_kernel_add, vectorized_elementwise_kernel_mul,
                                       vectorized_elementwise_kernel_tanh, vectorized_elementwise_kernel_add,
                                       vectorized_elementwise_kernel_mul, vectorized_elementwise_kernel_mul};
            for (int i = 0; i < 8; i++) launch(gelu[i], 1, 1, 0, args);
            launch(sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x64x64, 1, 1, 0, args);
        } else if (MODE("attention")) {
            launch(sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x64x64, 1, 1, 0, args);
            launch(vectorized_elementwise_kernel_scale, 1, 1, 0, args);
            launch(softmax_warp_forward, 1, 1, 0, args);
            launch(sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x64x64, 1, 1, 0, args);
            launch(sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize64x128x64, 1, 1, 0, args);
        } else {
            for (int layer = 0; layer < 3; layer++) { /* three layers a step: the GPU stays busy */
                for (int i = 0; i < 3; i++) launch(sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1, 1, 1, 0, args);
                launch(vectorized_layer_norm_kernel, 1, 1, 0, args);
                launch(flash_fwd_kernel, 1, 1, 0, args);
                launch(sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize64x128x64, 1, 1, 0, args);
                launch(vectorized_elementwise_kernel_gelu, 1, 1, 0, args);
                launch(sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x64x64, 1, 1, 0, args);
            }
        }
        CHECK(cudaDeviceSynchronize());
        nvtxRangePop();
    }
    printf("busy_gpu %s: %d steps\n", mode, steps);
    return 0;
}
