#!/usr/bin/python3
"""Runs a command, passes SIGTERM/SIGINT on to it, and writes its peak RSS in
MiB to OUTFILE when it exits.    peak_rss.py OUTFILE command [args...]"""
import resource
import signal
import subprocess
import sys

out, command = sys.argv[1], sys.argv[2:]
child = subprocess.Popen(command)
for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda number, frame: child.send_signal(number))
code = child.wait()
with open(out, "w") as f:
    f.write("%.1f\n" % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024))
sys.exit(code)
