"""SummaryWriter: PyTorch's torch.utils.tensorboard.SummaryWriter over the `tensorboard` package's
EventFileWriter (its own asynchronous queue, flush timer and record format).

One event file per directory: the run's own, one per `add_scalars` series (`<log_dir>/<main>_<tag>`,
as PyTorch lays them out, so TensorBoard draws them as runs on one chart) and one per `add_hparams`
run. After close() the next add_* opens a new file in the same directory, as PyTorch's does.
"""
import os
import socket
import time
from datetime import datetime

from tensorboard.compat.proto.event_pb2 import Event, SessionLog
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from . import summary as _summary

__all__ = ["SummaryWriter"]


def default_log_dir(comment=""):
    """runs/<Mon DD_HH-MM-SS>_<host><comment>, PyTorch's default."""
    return os.path.join("runs", datetime.now().strftime("%b%d_%H-%M-%S") + "_" + socket.gethostname() + comment)


class SummaryWriter:
    """Writes TensorBoard event files into `log_dir` (default: `default_log_dir(comment)`).

    purge_step: events at or after this step in an earlier, crashed run of the same log_dir are
    hidden (TensorBoard reads a restart marker). max_queue / flush_secs: the event writer's queue
    size and flush period. Values may be tensors, numpy arrays or Python numbers.
    """

    def __init__(self, log_dir=None, comment="", purge_step=None, max_queue=10, flush_secs=120, filename_suffix=""):
        self.log_dir = str(log_dir) if log_dir else default_log_dir(comment)
        self.purge_step = purge_step
        self.max_queue = max_queue
        self.flush_secs = flush_secs
        self.filename_suffix = filename_suffix
        self.all_writers = {}
        self._get_file_writer()

    # ------------------------------------------------------------ event files
    @property
    def file_writer(self):
        return self.all_writers.get(self.log_dir)

    def _writer(self, logdir):
        if logdir not in self.all_writers:
            self.all_writers[logdir] = EventFileWriter(logdir, self.max_queue, self.flush_secs, self.filename_suffix)
        return self.all_writers[logdir]

    def _get_file_writer(self):
        if self.log_dir not in self.all_writers:
            w = self._writer(self.log_dir)
            if self.purge_step is not None:
                w.add_event(Event(step=self.purge_step, file_version="brain.Event:2"))
                w.add_event(Event(step=self.purge_step, session_log=SessionLog(status=SessionLog.START)))
                self.purge_step = None
        return self.all_writers[self.log_dir]

    def _add(self, summary, global_step, walltime, writer=None):
        event = Event(summary=summary, wall_time=time.time() if walltime is None else walltime)
        if global_step is not None:
            event.step = int(global_step)
        (writer or self._get_file_writer()).add_event(event)

    def get_logdir(self):
        return self.log_dir

    # ------------------------------------------------------------ what can be logged
    def add_scalar(self, tag, scalar_value, global_step=None, walltime=None, new_style=False,
                   double_precision=False):
        self._add(_summary.scalar(tag, scalar_value, new_style, double_precision), global_step, walltime)

    def add_scalars(self, main_tag, tag_scalar_dict, global_step=None, walltime=None):
        """Several series on one chart: each tag is a run `<log_dir>/<main_tag>_<tag>` logging `main_tag`."""
        walltime = time.time() if walltime is None else walltime
        logdir = self._get_file_writer().get_logdir()
        for tag, value in tag_scalar_dict.items():
            writer = self._writer(logdir + "/" + main_tag.replace("/", "_") + "_" + tag)
            self._add(_summary.scalar(main_tag, value), global_step, walltime, writer)

    def add_histogram(self, tag, values, global_step=None, bins="tensorflow", walltime=None, max_bins=None):
        self._add(_summary.histogram(tag, values, bins, max_bins), global_step, walltime)

    def add_image(self, tag, img_tensor, global_step=None, walltime=None, dataformats="CHW"):
        """One image, CHW / HWC / HW (`dataformats`), float in 0..1 or uint8 in 0..255."""
        self._add(_summary.image(tag, img_tensor, dataformats), global_step, walltime)

    def add_images(self, tag, img_tensor, global_step=None, walltime=None, dataformats="NCHW"):
        """A batch of images as one grid (8 per row)."""
        self._add(_summary.image(tag, img_tensor, dataformats), global_step, walltime)

    def add_text(self, tag, text_string, global_step=None, walltime=None):
        self._add(_summary.text(tag, text_string), global_step, walltime)

    def add_hparams(self, hparam_dict, metric_dict, hparam_domain_discrete=None, run_name=None, global_step=None):
        """One hparams session in the run `<log_dir>/<run_name>` (default: the time), with the
        metrics logged there as scalars."""
        exp, start, end = _summary.hparams(hparam_dict, metric_dict, hparam_domain_discrete)
        logdir = os.path.join(self._get_file_writer().get_logdir(), run_name or str(time.time()))
        with SummaryWriter(log_dir=logdir, max_queue=self.max_queue, flush_secs=self.flush_secs,
                           filename_suffix=self.filename_suffix) as w:
            for s in (exp, start, end):
                w._add(s, global_step, None)
            for k, v in metric_dict.items():
                w.add_scalar(k, v, global_step)

    def add_graph(self, model, input_to_model=None, verbose=False, use_strict_trace=True):
        """The model's graph, traced by eagerc.export on `input_to_model` (a tensor or a tuple)."""
        from .graph import graph_def
        if input_to_model is None:
            raise ValueError("add_graph: eagerc traces the model to draw it; pass input_to_model")
        event = Event(graph_def=graph_def(model, input_to_model).SerializeToString(), wall_time=time.time())
        self._get_file_writer().add_event(event)

    # ------------------------------------------------------------ lifetime
    def flush(self):
        for w in self.all_writers.values():
            w.flush()

    def close(self):
        for w in self.all_writers.values():
            w.flush()
            w.close()
        self.all_writers = {}

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.close()
