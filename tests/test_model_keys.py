"""A sweep over models and a setting some of them have (``-m model=cloudlstm,convlstm,lstm
model.k=3,6,9``) runs the models without it once each; a setting no model of the command
has is refused in one line (cloudlstm.cli.model_keys)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from cloudlstm.cli.model_keys import applicable_jobs, checked_model_keys, model_key
from cloudlstm.errors import UserError
from tests.conftest import PYTHON, ROOT, TINY, one_line, subprocess_env

SETTINGS = {"cloudlstm": {"k", "cell", "hidden_channels"}, "convlstm": {"hidden_channels"}}


def fake_keys(job: list[str]) -> tuple[str, set[str]]:
    """The model a job chooses (``model=`` or the default, cloudlstm) and its settings."""
    name = next((o.split("=", 1)[1] for o in job if o.startswith("model=")), "cloudlstm")
    return name, SETTINGS[name]


def grid(models: list[str], ks: list[int], *rest: str) -> list[list[str]]:
    return [[f"model={m}", f"model.k={k}", *rest] for m in models for k in ks]


def test_models_without_the_setting_run_once_each_in_order():
    got = applicable_jobs(grid(["cloudlstm", "convlstm"], [3, 6, 9], "seed=0"), fake_keys)
    assert got.jobs == [
        ["model=cloudlstm", "model.k=3", "seed=0"],
        ["model=cloudlstm", "model.k=6", "seed=0"],
        ["model=cloudlstm", "model.k=9", "seed=0"],
        ["model=convlstm", "seed=0"],
    ]
    assert got.note == (
        "model=convlstm takes no k: such jobs run once, not once per value of those settings "
        "(6 jobs -> 4)."
    )


def test_a_dropped_setting_of_one_value_merges_no_job_and_says_so():
    """model.k=3 alone: convlstm's job runs without it, and none is run once instead of
    several times; the note said "such jobs run once ... (2 jobs -> 2)"."""
    got = applicable_jobs(grid(["cloudlstm", "convlstm"], [3]), fake_keys)
    assert got.jobs == [["model=cloudlstm", "model.k=3"], ["model=convlstm"]]
    assert got.note == "model=convlstm takes no k: such jobs run without those settings."


def test_a_setting_every_model_has_is_kept_and_nothing_is_said():
    jobs = [[f"model={m}", "model.hidden_channels=8"] for m in ("cloudlstm", "convlstm")]
    got = applicable_jobs(jobs, fake_keys)
    assert got.jobs == jobs and got.note is None


def test_a_setting_no_model_of_the_sweep_has_is_refused():
    with pytest.raises(UserError, match=r"^model\.k: model=convlstm has no setting 'k' \(its"):
        applicable_jobs(grid(["convlstm"], [3, 6]), fake_keys)


@pytest.mark.parametrize(
    "command",
    [
        ["-m", "model=lstm,knn_lstm", "model.hidden_size=8"],
        ["--multirun", "model=lstm,knn_lstm", "seed=0,1", "model.hidden_size=8"],
        ["experiment=metr_la", "model.hidden_size=8"],  # a preset that sweeps
    ],
)
def test_in_a_sweep_a_setting_the_first_model_lacks_becomes_a_sweep_of_its_value(command):
    # the config Hydra composes first has CloudLSTM, without hidden_size: Hydra would fail
    # there, before the jobs, whose models have it
    got = checked_model_keys(["train.py", *command])
    assert got == ["train.py", *command[:-1], "model.hidden_size=choice(8)"]


@pytest.mark.parametrize(
    "command",
    [
        ["model=lstm", "model.hidden_size=8"],  # its model has it
        ["-m", "model=lstm,knn_lstm", "model.hidden_size=8,16"],  # swept: the sweeper's
        ["-m", "model=cloudlstm,lstm", "model.k=3"],  # the first model has it
        ["seed=1"],
    ],
)
def test_a_command_hydra_composes_as_it_is_is_left_alone(command):
    assert checked_model_keys(["train.py", *command]) == ["train.py", *command]


def test_in_a_single_run_a_setting_its_model_lacks_is_refused():
    with pytest.raises(UserError, match=r"^model\.hidden_size: model=cloudlstm has no setting"):
        checked_model_keys(["train.py", "model.hidden_size=8"])


@pytest.mark.parametrize(
    ("override", "key"),
    [("model.k=3", "k"), ("model.cell.x=1", "cell"), ("model=convlstm", None),
     ("+model.k=3", None), ("~model.k", None), ("data.k=3", None)],
)  # fmt: skip
def test_which_overrides_set_a_model_setting(override, key):
    assert model_key(override) == key


def run(tmp_path: Path, *args: str, without: str = "model.k") -> subprocess.CompletedProcess:
    base = [a for a in TINY if not a.startswith(without)]
    cmd = [
        *PYTHON, "train.py", *args, *base, "logger=csv", "report.figures=false",
        "torch_threads=1", "trainer.max_epochs=1", f"paths.data_dir={tmp_path / 'data'}",
    ]  # fmt: skip
    env = subprocess_env()
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_the_sweep_of_models_and_k_trains_each_model_once_per_k_it_has(tmp_path):
    root = tmp_path / "sweep"
    done = run(
        tmp_path, "-m", "model=cloudlstm,convlstm,lstm", "model.k=2,3", f"hydra.sweep.dir={root}"
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    # the tiny job's model.hidden_channels=4 is the LSTM's hidden_size: not its setting either
    note = "model=convlstm takes no k; model=lstm takes no hidden_channels, k: such jobs run once"
    assert note in out and "(6 jobs -> 4)" in out
    jobs = sorted(root.glob("*/metrics.json"))
    models = [json.loads(p.read_text())["run"]["model"] for p in jobs]
    ks = [yaml.safe_load((p.parent / "config.yaml").read_text())["model"].get("k") for p in jobs]
    assert list(zip(models, ks, strict=True)) == [
        ("cloudlstm", 2), ("cloudlstm", 3), ("convlstm", None), ("lstm", None)
    ]  # fmt: skip


def test_a_sweep_of_models_sets_what_they_have_though_the_default_model_lacks_it(tmp_path):
    root = tmp_path / "sweep"
    done = run(
        tmp_path,
        "-m",
        "model=lstm,knn_lstm",
        "model.hidden_size=6",
        f"hydra.sweep.dir={root}",
        without="model.",
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    jobs = sorted(root.glob("*/metrics.json"))
    models = [json.loads(p.read_text())["run"]["model"] for p in jobs]
    configs = [yaml.safe_load((p.parent / "config.yaml").read_text()) for p in jobs]
    sizes = [config["model"]["hidden_size"] for config in configs]
    assert list(zip(models, sizes, strict=True)) == [("lstm", 6), ("knn_lstm", 6)]


@pytest.mark.parametrize("multirun", [[], ["-m"]])
def test_a_setting_the_runs_model_lacks_is_one_line(tmp_path, multirun):
    done = run(tmp_path, *multirun, "model=convlstm", "model.k=3", f"hydra.run.dir={tmp_path}/r")
    line = one_line(done)
    assert line.startswith("model.k: model=convlstm has no setting 'k' (its settings: compile, ")
    assert line.endswith("Drop it, or choose a model that has it.")
