"""Secrets out of command lines, before anything is stored, shown or exported.

Inference servers are started with their credentials on the command line (``--api-key K``,
``--hf-token T``, ``HF_TOKEN=T``, ``https://user:P@host``). gpuscope stores the command of every
run, and ``runs``, ``sql``, the TUI and exports show it, so every place that stores or prints a
command line passes it through :func:`redact_command` (or :func:`redact_argv`) first. This module
is the one owner of that rule; docs/run.md states it for users.

The rule, by name. A name (an option without its dashes, the NAME of ``NAME=value``, a URL query
parameter, a JSON or keyword-argument key) is cut into words at ``-``, ``_`` and ``.``. It names
a secret when one of its words

- is one of ``key``, ``token``, ``secret``, ``password``, ``passwd``, ``pwd``, ``auth``,
  ``credential(s)``, ``cookie(s)``, ``apikey``, ``passphrase``, ``jwt``, ``signature``...; or
- ends in ``key``, ``token``, ``secret``, ``password`` or ``passwd`` (``apikey``, ``hftoken``),
  or starts with ``auth``, ``credential``, ``secret``, ``passw`` or ``cookie``
  (``authorization``), unless the word is an ordinary one that merely contains them
  (``tokenizer``, ``tokens``, ``keys``, ``monkey``...); or
- is ``keys``/``tokens`` after a word that makes them credentials (``--api-keys``,
  ``--access-tokens``);

and it is not one of the names that only configure, count or point at a secret:

- a flag that turns a feature on or off (first word ``no``, ``disable``, ``enable``, ``use``,
  ``skip``, ``require``, ``allow``, ``with``, ``without``): ``--disable-auth-check``;
- a name with a count word (``max``, ``min``, ``num``, ``number``, ``count``, ``per``,
  ``total``): ``--max-tokens``, ``--num-keys``;
- a name whose last word says what kind of value it is, other than the secret itself
  (``file``, ``path``, ``dir``, ``size``, ``heads``, ``dim``, ``dtype``, ``id``, ``type``,
  ``mode``, ``name``, ``env``, ``url``, ``check``, ``enabled``...): ``--ssl-keyfile``,
  ``--key-value-heads``, ``--hf-token-path``; but ``--ssl-keyfile-password`` ends in a secret;
- a vocabulary token (``--eos-token``, ``--pad-token``, ``--image-token``).

What is hidden: the value of such an option (``--api-key K``, ``--api-key=K``, the single-dash
form ``-api-key K``; the value is the next argument unless that starts with ``-``, as argparse
reads it; a plural name such as ``--api-keys`` hides every value up to the next option), the
value of ``NAME=value`` (also inside another option: ``--env=HF_TOKEN=T``), the password of any
URL's userinfo (a userinfo without a password is usually a token, so it is hidden whole), the
values of such names in a URL's query string, ``name: "value"`` / ``name="value"`` pairs inside an
argument (JSON, Python code given to ``python -c``), ``Authorization:``/``Cookie:`` header values
(the scheme, ``Bearer``, stays), and the password of ``curl -u user:password``. Inside one argument
that holds a whole shell command (``bash -c "... --api-key K"``) the same rules apply to its
words, and a quoted value (``--api-key 'a b'``) is hidden whole. Option names stay, so the
command still reads right: ``--api-key ***``.

Not hidden, because the name says nothing: a secret given positionally, or behind a one-letter
option (``mysql -pSECRET``: ``-p`` is a port for most servers).
"""

from __future__ import annotations

import functools

import re
from collections.abc import Iterable, Sequence

MASK = "***"

