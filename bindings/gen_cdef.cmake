# gen_cdef.cmake: copy the block between the LUON_CDEF markers of luon.h into
# a Lua module returning it as a string (cmake -DHEADER=... -DOUT=... -P).
file(READ ${HEADER} text)
string(FIND "${text}" "/* LUON_CDEF_BEGIN */" b)
string(FIND "${text}" "/* LUON_CDEF_END */" e)
if(b EQUAL -1 OR e EQUAL -1)
  message(FATAL_ERROR "${HEADER} lacks the LUON_CDEF markers")
endif()
string(LENGTH "/* LUON_CDEF_BEGIN */" blen)
math(EXPR start "${b} + ${blen}")
math(EXPR len "${e} - ${start}")
string(SUBSTRING "${text}" ${start} ${len} block)
file(WRITE ${OUT} "-- Generated from core/luon.h by bindings/gen_cdef.cmake; do not edit.\nreturn [==[\n${block}]==]\n")
