"""The footer's keys fitted to the terminal's width, so that ``q quit`` and ``? help`` are always
on it (at 80 columns the run screen's keys ran past the edge and cut ``q quit`` off).

Textual's :class:`~textual.widgets.Footer` draws every shown binding from left to right and
cuts what passes the right edge. :func:`fit_footer` works on the bindings the footer reads
(``Screen.active_bindings``): the app's keys go last, and when the entries are wider than the
screen, some are hidden (``show=False``; the keys still work, and ``?`` lists them all) in this
order until they fit: ``shift+tab`` with ``tab``, Textual's command palette key, then the
screen's own keys from its last to its first, except families (keys of one action with
different arguments: the run screen's ``o k r n t a`` sections). When hiding all those would
not be enough, each family is drawn as one entry first (``o k r n t a section``), then the
other keys give way, then the families. ``?`` and ``q`` are never hidden.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from textual.binding import ActiveBinding
    from textual.screen import Screen

#: Actions whose keys always stay on the footer.
KEPT = ("help", "quit")
#: Actions whose keys give way first, in this order (before the screen's own keys); the
#: actions of one group go together (Tab and Shift+Tab are shown both or neither).
FIRST_TO_GO = (("focus_previous", "next_screen"), ("command_palette",))


def entry_width(key_display: str, description: str, compact: bool) -> int:
    """Columns one footer key takes, as Textual's footer styles it: the key padded by one
    column each side and the description followed by one (``Footer()``), or the key, a space,
    the description and a one-column margin (``Footer(compact=True)``)."""
    if not description:
        return len(key_display) + (1 if compact else 2)
    return len(key_display) + len(description) + (2 if compact else 3)


def palette_width(key_display: str, description: str, compact: bool) -> int:
    """Columns of the command palette's key, docked right: its left border, the key, a space,
    the description and (not compact) one column of padding."""
    return 1 + len(key_display) + 1 + len(description) + (0 if compact else 1)


def _action(ab: ActiveBinding) -> str:
    return ab.binding.action.removeprefix("app.").removeprefix("screen.")


def _family(action: str) -> str:
    """An action's name without its arguments: ``section('ops')`` -> ``section``."""
    return action.split("(", 1)[0].removeprefix("app.").removeprefix("screen.")


def shown_keys(bindings: dict[str, ActiveBinding]) -> tuple[tuple[str, bool], ...]:
    """What the footer draws from ``bindings``: each key and whether it is shown (the palette's
    key is drawn when present at all); a resize redraws the footer when this changes."""
    return tuple((k, ab.binding.show) for k, ab in bindings.items())


def fit_footer(screen: Screen[Any], bindings: dict[str, ActiveBinding]) -> dict[str, ActiveBinding]:
    """``bindings`` (a screen's active bindings) with the app's keys last and the footer entries
    that do not fit the screen's width hidden (see the module's docstring). Unchanged when the
    screen has no footer."""
    from textual.widgets import Footer

    footers = list(screen.query(Footer))
    width = screen.size.width
    if not footers or width <= 0:
        return bindings
    footer = footers[0]
    app = screen.app
    # the app's keys after the screen's (the footer draws them in this order): ? and q at the end
    items = sorted(bindings.items(), key=lambda kv: kv[1].node is app)
    out = dict(items)

    def display(ab: ActiveBinding) -> str:
        return app.get_key_display(ab.binding)

    # one entry per action, as the footer draws them (its first binding's key)
    entries: dict[str, tuple[str, int]] = {}
    for key, ab in items:
        if ab.binding.show and ab.binding.action not in entries:
            entries[ab.binding.action] = (key, entry_width(display(ab), ab.binding.description, footer.compact))
    palette_key = app.COMMAND_PALETTE_BINDING
    palette = None
    if footer.show_command_palette and app.ENABLE_COMMAND_PALETTE and palette_key in out:
        ab = out[palette_key]
        palette = palette_width(display(ab), ab.binding.description, footer.compact)

    def used() -> int:
        return sum(w for _, w in entries.values()) + (palette or 0)

    def named(name: str) -> list[str]:
        return [a for a in entries if _action(out[entries[a][0]]) == name]

    def hide(action: str) -> None:
        entries.pop(action, None)
        for k, ab in list(out.items()):
            if ab.binding.action == action:
                out[k] = ab._replace(binding=dataclasses.replace(ab.binding, show=False))

    # the first steps, in order (None: the palette's key)
    for names in FIRST_TO_GO:
        if used() <= width:
            return out
        for action in [a for name in names for a in (named(name) if name != "command_palette" else [None])]:
            if action is None:
                if palette is not None:
                    del out[palette_key]  # the footer draws the palette's key whatever its `show`
                    palette = None
            else:
                hide(action)
    # then the screen's own keys from its last, those of a family (one action, several
    # arguments: the run screen's sections) after the others
    own = [a for a in entries if _action(out[entries[a][0]]) not in KEPT]
    families: dict[str, list[str]] = {}
    for a in own:
        families.setdefault(_family(a), []).append(a)
    merged: dict[str, tuple[str, str]] = {}  # family -> (its keys, its name) as one entry
    for name, members in families.items():
        if len(members) > 1:
            descriptions = {out[entries[a][0]].binding.description for a in members}
            merged[name] = (" ".join(display(out[entries[a][0]]) for a in members),
                            descriptions.pop() if len(descriptions) == 1 else name.replace("_", " "))
    singles = [a for a in own if _family(a) not in merged]
    if used() - sum(entries[a][1] for a in singles) <= width:
        # hiding some of the screen's other keys is enough: the families keep their names
        for a in reversed(singles):
            if used() <= width:
                return out
            hide(a)
    # else each family becomes one entry, its keys and its name (``o k r n t a section``);
    # then the other keys give way from the last, then the families
    for name, (keys, label) in merged.items():
        if used() <= width:
            return out
        members = families[name]
        first_key = entries[members[0]][0]
        first = out[first_key]
        for a in members[1:]:
            hide(a)
        out[first_key] = first._replace(binding=dataclasses.replace(first.binding, key_display=keys,
                                                                     description=label))
        entries[members[0]] = (first_key, entry_width(keys, label, footer.compact))
    for a in [*reversed([a for a in entries if a in singles]), *reversed([a for a in entries if a not in singles])]:
        if used() <= width:
            return out
        if _action(out[entries[a][0]]) not in KEPT:
            hide(a)
    return out
