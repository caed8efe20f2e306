-- luon.ffi: the only module that touches the C library. It loads the cdef
-- generated from core/luon.h, finds libluon (already in the process under
-- build/luon, else by LUON_LIB or package.cpath), and exports the namespace.
local ffi = require("ffi")

ffi.cdef(require("luon.cdef"))

local function find_library()
  local ok = pcall(function() return ffi.C.luon_last_error end)
  if ok then return ffi.C end
  local env = os.getenv("LUON_LIB")
  if env and env ~= "" then return ffi.load(env, true) end
  for dir in package.cpath:gmatch("[^;]+") do
    local candidate = dir:gsub("%?%.so$", "libluon.so")
    if candidate:sub(-9) == "libluon.so" or candidate:match("libluon%.so$") then
      local f = io.open(candidate, "rb")
      if f then
        f:close()
        return ffi.load(candidate, true)
      end
    end
  end
  return ffi.load("luon", true)
end

local C = find_library()

local M = {C = C, ffi = ffi}

return M
