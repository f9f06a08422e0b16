"""Bad settings and bad data met at the entry points: one line naming the problem and the fix.

Neighbour counts (``model.k``) against the models and the data's points, a folder given as
a data file, absurd values and values outside their channel's valid range in a data file,
new points far outside the training area at
``predict.py``, and batch limits that count per process under DDP.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from cloudlstm.assembly.assemble import warn_per_process_limits
from cloudlstm.assembly.batch_limits import (
    check_batch_limits,
    warn_batch_above_windows,
    warn_few_windows,
    warn_no_validation_in_budget,
    warn_schedule_cut_short,
)
from cloudlstm.assembly.build import check_process_settings, check_trainer_settings
from cloudlstm.cli.scripts import multirun_flag_first
from cloudlstm.cli.train import train
from cloudlstm.data.pipeline.absurd_values import (
    DEFAULT_MAX_ABS_Z,
    check_valid_ranges,
    checked_stream,
    merged_ranges,
    robust_spread,
)
from cloudlstm.data.pipeline.datamodule import PointCloudDataModule
from cloudlstm.data.sources.synthetic import SyntheticAdvectionDiffusion
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.engine.distributed import per_process_limits
from cloudlstm.errors import UserError, one_line_errors
from cloudlstm.nn import DConv, NeighbourCountError, XConv
from cloudlstm.report.figures import figure_choice
from tests.conftest import PYTHON, ROOT, TINY, compose_train, subprocess_env

# TINY without its model and synthetic-data settings: each test names its own
JOB = [o for o in TINY if not o.startswith(("model.", "data.source."))]
QUIET = ["logger=none", "report.figures=false", "print_config=false", "torch_threads=1"]
SYNTHETIC = [o for o in TINY if o.startswith("data.source.")]


def run_script(
    script: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``python <script> args...`` from the repository root, as a user runs it, with the
    variables of ``env`` set too."""
    return subprocess.run(
        [*PYTHON, script, *args],
        cwd=ROOT,
        env={**subprocess_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def the_line(done: subprocess.CompletedProcess, needle: str) -> str:
    """The one line of the script's output holding ``needle``; no traceback anywhere, and
    none of Hydra's framing (the overrides repeated, the hint of HYDRA_FULL_ERROR)."""
    out = done.stdout + done.stderr
    for unwanted in ("Traceback", "Error executing job", "HYDRA_FULL_ERROR"):
        assert unwanted not in out, out[-3000:]
    lines = [line for line in out.splitlines() if needle in line]
    assert len(lines) == 1, out[-3000:]
    return lines[0]


def stream_table(num_points: int = 12, steps: int = 240, seed: int = 0) -> pd.DataFrame:
    """A long-format hourly stream: ``no2`` around 20 at points spread over 10 x 10 km."""
    rng = np.random.default_rng(seed)
    times = pd.date_range("2024-01-01", periods=steps, freq="1h")
    xy = rng.random((num_points, 2)) * 10
    rows = [
        {
            "timestamp": t,
            "id": f"p{i}",
            "x": xy[i, 0],
            "y": xy[i, 1],
            "no2": 20 + 5 * math.sin(s / 6 + i) + rng.normal(),
        }
        for s, t in enumerate(times)
        for i in range(num_points)
    ]
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- model.k
MODELS = {  # each model's small config
    "cloudlstm": ["model.hidden_channels=4"],
    "cloudgru": ["model.hidden_channels=4"],
    "cloudrnn": ["model.hidden_channels=4"],
    "attention_cloudlstm": ["model.hidden_channels=4"],
    "cloudcnn": ["model.hidden_channels=4", "model.num_layers=2"],
    "knn_lstm": ["model.hidden_size=4"],
    "knn_mlp": ["model.hidden_size=4"],
    "pointcnn": ["model.hidden_channels=4", "model.num_layers=2"],
    "pointlstm": ["model.hidden_channels=4"],
}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """One synthetic-data cache for the tests that build a model of each kind."""
    return tmp_path_factory.mktemp("data")


def written_in(folder: Path) -> set[str]:
    """The names in a refused run's folder; none where the refusal removed it."""
    return {p.name for p in folder.iterdir()} if folder.exists() else set()


@pytest.mark.parametrize("k", [0, -1])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_a_k_below_one_is_one_line_naming_model_k(tmp_path, data_dir, model, k):
    overrides = [*JOB, *SYNTHETIC, *QUIET, f"model={model}", *MODELS[model], f"model.k={k}"]
    cfg = compose_train(tmp_path, overrides)
    cfg.paths.data_dir = str(data_dir)
    with pytest.raises(UserError) as err, one_line_errors():  # as train.py runs it
        train(cfg)
    assert type(err.value) is NeighbourCountError
    assert str(err.value) == (
        f"model.k={k} is not a number of neighbours: set it to a whole number from 1 (each "
        "point alone) to the number of points (the paper's CloudLSTM uses model.k=9)."
    )


def test_train_py_with_k_zero_stops_with_one_line(tmp_path):
    args = [*JOB, *SYNTHETIC, *QUIET, "model.hidden_channels=4", "model.k=0"]
    done = run_script("train.py", *args, f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 1
    assert the_line(done, "model.k=0").startswith("model.k=0 is not a number of neighbours")


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ("optimizer.lr=abc", "AdamW: optimizer.lr='abc': use a finite number."),
        ("trainer.precision=13", "trainer: Precision 13 is invalid."),  # Lightning's, later
    ],
)
def test_a_refused_run_leaves_no_folder_and_a_named_one_keeps_only_the_users_files(
    tmp_path, bad, said
):
    """Hydra makes the run's folder before the checks: a refused run's folder, stamped with
    its start, is removed with its date folder (left empty), so that the runs folder holds
    runs; one the command named goes too where it holds only what the refused run wrote,
    and stays where it holds a file of the user's."""
    args = [*JOB, *SYNTHETIC, *QUIET, "model.hidden_channels=4", bad]
    done = run_script("train.py", *args, f"paths.log_dir={tmp_path / 'logs'}")
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith(said), line
    assert list((tmp_path / "logs" / "runs").iterdir()) == []

    named = tmp_path / "named"
    done = run_script("train.py", *args, f"hydra.run.dir={named}")
    assert done.returncode == 1 and not named.exists()
    (named / "data").mkdir(parents=True)
    done = run_script("train.py", *args, f"hydra.run.dir={named}")
    assert done.returncode == 1 and (named / ".hydra").is_dir() and (named / "data").is_dir()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["no_such_key=1"],
            "Could not override 'no_such_key': the config has no setting no_such_key. Correct "
            "the name; `--cfg job` after the command prints the settings.",
        ),
        (  # not Hydra's +trainer.max_step=5, which adds a key nothing reads
            ["trainer.max_step=5"],
            "Could not override 'trainer.max_step': the config has no setting trainer.max_step "
            "(did you mean trainer.max_steps?). Correct the name; `--cfg job` after the "
            "command prints the settings.",
        ),
        (  # the same name elsewhere in the config
            ["trainer.seed=5"],
            "Could not override 'trainer.seed': the config has no setting trainer.seed (did "
            "you mean seed?). Correct the name; `--cfg job` after the command prints the "
            "settings.",
        ),
        (  # a channel the config's ranges lack: not a misspelt setting
            ["data=milan", "data.valid_ranges={other:[0,null]}"],
            "Could not override 'data.valid_ranges.other': data.valid_ranges holds no range of "
            "other to change. Add it with '++data.valid_ranges.other=[lo,hi]', or replace the "
            "config's ranges with data.valid_ranges=null 'data.valid_ranges={other:[lo,hi]}' "
            "(null for an open end).",
        ),
        (
            ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=1.5"],
            "Error merging override hydra.launcher.n_jobs=1.5: Value '1.5' of type 'float' "
            "could not be converted to Integer.",
        ),
        (  # not Hydra's +hydra.launcher.n_jobs, which the basic launcher would not read
            ["-m", "hydra.launcher.n_jobs=2"],
            "Could not override 'hydra.launcher.n_jobs': this launcher has no setting n_jobs; "
            "choose one that has it: hydra/launcher=joblib.",
        ),
        (  # submitit's SLURM launcher and this package's option built on it
            ["-m", "hydra.launcher.partition=gpu"],
            "Could not override 'hydra.launcher.partition': this launcher has no setting "
            "partition; choose one that has it: hydra/launcher=submitit_slurm or "
            "hydra/launcher=slurm.",
        ),
        (  # the Optuna sweeper has params: the dotted name in it is the trouble
            ["-m", "hparams_search=optuna", "hydra.sweeper.params.model.k='choice(3,6)'"],
            "Could not override 'hydra.sweeper.params.model': a parameter of "
            "hydra.sweeper.params cannot be set by its path (the dots of a name such as "
            "model.k read as nested keys). Sweep it as an override of its own next to -m "
            "instead: e.g. 'model.k=choice(3,6)', not 'hydra.sweeper.params.model.k="
            "choice(3,6)'; it joins the search, in place of what params gives that key.",
        ),
        (
            ["model.k=[1,"],
            "Cannot parse the override 'model.k=[1,': no viable alternative at input '[1,'. "
            "See https://hydra.cc/docs/1.2/advanced/override_grammar/basic for details.",
        ),
        (  # a folder's name the grammar reads only quoted
            ["data=points", "data.source.path=/data/dü/f.csv"],
            "Cannot parse the override 'data.source.path=/data/dü/f.csv': "
            "LexerNoViableAltException: data.source.path=/data/dü/f.csv. ^. See "
            "https://hydra.cc/docs/1.2/advanced/override_grammar/basic for details. If the "
            "value is one string (a path, say), quote it: \"data.source.path='/data/dü/f.csv'\".",
        ),
        (  # a path in the home folder, which the grammar reads only quoted
            ["data=points", "data.source.path=~/f.csv"],
            "Cannot parse the override 'data.source.path=~/f.csv': LexerNoViableAltException: "
            "data.source.path=~/f.csv. ^. See https://hydra.cc/docs/1.2/advanced/"
            "override_grammar/basic for details. If the value is one string (a path, say), "
            "quote it: \"data.source.path='~/f.csv'\".",
        ),
        (
            ["data=nosuch"],
            "In 'train': Could not find 'data/nosuch': choose one of airq, beijing, metr_la, "
            "milan, mobile, points, synthetic, synthetic_moving.",
        ),
        (  # the option meant, before the list of them all
            ["data=mobil"],
            "In 'train': Could not find 'data/mobil' (did you mean data=mobile?): choose one "
            "of airq, beijing, metr_la, milan, mobile, points, synthetic, synthetic_moving.",
        ),
        (  # Hydra's lines told to remove the + or add another, over three lines
            ["data=mobile", "+data.source.city=city2"],
            "+data.source.city=city2: the config has data.source.city already, and + adds "
            "only a new setting. Set it without the +: data.source.city=city2 (or "
            "++data.source.city=city2, which sets it whether or not the config has it).",
        ),
        (  # Hydra named no fix
            ["data=mobile", "~data.source.cty"],
            "~data.source.cty: the config has no setting data.source.cty to delete (did you "
            "mean data.source.city?). Correct the name, or leave ~data.source.cty out; "
            "`--cfg job` after the command prints the settings.",
        ),
        (
            ["~model.k=5"],
            "~model.k=5: the config's model.k is 9, not 5. Give ~model.k to delete it "
            "whatever its value.",
        ),
        (  # Hydra's fix was a config file's: 'override model: lstm'
            ["+model=lstm"],
            "+model=lstm: the config has a model already, and + would add a second. Choose it "
            "without the +: model=lstm.",
        ),
        (
            ["++model=lstm"],
            "++model=lstm: a config group's option is chosen without ++: model=lstm.",
        ),
        (  # `model.k =6`: Hydra's ValueError with its traceback
            ["model.k", "=6"],
            "=6 names no setting before its '=': give key=value with no space around the '=', "
            "e.g. model.k=6.",
        ),
        (
            ["model.k"],
            "Cannot parse the override 'model.k': Error parsing override 'model.k'. missing "
            "EQUAL at '<EOF>'. See https://hydra.cc/docs/1.2/advanced/override_grammar/basic "
            "for details. Give it as model.k=<value>, with no space around the '='.",
        ),
    ],
    ids=[
        "unknown key",
        "misspelt key",
        "key elsewhere",
        "channel without a range",
        "wrong type",
        "launcher key",
        "slurm key",
        "dotted optuna param",
        "no parse",
        "no parse, quote",
        "no parse, home",
        "no option",
        "near option",
        "add a key there",
        "delete a key not there",
        "delete another value",
        "add a group",
        "force-add a group",
        "no key",
        "no equals",
    ],
)
def test_hydra_s_own_errors_are_one_line_without_the_debugging_hint(tmp_path, args, line):
    """Hydra's messages span several lines (what failed, the OmegaConf error with its key
    and type, the fix, the options): one line keeps the what, the why and the fix."""
    done = run_script("train.py", *args, f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [line]


def test_a_sweep_over_a_setting_the_config_lacks_is_one_line_and_leaves_no_sweep_folder(
    tmp_path,
):
    """Hydra makes the sweep's folder and writes multirun.yaml before it composes a job: a
    sweep refused before any job began left it, a sweep without runs. `--cfg job` after a
    command with -m is Hydra's error, so the line gives the program alone with it."""
    logs = tmp_path / "logs"
    done = run_script("train.py", "-m", "data.foo=1,2", f"paths.log_dir={logs}")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "Could not override 'data.foo': the config has no setting data.foo. Correct the name; "
        "`python train.py --cfg job` prints the settings (Hydra takes --cfg without -m)."
    ]
    assert [p for p in logs.rglob("*") if p.is_file()] == []
    named, own = tmp_path / "named", tmp_path / "own"
    (own / "notes").mkdir(parents=True)
    for sweep_dir in (named, own):
        done = run_script("train.py", "-m", "data.foo=1,2", f"hydra.sweep.dir={sweep_dir}")
        assert done.returncode == 1
    assert not named.exists() and (own / "notes").is_dir()  # a folder of the user's stays
    listed = run_script("train.py", "--cfg", "job")  # the command the line gives
    assert listed.returncode == 0 and "seed:" in listed.stdout


