/* testops.h: running one registry op by name in the C tests: op1 (NULL and
 * the status on failure), ok1 (must succeed), fails (status and message). */
#ifndef LUON_TESTOPS_H
#define LUON_TESTOPS_H

#include "luon.h"
#include "testutil.h"
#include <string.h>

/* Run op `name` with one output; NULL (status in *s) on failure. */
static luon_tensor *op1(const char *name, int nin, luon_tensor **in, const luon_attrs *a, luon_status *s) {
  luon_tensor *out[1] = {NULL};
  int32_t nout = 1;
  luon_status st = luon_op_call(luon_op_find(name), nin, in, a, &nout, out);
  if (s) *s = st;
  return st == LUON_OK ? out[0] : NULL;
}

static luon_tensor *ok1(const char *name, int nin, luon_tensor **in, const luon_attrs *a) {
  luon_status s;
  luon_tensor *t = op1(name, nin, in, a, &s);
  CHECK(s == LUON_OK, "%s: %s", name, luon_last_error());
  return t;
}

/* The call fails with status st and a message containing msg. */
static void fails(const char *name, int nin, luon_tensor **in, const luon_attrs *a, luon_status st,
                  const char *msg) {
  luon_status s;
  luon_tensor *t = op1(name, nin, in, a, &s);
  CHECK(s == st, "%s: status %d, expected %d (%s)", name, s, st, luon_last_error());
  CHECK(strstr(luon_last_error(), msg) != NULL, "%s: message '%s' lacks '%s'", name, luon_last_error(), msg);
  luon_tensor_release(t);
}

#endif
