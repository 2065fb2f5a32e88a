/* A loop of 12 steps (NVTX ranges "step") whose GPU work is a memset, a 1 MiB copy in, 20 kernels of 50 us and a
 * 1 MiB copy out on one stream (23 operations), run three ways:
 *   once       the work is captured into a CUDA graph and instantiated once, before the loop; each step replays it
 *              (cudaGraphLaunch) and synchronises: 1 launch and 23 nodes (20 kernels) a step, the GPU busy.
 *   recapture  every step captures the work again (2 ms of host work between the kernels, as a Python model's
 *              forward takes), instantiates the graph, replays it once and destroys it: the GPU idles through
 *              each capture, which the graph then saves nothing of.
 *   eager      the work launched op by op each step, 100 us of host work between the kernels.
 *   update     as once, and beside each replay an eager kernel on a second stream; at step 6 the work is captured
 *              again copying from another host buffer, and the executable graph updated to it
 *              (cudaGraphExecUpdate): the same graph and nodes replay, with the new copy's source.
 *   late       as torch.compile(mode="reduce-overhead") does: steps 0-2 launch the work eagerly (400 us of host
 *              work between the kernels: its eager warm-up runs Python for every op, several times slower than the
 *              replays, here about 5x, so a loaded machine that stretches the replays 2.4x, as one CI rehearsal
 *              did, still tells them apart), step 3 captures it (100 us) and replays it, later steps replay it.
 * It prints "graph_loop: MODE". */
#include "sim.h"
#include <nvtx3/nvToolsExt.h>
#include <string.h>
#include <unistd.h>

extern void cudasim_kernel_ends_at(uint64_t ns);
extern uint64_t cudasim_machine_monotonic_ns(void);

/* A kernel that runs 50 us without spinning a core (cudasim ends it at that time). */
void layer(void **args) {
    (void)args;
    cudasim_kernel_ends_at(cudasim_machine_monotonic_ns() + 50000);
}

/* The eager work beside the replays. */
void side(void **args) {
    (void)args;
    cudasim_kernel_ends_at(cudasim_machine_monotonic_ns() + 20000);
}

enum { BYTES = 1 << 20 };
static void *dev, *host, *host2;

static void launch_all(cudaStream_t s, int host_us) {
    void *args[] = {NULL};
    CHECK(cudaMemsetAsync(dev, 0, BYTES, s));
    CHECK(cudaMemcpyAsync(dev, host, BYTES, cudaMemcpyHostToDevice, s));
    for (int i = 0; i < 20; i++) {
        launch(layer, 132, 256, s, args);
        if (host_us > 0) usleep((useconds_t)host_us);
    }
    CHECK(cudaMemcpyAsync(host, dev, BYTES, cudaMemcpyDeviceToHost, s));
}

static cudaGraphExec_t capture(cudaStream_t s, cudaGraph_t *graph, int host_us) {
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    launch_all(s, host_us);
    CHECK(cudaStreamEndCapture(s, graph));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, *graph, 0));
    return exec;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "once";
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaMalloc(&dev, BYTES));
    CHECK(cudaMallocHost(&host, BYTES));
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    int update = !strcmp(mode, "update");
    cudaStream_t s2;
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CHECK(cudaMallocHost(&host2, BYTES));
    if (!strcmp(mode, "once") || update) exec = capture(s, &graph, 100);
    for (int step = 0; step < 12; step++) {
        nvtxRangePushA("step");
        int late = !strcmp(mode, "late");
        if (!strcmp(mode, "eager") || (late && step < 3)) {
            launch_all(s, late ? 400 : 100);
        } else if (late && step == 3) {
            exec = capture(s, &graph, 100);
            CHECK(cudaGraphLaunch(exec, s));
        } else if (!strcmp(mode, "recapture")) {
            exec = capture(s, &graph, 100);
            CHECK(cudaGraphLaunch(exec, s));
        } else {
            if (update && step == 6) {
                /* The same work reading another buffer: a topologically identical graph. */
                void *first = host;
                host = host2;
                cudaGraph_t again;
                CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
                launch_all(s, 0);
                CHECK(cudaStreamEndCapture(s, &again));
                cudaGraphExecUpdateResultInfo info;
                CHECK(cudaGraphExecUpdate(exec, again, &info));
                if (info.result != cudaGraphExecUpdateSuccess) return 3;
                CHECK(cudaGraphDestroy(again));
                host = first;
            }
            CHECK(cudaGraphLaunch(exec, s));
            if (update) {
                void *args[] = {NULL};
                launch(side, 1, 32, s2, args);
            }
        }
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaStreamSynchronize(s2));
        if (!strcmp(mode, "recapture")) {
            CHECK(cudaGraphExecDestroy(exec));
            CHECK(cudaGraphDestroy(graph));
        }
        nvtxRangePop();
    }
    if (!strcmp(mode, "once") || update || !strcmp(mode, "late")) {
        CHECK(cudaGraphExecDestroy(exec));
        CHECK(cudaGraphDestroy(graph));
    }
    printf("graph_loop: %s\n", mode);
    return 0;
}
