"""A GPT-like model trained eager, with torch.compile() and with torch.compile(mode="reduce-overhead") (CUDA
graphs), for scripts/gpu-validate's `compiled` part (issue 51).

`python compiled_torch.py MODE STEPS` runs WARMUP steps, then STEPS steps each inside an NVTX range "stepN" (under
`cuflight record`); `python compiled_torch.py MODE STEPS torchprof OUT` runs the same steps under torch.profiler
(CUDA activity only) and writes the kernel count and kernel time of the STEPS steps as JSON, for comparison.
`python compiled_torch.py MODE STEPS timing` prints "step_ms MEAN" of the STEPS steps (synchronised at both ends):
what a tool costs the loop (gpu-validate's `graphtrace` part). MODE: eager, compile, graphs. The first steps compile
(and in graphs mode capture): the warm-up.
"""
import json
import sys
import time

import torch

WARMUP = 5


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc, self.out = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(torch.nn.Module):
    def __init__(self, vocab=8192, d=512, layers=4, heads=8, ctx=256):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(ctx, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = torch.nn.LayerNorm(d), torch.nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def main():
    mode, steps = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    model = Gpt().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randint(0, 8192, (8, 256), device="cuda")
    y = torch.randint(0, 8192, (8, 256), device="cuda")

    def loss_of(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())

    if mode == "compile":
        loss_of = torch.compile(loss_of)
    elif mode == "graphs":
        loss_of = torch.compile(loss_of, mode="reduce-overhead")

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_of(x, y)
        loss.backward()
        opt.step()

    for i in range(WARMUP):
        torch.cuda.nvtx.range_push(f"step{i}")
        step()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    if len(sys.argv) > 3 and sys.argv[3] == "torchprof":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                step()
            torch.cuda.synchronize()
        from torchprof_kernels import device_summary

        with open(sys.argv[4], "w") as f:
            json.dump(device_summary(prof), f)
        return
    began = time.perf_counter()
    for i in range(WARMUP, WARMUP + steps):
        torch.cuda.nvtx.range_push(f"step{i}")
        step()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    if len(sys.argv) > 3 and sys.argv[3] == "timing":
        print(f"step_ms {(time.perf_counter() - began) * 1e3 / steps:.4f}", flush=True)


if __name__ == "__main__":
    main()
