"""The CUDA runtime through ctypes, for the Python test programs: `libcudart.so` as the loader finds it (cudasim,
the CPU test double, in the tests: LD_LIBRARY_PATH), a launchable no-op kernel and the launch's dim3.

On a real GPU, CUDART_KERNEL_LIB names tests/gpu/empty_kernel.cu built as a library: its kernel is launched, and
the runtime is the one that library was linked with (a library already loaded is found by its soname)."""
import ctypes
import os


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


KERNEL = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p))
_kernel_lib = os.environ.get("CUDART_KERNEL_LIB")
if _kernel_lib:
    _lib = ctypes.CDLL(_kernel_lib)
    for _name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            rt = ctypes.CDLL(_name)
            break
        except OSError:
            continue
else:
    rt = ctypes.CDLL("libcudart.so")
rt.cudaLaunchKernel.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t,
                                ctypes.c_void_p]
rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
if _kernel_lib:
    _lib.cuflight_empty_kernel.restype = ctypes.c_void_p
    func = ctypes.c_void_p(_lib.cuflight_empty_kernel())
else:
    # A host function cudasim "runs" as the kernel; kept referenced for the process's life.
    kernel = KERNEL(lambda args: None)
    func = ctypes.cast(kernel, ctypes.c_void_p)
