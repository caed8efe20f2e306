/* npy.c: NumPy's .npy and .npz files (npx.save, npx.savez, npx.load).
 * .npy: the magic "\x93NUMPY", a version (1.0, 2.0 or 3.0), the header's
 * length (2 bytes in 1.0, 4 after), the header, a Python dict literal
 * {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with
 * spaces and a newline so that the data starts on a 64-byte boundary, then
 * the raw data (row-major, or column-major when fortran_order). .npz: a zip
 * of .npy files named <key>.npy, read and written with libzip (stored, or
 * deflated for savez_compressed). Writing goes through lu_wfile (file.c): a
 * new file renamed into place, never a half file. Reading checks the whole
 * header (syntax, dtype, shape, the data's size against the file's) before
 * any tensor is made; byte-swapped (big-endian) data is swapped, Fortran
 * order transposed. Messages start "npy: <path>: " (npz: "npz: <path>: "). */
#include "internal.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <zip.h>

#define MAX_HEADER (1u << 20) /* NumPy writes a few hundred bytes; refuse anything absurd */

static luon_status vfail(luon_status s, const char *kind, const char *path, const char *fmt, va_list ap) {
  char detail[800];
  vsnprintf(detail, sizeof detail, fmt, ap);
  return lu_error(s, "%s: %s: %s", kind, path, detail);
}

