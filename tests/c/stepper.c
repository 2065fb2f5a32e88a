/* A fast loop, as a training job or an inference server runs one: "stepper K [block SECONDS]" runs steps of
 * about 1 ms until its standard input closes. Each step is an NVTX range "step" holding a range "request" around
 * K launches of `tick` and one cudaStreamSynchronize: K + 1 API calls and K kernels a step, nothing else. It
 * prints "stepper: ready" once CUDA is up and "stepper: N steps" at the end.
 * With "block SECONDS", a second thread first launches a kernel that runs SECONDS on a stream of its own and
 * waits for it in cudaStreamSynchronize, printing "stepper: blocked" as it enters the wait: a call in flight
 * while a tool attaches. With "blocks SECONDS" it does so again and again: a call always in flight.
 * With "grow", every 100th step also allocates 1 MiB of device memory that it keeps (a slow leak, at most 4096).
 * With "oom", every 10th step also asks cudaMalloc for 2^60 bytes, which fails (out of memory), and goes on.
 * With "graph", the K launches are captured once (stream capture) and each step replays them as one CUDA graph
 * launch: 2 API calls a step and K kernels, each a node of the graph (as a decode step of a model server). */
#include "sim.h"
#include <nvtx3/nvToolsExt.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

void tick(void **args) { (void)args; }

/* cudasim runs a kernel's body on its stream's worker thread: sleeping there is a kernel that takes that long. */
static double block_seconds;
static int block_again;
void spin(void **args) {
    (void)args;
    usleep((useconds_t)(block_seconds * 1e6));
}

static void *blocker(void *arg) {
    (void)arg;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *args[] = {NULL};
    do {
        launch(spin, 1, 1, s, args);
        printf("stepper: blocked\n");
        fflush(stdout);
        CHECK(cudaStreamSynchronize(s));
    } while (__atomic_load_n(&block_again, __ATOMIC_RELAXED));
    return NULL;
}

static int stdin_closed(void) {
    struct pollfd p = {0, POLLIN, 0};
    char buf[64];
    return poll(&p, 1, 0) > 0 && read(0, buf, sizeof buf) <= 0;
}

int main(int argc, char **argv) {
    long per = argc > 1 ? atol(argv[1]) : 4;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *args[] = {NULL};
    launch(tick, 1, 1, s, args);
    CHECK(cudaStreamSynchronize(s));
    pthread_t t;
    int blocking = argc > 3 && (strcmp(argv[2], "block") == 0 || strcmp(argv[2], "blocks") == 0);
    block_again = argc > 3 && strcmp(argv[2], "blocks") == 0;
    int grow = argc > 2 && strcmp(argv[2], "grow") == 0;
    int oom = argc > 2 && strcmp(argv[2], "oom") == 0;
    cudaGraphExec_t step_graph = NULL;
    if (argc > 2 && strcmp(argv[2], "graph") == 0) {
        cudaGraph_t g;
        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        for (long k = 0; k < per; k++) launch(tick, 1, 1, s, args);
        CHECK(cudaStreamEndCapture(s, &g));
        CHECK(cudaGraphInstantiate(&step_graph, g, 0));
    }
    long grown = 0;
    if (blocking) {
        block_seconds = atof(argv[3]);
        pthread_create(&t, NULL, blocker, NULL);
    }
    printf("stepper: ready\n");
    fflush(stdout);
    long steps = 0;
    while (!stdin_closed()) {
        nvtxRangePushA("step");
        nvtxRangePushA("request");
        if (step_graph)
            CHECK(cudaGraphLaunch(step_graph, s));
        else
            for (long k = 0; k < per; k++) launch(tick, 1, 1, s, args);
        CHECK(cudaStreamSynchronize(s));
        nvtxRangePop();
        nvtxRangePop();
        steps++;
        if (grow && steps % 100 == 0 && grown < 4096) {
            void *kept;
            CHECK(cudaMalloc(&kept, 1 << 20));
            grown++;
        }
        if (oom && steps % 10 == 0) {
            void *huge = NULL;
            if (cudaMalloc(&huge, (size_t)1 << 60) != cudaErrorMemoryAllocation) return 1;
        }
        usleep(900);
    }
    __atomic_store_n(&block_again, 0, __ATOMIC_RELAXED);
    if (blocking) pthread_join(t, NULL);
    printf("stepper: %ld steps\n", steps);
    return 0;
}
