"""Device maps under a memory budget, graphopt's against accelerate's, run for real.

Models nobody on the team wrote, built from small configs with random seeded weights:
``transformers``' GPT-2 (LM head), BERT (masked LM) and ViT, and a
``torch.nn.TransformerEncoder``. For each, graphopt's map is the single-device plan's
(``{"": 0}``, what a user has when a model no longer fits one device) fitted to the
budget by :func:`~graphopt.exec.export.fit_device_map`; accelerate's is
``infer_auto_device_map(model, max_memory=..., no_split_module_classes=model's)``; both
keep the model's blocks whole (its ``_no_split_modules``).

Two budgets per model, ``fraction`` of the single-device map's simulated memory each:

- **gpus** — ``{0: B, 1: B}``: two GPUs that exist in the map only (no GPU here). Per
  device: simulated peak (:func:`~graphopt.exec.export.map_memory`) and measured peak
  (:func:`~graphopt.exec.dispatch.measure_map_memory`: the modules run on this CPU, each
  device's share counted as ``dispatch_model`` would hold it). No time: it would need
  the GPUs.
- **cpu+disk** — ``{"cpu": B}`` and disk offload (graphopt's budget names ``disk``, which
  accelerate adds itself). Both maps are run with ``accelerate.dispatch_model`` (the
  offloaded weights in a temporary folder), their outputs checked against the
  undispatched model's, and timed: ``rounds`` rounds after a warm-up, the two maps
  alternating within a round, the median forward of each.

accelerate sizes a map by weights alone, so its map can exceed the budget when run; a third
map is accelerate's under the budget scaled down by 5% at a time until its map fits when
measured (``accelerate-fit``). Reported per row and map: the budget, the worst device's
peak over its budget, measured and simulated, and for cpu+disk the median forward and
graphopt's speed-up over it.
"""

from __future__ import annotations

import copy
import os
import statistics
import tempfile
import time

import torch
from torch import nn

from graphopt.benchmarks import say
from graphopt.exec.dispatch import measure_map_memory
from graphopt.exec.export import fit_device_map, map_memory

__all__ = ["MODELS", "build_model", "run", "to_markdown"]

#: The maps of each row: graphopt's; accelerate's under the budget; accelerate's under the
#: budget scaled down until its map fits the budget when measured.
LABELS = ("graphopt", "accelerate", "accelerate-fit")

#: Model names and their sizes (a few ms to a few tens of ms a forward on one core).
MODELS = ("gpt2", "bert", "vit", "torch-encoder")


def build_model(name: str, seed: int = 0) -> tuple[nn.Module, tuple, tuple[str, ...], list[str]]:
    """``(model in eval mode, its inputs, the paths of the modules it never splits, the
    module classes accelerate must load whole)``: ``nn.MultiheadAttention`` reads its
    ``out_proj`` child's weight without calling it, so an offloaded one is loaded at once
    (``dispatch_model``'s ``preload_module_classes``)."""
    import transformers

    torch.manual_seed(seed)
    small = {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
             "intermediate_size": 1024}
    if name == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_layer=6, n_embd=256, n_head=4, vocab_size=8000, n_positions=128, use_cache=False))
        args: tuple = (torch.randint(0, 8000, (4, 64)),)
    elif name == "bert":
        model = transformers.BertForMaskedLM(transformers.BertConfig(vocab_size=8000, **small))
        args = (torch.randint(0, 8000, (4, 64)),)
    elif name == "vit":
        model = transformers.ViTModel(transformers.ViTConfig(image_size=64, patch_size=8, **small),
                                      add_pooling_layer=False)
        args = (torch.randn(4, 3, 64, 64),)
    elif name == "torch-encoder":
        layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
        model = nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)
        model._no_split_modules = ["TransformerEncoderLayer"]
        args = (torch.randn(4, 64, 256),)
    else:
        raise ValueError(f"unknown model {name!r}; expected one of {', '.join(MODELS)}")
    keep = set(getattr(model, "_no_split_modules", None) or ())
    no_split = tuple(n for n, m in model.named_modules() if type(m).__name__ in keep)
    preload = ["MultiheadAttention"] if name == "torch-encoder" else []
    return model.eval(), args, no_split, preload


def _output(out) -> torch.Tensor:
    """The first tensor of a model's output (a ModelOutput, a tuple or a tensor)."""
    if isinstance(out, torch.Tensor):
        return out
    return next(v for v in (out.values() if hasattr(out, "values") else out)
                if isinstance(v, torch.Tensor))


def _worst(memory: dict, budget: dict) -> float:
    """The highest peak over budget among the budget's devices (disk left out)."""
    return max(memory.get(d, 0) / b for d, b in budget.items() if d != "disk")


def _timed(models: dict[str, nn.Module], args: tuple, rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in models}
    with torch.no_grad():
        for r in range(rounds + 1):
            for k, m in models.items():
                t0 = time.perf_counter()
                m(*args)
                if r:  # the first round warms up
                    times[k].append(time.perf_counter() - t0)
    return times


