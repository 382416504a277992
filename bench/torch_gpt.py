"""The PyTorch side of `dtensor bench model --vs-torch` and `dtensor bench train --vs-torch`: the
example gpt's architecture (dtensor/ir/example_models.cc: learned positions, pre-norm blocks,
causal attention, tanh-gelu mlp, untied lm_head without bias), one thread per process. `single`
and `tp` time the forward in eval mode under no_grad; `train` one training step as `dtensor train`
takes it: forward, mean cross-entropy over every token, backward, plain SGD (lr 0.1).

usage: /usr/bin/python3 torch_gpt.py single|tp|train VOCAB HIDDEN HEADS LAYERS BATCH SEQ REPEAT [WORLD]
Prints one JSON line: {"part", "min_ms"} (the fastest of REPEAT forwards or steps after one
warm-up; for tp, rank 0's). Tensor parallel is written by hand the Megatron way on gloo (q/k/v/fc_in
column-split, o/fc_out row-split + all_reduce): PyTorch 1.13 has no DTensor.
"""
import json, math, os, sys, time
# One thread means one thread: Debian's torch calls the system OpenBLAS, whose own pool ignores
# torch.set_num_threads.
for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[v] = "1"
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.distributed as dist
import torch.multiprocessing as mp


class Block(nn.Module):
    def __init__(self, H, A, world=1):
        super().__init__()
        self.A, self.d, self.world = A // world, H // A, world
        Hl = H // world
        self.ln_1 = nn.LayerNorm(H); self.ln_2 = nn.LayerNorm(H)
        self.q = nn.Linear(H, Hl); self.k = nn.Linear(H, Hl); self.v = nn.Linear(H, Hl)
        self.o = nn.Linear(Hl, H, bias=(world == 1))
        self.fc_in = nn.Linear(H, 4 * H // world); self.fc_out = nn.Linear(4 * H // world, H, bias=(world == 1))
        if world > 1:
            self.o_bias = nn.Parameter(torch.zeros(H)); self.fc_out_bias = nn.Parameter(torch.zeros(H))

    def reduce(self, y, bias):
        if self.world > 1:
            dist.all_reduce(y)
            y = y + bias
        return y

    def forward(self, x):
        Bx, Sx, _ = x.shape
        h = self.ln_1(x)
        q = self.q(h).view(Bx, Sx, self.A, self.d).transpose(1, 2)
        k = self.k(h).view(Bx, Sx, self.A, self.d).transpose(1, 2)
        v = self.v(h).view(Bx, Sx, self.A, self.d).transpose(1, 2)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.d)
        mask = torch.ones(Sx, Sx, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(Bx, Sx, -1)
        x = x + self.reduce(self.o(y), getattr(self, "o_bias", None))
        y = self.fc_out(F.gelu(self.fc_in(self.ln_2(x)), approximate="tanh"))
        return x + self.reduce(y, getattr(self, "fc_out_bias", None))


class GPT(nn.Module):
    def __init__(self, V, H, A, L, S_max, world=1):
        super().__init__()
        self.wte = nn.Embedding(V, H); self.wpe = nn.Embedding(S_max, H)
        self.h = nn.ModuleList([Block(H, A, world) for _ in range(L)])
        self.ln_f = nn.LayerNorm(H); self.lm_head = nn.Linear(H, V, bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.h:
            x = b(x)
        return self.lm_head(self.ln_f(x))


def fastest_ms(m, idx, repeat):
    with torch.no_grad():
        m(idx)
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter(); m(idx); best = min(best, (time.perf_counter() - t0) * 1e3)
    return best


def fastest_step_ms(m, idx, repeat):
    target = torch.randint(0, m.lm_head.out_features, idx.shape, generator=torch.Generator().manual_seed(2))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = m(idx)
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1)).backward()
        opt.step()

    m.train()
    step()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter(); step(); best = min(best, (time.perf_counter() - t0) * 1e3)
    return best


def model(cfg, world):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    V, H, A, L, B, S, _ = cfg
    m = GPT(V, H, A, L, S, world=world).eval()
    idx = torch.randint(0, V, (B, S), generator=torch.Generator().manual_seed(1))
    return m, idx


def tp_worker(rank, world, port, cfg, q):
    os.environ["MASTER_ADDR"] = "127.0.0.1"; os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    m, idx = model(cfg, world)
    ms = fastest_ms(m, idx, cfg[6])
    if rank == 0:
        q.put(ms)
    dist.destroy_process_group()


if __name__ == "__main__":
    part = sys.argv[1]
    cfg = [int(a) for a in sys.argv[2:9]]
    if part == "single":
        m, idx = model(cfg, 1)
        print(json.dumps(dict(part=part, min_ms=fastest_ms(m, idx, cfg[6]), torch=torch.__version__)), flush=True)
    elif part == "train":
        m, idx = model(cfg, 1)
        print(json.dumps(dict(part=part, min_ms=fastest_step_ms(m, idx, cfg[6]), torch=torch.__version__)), flush=True)
    elif part == "tp":
        world = int(sys.argv[9])
        ctx = mp.get_context("spawn"); q = ctx.Queue()
        port = 29500 + os.getpid() % 1000
        ps = [ctx.Process(target=tp_worker, args=(r, world, port, cfg, q)) for r in range(world)]
        [p.start() for p in ps]
        ms = q.get(timeout=600)
        [p.join(timeout=60) for p in ps]
        print(json.dumps(dict(part=part, world=world, min_ms=ms, torch=torch.__version__)), flush=True)
    else:
        sys.exit("part must be single, tp or train")
