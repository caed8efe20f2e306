-- luon.repl: the interactive prompt of `luon` (no script, or -i). Reads
-- lines through bindings/main.c ("luon.repl_native": libedit, history,
-- Ctrl-C), continues incomplete chunks, prints results, completes names, and
-- never leaves on an error. Under plain luajit it falls back to io.read.
local M = {}

local ndarray = require("luon.ndarray")
local core = require("luon.core")
local is_array = core.is_array

local HELP = [[
REPL commands:
  :help             this text
  :quit, :q         leave (so does Ctrl-D on an empty line)
  :time CHUNK       run CHUNK and print how long it took
  :jit on|off       JIT-compile REPL chunks (off by default: Ctrl-C can then
                    stop a loop typed here; compiled loops run no hooks)
Expressions print without '=' or print: `1+1` shows 2, `x` shows the array
and a line <ndarray (shape) dtype @device>. A chunk that is not complete
(`function f()`) continues on the next line (prompt >>); Ctrl-C clears it.
Each chunk is its own scope: `local` lasts one chunk, globals stay; `_` is
the last result.
TAB completes globals, fields (np.ra<TAB>) and methods (x:as<TAB>).
help(obj) or help("np.zeros") shows what an object is and what it has.
Ctrl-C interrupts a running chunk. History: ~/.luon_history ($LUON_HISTORY).]]

---------------------------------------------------------------------------
-- Showing values

local shape_str = core.shape_text

-- "<ndarray (3,4) float32 @cpu(0)>"
function M.describe(x)
  return ("<ndarray %s %s @%s>"):format(shape_str(x.shape), x.dtype, tostring(x.device))
end

local function module_name(v)
  for name, m in pairs(package.loaded) do
    if m == v and type(name) == "string" then return name end
  end
end

local function is_identifier(k)
  return type(k) == "string" and k:match("^[%a_][%w_]*$") ~= nil
end

