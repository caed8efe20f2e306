/* safetensors.c: checkpoints as safetensors files. Saving writes a new file
 * beside the old one and renames it into place (lu_wfile, file.c). Opening
 * validates the whole header (JSON syntax, fields, dtypes, shapes, offsets,
 * names) before any tensor is made; tensors are then read with pread, no
 * mmap. The header's JSON is parsed by cJSON, around which this file checks
 * what cJSON lets through (see "reading: the header"). */
#include "internal.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_HEADER (100u * 1024u * 1024u) /* a larger header is not a safetensors file */
#define MAX_DEPTH 64                       /* nesting of __metadata__ values */
#define MAX_VALUES (4u << 20)              /* keys and values: cJSON's tree is ~64 bytes each */

/* ORDER luon_dtype: safetensors' names of luon's dtypes. */
static const char *const st_dtype[LUON_DTYPE_COUNT] = {NULL, "F32", "F64", "F16", "BF16",
                                                       "I32", "I64", "U8", "BOOL", "I8", "I16", "U16"};

static const char *errstr(int e, char *buf, size_t n) { return strerror_r(e, buf, n); }

/* "safetensors: <path>: <detail>" with status s. */
static luon_status vfail(luon_status s, const char *path, const char *fmt, va_list ap) {
  char detail[800];
  vsnprintf(detail, sizeof detail, fmt, ap);
  return lu_error(s, "safetensors: %s: %s", path, detail);
}

static luon_status fail(luon_status s, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static luon_status fail(luon_status s, const char *path, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  s = vfail(s, path, fmt, ap);
  va_end(ap);
  return s;
}

static bool little_endian(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* ---- writing ------------------------------------------------------------- */

typedef struct sbuf {
  char *p;
  size_t n, cap;
  bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_int(sbuf *b, long long v) {
  char t[32];
  int k = snprintf(t, sizeof t, "%lld", v);
  sb_put(b, t, (size_t)k);
}

/* s as a JSON string: quotes, backslashes and control characters escaped;
 * other bytes (UTF-8) as they are. */
static void sb_json_string(sbuf *b, const char *s) {
  sb_put(b, "\"", 1);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\') {
      char e[2] = {'\\', (char)*c};
      sb_put(b, e, 2);
    } else if (*c < 0x20) {
      char e[8];
      snprintf(e, sizeof e, "\\u%04x", *c);
      sb_put(b, e, 6);
    } else {
      sb_put(b, (const char *)c, 1);
    }
  }
  sb_put(b, "\"", 1);
}

static int cmp_str_ptr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The JSON header, padded with spaces so that the data starts 8-aligned. */
static luon_status build_header(const char *path, int32_t n, const char *const *names,
                                const luon_tensor_info *info, sbuf *h) {
  sb_str(h, "{\"__metadata__\":{\"format\":\"luon\"}");
  uint64_t off = 0;
  for (int32_t i = 0; i < n; i++) {
    uint64_t bytes = (uint64_t)info[i].size * (uint64_t)luon_dtype_size(info[i].dtype);
    sb_str(h, ",");
    sb_json_string(h, names[i]);
    sb_str(h, ":{\"dtype\":\"");
    sb_str(h, st_dtype[info[i].dtype]);
    sb_str(h, "\",\"shape\":[");
    for (int d = 0; d < info[i].ndim; d++) {
      if (d) sb_str(h, ",");
      sb_int(h, (long long)info[i].shape[d]);
    }
    sb_str(h, "],\"data_offsets\":[");
    sb_int(h, (long long)off);
    sb_str(h, ",");
    sb_int(h, (long long)(off + bytes));
    sb_str(h, "]}");
    off += bytes;
  }
  sb_str(h, "}");
  while (!h->oom && (8 + h->n) % 8 != 0) sb_str(h, " ");
  if (h->oom) return fail(LUON_ENOMEM, path, "out of host memory for the header");
  if (h->n > MAX_HEADER)
    return fail(LUON_EINVAL, path, "the header would take %zu bytes, more than the 100 MB readers accept",
                h->n);
  return LUON_OK;
}

/* Check the arguments and read every tensor's info. */
static luon_status check_save_args(const char *path, int32_t n, const char *const *names,
                                   luon_tensor *const *tensors, luon_tensor_info *info) {
  for (int32_t i = 0; i < n; i++) {
    if (!names[i] || !names[i][0])
      return fail(LUON_EINVAL, path, "tensor %d has no name", (int)i);
    if (strcmp(names[i], "__metadata__") == 0)
      return fail(LUON_EINVAL, path, "'__metadata__' is reserved and cannot name a tensor");
    if (!tensors[i]) return fail(LUON_EINVAL, path, "tensor '%.200s' is NULL", names[i]);
    LU_TRY(luon_tensor_info_get(tensors[i], &info[i]));
    if (info[i].dtype <= 0 || info[i].dtype >= LUON_DTYPE_COUNT)
      return fail(LUON_EDTYPE, path, "tensor '%.200s' has unknown dtype %d", names[i], (int)info[i].dtype);
  }
  const char **sorted = malloc(sizeof *sorted * (size_t)(n ? n : 1));
  if (!sorted) return fail(LUON_ENOMEM, path, "out of host memory");
  if (n > 0) memcpy(sorted, names, sizeof *sorted * (size_t)n);
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_str_ptr);
  luon_status s = LUON_OK;
  for (int32_t i = 1; i < n && s == LUON_OK; i++)
    if (strcmp(sorted[i - 1], sorted[i]) == 0)
      s = fail(LUON_EINVAL, path, "two tensors are named '%.200s'", sorted[i]);
  free(sorted);
  return s;
}

