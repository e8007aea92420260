"""The harness every comparison script reports through (harness.py): its exit status is 0 only when
cases ran and every one passed - a script that ran no case fails ("0 passed, 0 failed" is not a
pass), as does one with a failed case. Each outcome is a script of its own, run as CTest runs the
comparison scripts, its status and summary line checked."""

import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

SCRIPT = """
import sys
sys.path.insert(0, {here!r})
import harness
h = harness.start("probe", "a probe")
for i in range({passed}):
    h.record(f"case {{i}}")
for i in range({failed}):
    h.record(f"bad {{i}}", ["wrong"])
sys.exit(h.finish())
"""


def run(passed, failed, qkv):
    with tempfile.TemporaryDirectory(prefix="qkv-harness-") as tmp:
        path = os.path.join(tmp, "probe.py")
        with open(path, "w") as f:
            f.write(SCRIPT.format(here=HERE, passed=passed, failed=failed))
        r = subprocess.run([sys.executable, path, "--qkv", qkv], capture_output=True, text=True, timeout=300)
        return r.returncode, r.stdout + r.stderr


def main():
    qkv = sys.argv[sys.argv.index("--qkv") + 1] if "--qkv" in sys.argv else "/bin/true"
    problems = []
    for passed, failed, want, words in [(0, 0, 1, "no case ran"), (3, 0, 0, "3 passed, 0 failed"),
                                        (2, 1, 1, "FAILED bad 0"), (0, 2, 1, "0 passed, 2 failed")]:
        status, out = run(passed, failed, qkv)
        print(f"  {passed} passing, {failed} failing: exit {status}")
        if status != want or words not in out:
            problems.append(f"{passed} passing and {failed} failing cases: exit {status} (want {want}), "
                            f"output without {words!r}:\n{out}")
    for p in problems:
        print("FAILED " + p, file=sys.stderr)
    print(f"harness: {4 - len(problems)} passed, {len(problems)} failed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
