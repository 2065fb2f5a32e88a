"""A small continuous-batching model server in plain PyTorch for scripts/gpu-validate (issue 51): the shape of vLLM or
SGLang without their code. A GPT-like model with random weights serves requests that arrive at random (Poisson, RATE
a second): each iteration of the engine admits the requests that arrived while slots are free and prefills their
prompts eagerly (one forward over the prompt, filling the request's KV cache slot), then decodes one token for every
running request by replaying the CUDA graph captured for the smallest batch size that holds them (1, 4, 8 or 16:
padded, as vLLM pads to its captured sizes), and copies the new tokens to the host (a synchronisation, as a server
streams tokens). NVTX names what a profiler is to tell apart: each iteration a range "prefill", "decode" or "mixed"
(both), each prefill "prefill_request", each request a start/end range "request" from admission to its last token.

`python batching_server.py OUT.json [RATE]` serves until its standard input closes, printing "ready" once the graphs
are captured, then writes {"requests": [[wall-clock ns at arrival, latency ns, prompt, generated], ...],
"iterations": {"prefill": n, "decode": n, "mixed": n}} to OUT.json.
"""
import json
import queue
import random
import sys
import threading
import time

import torch
import torch.nn.functional as F

VOCAB, DIM, LAYERS, HEADS, MAX_LEN = 8192, 512, 4, 8, 192
BUCKETS = (1, 4, 8, 16)
SLOTS = BUCKETS[-1]


