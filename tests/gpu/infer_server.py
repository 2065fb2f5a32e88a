"""A small PyTorch inference server for scripts/gpu-validate, the kind of program `cuflight launch` and `attach` are
for: a request every 4 ms, batch sizes 1, 8 and 32 in turn, each request an NVTX range "request" holding a range
"batchN", its answer copied back to the host (a synchronisation, as a real server's response is).

`python infer_server.py OUT.json` serves until its standard input closes, printing "ready" once warmed up, then
writes every request as [wall-clock ns at its start, latency ns, batch size] to OUT.json.
"""
import json
import sys
import threading
import time

import torch

BATCHES = (1, 8, 32)
PERIOD_S = 0.004


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 2048),
        torch.nn.GELU(),
        torch.nn.Linear(2048, 512),
        torch.nn.LayerNorm(512),
        torch.nn.Linear(512, 128),
    ).cuda().half().eval()
    inputs = {b: torch.randn(b, 512, device="cuda", dtype=torch.half) for b in BATCHES}
    with torch.inference_mode():
        for _ in range(10):  # warm-up: cuBLAS handles and heuristics, the allocator
            for b in BATCHES:
                model(inputs[b]).float().sum().item()
    closed = threading.Event()

    def watch_stdin():
        sys.stdin.read()
        closed.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    print("ready", flush=True)
    log, i, next_at = [], 0, time.perf_counter()
    with torch.inference_mode():
        while not closed.is_set():
            batch = BATCHES[i % len(BATCHES)]
            next_at += PERIOD_S
            wait = next_at - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            wall, t0 = time.time_ns(), time.perf_counter_ns()
            torch.cuda.nvtx.range_push("request")
            torch.cuda.nvtx.range_push(f"batch{batch}")
            model(inputs[batch]).float().sum().item()
            torch.cuda.nvtx.range_pop()
            torch.cuda.nvtx.range_pop()
            log.append([wall, time.perf_counter_ns() - t0, batch])
            i += 1
    with open(out, "w") as f:
        json.dump(log, f)


if __name__ == "__main__":
    main()
