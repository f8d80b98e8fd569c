"""Secrets out of command lines, before anything is stored, shown or exported.

Inference servers are started with their credentials on the command line (``--api-key K``,
``--hf-token T``, ``HF_TOKEN=T``, ``https://user:P@host``). gpuscope stores the command of every
run, and ``runs``, ``sql``, the TUI, exports and OTel spans show it, and error lines quote it
(``HF_TOKEN=T: command not found``, argparse's ``unrecognized arguments``), so every place that
stores or prints a command line or a piece of one passes it through :func:`redact_command` (or
:func:`redact_argv`) first. This module is the one owner of that rule; docs/run.md states it for
users.

The rule, by name. A name (an option without its dashes, the NAME of ``NAME=value``, a URL query
or fragment parameter, a connection-string key, a JSON or keyword-argument key, a header) is cut
into words at ``-``, ``_``, ``.`` and camelCase (``apiKey``). It names a secret when one of its
words

- is one of ``key``, ``token``, ``secret``, ``password``, ``passwd``, ``pwd``, ``pw``, ``pass``,
  ``passcode``, ``passin``/``passout``, ``auth``, ``cred(s)``, ``credential(s)``, ``cookie(s)``,
  ``apikey``, ``passphrase``, ``jwt``, ``signature``, ``sig``, ``sas``, ``psk``, ``otp``...; or
- ends in ``key``, ``token``, ``secret``, ``password``, ``passwd``, ``pass`` or ``signature``
  (``apikey``, ``hftoken``, ``storepass``, ``SharedAccessSignature``), or starts with ``auth``,
  ``credential``, ``secret``, ``passw`` or ``cookie`` (``authorization``), unless the word is an
  ordinary one that merely contains them (``tokenizer``, ``tokens``, ``keys``, ``monkey``,
  ``bypass``...); or
- is ``keys``/``tokens`` after a word that makes them credentials (``--api-keys``,
  ``--access-tokens``);

and it is not one of the names that only configure, count or point at a secret:

- a flag that turns a feature on or off (first word ``no``, ``disable``, ``enable``, ``use``,
  ``skip``, ``require``, ``allow``, ``with``, ``without``): ``--disable-auth-check``;
- a name with a count word (``max``, ``min``, ``num``, ``number``, ``count``, ``per``,
  ``total``): ``--max-tokens``, ``--num-keys``;
- a name whose last word says what kind of value it is, other than the secret itself
  (``file``, ``path``, ``dir``, ``size``, ``heads``, ``dim``, ``dtype``, ``id``, ``type``,
  ``mode``, ``name``, ``env``, ``url``, ``check``, ``enabled``, ``stdin``...): ``--ssl-keyfile``,
  ``--key-value-heads``, ``--hf-token-path``, ``passwordFile``; but ``--ssl-keyfile-password``
  ends in a secret;
- a vocabulary token (``--eos-token``, ``--pad-token``, ``--image-token``).

What is hidden:

- the value of such an option (``--api-key K``, ``--api-key=K``, ``-api-key K``). The value is
  the next argument unless that reads as an option (``--model``, ``-p``, ``-passin``); a value
  that starts with a dash but looks random (``--api-key -Xy9``) is hidden. A plural name
  (``--api-keys``) hides every value up to the next option. A value that points at the secret
  stays (openssl's ``-passin env:VAR``, ``file:PATH``, ``fd:N``); ``pass:P`` is ``pass:***``;
- the value of ``NAME=value`` (also inside another option: ``--env=HF_TOKEN=T``, ``export
  HF_TOKEN='a b'``);
- in any argument or text: every JSON object or array, read as JSON (``--cfg '{...}'``,
  ``--cfg={...}``, JSON inside a longer text): the values under secret keys at any depth,
  whatever their type (``{"password": 1234}``, ``{"auth": {"value": V}}``, an escaped quote
  ``"ab\\"cd"``), and of name/value pairs (``[{"name": "api_key", "value": V}]``,
  ``{"Name": "HF_TOKEN", "Value": V}``); the document is written again only where something was
  hidden, duplicate keys kept. Where the text is not JSON, ``name: "value"`` / ``name="value"``
  pairs (escaped quotes understood) and ``"name": 1234``;
- URL userinfo (``https://user:***@host``; a userinfo without a password is usually a token and
  is hidden whole), also percent-encoded inside another URL (``https%3A%2F%2Fu%3A***%40h``);
  parameters with secret names in a query, a fragment (``#access_token=***``), ``;``-separated
  (``?a=1;token=***``, ``AccountKey=***;EndpointSuffix=...``, ``Password=***;``), ``,``-separated
  (``a=1,password=***``), ``.npmrc``'s ``:_authToken=***``, and percent-encoded (``%3Ftoken%3D***``).
  A parameter's value ends at a space, a quote or the next ``name=``;
- header values: ``Authorization:``, ``Proxy-Authorization:``, ``Cookie:`` and any header with a
  secret name (``X-Api-Key:``, ``Private-Token:``), as one argument or split into words; the
  scheme stays (``Bearer ***``);
- ``user:password`` of ``-u``/``--user``/``-U``/``--proxy-user`` (``-u user:***``, joined
  ``-uuser:***``, ``-u :***``, and ``-u ***:`` when the user is the key, as Stripe's
  ``sk_test_X:``); a ``uid:gid`` (``-u 1000:1000``) stays;
- the one-letter password options of programs that have them (``mysql -p***``, ``sshpass -p``,
  ``redis-cli -a``, ``mongosh -p``, ``docker login -p``, ``az login -p``, ``ldapsearch -w``, ``zip
  -P``, ``7z -p***``, ``openssl -k``, ``gh secret set N --body``); ``mysql -p db`` asks for the
  password, and ``db`` stays;
- a secret's name as a positional word after ``set``/``config``/``--global``: ``aws configure set
  aws_secret_access_key ***``, ``git config user.password ***``, ``nmcli ... password ***``;
- credentials whose form gives them away wherever they are: AWS access key ids (``AKIA...``),
  GitHub (``ghp_``, ``github_pat_``...), GitLab (``glpat-``), Slack (``xox?-``, webhook paths),
  OpenAI (``sk-...`` with a digit), Anthropic (``sk-ant-``), Hugging Face (``hf_``), Stripe
  (``sk_live_``), Google (``AIza``, ``ya29.``), npm, SendGrid, JSON Web Tokens (``eyJ...``), and
  the body of a PEM private key.

Inside one argument that holds a whole shell command (``bash -c "... --api-key K"``) the same
rules apply to its words, and a quoted value (``--api-key 'a b'``) is hidden whole. Option names
stay, so the command still reads right: ``--api-key ***``. Redaction is idempotent (what it
writes reads the same when redacted again) and depends on the text alone (cached per text).

Not hidden, because nothing says it is a secret: an arbitrary string given positionally or
behind a one-letter option of a program not listed above.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

MASK = "***"

_EXACT = frozenset({
    "key", "token", "secret", "password", "passwd", "pwd", "auth", "credential", "credentials",
    "cookie", "cookies", "apikey", "apikeys", "passphrase", "secrets", "bearer", "pat", "sas", "jwt",
    "signature", "sig", "pass", "pw", "passcode", "passcodes", "cred", "creds", "passin", "passout",
    "passwords", "otp", "totp", "psk",
})
_SUFFIXES = ("key", "token", "secret", "password", "passwd", "pass", "signature")
_PREFIXES = ("auth", "credential", "secret", "passw", "cookie")
# Words that contain a secret word but name something ordinary.
_ORDINARY = frozenset({
    "tokenizer", "tokenizers", "tokens", "tokenize", "tokenized", "keys", "keyword", "keywords",
    "keyframe", "keyframes", "monkey", "hotkey", "hotkeys", "keyboard", "passthrough", "authors",
    "author", "authored", "keyfile", "keyfiles",
    # ... `pass` as the end of an ordinary word (`--bypass-cache`, `--two-pass`, ffmpeg's passes)
    "bypass", "compass", "multipass", "onepass", "twopass", "singlepass", "firstpass", "secondpass",
    "surpass", "trespass", "overpass", "underpass", "subpass", "renderpass",
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
    "timeout", "ttl", "format", "location", "provider", "source", "stdin",
})
_FLAG_PREFIX = frozenset({"no", "disable", "enable", "use", "skip", "require", "allow", "with", "without"})
_PLURAL = frozenset({"keys", "tokens", "secrets", "passwords", "apikeys"})

_SPLIT = re.compile(r"[-_.]+")
# camelCase is cut into words too: `apiKey`, `AccountKey`, `passwordFile` (a path, not a secret)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _words(name: str) -> list[str]:
    return [w for w in _SPLIT.split(_CAMEL.sub("_", name.strip("-"))) if w]


def _secret_word(words: list[str]) -> str | None:
    """The word that makes ``words`` a secret's name, if any (see the module's rule)."""
    words = [w.lower() for w in words]
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


@functools.lru_cache(maxsize=4096)
def _name_secret_word(name: str) -> str | None:
    # Names repeat across commands (`--api-key`, `--model`): each is judged once per process.
    return _secret_word(_words(name))


def is_secret_name(name: str) -> bool:
    """True when an option or variable called ``name`` (dashes allowed) holds a secret."""
    return _name_secret_word(name) is not None


def _takes_many(name: str) -> bool:
    """A plural secret option (``--api-keys k1 k2``) takes every value up to the next option."""
    return _name_secret_word(name) in _PLURAL


_URL_USERINFO = re.compile(
    # greedy up to the last "@" before the host: a password may hold an unencoded "@"
    r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^\s/:?#]*)(?::(?P<pw>[^\s/?#]*))?@")
# the same, percent-encoded inside another URL's parameter (`?next=https%3A%2F%2Fu%3Apw%40h`)
_URL_USERINFO_ENCODED = re.compile(
    r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*(?:://|%3[aA]%2[fF]%2[fF]))(?P<user>(?:(?!%3[aA]|%40|%2[fF])[^\s/?#&])*)"
    r"(?:%3[aA](?P<pw>(?:(?!%2[fF])[^\s/?#&])*?))?%40")
# One parameter's name in a URL (query `?a=1&b=2`, fragment `#access_token=T`, `;` parameters),
# a connection string (`AccountName=x;AccountKey=K`), a list (`a=1,password=P`), `.npmrc`'s
# `//host/:_authToken=T`; also percent-encoded (`%3Ftoken%3DT`). Only the name and `=` are
# matched: a parameter that is not a secret must not swallow the ones after it.
_PARAM_NAME = re.compile(
    r"(?:[?&;#,:/]|%(?:3[fFbBaA]|26|23|2[cCfF]))(?P<name>[A-Za-z0-9_.-]+)(?:=|%3[dD])")
# Where a secret parameter's value ends: a space or a quote, or the next `name=` parameter; a
# separator without a `name=` after it is part of the value (`token=a;b` hides `a;b`).
_PARAM_END = re.compile(
    r"[\s\"'<>]|(?:[?&;#,]|%(?:3[fFbB]|26|23|2[cC]))[A-Za-z0-9_.-]+(?:=|%3[dD])")
# `"hf_token": "v"` (JSON), `api_key='v'` (Python code), `os.environ['HF_TOKEN'] = 'v'`,
# `--api-key="a b"` (a quoted value inside a shell string), `\"token\": \"v\"` (JSON inside a
# double-quoted shell string); the value may hold escaped quotes (`"ab\"cd"`)
_QUOTED_PAIR = re.compile(
    r"(?<![A-Za-z0-9_.-])(?P<nq>\\{0,3}[\"']|)(?P<name>-{0,2}[A-Za-z_][A-Za-z0-9_.-]*)(?P=nq)(?P<br>\]?)"
    r"(?P<mid>\s*[:=]\s*)(?P<vq>\\{0,3}[\"'])(?P<value>(?:(?!(?P=vq))(?:\\.|[^\\\n]))*)(?P=vq)")
# `"password": 1234` (a number where JSON that could not be read as JSON holds a secret)
_QUOTED_NUMBER = re.compile(
    r"(?P<head>(?P<nq>\\{0,3}[\"'])(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)(?P=nq)\s*:\s*)(?P<value>-?\d[\w.+-]*)")
_ASSIGN = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)=(?P<value>.*)\Z", re.S)
_OPTION = re.compile(r"^(?P<name>--?[A-Za-z][A-Za-z0-9_.-]*)(?:=(?P<value>.*))?\Z", re.S)
# What reads as an option rather than as a value: `--lower-case-name` (or ALL-CAPS), a single
# lower-case letter (`-p`), a single-dash lower-case name (`-passin`). A secret that starts with
# a dash (`--api-key -Xy9`) is random-looking and is read as the value.
_OPTION_LIKE = re.compile(
    r"^(?:--(?:[a-z][a-z0-9]*(?:[-_.]+[a-z0-9]+)*|[A-Z][A-Z0-9]*(?:[-_.]+[A-Z0-9]+)*)|-[a-z](?:[a-z]+(?:[-_]+[a-z]+)*)?)(?:=.*)?\Z",
    re.S)
_HEADER = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9-]*)(?P<sep>\s*:\s*)(?P<value>.+)\Z", re.S)
_AUTH_SCHEMES = frozenset({"bearer", "basic", "token", "digest", "negotiate", "apikey"})
# curl/wget: `-u user:password`, `-U` a proxy's; a uid:gid is not (`docker run -u 1000:1000`)
_USER_OPTIONS = frozenset({"-u", "-U", "--user", "--proxy-user"})
# Values of a secret option that point at the secret rather than hold it (openssl's
# `-passin env:VAR` / `file:PATH` / `fd:N`); `pass:P` holds it.
_POINTER_VALUE = re.compile(r"^(?:env|file|fd):\S+\Z|^stdin\Z")
_PASS_VALUE = re.compile(r"^(?P<scheme>pass):(?P<value>.+)\Z", re.S)
# Shell punctuation that ends a word in a shell string: kept after the ***.
_SHELL_TAIL = re.compile(r"[;&|)]+$")
_SHELL_OPERATORS = frozenset({"&&", "||", "|", ";", "&", ">", ">>", "<", "2>", "2>&1", "(", ")"})
# One-letter options that are passwords for these programs, with whether the password may be the
# next argument (`sshpass -p PW`; not `mysql -p db`, which asks for the password, `db` being the
# database) and whether it may be joined to the option (`mysql -pPW`; not `openssl -key FILE`,
# whose `-k PW` is a password). `login` is `docker login`, `az login`...
_SHORT_PASSWORD: dict[str, tuple[frozenset[str], bool, bool]] = {
    **{p: (frozenset({"-p"}), False, True) for p in (
        "mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlshow", "mysqlcheck", "mysqlpump", "mysqlsh",
        "mysqlslap", "mariadb", "mariadb-dump", "mariadb-admin", "mariadb-import", "mariadb-check", "7z",
        "7za", "7zr", "rar", "unrar")},
    **{p: (frozenset({"-p"}), True, True) for p in (
        "sshpass", "mongo", "mongosh", "mongodump", "mongorestore", "mongoexport", "mongoimport",
        "mongostat", "mongotop", "mongofiles", "login")},
    **{p: (frozenset({"-P"}), True, True) for p in (
        "sqlcmd", "bcp", "osql", "isql", "zip", "unzip", "zipcloak", "mosquitto_pub", "mosquitto_sub",
        "mosquitto_rr")},
    **{p: (frozenset({"-w"}), True, True) for p in (
        "ldapsearch", "ldapadd", "ldapmodify", "ldapdelete", "ldapwhoami", "ldappasswd", "ldapcompare",
        "ldapmodrdn", "ldapexop")},
    "redis-cli": (frozenset({"-a"}), True, True),
    "openssl": (frozenset({"-k"}), True, False),
    "gh secret": (frozenset({"-b", "--body"}), True, True),  # `gh secret set NAME --body V`
}
# Programs whose `login` subcommand takes `-p PASSWORD` (elsewhere their `-p` is a port).
_LOGIN_PROGRAMS = frozenset({"docker", "podman", "nerdctl", "buildah", "skopeo", "helm", "oras", "crane",
                             "regctl", "az", "cf", "registry"})
# the programs whose words change what follows (above, and `gh secret`, `nmcli ... password V`)
_TRACKED_PROGRAMS = frozenset(_SHORT_PASSWORD) | _LOGIN_PROGRAMS | {"gh", "nmcli"}
_QUOTES = ("'", "\"")
# `aws configure set aws_secret_access_key V`, `git config user.password V`, `npm config set
# //h/:_authToken V`, `nmcli ... password V`: a secret's name as a positional word, its value next.
_SETTERS = frozenset({"set", "config", "configure", "--global", "--local", "--system", "--add"})
# Credentials whose form gives them away wherever they are (a positional argument, a URL's path,
# an unnamed header): cloud and forge tokens, JSON Web Tokens, Stripe and Google keys.
_KNOWN_TOKEN = re.compile(
    # (the class of first letters up front lets the engine pass over most positions at once)
    r"(?=[AghxsrhenyS])(?<![A-Za-z0-9])(?:"
    r"(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA|ASCA)[A-Z0-9]{16}(?![A-Za-z0-9])"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|xox[abposrce]-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,}"
    r"|sk-ant-[A-Za-z0-9_-]{16,}|sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{16,}"
    r"|sk-(?=[A-Za-z]{0,64}[0-9])[A-Za-z0-9]{16,}(?![A-Za-z0-9-])"
    r"|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{8,}|hf_[A-Za-z0-9]{20,}|AIza[0-9A-Za-z_-]{30,}"
    r"|eyJ[A-Za-z0-9_-]{6,}\.eyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]*"
    r"|npm_[A-Za-z0-9]{30,}|SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}|ya29\.[0-9A-Za-z_-]{20,}"
    r"|hooks\.slack\.com/services/(?!\*)[A-Za-z0-9/]+"
    r")")
_SLACK_HOOK = "hooks.slack.com/services/"
_PEM = re.compile(
    r"(?P<begin>-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----)(?P<body>.+?)(?P<end>-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----|\Z)",
    re.S)
# At most this many places in one text are tried as the start of a JSON document (a text of
# many `[` must not cost a parse from each).
_JSON_TRIES = 32
_JSON_START = re.compile(r"[\[{]\s*[\"{\[\]}]")


class _Raw(str):
    """A JSON number or constant, kept as it was written."""


class _Obj(list):
    """A JSON object as its (key, value) pairs, duplicate keys kept: the walk must see each one."""


def _json_walk(node: Any, hide: bool, changed: list[bool], depth: int) -> Any:
    """``node`` with the values under secret keys (and of name/value pairs naming a secret)
    hidden, and the other strings redacted as text. ``hide``: everything under ``node`` is a
    secret's (a secret key's nested object)."""
    if depth > 64:  # deeper than any real configuration: hidden whole rather than walked
        changed[0] = True
        return MASK
    if isinstance(node, _Obj):
        # a name/value pair (`{"name": "api_key", "value": V}`, Kubernetes' env, AWS's
        # `{"Key": K, "Value": V}`, CloudFormation's `ParameterKey`/`ParameterValue`): a field
        # whose name ends in "name" or "key" holds the name, one ending in "value" the value
        names = [v for k, v in node if _flat(k) in _PAIR_NAMES and isinstance(v, str) and not isinstance(v, _Raw)]
        values = [k for k, _ in node if _is_pair_value(k)]
        pair_secret = bool(values) and any(is_secret_name(v) for v in names)
        out = _Obj()
        for k, v in node:
            if values and isinstance(v, str) and any(v is x for x in names):
                out.append((k, v))  # the pair's name: what the value is, not the value
            elif hide or (pair_secret and _is_pair_value(k)) or is_secret_name(k):
                out.append((k, _json_walk(v, True, changed, depth + 1) if not isinstance(v, str)
                            else _json_secret_string(v, changed)))
            else:
                out.append((k, _json_walk(v, False, changed, depth + 1)))
        return out
    if isinstance(node, list):
        return [_json_walk(v, hide, changed, depth + 1) for v in node]
    if isinstance(node, _Raw):
        if hide and node not in ("true", "false", "null"):
            changed[0] = True
            return MASK
        return node
    if isinstance(node, str):
        if hide:
            return _json_secret_string(node, changed)
        shown = _redact_one(node)
        if shown != node:
            changed[0] = True
        return shown
    return node


# The fields of a name/value pair, spelled without separators or case.
_PAIR_PREFIXES = ("", "parameter", "option", "setting", "variable", "var", "env", "field", "attribute", "property")
_PAIR_NAMES = frozenset(p + w for p in _PAIR_PREFIXES for w in ("name", "key"))
_PAIR_VALUES = frozenset(p + w for p in _PAIR_PREFIXES + ("string", "secret") for w in ("value", "val"))


def _flat(key: str) -> str:
    return "".join(_words(key)).lower()


def _is_pair_value(key: str) -> bool:
    return _flat(key) in _PAIR_VALUES


def _json_secret_string(value: str, changed: list[bool]) -> str:
    """A secret key's string value hidden (an ``Authorization`` value keeps its scheme)."""
    shown = _header_value(value) if value else value
    if shown != value:
        changed[0] = True
    return shown