@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_adding_a_swept_key_the_config_has_names_the_whole_sweep(tmp_path, launcher):
    """A sweep's job composes its own config: Hydra's fix named that job's value alone
    (`data.source.city=city1`), which would run one job in place of the sweep."""
    sweep = tmp_path / "sweep"
    args = ["-m", f"hydra/launcher={launcher}", "data=mobile", "+data.source.city=city1,city2"]
    done = run_script("train.py", *args, f"hydra.sweep.dir={sweep}")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "+data.source.city=city1,city2: the config has data.source.city already, and + adds "
        "only a new setting. Set it without the +: data.source.city=city1,city2 (or "
        "++data.source.city=city1,city2, which sets it whether or not the config has it)."
    ]
    assert not sweep.exists()  # no job began


@pytest.mark.parametrize(
    ("script", "override", "line"),
    [
        (
            "eval.py",
            "+seed=3",
            "+seed=3: the config has seed already, and + adds only a new setting. Set it "
            "without the +: seed=3 (or ++seed=3, which sets it whether or not the config has "
            "it).",
        ),
        (
            "predict.py",
            "~data.source.time_fromat",
            "~data.source.time_fromat: the config has no setting data.source.time_fromat to "
            "delete (did you mean data.source.time_format?). Correct the name, or leave "
            "~data.source.time_fromat out; `--cfg job` after the command prints the settings.",
        ),
        (
            "eval.py",
            "=3",
            "=3 names no setting before its '=': give key=value with no space around the '=', "
            "e.g. model.k=6.",
        ),
    ],
)
def test_eval_and_predict_refuse_an_overrides_form_in_one_line(tmp_path, script, override, line):
    """eval.py composes the run's config, predict.py its own, as train.py composes its:
    the same lines, before the run is read further."""
    run = tmp_path / "run"
    run.mkdir()
    config = {"seed": 42, "model": {"k": 3}, "data": {"source": {"city": "a"}}}
    OmegaConf.save(config, run / "config.yaml")
    done = run_script(script, f"run={run}", override)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [line]


@pytest.mark.parametrize("modes", [("-m", "--cfg", "job"), ("--info", "--cfg", "hydra")])
def test_two_of_hydras_modes_at_once_are_one_line(modes):
    """Hydra refuses -m with --cfg (or --info with --cfg) by a ValueError: a user's error,
    not a bug, so one line and argparse's status, and the way to see a sweep's settings."""
    done = run_script("train.py", "model=linear,lstm", *modes)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        "Only one of --run, --multirun, --cfg, --info and --shell_completion can be specified: "
        "give one. To see a sweep's settings, print one job's: the same overrides, one value "
        "each, with --cfg job and without -m."
    ]


def test_the_multirun_flag_may_come_after_overrides():
    """Hydra's parser took `a=1 -m b=2,3` for unrecognized arguments, under its usage."""
    argv = ["train.py", "model=lstm", "-m", "seed=0,1", "--multirun"]
    assert multirun_flag_first(argv) == ["train.py", "-m", "model=lstm", "seed=0,1"]
    assert multirun_flag_first(["train.py", "seed=1"]) == ["train.py", "seed=1"]


def test_a_sweep_flagged_between_overrides_runs_its_jobs(tmp_path):
    args = [*JOB, *SYNTHETIC, *QUIET, "model.hidden_channels=4"]
    sweep = f"hydra.sweep.dir={tmp_path / 'sweep'}"
    done = run_script("train.py", *args, "-m", "model.k=0,-1", sweep)
    assert "unrecognized arguments" not in done.stderr
    assert done.returncode == 1  # both jobs refused, each in its line
    assert "model.k=0 is not a number of neighbours" in done.stderr
    assert "model.k=-1 is not a number of neighbours" in done.stderr


