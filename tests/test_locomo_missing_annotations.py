"""LoCoMo-shaped data without the LLM annotations (observations, session
summaries): importing those as notes is refused, not an empty stream."""

from __future__ import annotations

import json

import pytest

from memsim.core.errors import StreamError
from memsim.data.importers.locomo import import_locomo

from .test_trace_inputs import _record

@pytest.mark.parametrize("notes, key", [("observations", "'observation'"),
                                        ("summaries", "'session_summary'")])
def test_notes_from_absent_annotations_are_refused(tmp_path, notes, key):
    path = tmp_path / "conv.json"
    path.write_text(json.dumps([_record()]), encoding="utf-8")
    with pytest.raises(StreamError) as err:
        import_locomo(path, notes=notes)
    msg = str(err.value)
    assert msg.startswith(f"{path}: notes={notes!r}: the data hold no ")
    assert key in msg and "notes='turns'" in msg
    # the turns are there
    assert len(import_locomo(path).notes) == 2