def _json_dumps(node: Any, item_sep: str, key_sep: str) -> str:
    if isinstance(node, _Obj):
        return "{" + item_sep.join(json.dumps(k, ensure_ascii=False) + key_sep + _json_dumps(v, item_sep, key_sep)
                                   for k, v in node) + "}"
    if isinstance(node, list):
        return "[" + item_sep.join(_json_dumps(v, item_sep, key_sep) for v in node) + "]"
    if isinstance(node, _Raw):
        return str.__str__(node)
    return json.dumps(node, ensure_ascii=False)


def _redact_json(text: str) -> list[tuple[str, bool]]:
    """Every JSON object or array in ``text`` (an argument that is JSON, JSON inside a longer
    argument or command) read as JSON and walked: values under secret keys at any depth,
    whatever their type, and the values of name/value pairs (``{"name": "api_key", "value":
    V}``) are hidden; the document is written again only where something was hidden. Returns
    ``text`` in pieces, each with whether it is a JSON document (walked already)."""
    out: list[tuple[str, bool]] = []
    pos = 0
    tries = 0
    for m in _JSON_START.finditer(text):
        start = m.start()
        if start < pos:
            continue
        tries += 1
        if tries > _JSON_TRIES:
            break
        try:
            node, end = _JSON_PARSER.raw_decode(text, start)
        except (ValueError, RecursionError):
            continue
        if not isinstance(node, (_Obj, list)):
            continue
        changed = [False]
        try:
            walked = _json_walk(node, False, changed, 0)
        except RecursionError:
            continue
        src = text[start:end]
        if changed[0]:
            item_sep = ", " if re.search(r",\s", src) else ","
            key_sep = ": " if re.search(r"\":\s", src) else ":"
            src = _json_dumps(walked, item_sep, key_sep)
        out.append((text[pos:start], False))
        out.append((src, True))
        pos = end
    out.append((text[pos:], False))
    return out


