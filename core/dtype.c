/* dtype.c: dtype names, sizes, and conversion between dtypes (promotion
 * is lu_dtype_promote, inline in internal.h)
 * (float16/bfloat16 are storage types: ops compute on them in float32, the
 * dispatcher converting for the CPU kernels; see dispatch.c). */
#include "internal.h"
#include <math.h>

/* ORDER luon_dtype */
static const char *const names[LUON_DTYPE_COUNT] = {
    NULL, "float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "bool", "int8", "int16", "uint16"};
static const int32_t sizes[LUON_DTYPE_COUNT] = {0, 4, 8, 2, 2, 4, 8, 1, 1, 1, 2, 2};

bool lu_dtype_valid(int32_t dt) { return dt > 0 && dt < LUON_DTYPE_COUNT; }
const char *luon_dtype_name(int32_t dt) { return lu_dtype_valid(dt) ? names[dt] : NULL; }
int32_t luon_dtype_size(int32_t dt) { return lu_dtype_valid(dt) ? sizes[dt] : 0; }
bool lu_dtype_is_float(int32_t dt) { return dt == LUON_DTYPE_F32 || dt == LUON_DTYPE_F64; }
bool lu_dtype_is_storage_only(int32_t dt) {
  return dt == LUON_DTYPE_F16 || dt == LUON_DTYPE_BF16;
}
bool lu_dtype_has_grad(int32_t dt) { return lu_dtype_is_float(dt) || lu_dtype_is_storage_only(dt); }

float lu_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, f;
  if (exp == 0) {
    if (man == 0) {
      f = sign;
    } else { /* subnormal: renormalise */
      exp = 127 - 15 + 1;
      while (!(man & 0x400)) { man <<= 1; exp--; }
      man &= 0x3ff;
      f = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 31) {
    f = sign | 0x7f800000 | (man << 13);
  } else {
    f = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float out;
  memcpy(&out, &f, 4);
  return out;
}

uint16_t lu_float_to_half(float v) {
  uint32_t x;
  memcpy(&x, &v, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
  uint32_t man = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) /* inf or nan */
    return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
  if (exp >= 31) return (uint16_t)(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return (uint16_t)sign;
    man |= 0x800000;
    uint32_t shift = (uint32_t)(14 - exp);
    uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t h = sign | ((uint32_t)exp << 10) | (man >> 13), rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* round to nearest even */
  return (uint16_t)h;
}

float lu_bf16_to_float(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float out;
  memcpy(&out, &x, 4);
  return out;
}

uint16_t lu_float_to_bf16(float v) {
  uint32_t x;
  memcpy(&x, &v, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

/* Load element i of a buffer as double / store a double (with integer
 * conversion by C rules, bool as != 0). */
static inline double load(const void *p, int32_t dt, int64_t i) {
  switch (dt) {
  case LUON_DTYPE_F32: return ((const float *)p)[i];
  case LUON_DTYPE_F64: return ((const double *)p)[i];
  case LUON_DTYPE_F16: return lu_half_to_float(((const uint16_t *)p)[i]);
  case LUON_DTYPE_BF16: return lu_bf16_to_float(((const uint16_t *)p)[i]);
  case LUON_DTYPE_BOOL: return ((const uint8_t *)p)[i] != 0;
  case LUON_DTYPE_I64: return (double)((const int64_t *)p)[i];
  }
  return (double)lu_load_int(p, dt, i);
}

static inline bool is_int(int32_t dt) {
  int64_t mn, mx;
  return dt != LUON_DTYPE_BOOL && lu_dtype_int_range(dt, &mn, &mx);
}

static inline int64_t to_i64(double v) {
  if (v != v) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return (int64_t)v;
}

static inline void store(void *p, int32_t dt, int64_t i, double v) {
  switch (dt) {
  case LUON_DTYPE_F32: ((float *)p)[i] = (float)v; break;
  case LUON_DTYPE_F64: ((double *)p)[i] = v; break;
  case LUON_DTYPE_F16: ((uint16_t *)p)[i] = lu_float_to_half((float)v); break;
  case LUON_DTYPE_BF16: ((uint16_t *)p)[i] = lu_float_to_bf16((float)v); break;
  case LUON_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break;
  default: lu_store_int(p, dt, i, to_i64(v)); break;
  }
}

void lu_convert(void *dst, int32_t ddt, const void *src, int32_t sdt, int64_t n) {
  if (ddt == sdt) {
    memcpy(dst, src, (size_t)n * (size_t)sizes[ddt]);
    return;
  }
  if (ddt == LUON_DTYPE_F32 && sdt == LUON_DTYPE_F64) {
    for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = (float)((const double *)src)[i];
    return;
  }
  if (ddt == LUON_DTYPE_F64 && sdt == LUON_DTYPE_F32) {
    for (int64_t i = 0; i < n; i++) ((double *)dst)[i] = ((const float *)src)[i];
    return;
  }
  if (is_int(sdt) && is_int(ddt)) { /* exact, unlike via double (int64 past 2^53), wrapping as C casts */
    for (int64_t i = 0; i < n; i++) lu_store_int(dst, ddt, i, lu_load_int(src, sdt, i));
    return;
  }
  for (int64_t i = 0; i < n; i++) store(dst, ddt, i, load(src, sdt, i));
}
