"""The split geometry: where a stream's train / val / test parts lie in time, which steps a
window's input reads, and how many windows each part holds.

The parts are chronological (:func:`split_bounds`); each part's targets stay inside it, while
validation and test inputs may reach back into the part before (:func:`window_ranges`). A
window's input is the ``M`` steps before its first target step, or the paper's seasonal
input (:func:`seasonal_offsets`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np

from cloudlstm.data.pipeline.windows import contiguous_offsets, count_windows
from cloudlstm.errors import UserError

log = logging.getLogger(__name__)

__all__ = [
    "SPLITS",
    "check_split_lengths",
    "seasonal_input_offsets",
    "seasonal_offsets",
    "split_bounds",
    "warn_unread_points",
    "window_counts",
    "window_ranges",
]

SPLITS = ("train", "val", "test")


def split_bounds(
    num_steps: int, val_fraction: float, test_fraction: float
) -> dict[str, tuple[int, int]]:
    """Chronological ``[start, end)`` time ranges of the train / val / test parts.

    The test part is the last ``round(test_fraction * T)`` steps; validation is the last
    ``round(val_fraction * (T - n_test))`` steps of the rest; training is what is left.
    """
    n_test = int(round(test_fraction * num_steps))
    n_trainval = num_steps - n_test
    n_val = int(round(val_fraction * n_trainval))
    n_train = n_trainval - n_val
    return {
        "train": (0, n_train),
        "val": (n_train, n_trainval),
        "test": (n_trainval, num_steps),
    }


def window_ranges(
    bounds: Mapping[str, tuple[int, int]], history: int
) -> dict[str, tuple[int, int]]:
    """The ``[first, end)`` time range each split's windows are cut from.

    Targets stay inside the split (``bounds``). The inputs of validation and test windows
    reach up to ``history`` steps back into the part before: they were observed before the
    forecast time, as a deployed model would have them (the scaler stays fitted on the
    training part alone). So a split needs only J steps, not history + J (the paper's
    seasonal protocol: 6.8 days of validation under a 7-day input window), and every input
    form scores the same target windows. Training inputs cannot start before step 0.
    """
    return {
        split: (start if split == "train" else max(start - history, 0), end)
        for split, (start, end) in bounds.items()
    }


def window_counts(
    window_bounds: Mapping[str, tuple[int, int]], history: int, output_steps: int, stride: int
) -> dict[str, int]:
    """The windows each split holds, cut from its ``window_bounds`` (:func:`window_ranges`)
    with inputs reaching ``history`` steps back, J = ``output_steps`` targets and ``stride``."""
    return {
        split: count_windows(end - first, history, output_steps, stride)
        for split, (first, end) in window_bounds.items()
    }


def check_split_lengths(
    bounds: Mapping[str, tuple[int, int]],
    window_bounds: Mapping[str, tuple[int, int]],
    history: int,
    output_steps: int,
    optional: set[str],
    stream_name: str,
    num_steps: int,
    history_words: str = "input_steps",
) -> None:
    """A ``UserError`` when a split holds no window; the ``optional`` splits (those given a
    zero fraction) may hold none.

    Args:
        bounds: where each split's targets lie (:func:`split_bounds`).
        window_bounds: where its windows lie (:func:`window_ranges`).
        history: H, the steps a window's input reaches back.
        output_steps: J.
        optional: the splits that may be empty.
        stream_name, num_steps: the stream's name and T, for the message.
        history_words: what makes up H, named in the message (the seasonal input's days
            beside ``input_steps``).
    """
    span = history + output_steps
    for split, (first, end) in window_bounds.items():
        start = bounds[split][0]
        if end - first >= span or split in optional:
            continue
        need = _window_need(split, start, history, output_steps, history_words)
        raise UserError(
            f"PointCloudDataModule: the {split} part of stream '{stream_name}' has "
            f"{end - start} steps (of T={num_steps}), but one window needs {need}. Use a "
            "longer stream, shorter windows, or different val/test fractions or "
            "data.split_times."
        )


def _window_need(
    split: str, before: int, history: int, output_steps: int, history_words: str
) -> str:
    """What one window of ``split`` needs of its own steps, for :func:`check_split_lengths`:
    a validation or test window's inputs reach back into the ``before`` steps of the part
    before it, where there are enough of them; the training part (and a part with fewer
    steps before it than the history) holds its inputs itself."""
    span = history + output_steps
    whole = (
        f"its history + output_steps = {history} + {output_steps} = {span} (the history a "
        f"window reaches back: {history_words})"
    )
    if split == "train":
        return whole
    if before >= history:
        return f"output_steps = {output_steps} (its inputs reach back into the part before)"
    if before == 0:
        return f"{whole}, all in this part: no part before it holds its inputs"
    return (
        f"{whole}, of which the {before} step(s) before this part hold only part of the "
        f"inputs: {span - before} steps in this part"
    )


# Steps read at a time where a split's observed targets are looked for: a memory-mapped
# mask is read only until the first observed value.
_MASK_CHUNK_STEPS = 256


def check_observed_targets(
    mask: np.ndarray,
    bounds: Mapping[str, tuple[int, int]],
    num_targets: int,
    splits: list[str],
    stream_name: str,
    filled: float,
    timestamps: np.ndarray | None = None,
) -> None:
    """A ``UserError`` when one of ``splits`` has no observed target value: its steps lie
    in a gap of the data, so every target is a filled one, which a run with
    ``data.score_filled=false`` neither trains on nor scores: its loss or scores would be
    empty (a NaN validation MAE that selects no checkpoint).

    Args:
        mask: ``(T, N, C)`` True where a value was observed; the first ``num_targets``
            channels are the forecast ones.
        bounds: where each split's targets lie (:func:`split_bounds`).
        splits: the splits that hold windows.
        stream_name, filled, timestamps: the stream's name, filled fraction and ``(T,)``
            times (None: it has none), for the message.
    """
    for split in splits:
        first, end = bounds[split]
        if any(
            mask[t : min(t + _MASK_CHUNK_STEPS, end), :, :num_targets].any()
            for t in range(first, end, _MASK_CHUNK_STEPS)
        ):
            continue
        raise UserError(
            f"PointCloudDataModule: the {split} part of stream '{stream_name}' "
            f"({_steps_text(first, end, timestamps)}) has no observed value of a forecast "
            f"channel, only values filled across a gap ({100 * filled:.1f}% of the stream is "
            "filled), so it has nothing to train on or score. Put the parts where there are "
            "readings (data.split_times), or score the filled values too (data.score_filled=true)."
        )


# what a point without an observed target in a part means there, by (training part?, score_filled)
_UNREAD_EFFECT = {
    (False, False): "They are not scored there: the {split} scores cover the other points.",
    (False, True): "Their filled values are scored there as if read (data.score_filled=true), "
    "which favours a model that repeats their last reading.",
    (True, False): "No training target of theirs counts, so a model with weights of each "
    "point's own (node embeddings) never fits them.",
    (True, True): "Training fits their filled values as if read (data.score_filled=true).",
}


def warn_unread_points(
    mask: np.ndarray,
    bounds: Mapping[str, tuple[int, int]],
    num_targets: int,
    splits: list[str],
    point_ids: list[str],
    stream_name: str,
    score_filled: bool,
    timestamps: np.ndarray | None = None,
) -> None:
    """One warning per part of ``splits`` naming the points without an observed value of a
    forecast channel in any of its steps (they fell silent, or had not started): every value
    of theirs there is a filled one. Unwarned, a test table would hide that it scores fewer
    points (``score_filled=false``) or scores invented values (``score_filled=true``), and a
    model fitting each point's own weights would never see those points' readings.

    Args:
        mask: ``(T, N, C)`` True where a value was observed; the first ``num_targets``
            channels are the forecast ones.
        bounds: where each split's targets lie (:func:`split_bounds`).
        point_ids: the ``N`` points' ids, for the message.
    """
    for split in splits:
        first, end = bounds[split]
        seen = np.zeros(mask.shape[1], dtype=bool)  # (N,)
        for t in range(first, end, _MASK_CHUNK_STEPS):  # memory-mapped masks: a chunk at a time
            seen |= mask[t : min(t + _MASK_CHUNK_STEPS, end), :, :num_targets].any(axis=(0, 2))
        if seen.all() or not seen.any():  # none unread, or check_observed_targets' case
            continue
        names = [str(p) for p, s in zip(point_ids, seen, strict=True) if not s]
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        effect = _UNREAD_EFFECT[split == "train", score_filled].format(split=split)
        log.warning(
            "PointCloudDataModule: %d of the %d points of stream '%s' have no observed value of "
            "a forecast channel in the %s part (%s): %s. Their values there are filled ones. %s",
            len(names),
            len(seen),
            stream_name,
            split,
            _steps_text(first, end, timestamps),
            shown,
            effect,
        )


def _steps_text(first: int, end: int, timestamps: np.ndarray | None) -> str:
    """The text 'steps [first, end)', with their first and last times when there are any."""
    if timestamps is None:
        return f"steps [{first}, {end})"
    first_time, last_time = (
        np.datetime_as_string(timestamps[t].astype("datetime64[m]")).replace("T", " ")
        for t in (first, end - 1)
    )
    return f"steps [{first}, {end}), {first_time} to {last_time}"


def seasonal_offsets(
    recent_steps: int, steps_per_day: int, days: float = 7, every_minutes: float = 120
) -> np.ndarray:
    """Input offsets of the paper's seasonal input: a sub-sampled week, then the recent steps.

    The paper concatenates the last 30 minutes (6 five-minute steps) with a 7-day window
    sampled every 2 h (84 steps), giving 90 input steps. Offsets are relative to the first
    forecast step: ``-span, -span + every, ..., -every`` (``span = days`` in steps,
    ``every = every_minutes`` in steps), then ``-recent_steps, ..., -1``. Both parts are kept
    whole even where they overlap (as the paper's concatenation does), so
    ``M = recent_steps + days * 1440 / every_minutes``.
    """
    every = steps_per_day * every_minutes / 1440.0
    span = days * steps_per_day
    if (
        every < 1
        or abs(every - round(every)) > 1e-9
        or abs(span / every - round(span / every)) > 1e-9
    ):
        raise UserError(
            f"seasonal input: a step is {1440 / steps_per_day:g} minutes, so "
            f"seasonal_every_minutes={every_minutes:g} and seasonal_days={days:g} must be whole "
            "multiples of it (and the window a whole number of samples)."
        )
    every, span = int(round(every)), int(round(span))
    week = np.arange(-span, 0, every, dtype=np.int64)
    return np.concatenate([week, contiguous_offsets(recent_steps)])


def seasonal_input_offsets(
    recent_steps: int, steps_per_day: int | None, seasonal: tuple[float, float], stream_name: str
) -> np.ndarray:
    """:func:`seasonal_offsets` of a stream with ``steps_per_day`` steps a day, ``seasonal``
    being ``(days, every_minutes)``.

    Raises:
        UserError: the stream's sampling period is unknown (``steps_per_day`` None).
    """
    if steps_per_day is None:
        raise UserError(
            f"PointCloudDataModule: seasonal=true needs the sampling period of stream "
            f"'{stream_name}', but it has no timestamps or step_minutes metadata."
        )
    return seasonal_offsets(recent_steps, steps_per_day, *seasonal)
