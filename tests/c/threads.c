/* Many host threads, each with a stream of its own, launching kernels at once: on CUDA 13 every thread that
 * produces records holds an activity buffer of its own (CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER
 * defaults to 1), so buffers are asked for far beyond a small pool.
 * Usage: threads THREADS KERNELS_PER_THREAD. Expected: THREADS * KERNELS "tick" kernels and as many launches. */
#include "sim.h"
#include <pthread.h>

void tick(void **args) {
    (void)args;
}

static int per_thread = 100;

static void *worker(void *arg) {
    (void)arg;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *args[] = {NULL};
    for (int i = 0; i < per_thread; i++) launch(tick, 1, 32, s, args);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 24;
    per_thread = argc > 2 ? atoi(argv[2]) : 100;
    if (threads < 1 || threads > 256) return 2;
    pthread_t t[256];
    CHECK(cudaFree(0));
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    printf("threads: ok\n");
    return 0;
}
