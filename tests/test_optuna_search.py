"""hparams_search=optuna through our sweeper (src/hydra_plugins/cloudlstm_optuna): real
Optuna, real Hydra, real tiny trainings in ``python train.py`` subprocesses."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from cloudlstm.cli.sigterm_at_start import JOBS_BEGUN, Terminated
from tests.conftest import PYTHON, ROOT, one_line, subprocess_env
from tests.test_sweeps import ONE_EPOCH, train_py

SEARCH = [
    "hparams_search=optuna",
    "hydra.sweeper.sampler.n_startup_trials=2",
    *ONE_EPOCH,
]


def load(sweep: Path) -> optuna.Study:
    storage = optuna.storages.RDBStorage(f"sqlite:///{sweep / 'optuna.db'}")
    return optuna.load_study(study_name="hparams_search", storage=storage)


def metrics(sweep: Path, job: int) -> dict:
    return json.loads((sweep / str(job) / "metrics.json").read_text())


@pytest.mark.slow  # four trials, two batches of two processes: about 17 s
def test_parallel_trials_are_stored_with_each_jobs_objective(tmp_path):
    sweep = tmp_path / "sweep"
    proc = train_py(
        tmp_path,
        *SEARCH,
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.n_jobs=2",
        f"hydra.sweep.dir={sweep}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("Joblib.Parallel") + proc.stderr.count("Joblib.Parallel") == 2, (
        "two batches of two trials"
    )
    trials = load(sweep).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4
    for t in trials:
        assert t.user_attrs["job"] == t.number
        assert t.value == metrics(sweep, t.number)["val"]["val/mae_best"]
        # each job reported its validation MAE at each validation, by global step
        assert t.intermediate_values == {
            3: pytest.approx(metrics(sweep, t.number)["val"]["val/mae"])
        }
    best = min(trials, key=lambda t: t.value)
    result = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert result["best_value"] == best.value and result["best_params"] == best.params
    assert result["best_run_dir"] == str(sweep / str(best.number))
    assert result["trials"] == {"complete": 4}
    assert result["best_config"] == str(sweep / str(best.number) / "config.yaml")
    importance = result["param_importance"]  # every searched parameter, shares summing to 1
    assert set(importance) == set(best.params) and sum(importance.values()) == pytest.approx(1)
    # the trial's identity travels outside the run's config and name
    config = (sweep / "0" / "config.yaml").read_text()
    assert "CLOUDLSTM_OPTUNA" not in config and "optuna.db" not in config
    assert "trial" not in metrics(sweep, 0)["run"]["name"]


def states(db: Path) -> list[str]:
    """The trials' states, read with SQLite alone while the sweep writes to the file."""
    if not db.exists():
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as con:
        try:
            return [row[0] for row in con.execute("SELECT state FROM trials ORDER BY number")]
        except sqlite3.OperationalError:  # the tables are not created yet
            return []


@pytest.mark.slow  # a search killed and run again: about 15 s
def test_a_killed_search_continues_with_the_same_command(tmp_path):
    sweep = tmp_path / "sweep"
    args = [*SEARCH, "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=2"]
    args += [f"hydra.sweep.dir={sweep}", f"paths.data_dir={tmp_path / 'data'}"]
    cmd = [*PYTHON, "train.py", *args]
    first = subprocess.Popen(cmd, cwd=ROOT, env=subprocess_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 300
    # killed once the first batch is told and the second launched (job 2 started; the
    # basic launcher runs job 3 after it): trials 2 and 3 RUNNING
    running = ["COMPLETE", "COMPLETE", "RUNNING", "RUNNING"]
    while states(sweep / "optuna.db") != running or not (sweep / "2").is_dir():
        assert first.poll() is None, "the search ended before it was killed"
        assert time.monotonic() < deadline, states(sweep / "optuna.db")
        time.sleep(0.1)
    first.send_signal(signal.SIGKILL)
    first.wait()
    finished = {job: (sweep / str(job) / "metrics.json").stat().st_mtime_ns for job in (0, 1)}

    proc = train_py(tmp_path, *args[:-1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Running again the 2 trials" in proc.stdout + proc.stderr
    trials = load(sweep).get_trials()
    assert [(t.number, t.state) for t in trials] == [(n, TrialState.COMPLETE) for n in range(4)]
    for t in trials:
        assert t.value == metrics(sweep, t.number)["val"]["val/mae_best"]
    # the finished trials were not trained again
    for job, mtime in finished.items():
        assert (sweep / str(job) / "metrics.json").stat().st_mtime_ns == mtime
    assert yaml.safe_load((sweep / "optimization_results.yaml").read_text())["trials"] == {
        "complete": 4
    }


@pytest.mark.slow  # a search of two trials and a second command refused: about 15 s
def test_a_second_search_into_a_sweep_directory_in_use_is_refused_and_the_first_ends_well(
    tmp_path,
):
    """The same command started again between two trials of the search (trial 0 done,
    trial 1 being asked, no job holding a run directory): the second took trial 1 for one an
    interrupted search left and ran it again, and the first ended in Optuna's traceback
    ("Cannot tell a FAIL trial"), its second trial not complete."""
    sweep, gate = tmp_path / "sweep", tmp_path / "gate"
    gate.mkdir()
    args = [*SEARCH, "hydra.sweeper.n_trials=2", f"hydra.sweep.dir={sweep}"]
    args += ["hydra.sweeper.sampler._target_=tests.gated_sampler.GatedSampler"]
    cmd = [*PYTHON, "train.py", *args, f"+hydra.sweeper.sampler.gate={gate}"]
    log = tmp_path / "first.log"
    with log.open("w") as out:
        first = subprocess.Popen([*cmd, f"paths.data_dir={tmp_path / 'data'}"], cwd=ROOT,
                                 env=subprocess_env(), stdout=out, stderr=out)  # fmt: skip
    deadline = time.monotonic() + 300
    while not (gate / "asking").exists():
        assert first.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.1)
    try:
        second = train_py(tmp_path, *args, f"+hydra.sweeper.sampler.gate={tmp_path}")
    finally:
        (gate / "go").touch()
    assert one_line(second).startswith(f"Run directory {sweep} is in use by host ")
    assert one_line(second).endswith(
        ": one run at a time in a directory. Wait for it to end, or use another hydra.sweep.dir."
    )
    assert first.wait(timeout=300) == 0, log.read_text()[-3000:]
    trials = load(sweep).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    for t in trials:
        assert t.value == metrics(sweep, t.number)["val"]["val/mae_best"]


@pytest.mark.slow  # a search of trials that train: about 20 s
def test_pruned_trials_stop_early_and_the_search_ends_well(tmp_path):
    sweep = tmp_path / "sweep"
    budget = [a for a in SEARCH if not a.startswith("trainer.max_epochs")]
    proc = train_py(
        tmp_path,
        *budget,
        "trainer.max_epochs=2",  # 6 steps; validations at steps 3 and 6
        "hydra/sweeper/pruner=threshold",
        "hydra.sweeper.pruner.upper=0.0",  # any MAE is above: every trial is pruned
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.n_jobs=2",
        f"hydra.sweep.dir={sweep}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = load(sweep).get_trials()
    assert [t.state for t in trials] == [TrialState.PRUNED] * 2
    for t in trials:
        assert t.user_attrs["pruned_at_step"] == 3
        assert metrics(sweep, t.number)["steps"] == 3  # of a budget of 6
        assert list(t.intermediate_values) == [3]
    result = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert result["trials"] == {"pruned": 2} and result["best_params"] is None


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("hydra.sweeper.n_jobs=0", "hydra.sweeper.n_jobs=0"),
        ("hydra/launcher=joblib hydra.launcher.n_jobs=0", "hydra.launcher.n_jobs=0: give how"),
        (
            "hydra.sweeper.sampler._target_=optuna.samplers.NoSuchSampler",
            "there is no optuna.samplers.NoSuchSampler; Optuna's: ",
        ),
        (  # TPE would take a negative count as none
            "hydra.sweeper.sampler.n_startup_trials=-3",
            "hydra.sweeper.sampler.n_startup_trials=-3 must be a whole number of at least 0.",
        ),
        (  # not the default study, continued by mistake
            "hydra.sweeper.study_name=''",
            "hydra.sweeper.study_name='' is blank: give the study a name, or null for "
            "hparams_search.",
        ),
        (  # a database SQLAlchemy has no driver for: the line names what to give
            "hydra.sweeper.storage=bogus://x",
            "Give a database URL every job can reach (sqlite:///<path>.db, postgresql://...), "
            "or null for sqlite:///<sweep dir>/optuna.db.",
        ),
    ],
)
def test_bad_sweeper_settings_are_one_line(tmp_path, override, named):
    proc = train_py(tmp_path, *SEARCH, *override.split(), f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert proc.returncode == 1
    assert named in one_line(proc), proc.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_study_on_a_full_disk_is_one_line(tmp_path):
    """/dev/full refuses every write with ENOSPC, as a full disk does: SQLite's "database or
    disk is full" is one line naming the study and what to do, not SQLAlchemy's traceback."""
    proc = train_py(tmp_path, *SEARCH, "hydra.sweeper.storage=sqlite:////dev/full",
                    f"hydra.sweep.dir={tmp_path / 'sweep'}")  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert one_line(proc).startswith(
        "Cannot write the Optuna study /dev/full: no room ("
    ) and one_line(proc).endswith("run the search's command again: it continues from what "
                                  "its study holds.")  # fmt: skip


def full_study(tmp_path: Path, asked: int = 1) -> tuple[str, optuna.Trial]:
    """A study in an SQLite file that SQLite lets grow by no page (``max_page_count``: its
    "database or disk is full", as on a full disk), with ``asked`` running trials, of which
    the first is returned."""
    import sqlalchemy

    from cloudlstm.engine.pruning import open_storage

    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    storage = open_storage(url)
    study = optuna.create_study(storage=storage, study_name="s")
    trial, *_ = [study.ask() for _ in range(asked)]
    pages = (tmp_path / "optuna.db").stat().st_size // 4096

    @sqlalchemy.event.listens_for(storage.engine, "connect")
    def no_room(connection, _record) -> None:
        connection.execute(f"PRAGMA max_page_count={pages}")

    storage.engine.dispose()  # the pooled connections open again, with the cap
    return url, trial


def test_a_study_that_fills_its_disk_mid_search_is_one_line_in_the_search_and_its_jobs(
    tmp_path, monkeypatch
):
    """Reporting to a study whose file can no longer grow: the job's pruning callback stops
    with the one line of a full disk, naming the study; the sweeper reads the same error
    from a write of its own as that line too; another error is left alone."""
    from types import SimpleNamespace

    import torch

    from cloudlstm.engine.pruning import OptunaPruning, storage_write_fault
    from cloudlstm.engine.trial_env import STORAGE_ENV, STUDY_ENV, TRIAL_ENV
    from cloudlstm.errors import OutOfSpaceError

    url, trial = full_study(tmp_path)
    monkeypatch.setenv(STORAGE_ENV, url)
    monkeypatch.setenv(STUDY_ENV, trial.study.study_name)
    monkeypatch.setenv(TRIAL_ENV, str(trial.number))
    callback = OptunaPruning()
    callback._trial = trial
    trainer = SimpleNamespace(callback_metrics={"val/mae": torch.tensor(0.5)}, global_step=0)
    with pytest.raises(OutOfSpaceError) as raised:
        for step in range(10_000):  # each report adds a row, until the file cannot grow
            trainer.global_step = step
            callback._report(trainer)
    assert str(raised.value).startswith(
        f"Cannot write the Optuna study {tmp_path / 'optuna.db'}: no room ("
    )
    assert "[database or disk is full, SQLITE_FULL]" in str(raised.value)
    with pytest.raises(Exception) as sweeper_write:
        trial.set_user_attr("pad", "x" * 100_000)
    assert str(storage_write_fault(sweeper_write.value, url)) == str(raised.value)
    assert storage_write_fault(ValueError("not a write"), url) is None
    assert storage_write_fault(sweeper_write.value, "postgresql://host/db") is None


@pytest.mark.slow  # 300 trials asked and told in SQLite: about 20 s
def test_a_full_disk_while_a_stopped_batch_is_told_leaves_the_stop_its_ending(tmp_path, caplog):
    """Ctrl-C in the second job of a batch whose first finished, the study on a full disk:
    telling the study the first trial's result raised the disk's one line in place of the
    stop, whose lines and exit status 130 were lost. Now that line is logged and the stop
    is raised on; its report names both trials, which the study keeps running."""
    from hydra_plugins.cloudlstm_optuna._search import Job, OptunaSearch

    url, trial = full_study(tmp_path, asked=300)
    search = OptunaSearch({})
    search.storage_url, search.storage = url, trial.study._storage
    search.study_id, search.sweep_dir, search.n_trials = trial.study._study_id, tmp_path, 2
    with pytest.raises(Exception, match="commit"):  # the file's pages of results fill up
        for number in range(1, 300):
            trial.study.tell(number, 0.25)
    search.in_flight = [Job(trial.number, 0, {}), Job(trial.number + 1, 1, {})]
    search.begun, search.returned = 1, {0: 0.5}
    with pytest.raises(KeyboardInterrupt):
        try:
            raise KeyboardInterrupt
        except BaseException:
            search._tell_finished(trial.study)
            raise
    (logged,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert logged.startswith(f"Cannot write the Optuna study {tmp_path / 'optuna.db'}: no room")
    assert search._batch_stop_report("Ctrl-C", trial_said=True).startswith(
        "The search got Ctrl-C in trial 0 (job 0), trial 1 (job 1), as the trial's line above "
        "says; the study keeps them running."
    )


def distribution(line: str):
    from hydra_plugins.cloudlstm_optuna._search import distribution

    return distribution(OverridesParser.create().parse_override(line))


def test_sweeps_of_hydras_grammar_become_optuna_distributions():
    assert distribution("a=choice(lstm, gru)") == CategoricalDistribution(["lstm", "gru"])
    assert distribution("a=range(2, 10, 2)") == IntDistribution(2, 8, step=2)  # 10 excluded
    assert distribution("a=interval(0.1, 0.5)") == FloatDistribution(0.1, 0.5)
    assert distribution("a=tag(log, interval(1e-4, 1e-2))") == FloatDistribution(
        1e-4, 1e-2, log=True
    )
    assert distribution("a=tag(int, interval(1, 8))") == IntDistribution(1, 8)


@pytest.mark.parametrize(
    ("line", "named"),
    [
        (
            "optimizer.lr=interval(0.1,0.01)",
            "the lower bound must come first and be below the upper one; give "
            "optimizer.lr='interval(0.01, 0.1)'.",
        ),
        (
            "optimizer.lr=tag(log,interval(0,0.1))",
            "tag(log, ...) needs a lower bound above 0, not 0; give e.g. "
            "optimizer.lr='tag(log, interval(0.0001, 0.1))', or drop tag log.",
        ),
        (  # int() would cut it to IntDistribution(0, 0): a search of one value
            "model.k=tag(int,interval(0.5,3.5))",
            "tag(int, ...) samples whole numbers, so its bounds must be whole, not 0.5 and "
            "3.5; give e.g. model.k='tag(int, interval(1, 3))'.",
        ),
        ("model.k=tag(int,interval(0.5,0.1))", "so its bounds must be whole, not 0.5 and 0.1"),
    ],
)
def test_an_interval_optuna_cannot_sample_is_one_line_naming_the_key_and_fix(line, named):
    from cloudlstm.errors import UserError
    from hydra_plugins.cloudlstm_optuna._search import search_space

    with pytest.raises(UserError) as raised:
        search_space({}, [line])
    assert str(raised.value).startswith(f"the command line: {line}: ")
    assert named in str(raised.value) and line in str(raised.value)
    key, value = line.split("=", 1)
    with pytest.raises(UserError, match=f"^hydra.sweeper.params.{key}: "):
        search_space({key: value}, [])


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("model.k=range(3,9,0)", "has a step of 0, which never reaches its stop"),
        ("model.k=shuffle(range(3,9,0))", "has a step of 0, which never reaches its stop"),
        ("seed=range(5,1)", "is an empty range (its stop is excluded)"),
    ],
)
def test_a_range_of_no_search_is_one_line_as_a_sweeps(line, said):
    """A step of 0 ended in range()'s ValueError with a traceback."""
    from cloudlstm.errors import UserError
    from hydra_plugins.cloudlstm_optuna._search import search_space

    with pytest.raises(UserError) as raised:
        search_space({}, [line])
    assert str(raised.value).startswith(f"the command line: {line!r} {said}")


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (
            "model.k=tag(foo,interval(1,8))",
            "unknown tag foo; the tags of an interval are log and int, e.g. "
            "tag(log, int, interval(1, 8)).",
        ),
        (
            "optimizer.lr=tag(log,lgo,interval(1e-4,1e-2))",
            "unknown tag lgo; the tags of an interval are log and int, e.g. "
            "tag(log, int, interval(1, 8)).",
        ),
        (
            "model.k=tag(log,choice(3,6))",
            "tag(log, ...) applies to interval(...) alone; drop it, or give an interval.",
        ),
    ],
)
def test_a_tag_the_search_does_not_read_is_one_line(line, said):
    from cloudlstm.errors import UserError
    from hydra_plugins.cloudlstm_optuna._search import search_space

    with pytest.raises(UserError) as raised:
        search_space({}, [line])
    assert str(raised.value) == f"the command line: {line}: {said}"


