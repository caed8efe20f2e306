-- luon.repl: the interactive prompt of `luon` with no script. Evaluates
-- expressions and statements, prints results, keeps going after errors.
-- (Line editing, completion and history arrive with the REPL issue.)
local M = {}

local function print_results(n, ...)
  if n == 0 then return end
  local parts = {}
  for k = 1, n do parts[k] = tostring((select(k, ...))) end
  print(table.concat(parts, "\t"))
end

function M.run()
  io.write("luon ", (pcall(require, "luon") and require("luon").version or "?"),
           " (LuaJIT). Ctrl-D to leave.\n")
  local luon = require("luon")
  _G.luon, _G.np, _G.npx = luon, luon.np, luon.npx
  local buffer = ""
  while true do
    io.write(buffer == "" and "> " or ">> ")
    io.flush()
    local line = io.read("*l")
    if not line then io.write("\n") break end
    buffer = buffer == "" and line or buffer .. "\n" .. line
    local chunk, err = loadstring("return " .. buffer, "=stdin")
    if not chunk then chunk, err = loadstring(buffer, "=stdin") end
    if chunk then
      buffer = ""
      local function collect(ok, ...)
        if ok then print_results(select("#", ...), ...)
        else print(tostring((...))) end
      end
      collect(xpcall(chunk, function(e) return debug.traceback(tostring(e), 2) end))
    elseif not err:match("<eof>$") then
      buffer = ""
      print(err)
    end
  end
end

return M
