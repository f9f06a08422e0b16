"""SIGTERM outside SLURM (scancel, docker stop, a preemption): the run saves last.ckpt at its
step, exits with 143 and names the command that continues it; a sweep says which job."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from cloudlstm.cli.sigterm_at_start import JOBS_BEGUN
from cloudlstm.rundir.checkpoints import check_checkpoint
from cloudlstm.rundir.stops import EXIT_CODE, RunInterrupted
from tests.conftest import (
    PYTHON,
    ROOT,
    TINY,
    as_in_a_terminal,
    ctrl_c_as_in_a_terminal,
    run_python,
    subprocess_env,
)

# TINY: 3 training steps an epoch, validation and last.ckpt at each epoch's end
JOB = [*TINY, "logger=csv", "torch_threads=1"]
# Hold training before batch 1 of epoch 1 (global step 4) until <run dir>/go exists
GATE = [
    "+callbacks.gate._target_=tests.kill_callback.WaitAt",
    "+callbacks.gate.epoch=1",
    "+callbacks.gate.batch=1",
    "+callbacks.gate.until=${paths.output_dir}/go",
]


def start(args: list[str], log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(
            [*PYTHON, "train.py", *args],
            cwd=ROOT, env=subprocess_env(), stdout=out, stderr=subprocess.STDOUT,
            preexec_fn=as_in_a_terminal,
        )  # fmt: skip


def wait_for(path: Path, proc: subprocess.Popen, log: Path, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{path} did not appear: {log.read_text()[-3000:]}")
        time.sleep(0.2)


def quoted_command(text: str, stop: str = "SIGTERM") -> list[str]:
    """The arguments of ``python`` in the command between backticks in the line of the
    interruption by ``stop`` (``train.py ...``)."""
    (line,) = [x for x in text.splitlines() if f"interrupted by {stop}" in x]
    command = shlex.split(line.split("`")[1])
    assert command[:2] == ["python", "train.py"], line
    return command[1:]


def test_sigterm_saves_the_step_exits_143_and_the_printed_command_resumes(tmp_path):
    run_dir, log = tmp_path / "run", tmp_path / "train.log"
    args = [*JOB, *GATE, f"hydra.run.dir={run_dir}", f"paths.data_dir={tmp_path / 'data'}"]
    proc = start(args, log)
    wait_for(run_dir / "go.waiting", proc, log)
    proc.send_signal(signal.SIGTERM)  # the gate lets batch 1 run: step 5 is the last one
    assert proc.wait(timeout=300) == EXIT_CODE == 143, log.read_text()[-3000:]

    out = log.read_text()
    last = run_dir / "checkpoints" / "last.ckpt"
    assert check_checkpoint(last)["global_step"] == 5  # the step the signal came in
    assert (run_dir / "checkpoints" / "last.ckpt.checksum").is_file()
    assert not (run_dir / "metrics.json").exists(), "metrics.json marks a finished run"
    assert "Traceback" not in out
    assert f"Run interrupted by SIGTERM at step 5: saved {last}." in out
    assert f"hydra.run.dir={run_dir}" in out and "continues from it (resume=auto)" in out
    assert "interrupted by SIGTERM" in (run_dir / "train.log").read_text()

    (run_dir / "go").touch()  # the gate, part of the command, lets the resumed run through
    command = quoted_command(out)
    # the very command (Hydra's overrides after the others), interpolations as given
    assert command[0] == "train.py" and sorted(command[1:]) == sorted(args)
    done = run_python(*command, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["resumed_from"] == "checkpoints/last.ckpt"
    assert (metrics["epochs"], metrics["steps"]) == (2, 6)

    # a step checkpoint: the run ends as one never stopped, bit for bit
    whole_dir = tmp_path / "whole"
    whole = [*JOB, f"hydra.run.dir={whole_dir}", f"paths.data_dir={tmp_path / 'data'}"]
    done = run_python("train.py", *whole, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    expected = json.loads((whole_dir / "metrics.json").read_text())
    assert (metrics["test"], metrics["val"]) == (expected["test"], expected["val"])


def test_ctrl_c_stops_at_the_step_with_its_checkpoint_and_the_line_to_resume(tmp_path):
    """Ctrl-C, as SIGTERM: last.ckpt of the step under way, one line, status 130; the
    printed command finishes the run."""
    run_dir, log = tmp_path / "run", tmp_path / "train.log"
    args = [*JOB, *GATE, f"hydra.run.dir={run_dir}", f"paths.data_dir={tmp_path / 'data'}"]
    proc = start(args, log)
    wait_for(run_dir / "go.waiting", proc, log)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=300) == 130, log.read_text()[-3000:]

    out = log.read_text()
    last = run_dir / "checkpoints" / "last.ckpt"
    assert check_checkpoint(last)["global_step"] == 5
    assert not (run_dir / "metrics.json").exists()
    assert "Traceback" not in out and "KeyboardInterrupt" not in out
    (said,) = [x for x in out.splitlines() if "Ctrl-C: the run stops at the end" in x]
    assert "[rank" not in said  # one process: no rank to name
    assert f"Run interrupted by Ctrl-C at step 5: saved {last}." in out
    command = quoted_command(out, stop="Ctrl-C")
    (run_dir / "go").touch()
    done = run_python(*command, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["resumed_from"] == "checkpoints/last.ckpt" and metrics["steps"] == 6


@pytest.mark.parametrize(
    ("signum", "status", "by"), [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")]
)
def test_a_signal_as_the_fit_ends_names_the_checkpoint_and_the_command_that_tests(
    tmp_path, signum, status, by
):
    """Ctrl-C after the last training step, as the fit ends and before the test begins
    (training's handler put back): Lightning's shutdown said "Detected KeyboardInterrupt"
    and the run ended with status 1 and no line. Now the run's line names its newest
    checkpoint and the command that finishes it, 130; that command tests it. SIGTERM
    there, the same, 143."""
    run_dir, log = tmp_path / "run", tmp_path / "train.log"
    hold = [
        "+callbacks.hold._target_=tests.kill_callback.WaitAtFitEnd",
        "+callbacks.hold.until=${paths.output_dir}/go",
    ]
    args = [*JOB, *hold, f"hydra.run.dir={run_dir}", f"paths.data_dir={tmp_path / 'data'}"]
    proc = start(args, log)
    wait_for(run_dir / "go.waiting", proc, log)
    proc.send_signal(signum)
    assert proc.wait(timeout=300) == status, log.read_text()[-3000:]

    out = log.read_text()
    last = run_dir / "checkpoints" / "last.ckpt"
    assert "Traceback" not in out and not (run_dir / "metrics.json").exists()
    assert (
        f"Run interrupted by {by} at step 6: not saved; the newest checkpoint is {last}, "
        "of step 6" in out
    ), out[-3000:]
    command = quoted_command(out, stop=by)
    (run_dir / "go").touch()
    done = run_python(*command, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == 6 and "mae" in metrics["test"]["overall"]


@pytest.mark.slow  # a training of ~20 s, a variant of the Ctrl-C test above
def test_a_second_ctrl_c_stops_at_once_naming_the_newest_checkpoint(tmp_path):
    run_dir, log = tmp_path / "run", tmp_path / "train.log"
    args = [*JOB, *GATE, f"hydra.run.dir={run_dir}", f"paths.data_dir={tmp_path / 'data'}"]
    proc = start(args, log)
    wait_for(run_dir / "go.waiting", proc, log)
    proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + 60
    while "Ctrl-C: the run stops" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)  # the gate still holds the step: no step ends
    assert proc.wait(timeout=300) == 130, log.read_text()[-3000:]

    out = log.read_text()
    last = run_dir / "checkpoints" / "last.ckpt"
    assert check_checkpoint(last)["global_step"] == 3  # epoch 0's, untouched
    assert "Traceback" not in out
    assert (
        f"Run interrupted by Ctrl-C at step 4: not saved; the newest checkpoint is {last}, "
        "of step 3." in out
    )


def test_after_a_second_ctrl_c_the_process_still_takes_ctrl_c(tiny_cfg):
    """Lightning's shutdown at once leaves SIGINT ignored: a process that goes on (a
    notebook's kernel, a script training models in turn) could no longer be interrupted."""
    from cloudlstm.cli.train import train

    cfg = tiny_cfg(
        "logger=none",
        *[
            f"+callbacks.{name}.{key}={value}"
            for name in ("first", "again")
            for key, value in [
                ("_target_", "tests.kill_callback.SigtermAt"), ("epoch", 1), ("batch", 0),
                ("signum", int(signal.SIGINT)),
            ]
        ],
    )  # fmt: skip
    with ctrl_c_as_in_a_terminal():
        with pytest.raises(RunInterrupted) as err:
            train(cfg)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert err.value.exit_code == 130
    assert "interrupted by Ctrl-C at step 3" in str(err.value)


@pytest.mark.slow  # a training of ~20 s, a variant of the Ctrl-C test above
def test_a_run_that_ignores_ctrl_c_goes_on(tmp_path):
    """Started with SIGINT ignored (``cmd &`` in a script), as Python leaves it: a Ctrl-C
    sent to the process group stops nothing."""
    run_dir, log = tmp_path / "run", tmp_path / "train.log"
    args = [*JOB, *GATE, f"hydra.run.dir={run_dir}", f"paths.data_dir={tmp_path / 'data'}"]
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*PYTHON, "train.py", *args],
            cwd=ROOT, env=subprocess_env(), stdout=out, stderr=subprocess.STDOUT,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )  # fmt: skip
    wait_for(run_dir / "go.waiting", proc, log)
    proc.send_signal(signal.SIGINT)
    time.sleep(1)
    (run_dir / "go").touch()
    assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    assert json.loads((run_dir / "metrics.json").read_text())["steps"] == 6
    assert "Ctrl-C" not in log.read_text()


