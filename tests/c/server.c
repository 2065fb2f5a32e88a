/* A long-running "server": launches a small kernel every 10 ms until SECONDS have passed (or, with SECONDS 0,
 * until its standard input closes), printing "server: ready" once CUDA is up. With "subscribe" it first
 * subscribes to CUPTI itself, as torch.profiler or nsys would: it exits 21 if an agent holds CUPTI.
 * "server cmd" instead obeys lines on stdin: "k N" launches N kernels, synchronises and prints "done N";
 * "s" subscribes to CUPTI and unsubscribes, printing "subscribed" or "refused"; "t N M" runs N steps (an NVTX
 * range "step" around M kernels each); "r NAME M" runs M kernels inside an NVTX range NAME; "p" and "P" call
 * cudaProfilerStart and cudaProfilerStop; each prints "done"; "S" subscribes to CUPTI and keeps the subscription
 * (as a profiler would), "U" drops it; "F" forks a child that opens 5 NVTX ranges "child" and exits, and waits for
 * it; "h SECONDS" runs a kernel "spin" that takes SECONDS and waits for it (a hang, seen from the host); "x"
 * dereferences NULL (SIGSEGV); "o" overflows its stack (SIGSEGV on the guard page); "a" calls abort(); "e" runs a kernel that faults (an illegal address, through
 * cudasim's test-only cudasim_kernel_fault) and prints the errors the next two synchronisations return; "M" makes the
 * program a second tool in CUPTI's multi-subscriber mode (13.5: cuptiSubscribe_v2 allowing multiple subscribers,
 * launch callbacks and kernel records through the per-subscriber Activity API), printing "subscribed" or
 * "refused NAME"; "G" gives the main thread an alternate signal stack and blocks SIGUSR2, "g" prints them
 * ("altstack PTR SIZE flags F usr2 1"); "v" waits for the next line in a raw read system call with known values in xmm0 and
 * xmm15 (d0 and d31 on aarch64) and prints "xmm ok" if they survived (an injection interrupts that very call); "c N" times N cudaGetDevice calls and prints "ns PER_CALL"; "E N" makes N
 * rounds of the error queries (cudaGetLastError, cudaPeekAtLastError, cudaGetErrorString) and prints "done"; "n NAME" names the calling thread through NVTX and prints "done"; "m" flushes and prints "tool LAUNCHES KERNELS" (what that tool saw so far); "W" unsubscribes it; "D" launches one kernel through the driver API (cuLaunchKernel); "f" prints
 * "finalized N", cudasim's count of cuptiFinalize teardowns (-1 on real CUDA); "z" prints "zeroed PROMISED dirty
 * N api R", whether the tool promised CUPTI zeroed activity buffers, how many it handed over dirty and how many
 * API activity records CUPTI wrote (cudasim's test-only counts, -1 on real CUDA); "R N" replays N times a CUDA graph of
 * two kernels "tick" (captured at the first "R") and prints "done N"; "u NAME M" opens an NVTX range NAME
 * and runs M kernels in it without closing it, "q" closes it, each printing "done"; "O" asks cudaMalloc for 2^60
 * bytes and prints "oom CODE"; "Q" queries a stream busy with a 50 ms kernel and prints "query CODE", then waits;
 * "b MS" starts a second thread, named "side-stepper" by pthread_setname_np, that runs NVTX steps "step" of about MS ms back to back (a kernel on a stream of
 * its own, then a sleep: a server's other GPU thread) and prints "done" (while it runs: its next steps take MS),
 * "B" stops it and prints "done N" (its steps); "d N" makes an NVTX domain "NCCL" and registers the string
 * "ncclAllReduce" in it on its first use (as NCCL does when it initialises, often before any window), then opens
 * N ranges in that domain named by the registered string, and prints "done"; "N COUNT" opens COUNT NVTX ranges,
 * each with a name of its own of about 1 KB ("request 17 000..."), as a server that names each request would, and
 * prints "done"; EOF ends it. */
#define _GNU_SOURCE /* pthread_setname_np */
#include "sim.h"
#include <cuda.h>
#include <dlfcn.h>
#include <cupti.h>
#include <nvtx3/nvToolsExt.h>
#include <poll.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

static void CUPTIAPI on_api(void *u, CUpti_CallbackDomain d, CUpti_CallbackId c, const void *data) {
    (void)u; (void)d; (void)c; (void)data;
}

