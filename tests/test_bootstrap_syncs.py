"""The in-process sync recorder (nsbridge._bootstrap.syncs), installed in this process.

This file counts as the script's code (it is not in site-packages), so its calls on CPU
tensors are recorded. No assert may look at a tensor while a recorder is installed: pytest's
assert would call ``bool()`` on it from this file and be recorded too.
"""

from __future__ import annotations

import importlib
import inspect
import warnings
import os
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator

import pytest
import torch

from nsbridge._bootstrap import syncs
from nsbridge._bootstrap.syncs import SyncRecorder

HERE = os.path.relpath(__file__) if not os.path.relpath(__file__).startswith("..") else __file__


def _line() -> int:
    """The line this is called from: ``value, line = f(t), _line()`` names f's line, and
    ``line = _line() + 1`` the next one."""
    return inspect.currentframe().f_back.f_lineno


@pytest.fixture
def step() -> list[int]:
    return [0]


@pytest.fixture
def recorder(step: list[int]) -> Iterator[SyncRecorder]:
    rec = SyncRecorder(lambda: step[0])
    rec.install()
    try:
        yield rec
    finally:
        rec.uninstall()


def _only(rec: SyncRecorder, **match: Any) -> dict[str, Any]:
    rows = [r for r in rec.records() if all(r[k] == v for k, v in match.items())]
    assert len(rows) == 1, (match, rec.records())
    return rows[0]


def _at(rec: SyncRecorder, line: int) -> list[dict[str, Any]]:
    return [r for r in rec.records() if r["file"] == HERE and r["line"] == line]


# -- entry points relayed through Python's formatting and conversions -----------------------

def test_format_records_the_scripts_line_once_not_the_inner_item(recorder: SyncRecorder) -> None:
    t = torch.tensor(1.2345)
    text, line = f"{t:.2f}", _line()
    recorder.uninstall()
    assert text == "1.23"
    rows = _at(recorder, line)
    assert [(r["kind"], r["count"]) for r in rows] == [("format", 1)]   # no extra "item"
    assert rows[0]["op"] == "aten::_local_scalar_dense"
    assert rows[0]["device"] == "cpu" and rows[0]["library"] is False and rows[0]["via"] is None
    assert rows[0]["function"] == "test_format_records_the_scripts_line_once_not_the_inner_item"
    assert rows[0]["code"] == 'text, line = f"{t:.2f}", _line()'     # what diff matches by
    assert not [r for r in recorder.records() if r["kind"] == "item"]


def test_str_format_of_a_tensor_attribute(recorder: SyncRecorder) -> None:
    class Meter:  # pytorch/examples imagenet's AverageMeter.__str__
        def __init__(self, val: torch.Tensor) -> None:
            self.name, self.val = "Acc", val

        def __str__(self) -> str:
            return "{name} {val:.1f}".format(**self.__dict__), _line()

    text, line = Meter(torch.tensor(97.25)).__str__()
    plain, line2 = "{}".format(torch.tensor(3)), _line()
    recorder.uninstall()
    assert (text, plain) == ("Acc 97.2", "3")
    assert [(r["kind"], r["count"], r["function"]) for r in _at(recorder, line)] == [
        ("format", 1, "__str__")]
    assert [(r["kind"], r["count"]) for r in _at(recorder, line2)] == [("format", 1)]


@pytest.mark.parametrize("convert,kind", [(float, "float"), (int, "int"), (bool, "bool")])
def test_conversions_are_recorded_at_the_scripts_line(recorder: SyncRecorder,
                                                      convert: Callable, kind: str) -> None:
    value, line = convert(torch.tensor(2.0)), _line()
    recorder.uninstall()
    assert value == convert(2.0)
    assert [(r["kind"], r["count"], r["op"]) for r in _at(recorder, line)] == [
        (kind, 1, "aten::_local_scalar_dense")]


def test_if_tensor_and_index_are_recorded(recorder: SyncRecorder) -> None:
    t = torch.tensor(3)
    taken = 0
    if t:
        line = _line() - 1
        taken, line2 = len(range(t)), _line()
    recorder.uninstall()
    assert taken == 3
    assert [r["kind"] for r in _at(recorder, line)] == ["bool"]
    assert [r["kind"] for r in _at(recorder, line2)] == ["index"]


