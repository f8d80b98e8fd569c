"""Kernel names short enough for a table and still told apart.

Real kernel names run to hundreds of characters of return types, namespaces, template
arguments and parameter lists (``void at::native::elementwise_kernel<128, 4, ...>(int, ...)``,
Tensile's ``Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x128x64_MI16x16x1_...``). Cutting
them at a width makes five rows read ``void at::native::elementwise_kernel…``. Here the
namespaces, template arguments and parameters go first; names that still collide show the part
where they differ. The full name is always in ``--json`` and with ``--wide``.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

ELLIPSIS = "…"


def _strip_brackets(text: str, open_: str, close: str) -> str:
    out, depth = [], 0
    for ch in text:
        if ch == open_:
            depth += 1
        elif ch == close and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def simplify(name: str) -> str:
    """The function's own name: no return type, namespaces, template arguments or parameters
    (``void at::native::elementwise_kernel<...>(...)`` -> ``elementwise_kernel``). Names
    without that structure (Tensile, Triton, NCCL) come back as they are."""
    text = " ".join(name.split())
    text = text.replace("(anonymous namespace)::", "")
    if "<" not in text and "::" not in text:
        head, paren, _ = text.partition("(")
        if paren and head and " " not in head.strip() and text.endswith(")"):
            return head.strip()  # ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, ...)
        return text  # no C++ structure: "Memcpy DtoD (Device -> Device)", Tensile, Triton
    bare = _strip_brackets(_strip_brackets(text, "<", ">"), "(", ")").strip()
    last = bare.split()[-1] if bare.split() else bare
    short = last.rsplit("::", 1)[-1].strip(":") or last
    if short in _GENERIC:
        # cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>: the name is the argument
        first = _first_template_argument(text)
        if first:
            return first.rsplit("::", 1)[-1]
    return short or text


#: Launch wrappers whose first template argument names the real kernel.
_GENERIC = frozenset({"Kernel", "Kernel2", "kernel", "device_kernel", "kentry", "kernel_entry", "DeviceKernel"})


def _first_template_argument(text: str) -> str | None:
    start = text.find("<")
    if start < 0:
        return None
    depth, out = 0, []
    for ch in text[start + 1:]:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            if depth == 0:
                break
            depth -= 1
        elif ch == "," and depth == 0:
            break
        out.append(ch)
    arg = "".join(out).strip()
    bare = _strip_brackets(arg, "<", ">").strip()
    return bare if bare and " " not in bare and not bare[0].isdigit() else None


def fit(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: its head and tail around an ellipsis."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    tail = max(0, (width - 1) // 3)
    head = width - 1 - tail
    return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _around(name: str, at: int, width: int) -> str:
    """``name`` in ``width`` characters keeping its head and the stretch from ``at`` (where it
    differs from a name it would otherwise look like) on."""
    if len(name) <= width:
        return name
    start = max(0, at - 2)
    tail = name[start:]
    room = width - 1 - len(tail)
    if room >= 4:
        return name[:room] + ELLIPSIS + tail
    head = name[: max(4, width // 3)]
    rest = width - len(head) - 1
    if start <= len(head) or rest <= 4:
        return fit(name, width)
    return head + ELLIPSIS + fit(tail, rest)


def distinct_names(names: Sequence[str], width: int) -> list[str]:
    """One display name per entry of ``names``, each at most ``width`` characters, distinct
    wherever the full names are: simplified first, then, for names that would still look the
    same, the simplified name's head and the stretch where the full name differs."""
    simple = [simplify(n) for n in names]
    shown = [fit(s, width) for s in simple]
    groups: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(shown):
        groups[s].append(i)
    for members in groups.values():
        if len({names[i] for i in members}) < 2:
            continue
        for i in members:
            alike = [simple[j] for j in members if names[j] != names[i]]
            if simple[i] not in alike:
                # the core names differ (cutlass_80_..._256x64_... and ..._128x128_...): keep the
                # core name's head and its stretch from where it differs, never the parameter list
                shown[i] = _around(simple[i], max(_common_prefix(simple[i], o) for o in alike), width)
                continue
            full = " ".join(names[i].split())
            others = [" ".join(names[j].split()) for j in members if names[j] != names[i]]
            at = max(_common_prefix(full, o) for o in others)
            head = simple[i][: max(4, width // 3)]
            start = max(0, at - 3)
            room = width - len(head) - 1
            if start <= len(head) or room <= 4:
                shown[i] = fit(full, width)
            else:
                shown[i] = head + ELLIPSIS + fit(full[start:], room)
    # still alike (very narrow columns): number them
    seen: dict[str, int] = defaultdict(int)
    counts: dict[str, int] = defaultdict(int)
    for s in shown:
        counts[s] += 1
    for i, s in enumerate(shown):
        if counts[s] > 1 and len({names[j] for j, t in enumerate(shown) if t == s}) > 1:
            seen[s] += 1
            tag = f"#{seen[s]}"
            shown[i] = fit(s, max(1, width - len(tag))) + tag
    return shown


def fit_commands(commands: Sequence[str], width: int) -> list[str]:
    """Command lines in at most ``width`` characters each, keeping what tells runs apart: the
    program, the script and its arguments. Directories go first (``/tmp/pytest-7/traces/a.json.gz``
    -> ``…/a.json.gz``: every run's paths share them), then the middle of what is left."""
    out = []
    for cmd in commands:
        if len(cmd) <= width:
            out.append(cmd)
            continue
        words = cmd.split(" ")
        for i, word in enumerate(words):
            # the program keeps its own name, an option its key (--out=/a/b/c -> --out=…/c)
            key, eq, value = word.partition("=") if word.startswith("-") else ("", "", word)
            if "/" in value.rstrip("/"):
                base = value.rstrip("/").rsplit("/", 1)[1]
                short = ELLIPSIS + "/" + base
                if len(short) < len(value):
                    words[i] = key + eq + short
        # the program and its script (the first word after it that is not an option) stay whole
        # where they leave room; the arguments keep their head and tail
        script = next((i for i, w in enumerate(words[1:], 1) if w and not w.startswith("-")), 0)
        head, rest = " ".join(words[:script + 1]), " ".join(words[script + 1:])
        room = width - len(head) - 1
        if rest and room >= 8:
            out.append(head + " " + fit(rest, room))
        else:
            out.append(fit(" ".join(words), width))
    return out