/* Write header and data to the new file f. */
static luon_status write_file(lu_wfile *f, const char *path, int32_t n, luon_tensor *const *tensors,
                              const luon_tensor_info *info, const sbuf *h) {
  unsigned char len[8];
  for (int k = 0; k < 8; k++) len[k] = (unsigned char)((uint64_t)h->n >> (8 * k));
  LU_TRY(lu_wfile_write(f, len, 8));
  LU_TRY(lu_wfile_write(f, h->p, h->n));
  size_t cap = 0;
  void *buf = NULL;
  luon_status s = LUON_OK;
  for (int32_t i = 0; i < n && s == LUON_OK; i++) {
    size_t bytes = (size_t)info[i].size * (size_t)luon_dtype_size(info[i].dtype);
    if (bytes == 0) continue;
    if (bytes > cap) {
      free(buf);
      buf = malloc(bytes);
      cap = buf ? bytes : 0;
      if (!buf) {
        s = fail(LUON_ENOMEM, path, "out of host memory for %zu bytes of tensor %d", bytes, (int)i);
        break;
      }
    }
    s = luon_tensor_to_host(tensors[i], buf, info[i].dtype, bytes);
    if (s == LUON_OK) s = lu_wfile_write(f, buf, bytes);
  }
  free(buf);
  return s;
}

luon_status luon_safetensors_save(const char *path, int32_t n, const char *const *names,
                                  luon_tensor *const *tensors) {
  if (!path || !path[0]) return lu_error(LUON_EINVAL, "safetensors: save: no file name given");
  if (n < 0 || (n > 0 && (!names || !tensors)))
    return fail(LUON_EINVAL, path, "save: %d tensors with %s names and %s tensors", (int)n,
                names ? "some" : "no", tensors ? "some" : "no");
  if (!little_endian())
    return fail(LUON_EUNSUPPORTED, path, "writing safetensors on a big-endian host is not supported");
  luon_tensor_info *info = malloc(sizeof *info * (size_t)(n ? n : 1));
  if (!info) return fail(LUON_ENOMEM, path, "out of host memory");
  sbuf h = {0};
  luon_status s = check_save_args(path, n, names, tensors, info);
  if (s == LUON_OK) s = build_header(path, n, names, info, &h);
  lu_wfile f;
  if (s == LUON_OK) s = lu_wfile_open(&f, "safetensors", path);
  if (s == LUON_OK) {
    s = write_file(&f, path, n, tensors, info, &h);
    if (s == LUON_OK) s = lu_wfile_commit(&f);
    else lu_wfile_abort(&f);
  }
  free(h.p);
  free(info);
  return s;
}

/* ---- reading ---------------------------------------------------------------- */

typedef struct st_entry {
  char *name;
  int32_t dtype;
  int32_t ndim;
  int64_t shape[LU_MAXD];
  uint64_t begin, end;
} st_entry;

struct luon_safetensors {
  int fd;
  char *path;
  uint64_t data_start; /* 8 + header length */
  uint64_t data_size;
  int32_t n;
  st_entry *e;
};

static void free_entries(st_entry *e, int32_t n) {
  for (int32_t i = 0; i < n; i++) free(e[i].name);
  free(e);
}

