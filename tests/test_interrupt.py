"""A stop that Python loses is raised again: a signal's handler that runs
inside a callback from C (numba compiling a kernel calls one through ctypes)
has its exception printed as "Exception ignored" and dropped."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys

import pytest

from memsim.core import interrupt
from memsim.core.errors import Terminated
from memsim.runs.runner import run_experiment

from .test_failures import tiny


@pytest.fixture
def handlers():
    """This module's handlers on SIGINT and SIGTERM for the test, the
    process's own ones (and no stop asked) again after it."""
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    interrupt.forget()
    yield
    for s, h in old.items():
        signal.signal(s, h)
    interrupt.forget()


def _signal_inside_a_callback_from_c(signum: int, monkeypatch) -> tuple[list, list]:
    """Deliver ``signum`` to this process while Python runs a function that
    C called through ctypes, as numba's compiler does; the names of the
    exceptions that escaped the call (none) and of those ctypes handed to
    ``sys.unraisablehook`` (which prints "Exception ignored") instead."""
    escaped, dropped = [], []
    monkeypatch.setattr(sys, "unraisablehook",
                        lambda u: dropped.append(type(u.exc_value).__name__))

    def callback() -> None:
        os.kill(os.getpid(), signum)
        for _ in range(10_000):  # bytecode, where Python runs the handler
            pass

    try:
        ctypes.CFUNCTYPE(None)(callback)()
    except BaseException as exc:  # pragma: no cover - what ctypes does not do
        escaped.append(type(exc).__name__)
    monkeypatch.undo()
    return escaped, dropped


@pytest.mark.parametrize("handler", [interrupt.on_signal, interrupt.once_on_signal])
def test_a_stop_lost_in_a_callback_from_c_still_stops_the_run(tmp_path, handlers, handler,
                                                              monkeypatch):
    signal.signal(signal.SIGTERM, handler)
    escaped, dropped = _signal_inside_a_callback_from_c(signal.SIGTERM, monkeypatch)
    assert (escaped, dropped) == ([], ["Terminated"])  # lost, as numba's callback loses it
    with pytest.raises(Terminated):
        run_experiment(tiny(tmp_path), out=tmp_path / "r", report=False)
    (folder,) = (tmp_path / "r").iterdir()
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "failed"
    assert manifest["error"] == "Terminated: SIGTERM"
    assert not (folder / "summary.csv").exists()


def test_ctrl_c_lost_is_a_keyboard_interrupt_and_forget_ends_it(tmp_path, handlers,
                                                                monkeypatch):
    signal.signal(signal.SIGINT, interrupt.on_signal)
    assert _signal_inside_a_callback_from_c(signal.SIGINT, monkeypatch) == ([], ["KeyboardInterrupt"])
    with pytest.raises(KeyboardInterrupt) as info:
        interrupt.raise_if_asked()
    assert type(info.value) is KeyboardInterrupt  # not a Terminated: Ctrl-C is named so
    interrupt.forget()
    interrupt.raise_if_asked()  # nothing asked any more
    res = run_experiment(tiny(tmp_path), out=tmp_path / "r", report=False)
    assert res.manifest["status"] == "completed"


def test_the_worker_handler_ignores_later_signals(handlers):
    signal.signal(signal.SIGTERM, interrupt.once_on_signal)
    with pytest.raises(Terminated):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10_000):
            pass
    # the second signal is ignored (the first one's bookkeeping goes on) ...
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(10_000):
        pass
    # ... but the first is still asked for, to raise again where it was lost
    with pytest.raises(Terminated):
        interrupt.raise_if_asked()


def test_a_lost_stop_is_not_reported_as_an_ignored_exception(handlers, monkeypatch):
    """The "Exception ignored ... Traceback" Python prints for a stop lost in
    a callback (an import's module lock, numba's compiler) alarmed for
    nothing: the stop is raised again. install() keeps quiet about it, and
    only about it."""
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(type(u.exc_value)))
    interrupt.install(interrupt.once_on_signal)

    def callback() -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10_000):
            pass

    ctypes.CFUNCTYPE(None)(callback)()
    assert seen == []  # lost, and quiet
    with pytest.raises(Terminated):
        interrupt.raise_if_asked()

    def other() -> None:
        raise ValueError("not a stop")

    ctypes.CFUNCTYPE(None)(other)()
    assert seen == [ValueError]  # anything else is reported as before


def test_a_stop_that_surfaces_wrapped_is_recorded_as_the_stop(tmp_path, handlers, monkeypatch):
    """numba's dispatcher turns an exception raised during its call into
    "SystemError: CPUDispatcher(...) returned a result with an exception
    set": the run's manifest named that, not the SIGTERM that stopped it."""
    import memsim.runs.runner as runner

    def wrapped(*args, **kwargs):
        interrupt.install(interrupt.once_on_signal)
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10_000):
                pass
        except Terminated as exc:
            raise SystemError("CPUDispatcher(...) returned a result with an exception set") \
                from exc

    monkeypatch.setattr(runner, "simulate_experiment", wrapped)
    with pytest.raises(Terminated):
        run_experiment(tiny(tmp_path), out=tmp_path / "r", report=False)
    (folder,) = (tmp_path / "r").iterdir()
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "failed" and manifest["error"] == "Terminated: SIGTERM"
