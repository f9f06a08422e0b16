"""A test's results as Lightning returns them.

The test results are a nested dict (:meth:`ForecastMetrics.compute`: per step, per
channel, per point group). Lightning's ``trainer.test()`` returns the scalars the module
logged, so the module logs every number of the results under one reserved prefix
(:func:`results_scalars`) and the caller rebuilds the dict from what ``trainer.test()``
returned (:func:`results_from`). The numbers are logged as float64 tensors with a batch
size of 1, which Lightning hands back unchanged, so the rebuilt dict equals the computed
one bit for bit.

The loggers of ``conf/logger/`` leave the reserved keys out (:func:`without_results`):
they are the return value's, not curves to plot.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

RESULTS_PREFIX = "test_results:"


def results_scalars(results: Mapping[str, Any]) -> dict[str, Tensor]:
    """Every number of ``results`` (nested dicts and lists of floats and ints) as a float64
    scalar tensor, keyed by :data:`RESULTS_PREFIX` and its path and type as JSON."""
    scalars: dict[str, Tensor] = {}

    def walk(node: Any, path: list[str | int]) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                walk(value, [*path, str(key)])
        elif isinstance(node, list | tuple):
            for index, value in enumerate(node):
                walk(value, [*path, index])
        else:
            kind = "int" if isinstance(node, int) else "float"
            key = RESULTS_PREFIX + json.dumps([path, kind])
            scalars[key] = torch.tensor(float(node), dtype=torch.float64)

    walk(results, [])
    return scalars


def results_from(returned: list[Mapping[str, float]]) -> dict[str, Any]:
    """The nested results rebuilt from ``trainer.test()``'s return value (one dict per
    test loader; one loader here).

    Raises:
        ValueError: the return value holds no results (the module logged none).
    """
    logged = returned[0] if returned else {}
    root: dict[str, Any] = {}
    found = False
    for key, value in logged.items():
        if not key.startswith(RESULTS_PREFIX):
            continue
        found = True
        path, kind = json.loads(key.removeprefix(RESULTS_PREFIX))
        _place(root, path, int(value) if kind == "int" else float(value))
    if not found:
        raise ValueError("trainer.test() returned no test results")
    return _lists(root)


def _place(root: dict, path: list[str | int], value: float | int) -> None:
    """Set ``value`` at ``path`` in nested dicts (a list's index as a key for now)."""
    node = root
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value


def _lists(node: Any) -> Any:
    """Dicts keyed by list indices (ints) turned back into lists, in index order."""
    if not isinstance(node, dict):
        return node
    if node and all(isinstance(key, int) for key in node):
        return [_lists(node[i]) for i in range(len(node))]
    return {key: _lists(value) for key, value in node.items()}


def without_results(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``metrics`` less the results' keys: what a logger writes."""
    return {key: value for key, value in metrics.items() if not key.startswith(RESULTS_PREFIX)}
