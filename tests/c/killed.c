/* Runs 40 kernels, waits long enough for several agent flush periods (the test sets CUFLIGHT_FLUSH_MS=100),
 * then SIGKILLs itself: everything before the last flush must be in the trace, and the trace must load. */
#include "sim.h"
#include <nvtx3/nvToolsExt.h>
#include <signal.h>
#include <unistd.h>

void work(void **args) {
    (void)args;
    busy_us(100);
}

int main(void) {
    void *args[] = {NULL};
    nvtxRangePushA("before-kill");
    for (int i = 0; i < 40; i++) launch(work, 1, 1, 0, args);
    CHECK(cudaDeviceSynchronize());
    nvtxRangePop();
    usleep(800 * 1000);
    raise(SIGKILL);
    return 0;
}
