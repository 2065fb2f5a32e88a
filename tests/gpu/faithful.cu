// Real-GPU counterpart of tests/tests/faithful.rs, checked by scripts/gpu-validate with exact counts:
//   forked child (before the parent touches CUDA) launches 3 "child_kernel";
//   24 host threads, each with its own stream, launch 50 "tick" each (1200; more threads than the agent's
//   initial buffer pool, so CUDA 13's per-thread buffers make it grow);
//   3 "templated<4>" kernels (a mangled template name, demangled as "void templated<4>(float*, int)");
//   1 memset of 1 MiB, 1 cudaMallocAsync/cudaFreeAsync pair of 1 MiB, 1 pageable and 1 pinned HtoD copy of 1 MiB;
//   a CUDA graph of 2 kernels ("graph_a", "graph_b") captured once, launched 5 times (10 kernels, 1 graph);
//   2 "driver_kernel" through cuLaunchKernel (cudaGetFuncBySymbol);
//   NVTX: "outer" x1 on the main thread, "worker" x24 (one per thread), domain "io": "read" x2.
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                                 \
    do {                                                                                         \
        cudaError_t e_ = (x);                                                                    \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));  \
            exit(10);                                                                            \
        }                                                                                        \
    } while (0)

__global__ void child_kernel(float *x) { if (x) x[threadIdx.x] += 1.0f; }
__global__ void tick(float *x) { if (x) x[threadIdx.x] += 1.0f; }
template <int N> __global__ void templated(float *x, int n) { if (threadIdx.x < n) x[threadIdx.x] *= N; }
__global__ void graph_a(float *x) { x[threadIdx.x] += 1.0f; }
__global__ void graph_b(float *x) { x[threadIdx.x] *= 2.0f; }
__global__ void driver_kernel(float *x) { x[threadIdx.x] -= 1.0f; }

static void *worker(void *) {
    nvtxRangePushA("worker");
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; i < 50; i++) tick<<<1, 32, 0, s>>>(nullptr);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));
    nvtxRangePop();
    return nullptr;
}

int main() {
    nvtxMarkA("start");  // the agent is live (NVTX) before the fork; CUDA is not
    pid_t child = fork();
    if (child == 0) {
        for (int i = 0; i < 3; i++) child_kernel<<<1, 32>>>(nullptr);
        CHECK(cudaDeviceSynchronize());
        exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 5;

    nvtxRangePushA("outer");
    float *d;
    CHECK(cudaMalloc(&d, 1 << 20));
    pthread_t t[24];
    for (auto &th : t) pthread_create(&th, nullptr, worker, nullptr);
    for (auto &th : t) pthread_join(th, nullptr);

    for (int i = 0; i < 3; i++) templated<4><<<1, 32>>>(d, 32);
    CHECK(cudaMemset(d, 0, 1 << 20));
    char *pageable = (char *)calloc(1, 1 << 20), *pinned;
    CHECK(cudaMallocHost(&pinned, 1 << 20));
    CHECK(cudaMemcpy(d, pageable, 1 << 20, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d, pinned, 1 << 20, cudaMemcpyHostToDevice));
    CHECK(cudaFreeHost(pinned));
    free(pageable);
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *a;
    CHECK(cudaMallocAsync(&a, 1 << 20, s));
    CHECK(cudaFreeAsync(a, s));

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    graph_a<<<1, 32, 0, s>>>(d);
    graph_b<<<1, 32, 0, s>>>(d);
    CHECK(cudaStreamEndCapture(s, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 5; i++) CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));

    cudaFunction_t f;
    CHECK(cudaGetFuncBySymbol(&f, (const void *)driver_kernel));
    void *args[] = {&d};
    for (int i = 0; i < 2; i++)
        if (cuLaunchKernel((CUfunction)f, 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr) != CUDA_SUCCESS) return 6;
    if (cuCtxSynchronize() != CUDA_SUCCESS) return 6;

    nvtxDomainHandle_t io = nvtxDomainCreateA("io");
    nvtxEventAttributes_t at = {};
    at.version = NVTX_VERSION;
    at.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    at.messageType = NVTX_MESSAGE_TYPE_ASCII;
    at.message.ascii = "read";
    for (int i = 0; i < 2; i++) {
        nvtxDomainRangePushEx(io, &at);
        nvtxDomainRangePop(io);
    }
    nvtxRangePop();
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaFree(d));
    printf("faithful: ok\n");
    return 0;
}
