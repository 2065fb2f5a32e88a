/* Several host threads, each with two streams: pinned and pageable copies, memsets, kernels, events, waits.
 * Exact counts are asserted by tests/tests/capture.rs:
 *   THREADS=2, STREAMS_PER_THREAD=2, iterations=25 (argv[1])  ->  per (thread, stream) per iter: 1 HtoD pinned (64 KiB),
 *   1 memset (64 KiB), kernels saxpy + relu, 1 DtoH pinned (64 KiB); per thread: 1 pageable HtoD (1 MiB) and
 *   1 DtoD (64 KiB), 3 cudaMalloc + 1 cudaMallocHost, all freed.  */
#include "sim.h"
#include <pthread.h>
#include <string.h>

#define THREADS 2
#define STREAMS_PER_THREAD 2
#define N (16 * 1024)

void saxpy(void **args) {
    float *x = *(float **)args[0];
    int64_t n = *(int64_t *)args[1];
    for (int64_t i = 0; i < n; i++) x[i] = 2.0f * x[i] + 1.0f;
    busy_us(20);
}

void relu(void **args) {
    float *x = *(float **)args[0];
    int64_t n = *(int64_t *)args[1];
    for (int64_t i = 0; i < n; i++) x[i] = x[i] > 0 ? x[i] : 0;
    busy_us(10);
}

static int iters = 25;

static void *worker(void *arg) {
    (void)arg;
    cudaStream_t streams[STREAMS_PER_THREAD];
    float *dev[STREAMS_PER_THREAD], *host = NULL, *scratch = NULL;
    for (int s = 0; s < STREAMS_PER_THREAD; s++) {
        CHECK(cudaStreamCreateWithFlags(&streams[s], cudaStreamNonBlocking));
        CHECK(cudaMalloc((void **)&dev[s], N * sizeof(float)));
    }
    CHECK(cudaMalloc((void **)&scratch, N * sizeof(float)));
    CHECK(cudaMallocHost((void **)&host, STREAMS_PER_THREAD * N * sizeof(float)));
    for (int i = 0; i < STREAMS_PER_THREAD * N; i++) host[i] = (float)(i % 7) - 3.0f;

    cudaEvent_t done;
    CHECK(cudaEventCreate(&done));
    int64_t n = N;
    for (int it = 0; it < iters; it++) {
        for (int s = 0; s < STREAMS_PER_THREAD; s++) {
            float *h = host + s * N;
            void *args[] = {&dev[s], &n, NULL};
            CHECK(cudaMemcpyAsync(dev[s], h, N * sizeof(float), cudaMemcpyHostToDevice, streams[s]));
            CHECK(cudaMemsetAsync(scratch, 0, N * sizeof(float), streams[s]));
            launch(saxpy, 64, 256, streams[s], args);
            launch(relu, 64, 256, streams[s], args);
            CHECK(cudaMemcpyAsync(h, dev[s], N * sizeof(float), cudaMemcpyDeviceToHost, streams[s]));
        }
        CHECK(cudaEventRecord(done, streams[0]));
        CHECK(cudaStreamWaitEvent(streams[1], done, 0));
        for (int s = 0; s < STREAMS_PER_THREAD; s++) CHECK(cudaStreamSynchronize(streams[s]));
    }
    CHECK(cudaEventSynchronize(done));

    /* One pageable copy (1 MiB) and one device-to-device copy per thread. */
    char *pageable = malloc(1 << 20);
    char *big = NULL;
    memset(pageable, 1, 1 << 20);
    CHECK(cudaMalloc((void **)&big, 1 << 20));
    CHECK(cudaMemcpy(big, pageable, 1 << 20, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(scratch, dev[0], N * sizeof(float), cudaMemcpyDeviceToDevice));
    CHECK(cudaDeviceSynchronize());

    CHECK(cudaFree(big));
    free(pageable);
    for (int s = 0; s < STREAMS_PER_THREAD; s++) {
        CHECK(cudaFree(dev[s]));
        CHECK(cudaStreamDestroy(streams[s]));
    }
    CHECK(cudaFree(scratch));
    CHECK(cudaFreeHost(host));
    CHECK(cudaEventDestroy(done));
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) iters = atoi(argv[1]);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    printf("streams: ok\n");
    return 0;
}
