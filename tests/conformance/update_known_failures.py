#!/usr/bin/env python3
"""Rewrites known_failures.txt from a conformance run: removes cases that now pass, keeps the reasons of the rest.

The list only shrinks: a case that fails but is not listed is reported and the script exits 1, unless
--allow-new is given (for the first list, or a deliberate, reviewed addition).  New entries get the runner's
failure message, shortened, as their reason.

    tests/conformance/update_known_failures.py [--runner build/bin/tessera_conformance] [--allow-new]
"""
import argparse
import pathlib
import re
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
LIST = HERE / "known_failures.txt"


def reason_of(message: str) -> str:
    m = re.search(r"no CPU kernel for ([\w.:]+)(?: at opset (\d+))?", message)
    if m:
        return f"no CPU kernel for {m.group(1)}" + (f" at opset {m.group(2)}" if m.group(2) else "")
    m = re.search(r"(\w+) opset (\d+): input (\d+) type (\w+) is not supported", message)
    if m:
        return f"{m.group(1)} opset {m.group(2)} has no {m.group(4)} kernel"
    message = re.sub(r"\s+", " ", message).strip()
    return message[:160]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runner", default=str(HERE.parent.parent / "build/bin/tessera_conformance"))
    parser.add_argument("--allow-new", action="store_true")
    args = parser.parse_args()

    header, entries = [], {}
    for line in LIST.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            if not entries:
                header.append(line)
            continue
        name, _, reason = stripped.partition("#")
        entries[name.strip()] = reason.strip()

    run = subprocess.run([args.runner, "--known-failures", "/dev/null", "--jobs", "2"],
                         capture_output=True, text=True)
    failing = {}
    for line in run.stdout.splitlines():
        m = re.match(r"FAIL\s+(\S+?)/(\S+?)(?::\s+(.*))?$", line)
        if m:
            failing[m.group(2)] = m.group(3) or ""

    new = sorted(set(failing) - set(entries))
    if new and not args.allow_new:
        print(f"{len(new)} failing case(s) are not in the list (fix them; --allow-new only for reviewed additions):")
        for name in new:
            print(f"  {name}: {failing[name]}")
        return 1
    kept = {name: entries.get(name) or reason_of(failing[name]) for name in failing}
    removed = sorted(set(entries) - set(failing))
    width = max((len(n) for n in kept), default=0) + 2
    lines = header + [f"{name.ljust(width)}# {kept[name]}" for name in sorted(kept)]
    LIST.write_text("\n".join(lines) + "\n")
    print(f"{len(kept)} known failures ({len(removed)} removed, {len(new)} added)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