@pytest.mark.parametrize(("value", "said"), [("null", "null"), ("''", "''")])
def test_a_search_without_an_objective_is_one_line_before_any_trial(tmp_path, value, said):
    from cloudlstm.engine.objective import validation_keys

    proc = train_py(tmp_path, *SEARCH, f"optimized_metric={value}",
                    f"hydra.sweep.dir={tmp_path / 'sweep'}")  # fmt: skip
    assert one_line(proc) == (
        f"optimized_metric={said} gives the search no objective: name the validation metric "
        f"its trials return, one of {', '.join(validation_keys(False))}, e.g. "
        "optimized_metric=val/mae_best."
    )
    assert not (tmp_path / "sweep" / "0").exists()


def test_a_preset_searching_keys_the_model_lacks_is_one_line_before_any_trial(tmp_path):
    """hparams_search=optuna searches the CloudLSTM family's model.k: with a model without
    it, the line names the preset's keys and the preset for any model, not a key the user
    never typed."""
    proc = train_py(tmp_path, *SEARCH, "model=convlstm", f"hydra.sweep.dir={tmp_path / 'sw'}")
    assert one_line(proc) == (
        "hparams_search=optuna's search space names model.k, model.cell, which "
        "model=convlstm has not: search the optimiser alone, for any model, with "
        "hparams_search=optuna_recipe, and sweep the model's own keys on the command line "
        "(e.g. 'model.<key>=choice(a, b)')."
    )
    assert not (tmp_path / "sw" / "0").exists()


def test_a_bad_interval_on_the_command_line_is_one_line_before_any_trial(tmp_path):
    proc = train_py(tmp_path, *SEARCH, "optimizer.lr=interval(0.1,0.01)",
                    f"hydra.sweep.dir={tmp_path / 'sweep'}")  # fmt: skip
    assert one_line(proc) == (
        "the command line: optimizer.lr=interval(0.1,0.01): the lower bound must come first "
        "and be below the upper one; give optimizer.lr='interval(0.01, 0.1)'."
    )
    assert not (tmp_path / "sweep" / "0").exists()


@pytest.mark.parametrize(
    "subdir",
    # the presets' subdir (experiment=beijing): every trial of one model and seed had one
    ["run", "${hydra:runtime.choices.model}/seed_${seed}"],
)
def test_a_subdir_other_than_the_job_number_is_one_line_before_any_trial(tmp_path, subdir):
    """The search reads each trial's run in <sweep dir>/<job>: with another subdir the second
    trial was refused as the first's run and the results named a best run directory that
    was never written."""
    sweep = tmp_path / "sweep"
    proc = train_py(tmp_path, *SEARCH, f"hydra.sweep.subdir='{subdir}'", f"hydra.sweep.dir={sweep}")
    assert one_line(proc) == (
        f"hydra.sweep.subdir={subdir} is not the job's number, the run directory of each "
        "trial of hydra/sweeper=optuna (<sweep dir>/<job>): give "
        "hydra.sweep.subdir='${hydra.job.num}'."
    )
    assert not sweep.exists()


def test_a_search_of_a_source_option_the_source_does_not_read_is_refused_once(tmp_path):
    """data=mobile reads a file and the search sets the generator's city: each trial was
    refused by its job, in a line of its own, the study and its job folders made. Now the
    search is refused once, before any trial, in the default sweeper's line; the option at
    the config's value (city1, the first trial's) is no refusal, the other one is."""
    from tests.test_data_mobile import traffic_file

    path, sweep = traffic_file(tmp_path), tmp_path / "sweep"
    proc = train_py(
        tmp_path, "-m", "hydra/sweeper=optuna", "data=mobile", f"data.source.path={path}",
        "data.source.city=choice(city1,city2)", "hydra.sweeper.n_trials=2",
        f"hydra.sweep.dir={sweep}",
    )  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    assert one_line(proc) == (
        f"data.source.city=choice(city1,city2): data=mobile reads your file here "
        f"(data.source.path={path}), so the generator that it would set does not run: leave "
        "it out, or generate the traffic (data.source.path=null)."
    )
    assert not sweep.exists(), "no study, no trial"


def test_the_data_points_of_a_search_are_its_data_settings_values():
    """The trials whose sources a search's check composes: a choice's values and an
    interval's bounds of the searched data settings, with the fixed overrides; the other
    searched keys are left out (they choose no source)."""
    from hydra_plugins.cloudlstm_optuna._search import data_points

    space = {
        "data.source.city": CategoricalDistribution(["city1", "city2"]),
        "data.source.num_days": IntDistribution(10, 20),
        "model.k": CategoricalDistribution([2, 3]),
    }
    fixed = {"data": "data=mobile"}
    assert data_points(space, fixed) == [
        ["data=mobile", "data.source.city=city1", "data.source.num_days=10"],
        ["data=mobile", "data.source.city=city1", "data.source.num_days=20"],
        ["data=mobile", "data.source.city=city2", "data.source.num_days=10"],
        ["data=mobile", "data.source.city=city2", "data.source.num_days=20"],
    ]


def bare_search(tmp_path: Path, fixed: dict, space: dict):
    from hydra_plugins.cloudlstm_optuna._search import OptunaSearch

    search = OptunaSearch({})
    search.study_name, search.storage_url = "s", f"sqlite:///{tmp_path / 'optuna.db'}"
    search.sweep_dir, search.next_job, search.fixed, search.space = tmp_path, 0, fixed, space
    return search


def test_a_continued_study_refuses_another_command_in_one_line(tmp_path):
    """The study keeps the command that started it (fixed overrides, search space as text);
    continuing it with others is refused, naming what changed, before any trial mixes in."""
    from cloudlstm.errors import UserError

    lr = {"optimizer.lr": FloatDistribution(1e-4, 1e-2, log=True)}
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}", study_name="s")
    bare_search(tmp_path, {"model": "model=linear"}, lr)._check_same_command(study)
    assert study.user_attrs == {
        "fixed_overrides": {"model": "model=linear"},
        "search_space": {"optimizer.lr": "tag(log, interval(0.0001, 0.01))"},
    }
    bare_search(tmp_path, {"model": "model=linear"}, lr)._check_same_command(study)  # the same
    # where and how the trials run may change, as in a resumed run
    how = {"logger": "logger=csv", "data.num_workers": "data.num_workers=2"}
    bare_search(tmp_path, {"model": "model=linear", **how}, lr)._check_same_command(study)
    with pytest.raises(UserError) as raised:
        bare_search(tmp_path, {"model": "model=mlp"}, lr)._check_same_command(study)
    assert str(raised.value) == (
        f"study s in sqlite:///{tmp_path / 'optuna.db'} was started by another command: "
        "model=linear is now model=mlp. Continue it with its own command, or start a new "
        "search with another hydra.sweep.dir (or hydra.sweeper.study_name)."
    )
    other = {
        "optimizer.lr": FloatDistribution(1e-3, 1e-2),
        "model.k": IntDistribution(2, 8, step=2),
    }
    with pytest.raises(UserError) as raised:
        bare_search(tmp_path, {}, other)._check_same_command(study)
    assert (
        ": model=linear is gone; searched optimizer.lr=tag(log, interval(0.0001, 0.01)) is now "
        "optimizer.lr=interval(0.001, 0.01); searched model.k=range(2, 10, 2) is new. "
    ) in str(raised.value)


