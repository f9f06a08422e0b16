"""The sweeper of ``python train.py -m``: Hydra's basic sweeper, reporting every failed job.

Hydra's :class:`~hydra._internal.core_plugins.basic_sweeper.BasicSweeper` reads the jobs'
results in order and raises the first failure: a joblib sweep whose jobs 0 and 2
failed (they all ran, in parallel) reported job 0 alone, without the comparison of the
jobs that finished. :class:`ReportingSweeper` (``conf/hydra/sweeper/reporting.yaml``, the
default of ``conf/hydra/default.yaml``) lets every batch of jobs run to its end, then

* prints the comparison of the finished jobs (the ``on_multirun_end`` callbacks, which
  Hydra skips after a failure), also where the SLURM launcher reports failed jobs itself
  (:class:`~cloudlstm.cli.sweep_jobs.UnfinishedJobsError`),
* and fails with a line per failed job (what tells it apart from the others, its error's
  first line, its log) and how to run them again, as the SLURM launcher reports its jobs;
  a sweep of one job with that job's own error, as the job alone would. A failure that is
  no :class:`~cloudlstm.errors.UserError` is a bug: it is raised with its traceback, after
  that report is logged.

Before anything runs, the joblib launcher's settings are checked (``n_jobs=0``, an unknown
backend: :func:`~cloudlstm.cli.sweep_jobs.check_joblib_launcher`), and a sweep one of whose
jobs' directories a live run holds is refused in one line naming it
(:mod:`cloudlstm.rundir.lock`); other jobs of the same sweep directory may run meanwhile,
so two sweeps over different settings share one.

With ``hydra/launcher=joblib``, SIGTERM sent to this process, or Ctrl-C, is passed on to the
running jobs (:mod:`cloudlstm.rundir.sweep_sigterm`); once they have stopped, the sweep names
each unfinished job and how to continue them, and exits with 143 (130 after Ctrl-C). With
the basic launcher, whose jobs run in this process, SIGTERM or Ctrl-C ends the sweep at its
job (the job's line, as a run's) after the comparison of the finished jobs, with the job it
came in and the command that goes on (:meth:`ReportingSweeper._stopped_by_signal`), 143
(130 after Ctrl-C).

Hydra finds sweepers only in the ``hydra_plugins`` namespace package, hence this module.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.types import Override
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import InterpolationResolutionError

from cloudlstm.assembly.job_sources import JobSources
from cloudlstm.assembly.source_options import check_command_sweeps, read_sweeps
from cloudlstm.assembly.source_overrides import composed_source, source_overrides
from cloudlstm.cli.model_keys import applicable_jobs
from cloudlstm.cli.sigterm_at_start import Terminated, a_job_begins
from cloudlstm.cli.sweep_jobs import (
    UnfinishedJobsError,
    broken_pool_ending,
    check_joblib_launcher,
    compared_then_stopped,
    error_into_log,
    failed_jobs_ending,
    first_line,
    job_log,
    own_overrides,
    shared_overrides,
    stop_report,
    stopped_in_this_process,
    unfinished_report,
)
from cloudlstm.cli.sweep_keys import command_first, replaced
from cloudlstm.cli.sweep_values import sweep_values
from cloudlstm.errors import UserError
from cloudlstm.rundir.lock import held_run_dirs
from cloudlstm.rundir.sweep_sigterm import (
    PassSigtermOn,
    is_basic_launcher,
    is_joblib,
    joblib_sweep_stop,
)

log = logging.getLogger(__name__)

# the interpolations of a subdir that every job resolves, each to a directory of its own
_JOB_NUMBER = {"hydra.job.num", "hydra.job.id"}


class ReportingSweeper(BasicSweeper):
    """:class:`BasicSweeper` that runs every job and names each failed one at the end."""

    stop: PassSigtermOn | None = None

    def sweep(self, arguments: list[str]) -> Any:
        launcher = self.launcher
        if is_joblib(launcher):
            check_joblib_launcher(self.config.hydra.launcher)  # before any job runs
        recorder = _FailureRecorder(launcher)
        self.launcher = recorder
        sweep_dir = str(self.config.hydra.sweep.dir)
        try:
            # joblib's jobs run in processes of their own, which SIGTERM to this one alone
            # would leave running: it is passed on to them (the basic launcher's run here)
            with joblib_sweep_stop(sweep_dir, launcher) as self.stop:
                returns = super().sweep(arguments)
        except BrokenProcessPool as error:
            jobs = [
                (n, job, Path(self._job_dir(job, n))) for n, job in enumerate(recorder.launched)
            ]
            self._compare()
            ending = broken_pool_ending(error, self.stop, jobs, sweep_dir)
            if ending is error:
                raise  # a task that a worker could not unpickle, say: a bug
            raise ending from None
        except UnfinishedJobsError:
            # hydra/launcher=slurm raises its report of the failed jobs once all have ended,
            # the finished ones' metrics written: their comparison comes first, as for the
            # other launchers. Caught here rather than turned into failed returns by the
            # launcher, which the Optuna sweeper would tell its study as failed trials,
            # where it now leaves them running for the continued search (docs/cluster.md).
            self._compare()
            raise
        except (KeyboardInterrupt, Terminated, SystemExit) as err:
            ending = self._stopped_by_signal(err, recorder, sweep_dir)
            if ending is None:
                raise
            raise ending from None
        finally:
            self.launcher = launcher
        if self.stop is not None and self.stop.received:
            self._compare()
            log.error(_stopped(recorder.failed, recorder.launched, sweep_dir, self.stop.by))
            raise SystemExit(self.stop.exit_code)
        if not recorder.failed:
            return returns
        self._compare()
        raise _failure(recorder.failed, recorder.launched, sweep_dir)

    def _stopped_by_signal(
        self, err: BaseException, recorder: _FailureRecorder, sweep_dir: str
    ) -> SystemExit | None:
        """The end of a sweep whose jobs the basic launcher runs in this process, where
        ``err`` is a SIGTERM or a Ctrl-C: in a job (its exit with the signal's status, after
        the job's line), or outside the jobs (``Terminated``, ``KeyboardInterrupt``: Hydra's
        end of a job, the next job's config being composed), once one has begun: the
        comparison of the finished jobs, then the lines of the stop and the command that
        goes on. None for anything else: a signal before any job (the program's line,
        :mod:`cloudlstm.cli.sigterm_at_start`), joblib's second Ctrl-C (at once)."""
        job = recorder.job
        by = _signal_of(err, recorder.launcher)
        if by is None or job is None:
            return None
        if isinstance(err, SystemExit):
            stopped = f"The sweep got {by} in job {job}, as the job's line above says."
            go_on = "continue it and run the jobs after it"
        else:
            stopped = f"The sweep got {by} outside its jobs, after job {job} had begun."
            go_on = "run its unfinished jobs"
        report = stop_report(
            stopped, sweep_dir, f"{go_on} (finished jobs return their results at once)"
        )
        return compared_then_stopped(self._compare, report, by)

    def _compare(self) -> None:
        """The comparison of the finished jobs (the ``on_multirun_end`` callbacks)."""
        self.hydra_context.callbacks.on_multirun_end(config=self.config)

    def split_arguments(  # type: ignore[override]  # Hydra's is static; this needs the config
        self, overrides: list[Any], max_batch_size: int | None
    ) -> list[list[list[str]]]:
        """Hydra's jobs, less the model settings a job's model does not take
        (:func:`~cloudlstm.cli.model_keys.applicable_jobs`), in batches of
        ``max_batch_size``. A key of the config's sweep that the command sets or deletes
        too, with any prefix, is the command's
        (:func:`~cloudlstm.cli.sweep_keys.command_first`)."""
        self._check_sweeps(overrides)
        own = command_first(overrides, len(self.params or {}))
        jobs = [job for batch in BasicSweeper.split_arguments(own, None) for job in batch]
        applicable = applicable_jobs(jobs, self._model_keys)
        if applicable.note:
            log.info(applicable.note)
        jobs = self._read_sweeps(applicable.jobs, overrides)
        composed: dict[int, str] = {}  # a job's directory, composed once (~0.1 s a job)

        def job_dir(num: int) -> str:
            if num not in composed:
                composed[num] = self._job_dir(jobs[num], num)
            return composed[num]

        self._refuse_shared_dirs(jobs, job_dir)
        self._refuse_jobs_in_use(jobs, job_dir)
        if max_batch_size is None:
            return [jobs]
        return list(BasicSweeper.split_overrides_to_chunks(jobs, max_batch_size))

    def _read_sweeps(self, jobs: list[list[str]], overrides: list[Override]) -> list[list[str]]:
        """``jobs``, refused before any runs where the command sets a source option that a
        job's source does not read
        (:func:`~cloudlstm.assembly.source_options.check_command_sweeps`), else without the
        config's sweeps of such options, the jobs then alike once, and the line that says
        so (:func:`~cloudlstm.assembly.source_options.read_sweeps`).

        Raises:
            UserError: the command's options that a job's source does not read.
        """
        # the config's sweep (hydra.sweeper.params) comes first, then the command's
        params = list(self.params or {})
        split = source_overrides(params, overrides[len(params) :])
        swept, given = split.swept, split.given
        if not swept and not given:
            return jobs
        source_of = JobSources(self._source, self._repository())
        check_command_sweeps(jobs, given, source_of)
        kept, note = read_sweeps(jobs, swept, source_of)
        if note:
            log.info(note)
        return kept

    def _repository(self) -> Any:
        """Hydra's config repository of the sweep's search path (``hydra.searchpath`` of
        the command and the config included), which reads each config once."""
        loader: Any = self.hydra_context.config_loader
        # as Hydra's load_sweep_config reads them: unresolved (${hydra:...} in a subdir)
        hydra = OmegaConf.to_container(self.config.hydra.overrides.hydra, resolve=False)
        name = self.config.hydra.job.config_name
        return loader._parse_overrides_and_create_caching_repo(name, hydra)[1]

    def _source(self, job: list[str]) -> Any:
        """A job's composed ``data.source`` (None where its config has none)."""
        return composed_source(self.hydra_context.config_loader, self.config, job)

    def _check_sweeps(self, overrides: list[Override]) -> None:
        """Refuse, in one line naming it and the fix, a sweep override Hydra cannot expand
        (:func:`~cloudlstm.cli.sweep_values.sweep_values`), but for the config's sweeps that
        the command replaces (:func:`~cloudlstm.cli.sweep_keys.command_first`). The first
        overrides are ``hydra.sweeper.params``' (Hydra's ``BasicSweeper.sweep`` puts them
        first).

        Raises:
            UserError: the line refusing the first such override.
        """
        params = list(self.params or {})
        left = replaced(overrides, len(params))
        for num, override in enumerate(overrides):
            if num in left:
                continue
            if override.is_sweep_override() and override.is_discrete_sweep():
                where = "the command line"
                if num < len(params):
                    where = f"hydra.sweeper.params.{params[num]}"
                sweep_values(override, where)

    def _model_keys(self, job: list[str]) -> tuple[str, set[str]]:
        """The model a job's config chooses, and its settings."""
        loader = self.hydra_context.config_loader
        cfg = loader.load_sweep_config(self.config, job)
        return str(cfg.hydra.runtime.choices.get("model")), set(cfg.get("model") or {})

    def _refuse_jobs_in_use(self, jobs: list[list[str]], job_dir: Callable[[int], str]) -> None:
        """Refuse the sweep, before it writes anything, if a live run holds one of its
        jobs' directories (``job_dir(num)``; another sweep's jobs in the same sweep
        directory may run).

        Raises:
            UserError: the line refusing the first such directory.
        """
        mode = str(self.config.get("run_lock") or "auto")
        held = held_run_dirs(str(self.config.hydra.sweep.dir), mode)
        for num in range(len(jobs) if held else 0):
            refusal = held.get(job_dir(num))
            if refusal:
                raise UserError(refusal)

    def _refuse_shared_dirs(self, jobs: list[list[str]], job_dir: Callable[[int], str]) -> None:
        """Refuse, before anything is written, a sweep whose ``hydra.sweep.subdir`` gives
        two of its jobs one directory (``job_dir(num)``: ``model/seed_N`` of the presets,
        and a swept ``optimizer.lr``): the later job found the earlier's run there and
        resumed it, or was refused as a run of other settings, instead of training its own.
        Or one that a job's config cannot resolve (``${model.k}`` of a model without K),
        which ended in OmegaConf's traceback. A subdir of the job's number alone cannot
        fail, and is not composed job by job.

        Raises:
            UserError: names the jobs, their directory or the key missing, and the fix.
        """
        subdir = str(OmegaConf.to_container(self.config.hydra.sweep)["subdir"])
        numbered = "job.num" in subdir or "job.id" in subdir
        if numbered and set(re.findall(r"\$\{([^}]*)\}", subdir)) <= _JOB_NUMBER:
            return
        first_in: dict[str, int] = {}
        for num, job in enumerate(jobs):
            folder = self._resolved_dir(subdir, jobs, num, job_dir)
            if numbered or folder not in first_in:
                first_in[folder] = num
                continue
            earlier = jobs[first_in[folder]]
            differ = [o for o in job if o not in earlier] or job
            raise UserError(
                f"hydra.sweep.subdir={subdir} gives jobs {first_in[folder]} and {num} one "
                f"directory, {folder}: the later would resume or be refused instead of "
                f"training {' '.join(differ)}. Name what sets them apart in the subdir "
                f"(hydra.sweep.subdir='{self._subdir_naming(subdir, differ)}'), or sweep "
                "them in a sweep directory of their own (protocol_tag=... in the presets)."
            )

    @staticmethod
    def _resolved_dir(
        subdir: str, jobs: list[list[str]], num: int, job_dir: Callable[[int], str]
    ) -> str:
        """Job ``num``'s directory (``job_dir(num)``).

        Raises:
            UserError: the subdir reads a key the job's config lacks (or fails otherwise
                to resolve there): names the job, what is missing and the fix.
        """
        try:
            return job_dir(num)
        except InterpolationResolutionError as error:
            own = own_overrides(jobs[num], shared_overrides(jobs))
            raise UserError(
                f"hydra.sweep.subdir={subdir} cannot name the directory of job {num} "
                f"({own}): {first_line(error).rstrip('.')}. Name in the subdir only "
                "settings every job has, or ${hydra.job.num}."
            ) from None

    def _subdir_naming(self, subdir: str, overrides: list[str]) -> str:
        """``subdir`` with a level naming each key of ``overrides`` (``key=value``) by its
        value: ``.../optimizer.lr_${optimizer.lr}``; a config group by its choice."""
        choices = self.config.hydra.runtime.choices
        levels = []
        for override in overrides:
            key = override.split("=", 1)[0].lstrip("+~")
            value = f"${{hydra:runtime.choices.{key}}}" if key in choices else f"${{{key}}}"
            levels.append(f"{key}_{value}")  # "=" would need quoting in an override
        return "/".join([subdir, *levels])

    def _job_dir(self, job: list[str], num: int) -> str:
        """The directory job number ``num`` runs in, resolved as Hydra's launchers do."""
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, job)
        with open_dict(cfg):
            cfg.hydra.job.id = f"{cfg.hydra.job.name}_{num}"
            cfg.hydra.job.num = num
        hydra_config = HydraConfig.instance()
        previous = hydra_config.cfg
        hydra_config.set_config(cfg)  # ${hydra:runtime.choices.model} in the subdir reads it
        try:
            return os.path.abspath(os.path.join(cfg.hydra.sweep.dir, cfg.hydra.sweep.subdir))
        finally:
            hydra_config.cfg = previous

    def is_done(self) -> bool:
        # after SIGTERM, no further batch (hydra.sweeper.max_batch_size) is launched
        return super().is_done() or (self.stop is not None and self.stop.received)


