"""A Python program that controls cuflight itself (the wheel's `cuflight` module): `steps` training steps of CUDA
work through ctypes (cudasim's libcudart in the tests: a kernel is a host function there), step marks each step,
and `cuflight.capture(path)` around steps first..last only. Usage: in_program.py OUT STEPS FIRST LAST.
Prints JSON: the agent's state before, during and after, and the steps captured."""
import ctypes
import json
import sys

import cuflight

out, steps, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rt = ctypes.CDLL("libcudart.so")


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


KERNEL = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p))
kernel = KERNEL(lambda args: None)
rt.cudaLaunchKernel.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t,
                                ctypes.c_void_p]
buf = ctypes.c_void_p()
assert rt.cudaMalloc(ctypes.byref(buf), ctypes.c_size_t(1 << 20)) == 0
args = (ctypes.c_void_p * 2)(ctypes.addressof(buf), None)
host = ctypes.create_string_buffer(1 << 20)


def step():
    assert rt.cudaMemset(buf, 0, ctypes.c_size_t(1 << 20)) == 0
    for _ in range(3):
        assert rt.cudaLaunchKernel(ctypes.cast(kernel, ctypes.c_void_p), Dim3(64, 1, 1), Dim3(128, 1, 1), args, 0,
                                   None) == 0
    assert rt.cudaMemcpy(host, buf, ctypes.c_size_t(1 << 20), 2) == 0  # cudaMemcpyDeviceToHost


seen = {"before": cuflight.state()}
window = None
for i in range(steps):
    if i == first:
        window = cuflight.capture(out).start()
        seen["during"] = cuflight.state()
    cuflight.mark_step()
    step()
    if i == last:
        cuflight.mark_step()  # ends the last step inside the window
        window.stop()
        seen["after"] = cuflight.state()
rt.cudaFree(buf)
print(json.dumps(seen))
