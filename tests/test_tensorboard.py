"""eagerc.utils.tensorboard: every add_* is read back with TensorBoard's own readers (EventAccumulator,
EventFileLoader) and checked against numpy; where PyTorch is installed, its writer's summaries
are compared too."""
import glob
import io
import os
import re
import subprocess
import sys
import zlib

import numpy as np
import pytest

import eagerc
import eagerc.nn as nn

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader  # noqa: E402
from tensorboard.plugins.hparams import metadata as hp_metadata  # noqa: E402

from eagerc.utils.tensorboard import SummaryWriter  # noqa: E402
from eagerc.utils.tensorboard import summary  # noqa: E402
from eagerc.utils.tensorboard.png import encode_png, zlib_png  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def accumulator(logdir):
    ea = EventAccumulator(str(logdir), size_guidance={k: 0 for k in ("scalars", "images", "histograms",
                                                                       "tensors", "compressedHistograms")})
    ea.Reload()
    return ea


def events(logdir):
    """Every Event proto of the directory's event files, in file order."""
    out = []
    for path in sorted(glob.glob(os.path.join(str(logdir), "events.out.tfevents.*"))):
        out += list(EventFileLoader(path).Load())
    return out


def decode_png(data):
    """(H, W, C) uint8 pixels of a PNG: with Pillow, else (for zlib_png's unfiltered rows) by hand."""
    try:
        from PIL import Image
        return np.asarray(Image.open(io.BytesIO(data)))
    except ImportError:
        return _decode_unfiltered(data)


def _decode_unfiltered(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        kind = data[pos + 4:pos + 8]
        chunks[kind] = chunks.get(kind, b"") + data[pos + 8:pos + 8 + n]
        assert zlib.crc32(kind + data[pos + 8:pos + 8 + n]) == int.from_bytes(data[pos + 8 + n:pos + 12 + n], "big")
        pos += 12 + n
    w, h = int.from_bytes(chunks[b"IHDR"][:4], "big"), int.from_bytes(chunks[b"IHDR"][4:8], "big")
    c = {0: 1, 2: 3, 6: 4}[chunks[b"IHDR"][9]]
    rows = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), np.uint8).reshape(h, 1 + w * c)
    assert (rows[:, 0] == 0).all()
    return rows[:, 1:].reshape(h, w, c)


# ---------------------------------------------------------------- scalars

