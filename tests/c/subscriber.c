/* Another CUPTI client subscribes before CUDA starts (as a second profiler would): the agent must turn itself
 * off with one line on stderr while the program runs to completion unharmed. */
#include "sim.h"
#include <cupti.h>

static void CUPTIAPI on_api(void *u, CUpti_CallbackDomain d, CUpti_CallbackId c, const void *data) {
    (void)u; (void)d; (void)c; (void)data;
}

void noop(void **args) { (void)args; }

int main(void) {
    CUpti_SubscriberHandle sub;
    if (cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_api, NULL) != CUPTI_SUCCESS) return 20;
    void *args[] = {NULL};
    launch(noop, 1, 1, 0, args);
    CHECK(cudaDeviceSynchronize());
    printf("subscriber: ok\n");
    return 0;
}
