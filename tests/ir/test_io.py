"""Graph files (.npz without pickle, JSON), atomic writes, and networkx conversion."""

from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given

from graphopt.errors import GraphError, GraphFormatError, GraphoptError
from graphopt.ir import Graph, GraphBuilder, from_networkx, load_graph, save_graph, to_networkx
from graphopt.ir.generate import layered_graph, mlp_training_graph
from graphopt._files import atomic_write
from tests.conftest import graphs

ARRAYS = ("names", "op", "dtype", "shape", "flops", "bytes_read", "bytes_written", "out_bytes",
          "persistent_bytes", "temp_bytes", "module", "coloc", "src", "dst", "edge_bytes")


def assert_same_graph(a: Graph, b: Graph) -> None:
    for k in ARRAYS:
        x, y = getattr(a, k), getattr(b, k)
        assert x.shape == y.shape, k
        assert np.array_equal(x, y), k
        assert x.dtype.kind == y.dtype.kind, k


def listing(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


@pytest.fixture()
def graph() -> Graph:
    return mlp_training_graph(layers=2, hidden=16, batch=4)


@pytest.fixture()
def saved(tmp_path, graph) -> Path:
    return save_graph(graph, tmp_path / "g.npz")


def write_npz(path: Path, graph: Graph, drop=(), **override) -> Path:
    """An npz laid out like save_graph's, with keys dropped or replaced."""
    header = json.dumps({"format": "graphopt.graph", "version": 1, "name": graph.name, "meta": {}})
    arrays = {"header": np.array(header), **{k: getattr(graph, k) for k in ARRAYS}}
    arrays.update(override)
    for k in drop:
        arrays.pop(k)
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


# -- round trips --------------------------------------------------------------------------
@given(graphs(max_nodes=16))
def test_npz_and_json_round_trips_are_exact(g):
    with tempfile.TemporaryDirectory() as d:
        for name in ("g.npz", "g.json"):
            p = save_graph(g, Path(d) / name)
            h = load_graph(p)
            assert_same_graph(g, h)
            assert h.name == g.name and h.meta == g.meta
        assert listing(Path(d)) == ["g.json", "g.npz"], "no temporary files left behind"


@given(graphs(max_nodes=16))
def test_networkx_round_trip(g):
    G = to_networkx(g)
    assert G.number_of_nodes() == g.num_nodes and G.number_of_edges() == g.num_edges
    h = from_networkx(G)
    assert h.name == g.name
    assert_same_graph(g, h)


def test_networkx_round_trip_keeps_colocation_ids():
    b = GraphBuilder("coloc")
    b.add_node("late", "relu", coloc="g_late")
    b.add_node("early", "input", coloc="g_early")
    b.add_edge("early", "late")
    g = b.build()  # early (group id 1) sorts before late (group id 0)
    assert np.array_equal(from_networkx(to_networkx(g)).coloc, g.coloc)


def test_from_networkx_defaults():
    import networkx as nx

    G = nx.DiGraph()
    G.add_node("x", out_bytes=12.0)
    G.add_node("y", op="relu")
    G.add_edge("x", "y")
    g = from_networkx(G, name="nx")
    assert g.name == "nx" and g.names.tolist() == ["x", "y"]
    assert g.op.tolist() == ["other", "relu"]
    assert g.edge_bytes.tolist() == [12.0], "edge bytes default to the producer's out_bytes"


def test_saved_npz_holds_no_object_arrays(saved):
    with np.load(saved, allow_pickle=False) as z:
        for k in z.files:
            assert z[k].dtype != object


def test_save_appends_npz_suffix_and_creates_folders(tmp_path, graph):
    p = save_graph(graph, tmp_path / "sub" / "dir" / "g.bin")
    assert p.name == "g.bin.npz" and p.is_file()
    assert_same_graph(load_graph(p), graph)


@pytest.mark.parametrize("name", ["g.npz", "g.json"])
def test_graph_with_a_numpy_seed_can_be_saved(tmp_path, name):
    g = layered_graph(3, 2, seed=np.int64(7))
    assert load_graph(save_graph(g, tmp_path / name)).meta["seed"] == 7


def test_layered_graph_npz_round_trip(tmp_path):
    g = layered_graph(8, 6, seed=2)
    assert_same_graph(load_graph(save_graph(g, tmp_path / "l.npz")), g)


# -- bad files ----------------------------------------------------------------------------
def test_missing_file(tmp_path):
    with pytest.raises(GraphFormatError, match="nothere.npz"):
        load_graph(tmp_path / "nothere.npz")


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.5, 0.9, 0.99])
def test_truncated_npz(saved, fraction):
    data = saved.read_bytes()
    saved.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(GraphFormatError, match=str(saved.name)):
        load_graph(saved)


