"""TileGym's geglu forward at other BLOCK_SIZEs, side by side in one process (session 20, #29).

The campaign's tile-size step on geglu fwd was the move the bare replay could not time before the wrapper of a
launch in an autograd.Function method was recorded; this measures what that move can give: the kernel launched
with BLOCK_SIZE 128..4096 (grid = n / BLOCK_SIZE) on the suite's perf shape, L2 flushed before each launch,
interleaved rounds, the median per size and its ratio to 256 (TileGym's).

    python bench/gpu/geglu_block.py --tilegym /tmp/TileGym --out DIR
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tilegym", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.tilegym) / "src"))
    import importlib
    import torch
    import cuda.tile as ct
    G = importlib.import_module("tilegym.ops.cutile.activation.geglu")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    x = torch.rand((256, 64, 16, 128), dtype=torch.float16, device="cuda")
    N = 64
    n = x.numel() // 2
    xf = x.view(-1)
    flush = torch.empty(256 * 2 ** 20, dtype=torch.uint8, device="cuda")
    sizes = [128, 256, 512, 1024, 2048, 4096]
    res: dict = {}
    for mode in (0, 1):
        ref = G.geglu(x, -1, "tanh" if mode else "none")
        ys = {b: torch.empty(n, dtype=x.dtype, device="cuda") for b in sizes}

        def launch(b):
            ct.launch(torch.cuda.current_stream(), ((n + b - 1) // b, 1, 1), G._geglu_fwd_kernel,
                      (ys[b], xf, N, 2 * N, N, b, mode))
        ok = {}
        for b in sizes:
            launch(b)
            torch.cuda.synchronize()
            ok[b] = bool(torch.allclose(ys[b].view_as(ref), ref, rtol=1e-2, atol=1e-2))
        times = {b: [] for b in sizes}
        for r in range(args.rounds):
            order = sizes if r % 2 == 0 else sizes[::-1]
            for b in order:
                ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for _ in range(args.reps)]
                for s, e in ev:
                    flush.zero_()
                    s.record()
                    launch(b)
                    e.record()
                torch.cuda.synchronize()
                times[b].append(statistics.median(s.elapsed_time(e) for s, e in ev))
        med = {b: statistics.median(t) for b, t in times.items()}
        res["tanh" if mode else "none"] = {str(b): {"median_ms": med[b], "ratio_to_256": med[b] / med[256],
                                                     "correct": ok[b], "rounds_ms": times[b]} for b in sizes}
        print("approximate", "tanh" if mode else "none")
        for b in sizes:
            print(f"  BLOCK_SIZE {b:5d}: {med[b]:.5f} ms  x{med[b] / med[256]:.3f} of 256  correct={ok[b]}")
    res["meta"] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "shape": [256, 64, 16, 128],
                   "dtype": "float16", "rounds": args.rounds, "reps": args.reps,
                   "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (out / "results.json").write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