class _FailureRecorder(Launcher):
    """The sweep's launcher, with the failed jobs' results kept aside and handed to the
    sweeper as finished (returning None), so that it goes on to the next batch."""

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher
        self.failed: list[tuple[JobReturn, BaseException]] = []
        self.launched: list[Sequence[str]] = []  # each launched job's overrides
        self.job: int | None = None  # the number of the last job begun in this process

    def setup(self, **kwargs: Any) -> None:  # the sweeper set the wrapped launcher up
        pass

    @contextmanager
    def _jobs_noted(self) -> Iterator[None]:
        """For the block, where the basic launcher runs the jobs in this process: ``job``
        is the number of each as it begins, so that a signal in it names it (Hydra puts
        back the sweep's config as a job ends, stopped or not: it no longer names it)."""
        task = getattr(self.launcher, "task_function", None)
        if not is_basic_launcher(self.launcher) or task is None:
            yield
            return

        def noted(cfg: DictConfig) -> Any:
            self.job = int(HydraConfig.get().job.num)
            return task(cfg)

        self.launcher.task_function = noted
        try:
            yield
        finally:
            self.launcher.task_function = task

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        self.launched += job_overrides  # before: a launch that raises has launched them too
        a_job_begins()  # here (the basic launcher) or in other processes: a later stop says so
        with self._jobs_noted():
            results = self.launcher.launch(job_overrides, initial_job_idx=initial_job_idx)
        for result in results:
            if result.status == JobStatus.FAILED:
                self.failed.append((result, result._return_value))  # the job's exception
                path = _log_path(result)
                if path is not None:
                    error_into_log(path, result._return_value, __name__)
                # the sweeper reads every result's value and stops at a failed one's
                result.status, result.return_value = JobStatus.COMPLETED, None
        return results


