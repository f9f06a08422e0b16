"""Argument types of the command-line tools (``argparse``): a bad value is argparse's one
line (``error: argument --epochs: 0 is below 1``), never a traceback further in."""

from __future__ import annotations

import argparse
import math


def at_least_one(text: str) -> int:
    """A count or size option: a whole number >= 1."""
    return _whole_number(text, minimum=1)


def at_least_zero(text: str) -> int:
    """A seed or an index option: a whole number >= 0."""
    return _whole_number(text, minimum=0)


def _whole_number(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{value} is below {minimum}")
    return value


def positive_number(text: str) -> float:
    """An amount option (seconds, megabytes): a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} is not a number above 0")
    return value
