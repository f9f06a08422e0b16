"""What a careful user types: ``eval.py --help``, Lightning's
``trainer.enable_progress_bar=false``, and the data keys of tutorials written before
``data.source`` (named with their new place, in one line)."""

from __future__ import annotations

import gc
import shlex
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from cloudlstm.assembly.build import build_trainer
from cloudlstm.cli.compare.command import main as compare_main
from cloudlstm.cli.override_text import override_text
from cloudlstm.cli.scripts import freeze_for_a_quick_end, refuse_moved_keys
from cloudlstm.cli.train import next_steps, train
from cloudlstm.errors import UserError
from tests.conftest import PYTHON, ROOT, TINY, compose_train, one_line, subprocess_env
from tests.test_compare import write_run

PYTHON_M_COMPARE = ["python", "-m", "cloudlstm.cli.compare"]


def run(*cmd: str) -> subprocess.CompletedProcess:
    """``cmd`` from the repository root, with the tests' environment; its output captured."""
    return subprocess.run(
        list(cmd), cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=300
    )


def error_line(proc: subprocess.CompletedProcess) -> str:
    """The one line a program failed with: exit status 1, nothing else on stderr."""
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_eval_py_help_prints_the_help(flag):
    done = run(*PYTHON, "eval.py", flag)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("Usage: python eval.py run=<run dir> [ckpt=best|last|<path>]")
    assert "eval is powered by Hydra" in done.stdout
    assert "== Configuration groups ==" in done.stdout and "\nckpt: best\n" in done.stdout


def test_the_installed_eval_program_prints_the_help_too():
    program = shutil.which("cloudlstm-eval", path=str(Path(sys.executable).parent))
    if program is None:
        pytest.skip("cloudlstm-eval is not installed in this environment")
    done = run(program, "--help")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "eval is powered by Hydra" in done.stdout
    # its own command, where it said `python eval.py`, which an installed package lacks
    assert done.stdout.startswith("Usage: cloudlstm-eval run=<run dir> [ckpt=best|last|<path>]")
    assert "every key of `cloudlstm-train --help` is overridden" in done.stdout


@pytest.mark.parametrize(
    ("argv0", "said"),
    [
        (
            "/env/bin/cloudlstm-train",
            "`cloudlstm-eval run=/r/a`, forecast new data `cloudlstm-predict",
        ),
        ("train.py", "`python eval.py run=/r/a`, forecast new data `python predict.py"),
        ("-c", "`python eval.py run=/r/a`, forecast new data `python predict.py"),  # the API
    ],
)
def test_next_steps_name_the_programs_as_the_user_runs_them(argv0, said, monkeypatch):
    monkeypatch.setattr(sys, "argv", [argv0])
    steps = next_steps(Path("/r/a"))
    assert said in steps
    compare = (
        "cloudlstm-compare /r" if "cloudlstm" in argv0 else "python -m cloudlstm.cli.compare /r"
    )
    assert steps.endswith(f"`{compare}`.")


def test_next_steps_quote_a_run_folder_for_hydra_and_the_shell(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py"])
    run = Path("/data/my run ü")
    steps = next_steps(run)
    evaluate = steps.split("`")[1]
    assert evaluate == "python eval.py \"run='/data/my run ü'\""
    assert override_text(shlex.split(evaluate)[2]) == str(run)


def test_a_debug_runs_next_steps_compare_it_with_the_debug_runs(tmp_path, monkeypatch, capsys):
    """A debug=... run's hint named a compare command that left the run out and exited 2
    (compare shows debug runs with --include-debug)."""
    monkeypatch.setattr(sys, "argv", ["train.py"])
    run = tmp_path / "run"
    write_run(run, 1.0)
    (run / "config.yaml").write_text((run / "config.yaml").read_text() + "task_name: debug\n")
    hinted = shlex.split(next_steps(run, debug=True).split("`")[-2])
    assert hinted == [*PYTHON_M_COMPARE, str(tmp_path), "--include-debug"]
    assert compare_main(hinted[len(PYTHON_M_COMPARE) :]) == 0
    assert capsys.readouterr().out.startswith("| model |")
    assert not next_steps(run).endswith("--include-debug`.")  # a run of results


@pytest.mark.parametrize(
    "args, said, also_imported",
    [
        # Hydra imports every plugin at start: the sweeper's run lock is imported too
        (["train.py", "foo=1"], "Could not override 'foo':", ["cloudlstm.rundir.lock"]),
        (["eval.py", "run=/no/such/run"], "Run directory /no/such/run does not exist.", []),
    ],
)
def test_a_command_line_error_is_answered_before_lightning_is_imported(args, said, also_imported):
    """Lightning takes seconds to import: a typo is answered without it."""
    done = run(sys.executable, "-X", "importtime", *args)
    assert done.returncode == 1 and said in done.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()]
    assert set(also_imported) <= set(imported)
    assert not [name for name in imported if name.startswith(("lightning", "torch"))]


