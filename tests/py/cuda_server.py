"""A Python process that uses CUDA through ctypes (no PyTorch needed): it loads libcudart.so from the library
path (cudasim in the tests), launches a Python function as a kernel (cudasim runs a kernel's host function on
its stream thread), and obeys lines on stdin like tests/c/server.c: "k N" launches N kernels, synchronises and
prints "done N". Started without cuflight, it is what `cuflight attach --inject` meets in a Python service."""
import ctypes
import sys


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


KERNEL = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p))


def main():
    rt = ctypes.CDLL("libcudart.so")
    rt.cudaLaunchKernel.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t,
                                    ctypes.c_void_p]
    rt.cudaLaunchKernel.restype = ctypes.c_int
    rt.cudaDeviceSynchronize.restype = ctypes.c_int
    kernel = KERNEL(lambda args: None)
    func = ctypes.cast(kernel, ctypes.c_void_p)
    args = (ctypes.c_void_p * 1)()

    def launch(n):
        for _ in range(n):
            assert rt.cudaLaunchKernel(func, Dim3(1, 1, 1), Dim3(1, 1, 1), args, 0, None) == 0
        assert rt.cudaDeviceSynchronize() == 0

    launch(1)
    print("server: ready", flush=True)
    for line in sys.stdin:
        if line.startswith("k"):
            n = int(line.split()[1])
            launch(n)
            print(f"done {n}", flush=True)


main()