def test_a_continued_study_refuses_another_optimized_metric_in_one_line(tmp_path):
    """optimized_metric says how one run reports, but a study's values must all be of one
    metric: a continued search with another is refused, before the direction it changes."""
    from cloudlstm.errors import UserError

    search = bare_search(tmp_path, {}, {"optimizer.lr": FloatDistribution(1e-4, 1e-2)})
    search.metric, search.direction, search.sampler_conf = "val/mae_best", "minimize", None
    search.sampler = search.pruner = None
    search.study_name, search.n_trials, search.n_jobs = "hparams_search", 2, 1
    search._open_study()
    search._open_study()  # the same metric
    search.metric = "val/rmse"
    with pytest.raises(UserError) as raised:
        search._open_study()
    assert str(raised.value) == (
        f"study hparams_search in {search.storage_url} optimizes optimized_metric="
        "val/mae_best, not val/rmse: its trials' values would mix two metrics. Continue it "
        "with optimized_metric=val/mae_best, or start a new study of val/rmse with another "
        "hydra.sweep.dir (or hydra.sweeper.study_name)."
    )
    search.metric, search.direction = "val/ssim", "maximize"
    with pytest.raises(UserError, match="optimizes optimized_metric=val/mae_best, not val/ssim"):
        search._open_study()


def test_a_study_with_trials_but_no_recorded_command_is_warned_of(tmp_path, caplog):
    lr = {"optimizer.lr": FloatDistribution(1e-4, 1e-2, log=True)}
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}", study_name="s")
    study.ask(lr)  # a trial of a study made elsewhere, without the command recorded
    with caplog.at_level("WARNING"):
        bare_search(tmp_path, {"model": "model=linear"}, lr)._check_same_command(study)
    assert "has 1 trial(s) but no record of the command that ran them" in caplog.text
    assert study.user_attrs["fixed_overrides"] == {"model": "model=linear"}
    caplog.clear()
    fresh = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}", study_name="t")
    with caplog.at_level("WARNING"):
        bare_search(tmp_path, {}, lr)._check_same_command(fresh)  # a new study: nothing to say
    assert "no record" not in caplog.text


def test_asking_a_study_of_other_distributions_is_one_line(tmp_path):
    """A study without the recorded command (a shared storage, an older study) whose trials
    drew a parameter from another distribution: Optuna's ValueError becomes one line."""
    from cloudlstm.errors import UserError

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}", study_name="s")
    study.ask({"optimizer.lr": FloatDistribution(1e-4, 1e-2)})
    search = bare_search(tmp_path, {}, {"optimizer.lr": FloatDistribution(1e-4, 1e-2, log=True)})
    with pytest.raises(UserError, match=r"^study s in sqlite:.* has trials of another search "
                       r"space \(ValueError: Cannot set different log configuration"):  # fmt: skip
        search._ask(study)


def test_continuing_a_search_with_another_fixed_override_is_one_line(tmp_path):
    sweep = tmp_path / "sweep"
    args = [*SEARCH, "hydra.sweeper.n_trials=1", f"hydra.sweep.dir={sweep}"]
    first = train_py(tmp_path, *args)
    assert first.returncode == 0, first.stderr[-3000:]
    proc = train_py(tmp_path, *args, "hydra.sweeper.n_trials=2", "trainer.max_epochs=2")
    assert one_line(proc).endswith(
        "was started by another command: trainer.max_epochs=1 is now trainer.max_epochs=2. "
        "Continue it with its own command, or start a new search with another hydra.sweep.dir "
        "(or hydra.sweeper.study_name)."
    )
    assert len(load(sweep).get_trials()) == 1


def test_the_storage_url_reaches_the_job_verbatim(tmp_path):
    from hydra_plugins.cloudlstm_optuna._search import _quoted
    from tests.conftest import compose_train

    url = "postgresql://me:p'w${x}@host/db?opt=1,2"
    cfg = compose_train(tmp_path, [f"++hydra.job.env_set.CLOUDLSTM_X={_quoted(url)}"])
    assert cfg.hydra.job.env_set["CLOUDLSTM_X"] == url


def test_the_pruning_callback_is_inert_outside_a_search(monkeypatch):
    from cloudlstm.engine.pruning import OptunaPruning
    from cloudlstm.engine.trial_env import STORAGE_ENV

    monkeypatch.delenv(STORAGE_ENV, raising=False)
    assert not OptunaPruning().active


def test_a_trial_asked_but_never_launched_fails_and_does_not_count(tmp_path):
    """A search ended between asking a trial and labelling it with its job: on continuing,
    the trial is FAIL (it never ran; its parameters may be partial) and not one of n_trials."""
    from hydra_plugins.cloudlstm_optuna._search import OptunaSearch, _n_counted

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    done = study.ask({"x": FloatDistribution(0, 1)})
    done.set_user_attr("sweep_dir", str(tmp_path))
    done.set_user_attr("job", 0)
    study.tell(done, 0.5)
    study.ask({"x": FloatDistribution(0, 1)})  # never labelled
    search = OptunaSearch({})
    search.n_jobs, search.sweep_dir, search.own_storage = 1, tmp_path, True
    search._continue_unfinished(study)
    assert [t.state for t in study.get_trials()] == [TrialState.COMPLETE, TrialState.FAIL]
    assert _n_counted(study) == 1 and search.next_job == 1


def labelled_study(sweep: Path, states: list[TrialState]) -> optuna.Study:
    """A study in ``sweep``'s own storage file whose trial n ran as job n there."""
    study = optuna.create_study(storage=f"sqlite:///{sweep / 'optuna.db'}")
    for job, state in enumerate(states):
        trial = study.ask({"x": FloatDistribution(0, 1)})
        trial.set_user_attr("sweep_dir", str(sweep))
        trial.set_user_attr("job", job)
        (sweep / str(job)).mkdir()
        if state != TrialState.RUNNING:
            study.tell(trial, 0.5 + job if state == TrialState.COMPLETE else None, state=state)
    return study


def test_a_copied_sweep_directory_continues_its_study_in_its_own_job_folders(tmp_path):
    """A sweep directory copied (or moved) elsewhere: its study's trials are its own though
    they hold the old path; the unfinished one runs again in the copy's folder, new ones
    take numbers after the copied jobs', and the results name the copy's run directory."""
    import shutil

    from hydra_plugins.cloudlstm_optuna._search import OptunaSearch

    first, copy = tmp_path / "opt1", tmp_path / "opt1e"
    first.mkdir()
    done, running = TrialState.COMPLETE, TrialState.RUNNING
    labelled_study(first, [done, done, running])
    shutil.copytree(first, copy)
    study = optuna.load_study(study_name=None, storage=f"sqlite:///{copy / 'optuna.db'}")
    search = OptunaSearch({})
    search.n_jobs, search.sweep_dir, search.own_storage = 1, copy, True
    search.study_name = "hparams_search"
    ran = []
    search._run = lambda _study, jobs: ran.extend((j.trial, j.number) for j in jobs)
    search._continue_unfinished(study)
    assert ran == [(2, 2)] and search.next_job == 3
    search._write_results(study)
    results = yaml.safe_load((copy / "optimization_results.yaml").read_text())
    assert results["best_run_dir"] == str(copy / "0")


def test_a_second_study_in_a_sweep_directory_has_job_folders_and_results_of_its_own(tmp_path):
    """hydra.sweeper.study_name=other in the sweep directory of another study: its jobs are
    numbered after every job folder there, and its results file is its own."""
    from hydra_plugins.cloudlstm_optuna._search import OptunaSearch

    first = labelled_study(tmp_path, [TrialState.COMPLETE] * 3)
    other = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}", study_name="o/x")
    search = OptunaSearch({})
    search.n_jobs, search.sweep_dir, search.own_storage = 1, tmp_path, True
    search.study_name = "o/x"
    search._continue_unfinished(other)
    assert search.next_job == 3
    search._write_results(other)
    search.study_name = "hparams_search"
    search._write_results(first)
    assert sorted(p.name for p in tmp_path.glob("*.yaml")) == [
        "optimization_results.yaml",
        "optimization_results_o_x.yaml",
    ]
    ours = yaml.safe_load((tmp_path / "optimization_results_o_x.yaml").read_text())
    assert ours["study_name"] == "o/x" and ours["trials"] == {}


def test_job_folders_no_trial_of_the_storage_ran_are_refused_naming_them(tmp_path):
    """The job folders of a study, and of another study in the same storage, are no strays:
    a second study starts after them. A folder no trial ran there is refused in one line."""
    from cloudlstm.errors import UserError
    from hydra_plugins.cloudlstm_optuna._search import OptunaSearch

    first = labelled_study(tmp_path, [TrialState.COMPLETE, TrialState.RUNNING])
    search = OptunaSearch({})
    search.sweep_dir, search.own_storage, search.study_name = tmp_path, True, "other"
    search.storage_url = f"sqlite:///{tmp_path / 'optuna.db'}"
    search._check_job_folders(first._storage)
    for job in (2, 3, 5):
        (tmp_path / str(job)).mkdir()
    (tmp_path / "logs").mkdir()  # no job folder
    with pytest.raises(UserError) as refused:
        search._check_job_folders(first._storage)
    assert str(refused.value) == (
        f"hydra.sweep.dir={tmp_path} holds job folders 2-3, 5 that no trial of "
        f"{search.storage_url} ran: study other's trials would run as jobs numbered after "
        f"them, not as their trial numbers. Move them out of {tmp_path}, or give the search "
        "another hydra.sweep.dir."
    )


@pytest.mark.slow  # a refused search, then two trials in two commands: about 40 s
def test_a_stray_job_folder_is_refused_and_a_search_without_it_continues(tmp_path):
    """A 0/ that no trial made (a plain sweep's, a deleted study's) in the sweep directory:
    the study's trial 0 ran as job 1, in 1/. Now the search is refused before any trial,
    in one line naming the folder and the fix; without it, trial n runs as job n, and the
    same command continues the study in the same directory."""
    sweep = tmp_path / "sweep"
    (sweep / "0").mkdir(parents=True)
    # brute force: no draw repeats a point, a trial that would take no job
    args = [
        "-m", *ONE_EPOCH, "hydra/sweeper=optuna", "model.k=choice(2,3)",
        "hydra.sweeper.sampler._target_=optuna.samplers.BruteForceSampler",
        f"hydra.sweep.dir={sweep}",
    ]  # fmt: skip
    proc = train_py(tmp_path, *args, "hydra.sweeper.n_trials=1")
    assert "Traceback" not in proc.stdout + proc.stderr
    assert one_line(proc) == (
        f"hydra.sweep.dir={sweep} holds job folder 0 that no trial of "
        f"sqlite:///{sweep / 'optuna.db'} ran: study hparams_search's trials would run as jobs "
        f"numbered after it, not as their trial numbers. Move it out of {sweep}, or give the "
        "search another hydra.sweep.dir."
    )
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0"], "no trial ran"
    (sweep / "0").rmdir()
    for n_trials in (1, 2):  # the search, then the same command continuing its study
        proc = train_py(tmp_path, *args, f"hydra.sweeper.n_trials={n_trials}")
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    trials = load(sweep).get_trials()
    assert [(t.number, t.user_attrs["job"]) for t in trials] == [(0, 0), (1, 1)]
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    for t in trials:
        assert t.value == metrics(sweep, t.number)["val"]["val/mae_best"]


def study_names(sweep: Path) -> list[str]:
    """The studies in ``sweep``'s own storage file."""
    storage = optuna.storages.RDBStorage(f"sqlite:///{sweep / 'optuna.db'}")
    return [s.study_name for s in storage.get_all_studies()]


@pytest.mark.slow  # a refused search, the fixed one of one trial, the refused one again: ~50 s
def test_a_search_refused_before_its_first_trial_leaves_no_study(tmp_path):
    """A search refused at a bad option (Hydra's check of its first batch) left its study in
    optuna.db, holding its command and a trial that never ran: the fixed command in the same
    sweep directory was then refused as another command. Now the refused search deletes the
    study it created, and the fixed one starts it; a study that existed is never deleted."""
    sweep = tmp_path / "sweep"
    args = [
        "-m", *ONE_EPOCH, "hydra/sweeper=optuna", "model.k=choice(2,3)",
        "hydra.sweeper.sampler._target_=optuna.samplers.BruteForceSampler",
        "hydra.sweeper.n_trials=1", f"hydra.sweep.dir={sweep}",
    ]  # fmt: skip
    refused = train_py(tmp_path, *args, "model.nokey=3")
    assert refused.returncode == 1, (refused.stdout + refused.stderr)[-3000:]
    assert one_line(refused).startswith("Could not override 'model.nokey'")
    assert study_names(sweep) == []
    assert not (sweep / "optimization_results.yaml").exists(), "no results of no study"
    fixed = train_py(tmp_path, *args)
    assert fixed.returncode == 0, (fixed.stdout + fixed.stderr)[-3000:]
    assert study_names(sweep) == ["hparams_search"]
    assert [t.state for t in load(sweep).get_trials()] == [TrialState.COMPLETE]
    again = train_py(tmp_path, *args, "model.nokey=3")  # refused as another command now
    assert again.returncode == 1 and "was started by another command" in one_line(again)
    assert study_names(sweep) == ["hparams_search"]
    assert [t.state for t in load(sweep).get_trials()] == [TrialState.COMPLETE]


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (["data=beijing", "data.source.co_units=ug/m3"], "hydra.sweep.dir="),
        (
            ["data=mobile", "data.source.path=traffic.csv", "data.source.num_days=30"],
            "data.source.num_days=30: data=mobile reads your file here",
        ),
    ],
)
def test_a_search_refused_before_any_trial_imports_neither_torch_nor_pandas(tmp_path, data, said):
    """The search's start imported Lightning (with torch, for the pruning callback's module)
    and, for a command setting a data.source option, the data sources (pandas, torch) to
    check them: 12-14 s to a refusal (a stray job folder, a generator's option with a
    file), now 3.5 s."""
    sweep = tmp_path / "sweep"
    (sweep / "0").mkdir(parents=True)  # a stray folder: refused before any trial
    args = ["-m", "hparams_search=optuna", "model=cloudlstm", *data, f"hydra.sweep.dir={sweep}"]
    cmd = [sys.executable, "-X", "importtime", "train.py", *args]
    env = subprocess_env()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    lines = proc.stderr.splitlines()
    imported = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
    told = [line for line in lines if line.strip() and not line.startswith("import time:")]
    assert proc.returncode == 1 and len(told) == 1 and told[0].startswith(said), told
    assert not imported & {"torch", "pandas", "lightning"}


