/* One process, two CUDA programs: the first image launches "first" and allocates, then execs itself; the
 * second image launches "second" and sets memory. Same pid, two agents, two segments (string ids overlap).
 * Usage: exec. Expected: two processes with one pid, each with its own kernel and calls. */
#include "sim.h"
#include <string.h>
#include <unistd.h>

void first(void **a) {
    (void)a;
}

void second(void **a) {
    (void)a;
}

int main(int argc, char **argv) {
    void *args[] = {NULL};
    void *p = NULL;
    if (argc > 1 && strcmp(argv[1], "again") == 0) {
        CHECK(cudaMalloc(&p, 256));
        CHECK(cudaMemset(p, 0, 256));
        launch(second, 1, 32, 0, args);
        CHECK(cudaDeviceSynchronize());
        printf("second image done\n");
        return 0;
    }
    CHECK(cudaMalloc(&p, 1024));
    launch(first, 1, 32, 0, args);
    CHECK(cudaDeviceSynchronize());
    usleep(400000); /* exec runs no atexit handlers: let a periodic flush hand over the kernel record */
    fflush(stdout);
    execl("/proc/self/exe", argv[0], "again", (char *)NULL);
    return 9;
}
