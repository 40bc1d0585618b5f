"""eagerc.viz: DOT pictures of programs (clusters, edge types, collapsed and repeated modules,
fusion groups, profiles) and of eager backward graphs; rendering with graphviz's `dot`."""
import re
import time

import numpy as np
import pytest

import eagerc
from eagerc import nn, viz
from eagerc.compiler import passes
from eagerc.compiler.export import export

needs_dot = pytest.mark.skipif(viz.dot_program() is None,
                               reason="graphviz's `dot` program is not installed (apt-get install graphviz)")


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class Block(nn.Module):
    """~20 ops: layer norm, a little attention, an MLP, two residual adds."""

    def __init__(self, d=16):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.fc = nn.Linear(d, 2 * d)
        self.out = nn.Linear(2 * d, d)

    def forward(self, x):
        q, k, v = self.qkv(self.ln(x)).split(x.shape[-1], dim=-1)
        att = (q @ k.transpose(-1, -2) * 0.25).softmax(-1)
        x = x + self.proj(att @ v)
        return x + self.out(self.fc(x).relu())


class Stack(nn.Module):
    def __init__(self, n, d=16):
        super().__init__()
        self.inp = nn.Linear(d, d)
        self.layers = nn.ModuleList([Block(d) for _ in range(n)])
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        x = self.inp(x)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


@pytest.fixture(scope="module")
def cnn_prog():
    eagerc.manual_seed(0)
    return export(CNN(), (eagerc.randn(2, 3, 8, 8),))


def _clusters(src):
    return re.findall(r'subgraph "cluster_m:([^"]+)"', src)


def _labels(src):
    return re.findall(r'\[label="([^"]*)"', src)


# ---------------------------------------------------------------- program pictures

def test_modules_are_nested_clusters_and_edges_carry_types(cnn_prog):
    d = viz.program_graph(cnn_prog.graph)
    src = d.source
    assert src.startswith("digraph") and src.rstrip().endswith("}")
    clusters = _clusters(src)
    assert "features" in clusters and "features.1" in clusters and "head" in clusters
    # features.1 (the batch norm) is inside features: its subgraph opens before features closes
    assert src.index('"cluster_m:features"') < src.index('"cluster_m:features.1"')
    labels = _labels(src)
    assert "f32[2,3,8,8]" in labels and "f32[2,8,8,8]" in labels and "f32[2,10]" in labels
    assert any(lab.startswith("conv2d 3→8 k3×3") for lab in labels)
    # parameters: small named boxes, full name in the tooltip
    assert 'tooltip="features.0.weight: f32[8,3,3,3]"' in src
    assert re.search(r'label="weight" tooltip="head.weight: f32\[10,256\]" shape="box"', src)
    # a module with a single op is a line of that op's box, not a cluster
    assert "features.2" not in clusters and any(lab.startswith("features.2") and "relu" in lab for lab in labels)
    assert d.stats["nodes"] == len(cnn_prog.graph.nodes)


def test_depth_collapses_modules_into_one_box(cnn_prog):
    d0 = viz.program_graph(cnn_prog.graph, depth=0).source
    assert _clusters(d0) == []
    box = re.search(r'\[label="(features[^"]*)"[^\]]*shape="box3d"', d0)
    assert box and "conv2d" in box.group(1)
    # edges between collapsed modules keep their types
    labels = _labels(d0)
    assert "f32[2,16,4,4]" in labels and "f32[2,256]" in labels
    assert "weight" not in labels          # parameters of collapsed modules are inside them
    d1 = viz.program_graph(cnn_prog.graph, depth=1).source
    assert _clusters(d1) == ["features", "head"]    # head: its linear and parameters
    assert re.search(r'label="features\.1\\n[^"]*" [^\]]*shape="box3d"', d1)


