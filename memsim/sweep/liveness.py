"""Liveness of sweep workers: who claimed a trial, and whether it still runs.

Every trial records its worker (``host:pid`` and the process's start time,
so that a reused pid is told apart). A trial whose process died is marked
FAIL and its parameters are enqueued again (Optuna's
:class:`~optuna.storages.RetryHeartbeatStaleTrialCallback`), so it is never
lost: any worker on the same host fails the RUNNING trials of processes that
no longer exist (:func:`reap_dead_workers`); on RDB storages Optuna's heartbeat also
catches workers on other machines (:mod:`memsim.sweep.storage`).
"""

from __future__ import annotations

import copy
import os
import socket
import time

from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from memsim.reporting.rundir import pid_alive

from .study import GIVEN_BACK, quiet_optuna

#: A RUNNING trial that has not even recorded its worker after this long is dead.
UNCLAIMED_S = 120.0
#: User attributes of a trial that belong to the worker that ran it, not to
#: its parameters: a retry starts without them.
_WORKER_ATTRS = ("worker", "worker_start", "worker_trial", "seconds", "failed_reason",
                 "error", GIVEN_BACK)


def host_name() -> str:
    """This machine's name, as trials record it."""
    return socket.gethostname()


def worker_id() -> str:
    """``host:pid`` of this process, as trials record their worker."""
    return f"{host_name()}:{os.getpid()}"


def trial_id(storage, study, number: int) -> int:
    """The storage's id of ``study``'s trial ``number``, through Optuna's
    storage API (a trial object keeps it only in a private field)."""
    study_id = storage.get_study_id_from_name(study.study_name)
    return storage.get_trial_id_from_study_id_trial_number(study_id, number)


def reap_dead_workers(study, storage, now: float | None = None) -> int:
    """Fail the RUNNING trials of dead local workers and enqueue them again.

    Returns the number of trials reaped. Optuna's own heartbeat does the same
    for RDB storages (and for workers on other machines); the journal has no
    heartbeat, so the pid of the worker that claimed a trial is checked.
    """
    now = time.time() if now is None else now
    host = host_name()
    reaped = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        reason = _dead_reason(t, host, now)
        if reason is None:
            continue
        tid = trial_id(storage, study, t.number)
        try:
            storage.set_trial_user_attr(tid, "failed_reason", reason)
            storage.set_trial_user_attr(tid, GIVEN_BACK, True)
            if not storage.set_trial_state_values(tid, state=TrialState.FAIL):
                continue
        except UpdateFinishedTrialError:
            continue  # another worker reaped it first
        failed = storage.get_trial(tid)
        retry_trial(study, failed)
        reaped += 1
    return reaped


def _dead_reason(t, host: str, now: float) -> str | None:
    """Why RUNNING trial ``t`` is dead, or None while it may still be running.

    Only a worker on this host can be checked by its pid; a trial no worker
    claimed within :data:`UNCLAIMED_S` seconds is dead wherever it started.
    """
    ua = t.user_attrs
    if ua.get("worker_trial") == t.number and isinstance(ua.get("worker"), str):
        whost, _, pid = ua["worker"].rpartition(":")
        if whost == host and pid.isdigit() and not pid_alive(int(pid), ua.get("worker_start", "")):
            return f"worker {ua['worker']} died"
    elif t.datetime_start is not None:
        age = now - t.datetime_start.timestamp()
        if age > UNCLAIMED_S:
            return "never claimed by a worker"
    return None


def retry_trial(study, failed) -> None:
    """Enqueue the parameters of a failed trial again (Optuna's retry callback),
    without the dead worker's claim."""
    clean = copy.deepcopy(failed)
    clean.user_attrs = {k: v for k, v in failed.user_attrs.items() if k not in _WORKER_ATTRS
                        and "_rep" not in k}
    with quiet_optuna():
        RetryHeartbeatStaleTrialCallback()(study, clean)