/* The second tool (multi-subscriber mode): what it saw. */
static CUpti_SubscriberHandle tool;
static long tool_launches, tool_kernels;
static void CUPTIAPI tool_api(void *u, CUpti_CallbackDomain d, CUpti_CallbackId c, const void *data) {
    (void)u;
    const CUpti_CallbackData *cb = data;
    if (d == CUPTI_CB_DOMAIN_RUNTIME_API && c == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 &&
        cb->callbackSite == CUPTI_API_EXIT)
        __atomic_fetch_add(&tool_launches, 1, __ATOMIC_RELAXED);
}
static void CUPTIAPI tool_request(uint8_t **buf, size_t *size, size_t *max, CUpti_BufferCallbackRequestInfo *info) {
    (void)info;
    *size = 1 << 16;
    *buf = aligned_alloc(8, *size);
    *max = 0;
}
static void CUPTIAPI tool_complete(uint8_t *buf, size_t size, size_t valid, CUpti_BufferCallbackCompleteInfo *info) {
    (void)size; (void)info;
    CUpti_Activity *r = NULL;
    while (tool && cuptiActivityGetNextRecord_v2(tool, buf, valid, &r) == CUPTI_SUCCESS)
        if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) __atomic_fetch_add(&tool_kernels, 1, __ATOMIC_RELAXED);
    free(buf);
}
static void tool_subscribe(void) {
    char old[256] = "";
    CUpti_SubscriberParams p;
    memset(&p, 0, sizeof p);
    p.structSize = sizeof p;
    p.subscriberName = "othertool";
    p.oldSubscriberName = old;
    p.oldSubscriberSize = sizeof old;
    p.allowMultipleSubscribers = 1;
    if (cuptiSubscribe_v2(&tool, (CUpti_CallbackFunc)tool_api, NULL, &p) != CUPTI_SUCCESS) {
        tool = NULL;
        printf("refused %s\n", old);
        return;
    }
    cuptiEnableDomain(1, tool, CUPTI_CB_DOMAIN_RUNTIME_API);
    cuptiActivityRegisterCallbacks_v2(tool, tool_request, tool_complete);
    cuptiActivityEnable_v2(tool, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, NULL);
    printf("subscribed\n");
}

/* cuda_profiler_api.h (not in the header wheels) declares these two libcudart entry points. */
extern cudaError_t CUDARTAPI cudaProfilerStart(void);
extern cudaError_t CUDARTAPI cudaProfilerStop(void);

void tick(void **args) { (void)args; }

/* cudasim runs a kernel's body on its stream's worker thread: sleeping there is a kernel that takes that long. */
static double spin_seconds;
/* Recursion deeper than any stack: it runs into the guard page (the depth comes from the caller, so the compiler
 * cannot prove it endless). */
static int deeper(volatile char *above, long depth) {
    volatile char frame[1024];
    frame[0] = above ? above[0] : 1;
    if (depth <= 0) return frame[0];
    return deeper(frame, depth - 1) + frame[0];
}

/* cudasim's test-only hook (no CUDA entry point): the kernel faults with an illegal address (700). */
extern void cudasim_kernel_fault(unsigned code);
void faulty(void **args) {
    (void)args;
    cudasim_kernel_fault(700);
}

void spin(void **args) {
    (void)args;
    usleep((useconds_t)(spin_seconds * 1e6));
}

/* "b MS": the second stepping thread, until "B". */
static volatile int side_running;
static long side_ms, side_steps;
static void *side_stepper(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "side-stepper");
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *args[] = {NULL};
    while (__atomic_load_n(&side_running, __ATOMIC_ACQUIRE)) {
        nvtxRangePushA("step");
        launch(tick, 1, 1, s, args);
        CHECK(cudaStreamSynchronize(s));
        usleep((useconds_t)(__atomic_load_n(&side_ms, __ATOMIC_RELAXED) * 1000));
        nvtxRangePop();
        side_steps++;
    }
    return NULL;
}

static int stdin_closed(void) {
    struct pollfd p = {0, POLLIN, 0};
    char buf[64];
    return poll(&p, 1, 0) > 0 && read(0, buf, sizeof buf) <= 0;
}

