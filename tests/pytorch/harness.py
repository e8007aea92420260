"""What every test script here shares around its cases: the common flags, running qkv, the
pass/fail tally, the summary line and the exit status.

    def main():
        h = harness.start("forward differential", __doc__, flags=add_flags, jobs=2, rng_seed=20240917)
        with h.scratch("qkv-forward-diff-") as tmp:
            for case in cases:
                ...
                h.record(case.name, case.errors, case.cmd)
        return h.finish()       # prints "forward differential: N passed, M failed (T s; qkv's processes
                                # Q s)"; 1 on a failure
                                # or when no case ran at all

    if __name__ == "__main__":
        sys.exit(main())

The common flags: --qkv PATH (required: the executable under test), --verbose / -v, --keep (keep
the scratch directory and say where it is), and, when the script asks for them, --jobs N (qkv
processes at a time) and --rng-seed S (the Python RNG drawing the cases). A --qkv that is not an
executable ends the script at once with status 2. PyTorch runs on one thread, leaving the cores
to qkv's processes.

Running qkv: run_qkv(cmd) gives a Run (returncode, stdout, stderr) whose problem() is None or
"qkv exited with status N: <its stderr>" (a run over the timeout counts as failed); check_qkv(cmd)
gives stdout and raises QkvError, naming the command, when qkv fails; qkv_json(cmd) gives the JSON
object a --json run prints last.

A failed case's report (its label, the command that ran, each error on a line) goes to stderr when
the script finishes, before the summary line; the cases' own lines are the scripts' business.
"""

import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections import namedtuple

import torch


class Run(namedtuple("Run", "returncode stdout stderr")):
    """One qkv process: its exit status and what it printed (decoded)."""

    def problem(self):
        """None when qkv exited with 0, else what went wrong."""
        if self.returncode == 0:
            return None
        err = self.stderr.strip() or "(no output on stderr)"
        return f"qkv exited with status {self.returncode}: {err}"


class QkvError(RuntimeError):
    """A qkv run that failed, with its command."""

    def __init__(self, cmd, problem):
        super().__init__(f"{problem}\n    command: {shlex.join(cmd)}")
        self.cmd = cmd


_qkv_seconds = [0.0]  # wall time of every qkv process this script ran, summed (the summary line's)
_qkv_seconds_lock = threading.Lock()


def run_qkv(cmd, timeout=120, input=None, env=None):
    """Runs one qkv command (with `input`, text, on its standard input; `env`, a dict, added to the
    environment); a run over `timeout` seconds counts as failed (status -1)."""
    t0 = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                           input=None if input is None else input.encode("utf-8"),
                           env=None if env is None else {**os.environ, **env})
        return Run(p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"))
    except subprocess.TimeoutExpired:
        return Run(-1, "", f"timed out after {timeout} s")
    finally:
        with _qkv_seconds_lock:
            _qkv_seconds[0] += time.time() - t0


def check_qkv(cmd, timeout=120):
    """Runs one qkv command and returns its stdout; raises QkvError when it fails."""
    run = run_qkv(cmd, timeout)
    if run.returncode != 0:
        raise QkvError(cmd, run.problem())
    return run.stdout


def qkv_json(cmd, timeout=120):
    """The JSON object on the last line of a qkv command's stdout (for --json runs)."""
    out = check_qkv(cmd, timeout)
    lines = out.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError) as e:
        raise QkvError(cmd, f"qkv printed no JSON line ({e}): {out.strip()[:200]!r}") from None


class Harness:
    """One script's run: its parsed flags, the qkv executable, the tally of its cases."""

    def __init__(self, name, args):
        self.name, self.args = name, args
        self.qkv = os.path.abspath(args.qkv)
        self.verbose = args.verbose
        self.passed = 0
        self.failures = []  # (label, command or None, [errors])
        self.start = time.time()

    @contextlib.contextmanager
    def scratch(self, prefix):
        """A temporary directory for the run's files; left in place (and named) with --keep."""
        if self.args.keep:
            path = tempfile.mkdtemp(prefix=prefix)
            try:
                yield path
            finally:
                print(f"files kept in {path}")
        else:
            with tempfile.TemporaryDirectory(prefix=prefix) as path:
                yield path

    def record(self, label, errors=(), command=None):
        """Counts one case: passed when `errors` is empty. Returns whether it passed."""
        errors = list(errors)
        if errors:
            self.failures.append((label, command, errors))
        else:
            self.passed += 1
        return not errors

    @property
    def failed(self):
        return len(self.failures)

    def finish(self):
        """Reports the failures on stderr, prints the summary line; the exit status: 0 when every
        case passed, 1 on a failure - and 1 when no case ran at all (a script that checked nothing
        has not passed)."""
        for label, command, errors in self.failures:
            print(f"FAILED {label}", file=sys.stderr)
            if command:
                print(f"  command: {shlex.join(command)}", file=sys.stderr)
            for e in errors:
                print("  " + str(e).replace("\n", "\n  "), file=sys.stderr)
        print(f"{self.name}: {self.passed} passed, {self.failed} failed ({time.time() - self.start:.1f} s; "
              f"qkv's processes {_qkv_seconds[0]:.1f} s)")
        if not self.failures and self.passed == 0:
            print(f"{self.name}: FAILED: no case ran", file=sys.stderr)
            return 1
        return 1 if self.failures else 0


def start(name, doc, flags=None, jobs=None, rng_seed=None):
    """Parses the common flags (and the script's own: flags(parser) adds them) and returns the
    run's Harness; exits with status 2 when --qkv is not an executable.

    jobs: the default of --jobs (None: no such flag); rng_seed: the default of --rng-seed."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0] if doc else None,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", required=True, help="path to the qkv executable")
    ap.add_argument("--verbose", "-v", action="store_true", help="print every case")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    if jobs is not None:
        ap.add_argument("--jobs", type=int, default=jobs, help="qkv processes at a time")
    if rng_seed is not None:
        ap.add_argument("--rng-seed", type=int, default=rng_seed, help="seed of the Python RNG drawing the cases")
    if flags:
        flags(ap)
    args = ap.parse_args()
    h = Harness(name, args)
    if not os.access(h.qkv, os.X_OK):
        print(f"{name}: FAILED: {h.qkv} is not an executable", file=sys.stderr)
        sys.exit(2)
    torch.set_num_threads(1)
    return h
