/* slow_tty.c: an LD_PRELOAD shim for the REPL tests (tests/repl/pty_drive.py,
 * scenario "drawing"). Each fflush of a terminal's stdout is followed by a
 * 50 ms pause, so a key or Ctrl-C sent as soon as the screen changes lands
 * while libedit is between drawing and its next read, the moment a slow or
 * busy machine gives by chance. libedit draws through stdio, whose writes
 * cannot be interposed; its fflush calls can. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

int fflush(FILE *f) {
  static int (*real)(FILE *);
  if (!real) real = (int (*)(FILE *))dlsym(RTLD_NEXT, "fflush");
  int r = real(f);
  int saved = errno;
  if (f && fileno(f) == 1 && isatty(1)) {
    struct timespec t = {0, 50 * 1000 * 1000};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
  }
  errno = saved;
  return r;
}
