/* CUDA Graphs: three kernels captured from a stream, instantiated once, launched 5 times with cudaGraphLaunch and
 * twice with the driver's cuGraphLaunch. Capture must work under the profiler (exit 3 otherwise). Expected:
 * 21 kernels (7 each of "g_a", "g_b", "g_c") carrying one graph id and 3 node ids; API: cudaStreamBeginCapture,
 * cudaStreamEndCapture, cudaGraphInstantiate x1, cudaGraphLaunch x5, cuGraphLaunch x2 (direct driver calls).
 * The five cudaGraphLaunch calls are made inside one NVTX range, "replay", popped before the graphs run. */
#include "sim.h"
#include <cuda.h>
#include <nvtx3/nvToolsExt.h>

void g_a(void **args) { (void)args; busy_us(20); }
void g_b(void **args) { (void)args; busy_us(20); }
void g_c(void **args) { (void)args; busy_us(20); }

int main(void) {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *args[] = {NULL};
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) != cudaSuccess) return 3;
    launch(g_a, 1, 32, s, args);
    launch(g_b, 1, 32, s, args);
    launch(g_c, 1, 32, s, args);
    cudaGraph_t graph;
    if (cudaStreamEndCapture(s, &graph) != cudaSuccess) return 3;
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    nvtxRangePushA("replay");
    for (int i = 0; i < 5; i++) CHECK(cudaGraphLaunch(exec, s));
    nvtxRangePop();
    for (int i = 0; i < 2; i++)
        if (cuGraphLaunch((CUgraphExec)exec, (CUstream)s) != CUDA_SUCCESS) return 4;
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    printf("graphs: ok\n");
    return 0;
}