def test_the_command_of_a_run_without_a_run_dir_names_it(tmp_path, tiny_cfg):
    """The default run directory is a new one each time: the command names this one, and
    resume=never becomes resume=auto."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import read_write

    from cloudlstm.rundir.stops import continuation

    cfg = tiny_cfg("resume=never")
    hydra = HydraConfig.get()
    with read_write(hydra):
        hydra.overrides.hydra = ["hydra.mode=RUN", "hydra.job.chdir=false"]
        hydra.overrides.task = ["model.k=3", "resume=never", "+x=${paths.output_dir}/go"]
    line = continuation(tmp_path / "run", cfg)
    command = shlex.split(line.split("`")[1])
    assert command[2:] == [
        "model.k=3", "+x=${paths.output_dir}/go", "resume=auto", "hydra.job.chdir=false",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]  # fmt: skip


def test_a_stopped_trial_of_an_optuna_search_is_continued_by_the_search(
    tmp_path, tiny_cfg, monkeypatch
):
    """A sweep's job that is an Optuna trial: trained alone, its result would never reach
    the study, so the line gives the search's command first, and says what alone would
    not do; a job of an ordinary sweep keeps both ways as equals."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import read_write

    from cloudlstm.engine.trial_env import STORAGE_ENV, STUDY_ENV, TRIAL_ENV
    from cloudlstm.rundir.stops import continuation

    cfg = tiny_cfg()
    hydra = HydraConfig.get()
    with read_write(hydra):
        hydra.mode = RunMode.MULTIRUN
        hydra.sweep.dir = str(tmp_path / "search")
        hydra.overrides.task = ["model.k=3"]
    run_dir = tmp_path / "search" / "2"
    plain = continuation(run_dir, cfg, "continues from it")
    assert "` continues from it alone, or the sweep's command with hydra.sweep.dir=" in plain

    for name, value in ((STORAGE_ENV, "sqlite:///x.db"), (STUDY_ENV, "s"), (TRIAL_ENV, "7")):
        monkeypatch.setenv(name, value)
    line = continuation(run_dir, cfg, "continues from it")
    assert line.startswith(
        f"Run dir {run_dir}: the search's command with hydra.sweep.dir={tmp_path / 'search'} "
        "continues from it as Optuna trial 7, which its study keeps running, and tells the "
        "study its result (`"
    )
    assert line.endswith(
        f"hydra.run.dir={run_dir}` would train it alone, and the study would never hear of it)."
    )
    assert "\n" not in line


