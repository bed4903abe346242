"""Which differences give a kept fork server another key (`kept.server_key`): a table of cases."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from harness.running import kept

BASE = {"PATH": "/tmp/a/bin:/usr/bin", "HOME": "/root", "OMP_NUM_THREADS": "2", "HARNESS_CELL_DIR": "/tmp/a/cell"}


@pytest.mark.parametrize(
    "change,same",
    [
        ({"PATH": "/tmp/b/bin:/usr/bin"}, True),  # the runner's pip shim folder: per cell
        ({"HARNESS_CELL_DIR": "/tmp/b/cell"}, True),
        ({"VIRTUAL_ENV": "/somewhere"}, True),
        ({"PWD": "/elsewhere", "OLDPWD": "/x", "SHLVL": "3", "_": "/usr/bin/env"}, True),  # the shell's bookkeeping
        ({"HARNESS_PRELOAD_LOG": "/tmp/log-2.jsonl"}, True),
        ({"HARNESS_LIFELINE_FD": "9"}, True),
        ({"OMP_NUM_THREADS": "3"}, False),  # torch reads it at import
        ({"HF_HOME": "/data/hf"}, False),  # huggingface_hub reads it at import
        ({"CUDA_VISIBLE_DEVICES": "1"}, False),
        ({"HARNESS_BYTECODE_DIR": "/other"}, False),
    ],
)
def test_what_changes_the_key(change: dict[str, str], same: bool) -> None:
    before = kept.server_key(sys.executable, BASE)
    after = kept.server_key(sys.executable, {**BASE, **change})
    assert (before == after) is same


def test_another_interpreter_is_another_key(tmp_path: Path) -> None:
    other = tmp_path / "bin" / "python"
    other.parent.mkdir()
    other.symlink_to(sys.executable)
    assert kept.server_key(str(other), BASE) != kept.server_key(sys.executable, BASE)


@pytest.mark.parametrize("file", ["__main__.py", "lifeline.py", "park.py", "zygote.py", "suite.py"])
def test_a_change_to_any_file_of_the_in_cell_package_is_another_key(file: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a parked server runs the code it was started with: a change to any of it retires it
    copy = tmp_path / "incell"
    shutil.copytree(kept.INCELL, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(kept, "INCELL", copy)
    before = kept.server_key(sys.executable, BASE)
    with (copy / file).open("a") as fh:
        fh.write("# changed\n")
    assert kept.server_key(sys.executable, BASE) != before


def test_per_cell_sends_every_volatile_variable_and_unsets_the_missing() -> None:
    sent = kept.per_cell({**BASE, "PWD": "/w"})
    assert sent["PATH"] == BASE["PATH"] and sent["PWD"] == "/w"
    assert sent["VIRTUAL_ENV"] is None  # unset in this sweep: the server drops the last one's
    assert "HARNESS_LIFELINE_FD" not in sent  # handed over as a descriptor, not a number
    assert "OMP_NUM_THREADS" not in sent


@pytest.mark.parametrize(
    "flag,gpus,expected",
    [
        ([], 1, 900.0),  # auto: kept where the machine has GPUs
        ([], 0, 0.0),  # ... and not without (CI, laptops)
        (["--keep-servers", "0"], 2, 0.0),
        (["--keep-servers", "60"], 0, 60.0),
        (["--keep-servers", "auto"], 4, 900.0),
    ],
)
def test_keep_servers_default_follows_the_gpus(
    flag: list[str], gpus: int, expected: float, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from harness import cli
    from harness.commands import flags, sweep

    monkeypatch.setenv(kept.KEPT_DIR_ENV, str(tmp_path / "kept"))
    monkeypatch.setattr(flags, "options_gpus", lambda selected: gpus)
    args = cli.build_parser().parse_args(["sweep", *flag])
    assert sweep.sweep_options(args).keep_servers == expected


def test_auto_without_a_private_folder_keeps_nothing_and_says_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness import cli
    from harness.commands import flags, sweep

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv(kept.KEPT_DIR_ENV, str(shared))
    monkeypatch.setattr(flags, "options_gpus", lambda selected: 1)
    assert sweep.sweep_options(cli.build_parser().parse_args(["sweep"])).keep_servers == 0.0
    assert "servers are not kept" in capsys.readouterr().err


def test_the_environment_sets_the_default_and_the_flag_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from harness import cli
    from harness.commands import flags, sweep

    monkeypatch.setenv(kept.KEPT_DIR_ENV, str(tmp_path / "kept"))
    monkeypatch.setenv(kept.KEEP_ENV, "0")
    monkeypatch.setattr(flags, "options_gpus", lambda selected: 1)
    assert sweep.sweep_options(cli.build_parser().parse_args(["sweep"])).keep_servers == 0.0
    assert sweep.sweep_options(cli.build_parser().parse_args(["sweep", "--keep-servers", "30"])).keep_servers == 30.0