def test_a_search_refused_for_stray_job_folders_creates_no_study(tmp_path):
    """The job folders are checked before the study is created: their refusal leaves the
    storage without it, and the search, once they are moved out, starts it."""
    from omegaconf import OmegaConf

    from cloudlstm.errors import UserError

    search = bare_search(tmp_path, {}, {"model.k": CategoricalDistribution([2, 3])})
    search.own_storage, search.n_trials, search.n_jobs = True, 1, 1
    search.sampler, search.pruner, search.direction = None, None, "minimize"
    search.metric, search.sampler_conf = "val/mae_best", OmegaConf.create({})
    (tmp_path / "0").mkdir()
    with pytest.raises(UserError, match="holds job folder 0 that no trial"):
        search._open_study()
    storage = optuna.storages.RDBStorage(search.storage_url)
    assert storage.get_all_studies() == []
    (tmp_path / "0").rmdir()
    search._open_study()
    assert [s.study_name for s in storage.get_all_studies()] == ["s"] and search.created


def test_a_search_ended_by_a_failed_trial_rewrites_its_results_first(tmp_path):
    """The failed trial that ends a search is counted in optimization_results.yaml (not the
    last run's counts left), and a first run whose only trial failed says none completed."""
    from cloudlstm.errors import UserError
    from hydra_plugins.cloudlstm_optuna._search import OptunaSearch

    study = labelled_study(tmp_path, [])
    search = OptunaSearch({})
    search.n_jobs, search.n_trials, search.sweep_dir, search.own_storage = 1, 2, tmp_path, True
    search.study_name, search.space = "hparams_search", {"x": FloatDistribution(0, 1)}
    search._open_study = lambda: study

    def fail(study, jobs):
        for job in jobs:
            study.tell(job.trial, state=TrialState.FAIL)
        raise UserError("trial 0 failed")

    search._run = fail
    with pytest.raises(UserError, match="^trial 0 failed$"):
        search._search()
    results = yaml.safe_load((tmp_path / "optimization_results.yaml").read_text())
    assert results["trials"] == {"fail": 1} and results["best_params"] is None
    assert results["no_best"] == "No trial of study hparams_search completed."


# three trials, one batch, each of its own learning rate: the sampler's seed asks -1, -2
# (refused) and 0.001, in this order (a point drawn twice would run once)
REFUSED_LR = [
    "hydra.sweeper.sampler._target_=optuna.samplers.BruteForceSampler",
    "hydra.sweeper.sampler.seed=2",
    "hydra.sweeper.n_trials=3",
    "hydra.sweeper.n_jobs=3",
    "optimizer.lr=choice(-2,-1,0.001)",
]


def lr_error(lr: int) -> str:
    return (
        f"optimizer (AdamW): Invalid learning rate: {lr}. Set a valid value of that optimizer.* "
        "key (optimizer.lr > 0, weight_decay >= 0, betas in [0, 1))"
    )


