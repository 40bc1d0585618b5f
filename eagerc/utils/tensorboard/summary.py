"""Summary protobufs from eagerc tensors, numpy arrays and Python numbers, built as PyTorch's
torch/utils/tensorboard/summary.py builds them (same tags, fields and plugin metadata), so
TensorBoard shows an eagerc run exactly as it shows a PyTorch one. Pure functions: the writer
(writer.py) puts what they return into events.
"""
import numpy as np
from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

from .png import encode_png

__all__ = ["to_numpy", "scalar", "histogram", "image", "text", "hparams", "DEFAULT_BINS"]


def to_numpy(x):
    """A tensor (any device), numpy array, or Python/numpy number as a numpy array (numbers: shape (1,))."""
    from ..._tensor import Tensor
    if isinstance(x, Tensor):
        return x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, (int, float, bool, np.generic)):
        return np.array([x])
    if hasattr(x, "get"):  # a cupy array
        return x.get()
    raise TypeError(f"expected a Tensor, a numpy array or a number, got {type(x).__name__}")


# ---------------------------------------------------------------- scalars

def scalar(tag, value, new_style=False, double_precision=False):
    """simple_value (TensorBoard's classic scalar), or with new_style a 0-d tensor with the scalars
    plugin's metadata (float32, or float64 with double_precision)."""
    value = to_numpy(value)
    if value.squeeze().ndim != 0:
        raise ValueError(f"add_scalar({tag!r}): the value should hold one number, got shape {value.shape}")
    value = float(value.reshape(()))
    if not new_style:
        return Summary(value=[Summary.Value(tag=tag, simple_value=value)])
    from tensorboard.plugins.scalar.metadata import create_summary_metadata
    tensor = (TensorProto(double_val=[value], dtype="DT_DOUBLE", tensor_shape=TensorShapeProto())
              if double_precision else
              TensorProto(float_val=[value], dtype="DT_FLOAT", tensor_shape=TensorShapeProto()))
    return Summary(value=[Summary.Value(tag=tag, tensor=tensor,
                                        metadata=create_summary_metadata(display_name="", description=""))])


# ---------------------------------------------------------------- histograms

def _tensorflow_bins():
    """TensorFlow's (and PyTorch's default) bucket edges: +-1e-12 growing by 1.1x up to 1e20, and 0."""
    v, pos = 1e-12, []
    while v < 1e20:
        pos.append(v)
        v *= 1.1
    return [-x for x in reversed(pos)] + [0] + pos


DEFAULT_BINS = _tensorflow_bins()


def histogram(tag, values, bins="tensorflow", max_bins=None):
    """A HistogramProto of the values, binned by numpy.histogram (`bins` as numpy takes it, or
    "tensorflow" for DEFAULT_BINS). As PyTorch does: at most max_bins buckets (merging neighbours),
    only the range from the first to the last non-empty bucket, plus one empty bucket on the left
    (TensorBoard reads only right edges)."""
    values = to_numpy(values).astype(float).reshape(-1)
    if values.size == 0:
        raise ValueError(f"add_histogram({tag!r}): the input has no element")
    if isinstance(bins, str) and bins == "tensorflow":
        bins = DEFAULT_BINS
    counts, limits = np.histogram(values, bins=bins)
    if max_bins is not None and len(counts) > max_bins:
        group = len(counts) // max_bins
        counts = np.pad(counts, (0, -len(counts) % group)).reshape(-1, group).sum(axis=1)
        limits = np.append(limits[:-1:group], limits[-1])
    filled = np.cumsum(counts > 0)
    start, end = np.searchsorted(filled, [0, filled[-1] - 1], side="right")
    start, end = int(start), int(end) + 1
    counts = counts[start - 1:end] if start > 0 else np.concatenate([[0], counts[:end]])
    limits = limits[start:end + 1]
    hist = HistogramProto(min=values.min(), max=values.max(), num=len(values), sum=values.sum(),
                          sum_squares=values.dot(values), bucket_limit=limits.tolist(), bucket=counts.tolist())
    return Summary(value=[Summary.Value(tag=tag, histo=hist)])


# ---------------------------------------------------------------- images

def to_hwc(array, dataformats):
    """(H, W, C) with C = 3 or 4 from an array laid out as `dataformats` (NCHW, CHW, HWC, HW...):
    a batch becomes one grid of up to 8 columns, one channel becomes grey RGB."""
    fmt = dataformats.upper()
    if len(set(fmt)) != len(fmt) or array.ndim != len(fmt):
        raise ValueError(f"image of shape {array.shape} does not match dataformats={dataformats!r}")
    if len(fmt) == 4:
        batch = array.transpose([fmt.index(c) for c in "NCHW"])
        return _grid(batch).transpose(1, 2, 0)
    if len(fmt) == 3:
        hwc = array.transpose([fmt.index(c) for c in "HWC"])
        return np.concatenate([hwc] * 3, axis=2) if hwc.shape[2] == 1 else hwc
    return np.stack([array.transpose([fmt.index(c) for c in "HW"])] * 3, axis=2)


