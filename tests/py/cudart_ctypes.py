"""The CUDA runtime through ctypes, for the Python test programs: `libcudart.so` as the loader finds it (cudasim,
the CPU test double, in the tests: LD_LIBRARY_PATH), a launchable no-op kernel and the launch's dim3."""
import ctypes


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


KERNEL = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p))
rt = ctypes.CDLL("libcudart.so")
rt.cudaLaunchKernel.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t,
                                ctypes.c_void_p]
rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
# A host function cudasim "runs" as the kernel; kept referenced for the process's life.
kernel = KERNEL(lambda args: None)
func = ctypes.cast(kernel, ctypes.c_void_p)