# the installed programs (console scripts) beside this interpreter
BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "command",
    [
        [sys.executable, "train.py", "--help"],
        [sys.executable, "eval.py", "--help"],
        [sys.executable, "-m", "cloudlstm.cli.compare", "docs/results/beijing_strong"],
        [BIN / "cloudlstm-train", "--help"],
        [BIN / "cloudlstm-compare", "docs/results/beijing_strong"],
        [BIN / "cloudlstm-models", "persistence"],  # python -m's program() too
    ],
    ids=lambda command: " ".join(Path(str(part)).name for part in command[:3]),
)
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_output_to_a_reader_that_left_ends_without_a_traceback(command, buffered):
    """``python train.py --help | head -1``: the pipe is closed before anything is written;
    the program stops there, quietly, whether its output is written at once or at exit.
    The installed ``cloudlstm-compare`` and ``cloudlstm-models`` ended in a
    ``BrokenPipeError`` traceback, where ``python -m`` did not."""
    if not Path(command[0]).exists():
        pytest.skip(f"{command[0]} is not installed beside this Python (pip install -e .)")
    env = subprocess_env()
    env.pop("PYTHONUNBUFFERED", None)
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen(
        [str(part) for part in command],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.stdout.close()  # the reader is gone
    stderr = proc.stderr.read()
    assert proc.wait(timeout=300) == 1
    assert stderr == ""


def test_eval_py_without_a_run_still_says_what_it_needs():
    line = error_line(run(*PYTHON, "eval.py", "ckpt=last"))
    assert line.startswith("eval.py needs the run directory: `python eval.py run=<run dir>")


def test_lightnings_progress_bar_switch_turns_the_bar_off(tmp_path):
    # the default callbacks, bar and summary included, and Lightning's switches
    keep = [o for o in TINY if not o.startswith("~callbacks")]
    switches = ["trainer.enable_progress_bar=false", "+trainer.enable_model_summary=false"]
    cfg = compose_train(tmp_path, [*keep, *switches, "logger=none", "report.figures=false"])
    assert "progress_bar" in cfg.callbacks and "model_summary" in cfg.callbacks
    trainer = build_trainer(cfg, [])
    assert trainer.progress_bar_callback is None
    assert not any("ModelSummary" in type(cb).__name__ for cb in trainer.callbacks)
    assert "test" in train(cfg)  # trained and tested, the bar off


@pytest.mark.parametrize(
    ("override", "line"),
    [
        (
            "data.path=my_fleet.csv",
            "data.path moved to data.source.path: python train.py data.source.path=my_fleet.csv",
        ),
        (
            "data.root=/data/beijing",
            "data.root moved to data.source.root: python train.py data.source.root=/data/beijing",
        ),
        (  # what Hydra suggests for the one above
            "+data.root=/data/beijing",
            "data.root moved to data.source.root: python train.py data.source.root=/data/beijing",
        ),
        (
            "data.value_cols=[no2,pm25]",
            "data.value_cols moved to data.source.value_cols: python train.py "
            "data.source.value_cols=[no2,pm25]",
        ),
    ],
)
def test_a_moved_data_key_is_named_with_its_new_place(override, line):
    got = error_line(run(*PYTHON, "train.py", "data=points", override))
    assert got.startswith(line)


def test_eval_takes_a_moved_key_where_the_runs_config_still_has_it(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    old_data = {"_target_": "cloudlstm.data.beijing.BeijingDataModule", "root": "/x"}
    OmegaConf.save({"data": old_data}, old / "config.yaml")
    argv = ["eval.py", f"run={old}", "data.root=/y"]
    refuse_moved_keys(argv, keep={"_target_", "root"})  # an older run's: taken
    with pytest.raises(UserError, match=r"^data.root moved to data.source.root: python eval.py"):
        refuse_moved_keys(argv, keep={"_target_", "source"})  # today's form


def test_eval_py_names_a_moved_key_of_a_run_in_todays_form(tmp_path):
    new = tmp_path / "run"
    new.mkdir()
    config = {"model": {"_target_": "cloudlstm.models.LSTM"}, "data": {"source": {"root": "/x"}}}
    OmegaConf.save(config, new / "config.yaml")
    line = error_line(run(*PYTHON, "eval.py", f"run={new}", "data.root=/y"))
    assert line.startswith(
        "data.root moved to data.source.root: python eval.py data.source.root=/y"
    )


@pytest.mark.skipif(
    torch.cuda.is_available() or torch.backends.mps.is_available(), reason="a GPU is visible"
)
def test_trainer_gpu_without_a_gpu_is_one_line_before_the_data_load(tmp_path):
    line = one_line(
        run(*PYTHON, "train.py", *TINY, "trainer=gpu", f"hydra.run.dir={tmp_path}/run",
            f"paths.data_dir={tmp_path}/data")
    )  # fmt: skip
    assert line.startswith("trainer.accelerator=gpu (trainer=gpu), but torch finds no GPU")
    assert line.endswith("or run on the CPU: trainer.accelerator=cpu.")
    assert not (tmp_path / "data").exists()  # refused before the data were made


@pytest.mark.skipif(
    torch.cuda.is_available() or torch.backends.mps.is_available(), reason="a GPU is visible"
)
def test_trainer_ddp_without_a_gpu_names_the_cpu_processes(monkeypatch):
    from cloudlstm.assembly.build import check_accelerator

    with pytest.raises(UserError) as err:
        check_accelerator({"strategy": "ddp", "accelerator": "gpu", "devices": 4})
    assert str(err.value).startswith("trainer.accelerator=gpu (trainer=ddp), but torch finds")
    assert str(err.value).endswith("or run its processes on the CPU: trainer=ddp_cpu.")


def test_more_devices_than_gpus_is_refused_in_one_line(monkeypatch):
    from cloudlstm.assembly.build import check_accelerator

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    check_accelerator({"accelerator": "gpu", "devices": 2})
    check_accelerator({"accelerator": "cpu", "devices": 8})  # CPU processes: any number
    with pytest.raises(UserError, match=r"trainer.devices=4, but torch sees 2 GPU\(s\): set "):
        check_accelerator({"accelerator": "cuda", "devices": 4})
    # the text forms of a count and of device indices, which Lightning refused with its own
    # line, or after the data were read
    with pytest.raises(UserError, match=r"trainer.devices=4, but torch sees 2 GPU\(s\): set "):
        check_accelerator({"accelerator": "cuda", "devices": "4"})
    with pytest.raises(UserError, match=r"trainer.devices=0,1,2, but torch sees 2 GPU\(s\)"):
        check_accelerator({"accelerator": "gpu", "devices": "0,1,2"})


@pytest.mark.parametrize("escaped", [False, True], ids=["plain", "escaped"])
def test_a_dollar_brace_in_a_path_is_one_line(tmp_path, escaped):
    """A folder named ``a${b}``: OmegaConf reads ``${b}`` as a reference to a setting b,
    escaped too, and ended in its InterpolationKeyError's traceback."""
    folder = tmp_path / "a${b}"
    folder.mkdir()
    typed = str(folder / "f.csv").replace("${", "\\${" if escaped else "${")
    override = f"data.source.path={typed}"
    proc = run(*PYTHON, "train.py", "data=points", override, f"paths.log_dir={tmp_path}")
    assert error_line(proc) == (
        f"{override}: ${{b}} reads as a reference to the setting b, which the config does not "
        "have: name a setting (e.g. ${seed}), or, for a '${' in a file's or folder's name, "
        "rename it or give a link to it whose name has none (ln -s)."
    )
    assert not list(tmp_path.glob("runs/*/*")), "a refused run leaves no folder"


def test_a_model_refusing_the_datas_sizes_is_one_line_and_leaves_no_folder(tmp_path):
    """Seasonal naive's default season of a day (24 steps) in a window of 12: refused where
    the model is built, after the run's config and data summary were written, which kept
    the folder of a run that never trained."""
    proc = run(*PYTHON, "train.py", "model=seasonal_naive", f"paths.log_dir={tmp_path}")
    assert error_line(proc).startswith(
        "SeasonalNaive: seasonal naive needs one whole season in the input window, but "
        "input_steps M=12 < period=24 steps."
    )
    assert not list(tmp_path.glob("runs/*/*"))


def test_a_refused_run_in_a_named_folder_leaves_it_only_where_it_holds_other_files(tmp_path):
    """hydra.run.dir=<folder> kept .hydra, run.lock and train.log of a run refused at once,
    which compare then listed as a run without results; a folder with a file of the
    user's keeps everything."""
    refused = ["model=seasonal_naive", f"paths.log_dir={tmp_path}"]
    proc = run(*PYTHON, "train.py", *refused, f"hydra.run.dir={tmp_path / 'named'}")
    assert error_line(proc).startswith("SeasonalNaive: seasonal naive needs one whole season")
    assert not (tmp_path / "named").exists()
    (mine := tmp_path / "mine").mkdir()
    (mine / "notes.log").write_text("the user's own")
    proc = run(*PYTHON, "train.py", *refused, f"hydra.run.dir={mine}")
    assert error_line(proc).startswith("SeasonalNaive:")
    assert (mine / "notes.log").read_text() == "the user's own" and (mine / ".hydra").is_dir()


def test_the_programs_end_freezes_the_collector_but_not_under_triton(monkeypatch):
    """gc.freeze() spares the end's collections; with Triton loaded, whose bindings list
    every object still alive at the end as a leak, the collector is left to free them."""
    before = gc.get_freeze_count()
    monkeypatch.setitem(sys.modules, "triton", types.ModuleType("triton"))
    freeze_for_a_quick_end()
    assert gc.get_freeze_count() == before
    monkeypatch.delitem(sys.modules, "triton")
    try:
        freeze_for_a_quick_end()
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()