def test_sigterm_at_the_last_step_saves_it_and_the_run_validates_it_when_continued(tiny_cfg):
    """Lightning would resume a checkpoint of that step past its validation, unrun: the one
    saved resumes into it (tests/test_preemption_validation.py compares the outcomes)."""
    from cloudlstm.cli.train import train

    cfg = tiny_cfg(
        "logger=none",
        "+callbacks.term._target_=tests.kill_callback.SigtermAt",
        "+callbacks.term.epoch=1",
        "+callbacks.term.batch=2",  # epoch 1's last step, validated after
    )
    with pytest.raises(RunInterrupted) as err:
        train(cfg)
    last = Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == 6
    assert f"interrupted by SIGTERM at step 6: saved {last}." in str(err.value)
    assert "\n" not in str(err.value)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # Lightning's handler is gone
    finished = train(cfg)
    assert finished["steps"] == 6 and finished["val"]["val/mae"] == finished["selection"]["score"]


def signalled_after_step(tiny_cfg, epoch: int, batch: int, signum: int = signal.SIGTERM):
    """The config of a tiny run signalled at the end of training batch ``batch`` of epoch
    ``epoch``, after the step's end hooks (``SignalAfterStep``), and its stop."""
    from cloudlstm.cli.train import train

    cfg = tiny_cfg(
        "logger=none",
        "+callbacks.after._target_=tests.kill_callback.SignalAfterStep",
        f"+callbacks.after.epoch={epoch}",
        f"+callbacks.after.batch={batch}",
        f"+callbacks.after.signum={int(signum)}",
    )
    with ctrl_c_as_in_a_terminal(), pytest.raises(RunInterrupted) as err:
        train(cfg)
    return cfg, str(err.value)


