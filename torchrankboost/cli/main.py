"""The ``torchrankboost`` command's entry point: the parser of every sub-command, the
``list`` command, and how each failure becomes one line on stderr and an exit status (2 for
bad input, 1 for a failed run, 130 for an interrupt, 141 for a closed pipe; on several
processes, one line for the whole run). The commands themselves live beside it (see
:mod:`torchrankboost.cli`).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from .. import __version__
from .._errors import first_line
from ..contract import NumericalError
from ..parallel import DistributedError
from ..parallel.launch import end_process_group, reports_failures, start_process_group, \
    under_launcher
from ..parallel.parent import report_to_parent
from . import bin as bin_command, export, plot, scoring, train
from .config import apply_config
from .inputs import PROG, CLIError
from .train import launch_train

__all__ = ["main", "build_parser", "COMMAND_MODULES"]

#: the modules of the sub-commands: each has ``add_commands(sub)``, which adds its parsers
#: with ``set_defaults(handler=cmd_<name>)``; a new sub-command is a module here (``list`` is
#: this module's own)
COMMAND_MODULES = (train, scoring, export, bin_command, plot)


# ============================================================================ parser
def build_parser() -> argparse.ArgumentParser:
    """The parser of the ``torchrankboost`` command and its sub-commands."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Learning to rank with boosting-family losses in PyTorch.",
        epilog="Run `torchrankboost train` with no arguments for the main job on built-in data.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.add_commands(sub)
    ls = sub.add_parser("list", help="list losses, algorithms, learners, metrics and "
                        "debiasing methods",
                        description="List the available names with a one-line description.")
    ls.set_defaults(handler=cmd_list)
    ls.add_argument("kind", nargs="?", default=None,
                    help="losses, algorithms, learners, metrics or debias (default: all)")
    return parser


# ============================================================================ commands
def _set_threads(n) -> None:
    """torch's intra-op threads for the whole command (``--threads``; default 1)."""
    import torch

    from .._threads import DEFAULT_THREADS, check_threads

    try:
        n = check_threads(n, "--threads")
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    torch.set_num_threads(n if n is not None else DEFAULT_THREADS)


def _one_line_warnings() -> None:
    """A rank's warnings as one line each (``torchrankboost: warning: ...``), without the
    file and source line."""
    import warnings

    def fmt(message, category, filename, lineno, line=None):
        text = str(message)
        text = text[len(PROG) + 2:] if text.startswith(f"{PROG}: ") else text
        return f"{PROG}: warning: {text}\n"

    warnings.formatwarning = fmt


def cmd_list(args) -> int:
    """``list [KIND]``: the registered names of one kind, or of every kind."""
    from .. import registry

    kind = args.kind
    if kind is not None:
        key = kind.strip().lower()
        valid = ("losses", "loss", "algorithms", "algorithm", "learners", "learner",
                 "metrics", "metric", "debias")
        if key not in valid:
            raise CLIError(f"unknown list {kind!r}; valid choices: losses, algorithms, "
                           "learners, metrics, debias")
        kind = key
    print(registry.describe(kind))
    return 0


#: the failures of ranks that make a data-parallel run an input error (status 2)
_INPUT_ERRORS = ("CLIError", "ValueError", "FileNotFoundError", "PermissionError",
                 "IsADirectoryError", "NotADirectoryError", "OSError", "UnicodeDecodeError")


def _distributed_status(exc: DistributedError) -> int:
    """2 when every failing rank had an input error (a bad line in its shard), else 1."""
    kinds = {str(m).split(":", 1)[0] for m in exc.failures.values()}
    return 2 if kinds and kinds <= set(_INPUT_ERRORS) else 1


def _distributed_message(exc: DistributedError) -> str:
    """One line for a failure of a data-parallel run: the same message of several ranks
    once ("ranks 0, 1 failed: CLIError: ...")."""
    msgs = set(exc.failures.values())
    if len(exc.failures) > 1 and len(msgs) == 1:
        ranks = ", ".join(str(r) for r in sorted(exc.failures))
        return f"ranks {ranks} failed: {next(iter(msgs)).splitlines()[0]}"
    return first_line(exc, default='')


def _say(line: str, reporter: Optional[int] = None) -> None:
    """The command's final line on stderr; in a rank of ``--nproc``, handed to the parent
    (which prints one line for every rank); under ``torchrun``, printed by rank
    ``reporter`` only (``None``: by every rank that fails)."""
    if report_to_parent(line):
        return
    if reports_failures(reporter):
        print(line, file=sys.stderr)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``torchrankboost`` console script; returns the exit status."""
    parser = build_parser()
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(raw)
    if args.command is None:
        parser.print_help()
        return 0
    owned = False
    try:
        if args.command == "train" and args.config:  # the file's options under the flags
            apply_config(args, raw, build_parser)
        if args.command == "train" and args.nproc is not None and not under_launcher():
            return launch_train(args, raw)  # input errors here, before any rank starts
        _set_threads(getattr(args, "threads", None))
        if under_launcher():
            _one_line_warnings()
        if args.command == "train":  # under torchrun: this process joins the group
            owned, args.device = start_process_group(args.device, args.timeout)
        status = args.handler(args)
        sys.stdout.flush()  # a reader that left (`| head`) shows up here, not at exit
        return status
    except BrokenPipeError:  # `torchrankboost list | head -2`: no traceback, no message
        try:  # nothing more can reach the reader; keep the interpreter's exit flush quiet
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141  # 128 + SIGPIPE, as a command killed by the closed pipe
    except NumericalError as exc:  # the run failed numerically: status 1, one line
        _say(f"{PROG}: error: {first_line(exc, default='')}")
        return 1
    except DistributedError as exc:  # some rank failed: rank 0 says it, status 1 (2: input)
        _say(f"{PROG}: error: {_distributed_message(exc)}", exc.reporter)
        return _distributed_status(exc)
    except CLIError as exc:
        _say(f"{PROG}: error: {exc}")
        return 2
    except FileNotFoundError as exc:
        _say(f"{PROG}: error: {exc.filename or exc}: file not found"
             if exc.filename else f"{PROG}: error: {exc}")
        return 2
    except ValueError as exc:
        _say(f"{PROG}: error: {first_line(exc, default='') or 'invalid value'}")
        return 2
    except OSError as exc:  # an unwritable folder, a full disk, ...: one line, status 2
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        _say(f"{PROG}: error: {where}{exc.strerror or first_line(exc, default='')}")
        return 2
    except KeyboardInterrupt:
        _say(f"{PROG}: interrupted", 0)
        return 130
    finally:
        if owned:  # the failure's frames (tensors, graphs) go before the process group
            end_process_group()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
