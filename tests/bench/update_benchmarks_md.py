#!/usr/bin/python3
"""Replaces one section of BENCHMARKS.md (between <!-- NAME:begin --> and
<!-- NAME:end -->) with the contents of a file, adding it if absent.

    update_benchmarks_md.py BENCHMARKS.md NAME SECTION_FILE
"""
import sys


def main(path, name, section_file):
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    body = open(section_file).read().rstrip() + "\n"
    try:
        text = open(path).read()
    except FileNotFoundError:
        text = ("# Benchmarks\n\nMeasured by the scripts in `tests/bench/` (see its README); "
                "each section is rewritten by its script. Ratios matter, not absolute "
                "numbers: every figure comes from the same machine in the same run.\n\n")
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + begin + "\n" + body + end + tail
    else:
        text = text.rstrip() + "\n\n" + begin + "\n" + body + end + "\n"
    open(path, "w").write(text)


if __name__ == "__main__":
    main(*sys.argv[1:])