class Model:
    """Weights and a KV cache of SLOTS slots; `step` runs one forward over `tokens` at `positions` of `slots`."""

    def __init__(self):
        g = torch.Generator(device="cuda").manual_seed(0)

        def w(*shape):
            return torch.randn(*shape, device="cuda", dtype=torch.half, generator=g) * 0.02

        self.emb, self.pos = w(VOCAB, DIM), w(MAX_LEN, DIM)
        self.layers = [(w(DIM, 3 * DIM), w(DIM, DIM), w(DIM, 4 * DIM), w(4 * DIM, DIM)) for _ in range(LAYERS)]
        shape = (LAYERS, SLOTS, HEADS, MAX_LEN, DIM // HEADS)
        self.k = torch.zeros(shape, device="cuda", dtype=torch.half)
        self.v = torch.zeros(shape, device="cuda", dtype=torch.half)
        self.arange = torch.arange(MAX_LEN, device="cuda")

    def step(self, tokens, positions, slots):
        """tokens, positions: [B, T] (T prompt tokens, or 1 to decode); slots: [B]. Returns the next token [B]."""
        b, t = tokens.shape
        x = self.emb[tokens] + self.pos[positions]
        # Each query sees the cache up to its own position (the prompt causally, a decode step all before it).
        visible = self.arange[None, None, :] <= positions[:, :, None]  # [B, T, MAX_LEN]
        for i, (qkv_w, out_w, up_w, down_w) in enumerate(self.layers):
            h = F.layer_norm(x, (DIM,))
            q, k, v = (h @ qkv_w).view(b, t, 3, HEADS, DIM // HEADS).unbind(2)
            self.k[i][slots[:, None], :, positions] = k  # [B, T, H, d] into the slots' cache rows
            self.v[i][slots[:, None], :, positions] = v
            keys, values = self.k[i][slots], self.v[i][slots]  # [B, H, MAX_LEN, d]
            mask = visible[:, None, :, :]  # [B, 1, T, MAX_LEN]
            a = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask)
            x = x + a.transpose(1, 2).reshape(b, t, DIM) @ out_w
            x = x + F.gelu(F.layer_norm(x, (DIM,)) @ up_w) @ down_w
        return (F.layer_norm(x[:, -1], (DIM,)) @ self.emb.T).argmax(-1)


class Decoder:
    """One CUDA graph per bucket, over static inputs: the first `bucket` slots' last tokens and positions."""

    def __init__(self, model):
        self.tokens = torch.zeros(SLOTS, 1, dtype=torch.long, device="cuda")
        self.positions = torch.zeros(SLOTS, 1, dtype=torch.long, device="cuda")
        self.slots = torch.arange(SLOTS, device="cuda")
        self.out, self.graphs = {}, {}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside capture, as torch.cuda.graphs asks
            for b in BUCKETS:
                model.step(self.tokens[:b], self.positions[:b], self.slots[:b])
        torch.cuda.current_stream().wait_stream(side)
        for b in BUCKETS:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.out[b] = model.step(self.tokens[:b], self.positions[:b], self.slots[:b])
            self.graphs[b] = graph

    def run(self, running):
        """Decodes one token for each running request (a slot each); returns the new tokens on the host."""
        bucket = next(b for b in BUCKETS if b > max(r["slot"] for r in running))
        # The inputs as a server prepares them: on the host, then one copy each into the graph's static tensors.
        slots = torch.tensor([r["slot"] for r in running]).cuda(non_blocking=True)
        self.tokens[slots, 0] = torch.tensor([r["last"] for r in running]).cuda(non_blocking=True)
        self.positions[slots, 0] = torch.tensor([r["length"] for r in running]).cuda(non_blocking=True)
        self.graphs[bucket].replay()
        return self.out[bucket].cpu()  # the tokens streamed back: a synchronisation


def arrivals(rate, inbox, closed):
    rng = random.Random(1)
    while not closed.is_set():
        time.sleep(rng.expovariate(rate))
        inbox.put({"arrived": time.time_ns(), "prompt": rng.randint(16, 96), "generate": rng.randint(8, 64)})


def main():
    out = sys.argv[1]
    rate = float(sys.argv[2]) if len(sys.argv) > 2 else 40.0
    torch.manual_seed(0)
    model = Model()
    with torch.inference_mode():
        decoder = Decoder(model)
        # Warm-up: a prefill of every prompt length served, so that cuBLAS, the attention kernels' choice per shape
        # and the allocator are settled before "ready". With three lengths only, the H200's first 3 s served
        # 20-36 ms a token against 0.4-0.9 later (2026-12-01): a dormant phase measured warm-up, not the agent.
        for n in range(16, 97):
            model.step(torch.zeros(1, n, dtype=torch.long, device="cuda"),
                       torch.arange(n, device="cuda")[None], torch.zeros(1, dtype=torch.long, device="cuda"))
        torch.cuda.synchronize()
    closed = threading.Event()

    def watch_stdin():
        sys.stdin.read()
        closed.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    inbox = queue.Queue()
    threading.Thread(target=arrivals, args=(rate, inbox, closed), daemon=True).start()
    print("ready", flush=True)
    free, running, done = list(range(SLOTS)), [], []
    iterations = {"prefill": 0, "decode": 0, "mixed": 0}
    with torch.inference_mode():
        while not closed.is_set():
            admitted = []
            while free and not inbox.empty():
                r = inbox.get()
                r["slot"] = free.pop(0)
                r["range"] = torch.cuda.nvtx.range_start("request")
                admitted.append(r)
            if not admitted and not running:
                time.sleep(0.0005)
                continue
            kind = "mixed" if admitted and running else ("prefill" if admitted else "decode")
            iterations[kind] += 1
            torch.cuda.nvtx.range_push(kind)
            for r in admitted:
                torch.cuda.nvtx.range_push("prefill_request")
                n = r["prompt"]
                prompt = torch.randint(0, VOCAB, (1, n), device="cuda")
                slot = torch.tensor([r["slot"]], device="cuda")
                # The first token goes back to the client at once (time to first token): a synchronisation.
                r["last"] = int(model.step(prompt, torch.arange(n, device="cuda")[None], slot)[0])
                r["length"], r["made"] = n, 0
                torch.cuda.nvtx.range_pop()
            running += admitted
            if running:
                tokens = decoder.run(running)
                for r in running:
                    r["last"], r["length"], r["made"] = int(tokens[r["slot"]]), r["length"] + 1, r["made"] + 1
            torch.cuda.nvtx.range_pop()
            finished = [r for r in running if r["made"] >= r["generate"] or r["length"] >= MAX_LEN - 1]
            for r in finished:
                torch.cuda.nvtx.range_end(r["range"])
                done.append([r["arrived"], time.time_ns() - r["arrived"], r["prompt"], r["made"]])
                free.append(r["slot"])
                free.sort()
            running = [r for r in running if r not in finished]
    with open(out, "w") as f:
        json.dump({"requests": done, "iterations": iterations}, f)


if __name__ == "__main__":
    main()
