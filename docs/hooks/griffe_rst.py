"""griffe extension: memsim's reStructuredText habits in docstrings, read as Markdown.

memsim's docstrings are numpy style and also read in a terminal (``help()``),
so they use reST roles (``:class:`~memsim.data.stream.Stream```), literal blocks
introduced by ``::`` and simple tables framed by ``===`` rules. mkdocstrings
renders docstrings as Markdown, where those show as raw markup; this
extension rewrites them as the site reads them, without touching the code:

- a role becomes inline code of the name it shows (``~a.b.C`` shows ``C``);
- a paragraph ending in ``::`` ends in ``:`` (the indented block after it is
  already a code block in Markdown);
- a simple table becomes a fenced text block, so its columns stay aligned.
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|mod|obj|exc|const|ref):`(~?)([^`]+)`")
RULE = re.compile(r"^ *=+( +=+)+ *$")


def _role(match: re.Match) -> str:
    short, target = match.groups()
    target = target.strip()
    if short:
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def _tables(text: str) -> str:
    """Simple reST tables (three ``===`` rules) as fenced text blocks."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        if RULE.match(lines[i]):
            rules = [j for j in range(i, len(lines)) if RULE.match(lines[j])][:3]
            if len(rules) == 3 and all(lines[j].strip() for j in range(i, rules[2] + 1)):
                indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
                out += [f"{indent}```text", *lines[i: rules[2] + 1], f"{indent}```"]
                i = rules[2] + 1
                continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)


def to_markdown(text: str) -> str:
    """A docstring's reST habits rewritten as Markdown (see the module docstring)."""
    text = ROLE.sub(_role, text)
    text = re.sub(r"(\S) ?::$", r"\1:", text, flags=re.M)
    return _tables(text)


class RestToMarkdown(griffe.Extension):
    """Rewrites every docstring once its object is loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = to_markdown(obj.docstring.value)