def test_fusion_groups_are_clusters():
    eagerc.manual_seed(0)
    m = CNN().eval()
    from eagerc.compiler.tracer import trace
    with eagerc.no_grad():
        graph, _, _ = trace(m, (eagerc.randn(2, 3, 8, 8),), {},
                            {id(p): n for n, p in list(m.named_parameters()) + list(m.named_buffers())},
                            {id(mod): (n or "CNN") for n, mod in m.named_modules()}, fullgraph=True)
    fused = passes.optimize(graph)
    groups = fused.fusion_groups
    assert groups
    src = viz.program_graph(fused).source
    assert src.count("subgraph cluster_f") == viz.program_graph(fused).stats["fusion_groups"] >= 1
    assert re.search(r'label="fusion0 \(\d+ ops\)"', src)


def test_repeated_blocks_are_drawn_once():
    eagerc.manual_seed(0)
    prog = export(Stack(12), (eagerc.randn(2, 4, 16),))
    full = viz.program_graph(prog.graph, repeats="expand")
    once = viz.program_graph(prog.graph, repeats="collapse")
    assert once.stats["repeats"] == {"layers.0": 12}
    assert "layers.0 … 11  ×12  (Block)" in once.source or "layers.0 … 11  ×12" in once.source
    assert once.stats["vertices"] < full.stats["vertices"] / 5
    assert "layers.5" not in once.source and "layers.5" in full.source
    # the edge from one instance to the next is a dashed back edge that does not constrain layout
    assert 'constraint="false"' in once.source
    # auto: a small graph is drawn in full
    assert viz.program_graph(prog.graph).stats["repeats"] == {}


def test_profile_colours_and_labels_ops_by_time(cnn_prog):
    env = dict(cnn_prog.weights)
    env["arg0"] = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    times, runs = viz.time_nodes(cnn_prog.graph, env, repeats=3)
    assert set(times) == {n.out.name for n in cnn_prog.graph.nodes} and len(runs) == 3
    assert all(t >= 0 for t in times.values()) and sum(times.values()) <= max(runs) * 1.5 + 1e-3
    src = viz.program_graph(cnn_prog.graph, times=times).source
    conv = re.search(r'label="(conv2d 3→8[^"]*)".* fillcolor="(#[0-9a-f]{6})"', src)
    assert conv and re.search(r"\d+ (µs|ms) · \d+%", conv.group(1))
    assert "per call (sum over ops)" in src


def test_symbolic_shapes_and_argument_names(cnn_prog):
    arg = cnn_prog.graph.args()[0].name
    src = viz.program_graph(cnn_prog.graph, value_shapes={arg: ("batch", 3, 8, 8)}, arg_labels={arg: "x"}).source
    assert 'label="x\\nf32[batch,3,8,8]"' in src and 'label="f32[batch,3,8,8]"' in src


def test_op_summary_shows_key_attributes(cnn_prog):
    ops = {n.op: viz.op_summary(n) for n in cnn_prog.graph.nodes}
    assert ops["max_pool2d"] == "max_pool2d\nkernel_size=2 stride=2"
    assert ops["linear"] == "linear 256→10"
    assert "dilation" not in ops["conv2d"] and "groups" not in ops["conv2d"]


class SharedInput(Stack):
    """Every layer also reads the first activation: long edges across the whole graph."""

    def forward(self, x):
        h0 = x = self.inp(x)
        for layer in self.layers:
            x = layer(x) + h0
        return self.norm(x)


def test_large_graph_text_is_fast():
    eagerc.manual_seed(0)
    prog = export(Stack(125), (eagerc.randn(2, 4, 16),))
    n = len(prog.graph.nodes)
    assert n >= 2000, n
    t0 = time.perf_counter()
    d = viz.program_graph(prog.graph)
    elapsed = time.perf_counter() - t0
    assert elapsed < 5, elapsed
    assert d.stats["repeats"] == {"layers.0": 125} and d.stats["vertices"] < 100
    x = viz.program_graph(prog.graph, repeats="expand")
    assert x.stats["vertices"] > n and x.stats["params_hidden"] > 0   # too many boxes for parameters


def test_long_edges_become_references():
    eagerc.manual_seed(0)
    prog = export(SharedInput(40), (eagerc.randn(2, 4, 16),))
    src = viz.program_graph(prog.graph, repeats="expand").source
    refs = re.findall(r'label="(t\d+ from inp)"', src)
    assert len(refs) > 20                           # most layers read h0 through a reference box
    assert " from " not in viz.program_graph(export(SharedInput(3), (eagerc.randn(2, 4, 16),)).graph).source