def test_print_and_str_are_recorded_as_repr(recorder: SyncRecorder,
                                            capsys: pytest.CaptureFixture) -> None:
    t = torch.ones(2)
    line = _line() + 1
    print(t)
    text, line2 = str(torch.tensor([1.5])), _line()
    recorder.uninstall()
    assert capsys.readouterr().out == "tensor([1., 1.])\n" and text == "tensor([1.5000])"
    assert [(r["kind"], r["count"], r["op"]) for r in _at(recorder, line)] == [
        ("repr", 1, "aten::_to_copy")]
    assert [(r["kind"], r["count"]) for r in _at(recorder, line2)] == [("repr", 1)]
    assert {r["kind"] for r in recorder.records()} == {"repr"}   # nothing inside _tensor_str


def test_repr_and_bool_made_inside_torch_are_left_out(recorder: SyncRecorder) -> None:
    # code whose file lies in torch's own folder, as an error message torch builds would be
    torch_file = os.path.join(os.path.dirname(torch.__file__), "_nsbridge_test_internal.py")
    namespace: dict[str, Any] = {}
    exec(compile("def message(t):\n    return f'bad value {t!r} {t:.1f}' if t else ''\n",
                 torch_file, "exec"), namespace)
    text = namespace["message"](torch.tensor(1.0))
    recorder.uninstall()
    assert text == "bad value tensor(1.) 1.0"
    assert recorder.records() == []


def test_a_refused_call_is_not_a_sync(recorder: SyncRecorder) -> None:
    with pytest.raises(RuntimeError):
        bool(torch.ones(3))     # ambiguous: torch raises before reading any value
    with pytest.raises(TypeError):
        [1, 2][torch.tensor(0.5)]
    recorder.uninstall()
    assert recorder.records() == []


def test_subclasses_and_parameters_still_work(recorder: SyncRecorder) -> None:
    class Sub(torch.Tensor):   # default __torch_function__: relays to the wrapped dunder
        pass

    sub = torch.tensor(2.5).as_subclass(Sub)
    param = torch.nn.Parameter(torch.tensor(1.0))
    line = _line() + 1
    values = (f"{sub}", float(sub), bool(param), int(param), repr(param))
    recorder.uninstall()
    assert values[:4] == ("Sub(2.5000)", 2.5, True, 1)
    assert values[4].startswith("Parameter containing")
    kinds = sorted((r["kind"], r["count"]) for r in _at(recorder, line) if r["kind"] != "repr")
    assert kinds == [("bool", 1), ("float", 1), ("format", 1), ("int", 1)]   # once each


def test_a_conversion_relayed_by_the_scripts_torch_function_counts_once(
        recorder: SyncRecorder) -> None:
    class Relayed(torch.Tensor):   # the script's own __torch_function__ calls the dunder again
        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **(kwargs or {}))

    value, line = float(torch.tensor(2.5).as_subclass(Relayed)), _line()
    recorder.uninstall()
    assert value == 2.5
    assert [(r["kind"], r["line"], r["count"]) for r in recorder.records()] == [
        ("float", line, 1)]


# -- a sync made inside a library helper ------------------------------------------------------

@pytest.fixture
def fakelib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    package = tmp_path / "site-packages" / "fakelib"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "helper.py").write_text(
        "def scalar(t):\n"
        "    return t.item()\n"        # line 2
        "\n"
        "def via_callback(fn, t):\n"
        "    return fn(t)\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site-packages"))
    sys.modules.pop("fakelib.helper", None)
    sys.modules.pop("fakelib", None)
    yield importlib.import_module("fakelib.helper")
    sys.modules.pop("fakelib.helper", None)
    sys.modules.pop("fakelib", None)


def test_a_librarys_call_on_a_cpu_tensor_is_not_recorded(recorder: SyncRecorder,
                                                          fakelib: Any) -> None:
    value = fakelib.scalar(torch.tensor(4.0))
    recorder.uninstall()
    assert value == 4.0
    assert recorder.records() == []