static int commands(void) {
    void *args[] = {NULL};
    CUpti_SubscriberHandle held = NULL;
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (line[0] == 'k') {
            long n = atol(line + 1);
            for (long i = 0; i < n; i++) launch(tick, 1, 1, 0, args);
            CHECK(cudaDeviceSynchronize());
            printf("done %ld\n", n);
        } else if (line[0] == 'R') {
            /* A CUDA graph of two kernels, captured on the first "R", replayed N times. */
            static cudaStream_t gs;
            static cudaGraphExec_t gexec;
            long n = atol(line + 1);
            if (!gexec) {
                cudaGraph_t g;
                CHECK(cudaStreamCreateWithFlags(&gs, cudaStreamNonBlocking));
                CHECK(cudaStreamBeginCapture(gs, cudaStreamCaptureModeGlobal));
                launch(tick, 1, 1, gs, args);
                launch(tick, 1, 1, gs, args);
                CHECK(cudaStreamEndCapture(gs, &g));
                CHECK(cudaGraphInstantiate(&gexec, g, 0));
            }
            for (long i = 0; i < n; i++) CHECK(cudaGraphLaunch(gexec, gs));
            CHECK(cudaStreamSynchronize(gs));
            printf("done %ld\n", n);
        } else if (line[0] == 't') {
            long steps = 0, per = 0;
            sscanf(line + 1, "%ld %ld", &steps, &per);
            for (long i = 0; i < steps; i++) {
                nvtxRangePushA("step");
                for (long k = 0; k < per; k++) launch(tick, 1, 1, 0, args);
                CHECK(cudaDeviceSynchronize());
                nvtxRangePop();
            }
            printf("done\n");
        } else if (line[0] == 'r' || line[0] == 'u') {
            char name[32] = "";
            long per = 0;
            sscanf(line + 1, "%31s %ld", name, &per);
            nvtxRangePushA(name);
            for (long k = 0; k < per; k++) launch(tick, 1, 1, 0, args);
            CHECK(cudaDeviceSynchronize());
            if (line[0] == 'r') nvtxRangePop();
            printf("done\n");
        } else if (line[0] == 'q') {
            nvtxRangePop();
            printf("done\n");
        } else if (line[0] == 'p' || line[0] == 'P') {
            CHECK(line[0] == 'p' ? cudaProfilerStart() : cudaProfilerStop());
            printf("done\n");
        } else if (line[0] == 'S') {
            printf(cuptiSubscribe(&held, (CUpti_CallbackFunc)on_api, NULL) == CUPTI_SUCCESS ? "subscribed\n" : "refused\n");
        } else if (line[0] == 'F') {
            pid_t child = fork();
            if (child == 0) {
                for (int i = 0; i < 5; i++) {
                    nvtxRangePushA("child");
                    nvtxRangePop();
                }
                _exit(0);
            }
            int status = 1;
            waitpid(child, &status, 0);
            printf(WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "done\n" : "child failed\n");
        } else if (line[0] == 'h') {
            spin_seconds = atof(line + 1);
            launch(spin, 1, 1, 0, args);
            CHECK(cudaDeviceSynchronize());
            printf("done\n");
        } else if (line[0] == 'O') {
            void *huge = NULL;
            printf("oom %d\n", (int)cudaMalloc(&huge, (size_t)1 << 60));
        } else if (line[0] == 'Q') {
            spin_seconds = 0.05;
            launch(spin, 1, 1, 0, args);
            printf("query %d\n", (int)cudaStreamQuery(0));
            CHECK(cudaDeviceSynchronize());
        } else if (line[0] == 'b' || line[0] == 'B') {
            static pthread_t side;
            if (line[0] == 'b' && side_running) {
                __atomic_store_n(&side_ms, atol(line + 1), __ATOMIC_RELAXED);
                printf("done\n");
            } else if (line[0] == 'b') {
                side_ms = atol(line + 1);
                side_running = 1;
                pthread_create(&side, NULL, side_stepper, NULL);
                printf("done\n");
            } else if (line[0] == 'B' && side_running) {
                __atomic_store_n(&side_running, 0, __ATOMIC_RELEASE);
                pthread_join(side, NULL);
                printf("done %ld\n", side_steps);
            } else {
                printf("refused\n");
            }
        } else if (line[0] == 'e') {
            launch(faulty, 1, 1, 0, args);
            int first = (int)cudaDeviceSynchronize();
            printf("error %d %d\n", first, (int)cudaDeviceSynchronize());
        } else if (line[0] == 'x') {
            fflush(stdout);
            *(volatile int *)(uintptr_t)0 = 1;
        } else if (line[0] == 'o') {
            fflush(stdout);
            printf("%d\n", deeper(NULL, atol(line + 1) > 0 ? atol(line + 1) : 1L << 40));
        } else if (line[0] == 'a') {
            fflush(stdout);
            abort();
        } else if (line[0] == 'v') {
#if defined(__x86_64__)
            char buf[64];
            unsigned long long in0 = 0x1122334455667788ull, in15 = 0x99aabbccddeeff00ull, out0 = 0, out15 = 0;
            long n;
            __asm__ volatile(
                "movq %[a], %%xmm0\n\t"
                "movq %[b], %%xmm15\n\t"
                "syscall\n\t"
                "movq %%xmm0, %[c]\n\t"
                "movq %%xmm15, %[d]\n\t"
                : "=a"(n), [c] "=r"(out0), [d] "=r"(out15)
                : "a"(0L), "D"(0L), "S"(buf), "d"(sizeof buf), [a] "r"(in0), [b] "r"(in15)
                : "rcx", "r11", "memory", "xmm0", "xmm15");
            printf(n > 0 && out0 == in0 && out15 == in15 ? "xmm ok\n" : "xmm clobbered %ld\n", n);
#elif defined(__aarch64__)
            /* The same with the FP/SIMD registers d0 and d31 around read(2) (x8 = 63, asm-generic/unistd.h). */
            char buf[64];
            unsigned long long in0 = 0x1122334455667788ull, in31 = 0x99aabbccddeeff00ull, out0 = 0, out31 = 0;
            register long x0 __asm__("x0") = 0;
            register long x1 __asm__("x1") = (long)buf;
            register long x2 __asm__("x2") = sizeof buf;
            register long x8 __asm__("x8") = 63;
            __asm__ volatile(
                "fmov d0, %[a]\n\t"
                "fmov d31, %[b]\n\t"
                "svc #0\n\t"
                "fmov %[c], d0\n\t"
                "fmov %[d], d31\n\t"
                : "+r"(x0), [c] "=&r"(out0), [d] "=&r"(out31)
                : "r"(x1), "r"(x2), "r"(x8), [a] "r"(in0), [b] "r"(in31)
                : "memory", "v0", "v31");
            long n = x0;
            printf(n > 0 && out0 == in0 && out31 == in31 ? "xmm ok\n" : "xmm clobbered %ld\n", n);
#else
#error "the vector register check needs this architecture's registers"
#endif
        } else if (line[0] == 'G') {
            /* An alternate signal stack and SIGUSR2 blocked, for the test that an injection leaves both as found. */
            static char alt[64 << 10];
            stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0};
            sigset_t usr2;
            sigemptyset(&usr2);
            sigaddset(&usr2, SIGUSR2);
            printf(sigaltstack(&ss, NULL) == 0 && pthread_sigmask(SIG_BLOCK, &usr2, NULL) == 0 ? "done\n" : "failed\n");
        } else if (line[0] == 'g') {
            stack_t ss;
            sigset_t now;
            sigaltstack(NULL, &ss);
            pthread_sigmask(SIG_BLOCK, NULL, &now);
            printf("altstack %p %zu flags %d usr2 %d\n", ss.ss_sp, ss.ss_size, ss.ss_flags, sigismember(&now, SIGUSR2));
        } else if (line[0] == 'c') {
            long n = atol(line + 1);
            int dev = 0;
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            for (long i = 0; i < n; i++) cudaGetDevice(&dev);
            clock_gettime(CLOCK_MONOTONIC, &b);
            printf("ns %.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (n > 0 ? n : 1));
        } else if (line[0] == 'E') {
            long n = atol(line + 1);
            for (long i = 0; i < n; i++) {
                cudaGetLastError();
                cudaPeekAtLastError();
                (void)cudaGetErrorString(cudaSuccess);
            }
            printf("done\n");
        } else if (line[0] == 'N') {
            static long named;
            char name[1024];
            for (long i = atol(line + 1); i > 0; i--) {
                snprintf(name, sizeof name, "request %ld %01000d", named++, 0);
                nvtxRangePushA(name);
                nvtxRangePop();
            }
            printf("done\n");
        } else if (line[0] == 'd') {
            static nvtxDomainHandle_t domain;
            static nvtxStringHandle_t registered;
            static int made;
            if (!made) {
                made = 1;
                domain = nvtxDomainCreateA("NCCL");
                registered = nvtxDomainRegisterStringA(domain, "ncclAllReduce");
            }
            nvtxEventAttributes_t a = {0};
            a.version = NVTX_VERSION;
            a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
            a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
            a.message.registered = registered;
            for (long i = atol(line + 1); i > 0; i--) {
                nvtxDomainRangePushEx(domain, &a);
                launch(tick, 1, 1, 0, args);
                nvtxDomainRangePop(domain);
            }
            CHECK(cudaDeviceSynchronize());
            printf("done\n");
        } else if (line[0] == 'n') {
            char name[32] = "";
            sscanf(line + 1, "%31s", name);
            nvtxNameOsThreadA((uint32_t)syscall(SYS_gettid), name);
            printf("done\n");
        } else if (line[0] == 'M') {
            tool_subscribe();
        } else if (line[0] == 'm') {
            cuptiActivityFlushAll(0);
            printf("tool %ld %ld\n", tool_launches, tool_kernels);
        } else if (line[0] == 'W') {
            if (tool) {
                cuptiActivityDisable_v2(tool, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, NULL);
                cuptiActivityFlushAll(0);
                cuptiUnsubscribe(tool);
                tool = NULL;
            }
            printf("done\n");
        } else if (line[0] == 'U') {
            if (held) cuptiUnsubscribe(held);
            held = NULL;
            printf("done\n");
        } else if (line[0] == 'D') {
            /* One kernel launched through the driver API directly (recorded as a driver call of its own). */
            void *dargs[] = {NULL};
            int ok = cuLaunchKernel((CUfunction)(void *)tick, 1, 1, 1, 1, 1, 1, 0, NULL, dargs, NULL) == CUDA_SUCCESS;
            CHECK(cudaDeviceSynchronize());
            printf(ok ? "done\n" : "failed\n");
        } else if (line[0] == 'f') {
            /* cudasim's test-only count of cuptiFinalize teardowns (-1 where the symbol is absent: real CUDA). */
            uint64_t (*finalizations)(void) = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "cudasim_cupti_finalizations");
            printf("finalized %lld\n", finalizations ? (long long)finalizations() : -1LL);
        } else if (line[0] == 'z') {
            uint64_t (*promised)(void) = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "cudasim_client_zeroes_buffers");
            uint64_t (*dirty)(void) = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "cudasim_dirty_activity_buffers");
            uint64_t (*api)(void) = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "cudasim_api_records_written");
            printf("zeroed %lld dirty %lld api %lld\n", promised ? (long long)promised() : -1LL,
                   dirty ? (long long)dirty() : -1LL, api ? (long long)api() : -1LL);
        } else if (line[0] == 's') {
            CUpti_SubscriberHandle sub;
            int ok = cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_api, NULL) == CUPTI_SUCCESS;
            if (ok) cuptiUnsubscribe(sub);
            printf(ok ? "subscribed\n" : "refused\n");
        }
        fflush(stdout);
    }
    return 0;
}