_JSON_PARSER = json.JSONDecoder(object_pairs_hook=_Obj, parse_float=_Raw, parse_int=_Raw, parse_constant=_Raw)


def _mask_params(text: str) -> str:
    """The values of secret parameters (see ``_PARAM_NAME``) hidden."""
    out: list[str] = []
    pos = 0
    for m in _PARAM_NAME.finditer(text):
        if m.start() < pos or not is_secret_name(m.group("name")):
            continue
        vstart = m.end()
        e = _PARAM_END.search(text, vstart)
        vend = e.start() if e else len(text)
        if vend == vstart or text[vstart:vend] == MASK:
            continue
        out.append(text[pos:vstart])
        out.append(MASK)
        pos = vend
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _redact_known(text: str) -> str:
    """Private keys and credentials whose form gives them away, wherever they are."""
    return _KNOWN_TOKEN.sub(_known_token, _redact_pem(text))


def _redact_pem(text: str) -> str:
    """A private key's body hidden, its BEGIN and END lines kept."""
    if "PRIVATE KEY" not in text:
        return text
    return _PEM.sub(lambda m: f"{m.group('begin')}{MASK}{m.group('end')}" if m.group("body") != MASK else m.group(0),
                    text)


def _known_token(m: re.Match[str]) -> str:
    # a webhook's host and path stay (`hooks.slack.com/services/***`): its key is the rest
    return f"{_SLACK_HOOK}{MASK}" if m.group(0).startswith(_SLACK_HOOK) else MASK


