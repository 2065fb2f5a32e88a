"""Control cuflight from inside the program.

    import cuflight

    with cuflight.capture("train.cuf"):      # records this block, as `cuflight attach` would
        for batch in loader:
            train_step(batch)
            cuflight.mark_step()             # step boundaries, as torch.profiler's prof.step()

`capture` loads the agent (libcuflight.so) into this process if it is not there yet, then runs
`cuflight attach <this pid>`: the same control path as attaching from a shell, so the trace, its
drops and its summary are the collector's. Outside `capture`, the agent is dormant: no CUPTI
subscription, and a CUDA call costs it nothing. Under `cuflight record` the whole run is recorded
already; `capture` then says so and records nothing more.
"""

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time

__all__ = ["capture", "mark_step", "state", "binary", "agent"]

# cuflight_format::control::STATE_*.
_STATES = {0: "not started", 1: "dormant", 2: "recording", 3: "flight recorder"}
_lib = None


def binary():
    """The `cuflight` executable: $CUFLIGHT_BIN, the one this environment installed, or the PATH's."""
    if os.environ.get("CUFLIGHT_BIN"):
        return os.environ["CUFLIGHT_BIN"]
    schemes = [None] + ([f"{os.name}_user"] if f"{os.name}_user" in sysconfig.get_scheme_names() else [])
    for scheme in schemes:
        path = os.path.join(sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts"),
                            "cuflight")
        if os.access(path, os.X_OK):
            return path
    found = shutil.which("cuflight")
    if found:
        return found
    raise RuntimeError("cuflight: the `cuflight` executable is not installed here (pip install cuflight, "
                       "or set CUFLIGHT_BIN)")


def _loaded_agent():
    """The path of a libcuflight.so already mapped into this process (by the CUDA driver or NVTX), if any."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(None, 5)[-1]
                if path.endswith("/libcuflight.so"):
                    return path
    except OSError:
        pass
    return None


def agent():
    """The agent's path: one already loaded, $CUFLIGHT_AGENT, or the one beside the executable (../lib)."""
    loaded = _loaded_agent()
    if loaded:
        return loaded
    if os.environ.get("CUFLIGHT_AGENT"):
        return os.environ["CUFLIGHT_AGENT"]
    exe = os.path.realpath(binary())
    for path in (os.path.join(os.path.dirname(exe), "libcuflight.so"),
                 os.path.join(os.path.dirname(exe), "..", "lib", "libcuflight.so")):
        if os.path.isfile(path):
            return os.path.normpath(path)
    raise RuntimeError(f"cuflight: no libcuflight.so beside {exe} (set CUFLIGHT_AGENT to its path)")


def _load():
    """Loads the agent once. Loaded by neither the driver nor NVTX, it starts dormant with its control socket up
    (as after `cuflight attach --inject`); libraries that start NVTX afterwards report to it."""
    global _lib
    if _lib is None:
        path = agent()
        lib = ctypes.CDLL(path)
        lib.cuflight_state.restype = ctypes.c_int
        lib.cuflight_mark_step.restype = ctypes.c_int64
        if lib.cuflight_state() == 0 and _injection_pending(path):
            # Named by CUDA_INJECTION64_PATH (`cuflight launch`), the agent starts inside the driver's cuInit:
            # initialise the driver now rather than wait for the program's first CUDA call.
            _cu_init()
        os.environ.setdefault("NVTX_INJECTION64_PATH", path)
        _lib = lib
    return _lib


def _injection_pending(path):
    named = os.environ.get("CUDA_INJECTION64_PATH", "")
    return os.path.basename(named) == os.path.basename(path)


def _cu_init():
    try:
        ctypes.CDLL("libcuda.so.1").cuInit(0)
    except OSError:
        pass


def state():
    """The agent's state in this process: "not started", "dormant", "recording" or "flight recorder"."""
    return _STATES.get(_load().cuflight_state(), "unknown")


def mark_step():
    """Ends the step in progress and starts the next (`ProfilerStep#N`, as torch.profiler names steps); returns
    the new step's number. While nothing records it costs a ctypes call."""
    return _load().cuflight_mark_step()


class capture:
    """Records what runs inside the `with` block (or between start() and stop()) into `path`.

    `overwrite=False` refuses to replace an existing file. Options go to `cuflight attach` as they are, e.g.
    `extra_args=["--steps", "5"]`. A window lasts at most a week.
    """

    def __init__(self, path="cuflight.cuf", overwrite=False, extra_args=(), timeout=60.0):
        self.path = os.fspath(path)
        self.overwrite = overwrite
        self.extra_args = list(extra_args)
        self.timeout = timeout
        self._child = None
        self._log = None

    def start(self):
        if self._child is not None:
            raise RuntimeError("cuflight: this capture is already running")
        if os.path.exists(self.path) and not self.overwrite:
            raise FileExistsError(f"cuflight: {self.path} exists; pass overwrite=True to replace it")
        lib = _load()
        current = lib.cuflight_state()
        if current in (2, 3):
            print(f"cuflight: this process is already recorded ({_STATES[current]}); capture() adds nothing",
                  file=sys.stderr)
            return self
        cmd = [binary(), "attach", str(os.getpid()), "-o", self.path, "--duration", "168h", "--force"]
        self._log = tempfile.TemporaryFile()
        # A session of its own: Ctrl-C on the terminal interrupts the program, whose stop() then ends the window.
        self._child = subprocess.Popen(cmd + self.extra_args, stdin=subprocess.DEVNULL, stdout=self._log,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.timeout
        while lib.cuflight_state() != 2:
            if self._child.poll() is not None:
                raise RuntimeError(self._finish())
            if time.monotonic() > deadline:
                self._child.kill()
                self._child.wait()
                raise RuntimeError(f"cuflight: no recording after {self.timeout:.0f} s: {self._finish()}")
            time.sleep(0.005)
        return self

    def stop(self):
        """Ends the window; the collector writes the trace before this returns. Raises if it failed."""
        if self._child is None:
            return
        if self._child.poll() is None:
            # SIGUSR1 tells `cuflight attach` the program ended the window (SIGINT would read as an interruption).
            self._child.send_signal(signal.SIGUSR1)
        try:
            self._child.wait(timeout=max(self.timeout, 60.0))
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.wait()
        failed = self._child.returncode != 0
        message = self._finish()
        if failed:
            raise RuntimeError(message)
        if message:
            print(message, file=sys.stderr)

    def _finish(self):
        """The collector's output (its last lines say what it wrote, or why it failed), and cleanup."""
        self._log.seek(0)
        text = self._log.read().decode(errors="replace").strip()
        self._log.close()
        code = self._child.returncode
        self._child = self._log = None
        return text or f"cuflight attach exited with status {code}"

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False
