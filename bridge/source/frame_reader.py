"""A thread that receives the replication stream's CopyData frames, so that receiving
overlaps the pipeline's decoding, encoding and producing (on a second core: the reading itself
runs in ``bridge/native/_pqread.c`` with the GIL released).

Ownership: libpq allows one thread per connection at a time. While a :class:`FrameReader`
runs, it is the only user of the connection: the source hands it the status updates to send
(:meth:`FrameReader.send`) and touches the connection again only after :meth:`FrameReader.stop`.

Flow: frames travel in batches (up to ``max_frames`` or ``max_bytes`` of what arrived within
``linger_us`` of the batch's first frame) through a queue of at most ``queue_batches`` batches.
The linger (2 ms) is a latency bought for CPU: the walsender sends a few frames per network
write, and a batch per write cost the reader a wake-up and the pipeline a hand-over each
(about 3 us per change more, measured with bench/pipeline_bench.py). When the pipeline falls
behind, the queue fills, the reader stops reading and the server's sends block on TCP: the same
back-pressure as reading on the pipeline's thread, with a bounded amount of memory between.
The end of the stream (the server's CopyDone) and a connection error reach the pipeline in
order, after the frames before them, as the batch's status.
"""

from __future__ import annotations

import queue
import threading
from types import ModuleType

import psycopg

from bridge.native.pq import copy_data_reader
from bridge.native.switches import READER_THREAD, enabled

#: A batch's status: the stream goes on, the server ended the COPY, the connection failed.
STREAMING, ENDED, FAILED = 0, -1, -2


def frame_reading() -> ModuleType | None:
    """The bound ``bridge.native._pqread`` module, or ``None`` (the pipeline's thread reads):
    see :func:`bridge.native.pq.copy_data_reader`; ``PGBRIDGE_READER_THREAD=0`` also reads
    in line."""
    if not enabled(READER_THREAD):
        return None
    return copy_data_reader()


class FrameReader:
    """Reads the frames of one replication connection on its own thread (see module doc)."""

    def __init__(
        self,
        pgconn: psycopg.pq.abc.PGconn,
        module: ModuleType,
        *,
        max_frames: int = 512,
        max_bytes: int = 1 << 20,
        queue_batches: int = 16,
        wait_ms: int = 50,
        linger_us: int = 2000,
    ) -> None:
        self._pgconn = pgconn
        self._read = module.read_frames
        self._max_frames = max_frames
        self._max_bytes = max_bytes
        self._wait_ms = wait_ms
        self._linger_us = linger_us
        self._batches: queue.Queue[tuple[list[bytes], int]] = queue.Queue(queue_batches)
        self._outbox: list[bytes] = []
        self._outbox_lock = threading.Lock()
        self._stopping = threading.Event()
        #: Why the reader stopped early (an exception while sending), for the source's error.
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="pgbridge-wal-reader", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def get(self, timeout: float) -> tuple[list[bytes], int] | None:
        """The next batch of frames and its status, or None after ``timeout`` s without one."""
        try:
            return self._batches.get(timeout=timeout)
        except queue.Empty:
            return None

    def send(self, message: bytes) -> None:
        """Queue a CopyData message (a status update) for the reader to send, in order."""
        with self._outbox_lock:
            self._outbox.append(message)

    def stop(self) -> None:
        """Stop reading and wait for the thread: the connection is the caller's again.
        Frames read but not taken are dropped: the caller resumes from what it confirmed."""
        self._stopping.set()
        while self._thread.is_alive():
            self._drain()  # a reader blocked on a full queue sees the stop
            self._thread.join(0.05)
        self._drain()
        if self._outbox:  # status updates not sent yet: the caller sends its own at close
            self._outbox.clear()

    def _drain(self) -> None:
        try:
            while True:
                self._batches.get_nowait()
        except queue.Empty:
            pass

    # -- the reader's thread ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            address = getattr(self._pgconn, "pgconn_ptr", None)  # not in the pq protocol class
            if address is None:
                raise psycopg.OperationalError("the replication connection is closed")
            while not self._stopping.is_set():
                self._send_outbox()
                frames, status = self._read(
                    address, self._max_frames, self._max_bytes, self._wait_ms, self._linger_us
                )
                if frames or status != STREAMING:
                    self._put((frames, status))
                if status != STREAMING:
                    return
        except BaseException as exc:  # reported to the pipeline as a connection failure
            self.error = exc
            self._put(([], FAILED))

    def _send_outbox(self) -> None:
        with self._outbox_lock:
            if not self._outbox:
                return
            pending, self._outbox = self._outbox, []
        pgconn = self._pgconn
        for message in pending:
            pgconn.put_copy_data(message)
        pgconn.flush()

    def _put(self, batch: tuple[list[bytes], int]) -> None:
        # A full queue: wait for the pipeline, still sending its status updates meanwhile
        # (the server ends a connection that reports nothing for wal_sender_timeout).
        while not self._stopping.is_set():
            try:
                self._batches.put(batch, timeout=self._wait_ms / 1000)
                return
            except queue.Full:
                if batch[1] == STREAMING:
                    self._send_outbox()

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"FrameReader(alive={self._thread.is_alive()}, queued={self._batches.qsize()})"