_EXACT = frozenset({
    "key", "token", "secret", "password", "passwd", "pwd", "auth", "credential", "credentials",
    "cookie", "cookies", "apikey", "apikeys", "passphrase", "secrets", "bearer", "pat", "sas", "jwt",
    "signature", "sig",
})
_SUFFIXES = ("key", "token", "secret", "password", "passwd")
_PREFIXES = ("auth", "credential", "secret", "passw", "cookie")
# Words that contain a secret word but name something ordinary.
_ORDINARY = frozenset({
    "tokenizer", "tokenizers", "tokens", "tokenize", "tokenized", "keys", "keyword", "keywords",
    "keyframe", "keyframes", "monkey", "hotkey", "hotkeys", "keyboard", "passthrough", "authors",
    "author", "authored", "keyfile", "keyfiles",
})
# `keys`/`tokens` are credentials after one of these (`--api-keys k1 k2`), ordinary otherwise
# (`--stop-tokens`, `--sort-keys`).
_CREDENTIAL_QUALIFIERS = frozenset({
    "api", "access", "auth", "secret", "private", "bearer", "admin", "master", "hf", "client",
    "session", "refresh", "service", "signing", "user", "personal",
})
# `token` after one of these is a token of the model's vocabulary, not a credential.
_VOCABULARY = frozenset({
    "eos", "bos", "pad", "unk", "sep", "cls", "mask", "stop", "special", "image", "audio", "video",
    "placeholder", "start", "end", "think", "tool", "vision", "boi", "eoi",
})
# A name with one of these words counts or sizes something rather than holding a secret.
_COUNTS = frozenset({"max", "min", "num", "number", "count", "per", "total"})
# A name ending in one of these holds something about a secret (where it is, how big, which
# kind), not the secret itself.
_DESCRIPTORS = frozenset({
    "size", "len", "length", "heads", "head", "dim", "dims", "dtype", "file", "files", "keyfile",
    "certfile", "path", "paths", "dir", "id", "ids", "type", "method", "mode", "kind", "scheme",
    "env", "var", "name", "names", "budget", "budgets", "rate", "limit", "check", "checks",
    "enabled", "disabled", "required", "version", "url", "uri", "endpoint", "host", "port",
    "timeout", "ttl", "format", "location", "provider", "source",
})
_FLAG_PREFIX = frozenset({"no", "disable", "enable", "use", "skip", "require", "allow", "with", "without"})
_PLURAL = frozenset({"keys", "tokens", "secrets", "passwords", "apikeys"})

_SPLIT = re.compile(r"[-_.]+")


def _words(name: str) -> list[str]:
    return [w for w in _SPLIT.split(name.strip("-").lower()) if w]


def _secret_word(words: list[str]) -> str | None:
    """The word that makes ``words`` a secret's name, if any (see the module's rule)."""
    if not words or words[0] in _FLAG_PREFIX or words[-1] in _DESCRIPTORS:
        return None
    if any(w in _COUNTS for w in words):
        return None
    for i, w in enumerate(words):
        before = words[i - 1] if i else ""
        if w in ("keys", "tokens") and before in _CREDENTIAL_QUALIFIERS:
            return w
        if w in _ORDINARY or (w == "token" and before in _VOCABULARY):
            continue
        if w in _EXACT or w.endswith(_SUFFIXES) or w.startswith(_PREFIXES):
            return w
    return None


def is_secret_name(name: str) -> bool:
    """True when an option or variable called ``name`` (dashes allowed) holds a secret."""
    return _secret_word(_words(name)) is not None


def _takes_many(name: str) -> bool:
    """A plural secret option (``--api-keys k1 k2``) takes every value up to the next option."""
    return _secret_word(_words(name)) in _PLURAL


_URL_USERINFO = re.compile(
    # greedy up to the last "@" before the host: a password may hold an unencoded "@"
    r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^\s/:?#]*)(?::(?P<pw>[^\s/?#]*))?@")
_QUERY_PARAM = re.compile(r"(?P<sep>[?&;])(?P<name>[A-Za-z0-9_.-]+)=(?P<value>[^&#\s\"']*)")
# `"hf_token": "v"` (JSON), `api_key='v'` (Python code), `os.environ['HF_TOKEN'] = 'v'`,
# `--api-key="a b"` (a quoted value inside a shell string)
_QUOTED_PAIR = re.compile(
    r"(?<![A-Za-z0-9_.-])(?P<nq>[\"']?)(?P<name>-{0,2}[A-Za-z_][A-Za-z0-9_.-]*)(?P=nq)(?P<br>\]?)"
    r"(?P<mid>\s*[:=]\s*)(?P<vq>[\"'])(?P<value>(?:(?!(?P=vq))[^\n])*)(?P=vq)")
_ASSIGN = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)=(?P<value>.*)$", re.S)
_OPTION = re.compile(r"^(?P<name>--?[A-Za-z][A-Za-z0-9_.-]*)(?:=(?P<value>.*))?$", re.S)
_HEADER = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9-]*)(?P<sep>\s*:\s*)(?P<value>.+)$", re.S)
_AUTH_SCHEMES = frozenset({"bearer", "basic", "token", "digest", "negotiate", "apikey"})
# curl/wget: `-u user:password`; a numeric "password" is a uid:gid (`docker run -u 1000:1000`)
_USER_OPTIONS = frozenset({"-u", "--user", "--proxy-user"})
_USER_PASSWORD = re.compile(r"^(?P<user>[^:\s]+):(?P<pw>.+)$", re.S)
# Shell punctuation that ends a word in a shell string: kept after the ***.
_SHELL_TAIL = re.compile(r"[;&|)]+$")
_SHELL_OPERATORS = frozenset({"&&", "||", "|", ";", "&", ">", ">>", "<", "2>", "2>&1", "(", ")"})


