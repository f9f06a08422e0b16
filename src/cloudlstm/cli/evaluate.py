"""Evaluation entry point: a trained run, its checkpoint and overrides -> test metrics, figures.

``eval.py`` and ``cloudlstm-eval`` (:mod:`cloudlstm.cli.scripts`) put the run directory on
Hydra's search path (:func:`~cloudlstm.cli.eval_args.with_run_config`) and run
:func:`evaluate` through Hydra: ``conf/eval.yaml`` builds on the run's ``config.yaml``, so
the data and the model are rebuilt as the run built them, changed only by the command-line
overrides. Every mistake (no such run or checkpoint, a corrupt checkpoint, a checkpoint
that does not fit the data or the model) is a :class:`~cloudlstm.errors.UserError`: one
line, no traceback.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, open_dict

from cloudlstm.assembly.assemble import assemble, read_evaluated
from cloudlstm.assembly.batch_limits import processes
from cloudlstm.assembly.build import check_devices, check_process_settings, configure_process
from cloudlstm.assembly.checkpoint_fit import TrainedCheckpoint
from cloudlstm.assembly.evaluated_data import (
    check_same_file,
    check_same_units,
    check_units_and_graph_settings,
    own_file_not_found,
    points_within,
    warn_other_inputs,
    warn_test_seen,
)
from cloudlstm.assembly.known_keys import check_known_keys
from cloudlstm.assembly.run_checkpoint import check_run_checkpoint
from cloudlstm.assembly.source_options import saved_url_left_out
from cloudlstm.cli.process_group import launched_processes
from cloudlstm.cli.sigterm_at_start import line_by_file
from cloudlstm.engine.ddp_launch import ddp_launch_undone
from cloudlstm.engine.results import results_from
from cloudlstm.engine.signals import ctrl_c_kept
from cloudlstm.errors import MissingFileError, UserError
from cloudlstm.models.build import count_parameters
from cloudlstm.report import add_test_report
from cloudlstm.report.cost import reset_cpu_peak, reset_gpu_peak
from cloudlstm.rundir.layout import (
    CHOSEN_CHECKPOINTS,
    METRICS_FILE,
    check_run_dir,
    damaged_for_best,
    find_checkpoint,
    in_run,
    read_data_summary,
    read_metrics,
    read_run_config,
    write_metrics,
)
from cloudlstm.rundir.lock import training_holder
from cloudlstm.rundir.old_configs import current_config
from cloudlstm.rundir.preemption import stopped_by_ctrl_c
from cloudlstm.rundir.provenance import this_process
from cloudlstm.rundir.stops import CTRL_C_EXIT_CODE, EXIT_CODE, RunInterrupted

log = logging.getLogger(__name__)


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    """Test a run's checkpoint (``cfg.ckpt``) on the data of ``cfg``; returns what is written
    to ``<output dir>/metrics.json``.

    The run's config may be older than this code: it is read as that run was built (old
    class paths renamed, older data nodes in today's form), as a copy, once.
    """
    cfg = current_config(cfg)
    check_process_settings(cfg)  # first: data.holdout_seed and others interpolate the seed
    check_known_keys(cfg)
    configure_process(cfg)
    reset_cpu_peak()  # the cost's peak RSS is this test's, its data's load included
    _one_process_without_ddp(cfg)
    L.seed_everything(cfg.seed, workers=True)
    run = check_run_dir(cfg.run)
    run_results = _run_results(run, cfg.ckpt)  # read once, before the test (minutes)
    training = _still_training(run, cfg.ckpt)
    # units and graph the config already changes: refused before the data load (minutes)
    run_cfg = current_config(read_run_config(run))
    check_units_and_graph_settings(run_cfg, cfg, _overrides(), run)
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    path = _checkpoint(run, cfg.ckpt, run_results)
    log.info("Evaluating %s", path or f"{run} (a model without parameters: no checkpoint)")
    recorded = in_run(path, run)  # relative to the run where it lies inside it
    if recorded is not None and Path(recorded).is_absolute():
        log.warning(
            "%s lies outside %s: its weights are tested with that run's config and data, "
            "and the results are kept with that run",
            path,
            run,
        )
    trained = None if path is None else read_evaluated(path, cfg.ckpt, run)
    if trained is not None:  # before the data load (minutes): results filed under the run
        check_run_checkpoint(run, run_cfg, trained, "test results")
    trained_data = read_data_summary(run)
    try:
        built = saved_url_left_out(cfg, _overrides())  # the run's url is not the command's
        job = assemble(built, output_dir, checkpoint=trained, with_loggers=False)
    except MissingFileError as err:
        own = own_file_not_found(trained_data, cfg.data.get("source"), _overrides())
        if own is None:
            raise
        raise own from err
    check_same_file(trained_data, job.summary, _overrides())
    check_same_units(trained_data, job.summary, _overrides(), run)
    warn_other_inputs(trained_data, job.summary)
    within = points_within(job.datamodule.stream.point_ids, job.trained_points)
    test_seen = warn_test_seen(trained_data, job.summary, within)
    reset_gpu_peak()  # the cost's peak GPU memory is this test's, not an earlier job's
    start = time.perf_counter()
    try:
        with ctrl_c_kept(), ddp_launch_undone():
            # verbose=False: the short summary of report.add_test_report, not Lightning's
            returned = job.trainer.test(job.module, datamodule=job.datamodule, verbose=False)
    except SIGTERMException:
        # Lightning's stop (SIGTERM, or Ctrl-C through SignalsTogether) is a SystemExit of
        # status 0: this evaluation did not finish, and says so with the signal's status
        raise evaluation_stopped(job.trainer, output_dir) from None
    except SystemExit:
        # a second Ctrl-C, or one as the test begins (before SignalsTogether's hold):
        # Lightning's shutdown at once ends in sys.exit(1)
        if not stopped_by_ctrl_c(job.trainer):
            raise
        raise evaluation_stopped(job.trainer, output_dir) from None
    results: dict[str, Any] = {
        "run": run_results.get("run"),  # name, group, tags (none before it finished)
        "run_dir": str(run),
        "checkpoint": recorded,
        # where the training of a checkpoint from outside the run wrote (a copy's origin)
        "checkpoint_trained_in": _trained_in(trained, recorded),
        "overrides": _overrides(),
        "num_params": count_parameters(job.model),
        "data": job.summary,
        "test_seen_in_training": test_seen,  # the test part overlaps the run's train or val
        "run_still_training": training,  # the weights so far, of a training not ended
        "test_time_s": time.perf_counter() - start,
        "test": results_from(returned),
        "provenance": [this_process(job.trainer)],
    }
    if job.trainer.is_global_zero:
        training_run = results["run"] or {}
        add_test_report(
            cfg,
            training_run.get("model") or job.run["model"],
            job.module,
            job.datamodule,
            job.trainer,
            [],
            results,
            output_dir,
        )
        write_metrics(output_dir, results)
        log.info("Evaluation directory: %s", output_dir)
    return results


def _one_process_without_ddp(cfg: DictConfig) -> None:
    """Test in this process alone, without a process group, where one process tests: the
    run trained under DDP (``trainer=ddp_cpu``) and this command asks for one device on one
    node (``trainer=cpu`` sets ``devices: 1`` but names no strategy, so the run's ``ddp``
    stayed and this process set up a gloo process group of one, saying so in five lines),
    counted as the Trainer counts them (:func:`~cloudlstm.assembly.batch_limits.processes`:
    ``[0]`` and ``"0,"`` are one device, ``auto`` on the CPU one). Said in a line; a
    strategy that the command names, or processes that an outside launcher started
    (torchrun, SLURM tasks), are left as they are.

    Raises:
        UserError: ``trainer.devices`` or ``trainer.num_nodes`` is a value Lightning refuses
            (on the CPU device indices and -1, as the Trainer check refuses them).
    """
    trainer = cfg.get("trainer") or {}
    strategy = trainer.get("strategy")
    named = any(o.lstrip("+~").startswith("trainer.strategy=") for o in _overrides())
    if not (isinstance(strategy, str) and strategy.startswith("ddp")) or named:
        return
    if trainer.get("devices") is not None:
        # the Trainer check's refusal first, alone: the count below reads -1 on the CPU,
        # which that check refuses, as one device, and would say it tests alone
        check_devices(trainer)
    if processes(trainer) > 1 or launched_processes(os.environ, []) is not None:
        return
    log.info(
        "trainer.strategy=%s (the run's training) with trainer.devices=%s, one device: "
        "testing in this process alone (strategy auto).",
        strategy,
        trainer.get("devices", "auto"),
    )
    with open_dict(cfg):
        cfg.trainer.strategy = "auto"


def _still_training(run: Path, ckpt: object) -> bool:
    """Whether a training holds ``run`` now (:func:`~cloudlstm.rundir.lock.training_holder`),
    said in a warning: its checkpoints are the weights so far (``best``: the best so far),
    which its later validations replace, and its ``metrics.json`` (the run's name and
    tested checkpoint) is not written yet."""
    holder = training_holder(run)
    if holder is None:
        return False
    log.warning(
        "%s is still training (%s): ckpt=%s is tested as it is now, the weights so far, "
        "not the run's final result; evaluate it again once its training ends.",
        run,
        holder,
        ckpt,
    )
    return True


def _run_results(run: Path, ckpt: object) -> dict[str, Any]:
    """The results of ``run`` (its ``metrics.json``; empty before it finished). A damaged
    one is needed by ``ckpt=best`` alone, which it names the tested checkpoint of: for any
    other, said in a warning and passed over, rather than refused once the test is done.

    Raises:
        UserError: the file is damaged, and ``ckpt`` is ``best``.
    """
    try:
        return read_metrics(run) or {}
    except UserError as err:
        if str(ckpt) == "best":
            raise damaged_for_best(err) from None
        log.warning(
            "%s ckpt=%s is tested without it, and its results name the run by its config.",
            err,
            ckpt,
        )
        return {}


def _checkpoint(run: Path, ckpt: str, results: dict[str, Any]) -> Path | None:
    """The checkpoint to test (:func:`find_checkpoint`); None for a run of a model without
    parameters (persistence; ``results``: the run's), which has none: its model is rebuilt
    from the config, and its scaler fitted on the same training part again."""
    try:
        return find_checkpoint(run, ckpt)
    except UserError:
        trained_nothing = results.get("num_params") == 0
        if trained_nothing and str(ckpt) in CHOSEN_CHECKPOINTS:
            return None
        raise


def evaluation_stopped(trainer: L.Trainer, output_dir: Path) -> RunInterrupted:
    """The line of an evaluation stopped by SIGTERM or Ctrl-C in Lightning's test, logged,
    and its status. This evaluation writes its metrics.json after the test: one there now
    is an earlier evaluation's (``hydra.run.dir=`` of one), left as it was."""
    ctrl_c = stopped_by_ctrl_c(trainer)
    metrics = output_dir / METRICS_FILE
    state = (
        f"{metrics} is an earlier evaluation's, not replaced"
        if metrics.is_file()
        else f"{output_dir} has no metrics.json"
    )
    message = (
        f"Evaluation interrupted by {'Ctrl-C' if ctrl_c else 'SIGTERM'}: {state}; the same "
        "command evaluates again."
    )
    log.error(message)
    return RunInterrupted(message, CTRL_C_EXIT_CODE if ctrl_c else EXIT_CODE)


def evaluation_stop_line(output_dir: Path) -> Callable[[], str]:
    """What ``eval.py`` stopped by SIGTERM or Ctrl-C outside Lightning's test (reading the
    data, loading the checkpoint, drawing the figures, or once it has finished) says after
    ``<program>: stopped by <signal> ``, by whether it has written its ``metrics.json`` by then
    (:func:`cloudlstm.cli.sigterm_at_start.stops_now_say`). Made as the evaluation begins:
    a metrics.json there then is an earlier evaluation's (``hydra.run.dir=`` of one)."""
    metrics = output_dir / METRICS_FILE
    not_written = (
        f"without replacing {metrics}, an earlier evaluation's"
        if metrics.is_file()
        else f"without writing {metrics}"
    )
    return line_by_file(
        metrics,
        f"after the evaluation had finished: {metrics} holds its results.",
        f"before the evaluation had finished, {not_written}: run the same command again.",
    )


def _trained_in(trained: TrainedCheckpoint | None, recorded: str | None) -> str | None:
    """The run directory the training of a checkpoint from outside the run wrote to
    (:meth:`~cloudlstm.assembly.checkpoint_fit.TrainedCheckpoint.trained_in`), so that its
    results tell whose weights they are; None for the run's own checkpoint, or none."""
    if trained is None or recorded is None or not Path(recorded).is_absolute():
        return None
    return trained.trained_in()


def _overrides() -> list[str]:
    """The command-line overrides of this evaluation, ``run=`` aside."""
    if not HydraConfig.initialized():
        return []
    return [o for o in HydraConfig.get().overrides.task if not o.startswith("run=")]
