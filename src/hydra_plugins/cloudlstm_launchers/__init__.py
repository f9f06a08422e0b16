"""cloudlstm's SLURM launcher: submitit's, with clear errors where SLURM is missing and
where jobs of a sweep fail or are cancelled.

Hydra finds launchers only in the ``hydra_plugins`` namespace package, hence this module.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
from omegaconf import OmegaConf, open_dict

from cloudlstm.cli.sigterm_at_start import JOBS_BEGUN, stops_now_say
from cloudlstm.cli.sweep_jobs import (
    UnfinishedJobsError,
    first_line,
    own_overrides,
    shared_overrides,
    unfinished_report,
)
from cloudlstm.errors import UserError

log = logging.getLogger(__name__)

# squeue's states of a job that may still write its result; any other state, or a job no
# longer listed, has ended (states: `man squeue`, JOB STATE CODES)
ACTIVE_STATES = frozenset(
    {
        "PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
        "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "SUSPENDED", "STOPPED",
    }
)  # fmt: skip


class CheckedSlurmLauncher(SlurmLauncher):
    """``hydra/launcher=slurm``: submitit's SLURM launcher, made to say what went wrong.

    * Where SLURM's tools are missing it refuses in one line; submitit would fail deep
      inside ``subprocess`` with a FileNotFoundError traceback that does not say what to do.
    * It waits for the jobs by their SLURM state (``squeue``), not submitit's, which comes
      from ``sacct``: without SLURM's accounting database every state reads UNKNOWN to
      submitit, and a cancelled job (which never writes a result) is waited for forever.
    * Once every job has ended, each job that failed, was cancelled or ended without a
      result is one line with its run directory and log, and the sweep exits non-zero
      (after the comparison of the finished jobs, which the default sweeper prints).
    * A job that SLURM ends with SIGTERM (requeue, preemption, ``scancel``) and that does
      not complete writes no result: its failure is the kill, and the result is the
      requeued run's to write (or, cancelled, the state says what happened).
    """

    poll_s: float = 2.0  # result files are looked for this often
    squeue_every_s: float = 10.0  # and SLURM asked for the jobs' states this often

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        _check_one_allocation(job_overrides)
        _check_tools()
        jobs = self._submit(job_overrides, initial_job_idx)
        self._wait(jobs)
        return self._collect(jobs, job_overrides, initial_job_idx)

    def __call__(self, *args: Any, **kwargs: Any) -> JobReturn:
        """Run one job of the sweep: this is what submitit runs inside the SLURM job."""
        terminated = _note_sigterm()
        ret = super().__call__(*args, **kwargs)
        if terminated.is_set() and ret.status != JobStatus.COMPLETED:
            # e.g. Lightning stops on the SIGTERM of its own requeue, and an error while
            # closing (the W&B service got the SIGTERM too) replaces its SystemExit:
            # returning would write that error as the job's result, though SLURM has
            # queued the job again
            log.info("Ended by SIGTERM from SLURM: no result is written for this run.")
            raise SystemExit(128 + signal.SIGTERM)
        return ret

    def _submit(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[Any]:
        """Submit the jobs as one array job: ``SlurmLauncher.launch`` up to its waiting."""
        import submitit

        assert self.config is not None
        init_keys = {"max_num_timeout", "submitit_folder"}
        executor = submitit.AutoExecutor(
            cluster=self._EXECUTOR,
            folder=self.params["submitit_folder"],
            slurm_max_num_timeout=self.params["max_num_timeout"],
        )
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(
            **{
                key if key in base else f"{self._EXECUTOR}_{key}": value
                for key, value in self.params.items()
                if key not in init_keys
            }
        )
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        log.info("Submitit 'slurm' sweep output dir : %s", sweep_dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if "mode" in self.config.hydra.sweep:
            sweep_dir.chmod(int(str(self.config.hydra.sweep.mode), 8))
        params = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
            params.append(
                (
                    list(overrides),
                    "hydra.sweep.dir",
                    idx,
                    f"job_id_for_{idx}",
                    Singleton.get_state(),
                )
            )
        return executor.map_array(self, *zip(*params, strict=True))

    def _wait(self, jobs: Sequence[Any]) -> None:
        """Return once every job has written its result or has left SLURM's queue without.

        A job is taken as ended without a result only when two state checks in a row find
        it ended (or gone), so that a result file written at the end is not missed; and a
        result is taken only once SLURM no longer runs the job, so that a run that wrote
        one and was requeued is waited for.
        """
        # a stop of this process leaves the jobs running on the cluster: its line says so
        stops_now_say(_still_running([job.job_id for job in jobs]))
        waiting = {job.job_id: job for job in jobs}
        ended_once: set[str] = set()
        states: dict[str, str] | None = None  # None: SLURM could not be asked (yet)
        next_squeue = time.monotonic()
        while waiting:
            if time.monotonic() >= next_squeue:
                states = _slurm_states(list(waiting.values()))
                next_squeue = time.monotonic() + self.squeue_every_s
                ended = (
                    set()
                    if states is None
                    else {j for j in waiting if states.get(j) not in ACTIVE_STATES}
                )
                for job_id in ended & ended_once:  # ended, with or without a result
                    del waiting[job_id]
                ended_once = ended
            for job_id, job in list(waiting.items()):
                # a result of a job SLURM still runs or has queued again is not the last
                active = states is not None and states.get(job_id) in ACTIVE_STATES
                if job.paths.result_pickle.exists() and not active:
                    del waiting[job_id]
            if waiting:
                time.sleep(self.poll_s)
        stops_now_say(JOBS_BEGUN)

    def _collect(
        self, jobs: Sequence[Any], job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> list[JobReturn]:
        """The jobs' returns.

        Raises:
            UnfinishedJobsError: a line per job that did not finish; the default sweeper
                prints the comparison of the others before it.
        """
        results, failed, errors = [], [], []
        shared = shared_overrides(job_overrides)
        for idx, (job, overrides) in enumerate(
            zip(jobs, job_overrides, strict=True), start=initial_job_idx
        ):
            outcome = _outcome(job)
            if isinstance(outcome, JobReturn):
                results.append(outcome)
                continue
            errors.append(outcome.error)
            line = (
                f"job {idx} ({own_overrides(overrides, shared)}): {outcome.words.rstrip('.')}; "
                f"run dir {self._job_dir(overrides, idx)}; log {job.paths.stderr}"
            )
            failed.append(line)
        if failed:
            sweep_dir = self.config.hydra.sweep.dir if self.config is not None else "?"
            report = unfinished_report(failed, len(jobs), sweep_dir, "did not finish", errors)
            raise UnfinishedJobsError(report, failed, len(jobs), errors)
        return results

    def _job_dir(self, overrides: Sequence[str], idx: int) -> str:
        """A job's run directory, resolved as the job resolved it (``hydra.sweep.subdir``)."""
        assert self.config is not None and self.hydra_context is not None
        try:
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(cfg.hydra.job):
                cfg.hydra.job.num = idx
            return str(Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir))
        except Exception:  # an unusual subdir: the default layout is still a good pointer
            return str(Path(str(self.config.hydra.sweep.dir)) / str(idx))