@pytest.mark.parametrize(("signum", "by"), [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "Ctrl-C")])
def test_a_signal_just_after_the_checkpoint_hook_saves_the_next_step(tiny_cfg, signum, by):
    """A signal after ``SignalsTogether``'s step-end hook had run (Lightning's handler set
    its flag there, and the run stopped without the step's checkpoint) is acted on at the
    next step's end."""
    cfg, stop = signalled_after_step(tiny_cfg, epoch=1, batch=0, signum=signum)  # step 4
    last = Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == 5
    assert f"interrupted by {by} at step 5: saved {last}." in stop


def test_a_signal_after_an_epoch_s_last_step_saves_the_next_epoch_s_first(tiny_cfg):
    """After the epoch's last step had ended: its validation runs whole, and the run stops
    at the end of the next step, with its checkpoint, from which it finishes as it would."""
    from cloudlstm.cli.train import train

    cfg, stop = signalled_after_step(tiny_cfg, epoch=0, batch=2)  # step 3, validated after
    last = Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == 4
    assert f"interrupted by SIGTERM at step 4: saved {last}." in stop
    resumed = train(cfg)  # the same command: the signal came in epoch 0, which is done
    assert resumed["resumed_from"] == "checkpoints/last.ckpt" and (
        resumed["epochs"],
        resumed["steps"],
    ) == (2, 6)


def test_a_signal_after_the_last_training_step_stops_the_testing(tiny_cfg):
    """No step is left to stop at: the testing that follows stops, and the run is not
    finished (no metrics.json); continued, it tests."""
    from cloudlstm.cli.train import train

    cfg, stop = signalled_after_step(tiny_cfg, epoch=1, batch=2)  # step 6, the last
    run_dir = Path(cfg.paths.output_dir)
    last = run_dir / "checkpoints" / "last.ckpt"  # the last validation's
    assert f"at step 6: not saved; the newest checkpoint is {last}, of step 6" in stop
    assert not (run_dir / "metrics.json").exists()
    finished = train(cfg)
    assert finished["steps"] == 6 and "mae" in finished["test"]["overall"]