-- One line for a value inside a table; tables nested to `depth`.
local function inline(v, depth)
  local t = type(v)
  if t == "string" then return ("%q"):format(v) end
  if is_array(v) then return M.describe(v) end
  if t ~= "table" then return tostring(v) end
  local mt = getmetatable(v)
  if mt and mt.__tostring then return (tostring(v):gsub("\n.*", " ...")) end
  local name = module_name(v)
  if name then return ("<module %s>"):format(name) end
  if depth <= 0 then return "{...}" end
  local parts, n, limit = {}, #v, 30
  for k = 1, math.min(n, limit) do parts[#parts + 1] = inline(v[k], depth - 1) end
  local keys = {}
  for k in pairs(v) do
    if not (type(k) == "number" and k >= 1 and k <= n and k % 1 == 0) then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b)
    if type(a) == type(b) and (type(a) == "string" or type(a) == "number") then return a < b end
    return type(a) < type(b)
  end)
  for _, k in ipairs(keys) do
    if #parts >= limit then parts[#parts + 1] = "..."; break end
    local key = is_identifier(k) and k or "[" .. inline(k, 0) .. "]"
    parts[#parts + 1] = key .. " = " .. inline(v[k], depth - 1)
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end

-- What the REPL prints for a result: arrays with their info line, tables
-- with __tostring (devices, blocks) through it, other tables inline.
function M.show(v)
  if is_array(v) then return tostring(v) .. "\n" .. M.describe(v) end
  local mt = getmetatable(v)
  if type(v) == "table" and not (type(mt) == "table" and mt.__tostring) then return inline(v, 2) end
  return tostring(v)
end

local function print_results(n, ...)
  if n == 0 then return end
  local parts = {}
  for k = 1, n do
    local v = (select(k, ...))
    local ok, s = pcall(M.show, v)
    parts[k] = ok and s or ("<%s: cannot show: %s>"):format(type(v), tostring(s))
  end
  io.write(table.concat(parts, "\t"), "\n")
  io.flush()
end

---------------------------------------------------------------------------
-- Errors: the message, then a short traceback of the chunk's own frames

local native_call -- the C function that runs chunks; the traceback stops there

local function where(info)
  local src = info.short_src or "?"
  if info.currentline and info.currentline > 0 then src = src .. ":" .. info.currentline end
  if info.what == "main" then return src .. ": in main chunk" end
  if info.name then return ("%s: in function '%s'"):format(src, info.name) end
  if info.what == "C" then return "[C]: in ?" end
  return ("%s: in function <%s:%d>"):format(src, info.short_src, info.linedefined or 0)
end

function M.traceback(err)
  local msg = type(err) == "string" and err or
              (type(err) == "table" and getmetatable(err) and getmetatable(err).__tostring and tostring(err)) or
              ("(error object is a %s value)"):format(type(err))
  -- luon's own frames above the user's code are left out when the message
  -- already names the user's line (luon reports errors there)
  local in_luon = msg:match("^stdin:")
  local frames = {}
  for level = 2, 200 do
    local info = debug.getinfo(level, "Slnf")
    if not info or (native_call and info.func == native_call) then break end
    in_luon = in_luon and (info.what == "C" or info.source:match("[/\\]lua[/\\]luon[/\\]"))
    if not in_luon and not (info.what == "C" and (info.func == error or info.func == assert)) then
      frames[#frames + 1] = "  " .. where(info)
    end
  end
  if msg:match("interrupted$") or #frames <= 1 then return msg end
  if #frames > 12 then
    local n = #frames
    frames = {frames[1], frames[2], frames[3], frames[4], frames[5], frames[6],
              ("  ... (%d frames)"):format(n - 10), frames[n - 3], frames[n - 2], frames[n - 1], frames[n]}
  end
  return msg .. "\nstack traceback:\n" .. table.concat(frames, "\n")
end

---------------------------------------------------------------------------
-- Completion: M.complete("np.ra") -> {"np.random", "np.ravel"}

local keywords = {"and", "break", "do", "else", "elseif", "end", "false", "for", "function",
                  "goto", "if", "in", "local", "nil", "not", "or", "repeat", "return", "then",
                  "true", "until", "while"}

-- The value a dotted path names, without calling anything but __index.
local function resolve(path)
  local v = _G
  for name in path:gmatch("[^.]+") do
    local ok, r = pcall(function() return v[name] end)
    if not ok or r == nil then return nil end
    v = r
  end
  return v
end
M.resolve = resolve

-- The names reachable on v (`.`), or its methods only (`:`): its fields and
-- those of its class chain of __index tables. An object whose __index is a
-- function can name what it has with a __dir metamethod: __dir(obj) -> {names}.
local function names_of(v, methods_only)
  local names = {}
  if is_array(v) then
    for k in pairs(ndarray.methods) do names[k] = true end
    if not methods_only then for k in pairs(ndarray.props) do names[k] = true end end
    return names
  end
  local mt = getmetatable(v)
  local dir = type(mt) == "table" and rawget(mt, "__dir")
  if dir then
    local ok, list = pcall(dir, v)
    if ok and type(list) == "table" then
      for _, k in ipairs(list) do
        if is_identifier(k) then
          local ok2, f = pcall(function() return v[k] end)
          if not methods_only or (ok2 and type(f) == "function") then names[k] = true end
        end
      end
    end
  end
  if type(v) == "string" then v = string end
  for _ = 1, 20 do -- the table, then its class chain through __index tables
    if type(v) == "table" then
      for k, f in pairs(v) do
        if is_identifier(k) and (not methods_only or type(f) == "function") then names[k] = true end
      end
    end
    local mt = (type(v) == "table" or type(v) == "userdata") and getmetatable(v)
    local index = type(mt) == "table" and rawget(mt, "__index")
    if type(index) ~= "table" or index == v then break end
    v = index
  end
  return names
end

function M.complete(word)
  local out = {}
  local prefix, sep, partial = word:match("^(.*)([.:])([%w_]*)$")
  local names
  if prefix then
    if not prefix:match("^[%a_][%w_]*$") and not prefix:match("^[%a_][%w_.]*[%w_]$") then return out end
    local v = resolve(prefix)
    if v == nil then return out end
    names = names_of(v, sep == ":")
  else
    if not word:match("^[%a_]?[%w_]*$") then return out end
    prefix, sep, partial = "", "", word
    names = names_of(_G, false)
    for _, k in ipairs(keywords) do names[k] = true end
  end
  for k in pairs(names) do -- private names (_pair) only when asked for
    if k:sub(1, #partial) == partial and (k:sub(1, 1) ~= "_" or partial:sub(1, 1) == "_") then
      out[#out + 1] = prefix .. sep .. k
    end
  end
  table.sort(out)
  return out
end

---------------------------------------------------------------------------
-- help(obj): docs for the main modules and functions, else what obj has

local docs = {
  luon = "luon: a deep-learning runtime for Lua with MXNet's API. luon.np (arrays), " ..
         "luon.npx (devices, nn ops), luon.autograd, luon.clock(); globals np, npx, luon here.",
  np = "np: NumPy-compatible arrays. Positional arguments, then one table of keywords:\n" ..
       "  np.zeros({2,3}, {dtype='float64', device=npx.gpu(0)})\n" ..
       "Creation: array zeros ones full empty arange linspace eye; np.random.\n" ..
       "Math: add subtract multiply divide power exp log sqrt tanh abs clip where.\n" ..
       "Shapes: reshape transpose swapaxes expand_dims squeeze broadcast_to split " ..
       "concatenate stack.\nReductions: sum mean max min prod argmax argmin. matmul, dot.",
  ["np.array"] = "np.array(obj, {dtype=, device=}): an ndarray from a number, a nested table or an ndarray.",
  ["np.zeros"] = "np.zeros(shape, {dtype=, device=}): zeros; shape is {d1, d2, ...} or a number.",
  ["np.ones"] = "np.ones(shape, {dtype=, device=}): ones.",
  ["np.full"] = "np.full(shape, value, {dtype=, device=}): filled with value.",
  ["np.empty"] = "np.empty(shape, {dtype=, device=}): uninitialised.",
  ["np.arange"] = "np.arange([start,] stop [, step], {dtype=, device=}): evenly spaced values in [start, stop).",
  ["np.linspace"] = "np.linspace(start, stop, num, {dtype=, device=}): num values from start to stop.",
  ["np.eye"] = "np.eye(N [, M [, k]], {dtype=, device=}): ones on the k-th diagonal.",
  ["np.random"] = "np.random: seed(s), uniform(low, high, shape), normal(loc, scale, shape), " ..
                  "randint(low, high, shape), shuffle(x); keywords {dtype=, device=}.",
  ["np.reshape"] = "np.reshape(x, shape) or x:reshape(shape): same data, new shape (-1 infers one size).",
  ["np.transpose"] = "np.transpose(x [, axes]) or x.T: axes permuted (reversed by default).",
  ["np.sum"] = "np.sum(x [, axis], {keepdims=}) or x:sum(): the sum over axis (0-based; all by default).",
  ["np.mean"] = "np.mean(x [, axis], {keepdims=}): the mean over axis.",
  ["np.matmul"] = "np.matmul(a, b): the matrix product, batched over leading axes.",
  ["np.dot"] = "np.dot(a, b): NumPy's dot product.",
  ["np.concatenate"] = "np.concatenate({a, b, ...} [, axis]): joined along an existing axis.",
  ["np.stack"] = "np.stack({a, b, ...} [, axis]): joined along a new axis.",
  ["np.split"] = "np.split(x, sections or {indices} [, axis]): a list of pieces.",
  npx = "npx: MXNet's numpy extensions: cpu(i), gpu(i), num_gpus(), current_device(), " ..
        "with_device(dev, fn), waitall(), memory_stats(dev), set_num_threads(n), relu, sigmoid, " ..
        "and the neural-network ops the gluon layers call.",
  ["npx.cpu"] = "npx.cpu(i): the CPU device i (prints cpu(0)).",
  ["npx.gpu"] = "npx.gpu(i): the GPU device i (prints gpu(0)); using a missing GPU is an error.",
  ["npx.num_gpus"] = "npx.num_gpus(): how many GPUs luon can use.",
  ["npx.with_device"] = "npx.with_device(dev, fn, ...): runs fn with dev as the default device.",
  ["npx.waitall"] = "npx.waitall(): waits for every queued computation.",
  autograd = "autograd: record(fn) records the ops in fn; y:backward() fills x.grad for arrays " ..
             "after x:attach_grad(); pause(fn), train_mode(fn), predict_mode(fn), is_recording().",
  ["autograd.record"] = "autograd.record(fn [, train_mode]): runs fn recording ops for backward; returns what fn returns.",
  ["autograd.backward"] = "autograd.backward(heads [, head_grads]): backward from several heads.",
  ["luon.clock"] = "luon.clock(): seconds from a monotonic clock, for timing.",
}

local function sorted_names(v, methods_only)
  local list = {}
  for k in pairs(names_of(v, methods_only)) do
    if k:sub(1, 1) ~= "_" then list[#list + 1] = k end
  end
  table.sort(list)
  return list
end

local function wrap(prefix, list)
  local lines, line = {}, prefix
  for _, name in ipairs(list) do
    if #line + #name + 1 > 78 and line ~= prefix then
      lines[#lines + 1] = line
      line = (" "):rep(#prefix)
    end
    line = line .. " " .. name
  end
  lines[#lines + 1] = line
  return table.concat(lines, "\n")
end

-- The help text for obj (a value, or a dotted name as a string).
function M.help_text(obj)
  if obj == nil then return HELP end
  local name
  if type(obj) == "string" and docs[obj] then
    name = obj
  elseif type(obj) == "string" and obj:match("^[%a_][%w_.]*$") and resolve(obj) ~= nil then
    name, obj = obj, resolve(obj)
  end
  if not name then
    for n in pairs(docs) do
      if resolve(n) == obj or (n == "luon" and obj == package.loaded.luon) then name = n; break end
    end
  end
  local lines = {}
  if name and docs[name] then lines[#lines + 1] = docs[name] end
  if is_array(obj) then
    lines[#lines + 1] = M.describe(obj)
    lines[#lines + 1] = wrap("properties:", sorted_names(ndarray.props))
    lines[#lines + 1] = wrap("methods (x:name(...)):", sorted_names(obj, true))
  elseif #lines == 0 or type(obj) == "table" then
    if #lines == 0 then
      local mt = getmetatable(obj)
      local desc = type(obj)
      if type(mt) == "table" and mt.__tostring then desc = desc .. ": " .. tostring(obj) end
      lines[#lines + 1] = (name and name .. ": " or "") .. desc
    end
    if type(obj) == "table" then
      local fields, methods = {}, {}
      for _, k in ipairs(sorted_names(obj)) do
        local ok, v = pcall(function() return obj[k] end)
        if ok and type(v) == "function" then methods[#methods + 1] = k else fields[#fields + 1] = k end
      end
      if #fields > 0 then lines[#lines + 1] = wrap("fields:", fields) end
      if #methods > 0 then lines[#lines + 1] = wrap("functions:", methods) end
    elseif type(obj) == "function" then
      local info = debug.getinfo(obj, "S")
      lines[#lines + 1] = info.what == "C" and "a built-in (C) function" or
                          ("defined at %s:%d"):format(info.short_src, info.linedefined or 0)
    end
  end
  return table.concat(lines, "\n")
end

function M.help(obj) io.write(M.help_text(obj), "\n") end

---------------------------------------------------------------------------
-- The loop

local jit_chunks = false

-- A chunk's function: an expression first (so `1+1` shows 2), else
-- statements. Returns fn; or nil, true when more input is needed; or nil, err.
-- Expressions go through select(1, ...), passed in as the chunk's argument,
-- so that `error("boom")` is not a tail call and keeps its position.
-- Unless `:jit on`, the chunk and the functions it defines are interpreted,
-- so that Ctrl-C's hook can stop them.
local function interpreted(fn)
  if fn and jit and not jit_chunks then jit.off(fn, true) end
  return fn
end

function M.compile(src)
  if loadstring("return " .. src, "=stdin") then
    local fn = interpreted(loadstring("local __luon_select = ...; return __luon_select(1, " ..
                                      src .. "\n)", "=stdin"))
    if fn then return function() return fn(select) end end
    return interpreted(loadstring("return " .. src, "=stdin"))
  end
  local fn, err = loadstring(src, "=stdin")
  if fn then return interpreted(fn) end
  if err:sub(-7) == "'<eof>'" then return nil, true end
  return nil, err
end

local function run_chunk(call, fn)
  local function finish(ok, ...)
    if ok then
      if select("#", ...) > 0 then _G._ = (...) end
      print_results(select("#", ...), ...)
    else
      io.write(tostring((...)), "\n")
    end
  end
  finish(call(M.traceback, fn))
end

local function command(line, call)
  local cmd, rest = line:match("^:(%S*)%s*(.-)%s*$")
  if cmd == "help" or cmd == "h" or cmd == "?" then
    M.help()
  elseif cmd == "quit" or cmd == "q" or cmd == "exit" then
    return "quit"
  elseif cmd == "jit" then
    if rest == "on" then jit_chunks = true elseif rest == "off" then jit_chunks = false end
    io.write("REPL chunks are ", jit_chunks and "JIT-compiled" or "interpreted (interruptible)", "\n")
  elseif cmd == "time" then
    local fn, err = M.compile(rest)
    if not fn then io.write(err == true and "stdin: incomplete chunk" or err, "\n") return end
    local t0 = require("luon").clock()
    run_chunk(call, fn)
    io.write(("%.6f s\n"):format(require("luon").clock() - t0))
  else
    io.write(("unknown command :%s (:help lists them)\n"):format(cmd))
  end
end

-- The line reader: luon's native one, or plain io.read under plain luajit.
local function reader()
  local ok, native = pcall(require, "luon.repl_native")
  if ok then
    local info = native.init(M.complete)
    return native.readline, native.add_history, native.save_history, native.call, info
  end
  local function plain_read(prompt)
    io.write(prompt)
    io.flush()
    return io.read("*l")
  end
  local function plain_call(handler, fn, ...) return xpcall(fn, handler, ...) end
  return plain_read, function() end, function() end, plain_call, {editing = false}
end

function M.run()
  local luon = require("luon")
  for name, v in pairs({luon = luon, np = luon.np, npx = luon.npx, autograd = luon.autograd,
                        help = M.help}) do
    if rawget(_G, name) == nil then rawset(_G, name, v) end
  end
  if rawget(_G, "gluon") == nil then
    local ok, gluon = pcall(require, "luon.gluon")
    if ok then rawset(_G, "gluon", gluon) end
  end
  local readline, add_history, save_history, call, info = reader()
  native_call = call
  io.write("luon ", luon.version, " (", jit and jit.version or _VERSION, "). ",
           ":help for help, Ctrl-D to leave.\n")
  local buffer
  while true do
    local line = readline(buffer and ">> " or "> ")
    if line == nil then -- end of input
      if not info.editing then io.write("\n") end
      if buffer then -- an unfinished chunk: say why it never ran
        local _, err = loadstring(buffer, "=stdin")
        io.write(err or "stdin: incomplete chunk", "\n")
      end
      break
    end
    if line == false then -- Ctrl-C: drop the line and any unfinished chunk
      buffer = nil
    else
      if line:match("%S") then add_history(line) end
      if not buffer and line:match("^:") then
        if command(line, call) == "quit" then break end
      elseif buffer or line:match("%S") then
        local src = buffer and buffer .. "\n" .. line or line:gsub("^=", "", 1)
        local fn, err = M.compile(src)
        if fn then
          buffer = nil
          run_chunk(call, fn)
        elseif err == true then
          buffer = src
        else
          buffer = nil
          io.write(err, "\n")
        end
      end
    end
  end
  save_history()
end

return M
