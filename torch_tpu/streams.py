"""torch.tpu.Stream / Event and the current-stream API, mirroring torch.cuda.streams.

A tpu stream is a queue of the runtime and an event is a runtime event; the C++ DeviceGuardImpl
implements both, so these classes only add torch.cuda's spellings on top of torch.Stream/torch.Event.
"""
import torch

from torch_tpu._utils import _get_device_index, current_device

__all__ = ["Stream", "Event", "current_stream", "default_stream", "set_stream", "stream", "StreamContext"]


class Stream(torch.Stream):
    """A queue of work on a tpu chip. Ops issued while it is current run in order on it; different
    streams may run concurrently and are ordered with events (record_event / wait_event / wait_stream).

    Stream(device=None, priority=0) makes a new stream on `device` (the current chip by default).
    """

    def __new__(cls, device=None, priority=0, **kwargs):
        if "stream_id" in kwargs:  # rebuilt from an existing stream's (stream_id, device_index, device_type)
            return super().__new__(cls, priority=priority, **kwargs)
        if kwargs:
            raise TypeError(f"Stream() got unexpected keyword arguments {sorted(kwargs)}")
        index = _get_device_index(device, optional=True)
        return super().__new__(cls, device=torch.device("tpu", index), priority=priority)

    def __repr__(self):
        return f"<torch.tpu.Stream device=tpu:{self.device_index} stream_id={self.stream_id}>"


def _wrap(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


class _EventMeta(type):
    # torch.Event.elapsed_time(other) accepts only an object of exactly torch.Event's type, so
    # torch.tpu.Event() builds a plain torch.Event on the tpu; isinstance() still recognizes it.
    def __instancecheck__(cls, obj):
        return type(obj) is torch.Event and obj.device.type == "tpu"


class Event(torch.Event, metaclass=_EventMeta):
    """A marker in a stream. record() it, then query() / synchronize() / wait() on it;
    elapsed_time(end) gives milliseconds between two events made with enable_timing=True.

    Event(enable_timing=False, blocking=False, interprocess=False, device=None) returns a
    torch.Event on the tpu (isinstance(e, torch.tpu.Event) holds)."""

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False, device=None):
        index = _get_device_index(device, optional=True)
        return torch.Event(device=torch.device("tpu", index), enable_timing=enable_timing,
                           blocking=blocking, interprocess=interprocess)


def current_stream(device=None) -> Stream:
    """The stream that ops on `device` (the current chip by default) are issued to."""
    return _wrap(torch._C._accelerator_getStream(_get_device_index(device, optional=True)))


def default_stream(device=None) -> Stream:
    """The chip's default stream (stream id 0, the stream current until set_stream() says otherwise)."""
    cur = torch._C._accelerator_getStream(_get_device_index(device, optional=True))
    return Stream(stream_id=0, device_index=cur.device_index, device_type=cur.device_type)


def set_stream(stream) -> None:
    """Makes `stream` current for its chip (and makes that chip current). None: no-op, as in torch.cuda."""
    if stream is None:
        return
    torch._C._accelerator_setStream(stream)


class StreamContext:
    """Context manager that makes `stream` current for its chip and restores the previous stream
    (and current chip) on exit. None: no-op."""

    def __init__(self, stream):
        self.stream = stream
        self._prev_device = None
        self._prev_on_target = None
        self._prev_on_current = None

    def __enter__(self):
        if self.stream is None:
            return self.stream
        self._prev_device = current_device()
        self._prev_on_target = torch._C._accelerator_getStream(self.stream.device_index)
        if self.stream.device_index != self._prev_device:
            self._prev_on_current = torch._C._accelerator_getStream(self._prev_device)
        torch._C._accelerator_setStream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.stream is None:
            return
        torch._C._accelerator_setStream(self._prev_on_target)
        if self._prev_on_current is not None:  # setStream also switched the current chip: switch back
            torch._C._accelerator_setStream(self._prev_on_current)


def stream(stream) -> StreamContext:
    """`with torch.tpu.stream(s):` issues the enclosed ops to `s`."""
    return StreamContext(stream)
