"""``--uncalibrated``: the quantile metrics of runs before their conformal calibration.

A run trained with ``module.calibrate=conformal`` reports its calibrated quantiles' metrics
(``crps``, ``coverage80``, ...) in ``metrics.json``'s ``test`` and those of the quantiles
before calibration in ``test.uncalibrated`` (overall, per step, per channel, and per point
group). With ``--uncalibrated`` compare reads the latter in their place, so the same command
prints the table before and after calibration; runs without them keep their own values. A
run from before the groups were scored uncalibrated shows no group quantile metric then,
rather than its calibrated one among the uncalibrated cells. Where no run was calibrated,
``--uncalibrated`` is refused: the table would be the one without it, passed off as the
forecast before calibration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from cloudlstm.compare.runs import CompareError, Run, uncalibrated_results
from cloudlstm.rundir.layout import METRICS_FILE


def all_before_calibration(runs: Sequence[Run]) -> list[Run]:
    """``runs`` with :func:`before_calibration`'s metrics.

    Raises:
        CompareError: no run was calibrated (none has ``test.uncalibrated``), or one holds a
            part of another type.
    """
    swapped = [before_calibration(run) for run in runs]
    if any(new is not old for new, old in zip(swapped, runs, strict=True)):
        return swapped
    raise CompareError(
        "--uncalibrated: no run was calibrated (module.calibrate=conformal), so their "
        "forecasts have no other metrics before calibration: leave out --uncalibrated"
    )


def before_calibration(run: Run) -> Run:
    """``run`` with its quantile metrics replaced by those before calibration, where its
    ``metrics.json`` has them.

    Raises:
        CompareError: its ``test.uncalibrated`` holds a part of another type.
    """
    raw = uncalibrated_results(run.path / METRICS_FILE)
    if raw is None:
        return run
    channels = {
        name: {**values, **raw["channels"].get(name, {})} for name, values in run.channels.items()
    }
    swapped = set(raw["overall"])  # the quantile metrics
    groups = {
        name: {
            **{m: v for m, v in values.items() if m not in swapped},
            **raw["groups"].get(name, {}),
        }
        for name, values in run.groups.items()
    }
    return replace(
        run,
        overall={**run.overall, **raw["overall"]},
        per_step={**run.per_step, **raw["per_step"]},
        channels=channels,
        groups=groups,
    )
