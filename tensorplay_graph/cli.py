"""The ``tpgraph`` command.

    tpgraph print model.py:forward --input 4x8:float32 [--input 8:int64] [--framework torch]
    tpgraph show  model.py:forward --input 4x8 -o graph.svg
    tpgraph explain model.py:forward --input 4x8 [--backend triton] [-o DIR]

``FILE.py:FN`` names a function, an ``nn.Module`` instance, or a module class
(instantiated without arguments) defined in FILE. Each ``--input`` is
``SHAPE[:DTYPE]`` with SHAPE like ``4x8`` (or ``scalar``); random inputs of
those shapes are built for the chosen framework and the program is captured.

Subcommands live in :data:`COMMANDS`; a new one is one :class:`Command` entry
(a function adding its arguments and a function running it).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from .errors import TensorPlayGraphError
from .frameworks import adapter_for, registered
from .ir.meta import ALL_DTYPES, INTEGER_DTYPES


class CliError(Exception):
    """A user error on the command line; printed without a traceback."""


@dataclass(frozen=True)
class Command:
    """One subcommand: ``configure(parser)`` adds arguments; ``run(args) -> exit code``."""

    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# -- program loading -------------------------------------------------------------
def parse_target(spec: str) -> Tuple[str, str]:
    """Split ``FILE.py:FN`` into (path, attribute); the last ``:`` separates them."""
    path, sep, attr = spec.rpartition(":")
    if not sep or not path or not attr:
        raise CliError(f"bad target {spec!r}: expected FILE.py:FN, e.g. model.py:forward")
    if not os.path.isfile(path):
        raise CliError(f"bad target {spec!r}: file {path!r} does not exist")
    if not all(part.isidentifier() for part in attr.split(".")):
        raise CliError(f"bad target {spec!r}: {attr!r} is not a Python name")
    return path, attr


def load_program(spec: str) -> Any:
    """Import FILE and return FN from it (a module class is instantiated with no arguments)."""
    path, attr = parse_target(spec)
    directory = os.path.dirname(os.path.abspath(path))
    if directory not in sys.path:  # so FILE can import its neighbours
        sys.path.insert(0, directory)
    module_name = "_tpgraph_user_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec_obj = importlib.util.spec_from_file_location(module_name, path)
    if spec_obj is None or spec_obj.loader is None:
        raise CliError(f"cannot import {path!r} as Python source")
    module = importlib.util.module_from_spec(spec_obj)
    sys.modules[module_name] = module
    spec_obj.loader.exec_module(module)
    value: Any = module
    for part in attr.split("."):
        if not hasattr(value, part):
            names = sorted(n for n in vars(module) if not n.startswith("_"))
            raise CliError(f"{path} has no attribute {attr!r}; defined there: {', '.join(names)}")
        value = getattr(value, part)
    if isinstance(value, type):
        value = value()
    if not callable(value):
        raise CliError(f"{spec}: {attr} is a {type(value).__name__}, not a function or module")
    return value


def parse_input_spec(spec: str) -> Tuple[Tuple[int, ...], str]:
    """``"4x8:float32"`` -> ``((4, 8), "float32")``; the dtype defaults to float32."""
    shape_text, _, dtype = spec.partition(":")
    dtype = dtype or "float32"
    if dtype not in ALL_DTYPES:
        raise CliError(f"bad --input {spec!r}: unknown dtype {dtype!r}; "
                       f"use one of {', '.join(sorted(ALL_DTYPES))}")
    if shape_text in ("scalar", "()"):
        return (), dtype
    try:
        shape = tuple(int(d) for d in shape_text.replace(",", "x").split("x"))
    except ValueError:
        raise CliError(f"bad --input {spec!r}: shape must look like 4x8 (or 'scalar'), "
                       "e.g. --input 4x8:float32") from None
    if any(d < 0 for d in shape):
        raise CliError(f"bad --input {spec!r}: dimensions must be >= 0")
    return shape, dtype


def make_input(shape: Tuple[int, ...], dtype: str, framework: str, seed: int) -> Any:
    """A random tensor of ``framework`` (normal floats, small ints, random bools)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        data = rng.integers(0, 2, size=shape).astype(np.bool_)
    elif dtype in INTEGER_DTYPES:
        data = rng.integers(0, 10, size=shape).astype(dtype)
    else:
        data = rng.standard_normal(size=shape).astype(np.float32)
        if dtype.startswith("complex"):
            data = data.astype(dtype)
    adapter = adapter_for(framework)
    return adapter.from_numpy(np.ascontiguousarray(data)).to(adapter.dtype(dtype))


