"""benchmarks/gpu_campaign.py: its plans name presets, models and run folders that exist; the
deadline stops a command with SIGTERM; the archive holds finished runs alone; and, marked
slow, a plan run end to end on CPU (a real sweep with Hydra's joblib launcher, then eval.py)."""

from __future__ import annotations

import fnmatch
import itertools
import json
import os
import re
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, benchmark_module


@pytest.fixture
def campaign():
    yield from benchmark_module("gpu_campaign")


def _values(overrides: tuple[str, ...], key: str) -> list[str]:
    return next(o.split("=", 1)[1].split(",") for o in overrides if o.startswith(key + "="))


def _sweep_layout(preset: str) -> dict[str, str]:
    """``hydra.sweep`` of an experiment preset, its keys taken from the presets it extends
    (the experiment names in its defaults) where it has none of its own."""
    text = yaml.safe_load((ROOT / "conf" / "experiment" / f"{preset}.yaml").read_text())
    layout: dict[str, str] = {}
    for parent in (d for d in text.get("defaults", []) if isinstance(d, str) and d != "_self_"):
        layout |= _sweep_layout(parent)
    return layout | text.get("hydra", {}).get("sweep", {})


def _run_folders(sweep) -> list[str]:
    """The folders, relative to outputs/, that the sweep's preset gives its runs (every
    interpolation but the model and seed read as any text)."""
    hydra = {"sweep": _sweep_layout(_values(sweep.overrides, "experiment")[0])}
    folder = hydra["sweep"]["dir"].replace("${paths.log_dir}/", "")
    folder = re.sub(r"\$\{[^}]*\}", "X", folder)
    return [
        f"{folder}/{model}/seed_{seed}"
        for model, seed in itertools.product(
            _values(sweep.overrides, "model"), _values(sweep.overrides, "seed")
        )
        if hydra["sweep"]["subdir"] == "${hydra:runtime.choices.model}/seed_${seed}"
    ]


def test_every_plan_names_presets_models_and_run_folders_that_exist(campaign) -> None:
    for name, sweeps in campaign.PLANS.items():
        for sweep in sweeps:
            preset = _values(sweep.overrides, "experiment")[0]
            assert (ROOT / "conf" / "experiment" / f"{preset}.yaml").is_file(), (name, preset)
            models = _values(sweep.overrides, "model")
            for model in models:
                assert (ROOT / "conf" / "model" / f"{model}.yaml").is_file(), (name, model)
            assert sweep.jobs == len(models) * len(_values(sweep.overrides, "seed")), name
            folders = _run_folders(sweep)
            assert len(folders) == sweep.jobs, (name, "the preset's subdir is model/seed_<s>")
            for evaluation in sweep.evals:
                assert fnmatch.filter(folders, evaluation.runs), (name, evaluation.runs)


def test_set_replaces_or_adds_an_override_and_the_jobs_follow(campaign) -> None:
    sweep = campaign.Sweep(
        ("experiment=metr_la", "model=a,b,c", "seed=0,1,2", "data.time_features=[hour,day]")
    )
    assert sweep.jobs == 9  # a list value is one value, not a sweep
    narrowed = sweep.with_overrides(("seed=1,2", "model=b", "model.compile=false"))
    assert narrowed.overrides == (
        "experiment=metr_la", "model=b", "seed=1,2", "data.time_features=[hour,day]",
        "model.compile=false",
    )  # fmt: skip
    assert narrowed.jobs == 2 and sweep.jobs == 9
    assert campaign.override("model=b") == "model=b"
    every = campaign.train_command(sweep, Path("out"), "gpu", smoke=False)
    assert "hydra.launcher.n_jobs=9" in every
    pool = campaign.train_command(
        sweep.with_overrides(("hydra.launcher.n_jobs=3",)), Path("out"), "gpu", smoke=False
    )
    assert [a for a in pool if a.startswith("hydra.launcher.n_jobs")] == ["hydra.launcher.n_jobs=3"]
    assert f"torch_threads={max(1, (os.cpu_count() or 1) // 3)}" in pool
    for bad in ("model", "=b"):
        with pytest.raises(Exception, match="is not KEY=VALUE"):
            campaign.override(bad)