def _redact_embedded(text: str) -> str:
    """URL userinfo and query parameters, and quoted name/value pairs, anywhere in ``text``."""
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
            return (f"{m.group('nq')}{m.group('name')}{m.group('nq')}{m.group('br')}{m.group('mid')}"
                    f"{m.group('vq')}{MASK}{m.group('vq')}")
        return m.group(0)

    if "@" in text:
        text = _URL_USERINFO.sub(userinfo, text)
    if "=" in text:
        text = _QUERY_PARAM.sub(param, text)
    if ("=" in text or ":" in text) and ("\"" in text or "'" in text):
        text = _QUOTED_PAIR.sub(pair, text)
    return text


def _is_secret_header(name: str) -> bool:
    return name.lower() in ("authorization", "proxy-authorization", "cookie", "set-cookie") or is_secret_name(name)


def _header_value(value: str) -> str:
    """A header's value hidden, its scheme kept: ``Bearer ***``."""
    scheme, space, rest = value.partition(" ")
    if space and rest.strip() and scheme.lower() in _AUTH_SCHEMES:
        return f"{scheme} {MASK}"
    return MASK


def _is_value(word: str) -> bool:
    """Whether ``word`` can be an option's value: argparse reads a word starting with ``-`` as the
    next option unless it is a negative number."""
    return not word.startswith("-") or bool(re.fullmatch(r"-\d+(\.\d+)?", word))


