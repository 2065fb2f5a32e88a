/* Training loops with one planted bottleneck each, for `cuflight report` tests. Kernels sleep for their
 * planted duration (cudasim runs a kernel as a host function on the stream's device thread).
 *
 * Usage: scenario MODE [steps] [rank world barrier-file]
 *   clean     per step: pinned async 1 MiB batch copy, 4 Tensor Core GEMMs (2 ms) + 2 elementwise (0.3 ms), a stream
 *             sync at the end with nothing for the host to do after it: no bottleneck above a few percent.
 *   dataload  12 ms of host-side input preparation per step (no annotation), then 4 x 1 ms GEMMs; no syncs:
 *             the GPU idles about 12 - 4.2 ms per step.
 *   item      3 ms of host work per step before its launches, and the loss read back with a synchronous
 *             device-to-host copy (.item()) at its end: the 3 ms are exposed.
 *   pageable  a 32 MiB copy from pageable memory per step (4.2 ms at the simulated 8 GB/s) + 4 x 1 ms GEMMs.
 *   tiny      1000 kernels of about 2 us per step + one 1 ms kernel, no step annotations: launch-bound, steps
 *             from the launch pattern.
 *   fp32      as clean with fp32 SIMT GEMM names (ampere_sgemm_*).
 *   leak      as clean plus a 16 MiB cudaMalloc per step that is never freed.
 *   hostalloc as clean plus a 4 MiB pinned staging buffer allocated (cudaHostAlloc) and freed (cudaFreeHost) in every
 *             step: allocator churn on the host side.
 *   open      as clean, but the last step's range is never closed.
 *   warmup    as clean, after three warm-up steps as a real job's: step 0 spends 30 ms on the host (cuDNN/cuBLAS
 *             heuristics) and runs 8 autotuning candidates (1 ms each) that no later step runs; steps 0-2 grow
 *             the allocator (an 8 MiB cudaMalloc each); step 1 spends 10 ms on the host.
 *   crossstream  as clean, but the GEMMs wait (cudaStreamWaitEvent) on an event recorded on a side stream after a
 *             3 ms host function there (cudaLaunchHostFunc, e.g. a staging callback): the GPU idles 3 ms per step
 *             with the GEMMs queued, waiting on the other stream.
 *   hostfn    as clean, but a 3 ms host function is queued in the stream before the GEMMs: the GPU idles 3 ms per
 *             step with the GEMMs queued behind it.
 *   poll      as clean, but after the GEMMs a 3 ms host function runs on the stream and the host polls an event
 *             recorded after it (cudaEventQuery every 50 us) before launching the elementwise kernels: the GPU
 *             idles 3 ms per step while the host polls.
 *   quick     per step three NVTX ranges layer_0..layer_2, each around one 2 us kernel, and a stream sync: a
 *             thousand steps take about a second (for tests of output size).
 *   rank      as clean plus an all-reduce kernel that waits for every rank (a counter in a shared file); rank 1
 *             runs an extra 3 ms kernel per step, so the others wait about 3 ms per step. Each rank prints the
 *             median of how much later than the others it joined the collectives, as it measured it. */
#include "sim.h"
#include <fcntl.h>
#include <nvtx3/nvToolsExt.h>
#include <string.h>
#include <linux/futex.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static void sleep_us(long us) {
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&t, NULL);
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* What was actually planted (sleeps overshoot on a loaded machine): printed at exit for the tests. */
static int64_t planted_ns;

/* Sleeps and counts the time slept as planted. */
static void plant_us(long us) {
    int64_t t0 = now_ns();
    sleep_us(us);
    __atomic_add_fetch(&planted_ns, now_ns() - t0, __ATOMIC_RELAXED);
}

void ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_nn(void **a) { (void)a; sleep_us(2000); }
void ampere_sgemm_128x64_nn(void **a) { (void)a; sleep_us(2000); }
void ampere_bf16_s16816gemm_bf16_64x64_nn(void **a) { (void)a; sleep_us(1000); }
void vectorized_elementwise_kernel(void **a) { (void)a; sleep_us(300); }
void tiny_add_kernel(void **a) { (void)a; busy_us(2); }
void reduce_kernel(void **a) { (void)a; sleep_us(1000); }
void slow_rank_extra_kernel(void **a) { (void)a; plant_us(3000); }
void cutlass_autotune_candidate_kernel(void **a) { (void)a; sleep_us(1000); }
/* A host function queued in a stream (cudaLaunchHostFunc): not GPU work; later work in its stream waits for it. */
static void CUDART_CB host_callback(void *a) { (void)a; plant_us(3000); }

/* nvcc registers each kernel's device symbol, mangled (Itanium C++ ABI), and CUPTI reports that name: the
 * all-reduce as NCCL 2.19+ names its kernels and the elementwise kernel as PyTorch's. cuBLAS kernels such as
 * ampere_sgemm_128x64_nn are not C++-mangled and keep their plain names. */
extern void **__cudaRegisterFatBinary(void *);
extern void __cudaRegisterFunction(void **, const char *, char *, const char *, int, void *, void *, void *, void *,
                                   int *);
void ncclKernel_AllReduce_RING_LL_Sum_float(void **a);
static void register_device_names(void) {
    void **h = __cudaRegisterFatBinary(NULL);
    __cudaRegisterFunction(h, (const char *)ncclKernel_AllReduce_RING_LL_Sum_float,
                           "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE",
                           "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE", -1, NULL,
                           NULL, NULL, NULL, NULL);
    __cudaRegisterFunction(
        h, (const char *)vectorized_elementwise_kernel,
        "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_",
        "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_", -1,
        NULL, NULL, NULL, NULL, NULL);
}

/* Arrivals so far, across the ranks (a futex word in the shared barrier file). */
static int *barrier_counter;
/* Each rank's arrival at each collective (the machine's CLOCK_MONOTONIC, which every simulated host shares
 * whatever its own clock says: cudasim_machine_monotonic_ns), in slots reused
 * every 32 collectives (no rank is ever more than one collective ahead): [slot][rank], ranks < 8. */
static int64_t *arrivals;
static int world = 1, my_rank;
static long collectives;
/* How much later than the other ranks (their lower median) this rank arrived, per collective: the truth the
 * report's lateness is checked against (the ranks share this host's clock). */
static int64_t lateness[4096];

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* cudasim's test-only hooks (not CUDA): the simulated GPU finishes this kernel at `ns`, on the machine's
 * CLOCK_MONOTONIC, which the second reads beneath the simulated host's own clock. */
extern void cudasim_kernel_ends_at(uint64_t ns);
extern uint64_t cudasim_machine_monotonic_ns(void);

/* Joins when every rank has joined this collective, then "transfers" for 0.5 ms from the last arrival, so the
 * collective ends at one instant on every rank, as a real all-reduce does (NCCL's ring finishes within µs on
 * every participant). Ranks wait on a futex rather than spinning, so waiting ranks leave the cores to the
 * late one, and the end is the GPU's (cudasim_kernel_ends_at: the last arrival + 0.5 ms on the machine's
 * CLOCK_MONOTONIC, which the ranks share), so the host's scheduler, which can wake one rank's thread late, does
 * not move it. */
