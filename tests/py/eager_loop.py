"""The CUDA call mix of PyTorch's eager mode, from Python through ctypes (benches/eager-loop): per operator about ten
cudaGetDevice calls and one cudaGetLastError around one kernel launch, a cudaStreamIsCapturing now and then, and a
synchronisation per step, as `.item()` makes. The ratios are those of a traced Hugging Face GPT-2 `generate` loop
on an H100 (issue 26: 1,537,511 cudaGetDevice, 134,173 cudaGetLastError, 7,356 cudaStreamIsCapturing for 145,653
kernels). Prints `us_per_op=X` for the timed steps. Usage: eager_loop.py STEPS [OPS_PER_STEP] [THREADS]."""
import ctypes
import sys
import threading
import time

from cudart_ctypes import Dim3, func, rt


def operator(dev, capturing, args, grid, block, i):
    """One eager operator: the dispatcher asks for the device again and again, launches, checks the error."""
    for _ in range(10):
        rt.cudaGetDevice(ctypes.byref(dev))
    if i % 20 == 0:
        rt.cudaStreamIsCapturing(None, ctypes.byref(capturing))
    rt.cudaLaunchKernel(func, grid, block, args, 0, None)
    rt.cudaGetLastError()


def steps(n, ops):
    dev, capturing = ctypes.c_int(), ctypes.c_int()
    args = (ctypes.c_void_p * 1)()
    grid, block = Dim3(1, 1, 1), Dim3(32, 1, 1)
    for _ in range(n):
        for i in range(ops):
            operator(dev, capturing, args, grid, block, i)
        rt.cudaDeviceSynchronize()  # loss.item()


def main():
    n = int(sys.argv[1])
    ops = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    steps(max(1, n // 10), ops)  # warm-up: the first calls set CUDA (and an agent) up
    start = time.perf_counter()
    workers = [threading.Thread(target=steps, args=(n, ops)) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    print(f"us_per_op={elapsed / (n * ops * threads) * 1e6:.3f}", flush=True)


if __name__ == "__main__":
    main()
