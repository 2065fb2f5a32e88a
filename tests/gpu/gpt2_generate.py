"""A launch-bound inference loop for profiler overhead on a real GPU: GPT-2 small (12 layers, fp16) generating
tokens greedily at batch 1, as an inference server does. Each token is ~150 small kernels and ~10 trivial runtime
calls per kernel from Python, so what a profiler adds per call shows in tokens/s.

`python gpt2_generate.py OUT.json [--tokens N] [--rounds R] [--torchprof]` builds the model from its configuration
(random weights: the device machine cannot download any; the kernels and calls are the same), warms up with one
generation, then times R generations of exactly N new tokens and writes {"tokens_per_s": ...}. `--torchprof` runs
the timed generations under torch.profiler with CPU and CUDA activities, for the comparison.
"""
import json
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    out = sys.argv[1]
    tokens = int(sys.argv[sys.argv.index("--tokens") + 1]) if "--tokens" in sys.argv else 128
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 3
    torch.manual_seed(0)
    # Built on the GPU, so that initialising 124 M random weights on the CPU does not lengthen each run (runs took
    # about 25 s each on the H100, 2026-11-27, of which the timed generations took 2 to 3 s).
    with torch.device("cuda"):
        model = GPT2LMHeadModel(GPT2Config()).to(torch.float16).eval()
    prompt = torch.randint(0, 50257, (1, 16), device="cuda")
    mask = torch.ones_like(prompt)

    def generate():
        # No end-of-sequence token, so every generation is exactly `tokens` long.
        return model.generate(prompt, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                              do_sample=False, eos_token_id=None, pad_token_id=0)

    with torch.inference_mode():
        generate()
        torch.cuda.synchronize()
        print("ready", flush=True)
        prof = None
        if "--torchprof" in sys.argv:
            acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
            prof = torch.profiler.profile(activities=acts)
            prof.__enter__()
        start = time.perf_counter()
        for _ in range(rounds):
            generate()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        if prof is not None:
            prof.__exit__(None, None, None)
    result = {"tokens_per_s": tokens * rounds / seconds, "tokens": tokens, "rounds": rounds, "seconds": seconds}
    print(json.dumps(result), flush=True)
    json.dump(result, open(out, "w"))


if __name__ == "__main__":
    main()