def test_a_search_its_failed_trials_end_compares_the_finished_one_and_names_each(tmp_path):
    """The search ended with the first failed trial's error alone, and without the
    comparison of its finished trials, which Hydra prints only after a search that ended
    well. Trials 0 and 1 draw a refused learning rate (:data:`REFUSED_LR`)."""
    sweep = tmp_path / "sweep"
    proc = train_py(
        tmp_path, "-m", *ONE_EPOCH, "hydra/sweeper=optuna", *REFUSED_LR, f"hydra.sweep.dir={sweep}"
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out and "Error executing job" not in out
    assert "| cloudlstm | synthetic | 1 |" in proc.stdout, "trial 2's comparison"
    assert proc.stderr.splitlines()[-4:] == [
        "2 of 3 jobs of the sweep failed, which ended the search "
        "(hydra.sweeper.max_failure_rate=0: the share of a batch that may fail):",
        f"  trial 0 (job 0: optimizer.lr=-1): {lr_error(-1)}; log {sweep / '0' / 'train.log'}",
        f"  trial 1 (job 1: optimizer.lr=-2): {lr_error(-2)}; log {sweep / '1' / 'train.log'}",
        "Each trial's settings were refused as given: mend what its line names (in the search "
        "space or the command) and search again in another hydra.sweep.dir, or let the search "
        "go on past such trials with a higher hydra.sweeper.max_failure_rate (the share of a "
        "batch that may fail).",
    ]
    for job, lr in ((0, -1), (1, -2)):
        assert lr_error(lr) in (sweep / str(job) / "train.log").read_text().splitlines()[-1]
    assert [t.state for t in load(sweep).get_trials()] == [TrialState.FAIL] * 2 + [
        TrialState.COMPLETE
    ]


def test_failed_trials_the_search_tolerates_are_named_after_the_comparison(tmp_path):
    """Within max_failure_rate the search ends well, and each failed trial was one warning
    as it failed, with nothing at the end. Now a line each follows the comparison, as in
    the report of a search they end. Trials 0 and 1 draw a refused learning rate
    (:data:`REFUSED_LR`): 2 of the batch's 3, within 0.7."""
    sweep = tmp_path / "sweep"
    proc = train_py(
        tmp_path, "-m", *ONE_EPOCH, "hydra/sweeper=optuna", *REFUSED_LR,
        "hydra.sweeper.max_failure_rate=0.7", f"hydra.sweep.dir={sweep}",
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out
    report = [
        "2 of 3 jobs of the sweep failed, tolerated by hydra.sweeper.max_failure_rate=0.7 (the "
        "share of a batch that may fail): the search ended well, with exit status 0:",
        f"  trial 0 (job 0: optimizer.lr=-1): {lr_error(-1)}; log {sweep / '0' / 'train.log'}",
        f"  trial 1 (job 1: optimizer.lr=-2): {lr_error(-2)}; log {sweep / '1' / 'train.log'}",
    ]
    lines = proc.stdout.splitlines()  # the search's log and the comparison
    (start,) = [i for i, line in enumerate(lines) if line.endswith(report[0])]
    assert lines[start + 1 : start + 3] == report[1:]
    (row,) = [i for i, line in enumerate(lines) if line.startswith("| cloudlstm | synthetic |")]
    assert row < start, "the comparison comes first"
    assert [t.state for t in load(sweep).get_trials()] == [TrialState.FAIL] * 2 + [
        TrialState.COMPLETE
    ]


def test_building_brute_force_sampler_warns_nothing():
    """Optuna's ExperimentalWarning of BruteForceSampler, two lines on stderr of every search
    with it, says nothing the user can act on: the sampler is built without it."""
    import warnings

    from omegaconf import OmegaConf

    from hydra_plugins.cloudlstm_optuna._search import _build

    conf = OmegaConf.create({"_target_": "optuna.samplers.BruteForceSampler", "seed": 0})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sampler = _build("sampler", conf, optuna.samplers.BaseSampler)
    assert isinstance(sampler, optuna.samplers.BruteForceSampler)
    assert [str(w.message) for w in caught] == []


# a bug at model.k=3 (tests/kill_callback.py), within max_failure_rate; brute force asks each
# value of model.k once
BUG_AT_3 = [
    *ONE_EPOCH, "hydra/sweeper=optuna",
    "hydra.sweeper.sampler._target_=optuna.samplers.BruteForceSampler",
    "hydra.sweeper.sampler.seed=0", "hydra.sweeper.n_jobs=2",
    "hydra.sweeper.max_failure_rate=0.5",
    "+callbacks.bug._target_=tests.kill_callback.BugAtValue",
    "+callbacks.bug.value=${model.k}", "+callbacks.bug.fails_at=3",
]  # fmt: skip


def test_a_tolerated_failure_of_a_bug_ends_the_search_after_its_batch(tmp_path):
    """A trial that failed of a bug, within max_failure_rate, was listed after the comparison
    of a search that exited 0; then the search failed with the bug's traceback, but only
    once it had run its further batches. Now it ends after the bug's batch: the comparison
    of the trial that finished, the list, whose first line says so, the traceback and exit
    status 1. Brute force with seed 0 asks model.k=3 (the bug's) and 4 first, 2 after them."""
    sweep = tmp_path / "sweep"
    proc = train_py(
        tmp_path, "-m", *BUG_AT_3, "hydra.sweeper.n_trials=3", "model.k=choice(2,3,4)",
        f"hydra.sweep.dir={sweep}",
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    trials = load(sweep).get_trials()
    assert sorted(t.params["model.k"] for t in trials) == [3, 4], "no batch after the bug's"
    assert sorted(p.name for p in sweep.iterdir() if p.name.isdigit()) == ["0", "1"]
    (bad,) = [t for t in trials if t.params["model.k"] == 3]
    assert bad.state == TrialState.FAIL
    head = (
        "1 of 2 jobs of the sweep failed, tolerated by hydra.sweeper.max_failure_rate=0.5 (the "
        f"share of a batch that may fail), but trial {bad.number} failed of a bug, which no "
        "rate tolerates: the search ended after its batch and fails with its error (below) "
        "and exit status 1:"
    )
    lines = out.splitlines()
    (start,) = [i for i, line in enumerate(lines) if line.endswith(head)]
    job = bad.user_attrs["job"]
    assert lines[start + 1] == (
        f"  trial {bad.number} (job {job}: model.k=3): a bug of the test's own; log "
        f"{sweep / str(job) / 'train.log'}"
    )
    assert lines[start + 2] == (
        f"Once the bug is mended, start the same command with hydra.sweep.dir={sweep} to go on "
        "with the search (its failed trials count towards n_trials=3)."
    )
    assert "Traceback" in out and "RuntimeError: a bug of the test's own" in proc.stderr
    assert "| cloudlstm | synthetic | 1 |" in proc.stdout, "the comparison of the other trial"


@pytest.mark.slow  # three searches of one batch each: about 60 s
def test_a_bug_in_the_last_batch_names_a_larger_n_trials_to_go_on(tmp_path):
    """A bug within max_failure_rate in the search's last batch: its line said the same
    command would go on with the search, but the failed trial counts towards n_trials, and
    the same command ran no trial and ended well. Now the line says so and names a larger
    n_trials, with which the same command goes on."""
    sweep = tmp_path / "sweep"
    args = [*BUG_AT_3, "model.k=choice(2,3,4)", f"hydra.sweep.dir={sweep}"]
    proc = train_py(tmp_path, "-m", *args, "hydra.sweeper.n_trials=2")
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-3000:]
    assert (
        f"Once the bug is mended, start the same command with hydra.sweep.dir={sweep} and a "
        "hydra.sweeper.n_trials above 2 to go on with the search (its failed trials count "
        "towards n_trials=2, which the study holds: the same command alone runs no further "
        "trial)."
    ) in (proc.stdout + proc.stderr).splitlines()
    again = train_py(tmp_path, "-m", *args, "hydra.sweeper.n_trials=2")
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(load(sweep).get_trials()) == 2, "the same command alone runs no trial"
    more = train_py(tmp_path, "-m", *args, "hydra.sweeper.n_trials=3")
    assert more.returncode == 0, more.stderr[-3000:]
    assert sorted(t.params["model.k"] for t in load(sweep).get_trials()) == [2, 3, 4]


@pytest.mark.slow  # two searches of one batch each: about 40 s
def test_a_bug_in_the_batch_that_used_up_the_space_names_no_larger_n_trials(tmp_path):
    """A bug in the last batch, which gave each point of the space its trial: the line
    named a larger n_trials to go on with, with which the same command ran no trial (the
    space was used up). Now it says that every point has run, and how to search more."""
    sweep = tmp_path / "sweep"
    args = [*BUG_AT_3, "model.k=choice(2,3)", f"hydra.sweep.dir={sweep}"]
    proc = train_py(tmp_path, "-m", *args, "hydra.sweeper.n_trials=2")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "n_trials above" not in out
    assert (
        "Every point of the search space has run (the failed trials' too, which the study does "
        "not run again), so the same command runs no further trial, whatever its "
        "hydra.sweeper.n_trials. Once the bug is mended, search in a new study, with another "
        "hydra.sweep.dir (or hydra.sweeper.study_name), widening the space (more values of a "
        "choice, a longer range) to try more points."
    ) in out.splitlines()
    more = train_py(tmp_path, "-m", *args, "hydra.sweeper.n_trials=3")
    assert more.returncode == 0, more.stderr[-3000:]
    assert len(load(sweep).get_trials()) == 2, "a larger n_trials runs no further trial"


def tried_trial(space: dict, k: int, state: TrialState) -> optuna.trial.FrozenTrial:
    """A finished trial of job ``k`` at ``model.k=k``."""
    return optuna.trial.create_trial(
        params={"model.k": k}, distributions=space, user_attrs={"job": k}, state=state,
        value=1.0 if state == TrialState.COMPLETE else None,
    )  # fmt: skip


def test_a_space_is_used_up_where_each_point_has_a_trial_whatever_the_sampler(tmp_path):
    """What tells a failed search's last line that no n_trials goes on: each point of a
    finite space tried (a failed trial too) whatever the sampler (TPE never says so), or
    a grid's grid tried, which may be smaller than the space; not a space with points
    left, nor one with an interval."""
    space = {"model.k": CategoricalDistribution([2, 3])}
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    search = search_of(tmp_path, study, space)
    study.add_trial(tried_trial(space, 2, TrialState.COMPLETE))
    assert not search._every_point_tried(study)
    study.add_trial(tried_trial(space, 3, TrialState.FAIL))
    assert search._every_point_tried(study)
    search.space = {**space, "x": FloatDistribution(0, 1)}
    assert not search._every_point_tried(study), "an interval's points are never all tried"
    search.space = {"model.k": CategoricalDistribution([2, 3, 4])}
    grid = optuna.create_study(
        storage=f"sqlite:///{tmp_path / 'grid.db'}",
        sampler=optuna.samplers.GridSampler({"model.k": [2]}),
    )
    assert not search._every_point_tried(grid)
    grid.stop = lambda: None  # the grid's word that it is tried, which the search takes
    trial = grid.ask(search.space)
    trial.set_user_attr("job", 0)
    grid.tell(trial, 1.0)
    assert search._every_point_tried(grid), "the grid of one point, tried"


def test_a_tolerated_bug_ending_says_how_to_go_on_once_it_is_mended(tmp_path, caplog):
    """The search a bug ended within max_failure_rate named its failed trials and no way on,
    where the ending of failures beyond the rate prints the command that continues: its last
    line is that command now, once the bug is mended."""
    from hydra.core.utils import JobReturn, JobStatus
    from omegaconf import OmegaConf

    from cloudlstm.errors import UserError
    from hydra_plugins.cloudlstm_optuna._search import Job, OptunaSearch

    search = OptunaSearch({})
    search.config = OmegaConf.create({"task_name": "train"})
    search.sweep_dir, search.max_failure_rate, search.launched, search.n_trials = (
        tmp_path, 0.5, 4, 6
    )  # fmt: skip
    for number, error in enumerate([UserError("bad lr"), IndexError("a bug")]):
        ret = JobReturn()
        ret.status, ret.return_value = JobStatus.FAILED, error
        search._record_failure(Job(number, number, {"model.k": number}), ret)
    ending = search._tolerated_ending()
    assert isinstance(ending, IndexError)
    (logged,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert "but trial 1 failed of a bug" in logged.splitlines()[0]
    assert logged.splitlines()[-1] == (
        f"Once the bug is mended, start the same command with hydra.sweep.dir={tmp_path} to go "
        "on with the search (its failed trials count towards n_trials=6)."
    )


def test_tolerated_failures_of_the_user_or_the_machine_end_the_search_well(tmp_path, caplog):
    """A refused setting and a machine's fault (a full disk) within max_failure_rate: exit 0,
    each named under a warning that says so."""
    from hydra.core.utils import JobReturn, JobStatus
    from omegaconf import OmegaConf

    from cloudlstm.errors import OutOfSpaceError, UserError
    from hydra_plugins.cloudlstm_optuna._search import Job, OptunaSearch

    search = OptunaSearch({})
    search.config = OmegaConf.create({"task_name": "train"})
    search.sweep_dir, search.max_failure_rate, search.launched = tmp_path, 0.5, 4
    for number, error in enumerate([UserError("bad lr"), OutOfSpaceError("no room in /r")]):
        ret = JobReturn()
        ret.status, ret.return_value = JobStatus.FAILED, error
        search._record_failure(Job(number, number, {"model.k": number}), ret)
    ending = search._tolerated_ending()
    assert isinstance(ending, SystemExit) and ending.code == 0
    (logged,) = [r for r in caplog.records if "jobs of the sweep failed" in r.getMessage()]
    assert logged.levelname == "WARNING"
    assert logged.getMessage().splitlines()[0] == (
        "2 of 4 jobs of the sweep failed, tolerated by hydra.sweeper.max_failure_rate=0.5 (the "
        "share of a batch that may fail): the search ended well, with exit status 0:"
    )


@pytest.mark.slow  # two trials and the same command again, per sampler: about 25 s
@pytest.mark.parametrize(
    "sampler",
    [
        ["hydra.sweeper.sampler._target_=optuna.samplers.BruteForceSampler"],
        [
            "hydra.sweeper.sampler._target_=optuna.samplers.GridSampler",
            "+hydra.sweeper.sampler.search_space={model.k:[2,3]}",
        ],
    ],
    ids=["brute_force", "grid"],
)
def test_a_sampler_that_has_tried_the_whole_space_ends_the_search_well(tmp_path, sampler):
    """Such a sampler calls study.stop(), which Optuna allows only inside Study.optimize:
    the search ended with its RuntimeError's traceback. Now it ends after the space's two
    trials, of n_trials=4, says so and compares them; the same command asks no further."""
    sweep = tmp_path / "sweep"
    args = [
        "-m", *ONE_EPOCH, "hydra/sweeper=optuna", *sampler, "hydra.sweeper.n_trials=4",
        "model.k=choice(2,3)", f"hydra.sweep.dir={sweep}",
    ]  # fmt: skip
    name = sampler[0].rsplit(".", 1)[1]
    said = (
        f"[HYDRA] The sampler ({name}) has tried every point of the search space: the "
        "search ends with 2 of n_trials=4 trials."
    )
    for _ in range(2):  # the search, then the same command
        proc = train_py(tmp_path, *args)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-3000:]
        assert "Traceback" not in out and said in out
        assert "ExperimentalWarning" not in proc.stderr, "Optuna's, of BruteForceSampler"
        assert "| cloudlstm | synthetic | 3 |" in proc.stdout, "the comparison"
        trials = load(sweep).get_trials()
        assert sorted(t.params["model.k"] for t in trials) == [2, 3]
        assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    assert "Launching" not in out, "the same command asked no trial"


@pytest.mark.slow  # three trials in two batches, per sampler: about 20 s
@pytest.mark.parametrize(
    "sampler",
    [
        ["hydra.sweeper.sampler._target_=optuna.samplers.BruteForceSampler"],
        [
            "hydra.sweeper.sampler._target_=optuna.samplers.GridSampler",
            "+hydra.sweeper.sampler.search_space={model.k:[2,3,4]}",
        ],
    ],
    ids=["brute_force", "grid"],
)
def test_a_batch_never_runs_a_point_twice(tmp_path, sampler):
    """Three points, two at a time: the second batch's second trial drew a point that the
    first trial of its batch, or one before, ran, and trained it again. Now each point runs
    once, in three jobs, and the search ends with the space."""
    sweep = tmp_path / "sweep"
    proc = train_py(
        tmp_path, "-m", *ONE_EPOCH, "hydra/sweeper=optuna", *sampler, "hydra.sweeper.n_jobs=2",
        "hydra.sweeper.n_trials=6", "model.k=choice(2,3,4)", f"hydra.sweep.dir={sweep}",
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "the search ends with 3 of n_trials=6 trials." in out
    ran = sorted(int(p.name) for p in sweep.iterdir() if p.name.isdigit())
    assert ran == [0, 1, 2]
    trials = [t for t in load(sweep).get_trials() if "repeat_of" not in t.user_attrs]
    assert sorted(t.params["model.k"] for t in trials) == [2, 3, 4]
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    assert yaml.safe_load((sweep / "optimization_results.yaml").read_text())["trials"] == {
        "complete": 3
    }


def search_of(tmp_path: Path, study: optuna.Study, space: dict):
    """A search of ``space`` in ``study``, ready to ask trials (not to launch them)."""
    search = bare_search(tmp_path, {}, space)
    search.storage, search.study_id = study._storage, study._study_id
    return search


def searching(search, study: optuna.Study, n_trials: int):
    """``search`` set to run its loop (``_search``) in ``study``, one trial at a time, to
    ``n_trials``, with the basic launcher unconfigured: its trials must all be repeats, not
    run."""
    # Hydra's plugin scan, which a sweep's start runs, imports its core plugins again: the
    # launcher is made of the class it left, whichever test ran first in this process
    Plugins.instance()
    from hydra._internal.core_plugins.basic_launcher import BasicLauncher

    search.n_jobs, search.n_trials, search.own_storage = 1, n_trials, True
    search.launcher = BasicLauncher()
    search._open_study = lambda: study
    return search


def settled_search(tmp_path: Path, ks: list[int]) -> tuple[optuna.Study, object]:
    """A study whose sampler is fixed on model.k=2, x=0.5 of a space of ``ks`` and x in
    [0, 1], with its search, after one trial of that point (told 1.0): every later draw
    repeats it."""
    space = {"model.k": CategoricalDistribution(ks), "x": FloatDistribution(0, 1)}
    fixed = {"model.k": 2, "x": 0.5}
    sampler = optuna.samplers.PartialFixedSampler(fixed, optuna.samplers.RandomSampler(seed=0))
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}", sampler=sampler)
    search = search_of(tmp_path, study, space)
    (first,) = search._ask_batch(study, 1)
    study.tell(first.trial, 1.0)
    return study, search


def test_a_trial_that_draws_a_point_of_its_batch_is_a_repeat_not_run(tmp_path, caplog):
    """A grid of two of the space's three values, asked three at a time: the third trial
    repeats one of the two. It gets no job, is PRUNED (no failure) with the trial it repeats,
    and counts neither towards n_trials nor in the results' trials."""
    from hydra_plugins.cloudlstm_optuna._search import _n_counted

    caplog.set_level("INFO")
    space = {"model.k": CategoricalDistribution([2, 3, 4])}
    sampler = optuna.samplers.GridSampler({"model.k": [2, 3]}, seed=0)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}", sampler=sampler)
    search = search_of(tmp_path, study, space)
    jobs = search._ask_batch(study, 3)
    assert sorted(j.params["model.k"] for j in jobs) == [2, 3]
    assert [j.number for j in jobs] == [0, 1] and search.next_job == 2
    repeat = study.get_trials()[2]
    assert repeat.state == TrialState.PRUNED and "job" not in repeat.user_attrs
    of = repeat.user_attrs["repeat_of"]
    assert study.get_trials()[of].params == repeat.params
    k = repeat.params["model.k"]
    (said,) = [r.getMessage() for r in caplog.records if "repeated" in r.getMessage()]
    assert said == (
        "1 draw repeated a tried point, not run (recorded PRUNED, with repeat_of): trial 2 "
        f"drew the point of trial {of} (model.k={k}) once."
    )
    assert _n_counted(study) == 2
    search.own_storage = True
    search._write_results(study)
    results = yaml.safe_load((tmp_path / "optimization_results_s.yaml").read_text())
    assert results["trials"] == {"running": 2} and results["repeats_not_run"] == 1


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_a_space_with_a_trial_at_each_point_asks_no_more(tmp_path):
    """Brute force over three values, two at a time: the second batch is the last value
    alone, and the space is used up with it, before any trial asks a point again."""
    space = {"model.k": CategoricalDistribution([2, 3, 4])}
    sampler = optuna.samplers.BruteForceSampler(seed=0)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}", sampler=sampler)
    search = search_of(tmp_path, study, space)
    for job in search._ask_batch(study, 2):
        study.tell(job.trial, 1.0)
    assert not search.space_tried
    (last,) = search._ask_batch(study, 2)
    assert search.space_tried and len(study.get_trials()) == 3
    assert last.params["model.k"] not in {t.params["model.k"] for t in study.get_trials()[:2]}


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_a_sampler_that_draws_only_tried_points_ends_the_search(tmp_path):
    """A sampler that settles on one point of a space it has not used up (here one fixed
    to it) ends the search after REPEATS_ENDING draws of it in a row, where the search
    would ask for ever; a new point between them starts the count again."""
    from hydra_plugins.cloudlstm_optuna._search import REPEATS_ENDING

    study, search = settled_search(tmp_path, [2, 3, 4])
    batches = 0
    while not search._over():
        assert search._ask_batch(study, 3) == []
        batches += 1
        assert batches <= REPEATS_ENDING, "the search asks on and on"
    assert search.repeats_in_a_row == REPEATS_ENDING and not search.space_tried
    assert len(study.get_trials()) == 1 + REPEATS_ENDING


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_a_settling_sampler_s_repeats_are_one_line_not_one_each(tmp_path, caplog):
    """A sampler fixed on a tried point, asked one trial at a time: each of its
    REPEATS_ENDING draws of it was an INFO line of its own. Now the run of repeats is one
    line, as the search ends, saying how many draws repeated which trial's point."""
    from hydra_plugins.cloudlstm_optuna._search import REPEATS_ENDING

    caplog.set_level("INFO")
    study, search = settled_search(tmp_path, [2, 3])
    searching(search, study, n_trials=3)._search()
    assert search._settled() and len(study.get_trials()) == 1 + REPEATS_ENDING
    said = [r.getMessage() for r in caplog.records if "repeated" in r.getMessage()]
    assert said == [
        f"{REPEATS_ENDING} draws repeated a tried point, not run (recorded PRUNED, with "
        f"repeat_of): trials 1-{REPEATS_ENDING} drew the point of trial 0 (model.k=2 x=0.5) "
        f"{REPEATS_ENDING} times."
    ]


