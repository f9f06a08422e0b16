"""A run directory's layout: the names of its files, in one place, and the small reads and
writes of them that every entry point shares.

::

    <run dir>/
        config.yaml            the job's resolved config (without ``hydra``)
        data_summary.json      the data's summary (point ids, channels, splits)
        metrics.json           the results; written last, so it marks a finished run;
                               its files named relative to the run directory
        config_changes.yaml    settings changed on resuming (``allow_changes``)
        run.lock               the training that holds the directory
        diverged.json          where the last training stopped by diverging, if it did
        wandb_run_id.txt       the W&B run id, so a restarted job continues its W&B run
        checkpoints/           epoch_*.ckpt (the best), last.ckpt (the newest), checksums
        figures/               the test report's PNG files
        predictions.npz        the test's forecasts, targets, which were readings and
                               which scored, and the points' ids (module.save_predictions;
                               engine/saved_predictions.py)
        eval/<time>/           each evaluation's own directory
        .hydra/hydra.yaml      Hydra's record of the job (its config groups' choices)
        .replaced/<time>/      an earlier training's results, moved aside by a training
                               anew (rundir/replaced.py)
"""

from __future__ import annotations

import json
import os
import reprlib
import secrets
import string
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from cloudlstm.errors import UserError, replacing
from cloudlstm.rundir.holder import live_holder
from cloudlstm.rundir.metrics_json import metrics_text, restored_metrics

CONFIG_FILE = "config.yaml"
# The first and last lines of a config.yaml written by :func:`config_text`: a file that has
# the first and not the last is cut short, though what is left may still read as YAML
CONFIG_HEADER = "# The run's settings, resolved (the last line below them marks the file whole)."
CONFIG_END = "# End of the run's settings."
DATA_SUMMARY_FILE = "data_summary.json"
METRICS_FILE = "metrics.json"
CHANGES_FILE = "config_changes.yaml"
LOCK_FILE = "run.lock"
DIVERGED_FILE = "diverged.json"
WANDB_ID_FILE = "wandb_run_id.txt"
PROVENANCE_FILE = "provenance.jsonl"
CHECKPOINT_DIR = "checkpoints"
LAST_CHECKPOINT = "last.ckpt"
BEST_CHECKPOINTS = "epoch_*.ckpt"
# what Lightning saves in the run's own folder at SLURM's requeue signal (SIGUSR1)
HPC_CHECKPOINTS = "hpc_ckpt_*.ckpt"
# The checkpoints chosen by name (ckpt=best|last); any other ckpt is a file's path.
CHOSEN_CHECKPOINTS = ("best", "last")
FIGURES_DIR = "figures"
PREDICTIONS_FILE = "predictions.npz"  # written by the test (engine/module.py)
TRAIN_LOG = "train.log"  # train.py's log (conf/hydra/default.yaml: <task_name>.log), from its start
REPLACED_DIR = ".replaced"  # earlier trainings, moved aside (rundir/replaced.py)
EVAL_DIR = "eval"  # a run's evaluations by eval.py, one folder each (conf/eval.yaml)
# Hydra's record of a job, written as it starts: its config groups' choices (model, data)
# under hydra.runtime.choices, there also for a run killed before its metrics.json
HYDRA_FILE = ".hydra/hydra.yaml"
# conf/debug/default.yaml's task_name, which every debug=... config keeps: such runs check
# that the code runs, and compare leaves them out unless asked (--include-debug)
DEBUG_TASK = "debug"


