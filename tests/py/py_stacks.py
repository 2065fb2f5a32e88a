"""Synchronises, copies, allocates and launches through ctypes into libcudart.so (cudasim in the tests) at known
lines inside known functions, for the Python-stack tests: each call's line is printed as `LINE what file:line`
(found with inspect, so the test never hard-codes line numbers). Usage: py_stacks.py STEPS [THREADS], or
py_stacks.py stress N: N synchronisations on one thread while others build and drop deep stacks and fresh code
objects as fast as they can (frames torn down under the reader); py_stacks.py timed N DEPTH: the mean time of N
synchronisations made DEPTH frames deep (benches/python-stacks; `timed N DEPTH distinct`: each frame a function
of its own; `thread` after them: on a thread started by `threading`); py_stacks.py spawn STEPS: the work in a child
process started by multiprocessing's spawn; py_stacks.py subinterp N: N synchronisations in a subinterpreter
(3.14's concurrent.interpreters; exits 3 where there is none), then N in the main one; py_stacks.py native LIB N: N launches from a thread that runs no Python
(LIB: tests/c/native_thread.c built as a library) while this thread waits in the call; py_stacks.py shapes N: N
synchronisations each in a generator, in coroutines run by asyncio and in a function nested in a method, each site's
chain of frames in this file printed as `STACK what line:function ...`, innermost first; py_stacks.py pageable N: N
steps of a copy from pageable memory, launches and a synchronisation."""
import ctypes
import inspect
import sys
import threading

from cudart_ctypes import Dim3, func, rt

args = (ctypes.c_void_p * 1)()
seen = set()
seen_lock = threading.Lock()


def here(what):
    """Prints the caller's line once, as the test expects it named."""
    f = inspect.currentframe().f_back
    key = (what, f.f_lineno)
    with seen_lock:  # two threads printing at once could share a line
        if key not in seen:
            seen.add(key)
            print(f"LINE {what} {f.f_code.co_filename}:{f.f_lineno} {f.f_code.co_name}", flush=True)


def launch_many(n):
    for _ in range(n):
        here("launch"); assert rt.cudaLaunchKernel(func, Dim3(1, 1, 1), Dim3(1, 1, 1), args, 0, None) == 0


def read_loss(host, dev):
    here("copy"); assert rt.cudaMemcpy(host, dev, 64, 2) == 0


def wait_for_gpu():
    here("sync"); assert rt.cudaDeviceSynchronize() == 0


class Trainer:
    def step(self, host, dev):
        launch_many(40)
        read_loss(host, dev)
        wait_for_gpu()


def work(steps):
    dev = ctypes.c_void_p()
    here("alloc"); assert rt.cudaMalloc(ctypes.byref(dev), 4096) == 0
    host = ctypes.create_string_buffer(64)
    t = Trainer()
    for _ in range(steps):
        t.step(host, dev)
    rt.cudaFree(dev)


def churn(stop):
    """Deep recursion through code objects compiled afresh, so frames and code die while being read."""
    n = 0
    while not stop.is_set():
        n += 1
        src = f"def f{n}(d):\n    return 0 if d == 0 else f{n}(d - 1) + 1\n"
        scope = {}
        exec(compile(src, f"<churn {n}>", "exec"), scope)
        scope[f"f{n}"](40)


def stress(n):
    # Hand the GIL back quickly: each synchronisation releases it and must get it back from the churners.
    sys.setswitchinterval(0.0001)
    stop = threading.Event()
    ts = [threading.Thread(target=churn, args=(stop,)) for _ in range(2)]
    [t.start() for t in ts]
    for _ in range(n):
        assert rt.cudaDeviceSynchronize() == 0
    stop.set()
    [t.join() for t in ts]
    print("stress done", flush=True)


def timed_syncs(n, depth):
    """n synchronisations at stack depth `depth`; prints the mean ns per call as `ns_per_call=X`."""
    if depth > 0:
        return timed_syncs(n, depth - 1)
    import time
    sync = rt.cudaDeviceSynchronize
    t0 = time.perf_counter_ns()
    for _ in range(n):
        sync()
    print(f"ns_per_call={(time.perf_counter_ns() - t0) / n:.0f}", flush=True)


def timed_distinct(n, depth):
    """The same as timed_syncs, each of the `depth` frames above it a function of its own (a code object each, as
    a real call chain has)."""
    chain = {"timed_syncs": timed_syncs}
    for k in range(depth):
        callee = f"level{k - 1}" if k > 0 else "timed_syncs"
        tail = "n, 0" if k == 0 else "n"
        exec(f"def level{k}(n):\n    return {callee}({tail})\n", chain)
    chain[f"level{depth - 1}"](n) if depth > 0 else timed_syncs(n, 0)


def spawned(steps):
    """The work in a process started by multiprocessing's spawn (as torch.multiprocessing.spawn starts ranks)."""
    import multiprocessing
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(target=work, args=(steps,))
    child.start()
    child.join()
    assert child.exitcode == 0


