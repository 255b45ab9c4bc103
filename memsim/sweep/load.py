"""Reading a finished (or interrupted) sweep back from its run folder.

``load_sweep(DIR)`` gives the tables ``memsim sweep`` wrote under
``DIR/sweep/`` as frames, the run's manifest and resolved config, and the
Optuna study itself, opened from the storage that ``sweep/sweep.json``
records (a journal inside the folder is found relative to it, so a moved
folder still opens).
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from memsim.core.errors import ConfigError
from memsim.core.params import as_path
from memsim.reporting.rundir import run_status

from .storage import open_storage

__all__ = ["SweepRun", "load_sweep"]


@dataclass
class SweepRun:
    """A sweep's run folder, read back (:func:`load_sweep`).

    Attributes
    ----------
    path : Path
        The run folder.
    study_name : str
        The Optuna study's name.
    storage : str
        The storage as the folder records it (a URL's password masked).
    trials, robustness, plateau, importance : DataFrame
        ``sweep/trials.csv`` (one row per trial), ``robustness.csv``,
        ``plateau.csv`` and ``importance.csv``; empty frames for a file the
        sweep did not write (an interrupted sweep has none of them).
    manifest : dict
        ``manifest.json``: status (a killed sweep's corrected to failed,
        with ``error``), timings, the best trial(s).
    config : dict
        ``config.toml``: the resolved experiment with its ``[sweep]`` table.
    """

    path: Path
    study_name: str
    storage: str
    trials: pd.DataFrame = field(repr=False)
    robustness: pd.DataFrame = field(repr=False)
    plateau: pd.DataFrame = field(repr=False)
    importance: pd.DataFrame = field(repr=False)
    manifest: dict = field(repr=False)
    config: dict = field(repr=False)
    _url: str | None = field(default=None, repr=False)

    @property
    def status(self) -> str:
        """``completed``, ``running`` or ``failed``, as the manifest says; a
        sweep whose process is gone (killed with SIGKILL, on this host) reads
        as failed, as :func:`memsim.reporting.rundir.run_status` has it."""
        return str(self.manifest.get("status", "unknown"))

    @property
    def best(self) -> dict:
        """The best trial as the manifest records it (number, values, params)."""
        return dict(self.manifest.get("best") or {})

    def study(self):
        """The ``optuna.Study``, loaded from the sweep's storage.

        A PostgreSQL (or other database) URL is recorded without its password:
        give the full URL to :func:`load_sweep` as ``storage=``.
        """
        import optuna

        spec = self._url or self.storage
        if "***" in spec:
            raise ConfigError(f"{self.path}: the sweep's storage {self.storage} is recorded "
                              "without its password: load_sweep(DIR, storage=URL)")
        if spec.startswith("journal:") and not Path(spec[len("journal:"):]).is_absolute():
            spec = "journal:" + str(self.path / spec[len("journal:"):])
        return optuna.load_study(study_name=self.study_name, storage=open_storage(spec))


def load_sweep(run_dir: str | Path, storage: str | None = None) -> SweepRun:
    """Read a sweep's run folder (what ``memsim sweep`` printed as its last line).

    Parameters
    ----------
    run_dir : path
        The run folder (it holds ``manifest.json``, ``config.toml`` and
        ``sweep/sweep.json``).
    storage : str, optional
        The storage URL with its password, for a sweep whose storage was a
        database (the folder records the URL masked).

    Raises
    ------
    ConfigError
        If the folder is not a sweep's run folder, or one of its files is damaged.
    """
    path = as_path(run_dir, "load_sweep(run_dir)")
    ident = _json(path / "sweep" / "sweep.json", path)
    _json(path / "manifest.json", path)  # a missing or damaged one named as the sweep's
    # its status as `memsim report` reads it: a sweep killed with SIGKILL reads as failed
    manifest = run_status(path)
    cfg_file = path / "config.toml"
    try:
        config = tomllib.loads(cfg_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: not a sweep run folder (no config.toml)") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{cfg_file}: not valid TOML: {exc}") from None
    return SweepRun(path=path, study_name=str(ident.get("study", "")),
                    storage=str(ident.get("storage", "")),
                    trials=_csv(path / "sweep" / "trials.csv"),
                    robustness=_csv(path / "sweep" / "robustness.csv"),
                    plateau=_csv(path / "sweep" / "plateau.csv"),
                    importance=_csv(path / "sweep" / "importance.csv"),
                    manifest=manifest, config=config, _url=storage)


def _json(f: Path, run: Path) -> dict[str, Any]:
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{run}: not a sweep run folder (no {f.relative_to(run)})") from None
    except (ValueError, UnicodeDecodeError):
        raise ConfigError(f"{f}: not valid JSON") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{f}: not a JSON object")
    return data


def _csv(f: Path) -> pd.DataFrame:
    if not f.exists():
        return pd.DataFrame()
    try:
        return pd.read_csv(f)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{f}: not a readable CSV table: {exc}") from None
