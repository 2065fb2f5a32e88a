// A no-op kernel for Python programs that drive the CUDA runtime through ctypes (tests/py/cudart_ctypes.py) on a
// real GPU, where a host function cannot be launched as cudasim lets it be. Built as a library against the shared
// runtime, so that its kernel is registered with the same libcudart the program calls:
//   nvcc -O2 -shared -Xcompiler -fPIC -cudart shared -o libempty_kernel.so empty_kernel.cu
// and named by CUDART_KERNEL_LIB.
__global__ void empty_kernel(void) {}

extern "C" const void *cuflight_empty_kernel(void) { return (const void *)empty_kernel; }
