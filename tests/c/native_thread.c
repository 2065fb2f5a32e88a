/* A thread that runs no Python, for the Python-stack tests (tests/py/py_stacks.py native): a library whose
 * cuflight_native_launches(func, n) starts a POSIX thread that launches kernel `func` n times and synchronises,
 * and waits for it. Called through ctypes, which releases the GIL, the Python thread waits inside that call as
 * PyTorch's main thread waits in loss.backward() while autograd's device threads launch the backward pass. */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stddef.h>

struct job {
    const void *func;
    int n;
    int rc;
};

static void *run(void *p) {
    struct job *j = p;
    void *args[1] = {NULL};
    dim3 one = {1, 1, 1};
    for (int i = 0; i < j->n; i++) {
        cudaError_t e = cudaLaunchKernel(j->func, one, one, args, 0, NULL);
        if (e != cudaSuccess) {
            j->rc = (int)e;
            return NULL;
        }
    }
    j->rc = (int)cudaDeviceSynchronize();
    return NULL;
}

int cuflight_native_launches(const void *func, int n) {
    struct job j = {func, n, 0};
    pthread_t t;
    if (pthread_create(&t, NULL, run, &j) != 0) return -1;
    pthread_join(t, NULL);
    return j.rc;
}