def _still_running(job_ids: Sequence[str]) -> str:
    """The line of a SIGTERM to the sweep while it waits for its SLURM jobs ``job_ids``:
    submitit does not cancel them, so they run on, and the user needs their ids."""
    ids = " ".join(job_ids)
    return (
        "while waiting for its SLURM jobs, which still run on the cluster: squeue -j "
        f"{','.join(job_ids)} shows them, scancel {ids} stops them; their run directories "
        "keep what each saves (metrics.json where it finishes)."
    )


# What a task's allocation follows (conf/hydra/launcher/slurm.yaml: nodes, tasks and GPUs
# per node). The array job has one allocation for every task, sized from the sweep's
# common config, before any job's own overrides apply.
ALLOCATION_KEYS = ("trainer", "trainer.num_nodes", "trainer.devices", "trainer.accelerator")


def _check_one_allocation(job_overrides: Sequence[Sequence[str]]) -> None:
    """Refuse a sweep whose jobs differ in what the allocation follows: some would run on
    the allocation of another (``trainer.num_nodes=1,2`` submitted every task with
    ``--nodes=1``)."""
    varying = []
    for key in ALLOCATION_KEYS:
        values = [_value(key, overrides) for overrides in job_overrides]
        if len(set(values)) > 1:
            varying.append(f"{key}={','.join(dict.fromkeys(v or '(default)' for v in values))}")
    if varying:
        raise UserError(
            f"hydra/launcher=slurm submits the sweep as one array job, whose tasks all get "
            f"the same nodes, tasks and GPUs, from the settings every job shares; "
            f"{' and '.join(varying)} would run jobs on another job's allocation. Run one "
            "sweep per value."
        )


