"""A small PyTorch training loop for scripts/gpu-validate.

`python train_torch.py plain STEPS` runs it (under `cuflight record`); `python train_torch.py torchprof STEPS OUT`
runs it under torch.profiler and writes kernel counts and total kernel time as JSON, for comparison;
`python train_torch.py forever 0` runs the plain loop until killed (started without cuflight, for
`cuflight attach --inject`), printing "ready" once warmed up.
"""
import json
import sys

import torch


def step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def main():
    mode, steps = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 1024, device="cuda")
    y = torch.randint(0, 10, (256,), device="cuda")
    for _ in range(3):  # warm-up: cuBLAS handles, allocator
        step(model, opt, x, y)
    torch.cuda.synchronize()
    if mode == "forever":
        print("ready", flush=True)
        i = 0
        while True:
            torch.cuda.nvtx.range_push(f"step{i}")
            step(model, opt, x, y)
            torch.cuda.nvtx.range_pop()
            i += 1
    if mode == "plain":
        for i in range(steps):
            torch.cuda.nvtx.range_push(f"step{i}")
            step(model, opt, x, y)
            torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        return
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step(model, opt, x, y)
        torch.cuda.synchronize()
    from torchprof_kernels import device_summary

    with open(sys.argv[3], "w") as f:
        json.dump(device_summary(prof), f)


if __name__ == "__main__":
    main()
