/* NVTX across threads and domains, in a CPU-only process (no CUDA call at all): the real nvtx3 headers load
 * the agent through NVTX_INJECTION64_PATH. Expected (asserted by tests/tests/nvtx.rs):
 *   default domain: "outer" x1 containing "inner" x3 (push/pop, main thread), "worker" x4 (push/pop on a second
 *   thread), "handoff" x1 (start on the worker, end on main), mark "checkpoint" x2;
 *   domain "io": "read" x5 (registered string, push/pop), mark "eof" x1;
 *   wide strings: "wide" x1 (push/pop), mark "wide-mark" x1, domain "io" "wide-read" x1 (nvtxDomainRangePushEx
 *   with a unicode message); categories: 7 "data" (default domain), 3 "disk" (domain "io");
 *   depths are kept per domain: a push in "io" inside a default-domain range returns 0 (exit 3 otherwise);
 *   payloads: range "batch" x1 with int64 payload 42, mark "loss" x1 with double payload 2.5. */
#define _GNU_SOURCE
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static nvtxRangeId_t handoff;

static void sleep_us(long us) {
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static void *worker(void *arg) {
    (void)arg;
    nvtxNameOsThreadA((uint32_t)gettid(), "nvtx-worker");
    for (int i = 0; i < 4; i++) {
        nvtxRangePushA("worker");
        sleep_us(200);
        nvtxRangePop();
    }
    handoff = nvtxRangeStartA("handoff");
    return NULL;
}

int main(void) {
    nvtxDomainHandle_t io = nvtxDomainCreateA("io");
    nvtxStringHandle_t read_name = nvtxDomainRegisterStringA(io, "read");

    nvtxRangePushA("outer");
    for (int i = 0; i < 3; i++) {
        nvtxRangePushA("inner");
        sleep_us(300);
        nvtxRangePop();
    }
    nvtxMarkA("checkpoint");
    nvtxRangePop();

    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    sleep_us(500);
    nvtxRangeEnd(handoff);

    nvtxEventAttributes_t attr = {0};
    attr.version = NVTX_VERSION;
    attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attr.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    attr.message.registered = read_name;
    for (int i = 0; i < 5; i++) {
        nvtxDomainRangePushEx(io, &attr);
        sleep_us(100);
        nvtxDomainRangePop(io);
    }
    nvtxEventAttributes_t mark = {0};
    mark.version = NVTX_VERSION;
    mark.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    mark.messageType = NVTX_MESSAGE_TYPE_ASCII;
    mark.message.ascii = "eof";
    nvtxDomainMarkEx(io, &mark);
    nvtxMarkA("checkpoint");

    nvtxNameCategoryA(7, "data");
    nvtxDomainNameCategoryA(io, 3, "disk");
    nvtxRangePushW(L"wide");
    nvtxMarkW(L"wide-mark");
    nvtxEventAttributes_t wide = {0};
    wide.version = NVTX_VERSION;
    wide.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    wide.messageType = NVTX_MESSAGE_TYPE_UNICODE;
    wide.message.unicode = L"wide-read";
    int depth = nvtxDomainRangePushEx(io, &wide);
    nvtxDomainRangePop(io);
    nvtxRangePop();
    if (depth != 0) {
        fprintf(stderr, "io depth %d inside a default-domain range: depths must be per domain\n", depth);
        return 3;
    }
    nvtxEventAttributes_t batch = {0};
    batch.version = NVTX_VERSION;
    batch.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    batch.messageType = NVTX_MESSAGE_TYPE_ASCII;
    batch.message.ascii = "batch";
    batch.payloadType = NVTX_PAYLOAD_TYPE_INT64;
    batch.payload.llValue = 42;
    nvtxRangePushEx(&batch);
    nvtxRangePop();
    nvtxEventAttributes_t loss = batch;
    loss.message.ascii = "loss";
    loss.payloadType = NVTX_PAYLOAD_TYPE_DOUBLE;
    loss.payload.dValue = 2.5;
    nvtxMarkEx(&loss);
    printf("nvtx: ok\n");
    return 0;
}
