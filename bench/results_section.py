#!/usr/bin/env python3
"""Put one section into bench/RESULTS.md: replace the section whose heading
is "## TITLE" (up to the next "## " heading) or append it at the end; every
other section stays byte for byte. The file is replaced atomically.

    bench/results_section.py RESULTS.md SECTION.md TITLE

Used by bench/quality.sh and bench/lm_quality.sh (--write-results)."""
import os
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: results_section.py RESULTS.md SECTION.md TITLE")
    path, section_path, title = sys.argv[1:]
    section = open(section_path).read().rstrip("\n") + "\n"
    head = "## " + title
    text = open(path).read() if os.path.exists(path) else "# Benchmark results\n"
    lines = text.split("\n")
    start = next((i for i, l in enumerate(lines) if l.strip() == head), None)
    if start is None:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = next((j for j in range(start + 1, len(lines)) if lines[j].startswith("## ")),
                   len(lines))
        rest = "\n".join(lines[end:])
        text = ("\n".join(lines[:start]) + ("\n" if start else "") + section +
                ("\n" + rest if rest else ""))
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
