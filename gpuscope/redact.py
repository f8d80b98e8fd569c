"""Secrets out of command lines, before anything is stored, shown or exported.

Inference servers are started with their credentials on the command line (``--api-key K``,
``--hf-token T``, ``HF_TOKEN=T``, ``https://user:P@host``). gpuscope stores the command of every
run, and ``runs``, ``sql``, the TUI and exports show it, so every place that stores or prints a
command line passes it through :func:`redact_command` (or :func:`redact_argv`) first. This module
is the one owner of that rule; docs/run.md states it for users.

The rule, by name. A name (an option without its dashes, or the NAME of ``NAME=value``) is cut
into words at ``-``, ``_`` and ``.``; it names a secret when one of its words

- is one of ``key``, ``token``, ``secret``, ``password``, ``passwd``, ``pwd``, ``auth``,
  ``credential(s)``, ``cookie(s)``, ``apikey``, ``passphrase``; or
- ends in ``key``, ``token``, ``secret`` or ``password`` (``apikey``, ``hftoken``,
  ``authtoken``), or starts with ``auth``, ``credential``, ``secret``, ``passw`` or ``cookie``
  (``authorization``), unless the word is one of the ordinary ones that merely contain them
  (``tokenizer``, ``tokens``, ``keys``, ``monkey``...).

Names that only configure a secret are not secrets: a flag that turns a feature on or off
(first word ``no``, ``disable``, ``enable``, ``use``, ``skip``, ``require``, ``allow``), and
names about sizes, counts, files and paths (``max``, ``num``, ``heads``, ``dim``, ``file``,
``path``, ``dir``...): ``--max-tokens 512``, ``--key-value-heads 8``, ``--ssl-keyfile
key.pem`` and ``--disable-auth-check`` are kept as written.

What is hidden: the value of such an option (``--api-key K``, ``--api-key=K``, and the
single-dash form ``-api-key K``; a value is the next argument unless that starts with ``-``),
the value of ``NAME=value``, the password of any URL's userinfo (a userinfo without a password
is itself usually a token, so it is hidden whole), the values of such names in a URL's query
string, and ``"name": "value"`` pairs in JSON given as an argument. Inside one argument that
holds a whole shell command (``bash -c "... --api-key K"``) the same rules apply to its words.
Option names stay, so the command still reads right: ``--api-key ***``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

MASK = "***"

_EXACT = frozenset({
    "key", "token", "secret", "password", "passwd", "pwd", "auth", "credential", "credentials",
    "cookie", "cookies", "apikey", "passphrase", "secrets", "bearer", "pat", "sas",
})
_SUFFIXES = ("key", "token", "secret", "password", "passwd")
_PREFIXES = ("auth", "credential", "secret", "passw", "cookie")
# Words that contain a secret word but name something ordinary.
_ORDINARY = frozenset({
    "tokenizer", "tokenizers", "tokens", "tokenize", "tokenized", "keys", "keyword", "keywords",
    "keyframe", "keyframes", "monkey", "hotkey", "hotkeys", "keyboard", "passthrough", "authors",
    "author", "authored",
})
# A name with one of these words configures a secret (or counts something) rather than holding one.
_NOT_A_VALUE = frozenset({
    "max", "min", "num", "number", "count", "size", "len", "length", "heads", "head", "dim", "dims",
    "dtype", "file", "keyfile", "certfile", "path", "dir", "limit", "budget", "per", "rate", "budgets",
    "id", "type", "method", "mode", "kind", "scheme", "header", "env", "var", "name",
})
_FLAG_PREFIX = frozenset({"no", "disable", "enable", "use", "skip", "require", "allow", "with", "without"})

_SPLIT = re.compile(r"[-_.]+")


def is_secret_name(name: str) -> bool:
    """True when an option or variable called ``name`` (dashes allowed) holds a secret."""
    words = [w for w in _SPLIT.split(name.strip("-").lower()) if w]
    if not words or words[0] in _FLAG_PREFIX:
        return False
    if any(w in _NOT_A_VALUE for w in words):
        return False
    for w in words:
        if w in _ORDINARY:
            continue
        if w in _EXACT or w.endswith(_SUFFIXES) or w.startswith(_PREFIXES):
            return True
    return False


_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^\s/@:]*)(?::(?P<pw>[^\s/@]*))?@")
_QUERY_PARAM = re.compile(r"(?P<sep>[?&;])(?P<name>[A-Za-z0-9_.-]+)=(?P<value>[^&#\s\"']*)")
_JSON_PAIR = re.compile(r"(?P<q>[\"'])(?P<name>[A-Za-z0-9_.-]+)(?P=q)(?P<mid>\s*:\s*)(?P<vq>[\"'])(?P<value>[^\"']*)(?P=vq)")
_ASSIGN = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)=(?P<value>.*)$", re.S)
_OPTION = re.compile(r"^(?P<name>--?[A-Za-z][A-Za-z0-9_.-]*)(?:=(?P<value>.*))?$", re.S)
_HEADER = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9-]*)(?P<sep>\s*:\s*)(?P<value>.+)$", re.S)


def _redact_url_parts(text: str) -> str:
    def userinfo(m: re.Match[str]) -> str:
        if m.group("pw") is not None:
            return f"{m.group('scheme')}{m.group('user')}:{MASK}@"
        return f"{m.group('scheme')}{MASK}@" if m.group("user") else m.group(0)

    def param(m: re.Match[str]) -> str:
        if is_secret_name(m.group("name")) and m.group("value"):
            return f"{m.group('sep')}{m.group('name')}={MASK}"
        return m.group(0)

    def pair(m: re.Match[str]) -> str:
        if is_secret_name(m.group("name")) and m.group("value"):
            return f"{m.group('q')}{m.group('name')}{m.group('q')}{m.group('mid')}{m.group('vq')}{MASK}{m.group('vq')}"
        return m.group(0)

    text = _URL_USERINFO.sub(userinfo, text)
    if "=" in text:
        text = _QUERY_PARAM.sub(param, text)
    if ":" in text and ("\"" in text or "'" in text):
        text = _JSON_PAIR.sub(pair, text)
    return text


def _redact_words(words: Sequence[str]) -> list[str]:
    out: list[str] = []
    hide_next = False
    for word in words:
        if hide_next:
            if word.lower() in _AUTH_SCHEMES and out and out[-1].endswith(":"):
                continue  # "Authorization: Bearer T": the scheme and the credential become one ***
            hide_next = False
            if not word.startswith("-") or _looks_negative_number(word):
                out.append(MASK)
                continue
        if word.endswith(":") and _is_secret_header(word[:-1]):
            out.append(word)  # a header split into words: "Authorization:" "Bearer" "T"
            hide_next = True
            continue
        opt = _OPTION.match(word)
        if opt:
            name, value = opt.group("name"), opt.group("value")
            if is_secret_name(name):
                if value is None:
                    hide_next = True
                    out.append(word)
                else:
                    out.append(f"{name}={MASK}" if value else word)
                continue
            out.append(word if value is None else f"{name}={_redact_one(value)}")
            continue
        assign = _ASSIGN.match(word)
        if assign and is_secret_name(assign.group("name")):
            value = assign.group("value")
            head, _, rest = value.partition(" ") if " " in value else (value, "", "")
            # `sh -c "HF_TOKEN=T vllm serve ..."`: the value ends at the first space, the rest is a command
            out.append(f"{assign.group('name')}={MASK}" + (f" {_redact_text(rest)}" if rest else ""))
            continue
        header = _HEADER.match(word)
        if header and _is_secret_header(header.group("name")):
            out.append(f"{header.group('name')}{header.group('sep')}{MASK}")
            continue
        out.append(_redact_one(word))
    return out


_AUTH_SCHEMES = frozenset({"bearer", "basic", "token", "digest", "negotiate"})


def _is_secret_header(name: str) -> bool:
    return name.lower() in ("authorization", "proxy-authorization", "cookie", "set-cookie") or is_secret_name(name)


def _looks_negative_number(word: str) -> bool:
    return bool(re.fullmatch(r"-\d+(\.\d+)?", word))


def _redact_one(arg: str) -> str:
    """One argument: URL parts and JSON pairs, and, when it holds a whole command (``bash -c
    "..."``), the rules applied to its words."""
    arg = _redact_url_parts(arg)
    if any(c.isspace() for c in arg):
        return _redact_text(arg)
    return arg


def _redact_text(text: str) -> str:
    """A command line as one string: its words redacted, its spacing kept."""
    parts = re.split(r"(\s+)", text)
    words, seps = parts[0::2], parts[1::2]
    # a word quoted inside a shell string names the same thing without its quotes
    bare = [w[1:-1] if len(w) > 1 and w[0] in "\"'" and w[-1] == w[0] else w for w in words]
    redacted = _redact_words(bare)
    redacted = [w if r == b else r for r, b, w in zip(redacted, bare, words)]
    out = [redacted[0]]
    for sep, word in zip(seps, redacted[1:]):
        out += [sep, word]
    return "".join(out)


def redact_argv(argv: Iterable[str]) -> list[str]:
    """The command's arguments with every secret value replaced by ``***``."""
    return _redact_words([str(a) for a in argv])


def redact_command(command: str | Sequence[str] | None) -> str | None:
    """A command line (a string, or the argument list joined with spaces) with every secret
    value replaced by ``***``; None stays None."""
    if command is None:
        return None
    if isinstance(command, str):
        return _redact_text(_redact_url_parts(command)) if command else command
    return " ".join(redact_argv(command))


def redact_environment(names: Iterable[str]) -> list[str]:
    """Environment variable *names* that may be recorded: never values, never secret names."""
    return sorted(n for n in names if not is_secret_name(n))