/* ---- reading: the header ---------------------------------------------------
 * cJSON parses the header's structure. What it is lenient about, and
 * safetensors is not, is checked around it:
 *  - the tokens, by scan() before cJSON sees the text: between tokens only
 *    JSON's four whitespace bytes (cJSON skips any byte up to 32 and a
 *    UTF-8 byte-order mark); strings without control characters, with
 *    known escapes, four hex digits after \u (cJSON reads bad ones as 0),
 *    whole surrogate pairs and no \u0000 (which would cut a name short);
 *    numbers of JSON's form (cJSON takes "1." or "-.5" through strtod);
 *    nesting no deeper than the metadata's MAX_DEPTH levels; at most
 *    MAX_VALUES keys and values (a model's header has tens of thousands;
 *    "[0,0,0,...]" filling MAX_HEADER would cost cJSON gigabytes);
 *  - numbers, read by scan() from the text itself: cJSON keeps a double,
 *    which is not exact past 2^53 and has no "leading zero" or "fraction".
 *    cJSON parses a copy of the text with "0" and spaces in each number's
 *    place, so it never reads a number (nor one longer than its 63-byte
 *    buffer), and after the parse each number item's valueint is set to
 *    its index in the scanned list: both meet the numbers in document order;
 *  - keys: cJSON keeps duplicates as siblings (and its lookup ignores
 *    case), so the walk compares keys itself: a field twice or
 *    __metadata__ twice is refused here, a tensor named twice by
 *    check_entries. */

/* A number of the header: its value when it is an integer (form NUM_INT). */
enum { NUM_INT, NUM_FRACTION, NUM_LEADING_ZERO, NUM_TOO_LARGE };
typedef struct st_num {
  int64_t v;
  uint32_t pos; /* where it starts in the header */
  uint8_t form;
} st_num;

typedef struct st_reader {
  const char *path;
  st_num *num;
  size_t nnum, cap;
  luon_status err; /* the first error wins */
} st_reader;

