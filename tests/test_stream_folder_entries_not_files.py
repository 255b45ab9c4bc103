"""A stream folder whose stream.json or embedding file is a folder, not a file.

The message names the entry and says what is wrong with it: not that the
file is missing, nor that it holds pickled objects.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memsim.core.errors import StreamError
from memsim.data.stream import read_stream, write_stream
from memsim.data.workload import SyntheticWorkload


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    stream = SyntheticWorkload(horizon_days=3, backfill_days=3, notes_per_day=4.0,
                               queries_per_day=3.0).generate(2)
    return write_stream(stream, tmp_path_factory.mktemp("streams") / "s")


def copy_with_a_folder_for(src: Path, dest: Path, name: str) -> Path:
    dest.mkdir()
    for f in src.iterdir():
        if f.name != name:
            (dest / f.name).write_bytes(f.read_bytes())
    os.mkdir(dest / name)
    return dest


@pytest.mark.parametrize("name", ["note_embeddings.npy", "query_embeddings.npy",
                                  "stream.json"])
def test_an_entry_that_is_a_folder_is_named_as_not_a_file(written, tmp_path, name):
    folder = copy_with_a_folder_for(written, tmp_path / "broken", name)
    with pytest.raises(StreamError) as exc:
        read_stream(folder)
    assert str(exc.value) == f"{folder / name}: not a file"


def test_a_missing_stream_json_is_still_called_missing(written, tmp_path):
    folder = copy_with_a_folder_for(written, tmp_path / "broken", "stream.json")
    os.rmdir(folder / "stream.json")
    with pytest.raises(StreamError, match="stream.json: missing from the stream folder"):
        read_stream(folder)
