/* Another CUPTI client subscribes before CUDA starts (as a second profiler would): the agent must turn itself
 * off with one line on stderr while the program runs to completion unharmed. */
#include "sim.h"
#include <cupti.h>

static void CUPTIAPI on_api(void *u, CUpti_CallbackDomain d, CUpti_CallbackId c, const void *data) {
    (void)u; (void)d; (void)c; (void)data;
}

void noop(void **args) { (void)args; }

/* With "late", the program subscribes only after CUDA started (and the agent set itself up, or failed to): it
 * exits 20 if CUPTI is still held by an agent that gave up. */
int main(int argc, char **argv) {
    int late = argc > 1 && argv[1][0] == 'l';
    CUpti_SubscriberHandle sub;
    if (!late && cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_api, NULL) != CUPTI_SUCCESS) return 20;
    void *args[] = {NULL};
    launch(noop, 1, 1, 0, args);
    if (late && cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_api, NULL) != CUPTI_SUCCESS) return 20;
    CHECK(cudaDeviceSynchronize());
    printf("subscriber: ok\n");
    return 0;
}
