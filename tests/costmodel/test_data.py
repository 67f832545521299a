import pickle

import numpy as np
import pytest

from graphopt.costmodel.data import (PAD, CostModelError, FeatureNormalizer, deduplicate, load_dataset,
                                     prune, sample_configs, split_configs, split_graphs)
from graphopt.costmodel.models import build_model, graph_tensors
from graphopt.data import tpugraphs_dir
from graphopt.errors import GraphFormatError
from tests.conftest import real_tpugraphs
from tests.costmodel.conftest import write_layout, write_tile


def test_tile_npz_loads(tmp_path):
    write_tile(tmp_path / "a.npz", n=6, c=12)
    (g,) = load_dataset(tmp_path / "a.npz", dedup=False)
    assert (g.collection, g.num_nodes, g.num_configs, g.config_feat.shape) == ("tile", 6, 12, (12, 24))
    assert g.edge_index[:, 0].tolist() == [0, 1]  # producer 0 feeds consumer 1
    assert g.runtime[0] == pytest.approx(1 + g.config_feat[0, 6])  # divided by the normalizer


def test_layout_directory_loads_and_pads_with_minus_one(tmp_path):
    (tmp_path / "x").mkdir()
    write_layout(tmp_path / "x" / "g1.npz", seed=0)
    write_layout(tmp_path / "x" / "g2.npz", seed=1)
    graphs = load_dataset(tmp_path / "x")
    assert [g.name for g in graphs] == ["g1", "g2"] and graphs[0].collection == "layout"
    g = graphs[0]
    m = build_model("layout_gcn", 140, 18)
    t = graph_tensors(g)
    node_cfg = m.node_config(t["cfg"], t["config_nodes"], g.num_nodes)
    others = np.setdiff1d(np.arange(g.num_nodes), g.config_nodes)
    assert (node_cfg[:, others] == PAD).all()
    assert (node_cfg[:, g.config_nodes] == t["cfg"]).all()


def test_deduplicate_merges_repeated_configs(tmp_path):
    cfg = np.ones((4, 24), np.float32)
    cfg[1, 0] = 2
    write_tile(tmp_path / "d.npz", c=4, config_feat=cfg, config_runtime=np.array([10, 20, 30, 50]),
               config_runtime_normalizers=np.ones(4, np.int64))
    g = deduplicate(load_dataset(tmp_path / "d.npz", dedup=False)[0])
    assert g.num_configs == 2 and g.runtime.tolist() == [30.0, 20.0]


def test_prune_keeps_config_nodes_and_khop(tmp_path):
    (g,) = load_dataset(write_layout(tmp_path / "l.npz", n=12), dedup=False)
    p = prune(g, 1)  # config nodes 2, 5, 9 on a chain: keep 1-3, 4-6, 8-10
    assert p.num_nodes == 9 and p.op.tolist() == g.op[[1, 2, 3, 4, 5, 6, 8, 9, 10]].tolist()
    assert p.config_nodes.tolist() == [1, 4, 7] and p.edge_index.shape[1] == 7


def test_normalizer_is_fitted_on_train_only(tmp_path):
    a = load_dataset(write_tile(tmp_path / "a.npz", seed=0))[0]
    b = load_dataset(write_tile(tmp_path / "b.npz", seed=1))[0]
    norm = FeatureNormalizer.fit([a])
    x = norm(a).node_feat
    assert np.allclose(x.mean(0), 0, atol=1e-5)
    assert not np.allclose(norm(b).node_feat, FeatureNormalizer.fit([b])(b).node_feat)


def test_splits_and_sampling(tmp_path):
    graphs = [load_dataset(write_tile(tmp_path / f"{i}.npz", seed=i))[0] for i in range(4)]
    tr, te = split_graphs(graphs, 0.25, seed=0)
    assert len(tr) == 3 and len(te) == 1 and te[0].name not in {g.name for g in tr}
    tr, te = split_configs(graphs[:1], 0.25, seed=0)
    assert tr[0].num_configs + te[0].num_configs == graphs[0].num_configs
    assert not set(map(tuple, tr[0].config_feat)) & set(map(tuple, te[0].config_feat))
    rt = np.arange(100.0)
    fast = sample_configs(rt, 10, np.random.default_rng(0), fast_bias=5.0)
    assert len(set(fast.tolist())) == 10 and np.mean(fast) < 40


@pytest.mark.parametrize("override, needle", [
    ({"config_feat": None}, "missing key 'config_feat'"),
    ({"config_runtime_normalizers": None}, "'config_runtime_normalizers'"),
    ({"config_feat": np.zeros((3, 24), np.float32)}, "key 'config_feat' has 3 rows"),
    ({"config_runtime": np.array([1.0, np.nan] + [1.0] * 10)}, "key 'config_runtime' has a non-finite"),
])
def test_bad_files_name_file_and_key(tmp_path, override, needle):
    p = write_tile(tmp_path / "bad.npz", **override)
    with pytest.raises(GraphFormatError, match="bad.npz") as err:
        load_dataset(p)
    assert needle in str(err.value)


def test_pickled_file_is_refused(tmp_path):
    p = tmp_path / "p.npz"
    np.savez(p, node_feat=np.array([{"evil": 1}], dtype=object), node_opcode=np.zeros(1, np.uint8),
             edge_index=np.zeros((0, 2), np.int64), config_feat=np.zeros((1, 24)),
             config_runtime=np.ones(1), config_runtime_normalizers=np.ones(1))
    with pytest.raises(GraphFormatError, match="pickle"):
        load_dataset(p)
    (tmp_path / "raw.pb").write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(GraphFormatError, match="raw.pb"):
        load_dataset(tmp_path / "raw.pb")


def test_bad_paths(tmp_path):
    with pytest.raises(CostModelError, match="no .npz"):
        load_dataset(tmp_path)
    with pytest.raises(GraphFormatError, match="no such file"):
        load_dataset(tmp_path / "nope.npz")
    write_tile(tmp_path / "t.npz")
    write_layout(tmp_path / "l.npz")
    with pytest.raises(CostModelError, match="mixes tile and layout"):
        load_dataset(tmp_path)


real = pytest.mark.skipif(real_tpugraphs("op_tuning_data.pb") is None,
                          reason="real TpuGraphs records not present")


@real
def test_real_protos_load():
    (layout,) = load_dataset(tpugraphs_dir() / "module_tuning_data_layout.pb", dedup=False)
    assert layout.collection == "layout" and layout.num_configs == 112  # 122 runs, 10 failed
    assert layout.config_feat.shape == (112, 62, 18) and layout.num_nodes == 3163
    assert load_dataset(tpugraphs_dir() / "module_tuning_data_layout.pb")[0].num_configs == 91
    tile = load_dataset(tpugraphs_dir() / "op_tuning_data.pb", dedup=False)
    assert len(tile) == 15 and sum(g.num_configs for g in tile) == 752  # 754 runs, 2 failed
    assert all((g.runtime > 0).all() for g in tile)