def test_the_deadline_sends_sigterm_and_then_waits_for_the_command(campaign, tmp_path) -> None:
    handles_it = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: (print('saving'), sys.exit(143)))\n"
        "print('training', flush=True); time.sleep(60)\n"
    )
    log = tmp_path / "campaign.log"
    start = time.monotonic()
    step = campaign.run_until([sys.executable, "-c", handles_it], time.monotonic() + 2, {}, log)
    assert step.stopped_at_deadline and step.exit_code == 143
    assert time.monotonic() - start < 20
    assert log.read_text().splitlines()[-2:] == ["training", "saving"]
    quick = campaign.run_until([sys.executable, "-c", "print(1)"], time.monotonic() + 30, {}, log)
    assert not quick.stopped_at_deadline and quick.exit_code == 0


def test_a_command_that_ignores_sigterm_is_killed_after_the_grace(campaign, tmp_path) -> None:
    deaf = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)\n"
    step = campaign.run_until(
        [sys.executable, "-c", deaf], time.monotonic() + 1, {}, tmp_path / "log", grace=3
    )
    assert step.stopped_at_deadline and step.exit_code == -9 and 3.5 < step.seconds < 20


def _run(folder, *, finished: bool, evals: int = 0) -> None:
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "config.yaml").write_text("seed: 0\n")
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"x")
    if finished:
        (folder / "metrics.json").write_text("{}")
    for i in range(evals):
        evaluation = folder / "eval" / f"2026-01-0{i + 1}"
        evaluation.mkdir(parents=True)
        (evaluation / "metrics.json").write_text("{}")
        (evaluation / "config.yaml").write_text("task_name: eval\n")


def test_the_archive_holds_the_finished_runs_and_their_evaluations_only(campaign, tmp_path) -> None:
    outputs = tmp_path / "outputs"
    _run(outputs / "exp" / "tag" / "a" / "seed_0", finished=True, evals=2)
    _run(outputs / "exp" / "tag" / "a" / "seed_1", finished=False)
    _run(outputs / "exp" / "tag" / "b" / "seed_0", finished=True)
    archive = tmp_path / "runs.tar.gz"
    assert campaign.pack(outputs, archive) == ["exp/tag/a/seed_0", "exp/tag/b/seed_0"]
    with tarfile.open(archive) as tar:
        names = sorted(tar.getnames())
    assert names == sorted([
        "exp/tag/a/seed_0/metrics.json", "exp/tag/a/seed_0/config.yaml",
        "exp/tag/a/seed_0/eval/2026-01-01/metrics.json",
        "exp/tag/a/seed_0/eval/2026-01-01/config.yaml",
        "exp/tag/a/seed_0/eval/2026-01-02/metrics.json",
        "exp/tag/a/seed_0/eval/2026-01-02/config.yaml",
        "exp/tag/b/seed_0/metrics.json", "exp/tag/b/seed_0/config.yaml",
    ])  # fmt: skip
    stopped = outputs / "exp" / "tag" / "a" / "seed_1"
    assert campaign.state(stopped) == {
        "finished": False, "checkpoints": ["last.ckpt"], "progress": None,
    }  # fmt: skip
    (stopped / "train.log").write_text(
        "[2026-12-04 17:32:25,871][cloudlstm.engine.progress_log][INFO] - step 750 of 2,000\n"
        "[2026-12-04 17:32:29,343][cloudlstm.engine.progress_log][INFO] - step 800 of 2,000\n"
        "[2026-12-04 17:32:29,392][cloudlstm.engine.signals][INFO] - Received SIGTERM\n"
    )
    assert campaign.state(stopped)["progress"] == "step 800 of 2,000"
    evaluation = campaign.Eval("exp/*/a/seed_*", ("data.holdout_history=false",))
    commands = campaign.eval_commands(evaluation, outputs, "gpu", smoke=False)
    assert [c[2:] for c in commands] == [
        [
            f"run={outputs}/exp/tag/a/seed_0",
            "data.holdout_history=false",
            "trainer=gpu",
            "trainer.enable_progress_bar=false",
        ]
    ]


