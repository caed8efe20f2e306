/* abi.c: struct sizes of luon.h as compiled, so the LuaJIT bindings (which
 * parse the same declarations) can check that their layout agrees. */
#include "internal.h"

int64_t luon_abi_sizeof(const char *name) {
  if (!name) {
    lu_error(LUON_EINVAL, "abi_sizeof: struct_name is NULL");
    return -1;
  }
#define SIZE(T) if (strcmp(name, #T) == 0) return (int64_t)sizeof(T);
  SIZE(luon_tensor_info)
  SIZE(luon_memory_stats)
  SIZE(luon_counters)
  SIZE(luon_attrs)
  SIZE(luon_op_info)
  SIZE(luon_transform_step)
  SIZE(luon_function_step)
#undef SIZE
  lu_error(LUON_EINVAL, "abi_sizeof: no struct named '%s' in luon.h", name);
  return -1;
}
