"""A Ctrl-C pressed before training starts, noted, so that training does not start after it.

Until training's own handler takes over (:class:`cloudlstm.engine.signals.SignalsTogether`),
the programs answer Ctrl-C with :func:`note_and_interrupt`: Python's ``KeyboardInterrupt``,
which stops them wherever they are (checking the command, reading the data). CPython can
lose that exception: raised while a ``__eq__`` or ``__hash__`` written in Python runs for a
C function that clears errors (a dict look-up by the older C API, as in composing a config),
it is dropped and the program goes on. The press is noted here too, so that training, as it
is set up, stops instead of starting (:func:`pressed_before_training`).

The standard library only: the programs install the handler before torch is imported.
"""

from __future__ import annotations

from typing import Any

_pressed = False


def note_and_interrupt(signum: int, frame: Any) -> None:
    """The programs' SIGINT handler until training: note the press, then interrupt."""
    global _pressed
    _pressed = True
    raise KeyboardInterrupt


def forget() -> None:
    """A program starts: no press noted yet."""
    global _pressed
    _pressed = False


def pressed() -> bool:
    """Whether a Ctrl-C was noted since :func:`forget`, the note kept."""
    return _pressed


def pressed_before_training() -> bool:
    """Whether a Ctrl-C was noted since :func:`forget`; asking forgets it."""
    global _pressed
    pressed, _pressed = _pressed, False
    return pressed
