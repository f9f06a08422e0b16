"""Runs relative to a baseline model: ``compare ... --relative-to persistence``.

Each test metric of a run is divided by the same metric of the baseline's run on the same
data set and sample: the data set a table's rows are chosen within
(:mod:`cloudlstm.compare.datasets`: the data, and the settings that change the windows
tested, a held-out run's points and ``data.holdout_history`` included), the same draw of
held-out points and the same seed, or the baseline's one run on that data set where it ran
once (persistence, which no seed changes). A baseline that read other inputs
(``data.input_steps``, covariates) was scored on the same windows, and pairs. A row's cell
is then the mean ± std over seeds of these ratios, so what a draw makes easy or hard for
every model (which points are held out, say) cancels before the seeds are pooled. Below 1
an error is lower than the baseline's; PSNR, SSIM and coverage are better above 1.

The baseline is always a training run of the baseline model, never an ``eval.py`` re-test of
one (``--include-evals``): an evaluation row is over the same training run as the run it
re-tests, so an evaluation of the baseline itself shows how far its re-test moved from 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from cloudlstm.compare.datasets import tested_on
from cloudlstm.compare.runs import CompareError, Run
from cloudlstm.compare.settings import VALUES_DIGEST_KEY


def relative_runs(runs: Sequence[Run], baseline: str) -> tuple[list[Run], list[Run]]:
    """``(relative, unpaired)``: the runs with every test metric over the ``baseline``
    model's run of the same data and sample (the baseline's own at 1), and those without
    such a run, left out. A baseline run once for its data (persistence, which no seed
    changes) is every seed's. Only the baseline's training runs are baselines: an
    evaluation (``eval.py``'s re-test) is a row over them like any other run.

    Raises:
        CompareError: no training run is of the model ``baseline``, or two are of the same
            data and seed (other model settings, or the same run twice): which one every
            row would be divided by is not known.
    """
    bases: dict[tuple, list[Run]] = {}
    by_data: dict[tuple, list[Run]] = {}
    # an evaluation is no baseline: one found first (<run>/eval/ sorts before the run's own
    # metrics.json) put every row over the re-test's numbers, the training run's off 1
    for run in runs:
        if run.value("model") == baseline and not run.evaluated_run:
            same = bases.setdefault(pairing(run), [])
            if other := next((b for b in same if _digest(b) == _digest(run)), None):
                raise CompareError(_two_baselines(baseline, other, run))
            same.append(run)
            by_data.setdefault(pairing(run, seed=False), []).append(run)
    if not bases:
        raise CompareError(_no_baseline(runs, baseline))
    relative, unpaired = [], []
    for run in runs:
        base = _read_alike(run, bases.get(pairing(run), []))
        if base is None:
            once = by_data.get(pairing(run, seed=False), [])
            base = _read_alike(run, once) if len(once) == 1 else None
        if base is None:
            unpaired.append(run)
        else:
            relative.append(over(run, base))
    return relative, unpaired


def _digest(run: Run) -> str:
    """The hash of the readings ``run`` was tested on; empty for a run from before it."""
    return run.value(VALUES_DIGEST_KEY)


def _read_alike(run: Run, bases: Sequence[Run]) -> Run | None:
    """The one of ``bases`` (runs of ``run``'s data set but for the readings' hash) whose
    readings are ``run``'s: the same hash, or, where either recorded none (a run from
    before the hash), the only such base, as a table's rows share a data set with it."""
    same = [b for b in bases if _digest(b) == _digest(run)]
    if len(same) == 1:
        return same[0]
    unknown = [b for b in bases if not _digest(b) or not _digest(run)]
    return unknown[0] if len(unknown) == 1 and not same else None


def _two_baselines(baseline: str, first: Run, second: Run) -> str:
    """The error where two of ``baseline``'s runs are of the same data and seed."""
    return (
        f"--relative-to {baseline}: two of its runs, {first.path} and {second.path}, are of "
        f"the same data and seed (seed {first.value('seed')}), so which one the rows would "
        "be divided by is not known: give folders holding one of them"
    )


def _no_baseline(runs: Sequence[Run], baseline: str) -> str:
    """The error where ``baseline`` trained no run among ``runs``."""
    if any(run.value("model") == baseline for run in runs):
        return (
            f"--relative-to {baseline}: its runs here are evaluations (eval.py's re-tests) "
            "only; give the folders of its training runs too"
        )
    models = sorted({run.value("model") for run in runs})
    return (
        f"--relative-to {baseline}: no run of that model among the runs; their models: "
        f"{', '.join(models)}"
    )


def pairing(run: Run, seed: bool = True) -> tuple[tuple[str, str], ...]:
    """What a run and its baseline share: the data set, as the table's rows tell it
    (:func:`cloudlstm.compare.datasets.tested_on`) but the readings' hash, and (``seed``)
    the seed; a draw of held-out points (``data.holdout_seed``) always
    (:meth:`Run.sample`). A key one run lacks and another leaves empty is the same
    (:meth:`Run.value`): a source option added later at its empty default."""
    drawn = dict(run.sample(seed=seed))
    # the readings' hash is matched apart (_read_alike): a run from before it has none
    tested = {k: v for k, v in tested_on(run).items() if k != VALUES_DIGEST_KEY}
    return tuple(sorted({**tested, **drawn}.items()))


def over(run: Run, base: Run) -> Run:
    """``run`` with each test metric divided by ``base``'s; a metric ``base`` lacks, or has
    at 0, is left out (an empty cell). The validation score too, where both chose their
    checkpoints by the same one (persistence trains none: an empty cell)."""
    return replace(
        run,
        overall=_ratios(run.overall, base.overall),
        per_step={
            name: [
                a / b if b else math.nan for a, b in zip(steps, base.per_step[name], strict=True)
            ]
            for name, steps in run.per_step.items()
            if len(base.per_step.get(name) or ()) == len(steps)
        },
        groups={
            name: _ratios(values, base.groups[name])
            for name, values in run.groups.items()
            if name in base.groups
        },
        pooled=_ratios(run.pooled, base.pooled),
        channels={
            name: _ratios(values, base.channels[name])
            for name, values in run.channels.items()
            if name in base.channels
        },
        val_score=_val_ratio(run, base),
    )


def _ratios(values: dict[str, float], base: dict[str, float]) -> dict[str, float]:
    return {name: value / base[name] for name, value in values.items() if base.get(name)}


def _val_ratio(run: Run, base: Run) -> float | None:
    """``run``'s validation score over ``base``'s, where both have one of the same metric."""
    same = run.val_monitor is not None and run.val_monitor == base.val_monitor
    if not same or run.val_score is None or not base.val_score:
        return None
    return run.val_score / base.val_score
