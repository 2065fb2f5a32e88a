"""PyTorch training loops with one planted bottleneck each, for scripts/gpu-validate on a real GPU.

`python planted_torch.py VARIANT STEPS [--timing OUT.json]` runs the loop; each step is an NVTX range "step#N"
(what `cuflight report` finds steps by). The variant and the finding `cuflight report` should put first:

  clean      bf16 autocast MLP, data already on the GPU           -> no finding above a few percent

The MLP (8192 wide, batch 8192: about 3.7 TFLOP per step) keeps even an H100 busy for several milliseconds a step,
so the clean loop is GPU-bound there; a smaller one (the first version had 4096 wide, batch 512: 0.15 ms of GPU
work in a 1.5 ms step) is launch-bound on an H100, and cuflight rightly said so.
  dataload   DataLoader(num_workers=0) over a dataset that sleeps  -> data_loading
  item       loss.item() every step, then 3 ms of host work         -> sync_stall
             (the sync drains the queue, so the host work that follows cannot overlap GPU work)
  pageable   a pageable 64 MiB host->device copy every step        -> pageable_memcpy
  tiny       2000 tiny elementwise ops per step                    -> launch_bound
  fp32       fp32 matmuls with TF32 off                            -> fp32_gemm
  leak       a list that keeps 256 MiB per step alive              -> memory_growth
             (cuflight sees device memory as the driver does: PyTorch's caching allocator serves a small leak from
             blocks it already holds, so a 16 MiB-per-step leak stays invisible for the first 30 steps of this
             model; a leak shows once it outgrows the cache, as every leak that ends in an out-of-memory error does)

`--timing` writes the mean step time (after warm-up) and each step's so the same script measures profiler overhead;
`--torchprof` runs the measured steps under torch.profiler (CUDA activities), for the comparison.
"""
import json
import sys
import time

import torch


class SlowDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        time.sleep(0.0002)  # 200 us of "decoding" per sample, 64 samples a batch: ~13 ms per step
        return torch.randn(1024), int(i % 10)


def main():
    variant, steps = sys.argv[1], int(sys.argv[2])
    timing = sys.argv[sys.argv.index("--timing") + 1] if "--timing" in sys.argv else None
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 8192), torch.nn.ReLU(), torch.nn.Linear(8192, 8192), torch.nn.ReLU(), torch.nn.Linear(8192, 10)
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8192, 1024, device="cuda")
    y = torch.randint(0, 10, (8192,), device="cuda")
    loader = iter(torch.utils.data.DataLoader(SlowDataset(), batch_size=64, num_workers=0))
    pageable = torch.randn(16 << 20)  # 64 MiB, not pinned
    kept = []

    def step(i):
        nonlocal x, y
        if variant == "dataload":
            xb, yb = next(loader)
            x, y = xb.cuda(non_blocking=True), yb.cuda(non_blocking=True)
        if variant == "pageable":
            pageable.cuda()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=variant != "fp32"):
            out = model(x)
            loss = torch.nn.functional.cross_entropy(out.float(), y)
        if variant == "tiny":
            t = torch.zeros(16, device="cuda")
            for _ in range(2000):
                t = t + 1
        loss.backward()
        opt.step()
        if variant == "leak":
            kept.append(torch.empty(64 << 20, device="cuda"))
        if variant == "item":
            loss.item()
            time.sleep(0.003)

    for i in range(3):
        step(i)
    torch.cuda.synchronize()
    prof = None
    if "--torchprof" in sys.argv:
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.__enter__()
    t0, t0_unix = time.perf_counter(), time.time()
    # Each step's end on the host clock (about 0.1 us a read against steps of milliseconds): a duty cycle's cost
    # splits into the steady steps between windows and the few inside them (gpu-validate's serve part).
    ends = []
    for i in range(steps):
        torch.cuda.nvtx.range_push(f"step#{i}")
        step(i)
        torch.cuda.nvtx.range_pop()
        ends.append(time.perf_counter())
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    if prof is not None:
        prof.__exit__(None, None, None)
    if timing:
        with open(timing, "w") as f:
            each = [round((b - a) * 1e3, 4) for a, b in zip([t0] + ends[:-1], ends)]
            json.dump({"variant": variant, "steps": steps, "step_ms": (t1 - t0) * 1e3 / steps,
                       "step_ms_each": each, "t0_unix": t0_unix}, f)


if __name__ == "__main__":
    main()
