"""What a run or a sweep's job stopped by SIGTERM or Ctrl-C says, and its exit status: the
part of :mod:`cloudlstm.rundir.preemption` that needs neither torch nor Lightning.

A joblib sweep's worker reads a stop before its job trains
(:func:`cloudlstm.rundir.sweep_sigterm.stopped_before_training`) and should not first spend
the seconds that importing torch and Lightning take (tens of seconds on a loaded machine,
where a batch system's grace period after SIGTERM is 20-30 s); so this module imports only
the standard library (a checkpoint's step is read by
:func:`cloudlstm.rundir.layout.checkpoint_step`, which loads torch when it is called).
"""

from __future__ import annotations

import shlex
import signal
import sys
from pathlib import Path
from typing import Any

from cloudlstm.engine.trial_env import named_trial
from cloudlstm.errors import UserError

EXIT_CODE = 128 + signal.SIGTERM  # 143, what a shell reports for a process ended by SIGTERM


CTRL_C_EXIT_CODE = 128 + signal.SIGINT  # 130, what a shell reports after Ctrl-C


class RunInterrupted(UserError):
    """A training stopped by SIGTERM or Ctrl-C: the message names its checkpoint and how
    to go on; ``exit_code`` is the status the program leaves with."""

    rerun_may_pass = True  # the same command continues it

    def __init__(self, message: str, exit_code: int = EXIT_CODE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def stop_error(what: str, run_dir: Path, cfg: Any, goes_on: str, by: str) -> RunInterrupted:
    """The error of a run (or a sweep's job) stopped by ``by`` ("SIGTERM" or "Ctrl-C"):
    who stopped (:func:`who_stopped`), ``what`` happened, and the command that ``goes_on``
    (:func:`continuation`), with the signal's exit status."""
    message = f"{who_stopped().capitalize()}{what} {continuation(run_dir, cfg, goes_on)}"
    return RunInterrupted(message, CTRL_C_EXIT_CODE if by == "Ctrl-C" else EXIT_CODE)


def who_stopped() -> str:
    """``job <n> of the sweep, `` under a multirun, else nothing."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return f"job {HydraConfig.get().job.num} of the sweep, "
    return "run "


def continuation(run_dir: Path, cfg: Any, goes_on: str = "continues it") -> str:
    """How to continue the run in ``run_dir``, as commands to copy (resume=auto)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    if not HydraConfig.initialized():  # train() called from Python
        return f"Run dir {run_dir}: training with paths.output_dir={run_dir} {goes_on}."
    hydra = HydraConfig.get()
    # as given: an interpolation in an override stays one
    given = OmegaConf.to_container(hydra.overrides, resolve=False)
    task = [o for o in given["task"] if o.lstrip("+~").split("=")[0] != "resume"]
    if str(cfg.get("resume", "auto")) != "auto":
        task.append("resume=auto")  # never, or an older checkpoint, would not continue it
    if hydra.mode == RunMode.MULTIRUN:
        alone = shlex.join([*program(), *task, f"hydra.run.dir={run_dir}"])
        trial = named_trial()
        if trial is not None:  # only the search's command tells the study what the job gives
            return (
                f"Run dir {run_dir}: the search's command with hydra.sweep.dir="
                f"{hydra.sweep.dir} {goes_on} as Optuna trial {trial[2]}, which its study "
                f"keeps running, and tells the study its result (`{alone}` would train it "
                "alone, and the study would never hear of it)."
            )
        return (
            f"Run dir {run_dir}: `{alone}` {goes_on} alone, or the sweep's command with "
            f"hydra.sweep.dir={hydra.sweep.dir} runs its unfinished jobs (finished ones "
            "return their results at once)."
        )
    kept = [o for o in given["hydra"] if o.split("=")[0] not in ("hydra.mode", "hydra.run.dir")]
    command = shlex.join([*program(), *task, *kept, f"hydra.run.dir={run_dir}"])
    return f"Run dir {run_dir}: `{command}` {goes_on} (resume=auto)."


def program() -> list[str]:
    """The command that started training: ``cloudlstm-train`` or ``python <train.py>``."""
    name = Path(sys.argv[0]).name
    if name == "cloudlstm-train":
        return [name]
    return ["python", sys.argv[0] if name == "train.py" else "train.py"]