@pytest.mark.slow
def test_a_sigtermed_job_of_a_joblib_sweep_fails_the_sweep_and_continues(tmp_path):
    """Job 1 gets SIGTERM, job 0 finishes: the sweep exits non-zero with job 1's line; the
    same sweep command, started again in its directory, resumes job 1 only."""
    sweep, log = tmp_path / "sweep", tmp_path / "sweep.log"
    args = [
        "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep}",
        f"paths.data_dir={tmp_path / 'data'}",
        *[a for a in JOB if not a.startswith("model.k=")], "model.k=2,3", *GATE,
    ]  # fmt: skip
    (sweep / "0").mkdir(parents=True)
    (sweep / "0" / "go").touch()  # job 0 passes its gate, job 1 waits at it
    proc = start(args, log)
    wait_for(sweep / "1" / "go.waiting", proc, log)
    job_pid = json.loads((sweep / "1" / "run.lock").read_text())["pid"]
    assert job_pid != proc.pid, "joblib runs the job in a process of its own"
    os.kill(job_pid, signal.SIGTERM)
    code = proc.wait(timeout=300)
    out = log.read_text()
    assert code != 0, out[-3000:]
    assert (sweep / "0" / "metrics.json").is_file()
    assert not (sweep / "1" / "metrics.json").exists()
    assert check_checkpoint(sweep / "1" / "checkpoints" / "last.ckpt")["global_step"] == 5
    # the sweep's report of its failed job, after the comparison: the job's own line
    lines = [x for x in out.splitlines() if "job 1 (model.k=3): Job 1 of the sweep, interr" in x]
    assert lines, out[-3000:]
    assert f"Run dir {sweep / '1'}:" in lines[-1] and "model.k=3" in lines[-1]
    assert f"hydra.sweep.dir={sweep}" in lines[-1]
    assert "Traceback" not in out

    (sweep / "1" / "go").touch()
    again = start(args, tmp_path / "again.log")
    assert again.wait(timeout=600) == 0, (tmp_path / "again.log").read_text()[-3000:]
    metrics = json.loads((sweep / "1" / "metrics.json").read_text())
    assert metrics["resumed_from"] == "checkpoints/last.ckpt"
    assert metrics["steps"] == 6


def ctrl_c_sweep(
    tmp_path: Path, *more: str, ks: str = "2,3"
) -> tuple[list[str], subprocess.Popen, Path]:
    """A sweep of a job per K of ``ks`` (two) under the basic launcher, started as from a
    terminal, with ``more`` arguments (a gate or a hold); returned once it runs: its
    arguments, process and log."""
    sweep, log = tmp_path / "sweep", tmp_path / "sweep.log"
    sweep.mkdir(exist_ok=True)
    args = [
        "-m", f"hydra.sweep.dir={sweep}", f"paths.data_dir={tmp_path / 'data'}",
        *[a for a in JOB if not a.startswith("model.k=")], f"model.k={ks}", *more,
    ]  # fmt: skip
    return args, start(args, log), log


def gated(sweep: Path, gate: str) -> list[str]:
    """Job 1 of a sweep waits at ``gate`` (tests/test_optuna_search.py's GATES) until
    ``<sweep>/go_1`` exists; job 0 goes on at once."""
    from tests.test_optuna_search import GATES

    (sweep / "go_0").touch()
    return [*GATES[gate], f"+callbacks.gate.until={sweep}/go_${{hydra:job.num}}"]


def stopped_at(
    waiting: Path, proc: subprocess.Popen, log: Path, signum: int = signal.SIGINT
) -> list[str]:
    """Signal ``signum`` (Ctrl-C's) to the sweep once file ``waiting`` exists: its lines,
    once it has ended with the signal's status (130, 143) and without a traceback."""
    wait_for(waiting, proc, log)
    proc.send_signal(signum)
    status = 130 if signum == signal.SIGINT else EXIT_CODE
    assert proc.wait(timeout=300) == status, log.read_text()[-3000:]
    out = log.read_text()
    assert "Traceback" not in out
    return out.splitlines()


SWEEP_GOES_ON = "(finished jobs return their results at once)."


def stopped_in_job_1_after_comparing(lines: list[str], sweep: Path, stop: str, by: str) -> None:
    """Assert a sweep's lines end as one stopped in job 1 does: the job's line (holding
    ``stop``), then the comparison, then the sweep's two lines naming ``by``."""
    (row,) = [i for i, line in enumerate(lines) if line.startswith("| cloudlstm | synthetic |")]
    (job,) = [i for i, line in enumerate(lines) if "Job 1 of the sweep, " in line]
    assert stop in lines[job] and job < row < len(lines) - 2, lines[-30:]
    assert lines[-2].endswith(f"The sweep got {by} in job 1, as the job's line above says.")
    assert lines[-1] == (
        f"Start the same command with hydra.sweep.dir={sweep} to continue it and run the jobs "
        f"after it {SWEEP_GOES_ON}"
    )


