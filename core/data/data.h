/* data.h: what the files of core/data/ share. The data subsystem (image
 * decoding, the vision transforms, the data loader's threads, IDX files) is
 * built on the core and includes its internal.h; the core includes nothing
 * of core/data/. Not installed. */
#ifndef LUON_DATA_H
#define LUON_DATA_H

#include "internal.h"
#include <math.h>
#include <stdlib.h>

/* ---- files (image.c) ------------------------------------------------------ */

/* The whole file at path in a malloc'd buffer (free it); errors name the
 * path, after "fn: " when fn is not NULL. */
luon_status lu_read_file(const char *fn, const char *path, uint8_t **buf, size_t *len);

#endif
