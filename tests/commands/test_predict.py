"""``fedpath predict`` and ``adapt-bn``: their progress bar starts once the total
is known; a batch too small for a variance is refused before the model loads
(the predictions and the adaptation themselves: tests/inference, tests/tasks)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from fedpath.cli import main
from fedpath.commands import predict
from fedpath.utils import progress_display


def test_the_bar_starts_at_the_first_step_and_advances_by_the_difference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[tuple[str, str, int, bool]] = []
    advanced: list[int] = []

    class Bar:
        def __enter__(self) -> Bar:
            return self

        def __exit__(self, *exc: object) -> None:
            advanced.append(-1)  # closed

        def advance(self, n: int) -> None:
            advanced.append(n)

    def job_progress(kind: str, unit: str, total: int, quiet: bool) -> Bar:
        made.append((kind, unit, total, quiet))
        return Bar()

    monkeypatch.setattr(progress_display, "job_progress", job_progress)
    with ExitStack() as stack:
        step = predict._bar_step(stack, "predict", "images", True)
        assert not made  # nothing shown before the total is known
        step(2, 10)
        step(7, 10)
        step(10, 10)
    assert made == [("predict", "images", 10, True)]
    assert advanced == [2, 5, 3, -1]


def test_adapt_bn_needs_two_images_a_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["adapt-bn", str(tmp_path / "no.fpm"), str(tmp_path), "--out", "o.fpm"]
    with pytest.raises(SystemExit) as ex:
        main([*argv, "--batch-size", "1"])
    assert ex.value.code == 2
    assert "argument --batch-size: expected an integer >= 2" in capsys.readouterr().err
    assert main(argv) == 2  # the default batch passes; the missing file fails
    assert "no.fpm" in capsys.readouterr().err


def test_predict_names_a_missing_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["predict", str(tmp_path / "no.fpm"), str(tmp_path), "--out", "p.csv"]
    assert main(argv) == 2
    assert "no.fpm" in capsys.readouterr().err
    assert not (tmp_path / "p.csv").exists()


@pytest.mark.parametrize("bad", ["0", "-3", "many"])
def test_predict_refuses_a_batch_size_that_is_not_positive(
    tmp_path: Path, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["predict", str(tmp_path / "m.fpm"), str(tmp_path), "--out", "p.csv"]
    with pytest.raises(SystemExit) as ex:
        main([*argv, "--batch-size", bad])
    assert ex.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --batch-size: expected a positive integer, got '{bad}'" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["predict", "m.fpm", "imgs", "--out"],
        ["adapt-bn", "m.fpm", "imgs", "--out"],
        ["evaluate", "m.fpm", "imgs", "--out"],
    ],
)
def test_an_out_that_names_a_folder_is_named_before_the_model_loads(
    tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "results"
    folder.mkdir()
    assert main([*argv, str(folder), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --out {folder}: is a folder; expected the name")
    (tmp_path / "f").write_text("x")  # a file where the folder of --out would be
    assert main([*argv, str(tmp_path / "f" / "p.csv"), "-q"]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