def _redact_embedded(text: str) -> str:
    """JSON documents, URL userinfo and parameters, quoted name/value pairs and credentials of a
    known form, anywhere in ``text``."""
    def userinfo(m: re.Match[str]) -> str:
        if m.group("pw") is not None:
            return f"{m.group('scheme')}{m.group('user')}:{MASK}@"
        return f"{m.group('scheme')}{MASK}@" if m.group("user") else m.group(0)

    def userinfo_encoded(m: re.Match[str]) -> str:
        if m.group("pw") is not None:
            return f"{m.group('scheme')}{m.group('user')}%3A{MASK}%40"
        return f"{m.group('scheme')}{MASK}%40" if m.group("user") else m.group(0)

    if ("{" in text or "[" in text) and "\"" in text:
        pieces = _redact_json(text)
        if len(pieces) > 1:
            # name/value pairs found by the patterns below are JSON's business inside a JSON
            # document (`{"Key": "Name", "Value": V}` names the secret in "Key")
            text = "".join(p if is_json else _redact_pairs(p) for p, is_json in pieces)
        else:
            text = _redact_pairs(text)
    else:
        text = _redact_pairs(text)
    if "@" in text:
        text = _URL_USERINFO.sub(userinfo, text)
    if "%40" in text:
        text = _URL_USERINFO_ENCODED.sub(userinfo_encoded, text)
    if "=" in text or "%3" in text:
        text = _mask_params(text)
    return _redact_known(text)