def _grid(batch, ncols=8):
    """(3, rows*H, cols*W) from (N, C, H, W), C = 1 or 3: images left to right, top to bottom."""
    if batch.shape[1] == 1:
        batch = np.concatenate([batch] * 3, axis=1)
    if batch.shape[1] != 3:
        raise ValueError(f"a batch of images needs 1 or 3 channels, got {batch.shape[1]}")
    n, _, h, w = batch.shape
    ncols = min(n, ncols)
    nrows = -(-n // ncols)
    canvas = np.zeros((3, h * nrows, w * ncols), dtype=batch.dtype)
    for i in range(n):
        y, x = divmod(i, ncols)
        canvas[:, y * h:(y + 1) * h, x * w:(x + 1) * w] = batch[i]
    return canvas


def image(tag, img, dataformats="CHW"):
    """A PNG Summary.Image: uint8 pixels as they are, anything else taken as 0..1 (times 255,
    clipped, truncated to uint8, as PyTorch does)."""
    array = to_numpy(img)
    hwc = to_hwc(array, dataformats)
    scale = 1 if array.dtype == np.uint8 else 255
    pixels = (hwc.astype(np.float32) * scale).clip(0, 255).astype(np.uint8)
    h, w, c = pixels.shape
    png = Summary.Image(height=h, width=w, colorspace=c, encoded_image_string=encode_png(pixels))
    return Summary(value=[Summary.Value(tag=tag, image=png)])


# ---------------------------------------------------------------- text and hyperparameters

def text(tag, text_string):
    """A string tensor for the text plugin, under `<tag>/text_summary` as PyTorch names it."""
    from tensorboard.plugins.text.metadata import create_summary_metadata
    tensor = TensorProto(dtype="DT_STRING", string_val=[text_string.encode("utf-8")],
                         tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
    return Summary(value=[Summary.Value(tag=tag + "/text_summary", tensor=tensor,
                                        metadata=create_summary_metadata(display_name="", description=""))])


def hparams(hparam_dict, metric_dict, hparam_domain_discrete=None):
    """The hparams plugin's three summaries (experiment, session start, session end), from its own
    protos and metadata helper: number (int, float, 0-d tensor), string and bool hyperparameters,
    None skipped; `hparam_domain_discrete` lists a hyperparameter's possible values."""
    from google.protobuf import struct_pb2
    from tensorboard.plugins.hparams import api_pb2, metadata
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData, SessionEndInfo, SessionStartInfo
    if not isinstance(hparam_dict, dict) or not isinstance(metric_dict, dict):
        raise TypeError("add_hparams: hparam_dict and metric_dict should be dictionaries")
    domains = hparam_domain_discrete or {}
    if not isinstance(domains, dict):
        raise TypeError("add_hparams: hparam_domain_discrete should be a dictionary")
    for k, v in domains.items():
        if k not in hparam_dict or not isinstance(v, list) or not all(isinstance(d, type(hparam_dict[k])) for d in v):
            raise TypeError(f"add_hparams: hparam_domain_discrete[{k!r}] should be a list of values of "
                            f"hparam_dict[{k!r}]'s type")
    ssi, infos = SessionStartInfo(), []
    for k, v in hparam_dict.items():
        if v is None:
            continue
        if isinstance(v, bool):
            field, kind = "bool_value", "DATA_TYPE_BOOL"
        elif isinstance(v, (int, float)):
            field, kind = "number_value", "DATA_TYPE_FLOAT64"
        elif isinstance(v, str):
            field, kind = "string_value", "DATA_TYPE_STRING"
        else:
            try:
                v = float(to_numpy(v).reshape(-1)[0])
            except TypeError:
                raise ValueError(f"add_hparams: hparam_dict[{k!r}] should be an int, float, str, bool or a "
                                 f"one-element tensor, got {type(v).__name__}") from None
            field, kind = "number_value", "DATA_TYPE_FLOAT64"
        setattr(ssi.hparams[k], field, v)
        domain = (struct_pb2.ListValue(values=[struct_pb2.Value(**{field: d}) for d in domains[k]])
                  if k in domains else None)
        infos.append(api_pb2.HParamInfo(name=k, type=api_pb2.DataType.Value(kind), domain_discrete=domain))
    experiment = api_pb2.Experiment(hparam_infos=infos,
                                    metric_infos=[api_pb2.MetricInfo(name=api_pb2.MetricName(tag=k))
                                                  for k in metric_dict])
    end = SessionEndInfo(status=api_pb2.Status.Value("STATUS_SUCCESS"))

    def summary(tag, data):
        return Summary(value=[Summary.Value(tag=tag, metadata=metadata.create_summary_metadata(data))])
    return (summary(metadata.EXPERIMENT_TAG, HParamsPluginData(experiment=experiment)),
            summary(metadata.SESSION_START_INFO_TAG, HParamsPluginData(session_start_info=ssi)),
            summary(metadata.SESSION_END_INFO_TAG, HParamsPluginData(session_end_info=end)))
