"""A program whose reader left: ``train.py --help | head -1``,
``python -m cloudlstm.cli.compare outputs/... | head``."""

from __future__ import annotations

import logging
import os
import select
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def reader_may_leave() -> Iterator[None]:
    """Within the block, a write to a stdout whose reader left stops the program quietly,
    with status 1, as ``yes | head`` does.

    Nothing more can be said, and there is nowhere to say it: stdout then goes to /dev/null
    so that its flush at exit fails no more. A broken pipe of anything else is a bug, and
    keeps its traceback.
    """
    try:
        try:
            yield
        finally:  # a block that ends in SystemExit too: flushed here, not at exit
            sys.stdout.flush()
    except BrokenPipeError:
        if not stdout_reader_gone():
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None


def stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reading end is closed (poll says POLLERR)."""
    poller = select.poll()
    poller.register(sys.stdout.fileno(), select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


class ConsoleHandler(logging.StreamHandler):
    """The console's log handler (``conf/hydra/default.yaml``): a line written to a stdout
    whose reader left raises its ``BrokenPipeError`` for :func:`reader_may_leave` to end
    the program, where logging would print a traceback of it for every later line and go on.
    """

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        error = sys.exc_info()[1]
        if isinstance(error, BrokenPipeError) and self.stream is sys.stdout:
            raise error
        super().handleError(record)