def _redact_words(words: Sequence[str], shell: bool = False) -> list[str | None]:
    """``words`` with secrets hidden, one entry per word; ``None`` for a word that joined the
    ``***`` before it (the rest of a quoted value in a shell string). ``shell``: the words come
    from one string that holds a shell command, so quotes and ``;`` mean what a shell makes of
    them."""
    out: list[str | None] = []
    n = len(words)

    def hide_value(i: int, value: str, prefix: str = "") -> int:
        """Hide the value starting at words[i] (``value`` is its text): returns the next index."""
        tail = ""
        end = i + 1
        if shell and value.lower() in _AUTH_SCHEMES and end < n and _is_value(words[end]) \
                and words[end] not in _SHELL_OPERATORS:
            # `--auth-header Bearer T`, also a stored command whose "Bearer T" lost its quotes
            out.append(f"{prefix}{value}")
            return hide_value(end, words[end])
        if shell:
            q = value[:1]
            if q in ("'", "\"") and not (len(value) > 1 and value.endswith(q)):
                # a quoted value with spaces in it: hide up to the word that closes the quote
                for j in range(i + 1, n):
                    if words[j].rstrip(";&|)").endswith(q):
                        end = j + 1
                        break
            m = _SHELL_TAIL.search(words[end - 1])
            tail = m.group(0) if m else ""
        shown = _header_value(value) if not shell and " " in value else MASK  # "Bearer ***"
        out.append(f"{prefix}{shown}{tail}")
        out.extend([None] * (end - i - 1))
        return end

    i = 0
    while i < n:
        word = words[i]
        if word.endswith(":") and len(word) > 1 and _is_secret_header(word[:-1]):
            # a header split into words: "Authorization:" "Bearer" "T"
            out.append(word)
            i += 1
            if i < n and words[i].lower() in _AUTH_SCHEMES and i + 1 < n:
                out.append(words[i])
                i += 1
            if i < n:
                i = hide_value(i, words[i])
            continue
        opt = _OPTION.match(word)
        if opt:
            name, value = opt.group("name"), opt.group("value")
            i += 1
            if is_secret_name(name):
                if value is None:
                    out.append(word)
                    many = _takes_many(name)
                    while i < n and _is_value(words[i]) and not (shell and words[i] in _SHELL_OPERATORS):
                        i = hide_value(i, words[i])
                        if not many or (shell and words[i - 1].endswith(";")):  # `;` ends a shell command
                            break
                elif value:
                    i = hide_value(i - 1, value, prefix=f"{name}=")
                else:
                    out.append(word)  # `--api-key=`: nothing to hide
                continue
            if value is None and word in _USER_OPTIONS and i < n:
                up = _USER_PASSWORD.match(words[i])
                if up and not up.group("pw").isdigit():
                    out.append(word)
                    out.append(f"{up.group('user')}:{MASK}")
                    i += 1
                    continue
            if value is not None:
                # `--env=HF_TOKEN=T`, `--user=u:p`, `--header=Authorization: Bearer T`
                inner = _redact_words([value], shell)[0] or MASK
                if name in _USER_OPTIONS and (up := _USER_PASSWORD.match(value)) and not up.group("pw").isdigit():
                    inner = f"{up.group('user')}:{MASK}"
                out.append(f"{name}={inner}")
            else:
                out.append(word)
            continue
        assign = _ASSIGN.match(word)
        if assign and is_secret_name(assign.group("name")):
            value = assign.group("value")
            head, space, rest = value.partition(" ")
            if space:
                # `sh -c "HF_TOKEN=T vllm serve ..."` as one argument: the value ends at the
                # first space, the rest is a command
                out.append(f"{assign.group('name')}={MASK} {_redact_text(rest)}")
                i += 1
            else:
                i = hide_value(i, value, prefix=f"{assign.group('name')}=")
            continue
        header = _HEADER.match(word)
        if header and _is_secret_header(header.group("name")):
            out.append(f"{header.group('name')}{header.group('sep')}{_header_value(header.group('value'))}")
            i += 1
            continue
        out.append(_redact_one(word))
        i += 1
    return out


def _redact_one(arg: str) -> str:
    """One argument: URL parts and quoted pairs, and, when it holds a whole command (``bash -c
    "..."``), the rules applied to its words."""
    arg = _redact_embedded(arg)
    if any(c.isspace() for c in arg):
        return _redact_text(arg)
    return arg


def _unquote(word: str) -> str:
    return word[1:-1] if len(word) > 1 and word[0] in "\"'" and word[-1] == word[0] else word


def _redact_text(text: str) -> str:
    """A command line as one string: its words redacted, its spacing kept."""
    parts = re.split(r"(\s+)", text)
    words, seps = parts[0::2], parts[1::2]
    # a word quoted inside a shell string names the same thing without its quotes
    bare = [_unquote(w) for w in words]
    redacted = _redact_words(bare, shell=True)
    out: list[str] = []
    for k, (r, b, w) in enumerate(zip(redacted, bare, words)):
        if r is None:
            continue  # joined the *** before it, with the space before it
        if k:
            out.append(seps[k - 1])
        out.append(w if r == b else r)
    return "".join(out)


def redact_argv(argv: Iterable[str]) -> list[str]:
    """The command's arguments with every secret value replaced by ``***``."""
    return [w for w in _redact_words([str(a) for a in argv]) if w is not None]


def redact_command(command: str | Sequence[str] | None) -> str | None:
    """A command line (a string, or the argument list joined with spaces) with every secret
    value replaced by ``***``; None stays None."""
    if command is None:
        return None
    if isinstance(command, str):
        return _redact_string_command(command) if command else command
    return " ".join(redact_argv(command))


@functools.lru_cache(maxsize=1 << 15)
def _redact_string_command(command: str) -> str:
    # Listing 10,000 runs redacts 10,000 commands in the read layer and again in the renderer
    # (~25 us each: bench/bench_runs10k.py), and the TUI lists them every refresh: a text once
    # redacted is not redacted again in this process (the result depends on the text alone).
    return _redact_text(_redact_embedded(command))


def redact_environment(names: Iterable[str]) -> list[str]:
    """Environment variable *names* that may be recorded: never values, never secret names."""
    return sorted(n for n in names if not is_secret_name(n))
