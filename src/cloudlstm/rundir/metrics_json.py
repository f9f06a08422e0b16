"""``metrics.json`` in standard JSON, its numbers that are not finite included.

A metric can be NaN (a channel with no observed value to score) or infinite (the PSNR of a
forecast without error, the peak of a part with no reading: ``-Infinity``). Python's
``json`` writes these as bare ``NaN`` and ``Infinity``, which no other JSON reader takes
(jq, browsers, JavaScript, most languages' parsers). So the file writes NaN as ``null``, as
pandas and W&B do, and the infinities as the strings ``"Infinity"`` and ``"-Infinity"``,
and reading turns them back into floats where every value is a metric: the ``val`` and
``test`` parts. A ``null`` elsewhere (``resumed_from``, ``checkpoint``) stays None. Files
written before, with bare ``NaN``, read as they always did.
"""

from __future__ import annotations

import json
import math
from typing import Any

METRIC_PARTS = ("val", "test")
"""The parts of ``metrics.json`` whose every leaf is a metric (a number or a list of them)."""

INFINITIES = {"Infinity": math.inf, "-Infinity": -math.inf}


def metrics_text(results: dict[str, Any]) -> str:
    """``results`` as the text of a ``metrics.json``: standard JSON, indented."""
    return json.dumps(_standard(results), indent=2, allow_nan=False)


def _standard(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: _standard(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_standard(item) for item in value]
    return value


def restored_metrics(results: dict[str, Any]) -> dict[str, Any]:
    """``results`` as read from a ``metrics.json``, with the metrics that were NaN or
    infinite floats again. A part that is null as a whole (``"test": null``, a run that was
    never tested) stays None: only the metrics inside a part were numbers."""
    return {
        key: _floats(value) if key in METRIC_PARTS and value is not None else value
        for key, value in results.items()
    }


def _floats(value: Any) -> Any:
    if value is None:
        return math.nan
    if isinstance(value, str) and value in INFINITIES:
        return INFINITIES[value]
    if isinstance(value, dict):
        return {key: _floats(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_floats(item) for item in value]
    return value
