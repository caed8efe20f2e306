-- luon.core: the machinery under np and npx: the one error path (raised at
-- the user's line), dtypes, devices, wrapping C tensors for the garbage
-- collector, the argument kit every module reads its arguments with
-- (positional, then one trailing table of checked keywords), unknown-name
-- errors, gluon's class helper, and calling registry ops by name.
local binding = require("luon.ffi")
local ffi, C = binding.ffi, binding.C
local bit = require("bit")

-- One core per Lua state: a require after package.loaded was cleared
-- (busted's insulation between spec files, a module reloader) gets the
-- first one. The arrays' registry, the shared scratch and the wrapping of
-- ffi.gc are the state's; a second copy would wrap finalizers twice and
-- let one copy's finalizers run ops on the other's scratch.
local lua_registry = debug.getregistry()
if lua_registry.luon_core then
  lua_registry.luon_wrap_finalizers() -- again, if something put the originals back
  return lua_registry.luon_core
end

-- An ndarray is a small struct holding the tensor pointer, not the pointer
-- itself: LuaJIT treats `ptr - 1` and `ptr + 1` as pointer arithmetic (and
-- miscompiles it for pointers to incomplete types), and indexes pointers
-- with [] itself. On a struct every operator reaches our metamethods, and
-- x[i] can mean a row. Pass x.t to C.
ffi.cdef("typedef struct luon_array { luon_tensor *t; } luon_array;")
local Array = ffi.typeof("luon_array")

local M = {ffi = ffi, C = C}

---------------------------------------------------------------------------
-- Errors

-- error(msg) for luon's modules: the message is reported at the user's
-- line, the first stack frame outside luon's own directory, however deep in
-- luon the error was found (no caller passes a level). Past a C frame (as in
-- pcall(np.add, a, b)) it gives no position, as Lua does.
local own_prefix = debug.getinfo(1, "S").source:match("^(@.*[/\\])")
-- for the interrupt hooks of bindings/ (paths.c, lu_in_luon_lua): they
-- raise "interrupted" only outside these files
lua_registry.luon_lua_dir = own_prefix
local lua_error = error
-- The shared attribute struct is handed out (M.attrs) and not yet passed to
-- its op; an error on the way gives it back (see M.attrs).
local attrs_busy = false
local function error(msg)
  attrs_busy = false
  if own_prefix then
    for k = 2, 200 do
      local info = debug.getinfo(k, "S")
      if not info or info.what == "C" then lua_error(msg, 0) end
      if info.source:sub(1, #own_prefix) ~= own_prefix then lua_error(msg, k) end
    end
  end
  lua_error(msg, 3) -- luon loaded from no file: the caller of the function that raised
end
M.error = error

-- Raise the last C error.
local function raise()
  error(ffi.string(C.luon_last_error()))
end
M.raise = raise

-- Raise the last C error if status is not LUON_OK.
function M.check(status)
  if status ~= 0 then raise() end
end

---------------------------------------------------------------------------
-- Dtypes: names <-> enum values (luon_dtype, read from the cdef)

local dtype_ids = {float32 = C.LUON_DTYPE_F32, float64 = C.LUON_DTYPE_F64, float16 = C.LUON_DTYPE_F16,
                   bfloat16 = C.LUON_DTYPE_BF16, int32 = C.LUON_DTYPE_I32, int64 = C.LUON_DTYPE_I64,
                   uint8 = C.LUON_DTYPE_U8, bool = C.LUON_DTYPE_BOOL, int8 = C.LUON_DTYPE_I8,
                   int16 = C.LUON_DTYPE_I16, uint16 = C.LUON_DTYPE_U16}
local dtype_names = {}
for name, id in pairs(dtype_ids) do dtype_names[id] = name end
-- aliases NumPy users type
dtype_ids.float, dtype_ids.double, dtype_ids.half = dtype_ids.float32, dtype_ids.float64, dtype_ids.float16
dtype_ids.int, dtype_ids.long = dtype_ids.int64, dtype_ids.int64
dtype_ids.bool_ = dtype_ids.bool
-- the C element type of each dtype (16-bit floats are raw bits)
local ctypes = {[dtype_ids.float32] = "float", [dtype_ids.float64] = "double", [dtype_ids.float16] = "uint16_t",
                [dtype_ids.bfloat16] = "uint16_t", [dtype_ids.int32] = "int32_t", [dtype_ids.int64] = "int64_t",
                [dtype_ids.uint8] = "uint8_t", [dtype_ids.bool] = "uint8_t", [dtype_ids.int8] = "int8_t",
                [dtype_ids.int16] = "int16_t", [dtype_ids.uint16] = "uint16_t"}
M.dtype_ids, M.dtype_names, M.ctypes = dtype_ids, dtype_names, ctypes
M.FLOAT32, M.FLOAT64, M.FLOAT16, M.BFLOAT16 = dtype_ids.float32, dtype_ids.float64, dtype_ids.float16, dtype_ids.bfloat16
M.INT32, M.INT64, M.UINT8, M.BOOL = dtype_ids.int32, dtype_ids.int64, dtype_ids.uint8, dtype_ids.bool
M.INT8, M.INT16, M.UINT16 = dtype_ids.int8, dtype_ids.int16, dtype_ids.uint16

-- The enum value of a dtype given by name (or enum); nil stays nil.
function M.dtype_id(dt, fname)
  if dt == nil then return nil end
  local id = dtype_ids[dt] or (dtype_names[dt] and dt)
  if not id then
    error(("%s: unknown dtype %s (expected one of float32, float64, float16, bfloat16, " ..
           "int32, int64, int8, int16, uint8, uint16, bool)"):format(fname or "dtype", tostring(dt)))
  end
  return id
end

local F32, F64, F16, BF16 = M.FLOAT32, M.FLOAT64, M.FLOAT16, M.BFLOAT16
function M.is_float(id) return id == F32 or id == F64 or id == F16 or id == BF16 end

---------------------------------------------------------------------------
-- Devices: one cached table per (type, id), so == and table keys both work.

local Device = {}
Device.__index = Device
M.Device = Device
local device_cache = {cpu = {}, gpu = {}}
local type_ids = {cpu = C.LUON_CPU, gpu = C.LUON_GPU}
local type_names = {[C.LUON_CPU] = "cpu", [C.LUON_GPU] = "gpu"}

function Device.__tostring(d) return ("%s(%d)"):format(d.device_type, d.device_id) end
function Device.__eq(a, b) return a.type_id == b.type_id and a.device_id == b.device_id end

function M.device(kind, id)
  id = id or 0
  local cache = device_cache[kind]
  if not cache then
    error(("unknown device type %s (expected 'cpu' or 'gpu')"):format(tostring(kind)))
  end
  if type(id) ~= "number" or id < 0 or id % 1 ~= 0 or id >= 2^31 then
    error(("%s(%s): a device id is an integer from 0 to 2^31-1"):format(kind, tostring(id)))
  end
  local d = cache[id]
  if not d then
    d = setmetatable({device_type = kind, device_id = id, type_id = type_ids[kind]}, Device)
    cache[id] = d
  end
  return d
end

-- The Device of C's (type, id) pair, as an array's info gives it: from the
-- cache at once when it is there (an array's device is read on hot paths:
-- x.device, each layer's forward).
function M.device_from_ids(type_id, id)
  local cache = device_cache[type_names[type_id]]
  local d = cache and cache[id]
  if d then return d end
  return M.device(type_names[type_id], id)
end

function M.is_device(d) return getmetatable(d) == Device end

-- The scoped default device (npx.with_device).
M.default_device = M.device("cpu", 0)

-- Resolve a device argument: a Device, nil (the default), or "gpu(1)"/"cpu".
function M.resolve_device(d, fname)
  if d == nil then return M.default_device end
  if getmetatable(d) == Device then
    local st = C.luon_device_check(d.type_id, d.device_id)
    if st ~= 0 then
      error(fname .. ": " .. ffi.string(C.luon_last_error()))
    end
    return d
  end
  if type(d) == "string" then
    local kind, id = d:match("^(%a+)%(?(%d*)%)?$")
    if kind and type_ids[kind] then
      return M.resolve_device(M.device(kind, tonumber(id) or 0), fname)
    end
  end
  error(("%s: device must be a Device such as npx.cpu(0) or npx.gpu(0), got %s")
        :format(fname, tostring(d)))
end

---------------------------------------------------------------------------
-- Tensors and the garbage collector

local release = C.luon_tensor_release
local counters = C.luon_counters_get()
-- LuaJIT sees only the 16-byte cdata of each tensor, so we collect for it:
-- a full collection (then a sweep) once the native bytes handed out since
-- the last one pass a budget. Dead arrays' blocks only return to the cache
-- after that, so the budget decides how much fresh memory a loop faults in.
-- It is the largest of gc_min, twice the Lua heap (a collection costs about
-- the heap's size) and half the native memory in use (so a training step
-- finds the previous step's blocks in the cache). gc_min is small enough
-- that temporaries die while still in the CPU cache: a loop of 1000-element
-- adds runs 7x faster with 256 KB than with 16 MB.
M.gc_min = 256 * 1024
M.gc_threshold = M.gc_min

local gc_pressure

-- Finalizers. LuaJIT runs a finalizer (ffi.gc, a metatype's or newproxy's
-- __gc) at whatever allocation ends a collection step. Two consequences:
-- * An error in one is thrown from that allocation, anywhere; LuaJIT 2.1
--   before 2023 (Debian's included) can crash unwinding it from a trace
--   exit (LuaJIT issue #946). luon runs every finalizer registered after it
--   is loaded under pcall, and reports an error on stderr instead.
-- * A finalizer may run luon ops in the middle of another op's use of the
--   shared scratch below (ins, outs, attrs, info). While one runs
--   (in_finalizer > 0), ops use scratch of their own.
local in_finalizer = 0
local finalizer_errors = 0

local function run_finalizer(f, ...)
  in_finalizer = in_finalizer + 1
  local ok, err = pcall(f, ...)
  in_finalizer = in_finalizer - 1
  if not ok then
    finalizer_errors = finalizer_errors + 1
    if finalizer_errors <= 5 then
      io.stderr:write("luon: error in a finalizer (ignored): ", tostring(err), "\n",
                      finalizer_errors == 5 and "luon: further errors in finalizers are not shown\n" or "")
    end
  end
end

local function protected(f)
  if type(f) ~= "function" then return f end
  return function(...) return run_finalizer(f, ...) end
end

local ffi_gc, ffi_metatype = ffi.gc, ffi.metatype
local function wrapped_gc(cdata, f) return ffi_gc(cdata, protected(f)) end
local function wrapped_metatype(ct, mt)
  if type(mt) == "table" and type(rawget(mt, "__gc")) == "function" then
    local copy = {}
    for k, v in pairs(mt) do copy[k] = v end
    copy.__gc = protected(mt.__gc)
    mt = copy
  end
  return ffi_metatype(ct, mt)
end
-- newproxy(true): a __gc stored into its fresh metatable is wrapped too
local lua_newproxy = newproxy
local guard = {__newindex = function(mt, k, v)
  rawset(mt, k, k == "__gc" and protected(v) or v)
end}
local function wrapped_newproxy(arg)
  local u = lua_newproxy(arg)
  if arg == true then setmetatable(getmetatable(u), guard) end
  return u
end
-- (a test harness that restores the globals between files, as busted does,
-- undoes this; the next require("luon") does it again)
function lua_registry.luon_wrap_finalizers()
  ffi.gc, ffi.metatype, newproxy = wrapped_gc, wrapped_metatype, wrapped_newproxy
end
lua_registry.luon_wrap_finalizers()

-- Handing tensors to the GC. ffi.gc costs about 400 ns per object in
-- LuaJIT (its finalizer table), more than an op. Instead every tensor
-- pointer sits in slot i of a C array and its cdata in slot i of a table
-- with weak values: when a GC cycle has cleared a slot, the tensor is
-- released by the next sweep. A sentinel finalizer tells when a cycle
-- ended; forced collections (gc_pressure) sweep at once.
local slots = setmetatable({}, {__mode = "v"})
local cap, top = 4096, 0
local ptrs = ffi.new("luon_tensor*[?]", cap + 1)
local free_ids, nfree = {}, 0
local cycle_done = false

local function sentinel()
  local u = lua_newproxy(true)
  getmetatable(u).__gc = function()
    cycle_done = true
    sentinel()
  end
end
sentinel()

local function sweep()
  cycle_done = false
  for i = 1, top do
    if slots[i] == nil then
      local p = ptrs[i]
      if p ~= nil then
        ptrs[i] = nil
        release(p)
        nfree = nfree + 1
        free_ids[nfree] = i
      end
    end
  end
end
M.sweep = sweep

gc_pressure = function()
  if counters.bytes_since_gc > M.gc_threshold and in_finalizer == 0 then
    collectgarbage("collect")
    sweep()
    counters.bytes_since_gc = 0
    M.gc_threshold = math.max(M.gc_min, 2 * 1024 * collectgarbage("count"),
                              tonumber(counters.bytes_in_use) / 2)
  end
end
M.gc_pressure = gc_pressure

-- Who collects (for hosts with a deadline: a robot's control tick, a game's
-- frame). "auto": the above, so an op may pay for a full collection.
-- "manual": no op ever collects: LuaJIT's collector is stopped and
-- gc_pressure only counts; the host calls gc_step between ticks (the C
-- API's luon_rt_gc_step does, timed), or memory grows without bound.
-- A forced collection elsewhere (the retry after LUON_ENOMEM, npx.empty_cache)
-- restarts LuaJIT's collector until the next gc_step stops it again.
M.gc_mode = "auto"
function M.set_gc_mode(mode)
  if mode == "manual" then
    M.gc_threshold = 2 ^ 62 -- never reached (a finite number: it is compared with an int64)
    collectgarbage("stop")
  elseif mode == "auto" then
    M.gc_threshold = M.gc_min
    collectgarbage("restart")
  else
    error(("set_gc_mode: mode must be 'auto' or 'manual', got %s"):format(tostring(mode)))
  end
  M.gc_mode = mode
end

-- One small incremental step of collection (collectgarbage("step", kb));
-- when it finishes a cycle, the arrays found dead are released at once and
-- true is returned.
function M.gc_step(kb)
  local done = collectgarbage("step", kb or 0)
  if M.gc_mode == "manual" then collectgarbage("stop") end
  if done then
    sweep()
    counters.bytes_since_gc = 0
  end
  return done
end

-- Hand a new (+1) tensor pointer to the GC; returns the array.
-- Every allocation here (the array, a bigger slot array, the table store)
-- may end a collection cycle, and the next wrap then sweeps: so the slot is
-- claimed first, the array is in slots[i] before ptrs[i] names the tensor (a
-- sweep releases ptrs[i] when slots[i] is empty), and the slot array grows
-- only while it is still too small once the new one exists.
local function release_array(a) release(a.t) end

local function wrap(p)
  -- A finalizer may run between any two statements here or in sweep (at an
  -- allocation or a trace exit): the arrays its ops make are left to
  -- ffi.gc, and never touch the slots.
  if in_finalizer > 0 then return ffi_gc(Array(p), release_array) end
  if cycle_done then sweep() end
  local i
  if nfree > 0 then
    i = free_ids[nfree]
    nfree = nfree - 1
  else
    top = top + 1
    i = top
    while i > cap do
      local size = 2 * cap + 1
      local bigger = ffi.new("luon_tensor*[?]", size)
      if size == 2 * cap + 1 then
        ffi.copy(bigger, ptrs, ffi.sizeof("luon_tensor*") * (cap + 1))
        ptrs, cap = bigger, 2 * cap
      end
    end
  end
  local a = Array(p)
  slots[i] = a
  ptrs[i] = p
  return a
end
M.wrap = wrap

-- Release every tensor still held when the Lua state closes (embedding).
local closer = lua_newproxy(true)
getmetatable(closer).__gc = function()
  for i = 1, top do
    local p = ptrs[i]
    if p ~= nil then
      ptrs[i] = nil
      release(p)
    end
  end
end
M._closer = closer

local info = ffi.new("luon_tensor_info")
-- Fill the shared info struct for t and return it.
function M.info_of(t)
  if not M.is_array(t) then M.error(("expected an ndarray, got %s"):format(M.show_value(t))) end
  local i = in_finalizer == 0 and info or ffi.new("luon_tensor_info")
  C.luon_tensor_info_get(t.t, i)
  return i
end

-- The values of array x on the host: a flat buffer of its elements
-- (int64_t for int64, double for every other dtype), their count, and
-- whether x is bool or int64.
function M.host_values(x)
  local i = M.info_of(x)
  local n = tonumber(i.size)
  local is_bool, is_int = i.dtype == M.BOOL, i.dtype == M.INT64
  local buf, dt
  if is_int then
    buf, dt = ffi.new("int64_t[?]", n > 0 and n or 1), M.INT64
  else
    buf, dt = ffi.new("double[?]", n > 0 and n or 1), M.FLOAT64
  end
  M.check(C.luon_tensor_to_host(x.t, buf, dt, ffi.sizeof(buf)))
  return buf, n, is_bool, is_int
end

---------------------------------------------------------------------------
-- The argument kit: how every luon function reads its arguments. NumPy or
-- MXNet order, then one trailing table of keywords (kw, args, options);
-- every keyword table is checked against the keys the function reads
-- (check_keys: an unknown key is an error naming it, the known ones and
-- the close ones), and every error names the function (fname) and the
-- value, at the user's line (error).

-- Split trailing keyword table from positional args: returns kw (maybe {}).
function M.kw(...)
  local n = select("#", ...)
  if n == 0 then return {}, 0 end
  local last = select(n, ...)
  if type(last) == "table" and getmetatable(last) == nil and last[1] == nil then
    return last, n - 1
  end
  return {}, n
end

-- A shape argument: a Lua list of integers, or one integer.
function M.shape_arg(s, fname)
  if type(s) == "number" then s = {s} end
  if type(s) ~= "table" then
    error(("%s: shape must be a list of integers such as {3, 4}, got %s"):format(fname, tostring(s)))
  end
  for k = 1, #s do
    local v = s[k]
    if type(v) ~= "number" or v % 1 ~= 0 then
      error(("%s: shape entries must be integers, got %s at position %d"):format(fname, tostring(v), k))
    end
    if v < 0 then
      error(("%s: negative dimensions are not allowed (shape {%s})"):format(fname, table.concat(s, ", ")))
    end
  end
  if #s > 8 then
    error(("%s: %d dimensions, at most 8 are supported"):format(fname, #s))
  end
  return s
end

-- "(2,3)", "(4,)", "()": a Lua shape list as NumPy prints it.
function M.shape_text(shape)
  return "(" .. table.concat(shape, ",") .. (#shape == 1 and ",)" or ")")
end

function M.same_shape(a, b)
  if #a ~= #b then return false end
  for k = 1, #a do if a[k] ~= b[k] then return false end end
  return true
end

-- Whether v is an integer that an int64 attribute holds (|v| < 2^62, so
-- that arithmetic on it stays exact): the test of every integer argument.
local function is_int(v)
  return type(v) == "number" and v % 1 == 0 and v < 2^62 and v > -2^62
end
M.is_int = is_int

-- An integer argument (an axis, a count), at least lo and at most hi when
-- they are given, or an error naming fname and what.
function M.int_arg(v, fname, what, lo, hi)
  if not is_int(v) or (lo and v < lo) or (hi and v > hi) then
    local range = lo and hi and (" from %d to %d"):format(lo, hi) or lo and (" >= %d"):format(lo) or ""
    error(("%s: %s must be an integer%s, got %s"):format(fname, what, range, M.show_value(v)))
  end
  return v
end

-- An array argument: x when it is an ndarray, else an error naming fname
-- and what (a noun, or a number n for "argument n").
function M.array_arg(x, fname, what)
  if not M.is_array(x) then
    if type(what) == "number" then what = "argument " .. what end
    error(("%s: %s must be an ndarray, got %s"):format(fname, what, type(x)))
  end
  return x
end

-- A number argument, or an error naming fname and what.
function M.num_arg(v, fname, what)
  if type(v) ~= "number" then
    error(("%s: %s must be a number, got %s"):format(fname, what, M.show_value(v)))
  end
  return v
end

-- A file or directory name: a non-empty string without a NUL byte (C would
-- stop at it: "a.png\0junk" would quietly mean "a.png").
function M.path_arg(path, fname, what)
  what = what or "the file name"
  if type(path) ~= "string" or path == "" then
    error(("%s: %s must be a non-empty string, got %s"):format(fname, what, M.show_value(path)))
  end
  if path:find("\0", 1, true) then
    error(("%s: %s contains a NUL byte: %q"):format(fname, what, path))
  end
  return path
end

-- The entries of directory path: a list of {name =, kind = 'd'|'f'|'o'}
-- sorted by name in byte order (as Python's sorted()), or an error naming
-- fname.
local listbuf, listlen = ffi.new("char*[1]"), ffi.new("int64_t[1]")
function M.list_dir(path, fname)
  if C.luon_dir_list(path, listbuf, listlen) ~= 0 then
    error(("%s: %s"):format(fname, ffi.string(C.luon_last_error())))
  end
  local s = ffi.string(listbuf[0], listlen[0])
  C.luon_free(listbuf[0])
  local out = {}
  for kind, name in s:gmatch("(.)([^%z]*)%z") do out[#out + 1] = {name = name, kind = kind} end
  table.sort(out, function(a, b) return a.name < b.name end)
  return out
end

-- Make directory path and its missing parents (Python's os.makedirs with
-- exist_ok), or an error naming fname, the path and the reason.
ffi.cdef("int mkdir(const char *path, unsigned int mode);")
function M.make_dirs(path, fname)
  M.path_arg(path, fname, "the directory")
  local sofar = path:sub(1, 1) == "/" and "/" or ""
  for part in path:gmatch("[^/]+") do
    sofar = sofar .. part
    if ffi.C.mkdir(sofar, 511) ~= 0 then   -- 0777, less the umask
      local f = io.open(sofar .. "/.", "rb")
      if not f then
        error(("%s: cannot create the directory %q (%s is not a directory or is not writable)")
              :format(fname, path, sofar))
      end
      f:close()
    end
    sofar = sofar .. "/"
  end
  return path
end

-- Every key of the options table t is in one of the lists of known keys,
-- or an error naming fname, the key and the known ones. A list is an array
-- of names (shown in its order) or a set {name = true} (shown sorted);
-- what is the noun of the message ("option" unless given: "argument" for
-- Python's keyword arguments).
local function listed(list, k)
  if list == nil then return false end
  if list[k] == true then return true end
  for i = 1, #list do
    if list[i] == k then return true end
  end
  return false
end
local function names_of(list)
  if list == nil then return {} end
  if #list > 0 or next(list) == nil then return list end
  local t = {}
  for k in pairs(list) do t[#t + 1] = k end
  table.sort(t)
  return t
end
-- Whether shapes a and b (lists) broadcast together (NumPy's rule).
function M.broadcastable(a, b)
  for k = 1, math.min(#a, #b) do
    local x, y = a[#a - k + 1], b[#b - k + 1]
    if x ~= y and x ~= 1 and y ~= 1 then return false end
  end
  return true
end

function M.check_keys(t, fname, known, more, what)
  for k in pairs(t) do
    if not listed(known, k) and not listed(more, k) then
      local names = names_of(known)
      local extra = names_of(more)
      local all = {}
      for i = 1, #names do all[i] = names[i] end
      for i = 1, #extra do all[#all + 1] = extra[i] end
      error(("%s: unknown %s %s (known: %s)%s"):format(fname, what or "option", M.show_value(k),
            table.concat(all, ", "), M.did_you_mean(k, all)))
    end
  end
  return t
end

-- An options table: nil gives {}; anything but a plain table (an array
-- included) is an error naming fname and what ("options" unless given);
-- its keys must be in known or more (check_keys, whose noun is noun).
function M.options(kw, fname, known, more, what, noun)
  if kw == nil then return {} end
  if type(kw) ~= "table" or M.is_array(kw) then
    error(("%s: %s must be a table of named options such as {%s = ...}, got %s")
          :format(fname, what or "options", known[1], M.show_value(kw)))
  end
  return M.check_keys(kw, fname, known, more, noun)
end

-- Positional arguments (by name, in the order of `names`) then one trailing
-- table of keywords (core.kw), merged into one new table. Keywords must be
-- in known (a list or set, check_keys; noun "argument"); a name given both
-- positionally and as a keyword is an error, as Python's TypeError.
function M.args(fname, names, known, ...)
  local kw, n = M.kw(...)
  M.check_keys(kw, fname, known, nil, "argument")
  local out = {}
  for k, v in pairs(kw) do out[k] = v end
  for i = 1, math.min(n, #names) do
    local v = select(i, ...)
    if v ~= nil then
      if out[names[i]] ~= nil then
        error(("%s: got multiple values for argument '%s' (positional and keyword)"):format(fname, names[i]))
      end
      out[names[i]] = v
    end
  end
  if n > #names and select(#names + 1, ...) ~= nil then
    error(("%s: takes at most %d positional arguments before the options table, got %d")
          :format(fname, #names, n))
  end
  return out
end

-- The device an options table names: its `device`, or `ctx` (MXNet 1.x's
-- name for it; every device keyword reads it through here). Both, naming
-- different devices, is an error.
function M.device_of(kw, fname)
  local d, c = kw.device, kw.ctx
  if c == nil then return d end
  if d ~= nil and d ~= c then
    error(("%s: device (%s) and ctx (%s) both given; ctx is MXNet 1.x's name for device, give one")
          :format(fname, tostring(d), tostring(c)))
  end
  return c
end

-- The n sizes of a size given as k or {k} or a list of n (n = 1, 2, 3:
-- {w}, {h, w}, {d, h, w}): integers, at least 0 for padding (and adj,
-- output_padding) and at least 1 for kernels, strides and dilations (npx's
-- convolution, deconvolution and pooling, gluon.nn's layers); a list.
local size_lists = {"one {w}", "two {h, w}", "three {d, h, w}"}
local zero_ok = {pad = true, padding = true, adj = true, output_padding = true}
function M.sizes(v, n, default, fname, what)
  if v == nil then v = default end
  local t
  if type(v) == "number" then t = {}; for k = 1, n do t[k] = v end
  elseif type(v) == "table" and #v == 1 then t = {}; for k = 1, n do t[k] = v[1] end
  elseif type(v) == "table" and #v == n then t = {}; for k = 1, n do t[k] = v[k] end end
  local min = zero_ok[what] and 0 or 1
  local ok = t ~= nil
  for k = 1, n do ok = ok and is_int(t[k]) and t[k] >= min and t[k] < 2^31 end
  if not ok then
    error(("%s: %s must be an integer >= %d or a list of %s, got %s"):format(fname, what, min, size_lists[n],
          type(v) == "table" and "{" .. table.concat(M.map_show(v), ", ") .. "}" or M.show_value(v)))
  end
  return t
end

-- (h, w) of a size given as n or {n} or {h, w} (sizes with n = 2).
function M.pair(v, default, fname, what)
  local t = M.sizes(v, 2, default, fname, what)
  return t[1], t[2]
end

-- A warning on stderr ("Warning: ..."), as MXNet's Python warnings print.
function M.warn(msg)
  io.stderr:write("Warning: ", tostring(msg), "\n")
end

-- A value as an error message shows it: strings quoted, others by tostring.
-- Other cdata show their type (no metamethod of theirs runs: a NULL
-- luon_array pointer has luon's metatype, and would be dereferenced).
function M.show_value(v)
  if type(v) == "string" then return "'" .. v .. "'" end
  if type(v) == "cdata" and not M.is_array(v) then
    return (tostring(ffi.typeof(v)):gsub("^ctype", "cdata"))
  end
  return tostring(v)
end

-- The entries of a list, each as show_value shows it.
function M.map_show(list)
  local t = {}
  for k = 1, #list do t[k] = M.show_value(list[k]) end
  return t
end

---------------------------------------------------------------------------
-- Unknown names: "gluon.nn has no field 'Conv2d'; did you mean 'Conv2D'?"

-- Edit distance between two strings: insertions, deletions, substitutions
-- and swaps of two neighbours ("haed" is one from "head").
local function distance(a, b)
  local d = {}
  for i = 0, #a do d[i] = {[0] = i} end
  for j = 0, #b do d[0][j] = j end
  for i = 1, #a do
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      local v = math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
      if i > 1 and j > 1 and a:byte(i) == b:byte(j - 1) and a:byte(i - 1) == b:byte(j) then
        v = math.min(v, d[i - 2][j - 2] + 1)
      end
      d[i][j] = v
    end
  end
  return d[#a][#b]
end

-- The names of `names` (a list) closest to name: the ones equal to it but
-- for case, else the ones nearest by edit distance (case-insensitive), if
-- that distance is small for the name's length; sorted.
function M.suggest(name, names)
  local low = name:lower()
  local same = {}
  for _, n in ipairs(names) do
    if n ~= name and n:lower() == low then same[#same + 1] = n end
  end
  if #same > 0 then table.sort(same); return same end
  local best, found = math.min(3, math.max(1, math.floor(#name / 3))), {}
  for _, n in ipairs(names) do
    if n ~= name and math.abs(#n - #name) <= best then
      local d = distance(low, n:lower())
      if d < best then best, found = d, {} end
      if d == best then found[#found + 1] = n end
    end
  end
  table.sort(found)
  return found
end

-- The public names (string keys not starting with "_") of the tables
-- given (nil ones skipped), each once: what an unknown-name error offers.
function M.public_names(...)
  local names, seen = {}, {}
  for i = 1, select("#", ...) do
    local t = select(i, ...)
    if type(t) == "table" then
      for n in pairs(t) do
        if type(n) == "string" and n:byte(1) ~= 95 and not seen[n] then seen[n] = true; names[#names + 1] = n end
      end
    end
  end
  return names
end

-- "; did you mean 'x'?" naming the closest of the list names to k (a
-- string; suggest), or "" when none is close.
function M.did_you_mean(k, names)
  local close = type(k) == "string" and M.suggest(k, names) or {}
  if #close == 0 then return "" end
  local shown = M.map_show(close)
  local last = table.remove(shown)
  return "; did you mean " .. (#shown > 0 and table.concat(shown, ", ") .. " or " or "") .. last .. "?"
end

-- Raise "<what> has no field 'k'; did you mean ...?" with the closest of
-- the list names, at the user's line.
function M.no_field(what, k, names)
  error(("%s has no field %s"):format(what, M.show_value(k)) .. M.did_you_mean(k, names))
end

-- Give module table t (named what, as "gluon.nn") a metatable whose
-- __index raises no_field for a name it lacks. lazy (optional) maps names
-- loaded on first use to a function giving the value, kept in t once made.
function M.strict_module(t, what, lazy)
  lazy = lazy or {}
  return setmetatable(t, {__index = function(_, k)
    local load = lazy[k]
    if load then
      local v = load()
      rawset(t, k, v)
      return v
    end
    local names = {}
    for n in pairs(t) do if type(n) == "string" then names[#names + 1] = n end end
    for n in pairs(lazy) do if rawget(t, n) == nil then names[#names + 1] = n end end
    M.no_field(what, k, names)
  end})
end

---------------------------------------------------------------------------
-- Classes (gluon's optimizers, schedulers, losses, metrics, Trainer)

-- The public names (not "_...") of obj, of its class chain and its props.
local function class_names(obj, c)
  local ts = {obj}
  while c do
    ts[#ts + 1], ts[#ts + 2] = c, rawget(c, "_props")
    local mt = getmetatable(c)
    c = mt and mt.__index
  end
  return M.public_names(unpack(ts))
end

-- A class whose instances read `props` (computed fields) before methods;
-- metamethods (__call, __tostring) are inherited by copying. In a class
-- with _strict set, reading a public name nobody defines is an error
-- naming the close ones (Optimizer's own code probes optional fields).
-- The parent of class c (nil for a root class).
local function parent_of(c)
  local mt = getmetatable(c)
  return type(mt) == "table" and mt.__index or nil
end

-- Whether x (a class made by class(), or one of its instances) is cls or
-- derives from it.
function M.derives(x, cls)
  if type(x) ~= "table" then return false end
  local c = rawget(x, "__name") ~= nil and x or getmetatable(x)
  while type(c) == "table" do
    if c == cls then return true end
    c = parent_of(c)
  end
  return false
end

-- What Parent:extend(...) takes, for both class systems (these classes and
-- gluon's blocks): ("Name") or ("Name", methods) or {"Name", method = f, ...}.
-- Returns the name and a table of the methods (maybe empty).
function M.class_spec(name, methods, who)
  if type(name) == "table" and methods == nil then
    local spec = name
    name, methods = spec[1], {}
    for k, v in pairs(spec) do
      if k ~= 1 then
        if type(k) ~= "string" then
          error(("%s: a class spec holds its name first, then methods by name, got key %s")
                :format(who, M.show_value(k)))
        end
        methods[k] = v
      end
    end
  end
  if type(name) ~= "string" or name == "" then
    error(("%s: the class needs a name string, got %s"):format(who, M.show_value(name)))
  end
  if methods ~= nil and type(methods) ~= "table" then
    error(("%s: methods must be a table of name = function, got %s"):format(who, M.show_value(methods)))
  end
  return name, methods or {}
end

-- A class made by extend must define, for each group of its base's
-- _required ({"a", "b", text = "..."}: one of them), one of the names itself
-- (the base's own placeholder does not count). Checked at its first
-- instance, since methods are added after extend returns.
local function check_required(cls)
  if rawget(cls, "_checked") then return end
  local base = cls
  while base and rawget(base, "_required") == nil do base = parent_of(base) end
  for _, group in ipairs(base and rawget(base, "_required") or {}) do
    local found = false
    for _, m in ipairs(group) do
      local c = cls
      while c and c ~= base and not found do
        found = type(rawget(c, m)) == "function"
        c = parent_of(c)
      end
    end
    if not found then
      error(("%s: a subclass of %s must define %s"):format(cls.__name, base.__name, group.text))
    end
  end
  rawset(cls, "_checked", true)
end

local class

-- Cls = Parent:extend("Name"[, methods]) or Parent:extend{"Name", f = ...}:
-- a subclass, as Block:extend makes blocks; define Cls:__init(...) (or
-- inherit the parent's) and the methods its base requires.
local function extend(parent, name, methods)
  name, methods = M.class_spec(name, methods, (parent.__name or "class") .. ":extend")
  local c = class(name, parent)
  c._extended = true
  for k, v in pairs(methods) do c[k] = v end
  return c
end

-- Register cls in registry (lower-case names) from register(cls), named by
-- its class name, register(cls, name), as MXNet's, or register(name, cls);
-- cls must derive from base. Replacing another class warns, as MXNet.
-- Returns cls.
function M.register(registry, base, who, a, b)
  local cls, name = a, b
  if type(a) == "string" then cls, name = b, a end
  if name == nil and type(cls) == "table" then name = rawget(cls, "__name") end
  if not M.derives(cls, base) or rawget(cls, "__name") == nil then
    error(("%s: expected a subclass of %s (made with %s:extend), got %s")
          :format(who, base.__name, base.__name, M.show_value(cls)))
  end
  if type(name) ~= "string" or name == "" then
    error(("%s: the name must be a non-empty string, got %s"):format(who, M.show_value(name)))
  end
  local old = registry[name:lower()]
  if old ~= nil and old ~= cls then
    M.warn(("%s: the %s '%s' registered as '%s' replaces %s"):format(who, base.__name, cls.__name,
                                                                 name:lower(), old.__name))
  end
  registry[name:lower()] = cls
  return cls
end

function class(name, parent)
  local c = {__name = name, _props = setmetatable({}, {__index = parent and parent._props})}
  c.__index = function(self, k)
    local p = c._props[k]
    if p then return p(self) end
    local v = c[k]
    if v == nil and c._strict and type(k) == "string" and k:byte(1) ~= 95 then
      M.no_field(name, k, class_names(self, c))
    end
    return v
  end
  if parent then
    for _, mm in ipairs({"__call", "__tostring", "__newindex"}) do c[mm] = rawget(parent, mm) end
  else
    c.extend = extend -- inherited by every class below
  end
  return setmetatable(c, {
    __index = parent,
    __call = function(cls, ...)
      if rawget(cls, "_extended") then check_required(cls) end
      local obj = setmetatable({}, cls)
      cls.__init(obj, ...)
      return obj
    end,
    __tostring = function() return name end,
  })
end
M.class = class

-- Whether obj is an instance of cls (a class of core.class) or of a class
-- derived from it.
function M.instance_of(obj, cls)
  if type(obj) ~= "table" then return false end
  local c = getmetatable(obj)
  while type(c) == "table" do
    if c == cls then return true end
    local mt = getmetatable(c)
    c = mt and mt.__index
  end
  return false
end

---------------------------------------------------------------------------
-- Calling ops

local op_ids = {}
for i = 0, C.luon_op_count() - 1 do op_ids[ffi.string(C.luon_op_name(i))] = i end
M.op_ids = op_ids

-- The registry's facts about each op (core/luon_ops.def), by name: id, name,
-- nin, nout, kind ('new', 'view', 'inplace'), grad, half, cpu, cuda (where
-- it runs), fused, random, np_map, np_reduce, method. Read them here; never keep a list of op names.
local op_info, op_names = {}, {}
do
  local info = ffi.new("luon_op_info")
  for i = 0, C.luon_op_count() - 1 do
    M.check(C.luon_op_info_get(i, info))
    local name = ffi.string(info.name)
    op_names[i + 1] = name
    op_info[name] = {id = i, name = name, nin = info.num_inputs, nout = info.num_outputs,
                     kind = ({[0] = "new", "view", "inplace"})[info.kind],
                     grad = info.has_grad == 1, half = info.half == 1,
                     cpu = bit.band(info.backends, C.LUON_BACKEND_CPU) ~= 0,
                     cuda = bit.band(info.backends, C.LUON_BACKEND_CUDA) ~= 0,
                     fused = info.fused == 1, random = info.random == 1, np_map = info.np_map == 1,
                     np_reduce = info.np_reduce == 1, method = info.method == 1}
  end
end
M.op_info = op_info
-- The names of the ops with a fact (a field of op_info), in registry order.
function M.ops_with(fact)
  local r = {}
  for _, name in ipairs(op_names) do
    if op_info[name][fact] then r[#r + 1] = name end
  end
  return r
end
-- Whether op (a name) has a kernel for device type dev_type (1 cpu, 2 gpu).
function M.op_runs_on(name, dev_type)
  local i = op_info[name]
  return (dev_type == 1 and i.cpu) or (dev_type == 2 and i.cuda) or false
end

-- The registry's named attribute slots (LUON_SLOTS): core.slot.CONV2D_RELU
-- is that slot's index in attrs.i (or attrs.f for a float slot), so that Lua
-- writes a.i[slot.CONV2D_RELU], never a number. An unknown name is an error.
local slot = {}
do
  local is_float, index = ffi.new("int32_t[1]"), ffi.new("int32_t[1]")
  local k = 0
  while true do
    local name = C.luon_attr_slot(k, is_float, index)
    if name == nil then break end
    slot[ffi.string(name)] = index[0]
    k = k + 1
  end
end
M.slot = setmetatable(slot, {__index = function(_, k) error("no attribute slot named " .. tostring(k), 2) end,
                             __newindex = function() error("core.slot is read-only", 2) end})

local ins = ffi.new("luon_tensor*[8]")
local outs = ffi.new("luon_tensor*[8]")
local nout = ffi.new("int32_t[1]")
local attrs = ffi.new("luon_attrs")
local ENOMEM = C.LUON_ENOMEM

-- A zeroed attribute struct, shared: fill it and pass it to call at once.
-- While a caller holds it (until its op runs, or a luon error), anyone else
-- gets a new one: a finalizer of the host's (a newproxy's __gc) that runs
-- ops may run at any allocation between the caller's attrs() and its call,
-- and took the same struct, zeroing what the caller had filled in
-- (np.arange(6) once ran as arange(0, 0, 0)).
function M.attrs()
  if in_finalizer > 0 or attrs_busy then return ffi.new("luon_attrs") end
  attrs_busy = true
  ffi.fill(attrs, ffi.sizeof(attrs))
  return attrs
end

-- Put a Lua list of integers into attrs.i starting at index `from`, after
-- checking that they are integers and fit (LUON_MAX_ATTR_INTS); errors name
-- fname.
local MAX_INTS = C.LUON_MAX_ATTR_INTS

function M.set_ints(a, list, from, fname)
  from = from or 0
  if type(list) ~= "table" then
    error(("%s: expected a list of integers, got %s"):format(fname, M.show_value(list)))
  end
  local n = #list
  if from + n > MAX_INTS then
    error(("%s: %d integers given, at most %d are supported"):format(fname, n, MAX_INTS - from))
  end
  for k = 1, n do
    local v = list[k]
    if not is_int(v) then
      if type(v) == "number" and v % 1 == 0 then
        error(("%s: %.17g at position %d is too large (integers here stay below 2^62 in size)")
              :format(fname, v, k))
      end
      error(("%s: expected integers, got %s at position %d"):format(fname, M.show_value(v), k))
    end
    a.i[from + k - 1] = v
  end
  a.ni = from + n
end

-- Fill the inputs (the list `inputs`, or x and y) and outputs (`out`, else
-- empty) and run op; on LUON_ENOMEM collect, sweep, fill again and retry
-- once (oom: the caller's own first try failed so: collect first). Returns
-- the status and the output and count buffers, which the caller reads
-- before anything allocates (a finalizer may reuse them).
local function run(op, n, a, inputs, x, y, out, cap, oom)
  local I, O, N = ins, outs, nout
  if in_finalizer > 0 then
    I, O, N = ffi.new("luon_tensor*[8]"), ffi.new("luon_tensor*[8]"), ffi.new("int32_t[1]")
  elseif cap then
    -- several outputs are read after allocations (each read boxes a
    -- pointer), where a host's finalizer that runs ops could overwrite the
    -- shared array: the op's own array, made before the call
    O, N = ffi.new("luon_tensor*[8]"), ffi.new("int32_t[1]")
  end
  local st
  for attempt = oom and 2 or 1, 2 do
    if attempt == 2 then
      if in_finalizer > 0 then break end -- no collection inside one
      collectgarbage("collect"); collectgarbage("collect")
      sweep()
    end
    if inputs then
      for k = 1, n do I[k - 1] = inputs[k].t end
    else
      I[0] = x.t
      if y then I[1] = y.t end
    end
    for k = 0, (cap or 1) - 1 do O[k] = out and out[k + 1] and out[k + 1].t or nil end
    N[0] = cap or 1
    st = C.luon_op_call(op, n, I, a, N, O)
    if st ~= ENOMEM then break end
  end
  if rawequal(a, attrs) then attrs_busy = false end
  return st, O, N
end

-- Automatic mixed precision (luon.amp): nil when off, else a table by op id
-- of {from = {[dtype id] = true}, to = dtype id}: the inputs of that op
-- whose dtype is in `from` are cast to `to` (a recorded copy, so gradients
-- flow back in the input's dtype) before it runs.
local amp_rules = nil
-- Bumped at each set_amp_rules: a hybridized block's graphs hold the casts
-- of the rules they were traced under, so the count is part of a signature.
M.amp_epoch = 0
function M.set_amp_rules(rules)
  amp_rules = rules
  M.amp_epoch = M.amp_epoch + 1
end
-- Whether luon.amp casts op's inputs (a fused op that stands for it, as
-- linear for matmul, steps aside then).
function M.amp_casts(op) return amp_rules ~= nil and amp_rules[op] ~= nil end
local cast_attrs = ffi.new("luon_attrs") -- never the shared one: the caller's attrs are filled
local cast_info = ffi.new("luon_tensor_info") -- nor the shared info a caller may be reading
local function amp_cast(op, inputs)
  local rule = amp_rules[op]
  if not rule then return inputs end
  local cast
  for k = 1, #inputs do
    local x = inputs[k]
    if M.is_array(x) and C.luon_tensor_info_get(x.t, cast_info) == 0 and rule.from[cast_info.dtype] then
      cast = cast or {unpack(inputs)}
      ffi.fill(cast_attrs, ffi.sizeof(cast_attrs))
      cast_attrs.dtype = rule.to
      cast[k] = M.call(op_ids.copy, {x}, cast_attrs)
    end
  end
  return cast or inputs
end

-- Run op id with inputs given as a Lua list; one output unless `cap`.
-- Returns the new array (or, with cap, a list of them). `out` is an
-- optional list of arrays to write into.
function M.call(op, inputs, a, out, cap)
  local n = #inputs
  if n > 8 or (cap or 1) > 8 then -- the sizes of ins and outs (LUON_MAX_OP_INPUTS)
    error(("%s: %d inputs and %d outputs, at most 8 of each"):format(
          ffi.string(C.luon_op_name(op)), n, cap or 1))
  end
  for k = 1, n do
    if not M.is_array(inputs[k]) then
      error(("%s: input %d must be an ndarray, got %s"):format(ffi.string(C.luon_op_name(op)), k,
            M.show_value(inputs[k])))
    end
  end
  if amp_rules and amp_rules[op] then inputs = amp_cast(op, inputs) end
  local st, O, N = run(op, n, a, inputs, nil, nil, out, cap)
  if st ~= 0 then raise() end
  if not cap then
    local p = O[0]
    gc_pressure()
    if out and out[1] then
      release(p) -- the C call's +1 on an array the caller already holds
      return out[1]
    end
    return wrap(p)
  end
  local m, ps = N[0], O -- O is this call's own array (run)
  gc_pressure()
  local res = {}
  for k = 0, m - 1 do
    if out and out[k + 1] then
      release(ps[k])
      res[k + 1] = out[k + 1]
    else
      res[k + 1] = wrap(ps[k])
    end
  end
  return res
end

-- The hot paths: one or two inputs, no attributes, one new output.
function M.call1(op, x, a)
  if amp_rules and amp_rules[op] then return M.call(op, {x}, a) end
  if not M.is_array(x) then
    error(("%s: expected an ndarray, got %s"):format(ffi.string(C.luon_op_name(op)), M.show_value(x)))
  end
  local st, O = run(op, 1, a, nil, x)
  if st ~= 0 then raise() end
  local p = O[0]
  gc_pressure()
  return wrap(p)
end

function M.call2(op, x, y)
  if amp_rules and amp_rules[op] then return M.call(op, {x, y}) end
  local st, O
  if in_finalizer == 0 then -- run's first attempt, unrolled for arithmetic
    ins[0], ins[1] = x.t, y.t
    outs[0] = nil
    nout[0] = 1
    st, O = C.luon_op_call(op, 2, ins, nil, nout, outs), outs
  end
  if st == nil or st == ENOMEM then st, O = run(op, 2, nil, nil, x, y, nil, nil, st == ENOMEM) end
  if st ~= 0 then raise() end
  local p = O[0]
  if counters.bytes_since_gc > M.gc_threshold then gc_pressure() end
  return wrap(p)
end

-- ffi.istype(Array, x) is also true of a pointer to the struct (NULL too):
-- such a pointer is no array, and gets the error any other wrong value gets.
local ArrayPtr = ffi.typeof("luon_array *")
function M.is_array(x)
  return type(x) == "cdata" and ffi.istype(Array, x) and not ffi.istype(ArrayPtr, x)
end

lua_registry.luon_core = M
return M