def _row(name: str, kind: str, fraction: float, rounds: int) -> dict:
    from accelerate import dispatch_model, infer_auto_device_map

    from graphopt.frontends.torch import trace_program

    model, args, no_split, preload = build_model(name)
    graph = trace_program(model, args).graph
    one = map_memory(graph, {"": "cpu"})["cpu"]
    size = int(fraction * one)
    budget = {0: size, 1: size} if kind == "gpus" else {"cpu": size, "disk": 2**50}
    start = next(iter(budget))
    fit = fit_device_map(graph, {"": start}, budget, no_split)
    classes = list(getattr(model, "_no_split_modules", None) or [])

    def accelerate_map(scale: float) -> dict:
        return dict(infer_auto_device_map(
            model, max_memory={d: int(b * scale) for d, b in budget.items() if d != "disk"},
            no_split_module_classes=classes))

    theirs = accelerate_map(1.0)
    # accelerate counts weights alone: the budget it must be given for its map to fit
    scale, fits, failed = 1.0, theirs, ""
    while _worst(measure_map_memory(model, args, fits), budget) > 1 and scale > 0.05:
        scale *= 0.95
        try:
            fits = accelerate_map(scale)
        except Exception as err:  # noqa: BLE001 - accelerate's own failure, reported
            failed = f"{type(err).__name__} at {scale:.2f}x the budget"
            break
    maps = {"graphopt": fit.device_map, "accelerate": theirs}
    if not failed:
        maps["accelerate-fit"] = fits
    out = {"model": name, "budget_kind": kind, "budget": size, "single_device": one,
           "load": os.getloadavg()[0], "no_split": len(no_split), "accelerate_scale": scale,
           "accelerate_fit_failed": failed}
    for label, dm in maps.items():
        sim = map_memory(graph, dm, list(budget))
        meas = measure_map_memory(model, args, dm)
        out[label] = {"device_map": {k: str(v) for k, v in dm.items()},
                      "simulated": {str(d): v for d, v in sim.items()},
                      "measured": {str(d): v for d, v in meas.items()},
                      "simulated_over_budget": _worst(sim, budget),
                      "measured_over_budget": _worst(meas, budget),
                      "devices": sorted({str(v) for v in dm.values()})}
    if kind == "cpu+disk":
        with torch.no_grad():
            ref = _output(model(*args))
        with tempfile.TemporaryDirectory() as tmp:
            run = {label: dispatch_model(copy.deepcopy(model), dm,
                                         offload_dir=os.path.join(tmp, label),
                                         preload_module_classes=preload)
                   for label, dm in maps.items()}
            for label, m in run.items():
                with torch.no_grad():
                    got = _output(m(*args))
                out[label]["max_abs_diff"] = float((got - ref).abs().max())
            times = _timed(run, args, rounds)
        for label, ts in times.items():
            out[label]["times"] = ts
            out[label]["median"] = statistics.median(ts)
        for label in [k for k in maps if k != "graphopt"]:
            out[label]["graphopt_speedup"] = out[label]["median"] / out["graphopt"]["median"]
    return out


def run(models=MODELS, fraction: float = 0.6, rounds: int = 9, threads: int = 1) -> dict:
    """Every model under both budgets (module docstring)."""
    torch.set_num_threads(threads)
    # nn.TransformerEncoderLayer's fast path reads its children's weights in its own
    # forward, where accelerate has not loaded an offloaded child's yet (they are on meta)
    fast = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    rows = []
    try:
        for name in models:
            for kind in ("gpus", "cpu+disk"):
                t0 = time.perf_counter()
                rows.append(_row(name, kind, fraction, rounds))
                say(f"  {name} {kind}: {time.perf_counter() - t0:.1f} s")
    finally:
        torch.backends.mha.set_fastpath_enabled(fast)
    return {"fraction": fraction, "rounds": rounds, "threads": threads,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "rows": rows}


def to_markdown(res: dict) -> str:
    """The rows as a Markdown table, and a summary line."""
    lines = ["| model | budget | map | devices used | peak / budget, measured (simulated) "
             "| median forward ms | graphopt's speed-up over it | load |",
             "|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        budget = (f"0={r['budget'] / 2**20:.2f}MiB,1=same" if r["budget_kind"] == "gpus"
                  else f"cpu={r['budget'] / 2**20:.2f}MiB +disk")
        for label in LABELS:
            if label not in r:
                lines.append(f"| {r['model']} | {budget} | accelerate, budget scaled down | "
                             f"infer_auto_device_map failed: {r['accelerate_fit_failed']} "
                             "| | | | |")
                continue
            x = r[label]
            name = (f"accelerate at {r['accelerate_scale']:.2f}x the budget"
                    if label == "accelerate-fit" else label)
            ms = f"{x['median'] * 1e3:.2f}" if "median" in x else "not run (no GPU)"
            speed = f"{x['graphopt_speedup']:.3f}x" if "graphopt_speedup" in x else ""
            lines.append(f"| {r['model']} | {budget} | {name} | {', '.join(x['devices'])} | "
                         f"{x['measured_over_budget']:.2f} ({x['simulated_over_budget']:.2f}) | "
                         f"{ms} | {speed} | {r['load']:.2f} |")

    def over(label: str) -> str:
        return ", ".join(f"{r['model']} {r['budget_kind']}" for r in res["rows"]
                         if label in r and r[label]["measured_over_budget"] > 1) or "none"

    def speeds(label: str) -> str:
        return ", ".join(f"{r['model']} {r[label]['graphopt_speedup']:.3f}x"
                         for r in res["rows"] if "graphopt_speedup" in r.get(label, {}))

    lines += ["", f"Over budget when measured: graphopt's map {over('graphopt')}; accelerate's "
              f"{over('accelerate')}. graphopt's speed-up, cpu+disk median forward, over "
              f"accelerate's map: {speeds('accelerate')}; over accelerate's map that fits "
              f"when measured: {speeds('accelerate-fit')} (torch threads {res['threads']}, "
              f"OMP_NUM_THREADS {res['omp_num_threads']}, {res['rounds']} rounds, the maps "
              "alternating in each)."]
    return "\n".join(lines)
