#!/usr/bin/env python3
"""sigint_drive.py: runs `luon SCRIPT`, waits until the script prints a line
"ready", sends it SIGINT (as Ctrl-C in a shell does), and prints
"rc=<exit status> ms=<milliseconds from SIGINT to exit>" and then what the
script wrote to stderr. Usage: sigint_drive.py LUON SCRIPT [DELAY_S]
(DELAY_S: seconds to wait after "ready", default 0.2). Kills luon and says
so when it has not ended 30 s after the signal. Only the standard library."""
import signal
import subprocess
import sys
import time


def main():
    luon, script = sys.argv[1], sys.argv[2]
    delay = float(sys.argv[3]) if len(sys.argv) > 3 else 0.2
    p = subprocess.Popen([luon, script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = p.stdout.readline()
    if line.strip() != b"ready":
        p.kill()
        out, err = p.communicate()
        print("rc=none ms=0 (the script did not print ready: %r)" % line)
        sys.stdout.write(err.decode(errors="replace"))
        return
    time.sleep(delay)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=30)
        ms = (time.monotonic() - t0) * 1000
        print("rc=%d ms=%.0f" % (p.returncode, ms))
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        print("rc=none ms=30000 (still running 30 s after SIGINT: killed)")
    sys.stdout.write(p.stderr.read().decode(errors="replace"))


main()
