"""Frozen config dataclasses as command lines: one field, one flag.

A config field declared with ``textkit.settings.flag(default, help, group=...)`` becomes the flag
``--field-name`` (underscores to dashes) in the argument group ``group``; its type comes from
the annotation (``int``, ``float``, ``str``, ``bool``, ``tuple[int, ...]`` as ``1,2,3``, each
optionally ``| None``). A field whose type is itself a config dataclass (``fit: FitConfig``)
adds that dataclass's flags, flat. ``parse_config(Config, argv)`` returns the frozen config;
``--help`` lists the flags by group with their defaults.

This is the only place in ``textkit`` that parses flags (the recipes in ``examples/`` call it).
The commands with hand-written parsers (generate, translate) check their numbers with
``number``: a value out of range is a usage error naming the flag and the range expected.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from textkit.settings import GROUPS, flag

__all__ = ["GROUPS", "HelpFormatter", "Parser", "flag", "number", "parse_config", "parser_for"]

Config = TypeVar("Config")


def number(kind: type, expected: str, accept: Callable[[Any], bool]) -> Callable[[str], Any]:
    """An argparse ``type``: ``kind(text)`` where ``accept`` takes it, else the usage error
    ``argument --flag: expected <expected>, got <text>`` (e.g. ``number(int, "an integer >=
    1", lambda v: v >= 1)``)."""

    def convert(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not accept(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return convert


def _base_type(hint: Any) -> tuple[Any, bool]:
    """``(type, optional)`` of an annotation such as ``int | None``."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(hint))
    return hint, False


def _converter(kind: Any, name: str) -> Callable[[str], Any]:
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        return lambda text: tuple(item(v) for v in text.split(",") if v.strip())
    if kind in (int, float, str):
        return kind
    raise TypeError(f"config field {name!r}: no command-line form for type {kind!r}")


def _fields(config_cls: type) -> list[tuple[dataclasses.Field, Any]]:
    hints = typing.get_type_hints(config_cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(config_cls)]


def _add_flags(groups: dict[str, Any], config_cls: type, defaults: Any) -> None:
    for field, hint in _fields(config_cls):
        default = getattr(defaults, field.name) if defaults is not None else field.default
        if default is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        if dataclasses.is_dataclass(hint):
            _add_flags(groups, hint, default)
            continue
        if "help" not in field.metadata:
            continue   # a field set by the program, not by a flag
        meta = field.metadata
        names = [f"--{field.name.replace('_', '-')}", *meta["aliases"]]
        kind, _ = _base_type(hint)
        options: dict[str, Any] = {"dest": field.name, "help": meta["help"], "default": default}
        if kind is bool:
            options["action"] = argparse.BooleanOptionalAction
        else:
            options["type"] = _converter(kind, field.name)
            if meta["choices"] is not None:
                options["choices"] = meta["choices"]
            if typing.get_origin(kind) is tuple and default is not None:
                options["default"] = ",".join(str(v) for v in default)
        groups[meta["group"]].add_argument(*names, **options)


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line on stderr (the flag, what was
    expected, where to look: ``error: MESSAGE (PROG --help lists the flags)``, as every
    command's other errors begin) and exit status 2, instead of the usage block and the message."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"error: {message} ({self.prog} --help lists the flags)\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` with each flag's default once: ``(default: ...)`` is added after the help
    unless the help already says what the default is (e.g. "default: the dataset's first")."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def parser_for(config_cls: type, description: str = "", *, defaults: Any = None,
               prog: str | None = None) -> argparse.ArgumentParser:
    """The ``ArgumentParser`` of ``config_cls``'s flags, grouped, defaults shown
    (``defaults``: an instance whose values replace the fields' defaults; ``prog``: the
    command's name in the usage line, default the program's)."""
    parser = Parser(prog=prog, description=description, formatter_class=HelpFormatter)
    groups = {name: parser.add_argument_group(name) for name in GROUPS}
    _add_flags(groups, config_cls, defaults)
    return parser


def _build(config_cls: type, values: dict[str, Any], defaults: Any = None) -> Any:
    """``config_cls`` from the parsed ``values``; fields without a flag keep ``defaults``'
    value (the enclosing config's default instance) or their own default."""
    kwargs = {}
    for field, hint in _fields(config_cls):
        if dataclasses.is_dataclass(hint):
            inner = getattr(defaults, field.name) if defaults is not None else field.default
            kwargs[field.name] = _build(hint, values, None if inner is dataclasses.MISSING
                                        else inner)
        elif field.name not in values and defaults is not None:
            kwargs[field.name] = getattr(defaults, field.name)
        elif field.name in values:
            value = values[field.name]
            kind, _ = _base_type(hint)
            if typing.get_origin(kind) is tuple and isinstance(value, str):
                value = _converter(kind, field.name)(value)
            kwargs[field.name] = value
    return config_cls(**kwargs)


def parse_config(config_cls: type[Config], argv: Sequence[str] | None = None,
                 description: str = "", *, defaults: Config | None = None,
                 prog: str | None = None) -> Config:
    """Parse ``argv`` (default ``sys.argv[1:]``) into a frozen ``config_cls``; a value the
    config refuses (its ``__post_init__``, or its ``check_inputs()`` where it has one: the
    files and folders a command line names, raising ``ValueError``) is a usage error."""
    parser = parser_for(config_cls, description, defaults=defaults, prog=prog)
    values = vars(parser.parse_args(argv))
    try:
        config = _build(config_cls, values, defaults)
        if hasattr(config, "check_inputs"):
            config.check_inputs()
        return config
    except ValueError as err:
        parser.error(str(err))