def test_hydra_full_error_gives_a_user_error_its_traceback(tmp_path):
    """Hydra's switch for debugging still works: the same error, with the stack."""
    args = [*JOB, *SYNTHETIC, *QUIET, "model.k=0", f"hydra.run.dir={tmp_path / 'run'}"]
    done = run_script("train.py", *args, env={"HYDRA_FULL_ERROR": "1"})
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "model.k=0 is not a number of neighbours" in done.stderr


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("optimizer.lr=-1", "optimizer (AdamW): Invalid learning rate: -1"),
        ("optimizer.lr=0", "optimizer (AdamW): optimizer.lr=0 would never change the weights"),
        ("optimizer.weight_decay=-0.5", "optimizer (AdamW): Invalid weight_decay value: -0.5"),
        ("scheduler.warmup_steps=6000", "scheduler.warmup_steps=6000 must be in [0, trainer.max"),
        # float16 weights: AdamW's eps is 0 there, and the first update divides by it
        ("trainer.precision=16-true", "trainer.precision=16-true keeps the weights in float16"),
    ],
)
def test_an_invalid_optimizer_value_is_one_line_before_the_data_are_read(tmp_path, override, said):
    args = [*JOB, *SYNTHETIC, *QUIET, "model.hidden_channels=4", "trainer.max_steps=5000"]
    done = run_script("train.py", *args, override, f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 1
    line = the_line(done, said.split(":")[0])
    assert line.startswith(said)
    if override.startswith("optimizer.lr=0"):
        assert line.endswith("give a rate > 0, e.g. optimizer.lr=0.001.")
    else:
        assert "optimizer.* key" in line or not override.startswith("optimizer")
    written = written_in(tmp_path / "run")
    assert not written & {"data_summary.json", "config.yaml", "checkpoints"}, written


@pytest.mark.parametrize("clip", ["-1", "inf", "abc"])
def test_a_negative_gradient_clip_is_one_line_before_the_data_are_read(tmp_path, clip):
    """Lightning takes a negative ``gradient_clip_val`` for no clipping at all: a recipe's
    clipping would be gone without a word."""
    args = [*JOB, *SYNTHETIC, *QUIET, "model.hidden_channels=4"]
    done = run_script(
        "train.py", *args, f"trainer.gradient_clip_val={clip}", f"hydra.run.dir={tmp_path / 'run'}"
    )
    assert done.returncode == 1
    line = the_line(done, "trainer.gradient_clip_val=")
    assert line.endswith(
        ": give a number >= 0 (0 or null: no clipping), e.g. trainer.gradient_clip_val=1.0."
    )
    written = written_in(tmp_path / "run")
    assert not written & {"data_summary.json", "config.yaml", "checkpoints"}, written


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("trainer.precision=17", "trainer: Precision 17 is invalid. Allowed precision values: "),
        ("trainer.limit_val_batches=-1", "trainer: You have passed invalid value -1 for limit_"),
        (
            "trainer.devices=0",
            "trainer.devices=0: no device to run on: give a number >= 1, -1 or auto",
        ),
        # Lightning's own lines named no way out (-2 on the CPU: "should be an int > 0")
        (
            "trainer.devices=-2",
            "trainer.devices=-2: a negative number, of which Lightning takes only -1 (every",
        ),
        ("trainer.devices=[0,0]", "trainer.devices=[0, 0]: device 0 is listed twice: give a"),
        # Lightning takes device indices (and -1) on GPUs alone: a TypeError of Hydra's lines
        ("trainer.devices=[0]", "trainer.devices=[0]: device indices, which Lightning takes"),
        ("trainer.devices='0,'", "trainer.devices=0,: device indices, which Lightning takes"),
        ("trainer.devices=-1", "trainer.devices=-1: every GPU, which Lightning takes on GPUs"),
        ("trainer.log_every_n_steps=-1", "trainer.log_every_n_steps=-1: give a whole number"),
        # the recipe validates by steps; Lightning's refusal does not say that the recipe does
        ("trainer.val_check_interval=0.5", "trainer.val_check_interval=0.5: a fraction of an"),
        # Lightning stops at the maximum without a word
        ("trainer.min_epochs=5", "trainer.min_epochs=5: above trainer.max_epochs=2, where"),
        # Lightning trains it in bfloat16 on the CPU, and the run's config said float16
        ("trainer.precision=16-mixed", "trainer.precision=16-mixed: float16 autocast does not"),
    ],
)
def test_a_trainer_setting_lightning_refuses_is_one_line_before_the_data_are_read(
    tmp_path, override, said
):
    """Lightning refuses most when its Trainer is built; a negative ``log_every_n_steps`` it
    takes for "log every step", so that one is refused here."""
    args = [*JOB, *SYNTHETIC, *QUIET, "model.hidden_channels=4", override]
    done = run_script("train.py", *args, f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 1
    assert the_line(done, said.split(":")[0] + ":").startswith(said)
    written = written_in(tmp_path / "run")
    assert not written & {"data_summary.json", "config.yaml", "checkpoints"}, written


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("seed=abc", "seed='abc': give a whole number from 0 to 4294967295, e.g. seed=42."),
        ("seed=-1", "seed=-1: give a whole number from 0 to 4294967295, e.g. seed=42."),
        ("torch_threads=0", "torch_threads=0: give a number of threads >= 1, or null for"),
        ("torch_threads=two", "torch_threads='two': give a number of threads >= 1, or null"),
    ],
)
def test_a_bad_seed_or_thread_count_is_one_line_before_the_data_are_read(tmp_path, override, said):
    """numpy's and int()'s tracebacks before; ``torch_threads=0`` silently meant torch's
    default."""
    args = [*JOB, *SYNTHETIC, *QUIET, "model.hidden_channels=4", override]
    done = run_script("train.py", *args, f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 1
    assert the_line(done, said.split(":")[0] + ":").startswith(said)
    written = written_in(tmp_path / "run")
    assert not written & {"data_summary.json", "config.yaml", "checkpoints"}, written


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("train=maybe", "train='maybe': use true or false."),
        ("test=1", "test=1: use true or false."),
        ("print_config=yes", "print_config='yes': use true or false."),
        ("report.figures=0", "report.figures=0: use true or false."),
        ("tags=5", "tags=5: give a list, e.g. tags=[baseline,first_try]."),
        (
            "ckpt_path=/runs/a/best.ckpt",
            "ckpt_path=/runs/a/best.ckpt is the checkpoint that train=false tests: give "
            "train=false to test it, or resume=/runs/a/best.ckpt to train on from it.",
        ),
        ("report.window=-1", "report.window=-1: give the index of the test window the figures"),
        ("report.window=0.5", "report.window=0.5: give the index of the test window"),
        ("report.channel=-2", "report.channel=-2: give the channel the figures draw, by name"),
    ],
)
def test_a_switch_tags_or_report_option_of_another_kind_is_refused(override, said, tiny_cfg):
    """Each was taken as something else: "maybe" as true, a tags of 5 a TypeError, a
    ckpt_path beside a training ignored, a negative window counted from the end."""
    cfg = tiny_cfg(override)
    with pytest.raises(UserError) as err:
        check_process_settings(cfg)
    assert str(err.value).startswith(said)


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("report.window=100000", "report.window=100000: the test part has "),
        (
            "report.channel=nope",
            "report.channel=nope: the data has channels ['pm25_like', 'no2_like']; ",
        ),
        (
            "report.channel=2",
            "report.channel=2: the data has channels ['pm25_like', 'no2_like']; give ",
        ),
    ],
)
def test_a_report_window_or_channel_the_data_lack_is_refused_before_training(
    override, said, tiny_cfg
):
    """They were found out when the figures were drawn, after the whole training, and the
    run ended without its metrics.json."""
    cfg = tiny_cfg("report.figures=true", override)
    with pytest.raises(UserError) as err:
        train(cfg)
    assert str(err.value).startswith(said)
    assert not (Path(cfg.paths.output_dir) / "checkpoints").exists()


@pytest.mark.parametrize(("window", "channel"), [(True, 0), (0, False), (1.0, 0), (0, 1.0)])
def test_figure_choice_takes_no_bool_or_float_for_an_index(window, channel):
    """From Python, ``window=True`` passed the int test and drew window 1."""
    data = SimpleNamespace(channel_names=["pm25", "no2"], test_dataset=[None] * 4)
    with pytest.raises(UserError, match=r"^report\.(window|channel)="):
        figure_choice(data, window, channel)
    assert figure_choice(data, 3, "no2") == (3, 1)


def test_layers_refuse_k_and_dilation_below_one():
    for bad in (0, -1, 2.5, True):
        with pytest.raises(NeighbourCountError, match=rf"model\.k={bad!r} is not"):
            DConv(2, 3, k=bad)
    with pytest.raises(NeighbourCountError, match=r"model\.dilation=0 is not a dilation"):
        XConv(2, 3, k=3, dilation=0)