def _redact_pairs(text: str) -> str:
    """``name: "value"``, ``name='value'`` and ``"name": 1234`` pairs outside JSON documents."""
    def pair(m: re.Match[str]) -> str:
        value = m.group("value")
        if is_secret_name(m.group("name")) and value and (shown := _header_value(value)) != value:
            return (f"{m.group('nq')}{m.group('name')}{m.group('nq')}{m.group('br')}{m.group('mid')}"
                    f"{m.group('vq')}{shown}{m.group('vq')}")
        return m.group(0)

    def number(m: re.Match[str]) -> str:
        return f"{m.group('head')}{MASK}" if is_secret_name(m.group("name")) else m.group(0)

    if ("=" in text or ":" in text) and ("\"" in text or "'" in text):
        text = _QUOTED_PAIR.sub(pair, text)
        if ":" in text:
            text = _QUOTED_NUMBER.sub(number, text)
    return text


_HEADER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def _is_secret_header(name: str) -> bool:
    if not _HEADER_NAME.fullmatch(name):
        return False  # `?token=pass:` is no header's name
    return name.lower() in ("authorization", "proxy-authorization", "cookie", "set-cookie") or is_secret_name(name)


def _header_value(value: str) -> str:
    """A header's value hidden, its scheme kept: ``Bearer ***``."""
    scheme, space, rest = value.partition(" ")
    if space and rest.strip() and scheme.lower() in _AUTH_SCHEMES:
        return f"{scheme} {MASK}"
    return MASK


