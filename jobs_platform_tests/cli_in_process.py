"""Commands run through their entry function in the test's own process, as a subprocess
would run them but without starting one.

For a test of what a command does — its exit code, what it prints, what it changes — and
not of its being a process: no interpreter start and no second import of Dagster and the
code location (2-3 s a command on this machine). For the command's duration the test's
process takes the command's environment, working directory and `sys.path`, and gets its
own back after; stdout and stderr are captured. A test about the process itself (the
installed entry point, the exit code a shell sees, what a process imports, a stderr of one
line with nothing a fresh interpreter adds) runs the command with `commands.run_cli`.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


def run_in_process(
    main: Callable[[list[str]], int],
    args: Sequence[str],
    env: dict[str, str] | None = None,
    *,
    cwd: Path | str | None = None,
) -> subprocess.CompletedProcess:
    """`main(args)` with `env` added to the environment, in `cwd`: its exit code and output."""
    saved_env, saved_cwd, saved_path = dict(os.environ), os.getcwd(), list(sys.path)
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.update(env or {})
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exit_:  # argparse's refusals, as the process exits
                code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def jobs_platform_in_process(
    args: Sequence[str], env: dict[str, str] | None = None, *, cwd: Path | str | None = None
) -> subprocess.CompletedProcess:
    """`jobs-platform ARGS…` through the CLI's `main` (the console script's function)."""
    from jobs_platform.cli.main import main

    return run_in_process(main, args, env, cwd=cwd)


def bench_in_process(
    args: Sequence[str], env: dict[str, str] | None = None, *, cwd: Path | str | None = None
) -> subprocess.CompletedProcess:
    """`bin/bench ARGS…` (`python -m benchmarks`) through its `main`."""
    from benchmarks.__main__ import main

    return run_in_process(main, args, env, cwd=cwd)