def test_more_neighbours_than_points_is_one_line_before_the_model_is_built(tmp_path):
    data = tmp_path / "one_point.csv"
    stream_table(num_points=1).to_csv(data, index=False)
    args = [*JOB, *QUIET, "data=points", f"data.source.path={data}", "model.hidden_channels=4"]
    done = run_script("train.py", *args, "model.k=9", f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 1
    assert the_line(done, "neighbours but the data has") == (
        "model.k=9 neighbours but the data has 1 point(s): set model.k <= 1 (model.k=1: each "
        "point alone), or give the data more points."
    )
    assert not (tmp_path / "run" / "checkpoints").exists()  # stopped before training


def test_k_times_dilation_is_checked_against_the_points(tmp_path):
    cfg = compose_train(
        tmp_path,
        [*JOB, *SYNTHETIC, *QUIET, "model=pointcnn", "model.k=5", "model.dilation=3"],
    )
    with pytest.raises(NeighbourCountError) as err:
        train(cfg)
    assert str(err.value).startswith(
        "model.k=5 x model.dilation=3 neighbours but the data has 12 point(s): set model.k <= 4"
    )


# ---------------------------------------------------------------- data.source.path
def test_a_folder_as_the_data_file_is_one_line(tmp_path):
    folder = tmp_path / "readings"
    folder.mkdir()
    stream_table(num_points=3, steps=40).to_csv(folder / "a.csv", index=False)
    args = [*JOB, *QUIET, "data=points", f"data.source.path={folder}"]
    done = run_script("train.py", *args, f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 1
    assert the_line(done, "is a folder") == (
        f"data.source.path={folder} is a folder that is no Parquet dataset (it holds a.csv): "
        f"name one long-format file, e.g. data.source.path={folder / 'a.csv'}; to train on "
        "several, concatenate their rows into one file, or write them as one Parquet dataset "
        "(a folder of .parquet parts)."
    )


# ---------------------------------------------------------------- absurd values
@pytest.fixture
def absurd_file(tmp_path) -> Path:
    """The stream with one reading of 1e30 (point p4, 2024-01-04 11:00, in the training part)."""
    df = stream_table()
    row = df.index[(df["id"] == "p4") & (df["timestamp"] == pd.Timestamp("2024-01-04 11:00"))]
    df.loc[row, "no2"] = 1e30
    path = tmp_path / "fleet.csv"
    df.to_csv(path, index=False)
    return path


def test_one_absurd_value_stops_train_py_with_one_line(tmp_path, absurd_file):
    args = [*JOB, *QUIET, "model.k=3", "model.hidden_channels=4", "data=points"]
    done = run_script(
        "train.py", *args, f"data.source.path={absurd_file}", f"hydra.run.dir={tmp_path / 'r'}"
    )
    assert done.returncode == 1
    line = the_line(done, "typical spreads")
    assert line.startswith(
        f"file {absurd_file}: 1 value(s) lie more than 10000 typical spreads from their "
        "channel's training median (robust z-score), in 'no2' (1): channel 'no2', point p4, "
        "time 2024-01-04 11:00:00 (step 83): 1e+30 ("
    )
    assert line.endswith(
        "Correct or remove them, set data.source.bad_values=warn to treat them as missing, "
        "or raise data.max_abs_z if they are real readings (null: no check)."
    )


def test_with_bad_values_warn_an_absurd_value_is_missing_and_the_run_is_sane(
    tmp_path, absurd_file, caplog
):
    common = [*JOB, *QUIET, "model.k=3", "model.hidden_channels=4", "data=points"]
    clean_file = tmp_path / "clean.csv"
    stream_table().to_csv(clean_file, index=False)
    clean = train(compose_train(tmp_path / "clean", [*common, f"data.source.path={clean_file}"]))
    cfg = compose_train(
        tmp_path / "warn",
        [*common, f"data.source.path={absurd_file}", "data.source.bad_values=warn"],
    )
    with caplog.at_level(logging.WARNING, logger="cloudlstm.data.pipeline.absurd_values"):
        warned = train(cfg)
    messages = [r.getMessage() for r in caplog.records if "typical spreads" in r.getMessage()]
    assert len(messages) == 1
    assert messages[0].endswith("They count as missing (data.source.bad_values=warn).")
    mae = warned["test"]["overall"]["mae"]["mean"]
    assert 0 < mae < 2 * clean["test"]["overall"]["mae"]["mean"]  # noise ~1, spread ~5


def test_without_the_check_a_scaler_that_flattens_a_channel_is_one_line(tmp_path, absurd_file):
    """data.max_abs_z=null let the 1e30 through: the scaler's mean (5e26) and std (2e28)
    make every real reading normalise to one float32 number, the anchored persistence
    forecast then equals every de-normalised target bit for bit, and the test MAE read
    exactly 0. The scaler is refused instead."""
    args = [*JOB, *QUIET, "model.k=3", "model.hidden_channels=4", "data=points"]
    cfg = compose_train(tmp_path, [*args, f"data.source.path={absurd_file}", "data.max_abs_z=null"])
    with pytest.raises(UserError) as err, one_line_errors():
        train(cfg)
    line = str(err.value)
    assert re.fullmatch(
        rf"file {re.escape(str(absurd_file))}: the middle 98 % of channel 'no2''s training "
        r"readings \(\S+ to \S+\) normalise to one and the same float32 number, -0\.0219\d*: "
        r"the scaler's mean 4\.817e\+26 and standard deviation 2\.194e\+28 dwarf them, so "
        r"the model would learn nothing and every de-normalised target would be the same "
        r"number \(a test MAE of 0\)\. Values far beyond the others inflate the scaler: "
        r"data\.max_abs_z=null checks none: set it \(default 10000\) to find them, and "
        r"correct or remove them\.",
        line,
    ), line
    assert not (tmp_path / "run" / "checkpoints").exists()  # stopped before training
    # 1e6 instead: absurd too, but the scaler (std ~2e4) still tells the readings apart
    from tests.conftest import build_datamodule

    df = pd.read_csv(absurd_file)
    df.loc[df["no2"] > 1e29, "no2"] = 1e6
    df.to_csv(absurd_file, index=False)
    cfg = compose_train(
        tmp_path / "1e6", ["data=points", f"data.source.path={absurd_file}", "data.max_abs_z=null"]
    )
    (tmp_path / "1e6").mkdir()
    build_datamodule(cfg, tmp_path / "1e6")[0].setup("fit")


def test_sane_data_keeps_its_resolution():
    from cloudlstm.data.pipeline.absurd_values import check_resolution
    from cloudlstm.data.transforms import StandardScaler

    rng = np.random.default_rng(0)
    values = np.stack(
        [
            rng.normal(1e6, 1e-1, (500, 4)),  # a large offset, a small spread
            np.where(rng.random((500, 4)) < 0.97, 0.0, rng.exponential(2.0, (500, 4))),  # rain
            rng.lognormal(0, 3, (500, 4)),  # heavy-tailed
        ],
        axis=-1,
    )
    stream = PointCloudStream.from_values(values, np.zeros((4, 2)), ["level", "rain", "traffic"])
    scaler = StandardScaler().fit(stream.values, stream.mask)
    check_resolution(stream, (0, 500), scaler, "here", DEFAULT_MAX_ABS_Z)
    values[3, 1, 2] = 1e30
    stream = PointCloudStream.from_values(values, np.zeros((4, 2)), ["level", "rain", "traffic"])
    scaler = StandardScaler().fit(stream.values, stream.mask)
    with pytest.raises(UserError, match=r"^here: the middle 98 % of channel 'traffic''s .*lower"):
        check_resolution(stream, (0, 500), scaler, "here", 1e40)


def test_the_robust_spread_is_not_moved_by_the_outlier_it_finds():
    rng = np.random.default_rng(0)
    values = rng.normal(20.0, 5.0, 10_000)
    median, spread = robust_spread(values)
    assert abs(median - 20) < 0.3 and abs(spread - 5) < 0.3
    values[0] = 1e30
    assert robust_spread(values) == pytest.approx((median, spread), rel=1e-3)
    rain = np.zeros(10_000)  # mostly 0: no MAD, the 99th percentile's spread instead
    rain[:200] = rng.exponential(2.0, 200)
    assert 0 < robust_spread(rain)[1] < 10
    constant = np.full(1000, 7.0)  # no spread at all: |median| (at least 1)
    assert robust_spread(constant) == (7.0, 7.0)


def test_no_absurd_value_in_the_synthetic_data(tmp_path):
    from tests.conftest import build_datamodule

    for data in ("synthetic", "synthetic_moving"):
        cfg = compose_train(tmp_path / data, [f"data={data}", "data.max_abs_z=100"])
        build_datamodule(cfg, tmp_path / data)  # 100: two orders of magnitude below the default
    assert DEFAULT_MAX_ABS_Z == 1e4


def test_no_absurd_value_in_the_beijing_data(tmp_path):
    from tests.conftest import build_datamodule

    root = ROOT.parent / "shared" / "data" / "beijing_multisite"
    if not any(root.glob("PRSA_Data_*.csv*")):
        pytest.skip(f"the Beijing files are not in {root}")
    weather = "data.source.covariates=[TEMP,PRES,DEWP,RAIN,WSPM,wind]"
    cfg = compose_train(tmp_path, ["data=beijing", f"data.source.root={root}", weather])
    datamodule, _ = build_datamodule(cfg, tmp_path)  # RAIN reaches 133 spreads, SO2 55
    assert datamodule.max_abs_z == DEFAULT_MAX_ABS_Z
    # ... and no value lies outside the physical ranges the source declares, one for every
    # channel but the wind vector's (the files: PRES 982-1043 hPa, TEMP -20..42, DEWP -43..29)
    ranges = datamodule.source.physical_ranges()
    assert set(datamodule.stream.channel_names) - set(ranges) == {"wind_u", "wind_v"}
    assert ranges["PRES"] == (850, 1100) and ranges["TEMP"] == ranges["DEWP"] == (-60, 60)
    assert all(ranges[name] == (0, None) for name in ["PM2.5", "CO", "RAIN", "WSPM"])


# ---------------------------------------------------------------- valid ranges
@pytest.fixture
def negative_file(tmp_path) -> Path:
    """The stream with one reading of -5 (point p4, 2024-01-09 11:00, in the test part)."""
    df = stream_table()
    row = df.index[(df["id"] == "p4") & (df["timestamp"] == pd.Timestamp("2024-01-09 11:00"))]
    df.loc[row, "no2"] = -5.0
    path = tmp_path / "fleet.csv"
    df.to_csv(path, index=False)
    return path


def test_a_value_outside_its_valid_range_is_one_line_naming_it_and_the_option(
    tmp_path, negative_file
):
    args = [*JOB, *QUIET, "model.k=3", "model.hidden_channels=4", "data=points"]
    ranges = "data.valid_ranges={no2:[0,null]}"
    cfg = compose_train(tmp_path, [*args, f"data.source.path={negative_file}", ranges])
    with pytest.raises(UserError) as err, one_line_errors():  # as train.py runs it
        train(cfg)
    assert str(err.value) == (
        f"file {negative_file}: 1 value(s) lie outside their channel's valid range, in 'no2' "
        "(1): channel 'no2', point p4, time 2024-01-09 11:00:00 (step 203): -5 (valid range "
        ">= 0). Correct or remove them, set data.source.bad_values=warn to treat them as "
        "missing, or change the range if they are real readings: "
        "'++data.valid_ranges.no2=[lo,hi]' (null for an open end; "
        "++data.valid_ranges.no2=null: no check)."
    )
    assert not (tmp_path / "run" / "checkpoints").exists()  # stopped before training
    # the fix as given, over the config's ranges: -5 is read
    widened = [
        *args,
        f"data.source.path={negative_file}",
        ranges,
        "++data.valid_ranges.no2=[-9,null]",
    ]
    train(compose_train(tmp_path / "wider", widened))
    # the same file without a range: -5 is 5 spreads from the median, not absurd
    train(compose_train(tmp_path / "open", [*args, f"data.source.path={negative_file}"]))


def test_with_bad_values_warn_a_value_out_of_range_is_missing_and_filled(
    tmp_path, negative_file, caplog
):
    from tests.conftest import build_datamodule

    cfg = compose_train(
        tmp_path,
        [
            "data=points",
            f"data.source.path={negative_file}",
            "data.source.bad_values=warn",
            "data.valid_ranges={no2:[0,null]}",
        ],
    )
    with caplog.at_level(logging.WARNING, logger="cloudlstm.data.pipeline.absurd_values"):
        stream = build_datamodule(cfg, tmp_path)[0].stream
    (message,) = [r.getMessage() for r in caplog.records if "valid range" in r.getMessage()]
    assert message.endswith(
        "(valid range >= 0). They count as missing (data.source.bad_values=warn)."
    )
    p4 = stream.point_ids.index("p4")
    assert not stream.mask[203, p4, 0] and stream.mask.sum() == stream.mask.size - 1
    assert stream.values[203, p4, 0] == stream.values[202, p4, 0]  # the reading before held
    assert stream.values[203, p4, 0] != stream.values[204, p4, 0]


def test_valid_ranges_add_to_and_replace_the_sources():
    declared = {"pm25": (0.0, None), "temp": (-60.0, 60.0)}
    given = check_valid_ranges({"temp": None, "no2": [None, 500], "pm25": [0, 1000]})
    assert given == {"temp": None, "no2": (None, 500.0), "pm25": (0.0, 1000.0)}
    channels = ["pm25", "no2", "temp"]
    assert merged_ranges(declared, given, channels) == {
        "pm25": (0.0, 1000.0),
        "no2": (None, 500.0),
    }
    assert check_valid_ranges(None) == {} and check_valid_ranges({"x": [None, None]}) == {"x": None}
    with pytest.raises(UserError, match=r"names \['o3'\], not channels of the data; its"):
        merged_ranges(declared, {"o3": (0.0, None)}, channels)


@pytest.mark.parametrize(
    "value", [[5], [1, 0], ["a", 1], [True, 1], [math.nan, 1], [0, math.inf], "0..5", 3]
)
def test_a_malformed_valid_range_is_one_line(value):
    with pytest.raises(UserError) as err:
        check_valid_ranges({"no2": value})
    assert str(err.value) == (
        f"data.valid_ranges.no2={value!r}: give [lo, hi] with lo <= hi (numbers; null for an "
        "open end, e.g. data.valid_ranges={no2:[0,null]}), or null for no check."
    )
    with pytest.raises(UserError, match=r"^data.valid_ranges=\[0, 1\]: give a mapping"):
        check_valid_ranges([0, 1])


def test_ranges_and_z_scores_are_checked_alike_ranges_first():
    values = np.full((100, 3, 1), 20.0) + np.random.default_rng(0).normal(0, 1, (100, 3, 1))
    values[10, 1, 0], values[20, 2, 0], values[30, 0, 0] = -5.0, 1e30, 0.1
    stream = PointCloudStream.from_values(values, np.zeros((3, 2)), ["no2"])
    ranges = {"no2": (0.1, None)}  # 0.1 is a float32 in the stream, and within
    checked = checked_stream(stream, (0, 70), 1e4, "warn", "here", None, valid_ranges=ranges)
    assert not checked.mask[10, 1, 0] and not checked.mask[20, 2, 0]
    assert checked.mask.sum() == checked.mask.size - 2
    with pytest.raises(UserError, match=r"^here: 1 value\(s\) lie outside .* -5 \(valid"):
        checked_stream(stream, (0, 70), 1e4, "error", "here", None, valid_ranges=ranges)
    without = checked_stream(stream, (0, 70), 1e4, "warn", "here", None)
    assert without.mask[10, 1, 0] and not without.mask[20, 2, 0]
    # a range fails as the z-scores do where the source has no bad_values option
    with pytest.raises(UserError, match=r"Correct or remove them, or change the range if"):
        checked_stream(stream, (0, 70), None, "error", "here", None, valid_ranges=ranges)


def test_the_synthetic_mobile_traffic_lies_within_its_range(tmp_path):
    from tests.conftest import build_datamodule

    small = ["data.source.num_antennas=30", "data.source.num_services=6", "data.source.num_days=3"]
    cfg = compose_train(tmp_path, ["data=mobile", *small])
    datamodule, _ = build_datamodule(cfg, tmp_path)
    ranges = datamodule.source.physical_ranges()
    assert ranges == dict.fromkeys(datamodule.stream.channel_names, (0.0, None))


# ---------------------------------------------------------------- predict.py
@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory):
    """A tiny CloudLSTM run (K=3) on 12 points in 10 x 10 km, and its data file."""
    tmp = tmp_path_factory.mktemp("fleet")
    data = tmp / "fleet.csv"
    stream_table().to_csv(data, index=False)
    model = ["model.k=3", "model.hidden_channels=4"]
    cfg = compose_train(tmp, [*JOB, *QUIET, *model, "data=points", f"data.source.path={data}"])
    train(cfg)
    return Path(cfg.paths.output_dir), data


def recent(data: Path, steps: int = 12) -> pd.DataFrame:
    df = pd.read_csv(data, parse_dates=["timestamp"])
    return df[df["timestamp"] > df["timestamp"].max() - pd.Timedelta(hours=steps)]


def test_predict_py_warns_in_one_line_of_points_far_outside_the_training_area(fleet_run, tmp_path):
    run, data = fleet_run
    history = recent(data)
    near = history[history["id"] == "p0"].assign(id="near", x=15.0)  # < 1 extent beyond
    far = history[history["id"] == "p1"].assign(id="far", x=10_000.0, y=5.0)
    path = tmp_path / "recent.csv"
    pd.concat([history, near, far]).to_csv(path, index=False)
    done = run_script("predict.py", f"run={run}", f"data.path={path}", f"out={tmp_path / 'f.csv'}")
    assert done.returncode == 0, done.stderr[-3000:]
    line = the_line(done, "extrapolates")
    assert f"data.path={path}: 1 of 14 point(s) lie more than 1x the training area's " in line
    assert "(point far at x=10000, y=5; training x " in line
    assert line.endswith(
        "the model extrapolates there, so forecasts at and near them are unreliable."
    )
    assert set(pd.read_csv(tmp_path / "f.csv")["id"]) >= {"near", "far"}  # still forecast

    inside = tmp_path / "inside.csv"
    pd.concat([history, near]).to_csv(inside, index=False)
    done = run_script(
        "predict.py", f"run={run}", f"data.path={inside}", f"out={tmp_path / 'g.csv'}"
    )
    assert done.returncode == 0 and "extrapolates" not in done.stdout + done.stderr


def test_predict_py_with_fewer_points_than_neighbours_or_a_folder_is_one_line(fleet_run, tmp_path):
    run, data = fleet_run
    history = recent(data)
    two = tmp_path / "two.csv"
    history[history["id"].isin(["p0", "p1"])].to_csv(two, index=False)
    done = run_script("predict.py", f"run={run}", f"data.path={two}", f"out={tmp_path / 'f.csv'}")
    assert done.returncode == 1
    assert the_line(done, "neighbours per point") == (
        f"data.path={two} has readings of 2 point(s) in its last 4 steps, but the model was "
        "trained with model.k=3 neighbours per point: give readings of at least 3 points."
    )
    done = run_script("predict.py", f"run={run}", f"data.path={tmp_path}", "out=f.csv")
    assert done.returncode == 1
    line = the_line(done, "is a folder")
    assert line.startswith(f"data.path={tmp_path} is a folder that is no Parquet dataset")


def test_eval_py_on_data_at_another_interval_is_one_line(fleet_run, tmp_path):
    """predict.py refuses a history sampled at another interval; so does eval.py, where it
    scored the hourly model's forecasts on two-hourly steps without a word."""
    run, data = fleet_run
    table = pd.read_csv(data, parse_dates=["timestamp"])
    every_two = tmp_path / "two_hourly.csv"
    table[table["timestamp"].dt.hour % 2 == 0].to_csv(every_two, index=False)
    done = run_script("eval.py", f"run={run}", f"data.source.path={every_two}")
    assert done.returncode == 1
    assert the_line(done, "sampled every").endswith(
        "was trained on data every 1h, and these data are sampled every 2h: evaluate it on "
        "data every 1h (resample them), or train a model for these data."
    )


def test_eval_py_on_data_with_a_channel_more_names_the_setting_that_reads_its_own(
    fleet_run, tmp_path
):
    """The line said "Evaluate it on data with its training channels", which the data had."""
    run, data = fleet_run
    more = tmp_path / "more.csv"
    pd.read_csv(data).assign(pm10=lambda df: 3.0 + df["no2"] / 10).to_csv(more, index=False)
    done = run_script("eval.py", f"run={run}", f"data.source.path={more}")
    assert done.returncode == 1
    assert the_line(done, "was trained on").endswith(
        "was trained on 1 channels (no2), but the data has 2 (no2, pm10). Read its training "
        "channels alone: data.source.value_cols=[no2]."
    )
    done = run_script(
        "eval.py", f"run={run}", f"data.source.path={more}", "data.source.value_cols=[no2]"
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_eval_py_on_the_training_channels_in_another_order_names_that_order(tmp_path):
    """The same channels in other columns were refused with "Evaluate it on data with its
    training channels", which the data had."""
    table = stream_table().assign(o3=lambda df: 40.0 - df["no2"])
    data = tmp_path / "two.csv"
    table.to_csv(data, index=False)
    model = ["model.k=3", "model.hidden_channels=4"]
    cfg = compose_train(tmp_path, [*JOB, *QUIET, *model, "data=points", f"data.source.path={data}"])
    train(cfg)
    run = Path(cfg.paths.output_dir)
    swapped = tmp_path / "swapped.csv"
    table[["timestamp", "id", "x", "y", "o3", "no2"]].to_csv(swapped, index=False)
    done = run_script("eval.py", f"run={run}", f"data.source.path={swapped}")
    assert done.returncode == 1
    assert the_line(done, "in another").endswith(
        "was trained on the channels no2, o3 in this order, and the data has them in another "
        "(o3, no2): each channel would be read as another. Give them in the training order: "
        "data.source.value_cols=[no2,o3]."
    )
    done = run_script(
        "eval.py", f"run={run}", f"data.source.path={swapped}", "data.source.value_cols=[no2,o3]"
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("fractions", [[], ["data.test_fraction=1"]], ids=["default", "all"])
def test_eval_py_on_a_short_new_file_needs_no_training_part(fleet_run, tmp_path, fractions):
    """A day of new readings: eval.py wanted a training and a validation part of a window
    each, which it never reads (the scaler is the run's), and refused data.test_fraction=1."""
    run, data = fleet_run
    day = recent(data, steps=24).assign(timestamp=lambda df: df["timestamp"] + pd.Timedelta("30D"))
    path = tmp_path / "day.csv"
    day.to_csv(path, index=False)
    out = tmp_path / "eval"
    done = run_script(
        "eval.py", f"run={run}", f"data.source.path={path}", f"hydra.run.dir={out}", *fractions
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "metrics.json").read_text())
    test = [24 - round(0.2 * 24), 24] if not fractions else [0, 24]
    assert results["data"]["bounds"]["test"] == test


def run_in(folder: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    """``python <the repository's script> args...`` run from ``folder``."""
    return subprocess.run(
        [*PYTHON, str(ROOT / script), *args],
        cwd=folder,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_eval_py_reads_the_file_its_run_trained_on_or_says_why_not(tmp_path):
    """A run trained on a relative data.source.path was evaluated, from another folder, on
    whatever file that path named there, without a word."""
    here, there, run = tmp_path / "here", tmp_path / "there", tmp_path / "run"
    for folder, seed in ((here, 0), (there, 1)):
        folder.mkdir()
        stream_table(seed=seed).to_csv(folder / "fleet.csv", index=False)
    model = ["model.k=3", "model.hidden_channels=4"]
    relative = ["data=points", "data.source.path=fleet.csv"]
    done = run_in(here, "train.py", *JOB, *QUIET, *model, *relative, f"hydra.run.dir={run}")
    assert done.returncode == 0, done.stderr[-3000:]

    done = run_in(there, "eval.py", f"run={run}")
    assert done.returncode == 1
    own, other = (here / "fleet.csv").resolve(), (there / "fleet.csv").resolve()
    assert the_line(done, "data.source settings") == (
        f"The run trained on {own}, and its data.source settings read {other} from this folder "
        f"({there.resolve()}; a relative path, or a link that moved). Evaluate from the folder "
        f"it was trained in, or name the file: data.source.path={own} (its own), or "
        f"data.source.path={other} to test on that one."
    )
    assert run_in(here, "eval.py", f"run={run}").returncode == 0
    chosen = run_in(there, "eval.py", f"run={run}", "data.source.path=fleet.csv")
    assert chosen.returncode == 0, chosen.stderr[-3000:]
    # from a folder without a fleet.csv: the run's own file is the fix named there too
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = run_in(elsewhere, "eval.py", f"run={run}")
    assert done.returncode == 1
    assert the_line(done, "no such file") == (
        f"The run trained on {own}, and its data.source.path=fleet.csv names "
        f"{elsewhere.resolve() / 'fleet.csv'} from this folder ({elsewhere.resolve()}), where "
        "there is no such file. Evaluate from the folder it was trained in, or name the file: "
        f"data.source.path={own} (its own)."
    )


def test_eval_py_on_the_training_file_cut_short_says_its_test_was_seen(fleet_run, tmp_path):
    """The file's first 200 of 240 hours: its test part (the last 20 %) lies in the steps
    the run trained on, and eval.py said test_seen_in_training: false, by the steps' numbers
    of another stream."""
    run, data = fleet_run
    table = pd.read_csv(data, parse_dates=["timestamp"])
    short = tmp_path / "short.csv"
    table[table["timestamp"] < table["timestamp"].min() + pd.Timedelta(hours=200)].to_csv(
        short, index=False
    )
    out = tmp_path / "eval"
    done = run_script("eval.py", f"run={run}", f"data.source.path={short}", f"hydra.run.dir={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    trained = json.loads((run / "data_summary.json").read_text())["times"]
    tested = json.loads((out / "metrics.json").read_text())
    assert tested["test_seen_in_training"] is True
    test = tested["data"]["times"]["test"]
    assert test == ["2024-01-07T16:00:00", "2024-01-09T07:00:00"]  # hours 160-199
    assert the_line(done, "flatter").endswith(
        f"The test part of this evaluation, {test[0]} to {test[1]}, overlaps "
        f"{trained['train'][0]} to {trained['val'][1]}, which the run trained on and chose its "
        "checkpoint on (the data now hold 200 steps, 240 at training): its scores flatter the "
        f"model. For a test on unseen times, test on data after {trained['val'][1]}."
    )


def test_training_on_all_test_is_refused_in_one_line(tmp_path):
    cfg = compose_train(tmp_path, [*TINY, *QUIET, "data.test_fraction=1"])
    with pytest.raises(UserError, match=r"the train part of stream .* has 0 steps"):
        train(cfg)


def test_eval_py_with_other_time_features_names_the_ones_to_keep(fleet_run):
    run, _ = fleet_run
    done = run_script("eval.py", f"run={run}", "data.time_features=[hour]")
    assert done.returncode == 1
    assert the_line(done, "holds a model built for").endswith(
        "holds a model built for input_channels=1, and the data give input_channels=3: "
        "evaluate it with data.time_features=[], or train a model for these data."
    )


# ---------------------------------------------------------------- DDP batch limits
TWO_PROCESSES = {"accelerator": "cpu", "strategy": "ddp", "devices": 2}


def test_batch_limits_per_process_are_named_with_the_windows_they_cover():
    windows = {"train": 109, "val": 11, "test": 30}
    assert per_process_limits({"test": 2}, windows, 8, world_size=1) is None
    # 30 test windows: 2 of 4 batches in one process, 1 of 2 in each of two, windows 0 to 15
    assert per_process_limits({"test": 0.5, "val": 1.0}, windows, 8, world_size=2) is None
    assert per_process_limits({"test": 4}, windows, 8, world_size=2) is None  # all 30 anyway
    assert per_process_limits({"test": 2}, windows, 8, world_size=2) == (
        "trainer.limit_test_batches=2 counts batches per process: with 2 processes that is 30 "
        "test windows in all (16 in one process). Divide the limit by 2 for a one-process "
        "run's count, or leave it out to use every window."
    )
    note = per_process_limits({"train": 3, "test": 1}, windows, 8, world_size=4)
    assert note.startswith("trainer.limit_train_batches=3 and trainer.limit_test_batches=1 count")
    assert "96 training windows per epoch in all (24 in one process) and 30 test windows" in note


def test_fractional_batch_limits_are_named_where_ddp_scores_other_windows():
    """A fraction is rounded down in each process: 41 test windows in batches of 8 are 3 of
    6 batches in one process, 1 of 3 in each of two."""
    assert per_process_limits({"test": 0.5}, {"test": 41}, 8, world_size=2) == (
        "trainer.limit_test_batches=0.5 counts batches per process: with 2 processes that is "
        "16 test windows in all (24 in one process). A fraction is rounded down to whole "
        "batches in each process. Leave it out to use every window."
    )
    # 33 windows: 17 and 16, 3 and 2 batches, 0.7 of them 2 and 1: 24 windows as in one
    # process (3 of 5 batches), but rank 0's reach the 31st
    note = per_process_limits({"test": 0.7, "train": 3}, {"test": 33, "train": 109}, 8, 2)
    assert "24 test windows in all (others than in one process) and 48 training" in note
    assert note.endswith(
        "a whole number is counted in each process: divide the limit by 2 "
        "for a one-process run's count. Leave it out to use every window."
    )


@pytest.mark.parametrize(
    ("cfg", "said"),
    [
        ({"trainer": {"limit_train_batches": 0}}, "trainer.limit_train_batches=0: no train "
         "batch would run: leave it out for every batch, or train=false to test without "
         "training."),
        ({"trainer": {"limit_test_batches": 0}}, "trainer.limit_test_batches=0: no test batch "
         "would run: leave it out for every batch, or test=false to train without testing."),
        # 30 test windows in batches of 8: 4 batches, 0.2 of them is none
        ({"trainer": {"limit_test_batches": 0.2}}, "trainer.limit_test_batches=0.2: less than "
         "one of the test split's 4 batches: give a fraction of at least 0.25, a whole number "
         "of batches, or leave it out for every batch."),
        ({"trainer": {"limit_val_batches": 0.3}}, "trainer.limit_val_batches=0.3: less than "
         "one of the val split's 2 batches: give a fraction of at least 0.5,"),
        # an evaluation only tests: no other way out than every batch
        ({"task_name": "eval", "trainer": {"limit_test_batches": 0}}, "trainer."
         "limit_test_batches=0: no test batch would run: leave it out for every batch."),
        # under DDP a fraction is of each process's batches: 15 test windows each, 2 batches
        ({"trainer": {**TWO_PROCESSES, "limit_test_batches": 0.3}}, "trainer."
         "limit_test_batches=0.3: less than one of the test split's 2 batches per process "
         "(2 processes): give a fraction of at least 0.5,"),
        # 11 validation windows: 6 and 5, one batch each
        ({"trainer": {**TWO_PROCESSES, "limit_val_batches": 0.5}}, "trainer."
         "limit_val_batches=0.5: less than one of the val split's 1 batch per process "
         "(2 processes): give a fraction of at least 1,"),
    ],
)  # fmt: skip
def test_a_batch_limit_that_runs_no_batch_of_a_split_is_one_line(cfg, said):
    cfg = OmegaConf.create({"train": True, "test": True, **cfg})
    with pytest.raises(UserError) as refused:
        check_batch_limits(cfg, {"train": 109, "val": 11, "test": 30}, batch_size=8)
    assert str(refused.value).startswith(said), str(refused.value)


@pytest.mark.parametrize(
    "cfg",
    [
        {"trainer": {"limit_val_batches": 0}},  # no validation: allowed, and warned of
        {"trainer": {"limit_test_batches": 0.25, "limit_train_batches": 1.0}},
        {"trainer": {"limit_train_batches": 2, "limit_test_batches": 1}},
        {"test": False, "trainer": {"limit_test_batches": 0}},  # no testing anyway
        {"task_name": "eval", "trainer": {"limit_train_batches": 0}},  # it does not train
        {"trainer": {**TWO_PROCESSES, "limit_test_batches": 0.5, "limit_train_batches": 0.2}},
    ],
)
def test_batch_limits_that_run_each_split_pass(cfg):
    cfg = OmegaConf.create({"train": True, "test": True, **cfg})
    check_batch_limits(cfg, {"train": 109, "val": 11, "test": 30}, batch_size=8)


@pytest.mark.parametrize(
    ("trainer", "warned"),
    [
        # 109 windows in batches of 8: 14 steps an epoch, 28 in 2 epochs, 100 asked
        ({"max_epochs": 2, "max_steps": 100}, "trainer.max_epochs=2 ends training after about "
         "28 steps, before trainer.max_steps=100, over which the learning rate schedule "
         "decays: the run would stop at a high rate. Give the budget in steps "
         "(trainer.max_steps=28) to decay within it."),
        # 2 batches an epoch, 2 batches a step: 1 step an epoch
        ({"max_epochs": 3, "max_steps": 100, "limit_train_batches": 2,
          "accumulate_grad_batches": 2}, "trainer.max_epochs=3 ends training after about 3 "),
        ({"max_epochs": 8, "max_steps": 100}, None),  # 112 steps: the schedule ends first
        ({"max_epochs": -1, "max_steps": 100}, None),  # the recipe's: steps alone
        # debug=fdr: one batch, not 14 steps, whatever max_epochs says
        ({"max_epochs": 1, "max_steps": 100, "fast_dev_run": True}, None),
        ({"max_epochs": 1, "max_steps": 100, "fast_dev_run": 3}, None),
    ],
)  # fmt: skip
def test_an_epoch_budget_that_stops_a_decaying_schedule_early_is_warned_of(trainer, warned, caplog):
    """The schedule spans trainer.max_steps: stopped by max_epochs before it, the run ended at
    a high learning rate without a word."""
    scheduler = {"_target_": "cloudlstm.engine.schedules.warmup_cosine", "total_steps": 100}
    cfg = OmegaConf.create({"train": True, "scheduler": scheduler, "trainer": trainer})
    with caplog.at_level(logging.WARNING, logger="cloudlstm.assembly.batch_limits"):
        assert warn_schedule_cut_short(cfg, {"train": 109}, batch_size=8) is (warned is not None)
    if warned:
        assert caplog.records[0].getMessage().startswith(warned)
    evaluation = OmegaConf.merge(cfg, {"task_name": "eval"})  # eval.py trains nothing
    assert not warn_schedule_cut_short(evaluation, {"train": 109}, batch_size=8)


@pytest.mark.parametrize(
    ("stride", "task", "warned"),
    [
        (1000, "train", "data.stride=1000 leaves 2 train window(s) (of 1388 at stride 1) and "
         "1 val window(s) (of 191 at stride 1) and 1 test window(s) (of 392 at stride 1): what "
         "this job measures there rests on these alone. Lower data.stride."),
        (1000, "eval", "data.stride=1000 leaves 1 test window(s) (of 392 at stride 1): "),
        (50, "train", "data.stride=50 leaves 4 val window(s) (of 191 at stride 1) and 8 test "),
        (20, "train", None),  # 10 val windows and more elsewhere
        (1, "train", None),
    ],
)  # fmt: skip
def test_a_stride_that_leaves_a_few_windows_of_a_part_is_warned_of(stride, task, warned, caplog):
    """data.stride=1000 on METR-LA's week left one window of each part, without a word."""
    bounds = {"train": [0, 1411], "val": [1399, 1613], "test": [1601, 2016]}
    windows = {s: -(-(e - b - 23) // stride) for s, (b, e) in bounds.items()}
    summary = {"stride": stride, "window_bounds": bounds, "history_steps": 12,
               "output_steps": 12, "windows": windows}  # fmt: skip
    cfg = OmegaConf.create({"train": True, "test": True, "task_name": task})
    with caplog.at_level(logging.WARNING, logger="cloudlstm.assembly.batch_limits"):
        assert warn_few_windows(cfg, summary) is (warned is not None)
    if warned:
        assert caplog.records[0].getMessage().startswith(warned)


@pytest.mark.parametrize(
    ("trainer", "batch_size", "warned"),
    [
        ({}, 1000, "data.batch_size=1000 is more than the 109 training windows: every step "
         "trains on one batch of 109, not 1000. Give data.batch_size=109 or less, or train on "
         "more data."),
        ({"accelerator": "cpu", "devices": 2, "strategy": "ddp"}, 64,
         "data.batch_size=64 is more than the 109 training windows (55 on each of 2 processes)"),
        ({}, 109, None),
        ({}, 8, None),
    ],
)  # fmt: skip
def test_a_batch_larger_than_the_training_windows_is_warned_of(trainer, batch_size, warned, caplog):
    """data.batch_size=1000 over 109 training windows trained on batches of 109 without a
    word: the loader keeps its short last batch."""
    cfg = OmegaConf.create({"train": True, "trainer": trainer})
    with caplog.at_level(logging.WARNING, logger="cloudlstm.assembly.batch_limits"):
        assert warn_batch_above_windows(cfg, {"train": 109}, batch_size) is (warned is not None)
    if warned:
        assert caplog.records[0].getMessage().startswith(warned)
    evaluation = OmegaConf.merge(cfg, {"task_name": "eval"})  # eval.py trains nothing
    assert not warn_batch_above_windows(evaluation, {"train": 109}, batch_size)


@pytest.mark.parametrize(
    ("trainer", "val_windows", "warned"),
    [
        ({"max_steps": 4, "val_check_interval": 10}, 11, "trainer.val_check_interval=10 steps "
         "is more than trainer.max_steps=4: no validation would run, so none chooses the "
         "checkpoint tested, early stopping never acts, and the run tests its last weights. "
         "Give trainer.val_check_interval=4 or less to validate within the budget."),
        ({"max_steps": 4, "val_check_interval": 4}, 11, None),  # one, at the end
        ({"max_steps": -1, "val_check_interval": 10}, 11, None),  # a budget in epochs
        ({"max_steps": 4, "val_check_interval": 1.0}, 11, None),  # each epoch's end
        ({"max_steps": 4, "val_check_interval": 10}, 0, None),  # no validation part
        ({"max_steps": 4, "val_check_interval": 10, "limit_val_batches": 0}, 11, None),
        ({"max_steps": 4, "val_check_interval": 10, "check_val_every_n_epoch": 1}, 11, None),
        ({"max_steps": 4, "val_check_interval": 10, "fast_dev_run": True}, 11, None),
    ],
)  # fmt: skip
def test_a_budget_shorter_than_one_validation_interval_is_warned_of(
    trainer, val_windows, warned, caplog
):
    """trainer.max_steps=4 under the recipe's validation every 250 steps trained, tested its
    last weights, and said only that no validation chose a checkpoint."""
    cfg = OmegaConf.create({"train": True, "trainer": trainer})
    windows = {"train": 109, "val": val_windows}
    with caplog.at_level(logging.WARNING, logger="cloudlstm.assembly.batch_limits"):
        assert warn_no_validation_in_budget(cfg, windows) is (warned is not None)
    if warned:
        assert caplog.records[0].getMessage() == warned
    evaluation = OmegaConf.merge(cfg, {"task_name": "eval"})
    assert not warn_no_validation_in_budget(evaluation, windows)


def test_train_warns_of_a_batch_and_a_validation_interval_beyond_the_data_and_budget(
    tiny_cfg, caplog
):
    """Both warnings come from a real training, before it starts."""
    cfg = tiny_cfg("data.batch_size=1000", "trainer.max_steps=2", "trainer.val_check_interval=5")
    with caplog.at_level(logging.WARNING, logger="cloudlstm.assembly.batch_limits"):
        train(cfg)
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("data.batch_size=1000 is more than the ") for m in said), said
    assert any(m.startswith("trainer.val_check_interval=5 steps is more than") for m in said)


def test_data_without_a_test_part_are_refused_where_the_job_tests():
    """data.test_fraction=0 leaves the test part empty on purpose; a job that tests trained
    to the end and then failed with a traceback (trainer.test() returned no results)."""
    windows = {"train": 109, "val": 11, "test": 0}
    for cfg, said in [
        ({"train": True, "test": True}, "The data have no test part to test the run on: give "
         "the data a test part (data.test_fraction > 0, or data.split_times), or train "
         "without testing: test=false."),
        ({"task_name": "eval", "train": True, "test": False}, "The data have no test part to "
         "evaluate the run on: give the data a test part (data.test_fraction > 0, or "
         "data.split_times)."),
    ]:  # fmt: skip
        with pytest.raises(UserError) as refused:
            check_batch_limits(OmegaConf.create(cfg), windows, batch_size=8)
        assert str(refused.value) == said
    check_batch_limits(OmegaConf.create({"train": True, "test": False}), windows, batch_size=8)


def test_train_py_refuses_a_test_limit_of_zero_before_training(tmp_path):
    """Lightning would have trained, then failed to test with a traceback."""
    run_dir = tmp_path / "run"
    args = [*JOB, *SYNTHETIC, *QUIET, "model.hidden_channels=4", "trainer.limit_test_batches=0"]
    done = run_script("train.py", *args, f"hydra.run.dir={run_dir}")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].startswith("trainer.limit_test_batches=0: no test batch")
    assert "Traceback" not in done.stderr and not (run_dir / "checkpoints").exists()


def test_train_py_refuses_a_fraction_leaving_a_ddp_process_no_test_batch_before_training(
    tmp_path,
):
    """Lightning takes the fraction of each process's 2 test batches: it trained, then
    failed to test in both processes with a traceback each."""
    run_dir = tmp_path / "run"
    args = [*JOB, *SYNTHETIC, *QUIET, "model.hidden_channels=4", "trainer=ddp_cpu"]
    done = run_script(
        "train.py", *args, "trainer.limit_test_batches=0.3", f"hydra.run.dir={run_dir}"
    )
    assert done.returncode == 1
    said = "trainer.limit_test_batches=0.3: less than one of the test split's 2 batches per"
    assert done.stderr.splitlines()[-1].startswith(said), done.stderr[-3000:]
    assert "Traceback" not in done.stderr and not (run_dir / "checkpoints").exists()


def test_the_limit_warning_is_logged_once_at_assembly(caplog):
    trainer = SimpleNamespace(
        is_global_zero=True, world_size=2, limit_train_batches=1.0, limit_val_batches=1.0,
        limit_test_batches=2,
    )  # fmt: skip
    summary = {"windows": {"train": 109, "val": 11, "test": 30}}
    cfg = {"train": False, "test": True}
    with caplog.at_level(logging.WARNING, logger="cloudlstm.assembly.assemble"):
        warn_per_process_limits(cfg, trainer, summary, SimpleNamespace(batch_size=8))
        other_rank = SimpleNamespace(**{**vars(trainer), "is_global_zero": False})
        warn_per_process_limits(cfg, other_rank, summary, None)
    assert [r.getMessage()[:34] for r in caplog.records] == ["trainer.limit_test_batches=2 count"]


@pytest.mark.slow
def test_ddp_run_with_a_test_limit_warns_at_startup(tmp_path):
    args = [*JOB, *SYNTHETIC, *QUIET, "model.k=3", "model.hidden_channels=4"]
    args = [a for a in args if not a.startswith(("trainer=", "trainer.limit_test"))]
    done = run_script(
        "train.py", *args, "trainer=ddp_cpu", "train=false", "trainer.limit_test_batches=2",
        f"hydra.run.dir={tmp_path / 'ddp'}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    log = (tmp_path / "ddp" / "train.log").read_text()
    assert log.count("trainer.limit_test_batches=2 counts batches per process") == 1
    test = json.loads((tmp_path / "ddp" / "metrics.json").read_text())["data"]["windows"]["test"]
    assert f"{test} test windows in all (16 in one process)" in log


@pytest.mark.slow
def test_ddp_run_with_a_fractional_test_limit_scores_the_windows_it_warns_of(tmp_path):
    """41 test windows, half of each process's 3 batches: 16 windows, where one process
    scores 24 (3 of its 6 batches)."""
    args = [*JOB, *SYNTHETIC, *QUIET, "model.k=3", "model.hidden_channels=4"]
    args = [a for a in args if not a.startswith(("trainer=", "trainer.limit_test"))]
    done = run_script(
        "train.py", *args, "data.source.num_steps=215", "trainer=ddp_cpu", "train=false",
        "trainer.limit_test_batches=0.5", f"hydra.run.dir={tmp_path / 'ddp'}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    log = (tmp_path / "ddp" / "train.log").read_text()
    assert log.count("16 test windows in all (24 in one process)") == 1
    metrics = json.loads((tmp_path / "ddp" / "metrics.json").read_text())
    assert metrics["data"]["windows"]["test"] == 41
    assert metrics["test"]["num_instances"] == 16


def test_the_trainer_check_is_silent_and_leaves_lightning_s_logging_as_it_was(
    tmp_path, capsys, recwarn
):
    """The Trainer built in earnest says the device lines; the one built to check the
    settings must not say them a second time."""
    cfg = compose_train(tmp_path, [*TINY, "trainer.log_every_n_steps=0"])
    lightning = logging.getLogger("lightning.pytorch")
    before = lightning.level
    check_trainer_settings(cfg.trainer)
    out = capsys.readouterr()
    assert "GPU available" not in out.out + out.err and not recwarn.list
    assert lightning.level == before
    check_trainer_settings(None)  # a config without a trainer (a space check's)


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ({"score_filled": "maybe"}, "data.score_filled='maybe': use true or false."),
        ({"pin_memory": 1}, "data.pin_memory=1: use true or false."),
        ({"seasonal": "no"}, "data.seasonal='no': use true or false."),
        ({"seasonal_days": 0}, "data.seasonal_days=0: use a finite number > 0."),
        ({"seasonal_every_minutes": math.inf}, "data.seasonal_every_minutes=inf: use a finite"),
        ({"dbscan_eps": -0.1}, "data.dbscan_eps=-0.1: use a finite number > 0 or null."),
        ({"dbscan_min_samples": 0}, "data.dbscan_min_samples=0: use a whole number >= 1."),
        ({"outlier_shift": -1}, "data.outlier_shift=-1: use a finite number >= 0 or null."),
        ({"outlier_count": 2.5}, "data.outlier_count=2.5: use a whole number >= 1."),
        ({"outlier_seed": -3}, "data.outlier_seed=-3: use a whole number >= 0."),
        ({"subset_seed": -1}, "data.subset_seed=-1: use a whole number >= 0."),
    ],
)
def test_a_switch_seed_or_study_size_out_of_range_is_refused_before_the_data_are_read(option, said):
    """``bool("maybe")`` was True, and the seeds and DBSCAN's sizes failed with numpy's or
    scikit-learn's error once the data were loaded. The source is not loaded here."""
    with pytest.raises(UserError) as refused:
        PointCloudDataModule(SyntheticAdvectionDiffusion(num_points=4, num_steps=40), **option)
    assert str(refused.value).startswith(said)


def test_the_studies_defaults_and_their_documented_values_pass():
    for option in ({"outlier_shift": 0}, {"outlier_shift": 0.5}, {"dbscan_eps": 0.2}, {}):
        PointCloudDataModule(SyntheticAdvectionDiffusion(num_points=4, num_steps=40), **option)


def test_a_channel_fixed_at_each_point_is_warned_of(caplog):
    """A third coordinate read as a channel (``z`` in a file read with x and y): its errors
    are 0, and averaged in they made every model's scores look better, without a word."""
    from cloudlstm.data.pipeline.preparation import fitted_scaler

    rng = np.random.default_rng(0)
    no2 = rng.normal(20, 5, (100, 6))
    z = np.broadcast_to([10.0, 250, 40, 900, 75, 500], (100, 6))
    values = np.stack([z, no2], axis=-1)
    values[3, 2, 0] = np.nan  # a missing reading does not hide it
    stream = PointCloudStream.from_values(values, np.zeros((6, 2)), ["z", "no2"], name="toy")
    with caplog.at_level(logging.WARNING):
        fitted_scaler(stream, (0, 80), None, "toy", DEFAULT_MAX_ABS_Z)
    assert [r.getMessage() for r in caplog.records] == [
        "toy: channel 'z' holds one value at each point over the training part (a fixed "
        "attribute, e.g. an elevation or a third coordinate): its forecast is its input, and "
        "its near-0 errors, averaged in, flatter every model. List it in data.source.coord_cols "
        "if it is a coordinate, or leave it out with data.source.value_cols."
    ]


def test_a_position_channel_no_point_moves_along_is_warned_of_as_one(caplog):
    """Points that move along x alone: ``pos_y`` holds one value at each point. The warning
    said to list it in coord_cols or leave it out with value_cols, neither of which takes a
    position channel; it says where the scores without it are."""
    from cloudlstm.data.pipeline.preparation import fitted_scaler, with_position_channels

    rng = np.random.default_rng(0)
    no2 = rng.normal(20, 5, (100, 4, 1))
    track = np.zeros((100, 4, 2))
    track[..., 0] = np.arange(100)[:, None] * [0.0, 0.0, 0.0, 1.0]  # point 3 drives along x
    track[..., 1] = [1.0, 5.0, 9.0, 3.0]
    plain = PointCloudStream.from_values(no2, track[0], ["no2"], name="cars")
    stream = dataclasses.replace(plain, trajectory=track)
    with caplog.at_level(logging.WARNING):
        fitted_scaler(with_position_channels(stream), (0, 80), None, "cars", DEFAULT_MAX_ABS_Z)
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "cars: no point moves along 'y' over the training part: its forecast is its input, "
        "and its near-0 errors, averaged in, flatter every model. Read the value channels' "
        "scores alone in metrics.json's per_channel (compare --channels)."
    ]