def _is_value(word: str) -> bool:
    """Whether ``word`` can be a secret option's value: anything that does not read as the next
    option (``-p``, ``--model``); a negative number or a random-looking ``-Xy9`` is a value."""
    return bool(word) and not _OPTION_LIKE.match(word)


def _user_value(value: str) -> str | None:
    """``user:password`` of curl's ``-u`` with what is secret hidden (``user:***``; ``***:``
    where the user is itself the key, as Stripe's ``-u sk_test_X:``), or None when nothing is
    (no colon, a uid:gid)."""
    if "://" in value:
        return None  # a URL (`redis-cli -u redis://:pw@h`): its own rules hide its password
    user, colon, pw = value.partition(":")
    if not colon or (user.isdigit() and pw.isdigit()) or not (user or pw):
        return None
    if not pw:
        return value if user == MASK else f"{MASK}:"
    return value if pw == MASK else f"{user}:{MASK}"  # (already hidden: kept, so that it stays so)


def _header_pending(text: str) -> str:
    """"name" when ``text`` is a secret header's name and colon alone (its value is the next
    word), "scheme" when it is that and an auth scheme (``Authorization: Bearer``), else ""."""
    m = _HEADER.match(text)
    if m and _is_secret_header(m.group("name")) and m.group("value").lower() in _AUTH_SCHEMES:
        return "scheme"
    if text.endswith(":") and len(text) > 1 and _is_secret_header(text[:-1]):
        return "name"
    return ""


def _opening_quote(word: str) -> tuple[str, str]:
    """A shell word that opens a quote it does not close (`"Authorization:`), without the quote,
    and the quote; else the word and ""."""
    q = word[:1]
    if q in ("'", "\"") and not (len(word) > 1 and word.endswith(q)):
        return word[1:], q
    return word, ""