def _failure(
    failed: list[tuple[JobReturn, BaseException]], launched: list[Sequence[str]], sweep_dir: str
) -> BaseException:
    """What the sweep raises: a UserError naming each failed job and its log
    (:func:`~cloudlstm.cli.sweep_jobs.failed_jobs_ending`: a bug itself); in a sweep of one
    job, that job's failure itself (after Hydra's line naming its overrides), as it would
    be alone: there are no other jobs to tell it from."""
    errors = [error for _, error in failed]
    if len(launched) == 1:
        sys.stderr.write(f"Error executing job with overrides: {failed[0][0].overrides}\n")
        return errors[0]
    shared = shared_overrides(launched)
    lines = [
        f"job {_job_num(job)} ({own_overrides(job.overrides or [], shared)}): "
        f"{first_line(error).rstrip('.')}; {_log(job)}"
        for job, error in failed
    ]
    report = unfinished_report(lines, len(launched), sweep_dir, "failed", errors)
    return failed_jobs_ending(report, errors)


def _stopped(
    failed: list[tuple[JobReturn, BaseException]],
    launched: list[Sequence[str]],
    sweep_dir: str,
    by: str,
) -> str:
    """The report of a sweep stopped by ``by`` (SIGTERM, Ctrl-C): each unfinished job's line
    (where it stopped, without its own command: the same command continues them all)."""
    shared = shared_overrides(launched)
    lines = [
        f"job {_job_num(job)} ({own_overrides(job.overrides or [], shared)}): "
        f"{first_line(error).split(' Run dir ', 1)[0].rstrip('.')}; {_log(job)}"
        for job, error in failed
    ]
    what = f"did not finish (the sweep got {by})"
    return unfinished_report(lines, len(launched), sweep_dir, what)


