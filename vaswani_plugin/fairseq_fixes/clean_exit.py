"""A run that ends on time exits 0: stop fairseq 0.12's data-loading threads before Python exits.

fairseq's `BufferedIterator` fills a queue of `--data-buffer-size` batches (default 10) from a
daemon thread, `BackgroundConsumer`, that runs the collater (torch operations) ahead of the
trainer. When training stops while that thread is still collating (`--max-update`,
`--stop-time-hours`, a short epoch), Python's shutdown halts daemon threads where they next take
the interpreter lock; inside torch's C++ that aborts the process with "terminate called without an
active exception" (SIGABRT: exit status 134, or -6 to a parent) after everything was saved and
logged, so a script or CI job that checks the status fails on a run that succeeded. How often
depends on timing (the suite's CI met it once, in a one-update fairseq-train run; a queue filled
by slow batches meets it every time).

When the plugin is loaded, an exit handler, run before daemon threads are halted, lets each such
thread finish the batch in hand and end: its length is cut to what it has produced, and its queue
is drained so that a full queue cannot block its last put. A source that never yields (a dead
DataLoader worker) is given up on after `GIVE_UP_SECONDS`, leaving fairseq's behaviour.
"""
import atexit
import queue
import threading
import time

from fairseq.data.iterators import BackgroundConsumer

GIVE_UP_SECONDS = 60.0


def stop_background_consumers(give_up_seconds: float = GIVE_UP_SECONDS):
    """End every live `BackgroundConsumer` after the item it is producing."""
    deadline = time.monotonic() + give_up_seconds
    for thread in threading.enumerate():
        if not isinstance(thread, BackgroundConsumer):
            continue
        thread._max_len = 0  # its loop ends once count >= _max_len, checked after each put
        while thread.is_alive() and time.monotonic() < deadline:
            try:
                thread._queue.get(timeout=0.05)
            except queue.Empty:
                pass


atexit.register(stop_background_consumers)
