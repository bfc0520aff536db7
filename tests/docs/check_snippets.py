#!/usr/bin/env python3
"""Keeps the code in a Markdown document identical to compiled snippet files.

A block in the document preceded by the comment

    <!-- snippet: minimal_provider.c#entry -->

must hold exactly the lines of docs/snippets/minimal_provider.c between the markers `[snippet:entry]` and
`[end:entry]` (the marker lines excluded).  The snippet files are compiled, loaded and run by the tests, so the
document shows code that builds and works.

    check_snippets.py DOC SNIPPET_DIR            exit 1 and name every block that differs or points nowhere
    check_snippets.py DOC SNIPPET_DIR --update   rewrite the blocks from the snippet files
"""
import pathlib
import re
import sys

MARKER = re.compile(r"^<!-- snippet: (?P<file>[\w./-]+)#(?P<region>[\w-]+) -->$")


def region(snippet_dir, file, name):
    lines = (snippet_dir / file).read_text().splitlines()
    start = [i for i, line in enumerate(lines) if f"[snippet:{name}]" in line]
    end = [i for i, line in enumerate(lines) if f"[end:{name}]" in line]
    if len(start) != 1 or len(end) != 1 or end[0] <= start[0]:
        raise ValueError(f"{file}: region '{name}' is not marked exactly once")
    body = lines[start[0] + 1:end[0]]
    indent = min((len(l) - len(l.lstrip()) for l in body if l.strip()), default=0)
    return [l[indent:].rstrip() for l in body]


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    doc, snippet_dir, update = pathlib.Path(argv[1]), pathlib.Path(argv[2]), "--update" in argv[3:]
    lines = doc.read_text().splitlines()
    out, problems, used, i = [], [], set(), 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        m = MARKER.match(line)
        if not m:
            continue
        used.add(m["file"])
        if i >= len(lines) or not lines[i].startswith("```"):
            problems.append(f"{doc}:{i}: snippet marker not followed by a code block")
            continue
        out.append(lines[i])
        close = i + 1
        while close < len(lines) and lines[close].rstrip() != "```":
            close += 1
        block = [l.rstrip() for l in lines[i + 1:close]]
        try:
            wanted = region(snippet_dir, m["file"], m["region"])
        except (OSError, ValueError) as e:
            problems.append(f"{doc}:{i}: {e}")
            wanted = block
        if block != wanted:
            problems.append(f"{doc}:{i}: block differs from {m['file']}#{m['region']}")
        out.extend(wanted if update else block)
        out.append("```")
        i = close + 1
    for f in sorted(p.name for p in snippet_dir.iterdir() if p.is_file()):
        if f not in used:
            problems.append(f"{snippet_dir / f}: quoted nowhere in {doc}")
    if update:
        doc.write_text("\n".join(out) + "\n")
        problems = [p for p in problems if "differs" not in p]
    for p in problems:
        print(p)
    print(f"{len(used)} snippet files, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
