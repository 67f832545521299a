"""go-one's entropy-bonus sweep on train-split graphs (the table in docs/go.md).

Every config trains go-one from scratch on each graph with 2,000 evaluations (p100,
seed 0, one torch thread) and records the best step time. Held-out families are never
used here, so nothing is tuned on them.

    OMP_NUM_THREADS=1 .venv/bin/python bench/go_sweep.py          # ~6 min on one core
    .venv/bin/python bench/go_sweep.py --markdown                  # the table from the JSON
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

GRAPHS = ("rnnlm-2", "transformer-xl-4", "inception-v3-b32")
CONFIGS = (
    ("entropy 0", {"ent_coef": 0.0}),
    ("entropy 0.003", {"ent_coef": 0.003}),
    ("entropy 0.01 (**default**)", {"ent_coef": 0.01}),
    ("entropy 0.01, lr 1e-3 (pre-training's)", {"ent_coef": 0.01, "lr": 1e-3}),
    ("entropy 0.03", {"ent_coef": 0.03}),
)
OUT = Path(__file__).parent / "results" / "go-sweep.json"


def run() -> dict:
    from graphopt.hardware import load_cluster
    from graphopt._files import atomic_write
    from graphopt.optim import Budget, optimize
    from graphopt.sim import Problem
    from graphopt.zoo import build, get_entry

    rows = []
    for name in GRAPHS:
        entry = get_entry(name)
        prob = Problem(build(entry), load_cluster(f"p100:{entry.num_devices}"))
        for label, kw in CONFIGS:
            _, st = optimize(prob, "go-one", "placement", Budget(2000), 0, progress=False, **kw)
            rows.append({"graph": name, "config": label, "params": kw,
                         "step_time": st["step_time"], "seconds": st["seconds"]})
            print(f"{name:18s} {label:40s} {st['step_time'] * 1e3:8.1f} ms", flush=True)
    result = {"command": "OMP_NUM_THREADS=1 .venv/bin/python bench/go_sweep.py", "rows": rows}
    text = json.dumps(result, indent=1)
    atomic_write(OUT, lambda f: f.write(text.encode()))
    return result


def markdown(result: dict) -> str:
    by = {(r["graph"], r["config"]): r["step_time"] for r in result["rows"]}
    lines = ["| config | " + " | ".join(f"{g} (ms)" for g in GRAPHS) + " |",
             "|" + "---|" * (len(GRAPHS) + 1)]
    for label, _ in CONFIGS:
        lines.append(f"| {label} | " + " | ".join(f"{by[(g, label)] * 1e3:.1f}" for g in GRAPHS)
                     + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--markdown", action="store_true", help="print the table of the saved run")
    args = ap.parse_args()
    print(markdown(json.loads(OUT.read_text()) if args.markdown else run()))
