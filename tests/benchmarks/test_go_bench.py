"""``graphopt bench go`` on its quick sizes: every part runs, resumes and writes its tables."""

import json

from graphopt.benchmarks import go as go_bench
from graphopt.hardware import load_cluster
from graphopt.ir.generate import layered_graph
from graphopt.optim.learned.go.train import pretrain
from graphopt.rl.ppo import PPOConfig
from graphopt.sim import Problem


def test_quick_bench_go(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHOPT_CACHE", str(tmp_path / "cache"))
    ckpt = tmp_path / "policy"
    pretrain([Problem(layered_graph(5, 4, seed=0), load_cluster("p100:2"))], ckpt, updates=1,
             ppo=PPOConfig(num_samples=2), progress=False, dim=8)
    params = {"go": {"checkpoint": str(ckpt)}, "go-one": {"dim": 8, "progress": False},
              "go-finetune": {"checkpoint": str(ckpt), "progress": False, "num_samples": 4}}
    out, docs = tmp_path / "go.json", tmp_path / "b.md"
    kw = {"budget": 16, "quick": True, "learned_rows": ("transformer-xl-2",),
          "zero_shot_rows": ("wavenet-2x18",), "multitask_rows": ("transformer-xl-2",),
          "multitask_budget": 8, "learned": ("go", "go-finetune", "go-one"), "out": out,
          "baselines": ("expert", "sa", "portfolio"), "progress": False, "params": params}
    res = go_bench.run(**kw)
    (row,) = res["placement"]
    assert set(row["methods"]) == {"expert", "sa", "portfolio", "go", "go-finetune", "go-one",
                                   go_bench.AT_TIME}
    # the portfolio again, bounded only by go-finetune's seconds
    tuned, at_time = row["methods"]["go-finetune"], row["methods"][go_bench.AT_TIME]
    assert at_time["seconds_budget"] == tuned["seconds"] and at_time["step_time"] > 0
    assert row["methods"]["go"]["evals"] <= 16 and row["methods"]["go-one"]["evals"] == 16
    assert row["methods"]["go-one"]["evals_to_within_2pct"] <= 16
    (zs,) = res["zero_shot"]
    assert zs["held_out"] and zs["methods"]["go"]["inference_seconds"] > 0
    (mt,) = res["multitask"]
    assert set(mt["tasks"]) == set(go_bench.TASKS) and mt["default"] > 0
    assert res["geomean_speedup_vs_expert"]["expert"] == 1.0
    # resume keeps what is on disk
    saved = json.loads(out.read_text())
    saved["placement"][0]["methods"]["go"]["step_time"] = 1.0
    out.write_text(json.dumps(saved))
    again = go_bench.run(**kw, resume=True)
    assert again["placement"][0]["methods"]["go"]["step_time"] == 1.0
    go_bench.update_docs(res, docs, "graphopt bench go --quick")
    text = docs.read_text()
    assert "<!-- go-quick:start -->" in text and "| transformer-xl-2 |" in text
    assert "wavenet-2x18\\*" in text and "Multi-task" in text
    assert "go-finetune against the portfolio" in text and "rows won" in text
