"""The command line's output: ``--progress json`` writes nothing
but JSON objects on stderr, parameters out of range are refused with one
line, and the numbers printed keep what the data supports."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from memsim.cli import Progress, main

QUICKSTART = Path(__file__).resolve().parents[1] / "experiments" / "quickstart.toml"


class Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


def _records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_json_progress_of_a_resumed_sweep_is_json_lines_only():
    out = Pipe()
    prog = Progress("memsim sweep", phase="trials", units=4, unit="trial", resumed=True,
                    then="trials done; robustness check", stream=out, json_lines=True)
    prog(0.5)   # two trials complete before this command
    prog(0.75)
    prog(1.0)
    prog.phase("robustness", units=1, unit="candidate")
    prog(1.0)
    prog.close()
    lines = _records(out.getvalue())  # every line one JSON object
    assert lines[0] == {"command": "memsim sweep", "phase": "trials",
                        "done": "2/4 trials done before", "fraction": 0.5, "elapsed_s": 0.0,
                        "left_s": None}
    assert [x["done"] for x in lines[1:]] == ["trial 3/4", "trial 4/4", "candidate 1/1"]
    assert lines[-1]["phase"] == "robustness"


@pytest.mark.parametrize("args", [["--s", "2"], ["--s", "-1"], ["--delta", "1.95"]])
def test_curves_refuses_a_similarity_outside_minus_one_to_one(args, capsys):
    assert main(["curves", "feather", *args]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("memsim: error: curves: s and s - delta must be similarities in "
                          "[-1, 1]") and err.count("\n") == 1


def test_curves_accepts_the_ends_of_the_similarity_range(capsys):
    assert main(["curves", "feather", "--s", "1", "--delta", "2", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["curves"]
    assert row["preset"] == "feather"


@pytest.mark.parametrize("overrides, says", [
    ("experiment.replicates=1", "not one string: write overrides=['experiment.replicates=1']"),
    (5, "got int 5"),
    ([5], "got 5 in the list"),
])
def test_overrides_that_are_not_a_list_or_a_dict_are_refused_with_one_message(overrides, says):
    import memsim

    exp = memsim.load_experiment(QUICKSTART)
    calls = [lambda: memsim.load_experiment(QUICKSTART, overrides),
             lambda: memsim.run_experiment(exp, overrides=overrides, out=None),
             lambda: memsim.run_experiment(QUICKSTART, overrides=overrides, out=None),
             lambda: memsim.advise(exp, overrides=overrides),
             lambda: memsim.run_sweep(QUICKSTART, overrides=overrides, out=None)]
    for call in calls:
        with pytest.raises(memsim.ConfigError) as info:
            call()
        assert len(info.value.errors) == 1 and says in str(info.value)


def test_a_tuple_of_overrides_is_a_list():
    import memsim

    exp = memsim.load_experiment(QUICKSTART, ("experiment.replicates=1",))
    assert exp.settings.replicates == 1


def test_curves_json_tells_always_and_never_from_n_a(capsys):
    """JSON writes inf and NaN alike as null; the flags say which, as the
    table's 'always' / 'never' against n/a do."""
    from memsim.cli import main

    assert main(["curves", "feather", "ai-memory", "generative-agents", "--json"]) == 0
    rows = {r["preset"]: r for r in json.loads(capsys.readouterr().out)["curves"]}
    assert rows["feather"]["evict_after_days"] is None and rows["feather"]["evicted_never"]
    assert rows["feather"]["crossover_days"] > 0 and not rows["feather"]["crossover_always"]
    assert rows["ai-memory"]["crossover_days"] is None and rows["ai-memory"]["crossover_always"]
    assert rows["ai-memory"]["evict_after_days"] > 0 and not rows["ai-memory"]["evicted_never"]
    ga = rows["generative-agents"]  # n/a: its ranker scores relative to other candidates
    assert ga["crossover_days"] is None and not ga["crossover_always"]
