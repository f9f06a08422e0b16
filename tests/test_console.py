"""What `python train.py` prints: each log line once, no advertisements or numbers that mean
nothing, the config tree once, a short test summary; mistakes in a model's options as one
line."""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from hydra.errors import InstantiationException
from hydra.utils import instantiate

from cloudlstm.errors import UserError
from tests.conftest import PYTHON, ROOT, TINY, subprocess_env

# Log lines of Hydra's console handler ("[12:00:00][INFO] ...") and of Lightning's own
# ("INFO: ..."); the message is the second group.
LOG_LINE = re.compile(r"^(\[\d\d:\d\d:\d\d\]\[[A-Z]+\] |(?:INFO|WARNING): )(.*)$")
# TINY with the console callbacks on and a step budget, as the recipes set one
CONSOLE_JOB = [
    *(o for o in TINY if not o.startswith(("~callbacks", "trainer.enable_progress_bar"))),
    "trainer.max_epochs=-1",
    "trainer.max_steps=6",
    "scheduler.warmup_steps=1",
]


def train_py(
    tmp_path: Path, *args: str, wandb_silent: bool = True, path: Path | None = None
) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of `python train.py` in a fresh process (``path``: a
    folder of programs put first on its PATH)."""
    env = subprocess_env()
    if not wandb_silent:  # W&B's own warnings are part of what is checked
        env.pop("WANDB_SILENT", None)
    if path is not None:
        env["PATH"] = f"{path}{os.pathsep}{env.get('PATH', '')}"
    cmd = [
        *PYTHON,
        "train.py",
        *args,
        f"hydra.run.dir={tmp_path / 'run'}",
        f"paths.data_dir={tmp_path / 'data'}",
    ]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def demo_console(tmp_path_factory) -> tuple[str, str]:
    """stdout and stderr of a tiny job with the default callbacks and the W&B logger, on a
    machine with SLURM's ``srun`` (a cluster's login node), outside any SLURM job."""
    programs = tmp_path_factory.mktemp("programs")
    srun = programs / "srun"
    srun.write_text("#!/bin/sh\nexit 1\n")
    srun.chmod(0o755)
    tmp_path = tmp_path_factory.mktemp("console")
    code, out, err = train_py(tmp_path, *CONSOLE_JOB, wandb_silent=False, path=programs)
    assert code == 0, err[-3000:]
    return out, err


def test_each_log_line_is_printed_once(demo_console):
    out, err = demo_console
    lines = (out + err).splitlines()
    messages = [m.group(2) for line in lines if (m := LOG_LINE.match(line))]
    assert "Seed set to 42" in messages
    twice = [message for message, count in Counter(messages).items() if count > 1]
    assert twice == []
    assert not [line for line in lines if line.startswith("INFO: ")]  # Lightning's handler


def test_no_advertisements_or_empty_numbers(demo_console):
    out, err = demo_console
    text = out + err
    noises = ("Total FLOPs", "v_num", "anonymous", "💡", "litlogger", "TPU available", "NumExpr")
    noises += ("srun",)  # Lightning's hint to start a run of one node with srun
    for noise in noises:
        assert noise not in text, noise
    assert "Trainable params" in out  # the model summary is still there


def test_a_budget_ending_before_any_validation_says_so_once_in_its_own_words(tmp_path):
    """Lightning's "could not find the monitored key ... Did you call log('val/loss')" would
    point at the code; the monitor is checked before the run, and train.py's line says what
    happened."""
    every_epoch = ["trainer.val_check_interval=1.0", "trainer.check_val_every_n_epoch=1"]
    job = [*TINY, "recipe=paper", *every_epoch, "trainer.max_steps=2", "logger=none"]
    code, out, err = train_py(tmp_path, *job)
    assert code == 0, err[-3000:]
    assert "No best checkpoint (no validation): testing the final weights" in out + err
    assert "could not find the monitored key" not in out + err


def test_a_step_budget_shows_steps_out_of_max_steps(demo_console):
    out, _ = demo_console
    assert "/-2" not in out  # Lightning's "Epoch 6/-2" of max_epochs=-1
    bar = [line for line in out.splitlines() if "· step" in line]
    assert bar and "6/6" in bar[-1], out[-2000:]


def test_the_config_tree_is_printed_once_at_the_start(demo_console):
    out, _ = demo_console
    lines = out.splitlines()
    assert lines.count("CONFIG") == 1
    start = lines.index("CONFIG")
    assert any("model.k" in line or "k: 3" in line for line in lines[start : start + 80])
    seed = next(i for i, line in enumerate(lines) if "Seed set to 42" in line)
    assert start < seed  # before the job does anything


def test_the_test_results_are_a_short_summary_and_a_pointer(demo_console):
    out, _ = demo_console
    assert "test/mae_h01" not in out and "Test metric" not in out  # Lightning's long table
    header = next(line for line in out.splitlines() if "mae" in line and "ssim" in line)
    assert [w for w in re.split(r"\W+", header) if w] == [
        "mae",
        "rmse",
        "mape",
        "smae",
        "psnr",
        "ssim",
    ]
    pointer = [line for line in out.splitlines() if "metrics.json" in line]
    assert len(pointer) == 1 and "per forecast step" in pointer[0]


def test_print_config_false_prints_no_tree_and_cfg_job_is_unchanged(tmp_path):
    code, out, err = train_py(tmp_path, "--cfg", "job", "print_config=false")
    assert code == 0, err
    assert out.startswith("task_name: train\n") and "CONFIG" not in out
    assert "print_config: false" in out


def test_a_bad_model_option_is_one_line(tmp_path):
    code, out, err = train_py(
        tmp_path, *TINY, "logger=none", "print_config=false", "model.cell=lstmm"
    )
    assert code == 1
    assert "CONFIG" not in out
    assert "Traceback" not in err and "Error in call to target" not in err
    assert "ValueError(" not in err
    lines = [line for line in err.splitlines() if "lstmm" in line and "overrides" not in line]
    assert lines == ["CloudSeq2Seq: model.cell='lstmm' is not one of ['gru', 'lstm', 'rnn']."]


def test_one_line_errors_unwrap_only_our_own_constructors():
    from cloudlstm.errors import one_line_errors

    bad_cell = {"_target_": "cloudlstm.models.CloudSeq2Seq", "num_channels": 2, "cell": "x"}
    message = r"^CloudSeq2Seq: model\.cell='x' is not one of"
    with pytest.raises(UserError, match=message), one_line_errors():
        instantiate(bad_cell, output_steps=3)
    # a ValueError of another package's constructor keeps Hydra's message and traceback
    with pytest.raises(InstantiationException), one_line_errors():
        instantiate({"_target_": "fractions.Fraction", "numerator": "x"})


def test_the_run_ends_with_its_directory_and_what_to_do_next(demo_console):
    out, _ = demo_console
    run_dir = next(line for line in out.splitlines() if "Run directory:" in line).split(": ")[-1]
    nxt = next(line for line in out.splitlines() if "Next:" in line)
    for command in (f"python eval.py run={run_dir}", f"python predict.py run={run_dir}"):
        assert command in nxt
    assert "python -m cloudlstm.cli.compare" in nxt


def test_the_run_log_says_where_training_is_at_each_validation(demo_console):
    """The progress bar draws on the terminal alone: train.log gets a line per validation."""
    out, _ = demo_console
    run_dir = next(line for line in out.splitlines() if "Run directory:" in line).split(": ")[-1]
    log = (Path(run_dir) / "train.log").read_text()
    lines = re.findall(r"\[cloudlstm\.engine\.progress_log\]\[INFO\] - (.*)", log)
    assert [line.split(":")[0] for line in lines] == [
        "step 3 of 6 (epoch 0)",
        "step 6 of 6 (epoch 1)",
    ]
    progress = r": val/mae [0-9.]+, best [0-9.]+ \(persistence [0-9.]+\); [0-9.e-]+ s a step, "
    assert all(re.search(progress, line) for line in lines), lines


def test_a_program_s_one_line_error_is_all_it_prints(tmp_path):
    """No library's start-up line (numexpr's thread count) before the error's line."""
    done = subprocess.run(
        [*PYTHON, "predict.py", f"run={tmp_path}"],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("predict.py needs data.path"), lines