/* A program's own SIGSEGV handler (SERVER_OWN_SEGV_HANDLER set: installed before CUDA starts), as crash reporters
 * install them: it says so and exits 42. */
static void own_segv_handler(int sig) {
    (void)sig;
    static const char msg[] = "server: own handler\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(42);
}

/* "server busy SECONDS": the main thread launches kernels without pause (it is never in a system call long enough
 * to be caught there); a second thread only sleeps. Prints "server: N kernels" at the end. */
static void *sleeper(void *arg) {
    (void)arg;
    for (;;) sleep(1000);
    return NULL;
}

static int busy(double seconds) {
    pthread_t t;
    pthread_create(&t, NULL, sleeper, NULL);
    void *args[] = {NULL};
    launch(tick, 1, 1, 0, args);
    CHECK(cudaDeviceSynchronize());
    printf("server: ready\n");
    fflush(stdout);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long kernels = 1;
    do {
        for (int i = 0; i < 100; i++, kernels++) launch(tick, 1, 1, 0, args);
        CHECK(cudaDeviceSynchronize());
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9 < seconds);
    printf("server: %ld kernels\n", kernels);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "busy") == 0) return busy(atof(argv[2]));
    if (getenv("SERVER_OWN_SEGV_HANDLER")) signal(SIGSEGV, own_segv_handler);
    if (argc > 1 && strcmp(argv[1], "cmd") == 0) {
        void *args[] = {NULL};
        launch(tick, 1, 1, 0, args);
        CHECK(cudaDeviceSynchronize());
        printf("server: ready\n");
        fflush(stdout);
        return commands();
    }
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    int subscribe = argc > 2 && strcmp(argv[2], "subscribe") == 0;
    void *args[] = {NULL};
    launch(tick, 1, 1, 0, args);
    CHECK(cudaDeviceSynchronize());
    if (subscribe) {
        CUpti_SubscriberHandle sub;
        if (cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_api, NULL) != CUPTI_SUCCESS) return 21;
        cuptiUnsubscribe(sub);
    }
    printf("server: ready\n");
    fflush(stdout);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long kernels = 1;
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        double elapsed = (t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9;
        if (seconds > 0 ? elapsed >= seconds : stdin_closed()) break;
        launch(tick, 1, 1, 0, args);
        kernels++;
        usleep(10000);
    }
    CHECK(cudaDeviceSynchronize());
    printf("server: %ld kernels\n", kernels);
    return 0;
}