@pytest.mark.slow  # two jobs, then the second again: about 30 s
@pytest.mark.parametrize("gate", ["built", "training"])
def test_ctrl_c_to_a_basic_sweep_compares_its_finished_jobs_and_says_how_to_go_on(tmp_path, gate):
    """Ctrl-C in job 1 of a sweep the basic launcher runs (its data read, or in its
    training): the sweep ended with the job's line (or ``train.py: stopped by Ctrl-C.``)
    and nothing else, without the comparison of job 0, which had finished. Now the
    comparison, then the sweep's lines naming the job and the command that goes on, 130;
    that command finishes the sweep."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    args, proc, log = ctrl_c_sweep(tmp_path, *gated(sweep, gate))
    lines = stopped_at(sweep / "go_1.waiting", proc, log)
    stopped_in_job_1_after_comparing(lines, sweep, "by Ctrl-C", "Ctrl-C")

    (sweep / "go_1").touch()
    assert start(args, tmp_path / "again.log").wait(timeout=300) == 0
    assert (sweep / "1" / "metrics.json").is_file()


@pytest.mark.slow  # two jobs, then the second: about 25 s
@pytest.mark.parametrize(("signum", "by"), [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")])
def test_a_signal_to_a_basic_sweep_between_its_jobs_compares_and_says_how_to_go_on(
    tmp_path, signum, by
):
    """Ctrl-C (or SIGTERM, which ended the sweep with train.py's line alone) as job 0 ends
    (Hydra's end of a job, outside its task): the comparison of job 0, then the sweep's
    lines, 130 (143)."""
    sweep = tmp_path / "sweep"
    hold = [
        "+hydra.callbacks.hold._target_=tests.kill_callback.WaitAtJobEnd",
        f"+hydra.callbacks.hold.until={sweep}/ended",
    ]
    _, proc, log = ctrl_c_sweep(tmp_path, *hold)
    lines = stopped_at(sweep / "ended_0.waiting", proc, log, signum)
    assert any(line.startswith("| cloudlstm | synthetic |") for line in lines), lines[-30:]
    assert lines[-2].endswith(f"The sweep got {by} outside its jobs, after job 0 had begun.")
    assert lines[-1] == (
        f"Start the same command with hydra.sweep.dir={sweep} to run its unfinished jobs "
        f"{SWEEP_GOES_ON}"
    )
    assert not (sweep / "1").exists()


@pytest.mark.slow  # two jobs: about 25 s
def test_sigterm_stops_a_basic_sweep_at_its_job_with_143(tmp_path):
    """The basic launcher runs the jobs in its own process, which got the signal: the sweep
    stops there, with the job's line, and the jobs after it do not start. It ended with
    that line alone, without the comparison of job 0, which had finished; now the
    comparison, then the sweep's lines naming SIGTERM, the job and the command that goes
    on, 143, as after Ctrl-C."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    _, proc, log = ctrl_c_sweep(tmp_path, *gated(sweep, "training"), ks="2,3,4")
    lines = stopped_at(sweep / "go_1.waiting", proc, log, signal.SIGTERM)
    stopped_in_job_1_after_comparing(lines, sweep, "interrupted by SIGTERM", "SIGTERM")
    assert not (sweep / "2").exists()


@pytest.mark.slow  # one job and a second: about 20 s
@pytest.mark.parametrize(
    ("signum", "status", "by"), [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")]
)
def test_a_second_signal_during_the_comparison_of_a_stopped_sweep_ends_it_at_once(
    tmp_path, signum, status, by
):
    """The comparison after a Ctrl-C (SIGTERM) can take a while (many runs, W&B): a second
    one then ends the program at once, with its one line and 130 (143), without the sweep's
    lines."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    hold = [
        "+hydra.callbacks.hold._target_=tests.kill_callback.WaitAtMultirunEnd",
        f"+hydra.callbacks.hold.until={tmp_path / 'compared'}",
    ]
    _, proc, log = ctrl_c_sweep(tmp_path, *gated(sweep, "training"), *hold)
    wait_for(sweep / "go_1.waiting", proc, log)
    proc.send_signal(signum)
    wait_for(tmp_path / "compared.waiting", proc, log)
    proc.send_signal(signum)
    assert proc.wait(timeout=60) == status, log.read_text()[-3000:]
    out = log.read_text()
    assert "Traceback" not in out and f"The sweep got {by}" not in out
    assert f"interrupted by {by} at step" in out  # the first one's, of job 1
    assert out.splitlines()[-1] == f"train.py: stopped by {by} {JOBS_BEGUN}"