def test_scalars_from_tensors_arrays_and_numbers(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_scalar("loss", eagerc.tensor(2.5), 0)
        w.add_scalar("loss", np.float32(1.25), 1)
        w.add_scalar("loss", 0.5, 2, walltime=123.0)
        w.add_scalar("loss", eagerc.tensor([[0.25]]), 10)      # one element, any shape
        w.add_scalar("acc", 1, global_step=eagerc.tensor(3).item())
        with pytest.raises(ValueError, match="one number"):
            w.add_scalar("bad", eagerc.ones(2), 0)
    ea = accumulator(tmp_path)
    assert sorted(ea.Tags()["scalars"]) == ["acc", "loss"]
    loss = ea.Scalars("loss")
    assert [e.step for e in loss] == [0, 1, 2, 10]
    assert [e.value for e in loss] == [2.5, 1.25, 0.5, 0.25]
    assert loss[2].wall_time == 123.0
    assert [(e.step, e.value) for e in ea.Scalars("acc")] == [(3, 1.0)]


def test_new_style_scalars_are_tensors_of_the_scalars_plugin(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_scalar("x", 1 / 3, 5, new_style=True)
        w.add_scalar("y", 1 / 3, 5, new_style=True, double_precision=True)
    by_tag = {v.tag: v for e in events(tmp_path) for v in e.summary.value}
    assert by_tag["x"].metadata.plugin_data.plugin_name == "scalars"
    assert by_tag["x"].tensor.float_val == [np.float32(1 / 3)]
    assert by_tag["y"].tensor.double_val == [1 / 3]


def test_add_scalars_writes_one_run_per_series(tmp_path):
    with SummaryWriter(tmp_path) as w:
        for step in range(3):
            w.add_scalars("run/loss", {"train": step * 1.0, "val": step * 2.0}, step)
    for tag, scale in (("train", 1.0), ("val", 2.0)):
        ea = accumulator(tmp_path / f"run_loss_{tag}")
        assert [(e.step, e.value) for e in ea.Scalars("run/loss")] == [(s, s * scale) for s in range(3)]


# ---------------------------------------------------------------- histograms

def test_histogram_statistics_and_buckets_match_numpy(tmp_path):
    values = np.random.default_rng(0).normal(size=(40, 25)).astype(np.float32)
    with SummaryWriter(tmp_path) as w:
        w.add_histogram("w", eagerc.tensor(values), 7)
        w.add_histogram("w10", values, 7, bins=10)
    ea = accumulator(tmp_path)
    (event,) = ea.Histograms("w")
    h, v = event.histogram_value, values.astype(np.float64).ravel()
    assert event.step == 7 and h.num == v.size
    assert (h.min, h.max) == (v.min(), v.max())
    assert h.sum == pytest.approx(v.sum(), rel=1e-12) and h.sum_squares == pytest.approx(v @ v, rel=1e-12)
    assert sum(h.bucket) == v.size and h.bucket[0] == 0            # the empty bucket on the left
    assert set(h.bucket_limit) <= set(summary.DEFAULT_BINS)        # TensorFlow's exponential buckets
    assert h.bucket_limit[0] <= v.min() and h.bucket_limit[-1] >= v.max()
    h10 = ea.Histograms("w10")[0].histogram_value
    counts, edges = np.histogram(v, bins=10)
    assert list(h10.bucket) == [0] + counts.tolist() and list(h10.bucket_limit) == edges.tolist()


def test_histogram_max_bins_merges_neighbours():
    v = np.arange(100.0)
    h = summary.histogram("h", v, bins=20, max_bins=6).value[0].histo
    assert sum(h.bucket) == 100 and len(h.bucket) <= 8
    with pytest.raises(ValueError, match="no element"):
        summary.histogram("h", np.zeros(0))


def test_summaries_equal_pytorchs():
    """The same protos as torch.utils.tensorboard's summary functions build (when PyTorch is here)."""
    tsummary = pytest.importorskip("torch.utils.tensorboard.summary")
    rng = np.random.default_rng(1)
    values = rng.normal(size=500) * 3
    default_bins = summary.DEFAULT_BINS
    for bins in (default_bins, 7, "auto"):
        assert summary.histogram("h", values, bins) == tsummary.histogram("h", values, bins)
    assert summary.histogram("h", values, 30, max_bins=8) == tsummary.histogram("h", values, 30, max_bins=8)
    assert summary.scalar("s", 0.1) == tsummary.scalar("s", 0.1)
    assert summary.text("t", "héllo") == tsummary.text("t", "héllo")
    img = rng.random((3, 5, 6)).astype(np.float32)
    ours, theirs = summary.image("i", img).value[0].image, tsummary.image("i", img, dataformats="CHW").value[0].image
    assert (ours.height, ours.width, ours.colorspace) == (theirs.height, theirs.width, theirs.colorspace)
    assert (decode_png(ours.encoded_image_string) == decode_png(theirs.encoded_image_string)).all()
    hp = ({"lr": 0.1, "name": "adam", "layers": 3}, {"hp/acc": 0.9})
    ours, theirs = summary.hparams(*hp), tsummary.hparams(*hp)
    assert len(ours) == len(theirs) == 3
    for a, b in zip(ours, theirs):  # each holds serialized plugin data with a protobuf map, whose byte order
        assert _hparams_plugin_data(a) == _hparams_plugin_data(b)   # is unspecified: compare them parsed


def _hparams_plugin_data(summary_proto):
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData
    (value,) = summary_proto.value
    data = HParamsPluginData()
    data.ParseFromString(value.metadata.plugin_data.content)
    return value.tag, value.metadata.plugin_data.plugin_name, data


# ---------------------------------------------------------------- images

def test_images_in_every_layout_round_trip_through_png(tmp_path):
    rng = np.random.default_rng(2)
    chw = rng.random((3, 4, 5)).astype(np.float32)
    hwc_u8 = rng.integers(0, 256, (6, 7, 3), dtype=np.uint8)
    hw = rng.random((2, 3))
    rgba = rng.integers(0, 256, (4, 2, 2), dtype=np.uint8)
    with SummaryWriter(tmp_path) as w:
        w.add_image("chw", eagerc.tensor(chw), 1)
        w.add_image("hwc", hwc_u8, 1, dataformats="HWC")
        w.add_image("hw", eagerc.tensor(hw), 1, dataformats="HW")
        w.add_image("rgba", rgba, 1)
        w.add_image("clip", np.array([[[-1.0, 0.5, 2.0]]]), 1)
    ea = accumulator(tmp_path)
    expect = {"chw": (chw.transpose(1, 2, 0) * 255).astype(np.uint8), "hwc": hwc_u8,
              "hw": np.stack([(hw * 255).astype(np.uint8)] * 3, axis=2), "rgba": rgba.transpose(1, 2, 0),
              "clip": np.array([[[0, 0, 0], [127, 127, 127], [255, 255, 255]]], np.uint8)}
    for tag, pixels in expect.items():
        (event,) = ea.Images(tag)
        assert (event.height, event.width, event.step) == (pixels.shape[0], pixels.shape[1], 1)
        assert (decode_png(event.encoded_image_string) == pixels).all(), tag


def test_add_images_lays_a_batch_out_as_a_grid(tmp_path):
    batch = np.random.default_rng(3).integers(0, 256, (10, 1, 2, 3), dtype=np.uint8)
    with SummaryWriter(tmp_path) as w:
        w.add_images("batch", eagerc.tensor(batch), 0)
        w.add_images("nhwc", batch.transpose(0, 2, 3, 1), 0, dataformats="NHWC")
    ea = accumulator(tmp_path)
    for tag in ("batch", "nhwc"):
        grid = decode_png(ea.Images(tag)[0].encoded_image_string)
        assert grid.shape == (4, 24, 3)                              # 8 per row: two rows of 2x3 images
        assert (grid[2:4, 3:6, 0] == batch[9, 0]).all() and (grid[2:4, 6:, :] == 0).all()
        assert (grid[..., 0] == grid[..., 2]).all()                  # one channel is grey


def test_zlib_png_encoder_without_pillow(monkeypatch):
    img = np.random.default_rng(4).integers(0, 256, (5, 3, 4), dtype=np.uint8)
    for pixels in (img, img[..., :3], img[..., :1]):
        data = zlib_png(pixels)
        assert (_decode_unfiltered(data) == pixels).all()
        decoded = decode_png(data)                                   # Pillow reads it too, where installed
        assert (decoded.reshape(pixels.shape) == pixels).all()
    monkeypatch.setitem(sys.modules, "PIL", None)                    # no Pillow: the zlib encoder
    assert encode_png(img) == zlib_png(img)


# ---------------------------------------------------------------- text, hparams, graph

def test_text(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_text("notes", "lr **0.1**, ünïcode", 4)
    (event,) = accumulator(tmp_path).Tensors("notes/text_summary")
    assert event.step == 4 and event.tensor_proto.string_val == ["lr **0.1**, ünïcode".encode()]


def test_hparams_session_and_metrics(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_hparams({"lr": 0.01, "opt": "adam", "amp": True, "layers": eagerc.tensor(4), "skip": None},
                      {"hp/loss": eagerc.tensor(0.5)}, hparam_domain_discrete={"opt": ["adam", "sgd"]},
                      run_name="trial1", global_step=3)
        with pytest.raises(TypeError, match="dictionaries"):
            w.add_hparams([("lr", 1)], {})
    run = tmp_path / "trial1"
    data = {v.tag: v.metadata.plugin_data for e in events(run) for v in e.summary.value}
    assert all(d.plugin_name == "hparams" for t, d in data.items() if t.startswith("_hparams_"))
    exp = hp_metadata.parse_experiment_plugin_data(data[hp_metadata.EXPERIMENT_TAG].content)
    assert [i.name for i in exp.hparam_infos] == ["lr", "opt", "amp", "layers"]
    assert [v.string_value for v in exp.hparam_infos[1].domain_discrete.values] == ["adam", "sgd"]
    assert [m.name.tag for m in exp.metric_infos] == ["hp/loss"]
    start = hp_metadata.parse_session_start_info_plugin_data(data[hp_metadata.SESSION_START_INFO_TAG].content)
    assert start.hparams["lr"].number_value == 0.01 and start.hparams["opt"].string_value == "adam"
    assert start.hparams["amp"].bool_value is True and start.hparams["layers"].number_value == 4
    end = hp_metadata.parse_session_end_info_plugin_data(data[hp_metadata.SESSION_END_INFO_TAG].content)
    assert end.status == 1                                          # STATUS_SUCCESS
    assert [(e.step, e.value) for e in accumulator(run).Scalars("hp/loss")] == [(3, 0.5)]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
        self.norm = nn.BatchNorm1d(4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.norm(self.body(x))) * 2


def test_add_graph_names_nodes_by_module_scope(tmp_path):
    model = Net().train()
    with SummaryWriter(tmp_path) as w:
        w.add_graph(model, eagerc.randn(5, 3))
    assert model.training                                            # traced in eval mode, then restored
    graph = accumulator(tmp_path).Graph()
    nodes = {n.name: n for n in graph.node}
    assert nodes["input/x"].op == "IO Node"
    assert nodes["Net/Sequential[body]/Linear[0]/weight"].op == "Parameter"
    assert nodes["Net/BatchNorm1d[norm]/running_mean"].op == "Buffer"
    ops = {n.op for n in graph.node}
    assert {"linear", "relu", "mul"} <= ops
    linear = next(n for n in graph.node if n.op == "linear" and n.name.startswith("Net/Linear[head]/"))
    assert "Net/Linear[head]/weight" in linear.input and "Net/Linear[head]/bias" in linear.input
    assert [d.size for d in linear.attr["_output_shapes"].list.shape[0].dim] == [5, 2]
    assert b"linear(" in linear.attr["attr"].s
    (out,) = [n for n in graph.node if n.name.startswith("output/")]
    assert nodes[out.input[0]].op == "mul"                          # the last op, at the top scope
    assert nodes[out.input[0]].name.startswith("Net/")
    with pytest.raises(ValueError, match="input_to_model"):
        SummaryWriter(tmp_path / "g").add_graph(model)


# ---------------------------------------------------------------- the writer's lifetime

def test_default_log_dir_purge_step_flush_and_reopen(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w = SummaryWriter(comment="_lr0.1", purge_step=5, max_queue=2, flush_secs=1)
    assert re.fullmatch(r"runs[/\\][A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2}_.+_lr0\.1", w.get_logdir())
    w.add_scalar("a", 1.0, 5)
    w.flush()                                                        # on disk before close
    assert [e.value for e in accumulator(w.get_logdir()).Scalars("a")] == [1.0]
    w.close()
    w.add_scalar("a", 2.0, 6)                                        # a new event file after close
    w.close()
    evs = events(w.get_logdir())
    assert any(e.session_log.status == e.session_log.START and e.step == 5 for e in evs)
    assert len(glob.glob(os.path.join(w.get_logdir(), "events.out.tfevents.*"))) == 2
    assert [e.value for e in accumulator(w.get_logdir()).Scalars("a")] == [1.0, 2.0]


# ---------------------------------------------------------------- packaging

def _run(code):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)


def test_without_tensorboard_the_error_says_how_to_install_it():
    r = _run("import sys; sys.modules['tensorboard'] = None\n"
             "import eagerc; eagerc.randn(2).sum()\n"                 # eagerc itself never needs it
             "import eagerc.utils.tensorboard")
    assert r.returncode != 0
    assert "ModuleNotFoundError" in r.stderr and "pip install eagerc[tensorboard]" in r.stderr


def test_import_eagerc_does_not_import_tensorboard():
    r = _run("import sys, eagerc, eagerc.utils.data, eagerc.nn; eagerc.randn(2)\n"
             "assert 'tensorboard' not in sys.modules and 'eagerc.utils.tensorboard' not in sys.modules")
    assert r.returncode == 0, r.stderr


def test_torch_utils_tensorboard_path_with_torch_aliased_to_eagerc(tmp_path):
    """makemore's `from torch.utils.tensorboard import SummaryWriter` under an alias that maps
    every torch.<module> to eagerc.<module>."""
    r = _run(f"""
import importlib, importlib.abc, importlib.util, sys

class Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            return importlib.util.spec_from_loader(name, self)
    def create_module(self, spec):
        return importlib.import_module("eagerc" + spec.name[len("torch"):])
    def exec_module(self, module):
        pass

sys.meta_path.insert(0, Alias())
import torch
from torch.utils.tensorboard import SummaryWriter
import eagerc.utils.tensorboard
assert SummaryWriter is eagerc.utils.tensorboard.SummaryWriter
with SummaryWriter({str(tmp_path)!r}) as w:
    w.add_scalar("loss", torch.tensor(1.5), 0)
""")
    assert r.returncode == 0, r.stderr
    assert [e.value for e in accumulator(tmp_path).Scalars("loss")] == [1.5]
