"""The run folder of a sweep, and finding it again to resume.

The run folder is ``<out>/<UTC time>_<name>_<hash8>/`` where ``hash8`` hashes
the resolved experiment and search space (without ``sweep.trials``, which may
grow, nor ``sweep.batch`` and ``sweep.pruner``, which change how trials run,
not what they mean) and, when given, the study name (:func:`study_identity`).
``sweep/sweep.json``, written once (:func:`write_ident`), records the study
name, that identity and the storage. Running the same command again finds
the newest folder under ``--out`` with the same identity
(:func:`_find_run_dir`) and continues its study, in its storage
(:func:`resume_storage`); ``--resume DIR`` names the folder explicitly
(:func:`load_resume_dir`). Changing the experiment or the search space
starts a new folder and a new study.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from memsim.runs.config import Experiment, config_hash
from memsim.core.errors import ConfigError
from memsim.reporting.rundir import write_atomic

from .space import SweepSpec
from .storage import mask_url, recorded_storage, normalise_storage

#: Written once in ``<run>/sweep/``: the study, its identity and its storage.
_IDENT = "sweep.json"


#: ``[sweep]`` keys outside a sweep's identity: how many trials (which may
#: grow), how many are simulated together and whether bad ones are stopped
#: early change how the study is worked on, not what a trial means, so a
#: study may be resumed with other values.
_NOT_IDENTITY = ("trials", "batch", "pruner", "cache_mb")


def _identity(exp: Experiment, spec: SweepSpec) -> str:
    """hash8 of a sweep whatever its number of trials (which may grow), its
    batch size, its pruner and its cache (:data:`_NOT_IDENTITY`)."""
    table = exp.to_config()
    sweep = spec.to_config()
    for key in _NOT_IDENTITY:
        sweep.pop(key, None)
    table["sweep"] = sweep
    return config_hash(table)


def _find_run_dir(out: Path, name: str, hash8: str) -> Path | None:
    """The newest ``<out>/*_<name>_<hash8>*`` folder holding this sweep."""
    if not out.is_dir():
        return None
    found = []
    for d in out.glob(f"*_{name}_{hash8}*"):
        f = d / "sweep" / _IDENT
        try:
            if json.loads(f.read_text()).get("identity") == hash8:
                found.append(d)
        except (OSError, ValueError):
            continue
    return sorted(found)[-1] if found else None


def load_resume_dir(path: Path) -> tuple[dict, Path]:
    """``--resume PATH``: the folder's ``sweep.json`` and its ``config.toml``."""
    f = path / "sweep" / _IDENT
    if not f.exists() or not (path / "config.toml").exists():
        raise ConfigError(f"--resume {path}: not a sweep run folder (no config.toml and "
                          f"sweep/{_IDENT})")
    try:
        return json.loads(f.read_text()), path / "config.toml"
    except ValueError:
        raise ConfigError(f"--resume {path}: sweep/{_IDENT} is not valid JSON") from None


def config_header(exp: Experiment, what: str) -> str:
    """The comment heading a configuration file the sweep writes."""
    return (f"# {what} of {exp.name} (every default filled in).\n"
            f"# Sweep again with: memsim sweep config.toml   (or run once: memsim run FILE)\n")


def study_identity(exp: Experiment, spec: SweepSpec, study_name: str | None,
                    ident: dict | None) -> tuple[str, str]:
    """(hash8, study name) of a sweep.

    The study name is ``study_name``, else the one ``ident`` (the
    ``sweep.json`` of a folder being resumed) recorded, else
    ``<name>-<hash8>``; a name of its own is part of the identity, so that
    two studies of one experiment get two folders.
    """
    hash8 = _identity(exp, spec)
    if study_name is None:  # an empty --study is refused below, not replaced
        study_name = (ident or {}).get("study") or f"{exp.name}-{hash8}"
    if not isinstance(study_name, str) or not re.match(r"^[A-Za-z0-9_.\-]+$", study_name):
        raise ConfigError(f"--study: {study_name!r}: use letters, digits, '_', '-' or '.'")
    if study_name != f"{exp.name}-{hash8}":
        hash8 = config_hash({"identity": hash8, "study": study_name})
    return hash8, study_name


def locate_run_dir(exp: Experiment, hash8: str, out: str | Path | None,
                    resume_dir: Path | None, ident: dict | None,
                    ) -> tuple[Path | None, dict | None]:
    """The existing run folder of this sweep (None: a new one is needed) and
    its ``sweep.json``."""
    if resume_dir is not None:
        if ident.get("identity") != hash8:
            raise ConfigError(f"--resume {resume_dir}: the experiment, its search space or the "
                              "study name differ from the ones this folder swept")
        return resume_dir, ident
    if out is not None:
        run_dir = _find_run_dir(Path(out), exp.name, hash8)
        if run_dir is not None:
            return run_dir, json.loads((run_dir / "sweep" / _IDENT).read_text())
    return None, ident


def resume_storage(storage: str | None, ident: dict | None, run_dir: Path | None,
                    ) -> str | None:
    """The storage to open: the one the folder recorded, which an explicit
    ``storage`` must match.

    An explicit ``storage`` is checked here, before any run folder exists, so
    that a bad ``--storage`` leaves nothing behind.
    """
    if storage is not None:
        normalise_storage(storage, run_dir)
    recorded = (ident or {}).get("storage")
    if recorded is None:
        return storage
    if recorded.startswith("journal:"):
        # recorded relative to the run folder, so that a moved folder still resumes
        jpath = Path(recorded[len("journal:"):])
        jpath = jpath if jpath.is_absolute() else run_dir / jpath
        recorded_spec = f"journal:{jpath.resolve()}"
    else:
        recorded_spec = recorded
    if storage is None:
        if "***" in recorded:
            raise ConfigError(f"{run_dir}: this sweep's study lives in {recorded}; pass "
                              "--storage with the full URL to resume it")
        return recorded_spec
    if mask_url(normalise_storage(storage, run_dir)) != mask_url(recorded_spec):
        raise ConfigError(f"--storage: {run_dir} keeps its study in {recorded}, not in "
                          f"{mask_url(storage)}; resume with the same storage or pick "
                          "another --study or --out")
    return storage


def write_ident(run_dir: Path, study_name: str, hash8: str, storage_spec: str) -> None:
    """Write ``sweep/sweep.json`` (once): how the same command finds this
    folder and its study again."""
    (run_dir / "sweep").mkdir(exist_ok=True)
    ident = {"study": study_name, "identity": hash8,
             "storage": recorded_storage(storage_spec, run_dir)}
    write_atomic(run_dir / "sweep" / _IDENT,
                 lambda p: p.write_text(json.dumps(ident, indent=2) + "\n"))


def prior_manifest(run_dir: Path | None) -> dict:
    """The manifest a resumed folder already has (its earlier sessions), or {}."""
    if run_dir is None or not (run_dir / "manifest.json").exists():
        return {}
    try:
        return json.loads((run_dir / "manifest.json").read_text())
    except ValueError:
        return {}
