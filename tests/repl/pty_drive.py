#!/usr/bin/env python3
"""pty_drive.py: drives the real `luon` REPL through a pseudo-terminal, as a
person would (keys, TAB, Ctrl-C, Ctrl-D), and checks what the screen shows.
Usage: pty_drive.py LUON SCENARIO    (SCENARIO: one name below, or "list").
Prints a transcript when a check fails; exits 0 on success, 1 on failure.
Only the standard library: CI has /usr/bin/python3 and nothing else."""
import os
import pty
import re
import select
import shutil
import signal
import struct
import sys
import subprocess
import tempfile
import termios
import time

TIMEOUT = float(os.environ.get("LUON_PTY_TIMEOUT", "20"))
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>78]|[\x07\r]")


class Failure(Exception):
    pass


def clean(raw):
    """The screen text without escape sequences, carriage returns and bells;
    a backspace erases the character before it."""
    text = ANSI.sub("", raw)
    out = []
    for ch in text:
        if ch == "\b":
            if out and out[-1] != "\n":
                out.pop()
        else:
            out.append(ch)
    return "".join(out)


class Repl:
    def __init__(self, luon, home, libedit, args=(), extra_env=None):
        self.libedit = libedit
        env = {k: v for k, v in os.environ.items() if k not in ("LUON_HISTORY", "LD_PRELOAD")}
        env.update(HOME=home, TERM="xterm", LC_ALL="C")
        env.update(extra_env or {})
        pid, fd = pty.fork()
        if pid == 0:
            import fcntl
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
            try:
                os.execve(luon, [luon] + list(args), env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.raw = ""      # everything the terminal received
        self.mark = 0      # expect() looks at raw[mark:]
        self.status = None

    def read(self, timeout):
        r, _, _ = select.select([self.fd], [], [], timeout)
        if not r:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            data = b""
        if not data:
            raise EOFError
        self.raw += data.decode("utf-8", "replace")
        return True

    def editing(self, timeout=2.0):
        """Waits until libedit has the terminal (echo off): libedit prints
        its prompt before it switches, and keys typed in between are echoed
        twice. Without libedit the terminal stays as it is."""
        if not self.libedit:
            return
        end = time.time() + timeout
        while time.time() < end and termios.tcgetattr(self.fd)[3] & termios.ECHO:
            time.sleep(0.005)

    def interrupt(self, what):
        """Ctrl-C once the chunk just entered runs: libedit has given the
        terminal back (echo on), then a moment for the chunk to start. A
        second press, if needed, interrupts as well."""
        end = time.time() + TIMEOUT
        while self.libedit and time.time() < end and not termios.tcgetattr(self.fd)[3] & termios.ECHO:
            time.sleep(0.005)
        time.sleep(0.3)
        self.send("\x03", mark=False, wait=False)
        try:
            self.expect(r"interrupted\n> $", what, timeout=5)
        except Failure:
            self.send("\x03", mark=False, wait=False)
            self.expect(r"interrupted\n> $", what)

    def send(self, keys, mark=True, wait=True):
        """Types keys (wait=False: while a chunk runs, not at a prompt)."""
        if wait:
            self.editing()
        if mark:
            self.mark = len(self.raw)
        os.write(self.fd, keys.encode())

    def expect(self, pattern, what=None, timeout=TIMEOUT):
        """Waits until the screen since the last send() matches pattern."""
        rx = re.compile(pattern, re.S)
        end = time.time() + timeout
        while True:
            m = rx.search(clean(self.raw[self.mark:]))
            if m:
                return m
            left = end - time.time()
            try:
                if left <= 0 or not self.read(min(left, 0.2)) and left <= 0:
                    raise Failure("timed out waiting for %s (%r)" % (what or "output", pattern))
            except EOFError:
                m = rx.search(clean(self.raw[self.mark:]))
                if m:
                    return m
                raise Failure("luon left while waiting for %s (%r)" % (what or "output", pattern))

    def settle(self, quiet=0.3, timeout=5):
        """Reads until nothing arrives for `quiet` seconds."""
        end = time.time() + timeout
        try:
            while time.time() < end and self.read(quiet):
                pass
        except EOFError:
            pass

    def line(self, text, pattern, what=None, mark=True):
        """Types a line, then waits for the output and the next prompt."""
        self.send(text + "\r", mark)
        if not pattern.endswith("$"):
            pattern += r"(?:.*\n)?(?:>|>>) $"
        m = self.expect(pattern, what or text)
        return m

    def wait_exit(self, timeout=TIMEOUT):
        end = time.time() + timeout
        while time.time() < end:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
                return status
            try:
                self.read(0.1)
            except EOFError:
                pass
        raise Failure("luon did not exit")

    def close(self):
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except OSError:
                pass
        try:
            os.close(self.fd)
        except OSError:
            pass


PROMPT = r"\n> $"


def start(ctx, *args, env=None):
    r = Repl(ctx["luon"], ctx["home"], ctx["libedit"], args, env)
    ctx["repls"].append(r)
    r.expect(r"luon .*> $", "the banner and first prompt")
    return r


# ---- scenarios ---------------------------------------------------------------

def s_print(ctx):
    r = start(ctx)
    r.line("1+1", r"\n2\n", "1+1 shows 2")
    r.line("x = np.ones({2,2})", r"x = np.ones\(\{2,2\}\)\n> $", "an assignment prints nothing")
    r.line("x", r"\n\[\[1\. 1\.\]\n \[1\. 1\.\]\]\n<ndarray \(2,2\) float32 @cpu\(0\)>\n", "x with its info line")
    r.line("np.arange(3)", r"\n\[0\. 1\. 2\.\]\n<ndarray \(3,\) float32 @cpu\(0\)>\n", "a 1-d array")
    r.line("np.zeros({2000})", r"\n\[0\. 0\. 0\. \.\.\. 0\. 0\. 0\.\]\n<ndarray \(2000,\)", "a summarised array")
    r.line("npx.cpu(0)", r"\ncpu\(0\)\n", "a device")
    r.line("x.shape, 'hi'", r"\n\{2, 2\}\thi\n", "several results, a table")
    r.line("return", r"return\n> $", "no results")


def s_continue(ctx):
    r = start(ctx)
    r.send("function f()\r")
    r.expect(r"\n>> $", "the continuation prompt")
    r.send("  return 3\r")
    r.expect(r"\n>> $", "the continuation prompt")
    r.send("end\r")
    r.expect(r"end\n> $", "the end of the chunk")
    r.line("f()", r"\n3\n", "f() shows 3")
    r.send("t = {\r")
    r.expect(r"\n>> $", "continuation inside a table")
    r.line("  1, 2}", r"\n> $")
    r.line("#t", r"\n2\n")


def s_error(ctx):
    r = start(ctx)
    r.line('error("boom")', r'\nstdin:1: boom\n', "the message")
    r.line("1+2", r"\n3\n", "the next command works")
    r.line("function g() local y = nil; return y + 1 end", r"\n> $")
    r.line("g()", r"attempt to perform arithmetic.*\nstack traceback:\n  stdin:1: in function 'g'\n"
           r"  stdin:1: in main chunk\n", "a short traceback")
    r.line("x = = 1", r"unexpected symbol near '='\n", "a syntax error")
    r.line("np.zeros('a')", r"zeros: shape must be", "a luon error")
    r.line("2*21", r"\n42\n", "still alive")


def s_complete(ctx):
    r = start(ctx)
    r.send("np.ra\t\t")
    r.expect(r"np\.random.*np\.ravel|np\.ravel.*np\.random", "the candidates of np.ra")
    r.send("\x03")  # Ctrl-C clears the line
    r.expect(PROMPT, "a fresh prompt after Ctrl-C")
    r.send("np.rand\t")
    r.expect(r"np\.random", "np.rand completed")
    r.send(".se\t", mark=False)
    r.expect(r"np\.random\.seed", "np.random.se completed")
    r.line("(7)", r"np\.random\.seed\(7\)\n> $", "the completed call runs", mark=False)
    r.line("x = np.ones({2,2})", PROMPT)
    r.send("x:as\t\t")
    r.expect(r"(?=.*x:astype)(?=.*x:asnumpy)(?=.*x:as_in_context)", "the candidates of x:as")
    r.send("\x03")
    r.expect(PROMPT)
    r.send("x:asty\t")
    r.expect(r"x:astype")
    r.line("('int32')", r"\n<ndarray \(2,2\) int32 @cpu\(0\)>\n", "x:astype completed and run")
    r.send("x.sh\t")
    r.expect(r"x\.shape")
    r.line("", r"\n\{2, 2\}\n", "x.shape completed")
    r.send("prin\t")
    r.expect(r"print")
    r.line("('done')", r"\ndone\n", "a global completed")


def s_interrupt(ctx):
    r = start(ctx)
    r.send("while true do end\r")
    r.interrupt("Ctrl-C stops a loop")
    r.line("1+1", r"\n2\n", "the REPL goes on")
    r.line("function spin() local i = 0; while true do i = i + 1 end end", PROMPT)
    r.send("spin()\r")
    r.interrupt("Ctrl-C stops a function defined here")
    r.send("(function() local i = 0; while true do i = i + 1 end end)()\r")
    r.interrupt("Ctrl-C stops a loop in an expression")
    r.send("t0 = luon.clock(); x = np.ones({500,500}); for i = 1, 1e9 do x = x * 1 end\r")
    r.interrupt("Ctrl-C stops a loop of luon calls")
    r.line("a = np.ones({8192, 8192})", PROMPT)
    r.send("c = np.matmul(a, a); c:wait_to_read(); print('finished')\r")
    r.interrupt("Ctrl-C stops a long matmul (a minute here) within moments")
    r.line("a, c = nil, nil", PROMPT)
    r.line("np.matmul(np.ones({2,2}), np.ones({2,2})):sum():item()", r"\n8\n", "the next op runs")
    r.send("this is not lua")
    r.expect("not lua")
    r.send("\x03")
    r.expect(PROMPT, "Ctrl-C clears the line")
    r.send("function h()\r")
    r.expect(r"\n>> $")
    r.send("\x03")
    r.expect(PROMPT, "Ctrl-C drops an unfinished chunk")
    r.line("3+4", r"\n7\n", "after clearing")


def s_drawing(ctx):
    """Ctrl-C while libedit draws, between two reads: tests/c/slow_tty.c
    holds each redraw 50 ms, so the presses below, sent as soon as the
    screen changes, land in that pause (on a machine too loaded to answer
    within 50 ms one may land in the read instead, and pass). The press
    must end the wait for the next key all the same."""
    shim = os.path.join(os.path.dirname(ctx["luon"]), "tests", "libluon_slow_tty.so")
    if not os.path.exists(shim):
        raise Failure("no %s: it is built beside luon" % shim)
    asan = (os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0").lstrip(":")
    r = start(ctx, env={"LD_PRELOAD": shim, "ASAN_OPTIONS": asan})
    for k in range(5):
        r.send("this is not lua %d" % k)
        r.expect("not lua %d" % k)
        r.send("\x03")
        r.expect(PROMPT, "Ctrl-C while the line is drawn clears it")
    if ctx["libedit"]:
        r.send("np.ra\t\t")
        r.expect(r"np\.random.*np\.ravel|np\.ravel.*np\.random", "the candidates of np.ra")
        r.send("\x03")
        r.expect(PROMPT, "Ctrl-C while the candidates are drawn")
    r.line("3+4", r"\n7\n", "after clearing")


def s_help(ctx):
    r = start(ctx)
    r.line(":help", r"REPL commands:.*:quit.*help\(obj\)", ":help")
    r.line("help(np.zeros)", r"\nnp\.zeros\(shape", "help of a function")
    r.line("help(np)", r"np: NumPy-compatible.*functions:.*zeros", "help of a module")
    r.line("x = np.ones({3})", PROMPT)
    r.line("help(x)", r"<ndarray \(3,\) float32 @cpu\(0\)>\nproperties:.*shape.*\nmethods.*astype", "help of an array")
    r.line("help({a = 1, f = print})", r"\ntable\nfields: a\nfunctions: f\n", "help of an unknown table")
    r.line(":nope", r"unknown command :nope", "an unknown command")
    r.line(":time x = np.ones({10})", r"\n[0-9.]+ s\n", ":time")
    r.send(":quit\r")
    r.wait_exit()


def s_history(ctx):
    r = start(ctx)
    r.line("40+2", r"\n42\n")
    r.send("\x04")  # Ctrl-D
    status = r.wait_exit()
    if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
        raise Failure("Ctrl-D: luon exit status %r" % status)
    path = os.path.join(ctx["home"], ".luon_history")
    if not os.path.exists(path) or "40+2" not in open(path, errors="replace").read():
        raise Failure("no history in %s" % path)
    if os.stat(path).st_mode & 0o777 != 0o600:
        raise Failure("a new history file is private: mode %o" % (os.stat(path).st_mode & 0o777))
    # a symbolic link at the path stays; its target is replaced
    kept = os.path.join(ctx["home"], "kept_history")
    os.rename(path, kept)
    os.symlink(kept, path)
    r2 = start(ctx)
    r2.send("\x1b[A")  # up: the last line of the last session
    r2.expect(r"40\+2")
    r2.line("", r"\n42\n", "a line from the last session")
    r2.send("os.exit(0)\r")
    r2.wait_exit()
    if "os.exit(0)" not in open(path, errors="replace").read():
        raise Failure("os.exit() did not save the history")
    if not os.path.islink(path) or "os.exit(0)" not in open(kept, errors="replace").read():
        raise Failure("the link at the history path was not kept")
    left = [n for n in os.listdir(ctx["home"]) if ".tmp." in n]
    if left:
        raise Failure("temporary files left: %s" % left)


def s_script(ctx):
    script = os.path.join(ctx["home"], "setup.lua")
    with open(script, "w") as f:
        f.write("np = require('luon').np\nanswer = 41 + 1\nfunction twice(v) return 2 * v end\nw = np.ones({2})\n"
                "print('script ran')\n")
    r = start(ctx, "-i", script)
    if "script ran" not in clean(r.raw):
        raise Failure("the script's output is missing")
    r.line("twice(answer)", r"\n84\n", "the script's globals")
    r.line("w", r"<ndarray \(2,\) float32 @cpu\(0\)>", "the script's array")


NEEDS_LIBEDIT = ("complete", "history")
SCENARIOS = {name[2:]: fn for name, fn in globals().items() if name.startswith("s_")}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    luon, name = os.path.abspath(sys.argv[1]), sys.argv[2]
    if name == "list":
        print(" ".join(sorted(SCENARIOS)))
        return 0
    query = "io.write(tostring(require('luon.repl_native').libedit))"
    libedit = subprocess.run([luon, "-e", query], capture_output=True, text=True).stdout == "true"
    if name in NEEDS_LIBEDIT and not libedit:
        print("SKIP %s: luon was built without libedit" % name)
        return 0
    home = tempfile.mkdtemp(prefix="luon-repl-")
    ctx = {"luon": luon, "home": home, "repls": [], "libedit": libedit}
    try:
        SCENARIOS[name](ctx)
        print("PASS %s" % name)
        return 0
    except (Failure, KeyError) as e:
        print("FAIL %s: %s" % (name, e))
        for k, r in enumerate(ctx["repls"]):
            r.settle()
            print("--- screen of luon session %d (cleaned):" % (k + 1))
            print(clean(r.raw))
            print("--- raw tail:")
            print(repr(r.raw[-600:]))
        return 1
    finally:
        for r in ctx["repls"]:
            r.close()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