def stack_here(what):
    """Prints the caller's chain of frames in this file, innermost first, as `STACK what line:function ...`
    (co_qualname where the release has it, as the reader names functions from 3.11), once per call site."""
    f, chain = inspect.currentframe().f_back, []
    key = (what, f.f_lineno)
    while f is not None:
        if f.f_code.co_filename == __file__:
            chain.append(f"{f.f_lineno}:{getattr(f.f_code, 'co_qualname', f.f_code.co_name)}")
        f = f.f_back
    with seen_lock:
        if key not in seen:
            seen.add(key)
            print(f"STACK {what} {' '.join(chain)}", flush=True)


def batches(n):
    """A generator synchronising between items, as a data pipeline's `.to(device)` does: from 3.11 its frame lives
    in the generator object, not on the thread's data stack, and links back to whoever resumed it."""
    for i in range(n):
        stack_here("generator"); assert rt.cudaDeviceSynchronize() == 0
        yield i


def consume(n):
    return sum(b for b in batches(n))


async def infer_one():
    stack_here("coroutine"); assert rt.cudaDeviceSynchronize() == 0


async def serve_requests(n):
    """An asyncio server's shape (vLLM, FastAPI): CUDA calls from a coroutine run by the event loop."""
    import asyncio
    for _ in range(n):
        await infer_one()
        await asyncio.sleep(0)


class Block:
    def forward(self):
        def inner():
            stack_here("nested"); assert rt.cudaDeviceSynchronize() == 0
        inner()


def shapes(n):
    """Synchronisations in a generator, in coroutines under asyncio's loop, and in a function nested in a method."""
    import asyncio
    consume(n)
    asyncio.run(serve_requests(n))
    for _ in range(n):
        Block().forward()


def load_batch(dev, host):
    """A batch copied from pageable memory, as `batch.to(device)` without pin_memory does."""
    here("pageable"); assert rt.cudaMemcpyAsync(dev, host, len(host), 1, None) == 0


def pageable(steps):
    """Steps of an 8 MiB copy from pageable memory, 20 launches and a synchronisation."""
    rt.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    dev = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(dev), 8 << 20) == 0
    host = ctypes.create_string_buffer(8 << 20)
    for _ in range(steps):
        load_batch(dev, host)
        for _ in range(20):
            assert rt.cudaLaunchKernel(func, Dim3(1, 1, 1), Dim3(1, 1, 1), args, 0, None) == 0
        assert rt.cudaDeviceSynchronize() == 0


def backward(lib, n):
    here("native"); assert lib.cuflight_native_launches(func, n) == 0


SUBINTERPRETER_CODE = """
import sys
sys.path.insert(0, {folder!r})
from cudart_ctypes import rt
def in_sub():
    rt.cudaDeviceSynchronize()  # the subinterpreter's line
for _ in range({n}):
    in_sub()
"""


def subinterp(n):
    """n synchronisations in a subinterpreter (its own frames and thread state), then n in this one."""
    try:
        from concurrent import interpreters
    except ImportError:
        sys.exit(3)
    import os
    code = SUBINTERPRETER_CODE.format(folder=os.path.dirname(os.path.abspath(__file__)), n=n)
    line = next(i for i, l in enumerate(code.split("\n"), 1) if "the subinterpreter's line" in l)
    # The file name a subinterpreter's exec gives its code.
    print(f"LINE subsync <script>:{line} in_sub", flush=True)
    sub = interpreters.create()
    sub.exec(code)
    sub.close()
    for _ in range(n):
        here("sync"); assert rt.cudaDeviceSynchronize() == 0


def main():
    if sys.argv[1] == "native":
        lib = ctypes.CDLL(sys.argv[2])
        lib.cuflight_native_launches.argtypes = [ctypes.c_void_p, ctypes.c_int]
        backward(lib, int(sys.argv[3]))
        return
    if sys.argv[1] == "subinterp":
        subinterp(int(sys.argv[2]))
        return
    if sys.argv[1] == "pageable":
        pageable(int(sys.argv[2]))
        return
    if sys.argv[1] == "shapes":
        shapes(int(sys.argv[2]))
        return
    if sys.argv[1] == "spawn":
        spawned(int(sys.argv[2]))
        return
    if sys.argv[1] == "timed":
        n, depth, opts = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
        target = timed_distinct if "distinct" in opts else timed_syncs
        if "thread" in opts:
            # On a thread of its own: a free-threaded 3.14 runs it on the thread's own copy of the bytecode.
            t = threading.Thread(target=target, args=(n, depth))
            t.start()
            t.join()
        else:
            target(n, depth)
        return
    if sys.argv[1] == "stress":
        stress(int(sys.argv[2]))
        return
    steps = int(sys.argv[1])
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    if threads:
        ts = [threading.Thread(target=work, args=(steps,)) for _ in range(threads)]
        [t.start() for t in ts]
        [t.join() for t in ts]
    else:
        work(steps)


if __name__ == "__main__":  # spawned children import this file
    main()
