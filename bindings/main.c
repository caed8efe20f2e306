/* main.c: the `luon` executable: LuaJIT with luon on its paths. Runs a
 * script with arguments, a string (-e), prints the paths for plain luajit
 * (--env), or starts the REPL (lua/luon/repl.lua) when given no script or -i.
 * Also the REPL's native half, module "luon.repl_native": line editing,
 * history and completion (libedit, when built with LUON_HAVE_LIBEDIT), and
 * Ctrl-C, which interrupts a running chunk or clears the line being typed.
 * Ctrl-C on a script prints where it stopped and exits with status 130. */
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>
#include <lualib.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "luon.h"
#include "jitstop.h"
#include "paths.h"
#ifdef LUON_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

/* Lua directories: beside the executable when installed, else the build
 * and source trees (paths.c). */
static void lua_dirs(char *paths, size_t n, char *cpaths, size_t cn) {
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[len > 0 ? len : 0] = 0;
  char *slash = strrchr(exe, '/');
  if (slash) *slash = 0;
  lu_lua_dirs(exe, paths, n, cpaths, cn);
}

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) msg = "(error object is not a string)";
  luaL_traceback(L, L, msg, 1);
  return 1;
}

static int report(lua_State *L, int status) {
  if (status != 0) {
    const char *msg = lua_tostring(L, -1);
    fprintf(stderr, "luon: %s\n", msg ? msg : "(error object is not a string)");
    lua_pop(L, 1);
  }
  return status;
}

static int docall(lua_State *L, int narg, int nres) {
  int base = lua_gettop(L) - narg;
  lua_pushcfunction(L, traceback);
  lua_insert(L, base);
  int status = lua_pcall(L, narg, nres, base);
  lua_remove(L, base);
  return status;
}

/* ---- the REPL's native half ------------------------------------------------
 * Ctrl-C is the technique of lua.c: the SIGINT handler sets a hook (the one
 * Lua call that is safe in a signal handler) and the hook raises "interrupted"
 * at the next instruction, call or return; JIT-compiled code runs it once
 * its trace exits, which LuaJIT's profiler makes it do every 10 ms of CPU
 * time (jitstop.c). The REPL also runs its chunks with the JIT off
 * (repl.lua), stoppable without the profiler; when even the hook is not
 * reached (a C call that does not look at Ctrl-C), a second Ctrl-C says so
 * and a third ends the process. While a line is read,
 * Ctrl-C makes readline return false. With libedit the handler also writes
 * a byte to a pipe that the line reader polls beside the terminal, so a
 * press that lands while libedit is drawing (between two reads), or on
 * another thread, still ends the wait; without libedit (no terminal,
 * TERM=dumb) the press ends fgets's read through EINTR only.
 * The handler also calls luon_interrupt(), which stops a long C op (a big
 * matmul) within milliseconds; the REPL clears that flag around each chunk.
 *
 * A script (or -e code) is stopped the same way, once: the error, with its
 * traceback, is reported and luon exits with 130, as shells expect after
 * SIGINT. When neither the hook nor an op has seen the press within
 * GRACE_MS (a blocking C call; a compiled loop without the profiler), or
 * on a second press,
 * luon says so and exits with 130 at once, without a traceback. */

#define GRACE_MS 1000

static lua_State *repl_L;                  /* the state the hook and completion use */
static volatile sig_atomic_t presses;      /* Ctrl-C presses not yet dealt with */
static volatile sig_atomic_t running;      /* a REPL chunk (1) or a script (2) is running */
static volatile sig_atomic_t interrupted;  /* Ctrl-C reached the running script */
static volatile sig_atomic_t hooked;       /* the hook has run since */
static int completer_ref = LUA_NOREF;      /* repl.complete, in the registry */
static int editing;                        /* reading lines with libedit */
static int wake[2] = {-1, -1};             /* on_sigint writes to wake[1] */