def test_truncated_by_one_byte(saved):
    saved.write_bytes(saved.read_bytes()[:-1])
    with pytest.raises(GraphFormatError, match="g.npz"):
        load_graph(saved)


def test_corrupted_npz(saved):
    data = saved.read_bytes()
    failures = []
    for pos in range(30, len(data) - 30, max(1, len(data) // 60)):
        bad = bytearray(data)
        for j in range(pos, pos + 8):
            bad[j] ^= 0xFF
        saved.write_bytes(bytes(bad))
        try:
            load_graph(saved)
        except (GraphFormatError, GraphError):
            pass
        except Exception as err:  # noqa: BLE001 - collecting what escapes
            failures.append(f"byte {pos}: {type(err).__name__}: {err}")
    assert not failures, "\n".join(failures)


def test_pickled_npz_is_refused(tmp_path, graph):
    p = write_npz(tmp_path / "evil.npz", graph, names=np.array([object()] * graph.num_nodes,
                                                                dtype=object))
    with pytest.raises(GraphFormatError, match="pickle") as err:
        load_graph(p)
    assert "evil.npz" in str(err.value)


def test_pickled_npz_with_only_the_object_array(tmp_path):
    p = tmp_path / "evil.npz"
    np.savez(p, names=np.array([object()], dtype=object))
    with pytest.raises(GraphFormatError, match="evil.npz"):
        load_graph(p)


def test_npz_missing_keys_are_named(tmp_path, graph):
    p = write_npz(tmp_path / "partial.npz", graph, drop=("edge_bytes", "flops"))
    with pytest.raises(GraphFormatError, match="missing keys") as err:
        load_graph(p)
    assert "edge_bytes" in str(err.value) and "flops" in str(err.value)
    assert "partial.npz" in str(err.value)


def test_npz_of_another_format(tmp_path, graph):
    p = write_npz(tmp_path / "other.npz", graph, header=np.array(json.dumps({"format": "x"})))
    with pytest.raises(GraphFormatError, match="other.npz.*format"):
        load_graph(p)


def test_npz_from_a_newer_version(tmp_path, graph):
    hdr = json.dumps({"format": "graphopt.graph", "version": 99})
    with pytest.raises(GraphFormatError, match="version 99"):
        load_graph(write_npz(tmp_path / "new.npz", graph, header=np.array(hdr)))


@pytest.mark.parametrize("header", [{"format": "graphopt.graph", "version": "2"},
                                    {"format": "graphopt.graph", "version": 1, "meta": [1, 2]}],
                         ids=["version-str", "meta-list"])
def test_npz_with_a_malformed_header(tmp_path, graph, header):
    p = write_npz(tmp_path / "hdr.npz", graph, header=np.array(json.dumps(header)))
    with pytest.raises(GraphFormatError, match="hdr.npz"):
        load_graph(p)


@pytest.mark.parametrize("version", [99, "2"])
def test_json_from_a_newer_version(tmp_path, graph, version):
    p = save_graph(graph, tmp_path / "new.json")
    doc = json.loads(p.read_text())
    doc["version"] = version
    p.write_text(json.dumps(doc))
    with pytest.raises(GraphFormatError, match="new.json.*version"):
        load_graph(p)


def test_npz_that_is_not_a_zip(tmp_path):
    p = tmp_path / "text.npz"
    p.write_text("hello")
    with pytest.raises(GraphFormatError, match="text.npz"):
        load_graph(p)


def test_npz_with_a_cycle_names_file_and_nodes(tmp_path, graph):
    src, dst = graph.src.copy(), graph.dst.copy()
    src[0], dst[0] = dst[0], src[0]  # reverse one edge of a chain-like graph
    p = write_npz(tmp_path / "cyc.npz", graph, src=src, dst=dst)
    with pytest.raises(GraphError, match="cyc.npz") as err:
        load_graph(p)
    assert str(graph.names[dst[0]]) in str(err.value) or str(graph.names[src[0]]) in str(err.value)


def test_npz_with_an_out_of_range_edge(tmp_path, graph):
    dst = graph.dst.copy()
    dst[-1] = 10_000
    with pytest.raises(GraphError, match="range.npz.*10000"):
        load_graph(write_npz(tmp_path / "range.npz", graph, dst=dst))


def test_npz_with_arrays_of_the_wrong_length(tmp_path, graph):
    with pytest.raises(GraphError, match="short.npz.*flops"):
        load_graph(write_npz(tmp_path / "short.npz", graph, flops=np.ones(2)))


def with_member(path: Path, key: str, shape: tuple[int, ...], dtype: str) -> Path:
    """``path`` with array ``key`` replaced by an npy header declaring ``shape`` and no data."""
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    members[f"{key}.npy"] = head.getvalue()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


@pytest.mark.parametrize("key, shape, dtype, match", [
    ("names", (2**31,), "<U8", "take 68,719,4.* bytes once decompressed, more than"),
    ("flops", (10**8,), "<f8", "array 'flops' has shape .100000000,., expected"),
    ("module", (22,), "<U100000", "strings of 100,000 characters"),
    ("src", (10**6,), "<i8", "array 'dst' has shape"),
])
def test_zip_bomb_is_refused_before_decompressing(monkeypatch, saved, key, shape, dtype, match):
    with_member(saved, key, shape, dtype)
    monkeypatch.setattr(np, "load", lambda *a, **k: pytest.fail("decompressed"))
    with pytest.raises(GraphoptError, match=f"g.npz: .*{match}"):
        load_graph(saved)


def test_npz_size_limit_is_raised_by_environment(monkeypatch, saved):
    monkeypatch.setenv("GRAPHOPT_MAX_NPZ_BYTES", "1000")
    with pytest.raises(GraphFormatError, match="g.npz: .*GRAPHOPT_MAX_NPZ_BYTES"):
        load_graph(saved)
    monkeypatch.setenv("GRAPHOPT_MAX_NPZ_BYTES", str(10**6))
    assert load_graph(saved).num_nodes > 0


@pytest.mark.parametrize("data, match", [
    (bytes(range(256)) * 4, "g.npz: not an npz archive"),
    (b"version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 9\n", "Git LFS pointer"),
])
def test_random_bytes_are_not_called_pickled(saved, data, match):
    saved.write_bytes(data)
    with pytest.raises(GraphFormatError, match=match) as err:
        load_graph(saved)
    assert "pickle" not in str(err.value)


def test_invalid_json_syntax(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"format": "graphopt.graph", "nodes": [')
    with pytest.raises(GraphFormatError, match="bad.json.*JSON"):
        load_graph(p)


def test_json_that_is_not_utf8(tmp_path):
    p = tmp_path / "bin.json"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(GraphFormatError, match="bin.json"):
        load_graph(p)


@pytest.mark.parametrize("doc", [[], {"nodes": [], "edges": []}, {"format": "graphopt.plan"}])
def test_json_of_another_format(tmp_path, doc):
    p = tmp_path / "other.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(GraphFormatError, match="other.json"):
        load_graph(p)


@pytest.mark.parametrize("nodes, edges", [
    ([{"op": "relu"}], []),                                # no name
    ([{"name": "a", "op": "relu", "shape": "big"}], []),   # shape not a list
    ([{"name": "a", "op": "relu"}], [[0, 1]]),             # edge without bytes
    ("nodes", []),                                         # not a list of records
])
def test_json_with_malformed_records(tmp_path, nodes, edges):
    p = tmp_path / "malformed.json"
    p.write_text(json.dumps({"format": "graphopt.graph", "version": 1, "nodes": nodes,
                             "edges": edges}))
    with pytest.raises(GraphFormatError, match="malformed.json"):
        load_graph(p)


def test_json_with_a_cycle(tmp_path):
    nodes = [{"name": n, "op": "relu"} for n in ("first", "second")]
    p = tmp_path / "cyc.json"
    p.write_text(json.dumps({"format": "graphopt.graph", "version": 1, "nodes": nodes,
                             "edges": [[0, 1, 4.0], [1, 0, 4.0]]}))
    with pytest.raises(GraphError, match="cyc.json.*cycle") as err:
        load_graph(p)
    assert "first" in str(err.value) and "second" in str(err.value)


def test_json_with_a_negative_size(tmp_path):
    nodes = [{"name": "neg", "op": "relu", "flops": -1.0}]
    p = tmp_path / "neg.json"
    p.write_text(json.dumps({"format": "graphopt.graph", "version": 1, "nodes": nodes, "edges": []}))
    with pytest.raises(GraphError, match="neg.json.*neg.*flops"):
        load_graph(p)


# -- atomic writes ------------------------------------------------------------------------
def failing_savez(f, **arrays):
    f.write(b"PK\x03\x04 half a zip file")
    f.flush()
    raise RuntimeError("disk full")


@pytest.mark.parametrize("existing", [False, True])
def test_save_failing_midway_leaves_no_partial_file(tmp_path, graph, monkeypatch, existing):
    target = tmp_path / "g.npz"
    if existing:
        save_graph(graph, target)
        before = target.read_bytes()
    monkeypatch.setattr(np, "savez_compressed", failing_savez)
    with pytest.raises(RuntimeError, match="disk full"):
        save_graph(graph, target)
    if existing:
        assert target.read_bytes() == before, "the old file is kept whole"
        assert listing(tmp_path) == ["g.npz"]
    else:
        assert listing(tmp_path) == []


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_atomic_write_cleans_up_on_any_interruption(tmp_path, exc):
    target = tmp_path / "out.json"
    target.write_text("old")

    def write(f):
        f.write(b"new but incompl")
        raise exc()

    with pytest.raises(exc):
        atomic_write(target, write)
    assert target.read_text() == "old"
    assert listing(tmp_path) == ["out.json"]


def test_json_save_failing_midway_leaves_no_file(tmp_path, graph, monkeypatch):
    from graphopt.ir import io

    real = io.atomic_write

    def interrupted(path, write):
        def half(f):
            f.write(b'{"format": "graphopt.gr')
            raise OSError("no space left on device")
        real(path, half)

    monkeypatch.setattr(io, "atomic_write", interrupted)
    with pytest.raises(OSError):
        save_graph(graph, tmp_path / "g.json")
    assert listing(tmp_path) == []


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root ignores directory permissions")
def test_save_into_a_read_only_folder_writes_nothing(tmp_path, graph):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(OSError):
            save_graph(graph, ro / "g.npz")
        assert listing(ro) == []
    finally:
        ro.chmod(0o755)


def test_save_under_a_file_instead_of_a_folder_writes_nothing(tmp_path, graph):
    blocker = tmp_path / "blocker"
    blocker.write_text("i am a file")
    with pytest.raises(OSError):
        save_graph(graph, blocker / "g.npz")
    assert listing(tmp_path) == ["blocker"] and blocker.read_text() == "i am a file"


@pytest.mark.parametrize("name", ["g.npz", "g.json"])
def test_saved_files_get_the_usual_permissions(tmp_path, graph, name):
    mask = os.umask(0o022)
    os.umask(mask)
    p = save_graph(graph, tmp_path / name)
    assert p.stat().st_mode & 0o777 == 0o666 & ~mask


def test_saved_file_is_a_plain_zip(saved):
    with zipfile.ZipFile(saved) as z:
        assert "header.npy" in z.namelist()


def test_atomic_write_writes_through_a_link_and_never_replaces_a_device(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    (tmp_path / "link.json").symlink_to(target)
    atomic_write(tmp_path / "link.json", lambda f: f.write(b"new"))
    assert (tmp_path / "link.json").is_symlink() and target.read_text() == "new"
    (tmp_path / "null.json").symlink_to("/dev/null")
    atomic_write(tmp_path / "null.json", lambda f: f.write(b"x"))  # written in place
    assert Path("/dev/null").is_char_device() and (tmp_path / "null.json").is_symlink()
    with pytest.raises(GraphoptError, match="/dev/full: cannot write"):
        atomic_write("/dev/full", lambda f: f.write(b"x"))
    assert Path("/dev/full").is_char_device()
