/* idx.c: IDX files (MNIST's format), gzip-compressed or plain, read through
 * zlib's gz* calls (a plain file reads through them unchanged) into one
 * tensor: the header's element type and shape, the big-endian data swapped
 * to the host's order. */
#include "internal.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

static luon_status idx_fail(luon_status s, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static luon_status idx_fail(luon_status s, const char *path, const char *fmt, ...) {
  char detail[800];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  return lu_error(s, "idx: %s: %s", path, detail);
}

/* Read up to n bytes; the count read, or -1 with the error set. */
static int64_t gz_read_all(gzFile f, void *dst, uint64_t n, const char *path) {
  char *p = dst;
  uint64_t got = 0;
  while (got < n) {
    uint64_t want = n - got > (1u << 30) ? (1u << 30) : n - got;
    int r = gzread(f, p + got, (unsigned)want);
    if (r < 0) {
      int en = 0;
      const char *m = gzerror(f, &en);
      idx_fail(LUON_EFORMAT, path, "corrupt gzip data: %s", m ? m : "unknown error");
      return -1;
    }
    if (r == 0) break;
    got += (uint64_t)r;
  }
  return (int64_t)got;
}

static bool host_little_endian(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

static void byteswap(void *data, int64_t n, int size) {
  unsigned char *p = data;
  for (int64_t k = 0; k < n; k++, p += size)
    for (int a = 0, b = size - 1; a < b; a++, b--) {
      unsigned char t = p[a];
      p[a] = p[b];
      p[b] = t;
    }
}

luon_status luon_idx_read(const char *path, int32_t dev_type, int32_t dev_id, luon_tensor **out) {
  if (!out) return lu_error(LUON_EINVAL, "idx: NULL output pointer");
  *out = NULL;
  if (!path || !path[0]) return lu_error(LUON_EINVAL, "idx: no file name given");
  LU_TRY(luon_device_check(dev_type, dev_id));
  uint64_t fsize = 0;
  int fd = lu_open_regular(path, &fsize);
  if (fd < 0) {
    char e[128];
    if (errno) return idx_fail(LUON_EIO, path, "cannot open: %s", strerror_r(errno, e, sizeof e));
    return idx_fail(LUON_EIO, path, "not a regular file");
  }
  gzFile f = gzdopen(fd, "rb");
  if (!f) {
    close(fd);
    return idx_fail(LUON_ENOMEM, path, "zlib could not open the file (out of memory?)");
  }
  gzbuffer(f, 1u << 17);
  luon_status s = LUON_OK;
  luon_tensor *t = NULL, *host = NULL;
  unsigned char magic[4];
  int64_t got = gz_read_all(f, magic, 4, path);
  int32_t dtype = 0, esize = 0;
  int ndim = 0;
  int64_t shape[LU_MAXD];
  if (got < 0) s = LUON_EFORMAT;
  else if (got < 4) s = idx_fail(LUON_EFORMAT, path, "the file has %lld bytes, too short for an IDX header",
                                 (long long)got);
  if (s == LUON_OK) {
    if (magic[0] != 0 || magic[1] != 0)
      s = idx_fail(LUON_EFORMAT, path, "not an IDX file: magic bytes %02x %02x %02x %02x, expected 00 00 "
                   "<type> <dims>", magic[0], magic[1], magic[2], magic[3]);
    else if (magic[2] == 0x08) dtype = LUON_DTYPE_U8, esize = 1;
    else if (magic[2] == 0x0C) dtype = LUON_DTYPE_I32, esize = 4;
    else if (magic[2] == 0x0D) dtype = LUON_DTYPE_F32, esize = 4;
    else if (magic[2] == 0x0E) dtype = LUON_DTYPE_F64, esize = 8;
    else
      s = idx_fail(LUON_EFORMAT, path, "IDX element type 0x%02x is not supported (0x08 uint8, 0x0C int32, "
                   "0x0D float32, 0x0E float64)", magic[2]);
  }
  if (s == LUON_OK) {
    ndim = magic[3];
    if (ndim < 1 || ndim > LU_MAXD)
      s = idx_fail(LUON_EFORMAT, path, "IDX header gives %d dimensions (1 to %d are supported)", ndim, LU_MAXD);
  }
  if (s == LUON_OK) {
    unsigned char dims[4 * LU_MAXD];
    got = gz_read_all(f, dims, 4 * (uint64_t)ndim, path);
    if (got < 0) s = LUON_EFORMAT;
    else if (got < 4 * ndim) s = idx_fail(LUON_EFORMAT, path, "the file ends inside the IDX header");
    uint64_t bytes = (uint64_t)esize;
    for (int d = 0; d < ndim && s == LUON_OK; d++) {
      shape[d] = (int64_t)((uint32_t)dims[4 * d] << 24 | (uint32_t)dims[4 * d + 1] << 16 |
                           (uint32_t)dims[4 * d + 2] << 8 | dims[4 * d + 3]);
      if (__builtin_mul_overflow(bytes, (uint64_t)shape[d], &bytes)) bytes = UINT64_MAX;
    }
    /* deflate expands at most ~1032:1: a larger claim is a corrupt header */
    if (s == LUON_OK && bytes / 1100 > fsize)
      s = idx_fail(LUON_EFORMAT, path, "IDX header announces shape %s (%llu bytes), more than a %llu-byte "
                   "file can hold", lu_shape_str(ndim, shape), (unsigned long long)bytes,
                   (unsigned long long)fsize);
    /* read straight into the result on a CPU device, through cpu(0) for a GPU */
    lu_device hd = dev_type == LUON_CPU ? (lu_device){dev_type, dev_id} : (lu_device){LUON_CPU, 0};
    if (s == LUON_OK && (s = lu_tensor_new(dtype, ndim, shape, hd, &host)) != LUON_OK)
      s = idx_fail(s == LUON_ESHAPE ? LUON_EFORMAT : s, path, "%s", luon_last_error());
    if (s == LUON_OK) {
      got = gz_read_all(f, lu_data(host), bytes, path);
      unsigned char extra;
      if (got < 0) s = LUON_EFORMAT;
      else if ((uint64_t)got < bytes)
        s = idx_fail(LUON_EFORMAT, path, "the file ends after %lld of the %llu data bytes its header "
                     "announces (shape %s)", (long long)got, (unsigned long long)bytes,
                     lu_shape_str(ndim, shape));
      else if ((got = gz_read_all(f, &extra, 1, path)) != 0)
        s = got < 0 ? LUON_EFORMAT
                    : idx_fail(LUON_EFORMAT, path, "the file has data after the %llu bytes its header "
                               "announces (shape %s)", (unsigned long long)bytes, lu_shape_str(ndim, shape));
    }
  }
  gzclose(f); /* closes fd */
  if (s == LUON_OK && esize > 1 && host_little_endian()) byteswap(lu_data(host), host->size, esize);
  if (s == LUON_OK && dev_type != LUON_CPU) {
    s = luon_tensor_from_host(lu_data(host), dtype, ndim, shape, dev_type, dev_id, &t);
  } else if (s == LUON_OK) {
    t = host;
    host = NULL;
  }
  luon_tensor_release(host);
  if (s != LUON_OK) {
    luon_tensor_release(t);
    return s;
  }
  *out = t;
  return LUON_OK;
}
