/* testutil.h: the CHECK macro of the C tests. A failed check prints its
 * place and message to stderr and counts; main returns TEST_RESULT. */
#ifndef LUON_TESTUTIL_H
#define LUON_TESTUTIL_H

#include "luon.h"
#include <stdio.h>
#include <string.h>

static int test_failures;

#define CHECK(cond, ...)                                                      \
  do {                                                                        \
    if (!(cond)) {                                                            \
      test_failures++;                                                        \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);         \
      fprintf(stderr, __VA_ARGS__);                                           \
      fprintf(stderr, "\n");                                                  \
    }                                                                         \
  } while (0)

/* A call that must return LUON_OK; prints luon_last_error() when it does not. */
#define CHECK_OK(expr)                                                        \
  do {                                                                        \
    luon_status check_ok_s_ = (expr);                                         \
    CHECK(check_ok_s_ == LUON_OK, "status %d: %s", (int)check_ok_s_,          \
          luon_last_error());                                                 \
  } while (0)

/* The kernels' naive reference paths on or off (LUON_REF_KERNELS=1 read at
 * start; core/internal.h), to compare both in one process. */
void lu_set_ref_kernels(int on);

/* A named attribute slot's index (core/luon_ops.def), through the public
 * luon_attr_slot, for tests that build attributes without internal.h. */
static inline int test_slot(const char *name) {
  const char *n;
  int32_t index;
  for (int32_t k = 0; (n = luon_attr_slot(k, NULL, &index)) != NULL; k++)
    if (strcmp(n, name) == 0) return index;
  CHECK(0, "no attribute slot named %s", name);
  return 0;
}

#define TEST_RESULT (test_failures ? (fprintf(stderr, "%d check(s) failed\n", test_failures), 1) : 0)

#endif
