"""Public data sets on demand (memsim.data.datasets, ``memsim data``, ``data:NAME``).

No test needs the network: downloads read ``file://`` URLs. The tests of the
real LoCoMo file register ``../shared/data/locomo/locomo10.zip`` with
``--from`` and are skipped when it is absent.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest

import memsim
from memsim.data import datasets
from memsim.cli import main
from memsim.data.datasets import DataError, Dataset

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
ZIP = SHARED / "locomo" / "locomo10.zip"
needs_zip = pytest.mark.skipif(not ZIP.exists(), reason=f"LoCoMo not found at {ZIP} (shared data)")

PAYLOAD = b"turn 1\nturn 2\n" * 100


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty data cache (MEMSIM_DATA) and a small registered data set."""
    root = tmp_path / "cache"
    monkeypatch.setenv(datasets.CACHE_ENV, str(root))
    tiny = Dataset(name="tiny", filename="tiny.txt", url="file:///nonexistent/tiny.txt",
                   sha256=hashlib.sha256(PAYLOAD).hexdigest(), size=len(PAYLOAD),
                   licence="CC0", citation="Nobody, Tiny data, 2025", homepage="",
                   what="a tiny test file", importer=None)
    monkeypatch.setitem(datasets.DATASETS, "tiny", tiny)
    return root


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSIM_DATA", str(tmp_path / "d"))
    assert datasets.cache_dir() == tmp_path / "d"
    monkeypatch.delenv("MEMSIM_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert datasets.cache_dir() == tmp_path / "xdg" / "memsim"


def test_get_downloads_from_a_file_url_checks_and_caches(cache, tmp_path, capsys):
    src = tmp_path / "upstream.txt"
    src.write_bytes(PAYLOAD)
    assert main(["data", "get", "tiny", "--url", src.as_uri()]) == 0
    out = capsys.readouterr().out
    assert "licence:  CC0" in out and "cite:     Nobody, Tiny data, 2025" in out
    cached = cache / "tiny" / "tiny.txt"
    assert cached.read_bytes() == PAYLOAD
    assert _files(cache) == ["tiny.txt"]                     # no temporary left
    assert datasets.resolve("data:tiny") == cached
    # already there with the pinned checksum: no second download (the URL is gone)
    src.unlink()
    assert main(["data", "get", "tiny", "--url", src.as_uri()]) == 0


def test_checksum_mismatch_caches_nothing(cache, tmp_path, capsys):
    src = tmp_path / "tampered.txt"
    src.write_bytes(PAYLOAD + b"x")
    assert main(["data", "get", "tiny", "--url", src.as_uri()]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("memsim data get: downloading tiny from file://")
    assert len(err) == 2 and err[1].startswith("memsim: error: ")
    assert "is not the pinned" in err[1] and "nothing was cached" in err[1]
    assert _files(cache) == []
    assert not cache.exists()  # no empty folder made for it left behind either
    with pytest.raises(DataError):
        datasets.register("tiny", src)
    assert _files(cache) == [] and not cache.exists()
    (cache / "tiny").mkdir(parents=True)  # folders that were there stay
    with pytest.raises(DataError):
        datasets.register("tiny", src)
    assert (cache / "tiny").is_dir()


def test_from_a_folder_takes_the_file_of_its_upstream_name(cache, tmp_path, capsys):
    """--from the folder the file sits in said 'no such file' though the
    folder exists."""
    folder = tmp_path / "downloads"
    folder.mkdir()
    with pytest.raises(DataError, match=r"downloads: a folder without tiny.txt; give the file"):
        datasets.register("tiny", folder)
    (folder / "tiny.txt").write_bytes(PAYLOAD)
    assert main(["data", "get", "tiny", "--from", str(folder)]) == 0
    assert (cache / "tiny" / "tiny.txt").read_bytes() == PAYLOAD


def test_unreachable_url_is_one_line_that_names_the_offline_way(cache, tmp_path, capsys):
    assert main(["data", "get", "tiny", "--url", (tmp_path / "absent.txt").as_uri()]) == 2
    err = capsys.readouterr().err
    assert "cannot download data:tiny" in err and "memsim data get tiny --from FILE" in err
    assert _files(cache) == []


def test_from_registers_a_local_copy_and_to_writes_elsewhere(cache, tmp_path, capsys):
    src = tmp_path / "mine.txt"
    src.write_bytes(PAYLOAD)
    other = tmp_path / "elsewhere"
    assert main(["data", "get", "tiny", "--from", str(src), "--to", str(other)]) == 0
    assert (other / "tiny" / "tiny.txt").read_bytes() == PAYLOAD
    assert "MEMSIM_DATA=" in capsys.readouterr().out        # how to use that copy
    assert _files(cache) == []
    assert main(["data", "get", "tiny", "--from", str(src)]) == 0
    assert (cache / "tiny" / "tiny.txt").read_bytes() == PAYLOAD
    assert main(["data", "list"]) == 0
    assert any(line.split()[:2] == ["tiny", "cached"]
               for line in capsys.readouterr().out.splitlines())


def test_missing_data_names_the_command(cache, capsys):
    with pytest.raises(DataError, match=r"get it with: memsim data get locomo "):
        datasets.resolve("data:locomo")
    # an experiment naming it fails at load, with the command
    exp = {"experiment": {"name": "x", "replicates": 1},
           "workload": {"source": "data:locomo"},
           "policies": {"s": {"preset": "similarity-only"}}}
    with pytest.raises(memsim.ConfigError, match=r"workload.source: .*memsim data get locomo"):
        memsim.experiment_from_dict(exp)
    # the shipped experiment and the review-log calibration say the same
    assert main(["run", str(ROOT / "experiments" / "locomo.toml"), "--quiet"]) == 2
    assert "memsim data get locomo" in capsys.readouterr().err
    assert main(["calibrate", "revlog", "data:fsrs-revlog"]) == 2
    assert "memsim data get fsrs-revlog" in capsys.readouterr().err
    with pytest.raises(DataError, match="unknown data set 'nope'; known: locomo"):
        datasets.resolve("data:nope")


def test_a_data_set_that_is_not_a_stream_is_refused_as_a_source(cache, tmp_path):
    src = tmp_path / "mine.txt"
    src.write_bytes(PAYLOAD)
    datasets.register("tiny", src)
    exp = {"experiment": {"name": "x", "replicates": 1}, "workload": {"source": "data:tiny"},
           "policies": {"s": {"preset": "similarity-only"}}}
    with pytest.raises(memsim.ConfigError, match="data:tiny is not a stream"):
        memsim.experiment_from_dict(exp)


def test_a_cached_file_of_the_wrong_size_is_refused(cache):
    path = datasets.cached_path("tiny")
    path.parent.mkdir(parents=True)
    path.write_bytes(PAYLOAD[:10])
    with pytest.raises(DataError, match="bytes, the pinned data:tiny has"):
        datasets.resolve("data:tiny")


def test_pins_are_commits_and_sizes():
    for d in datasets.DATASETS.values():
        assert d.url.startswith("https://raw.githubusercontent.com/")
        commit = d.url.split("/")[5]
        assert len(commit) == 40 and all(c in "0123456789abcdef" for c in commit), d.url
        assert len(d.sha256) == 64 and d.size > 0


@needs_zip
def test_shared_locomo_is_the_pinned_file_and_runs_as_data_locomo(cache, tmp_path, capsys):
    assert main(["data", "get", "locomo", "--from", str(ZIP)]) == 0
    out = capsys.readouterr().out
    assert "CC BY-NC 4.0" in out and "Maharana" in out
    # the same file through a file:// URL (the download path) into another cache
    assert main(["data", "get", "locomo", "--url", ZIP.as_uri(), "--to",
                 str(tmp_path / "c2")]) == 0
    assert (tmp_path / "c2" / "locomo" / "locomo10.zip").read_bytes() == ZIP.read_bytes()
    exp = memsim.load_experiment(ROOT / "experiments" / "locomo.toml")
    assert exp.workload.path == cache / "locomo" / "locomo10.zip"
    assert exp.workload.importer == "locomo"
    # the resolved config names the data set, not this machine's cache path
    assert exp.workload.to_config()["source"] == "data:locomo"
    small = dataclasses.replace(exp, policies={"similarity-only": exp.policies["similarity-only"]})
    res = memsim.run_experiment(small, out=None)
    assert res.queries["n_relevant"].gt(0).sum() > 1500


def test_calibrate_workload_reads_data_name_from_the_cache(cache, tmp_path, capsys,
                                                           monkeypatch):
    """``calibrate workload data:NAME`` took ``data:NAME`` for a file name."""
    from memsim.core.errors import ConfigError
    from memsim.tuning import twin

    (cache / "tiny").mkdir(parents=True)
    (cache / "tiny" / "tiny.txt").write_bytes(PAYLOAD)
    seen = []

    def load(path):
        seen.append(Path(path))
        raise ConfigError(f"{path}: stop here")

    monkeypatch.setattr(twin, "load_any_stream", load)
    assert main(["calibrate", "workload", "data:tiny", "--out", str(tmp_path / "o")]) == 2
    assert seen == [cache / "tiny" / "tiny.txt"]
    # absent from the cache: the message gives the command that gets it
    assert main(["calibrate", "workload", "data:locomo", "--out", str(tmp_path / "o")]) == 2
    assert "get it with: memsim data get locomo" in capsys.readouterr().err
    assert len(seen) == 1


def test_from_and_url_together_are_refused(cache, tmp_path, capsys):
    """``--from`` used to win and ``--url`` was silently ignored."""
    src = tmp_path / "mine.txt"
    src.write_bytes(PAYLOAD)
    assert main(["data", "get", "tiny", "--from", str(src), "--url", src.as_uri()]) == 2
    assert capsys.readouterr().err == ("memsim: error: --from and --url: give one (--from "
                                       "registers a copy you have, --url downloads from a "
                                       "mirror)\n")
    assert _files(cache) == []


@pytest.mark.parametrize("how", ["from", "url"])
@pytest.mark.parametrize("under", [False, True])
def test_a_file_as_the_data_folder_is_refused(cache, tmp_path, capsys, how, under):
    """``--to FILE`` failed with exit 1 ("Not a directory") from the copy."""
    src = tmp_path / "mine.txt"
    src.write_bytes(PAYLOAD)
    afile = tmp_path / "afile"
    afile.write_text("x")
    to = afile / "sub" if under else afile
    opt = ["--from", str(src)] if how == "from" else ["--url", src.as_uri()]
    assert main(["data", "get", "tiny", *opt, "--to", str(to)]) == 2
    err = capsys.readouterr().err
    assert err == (f"memsim: error: --to {to}: {afile} is a file, not a folder; give a folder, "
                   "new or existing\n")
    assert afile.read_text() == "x"
    with pytest.raises(DataError, match=r"^--to "):
        datasets.register("tiny", src, to=to)
    with pytest.raises(DataError, match=r"^--to "):
        datasets.get("tiny", to=to, url=src.as_uri())


def test_a_file_as_the_cache_is_refused_naming_the_variable(cache, tmp_path, capsys):
    src = tmp_path / "mine.txt"
    src.write_bytes(PAYLOAD)
    cache.write_text("x")
    assert main(["data", "get", "tiny", "--from", str(src)]) == 2
    assert f"${datasets.CACHE_ENV} {cache}: {cache} is a file" in capsys.readouterr().err
