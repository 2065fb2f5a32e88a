"""A rank's process with DataLoader-style workers started the three ways Python's multiprocessing (and so
torch.utils.data.DataLoader's `multiprocessing_context`) starts them: fork, spawn and forkserver. Each worker does
CUDA work of its own through ctypes (cudasim's libcudart in the tests), as workers that decode on the GPU do; the
fork worker is started before the main process touches CUDA (CUDA cannot be used again in a child forked after).
The main process does the most GPU work. The launcher's RANK, LOCAL_RANK and WORLD_SIZE are whatever the test
sets. Prints JSON: {"main": pid, "fork": pid, "spawn": pid, "forkserver": pid}."""
import ctypes
import json
import multiprocessing as mp
import os
import time


def cuda_work(copies):
    rt = ctypes.CDLL("libcudart.so")
    buf = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(buf), ctypes.c_size_t(1 << 16)) == 0
    host = ctypes.create_string_buffer(1 << 16)
    for _ in range(copies):
        assert rt.cudaMemset(buf, 0, ctypes.c_size_t(1 << 16)) == 0
        assert rt.cudaMemcpy(host, buf, ctypes.c_size_t(1 << 16), 2) == 0  # cudaMemcpyDeviceToHost
    assert rt.cudaDeviceSynchronize() == 0
    rt.cudaFree(buf)


def worker(queue):
    cuda_work(4)
    # Fork and forkserver workers leave through os._exit (no exit handler runs), so what CUPTI still holds is
    # lost; a forked child's agent hands it over every 100 ms, and a real DataLoader worker lives that long.
    time.sleep(0.4)
    queue.put(os.getpid())


def run(method):
    ctx = mp.get_context(method)
    queue = ctx.Queue()
    p = ctx.Process(target=worker, args=(queue,))
    p.start()
    pid = queue.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0, (method, p.exitcode)
    return pid


if __name__ == "__main__":
    pids = {"main": os.getpid(), "fork": run("fork")}
    cuda_work(32)
    pids["spawn"] = run("spawn")
    pids["forkserver"] = run("forkserver")
    print(json.dumps(pids))