def test_the_repeats_of_a_batch_are_one_line_before_it_launches(tmp_path, caplog):
    """Draws enqueued in the study: after model.k=2's trial, a batch of four draws 2, 2, 3
    and 2. It launches the one new point, and its three repeats are one line, not three."""
    caplog.set_level("INFO")
    space = {"model.k": CategoricalDistribution([2, 3, 4])}
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    search = search_of(tmp_path, study, space)
    study.enqueue_trial({"model.k": 2})
    assert len(search._ask_batch(study, 1)) == 1
    for k in (2, 2, 3, 2):
        study.enqueue_trial({"model.k": k})
    (new,) = search._ask_batch(study, 4)
    assert new.params == {"model.k": 3}
    said = [r.getMessage() for r in caplog.records if "repeated" in r.getMessage()]
    assert said == [
        "3 draws repeated a tried point, not run (recorded PRUNED, with repeat_of): trials "
        "1-2, 4 drew the point of trial 0 (model.k=2) 3 times."
    ]


class StopsAsItDraws(optuna.samplers.RandomSampler):
    """A sampler that ``error`` (a Ctrl-C, SIGTERM or a bug) meets as it draws, where a slow
    sampler (TPE's, over many trials) spends a search's time."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(seed=0)
        self.error = error

    def sample_independent(self, *args, **kwargs):
        raise self.error


@pytest.mark.parametrize(
    ("error", "ending"),
    [
        (KeyboardInterrupt(), SystemExit(130)),
        (Terminated(), SystemExit(143)),
        (RuntimeError("a bug of the sampler's"), RuntimeError("a bug of the sampler's")),
    ],
    ids=["ctrl_c", "sigterm", "bug"],
)
def test_the_repeats_drawn_before_a_stop_or_error_mid_ask_are_one_line(
    tmp_path, caplog, error, ending
):
    """Two draws enqueued at model.k=2, whose trial ran, then a draw that a Ctrl-C, SIGTERM
    or a bug stops: the two repeats were never logged, as they waited for a batch to launch
    or the search to end well. Every ending logs them now, before its own last lines."""
    caplog.set_level("INFO")
    space = {"model.k": CategoricalDistribution([2, 3, 4])}
    study = optuna.create_study(
        storage=f"sqlite:///{tmp_path / 'optuna.db'}", sampler=StopsAsItDraws(error)
    )
    study.enqueue_trial({"model.k": 2})
    study.tell(study.ask(space), 1.0)
    for _ in range(2):
        study.enqueue_trial({"model.k": 2})
    search = searching(search_of(tmp_path, study, space), study, n_trials=3)
    try:  # not pytest.raises: a KeyboardInterrupt let through would end pytest's session
        search._search()
    except BaseException as err:  # what ends the search is what is checked
        raised = err
    else:
        raise AssertionError("the search ended well")
    assert (type(raised), str(raised)) == (type(ending), str(ending))
    said = [r.getMessage() for r in caplog.records]
    repeats = (
        "2 draws repeated a tried point, not run (recorded PRUNED, with repeat_of): trials "
        "1-2 drew the point of trial 0 (model.k=2) 2 times."
    )
    assert repeats in said
    if isinstance(ending, SystemExit):  # before the lines of the stop, as their last word
        assert said[-1].startswith("The search got ") and said.index(repeats) < len(said) - 1


@pytest.mark.slow  # one trial, then a hundred draws not run: about 20 s
def test_a_sampler_fixed_on_a_tried_point_ends_the_search_with_its_line(tmp_path):
    """PartialFixedSampler, which takes no seed, was refused for the default config's
    ``seed: null`` (``unexpected keyword argument 'seed'``). It runs now; fixed on one point
    of a space it cannot use up (an interval), it ends the search after that point's trial,
    saying so, with exit 0 and the comparison."""
    sweep = tmp_path / "sweep"
    proc = train_py(
        tmp_path, "-m", *ONE_EPOCH, "hydra/sweeper=optuna", "hydra.sweeper.n_trials=3",
        "hydra.sweeper.sampler._target_=optuna.samplers.PartialFixedSampler",
        "+hydra.sweeper.sampler.fixed_params={model.k:2,optimizer.lr:0.005}",
        "+hydra.sweeper.sampler.base_sampler._target_=optuna.samplers.RandomSampler",
        "model.k=choice(2,3)", "optimizer.lr=interval(0.001,0.01)", f"hydra.sweep.dir={sweep}",
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out
    assert (
        "The sampler (PartialFixedSampler) drew only points of earlier trials in its last 100 "
        "trials (not run): the search ends with 1 of n_trials=3 trials."
    ) in out
    repeats = [line for line in out.splitlines() if "repeated a tried point" in line]
    assert len(repeats) == 1 and repeats[0].endswith(
        "[HYDRA] 100 draws repeated a tried point, not run (recorded PRUNED, with repeat_of): "
        "trials 1-100 drew the point of trial 0 (model.k=2 optimizer.lr=0.005) 100 times."
    ), "one line for the hundred draws, not one each"
    assert "| cloudlstm | synthetic | 1 |" in proc.stdout, "the comparison"
    assert sorted(p.name for p in sweep.iterdir() if p.name.isdigit()) == ["0"]


def test_a_seed_given_to_a_sampler_that_takes_none_is_refused_in_one_line():
    """A seed PartialFixedSampler cannot use is refused, with where it belongs; a null one,
    the default config's, is left out."""
    from omegaconf import OmegaConf

    from cloudlstm.errors import UserError
    from hydra_plugins.cloudlstm_optuna._search import _build

    conf = {
        "_target_": "optuna.samplers.PartialFixedSampler",
        "fixed_params": {"model.k": 2},
        "base_sampler": {"_target_": "optuna.samplers.RandomSampler"},
    }
    base = optuna.samplers.BaseSampler
    with pytest.raises(UserError) as refused:
        _build("sampler", OmegaConf.create({**conf, "seed": 3}), base)
    assert str(refused.value) == (
        "hydra.sweeper.sampler.seed=3: PartialFixedSampler takes no seed: remove it with "
        "~hydra.sweeper.sampler.seed, and seed its base sampler: "
        "+hydra.sweeper.sampler.base_sampler.seed=3."
    )
    built = _build("sampler", OmegaConf.create({**conf, "seed": None}), base)
    assert isinstance(built, optuna.samplers.PartialFixedSampler)


def test_the_size_of_a_search_space():
    from hydra_plugins.cloudlstm_optuna._search import space_size

    assert space_size({"a": CategoricalDistribution([1, 1.0, "x"])}) == 3
    assert (
        space_size({"a": IntDistribution(2, 10, step=2), "b": IntDistribution(1, 8, log=True)})
        == 40
    )
    assert space_size({"a": FloatDistribution(0.1, 0.5, step=0.1)}) == 5
    assert space_size({"a": CategoricalDistribution([1]), "b": FloatDistribution(0, 1)}) is None