def test_a_librarys_call_is_attributed_to_the_scripts_line(
        recorder: SyncRecorder, fakelib: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(syncs, "_device_of", lambda kind, args, kwargs: "cuda")
    value, line = fakelib.scalar(torch.tensor(4.0)), _line()
    recorder.uninstall()
    assert value == 4.0
    rec = _only(recorder, kind="item")
    assert (rec["file"], rec["line"], rec["device"], rec["library"]) == (HERE, line, "cuda", True)
    assert rec["function"] == "test_a_librarys_call_is_attributed_to_the_scripts_line"
    helper = os.path.join("site-packages", "fakelib", "helper.py")
    assert rec["via"].endswith(f"{helper}:2 in scalar"), rec["via"]


def test_a_script_callback_inside_a_library_is_the_scripts_own_call(
        recorder: SyncRecorder, fakelib: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(syncs, "_device_of", lambda kind, args, kwargs: "cuda")

    def callback(t: torch.Tensor) -> tuple[float, int]:
        return t.item(), _line()

    value, line = fakelib.via_callback(callback, torch.tensor(4.0))
    recorder.uninstall()
    rec = _only(recorder, kind="item")
    assert (rec["file"], rec["line"], rec["library"], rec["via"]) == (HERE, line, False, None)


def test_a_library_thread_without_a_script_frame_keeps_the_library_line(
        recorder: SyncRecorder, fakelib: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(syncs, "_device_of", lambda kind, args, kwargs: "cuda")
    thread = threading.Thread(target=fakelib.scalar, args=(torch.tensor(4.0),))
    thread.start()
    thread.join()
    recorder.uninstall()
    rec = _only(recorder, kind="item")
    assert rec["file"].endswith(os.path.join("site-packages", "fakelib", "helper.py"))
    assert (rec["line"], rec["function"], rec["library"], rec["via"]) == (2, "scalar", True, None)


# -- steps -----------------------------------------------------------------------------------

def test_first_last_and_most_calls_in_one_step(recorder: SyncRecorder, step: list[int]) -> None:
    t = torch.tensor(1.0)
    step[0] = 1
    for i in range(6):                       # steps 1, 2, 3: twice each
        _, train = t.item(), _line()
        if i % 2:
            step[0] += 1
    step[0] = 7
    for _ in range(5):                       # an evaluation after the training steps
        _, evaluate = t.item(), _line()
    recorder.uninstall()
    rows = {r["line"]: r for r in recorder.records()}
    fields = ("count", "steps", "first_step", "last_step", "max_in_one_step")
    assert tuple(rows[train][k] for k in fields) == (6, 3, 1, 3, 2)
    assert tuple(rows[evaluate][k] for k in fields) == (5, 1, 7, 7, 5)
    assert set(rows[train]) == {"kind", "op", "device", "file", "line", "function", "code",
                                "library", "via", "count", "cost_ms", "steps", "first_step", "last_step",
                                "max_in_one_step"}


# -- uninstall --------------------------------------------------------------------------------

def test_uninstall_restores_tensor_exactly() -> None:
    before = dict(vars(torch.Tensor))
    sync_before = torch.cuda.synchronize
    assert "__bool__" not in before and "__format__" in before and "item" not in before
    rec = SyncRecorder(lambda: 0)
    rec.install()
    try:
        installed = dict(vars(torch.Tensor))
        assert {"__bool__", "__float__", "__int__", "__index__", "item"} <= set(installed)
        assert installed["__format__"] is not before["__format__"]
    finally:
        rec.uninstall()
    after = dict(vars(torch.Tensor))
    assert after.keys() == before.keys()
    assert all(after[k] is before[k] for k in before)
    assert torch.cuda.synchronize is sync_before
    assert torch.Tensor.__bool__ is torch._C.TensorBase.__bool__
    assert bool(torch.tensor(1)) and rec.records() == []


# -- CPU-only runs: calls judged by where the tensor would live on a GPU --------------------

def test_cpu_and_to_cpu_written_in_the_line_are_read_backs(recorder: SyncRecorder) -> None:
    """Regression: .cpu() and .to("cpu") were never listed on CPU runs, where they stand in
    for the copy back from the device (minGPT adder line 169)."""
    host, first = torch.ones(4).cpu(), _line()
    other, second = torch.ones(4).to("cpu"), _line()
    named, third = torch.ones(4).to(device=torch.device('cpu')), _line()
    recorder.uninstall()
    assert host.shape == other.shape == named.shape
    assert [r["kind"] for r in _at(recorder, first)] == ["cpu"]
    assert [r["kind"] for r in _at(recorder, second)] == ["to_cpu"]
    assert [r["kind"] for r in _at(recorder, third)] == ["to_cpu"]
    assert {r["device"] for r in recorder.records()} == {"cpu"}


def test_to_device_on_a_cpu_run_is_an_upload_not_a_read_back(recorder: SyncRecorder) -> None:
    device = "cpu"                          # what `"cuda" if available else "cpu"` gives here
    batch = torch.ones(4).to(device)
    same = torch.ones(4).to(torch.float64).to(device, non_blocking=True)
    recorder.uninstall()
    assert batch.shape == same.shape
    assert recorder.records() == []


def test_conversions_of_what_a_read_back_returned_stay_on_the_host(
        recorder: SyncRecorder) -> None:
    """minGPT adder 169-171: `correct = (pred == gt).cpu()` syncs once; `int(correct[i])`
    and `not correct[i]` read a host tensor on any machine. A device-side value (d1i) in
    the same loop still counts."""
    pred, gt = torch.tensor([1, 2, 3]), torch.tensor([1, 0, 3])
    d1i = pred * 10
    correct, read_back = (pred == gt).cpu(), _line()
    results, shown = [], []
    for i in range(3):
        results.append(int(correct[i]))
        if not correct[i]:
            shown.append("%d" % d1i[i]); line = _line()  # noqa: E702
    listed = to_list = correct.tolist()
    recorder.uninstall()
    assert results == [1, 0, 1] and shown == ["20"] and listed == [True, False, True]
    assert to_list == listed
    kinds = sorted((r["kind"], r["line"]) for r in recorder.records())
    assert kinds == [("cpu", read_back), ("index", line)] or kinds == [("cpu", read_back),
                                                                      ("int", line)], kinds


class _Digits(torch.utils.data.Dataset):
    def __init__(self) -> None:
        self.order = torch.randperm(8, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([self.order[i].item()])       # the dataset's own bookkeeping


def test_a_datasets_own_item_calls_are_not_syncs(recorder: SyncRecorder) -> None:
    """minGPT adder line 103: `self.ixes[idx].item()` in __getitem__ runs on the host on
    any machine; the same call in the loop is a sync."""
    batches = list(torch.utils.data.DataLoader(_Digits(), batch_size=4))
    value, line = batches[0][0].item(), _line()
    recorder.uninstall()
    assert len(batches) == 2 and isinstance(value, int)
    assert [(r["kind"], r["line"]) for r in recorder.records()] == [("item", line)]


def test_a_warning_raised_inside_a_wrapper_is_shown_at_the_callers_line() -> None:
    """C code warns at the innermost Python frame, which inside a wrapped call is the
    wrapper's: it is shown again at the line that called it, once per line as the
    default filters show it, and nothing else changes (issue 50). The C-level
    warnings.warn stands in for torch's C++ warning (which torch raises once a process)."""
    shown: list[tuple[str, int, str]] = []
    owner = SimpleNamespace(warn=warnings.warn)
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = lambda m, c, f, n, *rest: shown.append((f, n, str(m)))
        rec = SyncRecorder(lambda: 0)
        rec.install()
        rec._patch(owner, "warn", "item", "aten::_local_scalar_dense")
        try:
            for _ in range(2):
                owner.warn("from C", UserWarning, 1)
                first = _line()
            owner.warn("from C", UserWarning, 1)
            second = _line()
            warnings.warn("plain", UserWarning)
            plain = _line()
        finally:
            rec.uninstall()
        installed_filters = list(warnings.filters)
    here = __file__
    assert shown == [(here, first - 1, "from C"), (here, second - 1, "from C"),
                     (here, plain - 1, "plain")]
    assert not [f for f in installed_filters if "syncs" in str(getattr(f[3], "pattern", f[3]))]
