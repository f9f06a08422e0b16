"""``model.compile=auto``: captured CUDA-graph steps on one GPU where the model allows them,
eager elsewhere, and the reason logged (the replay itself: tests/test_gpu.py)."""

from __future__ import annotations

import logging

import pytest
import torch
from conftest import compose_train

from cloudlstm.assembly.build import build_module
from cloudlstm.assembly.compile import run_device
from cloudlstm.data.spec import DataSpec
from cloudlstm.models import CloudSeq2Seq, ConvLSTM, Persistence, SeqLSTM
from cloudlstm.models.capture import CAPTURED, RunDevice, auto_compile
from cloudlstm.nn import knn_triton

ONE_GPU = RunDevice(cuda=True, devices=1)


@pytest.fixture
def triton_on(monkeypatch):
    """As on a GPU machine with Triton: the Triton search takes clouds it fits."""
    monkeypatch.setattr(knn_triton.triton_switch, "ENABLED", True)


def _cloudlstm() -> CloudSeq2Seq:
    return CloudSeq2Seq(num_channels=2, output_steps=3, k=3, hidden_channels=4)


def test_one_gpu_captures_a_cloudlstm_step_its_triton_search_takes(triton_on) -> None:
    capture = auto_compile(_cloudlstm(), 12, 2, ONE_GPU)
    assert capture.mode == CAPTURED and "CUDA graphs" in capture.why
    assert auto_compile(_cloudlstm(), knn_triton.MAX_POINTS, 1, ONE_GPU).mode == CAPTURED


@pytest.mark.parametrize(
    ("points", "dims", "why"),
    [(knn_triton.MAX_POINTS + 1, 2, "over 2048"), (12, 4, "4-D clouds")],
)
def test_a_search_the_cell_list_would_do_runs_eagerly(triton_on, points, dims, why) -> None:
    """The cell list reads cell counts back to the host: no capture around it."""
    capture = auto_compile(_cloudlstm(), points, dims, ONE_GPU)
    assert capture.mode is None and why in capture.why and "syncs the host" in capture.why


def test_without_triton_a_searching_model_runs_eagerly(monkeypatch) -> None:
    monkeypatch.setattr(knn_triton.triton_switch, "ENABLED", False)
    capture = auto_compile(_cloudlstm(), 12, 2, ONE_GPU)
    assert capture.mode is None and "CLOUDLSTM_TRITON=0" in capture.why
    # a model that searches nothing does not need Triton
    convlstm = ConvLSTM(num_channels=2, output_steps=3)
    assert auto_compile(convlstm, 5000, 2, ONE_GPU).mode == CAPTURED


@pytest.mark.parametrize(
    ("model", "device", "checkpointing", "why"),
    [
        (_cloudlstm, RunDevice(cuda=False, devices=1), False, "not on CUDA"),
        (_cloudlstm, RunDevice(cuda=True, devices=2), False, "2 devices"),
        (_cloudlstm, ONE_GPU, True, "model.checkpointing"),
        (lambda: Persistence(output_steps=3), ONE_GPU, False, "nothing to train"),
        (lambda: SeqLSTM(12, 2, output_steps=3, hidden_size=4), ONE_GPU, False, "nn.LSTM"),
    ],
    ids=["cpu", "two devices", "checkpointing", "persistence", "lstm"],
)
def test_where_capture_does_not_apply_the_reason_is_given(
    triton_on, model, device, checkpointing, why
) -> None:
    capture = auto_compile(model(), 12, 2, device, checkpointing)
    assert capture.mode is None and why in capture.why


@pytest.mark.parametrize(
    ("trainer", "expected"),
    [
        ({"accelerator": "gpu", "devices": 1}, RunDevice(True, 1)),
        ({"accelerator": "cuda", "devices": "0,1"}, RunDevice(True, 2)),
        ({"accelerator": "gpu", "devices": [3]}, RunDevice(True, 1)),
        ({"accelerator": "gpu", "devices": "0,"}, RunDevice(True, 1)),
        ({"accelerator": "gpu", "devices": 2, "num_nodes": 2}, RunDevice(True, 4)),
        ({"accelerator": "cpu", "devices": 1}, RunDevice(False, 1)),
        ({"accelerator": "cpu", "devices": "auto"}, RunDevice(False, 1)),
    ],
)
def test_run_device_reads_lightnings_accelerator_and_devices(trainer, expected) -> None:
    assert run_device(trainer) == expected


def test_accelerator_auto_is_cuda_only_with_a_gpu(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert run_device({"accelerator": "auto", "devices": "auto"}) == RunDevice(False, 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert run_device({"accelerator": "auto", "devices": "auto"}) == RunDevice(True, 2)


SPEC = DataSpec.sized(12, 2, input_steps=4, output_steps=3, steps_per_day=24)


def _module(tmp_path, *overrides: str):
    cfg = compose_train(tmp_path, ["model=cloudlstm_k3", *overrides])
    return build_module(cfg, SPEC).model


def test_the_default_is_auto_and_eager_on_cpu(tmp_path, caplog) -> None:
    cfg = compose_train(tmp_path, [])
    assert cfg.model.compile == "auto"
    with caplog.at_level(logging.DEBUG, logger="cloudlstm.assembly.compile"):
        model = _module(tmp_path, "trainer.accelerator=cpu")
    assert getattr(model, "_compiled_call_impl", None) is None
    assert "model.compile=auto: eager (not on CUDA" in caplog.text


def test_trainer_gpu_builds_the_captured_model_and_says_so(tmp_path, caplog, triton_on) -> None:
    """The run's build path compiles the model in reduce-overhead mode for trainer=gpu (no
    GPU needed to build: compiling happens at the first call), and logs one line why."""
    modes = []
    compile_ = torch.nn.Module.compile
    with caplog.at_level(logging.INFO, logger="cloudlstm.assembly.compile"):
        torch.nn.Module.compile = lambda self, **kw: modes.append(kw["mode"])
        try:
            _module(tmp_path, "trainer=gpu")
            _module(tmp_path, "trainer=gpu", "model.checkpointing=true")
            _module(tmp_path, "trainer=gpu", "model.compile=false")
        finally:
            torch.nn.Module.compile = compile_
    assert modes == [CAPTURED]
    lines = [r.getMessage() for r in caplog.records if r.name == "cloudlstm.assembly.compile"]
    assert lines == [
        "model.compile=auto: reduce-overhead (CloudSeq2Seq's forward and backward replayed "
        "as CUDA graphs)",
        "model.compile=auto: eager (model.checkpointing recomputes the forward in the backward)",
    ]