/* A syntax error at byte pos of the header (counted from the file's start). */
static bool syntax(st_reader *H, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool syntax(st_reader *H, size_t pos, const char *fmt, ...) {
  if (H->err != LUON_OK) return false;
  char detail[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  H->err = fail(LUON_EFORMAT, H->path, "malformed header at byte %llu: %s", (unsigned long long)pos + 8,
                detail);
  return false;
}

/* An error about the header's contents (not its syntax). */
static bool bad(st_reader *H, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool bad(st_reader *H, const char *fmt, ...) {
  if (H->err != LUON_OK) return false;
  char detail[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  H->err = fail(LUON_EFORMAT, H->path, "%s", detail);
  return false;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static bool hex4(const char *t, size_t n, size_t i, uint32_t *v) {
  if (i > n || n - i < 4) return false;
  uint32_t x = 0;
  for (int k = 0; k < 4; k++) {
    char c = t[i + k];
    int h = is_digit(c) ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (h < 0) return false;
    x = x * 16 + (uint32_t)h;
  }
  *v = x;
  return true;
}

/* The string whose opening quote is at *at; *at moves past its closing one. */
static bool scan_string(st_reader *H, const char *t, size_t n, size_t *at) {
  size_t i = *at + 1;
  for (;;) {
    if (i >= n) return syntax(H, *at, "a string is not terminated");
    unsigned char c = (unsigned char)t[i];
    if (c == '"') break;
    if (c < 0x20) return syntax(H, i, "a control character (0x%02x) inside a string", c);
    if (c != '\\') {
      i++;
      continue;
    }
    if (i + 1 >= n) return syntax(H, *at, "a string is not terminated");
    char e = t[i + 1];
    if (e != 'u') {
      if (!e || !strchr("\"\\/bfnrt", e)) return syntax(H, i, "unknown escape '\\%c' in a string", e);
      i += 2;
      continue;
    }
    uint32_t cp, lo;
    if (!hex4(t, n, i + 2, &cp)) return syntax(H, i, "a \\u escape needs four hex digits");
    if (cp == 0) return syntax(H, i, "a NUL character (\\u0000) in a string");
    if (cp >= 0xDC00 && cp <= 0xDFFF) return syntax(H, i, "a lone low surrogate \\u%04x in a string", cp);
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (n - i < 8 || t[i + 6] != '\\' || t[i + 7] != 'u')
        return syntax(H, i, "a high surrogate \\u%04x without its low half", cp);
      if (!hex4(t, n, i + 8, &lo)) return syntax(H, i + 6, "a \\u escape needs four hex digits");
      if (lo < 0xDC00 || lo > 0xDFFF)
        return syntax(H, i, "a high surrogate \\u%04x followed by \\u%04x", cp, lo);
      i += 6;
    }
    i += 6;
  }
  *at = i + 1;
  return true;
}

static bool is_num_char(char c) {
  return is_digit(c) || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

/* The number t[b, e): -?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?, classified; false
 * if it has not that form. */
static bool read_number(const char *t, size_t b, size_t e, st_num *x) {
  size_t k = b;
  bool neg = t[k] == '-';
  k += neg;
  size_t d0 = k;
  uint64_t v = 0;
  bool big = false;
  for (; k < e && is_digit(t[k]); k++) {
    unsigned d = (unsigned)(t[k] - '0');
    if (v > ((uint64_t)INT64_MAX - d) / 10) big = true;
    else v = v * 10 + d;
  }
  if (k == d0) return false;
  bool zero = t[d0] == '0' && k - d0 > 1, frac = false;
  if (k < e && t[k] == '.') {
    size_t f0 = ++k;
    while (k < e && is_digit(t[k])) k++;
    if (k == f0) return false;
    frac = true;
  }
  if (k < e && (t[k] == 'e' || t[k] == 'E')) {
    k++;
    if (k < e && (t[k] == '+' || t[k] == '-')) k++;
    size_t x0 = k;
    while (k < e && is_digit(t[k])) k++;
    if (k == x0) return false;
    frac = true;
  }
  if (k != e) return false;
  x->pos = (uint32_t)b;
  x->form = zero ? NUM_LEADING_ZERO : big ? NUM_TOO_LARGE : frac ? NUM_FRACTION : NUM_INT;
  x->v = neg ? -(int64_t)v : (int64_t)v;
  return true;
}

/* The tokens of the header t (n bytes), before cJSON: see the comment above.
 * Numbers go to H->num; json, a copy of t, gets "0" and spaces in their place. */
static bool scan(st_reader *H, const char *t, char *json, size_t n) {
  int depth = 0;
  size_t values = 0;
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)t[i];
    /* a key or value starts: a string, object, list, number, true, false, null */
    bool starts = c == '"' || c == '{' || c == '[' || c == '-' || is_digit((char)c) || c == 't' ||
                  c == 'f' || c == 'n';
    if (starts && ++values > MAX_VALUES) return syntax(H, i, "more than %u keys and values", MAX_VALUES);
    if (is_ws((char)c)) {
      i++;
    } else if (c == '"') {
      if (!scan_string(H, t, n, &i)) return false;
    } else if (c == '{' || c == '[') {
      /* the metadata object sits at depth 2, its values below it */
      if (++depth > MAX_DEPTH + 2) return syntax(H, i, "values nested more than %d deep", MAX_DEPTH);
      i++;
    } else if (c == '}' || c == ']') {
      depth--;
      i++;
    } else if (c == '-' || is_digit((char)c)) {
      size_t b = i;
      while (i < n && is_num_char(t[i])) i++;
      if (H->nnum == H->cap) {
        size_t cap = H->cap ? 2 * H->cap : 64;
        st_num *p = realloc(H->num, sizeof *p * cap);
        if (!p) {
          H->err = fail(LUON_ENOMEM, H->path, "out of host memory reading the header");
          return false;
        }
        H->num = p;
        H->cap = cap;
      }
      if (!read_number(t, b, i, &H->num[H->nnum])) return syntax(H, b, "a malformed number");
      H->nnum++;
      json[b] = '0';
      memset(json + b + 1, ' ', i - b - 1);
    } else if (c < 0x20 || c > 0x7e) {
      return syntax(H, i, "unexpected byte 0x%02x", c);
    } else {
      i++; /* punctuation and the words true, false, null: cJSON's to judge */
    }
  }
  return true;
}

/* Each number item's index in H->num, in document order (into valueint). */
static void number_items(cJSON *c, size_t *k) {
  for (; c; c = c->next) {
    if (cJSON_IsNumber(c)) c->valueint = (int)(*k)++;
    else number_items(c->child, k);
  }
}

static const char *json_kind(const cJSON *v) {
  return cJSON_IsString(v) ? "a string" : cJSON_IsNumber(v) ? "a number" : cJSON_IsArray(v) ? "a list"
       : cJSON_IsObject(v) ? "an object" : cJSON_IsBool(v) ? "a boolean" : "null";
}

/* An integer of tensor `name`'s `field`. */
static bool read_int(st_reader *H, const cJSON *v, const char *name, const char *field, int64_t *out) {
  if (!cJSON_IsNumber(v))
    return bad(H, "tensor '%.200s' has %s in its %s: expected an integer", name, json_kind(v), field);
  const st_num *x = &H->num[v->valueint];
  switch (x->form) {
  case NUM_INT: *out = x->v; return true;
  case NUM_LEADING_ZERO: return syntax(H, x->pos, "an integer with a leading zero");
  case NUM_TOO_LARGE: return syntax(H, x->pos, "an integer too large for 64 bits");
  default: return syntax(H, x->pos, "expected an integer, found a fraction or exponent");
  }
}

/* A list of integers into v (at most max); *count its length. */
static bool read_int_list(st_reader *H, const cJSON *list, int64_t *v, int max, int *count, const char *name,
                          const char *field) {
  if (!cJSON_IsArray(list))
    return bad(H, "tensor '%.200s' has %s for its %s: expected a list of integers", name, json_kind(list),
               field);
  *count = 0;
  for (const cJSON *c = list->child; c; c = c->next) {
    int64_t x = 0;
    if (!read_int(H, c, name, field, &x)) return false;
    if (*count >= max) return bad(H, "tensor '%.200s' has more than %d entries in its %s", name, max, field);
    v[(*count)++] = x;
  }
  return true;
}

/* One tensor's entry {"dtype": .., "shape": [..], "data_offsets": [b, e]}. */
static bool read_entry(st_reader *H, const cJSON *entry, st_entry *e) {
  if (!cJSON_IsObject(entry))
    return bad(H, "tensor '%.200s' has %s for its entry: expected '{' opening the entry of a tensor", e->name,
               json_kind(entry));
  if (!entry->child) return bad(H, "tensor '%.200s' has an empty entry", e->name);
  int seen = 0; /* bits: 1 dtype, 2 shape, 4 data_offsets */
  for (const cJSON *f = entry->child; f; f = f->next) {
    const char *key = f->string;
    int bit = strcmp(key, "dtype") == 0 ? 1 : strcmp(key, "shape") == 0 ? 2
            : strcmp(key, "data_offsets") == 0 ? 4 : 0;
    if (!bit) return bad(H, "tensor '%.200s' has an unknown field '%.100s'", e->name, key);
    if (seen & bit) return bad(H, "tensor '%.200s' has field '%s' twice", e->name, key);
    seen |= bit;
    if (bit == 1) {
      if (!cJSON_IsString(f))
        return bad(H, "tensor '%.200s' has %s for its dtype: expected a string", e->name, json_kind(f));
      for (int k = 1; k < LUON_DTYPE_COUNT; k++)
        if (strcmp(f->valuestring, st_dtype[k]) == 0) e->dtype = k;
      if (!e->dtype)
        return bad(H, "tensor '%.200s' has dtype '%.40s', which luon does not read "
                      "(F32, F64, F16, BF16, I32, I64, I16, I8, U16, U8, BOOL)", e->name, f->valuestring);
    } else if (bit == 2) {
      int nd;
      if (!read_int_list(H, f, e->shape, LU_MAXD, &nd, e->name, "shape")) return false;
      e->ndim = nd;
      for (int d = 0; d < nd; d++)
        if (e->shape[d] < 0)
          return bad(H, "tensor '%.200s' has a negative dimension (%lld) in its shape", e->name,
                     (long long)e->shape[d]);
    } else {
      int64_t o[2];
      int no;
      if (!read_int_list(H, f, o, 2, &no, e->name, "data_offsets")) return false;
      if (no != 2)
        return bad(H, "tensor '%.200s' has %d data_offsets, expected 2 (begin, end)", e->name, no);
      if (o[0] < 0 || o[1] < 0)
        return bad(H, "tensor '%.200s' has negative data_offsets [%lld, %lld]", e->name, (long long)o[0],
                   (long long)o[1]);
      if (o[0] > o[1])
        return bad(H, "tensor '%.200s' has data_offsets [%lld, %lld] that end before they begin", e->name,
                   (long long)o[0], (long long)o[1]);
      e->begin = (uint64_t)o[0];
      e->end = (uint64_t)o[1];
    }
  }
  if (seen != 7)
    return bad(H, "tensor '%.200s' lacks its %s", e->name,
               !(seen & 1) ? "dtype" : !(seen & 2) ? "shape" : "data_offsets");
  return true;
}

/* The whole header (t, n bytes): fills *entries / *count (freed by the
 * caller also on failure). */
static bool parse_header(st_reader *H, const char *t, size_t n, st_entry **entries, int32_t *count) {
  char *json = malloc(n + 1);
  if (!json) {
    H->err = fail(LUON_ENOMEM, H->path, "out of host memory for a %zu-byte header", n);
    return false;
  }
  memcpy(json, t, n);
  json[n] = 0;
  const char *end = NULL;
  cJSON *root = scan(H, t, json, n) ? cJSON_ParseWithLengthOpts(json, n, &end, 0) : NULL;
  end = end ? t + (end - json) : NULL; /* the same place in t */
  free(json);
  if (H->err != LUON_OK) return false;
  if (!root) {
    size_t at = end && end >= t && end <= t + n ? (size_t)(end - t) : 0, k = at + 24 < n ? at + 24 : n;
    if (at + 1 >= n) return syntax(H, at, "the JSON is cut short or its last byte is wrong");
    return syntax(H, at, "not valid JSON at '%.*s'%s", (int)(k - at), t + at, k < n ? "..." : "");
  }
  bool ok = true;
  size_t k = 0;
  while (k < n && is_ws(t[k])) k++;
  if (!cJSON_IsObject(root)) {
    ok = syntax(H, k, "expected '{' opening the header, found %s", json_kind(root));
  } else {
    for (k = (size_t)(end - t); k < n && is_ws(t[k]); k++) {}
    if (k < n) ok = syntax(H, k, "unexpected text after the header's closing '}'");
  }
  size_t nn = 0;
  if (ok) number_items(root, &nn);
  if (ok && nn != H->nnum) ok = syntax(H, 0, "its numbers could not be read");
  int32_t cap = 0;
  for (const cJSON *c = ok ? root->child : NULL; c; c = c->next) cap++;
  if (ok && !(*entries = calloc(cap ? (size_t)cap : 1, sizeof **entries))) {
    H->err = fail(LUON_ENOMEM, H->path, "out of host memory for the tensor list");
    ok = false;
  }
  bool meta = false;
  for (const cJSON *c = ok ? root->child : NULL; c && ok; c = c->next) {
    if (strcmp(c->string, "__metadata__") == 0) {
      if (meta) ok = bad(H, "'__metadata__' appears twice");
      else if (!cJSON_IsObject(c)) ok = bad(H, "'__metadata__' must be an object");
      meta = true;
      continue;
    }
    st_entry *e = &(*entries)[(*count)++];
    if (!(e->name = strdup(c->string))) {
      H->err = fail(LUON_ENOMEM, H->path, "out of host memory reading the header");
      ok = false;
    } else {
      ok = read_entry(H, c, e);
    }
  }
  cJSON_Delete(root);
  return ok;
}

static int cmp_entry_name(const void *a, const void *b) {
  return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}

static int cmp_entry_offset(const void *a, const void *b) {
  const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

/* Sizes, bounds, duplicates, overlaps and holes of the parsed entries. */
static luon_status check_entries(const char *path, st_entry *e, int32_t n, uint64_t data_size) {
  for (int32_t i = 0; i < n; i++) {
    /* span: the size with zero dimensions taken as 1, which bounds the
     * strides of an empty tensor too */
    uint64_t need = (uint64_t)luon_dtype_size(e[i].dtype), span = need;
    bool overflow = false;
    for (int d = 0; d < e[i].ndim; d++) {
      uint64_t dim = (uint64_t)e[i].shape[d];
      overflow |= __builtin_mul_overflow(need, dim, &need);
      overflow |= __builtin_mul_overflow(span, dim > 1 ? dim : 1, &span);
    }
    if (overflow || span > (uint64_t)INT64_MAX / 16)
      return fail(LUON_EFORMAT, path, "tensor '%.200s' has shape %s, too large", e[i].name,
                  lu_shape_str(e[i].ndim, e[i].shape));
    if (need != e[i].end - e[i].begin)
      return fail(LUON_EFORMAT, path,
                  "tensor '%.200s' needs %llu bytes (%s, shape %s) but its data_offsets span %llu",
                  e[i].name, (unsigned long long)need, st_dtype[e[i].dtype],
                  lu_shape_str(e[i].ndim, e[i].shape), (unsigned long long)(e[i].end - e[i].begin));
    if (e[i].end > data_size)
      return fail(LUON_EFORMAT, path,
                  "tensor '%.200s' has data_offsets [%llu, %llu] past the end of the data (%llu bytes)",
                  e[i].name, (unsigned long long)e[i].begin, (unsigned long long)e[i].end,
                  (unsigned long long)data_size);
  }
  st_entry **by = malloc(sizeof *by * (size_t)(n ? n : 1));
  if (!by) return fail(LUON_ENOMEM, path, "out of host memory");
  for (int32_t i = 0; i < n; i++) by[i] = &e[i];
  luon_status s = LUON_OK;
  qsort(by, (size_t)n, sizeof *by, cmp_entry_name);
  for (int32_t i = 1; i < n && s == LUON_OK; i++)
    if (strcmp(by[i - 1]->name, by[i]->name) == 0)
      s = fail(LUON_EFORMAT, path, "two tensors are named '%.200s'", by[i]->name);
  if (s == LUON_OK) qsort(by, (size_t)n, sizeof *by, cmp_entry_offset);
  uint64_t covered = 0;
  for (int32_t i = 0; i < n && s == LUON_OK; i++) {
    if (i > 0 && by[i]->begin < by[i - 1]->end)
      s = fail(LUON_EFORMAT, path, "tensors '%.200s' and '%.200s' overlap (bytes [%llu, %llu) and [%llu, %llu))",
               by[i - 1]->name, by[i]->name, (unsigned long long)by[i - 1]->begin,
               (unsigned long long)by[i - 1]->end, (unsigned long long)by[i]->begin,
               (unsigned long long)by[i]->end);
    else if (by[i]->begin > covered)
      s = fail(LUON_EFORMAT, path, "bytes [%llu, %llu) of the data belong to no tensor",
               (unsigned long long)covered, (unsigned long long)by[i]->begin);
    else if (by[i]->end > covered)
      covered = by[i]->end;
  }
  if (s == LUON_OK && covered != data_size)
    s = fail(LUON_EFORMAT, path, "the data section has %llu bytes but the tensors cover %llu",
             (unsigned long long)data_size, (unsigned long long)covered);
  free(by);
  return s;
}

/* Read exactly n bytes at offset off. */
static luon_status read_at(int fd, void *dst, uint64_t n, uint64_t off, const char *path) {
  char *p = dst;
  while (n > 0) {
    ssize_t r = pread(fd, p, n > (1u << 30) ? (1u << 30) : (size_t)n, (off_t)off);
    if (r < 0) {
      if (errno == EINTR) continue;
      char e[128];
      return fail(LUON_EIO, path, "cannot read: %s", errstr(errno, e, sizeof e));
    }
    if (r == 0)
      return fail(LUON_EFORMAT, path, "the file ends %llu bytes early (was it changed while open?)",
                  (unsigned long long)n);
    p += r;
    n -= (uint64_t)r;
    off += (uint64_t)r;
  }
  return LUON_OK;
}

luon_status luon_safetensors_open(const char *path, luon_safetensors **out) {
  if (!out) return lu_error(LUON_EINVAL, "safetensors: open: NULL output pointer");
  *out = NULL;
  if (!path || !path[0]) return lu_error(LUON_EINVAL, "safetensors: open: no file name given");
  if (!little_endian())
    return fail(LUON_EUNSUPPORTED, path, "reading safetensors on a big-endian host is not supported");
  uint64_t size = 0;
  int fd = lu_open_regular(path, &size);
  if (fd < 0) {
    char e[128];
    if (errno) return fail(LUON_EIO, path, "cannot open: %s", errstr(errno, e, sizeof e));
    return fail(LUON_EIO, path, "not a regular file");
  }
  luon_status s = LUON_OK;
  unsigned char len8[8];
  uint64_t hlen = 0;
  char *header = NULL;
  st_entry *entries = NULL;
  int32_t n = 0;
  if (size < 8) s = fail(LUON_EFORMAT, path, "the file has %llu bytes, fewer than the 8 of a "
                         "safetensors header length", (unsigned long long)size);
  if (s == LUON_OK) s = read_at(fd, len8, 8, 0, path);
  if (s == LUON_OK) {
    for (int k = 0; k < 8; k++) hlen |= (uint64_t)len8[k] << (8 * k);
    if (hlen == 0x112) /* kMXAPINDArrayListMagic: MXNet's NDArray list */
      s = fail(LUON_EFORMAT, path, "this is an MXNet .params file (MXNet's own binary format), not "
               "safetensors; luon reads it in Lua (luon.mxparams, through serialize.load and "
               "Block:load_parameters), not through this C reader");
    else if (hlen > MAX_HEADER)
      s = fail(LUON_EFORMAT, path, "header length %llu is absurd (more than 100 MB): "
               "not a safetensors file?", (unsigned long long)hlen);
    else if (hlen > size - 8)
      s = fail(LUON_EFORMAT, path, "header length %llu runs past the end of the file (%llu bytes)",
               (unsigned long long)hlen, (unsigned long long)size);
  }
  if (s == LUON_OK) {
    header = malloc(hlen + 1);
    if (!header) s = fail(LUON_ENOMEM, path, "out of host memory for a %llu-byte header",
                          (unsigned long long)hlen);
  }
  if (s == LUON_OK) s = read_at(fd, header, hlen, 8, path);
  if (s == LUON_OK) {
    st_reader H = {path, NULL, 0, 0, LUON_OK};
    if (!parse_header(&H, header, hlen, &entries, &n)) s = H.err;
    free(H.num);
  }
  if (s == LUON_OK) s = check_entries(path, entries, n, size - 8 - hlen);
  luon_safetensors *h = NULL;
  if (s == LUON_OK) {
    h = calloc(1, sizeof *h);
    char *p = malloc(strlen(path) + 1);
    if (!h || !p) {
      free(h);
      free(p);
      h = NULL;
      s = fail(LUON_ENOMEM, path, "out of host memory");
    } else {
      strcpy(p, path);
      *h = (luon_safetensors){fd, p, 8 + hlen, size - 8 - hlen, n, entries};
    }
  }
  free(header);
  if (s != LUON_OK) {
    free_entries(entries, n);
    close(fd);
    return s;
  }
  *out = h;
  return LUON_OK;
}

int32_t luon_safetensors_count(const luon_safetensors *h) { return h ? h->n : 0; }

static bool valid_index(const luon_safetensors *h, int32_t i) {
  if (!h) {
    lu_error(LUON_EINVAL, "safetensors: NULL file handle");
    return false;
  }
  if (i < 0 || i >= h->n) {
    fail(LUON_EINVAL, h->path, "tensor index %d out of range (the file has %d tensors)", (int)i, (int)h->n);
    return false;
  }
  return true;
}

const char *luon_safetensors_name(const luon_safetensors *h, int32_t i) {
  return valid_index(h, i) ? h->e[i].name : NULL;
}

luon_status luon_safetensors_shape(const luon_safetensors *h, int32_t i, int32_t *dtype,
                                   int32_t *ndim, int64_t *shape) {
  if (!valid_index(h, i)) return LUON_EINVAL;
  const st_entry *e = &h->e[i];
  if (dtype) *dtype = e->dtype;
  if (ndim) *ndim = e->ndim;
  if (shape)
    for (int d = 0; d < e->ndim; d++) shape[d] = e->shape[d];
  return LUON_OK;
}

static void normalise_bool(unsigned char *p, uint64_t n) {
  for (uint64_t k = 0; k < n; k++) p[k] = p[k] != 0;
}

luon_status luon_safetensors_get(luon_safetensors *h, int32_t i, int32_t dev_type, int32_t dev_id,
                                 luon_tensor **out) {
  if (!out) return lu_error(LUON_EINVAL, "safetensors: get: NULL output pointer");
  *out = NULL;
  if (!valid_index(h, i)) return LUON_EINVAL;
  const st_entry *e = &h->e[i];
  uint64_t bytes = e->end - e->begin;
  luon_tensor *t = NULL;
  luon_status s;
  if (dev_type == LUON_CPU) {
    LU_TRY(luon_tensor_empty(e->dtype, e->ndim, e->shape, dev_type, dev_id, &t));
    s = read_at(h->fd, lu_data(t), bytes, h->data_start + e->begin, h->path);
    if (s == LUON_OK && e->dtype == LUON_DTYPE_BOOL) normalise_bool(lu_data(t), bytes);
  } else {
    LU_TRY(luon_device_check(dev_type, dev_id));
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf) return fail(LUON_ENOMEM, h->path, "out of host memory for %llu bytes of tensor '%.200s'",
                          (unsigned long long)bytes, e->name);
    s = read_at(h->fd, buf, bytes, h->data_start + e->begin, h->path);
    if (s == LUON_OK && e->dtype == LUON_DTYPE_BOOL) normalise_bool(buf, bytes);
    if (s == LUON_OK) s = luon_tensor_from_host(buf, e->dtype, e->ndim, e->shape, dev_type, dev_id, &t);
    free(buf);
  }
  if (s != LUON_OK) {
    luon_tensor_release(t);
    return s;
  }
  *out = t;
  return LUON_OK;
}

void luon_safetensors_close(luon_safetensors *h) {
  if (!h) return;
  close(h->fd);
  free_entries(h->e, h->n);
  free(h->path);
  free(h);
}