def path_option(value: object, key: str, wanted: str = "<path>") -> str:
    """A path option's text as typed: Hydra reads ``run=0`` (a sweep's job folder) as the
    number 0, whose text is the same; any other value that is no text (``ckpt=true``,
    ``run=1e3``, read as 1000.0) is not the name typed.

    Raises:
        UserError: the value is neither text nor a whole number, or is empty (``run=``,
            which as a path would name the current folder).
    """
    if isinstance(value, str | os.PathLike):
        if not str(value).strip():
            raise UserError(f"{key}= is empty: give {key}={wanted}.")
        return str(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise UserError(
        f"{key}={value!r} was read as a {type(value).__name__}, not a path: quote it, "
        f"{key}='<path>'."
    )


def check_run_dir(run_dir: object) -> Path:
    """``run_dir`` as a path, checked to be a run directory (it has the run's config.yaml).

    Raises:
        UserError: it is no path (:func:`path_option`), does not exist, is a file, is a
            run starting (its training holds it and has not written its config yet), or is
            not a run directory.
    """
    run = Path(path_option(run_dir, "run", "<run dir>")).expanduser()
    if run.is_file() and (run.parent / CONFIG_FILE).is_file():  # run=<run>/config.yaml
        raise UserError(f"{run} is a file of a run: give its folder, run={run.parent}.")
    if run.exists() and not run.is_dir():
        raise UserError(f"{run} is a file, not a run directory: give a run's folder.")
    if not run.is_dir():
        raise UserError(f"Run directory {run} does not exist.")
    if not (run / CONFIG_FILE).is_file():
        if (run.parent / CONFIG_FILE).is_file():  # run=<run>/checkpoints, <run>/eval
            raise UserError(f"{run} is a folder of a run: give the run, run={run.parent}.")
        _check_not_starting(run)
        raise UserError(f"{run} is not a run directory: it has no {CONFIG_FILE}.{_runs_in(run)}")
    config = read_run_config(run)
    if config.get("task_name") == "eval":
        raise UserError(
            f"{run} is an evaluation of a run (eval.py's output), not a run: give the run it "
            f"evaluated, run={_evaluated_run(run, config)}."
        )
    return run


def _check_not_starting(run: Path) -> None:
    """Refuse, as a run starting, a folder without its ``config.yaml`` whose ``run.lock`` a
    live training holds: it takes the lock before it writes anything, and the config only
    once its data are read.

    Raises:
        UserError: naming the training's process, and the ways on.
    """
    holder = live_holder(run / LOCK_FILE)
    if holder is not None:
        raise UserError(
            f"{run} is a run starting: its training ({holder}) has not written its "
            f"{CONFIG_FILE} yet. Wait until it has written a checkpoint (at its first "
            "validation), or give another run."
        )


def _evaluated_run(evaluation: Path, config: DictConfig) -> Path:
    """The run an evaluation's folder (its ``config``) belongs to: the folder above its
    ``eval/`` (eval.py writes ``<run>/eval/<time>``), else the run its config names."""
    above = evaluation.parent.parent
    if evaluation.parent.name == EVAL_DIR and (above / CONFIG_FILE).is_file():
        return above
    return Path(str(config.get("run")))


def _runs_in(folder: Path, shown: int = 3) -> str:
    """`` It holds N run(s) (a, b, c, ...): give one, ...`` for a sweep's folder (run
    directories, a ``config.yaml`` beside a ``checkpoints/`` or, for a model without
    parameters, which writes none, a ``metrics.json``; one to three levels below, not in
    evaluations or hidden folders), else ``""``. Not deeper: a home folder given by
    mistake is not searched through."""
    configs = (c for depth in (1, 2, 3) for c in folder.glob("*/" * depth + CONFIG_FILE))
    runs = sorted(
        c.parent
        for c in configs
        if ((c.parent / CHECKPOINT_DIR).is_dir() or (c.parent / METRICS_FILE).is_file())
        and not any(
            part == EVAL_DIR or part.startswith(".") for part in c.relative_to(folder).parts
        )
    )
    if not runs:
        return ""
    names = ", ".join(str(r.relative_to(folder)) for r in runs[:shown])
    more = ", ..." if len(runs) > shown else ""
    return f" It holds {len(runs)} run(s) ({names}{more}): give one, e.g. run={runs[0]}."


def config_text(cfg: DictConfig) -> str:
    """A job's resolved config as its run's ``config.yaml`` holds it, between
    :data:`CONFIG_HEADER` and :data:`CONFIG_END`."""
    return f"{CONFIG_HEADER}\n{OmegaConf.to_yaml(cfg, resolve=True)}{CONFIG_END}\n"


def config_cut_short(path: Path) -> bool:
    """Whether the ``config.yaml`` at ``path`` begins as :func:`config_text` writes one and
    lacks its last line (a copy or a disk that stopped part way); older files, without the
    first line, are not judged."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return False
    return bool(lines) and lines[0] == CONFIG_HEADER and lines[-1] != CONFIG_END


def read_run_config(run: Path) -> DictConfig:
    """The ``config.yaml`` of run directory ``run``, as written (interpolations unresolved).

    Raises:
        UserError: it cannot be read, or is not a run's config: a mapping with its
            ``model`` and ``data`` nodes, whole (:func:`config_cut_short`; a damaged file,
            e.g. cut short by a full disk or a copy that stopped).
    """
    path = run / CONFIG_FILE
    try:
        cfg = OmegaConf.load(path)
    except OSError as err:
        raise UserError(f"Cannot read {path}: {err.strerror or err}.") from None
    except UnicodeDecodeError:
        problem = "it is not UTF-8 text"
    except (yaml.YAMLError, OmegaConfBaseException) as err:
        problem = "it is not valid YAML: " + " ".join(str(err).split())
    else:
        if config_cut_short(path):
            problem = f"it is cut short: its last line is not {CONFIG_END!r}"
        elif not isinstance(cfg, DictConfig):
            problem = "it is not a mapping"
        elif missing := [k for k in ("model", "data") if not isinstance(cfg.get(k), DictConfig)]:
            problem = f"it has no {' or '.join(missing)} node"
        else:
            return cfg
    raise UserError(
        f"{path} is not the config of a run ({problem}). Restore the file, or train the run "
        "again in a new directory."
    )


def last_checkpoint(run: Path) -> Path:
    """Where run directory ``run`` keeps its newest state, ``checkpoints/last.ckpt``."""
    return run / CHECKPOINT_DIR / LAST_CHECKPOINT


def resume_candidates(run_dir: Path) -> list[Path]:
    """The checkpoints of ``run_dir`` that ``resume=auto`` chooses from (those that exist):
    ``checkpoints/last.ckpt`` and SLURM's ``hpc_ckpt_<n>.ckpt``."""
    candidates = [last_checkpoint(run_dir), *run_dir.glob(HPC_CHECKPOINTS)]
    return [p for p in candidates if p.is_file()]


def written_checkpoints(run: Path) -> list[str]:
    """The checkpoints in run directory ``run``, by the names ``ckpt=`` takes: the files of
    ``checkpoints/`` by name, then SLURM's ``hpc_ckpt_<n>.ckpt`` in the run's own folder
    (found there by name too) by their number, the newest last."""
    kept = sorted(p.name for p in (run / CHECKPOINT_DIR).glob("*.ckpt") if p.is_file())
    hpc = sorted((p for p in run.glob(HPC_CHECKPOINTS) if p.is_file()), key=_hpc_number)
    return [*kept, *(p.name for p in hpc)]


def _hpc_number(path: Path) -> int:
    """The ``<n>`` of ``hpc_ckpt_<n>.ckpt``; -1 for a name without one."""
    number = path.stem.removeprefix("hpc_ckpt_")
    return int(number) if number.isdigit() else -1


def checkpoint_run(path: Path) -> Path | None:
    """The run directory whose training wrote checkpoint ``path``: the folder of
    ``<run>/checkpoints/<name>.ckpt`` or ``<run>/hpc_ckpt_<n>.ckpt`` that holds the run's
    ``config.yaml``; None for a checkpoint outside any run directory."""
    path = Path(os.path.abspath(Path(path).expanduser()))
    folder = path.parent.parent if path.parent.name == CHECKPOINT_DIR else path.parent
    return folder if (folder / CONFIG_FILE).is_file() else None


def newest_checkpoint(run_dir: Path) -> Path | None:
    """The newest of :func:`resume_candidates`, or None: the one of the latest training step
    (at a tie ``last.ckpt``, then the newer file), so that a run directory copied without
    its files' times (``cp -r``) keeps its order. Where one cannot be read, or holds no
    step, the newest by modification time (whose check then names the damage)."""
    candidates = resume_candidates(run_dir)
    steps = {p: checkpoint_step(p) for p in candidates}
    if None in steps.values():
        return max(candidates, key=lambda p: p.stat().st_mtime_ns, default=None)
    return max(
        candidates,
        key=lambda p: (steps[p], p.name == LAST_CHECKPOINT, p.stat().st_mtime_ns),
        default=None,
    )


def checkpoint_step(path: Path) -> int | None:
    """The ``global_step`` of a checkpoint, read without loading its tensors (None if it
    cannot be read, or holds none)."""
    import torch  # here: the module's other parts need no torch

    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except Exception:
        return None
    return checkpoint.get("global_step") if isinstance(checkpoint, dict) else None


def find_checkpoint(run: Path, ckpt: object) -> Path:
    """The checkpoint file ``ckpt`` (``"best"``, ``"last"``, a name in ``checkpoints/`` or a
    path) of run directory ``run``.

    ``best`` is the checkpoint the run was tested with (``metrics.json``), else the
    ``epoch_*.ckpt`` of ``checkpoints/`` (the best by the monitored metric); where
    ``metrics.json`` names one no longer there, it is refused (another file taken for it
    would be reported as the run's best). ``last`` is
    ``checkpoints/last.ckpt``, the final weights of the training
    (:mod:`cloudlstm.rundir.final_checkpoint`). Every one is looked for inside ``run``,
    wherever it was copied or moved.

    A message about one not there offers ``best`` or ``last`` only where that one is there
    and sound (:func:`other_sound`).

    Raises:
        UserError: there is no such checkpoint (the tested one gone, for ``best``; not
            written yet, by a training still running), or ``ckpt`` is no path
            (:func:`path_option`).
    """
    ckpt = path_option(ckpt, "ckpt", "best, last or the path of a .ckpt")
    if ckpt == "best":
        try:
            found, gone = _best(run)
        except UserError as err:
            raise damaged_for_best(err) from None
        if gone:
            raise UserError(_best_gone(run, gone))
    elif ckpt == "last":
        found = last_checkpoint(run)
    else:
        found = _named_checkpoint(Path(ckpt).expanduser(), run)
    if found is None or not found.is_file():
        raise UserError(_missing(run, ckpt))
    return found


def _best(run: Path) -> tuple[Path | None, str | None]:
    """``ckpt=best`` of run directory ``run``: ``(its file, None)``, the one its
    ``metrics.json`` says was tested, else the newest ``epoch_*.ckpt`` (None where it has
    none); or ``(None, tested)`` where the file names a tested checkpoint no longer there.

    Raises:
        UserError: its ``metrics.json`` is damaged (:func:`read_metrics`).
    """
    newest = newest_best(run)
    tested = (read_metrics(run) or {}).get("checkpoint")  # read once
    found = _tested_checkpoint(run, tested)
    if found is None and tested:
        return None, tested
    return found or newest, None


# how a message about a checkpoint not there ends, ``ways`` the run's others that are sound
GIVE_ANOTHER = "Give another: {ways}, a file's name in that folder or the path of a .ckpt file."


def _missing(run: Path, ckpt: str) -> str:
    """Why checkpoint ``ckpt`` (best, last, a name or a path) of ``run``, not there, is
    refused, offering the run's other checkpoints only where they are sound (:func:`other_sound`).

    Raises:
        UserError: a training still running holds ``run`` (:func:`_check_not_training`).
    """
    folder = run / CHECKPOINT_DIR
    have = _listed_checkpoints(folder)
    if ckpt in CHOSEN_CHECKPOINTS:
        _check_not_training(run, ckpt, written_checkpoints(run))
    if ckpt == "best" and resume_candidates(run):
        return _no_best(run, folder, have)
    return (
        f"No checkpoint {ckpt!r} in {run} ({folder} holds {have or 'no .ckpt files'}). "
        + other_sound(run, ckpt, GIVE_ANOTHER, missing=True)
    )


def _listed_checkpoints(folder: Path) -> list[str]:
    """The names of the ``.ckpt`` entries of ``folder``, sorted: what a message about a
    checkpoint not there says the folder holds (links whose file is gone among them)."""
    return sorted(p.name for p in folder.glob("*.ckpt"))


def newest_best(run: Path) -> Path | None:
    """The newest ``epoch_*.ckpt`` file in the ``checkpoints/`` of run directory ``run`` (the
    best by the monitored metric); None where it has none. Files alone: a link whose file
    is gone (a scratch area purged), or one a training removes as it saves a better one,
    is passed over."""

    def written(path: Path) -> int:
        try:
            return path.stat().st_mtime_ns
        except OSError:
            return -1

    times = {path: written(path) for path in (run / CHECKPOINT_DIR).glob(BEST_CHECKPOINTS)}
    files = [path for path, time in times.items() if time >= 0 and path.is_file()]
    return max(files, key=times.__getitem__, default=None)


def other_chosen(ckpt: object) -> str:
    """``ckpt=best, ckpt=last`` less the one ``ckpt`` is: the ways on that a message about
    a checkpoint missing or damaged offers (not ``ckpt=last`` for a missing last)."""
    return ", ".join(f"ckpt={c}" for c in CHOSEN_CHECKPOINTS if c != str(ckpt))


def other_sound(
    run: Path, ckpt: object, offer: str, missing: bool = False, damaged: Sequence[Path] = ()
) -> str:
    """What a message about checkpoint ``ckpt`` of ``run``, found damaged (or ``missing``),
    ends with: ``offer`` with its ``{ways}`` the checkpoints of :func:`other_chosen` that are
    there and sound (:func:`~cloudlstm.rundir.checkpoints.sound_checkpoint`: their hashing is
    paid here, once the one asked for is refused); where none is, that it is so and why
    (:func:`_chosen`), and the way on that is left: training the run again. ``damaged``:
    files the caller found not sound already, taken as such rather than hashed again (the
    hash of a sound file is kept, that of a damaged one is not)."""
    from cloudlstm.rundir.checkpoints import sound_checkpoint  # torch: on use

    given = _named_checkpoint(Path(str(ckpt)).expanduser(), run)
    ways, lacking = [], []
    for name in CHOSEN_CHECKPOINTS:
        if name == str(ckpt):
            continue
        path = _chosen(run, name)
        if isinstance(path, str):
            lacking.append(path)
        elif given is not None and path.resolve() == given.resolve():
            continue  # ckpt named this file by its path: the damaged one
        elif path not in damaged and sound_checkpoint(path):
            ways.append(f"ckpt={name}")
        else:
            lacking.append(f"{path.name} is damaged{'' if missing else ' too'}")
    if ways:
        return offer.format(ways=", ".join(ways))
    why = "; ".join(lacking) or "it has no other checkpoint"
    return (
        f"No other checkpoint of {run} is sound ({why}): train the run again (its training "
        "command with resume=never), or give the path of a .ckpt written by training."
    )


def _chosen(run: Path, name: str) -> Path | str:
    """Checkpoint ``name`` (best or last) of ``run``, or why there is none to offer, in a
    few words: a damaged ``metrics.json`` is named as such, as the best is unknown without
    it, not taken for a run without a best checkpoint."""
    gone = None
    if name == "last":
        found = last_checkpoint(run)
    else:
        try:
            found, gone = _best(run)
        except UserError:
            return (
                f"{run / METRICS_FILE} is damaged, so its best checkpoint is unknown until that "
                "file is restored from a copy"
            )
    if gone:
        return f"its best checkpoint, {gone}, is gone"
    if found is None or not found.is_file():
        return f"it has no {name} checkpoint"
    return found


def _named_checkpoint(given: Path, run: Path) -> Path | None:
    """The file ``given`` names: a path as it is, else one inside ``run``, else a name in
    its ``checkpoints/`` (``last.ckpt``, as the run's listing of that folder shows it)."""
    if given.is_absolute():
        return given
    places = (given, run / given, run / CHECKPOINT_DIR / given)
    return next((path for path in places if path.is_file()), None)


def _check_not_training(run: Path, ckpt: str, have: list[str]) -> None:
    """Where ``ckpt`` (best or last) is missing from a run whose training still runs,
    refuse it as not written yet, rather than as of a run that stopped or never trained:
    the first checkpoints come at the first validation, the best one only then. ``have``:
    the checkpoints written so far (:func:`written_checkpoints`), SLURM's
    ``hpc_ckpt_<n>.ckpt`` among them, which a requeued training may hold alone.

    Raises:
        UserError: a live training holds ``run`` and has written no checkpoint, for
            ``best`` none a validation chose (its last, or another by name, offered), or
            for ``last`` others alone (offered).
    """
    holder = live_holder(run / LOCK_FILE)
    if holder is None:
        return
    if not have:
        raise UserError(
            f"No checkpoint in {run} yet: its training ({holder}) is still running and writes "
            "its first at its first validation. Wait for that, or give another run."
        )
    if ckpt == "best" and resume_candidates(run):
        last = last_checkpoint(run).is_file()
        take = "with ckpt=last" if last else f"by name (ckpt={have[-1]})"
        raise UserError(
            f"No best checkpoint in {run} yet: its training ({holder}) is still running and "
            "has not validated yet, which chooses one. Wait for its first validation, or take "
            f"its weights so far {take}."
        )
    if ckpt == "last":  # written after the best at a validation, or by no callback of its
        best = ["ckpt=best"] if newest_best(run) is not None else []
        ways = " or ".join([*best, f"one of those by name (ckpt={have[-1]})"])
        raise UserError(
            f"No last checkpoint in {run} yet: its training ({holder}) is still running and "
            f"has written {', '.join(have)} so far. Take {ways}, or wait for its last.ckpt."
        )


def _no_best(run: Path, folder: Path, have: list[str]) -> str:
    """Why a run with weights to resume from has no best checkpoint, and the ways on:
    training on from them where one is sound (``resume=auto`` takes a SLURM
    ``hpc_ckpt_*.ckpt`` too), its last weights where they are sound; where none is, that
    it is so (:func:`other_sound`)."""
    from cloudlstm.rundir.checkpoints import sound_checkpoint  # torch: on use

    why = (
        f"No best checkpoint in {run} ({folder} holds {have or 'no .ckpt files'}): the run "
        "stopped before a validation chose one (killed, or shorter than one validation). "
    )
    candidates = resume_candidates(run)
    sound = [p for p in candidates if sound_checkpoint(p)]
    if not sound:  # last.ckpt is not sound either: other_sound says so, without hashing it again
        return why + other_sound(run, "best", GIVE_ANOTHER, missing=True, damaged=candidates)
    take_last = ", or take its last weights with ckpt=last" if last_checkpoint(run) in sound else ""
    return why + f"Train it on with its command and resume=auto{take_last}."


def _best_gone(run: Path, tested: str) -> str:
    """Why ``best`` of a run whose tested checkpoint (``tested``, as its ``metrics.json``
    names it) is no longer there is refused, rather than another ``epoch_*.ckpt`` taken for
    it, and the ways on: its last weights only where they are sound."""
    folder = run / CHECKPOINT_DIR
    have = _listed_checkpoints(folder)
    return (
        f"The best checkpoint of {run}, {tested} (the one its training tested, as its "
        f"metrics.json says), is gone: {folder} holds {have or 'no .ckpt files'}. "
        + other_sound(run, "best", GIVE_ANOTHER, missing=True)
    )


def _tested_checkpoint(run: Path, tested: str | None) -> Path | None:
    """The checkpoint ``tested`` that ``metrics.json`` says was tested, in this run
    directory wherever it is (None where it names none, or it is gone).

    ``metrics.json`` names it relative to the run directory (:func:`in_run`). An older one
    names it by its absolute path, which in a copied or moved run is the original's file:
    the file of that name in this run's ``checkpoints/`` comes first, that path only after.
    """
    if not tested:
        return None
    recorded = Path(tested)
    own = run / CHECKPOINT_DIR / recorded.name
    for path in (own, recorded) if recorded.is_absolute() else (run / recorded, own):
        if path.is_file():
            return path
    return None


def in_run(path: str | Path | None, run: Path) -> str | None:
    """``path`` as ``metrics.json`` records it: relative to the run directory ``run`` when
    it lies inside it (``checkpoints/epoch_003-step_000750.ckpt``), so that the record holds
    wherever the directory is copied or moved; else absolute. None stays None."""
    if path is None:
        return None
    given = Path(os.path.abspath(Path(path).expanduser()))
    for base in (Path(os.path.abspath(run)), Path(run).resolve()):
        for candidate in (given, given.resolve()):
            if candidate.is_relative_to(base):
                return candidate.relative_to(base).as_posix()
    return str(given)


# the entries of a run's metrics.json that eval.py and a forecast read, with their shape
READ_ENTRIES = {"run": (dict, "a mapping"), "checkpoint": (str, "a path")}


def read_metrics(run: Path) -> dict[str, Any] | None:
    """A run's ``metrics.json`` (:func:`load_metrics`); None before the run finished.

    Raises:
        UserError: the file is damaged, or an entry of :data:`READ_ENTRIES` is not of the
            shape train.py writes (a hand-edited file: it was a TypeError where read).
    """
    path = run / METRICS_FILE
    if not path.is_file():
        return None
    results = load_metrics(path)
    for key, (kind, wanted) in READ_ENTRIES.items():
        value = results.get(key)
        if value is not None and not isinstance(value, kind):
            raise UserError(_damaged(path, f"its {key} is {reprlib.repr(value)}, not {wanted}"))
    return results


def read_data_summary(run: Path) -> dict[str, Any] | None:
    """The data summary a run's training wrote (``data_summary.json``); None where it has
    none or it cannot be read: it only informs checks, which then have nothing to compare."""
    try:
        summary = json.loads((run / DATA_SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def load_metrics(path: Path) -> dict[str, Any]:
    """The results in the ``metrics.json`` at ``path`` (a run's, or an evaluation's).

    Raises:
        UserError: the file cannot be read, or is damaged (no JSON, cut short, or JSON
            that is no mapping), naming it and the ways out; this package writes it whole
            or not at all (:func:`write_metrics`), so a damaged one was damaged since.
    """
    try:
        text = path.read_bytes()
    except IsADirectoryError:
        raise UserError(
            f"{path} is a folder, where a run's results file belongs: move it away."
        ) from None
    except OSError as err:  # no permission to read it
        raise UserError(f"cannot read {path} ({err.strerror or err}): make it readable.") from None
    try:
        results = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(_damaged(path, f"not valid JSON: {err}")) from None
    if not isinstance(results, dict):
        raise UserError(_damaged(path, f"a JSON {type(results).__name__}, not a run's results"))
    return restored_metrics(results)


def damaged_for_best(err: UserError) -> UserError:
    """``err``, a run's damaged ``metrics.json`` (:func:`read_metrics`), for ``ckpt=best``,
    which takes the checkpoint the file names: with the checkpoints that need nothing of it."""
    return UserError(
        f"{err} Or test another checkpoint, which needs nothing of it: ckpt=last or the path "
        "of a .ckpt file."
    )


def _damaged(path: Path, problem: str) -> str:
    """The line of a damaged ``metrics.json`` at ``path``, with the way out: for an
    evaluation's (``<run>/eval/<time>/``), evaluating the run again, not training it."""
    evaluations = path.parent.parent
    if evaluations.name == EVAL_DIR and (evaluations.parent / CONFIG_FILE).is_file():
        again = (
            f"delete its folder and evaluate the run again, python eval.py "
            f"run={evaluations.parent} with that evaluation's overrides"
        )
    else:
        again = (
            "delete it and run the run's training command again, which tests the run again "
            "and writes a new one"
        )
    return (
        f"{path} is damaged ({problem}), so its test results cannot be read: restore it from "
        f"a copy, or {again}."
    )


def write_metrics(output_dir: Path, results: dict[str, Any]) -> Path:
    """``results`` as ``<output_dir>/metrics.json``; returns its path.

    Written beside it, then renamed over the old one (:func:`~cloudlstm.errors.replacing`):
    ``metrics.json`` marks a finished run, so a part of one must never be there.

    Raises:
        OutOfSpaceError: no room for it (a full disk, a quota, ``ulimit -f``); a training's
            checkpoints are intact, and the same command then tests it again and writes it.
    """
    path = Path(output_dir) / METRICS_FILE
    with replacing(path) as part:
        part.write_text(metrics_text(results))
    return path


# the characters W&B refuses in a run id
NOT_IN_A_WANDB_ID = ":;,#?/'"


def wandb_run_id(output_dir: Path, new: bool = False) -> str | None:
    """The run directory's W&B run id, created and stored on first call (or if ``new``).

    None on DDP ranks other than 0: only rank 0 opens the W&B run, and ranks that start at
    the same moment (SLURM) must not race to write different ids.

    Raises:
        UserError: the stored id is none W&B takes (a file edited or damaged).
    """
    # imported here: Hydra's plugin scan imports this module (through the run lock), and a
    # config error is reported before Lightning, which takes seconds to import, is needed
    from lightning.pytorch.utilities import rank_zero_only

    if rank_zero_only.rank != 0:
        return None
    path = output_dir / WANDB_ID_FILE
    if path.is_file() and not new:
        run_id = path.read_text(errors="replace").strip()
        if any(c in NOT_IN_A_WANDB_ID or c.isspace() or not c.isprintable() for c in run_id):
            raise UserError(
                f"{path} holds {run_id[:40]!r}, which is no W&B run id (W&B refuses spaces and "
                f"the characters {NOT_IN_A_WANDB_ID}): write the run's id into it, or delete "
                "the file to log to a new W&B run."
            )
        if run_id:
            return run_id
    # W&B's own format: 8 lowercase letters and digits
    run_id = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
    path.write_text(run_id + "\n")
    return run_id
