/* A continuous-batching server in miniature, as model servers (vLLM, SGLang) run: requests arrive on a fixed
 * schedule (request i at iteration 4 i, 12 of them); an iteration prefills the requests that arrived (eagerly:
 * 8 kernels "prefill_layer" of 60 us each, inside an NVTX range "prefill_request") and decodes one token for the
 * running ones by replaying a CUDA graph captured before serving for the smallest batch bucket (1, 4 or 8) that
 * holds them (6 kernels "decode_layer" of 30 us and a memset of the logits); then it copies the sampled tokens
 * back (cudaMemcpyAsync on the serving stream and cudaStreamSynchronize, as `.tolist()` does on PyTorch's
 * current stream; a plain cudaMemcpy on the legacy stream would not wait for a non-blocking stream) and schedules
 * for 100 us. A request leaves after 10 decoded tokens.
 * With "named", each iteration is an NVTX range "prefill", "decode" or "mixed" (both) and each request an NVTX
 * start/end range "request" from its admission to its last token; with "plain" nothing is named.
 * With "offline" (named nothing), it serves an offline batch as vLLM's first scheduler did: 8 requests with long
 * prompts (prefill layers of 1 ms), all there at the start, prefilled one an iteration with no decode beside it,
 * then decoded together (bucket 8) for 60 tokens.
 * With "lazy" (named nothing), 20 requests decode 30 tokens (up to 8 run at once) and a bucket's graph is captured the
 * first time a batch needs it, as torch.compile's CUDA graph trees do: that batch runs eagerly, 10 ms of host work
 * record it (a real model's recording takes tens of milliseconds; a capture must stand out of a mixed step slowed by
 * a loaded machine), then it is captured and replayed (buckets 4 and 8 come mid-run).
 * Before serving (but lazily) it warms up: one prefill and one replay of each bucket.
 * It prints "batching: prefill P decode D mixed M requests R kernels K replays G", what it did while serving. */
#include "sim.h"
#include <nvtx3/nvToolsExt.h>
#include <string.h>
#include <unistd.h>

extern void cudasim_kernel_ends_at(uint64_t ns);
extern uint64_t cudasim_machine_monotonic_ns(void);

/* A prefill layer's time: 60 us, or 1 ms in an offline batch, whose prompts are long: a prefill there takes about
 * 20x a decode, which the decodes a loaded machine holds for a scheduler slice (3-5 ms: a test's slowest eighth
 * must still be its prefills) do not catch up with. */
static uint64_t prefill_layer_ns = 60000;

void prefill_layer(void **args) {
    (void)args;
    cudasim_kernel_ends_at(cudasim_machine_monotonic_ns() + prefill_layer_ns);
}

void decode_layer(void **args) {
    (void)args;
    cudasim_kernel_ends_at(cudasim_machine_monotonic_ns() + 30000);
}

enum { REQUESTS = 12, MAX_REQUESTS = 20, ARRIVAL_EVERY = 4, TOKENS = 10, PREFILL_KERNELS = 8, DECODE_KERNELS = 6, BUCKETS = 3 };
static const int bucket_size[BUCKETS] = {1, 4, 8};
static void *logits, *tokens, *host_tokens;

static void prefill(cudaStream_t s) {
    void *args[] = {NULL};
    for (int i = 0; i < PREFILL_KERNELS; i++) launch(prefill_layer, 64, 256, s, args);
}

static cudaGraphExec_t capture_decode(cudaStream_t s, int batch) {
    void *args[] = {NULL};
    cudaGraph_t graph;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CHECK(cudaMemsetAsync(logits, 0, (size_t)batch * 4096, s));
    for (int i = 0; i < DECODE_KERNELS; i++) launch(decode_layer, (unsigned)batch * 16, 128, s, args);
    CHECK(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphDestroy(graph));
    return exec;
}

/* The sampled tokens back to the host: the iteration's end. */
static void sample(cudaStream_t s) {
    CHECK(cudaMemcpyAsync(host_tokens, tokens, 4096, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
}

int main(int argc, char **argv) {
    int named = argc > 1 && !strcmp(argv[1], "named");
    int offline = argc > 1 && !strcmp(argv[1], "offline");
    int lazy = argc > 1 && !strcmp(argv[1], "lazy");
    int requests = offline ? 8 : lazy ? MAX_REQUESTS : REQUESTS, to_decode = offline ? 60 : lazy ? 30 : TOKENS;
    if (offline) prefill_layer_ns = 1000000;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaMalloc(&logits, 8 * 4096));
    CHECK(cudaMalloc(&tokens, 4096));
    CHECK(cudaMallocHost(&host_tokens, 4096));
    cudaGraphExec_t decode[BUCKETS] = {0};
    if (!lazy) {
        for (int b = 0; b < BUCKETS; b++) decode[b] = capture_decode(s, bucket_size[b]);
        prefill(s);
        for (int b = 0; b < BUCKETS; b++) CHECK(cudaGraphLaunch(decode[b], s));
        sample(s);
    }

    nvtxRangeId_t range[MAX_REQUESTS];
    int left[MAX_REQUESTS] = {0}, admitted = 0, finished = 0;
    long counts[3] = {0}, kernels = 0, replays = 0;
    static const char *kinds[3] = {"prefill", "decode", "mixed"};
    for (int it = 0; finished < requests; it++) {
        int arriving = admitted < requests && (offline || it == admitted * ARRIVAL_EVERY);
        int running = 0;
        for (int r = 0; r < admitted; r++) running += left[r] > 0;
        if (offline && arriving) running = 0; /* prefill-only while the batch is admitted */
        if (!arriving && !running) {
            usleep(100);
            continue;
        }
        int kind = arriving && running ? 2 : arriving ? 0 : 1;
        counts[kind]++;
        if (named) nvtxRangePushA(kinds[kind]);
        if (arriving) {
            if (named) range[admitted] = nvtxRangeStartA("request");
            if (named) nvtxRangePushA("prefill_request");
            prefill(s);
            kernels += PREFILL_KERNELS;
            if (named) nvtxRangePop();
        }
        if (running) {
            int b = 0;
            while (bucket_size[b] < running) b++;
            if (!decode[b]) {
                void *args[] = {NULL};
                CHECK(cudaMemsetAsync(logits, 0, (size_t)bucket_size[b] * 4096, s));
                for (int i = 0; i < DECODE_KERNELS; i++)
                    launch(decode_layer, (unsigned)bucket_size[b] * 16, 128, s, args);
                usleep(10000);
                decode[b] = capture_decode(s, bucket_size[b]);
            }
            CHECK(cudaGraphLaunch(decode[b], s));
            kernels += DECODE_KERNELS;
            replays++;
        }
        sample(s);
        busy_us(100);
        for (int r = 0; running && r < admitted; r++) {
            if (left[r] > 0 && --left[r] == 0) {
                if (named) nvtxRangeEnd(range[r]);
                finished++;
            }
        }
        if (arriving) left[admitted++] = to_decode;
        if (named) nvtxRangePop();
    }
    for (int b = 0; b < BUCKETS; b++) CHECK(cudaGraphExecDestroy(decode[b]));
    printf("batching: prefill %ld decode %ld mixed %ld requests %d kernels %ld replays %ld\n", counts[0], counts[1],
           counts[2], requests, kernels, replays);
    return 0;
}
