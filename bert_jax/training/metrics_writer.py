"""TensorBoard scalars without TensorFlow: event protos framed by tensorboard's RecordWriter.

`tensorboard.summary.writer.event_file_writer.EventFileWriter` opens its file through
`tensorboard.compat.tf`, which imports TensorFlow whenever it is installed (it is, for the
input pipeline); importing TensorFlow in the training process costs seconds and memory and
belongs to `input_pipeline/` alone. So this writer opens the file itself (local or gs://
through etils.epath) and uses only the tensorboard package's protos and record framing;
`read_scalars` reads them back with the record reader tensorboard uses without TensorFlow.
Only process 0 writes.
"""

import socket
import time

from etils import epath
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter


class MetricsWriter:
    """Appends scalar summaries to one `events.out.tfevents.*` file in `log_dir`."""

    def __init__(self, log_dir: str, enabled: bool = True):
        self.enabled = enabled
        if not enabled:
            return
        directory = epath.Path(log_dir)
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / (f"events.out.tfevents.{int(time.time()):010d}."
                                 f"{socket.gethostname()}.bert_jax")
        self._writer = RecordWriter(self.path.open("wb"))
        self._write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def _write(self, event: event_pb2.Event) -> None:
        self._writer.write(event.SerializeToString())

    def scalars(self, step: int, values: dict[str, float]) -> None:
        """One event holding every named scalar at `step`."""
        if not self.enabled:
            return
        summary = summary_pb2.Summary(value=[
            summary_pb2.Summary.Value(tag=tag, simple_value=float(value))
            for tag, value in sorted(values.items())])
        self._write(event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary))
        self._writer.flush()

    def close(self) -> None:
        if self.enabled:
            self._writer.close()


def read_scalars(path: str) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} from an event file (local or gs://), for tests and reports.

    Read by tensorboard's own TensorFlow-free record reader (the one TensorBoard falls back
    to without TensorFlow; it checks each record's CRCs and opens gs:// through fsspec).
    """
    from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow

    scalars: dict[str, list[tuple[int, float]]] = {}
    reader = pywrap_tensorflow.PyRecordReader_New(path)
    with reader.file_handle:  # the reader itself has no close()
        while True:
            try:
                reader.GetNext()
            except errors.OutOfRangeError:  # the end of the file
                return scalars
            event = event_pb2.Event.FromString(reader.record())
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