static void stop_hook(lua_State *L, lua_Debug *ar) {
  if (lu_in_luon_lua(L, ar)) { /* raise it once back in the user's code */
    lua_sethook(L, stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
    return;
  }
  lua_sethook(L, NULL, 0, 0);
  presses = 0;
  hooked = 1;
  luaL_error(L, "interrupted");
}

static void say(const char *msg) {
  ssize_t r = write(2, msg, strlen(msg));
  (void)r;
}

/* the script did not stop in time (GRACE_MS), or a second press */
static void give_up(void) {
  say("\nluon: interrupted, but the script did not stop: it is in a C call that does not look at "
      "Ctrl-C, or in JIT-compiled Lua code with LuaJIT's profiler off (LUON_JIT_STOP=0, or taken by "
      "jit.profile); no traceback\n");
  _exit(130);
}

static void on_alarm(int sig) {
  (void)sig;
  if (!hooked && running == 2) give_up();
}

/* script mode: the first press stops the script, with a timer for GRACE_MS */
static void interrupt_script(void) {
  if (presses >= 2) give_up();
  interrupted = 1;
  hooked = 0;
  luon_interrupt();
  lua_sethook(repl_L, stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
  struct itimerval t = {{0, 0}, {GRACE_MS / 1000, (GRACE_MS % 1000) * 1000}};
  setitimer(ITIMER_REAL, &t, NULL);
}

static void on_sigint(int sig) {
  (void)sig;
  int saved = errno; /* the code interrupted may be about to read it */
  presses++;
  if (wake[1] >= 0) {
    ssize_t r = write(wake[1], "", 1); /* full pipe: a wake-up is already there */
    (void)r;
  }
  if (running == 2) {
    interrupt_script();
  } else if (running) {
    luon_interrupt(); /* a long C op stops too */
    if (presses == 2)
      say("\nluon: still running: a C call that does not look at Ctrl-C (or JIT-compiled code "
          "with LuaJIT's profiler off) cannot be interrupted; Ctrl-C again ends luon\n");
    if (presses >= 3) {
      signal(SIGINT, SIG_DFL);
      raise(SIGINT);
    } else {
      lua_sethook(repl_L, stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
    }
  }
  errno = saved;
}

static void drain_wake(void) {
  char buf[64];
  while (wake[0] >= 0 && read(wake[0], buf, sizeof buf) > 0) {
  }
}

#ifdef LUON_HAVE_LIBEDIT
static char history_path[4096];

/* The history file is replaced as every file luon writes is (lu_wfile in
 * the core): written whole to a temporary file created exclusively beside
 * its target (mkstemp), with the old file's mode (0600 for a new one: what
 * is typed may be private), then renamed over it; a symbolic link at the
 * path stays, its target replaced. A failure leaves the old file. */
static int save_history(void) {
  char target[4096], tmp[4200];
  if (!realpath(history_path, target)) {
    if (errno != ENOENT) return -1;
    snprintf(target, sizeof target, "%s", history_path); /* new (or a dangling link: replaced) */
  }
  snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", target);
  int fd = mkstemp(tmp);
  if (fd < 0) return -1;
  struct stat st;
  if (stat(target, &st) == 0) {
    if (!S_ISREG(st.st_mode)) { /* a directory or device: leave it */
      close(fd);
      unlink(tmp);
      return -1;
    }
    int r = fchmod(fd, st.st_mode & 07777); /* best effort, as lu_wfile */
    (void)r;
  }
  close(fd);
  if (write_history(tmp) != 0 || rename(tmp, target) != 0) {
    unlink(tmp);
    return -1;
  }
  return 0;
}

/* also on os.exit() */
static void save_history_at_exit(void) {
  if (history_path[0]) save_history();
}

static volatile sig_atomic_t resized; /* the terminal changed size */

static void on_sigwinch(int sig) {
  (void)sig;
  resized = 1;
}

/* libedit's reads retry after EINTR; this one gives up when Ctrl-C was
 * pressed, whenever the press came (see on_sigint). A new terminal size is
 * taken at the next key. */
static int getc_interruptible(FILE *f) {
  unsigned char c;
  for (;;) {
    if (presses) return EOF;
    struct pollfd fds[2] = {{fileno(f), POLLIN, 0}, {wake[0], POLLIN, 0}};
    int r = poll(fds, wake[0] >= 0 ? 2 : 1, -1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return EOF;
    if (fds[1].revents & POLLIN) {
      drain_wake();
      continue; /* presses says whether it was Ctrl-C */
    }
    ssize_t n = read(fileno(f), &c, 1);
    if (n == 1 && resized) {
      resized = 0;
      rl_resize_terminal();
    }
    if (n == 1) return c;
    if (n < 0 && errno == EINTR) continue;
    return EOF;
  }
}

static char **candidates;
static size_t ncandidates, next_candidate;

static void drop_candidates(void) {
  for (size_t k = next_candidate; k < ncandidates; k++) free(candidates[k]);
  free(candidates);
  candidates = NULL;
  ncandidates = next_candidate = 0;
}

static char *next_match(const char *text, int state) {
  (void)text;
  (void)state;
  return next_candidate < ncandidates ? candidates[next_candidate++] : NULL;
}

/* TAB: repl.complete(word) gives the candidates, each the whole word */
static char **complete(const char *text, int start, int end) {
  (void)start;
  (void)end;
  rl_attempted_completion_over = 1; /* never fall back to file names */
  lua_State *L = repl_L;
  if (!L || completer_ref == LUA_NOREF) return NULL;
  int top = lua_gettop(L);
  drop_candidates();
  lua_rawgeti(L, LUA_REGISTRYINDEX, completer_ref);
  lua_pushstring(L, text);
  if (lua_pcall(L, 1, 1, 0) == 0 && lua_istable(L, -1)) {
    size_t n = lua_objlen(L, -1);
    candidates = calloc(n + 1, sizeof *candidates);
    for (size_t k = 1; candidates && k <= n; k++) {
      lua_rawgeti(L, -1, (int)k);
      const char *s = lua_tostring(L, -1);
      if (s) candidates[ncandidates++] = strdup(s);
      lua_pop(L, 1);
    }
  }
  lua_settop(L, top);
  if (ncandidates == 0) return NULL;
  return rl_completion_matches(text, next_match);
}
#endif

/* native.readline(prompt) -> the line; nil at end of input; false on Ctrl-C */
static int l_readline(lua_State *L) {
  const char *prompt = luaL_optstring(L, 1, "> ");
  repl_L = L;
  presses = 0;
  drain_wake();
#ifdef LUON_HAVE_LIBEDIT
  if (editing) {
    char *line = readline(prompt);
    drop_candidates();
    if (presses) {
      free(line);
      fputs("^C\n", stdout);
      fflush(stdout);
      presses = 0;
      lua_pushboolean(L, 0);
      return 1;
    }
    if (!line) return 0;
    lua_pushstring(L, line);
    free(line);
    return 1;
  }
#endif
  fputs(prompt, stdout);
  fflush(stdout);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  char buf[1024];
  size_t got = 0;
  for (;;) {
    if (!fgets(buf, sizeof buf, stdin)) {
      if (presses || (ferror(stdin) && errno == EINTR)) {
        clearerr(stdin);
        presses = 0;
        fputs("\n", stdout);
        lua_pushboolean(L, 0);
        return 1;
      }
      if (got == 0) return 0;
      break;
    }
    size_t n = strlen(buf);
    got += n;
    if (n > 0 && buf[n - 1] == '\n') {
      luaL_addlstring(&b, buf, n - 1);
      break;
    }
    luaL_addlstring(&b, buf, n);
  }
  luaL_pushresult(&b);
  return 1;
}

/* native.call(handler, f, ...) -> like xpcall(f, handler, ...), but Ctrl-C
 * raises "interrupted" inside f */
static int l_call(lua_State *L) {
  luaL_checktype(L, 2, LUA_TFUNCTION);
  repl_L = L;
  presses = 0;
  luon_interrupt_clear();
  running = 1;
  int status = lua_pcall(L, lua_gettop(L) - 2, LUA_MULTRET, 1);
  running = 0;
  lua_sethook(L, NULL, 0, 0);
  luon_interrupt_clear(); /* a press that came too late must not fail the next op */
  presses = 0;
  lua_pushboolean(L, status == 0);
  lua_replace(L, 1);
  return lua_gettop(L);
}

static int l_add_history(lua_State *L) {
  const char *line = luaL_checkstring(L, 1);
#ifdef LUON_HAVE_LIBEDIT
  if (editing && line[0]) add_history(line);
#else
  (void)line;
#endif
  return 0;
}

/* native.save_history() -> the path written, or nil */
static int l_save_history(lua_State *L) {
#ifdef LUON_HAVE_LIBEDIT
  if (editing && history_path[0] && save_history() == 0) {
    lua_pushstring(L, history_path);
    return 1;
  }
#endif
  return 0;
}

/* native.init(complete) -> {editing = bool, history = path or nil}: installs
 * the Ctrl-C handler and, on a terminal, libedit with the history file
 * $LUON_HISTORY (empty: none) or ~/.luon_history. */
static int l_init(lua_State *L) {
  repl_L = L;
  if (lua_isfunction(L, 1)) {
    lua_pushvalue(L, 1);
    luaL_unref(L, LUA_REGISTRYINDEX, completer_ref);
    completer_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  if (wake[0] < 0 && pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) wake[0] = wake[1] = -1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL); /* no SA_RESTART: Ctrl-C ends a blocked read */
  lua_createtable(L, 0, 2);
#ifdef LUON_HAVE_LIBEDIT
  const char *term = getenv("TERM");
  if (!editing && isatty(0) && isatty(1) && !(term && strcmp(term, "dumb") == 0)) {
    editing = 1;
    const char *h = getenv("LUON_HISTORY"), *home = getenv("HOME");
    if (h) snprintf(history_path, sizeof history_path, "%s", h);
    else if (home && home[0]) snprintf(history_path, sizeof history_path, "%s/.luon_history", home);
    rl_readline_name = "luon";
    rl_catch_signals = 0;
    rl_getc_function = getc_interruptible;
    rl_attempted_completion_function = complete;
    rl_basic_word_break_characters = " \t\n\"\\'`@$><=;|&{}()[],+-*/%^~#";
    rl_completion_append_character = '\0';
    rl_initialize();
    using_history();
    stifle_history(1000);
    if (history_path[0]) read_history(history_path);
    atexit(save_history_at_exit);
    sa.sa_handler = on_sigwinch;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGWINCH, &sa, NULL);
  }
  if (editing && history_path[0]) {
    lua_pushstring(L, history_path);
    lua_setfield(L, -2, "history");
  }
#endif
  lua_pushboolean(L, editing);
  lua_setfield(L, -2, "editing");
  return 1;
}

static int open_repl_native(lua_State *L) {
  static const luaL_Reg fns[] = {{"init", l_init},
                                 {"readline", l_readline},
                                 {"call", l_call},
                                 {"add_history", l_add_history},
                                 {"save_history", l_save_history},
                                 {NULL, NULL}};
  lua_newtable(L);
  luaL_register(L, NULL, fns);
#ifdef LUON_HAVE_LIBEDIT
  lua_pushboolean(L, 1);
#else
  lua_pushboolean(L, 0);
#endif
  lua_setfield(L, -2, "libedit"); /* built with line editing */
  return 1;
}

/* docall for a script or -e code, with Ctrl-C stopping it (see above) */
static int run_script(lua_State *L, int narg) {
  struct sigaction sa, old_int, old_alrm;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, &old_int);
  if (old_int.sa_handler == SIG_IGN) sigaction(SIGINT, &old_int, NULL); /* started by sh with &: stays immune */
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, &old_alrm);
  repl_L = L;
  presses = 0;
  running = 2;
  int status = docall(L, narg, 0);
  running = 0;
  luon_interrupt_clear(); /* for what runs after: finalizers, the REPL of -i */
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  sigaction(SIGALRM, &old_alrm, NULL);
  sigaction(SIGINT, &old_int, NULL);
  lua_sethook(L, NULL, 0, 0);
  return status;
}

/* export NAME='value;;' for sh, a quote in value written as '\'' */
static void print_export(const char *name, const char *value) {
  printf("export %s='", name);
  for (const char *c = value; *c; c++) {
    if (*c == '\'') fputs("'\\''", stdout);
    else putchar(*c);
  }
  printf(";;'\n");
}

static void usage(void) {
  fprintf(stderr,
          "usage: luon [options] [script [args...]]   (script '-': standard input)\n"
          "  -e code   run a string\n"
          "  -i        open the REPL after the script\n"
          "  --env     print LUA_PATH and LUA_CPATH lines for plain luajit\n"
          "  -h        this help\n"
          "With no script, luon starts the REPL.\n");
}

/* The profiler (jitstop.c) stops before its state goes. */
static void close_state(lua_State *L, int jitstop) {
  lu_jitstop_end(L, jitstop);
  lua_close(L);
}

int main(int argc, char **argv) {
  char paths[20000], cpaths[5000];
  lua_dirs(paths, sizeof paths, cpaths, sizeof cpaths);
  int i = 1, interactive = 0, ran = 0;
  lua_State *L = luaL_newstate();
  if (!L) {
    fprintf(stderr, "luon: cannot create a Lua state (out of memory)\n");
    return 1;
  }
  luaL_openlibs(L);
  int jitstop = lu_jitstop_start(L, 1);
  lu_add_lua_dirs(L, paths, cpaths); /* ours first, then whatever LUA_PATH gave */
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, open_repl_native);
  lua_setfield(L, -2, "luon.repl_native");
  lua_pop(L, 2);

  for (; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--env") == 0) {
      print_export("LUA_PATH", paths);
      print_export("LUA_CPATH", cpaths);
      close_state(L, jitstop);
      return 0;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage();
      close_state(L, jitstop);
      return 0;
    } else if (strcmp(a, "-i") == 0) {
      interactive = 1;
    } else if (strcmp(a, "-e") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "luon: -e needs a string of Lua code after it\n");
        usage();
        close_state(L, jitstop);
        return 1;
      }
      ran = 1;
      int st = luaL_loadbuffer(L, argv[i + 1], strlen(argv[i + 1]), "=(command line)");
      if (st == 0) st = run_script(L, 0);
      if (report(L, st)) {
        close_state(L, jitstop);
        return interrupted ? 130 : 1;
      }
      i++;
    } else if (strcmp(a, "--") == 0) {
      i++;
      break;
    } else if (a[0] == '-' && a[1] != 0) {
      fprintf(stderr, "luon: unknown option %s\n", a);
      usage();
      close_state(L, jitstop);
      return 1;
    } else {
      break;
    }
  }

  int status = 0;
  if (i < argc) { /* a script: arg[0] is its name, arg[1..] its arguments */
    ran = 1;
    lua_createtable(L, argc - i - 1, i + 1);
    for (int k = 0; k < argc; k++) {
      lua_pushstring(L, argv[k]);
      lua_rawseti(L, -2, k - i);
    }
    lua_setglobal(L, "arg");
    status = luaL_loadfile(L, strcmp(argv[i], "-") == 0 ? NULL : argv[i]); /* "-": stdin, as lua */
    if (status == 0) {
      for (int k = i + 1; k < argc; k++) lua_pushstring(L, argv[k]);
      status = run_script(L, argc - i - 1);
    }
    report(L, status);
  }
  int stopped = status != 0 && interrupted; /* by Ctrl-C: exit 130 */
  /* -i opens the REPL even after a failed script, with what it left behind */
  if ((status == 0 && !ran) || interactive) {
    lua_getglobal(L, "require");
    lua_pushstring(L, "luon.repl");
    status = docall(L, 1, 1);
    if (status == 0) {
      lua_getfield(L, -1, "run");
      lua_remove(L, -2);
      status = docall(L, 0, 0);
    }
    report(L, status);
  }
  close_state(L, jitstop);
  if (stopped && !interactive) return 130;
  return status ? 1 : 0;
}