void ncclKernel_AllReduce_RING_LL_Sum_float(void **a) {
    (void)a;
    long c = collectives++;
    int target = (int)(world * collectives);
    int64_t *slot = arrivals + (c % 32) * 8;
    __atomic_store_n(&slot[my_rank], (int64_t)cudasim_machine_monotonic_ns(), __ATOMIC_SEQ_CST);
    int seen = __atomic_add_fetch(barrier_counter, 1, __ATOMIC_SEQ_CST);
    if (seen >= target) {
        syscall(SYS_futex, barrier_counter, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    } else {
        while ((seen = __atomic_load_n(barrier_counter, __ATOMIC_SEQ_CST)) < target)
            syscall(SYS_futex, barrier_counter, FUTEX_WAIT, seen, NULL, NULL, 0);
    }
    int64_t last = 0;
    for (int r = 0; r < world && r < 8; r++) {
        int64_t t = __atomic_load_n(&slot[r], __ATOMIC_SEQ_CST);
        if (t > last) last = t;
    }
    if (world > 1 && c < 4096) {
        int64_t others[8];
        int n = 0;
        for (int r = 0; r < world && r < 8; r++)
            if (r != my_rank) others[n++] = __atomic_load_n(&slot[r], __ATOMIC_SEQ_CST);
        qsort(others, n, sizeof others[0], cmp_i64);
        lateness[c] = slot[my_rank] - others[(n - 1) / 2];
    }
    cudasim_kernel_ends_at((uint64_t)(last + 500000));
}

int main(int argc, char **argv) {
    register_device_names();
    const char *mode = argc > 1 ? argv[1] : "clean";
    int steps = argc > 2 ? atoi(argv[2]) : 12;
    int rank = argc > 3 ? atoi(argv[3]) : 0;
    my_rank = rank;
    if (argc > 5) {
        world = atoi(argv[4]);
        if (world > 8 || rank >= world) return 2;
        int fd = open(argv[5], O_RDWR | O_CREAT, 0600);
        if (fd < 0 || ftruncate(fd, 4096) != 0) return 2;
        barrier_counter = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (barrier_counter == MAP_FAILED) return 2;
        arrivals = (int64_t *)((char *)barrier_counter + 64);
    }
#define MODE(m) (strcmp(mode, m) == 0)
    size_t batch_bytes = MODE("pageable") ? (32u << 20) : (1u << 20);
    char *pinned = NULL, *pageable = malloc(batch_bytes);
    CHECK(cudaMallocHost((void **)&pinned, batch_bytes));
    float *d_batch = NULL, *d_loss = NULL, loss = 0;
    CHECK(cudaMalloc((void **)&d_batch, batch_bytes));
    CHECK(cudaMalloc((void **)&d_loss, sizeof(float)));
    cudaStream_t s, side;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaStreamCreate(&side));
    cudaEvent_t ready;
    CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    /* Warm-up outside the steps, as a real job's first iterations: touch every buffer once. */
    memset(pinned, 1, batch_bytes);
    memset(pageable, 1, batch_bytes);
    CHECK(cudaMemset(d_batch, 0, batch_bytes));
    CHECK(cudaMemcpy(d_batch, pinned, batch_bytes, cudaMemcpyHostToDevice));
    void *args[] = {&d_batch, NULL};
    if (MODE("rank")) { /* ranks start at different moments: line them up once, as DDP's initial broadcast does */
        launch(ncclKernel_AllReduce_RING_LL_Sum_float, 8, 512, s, args);
        CHECK(cudaStreamSynchronize(s));
    }
    void (*gemm)(void **) =
        MODE("fp32") ? ampere_sgemm_128x64_nn : ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_nn;
    char name[64];
    for (int step = 0; step < steps; step++) {
        if (!MODE("tiny")) {
            snprintf(name, sizeof name, "ProfilerStep#%d", step);
            nvtxRangePushA(name);
        }
        if (MODE("dataload")) {
            plant_us(12000); /* decoding and augmentation on the host */
            CHECK(cudaMemcpyAsync(d_batch, pinned, batch_bytes, cudaMemcpyHostToDevice, s));
            for (int i = 0; i < 4; i++) launch(ampere_bf16_s16816gemm_bf16_64x64_nn, 132, 256, s, args);
        } else if (MODE("pageable")) {
            CHECK(cudaMemcpy(d_batch, pageable, batch_bytes, cudaMemcpyHostToDevice));
            for (int i = 0; i < 4; i++) launch(ampere_bf16_s16816gemm_bf16_64x64_nn, 132, 256, s, args);
            CHECK(cudaStreamSynchronize(s));
        } else if (MODE("quick")) {
            for (int i = 0; i < 3; i++) {
                char layer[16];
                snprintf(layer, sizeof layer, "layer_%d", i);
                nvtxRangePushA(layer);
                launch(tiny_add_kernel, 1, 64, s, args);
                nvtxRangePop();
            }
            CHECK(cudaStreamSynchronize(s));
        } else if (MODE("tiny")) {
            for (int i = 0; i < 1000; i++) launch(tiny_add_kernel, 1, 64, s, args);
            launch(reduce_kernel, 132, 256, s, args);
            CHECK(cudaStreamSynchronize(s));
        } else {
            if (MODE("item")) plant_us(3000); /* the forward pass's Python before its first kernel */
            if (MODE("warmup") && step < 3) {
                if (step < 2) sleep_us(step == 0 ? 30000 : 10000);
                for (int i = 0; step == 0 && i < 8; i++) launch(cutlass_autotune_candidate_kernel, 132, 256, s, args);
                void *grown = NULL;
                CHECK(cudaMalloc(&grown, 8u << 20)); /* the caching allocator reaching its working set */
            }
            if (MODE("hostalloc")) {
                void *staging = NULL;
                CHECK(cudaHostAlloc(&staging, 4u << 20, cudaHostAllocDefault));
                CHECK(cudaFreeHost(staging));
            }
            if (MODE("leak")) {
                void *leaked = NULL;
                CHECK(cudaMalloc(&leaked, 16u << 20)); /* kept alive "by a list of outputs" */
            }
            CHECK(cudaMemcpyAsync(d_batch, pinned, batch_bytes, cudaMemcpyHostToDevice, s));
            if (MODE("crossstream")) {
                CHECK(cudaLaunchHostFunc(side, host_callback, NULL));
                CHECK(cudaEventRecord(ready, side));
                CHECK(cudaStreamWaitEvent(s, ready, 0));
            }
            if (MODE("hostfn")) CHECK(cudaLaunchHostFunc(s, host_callback, NULL));
            for (int i = 0; i < 4; i++) launch(gemm, 132, 256, s, args);
            if (MODE("poll")) {
                CHECK(cudaLaunchHostFunc(s, host_callback, NULL));
                CHECK(cudaEventRecord(ready, s));
                cudaError_t q;
                while ((q = cudaEventQuery(ready)) == cudaErrorNotReady) sleep_us(50);
                CHECK(q);
            }
            for (int i = 0; i < 2; i++) launch(vectorized_elementwise_kernel, 1024, 256, s, args);
            if (MODE("rank")) {
                if (rank == 1) launch(slow_rank_extra_kernel, 132, 256, s, args);
                launch(ncclKernel_AllReduce_RING_LL_Sum_float, 8, 512, s, args);
            }
            if (MODE("item")) {
                CHECK(cudaMemcpy(&loss, d_loss, sizeof loss, cudaMemcpyDeviceToHost)); /* loss.item() */
            } else {
                CHECK(cudaStreamSynchronize(s));
            }
        }
        if (!MODE("tiny") && !(MODE("open") && step == steps - 1)) nvtxRangePop();
    }
    CHECK(cudaDeviceSynchronize());
    printf("scenario %s: %d steps\nplanted_ns=%lld\n", mode, steps, (long long)planted_ns);
    if (world > 1 && collectives > 0) {
        long n = collectives < 4096 ? collectives : 4096;
        qsort(lateness, n, sizeof lateness[0], cmp_i64);
        printf("lateness_ns[%d]=%lld\n", rank, (long long)lateness[(n - 1) / 2]);
    }
    return 0;
}