static luon_status fail(luon_status s, const char *kind, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static luon_status fail(luon_status s, const char *kind, const char *path, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  s = vfail(s, kind, path, fmt, ap);
  va_end(ap);
  return s;
}

/* NumPy's type string (without byte order) of a luon dtype; NULL when NumPy
 * has none (bfloat16). */
static const char *npy_type(int32_t dtype) {
  switch (dtype) {
  case LUON_DTYPE_F32: return "f4";
  case LUON_DTYPE_F64: return "f8";
  case LUON_DTYPE_F16: return "f2";
  case LUON_DTYPE_I32: return "i4";
  case LUON_DTYPE_I64: return "i8";
  case LUON_DTYPE_U8: return "u1";
  case LUON_DTYPE_BOOL: return "b1";
  case LUON_DTYPE_I8: return "i1";
  case LUON_DTYPE_I16: return "i2";
  case LUON_DTYPE_U16: return "u2";
  default: return NULL;
  }
}

/* ---- writing ------------------------------------------------------------- */

/* The .npy bytes of t (header and data) in a new malloc'd buffer. */
static luon_status npy_bytes(const char *kind, const char *path, const char *name, const luon_tensor *t,
                             char **out, size_t *out_n) {
  *out = NULL;
  if (!t) return fail(LUON_EINVAL, kind, path, "%s%sthe array is NULL", name ? name : "", name ? ": " : "");
  luon_tensor_info info;
  LU_TRY(luon_tensor_info_get(t, &info));
  const char *ty = npy_type(info.dtype);
  if (!ty)
    return fail(LUON_EDTYPE, kind, path, "%s%s%s has no NumPy dtype (astype('float32') first)", name ? name : "",
                name ? ": " : "", luon_dtype_name(info.dtype));
  char shape[LU_MAXD * 24 + 8];
  size_t k = 0;
  shape[k++] = '(';
  for (int d = 0; d < info.ndim; d++)
    k += (size_t)snprintf(shape + k, sizeof shape - k, "%lld,%s", (long long)info.shape[d],
                          d + 1 < info.ndim ? " " : "");
  if (info.ndim > 1) k--; /* (2, 3) but (5,) */
  shape[k++] = ')';
  shape[k] = 0;
  char dict[LU_MAXD * 24 + 128];
  int dn = snprintf(dict, sizeof dict, "{'descr': '%c%s', 'fortran_order': False, 'shape': %s, }",
                    ty[1] == '1' ? '|' : '<', ty, shape);
  size_t pre = 10, hl = (size_t)dn + 1; /* magic, version, u16 length; dict, '\n' */
  hl += (64 - (pre + hl) % 64) % 64;
  size_t data = (size_t)info.size * (size_t)luon_dtype_size(info.dtype);
  char *b = malloc(pre + hl + (data ? data : 1));
  if (!b) return fail(LUON_ENOMEM, kind, path, "out of host memory for %zu bytes", pre + hl + data);
  memcpy(b, "\x93NUMPY\x01\x00", 8);
  b[8] = (char)(hl & 0xff);
  b[9] = (char)(hl >> 8);
  memcpy(b + pre, dict, (size_t)dn);
  memset(b + pre + dn, ' ', hl - (size_t)dn - 1);
  b[pre + hl - 1] = '\n';
  luon_status s = data ? luon_tensor_to_host(t, b + pre + hl, info.dtype, data) : LUON_OK;
  if (s != LUON_OK) {
    free(b);
    return s;
  }
  *out = b;
  *out_n = pre + hl + data;
  return LUON_OK;
}

static luon_status write_whole(const char *kind, const char *path, const void *p, size_t n) {
  lu_wfile f;
  LU_TRY(lu_wfile_open(&f, kind, path));
  luon_status s = lu_wfile_write(&f, p, n);
  if (s == LUON_OK) return lu_wfile_commit(&f);
  lu_wfile_abort(&f);
  return s;
}

luon_status luon_npy_save(const char *path, const luon_tensor *t) {
  if (!path || !path[0]) return lu_error(LUON_EINVAL, "npy: save: no file name given");
  char *b;
  size_t n;
  LU_TRY(npy_bytes("npy", path, NULL, t, &b, &n));
  luon_status s = write_whole("npy", path, b, n);
  free(b);
  return s;
}

static luon_status zip_fail(const char *path, const char *what, zip_error_t *ze) {
  luon_status s = fail(LUON_EIO, "npz", path, "%s: %s", what, zip_error_strerror(ze));
  zip_error_fini(ze);
  return s;
}

/* The archive in memory (libzip writing into a buffer source), then one
 * lu_wfile write, so that a killed save leaves the old file. */
luon_status luon_npz_save(const char *path, int32_t n, const char *const *names, luon_tensor *const *tensors,
                          int32_t compress) {
  if (!path || !path[0]) return lu_error(LUON_EINVAL, "npz: save: no file name given");
  if (n < 0 || (n > 0 && (!names || !tensors)))
    return fail(LUON_EINVAL, "npz", path, "save: %d arrays with %s names and %s arrays", (int)n,
                names ? "some" : "no", tensors ? "some" : "no");
  for (int32_t i = 0; i < n; i++) {
    if (!names[i] || !names[i][0] || strlen(names[i]) > 4000)
      return fail(LUON_EINVAL, "npz", path, "array %d has %s name", (int)i, names[i] ? "an empty or too long" : "no");
    for (int32_t j = 0; j < i; j++)
      if (strcmp(names[i], names[j]) == 0)
        return fail(LUON_EINVAL, "npz", path, "the name '%s' is given twice", names[i]);
  }
  if (n == 0) { /* libzip drops an archive with no entries: the end record alone, as NumPy writes */
    static const unsigned char eocd[22] = {'P', 'K', 5, 6};
    return write_whole("npz", path, eocd, sizeof eocd);
  }
  zip_error_t ze;
  zip_error_init(&ze);
  zip_source_t *mem = zip_source_buffer_create(NULL, 0, 0, &ze);
  if (!mem) return zip_fail(path, "zip_source_buffer_create", &ze);
  zip_t *za = zip_open_from_source(mem, ZIP_TRUNCATE, &ze);
  if (!za) {
    zip_source_free(mem);
    return zip_fail(path, "zip_open_from_source", &ze);
  }
  zip_source_keep(mem); /* read back after zip_close */
  luon_status s = LUON_OK;
  for (int32_t i = 0; i < n && s == LUON_OK; i++) {
    char *b;
    size_t bn;
    s = npy_bytes("npz", path, names[i], tensors[i], &b, &bn);
    if (s != LUON_OK) break;
    zip_source_t *src = zip_source_buffer(za, b, bn, 1); /* libzip frees b */
    if (!src) {
      free(b);
      s = fail(LUON_ENOMEM, "npz", path, "zip_source_buffer: %s", zip_strerror(za));
      break;
    }
    char entry[4100];
    snprintf(entry, sizeof entry, "%s.npy", names[i]);
    zip_int64_t idx = zip_file_add(za, entry, src, ZIP_FL_ENC_UTF_8);
    if (idx < 0) {
      zip_source_free(src);
      s = fail(LUON_EIO, "npz", path, "zip_file_add %s: %s", entry, zip_strerror(za));
    } else if (zip_set_file_compression(za, (zip_uint64_t)idx, compress ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 0) != 0) {
      s = fail(LUON_EIO, "npz", path, "zip_set_file_compression: %s", zip_strerror(za));
    }
  }
  if (s != LUON_OK) {
    zip_discard(za);
    zip_source_free(mem);
    return s;
  }
  if (zip_close(za) != 0) {
    s = fail(LUON_EIO, "npz", path, "zip_close: %s", zip_strerror(za));
    zip_discard(za);
    zip_source_free(mem);
    return s;
  }
  zip_stat_t st;
  char *buf = NULL;
  if (zip_source_open(mem) != 0 || zip_source_stat(mem, &st) != 0 || !(st.valid & ZIP_STAT_SIZE)) {
    s = fail(LUON_EIO, "npz", path, "reading the archive back: %s", zip_error_strerror(zip_source_error(mem)));
  } else if (!(buf = malloc(st.size ? st.size : 1))) {
    s = fail(LUON_ENOMEM, "npz", path, "out of host memory for %llu bytes", (unsigned long long)st.size);
  } else if (zip_source_read(mem, buf, st.size) != (zip_int64_t)st.size) {
    s = fail(LUON_EIO, "npz", path, "reading the archive back: %s", zip_error_strerror(zip_source_error(mem)));
  }
  zip_source_close(mem);
  if (s == LUON_OK) s = write_whole("npz", path, buf, st.size);
  free(buf);
  zip_source_free(mem);
  return s;
}

/* ---- reading ------------------------------------------------------------- */

typedef struct npy_header {
  int32_t dtype;
  int32_t ndim;
  int64_t shape[LU_MAXD];
  bool fortran, swap;
  size_t data_at; /* offset of the data */
} npy_header;

/* Skip spaces in t[*i..n). */
static void ws(const char *t, size_t n, size_t *i) {
  while (*i < n && (t[*i] == ' ' || t[*i] == '\t' || t[*i] == '\n' || t[*i] == '\r')) (*i)++;
}

/* Read a quoted Python string at t[*i] into out (at most cap - 1 chars). */
static bool pystr(const char *t, size_t n, size_t *i, char *out, size_t cap) {
  if (*i >= n || (t[*i] != '\'' && t[*i] != '"')) return false;
  char q = t[(*i)++];
  size_t k = 0;
  while (*i < n && t[*i] != q) {
    if (t[*i] == '\\' || k + 1 >= cap) return false;
    out[k++] = t[(*i)++];
  }
  if (*i >= n) return false;
  (*i)++;
  out[k] = 0;
  return true;
}

static bool lit(const char *t, size_t n, size_t *i, const char *s) {
  size_t m = strlen(s);
  if (*i + m > n || memcmp(t + *i, s, m) != 0) return false;
  *i += m;
  return true;
}

/* Parse the header dict t[0..n) into h (dtype, shape, order): its three
 * keys once each, in any order, nothing else. *why says what is wrong. */
static bool parse_dict(const char *t, size_t n, npy_header *h, char *why, size_t wn) {
  size_t i = 0;
  bool have_descr = false, have_order = false, have_shape = false;
  ws(t, n, &i);
  if (!lit(t, n, &i, "{")) return snprintf(why, wn, "the header is not a dict"), false;
  for (;;) {
    ws(t, n, &i);
    if (lit(t, n, &i, "}")) break;
    char key[32];
    if (!pystr(t, n, &i, key, sizeof key)) return snprintf(why, wn, "a header key at byte %zu is not a string", i), false;
    ws(t, n, &i);
    if (!lit(t, n, &i, ":")) return snprintf(why, wn, "no ':' after the key '%s'", key), false;
    ws(t, n, &i);
    if (strcmp(key, "descr") == 0 && !have_descr) {
      char d[32];
      if (!pystr(t, n, &i, d, sizeof d))
        return snprintf(why, wn, "descr is not a simple type string (structured dtypes are not supported)"), false;
      char order = d[0];
      const char *ty = d + 1;
      if (order != '<' && order != '>' && order != '|' && order != '=')
        return snprintf(why, wn, "descr '%s' has no byte order", d), false;
      static const struct { const char *s; int32_t dt; } types[] = {
          {"f4", LUON_DTYPE_F32}, {"f8", LUON_DTYPE_F64}, {"f2", LUON_DTYPE_F16}, {"i4", LUON_DTYPE_I32},
          {"i8", LUON_DTYPE_I64}, {"u1", LUON_DTYPE_U8},  {"b1", LUON_DTYPE_BOOL}, {"i1", LUON_DTYPE_I8},
          {"i2", LUON_DTYPE_I16}, {"u2", LUON_DTYPE_U16}};
      h->dtype = 0;
      for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
        if (strcmp(ty, types[k].s) == 0) h->dtype = types[k].dt;
      if (!h->dtype)
        return snprintf(why, wn, "dtype '%s' is not one luon reads (f2 f4 f8 i1 i2 i4 i8 u1 u2 b1)", d), false;
      h->swap = order == '>' && luon_dtype_size(h->dtype) > 1;
      have_descr = true;
    } else if (strcmp(key, "fortran_order") == 0 && !have_order) {
      if (lit(t, n, &i, "True")) h->fortran = true;
      else if (lit(t, n, &i, "False")) h->fortran = false;
      else return snprintf(why, wn, "fortran_order is not True or False"), false;
      have_order = true;
    } else if (strcmp(key, "shape") == 0 && !have_shape) {
      if (!lit(t, n, &i, "(")) return snprintf(why, wn, "shape is not a tuple"), false;
      h->ndim = 0;
      for (;;) {
        ws(t, n, &i);
        if (lit(t, n, &i, ")")) break;
        if (i >= n || t[i] < '0' || t[i] > '9') return snprintf(why, wn, "shape holds a non-integer"), false;
        int64_t v = 0;
        while (i < n && t[i] >= '0' && t[i] <= '9') {
          if (v > (INT64_MAX - 9) / 10) return snprintf(why, wn, "a dimension of the shape is too large"), false;
          v = v * 10 + (t[i++] - '0');
        }
        if (h->ndim == LU_MAXD) return snprintf(why, wn, "more than %d dimensions", LU_MAXD), false;
        h->shape[h->ndim++] = v;
        ws(t, n, &i);
        if (lit(t, n, &i, ",")) continue;
        ws(t, n, &i);
        if (lit(t, n, &i, ")")) break;
        return snprintf(why, wn, "shape is not a tuple of integers"), false;
      }
      have_shape = true;
    } else {
      return snprintf(why, wn, "unexpected key '%s' in the header", key), false;
    }
    ws(t, n, &i);
    if (lit(t, n, &i, ",")) continue;
    ws(t, n, &i);
    if (lit(t, n, &i, "}")) break;
    return snprintf(why, wn, "no ',' or '}' at byte %zu of the header", i), false;
  }
  ws(t, n, &i);
  if (i != n) return snprintf(why, wn, "bytes after the header's dict"), false;
  if (!have_descr || !have_order || !have_shape)
    return snprintf(why, wn, "the header lacks '%s'", !have_descr ? "descr" : !have_order ? "fortran_order" : "shape"), false;
  return true;
}

/* The header of the .npy bytes b[0..n) (a whole file or zip entry), with
 * the data's size checked against n. */
static luon_status parse_npy(const char *kind, const char *path, const char *entry, const unsigned char *b,
                             size_t n, npy_header *h) {
  char where[300];
  snprintf(where, sizeof where, "%s%s", entry ? entry : "", entry ? ": " : "");
  if (n < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
    return fail(LUON_EFORMAT, kind, path, "%snot a .npy file (no \\x93NUMPY magic)", where);
  unsigned major = b[6];
  size_t hl, pre;
  if (major == 1) {
    hl = (size_t)b[8] | (size_t)b[9] << 8;
    pre = 10;
  } else if (major == 2 || major == 3) {
    if (n < 12) return fail(LUON_EFORMAT, kind, path, "%struncated header", where);
    hl = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    pre = 12;
  } else {
    return fail(LUON_EFORMAT, kind, path, "%s.npy version %u.%u is not one luon reads (1.0, 2.0, 3.0)", where, major,
                (unsigned)b[7]);
  }
  if (hl > MAX_HEADER || pre + hl > n)
    return fail(LUON_EFORMAT, kind, path, "%sthe header's length %zu runs past the file's %zu bytes", where, hl, n);
  memset(h, 0, sizeof *h);
  char why[200];
  if (!parse_dict((const char *)b + pre, hl, h, why, sizeof why))
    return fail(LUON_EFORMAT, kind, path, "%sbad header: %s", where, why);
  h->data_at = pre + hl;
  uint64_t count = 1;
  for (int d = 0; d < h->ndim; d++) {
    if (h->shape[d] != 0 && count > UINT64_MAX / 16 / (uint64_t)h->shape[d])
      return fail(LUON_EFORMAT, kind, path, "%sthe shape holds too many elements", where);
    count *= (uint64_t)h->shape[d];
  }
  uint64_t bytes = count * (uint64_t)luon_dtype_size(h->dtype);
  if (bytes != n - h->data_at)
    return fail(LUON_EFORMAT, kind, path, "%sthe shape and dtype need %llu bytes of data but %zu follow the header",
                where, (unsigned long long)bytes, n - h->data_at);
  return LUON_OK;
}

/* A new tensor (+1) on (dev_type, dev_id) from parsed .npy bytes. */
static luon_status npy_tensor(const char *kind, const char *path, const npy_header *h, unsigned char *data,
                              int32_t dev_type, int32_t dev_id, luon_tensor **out) {
  size_t es = (size_t)luon_dtype_size(h->dtype);
  int64_t count = 1;
  for (int d = 0; d < h->ndim; d++) count *= h->shape[d];
  if (h->swap)
    for (int64_t k = 0; k < count; k++) {
      unsigned char *e = data + (size_t)k * es;
      for (size_t a = 0, z = es - 1; a < z; a++, z--) {
        unsigned char c = e[a];
        e[a] = e[z];
        e[z] = c;
      }
    }
  if (h->dtype == LUON_DTYPE_BOOL)
    for (int64_t k = 0; k < count; k++)
      if (data[k] > 1) return fail(LUON_EFORMAT, kind, path, "a bool element holds %u (not 0 or 1)", data[k]);
  if (!h->fortran || h->ndim < 2)
    return luon_tensor_from_host(count ? data : NULL, h->dtype, h->ndim, h->shape, dev_type, dev_id, out);
  /* column-major: the reversed shape row-major, then transposed into a copy */
  int64_t rev[LU_MAXD];
  for (int d = 0; d < h->ndim; d++) rev[d] = h->shape[h->ndim - 1 - d];
  luon_tensor *r = NULL;
  LU_TRY(luon_tensor_from_host(count ? data : NULL, h->dtype, h->ndim, rev, dev_type, dev_id, &r));
  int64_t st[LU_MAXD], acc = 1;
  for (int d = 0; d < h->ndim; d++) {
    st[d] = acc; /* axis d of the result is axis ndim-1-d of r */
    acc *= h->shape[d];
  }
  luon_tensor *v = NULL, *c = NULL;
  luon_status s = luon_tensor_view(r, h->ndim, h->shape, st, 0, &v);
  if (s == LUON_OK) s = luon_tensor_empty(h->dtype, h->ndim, h->shape, dev_type, dev_id, &c);
  if (s == LUON_OK) s = luon_tensor_copy(c, v);
  luon_tensor_release(v);
  luon_tensor_release(r);
  if (s != LUON_OK) {
    luon_tensor_release(c);
    return s;
  }
  *out = c;
  return LUON_OK;
}

luon_status luon_npy_load(const char *path, int32_t dev_type, int32_t dev_id, luon_tensor **out) {
  if (!path || !path[0]) return lu_error(LUON_EINVAL, "npy: load: no file name given");
  if (!out) return lu_error(LUON_EINVAL, "npy: load: out is NULL");
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return fail(LUON_EIO, "npy", path, "cannot open: %s", strerror(errno));
  unsigned char *b = NULL;
  size_t n = 0;
  luon_status s = LUON_OK;
  if (fseek(f, 0, SEEK_END) != 0 || ftell(f) < 0) {
    s = fail(LUON_EIO, "npy", path, "cannot read its size (not a regular file?)");
  } else {
    n = (size_t)ftell(f);
    rewind(f);
    b = malloc(n ? n : 1);
    if (!b) s = fail(LUON_ENOMEM, "npy", path, "out of host memory for %zu bytes", n);
    else if (fread(b, 1, n, f) != n) s = fail(LUON_EIO, "npy", path, "read failed: %s", strerror(errno));
  }
  fclose(f);
  npy_header h;
  if (s == LUON_OK) s = parse_npy("npy", path, NULL, b, n, &h);
  if (s == LUON_OK) s = npy_tensor("npy", path, &h, b + h.data_at, dev_type, dev_id, out);
  free(b);
  return s;
}

/* An open .npz: its entries' names (without ".npy"). */
struct luon_npz {
  zip_t *za;
  char *path;
  int32_t n;
  char **names;
  zip_uint64_t *index;
};

void luon_npz_close(luon_npz *h) {
  if (!h) return;
  if (h->za) zip_discard(h->za);
  for (int32_t i = 0; i < h->n; i++) free(h->names[i]);
  free(h->names);
  free(h->index);
  free(h->path);
  free(h);
}

luon_status luon_npz_open(const char *path, luon_npz **out) {
  if (!path || !path[0]) return lu_error(LUON_EINVAL, "npz: load: no file name given");
  if (!out) return lu_error(LUON_EINVAL, "npz: load: out is NULL");
  *out = NULL;
  int err = 0;
  zip_t *za = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &err);
  if (!za) {
    zip_error_t ze;
    zip_error_init_with_code(&ze, err);
    luon_status s = fail(err == ZIP_ER_NOENT || err == ZIP_ER_OPEN || err == ZIP_ER_READ ? LUON_EIO : LUON_EFORMAT,
                         "npz", path, "%s", zip_error_strerror(&ze));
    zip_error_fini(&ze);
    return s;
  }
  luon_npz *h = calloc(1, sizeof *h);
  zip_int64_t m = zip_get_num_entries(za, 0);
  if (!h || m < 0 || m > (1 << 20)) {
    zip_discard(za);
    free(h);
    return fail(h ? LUON_EFORMAT : LUON_ENOMEM, "npz", path, h ? "%lld entries" : "out of host memory",
                (long long)m);
  }
  h->za = za;
  h->path = strdup(path);
  h->names = calloc((size_t)(m ? m : 1), sizeof *h->names);
  h->index = calloc((size_t)(m ? m : 1), sizeof *h->index);
  if (!h->path || !h->names || !h->index) {
    luon_npz_close(h);
    return fail(LUON_ENOMEM, "npz", path, "out of host memory");
  }
  for (zip_int64_t i = 0; i < m; i++) {
    const char *nm = zip_get_name(za, (zip_uint64_t)i, ZIP_FL_ENC_GUESS);
    size_t len = nm ? strlen(nm) : 0;
    if (!nm || len < 5 || strcmp(nm + len - 4, ".npy") != 0) {
      luon_status s = fail(LUON_EFORMAT, "npz", path, "entry %lld (%s) is not a .npy file", (long long)i,
                           nm ? nm : "no name");
      luon_npz_close(h);
      return s;
    }
    h->names[h->n] = strndup(nm, len - 4);
    if (!h->names[h->n]) {
      luon_npz_close(h);
      return fail(LUON_ENOMEM, "npz", path, "out of host memory");
    }
    h->index[h->n++] = (zip_uint64_t)i;
  }
  *out = h;
  return LUON_OK;
}

int32_t luon_npz_count(const luon_npz *h) { return h ? h->n : 0; }

const char *luon_npz_name(const luon_npz *h, int32_t i) {
  return h && i >= 0 && i < h->n ? h->names[i] : NULL;
}

luon_status luon_npz_get(luon_npz *h, int32_t i, int32_t dev_type, int32_t dev_id, luon_tensor **out) {
  if (!h || !out) return lu_error(LUON_EINVAL, "npz: get: NULL %s", h ? "out" : "file");
  *out = NULL;
  if (i < 0 || i >= h->n) return fail(LUON_EINVAL, "npz", h->path, "no entry %d (it has %d)", (int)i, (int)h->n);
  zip_stat_t st;
  if (zip_stat_index(h->za, h->index[i], 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE))
    return fail(LUON_EFORMAT, "npz", h->path, "%s.npy: %s", h->names[i], zip_strerror(h->za));
  /* deflate expands at most ~1032:1: a larger claim is a hostile header,
   * refused before it becomes an allocation */
  if (!(st.valid & ZIP_STAT_COMP_SIZE) || st.size > st.comp_size * 1100 + 4096)
    return fail(LUON_EFORMAT, "npz", h->path, "%s.npy claims %llu bytes from %llu compressed", h->names[i],
                (unsigned long long)st.size, (unsigned long long)st.comp_size);
  unsigned char *b = malloc(st.size ? st.size : 1);
  if (!b) return fail(LUON_ENOMEM, "npz", h->path, "out of host memory for %llu bytes", (unsigned long long)st.size);
  zip_file_t *zf = zip_fopen_index(h->za, h->index[i], 0);
  luon_status s = LUON_OK;
  if (!zf) {
    s = fail(LUON_EFORMAT, "npz", h->path, "%s.npy: %s", h->names[i], zip_strerror(h->za));
  } else {
    zip_int64_t got = zip_fread(zf, b, st.size);
    unsigned char extra;
    /* read on to the entry's end, where libzip checks its CRC-32 */
    zip_int64_t more = got == (zip_int64_t)st.size ? zip_fread(zf, &extra, 1) : 0;
    if (got != (zip_int64_t)st.size || more != 0)
      s = fail(LUON_EFORMAT, "npz", h->path, "%s.npy is corrupt: %s", h->names[i],
               got < 0 || more < 0 ? zip_file_strerror(zf)
                                   : more > 0 ? "longer than its size" : "shorter than its size");
    if (zip_fclose(zf) != 0 && s == LUON_OK)
      s = fail(LUON_EFORMAT, "npz", h->path, "%s.npy is corrupt (its CRC-32 does not match)", h->names[i]);
  }
  char entry[300];
  snprintf(entry, sizeof entry, "%.290s.npy", h->names[i]);
  npy_header hd;
  if (s == LUON_OK) s = parse_npy("npz", h->path, entry, b, st.size, &hd);
  if (s == LUON_OK) s = npy_tensor("npz", h->path, &hd, b + hd.data_at, dev_type, dev_id, out);
  free(b);
  return s;
}
