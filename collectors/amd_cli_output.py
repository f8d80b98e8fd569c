"""What the ``amd-smi`` CLI prints, read the way a person would.

Two habits of the real tool make a naive reader fail:

- Warnings go to stdout *before* the JSON document. Without the ``render``/``video`` groups,
  ROCm 6.x prints ``WARNING: User is missing the following required groups: render, video.
  Please add user to these groups.`` and then the JSON (ROCm/amdsmi#125; ROCm 7 raises it as an
  error instead). :func:`split_json_output` finds the document at the line it starts on and
  keeps the lines around it as notes: they often say why metrics are missing.
- On failure the line that says why is rarely the last: with the driver missing amd-smi logs
  ``ERROR:root:Unable to get devices, driver not initialized (amdgpu not found in modules)``,
  two more ``ERROR:root:`` lines, and then its version banner (ROCm/amdsmi#172).
  :func:`failure_reason` keeps the first line that carries the error.
"""

from __future__ import annotations

import json
import re
from typing import Any

_DECODER = json.JSONDecoder()
_LOG_PREFIX = re.compile(r"^(?:(?:ERROR|WARNING|CRITICAL|INFO):[\w.]*:|[A-Za-z]*Error:\s*|Exception:\s*)\s*")
_ERROR_WORDS = re.compile(
    r"error|fail|unable|cannot|can't|could not|denied|permission|not found|not initiali[sz]ed|"
    r"not loaded|missing|no such|not supported|invalid|timed? ?out",
    re.I,
)
_BANNER = re.compile(r"^(?:AMDSMI Tool:|AMD-SMI |\+[-=+]+\+$|\|)")
#: ``/usr/lib/python3.14/site-packages/amdsmi/amdsmi_interface.py:3569: SyntaxWarning: ...``
_PY_WARNING = re.compile(r"^\S.*:\d+: [A-Za-z]*Warning: ")
#: a JSON document opening at the start of a line (see :func:`split_json_output` for why unindented)
_DOC_AT_LINE_START = re.compile(r"\n([\[{])")
MAX_REASON_CHARS = 240


def split_json_output(stdout: str) -> tuple[Any, list[str]]:
    """The JSON document in amd-smi's stdout, and the other non-blank lines (warnings printed
    before or after it), each made one printable line of at most :data:`MAX_REASON_CHARS`.
    Raises ValueError, with a one-line message, when there is no JSON document or it does not
    parse (a truncated output, garbage).

    The document starts at the beginning of a line, unindented: amd-smi indents everything inside
    it, so an indented ``{`` is an object *inside* a document. Were those tried too, a document
    cut short would be read from its first complete inner object (one GPU's entry, or a
    ``{"value", "unit"}`` pair taken for a GPU)."""
    text = stdout.strip()
    starts = [0] if text[:1] in "[{" else []
    starts += [m.start(1) for m in _DOC_AT_LINE_START.finditer(text)]
    problem = ""
    for start in starts:
        try:
            doc, end = _DECODER.raw_decode(text, start)
        except RecursionError:  # "[[[[..." nested deeper than the decoder recurses
            problem = problem or "nested too deeply"
            continue
        except ValueError as exc:
            problem = problem or str(exc)
            continue
        notes = _lines(text[:start]) + _lines(text[end:])
        return doc, notes
    if problem:
        raise ValueError(one_line(f"amd-smi printed JSON that does not parse ({problem}; cut short?)"))
    first = next(iter(_lines(text)), "")
    raise ValueError(f"no JSON document in amd-smi's output (it printed: {first[:120]!r})" if first
                     else "amd-smi printed nothing")


def _lines(text: str) -> list[str]:
    return [one_line(line) for line in text.splitlines() if line.strip()]


def failure_reason(stderr: str, stdout: str = "") -> str:
    """The line(s) of a failed amd-smi run that say why: the first line that carries an error
    (without its logger prefix), with the first detail line under it when it has one; else the
    first line that is not a banner. stderr is read before stdout; Python's own warnings
    (``...py:3569: SyntaxWarning: ...`` and the source line under them, printed by newer
    Pythons on amd-smi's code) and traceback frames are never the reason."""
    lines = _reason_lines(stderr) + _reason_lines(stdout)
    for i, line in enumerate(lines):
        bare = _LOG_PREFIX.sub("", line.strip())
        if bare and _ERROR_WORDS.search(bare) and not _BANNER.match(line.strip()):
            reason = bare
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            if reason.endswith(":") and nxt.startswith(("-", "*", "•")):
                reason = f"{reason} {nxt.lstrip('-*• ').strip()}"
            return one_line(reason)
    for line in lines:
        if not _BANNER.match(line.strip()):
            return one_line(_LOG_PREFIX.sub("", line.strip()))
    return "no output"


def _reason_lines(text: str) -> list[str]:
    out: list[str] = []
    skip_indented = False
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        if skip_indented and line[:1].isspace():
            continue  # the source line under a warning, or a traceback frame
        skip_indented = False
        if _PY_WARNING.match(line) or line.startswith("Traceback (most recent call last)"):
            skip_indented = True
            continue
        out.append(line.rstrip())
    return out


def has_json_document(stdout: str) -> bool:
    """Whether a line of ``stdout`` opens a JSON document (cheap; :func:`split_json_output`
    does the parsing)."""
    text = (stdout or "").strip()
    return text[:1] in ("[", "{") or bool(_DOC_AT_LINE_START.search(text))


def one_line(text: str) -> str:
    """``text`` as one printable line of at most :data:`MAX_REASON_CHARS`: whitespace runs become
    one space, other control characters (random bytes, terminal escapes) ``?``, so that what
    amd-smi printed can go into a reason or a note without breaking a line or a terminal."""
    text = " ".join(text.split())
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"