def _signal_of(err: BaseException, launcher: Launcher) -> str | None:
    """The signal ("SIGTERM", "Ctrl-C") that ``err`` is, where the basic ``launcher`` ran
    the sweep's jobs in this process: a job's exit with its status
    (:func:`~cloudlstm.cli.sweep_jobs.stopped_in_this_process`), or the signal itself
    outside the jobs; None for any other error, or another launcher."""
    if isinstance(err, SystemExit):
        return stopped_in_this_process(err, launcher)
    if not is_basic_launcher(launcher):
        return None
    return "Ctrl-C" if isinstance(err, KeyboardInterrupt) else "SIGTERM"


def _job_num(job: JobReturn) -> str:
    return str(job.hydra_cfg.hydra.job.num) if job.hydra_cfg is not None else "?"


def _log_path(job: JobReturn) -> Path | None:
    """The job's log file (``<run dir>/<task name>.log``), or None where it has no run dir."""
    if job.hydra_cfg is None or job.cfg is None:
        return None
    run_dir = Path(job.hydra_cfg.hydra.runtime.output_dir)
    return run_dir / f"{job.cfg.get('task_name', 'train')}.log"


def _log(job: JobReturn) -> str:
    """Where the report sends the reader: the job's log, or its directory where the job
    wrote no log (it failed before its logging began)."""
    path = _log_path(job)
    if path is None:
        return f"run dir {job.working_dir or '?'}"
    return job_log(path)