def _program(word: str) -> str:
    return word[word.rfind("/") + 1:].lower()


def _redact_words(words: Sequence[str], shell: bool = False) -> list[str | None]:
    """``words`` with secrets hidden, one entry per word; ``None`` for a word that joined the
    ``***`` before it (the rest of a quoted value in a shell string). ``shell``: the words come
    from one string that holds a shell command, so quotes and ``;`` mean what a shell makes of
    them."""
    out: list[str | None] = []
    n = len(words)
    prog = ""  # the program whose one-letter password options apply (_SHORT_PASSWORD)

    def hide_value(i: int, value: str, prefix: str = "", opened: str = "") -> int:
        """Hide the value starting at words[i] (``value`` is its text): returns the next index.
        ``opened``: the quote that a word before opened (`-H "Authorization: Bearer T"`), which
        the value runs to and which stays after the ``***``."""
        tail = ""
        end = i + 1
        if shell and value.lower() in _AUTH_SCHEMES and end < n and _is_value(words[end]) \
                and words[end] not in _SHELL_OPERATORS and not value.endswith(opened or "\0"):
            # `--auth-header Bearer T`, also a stored command whose "Bearer T" lost its quotes
            out.append(f"{prefix}{value}")
            return hide_value(end, words[end], opened=opened)
        if shell:
            q = opened or value[:1]
            closed = value.rstrip(";&|)").endswith(q) and (bool(opened) or len(value.rstrip(";&|)")) > 1)
            if q in ("'", "\"") and not closed:
                # a quoted value with spaces in it: hide up to the word that closes the quote
                for j in range(i + 1, n):
                    if words[j].rstrip(";&|)").endswith(q):
                        end = j + 1
                        break
            m = _SHELL_TAIL.search(words[end - 1])
            tail = m.group(0) if m else ""
            if opened and words[end - 1][:len(words[end - 1]) - len(tail)].endswith(opened):
                tail = opened + tail
        bare = value[:len(value) - len(tail)] if tail else value
        if end == i + 1 and _POINTER_VALUE.match(bare):
            out.append(f"{prefix}{value}")  # `-passin env:VAR`: where the secret is, not the secret
            return end
        pm = _PASS_VALUE.match(bare) if end == i + 1 else None
        if pm:
            out.append(f"{prefix}{pm.group('scheme')}:{MASK}{tail}")  # openssl's `-pass pass:***`
            return end
        shown = _header_value(value) if not shell and " " in value else MASK  # "Bearer ***"
        out.append(f"{prefix}{shown}{tail}")
        out.extend([None] * (end - i - 1))
        return end

    i = 0
    pending = ""  # "name": the words before were a secret header's name (`-H Authorization:`),
    # "scheme": its name and scheme (`--header=Authorization: Bearer`); the next word is its value
    opened = ""  # the quote the header's first word opened (`-H "Authorization: Bearer T"`)
    while i < n:
        word = words[i]
        if pending and word and word not in _SHELL_OPERATORS:
            if pending == "name" and word.lower() in _AUTH_SCHEMES and i + 1 < n and not (opened and word.endswith(opened)):
                out.append(word)
                pending = "scheme"
                i += 1
                continue
            pending = ""
            i = hide_value(i, word, opened=opened)
            continue
        pending = ""
        if word in _SHELL_OPERATORS or (shell and word.endswith((";", "&&", "||", "|"))):
            prog = ""  # the next command's program is its own
        else:
            base = _program(word)
            if base in _TRACKED_PROGRAMS:
                prog = base
            elif word == "login" and prog in _LOGIN_PROGRAMS:
                prog = "login"
            elif word == "secret" and prog == "gh":
                prog = "gh secret"
        if prog in _SHORT_PASSWORD:
            opts, separate, joined = _SHORT_PASSWORD[prog]
            hit = next((o for o in opts if word == o), None)
            if hit and separate and i + 1 < n and words[i + 1] not in _SHELL_OPERATORS:
                out.append(word)  # `sshpass -p PW`, `docker login -p PW`
                i = hide_value(i + 1, words[i + 1])
                prog = ""  # one password each: `sshpass -p PW ssh -p 2222` is ssh's port
                continue
            hit = next((o for o in opts if word.startswith(o) and len(word) > len(o)
                        and (word[len(o)] == "=" or (joined and len(o) == 2))), None)
            if hit:
                sep = "=" if word[len(hit)] == "=" else ""
                m = _SHELL_TAIL.search(word) if shell else None
                out.append(f"{hit}{sep}{MASK}{m.group(0) if m else ''}")  # `mysql -pPW`, `7z -pPW`
                i += 1
                prog = ""
                continue
        if (i and (words[i - 1].lower() in _SETTERS or (prog == "nmcli" and not word.startswith("-")))
                and not word.startswith("-") and "=" not in word and i + 1 < n and is_secret_name(word)
                and _is_value(words[i + 1]) and words[i + 1] not in _SHELL_OPERATORS):
            # `aws configure set aws_secret_access_key V`, `git config user.password V`,
            # `nmcli dev wifi connect SSID password V`
            out.append(word)
            i = hide_value(i + 1, words[i + 1])
            continue
        hw, opened = _opening_quote(word) if shell and word[:1] in _QUOTES else (word, "")
        if hw.endswith(":") and len(hw) > 1 and _is_secret_header(hw[:-1]):
            # a header split into words: "Authorization:" "Bearer" "T"
            out.append(word)
            pending = "name"
            i += 1
            continue
        if word[:2] in _USER_OPTIONS and len(word) > 2 and (shown := _user_value(word[2:])) is not None:
            out.append(f"{word[:2]}{shown}")  # `curl -uuser:PW`
            i += 1
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
            if value is None and word in _USER_OPTIONS and i < n \
                    and (shown := _user_value(words[i])) is not None:
                out.append(word)
                out.append(shown)  # `curl -u user:***`, `-u ***:` (Stripe's key as the user)
                i += 1
                continue
            if value is not None:
                # `--env=HF_TOKEN=T`, `--user=u:p`, `--header=Authorization: Bearer T`
                inner = _redact_words([value], shell)[0] or MASK
                if name in _USER_OPTIONS and (shown := _user_value(value)) is not None:
                    inner = shown
                out.append(f"{name}={inner}")
                hv, opened = _opening_quote(value) if shell else (value, "")
                pending = _header_pending(hv)  # `--header=Authorization:` `Bearer` `T`
            else:
                out.append(word)
            continue
        assign = _ASSIGN.match(word)
        if assign and is_secret_name(assign.group("name")):
            value = assign.group("value")
            head, space, rest = value.partition(" ")
            if space and head.lower() in _AUTH_SCHEMES and rest.strip():
                # `Authorization=Bearer T ...`: the scheme stays, the credential is the next word
                token, space2, rest = rest.lstrip().partition(" ")
                out.append(f"{assign.group('name')}={head} {MASK}" + (f" {_redact_text(rest)}" if space2 else ""))
                i += 1
            elif space:
                # `sh -c "HF_TOKEN=T vllm serve ..."` as one argument: the value ends at the
                # first space, the rest is a command
                out.append(f"{assign.group('name')}={MASK} {_redact_text(rest if shell else _redact_embedded(rest))}")
                i += 1
            elif value:
                i = hide_value(i, value, prefix=f"{assign.group('name')}=")
            else:
                out.append(word)  # `HF_TOKEN=`: nothing to hide
                i += 1
            continue
        header = _HEADER.match(hw)
        if header and hw != word and _is_secret_header(header.group("name")) and _header_pending(hw):
            pending = _header_pending(hw)  # `"Authorization:Bearer` `T"`
            out.append(word)
            i += 1
            continue
        header = _HEADER.match(word)
        if header and _is_secret_header(header.group("name")):
            pending = _header_pending(word)
            if pending:  # `Authorization:Bearer` `T`: the scheme stays, the next word is hidden
                out.append(word)
            else:
                out.append(f"{header.group('name')}{header.group('sep')}{_header_value(header.group('value'))}")
            i += 1
            continue
        out.append(word if shell else _redact_one(word, scanned=True))
        i += 1
    return out


