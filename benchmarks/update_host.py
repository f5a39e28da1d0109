"""What the optimizer update costs the host, per way of running it (issue 23: capture the update or not).

Session 23 (H200) measured the compiled step at BERT-base 32 x 128 in bf16: 13.6 ms a step, of
which the host needed 10.2 to issue it, so the host still set the pace. On CUDA the forward with
its loss and backward replay as CUDA graphs; the update (clipping and AdamW) runs compiled
without them, since captured under CUDA-graph trees it crashed torch 2.11 (session 22). This
measures the update alone, on a model's real parameters with fixed random gradients, each
variant in a fresh process:

- ``compiled``: what the compiled step runs on CUDA today: ``torch.compile`` (inductor's default
  mode) of clipping (per-parameter norms) and the foreach AdamW with a tensor learning rate;
- ``eager-fused``: clipping with one ``_foreach_norm`` and the fused AdamW kernel, eager (the eager
  step's update, with a tensor learning rate and ``capturable=True``);
- ``captured`` (CUDA only): ``eager-fused`` recorded once with ``torch.cuda.graph`` after a
  warm-up on a side stream, then replayed: one launch a step. The gradients and the learning rate
  stay at fixed addresses (the gradients are never set to None; the rate is filled in place);
- ``compiled-graphs`` (CUDA only): ``compiled`` with ``mode="reduce-overhead"``, the gradients at
  fixed addresses (session 22's crash had new gradient tensors every step).

Per variant: host ms to issue one update (the median of 20, each issued with the device idle),
ms per update with the device's time (a run of updates, synced once at the end), the first
call's seconds (compiling or capturing), and a checksum of the parameters after all updates:
every variant runs the same updates from the same start, so the checksums should agree to
float32 rounding. A ``compiled-graphs`` run that inductor ran without CUDA graphs says so.
Run from the repository root::

    python -m benchmarks.update_host --device cuda [--model bert-base-random] [--steps 200] [--variants ...]

A dry run on the CPU: ``--device cpu --model tiny-bert --steps 5`` (``captured`` and
``compiled-graphs`` are CUDA only).
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks._children import error_line, run_module_child

VARIANTS = ("compiled", "eager-fused", "captured", "compiled-graphs")
CUDA_ONLY = ("captured", "compiled-graphs")
MAX_GRAD_NORM = 1.0
HOST_TIMED = 20  # updates timed one by one for the host's share
PRE_UPDATES = 3  # updates before the first timed call: the capture's side-stream warm-up, and as many in every variant


def _setup(model_name: str, device: torch.device) -> tuple[list[torch.nn.Parameter], torch.Tensor]:
    """The model's parameters with seeded gradients (norm above the clip), and the learning rate as a device tensor."""
    from transformers import AutoModelForSequenceClassification

    from hpo.cli._check_models import model_config

    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(model_config(model_name)).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-2
    return params, torch.tensor(1e-4, device=device)


