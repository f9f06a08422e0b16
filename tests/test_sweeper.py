"""A sweep whose jobs fail runs every job, compares the finished ones and names each failed
job in one line (the default sweeper, hydra_plugins.cloudlstm_sweeper)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf

from cloudlstm.cli.sweep_jobs import pool_break_cause, pool_broken_report, unfinished_report
from cloudlstm.errors import UserError
from hydra_plugins.cloudlstm_sweeper import _failure
from tests.conftest import PYTHON, ROOT, TINY, one_line, subprocess_env

QUIET = ["logger=csv", "report.figures=false", "torch_threads=1", "trainer.max_epochs=1"]


def sweep(tmp_path: Path, *args: str, launcher: str = "joblib") -> subprocess.CompletedProcess:
    base = [a for a in TINY if not a.startswith("trainer.max_epochs")]
    parallel = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"] if launcher == "joblib" else []
    cmd = [
        *PYTHON, "train.py", "-m", *base, *QUIET, *parallel,
        f"hydra.sweep.dir={tmp_path / 'sweep'}", f"paths.data_dir={tmp_path / 'data'}", *args,
    ]  # fmt: skip
    env = subprocess_env()
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # a sweep of three jobs in processes of their own: about 35 s
def test_every_failed_job_of_a_joblib_sweep_is_named_and_the_finished_one_compared(tmp_path):
    done = sweep(tmp_path, "optimizer.lr=-1,1e-3,-2")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    assert "Traceback" not in out
    root = tmp_path / "sweep"
    assert (root / "1" / "metrics.json").is_file(), "the job between the failed ones ran"
    assert not (root / "0" / "metrics.json").exists() and not (root / "2" / "metrics.json").exists()
    assert "| cloudlstm | synthetic | 1 |" in out, "the finished job's comparison is printed"
    lines = out.splitlines()
    start = lines.index("2 of 3 jobs of the sweep failed:")
    jobs = lines[start + 1 : start + 3]
    for line, (job, lr) in zip(jobs, ((0, -1), (2, -2)), strict=True):
        log = root / str(job) / "train.log"
        assert line.startswith(f"  job {job} (optimizer.lr={lr}): optimizer (AdamW): Invalid ")
        assert line.endswith(f"; log {log}") and log.is_file()
    assert lines[start + 3] == (
        "Each job was refused as given: mend what its line names (the same command "
        "would be refused again)."
    ), "a learning rate below 0 is refused again by the same command"


@pytest.mark.parametrize(
    "launcher",
    ["basic", pytest.param("joblib", marks=pytest.mark.slow)],  # joblib: two processes, ~35 s
)
def test_one_failed_job_of_a_sweep_is_named_with_its_log_after_the_comparison(tmp_path, launcher):
    """Hydra's line of the one failed job listed its every override, not which job it was
    nor where its log is."""
    done = sweep(tmp_path, "optimizer.lr=1e-3,-1", launcher=launcher)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    assert "Traceback" not in out and "Error executing job" not in out
    assert "| cloudlstm | synthetic | 1 |" in done.stdout, "the finished job's comparison"
    log = tmp_path / "sweep" / "1" / "train.log"
    error = "optimizer (AdamW): Invalid learning rate: -1. Set a valid value of that optimizer"
    assert done.stderr.splitlines()[-3:] == [
        "1 of 2 jobs of the sweep failed:",
        f"  job 1 (optimizer.lr=-1): {error}.* key (optimizer.lr > 0, weight_decay >= 0, "
        f"betas in [0, 1)); log {log}",
        "Each job was refused as given: mend what its line names (the same command "
        "would be refused again).",
    ]
    assert error in log.read_text().splitlines()[-1]


def test_the_log_a_failed_job_is_named_with_holds_its_error(tmp_path):
    """A job refused before it trained had an empty log, which the report pointed to."""
    done = sweep(tmp_path, "+foo=1,2")
    out = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in out, out[-3000:]
    for job in (0, 1):
        log = tmp_path / "sweep" / str(job) / "train.log"
        error = (
            f"+foo={job + 1}: there is no top-level setting foo, so nothing would read it. "
            "Give a setting the config has, without the +: `python train.py --cfg job` "
            "prints the settings (Hydra takes --cfg without -m)"
        )
        assert f"  job {job} (+foo={job + 1}): {error}; log {log}" in out.splitlines()
        last = log.read_text().splitlines()[-1]
        assert last.endswith(f"][hydra_plugins.cloudlstm_sweeper][ERROR] - {error}."), last


def job_return(num: int, overrides: list[str], error: BaseException) -> JobReturn:
    hydra_cfg = OmegaConf.create(
        {"hydra": {"job": {"num": num}, "runtime": {"output_dir": f"/r/{num}"}}}
    )
    return JobReturn(
        overrides=overrides, cfg=OmegaConf.create({"task_name": "train"}), hydra_cfg=hydra_cfg,
        status=JobStatus.FAILED, _return_value=error,
    )  # fmt: skip


def test_a_one_job_sweep_fails_with_its_own_error_and_a_bug_keeps_its_traceback(caplog):
    launched = [["model.k=2", "seed=0"], ["model.k=3", "seed=0"]]
    alone = UserError("model.k=3 is not a number of neighbours")
    assert _failure([(job_return(0, launched[1], alone), alone)], launched[1:], "/s") is alone
    one_of_two = _failure([(job_return(1, launched[1], alone), alone)], launched, "/s")
    assert str(one_of_two).splitlines()[:2] == [
        "1 of 2 jobs of the sweep failed:",
        "  job 1 (model.k=3): model.k=3 is not a number of neighbours; run dir /r/1 (no log)",
    ]

    bug = RuntimeError("index out of range\nmore")
    failed = [(job_return(0, launched[0], alone), alone), (job_return(1, launched[1], bug), bug)]
    assert _failure(failed, launched, "/s") is bug, "a bug is raised as it is, with its traceback"
    (record,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert record.getMessage().splitlines()[:3] == [
        "2 of 2 jobs of the sweep failed:",
        "  job 0 (model.k=2): model.k=3 is not a number of neighbours; run dir /r/0 (no log)",
        "  job 1 (model.k=3): index out of range; run dir /r/1 (no log)",
    ]


def test_the_way_on_is_a_rerun_only_where_a_rerun_may_pass():
    """Jobs whose settings were refused would be refused again by the same command: the
    report says to mend them. One failure from outside the command (a full disk, a folder
    another run holds) keeps the rerun line, as does a failure whose error is unknown."""
    from cloudlstm.errors import OutOfSpaceError
    from cloudlstm.rundir.lock import RunDirHeld

    launched = [["+foo=1"], ["+foo=2"], ["+foo=3"]]
    refused = [UserError(f"+foo={n}: there is no top-level setting foo") for n in (1, 2, 3)]

    def last_line(errors: list[BaseException]) -> str:
        failed = [(job_return(n, launched[n], e), e) for n, e in enumerate(errors)]
        return str(_failure(failed, launched, "/s")).splitlines()[-1]

    assert last_line(refused) == (
        "Each job was refused as given: mend what its line names (the same command "
        "would be refused again)."
    )
    rerun = "Start the same command with hydra.sweep.dir=/s to run them again (finished jobs "
    for outside in (OutOfSpaceError("no room left in /r/2"), RunDirHeld("/r/2 is held")):
        assert last_line([*refused[:2], outside]).startswith(rerun), type(outside).__name__
    lines = unfinished_report(["job 0: ended without a result"], 1, "/s", "did not finish")
    assert lines.splitlines()[-1].startswith(rerun), "no error known: the rerun line"


@pytest.mark.parametrize("group", ["", "hparams_search=optuna"])
def test_the_reporting_sweeper_is_the_default_and_optuna_still_replaces_it(group):
    cmd = [
        *PYTHON,
        "train.py",
        *filter(None, [group]),
        "--cfg",
        "hydra",
        "-p",
        "hydra.sweeper",
    ]
    shown = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True)
    target = "cloudlstm_optuna.OptunaSweeper" if group else "cloudlstm_sweeper.ReportingSweeper"
    assert f"_target_: hydra_plugins.{target}\n" in shown.stdout, shown.stderr[-2000:]


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("hydra.launcher.n_jobs=0", "hydra.launcher.n_jobs=0: give how many jobs run at once"),
        ("hydra.launcher.backend=dask", "hydra.launcher.backend=dask: joblib's backends are "
                                        "loky, multiprocessing, sequential, threading"),
        ("hydra.launcher.prefer=fast", "hydra.launcher.prefer=fast: use processes or threads"),
        ("hydra.launcher.require=all", "hydra.launcher.require=all: use sharedmem, or null."),
    ],
)  # fmt: skip
def test_a_joblib_setting_joblib_refuses_is_one_line_before_any_job(tmp_path, setting, said):
    """joblib raised it with a traceback once the sweep had started."""
    done = sweep(tmp_path, "seed=1,2", setting)
    assert done.returncode == 1, done.stderr[-3000:]
    assert one_line(done).startswith(said)
    assert not list((tmp_path / "sweep").glob("*/metrics.json"))


def test_jobs_the_subdir_gives_one_directory_are_refused_before_any_runs(tmp_path):
    """The presets' model/seed_N subdir and a swept lr: job 0 trained, job 1 found job 0's
    run in its directory and was refused as a run of other settings, and allow_changes
    then gave a table of one row: the lr=3e-3 job never trained."""
    subdir = "${hydra:runtime.choices.model}/seed_${seed}"
    done = sweep(tmp_path, "optimizer.lr=1e-3,3e-3", f"hydra.sweep.subdir={subdir}")
    assert done.returncode == 1, done.stderr[-3000:]
    assert one_line(done) == (
        f"hydra.sweep.subdir={subdir} gives jobs 0 and 1 one directory, "
        f"{tmp_path / 'sweep' / 'cloudlstm' / 'seed_42'}: the later would resume or be "
        "refused instead of training optimizer.lr=0.003. Name what sets them apart in the "
        f"subdir (hydra.sweep.subdir='{subdir}/optimizer.lr_${{optimizer.lr}}'), or sweep "
        "them in a sweep directory of their own (protocol_tag=... in the presets)."
    )
    assert not (tmp_path / "sweep" / "cloudlstm").exists()


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("model.k=range(3,9,0)", "'model.k=range(3,9,0)' has a step of 0, which never "
                                 "reaches its stop; give a step other than 0, e.g. "
                                 "'model.k=range(3,9,1)'."),
        ("optimizer.lr=range(0.001,0.003,0.0)", "'optimizer.lr=range(0.001,0.003,0.0)' has a "
                                                "step of 0, which never reaches its stop; give "
                                                "a step other than 0, e.g. "
                                                "'optimizer.lr=range(0.001,0.003,0.001)'."),
        ("seed=range(4,4,0)", "'seed=range(4,4,0)' has a step of 0, and its stop is its start; "
                              "give the one value, seed=4, or a range with a step other than 0 "
                              "towards a stop beyond its start."),
    ],
)  # fmt: skip
def test_a_range_with_a_step_of_0_is_one_line(tmp_path, override, said):
    """Hydra's expansion raised range()'s ValueError, or its own HydraException naming the
    bounds in 50 digits, with a traceback."""
    done = sweep(tmp_path, "model=persistence", override)
    assert one_line(done) == f"the command line: {said}"
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("seed=range(5,1)", "'seed=range(5,1)' is an empty range (its stop is excluded): no "
                            "job would run; count towards its stop, e.g. 'seed=range(5,1,-1)'."),
        ("seed=range(3,3)", "'seed=range(3,3)' is an empty range (its stop is excluded): no "
                            "job would run; give the one value, seed=3, or a stop beyond its "
                            "start."),
        ("trainer=glob(zzz*)", "'trainer=glob(zzz*)' is an empty sweep: it matches no option "
                               "of trainer; name one of cpu, ddp, ddp_cpu, default, gpu."),
    ],
)  # fmt: skip
def test_a_sweep_of_no_value_is_one_line(tmp_path, override, said):
    """It launched 0 jobs and exited 0, as if the sweep had run."""
    done = sweep(tmp_path, "model=persistence", override)
    assert one_line(done) == f"the command line: {said}"
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize(
    ("subdir", "args", "job"),
    [
        ("${hydra:runtime.choices.model}_k${model.k}", ["model=persistence,cloudlstm",
                                                        "model.k=3"], "model=persistence"),
        ("${hydra.job.num}_${nonexistent}", ["seed=1,2"], "seed=1"),
    ],
)  # fmt: skip
def test_a_subdir_a_job_cannot_resolve_is_one_line_before_any_runs(tmp_path, subdir, args, job):
    """Persistence has no model.k: composing job 0's directory ended in OmegaConf's
    InterpolationKeyError, with a traceback of 42 frames (a numbered subdir: in the
    launcher's)."""
    done = sweep(tmp_path, *args, f"hydra.sweep.subdir={subdir}")
    key = subdir.rsplit("${", 1)[1].rstrip("}")
    assert one_line(done) == (
        f"hydra.sweep.subdir={subdir} cannot name the directory of job 0 ({job}): "
        f"Interpolation key '{key}' not found. Name in the subdir only settings every job "
        "has, or ${hydra.job.num}."
    )
    assert not (tmp_path / "sweep").exists()


def test_a_run_folder_name_the_file_system_refuses_is_one_line(tmp_path):
    """A subdir of ${hydra.job.override_dirname} over many overrides: Hydra's makedirs
    ended the sweep in a traceback (File name too long)."""
    name = "x" * 300
    done = sweep(tmp_path, "seed=1,2", f"hydra.sweep.subdir={name}_${{seed}}")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    line = one_line(done)
    job = line[len(f"Cannot make {tmp_path / 'sweep' / name}_") :][0]  # the first to fail
    assert job in "12" and line == (
        f"Cannot make {tmp_path / 'sweep' / name}_{job}: its name {name[:60]!r}... is 302 "
        "characters, more than the file system takes. Give hydra.run.dir or "
        "hydra.sweep.subdir a shorter name (e.g. the swept keys alone)."
    )


def test_a_broken_joblib_pool_is_explained_when_a_signal_or_a_worker_death_broke_it():
    """Why joblib's pool broke, where the sweep can say it (pool_break_cause): the signal the
    sweep got, or a worker's death as joblib reports it; a task that failed to unpickle in
    its worker is a bug, left to its traceback (None)."""
    from joblib.externals.loky.process_executor import BrokenProcessPool, TerminatedWorkerError

    killed = TerminatedWorkerError(
        "A worker process managed by the executor was unexpectedly terminated. ...\n\n"
        "The exit codes of the workers are {SIGKILL(-9)}"
    )
    crashed = TerminatedWorkerError("... The exit codes of the workers are {SIGSEGV(-11)}")
    unpickling = BrokenProcessPool("A task has failed to un-serialize.")
    assert pool_break_cause(killed, None) == (
        "a worker process died (SIGKILL(-9)): killed, by the machine's out-of-memory killer for one"
    )
    assert pool_break_cause(crashed, None) == "a worker process died (SIGSEGV(-11))"
    assert pool_break_cause(unpickling, None) is None
    assert pool_break_cause(unpickling, "Ctrl-C") == (
        "the sweep got Ctrl-C; a worker process it reached as it started died of it"
    )


def test_a_broken_pool_names_each_unfinished_job_with_its_newest_checkpoint(tmp_path):
    """Joblib ends every job when its pool breaks: the report names each job without
    metrics.json, with the checkpoint the same command continues from, and skips the
    finished ones."""
    runs = [tmp_path / str(n) for n in range(3)]
    for run in runs:
        run.mkdir()
    (runs[0] / "metrics.json").write_text("{}")
    (runs[1] / "checkpoints").mkdir()
    (runs[1] / "checkpoints" / "last.ckpt").write_bytes(b"")
    jobs = [(n, ["seed=0", f"model.k={n + 2}"], run) for n, run in enumerate(runs)]
    report = pool_broken_report("a worker process died (SIGKILL(-9))", jobs, "/sweeps/a")
    assert report.splitlines() == [
        "2 of 3 jobs of the sweep did not finish (a worker process died (SIGKILL(-9)), and "
        "joblib ended the other jobs at once):",
        f"  job 1 (model.k=3): ended by joblib, its newest checkpoint is "
        f"{runs[1] / 'checkpoints' / 'last.ckpt'}",
        "  job 2 (model.k=4): ended by joblib, no checkpoint",
        "Start the same command with hydra.sweep.dir=/sweeps/a to run them again (finished "
        "jobs return their results at once).",
    ]
