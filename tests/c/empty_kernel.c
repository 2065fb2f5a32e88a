/* cudasim's stand-in for tests/gpu/empty_kernel.cu: a no-op kernel written in C for the Python programs that drive
 * the runtime through ctypes (tests/py/cudart_ctypes.py, named by CUDART_KERNEL_LIB). Without it their kernel is a
 * ctypes callback, and cudasim's stream thread, which runs kernels, then creates and destroys a Python thread state
 * at every launch: the process's memory map changes each time (TLB shootdowns on every core), which no program on a
 * real GPU pays and which made Python-stack reads cost 16-30 us instead of 4-5 (benches/eager-loop).
 *   cc -O2 -shared -fPIC -o libempty_kernel.so empty_kernel.c */
static void empty_kernel(void **args) { (void)args; }

const void *cuflight_empty_kernel(void) { return (const void *)empty_kernel; }