def _update(variant: str, params: list[torch.nn.Parameter], lr: torch.Tensor, device: torch.device) -> Callable[[], None]:
    """One update of ``variant`` as a callable (``captured``: the graph's replay)."""
    # Imported here, as the model is: the parent process, which only starts a child per variant, need not pay for them.
    from trial_executor.train._captured import warm_up_on_side_stream
    from trial_executor.train._step import clip_grad_norm

    traced = variant.startswith("compiled")
    if traced:  # make_optimizer(compiled=True)'s optimizer
        optimizer = torch.optim.AdamW(params, lr=lr, foreach=True, capturable=True, weight_decay=0.01)
    else:  # make_optimizer's fused AdamW with a tensor rate
        optimizer = torch.optim.AdamW(params, lr=lr, fused=True, capturable=device.type == "cuda", weight_decay=0.01)
    raw_step = inspect.unwrap(type(optimizer).step)  # as CompiledStep calls it

    def update() -> None:
        with torch.no_grad():
            clip_grad_norm(params, MAX_GRAD_NORM, traced=traced)
            raw_step(optimizer) if traced else optimizer.step()

    if variant == "compiled":
        return torch.compile(update, dynamic=False)
    if variant == "compiled-graphs":
        return torch.compile(update, dynamic=False, mode="reduce-overhead")
    if variant == "eager-fused":
        return update
    warm_up_on_side_stream(update, PRE_UPDATES)  # captured: warmed up, then recorded
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        update()
    return graph.replay


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_variant(variant: str, model_name: str, device: torch.device, steps: int, warmup: int) -> dict[str, Any]:
    """Time ``variant``'s update on ``device``; the first call (compile, capture) apart."""
    params, lr = _setup(model_name, device)
    start = time.perf_counter()
    update = _update(variant, params, lr, device)
    for _ in range(0 if variant == "captured" else PRE_UPDATES):  # the same updates from the same start in every variant
        update()
    update()
    _sync(device)
    first = time.perf_counter() - start
    for _ in range(warmup):
        update()
    issued = []  # each update issued with the device idle: the host's time alone, never a full launch queue's wait
    for _ in range(HOST_TIMED):
        _sync(device)
        tick = time.perf_counter()
        lr.fill_(1e-4)  # the scheduler's in-place fill, as every step does
        update()
        issued.append(time.perf_counter() - tick)
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        lr.fill_(1e-4)
        update()
    _sync(device)
    total = time.perf_counter() - start
    checksum = sum(float(p.detach().double().abs().sum()) for p in params)
    return {
        "variant": variant, "device": str(device), "model": model_name, "parameters": len(params),
        "updates": PRE_UPDATES + 1 + warmup + HOST_TIMED + steps, "first_call_s": first,
        "host_ms": statistics.median(issued) * 1000, "ms_per_update": total / steps * 1000, "checksum": checksum,
        "cudagraph_skips": _cudagraph_skips(),
    }


def _cudagraph_skips() -> int:
    """How many times inductor ran a graph without the CUDA graphs asked for (``compiled-graphs`` would then time no capture)."""
    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters

    return int(counters["inductor"].get("cudagraph_skips", 0))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.update_host", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--model", default="bert-base-random")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a child: one variant (benchmarks._children.run_module_child)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or args.steps < 1 or args.warmup < 0:  # said before any cell runs: a GPU call has minutes
        bad = f"unknown variant {unknown[0]!r}; choose from {', '.join(VARIANTS)}" if unknown else "--steps must be at least 1, --warmup at least 0"
        parser.error(bad)
    if args.one:
        spec = json.loads(args.one)
        result = run_variant(spec["variant"], spec["model"], torch.device(spec["device"]), spec["steps"], spec["warmup"])
        Path(args.out).write_text(json.dumps(result))
        return 0
    print("| variant | parameters | first call s | host ms / update | ms / update | updates | checksum | note |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for variant in variants:
        print(_row(variant, args), flush=True)
    return 0


def _row(variant: str, args: argparse.Namespace) -> str:
    """One variant in a fresh process (a crash or a hang costs that row only)."""
    if variant in CUDA_ONLY and args.device != "cuda":
        return f"| {variant} | | | | | | | CUDA only |"
    spec = {"variant": variant, "device": args.device, "model": args.model, "steps": args.steps, "warmup": args.warmup}
    r, error = run_module_child("benchmarks.update_host", spec, args.timeout)
    if r is None:
        return f"| {variant} | | | | | | | {error_line(error)} |"
    note = f"inductor skipped CUDA graphs {r['cudagraph_skips']} times: not a captured update" if r["cudagraph_skips"] else ""
    return (f"| {variant} | {r['parameters']} | {r['first_call_s']:.1f} | {r['host_ms']:.2f} | {r['ms_per_update']:.2f} "
            f"| {r['updates']} | {r['checksum']:.6e} | {note} |")


if __name__ == "__main__":
    sys.exit(main())