def program_from_args(args: argparse.Namespace) -> Tuple[Any, list]:
    """The program named on the command line and random inputs for it."""
    specs = [parse_input_spec(s) for s in args.input]
    program = load_program(args.target)
    inputs = [make_input(shape, dtype, args.framework, seed)
              for seed, (shape, dtype) in enumerate(specs)]
    return program, inputs


def capture_from_args(args: argparse.Namespace) -> Any:
    """Load the program named on the command line and capture it on random inputs."""
    from .capture import capture
    program, inputs = program_from_args(args)
    return capture(program, *inputs)


def _add_program_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="FILE.py:FN", help="the function or module to capture")
    parser.add_argument("--input", action="append", default=[], metavar="SHAPE[:DTYPE]",
                        help="one example input, e.g. 4x8:float32 (repeat per argument)")
    parser.add_argument("--framework", choices=registered(), default="tensorplay",
                        help="tensor library of the random inputs (default: tensorplay)")


# -- subcommands -----------------------------------------------------------------
def _run_print(args: argparse.Namespace) -> int:
    gm = capture_from_args(args)
    sys.stdout.write(f"{gm.graph}\n\n{gm.print_readable(print_output=False)}")
    return 0


def _configure_show(parser: argparse.ArgumentParser) -> None:
    _add_program_arguments(parser)
    parser.add_argument("-o", "--output", default="graph.svg",
                        help="file to write; the suffix picks the format (default graph.svg)")


def _run_show(args: argparse.Namespace) -> int:
    from .drawing import render
    gm = capture_from_args(args)
    render(gm, path=args.output)
    sys.stdout.write(f"wrote {args.output}\n")
    return 0


def _configure_explain(parser: argparse.ArgumentParser) -> None:
    _add_program_arguments(parser)
    parser.add_argument("--backend", action="append", default=None, metavar="NAME",
                        help="backend to plan for, in preference order (repeatable; "
                             "default: every known backend)")
    parser.add_argument("-o", "--output", default=None, metavar="DIR",
                        help="directory for the drawing of every stage (NN_<pass>.dot/.svg) "
                             "and the final plan (explain.svg)")


def _run_explain(args: argparse.Namespace) -> int:
    from .explanation import explain
    program, inputs = program_from_args(args)
    report = explain(program, *inputs, backend=args.backend, debug_dir=args.output)
    sys.stdout.write(f"{report}\n")
    if args.output:
        path = os.path.join(args.output, "explain.svg")
        report.render(path=path)
        sys.stdout.write(f"\nwrote the stages and {path}\n")
    return 0


def _configure_cache(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("info", "clear"),
                        help="info: where kernels are cached and how much; clear: delete them")


def cache_dirs() -> list:
    """Every directory tensorplay_graph writes compiled kernels to (existing or not)."""
    from .backends.source_files import cache_root
    from .backends.tilelang.cache import cache_dir as tilelang_dir
    return sorted({cache_root(), tilelang_dir()})


def _run_cache(args: argparse.Namespace) -> int:
    import shutil
    for directory in cache_dirs():
        files = [p for p in directory.rglob("*") if p.is_file()] if directory.is_dir() else []
        size = sum(p.stat().st_size for p in files)
        if args.action == "clear" and directory.is_dir():
            shutil.rmtree(directory)
            sys.stdout.write(f"removed {directory} ({len(files)} files, {size / 1e6:.1f} MB)\n")
        elif args.action == "info":
            sys.stdout.write(f"{directory}: {len(files)} files, {size / 1e6:.1f} MB\n")
    return 0


COMMANDS: Dict[str, Command] = {
    "print": Command("print the captured graph as a table and its generated code",
                     _add_program_arguments, _run_print),
    "show": Command("draw the captured graph with graphviz", _configure_show, _run_show),
    "explain": Command("plan the program: regions per backend, barriers and why; "
                       "draw every stage", _configure_explain, _run_explain),
    "cache": Command("show or clear the kernel caches (honours TPG_CACHE_DIR, XDG_CACHE_HOME)",
                     _configure_cache, _run_cache),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tpgraph", description="Capture and inspect "
                                     "TensorPlay / PyTorch programs as tensorplay_graph graphs.")
    from . import __version__
    parser.add_argument("--version", action="version", version=f"tpgraph {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, command in COMMANDS.items():
        sub = subparsers.add_parser(name, help=command.help, description=command.help)
        command.configure(sub)
        sub.set_defaults(run=command.run)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``tpgraph``; returns the exit code (2 for usage errors)."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        return args.run(args)
    except CliError as exc:
        sys.stderr.write(f"tpgraph {args.command}: error: {exc}\n")
        return 2
    except TensorPlayGraphError as exc:  # capture/render problems: the message says the fix
        sys.stderr.write(f"tpgraph {args.command}: {type(exc).__name__}: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
