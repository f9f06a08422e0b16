"""The search loop of ``hydra/sweeper=optuna`` (see the package's docstring).

Kept apart from the plugin module, which Hydra imports at every start of ``train.py``:
importing Optuna takes seconds, and only a search needs it. Hydra's plugin scan skips
modules whose name starts with ``_``, so this class is no second plugin.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import math
import re
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra.utils
import optuna
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, Transformer
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import HydraException
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, ListConfig, OmegaConf
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import FrozenTrial, TrialState

from cloudlstm.assembly.source_options import check_command_sweeps
from cloudlstm.assembly.source_overrides import composed_source, source_overrides
from cloudlstm.cli.sigterm_at_start import Terminated
from cloudlstm.cli.sweep_jobs import (
    UnfinishedJobsError,
    broken_pool_ending,
    check_joblib_launcher,
    compared_then_stopped,
    error_into_log,
    failed_jobs_ending,
    first_line,
    job_log,
    refused_as_given,
    stop_report,
    stopped_in_this_process,
    unfinished_report,
)
from cloudlstm.cli.sweep_keys import set_key
from cloudlstm.cli.sweep_values import sweep_values
from cloudlstm.engine.declared_metrics import monitor_mode
from cloudlstm.engine.objective import check_search_objective
from cloudlstm.engine.study_storage import (
    PRUNED_ATTR,
    check_direction,
    open_storage,
    storage_write_fault,
)
from cloudlstm.engine.trial_env import STORAGE_ENV, STUDY_ENV, TRIAL_ENV
from cloudlstm.errors import UserError
from cloudlstm.rundir.config_changes import is_execution_option
from cloudlstm.rundir.lock import SWEEP_KEY, held
from cloudlstm.rundir.stops import RunInterrupted
from cloudlstm.rundir.sweep_sigterm import (
    PassSigtermOn,
    is_basic_launcher,
    is_joblib,
    joblib_sweep_stop,
)

log = logging.getLogger(__name__)

SETTINGS = (
    "storage", "study_name", "n_trials", "n_jobs", "direction", "sampler", "pruner",
    "params", "max_failure_rate",
)  # fmt: skip
DEFAULT_STUDY_NAME = "hparams_search"
STORAGE_FILE = "optuna.db"
RESULTS_FILE = "optimization_results.yaml"
INTERVAL_TAGS = ("log", "int")  # tag(log, ...): log scale; tag(int, ...): whole numbers
# Trial user attributes: the sweep directory that launched the trial and its job number
# there, i.e. its run directory <sweep_dir>/<job>; a continued search runs the trial again
# in that directory (in the sweep directory as now given, for a study in its own storage
# file there: the folder may have been moved or copied).
SWEEP_DIR_ATTR = "sweep_dir"
JOB_ATTR = "job"
JOB_SUBDIR = "${hydra.job.num}"  # the one hydra.sweep.subdir the search reads its runs in
# Study user attributes: the command that started the study, as text: its fixed overrides
# (key: override) and its search space (key: distribution); a continued search must match.
FIXED_ATTR = "fixed_overrides"
SPACE_ATTR = "search_space"
# Study user attribute: its objective, optimized_metric (an execution option for one run,
# but a study's values must all be of one metric to be compared)
METRIC_ATTR = "optimized_metric"
# Study user attribute: the sampler found no point of the search space left to try (a grid's
# or brute force's, which call study.stop()), or each point of a finite space has a trial; a
# continued search asks no further trial
SPACE_TRIED_ATTR = "space_tried"
# Trial user attribute: the trial drew the point of an earlier trial (this attribute's value,
# its number), one tried or asked in the same batch, and was not run; the study records it
# PRUNED, which the samplers take as tried, and it counts neither towards n_trials nor as a
# failure, and has no run directory to compare
REPEAT_ATTR = "repeat_of"
# A sampler that draws only tried points this many times in a row has settled on them (TPE
# on a space it has learnt, say): the search ends there rather than asking on and on
REPEATS_ENDING = 100
# The points of earlier trials that the line of a run of repeats names, most drawn first
REPEATS_NAMED = 5
# Optuna's ValueErrors when a trial asks a parameter with another distribution than the
# study's earlier trials gave it
_INCOMPATIBLE = ("Cannot set different", "does not support dynamic value space")


@dataclass(frozen=True)
class Job:
    """A trial as one Hydra job: its trial number, job number and sampled parameters."""

    trial: int
    number: int
    params: dict[str, Any]


class OptunaSearch(Sweeper):
    """Ask ``n_jobs`` trials, launch them as one batch, tell their results; until the study
    holds ``n_trials`` trials. Settings: :data:`SETTINGS` (``conf/hydra/sweeper/optuna.yaml``).
    """

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.config: DictConfig | None = None
        self.run_lock = "auto"  # run_lock=: how the sweep directory's lock is taken
        self.hydra_context: HydraContext | None = None
        self.launcher: Launcher | None = None
        self.stop: PassSigtermOn | None = None
        self.interrupted: list[tuple[Job, RunInterrupted]] = []  # trials left RUNNING
        self.failed: list[tuple[Job, BaseException]] = []  # this command's failed trials
        self.launched = 0  # jobs this command launched
        self.in_flight: Sequence[Job] = []  # the jobs launched and not yet returned
        # under the basic launcher: the number of the batch's last job begun, and the
        # objective each of its jobs returned (:meth:`_results_noted`)
        self.begun = -1
        self.returned: dict[int, Any] = {}
        self.failures_end_it = False  # a batch failed more than max_failure_rate
        self.bug_ends_it = False  # a trial failed of a bug, which no rate tolerates
        # the study held n_trials as the search ended: the same command runs no further trial
        self.all_counted = False
        # every point of the search space has a trial as the search ended (the sampler said
        # so, or each point of a finite space has one): no n_trials runs a further trial
        self.used_up = False
        self.space_tried = False  # the sampler has no point of the search space left
        self.created = False  # this command created the study (:meth:`_open_study`)
        self.repeats_in_a_row = 0  # trials drawing a tried point since one drew a new one
        # the draws of tried points not yet logged: (trial, the trial it repeats, its point)
        self.repeats: list[tuple[int, int, str]] = []

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        """Check every setting (one line each where wrong), then set up the launcher."""
        s = self.settings
        unknown = sorted(set(s) - set(SETTINGS))
        if unknown:
            raise UserError(
                f"unknown setting hydra.sweeper.{unknown[0]} of hydra/sweeper=optuna; "
                f"its settings: {', '.join(SETTINGS)}."
            )
        self.n_trials = _positive_int("n_trials", s.get("n_trials", 20))
        self.n_jobs = _positive_int("n_jobs", s.get("n_jobs", 1))
        # before any trial trains; val/crps where the runs, or some trials, forecast quantiles
        quantiles = bool((config.get("module") or {}).get("quantiles")) or any(
            str(k) == "module.quantiles" for k in s.get("params") or {}
        )
        self.metric = config.get("optimized_metric")
        check_search_objective(self.metric, quantiles)
        self.direction = objective_direction(s.get("direction"), config.get("optimized_metric"))
        self.max_failure_rate = _failure_rate(s.get("max_failure_rate", 0.0))
        self.sampler_conf = s.get("sampler")
        self.sampler = _build("sampler", self.sampler_conf, optuna.samplers.BaseSampler)
        self.pruner = _build("pruner", s.get("pruner"), optuna.pruners.BasePruner)
        monitor = OmegaConf.select(config, "callbacks.optuna_pruning.monitor")
        if monitor and not isinstance(self.pruner, (type(None), optuna.pruners.NopPruner)):
            check_direction(str(monitor), self.direction)  # before any trial, not in each
        self.study_name = _study_name(s.get("study_name"))
        self.params = {str(k): v for k, v in (s.get("params") or {}).items()}
        check_searched_keys(config, self.params)  # before a trial fails at a missing one
        self.sweep_dir = Path(str(config.hydra.sweep.dir)).resolve()
        check_job_subdir(config)  # the trials' run directories are <sweep dir>/<job>
        storage = s.get("storage")
        self.own_storage = not storage
        self.storage_url = str(storage or f"sqlite:///{self.sweep_dir / STORAGE_FILE}")
        self.config, self.hydra_context = config, hydra_context
        self.run_lock = str(config.get("run_lock") or "auto")  # the sweep directory's lock
        if is_joblib(config.hydra.launcher):
            check_joblib_launcher(config.hydra.launcher)  # before any trial runs
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> None:
        """Run the search: the command line's sweeps join ``params``, its other overrides
        hold for every trial."""
        self.space, self.fixed = search_space(self.params, arguments)
        self._check_source_options(arguments)  # before the study is created
        self.sweep_dir.mkdir(parents=True, exist_ok=True)  # SQLite creates no folders
        # one search at a time in a sweep directory: a second took the first's running
        # trials for an interrupted search's, and ran them again into their folders
        with held(self.sweep_dir, self.run_lock, SWEEP_KEY):
            try:
                try:
                    self._search()
                except BaseException:
                    self._drop_unlaunched_study()  # a refused search leaves no study behind
                    raise
            except UserError:
                raise
            except Exception as err:  # SQLAlchemy's and Optuna's many errors
                fault = storage_write_fault(err, self.storage_url)  # a full disk: one line
                if fault is None:
                    raise
                raise fault from None

    def _check_source_options(self, arguments: Sequence[str]) -> None:
        """Refuse, once and before any trial, a search whose command sets an option of
        ``data.source`` that a trial's source does not read (``data=mobile`` with a file
        and a search over ``data.source.city``): each trial refused it in a line of its own,
        as it ran. As the default sweeper refuses such a sweep
        (:func:`~cloudlstm.assembly.source_options.check_command_sweeps`), on the points of
        the searched data settings (:func:`data_points`).

        Raises:
            UserError: the line of the options, as the command gives them.
        """
        parsed = OverridesParser.create().parse_overrides(list(arguments))
        given = source_overrides(self.params or {}, parsed).given
        if not given or self.hydra_context is None:
            return
        loader = self.hydra_context.config_loader
        check_command_sweeps(
            data_points(self.space, self.fixed),
            given,
            lambda job: composed_source(loader, self.config, job),
        )

    def _search(self) -> None:
        """Ask, launch and tell trials until the study holds ``n_trials``, the sampler has
        tried the whole search space, or a signal."""
        study = self._open_study()
        # Optuna's own Study.stop works only inside Study.optimize's loop, and raised a
        # RuntimeError in this ask-and-tell one, from study.tell, where a grid's or brute
        # force's sampler calls it once it has tried the whole search space
        study.stop = self._space_used_up  # type: ignore[method-assign]
        # joblib's jobs run in processes of their own, which SIGTERM to this one alone would
        # leave running: it is passed on to them (the basic launcher's run here, and stop
        # with it; SLURM's are SLURM's to signal)
        try:
            with joblib_sweep_stop(self.sweep_dir, self.launcher) as self.stop:
                try:
                    self._continue_unfinished(study)
                    # a continued study whose space was tried: its unfinished trials alone
                    self.space_tried |= bool(study.user_attrs.get(SPACE_TRIED_ATTR))
                    while not self._over() and (to_go := self.n_trials - _n_counted(study)) > 0:
                        self._run(study, self._ask_batch(study, min(self.n_jobs, to_go)))
                finally:  # however the search ends (a Ctrl-C mid-ask too), before its last lines
                    self._log_repeats()
        except (Exception, SystemExit) as err:  # SLURM's failed jobs, a broken pool: as below
            self._write_results_before_failing(study)
            by = stopped_in_this_process(err, self.launcher) if self.in_flight else None
            if by is None:
                self._compare()
                if isinstance(err, UnfinishedJobsError) and err.lines:
                    raise self._unfinished_ending(err) from None
                raise
            # after the comparison, as the stop's last word
            report = self._batch_stop_report(by, trial_said=True)
            raise compared_then_stopped(self._compare, report, by) from None
        except (KeyboardInterrupt, Terminated) as err:
            self._write_results_before_failing(study)
            if not is_basic_launcher(self.launcher):
                raise  # jobs in processes of their own (SLURM's run on): not ended here
            # Ctrl-C or SIGTERM outside the training of a trial the basic launcher runs in
            # this process (Hydra's start or end of its job; training's own stop is a
            # SystemExit, above), or between two batches
            by = "Ctrl-C" if isinstance(err, KeyboardInterrupt) else "SIGTERM"
            report = self._batch_stop_report(by, trial_said=False)
            raise compared_then_stopped(self._compare, report, by) from None
        except BaseException:
            self._write_results_before_failing(study)
            raise
        self._write_results(study)
        self.all_counted = _n_counted(study) >= self.n_trials
        self.used_up = self.space_tried or self._every_point_tried(study)
        if self._stopped():
            self._compare()
            log.error(self._stopped_report())
            raise SystemExit(self.stop.exit_code)
        if self.failures_end_it:
            self._compare()
            raise self._failure()
        if self.space_tried:
            log.info(
                "The sampler (%s) has tried every point of the search space: the search "
                "ends with %d of n_trials=%d trials.",
                type(study.sampler).__name__, _n_counted(study), self.n_trials,
            )  # fmt: skip
        elif self._settled():
            log.info(
                "The sampler (%s) drew only points of earlier trials in its last %d trials "
                "(not run): the search ends with %d of n_trials=%d trials.",
                type(study.sampler).__name__, REPEATS_ENDING, _n_counted(study), self.n_trials,
            )  # fmt: skip
        if self.failed:  # as many as max_failure_rate tolerates
            self._compare()
            raise self._tolerated_ending()  # after the comparison, which Hydra would repeat

    def _over(self) -> bool:
        """No further batch: the search got a signal, a batch failed (more than
        ``max_failure_rate``, or a trial of a bug), or the sampler has no point of the
        search space left to try."""
        ended = self.failures_end_it or self.bug_ends_it
        return self._stopped() or ended or self.space_tried or self._settled()

    def _settled(self) -> bool:
        """The sampler drew :data:`REPEATS_ENDING` tried points in a row."""
        return self.repeats_in_a_row >= REPEATS_ENDING

    def _space_used_up(self) -> None:
        """The study's ``stop()`` in this search: the sampler has tried the whole search
        space (from ``study.tell``). The batch's other results are still told; no further
        trial is asked, in this command or one that continues the study."""
        self.space_tried = True
        self.storage.set_study_user_attr(self.study_id, SPACE_TRIED_ATTR, True)

    def _every_point_tried(self, study: optuna.Study) -> bool:
        """Each point of the search space has a trial: a finite space's points all tried
        (:func:`space_size`), or a grid sampler's grid (``GridSampler.is_exhausted``, whose
        grid may be smaller than the space). The last batch may use a space up without the
        sampler saying so: a search asks no further batch once it holds ``n_trials``."""
        size = space_size(self.space)
        if size is not None and len(_tried_points(study)) >= size:
            return True
        sampler = study.sampler
        return isinstance(sampler, optuna.samplers.GridSampler) and sampler.is_exhausted(study)

    def _compare(self) -> None:
        """The comparison of the finished trials (the ``on_multirun_end`` callbacks, which
        Hydra calls only after a search that ended well), once this command launched any:
        a search refused before its first trial ends with its one line alone."""
        if self.launched and self.hydra_context is not None:
            self.hydra_context.callbacks.on_multirun_end(config=self.config)

    def _failure(self) -> BaseException:
        """What a search that failed trials ended raises: the error of a trial stopped by a
        signal to this process (its exit status), or a line per failed trial
        (:func:`~cloudlstm.cli.sweep_jobs.failed_jobs_ending`)."""
        if self.interrupted:  # SIGTERM to a search whose trials run in it (the basic launcher)
            return self.interrupted[0][1]
        errors = [error for _, error in self.failed]
        lines = self._failed_lines()
        rate = f"hydra.sweeper.max_failure_rate={self.max_failure_rate:g}"
        if refused_as_given(errors):
            again = (
                "Each trial's settings were refused as given: mend what its line names (in the "
                "search space or the command) and search again in another hydra.sweep.dir, or "
                "let the search go on past such trials with a higher "
                "hydra.sweeper.max_failure_rate (the share of a batch that may fail)."
            )
        else:
            again = self._go_on_line(once_mended=False)
        what = f"failed, which ended the search ({rate}: the share of a batch that may fail)"
        report = unfinished_report(lines, self.launched, str(self.sweep_dir), what, again=again)
        return failed_jobs_ending(report, errors)

    def _go_on_line(self, once_mended: bool) -> str:
        """The last line of a search that failed trials ended: the command that goes on with
        it (:meth:`_going_on`), ``once_mended`` the bug; but where every point of the search
        space has a trial (:attr:`used_up`), none runs a further trial, whatever its
        ``n_trials``: the line says so, and that a new study, of a wider space, searches on."""
        when = "once the bug is mended, " if once_mended else ""
        if not self.used_up:
            line = f"{when}start the same command {self._going_on()}."
            return line[0].upper() + line[1:]
        search = f"{when}search in a new study".capitalize()
        return (
            "Every point of the search space has run (the failed trials' too, which the study "
            "does not run again), so the same command runs no further trial, whatever its "
            f"hydra.sweeper.n_trials. {search}, with another hydra.sweep.dir (or "
            "hydra.sweeper.study_name), widening the space (more values of a choice, a longer "
            "range) to try more points."
        )

    def _unfinished_ending(self, err: UnfinishedJobsError) -> UserError:
        """The ending of a batch whose jobs a launcher reports as unfinished
        (``hydra/launcher=slurm``, which raises at a failed job before returning any): its
        lines, and how the search goes on, as the ending of failed trials says it (a bug to
        mend first; settings refused as given: another ``hydra.sweep.dir``), where the
        launcher's own last line spoke of a sweep. The batch's trials stay running, so the
        same command runs them again whatever its ``n_trials`` (where a failed trial of
        the other launchers, recorded FAIL, counts towards it and is not run again)."""
        running = "the study keeps the batch's trials running"
        if refused_as_given(err.errors):
            again = (
                "Each trial's settings were refused as given: mend what its line names (in the "
                "search space or the command) and search again in another hydra.sweep.dir "
                f"({running}, and the same command would run them again as they are)."
            )
        else:
            bug = any(e is not None and _is_bug(e) for e in err.errors)
            when = "Once the bug is mended, start" if bug else "Start"
            again = (
                f"{when} the same command with hydra.sweep.dir={self.sweep_dir} to run them "
                f"again and go on with the search ({running}, which the same command runs "
                "whatever its n_trials; finished jobs return their results at once)."
            )
        report = unfinished_report(
            err.lines, err.total, str(self.sweep_dir), "did not finish", again=again
        )
        return UserError(report)

    def _going_on(self) -> str:
        """How the same command goes on with a search that failed trials ended. Where they
        ended it in its last batch, the study holds ``n_trials`` (failed ones count): the
        same command alone would end at once, so a larger ``n_trials`` is named."""
        counted = f"its failed trials count towards n_trials={self.n_trials}"
        if self.all_counted:
            return (
                f"with hydra.sweep.dir={self.sweep_dir} and a hydra.sweeper.n_trials above "
                f"{self.n_trials} to go on with the search ({counted}, which the study holds: "
                "the same command alone runs no further trial)"
            )
        return f"with hydra.sweep.dir={self.sweep_dir} to go on with the search ({counted})"

    def _failed_lines(self) -> list[str]:
        """A line per failed trial of this command: its parameters, error and log."""
        return [
            f"trial {job.trial} (job {job.number}: {_params(job.params)}): "
            f"{first_line(error).rstrip('.')}; {job_log(self._log_path(job))}"
            for job, error in self.failed
        ]

    def _tolerated_ending(self) -> BaseException:
        """What a search that ended well raises where its failed trials stayed within
        ``max_failure_rate`` (a line each, as in the report of a search they end): exit
        status 0, the lines a warning; but where one failed of a bug (an error that is no
        :class:`~cloudlstm.errors.UserError`, which a bad setting and a machine's fault, such
        as a full disk or no memory left, are), that error, for its traceback and a non-zero
        exit, the lines logged as an error whose first says so and whose last says how to go
        on once the bug is mended (as the ending of failures beyond the rate says). No rate
        makes a bug a result to go on with: a search would else end well with trials that a
        mended program runs."""
        rate = f"hydra.sweeper.max_failure_rate={self.max_failure_rate:g}"
        lines = "\n  ".join(self._failed_lines())
        bugs = [(job, error) for job, error in self.failed if _is_bug(error)]
        head = (
            f"{len(self.failed)} of {self.launched} jobs of the sweep failed, tolerated by "
            f"{rate} (the share of a batch that may fail)"
        )
        if not bugs:
            log.warning("%s: the search ended well, with exit status 0:\n  %s", head, lines)
            return SystemExit(0)
        trials = ", ".join(str(job.trial) for job, _ in bugs)
        log.error(
            "%s, but trial%s %s failed of a bug, which no rate tolerates: the search ended after "
            "its batch and fails with its error (below) and exit status 1:\n  %s\n%s",
            head, "s" * (len(bugs) > 1), trials, lines, self._go_on_line(once_mended=True),
        )  # fmt: skip
        return bugs[0][1]

    def _stopped(self) -> bool:
        """The search got SIGTERM or Ctrl-C (joblib's launcher): no further batch."""
        return self.stop is not None and self.stop.received

    def _stopped_report(self) -> str:
        """The trials a signal stopped, each with the step it saved, and how to go on."""
        assert self.stop is not None
        lines = [
            f"trial {job.trial}: {first_line(error).split(' Run dir ', 1)[0].rstrip('.')}"
            for job, error in self.interrupted
        ]
        go_on = f"go on to {self.n_trials} trials"
        if not lines:
            stopped = f"The search got {self.stop.by} between two batches of trials."
        else:
            them = "them" if len(lines) > 1 else "it"
            stopped = (
                f"{len(lines)} trial{'s' * (len(lines) > 1)} of the search did not finish (it "
                f"got {self.stop.by}); the study keeps {them} running:\n  " + "\n  ".join(lines)
            )
            go_on = f"continue {them} and {go_on}"
        return stop_report(stopped, self.sweep_dir, go_on)

    def _batch_stop_report(self, by: str, trial_said: bool) -> str:
        """The lines of a search that ``by`` stopped while the basic launcher ran a batch of
        trials in this process: those trials, which the study keeps running, and how to go
        on. ``trial_said``: the stopped trial's own line (above) says what it saved; else
        the stop came outside its training (its data read, its model built), which saved
        nothing."""
        go_on = f"go on to {self.n_trials} trials"
        if not self.in_flight:
            stopped = f"The search got {by} between two batches of trials."
            return stop_report(stopped, self.sweep_dir, go_on)
        stopped_in, waiting = self._stopped_and_waiting(trial_said)
        them = "them" if len(self.in_flight) > 1 else "it"
        trials = _named(stopped_in)
        if trial_said:
            stopped, again = f"in {trials}, as the trial's line above says", f"continue {them}"
        else:
            stopped, again = f"outside the training of {trials}", f"run {them} again"
        if waiting:
            # a batch's later trials never began: named apart, not as stopped in
            stopped += f"; {_named(waiting)} of its batch had not begun"
        return stop_report(
            f"The search got {by} {stopped}; the study keeps {them} running.",
            self.sweep_dir,
            f"{again} and {go_on}",
        )

    def _stopped_and_waiting(self, trial_said: bool) -> tuple[list[Job], list[Job]]:
        """The batch's jobs left in flight by a stop: those it may have come in, and those
        after them that had not begun. The stop came in the last job whose task began
        (``begun``) where the trial said so or that task had not returned; else it came in
        Hydra's end of that job or in Hydra's start of the next, either of which it names."""
        last = self.begun
        if self.begun < 0:  # in Hydra's start of the batch's first job
            last = self.in_flight[0].number
        elif not trial_said and self.begun in self.returned:
            last += 1
        stopped = [job for job in self.in_flight if job.number <= last]
        return stopped, [job for job in self.in_flight if job.number > last]

    def _open_study(self) -> optuna.Study:
        """Create the study, or load it where it exists (a continued search). A new one is
        created only once the sweep directory's job folders are checked, so that their
        refusal leaves the storage as it was; :meth:`_drop_unlaunched_study` removes one
        that a later refusal, before any trial ran, would leave."""
        try:
            storage = open_storage(self.storage_url)
            existed = self.study_name in {s.study_name for s in storage.get_all_studies()}
        except Exception as err:
            raise self._storage_refusal(err) from None
        self._check_job_folders(storage)
        verbosity = optuna.logging.get_verbosity()  # not Optuna's "Using an existing
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # study" line: ours below says it
        try:
            study = optuna.create_study(
                storage=storage, study_name=self.study_name, sampler=self.sampler,
                pruner=self.pruner, direction=self.direction, load_if_exists=True,
            )  # fmt: skip
        except Exception as err:
            raise self._storage_refusal(err) from None
        finally:
            optuna.logging.set_verbosity(verbosity)
        self.created = not existed
        self.storage, self.study_id = storage, storage.get_study_id_from_name(self.study_name)
        self._check_same_metric(study)  # before the direction, which another metric changes
        if study.direction.name.lower() != self.direction:
            raise UserError(
                f"study {self.study_name} in {self.storage_url} is to "
                f"{study.direction.name.lower()}, not {self.direction}: set "
                f"hydra.sweeper.direction={study.direction.name.lower()} or another "
                "hydra.sweeper.study_name."
            )
        study.sampler = continued_sampler(self.sampler_conf, len(study.trials)) or study.sampler
        self._check_same_command(study)
        done = _n_counted(study)
        log.info(
            "Optuna study %s in %s: %d of %d trials there, %d at a time. An interrupted search "
            "continues with the same command and hydra.sweep.dir=%s",
            self.study_name, self.storage_url, done, self.n_trials, self.n_jobs, self.sweep_dir,
        )  # fmt: skip
        return study

    def _storage_refusal(self, err: BaseException) -> UserError:
        """The line of a storage that cannot be opened or written: SQLAlchemy's many errors
        (a bad URL, no server, no driver), or a disk without room."""
        fault = storage_write_fault(err, self.storage_url)
        if fault is not None:
            return fault
        return UserError(
            f"hydra.sweeper.storage={self.storage_url} cannot be opened: {_one_line(err)}. "
            "Give a database URL every job can reach (sqlite:///<path>.db, "
            "postgresql://...), or null for sqlite:///<sweep dir>/optuna.db."
        )

    def _unlaunched_new_study(self) -> bool:
        """This command created the study and has launched none of its trials: a search
        refused (or stopped) before its first trial ran."""
        return self.created and not self.launched

    def _drop_unlaunched_study(self) -> None:
        """Delete the study that this command created where it ends before any trial ran
        (refused, say, at a setting Hydra finds bad as it checks the first batch): the
        fixed command would find it holding the refused command's record and its
        never-run trials, and refuse itself as another command. A study that existed
        before this command is never deleted."""
        if not self._unlaunched_new_study():
            return
        try:
            optuna.delete_study(study_name=self.study_name, storage=self.storage)
        except Exception as err:  # a full disk, a lost server: the ending still comes
            log.warning(
                "Study %s in %s, which no trial ran, could not be deleted: %s",
                self.study_name, self.storage_url, _one_line(err),
            )  # fmt: skip

    def _check_job_folders(self, storage: optuna.storages.BaseStorage) -> None:
        """Refuse a sweep directory holding numbered folders that no trial of its storage
        ran there (a plain sweep's, those of a study whose storage file was deleted): the
        trials would run as jobs numbered after them, trial 0 as job 1, their folders no
        longer their numbers. Running trial 0 in a stray ``0/`` instead would continue
        another run's checkpoint (``resume=auto``) and report its metrics as the trial's.

        Raises:
            UserError: the sweep directory holds a job folder that no trial ran.
        """
        stray = sorted(set(_job_folders(self.sweep_dir)) - self._recorded_jobs(storage))
        if not stray:
            return
        them, s = ("them", "s") if len(stray) > 1 else ("it", "")
        raise UserError(
            f"hydra.sweep.dir={self.sweep_dir} holds job folder{s} {_spans(stray)} that no "
            f"trial of {self.storage_url} ran: study {self.study_name}'s trials would run as "
            f"jobs numbered after {them}, not as their trial numbers. Move {them} out of "
            f"{self.sweep_dir}, or give the search another hydra.sweep.dir."
        )

    def _recorded_jobs(self, storage: optuna.storages.BaseStorage) -> set[int]:
        """The job numbers that the trials of every study in ``storage`` ran in this sweep
        directory (:meth:`_is_mine`): a second study there keeps clear of the first's."""
        jobs: set[int] = set()
        for frozen in storage.get_all_studies():
            study_id = storage.get_study_id_from_name(frozen.study_name)
            for trial in storage.get_all_trials(study_id, deepcopy=False):
                if JOB_ATTR in trial.user_attrs and self._is_mine(trial):
                    jobs.add(int(trial.user_attrs[JOB_ATTR]))
        return jobs

    def _check_same_metric(self, study: optuna.Study) -> None:
        """Record, in a new study, its objective (``optimized_metric``); in a continued one,
        refuse another: its best trial would be picked across values of two metrics.

        Raises:
            UserError: ``optimized_metric`` is not the one the study was started with.
        """
        was = study.user_attrs.get(METRIC_ATTR)
        if was is None:  # a new study, or one of an older version: it records this one
            study.set_user_attr(METRIC_ATTR, str(self.metric))
            return
        if was != str(self.metric):
            raise UserError(
                f"study {self.study_name} in {self.storage_url} optimizes "
                f"optimized_metric={was}, not {self.metric}: its trials' values would mix two "
                f"metrics. Continue it with optimized_metric={was}, or start a new study of "
                f"{self.metric} with another hydra.sweep.dir (or hydra.sweeper.study_name)."
            )

    def _check_same_command(self, study: optuna.Study) -> None:
        """Record, in a new study, its fixed overrides and search space (as text); in a
        continued one, refuse other ones: the study's trials and best trial would mix runs of
        two settings, and Optuna refuses another distribution for a parameter mid-ask.

        Raises:
            UserError: the fixed overrides or the search space differ from the study's.
        """
        fixed, space = dict(self.fixed), {k: describe(d) for k, d in self.space.items()}
        attrs = study.user_attrs
        if FIXED_ATTR not in attrs or SPACE_ATTR not in attrs:  # new (or made elsewhere)
            if trials := study.get_trials(deepcopy=False):
                log.warning(
                    "Study %s in %s has %d trial(s) but no record of the command that ran "
                    "them (made elsewhere, or by an older version): whether they ran this "
                    "command cannot be checked. It records this one from now on.",
                    self.study_name,
                    self.storage_url,
                    len(trials),
                )
            study.set_user_attr(FIXED_ATTR, fixed)
            study.set_user_attr(SPACE_ATTR, space)
            return
        # where and how the trials run (logger=csv, data.num_workers=4) may change, as in
        # a resumed run; what they compute may not
        changes = _changes("", _computed(attrs[FIXED_ATTR]), _computed(fixed))
        changes += _changes("searched ", attrs[SPACE_ATTR], space, sweep=True)
        if changes:
            raise UserError(
                f"study {self.study_name} in {self.storage_url} was started by another "
                f"command: {'; '.join(changes)}. Continue it with its own command, or start a "
                "new search with another hydra.sweep.dir (or hydra.sweeper.study_name)."
            )

    def _continue_unfinished(self, study: optuna.Study) -> None:
        """Run again, each in its own run directory, the trials this sweep directory left
        RUNNING when it was ended (killed, cancelled, a job lost). A job that had finished
        returns its metrics at once, one cut short continues from its last checkpoint
        (``resume=auto``). Trials of other sweep directories (a shared storage) are left to
        their sweeps."""
        mine = [t for t in study.get_trials(deepcopy=False) if self._is_mine(t)]
        jobs_there = (t.user_attrs.get(JOB_ATTR, -1) for t in mine)
        self.next_job = 1 + max([-1, *jobs_there, *_job_folders(self.sweep_dir)])
        unfinished = [t for t in mine if t.state == TrialState.RUNNING]
        for t in unfinished:
            if JOB_ATTR not in t.user_attrs:  # ended while asking it: never launched, and
                study.tell(t.number, state=TrialState.FAIL)  # its parameters may be partial
        jobs = [
            Job(t.number, t.user_attrs[JOB_ATTR], dict(t.params))
            for t in unfinished
            if JOB_ATTR in t.user_attrs
        ]
        if jobs:
            log.info(
                "Running again the %d trials the last run of this search left unfinished: %s",
                len(jobs), ", ".join(str(j.trial) for j in jobs),
            )  # fmt: skip
        for start in range(0, len(jobs), self.n_jobs):
            if self._over():
                break
            self._run(study, jobs[start : start + self.n_jobs])

    def _is_mine(self, trial: FrozenTrial) -> bool:
        """A trial of this sweep directory: in its own storage file every trial (the folder
        may have been moved or copied since, and the stored path be another), in a shared
        storage one launched from this directory."""
        return self.own_storage or trial.user_attrs.get(SWEEP_DIR_ATTR) == str(self.sweep_dir)

    def _ask_batch(self, study: optuna.Study, n: int) -> list[Job]:
        """Up to ``n`` new trials for one batch, each at a point of the search space that no
        trial of the study has tried or is trying, and no other of the batch is to try.

        A sampler that finds every point tried or running picks one again (BruteForceSampler
        and GridSampler in the last batch of a search with ``n_jobs`` above 1; any sampler of
        ``choice``s and ``range``s now and then): such a trial is not run
        (:meth:`_not_run_repeat`). Once every point of a finite space has a trial, none is
        asked: the space is used up (:meth:`_space_used_up`), as where the sampler says so.
        A sampler that draws only tried points :data:`REPEATS_ENDING` times in a row ends
        the search (:meth:`_settled`). The repeats are logged in one line as a batch
        launches (:meth:`_log_repeats`), or as the search ends (:meth:`_search`, whatever
        ends it), not one each: batches of repeats alone, a settling sampler's, wrote a
        hundred lines.
        """
        tried = _tried_points(study)
        size = space_size(self.space)
        jobs: list[Job] = []
        for _ in range(n):
            if size is not None and len(tried) >= size:
                self._space_used_up()
                break
            trial = self._ask(study)
            point = _point(trial.params)
            if point in tried:
                self._not_run_repeat(study, trial, tried[point])
                self.repeats_in_a_row += 1
                if self._over():  # told by the sampler, as the repeat's result was told
                    break
                continue
            self.repeats_in_a_row = 0
            tried[point] = trial.number
            jobs.append(self._label(trial))
        if jobs:  # the repeats until this batch launches
            self._log_repeats()
        return jobs

    def _not_run_repeat(self, study: optuna.Study, trial: optuna.Trial, of: int) -> None:
        """Record, without running it, a trial that drew the point of trial ``of``: PRUNED,
        which is no failure and which the samplers count as tried, and :data:`REPEAT_ATTR`,
        which keeps it out of ``n_trials`` and of the results' counts of trials."""
        trial.set_user_attr(REPEAT_ATTR, of)
        study.tell(trial, state=TrialState.PRUNED)
        self.repeats.append((trial.number, of, _params(trial.params)))

    def _log_repeats(self) -> None:
        """One line for the repeats not yet logged (:meth:`_not_run_repeat`): how many draws
        repeated tried points, their trials and the points (most drawn first)."""
        if not self.repeats:
            return
        n = len(self.repeats)
        counts = Counter((of, point) for _, of, point in self.repeats)
        points = [
            f"trial {of} ({point}) {'once' if times == 1 else f'{times} times'}"
            for (of, point), times in counts.most_common(REPEATS_NAMED)
        ]
        if len(counts) > REPEATS_NAMED:
            points.append(f"and of {len(counts) - REPEATS_NAMED} other trials")
        many = len(counts) > 1
        log.info(
            "%d draw%s repeated %s, not run (recorded PRUNED, with repeat_of): trial%s %s "
            "drew the point%s of %s.",
            n, "s" * (n > 1), "tried points" if many else "a tried point", "s" * (n > 1),
            _spans([t for t, _, _ in self.repeats]), "s" * many, ", ".join(points),
        )  # fmt: skip
        self.repeats = []

    def _ask(self, study: optuna.Study) -> optuna.Trial:
        """A new trial of the search space."""
        try:
            trial = study.ask(self.space)
        except ValueError as err:  # a study of other distributions, e.g. in a shared storage
            if not any(text in str(err) for text in _INCOMPATIBLE):
                raise
            raise UserError(
                f"study {self.study_name} in {self.storage_url} has trials of another search "
                f"space ({_one_line(err)}): search {', '.join(self.space)} as it did, or "
                "start a new search with another hydra.sweep.dir (or hydra.sweeper.study_name)."
            ) from None
        return trial

    def _label(self, trial: optuna.Trial) -> Job:
        """The job of a trial to launch: labelled with its sweep directory and job number."""
        trial.set_user_attr(SWEEP_DIR_ATTR, str(self.sweep_dir))
        trial.set_user_attr(JOB_ATTR, self.next_job)
        self.next_job += 1
        return Job(trial.number, self.next_job - 1, dict(trial.params))

    def _run(self, study: optuna.Study, jobs: Sequence[Job]) -> None:
        """Launch ``jobs`` (one batch: one launcher call per run of consecutive job numbers,
        which is all of them but where a continued search runs scattered ones again) and
        tell the study their results. A batch of which more than ``max_failure_rate``
        failed ends the search (:meth:`_over`), and so does one with a trial that failed of
        a bug: the trials after it would run the same program, and the search ends with
        the bug's traceback anyway (:meth:`_tolerated_ending`)."""
        assert self.launcher is not None
        for run in _consecutive(jobs):
            overrides = [self._overrides(job) for job in run]
            try:  # a bad key in params or on the command line: fail the trials, not hang them
                self.validate_batch_is_legal(overrides)
            except HydraException:
                for job in run:
                    study.tell(job.trial, state=TrialState.FAIL)
                raise
            self.launched += len(run)
            self.in_flight = run
            try:
                with self._results_noted():
                    returns = self.launcher.launch(overrides, initial_job_idx=run[0].number)
            except BrokenProcessPool as error:  # its trials stay RUNNING: continued later
                pairs = zip(run, overrides, strict=True)
                jobs = [
                    (job.number, job_overrides, self._run_dir(job)) for job, job_overrides in pairs
                ]
                ending = broken_pool_ending(error, self.stop, jobs, str(self.sweep_dir))
                if ending is error:
                    raise  # a task that a worker could not unpickle, say: a bug
                raise ending from None
            except BaseException:  # a stop (or error) in a job of the basic launcher's batch
                self._tell_finished(study)
                raise
            self.in_flight = []
            failed = [
                (job, ret)
                for job, ret in zip(run, returns, strict=True)
                if not self._tell(study, job, ret)
            ]
            if self._stopped():
                return  # the stopped trials are reported as such, not as failures
            interrupted = {job.trial for job, _ in self.interrupted}
            errors = [
                self._record_failure(job, ret)
                for job, ret in failed
                if job.trial not in interrupted
            ]
            if failed and len(failed) / len(run) > self.max_failure_rate:
                self.failures_end_it = True
                return
            if any(_is_bug(error) for error in errors):
                self.bug_ends_it = True
                return

    @contextmanager
    def _results_noted(self) -> Iterator[None]:
        """For the block, where the basic launcher runs a batch's jobs in this process: the
        number of each job as it begins (``begun``) and the objective its task returns
        (``returned``). A stop or error in a later job of the batch leaves the launcher
        without returning its list of results, which would leave the finished jobs'
        trials running in the study (:meth:`_tell_finished`)."""
        task = getattr(self.launcher, "task_function", None)
        self.begun, self.returned = -1, {}
        if not is_basic_launcher(self.launcher) or task is None:
            yield
            return

        def noted(cfg: DictConfig) -> Any:
            number = int(HydraConfig.get().job.num)
            self.begun = number
            self.returned[number] = value = task(cfg)
            return value

        self.launcher.task_function = noted
        try:
            yield
        finally:
            self.launcher.task_function = task

    def _tell_finished(self, study: optuna.Study) -> None:
        """Tell the study the results of the batch's jobs that finished before a stop or
        error ended it in a later job (the basic launcher's, :meth:`_results_noted`): a job
        that returned its objective and after which another began, so that Hydra's end of
        it ran too. The study is right without a continued search; the stop's report names
        the trials it keeps running, those left in flight. A job that failed before the
        stop, or the one the stop came in, stays running: the same command runs it again.
        A study that cannot be written (a full disk) is one line logged, and the job it was
        told stays in flight: the stop (or error) being raised still ends the search, with
        its own lines and exit status."""
        done = [
            job for job in self.in_flight if job.number in self.returned and job.number < self.begun
        ]
        for job in done:
            ret = JobReturn(status=JobStatus.COMPLETED)
            ret.return_value = self.returned[job.number]
            try:
                self._tell(study, job, ret)
            except Exception as err:  # SQLAlchemy's and Optuna's many errors
                fault = storage_write_fault(err, self.storage_url)
                if fault is None:
                    raise
                log.error("%s", fault)
                return
            self.in_flight = [other for other in self.in_flight if other is not job]

    def _overrides(self, job: Job) -> list[str]:
        """The job's command line: fixed overrides, the trial's parameters, and (as
        environment variables, out of its name and config) the trial it is."""
        fixed = [line for key, line in self.fixed.items() if key not in job.params]
        params = [f"{key}={_format(value)}" for key, value in job.params.items()]
        env = {STORAGE_ENV: self.storage_url, STUDY_ENV: self.study_name, TRIAL_ENV: job.trial}
        return [
            *fixed,
            *params,
            *(f"++hydra.job.env_set.{k}={_quoted(str(v))}" for k, v in env.items()),
        ]

    def _tell(self, study: optuna.Study, job: Job, ret: JobReturn) -> bool:
        """Record the job's outcome in the study; False where the job failed. A job stopped
        by a signal (SIGTERM, Ctrl-C) leaves its trial RUNNING, as a killed one does: the
        same command continues it from its checkpoint."""
        if ret.status == JobStatus.FAILED and isinstance(ret._return_value, RunInterrupted):
            self.interrupted.append((job, ret._return_value))
            log.warning(
                "Trial %d (job %d) was stopped: the study keeps it running, and the same "
                "command continues it.", job.trial, job.number,
            )  # fmt: skip
            return False
        if ret.status == JobStatus.FAILED:
            study.tell(job.trial, state=TrialState.FAIL)
            log.warning("Trial %d (job %d) failed.", job.trial, job.number)
            return False
        trial_id = self.storage.get_trial_id_from_study_id_trial_number(self.study_id, job.trial)
        pruned_at = self.storage.get_trial_user_attrs(trial_id).get(PRUNED_ATTR)
        if pruned_at is not None:
            study.tell(job.trial, state=TrialState.PRUNED)
            log.info("Trial %d (job %d) pruned at step %s.", job.trial, job.number, pruned_at)
            return True
        try:
            value = float(ret.return_value)
        except (TypeError, ValueError):
            study.tell(job.trial, state=TrialState.FAIL)
            log.warning("Trial %d returned %r, not a number.", job.trial, ret.return_value)
            return False
        # NaN (a diverged training) is a result too, and Optuna records it as FAIL
        study.tell(job.trial, value)
        level = logging.WARNING if math.isnan(value) else logging.INFO
        log.log(level, "Trial %d (job %d): objective %s.", job.trial, job.number, value)
        return True

    def _record_failure(self, job: Job, ret: JobReturn) -> BaseException:
        """Keep a failed trial's error for the report, and append it to the job's log, which
        the report names (Hydra logs nothing of a job's exception). Returns the error."""
        error = ret._return_value if ret.status == JobStatus.FAILED else None
        if not isinstance(error, BaseException):
            error = UserError(
                f"returned {ret.return_value!r} as its objective, not a number: "
                "optimized_metric must name a validation metric of a run that validates."
            )
        self.failed.append((job, error))
        error_into_log(self._log_path(job), error, __name__)
        return error

    def _run_dir(self, job: Job) -> Path:
        return self.sweep_dir / str(job.number)

    def _log_path(self, job: Job) -> Path:
        """The job's log file, ``<run dir>/<task name>.log``."""
        assert self.config is not None
        return self._run_dir(job) / f"{self.config.get('task_name', 'train')}.log"

    def _write_results_before_failing(self, study: optuna.Study) -> None:
        """:meth:`_write_results` as the search ends with an error: one that writing them
        meets too (the storage on a full disk, say) is logged, not raised in its place. A
        search that ends before any trial ran, in a study it created, writes none: the study
        is deleted (:meth:`_drop_unlaunched_study`)."""
        if self._unlaunched_new_study():
            return
        try:
            self._write_results(study)
        except Exception as err:
            log.warning(
                "%s was not rewritten: %s", self.sweep_dir / results_file(self.study_name),
                _one_line(err),
            )  # fmt: skip

    def _write_results(self, study: optuna.Study) -> None:
        """``optimization_results.yaml``: the best trial's parameters and value, and how many
        trials ended in each state."""
        every = study.get_trials(deepcopy=False)
        trials = [t for t in every if REPEAT_ATTR not in t.user_attrs]
        states = sorted({t.state.name for t in trials})
        results: dict[str, Any] = {
            "name": "optuna",
            "study_name": self.study_name,
            "trials": {s.lower(): sum(t.state.name == s for t in trials) for s in states},
            "best_params": None,
            "best_value": None,
        }
        if len(every) > len(trials):  # PRUNED in the study, but no trial ran
            results["repeats_not_run"] = len(every) - len(trials)
        if any(t.state == TrialState.COMPLETE for t in trials):
            best = study.best_trial
            where = self.sweep_dir  # its own storage's trials ran here, wherever it was then
            if not self.own_storage:
                where = Path(best.user_attrs.get(SWEEP_DIR_ATTR, self.sweep_dir))
            results.update(
                best_params=dict(best.params),
                best_value=best.value,
                best_trial=best.number,
                best_run_dir=str(where / str(best.user_attrs.get(JOB_ATTR, best.number))),
            )
            run_dir = Path(results["best_run_dir"])
            if (run_dir / "config.yaml").is_file():
                results["best_config"] = str(run_dir / "config.yaml")
            results["param_importance"] = _importances(study)
            log.info("Best trial %d: objective %s, %s", best.number, best.value, best.params)
        else:
            results["no_best"] = f"No trial of study {self.study_name} completed."
            log.warning("No trial of study %s completed: there is no best one.", self.study_name)
        OmegaConf.save(OmegaConf.create(results), self.sweep_dir / results_file(self.study_name))


def data_points(space: dict[str, BaseDistribution], fixed: dict[str, str]) -> list[list[str]]:
    """The trials that may differ in their data source, as overrides: the fixed ones, and
    each combination of the searched data settings' values (``data``, ``data.*``): a
    choice's values, a range's or an interval's bounds. A source reads an option or not
    whatever its value, but refuses one only at a value other than its data set's."""
    searched = {key: _values(dist) for key, dist in space.items() if key.split(".")[0] == "data"}
    return [
        [*fixed.values(), *(f"{key}={_format(v)}" for key, v in zip(searched, combo, strict=True))]
        for combo in itertools.product(*searched.values())
    ]


def _values(dist: BaseDistribution) -> list[Any]:
    """A distribution's values (a choice's), or its bounds."""
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    assert isinstance(dist, (IntDistribution, FloatDistribution))
    return [dist.low, dist.high]


def check_searched_keys(config: DictConfig, params: dict[str, Any]) -> None:
    """Refuse, before any trial, a search space (``hydra.sweeper.params``, which a preset
    sets) naming keys the config lacks: Hydra would fail the first trial at the first one,
    naming a key the user never typed. Additions (``+key``) and config groups are Hydra's.

    Raises:
        UserError: a key of ``params`` is no setting of ``config``.
    """
    missing = [k for k in params if not k.startswith(("+", "~")) and not _has_key(config, k)]
    if not missing:
        return
    choices = OmegaConf.select(config, "hydra.runtime.choices") or {}
    preset, model = choices.get("hparams_search"), choices.get("model")
    space = f"hparams_search={preset}'s search space" if preset else "hydra.sweeper.params"
    lacks = "the config"
    if model and all(k.startswith("model.") for k in missing):
        lacks = f"model={model}"
    raise UserError(
        f"{space} names {', '.join(missing)}, which {lacks} has not: search the optimiser "
        "alone, for any model, with hparams_search=optuna_recipe, and sweep the model's own "
        "keys on the command line (e.g. 'model.<key>=choice(a, b)')."
    )


def _has_key(config: DictConfig, key: str) -> bool:
    """Whether dotted ``key`` is a setting of ``config`` (``???`` ones included); a key into
    a list is taken as one."""
    node: Any = config
    for part in key.split("."):
        if isinstance(node, ListConfig):
            return True
        # keys(), not `in`: OmegaConf says a ??? setting is not in its node
        if not isinstance(node, DictConfig) or part not in node.keys():  # noqa: SIM118
            return False
        node = node._get_node(part)
    return True


def results_file(study_name: str) -> str:
    """The results file of study ``study_name`` in its sweep directory: :data:`RESULTS_FILE`
    for the default study, ``optimization_results_<study_name>.yaml`` for another, so that
    studies sharing a sweep directory do not overwrite each other's."""
    if study_name == DEFAULT_STUDY_NAME:
        return RESULTS_FILE
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", study_name)  # a name may hold a slash
    return f"{Path(RESULTS_FILE).stem}_{safe}.yaml"


def _job_folders(sweep_dir: Path) -> list[int]:
    """The job numbers of the sweep directory's job folders (``<sweep dir>/<n>``), of any
    study or sweep run there: a new job takes a number after them all, not one in use."""
    if not sweep_dir.is_dir():
        return []
    return [int(p.name) for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()]


def _importances(study: optuna.Study) -> dict[str, float] | None:
    """Each parameter's share of the objective's variance over the completed trials
    (Optuna's fANOVA evaluator), most important first; None with too few trials to say."""
    complete = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    if len(complete) < 2:
        return None
    try:
        scores = optuna.importance.get_param_importances(study)
    except (RuntimeError, ValueError) as err:  # e.g. every trial drew the same values
        log.info("No parameter importance: %s", err)
        return None
    return {name: float(value) for name, value in scores.items()}


def search_space(
    params: dict[str, Any], arguments: Sequence[str]
) -> tuple[dict[str, BaseDistribution], dict[str, str]]:
    """The distributions of the swept keys, and the other overrides by key (the command line
    after ``params``, as Hydra orders them, so a key given on the command line wins, with
    any prefix: ``~key`` drops a search of the key, :mod:`cloudlstm.cli.sweep_keys`).

    Raises:
        UserError: a value of ``params`` is not Hydra's override grammar, or nothing is swept.
    """
    parser = OverridesParser.create()
    lines = [(f"hydra.sweeper.params.{k}", f"{k}={v}") for k, v in params.items()]
    lines += [("the command line", a) for a in arguments]
    space: dict[str, BaseDistribution] = {}
    fixed: dict[str, str] = {}
    for where, line in lines:
        try:
            override = parser.parse_override(line)
        except HydraException as err:
            raise UserError(f"{where}: {line!r} is no Hydra override: {_one_line(err)}") from None
        key = override.get_key_element()
        # a later override of the key wins whatever either's prefix (++key=, ~key)
        for known in [k for k in (*space, *fixed) if k.lstrip("+~") == set_key(override)]:
            space.pop(known, None)
            fixed.pop(known, None)
        if override.is_sweep_override():
            space[key] = distribution(override, where)
        else:
            fixed[key] = override.input_line or line
    if not space:
        raise UserError(
            "hydra/sweeper=optuna has nothing to search: give hydra.sweeper.params, e.g. "
            "optimizer.lr: tag(log, interval(1e-4, 1e-2)), model.k: choice(3, 6, 9)."
        )
    return space, fixed


def distribution(override: Override, where: str = "params") -> BaseDistribution:
    """An Optuna distribution from a sweep of Hydra's grammar:

    * ``choice(a, b, ...)``: categorical;
    * ``range(start, stop[, step])``: the values Hydra's range gives (``stop`` excluded),
      as an ordered int or float distribution with that step;
    * ``interval(low, high)``: float, uniform; ``tag(log, ...)`` log-uniform; ``tag(int,
      ...)`` integers in [low, high].
    """
    value = override.value()
    _check_tags(override, where)
    if override.is_range_sweep():  # a step of 0, or no value: one line, as a sweep's
        sweep_values(override, where)
    if override.is_choice_sweep() or (override.is_range_sweep() and value.shuffle):
        choices = list(override.sweep_iterator(transformer=Transformer.encode))
        return CategoricalDistribution(choices)
    if override.is_range_sweep():
        values = list(override.sweep_iterator())
        low, high, step = min(values), max(values), abs(value.step)
        if all(isinstance(v, int) for v in values):
            return IntDistribution(int(low), int(high), step=int(step))
        return FloatDistribution(float(low), float(high), step=float(step))
    tags = set(value.tags)
    log_scale = "log" in tags
    low, high = float(value.start), float(value.end)
    _check_interval(override, where, low, high, log_scale=log_scale, whole="int" in tags)
    if "int" in tags:
        return IntDistribution(int(low), int(high), log=log_scale)
    return FloatDistribution(low, high, log=log_scale)


def _check_tags(override: Override, where: str) -> None:
    """Refuse, in one line, a tag the search does not read (a misspelt ``tag(lgo, ...)``
    sampled floats on a linear scale) or a tag on a ``choice`` or ``range`` (it reads tags
    of an ``interval`` alone)."""
    tags = sorted(str(t) for t in (getattr(override.value(), "tags", None) or ()))
    if not tags:
        return
    said = f"{where}: {override.input_line or override.get_key_element()}"
    unknown = [t for t in tags if t not in INTERVAL_TAGS]
    if unknown:
        raise UserError(
            f"{said}: unknown tag {', '.join(unknown)}; the tags of an interval are "
            f"{' and '.join(INTERVAL_TAGS)}, e.g. tag(log, int, interval(1, 8))."
        )
    if not override.is_interval_sweep():
        raise UserError(
            f"{said}: tag({', '.join(tags)}, ...) applies to interval(...) alone; drop it, or "
            "give an interval."
        )


def _check_interval(
    override: Override, where: str, low: float, high: float, *, log_scale: bool, whole: bool
) -> None:
    """Refuse, in one line naming the key and the fix, an interval Optuna cannot sample (or
    would sample other than written): ``low >= high``, ``low <= 0`` on a log scale, and
    bounds that are no whole numbers with ``tag(int, ...)`` (``int()`` would cut them)."""
    key = override.get_key_element()
    said = f"{where}: {override.input_line or key}"
    lo, hi = min(low, high), max(low, high)
    if whole:
        lo, hi = math.ceil(lo), math.floor(hi)
    tags = [t for t, on in (("log", log_scale), ("int", whole)) if on]
    fix = f"interval({_num(lo)}, {_num(hi)})"
    fix = f"{key}='tag({', '.join(tags)}, {fix})'" if tags else f"{key}='{fix}'"
    if whole and not (low.is_integer() and high.is_integer()):
        if lo >= hi:
            fix = "a fixed value, or drop tag int to sample floats"
        raise UserError(
            f"{said}: tag(int, ...) samples whole numbers, so its bounds must be whole, not "
            f"{_num(low)} and {_num(high)}; give e.g. {fix}."
        )
    if low >= high:
        if low == high:
            fix = f"two different bounds, or the fixed value {key}={_num(low)}"
        raise UserError(
            f"{said}: the lower bound must come first and be below the upper one; give {fix}."
        )
    if log_scale and low <= 0:
        fix = fix.replace(f"interval({_num(lo)},", f"interval({_num(1 if whole else hi / 1000)},")
        raise UserError(
            f"{said}: tag(log, ...) needs a lower bound above 0, not {_num(low)}; give e.g. "
            f"{fix}, or drop tag log."
        )


def _num(value: float) -> str:
    """A bound as written: 1 for 1.0, 0.001 as such."""
    value = float(value)
    return str(int(value)) if value.is_integer() else repr(value)


def describe(dist: BaseDistribution) -> str:
    """A distribution as the sweep of Hydra's grammar that gives it, e.g.
    ``tag(log, interval(0.0001, 0.01))``, ``choice(3, 6)``, ``range(2, 10, 2)``."""
    if isinstance(dist, CategoricalDistribution):
        return f"choice({', '.join(_format(c) for c in dist.choices)})"
    assert isinstance(dist, (IntDistribution, FloatDistribution))
    if dist.step is not None and (dist.step != 1 or isinstance(dist, FloatDistribution)):
        return f"range({_num(dist.low)}, {_num(dist.high + dist.step)}, {_num(dist.step)})"
    tags = ["log"] * bool(dist.log) + ["int"] * isinstance(dist, IntDistribution)
    text = f"interval({_num(dist.low)}, {_num(dist.high)})"
    return f"tag({', '.join(tags)}, {text})" if tags else text


def _computed(overrides: dict[str, str]) -> dict[str, str]:
    """The fixed overrides (by key) of what the trials compute: not the execution options
    (:func:`~cloudlstm.rundir.config_changes.is_execution_option`)."""
    return {k: v for k, v in overrides.items() if not is_execution_option(k)}


def _changes(what: str, was: dict[str, str], now: dict[str, str], sweep: bool = False) -> list[str]:
    """What differs from ``was`` in ``now``, key by key, in words."""
    said = (lambda k, v: f"{k}={v}") if sweep else (lambda _k, v: v)
    out = [
        f"{what}{said(k, was[k])} is now {said(k, now[k])}"
        for k in was
        if k in now and was[k] != now[k]
    ]
    out += [f"{what}{said(k, now[k])} is new" for k in now if k not in was]
    out += [f"{what}{said(k, was[k])} is gone" for k in was if k not in now]
    return out


def continued_sampler(conf: Any, trials: int) -> optuna.samplers.BaseSampler | None:
    """The sampler of a study continued with ``trials`` trials in it, where
    ``hydra.sweeper.sampler`` has a seed, or a sampler within it has one (the base sampler
    of ``PartialFixedSampler``, which takes none itself): each seed plus ``trials``
    (:func:`_seeds_moved_on`). With the seed alone each process restarts the same draws,
    so a continued search's first random trials repeated the earlier trials' parameters,
    and trained them again (or, as the search runs no point twice, were not run). The same
    continuation draws the same trials. None: a new study, or no seed (the draws differ
    from process to process already)."""
    if not trials or not isinstance(conf, DictConfig):
        return None
    given = OmegaConf.to_container(conf, resolve=True)
    moved = _seeds_moved_on(given, trials)
    if moved == given:
        return None
    return _build("sampler", OmegaConf.create(moved), optuna.samplers.BaseSampler)


def _seeds_moved_on(sampler: Any, trials: int) -> Any:
    """A sampler's config (a ``_target_`` dict) with its ``seed`` and those of the samplers
    given to it (``base_sampler``, ``independent_sampler``) plus ``trials``; null seeds stay
    null, and other values (its ``fixed_params``, which may fix a parameter named
    ``seed``) stay as given."""
    if not (isinstance(sampler, dict) and "_target_" in sampler):
        return sampler
    return {
        key: (int(value) + trials) % 2**32
        if key == "seed" and value is not None
        else _seeds_moved_on(value, trials)
        for key, value in sampler.items()
    }


def _build(name: str, conf: Any, base: type) -> Any:
    """Instantiate ``hydra.sweeper.<name>`` (a ``_target_`` config; None stays None)."""
    if conf is None:
        return None
    module = optuna.samplers if name == "sampler" else optuna.pruners
    suffix = base.__name__.removeprefix("Base")  # Sampler, Pruner
    known = sorted(n for n in module.__all__ if n.endswith(suffix) and not n.startswith("Base"))
    hint = f"Optuna's: {', '.join(f'{module.__name__}.{n}' for n in known)}"
    target = conf.get("_target_") if isinstance(conf, DictConfig) else None
    if not target:
        raise UserError(f"hydra.sweeper.{name} needs a _target_; {hint}.")
    _check_counts(name, conf)
    try:
        cls = hydra.utils.get_class(str(target))
    except Exception:
        raise UserError(f"hydra.sweeper.{name}: there is no {target}; {hint}.") from None
    conf = _seed_kept_where_taken(name, conf, cls)
    try:
        with warnings.catch_warnings():
            # Optuna's "BruteForceSampler is experimental ... The interface can change": two
            # lines on stderr about a sampler the user chose, with nothing they can act on
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            obj = hydra.utils.instantiate(conf)
    except Exception as err:
        raise UserError(f"hydra.sweeper.{name}: {_one_line(err)}; {hint}.") from None
    if not isinstance(obj, base):
        raise UserError(f"hydra.sweeper.{name}: {target} is no Optuna {name}; {hint}.")
    return obj


def _seed_kept_where_taken(name: str, conf: DictConfig, cls: type) -> DictConfig:
    """``conf`` without its ``seed`` where ``cls`` takes none (``PartialFixedSampler``, which
    draws through its ``base_sampler``) and the seed is null, as the config's default
    sampler has it: ``hydra.sweeper.sampler._target_=...`` alone refused such a sampler for
    the default's ``seed: null`` (``unexpected keyword argument 'seed'``).

    Raises:
        UserError: a seed given to such a class, which it cannot use: one line saying how
            to remove it (and where a base sampler takes it).
    """
    if "seed" not in conf or "seed" in inspect.signature(cls).parameters:
        return conf
    if conf.seed is not None:
        base = f", and seed its base sampler: +hydra.sweeper.{name}.base_sampler.seed={conf.seed}"
        raise UserError(
            f"hydra.sweeper.{name}.seed={conf.seed}: {cls.__name__} takes no seed: remove it "
            f"with ~hydra.sweeper.{name}.seed"
            f"{base if 'base_sampler' in conf else ''}."
        )
    return OmegaConf.masked_copy(conf, [key for key in conf if key != "seed"])


def _check_counts(name: str, conf: DictConfig) -> None:
    """Refuse a count (an ``n_*`` argument: ``n_startup_trials``, ``n_warmup_steps``, ...)
    of ``hydra.sweeper.<name>`` that is no whole number >= 0: some of Optuna's samplers
    take a negative one as 0, a search the user did not ask for."""
    for key, value in conf.items():
        if not str(key).startswith("n_") or value is None:
            continue
        _whole_number(f"{name}.{key}", value, minimum=0)


def check_job_subdir(config: DictConfig) -> None:
    """Refuse a ``hydra.sweep.subdir`` other than the job's number: the search finds, runs
    again and names a trial's run in ``<sweep dir>/<job>``, wherever Hydra wrote it. A preset's
    ``${hydra:runtime.choices.model}/seed_${seed}``, or any subdir every trial resolves alike,
    gave the trials one directory, where the second was refused as another run's, and the
    results named a best run directory that was never written.

    Raises:
        UserError: names the subdir and the one to give.
    """
    subdir = str(OmegaConf.to_container(config.hydra.sweep)["subdir"])
    if subdir.replace(" ", "") != JOB_SUBDIR:
        raise UserError(
            f"hydra.sweep.subdir={subdir} is not the job's number, the run directory of each "
            f"trial of hydra/sweeper=optuna (<sweep dir>/<job>): give "
            f"hydra.sweep.subdir='{JOB_SUBDIR}'."
        )


def _study_name(value: Any) -> str:
    """``hydra.sweeper.study_name``: :data:`DEFAULT_STUDY_NAME` where null; a blank name is
    refused, as it would silently become the default and continue that study."""
    if value is None:
        return DEFAULT_STUDY_NAME
    if not str(value).strip():
        raise UserError(
            f"hydra.sweeper.study_name={value!r} is blank: give the study a name, or null "
            f"for {DEFAULT_STUDY_NAME}."
        )
    return str(value)


def _positive_int(name: str, value: Any) -> int:
    return _whole_number(name, value, minimum=1)


def _whole_number(name: str, value: Any, minimum: int) -> int:
    """``hydra.sweeper.<name>`` as a whole number >= ``minimum``; a :class:`UserError` else."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UserError(
            f"hydra.sweeper.{name}={value} must be a whole number of at least {minimum}."
        )
    return value


def objective_direction(value: Any, metric: Any) -> str:
    """The study's direction: ``hydra.sweeper.direction`` (``value``), or where that is
    null, the one declared with ``optimized_metric``'s metric (``metric``;
    :func:`cloudlstm.engine.declared_metrics.monitor_mode`): ``maximize`` for ``val/ssim``,
    ``minimize`` for ``val/mae_best`` and for a key this package does not declare.

    Raises:
        UserError: ``value`` is neither ``minimize`` nor ``maximize``, or the other
            direction than the metric's (the search would look for the worst trials).
    """
    declared = monitor_mode(str(metric), default=None) if metric else None
    wanted = "maximize" if declared == "max" else "minimize"
    if value is None:
        return wanted
    if str(value).lower() not in ("minimize", "maximize"):
        raise UserError(
            f"hydra.sweeper.direction={value} must be minimize or maximize (one objective: "
            "optimized_metric), or null: the metric's own."
        )
    direction = str(value).lower()
    if declared is not None and direction != wanted:
        raise UserError(
            f"hydra.sweeper.direction={direction} contradicts optimized_metric={metric}, which "
            f"improves as it gets {'higher' if declared == 'max' else 'lower'}: the search "
            f"would look for the worst trials. Set hydra.sweeper.direction=null (the metric's "
            f"direction, what hparams_search=optuna sets) or {wanted}."
        )
    return direction


def _failure_rate(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise UserError(f"hydra.sweeper.max_failure_rate={value} must be between 0 and 1.")
    return float(value)


def _is_bug(error: BaseException) -> bool:
    """Whether a trial failed of a bug, which no ``max_failure_rate`` tolerates: of an error
    that is no :class:`~cloudlstm.errors.UserError` (the error of a bad setting, or of a
    machine's fault such as a full disk or no memory left)."""
    return not isinstance(error, UserError)


def _n_counted(study: optuna.Study) -> int:
    """Trials that count towards ``n_trials`` (:func:`_counted`)."""
    return sum(_counted(t) for t in study.get_trials(deepcopy=False))


def _counted(trial: FrozenTrial) -> bool:
    """Whether a trial counts towards ``n_trials``: all but those waiting to be asked
    (``enqueue_trial``), which the next asks take, and those that never ran: failed before
    they had a job number (a search ended while asking them), or repeats of another's point
    (:data:`REPEAT_ATTR`)."""
    return (
        trial.state != TrialState.WAITING
        and not (trial.state == TrialState.FAIL and JOB_ATTR not in trial.user_attrs)
        and REPEAT_ATTR not in trial.user_attrs
    )


def _tried_points(study: optuna.Study) -> dict[tuple[tuple[str, str], ...], int]:
    """The points of the search space that the study's trials counted towards ``n_trials``
    have tried or are trying (:func:`_point`), each with the number of its first trial."""
    tried: dict[tuple[tuple[str, str], ...], int] = {}
    for t in study.get_trials(deepcopy=False):
        if _counted(t) and t.params:
            tried.setdefault(_point(t.params), t.number)
    return tried


def _point(params: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """A trial's parameters as a key: by ``repr``, so that 1, 1.0 and True differ, as they
    do as overrides."""
    return tuple(sorted((key, repr(value)) for key, value in params.items()))


def space_size(space: dict[str, BaseDistribution]) -> int | None:
    """How many points the search space has: the product of its distributions' values
    (``choice``s, told apart as :func:`_point` does, and ``range``s and whole numbers); None
    where one is a continuous interval."""
    size = 1
    for dist in space.values():
        if isinstance(dist, CategoricalDistribution):
            size *= len({repr(c) for c in dist.choices})
        elif isinstance(dist, (IntDistribution, FloatDistribution)) and dist.step is not None:
            size *= round((dist.high - dist.low) / dist.step) + 1
        else:
            return None
    return size


def _consecutive(jobs: Sequence[Job]) -> Iterator[list[Job]]:
    """``jobs`` in runs of consecutive job numbers (a launcher numbers a call's jobs on)."""
    run: list[Job] = []
    for job in sorted(jobs, key=lambda j: j.number):
        if run and job.number != run[-1].number + 1:
            yield run
            run = []
        run.append(job)
    if run:
        yield run


def _spans(numbers: Sequence[int]) -> str:
    """Increasing ``numbers`` in spans of consecutive ones: ``1-100, 103``."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _named(jobs: Sequence[Job]) -> str:
    """``jobs`` as a stop's line names them: ``trial 1 (job 1), trial 2 (job 2)``."""
    return ", ".join(f"trial {job.trial} (job {job.number})" for job in jobs)


def _format(value: Any) -> str:
    """A sampled value as Hydra's override grammar reads it back."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, float) else str(value)


def _quoted(text: str) -> str:
    """``text`` as a quoted override value: kept verbatim, never interpolated."""
    return "'" + text.replace("'", "\\'").replace("${", "\\${") + "'"


def _one_line(err: BaseException) -> str:
    """The innermost cause of ``err``, in one line."""
    while err.__cause__ is not None:
        err = err.__cause__
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else 'no message'}"


def _params(params: dict[str, Any]) -> str:
    """A trial's sampled parameters as overrides: what tells its job apart."""
    return " ".join(f"{key}={_format(value)}" for key, value in params.items())
