/* Launches empty kernels flat out on one thread for SECONDS (or until SIGTERM/SIGINT/SIGHUP, which end the loop
 * cleanly and make the program exit with status 3), with IDLE threads that each make one CUDA call and then
 * sleep (holding a ring, as idle worker threads do). Prints "launched N" at the end.
 * Usage: flood SECONDS [IDLE] [SYNC_EVERY]. Expected: N "empty" kernels and N cudaLaunchKernel calls. */
#include "sim.h"
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

void empty(void **args) {
    (void)args;
}

static volatile sig_atomic_t stop_signal = 0;
static void on_signal(int sig) {
    stop_signal = sig;
}

static void *idle(void *arg) {
    (void)arg;
    int dev = 0;
    CHECK(cudaGetDevice(&dev));
    for (;;) pause();
    return NULL;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    int idle_threads = argc > 2 ? atoi(argv[2]) : 0;
    long sync_every = argc > 3 ? atol(argv[3]) : 1000;
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGHUP, on_signal);
    CHECK(cudaFree(0));
    for (int i = 0; i < idle_threads; i++) {
        pthread_t t;
        pthread_create(&t, NULL, idle, NULL);
        pthread_detach(t);
    }
    usleep(20000); /* let the idle threads make their call */
    void *args[] = {NULL};
    long n = 0;
    double end = now() + seconds;
    while (!stop_signal) {
        launch(empty, 1, 32, 0, args);
        n++;
        if (n % sync_every == 0) {
            CHECK(cudaDeviceSynchronize());
            if (now() > end) break;
        }
    }
    CHECK(cudaDeviceSynchronize());
    printf("launched %ld\n", n);
    fflush(stdout);
    return stop_signal ? 3 : 0;
}