# ---------------------------------------------------------------- rendering

@needs_dot
def test_render_svg_png_and_repr(cnn_prog, tmp_path):
    d = viz.program_graph(cnn_prog.graph)
    svg = tmp_path / "g.svg"
    assert d.render(svg) == str(svg)
    text = svg.read_text()
    assert "<svg" in text and "conv2d" in text and "features.1" in text
    d.render(tmp_path / "g.png")
    assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in d._repr_svg_()


@needs_dot
def test_render_2000_node_graph_in_seconds(tmp_path):
    eagerc.manual_seed(0)
    prog = export(Stack(125), (eagerc.randn(2, 4, 16),))
    t0 = time.perf_counter()
    viz.program_graph(prog.graph).render(tmp_path / "big.svg")
    elapsed = time.perf_counter() - t0
    assert elapsed < 30, f"{len(prog.graph.nodes)} ops took {elapsed:.1f} s"
    assert "×125" in (tmp_path / "big.svg").read_text()


def test_without_dot_the_dot_file_is_written(cnn_prog, tmp_path, monkeypatch):
    monkeypatch.setenv("EAGERC_DOT", "")
    d = viz.program_graph(cnn_prog.graph)
    with pytest.raises(viz.GraphvizNotFound, match="apt-get install graphviz"):
        d.render(tmp_path / "g.svg")
    assert (tmp_path / "g.dot").read_text() == d.source and not (tmp_path / "g.svg").exists()
    assert d._repr_svg_() is None
    d.render(tmp_path / "plain.dot")       # DOT output needs no graphviz
    assert (tmp_path / "plain.dot").read_text() == d.source
    with pytest.raises(ValueError, match="use .svg"):
        d.render(tmp_path / "g.jpg")


# ---------------------------------------------------------------- autograd graphs

def test_autograd_graph_names_leaves_and_saved_tensors():
    eagerc.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    x = eagerc.randn(5, 4)
    y = eagerc.randint(0, 3, (5,))
    loss = nn.functional.cross_entropy(m(x), y)
    g = viz.autograd_graph(loss, params=m.named_parameters())
    src = g.source
    labels = _labels(src)
    assert "output\\nf32[]" in labels
    for name in ("CrossEntropyBackward0", "LinearBackward0", "TanhBackward0"):
        assert name in labels
    assert "0.weight\\nf32[8,4]" in labels and "2.bias\\nf32[3]" in labels        # leaves, named
    assert "x\\nf32[5,4]" in labels and "result\\nf32[5,8]" in labels              # saved for backward
    assert "target\\ni64[5]" in labels
    assert g.stats == {"nodes": 4, "leaves": 4, "saved": g.stats["saved"]} and g.stats["saved"] >= 5
    # every vertex is declared exactly once
    declared = re.findall(r"^  (\w+) \[label=", src, re.M)
    assert len(declared) == len(set(declared))
    loss.backward()
    assert "saved values freed" in viz.autograd_graph(loss).source


def test_autograd_graph_custom_function_and_errors():
    class Square(eagerc.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, g):
            a, = ctx.saved_tensors
            return 2 * a * g

    w = eagerc.randn(3, requires_grad=True)
    src = viz.autograd_graph([Square.apply(w).sum(), w * 2]).source
    assert "SquareBackward0" in src and "SumBackward0" in src and "output 1" in src
    assert "saved[0]\\nf32[3]" in src
    with pytest.raises(TypeError, match="expects tensors"):
        viz.autograd_graph(np.zeros(3))


@needs_dot
def test_autograd_graph_renders(tmp_path):
    w = eagerc.randn(3, requires_grad=True)
    g = viz.autograd_graph((w.exp() * w).sum(), params={"w": w})
    g.render(tmp_path / "ag.svg")
    assert "ExpBackward0" in (tmp_path / "ag.svg").read_text()
    assert "<svg" in g._repr_svg_()