def test_failed_trials_that_rerun_may_pass_are_named_and_a_bug_keeps_its_traceback(
    tmp_path, caplog
):
    """The report of failed trials names each with its parameters, error and log; a trial
    whose objective was no number is one of them; where one failed of a bug, the report is
    logged and the bug raised (its traceback); else the same command goes on."""
    from hydra.core.utils import JobReturn, JobStatus
    from omegaconf import OmegaConf

    from cloudlstm.errors import OutOfSpaceError, UserError
    from hydra_plugins.cloudlstm_optuna._search import Job, OptunaSearch

    search = OptunaSearch({})
    search.config = OmegaConf.create({"task_name": "train"})
    search.sweep_dir, search.n_trials, search.max_failure_rate = tmp_path, 8, 0.25
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "train.log").write_text("[..][INFO] - training\n")
    full, no_number, bug = JobReturn(), JobReturn(), JobReturn()
    full.status, full.return_value = JobStatus.FAILED, OutOfSpaceError("no room in /r")
    no_number.status, no_number.return_value = JobStatus.COMPLETED, None
    bug.status, bug.return_value = JobStatus.FAILED, IndexError("index 3\nout of range")
    runs = [(Job(4, 0, {"model.k": 3}), full), (Job(5, 1, {"model.k": 6, "x": 0.5}), no_number)]
    for job, ret in runs:
        search._record_failure(job, ret)
    search.launched = 4
    ending = search._failure()
    assert isinstance(ending, UserError)
    assert str(ending).splitlines() == [
        "2 of 4 jobs of the sweep failed, which ended the search "
        "(hydra.sweeper.max_failure_rate=0.25: the share of a batch that may fail):",
        f"  trial 4 (job 0: model.k=3): no room in /r; log {tmp_path / '0' / 'train.log'}",
        "  trial 5 (job 1: model.k=6 x=0.5): returned None as its objective, not a number: "
        "optimized_metric must name a validation metric of a run that validates; run dir "
        f"{tmp_path / '1'} (no log)",
        f"Start the same command with hydra.sweep.dir={tmp_path} to go on with the search (its "
        "failed trials count towards n_trials=8).",
    ]
    assert "][ERROR] - no room in /r" in (tmp_path / "0" / "train.log").read_text()
    search.all_counted = True  # the failures came in the last batch
    assert str(search._failure()).splitlines()[-1] == (
        f"Start the same command with hydra.sweep.dir={tmp_path} and a hydra.sweeper.n_trials "
        "above 8 to go on with the search (its failed trials count towards n_trials=8, which "
        "the study holds: the same command alone runs no further trial)."
    )
    search.all_counted = False
    search._record_failure(Job(6, 2, {"model.k": 9}), bug)
    search.launched = 6
    assert search._failure() is bug._return_value
    (logged,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert logged.splitlines()[3] == "  trial 6 (job 2: model.k=9): index 3; run dir " + (
        f"{tmp_path / '2'} (no log)"
    )


@pytest.mark.parametrize(
    ("error", "again"),
    [
        (
            RuntimeError("a bug"),
            "Once the bug is mended, start the same command with hydra.sweep.dir={sweep} to run "
            "them again and go on with the search (the study keeps the batch's trials running, "
            "which the same command runs whatever its n_trials; finished jobs return their "
            "results at once).",
        ),
        (
            "refused",
            "Each trial's settings were refused as given: mend what its line names (in the "
            "search space or the command) and search again in another hydra.sweep.dir (the "
            "study keeps the batch's trials running, and the same command would run them again "
            "as they are).",
        ),
    ],
    ids=["bug", "refused"],
)
def test_a_slurm_batch_that_failed_in_the_last_batch_says_how_the_search_goes_on(
    tmp_path, error, again
):
    """hydra/launcher=slurm raises its report of a batch's failed jobs (UnfinishedJobsError)
    before returning any: its last line spoke of a sweep ("mend what its line names": a
    search of a mended command is refused as another command), and nothing of a bug to mend,
    where the search's ending of failed trials says both. Now the search ends it with its
    own line; the batch's trials stay running, so the same command runs them again though
    the study holds n_trials (the launcher's failed path needs no larger n_trials)."""
    from cloudlstm.cli.sweep_jobs import UnfinishedJobsError, unfinished_report
    from cloudlstm.errors import UserError

    if error == "refused":
        error = UserError("optimizer.lr=-1 is refused")
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    search = searching(search_of(tmp_path, study, {"x": FloatDistribution(0, 1)}), study, 2)
    search.n_jobs = 2

    def slurm_failed(study, jobs):  # the launcher's raise, as CheckedSlurmLauncher._collect
        lines = [f"job {jobs[1].number} (x=...): failed: {error}; run dir ...; log ..."]
        report = unfinished_report(lines, 2, str(tmp_path), "did not finish", [error])
        raise UnfinishedJobsError(report, lines, 2, [error])

    search._run = slurm_failed
    with pytest.raises(UserError) as ended:
        search._search()
    lines = str(ended.value).splitlines()
    assert lines[0] == "1 of 2 jobs of the sweep did not finish:"
    assert lines[-1] == again.format(sweep=tmp_path)
    assert [t.state for t in study.get_trials()] == [TrialState.RUNNING] * 2
    ran = []
    search = searching(search_of(tmp_path, study, {"x": FloatDistribution(0, 1)}), study, 2)
    search._run = lambda study, jobs: ran.extend(job.trial for job in jobs)
    search._search()
    assert ran == [0, 1], "the same command runs the batch's trials again"


def test_a_trial_whose_job_a_signal_stopped_stays_running_and_others_are_told(tmp_path):
    """A job stopped by SIGTERM (RunInterrupted) leaves its trial RUNNING, as a killed one,
    for the same command to continue from its checkpoint; a job that failed otherwise is
    FAIL, and a finished one COMPLETE."""
    from hydra.core.utils import JobReturn, JobStatus

    from cloudlstm.rundir.stops import RunInterrupted
    from hydra_plugins.cloudlstm_optuna._search import Job, OptunaSearch

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(storage=storage)
    search = OptunaSearch({})
    search.storage = optuna.storages.RDBStorage(storage)
    search.study_id = search.storage.get_study_id_from_name(study.study_name)
    stopped, failed, done = JobReturn(), JobReturn(), JobReturn()
    stopped.status, stopped.return_value = JobStatus.FAILED, RunInterrupted("saved step 5")
    failed.status, failed.return_value = JobStatus.FAILED, ValueError("a bug")
    done.status, done.return_value = JobStatus.COMPLETED, 0.25
    told = []
    for n, ret in enumerate((stopped, failed, done)):
        study.ask({"x": FloatDistribution(0, 1)})
        told.append(search._tell(study, Job(n, n, {}), ret))
    assert told == [False, False, True]
    states = [t.state for t in study.get_trials()]
    assert states == [TrialState.RUNNING, TrialState.FAIL, TrialState.COMPLETE]
    assert [(job.trial, str(err)) for job, err in search.interrupted] == [(0, "saved step 5")]


def test_a_stop_in_a_batch_names_its_trials_that_had_not_begun_apart(tmp_path):
    """A stop in the second of three jobs of a basic launcher's batch (the first told the
    study): the third had not begun, and was named as stopped in with the second. Now the
    line names the trial the stop came in, and the batch's trial that had not begun apart;
    outside training, after the second job's task returned, the stop came in its end or
    in the third's start, and both are named."""
    from hydra_plugins.cloudlstm_optuna._search import Job, OptunaSearch

    search = OptunaSearch({})
    search.sweep_dir, search.n_trials = tmp_path, 3
    search.in_flight = [Job(1, 1, {}), Job(2, 2, {})]
    search.begun, search.returned = 1, {0: 0.5}
    assert search._batch_stop_report("Ctrl-C", trial_said=True).splitlines() == [
        "The search got Ctrl-C in trial 1 (job 1), as the trial's line above says; trial 2 "
        "(job 2) of its batch had not begun; the study keeps them running.",
        f"Start the same command with hydra.sweep.dir={tmp_path} to continue them and go on "
        "to 3 trials.",
    ]
    assert search._batch_stop_report("SIGTERM", trial_said=False).startswith(
        "The search got SIGTERM outside the training of trial 1 (job 1); trial 2 (job 2) of "
        "its batch had not begun;"
    )
    search.returned[1] = 0.25
    assert search._batch_stop_report("SIGTERM", trial_said=False).startswith(
        "The search got SIGTERM outside the training of trial 1 (job 1), trial 2 (job 2); "
        "the study keeps them running."
    )


def test_a_search_stopped_between_batches_says_so_and_how_to_go_on(tmp_path):
    """SIGTERM while no trial runs (the search asking its next batch): no trial to name, and
    the same command goes on to n_trials; with one stopped trial, it is named."""
    from types import SimpleNamespace

    from cloudlstm.rundir.stops import RunInterrupted
    from hydra_plugins.cloudlstm_optuna._search import Job, OptunaSearch

    search = OptunaSearch({})
    search.stop = SimpleNamespace(by="Ctrl-C", received=True)
    search.sweep_dir, search.n_trials = tmp_path, 4
    assert search._stopped_report().splitlines() == [
        "The search got Ctrl-C between two batches of trials.",
        f"Start the same command with hydra.sweep.dir={tmp_path} to go on to 4 trials.",
    ]
    search.interrupted = [(Job(3, 5, {}), RunInterrupted("Job 5 ..., saved x. Run dir y"))]
    assert search._stopped_report().splitlines() == [
        "1 trial of the search did not finish (it got Ctrl-C); the study keeps it running:",
        "  trial 3: Job 5 ..., saved x",
        f"Start the same command with hydra.sweep.dir={tmp_path} to continue it and go on to 4 "
        "trials.",
    ]


@pytest.mark.slow  # two trials stopped, then continued: about 40 s
def test_sigterm_to_a_joblib_search_saves_its_trials_which_the_same_command_finishes(tmp_path):
    """SIGTERM to the search's process alone (a job manager's, ``kill <pid>``): passed on to
    the trials' worker processes, which save their step; the search leaves them RUNNING in
    the study, names each, and exits with 143. The same command continues both from their
    checkpoints and completes the study."""
    from tests.test_preemption import GATE, start, wait_for

    sweep, log = tmp_path / "sweep", tmp_path / "search.log"
    args = [
        *SEARCH, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "hydra.sweeper.n_trials=2",
        "hydra.sweeper.n_jobs=2", f"hydra.sweep.dir={sweep}", f"paths.data_dir={tmp_path / 'data'}",
        "trainer.max_epochs=2", *GATE,
    ]  # fmt: skip
    proc = start(args, log)
    for job in (0, 1):  # both trials wait at their gate, before step 5
        wait_for(sweep / str(job) / "go.waiting", proc, log)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=300) == 143, log.read_text()[-3000:]
    out = log.read_text()
    assert "Traceback" not in out
    assert [t.state for t in load(sweep).get_trials()] == [TrialState.RUNNING] * 2
    report = out[out.index("2 trials of the search did not finish (it got SIGTERM)") :]
    for job in (0, 1):
        last = sweep / str(job) / "checkpoints" / "last.ckpt"
        assert f"trial {job}: Job {job} of the sweep, interrupted by SIGTERM at step 5: " \
            f"saved {last}" in report  # fmt: skip
        job_log = (sweep / str(job) / "train.log").read_text()  # the job's line: the search
        assert f"with hydra.sweep.dir={sweep} continues from it as Optuna trial {job}," in job_log
    assert f"Start the same command with hydra.sweep.dir={sweep} to continue them" in report

    for job in (0, 1):
        (sweep / str(job) / "go").touch()
    again = start(args, tmp_path / "again.log")
    assert again.wait(timeout=600) == 0, (tmp_path / "again.log").read_text()[-3000:]
    trials = load(sweep).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    for t in trials:
        resumed = metrics(sweep, t.number)
        assert resumed["resumed_from"] == "checkpoints/last.ckpt"
        assert t.value == resumed["val"]["val/mae_best"]


# where trial 1 waits: as it is built (the data read, no training yet), or in its training
GATES = {
    "built": ["+callbacks.gate._target_=tests.kill_callback.WaitWhenBuilt"],
    "training": [
        "+callbacks.gate._target_=tests.kill_callback.WaitAt",
        "+callbacks.gate.epoch=0",
        "+callbacks.gate.batch=1",
    ],
}


def ctrl_c_search(
    tmp_path: Path, *more: str, gate: str = "built", n_jobs: int = 1
) -> tuple[list[str], subprocess.Popen, Path]:
    """A search of two trials under the basic launcher, ``n_jobs`` at a time, started as
    from a terminal, whose trial 1 waits at ``gate`` (:data:`GATES`) until ``<sweep>/go_1``
    exists; returned once it waits: its arguments, process and log."""
    from tests.test_preemption import start, wait_for

    sweep, log = tmp_path / "sweep", tmp_path / "search.log"
    sweep.mkdir()
    (sweep / "go_0").touch()
    args = [
        *SEARCH, "hydra.sweeper.n_trials=2", f"hydra.sweeper.n_jobs={n_jobs}",
        f"hydra.sweep.dir={sweep}", f"paths.data_dir={tmp_path / 'data'}", *GATES[gate],
        f"+callbacks.gate.until={sweep}/go_${{hydra:job.num}}", *more,
    ]  # fmt: skip
    proc = start(["-m", *args], log)
    wait_for(sweep / "go_1.waiting", proc, log)
    return args, proc, log


SAID = "as the trial's line above says"  # which names the step it saved
TRIAL_1 = "trial 1 (job 1)"