def _redact_one(arg: str, scanned: bool = False) -> str:
    """One argument: JSON, URL parts, quoted pairs and known credentials, and, when it holds a
    whole command (``bash -c "..."``), the rules applied to its words. ``scanned``:
    :func:`_redact_embedded` went through it already."""
    if not scanned:
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
    # Each argument's embedded secrets first (JSON, URLs, known credentials), as a command's
    # text has them before its words are read: the list and its joined text redact alike.
    return [w for w in _redact_words([_redact_embedded(str(a)) for a in argv]) if w is not None]


def redact_command(command: str | Sequence[str] | None) -> str | None:
    """A command line (a string, or the argument list joined with spaces) with every secret
    value replaced by ``***``; None stays None."""
    if command is None:
        return None
    if isinstance(command, str):
        return _redact_string_command(command) if command else command
    # (a private key split over several arguments is one once they are joined)
    return _redact_pem(" ".join(redact_argv(command)))


@functools.lru_cache(maxsize=1 << 15)
def _redact_string_command(command: str) -> str:
    # Listing 10,000 runs redacts 10,000 commands in the read layer and again in the renderer
    # (~25 us each: bench/bench_runs10k.py), and the TUI lists them every refresh: a text once
    # redacted is not redacted again in this process (the result depends on the text alone).
    return _redact_text(_redact_embedded(command))


def redact_environment(names: Iterable[str]) -> list[str]:
    """Environment variable *names* that may be recorded: never values, never secret names."""
    return sorted(n for n in names if not is_secret_name(n))
