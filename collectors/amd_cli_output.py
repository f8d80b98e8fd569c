"""What the ``amd-smi`` CLI prints, read the way a person would.

Two habits of the real tool make a naive reader fail:

- Warnings go to stdout *before* the JSON document. Without the ``render``/``video`` groups,
  ROCm 6.x prints ``WARNING: User is missing the following required groups: render, video.
  Please add user to these groups.`` and then the JSON (ROCm/amdsmi#125; ROCm 7 raises it as an
  error instead). :func:`split_json_output` finds the document wherever it starts and keeps the
  lines around it as notes: they often say why metrics are missing.
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
_DOC_START = re.compile(r"(?:^|\n)[ \t]*[\[{]")
MAX_REASON_CHARS = 240


def split_json_output(stdout: str) -> tuple[Any, list[str]]:
    """The JSON document in amd-smi's stdout, and the other non-blank lines (warnings printed
    before or after it), trimmed. Raises ValueError when there is no JSON document."""
    text = stdout.strip()
    starts = [0] if text[:1] in "[{" else []
    starts += [m.start(1) for m in re.finditer(r"\n[ \t]*([\[{])", text)]
    for start in starts:
        try:
            doc, end = _DECODER.raw_decode(text, start)
        except ValueError:
            continue
        notes = _lines(text[:start]) + _lines(text[end:])
        return doc, notes
    first = next(iter(_lines(text)), "")
    raise ValueError(f"no JSON document in amd-smi's output (it printed: {first[:120]!r})" if first
                     else "amd-smi printed nothing")


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


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
            return _trim(reason)
    for line in lines:
        if not _BANNER.match(line.strip()):
            return _trim(_LOG_PREFIX.sub("", line.strip()))
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
    return bool(_DOC_START.search(stdout or ""))


def _trim(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"