@pytest.mark.slow  # three trials in two commands: about 30 s
@pytest.mark.parametrize(
    ("gate", "signum", "status", "stopped", "again"),
    [
        ("built", signal.SIGINT, 130, f"Ctrl-C in {TRIAL_1}, {SAID}", "continue it"),
        ("training", signal.SIGINT, 130, f"Ctrl-C in {TRIAL_1}, {SAID}", "continue it"),
        ("training", signal.SIGTERM, 143, f"SIGTERM in {TRIAL_1}, {SAID}", "continue it"),
    ],
    ids=["ctrl_c_built", "ctrl_c_training", "sigterm_training"],
)  # fmt: skip
def test_ctrl_c_to_a_search_compares_its_finished_trials_and_says_how_to_go_on(
    tmp_path, gate, signum, status, stopped, again
):
    """Ctrl-C while the basic launcher's trial reads its data (outside its training): the
    search ended with ``train.py: stopped by Ctrl-C.`` alone, without the comparison of the
    trial that had finished; in its training (or SIGTERM), with the comparison after the
    trial's line and nothing of the search. Now the comparison comes first, then the lines
    of the stop, and the signal's status; the same command runs the trial again and
    completes the study. Ctrl-C before the trial's training has the trial's own line now,
    as SIGTERM there has (the command that starts it)."""
    sweep = tmp_path / "sweep"
    args, proc, log = ctrl_c_search(tmp_path, gate=gate)
    proc.send_signal(signum)
    assert proc.wait(timeout=300) == status, log.read_text()[-3000:]
    out = log.read_text()
    assert "Traceback" not in out
    lines = out.splitlines()
    (row,) = [i for i, line in enumerate(lines) if line.startswith("| cloudlstm | synthetic |")]
    assert lines[-2].endswith(f"The search got {stopped}; the study keeps it running.")
    assert lines[-1] == (
        f"Start the same command with hydra.sweep.dir={sweep} to {again} and go on to 2 trials."
    )
    assert row < len(lines) - 2, "the comparison comes first"
    assert [t.state for t in load(sweep).get_trials()] == [
        TrialState.COMPLETE,
        TrialState.RUNNING,
    ]

    (sweep / "go_1").touch()
    again = train_py(tmp_path, "-m", *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [t.state for t in load(sweep).get_trials()] == [TrialState.COMPLETE] * 2


@pytest.mark.slow  # two trials in one batch, then the stopped one again: about 30 s
def test_a_stop_in_a_batch_tells_the_study_its_finished_trials(tmp_path):
    """Two trials in one batch of the basic launcher, Ctrl-C in the second: the launcher
    returns no result of the batch, and the first trial, which had finished, stayed RUNNING
    with the second, for a continued search to return its metrics. Now the study has its
    result before the search ends, and keeps the stopped trial alone running."""
    sweep = tmp_path / "sweep"
    args, proc, log = ctrl_c_search(tmp_path, n_jobs=2)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=300) == 130, log.read_text()[-3000:]
    lines = log.read_text().splitlines()
    assert lines[-2].endswith(
        f"The search got Ctrl-C in {TRIAL_1}, {SAID}; the study keeps it running."
    )
    first, stopped = load(sweep).get_trials()
    assert (first.state, stopped.state) == (TrialState.COMPLETE, TrialState.RUNNING)
    assert first.value == metrics(sweep, 0)["val"]["val/mae_best"]
    assert "Trial 0 (job 0): objective" in log.read_text()

    (sweep / "go_1").touch()
    again = train_py(tmp_path, "-m", *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [t.state for t in load(sweep).get_trials()] == [TrialState.COMPLETE] * 2


@pytest.mark.slow  # one trial, held as its job ends: about 20 s
@pytest.mark.parametrize(
    ("signum", "by", "status"), [(signal.SIGINT, "Ctrl-C", 130), (signal.SIGTERM, "SIGTERM", 143)]
)
def test_a_signal_as_a_trial_s_job_ends_compares_and_says_how_to_go_on(
    tmp_path, signum, by, status
):
    """Ctrl-C or SIGTERM as trial 0's job ends (Hydra's end of a job, outside its training):
    SIGTERM there ended the search with train.py's line alone; now each prints the
    comparison, then the search's lines naming the trial, with the signal's status."""
    from tests.test_preemption import start, wait_for

    sweep, log = tmp_path / "sweep", tmp_path / "search.log"
    args = [
        *SEARCH, "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=1",
        f"hydra.sweep.dir={sweep}", f"paths.data_dir={tmp_path / 'data'}",
        "+hydra.callbacks.hold._target_=tests.kill_callback.WaitAtJobEnd",
        f"+hydra.callbacks.hold.until={sweep}/ended",
    ]  # fmt: skip
    proc = start(["-m", *args], log)
    wait_for(sweep / "ended_0.waiting", proc, log)
    proc.send_signal(signum)
    assert proc.wait(timeout=300) == status, log.read_text()[-3000:]
    out = log.read_text()
    assert "Traceback" not in out
    lines = out.splitlines()
    (row,) = [i for i, line in enumerate(lines) if line.startswith("| cloudlstm | synthetic |")]
    assert row < len(lines) - 2, "the comparison comes first"
    assert lines[-2].endswith(
        f"The search got {by} outside the training of trial 0 (job 0); the study keeps it running."
    )
    assert lines[-1] == (
        f"Start the same command with hydra.sweep.dir={sweep} to run it again and go on to 2 "
        "trials."
    )
    assert not (sweep / "1").exists()


@pytest.mark.slow  # one trial and a second: about 20 s
@pytest.mark.parametrize(
    ("signum", "status", "by"), [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")]
)
def test_a_second_signal_during_the_comparison_of_a_stopped_search_ends_it_at_once(
    tmp_path, signum, status, by
):
    """The comparison after a Ctrl-C (SIGTERM) can take a while (many runs, W&B): a second
    one then ends the program at once, with its one line and 130 (143)."""
    from tests.test_preemption import wait_for

    held = tmp_path / "compared"
    hold = [
        "+hydra.callbacks.hold._target_=tests.kill_callback.WaitAtMultirunEnd",
        f"+hydra.callbacks.hold.until={held}",
    ]
    _, proc, log = ctrl_c_search(tmp_path, *hold)
    proc.send_signal(signum)
    wait_for(tmp_path / "compared.waiting", proc, log)
    proc.send_signal(signum)
    assert proc.wait(timeout=60) == status, log.read_text()[-3000:]
    out = log.read_text()
    assert "Traceback" not in out and f"The search got {by}" not in out
    assert out.splitlines()[-1] == f"train.py: stopped by {by} {JOBS_BEGUN}"


@pytest.mark.slow  # two trials, one worker killed, then the search continued: about 40 s
def test_a_worker_killed_mid_search_leaves_its_batch_running_for_the_same_command(tmp_path):
    """SIGKILL to a trial's worker (the out-of-memory killer's way) breaks joblib's pool,
    which ends the batch's trials at once: the search names each in lines, without a
    traceback, exits with 1, and leaves them RUNNING; the same command finishes them."""
    from tests.test_faults_sweep_sigterm import kill_a_worker_at_the_gates
    from tests.test_preemption import GATE

    sweep = tmp_path / "sweep"
    args = [
        *SEARCH, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "hydra.sweeper.n_trials=2",
        "hydra.sweeper.n_jobs=2", f"hydra.sweep.dir={sweep}", f"paths.data_dir={tmp_path / 'data'}",
        "trainer.max_epochs=2", *GATE,
    ]  # fmt: skip
    out = kill_a_worker_at_the_gates([*PYTHON, "train.py", *args], sweep, tmp_path / "search.log")
    lines = out[out.index("2 of 2 jobs of the sweep did not finish") :].splitlines()
    assert "a worker process died (SIGKILL(-9))" in lines[0]
    for job, line in enumerate(lines[1:3]):
        assert line.startswith(f"  job {job} (") and "ended by joblib" in line, line
    assert [t.state for t in load(sweep).get_trials()] == [TrialState.RUNNING] * 2

    for job in (0, 1):
        (sweep / str(job) / "go").touch()
    again = train_py(tmp_path, *[a for a in args if not a.startswith("paths.data_dir=")])
    assert again.returncode == 0, again.stderr[-3000:]
    assert [t.state for t in load(sweep).get_trials()] == [TrialState.COMPLETE] * 2


@pytest.mark.slow  # six trials in processes of their own: about 30 s
def test_six_trials_two_at_a_time_through_local_submitit(tmp_path):
    """The same search through ``hydra/launcher=local`` (submitit's local executor, as a
    cluster runs jobs): three batches of two, every trial COMPLETE with its job's value."""
    sweep = tmp_path / "sweep"
    proc = train_py(
        tmp_path,
        *SEARCH,
        "hydra/launcher=local",
        "hydra.sweeper.n_trials=6",
        "hydra.sweeper.n_jobs=2",
        f"hydra.sweep.dir={sweep}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = load(sweep).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 6
    for t in trials:
        assert t.value == metrics(sweep, t.number)["val"]["val/mae_best"]
    assert len({log.parent.name for log in (sweep / ".submitit").rglob("*_log.err")}) == 6


@pytest.mark.slow  # two searches that train: about 30 s
def test_the_recipe_search_tunes_any_model_and_the_cloudlstm_search_adds_its_keys(tmp_path):
    """hparams_search=optuna_recipe searches the optimiser alone, so it runs for a model
    without K or cells (here STGCN); hparams_search=optuna is that space plus the CloudLSTM
    family's K, width and cell."""
    sweep = tmp_path / "sweep"
    proc = train_py(
        tmp_path,
        *[a for a in SEARCH if a != "hparams_search=optuna"],
        "hparams_search=optuna_recipe",
        "model=stgcn",
        "hydra.sweeper.n_trials=2",
        f"hydra.sweep.dir={sweep}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = load(sweep).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    for t in trials:
        assert set(t.params) == {"optimizer.lr", "optimizer.weight_decay"}
        config = yaml.safe_load((sweep / str(t.number) / "config.yaml").read_text())
        assert config["optimizer"]["weight_decay"] == t.params["optimizer.weight_decay"]
        assert config["model"]["_target_"].endswith("STGCN")
    shown = subprocess.run(
        [*PYTHON, "train.py", "hparams_search=optuna", "--cfg", "hydra", "-p",
         "hydra.sweeper.params"],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
    )  # fmt: skip
    assert [line.split(":")[0] for line in shown.stdout.splitlines()[1:]] == [
        "optimizer.lr", "optimizer.weight_decay", "model.k", "model.hidden_channels",
        "model.cell",
    ]  # fmt: skip


def test_a_sweep_on_the_command_line_replaces_that_parameter_of_params():
    """The form the line for hydra.sweeper.params.model.k=... names: 'model.k=choice(3,6)'
    next to -m hparams_search=optuna searches model.k over 3 and 6 alone."""
    from hydra_plugins.cloudlstm_optuna._search import search_space

    space, fixed = search_space({"model.k": "choice(3, 6, 9)"}, ["model.k=choice(3,6)"])
    assert space == {"model.k": CategoricalDistribution([3, 6])} and fixed == {}


def test_the_command_s_key_of_the_search_space_is_the_command_s_whatever_its_prefix():
    """``++key=`` or ``~key`` on the command line beside a search of ``key`` kept both: each
    trial drew a city, then the command's override set (or deleted) it, so the study told
    the sampler of values no trial ran."""
    from hydra_plugins.cloudlstm_optuna._search import search_space

    params = {"data.source.city": "choice(city1, city2)", "model.k": "choice(3, 6)"}
    for line in ["++data.source.city=city2", "~data.source.city"]:
        space, fixed = search_space(params, [line])
        assert list(space) == ["model.k"] and fixed == {line.split("=")[0]: line}
    space, fixed = search_space({"+data.source.x": "choice(1, 2)"}, ["data.source.x=3,4"])
    assert space == {"data.source.x": CategoricalDistribution([3, 4])} and fixed == {}


def continued_in_a_second_process(conf, space: dict) -> optuna.Study:
    """A study of the sampler ``conf`` whose trials 0 and 1 (of ``space``, valued by their
    lr) were drawn in a first process, and 2 and 3 in a second one that opened it as the
    search does: with :func:`continued_sampler`, or the sampler as given where that is
    None."""
    from hydra_plugins.cloudlstm_optuna._search import _build, continued_sampler

    def draw(study: optuna.Study, count: int) -> None:
        for _ in range(count):
            trial = study.ask(space)
            study.tell(trial, trial.params["lr"])

    first = optuna.create_study(sampler=_build("sampler", conf, optuna.samplers.BaseSampler))
    draw(first, 2)
    continued = optuna.create_study(sampler=_build("sampler", conf, optuna.samplers.BaseSampler))
    for trial in first.trials:
        continued.add_trial(trial)
    continued.sampler = continued_sampler(conf, len(continued.trials)) or continued.sampler
    draw(continued, 2)
    return continued


def test_a_continued_study_draws_new_trials_not_the_earlier_ones_again():
    """A search continued in a new process: its fixed sampler seed restarted the same
    draws, so its first random trials repeated the earlier trials' parameters (trial 2 of
    a continued search was trial 0 again) and trained them a second time."""
    from omegaconf import OmegaConf

    from hydra_plugins.cloudlstm_optuna._search import continued_sampler

    conf = OmegaConf.create({"_target_": "optuna.samplers.TPESampler", "seed": 1234,
                             "n_startup_trials": 10})  # fmt: skip
    space = {"lr": FloatDistribution(1e-5, 1e-1, log=True), "cell": CategoricalDistribution(
        ["lstm", "gru", "rnn"])}  # fmt: skip
    assert continued_sampler(conf, 0) is None  # a new study keeps the seed as given
    continued = continued_in_a_second_process(conf, space)
    params = [tuple(t.params.values()) for t in continued.trials]
    assert len(set(params)) == 4
    # the same continuation draws the same trials: the search stays reproducible
    again = continued_sampler(conf, 2).sample_independent(
        continued, continued.trials[2], "lr", space["lr"]
    )
    assert again == continued_sampler(conf, 2).sample_independent(
        continued, continued.trials[2], "lr", space["lr"]
    )


@pytest.mark.parametrize("fixed", [{"cell": "gru"}, {"seed": 0}], ids=["cell", "param_seed"])
def test_a_continued_study_reseeds_the_base_sampler_of_a_sampler_without_a_seed(fixed):
    """PartialFixedSampler takes no seed; its base sampler's was left as given when the
    study continued, so the continued search drew the earlier trials' points again (and,
    as no point runs twice, did not run them). That seed moves on now, as a sampler's own
    does; a fixed parameter named seed stays as fixed, and a base sampler without a seed
    draws anew in each process already."""
    from omegaconf import OmegaConf

    from hydra_plugins.cloudlstm_optuna._search import continued_sampler

    conf = OmegaConf.create({
        "_target_": "optuna.samplers.PartialFixedSampler", "fixed_params": fixed,
        "base_sampler": {"_target_": "optuna.samplers.RandomSampler", "seed": 1234},
    })  # fmt: skip
    space = {key: CategoricalDistribution([value, "other"]) for key, value in fixed.items()}
    space["lr"] = FloatDistribution(1e-5, 1e-1, log=True)
    continued = continued_in_a_second_process(conf, space)
    assert len({t.params["lr"] for t in continued.trials}) == 4
    assert all({k: t.params[k] for k in fixed} == fixed for t in continued.trials)
    again = [  # the same continuation draws the same trials: the search stays reproducible
        continued_sampler(conf, 2).sample_independent(
            continued, continued.trials[2], "lr", space["lr"]
        )
        for _ in range(2)
    ]
    assert again[0] == again[1]
    del conf.base_sampler.seed
    assert continued_sampler(conf, 2) is None