def test_the_logs_archive_holds_every_runs_train_log(campaign, tmp_path) -> None:
    outputs = tmp_path / "outputs"
    for seed, finished in ((0, True), (1, False), (2, False)):
        _run(outputs / "exp" / "a" / f"seed_{seed}", finished=finished)
    for seed in (0, 1):
        (outputs / "exp" / "a" / f"seed_{seed}" / "train.log").write_text(f"step {seed}\n")
    archive = tmp_path / "logs.tar.gz"
    assert campaign.pack_logs(outputs, archive) == ["exp/a/seed_0", "exp/a/seed_1"]
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == ["exp/a/seed_0/train.log", "exp/a/seed_1/train.log"]
        assert tar.extractfile("exp/a/seed_1/train.log").read() == b"step 1\n"


def test_the_environment_keeps_float32_on_a_gpu_and_points_the_presets_at_the_data(
    campaign, tmp_path, monkeypatch
) -> None:
    for variable in (*campaign.DATA_ROOTS, "NVIDIA_TF32_OVERRIDE"):
        monkeypatch.delenv(variable, raising=False)
    (tmp_path / "milan_telecom").mkdir()
    gpu = campaign.environment(tmp_path, "gpu")
    assert gpu["NVIDIA_TF32_OVERRIDE"] == "0" and gpu["PROJECT_ROOT"] == str(ROOT)
    assert gpu["CLOUDLSTM_MILAN_ROOT"] == str(tmp_path / "milan_telecom")
    assert "CLOUDLSTM_BEIJING_ROOT" not in gpu  # not in --data: the preset's default stays
    assert "NVIDIA_TF32_OVERRIDE" not in campaign.environment(None, "cpu")


@pytest.mark.slow
def test_a_plan_runs_end_to_end_on_cpu(campaign, tmp_path, monkeypatch) -> None:
    """Three jobs side by side (two of the plan, one added by ``settings``), then eval.py of
    one: the archives and campaign.json say so."""
    sweep = campaign.Sweep(
        ("model=linear,persistence", "seed=0", "data.num_points=8",
         "hydra.sweep.dir=${paths.log_dir}/smoke",
         "hydra.sweep.subdir=${hydra:runtime.choices.model}/seed_${seed}"),
        evals=(campaign.Eval("smoke/linear/seed_*", ("module.save_predictions=true",)),),
    )  # fmt: skip
    monkeypatch.setitem(campaign.PLANS, "smoke", (sweep,))
    out = tmp_path / "out"
    results = campaign.campaign("smoke", 300, out, tmp_path / "work", None, "cpu", smoke=True,
                                settings=("model=linear,persistence,stid", "seed=0"))  # fmt: skip
    assert [s["exit_code"] for s in results["steps"]] == [0, 0], (out / "campaign.log").read_text()
    runs = ["smoke/linear/seed_0", "smoke/persistence/seed_0", "smoke/stid/seed_0"]
    assert results["packed"] == runs and results["logs"] == runs  # --set added stid
    assert all(run["finished"] for run in results["runs"].values())
    assert results["runs"]["smoke/linear/seed_0"]["progress"].startswith("step 4 of 4 (epoch")
    assert json.loads((out / "campaign.json").read_text())["packed"] == results["packed"]
    with tarfile.open(out / "runs.tar.gz") as tar:
        evals = [n for n in tar.getnames() if "/eval/" in n]
    assert len(evals) == 2 and all(n.startswith("smoke/linear/seed_0/eval/") for n in evals)