def _value(key: str, overrides: Sequence[str]) -> str | None:
    """The value a job's overrides give ``key`` (the last one), or None."""
    found = None
    for override in overrides:
        name, sep, value = override.lstrip("+~").partition("=")
        if name == key and sep:
            found = value
    return found


def _check_tools() -> None:
    missing = [tool for tool in ("sbatch", "srun") if shutil.which(tool) is None]
    if missing:
        raise UserError(
            f"hydra/launcher=slurm submits jobs with SLURM's `sbatch` and `srun`; "
            f"{' and '.join(missing)} is not on PATH here. Run the sweep on a machine of "
            "the cluster (a login node), or try it on this machine with "
            "hydra/launcher=local."
        )


def _slurm_states(jobs: Sequence[Any]) -> dict[str, str] | None:
    """SLURM's state of each job (``"42_1"``: ``"RUNNING"``); jobs it no longer lists are left
    out. Asks ``squeue``, else submitit (``sacct``); None where neither can answer."""
    arrays = sorted({job.job_id.split("_")[0] for job in jobs})
    cmd = ["squeue", "--noheader", "--array", "--states=all", "--format=%i|%T"]
    try:
        out = subprocess.run(
            [*cmd, f"--jobs={','.join(arrays)}"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        try:
            return {job.job_id: job.get_info(mode="force").get("State", "") for job in jobs}
        except Exception:
            return None
    states = {}
    for line in out.splitlines():
        job_id, _, state = line.strip().partition("|")
        states[job_id] = state.split()[0] if state else ""
    return states


def _note_sigterm() -> threading.Event:
    """An event set when this process gets SIGTERM; the handler before (submitit's) still
    runs, and Lightning, which installs its own during training, keeps calling this one."""
    seen = threading.Event()
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: Any) -> None:
        seen.set()
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:  # not under submitit: die as before
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)
    return seen


class JobFailure(NamedTuple):
    """Why a job did not complete: in a few words, and the exception its own code raised
    (None where it ended otherwise: outside Hydra's job, or without a result)."""

    words: str
    error: BaseException | None = None


def _outcome(job: Any) -> JobReturn | JobFailure:
    """The job's JobReturn if it completed, else why not (rank 0's, where the job has several
    tasks, as Hydra's submitit launcher takes)."""
    job = job.task(0)
    if not job.paths.result_pickle.exists():
        states = _slurm_states([job]) or {}
        state = states.get(job.job_id, "no longer listed by squeue")
        return JobFailure(f"ended without a result (SLURM state {state})")
    # submitit's own: ("success", the task's JobReturn) or ("error", the traceback)
    outcome, value = job._get_outcome_and_result()
    if outcome == "error":  # the process died outside Hydra's job (e.g. in submitit)
        lines = [x for x in str(value).strip().splitlines() if x.strip()]
        return JobFailure(f"failed: {lines[-1].strip() if lines else 'no traceback'}")
    if value.status == JobStatus.FAILED:
        err = value._return_value
        return JobFailure(f"failed: {type(err).__name__}: {first_line(err)}", err)
    return value
