import numpy as np
import pytest
import torch

from graphopt.costmodel.data import load_dataset
from graphopt.costmodel.gst import HistoryTable, gst_scores, measure_step, partition
from graphopt.costmodel.metrics import listmle_loss
from graphopt.costmodel.models import MODELS, build_model, graph_tensors
from tests.costmodel.conftest import write_layout


@pytest.fixture
def graph(tmp_path):
    torch.set_num_threads(1)
    (g,) = load_dataset(write_layout(tmp_path / "l.npz", n=40, c=6), dedup=False)
    return g


@pytest.mark.parametrize("name", sorted(MODELS))
def test_all_fresh_segments_equal_full_graph(graph, name):
    torch.manual_seed(0)
    m = build_model(name, 140, 18).eval()
    t = graph_tensors(graph)
    idx = torch.arange(graph.num_configs)
    full = m(t["op"], t["x"], t["edge_index"], t["cfg"], t["config_nodes"])
    segs = partition(graph.num_nodes, t["edge_index"], segment_size=7, halo=m.num_layers + 1)
    assert len(segs) == 6
    with torch.no_grad():
        seg = gst_scores(m, t, idx, segs, sed_p=0.0)
    assert torch.allclose(full, seg, atol=1e-4, rtol=1e-5)


def test_stale_segments_use_the_table_and_save_memory(graph):
    torch.manual_seed(0)
    m = build_model("layout_gcn", 140, 18).train()
    t = graph_tensors(graph)
    idx = torch.arange(4)
    segs = partition(graph.num_nodes, t["edge_index"], segment_size=10, halo=0)
    table = HistoryTable()
    rng = np.random.default_rng(0)

    def step(fresh):
        def run():
            s = gst_scores(m, t, idx, segs, table, "l", fresh=fresh, sed_p=0.5, rng=rng)
            listmle_loss(s, t["runtime"][idx].float()).backward()
        return run

    gst = measure_step(step(1))
    assert table.filled["l"][:4].all() and not table.filled["l"][4:].any()
    full = measure_step(step(None))
    assert 0 < gst["saved_bytes"] < full["saved_bytes"] and gst["seconds"] > 0
    with pytest.raises(ValueError, match="HistoryTable"):
        gst_scores(m, t, idx, segs, None, fresh=1)
