"""Shell completion for the command line, drawn from its own parser.

``otel-compaction completion bash`` prints a script that completes the commands, their actions,
their options and the options' choices; options that take a path complete file names. It is
made from the argparse parser every time, so it never lags behind the commands. zsh reads the
same script through ``bashcompinit``.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Final

__all__ = ["SHELLS", "script"]

SHELLS: Final = ("bash", "zsh")
"""The shells a script is printed for."""

_PATH_METAVARS: Final = frozenset({"FILE", "PATH", "DIR", "NAME|FILE"})
"""Values completed as file names."""


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _table(
    parser: argparse.ArgumentParser, path: str, rows: list[tuple[str, str, str, str, str]]
) -> None:
    """One row per command path: its subcommands, its words (subcommands, positional choices,
    options), the options that take a value with their choices, and those that take a path."""
    children = _subcommands(parser)
    options: list[str] = []
    valued: list[str] = []
    paths: list[str] = []
    for action in parser._actions:
        if not action.option_strings:
            if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
                options.extend(map(str, action.choices))  # a positional's choices
            continue
        options.extend(s for s in action.option_strings if s.startswith("--"))
        if action.nargs == 0:
            continue
        for option in action.option_strings:
            if action.choices is not None:
                valued.append(f"{option}={'|'.join(map(str, action.choices))}")
            elif str(action.metavar or "").upper() in _PATH_METAVARS:
                paths.append(option)
    words = " ".join([*children, *options])
    rows.append((path, " ".join(children), words, " ".join(valued), " ".join(paths)))
    for name, child in children.items():
        _table(child, f"{path}/{name}" if path else name, rows)


def script(parser: argparse.ArgumentParser, shell: str = "bash") -> str:
    """The completion script of `parser`'s program for `shell` (``bash`` or ``zsh``)."""
    if shell not in SHELLS:
        raise ValueError(f"no completion for {shell!r}: one of {', '.join(SHELLS)}")
    rows: list[tuple[str, str, str, str, str]] = []
    _table(parser, "", rows)
    program = parser.prog
    function = "_" + "".join(c if c.isalnum() else "_" for c in program)
    cases = "\n".join(
        f"        {shlex.quote(path or '-')}) children={shlex.quote(children)}; "
        f"words={shlex.quote(words)}; valued={shlex.quote(valued)}; paths={shlex.quote(paths)} ;;"
        for path, children, words, valued, paths in rows
    )
    head = "autoload -U +X bashcompinit && bashcompinit\n" if shell == "zsh" else ""
    return f"""{head}# {program} completion ({shell}): eval "$({program} completion {shell})"
{function}() {{
    local cur prev path="" word i children words valued paths choice
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        [[ "$word" == -* ]] && continue
        if {function}_has "${{path:--}}" "$word"; then path="${{path:+$path/}}$word"; fi
    done
    {function}_row "${{path:--}}"
    for choice in $valued; do
        if [[ "${{choice%%=*}}" == "$prev" ]]; then
            COMPREPLY=($(compgen -W "$(tr '|' ' ' <<<"${{choice#*=}}")" -- "$cur"))
            return
        fi
    done
    for choice in $paths; do
        if [[ "$choice" == "$prev" ]]; then
            COMPREPLY=($(compgen -f -- "$cur"))
            return
        fi
    done
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
{function}_row() {{
    case "$1" in
{cases}
        *) children=""; words=""; valued=""; paths="" ;;
    esac
}}
{function}_has() {{
    local children words valued paths candidate
    {function}_row "$1"
    for candidate in $children; do
        [[ "$candidate" == "$2" ]] && return 0
    done
    return 1
}}
complete -o default -F {function} {program}
"""
