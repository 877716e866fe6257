#!/usr/bin/env python3
"""Runs the Python examples of a doc page as written: every ```python block whose first line names a file and the
command that runs it ("# example.py: build/tools/symcomm-run -n 2 -- /usr/bin/python3 example.py") is written to
that file in a scratch folder and run with that command, the launcher (build/tools/symcomm-run) and mpirun replaced
by the ones given. An example fails when its command exits with an error. Examples for GPUs (run by `python3`
rather than `/usr/bin/python3`, the interpreter of Debian's CPU torch) are reported as skipped.

    run_doc_examples.py --launcher build/tools/symcomm-run --mpiexec mpirun docs/python.md

Exit status: 0 every CPU example ran, 1 one failed.
"""

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

HEADER = re.compile(r"^# (?P<file>[A-Za-z0-9_]+\.py): (?P<command>.*?)(?:\s{2,}\(.*\))?$")


def examples(text):
    """(file, command, source) of every ```python block that starts with a header line."""
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        m = HEADER.match(block.splitlines()[0])
        if m:
            yield m["file"], m["command"], block


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--launcher", required=True, help="path of symcomm-run")
    parser.add_argument("--mpiexec", default="", help="path of mpirun ('' skips the examples that need it)")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("doc")
    args = parser.parse_args()
    with open(args.doc) as f:
        found = list(examples(f.read()))
    if not found:
        print(f"{args.doc}: no examples found")
        return 1
    passed, failed, skipped = 0, 0, 0
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    for name, command, source in found:
        words = shlex.split(command)
        if "/usr/bin/python3" not in words or (words[0] == "mpirun" and not args.mpiexec):
            print(f"{name}: skipped (needs GPUs or MPI): {command}")
            skipped += 1
            continue
        words = [args.launcher if w == "build/tools/symcomm-run" else args.mpiexec if w == "mpirun" else w
                 for w in words]
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, name), "w") as f:
                f.write(source)
            try:
                run = subprocess.run(words, cwd=folder, env=env, capture_output=True, text=True,
                                     timeout=args.timeout)
                ok, output = run.returncode == 0, run.stdout + run.stderr
            except subprocess.TimeoutExpired as e:
                ok, output = False, f"timed out after {args.timeout} s\n{e.stdout or ''}{e.stderr or ''}"
        print(f"{name}: {'passed' if ok else 'FAILED'}: {' '.join(words)}")
        if not ok:
            print(output)
            failed += 1
        else:
            passed += 1
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
